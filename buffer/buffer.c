/* The buffer's writers' side (buffer/buffer.h): opening, schema and migrations, prepared statements, and the
 * queries the daemon's writer and the learner run (tasks, trajectories, marks, metrics, events, checkpoints). */
#include "buffer/buffer.h"

#include "buffer/internal.h"

#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/buf.h"
#include "util/error.h"
#include "util/fs.h"

/* The schema's version; 2: payloads.support_ids, payloads.temperature; 3: quarantine; 4: prompts.copy_of;
 * 5: payloads.seq_starts; 6: token_values; 7: payloads.diff (docs/buffer.md). */
#define LT_BUFFER_SCHEMA 7

/* The trajectory's row and its payload, a table: X(column, SQL declaration, schema that added it).
 * The CREATE statements, the INSERTs (named parameters bound by column name), the SELECTs (read by the column's
 * enum, TC_x / PC_x), the migrations (ALTER TABLE for a column newer than the file) and the reads of an older file
 * (NULL for a column it does not have yet) are all generated from these lists: a new column is one entry here, its
 * bind in lt_buffer_traj_insert and its read in lt_buffer_traj_load (buffer/round_trips_every_column checks each). */
/* A table (clang-format leaves it as written): */
/* clang-format off */
#define TRAJ_COLUMNS(X)                                                                                             \
  X(group_id, "INTEGER NOT NULL", 1) X(domain, "TEXT NOT NULL", 1) X(status, "TEXT NOT NULL", 1)                  \
  X(traj_status, "TEXT NOT NULL", 1) X(reward, "REAL", 1) X(components, "TEXT NOT NULL", 1)                       \
  X(finish, "TEXT NOT NULL", 1) X(reason, "TEXT NOT NULL", 1) X(truncated, "INTEGER NOT NULL", 1)                 \
  X(ntokens, "INTEGER NOT NULL", 1) X(nturns, "INTEGER NOT NULL", 1) X(version_min, "INTEGER NOT NULL", 1)         \
  X(version_max, "INTEGER NOT NULL", 1) X(worker, "TEXT", 1) X(gen_ms, "REAL", 1) X(env_ms, "REAL", 1)            \
  X(reward_ms, "REAL", 1) X(time_ms, "INTEGER NOT NULL", 1) X(consumed_step, "INTEGER", 1)                         \
  X(eval, "INTEGER NOT NULL DEFAULT 0", 1) X(eval_round, "INTEGER NOT NULL DEFAULT -1", 1) X(error, "TEXT", 1)
#define PAYLOAD_COLUMNS(X)                                                                                          \
  X(tokens, "BLOB NOT NULL", 1) X(logprobs, "BLOB NOT NULL", 1) X(loss_mask, "BLOB NOT NULL", 1)                  \
  X(versions, "BLOB NOT NULL", 1) X(support, "BLOB", 1) X(routing_ids, "BLOB", 1) X(routing_probs, "BLOB", 1)     \
  X(routing_layers, "INTEGER NOT NULL DEFAULT 0", 1) X(routing_k, "INTEGER NOT NULL DEFAULT 0", 1)                \
  X(routing_experts, "INTEGER NOT NULL DEFAULT 0", 1) X(messages, "TEXT NOT NULL", 1) X(support_ids, "BLOB", 2)    \
  X(temperature, "REAL", 2) X(seq_starts, "BLOB", 5) X(diff, "TEXT", 7)
/* clang-format on */

#define COL_DECL(c, decl, since) ", " #c " " decl
#define COL_NAME(c, decl, since) ", " #c
#define COL_PARAM(c, decl, since) ", ?"
#define TC_ENUM(c, decl, since) TC_##c,
#define PC_ENUM(c, decl, since) PC_##c,
enum { TRAJ_COLUMNS(TC_ENUM) TC_N };
enum { PAYLOAD_COLUMNS(PC_ENUM) PC_N };
typedef struct {
  const char *name, *decl;
  int since;
} col_t;
#define COL_ROW(c, decl, since) {#c, decl, since},
static const col_t TRAJ_COLS[] = {TRAJ_COLUMNS(COL_ROW)}, PAYLOAD_COLS[] = {PAYLOAD_COLUMNS(COL_ROW)};
/* Column c's parameter in a generated INSERT ("VALUES(?, …)", task_id first) and its index in a generated SELECT
 * ("SELECT task_id, …"): by the column's name, so that a misspelt one does not compile. */
#define TPARAM(c) (2 + TC_##c)
#define PPARAM(c) (2 + PC_##c)
#define TCOL(c) (1 + TC_##c)
#define PCOL(c) (1 + PC_##c)

static const char *SCHEMA[] = {
    "CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT)",
    "CREATE TABLE IF NOT EXISTS counters(name TEXT PRIMARY KEY, value INTEGER NOT NULL)",
    "CREATE TABLE IF NOT EXISTS prompts(id INTEGER PRIMARY KEY, domain TEXT NOT NULL, spec TEXT NOT NULL, "
    "eval INTEGER NOT NULL DEFAULT 0, copy_of INTEGER)",
    /* A task's history (lt_buffer_task_history) looks its earlier prompts up by their spec less the epoch. */
    "CREATE INDEX IF NOT EXISTS prompts_task ON prompts(domain, json_remove(spec, '$.epoch'))",
    "CREATE TABLE IF NOT EXISTS tasks(id INTEGER PRIMARY KEY, prompt_id INTEGER NOT NULL, domain TEXT NOT NULL, "
    "eval INTEGER NOT NULL DEFAULT 0, eval_round INTEGER NOT NULL DEFAULT -1, status TEXT NOT NULL, "
    "attempts INTEGER NOT NULL DEFAULT 0, worker TEXT, version INTEGER NOT NULL DEFAULT -1)",
    "CREATE INDEX IF NOT EXISTS tasks_status ON tasks(status)",
    "CREATE TABLE IF NOT EXISTS trajectories(id INTEGER PRIMARY KEY, task_id INTEGER NOT NULL UNIQUE" TRAJ_COLUMNS(
        COL_DECL) ")",
    "CREATE INDEX IF NOT EXISTS traj_status ON trajectories(status)",
    "CREATE INDEX IF NOT EXISTS traj_group ON trajectories(group_id)",
    /* The mean reward of `stats` and the console (lt_buffer_reward_mean) read from this index alone: 0.10 s instead
     * of the table's 0.17 s on 1M trajectories.  Partial, so evaluation and failed trajectories cost nothing at
     * ingest; created by the next writable open of an older file. */
    "CREATE INDEX IF NOT EXISTS traj_ok_reward ON trajectories(reward) WHERE eval = 0 AND traj_status = 'ok'",
    "CREATE INDEX IF NOT EXISTS tasks_prompt ON tasks(prompt_id)",
    "CREATE TABLE IF NOT EXISTS payloads(task_id INTEGER PRIMARY KEY" PAYLOAD_COLUMNS(COL_DECL) ")",
    "CREATE TABLE IF NOT EXISTS metrics(step INTEGER NOT NULL, name TEXT NOT NULL, value REAL, time_ms INTEGER NOT NULL)",
    "CREATE INDEX IF NOT EXISTS metrics_name ON metrics(name, step)",
    "CREATE TABLE IF NOT EXISTS events(id INTEGER PRIMARY KEY, time_ms INTEGER NOT NULL, kind TEXT NOT NULL, detail TEXT)",
    "CREATE TABLE IF NOT EXISTS checkpoints(version INTEGER PRIMARY KEY, step INTEGER NOT NULL, kind TEXT NOT NULL, "
    "path TEXT NOT NULL, sha256 TEXT)",
    "CREATE TABLE IF NOT EXISTS workers(name TEXT PRIMARY KEY, host TEXT, slots INTEGER, backend TEXT, "
    "first_ms INTEGER, last_ms INTEGER)",
    /* Trajectories the learner could not use, moved out of `trajectories` so that their task's next attempt can
     * be stored (schema 3). */
    "CREATE TABLE IF NOT EXISTS quarantine(id INTEGER PRIMARY KEY, task_id INTEGER NOT NULL, group_id INTEGER NOT NULL, "
    "step INTEGER NOT NULL, why TEXT NOT NULL, time_ms INTEGER NOT NULL, worker TEXT, domain TEXT NOT NULL, "
    "traj_status TEXT NOT NULL, reward REAL, ntokens INTEGER NOT NULL, version_min INTEGER NOT NULL, "
    "version_max INTEGER NOT NULL, tokens BLOB NOT NULL, logprobs BLOB NOT NULL, loss_mask BLOB NOT NULL, "
    "versions BLOB NOT NULL, messages TEXT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS quarantine_task ON quarantine(task_id)",
    /* What the learner step computed for each token of a trajectory it trained (buffer/tokvals.c, schema 6). */
    "CREATE TABLE IF NOT EXISTS token_values(task_id INTEGER NOT NULL, step INTEGER NOT NULL, recomputed INTEGER NOT "
    "NULL, loss TEXT NOT NULL, traj_ratio REAL, traj_ok INTEGER NOT NULL, ntokens INTEGER NOT NULL, spans BLOB NOT NULL, "
    "n INTEGER NOT NULL, data BLOB NOT NULL, PRIMARY KEY(task_id, step, recomputed))",
    /* A step's rows: the console's "why not trained" asks whether a step stored any; a resume's rewind drops them. */
    "CREATE INDEX IF NOT EXISTS token_values_step ON token_values(step)",
};

enum {
  S_META_SET,
  S_META_GET,
  S_COUNTER_ADD,
  S_COUNTER_GET,
  S_PROMPT_INS,
  S_PROMPT_SPEC,
  S_TASK_INS,
  S_TASK_UPD,
  S_TRAJ_INS,
  S_PAYLOAD_INS,
  S_TRAJ_GET,
  S_PAYLOAD_GET,
  S_TRAJ_MARK,
  S_READY,
  S_METRIC,
  S_EVENT,
  S_CKPT,
  S_WORKER,
  S_COUNT_STATUS,
  S_N
};

static const char *STMTS[S_N] = {
    [S_META_SET] = "INSERT INTO meta(key, value) VALUES(?1, ?2) ON CONFLICT(key) DO UPDATE SET value = ?2",
    [S_META_GET] = "SELECT value FROM meta WHERE key = ?1",
    [S_COUNTER_ADD] =
        "INSERT INTO counters(name, value) VALUES(?1, ?2) ON CONFLICT(name) DO UPDATE SET value = value + ?2",
    [S_COUNTER_GET] = "SELECT value FROM counters WHERE name = ?1",
    [S_PROMPT_INS] = "INSERT OR IGNORE INTO prompts(id, domain, spec, eval, copy_of) VALUES(?1, ?2, ?3, ?4, ?5)",
    [S_PROMPT_SPEC] = "SELECT spec FROM prompts WHERE id = ?1",
    [S_TASK_INS] =
        "INSERT INTO tasks(id, prompt_id, domain, eval, eval_round, status, attempts, worker, version) "
        "VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
    [S_TASK_UPD] =
        "UPDATE tasks SET status = ?2, attempts = iif(?3 < 0, attempts, ?3), worker = ?4, version = ?5 WHERE id = ?1",
    /* consumed_step is bound NULL: a new trajectory is ready */
    [S_TRAJ_INS] =
        "INSERT OR IGNORE INTO trajectories(task_id" TRAJ_COLUMNS(COL_NAME) ") VALUES(?" TRAJ_COLUMNS(COL_PARAM) ")",
    [S_PAYLOAD_INS] =
        "INSERT INTO payloads(task_id" PAYLOAD_COLUMNS(COL_NAME) ") VALUES(?" PAYLOAD_COLUMNS(COL_PARAM) ")",
    /* "SELECT task_id, …": column i + 1 is TC_x / PC_x = i */
    [S_TRAJ_GET] = "SELECT task_id" TRAJ_COLUMNS(COL_NAME) " FROM trajectories WHERE task_id = ?1",
    [S_PAYLOAD_GET] = "SELECT task_id" PAYLOAD_COLUMNS(COL_NAME) " FROM payloads WHERE task_id = ?1",
    [S_TRAJ_MARK] = "UPDATE trajectories SET status = ?2, consumed_step = ?3 WHERE task_id = ?1",
    [S_READY] =
        "SELECT t.task_id, t.group_id, t.version_min, t.reward, t.truncated, "
        "(SELECT count(*) FROM trajectories g WHERE g.group_id = t.group_id) + "
        "(SELECT count(*) FROM tasks k WHERE k.prompt_id = t.group_id AND k.status = 'failed'), t.domain "
        "FROM trajectories t WHERE t.status = 'ready' ORDER BY t.id LIMIT ?1",
    [S_METRIC] = "INSERT INTO metrics(step, name, value, time_ms) VALUES(?1, ?2, ?3, ?4)",
    [S_EVENT] = "INSERT INTO events(time_ms, kind, detail) VALUES(?1, ?2, ?3)",
    [S_CKPT] = "INSERT OR REPLACE INTO checkpoints(version, step, kind, path, sha256) VALUES(?1, ?2, ?3, ?4, ?5)",
    [S_WORKER] =
        "INSERT INTO workers(name, host, slots, backend, first_ms, last_ms) VALUES(?1, ?2, ?3, ?4, ?5, ?5) "
        "ON CONFLICT(name) DO UPDATE SET host = ?2, slots = ?3, backend = ?4, last_ms = ?5",
    [S_COUNT_STATUS] = "SELECT count(*) FROM trajectories WHERE status = ?1",
};

struct lt_buffer {
  sqlite3 *db;
  sqlite3_stmt *st[S_N];
  char *path;
  int readonly;
  char damage[512]; /* the first corruption error SQLite reported on this handle ("": none) */
};

static const char *tr_names[LT_SAMPLE_NSTATES] = {"ready", "consumed", "stale", "filtered", "failed", "eval", "masked"};
static const char *task_names[] = {"queued", "dispatched", "done", "failed"};

const char *lt_sample_state_name(lt_sample_state s) { return (unsigned)s < LT_SAMPLE_NSTATES ? tr_names[s] : "?"; }

/* Every way a damaged file shows itself (the full check, the cheap one at open, a read that meets a bad page) gives
 * this message and LT_ECORRUPT (exit 6), and the handle remembers it for readers that take a failed lookup's 0. */
static int damaged(lt_buffer_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int damaged(lt_buffer_t *b, const char *fmt, ...) {
  char detail[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(detail, sizeof detail, fmt, ap);
  va_end(ap);
  if (!b->damage[0]) snprintf(b->damage, sizeof b->damage, "%s: damaged buffer: %s", b->path, detail);
  return lt_error_set(LT_ECORRUPT, "%s", b->damage);
}

int lt_buffer_damaged(lt_buffer_t *b) { return b->damage[0] ? lt_error_set(LT_ECORRUPT, "%s", b->damage) : 0; }

static int db_err(lt_buffer_t *b, int rc, const char *what) {
  if ((rc & 0xff) == SQLITE_CORRUPT || (rc & 0xff) == SQLITE_NOTADB)
    return damaged(b, "%s, in: %.120s (`longtail stats RUN --check` checks the whole file)",
                   b->db ? sqlite3_errmsg(b->db) : sqlite3_errstr(rc), what);
  int code = (rc & 0xff) == SQLITE_FULL                                   ? LT_ENOSPC
             : (rc & 0xff) == SQLITE_BUSY || (rc & 0xff) == SQLITE_LOCKED ? LT_EBUSY
             : (rc & 0xff) == SQLITE_CONSTRAINT                           ? LT_EDUP
             : (rc & 0xff) == SQLITE_INTERRUPT ? LT_ETIMEDOUT /* past a reader's deadline (buffer/browse.c) */
                                               : LT_EIO;
  return lt_error_set(code, "%s: %s: %s", b->path, what, b->db ? sqlite3_errmsg(b->db) : sqlite3_errstr(rc));
}

static int exec(lt_buffer_t *b, const char *sql) {
  char *err = NULL;
  int rc = sqlite3_exec(b->db, sql, NULL, NULL, &err);
  if (rc != SQLITE_OK) {
    int code = db_err(b, rc, sql);
    sqlite3_free(err);
    return code;
  }
  return 0;
}

#define LT_STR_(x) #x
#define LT_STR(x) LT_STR_(x)

/* Each column a file's schema lacks is added (NULL in older rows: docs/buffer.md says what NULL means for each):
 * 1 → 2 payloads.support_ids and payloads.temperature (unknown: the run's settings apply), 4 → 5
 * payloads.seq_starts (one sequence).  Tables a later schema added (quarantine 3, token_values 6) were just created,
 * empty, by the schema statements; 3 → 4 prompts.copy_of (NULL: an original). */
static int add_columns(lt_buffer_t *b, const char *table, const col_t *cols, int n, int ver) {
  int rc = 0;
  for (int i = 0; i < n && rc == 0; i++) {
    if (cols[i].since <= ver) continue;
    char sql[256];
    snprintf(sql, sizeof sql, "ALTER TABLE %s ADD COLUMN %s %s", table, cols[i].name, cols[i].decl);
    rc = exec(b, sql);
  }
  return rc;
}

static int migrate(lt_buffer_t *b) {
  sqlite3_stmt *s;
  int ver = 0;
  if (sqlite3_prepare_v2(b->db, "SELECT value FROM meta WHERE key = 'schema_version'", -1, &s, NULL) != SQLITE_OK)
    return db_err(b, SQLITE_ERROR, "read schema_version");
  if (sqlite3_step(s) == SQLITE_ROW) ver = sqlite3_column_int(s, 0);
  sqlite3_finalize(s);
  if (ver < 1 || ver >= LT_BUFFER_SCHEMA) return 0;
  int rc = add_columns(b, "trajectories", TRAJ_COLS, TC_N, ver);
  if (rc == 0) rc = add_columns(b, "payloads", PAYLOAD_COLS, PC_N, ver);
  if (rc == 0 && ver <= 3) rc = exec(b, "ALTER TABLE prompts ADD COLUMN copy_of INTEGER");
  if (rc == 0) rc = exec(b, "UPDATE meta SET value = '" LT_STR(LT_BUFFER_SCHEMA) "' WHERE key = 'schema_version'");
  return rc;
}

/* A read-only handle cannot migrate an older file: its SELECT reads NULL for each column the file lacks.  NULL when
 * the file has them all (the static statement serves), "" when out of memory. */
static char *select_older(const char *table, const col_t *cols, int n, int ver) {
  int missing = 0;
  for (int i = 0; i < n; i++) missing |= cols[i].since > ver;
  if (!missing) return NULL;
  lt_buf_t q = {0};
  lt_buf_puts(&q, "SELECT task_id");
  for (int i = 0; i < n; i++) lt_buf_printf(&q, ", %s", cols[i].since > ver ? "NULL" : cols[i].name);
  lt_buf_printf(&q, " FROM %s WHERE task_id = ?1", table);
  return lt_buf_ok(&q) == 0 ? lt_buf_take(&q) : (lt_buf_free(&q), strdup(""));
}

const char *lt_buffer_path(const lt_buffer_t *b) { return b->path; }

void lt_buffer_close(lt_buffer_t *b) {
  if (!b) return;
  for (int i = 0; i < S_N; i++) sqlite3_finalize(b->st[i]);
  sqlite3_close(b->db);
  free(b->path);
  free(b);
}

static int integrity(lt_buffer_t *b) {
  sqlite3_stmt *s;
  int rc = sqlite3_prepare_v2(b->db, "PRAGMA integrity_check", -1, &s, NULL);
  if (rc != SQLITE_OK) return db_err(b, rc, "integrity check");
  int ok = 0;
  char first[256] = "";
  if (sqlite3_step(s) == SQLITE_ROW) {
    const char *r = (const char *)sqlite3_column_text(s, 0);
    ok = r && strcmp(r, "ok") == 0;
    snprintf(first, sizeof first, "%s", r ? r : "?");
  }
  sqlite3_finalize(s);
  if (!ok) return damaged(b, "integrity check failed: %s", first);
  return 0;
}

/* The check every open makes instead of the full one (which reads the whole file: seconds on a large run): SQLite
 * has checked the header against the file's size when it read the schema; here each table's and index's b-tree is
 * entered at its root and walked down to its first and its last entry.  A few pages each, and the ones a torn or
 * scribbled write most likely hit: the roots and the newest rows.  Damage elsewhere shows when a read meets it. */
static int probe(lt_buffer_t *b) {
  sqlite3_stmt *s;
  int rc =
      sqlite3_prepare_v2(b->db,
                         "SELECT m.type, m.name, m.tbl_name, (SELECT name FROM pragma_index_info(m.name) "
                         "WHERE seqno = 0) FROM sqlite_master m WHERE m.type IN ('table', 'index') AND m.rootpage > 0",
                         -1, &s, NULL);
  if (rc != SQLITE_OK) return db_err(b, rc, "reading the schema");
  while (rc >= 0 && (rc = sqlite3_step(s)) == SQLITE_ROW) {
    const char *type = (const char *)sqlite3_column_text(s, 0), *name = (const char *)sqlite3_column_text(s, 1),
               *tbl = (const char *)sqlite3_column_text(s, 2), *col = (const char *)sqlite3_column_text(s, 3);
    int index = type && !strcmp(type, "index");
    if (!name || !tbl || (index && !col)) continue; /* an index on an expression first: no column to order by */
    for (int desc = 0; desc < 2 && rc >= 0; desc++) {
      char *sql = index
                      ? sqlite3_mprintf("SELECT \"%w\" FROM \"%w\" INDEXED BY \"%w\" ORDER BY 1 %s LIMIT 1", col, tbl,
                                        name, desc ? "DESC" : "")
                      : sqlite3_mprintf("SELECT rowid FROM \"%w\" ORDER BY rowid %s LIMIT 1", name, desc ? "DESC" : "");
      rc = sql ? exec(b, sql) : lt_error_set(LT_ENOMEM, "buffer: out of memory");
      sqlite3_free(sql);
      if (rc < 0 && rc != LT_ECORRUPT && rc != LT_ENOMEM) rc = 0; /* a walk the planner cannot make proves nothing */
    }
  }
  if (rc == SQLITE_DONE) rc = 0;
  else if (rc > 0) rc = db_err(b, rc, "reading the schema");
  sqlite3_finalize(s);
  return rc;
}

int lt_buffer_open(const char *path, int flags, lt_buffer_t **out) {
  *out = NULL;
  if (!(flags & LT_BUF_CREATE) && !lt_fs_exists(path)) return lt_error_set(LT_ENOENT, "%s: no such buffer file", path);
  lt_buffer_t *b = calloc(1, sizeof *b);
  if (!b || !(b->path = strdup(path))) {
    free(b);
    return lt_error_set(LT_ENOMEM, "buffer: out of memory");
  }
  b->readonly = flags & LT_BUF_READONLY;
  int oflags =
      b->readonly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | (flags & LT_BUF_CREATE ? SQLITE_OPEN_CREATE : 0);
  int rc = sqlite3_open_v2(path, &b->db, oflags | SQLITE_OPEN_NOMUTEX, NULL);
  if (rc != SQLITE_OK) {
    rc = db_err(b, rc, "cannot open");
    lt_buffer_close(b);
    return rc;
  }
  sqlite3_busy_timeout(b->db, 10000);
  sqlite3_extended_result_codes(b->db, 1);
  /* Reading any page tells a foreign file (not SQLite) apart. */
  if ((rc = exec(b, "SELECT count(*) FROM sqlite_master")) < 0) {
    lt_error_set(rc == LT_ECORRUPT ? LT_EFORMAT : rc, "%s: not a longtail buffer (not an SQLite database)", path);
    lt_buffer_close(b);
    return rc == LT_ECORRUPT ? LT_EFORMAT : rc;
  }
  if ((rc = (flags & LT_BUF_CHECK) ? integrity(b) : probe(b)) < 0) {
    lt_buffer_close(b);
    return rc;
  }
  if (!b->readonly) {
    /* FULL: an ACKed trajectory must survive a power loss, not only a crash. */
    if ((rc = exec(b, "PRAGMA journal_mode=WAL")) < 0 || (rc = exec(b, "PRAGMA synchronous=FULL")) < 0 ||
        (rc = exec(b, "BEGIN")) < 0) {
      lt_buffer_close(b);
      return rc;
    }
    for (size_t i = 0; i < sizeof SCHEMA / sizeof SCHEMA[0] && rc == 0; i++) rc = exec(b, SCHEMA[i]);
    /* A new file is created at the current schema; an older one is migrated. */
    if (rc == 0)
      rc = exec(b, "INSERT OR IGNORE INTO meta(key, value) VALUES('schema_version', '" LT_STR(LT_BUFFER_SCHEMA) "')");
    if (rc == 0) rc = migrate(b);
    if (rc == 0) rc = exec(b, "INSERT OR IGNORE INTO meta(key, value) VALUES('format', 'longtail-buffer')");
    if (rc == 0) rc = exec(b, "COMMIT");
    else exec(b, "ROLLBACK");
    if (rc < 0) {
      lt_buffer_close(b);
      return rc;
    }
  }
  /* Identify the file: a longtail buffer with a schema this build can read. */
  sqlite3_stmt *s;
  int ver = -1, fmt = 0;
  if (sqlite3_prepare_v2(b->db, "SELECT key, value FROM meta WHERE key IN ('schema_version', 'format')", -1, &s,
                         NULL) == SQLITE_OK) {
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
      const char *k = (const char *)sqlite3_column_text(s, 0), *v = (const char *)sqlite3_column_text(s, 1);
      if (k && v && !strcmp(k, "schema_version")) ver = atoi(v);
      if (k && v && !strcmp(k, "format") && !strcmp(v, "longtail-buffer")) fmt = 1;
    }
    sqlite3_finalize(s);
    /* A meta table that cannot be read is damage, not a foreign file. */
    if ((rc & 0xff) == SQLITE_CORRUPT || (rc & 0xff) == SQLITE_NOTADB) {
      rc = db_err(b, rc, "reading the buffer's metadata");
      lt_buffer_close(b);
      return rc;
    }
  }
  if (!fmt || ver < 1) {
    lt_buffer_close(b);
    return lt_error_set(LT_EFORMAT, "%s: not a longtail buffer (no longtail metadata)", path);
  }
  if (ver > LT_BUFFER_SCHEMA) {
    lt_buffer_close(b);
    return lt_error_set(LT_EVERSION, "%s: buffer schema %d is newer than this build's %d", path, ver, LT_BUFFER_SCHEMA);
  }
  for (int i = 0; i < S_N; i++) {
    if (b->readonly && (i == S_META_SET || i == S_COUNTER_ADD || i == S_PROMPT_INS || i == S_TASK_INS ||
                        i == S_TASK_UPD || i == S_TRAJ_INS || i == S_PAYLOAD_INS || i == S_TRAJ_MARK || i == S_METRIC ||
                        i == S_EVENT || i == S_CKPT || i == S_WORKER))
      continue;
    char *older = i == S_TRAJ_GET      ? select_older("trajectories", TRAJ_COLS, TC_N, ver)
                  : i == S_PAYLOAD_GET ? select_older("payloads", PAYLOAD_COLS, PC_N, ver)
                                       : NULL;
    const char *sql = older ? older : STMTS[i];
    rc = !sql[0] ? lt_error_set(LT_ENOMEM, "%s: out of memory", path)
                 : sqlite3_prepare_v3(b->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &b->st[i], NULL);
    if (rc != SQLITE_OK) {
      rc = rc < 0 ? rc : db_err(b, rc, sql);
      free(older);
      lt_buffer_close(b);
      return rc;
    }
    free(older);
  }
  *out = b;
  return 0;
}

int lt_buffer_begin(lt_buffer_t *b) { return exec(b, "BEGIN IMMEDIATE"); }

int lt_buffer_commit(lt_buffer_t *b) {
  int rc = exec(b, "COMMIT");
  if (rc < 0) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", lt_error_msg());
    exec(b, "ROLLBACK");
    lt_error_set(rc, "%s", msg);
  }
  return rc;
}

void lt_buffer_rollback(lt_buffer_t *b) {
  if (!sqlite3_get_autocommit(b->db)) exec(b, "ROLLBACK");
}

/* Runs a prepared statement to completion (no rows expected). */
static int stmt_run(lt_buffer_t *b, int i) {
  sqlite3_stmt *s = b->st[i];
  if (!s) return lt_error_set(LT_EINVAL, "%s: read-only buffer handle", b->path);
  int rc = sqlite3_step(s);
  sqlite3_reset(s);
  sqlite3_clear_bindings(s);
  return rc == SQLITE_DONE ? 0 : db_err(b, rc, STMTS[i]);
}

static void bind_text(sqlite3_stmt *s, int i, const char *v) {
  if (v) sqlite3_bind_text(s, i, v, -1, SQLITE_TRANSIENT);
  else sqlite3_bind_null(s, i);
}

int lt_buffer_meta_set(lt_buffer_t *b, const char *key, const char *value) {
  if (!b->st[S_META_SET]) return lt_error_set(LT_EINVAL, "%s: read-only buffer handle", b->path);
  bind_text(b->st[S_META_SET], 1, key);
  bind_text(b->st[S_META_SET], 2, value);
  return stmt_run(b, S_META_SET);
}

char *lt_buffer_meta_get(lt_buffer_t *b, const char *key) {
  sqlite3_stmt *s = b->st[S_META_GET];
  bind_text(s, 1, key);
  char *v = NULL;
  if (sqlite3_step(s) == SQLITE_ROW && sqlite3_column_text(s, 0)) v = strdup((const char *)sqlite3_column_text(s, 0));
  sqlite3_reset(s);
  return v;
}

int lt_buffer_counter_add(lt_buffer_t *b, const char *name, int64_t delta) {
  if (!b->st[S_COUNTER_ADD]) return lt_error_set(LT_EINVAL, "%s: read-only buffer handle", b->path);
  bind_text(b->st[S_COUNTER_ADD], 1, name);
  sqlite3_bind_int64(b->st[S_COUNTER_ADD], 2, delta);
  return stmt_run(b, S_COUNTER_ADD);
}

int64_t lt_buffer_counter(lt_buffer_t *b, const char *name) {
  sqlite3_stmt *s = b->st[S_COUNTER_GET];
  bind_text(s, 1, name);
  int64_t v = sqlite3_step(s) == SQLITE_ROW ? sqlite3_column_int64(s, 0) : 0;
  sqlite3_reset(s);
  return v;
}

int lt_buffer_prompt_insert(lt_buffer_t *b, int64_t id, const char *domain, const char *spec, int eval,
                            int64_t copy_of) {
  sqlite3_stmt *s = b->st[S_PROMPT_INS];
  if (!s) return lt_error_set(LT_EINVAL, "%s: read-only buffer handle", b->path);
  sqlite3_bind_int64(s, 1, id);
  bind_text(s, 2, domain);
  bind_text(s, 3, spec);
  sqlite3_bind_int(s, 4, eval);
  if (copy_of > 0) sqlite3_bind_int64(s, 5, copy_of);
  else sqlite3_bind_null(s, 5);
  return stmt_run(b, S_PROMPT_INS);
}

char *lt_buffer_prompt_spec(lt_buffer_t *b, int64_t id) {
  sqlite3_stmt *s = b->st[S_PROMPT_SPEC];
  sqlite3_bind_int64(s, 1, id);
  char *v = NULL;
  if (sqlite3_step(s) == SQLITE_ROW && sqlite3_column_text(s, 0)) v = strdup((const char *)sqlite3_column_text(s, 0));
  sqlite3_reset(s);
  return v;
}

int lt_buffer_task_insert(lt_buffer_t *b, const lt_task_row_t *t) {
  sqlite3_stmt *s = b->st[S_TASK_INS];
  if (!s) return lt_error_set(LT_EINVAL, "%s: read-only buffer handle", b->path);
  sqlite3_bind_int64(s, 1, t->id);
  sqlite3_bind_int64(s, 2, t->prompt_id);
  bind_text(s, 3, t->domain);
  sqlite3_bind_int(s, 4, t->eval);
  sqlite3_bind_int64(s, 5, t->eval_round);
  bind_text(s, 6, task_names[t->status]);
  sqlite3_bind_int(s, 7, t->attempts);
  bind_text(s, 8, t->worker);
  sqlite3_bind_int64(s, 9, t->version);
  return stmt_run(b, S_TASK_INS);
}

int lt_buffer_task_update(lt_buffer_t *b, int64_t id, lt_task_status st, int attempts, const char *worker,
                          int64_t version) {
  sqlite3_stmt *s = b->st[S_TASK_UPD];
  if (!s) return lt_error_set(LT_EINVAL, "%s: read-only buffer handle", b->path);
  sqlite3_bind_int64(s, 1, id);
  bind_text(s, 2, task_names[st]);
  sqlite3_bind_int(s, 3, attempts);
  bind_text(s, 4, worker);
  sqlite3_bind_int64(s, 5, version);
  return stmt_run(b, S_TASK_UPD);
}

int lt_buffer_tasks_open(lt_buffer_t *b, void (*fn)(const lt_task_row_t *t, void *ud), void *ud) {
  sqlite3_stmt *s;
  int rc =
      sqlite3_prepare_v2(b->db,
                         "SELECT id, prompt_id, domain, eval, eval_round, status, attempts, worker, version FROM tasks "
                         "WHERE status IN ('queued', 'dispatched') ORDER BY id",
                         -1, &s, NULL);
  if (rc != SQLITE_OK) return db_err(b, rc, "open tasks");
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    const char *st = (const char *)sqlite3_column_text(s, 5);
    lt_task_row_t t = {.id = sqlite3_column_int64(s, 0),
                       .prompt_id = sqlite3_column_int64(s, 1),
                       .domain = (const char *)sqlite3_column_text(s, 2),
                       .eval = sqlite3_column_int(s, 3),
                       .eval_round = sqlite3_column_int64(s, 4),
                       .status = st && !strcmp(st, "dispatched") ? LT_TASK_DISPATCHED : LT_TASK_QUEUED,
                       .attempts = sqlite3_column_int(s, 6),
                       .worker = (const char *)sqlite3_column_text(s, 7),
                       .version = sqlite3_column_int64(s, 8)};
    fn(&t, ud);
  }
  sqlite3_finalize(s);
  return rc == SQLITE_DONE ? 0 : db_err(b, rc, "open tasks");
}

int64_t lt_buffer_max_id(lt_buffer_t *b, const char *table) {
  char sql[128];
  snprintf(sql, sizeof sql, "SELECT coalesce(max(id), 0) FROM %s", table);
  sqlite3_stmt *s;
  int64_t v = 0;
  if (sqlite3_prepare_v2(b->db, sql, -1, &s, NULL) == SQLITE_OK) {
    if (sqlite3_step(s) == SQLITE_ROW) v = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
  }
  return v;
}

int lt_buffer_task_exists(lt_buffer_t *b, int64_t id) {
  sqlite3_stmt *s;
  int found = 0;
  if (sqlite3_prepare_v2(b->db, "SELECT 1 FROM tasks WHERE id = ?1", -1, &s, NULL) == SQLITE_OK) {
    sqlite3_bind_int64(s, 1, id);
    found = sqlite3_step(s) == SQLITE_ROW;
    sqlite3_finalize(s);
  }
  return found;
}

static void bind_blob(sqlite3_stmt *s, int i, const void *p, size_t n) {
  if (p) sqlite3_bind_blob64(s, i, p, n, SQLITE_STATIC);
  else sqlite3_bind_null(s, i);
}

int lt_buffer_traj_insert(lt_buffer_t *b, const lt_traj_t *t, const lt_traj_meta_t *m, int *duplicate) {
  sqlite3_stmt *s = b->st[S_TRAJ_INS];
  if (!s) return lt_error_set(LT_EINVAL, "%s: read-only buffer handle", b->path);
  *duplicate = 0;
  /* Printed before anything is written: the row and its payload go in together or not at all. */
  char *components = t->components ? cJSON_PrintUnformatted(t->components) : NULL,
       *messages = t->messages ? cJSON_PrintUnformatted(t->messages) : NULL;
  if ((t->components && !components) || (t->messages && !messages)) {
    free(components), free(messages);
    return lt_error_set(LT_ENOMEM, "out of memory");
  }
  sqlite3_bind_int64(s, 1, (int64_t)t->task_id);
  sqlite3_bind_int64(s, TPARAM(group_id), (int64_t)t->group_id);
  bind_text(s, TPARAM(domain), t->domain ? t->domain : "");
  bind_text(s, TPARAM(status), tr_names[m->status]);
  bind_text(s, TPARAM(traj_status), lt_traj_status_name(t->status));
  if (t->has_reward) sqlite3_bind_double(s, TPARAM(reward), t->reward);
  bind_text(s, TPARAM(components), components ? components : "{}");
  bind_text(s, TPARAM(finish), lt_finish_name(t->finish));
  bind_text(s, TPARAM(reason), t->reason ? t->reason : "");
  sqlite3_bind_int(s, TPARAM(truncated), m->truncated);
  sqlite3_bind_int(s, TPARAM(ntokens), t->ntokens);
  sqlite3_bind_int(s, TPARAM(nturns), t->turns);
  sqlite3_bind_int64(s, TPARAM(version_min), m->version_min);
  sqlite3_bind_int64(s, TPARAM(version_max), m->version_max);
  bind_text(s, TPARAM(worker), m->worker);
  sqlite3_bind_double(s, TPARAM(gen_ms), t->gen_ms);
  sqlite3_bind_double(s, TPARAM(env_ms), t->env_ms);
  sqlite3_bind_double(s, TPARAM(reward_ms), t->reward_ms);
  sqlite3_bind_int64(s, TPARAM(time_ms), m->time_ms);
  sqlite3_bind_int(s, TPARAM(eval), t->eval);
  sqlite3_bind_int64(s, TPARAM(eval_round), m->eval_round);
  bind_text(s, TPARAM(error), t->error && t->error[0] ? t->error : NULL);
  free(components); /* bound as copies (SQLITE_TRANSIENT); unbound parameters (reward, consumed_step) are NULL */
  int rc = stmt_run(b, S_TRAJ_INS);
  if (rc < 0 || sqlite3_changes(b->db) == 0) { /* none changed: the task already has a trajectory */
    free(messages);
    *duplicate = rc == 0;
    return rc;
  }
  s = b->st[S_PAYLOAD_INS];
  size_t T = (size_t)t->ntokens, R = T * (size_t)t->routing_layers * (size_t)t->routing_k;
  sqlite3_bind_int64(s, 1, (int64_t)t->task_id);
  bind_blob(s, PPARAM(tokens), t->tokens, T * 4);
  bind_blob(s, PPARAM(logprobs), t->logprobs, T * 4);
  bind_blob(s, PPARAM(loss_mask), t->loss_mask, T);
  bind_blob(s, PPARAM(versions), t->versions, T * 4);
  bind_blob(s, PPARAM(support), t->support, T * 4);
  bind_blob(s, PPARAM(routing_ids), R ? t->routing_ids : NULL, R * 2);
  bind_blob(s, PPARAM(routing_probs), R ? t->routing_probs : NULL, R * 4);
  sqlite3_bind_int(s, PPARAM(routing_layers), t->routing_layers);
  sqlite3_bind_int(s, PPARAM(routing_k), t->routing_k);
  sqlite3_bind_int(s, PPARAM(routing_experts), t->routing_experts);
  bind_text(s, PPARAM(messages), messages ? messages : "[]");
  free(messages);
  bind_blob(s, PPARAM(support_ids), t->support ? t->support_ids : NULL, (size_t)t->nsupport_ids * 4);
  if (t->temperature >= 0) sqlite3_bind_double(s, PPARAM(temperature), t->temperature);
  bind_blob(s, PPARAM(seq_starts), t->nseqs > 1 ? t->seq_starts : NULL, t->nseqs > 1 ? (size_t)t->nseqs * 4 : 0);
  if (t->diff && t->diff[0]) bind_text(s, PPARAM(diff), t->diff);
  return stmt_run(b, S_PAYLOAD_INS);
}

static char *col_dup(sqlite3_stmt *s, int i) {
  const char *v = (const char *)sqlite3_column_text(s, i);
  return strdup(v ? v : "");
}

/* Copies a blob column of exactly n bytes (0 bytes: NULL). */
static int col_blob(sqlite3_stmt *s, int i, size_t n, void **out) {
  *out = NULL;
  if (sqlite3_column_type(s, i) == SQLITE_NULL) return 0;
  if ((size_t)sqlite3_column_bytes(s, i) != n) return -1;
  *out = malloc(n ? n : 1);
  if (!*out) return -1;
  if (n) memcpy(*out, sqlite3_column_blob(s, i), n);
  return 0;
}

/* A JSON text column parsed; NULL, empty or damaged text reads as dflt ("{}" or "[]"), so that a report still
 * shows the rest of the row.  NULL only when out of memory. */
static cJSON *col_json(sqlite3_stmt *s, int i, const char *dflt) {
  const char *v = (const char *)sqlite3_column_text(s, i);
  cJSON *j = v && v[0] ? cJSON_Parse(v) : NULL;
  return j ? j : cJSON_Parse(dflt);
}

int lt_buffer_traj_load(lt_buffer_t *b, int64_t task_id, int what, lt_traj_t *t, lt_traj_meta_t *m) {
  memset(t, 0, sizeof *t);
  sqlite3_stmt *s = b->st[S_TRAJ_GET];
  sqlite3_bind_int64(s, 1, task_id);
  int rc = sqlite3_step(s);
  if (rc != SQLITE_ROW) {
    sqlite3_reset(s);
    return rc == SQLITE_DONE ? lt_error_set(LT_ENOENT, "%s: no trajectory for task %lld", b->path, (long long)task_id)
                             : db_err(b, rc, "load trajectory");
  }
  t->task_id = (uint64_t)task_id;
  t->group_id = (uint64_t)sqlite3_column_int64(s, TCOL(group_id));
  const char *st = (const char *)sqlite3_column_text(s, TCOL(status));
  /* The wire's names as the worker sent them (a name this build does not know reads as an error / none). */
  int outcome = lt_traj_status_parse((const char *)sqlite3_column_text(s, TCOL(traj_status))),
      finish = lt_finish_parse((const char *)sqlite3_column_text(s, TCOL(finish)));
  t->status = outcome >= 0 ? (lt_traj_status)outcome : LT_TRAJ_ERROR;
  t->finish = finish >= 0 ? (lt_finish)finish : LT_FINISH_NONE;
  t->has_reward = sqlite3_column_type(s, TCOL(reward)) != SQLITE_NULL;
  t->reward = sqlite3_column_double(s, TCOL(reward));
  t->turns = sqlite3_column_int(s, TCOL(nturns));
  t->gen_ms = sqlite3_column_double(s, TCOL(gen_ms));
  t->env_ms = sqlite3_column_double(s, TCOL(env_ms));
  t->reward_ms = sqlite3_column_double(s, TCOL(reward_ms));
  t->eval = sqlite3_column_int(s, TCOL(eval));
  int oom = !(t->domain = col_dup(s, TCOL(domain)));
  if (what == LT_LOAD_ALL)
    oom |= !(t->components = col_json(s, TCOL(components), "{}")) || !(t->reason = col_dup(s, TCOL(reason))) ||
           !(t->error = col_dup(s, TCOL(error)));
  if (m) {
    memset(m, 0, sizeof *m);
    m->truncated = sqlite3_column_int(s, TCOL(truncated));
    m->version_min = sqlite3_column_int64(s, TCOL(version_min));
    m->version_max = sqlite3_column_int64(s, TCOL(version_max));
    m->time_ms = sqlite3_column_int64(s, TCOL(time_ms));
    m->eval_round = sqlite3_column_int64(s, TCOL(eval_round));
    m->consumed_step =
        sqlite3_column_type(s, TCOL(consumed_step)) == SQLITE_NULL ? -1 : sqlite3_column_int64(s, TCOL(consumed_step));
    const char *wk = (const char *)sqlite3_column_text(s, TCOL(worker));
    snprintf(m->loaded_worker, sizeof m->loaded_worker, "%s", wk ? wk : "");
    m->status = LT_SAMPLE_READY;
    for (int i = 0; i < LT_SAMPLE_NSTATES; i++)
      if (st && !strcmp(st, tr_names[i])) m->status = (lt_sample_state)i;
  }
  sqlite3_reset(s);
  if (oom) {
    lt_traj_free(t);
    return lt_error_set(LT_ENOMEM, "out of memory");
  }
  s = b->st[S_PAYLOAD_GET];
  sqlite3_bind_int64(s, 1, task_id);
  rc = sqlite3_step(s);
  if (rc != SQLITE_ROW) {
    sqlite3_reset(s);
    lt_traj_free(t);
    return lt_error_set(LT_ECORRUPT, "%s: trajectory of task %lld has no payload", b->path, (long long)task_id);
  }
  size_t T = (size_t)sqlite3_column_bytes(s, PCOL(tokens)) / 4;
  t->ntokens = (int)T;
  t->routing_layers = sqlite3_column_int(s, PCOL(routing_layers));
  t->routing_k = sqlite3_column_int(s, PCOL(routing_k));
  t->routing_experts = sqlite3_column_int(s, PCOL(routing_experts));
  size_t R = T * (size_t)t->routing_layers * (size_t)t->routing_k;
  int bad = col_blob(s, PCOL(tokens), T * 4, (void **)&t->tokens) ||
            col_blob(s, PCOL(logprobs), T * 4, (void **)&t->logprobs) ||
            col_blob(s, PCOL(loss_mask), T, (void **)&t->loss_mask) ||
            col_blob(s, PCOL(versions), T * 4, (void **)&t->versions) ||
            col_blob(s, PCOL(support), T * 4, (void **)&t->support) ||
            col_blob(s, PCOL(routing_ids), R * 2, (void **)&t->routing_ids) ||
            col_blob(s, PCOL(routing_probs), R * 4, (void **)&t->routing_probs) || !t->tokens || !t->logprobs ||
            !t->loss_mask || !t->versions;
  size_t nids = 0;
  for (size_t i = 0; t->support && i < T; i++) nids += t->support[i] > 0 ? (size_t)t->support[i] : 0;
  bad = bad || (sqlite3_column_type(s, PCOL(support_ids)) != SQLITE_NULL &&
                col_blob(s, PCOL(support_ids), nids * 4, (void **)&t->support_ids));
  t->nsupport_ids = t->support_ids ? (int)nids : 0;
  t->temperature =
      sqlite3_column_type(s, PCOL(temperature)) == SQLITE_NULL ? -1.0 : sqlite3_column_double(s, PCOL(temperature));
  size_t nseq = (size_t)sqlite3_column_bytes(s, PCOL(seq_starts)) / 4;
  bad = bad || (nseq > 1 && col_blob(s, PCOL(seq_starts), nseq * 4, (void **)&t->seq_starts));
  t->nseqs = t->seq_starts ? (int)nseq : 0;
  for (int i = 1; i < t->nseqs && !bad; i++) /* packing relies on them: checked like a TRAJ's */
    bad = t->seq_starts[0] != 0 || t->seq_starts[i] <= t->seq_starts[i - 1] || t->seq_starts[i] >= t->ntokens;
  /* The messages are read only when asked for: packing a batch does not need them. */
  if (what == LT_LOAD_ALL && !(t->messages = col_json(s, PCOL(messages), "[]"))) bad = 1;
  if (what == LT_LOAD_ALL && sqlite3_column_type(s, PCOL(diff)) != SQLITE_NULL && !(t->diff = col_dup(s, PCOL(diff))))
    bad = 1;
  sqlite3_reset(s);
  if (bad) {
    lt_traj_free(t);
    return lt_error_set(LT_ECORRUPT, "%s: payload of task %lld has inconsistent array sizes", b->path,
                        (long long)task_id);
  }
  return 0;
}

int lt_buffer_traj_mark(lt_buffer_t *b, const int64_t *ids, int n, lt_sample_state st, int64_t step) {
  sqlite3_stmt *s = b->st[S_TRAJ_MARK];
  if (!s) return lt_error_set(LT_EINVAL, "%s: read-only buffer handle", b->path);
  for (int i = 0; i < n; i++) {
    sqlite3_bind_int64(s, 1, ids[i]);
    bind_text(s, 2, tr_names[st]);
    if (step >= 0) sqlite3_bind_int64(s, 3, step);
    else sqlite3_bind_null(s, 3);
    int rc = stmt_run(b, S_TRAJ_MARK);
    if (rc < 0) return rc;
  }
  return 0;
}

int lt_buffer_ready(lt_buffer_t *b, lt_ready_t *out, int max, int *n) {
  sqlite3_stmt *s = b->st[S_READY];
  sqlite3_bind_int(s, 1, max);
  int rc = SQLITE_DONE, k = 0;
  while (k < max && (rc = sqlite3_step(s)) == SQLITE_ROW) {
    out[k] = (lt_ready_t){.task_id = sqlite3_column_int64(s, 0),
                          .group_id = sqlite3_column_int64(s, 1),
                          .version_min = sqlite3_column_int64(s, 2),
                          .reward = sqlite3_column_double(s, 3),
                          .truncated = sqlite3_column_int(s, 4),
                          .group_done = sqlite3_column_int(s, 5)};
    const unsigned char *dom = sqlite3_column_text(s, 6);
    snprintf(out[k].domain, sizeof out[k].domain, "%s", dom ? (const char *)dom : "");
    k++;
  }
  if (k == max) rc = SQLITE_DONE;
  sqlite3_reset(s);
  *n = k;
  return rc == SQLITE_DONE ? 0 : db_err(b, rc, "ready trajectories");
}

int lt_buffer_traj_rewind(lt_buffer_t *b, int64_t step) {
  if (b->readonly) return lt_error_set(LT_EINVAL, "%s: read-only buffer handle", b->path);
  sqlite3_stmt *s;
  int rc = sqlite3_prepare_v2(b->db,
                              "UPDATE trajectories SET status = 'ready', consumed_step = NULL WHERE status IN "
                              "('consumed', 'stale', 'filtered') AND consumed_step > ?1",
                              -1, &s, NULL);
  if (rc != SQLITE_OK) return db_err(b, rc, "rewind");
  sqlite3_bind_int64(s, 1, step);
  rc = sqlite3_step(s);
  sqlite3_finalize(s);
  if (rc != SQLITE_DONE) return db_err(b, rc, "rewind");
  int n = sqlite3_changes(b->db);
  /* What the undone steps computed goes with them: the steps that train these trajectories again store their own. */
  if ((rc = sqlite3_prepare_v2(b->db, "DELETE FROM token_values WHERE recomputed = 0 AND step > ?1", -1, &s, NULL)) !=
      SQLITE_OK)
    return db_err(b, rc, "rewind");
  sqlite3_bind_int64(s, 1, step);
  rc = sqlite3_step(s);
  sqlite3_finalize(s);
  return rc == SQLITE_DONE ? n : db_err(b, rc, "rewind");
}

/* One statement of a quarantine: task_id is ?1; 1 when it changed (or read) a row, 0 when none, or an error.
 * Rare, so prepared on each use. */
static int quarantine_step(lt_buffer_t *b, const char *sql, int64_t task_id, int64_t step, const char *why,
                           int64_t time_ms, lt_quarantined_t *q) {
  sqlite3_stmt *s;
  int rc = sqlite3_prepare_v2(b->db, sql, -1, &s, NULL);
  if (rc != SQLITE_OK) return db_err(b, rc, sql);
  sqlite3_bind_int64(s, 1, task_id);
  if (sqlite3_bind_parameter_count(s) >= 4) {
    sqlite3_bind_int64(s, 2, step);
    bind_text(s, 3, why);
    sqlite3_bind_int64(s, 4, time_ms);
  }
  rc = sqlite3_step(s);
  int got = rc == SQLITE_ROW || (rc == SQLITE_DONE && !sqlite3_stmt_readonly(s) && sqlite3_changes(b->db) > 0);
  if (rc == SQLITE_ROW && q) {
    const char *dom = (const char *)sqlite3_column_text(s, 1), *spec = (const char *)sqlite3_column_text(s, 3);
    q->prompt_id = sqlite3_column_int64(s, 0);
    snprintf(q->domain, sizeof q->domain, "%s", dom ? dom : "");
    q->attempts = sqlite3_column_int(s, 2);
    if (spec && !(q->spec = strdup(spec))) rc = lt_error_set(LT_ENOMEM, "buffer: out of memory");
  }
  sqlite3_finalize(s);
  if (rc < 0) return rc;
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) return db_err(b, rc, sql);
  return got;
}

int lt_buffer_traj_quarantine(lt_buffer_t *b, int64_t task_id, int64_t step, const char *why, int64_t time_ms,
                              lt_quarantined_t *q) {
  memset(q, 0, sizeof *q);
  q->task_id = task_id;
  snprintf(q->why, sizeof q->why, "%s", why);
  if (b->readonly) return lt_error_set(LT_EINVAL, "%s: read-only buffer handle", b->path);
  static const char *const SQL[] = {
      "INSERT INTO quarantine(task_id, group_id, step, why, time_ms, worker, domain, traj_status, reward, ntokens, "
      "version_min, version_max, tokens, logprobs, loss_mask, versions, messages) SELECT t.task_id, t.group_id, ?2, ?3, "
      "?4, t.worker, t.domain, t.traj_status, t.reward, t.ntokens, t.version_min, t.version_max, p.tokens, p.logprobs, "
      "p.loss_mask, p.versions, p.messages FROM trajectories t JOIN payloads p ON p.task_id = t.task_id "
      "WHERE t.task_id = ?1",
      "DELETE FROM payloads WHERE task_id = ?1",
      "DELETE FROM trajectories WHERE task_id = ?1",
      /* Queued in the same transaction: a daemon that dies before it requeues the task finds it open on resume. */
      "UPDATE tasks SET status = 'queued', worker = NULL WHERE id = ?1",
      ("SELECT k.prompt_id, k.domain, k.attempts, p.spec FROM tasks k JOIN prompts p ON p.id = k.prompt_id "
       "WHERE k.id = ?1"),
  };
  int rc = lt_buffer_begin(b);
  for (size_t i = 0; rc == 0 && i < sizeof SQL / sizeof SQL[0]; i++) {
    int got = quarantine_step(b, SQL[i], task_id, step, why, time_ms, q);
    if (got == 0)
      rc = lt_error_set(LT_ENOENT, "%s: task %lld has no %s to quarantine", b->path, (long long)task_id,
                        i < 3 ? "stored trajectory" : "task row or prompt");
    else if (got < 0) rc = got;
  }
  if (rc == 0) return lt_buffer_commit(b);
  lt_buffer_rollback(b);
  free(q->spec);
  q->spec = NULL;
  return rc;
}

void lt_buffer_quarantined_free(lt_quarantined_t *q) {
  free(q->spec);
  q->spec = NULL;
}

int64_t lt_buffer_count_status(lt_buffer_t *b, lt_sample_state st) {
  sqlite3_stmt *s = b->st[S_COUNT_STATUS];
  bind_text(s, 1, tr_names[st]);
  int64_t v = sqlite3_step(s) == SQLITE_ROW ? sqlite3_column_int64(s, 0) : 0;
  sqlite3_reset(s);
  return v;
}

int lt_buffer_metric(lt_buffer_t *b, int64_t step, const char *name, double value, int64_t time_ms) {
  sqlite3_stmt *s = b->st[S_METRIC];
  if (!s) return lt_error_set(LT_EINVAL, "%s: read-only buffer handle", b->path);
  sqlite3_bind_int64(s, 1, step);
  bind_text(s, 2, name);
  sqlite3_bind_double(s, 3, value);
  sqlite3_bind_int64(s, 4, time_ms);
  return stmt_run(b, S_METRIC);
}

int lt_buffer_event(lt_buffer_t *b, int64_t time_ms, const char *kind, const char *detail) {
  sqlite3_stmt *s = b->st[S_EVENT];
  if (!s) return lt_error_set(LT_EINVAL, "%s: read-only buffer handle", b->path);
  sqlite3_bind_int64(s, 1, time_ms);
  bind_text(s, 2, kind);
  bind_text(s, 3, detail);
  return stmt_run(b, S_EVENT);
}

int lt_buffer_checkpoint(lt_buffer_t *b, int64_t version, int64_t step, const char *kind, const char *path,
                         const char *sha256) {
  sqlite3_stmt *s = b->st[S_CKPT];
  if (!s) return lt_error_set(LT_EINVAL, "%s: read-only buffer handle", b->path);
  sqlite3_bind_int64(s, 1, version);
  sqlite3_bind_int64(s, 2, step);
  bind_text(s, 3, kind);
  bind_text(s, 4, path);
  bind_text(s, 5, sha256);
  return stmt_run(b, S_CKPT);
}

int lt_buffer_worker_seen(lt_buffer_t *b, const char *name, const char *host, int slots, const char *backend,
                          int64_t time_ms) {
  sqlite3_stmt *s = b->st[S_WORKER];
  if (!s) return lt_error_set(LT_EINVAL, "%s: read-only buffer handle", b->path);
  bind_text(s, 1, name);
  bind_text(s, 2, host);
  sqlite3_bind_int(s, 3, slots);
  bind_text(s, 4, backend);
  sqlite3_bind_int64(s, 5, time_ms);
  return stmt_run(b, S_WORKER);
}

sqlite3 *lt__buffer_db(lt_buffer_t *b) { return b->db; }

int lt__buffer_err(lt_buffer_t *b, int rc, const char *what) { return db_err(b, rc, what); }

const char *lt__task_status_name(lt_task_status s) { return task_names[s]; }
