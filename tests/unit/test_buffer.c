/* The buffer's schema: a file written by schema 1 (before the sampling
 * columns) opens read-only as it is and is migrated to schema 2 on a writable
 * open, its rows reading as "sampling settings unknown". */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buffer/buffer.h"
#include "tests/support/harness.h"
#include "util/error.h"

/* The schema-1 tables a trajectory needs, with one trajectory of 2 tokens. */
static const char *V1 =
    "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT);"
    "CREATE TABLE counters(name TEXT PRIMARY KEY, value INTEGER NOT NULL);"
    "CREATE TABLE prompts(id INTEGER PRIMARY KEY, domain TEXT NOT NULL, spec TEXT NOT NULL, eval INTEGER NOT NULL "
    "DEFAULT 0);"
    "CREATE TABLE tasks(id INTEGER PRIMARY KEY, prompt_id INTEGER NOT NULL, domain TEXT NOT NULL, eval INTEGER NOT "
    "NULL DEFAULT 0, eval_round INTEGER NOT NULL DEFAULT -1, status TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT "
    "0, worker TEXT, version INTEGER NOT NULL DEFAULT -1);"
    "CREATE TABLE metrics(step INTEGER NOT NULL, name TEXT NOT NULL, value REAL, time_ms INTEGER NOT NULL);"
    "CREATE TABLE events(id INTEGER PRIMARY KEY, time_ms INTEGER NOT NULL, kind TEXT NOT NULL, detail TEXT);"
    "CREATE TABLE checkpoints(version INTEGER PRIMARY KEY, step INTEGER NOT NULL, kind TEXT NOT NULL, path TEXT NOT "
    "NULL, sha256 TEXT);"
    "CREATE TABLE workers(name TEXT PRIMARY KEY, host TEXT, slots INTEGER, backend TEXT, first_ms INTEGER, last_ms "
    "INTEGER);"
    "INSERT INTO meta VALUES('schema_version', '1'), ('format', 'longtail-buffer');"
    "CREATE TABLE trajectories(id INTEGER PRIMARY KEY, task_id INTEGER NOT NULL UNIQUE, group_id INTEGER NOT NULL, "
    "domain TEXT NOT NULL, status TEXT NOT NULL, traj_status TEXT NOT NULL, reward REAL, components TEXT NOT NULL, "
    "finish TEXT NOT NULL, reason TEXT NOT NULL, truncated INTEGER NOT NULL, ntokens INTEGER NOT NULL, nturns INTEGER "
    "NOT NULL, version_min INTEGER NOT NULL, version_max INTEGER NOT NULL, worker TEXT, gen_ms REAL, env_ms REAL, "
    "reward_ms REAL, time_ms INTEGER NOT NULL, consumed_step INTEGER, eval INTEGER NOT NULL DEFAULT 0, eval_round "
    "INTEGER NOT NULL DEFAULT -1, error TEXT);"
    "CREATE TABLE payloads(task_id INTEGER PRIMARY KEY, tokens BLOB NOT NULL, logprobs BLOB NOT NULL, loss_mask BLOB "
    "NOT NULL, versions BLOB NOT NULL, support BLOB, routing_ids BLOB, routing_probs BLOB, routing_layers INTEGER NOT "
    "NULL DEFAULT 0, routing_k INTEGER NOT NULL DEFAULT 0, routing_experts INTEGER NOT NULL DEFAULT 0, messages TEXT "
    "NOT NULL);"
    "INSERT INTO trajectories(task_id, group_id, domain, status, traj_status, reward, components, finish, reason, "
    "truncated, ntokens, nturns, version_min, version_max, time_ms) VALUES(5, 5, 'arith', 'ready', 'ok', 1, '{}', "
    "'terminated', 'eos', 0, 2, 1, 0, 0, 0);"
    "INSERT INTO payloads(task_id, tokens, logprobs, loss_mask, versions, support, messages) VALUES(5, "
    "x'0100000002000000', x'0000000000000000', x'0001', x'ffffffff00000000', x'0000000004000000', '[]');";

static void expect_unknown_sampling(lt_buffer_t *b) {
  lt_traj_t t;
  cr_assert_eq(lt_buffer_traj_load(b, 5, &t, NULL), 0, "%s", lt_error_msg());
  cr_expect_eq(t.ntokens, 2);
  cr_expect_eq(t.support[1], 4, "schema 1 recorded only the set's size");
  cr_expect_null(t.support_ids);
  cr_expect_lt(t.temperature, 0, "an unrecorded temperature reads as unknown");
  lt_buffer_traj_free(&t);
}

Test(buffer, schema_1_is_migrated) {
  char *dir = lt_test_tmpdir("buffer");
  char path[4200];
  snprintf(path, sizeof path, "%s/buffer.db", dir);
  lt_run_t r;
  cr_assert_eq(lt_test_sh(&r, 30, "sqlite3 %s \"%s\"", path, V1), 0);
  cr_assert_eq(r.status, 0, "%s", r.err);
  lt_run_free(&r);
  lt_buffer_t *b;
  cr_assert_eq(lt_buffer_open(path, LT_BUF_READONLY, &b), 0, "%s", lt_error_msg());
  expect_unknown_sampling(b);
  lt_buffer_close(b);
  cr_assert_eq(lt_buffer_open(path, 0, &b), 0, "%s", lt_error_msg());
  expect_unknown_sampling(b);
  lt_buffer_close(b);
  cr_assert_eq(lt_test_sh(&r, 30, "sqlite3 %s \"SELECT value FROM meta WHERE key = 'schema_version'; "
                                  "SELECT count(*) FROM pragma_table_info('payloads') WHERE name IN ('support_ids', "
                                  "'temperature')\"", path), 0);
  cr_expect_str_eq(r.out, "2\n2\n");
  lt_run_free(&r);
  lt_test_rmdir(dir);
}
