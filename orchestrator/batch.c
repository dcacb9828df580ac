/* Batches for the trainer: the job config as trainer settings, and
 * trajectories from the buffer packed as one train batch.  The learner thread
 * and `longtail replay` share them, so a replay sees what a step saw. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "learner/device.h"
#include "orchestrator/daemon.h"
#include "util/error.h"
#include "util/log.h"

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
int lt__learner_cuda(const lt_config_t *c, int muon) {
  const char *dev = lt_config_str(c, "learner.device");
  int gpus = lt_device_cuda_count(), ksm = lt_config_bool(c, "learner.keep_sampling_mask");
  if (!strcmp(dev, "cuda")) {
    if (!gpus)
      return lt_error_set(LT_ECONFIG, "learner.device: \"cuda\" but this %s (use \"auto\" or \"cpu\")",
                          lt_device_cuda_built() ? "machine has no usable GPU" : "build has no CUDA learner");
    if (ksm || muon)
      return lt_error_set(LT_ECONFIG, "learner.device: \"cuda\" does not support %s (CPU learner only)",
                          ksm ? "learner.keep_sampling_mask" : "learner.optimizer \"muon\"");
    return 1;
  }
  if (strcmp(dev, "auto") || !gpus) return 0;
  if (ksm || muon) lt_log(LT_LOG_INFO, "learner", "a GPU is present, but %s runs on the CPU learner", ksm ? "keep_sampling_mask" : "muon");
  return !ksm && !muon;
}

int lt__trainer_cfg(const lt_config_t *c, lt_trainer_cfg_t *tc) {
  memset(tc, 0, sizeof *tc);
  int obj = lt_objective_parse(lt_config_str(c, "learner.objective"));
  lt_loss_cfg_default(&tc->loss, (lt_objective)obj);
  double tb[2], jb[2];
  if (bounds(c, "learner.mispo.token_bounds", tb) < 0 || bounds(c, "learner.mispo.traj_bounds", jb) < 0) return LT_ECONFIG;
  if (obj == LT_OBJ_MISPO || obj == LT_OBJ_GSPO) {
    tc->loss.tok_lo = (float)tb[0], tc->loss.tok_hi = (float)tb[1];
    tc->loss.traj_lo = (float)jb[0], tc->loss.traj_hi = (float)jb[1];
  }
  tc->loss.kl_coef = (float)lt_config_num(c, "learner.kl_coef");
  tc->actor_minibatches = (int)lt_config_int(c, "learner.actor_minibatches");
  tc->critic_minibatches = (int)lt_config_int(c, "learner.critic_minibatches");
  tc->group_std = 1;
  tc->threads = (int)lt_config_int(c, "learner.threads");
  lt_optim_cfg_default(&tc->actor_opt, !strcmp(lt_config_str(c, "learner.optimizer"), "muon") ? LT_OPT_MUON : LT_OPT_ADAMW);
  tc->actor_opt.lr = (float)lt_config_num(c, "learner.lr");
  tc->actor_opt.warmup = (int)lt_config_int(c, "learner.warmup_steps");
  tc->actor_opt.weight_decay = (float)lt_config_num(c, "learner.weight_decay");
  tc->actor_opt.grad_clip = (float)lt_config_num(c, "learner.grad_clip");
  lt_optim_cfg_default(&tc->critic_opt, LT_OPT_ADAMW);
  tc->critic_opt.lr = (float)lt_config_num(c, "learner.critic.lr");
  tc->critic_opt.warmup = (int)lt_config_int(c, "learner.critic.warmup_steps");
  tc->critic_opt.weight_decay = 0;
  tc->critic_opt.grad_clip = (float)lt_config_num(c, "learner.grad_clip");
  int rc = lt__learner_cuda(c, tc->actor_opt.kind == LT_OPT_MUON);
  if (rc < 0) return rc;
  tc->cuda = rc;
  return 0;
}

/* The first column of the first row, as text (4096 bytes at ud). */
void lt__packed_free(lt__packed_t *p) {
  free(p->start), free(p->tokens), free(p->support), free(p->logp), free(p->mask), free(p->trunc), free(p->route);
  free(p->reward), free(p->group), free(p->ids), free(p->vmin), free(p->bad), free(p->bad_why);
  memset(p, 0, sizeof *p);
}

void lt__packed_batch(const lt__packed_t *p, int keep_routing, int keep_sampling_mask, lt_train_batch_t *b) {
  *b = (lt_train_batch_t){.nseq = p->n, .start = p->start, .tokens = p->tokens, .logp_rollout = p->logp, .mask = p->mask,
                          .support = keep_sampling_mask && p->has_support ? p->support : NULL,
                          .route_ids = keep_routing && p->has_route ? p->route : NULL,
                          .reward = p->reward, .truncated = p->trunc, .group = p->group};
}

int lt__batch_pack(lt_buffer_t *buf, const lt_model_t *pol, const int64_t *ids, int n, lt__packed_t *p) {
  int nml = lt_model_moe_layers(&pol->cfg), K = pol->cfg.topk, R = nml * K;
  memset(p, 0, sizeof *p);
  p->n = n;
  p->start = calloc((size_t)n + 1, sizeof(int));
  p->reward = calloc((size_t)n, sizeof(double));
  p->group = calloc((size_t)n, sizeof(int64_t));
  p->trunc = calloc((size_t)n, 1);
  p->ids = malloc(sizeof(int64_t) * (size_t)n);
  p->vmin = malloc(sizeof(int64_t) * (size_t)n);
  p->bad = malloc(sizeof(int64_t) * (size_t)n);
  p->bad_why = malloc(sizeof *p->bad_why * (size_t)n);
  if (!p->start || !p->reward || !p->group || !p->trunc || !p->ids || !p->vmin || !p->bad || !p->bad_why)
    return lt_error_set(LT_ENOMEM, "learner: out of memory");
  /* What the learner cannot train on (a buffer written before the daemon
   * checked trajectories) is left out and reported, not fatal. */
  lt_traj_limits_t lim = {.vocab = pol->cfg.vocab, .max_version = INT32_MAX};
  int packed = 0;
  p->has_support = 1;
  p->has_route = nml > 0;
  double conf = 0, rsum = 0;
  int nconf = 0, ntrunc = 0, cap = 0, N = 0, rc = 0;
  p->ndom = 0;
  int dom_n[8] = {0};
  for (int s = 0; s < n && rc == 0; s++) {
    lt_traj_t t;
    lt_traj_meta_t m;
    if ((rc = lt_buffer_traj_load(buf, ids[s], &t, &m)) < 0) break;
    if (lt_traj_check(&t, &lim) < 0) {
      p->bad[p->nbad] = ids[s];
      snprintf(p->bad_why[p->nbad++], sizeof p->bad_why[0], "%s", lt_error_msg());
      lt_buffer_traj_free(&t);
      continue;
    }
    p->ids[packed] = ids[s];
    int T = t.ntokens > pol->cfg.max_pos ? pol->cfg.max_pos : t.ntokens;
    if (N + T > cap) {
      cap = (N + T) * 2;
      int32_t *a = realloc(p->tokens, sizeof(int32_t) * (size_t)cap);
      if (a) p->tokens = a;
      int32_t *b = a ? realloc(p->support, sizeof(int32_t) * (size_t)cap) : NULL;
      if (b) p->support = b;
      float *c = b ? realloc(p->logp, sizeof(float) * (size_t)cap) : NULL;
      if (c) p->logp = c;
      uint8_t *mm = c ? realloc(p->mask, (size_t)cap) : NULL;
      if (mm) p->mask = mm;
      uint16_t *ro = mm && R ? realloc(p->route, sizeof(uint16_t) * (size_t)cap * (size_t)R) : NULL;
      if (ro) p->route = ro;
      if (!mm || (R && !ro)) {
        lt_buffer_traj_free(&t);
        return lt_error_set(LT_ENOMEM, "learner: out of memory");
      }
    }
    memcpy(p->tokens + N, t.tokens, sizeof(int32_t) * (size_t)T);
    memcpy(p->logp + N, t.logprobs, sizeof(float) * (size_t)T);
    memcpy(p->mask + N, t.loss_mask, (size_t)T);
    if (t.support) memcpy(p->support + N, t.support, sizeof(int32_t) * (size_t)T);
    else p->has_support = 0;
    if (R && t.routing_ids && t.routing_layers == nml && t.routing_k == K) {
      memcpy(p->route + (size_t)N * R, t.routing_ids, sizeof(uint16_t) * (size_t)T * (size_t)R);
      for (int i = 0; i < T; i++)
        if (t.loss_mask[i]) {
          double c = 0;
          for (int k = 0; k < R; k++) c += t.routing_probs[(size_t)i * R + k];
          conf += c / nml;
          nconf++;
        }
    } else {
      p->has_route = 0;
    }
    /* A trajectory cut to the learner's context counts as truncated. */
    p->trunc[packed] = t.finish == LT_FINISH_TRUNCATED || T < t.ntokens;
    ntrunc += p->trunc[packed];
    p->reward[packed] = t.reward;
    p->group[packed] = (int64_t)t.group_id;
    rsum += t.reward;
    p->vmin[packed] = m.version_min;
    for (int i = 0; i < T; i++) p->gen_tokens += t.loss_mask[i];
    int di = 0;
    while (di < p->ndom && strcmp(p->dom[di], t.domain)) di++;
    if (di == p->ndom && di < 8) snprintf(p->dom[p->ndom++], sizeof p->dom[0], "%s", t.domain);
    if (di < 8) {
      p->dom_reward[di] += t.reward;
      dom_n[di]++;
    }
    lt_buffer_traj_free(&t);
    p->start[packed] = N;
    N += T;
    p->start[++packed] = N;
  }
  p->n = packed;
  for (int i = 0; i < p->ndom; i++) p->dom_reward[i] /= dom_n[i] ? dom_n[i] : 1;
  p->reward_mean = packed ? rsum / packed : 0;
  p->trunc_rate = packed ? (double)ntrunc / packed : 0;
  p->route_rollout = nconf ? conf / nconf : -1;
  return rc;
}

