/* Weights over HTTP (rollout/fetch.h): a version's files downloaded and model.safetensors checked. */
#include "rollout/fetch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/error.h"
#include "util/fs.h"
#include "util/sha256.h"

/* Required first; the rest are optional (404 is fine). */
static const char *const files[] = {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"};
#define NREQUIRED 2
#define NFILES (int)(sizeof files / sizeof files[0])

struct lt_fetch {
  lt_httpc_t *c;
  lt_httpc_req_t *req;
  uv_work_t hash;      /* model.safetensors' SHA-256, off the loop (a large model takes seconds) */
  int hashing, cancelled, hash_rc;
  char got[65];
  char url[2048], dir[4096], sha[65];
  lt_httpc_opts_t o;
  int next;
  lt_fetch_cb cb;
  void *ud;
};

static int step(lt_fetch_t *f);
static void hash_work(uv_work_t *w);
static void hash_done(uv_work_t *w, int status);

static void finish(lt_fetch_t *f, int rc, const char *err) {
  lt_fetch_cb cb = f->cb;
  void *ud = f->ud;
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", f->dir);
  free(f);
  cb(rc, dir, err, ud);
}

static void next_file(lt_fetch_t *f) {
  int rc;
  if (f->next == NFILES) {
    finish(f, 0, NULL);
  } else if ((rc = step(f)) < 0) {
    char e[512];
    snprintf(e, sizeof e, "%s: %s", f->url, lt_error_msg());
    finish(f, rc, e);
  }
}

static void hash_work(uv_work_t *w) {
  lt_fetch_t *f = w->data;
  char path[4200];
  snprintf(path, sizeof path, "%s/model.safetensors", f->dir);
  f->hash_rc = lt_sha256_file(path, f->got);
}

static void hash_done(uv_work_t *w, int status) {
  lt_fetch_t *f = w->data;
  f->hashing = 0;
  if (f->cancelled) { /* cancelled while hashing: nobody waits */
    free(f);
    return;
  }
  if (status == UV_ECANCELED) f->hash_rc = LT_ECANCELED;
  if (f->hash_rc < 0 || strcmp(f->got, f->sha)) {
    char e[512], path[4200];
    snprintf(e, sizeof e, "%s/model.safetensors: sha256 %s, announced %s", f->url, f->hash_rc < 0 ? "unreadable" : f->got, f->sha);
    snprintf(path, sizeof path, "%s/model.safetensors", f->dir);
    unlink(path);
    finish(f, LT_ECORRUPT, e);
    return;
  }
  next_file(f);
}

static void on_file(int rc, long status, const char *body, size_t len, const char *err, void *ud) {
  lt_fetch_t *f = ud;
  f->req = NULL;
  int i = f->next - 1;
  if (rc < 0 && !(i >= NREQUIRED && status == 404)) {
    finish(f, rc, err);
    return;
  }
  if (i == 1 && f->sha[0]) { /* model.safetensors: what was announced, or nothing */
    f->hash.data = f;
    if ((rc = uv_queue_work(lt_httpc_loop(f->c), &f->hash, hash_work, hash_done)) == 0) {
      f->hashing = 1;
      return;
    }
    char e[512];
    snprintf(e, sizeof e, "%s: cannot queue the checksum: %s", f->url, uv_strerror(rc));
    finish(f, LT_ESYS, e);
    return;
  }
  next_file(f);
}

/* Requests the next file. */
static int step(lt_fetch_t *f) {
  const char *name = files[f->next++];
  char url[2200], path[4200];
  snprintf(url, sizeof url, "%s/%s", f->url, name);
  snprintf(path, sizeof path, "%s/%s", f->dir, name);
  f->o.out_path = path;
  return lt_httpc_request(f->c, url, NULL, &f->o, on_file, f, &f->req);
}

int lt_fetch_start(lt_httpc_t *c, const char *url, const char *dir, const char *sha256, int timeout_ms, int retries,
                   lt_fetch_cb cb, void *ud, lt_fetch_t **out) {
  *out = NULL;
  int rc = lt_fs_mkdirs(dir, 0755);
  if (rc < 0) return rc;
  lt_fetch_t *f = calloc(1, sizeof *f);
  if (!f) return lt_error_set(LT_ENOMEM, "fetch: out of memory");
  f->c = c;
  snprintf(f->url, sizeof f->url, "%s", url);
  snprintf(f->dir, sizeof f->dir, "%s", dir);
  snprintf(f->sha, sizeof f->sha, "%s", sha256 ? sha256 : "");
  f->o = (lt_httpc_opts_t){.timeout_ms = timeout_ms, .retries = retries, .backoff_ms = 500};
  f->cb = cb;
  f->ud = ud;
  if ((rc = step(f)) < 0) { /* the first request; its answer arrives on the loop */
    free(f);
    return rc;
  }
  *out = f;
  return 0;
}

void lt_fetch_cancel(lt_fetch_t *f) {
  if (!f) return;
  if (f->hashing) { /* the thread pool still holds it: freed when the hash is done */
    f->cancelled = 1;
    uv_cancel((uv_req_t *)&f->hash);
    return;
  }
  lt_httpc_cancel(f->req);
  free(f);
}
