/* The named read queries of the run database: the offline CLI's reports, replay's batch and the daemon's
 * resume counts.  Every query outside the writers' hot path lives here, parameters bound, never spliced. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buffer/internal.h"
#include "util/error.h"

typedef int (*row_fn)(sqlite3_stmt *s, void *ud);

static int prep(lt_buffer_t *b, const char *sql, sqlite3_stmt **s) {
  int rc = sqlite3_prepare_v2(lt__buffer_db(b), sql, -1, s, NULL);
  return rc == SQLITE_OK ? 0 : lt__buffer_err(b, rc, sql);
}

/* Steps a bound statement to its end (or until row returns nonzero) and finalizes it: the number of rows
 * seen, or an error. */
static int rows(lt_buffer_t *b, sqlite3_stmt *s, row_fn row, void *ud) {
  int rc, n = 0;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    n++;
    if (row && row(s, ud)) {
      rc = SQLITE_DONE;
      break;
    }
  }
  if (rc != SQLITE_DONE) n = lt__buffer_err(b, rc, sqlite3_sql(s));
  sqlite3_finalize(s);
  return n;
}

static int int_row(sqlite3_stmt *s, void *ud) {
  *(int64_t *)ud = sqlite3_column_int64(s, 0);
  return 1;
}

/* A count(*) or max() with up to two bound values (text when non-NULL, else the integer); 0 on error. */
static int64_t scalar(lt_buffer_t *b, const char *sql, const char *text, int64_t num) {
  sqlite3_stmt *s;
  int64_t v = 0;
  if (prep(b, sql, &s) < 0) return 0;
  if (text) sqlite3_bind_text(s, 1, text, -1, SQLITE_STATIC);
  else sqlite3_bind_int64(s, 1, num);
  return rows(b, s, int_row, &v) < 0 ? 0 : v;
}

static int ckpt_row(sqlite3_stmt *s, void *ud) {
  lt_ckpt_row_t *c = ud;
  const char *p = (const char *)sqlite3_column_text(s, 1), *h = (const char *)sqlite3_column_text(s, 2);
  c->version = sqlite3_column_int64(s, 0);
  c->step = sqlite3_column_int64(s, 3);
  snprintf(c->path, sizeof c->path, "%s", p ? p : "");
  snprintf(c->sha256, sizeof c->sha256, "%s", h ? h : "");
  return 1;
}

int lt_buffer_weights(lt_buffer_t *b, int oldest, lt_ckpt_row_t *out) {
  sqlite3_stmt *s;
  int rc = prep(b,
                oldest ? "SELECT version, path, sha256, step FROM checkpoints WHERE kind = 'weights' "
                         "ORDER BY version LIMIT 1"
                       : "SELECT version, path, sha256, step FROM checkpoints WHERE kind = 'weights' "
                         "ORDER BY version DESC LIMIT 1",
                &s);
  return rc < 0 ? rc : rows(b, s, ckpt_row, out);
}

int lt_buffer_weights_at(lt_buffer_t *b, int64_t version, lt_ckpt_row_t *out) {
  sqlite3_stmt *s;
  int rc = prep(b, "SELECT version, path, sha256, step FROM checkpoints WHERE kind = 'weights' AND version = ?1", &s);
  if (rc < 0) return rc;
  sqlite3_bind_int64(s, 1, version);
  return rows(b, s, ckpt_row, out);
}

int64_t lt_buffer_count_tasks(lt_buffer_t *b, lt_task_status st) {
  return scalar(b, "SELECT count(*) FROM tasks WHERE status = ?1", lt__task_status_name(st), 0);
}

int64_t lt_buffer_count_prompts(lt_buffer_t *b, const char *domain) {
  /* Copies repeat a prompt as another group: they do not advance the domain's sample index. */
  return scalar(b, "SELECT count(*) FROM prompts WHERE eval = 0 AND domain = ?1 AND copy_of IS NULL", domain, 0);
}

int64_t lt_buffer_count_train_tasks(lt_buffer_t *b) {
  return scalar(b, "SELECT count(*) FROM tasks WHERE eval = ?1", NULL, 0);
}

int64_t lt_buffer_count_workers(lt_buffer_t *b, int64_t since_ms) {
  return scalar(b, "SELECT count(*) FROM workers WHERE last_ms >= ?1", NULL, since_ms);
}

int64_t lt_buffer_workers_alive(lt_buffer_t *b, int64_t since_ms) {
  return scalar(b,
                "SELECT count(*) FROM workers w WHERE last_ms >= ?1 AND NOT EXISTS (SELECT 1 FROM events e WHERE "
                "e.kind IN ('worker_bye', 'worker_dead') AND e.time_ms >= w.last_ms AND "
                "(substr(e.detail, 1, length(w.name) + 1) IN (w.name || ':', w.name || ' ')))",
                NULL, since_ms);
}

int64_t lt_buffer_last_consumed_step(lt_buffer_t *b) {
  return scalar(b, "SELECT coalesce(max(consumed_step), 0) FROM trajectories WHERE status = ?1", "consumed", 0);
}

static int two_ints(sqlite3_stmt *s, void *ud) {
  int64_t *v = ud;
  v[0] = sqlite3_column_int64(s, 0);
  v[1] = sqlite3_column_int64(s, 1);
  return 1;
}

int lt_buffer_traj_totals(lt_buffer_t *b, int64_t *count, int64_t *truncated) {
  sqlite3_stmt *s;
  int64_t v[2] = {0, 0};
  int rc = prep(b, "SELECT count(*), coalesce(sum(truncated), 0) FROM trajectories WHERE eval = 0", &s);
  if (rc == 0) rc = rows(b, s, two_ints, v);
  *count = v[0];
  *truncated = v[1];
  return rc < 0 ? rc : 0;
}

int lt_buffer_task_history(lt_buffer_t *b, const char *domain, const char *spec, double pass_threshold, int64_t *n,
                           int64_t *passed) {
  sqlite3_stmt *s;
  /* A pass is the domain's success: a verifier's verdict where the reward recorded one (rule and math
   * `correct`, the judge's `verifier`), else the reward reaching the domain's threshold; reward > 0 would
   * count every partial score and every GenRM win rate as a pass. */
  int rc = prep(b,
                "SELECT count(t.id), coalesce(sum(coalesce(coalesce(json_extract(t.components, '$.correct'), "
                "json_extract(t.components, '$.verifier')) >= 0.5, t.reward >= ?3)), 0) FROM prompts p JOIN "
                "trajectories t ON t.group_id = p.id WHERE p.domain = ?1 AND p.eval = 0 AND "
                "json_remove(p.spec, '$.epoch') = json_remove(?2, '$.epoch')",
                &s);
  if (rc < 0) return rc;
  sqlite3_bind_text(s, 1, domain, -1, SQLITE_STATIC);
  sqlite3_bind_text(s, 2, spec, -1, SQLITE_STATIC);
  sqlite3_bind_double(s, 3, pass_threshold);
  int64_t v[2] = {0, 0};
  if ((rc = rows(b, s, two_ints, v)) < 0) return rc;
  *n = v[0];
  *passed = v[1];
  return 0;
}

static int real_row(sqlite3_stmt *s, void *ud) {
  *(double *)ud = sqlite3_column_double(s, 0);
  return 1;
}

double lt_buffer_noise_level(lt_buffer_t *b, const char *domain) {
  sqlite3_stmt *s;
  double v = -1;
  if (prep(b,
           "SELECT coalesce(max(json_extract(spec, '$.noise_level')), -1) FROM prompts WHERE eval = 0 AND domain = ?1",
           &s) == 0) {
    sqlite3_bind_text(s, 1, domain, -1, SQLITE_STATIC);
    rows(b, s, real_row, &v);
  }
  return v;
}

double lt_buffer_reward_mean(lt_buffer_t *b) {
  sqlite3_stmt *s;
  double v = 0;
  if (prep(b, "SELECT coalesce(avg(reward), 0) FROM trajectories WHERE eval = 0 AND traj_status = 'ok'", &s) == 0)
    rows(b, s, real_row, &v);
  return v;
}

typedef struct {
  int64_t *ids;
  int n, cap, oom;
} idlist_t;

static int id_row(sqlite3_stmt *s, void *ud) {
  idlist_t *l = ud;
  if (l->n == l->cap) {
    int cap = l->cap ? 2 * l->cap : 256;
    int64_t *v = realloc(l->ids, sizeof *v * (size_t)cap);
    if (!v) return l->oom = 1;
    l->ids = v;
    l->cap = cap;
  }
  l->ids[l->n++] = sqlite3_column_int64(s, 0);
  return 0;
}

/* The task ids a query bound with one step returns, in its order. */
static int step_ids(lt_buffer_t *b, const char *sql, int64_t step, int64_t **ids, int *n) {
  sqlite3_stmt *s;
  idlist_t l = {0};
  int rc = prep(b, sql, &s);
  if (rc == 0) {
    sqlite3_bind_int64(s, 1, step);
    rc = rows(b, s, id_row, &l);
  }
  if (rc >= 0 && l.oom) rc = lt_error_set(LT_ENOMEM, "out of memory");
  if (rc < 0) {
    free(l.ids);
    return rc;
  }
  *ids = l.ids;
  *n = l.n;
  return 0;
}

int lt_buffer_step_batch(lt_buffer_t *b, int64_t step, int64_t **ids, int *n) {
  return step_ids(b,
                  "SELECT t.task_id FROM trajectories t JOIN (SELECT group_id, min(id) AS first FROM trajectories "
                  "WHERE consumed_step = ?1 AND status = 'consumed' GROUP BY group_id) g USING (group_id) "
                  "WHERE t.consumed_step = ?1 AND t.status = 'consumed' ORDER BY g.first, t.id",
                  step, ids, n);
}

int lt_buffer_step_quarantined(lt_buffer_t *b, int64_t step, int64_t **ids, int *n) {
  return step_ids(b, "SELECT task_id FROM quarantine WHERE step = ?1 ORDER BY id", step, ids, n);
}

int lt_buffer_step_missing(lt_buffer_t *b, int64_t step, int64_t **ids, int *n) {
  return step_ids(b,
                  "SELECT k.id FROM tasks k WHERE k.eval = 0 AND k.status = 'done' AND k.prompt_id IN (SELECT group_id "
                  "FROM trajectories WHERE consumed_step = ?1 AND status = 'consumed') AND NOT EXISTS (SELECT 1 FROM "
                  "trajectories t WHERE t.task_id = k.id) ORDER BY k.id",
                  step, ids, n);
}

static int mean_row(sqlite3_stmt *s, void *ud) {
  double *v = ud;
  v[0] = sqlite3_column_double(s, 0);
  v[1] = (double)sqlite3_column_int64(s, 1);
  return 1;
}

int lt_buffer_metric_mean(lt_buffer_t *b, const char *name, lt_span_t span, int n, double *mean, int64_t *count) {
  static const char *sql[] = {
      [LT_SPAN_ALL] = "SELECT coalesce(avg(value), 0), count(*) FROM metrics WHERE name = ?1",
      [LT_SPAN_FIRST] =
          "SELECT coalesce(avg(value), 0), count(*) FROM (SELECT value FROM metrics WHERE name = ?1 "
          "ORDER BY step, time_ms LIMIT ?2)",
      [LT_SPAN_LAST] =
          "SELECT coalesce(avg(value), 0), count(*) FROM (SELECT value FROM metrics WHERE name = ?1 "
          "ORDER BY step DESC, time_ms DESC LIMIT ?2)",
  };
  sqlite3_stmt *s;
  double v[2] = {0, 0};
  int rc = prep(b, sql[span], &s);
  if (rc == 0) {
    sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
    if (span != LT_SPAN_ALL) sqlite3_bind_int(s, 2, n);
    rc = rows(b, s, mean_row, v);
  }
  *mean = v[0];
  *count = (int64_t)v[1];
  return rc < 0 ? rc : 0;
}

typedef struct {
  double value;
  int64_t step;
} point_t;

static int point_row(sqlite3_stmt *s, void *ud) {
  point_t *p = ud;
  p->value = sqlite3_column_double(s, 0);
  p->step = sqlite3_column_int64(s, 1);
  return 1;
}

int lt_buffer_metric_edge(lt_buffer_t *b, const char *name, lt_span_t edge, double *value, int64_t *step) {
  sqlite3_stmt *s;
  point_t p = {0, 0};
  int rc = prep(b,
                edge == LT_SPAN_LAST ? "SELECT value, step FROM metrics WHERE name = ?1 "
                                       "ORDER BY step DESC, time_ms DESC LIMIT 1"
                                     : "SELECT value, step FROM metrics WHERE name = ?1 "
                                       "ORDER BY step, time_ms LIMIT 1",
                &s);
  if (rc == 0) {
    sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
    rc = rows(b, s, point_row, &p);
  }
  if (rc > 0) *value = p.value, *step = p.step;
  return rc;
}

int lt_buffer_metric_at(lt_buffer_t *b, int64_t step, const char *name, double *value) {
  sqlite3_stmt *s;
  int rc = prep(b, "SELECT value FROM metrics WHERE step = ?1 AND name = ?2 ORDER BY time_ms DESC LIMIT 1", &s);
  if (rc < 0) return rc;
  sqlite3_bind_int64(s, 1, step);
  sqlite3_bind_text(s, 2, name, -1, SQLITE_STATIC);
  return rows(b, s, real_row, value);
}

typedef struct {
  int (*fn)(const char *name, int64_t step, double value, void *ud);
  void *ud;
} series_t;

static int series_row(sqlite3_stmt *s, void *ud) {
  series_t *c = ud;
  const char *name = (const char *)sqlite3_column_text(s, 0);
  if (sqlite3_column_type(s, 2) == SQLITE_NULL) return 0; /* a NaN was stored as NULL: no point */
  return c->fn(name ? name : "", sqlite3_column_int64(s, 1), sqlite3_column_double(s, 2), c->ud);
}

int lt_buffer_metric_series(lt_buffer_t *b, const char *glob,
                            int (*fn)(const char *name, int64_t step, double value, void *ud), void *ud) {
  sqlite3_stmt *s;
  series_t c = {fn, ud};
  int rc = prep(b, "SELECT name, step, value FROM metrics WHERE name GLOB ?1 ORDER BY name, step, time_ms", &s);
  if (rc < 0) return rc;
  sqlite3_bind_text(s, 1, glob, -1, SQLITE_STATIC);
  rc = rows(b, s, series_row, &c);
  return rc < 0 ? rc : 0;
}

typedef struct {
  int (*fn)(const char *name, void *ud);
  void *ud;
} names_t;

static int name_row(sqlite3_stmt *s, void *ud) {
  names_t *c = ud;
  const char *name = (const char *)sqlite3_column_text(s, 0);
  return c->fn(name ? name : "", c->ud);
}

int lt_buffer_metric_names(lt_buffer_t *b, int (*fn)(const char *name, void *ud), void *ud) {
  sqlite3_stmt *s;
  names_t c = {fn, ud};
  int rc = prep(b, "SELECT DISTINCT name FROM metrics ORDER BY name", &s);
  if (rc < 0) return rc;
  rc = rows(b, s, name_row, &c);
  return rc < 0 ? rc : 0;
}

typedef struct {
  int64_t *task_ids, *rowids;
  int n, max;
} page_t;

static int page_row(sqlite3_stmt *s, void *ud) {
  page_t *p = ud;
  p->rowids[p->n] = sqlite3_column_int64(s, 0);
  p->task_ids[p->n] = sqlite3_column_int64(s, 1);
  return ++p->n == p->max;
}

int lt_buffer_traj_page(lt_buffer_t *b, const lt_traj_filter_t *f, int64_t after, int64_t *task_ids, int64_t *rowids,
                        int max, int *n) {
  /* The wanted statuses as ",ready,consumed," so that one bound text tests membership. */
  char statuses[128] = ",";
  for (int i = 0; i < LT_SAMPLE_NSTATES; i++)
    if (f->statuses & (1u << i)) {
      size_t len = strlen(statuses);
      snprintf(statuses + len, sizeof statuses - len, "%s,", lt_sample_state_name((lt_sample_state)i));
    }
  sqlite3_stmt *s;
  int rc = prep(b,
                "SELECT id, task_id FROM trajectories WHERE id > ?1 "
                "AND (?2 IS NULL OR instr(?2, ',' || status || ',') > 0) AND (?3 IS NULL OR reward >= ?3) "
                "AND (?4 = 0 OR consumed_step IS NOT NULL) AND (?5 < 0 OR consumed_step >= ?5) "
                "AND (?6 < 0 OR consumed_step <= ?6) AND (?7 IS NULL OR domain = ?7) ORDER BY id LIMIT ?8",
                &s);
  if (rc < 0) return rc;
  sqlite3_bind_int64(s, 1, after);
  if (f->statuses) sqlite3_bind_text(s, 2, statuses, -1, SQLITE_STATIC);
  if (f->has_min_reward) sqlite3_bind_double(s, 3, f->min_reward);
  sqlite3_bind_int(s, 4, f->consumed);
  sqlite3_bind_int64(s, 5, f->consumed ? f->step_lo : -1);
  sqlite3_bind_int64(s, 6, f->consumed ? f->step_hi : -1);
  if (f->domain) sqlite3_bind_text(s, 7, f->domain, -1, SQLITE_STATIC);
  sqlite3_bind_int(s, 8, max);
  page_t p = {task_ids, rowids, 0, max};
  rc = rows(b, s, page_row, &p);
  *n = p.n;
  return rc < 0 ? rc : 0;
}
