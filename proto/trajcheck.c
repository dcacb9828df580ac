/* A decoded trajectory against the run it claims to belong to: the decoder
 * knows only the wire format; this knows the model's vocabulary, the context
 * limit, the policy versions published so far and the domain's reward range. The daemon refuses what
 * fails before the commit; the learner quarantines what fails in a buffer
 * written before these checks existed. */
#include <math.h>

#include "proto/proto.h"
#include "util/error.h"

/* Correct for pass@1: the verifier's "correct" component when there is one. */
int lt_traj_correct(const lt_traj_t *t) {
  if (t->status != LT_TRAJ_OK) return 0;
  const cJSON *c = cJSON_GetObjectItemCaseSensitive(t->components, "correct");
  if (cJSON_IsNumber(c)) return c->valuedouble >= 0.5;
  return t->has_reward && t->reward >= 0.5;
}

int lt_traj_check(const lt_traj_t *t, const lt_traj_limits_t *lim) {
  if (lim->max_tokens > 0 && t->ntokens > lim->max_tokens)
    return lt_error_set(LT_ERANGE, "%d tokens: longer than rollout.max_context (%lld)", t->ntokens, (long long)lim->max_tokens);
  if (t->has_reward && !isfinite(t->reward)) return lt_error_set(LT_ERANGE, "reward is not finite");
  /* Rounding in the shaping sums may land a hair outside the exact bound. */
  double slack = 1e-9 * (1 + fabs(lim->reward_lo) + fabs(lim->reward_hi));
  if (t->has_reward && lim->reward_bounded && (t->reward < lim->reward_lo - slack || t->reward > lim->reward_hi + slack))
    return lt_error_set(LT_ERANGE, "reward %g outside what domain %s's reward can produce [%g, %g]", t->reward, t->domain,
                        lim->reward_lo, lim->reward_hi);
  if (t->status == LT_TRAJ_OK && !t->has_reward) return lt_error_set(LT_EINVAL, "status ok without a reward");
  for (int i = 0; i < t->ntokens; i++) {
    if (t->tokens[i] < 0 || t->tokens[i] >= lim->vocab)
      return lt_error_set(LT_ERANGE, "token %d: id %d outside the vocabulary [0, %d)", i, t->tokens[i], lim->vocab);
    if (!t->loss_mask[i]) continue;
    /* A generated token's version is one the daemon published, not a later one. */
    if (t->versions[i] < 0 || t->versions[i] > lim->max_version)
      return lt_error_set(LT_ERANGE, "token %d: policy version %d outside [0, %lld]", i, t->versions[i], (long long)lim->max_version);
    if (!isfinite(t->logprobs[i]) || t->logprobs[i] > 0)
      return lt_error_set(LT_ERANGE, "token %d: logprob %g is not a finite value <= 0", i, (double)t->logprobs[i]);
    if (t->support && t->support[i] > lim->vocab) /* (0: not recorded) */
      return lt_error_set(LT_ERANGE, "token %d: sampling support %d exceeds the vocabulary (%d)", i, t->support[i], lim->vocab);
  }
  size_t nr = (size_t)t->ntokens * (size_t)t->routing_layers * (size_t)t->routing_k;
  for (size_t i = 0; t->routing_probs && i < nr; i++)
    if (!(t->routing_probs[i] >= 0 && t->routing_probs[i] <= 1))
      return lt_error_set(LT_ERANGE, "routing probability %zu: %g outside [0, 1]", i, (double)t->routing_probs[i]);
  return 0;
}
