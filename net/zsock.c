/* A ZeroMQ socket on a libuv loop (net/zsock.h): multipart messages in and out, ZMQ_FD drained on every wake. */
#include "net/zsock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "net/curve.h"
#include "util/error.h"

#define MAX_PARTS (LT_PROTO_MAX_FRAMES + 1)
#define DRAIN_BATCH 256 /* messages per loop turn, so one busy peer cannot starve the loop */

struct lt_zsock {
  uv_loop_t *loop;
  void *sock;
  uv_poll_t poll;
  uv_idle_t idle; /* re-drains when input is pending after a send or a full batch */
  lt_zsock_recv_cb cb;
  void *ud;
  lt_zsock_t *mon; /* the PAIR socket reading this socket's monitor events, or NULL */
  lt_zsock_event_cb ecb;
  void *eud;
  int closing, handles;
  void (*done)(void *);
  void *done_ud;
};

static int pending_input(lt_zsock_t *z) {
  int ev = 0;
  size_t len = sizeof ev;
  return zmq_getsockopt(z->sock, ZMQ_EVENTS, &ev, &len) == 0 && (ev & ZMQ_POLLIN);
}

static void drain(lt_zsock_t *z);

static void zsock_on_idle(uv_idle_t *h) {
  lt_zsock_t *z = h->data;
  uv_idle_stop(h);
  drain(z);
}

static void drain(lt_zsock_t *z) {
  zmq_msg_t parts[MAX_PARTS];
  lt_frame_t frames[MAX_PARTS];
  for (int batch = 0; batch < DRAIN_BATCH && !z->closing && pending_input(z); batch++) {
    int n = 0, more = 1, overflow = 0;
    while (more) {
      zmq_msg_t tmp, *m = n < MAX_PARTS ? &parts[n] : &tmp;
      zmq_msg_init(m);
      if (zmq_msg_recv(m, z->sock, ZMQ_DONTWAIT) < 0) {
        zmq_msg_close(m);
        break;
      }
      more = zmq_msg_more(m);
      if (n < MAX_PARTS) {
        frames[n].data = zmq_msg_data(m);
        frames[n].len = zmq_msg_size(m);
        frames[n].owned = 0;
        n++;
      } else {
        overflow = 1;
        zmq_msg_close(m);
      }
    }
    if (!overflow && n > 0) z->cb(z, frames, n, z->ud); /* more frames than any message has: dropped */
    for (int i = 0; i < n; i++) zmq_msg_close(&parts[i]);
  }
  if (!z->closing && pending_input(z)) uv_idle_start(&z->idle, zsock_on_idle);
}

static void zsock_on_poll(uv_poll_t *h, int status, int events) {
  (void)status;
  (void)events;
  drain(h->data);
}

int lt_zsock_open(uv_loop_t *loop, void *ctx, int type, lt_zsock_t **out) {
  *out = NULL;
  lt_zsock_t *z = calloc(1, sizeof *z);
  if (!z) return lt_error_set(LT_ENOMEM, "zsock: out of memory");
  z->loop = loop;
  z->sock = zmq_socket(ctx, type);
  if (!z->sock) {
    free(z);
    return lt_error_set(LT_ESYS, "zmq_socket: %s", zmq_strerror(zmq_errno()));
  }
  int linger = 0;
  zmq_setsockopt(z->sock, ZMQ_LINGER, &linger, sizeof linger);
  *out = z;
  return 0;
}

void *lt_zsock_handle(lt_zsock_t *z) { return z->sock; }

int lt_zsock_start(lt_zsock_t *z, lt_zsock_recv_cb cb, void *ud) {
  z->cb = cb;
  z->ud = ud;
  int fd;
  size_t len = sizeof fd;
  if (zmq_getsockopt(z->sock, ZMQ_FD, &fd, &len) != 0)
    return lt_error_set(LT_ESYS, "ZMQ_FD: %s", zmq_strerror(zmq_errno()));
  if (uv_poll_init(z->loop, &z->poll, fd) != 0) return lt_error_set(LT_ESYS, "uv_poll_init failed");
  z->poll.data = z;
  LT_ASSERT(uv_idle_init(z->loop, &z->idle) == 0, "uv_idle_init");
  z->idle.data = z;
  z->handles = 2;
  uv_poll_start(&z->poll, UV_READABLE, zsock_on_poll);
  /* Messages may already be queued before the first edge. */
  uv_idle_start(&z->idle, zsock_on_idle);
  return 0;
}

int lt_zsock_send(lt_zsock_t *z, const lt_frame_t *frames, int n) {
  for (int i = 0; i < n; i++) {
    int flags = ZMQ_DONTWAIT | (i + 1 < n ? ZMQ_SNDMORE : 0);
    if (zmq_send(z->sock, frames[i].data, frames[i].len, flags) < 0) {
      int e = zmq_errno();
      /* A partly sent multipart message is dropped whole by ZeroMQ when the
       * sequence is abandoned; report why. */
      if (e == EAGAIN) return lt_error_set(LT_EBUSY, "send: peer queue full");
      if (e == EHOSTUNREACH) return lt_error_set(LT_EUNREACH, "send: peer is gone");
      return lt_error_set(LT_ESYS, "zmq_send: %s", zmq_strerror(e));
    }
  }
  if (z->handles && pending_input(z)) uv_idle_start(&z->idle, zsock_on_idle);
  return 0;
}

int lt_zsock_send_msg(lt_zsock_t *z, const void *rid, size_t rid_len, const lt_msg_t *m) {
  lt_frames_t fr;
  int rc = lt_proto_encode(m, &fr);
  if (rc < 0) return rc;
  lt_frame_t all[MAX_PARTS];
  int n = 0;
  if (rid) all[n++] = (lt_frame_t){(void *)rid, rid_len, 0};
  for (int i = 0; i < fr.n; i++) all[n++] = fr.f[i];
  rc = lt_zsock_send(z, all, n);
  lt_frames_free(&fr);
  return rc;
}

static void on_closed(uv_handle_t *h) {
  lt_zsock_t *z = h->data;
  if (--z->handles > 0) return;
  void (*done)(void *) = z->done;
  void *ud = z->done_ud;
  free(z);
  if (done) done(ud);
}

/* One monitor event: a 6-byte frame (event, value) and the endpoint. */
static void on_monitor(lt_zsock_t *m, const lt_frame_t *f, int n, void *ud) {
  lt_zsock_t *z = ud;
  if (n != 2 || f[0].len != 6 || z->closing) return;
  uint16_t ev;
  uint32_t val;
  memcpy(&ev, f[0].data, 2);
  memcpy(&val, (const char *)f[0].data + 2, 4);
  char ep[256];
  snprintf(ep, sizeof ep, "%.*s", (int)(f[1].len < sizeof ep ? f[1].len : sizeof ep - 1), (const char *)f[1].data);
  z->ecb(ev, val, ep, z->eud);
}

int lt_zsock_monitor(lt_zsock_t *z, void *ctx, int events, lt_zsock_event_cb cb, void *ud) {
  static unsigned seq; /* inproc names are per context: a fresh one per monitored socket */
  char addr[64];
  snprintf(addr, sizeof addr, "inproc://lt-zsock-monitor-%p-%u", (void *)z, ++seq);
  if (zmq_socket_monitor(z->sock, addr, events) != 0)
    return lt_error_set(LT_ESYS, "zmq_socket_monitor: %s", zmq_strerror(zmq_errno()));
  int rc = lt_zsock_open(z->loop, ctx, ZMQ_PAIR, &z->mon);
  if (rc < 0) return rc;
  z->ecb = cb;
  z->eud = ud;
  if (zmq_connect(z->mon->sock, addr) != 0) {
    rc = lt_error_set(LT_ESYS, "monitor %s: %s", addr, zmq_strerror(zmq_errno()));
    lt_zsock_close(z->mon, NULL, NULL);
    z->mon = NULL;
    return rc;
  }
  return lt_zsock_start(z->mon, on_monitor, z);
}

void lt_zsock_close(lt_zsock_t *z, void (*done)(void *), void *ud) {
  if (!z) return;
  lt_zsock_close(z->mon, NULL, NULL);
  z->mon = NULL;
  z->closing = 1;
  z->done = done;
  z->done_ud = ud;
  if (z->handles) {
    uv_poll_stop(&z->poll);
    uv_idle_stop(&z->idle);
    /* The fd belongs to the zmq socket: stop polling before closing it. */
    uv_close((uv_handle_t *)&z->poll, on_closed);
    uv_close((uv_handle_t *)&z->idle, on_closed);
    zmq_close(z->sock);
  } else {
    zmq_close(z->sock);
    free(z);
    if (done) done(ud);
  }
}

int lt_zsock_listen(uv_loop_t *loop, void *ctx, const char *endpoint, int64_t max_message, const char *secret_z85,
                    const char *what, lt_zsock_t **out, char *bound, size_t cap) {
  int rc = lt_zsock_open(loop, ctx, ZMQ_ROUTER, out);
  if (rc < 0) return rc;
  void *s = lt_zsock_handle(*out);
  int one = 1, linger = 2000; /* a last message (BYE) must leave before the socket closes */
  zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
  zmq_setsockopt(s, ZMQ_ROUTER_HANDOVER, &one, sizeof one);
  zmq_setsockopt(s, ZMQ_ROUTER_MANDATORY, &one, sizeof one);
  zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &max_message, sizeof max_message);
  if (secret_z85 && (rc = lt_zsock_curve_server(*out, secret_z85)) < 0) return rc;
  if (zmq_bind(s, endpoint) != 0)
    return lt_error_set(LT_EUNREACH, "%s: cannot bind %s: %s", what, endpoint, zmq_strerror(zmq_errno()));
  return lt_zsock_last_endpoint(*out, bound, cap);
}

int lt_zsock_last_endpoint(lt_zsock_t *z, char *out, size_t cap) {
  size_t len = cap;
  if (zmq_getsockopt(z->sock, ZMQ_LAST_ENDPOINT, out, &len) != 0)
    return lt_error_set(LT_ESYS, "ZMQ_LAST_ENDPOINT: %s", zmq_strerror(zmq_errno()));
  return 0;
}

int lt_endpoint_is_loopback(const char *ep) {
  if (strncmp(ep, "ipc://", 6) == 0 || strncmp(ep, "inproc://", 9) == 0) return 1;
  if (strncmp(ep, "tcp://", 6) != 0) return 0;
  const char *h = ep + 6;
  return strncmp(h, "127.", 4) == 0 || strncmp(h, "localhost:", 10) == 0 || strncmp(h, "[::1]:", 6) == 0;
}
