/* Benchmark: time to accuracy on the agentic showcase (configs/agentic.json),
 * synchronous (scheduler.mode sync: a batch barrier) against asynchronous,
 * with real multi-turn rollouts of the builtin engine and real learning, in
 * two settings:
 *   shared  the learner and the rollouts share the machine's cores (as before
 *           issue 44: agentic_time_to_target_speedup);
 *   split   the learner on one CPU (learner.cpus) and the local workers with
 *           their rollouts on another (workers.cpus), as split hardware would
 *           have them (agentic_split_time_to_target_speedup); the daemon's loop
 *           is not pinned.  Same seeds and pinning in both modes.
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
 * where both modes missed is left out of the speedup (_seeds_compared).
 *
 * Reported per setting: the speedup (sync time / async time, median of the
 * seeds, with _min/_max), each mode's median time to target, final success,
 * wall time and learner wait per step; for the split runs also the per-step
 * timeline docs/benchmarks.md models: the learner's compute (learner/step_s
 * less its publish), the publish (learner/publish_s), its wait
 * (learner/wait_s), and the busy seconds of the learner's and the workers'
 * CPUs per step (/proc/stat).  agentic_runs_missing_target counts the runs of
 * both settings.  LT_BENCH_AGENTIC=split (or shared) runs one setting only. */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "util/cpus.h"
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
  double wall, wait_per_step, step_s, publish_s, at[MAX_EVALS], v[MAX_EVALS];
  double busy_learner, busy_workers; /* CPU seconds per step of the split run's two CPUs */
  int nevals, steps;
} run_t;

/* The mean of a metric over the run's steps (docs/metrics.md), or 0. */
static double metric_mean(sqlite3 *b, const char *name) {
  sqlite3_stmt *s = NULL;
  double v = 0;
  if (sqlite3_prepare_v2(b, "SELECT avg(value) FROM metrics WHERE name = ?", -1, &s, NULL) == SQLITE_OK &&
      sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC) == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW)
    v = sqlite3_column_double(s, 0);
  sqlite3_finalize(s);
  return v;
}

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
  s = NULL;
  if (sqlite3_prepare_v2(b, "SELECT count(*) FROM metrics WHERE name = 'learner/step_s'", -1, &s, NULL) == SQLITE_OK &&
      sqlite3_step(s) == SQLITE_ROW)
    r->steps = sqlite3_column_int(s, 0);
  r->wait_per_step = metric_mean(b, "learner/wait_s");
  r->step_s = metric_mean(b, "learner/step_s");
  r->publish_s = metric_mean(b, "learner/publish_s");
  rc = r->nevals > 0 && r->steps > 0 ? 0 : -1;
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

/* cpus[0], cpus[1]: the learner's and the workers' CPU for a split run, or -1 for a shared one. */
static int run_mode(const char *bin, const char *dir, const char *warm, const char *mode, int seed, const int cpus[2],
                    run_t *r) {
  char rd[4200], seedset[64], modeset[64], pathset[4300], db[4300], lset[64], wset[64];
  int split = cpus[0] >= 0;
  *r = (run_t){0}; /* a shared run measures no CPU's busy time: it prints 0, not the last split run's */
  snprintf(rd, sizeof rd, "%s/%s%s-%d", dir, split ? "split-" : "", mode, seed);
  snprintf(seedset, sizeof seedset, "run.seed=%d", seed);
  snprintf(modeset, sizeof modeset, "scheduler.mode=%s", mode);
  snprintf(pathset, sizeof pathset, "model.path=%s", warm);
  snprintf(lset, sizeof lset, "learner.cpus=%d", cpus[0]);
  snprintf(wset, sizeof wset, "workers.cpus=%d", cpus[1]);
  char *argv[] = {(char *)bin,
                  "train",
                  "configs/agentic.json",
                  "--run-dir",
                  rd,
                  "--log-level",
                  "warn",
                  "--set",
                  seedset,
                  "--set",
                  modeset,
                  "--set",
                  pathset,
                  "--set",
                  "sft.enabled=false",
                  "--set",
                  "learner.steps=" LEARNER_STEPS,
                  "--set",
                  "eval.every=" EVAL_EVERY,
                  "--set",
                  "eval.prompts=" EVAL_PROMPTS,
                  "--set",
                  "checkpoint.every=0",
                  "--set",
                  "monitor.progress=off",
                  "--set",
                  "monitor.plot=false",
                  split ? "--set" : NULL,
                  lset,
                  "--set",
                  wset,
                  NULL}; /* a shared run's list ends before the CPUs */
  int64_t t0 = lt_time_wall_ms();
  double b0 = split ? bench_cpu_busy(cpus[0]) : 0, b1 = split ? bench_cpu_busy(cpus[1]) : 0;
  if ((r->wall = bench_run(argv, "/dev/null")) < 0) return -1;
  if (split) r->busy_learner = bench_cpu_busy(cpus[0]) - b0, r->busy_workers = bench_cpu_busy(cpus[1]) - b1;
  snprintf(db, sizeof db, "%s/buffer.db", rd);
  int rc = read_run(db, t0, r);
  if (rc == 0 && split) r->busy_learner /= r->steps, r->busy_workers /= r->steps;
  return rc;
}

/* One setting's runs over the seeds: per seed, sync then async. */
typedef struct {
  const char *name; /* "" (shared) or "split_" in the keys */
  int cpus[2];
  double sp[SEEDS], t[2][SEEDS], fin[2][SEEDS], wall[2][SEEDS], wait[2][SEEDS], step[2][SEEDS], pub[2][SEEDS];
  double busy_l[2][SEEDS], busy_w[2][SEEDS];
  int nsp, missed;
} setting_t;

static int run_seed(const char *bin, const char *dir, const char *warm, int i, setting_t *g) {
  static const char *const modes[2] = {"sync", "async"};
  run_t r[2];
  for (int m = 0; m < 2; m++)
    if (run_mode(bin, dir, warm, modes[m], 1 + i, g->cpus, &r[m]) < 0) {
      fprintf(stderr, "bench agentic: a %s %s run failed or recorded no evaluation; runs kept in %s\n",
              g->cpus[0] >= 0 ? "split" : "shared", modes[m], dir);
      return -1;
    }
  /* Step 0 evaluates the shared warm start greedily in both modes: one score, one target. */
  if (r[0].v[0] != r[1].v[0])
    fprintf(stderr, "seed %d: the two modes scored the warm start differently (%.3f, %.3f)\n", 1 + i, r[0].v[0],
            r[1].v[0]);
  double target = r[0].v[0] + TARGET_GAIN;
  int reached[2];
  for (int m = 0; m < 2; m++) {
    g->t[m][i] = time_to(&r[m], target, &reached[m]);
    g->fin[m][i] = r[m].v[r[m].nevals - 1], g->wall[m][i] = r[m].wall, g->wait[m][i] = r[m].wait_per_step;
    g->step[m][i] = r[m].step_s, g->pub[m][i] = r[m].publish_s;
    g->busy_l[m][i] = r[m].busy_learner, g->busy_w[m][i] = r[m].busy_workers;
    g->missed += !reached[m];
  }
  /* A seed where neither mode reached the target says nothing about time to it. */
  if (reached[0] || reached[1]) g->sp[g->nsp++] = g->t[0][i] / g->t[1][i];
  fprintf(stderr, "%s seed %d: warm start %.0f%%, target %.0f%%\n", g->cpus[0] >= 0 ? "split" : "shared", 1 + i,
          100 * r[0].v[0], 100 * target);
  for (int m = 0; m < 2; m++)
    fprintf(
        stderr,
        "  %-5s %4.0f s%s (final %.0f%%, %.0f s, %d steps); per step: learner %.1f s (publish %.2f s), wait %.1f s, "
        "busy CPU: learner's %.1f s, workers' %.1f s\n",
        modes[m], g->t[m][i], reached[m] ? "" : " (missed)", 100 * g->fin[m][i], g->wall[m][i], r[m].steps, r[m].step_s,
        r[m].publish_s, r[m].wait_per_step, r[m].busy_learner, r[m].busy_workers);
  return 0;
}

static double med(double *v) { return bench_median(v, SEEDS, NULL, NULL); }

static void print_setting(setting_t *g, int *first) {
  double lo = 0, hi = 0, speed = g->nsp ? bench_median(g->sp, g->nsp, &lo, &hi) : 0;
  const char *n = g->name;
  fprintf(stderr, "%s: time to the target, async %.2fx sooner (range %.2f-%.2f, %d of %d seeds)\n",
          n[0] ? "split cores" : "shared cores", speed, lo, hi, g->nsp, SEEDS);
  printf(
      "%s\"agentic_%stime_to_target_speedup\": %.4g, \"agentic_%stime_to_target_speedup_min\": %.4g, "
      "\"agentic_%stime_to_target_speedup_max\": %.4g, \"agentic_%sseeds_compared\": %d",
      *first ? "" : ", ", n, speed, n, lo, n, hi, n, g->nsp);
  if (n[0]) printf(", \"agentic_%sruns_missing_target\": %d", n, g->missed);
  static const char *const modes[2] = {"sync", "async"};
  for (int m = 0; m < 2; m++) {
    printf(
        ", \"agentic_%s%s_time_to_target_s\": %.4g, \"agentic_%s%s_final_success\": %.4g, "
        "\"agentic_%s%s_wall_s\": %.4g, \"agentic_%s%s_learner_wait_s_per_step\": %.4g",
        n, modes[m], med(g->t[m]), n, modes[m], med(g->fin[m]), n, modes[m], med(g->wall[m]), n, modes[m],
        med(g->wait[m]));
    if (n[0])
      printf(
          ", \"agentic_%s%s_learner_step_s\": %.4g, \"agentic_%s%s_publish_s\": %.4g, "
          "\"agentic_%s%s_learner_cpu_busy_s_per_step\": %.4g, \"agentic_%s%s_workers_cpu_busy_s_per_step\": %.4g",
          n, modes[m], med(g->step[m]), n, modes[m], med(g->pub[m]), n, modes[m], med(g->busy_l[m]), n, modes[m],
          med(g->busy_w[m]));
  }
  *first = 0;
}

int main(void) {
  const char *bin = getenv("LT_BIN") ? getenv("LT_BIN") : "bin/longtail";
  const char *only = getenv("LT_BENCH_AGENTIC") ? getenv("LT_BENCH_AGENTIC") : "";
  setting_t set[2] = {{.name = "", .cpus = {-1, -1}}, {.name = "split_", .cpus = {-1, -1}}};
  /* The split runs: the learner on the first CPU online, the workers on the second. */
  lt_cpus_t on;
  lt_cpus_online(&on);
  for (int c = 0, k = 0; c < CPU_SETSIZE && k < 2; c++)
    if (CPU_ISSET(c, &on.set)) set[1].cpus[k++] = c;
  int run[2] = {strcmp(only, "split") != 0, strcmp(only, "shared") != 0 && set[1].cpus[1] >= 0};
  if (!run[1] && strcmp(only, "shared")) fprintf(stderr, "bench agentic: one CPU online: no split runs\n");
  char dir[] = "/tmp/longtail-bench-agentic-XXXXXX", warm[4200];
  if (!mkdtemp(dir)) return 1;
  snprintf(warm, sizeof warm, "%s/warm", dir);
  char *sft[] = {(char *)bin, "sft", "configs/agentic.json", "--out", warm, "--set", "sft.steps=" SFT_STEPS, NULL};
  double sft_s = bench_run(sft, "/dev/null");
  if (sft_s < 0) {
    fprintf(stderr, "bench agentic: the warm start failed (is %s built?); kept in %s\n", bin, dir);
    return 1;
  }
  /* Seed by seed, both settings, so that a change in the machine's load falls on both alike. */
  for (int i = 0; i < SEEDS; i++)
    for (int k = 0; k < 2; k++)
      if (run[k] && run_seed(bin, dir, warm, i, &set[k]) < 0) return 1;
  lt_fs_remove_tree(dir);
  int first = 1, missed = 0;
  printf("{");
  for (int k = 0; k < 2; k++)
    if (run[k]) print_setting(&set[k], &first), missed += set[k].missed;
  printf(", \"agentic_target_gain\": %.4g, \"agentic_warm_start_s\": %.4g, \"agentic_runs_missing_target\": %d}\n",
         TARGET_GAIN, sft_s, missed);
  return 0;
}
