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
  return *deadline > 0 && (int64_t)(lt_time_mono_ns() / 1000000) > *deadline;
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

/* The filters of a page, one bound parameter each (?1 ... ?11); NULL or a cleared flag leaves it open. */
#define BROWSE_WHERE                                                                                             \
  " FROM trajectories t WHERE (?1 IS NULL OR t.domain = ?1) AND (?2 IS NULL OR t.status = ?2) "                \
  "AND (?3 IS NULL OR t.traj_status = ?3) AND (?4 IS NULL OR t.finish = ?4) AND (?5 IS NULL OR t.reward >= ?5) " \
  "AND (?6 IS NULL OR t.reward <= ?6) AND (?7 IS NULL OR t.consumed_step - t.version_min >= ?7) "                \
  "AND (?8 IS NULL OR t.consumed_step - t.version_min <= ?8) AND (?9 IS NULL OR t.version_min = ?9) "            \
  "AND (?10 IS NULL OR EXISTS (SELECT 1 FROM payloads p WHERE p.task_id = t.task_id AND instr(p.messages, ?10) > 0))"

static void bind_filters(sqlite3_stmt *s, const lt_browse_query_t *q) {
  if (q->domain) sqlite3_bind_text(s, 1, q->domain, -1, SQLITE_STATIC);
  if (q->status) sqlite3_bind_text(s, 2, q->status, -1, SQLITE_STATIC);
  if (q->outcome) sqlite3_bind_text(s, 3, q->outcome, -1, SQLITE_STATIC);
  if (q->finish) sqlite3_bind_text(s, 4, q->finish, -1, SQLITE_STATIC);
  if (q->has_reward_min) sqlite3_bind_double(s, 5, q->reward_min);
  if (q->has_reward_max) sqlite3_bind_double(s, 6, q->reward_max);
  if (q->has_stale_min) sqlite3_bind_int64(s, 7, q->stale_min);
  if (q->has_stale_max) sqlite3_bind_int64(s, 8, q->stale_max);
  if (q->has_version) sqlite3_bind_int64(s, 9, q->version);
  if (q->text && q->text[0]) sqlite3_bind_text(s, 10, q->text, -1, SQLITE_STATIC);
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
  sqlite3_stmt *s;
  int rc = prep(b, "SELECT count(*)" BROWSE_WHERE, &s);
  if (rc < 0) return rc;
  bind_filters(s, q);
  rc = sqlite3_step(s);
  *total = rc == SQLITE_ROW ? sqlite3_column_int64(s, 0) : 0;
  if ((rc = finish(b, s, rc)) < 0) return rc;
  /* The order is one of the fixed columns above; ties fall back to arrival. */
  char sql[2048];
  snprintf(sql, sizeof sql,
           "SELECT t.task_id, t.group_id, t.domain, t.status, t.traj_status, t.finish, t.reason, "
           "coalesce(t.worker, ''), t.reward, t.ntokens, t.nturns, t.eval, t.truncated, t.version_min, t.version_max, "
           "t.time_ms, coalesce(t.consumed_step, -1)" BROWSE_WHERE " ORDER BY %s %s, t.id %s LIMIT ?11 OFFSET ?12",
           order[q->sort], q->desc ? "DESC" : "ASC", q->desc ? "DESC" : "ASC");
  if ((rc = prep(b, sql, &s)) < 0) return rc;
  bind_filters(s, q);
  sqlite3_bind_int(s, 11, q->limit);
  sqlite3_bind_int64(s, 12, q->offset);
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    lt_browse_row_t r = {
        .task_id = sqlite3_column_int64(s, 0), .group_id = sqlite3_column_int64(s, 1), .domain = text(s, 2),
        .status = text(s, 3), .outcome = text(s, 4), .finish = text(s, 5), .reason = text(s, 6),
        .worker = text(s, 7), .has_reward = sqlite3_column_type(s, 8) != SQLITE_NULL,
        .reward = sqlite3_column_double(s, 8), .ntokens = sqlite3_column_int(s, 9),
        .nturns = sqlite3_column_int(s, 10), .eval = sqlite3_column_int(s, 11),
        .truncated = sqlite3_column_int(s, 12), .version_min = sqlite3_column_int64(s, 13),
        .version_max = sqlite3_column_int64(s, 14), .time_ms = sqlite3_column_int64(s, 15),
        .consumed_step = sqlite3_column_int64(s, 16)};
    if (fn(&r, ud)) break;
  }
  return finish(b, s, rc);
}

int lt_buffer_metric_points(lt_buffer_t *b, const char *name, int max,
                            int (*fn)(int64_t step, double value, void *ud), void *ud) {
  sqlite3_stmt *s;
  int rc = prep(b, "SELECT step, value FROM metrics WHERE name = ?1 AND value IS NOT NULL ORDER BY step, time_ms LIMIT ?2",
                &s);
  if (rc < 0) return rc;
  sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
  sqlite3_bind_int(s, 2, max);
  while ((rc = sqlite3_step(s)) == SQLITE_ROW)
    if (fn(sqlite3_column_int64(s, 0), sqlite3_column_double(s, 1), ud)) break;
  return finish(b, s, rc);
}

int lt_buffer_workers_list(lt_buffer_t *b, int max,
                           int (*fn)(const char *name, const char *host, int slots, const char *backend,
                                     int64_t first_ms, int64_t last_ms, void *ud),
                           void *ud) {
  sqlite3_stmt *s;
  int rc = prep(b, "SELECT name, coalesce(host, ''), coalesce(slots, 0), coalesce(backend, ''), coalesce(first_ms, 0), "
                   "coalesce(last_ms, 0) FROM workers ORDER BY last_ms DESC, name LIMIT ?1",
                &s);
  if (rc < 0) return rc;
  sqlite3_bind_int(s, 1, max);
  while ((rc = sqlite3_step(s)) == SQLITE_ROW)
    if (fn(text(s, 0), text(s, 1), sqlite3_column_int(s, 2), text(s, 3), sqlite3_column_int64(s, 4),
           sqlite3_column_int64(s, 5), ud))
      break;
  return finish(b, s, rc);
}

int lt_buffer_events_recent(lt_buffer_t *b, int guardrails, int max,
                            int (*fn)(int64_t time_ms, const char *kind, const char *detail, void *ud), void *ud) {
  sqlite3_stmt *s;
  int rc = prep(b, "SELECT time_ms, kind, coalesce(detail, '') FROM events WHERE ?1 = 0 OR kind IN ('guardrail', "
                   "'routing_alarm') ORDER BY id DESC LIMIT ?2",
                &s);
  if (rc < 0) return rc;
  sqlite3_bind_int(s, 1, guardrails);
  sqlite3_bind_int(s, 2, max);
  while ((rc = sqlite3_step(s)) == SQLITE_ROW)
    if (fn(sqlite3_column_int64(s, 0), text(s, 1), text(s, 2), ud)) break;
  return finish(b, s, rc);
}
