/* Test helpers (tests/support/harness.h): bin/longtail as a real process, temporary directories, files. */
#include "tests/support/harness.h"

#include <errno.h>
#include <fcntl.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "util/fs.h"
#include "util/time.h"

const char *lt_test_bin(void) {
  const char *b = getenv("LT_BIN");
  return b ? b : "bin/longtail";
}

const char *lt_test_root(void) {
  const char *r = getenv("LT_ROOT");
  return r ? r : ".";
}

static void append(char **buf, size_t *len, size_t *cap, const char *p, size_t n) {
  if (*len + n + 1 > *cap) {
    size_t c = *cap ? *cap : 4096;
    while (c < *len + n + 1) c *= 2;
    char *nb = realloc(*buf, c);
    if (!nb) return;
    *buf = nb;
    *cap = c;
  }
  memcpy(*buf + *len, p, n);
  *len += n;
  (*buf)[*len] = 0;
}

int lt_test_run(lt_run_t *r, const char *input, double timeout_s, const char *const *argv) {
  memset(r, 0, sizeof *r);
  int out[2], err[2], in[2];
  if (pipe(out) || pipe(err) || pipe(in)) return -1;
  double t0 = lt_time_mono_s();
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    dup2(in[0], 0);
    dup2(out[1], 1);
    dup2(err[1], 2);
    close(in[1]);
    close(out[0]);
    close(err[0]);
    setpgid(0, 0);
    const char *prog = argv[0];
    if (strcmp(prog, "longtail") == 0) prog = lt_test_bin();
    execvp(prog, (char *const *)argv);
    fprintf(stderr, "exec %s: %s\n", prog, strerror(errno));
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  close(err[1]);
  if (input) {
    size_t n = strlen(input), off = 0;
    signal(SIGPIPE, SIG_IGN);
    while (off < n) {
      ssize_t w = write(in[1], input + off, n - off);
      if (w <= 0) break;
      off += (size_t)w;
    }
  }
  close(in[1]);
  size_t ol = 0, oc = 0, el = 0, ec = 0;
  struct pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  int open_fds = 2, killed = 0;
  while (open_fds) {
    double left = timeout_s - (lt_time_mono_s() - t0);
    if (left <= 0 && !killed) {
      kill(-pid, SIGKILL);
      killed = 1;
    }
    /* Children in sessions of their own (a daemon's workers) may hold the pipes
     * long after: a timed-out run is not waited for past a grace period. */
    if (killed && left < -5) break;
    int pr = poll(fds, 2, killed ? 1000 : (int)(left * 1000) + 1);
    if (pr < 0 && errno != EINTR) break;
    for (int k = 0; k < 2; k++) {
      if (fds[k].fd < 0 || !(fds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[65536];
      ssize_t n = read(fds[k].fd, buf, sizeof buf);
      if (n <= 0) {
        close(fds[k].fd);
        fds[k].fd = -1;
        open_fds--;
      } else if (k == 0) {
        append(&r->out, &ol, &oc, buf, (size_t)n);
      } else {
        append(&r->err, &el, &ec, buf, (size_t)n);
      }
    }
  }
  for (int k = 0; k < 2; k++)
    if (fds[k].fd >= 0) close(fds[k].fd);
  int st = 0;
  struct rusage ru = {0};
  wait4(pid, &st, 0, &ru); /* Linux: the child's usage and its reaped descendants' */
  r->secs = lt_time_mono_s() - t0;
  r->cpu_secs = (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
  r->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  if (!r->out) r->out = strdup("");
  if (!r->err) r->err = strdup("");
  return 0;
}

int lt_test_sh(lt_run_t *r, double timeout_s, const char *fmt, ...) {
  char cmd[8192];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd, sizeof cmd, fmt, ap);
  va_end(ap);
  const char *argv[] = {"/bin/sh", "-c", cmd, NULL};
  return lt_test_run(r, NULL, timeout_s, argv);
}

void lt_run_free(lt_run_t *r) {
  free(r->out);
  free(r->err);
  memset(r, 0, sizeof *r);
}

char *lt_test_tmpdir(const char *tag) {
  const char *base = getenv("TMPDIR");
  char tmpl[4096];
  snprintf(tmpl, sizeof tmpl, "%s/lt-%s-XXXXXX", base ? base : "/tmp", tag);
  char *d = mkdtemp(tmpl);
  return d ? strdup(d) : NULL;
}

void lt_test_rmdir(char *dir) {
  if (!dir) return;
  lt_fs_remove_tree(dir);
  free(dir);
}

int lt_test_write(const char *path, const char *content) {
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  size_t n = strlen(content);
  int ok = fwrite(content, 1, n, f) == n;
  return (fclose(f) == 0 && ok) ? 0 : -1;
}

char *lt_test_read(const char *path) {
  char *d;
  size_t n;
  return lt_fs_read_file(path, 1u << 30, &d, &n) == 0 ? d : NULL;
}

pid_t lt_test_spawn(const char *logdir, const char *name, const char *const *argv) {
  char out[4096], err[4096];
  snprintf(out, sizeof out, "%s/%s.out", logdir, name);
  snprintf(err, sizeof err, "%s/%s.err", logdir, name);
  pid_t pid = fork();
  if (pid != 0) return pid;
  int fo = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  int fe = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  int fi = open("/dev/null", O_RDONLY);
  if (fo < 0 || fe < 0 || fi < 0) _exit(127);
  dup2(fi, 0);
  dup2(fo, 1);
  dup2(fe, 2);
  const char *prog = strcmp(argv[0], "longtail") == 0 ? lt_test_bin() : argv[0];
  execvp(prog, (char *const *)argv);
  _exit(127);
}

int lt_test_wait(pid_t pid, double timeout_s) {
  double t0 = lt_time_mono_s();
  for (;;) {
    int st;
    pid_t w = waitpid(pid, &st, WNOHANG);
    if (w == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    if (w < 0) return -1;
    if (lt_time_mono_s() - t0 > timeout_s) return -1;
    lt_time_sleep_ms(20);
  }
}

int lt_test_procs_matching(const char *pattern) {
  lt_run_t r;
  lt_test_sh(&r, 10, "pgrep -f -c '%s'", pattern);
  int n = atoi(r.out ? r.out : "0");
  lt_run_free(&r);
  return n;
}

int lt_test_free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t l = sizeof a;
  int port = -1;
  if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(fd, (struct sockaddr *)&a, &l) == 0)
    port = ntohs(a.sin_port);
  close(fd);
  return port;
}

int lt_test_listen_loopback(int *port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t l = sizeof a;
  if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 8) != 0 ||
      getsockname(fd, (struct sockaddr *)&a, &l) != 0) {
    if (fd >= 0) close(fd);
    return -1;
  }
  *port = ntohs(a.sin_port);
  return fd;
}

char *lt_test_http(int port, const char *method, const char *path, const char *body) {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  if (connect(s, (struct sockaddr *)&a, sizeof a)) {
    close(s);
    return NULL;
  }
  size_t blen = body ? strlen(body) : 0;
  char *req = malloc(blen + 512);
  int n = snprintf(req, 512, "%s %s HTTP/1.1\r\nHost: x\r\nContent-Length: %zu\r\n\r\n", method, path, blen);
  if (body) memcpy(req + n, body, blen);
  for (size_t off = 0; off < (size_t)n + blen;) {
    ssize_t w = send(s, req + off, (size_t)n + blen - off, MSG_NOSIGNAL);
    if (w <= 0) break;
    off += (size_t)w;
  }
  free(req);
  size_t cap = 1 << 20, got = 0;
  char *out = calloc(1, cap);
  for (ssize_t r; got + 1 < cap && (r = recv(s, out + got, cap - got - 1, 0)) > 0;) got += (size_t)r;
  close(s);
  return out;
}

char *lt_test_first_line(const char *path, double timeout_s) {
  for (int i = 0; i < timeout_s * 20; i++, usleep(50000)) {
    char *s = lt_test_read(path);
    char *nl = s ? strchr(s, '\n') : NULL;
    if (nl) {
      *nl = 0;
      return s;
    }
    free(s);
  }
  return NULL;
}

int lt_test_init_model(const char *model, const char *out, int seed, char **err) {
  char cfg[4096], sd[32];
  snprintf(cfg, sizeof cfg, "%s/configs/models/%s.json", lt_test_root(), model);
  snprintf(sd, sizeof sd, "%d", seed);
  const char *argv[] = {"longtail", "init", "--config", cfg, "--out", out, "--seed", sd, NULL};
  lt_run_t r;
  if (lt_test_run(&r, NULL, 60, argv) < 0) return -1;
  int st = r.status;
  if (err) *err = r.err ? strdup(r.err) : NULL;
  lt_run_free(&r);
  return st;
}
