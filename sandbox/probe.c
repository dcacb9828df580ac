/* Capability probe: tries the real thing in a throw-away child. */
#include <pthread.h>
#include <sched.h>
#include <seccomp.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandbox/sandbox.h"

static lt_sandbox_caps_t cached;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void probe(void) {
  pid_t pid = fork();
  if (pid == 0) {
    int flags = CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS;
    _exit(unshare(flags) == 0 ? 0 : 1);
  }
  int st = 0;
  if (pid > 0 && waitpid(pid, &st, 0) == pid) cached.userns = WIFEXITED(st) && WEXITSTATUS(st) == 0;
  /* PR_GET_SECCOMP fails with EINVAL on kernels without seccomp. */
  cached.seccomp = prctl(PR_GET_SECCOMP, 0, 0, 0, 0) >= 0 && seccomp_api_get() >= 1;
}

void lt_sandbox_probe(lt_sandbox_caps_t *caps) {
  pthread_once(&once, probe);
  *caps = cached;
}
