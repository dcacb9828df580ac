/* The math verifier (rewards.type "math"): extracts a response's final answer
 * and judges it against the reference by mathematical equivalence: numbers
 * within a tolerance, expressions equal at several points, tuples and
 * intervals in order, sets and unions in any order, multiple-choice letters. */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rewards/internal.h"
#include "util/error.h"

#define MAX_ANSWER 4096 /* longer "answers" are not answers (and bound the work) */
#define MAX_BARE 200    /* a whole response up to this long, on one line, may be the answer */
#define POINTS 8        /* random points at which expressions in variables are compared */
#define MIN_POINTS 3    /* ... of which at least this many must be defined on both sides */
#define TOL_FLOOR 1e-12 /* rounding of long double evaluation, even with tolerance 0 */

char *lt_reward_math_extract(const char *r) {
  char *a = lt__reward_last_boxed(r);
  if (!a) a = lt__reward_after_marker(r);
  if (a || strstr(r, "\\boxed")) return a; /* a box that does not close is no answer */
  size_t n = strlen(r);
  while (n && isspace((unsigned char)r[n - 1])) n--;
  size_t lead = strspn(r, " \t\r\n");
  if (lead >= n || n - lead > MAX_BARE || memchr(r + lead, '\n', n - lead)) return NULL;
  return lt__reward_trim_dup(r + lead, n - lead);
}

typedef struct {
  lt__math_t *m;
  double tol;
} cmp_t;

static int close_enough(long double x, long double y, double tol) {
  if (isinf(x) || isinf(y)) return x == y;
  if (isnan(x) || isnan(y)) return 0;
  long double s = fabsl(y) > 1 ? fabsl(y) : 1;
  return fabsl(x - y) <= tol * s;
}

/* Equal at POINTS pseudo-random points (fixed, so a verdict is reproducible)
 * of the first range where at least MIN_POINTS are defined on both sides
 * (a point where both are undefined does not count): [0.5, 2.5) first, where
 * logs, roots and quotients of the usual answers are defined, then larger,
 * then negative values. */
static int scalar_eq(const cmp_t *c, int x, int y) {
  static const long double ranges[][2] = {{0.5L, 2.0L}, {2.5L, 10.0L}, {-10.5L, 10.0L}}; /* start, width */
  long double vals[LT__MATH_MAX_VARS] = {0};
  if (c->m->nv == 0) return close_enough(lt__math_eval(c->m, x, vals), lt__math_eval(c->m, y, vals), c->tol);
  unsigned long long st = 0x9E3779B97F4A7C15ULL;
  for (size_t r = 0; r < sizeof ranges / sizeof ranges[0]; r++) {
    int defined = 0;
    for (int t = 0; t < POINTS; t++) {
      for (int i = 0; i < c->m->nv; i++) {
        st = st * 6364136223846793005ULL + 1442695040888963407ULL;
        vals[i] = ranges[r][0] + ranges[r][1] * (long double)(st >> 11) / 9007199254740992.0L;
      }
      long double a = lt__math_eval(c->m, x, vals), b = lt__math_eval(c->m, y, vals);
      if (isnan(a) && isnan(b)) continue;
      if (!close_enough(a, b, c->tol)) return 0;
      defined++;
    }
    if (defined >= MIN_POINTS) return 1;
  }
  return 0;
}

static int node_eq(const cmp_t *c, int x, int y);

/* Items of two lists in order. */
static int ordered_eq(const cmp_t *c, int x, int y) {
  const lt__mnode_t *n = c->m->n;
  if (n[x].fn != n[y].fn) return 0;
  for (int a = n[x].a, b = n[y].a; a >= 0; a = n[a].next, b = n[b].next)
    if (!node_eq(c, a, b)) return 0;
  return 1;
}

/* Items of two lists in any order (each item matched once). */
static int unordered_eq(const cmp_t *c, int x, int y) {
  const lt__mnode_t *n = c->m->n;
  int used[LT__MATH_MAX_NODES / 2 + 1] = {0};
  if (n[x].fn != n[y].fn || n[x].fn > (int)(sizeof used / sizeof used[0])) return 0;
  for (int a = n[x].a; a >= 0; a = n[a].next) {
    int j = 0, b;
    for (b = n[y].a; b >= 0; b = n[b].next, j++)
      if (!used[j] && node_eq(c, a, b)) break;
    if (b < 0) return 0;
    used[j] = 1;
  }
  return 1;
}

static int is_scalar(int kind) { return kind < LT_MN_TUPLE; }

static int node_eq(const cmp_t *c, int x, int y) {
  const lt__mnode_t *a = &c->m->n[x], *b = &c->m->n[y];
  if (is_scalar(a->kind) && is_scalar(b->kind)) return scalar_eq(c, x, y);
  /* {3} is 3 */
  if (a->kind == LT_MN_SET && a->fn == 1 && is_scalar(b->kind)) return node_eq(c, a->a, y);
  if (b->kind == LT_MN_SET && b->fn == 1 && is_scalar(a->kind)) return node_eq(c, x, b->a);
  switch (a->kind) {
  case LT_MN_EQ: /* an equation either way round */
    return b->kind == LT_MN_EQ &&
           ((node_eq(c, a->a, b->a) && node_eq(c, a->b, b->b)) || (node_eq(c, a->a, b->b) && node_eq(c, a->b, b->a)));
  case LT_MN_TUPLE: /* ordered; an interval's ends must be alike; a bare list is in order */
    if (b->kind == LT_MN_LIST) return ordered_eq(c, x, y);
    return b->kind == LT_MN_TUPLE && a->open == b->open && a->close == b->close && ordered_eq(c, x, y);
  case LT_MN_LIST:
    if (b->kind == LT_MN_TUPLE) return ordered_eq(c, x, y);
    return (b->kind == LT_MN_LIST || b->kind == LT_MN_SET) && unordered_eq(c, x, y);
  case LT_MN_SET: return (b->kind == LT_MN_LIST || b->kind == LT_MN_SET) && unordered_eq(c, x, y);
  case LT_MN_UNION: return b->kind == LT_MN_UNION && unordered_eq(c, x, y);
  }
  return 0;
}

/* A multiple-choice letter: "B", "(B)", "B)" or "B." (after normalisation
 * turned \text{(B)} into (B)); 0 if s is not one. */
static char choice(const char *s) {
  while (*s == ' ' || *s == '(') s++;
  char l = *s;
  if (l < 'A' || l > 'Z') return 0;
  for (s++; *s; s++)
    if (*s != ' ' && *s != ')' && *s != '.' && *s != ':') return 0;
  return l;
}

/* Equal but for white space. */
static int same_text(const char *a, const char *b) {
  for (;;) {
    while (isspace((unsigned char)*a)) a++;
    while (isspace((unsigned char)*b)) b++;
    if (*a != *b) return 0;
    if (!*a) return 1;
    a++, b++;
  }
}

static int judge(const char *na, const char *nr, double tol, const char **why) {
  if (!*nr || !*na) return *why = !*nr ? "reference_unparseable" : "answer_unparseable", LT_EINVAL;
  if (same_text(na, nr)) return 1;
  char want = choice(nr);
  if (want) return choice(na) == want;
  lt__math_t *m = calloc(1, sizeof *m);
  if (!m) return LT_ENOMEM;
  int rc, r = lt__math_parse(m, nr), a = r < 0 ? -1 : lt__math_parse(m, na);
  if (r < 0 || a < 0) {
    *why = r < 0 ? "reference_unparseable" : "answer_unparseable";
    rc = LT_EINVAL;
  } else {
    cmp_t c = {.m = m, .tol = tol > TOL_FLOOR ? tol : TOL_FLOOR};
    rc = node_eq(&c, a, r);
  }
  free(m);
  return rc;
}

int lt_reward_math_equal(const char *answer, const char *reference, double tol, const char **why) {
  const char *w = NULL;
  if (!why) why = &w;
  *why = NULL;
  if (strlen(answer) > MAX_ANSWER) return *why = "answer_too_long", LT_EINVAL;
  if (strlen(reference) > MAX_ANSWER) return *why = "reference_too_long", LT_EINVAL;
  char *na = lt__math_normalize(answer), *nr = lt__math_normalize(reference);
  int rc = na && nr ? judge(na, nr, tol, why) : LT_ENOMEM;
  free(na);
  free(nr);
  return rc;
}

int lt__reward_math(const lt__reward_cfg_t *c, const lt_reward_case_t *k, lt_reward_result_t *res) {
  const cJSON *ans = cJSON_GetObjectItemCaseSensitive(k->reference, "answer");
  char num[64];
  const char *want = cJSON_IsString(ans) ? ans->valuestring : NULL;
  if (cJSON_IsNumber(ans)) snprintf(num, sizeof num, "%.17g", ans->valuedouble), want = num;
  res->attempts = 1;
  if (!want) {
    res->status = LT_EINVAL;
    res->error = strdup("math reward: the reference has no \"answer\" (string or number)");
    return 0;
  }
  char *got = lt_reward_math_extract(k->response ? k->response : "");
  const char *why = NULL;
  int found = got != NULL, rc = got ? lt_reward_math_equal(got, want, c->math_tolerance, &why) : 0;
  free(got);
  if (rc == LT_ENOMEM) {
    res->status = rc;
    res->error = strdup("math reward: out of memory");
    return 0;
  }
  res->reward = rc == 1;
  cJSON_AddNumberToObject(res->components, "correct", rc == 1);
  cJSON_AddNumberToObject(res->components, "format", found);
  if (why) cJSON_AddNumberToObject(res->components, why, 1);
  return 0;
}
