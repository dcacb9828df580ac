/* infer/oai: the hooks the agent gateway builds on, with the layer on a
 * real HTTP server and the scripted backend as the engine; the loop runs in
 * this thread while a client thread calls over real sockets. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include "cJSON.h"
#include "infer/backend.h"
#include "infer/oai.h"
#include "util/error.h"
#include "util/json.h"

#define CALL "<tool_call><name>lookup</name><arg name=\"q\">paris</arg></tool_call>"

typedef struct {
  uv_loop_t loop;
  uv_async_t stop;
  lt_http_server_t *http;
  lt_backend_t *b;
  lt_oai_t *oai;
  int port;
  int session_tag;
  /* what the hooks saw */
  int refused, prepared, context_limits, answered;
  int ctx_need, max_before;
  float asked_temperature;
  int answered_tokens, answered_prompt;
  char answered_finish[32], answered_text[4096];
  int32_t answered_ids[4096];
  int watch_stop_seen;
} fx_t;

static int authorize(void *ud, const char *bearer, void **session) {
  fx_t *f = ud;
  if (!bearer || strcmp(bearer, "episode-1")) {
    f->refused++;
    return lt_error_set(LT_EINVAL, "no live episode has this token");
  }
  *session = &f->session_tag;
  return 0;
}

static int prepare(void *ud, lt_oai_plan_t *p) {
  fx_t *f = ud;
  cr_assert_eq(p->session, &f->session_tag);
  f->prepared++;
  f->asked_temperature = p->requested_temperature;
  p->sp = (lt_sampling_t){.temperature = 1.0f, .top_p = 1.0f}; /* the rollout's settings, not the request's */
  f->max_before = p->max_new;
  if (p->max_new > 120) p->max_new = 120; /* the rollout's budget */
  return 0;
}

static void context_limit(void *ud, void *session, int need, int max_context) {
  fx_t *f = ud;
  cr_assert_eq(session, &f->session_tag);
  f->context_limits++;
  f->ctx_need = need;
  cr_assert_gt(need, max_context - 1);
}

static void answered(void *ud, const lt_oai_result_t *r) {
  fx_t *f = ud;
  f->answered++;
  f->answered_prompt = r->plan->nprompt;
  f->answered_tokens = 0;
  for (int i = 0; i < r->nchoices; i++) f->answered_tokens += r->choices[i].n;
  snprintf(f->answered_finish, sizeof f->answered_finish, "%s", r->choices[0].finish_reason);
  snprintf(f->answered_text, sizeof f->answered_text, "%s", r->choices[0].text);
  memcpy(f->answered_ids, r->choices[0].tokens,
         sizeof(int32_t) * (size_t)(r->choices[0].n < 4096 ? r->choices[0].n : 4096));
}

/* The engine: one scripted session per choice. */
static int on_token(lt_gen_t *g, int32_t token, float logprob, int ntop, const int32_t *ids, const float *lps,
                    void *ud) {
  lt_oai_token_t t = {.token = token, .logprob = logprob, .ntop = ntop, .top_ids = ids, .top_logprobs = lps};
  return lt_oai_gen_token(ud, &t);
}

static void on_turn(lt_gen_t *g, const lt_turn_t *t, const lt_prefill_routing_t *pre, void *ud) {
  lt_gen_close(g);
  lt_oai_gen_end(ud, t->error, t->stopped, t->error_msg);
}

static int generate(void *ud, lt_oai_gen_t *og, const lt_oai_job_t *job, void **handle) {
  fx_t *f = ud;
  lt_gen_t *g;
  int rc = lt_gen_open(f->b, job->seed, &g);
  if (rc < 0) return rc;
  lt_gen_watch(g, job->plan->top_logprobs, on_token, og);
  if ((rc = lt_gen_turn(g, job->plan->prompt, job->plan->nprompt, job->plan->max_new, &job->plan->sp, on_turn, og)) <
      0) {
    lt_gen_close(g);
    return rc;
  }
  *handle = g;
  return 0;
}

static void cancel(void *ud, void *handle) { lt_gen_close(handle); }

static void on_request(lt_http_conn_t *c, const lt_http_req_t *req, void *ud) {
  fx_t *f = ud;
  if (!lt_oai_handle(f->oai, c, req)) lt_oai_send_error(c, 404, NULL, NULL, "no route %s", req->path);
}

static void on_stop(uv_async_t *a) {
  fx_t *f = a->data;
  lt_oai_free(f->oai);
  lt_http_close(f->http, NULL, NULL);
  lt_backend_close(f->b, NULL, NULL);
  uv_close((uv_handle_t *)&f->stop, NULL);
}

static void fx_init(fx_t *f, const char *answer) {
  memset(f, 0, sizeof *f);
  uv_loop_init(&f->loop);
  lt_backend_opts_t bo = {
      .kind = "scripted", .max_sessions = 8, .max_context = 600, .mean_tokens = 6, .answer = answer};
  cr_assert_eq(lt_backend_create(&f->loop, &bo, &f->b), 0, "%s", lt_error_msg());
  lt_backend_info_t bi;
  lt_backend_info(f->b, &bi);
  lt_oai_opts_t oo = {.tok = lt_backend_tokenizer(f->b),
                      .tool_format = LT_TOOLFMT_XML,
                      .model = "policy",
                      .vocab = bi.vocab,
                      .max_context = bi.max_context,
                      .hooks = {.ud = f,
                                .authorize = authorize,
                                .prepare = prepare,
                                .generate = generate,
                                .cancel = cancel,
                                .context_limit = context_limit,
                                .answered = answered}};
  cr_assert_eq(lt_oai_create(&oo, &f->oai), 0);
  lt_http_opts_t ho = {.host = "127.0.0.1", .port = 0, .max_body = 1 << 20, .max_conns = 16, .timeout_ms = 5000};
  cr_assert_eq(lt_http_listen(&f->loop, &ho, on_request, f, &f->http), 0);
  f->port = lt_http_port(f->http);
  uv_async_init(&f->loop, &f->stop, on_stop);
  f->stop.data = f;
}

/* A request to path with an optional bearer token; returns the whole answer. */
static char *ask_at(int port, const char *path, const char *token, const char *body) {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  cr_assert_eq(connect(s, (struct sockaddr *)&a, sizeof a), 0);
  char head[512];
  int n = snprintf(head, sizeof head, "POST %s HTTP/1.1\r\nHost: x\r\n%s%s%sContent-Length: %zu\r\n\r\n", path,
                   token ? "Authorization: Bearer " : "", token ? token : "", token ? "\r\n" : "", strlen(body));
  send(s, head, (size_t)n, MSG_NOSIGNAL);
  send(s, body, strlen(body), MSG_NOSIGNAL);
  size_t cap = 1 << 16, got = 0;
  char *out = calloc(1, cap);
  for (ssize_t r; got + 1 < cap && (r = recv(s, out + got, cap - got - 1, 0)) > 0;) got += (size_t)r;
  close(s);
  return out;
}

static char *ask(int port, const char *token, const char *body) {
  return ask_at(port, "/v1/chat/completions", token, body);
}

static cJSON *body_of(const char *answer) {
  const char *b = strstr(answer, "\r\n\r\n");
  return b ? cJSON_Parse(b + 4) : NULL;
}

static void *client(void *arg) {
  fx_t *f = arg;
  const char *req =
      "{\"model\": \"gpt-x\", \"messages\": [{\"role\": \"user\", \"content\": \"find paris\"}],"
      " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"lookup\"}}],"
      " \"temperature\": 0.2, \"max_tokens\": 32000}";
  /* Without a token, or with another episode's: 401 in OpenAI's shape, nothing generated. */
  char *a = ask(f->port, NULL, req);
  cr_expect(strstr(a, "HTTP/1.1 401") == a, "%s", a);
  cr_expect(strstr(a, "\"code\":\"invalid_api_key\"") && strstr(a, "no live episode"), "%s", a);
  free(a);
  a = ask(f->port, "episode-2", req);
  cr_expect(strstr(a, "HTTP/1.1 401") == a, "%s", a);
  free(a);
  cr_expect_eq(f->prepared, 0);
  /* With it: prepare saw the request's temperature, the answer is what answered() recorded. */
  a = ask(f->port, "episode-1", req);
  cJSON *j = body_of(a);
  cr_assert(j, "%s", a);
  cr_expect_eq(f->prepared, 1);
  cr_expect_float_eq(f->asked_temperature, 0.2f, 1e-6);
  cr_expect_eq(f->answered, 1);
  const cJSON *u = cJSON_GetObjectItem(j, "usage"), *ch = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
  cr_expect_eq(cJSON_GetObjectItem(u, "completion_tokens")->valueint, f->answered_tokens);
  cr_expect_eq(cJSON_GetObjectItem(u, "prompt_tokens")->valueint, f->answered_prompt);
  cr_expect_str_eq(cJSON_GetObjectItem(ch, "finish_reason")->valuestring, f->answered_finish);
  cr_expect_str_eq(f->answered_finish, "tool_calls");
  const cJSON *msg = cJSON_GetObjectItem(ch, "message");
  const cJSON *content = cJSON_GetObjectItem(msg, "content");
  cr_expect_str_eq(cJSON_IsString(content) ? content->valuestring : "", f->answered_text);
  cr_expect(!strstr(f->answered_text, "<tool_call>"), "%s", f->answered_text);
  const cJSON *fn = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(msg, "tool_calls"), 0), "function");
  cr_assert(fn, "%s", a);
  cr_expect_str_eq(cJSON_GetObjectItem(fn, "arguments")->valuestring, "{\"q\":\"paris\"}");
  cr_expect_eq(f->max_before, 600 - f->answered_prompt, "max_tokens 32000 clamped to the room left");
  cJSON_Delete(j);
  free(a);
  /* A stop string: the recorded tokens end with the one that completed it. */
  a = ask(f->port, "episode-1",
          "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"stop\": \"<name>\", \"seed\": 3}");
  cr_expect(strstr(a, "HTTP/1.1 200") == a, "%s", a);
  cr_expect_str_eq(f->answered_finish, "stop");
  cr_expect(f->answered_tokens > 6 && f->answered_ids[f->answered_tokens - 1] == '>', "last recorded token %d",
            f->answered_ids[f->answered_tokens - 1]);
  cr_expect(!strstr(f->answered_text, "<tool_call><name>") && strstr(f->answered_text, "<tool_call>"), "%s",
            f->answered_text);
  free(a);
  /* A context that no longer fits: the hook, then context_length_exceeded. */
  char big[1024];
  snprintf(big, sizeof big, "{\"messages\": [{\"role\": \"user\", \"content\": \"%0700d\"}]}", 7);
  a = ask(f->port, "episode-1", big);
  cr_expect(strstr(a, "HTTP/1.1 400") == a && strstr(a, "context_length_exceeded"), "%s", a);
  cr_expect(strstr(a, "\"param\":\"messages\"") && strstr(a, "maximum context length is 600 tokens"), "%s", a);
  cr_expect_eq(f->context_limits, 1);
  cr_expect_gt(f->ctx_need, 700);
  free(a);
  /* Each API says it in its own words and names its own field: Claude Code compacts on Anthropic's. */
  snprintf(big, sizeof big, "{\"max_tokens\": 8, \"messages\": [{\"role\": \"user\", \"content\": \"%0700d\"}]}", 7);
  a = ask_at(f->port, "/v1/messages", "episode-1", big);
  cr_expect(strstr(a, "HTTP/1.1 400") == a &&
                strstr(a, "\"message\":\"prompt is too long: ") /* bare: Claude Code anchors its match */ &&
                strstr(a, " tokens > 600 maximum\""),
            "%s", a);
  free(a);
  snprintf(big, sizeof big, "{\"input\": \"%0700d\"}", 7);
  a = ask_at(f->port, "/v1/responses", "episode-1", big);
  cr_expect(strstr(a, "HTTP/1.1 400") == a && strstr(a, "context_length_exceeded") && strstr(a, "\"param\":\"input\""),
            "%s", a);
  free(a);
  cr_expect_eq(f->context_limits, 3);
  uv_async_send(&f->stop);
  return NULL;
}

Test(oai, hooks_authorize_prepare_record_and_limit_calls, .timeout = 60) {
  fx_t f;
  fx_init(&f, CALL);
  pthread_t t;
  pthread_create(&t, NULL, client, &f);
  uv_run(&f.loop, UV_RUN_DEFAULT);
  pthread_join(t, NULL);
  cr_expect_eq(uv_loop_close(&f.loop), 0, "handles left open");
}

/* A policy that writes bytes which are not UTF-8 (an untrained one does): plain and streamed answers stay valid
 * UTF-8 JSON (U+FFFD in their place), which strict clients such as Python's json accept. */
static void *bad_bytes_client(void *arg) {
  fx_t *f = arg;
  const char *reqs[] = {"{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}",
                        "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"stream\": true}"};
  for (int i = 0; i < 2; i++) {
    char *a = ask(f->port, "episode-1", reqs[i]);
    const char *body = strstr(a, "\r\n\r\n");
    cr_assert(body && strstr(a, "HTTP/1.1 200") == a, "%s", a);
    cr_expect_eq(lt_json_utf8_check(body, strlen(body)), strlen(body), "answer %d is not UTF-8", i);
    /* (streamed, the text arrives a token per event) */
    cr_expect(strstr(body, i == 0 ? "ok \xEF\xBF\xBD\xEF\xBF\xBD done" : "\xEF\xBF\xBD"), "answer %d: %s", i, body);
    if (i == 0) {
      cJSON *j = body_of(a);
      cr_expect(j, "%s", a);
      cJSON_Delete(j);
    }
    free(a);
  }
  uv_async_send(&f->stop);
  return NULL;
}

Test(oai, bytes_that_are_not_utf8_reach_the_client_as_valid_json, .timeout = 60) {
  fx_t f;
  fx_init(&f, "ok \xff\xfe done");
  pthread_t t;
  pthread_create(&t, NULL, bad_bytes_client, &f);
  uv_run(&f.loop, UV_RUN_DEFAULT);
  pthread_join(t, NULL);
  cr_expect_eq(uv_loop_close(&f.loop), 0, "handles left open");
}

#include "tests/fuzz/oaiserve.h"
#include "tests/fuzz/seeds.h"

/* The OpenAI-layer fuzz target's seeds (chat and completions, streamed or not, tools, every error the decoder
 * names, chunked and oversized bodies) get the answers they are named for (tests/fuzz/fuzz_oai.c). */
Test(oai, fuzz_seed_corpus_answers_as_named, .timeout = 60) {
  lt_fuzz_oai_t f;
  cr_assert_eq(lt_fuzz_oai_start(&f), 0, "%s", lt_error_msg());
  cr_expect_geq(lt_fuzz_check_seeds(&f.srv, "oai"), 24);
  lt_fuzz_oai_stop(&f);
}

/* The Messages and Responses fuzz targets' seeds (request bodies: each API's shapes, streamed or not, tools and
 * tool results, what is accepted with no effect, every refusal the parsers name; tests/fuzz/fuzz_messages.c and
 * fuzz_responses.c) get the answers they are named for. */
Test(oai, messages_and_responses_fuzz_seeds_answer_as_named, .timeout = 60) {
  lt_fuzz_oai_t f;
  cr_assert_eq(lt_fuzz_oai_start(&f), 0, "%s", lt_error_msg());
  cr_expect_geq(lt_fuzz_check_seeds_as(&f.srv, "messages", lt_fuzz_messages_send), 28);
  cr_expect_geq(lt_fuzz_check_seeds_as(&f.srv, "responses", lt_fuzz_responses_send), 23);
  lt_fuzz_oai_stop(&f);
}
