/* A real lt_http server on a libuv loop in this thread, and a client that sends it fuzz input over loopback TCP
 * (shared by the HTTP and OpenAI-layer fuzz targets and the tests that check their seed corpora).  The input goes
 * out in three writes with the loop turning between them, so the server also parses heads and bodies that arrive
 * in pieces; when the input has run out and the server says nothing more, the client shuts down its side (a
 * request left incomplete then ends as a peer that went away) and the exchange ends when the server closes. */
#ifndef LT_TESTS_FUZZ_HTTPSERVE_H
#define LT_TESTS_FUZZ_HTTPSERVE_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include "net/http.h"

typedef struct {
  uv_loop_t loop;
  lt_http_server_t *srv;
  int port;
} lt_fuzz_server_t;

/* Loop turns without a byte received before the client gives up waiting (each turn polls without sleeping). */
#define LT_FUZZ_IDLE_TURNS 64

static inline int lt_fuzz_server_start(lt_fuzz_server_t *s, size_t max_body, lt_http_handler h, void *ud) {
  if (uv_loop_init(&s->loop) != 0) return -1;
  lt_http_opts_t o = {.host = "127.0.0.1", .port = 0, .max_body = max_body, .max_conns = 64, .timeout_ms = 10000};
  if (lt_http_listen(&s->loop, &o, h, ud, &s->srv) < 0) return -1;
  s->port = lt_http_port(s->srv);
  return 0;
}

static inline void lt_fuzz_server_stop(lt_fuzz_server_t *s) {
  lt_http_close(s->srv, NULL, NULL);
  uv_run(&s->loop, UV_RUN_DEFAULT);
  uv_loop_close(&s->loop);
}

/* Returns what the server answered (malloc'd, NUL-terminated, *len bytes; "" when it closed without a word), or
 * NULL when no connection could be made. */
static inline char *lt_fuzz_server_exchange(lt_fuzz_server_t *s, const uint8_t *data, size_t size, size_t *len) {
  int c = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)s->port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (c < 0 || (connect(c, (struct sockaddr *)&a, sizeof a) != 0 && errno != EINPROGRESS)) {
    if (c >= 0) close(c);
    return NULL;
  }
  size_t cap = 4096, got = 0, off = 0, cuts[3] = {size / 3, 2 * size / 3, size};
  char *out = malloc(cap);
  int piece = 0, shut = 0, closed = 0;
  for (int idle = 0; out && !closed && idle < LT_FUZZ_IDLE_TURNS;) {
    int progress = 0;
    if (off < size) {
      ssize_t w = send(c, data + off, cuts[piece] - off, MSG_NOSIGNAL);
      if (w > 0) off += (size_t)w, progress = 1;
      else if (w < 0 && errno != EAGAIN && errno != EINTR) off = size; /* the server hung up: the rest is moot */
      if (off >= cuts[piece] && piece < 2) piece++;
    } else if (!shut && idle >= LT_FUZZ_IDLE_TURNS / 2) {
      shutdown(c, SHUT_WR);
      shut = 1;
      idle = 0;
    }
    uv_run(&s->loop, UV_RUN_NOWAIT);
    for (;;) {
      if (got + 1 >= cap) {
        char *n = realloc(out, cap *= 2);
        if (!n) break;
        out = n;
      }
      ssize_t r = recv(c, out + got, cap - got - 1, 0);
      if (r > 0) got += (size_t)r, progress = 1;
      else {
        closed = r == 0 || (errno != EAGAIN && errno != EINTR);
        break;
      }
    }
    idle = progress ? 0 : idle + 1;
  }
  close(c);
  for (int i = 0; i < 4; i++) uv_run(&s->loop, UV_RUN_NOWAIT); /* the server sees the close and frees */
  if (out) out[got] = 0;
  *len = got;
  return out;
}

/* The exchange of a POST to `route` whose body is data[0, size) (the fuzz targets of one API's request bodies). */
static inline char *lt_fuzz_server_post(lt_fuzz_server_t *s, const char *route, const uint8_t *data, size_t size,
                                        size_t *len) {
  char head[256];
  int n = snprintf(head, sizeof head, "POST %s HTTP/1.1\r\nHost: x\r\nX-Api-Key: k\r\nContent-Length: %zu\r\n\r\n",
                   route, size);
  uint8_t *req = malloc((size_t)n + size + 1);
  if (!req) return NULL;
  memcpy(req, head, (size_t)n);
  if (size) memcpy(req + n, data, size);
  char *out = lt_fuzz_server_exchange(s, req, (size_t)n + size, len);
  free(req);
  return out;
}

/* A handler that checks what it was given and answers with it: plainly, or streamed in chunks (paths under
 * /stream) to cover chunked responses. */
static inline void lt_fuzz_echo_request(lt_http_conn_t *c, const lt_http_req_t *req, void *ud) {
  if (!req->method[0] || req->path[0] != '/' || strlen(req->body) > req->body_len) abort();
  char head[128];
  int n = snprintf(head, sizeof head, "%.16s %zu\n", req->method, req->body_len);
  if (strncmp(req->path, "/stream", 7) == 0) {
    if (lt_http_stream_begin(c, 200, NULL) == 0) {
      lt_http_stream_write(c, head, (size_t)n);
      lt_http_stream_write(c, req->body, req->body_len);
    }
    lt_http_stream_end(c);
    return;
  }
  lt_http_respond(c, 200, NULL, head, (size_t)n);
}

/* The status of an answer ("HTTP/1.1 413 ..." → 413), 0 for none. */
static inline int lt_fuzz_status(const char *answer) {
  return strncmp(answer, "HTTP/1.1 ", 9) == 0 ? atoi(answer + 9) : 0;
}

#endif
