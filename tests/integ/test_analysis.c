/* The analysis commands on runs the tests record themselves: plot, compare
 * and the summary `train` leaves behind. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "buffer/buffer.h"
#include "cJSON.h"
#include "learner/loss.h"
#include "tests/support/harness.h"
#include "util/error.h"

/* A finished smoke run in DIR/NAME (eval on, so accuracy is recorded). */
static void record_run(const char *dir, const char *name, int seed) {
  char rd[4200], cfg[4200], seedset[64];
  snprintf(rd, sizeof rd, "%s/%s", dir, name);
  snprintf(cfg, sizeof cfg, "%s/configs/smoke.json", lt_test_root());
  snprintf(seedset, sizeof seedset, "run.seed=%d", seed);
  lt_run_t r;
  const char *argv[] = {"longtail", "train",        cfg,     "--run-dir",       rd,  "--set", seedset,
                        "--set",    "eval.every=2", "--set", "eval.prompts=16", NULL};
  cr_assert_eq(lt_test_run(&r, NULL, 90, argv), 0);
  cr_assert_eq(r.status, 0, "%s", r.err);
  char console[4300]; /* the summary ends with the console's command (make run, README) */
  snprintf(console, sizeof console, "longtail ui %s ", rd);
  cr_assert(strstr(r.out, console), "no console command in the summary: %s", r.out);
  lt_run_free(&r);
}

static long file_size(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

static int png(const char *path) {
  char *s = lt_test_read(path);
  int ok = s && memcmp(s, "\x89PNG", 4) == 0;
  free(s);
  return ok;
}

Test(analysis, train_leaves_summary_and_plot, .timeout = 120) {
  char *dir = lt_test_tmpdir("summary");
  record_run(dir, "a", 7);
  char p[4300];
  snprintf(p, sizeof p, "%s/a/summary.json", dir);
  char *s = lt_test_read(p);
  cJSON *j = s ? cJSON_Parse(s) : NULL;
  cr_assert(j, "no summary.json");
  cr_assert_eq(cJSON_GetObjectItem(j, "trajectories")->valuedouble, 96);
  const cJSON *e = cJSON_GetObjectItem(j, "eval");
  cr_assert(e && cJSON_GetObjectItem(e, "first_step")->valuedouble == 0, "first eval is not at step 0");
  cJSON_Delete(j);
  free(s);
  snprintf(p, sizeof p, "%s/a/plot.png", dir);
  cr_assert(png(p), "no plot.png");
  lt_test_rmdir(dir);
}

Test(analysis, plot_metrics_dashboard_and_errors, .timeout = 180) {
  char *dir = lt_test_tmpdir("plot");
  record_run(dir, "a", 7);
  record_run(dir, "b", 8);
  lt_run_t r;
  cr_assert_eq(lt_test_sh(&r, 60,
                          "cd %s && longtail() { '%s' \"$@\"; }; longtail plot a --metric reward/mean "
                          "--metric 'mis/*' -o m.png && longtail plot a b --dashboard -o d.svg",
                          dir, lt_test_bin()),
               0);
  cr_assert_eq(r.status, 0, "%s", r.err);
  lt_run_free(&r);
  char p[4300];
  snprintf(p, sizeof p, "%s/m.png", dir);
  cr_assert(png(p));
  snprintf(p, sizeof p, "%s/d.svg", dir);
  char *svg = lt_test_read(p);
  /* Both runs are overlaid: their names label the curves. */
  cr_assert(svg && strstr(svg, "<svg") && strstr(svg, "eval/accuracy"), "dashboard svg lacks panels");
  free(svg);
  /* A metric nobody recorded: exit 2, naming what exists and the nearest name, which a longer run (more names,
   * e.g. the daemon's health every 5 s) may have pushed past the list's cut. */
  cr_assert_eq(lt_test_sh(&r, 30, "'%s' plot %s/a --metric rewrd/mean -o %s/x.png", lt_test_bin(), dir, dir), 0);
  cr_assert_eq(r.status, 2);
  cr_assert(strstr(r.err, "no metric matches 'rewrd/mean'") && strstr(r.err, "actor/loss"), "%s", r.err);
  cr_assert(strstr(r.err, "(did you mean 'reward/mean'?)"), "%s", r.err);
  lt_run_free(&r);
  snprintf(p, sizeof p, "%s/x.png", dir);
  cr_assert_eq(file_size(p), -1);
  /* Output format, foreign file, missing file. */
  cr_assert_eq(lt_test_sh(&r, 30, "'%s' plot %s/a --dashboard -o %s/x.jpg", lt_test_bin(), dir, dir), 0);
  cr_assert_eq(r.status, 2, "%s", r.err);
  lt_run_free(&r);
  cr_assert_eq(lt_test_sh(&r, 30, "'%s' plot /etc/passwd --dashboard -o %s/x.png", lt_test_bin(), dir), 0);
  cr_assert_eq(r.status, 2);
  cr_assert(strstr(r.err, "not a longtail buffer"), "%s", r.err);
  lt_run_free(&r);
  cr_assert_eq(lt_test_sh(&r, 30, "'%s' plot %s/none --dashboard -o %s/x.png", lt_test_bin(), dir, dir), 0);
  cr_assert_eq(r.status, 2);
  cr_assert(strstr(r.err, "no such buffer file"), "%s", r.err);
  lt_run_free(&r);
  lt_test_rmdir(dir);
}

Test(analysis, compare_two_runs, .timeout = 180) {
  char *dir = lt_test_tmpdir("compare");
  record_run(dir, "a", 7);
  record_run(dir, "b", 8);
  lt_run_t r;
  cr_assert_eq(lt_test_sh(&r, 60, "cd %s && '%s' compare a b --json -o both.png", dir, lt_test_bin()), 0);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cJSON *j = cJSON_Parse(r.out);
  cr_assert(j, "%s", r.out);
  cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "runs")), 2);
  const cJSON *rw = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "metrics"), "reward/mean");
  cr_assert_eq(cJSON_GetArraySize(rw), 2);
  for (int i = 0; i < 2; i++) cr_assert_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(rw, i), "points")->valuedouble, 3);
  cJSON_Delete(j);
  lt_run_free(&r);
  char p[4300];
  snprintf(p, sizeof p, "%s/both.png", dir);
  cr_assert(png(p));
  lt_test_rmdir(dir);
}

static double field(const cJSON *o, const char *a, const char *b) {
  const cJSON *x = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, a), b);
  cr_assert(cJSON_IsNumber(x), "no %s.%s", a, b);
  return x->valuedouble;
}

/* The smoke job in RD with MIS bounds this tight: the masks reject most of what staleness changes, so the ratios
 * are far from 1 and every token near a bound counts. */
static void tight_run(const char *rd) {
  char cfg[4200];
  snprintf(cfg, sizeof cfg, "%s/configs/smoke.json", lt_test_root());
  lt_run_t r;
  const char *argv[] = {"longtail",
                        "train",
                        cfg,
                        "--run-dir",
                        rd,
                        "--set",
                        "learner.mispo.traj_bounds=[0.999999,1.000001]",
                        "--set",
                        "learner.mispo.token_bounds=[0.99999,1.00001]",
                        "--set",
                        "learner.lr=1e-3",
                        NULL};
  cr_assert_eq(lt_test_run(&r, NULL, 90, argv), 0);
  cr_assert_eq(r.status, 0, "%s", r.err);
  lt_run_free(&r);
}

Test(analysis, replay_reproduces_the_logged_acceptance_ratios, .timeout = 120) {
  char *dir = lt_test_tmpdir("replay");
  char rd[4200];
  snprintf(rd, sizeof rd, "%s/run", dir);
  lt_run_t r;
  tight_run(rd);
  int below_one = 0;
  for (int step = 2; step <= 3; step++) {
    char sarg[16];
    snprintf(sarg, sizeof sarg, "%d", step);
    const char *rp[] = {"longtail", "replay", rd, "--step", sarg, "--traj-bounds", "0.996,1.001", "--json", NULL};
    cr_assert_eq(lt_test_run(&r, NULL, 60, rp), 0);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cJSON *j = cJSON_Parse(r.out);
    cr_assert(j, "%s", r.out);
    static const char *pairs[][2] = {{"token_accept", "mis/token_accept"},
                                     {"traj_accept", "mis/traj_accept"},
                                     {"kept_fraction", "mis/kept_fraction"},
                                     {"mismatch_abs_log_ratio", "mismatch/abs_log_ratio"}};
    for (int k = 0; k < 4; k++) {
      double a = field(j, "recomputed", pairs[k][0]), b = field(j, "logged", pairs[k][1]);
      cr_expect(a == b || fabs(a - b) <= 1e-12 * fabs(b), "step %d %s: replay %.17g, learner %.17g", step, pairs[k][0],
                a, b);
    }
    below_one += field(j, "recomputed", "traj_accept") < 1;
    /* What if: the default trajectory bounds keep everything here. */
    cr_expect_eq(field(j, "what_if", "traj_accept"), 1);
    cJSON_Delete(j);
    lt_run_free(&r);
  }
  cr_expect_gt(below_one, 0, "the masks rejected nothing: the test checks nothing");
  /* A step whose starting weights are gone, and a step that never ran. */
  const char *gone[] = {"longtail", "replay", rd, "--step", "9", NULL};
  cr_assert_eq(lt_test_run(&r, NULL, 30, gone), 0);
  cr_expect_neq(r.status, 0);
  cr_expect(strstr(r.err, "step 9"), "%s", r.err);
  lt_run_free(&r);
  lt_test_rmdir(dir);
}

/* The learner's per-token values of a run that did not store them: `replay --fill-token-values` recomputes them
 * with the weights each step started from, as the step computed them (here: step 3's values, deleted, come back
 * equal from checkpoints/v2, rejected tokens included), marked recomputed; steps that stored their own are left. */
Test(analysis, replay_fills_the_token_values_a_run_did_not_store, .timeout = 150) {
  char *dir = lt_test_tmpdir("replay-fill");
  char rd[4200], db[4300];
  snprintf(rd, sizeof rd, "%s/run", dir);
  snprintf(db, sizeof db, "%s/buffer.db", rd);
  lt_run_t r;
  tight_run(rd);
  /* step 3's stored values, kept aside, then gone as from a run that never stored them */
  lt_buffer_t *b;
  cr_assert_eq(lt_buffer_open(db, LT_BUF_READONLY, &b), 0, "%s", lt_error_msg());
  int64_t *ids;
  int n;
  cr_assert_eq(lt_buffer_step_batch(b, 3, &ids, &n), 0);
  cr_assert_gt(n, 0);
  lt_token_values_row_t *kept = calloc((size_t)n, sizeof *kept);
  for (int i = 0; i < n; i++)
    cr_assert_eq(lt_buffer_token_values_get(b, ids[i], &kept[i]), 1, "task %lld", (long long)ids[i]);
  lt_buffer_close(b);
  cr_assert_eq(lt_test_sh(&r, 30, "sqlite3 '%s' 'DELETE FROM token_values WHERE step = 3'", db), 0);
  cr_assert_eq(r.status, 0, "%s", r.err);
  lt_run_free(&r);
  const char *fill[] = {"longtail", "replay", rd, "--fill-token-values", "--json", NULL};
  cr_assert_eq(lt_test_run(&r, NULL, 60, fill), 0);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cJSON *j = cJSON_Parse(r.out);
  cr_assert(j, "%s", r.out);
  const cJSON *filled = cJSON_GetObjectItem(j, "filled"), *skipped = cJSON_GetObjectItem(j, "skipped");
  cr_assert_eq(cJSON_GetArraySize(filled), 1, "%s", r.out);
  cr_assert_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(filled, 0), "step")->valueint, 3);
  cr_assert(strstr(cJSON_GetObjectItem(cJSON_GetArrayItem(filled, 0), "model")->valuestring, "checkpoints/v2"));
  cr_assert_eq(cJSON_GetArraySize(skipped), 2, "steps 1 and 2 stored their own: %s", r.out);
  cr_assert(strstr(cJSON_GetObjectItem(cJSON_GetArrayItem(skipped, 0), "why")->valuestring, "stored its own"));
  cJSON_Delete(j);
  lt_run_free(&r);
  cr_assert_eq(lt_buffer_open(db, LT_BUF_READONLY, &b), 0, "%s", lt_error_msg());
  int rejected = 0;
  for (int i = 0; i < n; i++) {
    lt_token_values_row_t v;
    cr_assert_eq(lt_buffer_token_values_get(b, ids[i], &v), 1);
    cr_assert(v.recomputed && v.step == 3 && v.n == kept[i].n && v.traj_ok == kept[i].traj_ok, "task %lld",
              (long long)ids[i]);
    cr_assert(strstr(v.loss, "checkpoints/v2"), "the weights are named: %s", v.loss);
    cr_assert_eq(memcmp(v.flags, kept[i].flags, (size_t)v.n), 0, "task %lld: the masks differ", (long long)ids[i]);
    for (int t = 0; t < v.n; t++) {
      cr_assert_float_eq(v.ratio[t], kept[i].ratio[t], 1e-6 * kept[i].ratio[t], "task %lld token %d", (long long)ids[i],
                         t);
      cr_assert_float_eq(v.logp_old[t], kept[i].logp_old[t], 1e-5, "task %lld token %d", (long long)ids[i], t);
      cr_assert(isnan(v.adv[t]), "no critic in checkpoints/v2: no advantages");
      rejected += (v.flags[t] & LT_TOKV_LOSS) && !(v.flags[t] & LT_TOKV_TOKEN_OK);
    }
    lt_buffer_token_values_free(&v);
    lt_buffer_token_values_free(&kept[i]);
  }
  cr_expect_gt(rejected, 0, "the token mask rejected nothing: the test checks little");
  free(kept);
  free(ids);
  lt_buffer_close(b);
  lt_test_rmdir(dir);
}

/* Sampling settings off the default (issue 18's table): on a fresh policy
 * the learner's π_old equals what the rollout sampled from, so every ratio is
 * 1 in the first steps, and replay reproduces the logged ratios.  Before the
 * learner honoured the temperature and the exact top-p/top-k set these were
 * 0.03 / 0.12 and 0.00 / 1.98 (mis/traj_accept / mismatch/abs_log_ratio). */
Test(analysis, sampling_settings_keep_the_ratios_at_one, .timeout = 180) {
  static const char *settings[][3] = {
      {"rollout.temperature=0.6", "rollout.top_k=0", "learner.keep_sampling_mask=false"},
      {"rollout.temperature=0.7", "rollout.top_k=20", "learner.keep_sampling_mask=true"}};
  for (int k = 0; k < 2; k++) {
    char *dir = lt_test_tmpdir("sampling");
    char rd[4200], cfg[4200];
    snprintf(rd, sizeof rd, "%s/run", dir);
    snprintf(cfg, sizeof cfg, "%s/configs/smoke.json", lt_test_root());
    lt_run_t r;
    const char *argv[] = {"longtail", "train",        cfg,     "--run-dir",    rd,  "--set", settings[k][0],
                          "--set",    settings[k][1], "--set", settings[k][2], NULL};
    cr_assert_eq(lt_test_run(&r, NULL, 90, argv), 0);
    cr_assert_eq(r.status, 0, "%s", r.err);
    lt_run_free(&r);
    cr_assert_eq(lt_test_sh(&r, 30,
                            "sqlite3 %s/buffer.db \"SELECT min(value) FROM metrics WHERE name = 'mis/traj_accept' "
                            "AND step <= 2; SELECT max(value) FROM metrics WHERE name = 'mismatch/abs_log_ratio' "
                            "AND step <= 2\"",
                            rd),
                 0);
    double accept = -1, mism = -1;
    cr_assert_eq(sscanf(r.out, "%lf %lf", &accept, &mism), 2, "%s", r.out);
    cr_expect_geq(accept, 0.9, "%s: mis/traj_accept %g", settings[k][0], accept);
    cr_expect_leq(mism, 0.01, "%s: mismatch/abs_log_ratio %g", settings[k][0], mism);
    lt_run_free(&r);
    const char *rp[] = {"longtail", "replay", rd, "--step", "2", "--json", NULL};
    cr_assert_eq(lt_test_run(&r, NULL, 60, rp), 0);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cJSON *j = cJSON_Parse(r.out);
    cr_assert(j, "%s", r.out);
    double a = field(j, "recomputed", "mismatch_abs_log_ratio"), b = field(j, "logged", "mismatch/abs_log_ratio");
    cr_expect(fabs(a - b) <= 1e-12 + 1e-9 * fabs(b), "%s: replay %.17g, learner %.17g", settings[k][0], a, b);
    cr_expect_eq(field(j, "recomputed", "traj_accept"), field(j, "logged", "mis/traj_accept"));
    cJSON_Delete(j);
    lt_run_free(&r);
    lt_test_rmdir(dir);
  }
}

/* 1 if s is valid UTF-8. */
static int utf8_ok(const unsigned char *s) {
  while (*s) {
    int n = *s < 0x80 ? 0 : (*s & 0xE0) == 0xC0 ? 1 : (*s & 0xF0) == 0xE0 ? 2 : (*s & 0xF8) == 0xF0 ? 3 : -1;
    if (n < 0) return 0;
    s++;
    for (int i = 0; i < n; i++, s++)
      if ((*s & 0xC0) != 0x80) return 0;
  }
  return 1;
}

Test(analysis, export_streams_both_formats_with_filters, .timeout = 120) {
  char *dir = lt_test_tmpdir("export");
  record_run(dir, "a", 7);
  lt_run_t r;
  char rd[4200];
  snprintf(rd, sizeof rd, "%s/a", dir);
  const char *j[] = {"longtail", "export", rd, "--format", "jsonl", NULL};
  cr_assert_eq(lt_test_run(&r, NULL, 60, j), 0);
  cr_assert_eq(r.status, 0, "%s", r.err);
  /* The random policy writes arbitrary bytes; the export is still valid UTF-8 JSON. */
  cr_expect(utf8_ok((const unsigned char *)r.out), "invalid UTF-8 in the export");
  int lines = 0;
  for (char *save, *l = strtok_r(r.out, "\n", &save); l; l = strtok_r(NULL, "\n", &save), lines++) {
    cJSON *o = cJSON_Parse(l);
    cr_assert(o, "line %d is not JSON", lines);
    const cJSON *m = cJSON_GetObjectItem(o, "messages");
    cr_expect(cJSON_GetArraySize(m) >= 2 && !strcmp(cJSON_GetObjectItem(m->child, "role")->valuestring, "user"));
    cr_expect(cJSON_IsNumber(cJSON_GetObjectItem(o, "task_id")) && cJSON_IsBool(cJSON_GetObjectItem(o, "truncated")));
    cJSON_Delete(o);
  }
  cr_expect_eq(lines, 96 + 16 * 2, "every trajectory, eval samples included"); /* eval rounds at steps 0 and 2 */
  lt_run_free(&r);
  /* tokens: arrays agree with ntokens; the step filter matches the buffer. */
  const char *t[] = {"longtail", "export",       rd,    "--format", "tokens", "--status",
                     "consumed", "--step-range", "2:2", NULL};
  cr_assert_eq(lt_test_run(&r, NULL, 60, t), 0);
  cr_assert_eq(r.status, 0, "%s", r.err);
  int n = 0;
  for (char *save, *l = strtok_r(r.out, "\n", &save); l; l = strtok_r(NULL, "\n", &save), n++) {
    cJSON *o = cJSON_Parse(l);
    cr_assert(o);
    int T = (int)cJSON_GetObjectItem(o, "ntokens")->valuedouble;
    cr_expect_str_eq(cJSON_GetObjectItem(o, "format")->valuestring, "longtail.tokens/1");
    static const char *arr[] = {"tokens", "logprobs", "loss_mask", "versions"};
    for (int k = 0; k < 4; k++) cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(o, arr[k])), T, "%s", arr[k]);
    cr_expect_eq(cJSON_GetObjectItem(o, "consumed_step")->valuedouble, 2);
    cr_expect_eq(cJSON_GetObjectItem(o, "temperature")->valuedouble, 1, "the sampling temperature is recorded");
    cr_expect(cJSON_IsNull(cJSON_GetObjectItem(o, "support_ids")), "smoke samples the whole vocabulary");
    const cJSON *rt = cJSON_GetObjectItem(o, "routing");
    cr_expect(cJSON_IsNull(rt) ||
              cJSON_GetArraySize(cJSON_GetObjectItem(rt, "ids")) ==
                  T * cJSON_GetObjectItem(rt, "layers")->valueint * cJSON_GetObjectItem(rt, "k")->valueint);
    cJSON_Delete(o);
  }
  lt_run_free(&r);
  cr_assert_eq(lt_test_sh(&r, 30,
                          "sqlite3 %s/buffer.db \"SELECT count(*) FROM trajectories WHERE consumed_step = 2 AND "
                          "status = 'consumed'\"",
                          rd),
               0);
  cr_expect_eq(n, atoi(r.out));
  cr_expect_gt(n, 0);
  lt_run_free(&r);
  /* Filters that match nothing, bad filters, an unwritable output. */
  cr_assert_eq(lt_test_sh(&r, 30, "'%s' export %s --min-reward 2 | wc -l", lt_test_bin(), rd), 0);
  cr_expect_eq(atoi(r.out), 0);
  lt_run_free(&r);
  cr_assert_eq(lt_test_sh(&r, 30, "'%s' export %s --status nope", lt_test_bin(), rd), 0);
  cr_expect_eq(r.status, 2);
  lt_run_free(&r);
  cr_assert_eq(lt_test_sh(&r, 30, "'%s' export %s --step-range x:3", lt_test_bin(), rd), 0);
  cr_expect_eq(r.status, 2);
  lt_run_free(&r);
  cr_assert_eq(lt_test_sh(&r, 30, "'%s' export %s -o /nonexistent/dir/x.jsonl", lt_test_bin(), rd), 0);
  cr_expect_eq(r.status, 3);
  cr_expect(strstr(r.err, "/nonexistent/dir/x.jsonl"), "%s", r.err);
  lt_run_free(&r);
  lt_test_rmdir(dir);
}

Test(analysis, inspect_renders_one_trajectory, .timeout = 120) {
  char *dir = lt_test_tmpdir("inspect");
  record_run(dir, "a", 7);
  lt_run_t r;
  cr_assert_eq(lt_test_sh(&r, 30, "'%s' inspect %s/a --task 5 --color never", lt_test_bin(), dir), 0);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cr_expect(strstr(r.out, "task 5 ·") && strstr(r.out, "── user ──") && strstr(r.out, "── assistant ──") &&
                strstr(r.out, "── tokens ──") && strstr(r.out, "<|im_start|>"),
            "%s", r.out);
  cr_expect(strstr(r.out, "|-") || strstr(r.out, "|0.00]"), "generated tokens carry their logprobs: %s", r.out);
  lt_run_free(&r);
  cr_assert_eq(lt_test_sh(&r, 30, "'%s' inspect %s/a --task 5 --color always", lt_test_bin(), dir), 0);
  cr_expect(strstr(r.out, "\033["), "no colours with --color always");
  lt_run_free(&r);
  cr_assert_eq(lt_test_sh(&r, 30, "'%s' inspect %s/a --task 123456", lt_test_bin(), dir), 0);
  cr_expect_neq(r.status, 0);
  cr_expect(strstr(r.err, "no trajectory for task 123456"), "%s", r.err);
  lt_run_free(&r);
  lt_test_rmdir(dir);
}
