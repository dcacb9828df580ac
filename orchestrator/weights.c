/* Weights over HTTP (transport.weights_port): workers that cannot see the
 * run directory fetch GET /weights/sha256/<sha>/<file> from the daemon's loop,
 * where <sha> is the SHA-256 of the version's model.safetensors: a URL whose
 * bytes never change, served with an ETag, `Cache-Control: public, immutable`
 * and byte ranges, so any standard HTTP cache (nginx's proxy_cache, a CDN) in
 * front of the daemon can fan a version out (docs/operations.md).  The older
 * /weights/<version>/<file> still answers.  The files stream from disk.  Which
 * workers get a URL instead of a path: those on another host
 * (transport.weights_serve: remote), or all. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "orchestrator/internal.h"
#include "net/http.h"
#include "util/delta.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/log.h"

static const char *const served[] = {"config.json",     "model.safetensors",     "tokenizer.json",
                                     "tokenizer_config.json", "generation_config.json", "delta.zst"};

static int servable(const char *file) {
  for (size_t i = 0; file && i < sizeof served / sizeof *served; i++)
    if (!strcmp(file, served[i])) return 1;
  return 0;
}

/* GET /weights/sha256/<sha>/<file>: immutable, cacheable, resumable. */
static void by_hash(lt_daemon_t *d, lt_http_conn_t *c, const char *p) {
  const char *file = strlen(p) > 65 && p[64] == '/' ? p + 65 : NULL;
  int i = -1;
  /* The newest version with these weights: versions of equal weights share the address, and only a version
   * after the first has a delta. */
  int valid = file && servable(file) && strspn(p, "0123456789abcdef") == 64;
  for (int k = 0; valid && k < d->npubs; k++)
    if (!strncmp(d->pubs[k].sha, p, 64) && (i < 0 || d->pubs[k].version > d->pubs[i].version)) i = k;
  if (i < 0) { /* not a version this daemon still has: nothing else is ever served */
    lt_http_respond(c, 404, NULL, "not found\n", 10);
    return;
  }
  char path[4400], etag[160];
  snprintf(path, sizeof path, "%s/%s", d->pubs[i].dir, file);
  snprintf(etag, sizeof etag, "\"%.64s-%s\"", p, file);
  /* The slot stays put while its version is served (a ring, reused only 8 versions later). */
  lt_http_file_opts_t o = {.etag = etag, .cache_control = "public, max-age=31536000, immutable", .ranges = 1,
                           .sent = &d->pubs[i].bytes_sent};
  lt_http_respond_file_opts(c, strstr(file, ".json") ? "application/json" : "application/octet-stream", path, &o);
}

static void on_request(lt_http_conn_t *c, const lt_http_req_t *req, void *ud) {
  lt_daemon_t *d = ud;
  char *end;
  if (strcmp(req->method, "GET") || strncmp(req->path, "/weights/", 9)) {
    lt_http_respond(c, 404, NULL, "not found\n", 10);
    return;
  }
  if (!strncmp(req->path + 9, "sha256/", 7)) {
    by_hash(d, c, req->path + 16);
    return;
  }
  long long v = strtoll(req->path + 9, &end, 10);
  const char *file = *end == '/' ? end + 1 : NULL;
  if (!(file && v >= 0 && end > req->path + 9 && servable(file))) { /* only the checkpoint files, never another path */
    lt_http_respond(c, 404, NULL, "not found\n", 10);
    return;
  }
  char path[4400];
  if (v == d->version) snprintf(path, sizeof path, "%s/%s", d->weights_dir, file);
  else snprintf(path, sizeof path, "%s/checkpoints/v%lld/%s", d->run_dir, v, file);
  lt_http_respond_file(c, strstr(file, ".json") ? "application/json" : "application/octet-stream", path);
}

int lt__weights_start(lt_daemon_t *d) {
  int port = (int)lt_config_int(d->cfg, "transport.weights_port");
  if (port <= 0) return 0;
  const char *bind = lt_config_str(d->cfg, "transport.weights_bind");
  if (strncmp(bind, "127.", 4) && strcmp(bind, "::1") && !lt_config_bool(d->cfg, "transport.allow_insecure_remote"))
    return lt_error_set(LT_ECONFIG, "transport.weights_bind: %s is not loopback; set transport.allow_insecure_remote on "
                        "a trusted network (the weights are served without authentication)", bind);
  lt_http_opts_t o = {.host = bind, .port = port, .max_body = 0, .max_conns = 256, .timeout_ms = 10000};
  int rc = lt_http_listen(&d->loop, &o, on_request, d, &d->weights_http);
  if (rc < 0) return rc;
  if (gethostname(d->hostname, sizeof d->hostname - 1) < 0) snprintf(d->hostname, sizeof d->hostname, "127.0.0.1");
  const char *host = lt_config_str(d->cfg, "transport.weights_host");
  if (!host[0]) host = d->hostname;
  snprintf(d->weights_base, sizeof d->weights_base, "http://%s:%d/weights", host, lt_http_port(d->weights_http));
  LT_INFO("daemon", "weights served at %s/sha256/<sha256 of model.safetensors>/", d->weights_base);
  return 0;
}

void lt__weights_stop(lt_daemon_t *d) {
  if (d->weights_http) lt_http_close(d->weights_http, NULL, NULL);
  d->weights_http = NULL;
}

const char *lt__weights_location(lt_daemon_t *d, int w, char *buf, size_t cap) {
  if (!d->weights_http || w < 0) return d->weights_dir;
  if (strcmp(lt_config_str(d->cfg, "transport.weights_serve"), "all") && !strcmp(d->workers[w].host, d->hostname))
    return d->weights_dir;
  snprintf(buf, cap, "%s/sha256/%s", d->weights_base, d->weights_sha);
  return buf;
}

void lt__weights_published(lt_daemon_t *d, int64_t version, const char *dir, const char *sha) {
  int n = (int)(sizeof d->pubs / sizeof *d->pubs);
  /* What the version before cost the daemon's link, now that the workers have had it. */
  if (d->npublished > 0 && d->weights_http)
    lt__metric(d, "weights/bytes_sent_per_version", (double)d->pubs[(d->npublished - 1) % n].bytes_sent);
  int k = (int)(d->npublished++ % n);
  d->pubs[k].version = version;
  d->pubs[k].published_ms = lt__now_ms();
  d->pubs[k].bytes_sent = 0;
  d->pubs[k].reached = 0;
  snprintf(d->pubs[k].sha, sizeof d->pubs[0].sha, "%s", sha);
  snprintf(d->pubs[k].dir, sizeof d->pubs[0].dir, "%s", dir);
  if (d->npubs < n) d->npubs++;
  /* The delta's header (80 bytes) says which model file it applies to; a version without one has none. */
  char p[4200];
  lt_delta_info_t di;
  snprintf(p, sizeof p, "%s/delta.zst", dir);
  d->delta_base[0] = 0;
  d->delta_bytes = 0;
  if (lt_fs_exists(p) && lt_delta_info(p, &di) == 0 && !strcmp(di.target_sha, sha)) {
    struct stat st;
    memcpy(d->delta_base, di.base_sha, sizeof d->delta_base);
    d->delta_bytes = stat(p, &st) == 0 ? (int64_t)st.st_size : 0;
  }
  lt_error_clear();
  cJSON_Delete(d->mirrors);
  d->mirrors = NULL;
  const cJSON *ms = lt_config_get(d->cfg, "transport.weights_mirrors");
  if (!cJSON_GetArraySize(ms) || !(d->mirrors = cJSON_CreateArray())) return;
  for (const cJSON *m = ms->child; m; m = m->next) {
    char u[2048];
    snprintf(u, sizeof u, "%s/sha256/%s", m->valuestring, sha);
    cJSON_AddItemToArray(d->mirrors, cJSON_CreateString(u));
  }
}

void lt__weights_msg(lt_daemon_t *d, int w, lt_msg_t *m, char *url, size_t cap) {
  *m = (lt_msg_t){.type = LT_MSG_WEIGHTS, .u.weights = {.version = d->version}};
  lt_weights_t *x = &m->u.weights;
  x->location = (char *)lt__weights_location(d, w, url, cap);
  memcpy(x->sha256, d->weights_sha, sizeof x->sha256);
  if (x->location != d->weights_dir) { /* only a download gains from a delta or a mirror */
    memcpy(x->delta_base, d->delta_base, sizeof x->delta_base);
    x->delta_bytes = d->delta_bytes;
    x->mirrors = d->mirrors;
  }
}

static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

void lt__weights_heartbeat(lt_daemon_t *d) {
  int64_t oldest = INT64_MAX; /* the oldest version a live worker runs */
  int alive = 0;
  for (int w = 0; w < d->nworkers; w++)
    if (d->workers[w].alive) {
      alive++;
      if (d->workers[w].policy_version < oldest) oldest = d->workers[w].policy_version;
    }
  int n = 0;
  for (int i = 0; alive && i < d->npubs; i++) {
    if (d->pubs[i].reached || d->pubs[i].version > oldest || d->pubs[i].version == 0) continue; /* v0: at start */
    d->pubs[i].reached = 1;
    float s = (float)(lt__now_ms() - d->pubs[i].published_ms) / 1000.0f;
    lt__metric(d, "weights/propagation_s", s);
    d->propagation_s[d->npropagation++ % 1024] = s;
    n++;
  }
  if (!n) return;
  int k = d->npropagation < 1024 ? d->npropagation : 1024;
  float tmp[1024];
  memcpy(tmp, d->propagation_s, sizeof *tmp * (size_t)k);
  qsort(tmp, (size_t)k, sizeof *tmp, cmp_float);
  lt__metric(d, "weights/propagation_p50_s", tmp[k / 2]);
  lt__metric(d, "weights/propagation_max_s", tmp[k - 1]);
}

void lt__weights_report(lt_daemon_t *d) {
  for (int w = 0; w < d->nworkers; w++) {
    lt__worker_t *wk = &d->workers[w];
    if (!wk->alive || wk->policy_version < 0) continue;
    int64_t lag = d->version - wk->policy_version;
    if (lag == wk->lag_reported) continue;
    char name[200];
    snprintf(name, sizeof name, "weights/lag/%s", wk->name);
    lt__metric(d, name, (double)lag);
    wk->lag_reported = lag;
  }
}
