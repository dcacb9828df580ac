/* What a stop, a second daemon or a bad worker may not do to a run (issue 19):
 * each test runs the real daemon and workers (or a hand-made peer) on loopback. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "cJSON.h"
#include "proto/proto.h"
#include "tests/support/harness.h"
#include "tests/support/live.h"
#include "util/error.h"

typedef struct {
  char *dir;
  char cfg[4200], rd[4200], ep[64];
} rel_run_t;

static void rel_prepare(rel_run_t *r, const char *tag, int spawn, int tasks, const char *extra) {
  r->dir = lt_test_tmpdir(tag);
  snprintf(r->cfg, sizeof r->cfg, "%s/cfg.json", r->dir);
  snprintf(r->rd, sizeof r->rd, "%s/run", r->dir);
  int port = lt_test_free_port();
  snprintf(r->ep, sizeof r->ep, "tcp://127.0.0.1:%d", port);
  lt_test_fault_config(r->cfg, port, spawn, tasks, extra);
}

static pid_t rel_daemon(rel_run_t *r, const char *log, int resume) {
  const char *argv[] = {"longtail", "train", r->cfg, "--run-dir", r->rd, resume ? "--resume" : NULL, NULL};
  pid_t p = lt_test_spawn(r->dir, log, argv);
  cr_assert_gt(p, 0);
  return p;
}

/* One integer from the run's buffer. */
static long long sql1(const char *rd, const char *q) {
  lt_run_t r;
  cr_assert_eq(lt_test_sh(&r, 30, "sqlite3 -cmd '.timeout 5000' %s/buffer.db \"%s\"", rd, q), 0);
  long long v = atoll(r.out);
  lt_run_free(&r);
  return v;
}

/* Found 1: the resumed workers stamped every token with version 0, so every
 * trajectory after a resume was stale. */
Test(reliability, sigint_then_resume_trains_only_fresh_trajectories, .timeout = 240) {
  rel_run_t r;
  rel_prepare(&r, "resume-fresh", 2, 160, "");
  pid_t d = rel_daemon(&r, "daemon1", 0);
  /* Past max_staleness (2): trajectories stamped v0 would be stale. */
  cr_assert_geq(lt_test_poll_stat(r.rd, "policy_version", NULL, 4, 90), 4, "no 4th policy version before the stop");
  kill(d, SIGINT);
  cr_assert_eq(lt_test_wait(d, 60), 0, "the interrupted daemon did not exit 0");
  long long before = sql1(r.rd, "SELECT count(*) FROM trajectories");
  cr_assert_lt(before, 160, "the run ended before the stop");
  pid_t d2 = rel_daemon(&r, "daemon2", 1);
  cr_assert_eq(lt_test_wait(d2, 150), 0, "the resumed daemon failed");
  cJSON *s = lt_test_stats(r.rd);
  cr_assert_eq(lt_test_at(s, "tasks", "done"), 160);
  cr_expect_eq(lt_test_at(s, "trajectories", "stale"), 0, "stale trajectories after the resume");
  cr_expect_eq(lt_test_at(s, "trajectories", "consumed"), 160);
  cJSON_Delete(s);
  lt_test_rmdir(r.dir);
}

/* Found 2: a second daemon on a live run directory was accepted. It must be
 * refused at once, naming the holder; read-only commands keep working; and
 * after the holder is SIGKILLed (its local workers still alive) a resume is
 * accepted. */
Test(reliability, second_daemon_on_a_live_run_is_refused, .timeout = 240) {
  rel_run_t r;
  rel_prepare(&r, "twodaemons", 2, 96, "");
  pid_t d = rel_daemon(&r, "daemon1", 0);
  cr_assert_geq(lt_test_poll_stat(r.rd, "tasks", "done", 4, 60), 4);
  lt_run_t out;
  const char *argv[] = {"longtail", "train", r.cfg, "--run-dir", r.rd, "--resume", NULL};
  cr_assert_eq(lt_test_run(&out, NULL, 30, argv), 0);
  cr_expect_neq(out.status, 0, "a second daemon was accepted");
  cr_expect_lt(out.secs, 10, "the second daemon did not exit at once");
  char pid[32];
  snprintf(pid, sizeof pid, "pid %d", (int)d);
  cr_expect(strstr(out.err, pid), "the refusal does not name the holder (%s): %s", pid, out.err);
  lt_run_free(&out);
  cJSON *s = lt_test_stats(r.rd); /* read-only commands still work */
  cr_assert(s);
  cJSON_Delete(s);
  kill(d, SIGKILL);
  lt_test_wait(d, 10);
  pid_t d2 = rel_daemon(&r, "daemon2", 1); /* the killed daemon's workers still live: not a holder */
  cr_assert_eq(lt_test_wait(d2, 150), 0, "the resume after a SIGKILL was refused or failed");
  cr_expect_eq(sql1(r.rd, "SELECT count(*) FROM tasks WHERE status = 'done'"), 96);
  cr_expect_eq(sql1(r.rd, "SELECT count(DISTINCT task_id) FROM trajectories"), 96);
  lt_test_rmdir(r.dir);
}

/* Found 7: --resume of a directory that does not exist is an error, not a new empty run directory. */
Test(reliability, resume_of_a_missing_run_dir_is_an_error, .timeout = 60) {
  rel_run_t r;
  rel_prepare(&r, "noresume", 0, 8, "");
  lt_run_t out;
  const char *argv[] = {"longtail", "train", r.cfg, "--run-dir", r.rd, "--resume", NULL};
  cr_assert_eq(lt_test_run(&out, NULL, 30, argv), 0);
  cr_expect_neq(out.status, 0);
  cr_expect(strstr(out.err, "does not exist"), "%s", out.err);
  cr_expect(access(r.rd, F_OK) != 0, "--resume created %s", r.rd);
  lt_run_free(&out);
  lt_test_rmdir(r.dir);
}

/* Found 3 and 4: a TRAJ with a token id past the vocabulary (or a reward its
 * domain cannot produce) was committed and then stopped the learner for good
 * (or was trained on). It must be refused before the commit with an ERROR
 * naming the TRAJ (ref) and its task (task_id), the task must run again at
 * once (not after task_timeout_s), and the run completes. */
Test(reliability, out_of_vocabulary_or_out_of_range_trajectory_is_refused_and_its_task_requeued, .timeout = 180) {
  rel_run_t r;
  rel_prepare(&r, "oov", 1, 32, "\"rollout\": {\"max_new_tokens\": 24, \"max_turns\": 1}");
  /* A task timeout far past the test's patience: only an immediate requeue lets the run end in time. */
  lt_run_t out;
  cr_assert_eq(lt_test_sh(&out, 10, "sed -i 's/\"task_timeout_s\": 20/\"task_timeout_s\": 600/' %s", r.cfg), 0);
  lt_run_free(&out);
  pid_t d = rel_daemon(&r, "daemon", 0);
  void *ctx = zmq_ctx_new();
  lt_msg_t task;
  void *s = lt_test_peer_hello(ctx, r.ep, "hostile", &task);
  int32_t tok[4] = {1, 2, 1264, 4}, ver[4] = {-1, -1, 0, 0};
  float lp[4] = {0, 0, -0.5f, -0.5f};
  uint8_t mask[4] = {0, 0, 1, 1};
  lt_msg_t tr = {.type = LT_MSG_TRAJ, .id = 77,
                 .u.traj = {.task_id = task.u.task.task_id, .group_id = task.u.task.group_id, .domain = task.u.task.domain,
                            .status = LT_TRAJ_OK, .finish = LT_FINISH_TERMINATED, .reason = "stop", .error = "",
                            .has_reward = 1, .reward = 1, .components = cJSON_CreateObject(),
                            .messages = cJSON_CreateArray(), .turns = 1, .ntokens = 4, .tokens = tok, .logprobs = lp,
                            .loss_mask = mask, .versions = ver}};
  lt_test_peer_send(s, &tr);
  lt_msg_t err;
  cr_assert(lt_test_peer_recv(s, LT_MSG_ERROR, &err, 10), "no ERROR for an out-of-vocabulary TRAJ");
  cr_expect_eq(err.u.error.ref, 77, "ERROR.ref %llu is not the TRAJ's id", (unsigned long long)err.u.error.ref);
  cr_expect_eq(err.u.error.task_id, task.u.task.task_id);
  cr_expect(strstr(err.u.error.message, "1264"), "%s", err.u.error.message);
  lt_msg_free(&err);
  /* Every token fine, but a reward the domain's reward (rule: [0, 1]) cannot produce: refused too, not trained on. */
  tok[2] = 3;
  tr.id = 79;
  tr.u.traj.reward = 5;
  lt_test_peer_send(s, &tr);
  cr_assert(lt_test_peer_recv(s, LT_MSG_ERROR, &err, 10), "no ERROR for a reward outside the domain's range");
  cr_expect_eq(err.u.error.ref, 79);
  cr_expect_eq(err.u.error.task_id, task.u.task.task_id);
  cr_expect(strstr(err.u.error.message, "reward 5 outside") && strstr(err.u.error.message, "[0, 1]"), "%s",
            err.u.error.message);
  lt_msg_free(&err);
  /* A malformed TRAJ (arrays of different lengths) whose header names its task: the same answer. */
  char hdr[512];
  int hn = snprintf(hdr, sizeof hdr, "{\"v\": 1, \"type\": \"TRAJ\", \"id\": 78, \"task_id\": %llu, \"ntokens\": 3}",
                    (unsigned long long)task.u.task.task_id);
  zmq_send(s, hdr, (size_t)hn, 0);
  cr_assert(lt_test_peer_recv(s, LT_MSG_ERROR, &err, 10), "no ERROR for a malformed TRAJ");
  cr_expect_eq(err.u.error.ref, 78);
  cr_expect_eq(err.u.error.task_id, task.u.task.task_id);
  lt_msg_free(&err);
  cJSON_Delete(tr.u.traj.components), cJSON_Delete(tr.u.traj.messages);
  lt_msg_free(&task);
  int st = lt_test_wait(d, 90);
  zmq_close(s);
  zmq_ctx_term(ctx);
  cr_assert_eq(st, 0, "daemon exit %d (a refused task waited for its timeout?)", st);
  cJSON *j = lt_test_stats(r.rd);
  cr_expect_eq(lt_test_at(j, "tasks", "done"), 32);
  cr_expect_eq(lt_test_at(j, "tasks", "failed"), 0);
  cJSON_Delete(j);
  cr_expect_eq(sql1(r.rd, "SELECT count(*) FROM trajectories WHERE worker = 'hostile'"), 0);
  lt_test_rmdir(r.dir);
}

/* A finished collect-only run whose first ready trajectory then gets token id 1264 (vocabulary: 264), as in a
 * buffer written before the daemon checked; resumed with the learner on (and scheduler.max_attempts, when > 0).
 * Returns the damaged trajectory's task id. */
static int64_t quarantine_run(rel_run_t *r, const char *tag, int max_attempts) {
  rel_prepare(r, tag, 1, 32, "");
  const char *argv[] = {"longtail", "train", r->cfg, "--run-dir", r->rd, "--set", "learner.enabled=false", NULL};
  lt_run_t out;
  cr_assert_eq(lt_test_run(&out, NULL, 120, argv), 0);
  cr_assert_eq(out.status, 0, "%s", out.err);
  lt_run_free(&out);
  int64_t bad = sql1(r->rd, "SELECT min(task_id) FROM trajectories WHERE status = 'ready'");
  cr_assert_eq(lt_test_sh(&out, 30, "sqlite3 %s/buffer.db \"UPDATE payloads SET tokens = X'F0040000' || substr(tokens, 5) "
                                     "WHERE task_id = %lld\"", r->rd, (long long)bad), 0);
  cr_assert_eq(out.status, 0, "%s", out.err);
  lt_run_free(&out);
  if (max_attempts > 0) {
    cr_assert_eq(lt_test_sh(&out, 10, "sed -i 's/\"max_tasks\": 32,/\"max_tasks\": 32, \"max_attempts\": %d,/' %s",
                            max_attempts, r->cfg), 0);
    lt_run_free(&out);
  }
  pid_t d = rel_daemon(r, "resumed", 1);
  cr_assert_eq(lt_test_wait(d, 120), 0, "the resumed run did not complete");
  char q[256];
  snprintf(q, sizeof q, "SELECT count(*) FROM quarantine WHERE task_id = %lld AND why LIKE '%%1264%%' AND step >= 1 "
                        "AND length(tokens) > 0", (long long)bad);
  cr_expect_eq(sql1(r->rd, q), 1, "the quarantined record is kept for inspection");
  cr_expect_eq(sql1(r->rd, "SELECT value FROM counters WHERE name = 'trajectories_quarantined'"), 1);
  cr_expect_eq(sql1(r->rd, "SELECT count(*) FROM events WHERE kind = 'quarantined' AND detail LIKE '%1264%'"), 1);
  cr_expect_eq(sql1(r->rd, "SELECT count(*) FROM trajectories WHERE status = 'failed'"), 0);
  return bad;
}

/* Found 3, the learner's side: a buffer that already holds a trajectory the
 * model cannot take no longer stops the run for good: the trajectory is
 * quarantined (moved aside with its reason, counted, an event) and its task
 * runs again, its attempt counted, so the resumed run trains on all 32 tasks. */
Test(reliability, learner_quarantines_an_unusable_trajectory_and_its_task_runs_again, .timeout = 180) {
  rel_run_t r;
  int64_t bad = quarantine_run(&r, "quarantine", 0);
  cr_expect_eq(sql1(r.rd, "SELECT count(*) FROM trajectories WHERE status = 'consumed'"), 32, "the new attempt was trained on");
  char q[256];
  snprintf(q, sizeof q, "SELECT count(*) FROM tasks WHERE id = %lld AND status = 'done' AND attempts = 1", (long long)bad);
  cr_expect_eq(sql1(r.rd, q), 1, "the task ran again, its attempt counted");
  lt_test_rmdir(r.dir);
}

/* The fresh attempt counts like every other requeue: with scheduler.max_attempts 1 the quarantined task fails
 * instead of running again, and the run still ends. */
Test(reliability, a_quarantined_task_is_bounded_by_max_attempts, .timeout = 180) {
  rel_run_t r;
  int64_t bad = quarantine_run(&r, "quarantine-max", 1);
  char q[256];
  snprintf(q, sizeof q, "SELECT count(*) FROM tasks WHERE id = %lld AND status = 'failed' AND attempts = 1", (long long)bad);
  cr_expect_eq(sql1(r.rd, q), 1, "the quarantined task failed after its one attempt");
  cr_expect_eq(sql1(r.rd, "SELECT count(*) FROM trajectories WHERE status = 'consumed'"), 31);
  snprintf(q, sizeof q, "SELECT count(*) FROM events WHERE kind = 'task_failed' AND detail LIKE 'task %lld %%quarantined%%'",
           (long long)bad);
  cr_expect_eq(sql1(r.rd, q), 1, "the failure names the quarantine");
  lt_test_rmdir(r.dir);
}

/* Found 5: a limit no worker accepts was a valid config, and a run whose
 * every task failed exited 0. */
Test(reliability, impossible_limit_is_a_config_error, .timeout = 60) {
  lt_run_t out;
  char cfg[4200];
  snprintf(cfg, sizeof cfg, "%s/configs/smoke.json", lt_test_root());
  const char *bad[][2] = {{"rollout.max_new_tokens=100000000", "rollout.max_new_tokens"},
                          /* a reward range no result can be checked against */
                          {"rewards.range=[2, 1]", "rewards.range"},
                          {"rewards.domains={\"arith\": {\"range\": [0]}}", "rewards.domains.arith.range"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    const char *argv[] = {"longtail", "config", cfg, "--set", bad[i][0], NULL};
    cr_assert_eq(lt_test_run(&out, NULL, 30, argv), 0);
    cr_expect_eq(out.status, 2, "%s: exit %d: %s%s", bad[i][0], out.status, out.out, out.err);
    cr_expect(strstr(out.err, bad[i][1]), "%s", out.err);
    lt_run_free(&out);
  }
}

Test(reliability, run_whose_tasks_all_failed_exits_nonzero_with_the_reason, .timeout = 120) {
  rel_run_t r;
  rel_prepare(&r, "allfail", 0, 4, "\"learner\": {\"enabled\": false}");
  lt_run_t out;
  cr_assert_eq(lt_test_sh(&out, 10, "sed -i 's/\"max_tasks\": 4,/\"max_tasks\": 4, \"max_attempts\": 1,/' %s", r.cfg), 0);
  lt_run_free(&out);
  pid_t d = rel_daemon(&r, "daemon", 0);
  void *ctx = zmq_ctx_new();
  lt_msg_t task;
  void *s = lt_test_peer_hello(ctx, r.ep, "refuser", &task);
  for (int i = 0; i < 4; i++) { /* a worker that cannot run any task (as with an impossible limit) */
    if (i > 0) cr_assert(lt_test_peer_recv(s, LT_MSG_TASK, &task, 10), "no TASK %d", i);
    lt_msg_t e = {.type = LT_MSG_ERROR, .id = (uint64_t)(10 + i),
                  .u.error = {.code = LT_EINVAL, .message = "max_new_tokens beyond what this worker allows",
                              .ref = task.id, .task_id = task.u.task.task_id}};
    lt_test_peer_send(s, &e);
    lt_msg_free(&task);
  }
  int st = lt_test_wait(d, 60);
  zmq_close(s);
  zmq_ctx_term(ctx);
  cr_expect_eq(st, 1, "daemon exit %d after every task failed", st);
  char p[4300];
  snprintf(p, sizeof p, "%s/daemon.err", r.dir);
  char *log = lt_test_read(p);
  cr_expect(log && strstr(log, "all 4 tasks failed") && strstr(log, "beyond what this worker allows"), "%s", log ? log : "");
  free(log);
  lt_test_rmdir(r.dir);
}

/* Operations: workers count as alive only while they heartbeat to a live
 * daemon; a finished run has none alive (they said BYE, and no daemon holds
 * the run any more). */
Test(reliability, stats_shows_workers_alive_only_while_they_heartbeat, .timeout = 120) {
  rel_run_t r;
  rel_prepare(&r, "alive", 2, 64, "\"learner\": {\"enabled\": false}, \"rollout\": {\"max_new_tokens\": 24}");
  pid_t d = rel_daemon(&r, "daemon", 0);
  cr_assert_geq(lt_test_poll_stat(r.rd, "workers", "alive", 2, 60), 2, "the two live workers are not shown alive");
  cr_assert_eq(lt_test_wait(d, 90), 0);
  cJSON *s = lt_test_stats(r.rd);
  cr_expect_eq(lt_test_at(s, "workers", "seen"), 2);
  cr_expect_eq(lt_test_at(s, "workers", "alive"), 0, "workers shown alive after the run ended");
  cJSON_Delete(s);
  lt_test_rmdir(r.dir);
}

/* Found 6: the offline readers of a damaged buffer exit 6 like `train --resume`. */
Test(reliability, readers_of_a_corrupt_buffer_exit_6, .timeout = 120) {
  rel_run_t r;
  rel_prepare(&r, "corrupt", 1, 8, "\"learner\": {\"enabled\": false}");
  const char *argv[] = {"longtail", "train", r.cfg, "--run-dir", r.rd, NULL};
  lt_run_t out;
  cr_assert_eq(lt_test_run(&out, NULL, 90, argv), 0);
  cr_assert_eq(out.status, 0, "%s", out.err);
  lt_run_free(&out);
  cr_assert_eq(lt_test_sh(&out, 10, "python3 -c \"f = open('%s/buffer.db', 'r+b'); f.seek(4096 + 8); f.write(bytes(range(256)) * 8)\"", r.rd), 0);
  cr_assert_eq(out.status, 0, "%s", out.err);
  lt_run_free(&out);
  const char *cmds[][8] = {{"longtail", "stats", r.rd, NULL},
                           {"longtail", "export", r.rd, "--format", "jsonl", "-o", "/dev/null", NULL},
                           {"longtail", "inspect", r.rd, "--task", "1", NULL},
                           {"longtail", "replay", r.rd, NULL}};
  for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
    cr_assert_eq(lt_test_run(&out, NULL, 60, cmds[i]), 0);
    cr_expect_eq(out.status, 6, "longtail %s on a corrupt buffer: exit %d: %s", cmds[i][1], out.status, out.err);
    lt_run_free(&out);
  }
  lt_test_rmdir(r.dir);
}

Test(reliability, keygen_and_init_into_a_missing_folder_exit_3, .timeout = 60) {
  lt_run_t out;
  char cfg[4096], ok[4096];
  snprintf(cfg, sizeof cfg, "%s/configs/models/tiny-moe.json", lt_test_root());
  char *dir = lt_test_tmpdir("initdir");
  snprintf(ok, sizeof ok, "%s/new-model", dir);
  const char *cmds[][8] = {{"longtail", "keygen", "--out", "/nonexistent-lt-dir/daemon", NULL},
                           {"longtail", "init", "--config", cfg, "--out", "/nonexistent-lt-dir/model", NULL}};
  for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
    cr_assert_eq(lt_test_run(&out, NULL, 30, cmds[i]), 0);
    cr_expect_eq(out.status, 3, "%s: exit %d: %s", cmds[i][1], out.status, out.err);
    cr_expect(strstr(out.err, "/nonexistent-lt-dir"), "%s names the folder: %s", cmds[i][1], out.err);
    lt_run_free(&out);
  }
  cr_expect(access("/nonexistent-lt-dir", F_OK) != 0, "init made the missing folder");
  /* A new folder whose parent exists is what init is for. */
  const char *init[] = {"longtail", "init", "--config", cfg, "--out", ok, NULL};
  cr_assert_eq(lt_test_run(&out, NULL, 30, init), 0);
  cr_expect_eq(out.status, 0, "init into a new folder: exit %d: %s", out.status, out.err);
  lt_run_free(&out);
  lt_test_rmdir(dir);
}

/* Operations: the Prometheus exposition passes `promtool check metrics` with
 * no findings (counters end in _total, base units, HELP everywhere). */
Test(reliability, prometheus_exposition_passes_promtool, .timeout = 120) {
  lt_run_t out;
  cr_assert_eq(lt_test_sh(&out, 10, "command -v promtool"), 0);
  int have = out.status == 0;
  lt_run_free(&out);
  if (!have) cr_skip_test("promtool is not installed (Debian: prometheus; scripts/deps.sh install)");
  rel_run_t r;
  int port = lt_test_free_port();
  char extra[128];
  snprintf(extra, sizeof extra, "\"monitor\": {\"progress\": \"off\", \"prometheus_port\": %d}", port);
  rel_prepare(&r, "promtool", 2, 100000, extra);
  pid_t d = rel_daemon(&r, "daemon", 0);
  char *body = NULL;
  /* Until the learner, the dispatch timings and the memory gauge have all reported (every 5 s). */
  for (int i = 0; i < 600; i++, usleep(100000)) {
    free(body);
    body = lt_test_http(port, "GET", "/metrics", NULL);
    if (body && strstr(body, "longtail_learner_step_seconds ") && strstr(body, "longtail_daemon_rss_bytes ") &&
        strstr(body, "longtail_dispatch_overhead_p99_seconds "))
      break;
  }
  cr_assert(body && strstr(body, "longtail_daemon_rss_bytes "), "%s", body ? body : "unreachable");
  char p[4300];
  snprintf(p, sizeof p, "%s/metrics.txt", r.dir);
  const char *text = strstr(body, "\r\n\r\n");
  cr_assert(text);
  cr_assert_eq(lt_test_write(p, text + 4), 0);
  free(body);
  cr_assert_eq(lt_test_sh(&out, 30, "promtool check metrics < %s 2>&1", p), 0);
  cr_expect_eq(out.status, 0, "promtool: %s", out.out);
  cr_expect_str_empty(out.out, "promtool findings: %s", out.out);
  lt_run_free(&out);
  kill(d, SIGTERM);
  cr_assert_eq(lt_test_wait(d, 60), 0);
  lt_test_rmdir(r.dir);
}

/* Protocol documentation: a worker written in Python from docs/protocol.md
 * alone (scripts/pyworker.py) runs a whole training job with the daemon. */
Test(reliability, third_party_worker_from_the_protocol_docs_completes_a_run, .timeout = 180) {
  lt_run_t out;
  /* (a python3 first on PATH, e.g. pyenv's, may lack Debian's python3-zmq) */
  cr_assert_eq(lt_test_sh(&out, 10, "for p in python3 /usr/bin/python3; do $p -c 'import zmq' 2>/dev/null && echo $p && break; done"), 0);
  char py[256];
  snprintf(py, sizeof py, "%s", out.out);
  py[strcspn(py, "\n")] = 0;
  int have = py[0] != 0;
  lt_run_free(&out);
  if (!have) cr_skip_test("pyzmq is not installed (Debian: python3-zmq; scripts/deps.sh install)");
  rel_run_t r;
  rel_prepare(&r, "pyworker", 0, 48, "");
  pid_t d = rel_daemon(&r, "daemon", 0);
  char script[4200];
  snprintf(script, sizeof script, "%s/scripts/pyworker.py", lt_test_root());
  const char *argv[] = {py, script, "--connect", r.ep, "--name", "py", "--slots", "4", NULL};
  pid_t w = lt_test_spawn(r.dir, "py", argv);
  int st = lt_test_wait(d, 150);
  int wst = lt_test_wait(w, 30);
  cr_assert_eq(st, 0, "daemon exit %d", st);
  cr_expect_eq(wst, 0, "the Python worker did not leave on BYE (exit %d)", wst);
  cJSON *s = lt_test_stats(r.rd);
  cr_expect_eq(lt_test_at(s, "tasks", "done"), 48);
  cr_expect_eq(lt_test_at(s, "trajectories", "consumed"), 48);
  cr_expect_eq(lt_test_at(s, "learner_step", NULL), 3);
  cJSON_Delete(s);
  cr_expect_eq(sql1(r.rd, "SELECT count(*) FROM trajectories WHERE worker = 'py'"), 48);
  lt_test_rmdir(r.dir);
}

/* Attempts are counted the same way for every requeue that lost a running
 * session: a worker that leaves (BYE) with a task costs that task an attempt,
 * as its death or a timeout does. */
Test(reliability, bye_with_a_running_task_counts_an_attempt, .timeout = 60) {
  rel_run_t r;
  rel_prepare(&r, "byeattempt", 0, 4, "\"learner\": {\"enabled\": false}");
  pid_t d = rel_daemon(&r, "daemon", 0);
  void *ctx = zmq_ctx_new();
  lt_msg_t task;
  void *s = lt_test_peer_hello(ctx, r.ep, "leaver", &task);
  lt_msg_t bye = {.type = LT_MSG_BYE, .id = 5, .u.bye = {.reason = "shutting down"}};
  lt_test_peer_send(s, &bye);
  char q[128];
  snprintf(q, sizeof q, "SELECT attempts FROM tasks WHERE id = %llu", (unsigned long long)task.u.task.task_id);
  long long attempts = 0;
  for (int i = 0; i < 50 && attempts == 0; i++, usleep(100000)) attempts = sql1(r.rd, q);
  cr_expect_eq(attempts, 1, "task %llu: %lld attempts after its worker left", (unsigned long long)task.u.task.task_id, attempts);
  lt_msg_free(&task);
  zmq_close(s);
  zmq_ctx_term(ctx);
  kill(d, SIGKILL);
  lt_test_wait(d, 10);
  lt_test_rmdir(r.dir);
}

/* Found 7: paths inside a config are taken from the config file's folder (as
 * "extends" is), so a config runs from any working directory. */
Test(reliability, config_paths_resolve_against_the_config_folder, .timeout = 60) {
  char *dir = lt_test_tmpdir("cfgpaths");
  lt_run_t out;
  cr_assert_eq(lt_test_sh(&out, 10, "mkdir -p %s/sub/models && cp %s/configs/models/tiny-moe.json %s/sub/models/m.json && "
                                    "echo '{\"extends\": \"sub/base.json\"}' > %s/top.json && "
                                    "echo '{\"model\": {\"init\": \"models/m.json\"}, \"envs\": {\"t\": {\"type\": \"tools\", "
                                    "\"params\": {\"spec\": \"%s/configs/envs/bank.json\"}}}}' > %s/sub/base.json",
                          dir, lt_test_root(), dir, dir, lt_test_root(), dir), 0);
  cr_assert_eq(out.status, 0, "%s", out.err);
  lt_run_free(&out);
  /* From another working directory: the base's path is taken from the base's folder. */
  cr_assert_eq(lt_test_sh(&out, 30, "cd / && %s config %s/top.json", lt_test_bin(), dir), 0);
  cr_assert_eq(out.status, 0, "%s", out.err);
  char want[4400];
  snprintf(want, sizeof want, "\"%s/sub/models/m.json\"", dir);
  cr_expect(strstr(out.out, want), "model.init not resolved to %s: %s", want, out.out);
  lt_run_free(&out);
  lt_test_rmdir(dir);
}
