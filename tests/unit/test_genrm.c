/* Judge rewards (GenRM, verifier, rubric, the reasoning check) over real HTTP: against a
 * fault-injecting OpenAI-compatible endpoint written here (timeouts, 5xx, 4xx,
 * garbage, replies without a verdict) and against `longtail serve`. */
#include <criterion/criterion.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "cli/commands.h"
#include "net/http.h"
#include "rewards/reward.h"
#include "tests/support/harness.h"
#include "util/error.h"

/* ---- the fault-injecting endpoint ---- */

typedef struct {
  const char *const
      *script; /* per request: "500", "400", "hang", "garbage", "noverdict", "slow:<content>", else content */
  int nscript, requests, inflight, max_inflight;
  char *last_body;
  uv_loop_t *loop;
} fault_t;

typedef struct {
  lt_http_conn_t *c;
  fault_t *f;
  char *content;
  uv_timer_t t;
} pending_t;

static void reply_ok(lt_http_conn_t *c, const char *content) {
  cJSON *o = cJSON_CreateObject(), *ch = cJSON_AddArrayToObject(o, "choices"), *one = cJSON_CreateObject();
  cJSON *m = cJSON_AddObjectToObject(one, "message");
  cJSON_AddStringToObject(m, "role", "assistant");
  cJSON_AddStringToObject(m, "content", content);
  cJSON_AddItemToArray(ch, one);
  char *s = cJSON_PrintUnformatted(o);
  lt_http_respond(c, 200, "application/json", s, strlen(s));
  free(s);
  cJSON_Delete(o);
}

static void pending_closed(uv_handle_t *h) {
  pending_t *p = h->data;
  free(p->content);
  free(p);
}

static void slow_reply(uv_timer_t *t) {
  pending_t *p = t->data;
  p->f->inflight--;
  if (lt_http_conn_alive(p->c)) reply_ok(p->c, p->content);
  uv_close((uv_handle_t *)&p->t, pending_closed);
}

static void fault_handler(lt_http_conn_t *c, const lt_http_req_t *req, void *ud) {
  fault_t *f = ud;
  int i = f->requests++;
  free(f->last_body);
  f->last_body = strdup(req->body);
  const char *what = f->nscript ? f->script[i < f->nscript ? i : f->nscript - 1] : "noverdict";
  if (strcmp(what, "500") == 0) lt_http_respond(c, 500, "text/plain", "boom", 4);
  else if (strcmp(what, "400") == 0) lt_http_respond(c, 400, "application/json", "{\"error\":\"bad\"}", 15);
  else if (strcmp(what, "hang") == 0) {
  } /* never answers: the client's timeout must fire (the server frees it at close) */
  else if (strcmp(what, "garbage") == 0)
    lt_http_respond(c, 200, "application/json", "<html>", 6);
  else if (strcmp(what, "noverdict") == 0) reply_ok(c, "I think it is fine.");
  else if (strncmp(what, "slow:", 5) == 0) {
    pending_t *p = calloc(1, sizeof *p);
    p->c = c, p->f = f, p->content = strdup(what + 5);
    if (++f->inflight > f->max_inflight) f->max_inflight = f->inflight;
    uv_timer_init(f->loop, &p->t);
    p->t.data = p;
    uv_timer_start(&p->t, slow_reply, 50, 0);
  } else reply_ok(c, what);
}

typedef struct {
  uv_loop_t loop;
  lt_http_server_t *srv;
  fault_t f;
  lt_rewarder_t *rw;
  int n;
  lt_reward_result_t res[16];
} rig_t;

static void on_res(lt_reward_result_t *res, void *ud) {
  rig_t *g = ud;
  g->res[g->n++] = *res;
}

/* A rewarder whose judge endpoint is the fault server (or `endpoint` when given). */
static void rig_start(rig_t *g, const char *const *script, int n, const char *rewards_json, const char *endpoint) {
  memset(g, 0, sizeof *g);
  uv_loop_init(&g->loop);
  g->f = (fault_t){.script = script, .nscript = n, .loop = &g->loop};
  lt_http_opts_t o = {.host = "127.0.0.1", .port = 0, .max_body = 1 << 20, .max_conns = 64, .timeout_ms = 5000};
  cr_assert_eq(lt_http_listen(&g->loop, &o, fault_handler, &g->f, &g->srv), 0, "%s", lt_error_msg());
  char url[128], json[4096];
  snprintf(url, sizeof url, "http://127.0.0.1:%d", lt_http_port(g->srv));
  snprintf(
      json, sizeof json,
      "{\"rewards\": {\"genrm\": {\"endpoint\": \"%s\", \"model\": \"judge\", \"backoff_ms\": 1, \"timeout_ms\": 2000%s}}}",
      endpoint ? endpoint : url, rewards_json);
  lt_config_t cfg;
  cr_assert_eq(lt_config_from_json(&cfg, cJSON_Parse(json), NULL, 0, lt_all_schemas, lt_all_nschemas), 0, "%s: %s",
               lt_error_msg(), json);
  cr_assert_eq(lt_rewarder_create(&g->loop, &cfg, &g->rw), 0, "%s", lt_error_msg());
  lt_config_free(&cfg);
}

static void rig_score(rig_t *g, const char *domain, const char *response, int tokens) {
  cJSON *ref = cJSON_Parse("{\"answer\": \"The reference answer.\"}");
  lt_reward_case_t k = {
      .domain = domain, .prompt = "Q?", .response = response, .reference = ref, .response_tokens = tokens};
  cr_assert_eq(lt_rewarder_score(g->rw, &k, on_res, g), 0, "%s", lt_error_msg());
  cJSON_Delete(ref); /* the rewarder copies what it needs */
}

static void rig_wait(rig_t *g, int n) {
  for (int i = 0; i < 2000 && g->n < n; i++) uv_run(&g->loop, UV_RUN_ONCE);
  cr_assert_eq(g->n, n);
}

static void rig_stop(rig_t *g) {
  lt_rewarder_close(g->rw, NULL, NULL);
  lt_http_close(g->srv, NULL, NULL);
  uv_run(&g->loop, UV_RUN_DEFAULT);
  cr_expect_eq(uv_loop_close(&g->loop), 0, "handles left open");
  for (int i = 0; i < g->n; i++) {
    cJSON_Delete(g->res[i].components);
    free(g->res[i].error);
  }
  free(g->f.last_body);
}

static double comp(const lt_reward_result_t *r, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(r->components, k);
  cr_assert(cJSON_IsNumber(v), "component %s missing", k);
  return v->valuedouble;
}

Test(genrm, transient_failures_are_retried_then_the_win_rate_is_the_reward) {
  const char *script[] = {"500", "garbage", "noverdict", "Better. <confidence>8</confidence>"};
  rig_t g;
  rig_start(&g, script, 4, ", \"retries\": 3}, \"type\": \"genrm\", \"domains\": {}, \"rule\": {\"tolerance\": 0",
            NULL);
  rig_score(&g, "chat", "A candidate.", 10);
  rig_wait(&g, 1);
  cr_expect_eq(g.res[0].status, 0, "%s", g.res[0].error);
  cr_expect_eq(g.res[0].attempts, 4);
  cr_expect_eq(g.f.requests, 4);
  cr_expect_float_eq(g.res[0].reward, 1 / (1 + exp(-3.0)), 1e-9);
  cr_expect_float_eq(comp(&g.res[0], "genrm_confidence"), 8, 1e-12);
  /* The request carried the question, response and reference, and the model. */
  cJSON *body = cJSON_Parse(g.f.last_body);
  const char *content = cJSON_GetArrayItem(cJSON_GetObjectItem(body, "messages"), 0)->child->next->valuestring;
  cr_expect(strstr(content, "Q?") && strstr(content, "A candidate.") && strstr(content, "The reference answer."), "%s",
            content);
  cr_expect_str_eq(cJSON_GetObjectItem(body, "model")->valuestring, "judge");
  cJSON_Delete(body);
  rig_stop(&g);
}

Test(genrm, a_reward_that_cannot_be_obtained_fails_without_a_value) {
  const char *s500[] = {"500"};
  rig_t g;
  rig_start(&g, s500, 1, ", \"retries\": 2}, \"type\": \"genrm\", \"rule\": {\"tolerance\": 0", NULL);
  rig_score(&g, NULL, "x", 1);
  rig_wait(&g, 1);
  cr_expect_neq(g.res[0].status, 0);
  cr_expect_eq(g.res[0].attempts, 3);
  cr_expect(strstr(g.res[0].error, "HTTP 500"), "%s", g.res[0].error);
  cr_expect_null(g.res[0].components->child, "a failed reward has no components");
  rig_stop(&g);

  const char *s400[] = {"400"}; /* a client error is not retried */
  rig_start(&g, s400, 1, ", \"retries\": 5}, \"type\": \"genrm\", \"rule\": {\"tolerance\": 0", NULL);
  rig_score(&g, NULL, "x", 1);
  rig_wait(&g, 1);
  cr_expect_neq(g.res[0].status, 0);
  cr_expect_eq(g.res[0].attempts, 1);
  rig_stop(&g);

  const char *hang[] = {"hang", "<confidence>5</confidence>"}; /* a timeout is */
  rig_start(&g, hang, 2, ", \"retries\": 1, \"timeout_ms\": 300}, \"type\": \"genrm\", \"rule\": {\"tolerance\": 0",
            NULL);
  rig_score(&g, NULL, "x", 1);
  rig_wait(&g, 1);
  cr_expect_eq(g.res[0].status, 0, "%s", g.res[0].error);
  cr_expect_eq(g.res[0].attempts, 2);
  cr_expect_float_eq(g.res[0].reward, 0.5, 1e-12);
  rig_stop(&g);

  /* Nobody listening: unreachable after the retries. */
  rig_start(&g, NULL, 0, ", \"retries\": 1}, \"type\": \"genrm\", \"rule\": {\"tolerance\": 0", "http://127.0.0.1:1");
  rig_score(&g, NULL, "x", 1);
  rig_wait(&g, 1);
  cr_expect_eq(g.res[0].status, LT_EUNREACH, "%d %s", g.res[0].status, g.res[0].error);
  cr_expect_eq(g.res[0].attempts, 2);
  rig_stop(&g);
}

Test(genrm, length_penalty_and_rule_flags) {
  const char *script[] = {"<confidence>8</confidence>"};
  rig_t g;
  rig_start(
      &g, script, 1,
      ", \"length_penalty\": {\"target\": 100, \"coef\": 1}, \"zero_patterns\": [\"\\\\[citation needed\\\\]\"]}, "
      "\"language\": {\"script\": \"latin\"}, \"type\": \"genrm\", \"rule\": {\"tolerance\": 0",
      NULL);
  rig_score(&g, NULL, "Long answer", 300);
  rig_wait(&g, 1);
  rig_score(&g, NULL, "As shown [citation needed].", 10);
  rig_wait(&g, 2);
  rig_score(&g, NULL, "Ответ на русском языке", 10);
  rig_wait(&g, 3);
  cr_expect_eq(g.f.requests, 1, "flagged responses are zeroed without a judge call");
  /* confidence 8 - 2 (200 excess tokens / target 100) - center 5 = 1; the language shaping (coef 0.1) adds 0.1. */
  cr_expect_float_eq(comp(&g.res[0], "genrm_win_rate"), 1 / (1 + exp(-1.0)), 1e-9);
  cr_expect_float_eq(comp(&g.res[0], "genrm_length_penalty"), -2, 1e-12);
  cr_expect_float_eq(g.res[0].reward, 1 / (1 + exp(-1.0)) + 0.1, 1e-9);
  cr_expect_float_eq(comp(&g.res[1], "genrm_zeroed_pattern"), 1, 0);
  cr_expect_float_eq(comp(&g.res[2], "genrm_zeroed_language"), 1, 0);
  cr_expect_eq(g.res[1].status, 0);
  /* Zeroed stays zeroed: the language bonus does not lift it. */
  cr_expect_float_eq(g.res[1].reward, 0, 0);
  cr_expect_float_eq(g.res[2].reward, 0, 0);
  rig_stop(&g);
}

Test(genrm, verifier_rubric_and_reasoning_check) {
  const char *script[] = {"Yes. <correct>True</correct>", "<verdict>partially</verdict>",
                          "<verdict>satisfied</verdict>", "<correct>False</correct>"};
  rig_t g;
  rig_start(&g, script, 4,
            "}, \"type\": \"verifier\", \"domains\": {\"report\": {\"type\": \"rubric\"}}, \"rule\": {\"tolerance\": 0",
            NULL);
  rig_score(&g, "math", "x = 2", 5);
  rig_wait(&g, 1);
  rig_score(&g, "report", "r1", 5);
  rig_wait(&g, 2);
  rig_score(&g, "report", "r2", 5);
  rig_wait(&g, 3);
  rig_score(&g, "math", "x = 3", 5);
  rig_wait(&g, 4);
  cr_expect_float_eq(g.res[0].reward, 1, 0);
  cr_expect_float_eq(g.res[1].reward, 0, 0, "partially maps to the asymmetric low value");
  cr_expect_float_eq(g.res[2].reward, 1, 0);
  cr_expect_float_eq(g.res[3].reward, 0, 0);
  /* Components travel in TRAJ.components, which holds finite numbers only (a string made the daemon refuse every
   * rubric-scored trajectory). */
  for (int i = 0; i < 4; i++)
    for (const cJSON *c = g.res[i].components ? g.res[i].components->child : NULL; c; c = c->next)
      cr_expect(cJSON_IsNumber(c), "result %d: component %s is not a number", i, c->string);
  rig_stop(&g);

  const char *meta[] = {"<confidence>10</confidence>", "<flawed>True</flawed>", "<confidence>10</confidence>",
                        "<flawed>False</flawed>"};
  rig_start(
      &g, meta, 4,
      ", \"reasoning_check\": {\"enabled\": true, \"penalty\": 0.5}}, \"type\": \"genrm\", \"rule\": {\"tolerance\": 0",
      NULL);
  rig_score(&g, NULL, "a", 5);
  rig_wait(&g, 1);
  rig_score(&g, NULL, "b", 5);
  rig_wait(&g, 2);
  double win = 1 / (1 + exp(-5.0));
  cr_expect_float_eq(g.res[0].reward, win * 0.5, 1e-9);
  cr_expect_float_eq(comp(&g.res[0], "reasoning_flawed"), 1, 0);
  cr_expect_eq(g.res[0].attempts, 2);
  cr_expect_float_eq(g.res[1].reward, win, 1e-9);
  cr_expect(strstr(g.f.last_body, "10</confidence>"), "the reasoning check sees the first judgment: %s", g.f.last_body);
  rig_stop(&g);
}

Test(genrm, in_flight_requests_are_bounded_and_close_cancels) {
  const char *script[] = {"slow:<confidence>6</confidence>"};
  rig_t g;
  rig_start(&g, script, 1, ", \"max_inflight\": 2}, \"type\": \"genrm\", \"rule\": {\"tolerance\": 0", NULL);
  for (int i = 0; i < 6; i++) rig_score(&g, NULL, "x", 1);
  rig_wait(&g, 6);
  cr_expect_eq(g.f.max_inflight, 2, "the server saw %d at once", g.f.max_inflight);
  for (int i = 0; i < 6; i++) cr_expect_eq(g.res[i].status, 0);
  /* Closing with requests queued and in flight: each is reported cancelled, nothing leaks. */
  rig_score(&g, NULL, "y", 1);
  rig_score(&g, NULL, "y", 1);
  rig_score(&g, NULL, "y", 1);
  uv_run(&g.loop, UV_RUN_NOWAIT);
  lt_rewarder_close(g.rw, NULL, NULL);
  cr_expect_eq(g.n, 9);
  for (int i = 6; i < 9; i++) cr_expect_eq(g.res[i].status, LT_ECANCELED);
  lt_http_close(g.srv, NULL, NULL);
  uv_run(&g.loop, UV_RUN_DEFAULT);
  cr_expect_eq(uv_loop_close(&g.loop), 0);
  for (int i = 0; i < g.n; i++) cJSON_Delete(g.res[i].components), free(g.res[i].error);
  free(g.f.last_body);
}

Test(genrm, config_errors_are_clear) {
  lt_config_t cfg;
  uv_loop_t loop;
  uv_loop_init(&loop);
  lt_rewarder_t *rw;
  cr_assert_eq(lt_config_from_json(&cfg, cJSON_Parse("{\"rewards\": {\"type\": \"genrm\"}}"), NULL, 0, lt_all_schemas,
                                   lt_all_nschemas),
               0);
  cr_expect_eq(lt_rewarder_create(&loop, &cfg, &rw), LT_ECONFIG);
  cr_expect(strstr(lt_error_msg(), "rewards.genrm.endpoint"), "%s", lt_error_msg());
  lt_config_free(&cfg);
  cr_assert_eq(lt_config_from_json(
                   &cfg,
                   cJSON_Parse("{\"rewards\": {\"domains\": {\"d\": {\"type\": \"rubric\"}}, "
                               "\"genrm\": {\"endpoint\": \"http://x\"}, \"rubric\": {\"pattern\": \"verdict\"}}}"),
                   NULL, 0, lt_all_schemas, lt_all_nschemas),
               0);
  cr_expect_eq(lt_rewarder_create(&loop, &cfg, &rw), LT_ECONFIG);
  cr_expect(strstr(lt_error_msg(), "rewards.rubric.pattern"), "%s", lt_error_msg());
  lt_config_free(&cfg);
  cr_expect_eq(uv_loop_close(&loop), 0);
}

/* Against a real OpenAI-compatible server: `longtail serve` with a tiny random
 * model.  Its replies are well-formed chat completions without a verdict, so the
 * judge must retry them as unparsable and end with a failure and no value —
 * and `longtail reward` must print that as status "failed", reward null. */
Test(genrm, against_longtail_serve, .timeout = 120) {
  char *dir = lt_test_tmpdir("genrm-serve");
  char model[4200], cfgp[4200], out[4300], cases[4300], json[4600];
  snprintf(model, sizeof model, "%s/m", dir);
  snprintf(cfgp, sizeof cfgp, "%s/configs/models/tiny-moe.json", lt_test_root());
  lt_run_t r;
  const char *init[] = {"longtail", "init", "--config", cfgp, "--out", model, "--seed", "5", NULL};
  cr_assert_eq(lt_test_run(&r, NULL, 60, init), 0);
  cr_assert_eq(r.status, 0, "%s", r.err);
  lt_run_free(&r);
  const char *serve[] = {"longtail", "serve", "--model", model, "--port", "0", NULL};
  pid_t pid = lt_test_spawn(dir, "serve", serve);
  snprintf(out, sizeof out, "%s/serve.out", dir);
  char *url = lt_test_first_line(out, 30);
  cr_assert(url, "serve printed no address");
  snprintf(json, sizeof json,
           "{\"rewards\": {\"type\": \"genrm\", \"genrm\": {\"endpoint\": \"%s\", \"retries\": 2, \"backoff_ms\": 1, "
           "\"max_tokens\": 8}}}",
           url);
  free(url);
  snprintf(cfgp, sizeof cfgp, "%s/rewards.json", dir);
  cr_assert_eq(lt_test_write(cfgp, json), 0);
  snprintf(cases, sizeof cases, "%s/cases.jsonl", dir);
  cr_assert_eq(lt_test_write(cases, "{\"prompt\": \"2+2?\", \"response\": \"4\", \"reference\": \"4\"}\n"), 0);
  const char *argv[] = {"longtail", "reward", "--config", cfgp, "--input", cases, NULL};
  cr_assert_eq(lt_test_run(&r, NULL, 60, argv), 0);
  cr_expect_eq(r.status, 0, "%s", r.err);
  cJSON *line = cJSON_Parse(r.out);
  cr_assert_not_null(line, "%s", r.out);
  cr_expect(cJSON_IsNull(cJSON_GetObjectItem(line, "reward")), "%s", r.out);
  cr_expect_str_eq(cJSON_GetObjectItem(line, "status")->valuestring, "failed");
  cr_expect_eq(cJSON_GetObjectItem(line, "attempts")->valueint, 3, "%s", r.out);
  cr_expect(strstr(r.out, "no verdict"), "the server answered each time, without a verdict: %s", r.out);
  cJSON_Delete(line);
  lt_run_free(&r);
  kill(pid, SIGTERM);
  cr_expect_eq(lt_test_wait(pid, 30), 0);
  lt_test_rmdir(dir);
}
