/* An agent program's process (docs/agent-gateway.md): started with uv_spawn in
 * its own process group, fed one line on stdin, watched on the loop (no thread
 * per episode).  Its stdout's last line is kept (the reward it may report); the
 * tails of its stderr and stdout explain a failure (an agent CLI may write its
 * error to either).  A deadline or a kill takes the whole
 * group down, and so does the leader's exit, so nothing it started outlives it.
 * The deadline is the policy's budget: it counts the program's own time after
 * its first call, never its start-up nor its waits on the gateway's answers
 * (held); before its first call a start-up deadline bounds it. */
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rollout/gateway.h"
#include "util/buf.h"
#include "util/error.h"

#define LINE_MAX_BYTES (1u << 20) /* the last stdout line kept; longer ones are cut */
#define TAIL_BYTES 2048           /* of stderr and of stdout, each, kept to explain a failure */
#define DRAIN_MS 2000             /* after the leader's exit, how long its pipes may stay open */
#define START_GRACE_MS 60000 /* before its first call: timeout_s plus this to make it (start-up is not the policy's) */
#define GUARD_FACTOR 4       /* the sandbox's own wall-clock guard, in timeout_s (see sandboxed()) */

extern char **environ;

struct lt_program {
  uv_process_t proc;
  const lt_program_ops_t *ops; /* a program started elsewhere (lt_program_attach): its exit polled, killed by ops */
  void *ops_ctx;
  uv_timer_t poll; /* (with ops: in place of proc) */
  uv_pipe_t in, out, err;
  uv_timer_t deadline;
  uv_write_t wr;
  uv_shutdown_t sd;
  char *line;         /* what stdin receives */
  lt_buf_t cur, last; /* stdout's line in progress and its last complete non-empty one */
  char err_tail[TAIL_BYTES], out_tail[TAIL_BYTES];
  size_t err_len, out_len;
  lt_program_exit_cb cb;
  void *ud;
  int exited, timed_out, out_open, err_open, handles, killed;
  int holds;          /* calls being answered: the deadline's clock stands still while > 0 */
  int ending;         /* lt_program_end_after: its last deadline runs, holds or not */
  int called;         /* a call was taken up: the start-up deadline gave way to timeout_s */
  uint64_t left_ms;   /* of the program's own time, as of run_since */
  uint64_t run_since; /* loop time its clock last started */
  int64_t status;
  int term_signal;
};

static void program_on_closed(uv_handle_t *h) {
  lt_program_t *p = h->data;
  if (--p->handles) return;
  lt_buf_free(&p->cur);
  lt_buf_free(&p->last);
  free(p->line);
  free(p);
}

/* The process handle stays open until the exit is reaped (no zombies). */
static void close_all(lt_program_t *p) {
  if (p->ops && !uv_is_closing((uv_handle_t *)&p->poll)) uv_close((uv_handle_t *)&p->poll, program_on_closed);
  else if (!p->ops && p->exited && !uv_is_closing((uv_handle_t *)&p->proc))
    uv_close((uv_handle_t *)&p->proc, program_on_closed);
  uv_handle_t *hs[] = {(uv_handle_t *)&p->in, (uv_handle_t *)&p->out, (uv_handle_t *)&p->err,
                       (uv_handle_t *)&p->deadline};
  for (size_t i = 0; i < sizeof hs / sizeof hs[0]; i++)
    if (!uv_is_closing(hs[i])) uv_close(hs[i], program_on_closed);
}

static void kill_group(lt_program_t *p) {
  if (p->ops) p->ops->kill(p->ops_ctx);
  else if (p->proc.pid > 0) kill(-p->proc.pid, SIGKILL);
}

/* Reports once the leader has exited and both pipes reached their end (or the drain ran out). */
static void maybe_done(lt_program_t *p, int force) {
  if (!p->exited || (!force && (p->out_open || p->err_open)) || !p->cb) return;
  lt_program_exit_cb cb = p->cb;
  p->cb = NULL;
  uv_timer_stop(&p->deadline);
  if (p->cur.len) { /* a last line without its newline */
    lt_buf_reset(&p->last);
    lt_buf_append(&p->last, p->cur.data, p->cur.len);
  }
  lt_program_result_t r = {.exit_code = p->term_signal ? -1 : (int)p->status,
                           .signal = p->term_signal,
                           .timed_out = p->timed_out,
                           .last_line = p->last.data ? p->last.data : "",
                           .err_tail = p->err_tail,
                           .out_tail = p->out_tail};
  p->err_tail[p->err_len] = 0;
  p->out_tail[p->out_len] = 0;
  cb(p, &r, p->ud);
  close_all(p);
}

static void on_drain(uv_timer_t *t) { maybe_done(t->data, 1); }

static void program_exited(lt_program_t *p, int64_t status, int sig) {
  p->exited = 1;
  p->status = status;
  p->term_signal = sig;
  kill_group(p);   /* what it left running dies with it */
  if (p->killed) { /* nobody waits for the result any more */
    close_all(p);
    return;
  }
  if (p->out_open || p->err_open) uv_timer_start(&p->deadline, on_drain, DRAIN_MS, 0);
  maybe_done(p, 0);
}

static void program_on_exit(uv_process_t *h, int64_t status, int sig) { program_exited(h->data, status, sig); }

static void on_deadline(uv_timer_t *t) {
  lt_program_t *p = t->data;
  p->timed_out = 1;
  kill_group(p);
}

/* The deadline timer is the drain's once the leader exited, and a timed-out program is dying: neither is touched. */
static int clock_runs(const lt_program_t *p) { return !p->exited && !p->timed_out && !p->ending; }

void lt_program_end_after(lt_program_t *p, uint64_t ms) {
  if (!clock_runs(p)) return;
  p->ending = 1;
  uv_timer_start(&p->deadline, on_deadline, ms, 0);
}

void lt_program_hold(lt_program_t *p) {
  if (p->holds++ || !clock_runs(p)) return;
  uint64_t ran = uv_now(p->deadline.loop) - p->run_since;
  if (p->called) p->left_ms = ran < p->left_ms ? p->left_ms - ran : 0; /* (start-up time is not counted) */
  p->called = 1;
  uv_timer_stop(&p->deadline);
}

void lt_program_release(lt_program_t *p) {
  if (p->holds <= 0 || --p->holds || !clock_runs(p)) return;
  p->run_since = uv_now(p->deadline.loop);
  uv_timer_start(&p->deadline, on_deadline, p->left_ms, 0);
}

static void alloc_cb(uv_handle_t *h, size_t hint, uv_buf_t *b) {
  (void)h;
  (void)hint;
  static char buf[65536]; /* the loop thread reads one pipe at a time */
  b->base = buf;
  b->len = sizeof buf;
}

/* 1 when the pipe reached its end (or failed): the program may be done. */
static int pipe_end(lt_program_t *p, uv_stream_t *s, ssize_t n, int *open) {
  if (n >= 0) return 0;
  uv_read_stop(s);
  *open = 0;
  maybe_done(p, 0);
  return 1;
}

/* Keeps the last TAIL_BYTES - 1 bytes of a stream in tail (len of them so far), after n more. */
static void program_keep_tail(char *tail, size_t *len, const char *data, size_t n) {
  size_t keep = TAIL_BYTES - 1;
  if (n >= keep) {
    memcpy(tail, data + n - keep, keep);
    *len = keep;
    return;
  }
  size_t drop = *len + n > keep ? *len + n - keep : 0;
  memmove(tail, tail + drop, *len - drop);
  memcpy(tail + *len - drop, data, n);
  *len = *len - drop + n;
}

static void on_out(uv_stream_t *s, ssize_t n, const uv_buf_t *b) {
  lt_program_t *p = s->data;
  if (pipe_end(p, s, n, &p->out_open)) return;
  program_keep_tail(p->out_tail, &p->out_len, b->base, (size_t)n);
  for (ssize_t i = 0; i < n; i++) {
    char c = b->base[i];
    if (c == '\n') {
      size_t len = p->cur.len;
      while (len && (p->cur.data[len - 1] == '\r' || p->cur.data[len - 1] == ' ')) len--;
      if (len) {
        lt_buf_reset(&p->last);
        lt_buf_append(&p->last, p->cur.data, len);
      }
      lt_buf_reset(&p->cur);
    } else if (p->cur.len < LINE_MAX_BYTES) {
      lt_buf_putc(&p->cur, c);
    }
  }
}

static void on_err(uv_stream_t *s, ssize_t n, const uv_buf_t *b) {
  lt_program_t *p = s->data;
  if (pipe_end(p, s, n, &p->err_open)) return;
  program_keep_tail(p->err_tail, &p->err_len, b->base, (size_t)n);
}

static void on_shutdown(uv_shutdown_t *r, int status) {
  (void)status;
  if (!uv_is_closing((uv_handle_t *)r->handle)) uv_close((uv_handle_t *)r->handle, program_on_closed);
}

static void program_on_written(uv_write_t *w, int status) {
  lt_program_t *p = w->data;
  (void)status; /* a program that does not read its stdin is its own business */
  if (uv_is_closing((uv_handle_t *)&p->in)) return;
  p->sd.data = p;
  if (uv_shutdown(&p->sd, (uv_stream_t *)&p->in, on_shutdown) != 0) uv_close((uv_handle_t *)&p->in, program_on_closed);
}

/* The worker's environment without `set`'s names, then `set` (NAME=value). */
static char **make_env(const char *const *set) {
  size_t n = 0, k = 0;
  while (environ[n]) n++;
  while (set[k]) k++;
  char **env = calloc(n + k + 1, sizeof *env);
  if (!env) return NULL;
  size_t o = 0;
  for (size_t i = 0; i < n; i++) {
    int skip = 0;
    for (size_t j = 0; j < k && !skip; j++) {
      size_t len = (size_t)(strchr(set[j], '=') - set[j]);
      skip = !strncmp(environ[i], set[j], len) && environ[i][len] == '=';
    }
    if (!skip) env[o++] = environ[i];
  }
  for (size_t j = 0; j < k; j++) env[o++] = (char *)set[j];
  return env;
}

/* A string of the sandboxed command line, kept in keep[] for the caller to free; NULL when out of memory or room. */
static char *program_keep(char **keep, size_t *nk, size_t cap, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *s = NULL;
  if (*nk < cap && vasprintf(&s, fmt, ap) < 0) s = NULL;
  va_end(ap);
  if (s) keep[(*nk)++] = s;
  return s;
}

/* The file argv[i] names, when it lies in one of the directories bound read-only into the sandbox: its real path,
 * which the program sees there too (kept); else NULL. */
static char *program_in_ro(const char *arg, const char *const *ro, char **keep, size_t *nk, size_t cap) {
  char real[PATH_MAX];
  if (!ro || !realpath(arg, real)) return NULL;
  for (; *ro; ro++) {
    size_t n = strlen(*ro);
    if (!strncmp(real, *ro, n) && real[n] == '/') return program_keep(keep, nk, cap, "%s", real);
  }
  return NULL;
}

/* `longtail sandbox run ... -- argv`: the program in the sandbox under the run's limits (lim: its `sandbox`
 * section, the domain's memory_mb, the gateway's port, the domain's read-only directories), reaching only the
 * gateway's port.  The files argv names (the agent's script) are copied into /work and named by their base name
 * there, unless they lie in a read-only directory: then they run in place, named by their real path.  Its
 * wall-clock deadline is a guard for a worker that died without killing the group: our timer kills first.  Ours
 * counts neither start-up nor waiting on the gateway, so the guard leaves room for both (GUARD_FACTOR × timeout_s
 * + 2 × START_GRACE_MS; past it the sandbox's exit is an env_error).  Strings in `keep` (cap of them) are freed by
 * the caller. */
static char **sandboxed(char *const *argv, const char *const *env_set, double timeout_s, const lt_sandbox_limits_t *lim,
                        char **keep, size_t cap) {
  size_t n = 0, k = 0, nro = 0, nk = 0, o = 0;
  while (argv[n]) n++;
  while (env_set[k]) k++;
  while (lim->ro_dirs && lim->ro_dirs[nro]) nro++;
  char **w = calloc(32 + 2 * k + 2 * nro + 3 * n, sizeof *w);
  char exe[4096];
  size_t len = sizeof exe;
  if (!w || uv_exepath(exe, &len) != 0) {
    free(w);
    return NULL;
  }
  const char *head[] = {program_keep(keep, &nk, cap, "%s", exe),
                        "sandbox",
                        "run",
                        "--stdin",
                        "-",
                        "--timeout",
                        program_keep(keep, &nk, cap, "%.0f", GUARD_FACTOR * timeout_s + 2 * START_GRACE_MS / 1000),
                        "--port",
                        program_keep(keep, &nk, cap, "%d", lim->port),
                        "--set",
                        program_keep(keep, &nk, cap, "sandbox.memory_mb=%d", lim->memory_mb),
                        "--set",
                        program_keep(keep, &nk, cap, "sandbox.cpu_s=%d", lim->cpu_s),
                        "--set",
                        program_keep(keep, &nk, cap, "sandbox.nproc=%d", lim->nproc),
                        "--set",
                        program_keep(keep, &nk, cap, "sandbox.file_mb=%d", lim->file_mb),
                        "--set",
                        program_keep(keep, &nk, cap, "sandbox.nofile=%d", lim->nofile),
                        "--set",
                        program_keep(keep, &nk, cap, "sandbox.output_bytes=%zu", lim->output_bytes),
                        "--set",
                        program_keep(keep, &nk, cap, "sandbox.max_connections=%d", lim->max_conns)};
  int ok = 1;
  for (size_t i = 0; i < sizeof head / sizeof head[0]; i++) ok &= (w[o++] = (char *)head[i]) != NULL;
  for (size_t j = 0; j < k; j++) { /* by name: their values (the token) stay out of argv */
    w[o++] = "--env";
    ok &= (w[o++] = program_keep(keep, &nk, cap, "%.*s", (int)(strchr(env_set[j], '=') - env_set[j]), env_set[j])) !=
          NULL;
  }
  for (size_t j = 0; j < nro; j++) w[o++] = "--ro", w[o++] = (char *)lim->ro_dirs[j];
  char **named = calloc(n + 1, sizeof *named); /* argv as the sandbox runs it */
  for (size_t i = 0; named && i < n; i++) {
    struct stat st;
    const char *slash = strrchr(argv[i], '/');
    char *in_ro =
        stat(argv[i], &st) == 0 && S_ISREG(st.st_mode) ? program_in_ro(argv[i], lim->ro_dirs, keep, &nk, cap) : NULL;
    named[i] = in_ro ? in_ro : argv[i];
    if (in_ro || i == 0 || stat(argv[i], &st) != 0 || !S_ISREG(st.st_mode)) continue;
    w[o++] = "--file"; /* copied into /work */
    w[o++] = argv[i];
    named[i] = slash ? (char *)slash + 1 : argv[i];
  }
  w[o++] = "--";
  for (size_t i = 0; named && i < n; i++) w[o++] = named[i];
  if (!ok || !named) {
    free(w), free(named);
    return NULL;
  }
  free(named);
  return w;
}

/* Reads its pipes, arms its start-up deadline and feeds its stdin line: the common part of both starts. */
static int program_begin(lt_program_t *p, uv_loop_t *loop, double timeout_s, lt_program_t **out) {
  p->out_open = p->err_open = 1;
  uv_read_start((uv_stream_t *)&p->out, alloc_cb, on_out);
  uv_read_start((uv_stream_t *)&p->err, alloc_cb, on_err);
  p->left_ms = (uint64_t)(timeout_s * 1000);
  p->run_since = uv_now(loop);
  uv_timer_start(&p->deadline, on_deadline, p->left_ms + START_GRACE_MS, 0);
  uv_buf_t b = uv_buf_init(p->line, (unsigned)strlen(p->line));
  p->wr.data = p;
  if (uv_write(&p->wr, (uv_stream_t *)&p->in, &b, 1, program_on_written) != 0)
    uv_close((uv_handle_t *)&p->in, program_on_closed);
  *out = p;
  return 0;
}

int lt_program_start(uv_loop_t *loop, char *const *argv, const char *const *env_set, const char *stdin_line,
                     double timeout_s, const lt_sandbox_limits_t *sandbox, lt_program_exit_cb cb, void *ud,
                     lt_program_t **out) {
  *out = NULL;
  lt_program_t *p = calloc(1, sizeof *p);
  char **env = make_env(env_set);
  char *keep[80] = {0};
  char **wrapped = sandbox ? sandboxed(argv, env_set, timeout_s, sandbox, keep, sizeof keep / sizeof keep[0]) : NULL;
  if (wrapped) argv = wrapped;
  if (!p || !env || !(p->line = strdup(stdin_line)) || (sandbox && !wrapped)) {
    if (p) free(p->line);
    free(p), free(env), free(wrapped);
    for (size_t i = 0; i < sizeof keep / sizeof keep[0]; i++) free(keep[i]);
    return lt_error_set(LT_ENOMEM, "agent program: out of memory");
  }
  p->cb = cb;
  p->ud = ud;
  uv_pipe_init(loop, &p->in, 0);
  uv_pipe_init(loop, &p->out, 0);
  uv_pipe_init(loop, &p->err, 0);
  uv_timer_init(loop, &p->deadline);
  p->in.data = p->out.data = p->err.data = p->deadline.data = p->proc.data = p;
  p->handles = 5;
  uv_stdio_container_t io[3] = {{.flags = UV_CREATE_PIPE | UV_READABLE_PIPE, .data.stream = (uv_stream_t *)&p->in},
                                {.flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE, .data.stream = (uv_stream_t *)&p->out},
                                {.flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE, .data.stream = (uv_stream_t *)&p->err}};
  /* Detached: its own session and process group, so the group dies as one. */
  uv_process_options_t po = {.file = argv[0],
                             .args = (char **)argv,
                             .env = env,
                             .exit_cb = program_on_exit,
                             .stdio = io,
                             .stdio_count = 3,
                             .flags = UV_PROCESS_DETACHED};
  int rc = uv_spawn(loop, &p->proc, &po);
  /* The message first: argv may point into `wrapped`. */
  int e = rc != 0 ? lt_error_set(LT_EINVAL, "agent program %s: cannot start: %s", argv[0], uv_strerror(rc)) : 0;
  free(env);
  free(wrapped);
  for (size_t i = 0; i < sizeof keep / sizeof keep[0]; i++) free(keep[i]);
  if (rc != 0) {
    p->cb = NULL;
    p->exited = 1; /* nothing to reap */
    close_all(p);
    return e;
  }
  return program_begin(p, loop, timeout_s, out);
}

/* A program started elsewhere has ended when its ops say so: checked on a timer (its exit has no fd to watch). */
static void program_on_poll(uv_timer_t *t) {
  lt_program_t *p = t->data;
  int ws = 0;
  if (p->exited || p->ops->wait(p->ops_ctx, &ws) != 0) return;
  uv_timer_stop(&p->poll);
  program_exited(p, WIFEXITED(ws) ? WEXITSTATUS(ws) : 0, WIFSIGNALED(ws) ? WTERMSIG(ws) : 0);
}

int lt_program_attach(uv_loop_t *loop, const int fds[3], const lt_program_ops_t *ops, void *ops_ctx,
                      const char *stdin_line, double timeout_s, lt_program_exit_cb cb, void *ud, lt_program_t **out) {
  *out = NULL;
  lt_program_t *p = calloc(1, sizeof *p);
  if (!p || !(p->line = strdup(stdin_line))) {
    free(p);
    for (int i = 0; i < 3; i++) close(fds[i]);
    ops->kill(ops_ctx);
    return lt_error_set(LT_ENOMEM, "agent program: out of memory");
  }
  p->cb = cb, p->ud = ud, p->ops = ops, p->ops_ctx = ops_ctx;
  uv_pipe_init(loop, &p->in, 0);
  uv_pipe_init(loop, &p->out, 0);
  uv_pipe_init(loop, &p->err, 0);
  uv_timer_init(loop, &p->deadline);
  uv_timer_init(loop, &p->poll);
  p->in.data = p->out.data = p->err.data = p->deadline.data = p->poll.data = p;
  p->handles = 5;
  uv_pipe_t *pipes[3] = {&p->in, &p->out, &p->err};
  for (int i = 0; i < 3; i++)
    if (uv_pipe_open(pipes[i], fds[i]) != 0) close(fds[i]);
  uv_timer_start(&p->poll, program_on_poll, 50, 50);
  return program_begin(p, loop, timeout_s, out);
}

void lt_program_kill(lt_program_t *p) {
  if (!p) return;
  p->cb = NULL;
  p->killed = 1;
  if (!p->exited) kill_group(p);
  close_all(p);
}
