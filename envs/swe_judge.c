/* The swe environment's judge (docs/envs.md, "`swe`"): an episode's changes as a unified diff, and that diff
 * scored by hidden tests in a fresh root; shared with `longtail swe validate`.
 *
 * The diff comes from the box's writable layer (lt_box_changes): each file added, modified or deleted under
 * repo_dir, its old side read from the image and its new side from the box.  Judging takes a fresh box over the
 * same image, applies the diff without the sections of files the task's test_patch touches (so an edited or
 * deleted test is the image's again, as SWE-bench's harness checks test files out before applying its test
 * patch), applies test_patch, and runs each FAIL_TO_PASS and PASS_TO_PASS id with test_cmd. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "envs/internal.h"
#include "text/diff.h"
#include "util/error.h"
#include "util/time.h"

#define DIFF_FILE_MAX (4u << 20) /* a changed file past this is left out of the diff (named in skipped) */
#define PATCH_FILE_MAX (64u << 20)

typedef struct {
  char *ref;
  lt_image_t *img;
  lt_box_pool_t *pool;
} image_entry_t;

struct lt__swe_images {
  char *cache_dir;
  lt_sandbox_limits_t limits;
  int pool_size;
  pthread_mutex_t mu;
  image_entry_t *e;
  int n, cap;
};

int lt__swe_images_create(const char *cache_dir, const lt_sandbox_limits_t *l, int pool, lt__swe_images_t **out) {
  lt__swe_images_t *im = calloc(1, sizeof *im);
  if (!im || !(im->cache_dir = strdup(cache_dir))) {
    free(im);
    return lt_error_set(LT_ENOMEM, "swe: out of memory");
  }
  im->limits = *l;
  im->pool_size = pool;
  pthread_mutex_init(&im->mu, NULL);
  *out = im;
  return 0;
}

void lt__swe_images_free(lt__swe_images_t *im) {
  if (!im) return;
  for (int i = 0; i < im->n; i++) { /* the pool's boxes first: they live on the image */
    lt_box_pool_free(im->e[i].pool);
    lt_image_close(im->e[i].img);
    free(im->e[i].ref);
  }
  pthread_mutex_destroy(&im->mu);
  free(im->e);
  free(im->cache_dir);
  free(im);
}

/* The entry of ref, the image opened and its pool made on first use (under the lock: one unpack at a time). */
static int images_entry(lt__swe_images_t *im, const char *ref, image_entry_t **out) {
  for (int i = 0; i < im->n; i++)
    if (!strcmp(im->e[i].ref, ref)) {
      *out = &im->e[i];
      return 0;
    }
  if (im->n == im->cap) {
    int cap = im->cap ? 2 * im->cap : 4;
    image_entry_t *e = realloc(im->e, sizeof *e * (size_t)cap);
    if (!e) return lt_error_set(LT_ENOMEM, "swe: out of memory");
    im->e = e, im->cap = cap;
  }
  image_entry_t e = {strdup(ref), NULL, NULL};
  int rc = e.ref ? lt_image_open(im->cache_dir, ref, &e.img) : lt_error_set(LT_ENOMEM, "swe: out of memory");
  if (rc == 0) rc = lt_box_pool_create(e.img, &im->limits, im->pool_size, &e.pool);
  if (rc < 0) {
    lt_image_close(e.img);
    free(e.ref);
    return rc;
  }
  im->e[im->n] = e;
  *out = &im->e[im->n++];
  return 0;
}

int lt__swe_box(lt__swe_images_t *im, const char *ref, lt_box_t **out) {
  *out = NULL;
  pthread_mutex_lock(&im->mu);
  image_entry_t *e = NULL;
  int rc = images_entry(im, ref, &e);
  lt_box_pool_t *pool = e ? e->pool : NULL;
  pthread_mutex_unlock(&im->mu);
  if (rc == 0) rc = lt_box_pool_take(pool, out);
  if (rc < 0) return lt_error_wrap(rc, "swe: image %s", ref);
  return 0;
}

char *lt__swe_image_ref(const char *ref, const char *base_dir) {
  static const char *const transports[] = {"oci:", "oci-archive:", "docker-archive:"};
  lt_buf_t b = {0};
  for (size_t i = 0; i < sizeof transports / sizeof transports[0]; i++) {
    size_t k = strlen(transports[i]);
    const char *p = ref + k;
    if (strncmp(ref, transports[i], k) || *p == '/' || !strncmp(p, "http://", 7) || !strncmp(p, "https://", 8) ||
        !base_dir)
      continue;
    lt_buf_printf(&b, "%s%s/%s", transports[i], base_dir, p);
    return lt_buf_take(&b);
  }
  return strdup(ref);
}

/* ---- the diff of a box ---- */

static const char *rel_path(const char *path, const char *dir) {
  size_t n = strlen(dir);
  while (n > 1 && dir[n - 1] == '/') n--;
  if (!strncmp(path, dir, n) && path[n] == '/') return path + n + 1;
  return path[0] == '/' ? path + 1 : path;
}

int lt__swe_diff(lt_box_t *b, const char *repo_dir, lt_buf_t *out, cJSON *skipped) {
  lt_box_change_t *ch = NULL;
  int n = 0, rc = lt_box_changes(b, repo_dir, &ch, &n);
  if (rc < 0) return lt_error_wrap(rc, "swe: the episode's changes under %s", repo_dir);
  for (int i = 0; i < n && rc == 0; i++) {
    const lt_box_change_t *c = &ch[i];
    const char *rel = rel_path(c->path, repo_dir);
    int oreg = c->old_mode && S_ISREG(c->old_mode), nreg = c->new_mode && S_ISREG(c->new_mode);
    if ((c->old_mode && !oreg) || (c->new_mode && !nreg)) { /* a symlink, or a file that became one */
      if (skipped) cJSON_AddItemToArray(skipped, cJSON_CreateString(rel));
      continue;
    }
    char *old = NULL, *new = NULL;
    size_t olen = 0, nlen = 0;
    if (oreg) rc = lt_image_read_file(lt_box_image(b), c->path, DIFF_FILE_MAX, &old, &olen);
    if (rc == 0 && nreg) rc = lt_box_read_file(b, c->path, DIFF_FILE_MAX, &new, &nlen);
    if (rc == 0)
      rc = lt_diff_file(out, rel, old, olen, (int)(c->old_mode & 0777), new, nlen, (int)(c->new_mode & 0777), 3);
    if (rc == LT_EUNSUPP || rc == LT_ERANGE) { /* binary, or too large for a text diff */
      if (skipped) cJSON_AddItemToArray(skipped, cJSON_CreateString(rel));
      rc = 0;
    }
    free(old), free(new);
  }
  lt_box_changes_free(ch, n);
  if (rc < 0) return lt_error_wrap(rc, "swe: the diff of %s", repo_dir);
  return 0;
}

/* ---- applying a patch in a box ---- */

static int touched_by(const lt_patch_t *p, const char *path) {
  for (int i = 0; p && i < lt_patch_nfiles(p); i++) {
    const lt_patch_file_t *f = lt_patch_file(p, i);
    if ((f->old_path && !strcmp(f->old_path, path)) || (f->new_path && !strcmp(f->new_path, path))) return 1;
  }
  return 0;
}

static char *abs_path(const char *dir, const char *rel) {
  lt_buf_t b = {0};
  lt_buf_printf(&b, "%s/%s", dir, rel);
  return lt_buf_take(&b);
}

typedef struct {
  char *path; /* absolute in the root */
  lt_buf_t data;
  int mode, remove;
} pending_t;

int lt__swe_apply(lt_box_t *b, const char *repo_dir, const char *text, const lt_patch_t *except, char *why, size_t wn) {
  lt_patch_t *p;
  why[0] = 0;
  if (lt_patch_parse(text, strlen(text), &p) < 0) {
    snprintf(why, wn, "%s", lt_error_msg());
    return 1;
  }
  int nf = lt_patch_nfiles(p), np = 0, rc = 0;
  pending_t *w = calloc((size_t)nf * 2 + 1, sizeof *w);
  if (!w) rc = lt_error_set(LT_ENOMEM, "swe: out of memory");
  /* Every file's result first, in memory: a patch applies whole or not at all. */
  for (int i = 0; i < nf && rc == 0 && !why[0]; i++) {
    const lt_patch_file_t *f = lt_patch_file(p, i);
    if ((f->old_path && touched_by(except, f->old_path)) || (f->new_path && touched_by(except, f->new_path))) continue;
    char *old = NULL, *src = f->old_path ? abs_path(repo_dir, f->old_path) : NULL;
    size_t olen = 0;
    int r = src ? lt_box_read_file(b, src, PATCH_FILE_MAX, &old, &olen) : 0;
    if (r < 0 && r != LT_ENOENT && r != LT_EINVAL) rc = lt_error_wrap(r, "swe: reading %s", src);
    else if (f->new_path && !f->old_path) {
      /* a created file must not exist: lt_patch_apply says so with the content it finds */
      char *dst = abs_path(repo_dir, f->new_path);
      char *cur = NULL;
      size_t clen = 0;
      if (lt_box_read_file(b, dst, PATCH_FILE_MAX, &cur, &clen) != LT_ENOENT && !cur) cur = strdup("");
      old = cur, olen = clen;
      free(dst);
    } else if (r < 0) {
      old = NULL; /* a missing or irregular file to change: lt_patch_apply names it */
    }
    if (rc == 0) {
      pending_t *pw = &w[np];
      if (lt_patch_apply(p, i, old, olen, &pw->data) < 0) {
        snprintf(why, wn, "%s", lt_error_msg());
      } else if (f->new_path) {
        pw->path = abs_path(repo_dir, f->new_path);
        pw->mode = f->new_mode;
        np++;
      } else {
        lt_buf_free(&pw->data);
      }
      if (!why[0] && f->old_path && (!f->new_path || strcmp(f->old_path, f->new_path))) { /* deleted or renamed */
        w[np].path = strdup(src);
        w[np++].remove = 1;
      }
    }
    free(old), free(src);
  }
  /* Then the writes, and the removals by the image's rm (the box has no other way to unlink). */
  int nrm = 0;
  for (int i = 0; i < np && rc == 0 && !why[0]; i++) {
    if (w[i].remove) {
      nrm++;
      continue;
    }
    int r = lt_box_write_file(b, w[i].path, w[i].data.data ? w[i].data.data : "", w[i].data.len, w[i].mode);
    if (r == LT_ENOSPC) snprintf(why, wn, "%s: no space left in the root", w[i].path);
    else if (r < 0) rc = lt_error_wrap(r, "swe: writing %s", w[i].path);
  }
  if (rc == 0 && !why[0] && nrm) {
    const char **argv = calloc((size_t)nrm + 6, sizeof *argv);
    int k = 0;
    if (!argv) rc = lt_error_set(LT_ENOMEM, "swe: out of memory");
    else {
      argv[k++] = "/bin/sh", argv[k++] = "-c", argv[k++] = "exec rm -f -- \"$@\"", argv[k++] = "sh";
      for (int i = 0; i < np; i++)
        if (w[i].remove) argv[k++] = w[i].path;
      lt_sandbox_job_t job = {.argv = argv, .timeout_s = 60};
      lt_sandbox_result_t res = {0};
      if ((rc = lt_box_exec(b, &job, &res)) < 0) lt_error_wrap(rc, "swe: removing files");
      else if (res.exit_code != 0) rc = lt_error_set(LT_EIO, "swe: rm in the image failed: %s", res.err ? res.err : "");
      lt_sandbox_result_free(&res);
      free(argv);
    }
  }
  for (int i = 0; i < np; i++) free(w[i].path), lt_buf_free(&w[i].data);
  if (w && np < nf * 2 + 1) lt_buf_free(&w[np].data); /* a file whose hunks failed */
  free(w);
  lt_patch_free(p);
  return rc < 0 ? rc : why[0] ? 1 : 0;
}

/* ---- judging ---- */

/* Runs each id of a list: its verdicts in `into` (id → passed | failed | timeout); returns how many passed. */
static int run_tests(lt_box_t *b, const lt__swe_task_t *t, const char **ids, int n, double timeout_s, cJSON *into,
                     int *timed_out, int *rc) {
  int passed = 0;
  for (int i = 0; i < n && *rc == 0; i++) {
    char *cmd = lt__swe_test_command(t->test_cmd, ids[i]);
    const char *argv[] = {"/bin/sh", "-c", cmd, NULL};
    lt_sandbox_job_t job = {.argv = argv, .cwd = t->repo_dir, .timeout_s = timeout_s};
    lt_sandbox_result_t res = {0};
    if (!cmd) *rc = lt_error_set(LT_ENOMEM, "swe: out of memory");
    else if ((*rc = lt_box_exec(b, &job, &res)) < 0) lt_error_wrap(*rc, "swe: running test %s", ids[i]);
    else {
      const char *v = res.timed_out ? "timeout" : res.exit_code == 0 && !res.signal ? "passed" : "failed";
      passed += !strcmp(v, "passed");
      *timed_out |= res.timed_out;
      cJSON_AddStringToObject(into, ids[i], v);
    }
    lt_sandbox_result_free(&res);
    free(cmd);
  }
  return passed;
}

int lt__swe_judge(lt__swe_images_t *im, const lt__swe_task_t *t, const char *diff, double test_timeout_s,
                  cJSON **result) {
  *result = NULL;
  double t0 = lt_time_mono_s();
  lt_patch_t *tp = NULL;
  if (t->test_patch && t->test_patch[0] && lt_patch_parse(t->test_patch, strlen(t->test_patch), &tp) < 0)
    return lt_error_wrap(LT_EINVAL, "swe: %s: test_patch", t->instance_id);
  lt_box_t *b = NULL;
  int rc = lt__swe_box(im, t->image, &b);
  cJSON *r = rc == 0 ? cJSON_CreateObject() : NULL, *tests = r ? cJSON_CreateObject() : NULL;
  cJSON *f2p = tests ? cJSON_AddObjectToObject(tests, "FAIL_TO_PASS") : NULL;
  cJSON *p2p = tests ? cJSON_AddObjectToObject(tests, "PASS_TO_PASS") : NULL;
  if (rc == 0 && !p2p) rc = lt_error_set(LT_ENOMEM, "swe: out of memory");
  char why[1024] = "";
  int applied = 1, nf = 0, np = 0, timed_out = 0;
  if (rc == 0 && diff && diff[0] && (rc = lt__swe_apply(b, t->repo_dir, diff, tp, why, sizeof why)) == 1) {
    applied = 0, rc = 0;
  }
  if (rc == 0 && applied && tp) {
    char twhy[1024];
    int a = lt__swe_apply(b, t->repo_dir, t->test_patch, NULL, twhy, sizeof twhy);
    if (a == 1)
      rc = lt_error_set(LT_EINVAL, "swe: %s: its test_patch does not apply to its image: %s", t->instance_id, twhy);
    else rc = a;
  }
  if (rc == 0 && applied) {
    nf = run_tests(b, t, t->f2p, t->nf2p, test_timeout_s, f2p, &timed_out, &rc);
    np = run_tests(b, t, t->p2p, t->np2p, test_timeout_s, p2p, &timed_out, &rc);
  }
  if (b) lt_box_destroy(b);
  lt_patch_free(tp);
  if (rc < 0) {
    cJSON_Delete(r);
    cJSON_Delete(tests);
    return rc;
  }
  int resolved = applied && nf == t->nf2p && np == t->np2p;
  cJSON_AddStringToObject(r, "instance_id", t->instance_id);
  cJSON_AddBoolToObject(r, "resolved", resolved);
  cJSON_AddBoolToObject(r, "applied", applied);
  if (!applied) cJSON_AddStringToObject(r, "error", why);
  if (timed_out) cJSON_AddBoolToObject(r, "timed_out", 1);
  cJSON_AddNumberToObject(r, "fail_to_pass", !applied ? 0 : t->nf2p ? (double)nf / t->nf2p : 1);
  cJSON_AddNumberToObject(r, "pass_to_pass", !applied ? 0 : t->np2p ? (double)np / t->np2p : 1);
  cJSON_AddItemToObject(r, "tests", tests);
  cJSON_AddNumberToObject(r, "seconds", lt_time_mono_s() - t0);
  *result = r;
  return 0;
}
