/* The swe environment's persistent shell: one /bin/sh per episode in its box, so that the working directory and
 * variables survive between bash calls (docs/envs.md, "`swe`").
 *
 * Each call writes one script to the shell's stdin:
 *
 *   __lt_c=; while IFS= read -r __lt_l; do __lt_c="$__lt_c$__lt_l
 *   "; done <<'__LT_<nonce>'
 *   <the command, verbatim>
 *   __LT_<nonce>
 *   if ( eval "__lt_f() {
 *   $__lt_c}" ) 2>/dev/null; then eval "$__lt_c" </dev/null 2>&1; else ( eval "__lt_f() {
 *   $__lt_c}" ) 2>&1; fi
 *   printf '\n__LT_<nonce> %d\n' "$?"
 *
 * The command arrives as data (a quoted here-document: no expansion, only a line equal to the random delimiter ends
 * it, and the policy cannot guess that), is parsed first in a subshell as a function's body (a syntax error in the
 * shell itself would end it), then runs in the shell with stdin from /dev/null (nothing waits on a terminal) and
 * stderr on stdout.  Its output is everything before the frame "\n__LT_<nonce> STATUS\n".  Only the shell's
 * builtins and /bin/sh are used: an image needs nothing else.
 *
 * A call past its deadline: the shell's children are killed (the command; a shell that is itself what loops is
 * killed too and started again by the next call) and the call reports timed_out; the environment ends the episode
 * as a tool timeout.  A command that ends the shell (exit, exec, set -e) gets its output and the shell's status,
 * and the next call starts a new shell in the task's directory (working directory and variables reset, said so). */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "envs/internal.h"
#include "util/buf.h"
#include "util/error.h"
#include "util/time.h"

#define KILL_GRACE_S 2.0 /* after killing a command, how long the shell has to write its frame */

struct lt__swe_shell {
  lt_box_t *box;
  char *cwd;
  lt_box_proc_t *proc; /* NULL: none running (not started, or it ended) */
};

/* What one call has read: the first head_max bytes, and a ring of the last tail_max. */
typedef struct {
  lt_buf_t head;
  char *tail;
  size_t head_max, tail_max, tail_len, tail_pos, total;
} capture_t;

static void capture_put(capture_t *c, const char *s, size_t n) {
  c->total += n;
  size_t h = c->head.len < c->head_max ? c->head_max - c->head.len : 0;
  if (h > n) h = n;
  lt_buf_append(&c->head, s, h);
  for (s += h, n -= h; n && c->tail_max; n--, s++) { /* the rest through the ring */
    c->tail[c->tail_pos] = *s;
    c->tail_pos = (c->tail_pos + 1) % c->tail_max;
    if (c->tail_len < c->tail_max) c->tail_len++;
  }
}

/* The captured output into out (head, a note of what was cut, tail). */
static void capture_take(capture_t *c, lt_buf_t *out) {
  size_t cut = c->total - c->head.len - c->tail_len;
  lt_buf_append(out, c->head.data, c->head.len);
  if (cut) lt_buf_printf(out, LT__SWE_CUT_NOTE, cut);
  size_t start = (c->tail_pos + c->tail_max - c->tail_len) % (c->tail_max ? c->tail_max : 1);
  for (size_t i = 0; i < c->tail_len; i++) lt_buf_putc(out, c->tail[(start + i) % c->tail_max]);
}

static int shell_spawn(lt__swe_shell_t *sh) {
  static const char *const argv[] = {"/bin/sh", NULL};
  /* Tools that page or ask for a terminal behave as in a pipe; Python writes no bytecode into the repository. */
  static const char *const env[] = {
      "PAGER=cat", "GIT_PAGER=cat", "TERM=dumb", "PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1", NULL};
  lt_sandbox_job_t job = {.argv = argv, .env = env, .cwd = sh->cwd};
  lt_box_spawn_opts_t o = {.merge_stderr = 1};
  int rc = lt_box_spawn(sh->box, &job, &o, &sh->proc);
  if (rc < 0) return lt_error_wrap(rc, "swe: cannot start the shell");
  return 0;
}

int lt__swe_shell_start(lt_box_t *box, const char *cwd, lt__swe_shell_t **out) {
  lt__swe_shell_t *sh = calloc(1, sizeof *sh);
  *out = NULL;
  if (!sh || !(sh->cwd = strdup(cwd))) {
    free(sh);
    return lt_error_set(LT_ENOMEM, "swe: out of memory");
  }
  sh->box = box;
  int rc = shell_spawn(sh);
  if (rc < 0) {
    lt__swe_shell_free(sh);
    return rc;
  }
  *out = sh;
  return 0;
}

void lt__swe_shell_free(lt__swe_shell_t *sh) {
  if (!sh) return;
  lt_box_proc_free(sh->proc);
  free(sh->cwd);
  free(sh);
}

/* A write to the shell's stdin that a dead shell answers with EPIPE, never with a SIGPIPE to this process (not
 * every process that runs episodes ignores it): the signal is blocked on this thread and a pending one consumed. */
static ssize_t write_nosig(int fd, const void *p, size_t n) {
  sigset_t pipe_set, old;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
  ssize_t w = write(fd, p, n);
  int err = errno;
  if (w < 0 && err == EPIPE) {
    struct timespec zero = {0, 0};
    sigtimedwait(&pipe_set, NULL, &zero);
  }
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  errno = err;
  return w;
}

static void nonce_make(char *hex, size_t n) {
  unsigned char r[12];
  if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) { /* never short for 12 bytes; a clock mix if it were */
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    for (size_t i = 0; i < sizeof r; i++)
      r[i] = (unsigned char)((uint64_t)ts.tv_nsec >> (i % 8 * 8)) ^ (unsigned char)(i * 37);
  }
  for (size_t i = 0; i < sizeof r && 2 * i + 2 < n; i++) snprintf(hex + 2 * i, 3, "%02x", r[i]);
}

/* The shell ended: its status, and it is gone (the next call starts another). */
static int shell_gone(lt__swe_shell_t *sh) {
  int ws = 0, st = -1;
  if (lt_box_proc_wait(sh->proc, 1.0, &ws) == 0) st = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
  lt_box_proc_free(sh->proc);
  sh->proc = NULL;
  return st;
}

int lt__swe_shell_run(lt__swe_shell_t *sh, const char *cmd, double timeout_s, size_t cap, lt_buf_t *out,
                      lt__swe_run_t *r) {
  memset(r, 0, sizeof *r);
  r->status = -1;
  if (!sh->proc) {
    int rc = shell_spawn(sh);
    if (rc < 0) return rc;
    r->restarted = 1;
  }
  char nonce[32] = "", marker[48];
  nonce_make(nonce, sizeof nonce);
  int mlen = snprintf(marker, sizeof marker, "\n__LT_%s ", nonce);
  lt_buf_t script = {0};
  lt_buf_printf(&script, "__lt_c=; while IFS= read -r __lt_l; do __lt_c=\"$__lt_c$__lt_l\n\"; done <<'__LT_%s'\n",
                nonce);
  lt_buf_puts(&script, cmd);
  if (!*cmd || cmd[strlen(cmd) - 1] != '\n') lt_buf_putc(&script, '\n');
  lt_buf_printf(&script,
                "__LT_%s\nif ( eval \"__lt_f() {\n$__lt_c}\" ) 2>/dev/null; then eval \"$__lt_c\" </dev/null 2>&1; "
                "else ( eval \"__lt_f() {\n$__lt_c}\" ) 2>&1; fi\nprintf '\\n__LT_%s %%d\\n' \"$?\"\n",
                nonce, nonce);
  if (lt_buf_ok(&script) < 0) {
    lt_buf_free(&script);
    return lt_error_set(LT_ENOMEM, "swe: out of memory");
  }
  capture_t c = {.head_max = cap / 2, .tail_max = cap - cap / 2};
  if (c.tail_max && !(c.tail = malloc(c.tail_max))) {
    lt_buf_free(&script);
    return lt_error_set(LT_ENOMEM, "swe: out of memory");
  }
  /* The frame is found in a window kept back from the capture: the bytes that could be its start. */
  char win[4096 + 64];
  size_t wlen = 0, sent = 0;
  int in = lt_box_proc_stdin(sh->proc), fd = lt_box_proc_stdout(sh->proc), done = 0, rc = 0, killed = 0;
  double deadline = lt_time_mono_s() + timeout_s, grace = 0;
  char status_text[16] = "";
  size_t slen = 0;
  int in_status = 0;
  while (!done) {
    double now = lt_time_mono_s();
    if (!killed && now >= deadline) { /* the command's time is up: its processes go, the shell may stay */
      r->timed_out = 1;
      killed = 1;
      lt_box_proc_kill(sh->proc, SIGKILL, 1);
      grace = now + KILL_GRACE_S;
    } else if (killed && now >= grace) { /* the shell itself loops: it goes too */
      lt_box_proc_kill(sh->proc, SIGKILL, 0);
      shell_gone(sh);
      break;
    }
    struct pollfd pf[2] = {{.fd = fd, .events = POLLIN}, {.fd = sent < script.len ? in : -1, .events = POLLOUT}};
    double wait_s = (killed ? grace : deadline) - now;
    int prc = poll(pf, 2, wait_s > 0 ? (int)(wait_s * 1000) + 1 : 0);
    if (prc < 0 && errno != EINTR) {
      rc = lt_error_set(LT_ESYS, "swe: poll on the shell: %s", strerror(errno));
      break;
    }
    if (pf[1].revents & (POLLOUT | POLLERR | POLLHUP)) {
      ssize_t w = write_nosig(in, script.data + sent, script.len - sent);
      if (w > 0) sent += (size_t)w;
      else if (w < 0 && errno != EAGAIN && errno != EINTR) sent = script.len; /* the shell is gone: its EOF follows */
    }
    if (!(pf[0].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    char buf[4096];
    ssize_t got = read(fd, buf, sizeof buf);
    if (got < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (got <= 0) { /* EOF: the command ended the shell */
      capture_put(&c, win, wlen);
      wlen = 0;
      r->shell_exit = shell_gone(sh);
      r->shell_ended = 1;
      break;
    }
    for (ssize_t i = 0; i < got && !done; i++) {
      if (in_status) { /* the frame's status digits up to its newline */
        if (buf[i] == '\n') done = 1;
        else if (slen + 1 < sizeof status_text) status_text[slen++] = buf[i];
        continue;
      }
      win[wlen++] = buf[i];
      if (wlen >= (size_t)mlen && !memcmp(win + wlen - mlen, marker, (size_t)mlen)) {
        capture_put(&c, win, wlen - (size_t)mlen);
        wlen = 0;
        in_status = 1;
      } else if (wlen == sizeof win) { /* keep the last mlen - 1 bytes: a frame may start there */
        capture_put(&c, win, wlen - (size_t)mlen + 1);
        memmove(win, win + wlen - mlen + 1, (size_t)mlen - 1);
        wlen = (size_t)mlen - 1;
      }
    }
  }
  capture_put(&c, win, wlen);
  if (done) r->status = atoi(status_text);
  if (r->timed_out) r->status = -1;
  capture_take(&c, out);
  lt_buf_free(&c.head);
  free(c.tail);
  lt_buf_free(&script);
  if (rc == 0 && lt_buf_ok(out) < 0) rc = lt_error_set(LT_ENOMEM, "swe: out of memory");
  return rc;
}
