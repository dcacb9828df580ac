/* The daemon's Prometheus text endpoint (monitor.prometheus_port): GET
 * /metrics returns the latest value of every learner and rollout metric plus
 * the loop's live counters, in the text exposition format 0.0.4.  Names,
 * units and labels: docs/metrics.md. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "orchestrator/internal.h"
#include "net/http.h"
#include "util/buf.h"
#include "util/error.h"
#include "util/log.h"

typedef struct {
  char family[96];  /* longtail_reward_by_domain */
  char label[96];   /* domain="arith", or "" */
  double v;
} gauge_t;

struct lt__prom {
  lt_http_server_t *http;
  gauge_t *g;
  int n, cap;
};

/* Prometheus wants base units spelled out (promtool check metrics): a run
 * metric's unit suffix becomes the base unit, and its value is scaled to it.
 * The run's own names (buffer, metrics.jsonl) keep their units. */
static const struct {
  const char *suffix, *base;
  double scale;
} units[] = {{"_per_s", "_per_second", 1}, {"_ms", "_seconds", 1e-3}, {"_s", "_seconds", 1}, {"_mb", "_bytes", 1048576}};

/* metric name → family, label and the factor to its base unit: "reward/<domain>"
 * and "staleness/hist_K" become labelled families, everything else
 * longtail_<name with _>. */
static double map_name(const char *name, char *family, size_t fcap, char *label, size_t lcap) {
  label[0] = 0;
  if (!strncmp(name, "reward/", 7) && strcmp(name + 7, "mean") && strcmp(name + 7, "min") && strcmp(name + 7, "max")) {
    snprintf(family, fcap, "longtail_reward_by_domain");
    snprintf(label, lcap, "domain=\"%s\"", name + 7);
    return 1;
  }
  if (!strncmp(name, "eval/accuracy/", 14)) {
    snprintf(family, fcap, "longtail_eval_accuracy_by_domain");
    snprintf(label, lcap, "domain=\"%s\"", name + 14);
    return 1;
  }
  if (!strncmp(name, "weights/lag/", 12)) {
    snprintf(family, fcap, "longtail_worker_policy_lag");
    int n = snprintf(label, lcap, "worker=\"%s", name + 12);
    for (char *q = label + 8; *q; q++) /* a worker names itself: nothing in it may end the label */
      if (*q == '"' || *q == '\\' || *q == '\n') *q = '_';
    if (n > 0 && (size_t)n + 2 <= lcap) strcat(label, "\"");
    else snprintf(label + lcap - 2, 2, "\"");
    return 1;
  }
  if (!strncmp(name, "staleness/hist_", 15)) {
    snprintf(family, fcap, "longtail_staleness_trajectories");
    snprintf(label, lcap, "staleness=\"%s\"", name + 15);
    return 1;
  }
  size_t j = (size_t)snprintf(family, fcap, "longtail_");
  for (const char *p = name; *p && j + 1 < fcap; p++)
    family[j++] = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ? *p : '_';
  family[j] = 0;
  for (size_t u = 0; u < sizeof units / sizeof units[0]; u++) {
    size_t n = strlen(units[u].suffix);
    if (j > n && !strcmp(family + j - n, units[u].suffix) && j - n + strlen(units[u].base) < fcap) {
      strcpy(family + j - n, units[u].base);
      return units[u].scale;
    }
  }
  return 1;
}

void lt__prom_set(lt_daemon_t *d, const char *name, double v) {
  struct lt__prom *p = d->prom;
  if (!p) return;
  char family[96], label[96];
  v *= map_name(name, family, sizeof family, label, sizeof label);
  for (int i = 0; i < p->n; i++)
    if (!strcmp(p->g[i].family, family) && !strcmp(p->g[i].label, label)) {
      p->g[i].v = v;
      return;
    }
  if (p->n == p->cap) {
    int cap = p->cap ? 2 * p->cap : 64;
    gauge_t *g = realloc(p->g, (size_t)cap * sizeof *g);
    if (!g) return; /* a missing gauge, not a failed run */
    p->g = g;
    p->cap = cap;
  }
  gauge_t *g = &p->g[p->n++];
  snprintf(g->family, sizeof g->family, "%s", family);
  snprintf(g->label, sizeof g->label, "%s", label);
  g->v = v;
}

static int by_family(const void *a, const void *b) {
  const gauge_t *x = a, *y = b;
  int c = strcmp(x->family, y->family);
  return c ? c : strcmp(x->label, y->label);
}

static void sample(lt_buf_t *b, const char *family, const char *type, const char *help, double v) {
  lt_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n%s %.12g\n", family, help, family, type, family, v);
}

static void on_request(lt_http_conn_t *c, const lt_http_req_t *req, void *ud) {
  lt_daemon_t *d = ud;
  struct lt__prom *p = d->prom;
  if (strcmp(req->path, "/metrics") && strncmp(req->path, "/metrics?", 9)) {
    static const char nf[] = "not found: the metrics are at /metrics\n";
    lt_http_respond(c, 404, NULL, nf, sizeof nf - 1);
    return;
  }
  if (strcmp(req->method, "GET") && strcmp(req->method, "HEAD")) {
    lt_http_respond(c, 405, NULL, "GET only\n", 9);
    return;
  }
  lt_buf_t b = {0};
  int alive = 0, inflight = 0;
  for (int i = 0; i < d->nworkers; i++)
    if (d->workers[i].alive) {
      alive++;
      inflight += d->workers[i].inflight;
    }
  sample(&b, "longtail_policy_version", "gauge", "Newest policy version published to the workers.", (double)d->version);
  sample(&b, "longtail_learner_steps_total", "counter", "Learner steps done.", (double)d->step);
  sample(&b, "longtail_trajectories_ingested_total", "counter", "Trajectories accepted into the buffer.",
         (double)d->trajs_in);
  sample(&b, "longtail_duplicates_rejected_total", "counter", "Results for tasks already stored, dropped.",
         (double)d->dups);
  sample(&b, "longtail_malformed_messages_total", "counter", "Peer messages that failed validation.",
         (double)d->malformed);
  sample(&b, "longtail_trajectories_refused_total", "counter",
         "Trajectories refused before the commit (invalid for this run: vocabulary, limits, versions).",
         (double)d->refused);
  sample(&b, "longtail_tasks_created_total", "counter", "Tasks generated.", (double)d->tasks_created);
  sample(&b, "longtail_tasks_done_total", "counter", "Tasks that ended with a stored trajectory.",
         (double)d->tasks_done);
  sample(&b, "longtail_tasks_failed_total", "counter", "Tasks given up after their attempts.",
         (double)d->tasks_failed);
  sample(&b, "longtail_tasks_inflight", "gauge", "Tasks running on workers.", (double)inflight);
  sample(&b, "longtail_workers_alive", "gauge", "Workers within their heartbeat liveness.", (double)alive);
  sample(&b, "longtail_accepting", "gauge", "1 while results are accepted (0: disk full).", (double)d->accepting);
  sample(&b, "longtail_uptime_seconds", "gauge", "Seconds since the daemon started.",
         (lt__now_ms() - d->started_ms) / 1000.0);
  if (p->n) qsort(p->g, (size_t)p->n, sizeof *p->g, by_family); /* g is NULL before the first metric */
  for (int i = 0; i < p->n; i++) {
    const gauge_t *g = &p->g[i];
    if (i == 0 || strcmp(g->family, p->g[i - 1].family))
      lt_buf_printf(&b, "# HELP %s Latest value of the run metric (docs/metrics.md).\n# TYPE %s gauge\n", g->family,
                    g->family);
    lt_buf_printf(&b, g->label[0] ? "%s{%s} %.12g\n" : "%s%s %.12g\n", g->family, g->label, g->v);
  }
  if (b.oom) {
    lt_http_respond(c, 500, NULL, "out of memory\n", 14);
  } else {
    int head = !strcmp(req->method, "HEAD");
    lt_http_respond(c, 200, "text/plain; version=0.0.4; charset=utf-8", head ? "" : (const char *)b.data,
                    head ? 0 : b.len);
  }
  lt_buf_free(&b);
}

int lt__prom_start(lt_daemon_t *d) {
  int port = (int)lt_config_int(d->cfg, "monitor.prometheus_port");
  if (port <= 0) return 0;
  struct lt__prom *p = calloc(1, sizeof *p);
  if (!p) return lt_error_set(LT_ENOMEM, "prometheus endpoint: out of memory");
  const char *host = lt_config_str(d->cfg, "monitor.prometheus_host");
  lt_http_opts_t o = {.host = host, .port = port, .max_body = 0, .max_conns = 16, .timeout_ms = 5000};
  int rc = lt_http_listen(&d->loop, &o, on_request, d, &p->http);
  if (rc < 0) {
    char why[512];
    snprintf(why, sizeof why, "%s", lt_error_msg());
    free(p);
    return lt_error_set(rc, "monitor.prometheus_port %d: %s", port, why);
  }
  d->prom = p;
  LT_INFO("daemon", "prometheus metrics at http://%s:%d/metrics", host, lt_http_port(p->http));
  return 0;
}

static void prom_free(void *ud) {
  struct lt__prom *p = ud;
  free(p->g);
  free(p);
}

void lt__prom_stop(lt_daemon_t *d) {
  if (!d->prom) return;
  lt_http_close(d->prom->http, prom_free, d->prom);
  d->prom = NULL;
}
