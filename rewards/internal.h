/* Internals of rewards/, shared by its files (nothing outside rewards/ includes this): reward types and
 * settings, the rule and math checks and their parser, shaping, and the judge client (GenRM, verifier, rubric). */
#ifndef LT_REWARDS_INTERNAL_H
#define LT_REWARDS_INTERNAL_H

#include "rewards/reward.h"

typedef enum {
  LT_RW_RULE,
  LT_RW_ENV,
  LT_RW_CODE,
  LT_RW_GENRM,
  LT_RW_VERIFIER,
  LT_RW_RUBRIC,
  LT_RW_MATH
} lt__reward_type;

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
enum {
  LT_MN_NUM,
  LT_MN_VAR,
  LT_MN_ADD,
  LT_MN_SUB,
  LT_MN_MUL,
  LT_MN_DIV,
  LT_MN_NEG,
  LT_MN_POW,
  LT_MN_FACT,
  LT_MN_BINOM,
  LT_MN_FN,
  LT_MN_TUPLE,
  LT_MN_SET,
  LT_MN_LIST,
  LT_MN_UNION,
  LT_MN_EQ
};
enum {
  LT_MF_SIN,
  LT_MF_COS,
  LT_MF_TAN,
  LT_MF_SEC,
  LT_MF_CSC,
  LT_MF_COT,
  LT_MF_ASIN,
  LT_MF_ACOS,
  LT_MF_ATAN,
  LT_MF_LN,
  LT_MF_LOG,
  LT_MF_EXP,
  LT_MF_SQRT,
  LT_MF_ABS,
  LT_MF_SINH,
  LT_MF_COSH,
  LT_MF_TANH
};

typedef struct {
  int kind;
  int fn;           /* function (LT_MF_*), variable index, or a list's item count */
  int a, b;         /* operands; a list's first item */
  int next;         /* next item of the list this node is in, -1 at the end */
  char open, close; /* a tuple's brackets: () [] (] [) */
  long double v;    /* a number's value */
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

/* Judges over HTTP (genrm, verifier, rubric, with the reasoning check): rewards/judge.c. */
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
