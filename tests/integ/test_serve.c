/* `longtail serve` as a real process: the OpenAI-compatible API, its answers
 * checked against `longtail logprobs`, and a training run whose workers use
 * the `openai` backend against it. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cJSON.h"
#include "tests/support/harness.h"
#include "tests/support/live.h"

typedef struct {
  char *dir;
  char model[4200];
  pid_t pid;
  int port;
} served_t;

/* tokenizer_config: written into the model folder when not NULL; extra:
 * more serve arguments (up to 6, NULL-terminated), or NULL. */
static void serve_start_ex(served_t *s, const char *tag, const char *tokenizer_config, const char *const *extra) {
  s->dir = lt_test_tmpdir(tag);
  snprintf(s->model, sizeof s->model, "%s/m", s->dir);
  char cfg[4200];
  snprintf(cfg, sizeof cfg, "%s/configs/models/tiny-moe.json", lt_test_root());
  lt_run_t r;
  const char *init[] = {"longtail", "init", "--config", cfg, "--out", s->model, "--seed", "5", NULL};
  cr_assert_eq(lt_test_run(&r, NULL, 60, init), 0);
  cr_assert_eq(r.status, 0, "%s", r.err);
  lt_run_free(&r);
  if (tokenizer_config) {
    char p[4300];
    snprintf(p, sizeof p, "%s/tokenizer_config.json", s->model);
    cr_assert_eq(lt_test_write(p, tokenizer_config), 0);
  }
  const char *argv[16] = {"longtail", "serve", "--model", s->model, "--port", "0", "--slots", "4"};
  for (int i = 0; extra && extra[i] && i < 6; i++) argv[8 + i] = extra[i];
  s->pid = lt_test_spawn(s->dir, "serve", argv);
  cr_assert_gt(s->pid, 0);
  char out[4300];
  snprintf(out, sizeof out, "%s/serve.out", s->dir);
  char *url = lt_test_first_line(out, 30);
  cr_assert(url, "serve printed no address");
  const char *colon = strrchr(url, ':');
  s->port = colon ? atoi(colon + 1) : 0;
  free(url);
  cr_assert_gt(s->port, 0);
}

static void serve_start_with(served_t *s, const char *tag, const char *tokenizer_config) {
  serve_start_ex(s, tag, tokenizer_config, NULL);
}

static void serve_start(served_t *s, const char *tag) { serve_start_with(s, tag, NULL); }

static void serve_stop(served_t *s) {
  kill(s->pid, SIGTERM);
  cr_assert_eq(lt_test_wait(s->pid, 30), 0, "serve did not exit 0 on SIGTERM");
  lt_test_rmdir(s->dir);
}

/* The JSON body of an answer, and its status. */
static cJSON *call(int port, const char *method, const char *path, const char *body, int *status) {
  char *a = lt_test_http(port, method, path, body);
  cr_assert(a, "no answer from %s", path);
  *status = atoi(a + 9);
  const char *b = strstr(a, "\r\n\r\n");
  cJSON *j = b ? cJSON_Parse(b + 4) : NULL;
  free(a);
  return j;
}

static const cJSON *get(const cJSON *o, const char *path) {
  char tmp[256];
  snprintf(tmp, sizeof tmp, "%s", path);
  for (char *save, *k = strtok_r(tmp, ".", &save); k && o; k = strtok_r(NULL, ".", &save))
    o = (*k >= '0' && *k <= '9') ? cJSON_GetArrayItem(o, atoi(k)) : cJSON_GetObjectItemCaseSensitive(o, k);
  return o;
}

/* A path that is no route gets a 404 naming every route serve has, each API shape's included (the old one named
 * four), and a Messages body answers in Anthropic's shape, without an SDK. */
Test(serve, an_unknown_route_names_the_routes, .timeout = 120) {
  served_t s;
  serve_start(&s, "serve_404");
  int status;
  cJSON *j = call(s.port, "POST", "/v1/message", "{}", &status);
  const char *msg = cJSON_GetStringValue(get(j, "error.message"));
  cr_expect_eq(status, 404);
  static const char *routes[] = {"POST /v1/chat/completions",
                                 "POST /v1/completions",
                                 "POST /v1/messages,",
                                 "POST /v1/messages/count_tokens",
                                 "POST /v1/responses",
                                 "GET /v1/models",
                                 "GET /v1/models/{id}",
                                 "GET /health",
                                 "POST /update_weights_from_disk",
                                 "POST /v1/load_lora_adapter",
                                 "POST /v1/unload_lora_adapter"};
  for (size_t i = 0; i < sizeof routes / sizeof *routes; i++)
    cr_expect(msg && strstr(msg, routes[i]), "%s not named: %s", routes[i], msg ? msg : "no message");
  cJSON_Delete(j);
  j = call(s.port, "POST", "/v1/messages?beta=true",
           "{\"model\": \"m\", \"max_tokens\": 4, \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}", &status);
  cr_expect_eq(status, 200);
  const char *type = cJSON_GetStringValue(get(j, "type"));
  double out = cJSON_GetNumberValue(get(j, "usage.output_tokens"));
  cr_expect(type && !strcmp(type, "message") && out >= 1 && out <= 4, "not a message of up to 4 tokens");
  cJSON_Delete(j);
  serve_stop(&s);
}

/* A checkpoint with a chat_template: chat prompts are its rendering (the byte
 * tokenizer makes one token per byte), and a template that raises is a 400. */
Test(serve, chat_prompts_use_the_checkpoints_template, .timeout = 120) {
  served_t s;
  serve_start_with(
      &s, "serve_tpl",
      "{\"bos_token\": \"<B>\", \"chat_template\": \"{{ bos_token }}{% for m in messages %}"
      "{% if m.content == 'bad' %}{{ raise_exception('no bad words') }}{% endif %}[{{ m.role }}] {{ m.content }}|"
      "{% endfor %}{% if add_generation_prompt %}[assistant] {% endif %}\"}");
  int st;
  cJSON *j = call(s.port, "POST", "/v1/chat/completions",
                  "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"max_tokens\": 2, \"seed\": 1}", &st);
  cr_assert_eq(st, 200);
  cr_expect_eq(get(j, "usage.prompt_tokens")->valuedouble, strlen("<B>[user] hi|[assistant] "));
  cJSON_Delete(j);
  j = call(s.port, "POST", "/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": \"bad\"}]}", &st);
  cr_expect_eq(st, 400);
  char *body = cJSON_PrintUnformatted(j);
  cr_expect(body && strstr(body, "no bad words"), "%s", body);
  free(body);
  cJSON_Delete(j);
  serve_stop(&s);
}

Test(serve, openai_api_answers_match_the_reference_logprobs, .timeout = 120) {
  served_t s;
  serve_start(&s, "serve");
  int st;
  cJSON *j = call(s.port, "GET", "/health", NULL, &st);
  cr_expect(st == 200 && j && !strcmp(get(j, "status")->valuestring, "ok"));
  cJSON_Delete(j);
  j = call(s.port, "GET", "/v1/models", NULL, &st);
  cr_expect(st == 200 && !strcmp(get(j, "data.0.id")->valuestring, "m"), "models");
  cJSON_Delete(j);
  /* A completion from token ids, with the sampled tokens' ids and logprobs. */
  const char *req =
      "{\"prompt\": [3, 17, 42, 99], \"max_tokens\": 12, \"temperature\": 1.0, \"seed\": 11,"
      " \"logprobs\": 1, \"return_tokens_as_token_ids\": true}";
  j = call(s.port, "POST", "/v1/completions", req, &st);
  cr_assert_eq(st, 200);
  const cJSON *toks = get(j, "choices.0.logprobs.tokens"), *lps = get(j, "choices.0.logprobs.token_logprobs");
  int n = cJSON_GetArraySize(toks);
  cr_assert(n > 0 && n == cJSON_GetArraySize(lps));
  cr_expect_eq(get(j, "usage.completion_tokens")->valuedouble, n);
  cr_expect_eq(get(j, "usage.prompt_tokens")->valuedouble, 4);
  const char *fin = get(j, "choices.0.finish_reason")->valuestring;
  cr_expect(!strcmp(fin, n == 12 ? "length" : "stop"), "%s after %d tokens", fin, n);
  /* Same seed, same answer. */
  cJSON *j2 = call(s.port, "POST", "/v1/completions", req, &st);
  char *a1 = cJSON_PrintUnformatted(get(j, "choices.0.logprobs.tokens"));
  char *a2 = cJSON_PrintUnformatted(get(j2, "choices.0.logprobs.tokens"));
  cr_expect_str_eq(a1, a2);
  free(a1), free(a2);
  cJSON_Delete(j2);
  /* The served logprobs are the model's: `longtail logprobs` on prompt + completion agrees. */
  char line[8192];
  size_t len = (size_t)snprintf(line, sizeof line, "{\"tokens\": [3, 17, 42, 99");
  for (const cJSON *t = toks->child; t; t = t->next) {
    cr_assert(!strncmp(t->valuestring, "token_id:", 9), "%s", t->valuestring);
    len += (size_t)snprintf(line + len, sizeof line - len, ", %s", t->valuestring + 9);
  }
  snprintf(line + len, sizeof line - len, "]}\n");
  char in[4300];
  snprintf(in, sizeof in, "%s/seq.jsonl", s.dir);
  cr_assert_eq(lt_test_write(in, line), 0);
  lt_run_t r;
  const char *lpv[] = {"longtail", "logprobs", "--model", s.model, "--input", in, NULL};
  cr_assert_eq(lt_test_run(&r, NULL, 60, lpv), 0);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cJSON *ref = cJSON_Parse(r.out);
  lt_run_free(&r);
  const cJSON *rl = cJSON_GetObjectItem(ref, "logprobs");
  int i = 0;
  for (const cJSON *l = lps->child; l; l = l->next, i++)
    cr_expect(fabs(l->valuedouble - cJSON_GetArrayItem(rl, 4 + i)->valuedouble) < 1e-3,
              "token %d: served %g, reference %g", i, l->valuedouble, cJSON_GetArrayItem(rl, 4 + i)->valuedouble);
  cJSON_Delete(ref);
  cJSON_Delete(j);
  /* Chat: a message list in, an assistant message and per-token logprobs out. */
  j = call(s.port, "POST", "/v1/chat/completions",
           "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"max_tokens\": 5, \"logprobs\": true}", &st);
  cr_expect_eq(st, 200);
  cr_expect(cJSON_IsString(get(j, "choices.0.message.content")) &&
            !strcmp(get(j, "object")->valuestring, "chat.completion"));
  cr_expect_eq(cJSON_GetArraySize(get(j, "choices.0.logprobs.content")),
               (int)get(j, "usage.completion_tokens")->valuedouble);
  cJSON_Delete(j);
  /* Errors: the OpenAI error object with a 4xx status; the server keeps serving. */
  static const struct {
    const char *path, *body, *param;
    int status;
  } bad[] = {
      {"/v1/completions", "{\"prompt\": [1, 2], \"n\": 17}", "n", 400},
      {"/v1/completions", "{\"prompt\": [999999]}", "prompt", 400},
      {"/v1/completions", "{\"prompt\": \"x\", \"stop\": [1]}", "stop", 400},
      {"/v1/completions", "{\"prompt\": \"x\", \"echo\": true}", "echo", 400},
      {"/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"frobnicate\": 1}",
       "frobnicate", 400},
      {"/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image_url\"}]}]}",
       "messages[0].content[0].type", 400},
      {"/v1/completions", "[1, 2]", NULL, 400},
      {"/v1/chat/completions", "{\"messages\": []}", "messages", 400},
      {"/v1/nothing", "{}", NULL, 404},
  };
  for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
    j = call(s.port, "POST", bad[k].path, bad[k].body, &st);
    cr_expect_eq(st, bad[k].status, "%s %s: %d", bad[k].path, bad[k].body, st);
    cr_expect(j && cJSON_IsString(get(j, "error.message")), "%s: no error object", bad[k].body);
    if (bad[k].param)
      cr_expect(cJSON_IsString(get(j, "error.param")) && !strcmp(get(j, "error.param")->valuestring, bad[k].param));
    cJSON_Delete(j);
  }
  j = call(s.port, "GET", "/health", NULL, &st);
  cr_expect_eq(st, 200);
  cJSON_Delete(j);
  serve_stop(&s);
}

Test(serve, training_with_the_openai_backend_against_serve, .timeout = 180) {
  served_t s;
  serve_start(&s, "oai");
  char rd[4300], cfg[4300], mp[4400], ep[128], rl[160];
  snprintf(rd, sizeof rd, "%s/run", s.dir);
  snprintf(cfg, sizeof cfg, "%s/configs/smoke.json", lt_test_root());
  snprintf(mp, sizeof mp, "model.path=%s", s.model);
  snprintf(ep, sizeof ep, "workers.openai.endpoint=http://127.0.0.1:%d", s.port);
  snprintf(rl, sizeof rl, "workers.openai.reload_url=http://127.0.0.1:%d/update_weights_from_disk", s.port);
  lt_run_t r;
  const char *argv[] = {"longtail", "train", cfg,     "--run-dir", rd,  "--set", mp, "--set", "workers.backend=openai",
                        "--set",    ep,      "--set", rl,          NULL};
  cr_assert_eq(lt_test_run(&r, NULL, 150, argv), 0);
  cr_assert_eq(r.status, 0, "%s", r.err);
  lt_run_free(&r);
  /* Every task produced a trajectory that the learner took (consumed), dropped as too old (stale) or had not reached
   * when the run ended (ready: a last batch short of 32) — how many of each depends on how far the learner ran
   * ahead, which a loaded machine changes (92 consumed or stale under make test-asan) — none failed, some were
   * trained, and the learner saw the served logprobs as its own (same weights): the first step's mismatch is float
   * noise. */
  cr_assert_eq(lt_test_sh(&r, 30,
                          "sqlite3 %s/buffer.db \"SELECT count(*) FROM trajectories WHERE status IN "
                          "('consumed', 'stale', 'ready'); SELECT count(*) > 0 FROM trajectories WHERE status = "
                          "'consumed'; SELECT value < 1e-4 FROM metrics WHERE name = 'mismatch/abs_log_ratio' "
                          "AND step = 1;\"",
                          rd),
               0);
  cr_expect_str_eq(r.out, "96\n1\n1\n");
  lt_run_free(&r);
  /* The workers asked the server to load each new policy. */
  char log[4300];
  snprintf(log, sizeof log, "%s/serve.err", s.dir);
  char *l = lt_test_read(log);
  cr_expect(l && strstr(l, "/checkpoints/v1 ("), "serve was not asked to reload: %s", l ? l : "");
  free(l);
  serve_stop(&s);
}

/* Issue 19 (found 6): a weights update is verified before it is answered: a
 * missing folder, a folder without a checkpoint and a checkpoint holding a
 * NaN are refused (400) and the version stays; a good one is taken. */
static int update_weights(const served_t *s, const char *dir, cJSON **answer) {
  char body[4400];
  int st;
  snprintf(body, sizeof body, "{\"model_path\": \"%s\"}", dir);
  cJSON *j = call(s->port, "POST", "/update_weights_from_disk", body, &st);
  if (answer) *answer = j;
  else cJSON_Delete(j);
  return st;
}

Test(serve, update_weights_from_disk_verifies_before_answering, .timeout = 120) {
  served_t s;
  serve_start(&s, "serve-upd");
  char p[4300];
  snprintf(p, sizeof p, "%s/nope", s.dir);
  cr_expect_eq(update_weights(&s, p, NULL), 400, "a missing folder was taken");
  snprintf(p, sizeof p, "%s/garbage", s.dir);
  lt_run_t r;
  cr_assert_eq(
      lt_test_sh(&r, 10, "mkdir -p %s && echo '{}' > %s/config.json && head -c 300 /dev/urandom > %s/model.safetensors",
                 p, p, p),
      0);
  lt_run_free(&r);
  cr_expect_eq(update_weights(&s, p, NULL), 400, "a garbage folder was taken");
  /* The served model's own files, one float turned into a NaN. */
  snprintf(p, sizeof p, "%s/nan", s.dir);
  cr_assert_eq(
      lt_test_sh(&r, 10,
                 "cp -r %s %s && python3 -c \"import struct; f = open('%s/model.safetensors', 'r+b'); "
                 "n = struct.unpack('<Q', f.read(8))[0]; f.seek(8 + n); f.write(struct.pack('<f', float('nan')))\"",
                 s.model, p, p),
      0);
  cr_assert_eq(r.status, 0, "%s", r.err);
  lt_run_free(&r);
  cr_expect_eq(update_weights(&s, p, NULL), 400, "a checkpoint with a NaN was taken");
  cJSON *j;
  cr_expect_eq(update_weights(&s, s.model, &j), 200);
  const cJSON *v = get(j, "version");
  cr_expect(cJSON_IsNumber(v) && v->valueint == 1, "the refused updates moved the version");
  cJSON_Delete(j);
  serve_stop(&s);
}

#define WEATHER_CALL "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}</tool_call>"

static char *sdk_template(void) {
  char tc[4300];
  snprintf(tc, sizeof tc, "%s/tests/integ/openai-sdk/tokenizer_config.json", lt_test_root());
  char *cfg = lt_test_read(tc);
  cr_assert(cfg, "%s", tc);
  return cfg;
}

/* Runs tests/integ/openai-sdk/SCRIPT MODEL_URL SCRIPTED_URL (Node, the SDKs of tests/integ/agents) against two
 * serve processes with the SDK tests' chat template: the tiny builtin model, and the scripted policy whose answers
 * end in a get_weather call.  The script prints a line per check and exits 1 at the first that fails. */
static void sdk_script_drives_serve(const char *tag, const char *script) {
  lt_run_t r;
  lt_test_need_openai_sdk();
  char *cfg = sdk_template(), scripted_tag[64];
  served_t s, sc;
  snprintf(scripted_tag, sizeof scripted_tag, "%s_scripted", tag);
  serve_start_with(&s, tag, cfg);
  serve_start_ex(&sc, scripted_tag, cfg, (const char *[]){"--scripted", WEATHER_CALL, NULL});
  free(cfg);
  lt_test_sh(
      &r, 200,
      "LT_NODE_PATH='%s/tests/integ/agents/node_modules' node '%s/tests/integ/openai-sdk/%s' http://127.0.0.1:%d "
      "http://127.0.0.1:%d 2>&1",
      lt_test_root(), lt_test_root(), script, s.port, sc.port);
  cr_expect_eq(r.status, 0, "%s%s", r.out, r.err);
  cr_log_info("%s", r.out);
  lt_run_free(&r);
  serve_stop(&sc);
  serve_stop(&s);
}

/* The official `openai` npm SDK, pinned, against serve (tests/integ/openai-sdk/sdk.mjs):
 * /v1/models, a multi-call chat, streaming with include_usage (same text and
 * usage as the plain call), stop, n = 2, top_logprobs, a 400 naming an
 * unsupported field, and a tools round trip against the scripted policy.  The
 * SDK is the agent tests' (tests/integ/agents/package-lock.json). */
Test(serve, the_openai_sdk_drives_serve, .timeout = 400) { sdk_script_drives_serve("serve_sdk", "sdk.mjs"); }

/* The official `@anthropic-ai/sdk` (Messages API) and `openai` (Responses API) SDKs, pinned, against serve
 * (tests/integ/openai-sdk/agent_apis.mjs): a call and its stream (parsed by the SDKs' MessageStream and
 * ResponseStream) agree in text, usage and stop reason; count_tokens; thinking turns the template's
 * enable_thinking; stop_sequences, max_tokens and max_output_tokens; the 400s in each API's error shape; tool
 * calls and their results round trip, streamed or not, against the scripted policy; an unknown route's 404 names
 * the routes. */
Test(serve, the_anthropic_and_responses_sdks_drive_serve, .timeout = 400) {
  sdk_script_drives_serve("serve_apis", "agent_apis.mjs");
}

/* Streaming over plain HTTP: chunked server-sent events, the role first, a
 * usage event with empty choices, then [DONE]; the tokens streamed are those
 * counted. */
Test(serve, stream_is_server_sent_events_with_usage, .timeout = 120) {
  served_t s;
  serve_start(&s, "serve_sse");
  char *a = lt_test_http(s.port, "POST", "/v1/chat/completions",
                         "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"max_tokens\": 6, \"seed\": 4,"
                         " \"stream\": true, \"stream_options\": {\"include_usage\": true}, \"logprobs\": true}");
  cr_assert(a);
  cr_expect(strstr(a, "HTTP/1.1 200") == a && strstr(a, "Content-Type: text/event-stream") &&
                strstr(a, "Transfer-Encoding: chunked"),
            "%s", a);
  cr_expect(strstr(a, "\"delta\":{\"role\":\"assistant\",\"content\":\"\"}"), "no role event: %s", a);
  const char *done = strstr(a, "data: [DONE]\n\n");
  cr_expect(done && strstr(done, "\r\n0\r\n\r\n"), "no [DONE] and last chunk: %s", a);
  int ntok = 0, usage = -1;
  for (const char *p = strstr(a, "data: {"); p; p = strstr(p + 1, "data: {")) {
    const char *e = strstr(p, "\n\n");
    cr_assert(e);
    char *ev = strndup(p + 6, (size_t)(e - p - 6));
    cJSON *j = cJSON_Parse(ev);
    cr_assert(j, "event %s", ev);
    ntok += cJSON_GetArraySize(get(j, "choices.0.logprobs.content"));
    if (cJSON_IsObject(get(j, "usage"))) {
      cr_expect_eq(cJSON_GetArraySize(get(j, "choices")), 0);
      usage = (int)get(j, "usage.completion_tokens")->valuedouble;
    }
    cJSON_Delete(j);
    free(ev);
  }
  cr_expect(usage > 0 && usage == ntok, "usage %d, streamed tokens %d", usage, ntok);
  free(a);
  /* A client that leaves mid-stream: its generation stops, the server goes on. */
  for (int k = 0; k < 3; k++) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)s.port)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    static const char body[] = "{\"prompt\": [1, 2], \"max_tokens\": 900, \"stream\": true}";
    char req[256];
    int n = snprintf(req, sizeof req, "POST /v1/completions HTTP/1.1\r\nContent-Length: %zu\r\n\r\n%s", sizeof body - 1,
                     body);
    cr_assert_eq(send(fd, req, (size_t)n, MSG_NOSIGNAL), n);
    char buf[512];
    cr_expect_gt(recv(fd, buf, sizeof buf, 0), 0);
    close(fd);
  }
  int st;
  cJSON *j = call(s.port, "POST", "/v1/completions", "{\"prompt\": [1, 2], \"max_tokens\": 3}", &st);
  cr_expect_eq(st, 200);
  cJSON_Delete(j);
  serve_stop(&s);
}

/* n, stop and top_logprobs over plain HTTP, and a prompt that fills the
 * context: OpenAI's context_length_exceeded, the server keeps serving. */
Test(serve, choices_stop_alternatives_and_a_full_context, .timeout = 120) {
  served_t s;
  serve_start_ex(&s, "serve_n", NULL, (const char *[]){"--max-context", "64", NULL});
  int st;
  cJSON *j = call(s.port, "POST", "/v1/completions",
                  "{\"prompt\": [5, 6, 7], \"max_tokens\": 5, \"n\": 3, \"seed\": 2, \"logprobs\": 4}", &st);
  cr_assert_eq(st, 200);
  cr_expect_eq(cJSON_GetArraySize(get(j, "choices")), 3);
  int total = 0;
  for (int i = 0; i < 3; i++) {
    char k[64];
    snprintf(k, sizeof k, "choices.%d.logprobs.top_logprobs", i);
    const cJSON *tops = get(j, k);
    total += cJSON_GetArraySize(tops);
    for (const cJSON *t = tops ? tops->child : NULL; t; t = t->next) {
      cr_expect_geq(cJSON_GetArraySize(t), 1); /* distinct texts: byte tokens that decode alike share one */
      double prev = 0, sum = 0;
      for (const cJSON *e = t->child; e; e = e->next) sum += exp(e->valuedouble), prev = e->valuedouble;
      cr_expect(sum <= 1 + 1e-6 && prev <= 0, "alternatives are probabilities");
    }
  }
  cr_expect_eq(get(j, "usage.completion_tokens")->valuedouble, total);
  cJSON_Delete(j);
  j = call(s.port, "POST", "/v1/completions", "{\"prompt\": [5, 6, 7], \"max_tokens\": 8, \"seed\": 2}", &st);
  const char *text = get(j, "choices.0.text")->valuestring;
  char stop[2] = {0};
  for (const char *p = text + 1; *p && !stop[0]; p++)
    if (*p > ' ' && *p < 127 && *p != '"' && *p != '\\') stop[0] = *p;
  if (stop[0]) {
    char body[256];
    snprintf(body, sizeof body, "{\"prompt\": [5, 6, 7], \"max_tokens\": 8, \"seed\": 2, \"stop\": \"%s\"}", stop);
    cJSON *c = call(s.port, "POST", "/v1/completions", body, &st);
    cr_expect_eq(st, 200);
    cr_expect_eq(strncmp(get(c, "choices.0.text")->valuestring, text, strlen(get(c, "choices.0.text")->valuestring)),
                 0);
    cr_expect_eq(strlen(get(c, "choices.0.text")->valuestring), (size_t)(strchr(text, stop[0]) - text));
    cr_expect_str_eq(get(c, "choices.0.finish_reason")->valuestring, "stop");
    cJSON_Delete(c);
  }
  cJSON_Delete(j);
  char big[2048];
  snprintf(big, sizeof big, "{\"messages\": [{\"role\": \"user\", \"content\": \"%0100d\"}]}", 0);
  j = call(s.port, "POST", "/v1/chat/completions", big, &st);
  cr_expect_eq(st, 400);
  cr_expect(cJSON_IsString(get(j, "error.code")) &&
            !strcmp(get(j, "error.code")->valuestring, "context_length_exceeded"));
  cJSON_Delete(j);
  j = call(s.port, "GET", "/v1/models/anything", NULL, &st);
  cr_expect(st == 200 && !strcmp(get(j, "id")->valuestring, "anything"));
  cJSON_Delete(j);
  /* the target is percent-decoded once, by net/http: an id with a '/' or a space, as SDKs encode it */
  j = call(s.port, "GET", "/v1/models/org%2Fpolicy%20v1?beta=true", NULL, &st);
  const cJSON *id = get(j, "id");
  cr_expect(st == 200 && cJSON_IsString(id) && !strcmp(id->valuestring, "org/policy v1"), "%d %s", st,
            cJSON_IsString(id) ? id->valuestring : "(no id)");
  cJSON_Delete(j);
  serve_stop(&s);
}

/* What agent programs send: a 48 KB system prompt, several tool schemas,
 * max_tokens far beyond the context, stream; the policy's tool call comes
 * back parsed. */
Test(serve, long_agent_requests_with_tools, .timeout = 120) {
  served_t s;
  char *cfg = sdk_template();
  serve_start_ex(&s, "serve_agentreq", cfg,
                 (const char *[]){"--scripted", WEATHER_CALL, "--max-context", "65536", NULL});
  free(cfg);
  cJSON *body = cJSON_CreateObject(), *msgs = cJSON_AddArrayToObject(body, "messages"),
        *tools = cJSON_AddArrayToObject(body, "tools");
  char *sys = malloc(48 * 1024 + 1);
  for (int i = 0; i < 48 * 1024; i++) sys[i] = "You are a careful agent. "[i % 25];
  sys[48 * 1024] = 0;
  cJSON *m = cJSON_CreateObject();
  cJSON_AddStringToObject(m, "role", "system");
  cJSON_AddStringToObject(m, "content", sys);
  cJSON_AddItemToArray(msgs, m);
  free(sys);
  m = cJSON_CreateObject();
  cJSON_AddStringToObject(m, "role", "user");
  cJSON_AddStringToObject(m, "content", "Weather in Paris?");
  cJSON_AddItemToArray(msgs, m);
  for (int i = 0; i < 6; i++) {
    char t[512];
    snprintf(t, sizeof t,
             "{\"type\": \"function\", \"function\": {\"name\": \"%s\", \"description\": \"tool %d\","
             " \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}}}}",
             i ? "other_tool" : "get_weather", i);
    cJSON_AddItemToArray(tools, cJSON_Parse(t));
  }
  cJSON_AddNumberToObject(body, "max_tokens", 32000);
  char *b = cJSON_PrintUnformatted(body);
  int st;
  cJSON *j = call(s.port, "POST", "/v1/chat/completions", b, &st);
  cr_expect_eq(st, 200);
  cr_expect_str_eq(get(j, "choices.0.finish_reason")->valuestring, "tool_calls");
  cr_expect_str_eq(get(j, "choices.0.message.tool_calls.0.function.name")->valuestring, "get_weather");
  cr_expect_str_eq(get(j, "choices.0.message.tool_calls.0.function.arguments")->valuestring, "{\"city\":\"Paris\"}");
  cr_expect_gt(get(j, "usage.prompt_tokens")->valuedouble, 48 * 1024);
  cJSON_Delete(j);
  cJSON_AddTrueToObject(body, "stream");
  free(b);
  b = cJSON_PrintUnformatted(body);
  char *a = lt_test_http(s.port, "POST", "/v1/chat/completions", b);
  cr_expect(a && strstr(a, "\"finish_reason\":\"tool_calls\"") && strstr(a, "\"name\":\"get_weather\"") &&
                strstr(a, "data: [DONE]"),
            "%s", a);
  free(a);
  free(b);
  cJSON_Delete(body);
  serve_stop(&s);
}

/* The greedy logprobs serve gives for `model` (NULL: none named) on prompt [3, 17, 42, 99], and the difference to what
 * `longtail logprobs --model ref` gives for the same tokens (the largest over the completion). */
static double served_vs(const served_t *s, const char *model, const char *ref) {
  char req[512];
  snprintf(req, sizeof req,
           "{%s%s%s\"prompt\": [3, 17, 42, 99], \"max_tokens\": 6, \"temperature\": 0, \"logprobs\": 1,"
           " \"return_tokens_as_token_ids\": true}",
           model ? "\"model\": \"" : "", model ? model : "", model ? "\", " : "");
  int st;
  cJSON *j = call(s->port, "POST", "/v1/completions", req, &st);
  cr_assert_eq(st, 200);
  const cJSON *toks = get(j, "choices.0.logprobs.tokens"), *lps = get(j, "choices.0.logprobs.token_logprobs");
  char line[4096], in[4300];
  size_t len = (size_t)snprintf(line, sizeof line, "{\"tokens\": [3, 17, 42, 99");
  for (const cJSON *t = toks->child; t; t = t->next)
    len += (size_t)snprintf(line + len, sizeof line - len, ", %s", t->valuestring + 9);
  snprintf(line + len, sizeof line - len, "]}\n");
  snprintf(in, sizeof in, "%s/lora-seq.jsonl", s->dir);
  cr_assert_eq(lt_test_write(in, line), 0);
  lt_run_t r;
  const char *lpv[] = {"longtail", "logprobs", "--model", ref, "--input", in, NULL};
  cr_assert_eq(lt_test_run(&r, NULL, 60, lpv), 0);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cJSON *rj = cJSON_Parse(r.out);
  lt_run_free(&r);
  double worst = 0;
  int i = 0;
  for (const cJSON *l = lps->child; l; l = l->next, i++)
    worst =
        fmax(worst, fabs(l->valuedouble - cJSON_GetArrayItem(cJSON_GetObjectItem(rj, "logprobs"), 4 + i)->valuedouble));
  cJSON_Delete(rj);
  cJSON_Delete(j);
  return worst;
}

/* A LoRA run whose workers use the openai backend with workers.openai.lora: each version goes to serve as an adapter
 * by name (/v1/load_lora_adapter) and the workers' requests name it, so the learner sees its own logprobs; then serve's
 * adapters by name: loaded, chosen by a request's model, refused twice, unloaded.  Synchronous, so that step 2 trains
 * on trajectories of v1 however loaded the machine. */
Test(serve, lora_adapters_by_name_and_a_lora_run_against_serve, .timeout = 240) {
  served_t s;
  serve_start(&s, "oai-lora");
  char rd[4300], cfg[4300], mp[4400], ep[128], v3[4400], body[4600];
  snprintf(rd, sizeof rd, "%s/run", s.dir);
  snprintf(cfg, sizeof cfg, "%s/configs/smoke.json", lt_test_root());
  snprintf(mp, sizeof mp, "model.path=%s", s.model);
  snprintf(ep, sizeof ep, "workers.openai.endpoint=http://127.0.0.1:%d", s.port);
  lt_run_t r;
  const char *argv[] = {"longtail",
                        "train",
                        cfg,
                        "--run-dir",
                        rd,
                        "--set",
                        mp,
                        "--set",
                        "workers.backend=openai",
                        "--set",
                        ep,
                        "--set",
                        "workers.openai.lora=true",
                        "--set",
                        "learner.lora.rank=8",
                        "--set",
                        "learner.lr=1e-3",
                        "--set",
                        "rewards.length_penalty.target=4",
                        "--set",
                        "scheduler.mode=sync",
                        "--set",
                        "learner.steps=3",
                        NULL};
  cr_assert_eq(lt_test_run(&r, NULL, 200, argv), 0);
  cr_assert_eq(r.status, 0, "%s", r.err);
  lt_run_free(&r);
  /* The workers sampled from the learner's adapters: a trajectory of v1 has, token for token, the logprobs
   * `longtail logprobs` gives under v1 (float noise apart). */
  cr_assert_eq(lt_test_sh(&r, 60, "'%s' export %s --format tokens | grep -m1 '\"version_min\":1,\"version_max\":1,'",
                          lt_test_bin(), rd),
               0);
  cJSON *t = cJSON_Parse(r.out);
  lt_run_free(&r);
  cr_assert_not_null(t, "no trajectory sampled from v1");
  char *ids = cJSON_PrintUnformatted(cJSON_GetObjectItem(t, "tokens")), in[4400], line[65536];
  snprintf(line, sizeof line, "{\"tokens\": %s}\n", ids);
  free(ids);
  snprintf(in, sizeof in, "%s/v1.jsonl", s.dir);
  cr_assert_eq(lt_test_write(in, line), 0);
  snprintf(v3, sizeof v3, "%s/checkpoints/v1", rd);
  const char *lpv[] = {"longtail", "logprobs", "--model", v3, "--input", in, NULL};
  cr_assert_eq(lt_test_run(&r, NULL, 60, lpv), 0);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cJSON *ref = cJSON_Parse(r.out);
  lt_run_free(&r);
  const cJSON *vs = cJSON_GetObjectItem(t, "versions"), *lp = cJSON_GetObjectItem(t, "logprobs");
  int checked = 0;
  for (int i = 0; i < cJSON_GetArraySize(vs); i++) {
    if (cJSON_GetArrayItem(vs, i)->valueint != 1) continue;
    double want = cJSON_GetArrayItem(cJSON_GetObjectItem(ref, "logprobs"), i)->valuedouble;
    cr_expect(fabs(cJSON_GetArrayItem(lp, i)->valuedouble - want) < 1e-3, "token %d: sampled at %g, v1 gives %g", i,
              cJSON_GetArrayItem(lp, i)->valuedouble, want);
    checked++;
  }
  cr_assert_gt(checked, 0);
  cJSON_Delete(ref);
  cJSON_Delete(t);
  char log[4300];
  snprintf(log, sizeof log, "%s/serve.err", s.dir);
  char *l = lt_test_read(log);
  cr_expect(l && strstr(l, "LoRA adapter longtail-v1 loaded from"), "serve loaded no adapter: %s", l ? l : "");
  free(l);
  /* By name: the request's model chooses the adapter; any other name is the served model. */
  snprintf(v3, sizeof v3, "%s/checkpoints/v3", rd);
  snprintf(body, sizeof body, "{\"lora_name\": \"v3\", \"lora_path\": \"%s\"}", v3);
  char *a = lt_test_http(s.port, "POST", "/v1/load_lora_adapter", body);
  cr_assert(a && atoi(a + 9) == 200 && strstr(a, "Success: LoRA adapter 'v3' added successfully."), "%s", a ? a : "");
  free(a);
  int st;
  cJSON_Delete(call(s.port, "POST", "/v1/load_lora_adapter", body, &st));
  cr_expect_eq(st, 400, "loaded twice");
  cr_expect_lt(served_vs(&s, "v3", v3), 1e-3, "the adapter's answer is not v3's");
  cr_expect_lt(served_vs(&s, "m", s.model), 1e-3, "the served model's answer is not the base's");
  cr_expect_gt(served_vs(&s, "v3", s.model), 1e-3, "v3 answered as the base");
  a = lt_test_http(s.port, "POST", "/v1/unload_lora_adapter", "{\"lora_name\": \"v3\"}");
  cr_assert(a && atoi(a + 9) == 200, "%s", a ? a : "");
  free(a);
  cJSON_Delete(call(s.port, "POST", "/v1/unload_lora_adapter", "{\"lora_name\": \"v3\"}", &st));
  cr_expect_eq(st, 404);
  cJSON_Delete(call(s.port, "POST", "/v1/load_lora_adapter", "{\"lora_name\": \"x\"}", &st));
  cr_expect_eq(st, 400, "no lora_path");
  serve_stop(&s);
}
