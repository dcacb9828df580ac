/* Rewards: answer extraction and matching, shaping, async delivery, cancel. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "cli/commands.h"
#include "rewards/reward.h"
#include "sandbox/sandbox.h"
#include "util/error.h"

Test(rewards, extract_and_match) {
  char *a = lt_reward_extract_answer("8+6=14 #### 1 #### 834\n");
  cr_expect_str_eq(a, "834");
  free(a);
  a = lt_reward_extract_answer("so \\boxed{\\frac{1}{2}} done");
  cr_expect_str_eq(a, "\\frac{1}{2}");
  free(a);
  cr_expect_null(lt_reward_extract_answer("no marker"));
  cr_expect(lt_reward_answers_match(" 834 ", "834", 0));
  cr_expect(lt_reward_answers_match("1,000", "1000.0", 1e-9));
  cr_expect(!lt_reward_answers_match("834", "843", 1e-6));
  cr_expect(!lt_reward_answers_match("83", "834", 0.01));
  cr_expect(!lt_reward_answers_match("12abc", "12", 1e-6));
}

typedef struct {
  int n;
  lt_reward_result_t r[4];
} got_t;

static void on_res(lt_reward_result_t *res, void *ud) {
  got_t *g = ud;
  g->r[g->n++] = *res;
}

static lt_rewarder_t *make(uv_loop_t *loop, const char *json) {
  lt_config_t cfg;
  cr_assert_eq(lt_config_from_json(&cfg, cJSON_Parse(json), NULL, 0, lt_all_schemas, lt_all_nschemas), 0, "%s",
               lt_error_msg());
  lt_rewarder_t *r;
  cr_assert_eq(lt_rewarder_create(loop, &cfg, &r), 0);
  lt_config_free(&cfg);
  return r;
}

Test(rewards, rule_with_shaping_and_env_verdict) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  lt_rewarder_t *r = make(&loop,
                          "{\"rewards\": {\"type\": \"rule\", \"length_penalty\": {\"target\": 10, \"coef\": 0.5},"
                          " \"format_penalty\": 0.25, \"domains\": {\"db\": {\"type\": \"env\"}}}}");
  cJSON *ref = cJSON_Parse("{\"answer\": \"42\"}"), *verdict = cJSON_Parse("{\"success\": true}"),
        *none = cJSON_Parse("{}");
  got_t g = {0};
  lt_reward_case_t k1 = {
      .domain = "math", .response = "#### 42", .reference = ref, .response_tokens = 20, .malformed_tool_calls = 2};
  lt_reward_case_t k2 = {.domain = "db", .response = "done", .reference = verdict, .response_tokens = 5};
  lt_reward_case_t k3 = {.domain = "db", .response = "done", .reference = none};
  cr_assert_eq(lt_rewarder_score(r, &k1, on_res, &g), 0);
  cr_assert_eq(lt_rewarder_score(r, &k2, on_res, &g), 0);
  cr_assert_eq(lt_rewarder_score(r, &k3, on_res, &g), 0);
  cr_expect_eq(g.n, 0, "results arrive on the loop, not inside score()");
  uv_run(&loop, UV_RUN_DEFAULT);
  cr_assert_eq(g.n, 3);
  /* 1 (correct) − 0.5·(20−10)/10 (length) − 2·0.25 (tool format) = 0 */
  cr_expect_eq(g.r[0].status, 0);
  cr_expect_float_eq(g.r[0].reward, 0.0, 1e-12);
  cr_expect_float_eq(cJSON_GetObjectItem(g.r[0].components, "length_penalty")->valuedouble, -0.5, 1e-12);
  cr_expect_float_eq(cJSON_GetObjectItem(g.r[0].components, "tool_format")->valuedouble, -0.5, 1e-12);
  cr_expect_float_eq(g.r[1].reward, 1.0, 1e-12);
  cr_expect_neq(g.r[2].status, 0, "no verdict: the reward is failed, not zero");
  for (int i = 0; i < 3; i++) cJSON_Delete(g.r[i].components), free(g.r[i].error);
  lt_rewarder_close(r, NULL, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  cr_expect_eq(uv_loop_close(&loop), 0);
  cJSON_Delete(ref), cJSON_Delete(verdict), cJSON_Delete(none);
}

/* lt_reward_range over a config: 1 and [lo, hi], 0 (unbounded) or the error. */
static int range_of(const char *json, const char *domain, double *lo, double *hi) {
  lt_config_t cfg;
  cr_assert_eq(lt_config_from_json(&cfg, cJSON_Parse(json), NULL, 0, lt_all_schemas, lt_all_nschemas), 0, "%s",
               lt_error_msg());
  int rc = lt_reward_range(&cfg, domain, lo, hi);
  lt_config_free(&cfg);
  return rc;
}

Test(rewards, range_a_domain_can_produce) {
  double lo, hi;
  cr_expect_eq(range_of("{}", "arith", &lo, &hi), 1, "the default (rule) is bounded");
  cr_expect_float_eq(lo, 0, 1e-12);
  cr_expect_float_eq(hi, 1, 1e-12);
  /* Shaping widens it: length −0.5·(2048−10)/10, tool format −0.25 per call (at most one per context token),
   * language +0.1. */
  const char *shaped =
      "{\"rollout\": {\"max_context\": 2048}, \"rewards\": {\"type\": \"math\", \"length_penalty\": "
      "{\"target\": 10, \"coef\": 0.5}, \"format_penalty\": 0.25, \"language\": {\"script\": \"latin\", "
      "\"coef\": 0.1}, \"domains\": {\"db\": {\"type\": \"env\"}, \"score\": {\"type\": \"env\", "
      "\"range\": [-1, 10]}}}}";
  cr_expect_eq(range_of(shaped, "arith", &lo, &hi), 1);
  cr_expect_float_eq(lo, -0.5 * 2038 / 10 - 0.25 * 2048, 1e-9);
  cr_expect_float_eq(hi, 1.1, 1e-12);
  cr_expect_eq(range_of(shaped, "db", &lo, &hi), 0, "an environment's own score is unbounded unless declared");
  cr_expect_eq(range_of(shaped, "score", &lo, &hi), 1, "a declared range");
  cr_expect_float_eq(lo, -1, 1e-12);
  cr_expect_float_eq(hi, 10, 1e-12);
  cr_expect_eq(range_of("{\"rewards\": {\"type\": \"env\", \"range\": [0, 100]}}", "x", &lo, &hi), 1, "rewards.range");
  cr_expect_float_eq(hi, 100, 1e-12);
  cr_expect_eq(range_of("{\"rewards\": {\"domains\": {\"x\": {\"range\": [2, 1]}}}}", "x", &lo, &hi), LT_ECONFIG);
  cr_expect(strstr(lt_error_msg(), "rewards.domains.x.range"), "%s", lt_error_msg());
  cr_expect_eq(range_of("{\"rewards\": {\"range\": [1]}}", "x", &lo, &hi), LT_ECONFIG);
  cr_expect(strstr(lt_error_msg(), "rewards.range"), "%s", lt_error_msg());
}

static void closed(void *ud) { *(int *)ud = 1; }

Test(rewards, close_cancels_in_flight) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  lt_rewarder_t *r = make(&loop, "{}");
  cJSON *ref = cJSON_Parse("{\"answer\": \"1\"}");
  got_t g = {0};
  lt_reward_case_t k = {.response = "#### 1", .reference = ref};
  cr_assert_eq(lt_rewarder_score(r, &k, on_res, &g), 0);
  int done = 0;
  lt_rewarder_close(r, closed, &done);
  cr_expect_eq(g.n, 1);
  cr_expect_eq(g.r[0].status, LT_ECANCELED);
  uv_run(&loop, UV_RUN_DEFAULT);
  cr_expect_eq(done, 1);
  cJSON_Delete(g.r[0].components), free(g.r[0].error);
  cJSON_Delete(ref);
  cr_expect_eq(uv_loop_close(&loop), 0);
}

/* The code reward: sandboxed tests of the response's last code block; a
 * program that prints fake results, loops or does not load scores what it
 * earned; no code block is a 0, not a failure. */
Test(rewards, code_reward_runs_tests_in_the_sandbox, .timeout = 120) {
  lt_sandbox_caps_t c;
  lt_sandbox_probe(&c);
  if (!c.userns) cr_skip_test("no user namespaces: the code reward cannot run here");
  uv_loop_t loop;
  uv_loop_init(&loop);
  lt_rewarder_t *r = make(&loop, "{\"rewards\": {\"type\": \"code\", \"code\": {\"test_timeout_s\": 0.5}}}");
  cJSON *ref = cJSON_Parse(
      "{\"tests\": [{\"args\": [[1,2,3,4], 2], \"expected\": 6}, {\"args\": [[5,10], 5], \"expected\": 15},"
      " {\"args\": [[], 3], \"expected\": 0}, {\"args\": [[9], 3], \"expected\": 9}]}");
  const char *resp[] = {"```python\ndef solve(xs, k):\n    return sum(x for x in xs if x % k == 0)\n```",
                        "```python\ndef solve(xs, k):\n    print('R 1 15')\n    return 6\n```",
                        "```python\ndef solve(xs, k):\n    while True: pass\n```", "no code",
                        "```python\ndef solve(:\n```"};
  double want[] = {1, 0.25, 0, 0, 0};
  for (int i = 0; i < 5; i++) {
    got_t g = {0};
    lt_reward_case_t k = {.response = resp[i], .reference = ref, .response_tokens = 10};
    cr_assert_eq(lt_rewarder_score(r, &k, on_res, &g), 0);
    while (g.n == 0) uv_run(&loop, UV_RUN_ONCE);
    cr_expect_eq(g.r[0].status, 0, "%s", g.r[0].error);
    cr_expect_float_eq(g.r[0].reward, want[i], 1e-12, "case %d", i);
    cJSON_Delete(g.r[0].components);
    free(g.r[0].error);
  }
  /* Without tests in the reference the reward cannot be computed: a failure, no value. */
  got_t g = {0};
  cJSON *none = cJSON_Parse("{\"answer\": \"1\"}");
  lt_reward_case_t k = {.response = resp[0], .reference = none};
  cr_assert_eq(lt_rewarder_score(r, &k, on_res, &g), 0);
  while (g.n == 0) uv_run(&loop, UV_RUN_ONCE);
  cr_expect_neq(g.r[0].status, 0);
  cJSON_Delete(g.r[0].components), free(g.r[0].error);
  /* Closing with a test running reports it cancelled and frees it when the test ends. */
  got_t g2 = {0};
  lt_reward_case_t k2 = {.response = resp[2], .reference = ref};
  cr_assert_eq(lt_rewarder_score(r, &k2, on_res, &g2), 0);
  lt_rewarder_close(r, NULL, NULL);
  cr_expect_eq(g2.n, 1);
  cr_expect_eq(g2.r[0].status, LT_ECANCELED);
  cJSON_Delete(g2.r[0].components), free(g2.r[0].error);
  uv_run(&loop, UV_RUN_DEFAULT);
  cr_expect_eq(uv_loop_close(&loop), 0);
  cJSON_Delete(ref), cJSON_Delete(none);
}
