/* `longtail retrain` on runs the tests record: bit-identical versions at every step for a finished run and for one
 * interrupted (SIGINT) and resumed, a what-if that trains differently on the same batches, and a buffer that lost a
 * trajectory a step trained on. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cJSON.h"
#include "tests/support/harness.h"
#include "tests/support/live.h"
#include "util/sha256.h"

/* The smoke config with a length penalty: the tiny random policy never answers right, so without it every reward
 * is equal, every advantage 0, and the steps would only decay the weights. */
#define PENALTY "rewards.length_penalty.target=4"

/* eval: held-out rounds at steps 0 and 2 (16 prompts). */
static void smoke_run(const char *rd, int eval) {
  char cfg[4200];
  snprintf(cfg, sizeof cfg, "%s/configs/smoke.json", lt_test_root());
  lt_run_t r;
  const char *argv[] = {"longtail",
                        "train",
                        cfg,
                        "--run-dir",
                        rd,
                        "--set",
                        "monitor.plot=false",
                        "--set",
                        PENALTY,
                        eval ? "--set" : NULL,
                        "eval.every=2",
                        "--set",
                        "eval.prompts=16",
                        NULL};
  cr_assert_eq(lt_test_run(&r, NULL, 90, argv), 0);
  cr_assert_eq(r.status, 0, "%s", r.err);
  lt_run_free(&r);
}

/* `longtail retrain RUN --out OUT [extra]`: its exit status, output in *r (the caller frees). */
static int retrain(lt_run_t *r, const char *run, const char *out, const char *extra) {
  cr_assert_eq(lt_test_sh(r, 120, "'%s' retrain %s --out %s %s", lt_test_bin(), run, out, extra), 0);
  return r->status;
}

/* Every version the run recorded (1..steps) is in OUT/checkpoints/vN with the run's SHA-256, and the run's own
 * files, where it still keeps them, are byte for byte the same. */
static void same_versions(const char *run, const char *out, int steps) {
  char db[4300], sql[256], f[4300], g[4300], sha[65];
  snprintf(db, sizeof db, "%s/buffer.db", run);
  for (int v = 1; v <= steps; v++) {
    snprintf(f, sizeof f, "%s/checkpoints/v%d/model.safetensors", out, v);
    cr_assert_eq(lt_sha256_file(f, sha), 0, "%s", f);
    lt_run_t r;
    snprintf(sql, sizeof sql, "SELECT sha256 FROM checkpoints WHERE version = %d", v);
    cr_assert_eq(lt_test_sh(&r, 30, "sqlite3 %s '%s'", db, sql), 0);
    cr_assert(strncmp(r.out, sha, 64) == 0, "v%d: %s here, %s in the run", v, sha, r.out);
    lt_run_free(&r);
    snprintf(g, sizeof g, "%s/checkpoints/v%d/model.safetensors", run, v);
    cr_assert_eq(lt_test_sh(&r, 30, "test ! -e %s || cmp %s %s", g, f, g), 0);
    cr_assert_eq(r.status, 0, "v%d: %s", v, r.out);
    lt_run_free(&r);
  }
}

static int count(const char *hay, const char *needle) {
  int n = 0;
  for (const char *p = hay; (p = strstr(p, needle)); p++) n++;
  return n;
}

Test(retrain, smoke_run_bit_identical_and_a_grpo_what_if_differs, .timeout = 240) {
  char *dir = lt_test_tmpdir("retrain");
  char rd[4200], out[4200], wi[4200], p[4300];
  snprintf(rd, sizeof rd, "%s/run", dir);
  snprintf(out, sizeof out, "%s/again", dir);
  snprintf(wi, sizeof wi, "%s/grpo", dir);
  smoke_run(rd, 1);
  lt_run_t r;
  cr_assert_eq(retrain(&r, rd, out, ""), 0, "%s%s", r.out, r.err);
  cr_assert_eq(count(r.out, " identical"), 3, "%s", r.out);
  cr_assert(strstr(r.out, "3 steps bit-identical"), "%s", r.out);
  lt_run_free(&r);
  same_versions(rd, out, 3);
  /* Steps 2 and 3 only: step 1 is trained to reach step 2's weights, not written. */
  snprintf(p, sizeof p, "%s-23", out);
  cr_assert_eq(retrain(&r, rd, p, "--steps 2..3"), 0, "%s%s", r.out, r.err);
  cr_assert(!strstr(r.out, "step 1 ") && strstr(r.out, "2 steps bit-identical"), "%s", r.out);
  lt_run_free(&r);
  /* A folder that already holds a run is refused. */
  cr_assert_eq(retrain(&r, rd, out, ""), 2, "%s", r.err);
  cr_assert(strstr(r.err, "already holds a run"), "%s", r.err);
  lt_run_free(&r);
  /* The same batches under GRPO: every step runs, nothing is compared, the weights and the update differ. */
  cr_assert_eq(retrain(&r, rd, wi, "--set learner.objective=grpo"), 0, "%s%s", r.out, r.err);
  cr_assert_eq(count(r.out, " what-if"), 3, "%s", r.out);
  /* Its versions evaluated where the run evaluated its own, on the run's held-out prompts. */
  cr_assert(strstr(r.out, "eval v0 ") && strstr(r.out, "eval v2 ") && !strstr(r.out, "eval v1 "), "%s", r.out);
  lt_run_free(&r);
  char a[65], b[65];
  snprintf(p, sizeof p, "%s/checkpoints/v3/model.safetensors", wi);
  cr_assert_eq(lt_sha256_file(p, a), 0);
  snprintf(p, sizeof p, "%s/checkpoints/v3/model.safetensors", out);
  cr_assert_eq(lt_sha256_file(p, b), 0);
  cr_assert(strcmp(a, b), "GRPO trained the same weights");
  /* A run folder like any: stats, compare and its summary read it. */
  cJSON *s = lt_test_stats(wi);
  cr_assert_eq(lt_test_at(s, "learner_step", NULL), 3);
  cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(s, "eval")), 2);
  cJSON_Delete(s);
  cr_assert_eq(lt_test_sh(&r, 60, "'%s' compare %s %s --json", lt_test_bin(), rd, wi), 0);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cJSON *j = cJSON_Parse(r.out);
  const cJSON *g = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "metrics"), "actor/grad_norm");
  cr_assert_eq(cJSON_GetArraySize(g), 2, "%s", r.out);
  cr_assert_neq(cJSON_GetObjectItem(cJSON_GetArrayItem(g, 0), "mean")->valuedouble,
                cJSON_GetObjectItem(cJSON_GetArrayItem(g, 1), "mean")->valuedouble, "%s", r.out);
  cJSON_Delete(j);
  lt_run_free(&r);
  snprintf(p, sizeof p, "%s/summary.json", wi);
  char *txt = lt_test_read(p);
  cJSON *sum = txt ? cJSON_Parse(txt) : NULL;
  const cJSON *rt = cJSON_GetObjectItem(sum, "retrain");
  cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(rt, "what_if")), "%s", txt);
  cr_assert_eq(cJSON_GetObjectItem(sum, "learner_steps")->valuedouble, 3, "%s", txt);
  cJSON_Delete(sum);
  free(txt);
  lt_test_rmdir(dir);
}

Test(retrain, run_interrupted_and_resumed_bit_identical, .timeout = 240) {
  char *dir = lt_test_tmpdir("retrain_resume");
  char rd[4200], out[4200], cfg[4200];
  snprintf(rd, sizeof rd, "%s/run", dir);
  snprintf(out, sizeof out, "%s/again", dir);
  snprintf(cfg, sizeof cfg, "%s/configs/smoke.json", lt_test_root());
  /* Fewer slots: the tasks in flight when SIGINT comes leave steps for the resumed daemon. */
  const char *argv[] = {"longtail", "train", cfg,     "--run-dir",       rd,  "--set", "monitor.plot=false",
                        "--set",    PENALTY, "--set", "workers.slots=2", NULL};
  pid_t d = lt_test_spawn(dir, "daemon1", argv);
  cr_assert_gt(d, 0);
  cr_assert_geq(lt_test_poll_stat(rd, "learner_step", NULL, 1, 60), 1, "no learner step before SIGINT");
  kill(d, SIGINT);
  cr_assert_eq(lt_test_wait(d, 60), 0);
  cJSON *s = lt_test_stats(rd);
  double before = lt_test_at(s, "learner_step", NULL);
  cJSON_Delete(s);
  cr_assert_lt(before, 3, "the interrupted run finished all its steps");
  const char *argv2[] = {
      "longtail", "train", cfg,     "--run-dir",       rd,  "--resume", "--set", "monitor.plot=false",
      "--set",    PENALTY, "--set", "workers.slots=2", NULL};
  lt_run_t r;
  cr_assert_eq(lt_test_run(&r, NULL, 90, argv2), 0);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cr_assert(strstr(r.err, "resuming at learner step"), "%s", r.err);
  lt_run_free(&r);
  cr_assert_eq(retrain(&r, rd, out, ""), 0, "%s%s", r.out, r.err);
  cr_assert_eq(count(r.out, " identical"), 3, "%s", r.out);
  lt_run_free(&r);
  same_versions(rd, out, 3);
  lt_test_rmdir(dir);
}

Test(retrain, a_deleted_trajectory_stops_it_naming_step_and_task, .timeout = 240) {
  char *dir = lt_test_tmpdir("retrain_damaged");
  char rd[4200], out[4200], db[4300];
  snprintf(rd, sizeof rd, "%s/run", dir);
  snprintf(out, sizeof out, "%s/again", dir);
  snprintf(db, sizeof db, "%s/buffer.db", rd);
  smoke_run(rd, 0);
  long long task = lt_test_sql1(db, "SELECT min(task_id) FROM trajectories WHERE consumed_step = 2");
  cr_assert_gt(task, 0);
  lt_run_t r;
  cr_assert_eq(lt_test_sh(&r, 30, "sqlite3 %s 'DELETE FROM trajectories WHERE task_id = %lld'", db, task), 0);
  cr_assert_eq(r.status, 0, "%s", r.err);
  lt_run_free(&r);
  /* Step 1 is still the run's; step 2 is refused, not trained on fewer. */
  cr_assert_eq(retrain(&r, rd, out, ""), 6, "%s%s", r.out, r.err);
  cr_assert(strstr(r.out, "step 1 ") && strstr(r.out, "identical"), "%s", r.out);
  char want[128];
  snprintf(want, sizeof want, "step 2: the trajectory of task %lld it trained on is not in the buffer", task);
  cr_assert(strstr(r.err, want), "%s", r.err);
  cr_assert_null(strstr(r.out, "step 2 "), "%s", r.out);
  lt_run_free(&r);
  lt_test_rmdir(dir);
}
