/* The jail maker: a small process that forks every jail, so that a jail's processes are copies of it and not of the
 * process that asked (a worker holding a model maps hundreds of MB; every fork of it copied their page tables, for
 * each jail and for each box's init, and kept them for the box's life: 1 GB mapped made a box take ~60x the CPU
 * to create and destroy).
 *
 * It is this executable again (/proc/self/exe, run once per process on the first jail), taken over before main by a
 * constructor that sees LT__ZYGOTE_FD.  It is spawned by a thread that never ends, so it dies (PR_SET_PDEATHSIG)
 * only with the process, and its jails with it: a jail then outlives the thread that asked for it.  Requests come
 * on a SOCK_SEQPACKET socket with the jail's six channels; the answer is the jail's pid and a pidfd, through which
 * the asker signals it and sees it end (the maker reaps its jails as they end).  Where the maker
 * cannot start, the asker forks jails itself (sandbox/exec.c). */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandbox/internal.h"
#include "util/error.h"

#define ZMAGIC 0x4c545a47u

typedef struct {
  uint32_t magic;
  lt_sandbox_limits_t l;
  int32_t parent_is_root, rlimit_memory, uid, gid, inet;
  char lower[2048], relay[512]; /* "": none */
  /* l.ro_dirs points into the asker's memory: the directories travel as text (lt_sandbox_ro_check: <= 400 bytes) */
  char ro[LT_SANDBOX_MAX_RO][404];
  const char *ro_ptr[LT_SANDBOX_MAX_RO + 1];
} zreq_t;

extern char **environ;

/* ---- the maker's side ----------------------------------------------------------------- */

/* A whole message of n bytes with at most nfds fds: how many fds came, -1 for a short message, -2 at the end. */
static int recv_with_fds(int sock, void *buf, size_t n, int *fds, int nfds) {
  int k;
  ssize_t got = lt__recv_fds(sock, buf, n, fds, nfds, &k);
  return got <= 0 ? -2 : got == (ssize_t)n ? k : -1;
}

/* Reaps the jails that ended: their CPU then counts in the maker's (getrusage, /proc/PID/stat), and a jail's pid
 * stays its own until then, so the pidfd opened right after fork names the jail and no other process. */
static void reap_jails(int sfd) {
  struct signalfd_siginfo si;
  while (read(sfd, &si, sizeof si) > 0) {}
  while (waitpid(-1, NULL, WNOHANG) > 0) {}
}

static _Noreturn void serve(int sock) {
  sigset_t chld, old;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  int sfd = sigprocmask(SIG_BLOCK, &chld, &old) == 0 ? signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK) : -1;
  zreq_t *r = malloc(sizeof *r);
  if (!r || sfd < 0) _exit(1);
  for (;;) {
    struct pollfd p[2] = {{.fd = sock, .events = POLLIN}, {.fd = sfd, .events = POLLIN}};
    if (poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      _exit(1);
    }
    if (p[1].revents) reap_jails(sfd);
    if (!p[0].revents) continue;
    int fds[6];
    int rc = recv_with_fds(sock, r, sizeof *r, fds, 6);
    if (rc == -2) _exit(0); /* the process that spawned us is gone */
    if (rc != 6 || r->magic != ZMAGIC) _exit(1);
    r->lower[sizeof r->lower - 1] = r->relay[sizeof r->relay - 1] = 0;
    int nro = 0;
    for (; nro < LT_SANDBOX_MAX_RO && r->ro[nro][0]; nro++)
      r->ro[nro][sizeof r->ro[nro] - 1] = 0, r->ro_ptr[nro] = r->ro[nro];
    r->ro_ptr[nro] = NULL;
    r->l.ro_dirs = nro ? r->ro_ptr : NULL;
    lt__jail_t j = {.l = &r->l,
                    .parent_is_root = r->parent_is_root,
                    .rlimit_memory = r->rlimit_memory,
                    .filter = lt__sandbox_seccomp_prog(r->inet),
                    .relay_sock = r->relay[0] ? r->relay : NULL,
                    .lower = r->lower[0] ? r->lower : NULL,
                    .uid = r->uid,
                    .gid = r->gid};
    pid_t me = getpid(), pid = fork();
    if (pid == 0) {
      sigprocmask(SIG_SETMASK, &old, NULL); /* init and the jail wait for their own children */
      if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != me) _exit(1);
      lt__jail_start(&j, fds);
    }
    int32_t answer = pid > 0 ? pid : -errno;
    int pidfd = pid > 0 ? (int)syscall(SYS_pidfd_open, pid, 0) : -1;
    if (pid > 0 && pidfd < 0) {
      answer = -errno;
      kill(pid, SIGKILL);
    }
    for (int i = 0; i < 6; i++) close(fds[i]);
    if (lt__send_fds(sock, &answer, sizeof answer, &pidfd, pidfd >= 0) != 0) _exit(1);
    if (pidfd >= 0) close(pidfd);
  }
}

/* Before main: this process is the maker when its environment says so. */
__attribute__((constructor)) static void zygote_takeover(void) {
  const char *fd = getenv("LT__ZYGOTE_FD"), *parent = getenv("LT__ZYGOTE_PARENT");
  if (!fd || !parent) return;
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != (pid_t)atoi(parent)) _exit(1);
  prctl(PR_SET_NAME, "longtail-jails");
  serve(atoi(fd));
}

/* ---- the asker's side ----------------------------------------------------------------- */

static int zsock = -1; /* ours; -1: no maker, fork jails here */
static pid_t zowner;   /* the process that started the maker: a child forked later forks its own jails */
static pthread_mutex_t zmu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t zonce = PTHREAD_ONCE_INIT;
static sem_t zstarted;

/* The maker's parent, for PR_SET_PDEATHSIG: a thread that never ends. */
static void *keeper(void *arg) {
  int child = *(int *)arg;
  posix_spawn_file_actions_t fa;
  char fdv[32], parent[48];
  snprintf(fdv, sizeof fdv, "LT__ZYGOTE_FD=%d", 3);
  snprintf(parent, sizeof parent, "LT__ZYGOTE_PARENT=%d", (int)getpid());
  size_t n = 0;
  while (environ && environ[n]) n++;
  char **env = calloc(n + 4, sizeof *env);
  pid_t pid = -1;
  if (env && posix_spawn_file_actions_init(&fa) == 0) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
      if (strncmp(environ[i], "LT__ZYGOTE_", 11) && strncmp(environ[i], "OPENBLAS_NUM_THREADS=", 21))
        env[k++] = environ[i];
    env[k++] = fdv;
    env[k++] = parent;
    env[k++] = "OPENBLAS_NUM_THREADS=1"; /* no BLAS threads in a process that forks */
    char *argv[] = {"longtail-jails", NULL};
    if (posix_spawn_file_actions_adddup2(&fa, child, 3) != 0 ||
        posix_spawn(&pid, "/proc/self/exe", &fa, NULL, argv, env) != 0)
      pid = -1;
    posix_spawn_file_actions_destroy(&fa);
  }
  free(env);
  close(child);
  if (pid < 0) {
    close(zsock);
    zsock = -1;
  }
  sem_post(&zstarted);
  for (;;) pause();
  return NULL;
}

static void start(void) {
  int sv[2];
  static int child;
  pthread_t th;
  pthread_attr_t a;
  if (getenv("LT_SANDBOX_NO_ZYGOTE") || socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) return;
  zsock = sv[0], child = sv[1], zowner = getpid();
  sem_init(&zstarted, 0, 0);
  pthread_attr_init(&a);
  pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
  if (pthread_create(&th, &a, keeper, &child) != 0) {
    close(sv[0]), close(sv[1]);
    zsock = -1;
  } else {
    while (sem_wait(&zstarted) != 0 && errno == EINTR) {}
  }
  pthread_attr_destroy(&a);
}

int lt__zygote_fork(const lt__jail_t *j, const int fds[6], pid_t *pid, int *pidfd) {
  pthread_once(&zonce, start);
  if (zsock < 0 || getpid() != zowner) return LT_EUNSUPP; /* a forked child must not share the maker's socket */
  zreq_t *r = calloc(1, sizeof *r);
  if (!r) return lt_error_set(LT_ENOMEM, "sandbox: out of memory");
  *r = (zreq_t){.magic = ZMAGIC,
                .l = *j->l,
                .parent_is_root = j->parent_is_root,
                .rlimit_memory = j->rlimit_memory,
                .uid = j->uid,
                .gid = j->gid,
                .inet = j->l->port > 0};
  r->l.ro_dirs = NULL;
  int long_ro = 0;
  for (int i = 0; j->l->ro_dirs && j->l->ro_dirs[i]; i++)
    long_ro |=
        i >= LT_SANDBOX_MAX_RO || snprintf(r->ro[i], sizeof r->ro[i], "%s", j->l->ro_dirs[i]) >= (int)sizeof r->ro[i];
  if (long_ro || (j->lower && snprintf(r->lower, sizeof r->lower, "%s", j->lower) >= (int)sizeof r->lower) ||
      (j->relay_sock && snprintf(r->relay, sizeof r->relay, "%s", j->relay_sock) >= (int)sizeof r->relay)) {
    free(r);
    return lt_error_set(LT_ERANGE, "sandbox: a path too long for the jail maker");
  }
  int32_t answer = 0;
  *pidfd = -1;
  pthread_mutex_lock(&zmu);
  int got =
      lt__send_fds(zsock, r, sizeof *r, fds, 6) == 0 ? recv_with_fds(zsock, &answer, sizeof answer, pidfd, 1) : -2;
  pthread_mutex_unlock(&zmu);
  free(r);
  if (got < 0) return lt_error_set(LT_ESYS, "sandbox: the jail maker is gone");
  if (answer < 0 || got != 1) {
    if (*pidfd >= 0) close(*pidfd);
    return lt_error_set(LT_ESYS, "sandbox: the jail maker cannot fork: %s", strerror(answer < 0 ? -answer : EPROTO));
  }
  *pid = answer;
  return 0;
}
