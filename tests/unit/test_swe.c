/* The swe environment (docs/envs.md, "`swe`") on a real task image: a shell "repository" with a bug in busybox's
 * image (tests/support/image.h), its hidden test added by the task's test_patch.  Rows checked naming the field;
 * a fresh root per episode; the persistent shell; view and edit; the diff and the hidden tests as the verdict (an
 * episode that edits the judging test gains nothing); the agent loop carrying the diff and the components into the
 * trajectory; `longtail swe validate` with gold, none and predictions. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "cli/commands.h"
#include "envs/env.h"
#include "rewards/reward.h"
#include "rollout/agent.h"
#include "sandbox/sandbox.h"
#include "tests/support/harness.h"
#include "tests/support/image.h"
#include "tests/support/uirun.h"
#include "util/error.h"
#include "util/json.h"

#define CALC "add() { echo $(($1 - $2)); }\nmul() { echo $(($1 * $2)); }\n"
#define CASES "test_mul() { [ \"$(mul 3 4)\" = 12 ]; }\n"
#define GOLD                                                                                                       \
  "diff --git a/calc.sh b/calc.sh\n--- a/calc.sh\n+++ b/calc.sh\n@@ -1,2 +1,2 @@\n-add() { echo $(($1 - $2)); }\n" \
  "+add() { echo $(($1 + $2)); }\n mul() { echo $(($1 * $2)); }\n"
#define TEST_PATCH                                                                                            \
  "diff --git a/tests/cases.sh b/tests/cases.sh\n--- a/tests/cases.sh\n+++ b/tests/cases.sh\n@@ -1 +1,2 @@\n" \
  " test_mul() { [ \"$(mul 3 4)\" = 12 ]; }\n+test_add() { [ \"$(add 2 3)\" = 5 ]; }\n"
/* What an agent that cannot fix the bug might try: make the judging test pass by itself. */
#define CHEAT                                                                                                 \
  "diff --git a/tests/cases.sh b/tests/cases.sh\n--- a/tests/cases.sh\n+++ b/tests/cases.sh\n@@ -1 +1,2 @@\n" \
  " test_mul() { [ \"$(mul 3 4)\" = 12 ]; }\n+test_add() { true; }\n"

/* A number of an object, -1 when it has none (a failed expectation, not a crash). */
static double num(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItem(o, k);
  return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

/* A string of an object, "(none)" when it has none. */
static const char *str(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItem(o, k);
  return cJSON_IsString(v) ? v->valuestring : "(none)";
}

static int have_boxes(void) {
  lt_sandbox_caps_t c;
  lt_sandbox_probe(&c);
  return c.userns;
}

typedef struct {
  char *dir;
  char tasks[4300], cache[4300], image[4300];
} fixture_t;

/* The task image (busybox and /testbed) in dir, and a tasks file of one row (FAIL_TO_PASS as SWE-bench ships it,
 * a JSON string) plus `extra` rows. */
static void fixture(fixture_t *f, const char *tag, const char *extra) {
  f->dir = lt_test_tmpdir(tag);
  lt_test_layer_t base = lt_test_busybox_layer();
  static const lt_test_entry_t repo[] = {
      {"testbed", 'd', 0, NULL, 0},
      {"testbed/calc.sh", 'f', 0644, CALC, 0},
      {"testbed/dup.txt", 'f', 0644, "x\nx\ny\n", 0},
      {"testbed/tests", 'd', 0, NULL, 0},
      {"testbed/tests/cases.sh", 'f', 0644, CASES, 0},
      {"testbed/tests/run.sh", 'f', 0644, ". ./calc.sh\n. ./tests/cases.sh\n\"$1\"\n", 0},
  };
  lt_test_layer_t layers[2] = {base, {repo, (int)(sizeof repo / sizeof repo[0]), "gzip"}};
  snprintf(f->image, sizeof f->image, "%s/images/calc", f->dir);
  cr_assert_eq(
      lt_test_oci_write(f->image, "latest", layers, 2, "{\"Env\":[\"PATH=/bin\"],\"WorkingDir\":\"/testbed\"}", NULL),
      0);
  cJSON *row = cJSON_CreateObject();
  cJSON_AddStringToObject(row, "instance_id", "calc-1");
  cJSON_AddStringToObject(row, "problem_statement", "add(2, 3) prints -1; it should print 5.");
  cJSON_AddStringToObject(row, "image", "oci:images/calc:latest"); /* relative: the tasks file's folder */
  cJSON_AddStringToObject(row, "patch", GOLD);
  cJSON_AddStringToObject(row, "test_patch", TEST_PATCH);
  cJSON_AddStringToObject(row, "FAIL_TO_PASS", "[\"test_add\"]");
  cJSON_AddItemToObject(row, "PASS_TO_PASS", cJSON_Parse("[\"test_mul\"]"));
  cJSON_AddStringToObject(row, "test_cmd", "sh tests/run.sh {test}");
  char *line = cJSON_PrintUnformatted(row);
  lt_buf_t b = {0};
  lt_buf_printf(&b, "%s\n%s", line, extra ? extra : "");
  snprintf(f->tasks, sizeof f->tasks, "%s/tasks.jsonl", f->dir);
  cr_assert_eq(lt_test_write(f->tasks, b.data), 0);
  snprintf(f->cache, sizeof f->cache, "%s/cache", f->dir);
  free(line);
  lt_buf_free(&b);
  cJSON_Delete(row);
}

static lt_envs_t *swe_envs(const fixture_t *f, uv_loop_t *loop, const char *params, int *rc) {
  char json[9000];
  snprintf(json, sizeof json,
           "{\"sandbox\": {\"image_cache\": \"%s\", \"pool\": 1}, \"envs\": {\"swe\": {\"type\": \"swe\", \"params\": "
           "{\"tasks\": \"%s\"%s%s}}}, \"rewards\": {\"type\": \"rule\", \"domains\": {\"swe\": {\"type\": \"env\"}}}}",
           f->cache, f->tasks, params ? ", " : "", params ? params : "");
  lt_config_t cfg;
  cJSON *root = cJSON_Parse(json);
  cr_assert_not_null(root, "%s", json);
  cr_assert_eq(lt_config_from_json(&cfg, root, NULL, 0, lt_all_schemas, lt_all_nschemas), 0, "%s", lt_error_msg());
  lt_envs_t *e = NULL;
  *rc = lt_envs_create(&cfg, loop, &e);
  lt_config_free(&cfg);
  return e;
}

/* ---- rows ---- */

Test(swe, bad_rows_stop_the_run_naming_file_line_and_field) {
  fixture_t f;
  fixture(&f, "swe_rows", NULL);
  static const struct {
    const char *row, *why;
  } cases[] = {
      {"{\"problem_statement\": \"p\", \"FAIL_TO_PASS\": [\"t\"], \"test_cmd\": \"x {test}\", \"image\": \"oci:i\"}",
       "\"instance_id\": required"},
      {"{\"instance_id\": \"a\", \"problem_statement\": \"p\", \"FAIL_TO_PASS\": \"[\\\"t\\\"\", \"test_cmd\": \"x {test}\", "
       "\"image\": \"oci:i\"}",
       "\"FAIL_TO_PASS\": a string must hold a JSON list"},
      {"{\"instance_id\": \"a\", \"problem_statement\": \"p\", \"FAIL_TO_PASS\": [], \"test_cmd\": \"x {test}\", \"image\": \"oci:i\"}",
       "\"FAIL_TO_PASS\": at least one"},
      {"{\"instance_id\": \"a\", \"problem_statement\": \"p\", \"FAIL_TO_PASS\": [\"t\"], \"PASS_TO_PASS\": [3], "
       "\"test_cmd\": \"x {test}\", \"image\": \"oci:i\"}",
       "\"PASS_TO_PASS\": test id 1"},
      {"{\"instance_id\": \"a\", \"problem_statement\": \"p\", \"FAIL_TO_PASS\": [\"t\"], \"test_cmd\": \"x\", \"image\": \"oci:i\"}",
       "\"test_cmd\": must hold {test}"},
      {"{\"instance_id\": \"a\", \"problem_statement\": \"p\", \"FAIL_TO_PASS\": [\"t\"], \"test_cmd\": \"x {test}\"}",
       "\"image\": required"},
      {"{\"instance_id\": \"a\", \"problem_statement\": \"p\", \"FAIL_TO_PASS\": [\"t\"], \"test_cmd\": \"x {test}\", "
       "\"image\": \"oci:i\", \"repo_dir\": \"testbed\"}",
       "\"repo_dir\": expected an absolute path"},
      {"{\"instance_id\": \"a\", \"problem_statement\": \"p\", \"FAIL_TO_PASS\": [\"t\"], \"test_cmd\": \"x {test}\", "
       "\"image\": \"oci:i\", \"test_patch\": \"--- a/x\\n+++ b/x\\n@@ -1,2 +1,2 @@\\n-a\\n\"}",
       "\"test_patch\": patch: hunk"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char body[4096];
    char *good = lt_test_read(f.tasks);
    snprintf(body, sizeof body, "%s\n%s\n", strtok(good, "\n"), cases[i].row);
    free(good);
    fixture_t g = f;
    snprintf(g.tasks, sizeof g.tasks, "%s/bad.jsonl", f.dir);
    cr_assert_eq(lt_test_write(g.tasks, body), 0);
    int rc;
    lt_envs_t *e = swe_envs(&g, NULL, NULL, &rc);
    cr_expect_lt(rc, 0, "case %zu accepted", i);
    char where[4400];
    snprintf(where, sizeof where, "envs.swe: %s:2: %s", g.tasks, cases[i].why);
    cr_expect(strstr(lt_error_msg(), where), "case %zu: '%s' does not say '%s'", i, lt_error_msg(), where);
    lt_envs_free(e);
  }
  /* the good row: specs carry the row, its place and the tools' schemas; params are checked */
  int rc;
  lt_envs_t *e = swe_envs(&f, NULL, "\"max_turns\": 12, \"tools\": [\"bash\", \"edit\"]", &rc);
  cr_assert_eq(rc, 0, "%s", lt_error_msg());
  cJSON *spec;
  cr_assert_eq(lt_envs_sample(e, "swe", 0, 0, &spec), 0, "%s", lt_error_msg());
  cr_expect_str_eq(cJSON_GetObjectItem(spec, "instance_id")->valuestring, "calc-1");
  cr_expect_eq(cJSON_GetObjectItem(spec, "row")->valueint, 1);
  cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(spec, "tools")), 2);
  cr_expect_eq(lt_envs_max_turns(e, "swe"), 12);
  cr_expect(lt_envs_needs_sandbox(e, "swe"));
  cJSON_Delete(spec);
  lt_envs_free(e);
  e = swe_envs(&f, NULL, "\"tools\": [\"bash\", \"rm\"]", &rc);
  cr_expect(rc < 0 && strstr(lt_error_msg(), "envs.swe.params.tools: rm is not a tool"), "%s", lt_error_msg());
  e = swe_envs(&f, NULL, "\"tool_timeout\": 3", &rc);
  cr_expect(rc < 0 && strstr(lt_error_msg(), "envs.swe.params.tool_timeout: unknown key"), "%s", lt_error_msg());
  lt_test_rmdir(f.dir);
}

/* longtail inspect shows a trajectory's diff (stored in the buffer's payload) after its conversation. */
Test(swe, inspect_shows_the_episodes_diff) {
  char *dir = lt_test_tmpdir("swe_inspect");
  lt_test_uirun(dir, 1);
  lt_run_t r;
  cr_assert_eq(lt_test_sh(&r, 30, "'%s' inspect %s --task %d --color never", lt_test_bin(), dir, LT_UIRUN_HOSTILE), 0);
  cr_expect_eq(r.status, 0, "%s", r.err);
  char want[1024];
  snprintf(want, sizeof want, "── diff ──\n%s\n── tokens ──", lt_uirun_hostile_diff);
  cr_expect(strstr(r.out, want), "%s", r.out);
  lt_run_free(&r);
  cr_assert_eq(lt_test_sh(&r, 30, "'%s' inspect %s --task %d --color never", lt_test_bin(), dir, LT_UIRUN_HUGE), 0);
  cr_expect(!strstr(r.out, "── diff ──"), "no diff, no section: %s", r.out);
  lt_run_free(&r);
  lt_test_rmdir(dir);
}

/* ---- episodes ---- */

typedef struct {
  int done, rc;
  cJSON *msgs;
  char err[1024];
} opened_t;

static void on_opened(lt_episode_t *ep, int rc, cJSON *messages, void *ud) {
  opened_t *o = ud;
  o->done = 1, o->rc = rc, o->msgs = messages;
  if (rc < 0) snprintf(o->err, sizeof o->err, "%s", lt_error_msg());
}

static void on_step(lt_episode_t *ep, lt_env_step_t *res, void *ud) { *(lt_env_step_t *)ud = *res; }

static void on_end(lt_episode_t *ep, int rc, void *ud) { *(int *)ud = rc < 0 ? rc : 1; }

static lt_episode_t *open_ep(lt_envs_t *e, uv_loop_t *loop, cJSON **msgs) {
  cJSON *spec;
  cr_assert_eq(lt_envs_sample(e, "swe", 0, 0, &spec), 0, "%s", lt_error_msg());
  opened_t o = {0};
  lt_episode_t *ep;
  cr_assert_eq(lt_episode_open_async(e, "swe", spec, 1, on_opened, &o, &ep), 0, "%s", lt_error_msg());
  while (!o.done) uv_run(loop, UV_RUN_ONCE);
  cJSON_Delete(spec);
  cr_assert_eq(o.rc, 0, "%s", o.err);
  if (msgs) *msgs = o.msgs;
  else cJSON_Delete(o.msgs);
  return ep;
}

/* One call; its answer's text (caller frees), and the step's timeout reason in *timeout when asked. */
static char *call(uv_loop_t *loop, lt_episode_t *ep, const char *tool, const char *const *kv, const char **timeout) {
  lt_tool_arg_t args[8];
  int n = 0;
  for (; kv && kv[2 * n]; n++) args[n] = (lt_tool_arg_t){(char *)kv[2 * n], (char *)kv[2 * n + 1]};
  lt_tool_call_t c = {(char *)tool, args, n};
  lt_env_step_t r = {.done = -1};
  cr_assert_eq(lt_episode_step(ep, "", &c, 1, on_step, &r), 0, "%s", lt_error_msg());
  while (r.done == -1) uv_run(loop, UV_RUN_ONCE);
  cr_assert_eq(r.error, 0, "%s", r.error_msg ? r.error_msg : "");
  if (timeout) *timeout = r.timeout;
  else cr_assert_null(r.timeout, "%s timed out", tool);
  char *out = strdup(cJSON_GetObjectItem(cJSON_GetArrayItem(r.observations, 0), "content")->valuestring);
  cJSON_Delete(r.observations);
  return out;
}

static char *bash(uv_loop_t *loop, lt_episode_t *ep, const char *cmd) {
  const char *kv[] = {"command", cmd, NULL};
  return call(loop, ep, "bash", kv, NULL);
}

static int end_ep(uv_loop_t *loop, lt_episode_t *ep, int score) {
  int done = 0;
  int rc = lt_episode_end(ep, score, on_end, &done);
  cr_assert_eq(rc, 0, "%s", lt_error_msg());
  while (!done) uv_run(loop, UV_RUN_ONCE);
  return done;
}

#define EXPECT_IN(hay, needle) cr_expect(strstr((hay), (needle)), "'%s' not in:\n%s", (needle), (hay))

static void teardown_envs(uv_loop_t *loop, lt_envs_t *e) {
  uv_run(loop, UV_RUN_DEFAULT);
  lt_envs_free(e);
  cr_expect_eq(uv_loop_close(loop), 0);
}

/* Each episode's root is a fresh copy of the image: what one episode wrote, the next does not see. */
Test(swe, each_episode_gets_a_fresh_root, .timeout = 120) {
  if (!have_boxes()) cr_skip_test("no user namespaces: no boxes here");
  fixture_t f;
  fixture(&f, "swe_fresh", NULL);
  uv_loop_t loop;
  uv_loop_init(&loop);
  int rc;
  lt_envs_t *e = swe_envs(&f, &loop, NULL, &rc);
  cr_assert_eq(rc, 0, "%s", lt_error_msg());
  lt_episode_t *ep = open_ep(e, &loop, NULL);
  char *o = bash(&loop, ep, "echo scribble > marker && echo 'add() { :; }' > calc.sh && rm tests/run.sh && ls");
  EXPECT_IN(o, "marker");
  free(o);
  lt_episode_close(ep);
  ep = open_ep(e, &loop, NULL);
  o = bash(&loop, ep, "ls; cat calc.sh; ls /testbed/marker");
  cr_expect(!strstr(o, "marker\n") && strstr(o, "$(($1 - $2))") && strstr(o, "tests"), "%s", o);
  EXPECT_IN(o, "[exit status 1]"); /* ls of the marker fails */
  free(o);
  const char *kv[] = {"path", "tests/run.sh", NULL};
  o = call(&loop, ep, "view", kv, NULL);
  EXPECT_IN(o, "     3\t\"$1\"");
  free(o);
  lt_episode_close(ep);
  teardown_envs(&loop, e);
  lt_test_rmdir(f.dir);
}

/* One shell per episode: the working directory and variables persist; a syntax error keeps it; a command that
 * ends it is said, and the next starts a new one; long output is cut in the middle, saying how much; a command past
 * its deadline is killed and ends the episode as a tool timeout. */
Test(swe, the_shell_persists_across_calls, .timeout = 120) {
  if (!have_boxes()) cr_skip_test("no user namespaces: no boxes here");
  fixture_t f;
  fixture(&f, "swe_shell", NULL);
  uv_loop_t loop;
  uv_loop_init(&loop);
  int rc;
  lt_envs_t *e = swe_envs(&f, &loop, "\"tool_timeout_s\": 2, \"output_bytes\": 1000", &rc);
  cr_assert_eq(rc, 0, "%s", lt_error_msg());
  lt_episode_t *ep = open_ep(e, &loop, NULL);
  char *o = bash(&loop, ep, "pwd");
  EXPECT_IN(o, "/testbed\n[exit status 0]");
  free(o);
  free(bash(&loop, ep, "mkdir -p sub && cd sub && export GREETING=hello && N=7"));
  o = bash(&loop, ep, "pwd; echo \"$GREETING $N\"; ls -d ../tests");
  EXPECT_IN(o, "/testbed/sub\nhello 7\n../tests\n[exit status 0]");
  free(o);
  o = bash(&loop, ep, "echo \"unterminated");
  cr_expect(strstr(o, "[exit status 2]") && strstr(o, "unterminated"), "%s", o);
  free(o);
  o = bash(&loop, ep, "echo $N; false");
  EXPECT_IN(o, "7\n[exit status 1]");
  free(o);
  o = bash(&loop, ep, "cat; read x || echo no-stdin"); /* stdin is /dev/null: nothing waits */
  EXPECT_IN(o, "no-stdin");
  free(o);
  o = bash(&loop, ep, "echo bye; exit 3");
  EXPECT_IN(o, "bye\n[the shell exited with status 3;");
  free(o);
  o = bash(&loop, ep, "pwd; echo \"[$N]\"");
  EXPECT_IN(o, "[the shell had exited: a new shell started in /testbed]\n/testbed\n[]\n[exit status 0]");
  free(o);
  o = bash(&loop, ep, "i=0; while [ $i -lt 400 ]; do echo line-$i; i=$((i+1)); done");
  cr_expect(strstr(o, "line-0\n") && strstr(o, "line-399\n") && !strstr(o, "line-200\n"), "%s", o);
  EXPECT_IN(o, " bytes of output cut here ...]");
  free(o);
  const char *kv[] = {"command", "echo started; sleep 30", NULL};
  const char *timeout = NULL;
  o = call(&loop, ep, "bash", kv, &timeout);
  cr_expect_str_eq(timeout ? timeout : "(none)", "tool_timeout");
  cr_expect(!strncmp(o, "started\n", 8) && strstr(o, "[killed after 2 s: the command's time ran out]"), "%s", o);
  free(o);
  lt_episode_close(ep);
  teardown_envs(&loop, e);
  lt_test_rmdir(f.dir);
}

/* view and edit as SWE-agent and OpenHands shape them, then the end: the diff of what the episode changed and the
 * hidden test's verdict. */
Test(swe, view_edit_and_the_hidden_tests_judge, .timeout = 120) {
  if (!have_boxes()) cr_skip_test("no user namespaces: no boxes here");
  fixture_t f;
  fixture(&f, "swe_edit", NULL);
  uv_loop_t loop;
  uv_loop_init(&loop);
  int rc;
  lt_envs_t *e = swe_envs(&f, &loop, NULL, &rc);
  cr_assert_eq(rc, 0, "%s", lt_error_msg());
  cJSON *msgs;
  lt_episode_t *ep = open_ep(e, &loop, &msgs);
  const char *sys = cJSON_GetObjectItem(cJSON_GetArrayItem(msgs, 0), "content")->valuestring;
  EXPECT_IN(sys, "/testbed");
  EXPECT_IN(sys, "<tool_call><name>bash</name><arg name=\"command\">ls</arg></tool_call>");
  cr_expect_str_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(msgs, 1), "content")->valuestring,
                   "add(2, 3) prints -1; it should print 5.");
  cr_expect(!strstr(sys, "test_add") && !strstr(sys, "$1 + $2"), "the policy never sees the judge or the gold patch");
  cJSON_Delete(msgs);
  const char *v1[] = {"path", "/testbed/calc.sh", "view_range", "[2, -1]", NULL};
  char *o = call(&loop, ep, "view", v1, NULL);
  cr_expect_str_eq(
      o, "Here's the result of running `cat -n` on /testbed/calc.sh:\n     2\tmul() { echo $(($1 * $2)); }\n");
  free(o);
  const char *v2[] = {"path", ".", NULL};
  o = call(&loop, ep, "view", v2, NULL);
  cr_expect(strstr(o, "in /testbed, excluding hidden items:\n/testbed/calc.sh\n") && strstr(o, "\n/testbed/tests/\n") &&
                strstr(o, "/testbed/tests/run.sh\n"),
            "%s", o);
  free(o);
  const char *e1[] = {"path", "calc.sh", "old_str", "$((", "new_str", "$[", NULL};
  o = call(&loop, ep, "edit", e1, NULL);
  EXPECT_IN(o, "old_str occurs 2 times in /testbed/calc.sh (lines 1, 2)");
  free(o);
  const char *e2[] = {"path", "calc.sh", "old_str", "$1 - $2", "new_str", "$1 + $2", NULL};
  o = call(&loop, ep, "edit", e2, NULL);
  EXPECT_IN(o, "     1\tadd() { echo $(($1 + $2)); }\n     2\tmul()");
  free(o);
  const char *e3[] = {"path", "notes/NEW.md", "file_text", "fixed add\n", NULL};
  o = call(&loop, ep, "edit", e3, NULL);
  EXPECT_IN(o, "File created successfully at: /testbed/notes/NEW.md");
  free(o);
  o = call(&loop, ep, "edit", e3, NULL);
  EXPECT_IN(o, "already exists");
  free(o);
  const char *e4[] = {"path", "calc.sh", "insert_line", "0", "new_str", "# calc", NULL};
  free(call(&loop, ep, "edit", e4, NULL));
  const char *e5[] = {"path", "calc.sh", NULL};
  o = call(&loop, ep, "nope", e5, NULL);
  EXPECT_IN(o, "there is no tool 'nope' (the tools are bash view edit)");
  free(o);
  o = bash(&loop, ep, "sh tests/run.sh test_mul && echo mul-ok");
  EXPECT_IN(o, "mul-ok");
  free(o);
  cr_expect_eq(end_ep(&loop, ep, 1), 1);
  const cJSON *ref = lt_episode_reference(ep);
  const char *diff = str(ref, "diff");
  EXPECT_IN(
      diff,
      "--- a/calc.sh\n+++ b/calc.sh\n@@ -1,2 +1,3 @@\n-add() { echo $(($1 - $2)); }\n+# calc\n+add() { echo $(($1 + $2)); }\n");
  EXPECT_IN(diff, "new file mode 100644\n--- /dev/null\n+++ b/notes/NEW.md\n@@ -0,0 +1 @@\n+fixed add\n");
  cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(ref, "success")), "resolved");
  const cJSON *c = cJSON_GetObjectItem(ref, "components");
  cr_expect_eq(num(c, "fail_to_pass"), 1);
  cr_expect_eq(num(c, "pass_to_pass"), 1);
  cr_expect_eq(num(c, "resolved"), 1);
  cr_expect_str_eq(str(cJSON_GetObjectItem(cJSON_GetObjectItem(ref, "tests"), "FAIL_TO_PASS"), "test_add"), "passed");
  lt_episode_close(ep);

  /* An episode that cannot fix the bug writes the judging test instead: its edit is dropped, the test fails. */
  ep = open_ep(e, &loop, NULL);
  free(bash(&loop, ep, "echo 'test_add() { true; }' >> tests/cases.sh && rm tests/run.sh && sh -c 'exit 0'"));
  cr_expect_eq(end_ep(&loop, ep, 1), 1);
  ref = lt_episode_reference(ep);
  EXPECT_IN(str(ref, "diff"), "+test_add() { true; }");
  cr_expect(cJSON_IsFalse(cJSON_GetObjectItem(ref, "success")), "editing the judging test gains nothing");
  c = cJSON_GetObjectItem(ref, "components");
  cr_expect_eq(num(c, "fail_to_pass"), 0);
  lt_episode_close(ep);
  teardown_envs(&loop, e);
  lt_test_rmdir(f.dir);
}

/* A worker's pieces on one loop, for whole episodes through the agent loop: the config's environments and
 * rewards, the scripted policy answering `answer` every turn, and (gateway) a gateway for agent programs. */
typedef struct {
  uv_loop_t loop;
  lt_config_t cfg;
  lt_envs_t *envs;
  lt_rewarder_t *rw;
  lt_backend_t *be;
  lt_gateway_t *gw;
} worker_t;

static void on_agent_done(lt_agent_t *a, lt_msg_t *traj, void *ud) { *(lt_msg_t *)ud = *traj; }

/* One episode of domain "swe" from the config `json`: its trajectory in *m (lt_msg_free it). */
static void episode(const char *json, const char *answer, int gateway, lt_msg_t *m) {
  worker_t w = {0};
  uv_loop_init(&w.loop);
  cr_assert_eq(lt_config_from_json(&w.cfg, cJSON_Parse(json), NULL, 0, lt_all_schemas, lt_all_nschemas), 0, "%s",
               lt_error_msg());
  cr_assert_eq(lt_envs_create(&w.cfg, &w.loop, &w.envs), 0, "%s", lt_error_msg());
  cr_assert_eq(lt_rewarder_create(&w.loop, &w.cfg, &w.rw), 0);
  lt_backend_opts_t bo = {.kind = "scripted",
                          .vocab = 264,
                          .mean_tokens = 4,
                          .tail_fraction = 0,
                          .tail_factor = 1,
                          .max_sessions = 4,
                          .max_context = 16384,
                          .answer = answer};
  cr_assert_eq(lt_backend_create(&w.loop, &bo, &w.be), 0, "%s", lt_error_msg());
  if (gateway) {
    lt_backend_info_t bi;
    lt_backend_info(w.be, &bi);
    lt_gateway_opts_t go = {.tok = lt_backend_tokenizer(w.be),
                            .tool_format = LT_TOOLFMT_XML,
                            .vocab = bi.vocab,
                            .max_context = bi.max_context,
                            .slots = 4,
                            .ops = lt_agent_gateway_ops};
    cr_assert_eq(lt_gateway_create(&w.loop, &go, &w.gw), 0, "%s", lt_error_msg());
    lt_envs_set_gateway(w.envs, lt_gateway_port(w.gw));
  }
  lt_context_opts_t co = {0};
  lt_agent_ctx_t ctx = {.loop = &w.loop,
                        .envs = w.envs,
                        .rewarder = w.rw,
                        .backend = w.be,
                        .context = co,
                        .gateway = w.gw,
                        .tool_format = LT_TOOLFMT_XML,
                        .cfg = &w.cfg};
  cJSON *spec;
  cr_assert_eq(lt_envs_sample(w.envs, "swe", 0, 0, &spec), 0);
  lt_task_t task = {.task_id = 1,
                    .group_id = 1,
                    .domain = "swe",
                    .env = "swe",
                    .session = "",
                    .seed = 3,
                    .temperature = 1,
                    .top_p = 1,
                    .max_new_tokens = 256,
                    .max_turns = 8,
                    .max_context = 16384,
                    .spec = spec};
  lt_agent_t *a;
  memset(m, 0, sizeof *m);
  cr_assert_eq(lt_agent_start(&ctx, &task, on_agent_done, m, &a), 0);
  for (int i = 0; i < 400000 && !m->type; i++) uv_run(&w.loop, UV_RUN_ONCE);
  cr_assert_eq(m->type, LT_MSG_TRAJ, "the episode did not end");
  cJSON_Delete(spec);
  if (w.gw) lt_gateway_close(w.gw);
  lt_envs_shutdown(w.envs);
  lt_rewarder_close(w.rw, NULL, NULL);
  lt_backend_close(w.be, NULL, NULL);
  uv_run(&w.loop, UV_RUN_DEFAULT);
  lt_envs_free(w.envs);
  lt_config_free(&w.cfg);
  cr_expect_eq(uv_loop_close(&w.loop), 0);
}

/* A demonstration (the supervised warm start) is the gold patch played with the tools in a real root: the file
 * viewed, then one edit whose old_str is unique, each with the tool's real answer; played once per task; without
 * view, the edit alone. */
Test(swe, demonstrations_replay_the_gold_patch, .timeout = 120) {
  if (!have_boxes()) cr_skip_test("no user namespaces: no boxes here");
  /* a second task whose change is the second of two equal lines: its old_str takes the line before to be unique */
  fixture_t f;
  fixture(&f, "swe_demo",
          "{\"instance_id\": \"dup-1\", \"problem_statement\": \"p\", \"image\": \"oci:images/calc:latest\", "
          "\"patch\": \"--- a/dup.txt\\n+++ b/dup.txt\\n@@ -1,3 +1,3 @@\\n x\\n-x\\n+z\\n y\\n\", "
          "\"FAIL_TO_PASS\": [\"t\"], \"test_cmd\": \"true {test}\"}\n");
  int rc;
  lt_envs_t *e = swe_envs(&f, NULL, NULL, &rc);
  cr_assert_eq(rc, 0, "%s", lt_error_msg());
  cJSON *msgs, *played = NULL;
  char *resp, *played_resp = NULL;
  int seen = 0;
  for (int i = 0; i < 2; i++) { /* the epoch's order: one demonstration of each task, each played in a root */
    cr_assert_eq(lt_envs_demo(e, "swe", (uint64_t)i, &msgs, &resp), 0, "%s", lt_error_msg());
    cr_assert_eq(cJSON_GetArraySize(msgs), 6, "system, user, then view and edit with their answers");
    cr_expect(resp && resp[0]);
    cr_expect_str_eq(str(cJSON_GetArrayItem(msgs, 5), "role"), "tool");
    EXPECT_IN(str(cJSON_GetArrayItem(msgs, 5), "content"), "has been edited");
    if (strstr(str(cJSON_GetArrayItem(msgs, 2), "content"), "calc.sh")) {
      seen |= 1;
      EXPECT_IN(str(cJSON_GetArrayItem(msgs, 2), "content"),
                "<tool_call><name>view</name><arg name=\"path\">calc.sh</arg></tool_call>");
      EXPECT_IN(str(cJSON_GetArrayItem(msgs, 3), "content"), "     1\tadd() { echo $(($1 - $2)); }");
      EXPECT_IN(str(cJSON_GetArrayItem(msgs, 4), "content"),
                "<arg name=\"old_str\">add() { echo $(($1 - $2)); }\n</arg>"
                "<arg name=\"new_str\">add() { echo $(($1 + $2)); }\n</arg>");
    } else {
      seen |= 2;
      EXPECT_IN(str(cJSON_GetArrayItem(msgs, 4), "content"),
                "<arg name=\"old_str\">x\nx\n</arg><arg name=\"new_str\">x\nz\n</arg>");
    }
    if (i == 0) played = msgs, played_resp = resp;
    else cJSON_Delete(msgs), free(resp);
  }
  cr_expect_eq(seen, 3, "a demonstration of each task");
  /* a task's later draw is the one played at index 0 (kept), the same messages */
  cJSON *again;
  char *resp2;
  cr_assert_eq(lt_envs_demo(e, "swe", 0, &again, &resp2), 0, "%s", lt_error_msg());
  cr_expect(cJSON_Compare(played, again, 1) && !strcmp(played_resp, resp2),
            "a kept demonstration differs from the played one");
  cJSON_Delete(played), cJSON_Delete(again), free(played_resp), free(resp2);
  lt_envs_free(e);
  /* a domain with edit alone: the same edit, without the view the policy could not make */
  e = swe_envs(&f, NULL, "\"tools\": [\"edit\"]", &rc);
  cr_assert_eq(rc, 0, "%s", lt_error_msg());
  for (int i = 0; i < 2; i++) {
    cr_assert_eq(lt_envs_demo(e, "swe", (uint64_t)i, &msgs, &resp), 0, "%s", lt_error_msg());
    cr_assert_eq(cJSON_GetArraySize(msgs), 4, "system, user, then the edit and its answer");
    EXPECT_IN(str(cJSON_GetArrayItem(msgs, 2), "content"), "<tool_call><name>edit</name>");
    EXPECT_IN(str(cJSON_GetArrayItem(msgs, 3), "content"), "has been edited");
    cJSON_Delete(msgs);
    free(resp);
  }
  lt_envs_free(e);
  /* and none without edit */
  e = swe_envs(&f, NULL, "\"tools\": [\"bash\", \"view\"]", &rc);
  cr_assert_eq(rc, 0, "%s", lt_error_msg());
  cr_expect_eq(lt_envs_demo(e, "swe", 0, &msgs, &resp), LT_EUNSUPP);
  lt_envs_free(e);
  lt_test_rmdir(f.dir);
}

/* Through the agent loop, as a worker runs it: the scripted policy fixes the bug with edit at every turn until the
 * turn limit (a budget: judged all the same); the trajectory carries the diff, the reward and its components. */
Test(swe, the_agent_loop_carries_the_diff_and_the_verdict, .timeout = 120) {
  if (!have_boxes()) cr_skip_test("no user namespaces: no boxes here");
  fixture_t f;
  fixture(&f, "swe_agent", NULL);
  char json[9000];
  snprintf(
      json, sizeof json,
      "{\"sandbox\": {\"image_cache\": \"%s\", \"pool\": 1}, \"envs\": {\"swe\": {\"type\": \"swe\", \"params\": "
      "{\"tasks\": \"%s\", \"max_turns\": 2}}}, \"rewards\": {\"type\": \"rule\", \"domains\": {\"swe\": {\"type\": \"env\"}}}}",
      f.cache, f.tasks);
  lt_msg_t m;
  episode(json,
          "<tool_call><name>edit</name><arg name=\"path\">calc.sh</arg><arg name=\"old_str\">$1 - $2</arg>"
          "<arg name=\"new_str\">$1 + $2</arg></tool_call>",
          0, &m);
  const lt_traj_t *t = &m.u.traj;
  cr_expect_eq(t->status, LT_TRAJ_OK, "%s", t->error);
  cr_expect_str_eq(t->reason ? t->reason : "", "turn_limit", "params.max_turns (2) in place of the task's 8");
  cr_expect_eq(t->turns, 2);
  cr_expect_eq(t->reward, 1);
  cr_expect_eq(num(t->components, "resolved"), 1);
  cr_expect_eq(num(t->components, "fail_to_pass"), 1);
  cr_expect(t->diff && strstr(t->diff, "+add() { echo $(($1 + $2)); }"), "%s", t->diff ? t->diff : "(no diff)");
  lt_msg_free(&m);
  lt_test_rmdir(f.dir);
}

/* An agent domain with an image: the program (a shell script calling the gateway with busybox's wget) runs in the
 * task's root, reaches only its gateway, never sees the judge's keys, fixes the bug, and the root is judged. */
Test(swe, an_agent_program_runs_inside_the_tasks_root, .timeout = 120) {
  if (!have_boxes()) cr_skip_test("no user namespaces: no boxes here");
  fixture_t f;
  fixture(&f, "swe_agentimg", NULL);
  char script[4400];
  snprintf(script, sizeof script, "%s/agent.sh", f.dir);
  cr_assert_eq(
      lt_test_write(
          script,
          "case \"$LONGTAIL_TASK\" in *test_patch*|*FAIL_TO_PASS*|*'\"patch\"'*) echo judge leaked >&2; exit 3;; esac\n"
          "[ \"$(pwd)\" = /testbed ] || { echo \"in $(pwd)\" >&2; exit 5; }\n"
          "wget -q -O /tmp/answer --header \"Authorization: Bearer $OPENAI_API_KEY\" --header "
          "'Content-Type: application/json' --post-data "
          "'{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": \"fix\"}], \"max_tokens\": 4}' "
          "\"$OPENAI_BASE_URL/chat/completions\" || { echo no gateway >&2; exit 4; }\n"
          "sed -i 's/$1 - $2/$1 + $2/' calc.sh\n"),
      0);
  char json[9000];
  snprintf(
      json, sizeof json,
      "{\"sandbox\": {\"image_cache\": \"%s\", \"pool\": 1}, \"envs\": {\"swe\": {\"type\": \"agent\", \"params\": "
      "{\"command\": [\"/bin/sh\", \"%s\"], \"tasks\": \"%s\", \"image\": \"oci:images/calc:latest\", \"timeout_s\": 60}}}, "
      "\"rewards\": {\"type\": \"rule\", \"domains\": {\"swe\": {\"type\": \"env\"}}}}",
      f.cache, script, f.tasks);
  lt_msg_t m;
  episode(json, "fixed", 1, &m);
  const lt_traj_t *t = &m.u.traj;
  cr_expect_eq(t->status, LT_TRAJ_OK, "%s", t->error);
  cr_expect_str_eq(t->reason ? t->reason : "", "agent_done");
  cr_expect_eq(t->reward, 1);
  cr_expect_eq(num(t->components, "resolved"), 1);
  cr_expect(t->diff && strstr(t->diff, "+add() { echo $(($1 + $2)); }") && !strstr(t->diff, "longtail-agent"), "%s",
            t->diff ? t->diff : "(no diff)");
  lt_msg_free(&m);
  lt_test_rmdir(f.dir);
}

/* ---- longtail swe validate ---- */

Test(swe, validate_with_gold_none_and_predictions, .timeout = 180) {
  if (!have_boxes()) cr_skip_test("no user namespaces: no boxes here");
  /* a second task whose gold patch is wrong: gold must say so */
  const char *broken =
      "{\"instance_id\": \"calc-broken\", \"problem_statement\": \"p\", \"image\": \"oci:images/calc:latest\", "
      "\"patch\": \"--- a/calc.sh\\n+++ b/calc.sh\\n@@ -2 +2 @@\\n-mul() { echo $(($1 * $2)); }\\n+mul() { :; }\\n\", "
      "\"test_patch\": "
      "\""
      "diff --git a/tests/cases.sh b/tests/cases.sh\\n--- a/tests/cases.sh\\n+++ b/tests/cases.sh\\n"
      "@@ -1 +1,2 @@\\n test_mul() { [ \\\"$(mul 3 4)\\\" = 12 ]; }\\n+test_add() { [ \\\"$(add 2 3)\\\" = 5 ]; }\\n\", "
      "\"FAIL_TO_PASS\": [\"test_add\"], \"PASS_TO_PASS\": [\"test_mul\"], \"test_cmd\": \"sh tests/run.sh {test}\"}\n";
  fixture_t f;
  fixture(&f, "swe_validate", NULL);
  lt_run_t r;
  char set[4400];
  snprintf(set, sizeof set, "sandbox.image_cache=%s", f.cache);
  const char *gold[] = {"longtail", "swe", "validate", f.tasks, "--json", "--set", set, NULL};
  cr_assert_eq(lt_test_run(&r, NULL, 120, gold), 0);
  cr_expect_eq(r.status, 0, "%s%s", r.out, r.err);
  cJSON *j = cJSON_Parse(r.out);
  cr_assert_not_null(j, "%s", r.out);
  cr_expect_str_eq(str(j, "instance_id"), "calc-1");
  cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(j, "resolved")));
  cr_expect_str_eq(str(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "tests"), "PASS_TO_PASS"), "test_mul"), "passed");
  cr_expect(cJSON_IsNumber(cJSON_GetObjectItem(j, "seconds")));
  cJSON_Delete(j);
  lt_run_free(&r);
  const char *none[] = {"longtail", "swe", "validate", f.tasks, "--patch", "none", "--set", set, NULL};
  cr_assert_eq(lt_test_run(&r, NULL, 120, none), 0);
  cr_expect_eq(r.status, 0, "%s%s", r.out, r.err);
  cr_expect(strstr(r.out, "calc-1") && strstr(r.out, "not resolved  FAIL_TO_PASS 0/1  PASS_TO_PASS 1/1"), "%s", r.out);
  lt_run_free(&r);
  /* predictions: the cheat (it edits the judging test) and a patch that does not apply; both judged, neither resolves */
  char preds[4400];
  snprintf(preds, sizeof preds, "%s/preds.jsonl", f.dir);
  cJSON *p1 = cJSON_CreateObject();
  cJSON_AddStringToObject(p1, "instance_id", "calc-1");
  cJSON_AddStringToObject(p1, "model_patch", CHEAT);
  char *l1 = cJSON_PrintUnformatted(p1), body[8192];
  snprintf(body, sizeof body, "%s\n", l1);
  cr_assert_eq(lt_test_write(preds, body), 0);
  const char *pr[] = {"longtail", "swe", "validate", f.tasks, "--patch", preds, "--json", "--set", set, NULL};
  cr_assert_eq(lt_test_run(&r, NULL, 120, pr), 0);
  cr_expect_eq(r.status, 0, "%s%s", r.out, r.err);
  j = cJSON_Parse(r.out);
  cr_expect(j && cJSON_IsFalse(cJSON_GetObjectItem(j, "resolved")) && cJSON_IsTrue(cJSON_GetObjectItem(j, "applied")),
            "%s", r.out);
  cJSON_Delete(j);
  lt_run_free(&r);
  /* a fix that hangs: its test times out (--test-timeout), the instance is judged and not resolved */
  cJSON_ReplaceItemInObject(p1, "model_patch",
                            cJSON_CreateString("--- a/calc.sh\n+++ b/calc.sh\n@@ -1 +1 @@\n"
                                               "-add() { echo $(($1 - $2)); }\n+add() { sleep 30; }\n"));
  free(l1);
  l1 = cJSON_PrintUnformatted(p1);
  snprintf(body, sizeof body, "%s\n", l1);
  cr_assert_eq(lt_test_write(preds, body), 0);
  const char *slow[] = {"longtail",       "swe", "validate", f.tasks, "--patch", preds, "--json",
                        "--test-timeout", "1",   "--set",    set,     NULL};
  cr_assert_eq(lt_test_run(&r, NULL, 120, slow), 0);
  cr_expect_eq(r.status, 0, "%s%s", r.out, r.err);
  j = cJSON_Parse(r.out);
  cr_expect(
      j && cJSON_IsFalse(cJSON_GetObjectItem(j, "resolved")) && cJSON_IsTrue(cJSON_GetObjectItem(j, "timed_out")) &&
          !strcmp(str(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "tests"), "FAIL_TO_PASS"), "test_add"), "timeout"),
      "%s", r.out);
  cJSON_Delete(j);
  lt_run_free(&r);
  cJSON_ReplaceItemInObject(p1, "model_patch",
                            cJSON_CreateString("--- a/calc.sh\n+++ b/calc.sh\n@@ -1 +1 @@\n-nothing like this\n+x\n"));
  free(l1);
  l1 = cJSON_PrintUnformatted(p1);
  snprintf(body, sizeof body, "%s\n", l1);
  cr_assert_eq(lt_test_write(preds, body), 0);
  cr_assert_eq(lt_test_run(&r, NULL, 120, pr), 0);
  j = cJSON_Parse(r.out);
  cr_expect(j && cJSON_IsFalse(cJSON_GetObjectItem(j, "applied")) && strstr(str(j, "error"), "does not apply"), "%s",
            r.out);
  cJSON_Delete(j);
  lt_run_free(&r);
  free(l1);
  cJSON_Delete(p1);
  /* a task whose gold patch does not resolve fails gold validation (exit 1), naming it */
  char *all = lt_test_read(f.tasks), both[16384];
  snprintf(both, sizeof both, "%s%s", all, broken);
  free(all);
  cr_assert_eq(lt_test_write(f.tasks, both), 0);
  const char *gold2[] = {"longtail", "swe", "validate", f.tasks, "--jobs", "2", "--set", set, NULL};
  cr_assert_eq(lt_test_run(&r, NULL, 120, gold2), 0);
  cr_expect_eq(r.status, 1, "%s%s", r.out, r.err);
  cr_expect(strstr(r.out, "calc-1 ") && strstr(r.out, "calc-broken") &&
                strstr(r.err, "1 instances do not resolve with their gold patch"),
            "%s%s", r.out, r.err);
  lt_run_free(&r);
  lt_test_rmdir(f.dir);
}
