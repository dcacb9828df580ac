/* `longtail replay`: the batch a learner step trained on, recomputed under a
 * checkpoint — train–rollout mismatch, what the MIS masks keep, the loss the
 * step started from — and what other mask bounds would have kept. */
#ifndef LT_ORCHESTRATOR_REPLAY_H
#define LT_ORCHESTRATOR_REPLAY_H

#include <cjson/cJSON.h>
#include <stdint.h>

#include "util/config.h"

typedef struct {
  const char *run;              /* run directory */
  const char *model;            /* policy weights (checkpoints/vN) or a full checkpoint (policy/, critic/);
                                   NULL: the run's checkpoints/v<step − 1>, the weights the step started from */
  int64_t step;                 /* learner step whose batch is replayed; 0: the last one */
  const double *token_bounds;   /* what-if [lo, hi], or NULL */
  const double *traj_bounds;    /* what-if [lo, hi], or NULL */
  const lt_cfg_schema_t *const *schemas; /* to read the run's recorded config */
  int nschemas;
} lt_replay_opts_t;

/* *out: {"step", "model", "trajectories", "tokens", "objective", "recomputed": {...}, "logged": {...},
 * "what_if": {...} (with bounds)}.  Errors name the run, step or checkpoint. */
int lt_replay(const lt_replay_opts_t *o, cJSON **out);

#endif
