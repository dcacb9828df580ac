/* JSON helpers over cJSON: parsing with line/column errors, typed field access
 * with messages that name the field, JSON-lines reading, and escaping. */
#ifndef LT_UTIL_JSON_H
#define LT_UTIL_JSON_H

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>

#include "util/buf.h"

/* Parses `len` bytes of `text`.  On error returns LT_EFORMAT with the detail
 * "<what>:<line>:<col>: malformed JSON (...)". */
int lt_json_parse(const char *text, size_t len, const char *what, cJSON **out);
int lt_json_parse_file(const char *path, cJSON **out);

/* Typed getters.  Missing key: LT_ENOENT; wrong type or range: LT_EINVAL; the
 * detail names the key ("tokens: expected array of integers"). */
int lt_json_get_i64(const cJSON *obj, const char *key, int64_t *out);
int lt_json_get_f64(const cJSON *obj, const char *key, double *out);
int lt_json_get_bool(const cJSON *obj, const char *key, int *out);
/* Borrowed pointer into obj. */
int lt_json_get_str(const cJSON *obj, const char *key, const char **out);
/* Arrays are malloc'd (caller frees); *n receives the length. */
int lt_json_get_i32_array(const cJSON *obj, const char *key, int32_t **out, int *n);
int lt_json_get_f32_array(const cJSON *obj, const char *key, float **out, int *n);

/* Appends any value as compact JSON; strings (keys too) through lt_json_quote,
 * so the output is valid UTF-8 whatever the input held. */
void lt_json_write(lt_buf_t *b, const cJSON *v);
/* Offset of the first byte that is not part of well-formed UTF-8 (overlongs,
 * surrogates and code points past U+10FFFF included), or n if all are. */
size_t lt_json_utf8_check(const char *s, size_t n);
/* Appends a JSON string literal; invalid UTF-8 becomes U+FFFD. */
void lt_json_quote(lt_buf_t *b, const char *s);
void lt_json_quote_n(lt_buf_t *b, const char *s, size_t n);
/* Appends a number; non-finite values become null.  %.9g (float-exact). */
void lt_json_num(lt_buf_t *b, double v);
/* An integer, without printf (exports write millions). */
void lt_json_int(lt_buf_t *b, long long v);
void lt_json_f32_array(lt_buf_t *b, const float *v, int n);
void lt_json_i32_array(lt_buf_t *b, const int32_t *v, int n);

/* One line of metrics.jsonl (docs/metrics.md), the one writer of that format: {"step", "time_ms", "name",
 * "value"} with the name escaped (lt_json_quote) and a non-finite value as null, written whole and flushed.
 * LT_EIO (or LT_ENOSPC) with errno's text when the write fails. */
int lt_jsonl_write_metric(FILE *f, int64_t step, int64_t time_ms, const char *name, double value);

/* JSON-lines reader over a file ("-" is stdin). */
typedef struct {
  FILE *f;
  int own;
  char *line;
  size_t cap;
  long lineno;
  const char *path;
} lt_jsonl_t;

int lt_jsonl_open(lt_jsonl_t *r, const char *path);
/* 1 with *out set (caller deletes), 0 at end, <0 on error (detail names
 * path:line).  Blank lines are skipped. */
int lt_jsonl_next(lt_jsonl_t *r, cJSON **out);
void lt_jsonl_close(lt_jsonl_t *r);

#endif
