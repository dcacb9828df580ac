/* The run database on its own: what it stores and gives back, its invariants (one trajectory per task,
 * read-only handles), resume (rewind to a step), damage (a broken payload, a file that is not a buffer) and the
 * schema-1 migration (a file from before the sampling columns opens read-only as it is, migrates when writable),
 * quarantine (a trajectory moved aside, its task open for another attempt) and the task history of pass-rate
 * oversampling. */
#include <criterion/criterion.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buffer/buffer.h"
#include "tests/support/harness.h"
#include "util/error.h"

enum { T = 6 };

static int32_t tokens[T] = {5, 6, 7, 8, 9, 10}, versions[T] = {-1, -1, 3, 3, 4, 4}, support[T] = {0, 0, 9, 9, 9, 9};
static float logp[T] = {0, 0, -0.5f, -0.25f, -1, -2};
static uint8_t mask[T] = {0, 0, 1, 1, 1, 1};

/* The wire record a worker sends: its strings and arrays borrowed, its JSON made here (free with rec_free). */
static lt_traj_t rec(int64_t task, int64_t group, const char *domain, double reward) {
  lt_traj_t r = {.task_id = (uint64_t)task,
                 .group_id = (uint64_t)group,
                 .domain = (char *)domain,
                 .status = LT_TRAJ_OK,
                 .finish = LT_FINISH_TRUNCATED,
                 .reason = "context_limit",
                 .error = "",
                 .has_reward = 1,
                 .reward = reward,
                 .components = cJSON_Parse("{\"correct\":1}"),
                 .messages = cJSON_Parse("[{\"role\":\"user\",\"content\":\"1+1=\"}]"),
                 .turns = 2,
                 .ntokens = T,
                 .tokens = tokens,
                 .logprobs = logp,
                 .loss_mask = mask,
                 .versions = versions,
                 .support = support};
  cr_assert(r.components && r.messages);
  return r;
}

static void rec_free(lt_traj_t *r) {
  cJSON_Delete(r->components);
  cJSON_Delete(r->messages);
}

/* A JSON value as the buffer stores it (caller frees). */
static char *json(const cJSON *v) { return cJSON_PrintUnformatted(v); }

static lt_buffer_t *fresh(char **dir, char *path, size_t cap) {
  *dir = lt_test_tmpdir("buffer");
  snprintf(path, cap, "%s/buffer.db", *dir);
  lt_buffer_t *b;
  cr_assert_eq(lt_buffer_open(path, LT_BUF_CREATE, &b), 0, "%s", lt_error_msg());
  return b;
}

static void insert(lt_buffer_t *b, int64_t task, int64_t group, const char *domain, double reward, int *dup) {
  lt_traj_t r = rec(task, group, domain, reward);
  lt_traj_meta_t m = {.worker = "w1",
                      .version_min = 3,
                      .version_max = 4,
                      .truncated = 1,
                      .eval_round = -1,
                      .time_ms = task,
                      .status = LT_SAMPLE_READY};
  cr_assert_eq(lt_buffer_traj_insert(b, &r, &m, dup), 0, "%s", lt_error_msg());
  rec_free(&r);
}

Test(buffer, round_trip_and_one_trajectory_per_task) {
  char *dir, path[4200];
  lt_buffer_t *b = fresh(&dir, path, sizeof path);
  int dup;
  insert(b, 1, 1, "arith", 0.5, &dup);
  cr_assert_eq(dup, 0);
  insert(b, 1, 1, "code", 1.0, &dup); /* a resent trajectory: refused, the first one kept */
  cr_assert_eq(dup, 1);
  lt_traj_t t;
  lt_traj_meta_t m;
  cr_assert_eq(lt_buffer_traj_load(b, 1, LT_LOAD_ALL, &t, &m), 0, "%s", lt_error_msg());
  cr_assert_str_eq(t.domain, "arith");
  cr_assert_float_eq(t.reward, 0.5, 1e-12);
  cr_assert_eq(t.status, LT_TRAJ_OK);
  cr_assert_eq(t.finish, LT_FINISH_TRUNCATED);
  cr_assert_str_eq(t.reason, "context_limit");
  char *c = json(t.components), *msgs = json(t.messages);
  cr_assert_str_eq(c, "{\"correct\":1}");
  cr_assert_str_eq(msgs, "[{\"role\":\"user\",\"content\":\"1+1=\"}]");
  free(c), free(msgs);
  cr_assert_eq(m.truncated, 1);
  cr_assert_eq(t.turns, 2);
  cr_assert_eq(t.ntokens, T);
  cr_assert_arr_eq(t.tokens, tokens, sizeof tokens);
  cr_assert_arr_eq(t.logprobs, logp, sizeof logp);
  cr_assert_arr_eq(t.loss_mask, mask, sizeof mask);
  cr_assert_arr_eq(t.versions, versions, sizeof versions);
  cr_assert_arr_eq(t.support, support, sizeof support);
  cr_assert_null(t.routing_ids);
  cr_assert_str_eq(m.loaded_worker, "w1");
  cr_assert_eq(m.version_min, 3);
  cr_assert_eq(m.version_max, 4);
  cr_assert_eq(m.status, LT_SAMPLE_READY);
  cr_assert_eq(m.consumed_step, -1);
  lt_traj_free(&t);
  /* Packing asks for the arrays only: the texts are not read. */
  cr_assert_eq(lt_buffer_traj_load(b, 1, LT_LOAD_TOKENS, &t, &m), 0);
  cr_assert_null(t.messages);
  cr_assert_null(t.components);
  cr_assert_eq(m.truncated, 1);
  cr_assert_arr_eq(t.tokens, tokens, sizeof tokens);
  lt_traj_free(&t);
  cr_assert_eq(lt_buffer_traj_load(b, 2, LT_LOAD_ALL, &t, &m), LT_ENOENT);
  lt_buffer_close(b);
  /* A read-only handle never writes. */
  cr_assert_eq(lt_buffer_open(path, LT_BUF_READONLY, &b), 0);
  lt_traj_t r = rec(2, 2, "arith", 0);
  lt_traj_meta_t meta = {.worker = "w1", .status = LT_SAMPLE_READY};
  cr_assert_eq(lt_buffer_traj_insert(b, &r, &meta, &dup), LT_EINVAL);
  rec_free(&r);
  cr_assert_eq(lt_buffer_count_status(b, LT_SAMPLE_READY), 1);
  lt_buffer_close(b);
  lt_test_rmdir(dir);
}

Test(buffer, rewind_makes_later_steps_ready_again) {
  char *dir, path[4200];
  lt_buffer_t *b = fresh(&dir, path, sizeof path);
  int dup;
  for (int64_t i = 1; i <= 6; i++) insert(b, i, (i + 1) / 2, "arith", (double)i, &dup);
  int64_t s1[] = {1, 2}, s2[] = {3, 4}, st[] = {5};
  cr_assert_eq(lt_buffer_traj_mark(b, s1, 2, LT_SAMPLE_CONSUMED, 1), 0);
  cr_assert_eq(lt_buffer_traj_mark(b, s2, 2, LT_SAMPLE_CONSUMED, 2), 0);
  cr_assert_eq(lt_buffer_traj_mark(b, st, 1, LT_SAMPLE_STALE, 2), 0);
  cr_assert_eq(lt_buffer_last_consumed_step(b), 2);
  int64_t *ids;
  int n;
  cr_assert_eq(lt_buffer_step_batch(b, 2, &ids, &n), 0);
  cr_assert_eq(n, 2);
  cr_assert_eq(ids[0], 3);
  cr_assert_eq(ids[1], 4);
  free(ids);
  /* Resuming from step 1's checkpoint: what step 2 consumed or marked is ready again, step 1's stays. */
  cr_assert_eq(lt_buffer_traj_rewind(b, 1), 3);
  cr_assert_eq(lt_buffer_count_status(b, LT_SAMPLE_CONSUMED), 2);
  cr_assert_eq(lt_buffer_count_status(b, LT_SAMPLE_STALE), 0);
  cr_assert_eq(lt_buffer_count_status(b, LT_SAMPLE_READY), 4);
  lt_ready_t ready[8];
  cr_assert_eq(lt_buffer_ready(b, ready, 8, &n), 0);
  cr_assert_eq(n, 4);
  cr_assert_eq(ready[0].task_id, 3); /* arrival order */
  cr_assert_eq(ready[0].group_done, 2);
  cr_assert_eq(lt_buffer_step_batch(b, 2, &ids, &n), 0);
  cr_assert_eq(n, 0);
  free(ids);
  lt_buffer_close(b);
  lt_test_rmdir(dir);
}

/* token_values: a step's row comes back as stored; a recomputed one stands in only where no step stored one; a
 * rewind drops what the undone steps stored. */
Test(buffer, token_values_round_trip_and_rewind) {
  char *dir, path[4200];
  lt_buffer_t *b = fresh(&dir, path, sizeof path);
  float ratio[3] = {1, 3.5f, 0.75f}, lpo[3] = {-1, -2, -3}, adv[3] = {0.5f, 0.5f, -0.25f}, ent[3] = {2, 1, 0};
  uint8_t flags[3] = {1 | 2 | 4 | 16, 1 | 4, 0};
  int32_t spans[4] = {1, 2, 4, 1};
  lt_token_values_row_t rows[2] = {{.task_id = 7,
                                    .step = 3,
                                    .recomputed = 1,
                                    .loss = "{}",
                                    .traj_ratio = NAN,
                                    .ntokens = T,
                                    .nspans = 2,
                                    .spans = spans,
                                    .ratio = ratio,
                                    .logp_old = lpo,
                                    .adv = adv,
                                    .entropy = ent,
                                    .flags = flags},
                                   {.task_id = 7,
                                    .step = 5,
                                    .loss = "{\"objective\":\"mispo\"}",
                                    .traj_ratio = 1.25,
                                    .traj_ok = 1,
                                    .ntokens = T,
                                    .nspans = 2,
                                    .spans = spans,
                                    .ratio = ratio,
                                    .logp_old = lpo,
                                    .adv = adv,
                                    .entropy = ent,
                                    .flags = flags}};
  cr_assert_eq(lt_buffer_token_values_put(b, rows, 2), 0, "%s", lt_error_msg());
  lt_token_values_row_t v;
  cr_assert_eq(lt_buffer_token_values_get(b, 7, &v), 1, "%s", lt_error_msg());
  cr_assert(v.step == 5 && !v.recomputed && v.traj_ok && v.traj_ratio == 1.25 && v.ntokens == T && v.n == 3);
  cr_assert(v.nspans == 2 && !memcmp(v.spans, spans, sizeof spans));
  cr_assert(!memcmp(v.ratio, ratio, sizeof ratio) && !memcmp(v.logp_old, lpo, sizeof lpo) &&
            !memcmp(v.adv, adv, sizeof adv));
  cr_assert(!memcmp(v.entropy, ent, sizeof ent) && !memcmp(v.flags, flags, sizeof flags));
  cr_assert_str_eq(v.loss, "{\"objective\":\"mispo\"}");
  lt_buffer_token_values_free(&v);
  cr_assert_eq(lt_buffer_token_values_count(b, 5), 1);
  cr_assert_eq(lt_buffer_token_values_count(b, 3), 0, "a recomputed row is no step's own");
  cr_assert_eq(lt_buffer_traj_rewind(b, 4), 0);
  cr_assert_eq(lt_buffer_token_values_get(b, 7, &v), 1);
  cr_assert(v.step == 3 && v.recomputed && isnan(v.traj_ratio), "the recomputed row stays");
  lt_buffer_token_values_free(&v);
  cr_assert_eq(lt_buffer_token_values_get(b, 8, &v), 0);
  lt_buffer_close(b);
  lt_test_rmdir(dir);
}

Test(buffer, quarantine_moves_a_trajectory_aside_and_reopens_its_task) {
  char *dir, path[4200];
  lt_buffer_t *b = fresh(&dir, path, sizeof path);
  cr_assert_eq(lt_buffer_prompt_insert(b, 7, "arith", "{\"q\":\"1+1\"}", 0, 0), 0);
  lt_task_row_t task = {.id = 3,
                        .prompt_id = 7,
                        .domain = "arith",
                        .eval_round = -1,
                        .status = LT_TASK_DISPATCHED,
                        .attempts = 1,
                        .worker = "w1",
                        .version = 0};
  cr_assert_eq(lt_buffer_task_insert(b, &task), 0, "%s", lt_error_msg());
  /* A result does not undo the attempts before it. */
  cr_assert_eq(lt_buffer_task_update(b, 3, LT_TASK_DONE, -1, "w1", 3), 0);
  int dup;
  insert(b, 3, 7, "arith", 0.5, &dup);
  lt_quarantined_t q;
  cr_assert_eq(lt_buffer_traj_quarantine(b, 3, 4, "token 0: id 1264 outside the vocabulary", 99, &q), 0, "%s",
               lt_error_msg());
  cr_expect_eq(q.task_id, 3);
  cr_expect_eq(q.prompt_id, 7);
  cr_expect_str_eq(q.domain, "arith");
  cr_expect_eq(q.attempts, 1);
  cr_expect_str_eq(q.spec, "{\"q\":\"1+1\"}");
  lt_buffer_quarantined_free(&q);
  lt_traj_t t;
  lt_traj_meta_t m;
  cr_expect_eq(lt_buffer_traj_load(b, 3, LT_LOAD_TOKENS, &t, &m), LT_ENOENT, "moved out of trajectories");
  cr_expect_eq(lt_buffer_count_tasks(b, LT_TASK_QUEUED), 1, "queued again, in the same transaction");
  /* The next attempt's result is stored, not refused as a duplicate; a second quarantine keeps both records. */
  insert(b, 3, 7, "arith", 1.0, &dup);
  cr_expect_eq(dup, 0);
  cr_assert_eq(lt_buffer_traj_quarantine(b, 3, 5, "again", 100, &q), 0, "%s", lt_error_msg());
  lt_buffer_quarantined_free(&q);
  cr_expect_eq(lt_buffer_traj_quarantine(b, 3, 6, "nothing there", 101, &q), LT_ENOENT);
  cr_expect_null(q.spec);
  lt_buffer_close(b);
  lt_run_t r;
  cr_assert_eq(lt_test_sh(&r, 30,
                          "sqlite3 %s \"SELECT task_id, step, why, worker, reward, length(tokens) FROM "
                          "quarantine ORDER BY id\"",
                          path),
               0);
  cr_expect_str_eq(r.out, "3|4|token 0: id 1264 outside the vocabulary|w1|0.5|24\n3|5|again|w1|1.0|24\n", "%s%s", r.out,
                   r.err);
  lt_run_free(&r);
  lt_test_rmdir(dir);
}

static int count_names(const char *name, void *ud) {
  ++*(int *)ud;
  return 0;
}

Test(buffer, named_queries) {
  char *dir, path[4200];
  lt_buffer_t *b = fresh(&dir, path, sizeof path);
  lt_ckpt_row_t ck;
  cr_assert_eq(lt_buffer_weights(b, 0, &ck), 0); /* none yet */
  cr_assert_eq(lt_buffer_checkpoint(b, 0, 0, "weights", "/r/v0", "aa"), 0);
  cr_assert_eq(lt_buffer_checkpoint(b, 1, 1, "weights", "/r/v1", "bb"), 0);
  cr_assert_eq(lt_buffer_weights(b, 0, &ck), 1);
  cr_assert_str_eq(ck.path, "/r/v1");
  cr_assert_str_eq(ck.sha256, "bb");
  cr_assert_eq(ck.step, 1);
  cr_assert_eq(lt_buffer_weights(b, 1, &ck), 1);
  cr_assert_str_eq(ck.path, "/r/v0");
  for (int s = 1; s <= 5; s++) cr_assert_eq(lt_buffer_metric(b, s, "reward/mean", s, s), 0);
  cr_assert_eq(lt_buffer_metric(b, 5, "reward/mean", 50, 6), 0); /* later at the same step: the one that counts */
  double v;
  int64_t n, step;
  cr_assert_eq(lt_buffer_metric_mean(b, "reward/mean", LT_SPAN_FIRST, 2, &v, &n), 0);
  cr_assert_float_eq(v, 1.5, 1e-12);
  cr_assert_eq(n, 2);
  cr_assert_eq(lt_buffer_metric_mean(b, "reward/mean", LT_SPAN_ALL, 0, &v, &n), 0);
  cr_assert_eq(n, 6);
  cr_assert_eq(lt_buffer_metric_edge(b, "reward/mean", LT_SPAN_LAST, &v, &step), 1);
  cr_assert_float_eq(v, 50, 1e-12);
  cr_assert_eq(step, 5);
  cr_assert_eq(lt_buffer_metric_at(b, 5, "reward/mean", &v), 1);
  cr_assert_float_eq(v, 50, 1e-12);
  cr_assert_eq(lt_buffer_metric_at(b, 9, "reward/mean", &v), 0);
  cr_assert_eq(lt_buffer_metric_mean(b, "no/such", LT_SPAN_ALL, 0, &v, &n), 0);
  cr_assert_eq(n, 0);
  int names = 0;
  cr_assert_eq(lt_buffer_metric_names(b, count_names, &names), 0);
  cr_assert_eq(names, 1);
  /* Export's filter: parameters are bound, so a quote in a domain is a value, not SQL. */
  int dup;
  insert(b, 1, 1, "arith", 0.2, &dup);
  insert(b, 2, 1, "code", 0.9, &dup);
  insert(b, 3, 2, "arith", 0.7, &dup);
  int64_t done[] = {3};
  cr_assert_eq(lt_buffer_traj_mark(b, done, 1, LT_SAMPLE_CONSUMED, 4), 0);
  int64_t task[8], row[8];
  int k;
  lt_traj_filter_t f = {.step_lo = -1, .step_hi = -1, .domain = "arith"};
  cr_assert_eq(lt_buffer_traj_page(b, &f, 0, task, row, 8, &k), 0);
  cr_assert_eq(k, 2);
  f = (lt_traj_filter_t){
      .statuses = 1u << LT_SAMPLE_READY, .has_min_reward = 1, .min_reward = 0.5, .step_lo = -1, .step_hi = -1};
  cr_assert_eq(lt_buffer_traj_page(b, &f, 0, task, row, 8, &k), 0);
  cr_assert_eq(k, 1);
  cr_assert_eq(task[0], 2);
  f = (lt_traj_filter_t){.consumed = 1, .step_lo = 4, .step_hi = -1};
  cr_assert_eq(lt_buffer_traj_page(b, &f, 0, task, row, 8, &k), 0);
  cr_assert_eq(k, 1);
  cr_assert_eq(task[0], 3);
  f = (lt_traj_filter_t){.step_lo = -1, .step_hi = -1, .domain = "x' OR '1'='1"};
  cr_assert_eq(lt_buffer_traj_page(b, &f, 0, task, row, 8, &k), 0);
  cr_assert_eq(k, 0);
  f = (lt_traj_filter_t){.step_lo = -1, .step_hi = -1};
  cr_assert_eq(lt_buffer_traj_page(b, &f, row[0], task, row, 1, &k), 0); /* paging */
  int64_t total, trunc;
  cr_assert_eq(lt_buffer_traj_totals(b, &total, &trunc), 0);
  cr_assert_eq(total, 3);
  cr_assert_eq(trunc, 3);
  cr_assert_float_eq(lt_buffer_reward_mean(b), 0.6, 1e-12);
  lt_buffer_close(b);
  /* The mean reads the partial index traj_ok_reward, not the table (stats_1m_seconds): its WHERE must keep
   * implying the index's, or SQLite silently scans every row again. */
  lt_run_t r;
  cr_assert_eq(lt_test_sh(&r, 30,
                          "sqlite3 %s \"EXPLAIN QUERY PLAN SELECT coalesce(avg(reward), 0) FROM trajectories "
                          "WHERE eval = 0 AND traj_status = 'ok'\"",
                          path),
               0);
  cr_expect(strstr(r.out, "INDEX traj_ok_reward"), "%s%s", r.out, r.err);
  lt_run_free(&r);
  lt_test_rmdir(dir);
}

Test(buffer, damage_is_reported_not_trusted) {
  char *dir, path[4200];
  lt_buffer_t *b = fresh(&dir, path, sizeof path);
  int dup;
  insert(b, 1, 1, "arith", 1, &dup);
  lt_buffer_close(b);
  /* A payload whose arrays disagree in length (a torn or edited row). */
  sqlite3 *db;
  cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
  cr_assert_eq(sqlite3_exec(db, "UPDATE payloads SET logprobs = x'00' WHERE task_id = 1", NULL, NULL, NULL), SQLITE_OK);
  cr_assert_eq(sqlite3_exec(db,
                            "INSERT INTO trajectories(task_id, group_id, domain, status, traj_status, components, "
                            "finish, reason, truncated, ntokens, nturns, version_min, version_max, time_ms) "
                            "VALUES(2, 1, 'arith', 'ready', 'ok', '{}', 'none', '', 0, 0, 0, 0, 0, 0)",
                            NULL, NULL, NULL),
               SQLITE_OK);
  sqlite3_close(db);
  cr_assert_eq(lt_buffer_open(path, LT_BUF_CHECK, &b), 0, "%s", lt_error_msg());
  lt_traj_t t;
  cr_assert_eq(lt_buffer_traj_load(b, 1, LT_LOAD_TOKENS, &t, NULL), LT_ECORRUPT);
  cr_assert(strstr(lt_error_msg(), "task 1"), "%s", lt_error_msg());
  cr_assert_eq(lt_buffer_traj_load(b, 2, LT_LOAD_ALL, &t, NULL), LT_ECORRUPT); /* no payload */
  lt_buffer_close(b);
  /* A file that is not a buffer at all. */
  char other[4300];
  snprintf(other, sizeof other, "%s/not-a-buffer.db", dir);
  cr_assert_eq(lt_test_write(other, "this is not SQLite"), 0);
  int rc = lt_buffer_open(other, LT_BUF_READONLY, &b);
  cr_assert(rc == LT_EFORMAT || rc == LT_ECORRUPT, "rc %d: %s", rc, lt_error_msg());
  lt_test_rmdir(dir);
}

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
  cr_assert_eq(lt_buffer_traj_load(b, 5, LT_LOAD_TOKENS, &t, NULL), 0, "%s", lt_error_msg());
  cr_expect_eq(t.ntokens, 2);
  cr_expect_eq(t.support[1], 4, "schema 1 recorded only the set's size");
  cr_expect_null(t.support_ids);
  cr_expect_lt(t.temperature, 0, "an unrecorded temperature reads as unknown");
  lt_traj_free(&t);
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
  cr_assert_eq(lt_test_sh(&r, 30,
                          "sqlite3 %s \"SELECT value FROM meta WHERE key = 'schema_version'; "
                          "SELECT count(*) FROM pragma_table_info('payloads') WHERE name IN ('support_ids', "
                          "'temperature'); SELECT count(*) FROM quarantine; SELECT count(*) FROM "
                          "pragma_table_info('prompts') WHERE name = 'copy_of'; SELECT count(*) FROM "
                          "token_values\"",
                          path),
               0);
  cr_expect_str_eq(r.out, "7\n2\n0\n1\n0\n",
                   "migrated to schema 7 (quarantine and token_values tables, prompts.copy_of): %s%s", r.out, r.err);
  cr_assert_eq(lt_test_sh(&r, 30,
                          "sqlite3 %s \"SELECT count(*) FROM pragma_table_info('payloads') WHERE name IN "
                          "('seq_starts', 'diff')\"",
                          path),
               0);
  cr_expect_str_eq(r.out, "2\n", "payloads.seq_starts (schema 5), payloads.diff (schema 7): %s%s", r.out, r.err);
  lt_run_free(&r);
  lt_test_rmdir(dir);
}

/* A trajectory of several contexts (an agent program's diverging calls) keeps where each starts; one context
 * stores none. */
Test(buffer, sequence_starts_round_trip) {
  char *dir, path[4200];
  lt_buffer_t *b = fresh(&dir, path, sizeof path);
  int32_t starts[3] = {0, 2, 4};
  lt_traj_t r = rec(1, 1, "agent", 0.5);
  r.nseqs = 3, r.seq_starts = starts;
  lt_traj_meta_t m = {.worker = "w1", .version_min = 3, .version_max = 4, .eval_round = -1, .status = LT_SAMPLE_READY};
  int dup;
  cr_assert_eq(lt_buffer_traj_insert(b, &r, &m, &dup), 0, "%s", lt_error_msg());
  rec_free(&r);
  insert(b, 2, 2, "agent", 0.5, &dup);
  lt_traj_t t;
  cr_assert_eq(lt_buffer_traj_load(b, 1, LT_LOAD_TOKENS, &t, NULL), 0, "%s", lt_error_msg());
  cr_assert_eq(t.nseqs, 3);
  cr_assert(t.seq_starts[0] == 0 && t.seq_starts[1] == 2 && t.seq_starts[2] == 4);
  lt_traj_free(&t);
  cr_assert_eq(lt_buffer_traj_load(b, 2, LT_LOAD_TOKENS, &t, NULL), 0, "%s", lt_error_msg());
  cr_assert_eq(t.nseqs, 0);
  cr_assert_null(t.seq_starts);
  lt_traj_free(&t);
  lt_buffer_close(b);
  lt_test_rmdir(dir);
}

/* A task's history for pass-rate oversampling: every earlier training prompt with its spec (a dataset's epoch
 * aside) in its domain, copies included; held-out prompts and other domains are not its history.  Copies do not
 * count as the domain's prompts (resume's sample index). */
Test(buffer, task_history_and_copies) {
  char *dir, path[4200];
  lt_buffer_t *b = fresh(&dir, path, sizeof path);
  const char *e0 = "{\"row\":3,\"epoch\":0,\"q\":\"x\"}", *e1 = "{\"row\":3,\"epoch\":1,\"q\":\"x\"}";
  cr_assert_eq(lt_buffer_prompt_insert(b, 1, "data", e0, 0, 0), 0, "%s", lt_error_msg());
  cr_assert_eq(lt_buffer_prompt_insert(b, 2, "data", e0, 0, 1), 0, "%s", lt_error_msg()); /* a copy of 1 */
  cr_assert_eq(lt_buffer_prompt_insert(b, 3, "data", "{\"row\":4,\"epoch\":0,\"q\":\"y\"}", 0, 0), 0);
  cr_assert_eq(lt_buffer_prompt_insert(b, 4, "data", e0, 1, 0), 0);  /* held out */
  cr_assert_eq(lt_buffer_prompt_insert(b, 5, "other", e0, 0, 0), 0); /* another domain */
  int dup;
  insert(b, 10, 1, "data", 1, &dup);
  insert(b, 11, 1, "data", 0, &dup);
  insert(b, 12, 2, "data", 0, &dup);
  insert(b, 13, 3, "data", 1, &dup);
  insert(b, 14, 4, "data", 1, &dup);
  insert(b, 15, 5, "other", 1, &dup);
  int64_t n, passed;
  cr_assert_eq(lt_buffer_task_history(b, "data", e1, 0.5, &n, &passed), 0, "%s", lt_error_msg());
  cr_expect_eq(n, 3, "two groups of the task, epoch 0, seen from epoch 1");
  cr_expect_eq(passed, 3, "each carries the verdict correct: 1");
  cr_assert_eq(lt_buffer_task_history(b, "data", "{\"row\":9}", 0.5, &n, &passed), 0);
  cr_expect_eq(n, 0);
  cr_expect_eq(lt_buffer_count_prompts(b, "data"), 2, "the copy is not a new sample");
  lt_buffer_close(b);
  lt_test_rmdir(dir);
}

/* Pass-rate oversampling counts the domain's success, not reward > 0: a verdict where the reward has one
 * (`correct`, the judge's `verifier`), else a reward at or above the domain's pass threshold — so a GenRM win
 * rate of 0.3 or a partial score of 0.2 is a failure, and a correct answer with a length penalty still passes. */
Test(buffer, task_history_counts_the_domains_success) {
  char *dir, path[4200];
  lt_buffer_t *b = fresh(&dir, path, sizeof path);
  const char *spec = "{\"row\":1}";
  cr_assert_eq(lt_buffer_prompt_insert(b, 1, "d", spec, 0, 0), 0, "%s", lt_error_msg());
  struct {
    double reward;
    const char *components;
  } rows[] = {
      {0.3, "{\"genrm_win_rate\":0.3}"},                /* below the threshold: a failure */
      {0.2, "{\"code\":0.2}"},                          /* a partial score: a failure */
      {0.7, "{\"genrm_win_rate\":0.7}"},                /* at or above: a pass */
      {0.6, "{\"correct\":1,\"length_penalty\":-0.4}"}, /* the verdict decides */
      {0.1, "{\"correct\":0,\"format\":1}"},            /* a format bonus is not a pass */
      {0.5, "{\"verifier\":0}"},                        /* the judge's verdict, whatever the reward */
  };
  lt_traj_meta_t m = {.worker = "w1", .version_min = 3, .version_max = 4, .eval_round = -1, .status = LT_SAMPLE_READY};
  for (int i = 0; i < 6; i++) {
    lt_traj_t r = rec(10 + i, 1, "d", rows[i].reward);
    cJSON_Delete(r.components);
    r.components = cJSON_Parse(rows[i].components);
    int dup;
    cr_assert_eq(lt_buffer_traj_insert(b, &r, &m, &dup), 0, "%s", lt_error_msg());
    rec_free(&r);
  }
  int64_t n, passed;
  cr_assert_eq(lt_buffer_task_history(b, "d", spec, 0.5, &n, &passed), 0, "%s", lt_error_msg());
  cr_expect_eq(n, 6);
  cr_expect_eq(passed, 2, "the 0.7 win rate and the correct answer");
  cr_assert_eq(lt_buffer_task_history(b, "d", spec, 0.25, &n, &passed), 0, "%s", lt_error_msg());
  cr_expect_eq(passed, 3, "envs.<d>.pass_threshold 0.25 adds the 0.3 win rate");
  lt_buffer_close(b);
  lt_test_rmdir(dir);
}

/* One record from the worker to packing: what the buffer gives back is the wire record that went in, field for
 * field — encoded again, it is the very TRAJ the worker sent (header and every array frame). */
Test(buffer, gives_back_the_wire_record_it_stored) {
  char *dir, path[4200];
  lt_buffer_t *b = fresh(&dir, path, sizeof path);
  int32_t starts[2] = {0, 3}, ids[4 * 2] = {11, 12, 13, 14, 15, 16, 17, 18};
  int32_t sup[T] = {0, 0, 2, 2, 2, 2};
  uint16_t rids[T * 2 * 2];
  float rprobs[T * 2 * 2];
  for (int i = 0; i < T * 4; i++) rids[i] = (uint16_t)(i % 8), rprobs[i] = 0.125f * (float)(i % 5);
  lt_traj_t in = rec(9, 3, "agent", 0.75);
  in.support = sup, in.support_ids = ids, in.nsupport_ids = 8, in.temperature = 0.7, in.eval = 1;
  in.gen_ms = 12.5, in.env_ms = 3.25, in.reward_ms = 0.5, in.nseqs = 2, in.seq_starts = starts;
  in.routing_layers = 2, in.routing_k = 2, in.routing_experts = 8, in.routing_ids = rids, in.routing_probs = rprobs;
  lt_traj_meta_t m = {
      .worker = "w1", .version_min = 3, .version_max = 4, .truncated = 1, .eval_round = 2, .status = LT_SAMPLE_EVAL};
  int dup;
  cr_assert_eq(lt_buffer_traj_insert(b, &in, &m, &dup), 0, "%s", lt_error_msg());
  lt_traj_t out;
  cr_assert_eq(lt_buffer_traj_load(b, 9, LT_LOAD_ALL, &out, NULL), 0, "%s", lt_error_msg());
  lt_msg_t a = {.type = LT_MSG_TRAJ, .id = 1, .u.traj = in}, c = {.type = LT_MSG_TRAJ, .id = 1, .u.traj = out};
  lt_frames_t fa, fc;
  cr_assert_eq(lt_proto_encode(&a, &fa), 0, "%s", lt_error_msg());
  cr_assert_eq(lt_proto_encode(&c, &fc), 0, "%s", lt_error_msg());
  cr_assert_eq(fc.n, fa.n);
  cJSON *ha = cJSON_ParseWithLength(fa.f[0].data, fa.f[0].len), *hc = cJSON_ParseWithLength(fc.f[0].data, fc.f[0].len);
  char *sa = cJSON_PrintUnformatted(ha), *sc = cJSON_PrintUnformatted(hc);
  cr_expect(cJSON_Compare(ha, hc, 1), "stored %s\nloaded %s", sa, sc);
  free(sa), free(sc);
  cJSON_Delete(ha), cJSON_Delete(hc);
  for (int i = 1; i < fa.n; i++) {
    cr_expect_eq(fc.f[i].len, fa.f[i].len, "frame %d", i);
    if (fc.f[i].len == fa.f[i].len) cr_expect_eq(memcmp(fc.f[i].data, fa.f[i].data, fa.f[i].len), 0, "frame %d", i);
  }
  lt_frames_free(&fa);
  lt_frames_free(&fc);
  lt_traj_free(&out);
  rec_free(&in);
  lt_buffer_close(b);
  lt_test_rmdir(dir);
}

/* Writes 2 KiB of 0..255 over page `page` (from its first byte: its b-tree page type becomes 0, which SQLite
 * reports as corrupt) of a closed buffer. */
static void scribble(const char *path, int64_t page) {
  FILE *f = fopen(path, "r+b");
  cr_assert_not_null(f);
  unsigned char junk[2048];
  for (size_t i = 0; i < sizeof junk; i++) junk[i] = (unsigned char)i;
  cr_assert_eq(fseek(f, (long)(page - 1) * 4096, SEEK_SET), 0);
  cr_assert_eq(fwrite(junk, 1, sizeof junk, f), sizeof junk);
  cr_assert_eq(fclose(f), 0);
}

/* One page of a table's b-tree: its root, or (mid) a leaf in the middle, which neither the first nor the last row
 * lies on. */
static int64_t page_of(const char *path, const char *table, int mid) {
  sqlite3 *db;
  sqlite3_stmt *s;
  cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
  const char *sql = mid ? "SELECT pageno FROM dbstat WHERE name = ?1 AND pagetype = 'leaf' ORDER BY path"
                        : "SELECT rootpage FROM sqlite_master WHERE name = ?1";
  cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &s, NULL), SQLITE_OK, "%s", sqlite3_errmsg(db));
  sqlite3_bind_text(s, 1, table, -1, SQLITE_STATIC);
  int64_t pages[4096];
  int n = 0;
  while (sqlite3_step(s) == SQLITE_ROW && n < 4096) pages[n++] = sqlite3_column_int64(s, 0);
  sqlite3_finalize(s);
  sqlite3_close(db);
  cr_assert_gt(n, mid ? 4 : 0, "%s: %d pages", table, n);
  return pages[mid ? n / 2 : 0];
}

/* Issue 35: an open no longer reads the whole file (the full check is --check), yet damage is never read as data.
 * A leaf in the middle of the trajectories is missed by the cheap check at open and met by a read: the read
 * fails LT_ECORRUPT, the handle remembers it, and a reader of the rows (`export`) exits 6 with the same "damaged
 * buffer" message as `stats --check`.  `stats` alone reads its counts and mean from indexes (stats_1m_seconds), so
 * it reports without meeting the page.  A damaged root is caught at open. */
Test(buffer, damage_met_while_reading_is_exit_6_with_or_without_check, .timeout = 60) {
  char *dir, path[4200];
  lt_buffer_t *b = fresh(&dir, path, sizeof path);
  cr_assert_eq(lt_buffer_begin(b), 0);
  int dup;
  for (int i = 1; i <= 3000; i++) insert(b, i, (i + 3) / 4, "arith", i % 2, &dup);
  cr_assert_eq(lt_buffer_commit(b), 0, "%s", lt_error_msg());
  lt_buffer_close(b);
  const char *stats[] = {"longtail", "stats", path, NULL}, *checked[] = {"longtail", "stats", path, "--check", NULL};
  const char *export[] = {"longtail", "export", path, "--format", "jsonl", "-o", "/dev/null", NULL};
  lt_run_t r;
  cr_assert_eq(lt_test_run(&r, NULL, 30, stats), 0);
  cr_assert_eq(r.status, 0, "an intact buffer: %s", r.err);
  lt_run_free(&r);
  scribble(path, page_of(path, "trajectories", 1));
  cr_assert_eq(lt_buffer_open(path, LT_BUF_READONLY, &b), 0, "the cheap check passes over a middle page: %s",
               lt_error_msg());
  cr_assert_eq(lt_buffer_damaged(b), 0);
  int64_t total, trunc; /* the totals read every trajectory row: they meet the page */
  lt_buffer_traj_totals(b, &total, &trunc);
  cr_assert_eq(lt_buffer_damaged(b), LT_ECORRUPT);
  cr_expect(
      strstr(lt_error_msg(), "damaged buffer") && strstr(lt_error_msg(), "malformed") && strstr(lt_error_msg(), path),
      "%s", lt_error_msg());
  lt_buffer_close(b);
  for (int k = 0; k < 2; k++) {
    cr_assert_eq(lt_test_run(&r, NULL, 30, k ? checked : export), 0);
    cr_expect_eq(r.status, 6, "%s: exit %d: %s%s", k ? "stats --check" : "export", r.status, r.out, r.err);
    cr_expect(strstr(r.err, "damaged buffer"), "%s: %s", k ? "stats --check" : "export", r.err);
    cr_expect(!k || strstr(r.err, "integrity check failed"), "%s", r.err);
    cr_expect(!strstr(r.out, "reward"), "no report from a damaged buffer: %s", r.out);
    lt_run_free(&r);
  }
  scribble(path, page_of(path, "trajectories", 0));
  cr_assert_eq(lt_buffer_open(path, LT_BUF_READONLY, &b), LT_ECORRUPT, "a damaged root is caught at open");
  cr_expect(strstr(lt_error_msg(), "damaged buffer"), "%s", lt_error_msg());
  lt_test_rmdir(dir);
}

/* Every column of `trajectories` and `payloads` holds what its name says: a trajectory whose every field has a
 * value of its own is stored, each column is read back by name with SQL (a field bound to another column shows
 * there), and the record loads back equal.  A column the buffer has and this list does not fails the test, so a
 * new column comes with its check. */
Test(buffer, round_trips_every_column) {
  char *dir, path[4200];
  lt_buffer_t *b = fresh(&dir, path, sizeof path);
  int32_t sup[T] = {0, 0, 2, 1, 1, 3}, ids[7] = {11, 12, 13, 14, 15, 16, 17}, starts[2] = {0, 4};
  uint16_t rids[T * 2 * 2];
  float rprobs[T * 2 * 2];
  for (int i = 0; i < T * 4; i++) rids[i] = (uint16_t)(i % 7), rprobs[i] = 0.01f * (float)i;
  lt_traj_t r = rec(41, 40, "arith", 0.75);
  r.status = LT_TRAJ_ERROR, r.finish = LT_FINISH_TIMEOUT, r.reason = "tool_timeout", r.error = "it hung";
  r.turns = 3, r.eval = 1, r.gen_ms = 1.5, r.env_ms = 2.5, r.reward_ms = 3.5, r.temperature = 0.7;
  r.support = sup, r.nsupport_ids = 7, r.support_ids = ids, r.nseqs = 2, r.seq_starts = starts;
  r.diff = "--- a/x\n+++ b/x\n";
  r.routing_layers = 2, r.routing_k = 2, r.routing_experts = 7, r.routing_ids = rids, r.routing_probs = rprobs;
  lt_traj_meta_t m = {.worker = "w9",
                      .version_min = 5,
                      .version_max = 6,
                      .truncated = 1,
                      .eval_round = 8,
                      .time_ms = 1234,
                      .status = LT_SAMPLE_EVAL};
  int dup;
  cr_assert_eq(lt_buffer_traj_insert(b, &r, &m, &dup), 0, "%s", lt_error_msg());
  int64_t id = 41;
  cr_assert_eq(lt_buffer_traj_mark(b, &id, 1, LT_SAMPLE_CONSUMED, 9), 0, "%s", lt_error_msg());
  lt_buffer_close(b);

  /* column → the value it must hold, as SQL sees it */
  static const struct {
    const char *table, *column, *expect;
  } C[] = {
      {"trajectories", "id", "1"},
      {"trajectories", "task_id", "41"},
      {"trajectories", "group_id", "40"},
      {"trajectories", "domain", "arith"},
      {"trajectories", "status", "consumed"},
      {"trajectories", "traj_status", "error"},
      {"trajectories", "reward", "0.75"},
      {"trajectories", "components", "{\"correct\":1}"},
      {"trajectories", "finish", "timeout"},
      {"trajectories", "reason", "tool_timeout"},
      {"trajectories", "truncated", "1"},
      {"trajectories", "ntokens", "6"},
      {"trajectories", "nturns", "3"},
      {"trajectories", "version_min", "5"},
      {"trajectories", "version_max", "6"},
      {"trajectories", "worker", "w9"},
      {"trajectories", "gen_ms", "1.5"},
      {"trajectories", "env_ms", "2.5"},
      {"trajectories", "reward_ms", "3.5"},
      {"trajectories", "time_ms", "1234"},
      {"trajectories", "consumed_step", "9"},
      {"trajectories", "eval", "1"},
      {"trajectories", "eval_round", "8"},
      {"trajectories", "error", "it hung"},
      {"payloads", "task_id", "41"},
      {"payloads", "tokens", "24"},
      {"payloads", "logprobs", "24"},
      {"payloads", "loss_mask", "6"},
      {"payloads", "versions", "24"},
      {"payloads", "support", "24"},
      {"payloads", "routing_ids", "48"},
      {"payloads", "routing_probs", "96"},
      {"payloads", "routing_layers", "2"},
      {"payloads", "routing_k", "2"},
      {"payloads", "routing_experts", "7"},
      {"payloads", "messages", "[{\"role\":\"user\",\"content\":\"1+1=\"}]"},
      {"payloads", "support_ids", "28"},
      {"payloads", "temperature", "0.7"},
      {"payloads", "seq_starts", "8"},
      {"payloads", "diff", "--- a/x\n+++ b/x\n"},
  };
  sqlite3 *db;
  cr_assert_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
  for (int tb = 0; tb < 2; tb++) {
    const char *table = tb ? "payloads" : "trajectories";
    char sql[200];
    snprintf(sql, sizeof sql, "SELECT name FROM pragma_table_info('%s')", table);
    sqlite3_stmt *s;
    cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &s, NULL), SQLITE_OK);
    int ncols = 0;
    while (sqlite3_step(s) == SQLITE_ROW) {
      const char *col = (const char *)sqlite3_column_text(s, 0);
      ncols++;
      size_t k = 0;
      while (k < sizeof C / sizeof C[0] && (strcmp(C[k].table, table) || strcmp(C[k].column, col))) k++;
      cr_expect(k < sizeof C / sizeof C[0], "%s.%s has no round-trip check here: add one", table, col);
      if (k == sizeof C / sizeof C[0]) continue;
      /* a blob by its length, anything else by its text */
      snprintf(sql, sizeof sql, "SELECT CASE typeof(%s) WHEN 'blob' THEN length(%s) ELSE %s END FROM %s", col, col, col,
               table);
      sqlite3_stmt *v;
      cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &v, NULL), SQLITE_OK, "%s", sql);
      cr_assert_eq(sqlite3_step(v), SQLITE_ROW);
      const char *got = (const char *)sqlite3_column_text(v, 0);
      cr_expect_str_eq(got ? got : "NULL", C[k].expect, "%s.%s", table, col);
      sqlite3_finalize(v);
    }
    sqlite3_finalize(s);
    cr_expect_geq(ncols, tb ? 15 : 24);
  }
  /* blobs of one length each: their bytes too */
  sqlite3_stmt *v;
  cr_assert_eq(sqlite3_prepare_v2(db, "SELECT tokens, logprobs, versions, support FROM payloads", -1, &v, NULL),
               SQLITE_OK);
  cr_assert_eq(sqlite3_step(v), SQLITE_ROW);
  cr_expect_eq(memcmp(sqlite3_column_blob(v, 0), tokens, sizeof tokens), 0);
  cr_expect_eq(memcmp(sqlite3_column_blob(v, 1), logp, sizeof logp), 0);
  cr_expect_eq(memcmp(sqlite3_column_blob(v, 2), versions, sizeof versions), 0);
  cr_expect_eq(memcmp(sqlite3_column_blob(v, 3), sup, sizeof sup), 0);
  sqlite3_finalize(v);
  sqlite3_close(db);

  cr_assert_eq(lt_buffer_open(path, LT_BUF_READONLY, &b), 0, "%s", lt_error_msg());
  lt_traj_t t;
  lt_traj_meta_t lm;
  cr_assert_eq(lt_buffer_traj_load(b, 41, LT_LOAD_ALL, &t, &lm), 0, "%s", lt_error_msg());
  cr_expect_eq(t.group_id, 40);
  cr_expect_eq(t.status, LT_TRAJ_ERROR);
  cr_expect_eq(t.finish, LT_FINISH_TIMEOUT);
  cr_expect_str_eq(t.reason, "tool_timeout");
  cr_expect_str_eq(t.error, "it hung");
  cr_expect_str_eq(t.diff, "--- a/x\n+++ b/x\n");
  cr_expect_eq(t.turns, 3);
  cr_expect_eq(t.eval, 1);
  cr_expect_float_eq(t.gen_ms + 10 * t.env_ms + 100 * t.reward_ms, 1.5 + 25 + 350, 1e-9);
  cr_expect_float_eq(t.temperature, 0.7, 1e-12);
  cr_expect_eq(t.nsupport_ids, 7);
  cr_expect_eq(memcmp(t.support_ids, ids, sizeof ids), 0);
  cr_expect_eq(t.nseqs, 2);
  cr_expect_eq(t.seq_starts[1], 4);
  cr_expect_eq(t.routing_layers * 100 + t.routing_k * 10, 220);
  cr_expect_eq(t.routing_experts, 7);
  cr_expect_eq(memcmp(t.routing_ids, rids, sizeof rids), 0);
  cr_expect_eq(memcmp(t.routing_probs, rprobs, sizeof rprobs), 0);
  cr_expect_eq(memcmp(t.loss_mask, mask, sizeof mask), 0);
  cr_expect_eq(lm.consumed_step, 9);
  cr_expect_eq(lm.status, LT_SAMPLE_CONSUMED);
  cr_expect_eq(lm.eval_round, 8);
  cr_expect_eq(lm.time_ms, 1234);
  cr_expect_eq(lm.version_min * 10 + lm.version_max, 56);
  cr_expect_str_eq(lm.loaded_worker, "w9");
  lt_traj_free(&t);
  lt_buffer_close(b);
  rec_free(&r);
  lt_test_rmdir(dir);
}
