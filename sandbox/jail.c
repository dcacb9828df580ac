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
 * A box (sandbox/image.h) is the same tree with another root and a longer life:
 * an overlayfs over the image's unpacked root, its upper layer on a tmpfs of
 * limits.file_mb mounted in the box's own namespaces; init then serves requests
 * until its control socket closes: each RUN forks a program in its own process
 * group on the pipes the request carried, each end is reported with the
 * request's id, orphans are reaped as they come.
 *
 * J and init fork with _Fork, not fork: the parent's atfork handlers (libuv's
 * re-creates its signal pipe, closing the fd numbers it had) would close the
 * channels that now sit at those numbers. */
#include <dirent.h>
#include <errno.h>
#include <poll.h>
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
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandbox/internal.h"

#ifdef __SANITIZE_ADDRESS__
#include <sanitizer/asan_interface.h>
#endif

#define AREA "/tmp" /* any directory will do: it is covered in our mount namespace only */

static int sync_fd = LT__JAIL_SYNC;
static const char *root_dir = AREA; /* the new root while it is built: AREA (a sandbox), AREA "/root" (a box) */
static int lower_fd = -1;           /* a box's image root, opened in the new mount namespace */

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

/* mkdir -p of path from its byte `from` on, its last component too when `last`; -1 (errno set) with path cut
 * after the component that could not be made, for the message. */
static int mkdirs_from(char *path, size_t from, int last) {
  for (char *s = path + from;; s++)
    if (*s == '/' || !*s) {
      char was = *s;
      if (!was && !last) return 0;
      *s = 0;
      if (mkdir(path, 0755) != 0 && errno != EEXIST) return -1;
      if (!(*s = was)) return 0;
    }
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

/* A path of the new root (made as a directory where the image has none: in a box, in its writable layer). */
static void in_root(char *out, size_t n, const char *rel, int mkdir_mode) {
  snprintf(out, n, "%s%s", root_dir, rel);
  if (mkdir_mode) check(mkdir(out, (mode_t)mkdir_mode) != 0 && errno != EEXIST, out);
}

/* The host directories a program needs to run, read-only; nothing else of the host. */
static void bind_system(void) {
  static const char *const dirs[] = {"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc"};
  for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
    struct stat st;
    char dst[256], link[256];
    if (lstat(dirs[i], &st) != 0) continue;
    in_root(dst, sizeof dst, dirs[i], 0);
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
  char dev[96], d[128], src[64];
  in_root(dev, sizeof dev, "/dev", 0755);
  tmpfs(dev, "size=64k,mode=0755");
  for (size_t i = 0; i < sizeof devs / sizeof devs[0]; i++) {
    snprintf(d, sizeof d, "%s/%s", dev, devs[i]);
    snprintf(src, sizeof src, "/dev/%s", devs[i]);
    int fd = open(d, O_CREAT | O_WRONLY | O_CLOEXEC, 0666);
    if (fd < 0) fail(d);
    close(fd);
    check(mount(src, d, NULL, MS_BIND, NULL), src);
  }
  static const char *const links[][2] = {{"/proc/self/fd", "fd"},
                                         {"/proc/self/fd/0", "stdin"},
                                         {"/proc/self/fd/1", "stdout"},
                                         {"/proc/self/fd/2", "stderr"}};
  for (size_t i = 0; i < sizeof links / sizeof links[0]; i++) {
    snprintf(d, sizeof d, "%s/%s", dev, links[i][1]);
    check(symlink(links[i][0], d), d);
  }
  snprintf(d, sizeof d, "%s/shm", dev);
  tmpfs(d, "size=16m,mode=1777");
}

/* The relay's host socket (opened as `sock_fd` before the new root covered its directory), at
 * LT__RELAY_SOCK inside: a bind mount of the socket file itself. */
static void bind_relay(int sock_fd, int box) {
  char src[64], run[96], sock[128];
  in_root(run, sizeof run, "/run", 0755);
  if (box) tmpfs(run, "size=64k,mode=0755"); /* the socket's file is not the episode's: kept out of its layer */
  in_root(sock, sizeof sock, LT__RELAY_SOCK, 0);
  int fd = open(sock, O_CREAT | O_WRONLY | O_CLOEXEC, 0666);
  if (fd < 0) fail(LT__RELAY_SOCK);
  close(fd);
  snprintf(src, sizeof src, "/proc/self/fd/%d", sock_fd);
  check(mount(src, sock, NULL, MS_BIND, NULL), "bind the relay's socket");
  close(sock_fd);
}

/* A box's root: the image's root (lower_fd) under a writable layer on a tmpfs of file_mb, which therefore bounds
 * every write of the box.  *root and *upper: O_PATH fds for the parent's host-side access. */
static void overlay_root(const lt__jail_t *j, int *root, int *upper) {
  char opts[256];
  struct stat st;
  snprintf(opts, sizeof opts, "size=%dm,mode=0755", j->l->file_mb);
  check(mount("tmpfs", AREA, "tmpfs", MS_NOSUID | MS_NODEV, opts), "the writable layer (tmpfs)");
  check(mkdir(AREA "/upper", 0755) || mkdir(AREA "/work", 0700) || mkdir(AREA "/root", 0755), "the writable layer");
  /* The overlay's root directory takes its upper directory's mode: make it the image's. */
  check(fstat(lower_fd, &st) || chmod(AREA "/upper", st.st_mode & 07777), "the image's root");
  snprintf(opts, sizeof opts, "lowerdir=/proc/self/fd/%d,upperdir=" AREA "/upper,workdir=" AREA "/work,userxattr",
           lower_fd);
  check(mount("overlay", AREA "/root", "overlay", MS_NOSUID | MS_NODEV, opts), "overlayfs in the user namespace");
  close(lower_fd);
  if ((*root = open(AREA "/root", O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0 ||
      (*upper = open(AREA "/upper", O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0)
    fail("open the new root");
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
    snprintf(dst, sizeof dst, "%s%s", root_dir, l->ro_dirs[i]);
    check(mkdirs_from(dst, strlen(root_dir) + 1, 1), dst + strlen(root_dir));
    snprintf(src, sizeof src, "/proc/self/fd/%d", ro_fd[i]);
    check(mount(src, dst, NULL, MS_BIND | MS_REC, NULL), l->ro_dirs[i]);
    make_readonly(dst);
    close(ro_fd[i]);
  }
}

static void build_root(const lt__jail_t *j, int *root, int *upper) {
  char opts[96], d[96];
  check(mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL), "make / private");
  int sock_fd = j->relay_sock ? open(j->relay_sock, O_PATH | O_CLOEXEC) : -1;
  if (j->relay_sock && sock_fd < 0) fail(j->relay_sock);
  open_ro_dirs(j->l);
  if (j->lower) {
    root_dir = AREA "/root";
    overlay_root(j, root, upper);
  } else {
    check(mount("tmpfs", AREA, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755"), "new root");
    bind_system();
    /* A box's /tmp and working directory are its image's, in its writable layer. */
    snprintf(opts, sizeof opts, "size=%dm,mode=1777", j->l->file_mb);
    tmpfs(AREA "/tmp", opts);
    snprintf(opts, sizeof opts, "size=%dm,mode=0755,uid=%d,gid=%d", j->l->file_mb, j->uid, j->gid);
    tmpfs(AREA "/work", opts);
  }
  bind_ro_dirs(j->l);
  bind_devices();
  if (sock_fd >= 0) bind_relay(sock_fd, j->lower != NULL);
  /* A fresh /proc is allowed only while the host's is still visible in this mount namespace. */
  in_root(d, sizeof d, "/proc", 0555);
  check(mount("proc", d, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL), "mount /proc");
  /* pivot_root(".", "."): the old root lands on top of the new one, and is detached from there. */
  check(chdir(root_dir), "chdir to the new root");
  check((int)syscall(SYS_pivot_root, ".", "."), "pivot_root");
  check(umount2(".", MNT_DETACH), "detach the host root");
  check(chdir("/"), "chdir /");
  if (!j->lower)
    check(mount(NULL, "/", NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL), "read-only root");
}

/* 'R', with a box's root and writable layer for the parent. */
static void say_ready(int root, int upper) {
  char c = 'R';
  int fds[2] = {root, upper};
  if (lt__send_fds(sync_fd, &c, 1, fds, root >= 0 ? 2 : 0) != 0) _exit(1);
  if (root >= 0) close(root), close(upper);
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

static void report(int kind, uint32_t id, int wstatus, const char *msg) {
  lt__jail_status_t s = {.kind = kind, .id = id, .wstatus = wstatus};
  if (msg) snprintf(s.msg, sizeof s.msg, "%s", msg);
  if (write(LT__JAIL_STATUS, &s, sizeof s) != (ssize_t)sizeof s) _exit(1);
}

/* A job that could not start: why, for its SETUP_ERROR. */
typedef struct {
  char msg[200];
} why_t;

static int bad(why_t *w, const char *what) {
  snprintf(w->msg, sizeof w->msg, "%s: %s", what, errno ? strerrordesc_np(errno) : "invalid job");
  return -1;
}

/* A cursor over the job's bytes (layout in internal.h). */
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

/* A job's file, relative to its working directory: created in a sandbox's fresh /work, replaced in a box. */
static int write_file(const char *cwd, const char *rel, const char *data, uint64_t len, uint32_t mode, int box,
                      why_t *w) {
  char path[1024];
  errno = 0;
  if (!safe_relpath(rel) || snprintf(path, sizeof path, "%s/%s", cwd, rel) >= (int)sizeof path)
    return errno = EINVAL, bad(w, rel);
  if (mkdirs_from(path, strlen(cwd) + 1, 0) != 0) return bad(w, path); /* its parents */
  int fd = open(path, O_WRONLY | O_CREAT | (box ? O_TRUNC : O_EXCL) | O_NOFOLLOW | O_CLOEXEC, mode ? mode : 0644);
  if (fd < 0) return bad(w, path);
  for (uint64_t off = 0; off < len;) {
    ssize_t n = write(fd, data + off, len - off);
    if (n <= 0) return close(fd), bad(w, path);
    off += (uint64_t)n;
  }
  close(fd);
  return 0;
}

/* argv[0] in the PATH of env (a box's), or the sandbox's; NULL if not found. */
static const char *resolve(const char *name, char **env, int box, char *buf, size_t n) {
  if (strchr(name, '/')) return name;
  const char *path = "/usr/local/bin:/usr/bin:/bin";
  if (box) {
    path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
    for (char **e = env; e && *e; e++)
      if (strncmp(*e, "PATH=", 5) == 0) path = *e + 5;
  }
  for (const char *p = path; *p;) {
    size_t len = strcspn(p, ":");
    snprintf(buf, n, "%.*s/%s", (int)len, len ? p : ".", name);
    if (access(buf, X_OK) == 0) return buf;
    p += len + (p[len] == ':');
  }
  return NULL;
}

static void limit(int res, rlim_t v) {
  struct rlimit r = {v, v};
  setrlimit(res, &r);
}

typedef struct {
  char **argv, **env;
  const char *cwd;
  char *body; /* what the strings point into */
} job_t;

static _Noreturn void program(const lt__jail_t *j, const job_t *job, const int fds[3], int box) {
  const lt_sandbox_limits_t *l = j->l;
  dup2(fds[0], 0);
  dup2(fds[1], 1);
  dup2(fds[2], 2);
  close_range(3, ~0U, 0);
  if (box) { /* its own process group, for the deadline and lt_box_proc_kill; the signals init blocked */
    setpgid(0, 0);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
  }
  int cpu = l->cpu_s > 0 ? l->cpu_s : (int)l->timeout_s + 1;
  limit(RLIMIT_CPU, (rlim_t)cpu);
  limit(RLIMIT_NPROC, (rlim_t)l->nproc);
  limit(RLIMIT_FSIZE, (rlim_t)l->file_mb << 20);
  limit(RLIMIT_NOFILE, (rlim_t)l->nofile);
  limit(RLIMIT_CORE, 0);
  if (j->rlimit_memory) limit(RLIMIT_AS, (rlim_t)l->memory_mb << 20);
  /* No capability survives into the program, even through a file's capabilities or uid 0. */
  for (int c = 0; c <= 63; c++)
    if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) != 0 && errno == EINVAL) break;
  struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
  struct __user_cap_data_struct d[2] = {{0}};
  if (syscall(SYS_capset, &h, d) != 0 || prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
      (j->filter && prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, j->filter) != 0)) {
    dprintf(2, "sandbox: cannot drop privileges: %s\n", strerrordesc_np(errno));
    _exit(126);
  }
  static const char *const base[] = {"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/work",  "TMPDIR=/tmp", "LANG=C.UTF-8",
                                     "PYTHONDONTWRITEBYTECODE=1",         "USER=sandbox"};
  char *envp[sizeof base / sizeof base[0] + LT__JAIL_MAX_ENV + 1];
  size_t ne = 0;
  for (; !box && ne < sizeof base / sizeof base[0]; ne++) envp[ne] = (char *)base[ne];
  for (char **e = job->env; e && *e; e++) envp[ne++] = *e;
  envp[ne] = NULL;
  char buf[512];
  const char *path = resolve(job->argv[0], job->env, box, buf, sizeof buf);
  const char *cwd = job->cwd[0] ? job->cwd : "/work";
  if (chdir(cwd) != 0) {
    dprintf(2, "sandbox: cannot enter the working directory %s: %s\n", cwd, strerrordesc_np(errno));
    _exit(126);
  }
  execve(path ? path : job->argv[0], job->argv, envp);
  dprintf(2, "sandbox: cannot run %s: %s\n", job->argv[0], strerrordesc_np(errno));
  _exit(errno == ENOENT ? 127 : 126);
}

/* Reads a request's header (with the fds a box's RUN carries) and its job; 0 at the control socket's end. */
static int recv_req(lt__jail_req_t *r, int fds[3], int *nfds) {
  ssize_t n = lt__recv_fds(LT__JAIL_CTL, r, sizeof *r, fds, 3, nfds);
  if (n <= 0) return 0;
  if ((size_t)n < sizeof *r && read_full(LT__JAIL_CTL, (char *)r + n, sizeof *r - (size_t)n) != 0) return 0;
  if (r->magic != LT__JAIL_MAGIC || r->len > LT__JAIL_MAX_JOB) _exit(1); /* only the parent writes here */
  return 1;
}

/* Decodes a RUN's body and writes its files; -1 with w set. */
static int parse_job(char *body, uint32_t len, int box, job_t *job, why_t *w) {
  cur_t c = {body, body + len};
  uint32_t argc = 0, nfiles = 0, nenv = 0, n;
  errno = 0;
  if (take(&c, &argc, 4) != 0 || argc == 0 || argc > 4096 || !(job->argv = calloc(argc + 1, sizeof *job->argv)))
    return bad(w, "job argv");
  for (uint32_t i = 0; i < argc; i++)
    if (!(job->argv[i] = (char *)take_str(&c, &n))) return bad(w, "job argv");
  if (take(&c, &nfiles, 4) != 0) return bad(w, "job files");
  const char *files = c.p;
  for (uint32_t i = 0; i < nfiles; i++) { /* skipped here, written once the working directory is known */
    uint32_t mode;
    uint64_t dlen;
    if (!take_str(&c, &n) || take(&c, &mode, 4) != 0 || take(&c, &dlen, 8) != 0 || (uint64_t)(c.end - c.p) < dlen)
      return bad(w, "job files");
    c.p += dlen;
  }
  if (take(&c, &nenv, 4) != 0 || nenv > LT__JAIL_MAX_ENV || !(job->env = calloc(nenv + 1, sizeof *job->env)))
    return bad(w, "job env");
  for (uint32_t i = 0; i < nenv; i++)
    if (!(job->env[i] = (char *)take_str(&c, &n))) return bad(w, "job env");
  if (!(job->cwd = take_str(&c, &n))) return bad(w, "job cwd");
  const char *cwd = job->cwd[0] ? job->cwd : "/work";
  if (box) { /* a box's working directory is made where the image has none, as docker makes WorkingDir */
    char d[1024];
    snprintf(d, sizeof d, "%s", cwd);
    if (mkdirs_from(d, 1, 1) != 0) return bad(w, d);
  }
  cur_t f = {files, c.end};
  for (uint32_t i = 0; i < nfiles; i++) {
    uint32_t mode = 0;
    uint64_t dlen = 0;
    const char *p = take_str(&f, &n);
    take(&f, &mode, 4);
    take(&f, &dlen, 8);
    if (write_file(cwd, p, f.p, dlen, mode, box, w) != 0) return -1;
    f.p += dlen;
  }
  return 0;
}

static void job_free(job_t *job) {
  free(job->argv);
  free(job->env);
  free(job->body);
  memset(job, 0, sizeof *job);
}

/* The program is started the way posix_spawn starts one: a child sharing init's memory (CLONE_VM) on a stack of its
 * own, init suspended until it has exec'd or died (CLONE_VFORK).  A fork would copy init's page tables, which are
 * those of the process that made the box (a worker holding a model: hundreds of MB mapped), for every command. */
typedef struct {
  const lt__jail_t *j;
  const job_t *job;
  const int *fds;
  int box;
} spawn_t;

static int spawn_entry(void *arg) {
  const spawn_t *s = arg;
  program(s->j, s->job, s->fds, s->box);
}

static pid_t spawn(const lt__jail_t *j, const job_t *job, const int fds[3], int box) {
  static _Alignas(16) char stack[256 << 10]; /* the suspended init's: one child at a time uses it */
  spawn_t s = {j, job, fds, box};
#ifdef __SANITIZE_ADDRESS__
  __asan_unpoison_memory_region(stack, sizeof stack); /* the last child's frames left their redzones poisoned */
#endif
  return clone(spawn_entry, stack + sizeof stack, CLONE_VM | CLONE_VFORK | SIGCHLD, &s);
}

/* Reads and starts a RUN: the program's pid, or -1 (its SETUP_ERROR reported; the fds closed either way). */
static pid_t run(const lt__jail_t *j, const lt__jail_req_t *r, const int fds[3], int box) {
  job_t job = {0};
  why_t w;
  pid_t pid = -1;
  errno = 0;
  job.body = malloc(r->len ? r->len : 1);
  if (!job.body || read_full(LT__JAIL_CTL, job.body, r->len) != 0) _exit(0); /* the parent is gone mid-request */
  if (parse_job(job.body, r->len, box, &job, &w) == 0) {
    pid = spawn(j, &job, fds, box); /* a command not found fails in the program, as exit 127 with a message */
    if (pid < 0) bad(&w, job.argv[0]);
  }
  if (pid < 0) report(LT__JAIL_SETUP_ERROR, r->id, 0, w.msg);
  else if (box) report(LT__JAIL_STARTED, r->id, 0, NULL);
  job_free(&job);
  return pid;
}

/* Every process below `top` (not top itself), from the box's /proc. */
static void kill_below(pid_t top, int sig) {
  enum { MAX = 65536 };
  static pid_t pid[MAX], ppid[MAX];
  static char mark[MAX];
  int n = 0;
  DIR *d = opendir("/proc");
  for (struct dirent *e; d && n < MAX && (e = readdir(d));) {
    char p[64], buf[512];
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    snprintf(p, sizeof p, "/proc/%s/stat", e->d_name);
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    ssize_t k = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
    if (fd >= 0) close(fd);
    if (k <= 0) continue;
    buf[k] = 0;
    char *rp = strrchr(buf, ')'); /* "pid (comm) state ppid": comm may hold anything */
    int pp;
    if (!rp || sscanf(rp + 1, " %*c %d", &pp) != 1) continue;
    pid[n] = atoi(e->d_name), ppid[n] = pp, mark[n] = pid[n] == top;
    n++;
  }
  if (d) closedir(d);
  for (int changed = 1; changed;) {
    changed = 0;
    for (int i = 0; i < n; i++)
      for (int k = 0; !mark[i] && k < n; k++)
        if (mark[k] && ppid[i] == pid[k]) mark[i] = changed = 1;
  }
  for (int i = 0; i < n; i++)
    if (mark[i] && pid[i] != top) kill(pid[i], sig);
}

typedef struct {
  uint32_t id, flags;
  pid_t pid;
} running_t;

/* A box's init: requests and ends until the control socket closes (the box destroyed). */
static _Noreturn void serve(const lt__jail_t *j) {
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  sigprocmask(SIG_BLOCK, &chld, NULL);
  int sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sfd < 0) _exit(1);
  running_t *runs = NULL;
  int nruns = 0, cap = 0;
  for (;;) {
    struct pollfd p[2] = {{.fd = LT__JAIL_CTL, .events = POLLIN}, {.fd = sfd, .events = POLLIN}};
    if (poll(p, 2, -1) < 0 && errno != EINTR) _exit(1);
    if (p[1].revents) {
      struct signalfd_siginfo si;
      while (read(sfd, &si, sizeof si) > 0) {}
      int st;
      for (pid_t w; (w = waitpid(-1, &st, WNOHANG)) > 0;) /* orphans land here too */
        for (int i = 0; i < nruns; i++) {
          if (runs[i].pid != w) continue;
          if (runs[i].flags & LT__REQ_ONESHOT) kill(-w, SIGKILL); /* what it left in its group */
          report(LT__JAIL_EXITED, runs[i].id, st, NULL);
          runs[i] = runs[--nruns];
          break;
        }
    }
    if (!p[0].revents) continue;
    lt__jail_req_t r;
    int fds[3] = {-1, -1, -1}, nfds = 0;
    if (!recv_req(&r, fds, &nfds)) _exit(0);
    if (r.op == LT__REQ_KILL) {
      for (int i = 0; i < nruns; i++)
        if (runs[i].id == r.id) {
          if (r.flags & LT__REQ_DESCENDANTS) kill_below(runs[i].pid, r.sig);
          else kill(-runs[i].pid, r.sig);
        }
      continue;
    }
    if (nfds != 3) _exit(1);
    if (nruns == cap) {
      cap = cap ? cap * 2 : 16;
      if (!(runs = realloc(runs, (size_t)cap * sizeof *runs))) _exit(1);
    }
    pid_t pid = run(j, &r, fds, 1);
    for (int i = 0; i < 3; i++) close(fds[i]);
    if (pid > 0) runs[nruns++] = (running_t){r.id, r.flags, pid};
  }
}

static _Noreturn void init_main(const lt__jail_t *j) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  int root = -1, upper = -1;
  build_root(j, &root, &upper); /* here, not in the jail process: /proc must be mounted from inside the pid namespace */
  check(sethostname("sandbox", 7), "sethostname");
  if (j->relay_sock) check(lt__relay_inside(j->l->port), "the port's forwarder (loopback up, listen on 127.0.0.1)");
  say_ready(root, upper);
  close(LT__JAIL_SYNC);
  if (j->lower) serve(j);
  lt__jail_req_t r;
  int fds[3], nfds;
  if (!recv_req(&r, fds, &nfds)) _exit(0); /* destroyed unused */
  static const int own[3] = {LT__JAIL_IN, LT__JAIL_OUT, LT__JAIL_ERR};
  pid_t prog = run(j, &r, own, 0);
  close(LT__JAIL_CTL);
  close(LT__JAIL_IN);
  close(LT__JAIL_OUT);
  close(LT__JAIL_ERR);
  if (prog < 0) _exit(0);
  for (;;) { /* orphans land here too: reap them until the program itself ends */
    int st;
    pid_t w = waitpid(-1, &st, 0);
    if (w == prog) {
      report(LT__JAIL_EXITED, r.id, st, NULL);
      _exit(0);
    }
    if (w < 0 && errno != EINTR) _exit(1);
  }
}

_Noreturn void lt__jail_main(const lt__jail_t *j) {
  check(unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWPID),
        "unshare (user, mount, net, ipc, uts, pid namespaces)");
  say('U');
  char go;
  if (read(LT__JAIL_SYNC, &go, 1) != 1 || go != 'G') _exit(1);
  /* Root's supplementary groups would open group-readable host files. */
  if (j->parent_is_root) check(setgroups(0, NULL), "setgroups");
  /* The image root is opened here, in the new mount namespace (overlayfs takes its lower directories from the
   * mounter's namespace only) and before the ids change: the cache's directories are the host user's, and need not
   * be searchable by the box's one id.  init mounts it through /proc/self/fd. */
  if (j->lower && (lower_fd = open(j->lower, O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0) fail(j->lower);
  check(setresgid((gid_t)j->gid, (gid_t)j->gid, (gid_t)j->gid), "setresgid");
  check(setresuid((uid_t)j->uid, (uid_t)j->uid, (uid_t)j->uid), "setresuid");
  pid_t init = _Fork();
  if (init < 0) fail("fork init");
  if (init == 0) init_main(j);
  close(LT__JAIL_SYNC);
  close(LT__JAIL_CTL);
  close(LT__JAIL_STATUS);
  close(LT__JAIL_IN);
  close(LT__JAIL_OUT);
  close(LT__JAIL_ERR);
  if (lower_fd >= 0) close(lower_fd);
  int st;
  while (waitpid(init, &st, 0) < 0 && errno == EINTR) {}
  _exit(0);
}
