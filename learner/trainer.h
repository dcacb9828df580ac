/* One RL learner step on a batch of trajectories (docs/losses.md):
 *   π_old logprobs with the pre-update weights, critic values V_φ(s_t),
 *   truncation-aware returns (R̂ = V_φ(s_T) for truncated trajectories),
 *   Â_t = R̂ − V_φ(s_t) (γ = λ = 1; loss.group_adv — GRPO, GSPO's group form: group baselines, no critic),
 *   one epoch of the actor objective over actor_minibatches, and the critic
 *   over critic_minibatches with its own optimizer.
 * Also the supervised step for warm starts, and the full checkpoint (policy,
 * critic, optimizers, RNG, counters) that --resume restores exactly. */
#ifndef LT_LEARNER_TRAINER_H
#define LT_LEARNER_TRAINER_H

#include <stddef.h>
#include <stdint.h>

#include "learner/loss.h"
#include "learner/lora.h"
#include "learner/model.h"
#include "learner/optim.h"
#include "util/cpus.h"

typedef struct {
  lt_loss_cfg_t loss;
  int actor_minibatches, critic_minibatches;
  lt_optim_cfg_t actor_opt, critic_opt;
  int group_std; /* group advantages (loss.group_adv): divide by the group's std */
  int threads;
  lt_cpus_t cpus;            /* learner.cpus: the CPUs its threads (the BLAS's too) run on; cpus.n 0: not pinned */
  int cuda;                  /* 1: forward, backward and AdamW on GPU 0 (learner/gpu.h), whose copy of
                                each model is the authority; the host's is brought up to date where a
                                checkpoint or a published version reads it (lt_trainer_policy,
                                lt_trainer_save) */
  int gpu_bf16;              /* CUDA: matrix products with bf16 operands, fp32 accumulation (learner.gpu.bf16) */
  int gpu_recompute;         /* learner.gpu.recompute: lt_gpu_set_recompute */
  lt_lora_cfg_t lora;        /* learner.lora: rank > 0 trains adapters on the frozen policy (learner/lora.h) */
  lt_lora_cfg_t critic_lora; /* learner.critic.lora: the critic's (rank 0: it trains fully) */
  int ref_base;              /* with lora: the KL reference is the policy's base, its adapters off (no model of
                                its own) */
} lt_trainer_cfg_t;

typedef struct lt_trainer lt_trainer_t;

/* What a step computed for each token of its batch, for inspection (lt_train_batch_t.values): the very numbers
 * its loss used, at the batch's packed positions.  Filled on every rank's whole batch (the ranks' shares are
 * gathered), on the CPU and the CUDA learner alike (the loss runs on the host). */
typedef struct {
  int ntokens, nseq; /* sizes it was allocated for */
  float *ratio;      /* [N] x_t = π_old/π_rollout on loss-mask tokens (0 elsewhere) */
  float *logp_old;   /* [N] log π_old: the policy before the update */
  float *adv;        /* [N] Â_t (0 off the loss mask) */
  float *entropy;    /* [N] the policy's entropy at t (π_old's) */
  uint8_t *flags;    /* [N] LT_TOKV_* (learner/loss.h) of the actor's loss tokens, 0 elsewhere */
  float *traj_ratio; /* [nseq] its trajectory's geometric-mean x_t, the trajectory mask's test (NaN: no loss token) */
} lt_token_values_t;

int lt_token_values_alloc(lt_token_values_t *v, int ntokens, int nseq);
void lt_token_values_free(lt_token_values_t *v);

/* A batch: packed sequences with what the workers recorded. */
typedef struct {
  int nseq;
  const int *start;           /* [nseq + 1] */
  const int32_t *tokens;      /* [N] */
  const float *logp_rollout;  /* [N] */
  const uint8_t *mask;        /* [N] */
  const int32_t *support;     /* [N] Keep Sampling Mask set sizes (lt_batch_t), or NULL: full softmax */
  const int32_t *support_ids; /* the sets' ids, support[i] for token i, in token order */
  const float *temperature;   /* [N] temperature each token was sampled at, or NULL: 1 */
  const uint8_t *actor_skip;  /* [nseq] or NULL: 1 leaves the sequence out of the actor loss (its sampling
                                distribution cannot be reproduced); the critic still trains on it */
  const uint16_t *route_ids;  /* [N][moe_layers][topk] or NULL */
  const double *reward;       /* [nseq] */
  const uint8_t *truncated;   /* [nseq] */
  const int64_t *group;       /* [nseq] group ids */
  const float *kl_coef;       /* [nseq] KL coefficient of each sequence (its domain's), or NULL: the loss's */
  const int *traj;            /* [nseq] the trajectory of each sequence, or NULL: each sequence is one.  A trajectory's
                                contexts are consecutive sequences with the same value and the same reward, group and
                                truncation; the trajectory is the unit of the objectives, group baselines and
                                bootstrapping (lt_loss_in_t), and mini-batches never split one */
  lt_token_values_t *values;  /* out, or NULL (nothing collected, no cost): what lt_trainer_step or
                                lt_trainer_replay computed for each token, sized for this batch */
} lt_train_batch_t;

typedef struct {
  double actor_loss, critic_loss;
  double actor_grad_norm, critic_grad_norm;
  double token_accept, traj_accept; /* MIS acceptance ratios (token mask, trajectory mask) */
  double kept_fraction;             /* loss tokens that passed every mask */
  double mismatch, kl_rollout, clip_frac, kl_ref;
  double entropy;            /* mean policy entropy on loss tokens */
  double routing_confidence; /* learner-side Σk, -1 for dense */
  double value_mean, return_mean, adv_mean, adv_std;
  double adv_min, adv_max; /* Â's spread over the loss tokens (0 without any) */
  double lr, critic_lr;
  int tokens, trajectories;  /* trajectories: whole ones, whatever their contexts */
  int actor_skipped;         /* sequences actor_skip left out of the actor loss */
  int actor_skipped_updates; /* actor mini-batches with no kept token: no optimizer update at all */
} lt_step_stats_t;

/* policy: the trainer takes ownership; critic may be NULL (initialised from
 * the policy's trunk when the objective needs one); ref may be NULL (no KL,
 * or cfg->ref_base).  With cfg->lora (cfg->critic_lora) the policy (critic)
 * trains an adapter: the one it carries (lt_model_load of an adapter version),
 * which must have those settings, else a new one (lt_lora_init). */
int lt_trainer_create(const lt_trainer_cfg_t *cfg, lt_model_t *policy, lt_model_t *critic, lt_model_t *ref,
                      lt_trainer_t **out);
void lt_trainer_free(lt_trainer_t *t);
/* The policy's host copy, brought up to date with the device's (a copy from the GPU on the CUDA learner): what a
 * published version or an in-process engine reads.  Changes made to it reach the learner only through
 * lt_trainer_load. */
lt_model_t *lt_trainer_policy(lt_trainer_t *t);
/* The policy's config (no copy from a device). */
const lt_model_config_t *lt_trainer_model_config(const lt_trainer_t *t);
int64_t lt_trainer_steps(const lt_trainer_t *t);
/* Bytes of optimizer state (actor and critic) this rank holds: with several
 * learner ranks, its ZeRO-1 shard. */
size_t lt_trainer_optim_bytes(const lt_trainer_t *t);
/* Changes the actor's learning rate scale (guardrails). */
void lt_trainer_scale_lr(lt_trainer_t *t, double factor);

int lt_trainer_step(lt_trainer_t *t, const lt_train_batch_t *b, lt_step_stats_t *st);
/* What a step on B would see at the current weights, without updating:
 * π_old, masks, mismatch, advantages and the loss it starts from, under
 * `loss` (NULL: the trainer's own settings; another one asks "what if"). */
int lt_trainer_replay(lt_trainer_t *t, const lt_train_batch_t *b, const lt_loss_cfg_t *loss, lt_step_stats_t *st);
/* Supervised step: mean negative log-likelihood of the masked tokens. */
int lt_trainer_sft_step(lt_trainer_t *t, const lt_train_batch_t *b, double *loss);

/* Full state in dir: policy/, critic/, optimizer files, trainer.json. */
int lt_trainer_save(lt_trainer_t *t, const char *dir); /* brings GPU state to the host first */
int lt_trainer_load(lt_trainer_t *t, const char *dir);

#endif
