/* Weights for the workers: where each worker finds the current version (the run directory, or a URL of the
 * weights server, net/wserver.c, for workers on another host: transport.weights_serve remote, or all), the
 * WEIGHTS message with the version's delta and mirrors, and what publishing costs: the bytes served per version,
 * the time until every live worker runs it, each worker's lag. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "orchestrator/internal.h"
#include "net/wserver.h"
#include "util/delta.h"
#include "util/error.h"
#include "util/log.h"
#include "util/time.h"

int lt__weights_start(lt_daemon_t *d) {
  int port = (int)lt_config_int(d->cfg, "transport.weights_port");
  if (port <= 0) return 0;
  /* A download carries one weights file (and its delta): an adapter needs its base beside it (docs/lora.md). */
  if (lt_config_int(d->cfg, "learner.lora.rank") > 0 &&
      strcmp(lt_config_str(d->cfg, "checkpoint.lora_publish"), "merged"))
    return lt_error_set(LT_ECONFIG,
                        "transport.weights_port: workers on other hosts download whole versions; with "
                        "learner.lora set checkpoint.lora_publish \"merged\" (local workers read adapters in place)");
  const char *bind = lt_config_str(d->cfg, "transport.weights_bind");
  if (strncmp(bind, "127.", 4) && strcmp(bind, "::1") && !lt_config_bool(d->cfg, "transport.allow_insecure_remote"))
    return lt_error_set(LT_ECONFIG,
                        "transport.weights_bind: %s is not loopback; set transport.allow_insecure_remote on "
                        "a trusted network (the weights are served without authentication)",
                        bind);
  int rc = lt_wserver_listen(&d->loop, bind, port, d->run_dir, &d->wserver);
  if (rc < 0) return rc;
  lt_wserver_publish(d->wserver, d->version, d->weights_dir, d->weights_sha); /* the version the run starts from */
  if (gethostname(d->hostname, sizeof d->hostname - 1) < 0) snprintf(d->hostname, sizeof d->hostname, "127.0.0.1");
  const char *host = lt_config_str(d->cfg, "transport.weights_host");
  if (!host[0]) host = d->hostname;
  snprintf(d->weights_base, sizeof d->weights_base, "http://%s:%d/weights", host, lt_wserver_port(d->wserver));
  LT_INFO("daemon", "weights served at %s/sha256/<sha256 of model.safetensors>/", d->weights_base);
  return 0;
}

void lt__weights_stop(lt_daemon_t *d) {
  lt_wserver_close(d->wserver);
  d->wserver = NULL;
}

const char *lt__weights_location(lt_daemon_t *d, int w, char *buf, size_t cap) {
  if (!d->wserver || w < 0) return d->weights_dir;
  if (strcmp(lt_config_str(d->cfg, "transport.weights_serve"), "all") && !strcmp(d->workers[w].host, d->hostname))
    return d->weights_dir;
  lt_wserver_url(d->weights_base, d->weights_sha, buf, cap);
  return buf;
}

void lt__weights_published(lt_daemon_t *d, int64_t version, const char *dir, const char *sha) {
  d->version = version;
  snprintf(d->weights_dir, sizeof d->weights_dir, "%s", dir);
  snprintf(d->weights_sha, sizeof d->weights_sha, "%s", sha);
  int n = (int)(sizeof d->pubs / sizeof *d->pubs);
  /* What the version before cost the daemon's link, now that the workers have had it. */
  int64_t sent = d->wserver ? lt_wserver_publish(d->wserver, version, dir, sha) : -1;
  if (sent >= 0) lt__metric(d, "weights/bytes_sent_per_version", (double)sent);
  int k = (int)(d->npublished++ % n);
  d->pubs[k].version = version;
  d->pubs[k].published_ms = lt_time_mono_ms();
  d->pubs[k].reached = 0;
  if (d->npubs < n) d->npubs++;
  lt_delta_offer(dir, sha, d->delta_base, &d->delta_bytes);
  cJSON_Delete(d->mirrors);
  d->mirrors = NULL;
  const cJSON *ms = lt_config_get(d->cfg, "transport.weights_mirrors");
  if (!cJSON_GetArraySize(ms) || !(d->mirrors = cJSON_CreateArray())) return;
  for (const cJSON *m = ms->child; m; m = m->next) {
    char u[2048];
    lt_wserver_url(m->valuestring, sha, u, sizeof u);
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
    float s = (float)(lt_time_mono_ms() - d->pubs[i].published_ms) / 1000.0f;
    lt__metric(d, "weights/propagation_s", s);
    d->propagation_s[d->npropagation++ % 1024] = s;
    n++;
  }
  if (!n) return;
  int k = d->npropagation < 1024 ? d->npropagation : 1024;
  float tmp[1024];
  memcpy(tmp, d->propagation_s, sizeof *tmp * (size_t)k);
  lt__sort_floats(tmp, k);
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
