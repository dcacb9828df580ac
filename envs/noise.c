/* The noise wrapper (seed 004 §3.3, "robust RL"): any domain may add
 * `envs.<d>.noise` to perturb its episodes the way real environments are
 * imperfect, without making a task unsolvable:
 *   instruction noise  typos in plain words (never in ids or numbers), casual
 *                      filler around the request;
 *   tool noise         a call that fails transiently and has no effect (a retry
 *                      works), a partial result (rows cut, marked "partial"), an
 *                      inconsistent rendering (numbers as strings, keys reordered).
 * Typos never touch a word the task's verifier needs: any word of the task's
 * spec or of the episode's reference (names, ids, values) stays as it is.
 * Probabilities scale with a curriculum level (seed 004 §3.3.3, closed loop):
 * a share of training tasks stays clean, and the level rises by `level_step`
 * only once the success rate of the noisy tasks at the current level is
 * within `max_gap` of the clean ones' (`window` episodes of each).  The daemon
 * decides the level and it travels in the task spec, so every worker applies
 * the same. */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "envs/internal.h"
#include "util/buf.h"
#include "util/error.h"
#include "util/rng.h"

#define NKEYS 9
static const char *const keys[NKEYS] = {"instruction",       "tool_failure", "tool_partial",
                                        "tool_inconsistent", "level_start",  "level_step",
                                        "max_gap",           "clean_share",  "window"};

int lt__noise_parse(const char *dom, const cJSON *n, lt__noise_t *out) {
  memset(out, 0, sizeof *out);
  if (!n) return 0;
  if (!cJSON_IsObject(n)) return lt_error_set(LT_ECONFIG, "envs.%s.noise: expected an object", dom);
  out->level_start = 1; /* no curriculum unless asked for */
  out->level_step = 0.1;
  out->max_gap = 0.1;
  out->clean_share = 0.2;
  out->window = 32;
  double *dst[NKEYS] = {&out->instruction,       &out->tool_failure, &out->tool_partial,
                        &out->tool_inconsistent, &out->level_start,  &out->level_step,
                        &out->max_gap,           &out->clean_share,  &out->window};
  for (const cJSON *c = n->child; c; c = c->next) {
    if (!strcmp(c->string, "ramp_tasks"))
      return lt_error_set(LT_ECONFIG,
                          "envs.%s.noise.ramp_tasks: removed, the curriculum is closed-loop (level_start, "
                          "level_step, max_gap, clean_share, window; docs/envs.md)",
                          dom);
    size_t i = 0;
    while (i < NKEYS && strcmp(keys[i], c->string)) i++;
    if (i == NKEYS)
      return lt_error_set(LT_ECONFIG,
                          "envs.%s.noise.%s: unknown key (instruction, tool_failure, tool_partial, "
                          "tool_inconsistent, level_start, level_step, max_gap, clean_share, window)",
                          dom, c->string);
    double lo = i == 8 ? 1 : 0, hi = i == 8 ? 1e9 : 1;
    if (!cJSON_IsNumber(c) || c->valuedouble < lo || c->valuedouble > hi ||
        (i == 8 && c->valuedouble != (int)c->valuedouble))
      return lt_error_set(LT_ECONFIG, "envs.%s.noise.%s: expected a%s in [%g, %g]", dom, c->string,
                          i == 8 ? "n integer" : " number", lo, hi);
    *dst[i] = c->valuedouble;
  }
  out->on = 1;
  out->level = out->level_start;
  return 0;
}

double lt__noise_level(const lt__noise_t *n, uint64_t index) {
  if (n->level >= 1) return 1;
  /* A fixed share of the task indices stays clean (level 0) to measure the gap. */
  lt_rng_t r;
  lt_rng_seed(&r, lt_rng_mix(index, 0x636c65616eull));
  return lt_rng_uniform(&r) < n->clean_share ? 0 : n->level;
}

int lt__noise_record(lt__noise_t *n, double level, int success) {
  if (!n->on || n->level >= 1) return 0;
  if (level == 0) {
    n->clean_n++, n->clean_ok += success != 0;
  } else if (fabs(level - n->level) < 1e-9) {
    n->noisy_n++, n->noisy_ok += success != 0;
  } else {
    return 0; /* a task dispatched before the last raise says nothing about this level */
  }
  if (n->clean_n < n->window || n->noisy_n < n->window) return 0;
  double gap = (double)n->clean_ok / n->clean_n - (double)n->noisy_ok / n->noisy_n;
  n->last_gap = gap;
  if (gap > n->max_gap || !n->clean_ok) { /* not robust yet (or nothing solved to be robust in): measure again */
    n->clean_n = n->clean_ok = n->noisy_n = n->noisy_ok = 0;
    return 0;
  }
  n->level = n->level + n->level_step < 1 ? n->level + n->level_step : 1;
  n->clean_n = n->clean_ok = n->noisy_n = n->noisy_ok = 0;
  return 1;
}

static int plain_word(const char *w, size_t n) {
  if (n < 4) return 0;
  for (size_t i = 0; i < n; i++)
    if (!isalpha((unsigned char)w[i])) return 0;
  return 1;
}

/* w[0..n) occurs as a whole word (case aside) in s. */
static int has_word(const char *s, const char *w, size_t n) {
  for (const char *p = s; *p; p++) {
    if (p != s && isalnum((unsigned char)p[-1])) continue;
    if (strncasecmp(p, w, n) == 0 && !isalnum((unsigned char)p[n])) return 1;
  }
  return 0;
}

/* The word is in a string of v, the task's messages aside (the text being perturbed): a name, an id or a value
 * the task (and its verifier) uses. */
static int needed_word(const cJSON *v, const char *w, size_t n) {
  for (; v; v = v->next) {
    if (v->string && !strcmp(v->string, "messages")) continue;
    if ((cJSON_IsString(v) && has_word(v->valuestring, w, n)) || needed_word(v->child, w, n)) return 1;
  }
  return 0;
}

char *lt__noise_instruction(const lt__noise_t *n, double level, lt_rng_t *r, const char *text, const cJSON *spec,
                            const cJSON *reference) {
  double p = n->instruction * level;
  static const char *const pre[] = {"hey, quick one: ", "Hi! ", "so um, ", "Hello there. "};
  static const char *const post[] = {" thx", " Thanks in advance!", " (sorry if this is unclear)", " asap pls"};
  lt_buf_t b = {0};
  int fill = lt_rng_uniform(r) < p;
  if (fill) lt_buf_puts(&b, pre[lt_rng_below(r, 4)]);
  for (const char *s = text; *s;) {
    size_t w = strcspn(s, " \n\t\"'");
    if (plain_word(s, w) && lt_rng_uniform(r) < p * 0.3 && !(spec && needed_word(spec->child, s, w)) &&
        !(reference && needed_word(reference->child, s, w))) { /* swap two inner letters: readable, still a typo */
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
