/* The `agent` environment: an unmodified agent program (any language, talking
 * to an OpenAI-compatible endpoint) plays the episode (docs/agent-gateway.md).
 * Tasks are dataset rows (envs/dataset.c: the same checks, epochs and resume),
 * or with params.image swe rows (envs/swe.c: the program runs inside the task's
 * root, which is judged by its hidden tests when it ends); this file holds the
 * program's settings.  The worker's gateway (rollout/) starts the program and
 * serves its calls: the environment never steps. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "envs/internal.h"
#include "util/error.h"
#include "util/log.h"

typedef struct {
  void *tasks;                     /* the state of tasks_impl over params.tasks */
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
  for (char **a = s->a.read_only; a && *a; a++) free(*a);
  free(s->a.argv);
  free(s->a.read_only);
  free(s);
}

static int flag(const char *dom, const cJSON *p, const char *key, int dflt, int *out) {
  const cJSON *v = get(p, key);
  if (v && !cJSON_IsBool(v)) return lt_error_set(LT_ECONFIG, "envs.%s.params.%s: expected true or false", dom, key);
  *out = v ? cJSON_IsTrue(v) : dflt;
  return 0;
}

/* params.read_only: host directories that must exist, resolved (relative ones from the working directory, as the
 * command's files are) and checked by the sandbox's rules. */
static int agent_read_only(const char *dom, const cJSON *ro, lt_envs_agent_t *a) {
  if (!ro) return 0;
  int n = cJSON_GetArraySize(ro), i = 0;
  if (!cJSON_IsArray(ro) || n > LT_SANDBOX_MAX_RO)
    return lt_error_set(LT_ECONFIG, "envs.%s.params.read_only: expected an array of at most %d directories", dom,
                        LT_SANDBOX_MAX_RO);
  if (!(a->read_only = calloc((size_t)n + 1, sizeof *a->read_only)))
    return lt_error_set(LT_ENOMEM, "agent: out of memory");
  for (const cJSON *c = ro->child; c; c = c->next, i++) {
    char real[PATH_MAX];
    struct stat st;
    if (!cJSON_IsString(c) || !realpath(c->valuestring, real) || stat(real, &st) != 0 || !S_ISDIR(st.st_mode))
      return lt_error_set(LT_ECONFIG, "envs.%s.params.read_only[%d]: %s is not a directory", dom, i,
                          cJSON_IsString(c) ? c->valuestring : "(not a string)");
    if (lt_sandbox_ro_check(real) < 0)
      return lt_error_set(LT_ECONFIG, "envs.%s.params.read_only[%d]: %s", dom, i, lt_error_msg());
    if (!(a->read_only[i] = strdup(real))) return lt_error_set(LT_ENOMEM, "agent: out of memory");
  }
  return 0;
}

/* The keys that shape the program's sandbox: refused, never ignored, for a program that runs without one. */
static int agent_sandbox_keys(const char *dom, const cJSON *p, lt_envs_agent_t *a) {
  const cJSON *mem = get(p, "memory_mb"), *ro = get(p, "read_only");
  if (!a->sandbox && (mem || ro))
    return lt_error_set(LT_ECONFIG,
                        "envs.%s.params.%s: applies to the program's sandbox, and params.sandbox is false "
                        "(a plain child process has no memory limit and sees the whole host)",
                        dom, mem ? "memory_mb" : "read_only");
  if (mem && (!cJSON_IsNumber(mem) || mem->valuedouble != (int)mem->valuedouble || mem->valuedouble < 1 ||
              mem->valuedouble > (1 << 20)))
    return lt_error_set(LT_ECONFIG, "envs.%s.params.memory_mb: expected an integer in [1, 1048576] (MiB)", dom);
  a->memory_mb = mem ? (int)mem->valuedouble : 0;
  return agent_read_only(dom, ro, a);
}

static int agent_init(const char *dom, const cJSON *p, uint64_t seed, void **state) {
  static const char *const keys[] = {"command",   "tasks",          "timeout_s",   "sandbox",        "memory_mb",
                                     "read_only", "stdin",          "pass_answer", "honor_sampling", "image",
                                     "test_cmd",  "test_timeout_s", "eval"};
  for (const cJSON *c = p->child; c; c = c->next) {
    size_t i = 0;
    while (i < sizeof keys / sizeof keys[0] && strcmp(keys[i], c->string)) i++;
    if (i == sizeof keys / sizeof keys[0])
      return lt_error_set(LT_ECONFIG,
                          "envs.%s.params.%s: unknown key (agent takes command, tasks, timeout_s, sandbox, memory_mb, "
                          "read_only, stdin, pass_answer, honor_sampling; with image: test_cmd, test_timeout_s, eval)",
                          dom, c->string);
  }
  const cJSON *cmd = get(p, "command"), *tasks = get(p, "tasks"), *to = get(p, "timeout_s"), *in = get(p, "stdin");
  if (!cJSON_IsArray(cmd) || !cmd->child)
    return lt_error_set(LT_ECONFIG, "envs.%s.params.command: expected a non-empty array of strings (argv)", dom);
  for (const cJSON *c = cmd->child; c; c = c->next) /* an empty argument is one (claude --tools "") */
    if (!cJSON_IsString(c) || (c == cmd->child && !c->valuestring[0]))
      return lt_error_set(LT_ECONFIG, "envs.%s.params.command: expected strings, the first (the program) not empty",
                          dom);
  if (!cJSON_IsString(tasks))
    return lt_error_set(LT_ECONFIG, "envs.%s.params.tasks: expected the path of a .jsonl file", dom);
  int image = get(p, "image") != NULL;
  if (!image && (get(p, "test_cmd") || get(p, "test_timeout_s") || get(p, "eval")))
    return lt_error_set(LT_ECONFIG, "envs.%s.params: test_cmd, test_timeout_s and eval go with image (a task's root)",
                        dom);
  if (to && (!cJSON_IsNumber(to) || !(to->valuedouble > 0) || to->valuedouble > 86400))
    return lt_error_set(LT_ECONFIG, "envs.%s.params.timeout_s: expected a number of seconds in (0, 86400]", dom);
  if (in && (!cJSON_IsString(in) || (strcmp(in->valuestring, "task") && strcmp(in->valuestring, "prompt"))))
    return lt_error_set(LT_ECONFIG,
                        "envs.%s.params.stdin: expected \"task\" (the task's JSON) or \"prompt\" (its text)", dom);
  agent_state_t *s = calloc(1, sizeof *s);
  if (!s) return lt_error_set(LT_ENOMEM, "agent: out of memory");
  s->a.timeout_s = to ? to->valuedouble : 600;
  s->a.stdin_prompt = in && !strcmp(in->valuestring, "prompt");
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
    rc = lt_error_set(LT_ECONFIG, "envs.%s.params.sandbox: a program in an image runs in its box (leave sandbox out)",
                      dom);
  if (rc == 0 && s->a.sandbox && !caps.userns)
    rc = lt_error_set(LT_EUNSUPP,
                      "envs.%s.params.sandbox: true, but this host gives no user namespaces, so there is no "
                      "sandbox (longtail --version); set false to run a trusted agent program as a plain child",
                      dom);
  if (rc == 0 && !s->a.sandbox && !get(p, "sandbox"))
    LT_WARN("envs", "%s: agent programs run as plain child processes (no sandbox: this host gives no user namespaces)",
            dom);
  if (rc == 0) rc = agent_sandbox_keys(dom, p, &s->a);
  int n = cJSON_GetArraySize(cmd), i = 0;
  if (rc == 0 && !(s->a.argv = calloc((size_t)n + 1, sizeof *s->a.argv)))
    rc = lt_error_set(LT_ENOMEM, "agent: out of memory");
  for (const cJSON *c = cmd->child; rc == 0 && c; c = c->next, i++)
    if (!(s->a.argv[i] = strdup(c->valuestring))) rc = lt_error_set(LT_ENOMEM, "agent: out of memory");
  /* The tasks' own params: the dataset's "train", or the swe environment's keys. */
  cJSON *dp = rc == 0 ? cJSON_CreateObject() : NULL;
  if (rc == 0 && (!dp || !cJSON_AddStringToObject(dp, image ? "tasks" : "train", tasks->valuestring)))
    rc = lt_error_set(LT_ENOMEM, "agent: out of memory");
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

static void agent_attach(void *st, lt_envs_t *envs) {
  agent_state_t *s = st;
  if (s->tasks_impl->attach) s->tasks_impl->attach(s->tasks, envs);
}

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
    .attach = agent_attach,
    .close = agent_close,
    .blocking = 1, /* an open in an image takes a box (the dataset's open is quick either way) */
};
