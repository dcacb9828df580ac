/* Packing: the job config as trainer settings, and trajectories loaded from the buffer (the wire record,
 * lt_traj_t) packed as one train batch.  The step driver and `longtail replay` share them, so a replay sees
 * what a step saw. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "learner/device.h"
#include "learner/schema.h"
#include "train/internal.h"
#include "util/error.h"
#include "util/grow.h"
#include "util/log.h"
#include "util/rng.h"

static int bounds(const lt_config_t *c, const char *path, double out[2]) {
  const cJSON *a = lt_config_get(c, path);
  if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != 2 || !cJSON_IsNumber(a->child) || !cJSON_IsNumber(a->child->next) ||
      a->child->valuedouble > a->child->next->valuedouble)
    return lt_error_set(LT_ECONFIG, "%s: expected [low, high] with low <= high", path);
  out[0] = a->child->valuedouble;
  out[1] = a->child->next->valuedouble;
  return 0;
}

/* learner.device: cuda insists; auto takes a GPU only for what the GPU learner
 * supports.  1: CUDA learner, 0: CPU, or an LT_ECONFIG error. */
int lt__learner_cuda(const lt_config_t *c, const char *cpu_only) {
  const char *dev = lt_config_str(c, "learner.device");
  int gpus = lt_device_cuda_count();
  if (!strcmp(dev, "cuda")) {
    if (cpu_only)
      return lt_error_set(LT_ECONFIG, "learner.device: \"cuda\" does not support %s (CPU learner only)", cpu_only);
    if (!gpus)
      return lt_error_set(LT_ECONFIG, "learner.device: \"cuda\" but this %s (use \"auto\" or \"cpu\")",
                          lt_device_cuda_built() ? "machine has no usable GPU" : "build has no CUDA learner");
    return 1;
  }
  if (strcmp(dev, "auto") || !gpus) return 0;
  if (cpu_only) lt_log(LT_LOG_INFO, "learner", "a GPU is present, but %s runs on the CPU learner", cpu_only);
  return !cpu_only;
}

int lt__dynamic_filter(const lt_config_t *c) {
  const cJSON *set = lt_config_get(c, "scheduler.dynamic_filter");
  return set ? cJSON_IsTrue(set) : lt__group_advantages(c);
}

int lt__group_advantages(const lt_config_t *c) {
  const char *obj = lt_config_str(c, "learner.objective");
  return !strcmp(obj, "grpo") || (!strcmp(obj, "gspo") && !strcmp(lt_config_str(c, "learner.gspo.advantage"), "group"));
}

int lt__trainer_cfg(const lt_config_t *c, lt_trainer_cfg_t *tc) {
  memset(tc, 0, sizeof *tc);
  int obj = lt_objective_parse(lt_config_str(c, "learner.objective"));
  lt_loss_cfg_default(&tc->loss, (lt_objective)obj);
  double tb[2], jb[2];
  if (bounds(c, "learner.mispo.token_bounds", tb) < 0 || bounds(c, "learner.mispo.traj_bounds", jb) < 0)
    return LT_ECONFIG;
  if (obj == LT_OBJ_MISPO || obj == LT_OBJ_GSPO) {
    tc->loss.tok_lo = (float)tb[0], tc->loss.tok_hi = (float)tb[1];
    tc->loss.traj_lo = (float)jb[0], tc->loss.traj_hi = (float)jb[1];
  }
  tc->loss.kl_coef = (float)lt_config_num(c, "learner.kl_coef");
  tc->loss.tis_cap = (float)lt_config_num(c, "learner.tis.cap");
  tc->loss.group_adv = lt__group_advantages(c);
  tc->actor_minibatches = (int)lt_config_int(c, "learner.actor_minibatches");
  tc->critic_minibatches = (int)lt_config_int(c, "learner.critic_minibatches");
  tc->group_std = lt_config_bool(c, "learner.grpo.std_normalize");
  if (obj == LT_OBJ_GRPO) {
    tc->loss.delta = (float)lt_config_num(c, "learner.grpo.delta");
    tc->loss.clip_lo = tc->loss.clip_hi = (float)lt_config_num(c, "learner.grpo.epsilon");
  }
  tc->threads = (int)lt_config_int(c, "learner.threads");
  if (lt_cpus_config(c, "learner.cpus", &tc->cpus) < 0) return LT_ECONFIG;
  lt_optim_cfg_default(&tc->actor_opt,
                       !strcmp(lt_config_str(c, "learner.optimizer"), "muon") ? LT_OPT_MUON : LT_OPT_ADAMW);
  tc->actor_opt.lr = (float)lt_config_num(c, "learner.lr");
  tc->actor_opt.warmup = (int)lt_config_int(c, "learner.warmup_steps");
  tc->actor_opt.weight_decay = (float)lt_config_num(c, "learner.weight_decay");
  tc->actor_opt.grad_clip = (float)lt_config_num(c, "learner.grad_clip");
  lt_optim_cfg_default(&tc->critic_opt, LT_OPT_ADAMW);
  tc->critic_opt.lr = (float)lt_config_num(c, "learner.critic.lr");
  tc->critic_opt.warmup = (int)lt_config_int(c, "learner.critic.warmup_steps");
  tc->critic_opt.weight_decay = 0;
  tc->critic_opt.grad_clip = (float)lt_config_num(c, "learner.grad_clip");
  int rc;
  if ((rc = lt_learner_lora_cfg(c, 0, &tc->lora)) < 0 || (rc = lt_learner_lora_cfg(c, 1, &tc->critic_lora)) < 0)
    return rc;
  tc->ref_base = tc->lora.rank > 0 && lt__domains_any_kl(c);
  /* The GPU optimizer is AdamW, and the adapters have CPU code only (no GPU was lent to verify a CUDA one);
   * temperatures and Keep Sampling Mask run on both learners. */
  const char *cpu_only = tc->actor_opt.kind == LT_OPT_MUON ? "learner.optimizer \"muon\""
                         : tc->lora.rank > 0 || tc->critic_lora.rank > 0
                             ? "learner.lora (its maths has no CUDA code: none was written without a GPU to verify it)"
                             : NULL;
  if ((rc = lt__learner_cuda(c, cpu_only)) < 0) return rc;
  tc->cuda = rc;
  tc->gpu_bf16 = lt_config_bool(c, "learner.gpu.bf16");
  tc->gpu_recompute = lt_config_bool(c, "learner.gpu.recompute");
  return 0;
}

/* The first column of the first row, as text (4096 bytes at ud). */
void lt__packed_free(lt__packed_t *p) {
  free(p->start), free(p->traj), free(p->off), free(p->tlen), free(p->tokens), free(p->support), free(p->sids),
      free(p->logp), free(p->temp), free(p->mask);
  free(p->trunc), free(p->no_support), free(p->no_route), free(p->skip), free(p->route);
  free(p->reward), free(p->kl), free(p->group), free(p->ids), free(p->vmin), free(p->bad), free(p->bad_why);
  memset(p, 0, sizeof *p);
}

void lt__packed_batch(lt__packed_t *p, int keep_routing, int keep_sampling_mask, lt_train_batch_t *b) {
  p->skip_sampling = p->skip_routing = 0;
  /* A context that cannot be reproduced leaves its whole trajectory out: the trajectory-level
   * tests and weights need all of its tokens. */
  for (int s0 = 0, s1; s0 < p->n; s0 = s1) {
    s1 = lt_traj_end(p->traj, p->n, s0);
    int ns = 0, nr = 0;
    for (int s = s0; s < s1; s++) {
      ns |= keep_sampling_mask && p->no_support[s];
      nr |= keep_routing && p->has_route && p->no_route[s];
    }
    p->skip_sampling += ns;
    p->skip_routing += nr;
    memset(p->skip + s0, ns || nr, (size_t)(s1 - s0));
  }
  *b = (lt_train_batch_t){.nseq = p->n,
                          .start = p->start,
                          .tokens = p->tokens,
                          .logp_rollout = p->logp,
                          .mask = p->mask,
                          .support = keep_sampling_mask ? p->support : NULL,
                          .support_ids = keep_sampling_mask ? p->sids : NULL,
                          .temperature = p->temp,
                          .actor_skip = p->skip,
                          .route_ids = keep_routing && p->has_route ? p->route : NULL,
                          .reward = p->reward,
                          .truncated = p->trunc,
                          .group = p->group,
                          .kl_coef = p->kl,
                          .traj = p->traj};
}

static int cmp_id(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

void lt__batch_shuffle(int64_t *ids, int n, uint64_t seed, int64_t step) {
  qsort(ids, (size_t)n, sizeof *ids, cmp_id);
  lt_rng_t r;
  lt_rng_seed(&r, lt_rng_mix(seed, (uint64_t)step));
  for (int i = n - 1; i > 0; i--) {
    int j = (int)lt_rng_below(&r, (uint64_t)i + 1);
    int64_t x = ids[i];
    ids[i] = ids[j], ids[j] = x;
  }
}

/* Copies the sampling sets of t's tokens [a, a + T) into p at token N; 1 when
 * t's sets can be reproduced exactly: recorded with their ids (or all full), or
 * not recorded while the TASK sampled from the whole vocabulary. */
static int pack_support(lt__packed_t *p, const lt_traj_t *t, int a, int N, int T, int vocab, int task_truncates) {
  memset(p->support + N, 0, sizeof(int32_t) * (size_t)T);
  if (!t->support) return !task_truncates;
  size_t k = 0, skip = 0;
  for (int i = 0; i < a; i++) skip += (size_t)t->support[i];
  for (int i = a; i < a + T; i++) k += (size_t)t->support[i];
  if (k == 0) return 1;
  if (!t->support_ids || skip + k > (size_t)t->nsupport_ids) return 0;
  for (size_t i = skip; i < skip + k; i++)
    if (t->support_ids[i] < 0 || t->support_ids[i] >= vocab) return 0;
  lt_grow_t ids[] = {LT_GROW(p->sids)};
  int rc = lt_grow(&p->sids_cap, p->nsids + k, 1024, ids, 1);
  if (rc < 0) return rc;
  memcpy(p->sids + p->nsids, t->support_ids + skip, sizeof(int32_t) * k);
  memcpy(p->support + N, t->support + a, sizeof(int32_t) * (size_t)T);
  p->nsids += k;
  return 1;
}

/* Room for `need` packed sequences in the per-sequence arrays (a trajectory
 * of several contexts packs each as its own sequence). */
static int grow_seqs(lt__packed_t *p, int need) {
  size_t old = p->cap;
  lt_grow_t arr[] = {LT_GROW(p->start),      LT_GROW(p->traj),     LT_GROW(p->off),   LT_GROW(p->tlen),
                     LT_GROW(p->reward),     LT_GROW(p->kl),       LT_GROW(p->group), LT_GROW(p->trunc),
                     LT_GROW(p->no_support), LT_GROW(p->no_route), LT_GROW(p->skip),  LT_GROW(p->ids),
                     LT_GROW(p->vmin)};
  int rc = lt_grow(&p->cap, (size_t)need + 1, 16, arr, sizeof arr / sizeof *arr); /* + 1: start has n + 1 */
  if (rc < 0 || p->cap == old) return rc;
  memset(p->skip + old, 0, p->cap - old);
  memset(p->no_route + old, 0, p->cap - old);
  return 0;
}

/* What would make the learner fail or train on garbage (ingestion refuses it since it checks trajectories,
 * proto/trajcheck.c; a buffer written before that may still hold it): why in `why`, 1, or 0. */
static int unusable(const lt_traj_t *t, int vocab, char *why, size_t cap) {
  if (t->has_reward && !isfinite(t->reward)) return snprintf(why, cap, "reward is not finite") > 0;
  for (int i = 0; i < t->ntokens; i++) {
    if (t->tokens[i] < 0 || t->tokens[i] >= vocab)
      return snprintf(why, cap, "token %d: id %d outside the vocabulary [0, %d)", i, t->tokens[i], vocab) > 0;
    if (t->loss_mask[i] && !(isfinite(t->logprobs[i]) && t->logprobs[i] <= 0))
      return snprintf(why, cap, "token %d: logprob %g is not a finite value <= 0", i, (double)t->logprobs[i]) > 0;
  }
  return 0;
}

/* Packs tokens [a, end) of t as sequence `packed`, a context of the batch's trajectory `traj`, at token *N. */
static int pack_one(lt__packed_t *p, const lt_traj_t *t, const lt_traj_meta_t *m, int a, int end, int packed, int traj,
                    int *N, size_t *cap, const lt_model_t *pol, int R, int nml, int K, double task_temp,
                    int task_truncates, double *conf, int *nconf) {
  int T = end - a > pol->cfg.max_pos ? pol->cfg.max_pos : end - a, n0 = *N;
  p->ids[packed] = t->task_id;
  lt_grow_t arr[] = {LT_GROW(p->tokens), LT_GROW(p->support), LT_GROW(p->logp),
                     LT_GROW(p->temp),   LT_GROW(p->mask),    LT_GROW_K(p->route, R)};
  if (lt_grow(cap, (size_t)(n0 + T), 4096, arr, sizeof arr / sizeof *arr) < 0) return LT_ENOMEM;
  memcpy(p->tokens + n0, t->tokens + a, sizeof(int32_t) * (size_t)T);
  memcpy(p->logp + n0, t->logprobs + a, sizeof(float) * (size_t)T);
  memcpy(p->mask + n0, t->loss_mask + a, (size_t)T);
  /* A TRAJ that did not say stands for the TASK's settings (docs/protocol.md). */
  float temp = (float)(t->temperature >= 0 ? t->temperature : task_temp);
  for (int i = 0; i < T; i++) p->temp[n0 + i] = temp;
  int rc = pack_support(p, t, a, n0, T, pol->cfg.vocab, task_truncates);
  if (rc < 0) return rc;
  p->no_support[packed] = rc == 0;
  p->no_route[packed] = 0;
  if (R && t->routing_ids && t->routing_layers == nml && t->routing_k == K) {
    memcpy(p->route + (size_t)n0 * R, t->routing_ids + (size_t)a * R, sizeof(uint16_t) * (size_t)T * (size_t)R);
    for (int i = 0; i < T; i++)
      if (t->loss_mask[a + i]) {
        double cm = 0;
        for (int k = 0; k < R; k++) cm += t->routing_probs[(size_t)(a + i) * R + k];
        *conf += cm / nml;
        (*nconf)++;
      }
  } else if (R) { /* valid, distinct ids so the forward runs; the sequence is left out of the actor loss */
    for (size_t i = 0; i < (size_t)T * (size_t)nml; i++)
      for (int k = 0; k < K; k++) p->route[(size_t)n0 * R + i * (size_t)K + (size_t)k] = (uint16_t)k;
    p->no_route[packed] = 1;
  }
  /* A trajectory cut to the learner's context counts as truncated; each context is trained with the episode's
   * reward, and the last context's flag is the trajectory's (it bootstraps from its end, lt_adv_critic). */
  p->trunc[packed] = m->truncated || T < end - a;
  p->traj[packed] = traj;
  p->off[packed] = a;
  p->tlen[packed] = t->ntokens;
  p->reward[packed] = t->reward;
  p->group[packed] = (int64_t)t->group_id;
  p->vmin[packed] = m->version_min;
  for (int i = 0; i < T; i++) p->gen_tokens += t->loss_mask[a + i];
  *N = n0 + T;
  return 0;
}

int lt__batch_pack(lt_buffer_t *buf, const lt_model_t *pol, const lt_config_t *c, const int64_t *ids, int n,
                   lt__packed_t *p) {
  int nml = lt_model_moe_layers(&pol->cfg), K = pol->cfg.topk, R = nml * K;
  memset(p, 0, sizeof *p);
  p->n = n;
  p->bad = malloc(sizeof(int64_t) * (size_t)n);
  p->bad_why = malloc(sizeof *p->bad_why * (size_t)n);
  if (!p->bad || !p->bad_why || grow_seqs(p, n) < 0) return lt_error_set(LT_ENOMEM, "learner: out of memory");
  p->start[0] = 0;
  /* What the learner cannot train on (a buffer written before the daemon
   * checked trajectories) is left out and reported, not fatal. */
  int packed = 0;
  p->has_route = nml > 0;
  double task_temp = lt_config_num(c, "rollout.temperature");
  int task_truncates = lt_config_num(c, "rollout.top_p") < 1 || lt_config_int(c, "rollout.top_k") > 0;
  double conf = 0, rsum = 0, turns = 0;
  int nconf = 0, ntrunc = 0, ntraj = 0, N = 0, rc = 0;
  size_t cap = 0;
  p->ndom = 0;
  int dom_n[LT_TRAIN_MAX_DOMAINS] = {0};
  for (int s = 0; s < n && rc == 0; s++) {
    lt_traj_t t;
    lt_traj_meta_t m;
    if ((rc = lt_buffer_traj_load(buf, ids[s], LT_LOAD_TOKENS, &t, &m)) < 0) break;
    if (unusable(&t, pol->cfg.vocab, p->bad_why[p->nbad], sizeof p->bad_why[0])) {
      p->bad[p->nbad++] = ids[s];
      lt_traj_free(&t);
      continue;
    }
    int nseq = t.nseqs > 1 ? t.nseqs : 1;
    if ((rc = grow_seqs(p, packed + nseq)) < 0) {
      lt_traj_free(&t);
      break;
    }
    for (int k = 0; k < nseq && rc == 0; k++) {
      int a = nseq > 1 ? t.seq_starts[k] : 0, end = k + 1 < nseq ? t.seq_starts[k + 1] : t.ntokens;
      rc = pack_one(p, &t, &m, a, end, packed, ntraj, &N, &cap, pol, R, nml, K, task_temp, task_truncates, &conf,
                    &nconf);
      p->start[++packed] = N;
    }
    if (rc < 0) {
      lt_traj_free(&t);
      break;
    }
    ntrunc += p->trunc[packed - 1];
    rsum += t.reward;
    if (!ntraj || t.reward < p->reward_min) p->reward_min = t.reward;
    if (!ntraj || t.reward > p->reward_max) p->reward_max = t.reward;
    turns += t.turns;
    int di = 0;
    while (di < p->ndom && strcmp(p->dom[di], t.domain)) di++;
    if (di == p->ndom && di < LT_TRAIN_MAX_DOMAINS) snprintf(p->dom[p->ndom++], sizeof p->dom[0], "%s", t.domain);
    if (di < LT_TRAIN_MAX_DOMAINS) {
      p->dom_reward[di] += t.reward;
      if (!dom_n[di] || t.reward < p->dom_min[di]) p->dom_min[di] = t.reward;
      if (!dom_n[di] || t.reward > p->dom_max[di]) p->dom_max[di] = t.reward;
      dom_n[di]++;
    }
    float kl = lt__domain_kl(c, t.domain);
    for (int k = packed - nseq; k < packed; k++) p->kl[k] = kl;
    ntraj++;
    lt_traj_free(&t);
  }
  p->n = packed;
  for (int i = 0; i < p->ndom; i++) p->dom_reward[i] /= dom_n[i] ? dom_n[i] : 1;
  p->reward_mean = ntraj ? rsum / ntraj : 0;
  p->trunc_rate = ntraj ? (double)ntrunc / ntraj : 0;
  p->turns_mean = ntraj ? turns / ntraj : 0;
  p->route_rollout = nconf ? conf / nconf : -1;
  return rc;
}
