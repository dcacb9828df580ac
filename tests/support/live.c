/* Live-run helpers (tests/support/live.h): a run's stats while it runs, and hand-made peers on a ZeroMQ socket. */
#include "tests/support/live.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "tests/support/harness.h"

#include "util/error.h"
#include "util/time.h"

void lt_test_fault_config(const char *path, int port, int spawn, int tasks, const char *extra) {
  char js[4096];
  snprintf(
      js, sizeof js,
      "{\"run\": {\"seed\": 3}, \"model\": {\"init\": \"%s/configs/models/tiny-moe.json\"},"
      " \"envs\": {\"arith\": {\"type\": \"arith\", \"params\": {\"digits_min\": 1, \"digits_max\": 2, \"ops\": [\"+\"]}}},"
      " \"learner\": {\"batch\": {\"trajectories\": 16}, \"threads\": 1, \"actor_minibatches\": 1, \"critic_minibatches\": 1},"
      " \"scheduler\": {\"group_size\": 4, \"max_tasks\": %d, \"dynamic_filter\": false, \"task_timeout_s\": 20},"
      " \"workers\": {\"spawn_local\": %d, \"slots\": 4, \"backend\": \"scripted\", \"daemon_gone_s\": 20,"
      "   \"scripted\": {\"mean_tokens\": 16, \"token_us\": 3000}},"
      " \"transport\": {\"endpoint\": \"tcp://127.0.0.1:%d\", \"heartbeat_ms\": 200, \"liveness\": 5},"
      " \"checkpoint\": {\"every\": 1}%s%s%s}",
      lt_test_root(), tasks, spawn, port, strstr(extra, "\"monitor\"") ? "" : ", \"monitor\": {\"progress\": \"off\"}",
      extra[0] ? ", " : "", extra);
  cr_assert_eq(lt_test_write(path, js), 0);
}

/* Under one lock: `npm ci` empties node_modules before it fills it, and the scripts' "installed already" check can
 * pass while another test's install is half done (a fresh clone's first run failed that way). */
void lt_test_need_npm(const char *script, const char *what) {
  lt_run_t r;
  cr_assert_eq(lt_test_sh(&r, 960, "flock %s/.npm-install.lock %s/scripts/%s", lt_test_root(), lt_test_root(), script),
               0);
  int have = r.status == 0;
  lt_run_free(&r);
  /* CI reaches the npm registry: there a missing package is a failure, not a skip. */
  if (!have && getenv("CI")) cr_assert_fail("scripts/%s could not install %s", script, what);
  if (!have) cr_skip_test("%s cannot be installed or run here (scripts/%s)", what, script);
}

void lt_test_need_openai_sdk(void) { lt_test_need_npm("test-agents.sh", "the openai npm SDK"); }

cJSON *lt_test_stats(const char *dir) {
  lt_run_t r;
  const char *argv[] = {"longtail", "stats", dir, "--json", NULL};
  cr_assert_eq(lt_test_run(&r, NULL, 30, argv), 0);
  cJSON *j = r.status == 0 ? cJSON_Parse(r.out) : NULL;
  lt_run_free(&r);
  return j;
}

double lt_test_at(const cJSON *j, const char *a, const char *b) {
  const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, a);
  if (b) x = cJSON_GetObjectItemCaseSensitive(x, b);
  cr_assert(cJSON_IsNumber(x), "stats has no %s%s%s", a, b ? "." : "", b ? b : "");
  return x->valuedouble;
}

double lt_test_poll_stat(const char *rd, const char *a, const char *b, double want, double timeout_s) {
  double v = -1;
  for (int i = 0; i < timeout_s * 10; i++) {
    cJSON *s = lt_test_stats(rd);
    if (s) {
      const cJSON *x = cJSON_GetObjectItemCaseSensitive(s, a);
      if (b) x = cJSON_GetObjectItemCaseSensitive(x, b);
      v = cJSON_IsNumber(x) ? x->valuedouble : -1;
      cJSON_Delete(s);
      if (v >= want) return v;
    }
    usleep(100000);
  }
  return v;
}

void *lt_test_peer_hello(void *ctx, const char *ep, const char *name, lt_msg_t *task) {
  void *s = zmq_socket(ctx, ZMQ_DEALER);
  int linger = 0, to = 500;
  zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
  zmq_setsockopt(s, ZMQ_RCVTIMEO, &to, sizeof to);
  cr_assert_eq(zmq_connect(s, ep), 0);
  lt_msg_t hello = {.type = LT_MSG_HELLO,
                    .id = 1,
                    .u.hello = {.name = (char *)name,
                                .slots = 1,
                                .backend = "scripted",
                                .device = "cpu",
                                .host = "test",
                                .pid = 1,
                                .policy_version = -1}};
  int got = 0;
  for (int i = 0; i < 60 && !got; i++) {
    lt_test_peer_send(s, &hello);
    got = lt_test_peer_recv(s, LT_MSG_TASK, task, 1.0);
  }
  cr_assert(got, "no TASK for the fake worker %s", name);
  return s;
}

void lt_test_peer_send(void *s, lt_msg_t *m) {
  lt_frames_t fr;
  cr_assert_eq(lt_proto_encode(m, &fr), 0, "%s", lt_error_msg());
  for (int i = 0; i < fr.n; i++) zmq_send(s, fr.f[i].data, fr.f[i].len, i + 1 < fr.n ? ZMQ_SNDMORE : 0);
  lt_frames_free(&fr);
}

int lt_test_recv(void *s, char *rid, size_t *rlen, lt_msg_t *out) {
  zmq_msg_t parts[LT_PROTO_MAX_FRAMES + 1];
  lt_frame_t fr[LT_PROTO_MAX_FRAMES + 1];
  int n = 0, more = 1, first = rid != NULL, got = 0;
  while (more && n < LT_PROTO_MAX_FRAMES + first) {
    zmq_msg_init(&parts[n]);
    if (zmq_msg_recv(&parts[n], s, 0) < 0) {
      zmq_msg_close(&parts[n]);
      break;
    }
    fr[n] = (lt_frame_t){zmq_msg_data(&parts[n]), zmq_msg_size(&parts[n]), 0};
    more = zmq_msg_more(&parts[n]);
    n++;
  }
  if (n > first && !more) {
    if (rid) {
      *rlen = fr[0].len < 256 ? fr[0].len : 256;
      memcpy(rid, fr[0].data, *rlen);
    }
    got = lt_proto_decode(fr + first, n - first, out) == 0 ? 1 : -1;
  }
  for (int i = 0; i < n; i++) zmq_msg_close(&parts[i]);
  return got;
}

int lt_test_peer_recv(void *s, lt_msg_type type, lt_msg_t *out, double timeout_s) {
  double t0 = lt_time_mono_s();
  while (lt_time_mono_s() - t0 < timeout_s) {
    int got = lt_test_recv(s, NULL, NULL, out) > 0;
    if (got && out->type == type) return 1;
    if (got) lt_msg_free(out);
  }
  return 0;
}

long long lt_test_sql1(const char *db, const char *sql) {
  lt_run_t r;
  cr_assert_eq(lt_test_sh(&r, 30, "sqlite3 -cmd '.timeout 5000' %s \"%s\"", db, sql), 0);
  long long v = r.status == 0 && r.out[0] ? atoll(r.out) : -1;
  lt_run_free(&r);
  return v;
}
