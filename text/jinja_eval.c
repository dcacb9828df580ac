/* The Jinja evaluator: values, scopes, statements, operators, filters, tests
 * and methods with @huggingface/jinja 0.5.11's semantics (JavaScript numbers,
 * UTF-16 lengths, its truthiness and equality), bounded by lt_jinja_limits_t. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "text/internal.h"
#include "util/error.h"

#define MAX_DEPTH 1000 /* evaluator recursion (nested expressions, macro calls) */

typedef lt__jv_t jv;
typedef lt__jnode_t jnode;

typedef struct env {
  struct env *parent;
  int n, cap;
  const char **k;
  jv *v;
} env_t;

enum { F_MACRO, F_CALLER, F_BUILTIN };
struct lt__jfn {
  int kind, id;
  jv self;
  const jnode *node;
  env_t *scope; /* F_CALLER: where the call block stands */
};

typedef struct {
  lt__jarena_t ar;
  uint64_t steps, max_steps;
  size_t max_output;
  int depth;
  char *err;
} ev_t;

static const jv UNDEF = {.t = JV_UNDEF};
static const jv NONE = {.t = JV_NONE};

static int fail(ev_t *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(ev_t *e, const char *fmt, ...) {
  if (!e->err) {
    va_list ap;
    va_start(ap, fmt);
    if (vasprintf(&e->err, fmt, ap) < 0) e->err = NULL;
    va_end(ap);
    if (!e->err) e->err = strdup("out of memory");
  }
  return -1;
}

static void *alloc(ev_t *e, size_t n) {
  void *p = lt__jarena_alloc(&e->ar, n);
  if (!p) fail(e, e->ar.over ? "template used more than its memory limit" : "out of memory");
  return p;
}

static jv num(int is_int, double d) { return (jv){.t = is_int ? JV_INT : JV_FLOAT, .u.n = d}; }
static jv boolean(int b) { return (jv){.t = JV_BOOL, .u.b = !!b}; }

static int mkstr(ev_t *e, const char *s, size_t n, jv *out) {
  char *p = lt__jarena_strdup(&e->ar, s, n);
  if (!p) return fail(e, e->ar.over ? "template used more than its memory limit" : "out of memory");
  *out = (jv){.t = JV_STR, .u.s = {p, n}};
  return 0;
}

static int buf_str(ev_t *e, lt_buf_t *b, jv *out) {
  if (lt_buf_ok(b) < 0) return fail(e, "out of memory");
  return mkstr(e, b->data ? b->data : "", b->len, out);
}

static int mkarr(ev_t *e, int n, jv *out) {
  lt__jarr_t *a = alloc(e, sizeof *a);
  if (!a || (n && !(a->v = alloc(e, (size_t)n * sizeof *a->v)))) return -1;
  a->n = n;
  *out = (jv){.t = JV_ARRAY, .u.a = a};
  return 0;
}

static int mkobj(ev_t *e, lt__jobj_kind kind, jv *out) {
  lt__jobj_t *o = alloc(e, sizeof *o);
  if (!o) return -1;
  o->kind = kind;
  *out = (jv){.t = JV_OBJECT, .u.o = o};
  return 0;
}

static int obj_find(const lt__jobj_t *o, const char *k, size_t n) {
  for (int i = 0; i < o->n; i++)
    if (o->klen[i] == n && memcmp(o->k[i], k, n) == 0) return i;
  return -1;
}

static int obj_reserve(ev_t *e, lt__jobj_t *o, int cap) {
  if (cap <= o->cap) return 0;
  const char **nk = alloc(e, (size_t)cap * sizeof *nk);
  size_t *nl = alloc(e, (size_t)cap * sizeof *nl);
  jv *nv = alloc(e, (size_t)cap * sizeof *nv);
  if (!nk || !nl || !nv) return -1;
  if (o->n) {
    memcpy(nk, o->k, (size_t)o->n * sizeof *nk);
    memcpy(nl, o->klen, (size_t)o->n * sizeof *nl);
    memcpy(nv, o->v, (size_t)o->n * sizeof *nv);
  }
  o->k = nk;
  o->klen = nl;
  o->v = nv;
  o->cap = cap;
  return 0;
}

/* Sets k (not copied: keys live as long as the render) to v, keeping the
 * first position of a key. */
static int obj_set(ev_t *e, lt__jobj_t *o, const char *k, size_t n, jv v) {
  int i = obj_find(o, k, n);
  if (i >= 0) {
    o->v[i] = v;
    return 0;
  }
  if (o->n == o->cap && obj_reserve(e, o, o->cap ? o->cap * 2 : 8) < 0) return -1;
  o->k[o->n] = k;
  o->klen[o->n] = n;
  o->v[o->n++] = v;
  return 0;
}

static int obj_setc(ev_t *e, lt__jobj_t *o, const char *k, jv v) { return obj_set(e, o, k, strlen(k), v); }

/* ---- scopes ---- */

static env_t *env_new(ev_t *e, env_t *parent) {
  env_t *s = alloc(e, sizeof *s);
  if (s) s->parent = parent;
  return s;
}

static int env_set(ev_t *e, env_t *s, const char *k, jv v) {
  for (int i = 0; i < s->n; i++)
    if (strcmp(s->k[i], k) == 0) {
      s->v[i] = v;
      return 0;
    }
  if (s->n == s->cap) {
    int cap = s->cap ? s->cap * 2 : 8;
    const char **nk = alloc(e, (size_t)cap * sizeof *nk);
    jv *nv = alloc(e, (size_t)cap * sizeof *nv);
    if (!nk || !nv) return -1;
    if (s->n) {
      memcpy(nk, s->k, (size_t)s->n * sizeof *nk);
      memcpy(nv, s->v, (size_t)s->n * sizeof *nv);
    }
    s->k = nk;
    s->v = nv;
    s->cap = cap;
  }
  s->k[s->n] = k;
  s->v[s->n++] = v;
  return 0;
}

static jv env_get(const env_t *s, const char *k) {
  for (; s; s = s->parent)
    for (int i = 0; i < s->n; i++)
      if (strcmp(s->k[i], k) == 0) return s->v[i];
  return UNDEF;
}

/* ---- conversions ---- */

static int truthy(jv v) {
  switch (v.t) {
  case JV_UNDEF:
  case JV_NONE: return 0;
  case JV_BOOL: return v.u.b;
  case JV_INT:
  case JV_FLOAT: return v.u.n != 0 && !isnan(v.u.n);
  case JV_STR: return v.u.s.len > 0;
  case JV_ARRAY: return v.u.a->n > 0;
  case JV_OBJECT: return v.u.o->kind == JO_NAMESPACE || v.u.o->n > 0;
  case JV_FUNC: return 1;
  }
  return 0;
}

static const char *type_name(jv v) {
  switch (v.t) {
  case JV_UNDEF: return "UndefinedValue";
  case JV_NONE: return "NullValue";
  case JV_BOOL: return "BooleanValue";
  case JV_INT: return "IntegerValue";
  case JV_FLOAT: return "FloatValue";
  case JV_STR: return "StringValue";
  case JV_ARRAY: return v.u.a->tuple ? "TupleValue" : "ArrayValue";
  case JV_OBJECT:
    return v.u.o->kind == JO_NAMESPACE ? "NamespaceValue"
           : v.u.o->kind == JO_KWARGS  ? "KeywordArgumentsValue"
                                       : "ObjectValue";
  case JV_FUNC: return "FunctionValue";
  }
  return "?";
}

static int is_num(jv v) { return v.t == JV_INT || v.t == JV_FLOAT; }
static int is_numlike(jv v) { return is_num(v) || v.t == JV_BOOL; }
static double numval(jv v) { return v.t == JV_BOOL ? v.u.b : v.u.n; }
static int is_mapping(jv v) { return v.t == JV_OBJECT && v.u.o->kind != JO_NAMESPACE; }

static int tostr(ev_t *e, jv v, lt_buf_t *b);

/* JavaScript's String(x.value): what + ~ and join see. */
static void raw_str(ev_t *e, jv v, lt_buf_t *b, int nullish_empty) {
  switch (v.t) {
  case JV_UNDEF:
    if (!nullish_empty) lt_buf_puts(b, "undefined");
    break;
  case JV_NONE:
    if (!nullish_empty) lt_buf_puts(b, "null");
    break;
  case JV_BOOL: lt_buf_puts(b, v.u.b ? "true" : "false"); break;
  case JV_INT:
  case JV_FLOAT: lt__jinja_num(b, v.u.n); break;
  case JV_STR: lt_buf_append(b, v.u.s.p, v.u.s.len); break;
  case JV_ARRAY:
    for (int i = 0; i < v.u.a->n; i++) {
      if (i) lt_buf_putc(b, ',');
      tostr(e, v.u.a->v[i], b);
    }
    break;
  case JV_OBJECT: lt_buf_puts(b, "[object Map]"); break;
  case JV_FUNC: lt_buf_puts(b, "[function]"); break;
  }
}

typedef struct {
  int indent; /* -1: none */
  int ascii, sort;
  const char *item_sep, *key_sep;
} json_opts_t;

static int key_cmp(const char *a, size_t an, const char *b, size_t bn) {
  /* localeCompare approximated: case-insensitive first, then lower before upper */
  size_t n = an < bn ? an : bn;
  for (size_t i = 0; i < n; i++) {
    int x = (unsigned char)a[i], y = (unsigned char)b[i];
    int lx = (x >= 'A' && x <= 'Z') ? x + 32 : x, ly = (y >= 'A' && y <= 'Z') ? y + 32 : y;
    if (lx != ly) return lx - ly;
  }
  if (an != bn) return an < bn ? -1 : 1;
  for (size_t i = 0; i < n; i++)
    if (a[i] != b[i]) return (unsigned char)b[i] - (unsigned char)a[i];
  return 0;
}

static int tojson(ev_t *e, jv v, const json_opts_t *o, int depth, int undef_null, lt_buf_t *b) {
  if (++e->depth > MAX_DEPTH) return fail(e, "value nested too deeply for tojson");
  int rc = 0;
  switch (v.t) {
  case JV_NONE: lt_buf_puts(b, "null"); break;
  case JV_UNDEF: lt_buf_puts(b, undef_null ? "null" : "undefined"); break;
  case JV_BOOL: lt_buf_puts(b, v.u.b ? "true" : "false"); break;
  case JV_INT:
  case JV_FLOAT:
    if (isfinite(v.u.n)) lt__jinja_num(b, v.u.n);
    else lt_buf_puts(b, "null");
    break;
  case JV_STR: lt__jinja_quote(b, v.u.s.p, v.u.s.len, o->ascii); break;
  case JV_ARRAY:
  case JV_OBJECT: {
    if ((v.t == JV_OBJECT && v.u.o->kind == JO_KWARGS) || (v.t == JV_ARRAY && v.u.a->tuple)) {
      rc = fail(e, "Cannot convert to JSON: %s", type_name(v));
      break;
    }
    int arr = v.t == JV_ARRAY, n = arr ? v.u.a->n : v.u.o->n;
    const char *isep = o->item_sep ? o->item_sep : o->indent > 0 ? "," : ", ";
    const char *ksep = o->key_sep ? o->key_sep : ": ";
    int ind = o->indent > 0;
    lt_buf_putc(b, arr ? '[' : '{');
    int *order = NULL;
    if (!arr && o->sort && n > 1) {
      if (!(order = alloc(e, (size_t)n * sizeof *order))) {
        rc = -1;
        break;
      }
      for (int i = 0; i < n; i++) order[i] = i;
      for (int i = 1; i < n; i++) /* insertion sort: stable, objects are small */
        for (int j = i; j > 0 && key_cmp(v.u.o->k[order[j - 1]], v.u.o->klen[order[j - 1]], v.u.o->k[order[j]],
                                         v.u.o->klen[order[j]]) > 0;
             j--) {
          int t = order[j];
          order[j] = order[j - 1];
          order[j - 1] = t;
        }
    }
    for (int i = 0; i < n && rc == 0; i++) {
      if (i) lt_buf_puts(b, isep);
      if (ind) {
        lt_buf_putc(b, '\n');
        for (int k = 0; k < (depth + 1) * o->indent; k++) lt_buf_putc(b, ' ');
      }
      if (arr) {
        rc = tojson(e, v.u.a->v[i], o, depth + 1, undef_null, b);
      } else {
        int j = order ? order[i] : i;
        lt__jinja_quote(b, v.u.o->k[j], v.u.o->klen[j], o->ascii);
        lt_buf_puts(b, ksep);
        rc = tojson(e, v.u.o->v[j], o, depth + 1, undef_null, b);
      }
    }
    if (ind && n > 0) {
      lt_buf_putc(b, '\n');
      for (int k = 0; k < depth * o->indent; k++) lt_buf_putc(b, ' ');
    }
    lt_buf_putc(b, arr ? ']' : '}');
    break;
  }
  case JV_FUNC: rc = fail(e, "Cannot convert to JSON: FunctionValue"); break;
  }
  e->depth--;
  return rc;
}

/* RuntimeValue.toString(): what {{ }} prints. */
static int tostr(ev_t *e, jv v, lt_buf_t *b) {
  static const json_opts_t plain = {.indent = -1};
  switch (v.t) {
  case JV_FLOAT:
    if (v.u.n == 0 && signbit(v.u.n)) lt_buf_puts(b, "-0.0");
    else if (isfinite(v.u.n) && v.u.n == floor(v.u.n) && fabs(v.u.n) < 1e21) lt_buf_printf(b, "%.1f", v.u.n);
    else lt__jinja_num(b, v.u.n);
    return 0;
  case JV_ARRAY: return tojson(e, v, &plain, 0, 0, b);
  case JV_OBJECT:
    if (v.u.o->kind != JO_KWARGS) return tojson(e, v, &plain, 0, 0, b);
    lt_buf_puts(b, "[object Map]"); /* unreachable from templates */
    return 0;
  default: raw_str(e, v, b, 0); return 0;
  }
}

/* JavaScript's == on the values (loose), and === (strict). */
static int strict_eq(jv a, jv b) {
  if (is_num(a) && is_num(b)) return a.u.n == b.u.n;
  if (a.t != b.t) return 0;
  switch (a.t) {
  case JV_UNDEF:
  case JV_NONE: return 1;
  case JV_BOOL: return a.u.b == b.u.b;
  case JV_STR: return a.u.s.len == b.u.s.len && memcmp(a.u.s.p, b.u.s.p, a.u.s.len) == 0;
  case JV_ARRAY: return a.u.a == b.u.a;
  case JV_OBJECT: return a.u.o == b.u.o;
  case JV_FUNC: return a.u.f == b.u.f;
  default: return 0;
  }
}

static double str_to_number(const char *s, size_t n) {
  /* Number("…"): surrounding whitespace ignored, empty is 0 */
  char tmp[64];
  while (n && lt__jinja_space(s, s + n)) {
    int k = lt__jinja_space(s, s + n);
    s += k;
    n -= (size_t)k;
  }
  while (n && (s[n - 1] == ' ' || (s[n - 1] >= 9 && s[n - 1] <= 13))) n--;
  if (n == 0) return 0;
  if (n >= sizeof tmp) return NAN;
  memcpy(tmp, s, n);
  tmp[n] = 0;
  if (strcmp(tmp, "Infinity") == 0 || strcmp(tmp, "+Infinity") == 0) return INFINITY;
  if (strcmp(tmp, "-Infinity") == 0) return -INFINITY;
  for (size_t i = 0; i < n; i++)
    if (!strchr("0123456789+-.eExXabcdefABCDEFoObB", tmp[i])) return NAN;
  char *end;
  double d = strtod(tmp, &end);
  return *end ? NAN : d;
}

static int loose_eq(jv a, jv b) {
  int an = a.t == JV_UNDEF || a.t == JV_NONE, bn = b.t == JV_UNDEF || b.t == JV_NONE;
  if (an || bn) return an && bn;
  if (is_numlike(a) && is_numlike(b)) return numval(a) == numval(b);
  if (a.t == JV_STR && is_numlike(b)) return str_to_number(a.u.s.p, a.u.s.len) == numval(b);
  if (b.t == JV_STR && is_numlike(a)) return str_to_number(b.u.s.p, b.u.s.len) == numval(a);
  return strict_eq(a, b);
}

/* compareRuntimeValues (sort, dictsort) */
static int compare(ev_t *e, jv a, jv b, int case_sensitive, int *out) {
  if (a.t == JV_NONE && b.t == JV_NONE) return *out = 0, 0;
  if (a.t == JV_NONE || b.t == JV_NONE || (a.t == JV_UNDEF) != (b.t == JV_UNDEF))
    return fail(e, "Cannot compare %s with %s", type_name(a), type_name(b));
  if (a.t == JV_UNDEF) return *out = 0, 0;
  if (is_numlike(a) && is_numlike(b)) {
    double x = numval(a), y = numval(b);
    return *out = x < y ? -1 : x > y ? 1 : 0, 0;
  }
  if (strcmp(type_name(a), type_name(b)) != 0)
    return fail(e, "Cannot compare different types: %s and %s", type_name(a), type_name(b));
  if (a.t != JV_STR) return fail(e, "Cannot compare type: %s", type_name(a));
  size_t n = a.u.s.len < b.u.s.len ? a.u.s.len : b.u.s.len;
  for (size_t i = 0; i < n; i++) {
    int x = (unsigned char)a.u.s.p[i], y = (unsigned char)b.u.s.p[i];
    if (!case_sensitive) {
      if (x >= 'A' && x <= 'Z') x += 32;
      if (y >= 'A' && y <= 'Z') y += 32;
    }
    if (x != y) return *out = x < y ? -1 : 1, 0;
  }
  *out = a.u.s.len < b.u.s.len ? -1 : a.u.s.len > b.u.s.len ? 1 : 0;
  return 0;
}

/* ---- strings ---- */

static int space_at(const char *p, const char *end) { return p < end ? lt__jinja_space(p, end) : 0; }

static size_t trim_start(const char *s, size_t n) {
  size_t i = 0;
  for (int k; i < n && (k = lt__jinja_space(s + i, s + n));) i += (size_t)k;
  return i;
}

static size_t trim_end(const char *s, size_t n) {
  while (n) {
    size_t k = n - 1;
    while (k > 0 && ((unsigned char)s[k] & 0xc0) == 0x80) k--;
    if (!lt__jinja_space(s + k, s + n)) break;
    n = k;
  }
  return n;
}

static size_t cp_len(const char *s, size_t n, size_t i) {
  size_t k = 1;
  while (i + k < n && ((unsigned char)s[i + k] & 0xc0) == 0x80) k++;
  return k;
}

static int word_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

static int case_map(ev_t *e, jv s, int mode, jv *out) { /* 0 upper, 1 lower, 2 title, 3 capitalize */
  char *p = alloc(e, s.u.s.len + 1);
  if (!p) return -1;
  for (size_t i = 0; i < s.u.s.len; i++) {
    char c = s.u.s.p[i];
    int up = mode == 0 || (mode == 2 && (i == 0 || !word_char(s.u.s.p[i - 1]))) || (mode == 3 && i == 0);
    if (up && c >= 'a' && c <= 'z') c = (char)(c - 32);
    if (mode == 1 && c >= 'A' && c <= 'Z') c = (char)(c + 32);
    p[i] = c;
  }
  *out = (jv){.t = JV_STR, .u.s = {p, s.u.s.len}};
  return 0;
}

static int sub(ev_t *e, jv s, size_t from, size_t to, jv *out) {
  (void)e;
  *out = (jv){.t = JV_STR, .u.s = {s.u.s.p + from, to - from}};
  return 0;
}

/* ---- evaluation ---- */

static int eval(ev_t *e, const jnode *n, env_t *s, jv *out);
static int exec_list(ev_t *e, const lt__jlist_t *l, env_t *s, lt_buf_t *sink);
static int call_value(ev_t *e, jv fn, jv *args, int nargs, env_t *s, jv *out);

static int step(ev_t *e) {
  if (++e->steps > e->max_steps) return fail(e, "template ran past its step limit");
  return 0;
}

static int out_check(ev_t *e, lt_buf_t *b) {
  if (lt_buf_ok(b) < 0) return fail(e, "out of memory");
  if (b->len > e->max_output) return fail(e, "template output past its limit of %zu bytes", e->max_output);
  return 0;
}

/* Positional and keyword arguments; a kwargs object is appended when any. */
typedef struct {
  jv *v;
  int n;
  lt__jobj_t *kw;
} args_t;

static int eval_args(ev_t *e, const lt__jlist_t *l, env_t *s, args_t *a) {
  int cap = l->n + 1;
  a->n = 0;
  a->kw = NULL;
  if (!(a->v = alloc(e, (size_t)cap * sizeof *a->v))) return -1;
  for (int i = 0; i < l->n; i++) {
    const jnode *x = l->v[i];
    if (x->kind == JN_KWARG || x->kind == JN_KWSPREAD) continue;
    jv v;
    if (eval(e, x->kind == JN_SPREAD ? x->a : x, s, &v) < 0) return -1;
    if (x->kind != JN_SPREAD) {
      a->v[a->n++] = v;
      continue;
    }
    if (v.t != JV_ARRAY) return fail(e, "Cannot unpack non-iterable type: %s", type_name(v));
    jv *nv = alloc(e, (size_t)(cap + v.u.a->n) * sizeof *nv);
    if (!nv) return -1;
    memcpy(nv, a->v, (size_t)a->n * sizeof *nv);
    memcpy(nv + a->n, v.u.a->v, (size_t)v.u.a->n * sizeof *nv);
    a->v = nv;
    a->n += v.u.a->n;
    cap += v.u.a->n;
  }
  for (int i = 0; i < l->n; i++) {
    const jnode *x = l->v[i];
    if (x->kind != JN_KWARG && x->kind != JN_KWSPREAD) continue;
    jv v, o;
    if (!a->kw) {
      if (mkobj(e, JO_KWARGS, &o) < 0) return -1;
      a->kw = o.u.o;
    }
    if (eval(e, x->a, s, &v) < 0) return -1;
    if (x->kind == JN_KWARG) {
      if (obj_find(a->kw, x->str, strlen(x->str)) >= 0)
        return fail(e, "Got multiple values for keyword argument '%s'", x->str);
      if (obj_setc(e, a->kw, x->str, v) < 0) return -1;
      continue;
    }
    if (!is_mapping(v) || v.u.o->kind == JO_KWARGS)
      return fail(e, "Argument after ** must be a mapping, not %s", type_name(v));
    for (int k = 0; k < v.u.o->n; k++) {
      if (obj_find(a->kw, v.u.o->k[k], v.u.o->klen[k]) >= 0)
        return fail(e, "Got multiple values for keyword argument '%.*s'", (int)v.u.o->klen[k], v.u.o->k[k]);
      if (obj_set(e, a->kw, v.u.o->k[k], v.u.o->klen[k], v.u.o->v[k]) < 0) return -1;
    }
  }
  return 0;
}

static jv kwarg(const args_t *a, const char *k) { /* a may be NULL: a filter written without parentheses */
  if (!a || !a->kw) return UNDEF;
  int i = obj_find(a->kw, k, strlen(k));
  return i < 0 ? UNDEF : a->kw->v[i];
}

/* The builtin args: positional, with a trailing kwargs object when any. */
static jv *flat_args(ev_t *e, const args_t *a, int *n) {
  if (!a->kw || a->kw->n == 0) {
    *n = a->n;
    return a->v;
  }
  jv *v = alloc(e, (size_t)(a->n + 1) * sizeof *v);
  if (!v) return NULL;
  memcpy(v, a->v, (size_t)a->n * sizeof *v);
  v[a->n] = (jv){.t = JV_OBJECT, .u.o = a->kw};
  *n = a->n + 1;
  return v;
}

static int mkfn(ev_t *e, int kind, int id, jv self, jv *out) {
  lt__jfn_t *f = alloc(e, sizeof *f);
  if (!f) return -1;
  f->kind = kind;
  f->id = id;
  f->self = self;
  *out = (jv){.t = JV_FUNC, .u.f = f};
  return 0;
}

static int items_of(ev_t *e, const lt__jobj_t *o, int what, jv *out) { /* 0 items, 1 keys, 2 values */
  if (mkarr(e, o->n, out) < 0) return -1;
  for (int i = 0; i < o->n; i++) {
    jv k = {.t = JV_STR, .u.s = {o->k[i], o->klen[i]}};
    if (what == 1) {
      out->u.a->v[i] = k;
    } else if (what == 2) {
      out->u.a->v[i] = o->v[i];
    } else {
      if (mkarr(e, 2, &out->u.a->v[i]) < 0) return -1;
      out->u.a->v[i].u.a->v[0] = k;
      out->u.a->v[i].u.a->v[1] = o->v[i];
    }
  }
  return 0;
}

/* Stable merge sort of a[0..n) by compare() on key(i); tmp has room for n. */
typedef struct {
  int case_sensitive, reverse;
  jv *keys;
} sort_ctx_t;

static int sort_merge(ev_t *e, int *idx, int *tmp, int n, const sort_ctx_t *c) {
  if (n < 2) return 0;
  int h = n / 2;
  if (sort_merge(e, idx, tmp, h, c) < 0 || sort_merge(e, idx + h, tmp, n - h, c) < 0) return -1;
  int i = 0, j = h, k = 0;
  while (i < h && j < n) {
    int r = 0;
    if (compare(e, c->keys[idx[j]], c->keys[idx[i]], c->case_sensitive, &r) < 0) return -1;
    if (c->reverse) r = -r;
    tmp[k++] = r < 0 ? idx[j++] : idx[i++];
  }
  while (i < h) tmp[k++] = idx[i++];
  while (j < n) tmp[k++] = idx[j++];
  memcpy(idx, tmp, (size_t)n * sizeof *idx);
  return 0;
}

static int sorted(ev_t *e, const jv *items, jv *keys, int n, int case_sensitive, int reverse, jv *out) {
  int *idx = alloc(e, (size_t)(n ? n : 1) * sizeof *idx), *tmp = alloc(e, (size_t)(n ? n : 1) * sizeof *tmp);
  if (!idx || !tmp) return -1;
  for (int i = 0; i < n; i++) idx[i] = i;
  sort_ctx_t c = {case_sensitive, reverse, keys};
  if (sort_merge(e, idx, tmp, n, &c) < 0 || mkarr(e, n, out) < 0) return -1;
  for (int i = 0; i < n; i++) out->u.a->v[i] = items[idx[i]];
  return 0;
}

/* getAttributeValue: a dotted path through mappings and arrays */
static jv attr_path(jv item, const char *path, size_t n) {
  jv v = item;
  for (size_t i = 0; i <= n;) {
    size_t j = i;
    while (j < n && path[j] != '.') j++;
    if (v.t == JV_OBJECT) {
      int k = obj_find(v.u.o, path + i, j - i);
      v = k < 0 ? UNDEF : v.u.o->v[k];
    } else if (v.t == JV_ARRAY) {
      char tmp[24];
      size_t l = j - i < sizeof tmp - 1 ? j - i : sizeof tmp - 1;
      memcpy(tmp, path + i, l);
      tmp[l] = 0;
      char *end;
      long idx = strtol(tmp, &end, 10);
      if (end == tmp || idx < 0 || idx >= v.u.a->n) return UNDEF;
      v = v.u.a->v[idx];
    } else {
      return UNDEF;
    }
    i = j + 1;
  }
  return v;
}

/* ---- builtin functions and methods: one row and one handler each (as SQLite's func.c aBuiltinFunc[]) ----
 * A handler gets the value the method was read from (UNDEF for a global), the positional arguments with a
 * trailing JO_KWARGS object when keywords were given, and their count. */
typedef int (*jbuiltin_fn)(ev_t *e, jv self, jv *a, int n, jv *out);

/* The keyword arguments a builtin was called with (UNDEF: none) and the count of positional ones. */
static jv split_kwargs(jv *a, int n, int *npos) {
  int has = n && a[n - 1].t == JV_OBJECT && a[n - 1].u.o->kind == JO_KWARGS;
  *npos = has ? n - 1 : n;
  return has ? a[n - 1] : UNDEF;
}

static int jb_namespace(ev_t *e, jv self, jv *a, int n, jv *out) {
  int npos;
  jv kw = split_kwargs(a, n, &npos);
  if (npos > 1) return fail(e, "namespace expected at most 1 argument, got %d", npos);
  if (mkobj(e, JO_NAMESPACE, out) < 0) return -1;
  if (npos == 1) {
    if (is_mapping(a[0])) {
      for (int i = 0; i < a[0].u.o->n; i++)
        if (obj_set(e, out->u.o, a[0].u.o->k[i], a[0].u.o->klen[i], a[0].u.o->v[i]) < 0) return -1;
    } else if (a[0].t == JV_ARRAY) {
      for (int i = 0; i < a[0].u.a->n; i++) {
        jv p = a[0].u.a->v[i];
        if (p.t != JV_ARRAY || p.u.a->n != 2)
          return fail(e, "namespace expected an object or an iterable of [key, value] pairs");
        if (p.u.a->v[0].t != JV_STR) return fail(e, "namespace keys must be strings");
        if (obj_set(e, out->u.o, p.u.a->v[0].u.s.p, p.u.a->v[0].u.s.len, p.u.a->v[1]) < 0) return -1;
      }
    } else {
      return fail(e, "'%s' object is not iterable", type_name(a[0]));
    }
  }
  if (kw.t != JV_UNDEF)
    for (int i = 0; i < kw.u.o->n; i++)
      if (obj_set(e, out->u.o, kw.u.o->k[i], kw.u.o->klen[i], kw.u.o->v[i]) < 0) return -1;
  return 0;
}

/* The reference throws new Error(first argument): only that one is the message. */
static int jb_raise_exception(ev_t *e, jv self, jv *a, int n, jv *out) {
  lt_buf_t b = {0};
  if (n > 0) tostr(e, a[0], &b);
  lt_buf_putc(&b, 0);
  int rc = lt_buf_ok(&b) < 0 ? fail(e, "out of memory") : fail(e, "%s", b.data);
  lt_buf_free(&b);
  return rc;
}

static int jb_range(ev_t *e, jv self, jv *a, int n, jv *out) {
  int npos;
  split_kwargs(a, n, &npos);
  double start = 0, stop, stepv = 1;
  for (int i = 0; i < npos; i++)
    if (!is_numlike(a[i])) return fail(e, "range() arguments must be numbers");
  if (npos == 0) return fail(e, "range() needs an argument");
  if (npos == 1) {
    stop = numval(a[0]);
  } else {
    start = numval(a[0]);
    stop = numval(a[1]);
    if (npos > 2) stepv = numval(a[2]);
  }
  if (stepv == 0) return fail(e, "range() step must not be zero");
  double cnt = stepv > 0 ? ceil((stop - start) / stepv) : ceil((start - stop) / -stepv);
  if (!(cnt > 0)) cnt = 0;
  if (cnt > 1e8) return fail(e, "template used more than its memory limit");
  if (mkarr(e, (int)cnt, out) < 0) return -1;
  for (int i = 0; i < (int)cnt; i++) {
    double x = start + i * stepv;
    out->u.a->v[i] = num(x == floor(x), x);
  }
  return 0;
}

static int jb_strftime_now(ev_t *e, jv self, jv *a, int n, jv *out) {
  int npos;
  split_kwargs(a, n, &npos);
  if (npos < 1 || a[0].t != JV_STR) return fail(e, "strftime_now() expects a format string");
  static const char *mon[] = {"January", "February", "March",     "April",   "May",      "June",
                              "July",    "August",   "September", "October", "November", "December"};
  time_t now = time(NULL);
  struct tm tm;
  localtime_r(&now, &tm);
  lt_buf_t b = {0};
  for (size_t i = 0; i < a[0].u.s.len; i++) {
    char c = a[0].u.s.p[i], d = i + 1 < a[0].u.s.len ? a[0].u.s.p[i + 1] : 0;
    if (c != '%' || !d || !strchr("YmdbBHM%", d)) {
      lt_buf_putc(&b, c);
      continue;
    }
    i++;
    switch (d) {
    case 'Y': lt_buf_printf(&b, "%d", tm.tm_year + 1900); break;
    case 'm': lt_buf_printf(&b, "%02d", tm.tm_mon + 1); break;
    case 'd': lt_buf_printf(&b, "%02d", tm.tm_mday); break;
    case 'b': lt_buf_printf(&b, "%.3s", mon[tm.tm_mon]); break;
    case 'B': lt_buf_puts(&b, mon[tm.tm_mon]); break;
    case 'H': lt_buf_printf(&b, "%02d", tm.tm_hour); break;
    case 'M': lt_buf_printf(&b, "%02d", tm.tm_min); break;
    default: lt_buf_putc(&b, '%');
    }
  }
  int rc = buf_str(e, &b, out);
  lt_buf_free(&b);
  return rc;
}

static int jb_upper(ev_t *e, jv self, jv *a, int n, jv *out) { return case_map(e, self, 0, out); }
static int jb_lower(ev_t *e, jv self, jv *a, int n, jv *out) { return case_map(e, self, 1, out); }
static int jb_title(ev_t *e, jv self, jv *a, int n, jv *out) { return case_map(e, self, 2, out); }
static int jb_capitalize(ev_t *e, jv self, jv *a, int n, jv *out) { return case_map(e, self, 3, out); }

/* strip() and friends ignore their argument, as the reference does. */
static int jb_strip(ev_t *e, jv self, jv *a, int n, jv *out) {
  size_t st = trim_start(self.u.s.p, self.u.s.len);
  return sub(e, self, st, st + trim_end(self.u.s.p + st, self.u.s.len - st), out);
}
static int jb_rstrip(ev_t *e, jv self, jv *a, int n, jv *out) {
  return sub(e, self, 0, trim_end(self.u.s.p, self.u.s.len), out);
}
static int jb_lstrip(ev_t *e, jv self, jv *a, int n, jv *out) {
  return sub(e, self, trim_start(self.u.s.p, self.u.s.len), self.u.s.len, out);
}

/* startswith/endswith: at_end picks the end; the pattern is a string or a tuple of strings. */
static int affix(ev_t *e, jv self, jv *a, int n, int at_end, jv *out) {
  const char *name = at_end ? "endswith" : "startswith";
  if (n == 0) return fail(e, "%s() requires at least one argument", name);
  jv pat = a[0];
  int cnt = pat.t == JV_ARRAY ? pat.u.a->n : 1, hit = 0;
  if (pat.t != JV_STR && pat.t != JV_ARRAY)
    return fail(e, "startswith()/endswith() argument must be a string or tuple of strings");
  for (int i = 0; i < cnt && !hit; i++) {
    jv p = pat.t == JV_ARRAY ? pat.u.a->v[i] : pat;
    if (p.t != JV_STR) return fail(e, "startswith()/endswith() tuple elements must be strings");
    size_t off = at_end ? self.u.s.len - p.u.s.len : 0;
    hit = p.u.s.len <= self.u.s.len && memcmp(self.u.s.p + off, p.u.s.p, p.u.s.len) == 0;
  }
  *out = boolean(hit);
  return 0;
}
static int jb_startswith(ev_t *e, jv self, jv *a, int n, jv *out) { return affix(e, self, a, n, 0, out); }
static int jb_endswith(ev_t *e, jv self, jv *a, int n, jv *out) { return affix(e, self, a, n, 1, out); }

/* Appends parts[0..np) to the array list. */
static int arr_append(ev_t *e, jv list, const jv *parts, int np) {
  if (!np) return 0;
  jv *nv = alloc(e, (size_t)(list.u.a->n + np) * sizeof *nv);
  if (!nv) return -1;
  if (list.u.a->n) memcpy(nv, list.u.a->v, (size_t)list.u.a->n * sizeof *nv);
  memcpy(nv + list.u.a->n, parts, (size_t)np * sizeof *nv);
  list.u.a->v = nv;
  list.u.a->n += np;
  return 0;
}

static int jb_split(ev_t *e, jv self, jv *a, int n, jv *out) {
  int npos;
  split_kwargs(a, n, &npos);
  jv sep = npos > 0 ? a[0] : NONE, maxs = npos > 1 ? a[1] : num(1, -1);
  if (sep.t != JV_STR && sep.t != JV_NONE) return fail(e, "sep argument must be a string or null");
  if (maxs.t != JV_INT) return fail(e, "maxsplit argument must be a number");
  long max = (long)maxs.u.n, count = 0;
  const char *p = self.u.s.p, *end = p + self.u.s.len;
  jv parts[64]; /* gathered 64 at a time into the list */
  int np = 0;
  if (mkarr(e, 0, out) < 0) return -1;
  for (int done = 0; !done;) {
    const char *q, *next;
    if (sep.t == JV_NONE) {
      if (count == 0) p += trim_start(p, (size_t)(end - p));
      if (p >= end) break;
      for (q = p; q < end && !space_at(q, end);) q += cp_len(q, (size_t)(end - q), 0);
      next = q + trim_start(q, (size_t)(end - q));
    } else {
      if (sep.u.s.len == 0) return fail(e, "empty separator");
      q = memmem(p, (size_t)(end - p), sep.u.s.p, sep.u.s.len);
      next = q ? q + sep.u.s.len : end;
    }
    if (!q || (max != -1 && count >= max)) q = end, done = 1;
    parts[np++] = (jv){.t = JV_STR, .u.s = {p, (size_t)(q - p)}};
    if (np == 64) {
      if (arr_append(e, *out, parts, np) < 0) return -1;
      np = 0;
    }
    count++;
    p = next;
  }
  return arr_append(e, *out, parts, np);
}

static int jb_replace(ev_t *e, jv self, jv *a, int n, jv *out) {
  if (n < 2) return fail(e, "replace() requires at least two arguments");
  if (a[0].t != JV_STR || a[1].t != JV_STR) return fail(e, "replace() arguments must be strings");
  jv cnt = NONE;
  if (n > 2) {
    if (a[2].t == JV_OBJECT && a[2].u.o->kind == JO_KWARGS) {
      int k = obj_find(a[2].u.o, "count", 5);
      if (k >= 0) cnt = a[2].u.o->v[k];
    } else {
      cnt = a[2];
    }
  }
  if (cnt.t != JV_INT && cnt.t != JV_NONE) return fail(e, "replace() count argument must be a number or null");
  double left = cnt.t == JV_NONE || cnt.u.n < 0 ? INFINITY : cnt.u.n;
  const char *p = self.u.s.p, *end = p + self.u.s.len;
  jv o = a[0], w = a[1];
  lt_buf_t b = {0};
  if (o.u.s.len == 0) { /* an empty pattern matches before every character and at the end */
    for (;;) {
      if (left > 0) {
        lt_buf_append(&b, w.u.s.p, w.u.s.len);
        left--;
      }
      if (p >= end) break;
      size_t k = cp_len(p, (size_t)(end - p), 0);
      lt_buf_append(&b, p, k);
      p += k;
    }
  } else {
    while (p < end) {
      const char *q = left > 0 ? memmem(p, (size_t)(end - p), o.u.s.p, o.u.s.len) : NULL;
      if (!q) break;
      lt_buf_append(&b, p, (size_t)(q - p));
      lt_buf_append(&b, w.u.s.p, w.u.s.len);
      left--;
      p = q + o.u.s.len;
    }
    lt_buf_append(&b, p, (size_t)(end - p));
  }
  int rc = buf_str(e, &b, out);
  lt_buf_free(&b);
  return rc;
}

static int jb_get(ev_t *e, jv self, jv *a, int n, jv *out) {
  if (n < 1 || a[0].t != JV_STR) return fail(e, "Object key must be a string: got %s", n ? type_name(a[0]) : "nothing");
  int k = obj_find(self.u.o, a[0].u.s.p, a[0].u.s.len);
  *out = k >= 0 ? self.u.o->v[k] : n > 1 ? a[1] : NONE;
  return 0;
}
static int jb_items(ev_t *e, jv self, jv *a, int n, jv *out) { return items_of(e, self.u.o, 0, out); }
static int jb_keys(ev_t *e, jv self, jv *a, int n, jv *out) { return items_of(e, self.u.o, 1, out); }
static int jb_values(ev_t *e, jv self, jv *a, int n, jv *out) { return items_of(e, self.u.o, 2, out); }

static int jb_dictsort(ev_t *e, jv self, jv *a, int n, jv *out) {
  int npos;
  jv kw = split_kwargs(a, n, &npos);
  args_t ka = {.kw = kw.t == JV_UNDEF ? NULL : kw.u.o};
  jv cs = npos > 0 ? a[0] : kwarg(&ka, "case_sensitive");
  jv by = npos > 1 ? a[1] : kwarg(&ka, "by");
  jv rev = npos > 2 ? a[2] : kwarg(&ka, "reverse");
  if (cs.t == JV_UNDEF) cs = boolean(0);
  if (rev.t == JV_UNDEF) rev = boolean(0);
  if (cs.t != JV_BOOL) return fail(e, "case_sensitive must be a boolean");
  if (rev.t != JV_BOOL) return fail(e, "reverse must be a boolean");
  int by_value = 0;
  if (by.t != JV_UNDEF) {
    if (by.t != JV_STR) return fail(e, "by must be a string");
    if (by.u.s.len == 5 && memcmp(by.u.s.p, "value", 5) == 0) by_value = 1;
    else if (!(by.u.s.len == 3 && memcmp(by.u.s.p, "key", 3) == 0))
      return fail(e, "by must be either 'key' or 'value'");
  }
  jv items;
  if (items_of(e, self.u.o, 0, &items) < 0) return -1;
  jv *keys = alloc(e, (size_t)(items.u.a->n + 1) * sizeof *keys);
  if (!keys) return -1;
  for (int i = 0; i < items.u.a->n; i++) keys[i] = items.u.a->v[i].u.a->v[by_value];
  return sorted(e, items.u.a->v, keys, items.u.a->n, cs.u.b, rev.u.b, out);
}

/* Where a builtin lives: a global name, a string's method or a mapping's method. */
enum { ON_GLOBAL, ON_STRING, ON_MAPPING };
static const struct {
  const char *name;
  int on;
  jbuiltin_fn fn;
} BUILTINS[] = {
    {"namespace", ON_GLOBAL, jb_namespace},   {"raise_exception", ON_GLOBAL, jb_raise_exception},
    {"range", ON_GLOBAL, jb_range},           {"strftime_now", ON_GLOBAL, jb_strftime_now},
    {"upper", ON_STRING, jb_upper},           {"lower", ON_STRING, jb_lower},
    {"strip", ON_STRING, jb_strip},           {"title", ON_STRING, jb_title},
    {"capitalize", ON_STRING, jb_capitalize}, {"rstrip", ON_STRING, jb_rstrip},
    {"lstrip", ON_STRING, jb_lstrip},         {"startswith", ON_STRING, jb_startswith},
    {"endswith", ON_STRING, jb_endswith},     {"split", ON_STRING, jb_split},
    {"replace", ON_STRING, jb_replace},       {"get", ON_MAPPING, jb_get},
    {"items", ON_MAPPING, jb_items},          {"keys", ON_MAPPING, jb_keys},
    {"values", ON_MAPPING, jb_values},        {"dictsort", ON_MAPPING, jb_dictsort},
};
#define NBUILTINS ((int)(sizeof BUILTINS / sizeof BUILTINS[0]))

/* The builtin named k (kn bytes) living on `on`, or -1. */
static int builtin_find(int on, const char *k, size_t kn) {
  for (int i = 0; i < NBUILTINS; i++)
    if (BUILTINS[i].on == on && strlen(BUILTINS[i].name) == kn && memcmp(BUILTINS[i].name, k, kn) == 0) return i;
  return -1;
}

/* A value's builtin attribute (str.upper, list.length, dict.items, …). */
static int builtin_attr(ev_t *e, jv obj, const char *k, size_t kn, jv *out) {
  *out = UNDEF;
  if (kn == 6 && memcmp(k, "length", 6) == 0) {
    if (obj.t == JV_STR) *out = num(1, (double)lt__jinja_u16len(obj.u.s.p, obj.u.s.len));
    if (obj.t == JV_ARRAY) *out = num(1, obj.u.a->n);
    return 0;
  }
  int on = obj.t == JV_STR ? ON_STRING : is_mapping(obj) ? ON_MAPPING : -1, id = on < 0 ? -1 : builtin_find(on, k, kn);
  return id < 0 ? 0 : mkfn(e, F_BUILTIN, id, obj, out);
}

static int call_builtin(ev_t *e, const lt__jfn_t *f, jv *a, int n, jv *out) {
  return BUILTINS[f->id].fn(e, f->self, a, n, out);
}

/* Binds a macro's (or caller's) parameters in scope m. */
static int bind_params(ev_t *e, const jnode *def, const lt__jlist_t *params, jv *a, int n, env_t *m, const char *name) {
  lt__jobj_t *kw = NULL;
  if (n && a[n - 1].t == JV_OBJECT && a[n - 1].u.o->kind == JO_KWARGS) {
    jv copy;
    if (mkobj(e, JO_OBJECT, &copy) < 0) return -1;
    kw = copy.u.o;
    for (int i = 0; i < a[n - 1].u.o->n; i++)
      if (obj_set(e, kw, a[n - 1].u.o->k[i], a[n - 1].u.o->klen[i], a[n - 1].u.o->v[i]) < 0) return -1;
    n--;
  }
  int *pending = alloc(e, (size_t)(params->n + 1) * sizeof *pending);
  if (!pending) return -1;
  int np = 0;
  for (int i = 0; i < params->n; i++) {
    const jnode *p = params->v[i];
    jv v = UNDEF;
    int have = i < n;
    if (have) {
      v = a[i];
    } else if (kw) {
      int k = obj_find(kw, p->str, strlen(p->str));
      if (k >= 0) {
        v = kw->v[k];
        have = 1;
        for (int j = k + 1; j < kw->n; j++) { /* delete, keeping the order */
          kw->k[j - 1] = kw->k[j];
          kw->klen[j - 1] = kw->klen[j];
          kw->v[j - 1] = kw->v[j];
        }
        kw->n--;
      }
    }
    if (!have && p->kind == JN_KWARG) pending[np++] = i;
    if (env_set(e, m, p->str, v) < 0) return -1;
  }
  if (def->flag & 1) {
    jv o = {.t = JV_OBJECT};
    if (!kw && mkobj(e, JO_OBJECT, &o) < 0) return -1;
    if (kw) o.u.o = kw;
    if (env_set(e, m, "kwargs", o) < 0) return -1;
  } else if (kw && kw->n > 0) {
    return fail(e, "macro %s takes no keyword argument '%.*s'", name, (int)kw->klen[0], kw->k[0]);
  }
  if (def->flag & 2) {
    jv va;
    int extra = n > params->n ? n - params->n : 0;
    if (mkarr(e, extra, &va) < 0) return -1;
    for (int i = 0; i < extra; i++) va.u.a->v[i] = a[params->n + i];
    if (env_set(e, m, "varargs", va) < 0) return -1;
  } else if (n > params->n) {
    return fail(e, "macro %s takes not more than %d argument(s)", name, params->n);
  }
  for (int i = 0; i < np; i++) {
    jv v;
    if (eval(e, params->v[pending[i]]->a, m, &v) < 0 || env_set(e, m, params->v[pending[i]]->str, v) < 0) return -1;
  }
  return 0;
}

static int call_value(ev_t *e, jv fn, jv *a, int n, env_t *s, jv *out) {
  if (fn.t != JV_FUNC) return fail(e, "Cannot call something that is not a function: got %s", type_name(fn));
  const lt__jfn_t *f = fn.u.f;
  if (f->kind == F_BUILTIN) return call_builtin(e, f, a, n, out);
  if (++e->depth > MAX_DEPTH) return fail(e, "macro calls nested too deeply");
  const jnode *def = f->node;
  env_t *m = env_new(e, f->kind == F_CALLER ? f->scope : s);
  lt_buf_t b = {0};
  char name[160];
  if (f->kind == F_CALLER) snprintf(name, sizeof name, "None");
  else snprintf(name, sizeof name, "'%s'", def->str);
  int rc = !m ? -1 : bind_params(e, def, &def->args, a, n, m, name);
  if (rc == 0) rc = exec_list(e, &def->list, m, &b);
  if (rc > 0) rc = fail(e, "break or continue outside a loop");
  if (rc == 0) rc = buf_str(e, &b, out);
  lt_buf_free(&b);
  e->depth--;
  return rc;
}

static int slice_idx(ev_t *e, jv v, int *set, double *out) {
  *set = v.t != JV_UNDEF;
  if (*set && v.t != JV_INT) return fail(e, "Slice indices must be integers or undefined");
  *out = *set ? v.u.n : 0;
  return 0;
}

static int eval_slice(ev_t *e, jv obj, const jnode *sl, env_t *s, jv *out) {
  if (obj.t != JV_ARRAY && obj.t != JV_STR) return fail(e, "Slice object must be an array or string");
  jv va = UNDEF, vb = UNDEF, vc = UNDEF;
  if ((sl->a && eval(e, sl->a, s, &va) < 0) || (sl->b && eval(e, sl->b, s, &vb) < 0) ||
      (sl->c && eval(e, sl->c, s, &vc) < 0))
    return -1;
  int has_a, has_b, has_c;
  double start = 0, stop = 0, stp = 1;
  if (slice_idx(e, va, &has_a, &start) < 0 || slice_idx(e, vb, &has_b, &stop) < 0 || slice_idx(e, vc, &has_c, &stp) < 0)
    return -1;
  if (!has_c) stp = 1;
  /* Strings slice by code point (Array.from). */
  size_t *cps = NULL;
  double len;
  if (obj.t == JV_ARRAY) {
    len = obj.u.a->n;
  } else {
    size_t cnt = 0;
    for (size_t i = 0; i < obj.u.s.len; i += cp_len(obj.u.s.p, obj.u.s.len, i)) cnt++;
    if (!(cps = alloc(e, (cnt + 1) * sizeof *cps))) return -1;
    cnt = 0;
    for (size_t i = 0; i < obj.u.s.len; i += cp_len(obj.u.s.p, obj.u.s.len, i)) cps[cnt++] = i;
    cps[cnt] = obj.u.s.len;
    len = (double)cnt;
  }
  if (stp == 0) return fail(e, "slice step cannot be zero");
  int dir = stp > 0 ? 1 : -1;
  if (dir > 0) {
    if (!has_a) start = 0;
    start = start < 0 ? fmax(len + start, 0) : fmin(start, len);
    if (!has_b) stop = len;
    stop = stop < 0 ? fmax(len + stop, 0) : fmin(stop, len);
  } else {
    if (!has_a) start = len - 1;
    start = start < 0 ? fmax(len + start, -1) : fmin(start, len - 1);
    if (!has_b) stop = -1;
    stop = stop < -1 ? fmax(len + stop, -1) : fmin(stop, len - 1);
  }
  double cnt = dir * (stop - start) > 0 ? ceil(dir * (stop - start) / fabs(stp)) : 0;
  if (obj.t == JV_ARRAY) {
    if (mkarr(e, (int)cnt, out) < 0) return -1;
    int k = 0;
    for (double i = start; dir * i < dir * stop; i += stp) out->u.a->v[k++] = obj.u.a->v[(int)i];
    return 0;
  }
  lt_buf_t b = {0};
  for (double i = start; dir * i < dir * stop; i += stp)
    lt_buf_append(&b, obj.u.s.p + cps[(size_t)i], cps[(size_t)i + 1] - cps[(size_t)i]);
  int rc = buf_str(e, &b, out);
  lt_buf_free(&b);
  return rc;
}

static int eval_member(ev_t *e, const jnode *n, env_t *s, jv *out) {
  jv obj, prop;
  if (eval(e, n->a, s, &obj) < 0) return -1;
  if (n->flag) {
    if (n->b->kind == JN_SLICE) return eval_slice(e, obj, n->b, s, out);
    if (eval(e, n->b, s, &prop) < 0) return -1;
  } else if (n->b->kind == JN_INT) {
    prop = num(1, n->b->num);
  } else {
    prop = (jv){.t = JV_STR, .u.s = {n->b->str, n->b->len}};
  }
  *out = UNDEF;
  if (obj.t == JV_OBJECT) {
    if (prop.t != JV_STR) return fail(e, "Cannot access property with non-string: got %s", type_name(prop));
    int k = obj_find(obj.u.o, prop.u.s.p, prop.u.s.len);
    if (k >= 0) {
      *out = obj.u.o->v[k];
      return 0;
    }
    return builtin_attr(e, obj, prop.u.s.p, prop.u.s.len, out);
  }
  if (obj.t == JV_ARRAY || obj.t == JV_STR) {
    if (prop.t == JV_INT) {
      double i = trunc(prop.u.n);
      if (obj.t == JV_ARRAY) {
        if (i < 0) i += obj.u.a->n;
        if (i >= 0 && i < obj.u.a->n) *out = obj.u.a->v[(int)i];
        return 0;
      }
      /* by UTF-16 unit; an astral character answers as a whole */
      double len = (double)lt__jinja_u16len(obj.u.s.p, obj.u.s.len);
      if (i < 0) i += len;
      if (!(i >= 0 && i < len)) return 0;
      size_t u = 0;
      for (size_t b = 0; b < obj.u.s.len;) {
        size_t k = cp_len(obj.u.s.p, obj.u.s.len, b);
        size_t w = (unsigned char)obj.u.s.p[b] >= 0xf0 ? 2 : 1;
        if (i < (double)(u + w)) return sub(e, obj, b, b + k, out);
        u += w;
        b += k;
      }
      return 0;
    }
    if (prop.t == JV_STR) return builtin_attr(e, obj, prop.u.s.p, prop.u.s.len, out);
    return fail(e, "Cannot access property with non-string/non-number: got %s", type_name(prop));
  }
  if (prop.t != JV_STR) return fail(e, "Cannot access property with non-string: got %s", type_name(prop));
  return 0;
}

static int js_parse_int(const char *s, size_t n, double *out) {
  size_t i = trim_start(s, n);
  int neg = 0;
  if (i < n && (s[i] == '+' || s[i] == '-')) neg = s[i++] == '-';
  size_t d0 = i;
  double v = 0;
  while (i < n && s[i] >= '0' && s[i] <= '9') v = v * 10 + (s[i++] - '0');
  if (i == d0) return 0;
  *out = neg ? -v : v;
  return 1;
}

static int js_parse_float(const char *s, size_t n, double *out) {
  size_t i = trim_start(s, n), st = i;
  if (i < n && (s[i] == '+' || s[i] == '-')) i++;
  if (n - i >= 8 && memcmp(s + i, "Infinity", 8) == 0) {
    *out = s[st] == '-' ? -INFINITY : INFINITY;
    return 1;
  }
  size_t digits = 0;
  while (i < n && s[i] >= '0' && s[i] <= '9') i++, digits++;
  if (i < n && s[i] == '.') {
    i++;
    while (i < n && s[i] >= '0' && s[i] <= '9') i++, digits++;
  }
  if (!digits) return 0;
  if (i < n && (s[i] == 'e' || s[i] == 'E')) {
    size_t j = i + 1;
    if (j < n && (s[j] == '+' || s[j] == '-')) j++;
    if (j < n && s[j] >= '0' && s[j] <= '9') {
      while (j < n && s[j] >= '0' && s[j] <= '9') j++;
      i = j;
    }
  }
  char tmp[128];
  size_t l = i - st < sizeof tmp - 1 ? i - st : sizeof tmp - 1;
  memcpy(tmp, s + st, l);
  tmp[l] = 0;
  *out = strtod(tmp, NULL);
  return 1;
}

/* ---- tests (`x is odd`): one row and one handler each ---- */
typedef int (*jtest_fn)(jv v, jv arg);
static int jt_boolean(jv v, jv arg) { return v.t == JV_BOOL; }
static int jt_callable(jv v, jv arg) { return v.t == JV_FUNC; }
static int jt_odd(jv v, jv arg) { return fmod(v.u.n, 2) != 0; }
static int jt_even(jv v, jv arg) { return fmod(v.u.n, 2) == 0; }
static int jt_false(jv v, jv arg) { return v.t == JV_BOOL && !v.u.b; }
static int jt_true(jv v, jv arg) { return v.t == JV_BOOL && v.u.b; }
static int jt_none(jv v, jv arg) { return v.t == JV_NONE; }
static int jt_string(jv v, jv arg) { return v.t == JV_STR; }
static int jt_number(jv v, jv arg) { return is_num(v); }
static int jt_integer(jv v, jv arg) { return v.t == JV_INT; }
static int jt_iterable(jv v, jv arg) { return (v.t == JV_ARRAY && !v.u.a->tuple) || v.t == JV_STR; }
static int jt_mapping(jv v, jv arg) { return is_mapping(v); }
static int jt_sequence(jv v, jv arg) { return v.t == JV_ARRAY || is_mapping(v) || v.t == JV_STR; }
/* ASCII letters only, as the reference's regular expressions */
static int ascii_case_is(jv v, char lo, char hi) {
  if (v.t != JV_STR) return 0;
  for (size_t i = 0; i < v.u.s.len; i++)
    if (v.u.s.p[i] >= lo && v.u.s.p[i] <= hi) return 0;
  return 1;
}
static int jt_lower(jv v, jv arg) { return ascii_case_is(v, 'A', 'Z'); }
static int jt_upper(jv v, jv arg) { return ascii_case_is(v, 'a', 'z'); }
static int jt_defined(jv v, jv arg) { return v.t != JV_UNDEF; }
static int jt_undefined(jv v, jv arg) { return v.t == JV_UNDEF; }
static int jt_equalto(jv v, jv arg) { return strict_eq(v, arg); }

static const struct {
  const char *name;
  int int_only; /* odd and even refuse anything but an integer */
  jtest_fn fn;
} TESTS[] = {
    {"boolean", 0, jt_boolean},   {"callable", 0, jt_callable},   {"odd", 1, jt_odd},
    {"even", 1, jt_even},         {"false", 0, jt_false},         {"true", 0, jt_true},
    {"none", 0, jt_none},         {"string", 0, jt_string},       {"number", 0, jt_number},
    {"integer", 0, jt_integer},   {"iterable", 0, jt_iterable},   {"mapping", 0, jt_mapping},
    {"sequence", 0, jt_sequence}, {"lower", 0, jt_lower},         {"upper", 0, jt_upper},
    {"defined", 0, jt_defined},   {"undefined", 0, jt_undefined}, {"equalto", 0, jt_equalto},
    {"eq", 0, jt_equalto},
};

static int test_value(ev_t *e, const char *name, jv v, jv arg, int *out) {
  for (size_t i = 0; i < sizeof TESTS / sizeof TESTS[0]; i++) {
    if (strcmp(TESTS[i].name, name)) continue;
    if (TESTS[i].int_only && v.t != JV_INT) return fail(e, "cannot %s on %s", name, type_name(v));
    *out = TESTS[i].fn(v, arg);
    return 0;
  }
  return fail(e, "Unknown test: %s", name);
}

static int indent(ev_t *e, jv v, int width, int first, int blank, jv *out) {
  lt_buf_t b = {0};
  const char *p = v.u.s.p, *end = p + v.u.s.len;
  for (int line = 0;; line++) {
    const char *q = memchr(p, '\n', (size_t)(end - p));
    size_t l = q ? (size_t)(q - p) : (size_t)(end - p);
    if (!((!first && line == 0) || (!blank && l == 0)))
      for (int k = 0; k < width; k++) lt_buf_putc(&b, ' ');
    lt_buf_append(&b, p, l);
    if (!q) break;
    lt_buf_putc(&b, '\n');
    p = q + 1;
  }
  int rc = buf_str(e, &b, out);
  lt_buf_free(&b);
  return rc;
}

/* ---- filters (`x|name` and `x|name(...)`): one row and one handler each ----
 * The reference accepts a filter on some value types when written bare and on others when called; a row says
 * both.  A handler gets the call: a == NULL when the filter was written without parentheses (or, for a row
 * marked raw, when its arguments are read unevaluated from `call`). */
enum { T_UNDEF = 1, T_NONE = 2, T_BOOL = 4, T_NUM = 8, T_STR = 16, T_ARR = 32, T_MAP = 64, T_OTHER = 128, T_ANY = 255 };

typedef struct {
  const char *name;
  jv v;
  const args_t *a;   /* NULL: bare (or raw) */
  const jnode *call; /* the call node; NULL when bare */
  env_t *s;
} jfilter_call_t;
typedef int (*jfilter_fn)(ev_t *e, const jfilter_call_t *c, jv *out);

static unsigned value_kind(jv v) {
  switch (v.t) {
  case JV_UNDEF: return T_UNDEF;
  case JV_NONE: return T_NONE;
  case JV_BOOL: return T_BOOL;
  case JV_INT:
  case JV_FLOAT: return T_NUM;
  case JV_STR: return T_STR;
  case JV_ARRAY: return T_ARR;
  default: return is_mapping(v) ? T_MAP : T_OTHER;
  }
}

static jv pick(const args_t *a, int i, const char *k) {
  if (!a) return UNDEF;
  return i < a->n ? a->v[i] : kwarg(a, k);
}

static int json_str(ev_t *e, jv v, const json_opts_t *o, int undef_null, jv *out) {
  lt_buf_t b = {0};
  int rc = tojson(e, v, o, 0, undef_null, &b) < 0 ? -1 : buf_str(e, &b, out);
  lt_buf_free(&b);
  return rc;
}

static int jf_safe(ev_t *e, const jfilter_call_t *c, jv *out) { return *out = c->v, 0; }
static int jf_list(ev_t *e, const jfilter_call_t *c, jv *out) { return *out = c->v, 0; }
static int jf_first(ev_t *e, const jfilter_call_t *c, jv *out) {
  return *out = c->v.u.a->n ? c->v.u.a->v[0] : UNDEF, 0;
}
static int jf_last(ev_t *e, const jfilter_call_t *c, jv *out) {
  return *out = c->v.u.a->n ? c->v.u.a->v[c->v.u.a->n - 1] : UNDEF, 0;
}
static int jf_length(ev_t *e, const jfilter_call_t *c, jv *out) {
  jv v = c->v;
  double n = v.t == JV_STR ? (double)lt__jinja_u16len(v.u.s.p, v.u.s.len) : v.t == JV_ARRAY ? v.u.a->n : v.u.o->n;
  return *out = num(1, n), 0;
}
static int jf_reverse(ev_t *e, const jfilter_call_t *c, jv *out) {
  const lt__jarr_t *a = c->v.u.a;
  if (mkarr(e, a->n, out) < 0) return -1;
  for (int i = 0; i < a->n; i++) out->u.a->v[i] = a->v[a->n - 1 - i];
  return 0;
}
static int jf_unique(ev_t *e, const jfilter_call_t *c, jv *out) {
  const lt__jarr_t *a = c->v.u.a;
  if (mkarr(e, a->n, out) < 0) return -1;
  int k = 0;
  for (int i = 0; i < a->n; i++) {
    int seen = 0;
    for (int j = 0; j < k && !seen; j++)
      seen = strict_eq(out->u.a->v[j], a->v[i]) ||
             (is_num(a->v[i]) && isnan(a->v[i].u.n) && is_num(out->u.a->v[j]) && isnan(out->u.a->v[j].u.n));
    if (!seen) out->u.a->v[k++] = a->v[i];
  }
  out->u.a->n = k;
  return 0;
}
static int jf_string(ev_t *e, const jfilter_call_t *c, jv *out) {
  static const json_opts_t plain = {.indent = -1};
  jv v = c->v;
  if (v.t == JV_STR) return *out = v, 0;
  if (v.t == JV_ARRAY) return json_str(e, v, &plain, 0, out);
  if (v.t == JV_BOOL) return mkstr(e, v.u.b ? "true" : "false", v.u.b ? 4 : 5, out);
  lt_buf_t b = {0};
  int rc = tostr(e, v, &b) < 0 ? -1 : buf_str(e, &b, out);
  lt_buf_free(&b);
  return rc;
}
static int jf_upper(ev_t *e, const jfilter_call_t *c, jv *out) { return case_map(e, c->v, 0, out); }
static int jf_lower(ev_t *e, const jfilter_call_t *c, jv *out) { return case_map(e, c->v, 1, out); }
static int jf_title(ev_t *e, const jfilter_call_t *c, jv *out) { return case_map(e, c->v, 2, out); }
static int jf_capitalize(ev_t *e, const jfilter_call_t *c, jv *out) { return case_map(e, c->v, 3, out); }
static int jf_trim(ev_t *e, const jfilter_call_t *c, jv *out) { return jb_strip(e, c->v, NULL, 0, out); }
static int jf_abs(ev_t *e, const jfilter_call_t *c, jv *out) { return *out = num(c->v.t == JV_INT, fabs(c->v.u.n)), 0; }
static int jf_bool(ev_t *e, const jfilter_call_t *c, jv *out) { return *out = c->v, 0; }

/* int and float: a string parsed as JavaScript would (else the default); a bare int floors a number, a called one
 * (the reference's quirk) returns it unchanged. */
static int to_number(ev_t *e, const jfilter_call_t *c, int is_i, jv *out) {
  jv v = c->v, def = pick(c->a, 0, "default");
  if (def.t == JV_UNDEF) def = num(is_i, 0);
  if (v.t == JV_STR) {
    double d;
    int ok = is_i ? js_parse_int(v.u.s.p, v.u.s.len, &d) : js_parse_float(v.u.s.p, v.u.s.len, &d);
    return *out = ok ? num(is_i, d) : def, 0;
  }
  if (is_num(v)) return *out = c->a ? v : num(is_i, is_i ? floor(v.u.n) : v.u.n), 0;
  if (v.t == JV_BOOL) return *out = num(is_i, v.u.b), 0;
  return fail(e, "Cannot apply filter \"%s\" to type: %s", c->name, type_name(v));
}
static int jf_int(ev_t *e, const jfilter_call_t *c, jv *out) { return to_number(e, c, 1, out); }
static int jf_float(ev_t *e, const jfilter_call_t *c, jv *out) { return to_number(e, c, 0, out); }

static int jf_tojson(ev_t *e, const jfilter_call_t *c, jv *out) {
  json_opts_t o = {.indent = -1};
  jv ind = kwarg(c->a, "indent"), asc = kwarg(c->a, "ensure_ascii"), srt = kwarg(c->a, "sort_keys");
  jv sep = kwarg(c->a, "separators");
  if (ind.t != JV_UNDEF && ind.t != JV_NONE && ind.t != JV_INT) return fail(e, "If set, indent must be a number");
  if (ind.t == JV_INT) o.indent = ind.u.n > 1000 ? 1000 : ind.u.n < 0 ? 0 : (int)ind.u.n;
  if (asc.t != JV_UNDEF && asc.t != JV_BOOL) return fail(e, "If set, ensure_ascii must be a boolean");
  if (srt.t != JV_UNDEF && srt.t != JV_BOOL) return fail(e, "If set, sort_keys must be a boolean");
  o.ascii = asc.t == JV_BOOL && asc.u.b;
  o.sort = srt.t == JV_BOOL && srt.u.b;
  if (sep.t == JV_ARRAY) {
    if (sep.u.a->n != 2 || sep.u.a->v[0].t != JV_STR || sep.u.a->v[1].t != JV_STR)
      return fail(e, "separators must be a tuple of two strings");
    char *is = lt__jarena_strdup(&e->ar, sep.u.a->v[0].u.s.p, sep.u.a->v[0].u.s.len);
    char *ks = lt__jarena_strdup(&e->ar, sep.u.a->v[1].u.s.p, sep.u.a->v[1].u.s.len);
    if (!is || !ks) return fail(e, "template used more than its memory limit");
    o.item_sep = is;
    o.key_sep = ks;
  } else if (sep.t != JV_UNDEF && sep.t != JV_NONE) {
    return fail(e, "If set, separators must be a tuple of two strings");
  }
  return json_str(e, c->v, &o, 1, out);
}

/* A string joins its characters, a list its items (none and undefined as empty). */
static int jf_join(ev_t *e, const jfilter_call_t *c, jv *out) {
  jv v = c->v, sep = pick(c->a, 0, "separator");
  if (v.t != JV_STR && v.t != JV_ARRAY) return fail(e, "Cannot apply filter \"join\" to type: %s", type_name(v));
  if (sep.t == JV_UNDEF) sep = (jv){.t = JV_STR, .u.s = {"", 0}};
  if (sep.t != JV_STR) return fail(e, "separator must be a string");
  lt_buf_t b = {0};
  if (v.t == JV_STR) {
    for (size_t i = 0; i < v.u.s.len;) {
      size_t k = cp_len(v.u.s.p, v.u.s.len, i);
      if (i) lt_buf_append(&b, sep.u.s.p, sep.u.s.len);
      lt_buf_append(&b, v.u.s.p + i, k);
      i += k;
    }
  } else {
    for (int i = 0; i < v.u.a->n; i++) {
      if (i) lt_buf_append(&b, sep.u.s.p, sep.u.s.len);
      raw_str(e, v.u.a->v[i], &b, 1);
    }
  }
  int rc = buf_str(e, &b, out);
  lt_buf_free(&b);
  return rc;
}

static int jf_default(ev_t *e, const jfilter_call_t *c, jv *out) {
  jv def = c->a->n > 0 ? c->a->v[0] : (jv){.t = JV_STR, .u.s = {"", 0}};
  jv flag = pick(c->a, 1, "boolean");
  if (flag.t == JV_UNDEF) flag = boolean(0);
  if (flag.t != JV_BOOL) return fail(e, "`default` filter flag must be a boolean");
  *out = c->v.t == JV_UNDEF || (flag.u.b && !truthy(c->v)) ? def : c->v;
  return 0;
}

static int jf_sort(ev_t *e, const jfilter_call_t *c, jv *out) {
  jv v = c->v, rev = pick(c->a, 0, "reverse"), cs = pick(c->a, 1, "case_sensitive"), at = pick(c->a, 2, "attribute");
  if (rev.t == JV_UNDEF) rev = boolean(0);
  if (cs.t == JV_UNDEF) cs = boolean(0);
  if (rev.t != JV_BOOL) return fail(e, "reverse must be a boolean");
  if (cs.t != JV_BOOL) return fail(e, "case_sensitive must be a boolean");
  if (at.t != JV_UNDEF && at.t != JV_NONE && at.t != JV_STR && at.t != JV_INT)
    return fail(e, "attribute must be a string, integer, or null");
  jv *keys = v.u.a->v;
  if (at.t == JV_STR || at.t == JV_INT) {
    if (!(keys = alloc(e, (size_t)(v.u.a->n + 1) * sizeof *keys))) return -1;
    lt_buf_t path = {0};
    raw_str(e, at, &path, 0);
    if (lt_buf_ok(&path) < 0) return fail(e, "out of memory");
    for (int i = 0; i < v.u.a->n; i++) keys[i] = attr_path(v.u.a->v[i], path.data ? path.data : "", path.len);
    lt_buf_free(&path);
  }
  return sorted(e, v.u.a->v, keys, v.u.a->n, cs.u.b, rev.u.b, out);
}

static int jf_map(ev_t *e, const jfilter_call_t *c, jv *out) {
  jv v = c->v, at = kwarg(c->a, "attribute");
  if (at.t == JV_UNDEF) return fail(e, "`map` expressions without `attribute` set are not currently supported.");
  if (at.t != JV_STR) return fail(e, "attribute must be a string");
  jv def = kwarg(c->a, "default");
  if (mkarr(e, v.u.a->n, out) < 0) return -1;
  for (int i = 0; i < v.u.a->n; i++) {
    if (v.u.a->v[i].t != JV_OBJECT) return fail(e, "items in map must be an object");
    jv x = attr_path(v.u.a->v[i], at.u.s.p, at.u.s.len);
    out->u.a->v[i] = x.t == JV_UNDEF ? def : x;
  }
  return 0;
}

static int jf_indent(ev_t *e, const jfilter_call_t *c, jv *out) {
  jv w = pick(c->a, 0, "width"), first = pick(c->a, 1, "first"), blank = pick(c->a, 2, "blank");
  if (w.t == JV_UNDEF) w = num(1, 4);
  if (w.t != JV_INT) return fail(e, "width must be a number");
  return indent(e, c->v, w.u.n < 0 ? 0 : w.u.n > 1000 ? 1000 : (int)w.u.n, truthy(first), truthy(blank), out);
}

/* replace is the string method, always handed a keywords object (count=). */
static int jf_replace(ev_t *e, const jfilter_call_t *c, jv *out) {
  jv kwv, *fa = alloc(e, (size_t)(c->a->n + 1) * sizeof *fa);
  if (!fa || mkobj(e, JO_KWARGS, &kwv) < 0) return -1;
  if (c->a->kw) kwv.u.o = c->a->kw;
  memcpy(fa, c->a->v, (size_t)c->a->n * sizeof *fa);
  fa[c->a->n] = kwv;
  return jb_replace(e, c->v, fa, c->a->n + 1, out);
}

/* A mapping's method as a filter (items, keys, values, get, dictsort). */
static int jf_mapping_method(ev_t *e, const jfilter_call_t *c, jv *out) {
  int id = builtin_find(ON_MAPPING, c->name, strlen(c->name)), n = 0;
  jv *fa = c->a ? flat_args(e, c->a, &n) : NULL;
  if (c->a && !fa) return -1;
  return BUILTINS[id].fn(e, c->v, fa, n, out);
}

/* selectattr/rejectattr take their arguments as written: an attribute name, optionally a test and its argument. */
static int jf_selectattr(ev_t *e, const jfilter_call_t *c, jv *out) {
  const char *name = c->name;
  const jnode *call = c->call;
  jv v = c->v;
  int sel = name[0] == 's';
  if (v.t != JV_ARRAY) return fail(e, "Cannot apply filter \"%s\" to type: %s", name, type_name(v));
  for (int i = 0; i < v.u.a->n; i++)
    if (v.u.a->v[i].t != JV_OBJECT) return fail(e, "`%s` can only be applied to array of objects", name);
  for (int i = 0; i < call->args.n; i++)
    if (call->args.v[i]->kind != JN_TEXT) return fail(e, "arguments of `%s` must be strings", name);
  if (call->args.n < 1) return fail(e, "`%s` needs an attribute name", name);
  const jnode *attr = call->args.v[0];
  const char *test = call->args.n > 1 ? call->args.v[1]->str : NULL;
  jv arg = call->args.n > 2 ? (jv){.t = JV_STR, .u.s = {call->args.v[2]->str, call->args.v[2]->len}} : UNDEF;
  if (mkarr(e, v.u.a->n, out) < 0) return -1;
  int k = 0;
  for (int i = 0; i < v.u.a->n; i++) {
    int idx = obj_find(v.u.a->v[i].u.o, attr->str, attr->len), r = 0;
    if (idx >= 0) {
      jv x = v.u.a->v[i].u.o->v[idx];
      if (test) {
        if (test_value(e, test, x, arg, &r) < 0) return -1;
      } else {
        r = truthy(x);
      }
    }
    if (r == sel) out->u.a->v[k++] = v.u.a->v[i];
  }
  out->u.a->n = k;
  return 0;
}

enum { RAW = 1 }; /* the handler reads the call's arguments unevaluated */
static const struct {
  const char *name;
  unsigned bare, called; /* value kinds (T_*) the filter takes written bare and called with parentheses */
  int flags;
  jfilter_fn fn;
} FILTERS[] = {
    {"abs", T_NUM, 0, 0, jf_abs},
    {"bool", T_BOOL, 0, 0, jf_bool},
    {"capitalize", T_STR, 0, 0, jf_capitalize},
    {"default", 0, T_ANY, 0, jf_default},
    {"dictsort", T_MAP, T_MAP, 0, jf_mapping_method},
    {"first", T_ARR, 0, 0, jf_first},
    {"float", T_STR | T_NUM | T_BOOL, T_ANY, 0, jf_float},
    {"get", T_MAP, T_MAP, 0, jf_mapping_method},
    {"indent", T_STR, T_STR, 0, jf_indent},
    {"int", T_STR | T_NUM | T_BOOL, T_ANY, 0, jf_int},
    {"items", T_MAP, T_MAP, 0, jf_mapping_method},
    {"join", T_STR | T_ARR, T_ANY, 0, jf_join},
    {"keys", T_MAP, T_MAP, 0, jf_mapping_method},
    {"last", T_ARR, 0, 0, jf_last},
    {"length", T_STR | T_ARR | T_MAP, 0, 0, jf_length},
    {"list", T_ARR, 0, 0, jf_list},
    {"lower", T_STR, 0, 0, jf_lower},
    {"map", 0, T_ARR, 0, jf_map},
    {"rejectattr", 0, T_ANY, RAW, jf_selectattr},
    {"replace", 0, T_STR, 0, jf_replace},
    {"reverse", T_ARR, 0, 0, jf_reverse},
    {"safe", T_ANY, 0, 0, jf_safe},
    {"selectattr", 0, T_ANY, RAW, jf_selectattr},
    {"sort", T_ARR, T_ARR, 0, jf_sort},
    {"string", T_STR | T_ARR | T_NUM | T_BOOL, 0, 0, jf_string},
    {"title", T_STR, 0, 0, jf_title},
    {"tojson", T_ANY, T_ANY, 0, jf_tojson},
    {"trim", T_STR, 0, 0, jf_trim},
    {"unique", T_ARR, 0, 0, jf_unique},
    {"upper", T_STR, 0, 0, jf_upper},
    {"values", T_MAP, T_MAP, 0, jf_mapping_method},
};

/* The reference's message for a filter it has not for this value (its type names per value class). */
static int filter_unknown(ev_t *e, const char *name, jv v, int called) {
  static const struct {
    unsigned kind;
    const char *cls;
  } C[] = {{T_ARR, "ArrayValue"},
           {T_STR, "StringValue"},
           {T_MAP, "ObjectValue"},
           {T_NUM, "NumericValue"},
           {T_BOOL, "BooleanValue"}};
  unsigned k = value_kind(v);
  for (size_t i = 0; i < sizeof C / sizeof C[0]; i++)
    if (C[i].kind == k && (!called || k & (T_ARR | T_STR | T_MAP)))
      return fail(e, "Unknown %s filter: %s", C[i].cls, name);
  return fail(e, "Cannot apply filter \"%s\" to type: %s", name, type_name(v));
}

const char *lt__jinja_table_name(int kind, int i) {
  if (i < 0) return NULL;
  if (kind == 0) return (size_t)i < sizeof FILTERS / sizeof FILTERS[0] ? FILTERS[i].name : NULL;
  if (kind == 1) return i < NBUILTINS ? BUILTINS[i].name : NULL;
  return (size_t)i < sizeof TESTS / sizeof TESTS[0] ? TESTS[i].name : NULL;
}

static int apply_filter(ev_t *e, jv v, const jnode *f, env_t *s, jv *out) {
  int called = f->kind == JN_CALL && f->a->kind == JN_IDENT;
  if (f->kind != JN_IDENT && !called) return fail(e, "Unknown filter");
  jfilter_call_t c = {.name = called ? f->a->str : f->str, .v = v, .call = called ? f : NULL, .s = s};
  int row = -1;
  for (size_t i = 0; i < sizeof FILTERS / sizeof FILTERS[0] && row < 0; i++)
    if (!strcmp(FILTERS[i].name, c.name) && ((called ? FILTERS[i].called : FILTERS[i].bare) & value_kind(v)))
      row = (int)i;
  args_t a;
  if (called && (row < 0 || !(FILTERS[row].flags & RAW))) { /* arguments are evaluated before the filter is sought */
    if (eval_args(e, &f->args, s, &a) < 0) return -1;
    c.a = &a;
  }
  if (row < 0) return filter_unknown(e, c.name, v, called);
  return FILTERS[row].fn(e, &c, out);
}

static int binary_op(ev_t *e, const jnode *n, env_t *s, jv *out) {
  const char *op = n->str;
  jv l, r;
  if (eval(e, n->a, s, &l) < 0) return -1;
  if (!strcmp(op, "and")) return truthy(l) ? eval(e, n->b, s, out) : (*out = l, 0);
  if (!strcmp(op, "or")) return truthy(l) ? (*out = l, 0) : eval(e, n->b, s, out);
  if (eval(e, n->b, s, &r) < 0) return -1;
  if (!strcmp(op, "==")) return *out = boolean(loose_eq(l, r)), 0;
  if (!strcmp(op, "!=")) return *out = boolean(!loose_eq(l, r)), 0;
  int in = !strcmp(op, "in"), notin = !strcmp(op, "not in");
  if (l.t == JV_UNDEF || r.t == JV_UNDEF) {
    if (r.t == JV_UNDEF && (in || notin)) return *out = boolean(notin), 0;
    return fail(e, "Cannot perform operation %s on undefined values", op);
  }
  if (l.t == JV_NONE || r.t == JV_NONE) return fail(e, "Cannot perform operation on null values");
  lt_buf_t b = {0};
  if (!strcmp(op, "~")) {
    raw_str(e, l, &b, 0);
    raw_str(e, r, &b, 0);
    int rc = buf_str(e, &b, out);
    lt_buf_free(&b);
    return rc;
  }
  if (!strcmp(op, "**") && is_numlike(l) && is_numlike(r)) {
    double x = numval(l), y = numval(r);
    if (x == 0 && y < 0) return fail(e, "0.0 cannot be raised to a negative power");
    double z = pow(x, y);
    if (!isfinite(z)) return fail(e, "Exponentiation result is not a finite real number");
    return *out = num(!(l.t == JV_FLOAT || r.t == JV_FLOAT || y < 0), z), 0;
  }
  if (is_num(l) && is_num(r)) {
    double x = l.u.n, y = r.u.n;
    int fl = l.t == JV_FLOAT || r.t == JV_FLOAT;
    if (!strcmp(op, "+")) return *out = num(!fl, x + y), 0;
    if (!strcmp(op, "-")) return *out = num(!fl, x - y), 0;
    if (!strcmp(op, "*")) return *out = num(!fl, x * y), 0;
    if (!strcmp(op, "/")) return *out = num(0, x / y), 0;
    if (!strcmp(op, "//")) return *out = num(!fl, floor(x / y)), 0;
    if (!strcmp(op, "%")) return *out = num(!fl, fmod(x, y)), 0;
    if (!strcmp(op, "<")) return *out = boolean(x < y), 0;
    if (!strcmp(op, ">")) return *out = boolean(x > y), 0;
    if (!strcmp(op, ">=")) return *out = boolean(x >= y), 0;
    if (!strcmp(op, "<=")) return *out = boolean(x <= y), 0;
  } else if (l.t == JV_ARRAY && r.t == JV_ARRAY) {
    if (!strcmp(op, "+")) {
      if (mkarr(e, l.u.a->n + r.u.a->n, out) < 0) return -1;
      memcpy(out->u.a->v, l.u.a->v, (size_t)l.u.a->n * sizeof(jv));
      memcpy(out->u.a->v + l.u.a->n, r.u.a->v, (size_t)r.u.a->n * sizeof(jv));
      return 0;
    }
  } else if (r.t == JV_ARRAY && (in || notin)) {
    int found = 0;
    for (int i = 0; i < r.u.a->n && !found; i++) found = strict_eq(r.u.a->v[i], l);
    return *out = boolean(found == in), 0;
  }
  if ((l.t == JV_STR || r.t == JV_STR) && !strcmp(op, "+")) {
    raw_str(e, l, &b, 0);
    raw_str(e, r, &b, 0);
    int rc = buf_str(e, &b, out);
    lt_buf_free(&b);
    return rc;
  }
  if (l.t == JV_STR && r.t == JV_STR && (in || notin)) {
    int found = l.u.s.len == 0 || memmem(r.u.s.p, r.u.s.len, l.u.s.p, l.u.s.len) != NULL;
    return *out = boolean(found == in), 0;
  }
  if (l.t == JV_STR && is_mapping(r) && (in || notin)) {
    int found = obj_find(r.u.o, l.u.s.p, l.u.s.len) >= 0;
    return *out = boolean(found == in), 0;
  }
  return fail(e, "Unknown operator \"%s\" between %s and %s", op, type_name(l), type_name(r));
}

static int eval(ev_t *e, const jnode *n, env_t *s, jv *out) {
  if (step(e) < 0) return -1;
  if (++e->depth > MAX_DEPTH) return fail(e, "template nested too deeply");
  int rc = 0;
  switch (n->kind) {
  case JN_TEXT: *out = (jv){.t = JV_STR, .u.s = {n->str, n->len}}; break;
  case JN_INT: *out = num(1, n->num); break;
  case JN_FLOAT: *out = num(0, n->num); break;
  case JN_ARRAY:
  case JN_TUPLE:
    if ((rc = mkarr(e, n->list.n, out)) < 0) break;
    out->u.a->tuple = n->kind == JN_TUPLE;
    for (int i = 0; i < n->list.n && rc == 0; i++) rc = eval(e, n->list.v[i], s, &out->u.a->v[i]);
    break;
  case JN_OBJECT:
    if ((rc = mkobj(e, JO_OBJECT, out)) < 0) break;
    for (int i = 0; i < n->list.n && rc == 0; i++) {
      jv k, v;
      if ((rc = eval(e, n->list.v[i], s, &k)) < 0) break;
      if (k.t != JV_STR) {
        rc = fail(e, "Object keys must be strings: got %s", type_name(k));
        break;
      }
      if ((rc = eval(e, n->list2.v[i], s, &v)) == 0) rc = obj_set(e, out->u.o, k.u.s.p, k.u.s.len, v);
    }
    break;
  case JN_IDENT: *out = env_get(s, n->str); break;
  case JN_CALL: {
    args_t a;
    jv fn, *fa;
    int fn_n;
    if ((rc = eval_args(e, &n->args, s, &a)) < 0) break;
    if (!(fa = flat_args(e, &a, &fn_n))) {
      rc = -1;
      break;
    }
    if ((rc = eval(e, n->a, s, &fn)) == 0) rc = call_value(e, fn, fa, fn_n, s, out);
    break;
  }
  case JN_MEMBER: rc = eval_member(e, n, s, out); break;
  case JN_UNARY: {
    jv v;
    if ((rc = eval(e, n->a, s, &v)) < 0) break;
    if (!strcmp(n->str, "not")) {
      *out = boolean(!truthy(v));
    } else if (is_numlike(v)) {
      double d = numval(v) * (n->str[0] == '-' ? -1 : 1);
      *out = num(v.t != JV_FLOAT, d);
    } else {
      rc = fail(e, "Unknown operator \"%s\" for %s", n->str, type_name(v));
    }
    break;
  }
  case JN_BINARY: rc = binary_op(e, n, s, out); break;
  case JN_FILTER: {
    jv v;
    if ((rc = eval(e, n->a, s, &v)) == 0) rc = apply_filter(e, v, n->b, s, out);
    break;
  }
  case JN_TEST: {
    jv v;
    int r = 0;
    if ((rc = eval(e, n->a, s, &v)) == 0 && (rc = test_value(e, n->str, v, UNDEF, &r)) == 0)
      *out = boolean(n->flag ? !r : r);
    break;
  }
  case JN_SELECT: {
    jv t;
    if ((rc = eval(e, n->b, s, &t)) < 0) break;
    if (truthy(t)) rc = eval(e, n->a, s, out);
    else *out = UNDEF;
    break;
  }
  case JN_TERNARY: {
    jv t;
    if ((rc = eval(e, n->a, s, &t)) == 0) rc = eval(e, truthy(t) ? n->b : n->c, s, out);
    break;
  }
  default: rc = fail(e, "line %d: this is not an expression", n->line);
  }
  e->depth--;
  return rc;
}

static int assign(ev_t *e, const jnode *target, jv v, env_t *s) {
  if (target->kind == JN_IDENT) return env_set(e, s, target->str, v);
  if (target->kind == JN_TUPLE) {
    if (v.t != JV_ARRAY) return fail(e, "Cannot unpack non-iterable type in set: %s", type_name(v));
    if (v.u.a->n != target->list.n)
      return fail(e, "Too %s items to unpack in set", target->list.n > v.u.a->n ? "few" : "many");
    for (int i = 0; i < target->list.n; i++) {
      if (target->list.v[i]->kind != JN_IDENT) return fail(e, "Cannot unpack to non-identifier in set");
      if (env_set(e, s, target->list.v[i]->str, v.u.a->v[i]) < 0) return -1;
    }
    return 0;
  }
  if (target->kind == JN_MEMBER) {
    jv obj;
    if (eval(e, target->a, s, &obj) < 0) return -1;
    if (obj.t != JV_OBJECT || obj.u.o->kind != JO_NAMESPACE)
      return fail(e, "cannot assign attribute on non-namespace object");
    if (target->flag || target->b->kind != JN_IDENT)
      return fail(e, "Cannot assign to member with non-identifier property");
    return obj_set(e, obj.u.o, target->b->str, target->b->len, v);
  }
  return fail(e, "Invalid LHS inside assignment expression");
}

static int exec_for(ev_t *e, const jnode *n, env_t *s, lt_buf_t *sink) {
  env_t *scope = env_new(e, s);
  if (!scope) return -1;
  const jnode *test = NULL;
  jv it;
  if (n->b->kind == JN_SELECT) {
    test = n->b->b;
    if (eval(e, n->b->a, scope, &it) < 0) return -1;
  } else if (eval(e, n->b, scope, &it) < 0) {
    return -1;
  }
  if (it.t == JV_OBJECT && it.u.o->kind != JO_NAMESPACE) {
    if (items_of(e, it.u.o, 1, &it) < 0) return -1;
  } else if (it.t != JV_ARRAY) {
    return fail(e, "Expected iterable or object type in for loop: got %s", type_name(it));
  }
  int total = it.u.a->n, k = 0;
  jv *items = alloc(e, (size_t)(total + 1) * sizeof *items);
  if (!items) return -1;
  for (int i = 0; i < total; i++) {
    jv cur = it.u.a->v[i];
    if (n->a->kind == JN_TUPLE) {
      if (cur.t != JV_ARRAY || cur.u.a->tuple) return fail(e, "Cannot unpack non-iterable type: %s", type_name(cur));
      if (cur.u.a->n != n->a->list.n)
        return fail(e, "Too %s items to unpack", n->a->list.n > cur.u.a->n ? "few" : "many");
    }
    if (test) {
      env_t *ls = env_new(e, scope);
      jv t;
      if (!ls || assign(e, n->a, cur, ls) < 0 || eval(e, test, ls, &t) < 0) return -1;
      if (!truthy(t)) continue;
    }
    items[k++] = cur;
  }
  int none = 1;
  for (int i = 0; i < k; i++) {
    jv loop;
    if (mkobj(e, JO_OBJECT, &loop) < 0 || obj_reserve(e, loop.u.o, 9) < 0) return -1;
    lt__jobj_t *o = loop.u.o;
    if (obj_setc(e, o, "index", num(1, i + 1)) < 0 || obj_setc(e, o, "index0", num(1, i)) < 0 ||
        obj_setc(e, o, "revindex", num(1, k - i)) < 0 || obj_setc(e, o, "revindex0", num(1, k - i - 1)) < 0 ||
        obj_setc(e, o, "first", boolean(i == 0)) < 0 || obj_setc(e, o, "last", boolean(i == k - 1)) < 0 ||
        obj_setc(e, o, "length", num(1, k)) < 0 || obj_setc(e, o, "previtem", i > 0 ? items[i - 1] : UNDEF) < 0 ||
        obj_setc(e, o, "nextitem", i < k - 1 ? items[i + 1] : UNDEF) < 0 || env_set(e, scope, "loop", loop) < 0 ||
        assign(e, n->a, items[i], scope) < 0)
      return -1;
    int rc = exec_list(e, &n->list, scope, sink);
    if (rc < 0) return rc;
    if (rc == 2) continue;
    if (rc == 1) break;
    none = 0;
  }
  if (none) {
    int rc = exec_list(e, &n->list2, scope, sink);
    if (rc != 0) return rc; /* break/continue in the else block belong to an outer loop */
  }
  return 0;
}

/* 0 done, 1 break, 2 continue, -1 error */
static int exec(ev_t *e, const jnode *n, env_t *s, lt_buf_t *sink) {
  if (step(e) < 0) return -1;
  if (++e->depth > MAX_DEPTH) return fail(e, "template nested too deeply");
  int rc = 0;
  switch (n->kind) {
  case JN_TEXT: lt_buf_append(sink, n->str, n->len); break;
  case JN_COMMENT: break;
  case JN_BREAK: rc = 1; break;
  case JN_CONTINUE: rc = 2; break;
  case JN_IF: {
    jv t;
    if ((rc = eval(e, n->a, s, &t)) == 0) rc = exec_list(e, truthy(t) ? &n->list : &n->list2, s, sink);
    break;
  }
  case JN_FOR: rc = exec_for(e, n, s, sink); break;
  case JN_SET: {
    jv v;
    if (n->b) {
      rc = eval(e, n->b, s, &v);
    } else {
      lt_buf_t b = {0};
      rc = exec_list(e, &n->list, s, &b);
      if (rc > 0) rc = fail(e, "break or continue outside a loop");
      if (rc == 0) rc = buf_str(e, &b, &v);
      lt_buf_free(&b);
    }
    if (rc == 0) rc = assign(e, n->a, v, s);
    break;
  }
  case JN_MACRO: {
    jv fn;
    if ((rc = mkfn(e, F_MACRO, 0, UNDEF, &fn)) == 0) {
      fn.u.f->node = n;
      rc = env_set(e, s, n->str, fn);
    }
    break;
  }
  case JN_CALLBLOCK: {
    jv caller, fn, r;
    args_t a;
    if ((rc = mkfn(e, F_CALLER, 0, UNDEF, &caller)) < 0) break;
    caller.u.f->node = n;
    caller.u.f->scope = s;
    if ((rc = eval_args(e, &n->a->args, s, &a)) < 0) break;
    jv kwv, *fa = alloc(e, (size_t)(a.n + 1) * sizeof *fa);
    if (!fa || (rc = mkobj(e, JO_KWARGS, &kwv)) < 0) {
      rc = -1;
      break;
    }
    if (a.kw) kwv.u.o = a.kw;
    memcpy(fa, a.v, (size_t)a.n * sizeof *fa);
    fa[a.n] = kwv;
    if ((rc = eval(e, n->a->a, s, &fn)) < 0) break;
    env_t *ns = env_new(e, s);
    if (!ns || env_set(e, ns, "caller", caller) < 0) {
      rc = -1;
      break;
    }
    if ((rc = call_value(e, fn, fa, a.n + 1, ns, &r)) == 0 && (rc = tostr(e, r, sink)) == 0) {}
    break;
  }
  case JN_FILTERBLOCK: {
    lt_buf_t b = {0};
    jv v, r;
    rc = exec_list(e, &n->list, s, &b);
    if (rc > 0) rc = fail(e, "break or continue outside a loop");
    if (rc == 0) rc = buf_str(e, &b, &v);
    lt_buf_free(&b);
    if (rc == 0) rc = apply_filter(e, v, n->a, s, &r);
    if (rc == 0 && r.t != JV_UNDEF && r.t != JV_NONE) rc = tostr(e, r, sink);
    break;
  }
  default: {
    jv v;
    if ((rc = eval(e, n, s, &v)) == 0 && v.t != JV_UNDEF && v.t != JV_NONE) rc = tostr(e, v, sink);
  }
  }
  e->depth--;
  if (rc == 0) rc = out_check(e, sink);
  return rc;
}

static int exec_list(ev_t *e, const lt__jlist_t *l, env_t *s, lt_buf_t *sink) {
  for (int i = 0; i < l->n; i++) {
    int rc = exec(e, l->v[i], s, sink);
    if (rc != 0) return rc;
  }
  return 0;
}

/* JSON to values; object keys in JavaScript's order (array indices first). */
static int is_index_key(const char *k) {
  if (!k[0] || (k[0] == '0' && k[1])) return 0;
  double v = 0;
  for (const char *p = k; *p; p++) {
    if (*p < '0' || *p > '9') return 0;
    v = v * 10 + (*p - '0');
  }
  return v < 4294967295.0;
}

static int from_json(ev_t *e, const cJSON *j, jv *out, int depth) {
  if (depth > 512) return fail(e, "input nested too deeply");
  if (cJSON_IsNull(j)) return *out = NONE, 0;
  if (cJSON_IsBool(j)) return *out = boolean(cJSON_IsTrue(j)), 0;
  if (cJSON_IsNumber(j))
    return *out = num(j->valuedouble == floor(j->valuedouble) && isfinite(j->valuedouble), j->valuedouble), 0;
  if (cJSON_IsString(j)) return *out = (jv){.t = JV_STR, .u.s = {j->valuestring, strlen(j->valuestring)}}, 0;
  if (cJSON_IsArray(j)) {
    if (mkarr(e, cJSON_GetArraySize(j), out) < 0) return -1;
    int i = 0;
    for (const cJSON *c = j->child; c; c = c->next)
      if (from_json(e, c, &out->u.a->v[i++], depth + 1) < 0) return -1;
    return 0;
  }
  if (cJSON_IsObject(j)) {
    if (mkobj(e, JO_OBJECT, out) < 0) return -1;
    /* integer-like keys, ascending, then the rest in order (Object.entries) */
    int nidx = 0;
    for (const cJSON *c = j->child; c; c = c->next) nidx += c->string && is_index_key(c->string);
    if (nidx) {
      const cJSON **idx = alloc(e, (size_t)nidx * sizeof *idx);
      if (!idx) return -1;
      int k = 0;
      for (const cJSON *c = j->child; c; c = c->next)
        if (c->string && is_index_key(c->string)) {
          int pos = k++;
          while (pos > 0 && strtod(idx[pos - 1]->string, NULL) > strtod(c->string, NULL)) {
            idx[pos] = idx[pos - 1];
            pos--;
          }
          idx[pos] = c;
        }
      for (int i = 0; i < nidx; i++) {
        jv v;
        if (from_json(e, idx[i], &v, depth + 1) < 0 || obj_setc(e, out->u.o, idx[i]->string, v) < 0) return -1;
      }
    }
    for (const cJSON *c = j->child; c; c = c->next) {
      if (!c->string || is_index_key(c->string)) continue;
      jv v;
      if (from_json(e, c, &v, depth + 1) < 0 || obj_setc(e, out->u.o, c->string, v) < 0) return -1;
    }
    return 0;
  }
  return fail(e, "unsupported JSON value");
}

int lt_jinja_compile(const char *src, size_t len, lt_jinja_t **out) {
  *out = NULL;
  lt_jinja_t *t = calloc(1, sizeof *t);
  if (!t) return lt_error_set(LT_ENOMEM, "template: out of memory");
  int rc = lt__jinja_parse(t, src, len);
  if (rc < 0) {
    lt_jinja_free(t);
    return rc;
  }
  *out = t;
  return 0;
}

void lt_jinja_free(lt_jinja_t *t) {
  if (!t) return;
  lt__jarena_free(&t->arena);
  free(t);
}

int lt_jinja_render(const lt_jinja_t *t, const cJSON *vars, const lt_jinja_limits_t *limits, char **out, size_t *len) {
  *out = NULL;
  if (len) *len = 0;
  ev_t e = {0};
  e.ar.cap = limits && limits->max_memory ? limits->max_memory : (size_t)256 << 20;
  e.max_output = limits && limits->max_output ? limits->max_output : (size_t)64 << 20;
  e.max_steps = limits && limits->max_steps ? limits->max_steps : 100000000ull;
  lt_buf_t b = {0};
  env_t *g = env_new(&e, NULL);
  int rc = g ? 0 : -1;
  for (int i = 0; i < NBUILTINS && rc == 0; i++) {
    jv fn;
    if (BUILTINS[i].on != ON_GLOBAL) continue;
    rc = mkfn(&e, F_BUILTIN, i, UNDEF, &fn);
    if (rc == 0) rc = env_set(&e, g, BUILTINS[i].name, fn);
  }
  static const char *const consts[] = {"false", "true", "none", "True", "False", "None"};
  const jv cv[] = {boolean(0), boolean(1), NONE, boolean(1), boolean(0), NONE};
  for (int i = 0; i < 6 && rc == 0; i++) rc = env_set(&e, g, consts[i], cv[i]);
  if (vars && rc == 0) {
    jv all;
    rc = from_json(&e, vars, &all, 0);
    if (rc == 0 && all.t != JV_OBJECT) rc = fail(&e, "template variables must be a JSON object");
    for (int i = 0; rc == 0 && i < all.u.o->n; i++) {
      if (env_get(g, all.u.o->k[i]).t != JV_UNDEF) {
        rc = fail(&e, "Variable already declared: %s", all.u.o->k[i]);
        break;
      }
      rc = env_set(&e, g, all.u.o->k[i], all.u.o->v[i]);
    }
  }
  if (rc == 0) rc = exec_list(&e, &t->root->list, g, &b);
  if (rc > 0) rc = fail(&e, "break or continue outside a loop");
  if (rc == 0 && lt_buf_ok(&b) < 0) rc = fail(&e, "out of memory");
  lt__jarena_free(&e.ar);
  if (rc < 0) {
    lt_buf_free(&b);
    rc = lt_error_set(LT_EINVAL, "%s", e.err ? e.err : "template failed");
    free(e.err);
    return rc;
  }
  if (!b.data) lt_buf_puts(&b, "");
  if (lt_buf_ok(&b) < 0) {
    lt_buf_free(&b);
    return lt_error_set(LT_ENOMEM, "template: out of memory");
  }
  if (len) *len = b.len;
  *out = lt_buf_take(&b);
  return 0;
}
