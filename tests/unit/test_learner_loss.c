/* Losses against hand-computed cases and finite differences. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "learner/loss.h"
#include "util/rng.h"

static const int one_seq[] = {0, 4};
static const uint8_t mask4[] = {0, 1, 1, 1};

/* logp_rollout such that x_t = π_old/π_rollout takes the given values. */
static void rollout_for(const float *logp, const double *x, float *out, int n) {
  for (int i = 0; i < n; i++) out[i] = (float)(logp[i] - log(x[i]));
}

Test(learner_loss, mispo_token_mask_is_inclusive_at_the_bounds) {
  float logp[4] = {0, logf(0.5f), logf(0.25f), logf(0.8f)}, roll[4], adv[4] = {0, 2.0f, -1.0f, 3.0f}, d[4];
  double x[4] = {1, 1.0, 2.0, 2.5}; /* x = 2 sits on the bound, 2.5 is outside */
  rollout_for(logp, x, roll, 4);
  lt_loss_cfg_t c;
  lt_loss_cfg_default(&c, LT_OBJ_MISPO);
  c.traj_lo = 0.01f; /* isolate the token mask */
  c.traj_hi = 100.0f;
  lt_loss_in_t in = {.nseq = 1, .start = one_seq, .logp = logp, .logp_rollout = roll, .adv = adv, .mask = mask4};
  lt_loss_stats_t st;
  cr_assert_eq(lt_loss_compute(&c, &in, d, &st), 0);
  double want = -(logf(0.5f) * 2.0 + logf(0.25f) * -1.0) / 3.0;
  cr_expect_float_eq(st.loss, want, 1e-6);
  cr_expect_float_eq(d[0], 0.0f, 1e-9);
  cr_expect_float_eq(d[1], -2.0f / 3.0f, 1e-6);
  cr_expect_float_eq(d[2], 1.0f / 3.0f, 1e-6);
  cr_expect_float_eq(d[3], 0.0f, 1e-9);
  cr_expect_eq(st.tokens, 3);
  cr_expect_eq(st.tokens_kept, 2);
  cr_expect_eq(st.tokens_in_bounds, 2);
  /* x = 0.5 is on the lower bound too; 0.499 is not. */
  double x2[4] = {1, 0.5, 0.499, 1};
  rollout_for(logp, x2, roll, 4);
  cr_assert_eq(lt_loss_compute(&c, &in, d, &st), 0);
  cr_expect_eq(st.tokens_in_bounds, 2);
  cr_expect_float_eq(d[2], 0.0f, 1e-9);
}

Test(learner_loss, mispo_trajectory_mask_on_the_geometric_mean) {
  float logp[4] = {0, -1, -2, -0.5f}, roll[4], adv[4] = {0, 1, 1, 1}, d[4];
  lt_loss_cfg_t c;
  lt_loss_cfg_default(&c, LT_OBJ_MISPO);
  lt_loss_in_t in = {.nseq = 1, .start = one_seq, .logp = logp, .logp_rollout = roll, .adv = adv, .mask = mask4};
  lt_loss_stats_t st;
  /* Geometric mean exactly 1.001 (the upper bound): kept. */
  double x[4] = {1, 1.001, 1.001, 1.001};
  rollout_for(logp, x, roll, 4);
  cr_assert_eq(lt_loss_compute(&c, &in, d, &st), 0);
  cr_expect_eq(st.trajs_kept, 1);
  cr_expect_float_eq(st.loss, (1.0 + 2.0 + 0.5) / 3.0, 1e-6);
  /* 1.002 · 1.0 · 1.0 has geometric mean 1.000666: kept; 1.004 · 1 · 1 → 1.00133: dropped whole. */
  double y[4] = {1, 1.002, 1.0, 1.0};
  rollout_for(logp, y, roll, 4);
  cr_assert_eq(lt_loss_compute(&c, &in, d, &st), 0);
  cr_expect_eq(st.trajs_kept, 1);
  double z[4] = {1, 1.004, 1.0, 1.0};
  rollout_for(logp, z, roll, 4);
  cr_assert_eq(lt_loss_compute(&c, &in, d, &st), 0);
  cr_expect_eq(st.trajs_kept, 0);
  cr_expect_eq(st.tokens_kept, 0);
  cr_expect_float_eq(st.loss, 0.0, 1e-12);
  for (int i = 0; i < 4; i++) cr_expect_float_eq(d[i], 0.0f, 1e-12);
  /* Lower bound 0.996. */
  double w[4] = {1, 0.996, 0.996, 0.996};
  rollout_for(logp, w, roll, 4);
  cr_assert_eq(lt_loss_compute(&c, &in, d, &st), 0);
  cr_expect_eq(st.trajs_kept, 1);
  cr_expect_float_eq(st.mismatch, -log(0.996), 1e-6);
  /* mismatch/kl is k3 of KL(π_rollout ‖ π_old): x − 1 − log x with x = π_old/π_rollout = 0.996. */
  cr_expect_float_eq(st.kl_rollout, 0.996 - 1 - log(0.996), 1e-9);
}

Test(learner_loss, mispo_is_normalised_by_the_batch_loss_tokens) {
  /* Two sequences with 3 and 1 loss tokens: every kept token weighs 1/4. */
  static const int st2[] = {0, 4, 6};
  uint8_t mask[6] = {0, 1, 1, 1, 0, 1};
  float logp[6] = {0, -1, -1, -1, 0, -2}, adv[6] = {0, 1, 1, 1, 0, 1}, d[6];
  lt_loss_cfg_t c;
  lt_loss_cfg_default(&c, LT_OBJ_MISPO);
  lt_loss_in_t in = {.nseq = 2, .start = st2, .logp = logp, .logp_rollout = logp, .adv = adv, .mask = mask};
  lt_loss_stats_t st;
  cr_assert_eq(lt_loss_compute(&c, &in, d, &st), 0);
  cr_expect_float_eq(st.loss, (1 + 1 + 1 + 2) / 4.0, 1e-6);
  cr_expect_float_eq(d[5], -0.25f, 1e-7);
  cr_expect_eq(st.trajs, 2);
}

Test(learner_loss, ppo_clip_hand_computed) {
  float logp[4] = {0, logf(1.5f), logf(1.5f), logf(0.9f)}, old[4] = {0, 0, 0, 0}, adv[4] = {0, 1, -1, 1}, d[4];
  lt_loss_cfg_t c;
  lt_loss_cfg_default(&c, LT_OBJ_PPO);
  lt_loss_in_t in = {
      .nseq = 1, .start = one_seq, .logp = logp, .logp_old = old, .logp_rollout = old, .adv = adv, .mask = mask4};
  lt_loss_stats_t st;
  cr_assert_eq(lt_loss_compute(&c, &in, d, &st), 0);
  /* t1: r = 1.5, A = +1 → clipped 1.2, no gradient; t2: A = −1 → min(−1.5, −1.2) = −1.5, unclipped;
   * t3: r = 0.9 inside the range. */
  cr_expect_float_eq(st.loss, -(1.2 - 1.5 + 0.9) / 3.0, 1e-6);
  cr_expect_float_eq(d[1], 0.0f, 1e-9);
  cr_expect_float_eq(d[2], 1.5f / 3.0f, 1e-6);
  cr_expect_float_eq(d[3], -0.9f / 3.0f, 1e-6);
  cr_expect_float_eq(st.clip_frac, 1.0 / 3.0, 1e-9);
}

Test(learner_loss, grpo_masks_divergent_negative_sequences_only) {
  static const int st2[] = {0, 3, 6};
  uint8_t mask[6] = {0, 1, 1, 0, 1, 1};
  float logp[6] = {0, -1, -1, 0, -1, -1}, roll[6] = {0, -0.5f, -0.5f, 0, -0.5f, -0.5f}, d[6];
  float adv[6] = {0, -1, -1, 0, 1, 1}; /* both sequences diverge by 0.5 nats per token */
  lt_loss_cfg_t c;
  lt_loss_cfg_default(&c, LT_OBJ_GRPO);
  c.delta = 0.4f;
  lt_loss_in_t in = {.nseq = 2, .start = st2, .logp = logp, .logp_rollout = roll, .adv = adv, .mask = mask};
  lt_loss_stats_t st;
  cr_assert_eq(lt_loss_compute(&c, &in, d, &st), 0);
  /* Sequence 1 (negative, divergent) is masked; sequence 2 counts with weight 1/(2 sequences · 2 tokens). */
  cr_expect_float_eq(d[1], 0.0f, 1e-9);
  cr_expect_float_eq(d[2], 0.0f, 1e-9);
  cr_expect_float_eq(d[4], -0.25f, 1e-6);
  cr_expect_float_eq(st.loss, -0.5, 1e-6);
  c.delta = 0.6f; /* below the threshold: nothing masked */
  cr_assert_eq(lt_loss_compute(&c, &in, d, &st), 0);
  cr_expect_float_eq(d[1], 0.25f, 1e-6);
}

/* TIS weighs each token by min(x_t, C): no mask, capped above (seed 001 App. D.2.4). */
Test(learner_loss, tis_weights_hand_computed) {
  float logp[4] = {0, -1.0f, -0.5f, -2.0f}, roll[4], adv[4] = {0, 1, 1, -1}, d[4];
  double x[4] = {1, 0.5, 1.5, 3.0};
  rollout_for(logp, x, roll, 4);
  lt_loss_cfg_t c;
  lt_loss_cfg_default(&c, LT_OBJ_TIS);
  lt_loss_in_t in = {.nseq = 1, .start = one_seq, .logp = logp, .logp_rollout = roll, .adv = adv, .mask = mask4};
  lt_loss_stats_t st;
  cr_assert_eq(lt_loss_compute(&c, &in, d, &st), 0);
  cr_expect_float_eq(d[1], -0.5 / 3, 1e-6);
  cr_expect_float_eq(d[2], -1.5 / 3, 1e-6);
  cr_expect_float_eq(d[3], 2.0 / 3, 1e-6, "x = 3 is capped at C = 2");
  cr_expect_float_eq(st.loss, -(0.5 * -1.0 + 1.5 * -0.5 - 2.0 * -2.0) / 3, 1e-6);
  cr_expect_float_eq(st.clip_frac, 1.0 / 3, 1e-9, "the capped share");
  cr_expect_eq(st.tokens_kept, 3);
  float w[4];
  cr_assert_eq(lt_loss_token_weights(&c, &in, w), 0);
  cr_expect_float_eq(w[3], 2.0 / 3, 1e-6);
}

Test(learner_loss, group_advantages) {
  double r[6] = {1, 0, 0, 1, 1, 1}, a[6];
  int64_t g[6] = {7, 7, 7, 9, 9, 9};
  lt_adv_group(r, g, NULL, 6, 0, a);
  cr_expect_float_eq(a[0], 2.0 / 3.0, 1e-12);
  cr_expect_float_eq(a[1], -1.0 / 3.0, 1e-12);
  cr_expect_float_eq(a[4], 0.0, 1e-12);
  lt_adv_group(r, g, NULL, 6, 1, a);
  cr_expect_float_eq(a[0], (2.0 / 3.0) / (sqrt(2.0 / 9.0) + 1e-6), 1e-9);
}

Test(learner_loss, critic_advantages_bootstrap_truncated_trajectories) {
  static const int st2[] = {0, 4, 7};
  uint8_t mask[7] = {0, 0, 1, 1, 0, 1, 1};
  float values[7] = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f, 0.7f}, adv[7], tgt[7];
  double reward[2] = {1.0, 1.0}, rhat[2];
  uint8_t trunc[2] = {0, 1};
  lt_adv_critic(2, st2, mask, values, reward, trunc, NULL, adv, tgt, rhat);
  cr_expect_float_eq(rhat[0], 1.0, 1e-12);       /* complete: the reward */
  cr_expect_float_eq(rhat[1], 0.7, 1e-6);        /* truncated: V(s_T), the value after the last token */
  cr_expect_float_eq(adv[2], 1.0f - 0.2f, 1e-6); /* Â_t = R̂ − V(s_t), V(s_t) read before token t */
  cr_expect_float_eq(adv[3], 1.0f - 0.3f, 1e-6);
  cr_expect_float_eq(adv[5], 0.7f - 0.5f, 1e-6);
  cr_expect_float_eq(adv[6], 0.7f - 0.6f, 1e-6);
  cr_expect_float_eq(adv[1], 0.0f, 1e-9);
  cr_expect_float_eq(tgt[5], 0.7f, 1e-6);
}

Test(learner_loss, value_loss_gradient) {
  static const int st1[] = {0, 4};
  float values[4] = {0.5f, -0.2f, 0.3f, 0.9f}, tgt[4] = {0, 1, 1, 1}, dv[4];
  uint8_t mask[4] = {0, 1, 0, 1};
  double L = lt_value_loss(1, st1, mask, values, tgt, dv);
  cr_expect_float_eq(L, 0.5 * (0.25 + 0.49) / 2, 1e-6);
  cr_expect_float_eq(dv[0], (0.5f - 1) / 2, 1e-6);
  cr_expect_float_eq(dv[2], (0.3f - 1) / 2, 1e-6);
  cr_expect_float_eq(dv[1], 0.0f, 1e-9);
  cr_expect_float_eq(dv[3], 0.0f, 1e-9);
}

/* Finite differences of every objective (smooth points only: inputs are drawn
 * away from clip edges and mask bounds). */
/* kl: 0 none, 1 the config's coefficient, 2 per-sequence coefficients (envs.<d>.kl_coef). */
/* traj: the sequences' trajectories (NULL: one each). */
static void loss_fd(lt_objective obj, int kl, const int *traj) {
  enum { N = 12 };
  static const int st3[] = {0, 5, 9, 12};
  lt_rng_t r;
  lt_rng_seed(&r, 100 + obj * 2 + kl);
  float logp[N], old[N], roll[N], ref[N], adv[N], d[N];
  uint8_t mask[N];
  for (int i = 0; i < N; i++) {
    mask[i] = i != 0 && i != 5 && i != 9;
    logp[i] = (float)(-0.2 - lt_rng_uniform(&r));
    old[i] = logp[i] + (float)(0.05 * lt_rng_normal(&r));
    roll[i] = old[i] + (float)(0.0003 * lt_rng_normal(&r));
    ref[i] = logp[i] + (float)(0.3 * lt_rng_normal(&r));
    adv[i] = (float)lt_rng_normal(&r);
  }
  lt_loss_cfg_t c;
  lt_loss_cfg_default(&c, obj);
  c.clip_lo = c.clip_hi = obj == LT_OBJ_GSPO ? 0.5f : 0.2f;
  c.kl_coef = kl ? 0.3f : 0.0f;
  static const float per_seq[3] = {0.1f, 0.0f, 0.7f};
  lt_loss_in_t in = {.nseq = 3,
                     .start = st3,
                     .logp = logp,
                     .logp_old = old,
                     .logp_rollout = roll,
                     .logp_ref = ref,
                     .adv = adv,
                     .mask = mask,
                     .kl_coef = kl == 2 ? per_seq : NULL,
                     .traj = traj};
  lt_loss_stats_t st;
  cr_assert_eq(lt_loss_compute(&c, &in, d, &st), 0);
  const float e = 1e-3f;
  for (int i = 0; i < N; i++) {
    float s = logp[i], tmp[N];
    logp[i] = s + e;
    lt_loss_compute(&c, &in, tmp, &st);
    double p = st.loss;
    logp[i] = s - e;
    lt_loss_compute(&c, &in, tmp, &st);
    double m = st.loss;
    logp[i] = s;
    double fd = (p - m) / (2 * e);
    cr_expect(fabs(fd - d[i]) < 2e-3 + 1e-2 * fabs(fd), "%s%s%s: dlogp[%d] %g vs %g", lt_objective_name(obj),
              kl == 2 ? "+kl per sequence"
              : kl    ? "+kl"
                      : "",
              traj ? " (2 contexts + 1)" : "", i, d[i], fd);
  }
}

Test(learner_loss, finite_differences) {
  static const int two_contexts[3] = {0, 0, 1};
  for (int o = 0; o < LT_OBJ_N; o++) {
    loss_fd((lt_objective)o, 0, NULL);
    loss_fd((lt_objective)o, 1, NULL);
    loss_fd((lt_objective)o, 2, NULL);
    loss_fd((lt_objective)o, 2, two_contexts);
  }
}

/* A domain's KL coefficient reaches its own sequences' tokens and no others: per-sequence coefficients all equal to
 * the config's give the config's loss, and a sequence whose coefficient is 0 gets the gradient without KL. */
Test(learner_loss, kl_coefficient_per_sequence) {
  static const int st2[] = {0, 3, 6};
  float logp[6] = {-0.5f, -0.7f, -1.1f, -0.3f, -0.9f, -0.6f}, ref[6] = {-0.9f, -0.2f, -1.5f, -0.8f, -0.4f, -1.0f};
  float adv[6] = {0.5f, 0.5f, 0.5f, -1, -1, -1}, d_all[6], d_per[6], d_none[6];
  uint8_t mask[6] = {1, 1, 1, 1, 1, 1};
  lt_loss_cfg_t c;
  lt_loss_cfg_default(&c, LT_OBJ_MISPO);
  c.kl_coef = 0.4f;
  lt_loss_in_t in = {
      .nseq = 2, .start = st2, .logp = logp, .logp_rollout = logp, .logp_ref = ref, .adv = adv, .mask = mask};
  lt_loss_stats_t all, per, none;
  cr_assert_eq(lt_loss_compute(&c, &in, d_all, &all), 0);
  const float same[2] = {0.4f, 0.4f}, first_only[2] = {0.4f, 0.0f};
  in.kl_coef = same;
  cr_assert_eq(lt_loss_compute(&c, &in, d_per, &per), 0);
  cr_assert_float_eq(per.loss, all.loss, 1e-9);
  in.kl_coef = first_only;
  cr_assert_eq(lt_loss_compute(&c, &in, d_per, &per), 0);
  c.kl_coef = 0;
  in.kl_coef = NULL;
  cr_assert_eq(lt_loss_compute(&c, &in, d_none, &none), 0);
  for (int t = 0; t < 3; t++) cr_assert_float_eq(d_per[t], d_all[t], 1e-7, "token %d keeps its domain's KL", t);
  for (int t = 3; t < 6; t++) cr_assert_float_eq(d_per[t], d_none[t], 1e-7, "token %d has no KL", t);
  cr_assert_neq(d_all[4], d_none[4], "the KL term moves the gradient");
}

/* Seed 002 eq. 7's importance ratio is πθ over the probability the token was sampled with: π_rollout, which
 * an asynchronous run records per token, not the learner's π_old. Here π_old = πθ, so a π_old ratio would be 1. */
Test(learner_loss, kl_unbiased_ratio_is_over_the_rollout_probability) {
  static const int st1[] = {0, 2};
  float logp[2] = {-1.0f, -0.4f}, roll[2] = {-1.2f, -0.3f}, ref[2] = {-0.5f, -0.6f}, adv[2] = {0, 0}, d[2];
  uint8_t mask[2] = {1, 1};
  lt_loss_cfg_t c;
  lt_loss_cfg_default(&c, LT_OBJ_PPO);
  c.kl_coef = 0.5f;
  lt_loss_in_t in = {.nseq = 1,
                     .start = st1,
                     .logp = logp,
                     .logp_old = logp,
                     .logp_rollout = roll,
                     .logp_ref = ref,
                     .adv = adv,
                     .mask = mask};
  lt_loss_stats_t st;
  cr_assert_eq(lt_loss_compute(&c, &in, d, &st), 0);
  /* ρ = e^(log πθ − log π_rollout): e^0.2 and e^−0.1; z = log π_ref − log πθ: 0.5 and −0.2. */
  double rho0 = 1.2214027581601699, rho1 = 0.9048374180359595;
  double kl0 = rho0 * (1.6487212707001282 - 0.5 - 1), kl1 = rho1 * (0.8187307530779818 + 0.2 - 1);
  cr_expect_float_eq(st.kl_ref, (kl0 + kl1) / 2, 1e-6);
  cr_expect_float_eq(st.loss, 0.5 * (kl0 + kl1) / 2, 1e-6);
  /* dL/dlog πθ = β · w · ρ · (log πθ − log π_ref), w = 1/2 */
  cr_expect_float_eq(d[0], 0.5 * 0.5 * rho0 * -0.5, 1e-6);
  cr_expect_float_eq(d[1], 0.5 * 0.5 * rho1 * 0.2, 1e-6);
}

/* GSPO as seed 004 §3.3.1 eq. 1 writes it (learner.gspo.advantage "group"): each sequence's clipped
 * sequence-ratio term weighs 1/G, whatever its length, instead of its share of the batch's tokens. */
Test(learner_loss, gspo_group_form_weighs_each_sequence_once) {
  static const int st2[] = {0, 2, 5};
  /* log πθ − log π_old: 0.02, 0.04 (s₁ = e^0.03) and −0.3 × 3 (s₂ = e^−0.3); π_rollout = π_old, every mask passes. */
  float old[5] = {-1.0f, -0.5f, -0.7f, -0.9f, -1.1f}, logp[5], adv[5] = {1, 1, -0.5f, -0.5f, -0.5f}, d[5];
  const float dl[5] = {0.02f, 0.04f, -0.3f, -0.3f, -0.3f};
  for (int i = 0; i < 5; i++) logp[i] = old[i] + dl[i];
  uint8_t mask[5] = {1, 1, 1, 1, 1};
  lt_loss_cfg_t c;
  lt_loss_cfg_default(&c, LT_OBJ_GSPO);
  c.clip_lo = c.clip_hi = 0.2f;
  c.group_adv = 1;
  lt_loss_in_t in = {
      .nseq = 2, .start = st2, .logp = logp, .logp_old = old, .logp_rollout = old, .adv = adv, .mask = mask};
  lt_loss_stats_t st;
  cr_assert_eq(lt_loss_compute(&c, &in, d, &st), 0);
  /* s₁ = 1.0304545 is inside [0.8, 1.2]: term s₁·1; s₂ = 0.7408182 is clipped to 0.8: term 0.8·(−0.5) = −0.4. */
  double s1 = 1.0304545339535169;
  cr_expect_float_eq(st.loss, -(s1 * 1 + -0.4) / 2, 1e-6);
  /* The unclipped sequence's gradient spreads over its 2 tokens: −(1/2)·s₁·A/2; the clipped one is flat. */
  cr_expect_float_eq(d[0], -0.5 * s1 / 2, 1e-6);
  cr_expect_float_eq(d[1], -0.5 * s1 / 2, 1e-6);
  for (int i = 2; i < 5; i++) cr_expect_float_eq(d[i], 0.0f, 1e-9);
  /* The critic form (the default) weighs sequences by their tokens: −(2·s₁ − 3·0.4)/5. */
  c.group_adv = 0;
  cr_assert_eq(lt_loss_compute(&c, &in, d, &st), 0);
  cr_expect_float_eq(st.loss, -(2 * s1 - 3 * 0.4) / 5, 1e-6);
}

/* A trajectory of three contexts (an agent that compacted its history twice: the gateway's sequences, or the
 * agent loop's compressed segments) is one trajectory for every objective, hand-computed below.  Each context
 * is [prompt, generated, generated]; trajectory 0 is the three contexts, trajectory 1 (in some cases) one more. */
static const int ctx3[] = {0, 3, 6, 9}, ctx3_traj[] = {0, 0, 0};
static const uint8_t ctx3_mask[9] = {0, 1, 1, 0, 1, 1, 0, 1, 1};

/* MIS-PO's trajectory test is the geometric mean of x_t over all six generated tokens (seed 001 Eq. 2), not a
 * test per context. */
Test(learner_loss, mispo_trajectory_mask_spans_every_context) {
  float logp[9] = {0, -1, -2, 0, -0.5f, -1.5f, 0, -0.25f, -3}, roll[9], d[9];
  float adv[9] = {0, 1, 2, 0, -1, 1, 0, 0.5f, 1};
  lt_loss_cfg_t c;
  lt_loss_cfg_default(&c, LT_OBJ_MISPO); /* trajectory bounds [0.996, 1.001] */
  lt_loss_in_t in = {
      .nseq = 3, .start = ctx3, .logp = logp, .logp_rollout = roll, .adv = adv, .mask = ctx3_mask, .traj = ctx3_traj};
  lt_loss_stats_t st;
  /* Context 1 alone has mean 1.002 (outside), the trajectory 1.002^(2/6) = 1.000667 (inside): all six train. */
  double x[9] = {1, 1.002, 1.002, 1, 1, 1, 1, 1, 1};
  rollout_for(logp, x, roll, 9);
  cr_assert_eq(lt_loss_compute(&c, &in, d, &st), 0);
  cr_expect_eq(st.trajs, 1);
  cr_expect_eq(st.trajs_kept, 1);
  cr_expect_eq(st.tokens_kept, 6);
  /* −(1/6) Σ log π · A = −(−1 − 4 + 0.5 − 1.5 − 0.125 − 3)/6 */
  cr_expect_float_eq(st.loss, 9.125 / 6, 1e-6);
  cr_expect_float_eq(d[1], -1.0f / 6, 1e-6, "context 1 trains");
  cr_expect_float_eq(d[2], -2.0f / 6, 1e-6);
  cr_expect_float_eq(d[4], 1.0f / 6, 1e-6);
  float w[9];
  cr_assert_eq(lt_loss_token_weights(&c, &in, w), 0); /* the fused (CUDA) path's weights agree */
  for (int t = 0; t < 9; t++) cr_expect_float_eq(w[t], ctx3_mask[t] / 6.0f, 1e-7, "weight %d", t);
  /* Context 1 at 0.985: contexts 2 and 3 pass alone, but the trajectory's mean 0.985^(1/3) = 0.99499 is out: none. */
  double y[9] = {1, 0.985, 0.985, 1, 1, 1, 1, 1, 1};
  rollout_for(logp, y, roll, 9);
  cr_assert_eq(lt_loss_compute(&c, &in, d, &st), 0);
  cr_expect_eq(st.trajs_kept, 0);
  cr_expect_eq(st.tokens_kept, 0);
  cr_expect_float_eq(st.loss, 0.0, 1e-12);
  for (int t = 0; t < 9; t++) cr_expect_float_eq(d[t], 0.0f, 1e-12, "token %d is masked with its trajectory", t);
  cr_assert_eq(lt_loss_token_weights(&c, &in, w), 0);
  for (int t = 0; t < 9; t++) cr_expect_float_eq(w[t], 0.0f, 1e-12, "weight %d", t);
}

/* GRPO: the group's mean counts the three-context trajectory once, and its 1/(G·|o|) weight has G = 2 trajectories
 * and |o| = its 6 generated tokens (seed 002 eq. 5); the δ-mask tests the trajectory's mean divergence. */
Test(learner_loss, grpo_weighs_a_trajectory_once_whatever_its_contexts) {
  static const int st4[] = {0, 3, 6, 9, 12}, traj[4] = {0, 0, 0, 1};
  /* Rewards per sequence: trajectory 0's three contexts carry its reward 1, trajectory 1 has 0; one group. */
  double r[4] = {1, 1, 1, 0}, a[4];
  int64_t g[4] = {5, 5, 5, 5};
  lt_adv_group(r, g, traj, 4, 0, a);
  for (int s = 0; s < 3; s++) cr_expect_float_eq(a[s], 0.5, 1e-12, "mean (1 + 0)/2, not (1 + 1 + 1 + 0)/4");
  cr_expect_float_eq(a[3], -0.5, 1e-12);
  lt_adv_group(r, g, traj, 4, 1, a);
  cr_expect_float_eq(a[0], 0.5 / (0.5 + 1e-6), 1e-9, "std 0.5 over the two trajectories");
  uint8_t mask[12] = {0, 1, 1, 0, 1, 1, 0, 1, 1, 0, 1, 1};
  float logp[12] = {0, -1, -1, 0, -1, -1, 0, -1, -1, 0, -1, -1}, roll[12], d[12];
  float adv[12] = {0, 0.5f, 0.5f, 0, 0.5f, 0.5f, 0, 0.5f, 0.5f, 0, -0.5f, -0.5f};
  memcpy(roll, logp, sizeof roll);
  lt_loss_cfg_t c;
  lt_loss_cfg_default(&c, LT_OBJ_GRPO);
  c.delta = 0; /* the unmasked weights first; r = 1, nothing clipped */
  lt_loss_in_t in = {
      .nseq = 4, .start = st4, .logp = logp, .logp_rollout = roll, .adv = adv, .mask = mask, .traj = traj};
  lt_loss_stats_t st;
  cr_assert_eq(lt_loss_compute(&c, &in, d, &st), 0);
  cr_expect_eq(st.trajs, 2);
  for (int t = 1; t < 9; t++)
    if (mask[t]) cr_expect_float_eq(d[t], -0.5f / 12, 1e-7, "token %d: weight 1/(2 · 6)", t);
  cr_expect_float_eq(d[10], 0.5f / 4, 1e-7, "weight 1/(2 · 2)");
  cr_expect_float_eq(st.loss, -(6 * 0.5 / 12 - 2 * 0.5 / 4), 1e-6);
  float w[12];
  cr_assert_eq(lt_loss_token_weights(&c, &in, w), 0);
  cr_expect_float_eq(w[1], 1.0f / 12, 1e-7);
  cr_expect_float_eq(w[7], 1.0f / 12, 1e-7);
  cr_expect_float_eq(w[11], 1.0f / 4, 1e-7);
  /* δ-mask: trajectory 0 negative, its first context diverging by 0.45 nats per token, the others by 0: the
   * trajectory's mean divergence 0.15 > δ = 0.1 masks all its contexts (per context only the first was). */
  for (int t = 1; t < 9; t++) adv[t] = mask[t] ? -0.5f : 0;
  roll[1] = roll[2] = -1 + 0.45f;
  c.delta = 0.1f;
  cr_assert_eq(lt_loss_compute(&c, &in, d, &st), 0);
  for (int t = 0; t < 9; t++) cr_expect_float_eq(d[t], 0.0f, 1e-12, "token %d is masked with its trajectory", t);
}

/* GSPO's sequence ratio s(θ) = (πθ/π_old)^(1/|y|) is over the trajectory's six tokens, so every token of it gets
 * −(1/6)·(Σ_t A_t)/6 (seed 004 §3.3.1), not its own context's share. */
Test(learner_loss, gspo_ratio_spans_every_context) {
  float logp[9] = {0, -1, -2, 0, -0.5f, -1.5f, 0, -0.25f, -3}, d[9];
  float adv[9] = {0, 1, 2, 0, -1, 1, 0, 0.5f, 1};
  lt_loss_cfg_t c;
  lt_loss_cfg_default(&c, LT_OBJ_GSPO);
  lt_loss_in_t in = {
      .nseq = 3, .start = ctx3, .logp = logp, .logp_rollout = logp, .adv = adv, .mask = ctx3_mask, .traj = ctx3_traj};
  lt_loss_stats_t st;
  cr_assert_eq(lt_loss_compute(&c, &in, d, &st), 0);
  cr_expect_float_eq(st.loss, -4.5 / 6, 1e-6); /* r = 1: −(1/6) Σ A */
  cr_expect_eq(st.trajs, 1);
  for (int t = 0; t < 9; t++)
    cr_expect_float_eq(d[t], ctx3_mask[t] ? -4.5f / 36 : 0.0f, 1e-7, "token %d: the trajectory's ratio", t);
}

/* PPO (and MIS-PO, TIS, GSPO with the critic): a truncated trajectory bootstraps from V(s_T) after the last token
 * of its LAST context, for all three contexts; a complete one takes its reward in every context. */
Test(learner_loss, critic_bootstraps_a_trajectory_from_its_last_context) {
  float values[9] = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f, 0.7f, 0.8f, 0.9f}, adv[9], tgt[9];
  double reward[3] = {1, 1, 1}, rhat[3];
  uint8_t trunc[3] = {1, 1, 1};
  lt_adv_critic(3, ctx3, ctx3_mask, values, reward, trunc, ctx3_traj, adv, tgt, rhat);
  for (int s = 0; s < 3; s++) cr_expect_float_eq(rhat[s], 0.9, 1e-6, "context %d: V(s_T) of the last context", s);
  /* Â_t = 0.9 − V(s_t), V(s_t) read before token t within its context; the context's first token has none. */
  cr_expect_float_eq(adv[1], 0.9f - 0.1f, 1e-6);
  cr_expect_float_eq(adv[2], 0.9f - 0.2f, 1e-6);
  cr_expect_float_eq(adv[4], 0.9f - 0.4f, 1e-6);
  cr_expect_float_eq(adv[5], 0.9f - 0.5f, 1e-6);
  cr_expect_float_eq(adv[8], 0.9f - 0.8f, 1e-6);
  cr_expect_float_eq(tgt[2], 0.9f, 1e-6);
  cr_expect_float_eq(adv[3], 0.0f, 1e-12);
  /* Only the last context's flag speaks for the trajectory: an earlier context cut to the learner's context
   * does not make a finished trajectory bootstrap. */
  uint8_t first_cut[3] = {1, 0, 0};
  lt_adv_critic(3, ctx3, ctx3_mask, values, reward, first_cut, ctx3_traj, adv, tgt, rhat);
  for (int s = 0; s < 3; s++) cr_expect_float_eq(rhat[s], 1.0, 1e-12, "context %d: the reward", s);
  cr_expect_float_eq(adv[1], 1.0f - 0.1f, 1e-6);
  cr_expect_float_eq(adv[5], 1.0f - 0.5f, 1e-6);
}
