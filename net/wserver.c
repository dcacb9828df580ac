/* Policy versions over HTTP (net/wserver.h): the versions still on disk by the SHA-256 in their URLs, and the
 * requests for their files. */
#include "net/wserver.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net/http.h"
#include "util/error.h"

static const char *const served[] = {"config.json",           "model.safetensors",      "tokenizer.json",
                                     "tokenizer_config.json", "generation_config.json", "delta.zst"};

struct lt_wserver {
  lt_http_server_t *http;
  char run_dir[4096];
  struct {
    int64_t version, bytes_sent;
    char sha[65], dir[4096];
  } pubs[8]; /* a ring: the k-th version published in slot k % 8 */
  int npubs; /* slots in use */
  int64_t npublished;
};

static int servable(const char *file) {
  for (size_t i = 0; file && i < sizeof served / sizeof *served; i++)
    if (!strcmp(file, served[i])) return 1;
  return 0;
}

/* GET /weights/sha256/<sha>/<file>: immutable, cacheable, resumable. */
static void by_hash(lt_wserver_t *s, lt_http_conn_t *c, const char *p) {
  const char *file = strlen(p) > 65 && p[64] == '/' ? p + 65 : NULL;
  int i = -1;
  /* The newest version with these weights: versions of equal weights share the address, and only a version
   * after the first has a delta. */
  int valid = file && servable(file) && strspn(p, "0123456789abcdef") == 64;
  for (int k = 0; valid && k < s->npubs; k++)
    if (!strncmp(s->pubs[k].sha, p, 64) && (i < 0 || s->pubs[k].version > s->pubs[i].version)) i = k;
  if (i < 0) { /* not a version this server still has: nothing else is ever served */
    lt_http_respond(c, 404, NULL, "not found\n", 10);
    return;
  }
  char path[4400], etag[160];
  snprintf(path, sizeof path, "%s/%s", s->pubs[i].dir, file);
  snprintf(etag, sizeof etag, "\"%.64s-%s\"", p, file);
  /* The slot stays put while its version is served (a ring, reused only 8 versions later). */
  lt_http_file_opts_t o = {.etag = etag,
                           .cache_control = "public, max-age=31536000, immutable",
                           .ranges = 1,
                           .sent = &s->pubs[i].bytes_sent};
  lt_http_respond_file_opts(c, strstr(file, ".json") ? "application/json" : "application/octet-stream", path, &o);
}

static void on_request(lt_http_conn_t *c, const lt_http_req_t *req, void *ud) {
  lt_wserver_t *s = ud;
  char *end;
  if (strcmp(req->method, "GET") || strncmp(req->path, "/weights/", 9)) {
    lt_http_respond(c, 404, NULL, "not found\n", 10);
    return;
  }
  if (!strncmp(req->path + 9, "sha256/", 7)) {
    by_hash(s, c, req->path + 16);
    return;
  }
  long long v = strtoll(req->path + 9, &end, 10);
  const char *file = *end == '/' ? end + 1 : NULL;
  if (!(file && v >= 0 && end > req->path + 9 && servable(file))) { /* only the checkpoint files, never another path */
    lt_http_respond(c, 404, NULL, "not found\n", 10);
    return;
  }
  char path[4400];
  int newest = s->npublished ? (int)((s->npublished - 1) % 8) : -1;
  if (newest >= 0 && v == s->pubs[newest].version) snprintf(path, sizeof path, "%s/%s", s->pubs[newest].dir, file);
  else snprintf(path, sizeof path, "%s/checkpoints/v%lld/%s", s->run_dir, v, file);
  lt_http_respond_file(c, strstr(file, ".json") ? "application/json" : "application/octet-stream", path);
}

int lt_wserver_listen(uv_loop_t *loop, const char *bind, int port, const char *run_dir, lt_wserver_t **out) {
  *out = NULL;
  lt_wserver_t *s = calloc(1, sizeof *s);
  if (!s) return lt_error_set(LT_ENOMEM, "weights server: out of memory");
  snprintf(s->run_dir, sizeof s->run_dir, "%s", run_dir);
  lt_http_opts_t o = {.host = bind, .port = port, .max_body = 0, .max_conns = 256, .timeout_ms = 10000};
  int rc = lt_http_listen(loop, &o, on_request, s, &s->http);
  if (rc < 0) {
    free(s);
    return rc;
  }
  *out = s;
  return 0;
}

int lt_wserver_port(const lt_wserver_t *s) { return lt_http_port(s->http); }

int64_t lt_wserver_publish(lt_wserver_t *s, int64_t version, const char *dir, const char *sha) {
  int n = (int)(sizeof s->pubs / sizeof *s->pubs);
  int64_t before = s->npublished > 0 ? s->pubs[(s->npublished - 1) % n].bytes_sent : -1;
  int k = (int)(s->npublished++ % n);
  s->pubs[k].version = version;
  s->pubs[k].bytes_sent = 0;
  snprintf(s->pubs[k].sha, sizeof s->pubs[0].sha, "%s", sha);
  snprintf(s->pubs[k].dir, sizeof s->pubs[0].dir, "%s", dir);
  if (s->npubs < n) s->npubs++;
  return before;
}

void lt_wserver_url(const char *base, const char *sha, char *out, size_t cap) {
  snprintf(out, cap, "%s/sha256/%s", base, sha);
}

static void wserver_free(void *ud) { free(ud); }

void lt_wserver_close(lt_wserver_t *s) {
  if (s) lt_http_close(s->http, wserver_free, s);
}
