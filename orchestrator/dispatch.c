/* Scheduling: new prompts and their tasks (domain choice, pass-rate oversampling), tasks sent to workers with
 * free slots (sticky sessions, per-domain ratios, TASKS batches), and task timeouts.  The table and queue they
 * take tasks from are tasks.c; evaluation rounds, eval.c. */
#include <stdlib.h>
#include <string.h>

#include "orchestrator/internal.h"
#include "train/train.h"
#include "util/error.h"
#include "util/log.h"
#include "util/time.h"

/* ---- persistence of new prompts and tasks ---- */

typedef struct {
  lt_daemon_t *d;
  int64_t prompt_id;
  int64_t copy_of; /* the prompt this one repeats as another group (pass-rate oversampling), or 0 */
  int dom;
  int64_t index; /* the domain's sample index its spec came from */
  char domain[64];
  char *spec;
  int eval;
  int history;          /* look the task's pass rate up (scheduler.pass_rate_oversample) */
  int64_t seen, passed; /* the task's history: trajectories, and those that passed (lt_buffer_task_history) */
  int extra;            /* what the history says: more groups of the same task */
  int n;
  lt_task_row_t rows[];
} create_op_t;

static int create_write(lt_buffer_t *b, void *arg) {
  create_op_t *op = arg;
  /* On the writer's thread: the buffer handle is its own.  A failed lookup leaves the task one group. */
  double pass = lt_envs_pass_threshold(op->d->envs, op->dom);
  if (op->history && lt_buffer_task_history(b, op->domain, op->spec, pass, &op->seen, &op->passed) == 0)
    op->extra =
        lt_train_oversample_groups(op->seen, op->passed, op->d->oversample_max, op->d->oversample_min_history) - 1;
  int rc = lt_buffer_prompt_insert(b, op->prompt_id, op->domain, op->spec, op->eval, op->copy_of);
  for (int i = 0; i < op->n && rc == 0; i++) rc = lt_buffer_task_insert(b, &op->rows[i]);
  return rc;
}

static int create_prompt_at(lt_daemon_t *d, int dom, int eval, int n, int64_t index, int64_t copy_of);

static void create_done(void *arg, int rc) {
  create_op_t *op = arg;
  lt_daemon_t *d = op->d;
  for (int i = 0; i < op->n; i++) {
    lt__task_t *t = lt__task_get(d, op->rows[i].id);
    if (!t) continue;
    if (rc < 0) { /* not on disk: it must not run, or its result would have no home */
      int eval = t->eval;
      if (!eval) d->open_train--, d->tasks_created--; /* made again later, or a bounded run ends short */
      else d->eval_total--;
      lt__task_remove(d, t->id);
      if (eval) lt__eval_task_done(d, -1, 0);
      continue;
    }
    lt__queue_push(d, t, t->eval);
  }
  if (rc < 0)
    LT_ERROR("scheduler", "prompt %lld not recorded (%s): retrying later", (long long)op->prompt_id, lt_error_msg());
  /* Pass-rate oversampling (seed 004 §3.3.3): a hard task is repeated as more groups, each its own baseline. */
  for (int i = 0;
       rc == 0 && i < op->extra && !d->stopping && !d->finishing && (!d->max_tasks || d->tasks_created < d->max_tasks);
       i++)
    if (create_prompt_at(d, op->dom, 0, op->n, op->index, op->prompt_id) < 0) break;
  if (op->extra > 0 && rc == 0)
    lt__event(d, "pass_rate_oversample", "prompt %lld (%s): pass rate %.3f over %lld trajectories: %d groups",
              (long long)op->prompt_id, op->domain, (double)op->passed / (double)op->seen, (long long)op->seen,
              1 + op->extra);
  free(op->spec);
  free(op);
  lt__scheduler_dispatch(d);
}

/* A new prompt of `domain` with n samples (its group): the domain's next problem, or, as a copy of prompt
 * copy_of, the problem at `index` again. */
static int create_prompt_at(lt_daemon_t *d, int dom, int eval, int n, int64_t index, int64_t copy_of) {
  const char *domain = lt_envs_name(d->envs, dom);
  cJSON *spec;
  int rc = lt_envs_sample(d->envs, domain, (uint64_t)index, eval, &spec);
  if (rc < 0) return rc;
  create_op_t *op = calloc(1, sizeof *op + sizeof(lt_task_row_t) * (size_t)n);
  char *text = cJSON_PrintUnformatted(spec);
  if (!op || !text) {
    free(op), free(text);
    cJSON_Delete(spec);
    return lt_error_set(LT_ENOMEM, "scheduler: out of memory");
  }
  if (!eval && !copy_of) d->domain_index[dom]++;
  op->d = d;
  op->prompt_id = ++d->next_prompt_id;
  op->copy_of = copy_of;
  op->dom = dom;
  op->index = index;
  op->history = !eval && !copy_of && d->oversample_max > 1;
  snprintf(op->domain, sizeof op->domain, "%s", domain);
  op->spec = text;
  op->eval = eval;
  op->n = n;
  for (int i = 0; i < n; i++) {
    lt__task_t *t = calloc(1, sizeof *t);
    if (t) t->id = d->next_task_id + 1;
    if (!t || (rc = lt__task_put(d, t)) < 0) {
      free(t);
      break; /* the tasks made so far still go to disk; the rest is dropped */
    }
    d->next_task_id++;
    t->prompt_id = op->prompt_id;
    snprintf(t->domain, sizeof t->domain, "%s", domain);
    t->eval = eval;
    t->eval_round = eval ? d->eval_round : -1;
    t->worker = -1;
    t->version = -1;
    t->spec = cJSON_Duplicate(spec, 1);
    op->rows[i] = (lt_task_row_t){.id = t->id,
                                  .prompt_id = t->prompt_id,
                                  .domain = op->domain,
                                  .eval = eval,
                                  .eval_round = t->eval_round,
                                  .status = LT_TASK_QUEUED,
                                  .version = -1};
    op->n = i + 1;
    d->tasks_created += !eval;
    if (eval) d->eval_pending++, d->eval_total++;
    else d->open_train++;
  }
  cJSON_Delete(spec);
  if (lt_writer_submit(d->writer, create_write, create_done, op) < 0) {
    create_done(op, LT_ECANCELED);
    return LT_ECANCELED;
  }
  return 0;
}

int lt__prompt_create(lt_daemon_t *d, int dom, int eval, int n) {
  /* Every evaluation round uses the same held-out problems, so rounds compare. */
  return create_prompt_at(d, dom, eval, n, eval ? d->eval_total : d->domain_index[dom], 0);
}

/* Picks a domain with probability ∝ its weight (scheduler.domain_ratios
 * overrides the environment's), deterministically in the prompt id. */
static int pick_domain(lt_daemon_t *d) {
  int n = lt_envs_count(d->envs);
  const double *w = d->domain_weight;
  double total = 0;
  for (int i = 0; i < n; i++) total += w[i];
  lt_rng_t r;
  lt_rng_seed(&r, lt_rng_mix(d->run_seed, (uint64_t)d->next_prompt_id));
  double u = lt_rng_uniform(&r) * total;
  for (int i = 0; i < n; i++) {
    if (u < w[i]) return i;
    u -= w[i];
  }
  return 0;
}

void lt__scheduler_refill(lt_daemon_t *d) {
  if (d->stopping || d->finishing || !d->accepting) return;
  int batch = d->batch;
  if (d->sync) {
    /* Batch barrier: one step's tasks at a time, released when the step before is trained. */
    if (d->open_train > 0 || d->sync_released > d->step) return;
    if (d->steps && d->step >= d->steps) return;
    d->sync_released = d->step + 1;
    int made = 0;
    while (made < batch) {
      int dom = pick_domain(d), group = lt_envs_group_size(d->envs, dom, d->group_size);
      if (lt__prompt_create(d, dom, 0, group) < 0) return;
      made += group;
    }
    return;
  }
  int target = d->open_target;
  /* Back-pressure: trajectories waiting for the learner count against the
   * depth, so generation never runs further ahead than staleness can use. */
  while (d->open_train + d->ready_pending < target && (!d->max_tasks || d->tasks_created < d->max_tasks) &&
         !(d->steps && d->step >= d->steps)) {
    int dom = pick_domain(d);
    if (lt__prompt_create(d, dom, 0, lt_envs_group_size(d->envs, dom, d->group_size)) < 0) {
      LT_ERROR("scheduler", "%s", lt_error_msg());
      return;
    }
  }
}

/* The TASK for t; it borrows t's strings and spec. */
static void task_msg(lt_daemon_t *d, const lt__task_t *t, lt_task_t *k) {
  const char *type = lt_envs_type(d->envs, t->domain);
  *k = d->task_base;
  k->task_id = (uint64_t)t->id;
  k->group_id = (uint64_t)t->prompt_id;
  k->prompt_id = t->prompt_id;
  k->domain = (char *)t->domain;
  k->env = (char *)(type ? type : "unknown");
  k->policy_version = d->version;
  k->attempt = t->attempts;
  k->seed = (int64_t)(lt_rng_mix(d->run_seed, (uint64_t)t->id) % LT_PROTO_MAX_ID);
  k->eval = t->eval;
  k->spec = t->spec;
}

static void dispatched(lt_daemon_t *d, int w, lt__task_t *t) {
  t->status = LT_TASK_DISPATCHED;
  t->worker = w;
  t->slot_free = 0;
  t->dispatched_ms = lt_time_mono_ms();
  t->version = d->version;
  d->workers[w].inflight++;
  d->workers[w].owned++;
  lt__task_persist(d, t);
}

/* Sends worker w the tasks ts[0..n): one TASKS when it announced batch in its
 * HELLO and several are ready, else a TASK each.  What a failed send (its
 * queue is full, it is gone) leaves unsent goes back to the queue's front, in
 * order, and -1 says so. */
static int send_tasks(lt_daemon_t *d, int w, lt__task_t **ts, int n) {
  int sent = 0;
  if (d->workers[w].batch && n > 1) {
    lt_task_t ks[LT_PROTO_MAX_BATCH];
    for (int i = 0; i < n; i++) task_msg(d, ts[i], &ks[i]);
    lt_msg_t m = {.type = LT_MSG_TASKS, .u.tasks = {.tasks = ks, .n = n}};
    int rc = lt__send(d, w, &m);
    if (rc == 0)
      for (; sent < n; sent++) dispatched(d, w, ts[sent]);
    else if (rc == LT_EBUSY || rc == LT_EUNREACH) goto unsent;
    /* else a batch too large to encode goes a TASK each */
  }
  for (; sent < n; sent++) {
    lt_msg_t m = {.type = LT_MSG_TASK};
    task_msg(d, ts[sent], &m.u.task);
    if (lt__send(d, w, &m) < 0) break;
    dispatched(d, w, ts[sent]);
  }
unsent:
  for (int i = n - 1; i >= sent; i--) lt__queue_push(d, ts[i], 1);
  return sent == n ? 0 : -1;
}

typedef struct {
  int w, seq;
  lt__task_t *t;
} pick_t;

static int pick_cmp(const void *a, const void *b) {
  const pick_t *x = a, *y = b;
  return x->w != y->w ? (x->w > y->w) - (x->w < y->w) : (x->seq > y->seq) - (x->seq < y->seq);
}

#define PICKS 1024

/* Sends each worker its picks[0..n) (sorted by worker), LT_PROTO_MAX_BATCH at
 * most per message.  -1: a send failed (its tasks are queued again). */
static int send_picks(lt_daemon_t *d, pick_t *picks, int n) {
  int rc = 0;
  for (int i = 0; i < n;) {
    int w = picks[i].w, m = 0;
    lt__task_t *ts[LT_PROTO_MAX_BATCH];
    while (i < n && picks[i].w == w && m < LT_PROTO_MAX_BATCH) ts[m++] = picks[i++].t;
    d->workers[w].picked -= m;
    if (send_tasks(d, w, ts, m) < 0) rc = -1;
  }
  return rc;
}

void lt__scheduler_dispatch(lt_daemon_t *d) {
  if (d->stopping || !d->accepting) return;
  if (d->dispatch_held) {
    d->dispatch_wanted = 1;
    return;
  }
  lt__scheduler_refill(d);
  /* Round-robin over workers with free slots, one task each per pass; what
   * one worker gets in a turn goes out together (send_tasks). */
  pick_t picks[PICKS];
  for (int full = 1; full && d->qhead;) {
    int n = 0;
    for (int progress = 1; progress && d->qhead && n < PICKS;) {
      progress = 0;
      int64_t now = lt_time_mono_ms();
      for (int w = 0; w < d->nworkers && d->qhead && n < PICKS; w++) {
        lt__worker_t *wk = &d->workers[w];
        if (!wk->alive || wk->inflight + wk->picked >= wk->slots || now < wk->benched_until_ms) continue;
        lt__task_t *t = lt__queue_pop(d);
        if (!t) break;
        picks[n] = (pick_t){.w = w, .seq = n, .t = t};
        n++;
        wk->picked++;
        progress = 1;
      }
    }
    qsort(picks, (size_t)n, sizeof *picks, pick_cmp);
    full = n == PICKS;
    if (send_picks(d, picks, n) < 0) return;
  }
}

void lt__scheduler_cron(lt_daemon_t *d, int64_t now) {
  int64_t timeout = d->task_timeout_ms;
  int64_t expired[256];
  int n = 0;
  /* Timeouts are seconds long: looking for them once a second, not every
   * tick, keeps a table of tens of thousands of tasks off the CPU. */
  int scan = now - d->last_timeout_scan_ms >= 1000;
  if (scan) d->last_timeout_scan_ms = now;
  for (size_t i = 0; scan && i < d->tcap && n < 256; i++) {
    lt__task_t *t = d->tasks[i];
    if (t && t->status == LT_TASK_DISPATCHED && !t->storing && now - t->dispatched_ms > timeout) expired[n++] = t->id;
  }
  for (int i = 0; i < n; i++) {
    lt__task_t *t = lt__task_get(d, expired[i]);
    if (!t) continue;
    if (t->worker >= 0) {
      lt_msg_t m = {.type = LT_MSG_ABORT, .u.abort = {.task_id = (uint64_t)t->id, .reason = "task timeout"}};
      lt__send(d, t->worker, &m);
    }
    lt__event(d, "task_timeout", "task %lld exceeded %.0f s on %s", (long long)t->id, timeout / 1000.0,
              t->worker >= 0 ? d->workers[t->worker].name : "?");
    lt__requeue(d, t, 1, "timeout");
  }
  /* Every tick, not only after a timeout: a queued task must never wait for an
   * unrelated event (a worker that fell idle while others died, a heartbeat
   * that freed capacity) to be dispatched. */
  if (d->qhead) lt__scheduler_dispatch(d);
}
