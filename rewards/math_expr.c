/* The math verifier's parser and evaluator: a normalised answer (LaTeX or
 * plain text) becomes a tree of numbers, variables, operations, functions,
 * tuples, intervals, sets, unions and equations in a fixed-size node pool;
 * scalar trees are evaluated in long double at given variable values. */
#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rewards/internal.h"

#define MAX_DEPTH 48

typedef struct {
  lt__math_t *m;
  const char *s;
  int depth;    /* recursion, bounded against stack exhaustion */
  int brackets; /* open brackets: thousands commas only outside them */
} parser_t;

static int node(parser_t *p, int kind, int a, int b) {
  lt__math_t *m = p->m;
  if (m->nn >= LT__MATH_MAX_NODES) return -1; /* answer too large */
  lt__mnode_t *n = &m->n[m->nn];
  memset(n, 0, sizeof *n);
  n->kind = kind, n->a = a, n->b = b, n->next = -1;
  return m->nn++;
}

static int num(parser_t *p, long double v) {
  int k = node(p, LT_MN_NUM, -1, -1);
  if (k >= 0) p->m->n[k].v = v;
  return k;
}

static void ws(parser_t *p) {
  while (isspace((unsigned char)*p->s)) p->s++;
}

static int eat(parser_t *p, const char *t) {
  ws(p);
  size_t n = strlen(t);
  if (strncmp(p->s, t, n) != 0) return 0;
  if (t[0] == '\\' && isalpha((unsigned char)t[n - 1]) && isalpha((unsigned char)p->s[n])) return 0;
  p->s += n;
  return 1;
}

/* Functions of one argument, by LaTeX command and by plain name. */
static const struct {
  const char *name;
  int fn;
} fns[] = {
    {"sin", LT_MF_SIN},     {"cos", LT_MF_COS},   {"tan", LT_MF_TAN},     {"sec", LT_MF_SEC},
    {"csc", LT_MF_CSC},     {"cot", LT_MF_COT},   {"arcsin", LT_MF_ASIN}, {"arccos", LT_MF_ACOS},
    {"arctan", LT_MF_ATAN}, {"ln", LT_MF_LN},     {"log", LT_MF_LOG},     {"exp", LT_MF_EXP},
    {"sqrt", LT_MF_SQRT},   {"sinh", LT_MF_SINH}, {"cosh", LT_MF_COSH},   {"tanh", LT_MF_TANH},
};
static const char *const greek[] = {"alpha", "beta",     "gamma", "delta",  "epsilon", "varepsilon", "zeta", "eta",
                                    "theta", "vartheta", "kappa", "lambda", "mu",      "nu",         "xi",   "rho",
                                    "sigma", "tau",      "phi",   "varphi", "chi",     "psi",        "omega"};
#define COUNT(a) (int)(sizeof(a) / sizeof((a)[0]))

static int var(parser_t *p, const char *name, size_t len) {
  lt__math_t *m = p->m;
  char buf[LT__MATH_VAR_LEN];
  if (len >= sizeof buf) return -1; /* variable name too long */
  memcpy(buf, name, len);
  buf[len] = 0;
  int i;
  for (i = 0; i < m->nv && strcmp(m->vars[i], buf); i++) {}
  if (i == m->nv) {
    if (m->nv >= LT__MATH_MAX_VARS) return -1; /* too many variables */
    memcpy(m->vars[m->nv++], buf, len + 1);
  }
  int k = node(p, LT_MN_VAR, -1, -1);
  if (k >= 0) m->n[k].fn = i;
  return k;
}

static int expr(parser_t *p);
static int unary(parser_t *p);
static int list(parser_t *p, int kind, const int *items, int n, char open, char close);
static int power(parser_t *p);

static int enter(parser_t *p) { return ++p->depth > MAX_DEPTH ? -1 /* nested too deeply */ : 0; }

/* A {group}, or a single digit, letter or command primary (\frac12, \sqrt2, x^2). */
static int arg(parser_t *p) {
  ws(p);
  if (*p->s == '{') {
    p->s++;
    int e = expr(p);
    if (e < 0) return e;
    if (!eat(p, "}")) return -1; /* expected } */
    return e;
  }
  if (isdigit((unsigned char)*p->s)) return num(p, *p->s++ - '0');
  if (isalpha((unsigned char)*p->s)) return var(p, p->s++, 1);
  if (*p->s == '\\') return power(p);
  return -1; /* expected an argument */
}

static int number(parser_t *p) {
  const char *s = p->s;
  char buf[96];
  size_t k = 0;
  while (isdigit((unsigned char)*s) || *s == '.' ||
         (*s == ',' && !p->brackets && isdigit((unsigned char)s[1]) && isdigit((unsigned char)s[2]) &&
          isdigit((unsigned char)s[3]) && !isdigit((unsigned char)s[4]))) {
    if (k + 1 >= sizeof buf) return -1; /* number too long */
    if (*s != ',') buf[k++] = *s;
    s++;
  }
  /* A repeating decimal: 0.1\overline{6} is 0.1 + 6 / (10 * 9). */
  long double repeat = 0;
  const char *dot = memchr(buf, '.', k);
  if (dot && !strncmp(s, "\\overline{", 10)) {
    const char *r = s + 10;
    size_t nr = strspn(r, "0123456789");
    if (nr == 0 || nr > 18 || r[nr] != '}') return -1; /* not a repeating block */
    repeat = strtold(r, NULL) / (powl(10, (long double)(buf + k - dot - 1)) * (powl(10, (long double)nr) - 1));
    s = r + nr + 1;
  }
  /* Scientific notation only with digits after the e (2e is 2 times e). */
  if (k + 8 < sizeof buf && (*s == 'e' || *s == 'E') &&
      (isdigit((unsigned char)s[1]) || ((s[1] == '-' || s[1] == '+') && isdigit((unsigned char)s[2])))) {
    buf[k++] = *s++;
    if (*s == '-' || *s == '+') buf[k++] = *s++;
    while (isdigit((unsigned char)*s) && k + 1 < sizeof buf) buf[k++] = *s++;
    if (isdigit((unsigned char)*s)) return -1; /* number too long */
  }
  buf[k] = 0;
  char *end;
  long double v = strtold(buf, &end);
  if (end != buf + k || k == 0) return -1; /* bad number */
  p->s = s;
  return num(p, v + repeat);
}

static int fn_node(parser_t *p, int fn, int a) {
  int k = a < 0 ? a : node(p, LT_MN_FN, a, -1);
  if (k >= 0) p->m->n[k].fn = fn;
  return k;
}

/* sin x, sin(x), sin^2 x, log_2 8: the argument is a parenthesised group or
 * the implicit product that follows (sin 2x is sin(2x)). */
static int function(parser_t *p, int fn) {
  int pw = -1, base = -1;
  if (fn == LT_MF_LOG && eat(p, "_") && (base = arg(p)) < 0) return base;
  if (eat(p, "^") && (pw = arg(p)) < 0) return pw;
  int a;
  if (fn == LT_MF_SQRT && eat(p, "[")) { /* \sqrt[n]{x} */
    int n = expr(p);
    if (n < 0) return n;
    if (!eat(p, "]")) return -1; /* expected ] */
    if ((a = arg(p)) < 0) return a;
    int one = num(p, 1), inv = one < 0 ? one : node(p, LT_MN_DIV, one, n);
    return inv < 0 ? inv : node(p, LT_MN_POW, a, inv);
  }
  ws(p);
  if (fn == LT_MF_SQRT) {
    a = arg(p);
  } else if (*p->s == '(' || *p->s == '{') {
    a = power(p);
  } else {
    a = power(p);
    while (a >= 0) {
      ws(p);
      if (!(isalnum((unsigned char)*p->s) || *p->s == '(')) break;
      int b = power(p);
      a = b < 0 ? b : node(p, LT_MN_MUL, a, b);
    }
  }
  int f = fn_node(p, fn, a);
  if (f >= 0 && base >= 0) { /* log_b x = ln x / ln b */
    p->m->n[f].fn = LT_MF_LN;
    int lb = fn_node(p, LT_MF_LN, base);
    f = lb < 0 ? lb : node(p, LT_MN_DIV, f, lb);
  }
  return f < 0 || pw < 0 ? f : node(p, LT_MN_POW, f, pw);
}

static int command(parser_t *p) {
  const char *s = p->s + 1;
  size_t n = 0;
  while (isalpha((unsigned char)s[n])) n++;
  if (n == 0) return -1; /* unknown command */
  p->s = s + n;
#define IS(w) (n == strlen(w) && !strncmp(s, w, n))
  if (IS("frac")) {
    int a = arg(p), b = a < 0 ? a : arg(p);
    return b < 0 ? b : node(p, LT_MN_DIV, a, b);
  }
  if (IS("binom")) {
    int a = arg(p), b = a < 0 ? a : arg(p);
    return b < 0 ? b : node(p, LT_MN_BINOM, a, b);
  }
  if (IS("pi")) return num(p, 3.14159265358979323846264338327950288L);
  if (IS("infty") || IS("infinity")) return num(p, INFINITY);
  if (IS("emptyset") || IS("varnothing")) return list(p, LT_MN_SET, NULL, 0, '{', '}');
  for (int i = 0; i < COUNT(fns); i++)
    if (IS(fns[i].name)) return function(p, fns[i].fn);
  for (int i = 0; i < COUNT(greek); i++)
    if (IS(greek[i])) return var(p, s - 1, n + 1);
#undef IS
  p->s = s - 1;
  return -1; /* unknown command */
}

/* A run of letters: a known function or constant name, else one variable per
 * letter (xy is x*y); three or more letters that name nothing are a word,
 * which is no mathematics. */
static int word(parser_t *p) {
  const char *s = p->s;
  size_t n = 0;
  while (isalpha((unsigned char)s[n])) n++;
  for (int i = 0; i < COUNT(fns); i++)
    if (strlen(fns[i].name) == n && !strncmp(s, fns[i].name, n)) {
      p->s += n;
      return function(p, fns[i].fn);
    }
  if ((n == 2 && !strncmp(s, "pi", 2))) return p->s += 2, num(p, 3.14159265358979323846264338327950288L);
  if ((n == 3 && !strncmp(s, "inf", 3)) || (n == 8 && !strncmp(s, "infinity", 8)) || (n == 2 && !strncmp(s, "oo", 2)))
    return p->s += n, num(p, INFINITY);
  if (n >= 3) return -1; /* a word */
  if (*s == 'e' && !(s[1] == '_')) return p->s++, num(p, 2.71828182845904523536028747135266250L);
  /* One letter, with a subscript (x_1, a_{n}). */
  size_t len = 1;
  if (s[1] == '_') {
    if (s[2] == '{') {
      const char *e = strchr(s + 3, '}');
      if (!e) return -1; /* unclosed subscript */
      len = (size_t)(e - s) + 1;
    } else if (isalnum((unsigned char)s[2])) {
      len = 3;
    }
  }
  p->s += len;
  return var(p, s, len);
}

static int primary(parser_t *p) {
  ws(p);
  char c = *p->s;
  if (isdigit((unsigned char)c) || (c == '.' && isdigit((unsigned char)p->s[1]))) {
    int a = number(p);
    /* A mixed number: 3\frac{1}{2} is 3 + 1/2. */
    ws(p);
    if (a >= 0 && !strncmp(p->s, "\\frac", 5)) {
      const char *save = p->s;
      int f = power(p);
      if (f >= 0 && p->m->n[f].kind == LT_MN_DIV && p->m->n[p->m->n[f].a].kind == LT_MN_NUM &&
          p->m->n[p->m->n[f].b].kind == LT_MN_NUM && p->m->n[a].v == floorl(p->m->n[a].v))
        return node(p, LT_MN_ADD, a, f);
      p->s = save;
    }
    return a;
  }
  if (c == '(' || c == '[' || c == '{') {
    char close = c == '(' ? ')' : c == '[' ? ']' : '}';
    p->s++;
    p->brackets++;
    int e = expr(p);
    p->brackets--;
    if (e < 0) return e;
    if (!eat(p, (char[]){close, 0})) return -1; /* unbalanced bracket */
    return e;
  }
  if (c == '|') {
    p->s++;
    p->brackets++;
    int e = expr(p);
    p->brackets--;
    if (e < 0) return e;
    if (!eat(p, "|")) return -1; /* unbalanced | */
    return fn_node(p, LT_MF_ABS, e);
  }
  if (c == '\\') return command(p);
  if (isalpha((unsigned char)c)) return word(p);
  return -1; /* nothing a value can start with */
}

/* primary, factorials, then ^ (right-associative; the exponent may be signed). */
static int power(parser_t *p) {
  if (enter(p) < 0) return -1;
  int a = primary(p);
  while (a >= 0 && eat(p, "!")) a = node(p, LT_MN_FACT, a, -1);
  if (a >= 0 && (eat(p, "^") || eat(p, "**"))) {
    ws(p);
    int b;
    if (*p->s == '{') b = arg(p);
    else if (*p->s == '-' || *p->s == '+') b = unary(p);
    else b = power(p);
    a = b < 0 ? b : node(p, LT_MN_POW, a, b);
  }
  p->depth--;
  return a;
}

static int unary(parser_t *p) {
  if (enter(p) < 0) return -1;
  int r;
  if (eat(p, "-")) r = unary(p), r = r < 0 ? r : node(p, LT_MN_NEG, r, -1);
  else if (eat(p, "+")) r = unary(p);
  else r = power(p);
  p->depth--;
  return r;
}

/* Whether an implicit product continues here: 2x, 2\sqrt{2}, (x-1)(x+1). */
static int starts_factor(parser_t *p) {
  ws(p);
  char c = *p->s;
  if (isalpha((unsigned char)c) || c == '(') return 1;
  if (c != '\\' || !isalpha((unsigned char)p->s[1])) return 0;
  static const char *const operators[] = {"cdot", "times", "div",      "cup", "in", "le",  "leq", "leqslant", "lt",
                                          "ge",   "geq",   "geqslant", "gt",  "ne", "neq", "pm",  "mp"};
  size_t n = 0;
  while (isalpha((unsigned char)p->s[1 + n])) n++;
  for (int i = 0; i < COUNT(operators); i++)
    if (strlen(operators[i]) == n && !strncmp(p->s + 1, operators[i], n)) return 0;
  return 1;
}

static int term(parser_t *p) {
  int a = unary(p);
  while (a >= 0) {
    int op;
    if (eat(p, "*") || eat(p, "\\cdot") || eat(p, "\\times")) op = LT_MN_MUL;
    else if (eat(p, "/") || eat(p, "\\div")) op = LT_MN_DIV;
    else if (starts_factor(p)) op = -LT_MN_MUL;
    else break;
    int b = op < 0 ? power(p) : unary(p);
    a = b < 0 ? b : node(p, op < 0 ? -op : op, a, b);
  }
  return a;
}

static int expr(parser_t *p) {
  if (enter(p) < 0) return -1;
  int a = term(p);
  while (a >= 0) {
    int op = eat(p, "+") ? LT_MN_ADD : eat(p, "-") ? LT_MN_SUB : 0;
    if (!op) break;
    int b = term(p);
    a = b < 0 ? b : node(p, op, a, b);
  }
  p->depth--;
  return a;
}

/* Links items into a list node of `kind`. */
static int list(parser_t *p, int kind, const int *items, int n, char open, char close) {
  int k = node(p, kind, n ? items[0] : -1, -1);
  if (k < 0) return k;
  p->m->n[k].fn = n;
  for (int i = 0; i + 1 < n; i++) p->m->n[items[i]].next = items[i + 1];
  p->m->n[k].open = open, p->m->n[k].close = close;
  return k;
}

static int value(parser_t *p);

/* Comma-separated values up to a closing token; n: items found. */
static int items(parser_t *p, int *out, int cap, const char *close, int *n) {
  *n = 0;
  p->brackets++;
  ws(p);
  if (strncmp(p->s, close, strlen(close)) != 0) {
    do {
      if (*n >= cap) return p->brackets--, -1 /* too many items */;
      int v = value(p);
      if (v < 0) return p->brackets--, v;
      out[(*n)++] = v;
    } while (eat(p, ","));
  }
  p->brackets--;
  return 0;
}

#define MAX_ITEMS 64

/* A set \{...\}, a tuple or interval of two or more items, or an expression;
 * several joined by \cup form a union. */
static int value1(parser_t *p) {
  if (enter(p) < 0) return -1;
  int it[MAX_ITEMS], n, r;
  if (eat(p, "\\{")) {
    if ((r = items(p, it, MAX_ITEMS, "\\}", &n)) < 0) return r;
    if (!eat(p, "\\}")) return -1; /* expected \\} */
    p->depth--;
    return list(p, LT_MN_SET, it, n, '{', '}');
  }
  ws(p);
  if (*p->s == '(' || *p->s == '[') {
    const char *save = p->s;
    int save_nn = p->m->nn, save_depth = p->depth, save_brackets = p->brackets;
    char open = *p->s++;
    if (items(p, it, MAX_ITEMS, ")", &n) == 0 && n >= 2 && (eat(p, ")") || eat(p, "]"))) {
      p->depth--;
      return list(p, LT_MN_TUPLE, it, n, open, p->s[-1]);
    }
    /* Not a tuple: an expression that starts with a bracket. */
    p->s = save, p->m->nn = save_nn, p->depth = save_depth, p->brackets = save_brackets;
  }
  r = expr(p);
  p->depth--;
  return r;
}

static int value(parser_t *p) {
  int it[MAX_ITEMS], n = 0;
  do {
    if (n >= MAX_ITEMS) return -1; /* too many items */
    if ((it[n++] = value1(p)) < 0) return -1;
  } while (eat(p, "\\cup"));
  return n == 1 ? it[0] : list(p, LT_MN_UNION, it, n, 0, 0);
}

/* An order relation: ±1 strict, ±2 not strict; positive for less-than; 0 none. */
static int relation(parser_t *p) {
  if (eat(p, "<=") || eat(p, "\\le") || eat(p, "\\leq") || eat(p, "\\leqslant")) return 2;
  if (eat(p, ">=") || eat(p, "\\ge") || eat(p, "\\geq") || eat(p, "\\geqslant")) return -2;
  if (eat(p, "<") || eat(p, "\\lt")) return 1;
  if (eat(p, ">") || eat(p, "\\gt")) return -1;
  return 0;
}

/* The interval between lo and hi (NULL ends: infinite), closed where asked. */
static int interval(parser_t *p, int lo, int lo_closed, int hi, int hi_closed) {
  if (lo < 0) lo = num(p, -INFINITY), lo_closed = 0;
  if (hi < 0) hi = num(p, INFINITY), hi_closed = 0;
  if (lo < 0 || hi < 0) return -1;
  int ends[2] = {lo, hi};
  return list(p, LT_MN_TUPLE, ends, 2, lo_closed ? '[' : '(', hi_closed ? ']' : ')');
}

/* x > 3, 3 < x, -2 < x <= 5 as the intervals they describe (a, r: the value
 * and relation read so far); anything else is no answer. */
static int inequality(parser_t *p, int a, int r) {
  int b = value(p);
  if (b < 0) return b;
  int r2 = relation(p);
  if (r2) { /* a r x r2 c */
    int c = value(p);
    if (c < 0 || p->m->n[b].kind != LT_MN_VAR || (r > 0) != (r2 > 0)) return -1; /* not a range of one variable */
    return r > 0 ? interval(p, a, r == 2, c, r2 == 2) : interval(p, c, r2 == -2, a, r == -2);
  }
  if (p->m->n[a].kind == LT_MN_VAR) return r > 0 ? interval(p, -1, 0, b, r == 2) : interval(p, b, r == -2, -1, 0);
  if (p->m->n[b].kind == LT_MN_VAR) return r > 0 ? interval(p, a, r == 2, -1, 0) : interval(p, -1, 0, a, r == -2);
  return -1; /* a relation between expressions */
}

/* Whether [s, e) names what is being defined: x, a_1, \theta, f(x), g(a, b). */
static int is_name(const char *s, const char *e) {
  while (s < e && isspace((unsigned char)*s)) s++;
  while (e > s && isspace((unsigned char)e[-1])) e--;
  int command = s < e && *s == '\\';
  const char *w = s += command;
  while (s < e && isalpha((unsigned char)*s)) s++;
  if (s == w || (s - w > 1 && !command)) return 0; /* xy is a product, \theta a name */
  if (s < e && *s == '_') s = e;                   /* a subscripted name */
  if (s < e && *s == '(' && e[-1] == ')') {        /* arguments are names: f(x), g(a, b), not x(x+1) */
    for (s++; s < e - 1 && (isalpha((unsigned char)*s) || *s == ',' || *s == ' '); s++) {}
    s += s == e - 1;
  }
  return s == e;
}

/* One answer item: "x = v" and "f(x) = v" are v (a name being defined),
 * "lhs = rhs" an equation, an inequality in one variable an interval. */
static int item(parser_t *p) {
  const char *start = p->s;
  int a = value(p);
  if (a < 0) return a;
  int r = relation(p);
  if (r) return inequality(p, a, r);
  const char *end = p->s;
  if (!(eat(p, "=") || eat(p, "\\in"))) return a;
  int b = value(p);
  if (b < 0) return b;
  if (is_name(start, end)) return b;
  return node(p, LT_MN_EQ, a, b);
}

static int parse_items(lt__math_t *m, const char *text) {
  parser_t p = {.m = m, .s = text};
  int it[MAX_ITEMS], n = 0;
  do {
    if (n >= MAX_ITEMS) return -1; /* too many items */
    if ((it[n++] = item(&p)) < 0) return -1;
  } while (eat(&p, ",") || eat(&p, ";"));
  ws(&p);
  if (*p.s) return -1; /* unexpected text */
  return n == 1 ? it[0] : list(&p, LT_MN_LIST, it, n, 0, 0);
}

/* The first \pm or \mp in s, or NULL. */
static const char *find_pm(const char *s) {
  for (; (s = strchr(s, '\\')) != NULL; s++)
    if ((!strncmp(s, "\\pm", 3) || !strncmp(s, "\\mp", 3)) && !isalpha((unsigned char)s[3])) return s;
  return NULL;
}

int lt__math_parse(lt__math_t *m, const char *text) {
  const char *pm = find_pm(text);
  if (!pm) return parse_items(m, text);
  if (find_pm(pm + 3)) return -1; /* several ± stand for more answers than one sign each */
  /* a ± b is the set {a + b, a - b} */
  size_t n = strlen(text);
  char *alt = malloc(n + 1);
  if (!alt) return -1;
  memcpy(alt, text, n + 1);
  int it[2];
  for (int i = 0; i < 2; i++) {
    memcpy(alt + (pm - text), i ? "-  " : "+  ", 3);
    if ((it[i] = parse_items(m, alt)) < 0) break;
  }
  free(alt);
  if (it[0] < 0 || it[1] < 0) return -1;
  parser_t p = {.m = m, .s = text};
  return list(&p, LT_MN_SET, it, 2, '{', '}');
}

static long double fact(long double x) {
  if (x < 0 || x != floorl(x)) return NAN;
  return x > 1754 ? INFINITY : tgammal(x + 1);
}

long double lt__math_eval(const lt__math_t *m, int k, const long double *vals) {
  const lt__mnode_t *n = &m->n[k];
  if (n->kind >= LT_MN_TUPLE) return NAN; /* not a scalar */
  long double a = n->a >= 0 ? lt__math_eval(m, n->a, vals) : 0;
  long double b = n->b >= 0 ? lt__math_eval(m, n->b, vals) : 0;
  switch (n->kind) {
  case LT_MN_NUM: return n->v;
  case LT_MN_VAR: return vals[n->fn];
  case LT_MN_ADD: return a + b;
  case LT_MN_SUB: return a - b;
  case LT_MN_MUL: return a * b;
  case LT_MN_DIV: return a / b;
  case LT_MN_NEG: return -a;
  case LT_MN_POW: return powl(a, b);
  case LT_MN_FACT: return fact(a);
  case LT_MN_BINOM: return fact(a) / (fact(b) * fact(a - b));
  case LT_MN_FN:
    switch (n->fn) {
    case LT_MF_SIN: return sinl(a);
    case LT_MF_COS: return cosl(a);
    case LT_MF_TAN: return tanl(a);
    case LT_MF_SEC: return 1 / cosl(a);
    case LT_MF_CSC: return 1 / sinl(a);
    case LT_MF_COT: return 1 / tanl(a);
    case LT_MF_ASIN: return asinl(a);
    case LT_MF_ACOS: return acosl(a);
    case LT_MF_ATAN: return atanl(a);
    case LT_MF_LN:
    case LT_MF_LOG: return logl(a); /* log is natural, as in math-verify (SymPy) */
    case LT_MF_EXP: return expl(a);
    case LT_MF_SQRT: return sqrtl(a);
    case LT_MF_ABS: return fabsl(a);
    case LT_MF_SINH: return sinhl(a);
    case LT_MF_COSH: return coshl(a);
    case LT_MF_TANH: return tanhl(a);
    }
    return NAN;
  }
  return NAN;
}
