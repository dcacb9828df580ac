/* The trajectory buffer: one SQLite file per run (RUN_DIR/buffer.db), WAL
 * mode, schema versioned and migrated (docs/buffer.md).  The daemon's writer
 * thread, the learner and the offline CLI each open their own handle; a
 * handle is used by one thread at a time. */
#ifndef LT_BUFFER_BUFFER_H
#define LT_BUFFER_BUFFER_H

#include <stdint.h>

#include "proto/proto.h"

typedef struct lt_buffer lt_buffer_t;

enum {
  LT_BUF_READONLY = 1, /* never writes (the CLI on a live or finished run) */
  LT_BUF_CHECK = 2,    /* run PRAGMA integrity_check at open (the daemon at start, --check); without it an open
                          checks cheaply: the header, the format and schema, each b-tree's root and edges */
  LT_BUF_CREATE = 4,   /* create the file and schema if missing */
};

/* Errors: LT_ENOENT (no file), LT_EFORMAT (not a longtail buffer),
 * LT_EVERSION (newer schema), LT_ECORRUPT (integrity check failed), LT_EIO. */
int lt_buffer_open(const char *path, int flags, lt_buffer_t **out);
void lt_buffer_close(lt_buffer_t *b);
/* LT_ECORRUPT with the "damaged buffer" message if SQLite reported this file corrupt (SQLITE_CORRUPT, SQLITE_NOTADB)
 * to any call on this handle, else 0: readers that take a failed lookup's 0 or NULL ask before they report. */
int lt_buffer_damaged(lt_buffer_t *b);
const char *lt_buffer_path(const lt_buffer_t *b);

/* ---- transactions (writers batch many operations in one) ---- */
int lt_buffer_begin(lt_buffer_t *b);
int lt_buffer_commit(lt_buffer_t *b); /* LT_ENOSPC on a full disk: the transaction is rolled back */
void lt_buffer_rollback(lt_buffer_t *b);

/* ---- run metadata ---- */
int lt_buffer_meta_set(lt_buffer_t *b, const char *key, const char *value);
/* Copy of the value (caller frees), NULL if absent. */
char *lt_buffer_meta_get(lt_buffer_t *b, const char *key);
int lt_buffer_counter_add(lt_buffer_t *b, const char *name, int64_t delta);
int64_t lt_buffer_counter(lt_buffer_t *b, const char *name);

/* ---- prompts and tasks ---- */
typedef enum { LT_TASK_QUEUED = 0, LT_TASK_DISPATCHED, LT_TASK_DONE, LT_TASK_FAILED } lt_task_status;

typedef struct {
  int64_t id;        /* task id */
  int64_t prompt_id; /* also the group id */
  const char *domain;
  int eval;           /* held-out evaluation task */
  int64_t eval_round; /* learner step of the evaluation (eval tasks) */
  lt_task_status status;
  int attempts;
  const char *worker;
  int64_t version; /* policy version at dispatch */
} lt_task_row_t;

/* copy_of: the prompt whose problem this one repeats as another group (pass-rate oversampling), or 0. */
int lt_buffer_prompt_insert(lt_buffer_t *b, int64_t id, const char *domain, const char *spec_json, int eval,
                            int64_t copy_of);
/* spec of a prompt (caller frees) or NULL. */
char *lt_buffer_prompt_spec(lt_buffer_t *b, int64_t id);
int lt_buffer_task_insert(lt_buffer_t *b, const lt_task_row_t *t);
/* attempts < 0: the stored count stays (a result does not undo the attempts before it). */
int lt_buffer_task_update(lt_buffer_t *b, int64_t id, lt_task_status st, int attempts, const char *worker,
                          int64_t version);
/* Calls fn for every task whose status is not done/failed (resume). */
int lt_buffer_tasks_open(lt_buffer_t *b, void (*fn)(const lt_task_row_t *t, void *ud), void *ud);
int64_t lt_buffer_max_id(lt_buffer_t *b, const char *table);
/* 1 if the task exists, 0 if not. */
int lt_buffer_task_exists(lt_buffer_t *b, int64_t id);

/* ---- trajectories ---- */
/* What training did with a trajectory (the `status` column), as opposed to how its rollout ended (the worker's
 * outcome, the `traj_status` column, proto's lt_traj_status). */
typedef enum {
  LT_SAMPLE_READY = 0, /* trainable, not yet used */
  LT_SAMPLE_CONSUMED,  /* used by a learner step */
  LT_SAMPLE_STALE,     /* too old for the staleness bound: never trained on */
  LT_SAMPLE_FILTERED,  /* dropped by dynamic filtering (zero-variance group, ...) */
  LT_SAMPLE_FAILED,    /* no reward / environment error / aborted: never trained on */
  LT_SAMPLE_EVAL,      /* held-out evaluation sample */
  LT_SAMPLE_MASKED,    /* a timeout under rollout.on_timeout mask: kept, never trained on */
  LT_SAMPLE_NSTATES
} lt_sample_state;

const char *lt_sample_state_name(lt_sample_state s);

/* What the daemon knows of a stored trajectory beyond the wire record (lt_traj_t, proto/proto.h): where and when
 * it came from, what training did with it. */
typedef struct {
  const char *worker;
  int64_t version_min, version_max; /* over generated tokens (-1 if none) */
  int truncated;                    /* counts as truncated (the `truncated` column: selection, packing, reports) */
  int64_t eval_round;
  int64_t time_ms;
  lt_sample_state status;
  /* filled by lt_buffer_traj_load only */
  int64_t consumed_step;   /* learner step that trained on it (or marked it), -1 */
  char loaded_worker[128]; /* the worker it came from */
} lt_traj_meta_t;

/* Inserts a trajectory (the wire record, only read) as its row of `trajectories` and its payload
 * (docs/buffer.md): status and finish by their wire names, components and messages as JSON text; *duplicate = 1
 * (and nothing written) if the task already has one. */
int lt_buffer_traj_insert(lt_buffer_t *b, const lt_traj_t *t, const lt_traj_meta_t *m, int *duplicate);
/* What lt_buffer_traj_load reads: the arrays packing needs, or also the texts (components, messages, reason,
 * error, status and finish) a report shows. */
enum { LT_LOAD_TOKENS = 0, LT_LOAD_ALL = 1 };
/* Loads a trajectory by task id into *t, which then owns its memory (free with lt_traj_free).  LT_ENOENT if
 * absent, LT_ECORRUPT if its payload is missing or inconsistent. */
int lt_buffer_traj_load(lt_buffer_t *b, int64_t task_id, int what, lt_traj_t *t, lt_traj_meta_t *m);
int lt_buffer_traj_mark(lt_buffer_t *b, const int64_t *task_ids, int n, lt_sample_state st, int64_t step);
/* Resume from the checkpoint of learner step `step`: trajectories consumed,
 * filtered or made stale after it are ready again.  Returns how many. */
int lt_buffer_traj_rewind(lt_buffer_t *b, int64_t step);

/* A trajectory the learner cannot use, moved aside, and its task, reopened. */
typedef struct {
  int64_t task_id, prompt_id;
  char domain[64];
  int attempts; /* the task's attempts so far */
  char *spec;   /* its prompt's problem (JSON) */
  char why[256];
} lt_quarantined_t;

/* In one transaction of its own: moves task_id's trajectory (its row and the payload's tokens, logprobs, mask,
 * versions and messages) into the `quarantine` table with `why` and the learner step, and sets the task queued
 * again, so that its next attempt can be stored; *q receives what the caller needs to run the task again (free
 * with lt_buffer_quarantined_free).  LT_ENOENT when the task has no stored trajectory. */
int lt_buffer_traj_quarantine(lt_buffer_t *b, int64_t task_id, int64_t step, const char *why, int64_t time_ms,
                              lt_quarantined_t *q);
void lt_buffer_quarantined_free(lt_quarantined_t *q);

/* A ready, trainable trajectory as the learner selects it. */
typedef struct {
  int64_t task_id, group_id, version_min;
  double reward;
  int truncated;
  int group_done; /* samples of its group that have ended (stored, or failed for good) */
  char domain[64];
} lt_ready_t;

/* Ready trajectories in arrival order (up to max). */
int lt_buffer_ready(lt_buffer_t *b, lt_ready_t *out, int max, int *n);
int64_t lt_buffer_count_status(lt_buffer_t *b, lt_sample_state st);

/* ---- metrics, events, checkpoints, workers ---- */
int lt_buffer_metric(lt_buffer_t *b, int64_t step, const char *name, double value, int64_t time_ms);
int lt_buffer_event(lt_buffer_t *b, int64_t time_ms, const char *kind, const char *detail);
int lt_buffer_checkpoint(lt_buffer_t *b, int64_t version, int64_t step, const char *kind, const char *path,
                         const char *sha256);
int lt_buffer_worker_seen(lt_buffer_t *b, const char *name, const char *host, int slots, const char *backend,
                          int64_t time_ms);

/* ---- named read queries (buffer/query.c): the CLI's reports and the daemon's resume ---- */

typedef struct {
  int64_t version, step;
  char path[4096];
  char sha256[65];
} lt_ckpt_row_t;

/* The newest weights checkpoint (the first one with oldest = 1): 1, 0 when none is recorded, or an error. */
int lt_buffer_weights(lt_buffer_t *b, int oldest, lt_ckpt_row_t *out);
/* The weights checkpoint of one version: 1, 0 when none is recorded, or an error. */
int lt_buffer_weights_at(lt_buffer_t *b, int64_t version, lt_ckpt_row_t *out);
int64_t lt_buffer_count_tasks(lt_buffer_t *b, lt_task_status st);
/* Training (not evaluation) prompts of a domain, and training tasks: what resume continues numbering from. */
int64_t lt_buffer_count_prompts(lt_buffer_t *b, const char *domain);
/* The history of a training task — its spec, less a dataset's "epoch" — in a domain: trajectories that ended
 * (*n) and that passed (*passed), over every group it was given (scheduler.pass_rate_oversample). Passed: the
 * verifier's verdict (components `correct` or `verifier` ≥ 0.5) where there is one, else reward ≥ pass_threshold
 * (envs.<d>.pass_threshold). */
int lt_buffer_task_history(lt_buffer_t *b, const char *domain, const char *spec_json, double pass_threshold, int64_t *n,
                           int64_t *passed);
int64_t lt_buffer_count_train_tasks(lt_buffer_t *b);
/* The highest noise curriculum level (spec noise_level) among a domain's training prompts; -1: none. */
double lt_buffer_noise_level(lt_buffer_t *b, const char *domain);
/* Training trajectories and how many of them were truncated. */
int lt_buffer_traj_totals(lt_buffer_t *b, int64_t *count, int64_t *truncated);
/* Mean reward of the training trajectories whose reward was obtained (0 when none). */
double lt_buffer_reward_mean(lt_buffer_t *b);
/* Workers last seen at or after since_ms (INT64_MIN: every worker ever seen). */
int64_t lt_buffer_count_workers(lt_buffer_t *b, int64_t since_ms);
/* The highest learner step that consumed a trajectory (0 when none). */
int64_t lt_buffer_last_consumed_step(lt_buffer_t *b);
/* The task ids a learner step trained on, in the learner's order (groups by their first member, members by
 * arrival); *ids is malloc'ed (caller frees). */
int lt_buffer_step_batch(lt_buffer_t *b, int64_t step, int64_t **ids, int *n);
/* The task ids whose trajectory a learner step moved to quarantine instead of training on it. */
int lt_buffer_step_quarantined(lt_buffer_t *b, int64_t step, int64_t **ids, int *n);
/* Training tasks of the groups a learner step trained on that ended with a stored trajectory which is no longer
 * in the buffer (deleted by hand or lost): what retrain cannot train on. */
int lt_buffer_step_missing(lt_buffer_t *b, int64_t step, int64_t **ids, int *n);

typedef enum { LT_SPAN_ALL, LT_SPAN_FIRST, LT_SPAN_LAST } lt_span_t;
/* Mean and count of a metric's values: all of them, or the first or last n in step order (count 0: none). */
int lt_buffer_metric_mean(lt_buffer_t *b, const char *name, lt_span_t span, int n, double *mean, int64_t *count);
/* A metric's first (LT_SPAN_FIRST) or last (LT_SPAN_LAST) value and its step: 1, 0 when none, or an error. */
int lt_buffer_metric_edge(lt_buffer_t *b, const char *name, lt_span_t edge, double *value, int64_t *step);
/* The value a metric was last given at a step: 1, 0 when none, or an error. */
int lt_buffer_metric_at(lt_buffer_t *b, int64_t step, const char *name, double *value);
/* Every value of the metrics whose name matches a GLOB pattern, by name, step and time; fn returns nonzero to
 * stop. */
int lt_buffer_metric_series(lt_buffer_t *b, const char *glob,
                            int (*fn)(const char *name, int64_t step, double value, void *ud), void *ud);
/* The names of all recorded metrics, sorted. */
int lt_buffer_metric_names(lt_buffer_t *b, int (*fn)(const char *name, void *ud), void *ud);

/* Which trajectories an export reads. */
typedef struct {
  unsigned statuses; /* bit (1 << lt_sample_state) per status wanted; 0: all */
  int has_min_reward;
  double min_reward;
  int consumed;             /* only those a learner step consumed (or marked) ... */
  int64_t step_lo, step_hi; /* ... by steps in [step_lo, step_hi]; -1: open */
  const char *domain;       /* NULL: all */
} lt_traj_filter_t;

/* Up to max trajectories after row id `after` in arrival order: task ids and row ids (the next page starts
 * after rowids[*n - 1]). */
int lt_buffer_traj_page(lt_buffer_t *b, const lt_traj_filter_t *f, int64_t after, int64_t *task_ids, int64_t *rowids,
                        int max, int *n);
/* Workers heard from since since_ms (wall clock) that have not left or been declared dead after that
 * (worker_bye / worker_dead events). */
int64_t lt_buffer_workers_alive(lt_buffer_t *b, int64_t since_ms);

/* ---- what the learner computed for each token (buffer/tokvals.c, the token_values table) ---- */

/* One trajectory at one learner step.  The arrays hold the tokens of the trajectory's contexts the learner
 * packed, span after span (a context longer than the model's positions is cut). */
typedef struct {
  int64_t task_id, step; /* step: the learner step that trained it (or, recomputed, whose weights were used) */
  int recomputed;        /* 0: stored by that step; 1: recomputed afterwards (replay --fill-token-values) */
  const char *loss;      /* JSON: the objective and the bounds the values were tested against */
  double traj_ratio;     /* geometric-mean x_t over its loss tokens (the trajectory mask's test); NaN: none */
  int traj_ok;           /* within the trajectory bounds */
  int ntokens;           /* the trajectory's tokens */
  int nspans;
  const int32_t *spans; /* [2 * nspans]: (first token in the trajectory, length) of each packed context */
  int n;                /* Σ lengths (lt_buffer_token_values_get) */
  const float *ratio, *logp_old, *adv, *entropy; /* [n] x_t (0 off the loss mask), log π_old, Â_t, entropy */
  const uint8_t *flags; /* [n] LT_TOKV_* bits of learner/loss.h (0 off the actor's loss mask) */
} lt_token_values_row_t;

/* Stores rows (their arrays only read), replacing a row of the same task and step; in one transaction unless
 * the caller holds one. */
int lt_buffer_token_values_put(lt_buffer_t *b, const lt_token_values_row_t *rows, int n);
/* The values of task_id: the stored row of the newest step that trained it, else the newest recomputed one.
 * 1 and *r (free with lt_buffer_token_values_free), 0 when there is none (or the buffer predates the table). */
int lt_buffer_token_values_get(lt_buffer_t *b, int64_t task_id, lt_token_values_row_t *r);
void lt_buffer_token_values_free(lt_token_values_row_t *r);
/* Rows a learner step stored (0 when it stored none: learner.store_token_values off, or an older run). */
int64_t lt_buffer_token_values_count(lt_buffer_t *b, int64_t step);

/* ---- browsing (buffer/browse.c): the web console's bounded queries ---- */

/* Interrupts any statement of this handle that runs past *deadline_ms (lt_time_mono_ns / 1e6; 0: no limit)
 * with LT_ETIMEDOUT.  The caller owns *deadline_ms and moves it before each request; NULL removes the limit. */
void lt_buffer_set_deadline(lt_buffer_t *b, const int64_t *deadline_ms);

typedef enum {
  LT_BROWSE_ID = 0,
  LT_BROWSE_REWARD,
  LT_BROWSE_TOKENS,
  LT_BROWSE_STALENESS,
  LT_BROWSE_VERSION,
  LT_BROWSE_NSORTS
} lt_browse_sort;

/* Which trajectories a page shows: NULL texts and the has_* flags cleared mean "any". */
typedef struct {
  const char *domain;
  const char *status;  /* lt_sample_state name: ready, consumed, ... */
  const char *outcome; /* the worker's traj_status: ok, reward_failed, ... */
  const char *finish;  /* terminated, truncated, none */
  int has_reward_min, has_reward_max;
  double reward_min, reward_max;
  int has_stale_min, has_stale_max;
  int64_t stale_min, stale_max; /* consumed_step − version_min (set only where a step consumed or marked it) */
  int has_version;
  int64_t version;  /* version_min == version */
  const char *text; /* substring of the messages (a scan, bounded by the deadline) */
  lt_browse_sort sort;
  int desc;
  int64_t offset;
  int limit; /* rows wanted, ≤ 1000 */
} lt_browse_query_t;

/* One row of the trajectory table (texts valid during the callback only). */
typedef struct {
  int64_t task_id, group_id;
  const char *domain, *status, *outcome, *finish, *reason, *worker;
  int has_reward;
  double reward;
  int ntokens, nturns, eval, truncated;
  int64_t version_min, version_max, time_ms;
  int64_t consumed_step; /* -1: none */
} lt_browse_row_t;

/* The page of trajectories q asks for (fn per row, nonzero stops) and *total, the rows matching the filters. */
int lt_buffer_browse(lt_buffer_t *b, const lt_browse_query_t *q, int (*fn)(const lt_browse_row_t *r, void *ud),
                     void *ud, int64_t *total);
/* A metric's points in step order, at most max (the first max): fn per point. */
int lt_buffer_metric_points(lt_buffer_t *b, const char *name, int max, int (*fn)(int64_t step, double value, void *ud),
                            void *ud);
/* The steps where both lo_name and hi_name were recorded (a band: reward/min and reward/max around reward/mean),
 * in step order, at most max: fn per step with the two values. */
int lt_buffer_metric_band(lt_buffer_t *b, const char *lo_name, const char *hi_name, int max,
                          int (*fn)(int64_t step, double lo, double hi, void *ud), void *ud);
/* Every worker ever seen, most recently seen first, at most max, with the tasks dispatched to it and not yet
 * done (in flight). */
int lt_buffer_workers_list(lt_buffer_t *b, int max,
                           int (*fn)(const char *name, const char *host, int slots, const char *backend,
                                     int64_t first_ms, int64_t last_ms, int64_t in_flight, void *ud),
                           void *ud);
/* The quarantined attempts of a task, oldest first, at most max: the learner step and why. */
int lt_buffer_quarantine_of(lt_buffer_t *b, int64_t task_id, int max,
                            int (*fn)(int64_t step, const char *why, void *ud), void *ud);
/* The newest events, newest first, at most max; guardrails: only the learner's guardrail actions (kinds
 * guardrail and routing_alarm). */
int lt_buffer_events_recent(lt_buffer_t *b, int guardrails, int max,
                            int (*fn)(int64_t time_ms, const char *kind, const char *detail, void *ud), void *ud);

#endif
