/* The `external` environment: a program in any language, run in the sandbox,
 * speaking one JSON line in and one JSON line out per call (docs/envs.md):
 *   {"op": "reset", "index", "eval", "seed"}
 *       → {"messages": [...], "state": any, "reference"?: {...}}
 *   {"op": "step", "state", "text", "tool_calls": [{"name", "args": {...}}]}
 *       → {"observations": [{"name"?, "content"}], "done": bool, "state": any,
 *          "reference"?: {...}, "truncated"?: "tool_timeout" (a timeout: the policy's failure)}
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

#include "envs/internal.h"
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
    rc = lt_error_set(LT_ECONFIG, "envs.%s.params.command: expected the program's argv, e.g. [\"python3\", \"env.py\"]",
                      dom);
  else if (t && (!cJSON_IsNumber(t) || t->valuedouble <= 0))
    rc = lt_error_set(LT_ECONFIG, "envs.%s.params.timeout_s: expected a positive number", dom);
  else if (dir && !cJSON_IsString(dir))
    rc = lt_error_set(LT_ECONFIG, "envs.%s.params.dir: expected a directory path", dom);
  if (rc == 0 && !(s->argv = calloc((size_t)n + 1, sizeof *s->argv)))
    rc = lt_error_set(LT_ENOMEM, "external: out of memory");
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
  lt_sandbox_job_t job = {.argv = (const char *const *)s->argv,
                          .files = s->files,
                          .nfiles = s->nfiles,
                          .stdin_data = line,
                          .stdin_len = n + 1,
                          .timeout_s = s->timeout_s};
  lt_sandbox_result_t r;
  rc = lt_sandbox_pool_run(pool, &job, &r);
  free(line);
  if (rc < 0) return lt_error_wrap(rc, "envs.%s", s->domain);
  if (r.timed_out) {
    *timed_out = 1;
  } else if ((rc = lt__envproto_parse(s->domain, r.out, strcspn(r.out, "\n"), answer)) < 0 && rc == LT_EPROTO) {
    rc = lt_error_wrap(rc, "exit %d, signal %d%s%.300s", r.exit_code, r.signal, *r.err ? ", stderr: " : "", r.err);
  }
  lt_sandbox_result_free(&r);
  return rc;
}

static int ext_open(void *state, lt_episode_t *ep, const cJSON *spec, uint64_t seed, cJSON **messages) {
  ext_state_t *s = state;
  cJSON *req = lt__envproto_reset(spec, seed), *a;
  int timed_out, rc = call(ep, req, &a, &timed_out);
  cJSON_Delete(req);
  if (rc == 0 && timed_out)
    rc = lt_error_set(LT_ETIMEDOUT, "envs.%s: reset did not answer in %g s", s->domain, s->timeout_s);
  if (rc == 0) rc = lt__envproto_opened(ep, s->domain, a, messages);
  cJSON_Delete(a);
  return rc;
}

static int ext_step(lt_episode_t *ep, const char *text, const lt_tool_call_t *calls, int ncalls, lt_env_step_t *res) {
  cJSON *req = lt__envproto_step(ep, text, calls, ncalls), *a;
  int timed_out, rc = call(ep, req, &a, &timed_out);
  cJSON_Delete(req);
  if (rc < 0) return rc;
  if (timed_out) { /* the environment ran out of time on the policy's step: a failure, never bootstrapped */
    res->observations = cJSON_CreateArray();
    res->timeout = "sandbox_timeout";
    res->done = 1;
    return 0;
  }
  lt__envproto_stepped(ep, a, ncalls, res);
  cJSON_Delete(a);
  return 0;
}

const lt_env_impl_t lt__env_external = {
    .type = "external",
    .init = ext_init,
    .free = ext_free,
    .sample = lt__envproto_sample,
    .open = ext_open,
    .step = ext_step,
    .close = lt__envproto_close,
    .blocking = 1,
    .sandbox = 1,
};
