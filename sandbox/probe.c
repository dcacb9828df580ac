/* Capability probe: makes a real sandbox once and throws it away, so that what
 * it reports is what the sandbox will do, not what the kernel advertises. */
#include <pthread.h>
#include <seccomp.h>
#include <stdio.h>
#include <sys/prctl.h>

#include "sandbox/internal.h"

static lt_sandbox_caps_t cached;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void probe(void) {
  lt_sandbox_limits_t l;
  lt_sandbox_limits_default(&l);
  lt_sandbox_t *sb;
  if (lt_sandbox_create(&l, &sb) == 0) {
    cached.userns = 1;
    lt_sandbox_destroy(sb);
  }
  cached.cgroup = lt__cgroup_probe();
  /* PR_GET_SECCOMP fails with EINVAL on kernels without seccomp. */
  cached.seccomp = prctl(PR_GET_SECCOMP, 0, 0, 0, 0) >= 0 && seccomp_api_get() >= 1 && lt__sandbox_seccomp_prog(0);
}

void lt_sandbox_probe(lt_sandbox_caps_t *caps) {
  pthread_once(&once, probe);
  *caps = cached;
}

void lt_sandbox_caps_describe(const lt_sandbox_caps_t *c, char *buf, size_t n) {
  snprintf(buf, n, "userns=%s, seccomp=%s, memory=%s", c->userns ? "yes" : "no", c->seccomp ? "yes" : "no",
           c->cgroup == 2   ? "cgroup-v2"
           : c->cgroup == 1 ? "cgroup-v1"
                            : "rlimit (no OOM report)");
}
