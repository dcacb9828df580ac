/* The rows of the swe environment and of `longtail swe validate` (docs/envs.md, "`swe`"), in SWE-bench's field names:
 *
 *   {"instance_id": "calc-12", "problem_statement": "...", "image": "oci:images/py:latest", "repo_dir": "/testbed",
 *    "patch": "diff --git ...", "test_patch": "diff --git ...", "FAIL_TO_PASS": ["tests.test_calc.T.test_div"],
 *    "PASS_TO_PASS": "[\"tests.test_calc.T.test_add\"]", "test_cmd": "python3 -m unittest {test}"}
 *
 * A row is checked field by field: what is wrong names the field.  Patches are parsed at the start, so a task
 * whose gold or test patch is malformed stops the run there, not in its first episode.  Other keys (SWE-bench's
 * repo, base_commit, hints_text, version, ...) are kept and not used. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "envs/internal.h"
#include "text/diff.h"
#include "util/error.h"
#include "util/json.h"

static const cJSON *get(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }

void lt__swe_task_free(lt__swe_task_t *t) {
  cJSON_Delete(t->lists);
  free(t->f2p), free(t->p2p);
  memset(t, 0, sizeof *t);
}

/* A string field: NULL when absent; *bad set when present but not a (non-empty) string. */
static const char *text_field(const cJSON *r, const char *k, int nonempty, char *why, size_t n) {
  const cJSON *v = get(r, k);
  if (!v || *why) return NULL;
  if (!cJSON_IsString(v) || (nonempty && !v->valuestring[0])) {
    snprintf(why, n, "\"%s\": expected a%s string", k, nonempty ? " non-empty" : "");
    return NULL;
  }
  return v->valuestring;
}

/* FAIL_TO_PASS / PASS_TO_PASS: a list of test ids, or a JSON string of one (as SWE-bench ships them). */
static void test_list(lt__swe_task_t *t, const cJSON *r, const char *k, int required, const char ***ids, int *nids,
                      char *why, size_t n) {
  const cJSON *v = get(r, k);
  if (*why) return;
  if (!v) {
    if (required) snprintf(why, n, "\"%s\": required (a list of test ids)", k);
    return;
  }
  if (cJSON_IsString(v)) {
    cJSON *parsed = cJSON_Parse(v->valuestring);
    if (!cJSON_IsArray(parsed)) {
      cJSON_Delete(parsed);
      snprintf(why, n, "\"%s\": a string must hold a JSON list of test ids", k);
      return;
    }
    cJSON_AddItemToArray(t->lists, parsed);
    v = parsed;
  }
  if (!cJSON_IsArray(v)) {
    snprintf(why, n, "\"%s\": expected a list of test ids (or a JSON string of one)", k);
    return;
  }
  int cnt = cJSON_GetArraySize(v), i = 0;
  if (required && cnt == 0) {
    snprintf(why, n, "\"%s\": at least one test id", k);
    return;
  }
  if (!(*ids = calloc((size_t)cnt + 1, sizeof **ids))) {
    snprintf(why, n, "out of memory");
    return;
  }
  for (const cJSON *x = v->child; x; x = x->next, i++) {
    if (!cJSON_IsString(x) || !x->valuestring[0] || strchr(x->valuestring, '\n')) {
      snprintf(why, n, "\"%s\": test id %d is not a one-line non-empty string", k, i + 1);
      return;
    }
    (*ids)[i] = x->valuestring;
  }
  *nids = cnt;
}

static void patch_field(const char *k, const char *text, char *why, size_t n) {
  lt_patch_t *p = NULL;
  if (!text || *why) return;
  if (lt_patch_parse(text, strlen(text), &p) < 0) snprintf(why, n, "\"%s\": %s", k, lt_error_msg());
  lt_patch_free(p);
}

int lt__swe_task_parse(const cJSON *r, const lt__swe_defaults_t *dflt, lt__swe_task_t *t, char *why, size_t n) {
  memset(t, 0, sizeof *t);
  why[0] = 0;
  if (!cJSON_IsObject(r)) {
    snprintf(why, n, "a row must be a JSON object");
    return LT_EINVAL;
  }
  if (!(t->lists = cJSON_CreateArray())) {
    snprintf(why, n, "out of memory");
    return LT_ENOMEM;
  }
  t->instance_id = text_field(r, "instance_id", 1, why, n);
  t->problem_statement = text_field(r, "problem_statement", 1, why, n);
  if (!*why && !t->instance_id) snprintf(why, n, "\"instance_id\": required");
  if (!*why && !t->problem_statement) snprintf(why, n, "\"problem_statement\": required");
  t->image = text_field(r, "image", 1, why, n);
  if (!*why && !t->image && !(t->image = dflt ? dflt->image : NULL))
    snprintf(why, n, "\"image\": required (the row names none and the domain sets no params.image)");
  t->repo_dir = text_field(r, "repo_dir", 1, why, n);
  if (!t->repo_dir) t->repo_dir = "/testbed";
  if (!*why && (t->repo_dir[0] != '/' || strstr(t->repo_dir, "/..") || strlen(t->repo_dir) > 1024))
    snprintf(why, n, "\"repo_dir\": expected an absolute path inside the image, without \"..\"");
  t->patch = text_field(r, "patch", 0, why, n);
  t->test_patch = text_field(r, "test_patch", 0, why, n);
  t->test_cmd = text_field(r, "test_cmd", 1, why, n);
  if (!*why && !t->test_cmd && !(t->test_cmd = dflt ? dflt->test_cmd : NULL))
    snprintf(why, n, "\"test_cmd\": required (the row names none and the domain sets no params.test_cmd)");
  if (!*why && !strstr(t->test_cmd, "{test}"))
    snprintf(why, n, "\"test_cmd\": must hold {test}, where each test id goes");
  test_list(t, r, "FAIL_TO_PASS", 1, &t->f2p, &t->nf2p, why, n);
  test_list(t, r, "PASS_TO_PASS", 0, &t->p2p, &t->np2p, why, n);
  patch_field("patch", t->patch && t->patch[0] ? t->patch : NULL, why, n);
  patch_field("test_patch", t->test_patch && t->test_patch[0] ? t->test_patch : NULL, why, n);
  if (*why) {
    lt__swe_task_free(t);
    return LT_EINVAL;
  }
  return 0;
}

void lt__swe_row_check(const cJSON *row, void *dflt, char *why, size_t n) {
  lt__swe_task_t t;
  if (lt__swe_task_parse(row, dflt, &t, why, n) == 0) lt__swe_task_free(&t);
}

char *lt__swe_test_command(const char *test_cmd, const char *id) {
  lt_buf_t b = {0};
  for (const char *p = test_cmd; *p;) {
    if (strncmp(p, "{test}", 6)) {
      lt_buf_putc(&b, *p++);
      continue;
    }
    lt_buf_putc(&b, '\''); /* quoted for sh: ' as '\'' */
    for (const char *c = id; *c; c++) lt_buf_puts(&b, *c == '\'' ? "'\\''" : (char[2]){*c, 0});
    lt_buf_putc(&b, '\'');
    p += 6;
  }
  return lt_buf_take(&b);
}

char *lt__swe_base_dir(const char *tasks) {
  char dir[PATH_MAX], abs[PATH_MAX];
  snprintf(dir, sizeof dir, "%s", tasks);
  char *slash = strrchr(dir, '/');
  if (slash) *slash = 0;
  else snprintf(dir, sizeof dir, ".");
  return strdup(realpath(dir[0] ? dir : "/", abs) ? abs : dir);
}
