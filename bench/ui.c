/* Benchmark: the web console's answers (lt_ui_answer, in process: the JSON the browser receives, without the
 * loopback socket) on the analysis benchmark's synthetic buffer of 1M trajectories (bench/synth.h) with what its
 * learner stores (500k token_values rows, a group filtered per step): the table's first page (goal ≤ 200 ms), a
 * filtered page (status and reward; ≤ 200 ms) and one trained trajectory with its token values (≤ 100 ms), and,
 * with no goal, a filtered trajectory (which counts its step's token_values rows) and the worst cases the table
 * allows: a page sorted by reward (no index) and a page 90% deep.
 * REPS repetitions each on a fresh console (no statement or page cache from the previous one); medians and
 * spreads.  LT_BENCH_TRAJ changes the size.  Prints one JSON object last. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "bench/synth.h"
#include "ui/ui.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/time.h"

#define REPS 5

/* Milliseconds lt_ui_answer takes for path on a console just opened on dir; -1 when it does not answer 200 (or
 * 503, its time limit, where limited is set: the worst cases may reach it), or when a 200's body lacks expect
 * (NULL: anything), so that a change of the buffer cannot turn a measured path into a shorter one unnoticed. */
static double answer_ms(const char *dir, const char *path, int limited, const char *expect) {
  lt_ui_t *u;
  if (lt_ui_open(dir, &u) < 0) return -1;
  lt_ui_resp_t r;
  lt_http_target_t t;
  double t0 = lt_time_mono_s();
  if (lt_http_target_parse(path, &t) < 0) {
    lt_ui_close(u);
    return -1;
  }
  lt_ui_answer(u, "GET", &t, &r);
  double ms = (lt_time_mono_s() - t0) * 1000;
  if (r.status != 200) fprintf(stderr, "bench ui: %s: %d %.*s\n", path, r.status, (int)r.len, r.body);
  int ok = r.status == 200 || (limited && r.status == 503);
  if (r.status == 200 && expect && !memmem(r.body, r.len, expect, strlen(expect))) {
    fprintf(stderr, "bench ui: %s: the answer lacks %s\n", path, expect);
    ok = 0;
  }
  lt_ui_resp_free(&r);
  lt_ui_close(u);
  return ok ? ms : -1;
}

int main(void) {
  long n = getenv("LT_BENCH_TRAJ") ? atol(getenv("LT_BENCH_TRAJ")) : 1000000;
  char dir[] = "/tmp/longtail-bench-ui-XXXXXX";
  if (!mkdtemp(dir)) return 1;
  char db[4200];
  snprintf(db, sizeof db, "%s/buffer.db", dir);
  double t0 = lt_time_mono_s();
  if (bench_synthetic_buffer(db, n) < 0 || bench_synthetic_learner(db, n) < 0) {
    fprintf(stderr, "bench ui: building the buffer: %s\n", lt_error_msg());
    return 1;
  }
  fprintf(stderr, "built %ld trajectories in %.1f s\n", n, lt_time_mono_s() - t0);
  char traj[64];
  snprintf(traj, sizeof traj, "/api/trajectories/%ld", n / 2);
  char filtered[64]; /* filtered at the middle step (bench_synthetic_learner) */
  snprintf(filtered, sizeof filtered, "/api/trajectories/%ld", n / 2 + 8 * (n / 2000) + 1);
  char deep[96];
  snprintf(deep, sizeof deep, "/api/trajectories?offset=%ld", n / 10 * 9);
  enum { K = 6 };
  const char *paths[K] = {"/api/trajectories",
                          "/api/trajectories?status=ready&reward_min=1",
                          traj,
                          "/api/trajectories?sort=reward&order=desc",
                          deep,
                          filtered};
  /* the trained trajectory with its stored values; the filtered one told apart by its step's stored rows */
  const char *expect[K] = {NULL, NULL, "\"token_values\":{\"source\":\"stored\"", NULL, NULL, "by the dynamic filter"};
  double ms[K][REPS];
  for (int r = 0; r < REPS; r++) {
    for (int k = 0; k < K; k++)
      if ((ms[k][r] = answer_ms(dir, paths[k], k == 3 || k == 4, expect[k])) < 0) {
        lt_fs_remove_tree(dir);
        return 1;
      }
    fprintf(stderr,
            "rep %d: first page %.1f ms, filtered page %.1f ms, one trajectory %.1f ms, by reward %.1f ms, "
            "90%% deep %.1f ms, a filtered trajectory %.1f ms\n",
            r, ms[0][r], ms[1][r], ms[2][r], ms[3][r], ms[4][r], ms[5][r]);
  }
  lt_fs_remove_tree(dir);
  double lo[K], hi[K], med[K];
  for (int k = 0; k < K; k++) med[k] = bench_median(ms[k], REPS, &lo[k], &hi[k]);
  printf(
      "{\"ui_trajectories\": %ld, \"ui_page_ms\": %.4g, \"ui_page_ms_min\": %.4g, \"ui_page_ms_max\": %.4g, "
      "\"ui_filter_ms\": %.4g, \"ui_filter_ms_min\": %.4g, \"ui_filter_ms_max\": %.4g, \"ui_traj_ms\": %.4g, "
      "\"ui_traj_ms_min\": %.4g, \"ui_traj_ms_max\": %.4g, \"ui_traj_filtered_ms\": %.4g, "
      "\"ui_sort_reward_ms\": %.4g, \"ui_deep_page_ms\": %.4g}\n",
      n, med[0], lo[0], hi[0], med[1], lo[1], hi[1], med[2], lo[2], hi[2], med[5], med[3], med[4]);
  return 0;
}
