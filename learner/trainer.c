/* The RL learner step, the supervised step and the trainer's full state. */
#include "learner/trainer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "learner/dist.h"
#include "learner/internal.h"
#include "learner/ops.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/json.h"
#include "util/log.h"

struct lt_trainer {
  lt_trainer_cfg_t cfg;
  lt__device_t dev;
  lt__dmodel_t model[LT__NMODELS]; /* by lt__model_id; host NULL: the run has no such model */
  int64_t steps;
  double lr_scale;
  float base_lr;
};

const char *lt__model_name(lt__model_id id) {
  static const char *const names[LT__NMODELS] = {"policy", "critic", "reference"};
  return names[id];
}

static int needs_critic(const lt_trainer_cfg_t *c) { return !c->loss.group_adv; }

/* The objective's advantages come from a critic (not group baselines). */
static int has_critic(const lt_trainer_t *t) { return t->model[LT__CRITIC].host != NULL; }

/* The run keeps a KL reference (some domain's β > 0): a model of its own, or the policy's base. */
static int has_ref(const lt_trainer_t *t) { return t->model[LT__REF].host || t->cfg.ref_base; }

/* Gives m the adapter c asks for (`what`: its key), or checks the one it carries has those settings. */
static int adapt(lt_model_t *m, const lt_lora_cfg_t *c, const char *what) {
  lt_lora_t *l = m->lora;
  if (c->rank == 0 && l)
    return lt_error_set(LT_ECONFIG, "%s: rank 0, but the model it starts from carries an adapter", what);
  if (c->rank == 0) return 0;
  if (l && (l->cfg.rank != c->rank || l->cfg.alpha != c->alpha || l->cfg.targets != c->targets))
    return lt_error_set(LT_ECONFIG,
                        "%s: rank %d, alpha %g, but the adapter the model carries has rank %d, alpha %g "
                        "(or other target modules)",
                        what, c->rank, (double)c->alpha, l->cfg.rank, (double)l->cfg.alpha);
  if (l) return 0;
  int rc = lt_lora_create(m, c, &l);
  if (rc < 0) return rc;
  lt_lora_init(l);
  lt_model_attach_lora(m, l);
  return 0;
}

int lt_trainer_create(const lt_trainer_cfg_t *cfg, lt_model_t *policy, lt_model_t *critic, lt_model_t *ref,
                      lt_trainer_t **out) {
  *out = NULL;
  lt_trainer_t *t = calloc(1, sizeof *t);
  if (!t) return lt_error_set(LT_ENOMEM, "trainer: out of memory");
  t->cfg = *cfg;
  t->lr_scale = 1.0;
  t->base_lr = cfg->actor_opt.lr;
  int rc = 0;
  if (needs_critic(cfg) && !critic) rc = lt_model_make_critic(policy, &critic);
  if (rc == 0) rc = adapt(policy, &cfg->lora, "learner.lora");
  if (rc == 0 && critic) rc = adapt(critic, &cfg->critic_lora, "learner.critic.lora");
  if (rc == 0 && cfg->ref_base && !policy->lora)
    rc = lt_error_set(LT_EINVAL, "trainer: the KL reference is the policy's base, but the policy has no adapter");
  lt_model_t *host[LT__NMODELS] = {policy, critic, ref};
  for (int i = 0; i < LT__NMODELS; i++) {
    t->model[i] = (lt__dmodel_t){.id = (lt__model_id)i, .host = host[i]};
    if (host[i]) host[i]->threads = cfg->threads;
  }
  if (rc == 0) rc = lt_optim_create(&t->cfg.actor_opt, policy, &t->model[LT__POLICY].opt);
  if (rc == 0 && critic) rc = lt_optim_create(&t->cfg.critic_opt, critic, &t->model[LT__CRITIC].opt);
  const lt__device_impl_t *dev = NULL;
  if (rc == 0) rc = lt__device_pick(cfg, &dev);
  if (rc == 0 && (rc = dev->open(&t->dev, cfg)) == 0) t->dev.impl = dev; /* else nothing of it to close */
  if (rc < 0) {
    lt_trainer_free(t);
    return rc;
  }
  if (lt_dist_size() > 1)
    lt_log(LT_LOG_INFO, "learner", "rank %d of %d: %.1f MiB of optimizer state (ZeRO-1 shard)", lt_dist_rank(),
           lt_dist_size(), lt_trainer_optim_bytes(t) / 1048576.0);
  *out = t;
  return 0;
}

void lt_trainer_free(lt_trainer_t *t) {
  if (!t) return;
  for (int i = 0; i < LT__NMODELS; i++) {
    lt__dmodel_t *m = &t->model[i];
    if (t->dev.impl) t->dev.impl->drop(&t->dev, m);
    lt_optim_free(m->opt);
    lt_model_free(m->host);
  }
  if (t->dev.impl) t->dev.impl->close(&t->dev);
  free(t);
}

/* The host copy of model id, brought up to date with the device's. */
static lt_model_t *host_current(lt_trainer_t *t, lt__model_id id) {
  lt__dmodel_t *m = &t->model[id];
  if (m->host_stale) t->dev.impl->pull(&t->dev, m, 0);
  return m->host;
}

lt_model_t *lt_trainer_policy(lt_trainer_t *t) { return host_current(t, LT__POLICY); }
const lt_model_config_t *lt_trainer_model_config(const lt_trainer_t *t) { return &t->model[LT__POLICY].host->cfg; }
int64_t lt_trainer_steps(const lt_trainer_t *t) { return t->steps; }

size_t lt_trainer_optim_bytes(const lt_trainer_t *t) {
  const lt_optim_t *c = t->model[LT__CRITIC].opt;
  return lt_optim_state_bytes(t->model[LT__POLICY].opt) + (c ? lt_optim_state_bytes(c) : 0);
}

void lt_trainer_scale_lr(lt_trainer_t *t, double factor) {
  t->lr_scale *= factor;
  t->model[LT__POLICY].opt->cfg.lr = (float)(t->base_lr * t->lr_scale);
}

/* The model that computes model id: the policy computes the reference when that is its base. */
static lt__model_id computed_by(const lt_trainer_t *t, lt__model_id id) {
  return id == LT__REF && t->cfg.ref_base ? LT__POLICY : id;
}

/* Grows model id's workspace to hold n tokens in sequences of at most s. */
static int ensure(lt_trainer_t *t, lt__model_id id, int n, int s) {
  id = computed_by(t, id);
  lt__dmodel_t *m = &t->model[id];
  if (n <= m->cap_tokens && s <= m->cap_seq) return 0;
  int nn = n > m->cap_tokens ? n : m->cap_tokens, ss = s > m->cap_seq ? s : m->cap_seq;
  int rc = t->dev.impl->reserve(&t->dev, m, nn, ss);
  m->cap_tokens = rc < 0 ? 0 : nn;
  m->cap_seq = rc < 0 ? 0 : ss;
  return rc < 0 ? lt_error_wrap(rc, "learner (%s): the %s's workspace for %d tokens", t->dev.impl->name,
                                lt__model_name(id), nn)
                : 0;
}

/* The reference as the policy's base: the policy's forward with its adapter left out. */
static int forward(lt_trainer_t *t, lt__model_id id, const lt_batch_t *b, lt_fwd_out_t *o) {
  lt__dmodel_t *m = &t->model[computed_by(t, id)];
  lt_lora_t *base_only = id == LT__REF && t->cfg.ref_base ? m->host->lora : NULL;
  if (base_only) base_only->off = 1;
  int rc = t->dev.impl->forward(&t->dev, m, b, o);
  if (base_only) base_only->off = 0;
  return rc;
}

static int backward(lt_trainer_t *t, lt__model_id id, const float *dl, const float *dv) {
  return t->dev.impl->backward(&t->dev, &t->model[id], dl, dv);
}

static void zero_grad(lt_trainer_t *t, lt__model_id id) { t->dev.impl->zero_grad(&t->dev, &t->model[id]); }

/* One optimizer update of model id after the ranks' gradients are summed;
 * *lr receives the learning rate used. */
static int optim_step(lt_trainer_t *t, lt__model_id id, double *gnorm, double *lr) {
  lt__dmodel_t *m = &t->model[id];
  m->opt->cfg.use_clock = 1; /* warm-up counts learner steps, not mini-batch updates */
  m->opt->cfg.clock = t->steps;
  int rc = 0;
  /* A rank whose shares were all empty has no gradient buffer yet (zeros). */
  if (lt_dist_size() > 1 && ((rc = ensure(t, id, 1, 1)) < 0 || (rc = t->dev.impl->reduce_grads(&t->dev, m)) < 0))
    return rc;
  return t->dev.impl->update(&t->dev, m, gnorm, lr);
}

/* This rank's token-balanced share of the sequences [s0, s1) (whole trajectories). */
static void my_share(const lt_train_batch_t *B, int s0, int s1, int *a, int *b) {
  lt_dist_share(B->start, B->traj, s0, s1, lt_dist_rank(), lt_dist_size(), a, b);
}

/* Rescales dLoss[n], normalised by this rank's count `local`, to the count
 * of all ranks (*global), so that summed gradients are the whole batch's. */
static int globalise(double local, float *d, int n, double *global) {
  double w;
  int rc = lt_dist_weight(local, global, &w);
  if (rc == 0 && w != 1.0)
    for (int i = 0; i < n; i++) d[i] *= (float)w;
  return rc;
}

/* A contiguous run of sequences [s0, s1) of the batch as a model batch
 * (offsets rebased into starts[]). */
typedef struct {
  int s0, s1, t0, n, maxlen;
  int *start;
  lt_batch_t b;
} chunk_t;

static void chunk_make(const lt_train_batch_t *B, int nml, int K, int s0, int s1, int *starts, chunk_t *c) {
  c->s0 = s0;
  c->s1 = s1;
  c->t0 = B->start[s0];
  c->n = B->start[s1] - c->t0;
  c->start = starts;
  c->maxlen = 0;
  for (int s = s0; s <= s1; s++) starts[s - s0] = B->start[s] - c->t0;
  for (int s = s0; s < s1; s++)
    if (B->start[s + 1] - B->start[s] > c->maxlen) c->maxlen = B->start[s + 1] - B->start[s];
  size_t ids = 0; /* support ids of the tokens before the chunk */
  for (int i = 0; B->support && i < c->t0; i++) ids += (size_t)B->support[i];
  c->b = (lt_batch_t){.nseq = s1 - s0,
                      .start = starts,
                      .tokens = B->tokens + c->t0,
                      .route_ids = B->route_ids ? B->route_ids + (size_t)c->t0 * nml * K : NULL,
                      .support = B->support ? B->support + c->t0 : NULL,
                      .support_ids = B->support && B->support_ids ? B->support_ids + ids : NULL,
                      .temperature = B->temperature ? B->temperature + c->t0 : NULL};
}

/* Splits ntraj trajectories into k near-equal contiguous chunks: chunk j is
 * the trajectories [bounds[j], bounds[j+1]). */
static int split(int ntraj, int k, int *bounds) {
  if (k > ntraj) k = ntraj;
  if (k < 1) k = 1;
  for (int j = 0; j <= k; j++) bounds[j] = (int)((int64_t)ntraj * j / k);
  return k;
}

/* The longest of the sequences [a, e). */
static int max_seq_len(const lt_train_batch_t *B, int a, int e) {
  int mx = 0;
  for (int s = a; s < e; s++)
    if (B->start[s + 1] - B->start[s] > mx) mx = B->start[s + 1] - B->start[s];
  return mx;
}

typedef struct {
  int N, *bounds, *starts;
  int ntraj, *tseq; /* [ntraj + 1] each trajectory's first sequence: chunks split between
                                trajectories, never inside one */
  float *logp_old, *logp_ref, *values, *adv, *target, *dbuf, *entropy;
  double *rhat, *gadv;
  uint8_t *amask; /* [N] the actor's loss mask: B->mask without the actor_skip sequences */
} work_t;

static void work_free(work_t *w) {
  free(w->tseq);
  free(w->bounds);
  free(w->starts);
  free(w->logp_old);
  free(w->logp_ref);
  free(w->values);
  free(w->adv);
  free(w->target);
  free(w->dbuf);
  free(w->entropy);
  free(w->rhat);
  free(w->gadv);
  free(w->amask);
}

static int work_alloc(work_t *w, const lt_train_batch_t *B, int chunks) {
  memset(w, 0, sizeof *w);
  size_t N = (size_t)B->start[B->nseq];
  w->N = (int)N;
  w->bounds = malloc(sizeof(int) * (size_t)(chunks + 1));
  w->starts = malloc(sizeof(int) * (size_t)(B->nseq + 1));
  w->logp_old = malloc(sizeof(float) * N);
  w->logp_ref = malloc(sizeof(float) * N);
  w->values = calloc(N, sizeof(float));
  w->adv = calloc(N, sizeof(float));
  w->target = calloc(N, sizeof(float));
  w->dbuf = calloc(N, sizeof(float));
  w->entropy = malloc(sizeof(float) * N);
  w->rhat = calloc((size_t)B->nseq, sizeof(double));
  w->gadv = calloc((size_t)B->nseq, sizeof(double));
  w->amask = malloc(N ? N : 1);
  w->tseq = malloc(sizeof(int) * (size_t)(B->nseq + 1));
  if (!w->tseq || !w->amask || !w->bounds || !w->starts || !w->logp_old || !w->logp_ref || !w->values || !w->adv ||
      !w->target || !w->dbuf || !w->entropy || !w->rhat || !w->gadv) {
    work_free(w);
    return lt_error_set(LT_ENOMEM, "learner step: out of memory for %zu tokens", N);
  }
  for (int s = 0; s < B->nseq; s = lt_traj_end(B->traj, B->nseq, s)) w->tseq[w->ntraj++] = s;
  w->tseq[w->ntraj] = B->nseq;
  return 0;
}

/* The sequences [*a, *b) of this rank's token-balanced share of chunk j (whole trajectories). */
static void chunk_share(const lt_train_batch_t *B, const work_t *w, int j, int *a, int *b) {
  my_share(B, w->tseq[w->bounds[j]], w->tseq[w->bounds[j + 1]], a, b);
}

int lt_token_values_alloc(lt_token_values_t *v, int ntokens, int nseq) {
  size_t n = ntokens > 0 ? (size_t)ntokens : 1, s = nseq > 0 ? (size_t)nseq : 1;
  *v = (lt_token_values_t){.ntokens = ntokens,
                           .nseq = nseq,
                           .ratio = malloc(sizeof(float) * n),
                           .logp_old = malloc(sizeof(float) * n),
                           .adv = malloc(sizeof(float) * n),
                           .entropy = malloc(sizeof(float) * n),
                           .flags = malloc(n),
                           .traj_ratio = malloc(sizeof(float) * s)};
  if (v->ratio && v->logp_old && v->adv && v->entropy && v->flags && v->traj_ratio) return 0;
  lt_token_values_free(v);
  return lt_error_set(LT_ENOMEM, "token values: out of memory for %d tokens", ntokens);
}

void lt_token_values_free(lt_token_values_t *v) {
  free(v->ratio);
  free(v->logp_old);
  free(v->adv);
  free(v->entropy);
  free(v->flags);
  free(v->traj_ratio);
  memset(v, 0, sizeof *v);
}

static int check_batch(const lt_train_batch_t *B) {
  if (B->nseq < 1) return lt_error_set(LT_EINVAL, "learner step: empty batch");
  if (B->values && (B->values->ntokens < B->start[B->nseq] || B->values->nseq < B->nseq))
    return lt_error_set(LT_EINVAL,
                        "learner step: token values sized for %d tokens in %d sequences, the batch has %d in %d",
                        B->values->ntokens, B->values->nseq, B->start[B->nseq], B->nseq);
  for (int s = 0; s < B->nseq; s++)
    if (B->start[s + 1] - B->start[s] < 2)
      return lt_error_set(LT_EINVAL, "learner step: sequence %d has fewer than 2 tokens", s);
  return 0;
}

/* Every rank gets the per-token arrays of the whole batch: each computed its
 * share and left zeros elsewhere, so a sum is an all-gather. */
static int pre_pass_gather(lt_trainer_t *t, work_t *w, double *conf) {
  size_t N = (size_t)w->N;
  int rc = lt_dist_sum_f32(w->logp_old, N);
  if (rc == 0) rc = lt_dist_sum_f32(w->entropy, N);
  if (rc == 0 && has_ref(t)) rc = lt_dist_sum_f32(w->logp_ref, N);
  if (rc == 0 && has_critic(t)) rc = lt_dist_sum_f32(w->values, N);
  if (rc == 0) rc = lt_dist_sum_f64(conf, 2); /* the confidence sum and its token count */
  return rc;
}

/* Forward passes with the pre-update weights over the actor chunks (this
 * rank's share of each): π_old, π_ref, entropies, critic values, learner
 * routing confidence. */
static int pre_pass(lt_trainer_t *t, const lt_train_batch_t *B, work_t *w, int k, double *route_conf) {
  int nml = lt_model_moe_layers(lt_trainer_model_config(t)), K = lt_trainer_model_config(t)->topk;
  double conf[2] = {0, 0}; /* routing confidence summed over generated tokens, and their count */
  int rc = 0;
  if (lt_dist_size() > 1) {
    memset(w->logp_old, 0, sizeof(float) * (size_t)w->N);
    memset(w->logp_ref, 0, sizeof(float) * (size_t)w->N);
    memset(w->entropy, 0, sizeof(float) * (size_t)w->N);
  }
  for (int j = 0; j < k && rc == 0; j++) {
    chunk_t c;
    int a, b;
    chunk_share(B, w, j, &a, &b);
    if (a == b) continue;
    chunk_make(B, nml, K, a, b, w->starts, &c);
    lt_fwd_out_t o;
    if ((rc = ensure(t, LT__POLICY, c.n, c.maxlen)) < 0 || (rc = forward(t, LT__POLICY, &c.b, &o)) < 0) break;
    memcpy(w->logp_old + c.t0, o.logprobs, sizeof(float) * (size_t)c.n);
    memcpy(w->entropy + c.t0, o.entropy, sizeof(float) * (size_t)c.n);
    /* Over the generated tokens, as the rollout's records are averaged (docs/losses.md). */
    for (int i = 0; o.route_conf && i < c.n; i++)
      if (B->mask[c.t0 + i]) conf[0] += o.route_conf[i] / nml, conf[1]++;
    if (has_ref(t)) {
      if ((rc = ensure(t, LT__REF, c.n, c.maxlen)) < 0 || (rc = forward(t, LT__REF, &c.b, &o)) < 0) break;
      memcpy(w->logp_ref + c.t0, o.logprobs, sizeof(float) * (size_t)c.n);
    }
    if (has_critic(t)) {
      lt_batch_t cb = c.b;
      cb.support = NULL;
      if ((rc = ensure(t, LT__CRITIC, c.n, c.maxlen)) < 0 || (rc = forward(t, LT__CRITIC, &cb, &o)) < 0) break;
      memcpy(w->values + c.t0, o.values, sizeof(float) * (size_t)c.n);
    }
  }
  if (rc == 0) rc = pre_pass_gather(t, w, conf);
  *route_conf = nml ? (conf[1] ? conf[0] / conf[1] : 0) : -1.0;
  return rc;
}

/* Loss statistics summed over mini-batches. */
typedef struct {
  double loss, mism, klr, clip, klref;
  int toks, kept, inb, trajs, tkept;
} acc_t;

static void acc_add(acc_t *a, const lt_loss_stats_t *ls) {
  a->loss += ls->loss * ls->tokens;
  a->toks += ls->tokens;
  a->kept += ls->tokens_kept;
  a->inb += ls->tokens_in_bounds;
  a->trajs += ls->trajs;
  a->tkept += ls->trajs_kept;
  a->mism += ls->mismatch * ls->tokens;
  a->klr += ls->kl_rollout * ls->tokens;
  a->clip += ls->clip_frac * ls->tokens;
  a->klref += ls->kl_ref * ls->tokens;
}

/* The ranks' statistics summed (each saw its share of every mini-batch). */
static int acc_reduce(acc_t *a) {
  double v[10] = {a->loss, a->mism, a->klr, a->clip, a->klref, a->toks, a->kept, a->inb, a->trajs, a->tkept};
  int rc = lt_dist_sum_f64(v, 10);
  *a = (acc_t){v[0], v[1], v[2], v[3], v[4], (int)v[5], (int)v[6], (int)v[7], (int)v[8], (int)v[9]};
  return rc;
}

static void acc_finish(const acc_t *a, lt_step_stats_t *st) {
  double dt = a->toks ? a->toks : 1;
  st->actor_loss = a->loss / dt;
  st->token_accept = a->toks ? (double)a->inb / a->toks : 0;
  st->traj_accept = a->trajs ? (double)a->tkept / a->trajs : 0;
  st->kept_fraction = a->toks ? (double)a->kept / a->toks : 0;
  st->mismatch = a->mism / dt;
  st->kl_rollout = a->klr / dt;
  st->clip_frac = a->clip / dt;
  st->kl_ref = a->klref / dt;
}

/* The actor's loss mask; returns the sequences actor_skip leaves out. */
static int actor_mask(const lt_train_batch_t *B, uint8_t *amask) {
  int skipped = 0;
  for (int s = 0; s < B->nseq; s++) {
    int skip = B->actor_skip && B->actor_skip[s];
    skipped += skip;
    for (int i = B->start[s]; i < B->start[s + 1]; i++) amask[i] = skip ? 0 : B->mask[i];
  }
  return skipped;
}

/* The loss's marks of the sequences [s0, s0 + n) starting at token t0 (NULL when the batch collects none). */
static const lt_loss_marks_t *marks_at(const lt_train_batch_t *B, int t0, int s0, lt_loss_marks_t *m) {
  if (!B->values) return NULL;
  *m = (lt_loss_marks_t){.flags = B->values->flags + t0, .traj_ratio = B->values->traj_ratio + s0};
  return m;
}

/* The ranks' marks summed into every rank's copy (scratch: N floats). */
static int marks_gather(const lt_train_batch_t *B, float *scratch) {
  lt_token_values_t *v = B->values;
  int N = B->start[B->nseq], rc;
  if (!v || lt_dist_size() < 2) return 0;
  for (int i = 0; i < N; i++) scratch[i] = v->flags[i];
  if ((rc = lt_dist_sum_f32(scratch, (size_t)N)) < 0) return rc;
  for (int i = 0; i < N; i++) v->flags[i] = (uint8_t)scratch[i];
  return lt_dist_sum_f32(v->traj_ratio, (size_t)B->nseq);
}

/* The actor loss's inputs for chunk c, at log πθ = logp. */
static lt_loss_in_t loss_in(const lt_trainer_t *t, const lt_train_batch_t *B, const work_t *w, const chunk_t *c,
                            const float *logp) {
  return (lt_loss_in_t){.nseq = c->b.nseq,
                        .start = c->start,
                        .logp = logp,
                        .logp_old = w->logp_old + c->t0,
                        .logp_rollout = B->logp_rollout + c->t0,
                        .logp_ref = has_ref(t) ? w->logp_ref + c->t0 : NULL,
                        .adv = w->adv + c->t0,
                        .mask = w->amask + c->t0,
                        .kl_coef = B->kl_coef ? B->kl_coef + c->s0 : NULL,
                        .traj = B->traj ? B->traj + c->s0 : NULL};
}

static int actor_epoch(lt_trainer_t *t, const lt_train_batch_t *B, work_t *w, int k, lt_step_stats_t *st) {
  int nml = lt_model_moe_layers(lt_trainer_model_config(t)), K = lt_trainer_model_config(t)->topk;
  double gn = 0;
  acc_t acc = {0};
  int rc = 0;
  for (int j = 0; j < k; j++) {
    chunk_t c;
    int a, b;
    chunk_share(B, w, j, &a, &b);
    lt_loss_stats_t ls = {0};
    zero_grad(t, LT__POLICY);
    if (a < b) {
      chunk_make(B, nml, K, a, b, w->starts, &c);
      lt_fwd_out_t o;
      if ((rc = forward(t, LT__POLICY, &c.b, &o)) < 0) return rc;
      lt_loss_in_t in = loss_in(t, B, w, &c, o.logprobs);
      lt_loss_marks_t mk;
      if ((rc = lt_loss_compute_marked(&t->cfg.loss, &in, w->dbuf + c.t0, &ls, marks_at(B, c.t0, c.s0, &mk))) < 0)
        return rc;
    }
    /* The group forms average over trajectories, the other objectives over loss tokens. */
    double global;
    if ((rc = globalise(t->cfg.loss.group_adv ? ls.trajs : ls.tokens, w->dbuf + c.t0, a < b ? c.n : 0, &global)) < 0)
      return rc;
    /* No kept token in the whole mini-batch (all ranks): no update at all.  A zero gradient would still move
     * the weights through AdamW's moments and weight decay, and advance its step count. */
    double kept = ls.tokens_kept;
    if ((rc = lt_dist_sum_f64(&kept, 1)) < 0) return rc;
    if (global > 0 && kept > 0) {
      if (a < b && (rc = backward(t, LT__POLICY, w->dbuf + c.t0, NULL)) < 0) return rc;
      double g;
      if ((rc = optim_step(t, LT__POLICY, &g, &st->lr)) < 0) return rc;
      gn += g;
    } else {
      st->actor_skipped_updates++;
    }
    acc_add(&acc, &ls);
  }
  if ((rc = acc_reduce(&acc)) < 0 || (rc = marks_gather(B, w->dbuf)) < 0) return rc;
  acc_finish(&acc, st);
  st->actor_grad_norm = gn / k;
  return 0;
}

static int critic_epoch(lt_trainer_t *t, const lt_train_batch_t *B, work_t *w, lt_step_stats_t *st) {
  int k = split(w->ntraj, t->cfg.critic_minibatches, w->bounds);
  const lt_model_config_t *cc = &t->model[LT__CRITIC].host->cfg;
  int nml = lt_model_moe_layers(cc), K = cc->topk;
  double loss = 0, gn = 0, toks = 0;
  int rc = 0;
  for (int j = 0; j < k; j++) {
    chunk_t c;
    int a, b, n = 0;
    chunk_share(B, w, j, &a, &b);
    zero_grad(t, LT__CRITIC);
    float *dv = NULL;
    if (a < b) {
      /* Under Keep Routing the values V_φ(s_t) of the pre-pass were computed on the
       * rollout's experts: the critic trains on the same routing. */
      chunk_make(B, nml, K, a, b, w->starts, &c);
      c.b.support = NULL;
      lt_fwd_out_t o;
      if ((rc = ensure(t, LT__CRITIC, c.n, c.maxlen)) < 0) return rc;
      if ((rc = forward(t, LT__CRITIC, &c.b, &o)) < 0) return rc;
      dv = w->dbuf + c.t0;
      double l = lt_value_loss(c.b.nseq, c.start, B->mask + c.t0, o.values, w->target + c.t0, dv);
      for (int i = 0; i < c.n; i++) n += B->mask[c.t0 + i] != 0;
      loss += l * n;
    }
    double global;
    if ((rc = globalise(n, dv, dv ? c.n : 0, &global)) < 0) return rc;
    if (global == 0) continue;
    if (dv && (rc = backward(t, LT__CRITIC, NULL, dv)) < 0) return rc;
    double g;
    if ((rc = optim_step(t, LT__CRITIC, &g, &st->critic_lr)) < 0) return rc;
    gn += g;
    toks += global;
  }
  if ((rc = lt_dist_sum_f64(&loss, 1)) < 0) return rc;
  st->critic_loss = toks ? loss / toks : 0;
  st->critic_grad_norm = gn / k;
  return 0;
}

/* Everything a step computes with the pre-update weights: π_old, π_ref,
 * values, entropy, advantages and their statistics.  *k: actor chunks. */
static int prepare(lt_trainer_t *t, const lt_train_batch_t *B, work_t *w, int *k_, lt_step_stats_t *st) {
  memset(st, 0, sizeof *st);
  memset(w, 0, sizeof *w); /* work_free is safe whatever fails */
  int rc = check_batch(B);
  if (rc < 0) return rc;
  int chunks =
      t->cfg.actor_minibatches > t->cfg.critic_minibatches ? t->cfg.actor_minibatches : t->cfg.critic_minibatches;
  if ((rc = work_alloc(w, B, chunks < 1 ? 1 : chunks)) < 0) return rc;
  int k = *k_ = split(w->ntraj, t->cfg.actor_minibatches, w->bounds);
  if ((rc = pre_pass(t, B, w, k, &st->routing_confidence)) < 0) return rc;
  int N = w->N, ntok = 0;
  double ent = 0, vsum = 0;
  for (int i = 0; i < N; i++)
    if (B->mask[i]) {
      ntok++;
      ent += w->entropy[i];
      if (has_critic(t) && i > 0) vsum += w->values[i - 1];
    }
  st->entropy = ntok ? ent / ntok : 0;
  st->value_mean = ntok ? vsum / ntok : 0;
  st->tokens = N;
  st->trajectories = w->ntraj;
  st->actor_skipped = actor_mask(B, w->amask);
  /* Advantages: critic with truncation-aware bootstrapping, or group baselines. */
  if (has_critic(t)) {
    lt_adv_critic(B->nseq, B->start, B->mask, w->values, B->reward, B->truncated, B->traj, w->adv, w->target, w->rhat);
  } else {
    lt_adv_group(B->reward, B->group, B->traj, B->nseq, t->cfg.group_std, w->gadv);
    for (int s = 0; s < B->nseq; s++) {
      w->rhat[s] = B->reward[s];
      for (int i = B->start[s]; i < B->start[s + 1]; i++) w->adv[i] = B->mask[i] ? (float)w->gadv[s] : 0;
    }
  }
  double rs = 0, am = 0, a2 = 0;
  for (int i = 0; i < w->ntraj; i++) rs += w->rhat[w->tseq[i]];
  st->return_mean = rs / w->ntraj;
  st->adv_min = INFINITY;
  st->adv_max = -INFINITY;
  for (int i = 0; i < N; i++)
    if (B->mask[i]) {
      am += w->adv[i];
      a2 += (double)w->adv[i] * w->adv[i];
      st->adv_min = fmin(st->adv_min, w->adv[i]);
      st->adv_max = fmax(st->adv_max, w->adv[i]);
    }
  if (!ntok) st->adv_min = st->adv_max = 0;
  st->adv_mean = ntok ? am / ntok : 0;
  st->adv_std = ntok ? sqrt(fmax(a2 / ntok - st->adv_mean * st->adv_mean, 0)) : 0;
  lt_token_values_t *v = B->values;
  if (v) { /* the per-token inputs of the loss, as it reads them (the flags come from the loss itself) */
    memcpy(v->logp_old, w->logp_old, sizeof(float) * (size_t)N);
    memcpy(v->adv, w->adv, sizeof(float) * (size_t)N);
    memcpy(v->entropy, w->entropy, sizeof(float) * (size_t)N);
    for (int i = 0; i < N; i++)
      v->ratio[i] = B->mask[i] ? (float)exp((double)w->logp_old[i] - B->logp_rollout[i]) : 0.0f;
    /* Each rank writes the marks of its share: zeros elsewhere make the ranks' sum a gather. */
    memset(v->flags, 0, (size_t)N);
    memset(v->traj_ratio, 0, sizeof(float) * (size_t)B->nseq);
  }
  return 0;
}

int lt_trainer_step(lt_trainer_t *t, const lt_train_batch_t *B, lt_step_stats_t *st) {
  int rc = lt_ops_blas_pin(t->cfg.threads, &t->cfg.cpus);
  if (rc < 0) return rc;
  work_t w;
  int k;
  rc = prepare(t, B, &w, &k, st);
  if (rc == 0) rc = actor_epoch(t, B, &w, k, st);
  if (rc == 0 && has_critic(t)) rc = critic_epoch(t, B, &w, st);
  if (rc == 0) t->steps++;
  work_free(&w);
  return rc;
}

int lt_trainer_replay(lt_trainer_t *t, const lt_train_batch_t *B, const lt_loss_cfg_t *loss, lt_step_stats_t *st) {
  int rc = lt_ops_blas_pin(t->cfg.threads, &t->cfg.cpus);
  if (rc < 0) return rc;
  work_t w;
  int k;
  rc = prepare(t, B, &w, &k, st);
  int nml = lt_model_moe_layers(lt_trainer_model_config(t)), K = lt_trainer_model_config(t)->topk;
  acc_t acc = {0};
  for (int j = 0; j < k && rc == 0; j++) {
    chunk_t c;
    chunk_make(B, nml, K, w.tseq[w.bounds[j]], w.tseq[w.bounds[j + 1]], w.starts, &c);
    /* At the pre-update weights log πθ = log π_old: the loss the step starts from. */
    lt_loss_in_t in = loss_in(t, B, &w, &c, w.logp_old + c.t0);
    lt_loss_stats_t ls;
    lt_loss_marks_t mk;
    if ((rc = lt_loss_compute_marked(loss ? loss : &t->cfg.loss, &in, w.dbuf + c.t0, &ls,
                                     marks_at(B, c.t0, c.s0, &mk))) == 0)
      acc_add(&acc, &ls);
  }
  if (rc == 0) acc_finish(&acc, st);
  work_free(&w);
  return rc;
}

int lt_trainer_sft_step(lt_trainer_t *t, const lt_train_batch_t *B, double *loss) {
  int rc = lt_ops_blas_pin(t->cfg.threads, &t->cfg.cpus);
  if (rc >= 0) rc = check_batch(B);
  if (rc < 0) return rc;
  int N = B->start[B->nseq], n = 0, a, e;
  float *dl = calloc((size_t)N, sizeof(float));
  if (!dl) return lt_error_set(LT_ENOMEM, "sft step: out of memory");
  /* This rank's share of the sequences, its tokens rebased to 0. */
  my_share(B, 0, B->nseq, &a, &e);
  int t0 = B->start[a], Nr = B->start[e] - t0, *starts = malloc(sizeof(int) * (size_t)(e - a + 1));
  if (!starts) {
    free(dl);
    return lt_error_set(LT_ENOMEM, "sft step: out of memory");
  }
  for (int s = a; s <= e; s++) starts[s - a] = B->start[s] - t0;
  lt_batch_t b = {.nseq = e - a, .start = starts, .tokens = B->tokens + t0};
  lt_fwd_out_t o;
  double l = 0, global = 0;
  zero_grad(t, LT__POLICY);
  if (a < e) {
    if ((rc = ensure(t, LT__POLICY, Nr, max_seq_len(B, a, e))) < 0 || (rc = forward(t, LT__POLICY, &b, &o)) < 0)
      goto out;
    for (int i = 0; i < Nr; i++) n += B->mask[t0 + i] != 0;
    for (int i = 0; i < Nr; i++)
      if (B->mask[t0 + i]) {
        l -= o.logprobs[i];
        dl[i] = -1.0f / (float)n;
      }
  }
  if ((rc = globalise(n, dl, Nr, &global)) < 0 || (rc = lt_dist_sum_f64(&l, 1)) < 0) goto out;
  *loss = global > 0 ? l / global : 0;
  if (global > 0 && (a == e || (rc = backward(t, LT__POLICY, dl, NULL)) == 0)) {
    double g, lr;
    if ((rc = optim_step(t, LT__POLICY, &g, &lr)) < 0) goto out;
    t->steps++;
  }
out:
  free(starts);
  free(dl);
  return rc;
}

/* ---- state ---- */

static int sub(char *out, size_t n, const char *dir, const char *name) { return lt_path_join(out, n, dir, name); }

/* A model of the state: its (frozen) weights, and its adapter beside them. */
static int save_model(const lt_model_t *m, const char *dir) {
  int rc = lt_model_save_sharded(m, dir, LT_MODEL_SHARD_BYTES);
  return rc == 0 && m->lora ? lt_lora_save(m->lora, dir, LT_ST_F32, ".") : rc;
}

static int load_model(lt_model_t *m, const char *dir) {
  int rc = lt_model_load_weights(m, dir);
  return rc == 0 && m->lora ? lt_lora_load_weights(m->lora, dir) : rc;
}

int lt_trainer_save(lt_trainer_t *t, const char *dir) {
  char p[4096];
  lt__dmodel_t *P = &t->model[LT__POLICY], *C = &t->model[LT__CRITIC];
  lt_model_t *ref = t->model[LT__REF].host; /* never updated: its host copy is current */
  t->dev.impl->pull(&t->dev, P, 1);
  if (C->host) t->dev.impl->pull(&t->dev, C, 1);
  /* Rank 0 writes; the other ranks only bring their optimizer shards, and
   * take part in those gathers whatever failed on rank 0 before them. */
  int rank0 = lt_dist_rank() == 0, rc = rank0 ? lt_fs_mkdirs(dir, 0755) : 0, orc;
  if ((orc = sub(p, sizeof p, dir, "actor_optim.safetensors")) == 0) orc = lt_optim_save(P->opt, p);
  if (rc == 0) rc = orc;
  if (C->host && (orc = sub(p, sizeof p, dir, "critic_optim.safetensors")) == 0) orc = lt_optim_save(C->opt, p);
  if (rc == 0) rc = orc;
  if (!rank0 || rc < 0) return rc;
  if ((rc = sub(p, sizeof p, dir, "policy")) == 0) rc = save_model(P->host, p);
  /* The KL reference is not the policy a resume starts from: it travels with the state (a base is in policy/). */
  if (rc == 0 && ref && (rc = sub(p, sizeof p, dir, "ref")) == 0) rc = lt_model_save(ref, p);
  if (rc == 0 && C->host && (rc = sub(p, sizeof p, dir, "critic")) == 0) rc = save_model(C->host, p);
  if (rc < 0) return rc;
  char js[256];
  /* %.17g: the learning-rate scale comes back bit-exact. */
  snprintf(js, sizeof js, "{\"steps\": %lld, \"lr_scale\": %.17g}\n", (long long)t->steps, t->lr_scale);
  if ((rc = sub(p, sizeof p, dir, "trainer.json")) < 0) return rc;
  return lt_fs_write_atomic(p, js, strlen(js));
}

int lt_trainer_load(lt_trainer_t *t, const char *dir) {
  char p[4096];
  int rc = sub(p, sizeof p, dir, "trainer.json");
  if (rc < 0) return rc;
  char *txt = NULL;
  size_t len;
  if ((rc = lt_fs_read_file(p, 1 << 16, &txt, &len)) < 0) return rc;
  cJSON *j;
  rc = lt_json_parse(txt, len, p, &j);
  free(txt);
  if (rc < 0) return rc;
  const cJSON *s = cJSON_GetObjectItemCaseSensitive(j, "steps"), *l = cJSON_GetObjectItemCaseSensitive(j, "lr_scale");
  if (!cJSON_IsNumber(s) || !cJSON_IsNumber(l)) {
    cJSON_Delete(j);
    return lt_error_set(LT_EFORMAT, "%s: expected {\"steps\", \"lr_scale\"}", p);
  }
  t->steps = (int64_t)s->valuedouble;
  t->lr_scale = 1.0;
  lt_trainer_scale_lr(t, l->valuedouble);
  cJSON_Delete(j);
  lt__dmodel_t *P = &t->model[LT__POLICY], *C = &t->model[LT__CRITIC];
  lt_model_t *ref = t->model[LT__REF].host;
  if ((rc = sub(p, sizeof p, dir, "policy")) == 0) rc = load_model(P->host, p);
  if (rc == 0 && ref && (rc = sub(p, sizeof p, dir, "ref")) == 0) {
    if (lt_fs_is_dir(p)) rc = lt_model_load_weights(ref, p);
    else
      lt_log(LT_LOG_WARN, "learner",
             "%s: no ref/ (a checkpoint from before the KL reference was saved): the KL "
             "reference stays the model it was created with",
             dir);
  }
  if (rc == 0 && (rc = sub(p, sizeof p, dir, "actor_optim.safetensors")) == 0) rc = lt_optim_load(P->opt, p);
  if (rc == 0 && C->host) {
    if ((rc = sub(p, sizeof p, dir, "critic")) == 0) rc = load_model(C->host, p);
    if (rc == 0 && (rc = sub(p, sizeof p, dir, "critic_optim.safetensors")) == 0) rc = lt_optim_load(C->opt, p);
  }
  /* The host state is now the authority: the device copies are rebuilt from it at their next use. */
  for (int i = 0; i < LT__NMODELS; i++) {
    lt__dmodel_t *m = &t->model[i];
    t->dev.impl->drop(&t->dev, m);
    m->cap_tokens = m->cap_seq = m->host_stale = 0;
  }
  return rc < 0 ? lt_error_wrap(rc, "resume from %s", dir) : 0;
}
