/* The web console's queries (ui/): a page of the trajectory table with filters and a sort, a metric's points,
 * the workers and the newest events.  Every one is bounded: a row limit in the SQL, and a deadline that
 * interrupts a statement running too long (lt_buffer_set_deadline).  The client chooses among fixed
 * statements and bound values, never SQL text. */
#include <stdio.h>
#include <string.h>

#include "buffer/internal.h"
#include "util/error.h"
#include "util/time.h"

/* SQLite calls this every few thousand virtual machine steps: nonzero interrupts the statement. */
static int past_deadline(void *ud) {
  const int64_t *deadline = ud;
  return *deadline > 0 && lt_time_mono_ms() > *deadline;
}

void lt_buffer_set_deadline(lt_buffer_t *b, const int64_t *deadline_ms) {
  sqlite3_progress_handler(lt__buffer_db(b), deadline_ms ? 1000 : 0, deadline_ms ? past_deadline : NULL,
                           (void *)deadline_ms);
}

static int prep(lt_buffer_t *b, const char *sql, sqlite3_stmt **s) {
  int rc = sqlite3_prepare_v2(lt__buffer_db(b), sql, -1, s, NULL);
  return rc == SQLITE_OK ? 0 : lt__buffer_err(b, rc, sql);
}

static int finish(lt_buffer_t *b, sqlite3_stmt *s, int rc) {
  int out = rc == SQLITE_DONE || rc == SQLITE_ROW ? 0 : lt__buffer_err(b, rc, sqlite3_sql(s));
  sqlite3_finalize(s);
  return out;
}

static const char *text(sqlite3_stmt *s, int i) {
  const char *t = (const char *)sqlite3_column_text(s, i);
  return t ? t : "";
}

/* The filters of a page: a fixed fragment per filter that is set, its value bound to its own parameter number
 * (?1 ... ?10), so that an unfiltered page counts without a scan of conditions and a filter on status can use
 * its index.  The client chooses which fragments, never their text. */
static const char *const FILTER_SQL[] = {
    " AND t.domain = ?1",
    " AND t.status = ?2",
    " AND t.traj_status = ?3",
    " AND t.finish = ?4",
    " AND t.reward >= ?5",
    " AND t.reward <= ?6",
    " AND t.consumed_step - t.version_min >= ?7",
    " AND t.consumed_step - t.version_min <= ?8",
    " AND t.version_min = ?9",
    " AND EXISTS (SELECT 1 FROM payloads p WHERE p.task_id = t.task_id AND instr(p.messages, ?10) > 0)",
};

/* Which filters q sets, one bit per FILTER_SQL entry. */
static unsigned filters_set(const lt_browse_query_t *q) {
  return (q->domain ? 1u : 0) | (q->status ? 2u : 0) | (q->outcome ? 4u : 0) | (q->finish ? 8u : 0) |
         (q->has_reward_min ? 16u : 0) | (q->has_reward_max ? 32u : 0) | (q->has_stale_min ? 64u : 0) |
         (q->has_stale_max ? 128u : 0) | (q->has_version ? 256u : 0) | (q->text && q->text[0] ? 512u : 0);
}

static void where(char *out, size_t cap, unsigned set) {
  size_t n = (size_t)snprintf(out, cap, " FROM trajectories t WHERE 1");
  for (unsigned i = 0; i < sizeof FILTER_SQL / sizeof FILTER_SQL[0]; i++)
    if (set & (1u << i) && n < cap) n += (size_t)snprintf(out + n, cap - n, "%s", FILTER_SQL[i]);
}

static void bind_filters(sqlite3_stmt *s, const lt_browse_query_t *q, unsigned set) {
  if (set & 1) sqlite3_bind_text(s, 1, q->domain, -1, SQLITE_STATIC);
  if (set & 2) sqlite3_bind_text(s, 2, q->status, -1, SQLITE_STATIC);
  if (set & 4) sqlite3_bind_text(s, 3, q->outcome, -1, SQLITE_STATIC);
  if (set & 8) sqlite3_bind_text(s, 4, q->finish, -1, SQLITE_STATIC);
  if (set & 16) sqlite3_bind_double(s, 5, q->reward_min);
  if (set & 32) sqlite3_bind_double(s, 6, q->reward_max);
  if (set & 64) sqlite3_bind_int64(s, 7, q->stale_min);
  if (set & 128) sqlite3_bind_int64(s, 8, q->stale_max);
  if (set & 256) sqlite3_bind_int64(s, 9, q->version);
  if (set & 512) sqlite3_bind_text(s, 10, q->text, -1, SQLITE_STATIC);
}

int lt_buffer_browse(lt_buffer_t *b, const lt_browse_query_t *q, int (*fn)(const lt_browse_row_t *r, void *ud),
                     void *ud, int64_t *total) {
  static const char *order[LT_BROWSE_NSORTS] = {
      [LT_BROWSE_ID] = "t.id",
      [LT_BROWSE_REWARD] = "t.reward",
      [LT_BROWSE_TOKENS] = "t.ntokens",
      [LT_BROWSE_STALENESS] = "t.consumed_step - t.version_min",
      [LT_BROWSE_VERSION] = "t.version_min",
  };
  if ((unsigned)q->sort >= LT_BROWSE_NSORTS || q->limit < 0 || q->limit > 1000 || q->offset < 0)
    return lt_error_set(LT_EINVAL, "browse: bad sort, limit or offset");
  unsigned set = filters_set(q);
  char w[1024], sql[2048];
  where(w, sizeof w, set);
  sqlite3_stmt *s;
  snprintf(sql, sizeof sql, "SELECT count(*)%s", w);
  int rc = prep(b, sql, &s);
  if (rc < 0) return rc;
  bind_filters(s, q, set);
  rc = sqlite3_step(s);
  *total = rc == SQLITE_ROW ? sqlite3_column_int64(s, 0) : 0;
  if ((rc = finish(b, s, rc)) < 0) return rc;
  /* The order is one of the fixed columns above; ties fall back to arrival. */
  snprintf(sql, sizeof sql,
           "SELECT t.task_id, t.group_id, t.domain, t.status, t.traj_status, t.finish, t.reason, "
           "coalesce(t.worker, ''), t.reward, t.ntokens, t.nturns, t.eval, t.truncated, t.version_min, t.version_max, "
           "t.time_ms, coalesce(t.consumed_step, -1)%s ORDER BY %s %s, t.id %s LIMIT ?11 OFFSET ?12",
           w, order[q->sort], q->desc ? "DESC" : "ASC", q->desc ? "DESC" : "ASC");
  if ((rc = prep(b, sql, &s)) < 0) return rc;
  bind_filters(s, q, set);
  sqlite3_bind_int(s, 11, q->limit);
  sqlite3_bind_int64(s, 12, q->offset);
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    lt_browse_row_t r = {.task_id = sqlite3_column_int64(s, 0),
                         .group_id = sqlite3_column_int64(s, 1),
                         .domain = text(s, 2),
                         .status = text(s, 3),
                         .outcome = text(s, 4),
                         .finish = text(s, 5),
                         .reason = text(s, 6),
                         .worker = text(s, 7),
                         .has_reward = sqlite3_column_type(s, 8) != SQLITE_NULL,
                         .reward = sqlite3_column_double(s, 8),
                         .ntokens = sqlite3_column_int(s, 9),
                         .nturns = sqlite3_column_int(s, 10),
                         .eval = sqlite3_column_int(s, 11),
                         .truncated = sqlite3_column_int(s, 12),
                         .version_min = sqlite3_column_int64(s, 13),
                         .version_max = sqlite3_column_int64(s, 14),
                         .time_ms = sqlite3_column_int64(s, 15),
                         .consumed_step = sqlite3_column_int64(s, 16)};
    if (fn(&r, ud)) break;
  }
  return finish(b, s, rc);
}

int lt_buffer_metric_points(lt_buffer_t *b, const char *name, int max, int (*fn)(int64_t step, double value, void *ud),
                            void *ud) {
  sqlite3_stmt *s;
  int rc = prep(
      b, "SELECT step, value FROM metrics WHERE name = ?1 AND value IS NOT NULL ORDER BY step, time_ms LIMIT ?2", &s);
  if (rc < 0) return rc;
  sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
  sqlite3_bind_int(s, 2, max);
  while ((rc = sqlite3_step(s)) == SQLITE_ROW)
    if (fn(sqlite3_column_int64(s, 0), sqlite3_column_double(s, 1), ud)) break;
  return finish(b, s, rc);
}

int lt_buffer_metric_band(lt_buffer_t *b, const char *lo_name, const char *hi_name, int max,
                          int (*fn)(int64_t step, double lo, double hi, void *ud), void *ud) {
  sqlite3_stmt *s;
  /* grouped: a resumed run may have recorded a step twice */
  int rc = prep(b,
                "SELECT lo.step, min(lo.value), max(hi.value) FROM metrics lo JOIN metrics hi ON hi.name = ?2 "
                "AND hi.step = lo.step AND hi.value IS NOT NULL WHERE lo.name = ?1 AND lo.value IS NOT NULL "
                "GROUP BY lo.step ORDER BY lo.step LIMIT ?3",
                &s);
  if (rc < 0) return rc;
  sqlite3_bind_text(s, 1, lo_name, -1, SQLITE_STATIC);
  sqlite3_bind_text(s, 2, hi_name, -1, SQLITE_STATIC);
  sqlite3_bind_int(s, 3, max);
  while ((rc = sqlite3_step(s)) == SQLITE_ROW)
    if (fn(sqlite3_column_int64(s, 0), sqlite3_column_double(s, 1), sqlite3_column_double(s, 2), ud)) break;
  return finish(b, s, rc);
}

int lt_buffer_workers_list(lt_buffer_t *b, int max,
                           int (*fn)(const char *name, const char *host, int slots, const char *backend,
                                     int64_t first_ms, int64_t last_ms, int64_t in_flight, void *ud),
                           void *ud) {
  sqlite3_stmt *s;
  /* in flight: through the status index, only the dispatched tasks are read */
  int rc = prep(b,
                "SELECT name, coalesce(host, ''), coalesce(slots, 0), coalesce(backend, ''), coalesce(first_ms, 0), "
                "coalesce(last_ms, 0), (SELECT count(*) FROM tasks k WHERE k.status = 'dispatched' AND "
                "k.worker = w.name) FROM workers w ORDER BY last_ms DESC, name LIMIT ?1",
                &s);
  if (rc < 0) return rc;
  sqlite3_bind_int(s, 1, max);
  while ((rc = sqlite3_step(s)) == SQLITE_ROW)
    if (fn(text(s, 0), text(s, 1), sqlite3_column_int(s, 2), text(s, 3), sqlite3_column_int64(s, 4),
           sqlite3_column_int64(s, 5), sqlite3_column_int64(s, 6), ud))
      break;
  return finish(b, s, rc);
}

int lt_buffer_events_recent(lt_buffer_t *b, int guardrails, int max,
                            int (*fn)(int64_t time_ms, const char *kind, const char *detail, void *ud), void *ud) {
  sqlite3_stmt *s;
  int rc = prep(b,
                "SELECT time_ms, kind, coalesce(detail, '') FROM events WHERE ?1 = 0 OR kind IN ('guardrail', "
                "'routing_alarm') ORDER BY id DESC LIMIT ?2",
                &s);
  if (rc < 0) return rc;
  sqlite3_bind_int(s, 1, guardrails);
  sqlite3_bind_int(s, 2, max);
  while ((rc = sqlite3_step(s)) == SQLITE_ROW)
    if (fn(sqlite3_column_int64(s, 0), text(s, 1), text(s, 2), ud)) break;
  return finish(b, s, rc);
}

int lt_buffer_quarantine_of(lt_buffer_t *b, int64_t task_id, int max,
                            int (*fn)(int64_t step, const char *why, void *ud), void *ud) {
  sqlite3_stmt *s;
  int rc = prep(b, "SELECT step, why FROM quarantine WHERE task_id = ?1 ORDER BY id LIMIT ?2", &s);
  if (rc < 0) return rc;
  sqlite3_bind_int64(s, 1, task_id);
  sqlite3_bind_int(s, 2, max);
  while ((rc = sqlite3_step(s)) == SQLITE_ROW)
    if (fn(sqlite3_column_int64(s, 0), text(s, 1), ud)) break;
  return finish(b, s, rc);
}
