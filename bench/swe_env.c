/* Benchmark: how fast a task's root is ready (docs/sandbox.md, "Images and boxes"), next to podman.
 *
 * The image is the test suite's busybox image (tests/support/image.c: Debian's busybox-static as an OCI layout).
 * "Ready" is a box made (or taken from the warm pool) and its first command, `true`, answered: the moment an
 * episode could run its first tool call.  Cold: lt_box_create over the image already in the cache; warm: a pool of
 * sandbox.pool (2) refilled by its thread between takes, as an environment's pool is.  Podman: Debian's podman
 * with runc (crun 1.8 refuses this host's hybrid cgroups) running `true` in the same image (loaded into its
 * storage once, untimed), `podman run --rm --network none`.  Idle: N boxes each with an idle shell, the resident
 * and proportional memory of their processes.
 *
 *   swe_env                      the `make bench` keys (LT_BENCH_SWE runs, default 200; LT_BENCH_PODMAN, 10;
 *                                LT_BENCH_SWE_ASKER_MB, default 0: memory this process holds, as a worker's model)
 *   swe_env --scale N            `make scale-swe`: N boxes at once, each with an idle persistent shell, as
 *                                agentic episodes waiting on the model are: memory, host fds, ready and command
 *                                latency with all of them up, then nothing left after they end
 *
 * Prints one JSON object last. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench/bench.h"
#include "sandbox/image.h"
#include "tests/support/image.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/time.h"

static const char *const true_cmd[] = {"true", NULL};

static int fail(const char *what) {
  fprintf(stderr, "swe_env: %s: %s\n", what, lt_error_msg());
  return 1;
}

/* The first command of a box, answered. */
static int first_command(lt_box_t *b) {
  lt_sandbox_job_t job = {.argv = true_cmd};
  lt_sandbox_result_t r;
  int rc = lt_box_exec(b, &job, &r);
  if (rc == 0 && r.exit_code != 0) rc = lt_error_set(LT_EIO, "`true` exited %d: %s", r.exit_code, r.err);
  if (rc == 0) lt_sandbox_result_free(&r);
  return rc;
}

static double pct(double *v, int n, double p) {
  qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
  int i = (int)(p * (n - 1) + 0.5);
  return v[i < n ? i : n - 1];
}

/* CPU seconds of our live children with what they reaped (/proc/PID/stat utime, stime, cutime, cstime): the jail
 * maker (sandbox/zygote.c), whose children the boxes' jails are. */
static double live_children_cpu_s(void) {
  char p[128], line[1024];
  double ticks = 0;
  DIR *d = opendir("/proc/self/task");
  for (struct dirent *t; d && (t = readdir(d));) {
    if (t->d_name[0] == '.') continue;
    snprintf(p, sizeof p, "/proc/self/task/%s/children", t->d_name);
    FILE *f = fopen(p, "re");
    int child;
    while (f && fscanf(f, "%d", &child) == 1) {
      snprintf(p, sizeof p, "/proc/%d/stat", child);
      FILE *s = fopen(p, "re");
      char *e = s && fgets(line, sizeof line, s) ? strrchr(line, ')') : NULL;
      unsigned long long u, st;
      long long cu, cs;
      /* after "pid (comm)": state and 10 fields, then utime stime cutime cstime */
      if (e && sscanf(e + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %lld %lld", &u, &st, &cu, &cs) == 4)
        ticks += (double)(u + st) + (double)(cu + cs);
      if (s) fclose(s);
    }
    if (f) fclose(f);
  }
  if (d) closedir(d);
  return ticks / (double)sysconf(_SC_CLK_TCK);
}

/* CPU seconds of this process, its reaped descendants and the jail maker's (the boxes' jails, inits and programs
 * once destroyed). */
static double cpu_s(void) {
  struct rusage a, b;
  getrusage(RUSAGE_SELF, &a);
  getrusage(RUSAGE_CHILDREN, &b);
  return (double)(a.ru_utime.tv_sec + a.ru_stime.tv_sec + b.ru_utime.tv_sec + b.ru_stime.tv_sec) +
         (double)(a.ru_utime.tv_usec + a.ru_stime.tv_usec + b.ru_utime.tv_usec + b.ru_stime.tv_usec) * 1e-6 +
         live_children_cpu_s();
}

/* Ready latencies (ms) of n boxes: from the pool when pool, else made cold. */
static int ready_ms(lt_image_t *img, const lt_sandbox_limits_t *l, lt_box_pool_t *pool, int n, double *ms) {
  for (int i = 0; i < n; i++) {
    lt_box_t *b = NULL;
    double t0 = lt_time_mono_s();
    int rc = pool ? lt_box_pool_take(pool, &b) : lt_box_create(img, l, &b);
    if (rc == 0) rc = first_command(b);
    ms[i] = (lt_time_mono_s() - t0) * 1e3;
    if (b) lt_box_destroy(b);
    if (rc < 0) return fail(pool ? "warm box" : "cold box");
    if (pool) usleep(250000); /* an episode lasts longer than a box takes to make: the pool is refilled between takes */
  }
  return 0;
}

/* `podman run --rm` of the same image, p50 over n runs (ms); -1 when podman is missing or fails. */
static double podman_ms(const char *layout, const char *tmp, int n) {
  char ref[4400], idfile[4200], id[128] = "";
  snprintf(ref, sizeof ref, "oci:%s", layout);
  snprintf(idfile, sizeof idfile, "%s/podman-id", tmp);
  char *pull[] = {"podman", "pull", "-q", ref, NULL};
  FILE *f = bench_run(pull, idfile) >= 0 ? fopen(idfile, "re") : NULL;
  if (!f || !fgets(id, sizeof id, f) || strlen(id) < 12) {
    fprintf(stderr, "swe_env: podman pull %s failed (is Debian's podman installed, with runc?)\n", ref);
    if (f) fclose(f);
    return -1;
  }
  fclose(f);
  id[strcspn(id, "\n")] = 0;
  /* By the stored image's ID: an oci: reference would be copied into podman's storage again on every run. */
  char *argv[] = {"podman",
                  "run",
                  "--rm",
                  "--runtime",
                  "runc",
                  "--network",
                  "none",
                  "--ulimit",
                  "nofile=1024:1024",
                  "--ulimit",
                  "nproc=1024:1024",
                  id,
                  "true",
                  NULL};
  double *v = calloc((size_t)n, sizeof *v);
  for (int i = 0; i < n; i++) {
    double t = bench_run(argv, "/dev/null");
    if (t < 0) {
      fprintf(stderr, "swe_env: podman run failed\n");
      free(v);
      return -1;
    }
    v[i] = t * 1e3;
  }
  double m = pct(v, n, 0.5);
  free(v);
  return m;
}

/* ---- memory and descriptors of our process tree ---------------------------------- */

/* Sums a "Key: N kB" line of /proc/PID/smaps_rollup over our descendants. */
static long descendants_kb(pid_t pid, const char *key, int *nproc) {
  char p[128], line[256];
  long kb = 0;
  snprintf(p, sizeof p, "/proc/%d/task", (int)pid);
  DIR *d = opendir(p);
  for (struct dirent *t; d && (t = readdir(d));) {
    if (t->d_name[0] == '.') continue;
    snprintf(p, sizeof p, "/proc/%d/task/%s/children", (int)pid, t->d_name);
    FILE *f = fopen(p, "re");
    int child;
    while (f && fscanf(f, "%d", &child) == 1) {
      snprintf(p, sizeof p, "/proc/%d/smaps_rollup", child);
      FILE *s = fopen(p, "re");
      while (s && fgets(line, sizeof line, s))
        if (strncmp(line, key, strlen(key)) == 0) kb += atol(line + strlen(key));
      if (s) fclose(s);
      (*nproc)++;
      kb += descendants_kb(child, key, nproc);
    }
    if (f) fclose(f);
  }
  if (d) closedir(d);
  return kb;
}

static int open_fds(void) {
  int n = 0;
  DIR *d = opendir("/proc/self/fd");
  for (struct dirent *e; d && (e = readdir(d));) n += e->d_name[0] != '.';
  if (d) closedir(d);
  return n - 1; /* the directory's own */
}

static long mem_available_kb(void) {
  FILE *f = fopen("/proc/meminfo", "re");
  char line[256];
  long kb = -1;
  while (f && fgets(line, sizeof line, f))
    if (strncmp(line, "MemAvailable:", 13) == 0) kb = atol(line + 13);
  if (f) fclose(f);
  return kb;
}

/* Cgroups the boxes left under ours (sandbox/cgroup.c names them longtail-sbx-PID-N). */
static int leftover_cgroups(void) {
  char own[512] = "", line[1024], dir[1100];
  FILE *f = fopen("/proc/self/cgroup", "re");
  while (f && fgets(line, sizeof line, f)) {
    char *a = strchr(line, ':'), *b = a ? strchr(a + 1, ':') : NULL;
    if (b && (strstr(a, ":memory:") == a || strncmp(line, "0::", 3) == 0)) {
      snprintf(dir, sizeof dir, "/sys/fs/cgroup/%s%.*s", line[0] == '0' ? "" : "memory", (int)strcspn(b + 1, "\n"),
               b + 1);
      snprintf(own, sizeof own, "%s", dir);
    }
  }
  if (f) fclose(f);
  int n = 0;
  char prefix[64];
  snprintf(prefix, sizeof prefix, "longtail-sbx-%d-", (int)getpid());
  DIR *d = own[0] ? opendir(own) : NULL;
  for (struct dirent *e; d && (e = readdir(d));) n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
  if (d) closedir(d);
  return n;
}

/* The cache's lock on the image (digest "sha256:<hex>"), free for an exclusive taker once every opener closed it. */
static int lock_free(const char *cache, const char *digest) {
  char p[4400];
  snprintf(p, sizeof p, "%s/locks/%s.lock", cache, digest + 7);
  int fd = open(p, O_RDWR | O_CLOEXEC);
  struct flock l = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
  int ok = fd >= 0 && fcntl(fd, F_OFD_SETLK, &l) == 0;
  if (fd >= 0) close(fd);
  return ok;
}

/* ---- the modes ------------------------------------------------------------------------ */

static int bench_keys(const char *layout, const char *tmp, lt_image_t *img, const lt_sandbox_limits_t *l) {
  int n = getenv("LT_BENCH_SWE") ? atoi(getenv("LT_BENCH_SWE")) : 200;
  int np = getenv("LT_BENCH_PODMAN") ? atoi(getenv("LT_BENCH_PODMAN")) : 10;
  if (n < 2) n = 2;
  double *cold = calloc((size_t)n, sizeof *cold), *warm = calloc((size_t)n, sizeof *warm);
  lt_box_pool_t *pool = NULL;
  if (lt_box_pool_create(img, l, 2, &pool) < 0) return fail("pool");
  usleep(200000);
  double c0 = cpu_s();
  if (ready_ms(img, l, NULL, n, cold)) return 1;
  double cold_cpu_ms = (cpu_s() - c0) * 1e3 / n;
  if (ready_ms(img, l, pool, n, warm)) return 1;
  lt_box_pool_free(pool);
  fprintf(stderr, "CPU per box made, first command answered and destroyed (all processes): %.2f ms\n", cold_cpu_ms);
  double c50 = pct(cold, n, 0.5), c99 = pct(cold, n, 0.99), w50 = pct(warm, n, 0.5), w99 = pct(warm, n, 0.99);
  fprintf(stderr, "ready (ms, %d boxes each): warm p50 %.2f p99 %.2f; cold p50 %.2f p99 %.2f\n", n, w50, w99, c50, c99);
  /* Idle: boxes with a shell each, as episodes between tool calls. */
  enum { IDLE = 16 };
  lt_box_t *boxes[IDLE];
  lt_box_proc_t *sh[IDLE];
  const char *const shell[] = {"sh", NULL};
  int procs = 0, procs2 = 0, procs0 = 0;
  /* What is there before them (the jail maker) is not a root's. */
  long rss0 = descendants_kb(getpid(), "Rss:", &procs0), pss0 = descendants_kb(getpid(), "Pss:", &procs2);
  procs = -procs0;
  for (int i = 0; i < IDLE; i++) {
    lt_sandbox_job_t job = {.argv = shell};
    if (lt_box_create(img, l, &boxes[i]) < 0 || lt_box_spawn(boxes[i], &job, NULL, &sh[i]) < 0) return fail("idle box");
  }
  usleep(300000);
  long rss = descendants_kb(getpid(), "Rss:", &procs) - rss0, pss = descendants_kb(getpid(), "Pss:", &procs2) - pss0;
  for (int i = 0; i < IDLE; i++) lt_box_proc_free(sh[i]), lt_box_destroy(boxes[i]);
  fprintf(stderr, "idle: %d boxes with a shell each: %d processes, Rss %ld kB, Pss %ld kB in all\n", IDLE, procs, rss,
          pss);
  double pm = np > 0 ? podman_ms(layout, tmp, np) : -1;
  if (pm > 0) fprintf(stderr, "podman run --rm (runc): p50 %.1f ms over %d runs\n", pm, np);
  printf(
      "{\"swe_env_ready_ms\": {\"warm_p50\": %.3f, \"warm_p99\": %.3f, \"cold_p50\": %.3f, \"cold_p99\": %.3f}, "
      "\"swe_env_cycle_cpu_ms\": %.2f, \"swe_env_idle_rss_kb\": %ld, \"swe_env_idle_pss_kb\": %ld",
      w50, w99, c50, c99, cold_cpu_ms, rss / IDLE, pss / IDLE);
  if (pm > 0)
    printf(", \"swe_env_podman_ms\": %.1f, \"swe_env_vs_podman\": %.1f, \"swe_env_cold_vs_podman\": %.1f", pm, pm / w50,
           pm / c50);
  printf("}\n");
  free(cold);
  free(warm);
  return 0;
}

/* A command answered by a box's shell: writes `echo ok`, reads the line back. */
static int shell_roundtrip(lt_box_proc_t *p) {
  if (send(lt_box_proc_stdin(p), "echo ok\n", 8, MSG_NOSIGNAL) != 8) return -1;
  char buf[16];
  size_t got = 0;
  double t0 = lt_time_mono_s();
  while (got < 3 && lt_time_mono_s() - t0 < 10) {
    struct pollfd pf = {.fd = lt_box_proc_stdout(p), .events = POLLIN};
    if (poll(&pf, 1, 1000) <= 0) continue;
    ssize_t n = read(pf.fd, buf + got, sizeof buf - got);
    if (n <= 0 && errno != EAGAIN) return -1;
    if (n > 0) got += (size_t)n;
  }
  return got >= 3 && memcmp(buf, "ok\n", 3) == 0 ? 0 : -1;
}

/* Takes img and closes it once every box is gone, to check that its cache lock is released. */
static int scale(const char *cache, lt_image_t *img, const lt_sandbox_limits_t *l0, int n) {
  struct rlimit r;
  getrlimit(RLIMIT_NOFILE, &r);
  r.rlim_cur = r.rlim_max;
  setrlimit(RLIMIT_NOFILE, &r);
  lt_sandbox_limits_t l = *l0;
  l.memory_mb = 256;
  l.file_mb = 16;
  lt_box_t **boxes = calloc((size_t)n, sizeof *boxes);
  lt_box_proc_t **sh = calloc((size_t)n, sizeof *sh);
  double *ready = calloc((size_t)n, sizeof *ready), *cmd = calloc((size_t)n, sizeof *cmd);
  const char *const shell[] = {"sh", NULL};
  /* One root made and destroyed first: the jail maker and its socket are the process's, not a root's. */
  lt_box_t *first = NULL;
  if (lt_box_create(img, &l, &first) < 0 || first_command(first) < 0) return fail("box");
  lt_box_destroy(first);
  usleep(200000);
  int procs0 = 0;
  descendants_kb(getpid(), "Rss:", &procs0);
  int fds0 = open_fds(), cg0 = leftover_cgroups();
  long avail0 = mem_available_kb();
  double t0 = lt_time_mono_s();
  int made = 0;
  for (; made < n; made++) {
    lt_sandbox_job_t job = {.argv = shell};
    double t = lt_time_mono_s();
    if (lt_box_create(img, &l, &boxes[made]) < 0 || first_command(boxes[made]) < 0 ||
        lt_box_spawn(boxes[made], &job, NULL, &sh[made]) < 0) {
      fail("box");
      break;
    }
    ready[made] = (lt_time_mono_s() - t) * 1e3;
    if ((made + 1) % 100 == 0) fprintf(stderr, "  %d roots up (%.1f s)\n", made + 1, lt_time_mono_s() - t0);
  }
  double up_s = lt_time_mono_s() - t0;
  usleep(500000);
  int procs = -procs0, procs2 = 0;
  long rss = descendants_kb(getpid(), "Rss:", &procs), pss = descendants_kb(getpid(), "Pss:", &procs2);
  long avail1 = mem_available_kb();
  int fds1 = open_fds();
  /* With all of them up: every shell answers, one after another. */
  int answered = 0;
  for (int i = 0; i < made; i++) {
    double t = lt_time_mono_s();
    if (shell_roundtrip(sh[i]) == 0) cmd[answered++] = (lt_time_mono_s() - t) * 1e3;
  }
  double r50 = made ? pct(ready, made, 0.5) : 0, r99 = made ? pct(ready, made, 0.99) : 0;
  double c50 = answered ? pct(cmd, answered, 0.5) : 0, c99 = answered ? pct(cmd, answered, 0.99) : 0;
  double t1 = lt_time_mono_s();
  for (int i = 0; i < made; i++) lt_box_proc_free(sh[i]), lt_box_destroy(boxes[i]);
  double down_s = lt_time_mono_s() - t1;
  usleep(200000);
  int procs_left = -procs0;
  descendants_kb(getpid(), "Rss:", &procs_left);
  char digest[72];
  snprintf(digest, sizeof digest, "%s", lt_image_config(img)->digest);
  int busy = !lock_free(cache, digest); /* held shared while the image is open */
  lt_image_close(img);
  int fds2 = open_fds() + 2, cg2 = leftover_cgroups(); /* + the image's lock and root, closed just now */
  int locks_ok = busy && lock_free(cache, digest);
  fprintf(stderr,
          "%d roots up in %.1f s (ready p50 %.2f ms, p99 %.2f ms); %d processes, Rss %ld kB (%ld per root), Pss %ld kB "
          "(%ld per root); MemAvailable fell %ld kB (%ld per root, kernel memory included); host fds %d -> %d (%.1f "
          "per root); %d/%d shells answered (p50 %.2f ms, p99 %.2f ms); down in %.1f s; left: %d processes, %d fds "
          "over the start, %d cgroups\n",
          made, up_s, r50, r99, procs, rss, made ? rss / made : 0, pss, made ? pss / made : 0, avail0 - avail1,
          made ? (avail0 - avail1) / made : 0, fds0, fds1, made ? (double)(fds1 - fds0) / made : 0, answered, made, c50,
          c99, down_s, procs_left, fds2 - fds0, cg2 - cg0);
  printf(
      "{\"swe_scale_roots\": %d, \"swe_scale_up_s\": %.2f, \"swe_scale_ready_ms\": {\"p50\": %.3f, \"p99\": %.3f}, "
      "\"swe_scale_cmd_ms\": {\"p50\": %.3f, \"p99\": %.3f}, \"swe_scale_rss_kb_per_root\": %ld, "
      "\"swe_scale_pss_kb_per_root\": %ld, \"swe_scale_memavail_kb_per_root\": %ld, "
      "\"swe_scale_fds_per_root\": %.2f, "
      "\"swe_scale_answered\": %d, \"swe_scale_down_s\": %.2f, \"swe_scale_left_processes\": %d, "
      "\"swe_scale_left_fds\": %d, \"swe_scale_left_cgroups\": %d, \"swe_scale_cache_lock_released\": %s}\n",
      made, up_s, r50, r99, c50, c99, made ? rss / made : 0, made ? pss / made : 0, made ? (avail0 - avail1) / made : 0,
      made ? (double)(fds1 - fds0) / made : 0, answered, down_s, procs_left, fds2 - fds0, cg2 - cg0,
      locks_ok ? "true" : "false");
  free(boxes);
  free(sh);
  free(ready);
  free(cmd);
  return made == n && answered == n && procs_left == 0 && fds2 == fds0 && cg2 == cg0 && locks_ok ? 0 : 1;
}

int main(int argc, char **argv) {
  int n_scale = argc > 2 && strcmp(argv[1], "--scale") == 0 ? atoi(argv[2]) : 0;
  const char *ref = lt_test_busybox_image();
  if (!ref) return 1;
  /* LT_BENCH_SWE_ASKER_MB: this process holds that much written memory first, as a worker holding a model does. */
  size_t asker = getenv("LT_BENCH_SWE_ASKER_MB") ? (size_t)atol(getenv("LT_BENCH_SWE_ASKER_MB")) << 20 : 0;
  char *held = asker ? malloc(asker) : NULL;
  if (asker && !held) return 1;
  for (size_t i = 0; i < asker; i += 4096) held[i] = 1;
  char tmpl[] = "/tmp/lt-bench-swe-XXXXXX", cache[64];
  if (!mkdtemp(tmpl)) return 1;
  snprintf(cache, sizeof cache, "%s/cache", tmpl);
  lt_sandbox_limits_t l;
  lt_sandbox_limits_default(&l);
  lt_image_t *img = NULL;
  double t0 = lt_time_mono_s();
  if (lt_image_open(cache, ref, &img) < 0) return fail(ref);
  fprintf(stderr, "%s unpacked into the cache in %.1f ms\n", ref, (lt_time_mono_s() - t0) * 1e3);
  char layout[4096];
  snprintf(layout, sizeof layout, "%s", ref + 4);
  *strrchr(layout, ':') = 0;
  int rc = n_scale > 0 ? scale(cache, img, &l, n_scale) : bench_keys(layout, tmpl, img, &l);
  if (n_scale <= 0) lt_image_close(img);
  lt_fs_remove_tree(tmpl);
  free(held);
  return rc;
}
