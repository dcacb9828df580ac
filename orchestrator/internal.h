/* The daemon's internals, shared by the files of orchestrator/ (nothing outside orchestrator/ includes this):
 * its state and the functions each file offers the others. */
#ifndef LT_ORCHESTRATOR_INTERNAL_H
#define LT_ORCHESTRATOR_INTERNAL_H

#include <stdint.h>
#include <uv.h>

#include "envs/env.h"
#include "net/curve.h"
#include "net/zsock.h"
#include "orchestrator/daemon.h"
#include "orchestrator/writer.h"
#include "util/rng.h"

typedef struct lt_daemon lt_daemon_t;

typedef struct {
  int64_t id, prompt_id;
  char domain[64];
  int eval;
  int64_t eval_round;
  int status; /* lt_task_status */
  int attempts;
  int worker; /* index in the registry, -1 */
  int64_t dispatched_ms;
  int64_t version; /* policy version at dispatch */
  int queued;      /* in the FIFO */
  int storing;     /* results being committed: never dispatched meanwhile */
  int slot_free;   /* its worker's slot was given back (its result arrived) */
  int64_t qnext;   /* queue link (task id, 0 = end) */
  cJSON *spec;     /* the prompt's problem */
} lt__task_t;

typedef struct {
  char name[128];
  uint8_t rid[256]; /* ZeroMQ routing id */
  size_t rid_len;
  int slots, inflight, alive;
  int batch;  /* its HELLO said batch: it takes several tasks in one TASKS */
  int picked; /* tasks picked for it in this dispatch, not sent yet */
  int owned;  /* our tasks it runs (dispatched, slot not yet free); inflight may be more (its heartbeat) */
  int64_t last_seen_ms;
  int64_t policy_version;
  int64_t lag_reported; /* weights/lag/<name> last written, -1 before */
  int refusals;         /* results refused in a row: it gets no task until benched_until_ms */
  int64_t benched_until_ms;
  char backend[32];
  char host[256];
  int64_t pid; /* its HELLO's: the same process again after a reconnect, or a new one */
} lt__worker_t;

typedef struct lt__trainer lt__trainer_t;

struct lt_daemon {
  lt_daemon_opts_t o;
  lt_config_t *cfg;
  uv_loop_t loop;
  void *zctx;
  lt_zsock_t *z;
  lt_zap_t *zap; /* CURVE: admits the listed worker keys */
  char endpoint[512];
  char run_dir[4096];
  int lock_fd; /* RUN_DIR/daemon.lock (lt_fs_lock_pid); -1 */
  lt_buffer_t *buf;
  lt_writer_t *writer;
  lt_envs_t *envs;
  lt_rng_t rng;
  uv_timer_t cron;
  uv_prepare_t before_sleep; /* flushes the turn's ACKs */
  struct lt__acks *acks;     /* the turn's ACKs by peer (ingest.c) */
  int nacks;
  uv_signal_t sigint, sigterm;
  int signals;
  /* workers */
  lt__worker_t *workers;
  int nworkers, capworkers;
  int hb_ms, liveness;
  int64_t last_beat_ms, last_persist_ms, last_timeout_scan_ms;
  /* tasks */
  lt__task_t **tasks; /* open-addressing table by id */
  size_t tcap, tcount;
  int64_t qhead, qtail; /* FIFO of queued task ids */
  int64_t next_task_id, next_prompt_id;
  int64_t *domain_index; /* per-domain prompt counters */
  int64_t tasks_created, tasks_done, tasks_failed;
  int64_t tasks_done_before; /* done before a resume: such a run is not one where every task failed */
  char last_failure[256];    /* why the last task or episode failed (the error of a run where all did) */
  int open_train, open_eval; /* tasks not yet done */
  int64_t max_tasks;
  int64_t max_context; /* rollout.max_context: longer results are refused */
  int vocab;           /* the model's: token ids at or past it are refused */
  cJSON *model_info;   /* WELCOME.model */
  lt_task_t task_base; /* a TASK's fields fixed for the run (sampling, limits), read once */
  uint64_t run_seed;
  int batch; /* learner.batch.trajectories */
  /* scheduler.* and eval.every, read once (the loop does not look keys up per task) */
  int max_attempts;
  int64_t task_timeout_ms, eval_every;
  double *domain_weight;          /* per domain: scheduler.domain_ratios, else the environment's weight */
  double (*reward_range)[2];      /* per domain: the rewards it can produce (lt_reward_range) */
  int *reward_bounded;            /* per domain: 0 when any finite reward goes (an env reward without a range) */
  int oversample_max;             /* scheduler.pass_rate_oversample.max_groups (1: off) */
  int64_t oversample_min_history; /* scheduler.pass_rate_oversample.min_history */
  int open_target;                /* async: tasks kept open or waiting for the learner (queue depth × oversample) */
  int group_size;
  int sync;          /* scheduler.mode sync */
  int mask_timeouts; /* rollout.on_timeout mask: a timeout is stored masked, out of every loss */
  int64_t timeouts_masked, timeouts_masked_told; /* masked timeouts stored / already in rollout/timeouts_masked */
  int64_t failed[LT_TRAJ_NSTATUS], failed_told[LT_TRAJ_NSTATUS]; /* failed episodes by status / in rollout/failed/S */
  int64_t failed_said_ms, failed_unsaid, trainable; /* the last failure logged, those since; trainable ones stored */
  int64_t sync_released;                            /* sync mode: training tasks released for the current step */
  /* policy */
  int64_t version;
  char weights_dir[4096];
  char weights_sha[65];
  int64_t step, steps; /* learner steps done / wanted (0: unbounded) */
  /* evaluation */
  int64_t eval_round; /* step of the round in flight, -1 */
  int eval_pending, eval_total, eval_correct;
  int (*eval_dom)[2];                    /* per domain: this round's passed and finished held-out tasks */
  int64_t eval_next;                     /* step of the next evaluation */
  double last_accuracy;                  /* of the last finished round, -1 before the first */
  double last_reward, last_tokens_per_s; /* of the last learner step (progress line) */
  /* counters for stats */
  int64_t trajs_in, dups, malformed, refused;
  /* Pipeline overhead per task (dispatch to result, minus the worker's own
   * generation, environment and reward time), for the dispatch/overhead_*
   * metrics; a ring of the samples since the last report. */
  float overhead_ms[4096];
  int noverhead;
  int64_t last_report_ms;
  /* While a TRAJS is ingested: dispatch once after its last element, so the
   * slots it frees are filled by one TASKS instead of a TASK per element. */
  int dispatch_held, dispatch_wanted;
  int64_t ready_pending; /* ready trajectories the learner has not taken or dropped yet (back-pressure) */
  double reward_sum;
  int64_t reward_n;
  /* lifecycle */
  int stopping, exit_code, finishing;
  int64_t stop_deadline_ms;
  int accepting; /* 0 while the disk is full */
  uint64_t seq;
  lt__trainer_t *trainer;
  /* local workers */
  struct lt__spawn *spawn;
  FILE *metrics;              /* metrics.jsonl */
  int metrics_failing;        /* its last write failed (said once) */
  struct lt_prom *prom;       /* Prometheus endpoint (net/prom.h), NULL when off */
  struct lt_wserver *wserver; /* weights over HTTP (net/wserver.h), NULL when off */
  lt_ui_server_t *ui;         /* the console (monitor.ui_port) in its own thread, NULL when off */
  char weights_base[512];     /* http://HOST:PORT/weights */
  /* The versions published lately, until every live worker runs them (weights/propagation_s). */
  struct {
    int64_t version, published_ms;
    int reached; /* every live worker has reported it */
  } pubs[8];     /* a ring: version k of the run's publishes in slot k % 8 */
  int npubs;     /* slots in use */
  int64_t npublished;
  float propagation_s[1024]; /* publish → the last live worker on it, per version (the newest 1024) */
  int npropagation;
  char delta_base[65]; /* the current version's delta.zst applies to this model file; "" none */
  int64_t delta_bytes;
  struct cJSON *mirrors; /* transport.weights_mirrors as the current version's URLs */
  char hostname[256];    /* this machine's, to tell remote workers from local ones */
  int64_t started_ms;
};

/* tasks.c: the task table, the queue, task status, retries, resume */
lt__task_t *lt__task_get(lt_daemon_t *d, int64_t id);
int lt__task_put(lt_daemon_t *d, lt__task_t *t);
void lt__task_remove(lt_daemon_t *d, int64_t id);
/* Frees every task of the table and the table (the daemon's end). */
void lt__tasks_free(lt_daemon_t *d);
void lt__queue_push(lt_daemon_t *d, lt__task_t *t, int front);
/* The next queued task that may be dispatched, taken out of the queue; NULL when none. */
lt__task_t *lt__queue_pop(lt_daemon_t *d);
/* Writes t's status, attempts, worker and version through the writer (not waited for). */
void lt__task_persist(lt_daemon_t *d, const lt__task_t *t);
void lt__requeue(lt_daemon_t *d, lt__task_t *t, int count_attempt, const char *why);
/* A finished training task whose trajectory the learner quarantined runs again: back in the table and the
 * queue, its attempt counted (scheduler.max_attempts fails it). */
void lt__task_reopen(lt_daemon_t *d, const lt_quarantined_t *q);
int lt__scheduler_resume(lt_daemon_t *d);

/* dispatch.c: prompt generation, dispatch, timeouts */
/* A new prompt of domain dom with n samples (its group), persisted through the writer. */
int lt__prompt_create(lt_daemon_t *d, int dom, int eval, int n);
void lt__scheduler_refill(lt_daemon_t *d);
void lt__scheduler_dispatch(lt_daemon_t *d);
void lt__scheduler_cron(lt_daemon_t *d, int64_t now);

/* eval.c: evaluation rounds */
/* One evaluation task ended (correct: pass@1 credit); the last one closes the round. */
void lt__eval_task_done(lt_daemon_t *d, int dom, int correct); /* dom < 0: a task that does not count */
/* pass@1 credit of a held-out result. */
int lt__eval_passed(const lt_daemon_t *d, int dom, const lt_traj_t *t);
/* When rounds run: at the start of a fresh run, after a learner step every eval.every steps, and a last one
 * at the end (1: started, unless the last step was just evaluated). */
void lt__eval_first(lt_daemon_t *d);
void lt__eval_after_step(lt_daemon_t *d);
int lt__eval_last(lt_daemon_t *d);

/* workers.c: registry, HELLO/WELCOME, heartbeats, liveness */
int lt__worker_find(lt_daemon_t *d, const void *rid, size_t len);
void lt__on_hello(lt_daemon_t *d, const void *rid, size_t len, lt_hello_t *h);
void lt__workers_cron(lt_daemon_t *d, int64_t now);
/* A heartbeat says how many sessions the worker runs: its load is the larger
 * of that and the tasks we have dispatched to it (some may be in transit). */
void lt__worker_sync_inflight(lt_daemon_t *d, int w, int reported);
/* Requeues every task dispatched to worker w (it died, left or reconnected), each losing an attempt when
 * count_attempt, except those in keep[0..nkeep) (sorted here: a reconnecting worker's running sessions); returns
 * how many. */
int lt__worker_requeue_all(lt_daemon_t *d, int w, int count_attempt, const char *why, uint64_t *keep, int nkeep);
void lt__task_free_slot(lt_daemon_t *d, lt__task_t *t);
/* Sends the ACKs of this loop turn, one message per peer; frees them with `release`. */
void lt__acks_flush(lt_daemon_t *d, int release);
int lt__send(lt_daemon_t *d, int worker, lt_msg_t *m);
int lt__send_to(lt_daemon_t *d, const void *rid, size_t len, lt_msg_t *m);
void lt__broadcast(lt_daemon_t *d, lt_msg_t *m);

/* ingest.c: trajectories */
void lt__on_traj(lt_daemon_t *d, const void *rid, size_t len, uint64_t msg_id, lt_traj_t *t);
/* Answers a trajectory that will never be stored (ERROR naming the message and
 * its task) and requeues the task at once. */
void lt__traj_refuse(lt_daemon_t *d, const void *rid, size_t len, uint64_t msg_id, uint64_t task_id, int code,
                     const char *why);

/* trainer_thread.c: the trainer thread, driving the step driver (train/step.c) */
int lt__trainer_start(lt_daemon_t *d);
void lt__trainer_notify(lt_daemon_t *d);
/* Holds the trainer thread while an evaluation round runs, so every held-out sample
 * is generated by the policy being evaluated. */
void lt__trainer_pause(lt_daemon_t *d, int on);
void lt__trainer_stop(lt_daemon_t *d, void (*done)(void *), void *ud);
/* 1 when the trainer thread is between steps (held there until the unlock), so
 * the loop may fork; 0 while it computes. */
int lt__trainer_fork_lock(lt_daemon_t *d);
void lt__trainer_fork_unlock(lt_daemon_t *d);

/* spawn.c: local worker processes */
int lt__spawn_start(lt_daemon_t *d, int n);
void lt__spawn_stop(lt_daemon_t *d);
/* After the loop has closed the process handles. */
void lt__spawn_free(lt_daemon_t *d);

/* weights.c: where workers find the weights, WEIGHTS, what publishing costs */
int lt__weights_start(lt_daemon_t *d);
void lt__weights_stop(lt_daemon_t *d);
/* Where worker w finds the current weights: the directory, or a URL. */
const char *lt__weights_location(lt_daemon_t *d, int w, char *buf, size_t cap);
/* A version was published: it is the current one (version, weights_dir, weights_sha), the weights server serves
 * it, its propagation is timed. */
void lt__weights_published(lt_daemon_t *d, int64_t version, const char *dir, const char *sha);
/* The WEIGHTS message for worker w (url: storage for its location). */
void lt__weights_msg(lt_daemon_t *d, int w, lt_msg_t *m, char *url, size_t cap);
/* A worker's heartbeat said which version it runs: weights/propagation_s when a version has reached them all. */
void lt__weights_heartbeat(lt_daemon_t *d);
/* Every few seconds: weights/lag/<worker> for the workers whose lag changed. */
void lt__weights_report(lt_daemon_t *d);

/* prometheus.c: what monitor.prometheus_port exposes (the endpoint is net/prom.c) */
int lt__prom_start(lt_daemon_t *d);
/* Records the latest value of a run metric for the endpoint. */
void lt__prom_set(lt_daemon_t *d, const char *name, double v);
void lt__prom_stop(lt_daemon_t *d);

/* daemon.c */
/* Sorts samples ascending, for their quantiles. */
void lt__sort_floats(float *v, int n);
void lt__metric(lt_daemon_t *d, const char *name, double value);
/* rollout/timeouts_masked (only with rollout.on_timeout mask) and rollout/failed/<status>: the masked timeouts
 * and failed episodes since they were last written; at each learner step (step 1) and, when some are left, as the
 * run finishes (step 0). */
void lt__outcomes_report(lt_daemon_t *d, int step);
void lt__event(lt_daemon_t *d, const char *kind, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void lt__publish_weights(lt_daemon_t *d, int64_t version, const char *dir, const char *sha);
void lt__check_done(lt_daemon_t *d);
/* Ends the run: the learner checkpoints, the writer commits, workers get BYE. */
void lt__finish(lt_daemon_t *d, int code);

#endif
