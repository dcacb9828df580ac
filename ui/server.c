/* `longtail ui`'s HTTP side: each request is answered at once on the loop by lt_ui_answer (its queries are
 * bounded in time), so a connection stays open only while its answer is written. */
#include <string.h>

#include "ui/ui.h"

static void on_request(lt_http_conn_t *c, const lt_http_req_t *req, void *ud) {
  lt_ui_resp_t r;
  lt_ui_answer(ud, req->method, req->path, &r);
  /* HEAD: the same status and type, no body */
  lt_http_respond(c, r.status, r.type, r.body, strcmp(req->method, "HEAD") ? r.len : 0);
  lt_ui_resp_free(&r);
}

int lt_ui_listen(lt_ui_t *u, uv_loop_t *loop, const char *host, int port, lt_http_server_t **out) {
  lt_http_opts_t o = {.host = host, .port = port, .max_body = 0, .max_conns = 64, .timeout_ms = 10000};
  return lt_http_listen(loop, &o, on_request, u, out);
}
