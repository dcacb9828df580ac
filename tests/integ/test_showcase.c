/* The agentic showcase (configs/agentic.json) shortened to seconds: the warm
 * start on the tools domain's demonstrations, multi-turn rollouts, MIS-PO
 * steps and held-out evaluations, end to end with real processes. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cJSON.h"
#include "tests/support/harness.h"

Test(showcase, agentic_runs_end_to_end_with_evaluations, .timeout = 240) {
  char *dir = lt_test_tmpdir("showcase");
  char rd[4200], cfg[4200];
  snprintf(rd, sizeof rd, "%s/run", dir);
  snprintf(cfg, sizeof cfg, "%s/configs/agentic.json", lt_test_root());
  lt_run_t r;
  const char *argv[] = {"longtail",
                        "train",
                        cfg,
                        "--run-dir",
                        rd,
                        "--set",
                        "sft.steps=2",
                        "--set",
                        "sft.batch=2",
                        "--set",
                        "learner.steps=2",
                        "--set",
                        "learner.batch.trajectories=8",
                        "--set",
                        "scheduler.group_size=4",
                        "--set",
                        "rollout.max_turns=3",
                        "--set",
                        "rollout.max_new_tokens=24",
                        "--set",
                        "eval.every=1",
                        "--set",
                        "eval.prompts=4",
                        "--set",
                        "checkpoint.every=0",
                        "--set",
                        "transport.endpoint=tcp://127.0.0.1:*",
                        "--set",
                        "monitor.progress=off",
                        NULL};
  cr_assert_eq(lt_test_run(&r, NULL, 200, argv), 0);
  cr_assert_eq(r.status, 0, "%s", r.err);
  lt_run_free(&r);
  const char *st[] = {"longtail", "stats", rd, "--json", NULL};
  cr_assert_eq(lt_test_run(&r, NULL, 30, st), 0);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cJSON *j = cJSON_Parse(r.out);
  cr_assert(j, "stats --json: %s", r.out);
  /* Evaluations at step 0 (after the warm start) and after the RL steps. */
  const cJSON *ev = cJSON_GetObjectItem(j, "eval");
  cr_assert(cJSON_IsArray(ev) && cJSON_GetArraySize(ev) >= 2, "%s", r.out);
  cr_expect_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(ev, 0), "step")->valuedouble, 0);
  cr_expect_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(ev, cJSON_GetArraySize(ev) - 1), "step")->valuedouble, 2);
  cJSON_Delete(j);
  lt_run_free(&r);
  /* Multi-turn episodes: the turns metric was recorded, and the run's plot was drawn. */
  cr_assert_eq(lt_test_sh(&r, 30, "'%s' plot %s --metric rollout/turns_mean --metric 'staleness/hist_*' -o %s/t.png",
                          lt_test_bin(), rd, dir),
               0);
  cr_expect_eq(r.status, 0, "%s", r.err);
  lt_run_free(&r);
  char p[4300];
  snprintf(p, sizeof p, "%s/plot.png", rd);
  char *png = lt_test_read(p);
  cr_expect(png && memcmp(png, "\x89PNG", 4) == 0, "no plot.png");
  free(png);
  lt_test_rmdir(dir);
}
