/* Held-out evaluation without a daemon: a run's evaluation prompts through the agent loop on the builtin engine
 * with one policy version, greedy, as the run's workers played an evaluation round (`longtail retrain`'s what-if
 * folders, docs/replay.md). */
#ifndef LT_ROLLOUT_EVALUATE_H
#define LT_ROLLOUT_EVALUATE_H

#include "util/config.h"

typedef struct {
  const lt_config_t *cfg; /* the run's: envs, rewards, rollout.*, eval.prompts, run.seed */
  const char *model_dir;  /* the policy version evaluated */
  int64_t version;
  int slots; /* episodes at once */
} lt_eval_opts_t;

/* The eval.prompts held-out prompts a round of the run used (prompt i of domain i mod the domains, sampled as
 * held-out), one greedy episode each: *correct of *n solved. */
int lt_rollout_evaluate(const lt_eval_opts_t *o, int *correct, int *n);

#endif
