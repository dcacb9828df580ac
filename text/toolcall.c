/* Tool calls in the policy's text: parsing every format (bounded, it reads
 * model output) and writing them back for a prompt. */
#include "text/toolcall.h"

#include <stdlib.h>
#include <string.h>

#include "util/buf.h"
#include "util/error.h"
#include "util/json.h"

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
  return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_' || ch == '-' ||
         ch == '.';
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
      static const struct {
        const char *e, c;
      } ents[] = {{"&lt;", '<'}, {"&gt;", '>'}, {"&amp;", '&'}, {"&quot;", '"'}, {"&apos;", '\''}};
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
  for (int i = 0; i < tc->ncalls; i++) {
    call_free(&tc->calls[i]);
    free(tc->arguments[i]);
    tc->arguments[i] = NULL;
  }
  tc->ncalls = 0;
}

/* ---- JSON formats ---- */

static char *dup_n(const char *s, size_t n) {
  char *o = malloc(n + 1);
  if (o) {
    memcpy(o, s, n);
    o[n] = 0;
  }
  return o;
}

/* One call from its name and arguments JSON text: 1 parsed, 0 malformed, -1
 * out of memory. */
static int json_call(const char *name, size_t nlen, const cJSON *args, lt_tool_call_t *k, char **argjson) {
  if (nlen == 0 || nlen > LT_TOOLCALL_MAX_NAME || !cJSON_IsObject(args)) return 0;
  for (size_t i = 0; i < nlen; i++)
    if (!name_char(name[i])) return 0;
  int n = cJSON_GetArraySize(args);
  if (n > LT_TOOLCALL_MAX_ARGS) return 0;
  lt_buf_t b = {0};
  lt_json_write(&b, args);
  if (lt_buf_ok(&b) < 0) return -1;
  if (b.len > LT_TOOLCALL_MAX_VALUE) {
    lt_buf_free(&b);
    return 0;
  }
  *argjson = lt_buf_take(&b);
  if (!(k->name = dup_n(name, nlen)) || (n && !(k->args = calloc((size_t)n, sizeof *k->args)))) return -1;
  for (const cJSON *a = args->child; a; a = a->next) {
    lt_tool_arg_t *t = &k->args[k->nargs];
    if (!(t->name = strdup(a->string))) return -1;
    k->nargs++;
    if (cJSON_IsString(a)) {
      t->value = strdup(a->valuestring);
    } else {
      lt_buf_t v = {0};
      lt_json_write(&v, a);
      t->value = lt_buf_ok(&v) == 0 ? lt_buf_take(&v) : NULL;
      lt_buf_free(&v);
    }
    if (!t->value) return -1;
  }
  return 1;
}

/* Arguments as an object, or as a string holding one (some models quote them). */
static cJSON *args_object(const cJSON *v, cJSON **owned) {
  *owned = NULL;
  if (cJSON_IsObject(v)) return (cJSON *)v;
  if (cJSON_IsString(v)) {
    *owned = cJSON_Parse(v->valuestring);
    if (cJSON_IsObject(*owned)) return *owned;
  }
  return NULL;
}

/* <tool_call>{"name": …, "arguments": {…}}</tool_call> */
static int qwen_call(const char *s, size_t n, lt_tool_call_t *k, char **argjson) {
  cJSON *j = cJSON_ParseWithLength(s, n), *owned;
  const cJSON *name = cJSON_GetObjectItemCaseSensitive(j, "name");
  const cJSON *args = cJSON_GetObjectItemCaseSensitive(j, "arguments");
  if (!args) args = cJSON_GetObjectItemCaseSensitive(j, "parameters");
  int r = 0;
  if (cJSON_IsObject(j) && cJSON_IsString(name)) {
    const cJSON *obj = args ? args_object(args, &owned) : (owned = cJSON_CreateObject());
    r = json_call(name->valuestring, strlen(name->valuestring), obj, k, argjson);
    cJSON_Delete(owned);
  }
  cJSON_Delete(j);
  return r;
}

#define DS_CALLS_BEGIN "<｜tool▁calls▁begin｜>"
#define DS_CALLS_END "<｜tool▁calls▁end｜>"
#define DS_BEGIN "<｜tool▁call▁begin｜>"
#define DS_SEP "<｜tool▁sep｜>"
#define DS_END "<｜tool▁call▁end｜>"

/* After <｜tool▁call▁begin｜>: V3 "function<｜tool▁sep｜>NAME\n```json\n{…}\n```",
 * V3.1 "NAME<｜tool▁sep｜>{…}", up to <｜tool▁call▁end｜>. */
static int deepseek_call(const char *s, size_t n, lt_tool_call_t *k, char **argjson) {
  const char *end = s + n, *sep = memmem(s, n, DS_SEP, strlen(DS_SEP));
  if (!sep) return 0;
  const char *rest = sep + strlen(DS_SEP), *name = s, *nend = sep, *js, *jend = end;
  const char *nl = memchr(rest, '\n', (size_t)(end - rest));
  const char *fence = nl ? memmem(nl, (size_t)(end - nl), "```json", 7) : NULL;
  if (fence && fence == nl + 1) { /* V3: the type before the separator, the name after it */
    name = rest;
    nend = nl;
    js = fence + 7;
    const char *close = NULL;
    for (const char *q = js; (q = memmem(q, (size_t)(end - q), "```", 3)); q += 3) close = q;
    if (!close) return 0;
    jend = close;
  } else {
    js = rest;
  }
  while (name < nend && (*name == ' ' || *name == '\n')) name++;
  while (nend > name && (nend[-1] == ' ' || nend[-1] == '\n' || nend[-1] == '\r')) nend--;
  cJSON *args = cJSON_ParseWithLength(js, (size_t)(jend - js)), *owned;
  const cJSON *obj = args_object(args, &owned);
  int r = obj ? json_call(name, (size_t)(nend - name), obj, k, argjson) : 0;
  cJSON_Delete(owned);
  cJSON_Delete(args);
  return r;
}

static int parse_blocks(lt_tool_format f, const char *text, size_t len, lt_toolcalls_t *out) {
  const char *open = f == LT_TOOLFMT_DEEPSEEK ? DS_BEGIN : "<tool_call>";
  const char *close = f == LT_TOOLFMT_DEEPSEEK ? DS_END : "</tool_call>";
  size_t ol = strlen(open), cl = strlen(close);
  const char *p = text, *end = text + len;
  while (p < end) {
    const char *s = memmem(p, (size_t)(end - p), open, ol);
    if (!s) break;
    s += ol;
    const char *e = memmem(s, (size_t)(end - s), close, cl);
    if (!e || (size_t)(e - s) > LT_TOOLCALL_MAX_VALUE + 4096 || out->ncalls == LT_TOOLCALL_MAX_CALLS) {
      out->malformed++;
      if (!e) break;
      p = e + cl;
      continue;
    }
    lt_tool_call_t *k = &out->calls[out->ncalls];
    char *aj = NULL;
    int r =
        f == LT_TOOLFMT_DEEPSEEK ? deepseek_call(s, (size_t)(e - s), k, &aj) : qwen_call(s, (size_t)(e - s), k, &aj);
    if (r == 1) {
      out->arguments[out->ncalls++] = aj;
    } else {
      call_free(k);
      free(aj);
      if (r < 0) {
        lt_toolcalls_free(out);
        return lt_error_set(LT_ENOMEM, "tool-call parser: out of memory");
      }
      out->malformed++;
    }
    p = e + cl;
  }
  return 0;
}

int lt_toolcall_parse_as(lt_tool_format f, const char *text, size_t len, lt_toolcalls_t *out) {
  if (f == LT_TOOLFMT_XML) return lt_toolcall_parse(text, len, out);
  memset(out, 0, sizeof *out);
  return parse_blocks(f, text, len, out);
}

/* ---- writing ---- */

void lt_toolcall_write(lt_tool_format f, const cJSON *tool_calls, lt_buf_t *out) {
  int first = 1;
  for (const cJSON *tc = cJSON_IsArray(tool_calls) ? tool_calls->child : NULL; tc; tc = tc->next) {
    const cJSON *fn = cJSON_GetObjectItemCaseSensitive(tc, "function");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name"),
                *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
    if (!cJSON_IsString(name)) continue;
    cJSON *parsed = cJSON_IsString(args) ? cJSON_Parse(args->valuestring) : cJSON_Duplicate(args, 1);
    if (f == LT_TOOLFMT_XML) {
      lt_buf_printf(out, "<tool_call><name>%s</name>", name->valuestring);
      for (const cJSON *v = cJSON_IsObject(parsed) ? parsed->child : NULL; v; v = v->next) {
        lt_buf_printf(out, "<arg name=\"%s\">", v->string);
        if (cJSON_IsString(v)) lt_buf_puts(out, v->valuestring);
        else lt_json_write(out, v); /* into the buffer: no allocation to fail unchecked */
        lt_buf_puts(out, "</arg>");
      }
      lt_buf_puts(out, "</tool_call>");
    } else if (f == LT_TOOLFMT_QWEN) {
      lt_buf_puts(out, "<tool_call>{\"name\": ");
      lt_json_quote(out, name->valuestring);
      lt_buf_puts(out, ", \"arguments\": ");
      if (parsed) lt_json_write(out, parsed);
      else lt_buf_puts(out, "{}");
      lt_buf_puts(out, "}</tool_call>");
    } else { /* DeepSeek-V3's chat template: the calls in one block, one per line */
      lt_buf_puts(out, first ? DS_CALLS_BEGIN : "\n");
      lt_buf_printf(out, DS_BEGIN "function" DS_SEP "%s\n```json\n", name->valuestring);
      if (parsed) lt_json_write(out, parsed);
      else lt_buf_puts(out, "{}");
      lt_buf_puts(out, "\n```" DS_END);
    }
    first = 0;
    cJSON_Delete(parsed);
  }
  if (f == LT_TOOLFMT_DEEPSEEK && !first) lt_buf_puts(out, DS_CALLS_END);
}

static const char *const FORMAT_NAMES[] = {"xml", "qwen", "deepseek"};

int lt_toolcall_format_parse(const char *name, lt_tool_format *out) {
  for (int i = 0; i < 3; i++)
    if (name && strcmp(name, FORMAT_NAMES[i]) == 0) {
      *out = (lt_tool_format)i;
      return 0;
    }
  return lt_error_set(LT_EINVAL, "tool format \"%s\": expected xml, qwen or deepseek", name ? name : "");
}

const char *lt_toolcall_format_name(lt_tool_format f) { return FORMAT_NAMES[f]; }

lt_tool_format lt_toolcall_format_detect(const char *src) {
  if (!src) return LT_TOOLFMT_XML;
  if (strstr(src, DS_BEGIN)) return LT_TOOLFMT_DEEPSEEK;
  if (strstr(src, "<tool_call>") && !strstr(src, "<tool_call><name>")) return LT_TOOLFMT_QWEN;
  return LT_TOOLFMT_XML;
}
