/* The OpenAI-compatible layer behind the fuzz HTTP server (shared by fuzz_oai, fuzz_messages, fuzz_responses and
 * the tests of their seed corpora):
 * no authentication, so every request reaches the decoder, and the scripted backend as the engine (it generates
 * on the loop as a real one does, answering with a tool call so tool-call parsing runs too). */
#ifndef LT_TESTS_FUZZ_OAISERVE_H
#define LT_TESTS_FUZZ_OAISERVE_H

/* The layer and the engine interface. */
#include "infer/backend.h"
#include "infer/oai.h"
#include "tests/fuzz/httpserve.h"

typedef struct {
  lt_fuzz_server_t srv;
  lt_backend_t *backend;
  lt_oai_t *oai;
} lt_fuzz_oai_t;

static inline int lt_fuzz_oai_token(lt_gen_t *g, int32_t token, float logprob, int ntop, const int32_t *ids,
                                    const float *lps, void *ud) {
  lt_oai_token_t t = {.token = token, .logprob = logprob, .ntop = ntop, .top_ids = ids, .top_logprobs = lps};
  return lt_oai_gen_token(ud, &t);
}

static inline void lt_fuzz_oai_turn(lt_gen_t *g, const lt_turn_t *t, const lt_prefill_routing_t *pre, void *ud) {
  lt_gen_close(g);
  lt_oai_gen_end(ud, t->error, t->stopped, t->error_msg);
}

static inline int lt_fuzz_oai_generate(void *ud, lt_oai_gen_t *og, const lt_oai_job_t *job, void **handle) {
  lt_fuzz_oai_t *f = ud;
  lt_gen_t *g;
  int rc = lt_gen_open(f->backend, job->seed, &g);
  if (rc < 0) return rc;
  lt_gen_watch(g, job->plan->top_logprobs, lt_fuzz_oai_token, og);
  if ((rc = lt_gen_turn(g, job->plan->prompt, job->plan->nprompt, job->plan->max_new, &job->plan->sp, lt_fuzz_oai_turn,
                        og)) < 0) {
    lt_gen_close(g);
    return rc;
  }
  *handle = g;
  return 0;
}

static inline void lt_fuzz_oai_cancel(void *ud, void *handle) { lt_gen_close(handle); }

static inline void lt_fuzz_oai_request(lt_http_conn_t *c, const lt_http_req_t *req, void *ud) {
  lt_fuzz_oai_t *f = ud;
  if (!lt_oai_handle(f->oai, c, req)) lt_oai_send_error(c, 404, NULL, NULL, "no route %s", req->path);
}

static inline int lt_fuzz_oai_start(lt_fuzz_oai_t *f) {
  memset(f, 0, sizeof *f);
  if (uv_loop_init(&f->srv.loop) != 0) return -1;
  lt_backend_opts_t bo = {.kind = "scripted",
                          .max_sessions = 64,
                          .max_context = 2048,
                          .mean_tokens = 6,
                          .answer = "<tool_call><name>lookup</name><arg name=\"q\">paris</arg></tool_call>"};
  if (lt_backend_create(&f->srv.loop, &bo, &f->backend) < 0) return -1;
  lt_backend_info_t bi;
  lt_backend_info(f->backend, &bi);
  lt_oai_opts_t oo = {.tok = lt_backend_tokenizer(f->backend),
                      .tool_format = LT_TOOLFMT_XML,
                      .model = "policy",
                      .vocab = bi.vocab,
                      .max_context = bi.max_context,
                      .seed_base = 1,
                      .hooks = {.ud = f, .generate = lt_fuzz_oai_generate, .cancel = lt_fuzz_oai_cancel}};
  if (lt_oai_create(&oo, &f->oai) < 0) return -1;
  /* The gateway's body limit is 16 MiB; fuzz inputs stay under 64 KiB, so a smaller one lets seeds reach 413. */
  lt_http_opts_t ho = {.host = "127.0.0.1", .port = 0, .max_body = 1 << 15, .max_conns = 64, .timeout_ms = 10000};
  if (lt_http_listen(&f->srv.loop, &ho, lt_fuzz_oai_request, f, &f->srv.srv) < 0) return -1;
  f->srv.port = lt_http_port(f->srv.srv);
  return 0;
}

/* The inputs of fuzz_messages and fuzz_responses: request bodies, POSTed to /v1/messages?beta=true (to
 * /v1/messages/count_tokens when the input starts with '#', which is dropped) and to /v1/responses. */
static inline char *lt_fuzz_messages_send(lt_fuzz_server_t *s, const uint8_t *data, size_t size, size_t *len) {
  int count = size && data[0] == '#';
  return lt_fuzz_server_post(s, count ? "/v1/messages/count_tokens" : "/v1/messages?beta=true", data + count,
                             size - count, len);
}

static inline char *lt_fuzz_responses_send(lt_fuzz_server_t *s, const uint8_t *data, size_t size, size_t *len) {
  return lt_fuzz_server_post(s, "/v1/responses", data, size, len);
}

/* One fuzz input through the layer (the body of the targets): `send` as the target sends it (a request body), or,
 * NULL, as it is (a whole request).  Aborts when no connection could be made, or when a whole request got no
 * answer (a raw input may end in a connection closed without one). */
static inline void lt_fuzz_oai_input(char *(*send)(lt_fuzz_server_t *, const uint8_t *, size_t, size_t *),
                                     const uint8_t *data, size_t size) {
  static lt_fuzz_oai_t f;
  static int started;
  if (!started && lt_fuzz_oai_start(&f) < 0) abort();
  started = 1;
  size_t len;
  char *answer = send ? send(&f.srv, data, size, &len) : lt_fuzz_server_exchange(&f.srv, data, size, &len);
  if (!answer) abort();
  if ((send || len) && !lt_fuzz_status(answer)) abort();
  free(answer);
}

static inline void lt_fuzz_oai_stop(lt_fuzz_oai_t *f) {
  lt_oai_free(f->oai);
  lt_backend_close(f->backend, NULL, NULL);
  lt_fuzz_server_stop(&f->srv);
}

#endif
