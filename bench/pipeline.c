/* Benchmark: the rollout pipeline next to its raw baselines.
 *
 * 1. Dispatch round trips per second through the daemon (TASK out, TRAJ in,
 *    SQLite commit, ACK) with two scripted workers that answer at once and no
 *    learner, next to a raw ZeroMQ ROUTER/DEALER exchange of the same frames
 *    (TASK → TRAJ → ACK) with the same number of tasks in flight.  The daemon's
 *    rate is the slope between two run lengths, so start-up and shutdown cancel.
 *    Beside them, raw sqlite3 inserts of that TRAJ's bytes, as many as the
 *    longer run stores, in the writer's largest transactions: what a durable
 *    commit per trajectory alone allows on this disk.
 *    CPU: each of the three also reports the machine's busy CPU time per
 *    round trip (or row).  A pipeline that does at least the echo's messaging
 *    and one such insert per round trip cannot run faster than
 *    cores / (echo CPU + insert CPU): `dispatch_ceiling_vs_raw_zmq` is that
 *    rate next to the echo's, before any decoding, rollout, reward or spool.
 * 2. Buffer ingest: lt_buffer_traj_insert of trajectories in transactions of
 *    64, next to raw sqlite3 inserts of the same bytes (one row, one blob) with
 *    the same journal settings and transaction size.
 *
 * REPS repetitions, each measuring every rate next to its baseline; medians
 * and the spread of the ratios are reported.  Prints a table on stderr and
 * one JSON object on the last stdout line.
 *
 * `pipeline --console MS`: the daemon also serves its console (monitor.ui_port) and a client polls it every MS
 * ms as an open page does (/api/overview and /api/metrics), to compare the numbers with and without
 * (docs/benchmarks.md, "The console on a live run"). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sqlite3.h>
#include <sys/socket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "bench/bench.h"
#include "buffer/buffer.h"
#include "orchestrator/daemon.h"
#include "proto/proto.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/time.h"

#define WORKERS 2
#define SLOTS 32
#define TOKENS 96 /* generated tokens per scripted turn */
#define INGEST_N 4000
#define INGEST_TX 64
#define WRITER_TX 4096 /* orchestrator/writer.c: most operations in one transaction */
#define SMALL_TX 16    /* about what the writer commits at once in this run (fdatasync calls per trajectory) */
#define INGEST_TOKENS 400
#define REPS 3

/* ---- 1a. through the daemon ---- */

static int console_ms; /* --console: poll the daemon's console every console_ms (0: no console) */

typedef struct {
  int port;
  volatile int stop;
  long answers; /* requests answered 200 */
} poller_t;

/* One GET to 127.0.0.1:port, read to the end; 1 when it answered 200. */
static int get(int port, const char *path) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {
      .sin_family = AF_INET, .sin_port = htons((uint16_t)port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  char buf[65536];
  int ok = 0;
  if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0) {
    int n = snprintf(buf, sizeof buf, "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", path);
    if (write(fd, buf, (size_t)n) == n) {
      int first = 1;
      for (ssize_t got; (got = read(fd, buf, sizeof buf)) > 0; first = 0)
        if (first) ok = got >= 12 && !strncmp(buf, "HTTP/1.1 200", 12);
    }
  }
  if (fd >= 0) close(fd);
  return ok;
}

/* What an open overview and curves page asks every 2 s, from the moment the console answers. */
static void *poll_console(void *p) {
  poller_t *c = p;
  while (!c->stop) {
    int got = get(c->port, "/api/overview");
    got += get(c->port, "/api/metrics");
    got += get(c->port, "/api/metrics?name=dispatch/overhead_p50_ms&name=throughput/trajectories_per_s");
    c->answers += got;
    for (int i = 0; i < (got ? console_ms / 10 : 1) && !c->stop; i++) usleep(10000); /* not up yet: soon again */
  }
  return NULL;
}

static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t l = sizeof a;
  if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(fd, (struct sockaddr *)&a, &l) == 0)
    port = ntohs(a.sin_port);
  if (fd >= 0) close(fd);
  return port;
}

/* Wall seconds of a run of `tasks` tasks; *cpu: the machine's busy CPU seconds meanwhile; *dcpu: the daemon's
 * own (all its threads, not its workers). */
static double run_daemon(const char *bin, const char *dir, int tasks, double *cpu, double *dcpu) {
  char cfg[4200], rd[4200], js[2048];
  poller_t poll = {.port = console_ms ? free_port() : 0};
  snprintf(cfg, sizeof cfg, "%s/cfg-%d.json", dir, tasks);
  snprintf(rd, sizeof rd, "%s/run-%d", dir, tasks);
  lt_fs_remove_tree(rd); /* an earlier repetition's */
  snprintf(js, sizeof js,
           "{\"model\": {\"init\": \"configs/models/tiny-moe.json\"},"
           " \"envs\": {\"arith\": {\"type\": \"arith\"}},"
           " \"learner\": {\"enabled\": false},"
           " \"scheduler\": {\"group_size\": 4, \"max_tasks\": %d, \"dynamic_filter\": false},"
           " \"rollout\": {\"max_new_tokens\": %d, \"max_turns\": 1},"
           " \"workers\": {\"spawn_local\": %d, \"slots\": %d, \"backend\": \"scripted\","
           "   \"scripted\": {\"mean_tokens\": %d, \"tail_fraction\": 0, \"token_us\": 0}},"
           " \"transport\": {\"endpoint\": \"tcp://127.0.0.1:*\"},"
           " \"eval\": {\"every\": 0}, \"checkpoint\": {\"every\": 0},"
           " \"monitor\": {\"progress\": \"off\", \"plot\": false, \"ui_port\": %d}}",
           tasks, TOKENS, WORKERS, SLOTS, TOKENS, poll.port);
  if (lt_fs_write_atomic(cfg, js, strlen(js)) < 0) return -1;
  char *argv[] = {(char *)bin, "train", cfg, "--run-dir", rd, "--log-level", "warn", NULL};
  pthread_t th;
  if (console_ms && pthread_create(&th, NULL, poll_console, &poll) != 0) return -1;
  double c0 = bench_cpu_busy_s(), wall = bench_run_cpu(argv, "/dev/null", dcpu);
  *cpu = bench_cpu_busy_s() - c0;
  if (console_ms) {
    poll.stop = 1;
    pthread_join(th, NULL);
    fprintf(stderr, "  console: %ld answers in %.1f s\n", poll.answers, wall);
  }
  return wall;
}

/* ---- 1b. raw ZeroMQ with the same frames ---- */

typedef struct {
  void *ctx;
  const char *endpoint;
  const lt_frames_t *traj;
  size_t ack_len; /* an ACK's total size, to tell it from a TASK */
  volatile int stop;
} dealer_arg_t;

static void send_frames(void *s, const lt_frames_t *f) {
  for (int i = 0; i < f->n; i++) zmq_send(s, f->f[i].data, f->f[i].len, i + 1 < f->n ? ZMQ_SNDMORE : 0);
}

/* Drains one multipart message; returns its total size (0 on timeout). */
static size_t recv_msg(void *s) {
  size_t n = 0;
  int more = 1;
  while (more) {
    zmq_msg_t m;
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, s, 0) < 0) {
      zmq_msg_close(&m);
      return n;
    }
    n += zmq_msg_size(&m);
    more = zmq_msg_more(&m);
    zmq_msg_close(&m);
  }
  return n;
}

static size_t frames_len(const lt_frames_t *f) {
  size_t n = 0;
  for (int i = 0; i < f->n; i++) n += f->f[i].len;
  return n;
}

/* A worker: every TASK is answered with a TRAJ; ACKs are read and dropped. */
static void *dealer(void *p) {
  dealer_arg_t *a = p;
  void *s = zmq_socket(a->ctx, ZMQ_DEALER);
  int to = 200, zero = 0;
  zmq_setsockopt(s, ZMQ_RCVTIMEO, &to, sizeof to);
  zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
  zmq_connect(s, a->endpoint);
  zmq_send(s, "HELLO", 5, 0);
  while (!a->stop) {
    size_t n = recv_msg(s);
    if (n && n != a->ack_len) send_frames(s, a->traj); /* a TASK */
  }
  zmq_close(s);
  return NULL;
}

/* Round trips/s; *cpu_rt: the machine's busy CPU seconds per round trip. */
static double raw_zmq(const lt_frames_t *task, const lt_frames_t *traj, const lt_frames_t *ack, double secs,
                      double *cpu_rt) {
  void *ctx = zmq_ctx_new();
  void *r = zmq_socket(ctx, ZMQ_ROUTER);
  zmq_bind(r, "tcp://127.0.0.1:*");
  char ep[256];
  size_t len = sizeof ep;
  zmq_getsockopt(r, ZMQ_LAST_ENDPOINT, ep, &len);
  dealer_arg_t a = {.ctx = ctx, .endpoint = ep, .traj = traj, .ack_len = frames_len(ack)};
  pthread_t th[WORKERS];
  for (int i = 0; i < WORKERS; i++) pthread_create(&th[i], NULL, dealer, &a);
  int to = 200;
  zmq_setsockopt(r, ZMQ_RCVTIMEO, &to, sizeof to);
  long done = 0;
  double t0 = 0;
  int hellos = 0;
  while (hellos < WORKERS) { /* each worker says hello; it gets SLOTS tasks */
    char rid[256];
    int rl = zmq_recv(r, rid, sizeof rid, 0);
    if (rl <= 0) continue;
    recv_msg(r);
    hellos++;
    for (int k = 0; k < SLOTS; k++) {
      zmq_send(r, rid, (size_t)rl, ZMQ_SNDMORE);
      send_frames(r, task);
    }
  }
  t0 = lt_time_mono_s();
  double c0 = bench_cpu_busy_s();
  while (lt_time_mono_s() - t0 < secs) {
    char rid[256];
    int rl = zmq_recv(r, rid, sizeof rid, 0);
    if (rl <= 0) continue;
    recv_msg(r); /* the TRAJ */
    zmq_send(r, rid, (size_t)rl, ZMQ_SNDMORE);
    send_frames(r, ack);
    zmq_send(r, rid, (size_t)rl, ZMQ_SNDMORE);
    send_frames(r, task);
    done++;
  }
  double rate = done / (lt_time_mono_s() - t0);
  *cpu_rt = (bench_cpu_busy_s() - c0) / (double)done;
  a.stop = 1;
  for (int i = 0; i < WORKERS; i++) pthread_join(th[i], NULL);
  int zero = 0;
  zmq_setsockopt(r, ZMQ_LINGER, &zero, sizeof zero);
  zmq_close(r);
  zmq_ctx_term(ctx);
  return rate;
}

/* ---- 2. buffer ingest next to raw sqlite3 ---- */

static void fill_traj(lt_traj_t *t, int ntok, int layers, int k) {
  memset(t, 0, sizeof *t);
  t->domain = "arith";
  t->status = LT_TRAJ_OK;
  t->finish = LT_FINISH_TERMINATED;
  t->reason = "stop";
  t->error = "";
  t->has_reward = 1;
  t->reward = 1;
  t->components = cJSON_Parse("{\"correct\": 1}");
  t->messages = cJSON_Parse(
      "[{\"role\": \"user\", \"content\": \"What is 123 + 456? Show your steps.\"},"
      " {\"role\": \"assistant\", \"content\": \"3+6=9 2+5=7 1+4=5 #### 579\"}]");
  t->turns = 1;
  t->ntokens = ntok;
  t->tokens = calloc((size_t)ntok, 4);
  t->logprobs = calloc((size_t)ntok, 4);
  t->loss_mask = calloc((size_t)ntok, 1);
  t->versions = calloc((size_t)ntok, 4);
  t->support = calloc((size_t)ntok, 4);
  t->routing_layers = layers;
  t->routing_k = k;
  t->routing_experts = 8;
  t->routing_ids = calloc((size_t)ntok * (size_t)(layers * k), 2);
  t->routing_probs = calloc((size_t)ntok * (size_t)(layers * k), 4);
  for (int i = 0; i < ntok; i++) {
    t->tokens[i] = (i * 7919) % 250;
    t->logprobs[i] = -0.01f * (float)(i % 17);
    t->loss_mask[i] = i > 30;
    t->versions[i] = i > 30 ? 3 : -1;
  }
}

static size_t traj_bytes(const lt_traj_t *t) {
  size_t T = (size_t)t->ntokens, R = T * (size_t)(t->routing_layers * t->routing_k);
  char *m = cJSON_PrintUnformatted(t->messages), *c = cJSON_PrintUnformatted(t->components);
  size_t n = T * (4 + 4 + 1 + 4 + 4) + R * (2 + 4) + strlen(m) + strlen(c);
  free(m), free(c);
  return n;
}

static double ingest_longtail(const char *dir, const lt_traj_t *proto, int rep) {
  char path[4200];
  snprintf(path, sizeof path, "%s/ingest-%d.db", dir, rep);
  lt_buffer_t *b;
  if (lt_buffer_open(path, LT_BUF_CREATE, &b) < 0) return -1;
  lt_traj_t t = *proto;
  lt_traj_meta_t m = {.worker = "w0", .version_min = 3, .version_max = 3, .eval_round = -1, .status = LT_SAMPLE_READY};
  double t0 = lt_time_mono_s();
  for (int i = 0; i < INGEST_N;) {
    if (lt_buffer_begin(b) < 0) return -1;
    for (int j = 0; j < INGEST_TX && i < INGEST_N; j++, i++) {
      int dup;
      t.task_id = (uint64_t)i + 1;
      t.group_id = (uint64_t)i / 8 + 1;
      m.time_ms = i;
      /* What the daemon's writer does per trajectory: insert the wire record (its JSON printed there). */
      if (lt_buffer_traj_insert(b, &t, &m, &dup) < 0) return -1;
    }
    if (lt_buffer_commit(b) < 0) return -1;
  }
  double dt = lt_time_mono_s() - t0;
  lt_buffer_close(b);
  return INGEST_N / dt;
}

/* Rows/s; *cpu_row (unless NULL): the machine's busy CPU seconds per row. */
static double ingest_raw(const char *dir, size_t bytes, int rep, int n, int tx, double *cpu_row) {
  char path[4200];
  snprintf(path, sizeof path, "%s/raw-%zu-%d-%d.db", dir, bytes, rep, tx);
  sqlite3 *db;
  if (sqlite3_open(path, &db) != SQLITE_OK) return -1;
  sqlite3_exec(db,
               "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;"
               "CREATE TABLE t (task_id INTEGER PRIMARY KEY, payload BLOB)",
               NULL, NULL, NULL);
  sqlite3_stmt *s;
  sqlite3_prepare_v2(db, "INSERT INTO t (task_id, payload) VALUES (?, ?)", -1, &s, NULL);
  char *blob = calloc(1, bytes);
  double t0 = lt_time_mono_s(), c0 = bench_cpu_busy_s();
  for (int i = 0; i < n;) {
    sqlite3_exec(db, "BEGIN", NULL, NULL, NULL);
    for (int j = 0; j < tx && i < n; j++, i++) {
      sqlite3_bind_int64(s, 1, i + 1);
      sqlite3_bind_blob(s, 2, blob, (int)bytes, SQLITE_STATIC);
      if (sqlite3_step(s) != SQLITE_DONE) return -1;
      sqlite3_reset(s);
    }
    sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
  }
  double dt = lt_time_mono_s() - t0;
  if (cpu_row) *cpu_row = (bench_cpu_busy_s() - c0) / n;
  sqlite3_finalize(s);
  sqlite3_close(db);
  free(blob);
  return n / dt;
}

int main(int argc, char **argv) {
  const char *bin = getenv("LT_BIN") ? getenv("LT_BIN") : "bin/longtail";
  if (argc == 3 && !strcmp(argv[1], "--console") && atoi(argv[2]) > 0) console_ms = atoi(argv[2]);
  else if (argc != 1) {
    fprintf(stderr, "usage: pipeline [--console MS]\n");
    return 2;
  }
  char dir[] = "/tmp/longtail-bench-pipeline-XXXXXX";
  if (!mkdtemp(dir)) return 1;
  /* The frames the daemon exchanges: a TASK as dispatched, a TRAJ of the same length, an ACK. */
  lt_traj_t tr;
  fill_traj(&tr, 20 + TOKENS, 0, 0);
  tr.task_id = 1;
  lt_msg_t mt = {.type = LT_MSG_TASK,
                 .u.task = {.task_id = 1,
                            .group_id = 1,
                            .prompt_id = 1,
                            .domain = "arith",
                            .env = "arith",
                            .session = "",
                            .policy_version = 3,
                            .seed = 7,
                            .temperature = 1,
                            .top_p = 1,
                            .max_new_tokens = TOKENS,
                            .max_turns = 1,
                            .max_context = 1024,
                            .spec = cJSON_Parse("{\"a\": 123, \"b\": 456, \"op\": \"+\", \"answer\": 579}")}};
  lt_msg_t mj = {.type = LT_MSG_TRAJ, .u.traj = tr};
  uint64_t ids[1] = {1};
  uint8_t dups[1] = {0};
  lt_msg_t ma = {.type = LT_MSG_ACK, .u.ack = {.task_ids = ids, .duplicate = dups, .n = 1}};
  lt_frames_t ft, fj, fa;
  if (lt_proto_encode(&mt, &ft) < 0 || lt_proto_encode(&mj, &fj) < 0 || lt_proto_encode(&ma, &fa) < 0) {
    fprintf(stderr, "bench pipeline: encode: %s\n", lt_error_msg());
    return 1;
  }
  if (frames_len(&ft) == frames_len(&fa)) return 1; /* the echo tells them apart by size */
  lt_traj_t it;
  fill_traj(&it, INGEST_TOKENS, 4, 2);
  /* Each repetition measures every rate and its baseline back to back; ratios are per repetition. */
  const double cores = (double)sysconf(_SC_NPROCESSORS_ONLN);
  double dr[REPS], zr[REPS], dz[REPS], cb[REPS], ir[REPS], rr[REPS], ii[REPS];
  double dc[REPS], zc[REPS], sc[REPS], ce[REPS]; /* CPU µs per round trip or row; the ceiling */
  double dd[REPS];                               /* the daemon's own CPU µs per trajectory */
  double sf[REPS];                               /* raw insert CPU µs per row in SMALL_TX transactions */
  for (int r = 0; r < REPS; r++) {
    int n1 = 2000, n2 = 12000; /* the daemon's rate is the slope between two run lengths */
    double c1, c2, d1, d2, t1 = run_daemon(bin, dir, n1, &c1, &d1), t2 = run_daemon(bin, dir, n2, &c2, &d2);
    if (t1 < 0 || t2 < 0) {
      fprintf(stderr, "bench pipeline: the daemon run failed (is %s built?)\n", bin);
      return 1;
    }
    dr[r] = (n2 - n1) / (t2 - t1);
    dc[r] = 1e6 * (c2 - c1) / (n2 - n1);
    dd[r] = 1e6 * (d2 - d1) / (n2 - n1);
    zr[r] = raw_zmq(&ft, &fj, &fa, 3.0, &zc[r]);
    zc[r] *= 1e6;
    dz[r] = dr[r] / zr[r];
    /* What the durable commit alone allows: raw sqlite3 inserts of this TRAJ's
     * bytes in the daemon writer's largest transactions (the most favourable). */
    cb[r] = ingest_raw(dir, traj_bytes(&tr), r, 12000, WRITER_TX, &sc[r]); /* as many as the longer daemon run */
    sc[r] *= 1e6;
    /* The same inserts in transactions of the size the writer really commits: the least CPU a durable
     * store of one row per trajectory costs here, before any task row, index, decode or message. */
    ingest_raw(dir, traj_bytes(&tr), r + REPS, 12000, SMALL_TX, &sf[r]);
    sf[r] *= 1e6;
    ce[r] = cores * 1e6 / (zc[r] + sc[r]) / zr[r];
    ir[r] = ingest_longtail(dir, &it, r);
    rr[r] = ingest_raw(dir, traj_bytes(&it), r, INGEST_N, INGEST_TX, NULL);
    ii[r] = ir[r] / rr[r];
    fprintf(
        stderr,
        "rep %d: dispatch %.0f/s (%.1f CPU us each, daemon %.1f), raw zmq %.0f/s (%.1f us; %.3fx); raw commit %.0f/s (%.1f us; "
        "ceiling %.2fx; %.1f us in tx of %d); ingest %.0f/s vs raw %.0f/s (%.2fx)\n",
        r, dr[r], dc[r], dd[r], zr[r], zc[r], dz[r], cb[r], sc[r], ce[r], sf[r], SMALL_TX, ir[r], rr[r], ii[r]);
  }
  lt_fs_remove_tree(dir);
  double dzl, dzh, iil, iih;
  double d = bench_median(dr, REPS, NULL, NULL), z = bench_median(zr, REPS, NULL, NULL);
  double ratio = bench_median(dz, REPS, &dzl, &dzh), commit = bench_median(cb, REPS, NULL, NULL);
  double ing = bench_median(ir, REPS, NULL, NULL), raw = bench_median(rr, REPS, NULL, NULL);
  double iratio = bench_median(ii, REPS, &iil, &iih);
  double cel, ceh, ceil_ = bench_median(ce, REPS, &cel, &ceh);
  double dcpu = bench_median(dc, REPS, NULL, NULL), zcpu = bench_median(zc, REPS, NULL, NULL);
  double scpu = bench_median(sc, REPS, NULL, NULL), dself = bench_median(dd, REPS, NULL, NULL);
  double small = bench_median(sf, REPS, NULL, NULL);
  fprintf(stderr, "dispatch round trips/s: daemon %.0f, raw zmq %.0f (%.3fx, range %.3f-%.3f)\n", d, z, ratio, dzl,
          dzh);
  fprintf(stderr, "raw sqlite3 inserts of the dispatched trajectory's bytes (%zu): %.0f/s (%.2fx raw zmq)\n",
          traj_bytes(&tr), commit, commit / z);
  fprintf(stderr,
          "daemon CPU per trajectory (its threads only): %.1f us; a raw durable insert of its bytes in "
          "transactions of %d: %.1f us\n",
          dself, SMALL_TX, small);
  fprintf(stderr,
          "CPU per round trip on %.0f cores: daemon %.1f us, raw zmq %.1f us, raw insert %.1f us; ceiling for "
          "messaging + one insert: %.2fx raw zmq (range %.2f-%.2f)\n",
          cores, dcpu, zcpu, scpu, ceil_, cel, ceh);
  fprintf(stderr, "ingest trajectories/s (%d tokens): buffer %.0f, raw sqlite3 %.0f (%.2fx, range %.2f-%.2f)\n",
          INGEST_TOKENS, ing, raw, iratio, iil, iih);
  printf(
      "{\"dispatch_roundtrips_per_s\": %.4g, \"zmq_raw_roundtrips_per_s\": %.4g, \"dispatch_vs_raw_zmq\": %.4g, "
      "\"dispatch_vs_raw_zmq_min\": %.4g, \"dispatch_vs_raw_zmq_max\": %.4g, \"ingest_trajectories_per_s\": %.4g, "
      "\"raw_sqlite_inserts_per_s\": %.4g, \"sqlite_ingest_ratio\": %.4g, \"sqlite_ingest_ratio_min\": %.4g, "
      "\"sqlite_ingest_ratio_max\": %.4g, \"pipeline_inflight\": %d, \"raw_sqlite_commit_bound_per_s\": %.4g, "
      "\"dispatch_cpu_us_per_roundtrip\": %.4g, \"zmq_raw_cpu_us_per_roundtrip\": %.4g, "
      "\"raw_sqlite_commit_cpu_us_per_row\": %.4g, \"dispatch_ceiling_vs_raw_zmq\": %.4g, "
      "\"dispatch_ceiling_vs_raw_zmq_min\": %.4g, \"dispatch_ceiling_vs_raw_zmq_max\": %.4g, \"daemon_cpu_us_per_traj\": %.4g, "
      "\"raw_sqlite_commit_cpu_us_per_row_tx16\": %.4g}\n",
      d, z, ratio, dzl, dzh, ing, raw, iratio, iil, iih, WORKERS * SLOTS, commit, dcpu, zcpu, scpu, ceil_, cel, ceh,
      dself, small);
  return 0;
}
