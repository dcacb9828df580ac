/* The dataset environment: row checks naming file:line, epochs without
 * replacement, the held-out file, the spec a worker opens, large files. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "envs/env.h"
#include "tests/support/harness.h"
#include "util/error.h"
#include "util/time.h"

static int make_envs(const char *train, const char *eval, const char *extra, lt_envs_t **out) {
  char js[8192];
  snprintf(
      js, sizeof js,
      "{\"run\": {\"seed\": 11}, \"envs\": {\"qa\": {\"type\": \"dataset\", \"params\": {\"train\": \"%s\"%s%s%s%s}}}}",
      train, eval ? ", \"eval\": \"" : "", eval ? eval : "", eval ? "\"" : "", extra ? extra : "");
  lt_config_t cfg;
  cJSON *root = cJSON_Parse(js);
  cr_assert_not_null(root);
  cr_assert_eq(lt_config_from_json(&cfg, root, NULL, 0, lt_all_schemas, lt_all_nschemas), 0, "%s", lt_error_msg());
  int rc = lt_envs_create(&cfg, NULL, out);
  lt_config_free(&cfg);
  return rc;
}

static char *write_rows(const char *dir, const char *name, int n) {
  static char p[4][4200];
  static int k;
  char *path = p[k++ % 4];
  snprintf(path, sizeof p[0], "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  cr_assert_not_null(f);
  for (int i = 0; i < n; i++)
    fprintf(f, "{\"id\": \"r%d\", \"prompt\": \"question %d\", \"answer\": \"%d\"}\n", i, i, i);
  fclose(f);
  return path;
}

/* dir/name holding content; the path stays valid until the next call. */
static const char *file_with(const char *dir, const char *name, const char *content) {
  static char path[4200];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  cr_assert_eq(lt_test_write(path, content), 0);
  return path;
}

static int spec_row(const cJSON *s) { return (int)cJSON_GetObjectItem(s, "row")->valuedouble; }

Test(dataset, each_epoch_uses_every_row_once_in_a_new_order) {
  char *dir = lt_test_tmpdir("ds_epoch");
  lt_envs_t *e;
  cr_assert_eq(make_envs(write_rows(dir, "t.jsonl", 50), NULL, NULL, &e), 0, "%s", lt_error_msg());
  int order[3][50];
  for (int ep = 0; ep < 3; ep++) {
    int seen[51] = {0};
    for (int i = 0; i < 50; i++) {
      cJSON *s;
      cr_assert_eq(lt_envs_sample(e, "qa", (uint64_t)(ep * 50 + i), 0, &s), 0, "%s", lt_error_msg());
      int r = spec_row(s);
      cr_assert(r >= 1 && r <= 50);
      cr_assert_eq(cJSON_GetObjectItem(s, "epoch")->valuedouble, ep);
      char want[16];
      snprintf(want, sizeof want, "%d", r - 1); /* row r holds answer r-1 */
      cr_assert_str_eq(cJSON_GetObjectItem(s, "answer")->valuestring, want);
      seen[r]++;
      order[ep][i] = r;
      cJSON_Delete(s);
    }
    for (int r = 1; r <= 50; r++) cr_assert_eq(seen[r], 1, "epoch %d used row %d %d times", ep, r, seen[r]);
  }
  cr_assert(memcmp(order[0], order[1], sizeof order[0]) && memcmp(order[1], order[2], sizeof order[0]),
            "epochs are not reshuffled");
  /* Deterministic in the index: asking again (a resumed run) gives the same row. */
  cJSON *s;
  cr_assert_eq(lt_envs_sample(e, "qa", 57, 0, &s), 0);
  cr_assert_eq(spec_row(s), order[1][7]);
  cJSON_Delete(s);
  lt_envs_free(e);
  lt_test_rmdir(dir);
}

Test(dataset, bad_rows_are_errors_naming_file_and_line) {
  char *dir = lt_test_tmpdir("ds_bad");
  static const struct {
    const char *row, *why;
  } cases[] = {
      {"{\"prompt\": \"q\"}", "\"answer\""},
      {"{\"prompt\": \"q\", \"messages\": [{\"role\": \"user\", \"content\": \"q\"}], \"answer\": \"1\"}",
       "exactly one"},
      {"{\"messages\": [{\"role\": \"assistant\", \"content\": \"q\"}], \"answer\": \"1\"}", "user"},
      {"{\"messages\": [{\"role\": \"user\"}], \"answer\": \"1\"}", "content"},
      {"{\"prompt\": \"q\", \"answer\": \"1\", \"tools\": {}}", "tools"},
      {"{\"prompt\": \"q\", \"answer\": \"1\", \"anwser\": 2}", "unknown key"},
      {"{\"prompt\": \"q\", \"answer\": [1]}", "\"answer\""},
      {"[1, 2]", "object"},
      {"{\"prompt\": \"q\", \"answer\": \"1\"", "3"},
  };
  char path[4200];
  snprintf(path, sizeof path, "%s/bad.jsonl", dir);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char body[1024];
    snprintf(body, sizeof body, "{\"prompt\": \"ok\", \"answer\": \"1\"}\n\n%s\n", cases[i].row);
    cr_assert_eq(lt_test_write(path, body), 0);
    lt_envs_t *e = NULL;
    int rc = make_envs(path, NULL, NULL, &e);
    cr_assert_lt(rc, 0, "row %s was accepted", cases[i].row);
    char where[4300];
    snprintf(where, sizeof where, "%s:3", path);
    cr_expect(strstr(lt_error_msg(), where), "no file:line in '%s'", lt_error_msg());
    cr_expect(strstr(lt_error_msg(), cases[i].why), "'%s' does not say %s", lt_error_msg(), cases[i].why);
  }
  lt_envs_t *e = NULL;
  cr_assert_lt(make_envs("/nonexistent/x.jsonl", NULL, NULL, &e), 0);
  cr_expect(strstr(lt_error_msg(), "envs.qa.params.train"), "%s", lt_error_msg());
  cr_assert_eq(lt_test_write(path, "\n\n"), 0);
  cr_assert_lt(make_envs(path, NULL, NULL, &e), 0);
  cr_expect(strstr(lt_error_msg(), "no rows"), "%s", lt_error_msg());
  lt_test_rmdir(dir);
}

Test(dataset, spec_carries_the_row_and_the_episode_its_answer) {
  char *dir = lt_test_tmpdir("ds_spec");
  const char *path =
      file_with(dir, "m.jsonl",
                "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", "
                "\"content\": \"hello\"}, {\"role\": \"user\", \"content\": \"2+2?\"}], \"answer\": 4.1, "
                "\"id\": \"x1\", \"domain\": \"algebra\", \"metadata\": {\"level\": 3}, "
                "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"calc\"}}]}\n");
  lt_envs_t *e;
  cr_assert_eq(make_envs(path, NULL, ", \"system\": \"Be brief.\"", &e), 0, "%s", lt_error_msg());
  cJSON *s;
  cr_assert_eq(lt_envs_sample(e, "qa", 0, 0, &s), 0);
  cr_assert_str_eq(cJSON_GetObjectItem(s, "answer")->valuestring, "4.1");
  cr_assert_str_eq(cJSON_GetObjectItem(s, "id")->valuestring, "x1");
  cr_assert_str_eq(cJSON_GetObjectItem(s, "domain")->valuestring, "algebra");
  cr_assert_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(s, "metadata"), "level")->valuedouble, 3);
  lt_episode_t *ep;
  cJSON *msgs;
  cr_assert_eq(lt_episode_open(e, "qa", s, 1, &ep, &msgs), 0, "%s", lt_error_msg());
  cr_assert_eq(cJSON_GetArraySize(msgs), 4);
  const cJSON *sys = cJSON_GetArrayItem(msgs, 0);
  cr_assert_str_eq(cJSON_GetObjectItem(sys, "role")->valuestring, "system");
  cr_assert(strstr(cJSON_GetObjectItem(sys, "content")->valuestring, "Be brief."));
  cr_assert(strstr(cJSON_GetObjectItem(sys, "content")->valuestring, "\"calc\""), "the tools are not listed");
  cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(msgs, 3), "content")->valuestring, "2+2?");
  cr_assert_str_eq(cJSON_GetObjectItem(lt_episode_reference(ep), "answer")->valuestring, "4.1");
  lt_episode_close(ep);
  cJSON_Delete(msgs);
  /* A spec is peer input: a malformed one is refused, not trusted. */
  cJSON_DeleteItemFromObject(s, "answer");
  cr_assert_lt(lt_episode_open(e, "qa", s, 1, &ep, &msgs), 0);
  cr_expect(strstr(lt_error_msg(), "malformed dataset spec"), "%s", lt_error_msg());
  cJSON_Delete(s);
  lt_envs_free(e);
  lt_test_rmdir(dir);
}

Test(dataset, eval_reads_the_held_out_file_in_order) {
  char *dir = lt_test_tmpdir("ds_eval");
  char *tr = write_rows(dir, "t.jsonl", 20), *ev = write_rows(dir, "e.jsonl", 5);
  lt_envs_t *e;
  cr_assert_eq(make_envs(tr, ev, NULL, &e), 0, "%s", lt_error_msg());
  for (int i = 0; i < 7; i++) {
    cJSON *s;
    cr_assert_eq(lt_envs_sample(e, "qa", (uint64_t)i, 1, &s), 0);
    cr_assert_eq(spec_row(s), i % 5 + 1);
    cr_assert_null(cJSON_GetObjectItem(s, "epoch"));
    cJSON_Delete(s);
  }
  lt_envs_free(e);
  cr_assert_eq(make_envs(tr, NULL, NULL, &e), 0);
  cJSON *s;
  cr_assert_eq(lt_envs_sample(e, "qa", 0, 1, &s), LT_EUNSUPP);
  cr_expect(strstr(lt_error_msg(), "params.eval"), "%s", lt_error_msg());
  lt_envs_free(e);
  lt_test_rmdir(dir);
}

Test(dataset, blank_lines_crlf_and_a_missing_last_newline_read_back) {
  char *dir = lt_test_tmpdir("ds_blank");
  const char *path = file_with(dir, "b.jsonl",
                               "\n\n{\"prompt\": \"a\", \"answer\": \"1\"}\r\n\n  {\"prompt\": \"b\", "
                               "\"answer\": \"2\"}  \n{\"prompt\": \"c\", \"answer\": \"3\"}");
  lt_envs_t *e;
  cr_assert_eq(make_envs(path, path, NULL, &e), 0, "%s", lt_error_msg());
  for (int i = 0; i < 3; i++) {
    cJSON *s;
    cr_assert_eq(lt_envs_sample(e, "qa", (uint64_t)i, 1, &s), 0, "%s", lt_error_msg());
    char want[2] = {(char)('1' + i), 0};
    cr_assert_str_eq(cJSON_GetObjectItem(s, "answer")->valuestring, want);
    cJSON_Delete(s);
  }
  lt_envs_free(e);
  lt_test_rmdir(dir);
}

/* Large files are indexed, not held: 200k rows load in well under the few seconds 1M take. */
Test(dataset, a_large_file_loads_quickly, .timeout = 60) {
  char *dir = lt_test_tmpdir("ds_big");
  char *tr = write_rows(dir, "big.jsonl", 200000);
  double t0 = lt_time_mono_s();
  lt_envs_t *e;
  cr_assert_eq(make_envs(tr, NULL, NULL, &e), 0, "%s", lt_error_msg());
  double secs = lt_time_mono_s() - t0;
  cr_expect_lt(secs, 5.0, "200k rows took %.2f s to load", secs);
  cJSON *s;
  cr_assert_eq(lt_envs_sample(e, "qa", 199999, 0, &s), 0);
  cJSON_Delete(s);
  lt_envs_free(e);
  lt_test_rmdir(dir);
}
