/* Jinja source to syntax tree, following @huggingface/jinja 0.5.11's
 * preprocess(), tokenize() and parse() step by step (its quirks included), so
 * that the same template text means the same thing in both. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/internal.h"
#include "util/error.h"
#include "util/utf8.h"

#define MAX_DEPTH 200 /* nesting of expressions and blocks */

typedef enum {
  T_TEXT,
  T_NUM,
  T_STR,
  T_IDENT,
  T_EQUALS,
  T_LPAREN,
  T_RPAREN,
  T_OPEN_STMT,
  T_CLOSE_STMT,
  T_OPEN_EXPR,
  T_CLOSE_EXPR,
  T_LBRACKET,
  T_RBRACKET,
  T_LBRACE,
  T_RBRACE,
  T_COMMA,
  T_DOT,
  T_COLON,
  T_PIPE,
  T_ADD, /* + - ~ */
  T_MUL, /* * / // % */
  T_POW, /* ** */
  T_CMP, /* < > <= >= == != */
  T_UNARY,
  T_COMMENT
} tok_type;

typedef struct {
  tok_type t;
  char *s;
  size_t n;
  int line;
} tok_t;

typedef struct {
  lt_jinja_t *tpl;
  tok_t *toks;
  int ntok, cap;
  int cur;
  int depth;
  char err[256];
  int line;
} parser_t;

static int fail(parser_t *p, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(parser_t *p, int line, const char *fmt, ...) {
  if (!p->err[0]) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->err, sizeof p->err, fmt, ap);
    va_end(ap);
    p->line = line;
  }
  return -1;
}

/* ---- preprocess ---- */

static int starts(const char *p, const char *end, const char *lit) {
  size_t n = strlen(lit);
  return (size_t)(end - p) >= n && memcmp(p, lit, n) == 0;
}

/* {%-? \s* (end)? generation \s* -?%} at p: its length, 0 if not. */
static size_t generation_tag(const char *p, const char *end, int *lstrip, int *rstrip) {
  const char *q = p;
  if (!starts(q, end, "{%")) return 0;
  q += 2;
  *lstrip = q < end && *q == '-';
  if (*lstrip) q++;
  for (int k; q < end && (k = lt__jinja_space(q, end));) q += k;
  if (starts(q, end, "end")) q += 3;
  if (!starts(q, end, "generation")) return 0;
  q += 10;
  for (int k; q < end && (k = lt__jinja_space(q, end));) q += k;
  *rstrip = q < end && *q == '-';
  if (*rstrip) q++;
  if (!starts(q, end, "%}")) return 0;
  return (size_t)(q + 2 - p);
}

static int preprocess(const char *src, size_t len, lt_buf_t *out) {
  if (len && src[len - 1] == '\n') len--;
  /* lstrip_blocks: spaces and tabs from a line's start up to {% or {# */
  lt_buf_t a = {0};
  const char *end = src + len;
  for (const char *p = src; p < end;) {
    if (p == src || p[-1] == '\n' || p[-1] == '\r') {
      const char *q = p;
      while (q < end && (*q == ' ' || *q == '\t')) q++;
      if (q + 1 < end && *q == '{' && (q[1] == '#' || q[1] == '%' || q[1] == '-')) p = q;
    }
    lt_buf_putc(&a, *p++);
  }
  /* trim_blocks: the newline after %} #} -} */
  lt_buf_t b = {0};
  for (size_t i = 0; i < a.len; i++) {
    lt_buf_putc(&b, a.data[i]);
    if (i >= 1 && a.data[i] == '}' && (a.data[i - 1] == '#' || a.data[i - 1] == '%' || a.data[i - 1] == '-') &&
        i + 1 < a.len && a.data[i + 1] == '\n')
      i++;
  }
  lt_buf_free(&a);
  /* {% generation %} / {% endgeneration %} disappear, minding their - markers */
  size_t keep = 0; /* out may not be trimmed below this (an earlier match's text) */
  end = b.data ? b.data + b.len : NULL;
  for (const char *p = b.data; p && p < end;) {
    int ls = 0, rs = 0;
    size_t n = generation_tag(p, end, &ls, &rs);
    if (!n) {
      lt_buf_putc(out, *p++);
      continue;
    }
    if (ls) {
      while (out->len > keep) {
        size_t k = out->len - 1;
        while (k > keep && ((unsigned char)out->data[k] & 0xc0) == 0x80) k--;
        if (!lt__jinja_space(out->data + k, out->data + out->len)) break;
        out->len = k;
      }
    }
    p += n;
    const char *q = p;
    for (int k; q < end && (k = lt__jinja_space(q, end));) q += k;
    if (!rs) lt_buf_append(out, p, (size_t)(q - p));
    p = q;
    keep = out->len;
  }
  lt_buf_free(&b);
  lt_buf_putc(out, 0);
  return lt_buf_ok(out);
}

/* ---- lexer ---- */

static int push(parser_t *p, tok_type t, const char *s, size_t n, int line) {
  if (p->ntok == p->cap) {
    int cap = p->cap ? p->cap * 2 : 256;
    tok_t *nt = realloc(p->toks, (size_t)cap * sizeof *nt);
    if (!nt) return fail(p, line, "out of memory");
    p->toks = nt;
    p->cap = cap;
  }
  char *c = lt__jarena_strdup(&p->tpl->arena, s, n);
  if (!c) return fail(p, line, "out of memory");
  p->toks[p->ntok++] = (tok_t){t, c, n, line};
  return 0;
}

static int is_word(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}
static int is_digit(char c) { return c >= '0' && c <= '9'; }

static void trim_last_text(parser_t *p) {
  if (!p->ntok || p->toks[p->ntok - 1].t != T_TEXT) return;
  tok_t *t = &p->toks[p->ntok - 1];
  while (t->n) {
    size_t k = t->n - 1;
    while (k > 0 && ((unsigned char)t->s[k] & 0xc0) == 0x80) k--;
    if (!lt__jinja_space(t->s + k, t->s + t->n)) break;
    t->n = k;
  }
  t->s[t->n] = 0;
  if (!t->n) p->ntok--;
}

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* A string literal's body up to the closing quote q, escapes decoded. */
static int lex_string(parser_t *p, const char **pp, const char *end, char q, int line, lt_buf_t *s) {
  const char *c = *pp;
  for (;;) {
    if (c >= end) return fail(p, line, "unexpected end of input in a string");
    if (*c == q) break;
    if (*c == '\\') {
      if (++c >= end) return fail(p, line, "unexpected end of input");
      char e = *c++;
      if (e == 'x' || e == 'u') {
        int n = e == 'x' ? 2 : 4;
        unsigned cp = 0;
        for (int i = 0; i < n; i++) {
          int h = c + i < end ? hexval(c[i]) : -1;
          if (h < 0) return fail(p, line, "invalid hexadecimal escape sequence");
          cp = cp * 16 + (unsigned)h;
        }
        c += n;
        char u[4];
        lt_buf_append(s, u, (size_t)lt_utf8_encode(cp, u));
        continue;
      }
      const char *from = "ntrbfv'\"\\", *to = "\n\t\r\b\f\v'\"\\";
      const char *k = strchr(from, e);
      if (!k || !e) return fail(p, line, "unexpected escaped character '%c'", e);
      lt_buf_putc(s, to[k - from]);
      continue;
    }
    lt_buf_putc(s, *c++);
  }
  *pp = c + 1;
  return 0;
}

static const struct {
  const char *s;
  tok_type t;
} TABLE[] = {{"{%", T_OPEN_STMT}, {"%}", T_CLOSE_STMT}, {"{{", T_OPEN_EXPR}, {"}}", T_CLOSE_EXPR}, {"(", T_LPAREN},
             {")", T_RPAREN},     {"{", T_LBRACE},      {"}", T_RBRACE},     {"[", T_LBRACKET},    {"]", T_RBRACKET},
             {",", T_COMMA},      {".", T_DOT},         {":", T_COLON},      {"|", T_PIPE},        {"<=", T_CMP},
             {">=", T_CMP},       {"==", T_CMP},        {"!=", T_CMP},       {"<", T_CMP},         {">", T_CMP},
             {"+", T_ADD},        {"-", T_ADD},         {"~", T_ADD},        {"**", T_POW},        {"*", T_MUL},
             {"//", T_MUL},       {"/", T_MUL},         {"%", T_MUL},        {"=", T_EQUALS}};

static int tokenize(parser_t *p, const char *src, size_t len) {
  const char *c = src, *end = src + len;
  int line = 1, curly = 0;
  lt_buf_t s = {0};
#define ADV(n)                                                           \
  do {                                                                   \
    for (size_t i_ = 0, n_ = (size_t)(n); i_ < n_ && c < end; i_++, c++) \
      if (*c == '\n') line++;                                            \
  } while (0)
  while (c < end) {
    tok_type last = p->ntok ? p->toks[p->ntok - 1].t : T_CLOSE_STMT;
    if (last == T_CLOSE_STMT || last == T_CLOSE_EXPR || last == T_COMMENT) {
      const char *q = c;
      int l0 = line;
      while (q < end && !(q[0] == '{' && q + 1 < end && (q[1] == '%' || q[1] == '{' || q[1] == '#'))) q++;
      if (q > c) {
        if (push(p, T_TEXT, c, (size_t)(q - c), l0) < 0) goto bad;
        ADV(q - c);
        continue;
      }
    }
    if (starts(c, end, "{#")) {
      ADV(2);
      int strip_before = c < end && *c == '-';
      if (strip_before) ADV(1);
      const char *q = c;
      while (!(q + 1 < end && q[0] == '#' && q[1] == '}')) {
        if (q + 2 >= end) {
          fail(p, line, "missing end of comment tag");
          goto bad;
        }
        q++;
      }
      int strip_after = q > c && q[-1] == '-';
      if (strip_before) trim_last_text(p);
      if (push(p, T_COMMENT, c, (size_t)(q - c - strip_after), line) < 0) goto bad;
      ADV(q + 2 - c);
      if (strip_after)
        for (int k; c < end && (k = lt__jinja_space(c, end));) ADV(k);
      continue;
    }
    if (starts(c, end, "{%-") || starts(c, end, "{{-")) {
      trim_last_text(p);
      int stmt = c[1] == '%';
      if (push(p, stmt ? T_OPEN_STMT : T_OPEN_EXPR, stmt ? "{%" : "{{", 2, line) < 0) goto bad;
      if (!stmt) curly = 0;
      ADV(3);
      continue;
    }
    for (int k; c < end && (k = lt__jinja_space(c, end));) ADV(k);
    if (c >= end) break;
    if (starts(c, end, "-%}") || starts(c, end, "-}}")) {
      int stmt = c[1] == '%';
      if (push(p, stmt ? T_CLOSE_STMT : T_CLOSE_EXPR, stmt ? "%}" : "}}", 2, line) < 0) goto bad;
      ADV(3);
      for (int k; c < end && (k = lt__jinja_space(c, end));) ADV(k);
      continue;
    }
    char ch = *c;
    if (ch == '-' || ch == '+') {
      if (!p->ntok || p->toks[p->ntok - 1].t == T_TEXT) {
        fail(p, line, "unexpected character '%c'", ch);
        goto bad;
      }
      tok_type lt = p->toks[p->ntok - 1].t;
      if (lt != T_IDENT && lt != T_NUM && lt != T_STR && lt != T_RPAREN && lt != T_RBRACKET) {
        const char *q = c + 1;
        while (q < end && is_digit(*q)) q++;
        if (q > c + 1 && q + 1 < end && *q == '.' && is_digit(q[1])) {
          q++;
          while (q < end && is_digit(*q)) q++;
        }
        if (push(p, q > c + 1 ? T_NUM : T_UNARY, c, (size_t)(q - c), line) < 0) goto bad;
        ADV(q - c);
        continue;
      }
    }
    int matched = 0;
    for (size_t i = 0; i < sizeof TABLE / sizeof TABLE[0]; i++) {
      if (TABLE[i].t == T_CLOSE_EXPR && curly > 0) continue;
      if (!starts(c, end, TABLE[i].s)) continue;
      if (push(p, TABLE[i].t, c, strlen(TABLE[i].s), line) < 0) goto bad;
      if (TABLE[i].t == T_OPEN_EXPR) curly = 0;
      if (TABLE[i].t == T_LBRACE) curly++;
      if (TABLE[i].t == T_RBRACE) curly--;
      ADV(strlen(TABLE[i].s));
      matched = 1;
      break;
    }
    if (matched) continue;
    if (ch == '\'' || ch == '"') {
      const char *q = c + 1;
      int l0 = line;
      lt_buf_reset(&s);
      if (lex_string(p, &q, end, ch, line, &s) < 0) goto bad;
      if (lt_buf_ok(&s) < 0) {
        fail(p, line, "out of memory");
        goto bad;
      }
      if (push(p, T_STR, s.data ? s.data : "", s.len, l0) < 0) goto bad;
      ADV(q - c);
      continue;
    }
    if (is_digit(ch)) {
      const char *q = c;
      while (q < end && is_digit(*q)) q++;
      if ((!p->ntok || p->toks[p->ntok - 1].t != T_DOT) && q + 1 < end && *q == '.' && is_digit(q[1])) {
        q++;
        while (q < end && is_digit(*q)) q++;
      }
      if (push(p, T_NUM, c, (size_t)(q - c), line) < 0) goto bad;
      ADV(q - c);
      continue;
    }
    if (is_word(ch)) {
      const char *q = c;
      while (q < end && is_word(*q)) q++;
      if (push(p, T_IDENT, c, (size_t)(q - c), line) < 0) goto bad;
      ADV(q - c);
      continue;
    }
    fail(p, line, "unexpected character '%c'", ch);
    goto bad;
  }
#undef ADV
  lt_buf_free(&s);
  return 0;
bad:
  lt_buf_free(&s);
  return -1;
}

/* ---- parser ---- */

static lt__jnode_t *node(parser_t *p, lt__jnode_kind k) {
  int line = p->cur < p->ntok ? p->toks[p->cur].line : p->ntok ? p->toks[p->ntok - 1].line : 1;
  lt__jnode_t *n = lt__jarena_alloc(&p->tpl->arena, sizeof *n);
  if (!n) {
    fail(p, line, "out of memory");
    return NULL;
  }
  n->kind = k;
  n->line = line;
  return n;
}

static int list_add(parser_t *p, lt__jlist_t *l, lt__jnode_t *n) {
  if (!n) return -1;
  /* Grows by doubling inside the arena; the old array stays until the end. */
  if ((l->n & (l->n - 1)) == 0) {
    int cap = l->n ? l->n * 2 : 4;
    lt__jnode_t **nv = lt__jarena_alloc(&p->tpl->arena, (size_t)cap * sizeof *nv);
    if (!nv) return fail(p, n->line, "out of memory");
    if (l->n) memcpy(nv, l->v, (size_t)l->n * sizeof *nv);
    l->v = nv;
  }
  l->v[l->n++] = n;
  return 0;
}

static int cur_line(parser_t *p) {
  return p->cur < p->ntok ? p->toks[p->cur].line : p->ntok ? p->toks[p->ntok - 1].line : 1;
}
static int is(parser_t *p, tok_type t) { return p->cur < p->ntok && p->toks[p->cur].t == t; }
static int is_ident(parser_t *p, int off, const char *name) {
  return p->cur + off < p->ntok && p->toks[p->cur + off].t == T_IDENT && strcmp(p->toks[p->cur + off].s, name) == 0;
}
static int is_stmt(parser_t *p, const char *a, const char *b, const char *c) {
  if (!is(p, T_OPEN_STMT) || p->cur + 1 >= p->ntok || p->toks[p->cur + 1].t != T_IDENT) return 0;
  const char *s = p->toks[p->cur + 1].s;
  return strcmp(s, a) == 0 || (b && strcmp(s, b) == 0) || (c && strcmp(s, c) == 0);
}
static int expect(parser_t *p, tok_type t, const char *what) {
  if (!is(p, t)) return fail(p, cur_line(p), "expected %s", what);
  p->cur++;
  return 0;
}
static int expect_ident(parser_t *p, const char *name) {
  if (!is_ident(p, 0, name)) return fail(p, cur_line(p), "expected %s", name);
  p->cur++;
  return 0;
}

static lt__jnode_t *parse_any(parser_t *p);
static lt__jnode_t *parse_expr(parser_t *p);
static lt__jnode_t *parse_primary(parser_t *p);

/* Statements until one of the named block tags (not consumed). */
static int parse_body(parser_t *p, lt__jlist_t *l, const char *a, const char *b, const char *c) {
  while (!is_stmt(p, a, b, c)) {
    if (p->cur >= p->ntok) {
      const char *end = strncmp(a, "end", 3) == 0 ? a : b && strncmp(b, "end", 3) == 0 ? b : c ? c : a;
      return fail(p, cur_line(p), "missing {%% %s %%}", end);
    }
    if (list_add(p, l, parse_any(p)) < 0) return -1;
  }
  return 0;
}

/* "{% endNAME %}" */
static int parse_end(parser_t *p, const char *name) {
  if (expect(p, T_OPEN_STMT, "{%") < 0 || expect_ident(p, name) < 0 || expect(p, T_CLOSE_STMT, "%}") < 0) return -1;
  return 0;
}

static lt__jnode_t *binary(parser_t *p, const tok_t *op, lt__jnode_t *l, lt__jnode_t *r) {
  if (!l || !r) return NULL;
  lt__jnode_t *n = node(p, JN_BINARY);
  if (!n) return NULL;
  n->str = op->s;
  n->a = l;
  n->b = r;
  return n;
}

static int parse_args(parser_t *p, lt__jlist_t *args, int params) {
  if (expect(p, T_LPAREN, "(") < 0) return -1;
  int saw_kw = 0, saw_spread = 0;
  while (!is(p, T_RPAREN)) {
    if (p->cur >= p->ntok) return fail(p, cur_line(p), "expected )");
    int kwspread = is(p, T_POW), spread = is(p, T_MUL) && strcmp(p->toks[p->cur].s, "*") == 0;
    if (params && (kwspread || spread)) return fail(p, cur_line(p), "argument unpacking is not allowed in parameters");
    if (kwspread) {
      p->cur++;
      lt__jnode_t *n = node(p, JN_KWSPREAD);
      if (!n || !(n->a = parse_expr(p)) || list_add(p, args, n) < 0) return -1;
      if (is(p, T_COMMA)) p->cur++;
      if (!is(p, T_RPAREN)) return fail(p, cur_line(p), "** must be applied to the final argument");
      break;
    }
    lt__jnode_t *arg;
    if (spread) {
      if (saw_spread) return fail(p, cur_line(p), "only one * argument unpacking is allowed");
      saw_spread = 1;
      p->cur++;
      if (!(arg = node(p, JN_SPREAD)) || !(arg->a = parse_expr(p))) return -1;
    } else {
      if (!(arg = parse_expr(p))) return -1;
      if (is(p, T_EQUALS)) {
        p->cur++;
        if (arg->kind != JN_IDENT) return fail(p, arg->line, "expected an identifier before =");
        lt__jnode_t *kw = node(p, JN_KWARG);
        if (!kw || !(kw->a = parse_expr(p))) return -1;
        kw->str = arg->str;
        kw->len = arg->len;
        arg = kw;
      }
      if (params) {
        if (arg->kind != JN_IDENT && arg->kind != JN_KWARG) return fail(p, arg->line, "expected a parameter name");
        for (int i = 0; i < args->n; i++)
          if (strcmp(args->v[i]->str, arg->str) == 0) return fail(p, arg->line, "duplicate parameter %s", arg->str);
      }
      if (arg->kind == JN_KWARG) saw_kw = 1;
      else if (saw_kw)
        return fail(
            p, arg->line,
            params ? "non-default parameter after a default one" : "positional argument after a keyword argument");
      else if (saw_spread) return fail(p, arg->line, "positional argument after * unpacking");
    }
    if (list_add(p, args, arg) < 0) return -1;
    if (is(p, T_COMMA)) p->cur++;
  }
  p->cur++;
  return 0;
}

static lt__jnode_t *parse_member(parser_t *p, lt__jnode_t *obj) {
  while (obj && (is(p, T_DOT) || is(p, T_LBRACKET))) {
    int computed = is(p, T_LBRACKET);
    p->cur++;
    lt__jnode_t *m = node(p, JN_MEMBER);
    if (!m) return NULL;
    m->a = obj;
    m->flag = computed;
    if (computed) {
      lt__jnode_t *sl[3] = {0};
      int n = 0, is_slice = 0;
      while (!is(p, T_RBRACKET)) {
        if (p->cur >= p->ntok) return fail(p, cur_line(p), "expected ]"), NULL;
        if (n == 3) return fail(p, cur_line(p), "a slice has at most 3 parts"), NULL;
        if (is(p, T_COLON)) {
          sl[n++] = NULL;
          p->cur++;
          is_slice = 1;
        } else {
          if (!(sl[n++] = parse_expr(p))) return NULL;
          if (is(p, T_COLON)) {
            p->cur++;
            is_slice = 1;
          }
        }
      }
      if (n == 0) return fail(p, cur_line(p), "expected an index"), NULL;
      if (is_slice) {
        lt__jnode_t *s = node(p, JN_SLICE);
        if (!s) return NULL;
        s->a = sl[0];
        s->b = sl[1];
        s->c = sl[2];
        m->b = s;
      } else {
        m->b = sl[0];
      }
      p->cur++;
    } else {
      if (!(m->b = parse_primary(p))) return NULL;
      if (m->b->kind != JN_IDENT && m->b->kind != JN_INT)
        return fail(p, m->line, "expected an identifier or integer after ."), NULL;
    }
    obj = m;
  }
  return obj;
}

static lt__jnode_t *parse_call(parser_t *p, lt__jnode_t *callee) {
  while (callee) {
    lt__jnode_t *c = node(p, JN_CALL);
    if (!c) return NULL;
    c->a = callee;
    if (parse_args(p, &c->args, 0) < 0) return NULL;
    callee = parse_member(p, c);
    if (!is(p, T_LPAREN)) return callee;
  }
  return NULL;
}

static lt__jnode_t *parse_expr_seq(parser_t *p, int primary) {
  lt__jnode_t *first = primary ? parse_primary(p) : parse_expr(p);
  if (!first || !is(p, T_COMMA)) return first;
  lt__jnode_t *t = node(p, JN_TUPLE);
  if (!t || list_add(p, &t->list, first) < 0) return NULL;
  while (is(p, T_COMMA)) {
    p->cur++;
    if (list_add(p, &t->list, primary ? parse_primary(p) : parse_expr(p)) < 0) return NULL;
  }
  return t;
}

static lt__jnode_t *parse_primary(parser_t *p) {
  if (p->cur >= p->ntok) return fail(p, cur_line(p), "unexpected end of template"), NULL;
  if (++p->depth > MAX_DEPTH) return fail(p, cur_line(p), "expressions nested too deeply"), NULL;
  tok_t *t = &p->toks[p->cur++];
  lt__jnode_t *n = NULL;
  switch (t->t) {
  case T_NUM:
    if ((n = node(p, strchr(t->s, '.') ? JN_FLOAT : JN_INT))) n->num = strtod(t->s, NULL);
    break;
  case T_STR: {
    lt_buf_t s = {0};
    lt_buf_append(&s, t->s, t->n);
    while (is(p, T_STR)) {
      lt_buf_append(&s, p->toks[p->cur].s, p->toks[p->cur].n);
      p->cur++;
    }
    if (lt_buf_ok(&s) < 0 || !(n = node(p, JN_TEXT)) ||
        !(n->str = lt__jarena_strdup(&p->tpl->arena, s.data ? s.data : "", s.len)))
      n = NULL, fail(p, t->line, "out of memory");
    else n->len = s.len;
    lt_buf_free(&s);
    break;
  }
  case T_IDENT:
    if ((n = node(p, JN_IDENT))) {
      n->str = t->s;
      n->len = t->n;
    }
    break;
  case T_LPAREN:
    n = parse_expr_seq(p, 0);
    if (n && expect(p, T_RPAREN, ")") < 0) n = NULL;
    break;
  case T_LBRACKET:
    if (!(n = node(p, JN_ARRAY))) break;
    while (!is(p, T_RBRACKET)) {
      if (p->cur >= p->ntok) {
        fail(p, t->line, "expected ]");
        n = NULL;
        break;
      }
      if (list_add(p, &n->list, parse_expr(p)) < 0) {
        n = NULL;
        break;
      }
      if (is(p, T_COMMA)) p->cur++;
    }
    if (n) p->cur++;
    break;
  case T_LBRACE:
    if (!(n = node(p, JN_OBJECT))) break;
    while (!is(p, T_RBRACE)) {
      if (p->cur >= p->ntok) {
        fail(p, t->line, "expected }");
        n = NULL;
        break;
      }
      if (list_add(p, &n->list, parse_expr(p)) < 0 || expect(p, T_COLON, ":") < 0 ||
          list_add(p, &n->list2, parse_expr(p)) < 0) {
        n = NULL;
        break;
      }
      if (is(p, T_COMMA)) p->cur++;
    }
    if (n) p->cur++;
    break;
  default: fail(p, t->line, "unexpected '%s'", t->s);
  }
  p->depth--;
  return n;
}

static lt__jnode_t *parse_unary_sign(parser_t *p) {
  if (p->cur < p->ntok && (p->toks[p->cur].t == T_UNARY || p->toks[p->cur].t == T_ADD) &&
      (strcmp(p->toks[p->cur].s, "-") == 0 || strcmp(p->toks[p->cur].s, "+") == 0)) {
    if (++p->depth > MAX_DEPTH) return fail(p, cur_line(p), "expressions nested too deeply"), NULL;
    lt__jnode_t *n = node(p, JN_UNARY);
    if (!n) return NULL;
    n->str = p->toks[p->cur++].s;
    n->a = parse_unary_sign(p);
    p->depth--;
    return n->a ? n : NULL;
  }
  lt__jnode_t *m = parse_member(p, parse_primary(p));
  return m && is(p, T_LPAREN) ? parse_call(p, m) : m;
}

static lt__jnode_t *parse_filter(parser_t *p) {
  lt__jnode_t *op = parse_unary_sign(p);
  while (op && is(p, T_PIPE)) {
    p->cur++;
    lt__jnode_t *f = node(p, JN_FILTER);
    if (!f || !(f->b = parse_primary(p))) return NULL;
    if (f->b->kind != JN_IDENT) return fail(p, f->line, "expected a filter name"), NULL;
    if (is(p, T_LPAREN) && !(f->b = parse_call(p, f->b))) return NULL;
    f->a = op;
    op = f;
  }
  return op;
}

static lt__jnode_t *parse_test(parser_t *p) {
  lt__jnode_t *op = parse_filter(p);
  while (op && is_ident(p, 0, "is")) {
    p->cur++;
    lt__jnode_t *t = node(p, JN_TEST);
    if (!t) return NULL;
    if (is_ident(p, 0, "not")) {
      t->flag = 1;
      p->cur++;
    }
    lt__jnode_t *name = parse_primary(p);
    if (!name) return NULL;
    if (name->kind != JN_IDENT) return fail(p, t->line, "expected a test name"), NULL;
    t->str = name->str;
    t->a = op;
    op = t;
  }
  return op;
}

static lt__jnode_t *parse_pow(parser_t *p) {
  lt__jnode_t *l = parse_test(p);
  while (l && is(p, T_POW)) {
    tok_t *op = &p->toks[p->cur++];
    l = binary(p, op, l, parse_test(p));
  }
  return l;
}

static lt__jnode_t *parse_mul(parser_t *p) {
  lt__jnode_t *l = parse_pow(p);
  while (l && is(p, T_MUL)) {
    tok_t *op = &p->toks[p->cur++];
    l = binary(p, op, l, parse_pow(p));
  }
  return l;
}

static lt__jnode_t *parse_add(parser_t *p) {
  lt__jnode_t *l = parse_mul(p);
  while (l && is(p, T_ADD)) {
    tok_t *op = &p->toks[p->cur++];
    l = binary(p, op, l, parse_mul(p));
  }
  return l;
}

static lt__jnode_t *parse_cmp(parser_t *p) {
  static tok_t NOT_IN = {T_IDENT, "not in", 6, 0};
  lt__jnode_t *l = parse_add(p);
  while (l) {
    tok_t *op;
    if (is_ident(p, 0, "not") && is_ident(p, 1, "in")) {
      op = &NOT_IN;
      p->cur += 2;
    } else if (is_ident(p, 0, "in") || is(p, T_CMP)) {
      op = &p->toks[p->cur++];
    } else {
      break;
    }
    l = binary(p, op, l, parse_add(p));
  }
  return l;
}

static lt__jnode_t *parse_not(parser_t *p) {
  if (!is_ident(p, 0, "not")) return parse_cmp(p);
  if (++p->depth > MAX_DEPTH) return fail(p, cur_line(p), "expressions nested too deeply"), NULL;
  lt__jnode_t *n = node(p, JN_UNARY);
  if (!n) return NULL;
  n->str = p->toks[p->cur++].s;
  n->a = parse_not(p);
  p->depth--;
  return n->a ? n : NULL;
}

static lt__jnode_t *parse_and(parser_t *p) {
  lt__jnode_t *l = parse_not(p);
  while (l && is_ident(p, 0, "and")) {
    tok_t *op = &p->toks[p->cur++];
    l = binary(p, op, l, parse_not(p));
  }
  return l;
}

static lt__jnode_t *parse_or(parser_t *p) {
  lt__jnode_t *l = parse_and(p);
  while (l && is_ident(p, 0, "or")) {
    tok_t *op = &p->toks[p->cur++];
    l = binary(p, op, l, parse_and(p));
  }
  return l;
}

static lt__jnode_t *parse_expr(parser_t *p) {
  if (++p->depth > MAX_DEPTH) return fail(p, cur_line(p), "expressions nested too deeply"), NULL;
  lt__jnode_t *a = parse_or(p);
  if (a && is_ident(p, 0, "if")) {
    p->cur++;
    lt__jnode_t *test = parse_or(p);
    if (!test) return NULL;
    if (is_ident(p, 0, "else")) {
      p->cur++;
      lt__jnode_t *t = node(p, JN_TERNARY);
      if (!t || !(t->c = parse_expr(p))) return NULL;
      t->a = test;
      t->b = a;
      a = t;
    } else {
      lt__jnode_t *s = node(p, JN_SELECT);
      if (!s) return NULL;
      s->a = a;
      s->b = test;
      a = s;
    }
  }
  p->depth--;
  return a;
}

static lt__jnode_t *parse_if(parser_t *p) {
  lt__jnode_t *n = node(p, JN_IF);
  if (!n || !(n->a = parse_expr(p)) || expect(p, T_CLOSE_STMT, "%}") < 0) return NULL;
  if (parse_body(p, &n->list, "elif", "else", "endif") < 0) return NULL;
  if (is_stmt(p, "elif", NULL, NULL)) {
    p->cur += 2;
    if (++p->depth > MAX_DEPTH) return fail(p, cur_line(p), "too many elif"), NULL;
    if (list_add(p, &n->list2, parse_if(p)) < 0) return NULL;
    p->depth--;
  } else if (is_stmt(p, "else", NULL, NULL)) {
    p->cur += 2;
    if (expect(p, T_CLOSE_STMT, "%}") < 0 || parse_body(p, &n->list2, "endif", NULL, NULL) < 0) return NULL;
  }
  return n;
}

/* Whether a subtree names `kwargs` (1) or `varargs` (2): a macro accepts extra
 * keyword or positional arguments only then. */
static int special_names(const lt__jnode_t *n, int depth) {
  if (!n || depth > 4 * MAX_DEPTH) return 0;
  int f = 0;
  if (n->kind == JN_IDENT && n->str) f |= strcmp(n->str, "kwargs") == 0 ? 1 : strcmp(n->str, "varargs") == 0 ? 2 : 0;
  f |= special_names(n->a, depth + 1) | special_names(n->b, depth + 1) | special_names(n->c, depth + 1);
  const lt__jlist_t *ls[] = {&n->list, &n->list2, &n->args};
  for (int k = 0; k < 3; k++)
    for (int i = 0; i < ls[k]->n; i++) f |= special_names(ls[k]->v[i], depth + 1);
  return f;
}

static lt__jnode_t *parse_statement(parser_t *p) {
  p->cur++; /* {% */
  if (!is(p, T_IDENT)) return fail(p, cur_line(p), "expected a statement name"), NULL;
  const char *name = p->toks[p->cur].s;
  int line = cur_line(p);
  p->cur++;
  lt__jnode_t *n = NULL;
  if (strcmp(name, "set") == 0) {
    if (!(n = node(p, JN_SET)) || !(n->a = parse_expr_seq(p, 0))) return NULL;
    if (is(p, T_EQUALS)) {
      p->cur++;
      if (!(n->b = parse_expr_seq(p, 0))) return NULL;
    } else {
      if (expect(p, T_CLOSE_STMT, "%}") < 0 || parse_body(p, &n->list, "endset", NULL, NULL) < 0) return NULL;
      p->cur++;
      if (expect_ident(p, "endset") < 0) return NULL;
    }
    if (expect(p, T_CLOSE_STMT, "%}") < 0) return NULL;
  } else if (strcmp(name, "if") == 0) {
    if (!(n = parse_if(p)) || parse_end(p, "endif") < 0) return NULL;
  } else if (strcmp(name, "macro") == 0) {
    lt__jnode_t *id = parse_primary(p);
    if (!id) return NULL;
    if (id->kind != JN_IDENT) return fail(p, line, "expected a macro name"), NULL;
    if (!(n = node(p, JN_MACRO))) return NULL;
    n->str = id->str;
    if (parse_args(p, &n->args, 1) < 0 || expect(p, T_CLOSE_STMT, "%}") < 0 ||
        parse_body(p, &n->list, "endmacro", NULL, NULL) < 0 || parse_end(p, "endmacro") < 0)
      return NULL;
    n->flag = special_names(n, 0);
  } else if (strcmp(name, "for") == 0) {
    if (!(n = node(p, JN_FOR)) || !(n->a = parse_expr_seq(p, 1))) return NULL;
    if (n->a->kind != JN_IDENT && n->a->kind != JN_TUPLE) return fail(p, line, "expected a loop variable"), NULL;
    if (expect_ident(p, "in") < 0 || !(n->b = parse_expr(p)) || expect(p, T_CLOSE_STMT, "%}") < 0 ||
        parse_body(p, &n->list, "endfor", "else", NULL) < 0)
      return NULL;
    if (is_stmt(p, "else", NULL, NULL)) {
      p->cur += 2;
      if (expect(p, T_CLOSE_STMT, "%}") < 0 || parse_body(p, &n->list2, "endfor", NULL, NULL) < 0) return NULL;
    }
    if (parse_end(p, "endfor") < 0) return NULL;
  } else if (strcmp(name, "call") == 0) {
    if (!(n = node(p, JN_CALLBLOCK))) return NULL;
    if (is(p, T_LPAREN) && parse_args(p, &n->args, 1) < 0) return NULL;
    lt__jnode_t *callee = parse_primary(p);
    if (!callee) return NULL;
    if (callee->kind != JN_IDENT) return fail(p, line, "expected a macro name after call"), NULL;
    if (!(n->a = node(p, JN_CALL))) return NULL;
    n->a->a = callee;
    if (parse_args(p, &n->a->args, 0) < 0 || expect(p, T_CLOSE_STMT, "%}") < 0 ||
        parse_body(p, &n->list, "endcall", NULL, NULL) < 0 || parse_end(p, "endcall") < 0)
      return NULL;
    n->flag = special_names(n, 0);
  } else if (strcmp(name, "filter") == 0) {
    if (!(n = node(p, JN_FILTERBLOCK)) || !(n->a = parse_primary(p))) return NULL;
    if (n->a->kind == JN_IDENT && is(p, T_LPAREN) && !(n->a = parse_call(p, n->a))) return NULL;
    if (expect(p, T_CLOSE_STMT, "%}") < 0 || parse_body(p, &n->list, "endfilter", NULL, NULL) < 0 ||
        parse_end(p, "endfilter") < 0)
      return NULL;
  } else if (strcmp(name, "break") == 0 || strcmp(name, "continue") == 0) {
    if (!(n = node(p, name[0] == 'b' ? JN_BREAK : JN_CONTINUE)) || expect(p, T_CLOSE_STMT, "%}") < 0) return NULL;
  } else {
    return fail(p, line, "unknown statement '%s'", name), NULL;
  }
  return n;
}

static lt__jnode_t *parse_any(parser_t *p) {
  if (++p->depth > MAX_DEPTH) return fail(p, cur_line(p), "blocks nested too deeply"), NULL;
  tok_t *t = &p->toks[p->cur];
  lt__jnode_t *n = NULL;
  switch (t->t) {
  case T_COMMENT:
    p->cur++;
    n = node(p, JN_COMMENT);
    break;
  case T_TEXT:
    p->cur++;
    if ((n = node(p, JN_TEXT))) {
      n->str = t->s;
      n->len = t->n;
    }
    break;
  case T_OPEN_STMT: n = parse_statement(p); break;
  case T_OPEN_EXPR:
    p->cur++;
    if ((n = parse_expr(p)) && expect(p, T_CLOSE_EXPR, "}}") < 0) n = NULL;
    break;
  default: fail(p, t->line, "unexpected '%s'", t->s);
  }
  p->depth--;
  return n;
}

int lt__jinja_parse(lt_jinja_t *t, const char *src, size_t len) {
  parser_t p = {.tpl = t};
  lt_buf_t pre = {0};
  if (preprocess(src, len, &pre) < 0) {
    lt_buf_free(&pre);
    return lt_error_set(LT_ENOMEM, "template: out of memory");
  }
  int rc = tokenize(&p, pre.data, pre.len - 1);
  lt_buf_free(&pre);
  if (rc == 0 && (t->root = node(&p, JN_IF))) {
    while (p.cur < p.ntok)
      if (list_add(&p, &t->root->list, parse_any(&p)) < 0) break;
  }
  free(p.toks);
  if (p.err[0])
    return lt_error_set(strstr(p.err, "out of memory") ? LT_ENOMEM : LT_EFORMAT, "template:%d: %s", p.line, p.err);
  return 0;
}
