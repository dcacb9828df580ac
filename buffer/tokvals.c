/* The `token_values` table (docs/buffer.md): what a learner step computed for each token of a trajectory it
 * trained (x_t, log π_old, Â_t, entropy, the objective's flags) and the trajectory mask's verdict, one row per
 * trajectory per step, the per-token arrays packed as one zstd-compressed blob.  `replay --fill-token-values`
 * writes recomputed rows for runs that have none; the web console reads them. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "buffer/internal.h"
#include "util/error.h"

enum { ZSTD_LEVEL = 3 };

/* Bytes of the unpacked arrays of n tokens: four float32 arrays and the flags. */
static size_t raw_bytes(int n) { return (size_t)n * (4 * sizeof(float) + 1); }

static int has_table(sqlite3 *db) {
  return sqlite3_table_column_metadata(db, NULL, "token_values", NULL, NULL, NULL, NULL, NULL, NULL) == SQLITE_OK;
}

static int spans_total(const lt_token_values_row_t *r) {
  int n = 0;
  for (int i = 0; i < r->nspans; i++) n += r->spans[2 * i + 1];
  return n;
}

int lt_buffer_token_values_put(lt_buffer_t *b, const lt_token_values_row_t *rows, int nrows) {
  sqlite3 *db = lt__buffer_db(b);
  static const char *sql =
      "INSERT OR REPLACE INTO token_values(task_id, step, recomputed, loss, traj_ratio, traj_ok, ntokens, spans, n, "
      "data) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)";
  sqlite3_stmt *s;
  int rc = sqlite3_prepare_v2(db, sql, -1, &s, NULL);
  if (rc != SQLITE_OK) return lt__buffer_err(b, rc, sql);
  int own = sqlite3_get_autocommit(db); /* one transaction (one sync) for the rows, unless the caller holds one */
  if (own && (rc = lt_buffer_begin(b)) < 0) {
    sqlite3_finalize(s);
    return rc;
  }
  char *raw = NULL, *z = NULL;
  size_t rcap = 0, zcap = 0;
  for (int k = 0; k < nrows && rc == 0; k++) {
    const lt_token_values_row_t *r = &rows[k];
    int n = spans_total(r);
    size_t nb = raw_bytes(n), zb = ZSTD_compressBound(nb);
    if (nb > rcap) {
      free(raw);
      rcap = nb;
      if (!(raw = malloc(rcap))) break;
    }
    if (zb > zcap) {
      free(z);
      zcap = zb;
      if (!(z = malloc(zcap))) break;
    }
    size_t fb = sizeof(float) * (size_t)n;
    memcpy(raw, r->ratio, fb);
    memcpy(raw + fb, r->logp_old, fb);
    memcpy(raw + 2 * fb, r->adv, fb);
    memcpy(raw + 3 * fb, r->entropy, fb);
    memcpy(raw + 4 * fb, r->flags, (size_t)n);
    size_t zn = ZSTD_compress(z, zcap, raw, nb, ZSTD_LEVEL);
    if (ZSTD_isError(zn)) {
      rc = lt_error_set(LT_EIO, "token values of task %lld: zstd: %s", (long long)r->task_id, ZSTD_getErrorName(zn));
      break;
    }
    sqlite3_bind_int64(s, 1, r->task_id);
    sqlite3_bind_int64(s, 2, r->step);
    sqlite3_bind_int(s, 3, r->recomputed);
    sqlite3_bind_text(s, 4, r->loss ? r->loss : "{}", -1, SQLITE_STATIC);
    if (isfinite(r->traj_ratio)) sqlite3_bind_double(s, 5, r->traj_ratio);
    else sqlite3_bind_null(s, 5);
    sqlite3_bind_int(s, 6, r->traj_ok);
    sqlite3_bind_int(s, 7, r->ntokens);
    sqlite3_bind_blob(s, 8, r->spans, (int)(sizeof(int32_t) * 2 * (size_t)r->nspans), SQLITE_STATIC);
    sqlite3_bind_int(s, 9, n);
    sqlite3_bind_blob(s, 10, z, (int)zn, SQLITE_STATIC);
    int st = sqlite3_step(s);
    sqlite3_reset(s);
    if (st != SQLITE_DONE) rc = lt__buffer_err(b, st, "storing token values");
  }
  if (rc == 0 && nrows > 0 && (!raw || !z)) rc = lt_error_set(LT_ENOMEM, "token values: out of memory");
  free(raw);
  free(z);
  sqlite3_finalize(s);
  if (own) {
    if (rc == 0) rc = lt_buffer_commit(b);
    else lt_buffer_rollback(b);
  }
  return rc;
}

/* The row's blobs unpacked into r (its arrays malloc'd). */
static int unpack(lt_buffer_t *b, sqlite3_stmt *s, lt_token_values_row_t *r) {
  int n = sqlite3_column_int(s, 8), sb = sqlite3_column_bytes(s, 7), zb = sqlite3_column_bytes(s, 9);
  const void *spans = sqlite3_column_blob(s, 7), *z = sqlite3_column_blob(s, 9);
  r->nspans = sb / (int)(2 * sizeof(int32_t));
  size_t nb = raw_bytes(n);
  char *raw = malloc(nb ? nb : 1);
  int32_t *sp = malloc(sb ? (size_t)sb : 1);
  if (!raw || !sp) {
    free(raw);
    free(sp);
    return lt_error_set(LT_ENOMEM, "token values: out of memory");
  }
  if (sb) memcpy(sp, spans, (size_t)sb);
  size_t got = z ? ZSTD_decompress(raw, nb, z, (size_t)zb) : 0;
  int total = 0;
  for (int i = 0; i < r->nspans; i++) {
    if (sp[2 * i] < 0 || sp[2 * i + 1] < 0 || sp[2 * i] + sp[2 * i + 1] > r->ntokens) total = -1;
    if (total >= 0) total += sp[2 * i + 1];
  }
  if (n < 0 || ZSTD_isError(got) || got != nb || total != n || sb % (int)(2 * sizeof(int32_t))) {
    free(raw);
    free(sp);
    return lt_error_set(LT_ECORRUPT, "%s: token values of task %lld at step %lld are damaged", lt_buffer_path(b),
                        (long long)r->task_id, (long long)r->step);
  }
  size_t fb = sizeof(float) * (size_t)n;
  r->spans = sp;
  r->n = n;
  r->ratio = (float *)raw; /* the arrays are views of one allocation: lt_buffer_token_values_free frees ratio */
  r->logp_old = (float *)(raw + fb);
  r->adv = (float *)(raw + 2 * fb);
  r->entropy = (float *)(raw + 3 * fb);
  r->flags = (uint8_t *)(raw + 4 * fb);
  return 0;
}

int lt_buffer_token_values_get(lt_buffer_t *b, int64_t task_id, lt_token_values_row_t *r) {
  memset(r, 0, sizeof *r);
  sqlite3 *db = lt__buffer_db(b);
  /* The stored row of the step that trained it before any recomputed one; the newest step first. */
  static const char *sql =
      "SELECT task_id, step, recomputed, loss, traj_ratio, traj_ok, ntokens, spans, n, data "
      "FROM token_values WHERE task_id = ?1 ORDER BY recomputed, step DESC LIMIT 1";
  sqlite3_stmt *s;
  int rc = sqlite3_prepare_v2(db, sql, -1, &s, NULL);
  if (rc != SQLITE_OK) {
    /* A read-only handle on a buffer from before the table (schema < 6): no values. */
    return has_table(db) ? lt__buffer_err(b, rc, sql) : 0;
  }
  sqlite3_bind_int64(s, 1, task_id);
  rc = sqlite3_step(s);
  if (rc == SQLITE_ROW) {
    r->task_id = sqlite3_column_int64(s, 0);
    r->step = sqlite3_column_int64(s, 1);
    r->recomputed = sqlite3_column_int(s, 2);
    const char *loss = (const char *)sqlite3_column_text(s, 3);
    r->loss = loss ? strdup(loss) : NULL;
    r->traj_ratio = sqlite3_column_type(s, 4) == SQLITE_NULL ? NAN : sqlite3_column_double(s, 4);
    r->traj_ok = sqlite3_column_int(s, 5);
    r->ntokens = sqlite3_column_int(s, 6);
    rc = loss && !r->loss ? lt_error_set(LT_ENOMEM, "token values: out of memory") : unpack(b, s, r);
    if (rc == 0) rc = 1;
  } else {
    rc = rc == SQLITE_DONE ? 0 : lt__buffer_err(b, rc, sql);
  }
  sqlite3_finalize(s);
  if (rc < 0) lt_buffer_token_values_free(r);
  return rc;
}

void lt_buffer_token_values_free(lt_token_values_row_t *r) {
  free((void *)r->loss);
  free((void *)r->spans);
  free((void *)r->ratio);
  memset(r, 0, sizeof *r);
}

int64_t lt_buffer_token_values_count(lt_buffer_t *b, int64_t step) {
  sqlite3 *db = lt__buffer_db(b);
  static const char *sql = "SELECT count(*) FROM token_values WHERE step = ?1 AND recomputed = 0";
  if (!has_table(db)) return 0; /* a buffer from before the table, opened read-only */
  sqlite3_stmt *s;
  int rc = sqlite3_prepare_v2(db, sql, -1, &s, NULL);
  if (rc != SQLITE_OK) return lt__buffer_err(b, rc, sql);
  sqlite3_bind_int64(s, 1, step);
  rc = sqlite3_step(s);
  int64_t n = rc == SQLITE_ROW ? sqlite3_column_int64(s, 0) : lt__buffer_err(b, rc, sql);
  sqlite3_finalize(s);
  return n;
}
