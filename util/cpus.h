/* CPU lists as taskset(1) writes them ("0-3,8,10-11"), checked against the CPUs online, and pinning threads to
 * them: learner.cpus and workers.cpus keep the learner and the rollouts on cores of their own (docs/operations.md,
 * "Pinning the learner and the workers"). */
#ifndef LT_UTIL_CPUS_H
#define LT_UTIL_CPUS_H

#include <sched.h>
#include <stddef.h>

#include "util/config.h"

typedef struct {
  cpu_set_t set;
  int n; /* CPUs in set; 0: no list (run wherever the OS puts it) */
} lt_cpus_t;

/* Parses a CPU list ("" or NULL: the empty list, n 0).  LT_EINVAL naming the text when it is malformed, a range
 * runs backwards or a CPU is beyond CPU_SETSIZE. */
int lt_cpus_parse(const char *list, lt_cpus_t *out);
/* The CPUs online on this machine (/sys/devices/system/cpu/online; sysconf where that is unreadable). */
int lt_cpus_online(lt_cpus_t *out);
/* The list back in taskset's form ("0-3,8"; "" for n 0). */
void lt_cpus_format(const lt_cpus_t *c, char *out, size_t cap);

/* Checks the CPU-list keys of cfg (LT_CFG_STR entries): each parses, names only CPUs online, and no CPU is in two of
 * them.  LT_ECONFIG naming the key, its value and the CPU at fault. */
int lt_cpus_config_check(const lt_config_t *cfg, const char *const *keys, int n);
/* cfg's CPU list at key, parsed (LT_ECONFIG naming the key when it does not parse). */
int lt_cpus_config(const lt_config_t *cfg, const char *key, lt_cpus_t *out);

/* The calling thread's CPUs, and pinning it to c (c->n 0: left as it is).  LT_ESYS with the system's reason (a
 * cgroup cpuset that excludes them all: EINVAL). */
int lt_cpus_get_self(lt_cpus_t *out);
int lt_cpus_pin_self(const lt_cpus_t *c);

#endif
