/* CPU lists and pinning (util/cpus.h). */
#include "util/cpus.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/error.h"

/* A CPU number at *p (advanced past it); -1 when there is none. */
static long cpus_number(const char **p) {
  if (!isdigit((unsigned char)**p)) return -1;
  char *end;
  errno = 0;
  long v = strtol(*p, &end, 10);
  if (errno) return -1;
  *p = end;
  return v;
}

int lt_cpus_parse(const char *list, lt_cpus_t *out) {
  memset(out, 0, sizeof *out);
  CPU_ZERO(&out->set);
  if (!list) return 0;
  const char *p = list;
  while (*p && *p != '\n') {
    long a = cpus_number(&p), b = a, step = 1;
    if (*p == '-') p++, b = cpus_number(&p);
    if (*p == ':' && b != a) p++, step = cpus_number(&p);
    if (a < 0 || b < a || step < 1 || (*p && *p != ',' && *p != '\n') || (*p == ',' && !p[1]))
      return lt_error_set(LT_EINVAL, "\"%s\" is not a CPU list (like \"0-3,8\", as taskset -c takes)", list);
    if (b >= CPU_SETSIZE) return lt_error_set(LT_EINVAL, "\"%s\": CPU %ld is beyond %d", list, b, CPU_SETSIZE - 1);
    for (long c = a; c <= b; c += step) CPU_SET((int)c, &out->set);
    if (*p == ',') p++;
  }
  out->n = CPU_COUNT(&out->set);
  return 0;
}

int lt_cpus_online(lt_cpus_t *out) {
  char text[4096] = "";
  FILE *f = fopen("/sys/devices/system/cpu/online", "r");
  if (f) {
    if (!fgets(text, sizeof text, f)) text[0] = 0;
    fclose(f);
  }
  if (text[0] && lt_cpus_parse(text, out) == 0 && out->n > 0) return 0;
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  memset(out, 0, sizeof *out);
  for (long c = 0; c < (n > 0 ? n : 1) && c < CPU_SETSIZE; c++) CPU_SET((int)c, &out->set);
  out->n = CPU_COUNT(&out->set);
  return 0;
}

void lt_cpus_format(const lt_cpus_t *c, char *out, size_t cap) {
  size_t len = 0;
  if (cap) out[0] = 0;
  for (int a = 0; a < CPU_SETSIZE && len < cap; a++) {
    if (!CPU_ISSET(a, &c->set)) continue;
    int b = a;
    while (b + 1 < CPU_SETSIZE && CPU_ISSET(b + 1, &c->set)) b++;
    int w = b > a ? snprintf(out + len, cap - len, "%s%d-%d", len ? "," : "", a, b)
                  : snprintf(out + len, cap - len, "%s%d", len ? "," : "", a);
    len += w > 0 ? (size_t)w : 0;
    a = b;
  }
}

int lt_cpus_config(const lt_config_t *cfg, const char *key, lt_cpus_t *out) {
  const char *v = lt_config_str(cfg, key);
  if (lt_cpus_parse(v, out) < 0) return lt_error_wrap(LT_ECONFIG, "%s", key);
  return 0;
}

/* The lowest CPU in both a and b, or -1. */
static int cpus_common(const cpu_set_t *a, const cpu_set_t *b) {
  for (int c = 0; c < CPU_SETSIZE; c++)
    if (CPU_ISSET(c, a) && CPU_ISSET(c, b)) return c;
  return -1;
}

int lt_cpus_config_check(const lt_config_t *cfg, const char *const *keys, int n) {
  lt_cpus_t online, seen[8];
  if (n > 8) return lt_error_set(LT_EINVAL, "cpus: at most 8 CPU-list keys");
  lt_cpus_online(&online);
  char on[256];
  lt_cpus_format(&online, on, sizeof on);
  for (int i = 0; i < n; i++) {
    int rc = lt_cpus_config(cfg, keys[i], &seen[i]);
    if (rc < 0) return rc;
    const char *v = lt_config_str(cfg, keys[i]);
    for (int c = 0; c < CPU_SETSIZE; c++)
      if (CPU_ISSET(c, &seen[i].set) && !CPU_ISSET(c, &online.set))
        return lt_error_set(LT_ECONFIG, "%s: \"%s\" names CPU %d, which is not online (this machine's: %s)", keys[i], v,
                            c, on);
    for (int j = 0; j < i; j++) {
      int c = cpus_common(&seen[i].set, &seen[j].set);
      if (c >= 0)
        return lt_error_set(LT_ECONFIG, "%s: \"%s\" shares CPU %d with %s \"%s\"; the lists must be disjoint", keys[i],
                            v, c, keys[j], lt_config_str(cfg, keys[j]));
    }
  }
  return 0;
}

int lt_cpus_get_self(lt_cpus_t *out) {
  memset(out, 0, sizeof *out);
  int e = pthread_getaffinity_np(pthread_self(), sizeof out->set, &out->set);
  if (e) return lt_error_set(LT_ESYS, "the thread's CPUs: %s", strerror(e));
  out->n = CPU_COUNT(&out->set);
  return 0;
}

int lt_cpus_pin_self(const lt_cpus_t *c) {
  if (!c || c->n == 0) return 0;
  int e = pthread_setaffinity_np(pthread_self(), sizeof c->set, &c->set);
  if (!e) return 0;
  char list[256];
  lt_cpus_format(c, list, sizeof list);
  return lt_error_set(LT_ESYS, "cannot run on CPUs %s: %s%s", list, strerror(e),
                      e == EINVAL ? " (none of them is allowed to this process: its cgroup's cpuset?)" : "");
}
