/* The whole model on one GPU: lt_model_forward / lt_model_backward of
 * learner/forward.c and learner/backward.c step for step, on device buffers
 * with the host model's layout (a device view is the host view's offset into
 * the same flat buffer).  Routing bookkeeping (grouping tokens by expert) is
 * done on the host between the router and the expert products.
 *
 * With lt_gpu_set_recompute (learner.gpu.recompute) the model keeps only each
 * layer's input x[l] and one layer's activations, shared by all layers: the
 * backward reruns layer l's forward from x[l] before differentiating it (one
 * more forward of compute for activations a layer's worth instead of L). */
#include <stdlib.h>
#include <string.h>

#include "learner/cuda/internal.cuh"
extern "C" {
#include "util/error.h"
}

struct lt_gpu_model {
  lt_gpu_t *g;
  const lt_model_t *host;
  lt_model_config_t c;
  int max_tokens, max_seq, chunk, Id, N;
  int recompute;                       /* one layer's activations, recomputed in the backward */
  lt_batch_t last;                     /* the last forward's batch (start: the copy below) */
  float *params, *grads; /* [nparams] */
  float *mom, *vel;      /* [mhi - mlo]: the AdamW moments of this rank's shard */
  size_t mlo, mhi;
  lt_model_weights_t w, gw;           /* device views */
  float *rope_cos, *rope_sin;
  /* activations, per layer (host arrays of device pointers) */
  float *x[LT_MAX_LAYERS + 1], *h1[LT_MAX_LAYERS], *r1[LT_MAX_LAYERS], *qp[LT_MAX_LAYERS], *q[LT_MAX_LAYERS],
      *rq[LT_MAX_LAYERS], *kp[LT_MAX_LAYERS], *k[LT_MAX_LAYERS], *rk[LT_MAX_LAYERS], *v[LT_MAX_LAYERS],
      *att[LT_MAX_LAYERS], *lse[LT_MAX_LAYERS], *x2[LT_MAX_LAYERS], *h2[LT_MAX_LAYERS], *r2[LT_MAX_LAYERS],
      *gt[LT_MAX_LAYERS], *up[LT_MAX_LAYERS], *probs[LT_MAX_LAYERS], *wts[LT_MAX_LAYERS], *y[LT_MAX_LAYERS];
  uint16_t *ids[LT_MAX_LAYERS];
  int *perm[LT_MAX_LAYERS], *inv[LT_MAX_LAYERS];
  int *eoff[LT_MAX_LAYERS];            /* host [E+1] */
  float *hf, *rf, *hlse, *lp, *ent, *vals, *conf, *mass, *act, *xe, *rlogits, *logits, *dlp;
  int *pos, *tok, *target;
  /* the head's per-row options of the last forward (sampling temperature, Keep Sampling Mask) */
  lt_gpu_head_opts_t head;            /* device arrays, members NULL when off */
  float *itemp;                       /* [N] 1/T per row */
  int *keep_n, *keep_off;             /* [N] */
  int32_t *keep_ids;                  /* [keep_cap], grown on demand */
  size_t keep_cap;
  uint8_t *mark;                      /* [chunk, V], allocated with the first keep set */
  float *h_itemp;
  int *h_keep_n, *h_keep_off;
  uint16_t *forced;                    /* [N, k] keep-routing ids of one layer */
  /* gradients of activations */
  float *dres, *dx2, *dh, *dq, *datt, *dk, *dkp, *dv, *dg, *du, *dact, *dy, *dxe, *dw;
  /* host mirrors */
  int *h_tok, *h_pos, *h_target, *h_perm, *h_inv;
  uint16_t *h_ids, *h_forced;
  float *h_lp, *h_ent, *h_conf, *out_lp, *out_ent, *out_vals, *h_dlp;
  int nseq;
  int *start;                          /* [nseq + 1] of the last forward */
  int start_cap;
  void **allocs;                       /* every device allocation, for the free */
  int nalloc, alloc_cap;
};

static void *dev(lt_gpu_model_t *gm, size_t bytes, int *fail) {
  void *p = NULL;
  if (*fail) return NULL;
  if (gm->nalloc == gm->alloc_cap) {
    int cap = gm->alloc_cap ? 2 * gm->alloc_cap : 256;
    void **na = (void **)realloc(gm->allocs, sizeof *na * (size_t)cap);
    if (!na) {
      *fail = 1;
      return NULL;
    }
    gm->allocs = na;
    gm->alloc_cap = cap;
  }
  if (lt_gpu_alloc(gm->g, &p, bytes) < 0) {
    *fail = 1;
    return NULL;
  }
  gm->allocs[gm->nalloc++] = p;
  return p;
}

static float *view(const lt_model_t *h, float *base, const float *hp) { return hp ? base + (hp - h->params) : NULL; }

static void bind_views(lt_gpu_model_t *gm, lt_model_weights_t *dst, float *base) {
  const lt_model_t *h = gm->host;
  const lt_model_weights_t *s = &h->w;
  dst->embed = view(h, base, s->embed);
  dst->norm = view(h, base, s->norm);
  dst->head = view(h, base, s->head);
  for (int l = 0; l < gm->c.layers; l++) {
    const lt_layer_w_t *a = &s->layer[l];
    lt_layer_w_t *b = &dst->layer[l];
    b->ln1 = view(h, base, a->ln1);
    b->wq = view(h, base, a->wq);
    b->wk = view(h, base, a->wk);
    b->wv = view(h, base, a->wv);
    b->wo = view(h, base, a->wo);
    b->qnorm = view(h, base, a->qnorm);
    b->knorm = view(h, base, a->knorm);
    b->ln2 = view(h, base, a->ln2);
    b->router = view(h, base, a->router);
    b->w_gate = view(h, base, a->w_gate);
    b->w_up = view(h, base, a->w_up);
    b->w_down = view(h, base, a->w_down);
  }
}

void lt_gpu_model_free(lt_gpu_model_t *gm) {
  if (!gm) return;
  lt_gpu_sync(gm->g);
  for (int i = 0; i < gm->nalloc; i++) lt_gpu_free(gm->allocs[i]);
  free(gm->allocs);
  for (int l = 0; l < gm->c.layers; l++) free(gm->eoff[l]);
  lt_gpu_free(gm->keep_ids);
  lt_gpu_free(gm->mark);
  void *hp[] = {gm->h_tok, gm->h_pos, gm->h_target, gm->h_perm, gm->h_inv, gm->h_ids, gm->h_forced, gm->h_lp, gm->h_ent,
                gm->h_conf, gm->out_lp, gm->out_ent, gm->out_vals, gm->h_dlp, gm->start, gm->h_itemp, gm->h_keep_n,
                gm->h_keep_off};
  for (size_t i = 0; i < sizeof hp / sizeof hp[0]; i++) free(hp[i]);
  free(gm);
}

int lt_gpu_model_create(lt_gpu_t *g, const lt_model_t *host, int max_tokens, int max_seq, size_t lo, size_t hi,
                        lt_gpu_model_t **out) {
  *out = NULL;
  const lt_model_config_t *c = &host->cfg;
  if (c->head_dim > 256 || c->heads % c->kv_heads)
    return lt_error_set(LT_EUNSUPP, "GPU attention: head_dim %d (≤ 256) and %d heads over %d KV heads", c->head_dim,
                        c->heads, c->kv_heads);
  lt_gpu_model_t *gm = (lt_gpu_model_t *)calloc(1, sizeof *gm);
  if (!gm) return lt_error_set(LT_ENOMEM, "GPU model: out of memory");
  gm->g = g;
  gm->host = host;
  gm->c = *c;
  gm->max_tokens = max_tokens;
  gm->max_seq = max_seq;
  size_t N = (size_t)max_tokens, D = c->hidden, Hq = (size_t)c->heads * c->head_dim, Hk = (size_t)c->kv_heads * c->head_dim;
  size_t E = c->experts, K = c->experts ? c->topk : 0, V = c->vocab, P = host->nparams, F = sizeof(float);
  int Id = 0;
  for (int l = 0; l < c->layers; l++) {
    int need = c->moe[l] ? c->topk * c->moe_inter : c->inter;
    if (need > Id) Id = need;
  }
  gm->Id = Id;
  /* Logits chunks of at most 2^26 floats (256 MiB). */
  size_t ch = ((size_t)1 << 26) / V;
  gm->chunk = (int)(ch < 1 ? 1 : ch > N ? N : ch);
  int fail = 0;
  gm->params = (float *)dev(gm, P * F, &fail);
  gm->grads = (float *)dev(gm, P * F, &fail);
  gm->mlo = lo;
  gm->mhi = hi > lo ? hi : lo;
  if (gm->mhi > gm->mlo) {
    gm->mom = (float *)dev(gm, (gm->mhi - gm->mlo) * F, &fail);
    gm->vel = (float *)dev(gm, (gm->mhi - gm->mlo) * F, &fail);
  }
  size_t half = (size_t)c->max_pos * (c->head_dim / 2);
  gm->rope_cos = (float *)dev(gm, half * F, &fail);
  gm->rope_sin = (float *)dev(gm, half * F, &fail);
  for (int l = 0; l <= c->layers; l++) gm->x[l] = (float *)dev(gm, N * D * F, &fail);
  gm->recompute = g->recompute;
  int slot = -1, mslot = -1; /* the layer whose activations the others share, when recomputing */
  for (int l = 0; l < c->layers; l++) {
    if (gm->recompute && slot >= 0) {
      gm->h1[l] = gm->h1[slot], gm->r1[l] = gm->r1[slot], gm->qp[l] = gm->qp[slot], gm->q[l] = gm->q[slot];
      gm->rq[l] = gm->rq[slot], gm->kp[l] = gm->kp[slot], gm->k[l] = gm->k[slot], gm->rk[l] = gm->rk[slot];
      gm->v[l] = gm->v[slot], gm->att[l] = gm->att[slot], gm->lse[l] = gm->lse[slot], gm->x2[l] = gm->x2[slot];
      gm->h2[l] = gm->h2[slot], gm->r2[l] = gm->r2[slot], gm->gt[l] = gm->gt[slot], gm->up[l] = gm->up[slot];
    } else {
      slot = l;
      gm->h1[l] = (float *)dev(gm, N * D * F, &fail);
      gm->r1[l] = (float *)dev(gm, N * F, &fail);
      gm->qp[l] = (float *)dev(gm, N * Hq * F, &fail);
      gm->q[l] = (float *)dev(gm, N * Hq * F, &fail);
      gm->rq[l] = (float *)dev(gm, N * c->heads * F, &fail);
      gm->kp[l] = (float *)dev(gm, N * Hk * F, &fail);
      gm->k[l] = (float *)dev(gm, N * Hk * F, &fail);
      gm->rk[l] = (float *)dev(gm, N * c->kv_heads * F, &fail);
      gm->v[l] = (float *)dev(gm, N * Hk * F, &fail);
      gm->att[l] = (float *)dev(gm, N * Hq * F, &fail);
      gm->lse[l] = (float *)dev(gm, N * c->heads * F, &fail);
      gm->x2[l] = (float *)dev(gm, N * D * F, &fail);
      gm->h2[l] = (float *)dev(gm, N * D * F, &fail);
      gm->r2[l] = (float *)dev(gm, N * F, &fail);
      gm->gt[l] = (float *)dev(gm, N * Id * F, &fail);
      gm->up[l] = (float *)dev(gm, N * Id * F, &fail);
    }
    if (!c->moe[l]) continue;
    if (!(gm->eoff[l] = (int *)calloc(E + 1, sizeof(int)))) fail = 1;
    if (gm->recompute && mslot >= 0) {
      gm->probs[l] = gm->probs[mslot], gm->wts[l] = gm->wts[mslot], gm->y[l] = gm->y[mslot];
      gm->ids[l] = gm->ids[mslot], gm->perm[l] = gm->perm[mslot], gm->inv[l] = gm->inv[mslot];
      continue;
    }
    mslot = l;
    gm->probs[l] = (float *)dev(gm, N * E * F, &fail);
    gm->wts[l] = (float *)dev(gm, N * K * F, &fail);
    gm->y[l] = (float *)dev(gm, N * K * D * F, &fail);
    gm->ids[l] = (uint16_t *)dev(gm, N * K * sizeof(uint16_t), &fail);
    gm->perm[l] = (int *)dev(gm, N * K * sizeof(int), &fail);
    gm->inv[l] = (int *)dev(gm, N * K * sizeof(int), &fail);
  }
  gm->hf = (float *)dev(gm, N * D * F, &fail);
  gm->rf = (float *)dev(gm, N * F, &fail);
  gm->hlse = (float *)dev(gm, N * F, &fail);
  gm->lp = (float *)dev(gm, N * F, &fail);
  gm->ent = (float *)dev(gm, N * F, &fail);
  gm->vals = (float *)dev(gm, N * F, &fail);
  gm->conf = (float *)dev(gm, N * F, &fail);
  gm->mass = (float *)dev(gm, N * F, &fail);
  gm->dlp = (float *)dev(gm, N * F, &fail);
  gm->act = (float *)dev(gm, N * Id * F, &fail);
  gm->logits = (float *)dev(gm, (size_t)gm->chunk * V * F, &fail);
  gm->pos = (int *)dev(gm, N * sizeof(int), &fail);
  gm->tok = (int *)dev(gm, N * sizeof(int), &fail);
  gm->target = (int *)dev(gm, N * sizeof(int), &fail);
  gm->itemp = (float *)dev(gm, N * F, &fail);
  gm->keep_n = (int *)dev(gm, N * sizeof(int), &fail);
  gm->keep_off = (int *)dev(gm, N * sizeof(int), &fail);
  gm->dres = (float *)dev(gm, N * D * F, &fail);
  gm->dx2 = (float *)dev(gm, N * D * F, &fail);
  gm->dh = (float *)dev(gm, N * D * F, &fail);
  gm->dq = (float *)dev(gm, N * Hq * F, &fail);
  gm->datt = (float *)dev(gm, N * Hq * F, &fail);
  gm->dk = (float *)dev(gm, N * Hk * F, &fail);
  gm->dkp = (float *)dev(gm, N * Hk * F, &fail);
  gm->dv = (float *)dev(gm, N * Hk * F, &fail);
  gm->dg = (float *)dev(gm, N * Id * F, &fail);
  gm->du = (float *)dev(gm, N * Id * F, &fail);
  gm->dact = (float *)dev(gm, N * Id * F, &fail);
  if (E) {
    gm->xe = (float *)dev(gm, N * K * D * F, &fail);
    gm->rlogits = (float *)dev(gm, N * E * F, &fail);
    gm->forced = (uint16_t *)dev(gm, N * K * sizeof(uint16_t), &fail);
    gm->dy = (float *)dev(gm, N * K * D * F, &fail);
    gm->dxe = (float *)dev(gm, N * K * D * F, &fail);
    gm->dw = (float *)dev(gm, N * K * F, &fail);
  }
  size_t NK = N * (K ? K : 1);
  gm->h_tok = (int *)malloc(N * sizeof(int));
  gm->h_pos = (int *)malloc(N * sizeof(int));
  gm->h_target = (int *)malloc(N * sizeof(int));
  gm->h_perm = (int *)malloc(NK * sizeof(int));
  gm->h_inv = (int *)malloc(NK * sizeof(int));
  gm->h_ids = (uint16_t *)malloc(NK * sizeof(uint16_t));
  gm->h_forced = (uint16_t *)malloc(NK * sizeof(uint16_t));
  float **hf[] = {&gm->h_lp, &gm->h_ent, &gm->h_conf, &gm->out_lp, &gm->out_ent, &gm->out_vals, &gm->h_dlp, &gm->h_itemp};
  for (size_t i = 0; i < sizeof hf / sizeof hf[0]; i++)
    if (!(*hf[i] = (float *)malloc(N * F))) fail = 1;
  gm->h_keep_n = (int *)malloc(N * sizeof(int));
  gm->h_keep_off = (int *)malloc(N * sizeof(int));
  if (fail || !gm->h_tok || !gm->h_pos || !gm->h_target || !gm->h_perm || !gm->h_inv || !gm->h_ids || !gm->h_forced ||
      !gm->h_keep_n || !gm->h_keep_off) {
    lt_gpu_model_free(gm);
    return lt_error_wrap(LT_ENOMEM, "GPU model of %zu parameters for %d tokens", P, max_tokens);
  }
  bind_views(gm, &gm->w, gm->params);
  bind_views(gm, &gm->gw, gm->grads);
  lt_gpu_upload(g, gm->params, host->params, P * F);
  lt_gpu_upload(g, gm->rope_cos, host->rope_cos, half * F);
  lt_gpu_upload(g, gm->rope_sin, host->rope_sin, half * F);
  if (gm->mom) {
    lt_gpu_zero(g, gm->mom, (gm->mhi - gm->mlo) * F);
    lt_gpu_zero(g, gm->vel, (gm->mhi - gm->mlo) * F);
  }
  *out = gm;
  return 0;
}

/* ---- small kernels of the model's glue ---- */

__global__ void embed_fwd(float *x, const float *E, const int *tok, int N, int D) {
  size_t n = (size_t)N * D;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    x[i] = E[(size_t)tok[i / D] * D + i % D];
}

/* dE[tok[n]] += d[n], each column by one thread over the tokens in order: a token repeated in the batch adds up in
 * the same order every run (atomics did not: retrain, docs/replay.md). */
__global__ void embed_bwd(float *dE, const float *d, const int *tok, int N, int D) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= D) return;
  for (int n = 0; n < N; n++) dE[(size_t)tok[n] * D + i] += d[(size_t)n * D + i];
}

__global__ void add_kernel(float *y, const float *x, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) y[i] += x[i];
}

/* xe[r] = h[perm[r] / K] */
__global__ void moe_gather(float *xe, const float *h, const int *perm, int NK, int K, int D) {
  size_t n = (size_t)NK * D;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    xe[i] = h[(size_t)(perm[i / D] / K) * D + i % D];
}

/* xo[t] += Σ_j w[t, j] · y[inv[t, j]]  (in slot order: deterministic) */
__global__ void moe_combine(float *xo, const float *y, const float *w, const int *inv, int N, int K, int D) {
  size_t n = (size_t)N * D;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    size_t t = i / D, d = i % D;
    float s = 0;
    for (int j = 0; j < K; j++) s += w[t * K + j] * y[(size_t)inv[t * K + j] * D + d];
    xo[i] += s;
  }
}

/* dh[t] += Σ_j dxe[inv[t, j]] */
__global__ void moe_scatter(float *dh, const float *dxe, const int *inv, int N, int K, int D) {
  size_t n = (size_t)N * D;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    size_t t = i / D, d = i % D;
    float s = 0;
    for (int j = 0; j < K; j++) s += dxe[(size_t)inv[t * K + j] * D + d];
    dh[i] += s;
  }
}

/* One block per routed row r: dy[r] = w · dout[t], dw[perm[r]] = dout[t]·y[r]. */
__global__ void moe_combine_bwd(float *dy, float *dw, const float *dout, const float *y, const float *w, const int *perm,
                                int K, int D) {
  __shared__ float sh[32];
  int r = blockIdx.x, pr = perm[r];
  size_t t = pr / K;
  float wr = w[pr], s = 0;
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float o = dout[t * D + d];
    dy[(size_t)r * D + d] = wr * o;
    s += o * y[(size_t)r * D + d];
  }
  s = lt__block_sum(s, sh);
  if (threadIdx.x == 0) dw[pr] = s;
}

static unsigned grid_n(size_t n) {
  unsigned b = lt__blocks(n, 256);
  return b < 65535u ? (b ? b : 1) : 65535u;
}

static void copy_d(lt_gpu_model_t *gm, float *dst, const float *src, size_t n) {
  lt_gpu_copy(gm->g, dst, src, n * sizeof(float));
}

/* ---- the head's per-row options ---- */

/* Row r predicts token r + 1: its temperature and Keep-Sampling-Mask set are
 * token r + 1's (learner/forward.c's policy_head).  Checks the ids (they index
 * device arrays) and uploads what the batch uses; gm->head says what is on. */
static int head_options(lt_gpu_model_t *gm, const lt_batch_t *b, int N) {
  lt_gpu_t *g = gm->g;
  int V = gm->c.vocab, temp = 0, keep = 0;
  size_t nids = 0;
  for (int i = 0; i < N; i++) {
    temp |= b->temperature && lt__head_temperature(b, i) != 1.0f;
    if (!b->support) continue;
    if (b->support[i] < 0) return lt_error_set(LT_ERANGE, "forward: negative sampling support at token %d", i);
    if (b->support[i] > 0 && !b->support_ids)
      return lt_error_set(LT_EINVAL, "forward: token %d has a sampling support but the batch has no support ids", i);
    for (int j = 0; j < b->support[i]; j++, nids++)
      if (b->support_ids[nids] < 0 || b->support_ids[nids] >= V)
        return lt_error_set(LT_ERANGE, "forward: support id %d of token %d outside [0, %d)", b->support_ids[nids], i, V);
    keep |= b->support[i] > 0;
  }
  gm->head = lt_gpu_head_opts_t{};
  if (temp) {
    for (int r = 0; r < N; r++) gm->h_itemp[r] = r + 1 < N ? 1.0f / lt__head_temperature(b, r + 1) : 1.0f;
    lt_gpu_upload(g, gm->itemp, gm->h_itemp, sizeof(float) * N);
    gm->head.inv_temp = gm->itemp;
  }
  if (!keep) return 0;
  if (nids > gm->keep_cap) {
    lt_gpu_free(gm->keep_ids);
    gm->keep_ids = NULL;
    gm->keep_cap = 0;
    if (lt_gpu_alloc(g, (void **)&gm->keep_ids, nids * sizeof(int32_t)) < 0) return lt_error_wrap(LT_ENOMEM, "GPU head");
    gm->keep_cap = nids;
  }
  if (!gm->mark && lt_gpu_alloc(g, (void **)&gm->mark, (size_t)gm->chunk * V) < 0) return lt_error_wrap(LT_ENOMEM, "GPU head");
  size_t off = 0;
  for (int r = 0; r < N; r++) { /* as policy_head: row r's ids follow those of tokens 0 .. r */
    off += (size_t)b->support[r];
    gm->h_keep_n[r] = r + 1 < N ? b->support[r + 1] : 0;
    gm->h_keep_off[r] = (int)off;
  }
  lt_gpu_upload(g, gm->keep_ids, b->support_ids, nids * sizeof(int32_t));
  lt_gpu_upload(g, gm->keep_n, gm->h_keep_n, sizeof(int) * N);
  lt_gpu_upload(g, gm->keep_off, gm->h_keep_off, sizeof(int) * N);
  gm->head.keep_n = gm->keep_n;
  gm->head.keep_off = gm->keep_off;
  gm->head.keep_ids = gm->keep_ids;
  gm->head.mark = gm->mark;
  return 0;
}

/* The options of the logits chunk starting at row r0 (the mark scratch is per chunk row). */
static lt_gpu_head_opts_t head_rows(const lt_gpu_model_t *gm, int r0) {
  lt_gpu_head_opts_t o = gm->head;
  if (o.inv_temp) o.inv_temp += r0;
  if (o.keep_n) o.keep_n += r0, o.keep_off += r0;
  return o;
}

/* ---- forward ---- */

/* again: a recomputation in the backward (routing confidence already counted). */
static void moe_forward(lt_gpu_model_t *gm, int l, int ml, const lt_batch_t *b, float *xout, int again) {
  lt_gpu_t *g = gm->g;
  const lt_model_config_t *c = &gm->c;
  const lt_layer_w_t *W = &gm->w.layer[l];
  int N = gm->N, D = c->hidden, E = c->experts, K = c->topk, Im = c->moe_inter, nml = lt_model_moe_layers(c);
  lt_gpu_linear_forward(g, gm->rlogits, gm->h2[l], W->router, N, D, E);
  const uint16_t *forced = NULL;
  if (b->route_ids) {
    for (int t = 0; t < N; t++)
      memcpy(gm->h_forced + (size_t)t * K, b->route_ids + ((size_t)t * nml + ml) * K, sizeof(uint16_t) * K);
    lt_gpu_upload(g, gm->forced, gm->h_forced, sizeof(uint16_t) * (size_t)N * K);
    forced = gm->forced;
  }
  lt_gpu_router_forward(g, gm->probs[l], gm->ids[l], gm->wts[l], gm->mass, gm->rlogits, N, E, K, c->norm_topk, forced);
  if (!again) {
    add_kernel<<<grid_n(N), 256, 0, g->stream>>>(gm->conf, gm->mass, N);
    LT_LAUNCHED();
  }
  /* Group (token, slot) pairs by expert, stable in token order, as the CPU does. */
  int NK = N * K, *eoff = gm->eoff[l];
  lt_gpu_download(g, gm->h_ids, gm->ids[l], sizeof(uint16_t) * NK);
  memset(eoff, 0, sizeof(int) * (E + 1));
  for (int r = 0; r < NK; r++) eoff[gm->h_ids[r] + 1]++;
  for (int e = 0; e < E; e++) eoff[e + 1] += eoff[e];
  for (int r = 0; r < NK; r++) {
    int at = eoff[gm->h_ids[r]]++;
    gm->h_perm[at] = r;
    gm->h_inv[r] = at;
  }
  for (int e = E; e > 0; e--) eoff[e] = eoff[e - 1];
  eoff[0] = 0;
  lt_gpu_upload(g, gm->perm[l], gm->h_perm, sizeof(int) * NK);
  lt_gpu_upload(g, gm->inv[l], gm->h_inv, sizeof(int) * NK);
  moe_gather<<<grid_n((size_t)NK * D), 256, 0, g->stream>>>(gm->xe, gm->h2[l], gm->perm[l], NK, K, D);
  LT_LAUNCHED();
  size_t eg = (size_t)Im * D;
  for (int e = 0; e < E; e++) {
    int r0 = eoff[e], ne = eoff[e + 1] - r0;
    if (!ne) continue;
    float *xe = gm->xe + (size_t)r0 * D, *gt = gm->gt[l] + (size_t)r0 * Im, *up = gm->up[l] + (size_t)r0 * Im;
    float *act = gm->act + (size_t)r0 * Im;
    lt_gpu_linear_forward(g, gt, xe, W->w_gate + e * eg, ne, D, Im);
    lt_gpu_linear_forward(g, up, xe, W->w_up + e * eg, ne, D, Im);
    lt_gpu_swiglu_forward(g, act, gt, up, (size_t)ne * Im);
    lt_gpu_linear_forward(g, gm->y[l] + (size_t)r0 * D, act, W->w_down + e * eg, ne, Im, D);
  }
  moe_combine<<<grid_n((size_t)N * D), 256, 0, g->stream>>>(xout, gm->y[l], gm->wts[l], gm->inv[l], N, K, D);
  LT_LAUNCHED();
}

/* Layer l (its ml-th MoE layer) from x[l] into x[l + 1] and its activations;
 * again: the backward's recomputation. */
static void layer_forward(lt_gpu_model_t *gm, int l, int ml, const lt_batch_t *b, int again) {
  lt_gpu_t *g = gm->g;
  const lt_model_config_t *c = &gm->c;
  int N = gm->N, D = c->hidden, H = c->heads, KV = c->kv_heads, hd = c->head_dim;
  int Hq = H * hd, Hk = KV * hd;
  const lt_layer_w_t *W = &gm->w.layer[l];
  float *xin = gm->x[l], *xout = gm->x[l + 1];
  lt_gpu_rmsnorm_forward(g, gm->h1[l], gm->r1[l], xin, W->ln1, N, D, c->eps);
  lt_gpu_linear_forward(g, gm->qp[l], gm->h1[l], W->wq, N, D, Hq);
  lt_gpu_linear_forward(g, gm->kp[l], gm->h1[l], W->wk, N, D, Hk);
  lt_gpu_linear_forward(g, gm->v[l], gm->h1[l], W->wv, N, D, Hk);
  lt_gpu_rmsnorm_forward(g, gm->q[l], gm->rq[l], gm->qp[l], W->qnorm, N * H, hd, c->eps);
  lt_gpu_rmsnorm_forward(g, gm->k[l], gm->rk[l], gm->kp[l], W->knorm, N * KV, hd, c->eps);
  lt_gpu_rope_apply(g, gm->q[l], gm->pos, N, H, hd, gm->rope_cos, gm->rope_sin, 0);
  lt_gpu_rope_apply(g, gm->k[l], gm->pos, N, KV, hd, gm->rope_cos, gm->rope_sin, 0);
  for (int s = 0; s < b->nseq; s++) {
    int off = b->start[s], T = b->start[s + 1] - off;
    lt_gpu_attention_forward(g, gm->att[l] + (size_t)off * Hq, gm->lse[l] + (size_t)off * H, gm->q[l] + (size_t)off * Hq,
                             gm->k[l] + (size_t)off * Hk, gm->v[l] + (size_t)off * Hk, T, T, H, KV, hd,
                             c->sliding[l] ? c->window : 0);
  }
  copy_d(gm, gm->x2[l], xin, (size_t)N * D);
  lt_gpu_linear_forward_acc(g, gm->x2[l], gm->att[l], W->wo, N, Hq, D);
  lt_gpu_rmsnorm_forward(g, gm->h2[l], gm->r2[l], gm->x2[l], W->ln2, N, D, c->eps);
  copy_d(gm, xout, gm->x2[l], (size_t)N * D);
  if (c->moe[l]) {
    moe_forward(gm, l, ml, b, xout, again);
  } else {
    int Id = c->inter;
    lt_gpu_linear_forward(g, gm->gt[l], gm->h2[l], W->w_gate, N, D, Id);
    lt_gpu_linear_forward(g, gm->up[l], gm->h2[l], W->w_up, N, D, Id);
    lt_gpu_swiglu_forward(g, gm->act, gm->gt[l], gm->up[l], (size_t)N * Id);
    lt_gpu_linear_forward_acc(g, xout, gm->act, W->w_down, N, Id, D);
  }
}

int lt_gpu_model_forward(lt_gpu_model_t *gm, const lt_batch_t *b, lt_fwd_out_t *out) {
  lt_gpu_t *g = gm->g;
  const lt_model_config_t *c = &gm->c;
  int D = c->hidden, L = c->layers, V = c->vocab;
  if (b->nseq < 1) return lt_error_set(LT_EINVAL, "forward: empty batch");
  int N = b->start[b->nseq] - b->start[0];
  if (b->start[0] != 0) return lt_error_set(LT_EINVAL, "forward: a packed batch starts at token 0");
  if (N > gm->max_tokens) return lt_error_set(LT_ERANGE, "forward: %d tokens exceed the workspace (%d)", N, gm->max_tokens);
  int rc = c->critic ? 0 : head_options(gm, b, N);
  if (rc < 0) return rc;
  if (b->nseq + 1 > gm->start_cap) {
    int *ns = (int *)realloc(gm->start, sizeof(int) * (size_t)(b->nseq + 1));
    if (!ns) return lt_error_set(LT_ENOMEM, "forward: out of memory");
    gm->start = ns;
    gm->start_cap = b->nseq + 1;
  }
  memcpy(gm->start, b->start, sizeof(int) * (size_t)(b->nseq + 1));
  gm->nseq = b->nseq;
  gm->last = *b;
  gm->last.start = gm->start;
  for (int s = 0; s < b->nseq; s++) {
    int a = b->start[s], e = b->start[s + 1];
    if (e - a < 1) return lt_error_set(LT_EINVAL, "forward: empty sequence %d", s);
    if (e - a > gm->max_seq || e - a > c->max_pos)
      return lt_error_set(LT_ERANGE, "forward: sequence of %d tokens exceeds the workspace (%d) or max positions (%d)",
                          e - a, gm->max_seq, c->max_pos);
    for (int i = a; i < e; i++) {
      int32_t t = b->tokens[i];
      if (t < 0 || t >= V) return lt_error_set(LT_ERANGE, "forward: token id %d outside [0, %d)", t, V);
      gm->h_tok[i] = t;
      gm->h_pos[i] = i - a;
      gm->h_target[i] = i + 1 < e ? b->tokens[i + 1] : -1;
    }
  }
  gm->N = N;
  lt_gpu_upload(g, gm->tok, gm->h_tok, sizeof(int) * N);
  lt_gpu_upload(g, gm->pos, gm->h_pos, sizeof(int) * N);
  lt_gpu_upload(g, gm->target, gm->h_target, sizeof(int) * N);
  lt_gpu_zero(g, gm->conf, sizeof(float) * N);
  embed_fwd<<<grid_n((size_t)N * D), 256, 0, g->stream>>>(gm->x[0], gm->w.embed, gm->tok, N, D);
  LT_LAUNCHED();
  for (int l = 0, ml = 0; l < L; l++) {
    layer_forward(gm, l, ml, b, 0);
    ml += c->moe[l];
  }
  lt_gpu_rmsnorm_forward(g, gm->hf, gm->rf, gm->x[L], gm->w.norm, N, D, c->eps);
  if (c->critic) {
    lt_gpu_linear_forward(g, gm->vals, gm->hf, gm->w.head, N, D, 1);
    lt_gpu_download(g, gm->out_vals, gm->vals, sizeof(float) * N);
  } else {
    for (int r0 = 0; r0 < N; r0 += gm->chunk) {
      int n = N - r0 < gm->chunk ? N - r0 : gm->chunk;
      lt_gpu_linear_forward(g, gm->logits, gm->hf + (size_t)r0 * D, gm->w.head, n, D, V);
      lt_gpu_head_opts_t o = head_rows(gm, r0);
      lt_gpu_head_forward(g, gm->hlse + r0, gm->lp + r0, gm->ent + r0, gm->logits, gm->target + r0, n, V, &o);
    }
    lt_gpu_download(g, gm->h_lp, gm->lp, sizeof(float) * N);
    lt_gpu_download(g, gm->h_ent, gm->ent, sizeof(float) * N);
    /* Row r predicts token r + 1; sequence starts have no prediction. */
    for (int r = 0; r < N; r++) gm->out_lp[r] = gm->out_ent[r] = 0;
    for (int r = 0; r < N; r++)
      if (gm->h_target[r] >= 0) {
        gm->out_lp[r + 1] = gm->h_lp[r];
        gm->out_ent[r + 1] = gm->h_ent[r];
      }
  }
  int nml = lt_model_moe_layers(c);
  double conf = 0;
  if (nml) {
    lt_gpu_download(g, gm->h_conf, gm->conf, sizeof(float) * N);
    for (int r = 0; r < N; r++) conf += gm->h_conf[r];
  }
  out->logprobs = gm->out_lp;
  out->entropy = gm->out_ent;
  out->values = gm->out_vals;
  out->routing_confidence = nml ? conf / ((double)N * nml) : -1.0;
  out->route_conf = nml ? gm->h_conf : NULL;
  return 0;
}

/* ---- backward ---- */

static void moe_backward(lt_gpu_model_t *gm, int l, const float *dout, float *dh2) {
  lt_gpu_t *g = gm->g;
  const lt_model_config_t *c = &gm->c;
  const lt_layer_w_t *W = &gm->w.layer[l], *G = &gm->gw.layer[l];
  int N = gm->N, D = c->hidden, E = c->experts, K = c->topk, Im = c->moe_inter, NK = N * K;
  const int *eoff = gm->eoff[l];
  moe_combine_bwd<<<NK, 128, 0, g->stream>>>(gm->dy, gm->dw, dout, gm->y[l], gm->wts[l], gm->perm[l], K, D);
  LT_LAUNCHED();
  moe_gather<<<grid_n((size_t)NK * D), 256, 0, g->stream>>>(gm->xe, gm->h2[l], gm->perm[l], NK, K, D);
  LT_LAUNCHED();
  lt_gpu_zero(g, gm->dxe, sizeof(float) * (size_t)NK * D);
  size_t eg = (size_t)Im * D;
  for (int e = 0; e < E; e++) {
    int r0 = eoff[e], ne = eoff[e + 1] - r0;
    if (!ne) continue;
    const float *gt = gm->gt[l] + (size_t)r0 * Im, *up = gm->up[l] + (size_t)r0 * Im;
    float *act = gm->act + (size_t)r0 * Im, *dact = gm->dact + (size_t)r0 * Im;
    float *dg = gm->dg + (size_t)r0 * Im, *du = gm->du + (size_t)r0 * Im;
    float *xe = gm->xe + (size_t)r0 * D, *dxe = gm->dxe + (size_t)r0 * D;
    lt_gpu_swiglu_forward(g, act, gt, up, (size_t)ne * Im);
    lt_gpu_zero(g, dact, sizeof(float) * (size_t)ne * Im);
    lt_gpu_linear_backward(g, dact, G->w_down + e * eg, gm->dy + (size_t)r0 * D, act, W->w_down + e * eg, ne, Im, D);
    lt_gpu_swiglu_backward(g, dg, du, dact, gt, up, (size_t)ne * Im);
    lt_gpu_linear_backward(g, dxe, G->w_gate + e * eg, dg, xe, W->w_gate + e * eg, ne, D, Im);
    lt_gpu_linear_backward(g, dxe, G->w_up + e * eg, du, xe, W->w_up + e * eg, ne, D, Im);
  }
  moe_scatter<<<grid_n((size_t)N * D), 256, 0, g->stream>>>(dh2, gm->dxe, gm->inv[l], N, K, D);
  LT_LAUNCHED();
  lt_gpu_router_backward(g, gm->rlogits, gm->probs[l], gm->ids[l], gm->dw, N, E, K, c->norm_topk);
  lt_gpu_linear_backward(g, dh2, G->router, gm->rlogits, gm->h2[l], W->router, N, D, E);
}

int lt_gpu_model_backward(lt_gpu_model_t *gm, const float *dlogprobs, const float *dvalues) {
  lt_gpu_t *g = gm->g;
  const lt_model_config_t *c = &gm->c;
  int N = gm->N, D = c->hidden, H = c->heads, KV = c->kv_heads, hd = c->head_dim, L = c->layers, V = c->vocab;
  int Hq = H * hd, Hk = KV * hd;
  if (!N) return lt_error_set(LT_EINVAL, "backward: no training forward to differentiate");
  float *dhf = gm->dh;
  lt_gpu_zero(g, dhf, sizeof(float) * (size_t)N * D);
  if (c->critic) {
    if (dvalues) {
      lt_gpu_upload(g, gm->dlp, dvalues, sizeof(float) * N);
      lt_gpu_linear_backward(g, dhf, gm->gw.head, gm->dlp, gm->hf, gm->w.head, N, D, 1);
    }
  } else if (dlogprobs) {
    for (int r = 0; r < N; r++) gm->h_dlp[r] = gm->h_target[r] >= 0 ? dlogprobs[r + 1] : 0.0f;
    lt_gpu_upload(g, gm->dlp, gm->h_dlp, sizeof(float) * N);
    for (int r0 = 0; r0 < N; r0 += gm->chunk) {
      int n = N - r0 < gm->chunk ? N - r0 : gm->chunk;
      const float *h = gm->hf + (size_t)r0 * D;
      lt_gpu_linear_forward(g, gm->logits, h, gm->w.head, n, D, V);
      lt_gpu_head_opts_t o = head_rows(gm, r0);
      lt_gpu_head_backward(g, gm->logits, gm->hlse + r0, gm->dlp + r0, gm->target + r0, n, V, &o);
      lt_gpu_linear_backward(g, dhf + (size_t)r0 * D, gm->gw.head, gm->logits, h, gm->w.head, n, D, V);
    }
  }
  lt_gpu_zero(g, gm->dres, sizeof(float) * (size_t)N * D);
  lt_gpu_rmsnorm_backward(g, gm->dres, gm->gw.norm, dhf, gm->x[L], gm->w.norm, gm->rf, N, D);
  for (int l = L - 1, ml = lt_model_moe_layers(c); l >= 0; l--) {
    const lt_layer_w_t *W = &gm->w.layer[l], *G = &gm->gw.layer[l];
    ml -= c->moe[l];
    /* The last layer's activations are still there from the forward; x[l + 1] is rewritten with what it holds. */
    if (gm->recompute && l < L - 1) layer_forward(gm, l, ml, &gm->last, 1);
    float *dh2 = gm->dh;
    lt_gpu_zero(g, dh2, sizeof(float) * (size_t)N * D);
    if (c->moe[l]) {
      moe_backward(gm, l, gm->dres, dh2);
    } else {
      int Id = c->inter;
      lt_gpu_swiglu_forward(g, gm->act, gm->gt[l], gm->up[l], (size_t)N * Id);
      lt_gpu_zero(g, gm->dact, sizeof(float) * (size_t)N * Id);
      lt_gpu_linear_backward(g, gm->dact, G->w_down, gm->dres, gm->act, W->w_down, N, Id, D);
      lt_gpu_swiglu_backward(g, gm->dg, gm->du, gm->dact, gm->gt[l], gm->up[l], (size_t)N * Id);
      lt_gpu_linear_backward(g, dh2, G->w_gate, gm->dg, gm->h2[l], W->w_gate, N, D, Id);
      lt_gpu_linear_backward(g, dh2, G->w_up, gm->du, gm->h2[l], W->w_up, N, D, Id);
    }
    copy_d(gm, gm->dx2, gm->dres, (size_t)N * D);
    lt_gpu_rmsnorm_backward(g, gm->dx2, G->ln2, dh2, gm->x2[l], W->ln2, gm->r2[l], N, D);
    copy_d(gm, gm->dres, gm->dx2, (size_t)N * D);
    lt_gpu_zero(g, gm->datt, sizeof(float) * (size_t)N * Hq);
    lt_gpu_linear_backward(g, gm->datt, G->wo, gm->dx2, gm->att[l], W->wo, N, Hq, D);
    lt_gpu_zero(g, gm->dk, sizeof(float) * (size_t)N * Hk);
    lt_gpu_zero(g, gm->dv, sizeof(float) * (size_t)N * Hk);
    for (int s = 0; s < gm->nseq; s++) {
      int off = gm->start[s], T = gm->start[s + 1] - off;
      size_t oq = (size_t)off * Hq, ok = (size_t)off * Hk;
      lt_gpu_attention_backward(g, gm->dq + oq, gm->dk + ok, gm->dv + ok, gm->datt + oq, gm->att[l] + oq,
                                gm->lse[l] + (size_t)off * H, gm->q[l] + oq, gm->k[l] + ok, gm->v[l] + ok, T, T, H, KV, hd,
                                c->sliding[l] ? c->window : 0);
    }
    lt_gpu_rope_apply(g, gm->dq, gm->pos, N, H, hd, gm->rope_cos, gm->rope_sin, 1);
    lt_gpu_rope_apply(g, gm->dk, gm->pos, N, KV, hd, gm->rope_cos, gm->rope_sin, 1);
    float *dqp = gm->datt;
    lt_gpu_zero(g, dqp, sizeof(float) * (size_t)N * Hq);
    lt_gpu_zero(g, gm->dkp, sizeof(float) * (size_t)N * Hk);
    lt_gpu_rmsnorm_backward(g, dqp, G->qnorm, gm->dq, gm->qp[l], W->qnorm, gm->rq[l], N * H, hd);
    lt_gpu_rmsnorm_backward(g, gm->dkp, G->knorm, gm->dk, gm->kp[l], W->knorm, gm->rk[l], N * KV, hd);
    float *dh1 = gm->dh;
    lt_gpu_zero(g, dh1, sizeof(float) * (size_t)N * D);
    lt_gpu_linear_backward(g, dh1, G->wq, dqp, gm->h1[l], W->wq, N, D, Hq);
    lt_gpu_linear_backward(g, dh1, G->wk, gm->dkp, gm->h1[l], W->wk, N, D, Hk);
    lt_gpu_linear_backward(g, dh1, G->wv, gm->dv, gm->h1[l], W->wv, N, D, Hk);
    lt_gpu_rmsnorm_backward(g, gm->dres, G->ln1, dh1, gm->x[l], W->ln1, gm->r1[l], N, D);
  }
  embed_bwd<<<lt__blocks(D, 128), 128, 0, g->stream>>>(gm->gw.embed, gm->dres, gm->tok, N, D);
  LT_LAUNCHED();
  return 0;
}

void lt_gpu_model_zero_grad(lt_gpu_model_t *gm) { lt_gpu_zero(gm->g, gm->grads, sizeof(float) * gm->host->nparams); }

int lt_gpu_model_step(lt_gpu_model_t *gm, const lt_optim_cfg_t *c, int64_t step, double *gnorm, double *lr) {
  /* An empty shard (more ranks than tensors to share) has no moments and updates nothing. */
  return lt_gpu_adamw_step(gm->g, c, gm->host, gm->params, gm->grads, gm->mom, gm->vel, gm->mlo, gm->mhi, step, gnorm, lr);
}

void lt_gpu_model_moments(lt_gpu_model_t *gm, float *m, float *v, int to_device) {
  size_t bytes = sizeof(float) * (gm->mhi - gm->mlo);
  if (!bytes) return;
  if (to_device) {
    lt_gpu_upload(gm->g, gm->mom, m, bytes);
    lt_gpu_upload(gm->g, gm->vel, v, bytes);
  } else {
    lt_gpu_download(gm->g, m, gm->mom, bytes);
    lt_gpu_download(gm->g, v, gm->vel, bytes);
  }
}

float *lt_gpu_model_grads(lt_gpu_model_t *gm) { return gm->grads; }
float *lt_gpu_model_params(lt_gpu_model_t *gm) { return gm->params; }

void lt_gpu_model_download(lt_gpu_model_t *gm, float *params, float *grads) {
  size_t bytes = sizeof(float) * gm->host->nparams;
  if (params) lt_gpu_download(gm->g, params, gm->params, bytes);
  if (grads) lt_gpu_download(gm->g, grads, gm->grads, bytes);
}
