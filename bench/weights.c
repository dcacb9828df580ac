/* Benchmark: what a worker downloads per policy version.  A real run trains moe-10m at learner.lr 1e-4 with
 * checkpoint.publish_dtype bf16; each version's delta.zst (against the version before) is compared with the full
 * bf16 and fp32 files, and applying it is timed next to the baseline a delta replaces: copying the whole bf16
 * file.  Prints a table on stderr and one JSON object on the last stdout line. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench/bench.h"
#include "util/delta.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/time.h"

#define MAXV 64

static int64_t size_of(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 ? (int64_t)st.st_size : -1;
}

int main(void) {
  const char *bin = getenv("LT_BIN") ? getenv("LT_BIN") : "bin/longtail";
  char dir[] = "/tmp/lt-bench-weights-XXXXXX";
  if (!mkdtemp(dir)) return 1;
  char rd[512], cfg[512], model[512];
  snprintf(rd, sizeof rd, "%s/run", dir);
  snprintf(cfg, sizeof cfg, "configs/smoke.json");
  snprintf(model, sizeof model, "model.init=%s/configs/models/moe-10m.json", getcwd(NULL, 0));
  /* Six learner steps of 32 trajectories; KEEP_VERSIONS leaves the last four versions with their deltas. */
  char *const argv[] = {(char *)bin,
                        "train",
                        cfg,
                        "--run-dir",
                        rd,
                        "--set",
                        model,
                        "--set",
                        "learner.lr=1e-4",
                        "--set",
                        "checkpoint.publish_dtype=bf16",
                        "--set",
                        "scheduler.max_tasks=192",
                        NULL};
  char log[600];
  snprintf(log, sizeof log, "%s/train.out", dir);
  double train_s = bench_run(argv, log);
  if (train_s < 0) {
    fprintf(stderr, "bench/weights: the training run failed (%s)\n", rd);
    return 1;
  }
  double ratio[MAXV], apply_ms[MAXV], copy_ms[MAXV];
  int n = 0;
  int64_t full_bf16 = 0, full_fp32 = 0, delta_bytes = 0;
  for (int v = 1; v < MAXV && n < MAXV; v++) {
    char prev[700], cur[700], master[700], delta[700], out[700], copy[700];
    snprintf(prev, sizeof prev, "%s/checkpoints/v%d/model.safetensors", rd, v - 1);
    snprintf(cur, sizeof cur, "%s/checkpoints/v%d/model.safetensors", rd, v);
    snprintf(master, sizeof master, "%s/checkpoints/v%d/master.safetensors", rd, v);
    snprintf(delta, sizeof delta, "%s/checkpoints/v%d/delta.zst", rd, v);
    snprintf(out, sizeof out, "%s/rebuilt", dir);
    snprintf(copy, sizeof copy, "%s/copied", dir);
    if (!lt_fs_exists(prev) || !lt_fs_exists(delta)) continue;
    full_bf16 = size_of(cur);
    full_fp32 = size_of(master);
    delta_bytes = size_of(delta);
    ratio[n] = (double)delta_bytes / (double)full_bf16;
    double t0 = lt_time_mono_s();
    if (lt_delta_apply(prev, delta, out) < 0) {
      fprintf(stderr, "bench/weights: v%d: %s\n", v, lt_error_msg());
      return 1;
    }
    apply_ms[n] = (lt_time_mono_s() - t0) * 1e3;
    t0 = lt_time_mono_s();
    if (lt_fs_copy_file(cur, copy) < 0) return 1;
    copy_ms[n] = (lt_time_mono_s() - t0) * 1e3;
    fprintf(stderr, "v%-3d delta %8lld bytes of %lld bf16 (%.4f), apply %.1f ms, copy of the full file %.1f ms\n", v,
            (long long)delta_bytes, (long long)full_bf16, ratio[n], apply_ms[n], copy_ms[n]);
    n++;
  }
  if (n == 0) {
    fprintf(stderr, "bench/weights: no version with a delta in %s\n", rd);
    return 1;
  }
  double lo, hi, alo, ahi;
  double r = bench_median(ratio, n, &lo, &hi), a = bench_median(apply_ms, n, &alo, &ahi),
         c = bench_median(copy_ms, n, NULL, NULL);
  fprintf(stderr,
          "weights: %d versions; delta/full bf16 median %.4f (%.4f-%.4f), delta/full fp32 %.4f; apply %.1f ms "
          "vs copying the whole bf16 file %.1f ms; training run %.0f s\n",
          n, r, lo, hi, r * (double)full_bf16 / (double)full_fp32, a, c, train_s);
  printf(
      "{\"weights_delta_ratio\": %.5f, \"weights_delta_ratio_min\": %.5f, \"weights_delta_ratio_max\": %.5f, "
      "\"weights_delta_vs_fp32_ratio\": %.5f, \"weights_apply_ms\": %.2f, \"weights_full_copy_ms\": %.2f, "
      "\"weights_versions_measured\": %d, \"weights_full_bf16_bytes\": %lld}\n",
      r, lo, hi, r * (double)full_bf16 / (double)full_fp32, a, c, n, (long long)full_bf16);
  lt_fs_remove_tree(dir);
  return 0;
}
