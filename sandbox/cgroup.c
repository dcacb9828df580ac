/* Memory and pids limits through a cgroup (v2, or v1's memory and pids
 * hierarchies), created below the cgroup this process lives in.  Where none can
 * be created (no permission, no controller) the sandbox falls back to rlimits
 * and says so: it cannot then tell an out-of-memory kill from a crash. */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandbox/internal.h"

/* The path of this process's cgroup in hierarchy `ctl` ("memory", "pids"; "" for v2). */
static int own_path(const char *ctl, char *out, size_t n) {
  FILE *f = fopen("/proc/self/cgroup", "re");
  if (!f) return -1;
  char line[1024];
  int found = -1;
  while (fgets(line, sizeof line, f)) {
    char *a = strchr(line, ':'), *b = a ? strchr(a + 1, ':') : NULL;
    if (!b) continue;
    *b = 0;
    const char *ctls = a + 1, *path = b + 1;
    int match = 0;
    if (!*ctl) match = !*ctls && strncmp(line, "0", 1) == 0;
    else
      for (char *t = strtok((char *)ctls, ","); t; t = strtok(NULL, ","))
        if (strcmp(t, ctl) == 0) match = 1;
    if (match) {
      snprintf(out, n, "%.*s", (int)strcspn(path, "\n"), path);
      found = 0;
      break;
    }
  }
  fclose(f);
  return found;
}

static int write_file(const char *dir, const char *name, const char *val) {
  char p[640];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  int fd = open(p, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t w = write(fd, val, strlen(val));
  close(fd);
  return w == (ssize_t)strlen(val) ? 0 : -1;
}

/* The number after `key` in a "key value" file, -1 if absent. */
static long read_key(const char *dir, const char *name, const char *key) {
  char p[640], line[256];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  FILE *f = fopen(p, "re");
  if (!f) return -1;
  long v = -1;
  size_t kl = strlen(key);
  while (fgets(line, sizeof line, f))
    if (strncmp(line, key, kl) == 0 && line[kl] == ' ') v = strtol(line + kl + 1, NULL, 10);
  fclose(f);
  return v;
}

static int v2_base(char *out, size_t n) {
  char own[400], ctl[512];
  if (access("/sys/fs/cgroup/cgroup.controllers", F_OK) != 0 || own_path("", own, sizeof own) != 0) return -1;
  snprintf(out, n, "/sys/fs/cgroup%s", strcmp(own, "/") ? own : "");
  snprintf(ctl, sizeof ctl, "%s/cgroup.subtree_control", out);
  FILE *f = fopen(ctl, "re");
  if (!f) return -1;
  char line[256] = "";
  int ok = fgets(line, sizeof line, f) && strstr(line, "memory") && strstr(line, "pids");
  fclose(f);
  return ok ? 0 : -1;
}

static int v1_base(const char *ctl, char *out, size_t n) {
  char own[400];
  if (own_path(ctl, own, sizeof own) != 0) return -1;
  snprintf(out, n, "/sys/fs/cgroup/%s%s", ctl, strcmp(own, "/") ? own : "");
  return access(out, W_OK) == 0 ? 0 : -1;
}

static atomic_int counter;

static int make_dir(const char *base, char *out, size_t n) {
  snprintf(out, n, "%s/longtail-sbx-%d-%d", base, (int)getpid(), atomic_fetch_add(&counter, 1));
  return mkdir(out, 0755) == 0 ? 0 : -1;
}

void lt__cgroup_create(lt__cgroup_t *cg, const lt_sandbox_limits_t *l) {
  memset(cg, 0, sizeof *cg);
  char base[512], mem[32], pids[32];
  snprintf(mem, sizeof mem, "%lld", (long long)l->memory_mb << 20);
  snprintf(pids, sizeof pids, "%d", l->nproc);
  if (v2_base(base, sizeof base) == 0 && make_dir(base, cg->mem, sizeof cg->mem) == 0) {
    snprintf(cg->pids, sizeof cg->pids, "%s", cg->mem);
    cg->version = 2;
    if (write_file(cg->mem, "memory.max", mem) == 0 && write_file(cg->mem, "pids.max", pids) == 0) {
      write_file(cg->mem, "memory.swap.max", "0"); /* absent without swap accounting */
      return;
    }
  } else if (v1_base("memory", base, sizeof base) == 0 && make_dir(base, cg->mem, sizeof cg->mem) == 0) {
    cg->version = 1;
    char pbase[512];
    if (write_file(cg->mem, "memory.limit_in_bytes", mem) == 0) {
      write_file(cg->mem, "memory.memsw.limit_in_bytes", mem); /* absent without swap accounting */
      if (v1_base("pids", pbase, sizeof pbase) == 0 && make_dir(pbase, cg->pids, sizeof cg->pids) == 0 &&
          write_file(cg->pids, "pids.max", pids) != 0) {
        rmdir(cg->pids);
        cg->pids[0] = 0;
      }
      return;
    }
  }
  lt__cgroup_remove(cg); /* half-made: fall back to rlimits */
}

int lt__cgroup_attach(const lt__cgroup_t *cg, int pid) {
  if (!cg->version) return 0;
  char s[32];
  snprintf(s, sizeof s, "%d", pid);
  if (write_file(cg->mem, "cgroup.procs", s) != 0) return -1;
  if (cg->version == 1 && cg->pids[0] && write_file(cg->pids, "cgroup.procs", s) != 0) return -1;
  return 0;
}

int lt__cgroup_oom_kills(const lt__cgroup_t *cg) {
  if (cg->version == 2) return (int)read_key(cg->mem, "memory.events", "oom_kill");
  if (cg->version == 1) return (int)read_key(cg->mem, "memory.oom_control", "oom_kill");
  return 0;
}

void lt__cgroup_remove(lt__cgroup_t *cg) {
  /* The tree is dead when this runs; a v1 memory cgroup may still be
   * uncharging for a moment, hence the short retry. */
  for (int i = 0; i < 50 && cg->mem[0] && rmdir(cg->mem) != 0 && errno == EBUSY; i++) usleep(1000);
  if (cg->version == 1 && cg->pids[0]) rmdir(cg->pids);
  memset(cg, 0, sizeof *cg);
}

int lt__cgroup_probe(void) {
  lt_sandbox_limits_t l;
  lt_sandbox_limits_default(&l);
  lt__cgroup_t cg;
  lt__cgroup_create(&cg, &l);
  int v = cg.version;
  lt__cgroup_remove(&cg);
  return v;
}
