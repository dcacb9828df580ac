/* arith: multi-digit arithmetic with worked column steps (docs/envs.md).
 *
 *   478+356=   →   8+6=14 7+5+1=13 4+3+1=8 #### 834
 *   503-178=   →   3-8+10=5 0-7-1+10=2 5-1-1=3 #### 325
 *   478*6=     →   8*6=48 7*6+4=46 4*6+4=28 #### 2868
 *
 * Numbers are digit strings, so the 11–13-digit problems of seed 001 App.
 * D.2.1 work as well as small ones.  Held-out problems are a fixed hash slice
 * of the problem space that training never samples. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "envs/internal.h"
#include "util/buf.h"
#include "util/error.h"
#include "util/rng.h"

#define MAXD 32

typedef struct {
  char domain[64];
  int dmin, dmax;
  char ops[4];
  int nops;
  int steps;
  double demo_error_rate;
  double eval_fraction;
  char *system;
  uint64_t seed;
} arith_t;

typedef struct {
  char a[MAXD + 1], b[MAXD + 1], answer[2 * MAXD + 2];
  char op;
} problem_t;

static int param_int(const char *dom, const cJSON *p, const char *k, int def, int lo, int hi, int *out) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(p, k);
  if (!v) {
    *out = def;
    return 0;
  }
  if (!cJSON_IsNumber(v) || v->valuedouble != (int)v->valuedouble || v->valuedouble < lo || v->valuedouble > hi)
    return lt_error_set(LT_ECONFIG, "envs.%s.params.%s: expected an integer in [%d, %d]", dom, k, lo, hi);
  *out = (int)v->valuedouble;
  return 0;
}

static int param_num(const char *dom, const cJSON *p, const char *k, double def, double lo, double hi, double *out) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(p, k);
  if (!v) {
    *out = def;
    return 0;
  }
  if (!cJSON_IsNumber(v) || v->valuedouble < lo || v->valuedouble > hi)
    return lt_error_set(LT_ECONFIG, "envs.%s.params.%s: expected a number in [%g, %g]", dom, k, lo, hi);
  *out = v->valuedouble;
  return 0;
}

static int arith_init(const char *dom, const cJSON *p, uint64_t seed, void **state) {
  static const char *known[] = {"digits_min",      "digits_max",    "ops",   "steps",
                                "demo_error_rate", "eval_fraction", "system"};
  for (const cJSON *c = p->child; c; c = c->next) {
    size_t i = 0;
    while (i < sizeof known / sizeof known[0] && strcmp(known[i], c->string)) i++;
    if (i == sizeof known / sizeof known[0])
      return lt_error_set(LT_ECONFIG,
                          "envs.%s.params.%s: unknown key (arith takes digits_min, digits_max, ops, steps, "
                          "demo_error_rate, eval_fraction, system)",
                          dom, c->string);
  }
  arith_t *a = calloc(1, sizeof *a);
  if (!a) return lt_error_set(LT_ENOMEM, "arith: out of memory");
  snprintf(a->domain, sizeof a->domain, "%s", dom);
  a->seed = seed;
  int rc;
  if ((rc = param_int(dom, p, "digits_min", 1, 1, MAXD, &a->dmin)) ||
      (rc = param_int(dom, p, "digits_max", 3, 1, MAXD, &a->dmax)) ||
      (rc = param_num(dom, p, "demo_error_rate", 0.0, 0, 1, &a->demo_error_rate)) ||
      (rc = param_num(dom, p, "eval_fraction", 0.1, 0.001, 0.5, &a->eval_fraction)))
    goto fail;
  if (a->dmax < a->dmin) {
    rc = lt_error_set(LT_ECONFIG, "envs.%s.params.digits_max: below digits_min", dom);
    goto fail;
  }
  const cJSON *st = cJSON_GetObjectItemCaseSensitive(p, "steps");
  if (st && !cJSON_IsBool(st)) {
    rc = lt_error_set(LT_ECONFIG, "envs.%s.params.steps: expected boolean", dom);
    goto fail;
  }
  a->steps = st ? cJSON_IsTrue(st) : 1;
  const cJSON *ops = cJSON_GetObjectItemCaseSensitive(p, "ops");
  if (!ops) {
    a->ops[a->nops++] = '+';
  } else {
    if (!cJSON_IsArray(ops) || cJSON_GetArraySize(ops) < 1 || cJSON_GetArraySize(ops) > 3) {
      rc = lt_error_set(LT_ECONFIG, "envs.%s.params.ops: expected a list of \"+\", \"-\", \"*\"", dom);
      goto fail;
    }
    for (const cJSON *o = ops->child; o; o = o->next) {
      if (!cJSON_IsString(o) || strlen(o->valuestring) != 1 || !strchr("+-*", o->valuestring[0])) {
        rc = lt_error_set(LT_ECONFIG, "envs.%s.params.ops: expected a list of \"+\", \"-\", \"*\"", dom);
        goto fail;
      }
      a->ops[a->nops++] = o->valuestring[0];
    }
  }
  const cJSON *sys = cJSON_GetObjectItemCaseSensitive(p, "system");
  if (sys && (!cJSON_IsString(sys) || !(a->system = strdup(sys->valuestring)))) {
    rc = lt_error_set(LT_ECONFIG, "envs.%s.params.system: expected string", dom);
    goto fail;
  }
  *state = a;
  return 0;
fail:
  free(a);
  return rc;
}

static void arith_free(void *s) {
  arith_t *a = s;
  if (a) free(a->system);
  free(a);
}

static void random_number(lt_rng_t *r, int digits, char *out) {
  for (int i = 0; i < digits; i++)
    out[i] = (char)('0' + (i == 0 && digits > 1 ? 1 + lt_rng_below(r, 9) : lt_rng_below(r, 10)));
  out[digits] = 0;
}

static int cmp_num(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  if (la != lb) return la < lb ? -1 : 1;
  return strcmp(a, b);
}

/* Worked steps (into w, may be NULL) and the answer; drop = 1 leaves out the
 * first carry or borrow (the demonstrations' systematic mistake). */
static void solve(const problem_t *p, int drop, lt_buf_t *w, char *answer) {
  int la = (int)strlen(p->a), lb = (int)strlen(p->b);
  int n = p->op == '*' ? la : (la > lb ? la : lb);
  char digits[2 * MAXD + 2];
  int nd = 0, carry = 0, dropped = 0;
  for (int i = 0; i < n; i++) {
    int x = i < la ? p->a[la - 1 - i] - '0' : 0;
    int y = p->op == '*' ? p->b[0] - '0' : (i < lb ? p->b[lb - 1 - i] - '0' : 0);
    int c = carry;
    if (drop && c && !dropped) {
      c = 0;
      dropped = 1;
    }
    if (w && i) lt_buf_putc(w, ' ');
    if (p->op == '+') {
      int s = x + y + c;
      if (w) lt_buf_printf(w, c ? "%d+%d+%d=%d" : "%d+%d=%d", x, y, c ? c : s, s);
      digits[nd++] = (char)('0' + s % 10);
      carry = s / 10;
      if (i == n - 1 && carry) digits[nd++] = '1';
    } else if (p->op == '-') {
      int s = x - y - c, borrow = s < 0;
      if (w) {
        lt_buf_printf(w, "%d-%d", x, y);
        if (c) lt_buf_puts(w, "-1");
        lt_buf_printf(w, borrow ? "+10=%d" : "=%d", borrow ? s + 10 : s);
      }
      digits[nd++] = (char)('0' + (borrow ? s + 10 : s));
      carry = borrow;
    } else {
      int s = x * y + c;
      if (w) lt_buf_printf(w, c ? "%d*%d+%d=%d" : "%d*%d=%d", x, y, c ? c : s, s);
      digits[nd++] = (char)('0' + s % 10);
      carry = s / 10;
      if (i == n - 1 && carry) digits[nd++] = (char)('0' + carry);
    }
  }
  /* A dropped borrow can leave the result negative: render what the steps say. */
  while (nd > 1 && digits[nd - 1] == '0') nd--;
  for (int i = 0; i < nd; i++) answer[i] = digits[nd - 1 - i];
  answer[nd] = 0;
  if (w) lt_buf_printf(w, "%s#### %s", n ? " " : "", answer);
}

static uint64_t problem_hash(const problem_t *p) {
  uint64_t h = 1469598103934665603ull;
  for (const char *s = p->a; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
  h = (h ^ (uint8_t)p->op) * 1099511628211ull;
  for (const char *s = p->b; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
  return lt_rng_mix(h, 0x41524954ull);
}

static int draw(const arith_t *a, uint64_t index, int eval, problem_t *p) {
  lt_rng_t r;
  lt_rng_seed(&r, lt_rng_mix(a->seed ^ (eval ? 0x5eedull : 0), index));
  uint64_t cut = (uint64_t)(a->eval_fraction * 1e6);
  for (int tries = 0; tries < 10000; tries++) {
    p->op = a->ops[lt_rng_below(&r, (uint64_t)a->nops)];
    int da = a->dmin + (int)lt_rng_below(&r, (uint64_t)(a->dmax - a->dmin + 1));
    int db = p->op == '*' ? 1 : a->dmin + (int)lt_rng_below(&r, (uint64_t)(a->dmax - a->dmin + 1));
    random_number(&r, da, p->a);
    random_number(&r, db, p->b);
    if (p->op == '-' && cmp_num(p->a, p->b) < 0) {
      char t[MAXD + 1];
      memcpy(t, p->a, sizeof t);
      memcpy(p->a, p->b, sizeof t);
      memcpy(p->b, t, sizeof t);
    }
    int held_out = problem_hash(p) % 1000000 < cut;
    if (held_out == eval) {
      solve(p, 0, NULL, p->answer);
      return 0;
    }
  }
  return lt_error_set(LT_EINVAL, "envs.%s: cannot draw a %s problem: the problem space is too small for eval_fraction",
                      a->domain, eval ? "held-out" : "training");
}

static cJSON *opening(const arith_t *a, const problem_t *p) {
  cJSON *m = cJSON_CreateArray();
  char q[3 * MAXD];
  snprintf(q, sizeof q, "%s%c%s=", p->a, p->op, p->b);
  if (a->system) {
    cJSON *s = cJSON_CreateObject();
    cJSON_AddStringToObject(s, "role", "system");
    cJSON_AddStringToObject(s, "content", a->system);
    cJSON_AddItemToArray(m, s);
  }
  cJSON *u = cJSON_CreateObject();
  cJSON_AddStringToObject(u, "role", "user");
  cJSON_AddStringToObject(u, "content", q);
  cJSON_AddItemToArray(m, u);
  return m;
}

static int arith_sample(void *s, uint64_t index, int eval, cJSON **spec) {
  problem_t p;
  int rc = draw(s, index, eval, &p);
  if (rc < 0) return rc;
  cJSON *j = cJSON_CreateObject();
  char op[2] = {p.op, 0};
  if (!j || !cJSON_AddStringToObject(j, "a", p.a) || !cJSON_AddStringToObject(j, "op", op) ||
      !cJSON_AddStringToObject(j, "b", p.b) || !cJSON_AddStringToObject(j, "answer", p.answer)) {
    cJSON_Delete(j);
    return lt_error_set(LT_ENOMEM, "arith: out of memory");
  }
  *spec = j;
  return 0;
}

static int arith_demo(void *s, uint64_t index, cJSON **messages, char **response) {
  arith_t *a = s;
  problem_t p;
  int rc = draw(a, index, 0, &p);
  if (rc < 0) return rc;
  lt_rng_t r;
  lt_rng_seed(&r, lt_rng_mix(a->seed ^ 0xde30ull, index));
  int wrong = lt_rng_uniform(&r) < a->demo_error_rate;
  lt_buf_t w = {0};
  char ans[2 * MAXD + 2];
  if (a->steps) solve(&p, wrong, &w, ans);
  else {
    solve(&p, wrong, NULL, ans);
    lt_buf_printf(&w, "#### %s", ans);
  }
  *messages = opening(a, &p);
  *response = lt_buf_take(&w);
  if (!*messages || !*response) {
    cJSON_Delete(*messages);
    free(*response);
    return lt_error_set(LT_ENOMEM, "arith: out of memory");
  }
  return 0;
}

/* A spec is peer input (it arrives in a TASK): every field is checked. */
static int spec_problem(const arith_t *a, const cJSON *spec, problem_t *p) {
  const cJSON *x = cJSON_GetObjectItemCaseSensitive(spec, "a"), *y = cJSON_GetObjectItemCaseSensitive(spec, "b");
  const cJSON *op = cJSON_GetObjectItemCaseSensitive(spec, "op");
  if (!cJSON_IsString(x) || !cJSON_IsString(y) || !cJSON_IsString(op) || strlen(op->valuestring) != 1 ||
      !strchr("+-*", op->valuestring[0]) || strlen(x->valuestring) < 1 || strlen(x->valuestring) > MAXD ||
      strlen(y->valuestring) < 1 || strlen(y->valuestring) > MAXD ||
      strspn(x->valuestring, "0123456789") != strlen(x->valuestring) ||
      strspn(y->valuestring, "0123456789") != strlen(y->valuestring))
    return lt_error_set(LT_EINVAL, "envs.%s: malformed arith spec (expected digit strings a, b and op + - *)",
                        a->domain);
  strcpy(p->a, x->valuestring);
  strcpy(p->b, y->valuestring);
  p->op = op->valuestring[0];
  if (p->op == '*' && strlen(p->b) != 1) return lt_error_set(LT_EINVAL, "envs.%s: '*' takes a one-digit b", a->domain);
  if (p->op == '-' && cmp_num(p->a, p->b) < 0) return lt_error_set(LT_EINVAL, "envs.%s: '-' needs a ≥ b", a->domain);
  solve(p, 0, NULL, p->answer);
  return 0;
}

static int arith_open(void *s, lt_episode_t *ep, const cJSON *spec, uint64_t seed, cJSON **messages) {
  (void)seed;
  arith_t *a = s;
  problem_t p;
  int rc = spec_problem(a, spec, &p);
  if (rc < 0) return rc;
  *messages = opening(a, &p);
  ep->reference = cJSON_CreateObject();
  if (!*messages || !ep->reference || !cJSON_AddStringToObject(ep->reference, "answer", p.answer))
    return lt_error_set(LT_ENOMEM, "arith: out of memory");
  return 0;
}

const lt_env_impl_t lt__env_arith = {
    .type = "arith",
    .init = arith_init,
    .free = arith_free,
    .sample = arith_sample,
    .demo = arith_demo,
    .open = arith_open,
    .step = lt__step_single_turn,
};
