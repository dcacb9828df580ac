/* Policy objectives (MIS-PO, PPO, GRPO, GSPO), advantages and the value loss
 * (docs/losses.md).  Everything works per token on packed sequences, takes
 * log-probabilities in and gives dLoss/dlogπθ out, so the model's backward
 * (CPU or CUDA) turns that into parameter gradients. */
#ifndef LT_LEARNER_LOSS_H
#define LT_LEARNER_LOSS_H

#include <stdint.h>

typedef enum { LT_OBJ_MISPO = 0, LT_OBJ_PPO, LT_OBJ_GRPO, LT_OBJ_GSPO, LT_OBJ_TIS, LT_OBJ_N } lt_objective;

typedef struct {
  lt_objective obj;
  float tok_lo, tok_hi;   /* token mask on x_t = π_old/π_rollout (MIS-PO, GSPO; default [0.5, 2]) */
  float traj_lo, traj_hi; /* trajectory mask on the geometric mean of x_t (default [0.996, 1.001]) */
  float clip_lo, clip_hi; /* ratio clip: PPO/GRPO [1−ε, 1+ε] with ε = 0.2; GSPO ε = 1e-4 */
  float delta;            /* GRPO off-policy sequence masking threshold (seed 002 eq. 9); ≤ 0: off */
  float kl_coef;          /* unbiased KL to the reference policy (seed 002 eq. 7); 0: off */
  float tis_cap;          /* TIS: the train–rollout weight min(x_t, C) (seed 001 App. D.2.4); default 2 */
  int group_adv;          /* group-relative advantages, no critic, each sequence weighs 1/sequences:
                           * GRPO, and GSPO with learner.gspo.advantage "group" (seed 004 §3.3.1 eq. 1) */
} lt_loss_cfg_t;

/* Defaults of the objective: the seeds' hyper-parameters. */
void lt_loss_cfg_default(lt_loss_cfg_t *cfg, lt_objective obj);
int lt_objective_parse(const char *s); /* "mispo"|"ppo"|"grpo"|"gspo"|"tis", -1 if unknown */
const char *lt_objective_name(lt_objective o);

typedef struct {
  int nseq;
  const int *start;          /* [nseq + 1] packed sequences */
  const float *logp;         /* [N] log πθ of each token (current forward) */
  const float *logp_old;     /* [N] log π_old (learner before the update); NULL: = logp */
  const float *logp_rollout; /* [N] log π_rollout (from the workers) */
  const float *logp_ref;     /* [N] log π_ref for the KL term, or NULL */
  const float *adv;          /* [N] advantage of each token */
  const uint8_t *mask;       /* [N] 1: a generated token that is trained */
  const float *kl_coef;      /* [nseq] KL coefficient of each sequence (envs.<d>.kl_coef), or NULL: cfg->kl_coef */
  const int *traj;           /* [nseq] the trajectory of each sequence, or NULL: each sequence is one.  The contexts
                                of one trajectory are consecutive sequences with the same value; the trajectory is
                                the unit of the MIS-PO trajectory mask, GRPO's 1/(G·|o|), GSPO's sequence ratio and
                                δ-mask */
} lt_loss_in_t;

typedef struct {
  double loss;
  int tokens;           /* loss-mask tokens */
  int tokens_kept;      /* loss tokens that pass every mask (and, for clipped objectives, are not clipped) */
  int tokens_in_bounds; /* loss tokens whose x_t passes the token mask */
  int trajs;            /* trajectories with at least one loss token */
  int trajs_kept;       /* ... whose trajectory mask passes */
  double mismatch;      /* mean |log x_t| = mean |log π_old − log π_rollout| over loss tokens */
  double kl_rollout;    /* mean (x_t − 1 − log x_t): KL(π_rollout ‖ π_old) estimate (k3) */
  double clip_frac;     /* fraction of loss tokens whose clipped term was active (TIS: whose weight was capped) */
  double kl_ref;        /* mean unbiased KL to the reference (when kl_coef > 0) */
} lt_loss_stats_t;

/* Computes the loss and dlogp[N] = dLoss/dlogπθ (zero outside the mask).
 * MIS-PO, PPO, TIS and GSPO are normalised by the loss tokens of this call; with
 * group_adv (GRPO, GSPO's group form) each trajectory's tokens are averaged, then
 * the trajectories (seed 002 eq. 5, seed 004 eq. 1).  A trajectory's contexts
 * must all be in the call (the trainer's mini-batches and ranks split between
 * trajectories). */
int lt_loss_compute(const lt_loss_cfg_t *cfg, const lt_loss_in_t *in, float *dlogp, lt_loss_stats_t *st);

/* What the objective did with each loss token, as bits of a flag byte. */
enum {
  LT_TOKV_LOSS = 1,     /* in the loss mask (a generated token the actor trains on) */
  LT_TOKV_TOKEN_OK = 2, /* x_t = π_old/π_rollout within the token bounds [tok_lo, tok_hi] */
  LT_TOKV_TRAJ_OK = 4,  /* its trajectory's geometric-mean x within [traj_lo, traj_hi] */
  LT_TOKV_CLIPPED = 8,  /* PPO/GRPO/GSPO: the clipped term was active; TIS: the weight was capped at C */
  LT_TOKV_KEPT = 16,    /* contributed to the loss (tokens_kept) */
};
/* Optional outputs of lt_loss_compute_marked; a NULL member is not written. */
typedef struct {
  uint8_t *flags;    /* [N] at the tokens' positions (as dlogp): LT_TOKV_* of loss tokens, 0 elsewhere */
  float *traj_ratio; /* [nseq] each sequence's trajectory's geometric-mean x over its loss tokens (what the
                        trajectory mask tests whatever the objective); NaN when it has none */
} lt_loss_marks_t;
/* lt_loss_compute, also writing *marks (NULL: lt_loss_compute). */
int lt_loss_compute_marked(const lt_loss_cfg_t *cfg, const lt_loss_in_t *in, float *dlogp, lt_loss_stats_t *st,
                           const lt_loss_marks_t *marks);

/* Per-token weights of the token-local objectives, so that a fused kernel can
 * finish the loss row by row: MIS-PO 1/tokens where both MIS masks pass (else
 * 0), TIS min(x_t, C)/tokens, PPO 1/tokens, GRPO 1/(trajectories · T) with T the
 * trajectory's loss tokens over all its contexts; 0 off the loss mask.  weight[N].
 * GSPO, δ-masked GRPO and the reference KL need the whole trajectory's log πθ
 * first: LT_EUNSUPP. */
int lt_loss_token_weights(const lt_loss_cfg_t *cfg, const lt_loss_in_t *in, float *weight);
/* 1 when cfg's objective is token-local (the test above); with_ref: a reference policy is given. */
int lt_loss_token_local(const lt_loss_cfg_t *cfg, int with_ref);

/* Group baselines: adv_i = R_i − mean of R over the trajectories with the same
 * group id (divided by the group's standard deviation when std_norm); traj[n]
 * as in lt_loss_in_t (NULL: each sample is a trajectory), so a trajectory of
 * several contexts counts once in its group. */
void lt_adv_group(const double *reward, const int64_t *group, const int *traj, int n, int std_norm, double *adv);

/* Actor-critic advantages with γ = λ = 1 and truncation-aware bootstrapping:
 * per trajectory (traj as in lt_loss_in_t, NULL: each sequence), R̂ = V(s_T) =
 * values[last position of its last context] when its last context's
 * truncated[] is set, else its reward; for each loss token t, adv[t] = R̂ − V(s_t)
 * where V(s_t) = values[t − 1] (the critic's value of the prefix before token
 * t, within its context), and target[t] = R̂.  rhat[nseq]: R̂ of each sequence. */
void lt_adv_critic(int nseq, const int *start, const uint8_t *mask, const float *values, const double *reward,
                   const uint8_t *truncated, const int *traj, float *adv, float *target, double *rhat);

/* The first sequence after s's trajectory (traj as in lt_loss_in_t). */
int lt_traj_end(const int *traj, int nseq, int s);

/* ½ mean (V(s_t) − target_t)² over loss tokens; dvalues[N] receives the
 * gradient at the positions the values were read from (t − 1). */
double lt_value_loss(int nseq, const int *start, const uint8_t *mask, const float *values, const float *target,
                     float *dvalues);

#endif
