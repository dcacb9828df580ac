/* The trajectory buffer: one SQLite file per run (RUN_DIR/buffer.db), WAL
 * mode, schema versioned and migrated (docs/buffer.md).  The daemon's writer
 * thread, the learner and the offline CLI each open their own handle; a
 * handle is used by one thread at a time. */
#ifndef LT_BUFFER_BUFFER_H
#define LT_BUFFER_BUFFER_H

#include <stdint.h>

#include "proto/proto.h"

#define LT_BUFFER_SCHEMA 1

typedef struct lt_buffer lt_buffer_t;

enum {
  LT_BUF_READONLY = 1, /* never writes (the CLI on a live or finished run) */
  LT_BUF_CHECK = 2,    /* run PRAGMA integrity_check at open (the daemon at start) */
  LT_BUF_CREATE = 4,   /* create the file and schema if missing */
};

/* Errors: LT_ENOENT (no file), LT_EFORMAT (not a longtail buffer),
 * LT_EVERSION (newer schema), LT_ECORRUPT (integrity check failed), LT_EIO. */
int lt_buffer_open(const char *path, int flags, lt_buffer_t **out);
void lt_buffer_close(lt_buffer_t *b);
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
  int64_t id;            /* task id */
  int64_t prompt_id;     /* also the group id */
  const char *domain;
  int eval;              /* held-out evaluation task */
  int64_t eval_round;    /* learner step of the evaluation (eval tasks) */
  lt_task_status status;
  int attempts;
  const char *worker;
  int64_t version;       /* policy version at dispatch */
} lt_task_row_t;

int lt_buffer_prompt_insert(lt_buffer_t *b, int64_t id, const char *domain, const char *spec_json, int eval);
/* spec of a prompt (caller frees) or NULL. */
char *lt_buffer_prompt_spec(lt_buffer_t *b, int64_t id);
int lt_buffer_task_insert(lt_buffer_t *b, const lt_task_row_t *t);
int lt_buffer_task_update(lt_buffer_t *b, int64_t id, lt_task_status st, int attempts, const char *worker, int64_t version);
/* Calls fn for every task whose status is not done/failed (resume). */
int lt_buffer_tasks_open(lt_buffer_t *b, void (*fn)(const lt_task_row_t *t, void *ud), void *ud);
int64_t lt_buffer_max_id(lt_buffer_t *b, const char *table);
/* 1 if the task exists, 0 if not. */
int lt_buffer_task_exists(lt_buffer_t *b, int64_t id);

/* ---- trajectories ---- */
typedef enum {
  LT_TR_READY = 0, /* trainable, not yet used */
  LT_TR_CONSUMED,  /* used by a learner step */
  LT_TR_STALE,     /* too old for the staleness bound: never trained on */
  LT_TR_FILTERED,  /* dropped by dynamic filtering (zero-variance group, ...) */
  LT_TR_FAILED,    /* no reward / environment error / aborted: never trained on */
  LT_TR_EVAL,      /* held-out evaluation sample */
  LT_TR_NSTATUS
} lt_tr_status;

const char *lt_tr_status_name(lt_tr_status s);

typedef struct {
  const char *worker;
  int64_t version_min, version_max; /* over generated tokens (-1 if none) */
  int64_t eval_round;
  int64_t time_ms;
  lt_tr_status status;
  /* filled by lt_buffer_traj_load only */
  int64_t consumed_step;     /* learner step that trained on it (or marked it), -1 */
  char loaded_worker[128];   /* the worker it came from */
} lt_traj_meta_t;

/* Inserts a trajectory and its payload; *duplicate = 1 (and nothing written)
 * if the task already has one. */
int lt_buffer_traj_insert(lt_buffer_t *b, const lt_traj_t *t, const lt_traj_meta_t *m, int *duplicate);
/* Loads a trajectory with payload by task id into *t (lt_msg_free-style
 * ownership: free with lt_buffer_traj_free). LT_ENOENT if absent. */
int lt_buffer_traj_load(lt_buffer_t *b, int64_t task_id, lt_traj_t *t, lt_traj_meta_t *m);
void lt_buffer_traj_free(lt_traj_t *t);
int lt_buffer_traj_mark(lt_buffer_t *b, const int64_t *task_ids, int n, lt_tr_status st, int64_t step);
/* Resume from the checkpoint of learner step `step`: trajectories consumed,
 * filtered or made stale after it are ready again.  Returns how many. */
int lt_buffer_traj_rewind(lt_buffer_t *b, int64_t step);

/* A ready, trainable trajectory as the learner selects it. */
typedef struct {
  int64_t task_id, group_id, version_min;
  double reward;
  int truncated;
  int group_done;      /* samples of its group that have ended (stored, or failed for good) */
} lt_ready_t;

/* Ready trajectories in arrival order (up to max). */
int lt_buffer_ready(lt_buffer_t *b, lt_ready_t *out, int max, int *n);
int64_t lt_buffer_count_status(lt_buffer_t *b, lt_tr_status st);

/* ---- metrics, events, checkpoints, workers ---- */
int lt_buffer_metric(lt_buffer_t *b, int64_t step, const char *name, double value, int64_t time_ms);
int lt_buffer_event(lt_buffer_t *b, int64_t time_ms, const char *kind, const char *detail);
int lt_buffer_checkpoint(lt_buffer_t *b, int64_t version, int64_t step, const char *kind, const char *path,
                         const char *sha256);
int lt_buffer_worker_seen(lt_buffer_t *b, const char *name, const char *host, int slots, const char *backend,
                          int64_t time_ms);

/* Runs a read-only SQL query and calls fn per row with the columns as text
 * (NULL for SQL NULL).  For the offline CLI's reports. */
int lt_buffer_query(lt_buffer_t *b, const char *sql, int (*fn)(int ncol, const char *const *cols, void *ud), void *ud);
/* The first row's first n columns as numbers into out[]; a missing row or a
 * NULL column leaves the caller's value.  Returns 1 (a row), 0, or an error. */
int lt_buffer_numbers(lt_buffer_t *b, const char *sql, double *out, int n);
/* Workers heard from since since_ms (wall clock) that have not left or been
 * declared dead after that (worker_bye / worker_dead events). */
int lt_buffer_workers_alive(lt_buffer_t *b, int64_t since_ms, int64_t *n);

#endif
