/* JSON helpers over cJSON (util/json.h): parsing with positions, typed fields, JSON lines, writing. */
#include "util/json.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/error.h"
#include "util/fs.h"
#include "util/utf8.h"

/* line0: the line number of text's first line in its file. */
static int parse_at(const char *text, size_t len, const char *what, int line0, cJSON **out) {
  const char *end = NULL;
  *out = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
  if (!root) {
    if (!end || end < text || end > text + len) end = text + len;
    int line = line0, col = 1;
    for (const char *p = text; p < end; p++) {
      if (*p == '\n') {
        line++;
        col = 1;
      } else {
        col++;
      }
    }
    char near[24] = {0};
    size_t k = 0;
    for (const char *p = end; p < text + len && k + 1 < sizeof near && *p != '\n'; p++)
      near[k++] = (*p >= 32 && *p < 127) ? *p : '?';
    return lt_error_set(LT_EFORMAT, "%s:%d:%d: malformed JSON%s%s%s", what, line, col,
                        k ? " near '" : " (unexpected end of input)", k ? near : "", k ? "'" : "");
  }
  /* cJSON stops at the end of the first value: anything but whitespace after
   * it is an error too. */
  const char *p = end;
  while (p < text + len && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
  if (p < text + len && *p) {
    int line = line0, col = 1;
    for (const char *q = text; q < p; q++) {
      if (*q == '\n') {
        line++;
        col = 1;
      } else {
        col++;
      }
    }
    cJSON_Delete(root);
    return lt_error_set(LT_EFORMAT, "%s:%d:%d: malformed JSON (trailing characters)", what, line, col);
  }
  *out = root;
  return 0;
}

int lt_json_parse(const char *text, size_t len, const char *what, cJSON **out) {
  return parse_at(text, len, what, 1, out);
}

int lt_json_parse_file(const char *path, cJSON **out) {
  char *data;
  size_t len;
  int rc = lt_fs_read_file(path, 256u << 20, &data, &len);
  if (rc < 0) return rc;
  rc = lt_json_parse(data, len, path, out);
  free(data);
  return rc;
}

static const cJSON *field(const cJSON *obj, const char *key, int *rc) {
  const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
  if (!it || cJSON_IsNull(it)) {
    *rc = lt_error_set(LT_ENOENT, "%s: missing", key);
    return NULL;
  }
  *rc = 0;
  return it;
}

int lt_json_get_i64(const cJSON *obj, const char *key, int64_t *out) {
  int rc;
  const cJSON *it = field(obj, key, &rc);
  if (!it) return rc;
  if (!cJSON_IsNumber(it) || it->valuedouble != floor(it->valuedouble) || fabs(it->valuedouble) > 9007199254740992.0)
    return lt_error_set(LT_EINVAL, "%s: expected integer", key);
  *out = (int64_t)it->valuedouble;
  return 0;
}

int lt_json_get_f64(const cJSON *obj, const char *key, double *out) {
  int rc;
  const cJSON *it = field(obj, key, &rc);
  if (!it) return rc;
  if (!cJSON_IsNumber(it)) return lt_error_set(LT_EINVAL, "%s: expected number", key);
  *out = it->valuedouble;
  return 0;
}

int lt_json_get_bool(const cJSON *obj, const char *key, int *out) {
  int rc;
  const cJSON *it = field(obj, key, &rc);
  if (!it) return rc;
  if (!cJSON_IsBool(it)) return lt_error_set(LT_EINVAL, "%s: expected boolean", key);
  *out = cJSON_IsTrue(it);
  return 0;
}

int lt_json_get_str(const cJSON *obj, const char *key, const char **out) {
  int rc;
  const cJSON *it = field(obj, key, &rc);
  if (!it) return rc;
  if (!cJSON_IsString(it)) return lt_error_set(LT_EINVAL, "%s: expected string", key);
  *out = it->valuestring;
  return 0;
}

int lt_json_get_i32_array(const cJSON *obj, const char *key, int32_t **out, int *n) {
  int rc;
  const cJSON *it = field(obj, key, &rc);
  if (!it) return rc;
  if (!cJSON_IsArray(it)) return lt_error_set(LT_EINVAL, "%s: expected array of integers", key);
  int len = cJSON_GetArraySize(it);
  int32_t *v = malloc(sizeof *v * (size_t)(len ? len : 1));
  if (!v) return lt_error_set(LT_ENOMEM, "%s: out of memory", key);
  int i = 0;
  for (const cJSON *e = it->child; e; e = e->next, i++) {
    if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble) || e->valuedouble < INT32_MIN ||
        e->valuedouble > INT32_MAX) {
      free(v);
      return lt_error_set(LT_EINVAL, "%s[%d]: expected 32-bit integer", key, i);
    }
    v[i] = (int32_t)e->valuedouble;
  }
  *out = v;
  *n = len;
  return 0;
}

int lt_json_get_f32_array(const cJSON *obj, const char *key, float **out, int *n) {
  int rc;
  const cJSON *it = field(obj, key, &rc);
  if (!it) return rc;
  if (!cJSON_IsArray(it)) return lt_error_set(LT_EINVAL, "%s: expected array of numbers", key);
  int len = cJSON_GetArraySize(it);
  float *v = malloc(sizeof *v * (size_t)(len ? len : 1));
  if (!v) return lt_error_set(LT_ENOMEM, "%s: out of memory", key);
  int i = 0;
  for (const cJSON *e = it->child; e; e = e->next, i++) {
    if (!cJSON_IsNumber(e)) {
      free(v);
      return lt_error_set(LT_EINVAL, "%s[%d]: expected number", key, i);
    }
    v[i] = (float)e->valuedouble;
  }
  *out = v;
  *n = len;
  return 0;
}

size_t lt_json_utf8_check(const char *s, size_t n) {
  const unsigned char *p = (const unsigned char *)s;
  size_t i = 0;
  while (i < n) {
    if (p[i] < 0x80) {
      i++;
      continue;
    }
    uint32_t cp;
    int k = lt_utf8_decode(s + i, n - i, &cp);
    if (k == 0) return i;
    i += (size_t)k;
  }
  return n;
}

void lt_json_quote_n(lt_buf_t *b, const char *s, size_t n) {
  const unsigned char *p = (const unsigned char *)s;
  lt_buf_putc(b, '"');
  size_t i = 0;
  while (i < n) {
    /* A run of characters that need no escape goes in one append (a char at a
     * time was most of encoding a message). */
    size_t run = i;
    while (run < n && p[run] >= 0x20 && p[run] < 0x7f && p[run] != '"' && p[run] != '\\') run++;
    if (run > i) {
      lt_buf_append(b, p + i, run - i);
      i = run;
      continue;
    }
    unsigned c = p[i];
    if (c < 0x80) {
      switch (c) {
      case '"': lt_buf_puts(b, "\\\""); break;
      case '\\': lt_buf_puts(b, "\\\\"); break;
      case '\n': lt_buf_puts(b, "\\n"); break;
      case '\r': lt_buf_puts(b, "\\r"); break;
      case '\t': lt_buf_puts(b, "\\t"); break;
      case '\b': lt_buf_puts(b, "\\b"); break;
      case '\f': lt_buf_puts(b, "\\f"); break;
      default: lt_buf_printf(b, "\\u%04x", c); /* below 0x20, or 0x7f: the run above took the rest */
      }
      i++;
      continue;
    }
    uint32_t cp;
    int k = lt_utf8_decode(s + i, n - i, &cp);
    if (k == 0) {
      lt_buf_puts(b, "\xEF\xBF\xBD"); /* U+FFFD */
      i++;
    } else {
      lt_buf_append(b, p + i, (size_t)k);
      i += (size_t)k;
    }
  }
  lt_buf_putc(b, '"');
}

void lt_json_quote(lt_buf_t *b, const char *s) { lt_json_quote_n(b, s, strlen(s)); }

void lt_json_int(lt_buf_t *b, long long v) {
  char tmp[24], *p = tmp + sizeof tmp;
  unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
  do *--p = (char)('0' + u % 10);
  while (u /= 10);
  if (v < 0) *--p = '-';
  lt_buf_append(b, p, (size_t)(tmp + sizeof tmp - p));
}

/* 10^0 .. 10^22 (past 2^64 from 10^20 on). */
#define P19 ((unsigned __int128)10000000000000000000ull)
static const unsigned __int128 p10[23] = {1ull,
                                          10ull,
                                          100ull,
                                          1000ull,
                                          10000ull,
                                          100000ull,
                                          1000000ull,
                                          10000000ull,
                                          100000000ull,
                                          1000000000ull,
                                          10000000000ull,
                                          100000000000ull,
                                          1000000000000ull,
                                          10000000000000ull,
                                          100000000000000ull,
                                          1000000000000000ull,
                                          10000000000000000ull,
                                          100000000000000000ull,
                                          1000000000000000000ull,
                                          P19,
                                          P19 * 10,
                                          P19 * 100,
                                          P19 * 1000};
#undef P19

/* printf's "%.<prec>g" (prec 9 or 17) of a non-integer 1e-5 <= |v| < 10^prec,
 * without printf (which dominated exporting logprobs, then encoding
 * messages' timings): v = m·2^-s exactly, so v·10^k is m·10^k/2^s in 128-bit
 * integers (m < 2^53, 10^k <= 10^21, s <= 69), rounded half to even as printf
 * rounds the exact value.  Returns the length written to out (0: use printf). */
static int gprec(double v, int prec, char *out) {
  const unsigned __int128 lo = p10[prec - 1], hi = p10[prec];
  double a = fabs(v);
  int ex;
  double fr = frexp(a, &ex); /* a = fr·2^ex, fr in [0.5, 1) */
  uint64_t m = (uint64_t)ldexp(fr, 53);
  int s = 53 - ex; /* a = m / 2^s; s > 0 as a is not an integer */
  int d = (int)floor(log10(a));
  uint64_t q = 0;
  for (int tries = 0; tries < 3; tries++) {
    int k = prec - 1 - d; /* prec digits: q = a·10^k in [10^(prec-1), 10^prec) */
    if (k < 0 || k > 22) return 0;
    unsigned __int128 n = (unsigned __int128)m * p10[k];
    unsigned __int128 w = n >> s, rem = n - (w << s), half = (unsigned __int128)1 << (s - 1);
    if (w < lo) {
      d--;
      continue;
    }
    if (w >= hi) {
      d++;
      continue;
    }
    q = (uint64_t)w;
    if (rem > half || (rem == half && (q & 1))) q++;
    if (q == hi) q = (uint64_t)lo, d++;
    break;
  }
  if (!q) return 0;
  char dig[17];
  for (int i = prec - 1; i >= 0; i--, q /= 10) dig[i] = (char)('0' + q % 10);
  int nd = prec;
  while (nd > 1 && dig[nd - 1] == '0') nd--;
  int o = 0;
  if (v < 0) out[o++] = '-';
  if (d < -4 || d >= prec) { /* d.ddde±XX */
    out[o++] = dig[0];
    if (nd > 1) out[o++] = '.';
    for (int i = 1; i < nd; i++) out[o++] = dig[i];
    int e = d < 0 ? -d : d;
    out[o++] = 'e';
    out[o++] = d < 0 ? '-' : '+';
    out[o++] = (char)('0' + e / 10);
    out[o++] = (char)('0' + e % 10);
  } else if (d >= 0) {
    for (int i = 0; i <= d; i++) out[o++] = i < nd ? dig[i] : '0';
    if (nd > d + 1) out[o++] = '.';
    for (int i = d + 1; i < nd; i++) out[o++] = dig[i];
  } else {
    out[o++] = '0';
    out[o++] = '.';
    for (int i = 0; i < -d - 1; i++) out[o++] = '0';
    for (int i = 0; i < nd; i++) out[o++] = dig[i];
  }
  return o;
}

/* A number as "%.<prec>g" would print it; non-finite values become null. */
static void num_prec(lt_buf_t *b, double v, int prec) {
  if (!isfinite(v)) {
    lt_buf_puts(b, "null");
    return;
  }
  if (v == floor(v) && fabs(v) < 1e15) {
    lt_json_int(b, (long long)v);
    return;
  }
  char t[40];
  int n = v != floor(v) && fabs(v) >= 1e-5 && fabs(v) < (prec == 9 ? 1e9 : 1e17) ? gprec(v, prec, t) : 0;
  if (n > 0) lt_buf_append(b, t, (size_t)n);
  else lt_buf_printf(b, "%.*g", prec, v);
}

void lt_json_num(lt_buf_t *b, double v) { num_prec(b, v, 9); }

void lt_json_write(lt_buf_t *b, const cJSON *v) {
  if (!v || cJSON_IsNull(v) || cJSON_IsInvalid(v)) {
    lt_buf_puts(b, "null");
  } else if (cJSON_IsBool(v)) {
    lt_buf_puts(b, cJSON_IsTrue(v) ? "true" : "false");
  } else if (cJSON_IsNumber(v)) {
    /* Full precision: a reward, a timing or a large id must survive the round trip. */
    num_prec(b, v->valuedouble, 17);
  } else if (cJSON_IsString(v)) {
    lt_json_quote(b, v->valuestring);
  } else {
    int obj = cJSON_IsObject(v);
    lt_buf_putc(b, obj ? '{' : '[');
    for (const cJSON *c = v->child; c; c = c->next) {
      if (c != v->child) lt_buf_putc(b, ',');
      if (obj) {
        lt_json_quote(b, c->string ? c->string : "");
        lt_buf_putc(b, ':');
      }
      lt_json_write(b, c);
    }
    lt_buf_putc(b, obj ? '}' : ']');
  }
}

int lt_jsonl_write_metric(FILE *f, int64_t step, int64_t time_ms, const char *name, double value) {
  lt_buf_t b = {0};
  lt_buf_puts(&b, "{\"step\": ");
  lt_json_int(&b, step);
  lt_buf_puts(&b, ", \"time_ms\": ");
  lt_json_int(&b, time_ms);
  lt_buf_puts(&b, ", \"name\": ");
  lt_json_quote(&b, name);
  lt_buf_puts(&b, ", \"value\": ");
  lt_json_num(&b, value);
  lt_buf_puts(&b, "}\n");
  int rc = lt_buf_ok(&b);
  if (rc < 0) rc = lt_error_set(rc, "metric %s: out of memory", name);
  else if (fwrite(b.data, 1, b.len, f) != b.len || fflush(f) != 0)
    rc = lt_error_set(lt_error_from_errno(errno), "metric %s: cannot write: %s", name, strerror(errno));
  lt_buf_free(&b);
  return rc;
}

void lt_json_f32_array(lt_buf_t *b, const float *v, int n) {
  lt_buf_putc(b, '[');
  for (int i = 0; i < n; i++) {
    if (i) lt_buf_putc(b, ',');
    lt_json_num(b, v[i]);
  }
  lt_buf_putc(b, ']');
}

void lt_json_i32_array(lt_buf_t *b, const int32_t *v, int n) {
  lt_buf_putc(b, '[');
  for (int i = 0; i < n; i++) {
    if (i) lt_buf_putc(b, ',');
    lt_json_int(b, v[i]);
  }
  lt_buf_putc(b, ']');
}

int lt_jsonl_open(lt_jsonl_t *r, const char *path) {
  memset(r, 0, sizeof *r);
  r->path = path;
  if (strcmp(path, "-") == 0) {
    r->f = stdin;
    r->path = "<stdin>";
    return 0;
  }
  r->f = fopen(path, "r");
  if (!r->f) return lt_error_set(lt_error_from_errno(errno), "%s: %s", path, strerror(errno));
  r->own = 1;
  return 0;
}

int lt_jsonl_next(lt_jsonl_t *r, cJSON **out) {
  for (;;) {
    errno = 0;
    ssize_t n = getline(&r->line, &r->cap, r->f);
    if (n < 0) {
      if (ferror(r->f)) return lt_error_set(LT_EIO, "%s:%ld: read error: %s", r->path, r->lineno + 1, strerror(errno));
      return 0;
    }
    r->lineno++;
    size_t len = (size_t)n;
    while (len && (r->line[len - 1] == '\n' || r->line[len - 1] == '\r' || r->line[len - 1] == ' ' ||
                   r->line[len - 1] == '\t'))
      len--;
    size_t start = 0;
    while (start < len && (r->line[start] == ' ' || r->line[start] == '\t')) start++;
    if (start == len) continue;
    cJSON *root;
    int rc = parse_at(r->line + start, len - start, r->path, (int)r->lineno, &root);
    if (rc < 0) return rc;
    *out = root;
    return 1;
  }
}

void lt_jsonl_close(lt_jsonl_t *r) {
  if (r->own && r->f) fclose(r->f);
  free(r->line);
  memset(r, 0, sizeof *r);
}
