/* A small HTTP/1.1 server on a libuv loop (net/http.h): the daemon's Prometheus and weights endpoints and
 * `longtail serve`. */
#include "net/http.h"

#include <ctype.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "util/error.h"

#define HEAD_MAX 16384

enum { READING, HANDLING, STREAMING, WRITING, CLOSING };

struct lt_http_conn {
  uv_tcp_t tcp;
  uv_timer_t timer;
  lt_http_server_t *srv;
  lt_http_conn_t *prev, *next;
  int state;
  int open_handles;
  int gone;  /* the client left while the handler worked */
  char *buf; /* head + body as received */
  size_t len, cap;
  size_t head_len;  /* bytes up to and including the blank line; 0 until seen */
  size_t body_len;  /* from Content-Length */
  size_t path_off;  /* the method is at 0; both NUL-terminated in buf */
  size_t auth_off;  /* the Authorization value in buf; 0: none */
  size_t key_off;   /* the X-Api-Key value in buf; 0: none */
  size_t range_off; /* the Range value in buf; 0: none */
  size_t inm_off;   /* the If-None-Match value in buf; 0: none */
  uv_write_t wr;
  char *out;
  /* streaming a file */
  uv_fs_t fs;
  uv_file fd;
  int64_t off, size;
  char *chunk;
  int fs_busy;     /* a read is in flight: memory is freed by its callback */
  int64_t *sent;   /* lt_http_file_opts_t.sent: body bytes written so far are added here */
  int64_t writing; /* body bytes of the write in flight */
  int freed;       /* handles closed while a read was in flight */
  lt_http_target_t target;
};

struct lt_http_server {
  uv_tcp_t tcp;
  uv_loop_t *loop;
  lt_http_opts_t o;
  lt_http_handler h;
  void *ud;
  lt_http_conn_t *conns;
  int nconns;
  int closing;
  int port;
  void (*done)(void *);
  void *done_ud;
};

static void server_maybe_done(lt_http_server_t *s);

static void conn_release(lt_http_conn_t *c) {
  if (c->fd >= 0) {
    uv_fs_t req;
    uv_fs_close(NULL, &req, c->fd, NULL);
  }
  free(c->buf);
  free(c->out);
  free(c->chunk);
  free(c);
}

static void conn_free(uv_handle_t *h) {
  lt_http_conn_t *c = h->data;
  if (--c->open_handles > 0) return;
  lt_http_server_t *s = c->srv;
  if (c->prev) c->prev->next = c->next;
  else s->conns = c->next;
  if (c->next) c->next->prev = c->prev;
  s->nconns--;
  if (c->fs_busy) c->freed = 1; /* the read's callback releases it */
  else conn_release(c);
  server_maybe_done(s);
}

static void conn_close(lt_http_conn_t *c) {
  if (c->state == CLOSING) return;
  c->state = CLOSING;
  uv_close((uv_handle_t *)&c->tcp, conn_free);
  uv_close((uv_handle_t *)&c->timer, conn_free);
}

static const char *reason(int status) {
  switch (status) {
  case 100: return "Continue";
  case 200: return "OK";
  case 400: return "Bad Request";
  case 401: return "Unauthorized";
  case 404: return "Not Found";
  case 405: return "Method Not Allowed";
  case 408: return "Request Timeout";
  case 411: return "Length Required";
  case 413: return "Payload Too Large";
  case 429: return "Too Many Requests";
  case 431: return "Request Header Fields Too Large";
  case 500: return "Internal Server Error";
  case 501: return "Not Implemented";
  case 503: return "Service Unavailable";
  default: return "Status";
  }
}

static void on_written(uv_write_t *w, int status) { conn_close(w->data); }

int lt_http_conn_alive(const lt_http_conn_t *c) { return !c->gone; }

/* Sends head and body, then closes. */
static int respond_raw(lt_http_conn_t *c, const char *head, size_t n, const char *body, size_t len) {
  if (c->gone || c->state == CLOSING || c->state == WRITING || c->state == STREAMING) {
    if (c->state == HANDLING || c->state == STREAMING) conn_close(c); /* gone: the handles were kept for this call */
    return LT_ECANCELED;
  }
  c->out = malloc(n + len);
  if (!c->out) {
    conn_close(c);
    return LT_ENOMEM;
  }
  memcpy(c->out, head, n);
  if (len) memcpy(c->out + n, body, len);
  uv_buf_t b = uv_buf_init(c->out, (unsigned)(n + len));
  c->state = WRITING;
  c->wr.data = c;
  uv_read_stop((uv_stream_t *)&c->tcp);
  uv_timer_stop(&c->timer);
  if (uv_write(&c->wr, (uv_stream_t *)&c->tcp, &b, 1, on_written) < 0) {
    conn_close(c);
    return LT_EIO;
  }
  return 0;
}

int lt_http_respond(lt_http_conn_t *c, int status, const char *ctype, const char *body, size_t len) {
  char head[256];
  int n = snprintf(head, sizeof head,
                   "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n", status,
                   reason(status), ctype ? ctype : "text/plain; charset=utf-8", len);
  return respond_raw(c, head, (size_t)n, body, len);
}

/* One queued chunk of a streamed response; freed by its write callback. */
typedef struct {
  uv_write_t wr;
  lt_http_conn_t *c;
  int last;
  char data[];
} stream_chunk_t;

static void on_stream_written(uv_write_t *w, int status) {
  stream_chunk_t *k = w->data;
  lt_http_conn_t *c = k->c;
  int last = k->last;
  free(k);
  if (status == UV_ECANCELED) return; /* the connection is closing: c may be on its way out */
  if (status < 0) c->gone = 1;
  if (last) conn_close(c);
}

/* Queues raw bytes (a chunk with its framing, or the head) on the stream. */
static int stream_queue(lt_http_conn_t *c, const char *pre, size_t plen, const char *data, size_t len, int last) {
  stream_chunk_t *k = malloc(sizeof *k + plen + len + 2);
  if (!k) return LT_ENOMEM;
  k->c = c;
  k->last = last;
  memcpy(k->data, pre, plen);
  if (len) memcpy(k->data + plen, data, len);
  size_t n = plen + len;
  if (len) {
    memcpy(k->data + n, "\r\n", 2);
    n += 2;
  }
  k->wr.data = k;
  uv_buf_t b = uv_buf_init(k->data, (unsigned)n);
  if (uv_write(&k->wr, (uv_stream_t *)&c->tcp, &b, 1, on_stream_written) < 0) {
    free(k);
    c->gone = 1;
    return LT_EIO;
  }
  return 0;
}

int lt_http_stream_begin(lt_http_conn_t *c, int status, const char *ctype) {
  if (c->gone || c->state != HANDLING) return LT_ECANCELED;
  char head[256];
  int n = snprintf(head, sizeof head,
                   "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nCache-Control: no-cache\r\n"
                   "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n",
                   status, reason(status), ctype ? ctype : "text/event-stream");
  c->state = STREAMING;
  return stream_queue(c, head, (size_t)n, NULL, 0, 0);
}

int lt_http_stream_write(lt_http_conn_t *c, const char *data, size_t len) {
  if (c->gone || c->state != STREAMING) return LT_ECANCELED;
  if (!len) return 0; /* an empty chunk would end the body */
  char pre[24];
  int n = snprintf(pre, sizeof pre, "%zx\r\n", len);
  return stream_queue(c, pre, (size_t)n, data, len, 0);
}

void lt_http_stream_end(lt_http_conn_t *c) {
  if (c->state == CLOSING) return;
  if (c->gone || c->state != STREAMING || stream_queue(c, "0\r\n\r\n", 5, NULL, 0, 1) < 0) conn_close(c);
  else c->state = WRITING;
}

#define CHUNK (1 << 18)

static void file_done(lt_http_conn_t *c) {
  uv_fs_t req;
  if (c->fd >= 0) uv_fs_close(NULL, &req, c->fd, NULL); /* closing a regular file does not block */
  c->fd = -1;
  conn_close(c);
}

static void on_chunk_read(uv_fs_t *r);

static void on_chunk_written(uv_write_t *w, int status) {
  lt_http_conn_t *c = w->data;
  if (status >= 0 && c->sent) *c->sent += c->writing; /* what reached the socket, not what was planned */
  c->writing = 0;
  if (status < 0 || c->gone || c->off >= c->size) {
    file_done(c);
    return;
  }
  int64_t want = c->size - c->off < CHUNK ? c->size - c->off : CHUNK; /* a range ends before the file */
  uv_buf_t b = uv_buf_init(c->chunk, (unsigned)want);
  c->fs.data = c;
  if (uv_fs_read(c->srv->loop, &c->fs, c->fd, &b, 1, c->off, on_chunk_read) < 0) file_done(c);
  else c->fs_busy = 1;
}

static void on_chunk_read(uv_fs_t *r) {
  lt_http_conn_t *c = r->data;
  ssize_t n = r->result;
  uv_fs_req_cleanup(r);
  c->fs_busy = 0;
  if (c->freed) {
    conn_release(c);
    return;
  }
  if (n <= 0 || c->state == CLOSING) { /* the file shrank under us: the client sees a short body */
    file_done(c);
    return;
  }
  c->off += n;
  c->writing = n;
  uv_buf_t b = uv_buf_init(c->chunk, (unsigned)n);
  c->wr.data = c;
  if (uv_write(&c->wr, (uv_stream_t *)&c->tcp, &b, 1, on_chunk_written) < 0) file_done(c);
}

/* "bytes=a-b", "bytes=a-" or "bytes=-n" against a file of `size` bytes: 1 and [*from, *to) when satisfiable,
 * 0 when absent or not a single byte range (answered whole, as RFC 9110 allows), -1 when unsatisfiable. */
static int parse_range(const char *v, int64_t size, int64_t *from, int64_t *to) {
  if (!v || strncmp(v, "bytes=", 6) || strchr(v, ',')) return 0;
  const char *p = v + 6;
  char *e;
  if (*p == '-') {
    long long n = strtoll(p + 1, &e, 10);
    if (e == p + 1 || *e || n < 0) return 0;
    if (n == 0) return -1;
    *from = n > size ? 0 : size - n;
    *to = size;
    return size > 0 ? 1 : -1;
  }
  long long a = strtoll(p, &e, 10);
  if (e == p || *e != '-' || a < 0) return 0;
  p = e + 1;
  long long b = size - 1;
  if (*p) {
    b = strtoll(p, &e, 10);
    if (e == p || *e || b < a) return 0;
  }
  if (a >= size) return -1;
  *from = a;
  *to = (b >= size ? size - 1 : b) + 1;
  return 1;
}

int lt_http_respond_file(lt_http_conn_t *c, const char *ctype, const char *path) {
  return lt_http_respond_file_opts(c, ctype, path, NULL);
}

int lt_http_respond_file_opts(lt_http_conn_t *c, const char *ctype, const char *path, const lt_http_file_opts_t *o) {
  if (c->gone || c->state != HANDLING) return lt_http_respond(c, 500, NULL, "", 0);
  uv_fs_t req;
  c->fd = uv_fs_open(NULL, &req, path, O_RDONLY | O_CLOEXEC, 0, NULL);
  uv_fs_req_cleanup(&req);
  if (c->fd < 0 || uv_fs_fstat(NULL, &req, c->fd, NULL) < 0 || !(c->chunk = malloc(CHUNK))) {
    if (c->fd >= 0) uv_fs_close(NULL, &req, c->fd, NULL);
    c->fd = -1;
    static const char nf[] = "not found\n";
    return lt_http_respond(c, 404, NULL, nf, sizeof nf - 1);
  }
  int64_t total = (int64_t)req.statbuf.st_size;
  uv_fs_req_cleanup(&req);
  char extra[512] = "";
  if (o && o->etag) {
    /* An immutable file's validator: a cache revalidating it gets 304 and keeps its copy. */
    const char *inm = c->inm_off ? c->buf + c->inm_off : NULL;
    if (inm && (strstr(inm, o->etag) || !strcmp(inm, "*"))) {
      uv_fs_close(NULL, &req, c->fd, NULL);
      c->fd = -1;
      char h[400];
      int n = snprintf(h, sizeof h, "HTTP/1.1 304 Not Modified\r\nETag: %s\r\n%s%s%sConnection: close\r\n\r\n", o->etag,
                       o->cache_control ? "Cache-Control: " : "", o->cache_control ? o->cache_control : "",
                       o->cache_control ? "\r\n" : "");
      return respond_raw(c, h, (size_t)n, NULL, 0);
    }
    snprintf(extra, sizeof extra, "ETag: %s\r\n", o->etag);
  }
  if (o && o->cache_control)
    snprintf(extra + strlen(extra), sizeof extra - strlen(extra), "Cache-Control: %s\r\n", o->cache_control);
  int64_t from = 0, to = total;
  int ranged = o && o->ranges ? parse_range(c->range_off ? c->buf + c->range_off : NULL, total, &from, &to) : 0;
  if (ranged < 0) {
    uv_fs_close(NULL, &req, c->fd, NULL);
    c->fd = -1;
    char h[256];
    int n = snprintf(h, sizeof h,
                     "HTTP/1.1 416 Range Not Satisfiable\r\nContent-Range: bytes */%lld\r\n"
                     "Content-Length: 0\r\nConnection: close\r\n\r\n",
                     (long long)total);
    return respond_raw(c, h, (size_t)n, NULL, 0);
  }
  c->off = from;
  c->size = to;
  c->sent = o ? o->sent : NULL;
  char head[1024], cr[128] = "";
  if (ranged)
    snprintf(cr, sizeof cr, "Content-Range: bytes %lld-%lld/%lld\r\n", (long long)from, (long long)to - 1,
             (long long)total);
  int n = snprintf(head, sizeof head,
                   "HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %lld\r\n%s%s%sConnection: close\r\n\r\n",
                   ranged ? "206 Partial Content" : "200 OK", ctype ? ctype : "application/octet-stream",
                   (long long)(to - from), cr, o && o->ranges ? "Accept-Ranges: bytes\r\n" : "", extra);
  if (!(c->out = malloc((size_t)n))) {
    file_done(c);
    return LT_ENOMEM;
  }
  memcpy(c->out, head, (size_t)n);
  c->state = WRITING;
  uv_read_stop((uv_stream_t *)&c->tcp);
  uv_timer_stop(&c->timer);
  uv_buf_t b = uv_buf_init(c->out, (unsigned)n);
  c->wr.data = c;
  if (uv_write(&c->wr, (uv_stream_t *)&c->tcp, &b, 1, on_chunk_written) < 0) {
    file_done(c);
    return LT_EIO;
  }
  return 0;
}

/* An error answer for a request that never reached the handler. */
static void reject(lt_http_conn_t *c, int status, const char *why) {
  c->state = HANDLING;
  lt_http_respond(c, status, NULL, why, strlen(why));
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *b) {
  lt_http_conn_t *c = h->data;
  if (c->state != READING) { /* draining: a small scratch buffer detects EOF */
    static char scratch[512];
    *b = uv_buf_init(scratch, sizeof scratch);
    return;
  }
  size_t want = c->len + 4096;
  if (want > c->cap) {
    char *nb = realloc(c->buf, want + 1);
    if (!nb) {
      *b = uv_buf_init(NULL, 0);
      return;
    }
    c->buf = nb;
    c->cap = want;
  }
  *b = uv_buf_init(c->buf + c->len, (unsigned)(c->cap - c->len));
}

/* Parses the head once the blank line is in; returns 0, or an HTTP status to
 * reject with. */
static int parse_head(lt_http_conn_t *c) {
  char *p = c->buf, *end = c->buf + c->head_len - 2; /* at the final CRLF */
  char *eol = strstr(p, "\r\n");
  if (!eol || eol > end) return 400;
  *eol = 0;
  char *sp1 = strchr(p, ' '), *sp2 = sp1 ? strchr(sp1 + 1, ' ') : NULL;
  /* The version is all that follows the path: a line cut by bare LFs would smuggle its "headers" into it. */
  if (!sp1 || !sp2 || strncmp(sp2 + 1, "HTTP/1.", 7) != 0 || !isdigit((unsigned char)sp2[8]) || sp2[9] || sp1 == p ||
      sp2 == sp1 + 1 || sp1[1] != '/')
    return 400;
  *sp1 = *sp2 = 0;
  c->path_off = (size_t)(sp1 + 1 - c->buf);
  long long clen = 0;
  int expect = 0;
  for (char *line = eol + 2; line < end;) {
    char *e = strstr(line, "\r\n");
    if (!e) return 400;
    *e = 0;
    char *colon = strchr(line, ':');
    if (!colon) return 400;
    *colon = 0;
    char *v = colon + 1;
    while (*v == ' ' || *v == '\t') v++;
    if (!strcasecmp(line, "Content-Length")) {
      char *q;
      clen = strtoll(v, &q, 10);
      if (q == v || clen < 0) return 400;
    } else if (!strcasecmp(line, "Transfer-Encoding")) {
      return 411; /* chunked bodies: clients send Content-Length instead */
    } else if (!strcasecmp(line, "Authorization")) {
      c->auth_off = (size_t)(v - c->buf);
    } else if (!strcasecmp(line, "X-Api-Key")) {
      c->key_off = (size_t)(v - c->buf);
    } else if (!strcasecmp(line, "Range")) {
      c->range_off = (size_t)(v - c->buf);
    } else if (!strcasecmp(line, "If-None-Match")) {
      c->inm_off = (size_t)(v - c->buf);
    } else if (!strcasecmp(line, "Expect") && !strcasecmp(v, "100-continue")) {
      expect = 1;
    }
    line = e + 2;
  }
  if ((size_t)clen > c->srv->o.max_body) return 413;
  c->body_len = (size_t)clen;
  if (expect && c->len < c->head_len + c->body_len) {
    static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
    uv_buf_t b = uv_buf_init((char *)cont, sizeof cont - 1);
    uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
  }
  return 0;
}

static void on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *b) {
  lt_http_conn_t *c = st->data;
  if (n < 0) {
    if (c->state == HANDLING || c->state == STREAMING) {
      /* Keep the handles until the handler answers, so its pointer stays valid. */
      c->gone = 1;
      uv_read_stop(st);
    } else {
      conn_close(c);
    }
    return;
  }
  if (c->state != READING || n == 0) return;
  c->len += (size_t)n;
  c->buf[c->len] = 0;
  if (!c->head_len) {
    char *e = strstr(c->buf, "\r\n\r\n");
    if (!e) {
      if (c->len > HEAD_MAX) reject(c, 431, "request head too large\n");
      else if (memchr(c->buf, 0, c->len)) reject(c, 400, "malformed request\n");
      return;
    }
    c->head_len = (size_t)(e - c->buf) + 4;
    if (c->head_len > HEAD_MAX) return reject(c, 431, "request head too large\n");
    int st_code = parse_head(c);
    if (st_code == 413) return reject(c, 413, "request body too large\n");
    if (st_code) return reject(c, st_code, st_code == 411 ? "send a Content-Length\n" : "malformed request\n");
  }
  if (c->len < c->head_len + c->body_len) return;
  c->buf[c->head_len + c->body_len] = 0;
  if (lt_http_target_parse(c->buf + c->path_off, &c->target) < 0) {
    char why[300];
    snprintf(why, sizeof why, "malformed request target: %s\n", lt_error_msg());
    return reject(c, 400, why);
  }
  lt_http_req_t req = {.method = c->buf,
                       .path = c->target.path,
                       .target = &c->target,
                       .body = c->buf + c->head_len,
                       .body_len = c->body_len,
                       .authorization = c->auth_off ? c->buf + c->auth_off : NULL,
                       .api_key = c->key_off ? c->buf + c->key_off : NULL};
  c->state = HANDLING;
  uv_timer_stop(&c->timer);
  c->srv->h(c, &req, c->srv->ud);
}

/* ---- the request target ---- */

static int hexval(char c) {
  return c >= '0' && c <= '9'   ? c - '0'
         : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                : -1;
}

/* Percent-decodes s[0..n) into out ('+' is a space where plus); the length, or -1 on a bad escape, a NUL or no
 * room. */
static int percent_decode(const char *s, size_t n, char *out, size_t cap, int plus) {
  size_t j = 0;
  for (size_t i = 0; i < n; i++) {
    int c = (unsigned char)s[i];
    if (c == '%') {
      if (i + 2 >= n) return -1;
      int hi = hexval(s[i + 1]), lo = hexval(s[i + 2]);
      if (hi < 0 || lo < 0) return -1;
      c = hi * 16 + lo;
      i += 2;
    } else if (c == '+' && plus) {
      c = ' ';
    }
    if (c == 0 || j + 1 >= cap) return -1;
    out[j++] = (char)c;
  }
  out[j] = 0;
  return (int)j;
}

int lt_http_target_parse(const char *target, lt_http_target_t *t) {
  t->nparams = 0;
  const char *qs = strchr(target, '?');
  size_t plen = qs ? (size_t)(qs - target) : strlen(target);
  if (percent_decode(target, plen, t->path, sizeof t->path, 0) < 0)
    return lt_error_set(LT_EINVAL, "the path: a bad escape, an escaped NUL or over %zu bytes", sizeof t->path - 1);
  size_t used = 0;
  for (const char *p = qs ? qs + 1 : NULL; p && *p;) {
    const char *amp = strchr(p, '&'), *end = amp ? amp : p + strlen(p);
    if (end > p) { /* "a&&b": an empty pair is nothing */
      if (t->nparams == LT_HTTP_MAX_PARAMS)
        return lt_error_set(LT_EINVAL, "more than %d query parameters", LT_HTTP_MAX_PARAMS);
      const char *eq = memchr(p, '=', (size_t)(end - p)), *kend = eq ? eq : end;
      lt_http_param_t *q = &t->params[t->nparams];
      int k = percent_decode(p, (size_t)(kend - p), t->store + used, sizeof t->store - used, 1), v = -1;
      if (k == 0) return lt_error_set(LT_EINVAL, "a query parameter without a name");
      if (k > 0) {
        q->key = t->store + used;
        used += (size_t)k + 1;
        v = percent_decode(eq ? eq + 1 : end, eq ? (size_t)(end - eq - 1) : 0, t->store + used, sizeof t->store - used,
                           1);
      }
      if (v < 0)
        return lt_error_set(LT_EINVAL, "the query: a bad escape, an escaped NUL or over %zu bytes", sizeof t->store);
      q->value = t->store + used;
      used += (size_t)v + 1;
      t->nparams++;
    }
    p = amp ? amp + 1 : end;
  }
  return 0;
}

const char *lt_http_param(const lt_http_target_t *t, const char *key) {
  for (int i = 0; i < t->nparams; i++)
    if (!strcmp(t->params[i].key, key)) return t->params[i].value;
  return NULL;
}

static void on_timeout(uv_timer_t *t) {
  lt_http_conn_t *c = t->data;
  if (c->state == READING) reject(c, 408, "request not complete in time\n");
}

static void on_connection(uv_stream_t *ls, int status) {
  lt_http_server_t *s = ls->data;
  if (status < 0) return;
  lt_http_conn_t *c = calloc(1, sizeof *c);
  if (!c) return;
  c->srv = s;
  c->fd = -1;
  if (uv_tcp_init(s->loop, &c->tcp) != 0) { /* left in the backlog, as when out of memory */
    free(c);
    return;
  }
  LT_ASSERT(uv_timer_init(s->loop, &c->timer) == 0, "uv_timer_init");
  c->tcp.data = c->timer.data = c;
  c->open_handles = 2;
  c->next = s->conns;
  if (s->conns) s->conns->prev = c;
  s->conns = c;
  s->nconns++;
  if (uv_accept(ls, (uv_stream_t *)&c->tcp) < 0 || s->nconns > s->o.max_conns) {
    conn_close(c);
    return;
  }
  uv_timer_start(&c->timer, on_timeout, (uint64_t)s->o.timeout_ms, 0);
  if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) < 0) conn_close(c);
}

int lt_http_listen(uv_loop_t *loop, const lt_http_opts_t *o, lt_http_handler h, void *ud, lt_http_server_t **out) {
  lt_http_server_t *s = calloc(1, sizeof *s);
  if (!s) return lt_error_set(LT_ENOMEM, "http server: out of memory");
  s->loop = loop;
  s->o = *o;
  if (!s->o.max_conns) s->o.max_conns = 64;
  if (!s->o.timeout_ms) s->o.timeout_ms = 10000;
  s->h = h;
  s->ud = ud;
  struct sockaddr_storage addr;
  int rc = strchr(o->host, ':') ? uv_ip6_addr(o->host, o->port, (struct sockaddr_in6 *)&addr)
                                : uv_ip4_addr(o->host, o->port, (struct sockaddr_in *)&addr);
  if (rc < 0) {
    free(s);
    return lt_error_set(LT_EINVAL, "http: '%s' is not an IP address", o->host);
  }
  if ((rc = uv_tcp_init(loop, &s->tcp)) != 0) {
    free(s);
    return lt_error_set(LT_ESYS, "http: cannot make a socket: %s", uv_strerror(rc));
  }
  s->tcp.data = s;
  if ((rc = uv_tcp_bind(&s->tcp, (struct sockaddr *)&addr, 0)) < 0 ||
      (rc = uv_listen((uv_stream_t *)&s->tcp, 128, on_connection)) < 0) {
    uv_close((uv_handle_t *)&s->tcp, (uv_close_cb)free);
    return lt_error_set(LT_EUNREACH, "http: cannot listen on %s:%d: %s", o->host, o->port, uv_strerror(rc));
  }
  struct sockaddr_storage got;
  int glen = sizeof got;
  uv_tcp_getsockname(&s->tcp, (struct sockaddr *)&got, &glen);
  s->port = got.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&got)->sin6_port)
                                      : ntohs(((struct sockaddr_in *)&got)->sin_port);
  *out = s;
  return 0;
}

int lt_http_port(const lt_http_server_t *s) { return s->port; }

static void server_maybe_done(lt_http_server_t *s) {
  if (s->closing != 2 || s->nconns) return;
  void (*done)(void *) = s->done;
  void *ud = s->done_ud;
  free(s);
  if (done) done(ud);
}

static void on_listener_closed(uv_handle_t *h) {
  lt_http_server_t *s = h->data;
  s->closing = 2;
  server_maybe_done(s);
}

void lt_http_close(lt_http_server_t *s, void (*done)(void *), void *ud) {
  if (!s || s->closing) return;
  s->closing = 1;
  s->done = done;
  s->done_ud = ud;
  for (lt_http_conn_t *c = s->conns; c; c = c->next) conn_close(c);
  uv_close((uv_handle_t *)&s->tcp, on_listener_closed);
}
