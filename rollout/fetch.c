/* A worker's download of one policy version (rollout/fetch.h): sources in order, deltas with fallback, every
 * model file hashed off the loop before it is used. */
#include "rollout/fetch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/delta.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/log.h"
#include "util/sha256.h"

/* Required first; the rest are optional (404 is fine).  MODEL is model.safetensors, or delta.zst applied. */
static const char *const files[] = {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"};
#define NREQUIRED 2
#define MODEL 1
#define NFILES (int)(sizeof files / sizeof files[0])
#define MAXURLS 17

enum { WORK_NONE, WORK_HASH, WORK_APPLY, WORK_SHARED };

struct lt_fetch {
  lt_httpc_t *c;
  lt_httpc_req_t *req;
  uv_work_t work; /* hashing or applying, off the loop (a large model takes seconds) */
  int working, kind, cancelled, work_rc;
  char work_err[512];
  char got[65];
  char *urls[MAXURLS];
  int nurls, ui; /* the source being tried */
  char dir[4096], sha[65], delta_base[65], base_dir[4096], shared[4096];
  int delta; /* this source's delta is still worth trying */
  lt_httpc_opts_t o;
  int retries; /* the daemon's; a mirror gets at most one */
  int next;
  lt_fetch_stats_t st;
  lt_fetch_cb cb;
  void *ud;
};

static void start_source(lt_fetch_t *f);

static void fetch_free(lt_fetch_t *f) {
  for (int i = 0; i < f->nurls; i++) free(f->urls[i]);
  free(f);
}

static void fetch_finish(lt_fetch_t *f, int rc, const char *dir, const char *err) {
  lt_fetch_cb cb = f->cb;
  void *ud = f->ud;
  char d[4096];
  lt_fetch_stats_t st = f->st;
  snprintf(d, sizeof d, "%s", dir ? dir : f->dir);
  fetch_free(f);
  cb(rc, d, &st, err, ud);
}

/* This source failed: the next one, or the error when it was the last. */
static void source_failed(lt_fetch_t *f, int rc, const char *err) {
  if (f->ui + 1 < f->nurls) {
    LT_WARN("fetch", "%s; trying %s", err, f->urls[f->ui + 1]);
    f->ui++;
    start_source(f);
    return;
  }
  fetch_finish(f, rc, NULL, err);
}

static int fetch_step(lt_fetch_t *f);

static void next_file(lt_fetch_t *f) {
  int rc;
  if (f->next == NFILES) {
    f->st.source = f->ui;
    snprintf(f->st.from, sizeof f->st.from, "%s", f->urls[f->ui]);
    fetch_finish(f, 0, NULL, NULL);
  } else if ((rc = fetch_step(f)) < 0) {
    char e[2400];
    snprintf(e, sizeof e, "%s: %s", f->urls[f->ui], lt_error_msg());
    fetch_finish(f, rc, NULL, e);
  }
}

static void model_path(const char *dir, const char *name, char *out, size_t cap) {
  snprintf(out, cap, "%s/%s", dir, name);
}

static void work_run(uv_work_t *w) {
  lt_fetch_t *f = w->data;
  char path[4200], delta[4200], base[4200];
  f->work_err[0] = 0;
  if (f->kind == WORK_APPLY) {
    model_path(f->dir, "delta.zst", delta, sizeof delta);
    model_path(f->base_dir, "model.safetensors", base, sizeof base);
    model_path(f->dir, "model.safetensors", path, sizeof path);
    lt_delta_info_t di;
    f->work_rc = lt_delta_info(delta, &di);
    if (f->work_rc == 0 && strcmp(di.target_sha, f->sha))
      f->work_rc = lt_error_set(LT_ECORRUPT, "%s: a delta to sha256 %.12s, not the announced %.12s", delta,
                                di.target_sha, f->sha);
    if (f->work_rc == 0) f->work_rc = lt_delta_apply(base, delta, path);
    if (f->work_rc < 0) snprintf(f->work_err, sizeof f->work_err, "%s", lt_error_msg());
    unlink(delta);
    return;
  }
  model_path(f->kind == WORK_SHARED ? f->shared : f->dir, "model.safetensors", path, sizeof path);
  f->work_rc = lt_sha256_file(path, f->got);
  if (f->work_rc < 0) snprintf(f->work_err, sizeof f->work_err, "%s", lt_error_msg());
}

static void fetch_work_done(uv_work_t *w, int status) {
  lt_fetch_t *f = w->data;
  f->working = 0;
  if (f->cancelled) { /* cancelled while working: nobody waits */
    fetch_free(f);
    return;
  }
  if (status == UV_ECANCELED) f->work_rc = LT_ECANCELED;
  char e[2400], path[4200];
  switch (f->kind) {
  case WORK_SHARED:
    if (f->work_rc == 0 && !strcmp(f->got, f->sha)) {
      f->st.source = -1;
      snprintf(f->st.from, sizeof f->st.from, "%s", f->shared);
      fetch_finish(f, 0, f->shared, NULL);
      return;
    }
    LT_WARN("fetch", "%s/model.safetensors: %s; downloading instead", f->shared,
            f->work_rc < 0 ? f->work_err : "its sha256 is not the announced one");
    start_source(f);
    return;
  case WORK_APPLY:
    if (f->work_rc == 0) {
      f->st.delta = 1;
      next_file(f);
      return;
    }
    LT_WARN("fetch", "%s/delta.zst: %s; fetching the whole model.safetensors", f->urls[f->ui], f->work_err);
    f->delta = 0;
    f->next = MODEL;
    next_file(f);
    return;
  default:
    if (f->work_rc < 0 || strcmp(f->got, f->sha)) {
      snprintf(e, sizeof e, "%s/model.safetensors: sha256 %s, announced %s", f->urls[f->ui],
               f->work_rc < 0 ? "unreadable" : f->got, f->sha);
      model_path(f->dir, "model.safetensors", path, sizeof path);
      unlink(path);
      source_failed(f, LT_ECORRUPT, e);
      return;
    }
    next_file(f);
  }
}

static void start_work(lt_fetch_t *f, int kind) {
  f->kind = kind;
  f->work.data = f;
  int rc = uv_queue_work(lt_httpc_loop(f->c), &f->work, work_run, fetch_work_done);
  if (rc == 0) {
    f->working = 1;
    return;
  }
  char e[512];
  snprintf(e, sizeof e, "%s: cannot queue work on the thread pool: %s", f->dir, uv_strerror(rc));
  fetch_finish(f, LT_ESYS, NULL, e);
}

static void on_file(int rc, long status, const char *body, size_t len, const char *err, void *ud) {
  lt_fetch_t *f = ud;
  f->req = NULL;
  int i = f->next - 1;
  if (rc == 0) f->st.bytes += (int64_t)len;
  if (rc < 0 && i == MODEL && f->delta) { /* no usable delta here: the whole file from the same source */
    LT_WARN("fetch", "%s; fetching the whole model.safetensors", err);
    f->delta = 0;
    f->next = MODEL;
    next_file(f);
    return;
  }
  if (rc < 0 && !(i >= NREQUIRED && status == 404)) {
    source_failed(f, rc, err);
    return;
  }
  if (i == MODEL && f->delta) {
    start_work(f, WORK_APPLY);
    return;
  }
  if (i == MODEL && f->sha[0]) { /* model.safetensors: what was announced, or nothing */
    start_work(f, WORK_HASH);
    return;
  }
  next_file(f);
}

/* Requests the next file of the current source.  A mirror gets one quick retry: the daemon behind it is the
 * fallback, and a rack cache that is down must not hold a version back for the daemon's full back-off. */
static int fetch_step(lt_fetch_t *f) {
  int i = f->next++;
  f->o.retries = f->ui + 1 < f->nurls ? (f->retries < 1 ? f->retries : 1) : f->retries;
  const char *name = i == MODEL && f->delta ? "delta.zst" : files[i];
  char url[2200], path[4200];
  snprintf(url, sizeof url, "%s/%s", f->urls[f->ui], name);
  snprintf(path, sizeof path, "%s/%s", f->dir, name);
  f->o.out_path = path;
  return lt_httpc_request(f->c, url, NULL, &f->o, on_file, f, &f->req);
}

/* The current source from its first file: its delta when the worker holds the delta's base. */
static int begin(lt_fetch_t *f) {
  char base[4200];
  model_path(f->base_dir, "model.safetensors", base, sizeof base);
  f->delta = f->delta_base[0] && f->sha[0] && f->base_dir[0] && lt_fs_exists(base);
  f->next = 0;
  return fetch_step(f);
}

static void start_source(lt_fetch_t *f) {
  int rc = begin(f);
  if (rc < 0) {
    char e[2400];
    snprintf(e, sizeof e, "%s: %s", f->urls[f->ui], lt_error_msg());
    fetch_finish(f, rc, NULL, e);
  }
}

int lt_fetch_start(lt_httpc_t *c, const lt_fetch_opts_t *o, lt_fetch_cb cb, void *ud, lt_fetch_t **out) {
  *out = NULL;
  if (o->nurls < 1 || o->nurls > MAXURLS)
    return lt_error_set(LT_EINVAL, "fetch: %d sources (1 to %d)", o->nurls, MAXURLS);
  int rc = lt_fs_mkdirs(o->dir, 0755);
  if (rc < 0) return rc;
  lt_fetch_t *f = calloc(1, sizeof *f);
  if (!f) return lt_error_set(LT_ENOMEM, "fetch: out of memory");
  for (int i = 0; i < o->nurls; i++)
    if (!(f->urls[f->nurls++] = strdup(o->urls[i]))) {
      fetch_free(f);
      return lt_error_set(LT_ENOMEM, "fetch: out of memory");
    }
  f->c = c;
  snprintf(f->dir, sizeof f->dir, "%s", o->dir);
  snprintf(f->sha, sizeof f->sha, "%s", o->sha256 ? o->sha256 : "");
  snprintf(f->delta_base, sizeof f->delta_base, "%s", o->delta_base ? o->delta_base : "");
  snprintf(f->base_dir, sizeof f->base_dir, "%s", o->base_dir ? o->base_dir : "");
  f->o = (lt_httpc_opts_t){.timeout_ms = o->timeout_ms, .retries = o->retries, .backoff_ms = 500};
  f->retries = o->retries;
  f->cb = cb;
  f->ud = ud;
  if (o->shared && o->shared[0] && f->sha[0]) {
    snprintf(f->shared, sizeof f->shared, "%s/%s", o->shared, f->sha);
    char p[4300];
    snprintf(p, sizeof p, "%s/model.safetensors", f->shared);
    if (lt_fs_exists(p)) { /* a shared folder's copy is trusted only after its hash: off the loop */
      f->work.data = f;
      f->kind = WORK_SHARED;
      if ((rc = uv_queue_work(lt_httpc_loop(c), &f->work, work_run, fetch_work_done)) < 0) {
        fetch_free(f);
        return lt_error_set(LT_ESYS, "fetch: cannot queue work: %s", uv_strerror(rc));
      }
      f->working = 1;
      *out = f;
      return 0;
    }
  }
  if ((rc = begin(f)) < 0) { /* the first request; its answer arrives on the loop */
    fetch_free(f);
    return rc;
  }
  *out = f;
  return 0;
}

void lt_fetch_cancel(lt_fetch_t *f) {
  if (!f) return;
  if (f->working) { /* the thread pool still holds it: freed when the work is done */
    f->cancelled = 1;
    uv_cancel((uv_req_t *)&f->work);
    return;
  }
  lt_httpc_cancel(f->req);
  fetch_free(f);
}
