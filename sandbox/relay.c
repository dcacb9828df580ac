/* The sandbox's one network path (limits.port): inside, a forwarder listens on
 * 127.0.0.1:port of the sandbox's own network namespace and carries each
 * connection to a Unix socket bind-mounted at LT__RELAY_SOCK; outside, a
 * thread of the process that made the sandbox accepts on that socket and
 * connects to the host's 127.0.0.1:port.  Nothing else of the host's network is
 * reachable: the namespace has no other interface.  The outside half counts the
 * connections it carries (limits.max_conns): one past the cap is closed at once,
 * so a program cannot hold the host port's connection slots (the agent
 * gateway's, shared by every episode of a worker) or the relay's threads.
 *
 * The inside half runs in a forked child of a possibly multi-threaded process,
 * so it keeps to system calls. */
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandbox/internal.h"
#include "util/error.h"

/* Copies both ways until both directions reached their end, or either failed. */
static void pump(int a, int b) {
  char buf[65536];
  int open_ab = 1, open_ba = 1;
  while (open_ab || open_ba) {
    struct pollfd p[2] = {{.fd = open_ab ? a : -1, .events = POLLIN}, {.fd = open_ba ? b : -1, .events = POLLIN}};
    if (poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    for (int i = 0; i < 2; i++) {
      if (!p[i].revents) continue;
      int from = i ? b : a, to = i ? a : b;
      ssize_t n = read(from, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) { /* half-close: the other side still gets its answer */
        shutdown(to, SHUT_WR);
        if (i) open_ba = 0;
        else open_ab = 0;
        if (n < 0) return;
        continue;
      }
      for (ssize_t off = 0; off < n;) {
        ssize_t w = send(to, buf + off, (size_t)(n - off), MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return;
        off += w;
      }
    }
  }
}

static int unix_connect(const char *path) {
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0) return fd;
  if (fd >= 0) close(fd);
  return -1;
}

static struct sockaddr_in loopback(int port) {
  return (struct sockaddr_in){
      .sin_family = AF_INET, .sin_port = htons((uint16_t)port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
}

/* ---- inside ---------------------------------------------------------------------- */

int lt__relay_inside(int port) {
  /* The namespace's loopback comes up down: raise it (CAP_NET_ADMIN of our user namespace). */
  int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  struct ifreq ifr = {0};
  snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "lo");
  if (s < 0 || ioctl(s, SIOCGIFFLAGS, &ifr) != 0) return -1;
  ifr.ifr_flags |= IFF_UP;
  int rc = ioctl(s, SIOCSIFFLAGS, &ifr);
  close(s);
  if (rc != 0) return -1;
  struct sockaddr_in sa = loopback(port);
  int one = 1, l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (l < 0 || setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
      bind(l, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(l, 128) != 0)
    return -1;
  pid_t fwd = _Fork();
  if (fwd < 0) return -1;
  if (fwd > 0) {
    close(l);
    return 0;
  }
  /* Keeps only the listener: the jail's channels must reach their end when init's program does. */
  if (dup2(l, 0) != 0) _exit(1);
  close_range(1, ~0U, 0);
  l = 0;
  signal(SIGCHLD, SIG_IGN); /* connection children reap themselves */
  for (;;) {
    int c = accept4(l, NULL, NULL, SOCK_CLOEXEC);
    if (c < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      _exit(1);
    }
    pid_t k = _Fork();
    if (k == 0) {
      close(l);
      int u = unix_connect(LT__RELAY_SOCK);
      if (u >= 0) pump(c, u);
      _exit(0);
    }
    close(c);
  }
}

/* ---- outside --------------------------------------------------------------------- */

/* What the relay and its (detached) connection threads share: freed by whichever of them lets go last, since a
 * connection may outlive the relay (the host side keeps it open after the sandbox ended). */
typedef struct {
  atomic_int refs, live; /* live: connections being carried */
  int port, max_conns;
} shared_t;

static void shared_put(shared_t *s) {
  if (atomic_fetch_sub(&s->refs, 1) == 1) free(s);
}

struct lt__relay {
  char dir[64], path[96];
  int listen_fd;
  shared_t *sh;
  pthread_t thread;
};

typedef struct {
  int fd;
  shared_t *sh;
} conn_t;

static void *conn_main(void *arg) {
  conn_t c = *(conn_t *)arg;
  free(arg);
  struct sockaddr_in sa = loopback(c.sh->port);
  int t = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (t >= 0 && connect(t, (struct sockaddr *)&sa, sizeof sa) == 0) pump(c.fd, t);
  if (t >= 0) close(t);
  close(c.fd);
  atomic_fetch_sub(&c.sh->live, 1);
  shared_put(c.sh);
  return NULL;
}

static void *accept_main(void *arg) {
  lt__relay_t *r = arg;
  for (;;) {
    int c = accept4(r->listen_fd, NULL, NULL, SOCK_CLOEXEC);
    if (c < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return NULL; /* shut down by lt__relay_stop */
    }
    /* Past the cap: closed before anything reaches the host; inside, the program's connection ends unanswered. */
    if (atomic_load(&r->sh->live) >= r->sh->max_conns) {
      close(c);
      continue;
    }
    conn_t *k = malloc(sizeof *k);
    pthread_t th;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    if (k) *k = (conn_t){c, r->sh};
    atomic_fetch_add(&r->sh->live, 1);
    atomic_fetch_add(&r->sh->refs, 1);
    if (!k || pthread_create(&th, &at, conn_main, k) != 0) {
      atomic_fetch_sub(&r->sh->live, 1);
      shared_put(r->sh);
      free(k);
      close(c);
    }
    pthread_attr_destroy(&at);
  }
}

int lt__relay_start(int port, int max_conns, lt__relay_t **out) {
  *out = NULL;
  lt__relay_t *r = calloc(1, sizeof *r);
  if (r && !(r->sh = calloc(1, sizeof *r->sh))) {
    free(r);
    r = NULL;
  }
  if (!r) return lt_error_set(LT_ENOMEM, "sandbox: out of memory");
  r->sh->refs = 1;
  r->sh->port = port;
  r->sh->max_conns = max_conns > 0 ? max_conns : 1;
  r->listen_fd = -1;
  snprintf(r->dir, sizeof r->dir, "/tmp/longtail-relay-XXXXXX");
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  int rc = 0;
  if (!mkdtemp(r->dir)) {
    rc = lt_error_set(LT_ESYS, "sandbox: cannot make the relay's directory: %s", strerror(errno));
    r->dir[0] = 0;
  } else {
    snprintf(r->path, sizeof r->path, "%s/gateway.sock", r->dir);
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", r->path);
    /* The jail's uid maps to nobody on the host: it must traverse the directory and write the socket. */
    if (chmod(r->dir, 0755) != 0 || (r->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0 ||
        bind(r->listen_fd, (struct sockaddr *)&sa, sizeof sa) != 0 || chmod(r->path, 0666) != 0 ||
        listen(r->listen_fd, 128) != 0)
      rc = lt_error_set(LT_ESYS, "sandbox: cannot listen on %s: %s", r->path, strerror(errno));
    else if (pthread_create(&r->thread, NULL, accept_main, r) != 0)
      rc = lt_error_set(LT_ESYS, "sandbox: cannot start the relay thread");
  }
  if (rc < 0) {
    if (r->listen_fd >= 0) close(r->listen_fd);
    if (r->path[0]) unlink(r->path);
    if (r->dir[0]) rmdir(r->dir);
    shared_put(r->sh);
    free(r);
    return rc;
  }
  *out = r;
  return 0;
}

const char *lt__relay_path(const lt__relay_t *r) { return r->path; }

void lt__relay_stop(lt__relay_t *r) {
  if (!r) return;
  shutdown(r->listen_fd, SHUT_RDWR); /* wakes accept with an error */
  pthread_join(r->thread, NULL);
  close(r->listen_fd);
  unlink(r->path);
  rmdir(r->dir);
  shared_put(r->sh);
  free(r);
}
