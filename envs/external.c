/* The `external` environment: a program in any language, run in the sandbox,
 * speaking one JSON line in and one JSON line out per call (docs/envs.md):
 *   {"op": "reset", "index", "eval", "seed"}
 *       → {"messages": [...], "state": any, "reference"?: {...}}
 *   {"op": "step", "state", "text", "tool_calls": [{"name", "args": {...}}]}
 *       → {"observations": [{"name"?, "content"}], "done": bool, "state": any,
 *          "reference"?: {...}, "truncated"?: "tool_timeout"}
 *   any call may answer {"error": "..."} (an environment error).
 * The program keeps no memory between calls: its state travels through
 * longtail, so every call is a fresh sandbox (warm from the pool) and a crashed
 * or hung program costs one call, not the worker.  Opens and steps block, so
 * they run on the thread pool. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "envs/env.h"
#include "util/buf.h"
#include "util/error.h"
#include "util/fs.h"

#define MAX_FILES 64

typedef struct {
  char domain[64];
  char **argv;
  lt_sandbox_file_t files[MAX_FILES];
  int nfiles;
  double timeout_s;
} ext_state_t;

static void ext_free(void *state) {
  ext_state_t *s = state;
  if (!s) return;
  for (char **a = s->argv; a && *a; a++) free(*a);
  free(s->argv);
  for (int i = 0; i < s->nfiles; i++) free((char *)s->files[i].path), free((char *)s->files[i].data);
  free(s);
}

/* Loads the regular files of dir (one level) to be placed in /work on every call. */
static int load_dir(ext_state_t *s, const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return lt_error_set(LT_ECONFIG, "envs.%s.params.dir: cannot open %s: %s", s->domain, dir, strerror(errno));
  int rc = 0;
  for (struct dirent *e; rc == 0 && (e = readdir(d));) {
    char path[1100];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    if (e->d_name[0] == '.' || stat(path, &st) != 0 || !S_ISREG(st.st_mode)) continue;
    if (s->nfiles == MAX_FILES) {
      rc = lt_error_set(LT_ECONFIG, "envs.%s.params.dir: more than %d files", s->domain, MAX_FILES);
      break;
    }
    char *data;
    size_t len;
    if ((rc = lt_fs_read_file(path, 16u << 20, &data, &len)) < 0) break;
    s->files[s->nfiles++] = (lt_sandbox_file_t){strdup(e->d_name), data, len, (int)(st.st_mode & 0755)};
  }
  closedir(d);
  return rc;
}

static int ext_init(const char *dom, const cJSON *p, uint64_t seed, void **state) {
  ext_state_t *s = calloc(1, sizeof *s);
  if (!s) return lt_error_set(LT_ENOMEM, "external: out of memory");
  snprintf(s->domain, sizeof s->domain, "%s", dom);
  const cJSON *cmd = cJSON_GetObjectItemCaseSensitive(p, "command"), *dir = cJSON_GetObjectItemCaseSensitive(p, "dir");
  const cJSON *t = cJSON_GetObjectItemCaseSensitive(p, "timeout_s");
  int rc = 0, n = cJSON_GetArraySize(cmd);
  if (!cJSON_IsArray(cmd) || n == 0)
    rc = lt_error_set(LT_ECONFIG, "envs.%s.params.command: expected the program's argv, e.g. [\"python3\", \"env.py\"]", dom);
  else if (t && (!cJSON_IsNumber(t) || t->valuedouble <= 0))
    rc = lt_error_set(LT_ECONFIG, "envs.%s.params.timeout_s: expected a positive number", dom);
  else if (dir && !cJSON_IsString(dir))
    rc = lt_error_set(LT_ECONFIG, "envs.%s.params.dir: expected a directory path", dom);
  if (rc == 0 && !(s->argv = calloc((size_t)n + 1, sizeof *s->argv))) rc = lt_error_set(LT_ENOMEM, "external: out of memory");
  for (int i = 0; rc == 0 && i < n; i++) {
    const cJSON *a = cJSON_GetArrayItem(cmd, i);
    if (!cJSON_IsString(a)) rc = lt_error_set(LT_ECONFIG, "envs.%s.params.command[%d]: expected a string", dom, i);
    else s->argv[i] = strdup(a->valuestring);
  }
  s->timeout_s = t ? t->valuedouble : 10;
  if (rc == 0 && dir) rc = load_dir(s, dir->valuestring);
  if (rc < 0) {
    ext_free(s);
    return rc;
  }
  *state = s;
  return 0;
}

/* Problems are the program's: the spec only says which one. */
static int ext_sample(void *state, uint64_t index, int eval, cJSON **spec) {
  *spec = cJSON_CreateObject();
  cJSON_AddNumberToObject(*spec, "index", (double)index);
  cJSON_AddBoolToObject(*spec, "eval", eval);
  return *spec ? 0 : lt_error_set(LT_ENOMEM, "out of memory");
}

/* One call: the request on stdin, the answer's first line from stdout.
 * *timed_out: the sandbox's deadline ended it (no answer). */
static int call(lt_episode_t *ep, cJSON *req, cJSON **answer, int *timed_out) {
  ext_state_t *s = ep->state;
  *answer = NULL;
  *timed_out = 0;
  lt_sandbox_pool_t *pool;
  int rc = lt__envs_pool(ep->envs, &pool);
  if (rc < 0) return rc;
  char *line = cJSON_PrintUnformatted(req);
  if (!line) return lt_error_set(LT_ENOMEM, "external: out of memory");
  size_t n = strlen(line);
  line[n] = '\n'; /* the NUL becomes the line's end; the length says where it stops */
  lt_sandbox_job_t job = {.argv = (const char *const *)s->argv, .files = s->files, .nfiles = s->nfiles,
                          .stdin_data = line, .stdin_len = n + 1, .timeout_s = s->timeout_s};
  lt_sandbox_result_t r;
  rc = lt_sandbox_pool_run(pool, &job, &r);
  free(line);
  if (rc < 0) return lt_error_wrap(rc, "envs.%s", s->domain);
  if (r.timed_out) {
    *timed_out = 1;
  } else {
    r.out[strcspn(r.out, "\n")] = 0;
    *answer = cJSON_Parse(r.out);
    const cJSON *err = cJSON_GetObjectItemCaseSensitive(*answer, "error");
    if (!cJSON_IsObject(*answer))
      rc = lt_error_set(LT_EPROTO, "envs.%s: the program's answer is not a JSON object (exit %d, signal %d): %.200s%s%.300s",
                        s->domain, r.exit_code, r.signal, r.out, *r.err ? " | stderr: " : "", r.err);
    else if (err)
      rc = lt_error_set(LT_EREMOTE, "envs.%s: %s", s->domain, cJSON_IsString(err) ? err->valuestring : "error");
    if (rc < 0) cJSON_Delete(*answer), *answer = NULL;
  }
  lt_sandbox_result_free(&r);
  return rc;
}

static void merge_reference(lt_episode_t *ep, const cJSON *ref) {
  if (!cJSON_IsObject(ref)) return;
  for (const cJSON *k = ref->child; k; k = k->next) {
    cJSON_DeleteItemFromObjectCaseSensitive(ep->reference, k->string);
    cJSON_AddItemToObject(ep->reference, k->string, cJSON_Duplicate(k, 1));
  }
}

static void keep_state(lt_episode_t *ep, cJSON *answer) {
  cJSON_Delete(ep->data);
  cJSON *st = cJSON_DetachItemFromObjectCaseSensitive(answer, "state");
  ep->data = st ? st : cJSON_CreateNull();
}

static int ext_open(void *state, lt_episode_t *ep, const cJSON *spec, uint64_t seed, cJSON **messages) {
  ext_state_t *s = state;
  cJSON *req = cJSON_CreateObject(), *a;
  cJSON_AddStringToObject(req, "op", "reset");
  cJSON_AddItemToObject(req, "index", cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(spec, "index"), 1));
  cJSON_AddItemToObject(req, "eval", cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(spec, "eval"), 1));
  cJSON_AddNumberToObject(req, "seed", (double)(seed & ((1ull << 53) - 1)));
  int timed_out, rc = call(ep, req, &a, &timed_out);
  cJSON_Delete(req);
  if (rc == 0 && timed_out) rc = lt_error_set(LT_ETIMEDOUT, "envs.%s: reset did not answer in %g s", s->domain, s->timeout_s);
  if (rc < 0) return rc;
  cJSON *msgs = cJSON_DetachItemFromObjectCaseSensitive(a, "messages");
  if (!cJSON_IsArray(msgs) || !msgs->child) {
    cJSON_Delete(msgs), cJSON_Delete(a);
    return lt_error_set(LT_EPROTO, "envs.%s: reset must answer \"messages\": [{\"role\", \"content\"}, ...]", s->domain);
  }
  ep->reference = cJSON_CreateObject();
  merge_reference(ep, cJSON_GetObjectItemCaseSensitive(a, "reference"));
  keep_state(ep, a);
  cJSON_Delete(a);
  *messages = msgs;
  return 0;
}

static int ext_step(lt_episode_t *ep, const char *text, const lt_tool_call_t *calls, int ncalls, lt_env_step_t *res) {
  cJSON *req = cJSON_CreateObject(), *tc = cJSON_CreateArray(), *a;
  cJSON_AddStringToObject(req, "op", "step");
  cJSON_AddItemToObject(req, "state", cJSON_Duplicate(ep->data, 1));
  cJSON_AddStringToObject(req, "text", text);
  for (int i = 0; i < ncalls; i++) {
    cJSON *c = cJSON_CreateObject(), *args = cJSON_AddObjectToObject(c, "args");
    cJSON_AddStringToObject(c, "name", calls[i].name);
    for (int k = 0; k < calls[i].nargs; k++) cJSON_AddStringToObject(args, calls[i].args[k].name, calls[i].args[k].value);
    cJSON_AddItemToArray(tc, c);
  }
  cJSON_AddItemToObject(req, "tool_calls", tc);
  int timed_out, rc = call(ep, req, &a, &timed_out);
  cJSON_Delete(req);
  if (rc < 0) return rc;
  res->observations = cJSON_CreateArray();
  if (timed_out) { /* the environment ran out of time: truncated, bootstrapped, not a failure of the policy */
    res->truncated = "sandbox_timeout";
    res->done = 1;
    return 0;
  }
  const cJSON *obs = cJSON_GetObjectItemCaseSensitive(a, "observations"), *tr = cJSON_GetObjectItemCaseSensitive(a, "truncated");
  for (const cJSON *o = cJSON_IsArray(obs) ? obs->child : NULL; o; o = o->next) {
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(o, "name"), *content = cJSON_GetObjectItemCaseSensitive(o, "content");
    if (!cJSON_IsString(content)) continue;
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", "tool");
    cJSON_AddStringToObject(m, "name", cJSON_IsString(name) ? name->valuestring : "");
    cJSON_AddStringToObject(m, "content", content->valuestring);
    cJSON_AddItemToArray(res->observations, m);
  }
  res->done = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a, "done")) || ncalls == 0;
  if (cJSON_IsString(tr) && strcmp(tr->valuestring, "tool_timeout") == 0) res->truncated = "tool_timeout", res->done = 1;
  merge_reference(ep, cJSON_GetObjectItemCaseSensitive(a, "reference"));
  keep_state(ep, a);
  cJSON_Delete(a);
  return 0;
}

static void ext_close(lt_episode_t *ep) {
  cJSON_Delete(ep->data);
  ep->data = NULL;
}

const lt_env_impl_t lt__env_external = {
    .type = "external",
    .init = ext_init,
    .free = ext_free,
    .sample = ext_sample,
    .open = ext_open,
    .step = ext_step,
    .close = ext_close,
    .blocking = 1,
};
