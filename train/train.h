/* Training decisions between the buffer and the learner: which trajectories a step trains on (eligibility and
 * staleness, complete groups, the dynamic filter), packing, guardrails, the learner driver (steps, publishing,
 * checkpoints, resume), the supervised warm start and the offline replay of a step.  It talks to its caller
 * through options in and results and events out; it never sees the daemon. */
#ifndef LT_TRAIN_TRAIN_H
#define LT_TRAIN_TRAIN_H

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>

#include "buffer/buffer.h"
#include "envs/env.h"
#include "learner/trainer.h"
#include "util/config.h"

/* The most environment domains a step reports rewards for (reward/<domain>); more are summed in no domain. */
#define LT_TRAIN_MAX_DOMAINS 8
/* Staleness histogram of a step: ages 0..6 and 7+. */
#define LT_TRAIN_STALE_BINS 8

/* ---- the learner driver (train/learner.c) ---- */

typedef struct {
  const lt_config_t *cfg;    /* learner.*, scheduler.*, guardrails.*, checkpoint.*, monitor.routing_* */
  const char *run_dir;       /* checkpoints/ and buffer.db live here */
  const char *weights_dir;   /* the policy of `version` (its tokenizer files travel with every version) */
  int64_t version, step;     /* where the run is */
  int64_t steps;             /* learner steps wanted (0: unbounded) */
  int group_size;            /* samples per prompt */
  int sync;                  /* scheduler.mode sync: strict on-policy */
  int resume;                /* continue from the run's last full checkpoint */
  /* Guardrail actions, staleness changes and routing alarms as they happen (on lt_train_step's thread). */
  void (*event)(void *ud, const char *kind, const char *detail);
  void *ud;
} lt_train_opts_t;

/* What one step did. */
typedef struct {
  int64_t step, version;
  char dir[4096], sha[65];   /* the published policy version */
  lt_step_stats_t st;
  double reward_mean, trunc_rate, turns_mean, stale_mean, route_rollout, step_s, gen_tokens, wait_s;
  int stale_max, stale_hist[LT_TRAIN_STALE_BINS], marked_stale, filtered, quarantined, max_staleness;
  int skip_sampling, skip_routing; /* trajectories left out of the actor loss, and why */
  int ranks;                 /* learner ranks that trained it (learner/ranks) */
  int ndom;
  char dom[LT_TRAIN_MAX_DOMAINS][64];
  double dom_reward[LT_TRAIN_MAX_DOMAINS];
  /* [quarantined]: the tasks whose trajectory the step could not use, moved aside in the buffer and queued
   * again there, for the caller to run again (lt_train_result_free) */
  lt_quarantined_t *requeue;
} lt_train_result_t;

typedef struct lt_train lt_train_t;

/* Builds the trainer (on resume: from the last full checkpoint, with the buffer rewound to its step) and opens
 * its own handle of RUN_DIR/buffer.db; the handle is then used by one thread, the one that steps. */
int lt_train_open(const lt_train_opts_t *o, lt_train_t **out);
/* Where it starts: after a resume the step, version and weights (with their SHA-256) may differ from the
 * options'.  Ready trajectories waiting in the buffer. */
void lt_train_position(const lt_train_t *t, int64_t *step, int64_t *version, const char **weights_dir,
                       const char **sha);
int64_t lt_train_ready(lt_train_t *t);
/* One step.  flush: no more data will come, so train on a partial batch.  1: trained (r filled); 0: nothing
 * trainable yet (r->marked_stale, r->filtered and r->quarantined count what was dropped); < 0: an error. */
int lt_train_step(lt_train_t *t, int flush, lt_train_result_t *r);
/* What a step's result holds (its requeue list); nothing after an error. */
void lt_train_result_free(lt_train_result_t *r);
int64_t lt_train_steps_done(const lt_train_t *t);
/* The final full checkpoint, so that --resume continues from here (nothing when the last step has one). */
int lt_train_checkpoint(lt_train_t *t);
void lt_train_close(lt_train_t *t);

/* ---- learner ranks under mpirun/srun (docs/distributed.md) ---- */

/* The number of learner ranks (1 without a launcher). */
int lt_train_ranks(void);
/* Rank 0, while idle: tells the other ranks it is alive (they fail a silent rank 0 within the liveness window). */
int lt_train_keepalive(void);
/* Rank 0: the other ranks leave lt_train_follow.  Idempotent. */
int lt_train_stop_ranks(void);
/* The job's trainer on the policy in policy_dir (every learner rank builds the same). */
int lt_train_build_trainer(const lt_config_t *c, const char *policy_dir, lt_trainer_t **out);
/* Ranks >= 1 of `train`: no loop, no workers, no buffer; only this rank's share of every step rank 0 trains,
 * until rank 0 stops.  0 or an LT_E* code. */
int lt_train_follow(const lt_config_t *cfg);

/* ---- supervised warm start (train/sft.c): `longtail sft`, and `train` with sft.enabled ---- */

typedef struct {
  const lt_config_t *cfg;  /* sft.*, learner.threads, run.seed */
  lt_envs_t *envs;         /* demonstrations when sft.data is empty */
  const char *in_dir;      /* policy to start from */
  const char *out_dir;     /* where the tuned policy is written */
  FILE *metrics;           /* metrics.jsonl, or NULL */
  lt_buffer_t *buf;        /* run buffer for the sft/loss metric, or NULL */
  int progress;            /* progress lines on stderr */
} lt_sft_opts_t;

/* The policy a job starts from: model.path, or model.init drawn with run.seed
 * and written to init_dir.  The directory's absolute path goes to out. */
int lt_policy_source(const lt_config_t *cfg, const char *init_dir, char *out, size_t cap);
/* The policy dir as one model.safetensors (every version travels as one hashed file): dir itself, or a sharded
 * source rewritten once into out_dir with its tokenizer files.  The folder used goes to out. */
int lt_policy_single_file(const char *dir, const char *out_dir, char *out, size_t cap);
/* What a worker must respect, for WELCOME.model (docs/protocol.md): the vocabulary size, the ids that end a
 * turn, the chat format; *info is the caller's. */
int lt_policy_model_info(const char *dir, int *vocab, cJSON **info);

/* Runs sft.steps steps; *final_loss receives the mean loss of the last tenth. */
int lt_sft_run(const lt_sft_opts_t *o, double *final_loss);

/* ---- `longtail replay` (train/replay.c): the batch a learner step trained on, recomputed under a
 * checkpoint — train–rollout mismatch, what the MIS masks keep, the loss the step started from — and what
 * other mask bounds would have kept ---- */

typedef struct {
  const char *run;              /* run directory */
  const char *model;            /* policy weights (checkpoints/vN) or a full checkpoint (policy/, critic/);
                                   NULL: the run's checkpoints/v<step − 1>, the weights the step started from */
  int64_t step;                 /* learner step whose batch is replayed; 0: the last one */
  const double *token_bounds;   /* what-if [lo, hi], or NULL */
  const double *traj_bounds;    /* what-if [lo, hi], or NULL */
  const lt_cfg_schema_t *const *schemas; /* to read the run's recorded config */
  int nschemas;
  int check;                    /* SQLite's full integrity check of the buffer first (else the cheap one) */
} lt_replay_opts_t;

/* *out: {"step", "model", "trajectories", "tokens", "objective", "recomputed": {...}, "logged": {...},
 * "what_if": {...} (with bounds)}.  Errors name the run, step or checkpoint. */
int lt_replay(const lt_replay_opts_t *o, cJSON **out);

#endif
