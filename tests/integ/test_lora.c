/* A LoRA run end to end (docs/lora.md): the smoke job with learner.lora publishes v0 whole and then adapters in PEFT's
 * layout with deltas, its local workers sample from adapter versions, `longtail retrain` reproduces the adapters' files
 * bit for bit, `longtail lora merge` writes a whole checkpoint with the same function, and the offline commands read
 * the run unchanged. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cJSON.h"
#include "tests/support/harness.h"
#include "tests/support/live.h"
#include "util/delta.h"
#include "util/fs.h"
#include "util/sha256.h"

/* Synchronous (scheduler.mode sync): steps 2 and 3 train on trajectories of v1 and v2 however loaded the machine. */
static void lora_run(const char *rd, const char *extra) {
  lt_run_t r;
  cr_assert_eq(lt_test_sh(&r, 120,
                          "'%s' train '%s/configs/smoke.json' --run-dir '%s' --set monitor.plot=false --set "
                          "rewards.length_penalty.target=4 --set learner.lora.rank=8 --set learner.lr=1e-3 "
                          "--set scheduler.mode=sync --set learner.steps=3 %s",
                          lt_test_bin(), lt_test_root(), rd, extra),
               0);
  cr_assert_eq(r.status, 0, "%s", r.err);
  lt_run_free(&r);
}

static int exists(const char *rd, int v, const char *file) {
  char p[4400];
  snprintf(p, sizeof p, "%s/checkpoints/v%d/%s", rd, v, file);
  return lt_fs_exists(p);
}

/* The logprobs `longtail logprobs` gives for one sequence under model dir. */
static void logprobs(const char *dir, double *out, int n) {
  lt_run_t r;
  cr_assert_eq(lt_test_sh(&r, 60,
                          "echo '{\"tokens\": [1, 5, 7, 9, 3, 2, 11, 4]}' | '%s' logprobs --model '%s' "
                          "--input /dev/stdin",
                          lt_test_bin(), dir),
               0);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cJSON *j = cJSON_Parse(r.out);
  const cJSON *lp = cJSON_GetObjectItem(j, "logprobs");
  cr_assert_eq(cJSON_GetArraySize(lp), n, "%s", r.out);
  for (int i = 0; i < n; i++) out[i] = cJSON_GetArrayItem(lp, i)->valuedouble;
  cJSON_Delete(j);
  lt_run_free(&r);
}

Test(lora, a_run_publishes_adapters_workers_run_them_retrain_and_merge, .timeout = 300) {
  char *dir = lt_test_tmpdir("lora-run");
  char rd[4200], out[4200], merged[4200], p[4400], q[4400];
  snprintf(rd, sizeof rd, "%s/run", dir);
  snprintf(out, sizeof out, "%s/again", dir);
  snprintf(merged, sizeof merged, "%s/merged", dir);
  lora_run(rd, "");
  /* v0 whole, once; every later version an adapter (and its delta against the one before). */
  cr_assert(exists(rd, 0, "model.safetensors") && !exists(rd, 0, "adapter_config.json"));
  for (int v = 1; v <= 3; v++) {
    cr_assert(exists(rd, v, "adapter_model.safetensors") && exists(rd, v, "adapter_config.json"), "v%d", v);
    cr_assert(!exists(rd, v, "model.safetensors"), "v%d holds the whole model", v);
    cr_assert_eq(exists(rd, v, "delta.zst"), v > 1, "v%d: delta.zst", v);
  }
  snprintf(p, sizeof p, "%s/checkpoints/v3/adapter_config.json", rd);
  char *txt = lt_test_read(p);
  cJSON *ac = cJSON_Parse(txt);
  cr_assert_str_eq(cJSON_GetObjectItem(ac, "peft_type")->valuestring, "LORA", "%s", txt);
  cr_assert_eq(cJSON_GetObjectItem(ac, "r")->valuedouble, 8);
  cr_assert_eq(cJSON_GetObjectItem(ac, "lora_alpha")->valuedouble, 32);
  cr_assert_str_eq(cJSON_GetObjectItem(ac, "base_model_name_or_path")->valuestring, "../v0");
  cJSON_Delete(ac);
  free(txt);
  /* v3's delta rebuilds v3's adapter from v2's. */
  char sha[65], want[65];
  snprintf(p, sizeof p, "%s/checkpoints/v2/adapter_model.safetensors", rd);
  snprintf(q, sizeof q, "%s/checkpoints/v3/delta.zst", rd);
  char rebuilt[4400];
  snprintf(rebuilt, sizeof rebuilt, "%s/rebuilt.safetensors", dir);
  cr_assert_eq(lt_delta_apply(p, q, rebuilt), 0);
  snprintf(p, sizeof p, "%s/checkpoints/v3/adapter_model.safetensors", rd);
  cr_assert_eq(lt_sha256_file(p, want), 0);
  cr_assert_eq(lt_sha256_file(rebuilt, sha), 0);
  cr_assert_str_eq(sha, want);
  /* The workers' engines sampled from adapter versions (an adapter load per switch, the base kept). */
  lt_run_t r;
  snprintf(p, sizeof p, "%s/buffer.db", rd);
  cr_assert_eq(lt_test_sh(&r, 30, "sqlite3 '%s' 'SELECT count(*) FROM trajectories WHERE version_min >= 1'", p), 0);
  cr_assert_gt(atoi(r.out), 0, "no trajectory sampled from an adapter version: %s", r.out);
  lt_run_free(&r);
  /* Bit for bit: the adapters' files of every step. */
  cr_assert_eq(lt_test_sh(&r, 120, "'%s' retrain '%s' --out '%s'", lt_test_bin(), rd, out), 0);
  cr_assert_eq(r.status, 0, "%s%s", r.out, r.err);
  cr_assert(strstr(r.out, "3 steps bit-identical"), "%s", r.out);
  lt_run_free(&r);
  for (int v = 1; v <= 3; v++) {
    cr_assert_eq(lt_test_sh(&r, 30,
                            "cmp '%s/checkpoints/v%d/adapter_model.safetensors' "
                            "'%s/checkpoints/v%d/adapter_model.safetensors'",
                            rd, v, out, v),
                 0);
    cr_assert_eq(r.status, 0, "v%d: %s", v, r.out);
    lt_run_free(&r);
  }
  /* Merged: a whole checkpoint with the adapted function, not the base's. */
  snprintf(p, sizeof p, "%s/checkpoints/v3", rd);
  cr_assert_eq(lt_test_sh(&r, 60, "'%s' lora merge '%s' --out '%s'", lt_test_bin(), p, merged), 0);
  cr_assert_eq(r.status, 0, "%s", r.err);
  lt_run_free(&r);
  snprintf(q, sizeof q, "%s/model.safetensors", merged);
  cr_assert(lt_fs_exists(q));
  snprintf(q, sizeof q, "%s/adapter_config.json", merged);
  cr_assert(!lt_fs_exists(q), "the merged checkpoint is whole");
  double a[8], b[8], c[8];
  logprobs(p, a, 8);
  logprobs(merged, b, 8);
  snprintf(q, sizeof q, "%s/checkpoints/v0", rd);
  logprobs(q, c, 8);
  double moved = 0;
  for (int i = 0; i < 8; i++) {
    cr_expect(fabs(a[i] - b[i]) < 1e-5, "token %d: adapter %g, merged %g", i, a[i], b[i]);
    moved = fmax(moved, fabs(a[i] - c[i]));
  }
  cr_expect_gt(moved, 1e-3, "the adapters did not change the policy");
  /* The offline commands read a LoRA run as any. */
  cJSON *s = lt_test_stats(rd);
  cr_assert_eq(lt_test_at(s, "learner_step", NULL), 3);
  cJSON_Delete(s);
  cr_assert_eq(lt_test_sh(&r, 60, "'%s' replay '%s' --json", lt_test_bin(), rd), 0);
  cr_assert_eq(r.status, 0, "%s", r.err);
  lt_run_free(&r);
  /* A merge of what is no adapter is refused. */
  snprintf(q, sizeof q, "%s/checkpoints/v0", rd);
  cr_assert_eq(lt_test_sh(&r, 60, "'%s' lora merge '%s' --out '%s/x'", lt_test_bin(), q, dir), 0);
  cr_assert_neq(r.status, 0);
  cr_assert(strstr(r.err, "not a LoRA version"), "%s", r.err);
  lt_run_free(&r);
  lt_test_rmdir(dir);
}

/* checkpoint.lora_publish "merged": every version whole, as without LoRA; publish_dtype bf16 applies to adapters (the
 * fp32 values beside them for the learner). */
Test(lora, merged_and_bf16_publishing, .timeout = 240) {
  char *dir = lt_test_tmpdir("lora-pub");
  char rd[4200];
  snprintf(rd, sizeof rd, "%s/merged", dir);
  lora_run(rd, "--set checkpoint.lora_publish=merged");
  for (int v = 0; v <= 3; v++)
    cr_assert(exists(rd, v, "model.safetensors") && !exists(rd, v, "adapter_config.json"), "v%d", v);
  snprintf(rd, sizeof rd, "%s/bf16", dir);
  lora_run(rd, "--set checkpoint.publish_dtype=bf16");
  char p[4400];
  snprintf(p, sizeof p, "%s/checkpoints/v2/adapter_model.safetensors", rd);
  lt_run_t r;
  cr_assert_eq(lt_test_sh(&r, 30, "head -c 400 '%s' | grep -c BF16", p), 0);
  cr_assert_eq(atoi(r.out), 1, "the adapter is not bf16");
  lt_run_free(&r);
  cr_assert(exists(rd, 2, "adapter_master.safetensors"));
  lt_test_rmdir(dir);
}
