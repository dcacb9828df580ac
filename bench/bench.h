/* What the benchmark programs share: running a command and timing it. */
#ifndef LT_BENCH_BENCH_H
#define LT_BENCH_BENCH_H

#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util/time.h"

extern char **environ;

/* Runs argv (found on PATH) with stdout to `out`; its wall time in seconds,
 * or -1 when it could not start or exited non-zero. */
static inline double bench_run(char *const argv[], const char *out) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  double t0 = lt_time_mono_s();
  pid_t pid;
  int bad = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  if (bad) return -1;
  int st;
  waitpid(pid, &st, 0);
  double dt = lt_time_mono_s() - t0;
  return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? dt : -1;
}

/* CPU seconds the whole machine has been busy (user, nice, system, irq,
 * softirq from /proc/stat: idle, iowait and steal left out), or -1.  Whole
 * machine, because a round trip's work is spread over processes, their
 * threads and the kernel's; benchmarks run on an otherwise idle machine. */
static inline double bench_cpu_busy_s(void) {
  FILE *f = fopen("/proc/stat", "r");
  if (!f) return -1;
  unsigned long long user, nice, sys, idle, iowait, irq, softirq;
  int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu", &user, &nice, &sys, &idle, &iowait, &irq, &softirq);
  fclose(f);
  if (n != 7) return -1;
  return (double)(user + nice + sys + irq + softirq) / (double)sysconf(_SC_CLK_TCK);
}

static inline int bench_cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Median of n repetitions, with their spread in lo/hi (v is sorted). */
static inline double bench_median(double *v, int n, double *lo, double *hi) {
  qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
  if (lo) *lo = v[0];
  if (hi) *hi = v[n - 1];
  return v[n / 2];
}

#endif
