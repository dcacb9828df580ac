/* The sandbox's seccomp filter, compiled once to BPF in the parent so that the
 * child (forked from a multi-threaded process) only has to load it.
 *
 * A deny list: the namespaces, the user namespace and the rlimits already do the
 * isolating; the filter removes the kernel surface a sandboxed program has no use
 * for (mounts, new namespaces, ptrace, keyrings, BPF, io_uring, module loading)
 * and every socket family but AF_UNIX (and AF_INET/AF_INET6 where the sandbox
 * has a port: limits.port).  Foreign-architecture system calls kill
 * the process (libseccomp's default for an arch not in the filter). */
#include <errno.h>
#include <linux/filter.h>
#include <pthread.h>
#include <sched.h>
#include <seccomp.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sandbox/internal.h"

static const char *const denied[] = {
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "unshare",
    "setns",
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "bpf",
    "perf_event_open",
    "keyctl",
    "add_key",
    "request_key",
    "userfaultfd",
    "swapon",
    "swapoff",
    "reboot",
    "acct",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "syslog",
    "quotactl",
    "open_by_handle_at",
    "name_to_handle_at",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "fanotify_init",
    "fsopen",
    "fsmount",
    "fspick",
    "move_mount",
    "open_tree",
    "mount_setattr",
    "lookup_dcookie",
    "vhangup",
    "personality",
};

static const int ns_flags[] = {CLONE_NEWUSER, CLONE_NEWNS,  CLONE_NEWPID,   CLONE_NEWNET,
                               CLONE_NEWIPC,  CLONE_NEWUTS, CLONE_NEWCGROUP};

static struct sock_fprog progs[2]; /* [inet] */
static pthread_once_t once = PTHREAD_ONCE_INIT;

static int add(scmp_filter_ctx ctx, int err, const char *name, unsigned n, const struct scmp_arg_cmp *cmp) {
  int nr = seccomp_syscall_resolve_name(name);
  if (nr == __NR_SCMP_ERROR) return 0; /* not on this architecture */
  return seccomp_rule_add_array(ctx, SCMP_ACT_ERRNO(err), nr, n, cmp);
}

static int build(scmp_filter_ctx ctx, int inet) {
  int rc = 0;
  for (size_t i = 0; i < sizeof denied / sizeof denied[0] && rc == 0; i++) rc = add(ctx, EPERM, denied[i], 0, NULL);
  for (size_t i = 0; i < sizeof ns_flags / sizeof ns_flags[0] && rc == 0; i++) {
    struct scmp_arg_cmp c = SCMP_A0(SCMP_CMP_MASKED_EQ, (scmp_datum_t)ns_flags[i], (scmp_datum_t)ns_flags[i]);
    rc = add(ctx, EPERM, "clone", 1, &c);
  }
  /* clone3 passes its flags in memory the filter cannot read: ENOSYS makes libc fall back to clone. */
  if (rc == 0) rc = add(ctx, ENOSYS, "clone3", 0, NULL);
  if (rc == 0) {
    /* One comparison per rule (libseccomp takes an argument once per rule): with inet, every family
     * but AF_UNIX (1), AF_INET (2) and AF_INET6 (10) is denied as 0, 3..9 or above 10. */
    struct scmp_arg_cmp c = inet ? SCMP_A0(SCMP_CMP_GT, AF_INET6) : SCMP_A0(SCMP_CMP_NE, AF_UNIX);
    rc = add(ctx, EAFNOSUPPORT, "socket", 1, &c);
    for (int f = 0; inet && f < AF_INET6 && rc == 0; f++) {
      if (f == AF_UNIX || f == AF_INET) continue;
      struct scmp_arg_cmp e = SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)f);
      rc = add(ctx, EAFNOSUPPORT, "socket", 1, &e);
    }
  }
  if (rc == 0) {
    struct scmp_arg_cmp c = SCMP_A1(SCMP_CMP_EQ, TIOCSTI);
    rc = add(ctx, EPERM, "ioctl", 1, &c);
  }
  return rc;
}

static void compile_one(int inet) {
  struct sock_fprog *prog = &progs[inet];
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
  if (!ctx) return;
  /* The filter is exported, not loaded here: no_new_privs is the child's business. */
  seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 0);
  int fd = -1;
  if (build(ctx, inet) == 0 && (fd = memfd_create("lt-seccomp", MFD_CLOEXEC)) >= 0 &&
      seccomp_export_bpf(ctx, fd) == 0) {
    off_t len = lseek(fd, 0, SEEK_END);
    struct sock_filter *f = len > 0 ? malloc((size_t)len) : NULL;
    if (f && pread(fd, f, (size_t)len, 0) == len) {
      prog->filter = f; /* kept for the process's life: children inherit it */
      prog->len = (unsigned short)(len / (off_t)sizeof *f);
    } else {
      free(f);
    }
  }
  if (fd >= 0) close(fd);
  seccomp_release(ctx);
}

static void compile(void) {
  compile_one(0);
  compile_one(1);
}

const void *lt__sandbox_seccomp_prog(int inet) {
  pthread_once(&once, compile);
  inet = inet != 0;
  return progs[inet].filter ? &progs[inet] : NULL;
}
