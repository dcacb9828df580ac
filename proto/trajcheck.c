/* A decoded trajectory against the run it claims to belong to: the decoder
 * knows only the wire format; this knows the model's vocabulary, the context
 * limit, the policy versions published so far and the domain's reward range. The daemon refuses what
 * fails before the commit; the learner quarantines what fails in a buffer
 * written before these checks existed.  Also how an episode may end: only a
 * budget truncates, and a timeout trains as a failure whatever a worker
 * claimed (docs/losses.md, "How an episode ends").  And which policy versions its trained tokens came from. */
#include <math.h>
#include <string.h>

#include "proto/proto.h"
#include "util/error.h"

int lt_reason_truncates(const char *reason) {
  static const char *const budgets[] = {"max_new_tokens", "context_limit", "turn_limit"};
  for (size_t i = 0; reason && i < sizeof budgets / sizeof budgets[0]; i++)
    if (!strcmp(reason, budgets[i])) return 1;
  return 0;
}

int lt_reason_is_timeout(const char *reason) {
  size_t n = reason ? strlen(reason) : 0, k = strlen("_timeout");
  return n > k && !strcmp(reason + n - k, "_timeout");
}

int lt_traj_timeout_fail(lt_traj_t *t, double reward) {
  if (t->status != LT_TRAJ_OK || !lt_reason_is_timeout(t->reason)) return 0;
  cJSON *c = cJSON_CreateObject();
  if (!c || !cJSON_AddNumberToObject(c, "timeout", reward)) {
    cJSON_Delete(c);
    return lt_error_set(LT_ENOMEM, "trajectory: out of memory");
  }
  cJSON_Delete(t->components);
  t->components = c;
  t->finish = LT_FINISH_TIMEOUT;
  t->has_reward = 1;
  t->reward = reward;
  return 1;
}

/* The domain's success (pass@1, the noise curriculum; lt_buffer_task_history counts the same): the verifier's
 * verdict (components correct or verifier) when there is one, else reward >= pass_threshold. */
int lt_traj_correct(const lt_traj_t *t, double pass_threshold) {
  if (t->status != LT_TRAJ_OK) return 0;
  const cJSON *c = cJSON_GetObjectItemCaseSensitive(t->components, "correct");
  if (!cJSON_IsNumber(c)) c = cJSON_GetObjectItemCaseSensitive(t->components, "verifier");
  if (cJSON_IsNumber(c)) return c->valuedouble >= 0.5;
  return t->has_reward && t->reward >= pass_threshold;
}

int lt_traj_check(const lt_traj_t *t, const lt_traj_limits_t *lim) {
  /* Only a budget is bootstrapped: a cut for any other reason would be paid the critic's optimism. */
  if (t->finish == LT_FINISH_TRUNCATED && !lt_reason_truncates(t->reason) && !lt_reason_is_timeout(t->reason))
    return lt_error_set(LT_EINVAL,
                        "finish truncated with reason '%s': only max_new_tokens, context_limit and turn_limit "
                        "truncate; a timeout's reason ends in _timeout",
                        t->reason ? t->reason : "");
  if (t->finish == LT_FINISH_TIMEOUT && !lt_reason_is_timeout(t->reason))
    return lt_error_set(LT_EINVAL, "finish timeout with reason '%s': a timeout's reason ends in _timeout",
                        t->reason ? t->reason : "");
  /* The limit is per context: a trajectory of several (an edited or compacted history) may hold more. */
  for (int k = 0; lim->max_tokens > 0 && k < (t->nseqs > 1 ? t->nseqs : 1); k++) {
    int a = t->nseqs > 1 ? t->seq_starts[k] : 0,
        b = t->nseqs > 1 && k + 1 < t->nseqs ? t->seq_starts[k + 1] : t->ntokens;
    if (b - a > lim->max_tokens)
      return lt_error_set(LT_ERANGE, "%d tokens%s: longer than rollout.max_context (%lld)", b - a,
                          t->nseqs > 1 ? " in one context" : "", (long long)lim->max_tokens);
  }
  if (t->has_reward && !isfinite(t->reward)) return lt_error_set(LT_ERANGE, "reward is not finite");
  /* Rounding in the shaping sums may land a hair outside the exact bound. */
  double slack = 1e-9 * (1 + fabs(lim->reward_lo) + fabs(lim->reward_hi));
  if (t->has_reward && lim->reward_bounded &&
      (t->reward < lim->reward_lo - slack || t->reward > lim->reward_hi + slack))
    return lt_error_set(LT_ERANGE, "reward %g outside what domain %s's reward can produce [%g, %g]", t->reward,
                        t->domain, lim->reward_lo, lim->reward_hi);
  if (t->status == LT_TRAJ_OK && !t->has_reward) return lt_error_set(LT_EINVAL, "status ok without a reward");
  for (int i = 0; i < t->ntokens; i++) {
    if (t->tokens[i] < 0 || t->tokens[i] >= lim->vocab)
      return lt_error_set(LT_ERANGE, "token %d: id %d outside the vocabulary [0, %d)", i, t->tokens[i], lim->vocab);
    if (!t->loss_mask[i]) continue;
    /* A generated token's version is one the daemon published, not a later one. */
    if (t->versions[i] < 0 || t->versions[i] > lim->max_version)
      return lt_error_set(LT_ERANGE, "token %d: policy version %d outside [0, %lld]", i, t->versions[i],
                          (long long)lim->max_version);
    if (!isfinite(t->logprobs[i]) || t->logprobs[i] > 0)
      return lt_error_set(LT_ERANGE, "token %d: logprob %g is not a finite value <= 0", i, (double)t->logprobs[i]);
    if (t->support && t->support[i] > lim->vocab) /* (0: not recorded) */
      return lt_error_set(LT_ERANGE, "token %d: sampling support %d exceeds the vocabulary (%d)", i, t->support[i],
                          lim->vocab);
  }
  size_t nr = (size_t)t->ntokens * (size_t)t->routing_layers * (size_t)t->routing_k;
  for (size_t i = 0; t->routing_probs && i < nr; i++)
    if (!(t->routing_probs[i] >= 0 && t->routing_probs[i] <= 1))
      return lt_error_set(LT_ERANGE, "routing probability %zu: %g outside [0, 1]", i, (double)t->routing_probs[i]);
  return 0;
}

void lt_traj_versions(const lt_traj_t *t, int64_t *min, int64_t *max) {
  *min = *max = -1;
  for (int i = 0; i < t->ntokens; i++)
    if (t->loss_mask[i]) {
      if (*min < 0 || t->versions[i] < *min) *min = t->versions[i];
      if (t->versions[i] > *max) *max = t->versions[i];
    }
}
