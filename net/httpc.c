/* The HTTP client: libcurl's multi-socket API driven by uv_poll and one
 * uv_timer, so requests never block the loop.  Each request owns a retry
 * timer; memory is released in close callbacks.  A download that breaks off
 * resumes where it stopped (a Range request on the next attempt; a server
 * that answers 200 instead of 206 sends the whole file again). */
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "net/http.h"
#include "util/buf.h"
#include "util/error.h"

struct sock;

struct lt_httpc {
  uv_loop_t *loop;
  struct sock *socks; /* sockets being polled */
  CURLM *multi;
  uv_timer_t timer;
  lt_httpc_req_t *reqs;
  int handles; /* open uv handles owned by the client (timer and polls) */
  int closing;
  void (*done)(void *);
  void *done_ud;
};

struct lt_httpc_req {
  lt_httpc_t *c;
  lt_httpc_req_t *prev, *next;
  CURL *easy; /* NULL between attempts */
  struct curl_slist *headers;
  char *url, *body, *out_path;
  FILE *out;           /* out_path's temporary file during an attempt */
  size_t out_len;      /* bytes in it */
  int64_t resume_from; /* this attempt asked for the bytes from here on */
  lt_httpc_opts_t o;
  int attempt;
  lt_buf_t resp;
  char errbuf[CURL_ERROR_SIZE];
  uv_timer_t retry;
  lt_httpc_cb cb;
  void *ud;
};

typedef struct sock {
  uv_poll_t poll;
  curl_socket_t fd;
  lt_httpc_t *c;
  struct sock *prev, *next;
} sock_t;

static void client_maybe_done(lt_httpc_t *c) {
  if (!c->closing || c->handles) return;
  void (*done)(void *) = c->done;
  void *ud = c->done_ud;
  free(c);
  if (done) done(ud);
}

static void handle_closed(uv_handle_t *h) {
  lt_httpc_t *c = h->data;
  c->handles--;
  client_maybe_done(c);
}

static void sock_closed(uv_handle_t *h) {
  sock_t *s = (sock_t *)h;
  lt_httpc_t *c = s->c;
  free(s);
  c->handles--;
  client_maybe_done(c);
}

static void req_closed(uv_handle_t *h) {
  lt_httpc_req_t *r = h->data;
  lt_httpc_t *c = r->c;
  free(r);
  c->handles--;
  client_maybe_done(c);
}

static void easy_done(lt_httpc_req_t *r) {
  if (!r->easy) return;
  if (r->c->multi) curl_multi_remove_handle(r->c->multi, r->easy);
  curl_easy_cleanup(r->easy);
  r->easy = NULL;
}

static void tmp_path(const lt_httpc_req_t *r, char *out, size_t cap) { snprintf(out, cap, "%s.part", r->out_path); }

enum { OUT_DROP, OUT_KEEP, OUT_PAUSE };

/* Ends an attempt's file: renamed into place (KEEP), left for the next attempt to resume (PAUSE), or removed. */
static int out_finish(lt_httpc_req_t *r, int how) {
  if (!r->out) return 0;
  char tmp[4200];
  tmp_path(r, tmp, sizeof tmp);
  int bad = fclose(r->out) != 0;
  r->out = NULL;
  if (how == OUT_PAUSE && !bad) return 0;
  if (how == OUT_KEEP && !bad && rename(tmp, r->out_path) == 0) return 0;
  unlink(tmp);
  return how == OUT_KEEP ? lt_error_set(LT_EIO, "%s: cannot write the download", r->out_path) : 0;
}

static void req_free(lt_httpc_req_t *r) {
  lt_httpc_t *c = r->c;
  easy_done(r);
  out_finish(r, OUT_DROP);
  if (r->out_path) { /* a paused partial download nobody will resume */
    char tmp[4200];
    tmp_path(r, tmp, sizeof tmp);
    unlink(tmp);
  }
  free(r->out_path);
  if (r->prev) r->prev->next = r->next;
  else c->reqs = r->next;
  if (r->next) r->next->prev = r->prev;
  curl_slist_free_all(r->headers);
  free(r->url);
  free(r->body);
  lt_buf_free(&r->resp);
  uv_close((uv_handle_t *)&r->retry, req_closed);
}

static size_t on_data(char *p, size_t size, size_t n, void *ud) {
  lt_httpc_req_t *r = ud;
  if (r->out) { /* only a 2xx answer goes to the file */
    long status = 0;
    curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &status);
    if (status >= 200 && status < 300) {
      if (r->resume_from > 0 && status != 206) { /* the range was ignored: the whole body comes again */
        if (fflush(r->out) != 0 || ftruncate(fileno(r->out), 0) != 0) return 0;
        r->resume_from = 0;
        r->out_len = 0;
      }
      if (fwrite(p, size, n, r->out) != n) return 0;
      r->out_len += size * n;
      return size * n;
    }
  }
  if (r->resp.len + size * n > (64u << 20)) return 0; /* a runaway answer: abort the transfer */
  lt_buf_append(&r->resp, p, size * n);
  return r->resp.oom ? 0 : size * n;
}

static int start_attempt(lt_httpc_req_t *r) {
  CURL *e = curl_easy_init();
  if (!e) return lt_error_set(LT_ENOMEM, "http client: curl_easy_init failed");
  r->easy = e;
  lt_buf_free(&r->resp);
  memset(&r->resp, 0, sizeof r->resp);
  r->resume_from = 0;
  if (r->out_path) {
    char tmp[4200];
    tmp_path(r, tmp, sizeof tmp);
    out_finish(r, OUT_PAUSE);
    /* What an earlier attempt of this request received stays: ask for the rest. */
    struct stat st;
    r->out_len = r->attempt > 0 && stat(tmp, &st) == 0 ? (size_t)st.st_size : 0;
    if (!(r->out = fopen(tmp, r->out_len ? "ab" : "wb"))) {
      curl_easy_cleanup(e);
      r->easy = NULL;
      return lt_error_set(LT_EIO, "%s: cannot create", tmp);
    }
  }
  r->errbuf[0] = 0;
  curl_easy_setopt(e, CURLOPT_URL, r->url);
  curl_easy_setopt(e, CURLOPT_PRIVATE, r);
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_data);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, r);
  curl_easy_setopt(e, CURLOPT_ERRORBUFFER, r->errbuf);
  curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)r->o.timeout_ms);
  curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)(r->o.timeout_ms < 10000 ? r->o.timeout_ms : 10000));
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
  if (r->out && r->out_len > 0) {
    r->resume_from = (int64_t)r->out_len;
    curl_easy_setopt(e, CURLOPT_RESUME_FROM_LARGE, (curl_off_t)r->resume_from);
  }
  if (r->body) {
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, r->body);
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE, (long)strlen(r->body));
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, r->headers);
  }
  if (curl_multi_add_handle(r->c->multi, e) != CURLM_OK) {
    curl_easy_cleanup(e);
    r->easy = NULL;
    return lt_error_set(LT_ESYS, "http client: curl_multi_add_handle failed");
  }
  return 0;
}

static void on_retry(uv_timer_t *t) {
  lt_httpc_req_t *r = t->data;
  if (start_attempt(r) < 0) {
    lt_httpc_cb cb = r->cb;
    void *ud = r->ud;
    char err[512];
    snprintf(err, sizeof err, "%s: %s", r->url, lt_error_msg());
    req_free(r);
    cb(LT_ENOMEM, 0, NULL, 0, err, ud);
  }
}

/* A transfer ended: answer, or try again after a back-off. */
static void finished(lt_httpc_req_t *r, CURLcode res) {
  long status = 0;
  curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &status);
  /* Worth another attempt: the server was down, slow, or dropped the connection. */
  int transient = res == CURLE_COULDNT_CONNECT || res == CURLE_OPERATION_TIMEDOUT || res == CURLE_SEND_ERROR ||
                  res == CURLE_RECV_ERROR || res == CURLE_GOT_NOTHING || res == CURLE_PARTIAL_FILE ||
                  (res == CURLE_OK && (status == 429 || status >= 500));
  int rc = 0;
  char err[1024] = "";
  if (status == 416 && r->resume_from > 0) { /* the partial file is not a prefix of this one: start over */
    out_finish(r, OUT_DROP);
    transient = 1;
  }
  if (res == CURLE_OPERATION_TIMEDOUT) {
    rc = LT_ETIMEDOUT;
    snprintf(err, sizeof err, "%s: no answer within %d ms", r->url, r->o.timeout_ms);
  } else if (res != CURLE_OK) {
    rc = LT_EUNREACH;
    snprintf(err, sizeof err, "%s: %s", r->url, r->errbuf[0] ? r->errbuf : curl_easy_strerror(res));
  } else if (status < 200 || status >= 300) {
    rc = LT_EREMOTE;
    snprintf(err, sizeof err, "%s: HTTP %ld: %.300s", r->url, status, r->resp.data ? (char *)r->resp.data : "");
  }
  easy_done(r);
  if (rc == 0 && out_finish(r, OUT_KEEP) < 0) {
    rc = LT_EIO;
    snprintf(err, sizeof err, "%s", lt_error_msg());
  }
  if (rc && transient && r->attempt < r->o.retries && !r->c->closing) {
    out_finish(r, OUT_PAUSE); /* only a 2xx body's bytes were written: what is there is a prefix of the file */
    int delay = r->o.backoff_ms > 0 ? r->o.backoff_ms : 200;
    for (int i = 0; i < r->attempt && delay < 10000; i++) delay *= 2;
    r->attempt++;
    uv_timer_start(&r->retry, on_retry, (uint64_t)(delay < 10000 ? delay : 10000), 0);
    return;
  }
  lt_httpc_cb cb = r->cb;
  void *ud = r->ud;
  lt_buf_t resp = r->resp;
  memset(&r->resp, 0, sizeof r->resp);
  size_t len = r->out_path && rc == 0 ? r->out_len : resp.len; /* a download reports its size */
  req_free(r);
  cb(rc, status, resp.data ? (const char *)resp.data : "", len, rc ? err : NULL, ud);
  lt_buf_free(&resp);
}

static void check_info(lt_httpc_t *c) {
  CURLMsg *m;
  int left;
  while ((m = curl_multi_info_read(c->multi, &left)))
    if (m->msg == CURLMSG_DONE) {
      lt_httpc_req_t *r = NULL;
      curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&r);
      if (r) finished(r, m->data.result);
    }
}

static void httpc_on_poll(uv_poll_t *p, int status, int events) {
  sock_t *s = (sock_t *)p;
  int flags = status < 0 ? CURL_CSELECT_ERR : 0;
  if (events & UV_READABLE) flags |= CURL_CSELECT_IN;
  if (events & UV_WRITABLE) flags |= CURL_CSELECT_OUT;
  int running;
  curl_multi_socket_action(s->c->multi, s->fd, flags, &running);
  check_info(s->c);
}

static void sock_close(lt_httpc_t *c, sock_t *s) {
  if (s->prev) s->prev->next = s->next;
  else c->socks = s->next;
  if (s->next) s->next->prev = s->prev;
  uv_poll_stop(&s->poll);
  uv_close((uv_handle_t *)&s->poll, sock_closed);
}

static int on_socket(CURL *e, curl_socket_t fd, int what, void *ud, void *sockp) {
  lt_httpc_t *c = ud;
  sock_t *s = sockp;
  if (what == CURL_POLL_REMOVE) {
    if (s) {
      curl_multi_assign(c->multi, fd, NULL);
      sock_close(c, s);
    }
    return 0;
  }
  if (!s) {
    if (!(s = calloc(1, sizeof *s))) return -1;
    s->fd = fd;
    s->c = c;
    if (uv_poll_init_socket(c->loop, &s->poll, fd) < 0) {
      free(s);
      return -1;
    }
    c->handles++;
    s->next = c->socks;
    if (c->socks) c->socks->prev = s;
    c->socks = s;
    curl_multi_assign(c->multi, fd, s);
  }
  int ev = (what & CURL_POLL_IN ? UV_READABLE : 0) | (what & CURL_POLL_OUT ? UV_WRITABLE : 0);
  uv_poll_start(&s->poll, ev, httpc_on_poll);
  return 0;
}

static void on_timeout(uv_timer_t *t) {
  lt_httpc_t *c = t->data;
  int running;
  curl_multi_socket_action(c->multi, CURL_SOCKET_TIMEOUT, 0, &running);
  check_info(c);
}

static int on_timer(CURLM *m, long ms, void *ud) {
  lt_httpc_t *c = ud;
  if (ms < 0) uv_timer_stop(&c->timer);
  else uv_timer_start(&c->timer, on_timeout, (uint64_t)ms, 0);
  return 0;
}

uv_loop_t *lt_httpc_loop(const lt_httpc_t *c) { return c->loop; }

int lt_httpc_create(uv_loop_t *loop, lt_httpc_t **out) {
  static int global_done;
  if (!global_done) { /* once per process, from the loop thread */
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
      return lt_error_set(LT_ESYS, "http client: curl_global_init failed");
    global_done = 1;
  }
  lt_httpc_t *c = calloc(1, sizeof *c);
  if (!c || !(c->multi = curl_multi_init())) {
    free(c);
    return lt_error_set(LT_ENOMEM, "http client: out of memory");
  }
  c->loop = loop;
  curl_multi_setopt(c->multi, CURLMOPT_SOCKETFUNCTION, on_socket);
  curl_multi_setopt(c->multi, CURLMOPT_SOCKETDATA, c);
  curl_multi_setopt(c->multi, CURLMOPT_TIMERFUNCTION, on_timer);
  curl_multi_setopt(c->multi, CURLMOPT_TIMERDATA, c);
  LT_ASSERT(uv_timer_init(loop, &c->timer) == 0, "uv_timer_init");
  c->timer.data = c;
  c->handles = 1;
  *out = c;
  return 0;
}

int lt_httpc_request(lt_httpc_t *c, const char *url, const char *body, const lt_httpc_opts_t *o, lt_httpc_cb cb,
                     void *ud, lt_httpc_req_t **out) {
  if (out) *out = NULL;
  if (c->closing) return lt_error_set(LT_ECANCELED, "http client: closing");
  lt_httpc_req_t *r = calloc(1, sizeof *r);
  if (!r || !(r->url = strdup(url)) || (body && !(r->body = strdup(body)))) {
    if (r) free(r->url);
    free(r);
    return lt_error_set(LT_ENOMEM, "http client: out of memory");
  }
  if (body && !(r->headers = curl_slist_append(NULL, "Content-Type: application/json"))) {
    free(r->url), free(r->body), free(r);
    return lt_error_set(LT_ENOMEM, "http client: out of memory");
  }
  if (o->out_path && !(r->out_path = strdup(o->out_path))) {
    curl_slist_free_all(r->headers);
    free(r->url), free(r->body), free(r);
    return lt_error_set(LT_ENOMEM, "http client: out of memory");
  }
  r->c = c;
  r->o = *o;
  r->o.out_path = r->out_path;
  if (r->o.timeout_ms <= 0) r->o.timeout_ms = 60000;
  r->cb = cb;
  r->ud = ud;
  LT_ASSERT(uv_timer_init(c->loop, &r->retry) == 0, "uv_timer_init");
  r->retry.data = r;
  c->handles++;
  r->next = c->reqs;
  if (c->reqs) c->reqs->prev = r;
  c->reqs = r;
  int rc = start_attempt(r);
  if (rc < 0) {
    req_free(r);
    return rc;
  }
  if (out) *out = r;
  return 0;
}

void lt_httpc_cancel(lt_httpc_req_t *r) {
  if (r) req_free(r);
}

void lt_httpc_close(lt_httpc_t *c, void (*done)(void *), void *ud) {
  if (!c || c->closing) return;
  c->closing = 1;
  c->done = done;
  c->done_ud = ud;
  while (c->reqs) req_free(c->reqs);
  /* Cleanup closes cached connections (its socket callbacks may still run);
   * whatever curl did not report is closed here. */
  curl_multi_cleanup(c->multi);
  c->multi = NULL;
  while (c->socks) sock_close(c, c->socks);
  uv_timer_stop(&c->timer);
  uv_close((uv_handle_t *)&c->timer, handle_closed);
}
