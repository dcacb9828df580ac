/* Training decisions between the buffer and the learner: which trajectories a step trains on (eligibility and
 * staleness, complete groups, the dynamic filter), packing, guardrails, the step driver (steps, publishing,
 * checkpoints, resume), the supervised warm start, the offline replay of a step and the retraining of a run.  It talks to its caller
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

/* ---- the step driver (train/step.c) ---- */

typedef struct {
  const lt_config_t *cfg;  /* learner.*, scheduler.*, guardrails.*, checkpoint.*, monitor.routing_* */
  const char *run_dir;     /* checkpoints/ and buffer.db live here */
  const char *weights_dir; /* the policy of `version` (its tokenizer files travel with every version) */
  int64_t version, step;   /* where the run is */
  int64_t steps;           /* learner steps wanted (0: unbounded) */
  int group_size;          /* samples per prompt */
  int sync;                /* scheduler.mode sync: strict on-policy */
  int resume;              /* continue from the run's last full checkpoint */
  /* Retrain (train/retrain.c): the buffer of the run being trained again, read-only.  Each step then trains on
   * the trajectories it says that step consumed, instead of choosing from RUN_DIR/buffer.db's; nothing is
   * marked, no version is pruned. */
  lt_buffer_t *source;
  /* Guardrail actions, staleness changes and routing alarms as they happen (on lt_train_step's thread). */
  void (*event)(void *ud, const char *kind, const char *detail);
  void *ud;
} lt_train_opts_t;

/* What one step did. */
typedef struct {
  int64_t step, version;
  char dir[4096], sha[65]; /* the published policy version */
  lt_step_stats_t st;
  double reward_mean, trunc_rate, turns_mean, stale_mean, route_rollout, step_s, gen_tokens, wait_s;
  double publish_s;              /* of step_s: writing the version for the workers (save, SHA-256, delta) */
  double reward_min, reward_max; /* the batch's reward spread (the console's band around reward/mean) */
  int stale_min, stale_max;      /* the batch's staleness spread (the console's band around staleness/mean) */
  int stale_hist[LT_TRAIN_STALE_BINS], marked_stale, filtered, quarantined, max_staleness;
  int skip_sampling, skip_routing; /* trajectories left out of the actor loss, and why */
  int ranks;                       /* learner ranks that trained it (learner/ranks) */
  int ndom;
  char dom[LT_TRAIN_MAX_DOMAINS][64];
  double dom_reward[LT_TRAIN_MAX_DOMAINS];
  double dom_min[LT_TRAIN_MAX_DOMAINS], dom_max[LT_TRAIN_MAX_DOMAINS]; /* each domain's reward spread */
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
/* 1 once the steps asked for (lt_train_opts_t.steps) are done. */
int lt_train_done(const lt_train_t *t);
/* A step's metrics by their names (docs/metrics.md), each given to fn (train/metrics.c): what the step measured,
 * its batch and its data (the run's own counters, such as throughput/trajectories_per_s, are the caller's). */
typedef void (*lt_train_metric_fn)(void *ud, const char *name, double value);
void lt_train_result_metrics(const lt_train_result_t *r, lt_train_metric_fn fn, void *ud);
/* The end of a run: the final full checkpoint, so that --resume continues from here (nothing when the last step
 * has one), then the other learner ranks leave lt_train_follow.  What fails is an event (checkpoint_failed,
 * learner_ranks); < 0: the checkpoint failed. */
int lt_train_finish(lt_train_t *t);
void lt_train_close(lt_train_t *t);

/* Pass-rate oversampling (seed 004 §3.3.3, train/select.c): the groups a new training task gets from its history
 * (n trajectories of its earlier prompts, `passed` of them passed): 1 + round((1 − pass rate) · (max_groups − 1)),
 * or 1 below min_history. */
int lt_train_oversample_groups(int64_t n, int64_t passed, int max_groups, int64_t min_history);

/* ---- learner ranks under mpirun/srun (docs/distributed.md) ---- */

/* The number of learner ranks (1 without a launcher). */
int lt_train_ranks(void);
/* Rank 0, while idle: tells the other ranks it is alive (they fail a silent rank 0 within the liveness window); a
 * failure is also a learner_ranks event. */
int lt_train_keepalive(lt_train_t *t);
/* Rank 0: the other ranks leave lt_train_follow.  Idempotent. */
int lt_train_stop_ranks(void);
/* The job's trainer on the policy in policy_dir (every learner rank builds the same). */
int lt_train_build_trainer(const lt_config_t *c, const char *policy_dir, lt_trainer_t **out);
/* Ranks >= 1 of `train`: no loop, no workers, no buffer; only this rank's share of every step rank 0 trains,
 * until rank 0 stops.  0 or an LT_E* code. */
int lt_train_follow(const lt_config_t *cfg);

/* ---- supervised warm start (train/sft.c): `longtail sft`, and `train` with sft.enabled ---- */

typedef struct {
  const lt_config_t *cfg; /* sft.*, learner.threads, run.seed */
  lt_envs_t *envs;        /* demonstrations when sft.data is empty */
  const char *in_dir;     /* policy to start from */
  const char *out_dir;    /* where the tuned policy is written */
  FILE *metrics;          /* metrics.jsonl, or NULL */
  lt_buffer_t *buf;       /* run buffer for the sft/loss metric, or NULL */
  int progress;           /* progress lines on stderr */
} lt_sft_opts_t;

/* The policy a job starts from: model.path, or model.init drawn with run.seed
 * and written to init_dir.  The directory's absolute path goes to out. */
int lt_policy_source(const lt_config_t *cfg, const char *init_dir, char *out, size_t cap);
/* The policy dir as one model.safetensors (every version travels as one hashed file): dir itself, or a sharded
 * source (or, with bf16, any source: checkpoint.publish_dtype) rewritten once into out_dir with its tokenizer
 * files.  The folder used goes to out. */
int lt_policy_single_file(const char *dir, const char *out_dir, int bf16, char *out, size_t cap);
/* checkpoint.publish_dir: the version in dir copied whole to publish_dir/<sha>/ (train/publish.c). */
int lt_train_publish_copy(const char *dir, const char *publish_dir, const char *sha);
/* What a worker must respect, for WELCOME.model (docs/protocol.md): the vocabulary size, the ids that end a
 * turn, the chat format; *info is the caller's. */
int lt_policy_model_info(const char *dir, int *vocab, cJSON **info);

/* The policy a run starts from, version 0: lt_policy_source (into RUN_DIR/checkpoints/v0), tuned by the
 * supervised warm start when sft.enabled (RUN_DIR/checkpoints/v0-sft; its metrics to metrics and buf), as one
 * model.safetensors.  Its folder goes to out, the file's SHA-256 to sha; *sft_loss: the warm start's final
 * loss, -1 when it did not run. */
int lt_train_initial_policy(const lt_config_t *cfg, lt_envs_t *envs, const char *run_dir, FILE *metrics,
                            lt_buffer_t *buf, char *out, size_t cap, char sha[65], double *sft_loss);
/* Runs sft.steps steps; *final_loss receives the mean loss of the last tenth. */
int lt_sft_run(const lt_sft_opts_t *o, double *final_loss);

/* ---- `longtail replay` (train/replay.c): the batch a learner step trained on, recomputed under a
 * checkpoint — train–rollout mismatch, what the MIS masks keep, the loss the step started from — and what
 * other mask bounds would have kept ---- */

typedef struct {
  const char *run;                       /* run directory */
  const char *model;                     /* policy weights (checkpoints/vN) or a full checkpoint (policy/, critic/);
                                   NULL: the run's checkpoints/v<step − 1>, the weights the step started from */
  int64_t step;                          /* learner step whose batch is replayed; 0: the last one */
  const double *token_bounds;            /* what-if [lo, hi], or NULL */
  const double *traj_bounds;             /* what-if [lo, hi], or NULL */
  const lt_cfg_schema_t *const *schemas; /* to read the run's recorded config */
  int nschemas;
  int check; /* SQLite's full integrity check of the buffer first (else the cheap one) */
} lt_replay_opts_t;

/* *out: {"step", "model", "trajectories", "tokens", "objective", "recomputed": {...}, "logged": {...},
 * "what_if": {...} (with bounds)}.  Errors name the run, step or checkpoint. */
int lt_replay(const lt_replay_opts_t *o, cJSON **out);
/* `replay --fill-token-values`: for each step (o->step, or every step) that stored no per-token values, the
 * values recomputed with the weights it started from (its full checkpoint, else checkpoints/v<step − 1>; o->model
 * with o->step) and stored in the buffer marked recomputed, with those weights named; advantages only where
 * the step's critic is known (a full checkpoint, or group advantages).  *out: {"filled": [{"step",
 * "trajectories", "model", "advantages"}], "skipped": [{"step", "why"}]}. */
int lt_replay_fill(const lt_replay_opts_t *o, cJSON **out);

/* ---- `longtail retrain` (train/retrain.c): a run's learner steps trained again, offline, each on the
 * trajectories it consumed, from the run's starting policy (docs/replay.md) ---- */

typedef struct {
  const char *run;         /* the run directory retrained */
  const char *out;         /* DIR: a run folder of its own (buffer.db with metrics and checkpoints, every
                                   version in checkpoints/vN) */
  const char *const *sets; /* --set overrides of the run's config: a what-if (none: checked bit for bit) */
  int nsets;
  int64_t first, last; /* steps A..B written (0: from the first, to the last); those before A are trained
                                   too, to reach A's weights */
  const lt_cfg_schema_t *const *schemas; /* to read the run's recorded config */
  int nschemas;
  /* Each step written: same = 1 bit-identical to the run's version, 0 differs, -1 not compared (a what-if). */
  void (*step)(void *ud, const lt_train_result_t *r, int same);
  /* The held-out accuracy of a version (an evaluation round on the run's prompts), called for the versions the
   * run evaluated (step 0 among them) and recorded as eval/accuracy; NULL: none (train/ runs no episodes). */
  int (*eval)(void *ud, const lt_config_t *cfg, const char *model_dir, int64_t version, double *accuracy);
  void *ud;
} lt_retrain_opts_t;

typedef struct {
  int64_t steps;                   /* steps written */
  int64_t differs;                 /* the first step whose weights differ from the run's (0: none) */
  char tensor[256];                /* its first differing tensor ("": the run no longer keeps that version) */
  char sha[65], run_sha[65];       /* that step's weights here and in the run */
  double learner_s, run_learner_s; /* the written steps' learner time here and in the run (learner/step_s) */
} lt_retrain_result_t;

/* 0 when every written step is done (and, without --set, identical: else *res says where it differs, still 0);
 * an error names the step and what is missing (a trajectory, a checkpoint). */
int lt_retrain(const lt_retrain_opts_t *o, lt_retrain_result_t *res);
/* Learner ranks >= 1 of `mpirun -np R longtail retrain`: their share of each step rank 0 retrains, under the
 * run's config (with o's --set), until rank 0 stops them. */
int lt_retrain_follow(const lt_retrain_opts_t *o);

#endif
