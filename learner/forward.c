/* The forward pass: activation workspace, one forward over segments (training
 * keeps every intermediate; inference appends to KV caches), and the heads. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "learner/internal.h"
#include "learner/lora.h"
#include "learner/ops.h"
#include "util/error.h"

static int lay(const lt_acts_t *a, int l) { return a->train ? l : 0; }

static int max_inter(const lt_model_config_t *c) {
  int Id = 0;
  for (int l = 0; l < c->layers; l++) {
    int need = c->moe[l] ? c->topk * c->moe_inter : c->inter;
    if (need > Id) Id = need;
  }
  return Id;
}

void lt_acts_free(lt_acts_t *a) {
  if (!a) return;
  float **fl[] = {a->x,   a->h1,  a->r1, a->qp, a->q,  a->rq, a->kp, a->k,     a->rk,  a->v,
                  a->att, a->lse, a->x2, a->h2, a->r2, a->g,  a->u,  a->probs, a->wts, a->y};
  for (size_t i = 0; i < sizeof fl / sizeof fl[0]; i++) {
    if (!fl[i]) continue;
    for (int l = 0; fl[i][l]; l++) free(fl[i][l]);
    free(fl[i]);
  }
  if (a->ids) {
    for (int l = 0; a->ids[l]; l++) free(a->ids[l]);
    free(a->ids);
  }
  int **il[] = {a->perm, a->eoff};
  for (size_t i = 0; i < 2; i++) {
    if (!il[i]) continue;
    for (int l = 0; il[i][l]; l++) free(il[i][l]);
    free(il[i]);
  }
  void *flat[] = {a->hf,         a->rf,  a->logprobs, a->entropy, a->values,       a->head_lse,
                  a->route_conf, a->pos, a->tok,      a->last,    a->attn_scratch, a->head_scratch,
                  a->head_sel,   a->act, a->xe,       a->rlogits, a->dres,         a->dx2,
                  a->dh,         a->dq,  a->datt,     a->dk,      a->dkp,          a->dv,
                  a->dg,         a->du,  a->dact,     a->dy,      a->dxe,          a->dw};
  for (size_t i = 0; i < sizeof flat / sizeof flat[0]; i++) free(flat[i]);
  free(a);
}

/* Allocates `slots` arrays of n elements each, NULL-terminated; n == 0 gives
 * a list of NULLs (a layer type the model does not have). */
static void **slots_alloc(int slots, size_t n, size_t elem, int *fail) {
  void **p = calloc((size_t)slots + 1, sizeof *p);
  if (!p) {
    *fail = 1;
    return NULL;
  }
  for (int i = 0; i < slots && n; i++)
    if (!(p[i] = calloc(n, elem))) *fail = 1;
  return p;
}

static size_t nonzero(size_t n) { return n ? n : 1; }

int lt_acts_create(const lt_model_config_t *c, int max_tokens, int max_seq, int train, lt_acts_t **out) {
  *out = NULL;
  lt_acts_t *a = calloc(1, sizeof *a);
  if (!a) return lt_error_set(LT_ENOMEM, "workspace: out of memory");
  a->max_tokens = max_tokens;
  a->max_seq = max_seq;
  a->train = train;
  size_t N = (size_t)max_tokens, D = (size_t)c->hidden, hd = (size_t)c->head_dim;
  size_t Hq = (size_t)c->heads * hd, Hk = (size_t)c->kv_heads * hd, Id = (size_t)max_inter(c);
  size_t K = (size_t)(c->experts ? c->topk : 0), E = (size_t)c->experts;
  int moe = lt_model_moe_layers(c) > 0;
  int L = train ? c->layers : 1, fail = 0;
#define SL(field, n, T) a->field = (T **)slots_alloc(L, (n), sizeof(T), &fail)
  a->x = (float **)slots_alloc(train ? L + 1 : 1, N * D, sizeof(float), &fail);
  SL(h1, N * D, float);
  SL(r1, N, float);
  SL(qp, N * Hq, float);
  SL(q, N * Hq, float);
  SL(rq, N * (size_t)c->heads, float);
  SL(kp, N * Hk, float);
  SL(k, N * Hk, float);
  SL(rk, N * (size_t)c->kv_heads, float);
  SL(v, N * Hk, float);
  SL(att, N * Hq, float);
  SL(lse, N * (size_t)c->heads, float);
  SL(x2, N * D, float);
  SL(h2, N * D, float);
  SL(r2, N, float);
  SL(g, N * Id, float);
  SL(u, N * Id, float);
  SL(probs, moe ? N * E : 0, float);
  SL(ids, moe ? N * K : 0, uint16_t);
  SL(wts, moe ? N * K : 0, float);
  SL(perm, moe ? N * K : 0, int);
  SL(eoff, moe ? E + 1 : 0, int);
  SL(y, moe ? N * K * D : 0, float);
#undef SL
#define AL(field, n) \
  if (!(a->field = calloc(nonzero(n), sizeof *a->field))) fail = 1
  AL(hf, N * D);
  AL(rf, N);
  AL(logprobs, N);
  AL(entropy, N);
  AL(values, N);
  AL(head_lse, N);
  AL(route_conf, N);
  AL(pos, N);
  AL(tok, N);
  AL(last, N);
  AL(attn_scratch, LT_ATT_SCRATCH(max_seq));
  AL(head_scratch, (size_t)LT_HEAD_CHUNK * (size_t)c->vocab);
  AL(head_sel, (size_t)c->vocab);
  AL(act, N * Id);
  AL(xe, moe ? N * K * D : 0);
  AL(rlogits, moe ? N * E : 0);
  if (train) {
    AL(dres, N * D);
    AL(dx2, N * D);
    AL(dh, N * D);
    AL(dq, N * Hq);
    AL(datt, N * Hq);
    AL(dk, N * Hk);
    AL(dkp, N * Hk);
    AL(dv, N * Hk);
    AL(dg, N * Id);
    AL(du, N * Id);
    AL(dact, N * Id);
    AL(dy, moe ? N * K * D : 0);
    AL(dxe, moe ? N * K * D : 0);
    AL(dw, moe ? N * K : 0);
  }
#undef AL
  if (fail) {
    lt_acts_free(a);
    return lt_error_set(LT_ENOMEM, "workspace for %d tokens: out of memory", max_tokens);
  }
  *out = a;
  return 0;
}

/* The MoE block for the N rows of h2: routing, per-expert SwiGLU, combine into xout. */
static void moe_forward(lt_model_t *m, lt_acts_t *a, int l, int ml, const lt_segment_t *segs, int nseg, float *xout) {
  const lt_model_config_t *c = &m->cfg;
  const lt_layer_w_t *W = &m->w.layer[l];
  int N = a->N, D = c->hidden, E = c->experts, K = c->topk, Im = c->moe_inter, nml = lt_model_moe_layers(c);
  int s = lay(a, l);
  float *probs = a->probs[s], *wts = a->wts[s], *y = a->y[s], *G = a->g[s], *U = a->u[s];
  uint16_t *ids = a->ids[s];
  int *perm = a->perm[s], *eoff = a->eoff[s];
  const float *h2 = a->h2[s];
  lt_linear_forward(a->rlogits, h2, W->router, N, D, E);
  int row = 0;
  for (int si = 0; si < nseg; si++) {
    const lt_segment_t *sg = &segs[si];
    for (int i = 0; i < sg->n; i++, row++) {
      size_t rk = ((size_t)i * nml + ml) * (size_t)K;
      float mass = lt_router_forward(probs + (size_t)row * E, ids + (size_t)row * K, wts + (size_t)row * K,
                                     a->rlogits + (size_t)row * E, E, K, c->norm_topk,
                                     sg->route_ids ? sg->route_ids + rk : NULL);
      a->route_conf[row] += mass;
      if (sg->route_out_ids)
        for (int j = 0; j < K; j++) {
          sg->route_out_ids[rk + j] = ids[(size_t)row * K + j];
          sg->route_out_probs[rk + j] = probs[(size_t)row * E + ids[(size_t)row * K + j]];
        }
    }
  }
  /* Group (token, slot) pairs by expert, stable in token order. */
  memset(eoff, 0, sizeof(int) * (size_t)(E + 1));
  for (int r = 0; r < N * K; r++) eoff[ids[r] + 1]++;
  for (int e = 0; e < E; e++) eoff[e + 1] += eoff[e];
  for (int r = 0; r < N * K; r++) perm[eoff[ids[r]]++] = r;
  for (int e = E; e > 0; e--) eoff[e] = eoff[e - 1]; /* the fill advanced each start by its count */
  eoff[0] = 0;
  for (int e = 0; e < E; e++) {
    int r0 = eoff[e], ne = eoff[e + 1] - r0;
    if (!ne) continue;
    for (int r = r0; r < r0 + ne; r++) memcpy(a->xe + (size_t)r * D, h2 + (size_t)(perm[r] / K) * D, sizeof(float) * D);
    float *xe = a->xe + (size_t)r0 * D, *g = G + (size_t)r0 * Im, *u = U + (size_t)r0 * Im;
    lt__proj_forward(m, l, LT_PROJ_GATE, e, g, xe, ne, 0);
    lt__proj_forward(m, l, LT_PROJ_UP, e, u, xe, ne, 0);
    lt_swiglu_forward(a->act + (size_t)r0 * Im, g, u, ne * Im);
    lt__proj_forward(m, l, LT_PROJ_DOWN, e, y + (size_t)r0 * D, a->act + (size_t)r0 * Im, ne, 0);
  }
  for (int r = 0; r < N * K; r++) {
    int t = perm[r] / K;
    float w = wts[perm[r]];
    const float *yr = y + (size_t)r * D;
    float *xo = xout + (size_t)t * D;
    for (int i = 0; i < D; i++) xo[i] += w * yr[i];
  }
}

int lt_model_forward_segments(lt_model_t *m, lt_acts_t *a, const lt_segment_t *segs, int nseg, float *logits) {
  const lt_model_config_t *c = &m->cfg;
  int D = c->hidden, H = c->heads, KV = c->kv_heads, hd = c->head_dim, L = c->layers;
  int Hq = H * hd, Hk = KV * hd;
  int N = 0;
  for (int s = 0; s < nseg; s++) {
    const lt_segment_t *sg = &segs[s];
    if (sg->n < 1) return lt_error_set(LT_EINVAL, "forward: empty segment %d", s);
    if (sg->pos0 + sg->n > c->max_pos)
      return lt_error_set(LT_ERANGE, "forward: position %d exceeds max_position_embeddings %d", sg->pos0 + sg->n,
                          c->max_pos);
    if (sg->pos0 + sg->n > a->max_seq)
      return lt_error_set(LT_ERANGE, "forward: sequence of %d tokens exceeds the workspace (%d)", sg->pos0 + sg->n,
                          a->max_seq);
    if (!a->train && !sg->k && sg->pos0)
      return lt_error_set(LT_EINVAL, "forward: segment %d starts at %d without a cache", s, sg->pos0);
    N += sg->n;
  }
  if (N > a->max_tokens)
    return lt_error_set(LT_ERANGE, "forward: %d tokens exceed the workspace (%d)", N, a->max_tokens);
  int rc = m->lora ? lt_lora_reserve(m->lora, (size_t)N) : 0; /* an expert's group has at most N rows too */
  if (rc < 0) return rc;
  a->N = N;
  int row = 0;
  for (int s = 0; s < nseg; s++)
    for (int i = 0; i < segs[s].n; i++, row++) {
      int32_t t = segs[s].tokens[i];
      if (t < 0 || t >= c->vocab) return lt_error_set(LT_ERANGE, "forward: token id %d outside [0, %d)", t, c->vocab);
      a->tok[row] = t;
      a->pos[row] = segs[s].pos0 + i;
      a->last[row] = i == segs[s].n - 1;
      a->route_conf[row] = 0;
      memcpy(a->x[0] + (size_t)row * D, m->w.embed + (size_t)t * D, sizeof(float) * D);
    }
  int ml = 0;
  for (int l = 0; l < L; l++) {
    int s = lay(a, l);
    const lt_layer_w_t *W = &m->w.layer[l];
    float *xin = a->x[s], *xout = a->x[a->train ? l + 1 : 0];
    float *h1 = a->h1[s], *q = a->q[s], *k = a->k[s], *v = a->v[s], *att = a->att[s], *x2 = a->x2[s], *h2 = a->h2[s];
    lt_rmsnorm_forward(h1, a->r1[s], xin, W->ln1, N, D, c->eps);
    lt__proj_forward(m, l, LT_PROJ_Q, 0, a->qp[s], h1, N, 0);
    lt__proj_forward(m, l, LT_PROJ_K, 0, a->kp[s], h1, N, 0);
    lt__proj_forward(m, l, LT_PROJ_V, 0, v, h1, N, 0);
    lt_rmsnorm_forward(q, a->rq[s], a->qp[s], W->qnorm, N * H, hd, c->eps);
    lt_rmsnorm_forward(k, a->rk[s], a->kp[s], W->knorm, N * KV, hd, c->eps);
    lt_rope_apply(q, a->pos, N, H, hd, m->rope_cos, m->rope_sin, 0);
    lt_rope_apply(k, a->pos, N, KV, hd, m->rope_cos, m->rope_sin, 0);
    int off = 0;
    for (int si = 0; si < nseg; si++) {
      const lt_segment_t *sg = &segs[si];
      const float *K = k + (size_t)off * Hk, *V = v + (size_t)off * Hk;
      int S = sg->n;
      if (sg->k) {
        memcpy(sg->k[l] + (size_t)sg->pos0 * Hk, K, sizeof(float) * (size_t)sg->n * Hk);
        memcpy(sg->v[l] + (size_t)sg->pos0 * Hk, V, sizeof(float) * (size_t)sg->n * Hk);
        K = sg->k[l];
        V = sg->v[l];
        S = sg->pos0 + sg->n;
      }
      lt_attention_forward(att + (size_t)off * Hq, a->lse[s] + (size_t)off * H, q + (size_t)off * Hq, K, V, sg->n, S, H,
                           KV, hd, c->sliding[l] ? c->window : 0, a->attn_scratch);
      off += sg->n;
    }
    memcpy(x2, xin, sizeof(float) * (size_t)N * D);
    lt__proj_forward(m, l, LT_PROJ_O, 0, x2, att, N, 1);
    lt_rmsnorm_forward(h2, a->r2[s], x2, W->ln2, N, D, c->eps);
    if (xout != x2) memcpy(xout, x2, sizeof(float) * (size_t)N * D);
    if (c->moe[l]) {
      moe_forward(m, a, l, ml++, segs, nseg, xout);
    } else {
      int Id = c->inter;
      lt__proj_forward(m, l, LT_PROJ_GATE, 0, a->g[s], h2, N, 0);
      lt__proj_forward(m, l, LT_PROJ_UP, 0, a->u[s], h2, N, 0);
      lt_swiglu_forward(a->act, a->g[s], a->u[s], N * Id);
      lt__proj_forward(m, l, LT_PROJ_DOWN, 0, xout, a->act, N, 1);
    }
  }
  lt_rmsnorm_forward(a->hf, a->rf, a->x[a->train ? L : 0], m->w.norm, N, D, c->eps);
  if (logits && !c->critic) {
    row = 0;
    for (int s = 0; s < nseg; s++) {
      row += segs[s].n;
      lt_linear_forward(logits + (size_t)s * c->vocab, a->hf + (size_t)(row - 1) * D, m->w.head, 1, D, c->vocab);
    }
  }
  return 0;
}

int lt_model_eval_alloc(lt_model_t *m, int max_tokens, int max_seq) {
  lt_acts_free(m->acts);
  m->acts = NULL;
  return lt_acts_create(&m->cfg, max_tokens, max_seq, 1, &m->acts);
}

int lt_model_train_alloc(lt_model_t *m, int max_tokens, int max_seq) {
  int rc = lt_model_eval_alloc(m, max_tokens, max_seq);
  if (rc < 0) return rc;
  if (m->lora) return lt__lora_train_alloc(m);
  if (!m->grads) {
    m->grads = calloc(m->nparams, sizeof(float));
    if (!m->grads) return lt_error_set(LT_ENOMEM, "gradients: out of memory");
    lt__model_bind_grads(m);
  }
  return 0;
}

void lt_model_zero_grad(lt_model_t *m) {
  lt_params_t p = lt_model_trainable(m);
  if (p.grads) memset(p.grads, 0, sizeof(float) * p.n);
}

float lt__head_temperature(const lt_batch_t *b, int i) {
  float T = b->temperature ? b->temperature[i] : 1.0f;
  return T > 0 && isfinite(T) ? T : 1.0f;
}

void lt__head_mark(float *mark, const int32_t *ids, int n, int32_t target, float v) {
  for (int i = 0; i < n; i++) mark[ids[i]] = v;
  mark[target] = v;
}

/* logprobs and entropy of each next token under softmax(z / T), in chunks of
 * rows so logits never exceed [LT_HEAD_CHUNK, V].  With a Keep-Sampling-Mask
 * set for the next token, its logprob is renormalised over exactly the ids the
 * rollout kept (plus the token itself) — docs/losses.md. */
static void policy_head(lt_model_t *m, lt_acts_t *a, const lt_batch_t *b) {
  const lt_model_config_t *c = &m->cfg;
  int N = a->N, D = c->hidden, V = c->vocab;
  size_t off = 0; /* ids of the tokens before the current row's target */
  for (int r0 = 0; r0 < N; r0 += LT_HEAD_CHUNK) {
    int n = N - r0 < LT_HEAD_CHUNK ? N - r0 : LT_HEAD_CHUNK;
    float *lg = a->head_scratch;
    lt_linear_forward(lg, a->hf + (size_t)r0 * D, m->w.head, n, D, V);
    for (int i = 0; i < n; i++) {
      int r = r0 + i;
      if (b->support) off += (size_t)b->support[r];
      if (a->last[r]) continue;
      const float *z = lg + (size_t)i * V;
      int target = a->tok[r + 1];
      double it = 1.0 / lt__head_temperature(b, r + 1);
      float mx = z[0];
      for (int j = 1; j < V; j++)
        if (z[j] > mx) mx = z[j];
      double sum = 0, ez = 0;
      for (int j = 0; j < V; j++) {
        double u = ((double)z[j] - mx) * it, e = exp(u);
        sum += e;
        ez += e * u;
      }
      double lse = mx * it + log(sum);
      a->entropy[r + 1] = (float)(log(sum) - ez / sum);
      int s = b->support ? b->support[r + 1] : 0;
      if (s > 0) {
        const int32_t *ids = b->support_ids + off;
        lt__head_mark(a->head_sel, ids, s, target, 1.0f);
        double ks = 0;
        for (int j = 0; j < V; j++)
          if (a->head_sel[j] != 0.0f) ks += exp(((double)z[j] - mx) * it);
        lt__head_mark(a->head_sel, ids, s, target, 0.0f);
        lse = mx * it + log(ks);
      }
      a->head_lse[r] = (float)lse;
      a->logprobs[r + 1] = (float)(z[target] * it - lse);
    }
  }
}

/* Refuses Keep-Sampling-Mask ids outside the vocabulary (they index arrays). */
static int check_support(const lt_batch_t *b, int N, int V) {
  if (!b->support) return 0;
  size_t k = 0;
  for (int i = 0; i < N; i++) {
    if (b->support[i] < 0) return lt_error_set(LT_ERANGE, "forward: negative sampling support at token %d", i);
    if (b->support[i] > 0 && !b->support_ids)
      return lt_error_set(LT_EINVAL, "forward: token %d has a sampling support but the batch has no support ids", i);
    for (int j = 0; j < b->support[i]; j++, k++)
      if (b->support_ids[k] < 0 || b->support_ids[k] >= V)
        return lt_error_set(LT_ERANGE, "forward: support id %d of token %d outside [0, %d)", b->support_ids[k], i, V);
  }
  return 0;
}

int lt_model_forward(lt_model_t *m, const lt_batch_t *b, lt_fwd_out_t *out) {
  lt_acts_t *a = m->acts;
  if (!a) return lt_error_set(LT_EINVAL, "forward: lt_model_train_alloc was not called");
  int nml = lt_model_moe_layers(&m->cfg), K = m->cfg.topk;
  if (b->nseq < 1) return lt_error_set(LT_EINVAL, "forward: empty batch");
  lt_segment_t segs_stack[64], *segs = segs_stack;
  if (b->nseq > 64 && !(segs = calloc((size_t)b->nseq, sizeof *segs)))
    return lt_error_set(LT_ENOMEM, "forward: out of memory");
  for (int s = 0; s < b->nseq; s++) {
    int st = b->start[s];
    segs[s] = (lt_segment_t){.tokens = b->tokens + st, .n = b->start[s + 1] - st, .pos0 = 0};
    if (b->route_ids && nml) segs[s].route_ids = b->route_ids + (size_t)st * nml * K;
  }
  int rc = lt_model_forward_segments(m, a, segs, b->nseq, NULL);
  if (segs != segs_stack) free(segs);
  if (rc == 0 && !m->cfg.critic) rc = check_support(b, a->N, m->cfg.vocab);
  if (rc < 0) return rc;
  int N = a->N, D = m->cfg.hidden;
  for (int s = 0; s < b->nseq; s++) {
    a->logprobs[b->start[s]] = 0;
    a->entropy[b->start[s]] = 0;
  }
  if (m->cfg.critic) {
    for (int r = 0; r < N; r++) {
      const float *h = a->hf + (size_t)r * D;
      float v = 0;
      for (int i = 0; i < D; i++) v += h[i] * m->w.head[i];
      a->values[r] = v;
    }
  } else {
    policy_head(m, a, b);
  }
  m->last = *b;
  double conf = 0;
  for (int r = 0; r < N; r++) conf += a->route_conf[r];
  out->logprobs = a->logprobs;
  out->entropy = a->entropy;
  out->values = a->values;
  out->routing_confidence = nml ? conf / ((double)N * nml) : -1.0;
  out->route_conf = nml ? a->route_conf : NULL;
  return 0;
}

double lt_model_forward_flops(const lt_model_config_t *c, const lt_batch_t *b) {
  double tokens = b->start[b->nseq] - b->start[0];
  double flops = 2.0 * (double)lt_model_active_params(c) * tokens;
  /* Attention scores and weighted sums: 2·2·hd per (query, key) pair per head. */
  for (int s = 0; s < b->nseq; s++) {
    double T = b->start[s + 1] - b->start[s];
    for (int l = 0; l < c->layers; l++) {
      double pairs = T * (T + 1) / 2;
      if (c->sliding[l] && c->window > 0 && T > c->window)
        pairs = (double)c->window * T - (double)c->window * (c->window - 1) / 2;
      flops += 4.0 * c->head_dim * c->heads * pairs;
    }
  }
  return flops;
}
