/* Weights over HTTP (transport.weights_port): workers that cannot see the
 * run directory fetch GET /weights/<version>/<file> from the daemon's loop;
 * the files stream from disk.  Which workers get a URL instead of a path:
 * those on another host (transport.weights_serve: remote), or all. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "orchestrator/internal.h"
#include "net/http.h"
#include "util/error.h"
#include "util/log.h"

static const char *const served[] = {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"};

static void on_request(lt_http_conn_t *c, const lt_http_req_t *req, void *ud) {
  lt_daemon_t *d = ud;
  char *end;
  if (strcmp(req->method, "GET") || strncmp(req->path, "/weights/", 9)) {
    lt_http_respond(c, 404, NULL, "not found\n", 10);
    return;
  }
  long long v = strtoll(req->path + 9, &end, 10);
  const char *file = *end == '/' ? end + 1 : NULL;
  int ok = file && v >= 0 && end > req->path + 9;
  for (size_t i = 0; ok && i < sizeof served / sizeof *served; i++)
    if (!strcmp(file, served[i])) ok = 2;
  if (ok != 2) { /* only the checkpoint files, never another path */
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
  LT_INFO("daemon", "weights served at %s/<version>/", d->weights_base);
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
  snprintf(buf, cap, "%s/%lld", d->weights_base, (long long)d->version);
  return buf;
}
