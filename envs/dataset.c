/* dataset: prompts and reference answers from JSON-lines files (docs/envs.md).
 *
 *   {"prompt": "What is 2+3?", "answer": "5"}
 *   {"messages": [{"role": "user", "content": "..."}], "answer": "5", "id": "q1", "metadata": {...}}
 *
 * Every row is checked when the run starts (a bad one is an error naming
 * file:line); afterwards only an index of line offsets stays in memory and
 * rows are read back when sampled, so a file of millions of rows costs 8 bytes
 * a row.  Training index i is row perm_e[i mod n] of epoch e = i / n, with a
 * fresh permutation per epoch drawn from the run seed: without replacement
 * within an epoch.  The daemon derives i from the prompts already in the
 * buffer, so a resumed run continues the same epoch.  The task spec carries
 * the whole row, so workers need no copy of the file. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "envs/internal.h"
#include "util/error.h"
#include "util/json.h"
#include "util/rng.h"

typedef struct {
  char *path;
  int fd;       /* rows are read back with pread: no shared file position */
  int64_t *off; /* byte offset of each row's line; off[n] is where the last one ends */
  uint32_t n;
} split_t;

typedef struct {
  char domain[64];
  split_t train, eval;
  char *system;
  uint64_t seed;
  pthread_mutex_t mu; /* the cached permutation */
  uint32_t *perm;     /* the permutation of epoch perm_epoch */
  int64_t perm_epoch;
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
    if (strcmp(role->valuestring, "system") && strcmp(role->valuestring, "user") && strcmp(role->valuestring, "assistant"))
      return "a message's role must be system, user or assistant";
    last = x;
  }
  return strcmp(get(last, "role")->valuestring, "user") ? "the last message must be the user's" : NULL;
}

/* What is wrong with a row, or NULL. */
static const char *row_problem(const cJSON *r) {
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

static void split_close(split_t *s) {
  if (s->fd >= 0) close(s->fd);
  free(s->off);
  free(s->path);
  memset(s, 0, sizeof *s);
  s->fd = -1;
}

/* Checks every row of `path` and indexes where each starts. */
static int split_open(const char *domain, const char *key, const char *path, split_t *s) {
  memset(s, 0, sizeof *s);
  s->fd = -1;
  if (!strcmp(path, "-")) return lt_error_set(LT_ECONFIG, "envs.%s.params.%s: expected a file, not stdin", domain, key);
  if (!(s->path = strdup(path))) return lt_error_set(LT_ENOMEM, "dataset: out of memory");
  lt_jsonl_t rd;
  if (lt_jsonl_open(&rd, s->path) < 0) return lt_error_wrap(LT_ECONFIG, "envs.%s.params.%s", domain, key);
  size_t cap = 0;
  int rc = 0;
  for (;;) {
    int64_t at = ftello(rd.f);
    cJSON *row;
    if ((rc = lt_jsonl_next(&rd, &row)) <= 0) {
      if (rc < 0) lt_error_wrap(rc, "envs.%s", domain);
      break;
    }
    const char *why = row_problem(row);
    cJSON_Delete(row);
    if (why) {
      rc = lt_error_set(LT_EINVAL, "envs.%s: %s:%ld: %s", domain, path, rd.lineno, why);
      break;
    }
    if (s->n + 2 > cap) {
      if (s->n >= UINT32_MAX - 2) {
        rc = lt_error_set(LT_ERANGE, "envs.%s: %s: more than 2^32-3 rows", domain, path);
        break;
      }
      cap = cap ? 2 * cap : 1024;
      int64_t *o = realloc(s->off, cap * sizeof *o);
      if (!o) {
        rc = lt_error_set(LT_ENOMEM, "dataset: out of memory indexing %s", path);
        break;
      }
      s->off = o;
    }
    s->off[s->n++] = at;
    s->off[s->n] = ftello(rd.f);
  }
  lt_jsonl_close(&rd);
  if (rc < 0) return rc;
  if (s->n == 0) return lt_error_set(LT_EINVAL, "envs.%s.params.%s: %s has no rows", domain, key, path);
  if ((s->fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
    return lt_error_set(LT_ECONFIG, "envs.%s.params.%s: %s: %s", domain, key, path, strerror(errno));
  return 0;
}

static void dataset_free(void *st) {
  dataset_t *d = st;
  if (!d) return;
  split_close(&d->train);
  split_close(&d->eval);
  free(d->system);
  free(d->perm);
  pthread_mutex_destroy(&d->mu);
  free(d);
}

static int dataset_init(const char *dom, const cJSON *p, uint64_t seed, void **state) {
  for (const cJSON *c = p->child; c; c = c->next)
    if (strcmp(c->string, "train") && strcmp(c->string, "eval") && strcmp(c->string, "system"))
      return lt_error_set(LT_ECONFIG, "envs.%s.params.%s: unknown key (dataset takes train, eval, system)", dom, c->string);
  const cJSON *tr = get(p, "train"), *ev = get(p, "eval"), *sys = get(p, "system");
  if (!cJSON_IsString(tr)) return lt_error_set(LT_ECONFIG, "envs.%s.params.train: expected the path of a .jsonl file", dom);
  if (ev && !cJSON_IsString(ev)) return lt_error_set(LT_ECONFIG, "envs.%s.params.eval: expected the path of a .jsonl file", dom);
  if (sys && !cJSON_IsString(sys)) return lt_error_set(LT_ECONFIG, "envs.%s.params.system: expected string", dom);
  dataset_t *d = calloc(1, sizeof *d);
  if (!d) return lt_error_set(LT_ENOMEM, "dataset: out of memory");
  pthread_mutex_init(&d->mu, NULL);
  snprintf(d->domain, sizeof d->domain, "%s", dom);
  d->seed = seed;
  d->perm_epoch = -1;
  d->train.fd = d->eval.fd = -1;
  int rc = split_open(dom, "train", tr->valuestring, &d->train);
  if (rc == 0 && ev) rc = split_open(dom, "eval", ev->valuestring, &d->eval);
  if (rc == 0 && sys && !(d->system = strdup(sys->valuestring))) rc = lt_error_set(LT_ENOMEM, "dataset: out of memory");
  if (rc < 0) {
    dataset_free(d);
    return rc;
  }
  *state = d;
  return 0;
}

/* Row `pos` of epoch `epoch`: a Fisher–Yates shuffle seeded by (run seed, epoch), kept for the current epoch. */
static int train_row(dataset_t *d, int64_t epoch, uint32_t pos, uint32_t *row) {
  if (d->perm_epoch != epoch) {
    if (!d->perm && !(d->perm = malloc(d->train.n * sizeof *d->perm)))
      return lt_error_set(LT_ENOMEM, "dataset: out of memory");
    for (uint32_t i = 0; i < d->train.n; i++) d->perm[i] = i;
    lt_rng_t r;
    lt_rng_seed(&r, lt_rng_mix(d->seed, (uint64_t)epoch));
    for (uint32_t i = d->train.n - 1; i > 0; i--) {
      uint32_t j = (uint32_t)lt_rng_below(&r, (uint64_t)i + 1), t = d->perm[i];
      d->perm[i] = d->perm[j];
      d->perm[j] = t;
    }
    d->perm_epoch = epoch;
  }
  *row = d->perm[pos];
  return 0;
}

static int read_row(split_t *s, uint32_t row, cJSON **out) {
  size_t len = (size_t)(s->off[row + 1] - s->off[row]);
  char *text = malloc(len + 1);
  if (!text) return lt_error_set(LT_ENOMEM, "dataset: out of memory");
  ssize_t got = pread(s->fd, text, len, s->off[row]);
  int rc = got == (ssize_t)len ? lt_json_parse(text, len, s->path, out) : LT_EIO;
  free(text);
  if (rc == 0 && row_problem(*out)) {
    cJSON_Delete(*out);
    rc = LT_EIO;
  }
  if (rc < 0) return lt_error_set(LT_EIO, "%s: row %u changed since the start of the run", s->path, row + 1);
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
  split_t *s = eval ? &d->eval : &d->train;
  pthread_mutex_lock(&d->mu);
  /* Evaluation goes through the held-out file in order, the same rows every round. */
  int64_t epoch = eval ? -1 : (int64_t)(index / s->n);
  uint32_t row = (uint32_t)(index % s->n);
  int rc = eval ? 0 : train_row(d, epoch, row, &row);
  pthread_mutex_unlock(&d->mu);
  cJSON *r = NULL;
  if (rc == 0) rc = read_row(s, row, &r);
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
