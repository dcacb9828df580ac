/* Internals shared by the files of train/ (nothing outside train/ includes this). */
#ifndef LT_TRAIN_INTERNAL_H
#define LT_TRAIN_INTERNAL_H

#include "text/chat_template.h"
#include "train/train.h"

/* pack.c: trainer settings from the config, trajectories packed for a step */
typedef struct {
  int n;         /* sequences packed (a trajectory of several contexts packs each) */
  size_t cap;    /* room for, in the per-sequence arrays */
  int *start;    /* [n + 1] */
  int *traj;     /* [n] the trajectory (its index in the batch) each sequence is a context of */
  int32_t *off;  /* [n] where each sequence's tokens start in its trajectory's */
  int32_t *tlen; /* [n] its trajectory's tokens */
  int32_t *tokens, *support;
  int32_t *sids; /* Keep-Sampling-Mask ids, support[i] of them for token i */
  size_t nsids, sids_cap;
  float *logp; /* rollout logprobs */
  float *temp; /* temperature each token was sampled at */
  uint8_t *mask, *trunc;
  uint8_t *no_support;             /* per trajectory: its sampling sets cannot be reproduced (docs/losses.md) */
  uint8_t *no_route;               /* per trajectory: no routing records for this model (placeholder ids packed) */
  uint8_t *skip;                   /* per trajectory: left out of the actor loss (lt__packed_batch) */
  int skip_sampling, skip_routing; /* how many, for each reason */
  uint16_t *route;
  double *reward;
  float *kl;                   /* per trajectory: its domain's KL coefficient (envs.<d>.kl_coef) */
  int64_t *group, *ids, *vmin; /* per trajectory: group id, task id, first policy version */
  int64_t *bad;                /* [nbad] task ids left out: unusable (quarantined) */
  char (*bad_why)[160];        /* [nbad] why */
  int nbad;
  int has_route;
  /* what the rows say */
  double reward_mean, reward_min, reward_max, trunc_rate, turns_mean, route_rollout, gen_tokens;
  int ndom;
  char dom[LT_TRAIN_MAX_DOMAINS][64];
  double dom_reward[LT_TRAIN_MAX_DOMAINS], dom_min[LT_TRAIN_MAX_DOMAINS], dom_max[LT_TRAIN_MAX_DOMAINS];
} lt__packed_t;

int lt__trainer_cfg(const lt_config_t *c, lt_trainer_cfg_t *tc);
/* scheduler.dynamic_filter, or its default for learner.objective. */
int lt__dynamic_filter(const lt_config_t *c);
/* Group-relative advantages without a critic: grpo, or gspo with learner.gspo.advantage "group". */
int lt__group_advantages(const lt_config_t *c);
/* Writes the policy as the version in dir (train/publish.c): its weights in dtype; with an adapter, the adapter in
 * PEFT's layout naming `base` (the run's first policy) and base's config.json, or (merged) the merged weights. */
int lt__publish_version(const lt_model_t *policy, const char *dir, lt_st_dtype dtype, int merged, const char *base);
int lt__learner_cuda(const lt_config_t *c,
                     const char *cpu_only); /* learner.device → 1 (CUDA), 0 (CPU) or < 0; cpu_only:
                                                                    what keeps this run on the CPU, or NULL */
/* The order a step trains its trajectories in, so that its contiguous actor
 * and critic mini-batches are random draws, not arrival order: the set
 * sorted, then shuffled from (seed, step).  The learner and replay call it
 * alike, so replay sees the step's very mini-batches. */
void lt__batch_shuffle(int64_t *ids, int n, uint64_t seed, int64_t step);
/* c: the run's rollout.* settings, which stand for what a TRAJ did not record. */
int lt__batch_pack(lt_buffer_t *b, const lt_model_t *pol, const lt_config_t *c, const int64_t *ids, int n,
                   lt__packed_t *p);
/* The batch under the switches; a trajectory that lacks what a switch needs is
 * left out of the actor loss (counted), not the switch for the whole batch. */
void lt__packed_batch(lt__packed_t *p, int keep_routing, int keep_sampling_mask, lt_train_batch_t *b);
void lt__packed_free(lt__packed_t *p);

/* tokvals.c: what the learner computed for each token, to the buffer's token_values table */
/* The objective and the bounds its values are tested against, as the JSON stored with them. */
void lt__loss_json(const lt_loss_cfg_t *loss, char *out, size_t cap);
/* One row per trajectory of the packed batch p with the values v the learner computed for it at `step`
 * (recomputed: by replay, not the step). */
int lt__token_values_store(lt_buffer_t *b, const lt__packed_t *p, const lt_token_values_t *v, int64_t step,
                           int recomputed, const char *loss_json);

/* sft.c: one demonstration (messages, then the assistant's response) as a training sequence: its ids and loss
 * mask (1 on what the policy generates: the response through its stop token, and with assistant_turns the
 * messages' assistant turns), rendered through chat, the checkpoint's own template (lt_chat_render_ids), or
 * as ChatML when NULL.  *ids and *mask are malloc'd. */
int lt__sft_example(const lt_tokenizer_t *tok, const lt_chat_template_t *chat, const cJSON *messages,
                    const char *response, int assistant_turns, int32_t **ids, uint8_t **mask, int *n);

/* select.c: the step's batch, from the buffer's ready trajectories (settings read by the step driver) */
typedef struct {
  int batch, group, dynfilter, max_stale;
  int critic_returns; /* a truncated member's return is V(s_T): equal rewards do not make a group zero-variance */
  const struct lt__domains *doms;
  int64_t version, step; /* the policy version now, the last step done */
} lt__select_t;
/* Marks the stale trajectories (*marked_stale) and the zero-variance groups (*filtered) with step + 1 and
 * chooses complete groups into ids (room for batch + the largest group); returns how many, 0 while a full
 * batch is not there yet (flush: no more data will come, take what there is). */
int lt__select_batch(lt_buffer_t *b, const lt__select_t *s, int flush, int64_t *ids, int *marked_stale, int *filtered);
/* retrain.c: the trajectories the retrained run's step `step` consumed, in the order it trained them (its
 * quarantined ones shuffled with them, then left out, as the learner did), malloc'd into *ids; their number, or
 * an error naming a missing trajectory. */
int lt__retrain_batch(lt_buffer_t *src, int64_t step, uint64_t seed, int64_t **ids);

/* domains.c: per-domain settings (envs.<d>.group_size, kl_coef, batch_share) */
typedef struct {
  char name[64];
  int group;    /* samples per prompt */
  double share; /* quota of a batch (fraction), when quotas are on */
} lt__domain_t;
typedef struct lt__domains {
  int n, quotas; /* quotas: some envs.<d>.batch_share is set */
  lt__domain_t *d;
} lt__domains_t;
int lt__domains_read(const lt_config_t *c, int group_size, lt__domains_t *out);
int lt__domains_find(const lt__domains_t *ds, const char *name); /* index, or -1 */
void lt__domains_free(lt__domains_t *ds);
/* envs.<domain>.kl_coef, else learner.kl_coef. */
float lt__domain_kl(const lt_config_t *c, const char *domain);
/* 1 when some domain trains with a KL term (the trainer then keeps a reference policy). */
int lt__domains_any_kl(const lt_config_t *c);

#endif
