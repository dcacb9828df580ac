/* The task table: the open tasks by id (open addressing), the FIFO of queued ones, their status written
 * through the writer, a task run again (after a failure or a quarantine) or failed for good, and the table
 * rebuilt from the buffer on resume. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "orchestrator/internal.h"
#include "util/error.h"
#include "util/log.h"

/* ---- table: open addressing on task ids, backward-shift deletion ---- */

static size_t slot_of(const lt_daemon_t *d, int64_t id) { return (size_t)lt_rng_mix((uint64_t)id, 7) & (d->tcap - 1); }

lt__task_t *lt__task_get(lt_daemon_t *d, int64_t id) {
  if (!d->tcap) return NULL;
  for (size_t i = slot_of(d, id);; i = (i + 1) & (d->tcap - 1)) {
    if (!d->tasks[i]) return NULL;
    if (d->tasks[i]->id == id) return d->tasks[i];
  }
}

int lt__task_put(lt_daemon_t *d, lt__task_t *t) {
  if ((d->tcount + 1) * 2 > d->tcap) {
    size_t cap = d->tcap ? d->tcap * 2 : 1024;
    lt__task_t **nt = calloc(cap, sizeof *nt);
    if (!nt) return lt_error_set(LT_ENOMEM, "task table: out of memory");
    lt__task_t **old = d->tasks;
    size_t oc = d->tcap;
    d->tasks = nt;
    d->tcap = cap;
    for (size_t i = 0; i < oc; i++)
      if (old[i]) {
        size_t j = slot_of(d, old[i]->id);
        while (d->tasks[j]) j = (j + 1) & (cap - 1);
        d->tasks[j] = old[i];
      }
    free(old);
  }
  size_t i = slot_of(d, t->id);
  while (d->tasks[i]) i = (i + 1) & (d->tcap - 1);
  d->tasks[i] = t;
  d->tcount++;
  return 0;
}

/* Takes a task out of the FIFO (a result arrived while it waited). */
static void queue_unlink(lt_daemon_t *d, lt__task_t *t) {
  lt__task_t *prev = NULL;
  for (int64_t id = d->qhead; id && id != t->id;) {
    prev = lt__task_get(d, id);
    id = prev ? prev->qnext : 0;
  }
  if (prev) prev->qnext = t->qnext;
  else if (d->qhead == t->id) d->qhead = t->qnext;
  if (d->qtail == t->id) d->qtail = prev ? prev->id : 0;
  t->queued = 0;
}

void lt__task_remove(lt_daemon_t *d, int64_t id) {
  size_t i = slot_of(d, id);
  while (d->tasks[i] && d->tasks[i]->id != id) i = (i + 1) & (d->tcap - 1);
  if (!d->tasks[i]) return;
  lt__task_t *t = d->tasks[i];
  if (t->queued) queue_unlink(d, t);
  cJSON_Delete(t->spec);
  free(t);
  d->tasks[i] = NULL;
  d->tcount--;
  for (size_t j = (i + 1) & (d->tcap - 1); d->tasks[j]; j = (j + 1) & (d->tcap - 1)) {
    size_t home = slot_of(d, d->tasks[j]->id);
    /* Move j back into the hole when its home does not lie in (i, j]. */
    int between = i <= j ? (home > i && home <= j) : (home > i || home <= j);
    if (!between) {
      d->tasks[i] = d->tasks[j];
      d->tasks[j] = NULL;
      i = j;
    }
  }
}

void lt__tasks_free(lt_daemon_t *d) {
  for (size_t i = 0; i < d->tcap; i++)
    if (d->tasks[i]) {
      cJSON_Delete(d->tasks[i]->spec);
      free(d->tasks[i]);
    }
  free(d->tasks);
  d->tasks = NULL;
  d->tcap = d->tcount = 0;
}

/* ---- queue ---- */

void lt__queue_push(lt_daemon_t *d, lt__task_t *t, int front) {
  t->status = LT_TASK_QUEUED;
  t->worker = -1;
  if (t->queued) return; /* still linked (e.g. adopted from a reconnecting worker, then requeued) */
  t->queued = 1;
  if (front) {
    t->qnext = d->qhead;
    d->qhead = t->id;
    if (!d->qtail) d->qtail = t->id;
  } else {
    t->qnext = 0;
    lt__task_t *tail = d->qtail ? lt__task_get(d, d->qtail) : NULL;
    if (tail) tail->qnext = t->id;
    else d->qhead = t->id;
    d->qtail = t->id;
  }
}

lt__task_t *lt__queue_pop(lt_daemon_t *d) {
  while (d->qhead) {
    lt__task_t *t = lt__task_get(d, d->qhead);
    d->qhead = t ? t->qnext : 0;
    if (!d->qhead) d->qtail = 0;
    if (!t) continue; /* cannot happen: removal unlinks (a lost link would orphan the rest) */
    t->queued = 0;
    /* A result for it is being committed: dispatching it now would write a
     * "dispatched" row after the "done" one (ingest puts it back on failure).
     * A task a reconnecting worker still runs is dispatched already. */
    if (t->status == LT_TASK_QUEUED && !t->storing) return t;
  }
  return NULL;
}

/* ---- status, retries ---- */

static void task_update_write_done(void *arg, int rc) { free(arg); }

typedef struct {
  int64_t id;
  int status, attempts;
  char worker[128];
  int64_t version;
} task_upd_t;

static int task_update_write(lt_buffer_t *b, void *arg) {
  task_upd_t *u = arg;
  return lt_buffer_task_update(b, u->id, (lt_task_status)u->status, u->attempts, u->worker[0] ? u->worker : NULL,
                               u->version);
}

void lt__task_persist(lt_daemon_t *d, const lt__task_t *t) {
  task_upd_t *u = malloc(sizeof *u);
  if (!u) return;
  *u = (task_upd_t){.id = t->id, .status = t->status, .attempts = t->attempts, .version = t->version};
  snprintf(u->worker, sizeof u->worker, "%s", t->worker >= 0 ? d->workers[t->worker].name : "");
  if (lt_writer_submit(d->writer, task_update_write, task_update_write_done, u) < 0) free(u);
}

void lt__requeue(lt_daemon_t *d, lt__task_t *t, int count_attempt, const char *why) {
  lt__task_free_slot(d, t);
  t->worker = -1;
  if (t->storing) {
    /* A result for it is being committed (e.g. resent from a spool after a
     * restart, while another worker said busy): that result decides.  Writing
     * "queued" now would land after its "done"; should the commit fail, the
     * ingest puts the task back in the queue. */
    t->status = LT_TASK_QUEUED;
    return;
  }
  if (count_attempt) t->attempts++;
  if (t->attempts >= d->max_attempts) {
    t->status = LT_TASK_FAILED;
    lt__task_persist(d, t);
    d->tasks_failed++;
    snprintf(d->last_failure, sizeof d->last_failure, "%s", why);
    lt__event(d, "task_failed", "task %lld failed after %d attempts (last: %s)", (long long)t->id, t->attempts, why);
    int eval = t->eval;
    if (!eval) d->open_train--;
    lt__task_remove(d, t->id);
    if (eval) lt__eval_task_done(d, lt_envs_index(d->envs, t->domain), 0);
    lt__trainer_notify(d); /* the last task may have been this one: flush what is left */
    lt__check_done(d);
    return;
  }
  LT_DEBUG("scheduler", "task %lld requeued: %s", (long long)t->id, why);
  lt__queue_push(d, t, 1);
  lt__task_persist(d, t);
}

void lt__task_reopen(lt_daemon_t *d, const lt_quarantined_t *q) {
  if (lt__task_get(d, q->task_id)) return; /* still open: it runs anyway */
  lt__task_t *t = calloc(1, sizeof *t);
  if (!t || !q->spec || !(t->spec = cJSON_Parse(q->spec))) {
    free(t);
    lt__event(d, "task_failed",
              "task %lld cannot run again after its trajectory was quarantined: its prompt is unreadable",
              (long long)q->task_id);
    return;
  }
  *t = (lt__task_t){.id = q->task_id,
                    .prompt_id = q->prompt_id,
                    .eval_round = -1,
                    .status = LT_TASK_QUEUED,
                    .attempts = q->attempts,
                    .worker = -1,
                    .version = -1,
                    .spec = t->spec};
  snprintf(t->domain, sizeof t->domain, "%s", q->domain);
  if (lt__task_put(d, t) < 0) {
    LT_ERROR("scheduler", "task %lld cannot run again: %s", (long long)t->id, lt_error_msg());
    cJSON_Delete(t->spec);
    free(t);
    return;
  }
  d->open_train++;
  char why[300];
  snprintf(why, sizeof why, "trajectory quarantined: %s", q->why);
  lt__requeue(d, t, 1, why);
}

/* ---- resume ---- */

typedef struct {
  lt_daemon_t *d;
  int rc;
} resume_ctx_t;

static void resume_task(const lt_task_row_t *r, void *ud) {
  resume_ctx_t *c = ud;
  lt_daemon_t *d = c->d;
  if (c->rc < 0) return;
  lt__task_t *t = calloc(1, sizeof *t);
  char *spec = lt_buffer_prompt_spec(d->buf, r->prompt_id);
  if (!t || !spec || !(t->spec = cJSON_Parse(spec))) {
    c->rc = lt_error_set(LT_ECORRUPT, "task %lld: its prompt %lld is missing or unreadable", (long long)r->id,
                         (long long)r->prompt_id);
    free(spec);
    free(t);
    return;
  }
  free(spec);
  t->id = r->id;
  t->prompt_id = r->prompt_id;
  snprintf(t->domain, sizeof t->domain, "%s", r->domain);
  t->eval = r->eval;
  t->eval_round = r->eval_round;
  t->attempts = r->attempts;
  t->worker = -1;
  t->version = r->version;
  if ((c->rc = lt__task_put(d, t)) < 0) {
    cJSON_Delete(t->spec);
    free(t);
    return;
  }
  /* A task dispatched before the restart may still come back from its
   * worker; requeueing it is safe (ingestion deduplicates). */
  lt__queue_push(d, t, 0);
  if (t->eval) d->eval_pending++;
  else d->open_train++;
}

int lt__scheduler_resume(lt_daemon_t *d) {
  d->next_task_id = lt_buffer_max_id(d->buf, "tasks");
  d->next_prompt_id = lt_buffer_max_id(d->buf, "prompts");
  for (int i = 0; i < lt_envs_count(d->envs); i++) {
    d->domain_index[i] = lt_buffer_count_prompts(d->buf, lt_envs_name(d->envs, i));
    lt_envs_noise_resume(d->envs, i, lt_buffer_noise_level(d->buf, lt_envs_name(d->envs, i)));
  }
  d->tasks_created = lt_buffer_count_train_tasks(d->buf);
  d->tasks_done_before = lt_buffer_count_tasks(d->buf, LT_TASK_DONE);
  resume_ctx_t c = {d, 0};
  int rc = lt_buffer_tasks_open(d->buf, resume_task, &c);
  if (rc == 0) rc = c.rc;
  /* An evaluation round cut short by the restart is abandoned. */
  for (size_t i = 0; rc == 0 && i < d->tcap; i++) {
    lt__task_t *t = d->tasks[i];
    if (t && t->eval) {
      t->status = LT_TASK_FAILED;
      lt__task_persist(d, t);
      d->eval_pending--;
      lt__task_remove(d, t->id);
      i--; /* the backward shift may have moved another task into this slot */
    }
  }
  return rc;
}
