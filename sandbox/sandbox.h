/* Isolated execution of untrusted code (docs/sandbox.md). */
#ifndef LT_SANDBOX_SANDBOX_H
#define LT_SANDBOX_SANDBOX_H

/* What the host lets the sandbox use; probed once, cached. */
typedef struct {
  int userns;   /* unprivileged user + pid/net/mount/ipc/uts namespaces */
  int seccomp;  /* seccomp filters */
} lt_sandbox_caps_t;

void lt_sandbox_probe(lt_sandbox_caps_t *caps);

#endif
