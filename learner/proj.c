/* The projections of a layer's matrices (q_proj ... down_proj, an expert's in a MoE layer): the one forward/backward
 * pair every such matrix product of the learner and the builtin engine goes through. */
#include "learner/internal.h"
#include "learner/ops.h"

void lt__proj_shape(const lt_model_config_t *c, int l, lt__proj p, int *in, int *out) {
  int D = c->hidden, Hq = c->heads * c->head_dim, Hk = c->kv_heads * c->head_dim;
  int I = c->moe[l] ? c->moe_inter : c->inter;
  int other = p == LT_PROJ_Q || p == LT_PROJ_O ? Hq : p == LT_PROJ_K || p == LT_PROJ_V ? Hk : I;
  int to_d = p == LT_PROJ_O || p == LT_PROJ_DOWN; /* the residual branches: D is their output */
  *in = to_d ? other : D;
  *out = to_d ? D : other;
}

/* Projection p's matrix among a layer's views (of the parameters or the gradients), expert e's in a MoE layer. */
static float *proj_matrix(const lt_model_t *m, const lt_layer_w_t *L, int l, lt__proj p, int e) {
  float *const w[LT_PROJ_N] = {L->wq, L->wk, L->wv, L->wo, L->w_gate, L->w_up, L->w_down};
  int in, out;
  lt__proj_shape(&m->cfg, l, p, &in, &out);
  return w[p] + (size_t)e * (size_t)in * (size_t)out;
}

void lt__proj_forward(const lt_model_t *m, int l, lt__proj p, int e, float *y, const float *x, int N, int acc) {
  int in, out;
  lt__proj_shape(&m->cfg, l, p, &in, &out);
  const float *W = proj_matrix(m, &m->w.layer[l], l, p, e);
  if (acc) lt_linear_forward_acc(y, x, W, N, in, out);
  else lt_linear_forward(y, x, W, N, in, out);
}

void lt__proj_backward(lt_model_t *m, int l, lt__proj p, int e, float *dx, const float *dy, const float *x, int N) {
  int in, out;
  lt__proj_shape(&m->cfg, l, p, &in, &out);
  float *dW = m->grads ? proj_matrix(m, &m->g.layer[l], l, p, e) : NULL;
  lt_linear_backward(dx, dW, dy, x, proj_matrix(m, &m->w.layer[l], l, p, e), N, in, out);
}
