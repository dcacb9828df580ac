/* The projections of a layer's matrices (q_proj ... down_proj, an expert's in a MoE layer): the one forward/backward
 * pair every such matrix product of the learner and the builtin engine goes through, the base's and, when the model
 * has one, its adapter's (learner/lora.c). */
#include "learner/internal.h"
#include "learner/lora.h"
#include "learner/ops.h"

void lt__proj_shape(const lt_model_config_t *c, int l, lt__proj p, int *in, int *out) {
  int D = c->hidden, Hq = c->heads * c->head_dim, Hk = c->kv_heads * c->head_dim;
  int I = c->moe[l] ? c->moe_inter : c->inter;
  int other = p == LT_PROJ_Q || p == LT_PROJ_O ? Hq : p == LT_PROJ_K || p == LT_PROJ_V ? Hk : I;
  int to_d = p == LT_PROJ_O || p == LT_PROJ_DOWN; /* the residual branches: D is their output */
  *in = to_d ? other : D;
  *out = to_d ? D : other;
}

float *lt__proj_matrix(const lt_model_t *m, const lt_layer_w_t *L, int l, lt__proj p, int e) {
  float *const w[LT_PROJ_N] = {L->wq, L->wk, L->wv, L->wo, L->w_gate, L->w_up, L->w_down};
  int in, out;
  lt__proj_shape(&m->cfg, l, p, &in, &out);
  return w[p] + (size_t)e * (size_t)in * (size_t)out;
}

void lt__proj_forward(const lt_model_t *m, int l, lt__proj p, int e, float *y, const float *x, int N, int acc) {
  int in, out;
  lt__proj_shape(&m->cfg, l, p, &in, &out);
  const float *W = lt__proj_matrix(m, &m->w.layer[l], l, p, e);
  if (acc) lt_linear_forward_acc(y, x, W, N, in, out);
  else lt_linear_forward(y, x, W, N, in, out);
  if (m->lora) lt_lora_forward(m->lora, l, p, e, y, x, N, in, out);
}

void lt__proj_backward(lt_model_t *m, int l, lt__proj p, int e, float *dx, const float *dy, const float *x, int N) {
  int in, out;
  lt__proj_shape(&m->cfg, l, p, &in, &out);
  /* A model with an adapter keeps no gradient of its base (frozen). */
  float *dW = m->grads ? lt__proj_matrix(m, &m->g.layer[l], l, p, e) : NULL;
  if (m->lora) lt_lora_backward(m->lora, l, p, e, dx, dy, x, N, in, out);
  lt_linear_backward(dx, dW, dy, x, lt__proj_matrix(m, &m->w.layer[l], l, p, e), N, in, out);
}
