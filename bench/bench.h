/* What the benchmark programs share: running a command and timing it. */
#ifndef LT_BENCH_BENCH_H
#define LT_BENCH_BENCH_H

#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util/time.h"

extern char **environ;

/* Runs argv (found on PATH) with stdout to `out`; its wall time in seconds,
 * or -1 when it could not start or exited non-zero.  *self_cpu (unless NULL):
 * the CPU seconds the process itself used, all its threads, not its children
 * (read from /proc after it exits, before it is reaped). */
static inline double bench_run_cpu(char *const argv[], const char *out, double *self_cpu) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  double t0 = lt_time_mono_s();
  pid_t pid;
  int bad = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  if (bad) return -1;
  siginfo_t si;
  waitid(P_PID, (id_t)pid, &si, WEXITED | WNOWAIT);
  double dt = lt_time_mono_s() - t0;
  if (self_cpu) {
    char path[64];
    unsigned long long ut = 0, st_ = 0;
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    /* Fields 14 and 15 (utime, stime) follow "pid (comm) state" and ten more; comm has no ')' here. */
    if (!f || fscanf(f, "%*d (%*[^)]) %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st_) != 2)
      ut = st_ = 0;
    if (f) fclose(f);
    *self_cpu = (double)(ut + st_) / (double)sysconf(_SC_CLK_TCK);
  }
  int st;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? dt : -1;
}

static inline double bench_run(char *const argv[], const char *out) { return bench_run_cpu(argv, out, NULL); }

/* CPU seconds the whole machine (cpu -1), or CPU number cpu, has been busy (user, nice, system, irq, softirq from
 * /proc/stat: idle, iowait and steal left out), or -1.  Whole machine, because a round trip's work is spread over
 * processes, their threads and the kernel's; one CPU, for what was pinned there (learner.cpus, workers.cpus);
 * benchmarks run on an otherwise idle machine. */
static inline double bench_cpu_busy(int cpu) {
  FILE *f = fopen("/proc/stat", "r");
  if (!f) return -1;
  char line[512], want[32];
  snprintf(want, sizeof want, cpu < 0 ? "cpu " : "cpu%d ", cpu);
  unsigned long long user, nice, sys, idle, iowait, irq, softirq;
  int n = 0;
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, want, strlen(want))) {
      n = sscanf(line + strlen(want), "%llu %llu %llu %llu %llu %llu %llu", &user, &nice, &sys, &idle, &iowait, &irq,
                 &softirq);
      break;
    }
  fclose(f);
  if (n != 7) return -1;
  return (double)(user + nice + sys + irq + softirq) / (double)sysconf(_SC_CLK_TCK);
}

static inline double bench_cpu_busy_s(void) { return bench_cpu_busy(-1); }

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
