#include "rollout/toolcall.h"

#include <stdlib.h>
#include <string.h>

#include "util/error.h"

typedef struct {
  const char *p, *end;
} cur_t;

static int lit(cur_t *c, const char *s) {
  size_t n = strlen(s);
  if ((size_t)(c->end - c->p) < n || memcmp(c->p, s, n) != 0) return 0;
  c->p += n;
  return 1;
}

static void ws(cur_t *c) {
  while (c->p < c->end && (*c->p == ' ' || *c->p == '\n' || *c->p == '\t' || *c->p == '\r')) c->p++;
}

static int name_char(char ch) {
  return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_' || ch == '-' || ch == '.';
}

/* Text up to `stop`, entity-decoded, at most max bytes; NULL on malformed input. */
static char *text_until(cur_t *c, const char *stop, size_t max, int *oom) {
  size_t sl = strlen(stop);
  const char *q = c->p;
  while (q + sl <= c->end && memcmp(q, stop, sl) != 0) q++;
  if (q + sl > c->end || (size_t)(q - c->p) > max) return NULL;
  char *out = malloc((size_t)(q - c->p) + 1);
  if (!out) {
    *oom = 1;
    return NULL;
  }
  size_t k = 0;
  for (const char *s = c->p; s < q;) {
    if (*s == '&') {
      static const struct { const char *e, c; } ents[] = {{"&lt;", '<'}, {"&gt;", '>'}, {"&amp;", '&'}, {"&quot;", '"'}, {"&apos;", '\''}};
      size_t i = 0;
      for (; i < 5; i++) {
        size_t el = strlen(ents[i].e);
        if ((size_t)(q - s) >= el && memcmp(s, ents[i].e, el) == 0) {
          out[k++] = ents[i].c;
          s += el;
          break;
        }
      }
      if (i == 5) out[k++] = *s++;
    } else {
      out[k++] = *s++;
    }
  }
  out[k] = 0;
  c->p = q + sl;
  return out;
}

static char *ident(cur_t *c) {
  const char *s = c->p;
  while (c->p < c->end && name_char(*c->p) && c->p - s < LT_TOOLCALL_MAX_NAME) c->p++;
  if (c->p == s || (c->p < c->end && name_char(*c->p))) return NULL;
  char *o = malloc((size_t)(c->p - s) + 1);
  if (!o) return NULL;
  memcpy(o, s, (size_t)(c->p - s));
  o[c->p - s] = 0;
  return o;
}

static void call_free(lt_tool_call_t *k) {
  free(k->name);
  for (int i = 0; i < k->nargs; i++) {
    free(k->args[i].name);
    free(k->args[i].value);
  }
  free(k->args);
  memset(k, 0, sizeof *k);
}

/* One block after "<tool_call>"; 1 parsed, 0 malformed, -1 out of memory. */
static int parse_call(cur_t *c, lt_tool_call_t *k) {
  int oom = 0;
  ws(c);
  if (!lit(c, "<name>")) return 0;
  ws(c);
  if (!(k->name = ident(c))) return 0;
  ws(c);
  if (!lit(c, "</name>")) return 0;
  for (;;) {
    ws(c);
    if (lit(c, "</tool_call>")) return 1;
    if (!lit(c, "<arg") || !lit(c, " name=\"")) return 0;
    if (k->nargs == LT_TOOLCALL_MAX_ARGS) return 0;
    if (!k->args && !(k->args = calloc(LT_TOOLCALL_MAX_ARGS, sizeof *k->args))) return -1;
    lt_tool_arg_t *a = &k->args[k->nargs];
    if (!(a->name = ident(c))) return 0;
    k->nargs++;
    if (!lit(c, "\">")) return 0;
    if (!(a->value = text_until(c, "</arg>", LT_TOOLCALL_MAX_VALUE, &oom))) return oom ? -1 : 0;
  }
}

int lt_toolcall_parse(const char *text, size_t len, lt_toolcalls_t *out) {
  memset(out, 0, sizeof *out);
  cur_t c = {text, text + len};
  while (c.p < c.end) {
    const char *s = memmem(c.p, (size_t)(c.end - c.p), "<tool_call>", 11);
    if (!s) break;
    c.p = s + 11;
    if (out->ncalls == LT_TOOLCALL_MAX_CALLS) {
      out->malformed++;
      continue;
    }
    lt_tool_call_t *k = &out->calls[out->ncalls];
    int r = parse_call(&c, k);
    if (r < 0) {
      call_free(k);
      lt_toolcalls_free(out);
      return lt_error_set(LT_ENOMEM, "tool-call parser: out of memory");
    }
    if (r == 1) {
      out->ncalls++;
    } else {
      call_free(k);
      out->malformed++;
    }
  }
  return 0;
}

void lt_toolcalls_free(lt_toolcalls_t *tc) {
  for (int i = 0; i < tc->ncalls; i++) call_free(&tc->calls[i]);
  tc->ncalls = 0;
}
