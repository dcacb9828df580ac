/* Internals shared by the files of train/ (nothing outside train/ includes this). */
#ifndef LT_TRAIN_INTERNAL_H
#define LT_TRAIN_INTERNAL_H

#include "train/train.h"

/* batch.c: trainer settings from the config, trajectories packed for a step */
typedef struct {
  int n, cap;
  int *start;                /* [n + 1] */
  int32_t *tokens, *support;
  float *logp;               /* rollout logprobs */
  uint8_t *mask, *trunc;
  uint16_t *route;
  double *reward;
  int64_t *group, *ids, *vmin; /* per trajectory: group id, task id, first policy version */
  int has_support, has_route;
  /* what the rows say */
  double reward_mean, trunc_rate, route_rollout, gen_tokens;
  int ndom;
  char dom[LT_TRAIN_MAX_DOMAINS][64];
  double dom_reward[LT_TRAIN_MAX_DOMAINS];
} lt__packed_t;

int lt__trainer_cfg(const lt_config_t *c, lt_trainer_cfg_t *tc);
int lt__learner_cuda(const lt_config_t *c, int muon); /* learner.device → 1 (CUDA), 0 (CPU) or < 0 */
int lt__batch_pack(lt_buffer_t *b, const lt_model_t *pol, const int64_t *ids, int n, lt__packed_t *p);
void lt__packed_batch(const lt__packed_t *p, int keep_routing, int keep_sampling_mask, lt_train_batch_t *b);
void lt__packed_free(lt__packed_t *p);

#endif
