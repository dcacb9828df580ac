/* The math reward: the case table (tests/data/math/cases.jsonl, modelled on
 * math-verify), extraction, tolerance, unparseable and hostile input, and
 * `longtail reward` over the 36 common equivalence cases. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "cli/commands.h"
#include "rewards/reward.h"
#include "tests/support/harness.h"
#include "util/error.h"
#include "util/json.h"

static void on_res(lt_reward_result_t *res, void *ud) { *(lt_reward_result_t *)ud = *res; }

/* Scores one case with a rewarder made from `rewards` (a JSON object's text). */
static lt_reward_result_t score(const char *rewards, const char *response, const cJSON *reference) {
  char json[512];
  snprintf(json, sizeof json, "{\"rewards\": %s}", rewards);
  lt_config_t cfg;
  cr_assert_eq(lt_config_from_json(&cfg, cJSON_Parse(json), NULL, 0, lt_all_schemas, lt_all_nschemas), 0, "%s",
               lt_error_msg());
  uv_loop_t loop;
  uv_loop_init(&loop);
  lt_rewarder_t *r;
  cr_assert_eq(lt_rewarder_create(&loop, &cfg, &r), 0);
  lt_config_free(&cfg);
  lt_reward_result_t res = {.status = 1};
  lt_reward_case_t k = {.response = response, .reference = reference};
  cr_assert_eq(lt_rewarder_score(r, &k, on_res, &res), 0);
  uv_run(&loop, UV_RUN_DEFAULT);
  lt_rewarder_close(r, NULL, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  cr_expect_eq(uv_loop_close(&loop), 0, "handles left open");
  return res;
}

static lt_reward_result_t score_answer(const char *rewards, const char *response, const char *answer) {
  cJSON *ref = cJSON_CreateObject();
  cJSON_AddStringToObject(ref, "answer", answer);
  lt_reward_result_t res = score(rewards, response, ref);
  cJSON_Delete(ref);
  return res;
}

static double component(const lt_reward_result_t *res, const char *name) {
  const cJSON *c = cJSON_GetObjectItemCaseSensitive(res->components, name);
  return cJSON_IsNumber(c) ? c->valuedouble : -1;
}

static void release(lt_reward_result_t *res) {
  cJSON_Delete(res->components);
  free(res->error);
}

Test(math, case_table) {
  char path[4096];
  snprintf(path, sizeof path, "%s/tests/data/math/cases.jsonl", lt_test_root());
  lt_jsonl_t r;
  cr_assert_eq(lt_jsonl_open(&r, path), 0, "%s", lt_error_msg());
  cJSON *line;
  int n = 0, pos = 0, neg = 0, wrong = 0;
  while (lt_jsonl_next(&r, &line) == 1) {
    const char *resp = cJSON_GetObjectItem(line, "response")->valuestring;
    const char *ref = cJSON_GetObjectItem(line, "reference")->valuestring;
    int want = cJSON_GetObjectItem(line, "expected")->valueint;
    lt_reward_result_t res = score_answer("{\"type\": \"math\"}", resp, ref);
    cr_expect_eq(res.status, 0, "line %d: %s", n + 1, res.error);
    if ((int)res.reward != want) wrong++;
    cr_expect_eq((int)res.reward, want, "line %d (%s): %s vs %s", n + 1, cJSON_GetObjectItem(line, "note")->valuestring,
                 resp, ref);
    n++, pos += want, neg += !want;
    release(&res);
    cJSON_Delete(line);
  }
  lt_jsonl_close(&r);
  cr_expect_geq(n, 100, "the table has %d cases", n);
  cr_expect_geq(pos, 40);
  cr_expect_geq(neg, 30);
  cr_expect_eq(wrong, 0);
}

Test(math, extraction) {
  char *a = lt_reward_math_extract("so \\boxed{1} no \\boxed{\\frac{1}{2}} done\n#### 7");
  cr_expect_str_eq(a, "\\frac{1}{2}", "the last box comes before a marker");
  free(a);
  a = lt_reward_math_extract("work\n#### 1,234\nthanks");
  cr_expect_str_eq(a, "1,234");
  free(a);
  a = lt_reward_math_extract("  x = 3 \n");
  cr_expect_str_eq(a, "x = 3", "a short one-line response is a bare answer");
  free(a);
  cr_expect_null(lt_reward_math_extract("line one\nline two"));
  cr_expect_null(lt_reward_math_extract("\\boxed{3"), "an unclosed box is no answer, not a bare one");
  cr_expect_null(lt_reward_math_extract(""));
}

Test(math, components_say_why) {
  static const struct {
    const char *response, *answer;
    double reward, format;
    const char *component; /* 1 when set */
  } cases[] = {
      {"\\boxed{\\frac{1}{}}", "0.5", 0, 1, "answer_unparseable"},
      {"\\boxed{3}", "\\frac{1}{", 0, 1, "reference_unparseable"},
      {"a long line\nwithout an answer", "3", 0, 0, NULL},
      {"\\boxed{\\frac{2}{4}}", "0.5", 1, 1, NULL},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    lt_reward_result_t res = score_answer("{\"type\": \"math\"}", cases[i].response, cases[i].answer);
    cr_expect_eq(res.status, 0, "case %zu", i);
    cr_expect_eq(res.reward, cases[i].reward, "case %zu", i);
    cr_expect_eq(component(&res, "correct"), cases[i].reward, "case %zu", i);
    cr_expect_eq(component(&res, "format"), cases[i].format, "case %zu", i);
    if (cases[i].component) cr_expect_eq(component(&res, cases[i].component), 1, "case %zu", i);
    cr_expect_eq(cJSON_GetArraySize(res.components), 2 + (cases[i].component != NULL), "case %zu: only the reason", i);
    release(&res);
  }
}

Test(math, tolerance_is_configurable) {
  lt_reward_result_t res = score_answer("{\"type\": \"math\"}", "\\boxed{0.333}", "\\frac{1}{3}");
  cr_expect_eq(res.reward, 0, "default 1e-6 relative");
  release(&res);
  res = score_answer("{\"type\": \"math\", \"math\": {\"tolerance\": 0.01}}", "\\boxed{0.333}", "\\frac{1}{3}");
  cr_expect_eq(res.reward, 1);
  release(&res);
  res = score_answer("{\"type\": \"math\", \"math\": {\"tolerance\": 0}}", "\\boxed{(x-1)(x+1)}", "x^2-1");
  cr_expect_eq(res.reward, 1, "tolerance 0 still allows the evaluation's rounding");
  release(&res);
}

Test(math, reference_forms) {
  cJSON *num = cJSON_Parse("{\"answer\": 0.25}"), *none = cJSON_Parse("{}");
  lt_reward_result_t res = score("{\"type\": \"math\"}", "#### \\frac{1}{4}", num);
  cr_expect_eq(res.status, 0);
  cr_expect_eq(res.reward, 1, "a numeric reference");
  release(&res);
  res = score("{\"type\": \"math\"}", "#### 1", none);
  cr_expect_eq(res.status, LT_EINVAL, "no answer in the reference: no reward, not a zero");
  cr_expect(res.error && strstr(res.error, "answer"));
  release(&res);
  cJSON_Delete(num);
  cJSON_Delete(none);
}

Test(math, hostile_input_is_bounded) {
  size_t n = 20000;
  char *s = malloc(2 * n + 16);
  /* Deep nesting, long sums, many variables, huge powers, long numbers. */
  memset(s, '(', n), memset(s + n, ')', n), s[2 * n] = 0;
  const char *why;
  cr_expect_eq(lt_reward_math_equal(s, "1", 1e-6, &why), LT_EINVAL);
  memset(s, '(', 3000), strcpy(s + 3000, "1");
  cr_expect_eq(lt_reward_math_equal(s, "1", 1e-6, &why), LT_EINVAL);
  cr_expect_str_eq(why, "answer_unparseable");
  for (size_t i = 0; i < 4000; i += 2) s[i] = '1', s[i + 1] = '+';
  strcpy(s + 4000, "1");
  cr_expect_eq(lt_reward_math_equal(s, "2001", 1e-6, &why), LT_EINVAL, "more nodes than the pool");
  cr_expect_eq(lt_reward_math_equal("abcdefghijklm", "a", 1e-6, &why), LT_EINVAL);
  cr_expect_eq(lt_reward_math_equal("", "1", 1e-6, &why), LT_EINVAL, "an empty answer");
  cr_expect_eq(lt_reward_math_equal("ab=1", "1", 1e-6, &why), 0, "a product on the left is no name (fuzz_math)");
  cr_expect_eq(lt_reward_math_equal("\\text{ }", "", 1e-6, &why), LT_EINVAL, "nothing is no answer");
  cr_expect_str_eq(why, "reference_unparseable");
  cr_expect_eq(lt_reward_math_equal("a+b+c+d+f+g+h+j+k+l", "a", 1e-6, &why), LT_EINVAL, "too many variables");
  cr_expect_eq(lt_reward_math_equal("2^{2^{2^{2^{2^{2}}}}}", "3", 1e-6, &why), 0);
  cr_expect_eq(lt_reward_math_equal("99999999999999999999999999999999999999999999999999999999999999999999999999999999"
                                    "99999999999999999999",
                                    "1", 1e-6, &why),
               LT_EINVAL);
  cr_expect_eq(lt_reward_math_equal("\\{\\{\\{\\{", "1", 1e-6, &why), LT_EINVAL);
  cr_expect_eq(lt_reward_math_equal("\\text{\\text{", "1", 1e-6, &why), LT_EINVAL);
  free(s);
}

Test(math, cli_scores_the_common_cases) {
  char *dir = lt_test_tmpdir("math"), cfg[4096], in[4096];
  snprintf(cfg, sizeof cfg, "%s/cfg.json", dir);
  snprintf(in, sizeof in, "%s/tests/data/math/common.jsonl", lt_test_root());
  cr_assert_eq(lt_test_write(cfg, "{\"rewards\": {\"type\": \"math\"}}"), 0);
  lt_run_t r;
  const char *argv[] = {"longtail", "reward", "--config", cfg, "--input", in, NULL};
  cr_assert_eq(lt_test_run(&r, NULL, 30, argv), 0);
  cr_expect_eq(r.status, 0, "%s", r.err);
  char *want = lt_test_read(in);
  int lines = 0, agree = 0;
  for (char *o = r.out, *w = want; o && *o && w && *w; lines++) {
    int got = strncmp(o, "{\"reward\":1,", 12) == 0,
        exp = strstr(w, "\"expected\": 1") && strstr(w, "\"expected\": 1") < strchr(w, '\n');
    agree += got == exp;
    o = strchr(o, '\n'), w = strchr(w, '\n');
    if (o) o++;
    if (w) w++;
  }
  cr_expect_eq(lines, 36);
  cr_expect_eq(agree, 36);
  free(want);
  lt_run_free(&r);
  lt_test_rmdir(dir);
}
