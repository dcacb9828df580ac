/* The synthetic run database of the analysis and console benchmarks (bench/analysis.c, bench/ui.c): n
 * trajectories of 64 tokens each, no routing, groups of 8, a third with reward 1, half consumed over steps of 500,
 * and 1000 steps of reward/mean. */
#ifndef LT_BENCH_SYNTH_H
#define LT_BENCH_SYNTH_H

#include "buffer/buffer.h"

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
  lt_traj_t t = {.domain = "arith", .status = LT_TRAJ_OK, .finish = LT_FINISH_TERMINATED, .reason = "stop",
                 .error = "", .has_reward = 1, .components = cJSON_Parse("{\"correct\":1,\"format\":1}"),
                 .messages = cJSON_Parse("[{\"role\":\"user\",\"content\":\"12+34=\"},"
                                         "{\"role\":\"assistant\",\"content\":\"2+4=6 1+3=4 #### 46\"}]"),
                 .turns = 1, .ntokens = T, .tokens = tokens, .logprobs = logp, .loss_mask = mask,
                 .versions = versions, .support = support, .temperature = -1};
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

#endif
