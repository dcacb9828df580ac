/* Benchmark: sandboxed executions per second of `sh -c 'echo hi'`, through
 * longtail's sandbox cold (made for the run) and pooled (warm pool of 2, made
 * by its thread while the previous run executes), next to bubblewrap running
 * the same command with the same namespaces and read-only system binds.
 * Sequential runs, LT_BENCH_SANDBOX runs per repetition (default 200), 3
 * repetitions: median and spread.  Prints one JSON object last. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "sandbox/sandbox.h"
#include "util/error.h"
#include "util/time.h"

#define REPS 3

static const char *const cmd[] = {"sh", "-c", "echo hi", NULL};

static int check(const lt_sandbox_result_t *r) { return r->exit_code == 0 && strcmp(r->out, "hi\n") == 0; }

static double rate_longtail(int n, lt_sandbox_pool_t *pool, const lt_sandbox_limits_t *l) {
  lt_sandbox_job_t job = {.argv = cmd};
  double t0 = lt_time_mono_s();
  for (int i = 0; i < n; i++) {
    lt_sandbox_result_t r;
    int rc = pool ? lt_sandbox_pool_run(pool, &job, &r) : lt_sandbox_run(l, &job, &r);
    if (rc < 0 || !check(&r)) {
      fprintf(stderr, "sandbox run failed: %s\n", rc < 0 ? lt_error_msg() : r.err);
      return -1;
    }
    lt_sandbox_result_free(&r);
  }
  return n / (lt_time_mono_s() - t0);
}

static double rate_bwrap(int n) {
  char *argv[] = {"bwrap",
                  "--unshare-all",
                  "--die-with-parent",
                  "--new-session",
                  "--ro-bind",
                  "/usr",
                  "/usr",
                  "--ro-bind",
                  "/etc",
                  "/etc",
                  "--ro-bind-try",
                  "/lib",
                  "/lib",
                  "--ro-bind-try",
                  "/lib64",
                  "/lib64",
                  "--ro-bind-try",
                  "/bin",
                  "/bin",
                  "--ro-bind-try",
                  "/sbin",
                  "/sbin",
                  "--proc",
                  "/proc",
                  "--dev",
                  "/dev",
                  "--tmpfs",
                  "/tmp",
                  "--tmpfs",
                  "/work",
                  "--chdir",
                  "/work",
                  "--uid",
                  "1000",
                  "--gid",
                  "1000",
                  "sh",
                  "-c",
                  "echo hi",
                  NULL};
  double t0 = lt_time_mono_s();
  for (int i = 0; i < n; i++)
    if (bench_run(argv, "/dev/null") < 0) {
      fprintf(stderr, "bwrap failed (is the bubblewrap package installed, are user namespaces allowed?)\n");
      return -1;
    }
  return n / (lt_time_mono_s() - t0);
}

static double report(const char *name, double *v) {
  double lo, hi, m = bench_median(v, REPS, &lo, &hi);
  fprintf(stderr, "%-22s median %8.1f /s  (min %.1f, max %.1f)\n", name, m, lo, hi);
  return m;
}

int main(void) {
  int n = getenv("LT_BENCH_SANDBOX") ? atoi(getenv("LT_BENCH_SANDBOX")) : 200;
  lt_sandbox_caps_t caps;
  lt_sandbox_probe(&caps);
  char desc[160];
  lt_sandbox_caps_describe(&caps, desc, sizeof desc);
  fprintf(stderr, "sandbox: %s; %d sequential runs of `sh -c 'echo hi'` per repetition\n", desc, n);
  if (!caps.userns) {
    fprintf(stderr, "no user namespaces here: nothing to measure\n");
    return 1;
  }
  lt_sandbox_limits_t l;
  lt_sandbox_limits_default(&l);
  lt_sandbox_pool_t *pool;
  if (lt_sandbox_pool_create(&l, 2, &pool) < 0) return 1;
  double cold[REPS], pooled[REPS], bw[REPS];
  for (int r = 0; r < REPS; r++) { /* interleaved, so that drift hits all three alike */
    cold[r] = rate_longtail(n, NULL, &l);
    pooled[r] = rate_longtail(n, pool, &l);
    bw[r] = rate_bwrap(n);
    if (cold[r] < 0 || pooled[r] < 0) return 1;
  }
  lt_sandbox_pool_free(pool);
  double c = report("longtail cold", cold), p = report("longtail pooled", pooled), b = report("bubblewrap", bw);
  printf("{\"sandbox_execs_per_s\": %.1f, \"sandbox_cold_execs_per_s\": %.1f, \"bwrap_execs_per_s\": %.1f", p, c, b);
  if (b > 0) printf(", \"sandbox_vs_bwrap\": %.3f, \"sandbox_cold_vs_bwrap\": %.3f", p / b, c / b);
  printf("}\n");
  return 0;
}
