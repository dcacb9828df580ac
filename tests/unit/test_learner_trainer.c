/* The learner step end to end on a toy bandit: each objective moves the policy
 * toward the rewarded answer, the critic regresses returns, SFT lowers its
 * loss, and a saved trainer resumes to the bit-identical next step. */
#include <cblas.h>
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "learner/ops.h"
#include "learner/trainer.h"
#include "tests/support/harness.h"
#include "util/error.h"
#include "util/fs.h"

#define NS 8 /* sequences */
#define L 4  /* tokens each: BOS, prompt, answer, end */

static lt_model_t *toy_model(uint64_t seed) {
  const char *json =
      "{\"model_type\": \"qwen3_moe\", \"vocab_size\": 16, \"hidden_size\": 16, \"num_hidden_layers\": 2,"
      " \"num_attention_heads\": 2, \"num_key_value_heads\": 1, \"head_dim\": 8, \"intermediate_size\": 16,"
      " \"moe_intermediate_size\": 8, \"num_experts\": 4, \"num_experts_per_tok\": 2, \"norm_topk_prob\": true,"
      " \"max_position_embeddings\": 32, \"rms_norm_eps\": 1e-6}";
  lt_model_config_t cfg;
  cr_assert_eq(lt_model_config_parse(json, strlen(json), "toy", &cfg), 0);
  lt_model_t *m;
  cr_assert_eq(lt_model_create(&cfg, &m), 0);
  lt_model_init_random(m, seed, 0.1f);
  return m;
}

/* Prompt token 2 or 3; answers 5 (rewarded when the prompt is 2) or 7. */
typedef struct {
  int start[NS + 1];
  int32_t tok[NS * L];
  float lp[NS * L];
  uint8_t mask[NS * L];
  double reward[NS];
  uint8_t trunc[NS];
  int64_t group[NS];
  lt_train_batch_t b;
} toy_t;

static void toy_make(toy_t *t) {
  memset(t, 0, sizeof *t);
  for (int s = 0; s < NS; s++) {
    int prompt = s < NS / 2 ? 2 : 3, answer = s % 2 ? 5 : 7;
    int32_t *x = t->tok + s * L;
    x[0] = 1, x[1] = prompt, x[2] = answer, x[3] = 9;
    t->mask[s * L + 2] = t->mask[s * L + 3] = 1;
    t->reward[s] = prompt == 2 ? answer == 5 : 0.25;
    t->group[s] = prompt;
    t->start[s + 1] = (s + 1) * L;
  }
  t->b = (lt_train_batch_t){.nseq = NS,
                            .start = t->start,
                            .tokens = t->tok,
                            .logp_rollout = t->lp,
                            .mask = t->mask,
                            .reward = t->reward,
                            .truncated = t->trunc,
                            .group = t->group};
}

/* The rollout logprobs as the current policy would have produced them (on-policy). */
static void toy_rollout(toy_t *t, lt_model_t *m) {
  cr_assert_eq(lt_model_eval_alloc(m, NS * L, L), 0);
  lt_batch_t b = {.nseq = NS, .start = t->start, .tokens = t->tok};
  lt_fwd_out_t o;
  cr_assert_eq(lt_model_forward(m, &b, &o), 0);
  memcpy(t->lp, o.logprobs, sizeof t->lp);
}

static lt_trainer_cfg_t toy_cfg(lt_objective obj) {
  lt_trainer_cfg_t c = {.actor_minibatches = 2, .critic_minibatches = 2, .threads = 1};
  lt_loss_cfg_default(&c.loss, obj);
  lt_optim_cfg_default(&c.actor_opt, LT_OPT_ADAMW);
  lt_optim_cfg_default(&c.critic_opt, LT_OPT_ADAMW);
  c.actor_opt.lr = 3e-3f;
  c.actor_opt.warmup = 0;
  c.actor_opt.weight_decay = 0;
  c.critic_opt.lr = 1e-2f;
  c.critic_opt.warmup = 0;
  c.critic_opt.weight_decay = 0;
  return c;
}

/* A MIS-PO trainer on the toy bandit, with on-policy rollout logprobs in t. */
static lt_trainer_t *toy_mispo(toy_t *t) {
  toy_make(t);
  lt_trainer_cfg_t c = toy_cfg(LT_OBJ_MISPO);
  lt_trainer_t *tr;
  cr_assert_eq(lt_trainer_create(&c, toy_model(3), NULL, NULL, &tr), 0);
  toy_rollout(t, lt_trainer_policy(tr));
  return tr;
}

/* log p(5 | prompt 2) − log p(7 | prompt 2) of the trainer's policy. */
static double preference(lt_trainer_t *tr, toy_t *t) {
  toy_rollout(t, lt_trainer_policy(tr));
  return t->lp[1 * L + 2] - t->lp[0 * L + 2];
}

static void improves(lt_objective obj) {
  toy_t t;
  toy_make(&t);
  lt_trainer_cfg_t c = toy_cfg(obj);
  lt_trainer_t *tr;
  cr_assert_eq(lt_trainer_create(&c, toy_model(3), NULL, NULL, &tr), 0, "%s", lt_error_msg());
  double before = preference(tr, &t);
  lt_step_stats_t st;
  for (int i = 0; i < 30; i++) {
    toy_rollout(&t, lt_trainer_policy(tr));
    cr_assert_eq(lt_trainer_step(tr, &t.b, &st), 0, "%s", lt_error_msg());
    cr_assert(isfinite(st.actor_loss) && isfinite(st.actor_grad_norm));
    /* On-policy data: every ratio is 1, so every mask accepts everything. */
    cr_assert_float_eq(st.token_accept, 1.0, 1e-9);
    cr_assert_float_eq(st.traj_accept, 1.0, 1e-9);
    cr_assert_lt(st.mismatch, 1e-5);
  }
  double after = preference(tr, &t);
  cr_assert_gt(after, before + 1.0, "%s: log p(5)/p(7) %.3f -> %.3f", lt_objective_name(obj), before, after);
  cr_assert_eq(lt_trainer_steps(tr), 30);
  lt_trainer_free(tr);
}

Test(learner_trainer, mispo_moves_toward_reward) { improves(LT_OBJ_MISPO); }
Test(learner_trainer, ppo_moves_toward_reward) { improves(LT_OBJ_PPO); }
Test(learner_trainer, grpo_moves_toward_reward) { improves(LT_OBJ_GRPO); }
Test(learner_trainer, gspo_moves_toward_reward) { improves(LT_OBJ_GSPO); }
Test(learner_trainer, tis_moves_toward_reward) { improves(LT_OBJ_TIS); }

/* GSPO's group form (learner.gspo.advantage "group", seed 004 §3.3.1) trains without a critic on group-relative
 * advantages: prompt 2's group has rewards 0 and 1 (Â = ±0.5), prompt 3's all 0.25 (Â = 0), so over the loss
 * tokens Â has mean 0 and std √(0.5 · 0.25). */
Test(learner_trainer, gspo_group_form_uses_group_advantages_and_no_critic) {
  toy_t t;
  toy_make(&t);
  lt_trainer_cfg_t c = toy_cfg(LT_OBJ_GSPO);
  c.loss.group_adv = 1;
  c.loss.clip_lo = c.loss.clip_hi = 0.2f;
  lt_trainer_t *tr;
  cr_assert_eq(lt_trainer_create(&c, toy_model(3), NULL, NULL, &tr), 0, "%s", lt_error_msg());
  double before = preference(tr, &t);
  lt_step_stats_t st;
  for (int i = 0; i < 30; i++) {
    toy_rollout(&t, lt_trainer_policy(tr));
    cr_assert_eq(lt_trainer_step(tr, &t.b, &st), 0, "%s", lt_error_msg());
    cr_assert_float_eq(st.adv_mean, 0.0, 1e-9);
    cr_assert_float_eq(st.adv_std, sqrt(0.125), 1e-6);
    cr_assert_float_eq(st.critic_loss, 0.0, 0, "no critic trains");
  }
  cr_assert_gt(preference(tr, &t), before + 1.0);
  lt_trainer_free(tr);
}

/* Off-policy data outside the token bounds is masked: nothing is accepted and
 * the policy does not move. */
Test(learner_trainer, mispo_masks_far_off_policy_data) {
  toy_t t;
  lt_trainer_t *tr = toy_mispo(&t);
  for (int i = 0; i < NS * L; i++) t.lp[i] -= 1.0f; /* π_old/π_rollout = e > 2 */
  lt_model_t *p = lt_trainer_policy(tr);
  float *before = malloc(sizeof(float) * p->nparams);
  memcpy(before, p->params, sizeof(float) * p->nparams);
  lt_step_stats_t st;
  cr_assert_eq(lt_trainer_step(tr, &t.b, &st), 0);
  cr_assert_float_eq(st.token_accept, 0.0, 1e-12);
  cr_assert_float_eq(st.traj_accept, 0.0, 1e-12);
  cr_assert_float_eq(st.mismatch, 1.0, 1e-4);
  cr_assert_eq(memcmp(before, p->params, sizeof(float) * p->nparams), 0, "masked tokens must not update the policy");
  free(before);
  lt_trainer_free(tr);
}

/* Data sampled at T = 0.6 is on-policy only when the learner scores it at
 * the recorded temperature: every ratio 1 then, far from it at T = 1. */
Test(learner_trainer, ratios_use_the_recorded_temperature) {
  toy_t t;
  toy_make(&t);
  lt_trainer_cfg_t c = toy_cfg(LT_OBJ_MISPO);
  lt_trainer_t *tr;
  cr_assert_eq(lt_trainer_create(&c, toy_model(3), NULL, NULL, &tr), 0);
  lt_model_t *m = lt_trainer_policy(tr);
  float temp[NS * L];
  for (int i = 0; i < NS * L; i++) temp[i] = 0.6f;
  cr_assert_eq(lt_model_eval_alloc(m, NS * L, L), 0);
  lt_batch_t rb = {.nseq = NS, .start = t.start, .tokens = t.tok, .temperature = temp};
  lt_fwd_out_t o;
  cr_assert_eq(lt_model_forward(m, &rb, &o), 0);
  memcpy(t.lp, o.logprobs, sizeof t.lp);
  lt_step_stats_t st;
  cr_assert_eq(lt_trainer_replay(tr, &t.b, NULL, &st), 0);
  cr_assert_gt(st.mismatch, 1e-3, "at T = 1 the ratios compare different distributions");
  t.b.temperature = temp;
  cr_assert_eq(lt_trainer_replay(tr, &t.b, NULL, &st), 0);
  cr_assert_lt(st.mismatch, 1e-6);
  cr_assert_float_eq(st.traj_accept, 1.0, 1e-12);
  lt_trainer_free(tr);
}

/* The learner's routing confidence averages the generated tokens only, as
 * the rollout's records do (prompt tokens are not the policy's choices). */
Test(learner_trainer, routing_confidence_over_generated_tokens) {
  toy_t t;
  lt_trainer_t *tr = toy_mispo(&t);
  lt_model_t *m = lt_trainer_policy(tr);
  lt_batch_t b = {.nseq = NS, .start = t.start, .tokens = t.tok};
  lt_fwd_out_t o;
  cr_assert_eq(lt_model_forward(m, &b, &o), 0);
  int nml = lt_model_moe_layers(&m->cfg), n = 0;
  double gen = 0;
  for (int i = 0; i < NS * L; i++)
    if (t.mask[i]) gen += o.route_conf[i] / nml, n++;
  gen /= n;
  cr_assert(fabs(gen - o.routing_confidence) > 1e-4,
            "prompt and generated tokens must differ for the test to mean anything");
  lt_step_stats_t st;
  cr_assert_eq(lt_trainer_replay(tr, &t.b, NULL, &st), 0);
  cr_assert_float_eq(st.routing_confidence, gen, 1e-6);
  lt_trainer_free(tr);
}

static lt_model_t *toy_critic(const lt_model_t *policy) {
  lt_model_config_t cfg = policy->cfg;
  cfg.critic = 1;
  lt_model_t *m;
  cr_assert_eq(lt_model_create(&cfg, &m), 0);
  lt_model_init_random(m, 9, 0.3f);
  return m;
}

/* ½ mean (V(s_t) − R)² of the critic m on t's batch, with or without routes. */
static double value_loss_of(lt_model_t *m, toy_t *t, const uint16_t *route) {
  cr_assert_eq(lt_model_eval_alloc(m, NS * L, L), 0);
  lt_batch_t b = {.nseq = NS, .start = t->start, .tokens = t->tok, .route_ids = route};
  lt_fwd_out_t o;
  cr_assert_eq(lt_model_forward(m, &b, &o), 0);
  float adv[NS * L], target[NS * L], dv[NS * L];
  lt_adv_critic(NS, t->start, t->mask, o.values, t->reward, t->trunc, NULL, adv, target, NULL);
  return lt_value_loss(NS, t->start, t->mask, o.values, target, dv);
}

/* Under Keep Routing the critic trains on the routing its values were
 * computed with (the rollout's), not on its own router's choice. */
Test(learner_trainer, keep_routing_reaches_the_critic) {
  toy_t t;
  toy_make(&t);
  lt_trainer_cfg_t c = toy_cfg(LT_OBJ_MISPO);
  c.actor_opt.lr = c.critic_opt.lr = 0;
  c.critic_minibatches = 1;
  lt_model_t *policy = toy_model(3), *critic = toy_critic(policy), *copy = toy_critic(policy);
  uint16_t route[NS * L * 2 * 2];
  for (size_t i = 0; i < sizeof route / sizeof route[0]; i++) route[i] = (uint16_t)(2 + i % 2);
  double pinned = value_loss_of(copy, &t, route), own = value_loss_of(copy, &t, NULL);
  cr_assert(fabs(pinned - own) > 1e-6, "the pinned routing must change the values for the test to mean anything");
  lt_trainer_t *tr;
  cr_assert_eq(lt_trainer_create(&c, policy, critic, NULL, &tr), 0);
  toy_rollout(&t, lt_trainer_policy(tr));
  t.b.route_ids = route;
  lt_step_stats_t st;
  cr_assert_eq(lt_trainer_step(tr, &t.b, &st), 0, "%s", lt_error_msg());
  cr_assert_float_eq(st.critic_loss, pinned, 1e-6, "critic loss %g: pinned %g, own routing %g", st.critic_loss, pinned,
                     own);
  lt_model_free(copy);
  lt_trainer_free(tr);
}

/* A sequence left out by actor_skip (its sampling set is unknown) does not
 * move the policy, is counted, and still trains the critic. */
Test(learner_trainer, actor_skip_leaves_sequences_out_of_the_actor_loss) {
  toy_t t;
  lt_trainer_t *tr = toy_mispo(&t);
  uint8_t skip[NS];
  memset(skip, 1, sizeof skip);
  t.b.actor_skip = skip;
  lt_model_t *p = lt_trainer_policy(tr);
  float *before = malloc(sizeof(float) * p->nparams);
  memcpy(before, p->params, sizeof(float) * p->nparams);
  lt_step_stats_t st;
  cr_assert_eq(lt_trainer_step(tr, &t.b, &st), 0);
  cr_assert_eq(st.actor_skipped, NS);
  cr_assert_eq(memcmp(before, p->params, sizeof(float) * p->nparams), 0, "skipped sequences moved the policy");
  cr_assert_gt(st.critic_loss, 0, "the critic still trains on them");
  skip[0] = 0;
  cr_assert_eq(lt_trainer_step(tr, &t.b, &st), 0);
  cr_assert_eq(st.actor_skipped, NS - 1);
  cr_assert_neq(memcmp(before, p->params, sizeof(float) * p->nparams), 0);
  free(before);
  lt_trainer_free(tr);
}

/* Mini-batches split between trajectories, never inside one: trajectory 1 is the contexts 1-5, and the sequence
 * split into 2 mini-batches (0-3 | 4-7) would cut it.  Its contexts 1-3 are off-policy by x = 1.0015 per token
 * (outside the trajectory bounds [0.996, 1.001] alone), 4-5 on-policy: over all ten tokens the geometric mean
 * is 1.0015^0.6 = 1.0009, inside, so every token trains, and the step counts 4 trajectories. */
Test(learner_trainer, minibatches_keep_a_trajectorys_contexts_together) {
  toy_t t;
  lt_trainer_t *tr = toy_mispo(&t);
  static const int traj[NS] = {0, 1, 1, 1, 1, 1, 2, 3};
  for (int s = 2; s <= 5; s++) t.reward[s] = t.reward[1], t.group[s] = t.group[1]; /* one trajectory's */
  for (int s = 1; s <= 3; s++)
    for (int i = s * L; i < (s + 1) * L; i++)
      if (t.mask[i]) t.lp[i] -= (float)log(1.0015);
  t.b.traj = traj;
  lt_step_stats_t st;
  cr_assert_eq(lt_trainer_step(tr, &t.b, &st), 0, "%s", lt_error_msg());
  cr_expect_float_eq(st.traj_accept, 1.0, 1e-9, "trajectory 1 is tested whole");
  cr_expect_float_eq(st.kept_fraction, 1.0, 1e-9);
  cr_expect_eq(st.trajectories, 4);
  lt_trainer_free(tr);
}

/* Issue 32, item 3: a mini-batch none of whose tokens passes the masks takes no optimizer step.  Weight decay on and
 * AdamW's moments filled by an ordinary step first, so that a zero-gradient step would still move the weights:
 * data that the token bounds reject entirely leaves the policy bit-identical, counts every actor update as skipped,
 * and the critic and the learner's step count still advance. */
Test(learner_trainer, a_minibatch_with_no_kept_token_takes_no_actor_step) {
  toy_t t;
  toy_make(&t);
  lt_trainer_cfg_t c = toy_cfg(LT_OBJ_MISPO);
  c.actor_opt.weight_decay = 0.1f;
  lt_model_t *policy = toy_model(3);
  lt_trainer_t *tr;
  cr_assert_eq(lt_trainer_create(&c, policy, toy_critic(policy), NULL, &tr), 0, "%s", lt_error_msg());
  lt_model_t *p = lt_trainer_policy(tr);
  lt_step_stats_t st;
  toy_rollout(&t, p);
  cr_assert_eq(lt_trainer_step(tr, &t.b, &st), 0, "%s", lt_error_msg());
  cr_assert_eq(st.actor_skipped_updates, 0, "an ordinary step skipped an update");
  float *before = malloc(sizeof(float) * p->nparams);
  memcpy(before, p->params, sizeof(float) * p->nparams);
  for (int i = 0; i < 3; i++) {
    toy_rollout(&t, p);
    for (int k = 0; k < NS * L; k++) t.lp[k] -= 1.0f; /* π_old/π_rollout = e, past the token bound 2: all rejected */
    cr_assert_eq(lt_trainer_step(tr, &t.b, &st), 0, "%s", lt_error_msg());
    cr_assert_float_eq(st.kept_fraction, 0.0, 1e-12);
    cr_assert_eq(st.actor_skipped_updates, c.actor_minibatches, "step %d: %d of %d updates skipped", i,
                 st.actor_skipped_updates, c.actor_minibatches);
    cr_assert_eq(memcmp(before, p->params, sizeof(float) * p->nparams), 0, "step %d moved the actor", i);
    cr_assert_gt(st.critic_loss, 0, "the critic still trains");
  }
  cr_assert_eq(lt_trainer_steps(tr), 4, "the learner's steps still count");
  free(before);
  lt_trainer_free(tr);
}

/* The critic learns V(prompt 2) ≈ 0.5 (half its answers pay 1) and
 * V(prompt 3) = 0.25, with the actor frozen (lr 0). */
Test(learner_trainer, critic_regresses_returns) {
  toy_t t;
  toy_make(&t);
  lt_trainer_cfg_t c = toy_cfg(LT_OBJ_MISPO);
  c.actor_opt.lr = 0;
  lt_trainer_t *tr;
  cr_assert_eq(lt_trainer_create(&c, toy_model(5), NULL, NULL, &tr), 0);
  toy_rollout(&t, lt_trainer_policy(tr));
  lt_step_stats_t st;
  double first = 0;
  for (int i = 0; i < 150; i++) {
    cr_assert_eq(lt_trainer_step(tr, &t.b, &st), 0);
    if (i == 0) first = st.critic_loss;
  }
  /* The floor: V(prompt 2) cannot know the answer yet, ½·0.25 on a quarter
   * of the loss tokens; everything else is predictable. */
  cr_assert_lt(st.critic_loss, 0.03125 + 0.004, "value loss %.4f -> %.4f", first, st.critic_loss);
  cr_assert_gt(first, 0.06);
  /* value_mean averages V(s_t) over loss tokens: (0.5 + 0.25 + 0.5 + 0.25) / 4. */
  cr_assert_float_eq(st.value_mean, 0.375, 0.03);
  lt_trainer_free(tr);
}

Test(learner_trainer, sft_lowers_nll) {
  toy_t t;
  toy_make(&t);
  lt_trainer_cfg_t c = toy_cfg(LT_OBJ_MISPO);
  lt_trainer_t *tr;
  cr_assert_eq(lt_trainer_create(&c, toy_model(9), NULL, NULL, &tr), 0);
  double first = 0, l = 0;
  for (int i = 0; i < 40; i++) {
    cr_assert_eq(lt_trainer_sft_step(tr, &t.b, &l), 0);
    if (i == 0) first = l;
  }
  /* Answers 5 and 7 are equally likely per prompt: the floor is ln 2 / 2 per token. */
  cr_assert_lt(l, first * 0.5);
  cr_assert_gt(l, log(2.0) / 2 - 0.05);
  lt_trainer_free(tr);
}

/* Three steps, a checkpoint, a fourth step; a fresh trainer from another initialisation (another model seed, or for
 * LoRA another adapter seed) restored from the checkpoint takes the same fourth step, bit for bit: the losses, the
 * learning rate and the trained parameters (the adapters' with LoRA). */
static void resume_check(lt_trainer_cfg_t c, const char *tag) {
  char *dir = lt_test_tmpdir(tag);
  toy_t t;
  toy_make(&t);
  lt_trainer_t *a, *b;
  cr_assert_eq(lt_trainer_create(&c, toy_model(3), NULL, NULL, &a), 0, "%s", lt_error_msg());
  lt_step_stats_t s1, s2;
  for (int i = 0; i < 3; i++) {
    toy_rollout(&t, lt_trainer_policy(a));
    cr_assert_eq(lt_trainer_step(a, &t.b, &s1), 0);
  }
  lt_trainer_scale_lr(a, 0.5);
  cr_assert_eq(lt_trainer_save(a, dir), 0, "%s", lt_error_msg());
  toy_rollout(&t, lt_trainer_policy(a));
  cr_assert_eq(lt_trainer_step(a, &t.b, &s1), 0);
  int lora = c.lora.rank > 0;
  c.lora.init_seed = c.critic_lora.init_seed = 99;
  cr_assert_eq(lt_trainer_create(&c, toy_model(lora ? 3 : 77), NULL, NULL, &b), 0, "%s", lt_error_msg());
  cr_assert_eq(lt_trainer_load(b, dir), 0, "%s", lt_error_msg());
  cr_assert_eq(lt_trainer_steps(b), 3);
  cr_assert_eq(lt_trainer_step(b, &t.b, &s2), 0);
  cr_assert_eq(s1.actor_loss, s2.actor_loss);
  cr_assert_eq(s1.critic_loss, s2.critic_loss);
  cr_assert_eq(s1.lr, s2.lr);
  lt_model_t *pa = lt_trainer_policy(a), *pb = lt_trainer_policy(b);
  if (lora)
    cr_assert_eq(memcmp(pa->lora->params, pb->lora->params, sizeof(float) * pa->lora->nparams), 0,
                 "adapters differ after the resumed step");
  else
    cr_assert_eq(memcmp(pa->params, pb->params, sizeof(float) * pa->nparams), 0,
                 "parameters differ after the resumed step");
  lt_trainer_free(a);
  lt_trainer_free(b);
  lt_test_rmdir(dir);
}

Test(learner_trainer, resume_reproduces_the_next_step) { resume_check(toy_cfg(LT_OBJ_MISPO), "trainer"); }

/* The KL reference is part of the state: a resumed trainer scores π_ref
 * with the reference it was saved with, not the policy it resumes. */
Test(learner_trainer, resume_restores_the_kl_reference) {
  char *dir = lt_test_tmpdir("trainer");
  toy_t t;
  toy_make(&t);
  lt_trainer_cfg_t c = toy_cfg(LT_OBJ_MISPO);
  c.loss.kl_coef = 0.1f;
  lt_trainer_t *a, *b;
  cr_assert_eq(lt_trainer_create(&c, toy_model(3), NULL, toy_model(3), &a), 0);
  lt_step_stats_t s1, s2;
  for (int i = 0; i < 3; i++) {
    toy_rollout(&t, lt_trainer_policy(a));
    cr_assert_eq(lt_trainer_step(a, &t.b, &s1), 0);
  }
  cr_assert_eq(lt_trainer_save(a, dir), 0, "%s", lt_error_msg());
  toy_rollout(&t, lt_trainer_policy(a));
  cr_assert_eq(lt_trainer_replay(a, &t.b, NULL, &s1), 0);
  cr_assert_gt(s1.kl_ref, 0, "the policy moved away from the reference");
  /* Resumed as the daemon does: the reference loaded from the latest policy. */
  lt_model_t *latest = toy_model(77), *as_ref = toy_model(77);
  memcpy(latest->params, lt_trainer_policy(a)->params, sizeof(float) * latest->nparams);
  memcpy(as_ref->params, lt_trainer_policy(a)->params, sizeof(float) * as_ref->nparams);
  cr_assert_eq(lt_trainer_create(&c, latest, NULL, as_ref, &b), 0);
  cr_assert_eq(lt_trainer_load(b, dir), 0, "%s", lt_error_msg());
  cr_assert_eq(lt_trainer_replay(b, &t.b, NULL, &s2), 0);
  cr_assert_eq(s1.kl_ref, s2.kl_ref);
  lt_trainer_free(a);
  lt_trainer_free(b);
  lt_test_rmdir(dir);
}

/* Warm-up counts learner steps: every mini-batch update of step k uses the
 * learning rate of position k, not of the update count. */
Test(learner_trainer, warmup_counts_learner_steps) {
  toy_t t;
  toy_make(&t);
  lt_trainer_cfg_t c = toy_cfg(LT_OBJ_MISPO);
  c.actor_minibatches = 4;
  c.actor_opt.warmup = 10;
  c.actor_opt.lr = 1e-3f;
  lt_trainer_t *tr;
  cr_assert_eq(lt_trainer_create(&c, toy_model(3), NULL, NULL, &tr), 0);
  lt_step_stats_t st;
  for (int k = 1; k <= 3; k++) {
    toy_rollout(&t, lt_trainer_policy(tr));
    cr_assert_eq(lt_trainer_step(tr, &t.b, &st), 0);
    cr_expect_float_eq(st.lr, 1e-3 * k / 10, 1e-9, "step %d: lr %g", k, st.lr);
  }
  lt_trainer_free(tr);
}

Test(learner_trainer, load_names_missing_state) {
  lt_trainer_cfg_t c = toy_cfg(LT_OBJ_MISPO);
  lt_trainer_t *tr;
  cr_assert_eq(lt_trainer_create(&c, toy_model(3), NULL, NULL, &tr), 0);
  cr_assert_lt(lt_trainer_load(tr, "/nonexistent/ckpt"), 0);
  cr_assert(strstr(lt_error_msg(), "/nonexistent/ckpt"), "%s", lt_error_msg());
  lt_trainer_free(tr);
}

/* A step's bits do not depend on the BLAS threads the process happens to run: the learner sets learner.threads
 * (retrain reproduces a run on another machine, or after the builtin engine set its own; docs/replay.md).  The
 * products are large enough for OpenBLAS to split them, which sums in another order on another thread count. */
Test(learner_trainer, a_step_does_not_depend_on_the_process_blas_threads) {
  char path[4200];
  snprintf(path, sizeof path, "%s/configs/models/tiny-moe.json", lt_test_root());
  enum { S = 16, T = 200 };
  static int start[S + 1];
  static int32_t tok[S * T];
  static float lp[S * T];
  static uint8_t mask[S * T];
  double reward[S];
  uint8_t trunc[S] = {0};
  int64_t group[S];
  for (int s = 0; s <= S; s++) start[s] = s * T;
  for (int i = 0; i < S * T; i++) tok[i] = (int32_t)((i * 7919u + 13u) % 258u), mask[i] = i % T >= 8;
  for (int s = 0; s < S; s++) reward[s] = s % 3 == 0, group[s] = s / 2;
  lt_train_batch_t b = {.nseq = S,
                        .start = start,
                        .tokens = tok,
                        .logp_rollout = lp,
                        .mask = mask,
                        .reward = reward,
                        .truncated = trunc,
                        .group = group};
  float *w[2] = {NULL, NULL};
  size_t n = 0;
  for (int k = 0; k < 2; k++) {
    lt_model_config_t mc;
    cr_assert_eq(lt_model_config_load(path, &mc), 0, "%s", lt_error_msg());
    lt_model_t *m;
    cr_assert_eq(lt_model_create(&mc, &m), 0);
    lt_model_init_random(m, 5, 0.1f);
    if (k == 0) { /* on-policy rollout logprobs, computed once */
      cr_assert_eq(lt_model_eval_alloc(m, S * T, T), 0);
      lt_batch_t fb = {.nseq = S, .start = start, .tokens = tok};
      lt_fwd_out_t o;
      cr_assert_eq(lt_model_forward(m, &fb, &o), 0);
      memcpy(lp, o.logprobs, sizeof lp);
    }
    lt_trainer_cfg_t c = toy_cfg(LT_OBJ_MISPO);
    lt_trainer_t *tr;
    cr_assert_eq(lt_trainer_create(&c, m, NULL, NULL, &tr), 0);
    lt_ops_blas_threads(k ? 1 : 4); /* what the process had before the step */
    lt_step_stats_t st;
    cr_assert_eq(lt_trainer_step(tr, &b, &st), 0, "%s", lt_error_msg());
    cr_assert_gt(st.actor_grad_norm, 0);
    n = lt_trainer_policy(tr)->nparams;
    w[k] = malloc(sizeof(float) * n);
    memcpy(w[k], lt_trainer_policy(tr)->params, sizeof(float) * n);
    lt_trainer_free(tr);
  }
  size_t differ = 0;
  for (size_t i = 0; i < n; i++) differ += memcmp(&w[0][i], &w[1][i], sizeof(float)) != 0;
  cr_assert_eq(differ, 0, "%zu of %zu weights differ between 4 and 1 BLAS threads", differ, n);
  free(w[0]), free(w[1]);
}

/* The toy batch with known off-policy tokens, under bounds that make the verdicts clear: trajectory bounds
 * [0.9, 1.8].  Sequence 1: x = (3, 1), so its answer token fails the token mask [0.5, 2] while its trajectory
 * (geometric mean √3) passes; sequence 5: x = (1.9, 1.9), both tokens in bounds, the trajectory (1.9) rejected. */
static lt_trainer_t *toy_off_policy(toy_t *t, int minibatches, int threads, lt_token_values_t *v) {
  toy_make(t);
  lt_trainer_cfg_t c = toy_cfg(LT_OBJ_MISPO);
  c.loss.traj_lo = 0.9f, c.loss.traj_hi = 1.8f;
  c.actor_minibatches = c.critic_minibatches = minibatches;
  c.threads = threads;
  lt_trainer_t *tr;
  cr_assert_eq(lt_trainer_create(&c, toy_model(3), NULL, NULL, &tr), 0);
  toy_rollout(t, lt_trainer_policy(tr));
  t->lp[1 * L + 2] -= logf(3.0f);
  t->lp[5 * L + 2] -= logf(1.9f);
  t->lp[5 * L + 3] -= logf(1.9f);
  cr_assert_eq(lt_token_values_alloc(v, NS * L, NS), 0);
  t->b.values = v;
  return tr;
}

Test(learner_trainer, token_values_are_what_the_loss_used) {
  toy_t t;
  lt_token_values_t v;
  lt_trainer_t *tr = toy_off_policy(&t, 2, 1, &v);
  lt_step_stats_t st;
  cr_assert_eq(lt_trainer_step(tr, &t.b, &st), 0, "%s", lt_error_msg());
  cr_assert_float_eq(v.ratio[1 * L + 2], 3.0f, 1e-4);
  cr_assert_float_eq(v.ratio[1 * L + 3], 1.0f, 1e-4);
  cr_assert_float_eq(v.traj_ratio[1], sqrtf(3.0f), 1e-4);
  cr_assert_float_eq(v.traj_ratio[5], 1.9f, 1e-4);
  cr_assert_eq(v.flags[1 * L + 2], LT_TOKV_LOSS | LT_TOKV_TRAJ_OK, "rejected by the token mask");
  cr_assert_eq(v.flags[1 * L + 3], LT_TOKV_LOSS | LT_TOKV_TOKEN_OK | LT_TOKV_TRAJ_OK | LT_TOKV_KEPT);
  cr_assert_eq(v.flags[5 * L + 2], LT_TOKV_LOSS | LT_TOKV_TOKEN_OK, "rejected by the trajectory mask");
  cr_assert_eq(v.flags[5 * L + 3], LT_TOKV_LOSS | LT_TOKV_TOKEN_OK);
  int kept = 0, inb = 0, loss = 0;
  double adv = 0;
  for (int i = 0; i < NS * L; i++) {
    cr_assert_eq(v.flags[i] != 0, t.mask[i] != 0, "token %d: flags %d off the loss mask", i, v.flags[i]);
    cr_assert_eq(v.ratio[i], t.mask[i] ? (float)exp((double)v.logp_old[i] - t.lp[i]) : 0.0f, "token %d", i);
    kept += (v.flags[i] & LT_TOKV_KEPT) != 0;
    inb += (v.flags[i] & LT_TOKV_TOKEN_OK) != 0;
    loss += t.mask[i];
    adv += t.mask[i] ? v.adv[i] : 0;
  }
  /* The step's own statistics count the same tokens and advantages. */
  cr_assert_eq(loss, 16);
  cr_assert_eq(kept, 13);
  cr_assert_float_eq(st.kept_fraction, kept / 16.0, 1e-12);
  cr_assert_float_eq(st.token_accept, inb / 16.0, 1e-12);
  cr_assert_float_eq(st.traj_accept, 7 / 8.0, 1e-12);
  cr_assert_float_eq(st.adv_mean, adv / 16, 1e-6);
  /* Replay at the pre-update weights (what `replay --fill-token-values` recomputes) gives the same values. */
  toy_t r;
  lt_token_values_t vr;
  lt_trainer_t *again = toy_off_policy(&r, 2, 1, &vr);
  cr_assert_eq(lt_trainer_replay(again, &r.b, NULL, &st), 0, "%s", lt_error_msg());
  cr_assert_eq(memcmp(vr.flags, v.flags, NS * L), 0);
  cr_assert_eq(memcmp(vr.ratio, v.ratio, sizeof(float) * NS * L), 0);
  cr_assert_eq(memcmp(vr.adv, v.adv, sizeof(float) * NS * L), 0);
  lt_token_values_free(&vr);
  lt_trainer_free(again);
  lt_token_values_free(&v);
  lt_trainer_free(tr);
}

Test(learner_trainer, token_values_do_not_depend_on_splits_or_threads) {
  toy_t a, b;
  lt_token_values_t va, vb;
  lt_trainer_t *ta = toy_off_policy(&a, 1, 1, &va), *tb = toy_off_policy(&b, 4, 2, &vb);
  lt_step_stats_t st;
  cr_assert_eq(lt_trainer_step(ta, &a.b, &st), 0, "%s", lt_error_msg());
  cr_assert_eq(lt_trainer_step(tb, &b.b, &st), 0, "%s", lt_error_msg());
  cr_assert_eq(memcmp(va.flags, vb.flags, NS * L), 0);
  for (int i = 0; i < NS * L; i++) {
    cr_assert_float_eq(va.ratio[i], vb.ratio[i], 1e-5, "token %d", i);
    cr_assert_float_eq(va.logp_old[i], vb.logp_old[i], 1e-5, "token %d", i);
    cr_assert_float_eq(va.adv[i], vb.adv[i], 1e-5, "token %d", i);
    cr_assert_float_eq(va.entropy[i], vb.entropy[i], 1e-5, "token %d", i);
  }
  for (int s = 0; s < NS; s++) cr_assert_float_eq(va.traj_ratio[s], vb.traj_ratio[s], 1e-5, "sequence %d", s);
  lt_token_values_free(&va);
  lt_token_values_free(&vb);
  lt_trainer_free(ta);
  lt_trainer_free(tb);
}

/* learner.cpus (issue 44): a step pins the thread that runs it and every thread it computes on (learner.threads of
 * them: the learner's team, or the BLAS's own when the team is one) to those CPUs, and trains there; the thread that
 * made the trainer is left where it was. */
typedef struct {
  lt_trainer_t *tr;
  toy_t *t;
  int rc, pinned;
  lt_cpus_t want, self;
} pin_run_t;

/* The process's threads whose CPU set is exactly `want` (/proc/self/task lists them all). */
static int pin_count_threads_on(const cpu_set_t *want) {
  DIR *d = opendir("/proc/self/task");
  cr_assert(d, "/proc/self/task: %s", strerror(errno));
  int n = 0;
  for (struct dirent *e; (e = readdir(d));) {
    cpu_set_t s;
    if (e->d_name[0] != '.' && sched_getaffinity((pid_t)atoi(e->d_name), sizeof s, &s) == 0) n += CPU_EQUAL(&s, want);
  }
  closedir(d);
  return n;
}

static void *pin_step(void *arg) {
  pin_run_t *p = arg;
  lt_step_stats_t st;
  p->rc = lt_trainer_step(p->tr, &p->t->b, &st);
  lt_cpus_get_self(&p->self);
  p->pinned = pin_count_threads_on(&p->want.set);
  return NULL;
}

Test(learner_trainer, learner_cpus_pin_the_step_and_its_threads) {
  lt_cpus_t on, mine, after;
  cr_assert_eq(lt_cpus_online(&on), 0);
  if (on.n < 2) cr_skip_test("one CPU online: nothing to pin apart");
  int last = 0;
  for (int c = 0; c < CPU_SETSIZE; c++)
    if (CPU_ISSET(c, &on.set)) last = c;
  char list[16];
  snprintf(list, sizeof list, "%d", last);
  toy_t t;
  toy_make(&t);
  lt_trainer_cfg_t c = toy_cfg(LT_OBJ_MISPO);
  c.threads = 2;
  cr_assert_eq(lt_cpus_parse(list, &c.cpus), 0);
  pin_run_t p = {.t = &t, .want = c.cpus};
  cr_assert_eq(lt_trainer_create(&c, toy_model(3), NULL, NULL, &p.tr), 0, "%s", lt_error_msg());
  toy_rollout(&t, lt_trainer_policy(p.tr));
  cr_assert_eq(lt_cpus_get_self(&mine), 0);
  lt_ops_blas_threads(2); /* threads started before, here, unpinned: the step must move them */
  pthread_t th;
  cr_assert_eq(pthread_create(&th, NULL, pin_step, &p), 0);
  pthread_join(th, NULL);
  cr_assert_eq(p.rc, 0, "%s", lt_error_msg());
  cr_expect(CPU_EQUAL(&p.self.set, &c.cpus.set), "the step's thread runs on %d CPUs, not CPU %d alone", p.self.n, last);
  cr_expect_geq(p.pinned, 2, "%d thread(s) on CPU %d alone: the step's and its other thread", p.pinned, last);
  cr_assert_eq(lt_cpus_get_self(&after), 0);
  cr_expect(CPU_EQUAL(&after.set, &mine.set), "the test's own thread moved");
  lt_trainer_free(p.tr);
}

/* ---- LoRA (learner.lora, learner/lora.h) ---- */

static lt_trainer_cfg_t lora_cfg(lt_objective obj) {
  lt_trainer_cfg_t c = toy_cfg(obj);
  c.lora = c.critic_lora = (lt_lora_cfg_t){.rank = 4, .alpha = 8, .targets = 0x7f, .init_seed = 1};
  c.actor_opt.lr = 1e-2f; /* adapters take a larger rate than full training */
  return c;
}

/* Every objective moves the policy through its adapters alone: the base stays bit for bit, the optimizer holds
 * moments for the adapters only (the policy's and the critic's). */
static void lora_improves(lt_objective obj, int group) {
  toy_t t;
  toy_make(&t);
  lt_trainer_cfg_t c = lora_cfg(obj);
  c.loss.group_adv = group;
  lt_model_t *m = toy_model(3);
  float *base = malloc(sizeof(float) * m->nparams);
  memcpy(base, m->params, sizeof(float) * m->nparams);
  lt_trainer_t *tr;
  cr_assert_eq(lt_trainer_create(&c, m, NULL, NULL, &tr), 0, "%s", lt_error_msg());
  lt_model_t *p = lt_trainer_policy(tr);
  cr_assert_not_null(p->lora);
  double before = preference(tr, &t);
  cr_assert_eq(before, t.lp[1 * L + 2] - t.lp[0 * L + 2]);
  lt_step_stats_t st;
  for (int i = 0; i < 30; i++) {
    toy_rollout(&t, lt_trainer_policy(tr));
    cr_assert_eq(lt_trainer_step(tr, &t.b, &st), 0, "%s", lt_error_msg());
    cr_assert(isfinite(st.actor_loss) && st.actor_grad_norm > 0);
  }
  double after = preference(tr, &t);
  cr_assert_gt(after, before + 1.0, "%s: log p(5)/p(7) %.3f -> %.3f", lt_objective_name(obj), before, after);
  cr_assert_eq(memcmp(p->params, base, sizeof(float) * p->nparams), 0, "the base moved");
  cr_assert_null(p->grads, "the base has no gradient buffer");
  size_t adapters = p->lora->nparams;
  if (!group) adapters += p->lora->nparams + (size_t)p->cfg.hidden; /* the critic's, with its score head */
  cr_assert_eq(lt_trainer_optim_bytes(tr), 2 * sizeof(float) * adapters, "optimizer state beyond the adapters");
  lt_trainer_free(tr);
  free(base);
}

Test(learner_trainer, lora_mispo_trains_the_adapters_alone) { lora_improves(LT_OBJ_MISPO, 0); }
Test(learner_trainer, lora_ppo_trains_the_adapters_alone) { lora_improves(LT_OBJ_PPO, 0); }
Test(learner_trainer, lora_grpo_trains_the_adapters_alone) { lora_improves(LT_OBJ_GRPO, 1); }
Test(learner_trainer, lora_gspo_trains_the_adapters_alone) { lora_improves(LT_OBJ_GSPO, 0); }
Test(learner_trainer, lora_tis_trains_the_adapters_alone) { lora_improves(LT_OBJ_TIS, 0); }

/* With adapters the KL reference is the base, adapters off, with no second model: the same numbers as a trainer
 * given the base as its reference model, to the bit. */
Test(learner_trainer, lora_kl_reference_is_the_base) {
  toy_t t;
  toy_make(&t);
  lt_trainer_cfg_t c = lora_cfg(LT_OBJ_MISPO);
  c.loss.kl_coef = 0.5f;
  lt_trainer_t *a, *b;
  c.ref_base = 1;
  cr_assert_eq(lt_trainer_create(&c, toy_model(3), NULL, NULL, &a), 0, "%s", lt_error_msg());
  c.ref_base = 0;
  cr_assert_eq(lt_trainer_create(&c, toy_model(3), NULL, toy_model(3), &b), 0, "%s", lt_error_msg());
  lt_step_stats_t sa, sb;
  for (int i = 0; i < 4; i++) {
    toy_rollout(&t, lt_trainer_policy(a));
    cr_assert_eq(lt_trainer_step(a, &t.b, &sa), 0, "%s", lt_error_msg());
    cr_assert_eq(lt_trainer_step(b, &t.b, &sb), 0, "%s", lt_error_msg());
    cr_assert_eq(sa.kl_ref, sb.kl_ref, "step %d: KL %g vs %g", i, sa.kl_ref, sb.kl_ref);
    cr_assert_eq(sa.actor_loss, sb.actor_loss);
  }
  cr_assert_gt(sa.kl_ref, 0, "the adapted policy moved away from its base");
  lt_trainer_free(a);
  lt_trainer_free(b);
}

/* A LoRA trainer's state (base, adapters, their moments) resumes to the bit-identical next step. */
Test(learner_trainer, lora_resume_reproduces_the_next_step) { resume_check(lora_cfg(LT_OBJ_MISPO), "trainer-lora"); }
