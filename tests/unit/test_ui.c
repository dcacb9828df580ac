/* The web console's answers without a network (lt_ui_answer) on a hand-made run: each JSON endpoint's fields,
 * filters, sort and paging, the 400s for malformed parameters, the bounds (row limits, a query past its time
 * limit), hostile trajectory text coming back as escaped JSON text, huge turns capped and paged, and a folder of
 * runs. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "buffer/buffer.h"
#include "cJSON.h"
#include "tests/support/harness.h"
#include "tests/support/uirun.h"
#include "ui/ui.h"
#include "util/error.h"
#include "util/json.h"
#include "util/time.h"

static char *dir;
static lt_ui_t *ui;

static void setup(void) {
  dir = lt_test_tmpdir("ui");
  lt_test_uirun(dir, 0);
  cr_assert_eq(lt_ui_open(dir, &ui), 0, "%s", lt_error_msg());
}

static void teardown(void) {
  lt_ui_close(ui);
  lt_test_rmdir(dir);
}

/* The console's answer to method and target, the target parsed as net/http parses it for the console. */
static void answer(const char *method, const char *target, lt_ui_resp_t *r) {
  lt_http_target_t t;
  cr_assert_eq(lt_http_target_parse(target, &t), 0, "%s: %s", target, lt_error_msg());
  lt_ui_answer(ui, method, &t, r);
}

/* GET path: its status, and the body parsed as JSON (NULL when not JSON); the body is well-formed UTF-8. */
static int get(const char *path, cJSON **json) {
  lt_ui_resp_t r;
  answer("GET", path, &r);
  cr_assert_eq(lt_json_utf8_check(r.body, r.len), r.len, "%s: body is not UTF-8", path);
  if (json) *json = strstr(r.type, "json") ? cJSON_ParseWithLength(r.body, r.len) : NULL;
  int status = r.status;
  lt_ui_resp_free(&r);
  return status;
}

static cJSON *ok(const char *path) {
  cJSON *j;
  int st = get(path, &j);
  cr_assert_eq(st, 200, "%s: %d", path, st);
  cr_assert_not_null(j, "%s: not JSON", path);
  return j;
}

static double num(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  cr_assert(cJSON_IsNumber(v), "no number %s", k);
  return v->valuedouble;
}

static void bad(const char *path, int want) {
  cJSON *j;
  int st = get(path, &j);
  cr_assert_eq(st, want, "%s: %d, expected %d", path, st, want);
  cr_assert(cJSON_IsString(cJSON_GetObjectItem(j, "error")), "%s: no error message", path);
  cJSON_Delete(j);
}

TestSuite(ui, .init = setup, .fini = teardown);

Test(ui, overview_reports_the_run) {
  cJSON *j = ok("/api/overview");
  cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(j, "live")), "a run without a daemon is not live");
  cr_assert_str_eq(cJSON_GetObjectItem(j, "state")->valuestring, "finished");
  cr_assert_eq(num(j, "policy_version"), 9);
  cr_assert_eq(num(j, "learner_step"), 9);
  cr_assert_float_eq(num(j, "trajectories_per_s"), 12.5, 1e-9);
  const cJSON *tr = cJSON_GetObjectItem(j, "trajectories");
  cr_assert_eq(num(tr, "consumed"), 10);
  cr_assert_eq(num(tr, "ready"), LT_UIRUN_N - 10 + 2);
  const cJSON *h = cJSON_GetObjectItem(j, "staleness_hist");
  cr_assert_eq(cJSON_GetArraySize(h), 3);
  cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(h, 2), "bin")->valuestring, "2+");
  cr_assert_eq(num(cJSON_GetArrayItem(h, 0), "trajectories"), 3);
  const cJSON *ev = cJSON_GetObjectItem(j, "eval_accuracy");
  cr_assert_eq(cJSON_GetArraySize(ev), 2);
  cr_assert_float_eq(cJSON_GetArrayItem(cJSON_GetArrayItem(ev, 1), 1)->valuedouble, 0.5, 1e-9);
  const cJSON *g = cJSON_GetObjectItem(j, "guardrails");
  cr_assert_eq(cJSON_GetArraySize(g), 1, "only the guardrail event");
  cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "events")), 2);
  const cJSON *w = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "workers"), 0);
  cr_assert_str_eq(cJSON_GetObjectItem(w, "name")->valuestring, "w1");
  cr_assert_eq(num(w, "slots"), 4);
  cr_assert_eq(num(w, "in_flight"), 3, "three dispatched tasks, one done");
  cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(w, "alive")), "a finished run has no live worker");
  cJSON_Delete(j);
  bad("/api/overview?step=1", 400);
  bad("/api/overview?run=another", 404);
}

Test(ui, metrics_names_and_bounded_series) {
  cJSON *j = ok("/api/metrics");
  const cJSON *names = cJSON_GetObjectItem(j, "names");
  int found = 0;
  cJSON *n;
  cJSON_ArrayForEach(n, names) found +=
      !strcmp(n->valuestring, "ui_test/reward") || !strcmp(n->valuestring, "ui_test/loss");
  cr_assert_eq(found, 2);
  cJSON_Delete(j);
  j = ok("/api/metrics?name=ui_test/reward&name=ui_test%2Floss&name=nothing");
  const cJSON *s = cJSON_GetObjectItem(j, "series");
  cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(s, "ui_test/reward")), 10);
  const cJSON *p = cJSON_GetArrayItem(cJSON_GetObjectItem(s, "ui_test/loss"), 1);
  cr_assert_eq(cJSON_GetArrayItem(p, 0)->valuedouble, 1);
  cr_assert_float_eq(cJSON_GetArrayItem(p, 1)->valuedouble, 0.5, 1e-9);
  cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(s, "nothing")), 0);
  cJSON_Delete(j);
  j = ok("/api/metrics?name=ui_test/reward&max=3");
  cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "series"), "ui_test/reward")), 3);
  cJSON_Delete(j);
  bad("/api/metrics?name=a&max=0", 400);
  bad("/api/metrics?name=a&max=100001", 400);
  bad("/api/metrics?name=", 400);
  char many[1024] = "/api/metrics?";
  for (int i = 0; i < 17; i++) strcat(many, "name=x&");
  bad(many, 400);
}

/* A P/mean, or a P, whose run records P/min and P/max comes with its band at the steps that have both (a domain's
 * reward/<domain> with reward/<domain>/min and /max); a metric without companions has an empty band. */
Test(ui, metrics_bands_from_min_max_companions) {
  cJSON *j = ok("/api/metrics?name=ui_test/spread/mean&name=ui_test/reward&name=eval/mean&name=reward/code");
  const cJSON *bands = cJSON_GetObjectItem(j, "bands");
  cr_assert(bands, "no bands");
  const cJSON *band = cJSON_GetObjectItem(bands, "ui_test/spread/mean");
  cr_assert_eq(cJSON_GetArraySize(band), 9, "steps 1..9 have both companions");
  const cJSON *p = cJSON_GetArrayItem(band, 2);
  cr_assert_eq(cJSON_GetArrayItem(p, 0)->valuedouble, 3);
  cr_assert_float_eq(cJSON_GetArrayItem(p, 1)->valuedouble, 2.5, 1e-9);
  cr_assert_float_eq(cJSON_GetArrayItem(p, 2)->valuedouble, 4, 1e-9);
  cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(bands, "ui_test/reward")), 0, "no ui_test/reward/min or /max");
  cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(bands, "eval/mean")), 0);
  band = cJSON_GetObjectItem(bands, "reward/code");
  cr_assert_eq(cJSON_GetArraySize(band), 10, "reward/code/min and /max at every step");
  p = cJSON_GetArrayItem(band, 9);
  cr_assert_eq(cJSON_GetArrayItem(p, 0)->valuedouble, 9);
  cr_assert_float_eq(cJSON_GetArrayItem(p, 1)->valuedouble, 0.25, 1e-9);
  cr_assert_float_eq(cJSON_GetArrayItem(p, 2)->valuedouble, 0.84, 1e-9);
  cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "series"), "ui_test/spread/mean")), 10);
  cJSON_Delete(j);
  j = ok("/api/metrics?name=ui_test/spread/mean&max=4");
  cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "bands"), "ui_test/spread/mean")), 4);
  cJSON_Delete(j);
}

/* The task ids of a page, in order, and its total. */
static int page(const char *path, int64_t *ids, int64_t *total) {
  cJSON *j = ok(path);
  *total = (int64_t)num(j, "total");
  int n = 0;
  cJSON *r;
  cJSON_ArrayForEach(r, cJSON_GetObjectItem(j, "rows")) ids[n++] = (int64_t)num(r, "task_id");
  cJSON_Delete(j);
  return n;
}

Test(ui, trajectories_filter_sort_and_page) {
  int64_t ids[600], total;
  int n = page("/api/trajectories", ids, &total);
  cr_assert_eq(total, LT_UIRUN_N + 2);
  cr_assert_eq(n, LT_UIRUN_N + 2);
  cr_assert_eq(ids[0], 1, "arrival order by default");
  n = page("/api/trajectories?domain=code", ids, &total);
  cr_assert_eq(total, LT_UIRUN_N / 2 + 1);
  n = page("/api/trajectories?status=consumed&domain=arith", ids, &total);
  cr_assert_eq(total, 5);
  cr_assert_eq(ids[0], 1);
  n = page("/api/trajectories?reward_min=0.5&reward_max=0.75", ids, &total);
  cr_assert_eq(total, 6, "rewards 10/20 .. 15/20");
  n = page("/api/trajectories?staleness_min=2&staleness_max=2", ids, &total);
  cr_assert_eq(total, 10, "consumed at step 5 from version 3");
  n = page("/api/trajectories?staleness_min=3", ids, &total);
  cr_assert_eq(total, 0);
  n = page("/api/trajectories?version=3&finish=truncated", ids, &total);
  cr_assert_eq(total, 6, "tasks 4, 8, 12, 16, 20 and 1000");
  n = page("/api/trajectories?outcome=ok&sort=reward&order=desc&limit=2", ids, &total);
  cr_assert_eq(n, 2);
  cr_assert_eq(ids[0], 20);
  cr_assert_eq(ids[1], 19);
  n = page("/api/trajectories?limit=5&offset=5", ids, &total);
  cr_assert_eq(n, 5);
  cr_assert_eq(ids[0], 6);
  n = page("/api/trajectories?q=%3Cscript%3E", ids, &total);
  cr_assert_eq(total, 1, "text search finds the hostile message");
  cr_assert_eq(ids[0], LT_UIRUN_HOSTILE);
  n = page("/api/trajectories?q=question+1", ids, &total);
  cr_assert_eq(total, 11, "question 1 and question 10..19");
  cJSON *j = ok("/api/trajectories?limit=1");
  cJSON *row = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "rows"), 0);
  cr_assert_str_eq(cJSON_GetObjectItem(row, "status")->valuestring, "consumed");
  cr_assert_eq(num(row, "consumed_step"), 5);
  cr_assert_eq(num(row, "staleness"), 2);
  cr_assert_str_eq(cJSON_GetObjectItem(row, "worker")->valuestring, "w1");
  cJSON_Delete(j);
}

Test(ui, malformed_parameters_are_400) {
  static const char *paths[] = {
      "/api/trajectories?limit=0",
      "/api/trajectories?limit=501",
      "/api/trajectories?limit=abc",
      "/api/trajectories?limit=5x",
      "/api/trajectories?offset=-1",
      "/api/trajectories?sort=id;DROP",
      "/api/trajectories?order=up",
      "/api/trajectories?status=nope",
      "/api/trajectories?reward_min=nan",
      "/api/trajectories?reward_max=1e999",
      "/api/trajectories?version=-3",
      "/api/trajectories?where=1",
      "/api/trajectories/abc",
      "/api/trajectories/-1",
      "/api/trajectories/1?turn=x",
      "/api/trajectories/1?sql=1",
  }; /* a target that does not decode (a bad escape, too many parameters) is net/http's 400 (test_http.c) */
  for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) bad(paths[i], 400);
  char longq[400] = "/api/trajectories?q=";
  memset(longq + strlen(longq), 'a', 300);
  bad(longq, 400);
}

Test(ui, pages_assets_and_unknown_paths) {
  static const char *pages[] = {"/", "/curves", "/trajectories", "/trajectories?domain=code&status=ready",
                                "/trajectories/7"};
  for (size_t i = 0; i < sizeof pages / sizeof pages[0]; i++) {
    lt_ui_resp_t r;
    answer("GET", pages[i], &r);
    cr_assert_eq(r.status, 200, "%s", pages[i]);
    cr_assert(strstr(r.type, "text/html"), "%s", pages[i]);
    cr_assert(memmem(r.body, r.len, "<table", 6) || memmem(r.body, r.len, "app.js", 6));
    lt_ui_resp_free(&r);
  }
  lt_ui_resp_t r;
  answer("GET", "/assets/app.js", &r);
  cr_assert_eq(r.status, 200);
  cr_assert(strstr(r.type, "javascript"));
  cr_assert_gt(r.len, 1000);
  lt_ui_resp_free(&r);
  answer("POST", "/api/overview", &r);
  cr_assert_eq(r.status, 405);
  lt_ui_resp_free(&r);
  bad("/trajectories/abc", 404);
  bad("/nothing", 404);
  bad("/assets/../buffer.db", 404);
  bad("/api/trajectories/99999", 404);
}

Test(ui, hostile_text_comes_back_as_escaped_json_text) {
  char path[64];
  snprintf(path, sizeof path, "/api/trajectories/%d", LT_UIRUN_HOSTILE);
  lt_ui_resp_t r;
  answer("GET", path, &r);
  cr_assert_eq(r.status, 200);
  cr_assert(strstr(r.type, "application/json"));
  cr_assert_eq(lt_json_utf8_check(r.body, r.len), r.len, "invalid UTF-8 is replaced, not passed through");
  cr_assert_null(memmem(r.body, r.len, "\x1b", 1), "a raw ANSI escape in the JSON");
  cr_assert_not_null(memmem(r.body, r.len, "\\u001b", 6));
  cJSON *j = cJSON_ParseWithLength(r.body, r.len);
  lt_ui_resp_free(&r);
  cr_assert_not_null(j);
  const cJSON *m = cJSON_GetObjectItem(j, "messages");
  cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(m, 0), "content")->valuestring, lt_uirun_hostile[0]);
  const char *a = cJSON_GetObjectItem(cJSON_GetArrayItem(m, 1), "content")->valuestring;
  cr_assert(strstr(a, "</textarea></pre><img id=\"injected\""), "the markup is kept as text: %s", a);
  cr_assert(strstr(a, "\xef\xbf\xbd\xef\xbf\xbd bad bytes"), "each invalid byte is U+FFFD: %s", a);
  cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "tokens")), 4);
  cr_assert(cJSON_IsNull(cJSON_GetObjectItem(j, "token_text")), "no tokenizer: no token text");
  cr_assert_eq(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "loss_mask"), 0)->valueint, 0);
  cr_assert_float_eq(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "logprobs"), 3)->valuedouble, -2, 1e-9);
  cr_assert_eq(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "versions"), 3)->valueint, 4);
  cr_assert_eq(num(cJSON_GetObjectItem(j, "components"), "correct"), 1);
  cr_assert_str_eq(cJSON_GetObjectItem(j, "status")->valuestring, "ready");
  cr_assert(cJSON_IsNull(cJSON_GetObjectItem(j, "consumed_step")));
  cr_assert_str_eq(cJSON_GetObjectItem(j, "diff")->valuestring, lt_uirun_hostile_diff, "the episode's diff, as stored");
  cJSON_Delete(j);
  j = ok("/api/trajectories/1");
  cr_assert(cJSON_IsNull(cJSON_GetObjectItem(j, "diff")), "none stored: null");
  cJSON_Delete(j);
}

static lt_tokenizer_t *byte_tokenizer(lt_buffer_t *b) {
  lt_tokenizer_t *t = NULL;
  lt_tokenizer_byte(LT_TOKENIZER_BYTE_VOCAB, &t);
  return t;
}

Test(ui, token_text_comes_from_the_runs_tokenizer) {
  lt_ui_set_tokenizer(ui, byte_tokenizer);
  cJSON *j = ok("/api/trajectories/1");
  const cJSON *tt = cJSON_GetObjectItem(j, "token_text");
  cr_assert_eq(cJSON_GetArraySize(tt), 4);
  cr_assert_str_eq(cJSON_GetArrayItem(tt, 0)->valuestring, "h");
  cr_assert_str_eq(cJSON_GetArrayItem(tt, 2)->valuestring, "<");
  cr_assert_str_eq(cJSON_GetArrayItem(tt, 3)->valuestring, "\n");
  cJSON_Delete(j);
}

Test(ui, a_huge_turn_is_capped_and_paged) {
  char path[128];
  snprintf(path, sizeof path, "/api/trajectories/%d", LT_UIRUN_HUGE);
  cJSON *j = ok(path);
  const cJSON *m = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "messages"), 0);
  size_t got = strlen(cJSON_GetObjectItem(m, "content")->valuestring);
  cr_assert_leq(got, 64 * 1024);
  cr_assert_eq(num(m, "content_bytes"), LT_UIRUN_HUGE_BYTES);
  double next = num(m, "next_offset");
  cr_assert_eq(next, (double)got);
  cJSON_Delete(j);
  size_t total = got;
  int slices = 1;
  while (next >= 0) {
    snprintf(path, sizeof path, "/api/trajectories/%d?turn=0&offset=%.0f", LT_UIRUN_HUGE, next);
    j = ok(path);
    const char *c = cJSON_GetObjectItem(j, "content")->valuestring;
    cr_assert_eq(num(j, "content_offset"), next);
    for (const char *p = c; *p; p += 2) cr_assert(!memcmp(p, "\xc3\xa9", 2), "a slice cut a character");
    total += strlen(c);
    const cJSON *nx = cJSON_GetObjectItem(j, "next_offset");
    next = cJSON_IsNumber(nx) ? nx->valuedouble : -1;
    slices++;
    cJSON_Delete(j);
  }
  cr_assert_eq(total, LT_UIRUN_HUGE_BYTES);
  cr_assert_eq(slices, 4);
  snprintf(path, sizeof path, "/api/trajectories/%d?turn=5", LT_UIRUN_HUGE);
  bad(path, 404);
}

/* Stray continuation bytes (invalid UTF-8) have no character boundary to cut at: the slices still move on. */
Test(ui, a_turn_of_invalid_utf8_still_pages_forward) {
  char path[4200];
  snprintf(path, sizeof path, "%s/buffer.db", dir);
  lt_buffer_t *b;
  cr_assert_eq(lt_buffer_open(path, 0, &b), 0);
  enum { N = 100000 };
  char *msg = malloc(N + 64);
  strcpy(msg, "[{\"role\":\"tool\",\"content\":\"");
  size_t k = strlen(msg);
  memset(msg + k, 0x80, N);
  strcpy(msg + k + N, "\"}]");
  int32_t tok = 1, ver = 0;
  float lp = 0;
  uint8_t mk = 1;
  lt_traj_t t = {.task_id = 3000,
                 .group_id = 3000,
                 .domain = "arith",
                 .status = LT_TRAJ_OK,
                 .finish = LT_FINISH_TERMINATED,
                 .reason = "",
                 .error = "",
                 .messages = cJSON_Parse(msg),
                 .ntokens = 1,
                 .tokens = &tok,
                 .logprobs = &lp,
                 .loss_mask = &mk,
                 .versions = &ver,
                 .temperature = -1};
  cr_assert(t.messages);
  lt_traj_meta_t m = {.worker = "w", .eval_round = -1, .status = LT_SAMPLE_READY};
  int dup;
  cr_assert_eq(lt_buffer_traj_insert(b, &t, &m, &dup), 0, "%s", lt_error_msg());
  cJSON_Delete(t.messages);
  lt_buffer_close(b);
  free(msg);
  double next = 0;
  int slices = 0;
  while (next >= 0 && slices < 10) {
    char p[128];
    snprintf(p, sizeof p, "/api/trajectories/3000?turn=0&offset=%.0f", next);
    cJSON *j = ok(p);
    const cJSON *nx = cJSON_GetObjectItem(j, "next_offset");
    double was = next;
    next = cJSON_IsNumber(nx) ? nx->valuedouble : -1;
    cr_assert(next < 0 || next > was, "offset %.0f did not move forward", was);
    slices++;
    cJSON_Delete(j);
  }
  cr_assert_eq(slices, 2);
}

Test(ui, a_query_past_its_deadline_is_interrupted) {
  char path[4200];
  snprintf(path, sizeof path, "%s/buffer.db", dir);
  lt_buffer_t *b;
  /* enough rows that the scan takes many more virtual machine steps than the handler's interval */
  cr_assert_eq(lt_buffer_open(path, 0, &b), 0);
  cr_assert_eq(lt_buffer_begin(b), 0);
  int32_t tok = 1, ver = 0;
  float lp = 0;
  uint8_t mk = 1;
  for (int i = 0; i < 2000; i++) {
    lt_traj_t t = {.task_id = 5000 + (uint64_t)i,
                   .group_id = 5000 + (uint64_t)i,
                   .domain = "arith",
                   .status = LT_TRAJ_OK,
                   .finish = LT_FINISH_TERMINATED,
                   .reason = "",
                   .error = "",
                   .ntokens = 1,
                   .tokens = &tok,
                   .logprobs = &lp,
                   .loss_mask = &mk,
                   .versions = &ver,
                   .temperature = -1};
    lt_traj_meta_t m = {.worker = "w", .eval_round = -1, .status = LT_SAMPLE_READY};
    int dup;
    cr_assert_eq(lt_buffer_traj_insert(b, &t, &m, &dup), 0, "%s", lt_error_msg());
  }
  cr_assert_eq(lt_buffer_commit(b), 0);
  lt_buffer_close(b);
  cr_assert_eq(lt_buffer_open(path, LT_BUF_READONLY, &b), 0);
  int64_t past = (int64_t)(lt_time_mono_ns() / 1000000) - 1, total;
  lt_buffer_set_deadline(b, &past);
  lt_browse_query_t q = {.text = "never there", .limit = 10};
  /* every payload's text is scanned: far more than the handler's interval of steps */
  cr_assert_eq(lt_buffer_browse(b, &q, NULL, NULL, &total), LT_ETIMEDOUT, "%s", lt_error_msg());
  int64_t later = past + 60000;
  lt_buffer_set_deadline(b, &later);
  cr_assert_eq(lt_buffer_browse(b, &q, NULL, NULL, &total), 0, "%s", lt_error_msg());
  cr_assert_eq(total, 0);
  lt_buffer_close(b);
}

Test(ui, a_folder_of_runs_lists_them_and_needs_a_run) {
  char *runs = lt_test_tmpdir("ui-runs"), a[4200], bdir[4200];
  snprintf(a, sizeof a, "%s/alpha", runs);
  snprintf(bdir, sizeof bdir, "%s/beta", runs);
  cr_assert_eq(mkdir(a, 0755), 0);
  cr_assert_eq(mkdir(bdir, 0755), 0);
  lt_test_uirun(a, 0);
  lt_test_uirun(bdir, 1);
  lt_ui_close(ui);
  cr_assert_eq(lt_ui_open(runs, &ui), 0, "%s", lt_error_msg());
  cr_assert(lt_ui_multi(ui));
  cJSON *j = ok("/api/runs");
  const cJSON *l = cJSON_GetObjectItem(j, "runs");
  cr_assert_eq(cJSON_GetArraySize(l), 2);
  cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(l, 1), "name")->valuestring, "beta");
  cJSON_Delete(j);
  bad("/api/overview", 400);
  bad("/api/overview?run=gamma", 404);
  bad("/api/overview?run=..", 404);
  j = ok("/api/trajectories?run=beta");
  cr_assert_eq(num(j, "total"), 2);
  cJSON_Delete(j);
  char gone[4200];
  snprintf(gone, sizeof gone, "%s", runs);
  lt_test_rmdir(runs); /* (frees runs) */
  lt_ui_t *none;
  cr_assert_eq(lt_ui_open(gone, &none), LT_ENOENT);
}

/* The console in a thread of its own (the daemon's monitor.ui_port): it answers over HTTP while the caller's thread
 * does something else, a port in use fails at start (LT_EUNREACH), and stop ends the thread and frees it all. */
Test(ui, serves_from_a_thread_of_its_own) {
  lt_ui_server_t *s;
  cr_assert_eq(lt_ui_serve_start(dir, "127.0.0.1", 0, NULL, &s), 0, "%s", lt_error_msg());
  int port = lt_ui_serve_port(s);
  cr_assert_gt(port, 0);
  char *r = lt_test_http(port, "GET", "/api/overview", NULL);
  cr_assert(r && strstr(r, "HTTP/1.1 200") && strstr(r, "\"policy_version\":9"), "%s", r ? r : "no answer");
  free(r);
  lt_ui_server_t *again = NULL;
  cr_assert_eq(lt_ui_serve_start(dir, "127.0.0.1", port, NULL, &again), LT_EUNREACH);
  cr_assert_null(again);
  cr_assert(strstr(lt_error_msg(), "in use"), "%s", lt_error_msg());
  lt_ui_serve_stop(s);
  cr_assert_null(lt_test_http(port, "GET", "/api/overview", NULL), "still answering after stop");
  lt_ui_serve_stop(NULL);
}

/* The inspector's learner values: what step 5 stored for a trajectory of two contexts comes back aligned to its
 * tokens, with the rejected token's ratio and flags and the trajectory's verdict; which step trained it, and why
 * the others were not. */
Test(ui, the_learners_stored_values_come_back_per_token) {
  char path[64];
  snprintf(path, sizeof path, "/api/trajectories/%d", LT_UIRUN_VALUES);
  cJSON *j = ok(path);
  const cJSON *v = cJSON_GetObjectItem(j, "token_values");
  cr_assert(cJSON_IsObject(v), "no token_values");
  cr_assert_str_eq(cJSON_GetObjectItem(v, "source")->valuestring, "stored");
  cr_assert_eq(num(v, "step"), 5);
  cr_assert_float_eq(num(v, "traj_ratio"), 1.4658972, 1e-6);
  cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(v, "traj_ok")));
  cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(v, "loss"), "objective")->valuestring, "mispo");
  const cJSON *ratio = cJSON_GetObjectItem(v, "ratio"), *flags = cJSON_GetObjectItem(v, "flags");
  cr_assert_eq(cJSON_GetArraySize(ratio), 4);
  cr_assert_float_eq(cJSON_GetArrayItem(ratio, LT_UIRUN_REJECTED)->valuedouble, LT_UIRUN_REJECTED_X, 1e-6);
  cr_assert_float_eq(cJSON_GetArrayItem(ratio, 2)->valuedouble, 0.9, 1e-6, "the second context's first token");
  cr_assert_eq(cJSON_GetArrayItem(flags, LT_UIRUN_REJECTED)->valueint, 1 | 4, "in the loss, token mask failed");
  cr_assert_eq(cJSON_GetArrayItem(flags, 1)->valueint, 1 | 2 | 4 | 16);
  cr_assert_float_eq(cJSON_GetArrayItem(cJSON_GetObjectItem(v, "adv"), 1)->valuedouble, 0.25, 1e-6);
  cr_assert_float_eq(cJSON_GetArrayItem(cJSON_GetObjectItem(v, "entropy"), 3)->valuedouble, 2, 1e-6);
  cr_assert_float_eq(cJSON_GetArrayItem(cJSON_GetObjectItem(v, "logp_old"), 3)->valuedouble, -0.747237, 1e-6);
  cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "seq_starts")), 2);
  const cJSON *tr = cJSON_GetObjectItem(j, "training");
  cr_assert_eq(num(tr, "step"), 5);
  cr_assert_str_eq(cJSON_GetObjectItem(tr, "verdict")->valuestring, "trained");
  cr_assert(strstr(cJSON_GetObjectItem(tr, "why")->valuestring, "2 of its 3 loss tokens kept"), "%s",
            cJSON_GetObjectItem(tr, "why")->valuestring);
  cJSON_Delete(j);
  /* trained by step 5, which stored nothing for it */
  j = ok("/api/trajectories/3");
  cr_assert(cJSON_IsNull(cJSON_GetObjectItem(j, "token_values")));
  tr = cJSON_GetObjectItem(j, "training");
  cr_assert_str_eq(cJSON_GetObjectItem(tr, "verdict")->valuestring, "trained");
  cr_assert(strstr(cJSON_GetObjectItem(tr, "why")->valuestring, "no per-token values"));
  cJSON_Delete(j);
  /* not trained yet */
  j = ok("/api/trajectories/12");
  tr = cJSON_GetObjectItem(j, "training");
  cr_assert(cJSON_IsNull(cJSON_GetObjectItem(tr, "step")));
  cr_assert_str_eq(cJSON_GetObjectItem(tr, "verdict")->valuestring, "ready");
  cr_assert(strstr(cJSON_GetObjectItem(tr, "why")->valuestring, "not yet selected"));
  cJSON_Delete(j);
}

/* "Why not trained" from what the buffer records: filtered at a step that stored values for its batch is the
 * dynamic filter; filtered with its own values at that step is a rollback; stale; quarantined. */
Test(ui, why_a_trajectory_was_not_trained) {
  char db[4200];
  snprintf(db, sizeof db, "%s/buffer.db", dir);
  lt_buffer_t *b;
  cr_assert_eq(lt_buffer_open(db, 0, &b), 0, "%s", lt_error_msg());
  int64_t f[] = {12}, rb[] = {13}, st[] = {14};
  cr_assert_eq(lt_buffer_traj_mark(b, f, 1, LT_SAMPLE_FILTERED, 6), 0);
  cr_assert_eq(lt_buffer_traj_mark(b, rb, 1, LT_SAMPLE_FILTERED, 7), 0);
  cr_assert_eq(lt_buffer_traj_mark(b, st, 1, LT_SAMPLE_STALE, 6), 0);
  static const float z[1] = {0};
  static const uint8_t fl[1] = {0};
  static const int32_t sp[2] = {0, 1};
  lt_token_values_row_t rows[2] = {{.task_id = 15,
                                    .step = 6,
                                    .loss = "{}",
                                    .traj_ratio = 1,
                                    .ntokens = 4,
                                    .nspans = 1,
                                    .spans = sp,
                                    .ratio = z,
                                    .logp_old = z,
                                    .adv = z,
                                    .entropy = z,
                                    .flags = fl},
                                   {.task_id = 13,
                                    .step = 7,
                                    .loss = "{}",
                                    .traj_ratio = 1,
                                    .ntokens = 4,
                                    .nspans = 1,
                                    .spans = sp,
                                    .ratio = z,
                                    .logp_old = z,
                                    .adv = z,
                                    .entropy = z,
                                    .flags = fl}};
  cr_assert_eq(lt_buffer_token_values_put(b, rows, 2), 0, "%s", lt_error_msg());
  /* task 2's trajectory quarantined by step 6: it has none left to show, and the 404 says why */
  lt_quarantined_t q;
  cr_assert_eq(lt_buffer_prompt_insert(b, 1, "arith", "{}", 0, 0), 0, "%s", lt_error_msg());
  cr_assert_eq(lt_buffer_traj_quarantine(b, 2, 6, "token 0: id 999 outside the vocabulary", 3000, &q), 0, "%s",
               lt_error_msg());
  lt_buffer_quarantined_free(&q);
  lt_buffer_close(b);
  lt_ui_resp_t r;
  answer("GET", "/api/trajectories/2", &r);
  cr_assert_eq(r.status, 404);
  const char *why = "quarantined at step 6: token 0: id 999 outside the vocabulary";
  cr_assert(memmem(r.body, r.len, why, strlen(why)), "%.*s", (int)r.len, r.body);
  lt_ui_resp_free(&r);
  static const struct {
    int task;
    const char *verdict, *why;
  } want[] = {{12, "filtered", "dynamic filter: its group's rewards had no variance"},
              {13, "rolled_back", "rolled the step back"},
              {14, "stale", "stale at step 6: generated from policy version 3"}};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    char path[64];
    snprintf(path, sizeof path, "/api/trajectories/%d", want[i].task);
    cJSON *j = ok(path);
    const cJSON *tr = cJSON_GetObjectItem(j, "training");
    cr_assert_str_eq(cJSON_GetObjectItem(tr, "verdict")->valuestring, want[i].verdict, "task %d", want[i].task);
    cr_assert(strstr(cJSON_GetObjectItem(tr, "why")->valuestring, want[i].why), "task %d: %s", want[i].task,
              cJSON_GetObjectItem(tr, "why")->valuestring);
    cJSON_Delete(j);
  }
}
