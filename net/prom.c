/* The Prometheus text exposition endpoint (net/prom.h): a table of gauges by family and label, written after
 * the owner's samples on every GET /metrics, in the text format 0.0.4 that promtool checks. */
#include "net/prom.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net/http.h"
#include "util/error.h"

typedef struct {
  char family[96]; /* longtail_reward_by_domain */
  char label[96];  /* domain="arith", or "" */
  double v;
} gauge_t;

struct lt_prom {
  lt_http_server_t *http;
  char prefix[32];
  lt_prom_fill_fn fill;
  void *ud;
  gauge_t *g;
  int n, cap;
};

/* Prometheus wants base units spelled out (promtool check metrics): a name's unit suffix becomes the base unit,
 * and its value is scaled to it.  The names the owner records elsewhere keep their units. */
static const struct {
  const char *suffix, *base;
  double scale;
} units[] = {
    {"_per_s", "_per_second", 1}, {"_ms", "_seconds", 1e-3}, {"_s", "_seconds", 1}, {"_mb", "_bytes", 1048576}};

/* name → family; returns the factor to its base unit. */
static double family_of(const lt_prom_t *p, const char *name, char *family, size_t fcap) {
  size_t j = (size_t)snprintf(family, fcap, "%s", p->prefix);
  for (const char *c = name; *c && j + 1 < fcap; c++)
    family[j++] = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ? *c : '_';
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

void lt_prom_set(lt_prom_t *p, const char *name, const char *label_key, const char *label, double v) {
  if (!p) return;
  char family[96], lb[96] = "";
  v *= family_of(p, name, family, sizeof family);
  if (label_key) {
    int n = snprintf(lb, sizeof lb, "%s=\"%s", label_key, label);
    for (char *q = lb + strlen(label_key) + 2; *q; q++) /* a peer may name itself: nothing in it may end the label */
      if (*q == '"' || *q == '\\' || *q == '\n') *q = '_';
    if (n > 0 && (size_t)n + 2 <= sizeof lb) strcat(lb, "\"");
    else snprintf(lb + sizeof lb - 2, 2, "\"");
  }
  for (int i = 0; i < p->n; i++)
    if (!strcmp(p->g[i].family, family) && !strcmp(p->g[i].label, lb)) {
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
  snprintf(g->label, sizeof g->label, "%s", lb);
  g->v = v;
}

static int by_family(const void *a, const void *b) {
  const gauge_t *x = a, *y = b;
  int c = strcmp(x->family, y->family);
  return c ? c : strcmp(x->label, y->label);
}

void lt_prom_sample(lt_buf_t *b, const char *family, const char *type, const char *help, double v) {
  lt_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n%s %.12g\n", family, help, family, type, family, v);
}

static void on_request(lt_http_conn_t *c, const lt_http_req_t *req, void *ud) {
  lt_prom_t *p = ud;
  if (strcmp(req->path, "/metrics")) {
    static const char nf[] = "not found: the metrics are at /metrics\n";
    lt_http_respond(c, 404, NULL, nf, sizeof nf - 1);
    return;
  }
  if (strcmp(req->method, "GET") && strcmp(req->method, "HEAD")) {
    lt_http_respond(c, 405, NULL, "GET only\n", 9);
    return;
  }
  lt_buf_t b = {0};
  p->fill(&b, p->ud);
  if (p->n) qsort(p->g, (size_t)p->n, sizeof *p->g, by_family); /* g is NULL before the first gauge */
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

int lt_prom_listen(uv_loop_t *loop, const char *host, int port, const char *prefix, lt_prom_fill_fn fill, void *ud,
                   lt_prom_t **out) {
  *out = NULL;
  lt_prom_t *p = calloc(1, sizeof *p);
  if (!p) return lt_error_set(LT_ENOMEM, "prometheus endpoint: out of memory");
  snprintf(p->prefix, sizeof p->prefix, "%s", prefix);
  p->fill = fill;
  p->ud = ud;
  lt_http_opts_t o = {.host = host, .port = port, .max_body = 0, .max_conns = 16, .timeout_ms = 5000};
  int rc = lt_http_listen(loop, &o, on_request, p, &p->http);
  if (rc < 0) {
    free(p);
    return rc;
  }
  *out = p;
  return 0;
}

int lt_prom_port(const lt_prom_t *p) { return lt_http_port(p->http); }

static void prom_free(void *ud) {
  lt_prom_t *p = ud;
  free(p->g);
  free(p);
}

void lt_prom_close(lt_prom_t *p) {
  if (p) lt_http_close(p->http, prom_free, p);
}
