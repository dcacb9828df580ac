/* Benchmark: time to accuracy on the agentic showcase (configs/agentic.json),
 * synchronous (scheduler.mode sync: a batch barrier) against asynchronous,
 * with real multi-turn rollouts of the builtin engine and real learning.
 *
 * Shortened to fit `make bench` on 2 cores: one warm start (the showcase's
 * sft section) is shared by every run, so both modes start from the same
 * policy; then each mode trains LEARNER_STEPS steps of the showcase's 64
 * trajectories (the showcase: 20) for each of SEEDS seeds (run.seed: the
 * tasks, the samples and the critic), evaluating held-out success every
 * EVAL_EVERY steps on EVAL_PROMPTS prompts.  Both modes of a seed evaluate
 * the same policy at step 0, so they share its score; the seed's target is
 * that score plus TARGET_GAIN.  A run's time to target is the wall time from
 * its start to the first evaluation at or above the target; a run that never
 * gets there counts its whole wall time and is reported as missed; a seed
 * where both modes missed is left out of the speedup (agentic_seeds_compared).
 *
 * Reported: agentic_time_to_target_speedup (sync time / async time, median of
 * the seeds, with _min/_max), each mode's median time to target, final
 * success, wall time and learner wait per step (the time it sat waiting for a
 * batch: the share of sync's step that async can win back on shared cores),
 * and the runs that missed the target. */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "util/fs.h"
#include "util/time.h"

#define SEEDS 3
#define SFT_STEPS "300"
#define LEARNER_STEPS "6"
#define EVAL_EVERY "2"
#define EVAL_PROMPTS "32"
/* One evaluation's granularity is 1/32; ten points asks RL for three or four more solved prompts. */
#define TARGET_GAIN 0.10

#define MAX_EVALS 16

typedef struct {
  double wall, wait_per_step, at[MAX_EVALS], v[MAX_EVALS];
  int nevals;
} run_t;

/* The run's tables are a documented interface (docs/buffer.md): read as an analysis tool would. */
static int read_run(const char *db, int64_t t0, run_t *r) {
  sqlite3 *b;
  sqlite3_stmt *s = NULL;
  int rc = -1;
  if (sqlite3_open_v2(db, &b, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) goto out;
  if (sqlite3_prepare_v2(b, "SELECT time_ms, value FROM metrics WHERE name = 'eval/accuracy' ORDER BY step", -1, &s,
                         NULL) != SQLITE_OK)
    goto out;
  for (r->nevals = 0; r->nevals < MAX_EVALS && sqlite3_step(s) == SQLITE_ROW; r->nevals++) {
    r->at[r->nevals] = (double)(sqlite3_column_int64(s, 0) - t0) / 1000.0;
    r->v[r->nevals] = sqlite3_column_double(s, 1);
  }
  sqlite3_finalize(s);
  if (sqlite3_prepare_v2(b, "SELECT avg(value) FROM metrics WHERE name = 'learner/wait_s'", -1, &s, NULL) != SQLITE_OK)
    goto out;
  if (sqlite3_step(s) == SQLITE_ROW) r->wait_per_step = sqlite3_column_double(s, 0);
  rc = r->nevals > 0 ? 0 : -1;
out:
  sqlite3_finalize(s);
  sqlite3_close(b);
  return rc;
}

/* Seconds to the first evaluation at or above target, or the whole wall time (*reached 0). */
static double time_to(const run_t *r, double target, int *reached) {
  for (int i = 0; i < r->nevals; i++)
    if (r->v[i] >= target - 1e-9) return *reached = 1, r->at[i];
  return *reached = 0, r->wall;
}

static int run_mode(const char *bin, const char *dir, const char *warm, const char *mode, int seed, run_t *r) {
  char rd[4200], seedset[64], modeset[64], pathset[4300], db[4300];
  snprintf(rd, sizeof rd, "%s/%s-%d", dir, mode, seed);
  snprintf(seedset, sizeof seedset, "run.seed=%d", seed);
  snprintf(modeset, sizeof modeset, "scheduler.mode=%s", mode);
  snprintf(pathset, sizeof pathset, "model.path=%s", warm);
  char *argv[] = {(char *)bin, "train", "configs/agentic.json", "--run-dir", rd, "--log-level", "warn",
                  "--set", seedset, "--set", modeset, "--set", pathset, "--set", "sft.enabled=false",
                  "--set", "learner.steps=" LEARNER_STEPS, "--set", "eval.every=" EVAL_EVERY,
                  "--set", "eval.prompts=" EVAL_PROMPTS, "--set", "checkpoint.every=0",
                  "--set", "monitor.progress=off", "--set", "monitor.plot=false", NULL};
  int64_t t0 = lt_time_wall_ms();
  if ((r->wall = bench_run(argv, "/dev/null")) < 0) return -1;
  snprintf(db, sizeof db, "%s/buffer.db", rd);
  return read_run(db, t0, r);
}

int main(void) {
  const char *bin = getenv("LT_BIN") ? getenv("LT_BIN") : "bin/longtail";
  char dir[] = "/tmp/longtail-bench-agentic-XXXXXX", warm[4200];
  if (!mkdtemp(dir)) return 1;
  snprintf(warm, sizeof warm, "%s/warm", dir);
  char *sft[] = {(char *)bin, "sft", "configs/agentic.json", "--out", warm, "--set", "sft.steps=" SFT_STEPS, NULL};
  double sft_s = bench_run(sft, "/dev/null");
  if (sft_s < 0) {
    fprintf(stderr, "bench agentic: the warm start failed (is %s built?); kept in %s\n", bin, dir);
    return 1;
  }
  double sp[SEEDS], st[SEEDS], at[SEEDS], sf[SEEDS], af[SEEDS], sw[SEEDS], aw[SEEDS], swait[SEEDS], await_[SEEDS], lo, hi;
  int missed = 0, nsp = 0;
  for (int i = 0; i < SEEDS; i++) {
    run_t s, a;
    if (run_mode(bin, dir, warm, "sync", 1 + i, &s) < 0 || run_mode(bin, dir, warm, "async", 1 + i, &a) < 0) {
      fprintf(stderr, "bench agentic: a run failed or recorded no evaluation; runs kept in %s\n", dir);
      return 1;
    }
    /* Step 0 evaluates the shared warm start greedily in both modes: one score, one target. */
    if (s.v[0] != a.v[0])
      fprintf(stderr, "seed %d: the two modes scored the warm start differently (%.3f, %.3f)\n", 1 + i, s.v[0], a.v[0]);
    double target = s.v[0] + TARGET_GAIN;
    int sr, ar;
    st[i] = time_to(&s, target, &sr), at[i] = time_to(&a, target, &ar);
    /* A seed where neither mode reached the target says nothing about time to it. */
    if (sr || ar) sp[nsp++] = st[i] / at[i];
    missed += !sr + !ar;
    sf[i] = s.v[s.nevals - 1], af[i] = a.v[a.nevals - 1], sw[i] = s.wall, aw[i] = a.wall;
    swait[i] = s.wait_per_step, await_[i] = a.wait_per_step;
    fprintf(stderr,
            "seed %d: warm start %.0f%%, target %.0f%%: sync %.0f s%s (final %.0f%%, %.0f s, learner wait %.1f s/step), "
            "async %.0f s%s (final %.0f%%, %.0f s, learner wait %.1f s/step)\n",
            1 + i, 100 * s.v[0], 100 * target, st[i], sr ? "" : " (missed)", 100 * sf[i], sw[i], swait[i], at[i],
            ar ? "" : " (missed)", 100 * af[i], aw[i], await_[i]);
  }
  lt_fs_remove_tree(dir);
  double speed = 0;
  lo = hi = 0;
  if (nsp) speed = bench_median(sp, nsp, &lo, &hi);
  fprintf(stderr, "time to the target: async %.2fx sooner (range %.2f-%.2f, %d of %d seeds)\n", speed, lo, hi, nsp, SEEDS);
  printf("{\"agentic_time_to_target_speedup\": %.4g, \"agentic_time_to_target_speedup_min\": %.4g, "
         "\"agentic_time_to_target_speedup_max\": %.4g, \"agentic_target_gain\": %.4g, "
         "\"agentic_sync_time_to_target_s\": %.4g, \"agentic_async_time_to_target_s\": %.4g, "
         "\"agentic_sync_final_success\": %.4g, \"agentic_async_final_success\": %.4g, "
         "\"agentic_sync_wall_s\": %.4g, \"agentic_async_wall_s\": %.4g, "
         "\"agentic_sync_learner_wait_s_per_step\": %.4g, \"agentic_async_learner_wait_s_per_step\": %.4g, "
         "\"agentic_warm_start_s\": %.4g, \"agentic_runs_missing_target\": %d, \"agentic_seeds_compared\": %d}\n",
         speed, lo, hi, TARGET_GAIN, bench_median(st, SEEDS, NULL, NULL), bench_median(at, SEEDS, NULL, NULL),
         bench_median(sf, SEEDS, NULL, NULL), bench_median(af, SEEDS, NULL, NULL), bench_median(sw, SEEDS, NULL, NULL),
         bench_median(aw, SEEDS, NULL, NULL), bench_median(swait, SEEDS, NULL, NULL),
         bench_median(await_, SEEDS, NULL, NULL), sft_s, missed, nsp);
  return 0;
}
