/* A small HTTP/1.1 server on a libuv loop, for the daemon's Prometheus
 * endpoint and `longtail serve`.  One request per connection (the response
 * carries "Connection: close"); the handler may answer later (a generation
 * that takes seconds) through the connection it was given.  Peer input never
 * crashes it: oversized heads or bodies, malformed request lines, slow or
 * vanished clients get an error status or a closed socket. */
#ifndef LT_NET_HTTP_H
#define LT_NET_HTTP_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

typedef struct lt_http_server lt_http_server_t;
typedef struct lt_http_conn lt_http_conn_t;

/* A request target split once into its path and its query's parameters, each percent-decoded once ('+' is a
 * space in the query only); a key without '=' has the value "". */
enum { LT_HTTP_MAX_PARAMS = 32 };
typedef struct {
  const char *key, *value;
} lt_http_param_t;
typedef struct {
  char path[1024];
  lt_http_param_t params[LT_HTTP_MAX_PARAMS]; /* in the query's order */
  int nparams;
  char store[4096]; /* the decoded keys and values */
} lt_http_target_t;

/* LT_EINVAL (the detail says which) for a bad escape, an escaped NUL, an empty key, more than LT_HTTP_MAX_PARAMS
 * parameters or a target past the buffers; the server answers such a request 400 before any handler sees it. */
int lt_http_target_parse(const char *target, lt_http_target_t *t);
/* The first value of key, or NULL. */
const char *lt_http_param(const lt_http_target_t *t, const char *key);

typedef struct {
  const char *method; /* "GET" */
  const char *path;   /* "/v1/models": target->path (a handler that routes a prefix away may point further in) */
  const lt_http_target_t *target; /* the path and the query's parameters, decoded */
  const char *body;               /* NUL-terminated, body_len bytes */
  size_t body_len;
  const char *authorization; /* the Authorization header's value, NULL without one */
  const char *api_key;       /* the X-Api-Key header's value (Anthropic's SDKs send their key there), or NULL */
} lt_http_req_t;

/* Called once per complete request; the request is valid during the call
 * only.  The handler must eventually call lt_http_respond on `c` (unless the
 * server closes first, which frees the connection). */
typedef void (*lt_http_handler)(lt_http_conn_t *c, const lt_http_req_t *req, void *ud);

typedef struct {
  const char *host; /* "127.0.0.1" */
  int port;         /* 0: any free port (see lt_http_port) */
  size_t max_body;  /* bytes; larger requests get 413 */
  int max_conns;    /* beyond this, new connections are closed at once */
  int timeout_ms;   /* a request not complete by then gets 408 */
} lt_http_opts_t;

int lt_http_listen(uv_loop_t *loop, const lt_http_opts_t *o, lt_http_handler h, void *ud, lt_http_server_t **out);
int lt_http_port(const lt_http_server_t *s);
/* Sends the response and closes the connection; `c` is invalid afterwards.
 * Returns LT_ECANCELED when the client has gone already (nothing sent). */
int lt_http_respond(lt_http_conn_t *c, int status, const char *content_type, const char *body, size_t len);
/* Streams a file as the body (read in chunks with uv_fs, never blocking the
 * loop); 404 when it cannot be opened.  `c` is invalid afterwards. */
int lt_http_respond_file(lt_http_conn_t *c, const char *content_type, const char *path);
/* What an immutable, cacheable file is served with: an ETag (answering If-None-Match with 304), a
 * Cache-Control value, and single byte ranges (Range → 206 with Content-Range, 416 past the end). */
typedef struct {
  const char *etag;          /* quoted, e.g. "\"<sha256>\"", or NULL */
  const char *cache_control; /* e.g. "public, max-age=31536000, immutable", or NULL */
  int ranges;
  int64_t *sent; /* set: the body bytes written are added to it as they go (a download cut short
                                counts what was sent); it must outlive the response */
} lt_http_file_opts_t;
int lt_http_respond_file_opts(lt_http_conn_t *c, const char *content_type, const char *path,
                              const lt_http_file_opts_t *o);
/* A streamed response (server-sent events): the head goes out with
 * chunked transfer encoding, then each lt_http_stream_write is one chunk,
 * queued in order without blocking; lt_http_stream_end sends the last chunk
 * and closes.  `c` stays valid until lt_http_stream_end (or until a write
 * returns LT_ECANCELED: the client left; end it all the same). */
int lt_http_stream_begin(lt_http_conn_t *c, int status, const char *content_type);
int lt_http_stream_write(lt_http_conn_t *c, const char *data, size_t len);
void lt_http_stream_end(lt_http_conn_t *c);
/* 1 while the client is still connected (a handler that answers late checks
 * it to drop abandoned work). */
int lt_http_conn_alive(const lt_http_conn_t *c);
/* Stops listening and closes every connection; done(ud) after all memory is
 * released. */
void lt_http_close(lt_http_server_t *s, void (*done)(void *ud), void *ud);

/* ---- client: libcurl's multi-socket API on the loop (the only way longtail
 * uses libcurl), for the openai backend and the GenRM client ---- */

typedef struct lt_httpc lt_httpc_t;
typedef struct lt_httpc_req lt_httpc_req_t;

/* rc 0: an HTTP answer with `status` (2xx) and its body.  rc < 0 after the
 * retries: LT_EUNREACH (no connection), LT_ETIMEDOUT, or LT_EREMOTE (a 4xx,
 * or a 5xx/429 that persisted); `err` says what and where. */
typedef void (*lt_httpc_cb)(int rc, long status, const char *body, size_t len, const char *err, void *ud);

typedef struct {
  const char *out_path; /* set: the body goes to this file (written whole, then renamed into place) */
  int timeout_ms;       /* whole request, per attempt */
  int retries;          /* further attempts on connection failures, timeouts, 429 and 5xx */
  int backoff_ms;       /* first retry delay, doubled each time (capped at 10 s) */
} lt_httpc_opts_t;

int lt_httpc_create(uv_loop_t *loop, lt_httpc_t **out);
uv_loop_t *lt_httpc_loop(const lt_httpc_t *c);
/* POSTs a JSON body (body == NULL: GET).  The callback runs on the loop,
 * never inside this call. */
int lt_httpc_request(lt_httpc_t *c, const char *url, const char *body, const lt_httpc_opts_t *o, lt_httpc_cb cb,
                     void *ud, lt_httpc_req_t **out);
/* Abandons a request; its callback will not run. */
void lt_httpc_cancel(lt_httpc_req_t *r);
/* Cancels what is pending and frees on the loop; done(ud) afterwards. */
void lt_httpc_close(lt_httpc_t *c, void (*done)(void *), void *ud);

#endif
