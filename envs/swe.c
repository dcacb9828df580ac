/* The `swe` environment (docs/envs.md, "`swe`"): a repository inside an image per task, a fresh copy-on-write
 * root (a box) per episode, shell and file tools acting inside it, and hidden tests in another fresh root as the
 * verdict when the episode ends.
 *
 * Tasks are JSON-lines rows in SWE-bench's fields (envs/swe_task.c), sampled like the dataset environment's
 * (envs/rows.c); the spec carries the whole row and the tools' function schemas.  Opening takes a box from the
 * image's warm pool (the image opened into the cache on first use); steps run the tools (envs/swe_tools.c, the
 * persistent shell of envs/swe_shell.c); the end takes the episode's diff and judges it (envs/swe_judge.c).
 * Everything here blocks: open, step and end run on the thread pool. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "envs/internal.h"
#include "util/buf.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/json.h"
#include "util/rng.h"

typedef struct {
  char domain[64];
  lt__rows_t train, eval;
  char *image, *test_cmd, *system, *base_dir;
  lt__swe_defaults_t dflt;
  unsigned tools;
  int max_turns;
  double tool_timeout_s, test_timeout_s;
  size_t output_bytes;
  lt_tool_format fmt;
  pthread_mutex_t mu;       /* images */
  lt__swe_images_t *images; /* made by the first open (only workers open) */
  int agent;                /* an agent domain's: its boxes reach the gateway (lt__swe_agent_mode) */
  lt_envs_t *envs;          /* the registry: its sandbox settings (attach) */
  cJSON *demos;             /* params.demos: [{"row": training row, "turns": [...]}] */
  uint64_t seed;
  cJSON *demo_cache; /* instance_id -> [messages, response]: a gold patch is played once per task */
} swe_state_t;

typedef struct {
  swe_state_t *s; /* (ep->state is an agent domain's own when it delegates here) */
  cJSON *row;     /* the spec, which task points into */
  lt__swe_task_t task;
  char *image;
  lt__swe_ctx_t ctx;
  lt_box_proc_t *prog; /* an agent program in the root (lt_episode_program) */
} swe_ep_t;

static const cJSON *get(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }

static void swe_free(void *st) {
  swe_state_t *s = st;
  if (!s) return;
  lt__rows_close(&s->train);
  lt__rows_close(&s->eval);
  lt__swe_images_free(s->images);
  pthread_mutex_destroy(&s->mu);
  cJSON_Delete(s->demos);
  cJSON_Delete(s->demo_cache);
  free(s->image), free(s->test_cmd), free(s->system), free(s->base_dir);
  free(s);
}

static int num_param(const char *dom, const cJSON *p, const char *key, double lo, double hi, double dflt, double *out) {
  const cJSON *v = get(p, key);
  *out = v ? v->valuedouble : dflt;
  if (v && (!cJSON_IsNumber(v) || !(v->valuedouble > lo) || v->valuedouble > hi))
    return lt_error_set(LT_ECONFIG, "envs.%s.params.%s: expected a number in (%g, %g]", dom, key, lo, hi);
  return 0;
}

static int str_param(const char *dom, const cJSON *p, const char *key, char **out) {
  const cJSON *v = get(p, key);
  if (!v) return 0;
  if (!cJSON_IsString(v) || !v->valuestring[0])
    return lt_error_set(LT_ECONFIG, "envs.%s.params.%s: expected a non-empty string", dom, key);
  return (*out = strdup(v->valuestring)) ? 0 : lt_error_set(LT_ENOMEM, "swe: out of memory");
}

static int tools_param(const char *dom, const cJSON *p, unsigned *tools) {
  const cJSON *v = get(p, "tools");
  *tools = (1u << LT__SWE_NTOOLS) - 1;
  if (!v) return 0;
  *tools = 0;
  if (!cJSON_IsArray(v) || !v->child)
    return lt_error_set(LT_ECONFIG, "envs.%s.params.tools: expected a non-empty list of \"bash\", \"view\", \"edit\"",
                        dom);
  for (const cJSON *t = v->child; t; t = t->next) {
    int i = cJSON_IsString(t) ? lt__swe_tool_index(t->valuestring) : -1;
    if (i < 0)
      return lt_error_set(LT_ECONFIG, "envs.%s.params.tools: %s is not a tool (bash, view, edit)", dom,
                          cJSON_IsString(t) ? t->valuestring : "a non-string");
    *tools |= 1u << i;
  }
  return 0;
}

/* params.demos: {"instance_id": a training task's, "turns": [assistant, tool, ..., assistant]} per line (other keys
 * ignored), each checked here naming file:line, kept as {"row", "turns"}. */
static int demos_load(const swe_state_t *s, const char *path, cJSON **out) {
  cJSON *ids = cJSON_CreateObject(), *all = cJSON_CreateArray(), *d = NULL;
  int rc = ids && all ? 0 : lt_error_set(LT_ENOMEM, "swe: out of memory");
  for (uint32_t i = 0; rc == 0 && i < s->train.n; i++) { /* instance_id -> training row */
    cJSON *r = NULL;
    if ((rc = lt__rows_read(&s->train, i, &r)) == 0 &&
        !cJSON_AddNumberToObject(ids, get(r, "instance_id")->valuestring, i))
      rc = lt_error_set(LT_ENOMEM, "swe: out of memory");
    cJSON_Delete(r);
  }
  lt_jsonl_t rd;
  int opened = rc == 0 && (rc = lt_jsonl_open(&rd, path)) == 0;
  if (rc < 0 && !opened && ids && all) lt_error_wrap(rc, "envs.%s.params.demos", s->domain);
  while (opened && (rc = lt_jsonl_next(&rd, &d)) == 1) {
    const cJSON *id = get(d, "instance_id"), *turns = get(d, "turns"),
                *row = cJSON_IsString(id) ? get(ids, id->valuestring) : NULL;
    int n = cJSON_GetArraySize(turns), ok = cJSON_IsArray(turns) && n % 2 == 1;
    for (const cJSON *t = ok ? turns->child : NULL; t; t = t->next) ok &= cJSON_IsString(t);
    cJSON *e = row && ok ? cJSON_CreateObject() : NULL;
    if (!row || !ok)
      rc = lt_error_set(LT_ECONFIG, "envs.%s.params.demos: %s:%ld: %s", s->domain, path, rd.lineno,
                        !row ? "\"instance_id\": not a training task's"
                             : "\"turns\": expected an odd-length list of strings "
                               "(assistant, tool, ..., assistant)");
    else if (!e || !cJSON_AddNumberToObject(e, "row", row->valuedouble) ||
             !cJSON_AddItemToObject(e, "turns", cJSON_DetachItemFromObjectCaseSensitive(d, "turns")) ||
             !cJSON_AddItemToArray(all, e))
      rc = lt_error_set(LT_ENOMEM, "swe: out of memory");
    else e = NULL;
    cJSON_Delete(e);
    cJSON_Delete(d);
    if (rc < 0) break;
  }
  if (opened) lt_jsonl_close(&rd);
  if (rc == 0 && !all->child)
    rc = lt_error_set(LT_ECONFIG, "envs.%s.params.demos: %s holds no demonstration", s->domain, path);
  cJSON_Delete(ids);
  if (rc < 0) {
    cJSON_Delete(all);
    return rc;
  }
  *out = all;
  return 0;
}

static int swe_init(const char *dom, const cJSON *p, uint64_t seed, void **state) {
  static const char *const keys[] = {"tasks",        "eval",        "image",          "test_cmd",
                                     "tools",        "max_turns",   "tool_timeout_s", "test_timeout_s",
                                     "output_bytes", "tool_format", "system",         "demos"};
  for (const cJSON *c = p->child; c; c = c->next) {
    size_t i = 0;
    while (i < sizeof keys / sizeof keys[0] && strcmp(keys[i], c->string)) i++;
    if (i == sizeof keys / sizeof keys[0])
      return lt_error_set(LT_ECONFIG,
                          "envs.%s.params.%s: unknown key (swe takes tasks, eval, image, test_cmd, tools, "
                          "max_turns, tool_timeout_s, test_timeout_s, output_bytes, tool_format, system, "
                          "demos)",
                          dom, c->string);
  }
  const cJSON *tasks = get(p, "tasks"), *ev = get(p, "eval"), *fmt = get(p, "tool_format"), *demos = get(p, "demos");
  if (!cJSON_IsString(tasks))
    return lt_error_set(LT_ECONFIG, "envs.%s.params.tasks: expected the path of a .jsonl file", dom);
  if (ev && !cJSON_IsString(ev))
    return lt_error_set(LT_ECONFIG, "envs.%s.params.eval: expected the path of a .jsonl file", dom);
  if (demos && !cJSON_IsString(demos))
    return lt_error_set(LT_ECONFIG, "envs.%s.params.demos: expected the path of a .jsonl file", dom);
  swe_state_t *s = calloc(1, sizeof *s);
  if (!s) return lt_error_set(LT_ENOMEM, "swe: out of memory");
  pthread_mutex_init(&s->mu, NULL);
  snprintf(s->domain, sizeof s->domain, "%s", dom);
  s->seed = seed;
  s->train.fd = s->eval.fd = -1;
  double mt = 0, ob = 8192;
  int rc = num_param(dom, p, "tool_timeout_s", 0, 86400, 30, &s->tool_timeout_s);
  if (rc == 0) rc = num_param(dom, p, "test_timeout_s", 0, 86400, 60, &s->test_timeout_s);
  if (rc == 0) rc = num_param(dom, p, "max_turns", 0, 1 << 20, 0, &mt);
  if (rc == 0) rc = num_param(dom, p, "output_bytes", 255, 1 << 24, 8192, &ob);
  if (rc == 0 && mt != (int)mt) rc = lt_error_set(LT_ECONFIG, "envs.%s.params.max_turns: expected an integer", dom);
  s->max_turns = (int)mt;
  s->output_bytes = (size_t)ob;
  if (rc == 0) rc = tools_param(dom, p, &s->tools);
  if (rc == 0) rc = str_param(dom, p, "image", &s->image);
  if (rc == 0) rc = str_param(dom, p, "test_cmd", &s->test_cmd);
  if (rc == 0) rc = str_param(dom, p, "system", &s->system);
  if (rc == 0 && s->test_cmd && !strstr(s->test_cmd, "{test}"))
    rc = lt_error_set(LT_ECONFIG, "envs.%s.params.test_cmd: must hold {test}, where each test id goes", dom);
  s->fmt = LT_TOOLFMT_XML;
  if (rc == 0 && fmt && (!cJSON_IsString(fmt) || lt_toolcall_format_parse(fmt->valuestring, &s->fmt) < 0))
    rc = lt_error_set(LT_ECONFIG, "envs.%s.params.tool_format: expected xml, qwen or deepseek", dom);
  if (rc == 0 && !(s->base_dir = lt__swe_base_dir(tasks->valuestring)))
    rc = lt_error_set(LT_ENOMEM, "swe: out of memory");
  s->dflt = (lt__swe_defaults_t){s->image, s->test_cmd};
  char ctx[96], key[128];
  snprintf(ctx, sizeof ctx, "envs.%s", dom);
  snprintf(key, sizeof key, "envs.%s.params.tasks", dom);
  if (rc == 0) rc = lt__rows_open(ctx, key, tasks->valuestring, lt__swe_row_check, &s->dflt, seed, &s->train);
  snprintf(key, sizeof key, "envs.%s.params.eval", dom);
  if (rc == 0 && ev) rc = lt__rows_open(ctx, key, ev->valuestring, lt__swe_row_check, &s->dflt, seed, &s->eval);
  if (rc == 0 && demos) rc = demos_load(s, demos->valuestring, &s->demos);
  if (rc < 0) {
    swe_free(s);
    return rc;
  }
  *state = s;
  return 0;
}

static int swe_sample(void *st, uint64_t index, int eval, cJSON **spec) {
  swe_state_t *s = st;
  if (eval && !s->eval.n)
    return lt_error_set(LT_EUNSUPP, "envs.%s: no held-out tasks to evaluate on (set params.eval)", s->domain);
  lt__rows_t *rows = eval ? &s->eval : &s->train;
  uint32_t row;
  int64_t epoch;
  cJSON *r = NULL;
  int rc = lt__rows_pick(rows, index, eval, &row, &epoch);
  if (rc == 0) rc = lt__rows_read(rows, row, &r);
  if (rc < 0) return lt_error_wrap(rc, "envs.%s", s->domain);
  cJSON_DeleteItemFromObjectCaseSensitive(r, "row");
  cJSON_DeleteItemFromObjectCaseSensitive(r, "epoch");
  cJSON_DeleteItemFromObjectCaseSensitive(r, "tools");
  cJSON_AddNumberToObject(r, "row", row + 1);
  if (epoch >= 0) cJSON_AddNumberToObject(r, "epoch", (double)epoch);
  cJSON *tools = lt__swe_tool_schemas(s->tools, s->tool_timeout_s);
  if (!tools || !cJSON_AddItemToObject(r, "tools", tools)) {
    cJSON_Delete(tools);
    cJSON_Delete(r);
    return lt_error_set(LT_ENOMEM, "swe: out of memory");
  }
  *spec = r;
  return 0;
}

/* The opening chat: the system message (the tools and how to call them), the issue as the user's. */
static cJSON *opening(const swe_state_t *s, const lt__swe_task_t *t) {
  lt_buf_t b = {0};
  lt_buf_printf(&b,
                "%s\nThe repository is at %s, inside a container: solve the issue the user describes by changing "
                "its files. Hidden tests judge your changes when you are done.\n\nTools:\n",
                s->system ? s->system : "You are a software engineer.", t->repo_dir);
  if (s->tools & 1)
    lt_buf_printf(&b,
                  "- bash(command): runs a command in a persistent shell started in %s (the working directory and "
                  "variables persist); %g seconds per call; long output is cut in the middle.\n",
                  t->repo_dir, s->tool_timeout_s);
  if (s->tools & 2)
    lt_buf_puts(&b,
                "- view(path, view_range): shows a file with line numbers (view_range [start, end], end -1 for the "
                "last line), or lists a directory.\n");
  if (s->tools & 4)
    lt_buf_puts(
        &b,
        "- edit(path, old_str, new_str): replaces old_str, which must occur exactly once, with new_str; "
        "edit(path, file_text) creates a file; edit(path, insert_line, new_str) inserts new_str after that line.\n");
  /* The call format, written by text/ as the policy is to write it. */
  cJSON *ex = cJSON_Parse(s->tools & 1 ? "[{\"function\": {\"name\": \"bash\", \"arguments\": {\"command\": \"ls\"}}}]"
                          : s->tools & 2 ? "[{\"function\": {\"name\": \"view\", \"arguments\": {\"path\": \".\"}}}]"
                                         : "[{\"function\": {\"name\": \"edit\", \"arguments\": {\"path\": \"a.py\", "
                                           "\"old_str\": \"x - 1\", \"new_str\": \"x\"}}}]");
  lt_buf_puts(&b, "\nCall a tool like this: ");
  if (ex) lt_toolcall_write(s->fmt, ex, &b);
  cJSON_Delete(ex);
  lt_buf_puts(&b, "\nWhen you are done, reply without a tool call.");
  cJSON *m = cJSON_CreateArray(), *sys = cJSON_CreateObject(), *user = cJSON_CreateObject();
  cJSON_AddStringToObject(sys, "role", "system");
  cJSON_AddStringToObject(sys, "content", b.data ? b.data : "");
  cJSON_AddStringToObject(user, "role", "user");
  cJSON_AddStringToObject(user, "content", t->problem_statement);
  cJSON_AddItemToArray(m, sys);
  cJSON_AddItemToArray(m, user);
  int ok = lt_buf_ok(&b) == 0;
  lt_buf_free(&b);
  if (!ok) {
    cJSON_Delete(m);
    return NULL;
  }
  return m;
}

/* A demonstration of params.demos (drawn by index from the run's seed): the task's real opening chat, then the
 * demonstration's turns, its last assistant turn the response. */
static int demo_of_file(swe_state_t *s, uint64_t index, cJSON **messages, char **response) {
  const cJSON *d =
      cJSON_GetArrayItem(s->demos, (int)(lt_rng_mix(s->seed ^ 0xde30, index) % (uint64_t)cJSON_GetArraySize(s->demos)));
  cJSON *r = NULL;
  lt__swe_task_t t;
  char why[512];
  int rc = lt__rows_read(&s->train, (uint32_t)get(d, "row")->valueint, &r);
  if (rc == 0 && lt__swe_task_parse(r, &s->dflt, &t, why, sizeof why) < 0)
    rc = lt_error_set(LT_EINVAL, "envs.%s: %s", s->domain, why);
  else if (rc == 0) {
    *messages = opening(s, &t);
    const cJSON *turn = get(d, "turns")->child;
    for (int k = 0; *messages && turn->next; turn = turn->next, k++) {
      cJSON *m = cJSON_CreateObject();
      if (!m || !cJSON_AddStringToObject(m, "role", k % 2 ? "tool" : "assistant") ||
          !cJSON_AddStringToObject(m, "content", turn->valuestring) || !cJSON_AddItemToArray(*messages, m)) {
        cJSON_Delete(m);
        cJSON_Delete(*messages);
        *messages = NULL;
      }
    }
    *response = *messages ? strdup(turn->valuestring) : NULL;
    if (!*response) rc = lt_error_set(LT_ENOMEM, "swe: out of memory");
    lt__swe_task_free(&t);
  }
  cJSON_Delete(r);
  if (rc < 0 && *messages) {
    cJSON_Delete(*messages);
    *messages = NULL;
  }
  return rc;
}

/* The domain's images, made on the first open with the sandbox section's limits, stretched to the longest
 * command a box runs (its CPU limit follows its default deadline). */
static int swe_images(swe_state_t *s, lt__swe_images_t **out) {
  pthread_mutex_lock(&s->mu);
  int rc = 0;
  if (!s->images) {
    int pool, port;
    const char *cache;
    lt_sandbox_limits_t l = *lt__envs_boxes(s->envs, &pool, &cache, &port);
    if (l.timeout_s < s->tool_timeout_s) l.timeout_s = s->tool_timeout_s;
    if (l.timeout_s < s->test_timeout_s) l.timeout_s = s->test_timeout_s;
    if (s->agent && port <= 0)
      rc = lt_error_set(LT_EINVAL, "envs.%s: an agent program in an image needs the worker's gateway", s->domain);
    if (s->agent) l.port = port; /* its one network path (the judge's boxes come from the same pool) */
    if (rc == 0) rc = lt__swe_images_create(cache, &l, pool, &s->images);
  }
  *out = s->images;
  pthread_mutex_unlock(&s->mu);
  return rc;
}

static void ep_box_free(swe_ep_t *e) {
  lt_box_proc_free(e->prog);
  e->prog = NULL;
  lt__swe_shell_free(e->ctx.shell);
  e->ctx.shell = NULL;
  if (e->ctx.box) lt_box_destroy(e->ctx.box);
  e->ctx.box = NULL;
}

static void ep_free(swe_ep_t *e);

static void swe_close(lt_episode_t *ep) {
  ep_free(ep->data);
  ep->data = NULL;
}

/* The episode's task from its spec (a copy kept in e->row) and its box. */
static int ep_root(swe_state_t *s, swe_ep_t *e) {
  char why[512];
  e->s = s;
  if (lt__swe_task_parse(e->row, &s->dflt, &e->task, why, sizeof why) < 0)
    return lt_error_set(LT_EINVAL, "envs.%s: malformed swe spec: %s", s->domain, why);
  if (!(e->image = lt__swe_image_ref(e->task.image, s->base_dir))) return lt_error_set(LT_ENOMEM, "swe: out of memory");
  e->task.image = e->image;
  lt__swe_images_t *im;
  int rc = swe_images(s, &im);
  if (rc == 0) rc = lt__swe_box(im, e->task.image, &e->ctx.box);
  if (rc < 0) return lt_error_wrap(rc, "envs.%s: %s", s->domain, e->task.instance_id);
  e->ctx = (lt__swe_ctx_t){.box = e->ctx.box,
                           .repo_dir = e->task.repo_dir,
                           .tool_timeout_s = s->tool_timeout_s,
                           .output_bytes = s->output_bytes,
                           .tools = s->tools};
  return 0;
}

static void ep_free(swe_ep_t *e) {
  if (!e) return;
  ep_box_free(e);
  lt__swe_task_free(&e->task);
  cJSON_Delete(e->row);
  free(e->image);
  free(e);
}

/* A spec is peer input (it arrives in a TASK): checked again here. */
static int swe_open(void *st, lt_episode_t *ep, const cJSON *spec, uint64_t seed, cJSON **messages) {
  swe_state_t *s = st;
  swe_ep_t *e = calloc(1, sizeof *e);
  if (!e || !(e->row = cJSON_Duplicate(spec, 1))) {
    free(e);
    return lt_error_set(LT_ENOMEM, "swe: out of memory");
  }
  ep->data = e;
  int rc = ep_root(s, e);
  if (rc < 0) return rc;
  ep->judged = 1;
  /* Not resolved until judged: an episode cut by a budget is judged too, one that timed out is not. */
  ep->reference = cJSON_CreateObject();
  if (!ep->reference || !cJSON_AddStringToObject(ep->reference, "instance_id", e->task.instance_id) ||
      !cJSON_AddBoolToObject(ep->reference, "success", 0) || !(*messages = opening(s, &e->task)))
    return lt_error_set(LT_ENOMEM, "swe: out of memory");
  return 0;
}

static int swe_step(lt_episode_t *ep, const char *text, const lt_tool_call_t *calls, int ncalls, lt_env_step_t *res) {
  swe_ep_t *e = ep->data;
  res->observations = cJSON_CreateArray();
  if (!res->observations) return lt_error_set(LT_ENOMEM, "swe: out of memory");
  if (ncalls == 0) { /* the final reply: the end judges */
    res->done = 1;
    return 0;
  }
  for (int i = 0; i < ncalls; i++) {
    lt_buf_t out = {0};
    int timed_out = 0, rc = lt__swe_tool(&e->ctx, &calls[i], &out, &timed_out);
    cJSON *m = rc == 0 ? cJSON_CreateObject() : NULL;
    if (rc == 0 && (!m || lt_buf_ok(&out) < 0)) rc = lt_error_set(LT_ENOMEM, "swe: out of memory");
    if (rc < 0) {
      cJSON_Delete(m);
      lt_buf_free(&out);
      return rc;
    }
    cJSON_AddStringToObject(m, "role", "tool");
    cJSON_AddStringToObject(m, "name", calls[i].name);
    cJSON_AddStringToObject(m, "content", out.data ? out.data : "");
    cJSON_AddItemToArray(res->observations, m);
    lt_buf_free(&out);
    if (timed_out) { /* the policy's failure (rollout.on_timeout): the calls after it do not run */
      res->timeout = "tool_timeout";
      break;
    }
  }
  return 0;
}

static void set_ref(cJSON *ref, const char *key, cJSON *v) {
  cJSON_DeleteItemFromObjectCaseSensitive(ref, key);
  if (v) cJSON_AddItemToObject(ref, key, v);
}

/* The diff of the episode's box, then (score) its verdict from the hidden tests in a fresh box. */
static int swe_end(lt_episode_t *ep, int score) {
  swe_ep_t *e = ep->data;
  if (!e || !e->ctx.box) return 0;
  swe_state_t *s = e->s;
  lt_buf_t diff = {0};
  cJSON *skipped = cJSON_CreateArray(), *r = NULL;
  int rc = skipped ? lt__swe_diff(e->ctx.box, e->task.repo_dir, &diff, skipped)
                   : lt_error_set(LT_ENOMEM, "swe: out of memory");
  ep_box_free(e); /* the judge has its own: one box fewer while the tests run */
  if (rc == 0 && lt_buf_ok(&diff) < 0) rc = lt_error_set(LT_ENOMEM, "swe: out of memory");
  if (rc == 0) {
    set_ref(ep->reference, "diff", cJSON_CreateString(diff.data ? diff.data : ""));
    set_ref(ep->reference, "diff_skipped", skipped->child ? skipped : NULL);
    if (skipped->child) skipped = NULL;
  }
  if (rc == 0 && score) rc = lt__swe_judge(s->images, &e->task, diff.data, s->test_timeout_s, &r);
  if (rc == 0 && r) {
    const cJSON *res = get(r, "resolved");
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "fail_to_pass", get(r, "fail_to_pass")->valuedouble);
    cJSON_AddNumberToObject(c, "pass_to_pass", get(r, "pass_to_pass")->valuedouble);
    cJSON_AddNumberToObject(c, "resolved", cJSON_IsTrue(res));
    set_ref(ep->reference, "success", cJSON_CreateBool(cJSON_IsTrue(res)));
    set_ref(ep->reference, "components", c);
    set_ref(ep->reference, "applied", cJSON_Duplicate(get(r, "applied"), 1));
    set_ref(ep->reference, "tests", cJSON_DetachItemFromObjectCaseSensitive(r, "tests"));
    if (get(r, "error")) set_ref(ep->reference, "apply_error", cJSON_DetachItemFromObjectCaseSensitive(r, "error"));
  }
  cJSON_Delete(r);
  cJSON_Delete(skipped);
  lt_buf_free(&diff);
  if (rc < 0) return lt_error_wrap(rc, "envs.%s: %s", s->domain, e->task.instance_id);
  return 0;
}

static int swe_max_turns(void *st) { return ((swe_state_t *)st)->max_turns; }

static void swe_attach(void *st, lt_envs_t *envs) { ((swe_state_t *)st)->envs = envs; }

/* ---- demonstrations: the gold patch played with the tools in a real root ---- */

static int count_in(const char *s, size_t n, const char *needle, size_t k) {
  int c = 0;
  for (const char *q = memmem(s, n, needle, k); q; q = memmem(q + 1, n - (size_t)(q + 1 - s), needle, k)) c++;
  return c;
}

/* Line starts of s (n lines; at[n] = len). */
static size_t *line_starts(const char *s, size_t len, int *n) {
  size_t *at = malloc(sizeof *at * (len + 2));
  int k = 0;
  if (!at) return NULL;
  for (size_t i = 0; i < len; k++) {
    at[k] = i;
    const char *nl = memchr(s + i, '\n', len - i);
    i = nl ? (size_t)(nl - s) + 1 : len;
  }
  at[k] = len;
  *n = k;
  return at;
}

/* The one edit from old to new: the lines that differ, widened by whole lines of context until old_str occurs once
 * in old (as the tool requires); 0, or LT_EUNSUPP where none can (an empty file). */
static int edit_strings(const char *old, size_t olen, const char *new, size_t nlen, lt_buf_t *o, lt_buf_t *n) {
  int no, nn, rc = LT_EUNSUPP;
  size_t *ao = line_starts(old, olen, &no), *an = line_starts(new, nlen, &nn);
  if (!ao || !an) {
    free(ao), free(an);
    return lt_error_set(LT_ENOMEM, "swe: out of memory");
  }
  int p = 0, q = 0; /* common leading and trailing lines */
  while (p < no && p < nn && ao[p + 1] - ao[p] == an[p + 1] - an[p] &&
         !memcmp(old + ao[p], new + an[p], ao[p + 1] - ao[p]))
    p++;
  while (q < no - p && q < nn - p && ao[no - q] - ao[no - q - 1] == an[nn - q] - an[nn - q - 1] &&
         !memcmp(old + ao[no - q - 1], new + an[nn - q - 1], ao[no - q] - ao[no - q - 1]))
    q++;
  for (int a = p, b = no - q, grow = 0; a >= 0 && b <= no; grow++) {
    size_t k = ao[b] - ao[a];
    if (k && count_in(old, olen, old + ao[a], k) == 1) {
      lt_buf_append(o, old + ao[a], k);
      int na = a, nb = nn - (no - b); /* the same context around the new lines */
      lt_buf_append(n, new + an[na], an[nb] - an[na]);
      rc = 0;
      break;
    }
    if (a == 0 && b == no) break;
    if ((grow % 2 == 0 && a > 0) || b == no) a--;
    else b++;
  }
  free(ao), free(an);
  return rc;
}

/* One call of the demonstration, run in the root: the assistant's turn (the call as the policy writes it) and
 * the tool's real answer appended to msgs. */
static int demo_call(swe_ep_t *e, cJSON *msgs, const char *tool, const char *const *kv) {
  lt_tool_arg_t args[4];
  int nargs = 0;
  cJSON *calls = cJSON_CreateArray(), *c = cJSON_CreateObject(), *fn = cJSON_AddObjectToObject(c, "function"),
        *argo = cJSON_CreateObject();
  cJSON_AddStringToObject(fn, "name", tool);
  for (; kv[2 * nargs]; nargs++) {
    args[nargs] = (lt_tool_arg_t){(char *)kv[2 * nargs], (char *)kv[2 * nargs + 1]};
    cJSON_AddStringToObject(argo, kv[2 * nargs], kv[2 * nargs + 1]);
  }
  cJSON_AddItemToObject(fn, "arguments", argo);
  cJSON_AddItemToArray(calls, c);
  lt_buf_t text = {0}, out = {0};
  lt_toolcall_write(e->s->fmt, calls, &text);
  cJSON_Delete(calls);
  lt_tool_call_t call = {(char *)tool, args, nargs};
  int timed_out, rc = lt__swe_tool(&e->ctx, &call, &out, &timed_out);
  if (rc == 0 && (lt_buf_ok(&text) < 0 || lt_buf_ok(&out) < 0)) rc = lt_error_set(LT_ENOMEM, "swe: out of memory");
  if (rc == 0) {
    cJSON *a = cJSON_CreateObject(), *t = cJSON_CreateObject();
    cJSON_AddStringToObject(a, "role", "assistant");
    cJSON_AddStringToObject(a, "content", text.data);
    cJSON_AddStringToObject(t, "role", "tool");
    cJSON_AddStringToObject(t, "name", tool);
    cJSON_AddStringToObject(t, "content", out.data);
    cJSON_AddItemToArray(msgs, a);
    cJSON_AddItemToArray(msgs, t);
  }
  lt_buf_free(&text), lt_buf_free(&out);
  return rc;
}

/* Each file of the gold patch: a new one written with file_text, a deleted or renamed one by the shell, a changed
 * one viewed and then edited once (the lines that differ, with enough context to be unique). */
static int demo_file(swe_ep_t *e, const lt_patch_t *p, int i, cJSON *msgs) {
  const lt_patch_file_t *f = lt_patch_file(p, i);
  lt_buf_t path = {0}, next = {0}, o = {0}, n = {0}, cmd = {0};
  char *old = NULL;
  size_t olen = 0;
  int rc = 0;
  if (f->old_path) {
    lt_buf_printf(&path, "%s/%s", e->task.repo_dir, f->old_path);
    if ((rc = lt_box_read_file(e->ctx.box, path.data, 16u << 20, &old, &olen)) < 0)
      lt_error_wrap(rc, "swe: demonstration");
  }
  if (rc == 0) rc = lt_patch_apply(p, i, old, olen, &next);
  if (rc == 0 && !f->old_path) {
    const char *kv[] = {"path", f->new_path, "file_text", next.data ? next.data : "", NULL};
    rc = demo_call(e, msgs, "edit", kv);
  } else if (rc == 0) {
    const char *view[] = {"path", f->old_path, NULL};
    if (e->s->tools & 2) rc = demo_call(e, msgs, "view", view); /* looked at first where the policy can look */
    int renamed = f->new_path && strcmp(f->old_path, f->new_path);
    if (rc == 0 && (!f->new_path || renamed)) { /* quoted for sh: the names come from the task's own patch */
      lt_buf_printf(&cmd, "%s '%s'", f->new_path ? "mv --" : "rm --", f->old_path);
      if (renamed) lt_buf_printf(&cmd, " '%s'", f->new_path);
      const char *kv[] = {"command", cmd.data, NULL};
      rc = !(e->s->tools & 1) || strchr(f->old_path, '\'') || (f->new_path && strchr(f->new_path, '\''))
               ? LT_EUNSUPP
               : demo_call(e, msgs, "bash", kv);
    }
    if (rc == 0 && f->new_path && (olen != next.len || memcmp(old, next.data, olen)) &&
        (rc = edit_strings(old, olen, next.data ? next.data : "", next.len, &o, &n)) == 0) {
      const char *kv[] = {"path", f->new_path, "old_str", o.data, "new_str", n.data ? n.data : "", NULL};
      rc = demo_call(e, msgs, "edit", kv);
    }
  }
  free(old);
  lt_buf_free(&path), lt_buf_free(&next), lt_buf_free(&o), lt_buf_free(&n), lt_buf_free(&cmd);
  return rc;
}

/* Training task `index` solved by its gold patch, played with the tools in a fresh root so that every answer is
 * the real one (a file viewed first where the policy has view; a deletion or rename by bash); the warm start trains
 * on each call.  A task's demonstration is played once and then copied from demo_cache.  LT_EUNSUPP for a task
 * without a gold patch, or one the domain's tools cannot replay (a binary or mode-only change; no edit tool). */
static int demo_of_gold(swe_state_t *s, uint64_t index, cJSON **messages, char **response) {
  if (!(s->tools & 4)) return lt_error_set(LT_EUNSUPP, "envs.%s: demonstrations need the edit tool", s->domain);
  swe_ep_t *e = calloc(1, sizeof *e);
  cJSON *spec = NULL, *msgs = NULL;
  int rc = e ? swe_sample(s, index, 0, &spec) : lt_error_set(LT_ENOMEM, "swe: out of memory");
  const cJSON *id = rc == 0 ? get(spec, "instance_id") : NULL;
  pthread_mutex_lock(&s->mu);
  const cJSON *hit = cJSON_IsString(id) && s->demo_cache ? get(s->demo_cache, id->valuestring) : NULL;
  if (hit) msgs = cJSON_Duplicate(hit->child, 1), *response = strdup(hit->child->next->valuestring);
  pthread_mutex_unlock(&s->mu);
  if (hit) {
    cJSON_Delete(spec), free(e);
    if (msgs && *response) return *messages = msgs, 0;
    cJSON_Delete(msgs), free(*response), *response = NULL;
    return lt_error_set(LT_ENOMEM, "swe: out of memory");
  }
  if (rc == 0) e->row = spec, spec = NULL, rc = ep_root(s, e);
  lt_patch_t *p = NULL;
  if (rc == 0 && (!e->task.patch || !e->task.patch[0]))
    rc = lt_error_set(LT_EUNSUPP, "envs.%s: %s has no gold patch", s->domain, e->task.instance_id);
  if (rc == 0) rc = lt_patch_parse(e->task.patch, strlen(e->task.patch), &p);
  msgs = rc == 0 ? opening(s, &e->task) : NULL;
  if (rc == 0 && !msgs) rc = lt_error_set(LT_ENOMEM, "swe: out of memory");
  for (int i = 0; rc == 0 && i < lt_patch_nfiles(p); i++) rc = demo_file(e, p, i, msgs);
  lt_patch_free(p);
  if (rc == 0 && !(*response = strdup("I have made the change; the issue should be fixed now.")))
    rc = lt_error_set(LT_ENOMEM, "swe: out of memory");
  if (rc == 0) { /* kept for the next draw of this task (a copy: the caller owns what it gets) */
    cJSON *entry = cJSON_CreateArray();
    pthread_mutex_lock(&s->mu);
    if (!s->demo_cache) s->demo_cache = cJSON_CreateObject();
    if (!entry || !s->demo_cache || !cJSON_AddItemToArray(entry, cJSON_Duplicate(msgs, 1)) ||
        !cJSON_AddItemToArray(entry, cJSON_CreateString(*response)) || !entry->child || !entry->child->next ||
        !cJSON_AddItemToObject(s->demo_cache, e->task.instance_id, entry))
      cJSON_Delete(entry); /* not cached: played again next time */
    pthread_mutex_unlock(&s->mu);
  }
  ep_free(e);
  cJSON_Delete(spec);
  if (rc < 0) {
    cJSON_Delete(msgs);
    free(*response);
    *response = NULL;
    return rc;
  }
  *messages = msgs;
  return 0;
}

/* params.demos when the domain names them, else each training task's gold patch played in a root. */
static int swe_demo(void *st, uint64_t index, cJSON **messages, char **response) {
  swe_state_t *s = st;
  *messages = NULL, *response = NULL;
  return s->demos ? demo_of_file(s, index, messages, response) : demo_of_gold(s, index, messages, response);
}

void lt__swe_agent_mode(void *st) { ((swe_state_t *)st)->agent = 1; }

/* The episode's data when it has a root (a swe episode, or an agent domain's with an image). */
static swe_ep_t *rooted(lt_episode_t *ep) {
  const lt_env_impl_t *impl = lt__episode_impl(ep);
  int ok = impl == &lt__env_swe || (impl == &lt__env_agent && lt__agent_params(ep->state)->image);
  swe_ep_t *e = ok ? ep->data : NULL;
  return e && e->ctx.box ? e : NULL;
}

int lt_episode_program(lt_episode_t *ep, char *const *argv, const char *const *env, int fds[3]) {
  swe_ep_t *e = rooted(ep);
  if (!e) return lt_error_set(LT_EUNSUPP, "this episode has no root to run a program in");
  if (e->prog) return lt_error_set(LT_EBUSY, "the episode's program is already running");
  /* The host files argv names (the agent's script) go into the root's /tmp/longtail-agent, named so there, as
   * the sandbox puts them in /work: outside repo_dir, so never in the diff. */
  int n = 0, rc = 0;
  while (argv[n]) n++;
  const char **av = calloc((size_t)n + 1, sizeof *av);
  char **copied = calloc((size_t)n + 1, sizeof *copied);
  if (!av || !copied) rc = lt_error_set(LT_ENOMEM, "swe: out of memory");
  for (int i = 0; rc == 0 && i < n; i++) {
    struct stat st;
    av[i] = argv[i];
    if (i == 0 || stat(argv[i], &st) != 0 || !S_ISREG(st.st_mode)) continue;
    char *data = NULL;
    size_t len = 0;
    const char *base = strrchr(argv[i], '/') ? strrchr(argv[i], '/') + 1 : argv[i];
    lt_buf_t path = {0};
    lt_buf_printf(&path, "/tmp/longtail-agent/%s", base);
    if ((rc = lt_fs_read_file(argv[i], 64u << 20, &data, &len)) == 0 && lt_buf_ok(&path) == 0)
      rc = lt_box_write_file(e->ctx.box, path.data, data, len, 0755);
    free(data);
    av[i] = copied[i] = lt_buf_take(&path);
    if (rc < 0) lt_error_wrap(rc, "the agent program's file %s", argv[i]);
  }
  lt_sandbox_job_t job = {.argv = av, .env = env, .cwd = e->task.repo_dir};
  lt_box_spawn_opts_t o = {0};
  if (rc == 0) rc = lt_box_spawn(e->ctx.box, &job, &o, &e->prog);
  for (int i = 0; copied && i < n; i++) free(copied[i]);
  free(copied), free(av);
  if (rc < 0) return lt_error_wrap(rc, "%s: the agent program in the task's root", e->task.instance_id);
  int src[3] = {lt_box_proc_stdin(e->prog), lt_box_proc_stdout(e->prog), lt_box_proc_stderr(e->prog)};
  for (int i = 0; i < 3; i++)
    if ((fds[i] = fcntl(src[i], F_DUPFD_CLOEXEC, 3)) < 0) { /* the caller's copies: its loop closes them */
      rc = lt_error_set(LT_ESYS, "the agent program's pipes: %s", strerror(errno));
      while (i-- > 0) close(fds[i]);
      lt_box_proc_free(e->prog);
      e->prog = NULL;
      return rc;
    }
  lt_box_proc_close_stdin(e->prog); /* the caller's copy is the one that is written and closed */
  return 0;
}

int lt_episode_program_wait(lt_episode_t *ep, int *wstatus) {
  swe_ep_t *e = rooted(ep);
  if (!e || !e->prog) return lt_error_set(LT_ENOENT, "no program runs in this episode");
  return lt_box_proc_wait(e->prog, 0, wstatus);
}

void lt_episode_program_kill(lt_episode_t *ep) {
  swe_ep_t *e = rooted(ep);
  if (!e || !e->prog) return;
  lt_box_proc_kill(e->prog, SIGKILL, 1); /* what it started, */
  lt_box_proc_kill(e->prog, SIGKILL, 0); /* then itself */
}

const lt_env_impl_t lt__env_swe = {
    .type = "swe",
    .init = swe_init,
    .free = swe_free,
    .sample = swe_sample,
    .open = swe_open,
    .step = swe_step,
    .close = swe_close,
    .end = swe_end,
    .max_turns = swe_max_turns,
    .attach = swe_attach,
    .demo = swe_demo,
    .blocking = 1,
    .sandbox = 1,
};
