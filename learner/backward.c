/* The backward pass of the last training forward, accumulating into m->grads. */
#include <math.h>
#include <string.h>

#include "learner/internal.h"
#include "learner/ops.h"
#include "util/error.h"

/* dL/dhf from the policy head: recomputes each chunk's logits and softmax. */
static void policy_head_backward(lt_model_t *m, lt_acts_t *a, const float *dlogprobs, float *dhf) {
  const lt_model_config_t *c = &m->cfg;
  const lt_batch_t *b = &m->last;
  int N = a->N, D = c->hidden, V = c->vocab;
  size_t off = 0; /* as in the forward's policy_head */
  for (int r0 = 0; r0 < N; r0 += LT_HEAD_CHUNK) {
    int n = N - r0 < LT_HEAD_CHUNK ? N - r0 : LT_HEAD_CHUNK;
    int any = 0;
    for (int i = 0; i < n; i++) any |= !a->last[r0 + i] && dlogprobs[r0 + i + 1] != 0.0f;
    if (!any) {
      if (b->support)
        for (int i = 0; i < n; i++) off += (size_t)b->support[r0 + i];
      continue;
    }
    float *lg = a->head_scratch;
    const float *h = a->hf + (size_t)r0 * D;
    lt_linear_forward(lg, h, m->w.head, n, D, V);
    for (int i = 0; i < n; i++) {
      int r = r0 + i;
      if (b->support) off += (size_t)b->support[r];
      float *z = lg + (size_t)i * V;
      float g = a->last[r] ? 0.0f : dlogprobs[r + 1];
      if (g == 0.0f) {
        memset(z, 0, sizeof(float) * V);
        continue;
      }
      /* logp(t) = z_t/T − lse(z/T) over the kept set (all logits, or the
       * Keep-Sampling-Mask ids):  d logp(t) / d z_j = (1[j = t] − p_j) / T. */
      float lse = a->head_lse[r], it = 1.0f / lt__head_temperature(b, r + 1), gt = g * it;
      int t = a->tok[r + 1], s = b->support ? b->support[r + 1] : 0;
      if (s > 0) {
        const int32_t *ids = b->support_ids + off;
        lt__head_mark(a->head_sel, ids, s, t, 1.0f);
        for (int j = 0; j < V; j++) z[j] = a->head_sel[j] != 0.0f ? -gt * expf(z[j] * it - lse) : 0.0f;
        lt__head_mark(a->head_sel, ids, s, t, 0.0f);
      } else {
        for (int j = 0; j < V; j++) z[j] = -gt * expf(z[j] * it - lse);
      }
      z[t] += gt;
    }
    lt_linear_backward(dhf + (size_t)r0 * D, m->g.head, lg, h, m->w.head, n, D, V);
  }
}

static void moe_backward(lt_model_t *m, lt_acts_t *a, int l, const float *dout, float *dh2) {
  const lt_model_config_t *c = &m->cfg;
  const lt_layer_w_t *W = &m->w.layer[l], *G = &m->g.layer[l];
  int N = a->N, D = c->hidden, E = c->experts, K = c->topk, Im = c->moe_inter;
  const float *h2 = a->h2[l], *y = a->y[l], *wts = a->wts[l], *probs = a->probs[l];
  const uint16_t *ids = a->ids[l];
  const int *perm = a->perm[l], *eoff = a->eoff[l];
  /* Combine: xout[t] += w · y[r]  ⇒  dy[r] = w · dout[t],  dw = dout[t] · y[r]. */
  for (int r = 0; r < N * K; r++) {
    int t = perm[r] / K;
    float w = wts[perm[r]];
    const float *d = dout + (size_t)t * D, *yr = y + (size_t)r * D;
    float *dyr = a->dy + (size_t)r * D;
    float s = 0;
    for (int i = 0; i < D; i++) {
      dyr[i] = w * d[i];
      s += d[i] * yr[i];
    }
    a->dw[perm[r]] = s;
  }
  for (int e = 0; e < E; e++) {
    int r0 = eoff[e], ne = eoff[e + 1] - r0;
    if (!ne) continue;
    const float *g = a->g[l] + (size_t)r0 * Im, *u = a->u[l] + (size_t)r0 * Im;
    float *act = a->act + (size_t)r0 * Im, *dact = a->dact + (size_t)r0 * Im;
    float *dg = a->dg + (size_t)r0 * Im, *du = a->du + (size_t)r0 * Im;
    float *xe = a->xe + (size_t)r0 * D, *dxe = a->dxe + (size_t)r0 * D;
    lt_swiglu_forward(act, g, u, ne * Im);
    memset(dact, 0, sizeof(float) * (size_t)ne * Im);
    lt__proj_backward(m, l, LT_PROJ_DOWN, e, dact, a->dy + (size_t)r0 * D, act, ne);
    lt_swiglu_backward(dg, du, dact, g, u, ne * Im);
    for (int r = r0; r < r0 + ne; r++) memcpy(a->xe + (size_t)r * D, h2 + (size_t)(perm[r] / K) * D, sizeof(float) * D);
    memset(dxe, 0, sizeof(float) * (size_t)ne * D);
    lt__proj_backward(m, l, LT_PROJ_GATE, e, dxe, dg, xe, ne);
    lt__proj_backward(m, l, LT_PROJ_UP, e, dxe, du, xe, ne);
    for (int r = r0; r < r0 + ne; r++) {
      float *d = dh2 + (size_t)(perm[r] / K) * D;
      const float *s = a->dxe + (size_t)r * D;
      for (int i = 0; i < D; i++) d[i] += s[i];
    }
  }
  for (int t = 0; t < N; t++)
    lt_router_backward(a->rlogits + (size_t)t * E, probs + (size_t)t * E, ids + (size_t)t * K, a->dw + (size_t)t * K, E,
                       K, c->norm_topk);
  lt_linear_backward(dh2, G->router, a->rlogits, h2, W->router, N, D, E);
}

int lt_model_backward(lt_model_t *m, const float *dlogprobs, const float *dvalues) {
  lt_acts_t *a = m->acts;
  if (!a || !lt_model_trainable(m).grads)
    return lt_error_set(LT_EINVAL, "backward: no training forward to differentiate");
  const lt_model_config_t *c = &m->cfg;
  int N = a->N, D = c->hidden, H = c->heads, KV = c->kv_heads, hd = c->head_dim, L = c->layers;
  int Hq = H * hd, Hk = KV * hd;
  /* Head → dL/dhf (kept in dh), then the final norm → residual gradient dres. */
  float *dhf = a->dh;
  memset(dhf, 0, sizeof(float) * (size_t)N * D);
  if (c->critic) {
    if (dvalues)
      for (int r = 0; r < N; r++) {
        const float *h = a->hf + (size_t)r * D;
        float *d = dhf + (size_t)r * D;
        for (int i = 0; i < D; i++) {
          d[i] += dvalues[r] * m->w.head[i];
          m->g.head[i] += dvalues[r] * h[i]; /* trained under an adapter too (learner/lora.h) */
        }
      }
  } else if (dlogprobs) {
    policy_head_backward(m, a, dlogprobs, dhf);
  }
  memset(a->dres, 0, sizeof(float) * (size_t)N * D);
  lt_rmsnorm_backward(a->dres, m->g.norm, dhf, a->x[L], m->w.norm, a->rf, N, D);

  for (int l = L - 1; l >= 0; l--) {
    const lt_layer_w_t *W = &m->w.layer[l], *G = &m->g.layer[l];
    /* MLP: xout = x2 + mlp(ln2(x2)). dres holds dL/dxout. */
    float *dh2 = a->dh;
    memset(dh2, 0, sizeof(float) * (size_t)N * D);
    if (c->moe[l]) {
      moe_backward(m, a, l, a->dres, dh2);
    } else {
      int Id = c->inter;
      lt_swiglu_forward(a->act, a->g[l], a->u[l], N * Id);
      memset(a->dact, 0, sizeof(float) * (size_t)N * Id);
      lt__proj_backward(m, l, LT_PROJ_DOWN, 0, a->dact, a->dres, a->act, N);
      lt_swiglu_backward(a->dg, a->du, a->dact, a->g[l], a->u[l], N * Id);
      lt__proj_backward(m, l, LT_PROJ_GATE, 0, dh2, a->dg, a->h2[l], N);
      lt__proj_backward(m, l, LT_PROJ_UP, 0, dh2, a->du, a->h2[l], N);
    }
    float *dx2 = a->dx2;
    memcpy(dx2, a->dres, sizeof(float) * (size_t)N * D);
    lt_rmsnorm_backward(dx2, G->ln2, dh2, a->x2[l], W->ln2, a->r2[l], N, D);

    /* Attention: x2 = xin + att · Woᵀ. */
    memcpy(a->dres, dx2, sizeof(float) * (size_t)N * D);
    memset(a->datt, 0, sizeof(float) * (size_t)N * Hq);
    lt__proj_backward(m, l, LT_PROJ_O, 0, a->datt, dx2, a->att[l], N);
    memset(a->dk, 0, sizeof(float) * (size_t)N * Hk);
    memset(a->dv, 0, sizeof(float) * (size_t)N * Hk);
    for (int s = 0; s < m->last.nseq; s++) {
      int off = m->last.start[s], T = m->last.start[s + 1] - off;
      size_t oq = (size_t)off * Hq, ok = (size_t)off * Hk;
      lt_attention_backward(a->dq + oq, a->dk + ok, a->dv + ok, a->datt + oq, a->att[l] + oq,
                            a->lse[l] + (size_t)off * H, a->q[l] + oq, a->k[l] + ok, a->v[l] + ok, T, T, H, KV, hd,
                            c->sliding[l] ? c->window : 0, a->attn_scratch);
    }
    lt_rope_apply(a->dq, a->pos, N, H, hd, m->rope_cos, m->rope_sin, 1);
    lt_rope_apply(a->dk, a->pos, N, KV, hd, m->rope_cos, m->rope_sin, 1);
    float *dqp = a->datt; /* consumed above */
    memset(dqp, 0, sizeof(float) * (size_t)N * Hq);
    memset(a->dkp, 0, sizeof(float) * (size_t)N * Hk);
    lt_rmsnorm_backward(dqp, G->qnorm, a->dq, a->qp[l], W->qnorm, a->rq[l], N * H, hd);
    lt_rmsnorm_backward(a->dkp, G->knorm, a->dk, a->kp[l], W->knorm, a->rk[l], N * KV, hd);
    float *dh1 = a->dh;
    memset(dh1, 0, sizeof(float) * (size_t)N * D);
    lt__proj_backward(m, l, LT_PROJ_Q, 0, dh1, dqp, a->h1[l], N);
    lt__proj_backward(m, l, LT_PROJ_K, 0, dh1, a->dkp, a->h1[l], N);
    lt__proj_backward(m, l, LT_PROJ_V, 0, dh1, a->dv, a->h1[l], N);
    lt_rmsnorm_backward(a->dres, G->ln1, dh1, a->x[l], W->ln1, a->r1[l], N, D);
  }
  for (int r = 0; r < N && m->g.embed; r++) { /* a frozen base (an adapter) has none */
    float *d = m->g.embed + (size_t)a->tok[r] * D;
    const float *s = a->dres + (size_t)r * D;
    for (int i = 0; i < D; i++) d[i] += s[i];
  }
  return 0;
}
