/* Rewards: rule verifiers, sandboxed code tests, GenRM and model verifiers
 * over HTTP (libcurl multi on the caller's loop), shaping terms.
 *
 * CONTRACT (shared by rewards/, rollout/ and the CLI; extend, do not break). */
#ifndef LT_REWARDS_REWARD_H
#define LT_REWARDS_REWARD_H

#include <cjson/cJSON.h>
#include <uv.h>

#include "util/config.h"

typedef struct lt_rewarder lt_rewarder_t;

typedef struct {
  const char *domain;       /* selects rewards.domains.<domain> over rewards.type */
  const char *prompt;       /* the task as the user saw it */
  const char *response;     /* the policy's final response */
  const cJSON *reference;   /* the environment's reference (lt_episode_reference) or {"answer": ...} */
  const cJSON *messages;    /* the whole conversation (judges, format checks); may be NULL */
  int response_tokens;      /* for length penalties */
  int truncated;            /* the response was cut by a limit */
  int malformed_tool_calls; /* tool-call blocks the agent loop could not parse (format penalty) */
} lt_reward_case_t;

typedef struct {
  int status;        /* 0: ok; otherwise the LT_E* code of the failure (no reward) */
  double reward;     /* valid when status == 0 */
  cJSON *components; /* object: component name → number; owned by the result */
  int attempts;      /* calls made (1 for local verifiers) */
  char *error;       /* detail when status != 0 */
  int zeroed;        /* a rule zeroed it (GenRM zero patterns, language): shaping leaves it at 0 */
} lt_reward_result_t;

/* Called on the loop thread; the callee takes ownership of res's fields. */
typedef void (*lt_reward_cb)(lt_reward_result_t *res, void *ud);

/* cfg: a job config (its "rewards" and "sandbox" sections are used). */
int lt_rewarder_create(uv_loop_t *loop, const lt_config_t *cfg, lt_rewarder_t **out);
/* Scores a case asynchronously (copies what it needs).  Completes through cb
 * on the loop, never synchronously inside this call.  Transient failures are
 * retried with back-off; a reward that cannot be obtained completes with
 * status != 0 and no value. */
int lt_rewarder_score(lt_rewarder_t *r, const lt_reward_case_t *c, lt_reward_cb cb, void *ud);
/* Cancels in-flight work (their callbacks report LT_ECANCELED) and frees
 * everything once the loop has released its handles; done(ud) is called then. */
void lt_rewarder_close(lt_rewarder_t *r, void (*done)(void *ud), void *ud);

/* The rule verifier's answer extraction: the text after the last "####"
 * marker (or inside the last \boxed{...}), trimmed; NULL when there is none.
 * Exposed for the evaluator and tests. Caller frees. */
char *lt_reward_extract_answer(const char *response);
/* 1 if the extracted answer matches the reference (exact after whitespace
 * normalisation, or numerically within rel_tol when both are numbers). */
int lt_reward_answers_match(const char *got, const char *want, double rel_tol);

/* The math verifier (docs/rewards.md): the final answer of a response (the
 * last \boxed{...}, else the text after the last "####", else the whole
 * response when it is a bare answer), NULL when there is none; caller frees. */
char *lt_reward_math_extract(const char *response);
/* Mathematical equivalence of an answer with a reference: 1 equal, 0 not,
 * LT_EINVAL when either cannot be parsed (*why, if given, then names the side
 * and the reason, e.g. "answer_unparseable"), LT_ENOMEM. */
int lt_reward_math_equal(const char *answer, const char *reference, double rel_tol, const char **why);

/* The rewards domain's reward can produce (rewards/range.c): rewards.domains.<domain>.range or rewards.range when
 * declared, else [0, 1] for every type but env, widened by the shaping terms' bounds.  1 with [*lo, *hi]; 0 when
 * unbounded (an env reward without a declared range); LT_ECONFIG naming the key of a malformed range. */
int lt_reward_range(const lt_config_t *cfg, const char *domain, double *lo, double *hi);
/* The reward of a failed episode (a timeout, docs/losses.md): the lower bound of the domain's range, 0 when it is
 * unbounded or cfg is NULL. */
double lt_reward_failure(const lt_config_t *cfg, const char *domain);
/* 0, or LT_ECONFIG naming the first malformed declared range (rewards.range, rewards.domains.*.range); every
 * command that loads a job config runs it, so a bad range is refused before anything starts. */
int lt_reward_ranges_check(const lt_config_t *cfg);

#endif
