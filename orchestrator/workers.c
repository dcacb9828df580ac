/* The worker registry: HELLO/WELCOME, heartbeats both ways, liveness. */
#include <stdlib.h>
#include <string.h>

#include "orchestrator/internal.h"
#include "util/error.h"
#include "util/log.h"
#include "util/time.h"

int lt__worker_find(lt_daemon_t *d, const void *rid, size_t len) {
  for (int i = 0; i < d->nworkers; i++)
    if (d->workers[i].rid_len == len && memcmp(d->workers[i].rid, rid, len) == 0) return i;
  return -1;
}

int lt__send_to(lt_daemon_t *d, const void *rid, size_t len, lt_msg_t *m) {
  m->id = ++d->seq;
  int rc = lt_zsock_send_msg(d->z, rid, len, m);
  if (rc < 0 && rc != LT_EUNREACH) LT_WARN("daemon", "send %s: %s", lt_msg_type_name(m->type), lt_error_msg());
  return rc;
}

int lt__send(lt_daemon_t *d, int w, lt_msg_t *m) { return lt__send_to(d, d->workers[w].rid, d->workers[w].rid_len, m); }

void lt__broadcast(lt_daemon_t *d, lt_msg_t *m) {
  for (int i = 0; i < d->nworkers; i++)
    if (d->workers[i].alive) lt__send(d, i, m);
}

/* The config sections a worker needs, as WELCOME.settings. */
static cJSON *settings(lt_daemon_t *d) {
  static const char *sections[] = {"run", "rollout", "envs", "rewards", "sandbox", "workers"};
  cJSON *s = cJSON_CreateObject();
  for (size_t i = 0; s && i < sizeof sections / sizeof sections[0]; i++) {
    const cJSON *v = lt_config_get(d->cfg, sections[i]);
    if (v) cJSON_AddItemToObject(s, sections[i], cJSON_Duplicate(v, 1));
  }
  return s;
}

typedef struct {
  char name[128], host[256], backend[32];
  int slots;
} seen_op_t;

static int seen_write(lt_buffer_t *b, void *arg) {
  seen_op_t *s = arg;
  return lt_buffer_worker_seen(b, s->name, s->host, s->slots, s->backend, lt_time_wall_ms());
}

static void seen_done(void *arg, int rc) { free(arg); }

/* workers.last_ms in wall time: `longtail stats` tells live workers by it. */
static void persist_seen(lt_daemon_t *d, const lt__worker_t *wk) {
  seen_op_t *s = calloc(1, sizeof *s);
  if (!s) return;
  snprintf(s->name, sizeof s->name, "%s", wk->name);
  snprintf(s->host, sizeof s->host, "%s", wk->host);
  snprintf(s->backend, sizeof s->backend, "%s", wk->backend);
  s->slots = wk->slots;
  if (lt_writer_submit(d->writer, seen_write, seen_done, s) < 0) free(s);
}

void lt__on_hello(lt_daemon_t *d, const void *rid, size_t len, lt_hello_t *h) {
  if (len > sizeof d->workers[0].rid) return;
  int w = lt__worker_find(d, rid, len);
  if (w < 0) {
    if (d->nworkers == d->capworkers) {
      int cap = d->capworkers ? 2 * d->capworkers : 16;
      lt__worker_t *nw = realloc(d->workers, sizeof *nw * (size_t)cap);
      if (!nw) return;
      d->workers = nw;
      d->capworkers = cap;
    }
    w = d->nworkers++;
    memset(&d->workers[w], 0, sizeof d->workers[w]);
    memcpy(d->workers[w].rid, rid, len);
    d->workers[w].rid_len = len;
  } else if (d->workers[w].inflight) {
    /* The same worker again (it reconnected): what we thought it was running
     * either comes back as TRAJ or is gone with its old socket, unless its
     * HELLO says a session still runs it (then it keeps it, attempt and all:
     * a loaded daemon that fell silent for a while must not fail tasks).  A
     * task is charged an attempt only when its process is another one (the
     * old one died on it); the same process lost it in transit, which a
     * daemon restart does to every task sent before the HELLO's answer. */
    const lt__worker_t *old = &d->workers[w];
    int same = h->pid > 0 && old->pid == h->pid && !strncmp(old->host, h->host, sizeof old->host - 1);
    lt__worker_requeue_all(d, w, !same, "worker reconnected", h->running, h->nrunning);
  }
  lt__worker_t *wk = &d->workers[w];
  int was_alive = wk->alive;
  snprintf(wk->name, sizeof wk->name, "%s", h->name);
  snprintf(wk->backend, sizeof wk->backend, "%s", h->backend);
  wk->slots = h->slots;
  wk->pid = h->pid;
  wk->batch = h->batch;
  wk->alive = 1;
  wk->inflight = wk->owned = 0;
  wk->last_seen_ms = lt_time_mono_ms();
  wk->policy_version = h->policy_version;
  wk->lag_reported = -1;
  /* Sessions it still runs (it outlived a daemon restart): a task of ours that
   * waits in the queue is simply dispatched to it; any other session would
   * hold a slot we cannot account for, so it is aborted. */
  for (int i = 0; i < h->nrunning; i++) {
    lt__task_t *t = lt__task_get(d, (int64_t)h->running[i]);
    if (t && t->status == LT_TASK_QUEUED && !t->storing) {
      t->status = LT_TASK_DISPATCHED;
      t->worker = w;
      t->slot_free = 0;
      t->dispatched_ms = lt_time_mono_ms();
      wk->inflight++;
      wk->owned++;
    } else if (t && t->status == LT_TASK_DISPATCHED && !t->slot_free &&
               t->worker == w) { /* kept across the reconnect */
      wk->inflight++;
      wk->owned++;
    } else if (!t || t->worker != w) {
      lt_msg_t ab = {.type = LT_MSG_ABORT, .u.abort = {.task_id = h->running[i], .reason = "not this worker's task"}};
      lt__send(d, w, &ab);
    }
  }
  snprintf(wk->host, sizeof wk->host, "%s", h->host); /* the weights' location depends on it */
  char url[1024];
  const char *loc = lt__weights_location(d, w, url, sizeof url);
  lt_msg_t m = {.type = LT_MSG_WELCOME};
  m.u.welcome = (lt_welcome_t){.worker_id = wk->name,
                               .run = (char *)lt_config_str(d->cfg, "run.name"),
                               .heartbeat_ms = d->hb_ms,
                               .liveness = d->liveness,
                               .policy_version = d->version,
                               .weights_location = (char *)loc,
                               .settings = settings(d),
                               .model = d->model_info,
                               .batch = wk->batch,
                               .weights_mirrors = loc != d->weights_dir ? d->mirrors : NULL};
  memcpy(m.u.welcome.sha256, d->weights_sha, sizeof d->weights_sha);
  lt__send(d, w, &m);
  cJSON_Delete(m.u.welcome.settings);
  persist_seen(d, wk);
  if (!was_alive) lt__event(d, "worker_up", "%s (%s, %d slots, %d pending)", wk->name, h->host, h->slots, h->npending);
  /* Workers that already run the current weights need no WEIGHTS; others get it after WELCOME. */
  if (h->policy_version >= 0 && h->policy_version < d->version) {
    lt_msg_t wm;
    lt__weights_msg(d, w, &wm, url, sizeof url);
    lt__send(d, w, &wm);
  }
  lt__scheduler_dispatch(d);
}

void lt__task_free_slot(lt_daemon_t *d, lt__task_t *t) {
  if (t->worker >= 0 && !t->slot_free) {
    lt__worker_t *wk = &d->workers[t->worker];
    if (wk->inflight > 0) wk->inflight--;
    if (wk->owned > 0) wk->owned--;
  }
  t->slot_free = 1;
}

/* A heartbeat's count wins when it says more (sessions we do not know of hold
 * slots); our own count, kept as tasks come and go, when it says less.  No
 * scan of the task table: with hundreds of workers beating every second that
 * scan was most of the daemon's CPU. */
void lt__worker_sync_inflight(lt_daemon_t *d, int w, int reported) {
  lt__worker_t *wk = &d->workers[w];
  int was = wk->inflight;
  wk->inflight = reported > wk->owned ? reported : wk->owned;
  if (wk->inflight < was) lt__scheduler_dispatch(d);
}

static int runs_on(const lt__task_t *t, int w) { return t && t->status == LT_TASK_DISPATCHED && t->worker == w; }

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

int lt__worker_requeue_all(lt_daemon_t *d, int w, int count_attempt, const char *why, uint64_t *keep, int nkeep) {
  if (nkeep > 0) qsort(keep, (size_t)nkeep, sizeof *keep, cmp_u64);
  /* Ids first: a requeue can remove a task (out of attempts) and shift the
   * table, and rescanning after each one cost O(table) per task. */
  size_t n = 0;
  for (size_t i = 0; i < d->tcap; i++) n += runs_on(d->tasks[i], w);
  int64_t *ids = n ? malloc(sizeof *ids * n) : NULL;
  int done = 0;
  if (n && !ids) { /* out of memory: one at a time, rescanning */
    for (size_t i = 0; i < d->tcap; i++)
      if (runs_on(d->tasks[i], w)) {
        lt__requeue(d, d->tasks[i], count_attempt, why);
        done++;
        i = (size_t)-1;
      }
  } else {
    size_t k = 0;
    for (size_t i = 0; i < d->tcap && k < n; i++)
      if (runs_on(d->tasks[i], w)) ids[k++] = d->tasks[i]->id;
    for (size_t i = 0; i < k; i++) {
      lt__task_t *t = lt__task_get(d, ids[i]);
      uint64_t id = (uint64_t)ids[i];
      if (nkeep > 0 && bsearch(&id, keep, (size_t)nkeep, sizeof *keep, cmp_u64)) continue;
      if (runs_on(t, w)) lt__requeue(d, t, count_attempt, why), done++;
    }
  }
  free(ids);
  d->workers[w].inflight = d->workers[w].owned = 0;
  return done;
}

void lt__workers_cron(lt_daemon_t *d, int64_t now) {
  if (now - d->last_beat_ms >= d->hb_ms) {
    d->last_beat_ms = now;
    lt_msg_t m = {.type = LT_MSG_HEARTBEAT, .u.heartbeat = {.t_ms = lt_time_wall_ms(), .policy_version = d->version}};
    lt__broadcast(d, &m);
  }
  if (now - d->last_persist_ms >= 5000) {
    d->last_persist_ms = now;
    for (int w = 0; w < d->nworkers; w++)
      if (d->workers[w].alive) persist_seen(d, &d->workers[w]);
  }
  int64_t dead_after = (int64_t)d->hb_ms * d->liveness;
  for (int w = 0; w < d->nworkers; w++) {
    lt__worker_t *wk = &d->workers[w];
    if (!wk->alive || now - wk->last_seen_ms <= dead_after) continue;
    wk->alive = 0;
    int requeued = lt__worker_requeue_all(d, w, 1, "worker died", NULL, 0);
    lt__event(d, "worker_dead", "%s silent for %lld ms; %d tasks requeued", wk->name,
              (long long)(now - wk->last_seen_ms), requeued);
    /* The survivors may be idle: nothing else would hand them the requeued tasks. */
    lt__scheduler_dispatch(d);
  }
}
