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
  int status;               /* 0: ok; otherwise the LT_E* code of the failure (no reward) */
  double reward;            /* valid when status == 0 */
  cJSON *components;        /* object: component name → number; owned by the result */
  int attempts;             /* calls made (1 for local verifiers) */
  char *error;              /* detail when status != 0 */
  int zeroed;               /* a rule zeroed it (GenRM zero patterns, language): shaping leaves it at 0 */
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

/* ---- internal: shared by the rewards/ files ---- */

typedef enum { LT_RW_RULE, LT_RW_ENV, LT_RW_CODE, LT_RW_GENRM, LT_RW_VERIFIER, LT_RW_RUBRIC, LT_RW_MATH } lt__reward_type;

typedef struct {
  double tolerance;
  double math_tolerance;
  double format_penalty;
  int length_target;
  double length_coef;
  int script; /* 0 none, 1 latin, 2 cjk, 3 cyrillic */
  double language_coef;
} lt__reward_cfg_t;

/* Synchronous verifiers: fill res (status, reward, components). */
int lt__reward_rule(const lt__reward_cfg_t *c, const lt_reward_case_t *k, lt_reward_result_t *res);
/* Answer extraction shared by rule and math (NULL: none, or out of memory). */
char *lt__reward_trim_dup(const char *s, size_t n);
char *lt__reward_after_marker(const char *response); /* after the last "####", to the line's end */
char *lt__reward_last_boxed(const char *response);   /* inside the last \boxed{...} */
int lt__reward_math(const lt__reward_cfg_t *c, const lt_reward_case_t *k, lt_reward_result_t *res);
/* Fraction of the letters of s that are in `script` (1 when s has none). */
double lt__reward_script_fraction(const char *s, int script);
/* Adds the configured shaping components to an ok result. */
void lt__reward_shape(const lt__reward_cfg_t *c, const lt_reward_case_t *k, lt_reward_result_t *res);

/* The math verifier's pieces: LaTeX normalisation (math_latex.c; malloc'd,
 * NULL when out of memory) and the answer parser (math_expr.c). */
char *lt__math_normalize(const char *latex);

#define LT__MATH_MAX_NODES 1024
#define LT__MATH_MAX_VARS 8
#define LT__MATH_VAR_LEN 24

/* Node kinds; from LT_MN_TUPLE on they are not scalars. */
enum { LT_MN_NUM, LT_MN_VAR, LT_MN_ADD, LT_MN_SUB, LT_MN_MUL, LT_MN_DIV, LT_MN_NEG, LT_MN_POW, LT_MN_FACT,
       LT_MN_BINOM, LT_MN_FN, LT_MN_TUPLE, LT_MN_SET, LT_MN_LIST, LT_MN_UNION, LT_MN_EQ };
enum { LT_MF_SIN, LT_MF_COS, LT_MF_TAN, LT_MF_SEC, LT_MF_CSC, LT_MF_COT, LT_MF_ASIN, LT_MF_ACOS, LT_MF_ATAN, LT_MF_LN,
       LT_MF_LOG, LT_MF_EXP, LT_MF_SQRT, LT_MF_ABS, LT_MF_SINH, LT_MF_COSH, LT_MF_TANH };

typedef struct {
  int kind;
  int fn;        /* function (LT_MF_*), variable index, or a list's item count */
  int a, b;      /* operands; a list's first item */
  int next;      /* next item of the list this node is in, -1 at the end */
  char open, close; /* a tuple's brackets: () [] (] [) */
  long double v; /* a number's value */
} lt__mnode_t;

/* Both sides of a comparison parse into one pool, so that they share variables. */
typedef struct {
  lt__mnode_t n[LT__MATH_MAX_NODES];
  int nn;
  char vars[LT__MATH_MAX_VARS][LT__MATH_VAR_LEN];
  int nv;
} lt__math_t;

/* Parses a normalised answer into m; its root node, or -1 when it is no answer this parser knows. */
int lt__math_parse(lt__math_t *m, const char *text);
/* The value of scalar node k at variable values vals[m->nv]; NaN where undefined. */
long double lt__math_eval(const lt__math_t *m, int k, const long double *vals);

/* Judges over HTTP (genrm, verifier, rubric, with MetaRM): rewards/judge.c. */
typedef struct lt__judge lt__judge_t;
typedef struct lt__judge_req lt__judge_req_t;
typedef void (*lt__judge_cb)(lt_reward_result_t *res, void *ud);

int lt__judge_create(uv_loop_t *loop, const lt_config_t *cfg, lt__judge_t **out);
/* Asks the judge of `type`; cb gets the result (status set on failure) on the
 * loop, never inside this call.  *req can be cancelled until cb runs. */
int lt__judge_score(lt__judge_t *j, lt__reward_type type, const lt__reward_cfg_t *rc, const lt_reward_case_t *k,
                    lt__judge_cb cb, void *ud, lt__judge_req_t **req);
void lt__judge_cancel(lt__judge_req_t *req); /* its callback will not run */
/* Cancels everything; done(ud) once the loop has released the judge's handles. */
void lt__judge_close(lt__judge_t *j, void (*done)(void *), void *ud);

#endif
