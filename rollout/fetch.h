/* Weights over HTTP for workers that cannot see the daemon's checkpoint
 * directory: the files of one version are downloaded (through the loop's
 * curl adapter) into a local directory and model.safetensors is checked
 * against the announced SHA-256 before anyone loads it.  Where the worker
 * holds the previous version, the version's delta.zst is downloaded instead
 * of the whole file and applied off the loop; a missing, damaged or foreign
 * delta falls back to the whole file.  Mirrors (HTTP caches in front of the
 * daemon) are tried in order before the daemon, and a shared folder
 * (checkpoint.publish_dir mounted on the worker) before either: any source
 * whose bytes do not hash to the announced SHA-256 is passed over. */
#ifndef LT_ROLLOUT_FETCH_H
#define LT_ROLLOUT_FETCH_H

#include <stdint.h>

#include "net/http.h"

typedef struct lt_fetch lt_fetch_t;

typedef struct {
  const char *const *urls; /* the version's locations, tried in order: mirrors first, the daemon's last */
  int nurls;
  const char *dir;        /* where a download goes (created) */
  const char *sha256;     /* of model.safetensors; "" or NULL: no check (and no delta, no shared folder) */
  const char *delta_base; /* SHA-256 of base_dir's model.safetensors, which <url>/delta.zst applies to; NULL: none */
  const char *base_dir;   /* the version this worker holds */
  const char *shared;     /* a folder of versions by SHA-256 (checkpoint.publish_dir), or NULL */
  int timeout_ms, retries;
} lt_fetch_opts_t;

/* What the last finished fetch did, for logs and metrics. */
typedef struct {
  int64_t bytes;   /* downloaded */
  int delta;       /* 1: model.safetensors was rebuilt from a delta */
  int source;      /* index in urls of the source used; -1: the shared folder */
  char from[2048]; /* that source's URL or folder */
} lt_fetch_stats_t;

/* rc 0: dir holds a verified checkpoint (st: how it came); else err says which file and why. */
typedef void (*lt_fetch_cb)(int rc, const char *dir, const lt_fetch_stats_t *st, const char *err, void *ud);

/* Fetches URL/{config.json, model.safetensors (or delta.zst)} and, when the
 * server has them, the tokenizer files.  The callback runs on the loop,
 * never inside this call; `dir` there is the folder to load (the shared
 * folder's own when that was used). */
int lt_fetch_start(lt_httpc_t *c, const lt_fetch_opts_t *o, lt_fetch_cb cb, void *ud, lt_fetch_t **out);
/* Abandons a download (the callback is not called). */
void lt_fetch_cancel(lt_fetch_t *f);

#endif
