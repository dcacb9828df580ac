/* Internals of text/ shared between its files, not a public header: the
 * tokenizers (tokenizer.c, bpe.c) and the Jinja parser (jinja_parse.c), its
 * values (jinja_value.c) and the evaluator (jinja_eval.c). */
#ifndef LT_TEXT_INTERNAL_H
#define LT_TEXT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "text/jinja.h"
#include "text/tokenizer.h"
#include "util/buf.h"

/* ---- tokenizers: shared by tokenizer.c and bpe.c ---- */

typedef struct {
  char *text;
  size_t len;
  int32_t id;
} lt_special_t;

typedef enum { LT_TOK_BYTE, LT_TOK_BPE } lt_tok_kind;

struct lt_tokenizer {
  lt_tok_kind kind;
  int vocab;
  lt_special_t *special; /* special and added tokens */
  int nspecial, capspecial;
  uint8_t special_first[256]; /* 1 if some special token starts with this byte */
  struct lt_bpe *bpe;         /* LT_TOK_BPE */
};

int lt__tok_add_special(lt_tokenizer_t *t, const char *text, int32_t id);
const char *lt__tok_special_text(const lt_tokenizer_t *t, int32_t id);
int lt__bpe_encode(const lt_tokenizer_t *t, const char *text, size_t len, int32_t **ids, int *n);
int lt__bpe_decode(const lt_tokenizer_t *t, const int32_t *ids, int n, int skip_special, char **text, size_t *len);
void lt__bpe_free(lt_tokenizer_t *t);

/* ---- arena: every node and value lives in one, freed at once ---- */

typedef struct lt__jarena_chunk lt__jarena_chunk_t;
typedef struct {
  lt__jarena_chunk_t *head;
  size_t used, cap; /* bytes handed out; 0 cap: unbounded */
  int over;         /* the cap was hit */
} lt__jarena_t;

void *lt__jarena_alloc(lt__jarena_t *a, size_t n); /* zeroed; NULL past the cap or out of memory */
char *lt__jarena_strdup(lt__jarena_t *a, const char *s, size_t n);
void lt__jarena_free(lt__jarena_t *a);

/* ---- syntax tree ---- */

typedef enum {
  JN_TEXT, /* also string literals */
  JN_INT,
  JN_FLOAT,
  JN_ARRAY,
  JN_TUPLE,
  JN_OBJECT,
  JN_IDENT,
  JN_CALL,        /* a(args) */
  JN_MEMBER,      /* a.b / a[b] (flag: computed) */
  JN_SLICE,       /* a, b, c: start, stop, step (any NULL) */
  JN_UNARY,       /* op: "not", "-", "+" */
  JN_BINARY,      /* op, a, b */
  JN_FILTER,      /* a | b (b: IDENT or CALL) */
  JN_TEST,        /* a is [not] name (flag: negate) */
  JN_SELECT,      /* a if b (no else) */
  JN_TERNARY,     /* a: condition, b: true, c: false */
  JN_KWARG,       /* name = a */
  JN_SPREAD,      /* *a */
  JN_KWSPREAD,    /* **a */
  JN_IF,          /* a: test, list: body, list2: alternate */
  JN_FOR,         /* a: target, b: iterable, list: body, list2: else */
  JN_SET,         /* a: target, b: value or NULL with list: body */
  JN_MACRO,       /* str: name, args, list: body */
  JN_CALLBLOCK,   /* a: call, args: caller's parameters, list: body */
  JN_FILTERBLOCK, /* a: filter, list: body */
  JN_BREAK,
  JN_CONTINUE,
  JN_COMMENT
} lt__jnode_kind;

typedef struct lt__jnode lt__jnode_t;
typedef struct {
  lt__jnode_t **v;
  int n;
} lt__jlist_t;

struct lt__jnode {
  lt__jnode_kind kind;
  int line;
  int flag;
  const char *str; /* text, identifier, operator (NUL-terminated) */
  size_t len;
  double num;
  lt__jnode_t *a, *b, *c;
  lt__jlist_t list, list2, args; /* JN_OBJECT: list keys, list2 values */
};

struct lt_jinja {
  lt__jarena_t arena;
  lt__jnode_t *root; /* JN_IF-less body: root->list */
};

/* Hugging Face's preprocessing (trailing newline, lstrip/trim blocks,
 * {% generation %} tags) then lexing and parsing into t. */
int lt__jinja_parse(lt_jinja_t *t, const char *src, size_t len);

/* JavaScript's \s at p (bytes of the UTF-8 character, 0 if not a space). */
int lt__jinja_space(const char *p, const char *end);

/* ---- values ---- */

typedef enum { JV_UNDEF, JV_NONE, JV_BOOL, JV_INT, JV_FLOAT, JV_STR, JV_ARRAY, JV_OBJECT, JV_FUNC } lt__jv_type;

typedef struct lt__jarr lt__jarr_t;
typedef struct lt__jobj lt__jobj_t;
typedef struct lt__jfn lt__jfn_t;

typedef struct {
  lt__jv_type t;
  union {
    int b;
    double n; /* JV_INT too: numbers are JavaScript doubles in the reference */
    struct {
      const char *p;
      size_t len;
    } s;
    lt__jarr_t *a;
    lt__jobj_t *o;
    lt__jfn_t *f;
  } u;
} lt__jv_t;

struct lt__jarr {
  lt__jv_t *v;
  int n;
  int tuple;
};

typedef enum { JO_OBJECT, JO_KWARGS, JO_NAMESPACE } lt__jobj_kind;
struct lt__jobj {
  lt__jobj_kind kind;
  int n, cap;
  const char **k;
  size_t *klen;
  lt__jv_t *v;
};

/* Numbers as JavaScript prints them (Number.prototype.toString). */
void lt__jinja_num(lt_buf_t *b, double v);
/* A JSON string literal as JSON.stringify writes it (ensure_ascii: \uXXXX past 0x7e). */
void lt__jinja_quote(lt_buf_t *b, const char *s, size_t n, int ensure_ascii);
/* Length in UTF-16 code units, as JavaScript counts. */
size_t lt__jinja_u16len(const char *s, size_t n);
/* The engine's tables, for the test that every row has a construct case: the i-th filter (kind 0), builtin
 * function or method (kind 1) or test (kind 2), NULL past the last. */
const char *lt__jinja_table_name(int kind, int i);

#endif
