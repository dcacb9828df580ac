/* Trajectory ingestion: checks against the task, commits through the writer,
 * ACKs only after the commit, deduplicates resent trajectories. */
#include <stdlib.h>
#include <string.h>

#include "orchestrator/internal.h"
#include "util/error.h"
#include "util/log.h"
#include "util/time.h"

/* ACKs for one peer, held until the loop's turn ends. */
typedef struct lt__acks {
  uint8_t rid[256];
  size_t rid_len;
  uint64_t *ids;
  uint8_t *dups;
  int n, cap;
} lt__acks_t;

typedef struct {
  lt_daemon_t *d;
  uint8_t rid[256];
  size_t rid_len;
  lt_traj_t t;
  lt_traj_meta_t meta;
  char worker[128];
  int known;  /* the task is open in memory */
  int masked; /* a timeout kept out of the losses (rollout.on_timeout mask) */
  int duplicate;
  int missing; /* unknown task (not in this run) */
} ingest_op_t;

static int ingest_write(lt_buffer_t *b, void *arg) {
  ingest_op_t *op = arg;
  if (!op->known && !lt_buffer_task_exists(b, (int64_t)op->t.task_id)) {
    op->missing = 1;
    return 0;
  }
  int rc = lt_buffer_traj_insert(b, &op->t, &op->meta, &op->duplicate);
  /* Also on a duplicate: the task may have been dispatched again since its
   * result was stored, and that row must not stay open. */
  if (rc == 0)
    rc = lt_buffer_task_update(b, (int64_t)op->t.task_id, LT_TASK_DONE, -1, op->worker, op->meta.version_min);
  if (rc == 0 && op->duplicate) rc = lt_buffer_counter_add(b, "duplicates_rejected", 1);
  return rc;
}

static void send_ack(lt_daemon_t *d, const void *rid, size_t len, uint64_t *ids, uint8_t *dups, int n) {
  lt_msg_t m = {.type = LT_MSG_ACK, .u.ack = {.task_ids = ids, .duplicate = dups, .n = n}};
  lt__send_to(d, rid, len, &m);
}

/* Held until the loop's turn ends (redis' before-sleep): one ACK per worker
 * per turn instead of one per trajectory.  Only committed results get here. */
static void ack(lt_daemon_t *d, const void *rid, size_t len, uint64_t task_id, int dup) {
  uint8_t dupb = (uint8_t)dup;
  lt__acks_t *a = NULL;
  for (int i = 0; i < d->nacks && !a; i++)
    if (d->acks[i].rid_len == len && !memcmp(d->acks[i].rid, rid, len)) a = &d->acks[i];
  if (!a) {
    lt__acks_t *na = realloc(d->acks, sizeof *na * (size_t)(d->nacks + 1));
    if (!na) goto now;
    d->acks = na;
    a = &d->acks[d->nacks++];
    *a = (lt__acks_t){.rid_len = len};
    memcpy(a->rid, rid, len);
  }
  if (a->n == a->cap) {
    int cap = a->cap ? 2 * a->cap : 64;
    uint64_t *ids = realloc(a->ids, sizeof *ids * (size_t)cap);
    if (ids) a->ids = ids;
    uint8_t *dups = ids ? realloc(a->dups, (size_t)cap) : NULL;
    if (!dups) goto now;
    a->dups = dups;
    a->cap = cap;
  }
  a->ids[a->n] = task_id;
  a->dups[a->n++] = dupb;
  if (a->n >= LT_PROTO_MAX_IDS) {
    send_ack(d, a->rid, a->rid_len, a->ids, a->dups, a->n);
    a->n = 0;
  }
  return;
now: /* out of memory: unbatched */
  send_ack(d, rid, len, &task_id, &dupb, 1);
}

void lt__acks_flush(lt_daemon_t *d, int release) {
  for (int i = 0; i < d->nacks;) {
    lt__acks_t *a = &d->acks[i];
    int idle = a->n == 0;
    if (a->n && d->z) send_ack(d, a->rid, a->rid_len, a->ids, a->dups, a->n);
    a->n = 0;
    /* A peer with nothing this turn loses its entry: entries stay as many as
     * the peers active now, not every routing id a run has seen. */
    if (release || idle) {
      free(a->ids), free(a->dups);
      *a = d->acks[--d->nacks];
    } else {
      i++;
    }
  }
  if (release) {
    free(d->acks);
    d->acks = NULL;
    d->nacks = 0;
  }
}

/* A failed episode: counted (rollout/failed/<status>) and said (an episode_failed event), at most once per 10 s with
 * how many more failed since. */
static void episode_failed(lt_daemon_t *d, const lt_traj_t *t) {
  d->failed[t->status]++;
  snprintf(d->last_failure, sizeof d->last_failure, "%s", t->error && t->error[0] ? t->error : t->reason);
  if (d->failed_said_ms && lt_time_mono_ms() - d->failed_said_ms < 10000 && ++d->failed_unsaid) return;
  char more[64] = "";
  if (d->failed_unsaid)
    snprintf(more, sizeof more, " (and %lld more since the last such line)", (long long)d->failed_unsaid);
  lt__event(d, "episode_failed", "task %llu (%s) failed: %s: %.600s%s", (unsigned long long)t->task_id, t->domain,
            lt_traj_status_name(t->status), d->last_failure, more);
  d->failed_said_ms = lt_time_mono_ms(), d->failed_unsaid = 0;
}

static void task_finished(lt_daemon_t *d, lt__task_t *task, const lt_traj_t *t) {
  lt__task_free_slot(d, task);
  int eval = task->eval, dom = lt_envs_index(d->envs, task->domain);
  int ok = t->status == LT_TRAJ_OK && lt__eval_passed(d, dom, t);
  double level, gap;
  if (!eval) {
    d->open_train--;
    d->tasks_done++;
    if (t->status == LT_TRAJ_OK) {
      d->reward_sum += t->reward;
      d->reward_n++;
      if (lt_envs_noise_record(d->envs, dom, task->spec, ok, &level, &gap))
        lt__event(d, "noise_level", "%s: level %.3f (clean − noisy success %.3f ≤ max_gap)", task->domain, level, gap);
    }
  }
  lt__task_remove(d, task->id);
  if (eval) lt__eval_task_done(d, dom, ok);
}

static void ingest_done(void *arg, int rc) {
  ingest_op_t *op = arg;
  lt_daemon_t *d = op->d;
  uint64_t id = op->t.task_id;
  lt__task_t *open_task = op->known ? lt__task_get(d, (int64_t)id) : NULL;
  if (open_task) open_task->storing--;
  if (rc < 0) {
    /* Not on disk: no ACK, so the worker keeps it and sends it again.  A task
     * skipped by the queue while this was committing goes back to it. */
    if (open_task && !open_task->storing && open_task->status == LT_TASK_QUEUED && !open_task->queued)
      lt__queue_push(d, open_task, 1);
    if (rc == LT_ENOSPC && d->accepting) {
      d->accepting = 0;
      lt__event(d, "disk_full", "%s: %s — not accepting trajectories until space returns", lt_buffer_path(d->buf),
                lt_error_msg());
      LT_ERROR("daemon", "disk full under %s: trajectories are kept by the workers until space returns", d->run_dir);
    }
  } else if (op->missing) {
    lt_msg_t m = {.type = LT_MSG_ERROR,
                  .u.error = {.code = LT_ENOENT, .message = "task unknown to this run", .ref = id}};
    lt__send_to(d, op->rid, op->rid_len, &m);
  } else {
    ack(d, op->rid, op->rid_len, id, op->duplicate);
    if (op->duplicate) {
      d->dups++;
      /* Its result is already stored: a task still open in memory is done. */
      if (open_task) task_finished(d, open_task, &op->t);
    } else {
      d->trajs_in++;
      d->timeouts_masked += op->masked;
      d->trainable += op->meta.status == LT_SAMPLE_READY;
      if (op->t.status != LT_TRAJ_OK) episode_failed(d, &op->t);
      int w = lt__worker_find(d, op->rid, op->rid_len);
      if (w >= 0) d->workers[w].refusals = 0; /* a good result ends a run of refusals */
      lt__task_t *task = open_task;
      if (task) {
        /* A late result of a task already handed to another worker still counts. */
        if (task->status == LT_TASK_DISPATCHED && task->worker >= 0 &&
            (op->rid_len != d->workers[task->worker].rid_len ||
             memcmp(op->rid, d->workers[task->worker].rid, op->rid_len))) {
          lt_msg_t m = {.type = LT_MSG_ABORT,
                        .u.abort = {.task_id = id, .reason = "result arrived from another worker"}};
          lt__send(d, task->worker, &m);
        }
        task_finished(d, task, &op->t);
      }
      if (op->meta.status == LT_SAMPLE_READY && d->trainer) d->ready_pending++;
      /* Also after a failed one: the last task to end may leave nothing new to
       * train on yet make the learner flush what remains. */
      if (d->trainer) lt__trainer_notify(d);
    }
  }
  lt_traj_free(&op->t);
  free(op);
  lt__scheduler_dispatch(d);
  lt__check_done(d);
}

void lt__traj_refuse(lt_daemon_t *d, const void *rid, size_t len, uint64_t msg_id, uint64_t task_id, int code,
                     const char *why) {
  d->malformed++;
  d->refused++;
  int w = lt__worker_find(d, rid, len);
  LT_WARN("daemon", "refused a trajectory for task %llu from %s: %s", (unsigned long long)task_id,
          w >= 0 ? d->workers[w].name : "an unknown peer", why);
  lt_msg_t m = {.type = LT_MSG_ERROR,
                .u.error = {.code = code, .message = (char *)why, .ref = msg_id, .task_id = task_id}};
  lt__send_to(d, rid, len, &m);
  /* A worker whose results are refused gets no task for a while (0.5 s,
   * doubling to 60 s while it keeps failing), so the honest ones take the
   * requeued task instead of the fastest, faulty one taking it forever. */
  if (w >= 0) {
    lt__worker_t *wk = &d->workers[w];
    int64_t pause = (int64_t)500 << (wk->refusals < 7 ? wk->refusals : 7);
    wk->refusals++;
    wk->benched_until_ms = lt_time_mono_ms() + (pause < 60000 ? pause : 60000);
  }
  /* Its task runs again now, not after task_timeout_s; a refusal is not held
   * against the task (another worker may well complete it). */
  lt__task_t *task = task_id ? lt__task_get(d, (int64_t)task_id) : NULL;
  if (task && task->status == LT_TASK_DISPATCHED && w >= 0 && w == task->worker) {
    lt__requeue(d, task, 0, why);
    lt__scheduler_dispatch(d);
  }
}

void lt__on_traj(lt_daemon_t *d, const void *rid, size_t len, uint64_t msg_id, lt_traj_t *t) {
  int w = lt__worker_find(d, rid, len);
  if (len > 256) return;
  lt_traj_limits_t lim = {.vocab = d->vocab, .max_tokens = d->max_context, .max_version = d->version};
  int dom = lt_envs_index(d->envs, t->domain);
  if (dom >= 0 && d->reward_bounded[dom])
    lim.reward_bounded = 1, lim.reward_lo = d->reward_range[dom][0], lim.reward_hi = d->reward_range[dom][1];
  int rc = lt_traj_check(t, &lim);
  if (rc < 0) {
    lt__traj_refuse(d, rid, len, msg_id, t->task_id, rc, lt_error_msg());
    return;
  }
  /* A timeout is the policy's failure whatever the worker claimed: the lowest reward its domain gives, never
   * bootstrapped (docs/losses.md, "How an episode ends"). */
  int timeout = lt_traj_timeout_fail(t, lim.reward_bounded ? lim.reward_lo : 0);
  if (timeout < 0) return; /* out of memory: no ACK, the worker sends it again */
  lt__task_t *task = lt__task_get(d, (int64_t)t->task_id);
  if (task && ((int64_t)t->group_id != task->prompt_id || t->eval != task->eval || strcmp(t->domain, task->domain))) {
    lt__traj_refuse(d, rid, len, msg_id, t->task_id, LT_ENOENT, "trajectory does not match its task");
    return;
  }
  if (task && (t->status == LT_TRAJ_ABORTED || t->status == LT_TRAJ_ERROR)) {
    /* Nothing to keep: the task runs again (a worker failure counts as an attempt). */
    if (t->status == LT_TRAJ_ERROR) episode_failed(d, t);
    if (task->status == LT_TASK_DISPATCHED && w == task->worker)
      lt__requeue(d, task, t->status == LT_TRAJ_ERROR, t->status == LT_TRAJ_ERROR ? t->error : "aborted");
    ack(d, rid, len, t->task_id, 0);
    lt__scheduler_dispatch(d);
    return;
  }
  if (!d->accepting) return; /* disk full: the worker keeps it */
  ingest_op_t *op = calloc(1, sizeof *op);
  if (!op) return;
  op->d = d;
  memcpy(op->rid, rid, len);
  op->rid_len = len;
  op->t = *t;
  memset(t, 0, sizeof *t); /* the op owns the arrays now */
  op->known = task != NULL;
  op->masked = timeout && d->mask_timeouts && !op->t.eval;
  if (task) task->storing++;
  if (task && task->status == LT_TASK_DISPATCHED && w == task->worker) {
    double o = (double)(lt_time_mono_ms() - task->dispatched_ms) - (op->t.gen_ms + op->t.env_ms + op->t.reward_ms);
    d->overhead_ms[d->noverhead++ % 4096] = (float)(o > 0 ? o : 0);
  }
  snprintf(op->worker, sizeof op->worker, "%s", w >= 0 ? d->workers[w].name : "?");
  int64_t vmin, vmax;
  lt_traj_versions(&op->t, &vmin, &vmax);
  op->meta = (lt_traj_meta_t){.worker = op->worker,
                              .version_min = vmin,
                              .version_max = vmax,
                              .truncated = op->t.finish == LT_FINISH_TRUNCATED,
                              .eval_round = task ? task->eval_round : -1,
                              .time_ms = lt_time_wall_ms(),
                              .status = op->t.eval                   ? LT_SAMPLE_EVAL
                                        : op->masked                 ? LT_SAMPLE_MASKED
                                        : op->t.status == LT_TRAJ_OK ? LT_SAMPLE_READY
                                                                     : LT_SAMPLE_FAILED};
  if (lt_writer_submit(d->writer, ingest_write, ingest_done, op) < 0) {
    if (task) task->storing--;
    lt_traj_free(&op->t);
    free(op);
    return;
  }
  /* The worker's session is over: its slot takes the next task while this
   * one commits (the commit is off the slot's critical path; open tasks still
   * bound how far ahead the workers run). */
  if (task && task->status == LT_TASK_DISPATCHED && w == task->worker) {
    lt__task_free_slot(d, task);
    lt__scheduler_dispatch(d);
  }
}
