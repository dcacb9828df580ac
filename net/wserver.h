/* Policy versions over HTTP (the daemon's transport.weights_port): workers that cannot see the run directory
 * fetch GET /weights/sha256/<sha>/<file>, where <sha> is the SHA-256 of the version's model.safetensors: a URL
 * whose bytes never change, served with an ETag, `Cache-Control: public, immutable` and byte ranges, so any
 * standard HTTP cache (nginx's proxy_cache, a CDN) in front of the server can fan a version out
 * (docs/operations.md).  The older /weights/<version>/<file> still answers.  Only a checkpoint's files are
 * served, streamed from disk. */
#ifndef LT_NET_WSERVER_H
#define LT_NET_WSERVER_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

typedef struct lt_wserver lt_wserver_t;

/* Listens on bind:port (0: any free port); /weights/<version>/ finds the versions before the newest in
 * run_dir/checkpoints/v<version>. */
int lt_wserver_listen(uv_loop_t *loop, const char *bind, int port, const char *run_dir, lt_wserver_t **out);
int lt_wserver_port(const lt_wserver_t *s);
/* A version was published: its files become servable under /weights/sha256/<sha>/ (the newest 8 versions stay).
 * Returns the bytes served of the version published before it, -1 when it is the first. */
int64_t lt_wserver_publish(lt_wserver_t *s, int64_t version, const char *dir, const char *sha);
/* The content-addressed location of a version under base (http://HOST:PORT/weights, or a cache's). */
void lt_wserver_url(const char *base, const char *sha, char *out, size_t cap);
void lt_wserver_close(lt_wserver_t *s);

#endif
