/* Weights over HTTP for workers that cannot see the daemon's checkpoint
 * directory: the files of one version are downloaded (through the loop's
 * curl adapter) into a local directory and model.safetensors is checked
 * against the announced SHA-256 before anyone loads it. */
#ifndef LT_ROLLOUT_FETCH_H
#define LT_ROLLOUT_FETCH_H

#include "net/http.h"

typedef struct lt_fetch lt_fetch_t;

/* rc 0: DIR holds a verified checkpoint; else err says which file and why. */
typedef void (*lt_fetch_cb)(int rc, const char *dir, const char *err, void *ud);

/* Downloads URL/{config.json, model.safetensors} and, when the server has
 * them, the tokenizer files, into DIR (created).  sha256 may be empty (no
 * check).  The callback runs on the loop, never inside this call. */
int lt_fetch_start(lt_httpc_t *c, const char *url, const char *dir, const char *sha256, int timeout_ms, int retries,
                   lt_fetch_cb cb, void *ud, lt_fetch_t **out);
/* Abandons a download (the callback is not called). */
void lt_fetch_cancel(lt_fetch_t *f);

#endif
