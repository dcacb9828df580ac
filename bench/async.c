/* Benchmark: the headline experiment — long-tailed rollouts trained
 * synchronously (scheduler.mode sync: a batch barrier) and asynchronously,
 * with the same workers, tasks and learner.
 *
 * Workload, scaled to 2 cores: two scripted workers × 16 slots generate
 * turns whose length is exponential with mean 24 tokens, except 5% that are
 * 76× longer, so that the tail holds ~80% of generation time (seed 001
 * App. D.2.4); a token takes 1 ms of wall time (sleep, not CPU, so the
 * learner keeps both cores: learner.threads 2).  The learner is the real
 * one: tiny-moe (1.8M parameters, MoE), MIS-PO, 16 steps of 32 trajectories.
 * Async keeps three batches of tasks open or waiting (queue_depth 96): with
 * two, the learner waited ~9% of the time for groups held by a tail member;
 * the price is staleness (reported).  Each mode runs REPS times; medians and
 * spreads are reported.
 *
 * Reported: trained trajectories/s (speedup = async / sync), learner idle
 * fraction (time waiting for a batch / (waiting + computing)), worker
 * utilisation (generation time / (slots × wall)), and async staleness. */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/bench.h"
#include "util/fs.h"
#include "util/time.h"

#define REPS 3
#define SLOTS_TOTAL 32

typedef struct {
  double wall, traj_per_s, idle, util, stale_mean, stale_hist[4];
} run_t;

/* The run's tables are a documented interface (docs/buffer.md): the benchmark reads them as an analysis tool
 * would, with SQLite itself. */
static double q(sqlite3 *b, const char *sql) {
  sqlite3_stmt *s;
  double v = 0;
  if (sqlite3_prepare_v2(b, sql, -1, &s, NULL) != SQLITE_OK) return 0;
  if (sqlite3_step(s) == SQLITE_ROW) v = sqlite3_column_double(s, 0);
  sqlite3_finalize(s);
  return v;
}

static int run_mode(const char *bin, const char *dir, const char *mode, int rep, run_t *r) {
  char cfg[4200], rd[4200], js[2048];
  snprintf(cfg, sizeof cfg, "%s/cfg.json", dir);
  snprintf(rd, sizeof rd, "%s/%s-%d", dir, mode, rep);
  snprintf(
      js, sizeof js,
      "{\"run\": {\"seed\": %d}, \"model\": {\"init\": \"configs/models/tiny-moe.json\"},"
      " \"envs\": {\"arith\": {\"type\": \"arith\", \"params\": {\"digits_min\": 1, \"digits_max\": 2}}},"
      " \"learner\": {\"steps\": 16, \"batch\": {\"trajectories\": 32}, \"lr\": 1e-5, \"warmup_steps\": 0, \"threads\": 2,"
      "   \"actor_minibatches\": 1, \"critic_minibatches\": 1},"
      " \"scheduler\": {\"mode\": \"%s\", \"group_size\": 4, \"max_staleness\": 4, \"queue_depth\": 96, \"dynamic_filter\": false},"
      " \"rollout\": {\"max_new_tokens\": 4096, \"max_turns\": 1, \"max_context\": 8192},"
      " \"workers\": {\"spawn_local\": 2, \"slots\": 16, \"backend\": \"scripted\","
      "   \"scripted\": {\"mean_tokens\": 24, \"tail_fraction\": 0.05, \"tail_factor\": 76, \"token_us\": 1000}},"
      " \"transport\": {\"endpoint\": \"tcp://127.0.0.1:*\"}, \"eval\": {\"every\": 0}, \"checkpoint\": {\"every\": 0},"
      " \"monitor\": {\"progress\": \"off\", \"plot\": false}}",
      11 + rep, mode);
  if (lt_fs_write_atomic(cfg, js, strlen(js)) < 0) return -1;
  char *argv[] = {(char *)bin, "train", cfg, "--run-dir", rd, "--log-level", "warn", NULL};
  if ((r->wall = bench_run(argv, "/dev/null")) < 0) return -1;
  char db[4300];
  snprintf(db, sizeof db, "%s/buffer.db", rd);
  sqlite3 *b;
  if (sqlite3_open_v2(db, &b, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
    sqlite3_close(b);
    return -1;
  }
  double trained = q(b, "SELECT count(*) FROM trajectories WHERE status = 'consumed'");
  double wait = q(b, "SELECT sum(value) FROM metrics WHERE name = 'learner/wait_s'");
  double comp = q(b, "SELECT sum(value) FROM metrics WHERE name = 'learner/step_s'");
  double gen_ms = q(b, "SELECT sum(gen_ms) FROM trajectories");
  r->traj_per_s = trained / r->wall;
  r->idle = wait + comp > 0 ? wait / (wait + comp) : 0;
  r->util = gen_ms / 1000.0 / (SLOTS_TOTAL * r->wall);
  r->stale_mean = q(b, "SELECT avg(value) FROM metrics WHERE name = 'staleness/mean'");
  double tot = 0;
  for (int k = 0; k < 4; k++) {
    char sql[160];
    snprintf(sql, sizeof sql, "SELECT sum(value) FROM metrics WHERE name = 'staleness/hist_%d'", k);
    r->stale_hist[k] = q(b, sql);
    tot += r->stale_hist[k];
  }
  for (int k = 0; k < 4; k++) r->stale_hist[k] = tot > 0 ? r->stale_hist[k] / tot : 0;
  sqlite3_close(b);
  return 0;
}

int main(void) {
  const char *bin = getenv("LT_BIN") ? getenv("LT_BIN") : "bin/longtail";
  char dir[] = "/tmp/longtail-bench-async-XXXXXX";
  if (!mkdtemp(dir)) return 1;
  run_t s[REPS], a[REPS];
  for (int i = 0; i < REPS; i++) {
    if (run_mode(bin, dir, "sync", i, &s[i]) < 0 || run_mode(bin, dir, "async", i, &a[i]) < 0) {
      fprintf(stderr, "bench async: a run failed (is %s built?); runs kept in %s\n", bin, dir);
      return 1;
    }
    fprintf(stderr,
            "rep %d: sync %.1f s (%.2f traj/s, learner idle %.0f%%), async %.1f s (%.2f traj/s, idle %.0f%%, "
            "staleness %.2f)\n",
            i, s[i].wall, s[i].traj_per_s, 100 * s[i].idle, a[i].wall, a[i].traj_per_s, 100 * a[i].idle,
            a[i].stale_mean);
  }
  lt_fs_remove_tree(dir);
  double sp[REPS], st[REPS], at[REPS], ai[REPS], si[REPS], au[REPS], su[REPS], lo, hi;
  for (int i = 0; i < REPS; i++) {
    sp[i] = a[i].traj_per_s / s[i].traj_per_s;
    st[i] = s[i].traj_per_s, at[i] = a[i].traj_per_s;
    ai[i] = a[i].idle, si[i] = s[i].idle, au[i] = a[i].util, su[i] = s[i].util;
  }
  double speed = bench_median(sp, REPS, &lo, &hi);
  fprintf(stderr, "async/sync speedup %.2f× (range %.2f–%.2f)\n", speed, lo, hi);
  double ms = bench_median(st, REPS, NULL, NULL), ma = bench_median(at, REPS, NULL, NULL);
  double mai = bench_median(ai, REPS, NULL, NULL), msi = bench_median(si, REPS, NULL, NULL);
  double mau = bench_median(au, REPS, NULL, NULL), msu = bench_median(su, REPS, NULL, NULL);
  /* Staleness of what was trained, both modes (sync trains at staleness 0 by construction: a check). */
  double sm[REPS], ssm[REPS], hist[4] = {0}, shist[4] = {0};
  for (int i = 0; i < REPS; i++) {
    sm[i] = a[i].stale_mean, ssm[i] = s[i].stale_mean;
    for (int k = 0; k < 4; k++) hist[k] += a[i].stale_hist[k] / REPS, shist[k] += s[i].stale_hist[k] / REPS;
  }
  double msm = bench_median(sm, REPS, NULL, NULL), mssm = bench_median(ssm, REPS, NULL, NULL);
  printf(
      "{\"async_vs_sync_speedup\": %.4g, \"async_vs_sync_speedup_min\": %.4g, \"async_vs_sync_speedup_max\": %.4g, "
      "\"async_learner_idle_fraction\": %.4g, \"sync_learner_idle_fraction\": %.4g, "
      "\"async_trajectories_per_s\": %.4g, \"sync_trajectories_per_s\": %.4g, "
      "\"async_worker_utilisation\": %.4g, \"sync_worker_utilisation\": %.4g, \"async_staleness_mean\": %.4g, "
      "\"async_staleness_hist\": [%.3f, %.3f, %.3f, %.3f], \"sync_staleness_mean\": %.4g, "
      "\"sync_staleness_hist\": [%.3f, %.3f, %.3f, %.3f]}\n",
      speed, lo, hi, mai, msi, ma, ms, mau, msu, msm, hist[0], hist[1], hist[2], hist[3], mssm, shist[0], shist[1],
      shist[2], shist[3]);
  return 0;
}
