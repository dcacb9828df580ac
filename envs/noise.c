/* The noise wrapper (seed 004 §3.3, "robust RL"): any domain may add
 * `envs.<d>.noise` to perturb its episodes the way real environments are
 * imperfect, without making a task unsolvable:
 *   instruction noise  typos in plain words (never in ids or numbers), casual
 *                      filler around the request;
 *   tool noise         a call that fails transiently and has no effect (a retry
 *                      works), a partial result (rows cut, marked "partial"), an
 *                      inconsistent rendering (numbers as strings, keys reordered).
 * Probabilities scale with a curriculum level that rises with the task index
 * from `level_start` to 1 over `ramp_tasks` tasks; the level travels in the
 * task spec, so the daemon decides it and every worker applies the same. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "envs/internal.h"
#include "util/buf.h"
#include "util/error.h"
#include "util/rng.h"

static const char *const keys[] = {"instruction", "tool_failure", "tool_partial", "tool_inconsistent", "level_start", "ramp_tasks"};

int lt__noise_parse(const char *dom, const cJSON *n, lt__noise_t *out) {
  memset(out, 0, sizeof *out);
  if (!n) return 0;
  if (!cJSON_IsObject(n)) return lt_error_set(LT_ECONFIG, "envs.%s.noise: expected an object", dom);
  double *dst[] = {&out->instruction, &out->tool_failure, &out->tool_partial, &out->tool_inconsistent, &out->level_start, &out->ramp_tasks};
  for (const cJSON *c = n->child; c; c = c->next) {
    size_t i = 0;
    while (i < 6 && strcmp(keys[i], c->string)) i++;
    if (i == 6)
      return lt_error_set(LT_ECONFIG, "envs.%s.noise.%s: unknown key (instruction, tool_failure, tool_partial, "
                                      "tool_inconsistent, level_start, ramp_tasks)", dom, c->string);
    double hi = i == 5 ? 1e12 : 1;
    if (!cJSON_IsNumber(c) || c->valuedouble < 0 || c->valuedouble > hi)
      return lt_error_set(LT_ECONFIG, "envs.%s.noise.%s: expected a number in [0, %g]", dom, c->string, hi);
    *dst[i] = c->valuedouble;
  }
  out->on = 1;
  return 0;
}

double lt__noise_level(const lt__noise_t *n, uint64_t index) {
  if (n->ramp_tasks <= 0) return 1;
  double l = n->level_start + (1 - n->level_start) * (double)index / n->ramp_tasks;
  return l < 1 ? l : 1;
}

static int plain_word(const char *w, size_t n) {
  if (n < 4) return 0;
  for (size_t i = 0; i < n; i++)
    if (!isalpha((unsigned char)w[i])) return 0;
  return 1;
}

char *lt__noise_instruction(const lt__noise_t *n, double level, lt_rng_t *r, const char *text) {
  double p = n->instruction * level;
  static const char *const pre[] = {"hey, quick one: ", "Hi! ", "so um, ", "Hello there. "};
  static const char *const post[] = {" thx", " Thanks in advance!", " (sorry if this is unclear)", " asap pls"};
  lt_buf_t b = {0};
  int fill = lt_rng_uniform(r) < p;
  if (fill) lt_buf_puts(&b, pre[lt_rng_below(r, 4)]);
  for (const char *s = text; *s;) {
    size_t w = strcspn(s, " \n\t\"'");
    if (plain_word(s, w) && lt_rng_uniform(r) < p * 0.3) { /* swap two inner letters: readable, still a typo */
      char tmp[256];
      size_t k = w < sizeof tmp - 1 ? w : sizeof tmp - 1;
      memcpy(tmp, s, k);
      size_t i = 1 + lt_rng_below(r, k - 2);
      char c = tmp[i];
      tmp[i] = tmp[i + 1];
      tmp[i + 1] = c;
      lt_buf_append(&b, tmp, k);
      lt_buf_append(&b, s + k, w - k);
    } else {
      lt_buf_append(&b, s, w);
    }
    s += w;
    if (*s) lt_buf_putc(&b, *s++);
  }
  if (fill) lt_buf_puts(&b, post[lt_rng_below(r, 4)]);
  return lt_buf_take(&b);
}

int lt__noise_tool_fails(const lt__noise_t *n, double level, lt_rng_t *r) {
  return lt_rng_uniform(r) < n->tool_failure * level;
}

static void stringify_numbers(cJSON *v) {
  for (cJSON *c = v ? v->child : NULL; c; c = c->next) {
    if (cJSON_IsNumber(c)) {
      char num[64];
      snprintf(num, sizeof num, "%.15g", c->valuedouble);
      c->type = cJSON_String;
      c->valuestring = strdup(num);
    } else {
      stringify_numbers(c);
    }
  }
}

static void reverse_keys(cJSON *o) {
  if (!cJSON_IsObject(o)) return;
  cJSON *rev = NULL;
  for (cJSON *c = o->child; c;) {
    cJSON *next = c->next;
    c->next = rev;
    c->prev = NULL;
    if (rev) rev->prev = c;
    rev = c;
    c = next;
  }
  o->child = rev;
  if (rev) { /* cJSON keeps the last item in child->prev */
    cJSON *last = rev;
    while (last->next) last = last->next;
    rev->prev = last;
  }
}

char *lt__noise_observation(const lt__noise_t *n, double level, lt_rng_t *r, const char *content) {
  cJSON *o = cJSON_Parse(content);
  cJSON *rows = cJSON_GetObjectItemCaseSensitive(o, "rows");
  int changed = 0;
  if (cJSON_IsArray(rows) && cJSON_GetArraySize(rows) > 1 && lt_rng_uniform(r) < n->tool_partial * level) {
    int keep = cJSON_GetArraySize(rows) / 2;
    while (cJSON_GetArraySize(rows) > keep) cJSON_DeleteItemFromArray(rows, keep);
    cJSON_AddBoolToObject(o, "partial", 1);
    changed = 1;
  }
  if (o && lt_rng_uniform(r) < n->tool_inconsistent * level) {
    stringify_numbers(o);
    for (cJSON *row = cJSON_IsArray(rows) ? rows->child : NULL; row; row = row->next) reverse_keys(row);
    changed = 1;
  }
  char *out = changed ? cJSON_PrintUnformatted(o) : strdup(content);
  cJSON_Delete(o);
  return out;
}
