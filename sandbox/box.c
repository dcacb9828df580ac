/* Boxes (sandbox/image.h): a jail over an image root (sandbox/jail.c) whose init serves requests for the box's
 * life.  The parent keeps the box's control socket (requests, with the program's pipes as SCM_RIGHTS), its status
 * pipe (one message per start and end, with the request's id), and O_PATH descriptors of its root and of its
 * overlay's upper directory, through which the host side reads and writes files (boxfs.c). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sandbox/image.h"
#include "sandbox/internal.h"
#include "util/error.h"
#include "util/time.h"

struct lt_box_proc {
  lt_box_t *b;
  uint32_t id;
  int in, out, err;
  int done, wstatus;
};

static void close_fd(int *fd) {
  if (*fd >= 0) close(*fd);
  *fd = -1;
}

/* A box holds four descriptors, a spawned process three more: a worker with a thousand boxes needs more than the
 * usual soft limit of 1024, so the soft limit is raised to the hard one, once. */
static void raise_nofile(void) {
  struct rlimit r;
  if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    setrlimit(RLIMIT_NOFILE, &r);
  }
}

int lt_box_create(lt_image_t *img, const lt_sandbox_limits_t *l, lt_box_t **out) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, raise_nofile);
  *out = NULL;
  lt_box_t *b = calloc(1, sizeof *b);
  if (!b) return lt_error_set(LT_ENOMEM, "box: out of memory");
  b->img = img;
  const lt_image_config_t *c = lt_image_config(img);
  int rc = lt__sandbox_start(l, lt_image_rootfs(img), c->uid, c->gid, &b->sb);
  if (rc < 0) {
    free(b);
    return lt_error_wrap(rc, "%s", lt_image_ref(img));
  }
  /* A box's programs get pipes of their own: the sandbox's single-job ones are not used. */
  close_fd(&b->sb->in);
  close_fd(&b->sb->out);
  close_fd(&b->sb->err);
  *out = b;
  return 0;
}

lt_image_t *lt_box_image(const lt_box_t *b) { return b->img; }

/* A process's end read while waiting for something else. */
static void note(lt_box_t *b, const lt__jail_status_t *st) {
  if (st->kind != LT__JAIL_EXITED) return;
  for (int i = 0; i < b->nprocs; i++)
    if (b->procs[i]->id == st->id) b->procs[i]->done = 1, b->procs[i]->wstatus = st->wstatus;
}

/* One status message within timeout_s (< 0: no limit): 1, 0 on timeout, LT_ESYS when init is gone. */
static int next_status(lt_box_t *b, double timeout_s, lt__jail_status_t *st) {
  if (b->sb->status < 0) return lt_error_set(LT_ESYS, "box: %s: its init is gone", lt_image_ref(b->img));
  struct pollfd p = {.fd = b->sb->status, .events = POLLIN};
  int r = poll(&p, 1, timeout_s < 0 ? -1 : (int)(timeout_s * 1e3));
  if (r < 0 && errno == EINTR) return 0;
  if (r == 0) return 0;
  ssize_t n = read(b->sb->status, st, sizeof *st);
  if (n == (ssize_t)sizeof *st) return 1;
  close_fd(&b->sb->status);
  return lt_error_set(LT_ESYS, "box: %s: its init is gone", lt_image_ref(b->img));
}

/* The image's Env with job's entries put over those of the same name (pointers into both; free the array only). */
static const char **merge_env(const lt_box_t *b, const char *const *add) {
  char **base = lt_image_config(b->img)->env;
  size_t nb = 0, na = 0;
  while (base[nb]) nb++;
  while (add && add[na]) na++;
  const char **v = calloc(nb + na + 1, sizeof *v);
  if (!v) return NULL;
  size_t n = 0;
  for (size_t i = 0; i < nb; i++) {
    size_t k = strcspn(base[i], "=");
    int over = 0;
    for (size_t j = 0; j < na && !over; j++) over = strncmp(add[j], base[i], k + 1) == 0;
    if (!over) v[n++] = base[i];
  }
  for (size_t j = 0; j < na; j++) v[n++] = add[j];
  return v;
}

/* Sends a RUN for job with the program's three ends; they are closed here either way. */
static int send_run(lt_box_t *b, const lt_sandbox_job_t *job, uint32_t id, uint32_t flags, int fds[3]) {
  const char **env = merge_env(b, job->env);
  lt_buf_t enc = {0};
  lt_sandbox_job_t j = *job;
  if (!j.cwd) j.cwd = lt_image_config(b->img)->workdir;
  int rc = env ? lt__job_encode(&j, env, id, flags, &enc) : lt_error_set(LT_ENOMEM, "box: out of memory");
  if (rc == 0 && lt__send_fds(b->sb->ctl, enc.data, enc.len, fds, 3) != 0)
    rc = lt_error_set(LT_ESYS, "box: %s: its init is gone (%s)", lt_image_ref(b->img), strerror(errno));
  free(env);
  lt_buf_free(&enc);
  for (int i = 0; i < 3; i++)
    if (i == 0 || fds[i] != fds[i - 1]) close(fds[i]);
  return rc;
}

static int send_kill(lt_box_t *b, uint32_t id, int sig, int descendants) {
  lt__jail_req_t r = {.magic = LT__JAIL_MAGIC,
                      .op = LT__REQ_KILL,
                      .id = id,
                      .sig = sig,
                      .flags = descendants ? LT__REQ_DESCENDANTS : 0};
  return lt__send_fds(b->sb->ctl, &r, sizeof r, NULL, 0) == 0 ? 0 : lt_error_set(LT_ESYS, "box: its init is gone");
}

/* stdin (a socket the parent writes with MSG_NOSIGNAL), stdout and stderr pipes: [0] ours, [1] the program's. */
static int make_pipes(int in[2], int out[2], int err[2], int merge) {
  in[0] = in[1] = out[0] = out[1] = err[0] = err[1] = -1;
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, in) == 0 && pipe2(out, O_CLOEXEC) == 0 &&
      (merge || pipe2(err, O_CLOEXEC) == 0)) {
    shutdown(in[0], SHUT_RD);
    shutdown(in[1], SHUT_WR);
    if (merge) err[1] = out[1];
    return 0;
  }
  int e = errno;
  for (int i = 0; i < 2; i++) {
    if (in[i] >= 0) close(in[i]);
    if (out[i] >= 0) close(out[i]);
    if (!merge && err[i] >= 0) close(err[i]);
  }
  return lt_error_set(lt_error_from_errno(e), "box: pipes: %s", strerror(e));
}

typedef struct {
  lt_box_t *b;
  uint32_t id;
} exec_ctx_t;

static void exec_kill(void *ud) {
  exec_ctx_t *x = ud;
  send_kill(x->b, x->id, SIGKILL, 0);
}

static int exec_status(void *ud, const lt__jail_status_t *st) {
  exec_ctx_t *x = ud;
  if (st->id == x->id) return st->kind != LT__JAIL_STARTED;
  note(x->b, st);
  return 0;
}

int lt_box_exec(lt_box_t *b, const lt_sandbox_job_t *job, lt_sandbox_result_t *res) {
  memset(res, 0, sizeof *res);
  int in[2], o[2], e[2];
  int rc = make_pipes(in, o, e, 0);
  if (rc < 0) return rc;
  exec_ctx_t x = {b, ++b->next_id};
  int oom0 = lt__cgroup_oom_kills(&b->sb->cg);
  double t0 = lt_time_mono_s(), timeout = job->timeout_s > 0 ? job->timeout_s : b->sb->lim.timeout_s;
  int fds[3] = {in[1], o[1], e[1]};
  if ((rc = send_run(b, job, x.id, LT__REQ_ONESHOT, fds)) < 0) {
    close(in[0]), close(o[0]), close(e[0]);
    return rc;
  }
  lt__io_t io = {.in = in[0],
                 .out = o[0],
                 .err = e[0],
                 .status = b->sb->status,
                 .stdin_data = job->stdin_data,
                 .stdin_len = job->stdin_len,
                 .cap = b->sb->lim.output_bytes,
                 .t0 = t0,
                 .deadline = t0 + timeout,
                 .kill = exec_kill,
                 .on_status = exec_status,
                 .ud = &x};
  lt__jail_status_t st;
  rc = lt__io_run(&io, res, &st);
  if (io.status < 0) b->sb->status = -1; /* closed by the loop: init is gone */
  close_fd(&io.out);
  close_fd(&io.err);
  if (rc == 0) res->oom = lt__cgroup_oom_kills(&b->sb->cg) > oom0;
  return rc < 0 ? lt_error_wrap(rc, "%s", lt_image_ref(b->img)) : 0;
}

int lt_box_spawn(lt_box_t *b, const lt_sandbox_job_t *job, const lt_box_spawn_opts_t *o, lt_box_proc_t **out) {
  *out = NULL;
  int merge = o && o->merge_stderr;
  lt_box_proc_t *p = calloc(1, sizeof *p);
  lt_box_proc_t **procs = realloc(b->procs, (size_t)(b->nprocs + 1) * sizeof *procs);
  if (procs) b->procs = procs;
  if (!p || !procs) {
    free(p);
    return lt_error_set(LT_ENOMEM, "box: out of memory");
  }
  int in[2], ou[2], er[2];
  int rc = make_pipes(in, ou, er, merge);
  if (rc < 0) {
    free(p);
    return rc;
  }
  *p = (lt_box_proc_t){.b = b, .id = ++b->next_id, .in = in[0], .out = ou[0], .err = merge ? -1 : er[0]};
  int fds[3] = {in[1], ou[1], er[1]};
  rc = send_run(b, job, p->id, 0, fds);
  /* Its start (or why it could not): the files are written and the program forked before init answers. */
  lt__jail_status_t st;
  for (double end = lt_time_mono_s() + 30; rc == 0;) {
    int r = next_status(b, end - lt_time_mono_s(), &st);
    if (r < 0) rc = r;
    else if (r == 0 && lt_time_mono_s() >= end)
      rc = lt_error_set(LT_ETIMEDOUT, "box: init did not start the program in 30 s");
    else if (r == 1 && st.id == p->id && st.kind == LT__JAIL_SETUP_ERROR)
      rc = lt_error_set(LT_EINVAL, "box: %s", st.msg);
    else if (r == 1 && st.id == p->id) break;
    else if (r == 1) note(b, &st);
  }
  if (rc < 0) {
    close_fd(&p->in), close_fd(&p->out), close_fd(&p->err);
    free(p);
    return lt_error_wrap(rc, "%s", lt_image_ref(b->img));
  }
  fcntl(p->in, F_SETFL, O_NONBLOCK);
  fcntl(p->out, F_SETFL, O_NONBLOCK);
  if (p->err >= 0) fcntl(p->err, F_SETFL, O_NONBLOCK);
  b->procs[b->nprocs++] = p;
  *out = p;
  return 0;
}

int lt_box_proc_stdin(const lt_box_proc_t *p) { return p->in; }
int lt_box_proc_stdout(const lt_box_proc_t *p) { return p->out; }
int lt_box_proc_stderr(const lt_box_proc_t *p) { return p->err; }
void lt_box_proc_close_stdin(lt_box_proc_t *p) { close_fd(&p->in); }

int lt_box_proc_kill(lt_box_proc_t *p, int sig, int descendants) {
  if (p->done) return lt_error_set(LT_ENOENT, "box: the process has ended");
  return send_kill(p->b, p->id, sig, descendants);
}

int lt_box_proc_wait(lt_box_proc_t *p, double timeout_s, int *wstatus) {
  double end = lt_time_mono_s() + timeout_s;
  while (!p->done) {
    double left = timeout_s < 0 ? -1 : end - lt_time_mono_s();
    if (timeout_s >= 0 && left < 0) left = 0;
    lt__jail_status_t st;
    int r = next_status(p->b, left, &st);
    if (r < 0) return r;
    if (r == 1) note(p->b, &st);
    else if (timeout_s >= 0 && lt_time_mono_s() >= end) break;
  }
  if (!p->done) return LT_ETIMEDOUT;
  if (wstatus) *wstatus = p->wstatus;
  return 0;
}

static void proc_release(lt_box_proc_t *p) {
  close_fd(&p->in);
  close_fd(&p->out);
  close_fd(&p->err);
  free(p);
}

void lt_box_proc_free(lt_box_proc_t *p) {
  if (!p) return;
  lt_box_t *b = p->b;
  if (!p->done) send_kill(b, p->id, SIGKILL, 0); /* its end is read, and dropped, whenever it comes */
  for (int i = 0; i < b->nprocs; i++)
    if (b->procs[i] == p) b->procs[i] = b->procs[--b->nprocs];
  proc_release(p);
}

void lt_box_destroy(lt_box_t *b) {
  if (!b) return;
  for (int i = 0; i < b->nprocs; i++) proc_release(b->procs[i]);
  free(b->procs);
  lt_sandbox_destroy(b->sb); /* init dies with the jail, every process of the box with init; then the cgroup goes */
  free(b);
}
