/* The `agent` environment: an unmodified agent program (any language, talking
 * to an OpenAI-compatible endpoint) plays the episode (docs/agent-gateway.md).
 * Tasks are dataset rows (envs/dataset.c: the same checks, epochs and resume),
 * or with params.image swe rows (envs/swe.c: the program runs inside the task's
 * root, which is judged by its hidden tests when it ends); this file holds the
 * program's settings.  The worker's gateway (rollout/) starts the program and
 * serves its calls: the environment never steps. */
#include <stdlib.h>
#include <string.h>

#include "envs/internal.h"
#include "util/error.h"
#include "util/log.h"

typedef struct {
  void *tasks;                  /* the state of tasks_impl over params.tasks */
  const lt_env_impl_t *tasks_impl; /* dataset rows, or swe rows in an image */
  lt_envs_agent_t a;
} agent_state_t;

/* What a program in a task's root never sees of its row: the judge. */
static const char *const swe_hidden[] = {"patch", "test_patch", "FAIL_TO_PASS", "PASS_TO_PASS", "tools", NULL};

static const cJSON *get(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }

static void agent_free(void *st) {
  agent_state_t *s = st;
  if (!s) return;
  if (s->tasks) s->tasks_impl->free(s->tasks);
  for (char **a = s->a.argv; a && *a; a++) free(*a);
  free(s->a.argv);
  free(s);
}

static int flag(const char *dom, const cJSON *p, const char *key, int dflt, int *out) {
  const cJSON *v = get(p, key);
  if (v && !cJSON_IsBool(v)) return lt_error_set(LT_ECONFIG, "envs.%s.params.%s: expected true or false", dom, key);
  *out = v ? cJSON_IsTrue(v) : dflt;
  return 0;
}

static int agent_init(const char *dom, const cJSON *p, uint64_t seed, void **state) {
  static const char *const keys[] = {"command", "tasks", "timeout_s", "sandbox", "pass_answer", "honor_sampling",
                                     "image", "test_cmd", "test_timeout_s", "eval"};
  for (const cJSON *c = p->child; c; c = c->next) {
    size_t i = 0;
    while (i < sizeof keys / sizeof keys[0] && strcmp(keys[i], c->string)) i++;
    if (i == sizeof keys / sizeof keys[0])
      return lt_error_set(LT_ECONFIG,
                          "envs.%s.params.%s: unknown key (agent takes command, tasks, timeout_s, sandbox, pass_answer, honor_sampling; "
                          "with image: test_cmd, test_timeout_s, eval)",
                          dom, c->string);
  }
  const cJSON *cmd = get(p, "command"), *tasks = get(p, "tasks"), *to = get(p, "timeout_s");
  if (!cJSON_IsArray(cmd) || !cmd->child)
    return lt_error_set(LT_ECONFIG, "envs.%s.params.command: expected a non-empty array of strings (argv)", dom);
  for (const cJSON *c = cmd->child; c; c = c->next)
    if (!cJSON_IsString(c) || !c->valuestring[0])
      return lt_error_set(LT_ECONFIG, "envs.%s.params.command: every element must be a non-empty string", dom);
  if (!cJSON_IsString(tasks)) return lt_error_set(LT_ECONFIG, "envs.%s.params.tasks: expected the path of a .jsonl file", dom);
  int image = get(p, "image") != NULL;
  if (!image && (get(p, "test_cmd") || get(p, "test_timeout_s") || get(p, "eval")))
    return lt_error_set(LT_ECONFIG, "envs.%s.params: test_cmd, test_timeout_s and eval go with image (a task's root)", dom);
  if (to && (!cJSON_IsNumber(to) || !(to->valuedouble > 0) || to->valuedouble > 86400))
    return lt_error_set(LT_ECONFIG, "envs.%s.params.timeout_s: expected a number of seconds in (0, 86400]", dom);
  agent_state_t *s = calloc(1, sizeof *s);
  if (!s) return lt_error_set(LT_ENOMEM, "agent: out of memory");
  s->a.timeout_s = to ? to->valuedouble : 600;
  s->a.image = image;
  s->a.hidden = image ? swe_hidden : NULL;
  s->tasks_impl = image ? &lt__env_swe : &lt__env_dataset;
  int rc = flag(dom, p, "pass_answer", 0, &s->a.pass_answer);
  if (rc == 0) rc = flag(dom, p, "honor_sampling", 0, &s->a.honor_sampling);
  /* Sandboxed wherever this host can make a sandbox (user namespaces); said once when it cannot.  In an image it
   * always is: the task's root is a box. */
  lt_sandbox_caps_t caps;
  lt_sandbox_probe(&caps);
  if (rc == 0) rc = flag(dom, p, "sandbox", caps.userns || image, &s->a.sandbox);
  if (rc == 0 && image && !s->a.sandbox)
    rc = lt_error_set(LT_ECONFIG, "envs.%s.params.sandbox: a program in an image runs in its box (leave sandbox out)", dom);
  if (rc == 0 && s->a.sandbox && !caps.userns)
    rc = lt_error_set(LT_EUNSUPP, "envs.%s.params.sandbox: true, but this host gives no user namespaces, so there is no "
                                  "sandbox (longtail --version); set false to run a trusted agent program as a plain child", dom);
  if (rc == 0 && !s->a.sandbox && !get(p, "sandbox"))
    LT_WARN("envs", "%s: agent programs run as plain child processes (no sandbox: this host gives no user namespaces)", dom);
  int n = cJSON_GetArraySize(cmd), i = 0;
  if (rc == 0 && !(s->a.argv = calloc((size_t)n + 1, sizeof *s->a.argv))) rc = lt_error_set(LT_ENOMEM, "agent: out of memory");
  for (const cJSON *c = cmd->child; rc == 0 && c; c = c->next, i++)
    if (!(s->a.argv[i] = strdup(c->valuestring))) rc = lt_error_set(LT_ENOMEM, "agent: out of memory");
  /* The tasks' own params: the dataset's "train", or the swe environment's keys. */
  cJSON *dp = rc == 0 ? cJSON_CreateObject() : NULL;
  if (rc == 0 && (!dp || !cJSON_AddStringToObject(dp, image ? "tasks" : "train", tasks->valuestring))) rc = lt_error_set(LT_ENOMEM, "agent: out of memory");
  static const char *const swe_keys[] = {"image", "test_cmd", "test_timeout_s", "eval"};
  for (size_t k = 0; rc == 0 && image && k < sizeof swe_keys / sizeof swe_keys[0]; k++)
    if (get(p, swe_keys[k]) && !cJSON_AddItemToObject(dp, swe_keys[k], cJSON_Duplicate(get(p, swe_keys[k]), 1)))
      rc = lt_error_set(LT_ENOMEM, "agent: out of memory");
  if (rc == 0 && (rc = s->tasks_impl->init(dom, dp, seed, &s->tasks)) < 0 && !image) {
    /* the dataset names its key "train": say which key it is here */
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", lt_error_msg());
    lt_error_set(rc, "%s (params.tasks)", msg);
  }
  if (rc == 0 && image) lt__swe_agent_mode(s->tasks);
  cJSON_Delete(dp);
  if (rc < 0) {
    agent_free(s);
    return rc;
  }
  *state = s;
  return 0;
}

static int agent_sample(void *st, uint64_t index, int eval, cJSON **spec) {
  agent_state_t *s = st;
  return s->tasks_impl->sample(s->tasks, index, eval, spec);
}

static int agent_open(void *st, lt_episode_t *ep, const cJSON *spec, uint64_t seed, cJSON **messages) {
  agent_state_t *s = st;
  return s->tasks_impl->open(s->tasks, ep, spec, seed, messages);
}

/* In an image: the task's root judged as a swe episode's (the diff, the hidden tests). */
static int agent_end(lt_episode_t *ep, int score) { return lt__env_swe.end(ep, score); }

static void agent_close(lt_episode_t *ep) {
  if (lt__agent_params(ep->state)->image) lt__env_swe.close(ep);
}

const lt_envs_agent_t *lt__agent_params(void *state) { return &((agent_state_t *)state)->a; }

const lt_env_impl_t lt__env_agent = {
    .type = "agent",
    .init = agent_init,
    .free = agent_free,
    .sample = agent_sample,
    .open = agent_open,
    .step = lt__step_single_turn,
    .end = agent_end,
    .close = agent_close,
    .blocking = 1, /* an open in an image takes a box (the dataset's open is quick either way) */
};
