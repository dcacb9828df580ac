/* The web console (`longtail ui`, docs/ui.md): a read-only view of one run, or of a folder of runs, over HTTP.
 * lt_ui_answer maps a GET to its page, asset or JSON answer without any network (the tests call it directly);
 * lt_ui_listen serves the same answers on the project's libuv HTTP server, lt_ui_serve_start from a thread of
 * its own (the daemon's monitor.ui_port). */
#ifndef LT_UI_UI_H
#define LT_UI_UI_H

#include <stddef.h>
#include <uv.h>

#include "buffer/buffer.h"
#include "net/http.h"
#include "text/tokenizer.h"

typedef struct lt_ui lt_ui_t;

/* dir: a run folder (holding buffer.db) or a folder of runs (each subfolder holding one).  Nothing is opened
 * for writing; LT_ENOENT when dir holds no run at all. */
int lt_ui_open(const char *dir, lt_ui_t **out);
void lt_ui_close(lt_ui_t *u);
/* How the console finds a run's tokenizer, for each token's text (called once per run; NULL: none, the
 * inspector then shows token ids only).  The caller's function: where a run's model lives is the CLI's business. */
typedef lt_tokenizer_t *(*lt_ui_tokenizer_fn)(lt_buffer_t *b);
void lt_ui_set_tokenizer(lt_ui_t *u, lt_ui_tokenizer_fn fn);
/* Runs served (1 for a run folder) and whether it is a folder of runs. */
int lt_ui_nruns(const lt_ui_t *u);
int lt_ui_multi(const lt_ui_t *u);

typedef struct {
  int status;
  const char *type; /* Content-Type */
  const char *body; /* owned when owned != NULL */
  size_t len;
  char *owned;
} lt_ui_resp_t;

/* One request (method, and its target as net/http parsed it: lt_http_target_parse) to its answer: 200 with a
 * page, asset or JSON; 400 with {"error": ...} for a malformed parameter; 404; 405 for anything but GET/HEAD; 503
 * when a query ran past its time limit.  Free with lt_ui_resp_free. */
void lt_ui_answer(lt_ui_t *u, const char *method, const lt_http_target_t *target, lt_ui_resp_t *r);
void lt_ui_resp_free(lt_ui_resp_t *r);

/* Serves on loop at host:port (0: any free port, see lt_http_port). */
int lt_ui_listen(lt_ui_t *u, uv_loop_t *loop, const char *host, int port, lt_http_server_t **out);

/* The console of run_dir served at host:port from a thread of its own: its own loop and its own read-only
 * connection to the run, so that its queries never run on the caller's loop.  Listens before returning (a port
 * in use is LT_EUNREACH here).  lt_ui_serve_stop ends it (open connections are closed) and frees it; NULL
 * is a no-op. */
typedef struct lt_ui_server lt_ui_server_t;
int lt_ui_serve_start(const char *run_dir, const char *host, int port, lt_ui_tokenizer_fn tok, lt_ui_server_t **out);
int lt_ui_serve_port(const lt_ui_server_t *s);
void lt_ui_serve_stop(lt_ui_server_t *s);

/* The built-in assets (ui/assets.c): name ("index.html", "app.js", "app.css") to bytes; NULL if unknown. */
const char *lt_ui_asset(const char *name, size_t *len, const char **type);

#endif
