/* The wire codec: every message round-trips, malformed frames and headers are refused by name, TRAJ and
 * TRAJS checks, and the fuzz seed corpus. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/proto.h"
#include "util/error.h"
#include "util/buf.h"

/* Encodes, then decodes from copies of the frames (as a socket would deliver). */
static int roundtrip(const lt_msg_t *in, lt_msg_t *out) {
  lt_frames_t fr;
  int rc = lt_proto_encode(in, &fr);
  cr_assert_eq(rc, 0, "encode: %s", lt_error_msg());
  lt_frame_t copy[LT_PROTO_MAX_FRAMES];
  for (int i = 0; i < fr.n; i++) {
    copy[i].len = fr.f[i].len;
    copy[i].data = malloc(fr.f[i].len + 1);
    memcpy(copy[i].data, fr.f[i].data, fr.f[i].len);
    copy[i].owned = 1;
  }
  int n = fr.n;
  lt_frames_free(&fr);
  rc = lt_proto_decode(copy, n, out);
  for (int i = 0; i < n; i++) free(copy[i].data);
  return rc;
}

/* Decodes a header-only message given as JSON text. */
static int decode_json(const char *json, lt_msg_t *out) {
  lt_frame_t f = {(void *)json, strlen(json), 0};
  return lt_proto_decode(&f, 1, out);
}

Test(proto, hello_roundtrip) {
  uint64_t pending[] = {5, 9, LT_PROTO_MAX_ID};
  lt_msg_t m = {.type = LT_MSG_HELLO, .id = 1};
  m.u.hello = (lt_hello_t){.name = "w1",
                           .slots = 4,
                           .backend = "builtin",
                           .device = "cpu",
                           .host = "h",
                           .pid = 77,
                           .policy_version = 3,
                           .pending = pending,
                           .npending = 3};
  lt_msg_t d;
  cr_assert_eq(roundtrip(&m, &d), 0, "%s", lt_error_msg());
  cr_assert_eq(d.type, LT_MSG_HELLO);
  cr_assert_str_eq(d.u.hello.name, "w1");
  cr_assert_eq(d.u.hello.slots, 4);
  cr_assert_eq(d.u.hello.pid, 77);
  cr_assert_eq(d.u.hello.policy_version, 3);
  cr_assert_eq(d.u.hello.npending, 3);
  cr_assert_eq(d.u.hello.pending[2], LT_PROTO_MAX_ID);
  lt_msg_free(&d);
}

Test(proto, welcome_roundtrip) {
  cJSON *settings = cJSON_Parse("{\"rollout\": {\"max_turns\": 4}}");
  lt_msg_t m = {.type = LT_MSG_WELCOME, .id = 2};
  m.u.welcome = (lt_welcome_t){.worker_id = "w-1",
                               .run = "r",
                               .heartbeat_ms = 500,
                               .liveness = 3,
                               .policy_version = 0,
                               .weights_location = "/x",
                               .settings = settings};
  memset(m.u.welcome.sha256, 'a', 64);
  m.u.welcome.sha256[64] = 0;
  lt_msg_t d;
  cr_assert_eq(roundtrip(&m, &d), 0, "%s", lt_error_msg());
  cr_assert_str_eq(d.u.welcome.worker_id, "w-1");
  cr_assert_eq(d.u.welcome.heartbeat_ms, 500);
  cr_assert_str_eq(d.u.welcome.sha256, m.u.welcome.sha256);
  cr_assert(cJSON_Compare(d.u.welcome.settings, settings, 1));
  cJSON_Delete(settings);
  lt_msg_free(&d);
}

Test(proto, task_roundtrip) {
  cJSON *spec = cJSON_Parse("{\"problem\": \"1+2\", \"answer\": \"3\"}");
  lt_msg_t m = {.type = LT_MSG_TASK, .id = 3};
  m.u.task = (lt_task_t){.task_id = 42,
                         .group_id = 7,
                         .prompt_id = 11,
                         .domain = "arith",
                         .env = "arith",
                         .session = "s",
                         .policy_version = 5,
                         .attempt = 1,
                         .seed = -12345,
                         .temperature = 0.7,
                         .top_p = 0.95,
                         .top_k = 20,
                         .max_new_tokens = 128,
                         .max_turns = 3,
                         .max_context = 1024,
                         .eval = 1,
                         .spec = spec};
  lt_msg_t d;
  cr_assert_eq(roundtrip(&m, &d), 0, "%s", lt_error_msg());
  lt_task_t *t = &d.u.task;
  cr_assert_eq(t->task_id, 42);
  cr_assert_eq(t->group_id, 7);
  cr_assert_eq(t->seed, -12345);
  cr_assert_float_eq(t->temperature, 0.7, 1e-12);
  cr_assert_eq(t->top_k, 20);
  cr_assert_eq(t->eval, 1);
  cr_assert_str_eq(t->env, "arith");
  cr_assert(cJSON_Compare(t->spec, spec, 1));
  cJSON_Delete(spec);
  lt_msg_free(&d);
}

/* A valid TRAJ with routing, owned by the caller's stack arrays. */
typedef struct {
  int32_t tokens[6], versions[6], support[6], support_ids[30];
  float logprobs[6];
  uint8_t mask[6];
  uint16_t rids[6 * 2 * 2];
  float rprobs[6 * 2 * 2];
  cJSON *components, *messages;
  lt_msg_t m;
} traj_fixture_t;

static void traj_fixture(traj_fixture_t *f) {
  memset(f, 0, sizeof *f);
  for (int i = 0; i < 6; i++) {
    f->tokens[i] = 100 + i;
    f->mask[i] = i >= 3;
    f->logprobs[i] = i >= 3 ? -0.5f * (float)i : 0.0f;
    f->versions[i] = i >= 3 ? 4 + (i == 5) : -1;
    f->support[i] = i >= 3 ? 10 : 0;
  }
  for (int i = 0; i < 30; i++) f->support_ids[i] = 100 + i % 10;
  for (int i = 0; i < 24; i++) {
    f->rids[i] = (uint16_t)(i % 8);
    f->rprobs[i] = 0.25f;
  }
  f->components = cJSON_Parse("{\"correct\": 1, \"length_penalty\": -0.1}");
  f->messages =
      cJSON_Parse("[{\"role\": \"user\", \"content\": \"1+2\"}, {\"role\": \"assistant\", \"content\": \"3\"}]");
  f->m = (lt_msg_t){.type = LT_MSG_TRAJ, .id = 4};
  f->m.u.traj = (lt_traj_t){.task_id = 42,
                            .group_id = 7,
                            .domain = "arith",
                            .status = LT_TRAJ_OK,
                            .finish = LT_FINISH_TRUNCATED,
                            .reason = "context_limit",
                            .error = "",
                            .has_reward = 1,
                            .reward = 0.9,
                            .components = f->components,
                            .turns = 1,
                            .gen_ms = 12.5,
                            .messages = f->messages,
                            .ntokens = 6,
                            .tokens = f->tokens,
                            .logprobs = f->logprobs,
                            .loss_mask = f->mask,
                            .versions = f->versions,
                            .support = f->support,
                            .support_ids = f->support_ids,
                            .nsupport_ids = 30,
                            .temperature = 0.7,
                            .routing_layers = 2,
                            .routing_k = 2,
                            .routing_experts = 8,
                            .routing_ids = f->rids,
                            .routing_probs = f->rprobs};
}

static void traj_fixture_free(traj_fixture_t *f) {
  cJSON_Delete(f->components);
  cJSON_Delete(f->messages);
}

/* Everything the fixture's TRAJ carries came back. */
static void expect_fixture(const lt_traj_t *t, const traj_fixture_t *f) {
  cr_assert_eq(t->status, LT_TRAJ_OK);
  cr_assert_eq(t->finish, LT_FINISH_TRUNCATED);
  cr_assert_str_eq(t->reason, "context_limit");
  cr_assert_float_eq(t->reward, 0.9, 1e-12);
  cr_assert_eq(t->ntokens, 6);
  cr_assert_eq(memcmp(t->tokens, f->tokens, sizeof f->tokens), 0);
  cr_assert_eq(memcmp(t->logprobs, f->logprobs, sizeof f->logprobs), 0);
  cr_assert_eq(memcmp(t->loss_mask, f->mask, sizeof f->mask), 0);
  cr_assert_eq(memcmp(t->versions, f->versions, sizeof f->versions), 0);
  cr_assert_eq(memcmp(t->support, f->support, sizeof f->support), 0);
  cr_assert_eq(t->nsupport_ids, 30);
  cr_assert_eq(memcmp(t->support_ids, f->support_ids, sizeof f->support_ids), 0);
  cr_assert_float_eq(t->temperature, 0.7, 1e-12);
  cr_assert_eq(t->routing_layers, 2);
  cr_assert_eq(memcmp(t->routing_ids, f->rids, sizeof f->rids), 0);
  cr_assert_eq(memcmp(t->routing_probs, f->rprobs, sizeof f->rprobs), 0);
  cr_assert(cJSON_Compare(t->components, f->components, 1));
  cr_assert(cJSON_Compare(t->messages, f->messages, 1));
}

Test(proto, traj_roundtrip) {
  traj_fixture_t f;
  traj_fixture(&f);
  lt_msg_t d;
  cr_assert_eq(roundtrip(&f.m, &d), 0, "%s", lt_error_msg());
  expect_fixture(&d.u.traj, &f);
  lt_msg_free(&d);
  traj_fixture_free(&f);
}

/* An episode's diff rides in the TRAJ header (the swe environment's); one past LT_PROTO_MAX_DIFF is refused. */
Test(proto, traj_diff_roundtrip_and_bounded) {
  traj_fixture_t f;
  traj_fixture(&f);
  f.m.u.traj.diff = "diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b \"\\\n";
  lt_msg_t d;
  cr_assert_eq(roundtrip(&f.m, &d), 0, "%s", lt_error_msg());
  cr_expect_str_eq(d.u.traj.diff, f.m.u.traj.diff);
  lt_msg_free(&d);
  char *big = malloc(LT_PROTO_MAX_DIFF + 2);
  memset(big, 'x', LT_PROTO_MAX_DIFF + 1);
  big[LT_PROTO_MAX_DIFF + 1] = 0;
  f.m.u.traj.diff = big;
  cr_expect_eq(roundtrip(&f.m, &d), LT_EPROTO);
  cr_expect(strstr(lt_error_msg(), "TRAJ.diff: string longer than"), "%s", lt_error_msg());
  free(big);
  traj_fixture_free(&f);
}

/* The sampling sets must tile support_ids exactly; ids are token ids. */
Test(proto, traj_support_ids_checked) {
  traj_fixture_t f;
  traj_fixture(&f);
  lt_msg_t d;
  f.m.u.traj.nsupport_ids = 29;
  cr_assert_eq(roundtrip(&f.m, &d), LT_EPROTO);
  cr_assert(strstr(lt_error_msg(), "support_ids"), "%s", lt_error_msg());
  f.m.u.traj.nsupport_ids = 30;
  f.support_ids[4] = -3;
  cr_assert_eq(roundtrip(&f.m, &d), LT_EPROTO);
  f.support_ids[4] = 3;
  f.m.u.traj.temperature = 1e6;
  cr_assert_eq(roundtrip(&f.m, &d), LT_EPROTO);
  traj_fixture_free(&f);
}

/* Several contexts of one trajectory (an agent program's diverging calls): their starts travel and are checked. */
Test(proto, traj_seq_starts_roundtrip_and_checked) {
  traj_fixture_t f;
  traj_fixture(&f);
  int32_t starts[2] = {0, 4};
  f.m.u.traj.nseqs = 2;
  f.m.u.traj.seq_starts = starts;
  lt_msg_t d;
  cr_assert_eq(roundtrip(&f.m, &d), 0, "%s", lt_error_msg());
  cr_assert_eq(d.u.traj.nseqs, 2);
  cr_assert_eq(d.u.traj.seq_starts[1], 4);
  lt_msg_free(&d);
  int32_t bad[][2] = {{1, 4}, {0, 0}, {0, 6}, {0, -1}};
  for (int i = 0; i < 4; i++) {
    f.m.u.traj.seq_starts = bad[i];
    cr_assert_eq(roundtrip(&f.m, &d), LT_EPROTO, "starts {%d, %d} accepted", bad[i][0], bad[i][1]);
    cr_assert(strstr(lt_error_msg(), "seq_starts"), "%s", lt_error_msg());
  }
  f.m.u.traj.nseqs = 1; /* one context: no frame, nothing decoded */
  cr_assert_eq(roundtrip(&f.m, &d), 0);
  cr_assert_eq(d.u.traj.nseqs, 0);
  lt_msg_free(&d);
  traj_fixture_free(&f);
}

/* The agent loop grows its record with lt_traj_reserve: every row of LT_TRAJ_TOKEN_ARRAYS, the routed ones
 * layers x k entries per token, kept as they were without routing. */
Test(proto, traj_reserve_grows_every_per_token_array) {
  lt_traj_t t = {.routing_layers = 2, .routing_k = 3};
  cr_assert_eq(lt_traj_reserve(&t, 5), 0);
  cr_assert_eq(t.cap_tokens, 256);
#define GROWN(m, dtype, elem, routed, required) cr_assert(t.m, #m " was not grown");
  LT_TRAJ_TOKEN_ARRAYS(GROWN)
#undef GROWN
  t.tokens[255] = 9, t.routing_ids[256 * 6 - 1] = 7, t.routing_probs[256 * 6 - 1] = 0.5f; /* in bounds (ASan) */
  t.ntokens = 256;
  cr_assert_eq(lt_traj_reserve(&t, 1), 0);
  cr_assert_eq(t.cap_tokens, 512);
  cr_assert(t.tokens[255] == 9 && t.routing_ids[256 * 6 - 1] == 7 && t.routing_probs[256 * 6 - 1] == 0.5f);
  t.loss_mask[511] = 1, t.routing_ids[512 * 6 - 1] = 1;
  lt_traj_free(&t);
  lt_traj_t plain = {0};
  cr_assert_eq(lt_traj_reserve(&plain, 1), 0);
  cr_assert(plain.tokens && plain.support && !plain.routing_ids && !plain.routing_probs);
  lt_traj_free(&plain);
}

Test(proto, traj_without_reward_for_failed_status) {
  traj_fixture_t f;
  traj_fixture(&f);
  f.m.u.traj.status = LT_TRAJ_REWARD_FAILED;
  f.m.u.traj.has_reward = 0;
  f.m.u.traj.routing_layers = 0;
  f.m.u.traj.support = NULL;
  f.m.u.traj.temperature = -1;
  lt_msg_t d;
  cr_assert_eq(roundtrip(&f.m, &d), 0, "%s", lt_error_msg());
  cr_assert_eq(d.u.traj.has_reward, 0);
  cr_assert_null(d.u.traj.support);
  cr_assert_null(d.u.traj.support_ids);
  cr_assert_float_eq(d.u.traj.temperature, -1, 0, "no temperature sent: the TASK's applies");
  cr_assert_null(d.u.traj.routing_ids);
  lt_msg_free(&d);
  /* A reward on a failed trajectory is refused: nothing invents rewards. */
  f.m.u.traj.has_reward = 1;
  cr_assert_eq(roundtrip(&f.m, &d), LT_EPROTO);
  f.m.u.traj.status = LT_TRAJ_OK;
  f.m.u.traj.has_reward = 0;
  cr_assert_eq(roundtrip(&f.m, &d), LT_EPROTO);
  traj_fixture_free(&f);
}

Test(proto, small_messages_roundtrip) {
  uint64_t ids[] = {1, 2, 3};
  uint8_t dup[] = {0, 1, 0};
  lt_msg_t m = {.type = LT_MSG_ACK, .id = 5, .u.ack = {.task_ids = ids, .duplicate = dup, .n = 3}};
  lt_msg_t d;
  cr_assert_eq(roundtrip(&m, &d), 0);
  cr_assert_eq(d.u.ack.n, 3);
  cr_assert_eq(d.u.ack.task_ids[1], 2);
  cr_assert_eq(d.u.ack.duplicate[1], 1);
  lt_msg_free(&d);

  m = (lt_msg_t){.type = LT_MSG_HEARTBEAT,
                 .id = 6,
                 .u.heartbeat = {.t_ms = 123456, .inflight = 2, .slots = 4, .policy_version = 9, .unacked = 1}};
  cr_assert_eq(roundtrip(&m, &d), 0);
  cr_assert_eq(d.u.heartbeat.t_ms, 123456);
  cr_assert_eq(d.u.heartbeat.unacked, 1);
  lt_msg_free(&d);

  m = (lt_msg_t){.type = LT_MSG_WEIGHTS, .id = 7, .u.weights = {.version = 3, .location = "/run/ckpt/v3", .bytes = 99}};
  strcpy(m.u.weights.sha256, "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef");
  cr_assert_eq(roundtrip(&m, &d), 0);
  cr_assert_eq(d.u.weights.version, 3);
  cr_assert_str_eq(d.u.weights.location, "/run/ckpt/v3");
  cr_assert_str_eq(d.u.weights.sha256, m.u.weights.sha256);
  lt_msg_free(&d);

  m = (lt_msg_t){.type = LT_MSG_ABORT, .id = 8, .u.abort = {.task_id = 0, .reason = "weights"}};
  cr_assert_eq(roundtrip(&m, &d), 0);
  cr_assert_str_eq(d.u.abort.reason, "weights");
  lt_msg_free(&d);

  m = (lt_msg_t){.type = LT_MSG_ERROR, .id = 9, .u.error = {.code = LT_EPROTO, .message = "bad", .ref = 4}};
  cr_assert_eq(roundtrip(&m, &d), 0);
  cr_assert_eq(d.u.error.code, LT_EPROTO);
  cr_assert_eq(d.u.error.ref, 4);
  lt_msg_free(&d);

  m = (lt_msg_t){.type = LT_MSG_BYE, .id = 10, .u.bye = {.reason = "shutdown"}};
  cr_assert_eq(roundtrip(&m, &d), 0);
  cr_assert_str_eq(d.u.bye.reason, "shutdown");
  lt_msg_free(&d);
}

Test(proto, rejects_bad_headers) {
  lt_msg_t d;
  cr_assert_eq(lt_proto_decode(NULL, 0, &d), LT_EPROTO);
  cr_assert_eq(decode_json("", &d), LT_EPROTO);
  cr_assert_eq(decode_json("not json", &d), LT_EPROTO);
  cr_assert_eq(decode_json("[1,2]", &d), LT_EPROTO);
  cr_assert_eq(decode_json("{\"type\":\"BYE\",\"id\":1}", &d), LT_EPROTO); /* no version */
  cr_assert_eq(decode_json("{\"v\":2,\"type\":\"BYE\",\"id\":1}", &d), LT_EVERSION);
  cr_assert(strstr(lt_error_msg(), "version 2"), "%s", lt_error_msg());
  cr_assert_eq(decode_json("{\"v\":1,\"type\":\"NOPE\",\"id\":1}", &d), LT_EPROTO);
  cr_assert_eq(decode_json("{\"v\":1,\"type\":\"BYE\"}", &d), LT_EPROTO);              /* no id */
  cr_assert_eq(decode_json("{\"v\":1,\"type\":\"BYE\",\"id\":-1}", &d), LT_EPROTO);    /* negative id */
  cr_assert_eq(decode_json("{\"v\":1,\"type\":\"BYE\",\"id\":1e300}", &d), LT_EPROTO); /* huge id */
  cr_assert_eq(decode_json("{\"v\":1,\"type\":\"BYE\",\"id\":1.5}", &d), LT_EPROTO);
  cr_assert_eq(decode_json("{\"v\":1,\"type\":\"BYE\",\"id\":1,\"reason\":5}", &d), LT_EPROTO);     /* wrong type */
  cr_assert_eq(decode_json("{\"v\":1,\"type\":\"HELLO\",\"id\":1,\"name\":\"w\"}", &d), LT_EPROTO); /* no slots */
  cr_assert(strstr(lt_error_msg(), "HELLO.slots: missing"), "%s", lt_error_msg());
  cr_assert_eq(decode_json("{\"v\":1,\"type\":\"HELLO\",\"id\":1,\"name\":\"w\",\"slots\":0}", &d), LT_EPROTO);
  cr_assert_eq(decode_json("{\"v\":1,\"type\":\"TASK\",\"id\":1,\"task_id\":1,\"group_id\":1,\"env\":\"a\","
                           "\"policy_version\":0,\"max_new_tokens\":8,\"max_context\":8,\"top_p\":1.5}",
                           &d),
               LT_EPROTO);
  cr_assert(strstr(lt_error_msg(), "TASK.top_p"), "%s", lt_error_msg());
  cr_assert_eq(
      decode_json("{\"v\":1,\"type\":\"WEIGHTS\",\"id\":1,\"version\":1,\"location\":\"x\",\"sha256\":\"zz\"}", &d),
      LT_EPROTO);
  cr_assert_eq(decode_json("{\"v\":1,\"type\":\"ACK\",\"id\":1,\"task_ids\":[1,2],\"duplicate\":[true]}", &d),
               LT_EPROTO);
  /* A NUL inside the header. */
  lt_frame_t f = {"{\"v\":1,\0}", 9, 0};
  cr_assert_eq(lt_proto_decode(&f, 1, &d), LT_EPROTO);
  /* Bytes that are not UTF-8: the re-encoded header would hold U+FFFD (3 bytes)
   * for each, so a name of 4096 stray bytes would not decode again (found by
   * fuzz_proto).  Overlong, surrogate and truncated sequences alike. */
  const char *bad_utf8[] = {"\xf6", "\xc0\xaf", "\xed\xa0\x80", "\xe2\x82", "\xf4\x90\x80\x80"};
  for (size_t i = 0; i < sizeof bad_utf8 / sizeof *bad_utf8; i++) {
    char j[128];
    snprintf(j, sizeof j, "{\"v\":1,\"type\":\"HELLO\",\"id\":1,\"name\":\"w%s\",\"slots\":1}", bad_utf8[i]);
    cr_assert_eq(decode_json(j, &d), LT_EPROTO, "case %zu", i);
    cr_assert(strstr(lt_error_msg(), "UTF-8"), "%s", lt_error_msg());
  }
  cr_assert_eq(
      decode_json("{\"v\":1,\"type\":\"HELLO\",\"id\":1,\"name\":\"w\xc3\xa9\xf0\x9f\x98\x80\",\"slots\":1}", &d), 0);
  lt_msg_free(&d);
  /* Binary frames on a message type that has none. */
  lt_frame_t two[2] = {{"{\"v\":1,\"type\":\"BYE\",\"id\":1}", 27, 0}, {"x", 1, 0}};
  cr_assert_eq(lt_proto_decode(two, 2, &d), LT_EPROTO);
}

/* Encodes the fixture, lets `mutate` change the frames, and expects a refusal. */
static void expect_traj_refused(void (*mutate)(lt_frame_t *fr, int *n, char *hdr, size_t cap), const char *needle) {
  traj_fixture_t f;
  traj_fixture(&f);
  lt_frames_t fr;
  cr_assert_eq(lt_proto_encode(&f.m, &fr), 0);
  char hdr[8192];
  snprintf(hdr, sizeof hdr, "%.*s", (int)fr.f[0].len, (char *)fr.f[0].data);
  lt_frame_t frames[LT_PROTO_MAX_FRAMES];
  int n = fr.n;
  for (int i = 0; i < n; i++) frames[i] = fr.f[i];
  frames[0].data = hdr;
  mutate(frames, &n, hdr, sizeof hdr);
  frames[0].len = strlen(hdr);
  lt_msg_t d;
  int rc = lt_proto_decode(frames, n, &d);
  cr_assert_eq(rc, LT_EPROTO, "expected refusal (%s), got %d", needle, rc);
  cr_assert(strstr(lt_error_msg(), needle), "'%s' not in '%s'", needle, lt_error_msg());
  lt_frames_free(&fr);
  traj_fixture_free(&f);
}

static void replace(char *hdr, size_t cap, const char *from, const char *to) {
  char *p = strstr(hdr, from);
  cr_assert_not_null(p, "'%s' not in header", from);
  char tail[8192];
  snprintf(tail, sizeof tail, "%s", p + strlen(from));
  snprintf(p, cap - (size_t)(p - hdr), "%s%s", to, tail);
}

static void drop_last_frame(lt_frame_t *fr, int *n, char *h, size_t c) { (*n)--; }
static void short_frame(lt_frame_t *fr, int *n, char *h, size_t c) { fr[1].len -= 4; }
static void wrong_dtype(lt_frame_t *fr, int *n, char *h, size_t c) {
  replace(h, c, "\"name\":\"tokens\",\"dtype\":\"i32\"", "\"name\":\"tokens\",\"dtype\":\"f32\"");
}
static void huge_count(lt_frame_t *fr, int *n, char *h, size_t c) {
  replace(h, c, "\"name\":\"tokens\",\"dtype\":\"i32\",\"count\":6",
          "\"name\":\"tokens\",\"dtype\":\"i32\",\"count\":4294967296");
}
static void count_mismatch(lt_frame_t *fr, int *n, char *h, size_t c) {
  /* logprobs declares and carries 5 entries while tokens has 6. */
  replace(h, c, "\"name\":\"logprobs\",\"dtype\":\"f32\",\"count\":6",
          "\"name\":\"logprobs\",\"dtype\":\"f32\",\"count\":5");
  fr[2].len = 20;
}
static void unknown_frame(lt_frame_t *fr, int *n, char *h, size_t c) {
  replace(h, c, "\"name\":\"support\"", "\"name\":\"surprise\"");
}
static void bad_routing_id(lt_frame_t *fr, int *n, char *h, size_t c) {
  static uint16_t ids[24];
  for (int i = 0; i < 24; i++) ids[i] = 8; /* == routing_experts */
  fr[6].data = ids;
}
static void bad_mask(lt_frame_t *fr, int *n, char *h, size_t c) {
  static uint8_t m[6] = {0, 0, 0, 2, 1, 1};
  fr[3].data = m;
}
static void positive_logprob(lt_frame_t *fr, int *n, char *h, size_t c) {
  static float lp[6] = {0, 0, 0, 0.5f, -1, -1};
  fr[2].data = lp;
}
static void nan_logprob(lt_frame_t *fr, int *n, char *h, size_t c) {
  static float lp[6] = {0, 0, 0, NAN, -1, -1};
  fr[2].data = lp;
}
static void missing_version(lt_frame_t *fr, int *n, char *h, size_t c) {
  static int32_t v[6] = {-1, -1, -1, -1, 4, 4};
  fr[4].data = v;
}
static void bad_status(lt_frame_t *fr, int *n, char *h, size_t c) {
  replace(h, c, "\"status\":\"ok\"", "\"status\":\"great\"");
}

Test(proto, traj_rejects_malformed_frames) {
  expect_traj_refused(drop_last_frame, "binary frames");
  expect_traj_refused(short_frame, "bytes");
  expect_traj_refused(wrong_dtype, "dtype");
  expect_traj_refused(huge_count, "out of range");
  expect_traj_refused(count_mismatch, "entries");
  expect_traj_refused(unknown_frame, "unknown frame");
  expect_traj_refused(bad_routing_id, "routing_ids");
  expect_traj_refused(bad_mask, "loss_mask");
  expect_traj_refused(positive_logprob, "logprobs");
  expect_traj_refused(nan_logprob, "logprobs");
  expect_traj_refused(missing_version, "versions");
  expect_traj_refused(bad_status, "status");
}

Test(proto, encode_refuses_ids_beyond_json_precision) {
  lt_msg_t m = {.type = LT_MSG_ABORT, .id = 1ull << 60, .u.abort = {.reason = "x"}};
  lt_frames_t fr;
  cr_assert_eq(lt_proto_encode(&m, &fr), LT_EINVAL);
}

#include <dirent.h>

#include "tests/fuzz/framing.h"
#include "tests/support/harness.h"
#include "util/fs.h"

/* Seeds the decoder must refuse (tests/fuzz/proto/refuse_*, and badversion),
 * each with its code and what its message names; elem >= 0: the message is
 * read and that TRAJS element alone is refused (docs/protocol.md, Batching). */
static const struct {
  const char *seed;
  int rc, elem;
  const char *says;
} refused_seeds[] = {
    {"badversion", LT_EVERSION, -1, "protocol version 2 is not supported"},
    {"refuse_dup_key_header", LT_EPROTO, -1, "BYE: key \"reason\" appears twice"},
    {"refuse_dup_key_tasks_element", LT_EPROTO, -1, "TASKS.tasks[0]: key \"env\" appears twice"},
    {"refuse_dup_key_frames_entry", LT_EPROTO, -1, "TRAJ.frames[1]: key \"dtype\" appears twice"},
    {"refuse_dup_key_components", LT_EPROTO, -1, "TRAJ.components: key \"correct\" appears twice"},
    {"refuse_dup_key_trajs_frames", LT_EPROTO, -1, "TRAJS.trajs[1]: key \"frames\" appears twice"},
    {"refuse_dup_key_trajs_frames_entry", LT_EPROTO, -1, "TRAJS.trajs[1].frames[0]: key \"count\" appears twice"},
    {"refuse_too_many_keys_header", LT_EPROTO, -1, "HEARTBEAT: more than 256 keys"},
    {"refuse_too_many_keys_trajs_element", LT_EPROTO, -1, "TRAJS.trajs[1]: more than 256 keys"},
    {"refuse_too_many_keys_components", LT_EPROTO, -1, "TRAJ.components: more than 256 keys"},
    {"refuse_trajs_empty", LT_EPROTO, -1, "TRAJS.trajs: 0 trajectories, expected 1..64"},
    {"refuse_trajs_65", LT_EPROTO, -1, "TRAJS.trajs: 65 trajectories, expected 1..64"},
    {"refuse_trajs_not_object", LT_EPROTO, -1, "TRAJS.trajs[0]: expected object"},
    {"refuse_trajs_past_blob", LT_EPROTO, -1,
     "TRAJS.trajs[1].frames[0]: the arrays run past the binary frame's 65 bytes"},
    {"refuse_trajs_blob_left_over", LT_EPROTO, -1,
     "TRAJS: the elements describe 65 bytes of arrays, the binary frame has 69"},
    {"refuse_trajs_no_blob", LT_EPROTO, -1, "TRAJS: expected one binary frame, got 0"},
    {"refuse_trajs_two_blobs", LT_EPROTO, -1, "TRAJS: expected one binary frame, got 2"},
    {"refuse_trajs_elem_dup_key", LT_EPROTO, 1, "TRAJS.trajs[1]: key \"task_id\" appears twice"},
    {"refuse_trajs_elem_type", LT_EPROTO, 0, "TRAJS.trajs[0].type: expected \"TRAJ\""},
    {"refuse_trajs_elem_malformed", LT_EPROTO, 1,
     "TRAJS.trajs[1]: TRAJ.logprobs[0]: expected a finite log-probability"},
};

/* The fuzzer's seeds must stay what they are named for, or fuzzing starts
 * from noise: valid messages decode, refusal seeds are refused as listed. */
Test(proto, fuzz_seed_corpus_decodes_or_is_refused_as_named) {
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/tests/fuzz/proto", lt_test_root());
  DIR *dp = opendir(dir);
  cr_assert_not_null(dp, "%s", dir);
  int seen = 0, refusals = 0;
  for (struct dirent *e; (e = readdir(dp));) {
    if (e->d_name[0] == '.') continue;
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    char *data;
    size_t len;
    cr_assert_eq(lt_fs_read_file(path, 1 << 20, &data, &len), 0);
    lt_frame_t fr[LT_PROTO_MAX_FRAMES];
    int n = lt_fuzz_split((const uint8_t *)data, len, fr);
    cr_assert_gt(n, 0, "%s", e->d_name);
    int r = -1;
    for (size_t k = 0; k < sizeof refused_seeds / sizeof *refused_seeds; k++)
      if (!strcmp(refused_seeds[k].seed, e->d_name)) r = (int)k;
    cr_assert(r >= 0 || strncmp(e->d_name, "refuse_", 7), "%s: a refusal seed missing from refused_seeds", e->d_name);
    lt_msg_t m;
    int rc = lt_proto_decode(fr, n, &m);
    if (r < 0 || refused_seeds[r].elem >= 0) {
      cr_assert_eq(rc, 0, "%s: %s", e->d_name, lt_error_msg());
      for (int i = 0; m.type == LT_MSG_TRAJS && i < m.u.trajs.n; i++) {
        int want = r >= 0 && i == refused_seeds[r].elem;
        cr_expect_eq(m.u.trajs.rc[i], want ? refused_seeds[r].rc : 0, "%s: element %d: %s", e->d_name, i,
                     m.u.trajs.why[i] ? m.u.trajs.why[i] : "accepted");
        if (want)
          cr_expect(m.u.trajs.why[i] && strstr(m.u.trajs.why[i], refused_seeds[r].says),
                    "%s: \"%s\" does not say \"%s\"", e->d_name, m.u.trajs.why[i] ? m.u.trajs.why[i] : "",
                    refused_seeds[r].says);
      }
      cr_expect(r < 0 || (m.type == LT_MSG_TRAJS && refused_seeds[r].elem < m.u.trajs.n), "%s: no element %d",
                e->d_name, refused_seeds[r].elem);
      lt_msg_free(&m);
    } else {
      cr_expect_eq(rc, refused_seeds[r].rc, "%s: decoded with %d, expected %d", e->d_name, rc, refused_seeds[r].rc);
      cr_expect(strstr(lt_error_msg(), refused_seeds[r].says), "%s: \"%s\" does not say \"%s\"", e->d_name,
                lt_error_msg(), refused_seeds[r].says);
      if (rc == 0) lt_msg_free(&m);
    }
    refusals += r >= 0;
    lt_fuzz_free(fr, n);
    free(data);
    seen++;
  }
  closedir(dp);
  cr_assert_eq(refusals, (int)(sizeof refused_seeds / sizeof *refused_seeds), "a listed refusal seed is missing");
  cr_assert_geq(seen, 10 + refusals);
}

/* Issue 19: what a third-party worker needs, and answers it can match. */
Test(proto, welcome_carries_the_model_and_error_names_its_task) {
  cJSON *model = cJSON_Parse("{\"vocab_size\": 264, \"eos_ids\": [257, 258], \"chat_format\": \"chatml\"}");
  lt_msg_t m = {.type = LT_MSG_WELCOME,
                .id = 1,
                .u.welcome = {.worker_id = "w", .run = "r", .heartbeat_ms = 100, .liveness = 3, .model = model}},
           d;
  cr_assert_eq(roundtrip(&m, &d), 0, "%s", lt_error_msg());
  cr_expect_eq(cJSON_GetObjectItem(d.u.welcome.model, "vocab_size")->valueint, 264);
  cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(d.u.welcome.model, "eos_ids")), 2);
  lt_msg_free(&d);
  cJSON_Delete(model);
  lt_msg_t e = {
      .type = LT_MSG_ERROR, .id = 2, .u.error = {.code = LT_ERANGE, .message = "no", .ref = 9, .task_id = 77}};
  cr_assert_eq(roundtrip(&e, &d), 0, "%s", lt_error_msg());
  cr_expect_eq(d.u.error.ref, 9);
  cr_expect_eq(d.u.error.task_id, 77);
  lt_msg_free(&d);
}

Test(proto, refused_message_keeps_its_id_and_task) {
  lt_msg_t d;
  /* A TRAJ whose arrays are missing: refused, yet its id and task are known for the ERROR. */
  int rc = decode_json("{\"v\": 1, \"type\": \"TRAJ\", \"id\": 31, \"task_id\": 12, \"ntokens\": 3}", &d);
  cr_assert_lt(rc, 0);
  cr_expect_eq(d.type, LT_MSG_TRAJ);
  cr_expect_eq(d.id, 31);
  cr_expect_eq(d.u.traj.task_id, 12);
  cr_expect(strlen(lt_error_msg()) > 0);
}

Test(proto, traj_check_against_the_run) {
  traj_fixture_t f;
  traj_fixture(&f);
  lt_traj_t *t = &f.m.u.traj;
  lt_traj_limits_t lim = {.vocab = 264, .max_tokens = 100, .max_version = 5};
  cr_expect_eq(lt_traj_check(t, &lim), 0, "%s", lt_error_msg());
  lim.vocab = 104; /* token 104 and 105 are now outside */
  cr_expect_eq(lt_traj_check(t, &lim), LT_ERANGE);
  cr_expect(strstr(lt_error_msg(), "id 104 outside the vocabulary"), "%s", lt_error_msg());
  lim.vocab = 264;
  lim.max_version = 4; /* token 5 was generated by version 5: not published yet */
  cr_expect_eq(lt_traj_check(t, &lim), LT_ERANGE);
  lim.max_version = 5;
  lim.max_tokens = 5;
  cr_expect_eq(lt_traj_check(t, &lim), LT_ERANGE);
  /* The context limit is per context: two of 3 tokens fit 4 (a compacted history), one of 5 does not. */
  lim.max_tokens = 4;
  int32_t starts[2] = {0, 3};
  t->nseqs = 2, t->seq_starts = starts;
  cr_expect_eq(lt_traj_check(t, &lim), 0, "%s", lt_error_msg());
  starts[1] = 1;
  cr_expect_eq(lt_traj_check(t, &lim), LT_ERANGE);
  cr_expect(strstr(lt_error_msg(), "5 tokens in one context"), "%s", lt_error_msg());
  t->nseqs = 0, t->seq_starts = NULL;
  lim.max_tokens = 100;
  lim.reward_bounded = 1, lim.reward_lo = 0, lim.reward_hi = 0.5; /* the fixture's 0.9 is outside */
  cr_expect_eq(lt_traj_check(t, &lim), LT_ERANGE);
  cr_expect(strstr(lt_error_msg(), "reward 0.9 outside") && strstr(lt_error_msg(), "arith"), "%s", lt_error_msg());
  lim.reward_hi = 0.9; /* the bound itself is in */
  cr_expect_eq(lt_traj_check(t, &lim), 0, "%s", lt_error_msg());
  lim.reward_bounded = 0;
  t->reward = NAN;
  cr_expect_eq(lt_traj_check(t, &lim), LT_ERANGE);
  traj_fixture_free(&f);
}

/* Issue 22: several TASKs in one message, only for a worker whose HELLO said batch. */
Test(proto, tasks_roundtrip_and_hello_batch) {
  lt_msg_t h = {.type = LT_MSG_HELLO, .id = 1}, d;
  h.u.hello = (lt_hello_t){.name = "w", .slots = 2, .batch = 1};
  cr_assert_eq(roundtrip(&h, &d), 0, "%s", lt_error_msg());
  cr_assert_eq(d.u.hello.batch, 1);
  lt_msg_free(&d);
  cr_assert_eq(decode_json("{\"v\":1,\"type\":\"HELLO\",\"id\":1,\"name\":\"w\",\"slots\":2}", &d), 0);
  cr_assert_eq(d.u.hello.batch, 0, "a worker written to the old page does not get TASKS");
  lt_msg_free(&d);

  cJSON *spec = cJSON_Parse("{\"problem\": \"1+2\"}");
  lt_task_t ts[3];
  for (int i = 0; i < 3; i++)
    ts[i] = (lt_task_t){.task_id = 40 + (uint64_t)i,
                        .group_id = 7,
                        .domain = "arith",
                        .env = "arith",
                        .policy_version = 2,
                        .seed = i,
                        .temperature = 1,
                        .top_p = 1,
                        .max_new_tokens = 16,
                        .max_turns = 1,
                        .max_context = 64,
                        .spec = i == 1 ? spec : NULL};
  lt_msg_t m = {.type = LT_MSG_TASKS, .id = 5, .u.tasks = {.tasks = ts, .n = 3}};
  cr_assert_eq(roundtrip(&m, &d), 0, "%s", lt_error_msg());
  cr_assert_eq(d.type, LT_MSG_TASKS);
  cr_assert_eq(d.u.tasks.n, 3);
  for (int i = 0; i < 3; i++) cr_assert_eq(d.u.tasks.tasks[i].task_id, 40 + (uint64_t)i);
  cr_assert(cJSON_Compare(d.u.tasks.tasks[1].spec, spec, 1));
  cr_assert_eq(cJSON_GetArraySize(d.u.tasks.tasks[0].spec), 0);
  cJSON_Delete(spec);
  lt_msg_free(&d);

  m.u.tasks.n = 0;
  lt_frames_t fr;
  cr_assert_eq(lt_proto_encode(&m, &fr), LT_EINVAL, "an empty batch is not sent");
}

Test(proto, tasks_element_checked_like_a_task) {
  static const char *bad[][2] = {
      {"{\"v\":1,\"type\":\"TASKS\",\"id\":1,\"tasks\":[]}", "TASKS.tasks: 0 tasks"},
      {"{\"v\":1,\"type\":\"TASKS\",\"id\":1}", "TASKS.tasks: expected array"},
      {"{\"v\":1,\"type\":\"TASKS\",\"id\":1,\"tasks\":[{\"task_id\":1,\"group_id\":1,\"env\":\"a\",\"policy_version\":0,"
       "\"max_new_tokens\":4,\"max_context\":8},7]}",
       "TASKS.tasks[1]: expected object"},
      {"{\"v\":1,\"type\":\"TASKS\",\"id\":1,\"tasks\":[{\"task_id\":1,\"group_id\":1,\"env\":\"a\",\"policy_version\":0,"
       "\"max_new_tokens\":4,\"max_context\":8,\"spec\":{\"x\":1}},{\"task_id\":-2,\"group_id\":1,\"env\":\"a\","
       "\"policy_version\":0,\"max_new_tokens\":4,\"max_context\":8}]}",
       "TASKS.tasks[1].task_id"},
      {"{\"v\":1,\"type\":\"TASKS\",\"id\":1,\"tasks\":[{\"task_id\":1,\"group_id\":1,\"env\":\"\",\"policy_version\":0,"
       "\"max_new_tokens\":4,\"max_context\":8}]}",
       "TASKS.tasks[0].env: empty"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    lt_msg_t d;
    cr_assert_eq(decode_json(bad[i][0], &d), LT_EPROTO, "case %zu", i);
    cr_assert(strstr(lt_error_msg(), bad[i][1]), "case %zu: %s", i, lt_error_msg());
    lt_msg_free(&d);
  }
  /* More than the limit. */
  lt_buf_t b = {0};
  lt_buf_puts(&b, "{\"v\":1,\"type\":\"TASKS\",\"id\":1,\"tasks\":[");
  for (int i = 0; i <= LT_PROTO_MAX_BATCH; i++)
    lt_buf_printf(
        &b,
        "%s{\"task_id\":%d,\"group_id\":1,\"env\":\"a\",\"policy_version\":0,\"max_new_tokens\":4,\"max_context\":8}",
        i ? "," : "", i + 1);
  lt_buf_puts(&b, "]}");
  char *s = lt_buf_take(&b);
  lt_msg_t d;
  cr_assert_eq(decode_json(s, &d), LT_EPROTO);
  cr_assert(strstr(lt_error_msg(), "expected 1..256"), "%s", lt_error_msg());
  lt_msg_free(&d);
  free(s);
}

/* Issue 22: several TRAJs in one TRAJS, joined from their encoded messages (as the worker's spool keeps them). */
static void trajs_of(traj_fixture_t *f, int n, lt_frames_t *out) {
  lt_frames_t one[3];
  const lt_frame_t *msgs[3];
  int nf[3];
  for (int i = 0; i < n; i++) {
    f->m.u.traj.task_id = 42 + (uint64_t)i;
    f->m.id = 10 + (uint64_t)i;
    cr_assert_eq(lt_proto_encode(&f->m, &one[i]), 0, "%s", lt_error_msg());
    msgs[i] = one[i].f;
    nf[i] = one[i].n;
  }
  cr_assert_eq(lt_proto_trajs_join(99, msgs, nf, n, out), 0, "%s", lt_error_msg());
  for (int i = 0; i < n; i++) lt_frames_free(&one[i]);
}

Test(proto, trajs_roundtrip_and_welcome_batch) {
  traj_fixture_t f;
  traj_fixture(&f);
  lt_frames_t fr;
  trajs_of(&f, 3, &fr);
  cr_assert_eq(fr.n, 2, "a header and one binary frame, whatever the count");
  lt_msg_t d;
  cr_assert_eq(lt_proto_decode(fr.f, fr.n, &d), 0, "%s", lt_error_msg());
  cr_assert_eq(d.type, LT_MSG_TRAJS);
  cr_assert_eq(d.id, 99);
  cr_assert_eq(d.u.trajs.n, 3);
  for (int i = 0; i < 3; i++) {
    lt_traj_t *t = &d.u.trajs.trajs[i];
    cr_assert_eq(d.u.trajs.rc[i], 0);
    cr_assert_eq(t->task_id, 42 + (uint64_t)i);
    expect_fixture(t, &f);
  }
  lt_msg_free(&d);
  lt_frames_free(&fr);
  cr_assert_eq(lt_proto_trajs_join(1, NULL, NULL, 0, &fr), LT_EINVAL, "an empty batch is not sent");

  lt_msg_t w = {
      .type = LT_MSG_WELCOME, .id = 1, .u.welcome = {.worker_id = "w", .heartbeat_ms = 100, .liveness = 3, .batch = 1}};
  cr_assert_eq(roundtrip(&w, &d), 0, "%s", lt_error_msg());
  cr_assert_eq(d.u.welcome.batch, 1);
  lt_msg_free(&d);
  cr_assert_eq(
      decode_json("{\"v\":1,\"type\":\"WELCOME\",\"id\":1,\"worker_id\":\"w\",\"heartbeat_ms\":100,\"liveness\":3,"
                  "\"policy_version\":0}",
                  &d),
      0, "%s", lt_error_msg());
  cr_assert_eq(d.u.welcome.batch, 0, "an older daemon's WELCOME: the worker sends a TRAJ each");
  lt_msg_free(&d);
  traj_fixture_free(&f);
}

/* A malformed element is refused alone, named, with its task; the others stand. */
Test(proto, trajs_element_refused_alone) {
  traj_fixture_t f;
  traj_fixture(&f);
  f.logprobs[4] = 0.5f; /* every element gets it: mend the copies but the second's */
  lt_frames_t fr;
  trajs_of(&f, 3, &fr);
  /* The blob holds each element's arrays in its frames order: tokens (24 bytes), then logprobs. */
  size_t per = fr.f[1].len / 3;
  for (int i = 0; i < 3; i += 2) ((float *)((char *)fr.f[1].data + per * (size_t)i + 24))[4] = -1.0f;
  lt_msg_t d;
  cr_assert_eq(lt_proto_decode(fr.f, fr.n, &d), 0, "%s", lt_error_msg());
  cr_assert_eq(d.u.trajs.rc[0], 0, "%s", d.u.trajs.why[0]);
  cr_assert_eq(d.u.trajs.rc[2], 0, "%s", d.u.trajs.why[2]);
  cr_assert_eq(d.u.trajs.rc[1], LT_EPROTO);
  cr_assert_eq(d.u.trajs.trajs[1].task_id, 43, "the refusal can name its task");
  cr_assert(strstr(d.u.trajs.why[1], "TRAJS.trajs[1]") && strstr(d.u.trajs.why[1], "logprobs[4]"), "%s",
            d.u.trajs.why[1]);
  cr_assert_eq(d.u.trajs.trajs[2].task_id, 44);
  lt_msg_free(&d);
  lt_frames_free(&fr);
  traj_fixture_free(&f);
}

/* What makes the elements' arrays unreadable refuses the whole message. */
Test(proto, trajs_layout_checked) {
  traj_fixture_t f;
  traj_fixture(&f);
  lt_frames_t fr;
  trajs_of(&f, 2, &fr);
  lt_msg_t d;
  fr.f[1].len -= 1;
  cr_assert_eq(lt_proto_decode(fr.f, fr.n, &d), LT_EPROTO);
  cr_assert(strstr(lt_error_msg(), "TRAJS.trajs[1].frames") && strstr(lt_error_msg(), "run past"), "%s",
            lt_error_msg());
  fr.f[1].len += 2; /* one byte too many (never read: the sizes disagree first) */
  cr_assert_eq(lt_proto_decode(fr.f, fr.n, &d), LT_EPROTO);
  cr_assert(strstr(lt_error_msg(), "binary frame has"), "%s", lt_error_msg());
  fr.f[1].len -= 1;
  cr_assert_eq(lt_proto_decode(fr.f, 1, &d), LT_EPROTO, "the binary frame is required");
  static const char *bad[][2] = {
      {"{\"v\":1,\"type\":\"TRAJS\",\"id\":1,\"trajs\":[]}", "TRAJS.trajs: 0 trajectories"},
      {"{\"v\":1,\"type\":\"TRAJS\",\"id\":1}", "TRAJS.trajs: expected array"},
      {"{\"v\":1,\"type\":\"TRAJS\",\"id\":1,\"trajs\":[7]}", "TRAJS.trajs[0]: expected object"},
      {"{\"v\":1,\"type\":\"TRAJS\",\"id\":1,\"trajs\":[{\"task_id\":1}]}", "TRAJS.trajs[0].frames: expected array"},
      {"{\"v\":1,\"type\":\"TRAJS\",\"id\":1,\"trajs\":[{\"frames\":[{\"name\":\"tokens\",\"dtype\":\"i64\",\"count\":1}]}]}",
       "TRAJS.trajs[0].frames[0]: expected a known dtype"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    lt_frame_t two[2] = {{(void *)bad[i][0], strlen(bad[i][0]), 0}, {fr.f[1].data, 0, 0}};
    cr_assert_eq(lt_proto_decode(two, 2, &d), LT_EPROTO, "case %zu", i);
    cr_assert(strstr(lt_error_msg(), bad[i][1]), "case %zu: %s", i, lt_error_msg());
  }
  /* An element that is not a TRAJ's header is refused alone. */
  const char *h = "{\"v\":1,\"type\":\"TRAJS\",\"id\":1,\"trajs\":[{\"type\":\"TASK\",\"task_id\":5,\"frames\":[]}]}";
  lt_frame_t two[2] = {{(void *)h, strlen(h), 0}, {fr.f[1].data, 0, 0}};
  cr_assert_eq(lt_proto_decode(two, 2, &d), 0, "%s", lt_error_msg());
  cr_assert_eq(d.u.trajs.rc[0], LT_EPROTO);
  cr_assert_eq(d.u.trajs.trajs[0].task_id, 5);
  cr_assert(strstr(d.u.trajs.why[0], "TRAJS.trajs[0].type"), "%s", d.u.trajs.why[0]);
  lt_msg_free(&d);
  lt_frames_free(&fr);
  traj_fixture_free(&f);
}

/* LT_PROTO_TRAJS_MAX_BYTES bounds what a worker batches, so that no daemon's
 * socket drops it; a receiver takes what its transport.max_message_mb lets
 * through, so a larger TRAJS from another peer decodes. */
Test(proto, trajs_past_the_senders_cap_decodes) {
  enum { T = LT_PROTO_TRAJS_MAX_BYTES / 13 + 1 }; /* 13 bytes a token: tokens, logprobs, loss_mask, versions */
  char h[512];
  snprintf(
      h, sizeof h,
      "{\"v\":1,\"type\":\"TRAJS\",\"id\":1,\"trajs\":[{\"task_id\":5,\"group_id\":1,\"status\":\"aborted\","
      "\"finish\":\"none\",\"frames\":[{\"name\":\"tokens\",\"dtype\":\"i32\",\"count\":%d},"
      "{\"name\":\"logprobs\",\"dtype\":\"f32\",\"count\":%d},{\"name\":\"loss_mask\",\"dtype\":\"u8\",\"count\":%d},"
      "{\"name\":\"versions\",\"dtype\":\"i32\",\"count\":%d}]}]}",
      T, T, T, T);
  lt_frame_t two[2] = {{h, strlen(h), 0}, {calloc(T, 13), (size_t)T * 13, 0}};
  cr_assert_not_null(two[1].data);
  cr_assert_gt(two[0].len + two[1].len, LT_PROTO_TRAJS_MAX_BYTES);
  lt_msg_t d;
  cr_assert_eq(lt_proto_decode(two, 2, &d), 0, "%s", lt_error_msg());
  cr_assert_eq(d.u.trajs.rc[0], 0, "%s", d.u.trajs.why[0]);
  cr_assert_eq(d.u.trajs.trajs[0].ntokens, T);
  lt_msg_free(&d);
  free(two[1].data);
}

/* h with `extra` spliced in after the n-th (0-based) occurrence of `after` (malloc'd). */
static char *splice(const char *h, const char *after, int n, const char *extra) {
  const char *at = h;
  for (int i = 0; at && i <= n; i++) at = strstr(i ? at + 1 : at, after);
  cr_assert(at, "'%s' #%d not in %s", after, n, h);
  at += strlen(after);
  lt_buf_t b = {0};
  lt_buf_append(&b, h, (size_t)(at - h));
  lt_buf_puts(&b, extra);
  lt_buf_puts(&b, at);
  return lt_buf_take(&b);
}

/* Decodes the TRAJS fr with its header's element `elem` given `extra` after its task id. */
static int trajs_with(const lt_frames_t *fr, int elem, const char *extra, lt_msg_t *d) {
  char key[32];
  snprintf(key, sizeof key, "\"task_id\":%d,", 42 + elem);
  char *h = splice(fr->f[0].data, key, 0, extra);
  lt_frame_t two[2] = {{h, strlen(h), 0}, fr->f[1]};
  int rc = lt_proto_decode(two, 2, d);
  free(h);
  return rc;
}

/* Review of issue 22: a key twice in a protocol object is malformed.  In a
 * TRAJS element it refuses that element alone, naming the key and the index,
 * and the ERROR names its task only when the task can be told (a "task_id"
 * twice names none, never the other one); "frames" twice refuses the message,
 * whose arrays could no longer be told apart. */
Test(proto, duplicate_keys_are_malformed) {
  traj_fixture_t f;
  traj_fixture(&f);
  lt_frames_t fr;
  trajs_of(&f, 3, &fr);
  lt_msg_t d;
  cr_assert_eq(trajs_with(&fr, 1, "\"task_id\":7,", &d), 0, "%s", lt_error_msg());
  cr_expect_eq(d.u.trajs.rc[0], 0);
  cr_expect_eq(d.u.trajs.rc[2], 0);
  cr_assert_eq(d.u.trajs.rc[1], LT_EPROTO);
  cr_expect_eq(d.u.trajs.trajs[1].task_id, 0, "the refusal names task %llu",
               (unsigned long long)d.u.trajs.trajs[1].task_id);
  cr_expect(strstr(d.u.trajs.why[1], "TRAJS.trajs[1]: key \"task_id\" appears twice"), "%s", d.u.trajs.why[1]);
  cr_expect_eq(d.u.trajs.trajs[2].task_id, 44);
  lt_msg_free(&d);
  /* Another key twice: refused, its (one) task named. */
  cr_assert_eq(trajs_with(&fr, 2, "\"reward\":0,", &d), 0, "%s", lt_error_msg());
  cr_expect_eq(d.u.trajs.rc[1], 0);
  cr_assert_eq(d.u.trajs.rc[2], LT_EPROTO);
  cr_expect_eq(d.u.trajs.trajs[2].task_id, 44);
  cr_expect(strstr(d.u.trajs.why[2], "TRAJS.trajs[2]: key \"reward\" appears twice"), "%s", d.u.trajs.why[2]);
  lt_msg_free(&d);
  /* A reward component twice, a frame's field twice. */
  char *h = splice(fr.f[0].data, "\"components\":{", 0, "\"correct\":0,");
  lt_frame_t two[2] = {{h, strlen(h), 0}, fr.f[1]};
  cr_assert_eq(lt_proto_decode(two, 2, &d), 0, "%s", lt_error_msg());
  cr_assert_eq(d.u.trajs.rc[0], LT_EPROTO);
  cr_expect_eq(d.u.trajs.trajs[0].task_id, 42);
  cr_expect(strstr(d.u.trajs.why[0], "TRAJS.trajs[0].components: key \"correct\" appears twice"), "%s",
            d.u.trajs.why[0]);
  lt_msg_free(&d);
  free(h);
  h = splice(fr.f[0].data, "\"count\":6", 0, ",\"count\":6");
  two[0] = (lt_frame_t){h, strlen(h), 0};
  cr_assert_eq(lt_proto_decode(two, 2, &d), LT_EPROTO, "a frame's count twice: its size cannot be told");
  cr_expect(strstr(lt_error_msg(), "TRAJS.trajs[0].frames[0]: key \"count\" appears twice"), "%s", lt_error_msg());
  free(h);
  /* "frames" twice: the whole message. */
  cr_assert_eq(trajs_with(&fr, 1, "\"frames\":[],", &d), LT_EPROTO);
  cr_expect(strstr(lt_error_msg(), "TRAJS.trajs[1]: key \"frames\" appears twice"), "%s", lt_error_msg());
  cr_expect_eq(d.id, 99);
  lt_msg_free(&d);
  /* Past LT_PROTO_MAX_KEYS keys an object is refused before any key is
   * hashed (a peer could choose keys that collide): the whole message. */
  char many[LT_PROTO_MAX_KEYS * 12 + 64] = "";
  for (int k = 0; k <= LT_PROTO_MAX_KEYS; k++)
    snprintf(many + strlen(many), sizeof many - strlen(many), "\"x%d\":0,", k);
  cr_assert_eq(trajs_with(&fr, 1, many, &d), LT_EPROTO);
  cr_expect(strstr(lt_error_msg(), "TRAJS.trajs[1]: more than 256 keys"), "%s", lt_error_msg());
  lt_msg_free(&d);
  lt_frames_free(&fr);

  /* A TRAJ: refused, its task named only when there is one. */
  lt_frames_t one;
  f.m.id = 4;
  f.m.u.traj.task_id = 42;
  cr_assert_eq(lt_proto_encode(&f.m, &one), 0);
  static const char *extra[] = {"\"task_id\":7,", "\"status\":\"ok\","};
  for (int i = 0; i < 2; i++) {
    h = splice(one.f[0].data, "\"task_id\":42,", 0, extra[i]);
    lt_frame_t fs[LT_PROTO_MAX_FRAMES];
    memcpy(fs, one.f, sizeof *fs * (size_t)one.n);
    fs[0] = (lt_frame_t){h, strlen(h), 0};
    cr_assert_eq(lt_proto_decode(fs, one.n, &d), LT_EPROTO, "case %d", i);
    cr_expect(strstr(lt_error_msg(), "TRAJ: key \"") && strstr(lt_error_msg(), "appears twice"), "%s", lt_error_msg());
    cr_expect_eq(d.id, 4);
    cr_expect_eq(d.u.traj.task_id, i ? 42 : 0, "case %d: task %llu", i, (unsigned long long)d.u.traj.task_id);
    lt_msg_free(&d);
    free(h);
  }
  lt_frames_free(&one);
  /* A TASKS element, a header. */
  cr_assert_eq(
      decode_json("{\"v\":1,\"type\":\"TASKS\",\"id\":1,\"tasks\":[{\"task_id\":1,\"group_id\":1,\"env\":\"a\","
                  "\"policy_version\":0,\"max_new_tokens\":4,\"max_context\":8,\"env\":\"b\"}]}",
                  &d),
      LT_EPROTO);
  cr_expect(strstr(lt_error_msg(), "TASKS.tasks[0]: key \"env\" appears twice"), "%s", lt_error_msg());
  cr_assert_eq(decode_json("{\"v\":1,\"type\":\"BYE\",\"id\":3,\"reason\":\"a\",\"reason\":\"b\"}", &d), LT_EPROTO);
  cr_expect(strstr(lt_error_msg(), "BYE: key \"reason\" appears twice"), "%s", lt_error_msg());
  cr_expect_eq(d.id, 3);
  cr_assert_eq(decode_json("{\"v\":1,\"type\":\"BYE\",\"id\":3,\"id\":4}", &d), LT_EPROTO);
  cr_expect_eq(d.id, 0, "an id twice is no id");
  /* Many keys (past the table on the stack): the one twice is still found. */
  lt_buf_t b = {0};
  lt_buf_puts(&b, "{\"v\":1,\"type\":\"BYE\",\"id\":3");
  for (int i = 0; i < 200; i++) lt_buf_printf(&b, ",\"k%d\":%d", i, i);
  lt_buf_puts(&b, ",\"k150\":0}");
  char *s = lt_buf_take(&b);
  cr_assert_eq(decode_json(s, &d), LT_EPROTO);
  cr_expect(strstr(lt_error_msg(), "key \"k150\" appears twice"), "%s", lt_error_msg());
  free(s);
  traj_fixture_free(&f);
}

/* A trajectory is as old as the tokens it trains (what staleness and the buffer's version_min/max are). */
Test(proto, a_trajectory_is_as_old_as_its_trained_tokens) {
  uint8_t mask[5] = {0, 1, 0, 1, 1};
  int32_t versions[5] = {-1, 4, 9, 2, 3};
  lt_traj_t t = {.ntokens = 5, .loss_mask = mask, .versions = versions};
  int64_t lo, hi;
  lt_traj_versions(&t, &lo, &hi);
  cr_expect_eq(lo, 2);
  cr_expect_eq(hi, 4);
  t.ntokens = 1; /* only the prompt's token: nothing trained */
  lt_traj_versions(&t, &lo, &hi);
  cr_expect_eq(lo, -1);
  cr_expect_eq(hi, -1);
}
