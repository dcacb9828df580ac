/* The worker's outbox: the TRAJS it builds stay within the caps, every
 * trajectory leaves once and in order, and a refused TRAJS is told once. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "proto/proto.h"
#include "rollout/outbox.h"
#include "util/error.h"

#define MAXT 512

/* What the outbox sent: per message its type, bytes and tasks in order. */
typedef struct {
  int n;
  lt_msg_type type[MAXT];
  size_t bytes[MAXT];
  int ntrajs[MAXT];
  uint64_t id[MAXT];
  uint64_t tasks[MAXT];
  int ntasks;
} sent_t;

static int capture(const lt_frame_t *fr, int n, int ntrajs, void *ud) {
  sent_t *s = ud;
  cr_assert_lt(s->n, MAXT);
  size_t bytes = 0;
  for (int i = 0; i < n; i++) bytes += fr[i].len;
  lt_msg_t m;
  cr_assert_eq(lt_proto_decode(fr, n, &m), 0, "the outbox sent a malformed message: %s", lt_error_msg());
  int k = m.type == LT_MSG_TRAJS ? m.u.trajs.n : 1;
  cr_assert_eq(k, ntrajs, "a message of %d trajectories reported as %d", k, ntrajs);
  for (int i = 0; i < k; i++) {
    cr_assert(m.type == LT_MSG_TRAJ || m.u.trajs.rc[i] == 0, "%s", m.u.trajs.why[i]);
    s->tasks[s->ntasks++] = m.type == LT_MSG_TRAJS ? m.u.trajs.trajs[i].task_id : m.u.traj.task_id;
  }
  s->type[s->n] = m.type;
  s->bytes[s->n] = bytes;
  s->ntrajs[s->n] = k;
  s->id[s->n++] = m.id;
  lt_msg_free(&m);
  return 0;
}

/* An encoded TRAJ of task `task` with T tokens and `pad` more bytes of reason. */
static void traj(uint64_t task, int T, size_t pad, lt_frames_t *out) {
  int32_t *tok = calloc((size_t)T + 1, 4), *ver = calloc((size_t)T + 1, 4);
  float *lp = calloc((size_t)T + 1, 4);
  uint8_t *mask = calloc((size_t)T + 1, 1);
  char *reason = malloc(pad + 2);
  memset(reason, 'r', pad + 1);
  reason[pad + 1] = 0;
  for (int i = 0; i < T; i++) ver[i] = -1;
  lt_msg_t m = {.type = LT_MSG_TRAJ,
                .id = task,
                .u.traj = {.task_id = task,
                           .group_id = 1,
                           .domain = "d",
                           .status = LT_TRAJ_OK,
                           .finish = LT_FINISH_TERMINATED,
                           .reason = reason,
                           .error = "",
                           .has_reward = 1,
                           .reward = 0,
                           .ntokens = T,
                           .tokens = tok,
                           .logprobs = lp,
                           .loss_mask = mask,
                           .versions = ver,
                           .temperature = -1}};
  lt_frames_t fr;
  cr_assert_eq(lt_proto_encode(&m, &fr), 0, "%s", lt_error_msg());
  /* The frames borrow the arrays: keep owned copies, as the spool does. */
  for (int i = 0; i < fr.n; i++) {
    void *copy = malloc(fr.f[i].len + 1);
    memcpy(copy, fr.f[i].data, fr.f[i].len);
    if (fr.f[i].owned) free(fr.f[i].data);
    fr.f[i] = (lt_frame_t){copy, fr.f[i].len, 1};
  }
  *out = fr;
  free(tok), free(ver), free(lp), free(mask), free(reason);
}

static size_t bytes_of(const lt_frames_t *fr) {
  size_t b = 0;
  for (int i = 0; i < fr->n; i++) b += fr->f[i].len;
  return b;
}

/* A trajectory of task `task` of exactly `want` bytes (header and arrays). */
static void traj_of_bytes(uint64_t task, size_t want, lt_frames_t *out) {
  traj(task, 1, 0, out);
  int T = (int)((want - bytes_of(out)) / 13) + 1; /* 13 bytes a token: tokens, logprobs, mask, versions */
  for (;; T--) {
    lt_frames_free(out);
    traj(task, T, 0, out);
    if (bytes_of(out) <= want) break;
  }
  size_t pad = want - bytes_of(out);
  lt_frames_free(out);
  traj(task, T, pad, out);
  cr_assert_eq(bytes_of(out), want);
}

/* A batching outbox whose messages go into *s. */
static lt_outbox_t *capturing(sent_t *s, uint64_t *seq) {
  memset(s, 0, sizeof *s);
  lt_outbox_t *o;
  cr_assert_eq(lt_outbox_create(capture, s, seq, &o), 0);
  lt_outbox_set_batch(o, 1);
  return o;
}

static void add(lt_outbox_t *o, uint64_t task, const lt_frames_t *fr) {
  cr_assert_eq(lt_outbox_add(o, task, fr->f, fr->n), 0, "%s", lt_error_msg());
}

/* Review of issue 22: many large ready trajectories leave in several TRAJS,
 * each at most LT_PROTO_TRAJS_MAX_BYTES with its envelope counted (two whose
 * frames fill the cap exactly do not go together); one larger than the cap
 * leaves alone as a TRAJ; every trajectory once, in order. */
Test(outbox, batches_stay_within_the_byte_cap) {
  static sent_t s;
  uint64_t seq = 100;
  lt_outbox_t *o = capturing(&s, &seq);
  enum { N = 40 };
  lt_frames_t fr[N + 3];
  uint64_t want[N + 3];
  int k = 0;
  for (int i = 0; i < N; i++, k++) traj(want[k] = 1 + (uint64_t)k, 3000 + 1000 * (i % 7), 0, &fr[k]); /* 39..117 KB */
  traj(want[k] = 1 + (uint64_t)k, (int)(LT_PROTO_TRAJS_MAX_BYTES / 13) + 10, 0, &fr[k]); /* past the cap alone */
  k++;
  /* Two whose frames add up to the cap exactly: the TRAJS envelope would take them past it. */
  traj_of_bytes(want[k] = 1 + (uint64_t)k, LT_PROTO_TRAJS_MAX_BYTES / 2, &fr[k]);
  k++;
  traj_of_bytes(want[k] = 1 + (uint64_t)k, LT_PROTO_TRAJS_MAX_BYTES - LT_PROTO_TRAJS_MAX_BYTES / 2, &fr[k]);
  k++;
  for (int i = 0; i < k; i++) add(o, want[i], &fr[i]);
  cr_assert_eq(lt_outbox_flush(o), 0);
  cr_assert_eq(s.ntasks, k, "%d trajectories left, %d were added", s.ntasks, k);
  for (int i = 0; i < k; i++)
    cr_expect_eq(s.tasks[i], want[i], "trajectory %d is task %llu", i, (unsigned long long)s.tasks[i]);
  int trajs = 0, big = 0;
  for (int i = 0; i < s.n; i++) {
    if (s.bytes[i] > LT_PROTO_TRAJS_MAX_BYTES) {
      cr_expect_eq(s.type[i], LT_MSG_TRAJ, "message %d: a %s of %zu bytes, past the cap", i,
                   lt_msg_type_name(s.type[i]), s.bytes[i]);
      big++;
    }
    trajs += s.type[i] == LT_MSG_TRAJS;
  }
  cr_expect_eq(big, 1, "%d messages past the cap (only the large trajectory, alone)", big);
  cr_expect_geq(trajs, 3, "%d TRAJS for %d trajectories of ~3 MiB", trajs, N);
  cr_expect_eq(s.type[s.n - 1], LT_MSG_TRAJ, "the half-cap pair did not go alone, a TRAJ each");
  cr_expect_eq(s.type[s.n - 2], LT_MSG_TRAJ);
  for (int i = 0; i < k; i++) lt_frames_free(&fr[i]);
  lt_outbox_free(o);
}

/* At most LT_PROTO_MAX_TRAJS in one TRAJS; without batching a TRAJ each; a
 * refused TRAJS tells its tasks once, a TRAJ or an unknown id is not one. */
Test(outbox, count_cap_no_batching_and_refusals) {
  static sent_t s;
  uint64_t seq = 100;
  lt_outbox_t *o = capturing(&s, &seq);
  lt_frames_t fr[150];
  for (int i = 0; i < 150; i++) {
    traj(1 + (uint64_t)i, 4, 0, &fr[i]);
    add(o, 1 + (uint64_t)i, &fr[i]);
  }
  cr_assert_eq(lt_outbox_flush(o), 0);
  cr_assert_eq(s.n, 3);
  cr_expect_eq(s.ntrajs[0], LT_PROTO_MAX_TRAJS);
  cr_expect_eq(s.ntrajs[1], LT_PROTO_MAX_TRAJS);
  cr_expect_eq(s.ntrajs[2], 150 - 2 * LT_PROTO_MAX_TRAJS);
  cr_expect_eq(s.id[0], 101, "a TRAJS takes the sender's next id");
  uint64_t tasks[LT_PROTO_MAX_TRAJS];
  cr_assert_eq(lt_outbox_refused(o, s.id[1], tasks), LT_PROTO_MAX_TRAJS);
  for (int i = 0; i < LT_PROTO_MAX_TRAJS; i++) cr_expect_eq(tasks[i], 1 + LT_PROTO_MAX_TRAJS + (uint64_t)i);
  cr_expect_eq(lt_outbox_refused(o, s.id[1], tasks), 0, "a second ERROR for the same TRAJS sends nothing again");
  cr_expect_eq(lt_outbox_refused(o, 7, tasks), LT_ENOENT);
  cr_expect_eq(lt_outbox_refused(o, 0, tasks), LT_ENOENT);
  lt_outbox_set_batch(o, 0);
  add(o, 1, &fr[0]);
  add(o, 2, &fr[1]);
  cr_expect_eq(s.n, 5, "without batching, each TRAJ leaves as it is added");
  cr_expect_eq(s.type[4], LT_MSG_TRAJ);
  cr_expect_eq(lt_outbox_refused(o, s.id[4], tasks), LT_ENOENT, "a TRAJ is not a TRAJS");
  cr_assert_eq(lt_outbox_flush(o), 0);
  cr_expect_eq(s.n, 5);
  for (int i = 0; i < 150; i++) lt_frames_free(&fr[i]);
  lt_outbox_free(o);
}
