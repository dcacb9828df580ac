/* The parent's side of a sandbox: making one warm (fork, id maps, cgroup),
 * sending it a job, feeding stdin, collecting capped output and enforcing the
 * deadline by killing the tree. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandbox/internal.h"
#include "util/buf.h"
#include "util/error.h"
#include "util/time.h"

void lt_sandbox_limits_default(lt_sandbox_limits_t *l) {
  *l = (lt_sandbox_limits_t){.timeout_s = 10,
                             .memory_mb = 512,
                             .cpu_s = 0,
                             .nproc = 64,
                             .file_mb = 64,
                             .nofile = 256,
                             .output_bytes = 1 << 20,
                             .max_conns = 16};
}

void lt_sandbox_limits_from_config(const lt_config_t *cfg, lt_sandbox_limits_t *l) {
  lt_sandbox_limits_default(l);
  l->timeout_s = lt_config_num(cfg, "sandbox.timeout_s");
  l->memory_mb = (int)lt_config_int(cfg, "sandbox.memory_mb");
  l->cpu_s = (int)lt_config_int(cfg, "sandbox.cpu_s");
  l->nproc = (int)lt_config_int(cfg, "sandbox.nproc");
  l->file_mb = (int)lt_config_int(cfg, "sandbox.file_mb");
  l->nofile = (int)lt_config_int(cfg, "sandbox.nofile");
  l->output_bytes = (size_t)lt_config_int(cfg, "sandbox.output_bytes");
  l->max_conns = (int)lt_config_int(cfg, "sandbox.max_connections");
}

void lt_sandbox_result_free(lt_sandbox_result_t *r) {
  free(r->out);
  free(r->err);
  memset(r, 0, sizeof *r);
}

/* Is path `top` or below it? */
static int exec_is_under(const char *path, const char *top) {
  size_t n = strlen(top);
  return !strncmp(path, top, n) && (path[n] == 0 || path[n] == '/');
}

int lt_sandbox_ro_check(const char *d) {
  if (d[0] != '/' || strlen(d) > 400)
    return lt_error_set(LT_EINVAL, "%s: a read-only directory is an absolute path of up to 400 bytes", d);
  if (!d[1] || exec_is_under(d, "/proc") || exec_is_under(d, "/dev"))
    return lt_error_set(LT_EINVAL, "%s: a read-only directory is neither / nor under /proc or /dev (the sandbox's own)",
                        d);
  return 0;
}

static void close_fd(int *fd) {
  if (*fd >= 0) close(*fd);
  *fd = -1;
}

/* SIGKILL to the jail: init dies with it, and every process of the namespace with init. */
static void kill_jail(lt_sandbox_t *sb) {
  if (sb->pidfd >= 0) syscall(SYS_pidfd_send_signal, sb->pidfd, SIGKILL, NULL, 0);
  else if (sb->pid > 0) kill(sb->pid, SIGKILL);
}

static void reap(lt_sandbox_t *sb) {
  kill_jail(sb);
  if (sb->pidfd >= 0) { /* not our child: its pidfd turns readable when it has ended */
    struct pollfd p = {.fd = sb->pidfd, .events = POLLIN};
    while (poll(&p, 1, -1) < 0 && errno == EINTR) {}
  } else if (sb->pid > 0) {
    while (waitpid(sb->pid, NULL, 0) < 0 && errno == EINTR) {}
  }
  close_fd(&sb->pidfd);
  close_fd(&sb->ctl);
  close_fd(&sb->status);
  close_fd(&sb->in);
  close_fd(&sb->out);
  close_fd(&sb->err);
  close_fd(&sb->root_fd);
  close_fd(&sb->upper_fd);
  lt__cgroup_remove(&sb->cg);
  lt__relay_stop(sb->relay);
  free(sb);
}

void lt_sandbox_destroy(lt_sandbox_t *sb) {
  if (sb) reap(sb);
}

static int write_map(pid_t pid, const char *file, const char *text) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/%s", (int)pid, file);
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = write(fd, text, strlen(text));
  close(fd);
  return n == (ssize_t)strlen(text) ? 0 : -1;
}

/* The channels go to the numbers the jail expects, whatever numbers they had. */
_Noreturn void lt__jail_start(const lt__jail_t *j, const int fds[6]) {
  int high[6];
  for (int i = 0; i < 6; i++) high[i] = fcntl(fds[i], F_DUPFD, 64);
  for (int i = 0; i < 6; i++) {
    if (high[i] < 0 || dup2(high[i], LT__JAIL_CTL + i) < 0) _exit(1);
  }
  close_range(LT__JAIL_CTL + 6, ~0U, 0);
  lt__jail_main(j);
}

/* One byte from the jail (with up to two fds: a box's 'R'), or its 'E' message; waits at most 10 s. */
static int expect(int fd, char want, pid_t pid, int *fds) {
  struct pollfd p = {.fd = fd, .events = POLLIN};
  char buf[512];
  int got[2], ngot = 0;
  int r = poll(&p, 1, 10000);
  ssize_t n = r > 0 ? lt__recv_fds(fd, buf, sizeof buf - 1, got, 2, &ngot) : -1;
  if (fds && ngot == 2) memcpy(fds, got, sizeof got);
  else
    for (int i = 0; i < ngot; i++) close(got[i]);
  if (n > 0 && buf[0] == want) return 0;
  if (n > 1 && buf[0] == 'E') {
    buf[n] = 0;
    return lt_error_set(LT_EUNSUPP, "sandbox: %s", buf + 1);
  }
  return lt_error_set(LT_ESYS, "sandbox: the jail process %d %s", (int)pid,
                      r == 0 ? "did not answer in 10 s" : "died while starting");
}

int lt__sandbox_start(const lt_sandbox_limits_t *l, const char *lower, int uid, int gid, lt_sandbox_t **out) {
  *out = NULL;
  lt_sandbox_t *sb = calloc(1, sizeof *sb);
  if (!sb) return lt_error_set(LT_ENOMEM, "sandbox: out of memory");
  sb->lim = *l;
  sb->ctl = sb->status = sb->in = sb->out = sb->err = sb->root_fd = sb->upper_fd = sb->pidfd = -1;
  for (int i = 0; l->ro_dirs && l->ro_dirs[i]; i++) {
    int rc = i < LT_SANDBOX_MAX_RO
                 ? lt_sandbox_ro_check(l->ro_dirs[i])
                 : lt_error_set(LT_EINVAL, "sandbox: at most %d read-only directories", LT_SANDBOX_MAX_RO);
    if (rc < 0) {
      free(sb);
      return rc;
    }
  }
  const void *filter = lt__sandbox_seccomp_prog(l->port > 0);
  if (l->port > 0) {
    int rc = l->port > 65535 ? lt_error_set(LT_EINVAL, "sandbox: port %d out of range", l->port)
                             : lt__relay_start(l->port, l->max_conns, &sb->relay);
    if (rc < 0) {
      free(sb);
      return rc;
    }
  }
  lt__cgroup_create(&sb->cg, l);
  /* Sockets where the parent writes (MSG_NOSIGNAL: a dead jail is an error, not SIGPIPE), pipes where it reads. */
  int ctl[2], sync[2], st[2], in[2], o[2], e[2];
  int *pairs[] = {ctl, sync, st, in, o, e};
  const int is_socket[] = {1, 1, 0, 1, 0, 0};
  int made = 0;
  while (made < 6 && (is_socket[made] ? socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pairs[made])
                                      : pipe2(pairs[made], O_CLOEXEC)) == 0)
    made++;
  if (made < 6) {
    int err = errno;
    for (int i = 0; i < made; i++) close(pairs[i][0]), close(pairs[i][1]);
    reap(sb);
    return lt_error_set(lt_error_from_errno(err), "sandbox: cannot make its channels: %s", strerror(err));
  }
  int is_root = geteuid() == 0, box_fds[2] = {-1, -1};
  lt__jail_t j = {.l = l,
                  .parent_is_root = is_root,
                  .rlimit_memory = sb->cg.version == 0,
                  .filter = filter,
                  .relay_sock = sb->relay ? lt__relay_path(sb->relay) : NULL,
                  .lower = lower,
                  .uid = uid,
                  .gid = gid};
  int child_fds[] = {ctl[1], sync[1], st[1], in[1], o[1], e[1]};
  pid_t pid = -1;
  int zrc = lt__zygote_fork(&j, child_fds, &pid, &sb->pidfd);
  if (zrc == LT_EUNSUPP) { /* no jail maker: fork it here */
    pid_t parent = getpid();
    pid = fork();
    if (pid == 0) {
      /* Here the jail dies with the thread that made it; a parent gone before this line is caught by getppid. */
      if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) _exit(1);
      lt__jail_start(&j, child_fds);
    }
  } else if (zrc < 0) {
    pid = -1;
    errno = 0;
  }
  int err = errno;
  sb->pid = pid;
  sb->ctl = ctl[0], sb->status = st[0], sb->in = in[0], sb->out = o[0], sb->err = e[0];
  close(ctl[1]), close(sync[1]), close(st[1]), close(in[1]), close(o[1]), close(e[1]);
  int rc = 0;
  if (zrc < 0 && zrc != LT_EUNSUPP) {
    rc = zrc;
  } else if (pid < 0) {
    rc = lt_error_set(LT_ESYS, "sandbox: fork: %s", strerror(err));
  } else if ((rc = expect(sync[0], 'U', pid, NULL)) == 0) {
    /* The one inside id is an unprivileged host id: nobody for root, else our own. */
    char map[64];
    snprintf(map, sizeof map, "%d %u 1\n", uid, lt__box_host_uid());
    int ok = write_map(pid, "uid_map", map) == 0;
    snprintf(map, sizeof map, "%d %u 1\n", gid, lt__box_host_gid());
    ok = ok && (is_root || write_map(pid, "setgroups", "deny") == 0) && write_map(pid, "gid_map", map) == 0;
    if (!ok) rc = lt_error_set(LT_EUNSUPP, "sandbox: cannot write the user namespace's id maps: %s", strerror(errno));
    else if (lt__cgroup_attach(&sb->cg, pid) != 0)
      rc = lt_error_set(LT_ESYS, "sandbox: cannot join cgroup %s: %s", sb->cg.mem, strerror(errno));
    else if (write(sync[0], "G", 1) != 1) rc = lt_error_set(LT_ESYS, "sandbox: the jail process died while starting");
    else rc = expect(sync[0], 'R', pid, lower ? box_fds : NULL);
    sb->root_fd = box_fds[0], sb->upper_fd = box_fds[1];
    if (rc == 0 && lower && sb->upper_fd < 0) rc = lt_error_set(LT_ESYS, "sandbox: the box's root did not arrive");
  }
  close(sync[0]);
  if (rc < 0) {
    reap(sb);
    return rc;
  }
  *out = sb;
  return 0;
}

int lt_sandbox_create(const lt_sandbox_limits_t *l, lt_sandbox_t **out) {
  return lt__sandbox_start(l, NULL, LT__JAIL_UID, LT__JAIL_UID, out);
}

int lt__job_encode(const lt_sandbox_job_t *job, const char *const *env, uint32_t id, uint32_t flags, lt_buf_t *b) {
  lt__jail_req_t hdr = {.magic = LT__JAIL_MAGIC, .op = LT__REQ_RUN, .id = id, .flags = flags};
  uint32_t argc = 0;
  if (!env) env = job->env;
  while (job->argv && job->argv[argc]) argc++;
  if (argc == 0) return lt_error_set(LT_EINVAL, "sandbox: empty command");
  lt_buf_append(b, &hdr, sizeof hdr);
  lt_buf_append(b, &argc, 4);
  for (uint32_t i = 0; i < argc; i++) {
    uint32_t n = (uint32_t)strlen(job->argv[i]);
    lt_buf_append(b, &n, 4);
    lt_buf_append(b, job->argv[i], n + 1);
  }
  uint32_t nf = (uint32_t)job->nfiles;
  lt_buf_append(b, &nf, 4);
  for (int i = 0; i < job->nfiles; i++) {
    const lt_sandbox_file_t *f = &job->files[i];
    uint32_t n = (uint32_t)strlen(f->path), mode = (uint32_t)f->mode;
    uint64_t len = f->len;
    lt_buf_append(b, &n, 4);
    lt_buf_append(b, f->path, n + 1);
    lt_buf_append(b, &mode, 4);
    lt_buf_append(b, &len, 8);
    lt_buf_append(b, f->data, f->len);
  }
  uint32_t nenv = 0;
  while (env && env[nenv]) nenv++;
  if (nenv > LT__JAIL_MAX_ENV)
    return lt_error_set(LT_EINVAL, "sandbox: %u environment variables (at most %d)", nenv, LT__JAIL_MAX_ENV);
  lt_buf_append(b, &nenv, 4);
  for (uint32_t i = 0; i < nenv; i++) {
    uint32_t n = (uint32_t)strlen(env[i]);
    if (!strchr(env[i], '='))
      return lt_error_set(LT_EINVAL, "sandbox: environment entry '%s' is not NAME=VALUE", env[i]);
    lt_buf_append(b, &n, 4);
    lt_buf_append(b, env[i], n + 1);
  }
  const char *cwd = job->cwd ? job->cwd : "";
  if (*cwd && *cwd != '/') return lt_error_set(LT_EINVAL, "sandbox: working directory '%s' is not absolute", cwd);
  uint32_t n = (uint32_t)strlen(cwd);
  lt_buf_append(b, &n, 4);
  lt_buf_append(b, cwd, n + 1);
  if (lt_buf_ok(b) < 0) return lt_error_set(LT_ENOMEM, "sandbox: out of memory");
  if (b->len - sizeof hdr > LT__JAIL_MAX_JOB)
    return lt_error_set(LT_ERANGE, "sandbox: job over %u bytes", LT__JAIL_MAX_JOB);
  hdr.len = (uint32_t)(b->len - sizeof hdr);
  memcpy(b->data, &hdr, sizeof hdr);
  return 0;
}

typedef struct {
  lt_buf_t b;
  size_t cap;
  int truncated;
} capture_t;

/* Reads what is there; returns 1 at EOF or error. */
static int drain(int fd, capture_t *c) {
  char tmp[65536];
  ssize_t n = read(fd, tmp, sizeof tmp);
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return 0;
  if (n <= 0) return 1;
  size_t keep = c->b.len < c->cap ? c->cap - c->b.len : 0;
  if ((size_t)n > keep) c->truncated = 1;
  lt_buf_append(&c->b, tmp, (size_t)n < keep ? (size_t)n : keep);
  return 0;
}

int lt__io_run(lt__io_t *io, lt_sandbox_result_t *res, lt__jail_status_t *st) {
  memset(st, 0, sizeof *st);
  if (io->in >= 0) fcntl(io->in, F_SETFL, O_NONBLOCK);
  size_t in_off = 0, in_len = io->stdin_data ? io->stdin_len : 0;
  if (in_len == 0) close_fd(&io->in);
  capture_t out = {.cap = io->cap}, err = {.cap = io->cap};
  int killed = 0, done = 0;
  double grace_end = 0; /* after the program ends or is killed: how long to wait for the pipes' EOF */
  while (io->out >= 0 || io->err >= 0 || (io->status >= 0 && !done)) {
    double now = lt_time_mono_s();
    if (!killed && !done && now >= io->deadline) {
      io->kill(io->ud);
      killed = res->timed_out = 1;
      res->wall_ms = (now - io->t0) * 1e3;
      grace_end = now + 2;
    }
    if (grace_end > 0 && now >= grace_end) break; /* descendants cannot outlive init; this is a guard */
    struct pollfd p[4];
    int np = 0;
    int *fds[] = {&io->out, &io->err, done ? NULL : &io->status, &io->in};
    for (int i = 0; i < 4; i++)
      if (fds[i] && *fds[i] >= 0) p[np++] = (struct pollfd){.fd = *fds[i], .events = i == 3 ? POLLOUT : POLLIN};
    double until = grace_end > 0 ? grace_end : io->deadline;
    int ms = (int)ceil((until - now) * 1e3);
    if (poll(p, (nfds_t)np, ms < 0 ? 0 : ms) < 0 && errno != EINTR) break;
    for (int i = 0; i < np; i++) {
      if (!p[i].revents) continue;
      int fd = p[i].fd;
      if (fd == io->out && drain(fd, &out)) close_fd(&io->out);
      else if (fd == io->err && drain(fd, &err)) close_fd(&io->err);
      else if (fd == io->in) {
        ssize_t w = send(fd, io->stdin_data + in_off, in_len - in_off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) in_off += (size_t)w;
        if ((w < 0 && errno != EAGAIN && errno != EINTR) || in_off == in_len) close_fd(&io->in);
      } else if (fd == io->status) {
        lt__jail_status_t s;
        ssize_t n = read(fd, &s, sizeof s);
        if (n < 0 && errno == EINTR) continue;
        if (n == (ssize_t)sizeof s && !io->on_status(io->ud, &s)) continue;
        if (n == (ssize_t)sizeof s) *st = s;
        else close_fd(&io->status); /* init is gone */
        done = 1;
        if (!killed) res->wall_ms = (lt_time_mono_s() - io->t0) * 1e3;
        if (grace_end == 0) grace_end = lt_time_mono_s() + 2;
      }
    }
  }
  close_fd(&io->in);
  int rc = 0;
  if (st->kind == LT__JAIL_SETUP_ERROR) {
    rc = lt_error_set(LT_EINVAL, "sandbox: %s", st->msg);
  } else if (st->kind == LT__JAIL_EXITED) {
    res->exit_code = WIFEXITED(st->wstatus) ? WEXITSTATUS(st->wstatus) : -1;
    res->signal = WIFSIGNALED(st->wstatus) ? WTERMSIG(st->wstatus) : 0;
  } else if (killed) {
    res->exit_code = -1;
    res->signal = SIGKILL;
  } else {
    rc = lt_error_set(LT_ESYS, "sandbox: init died without reporting the program's end");
  }
  res->out_truncated = out.truncated, res->err_truncated = err.truncated;
  res->out_len = out.b.len, res->err_len = err.b.len;
  res->out = lt_buf_take(&out.b);
  res->err = lt_buf_take(&err.b);
  if (rc == 0 && (!res->out || !res->err)) rc = lt_error_set(LT_ENOMEM, "sandbox: out of memory");
  if (rc < 0) lt_sandbox_result_free(res);
  return rc;
}

static void kill_jail_cb(void *ud) { kill_jail(ud); }

static int any_status(void *ud, const lt__jail_status_t *st) { return 1; }

int lt_sandbox_exec(lt_sandbox_t *sb, const lt_sandbox_job_t *job, lt_sandbox_result_t *res) {
  memset(res, 0, sizeof *res);
  lt_buf_t enc = {0};
  int rc = lt__job_encode(job, NULL, 1, 0, &enc);
  double timeout = job->timeout_s > 0 ? job->timeout_s : sb->lim.timeout_s, t0 = lt_time_mono_s();
  if (rc == 0 && lt__send_fds(sb->ctl, enc.data, enc.len, NULL, 0) != 0)
    rc = lt_error_set(LT_ESYS, "sandbox: the jail is gone (%s)", strerror(errno));
  lt_buf_free(&enc);
  close_fd(&sb->ctl);
  if (rc < 0) {
    reap(sb);
    return rc;
  }
  lt__io_t io = {.in = sb->in,
                 .out = sb->out,
                 .err = sb->err,
                 .status = sb->status,
                 .stdin_data = job->stdin_data,
                 .stdin_len = job->stdin_len,
                 .cap = sb->lim.output_bytes,
                 .t0 = t0,
                 .deadline = t0 + timeout,
                 .kill = kill_jail_cb,
                 .on_status = any_status,
                 .ud = sb};
  sb->in = sb->out = sb->err = sb->status = -1; /* io's now */
  lt__jail_status_t st;
  rc = lt__io_run(&io, res, &st);
  close_fd(&io.out), close_fd(&io.err), close_fd(&io.status);
  if (rc == 0) res->oom = lt__cgroup_oom_kills(&sb->cg) > 0;
  reap(sb);
  return rc;
}

int lt_sandbox_run(const lt_sandbox_limits_t *l, const lt_sandbox_job_t *job, lt_sandbox_result_t *res) {
  lt_sandbox_t *sb;
  int rc = lt_sandbox_create(l, &sb);
  return rc < 0 ? rc : lt_sandbox_exec(sb, job, res);
}
