/* net/http (and the Prometheus exposition on it, net/prom): the loop serves in this thread while a client thread
 * sends well-formed and hostile requests over real sockets. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include "net/http.h"
#include "net/prom.h"
#include "tests/support/harness.h"
#include "util/error.h"

typedef struct {
  uv_loop_t loop;
  uv_async_t stop;
  lt_http_server_t *srv;
  int port;
  uv_timer_t late;
  lt_http_conn_t *pending;
  int late_rc;
  int handled;
} fixture_t;

static void on_late(uv_timer_t *t) {
  fixture_t *f = t->data;
  f->late_rc = lt_http_respond(f->pending, 200, NULL, "late\n", 5);
  f->pending = NULL;
}

static void handler(lt_http_conn_t *c, const lt_http_req_t *r, void *ud) {
  fixture_t *f = ud;
  f->handled++;
  if (!strcmp(r->path, "/slow")) { /* answered after the client has gone */
    f->pending = c;
    uv_timer_start(&f->late, on_late, 300, 0);
    return;
  }
  /* the target as the handler gets it: the decoded path, then each decoded parameter */
  char body[512];
  int n = snprintf(body, sizeof body, "%s %s", r->method, r->path);
  for (int i = 0; i < r->target->nparams; i++)
    n += snprintf(body + n, sizeof body - (size_t)n, "%c%s=%s", i ? '&' : '?', r->target->params[i].key,
                  r->target->params[i].value);
  n += snprintf(body + n, sizeof body - (size_t)n, " %zu %.8s", r->body_len, r->body);
  lt_http_respond(c, 200, "text/plain", body, (size_t)n);
}

/* Sends `req` in pieces of `chunk` bytes (pausing between them), then reads
 * the whole answer. */
static char *exchange(int port, const char *req, size_t len, size_t chunk, int pause_ms, int close_early) {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  cr_assert_eq(connect(s, (struct sockaddr *)&a, sizeof a), 0);
  for (size_t off = 0; off < len;) {
    size_t n = len - off < chunk ? len - off : chunk;
    ssize_t w = send(s, req + off, n, MSG_NOSIGNAL);
    if (w <= 0) break; /* the server may answer and close before the end */
    off += (size_t)w;
    if (pause_ms) usleep((useconds_t)pause_ms * 1000);
  }
  if (close_early) {
    close(s);
    return NULL;
  }
  size_t cap = 1 << 16, got = 0;
  char *out = calloc(1, cap);
  for (ssize_t r; got + 1 < cap && (r = recv(s, out + got, cap - got - 1, 0)) > 0;) got += (size_t)r;
  close(s);
  return out;
}

/* One request sent at once. */
static char *ask(int port, const char *req) { return exchange(port, req, strlen(req), 1 << 20, 0, 0); }

static void *client(void *arg) {
  fixture_t *f = arg;
  char *r;
  /* A plain GET. */
  r = ask(f->port, "GET /a?b=1 HTTP/1.1\r\nHost: x\r\n\r\n");
  cr_expect(strstr(r, "HTTP/1.1 200 OK\r\n") && strstr(r, "Connection: close") && strstr(r, "GET /a?b=1 0"), "%s", r);
  free(r);
  /* The target is split and percent-decoded once, before the handler ('+' is a space in the query only). */
  r = ask(f->port, "GET /a%20b/c+d?x=1%2B2&y=a+b&&x=3&flag&e=%E2%82%AC%3D HTTP/1.1\r\n\r\n");
  cr_expect(strstr(r, "GET /a b/c+d?x=1+2&y=a b&x=3&flag=&e=\xe2\x82\xac= 0"), "%s", r);
  free(r);
  /* A target that does not decode never reaches a handler. */
  static const char *const bad_targets[] = {"/a?q=%zz", "/a?q=a%00b", "/a?q=%", "/%2", "/a?=x", "/a%00"};
  for (size_t i = 0; i < sizeof bad_targets / sizeof *bad_targets; i++) {
    char req[128];
    snprintf(req, sizeof req, "GET %s HTTP/1.1\r\n\r\n", bad_targets[i]);
    r = ask(f->port, req);
    cr_expect(strstr(r, "HTTP/1.1 400 ") && strstr(r, "malformed request target"), "%s: %s", bad_targets[i], r);
    free(r);
  }
  char many[1024] = "GET /a?";
  for (int i = 0; i < LT_HTTP_MAX_PARAMS + 1; i++) strcat(many, "k=v&");
  strcat(many, " HTTP/1.1\r\n\r\n");
  r = ask(f->port, many);
  cr_expect(strstr(r, "HTTP/1.1 400 ") && strstr(r, "more than 32 query parameters"), "%s", r);
  free(r);
  /* A POST whose head and body arrive a few bytes at a time. */
  const char *post = "POST /v1/x HTTP/1.1\r\ncontent-length: 11\r\n\r\nhello world";
  r = exchange(f->port, post, strlen(post), 5, 5, 0);
  cr_expect(strstr(r, "POST /v1/x 11 hello wo"), "%s", r);
  free(r);
  /* Expect: 100-continue gets the interim answer, then the real one. */
  const char *ex = "POST /e HTTP/1.1\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n";
  int s = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)f->port)};
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  cr_assert_eq(connect(s, (struct sockaddr *)&a, sizeof a), 0);
  send(s, ex, strlen(ex), MSG_NOSIGNAL);
  char buf[512] = {0};
  ssize_t n = recv(s, buf, sizeof buf - 1, 0);
  cr_expect(n > 0 && strstr(buf, "100 Continue"), "%s", buf);
  send(s, "abc", 3, MSG_NOSIGNAL);
  memset(buf, 0, sizeof buf);
  for (size_t got = 0; (n = recv(s, buf + got, sizeof buf - 1 - got, 0)) > 0;) got += (size_t)n;
  cr_expect(strstr(buf, "POST /e 3 abc"), "%s", buf);
  close(s);
  /* Hostile input: each gets an error status, never a crash. */
  r = ask(f->port, "garbage\r\n\r\n");
  cr_expect(strstr(r, "HTTP/1.1 400 "), "%s", r);
  free(r);
  r = ask(f->port, "POST / HTTP/1.1\r\nContent-Length: 99999999\r\n\r\n");
  cr_expect(strstr(r, "HTTP/1.1 413 "), "%s", r);
  free(r);
  r = ask(f->port, "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n");
  cr_expect(strstr(r, "HTTP/1.1 411 "), "%s", r);
  free(r);
  char *big = malloc(40000);
  memcpy(big, "GET / HTTP/1.1\r\nX: ", 19);
  memset(big + 19, 'a', 40000 - 19);
  r = exchange(f->port, big, 40000, 1 << 20, 0, 0);
  cr_expect(strstr(r, "HTTP/1.1 431 "), "%.40s", r);
  free(r);
  free(big);
  r = ask(f->port, "GET / HTTP/1.1\r\nContent-Length: -4\r\n\r\n");
  cr_expect(strstr(r, "HTTP/1.1 400 "), "%s", r);
  free(r);
  char nul[] = "GET /\0 HTTP/1.1";
  r = exchange(f->port, nul, sizeof nul - 1, 1 << 20, 0, 0);
  /* No blank line ever comes: the request times out. */
  cr_expect(strstr(r, "HTTP/1.1 400 ") || strstr(r, "HTTP/1.1 408 "), "%s", r);
  free(r);
  r = ask(f->port, "GET / HTTP/1.1\r\n");
  cr_expect(strstr(r, "HTTP/1.1 408 "), "%s", r);
  free(r);
  /* The client leaves while the handler works: the late answer is refused. */
  exchange(f->port, "GET /slow HTTP/1.1\r\n\r\n", strlen("GET /slow HTTP/1.1\r\n\r\n"), 1 << 20, 0, 1);
  usleep(600 * 1000);
  uv_async_send(&f->stop);
  return NULL;
}

static void on_stop(uv_async_t *a) {
  fixture_t *f = a->data;
  lt_http_close(f->srv, NULL, NULL);
  uv_close((uv_handle_t *)&f->stop, NULL);
  uv_close((uv_handle_t *)&f->late, NULL);
}

Test(http, serves_requests_and_survives_hostile_clients, .timeout = 30) {
  fixture_t f = {.late_rc = 1};
  uv_loop_init(&f.loop);
  uv_async_init(&f.loop, &f.stop, on_stop);
  uv_timer_init(&f.loop, &f.late);
  f.stop.data = f.late.data = &f;
  lt_http_opts_t o = {.host = "127.0.0.1", .port = 0, .max_body = 1024, .max_conns = 8, .timeout_ms = 300};
  cr_assert_eq(lt_http_listen(&f.loop, &o, handler, &f, &f.srv), 0, "%s", lt_error_msg());
  f.port = lt_http_port(f.srv);
  cr_assert_gt(f.port, 0);
  pthread_t th;
  pthread_create(&th, NULL, client, &f);
  uv_run(&f.loop, UV_RUN_DEFAULT);
  pthread_join(th, NULL);
  cr_assert_eq(uv_loop_close(&f.loop), 0, "handles left open");
  cr_expect_eq(f.late_rc, LT_ECANCELED);
  cr_expect_eq(f.handled, 5); /* GET twice, POST, Expect, slow: the rejected ones never reach the handler */
}

/* lt_http_param: a key's first value; a key without '=' is "", an absent one NULL. */
Test(http, a_parameter_is_its_first_decoded_value) {
  lt_http_target_t t;
  cr_assert_eq(lt_http_target_parse("/p?name=a%2Fb&name=c&flag", &t), 0, "%s", lt_error_msg());
  cr_expect_str_eq(t.path, "/p");
  cr_expect_str_eq(lt_http_param(&t, "name"), "a/b");
  cr_expect_str_eq(lt_http_param(&t, "flag"), "");
  cr_expect_null(lt_http_param(&t, "nothing"));
  char long_path[1100] = "/";
  memset(long_path + 1, 'a', sizeof long_path - 2);
  cr_expect_eq(lt_http_target_parse(long_path, &t), LT_EINVAL);
  cr_expect(strstr(lt_error_msg(), "the path"), "%s", lt_error_msg());
}

Test(http, listen_errors_name_the_address) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  lt_http_server_t *a, *b;
  lt_http_opts_t o = {.host = "not-an-ip", .port = 0, .max_body = 10};
  cr_assert_eq(lt_http_listen(&loop, &o, handler, NULL, &a), LT_EINVAL);
  cr_assert(strstr(lt_error_msg(), "not-an-ip"));
  o.host = "127.0.0.1";
  cr_assert_eq(lt_http_listen(&loop, &o, handler, NULL, &a), 0);
  o.port = lt_http_port(a);
  cr_assert_eq(lt_http_listen(&loop, &o, handler, NULL, &b), LT_EUNREACH);
  cr_assert(strstr(lt_error_msg(), "cannot listen on 127.0.0.1"), "%s", lt_error_msg());
  lt_http_close(a, NULL, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  cr_assert_eq(uv_loop_close(&loop), 0);
}

/* ---- client against the server, both on one loop ---- */

typedef struct cfix cfix_t;
typedef struct {
  cfix_t *f;
  int called, rc;
  long status;
  char body[128], err[512];
} slot_t;

struct cfix {
  uv_loop_t loop;
  lt_http_server_t *srv;
  lt_httpc_t *cli;
  int hits_flaky;
  lt_http_conn_t *hung;
  int pending;
  char file[256];
};

static void c_handler(lt_http_conn_t *c, const lt_http_req_t *r, void *ud) {
  cfix_t *f = ud;
  if (!strcmp(r->path, "/echo")) {
    lt_http_respond(c, 200, "application/json", r->body, r->body_len);
  } else if (!strcmp(r->path, "/flaky")) { /* two 503s, then success */
    if (++f->hits_flaky <= 2) lt_http_respond(c, 503, NULL, "busy", 4);
    else lt_http_respond(c, 200, NULL, "ok", 2);
  } else if (!strcmp(r->path, "/file")) {
    lt_http_respond_file(c, NULL, f->file);
  } else if (!strcmp(r->path, "/nofile")) {
    lt_http_respond_file(c, NULL, "/nonexistent/longtail-test-file");
  } else if (!strcmp(r->path, "/hang")) {
    f->hung = c; /* answered only after the client gave up */
  } else {
    lt_http_respond(c, 404, NULL, "nope", 4);
  }
}

static void c_cb(int rc, long status, const char *body, size_t len, const char *err, void *ud) {
  slot_t *s = ud;
  s->called++;
  s->rc = rc;
  s->status = status;
  snprintf(s->body, sizeof s->body, "%.*s", (int)len, body);
  snprintf(s->err, sizeof s->err, "%s", err ? err : "");
  if (--s->f->pending == 0) {
    if (s->f->hung) lt_http_respond(s->f->hung, 200, NULL, "late", 4);
    lt_http_close(s->f->srv, NULL, NULL);
    lt_httpc_close(s->f->cli, NULL, NULL);
  }
}

Test(http, client_retries_transient_failures_and_reports_the_rest, .timeout = 30) {
  cfix_t f = {0};
  uv_loop_init(&f.loop);
  lt_http_opts_t so = {.host = "127.0.0.1", .port = 0, .max_body = 1 << 20, .max_conns = 16, .timeout_ms = 5000};
  cr_assert_eq(lt_http_listen(&f.loop, &so, c_handler, &f, &f.srv), 0);
  cr_assert_eq(lt_httpc_create(&f.loop, &f.cli), 0);
  int port = lt_http_port(f.srv), dead = port + 1 < 65535 ? port + 1 : port - 1;
  char url[6][128];
  snprintf(url[0], sizeof url[0], "http://127.0.0.1:%d/echo", port);
  snprintf(url[1], sizeof url[1], "http://127.0.0.1:%d/flaky", port);
  snprintf(url[2], sizeof url[2], "http://127.0.0.1:%d/missing", port);
  snprintf(url[3], sizeof url[3], "http://127.0.0.1:%d/hang", port);
  snprintf(url[4], sizeof url[4], "http://127.0.0.1:%d/x", dead);
  snprintf(url[5], sizeof url[5], "file:///etc/passwd");
  /* A 3 MB file streamed by the server and downloaded to a file by the client. */
  snprintf(f.file, sizeof f.file, "/tmp/lt-http-src-%d", (int)getpid());
  FILE *src = fopen(f.file, "wb");
  for (int i = 0; i < (3 << 20) / 4; i++) fwrite(&i, 4, 1, src);
  fclose(src);
  char dst[300], missing[300];
  snprintf(dst, sizeof dst, "/tmp/lt-http-dst-%d", (int)getpid());
  snprintf(missing, sizeof missing, "/tmp/lt-http-missing-%d", (int)getpid());
  slot_t s[8];
  memset(s, 0, sizeof s);
  for (int i = 0; i < 8; i++) s[i].f = &f;
  char furl[128], nurl[128];
  snprintf(furl, sizeof furl, "http://127.0.0.1:%d/file", lt_http_port(f.srv));
  snprintf(nurl, sizeof nurl, "http://127.0.0.1:%d/nofile", lt_http_port(f.srv));
  lt_httpc_opts_t dl = {.timeout_ms = 5000, .out_path = dst}, dln = {.timeout_ms = 5000, .out_path = missing};
  cr_assert_eq(lt_httpc_request(f.cli, furl, NULL, &dl, c_cb, &s[6], NULL), 0);
  cr_assert_eq(lt_httpc_request(f.cli, nurl, NULL, &dln, c_cb, &s[7], NULL), 0);
  f.pending += 2;
  lt_httpc_opts_t o = {.timeout_ms = 3000, .retries = 3, .backoff_ms = 20};
  lt_httpc_opts_t quick = {.timeout_ms = 300, .retries = 1, .backoff_ms = 20};
  const char *bodies[6] = {"{\"a\": 1}", "{}", NULL, "{}", NULL, NULL};
  for (int i = 0; i < 6; i++) {
    cr_assert_eq(lt_httpc_request(f.cli, url[i], bodies[i], i == 3 ? &quick : &o, c_cb, &s[i], NULL), 0);
    f.pending++;
  }
  uv_run(&f.loop, UV_RUN_DEFAULT);
  cr_assert_eq(uv_loop_close(&f.loop), 0, "handles left open");
  for (int i = 0; i < 6; i++) cr_assert_eq(s[i].called, 1, "request %d answered %d times", i, s[i].called);
  cr_expect(s[0].rc == 0 && s[0].status == 200 && !strcmp(s[0].body, "{\"a\": 1}"), "%d %s", s[0].rc, s[0].body);
  cr_expect(s[1].rc == 0 && !strcmp(s[1].body, "ok"), "%d %s", s[1].rc, s[1].err);
  cr_expect_eq(f.hits_flaky, 3);
  cr_expect(s[2].rc == LT_EREMOTE && s[2].status == 404 && strstr(s[2].err, "HTTP 404"), "%s", s[2].err);
  cr_expect(s[3].rc == LT_ETIMEDOUT && strstr(s[3].err, "within 300 ms"), "%d %s", s[3].rc, s[3].err);
  cr_expect(s[4].rc == LT_EUNREACH && strstr(s[4].err, url[4]), "%d %s", s[4].rc, s[4].err);
  cr_expect_lt(s[5].rc, 0, "file:// must be refused");
  cr_expect(s[6].rc == 0 && s[6].status == 200, "%d %s", s[6].rc, s[6].err);
  lt_run_t r;
  cr_assert_eq(lt_test_sh(&r, 10, "cmp %s %s && echo SAME", f.file, dst), 0);
  cr_expect(strstr(r.out, "SAME"), "download differs: %s", r.err);
  lt_run_free(&r);
  cr_expect(s[7].rc == LT_EREMOTE && s[7].status == 404, "%d %ld", s[7].rc, s[7].status);
  FILE *mf = fopen(missing, "rb");
  cr_expect(!mf, "a failed download leaves no file");
  if (mf) fclose(mf);
  unlink(f.file);
  unlink(dst);
}

/* ---- immutable files: ETag, Cache-Control, byte ranges; a client download that resumes ---- */

static char cached_path[256];

static void cache_handler(lt_http_conn_t *c, const lt_http_req_t *r, void *ud) {
  fixture_t *f = ud;
  f->handled++;
  lt_http_file_opts_t o = {
      .etag = "\"abc-model\"", .cache_control = "public, max-age=31536000, immutable", .ranges = 1};
  lt_http_respond_file_opts(c, NULL, cached_path, &o);
}

static void *cache_client(void *arg) {
  fixture_t *f = arg;
  char *r = ask(f->port, "GET /m HTTP/1.1\r\n\r\n");
  cr_expect(strstr(r, "HTTP/1.1 200 OK\r\n") && strstr(r, "Content-Length: 100\r\n") &&
                strstr(r, "ETag: \"abc-model\"\r\n") &&
                strstr(r, "Cache-Control: public, max-age=31536000, immutable\r\n") &&
                strstr(r, "Accept-Ranges: bytes\r\n"),
            "%s", r);
  free(r);
  r = ask(f->port, "GET /m HTTP/1.1\r\nRange: bytes=10-19\r\n\r\n");
  cr_expect(strstr(r, "HTTP/1.1 206 Partial Content\r\n") && strstr(r, "Content-Range: bytes 10-19/100\r\n") &&
                strstr(r, "Content-Length: 10\r\n") && strstr(r, "\r\n\r\nKLMNOPQRST") &&
                strlen(strstr(r, "\r\n\r\n")) == 14,
            "%s", r);
  free(r);
  r = ask(f->port, "GET /m HTTP/1.1\r\nRange: bytes=95-\r\n\r\n");
  cr_expect(
      strstr(r, "Content-Range: bytes 95-99/100\r\n") && strstr(r, "\r\n\r\n") && strlen(strstr(r, "\r\n\r\n")) == 9,
      "%s", r);
  free(r);
  r = ask(f->port, "GET /m HTTP/1.1\r\nRange: bytes=-3\r\n\r\n");
  cr_expect(strstr(r, "Content-Range: bytes 97-99/100\r\n"), "%s", r);
  free(r);
  r = ask(f->port, "GET /m HTTP/1.1\r\nRange: bytes=100-\r\n\r\n");
  cr_expect(strstr(r, "HTTP/1.1 416 ") && strstr(r, "Content-Range: bytes */100\r\n"), "%s", r);
  free(r);
  /* Not a single byte range: the whole file, as RFC 9110 allows. */
  r = ask(f->port, "GET /m HTTP/1.1\r\nRange: bytes=1-2,5-6\r\n\r\n");
  cr_expect(strstr(r, "HTTP/1.1 200 OK\r\n") && strstr(r, "Content-Length: 100\r\n"), "%s", r);
  free(r);
  r = ask(f->port, "GET /m HTTP/1.1\r\nIf-None-Match: \"abc-model\"\r\n\r\n");
  cr_expect(strstr(r, "HTTP/1.1 304 Not Modified\r\n") && strstr(r, "ETag: \"abc-model\"\r\n") && !strstr(r, "ABC"),
            "%s", r);
  free(r);
  r = ask(f->port, "GET /m HTTP/1.1\r\nIf-None-Match: \"other\"\r\n\r\n");
  cr_expect(strstr(r, "HTTP/1.1 200 OK\r\n"), "%s", r);
  free(r);
  uv_async_send(&f->stop);
  return NULL;
}

Test(http, immutable_files_answer_ranges_and_revalidation, .timeout = 30) {
  snprintf(cached_path, sizeof cached_path, "/tmp/lt-http-cached-%d", (int)getpid());
  FILE *fp = fopen(cached_path, "wb");
  for (int i = 0; i < 100; i++) fputc('A' + i % 26, fp);
  fclose(fp);
  fixture_t f = {.late_rc = 1};
  uv_loop_init(&f.loop);
  uv_async_init(&f.loop, &f.stop, on_stop);
  uv_timer_init(&f.loop, &f.late);
  f.stop.data = f.late.data = &f;
  lt_http_opts_t o = {.host = "127.0.0.1", .port = 0, .max_body = 1024, .max_conns = 8, .timeout_ms = 3000};
  cr_assert_eq(lt_http_listen(&f.loop, &o, cache_handler, &f, &f.srv), 0, "%s", lt_error_msg());
  f.port = lt_http_port(f.srv);
  pthread_t th;
  pthread_create(&th, NULL, cache_client, &f);
  uv_run(&f.loop, UV_RUN_DEFAULT);
  pthread_join(th, NULL);
  cr_assert_eq(uv_loop_close(&f.loop), 0, "handles left open");
  unlink(cached_path);
}

/* A server that drops the first download halfway and answers the next with what its Range asks for. */
typedef struct {
  int ls, port;
  char range[128];
  int conns;
} dropper_t;

static void *dropper(void *arg) {
  dropper_t *d = arg;
  char body[4000];
  for (int i = 0; i < (int)sizeof body; i++) body[i] = (char)('a' + i % 23);
  for (int k = 0; k < 2; k++) {
    int s = accept(d->ls, NULL, NULL);
    if (s < 0) return NULL;
    d->conns++;
    char req[2048] = {0};
    size_t got = 0;
    for (ssize_t n; !strstr(req, "\r\n\r\n") && (n = recv(s, req + got, sizeof req - 1 - got, 0)) > 0;)
      got += (size_t)n;
    char head[256];
    const char *rg = strcasestr(req, "\r\nRange: bytes=");
    if (k == 0) { /* half the body, then the connection breaks */
      int n = snprintf(head, sizeof head, "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\n\r\n", sizeof body);
      send(s, head, (size_t)n, MSG_NOSIGNAL);
      send(s, body, sizeof body / 2, MSG_NOSIGNAL);
    } else if (rg) {
      sscanf(rg + 2, "%127[^\r]", d->range);
      long from = strtol(rg + 15, NULL, 10);
      int n =
          snprintf(head, sizeof head,
                   "HTTP/1.1 206 Partial Content\r\nContent-Length: %ld\r\nContent-Range: bytes %ld-%zu/%zu\r\n\r\n",
                   (long)sizeof body - from, from, sizeof body - 1, sizeof body);
      send(s, head, (size_t)n, MSG_NOSIGNAL);
      send(s, body + from, sizeof body - (size_t)from, MSG_NOSIGNAL);
    } else {
      int n = snprintf(head, sizeof head, "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\n\r\n", sizeof body);
      send(s, head, (size_t)n, MSG_NOSIGNAL);
      send(s, body, sizeof body, MSG_NOSIGNAL);
    }
    close(s);
  }
  return NULL;
}

static void resume_cb(int rc, long status, const char *body, size_t len, const char *err, void *ud) {
  slot_t *s = ud;
  s->called++;
  s->rc = rc;
  s->status = status;
  snprintf(s->err, sizeof s->err, "%s (%zu bytes)", err ? err : "", len);
}

Test(http, client_download_resumes_where_it_broke_off, .timeout = 30) {
  dropper_t d = {0};
  d.ls = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET};
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  cr_assert_eq(bind(d.ls, (struct sockaddr *)&a, sizeof a), 0);
  socklen_t al = sizeof a;
  getsockname(d.ls, (struct sockaddr *)&a, &al);
  listen(d.ls, 4);
  pthread_t th;
  pthread_create(&th, NULL, dropper, &d);
  uv_loop_t loop;
  uv_loop_init(&loop);
  lt_httpc_t *cli;
  cr_assert_eq(lt_httpc_create(&loop, &cli), 0);
  char url[128], dst[256];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/model.safetensors", ntohs(a.sin_port));
  snprintf(dst, sizeof dst, "/tmp/lt-http-resume-%d", (int)getpid());
  slot_t s = {0};
  lt_httpc_opts_t o = {.timeout_ms = 5000, .retries = 2, .backoff_ms = 10, .out_path = dst};
  cr_assert_eq(lt_httpc_request(cli, url, NULL, &o, resume_cb, &s, NULL), 0);
  while (!s.called) uv_run(&loop, UV_RUN_ONCE);
  lt_httpc_close(cli, NULL, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  cr_assert_eq(uv_loop_close(&loop), 0);
  pthread_join(th, NULL);
  close(d.ls);
  cr_expect_eq(s.rc, 0, "%s", s.err);
  cr_expect_eq(d.conns, 2);
  cr_expect_str_eq(d.range, "Range: bytes=2000-", "the second attempt asks for the rest only");
  FILE *fp = fopen(dst, "rb");
  cr_assert(fp);
  char got[5000];
  size_t n = fread(got, 1, sizeof got, fp);
  fclose(fp);
  cr_expect_eq(n, 4000);
  int same = 1;
  for (size_t i = 0; i < n; i++) same &= got[i] == (char)('a' + i % 23);
  cr_expect(same, "the resumed file is the server's");
  unlink(dst);
}

#include "tests/fuzz/seeds.h"

/* The HTTP fuzz target's seeds (streamed, chunked, oversized, malformed, incomplete requests) get the answers they
 * are named for from the server as the fuzzer runs it (tests/fuzz/fuzz_http.c). */
Test(http, fuzz_seed_corpus_answers_as_named, .timeout = 60) {
  lt_fuzz_server_t s;
  cr_assert_eq(lt_fuzz_server_start(&s, 1 << 16, lt_fuzz_echo_request, NULL), 0, "%s", lt_error_msg());
  cr_expect_geq(lt_fuzz_check_seeds(&s, "http"), 18);
  lt_fuzz_server_stop(&s);
}

/* net/prom: the owner's samples first, then every gauge by family, named and scaled in the base units promtool
 * wants, with a label whose value cannot end it; HEAD has no body; only /metrics is served. */
typedef struct {
  uv_loop_t loop;
  uv_async_t stop;
  lt_prom_t *p;
  int port;
  char *got, *head, *other;
} prom_fixture_t;

static void prom_samples(lt_buf_t *b, void *ud) { lt_prom_sample(b, "x_up", "gauge", "Up.", 1); }

static void *prom_client(void *arg) {
  prom_fixture_t *f = arg;
  f->got = ask(f->port, "GET /metrics HTTP/1.1\r\n\r\n");
  f->head = ask(f->port, "HEAD /metrics HTTP/1.1\r\n\r\n");
  f->other = ask(f->port, "GET /other HTTP/1.1\r\n\r\n");
  uv_async_send(&f->stop);
  return NULL;
}

static void prom_stop(uv_async_t *a) {
  prom_fixture_t *f = a->data;
  lt_prom_close(f->p);
  uv_close((uv_handle_t *)&f->stop, NULL);
}

Test(prom, gauges_follow_the_owners_samples_in_base_units, .timeout = 30) {
  prom_fixture_t f = {0};
  uv_loop_init(&f.loop);
  uv_async_init(&f.loop, &f.stop, prom_stop);
  f.stop.data = &f;
  cr_assert_eq(lt_prom_listen(&f.loop, "127.0.0.1", 0, "x_", prom_samples, NULL, &f.p), 0, "%s", lt_error_msg());
  f.port = lt_prom_port(f.p);
  lt_prom_set(f.p, "learner/step_s", NULL, NULL, 2);
  lt_prom_set(f.p, "dispatch/overhead_p50_ms", NULL, NULL, 250);
  lt_prom_set(f.p, "daemon/rss_mb", NULL, NULL, 1);
  lt_prom_set(f.p, "lag", "worker", "a\"b\\c", 3);
  lt_prom_set(f.p, "lag", "worker", "a\"b\\c", 4); /* the latest value wins */
  pthread_t th;
  pthread_create(&th, NULL, prom_client, &f);
  uv_run(&f.loop, UV_RUN_DEFAULT);
  pthread_join(th, NULL);
  cr_assert_eq(uv_loop_close(&f.loop), 0, "handles left open");
  cr_expect(strstr(f.got, "HTTP/1.1 200 "), "%s", f.got);
  const char *up = strstr(f.got, "# HELP x_up Up.\n# TYPE x_up gauge\nx_up 1\n");
  cr_expect(up, "%s", f.got);
  cr_expect(strstr(f.got, "x_learner_step_seconds 2\n"), "%s", f.got);
  cr_expect(strstr(f.got, "x_dispatch_overhead_p50_seconds 0.25\n"), "%s", f.got);
  cr_expect(strstr(f.got, "x_daemon_rss_bytes 1048576\n"), "%s", f.got);
  const char *lag = strstr(f.got, "x_lag{worker=\"a_b_c\"} 4\n");
  cr_expect(lag, "%s", f.got);
  cr_expect(up && lag && up < lag, "the owner's samples come first: %s", f.got);
  cr_expect(strstr(f.head, "HTTP/1.1 200 ") && !strstr(f.head, "x_up"), "%s", f.head);
  cr_expect(strstr(f.other, "HTTP/1.1 404 "), "%s", f.other);
  free(f.got), free(f.head), free(f.other);
}
