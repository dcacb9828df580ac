/* The metrics a learner step reports (docs/metrics.md), named once: the daemon records them for the live run and
 * retrain for the run it writes, so the two folders read alike. */
#include <stdio.h>

#include "train/train.h"

void lt_train_result_metrics(const lt_train_result_t *r, lt_train_metric_fn fn, void *ud) {
  const lt_step_stats_t *s = &r->st;
  struct {
    const char *name;
    double v;
  } m[] = {
      {"reward/mean", r->reward_mean},
      {"reward/min", r->reward_min},
      {"reward/max", r->reward_max},
      {"rollout/truncation_rate", r->trunc_rate},
      {"rollout/turns_mean", r->turns_mean},
      {"mis/token_accept", s->token_accept},
      {"mis/traj_accept", s->traj_accept},
      {"mis/kept_fraction", s->kept_fraction},
      {"mismatch/abs_log_ratio", s->mismatch},
      {"mismatch/kl", s->kl_rollout},
      {"policy/entropy", s->entropy},
      {"actor/loss", s->actor_loss},
      {"actor/grad_norm", s->actor_grad_norm},
      {"actor/lr", s->lr},
      {"actor/clip_frac", s->clip_frac},
      {"actor/skipped_updates", s->actor_skipped_updates},
      {"critic/value_loss", s->critic_loss},
      {"critic/grad_norm", s->critic_grad_norm},
      {"critic/value_mean", s->value_mean},
      {"critic/return_mean", s->return_mean},
      {"advantage/mean", s->adv_mean},
      {"advantage/std", s->adv_std},
      {"advantage/min", s->adv_min},
      {"advantage/max", s->adv_max},
      {"kl/ref", s->kl_ref},
      {"staleness/mean", r->stale_mean},
      {"staleness/min", r->stale_min},
      {"staleness/max", r->stale_max},
      {"scheduler/max_staleness", r->max_staleness},
      {"buffer/stale", r->marked_stale},
      {"buffer/filtered", r->filtered},
      {"learner/step_s", r->step_s},
      {"learner/wait_s", r->wait_s},
      {"learner/publish_s", r->publish_s},
      {"learner/tokens_per_s", r->step_s > 0 ? s->tokens / r->step_s : 0},
      {"batch/trajectories", s->trajectories},
      {"batch/tokens", s->tokens},
      {"mis/sampling_unknown", r->skip_sampling},
      {"mis/routing_unknown", r->skip_routing},
      {"learner/ranks", r->ranks},
  };
  for (size_t i = 0; i < sizeof m / sizeof m[0]; i++) fn(ud, m[i].name, m[i].v);
  if (s->routing_confidence >= 0) fn(ud, "routing/confidence_learner", s->routing_confidence);
  if (r->route_rollout >= 0) fn(ud, "routing/confidence_rollout", r->route_rollout);
  for (int i = 0; i < LT_TRAIN_STALE_BINS; i++) {
    char nm[96];
    snprintf(nm, sizeof nm, i == LT_TRAIN_STALE_BINS - 1 ? "staleness/hist_%d+" : "staleness/hist_%d", i);
    fn(ud, nm, r->stale_hist[i]);
  }
  for (int i = 0; i < r->ndom; i++) {
    char nm[96];
    snprintf(nm, sizeof nm, "reward/%s", r->dom[i]);
    fn(ud, nm, r->dom_reward[i]);
    snprintf(nm, sizeof nm, "reward/%s/min", r->dom[i]);
    fn(ud, nm, r->dom_min[i]);
    snprintf(nm, sizeof nm, "reward/%s/max", r->dom[i]);
    fn(ud, nm, r->dom_max[i]);
  }
}
