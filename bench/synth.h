/* The synthetic run database of the analysis and console benchmarks (bench/analysis.c, bench/ui.c): n
 * trajectories of 64 tokens each, no routing, groups of 8, a third with reward 1, half consumed over steps of 500,
 * and 1000 steps of reward/mean; for the console, also what the learner stores at each of those steps (its
 * per-token values, the groups its dynamic filter dropped). */
#ifndef LT_BENCH_SYNTH_H
#define LT_BENCH_SYNTH_H

#include <math.h>
#include <stdint.h>

#include "buffer/buffer.h"
#include "learner/loss.h"

static inline int bench_synthetic_buffer(const char *path, long n) {
  lt_buffer_t *b;
  if (lt_buffer_open(path, LT_BUF_CREATE, &b) < 0) return -1;
  lt_buffer_meta_set(b, "run", "synthetic");
  enum { T = 64 };
  int32_t tokens[T], versions[T], support[T];
  float logp[T];
  uint8_t mask[T];
  for (int i = 0; i < T; i++) {
    tokens[i] = 100 + i % 150;
    logp[i] = i < 20 ? 0 : -0.1f * (float)(i % 7);
    mask[i] = i >= 20;
    versions[i] = i >= 20 ? 3 : -1;
    support[i] = 0;
  }
  lt_traj_t t = {.domain = "arith",
                 .status = LT_TRAJ_OK,
                 .finish = LT_FINISH_TERMINATED,
                 .reason = "stop",
                 .error = "",
                 .has_reward = 1,
                 .components = cJSON_Parse("{\"correct\":1,\"format\":1}"),
                 .messages = cJSON_Parse("[{\"role\":\"user\",\"content\":\"12+34=\"},"
                                         "{\"role\":\"assistant\",\"content\":\"2+4=6 1+3=4 #### 46\"}]"),
                 .turns = 1,
                 .ntokens = T,
                 .tokens = tokens,
                 .logprobs = logp,
                 .loss_mask = mask,
                 .versions = versions,
                 .support = support,
                 .temperature = -1};
  if (!t.components || !t.messages) return -1;
  lt_traj_meta_t m = {.worker = "w0", .version_min = 3, .version_max = 3, .eval_round = -1};
  for (long i = 0; i < n;) {
    if (lt_buffer_begin(b) < 0) return -1;
    for (int j = 0; j < 4096 && i < n; j++, i++) {
      int dup;
      t.task_id = i + 1;
      t.group_id = i / 8 + 1;
      t.reward = (double)(i % 3 == 0);
      m.time_ms = i;
      m.status = i < n / 2 ? LT_SAMPLE_CONSUMED : LT_SAMPLE_READY;
      if (lt_buffer_traj_insert(b, &t, &m, &dup) < 0) return -1;
    }
    if (lt_buffer_commit(b) < 0) return -1;
  }
  /* Half of them were trained on, 500 per step. */
  if (lt_buffer_begin(b) < 0) return -1;
  int64_t ids[500];
  for (long s = 0; s < n / 2 / 500; s++) {
    for (int k = 0; k < 500; k++) ids[k] = s * 500 + k + 1;
    if (lt_buffer_traj_mark(b, ids, 500, LT_SAMPLE_CONSUMED, s + 1) < 0) return -1;
  }
  if (lt_buffer_commit(b) < 0) return -1;
  for (long s = 1; s <= 1000; s++) lt_buffer_metric(b, s, "reward/mean", 0.5, s);
  lt_buffer_close(b);
  cJSON_Delete(t.components);
  cJSON_Delete(t.messages);
  return 0;
}

/* Uniform in [0, 1) from a 64-bit LCG: token values with a real run's spread, so that their blobs compress like
 * the learner's (constant arrays would shrink to nothing). */
static inline float bench_synthetic_uniform(uint64_t *s) {
  *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
  return (float)(*s >> 40) / (float)(1 << 24);
}

/* What the learner of bench_synthetic_buffer's run (n trajectories) stores at each of its steps, as the step
 * driver does (one transaction per step): a token_values row for each trajectory the step consumed (x_t near 1 on
 * the 44 loss tokens, one in 200 outside the token bounds; log π_old, the group advantage, entropy), and one
 * group of 8 of the unconsumed half marked filtered at that step (the dynamic filter's zero-variance groups).
 * The filtered tasks are n/2 + 1 .. n/2 + 8 × steps, step s holding those from n/2 + 8(s − 1) + 1. */
static inline int bench_synthetic_learner(const char *path, long n) {
  enum { T = 64, S = 500, LOSS0 = 20 };
  lt_buffer_t *b;
  if (lt_buffer_open(path, 0, &b) < 0) return -1;
  static float ratio[S][T], logp_old[S][T], adv[S][T], entropy[S][T];
  static uint8_t flags[S][T];
  static const int32_t spans[2] = {0, T};
  lt_token_values_row_t rows[S];
  uint64_t seed = 1;
  int rc = 0;
  for (long s = 0; s < n / 2 / S && rc == 0; s++) {
    for (int k = 0; k < S; k++) {
      long i = s * S + k; /* the trajectory's index in bench_synthetic_buffer: task i + 1, reward i % 3 == 0 */
      double lsum = 0;
      for (int t = 0; t < T; t++) {
        float x = expf(0.02f * (bench_synthetic_uniform(&seed) - 0.5f));
        int loss = t >= LOSS0, tok_ok = bench_synthetic_uniform(&seed) > 0.005f;
        ratio[k][t] = loss ? (tok_ok ? x : 0.4f) : 0;
        logp_old[k][t] = -3 * bench_synthetic_uniform(&seed);
        adv[k][t] = loss ? (i % 3 == 0 ? 1.41f : -0.71f) : 0;
        entropy[k][t] = 2 * bench_synthetic_uniform(&seed);
        if (loss) lsum += log(ratio[k][t]);
      }
      double g = exp(lsum / (T - LOSS0));
      int ok = g >= 0.996 && g <= 1.001;
      for (int t = 0; t < T; t++) {
        int loss = t >= LOSS0, tok_ok = ratio[k][t] >= 0.5f && ratio[k][t] <= 2;
        flags[k][t] = !loss ? 0
                            : (uint8_t)(LT_TOKV_LOSS | (tok_ok ? LT_TOKV_TOKEN_OK : 0) | (ok ? LT_TOKV_TRAJ_OK : 0) |
                                        (tok_ok && ok ? LT_TOKV_KEPT : 0));
      }
      rows[k] = (lt_token_values_row_t){.task_id = i + 1,
                                        .step = s + 1,
                                        .loss =
                                            "{\"objective\":\"mispo\","
                                            "\"token_bounds\":[0.5,2],\"traj_bounds\":[0.996,1.001],\"clip\":[0.8,1.2],"
                                            "\"tis_cap\":2,\"delta\":0}",
                                        .traj_ratio = g,
                                        .traj_ok = ok,
                                        .ntokens = T,
                                        .nspans = 1,
                                        .spans = spans,
                                        .ratio = ratio[k],
                                        .logp_old = logp_old[k],
                                        .adv = adv[k],
                                        .entropy = entropy[k],
                                        .flags = flags[k]};
    }
    int64_t filtered[8];
    for (int k = 0; k < 8; k++) filtered[k] = n / 2 + 8 * s + k + 1;
    if ((rc = lt_buffer_begin(b)) < 0) break;
    if ((rc = lt_buffer_token_values_put(b, rows, S)) == 0 &&
        (rc = lt_buffer_traj_mark(b, filtered, 8, LT_SAMPLE_FILTERED, s + 1)) == 0)
      rc = lt_buffer_commit(b);
    else lt_buffer_rollback(b);
  }
  lt_buffer_close(b);
  return rc < 0 ? -1 : 0;
}

#endif
