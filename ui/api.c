/* The console's answers: its pages (one page, routed in the browser), assets and the JSON API of docs/ui.md.
 * Read-only: the runs' databases are opened read-only, every parameter is parsed strictly (400 otherwise),
 * every query is a named buffer/ function with a row limit, and each request gets a time limit that
 * interrupts a slow query (503). */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buffer/buffer.h"
#include "ui/ui.h"
#include "util/buf.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/json.h"
#include "util/time.h"

enum {
  MAX_RUNS = 256,
  QUERY_MS = 2000,      /* a request's SQL time */
  TURN_CAP = 64 * 1024, /* bytes of one message's text per answer; the rest by ?turn=&offset= */
  MAX_SERIES = 16,
  MAX_POINTS = 100000,
};

typedef struct {
  char name[256];
  char dir[4200];
  lt_buffer_t *b; /* opened on first use */
  lt_tokenizer_t *tok;
  int tok_tried;
} run_t;

struct lt_ui {
  char dir[4096];
  int multi;
  run_t *runs;
  int nruns;
  int64_t deadline_ms; /* the running request's (lt_buffer_set_deadline) */
  lt_ui_tokenizer_fn tokenizer;
};

static int has_buffer(const char *dir) {
  char p[4300];
  return lt_path_join(p, sizeof p, dir, "buffer.db") == 0 && lt_fs_exists(p);
}

static int cmp_runs(const void *a, const void *b) { return strcmp(((const run_t *)a)->name, ((const run_t *)b)->name); }

int lt_ui_open(const char *dir, lt_ui_t **out) {
  lt_ui_t *u = calloc(1, sizeof *u);
  if (!u || !(u->runs = calloc(MAX_RUNS, sizeof *u->runs))) {
    free(u);
    return lt_error_set(LT_ENOMEM, "out of memory");
  }
  snprintf(u->dir, sizeof u->dir, "%s", dir);
  if (has_buffer(dir)) {
    lt_path_base(dir, u->runs[0].name, sizeof u->runs[0].name);
    snprintf(u->runs[0].dir, sizeof u->runs[0].dir, "%s", dir);
    u->nruns = 1;
  } else {
    DIR *d = opendir(dir);
    if (!d) {
      lt_ui_close(u);
      return lt_error_set(LT_ENOENT, "%s: %s", dir, strerror(errno));
    }
    struct dirent *e;
    while ((e = readdir(d)) && u->nruns < MAX_RUNS) {
      run_t *r = &u->runs[u->nruns];
      if (e->d_name[0] == '.' || strlen(e->d_name) >= sizeof r->name) continue;
      if (lt_path_join(r->dir, sizeof r->dir, dir, e->d_name) < 0 || !has_buffer(r->dir)) continue;
      snprintf(r->name, sizeof r->name, "%s", e->d_name);
      u->nruns++;
    }
    closedir(d);
    if (!u->nruns) {
      lt_ui_close(u);
      return lt_error_set(LT_ENOENT, "%s: no buffer.db here nor in a subfolder: not a run or a folder of runs", dir);
    }
    qsort(u->runs, (size_t)u->nruns, sizeof *u->runs, cmp_runs);
    u->multi = 1;
  }
  *out = u;
  return 0;
}

void lt_ui_close(lt_ui_t *u) {
  if (!u) return;
  for (int i = 0; i < u->nruns; i++) {
    lt_buffer_close(u->runs[i].b);
    lt_tokenizer_free(u->runs[i].tok);
  }
  free(u->runs);
  free(u);
}

void lt_ui_set_tokenizer(lt_ui_t *u, lt_ui_tokenizer_fn fn) { u->tokenizer = fn; }

int lt_ui_nruns(const lt_ui_t *u) { return u->nruns; }
int lt_ui_multi(const lt_ui_t *u) { return u->multi; }

void lt_ui_resp_free(lt_ui_resp_t *r) {
  free(r->owned);
  r->owned = NULL;
}

/* ---- answers ---- */

static int answer(lt_ui_resp_t *r, int status, const char *type, lt_buf_t *b) {
  if (lt_buf_ok(b) < 0) {
    lt_buf_free(b);
    r->status = 503;
    r->type = "application/json";
    r->body = "{\"error\":\"out of memory\"}";
    r->len = strlen(r->body);
    return 0;
  }
  r->status = status;
  r->type = type;
  r->len = b->len;
  r->body = r->owned = lt_buf_take(b);
  return 0;
}

static int fail(lt_ui_resp_t *r, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(lt_ui_resp_t *r, int status, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  lt_buf_t b = {0};
  lt_buf_puts(&b, "{\"error\":");
  lt_json_quote(&b, msg);
  lt_buf_puts(&b, "}");
  answer(r, status, "application/json", &b);
  return -1;
}

/* A failed query: past its time limit is 503 (try a narrower filter), anything else 500. */
static int query_failed(lt_ui_resp_t *r, int rc) {
  if (rc == LT_ETIMEDOUT)
    return fail(r, 503, "the query ran past its time limit (%d ms): narrow the filters", QUERY_MS);
  return fail(r, 500, "%s", lt_error_msg());
}

/* The parameters a route accepts, checked before anything runs: an unknown one is a 400. */
static int only(const lt_http_target_t *q, const char *const *allowed, lt_ui_resp_t *r) {
  for (int i = 0; i < q->nparams; i++) {
    int ok = 0;
    for (const char *const *a = allowed; *a && !ok; a++) ok = !strcmp(*a, q->params[i].key);
    if (!ok) {
      fail(r, 400, "unknown parameter '%.64s'", q->params[i].key);
      return -1;
    }
  }
  return 0;
}

/* An integer parameter in [lo, hi]: 1 set, 0 absent, -1 malformed (answered with 400). */
static int int_param(const lt_http_target_t *q, const char *key, int64_t lo, int64_t hi, int64_t *out,
                     lt_ui_resp_t *r) {
  const char *v = lt_http_param(q, key);
  if (!v) return 0;
  char *end;
  errno = 0;
  long long x = strtoll(v, &end, 10);
  if (!*v || *end || errno || x < lo || x > hi) {
    fail(r, 400, "parameter '%s' must be an integer in [%lld, %lld]", key, (long long)lo, (long long)hi);
    return -1;
  }
  *out = x;
  return 1;
}

static int num_param(const lt_http_target_t *q, const char *key, double *out, lt_ui_resp_t *r) {
  const char *v = lt_http_param(q, key);
  if (!v) return 0;
  char *end;
  double x = strtod(v, &end);
  if (!*v || *end || !isfinite(x)) {
    fail(r, 400, "parameter '%s' must be a finite number", key);
    return -1;
  }
  *out = x;
  return 1;
}

/* A text parameter of at most max bytes; "" counts as absent. */
static int text_param(const lt_http_target_t *q, const char *key, size_t max, const char **out, lt_ui_resp_t *r) {
  const char *v = lt_http_param(q, key);
  if (!v || !*v) return 0;
  if (strlen(v) > max) {
    fail(r, 400, "parameter '%s' is longer than %zu bytes", key, max);
    return -1;
  }
  *out = v;
  return 1;
}

/* The run a request reads: the only one, or ?run=NAME in a folder of runs; NULL after answering 400/404. */
static run_t *pick_run(lt_ui_t *u, const lt_http_target_t *q, lt_ui_resp_t *r) {
  const char *name = lt_http_param(q, "run");
  run_t *run = NULL;
  if (!u->multi) run = !name || !strcmp(name, u->runs[0].name) ? &u->runs[0] : NULL;
  else if (!name) fail(r, 400, "this console serves a folder of runs: say which with run=NAME (see /api/runs)");
  else
    for (int i = 0; i < u->nruns && !run; i++)
      if (!strcmp(u->runs[i].name, name)) run = &u->runs[i];
  if (!run) {
    if (name) fail(r, 404, "no run named '%.200s'", name);
    return NULL;
  }
  if (!run->b) {
    char p[4300];
    lt_path_join(p, sizeof p, run->dir, "buffer.db");
    int rc = lt_buffer_open(p, LT_BUF_READONLY, &run->b);
    if (rc < 0) {
      run->b = NULL;
      fail(r, rc == LT_ECORRUPT || rc == LT_EFORMAT ? 500 : 503, "%s", lt_error_msg());
      return NULL;
    }
    lt_buffer_set_deadline(run->b, &u->deadline_ms);
  }
  return run;
}

static int live(const run_t *run) {
  char lock[4300];
  return lt_path_join(lock, sizeof lock, run->dir, "daemon.lock") == 0 && lt_fs_lock_held(lock) == 1;
}

static void key(lt_buf_t *b, int *first, const char *k) {
  if (!*first) lt_buf_putc(b, ',');
  *first = 0;
  lt_json_quote(b, k);
  lt_buf_putc(b, ':');
}

static void kint(lt_buf_t *b, int *first, const char *k, long long v) {
  key(b, first, k);
  lt_json_int(b, v);
}

static void knum(lt_buf_t *b, int *first, const char *k, double v) {
  key(b, first, k);
  lt_json_num(b, v);
}

static void kstr(lt_buf_t *b, int *first, const char *k, const char *v) {
  key(b, first, k);
  lt_json_quote(b, v ? v : "");
}

/* ---- /api/runs ---- */

static int api_runs(lt_ui_t *u, lt_ui_resp_t *r) {
  lt_buf_t b = {0};
  lt_buf_puts(&b, "{\"multi\":");
  lt_buf_puts(&b, u->multi ? "true" : "false");
  lt_buf_puts(&b, ",\"runs\":[");
  for (int i = 0; i < u->nruns; i++) {
    int f = 1;
    lt_buf_puts(&b, i ? ",{" : "{");
    kstr(&b, &f, "name", u->runs[i].name);
    key(&b, &f, "live");
    lt_buf_puts(&b, live(&u->runs[i]) ? "true" : "false");
    lt_buf_putc(&b, '}');
  }
  lt_buf_puts(&b, "]}");
  return answer(r, 200, "application/json", &b);
}

/* ---- /api/overview ---- */

typedef struct {
  lt_buf_t *b;
  int n;
  int64_t alive_since; /* workers: last seen at or after this (wall ms) counts as alive; INT64_MAX: none */
} list_t;

static void item(list_t *l) { lt_buf_puts(l->b, l->n++ ? ",{" : "{"); }

static int worker_item(const char *name, const char *host, int slots, const char *backend, int64_t first_ms,
                       int64_t last_ms, int64_t in_flight, void *ud) {
  list_t *l = ud;
  int f = 1;
  item(l);
  kstr(l->b, &f, "name", name);
  kstr(l->b, &f, "host", host);
  kint(l->b, &f, "slots", slots);
  kstr(l->b, &f, "backend", backend);
  kint(l->b, &f, "first_ms", first_ms);
  kint(l->b, &f, "last_ms", last_ms);
  kint(l->b, &f, "in_flight", in_flight);
  key(l->b, &f, "alive");
  lt_buf_puts(l->b, last_ms >= l->alive_since ? "true" : "false");
  lt_buf_putc(l->b, '}');
  return 0;
}

static int event_item(int64_t time_ms, const char *kind, const char *detail, void *ud) {
  list_t *l = ud;
  int f = 1;
  item(l);
  kint(l->b, &f, "time_ms", time_ms);
  kstr(l->b, &f, "kind", kind);
  kstr(l->b, &f, "detail", detail);
  lt_buf_putc(l->b, '}');
  return 0;
}

/* [step, v0, ...] as the next item of a list */
static int tuple(list_t *l, int64_t step, const double *v, int n) {
  lt_buf_puts(l->b, l->n++ ? ",[" : "[");
  lt_json_int(l->b, step);
  for (int i = 0; i < n; i++) {
    lt_buf_putc(l->b, ',');
    lt_json_num(l->b, v[i]);
  }
  lt_buf_putc(l->b, ']');
  return 0;
}

static int point_item(int64_t step, double value, void *ud) { return tuple(ud, step, &value, 1); }

typedef struct {
  lt_buffer_t *db;
  list_t l;
} hist_t;

/* staleness/hist_K: the last value of each bin, in bin order (names sort "hist_0" < "hist_1" < ... < "hist_K+"). */
static int hist_item(const char *name, void *ud) {
  hist_t *h = ud;
  if (strncmp(name, "staleness/hist_", 15)) return 0;
  double v = 0;
  int64_t step;
  if (lt_buffer_metric_edge(h->db, name, LT_SPAN_LAST, &v, &step) < 0) return 1;
  int f = 1;
  item(&h->l);
  kstr(h->l.b, &f, "bin", name + 15);
  knum(h->l.b, &f, "trajectories", v);
  lt_buf_putc(h->l.b, '}');
  return 0;
}

static void last_metric(lt_buf_t *b, int *f, lt_buffer_t *db, const char *k, const char *name) {
  double v;
  int64_t step;
  key(b, f, k);
  if (lt_buffer_metric_edge(db, name, LT_SPAN_LAST, &v, &step) > 0) lt_json_num(b, v);
  else lt_buf_puts(b, "null");
}

static int api_overview(lt_ui_t *u, const lt_http_target_t *q, lt_ui_resp_t *r) {
  static const char *const allowed[] = {"run", NULL};
  if (only(q, allowed, r) < 0) return -1;
  run_t *run = pick_run(u, q, r);
  if (!run) return -1;
  lt_buffer_t *db = run->b;
  lt_buf_t b = {0};
  int f = 1, is_live = live(run);
  lt_buf_putc(&b, '{');
  char *name = lt_buffer_meta_get(db, "run");
  kstr(&b, &f, "run", name && *name ? name : run->name);
  free(name);
  key(&b, &f, "live");
  lt_buf_puts(&b, is_live ? "true" : "false");
  kstr(&b, &f, "state", is_live ? "live" : "finished");
  lt_ckpt_row_t ck = {0};
  int rc = lt_buffer_weights(db, 0, &ck);
  kint(&b, &f, "policy_version", ck.version);
  kint(&b, &f, "learner_step", ck.step);
  last_metric(&b, &f, db, "trajectories_per_s", "throughput/trajectories_per_s");
  last_metric(&b, &f, db, "reward_mean", "reward/mean");
  static const char *tk[] = {"queued", "dispatched", "done", "failed"};
  key(&b, &f, "tasks");
  int g = 1;
  lt_buf_putc(&b, '{');
  for (int i = 0; i < 4; i++) kint(&b, &g, tk[i], lt_buffer_count_tasks(db, (lt_task_status)i));
  lt_buf_putc(&b, '}');
  key(&b, &f, "trajectories");
  g = 1;
  lt_buf_putc(&b, '{');
  for (int i = 0; i < LT_SAMPLE_NSTATES; i++)
    kint(&b, &g, lt_sample_state_name((lt_sample_state)i), lt_buffer_count_status(db, (lt_sample_state)i));
  lt_buf_putc(&b, '}');
  /* Alive: heard from in the last 10 s (and, for the count, not gone since); only a live run has any. */
  int64_t since = is_live ? lt_time_wall_ms() - 10000 : INT64_MAX;
  kint(&b, &f, "workers_alive", is_live ? lt_buffer_workers_alive(db, since) : 0);
  list_t l = {&b, 0, since};
  key(&b, &f, "workers");
  lt_buf_putc(&b, '[');
  if (rc >= 0) rc = lt_buffer_workers_list(db, 200, worker_item, &l);
  lt_buf_puts(&b, "]");
  key(&b, &f, "staleness_hist");
  lt_buf_putc(&b, '[');
  hist_t h = {db, {&b, 0, 0}};
  if (rc >= 0) rc = lt_buffer_metric_names(db, hist_item, &h);
  lt_buf_puts(&b, "]");
  key(&b, &f, "eval_accuracy");
  lt_buf_putc(&b, '[');
  l.n = 0;
  if (rc >= 0) rc = lt_buffer_metric_points(db, "eval/accuracy", 10000, point_item, &l);
  lt_buf_puts(&b, "]");
  key(&b, &f, "guardrails");
  lt_buf_putc(&b, '[');
  l.n = 0;
  if (rc >= 0) rc = lt_buffer_events_recent(db, 1, 50, event_item, &l);
  lt_buf_puts(&b, "]");
  key(&b, &f, "events");
  lt_buf_putc(&b, '[');
  l.n = 0;
  if (rc >= 0) rc = lt_buffer_events_recent(db, 0, 50, event_item, &l);
  lt_buf_puts(&b, "]}");
  if (rc < 0) {
    lt_buf_free(&b);
    return query_failed(r, rc);
  }
  return answer(r, 200, "application/json", &b);
}

/* ---- /api/metrics ---- */

static int name_item(const char *name, void *ud) {
  list_t *l = ud;
  if (l->n++) lt_buf_putc(l->b, ',');
  lt_json_quote(l->b, name);
  return 0;
}

static int band_item(int64_t step, double lo, double hi, void *ud) { return tuple(ud, step, (double[]){lo, hi}, 2); }

/* "bands": each asked P/mean, or P, with the run's P/min and P/max at its steps (empty where the run records
 * none): reward/mean has reward/min and reward/max, reward/<domain> has reward/<domain>/min and /max. */
static int bands(lt_buffer_t *db, const lt_http_target_t *q, int max, lt_buf_t *b) {
  list_t l = {b, 0, 0};
  int first = 1, rc = 0;
  lt_buf_puts(b, ",\"bands\":{");
  for (int i = 0; i < q->nparams && rc >= 0; i++) {
    const char *n = q->params[i].value;
    size_t len = strlen(n);
    if (strcmp(q->params[i].key, "name")) continue;
    if (len >= 5 && !strcmp(n + len - 5, "/mean")) len -= 5;
    char lo[256], hi[256];
    snprintf(lo, sizeof lo, "%.*s/min", (int)len, n);
    snprintf(hi, sizeof hi, "%.*s/max", (int)len, n);
    key(b, &first, n);
    lt_buf_putc(b, '[');
    l.n = 0;
    rc = lt_buffer_metric_band(db, lo, hi, max, band_item, &l);
    lt_buf_putc(b, ']');
  }
  lt_buf_putc(b, '}');
  return rc;
}

static int api_metrics(lt_ui_t *u, const lt_http_target_t *q, lt_ui_resp_t *r) {
  static const char *const allowed[] = {"run", "name", "max", NULL};
  if (only(q, allowed, r) < 0) return -1;
  int64_t max = 10000;
  if (int_param(q, "max", 1, MAX_POINTS, &max, r) < 0) return -1;
  int names = 0;
  for (int i = 0; i < q->nparams; i++)
    if (!strcmp(q->params[i].key, "name")) {
      if (!q->params[i].value[0] || strlen(q->params[i].value) > 200)
        return fail(r, 400, "a metric name is 1 to 200 bytes");
      if (++names > MAX_SERIES) return fail(r, 400, "at most %d metrics at once", MAX_SERIES);
    }
  run_t *run = pick_run(u, q, r);
  if (!run) return -1;
  lt_buf_t b = {0};
  list_t l = {&b, 0, 0};
  int rc = 0;
  if (!names) {
    lt_buf_puts(&b, "{\"names\":[");
    rc = lt_buffer_metric_names(run->b, name_item, &l);
    lt_buf_puts(&b, "]}");
  } else {
    lt_buf_puts(&b, "{\"series\":{");
    int first = 1;
    for (int i = 0; i < q->nparams && rc >= 0; i++) {
      if (strcmp(q->params[i].key, "name")) continue;
      key(&b, &first, q->params[i].value);
      lt_buf_putc(&b, '[');
      l.n = 0;
      rc = lt_buffer_metric_points(run->b, q->params[i].value, (int)max, point_item, &l);
      lt_buf_putc(&b, ']');
    }
    lt_buf_putc(&b, '}');
    if (rc >= 0) rc = bands(run->b, q, (int)max, &b);
    lt_buf_putc(&b, '}');
  }
  if (rc < 0) {
    lt_buf_free(&b);
    return query_failed(r, rc);
  }
  return answer(r, 200, "application/json", &b);
}

/* ---- /api/trajectories ---- */

static int row_item(const lt_browse_row_t *t, void *ud) {
  list_t *l = ud;
  int f = 1;
  item(l);
  kint(l->b, &f, "task_id", t->task_id);
  kint(l->b, &f, "group_id", t->group_id);
  kstr(l->b, &f, "domain", t->domain);
  kstr(l->b, &f, "status", t->status);
  kstr(l->b, &f, "outcome", t->outcome);
  kstr(l->b, &f, "finish", t->finish);
  kstr(l->b, &f, "reason", t->reason);
  kstr(l->b, &f, "worker", t->worker);
  key(l->b, &f, "reward");
  if (t->has_reward) lt_json_num(l->b, t->reward);
  else lt_buf_puts(l->b, "null");
  kint(l->b, &f, "ntokens", t->ntokens);
  kint(l->b, &f, "turns", t->nturns);
  kint(l->b, &f, "eval", t->eval);
  kint(l->b, &f, "truncated", t->truncated);
  kint(l->b, &f, "version_min", t->version_min);
  kint(l->b, &f, "version_max", t->version_max);
  kint(l->b, &f, "time_ms", t->time_ms);
  key(l->b, &f, "consumed_step");
  if (t->consumed_step >= 0) lt_json_int(l->b, t->consumed_step);
  else lt_buf_puts(l->b, "null");
  key(l->b, &f, "staleness");
  if (t->consumed_step >= 0) lt_json_int(l->b, t->consumed_step - t->version_min);
  else lt_buf_puts(l->b, "null");
  lt_buf_putc(l->b, '}');
  return 0;
}

static int api_trajectories(lt_ui_t *u, const lt_http_target_t *q, lt_ui_resp_t *r) {
  static const char *const allowed[] = {
      "run",           "domain",  "status", "outcome", "finish", "reward_min", "reward_max", "staleness_min",
      "staleness_max", "version", "q",      "sort",    "order",  "offset",     "limit",      NULL};
  static const char *const sorts[LT_BROWSE_NSORTS] = {"id", "reward", "ntokens", "staleness", "version"};
  if (only(q, allowed, r) < 0) return -1;
  lt_browse_query_t bq = {.limit = 50};
  int64_t v;
  const char *s = NULL;
  if (text_param(q, "domain", 128, &bq.domain, r) < 0 || text_param(q, "outcome", 64, &bq.outcome, r) < 0 ||
      text_param(q, "finish", 64, &bq.finish, r) < 0 || text_param(q, "q", 256, &bq.text, r) < 0)
    return -1;
  if (text_param(q, "status", 64, &bq.status, r) < 0) return -1;
  if (bq.status) {
    int ok = 0;
    for (int i = 0; i < LT_SAMPLE_NSTATES && !ok; i++)
      ok = !strcmp(bq.status, lt_sample_state_name((lt_sample_state)i));
    if (!ok) return fail(r, 400, "status must be ready, consumed, stale, filtered, failed or eval");
  }
  if ((bq.has_reward_min = num_param(q, "reward_min", &bq.reward_min, r)) < 0 ||
      (bq.has_reward_max = num_param(q, "reward_max", &bq.reward_max, r)) < 0 ||
      (bq.has_stale_min = int_param(q, "staleness_min", 0, INT32_MAX, &bq.stale_min, r)) < 0 ||
      (bq.has_stale_max = int_param(q, "staleness_max", 0, INT32_MAX, &bq.stale_max, r)) < 0 ||
      (bq.has_version = int_param(q, "version", 0, INT64_MAX, &bq.version, r)) < 0 ||
      int_param(q, "offset", 0, INT32_MAX, &bq.offset, r) < 0)
    return -1;
  int lim = int_param(q, "limit", 1, 500, &v, r);
  if (lim < 0) return -1;
  if (lim) bq.limit = (int)v;
  if (text_param(q, "sort", 32, &s, r) < 0) return -1;
  if (s) {
    int k = -1;
    for (int i = 0; i < LT_BROWSE_NSORTS && k < 0; i++)
      if (!strcmp(s, sorts[i])) k = i;
    if (k < 0) return fail(r, 400, "sort must be id, reward, ntokens, staleness or version");
    bq.sort = (lt_browse_sort)k;
  }
  s = NULL;
  if (text_param(q, "order", 8, &s, r) < 0) return -1;
  if (s && strcmp(s, "asc") && strcmp(s, "desc")) return fail(r, 400, "order must be asc or desc");
  bq.desc = s && !strcmp(s, "desc");
  run_t *run = pick_run(u, q, r);
  if (!run) return -1;
  lt_buf_t b = {0};
  list_t l = {&b, 0, 0};
  int64_t total = 0;
  lt_buf_puts(&b, "{\"rows\":[");
  int rc = lt_buffer_browse(run->b, &bq, row_item, &l, &total);
  lt_buf_puts(&b, "]");
  int f = 0;
  kint(&b, &f, "total", total);
  kint(&b, &f, "offset", bq.offset);
  kint(&b, &f, "limit", bq.limit);
  lt_buf_putc(&b, '}');
  if (rc < 0) {
    lt_buf_free(&b);
    return query_failed(r, rc);
  }
  return answer(r, 200, "application/json", &b);
}

/* ---- /api/trajectories/<task_id> ---- */

/* The length of s[0..n) cut back to a UTF-8 character boundary (never inside a multi-byte sequence); at most 3
 * bytes back, so that a run of stray continuation bytes (invalid UTF-8) still moves forward slice by slice. */
static size_t utf8_cut(const char *s, size_t n) {
  size_t m = n;
  while (m > 0 && n - m < 3 && ((unsigned char)s[m] & 0xC0) == 0x80) m--;
  return ((unsigned char)s[m] & 0xC0) == 0x80 ? n : m;
}

/* A message's text from byte offset `off`, at most TURN_CAP bytes, with where the next slice starts. */
static void text_slice(lt_buf_t *b, int *f, const char *s, size_t off) {
  size_t n = strlen(s);
  if (off > n) off = n;
  off = utf8_cut(s, off);
  size_t end = n - off > TURN_CAP ? off + utf8_cut(s + off, TURN_CAP) : n;
  key(b, f, "content");
  lt_json_quote_n(b, s + off, end - off);
  kint(b, f, "content_bytes", (long long)n);
  kint(b, f, "content_offset", (long long)off);
  key(b, f, "next_offset");
  if (end < n) lt_json_int(b, (long long)end);
  else lt_buf_puts(b, "null");
}

/* Each message with its text capped (the rest is fetched by ?turn=&offset=); every other field as stored. */
/* The messages (the buffer reads damaged text as []), each content string capped (text_slice). */
static void messages(lt_buf_t *b, const cJSON *m) {
  if (!cJSON_IsArray(m)) {
    lt_buf_puts(b, "[]");
    return;
  }
  lt_buf_putc(b, '[');
  int i = 0;
  for (cJSON *msg = m->child; msg; msg = msg->next, i++) {
    if (i) lt_buf_putc(b, ',');
    if (!cJSON_IsObject(msg)) {
      lt_json_write(b, msg);
      continue;
    }
    lt_buf_putc(b, '{');
    int f = 1;
    for (cJSON *c = msg->child; c; c = c->next) {
      if (!strcmp(c->string, "content") && cJSON_IsString(c)) {
        text_slice(b, &f, c->valuestring, 0);
        continue;
      }
      key(b, &f, c->string);
      lt_json_write(b, c);
    }
    lt_buf_putc(b, '}');
  }
  lt_buf_putc(b, ']');
}

static void ints(lt_buf_t *b, int *f, const char *k, const int32_t *v, int n) {
  key(b, f, k);
  lt_buf_putc(b, '[');
  for (int i = 0; v && i < n; i++) {
    if (i) lt_buf_putc(b, ',');
    lt_json_int(b, v[i]);
  }
  lt_buf_putc(b, ']');
}

/* The learner's values of one token array, aligned to the trajectory's tokens: null where the learner had none
 * (a token past the model's positions, or a trajectory it never trained).  at[i]: token i's index in the row. */
static void row_floats(lt_buf_t *b, int *f, const char *k, const float *v, const int *at, int n) {
  key(b, f, k);
  lt_buf_putc(b, '[');
  for (int i = 0; i < n; i++) {
    if (i) lt_buf_putc(b, ',');
    if (at[i] >= 0 && isfinite(v[at[i]])) lt_json_num(b, v[at[i]]);
    else lt_buf_puts(b, "null");
  }
  lt_buf_putc(b, ']');
}

/* What the learner computed for this trajectory (docs/ui.md: token_values), or null. */
static void token_values(lt_buf_t *b, int *f, const lt_token_values_row_t *v, int ntokens) {
  key(b, f, "token_values");
  int *at = v ? malloc(sizeof(int) * (size_t)(ntokens ? ntokens : 1)) : NULL;
  if (!at) {
    lt_buf_puts(b, "null");
    return;
  }
  for (int i = 0; i < ntokens; i++) at[i] = -1;
  for (int k = 0, j = 0; k < v->nspans; k++)
    for (int i = 0; i < v->spans[2 * k + 1]; i++, j++)
      if (v->spans[2 * k] + i < ntokens) at[v->spans[2 * k] + i] = j;
  int g = 1;
  lt_buf_putc(b, '{');
  kstr(b, &g, "source", v->recomputed ? "recomputed" : "stored");
  kint(b, &g, "step", v->step);
  key(b, &g, "loss");
  cJSON *loss = v->loss ? cJSON_Parse(v->loss) : NULL;
  if (loss) lt_json_write(b, loss);
  else lt_buf_puts(b, "{}");
  cJSON_Delete(loss);
  key(b, &g, "traj_ratio");
  if (isfinite(v->traj_ratio)) lt_json_num(b, v->traj_ratio);
  else lt_buf_puts(b, "null");
  key(b, &g, "traj_ok");
  lt_buf_puts(b, v->traj_ok ? "true" : "false");
  row_floats(b, &g, "ratio", v->ratio, at, ntokens);
  row_floats(b, &g, "logp_old", v->logp_old, at, ntokens);
  row_floats(b, &g, "adv", v->adv, at, ntokens);
  row_floats(b, &g, "entropy", v->entropy, at, ntokens);
  key(b, &g, "flags");
  lt_buf_putc(b, '[');
  for (int i = 0; i < ntokens; i++) {
    if (i) lt_buf_putc(b, ',');
    if (at[i] >= 0) lt_json_int(b, v->flags[at[i]]);
    else lt_buf_puts(b, "null");
  }
  lt_buf_puts(b, "]}");
  free(at);
}

enum { FLAG_LOSS = 1, FLAG_KEPT = 16 }; /* LT_TOKV_* bits of the stored flags (docs/buffer.md) */

typedef struct {
  lt_buf_t *b;
  int n;
} quar_t;

static int quarantine_item(int64_t step, const char *why, void *ud) {
  quar_t *q = ud;
  lt_buf_puts(q->b, q->n++ ? ",{" : "{");
  int f = 1;
  kint(q->b, &f, "step", step);
  kstr(q->b, &f, "why", why);
  lt_buf_putc(q->b, '}');
  return 0;
}

/* Which step trained the trajectory, or why none did, from what the buffer records: its status and the step
 * that marked it, the learner's stored values and the objective's verdict (docs/ui.md: "why not trained"). */
static int training(lt_buf_t *b, int *f, lt_buffer_t *db, const lt_traj_t *t, const lt_traj_meta_t *m,
                    const lt_token_values_row_t *v) {
  char why[512];
  const char *verdict = lt_sample_state_name(m->status);
  int64_t step = m->consumed_step;
  int here = v && !v->recomputed && v->step == step; /* the marking step stored values for it */
  int loss = 0, kept = 0, masked = 0;
  for (int i = 0; v && i < v->n; i++) {
    loss += (v->flags[i] & FLAG_LOSS) != 0;
    kept += (v->flags[i] & FLAG_KEPT) != 0;
  }
  for (int i = 0; i < t->ntokens; i++) masked += t->loss_mask[i] != 0;
  switch (m->status) {
  case LT_SAMPLE_CONSUMED:
    verdict = "trained";
    if (!here)
      snprintf(why, sizeof why,
               "trained by step %lld (no per-token values stored for that step: "
               "learner.store_token_values off, or a run from before them)",
               (long long)step);
    else if (!loss && masked) {
      verdict = "left_out";
      snprintf(why, sizeof why,
               "step %lld left it out of the actor loss: its sampling sets or expert routing "
               "cannot be reproduced (the critic trained on it)",
               (long long)step);
    } else if (!kept) {
      verdict = "rejected";
      snprintf(why, sizeof why, "step %lld took it, but none of its %d loss tokens contributed%s", (long long)step,
               loss, v->traj_ok ? "" : ": the trajectory mask rejected it");
    } else
      snprintf(why, sizeof why, "trained by step %lld: %d of its %d loss tokens kept", (long long)step, kept, loss);
    break;
  case LT_SAMPLE_FILTERED: {
    int64_t stored = here ? 1 : lt_buffer_token_values_count(db, step);
    if (stored < 0) return (int)stored;
    if (here) {
      verdict = "rolled_back";
      snprintf(why, sizeof why,
               "step %lld computed it, then a guardrail rolled the step back: its update was "
               "discarded",
               (long long)step);
    } else if (stored > 0)
      snprintf(why, sizeof why, "filtered at step %lld by the dynamic filter: its group's rewards had no variance",
               (long long)step);
    else
      snprintf(why, sizeof why,
               "filtered at step %lld: the dynamic filter (a group without reward variance) or a "
               "guardrail rollback of that step",
               (long long)step);
    break;
  }
  case LT_SAMPLE_STALE:
    snprintf(why, sizeof why,
             "stale at step %lld: generated from policy version %lld, more versions behind than "
             "scheduler.max_staleness allowed",
             (long long)step, (long long)m->version_min);
    break;
  case LT_SAMPLE_MASKED:
    snprintf(why, sizeof why, "masked: its episode timed out under rollout.on_timeout \"mask\" (kept, never trained)");
    break;
  case LT_SAMPLE_FAILED:
    snprintf(why, sizeof why, "failed (%s): no usable reward, never trained", lt_traj_status_name(t->status));
    break;
  case LT_SAMPLE_EVAL: snprintf(why, sizeof why, "a held-out evaluation sample: never trained"); break;
  default: snprintf(why, sizeof why, "not yet selected: waiting for a learner step (and for the rest of its group)");
  }
  key(b, f, "training");
  lt_buf_putc(b, '{');
  int g = 1;
  key(b, &g, "step");
  if (m->status == LT_SAMPLE_CONSUMED) lt_json_int(b, step);
  else lt_buf_puts(b, "null");
  kstr(b, &g, "verdict", verdict);
  kstr(b, &g, "why", why);
  key(b, &g, "quarantined");
  quar_t q = {b, 0};
  lt_buf_putc(b, '[');
  int rc = lt_buffer_quarantine_of(db, t->task_id, 16, quarantine_item, &q);
  lt_buf_puts(b, "]}");
  return rc;
}

/* The first quarantined attempt of a task. */
typedef struct {
  int64_t step;
  char why[256];
} first_quar_t;

static int first_quarantine(int64_t step, const char *why, void *ud) {
  first_quar_t *q = ud;
  q->step = step;
  snprintf(q->why, sizeof q->why, "%s", why);
  return 1;
}

/* 404 for a task without a stored trajectory, saying when it was quarantined instead. */
static int no_trajectory(lt_buffer_t *db, int64_t id, lt_ui_resp_t *r) {
  first_quar_t q = {-1, ""};
  int rc = lt_buffer_quarantine_of(db, id, 1, first_quarantine, &q);
  if (rc < 0) return query_failed(r, rc);
  if (q.step >= 0)
    return fail(r, 404, "no trajectory for task %lld: quarantined at step %lld: %s", (long long)id, (long long)q.step,
                q.why);
  return fail(r, 404, "no trajectory for task %lld", (long long)id);
}

static int api_trajectory(lt_ui_t *u, const lt_http_target_t *q, int64_t id, lt_ui_resp_t *r) {
  static const char *const allowed[] = {"run", "turn", "offset", NULL};
  if (only(q, allowed, r) < 0) return -1;
  int64_t turn = -1, off = 0;
  int has_turn = int_param(q, "turn", 0, INT32_MAX, &turn, r);
  if (has_turn < 0 || int_param(q, "offset", 0, INT64_MAX, &off, r) < 0) return -1;
  run_t *run = pick_run(u, q, r);
  if (!run) return -1;
  lt_traj_t t;
  lt_traj_meta_t m;
  int rc = lt_buffer_traj_load(run->b, id, LT_LOAD_ALL, &t, &m);
  if (rc == LT_ENOENT) return no_trajectory(run->b, id, r);
  if (rc < 0) return query_failed(r, rc);
  lt_buf_t b = {0};
  int f = 1;
  lt_buf_putc(&b, '{');
  if (has_turn) {
    /* one slice of one message's text */
    const cJSON *msg = cJSON_GetArrayItem(t.messages, (int)turn);
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(msg, "content");
    if (!cJSON_IsString(c)) {
      lt_traj_free(&t);
      lt_buf_free(&b);
      return fail(r, 404, "task %lld has no text message %lld", (long long)id, (long long)turn);
    }
    kint(&b, &f, "task_id", id);
    kint(&b, &f, "turn", turn);
    text_slice(&b, &f, c->valuestring, (size_t)off);
    lt_buf_putc(&b, '}');
    lt_traj_free(&t);
    return answer(r, 200, "application/json", &b);
  }
  kint(&b, &f, "task_id", t.task_id);
  kint(&b, &f, "group_id", t.group_id);
  kstr(&b, &f, "domain", t.domain);
  kstr(&b, &f, "status", lt_sample_state_name(m.status));
  kstr(&b, &f, "outcome", lt_traj_status_name(t.status));
  kstr(&b, &f, "finish", lt_finish_name(t.finish));
  kstr(&b, &f, "reason", t.reason);
  kstr(&b, &f, "error", t.error);
  key(&b, &f, "reward");
  if (t.has_reward) lt_json_num(&b, t.reward);
  else lt_buf_puts(&b, "null");
  key(&b, &f, "components");
  if (t.components) lt_json_write(&b, t.components);
  else lt_buf_puts(&b, "{}");
  kint(&b, &f, "eval", t.eval);
  kint(&b, &f, "turns", t.turns);
  kint(&b, &f, "truncated", m.truncated);
  kint(&b, &f, "version_min", m.version_min);
  kint(&b, &f, "version_max", m.version_max);
  key(&b, &f, "consumed_step");
  if (m.consumed_step >= 0) lt_json_int(&b, m.consumed_step);
  else lt_buf_puts(&b, "null");
  key(&b, &f, "staleness");
  if (m.consumed_step >= 0) lt_json_int(&b, m.consumed_step - m.version_min);
  else lt_buf_puts(&b, "null");
  kstr(&b, &f, "worker", m.loaded_worker);
  kint(&b, &f, "time_ms", m.time_ms);
  knum(&b, &f, "gen_ms", t.gen_ms);
  knum(&b, &f, "env_ms", t.env_ms);
  knum(&b, &f, "reward_ms", t.reward_ms);
  key(&b, &f, "temperature");
  if (t.temperature >= 0) lt_json_num(&b, t.temperature);
  else lt_buf_puts(&b, "null");
  kint(&b, &f, "ntokens", t.ntokens);
  ints(&b, &f, "tokens", t.tokens, t.ntokens);
  key(&b, &f, "logprobs");
  lt_buf_putc(&b, '[');
  for (int i = 0; i < t.ntokens; i++) {
    if (i) lt_buf_putc(&b, ',');
    lt_json_num(&b, t.logprobs[i]);
  }
  lt_buf_putc(&b, ']');
  key(&b, &f, "loss_mask");
  lt_buf_putc(&b, '[');
  for (int i = 0; i < t.ntokens; i++)
    lt_buf_puts(&b, i ? (t.loss_mask[i] ? ",1" : ",0") : (t.loss_mask[i] ? "1" : "0"));
  lt_buf_putc(&b, ']');
  ints(&b, &f, "versions", t.versions, t.ntokens);
  /* each token's own text (a piece of a multi-byte character shows as U+FFFD), null without a tokenizer */
  if (!run->tok_tried && u->tokenizer) run->tok = u->tokenizer(run->b);
  run->tok_tried = 1;
  key(&b, &f, "token_text");
  if (!run->tok) lt_buf_puts(&b, "null");
  else {
    lt_buf_putc(&b, '[');
    for (int i = 0; i < t.ntokens; i++) {
      char *txt = NULL;
      size_t n = 0;
      if (i) lt_buf_putc(&b, ',');
      if (lt_tokenizer_decode(run->tok, &t.tokens[i], 1, 0, &txt, &n) < 0) lt_buf_puts(&b, "null");
      else lt_json_quote_n(&b, txt, n);
      free(txt);
    }
    lt_buf_putc(&b, ']');
  }
  ints(&b, &f, "seq_starts", t.seq_starts, t.seq_starts ? t.nseqs : 0);
  key(&b, &f, "messages");
  messages(&b, t.messages);
  key(&b, &f, "diff"); /* the episode's changes (swe), as stored: at most 1 MiB (LT_PROTO_MAX_DIFF) */
  if (t.diff && t.diff[0]) lt_json_quote(&b, t.diff);
  else lt_buf_puts(&b, "null");
  lt_token_values_row_t v;
  if ((rc = lt_buffer_token_values_get(run->b, id, &v)) >= 0) {
    token_values(&b, &f, rc ? &v : NULL, t.ntokens);
    rc = training(&b, &f, run->b, &t, &m, rc ? &v : NULL);
    lt_buffer_token_values_free(&v);
  }
  lt_buf_putc(&b, '}');
  lt_traj_free(&t);
  if (rc < 0) {
    lt_buf_free(&b);
    return query_failed(r, rc);
  }
  return answer(r, 200, "application/json", &b);
}

/* ---- routing ---- */

static int asset(lt_ui_resp_t *r, const char *name) {
  const char *type;
  r->body = lt_ui_asset(name, &r->len, &type);
  if (!r->body) return fail(r, 404, "no such asset");
  r->status = 200;
  r->type = type;
  return 0;
}

/* A decimal task id making up all of s (no sign, no leading zeros beyond "0"): 1, else 0. */
static int task_id(const char *s, int64_t *id) {
  if (!*s || strlen(s) > 18 || (s[0] == '0' && s[1])) return 0;
  for (const char *p = s; *p; p++)
    if (*p < '0' || *p > '9') return 0;
  *id = strtoll(s, NULL, 10);
  return 1;
}

void lt_ui_answer(lt_ui_t *u, const char *method, const lt_http_target_t *q, lt_ui_resp_t *r) {
  memset(r, 0, sizeof *r);
  if (strcmp(method, "GET") && strcmp(method, "HEAD")) {
    fail(r, 405, "read-only: GET only");
    return;
  }
  u->deadline_ms = lt_time_mono_ms() + QUERY_MS;
  const char *p = q->path;
  int64_t id;
  if (!strcmp(p, "/") || !strcmp(p, "/curves") || !strcmp(p, "/trajectories") ||
      (!strncmp(p, "/trajectories/", 14) && task_id(p + 14, &id)))
    asset(r, "index.html");
  else if (!strncmp(p, "/assets/", 8) && strcmp(p + 8, "index.html")) asset(r, p + 8);
  else if (!strcmp(p, "/api/runs")) api_runs(u, r);
  else if (!strcmp(p, "/api/overview")) api_overview(u, q, r);
  else if (!strcmp(p, "/api/metrics")) api_metrics(u, q, r);
  else if (!strcmp(p, "/api/trajectories")) api_trajectories(u, q, r);
  else if (!strncmp(p, "/api/trajectories/", 18)) {
    if (!task_id(p + 18, &id)) fail(r, 400, "a task id is a non-negative decimal integer");
    else api_trajectory(u, q, id, r);
  } else fail(r, 404, "no such page");
  u->deadline_ms = 0;
}
