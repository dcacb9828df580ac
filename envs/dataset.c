/* dataset: prompts and reference answers from JSON-lines files (docs/envs.md).
 *
 *   {"prompt": "What is 2+3?", "answer": "5"}
 *   {"messages": [{"role": "user", "content": "..."}], "answer": "5", "id": "q1", "metadata": {...}}
 *
 * The rows (checked at start, indexed, sampled by epochs) are envs/rows.c's;
 * this file holds what a dataset row is and the prompt made from it.  The task
 * spec carries the whole row, so workers need no copy of the file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "envs/internal.h"
#include "util/error.h"

typedef struct {
  char domain[64];
  lt__rows_t train, eval;
  char *system;
} dataset_t;

static const cJSON *get(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }

/* A chat message list: objects with string role and content, ending with a user turn. */
static const char *messages_problem(const cJSON *m) {
  if (!cJSON_IsArray(m) || !m->child) return "\"messages\" must be a non-empty array";
  const cJSON *last = NULL;
  for (const cJSON *x = m->child; x; x = x->next) {
    const cJSON *role = get(x, "role");
    if (!cJSON_IsObject(x) || !cJSON_IsString(role) || !cJSON_IsString(get(x, "content")))
      return "each message needs string \"role\" and \"content\"";
    if (strcmp(role->valuestring, "system") && strcmp(role->valuestring, "user") &&
        strcmp(role->valuestring, "assistant"))
      return "a message's role must be system, user or assistant";
    last = x;
  }
  return strcmp(get(last, "role")->valuestring, "user") ? "the last message must be the user's" : NULL;
}

/* What is wrong with a row, or NULL. */
static const char *dataset_row_problem(const cJSON *r) {
  if (!cJSON_IsObject(r)) return "a row must be a JSON object";
  const cJSON *p = get(r, "prompt"), *m = get(r, "messages"), *a = get(r, "answer"), *id = get(r, "id");
  if (!p == !m) return "a row needs exactly one of \"prompt\" (string) and \"messages\" (array)";
  if (p && (!cJSON_IsString(p) || !p->valuestring[0])) return "\"prompt\" must be a non-empty string";
  const char *why = m ? messages_problem(m) : NULL;
  if (why) return why;
  if (!cJSON_IsString(a) && !cJSON_IsNumber(a)) return "\"answer\" (string or number) is required";
  if (id && !cJSON_IsString(id) && !cJSON_IsNumber(id)) return "\"id\" must be a string or a number";
  if (get(r, "domain") && !cJSON_IsString(get(r, "domain"))) return "\"domain\" must be a string";
  if (get(r, "system") && !cJSON_IsString(get(r, "system"))) return "\"system\" must be a string";
  if (get(r, "tools") && !cJSON_IsArray(get(r, "tools"))) return "\"tools\" must be an array of function schemas";
  static const char *const keys[] = {"prompt", "messages", "answer", "id", "domain", "system", "tools", "metadata"};
  for (const cJSON *c = r->child; c; c = c->next) {
    size_t i = 0;
    while (i < sizeof keys / sizeof keys[0] && strcmp(keys[i], c->string)) i++;
    if (i == sizeof keys / sizeof keys[0])
      return "unknown key (a row has prompt or messages, answer, and optional id, domain, system, tools, metadata)";
  }
  return NULL;
}

static void dataset_row_check(const cJSON *row, void *ud, char *why, size_t n) {
  const char *p = dataset_row_problem(row);
  if (p) snprintf(why, n, "%s", p);
}

static void dataset_free(void *st) {
  dataset_t *d = st;
  if (!d) return;
  lt__rows_close(&d->train);
  lt__rows_close(&d->eval);
  free(d->system);
  free(d);
}

static int dataset_init(const char *dom, const cJSON *p, uint64_t seed, void **state) {
  for (const cJSON *c = p->child; c; c = c->next)
    if (strcmp(c->string, "train") && strcmp(c->string, "eval") && strcmp(c->string, "system"))
      return lt_error_set(LT_ECONFIG, "envs.%s.params.%s: unknown key (dataset takes train, eval, system)", dom,
                          c->string);
  const cJSON *tr = get(p, "train"), *ev = get(p, "eval"), *sys = get(p, "system");
  if (!cJSON_IsString(tr))
    return lt_error_set(LT_ECONFIG, "envs.%s.params.train: expected the path of a .jsonl file", dom);
  if (ev && !cJSON_IsString(ev))
    return lt_error_set(LT_ECONFIG, "envs.%s.params.eval: expected the path of a .jsonl file", dom);
  if (sys && !cJSON_IsString(sys)) return lt_error_set(LT_ECONFIG, "envs.%s.params.system: expected string", dom);
  dataset_t *d = calloc(1, sizeof *d);
  if (!d) return lt_error_set(LT_ENOMEM, "dataset: out of memory");
  snprintf(d->domain, sizeof d->domain, "%s", dom);
  d->train.fd = d->eval.fd = -1;
  char ctx[96], key[128];
  snprintf(ctx, sizeof ctx, "envs.%s", dom);
  snprintf(key, sizeof key, "envs.%s.params.train", dom);
  int rc = lt__rows_open(ctx, key, tr->valuestring, dataset_row_check, NULL, seed, &d->train);
  snprintf(key, sizeof key, "envs.%s.params.eval", dom);
  if (rc == 0 && ev) rc = lt__rows_open(ctx, key, ev->valuestring, dataset_row_check, NULL, seed, &d->eval);
  if (rc == 0 && sys && !(d->system = strdup(sys->valuestring))) rc = lt_error_set(LT_ENOMEM, "dataset: out of memory");
  if (rc < 0) {
    dataset_free(d);
    return rc;
  }
  *state = d;
  return 0;
}

/* spec = the row with messages in place of prompt and system, answer as text, plus where it came from. */
static cJSON *row_spec(const dataset_t *d, cJSON *row, uint32_t rowno, int64_t epoch) {
  cJSON *spec = cJSON_CreateObject(), *msgs = cJSON_DetachItemFromObjectCaseSensitive(row, "messages");
  const cJSON *sys = get(row, "system"), *p = get(row, "prompt"), *a = get(row, "answer");
  const char *system = cJSON_IsString(sys) ? sys->valuestring : d->system;
  if (!msgs) {
    msgs = cJSON_CreateArray();
    if (system) {
      cJSON *s = cJSON_CreateObject();
      cJSON_AddStringToObject(s, "role", "system");
      cJSON_AddStringToObject(s, "content", system);
      cJSON_AddItemToArray(msgs, s);
    }
    cJSON *u = cJSON_CreateObject();
    cJSON_AddStringToObject(u, "role", "user");
    cJSON_AddStringToObject(u, "content", p->valuestring);
    cJSON_AddItemToArray(msgs, u);
  } else if (system && strcmp(get(msgs->child, "role")->valuestring, "system")) {
    cJSON *s = cJSON_CreateObject();
    cJSON_AddStringToObject(s, "role", "system");
    cJSON_AddStringToObject(s, "content", system);
    cJSON_InsertItemInArray(msgs, 0, s);
  }
  /* A number answer as written in JSON's shortest form: 0.1 stays "0.1". */
  char *num = cJSON_IsNumber(a) ? cJSON_PrintUnformatted(a) : NULL;
  cJSON_AddNumberToObject(spec, "row", rowno + 1);
  if (epoch >= 0) cJSON_AddNumberToObject(spec, "epoch", (double)epoch);
  cJSON_AddItemToObject(spec, "messages", msgs);
  cJSON_AddStringToObject(spec, "answer", cJSON_IsString(a) ? a->valuestring : num ? num : "");
  free(num);
  static const char *const keep[] = {"id", "domain", "tools", "metadata"};
  for (size_t i = 0; i < sizeof keep / sizeof keep[0]; i++) {
    cJSON *v = cJSON_DetachItemFromObjectCaseSensitive(row, keep[i]);
    if (v) cJSON_AddItemToObject(spec, keep[i], v);
  }
  return spec;
}

static int dataset_sample(void *st, uint64_t index, int eval, cJSON **spec) {
  dataset_t *d = st;
  if (eval && !d->eval.n)
    return lt_error_set(LT_EUNSUPP, "envs.%s: no held-out set to evaluate on (set params.eval)", d->domain);
  lt__rows_t *s = eval ? &d->eval : &d->train;
  /* Evaluation goes through the held-out file in order, the same rows every round. */
  uint32_t row;
  int64_t epoch;
  cJSON *r = NULL;
  int rc = lt__rows_pick(s, index, eval, &row, &epoch);
  if (rc == 0) rc = lt__rows_read(s, row, &r);
  if (rc < 0) return lt_error_wrap(rc, "envs.%s", d->domain);
  *spec = row_spec(d, r, row, epoch);
  cJSON_Delete(r);
  return *spec ? 0 : lt_error_set(LT_ENOMEM, "dataset: out of memory");
}

/* With tools, the built-in ChatML prompt lists their schemas in the system message. */
static int add_tools(cJSON *msgs, const cJSON *tools) {
  char *list = cJSON_PrintUnformatted(tools);
  if (!list) return LT_ENOMEM;
  cJSON *first = msgs->child, *sys = strcmp(get(first, "role")->valuestring, "system") ? NULL : first;
  const char *before = sys ? get(sys, "content")->valuestring : "";
  size_t n = strlen(before) + strlen(list) + 64;
  char *text = malloc(n);
  if (text) snprintf(text, n, "%s%sYou can call these tools:\n%s", before, before[0] ? "\n\n" : "", list);
  free(list);
  if (!text) return LT_ENOMEM;
  if (sys) {
    cJSON_ReplaceItemInObjectCaseSensitive(sys, "content", cJSON_CreateString(text));
  } else {
    cJSON *s = cJSON_CreateObject();
    cJSON_AddStringToObject(s, "role", "system");
    cJSON_AddStringToObject(s, "content", text);
    cJSON_InsertItemInArray(msgs, 0, s);
  }
  free(text);
  return 0;
}

/* A spec is peer input (it arrives in a TASK): checked before use. */
static int dataset_open(void *st, lt_episode_t *ep, const cJSON *spec, uint64_t seed, cJSON **messages) {
  dataset_t *d = st;
  const cJSON *m = get(spec, "messages"), *a = get(spec, "answer"), *tools = get(spec, "tools");
  const char *why = messages_problem(m);
  if (!why && !cJSON_IsString(a)) why = "no \"answer\" string";
  if (!why && tools && !cJSON_IsArray(tools)) why = "\"tools\" is not an array";
  if (why) return lt_error_set(LT_EINVAL, "envs.%s: malformed dataset spec: %s", d->domain, why);
  *messages = cJSON_Duplicate(m, 1);
  ep->reference = cJSON_CreateObject();
  if (!*messages || !ep->reference || !cJSON_AddStringToObject(ep->reference, "answer", a->valuestring) ||
      (tools && cJSON_GetArraySize(tools) > 0 && add_tools(*messages, tools) < 0))
    return lt_error_set(LT_ENOMEM, "dataset: out of memory");
  return 0;
}

const lt_env_impl_t lt__env_dataset = {
    .type = "dataset",
    .init = dataset_init,
    .free = dataset_free,
    .sample = dataset_sample,
    .open = dataset_open,
    .step = lt__step_single_turn,
};
