/* Benchmark: the analysis commands on a synthetic buffer of 1M trajectories
 * (64 tokens each, no routing, groups of 8, half consumed over 1000 steps),
 * through the real binary: `stats --json` wall time (goal ≤ 2 s) and
 * `export --format jsonl` / `--format tokens` trajectories per second (goal
 * ≥ 50k/s), next to a raw `sqlite3` scan of the same rows as the baseline.
 * REPS repetitions of each command, interleaved; medians and spreads.  Set
 * LT_BENCH_TRAJ to change the size.  Prints one JSON object last. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/bench.h"
#include "bench/synth.h"
#include "buffer/buffer.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/time.h"

#define REPS 3

int main(void) {
  long n = getenv("LT_BENCH_TRAJ") ? atol(getenv("LT_BENCH_TRAJ")) : 1000000;
  char *bin = getenv("LT_BIN") ? getenv("LT_BIN") : "bin/longtail";
  char dir[] = "/tmp/longtail-bench-analysis-XXXXXX";
  if (!mkdtemp(dir)) return 1;
  char db[4200];
  snprintf(db, sizeof db, "%s/buffer.db", dir);
  double t0 = lt_time_mono_s();
  if (bench_synthetic_buffer(db, n) < 0) {
    fprintf(stderr, "bench analysis: building the buffer: %s\n", lt_error_msg());
    return 1;
  }
  fprintf(stderr, "built %ld trajectories in %.1f s\n", n, lt_time_mono_s() - t0);
  char *stats[] = {bin, "stats", db, "--json", NULL};
  char *ej[] = {bin, "export", db, "--format", "jsonl", NULL};
  char *et[] = {bin, "export", db, "--format", "tokens", NULL};
  char sql[256];
  snprintf(sql, sizeof sql, "SELECT t.*, p.* FROM trajectories t JOIN payloads p USING (task_id)");
  char *raw[] = {"sqlite3", "-json", db, sql, NULL};
  double ts[REPS], ej_r[REPS], et_r[REPS], raw_r[REPS], vs[REPS];
  for (int r = 0; r < REPS; r++) {
    double s = bench_run(stats, "/dev/null"), tj = bench_run(ej, "/dev/null"), tt = bench_run(et, "/dev/null");
    double tr = bench_run(raw, "/dev/null");
    if (s < 0 || tj < 0 || tt < 0) {
      fprintf(stderr, "bench analysis: a command failed (is %s built?)\n", bin);
      lt_fs_remove_tree(dir);
      return 1;
    }
    ts[r] = s, ej_r[r] = n / tj, et_r[r] = n / tt, raw_r[r] = tr > 0 ? n / tr : 0;
    vs[r] = raw_r[r] > 0 ? ej_r[r] / raw_r[r] : 0;
    fprintf(stderr,
            "rep %d: stats %.2f s; export jsonl %.0f traj/s, tokens %.0f traj/s; raw sqlite3 -json scan %.0f rows/s\n",
            r, ts[r], ej_r[r], et_r[r], raw_r[r]);
  }
  lt_fs_remove_tree(dir);
  double sl, sh, jl, jh, tl, th;
  double sm = bench_median(ts, REPS, &sl, &sh), jm = bench_median(ej_r, REPS, &jl, &jh);
  double tm = bench_median(et_r, REPS, &tl, &th), rm = bench_median(raw_r, REPS, NULL, NULL);
  double vm = bench_median(vs, REPS, NULL, NULL);
  printf(
      "{\"analysis_trajectories\": %ld, \"stats_1m_seconds\": %.4g, \"stats_1m_seconds_min\": %.4g, "
      "\"stats_1m_seconds_max\": %.4g, \"export_trajectories_per_s\": %.4g, \"export_trajectories_per_s_min\": %.4g, "
      "\"export_trajectories_per_s_max\": %.4g, \"export_tokens_traj_per_s\": %.4g, "
      "\"export_tokens_traj_per_s_min\": %.4g, \"export_tokens_traj_per_s_max\": %.4g, "
      "\"raw_sqlite_json_rows_per_s\": %.4g, \"export_jsonl_vs_raw_sqlite\": %.4g}\n",
      n, sm, sl, sh, jm, jl, jh, tm, tl, th, rm, vm);
  return 0;
}
