/* The daemon's loop without a daemon process: the task table (open addressing with backward-shift deletion, the
 * FIFO and what it skips), dispatch against fake workers (ZeroMQ DEALER sockets on the daemon's own ROUTER: what
 * each worker receives, decoded), a send to a worker that is gone, and metrics.jsonl under a name a worker chose.
 * The loop, the writer thread, the buffer and the environments are the real ones. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "cli/commands.h"
#include "orchestrator/internal.h"
#include "tests/support/harness.h"
#include "util/error.h"
#include "util/json.h"

enum { NPEERS = 2 };

typedef struct {
  char *dir;
  lt_config_t cfg;
  lt_daemon_t *d;
  void *peer[NPEERS]; /* the fake workers' DEALER sockets */
  int seen[NPEERS];   /* the daemon has their routing ids */
} fixture_t;

static fixture_t fx;

/* The daemon side of the socket: learns each fake worker's routing id from its first message. */
static void orch_test_on_recv(lt_zsock_t *z, const lt_frame_t *frames, int n, void *ud) {
  lt_daemon_t *d = ud;
  for (int i = 0; i < NPEERS; i++)
    if (frames[0].len == strlen(d->workers[i].name) && !memcmp(frames[0].data, d->workers[i].name, frames[0].len)) {
      memcpy(d->workers[i].rid, frames[0].data, frames[0].len);
      d->workers[i].rid_len = frames[0].len;
      fx.seen[i] = 1;
    }
}

/* Turns the loop until cond holds (the writer's commits and completions come back through it), at most 10 s. */
#define SPIN_UNTIL(cond)                                   \
  for (int spin_ = 0; !(cond) && spin_ < 10000; spin_++) { \
    uv_run(&fx.d->loop, UV_RUN_NOWAIT);                    \
    usleep(1000);                                          \
  }                                                        \
  cr_assert((cond), "timed out waiting for %s", #cond)

static void setup(void) {
  memset(&fx, 0, sizeof fx);
  fx.dir = lt_test_tmpdir("orchestrator");
  cJSON *js = cJSON_Parse("{\"envs\": {\"arith\": {\"type\": \"arith\"}}, \"run\": {\"seed\": 11}}");
  cr_assert_eq(lt_config_from_json(&fx.cfg, js, NULL, 0, lt_all_schemas, lt_all_nschemas), 0, "%s", lt_error_msg());
  lt_daemon_t *d = fx.d = calloc(1, sizeof *d);
  d->cfg = &fx.cfg;
  d->accepting = 1;
  d->eval_round = -1;
  d->run_seed = 11;
  d->group_size = 2;
  d->oversample_max = 1;
  d->max_tasks = 6;
  d->open_target = 6;
  snprintf(d->run_dir, sizeof d->run_dir, "%s", fx.dir);
  lt_task_settings(&fx.cfg, &d->task_base);
  cr_assert_eq(uv_loop_init(&d->loop), 0);
  cr_assert_not_null(d->zctx = zmq_ctx_new());
  char db[4200], ep[128], bound[256];
  snprintf(db, sizeof db, "%s/buffer.db", fx.dir);
  cr_assert_eq(lt_buffer_open(db, LT_BUF_CREATE, &d->buf), 0, "%s", lt_error_msg());
  cr_assert_eq(lt_writer_start(&d->loop, d->buf, &d->writer), 0, "%s", lt_error_msg());
  cr_assert_eq(lt_envs_create(&fx.cfg, NULL, &d->envs), 0, "%s", lt_error_msg());
  d->domain_index = calloc(1, sizeof *d->domain_index);
  d->domain_weight = calloc(1, sizeof *d->domain_weight);
  d->domain_weight[0] = 1;
  snprintf(ep, sizeof ep, "inproc://orchestrator-test-%d", (int)getpid());
  cr_assert_eq(lt_zsock_listen(&d->loop, d->zctx, ep, 1 << 20, NULL, "test", &d->z, bound, sizeof bound), 0, "%s",
               lt_error_msg());
  cr_assert_eq(lt_zsock_start(d->z, orch_test_on_recv, d), 0);
  /* Two workers: "fake-0" with 3 slots takes TASKS batches, "fake-1" with 2 slots one TASK at a time. */
  d->workers = calloc(NPEERS + 1, sizeof *d->workers);
  d->nworkers = d->capworkers = NPEERS;
  for (int i = 0; i < NPEERS; i++) {
    lt__worker_t *w = &d->workers[i];
    snprintf(w->name, sizeof w->name, "fake-%d", i);
    w->slots = 3 - i;
    w->batch = i == 0;
    w->alive = 1;
    w->policy_version = -1;
    w->lag_reported = -1;
    fx.peer[i] = zmq_socket(d->zctx, ZMQ_DEALER);
    zmq_setsockopt(fx.peer[i], ZMQ_ROUTING_ID, w->name, strlen(w->name));
    cr_assert_eq(zmq_connect(fx.peer[i], ep), 0);
    cr_assert_eq(zmq_send(fx.peer[i], "hi", 2, 0), 2);
  }
  SPIN_UNTIL(fx.seen[0] && fx.seen[1]);
}

static void on_writer_stopped(void *ud) { *(int *)ud = 1; }

static void teardown(void) {
  lt_daemon_t *d = fx.d;
  int stopped = 0;
  lt_writer_stop(d->writer, on_writer_stopped, &stopped);
  SPIN_UNTIL(stopped);
  lt_zsock_close(d->z, NULL, NULL);
  uv_run(&d->loop, UV_RUN_DEFAULT);
  cr_expect_eq(uv_loop_close(&d->loop), 0, "the loop still holds handles");
  for (int i = 0; i < NPEERS; i++) zmq_close(fx.peer[i]);
  zmq_ctx_term(d->zctx);
  lt__tasks_free(d);
  free(d->workers);
  free(d->domain_index);
  free(d->domain_weight);
  if (d->metrics) fclose(d->metrics);
  lt_envs_free(d->envs);
  lt_buffer_close(d->buf);
  free(d);
  lt_config_free(&fx.cfg);
  lt_test_rmdir(fx.dir);
}

TestSuite(orchestrator, .init = setup, .fini = teardown, .timeout = 60);

/* The next message fake worker i received, decoded; 0 when none came in 5 s. */
static int receive(int i, lt_msg_t *m) {
  lt_frame_t fr[LT_PROTO_MAX_FRAMES];
  zmq_msg_t part[LT_PROTO_MAX_FRAMES];
  int n = 0, more = 1, timeout = 5000;
  zmq_setsockopt(fx.peer[i], ZMQ_RCVTIMEO, &timeout, sizeof timeout);
  while (more && n < LT_PROTO_MAX_FRAMES) {
    zmq_msg_init(&part[n]);
    if (zmq_msg_recv(&part[n], fx.peer[i], 0) < 0) {
      zmq_msg_close(&part[n]);
      break;
    }
    fr[n] = (lt_frame_t){.data = zmq_msg_data(&part[n]), .len = zmq_msg_size(&part[n])};
    more = zmq_msg_more(&part[n++]);
  }
  int rc = n ? lt_proto_decode(fr, n, m) : -1;
  for (int k = 0; k < n; k++) zmq_msg_close(&part[k]);
  cr_assert(n == 0 || rc == 0, "worker %d: undecodable message: %s", i, lt_error_msg());
  return n > 0;
}

/* A task as the worker must get it: its id, its group, the run's seed for it, the domain and the version. */
static void expect_task(const lt_task_t *k, uint64_t id) {
  cr_expect_eq(k->task_id, id);
  cr_expect_eq(k->group_id, (id + 1) / 2, "task %llu: group %llu", (unsigned long long)id,
               (unsigned long long)k->group_id);
  cr_expect_eq(k->seed, (int64_t)(lt_rng_mix(11, id) % LT_PROTO_MAX_ID));
  cr_expect_str_eq(k->domain, "arith");
  cr_expect_eq(k->policy_version, 0);
  cr_expect_eq(k->attempt, 0);
  cr_expect(cJSON_IsObject(k->spec));
}

/* Open addressing with backward-shift deletion: every id stays findable whatever was removed around it, through
 * growth; the FIFO keeps its order, drops a removed task and skips one whose result is being stored. */
Test(orchestrator, the_task_table_finds_every_task_after_removals_and_the_queue_keeps_its_order) {
  lt_daemon_t *d = fx.d;
  enum { N = 5000 };
  for (int64_t id = 1; id <= N; id++) {
    lt__task_t *t = calloc(1, sizeof *t);
    t->id = id * 7919; /* spread, with collisions in a table of 1024 slots before it grows */
    t->worker = -1;
    cr_assert_eq(lt__task_put(d, t), 0);
  }
  cr_assert_eq(d->tcount, (size_t)N);
  cr_assert_geq(d->tcap, (size_t)(2 * N));
  for (int64_t id = 1; id <= N; id += 3) lt__task_remove(d, id * 7919);
  for (int64_t id = 1; id <= N; id++) {
    lt__task_t *t = lt__task_get(d, id * 7919);
    if ((id - 1) % 3 == 0) cr_assert_null(t, "task %lld was removed", (long long)id);
    else cr_assert(t && t->id == id * 7919, "task %lld lost after the removals", (long long)id);
  }
  cr_assert_null(lt__task_get(d, 1));
  /* The FIFO: 2, 3, 5, 6 at the back, 8 at the front; 3 removed; 5 being stored. */
  static const int64_t order[] = {2, 3, 5, 6};
  for (int i = 0; i < 4; i++) lt__queue_push(d, lt__task_get(d, order[i] * 7919), 0);
  lt__queue_push(d, lt__task_get(d, 8 * 7919), 1);
  lt__task_remove(d, 3 * 7919);
  lt__task_get(d, 5 * 7919)->storing = 1;
  static const int64_t popped[] = {8, 2, 6};
  for (int i = 0; i < 3; i++) {
    lt__task_t *t = lt__queue_pop(d);
    cr_assert(t && t->id == popped[i] * 7919, "pop %d: task %lld", i, t ? (long long)(t->id / 7919) : -1LL);
  }
  cr_assert_null(lt__queue_pop(d));
  cr_assert_eq(d->qhead, 0);
  cr_assert_eq(d->qtail, 0);
}

/* Dispatch: the scheduler makes max_tasks tasks in groups of two, and each pass gives every worker with a free
 * slot one task; a worker's tasks of one turn go as one TASKS when its HELLO said batch, else a TASK each; what
 * finds no slot waits at the queue's head; a freed slot takes it. */
Test(orchestrator, dispatch_fills_free_slots_round_robin_and_batches_per_worker) {
  lt_daemon_t *d = fx.d;
  d->dispatch_held = 1; /* as while a TRAJS is ingested: the six tasks are all queued when dispatch runs */
  lt__scheduler_refill(d);
  SPIN_UNTIL(lt_writer_backlog(d->writer) == 0);
  cr_expect_eq(d->tasks_created, 6);
  cr_expect_eq(d->qhead, 1);
  d->dispatch_held = 0;
  lt__scheduler_dispatch(d);
  cr_assert_eq(d->workers[0].inflight + d->workers[1].inflight, 5);
  lt_msg_t m;
  cr_assert(receive(0, &m));
  cr_assert_eq(m.type, LT_MSG_TASKS, "a batch worker gets one TASKS, not %s", lt_msg_type_name(m.type));
  cr_assert_eq(m.u.tasks.n, 3);
  for (int i = 0; i < 3; i++) expect_task(&m.u.tasks.tasks[i], (uint64_t)(1 + 2 * i));
  lt_msg_free(&m);
  for (int i = 0; i < 2; i++) {
    cr_assert(receive(1, &m));
    cr_assert_eq(m.type, LT_MSG_TASK);
    expect_task(&m.u.task, (uint64_t)(2 + 2 * i));
    lt_msg_free(&m);
  }
  for (int64_t id = 1; id <= 5; id++) {
    lt__task_t *t = lt__task_get(d, id);
    cr_assert(t && t->status == LT_TASK_DISPATCHED && t->worker == (int)(1 - id % 2), "task %lld", (long long)id);
  }
  cr_expect_eq(d->qhead, 6, "the sixth waits at the head");
  cr_expect_eq(lt__task_get(d, 6)->status, LT_TASK_QUEUED);
  /* Task 4's result came back: its slot takes task 6. */
  lt__task_free_slot(d, lt__task_get(d, 4));
  lt__scheduler_dispatch(d);
  cr_assert(receive(1, &m));
  cr_assert_eq(m.type, LT_MSG_TASK);
  expect_task(&m.u.task, 6);
  lt_msg_free(&m);
  cr_expect_eq(d->qhead, 0);
}

/* A worker that is gone (ROUTER_MANDATORY: the send fails at once) loses nothing: its task goes back to the
 * queue's front, still queued, its attempt not counted, for the next worker with a slot. */
Test(orchestrator, a_send_to_a_gone_worker_leaves_its_task_at_the_queue_head) {
  lt_daemon_t *d = fx.d;
  d->max_tasks = d->open_target = 2;
  lt__worker_t *ghost = &d->workers[2];
  snprintf(ghost->name, sizeof ghost->name, "ghost");
  memcpy(ghost->rid, "ghost", 5);
  ghost->rid_len = 5;
  ghost->slots = 1;
  ghost->alive = 1;
  d->workers[0].alive = d->workers[1].alive = 0;
  d->nworkers = 3;
  lt__scheduler_dispatch(d);
  SPIN_UNTIL(d->qhead != 0);
  cr_assert_eq(d->qhead, 1, "task 1 back at the head");
  lt__task_t *t = lt__task_get(d, 1);
  cr_assert(t->status == LT_TASK_QUEUED && t->attempts == 0 && t->worker == -1);
  cr_expect_eq(ghost->inflight, 0);
  ghost->alive = 0;
  d->workers[1].alive = 1;
  lt__scheduler_dispatch(d);
  lt_msg_t m;
  cr_assert(receive(1, &m));
  expect_task(&m.u.task, 1);
  lt_msg_free(&m);
}

/* metrics.jsonl under names a peer chose: weights/lag/<worker> for a worker named w"1\ (the registry takes any
 * name from a HELLO), and a value that is not finite.  Every line parses (printf wrote them unescaped, and nan). */
Test(orchestrator, metrics_jsonl_stays_json_whatever_a_worker_is_named) {
  lt_daemon_t *d = fx.d;
  char path[4200];
  snprintf(path, sizeof path, "%s/metrics.jsonl", fx.dir);
  cr_assert_not_null(d->metrics = fopen(path, "a"));
  snprintf(d->workers[0].name, sizeof d->workers[0].name, "w\"1\\");
  d->workers[0].policy_version = 0;
  d->version = 2;
  lt__weights_report(d);
  lt__metric(d, "reward/mean", NAN);
  fflush(d->metrics);
  lt_jsonl_t r;
  cr_assert_eq(lt_jsonl_open(&r, path), 0);
  cJSON *j;
  cr_assert_eq(lt_jsonl_next(&r, &j), 1, "%s", lt_error_msg());
  cr_expect_str_eq(cJSON_GetObjectItem(j, "name")->valuestring, "weights/lag/w\"1\\");
  cr_expect_eq(cJSON_GetObjectItem(j, "value")->valuedouble, 2);
  cJSON_Delete(j);
  cr_assert_eq(lt_jsonl_next(&r, &j), 1, "%s", lt_error_msg());
  cr_expect(cJSON_IsNull(cJSON_GetObjectItem(j, "value")), "NaN is null");
  cJSON_Delete(j);
  cr_expect_eq(lt_jsonl_next(&r, &j), 0);
  lt_jsonl_close(&r);
}
