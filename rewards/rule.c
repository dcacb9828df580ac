/* Rule verifiers: final-answer extraction and matching, and the shaping terms
 * (length penalty, language consistency, tool-call format penalty). */
#include <ctype.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rewards/internal.h"
#include "util/error.h"
#include "util/utf8.h"

char *lt__reward_trim_dup(const char *s, size_t n) {
  while (n && isspace((unsigned char)*s)) s++, n--;
  while (n && isspace((unsigned char)s[n - 1])) n--;
  char *o = malloc(n + 1);
  if (!o) return NULL;
  memcpy(o, s, n);
  o[n] = 0;
  return o;
}

char *lt__reward_after_marker(const char *r) {
  const char *m = NULL;
  for (const char *p = strstr(r, "####"); p; p = strstr(p + 4, "####")) m = p;
  if (!m) return NULL;
  m += 4;
  return lt__reward_trim_dup(m, strcspn(m, "\n"));
}

char *lt__reward_last_boxed(const char *r) {
  const char *b = NULL;
  for (const char *p = strstr(r, "\\boxed{"); p; p = strstr(p + 7, "\\boxed{")) b = p;
  if (!b) return NULL;
  b += 7;
  int depth = 1;
  const char *e = b;
  for (; *e && depth; e++) depth += *e == '{' ? 1 : *e == '}' ? -1 : 0;
  if (depth) return NULL;
  return lt__reward_trim_dup(b, (size_t)(e - 1 - b));
}

char *lt_reward_extract_answer(const char *r) {
  char *a = lt__reward_after_marker(r);
  return a ? a : lt__reward_last_boxed(r);
}

/* Parses a plain number (optional sign, digits with optional thousands
 * commas, optional fraction); 0 if the text is anything else. */
static int parse_number(const char *s, long double *out) {
  char buf[128];
  size_t k = 0;
  for (const char *p = s; *p; p++) {
    if (*p == ',') continue;
    if (k + 1 >= sizeof buf) return 0;
    buf[k++] = *p;
  }
  buf[k] = 0;
  if (!k) return 0;
  char *end;
  *out = strtold(buf, &end);
  return *end == 0 && strspn(buf, "+-0123456789.") == k;
}

int lt_reward_answers_match(const char *got, const char *want, double rel_tol) {
  /* Whitespace-insensitive exact match first. */
  const char *a = got, *b = want;
  for (;;) {
    while (isspace((unsigned char)*a)) a++;
    while (isspace((unsigned char)*b)) b++;
    if (!*a || !*b || *a != *b) break;
    a++, b++;
  }
  if (!*a && !*b) return 1;
  long double x, y;
  if (!parse_number(got, &x) || !parse_number(want, &y)) return 0;
  long double d = fabsl(x - y), s = fabsl(y) > 1 ? fabsl(y) : 1;
  return d <= rel_tol * s;
}

int lt__reward_rule(const lt__reward_cfg_t *c, const lt_reward_case_t *k, lt_reward_result_t *res) {
  const cJSON *ans = cJSON_GetObjectItemCaseSensitive(k->reference, "answer");
  if (!cJSON_IsString(ans)) {
    res->status = LT_EINVAL;
    res->error = strdup("rule reward: the reference has no \"answer\"");
    return 0;
  }
  char *got = lt_reward_extract_answer(k->response ? k->response : "");
  int correct = got && lt_reward_answers_match(got, ans->valuestring, c->tolerance);
  cJSON_AddNumberToObject(res->components, "correct", correct);
  cJSON_AddNumberToObject(res->components, "format", got != NULL);
  free(got);
  res->reward = correct;
  res->attempts = 1;
  return 0;
}

double lt__reward_script_fraction(const char *s, int script) {
  long in = 0, letters = 0;
  const unsigned char *p = (const unsigned char *)s;
  while (*p) {
    uint32_t cp;
    int l = lt_utf8_decode((const char *)p, strnlen((const char *)p, 4), &cp);
    if (l == 0) cp = 0xFFFD, l = 1; /* a byte that is not UTF-8 counts as no script */
    p += l;
    int latin = (cp < 0x80 && isalpha((int)cp)) || (cp >= 0xC0 && cp < 0x250);
    int cjk = (cp >= 0x4E00 && cp < 0xA000) || (cp >= 0x3040 && cp < 0x3100) || (cp >= 0xAC00 && cp < 0xD7A4);
    int cyr = cp >= 0x400 && cp < 0x530;
    if (!latin && !cjk && !cyr) continue;
    letters++;
    in += script == 1 ? latin : script == 2 ? cjk : cyr;
  }
  return letters ? (double)in / letters : 1.0;
}

void lt__reward_shape(const lt__reward_cfg_t *c, const lt_reward_case_t *k, lt_reward_result_t *res) {
  if (c->length_target > 0) {
    double excess = k->response_tokens > c->length_target ? (double)(k->response_tokens - c->length_target) : 0;
    double pen = -c->length_coef * excess / c->length_target;
    cJSON_AddNumberToObject(res->components, "length_penalty", pen);
    res->reward += pen;
  }
  if (c->script) {
    double f = c->language_coef * lt__reward_script_fraction(k->response ? k->response : "", c->script);
    cJSON_AddNumberToObject(res->components, "language", f);
    res->reward += f;
  }
  if (c->format_penalty > 0 && k->malformed_tool_calls > 0) {
    double pen = -c->format_penalty * k->malformed_tool_calls;
    cJSON_AddNumberToObject(res->components, "tool_format", pen);
    res->reward += pen;
  }
}
