/* init, logprobs, grad, generate, tokenize as a user runs them. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "learner/safetensors.h"
#include "tests/support/harness.h"
#include "util/json.h"

static char *dir;
static char model[4096];

static void setup(void) {
  dir = lt_test_tmpdir("lcli");
  snprintf(model, sizeof model, "%s/m", dir);
  char *err = NULL;
  int st = lt_test_init_model("tiny-moe", model, 3, &err);
  cr_assert_eq(st, 0, "%s", err ? err : "");
  free(err);
}

static void teardown(void) { lt_test_rmdir(dir); }

static char *file(const char *name, const char *content) {
  static char p[4200];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  lt_test_write(p, content);
  return p;
}

TestSuite(learner_cli, .init = setup, .fini = teardown, .timeout = 120);

Test(learner_cli, grad_mispo_on_policy_keeps_everything) {
  lt_run_t r;
  const char *lp[] = {"longtail", "logprobs", "--model",
                      model,      "--input",  file("t.jsonl", "{\"tokens\": [72, 105, 33, 10, 258]}\n"),
                      NULL};
  cr_assert_eq(lt_test_run(&r, NULL, 60, lp), 0);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cJSON *j = cJSON_Parse(r.out);
  float *l;
  int n;
  cr_assert_eq(lt_json_get_f32_array(j, "logprobs", &l, &n), 0);
  cr_assert_eq(n, 5);
  cr_expect_float_eq(l[0], 0.0f, 1e-9);
  cr_expect(cJSON_IsNumber(cJSON_GetObjectItem(j, "routing_confidence")));
  lt_run_free(&r);
  char line[1024];
  snprintf(
      line, sizeof line,
      "{\"tokens\": [72, 105, 33, 10, 258], \"loss_mask\": [0, 0, 1, 1, 1], \"rollout_logprobs\": [0, 0, %.9g, %.9g, %.9g], "
      "\"advantages\": [0, 0, 1, 1, 1]}\n",
      l[2], l[3], l[4]);
  char out[4200];
  snprintf(out, sizeof out, "%s/g.safetensors", dir);
  const char *g[] = {"longtail", "grad",  "--model", model, "--batch", file("b.jsonl", line),
                     "--loss",   "mispo", "--out",   out,   NULL};
  cr_assert_eq(lt_test_run(&r, NULL, 60, g), 0);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cJSON *s = cJSON_Parse(r.out);
  cr_assert_not_null(s, "%s", r.out);
  cr_expect_eq(cJSON_GetObjectItem(s, "tokens_kept")->valueint, 3);
  cr_expect_eq(cJSON_GetObjectItem(s, "trajectories_kept")->valueint, 1);
  cr_expect_float_eq(cJSON_GetObjectItem(s, "loss")->valuedouble, -(l[2] + l[3] + l[4]) / 3.0, 1e-5);
  lt_st_file_t *f;
  cr_assert_eq(lt_st_open(out, &f), 0);
  cr_expect_not_null(lt_st_find(f, "model.layers.3.mlp.experts.7.down_proj.weight"));
  cr_expect_not_null(lt_st_find(f, "model.embed_tokens.weight"));
  lt_st_close(f);
  cJSON_Delete(s);
  cJSON_Delete(j);
  free(l);
  lt_run_free(&r);
}

Test(learner_cli, bad_inputs_exit_2_naming_the_line) {
  lt_run_t r;
  const char *a[] = {"longtail", "logprobs", "--model",
                     model,      "--input",  file("bad.jsonl", "{\"tokens\": [1, 2]}\n{\"tokens\": [1, 99999]}\n"),
                     NULL};
  cr_assert_eq(lt_test_run(&r, NULL, 60, a), 0);
  cr_expect_eq(r.status, 2);
  cr_expect(strstr(r.err, "bad.jsonl:2") && strstr(r.err, "tokens[1]"), "%s", r.err);
  lt_run_free(&r);
  char out[4200];
  snprintf(out, sizeof out, "%s/g.safetensors", dir);
  const char *b[] = {
      "longtail",
      "grad",
      "--model",
      model,
      "--batch",
      file("b2.jsonl",
           "{\"tokens\": [1, 2], \"loss_mask\": [1, 1], \"rollout_logprobs\": [0, -1], \"advantages\": [0, 1]}\n"),
      "--loss",
      "mispo",
      "--out",
      out,
      NULL};
  cr_assert_eq(lt_test_run(&r, NULL, 60, b), 0);
  cr_expect_eq(r.status, 2);
  cr_expect(strstr(r.err, "loss_mask[0]"), "%s", r.err);
  lt_run_free(&r);
  const char *c[] = {"longtail", "grad", "--model", model, "--batch", file("b3.jsonl", "{\"tokens\": [1, 2]}\n"),
                     "--loss",   "sgd",  "--out",   out,   NULL};
  cr_assert_eq(lt_test_run(&r, NULL, 60, c), 0);
  cr_expect_eq(r.status, 2);
  lt_run_free(&r);
  const char *d[] = {"longtail", "logprobs", "--model", "/nonexistent", "--input", "-", NULL};
  cr_assert_eq(lt_test_run(&r, "", 60, d), 0);
  cr_expect_eq(r.status, 2, "%s", r.err);
  lt_run_free(&r);
}

Test(learner_cli, generate_is_deterministic_and_tokenize_round_trips) {
  lt_run_t r1, r2;
  char *in = file("p.jsonl", "{\"prompt\": \"12+34=\"}\n{\"tokens\": [257, 117, 115]}\n{\"prompt\": \"hello\"}\n");
  const char *g[] = {"longtail",     "generate", "--model", model, "--input", in,
                     "--max-tokens", "16",       "--seed",  "7",   NULL};
  cr_assert_eq(lt_test_run(&r1, NULL, 60, g), 0);
  cr_assert_eq(lt_test_run(&r2, NULL, 60, g), 0);
  cr_assert_eq(r1.status, 0, "%s", r1.err);
  cr_expect_str_eq(r1.out, r2.out);
  int lines = 0;
  for (char *p = r1.out; (p = strchr(p, '\n')); p++) lines++;
  cr_expect_eq(lines, 3);
  cr_expect(strstr(r1.out, "\"finish_reason\":"), "%s", r1.out);
  lt_run_free(&r1);
  lt_run_free(&r2);
  const char *t[] = {
      "longtail", "tokenize", "--tokenizer", model, "--input", file("x.jsonl", "{\"text\": \"héllo\"}\n"), NULL};
  cr_assert_eq(lt_test_run(&r1, NULL, 60, t), 0);
  cr_expect_eq(r1.status, 0, "%s", r1.err);
  cr_expect_str_eq(r1.out, "{\"ids\":[104,195,169,108,108,111]}\n");
  lt_run_free(&r1);
  const char *td[] = {"longtail",
                      "tokenize",
                      "--tokenizer",
                      model,
                      "--decode",
                      "--input",
                      file("y.jsonl", "{\"ids\": [104, 105, 258]}\n"),
                      NULL};
  cr_assert_eq(lt_test_run(&r1, NULL, 60, td), 0);
  cr_expect_str_eq(r1.out, "{\"text\":\"hi<|im_end|>\"}\n");
  lt_run_free(&r1);
}
