/* The console's HTTP side: each request is answered at once on the loop by lt_ui_answer (its queries are
 * bounded in time), so a connection stays open only while its answer is written.  `longtail ui` serves on its
 * own loop; the daemon (monitor.ui_port) serves from a thread of its own, with its own loop and its own
 * read-only connection to the run, so that no console query ever runs on the daemon's loop. */
#include <stdlib.h>
#include <string.h>

#include "ui/ui.h"
#include "util/error.h"
#include "util/log.h"

static void on_request(lt_http_conn_t *c, const lt_http_req_t *req, void *ud) {
  lt_ui_resp_t r;
  lt_ui_answer(ud, req->method, req->target, &r);
  /* HEAD: the same status and type, no body */
  lt_http_respond(c, r.status, r.type, r.body, strcmp(req->method, "HEAD") ? r.len : 0);
  lt_ui_resp_free(&r);
}

int lt_ui_listen(lt_ui_t *u, uv_loop_t *loop, const char *host, int port, lt_http_server_t **out) {
  lt_http_opts_t o = {.host = host, .port = port, .max_body = 0, .max_conns = 64, .timeout_ms = 10000};
  return lt_http_listen(loop, &o, on_request, u, out);
}

/* ---- the console in a thread of its own ---- */

struct lt_ui_server {
  lt_ui_t *u;
  uv_loop_t loop;
  uv_async_t stop; /* the only handle another thread touches */
  lt_http_server_t *http;
  uv_thread_t thread;
};

static void serve(void *arg) {
  lt_ui_server_t *s = arg;
  uv_run(&s->loop, UV_RUN_DEFAULT);
}

static void on_stop(uv_async_t *a) {
  lt_ui_server_t *s = a->data;
  lt_http_close(s->http, NULL, NULL);
  uv_close((uv_handle_t *)&s->stop, NULL);
}

/* Frees a console whose thread has ended or never started: the loop runs its closing handles first. */
static void serve_free(lt_ui_server_t *s) {
  uv_run(&s->loop, UV_RUN_DEFAULT);
  if (uv_loop_close(&s->loop) != 0) LT_WARN("ui", "console: its loop still held handles at exit");
  lt_ui_close(s->u);
  free(s);
}

int lt_ui_serve_start(const char *run_dir, const char *host, int port, lt_ui_tokenizer_fn tok, lt_ui_server_t **out) {
  lt_ui_server_t *s = calloc(1, sizeof *s);
  if (!s) return lt_error_set(LT_ENOMEM, "console: out of memory");
  int rc = lt_ui_open(run_dir, &s->u);
  if (rc < 0) {
    free(s);
    return rc;
  }
  lt_ui_set_tokenizer(s->u, tok);
  if ((rc = uv_loop_init(&s->loop)) != 0) {
    lt_ui_close(s->u);
    free(s);
    return lt_error_set(LT_ESYS, "console: its loop: %s", uv_strerror(rc));
  }
  /* Listening here, before the thread starts, so that a port in use is the caller's error at once. */
  if ((rc = lt_ui_listen(s->u, &s->loop, host, port, &s->http)) < 0) {
    serve_free(s); /* the failed listener's handle closes */
    return rc;
  }
  if ((rc = uv_async_init(&s->loop, &s->stop, on_stop)) != 0) {
    lt_http_close(s->http, NULL, NULL);
    serve_free(s);
    return lt_error_set(LT_ESYS, "console: its wake-up handle: %s", uv_strerror(rc));
  }
  s->stop.data = s;
  if (uv_thread_create(&s->thread, serve, s) != 0) {
    on_stop(&s->stop);
    serve_free(s);
    return lt_error_set(LT_ESYS, "console: cannot start its thread");
  }
  LT_INFO("ui", "console at http://%s:%d/", host, lt_http_port(s->http));
  *out = s;
  return 0;
}

int lt_ui_serve_port(const lt_ui_server_t *s) { return lt_http_port(s->http); }

void lt_ui_serve_stop(lt_ui_server_t *s) {
  if (!s) return;
  uv_async_send(&s->stop);
  uv_thread_join(&s->thread);
  serve_free(s);
}
