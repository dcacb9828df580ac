/* The sandbox's side of a fork: namespaces, the new root, the init process and
 * the program.  Runs in a child forked from a possibly multi-threaded parent,
 * so it keeps to system calls and async-signal-safe formatting; errors go back
 * to the parent on the sync socket as 'E' + text, never to a FILE.
 *
 * Processes: the forked child J (outside the new pid namespace, inside the new
 * user and mount namespaces) forks init (pid 1 of the new pid namespace).  init
 * builds the root, says ready, waits for the job, writes its
 * files, forks the program and reaps until the program ends; its exit takes
 * every remaining process of the namespace with it (setsid or not).  init dies
 * with J (PR_SET_PDEATHSIG), so killing J kills the whole tree.
 *
 * J and init fork with _Fork, not fork: the parent's atfork handlers (libuv's
 * re-creates its signal pipe, closing the fd numbers it had) would close the
 * channels that now sit at those numbers. */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandbox/internal.h"

#define ROOT "/tmp" /* any directory will do: it is covered in our mount namespace only */

static int sync_fd = LT__JAIL_SYNC;

static _Noreturn void fail(const char *what) {
  char msg[512];
  const char *why = errno ? strerrordesc_np(errno) : "failed";
  int n = snprintf(msg, sizeof msg, "E%s: %s", what, why ? why : "error");
  if (write(sync_fd, msg, (size_t)(n < (int)sizeof msg ? n : (int)sizeof msg - 1)) < 0) _exit(1);
  _exit(1);
}

static void say(char c) {
  if (write(sync_fd, &c, 1) != 1) _exit(1);
}

static void check(int rc, const char *what) {
  if (rc != 0) fail(what);
}

static unsigned long locked_flags(const char *path) {
  struct statvfs v;
  unsigned long f = 0;
  if (statvfs(path, &v) != 0) return 0;
  if (v.f_flag & ST_NOSUID) f |= MS_NOSUID;
  if (v.f_flag & ST_NODEV) f |= MS_NODEV;
  if (v.f_flag & ST_NOEXEC) f |= MS_NOEXEC;
  if (v.f_flag & ST_NOATIME) f |= MS_NOATIME;
  if (v.f_flag & ST_NODIRATIME) f |= MS_NODIRATIME;
  if (v.f_flag & ST_RELATIME) f |= MS_RELATIME;
  return f;
}

/* Read-only, submounts included where the kernel can (mount_setattr, 5.12+). */
static void make_readonly(const char *path) {
  struct mount_attr a = {.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID};
  if (mount_setattr(AT_FDCWD, path, AT_RECURSIVE, &a, sizeof a) == 0) return;
  check(mount(NULL, path, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | locked_flags(path), NULL), path);
}

static void path2(char *out, size_t n, const char *a, const char *b) { snprintf(out, n, "%s%s", a, b); }

/* The host directories a program needs to run, read-only; nothing else of the host. */
static void bind_system(void) {
  static const char *const dirs[] = {"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc"};
  for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
    struct stat st;
    char dst[256], link[256];
    if (lstat(dirs[i], &st) != 0) continue;
    path2(dst, sizeof dst, ROOT, dirs[i]);
    if (S_ISLNK(st.st_mode)) {
      ssize_t n = readlink(dirs[i], link, sizeof link - 1);
      if (n < 0) fail(dirs[i]);
      link[n] = 0;
      check(symlink(link, dst), dst);
    } else if (S_ISDIR(st.st_mode)) {
      check(mkdir(dst, 0755), dst);
      check(mount(dirs[i], dst, NULL, MS_BIND | MS_REC, NULL), dirs[i]);
      make_readonly(dst);
    }
  }
}

static void tmpfs(const char *dir, const char *opts) {
  check(mkdir(dir, 0755) != 0 && errno != EEXIST, dir);
  check(mount("tmpfs", dir, "tmpfs", MS_NOSUID | MS_NODEV, opts), dir);
}

static void bind_devices(void) {
  static const char *const devs[] = {"null", "zero", "full", "random", "urandom"};
  char d[64], src[64], opts[64];
  tmpfs(ROOT "/dev", "size=64k,mode=0755");
  for (size_t i = 0; i < sizeof devs / sizeof devs[0]; i++) {
    snprintf(d, sizeof d, ROOT "/dev/%s", devs[i]);
    snprintf(src, sizeof src, "/dev/%s", devs[i]);
    int fd = open(d, O_CREAT | O_WRONLY | O_CLOEXEC, 0666);
    if (fd < 0) fail(d);
    close(fd);
    check(mount(src, d, NULL, MS_BIND, NULL), src);
  }
  static const char *const links[][2] = {
      {"/proc/self/fd", "fd"}, {"/proc/self/fd/0", "stdin"}, {"/proc/self/fd/1", "stdout"}, {"/proc/self/fd/2", "stderr"}};
  for (size_t i = 0; i < sizeof links / sizeof links[0]; i++) {
    snprintf(d, sizeof d, ROOT "/dev/%s", links[i][1]);
    check(symlink(links[i][0], d), d);
  }
  snprintf(opts, sizeof opts, "size=%dm,mode=1777", 16);
  tmpfs(ROOT "/dev/shm", opts);
}

/* The relay's host socket (opened as `sock_fd` before the new root covered its directory), at
 * LT__RELAY_SOCK inside: a bind mount of the socket file itself. */
static void bind_relay(int sock_fd) {
  char src[64];
  check(mkdir(ROOT "/run", 0755), "/run");
  int fd = open(ROOT LT__RELAY_SOCK, O_CREAT | O_WRONLY | O_CLOEXEC, 0666);
  if (fd < 0) fail(LT__RELAY_SOCK);
  close(fd);
  snprintf(src, sizeof src, "/proc/self/fd/%d", sock_fd);
  check(mount(src, ROOT LT__RELAY_SOCK, NULL, MS_BIND, NULL), "bind the relay's socket");
  close(sock_fd);
}

/* The host directories bound read-only (limits.ro_dirs): opened before the new root covers the host's tree (a
 * directory under /tmp is hidden by it), in this mount namespace (a bind's source must be in it), as the
 * sandbox's user: a directory it may not read is an error naming it. */
static int ro_fd[LT_SANDBOX_MAX_RO];

static void open_ro_dirs(const lt_sandbox_limits_t *l) {
  for (int i = 0; l->ro_dirs && l->ro_dirs[i]; i++)
    if ((ro_fd[i] = open(l->ro_dirs[i], O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0) fail(l->ro_dirs[i]);
}

/* Each at its own path under the new root, its parents made as needed (those in a system directory exist). */
static void bind_ro_dirs(const lt_sandbox_limits_t *l) {
  for (int i = 0; l->ro_dirs && l->ro_dirs[i]; i++) {
    char dst[512], src[64];
    path2(dst, sizeof dst, ROOT, l->ro_dirs[i]);
    for (char *p = dst + strlen(ROOT) + 1;; p++)
      if (*p == '/' || !*p) {
        char c = *p;
        *p = 0;
        check(mkdir(dst, 0755) != 0 && errno != EEXIST, dst + strlen(ROOT));
        *p = c;
        if (!c) break;
      }
    snprintf(src, sizeof src, "/proc/self/fd/%d", ro_fd[i]);
    check(mount(src, dst, NULL, MS_BIND | MS_REC, NULL), l->ro_dirs[i]);
    make_readonly(dst);
    close(ro_fd[i]);
  }
}

static void build_root(const lt_sandbox_limits_t *l, const char *relay_sock) {
  char opts[96];
  check(mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL), "make / private");
  int sock_fd = relay_sock ? open(relay_sock, O_PATH | O_CLOEXEC) : -1;
  if (relay_sock && sock_fd < 0) fail(relay_sock);
  open_ro_dirs(l);
  check(mount("tmpfs", ROOT, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755"), "new root");
  bind_system();
  bind_devices();
  if (sock_fd >= 0) bind_relay(sock_fd);
  snprintf(opts, sizeof opts, "size=%dm,mode=1777", l->file_mb);
  tmpfs(ROOT "/tmp", opts);
  snprintf(opts, sizeof opts, "size=%dm,mode=0755,uid=%d,gid=%d", l->file_mb, LT__JAIL_UID, LT__JAIL_UID);
  tmpfs(ROOT "/work", opts);
  bind_ro_dirs(l);
  /* A fresh /proc is allowed only while the host's is still visible in this mount namespace. */
  check(mkdir(ROOT "/proc", 0555), "/proc");
  check(mount("proc", ROOT "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL), "mount /proc");
  check(mkdir(ROOT "/.old", 0700), "/.old");
  check((int)syscall(SYS_pivot_root, ROOT, ROOT "/.old"), "pivot_root");
  check(chdir("/"), "chdir /");
  check(umount2("/.old", MNT_DETACH), "detach the host root");
  check(rmdir("/.old"), "rmdir /.old");
  check(mount(NULL, "/", NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL), "read-only root");
}

/* ---- init ------------------------------------------------------------------------- */

static int read_full(int fd, void *p, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, (char *)p + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    got += (size_t)r;
  }
  return 0;
}

static void report(int kind, int wstatus, const char *msg) {
  lt__jail_status_t s = {.kind = kind, .wstatus = wstatus};
  if (msg) snprintf(s.msg, sizeof s.msg, "%s", msg);
  if (write(LT__JAIL_STATUS, &s, sizeof s) != (ssize_t)sizeof s) _exit(1);
}

static _Noreturn void setup_failed(const char *what) {
  char msg[200];
  snprintf(msg, sizeof msg, "%s: %s", what, errno ? strerrordesc_np(errno) : "invalid job");
  report(LT__JAIL_SETUP_ERROR, 0, msg);
  _exit(0);
}

/* A cursor over the job's bytes (layout in jail.h). */
typedef struct {
  const char *p, *end;
} cur_t;

static int take(cur_t *c, void *out, size_t n) {
  if ((size_t)(c->end - c->p) < n) return -1;
  memcpy(out, c->p, n);
  c->p += n;
  return 0;
}

static const char *take_str(cur_t *c, uint32_t *len) {
  if (take(c, len, 4) != 0 || (size_t)(c->end - c->p) < (size_t)*len + 1 || c->p[*len] != 0) return NULL;
  const char *s = c->p;
  c->p += *len + 1;
  return s;
}

static int safe_relpath(const char *p) {
  if (!*p || *p == '/') return 0;
  for (const char *s = p; *s; s = strchr(s, '/') ? strchr(s, '/') + 1 : s + strlen(s))
    if (strncmp(s, "..", 2) == 0 && (s[2] == '/' || s[2] == 0)) return 0;
  return 1;
}

static void write_file(const char *rel, const char *data, uint64_t len, uint32_t mode) {
  char path[1024];
  if (!safe_relpath(rel) || snprintf(path, sizeof path, "/work/%s", rel) >= (int)sizeof path) {
    errno = EINVAL;
    setup_failed(rel);
  }
  for (char *s = path + 6; (s = strchr(s, '/')); s++) { /* parents */
    *s = 0;
    if (mkdir(path, 0755) != 0 && errno != EEXIST) setup_failed(path);
    *s = '/';
  }
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode ? mode : 0644);
  if (fd < 0) setup_failed(path);
  for (uint64_t off = 0; off < len;) {
    ssize_t w = write(fd, data + off, len - off);
    if (w <= 0) setup_failed(path);
    off += (uint64_t)w;
  }
  close(fd);
}

/* argv[0] resolved in the sandbox's PATH; NULL if not found there. */
static const char *resolve(const char *name, char *buf, size_t n) {
  if (strchr(name, '/')) return name;
  static const char *const dirs[] = {"/usr/local/bin", "/usr/bin", "/bin"};
  for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
    snprintf(buf, n, "%s/%s", dirs[i], name);
    if (access(buf, X_OK) == 0) return buf;
  }
  return NULL;
}

static void limit(int res, rlim_t v) {
  struct rlimit r = {v, v};
  setrlimit(res, &r);
}

static _Noreturn void program(const char *path, char **argv, char **env, const lt_sandbox_limits_t *l, int rlimit_memory,
                              const void *filter) {
  dup2(LT__JAIL_IN, 0);
  dup2(LT__JAIL_OUT, 1);
  dup2(LT__JAIL_ERR, 2);
  close_range(3, ~0U, 0);
  int cpu = l->cpu_s > 0 ? l->cpu_s : (int)l->timeout_s + 1;
  limit(RLIMIT_CPU, (rlim_t)cpu);
  limit(RLIMIT_NPROC, (rlim_t)l->nproc);
  limit(RLIMIT_FSIZE, (rlim_t)l->file_mb << 20);
  limit(RLIMIT_NOFILE, (rlim_t)l->nofile);
  limit(RLIMIT_CORE, 0);
  if (rlimit_memory) limit(RLIMIT_AS, (rlim_t)l->memory_mb << 20);
  /* No capability survives into the program, even through a file's capabilities. */
  for (int c = 0; c <= 63; c++)
    if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) != 0 && errno == EINVAL) break;
  struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
  struct __user_cap_data_struct d[2] = {{0}};
  if (syscall(SYS_capset, &h, d) != 0 || prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
      (filter && prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, filter) != 0)) {
    dprintf(2, "sandbox: cannot drop privileges: %s\n", strerrordesc_np(errno));
    _exit(126);
  }
  static const char *const base[] = {"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/work", "TMPDIR=/tmp", "LANG=C.UTF-8",
                                     "PYTHONDONTWRITEBYTECODE=1", "USER=sandbox"};
  char *envp[sizeof base / sizeof base[0] + LT__JAIL_MAX_ENV + 1];
  size_t ne = 0;
  for (; ne < sizeof base / sizeof base[0]; ne++) envp[ne] = (char *)base[ne];
  for (char **e = env; e && *e; e++) envp[ne++] = *e;
  envp[ne] = NULL;
  if (chdir("/work") == 0) execve(path ? path : argv[0], argv, envp);
  dprintf(2, "sandbox: cannot run %s: %s\n", argv[0], strerrordesc_np(errno));
  _exit(errno == ENOENT ? 127 : 126);
}

static _Noreturn void init_main(const lt_sandbox_limits_t *l, int rlimit_memory, const void *filter,
                                const char *relay_sock) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  build_root(l, relay_sock); /* here, not in the jail process: /proc must be mounted from inside the pid namespace */
  check(sethostname("sandbox", 7), "sethostname");
  if (relay_sock) check(lt__relay_inside(l->port), "the port's forwarder (loopback up, listen on 127.0.0.1)");
  say('R');
  close(LT__JAIL_SYNC);
  uint32_t hdr[2];
  if (read_full(LT__JAIL_CTL, hdr, sizeof hdr) != 0) _exit(0); /* destroyed unused */
  errno = 0;
  if (hdr[0] != LT__JAIL_MAGIC || hdr[1] > LT__JAIL_MAX_JOB) setup_failed("job header");
  char *job = malloc(hdr[1] ? hdr[1] : 1);
  if (!job || read_full(LT__JAIL_CTL, job, hdr[1]) != 0) setup_failed("job");
  close(LT__JAIL_CTL);
  cur_t c = {job, job + hdr[1]};
  uint32_t argc = 0, nfiles = 0, len;
  if (take(&c, &argc, 4) != 0 || argc == 0 || argc > 4096) setup_failed("job argv");
  char **argv = calloc(argc + 1, sizeof *argv);
  if (!argv) setup_failed("job argv");
  for (uint32_t i = 0; i < argc; i++)
    if (!(argv[i] = (char *)take_str(&c, &len))) setup_failed("job argv");
  if (take(&c, &nfiles, 4) != 0) setup_failed("job files");
  for (uint32_t i = 0; i < nfiles; i++) {
    uint32_t mode;
    uint64_t dlen;
    const char *p = take_str(&c, &len);
    if (!p || take(&c, &mode, 4) != 0 || take(&c, &dlen, 8) != 0 || (uint64_t)(c.end - c.p) < dlen)
      setup_failed("job files");
    write_file(p, c.p, dlen, mode);
    c.p += dlen;
  }
  uint32_t nenv = 0;
  if (take(&c, &nenv, 4) != 0 || nenv > LT__JAIL_MAX_ENV) setup_failed("job env");
  char **env = calloc(nenv + 1, sizeof *env);
  if (!env) setup_failed("job env");
  for (uint32_t i = 0; i < nenv; i++)
    if (!(env[i] = (char *)take_str(&c, &len))) setup_failed("job env");
  char buf[512];
  const char *path = resolve(argv[0], buf, sizeof buf);
  pid_t prog = _Fork(); /* a command not found fails in the program, as exit 127 with a message */
  if (prog == 0) program(path, argv, env, l, rlimit_memory, filter);
  close(LT__JAIL_IN);
  close(LT__JAIL_OUT);
  close(LT__JAIL_ERR);
  if (prog < 0) {
    snprintf(buf, sizeof buf, "%s: cannot fork", argv[0]);
    report(LT__JAIL_SETUP_ERROR, 0, buf);
    _exit(0);
  }
  for (;;) { /* orphans land here too: reap them until the program itself ends */
    int st;
    pid_t w = waitpid(-1, &st, 0);
    if (w == prog) {
      report(LT__JAIL_EXITED, st, NULL);
      _exit(0);
    }
    if (w < 0 && errno != EINTR) _exit(1);
  }
}

_Noreturn void lt__jail_main(const lt_sandbox_limits_t *l, int parent_is_root, int rlimit_memory, const void *filter,
                             const char *relay_sock) {
  check(unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWPID),
        "unshare (user, mount, net, ipc, uts, pid namespaces)");
  say('U');
  char go;
  if (read(LT__JAIL_SYNC, &go, 1) != 1 || go != 'G') _exit(1);
  /* Root's supplementary groups would open group-readable host files. */
  if (parent_is_root) check(setgroups(0, NULL), "setgroups");
  check(setresgid(LT__JAIL_UID, LT__JAIL_UID, LT__JAIL_UID), "setresgid");
  check(setresuid(LT__JAIL_UID, LT__JAIL_UID, LT__JAIL_UID), "setresuid");
  pid_t init = _Fork();
  if (init < 0) fail("fork init");
  if (init == 0) init_main(l, rlimit_memory, filter, relay_sock);
  close(LT__JAIL_SYNC);
  close(LT__JAIL_CTL);
  close(LT__JAIL_STATUS);
  close(LT__JAIL_IN);
  close(LT__JAIL_OUT);
  close(LT__JAIL_ERR);
  int st;
  while (waitpid(init, &st, 0) < 0 && errno == EINTR) {
  }
  _exit(0);
}
