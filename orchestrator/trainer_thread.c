/* The trainer thread and its link to the loop.
 *
 * The thread owns the step driver (train/step.c) and steps it whenever the loop says there may be enough
 * eligible trajectories; each step's result and each event is posted to the loop through the thread bridge.
 * The loop publishes the weights, writes the metrics and schedules evaluations.  The loop never waits on the
 * thread; the thread never touches the loop's state. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net/bridge.h"
#include "orchestrator/internal.h"
#include "train/train.h"
#include "util/error.h"
#include "util/log.h"
#include "util/time.h"

enum { RES_STEP, RES_EVENT, RES_SKIP, RES_FAILED, RES_STOPPED };

typedef struct res {
  int kind;
  lt_train_result_t r;
  int flushed; /* RES_SKIP: nothing trainable although no more data will come */
  char event_kind[32], *detail;
  struct res *next;
} res_t;

struct lt__trainer {
  lt_daemon_t *d;
  lt_bridge_t *br;
  uv_mutex_t compute; /* held by the thread while it computes (see lt__trainer_fork_lock) */
  /* under the bridge's lock */
  int quit, wake, paused, flush;
  res_t *head, *tail;
  /* loop side */
  void (*done)(void *);
  void *done_ud;
  /* thread side */
  lt_train_t *train;
};

/* ---- posting to the loop ---- */

static void post(lt__trainer_t *l, res_t *r) {
  lt_bridge_lock(l->br);
  if (l->tail) l->tail->next = r;
  else l->head = r;
  l->tail = r;
  lt_bridge_unlock(l->br);
  lt_bridge_notify(l->br);
}

/* The driver's events, from the trainer thread. */
static void post_event(void *ud, const char *kind, const char *detail) {
  lt__trainer_t *l = ud;
  res_t *r = calloc(1, sizeof *r);
  if (!r || !(r->detail = strdup(detail))) {
    free(r);
    LT_WARN("learner", "%s: %s", kind, detail);
    return;
  }
  r->kind = RES_EVENT;
  snprintf(r->event_kind, sizeof r->event_kind, "%s", kind);
  post(l, r);
}

/* 1: trained a step, 0: nothing to do yet, <0: error. */
static int try_step(lt__trainer_t *l, int flush) {
  res_t *r = calloc(1, sizeof *r);
  if (!r) return lt_error_set(LT_ENOMEM, "learner: out of memory");
  int rc = lt_train_step(l->train, flush, &r->r);
  if (rc == 1) r->kind = RES_STEP;
  else if (rc == 0 && (flush || r->r.marked_stale || r->r.filtered || r->r.quarantined))
    r->kind = RES_SKIP, r->flushed = flush;
  else {
    free(r);
    return rc;
  }
  post(l, r);
  return rc;
}

static void trainer_run(lt_bridge_t *br, void *arg) {
  lt__trainer_t *l = arg;
  for (;;) {
    lt_bridge_lock(br);
    while (!l->quit && (!l->wake || l->paused)) {
      lt_bridge_wait(br, 200);
      if (lt_train_ranks() > 1) break; /* the other ranks hear from rank 0 now and then (below) */
    }
    int quit = l->quit, flush = l->flush, wake = l->wake && !l->paused;
    l->wake = 0;
    l->flush = 0;
    lt_bridge_unlock(br);
    if (quit) break;
    if (!wake) {
      if (lt_train_keepalive(l->train) < 0) break;
      continue;
    }
    if (lt_train_done(l->train)) continue;
    uv_mutex_lock(&l->compute);
    int rc = try_step(l, flush);
    uv_mutex_unlock(&l->compute);
    if (rc < 0) {
      res_t *r = calloc(1, sizeof *r);
      if (r && (r->detail = strdup(lt_error_msg()))) {
        r->kind = RES_FAILED;
        post(l, r);
      } else {
        free(r);
      }
      break;
    }
    if (rc == 1) {
      lt_bridge_lock(br);
      l->wake = 1; /* more may be ready already */
      lt_bridge_unlock(br);
    }
  }
  uv_mutex_lock(&l->compute);
  lt_train_finish(l->train); /* the final checkpoint, the other ranks stopped */
  uv_mutex_unlock(&l->compute);
  res_t *r = calloc(1, sizeof *r);
  if (r) r->kind = RES_STOPPED;
  if (r) post(l, r);
}

/* ---- loop side ---- */

static void put_metric(void *ud, const char *name, double v) { lt__metric(ud, name, v); }

static void emit_step(lt_daemon_t *d, const lt_train_result_t *r) {
  d->step = r->step;
  lt__publish_weights(d, r->version, r->dir, r->sha);
  lt_train_result_metrics(r, put_metric, d);
  lt__outcomes_report(d, 1);
  double el = (lt_time_mono_ms() - d->started_ms) / 1000.0;
  double gen = r->gen_tokens, span = r->step_s + r->wait_s;
  if (el > 0) lt__metric(d, "throughput/trajectories_per_s", d->trajs_in / el);
  d->last_reward = r->reward_mean;
  d->last_tokens_per_s = span > 0 ? gen / span : 0;
  lt__eval_after_step(d);
}

/* A quarantined trajectory's task runs again (the learner has queued it in the buffer already). */
static void reopen(lt_daemon_t *d, const lt_train_result_t *r) {
  for (int i = 0; r->requeue && i < r->quarantined; i++) lt__task_reopen(d, &r->requeue[i]);
}

static void on_closed(void *arg) {
  lt__trainer_t *l = arg;
  void (*done)(void *) = l->done;
  void *ud = l->done_ud;
  uv_mutex_destroy(&l->compute);
  lt_train_close(l->train);
  free(l);
  if (done) done(ud);
}

static void trainer_on_notify(void *arg) {
  lt__trainer_t *l = arg;
  lt_daemon_t *d = l->d;
  lt_bridge_lock(l->br);
  res_t *r = l->head;
  l->head = l->tail = NULL;
  lt_bridge_unlock(l->br);
  int stopped = 0, stepped = 0;
  while (r) {
    res_t *next = r->next;
    switch (r->kind) {
    case RES_STEP:
      d->ready_pending -= r->r.st.trajectories + r->r.marked_stale + r->r.filtered + r->r.quarantined;
      reopen(d, &r->r);
      emit_step(d, &r->r);
      stepped = 1;
      break;
    case RES_EVENT: lt__event(d, r->event_kind, "%s", r->detail); break;
    case RES_SKIP:
      d->ready_pending -= r->r.marked_stale + r->r.filtered + r->r.quarantined;
      reopen(d, &r->r);
      /* Sync mode: the released batch was dropped entirely (filtered or stale);
       * release another.  A flush that found nothing at all (the learner woke
       * before any task existed) releases nothing: it used to double every batch. */
      if (r->flushed && d->sync && d->sync_released > d->step && r->r.marked_stale + r->r.filtered > 0)
        d->sync_released = d->step;
      break;
    case RES_FAILED:
      LT_ERROR("learner", "%s", r->detail);
      lt__event(d, "learner_failed", "%s", r->detail);
      lt__finish(d, LT_EXIT_FAIL);
      break;
    case RES_STOPPED: stopped = 1; break;
    }
    lt_train_result_free(&r->r);
    free(r->detail);
    free(r);
    r = next;
  }
  lt__scheduler_refill(d);
  lt__scheduler_dispatch(d);
  /* A flush step takes one batch: when nothing more will come, what it left
   * needs another (the flag it consumed would otherwise be lost with no result
   * left to raise it again, and the run would never end). */
  if (stepped && d->ready_pending > 0) lt__trainer_notify(d);
  lt__check_done(d);
  if (stopped) {
    d->trainer = NULL;
    lt_bridge_close(l->br, on_closed, l);
  }
}

int lt__trainer_start(lt_daemon_t *d) {
  lt__trainer_t *l = calloc(1, sizeof *l);
  if (!l) return lt_error_set(LT_ENOMEM, "learner: out of memory");
  l->d = d;
  lt_train_opts_t o = {.cfg = d->cfg,
                       .run_dir = d->run_dir,
                       .weights_dir = d->weights_dir,
                       .version = d->version,
                       .step = d->step,
                       .steps = d->steps,
                       .group_size = d->group_size,
                       .sync = d->sync,
                       .resume = d->o.resume,
                       .event = post_event,
                       .ud = l};
  int rc = lt_train_open(&o, &l->train);
  if (rc == 0 && d->o.resume) {
    int64_t version;
    const char *dir, *sha;
    lt_train_position(l->train, &d->step, &version, &dir, &sha);
    if (version != d->version) lt__weights_published(d, version, dir, sha);
  }
  if (rc == 0 && uv_mutex_init(&l->compute) != 0) rc = lt_error_set(LT_ESYS, "learner: cannot make a mutex");
  if (rc < 0) {
    lt_train_close(l->train);
    free(l);
    return lt_error_wrap(rc, "learner");
  }
  /* Before the thread starts: from then on the driver is the thread's alone. */
  d->ready_pending = lt_train_ready(l->train);
  if ((rc = lt_bridge_start(&d->loop, trainer_run, trainer_on_notify, l, "learner", &l->br)) < 0) {
    uv_mutex_destroy(&l->compute);
    lt_train_close(l->train);
    free(l);
    return rc;
  }
  d->trainer = l;
  lt__trainer_notify(d);
  return 0;
}

void lt__trainer_notify(lt_daemon_t *d) {
  lt__trainer_t *l = d->trainer;
  if (!l) return;
  /* Nothing more will come for this step (sync barrier met, or tasks exhausted):
   * train on what there is. */
  int flush = d->open_train == 0 && (d->sync || (d->max_tasks > 0 && d->tasks_created >= d->max_tasks));
  lt_bridge_lock(l->br);
  l->wake = 1;
  l->flush |= flush;
  lt_bridge_signal(l->br);
  lt_bridge_unlock(l->br);
}

void lt__trainer_pause(lt_daemon_t *d, int on) {
  lt__trainer_t *l = d->trainer;
  if (!l) return;
  lt_bridge_lock(l->br);
  l->paused = on;
  l->wake = 1;
  lt_bridge_signal(l->br);
  lt_bridge_unlock(l->br);
}

void lt__trainer_stop(lt_daemon_t *d, void (*done)(void *), void *ud) {
  lt__trainer_t *l = d->trainer;
  if (!l) {
    done(ud);
    return;
  }
  l->done = done;
  l->done_ud = ud;
  lt_bridge_lock(l->br);
  l->quit = 1;
  lt_bridge_signal(l->br);
  lt_bridge_unlock(l->br);
}

int lt__trainer_fork_lock(lt_daemon_t *d) { return !d->trainer || uv_mutex_trylock(&d->trainer->compute) == 0; }

void lt__trainer_fork_unlock(lt_daemon_t *d) {
  if (d->trainer) uv_mutex_unlock(&d->trainer->compute);
}
