/* Finite-difference checks of every op and of the whole model. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "learner/lora.h"
#include "learner/model.h"
#include "learner/ops.h"
#include "util/error.h"
#include "util/rng.h"

static void fill(float *x, int n, lt_rng_t *r, float scale) {
  for (int i = 0; i < n; i++) x[i] = (float)(scale * lt_rng_normal(r));
}

static double wdot(const float *a, const float *w, int n) {
  double s = 0;
  for (int i = 0; i < n; i++) s += (double)a[i] * w[i];
  return s;
}

/* Relative agreement of an analytic and a numerical derivative. */
static void expect_close(double an, double fd, double rtol, double atol, const char *what, int i) {
  cr_expect(fabs(an - fd) <= atol + rtol * fmax(fabs(an), fabs(fd)), "%s[%d]: analytic %.6g vs numeric %.6g", what, i,
            an, fd);
}

Test(learner_grad, rmsnorm) {
  lt_rng_t r;
  lt_rng_seed(&r, 1);
  enum { N = 3, D = 8 };
  float x[N * D], w[D], y[N * D], rstd[N], wy[N * D], dx[N * D] = {0}, dw[D] = {0};
  fill(x, N * D, &r, 1);
  fill(w, D, &r, 1);
  fill(wy, N * D, &r, 1);
  lt_rmsnorm_forward(y, rstd, x, w, N, D, 1e-6f);
  lt_rmsnorm_backward(dx, dw, wy, x, w, rstd, N, D);
  const float h = 1e-3f;
  for (int i = 0; i < N * D; i++) {
    float s = x[i];
    x[i] = s + h;
    lt_rmsnorm_forward(y, rstd, x, w, N, D, 1e-6f);
    double p = wdot(y, wy, N * D);
    x[i] = s - h;
    lt_rmsnorm_forward(y, rstd, x, w, N, D, 1e-6f);
    double m = wdot(y, wy, N * D);
    x[i] = s;
    expect_close(dx[i], (p - m) / (2 * h), 1e-2, 1e-3, "dx", i);
  }
  for (int i = 0; i < D; i++) {
    float s = w[i];
    w[i] = s + h;
    lt_rmsnorm_forward(y, rstd, x, w, N, D, 1e-6f);
    double p = wdot(y, wy, N * D);
    w[i] = s - h;
    lt_rmsnorm_forward(y, rstd, x, w, N, D, 1e-6f);
    double m = wdot(y, wy, N * D);
    w[i] = s;
    expect_close(dw[i], (p - m) / (2 * h), 1e-2, 1e-3, "dw", i);
  }
}

Test(learner_grad, rope_is_orthogonal_and_inverse) {
  enum { N = 4, H = 2, HD = 8, MAXP = 16 };
  float cosv[MAXP * HD / 2], sinv[MAXP * HD / 2];
  for (int p = 0; p < MAXP; p++)
    for (int i = 0; i < HD / 2; i++) {
      float ang = p * powf(10000.0f, -2.0f * i / HD);
      cosv[p * HD / 2 + i] = cosf(ang);
      sinv[p * HD / 2 + i] = sinf(ang);
    }
  int pos[N] = {0, 3, 7, 15};
  lt_rng_t r;
  lt_rng_seed(&r, 2);
  float x[N * H * HD], y[N * H * HD];
  fill(x, N * H * HD, &r, 1);
  memcpy(y, x, sizeof x);
  lt_rope_apply(y, pos, N, H, HD, cosv, sinv, 0);
  /* Norms are preserved, position 0 is the identity, and the inverse undoes it. */
  for (int n = 0; n < N * H; n++) {
    double a = 0, b = 0;
    for (int i = 0; i < HD; i++) {
      a += x[n * HD + i] * x[n * HD + i];
      b += y[n * HD + i] * y[n * HD + i];
    }
    cr_expect_float_eq(a, b, 1e-4 * a);
  }
  for (int i = 0; i < H * HD; i++) cr_expect_float_eq(y[i], x[i], 1e-7);
  lt_rope_apply(y, pos, N, H, HD, cosv, sinv, 1);
  for (int i = 0; i < N * H * HD; i++) cr_expect_float_eq(y[i], x[i], 1e-5);
  /* Rotate-half convention: first half pairs with second half. */
  float e[HD] = {1, 0, 0, 0, 0, 0, 0, 0};
  int p1 = 1;
  lt_rope_apply(e, &p1, 1, 1, HD, cosv, sinv, 0);
  cr_expect_float_eq(e[0], cosf(1.0f), 1e-6);
  cr_expect_float_eq(e[HD / 2], sinf(1.0f), 1e-6);
}

Test(learner_grad, swiglu) {
  lt_rng_t r;
  lt_rng_seed(&r, 3);
  enum { N = 16 };
  float g[N], u[N], h[N], dh[N], dg[N], du[N];
  fill(g, N, &r, 2);
  fill(u, N, &r, 1);
  fill(dh, N, &r, 1);
  lt_swiglu_backward(dg, du, dh, g, u, N);
  const float e = 1e-3f;
  for (int i = 0; i < N; i++) {
    float s = g[i];
    g[i] = s + e;
    lt_swiglu_forward(h, g, u, N);
    double p = wdot(h, dh, N);
    g[i] = s - e;
    lt_swiglu_forward(h, g, u, N);
    double m = wdot(h, dh, N);
    g[i] = s;
    expect_close(dg[i], (p - m) / (2 * e), 1e-2, 1e-4, "dg", i);
    s = u[i];
    u[i] = s + e;
    lt_swiglu_forward(h, g, u, N);
    p = wdot(h, dh, N);
    u[i] = s - e;
    lt_swiglu_forward(h, g, u, N);
    m = wdot(h, dh, N);
    u[i] = s;
    expect_close(du[i], (p - m) / (2 * e), 1e-2, 1e-4, "du", i);
  }
}

static void attention_fd(int T, int S, int H, int KV, int window) {
  int hd = 8;
  lt_rng_t r;
  lt_rng_seed(&r, (uint64_t)(T * 131 + S * 7 + window));
  int nq = T * H * hd, nk = S * KV * hd;
  float *q = malloc(sizeof(float) * nq), *k = malloc(sizeof(float) * nk), *v = malloc(sizeof(float) * nk);
  float *o = malloc(sizeof(float) * nq), *w = malloc(sizeof(float) * nq), *lse = malloc(sizeof(float) * T * H);
  float *dq = malloc(sizeof(float) * nq), *dk = calloc(nk, sizeof(float)), *dv = calloc(nk, sizeof(float));
  float *scratch = malloc(sizeof(float) * LT_ATT_SCRATCH(S));
  fill(q, nq, &r, 1);
  fill(k, nk, &r, 1);
  fill(v, nk, &r, 1);
  fill(w, nq, &r, 1);
  lt_attention_forward(o, lse, q, k, v, T, S, H, KV, hd, window, scratch);
  lt_attention_backward(dq, dk, dv, w, o, lse, q, k, v, T, S, H, KV, hd, window, scratch);
  const float e = 1e-2f; /* smooth in q, k, v: a larger step keeps float rounding small */
  float *arrs[3] = {q, k, v}, *grads[3] = {dq, dk, dv};
  int ns[3] = {nq, nk, nk};
  const char *names[3] = {"dq", "dk", "dv"};
  for (int a = 0; a < 3; a++)
    for (int i = 0; i < ns[a]; i++) {
      float s = arrs[a][i];
      arrs[a][i] = s + e;
      lt_attention_forward(o, NULL, q, k, v, T, S, H, KV, hd, window, scratch);
      double p = wdot(o, w, nq);
      arrs[a][i] = s - e;
      lt_attention_forward(o, NULL, q, k, v, T, S, H, KV, hd, window, scratch);
      double m = wdot(o, w, nq);
      arrs[a][i] = s;
      expect_close(grads[a][i], (p - m) / (2 * e), 2e-2, 1e-4, names[a], i);
    }
  free(q), free(k), free(v), free(o), free(w), free(lse), free(dq), free(dk), free(dv), free(scratch);
}

Test(learner_grad, attention_causal_gqa) { attention_fd(6, 6, 4, 2, 0); }
Test(learner_grad, attention_sliding_window) { attention_fd(7, 7, 2, 1, 3); }
Test(learner_grad, attention_with_cache_prefix) { attention_fd(3, 8, 2, 2, 0); }

Test(learner_grad, attention_masks_future_and_window) {
  /* With v = position one-hot, the output is the attention distribution itself. */
  enum { T = 5, HD = 8 };
  float q[T * HD] = {0}, k[T * HD] = {0}, v[T * HD] = {0}, o[T * HD], scratch[LT_ATT_SCRATCH(T)];
  for (int j = 0; j < T; j++) v[j * HD + j] = 1;
  lt_attention_forward(o, NULL, q, k, v, T, T, 1, 1, HD, 2, scratch);
  for (int i = 0; i < T; i++)
    for (int j = 0; j < T; j++) {
      float want = (j <= i && i - j < 2) ? (i == 0 ? 1.0f : 0.5f) : 0.0f;
      cr_expect_float_eq(o[i * HD + j], want, 1e-6, "query %d key %d", i, j);
    }
}

Test(learner_grad, router_topk_and_backward) {
  enum { E = 6, K = 2 };
  float logits[E] = {0.1f, 2.0f, -1.0f, 1.5f, 0.3f, 1.5f}, probs[E], w[K];
  uint16_t ids[K];
  float mass = lt_router_forward(probs, ids, w, logits, E, K, 1, NULL);
  cr_expect_eq(ids[0], 1);
  cr_expect_eq(ids[1], 3, "ties go to the lower index");
  cr_expect_float_eq(mass, probs[1] + probs[3], 1e-7);
  cr_expect_float_eq(w[0] + w[1], 1.0f, 1e-6);
  uint16_t forced[K] = {4, 0};
  float conf = lt_router_forward(probs, ids, w, logits, E, K, 0, forced);
  cr_expect_eq(ids[0], 4);
  cr_expect_float_eq(w[0], probs[4], 1e-7);
  cr_expect_float_eq(
      conf, probs[4] + probs[0], 1e-7,
      "under Keep Routing the confidence is the router's mass on the replayed experts, not its own top-k");
  for (int norm = 0; norm < 2; norm++) {
    float dw[K] = {0.7f, -1.3f}, dl[E];
    lt_router_forward(probs, ids, w, logits, E, K, norm, NULL);
    lt_router_backward(dl, probs, ids, dw, E, K, norm);
    const float e = 1e-3f;
    for (int i = 0; i < E; i++) {
      float s = logits[i];
      uint16_t id2[K];
      logits[i] = s + e;
      lt_router_forward(probs, id2, w, logits, E, K, norm, ids);
      double p = wdot(w, dw, K);
      logits[i] = s - e;
      lt_router_forward(probs, id2, w, logits, E, K, norm, ids);
      double m = wdot(w, dw, K);
      logits[i] = s;
      expect_close(dl[i], (p - m) / (2 * e), 1e-2, 5e-5, norm ? "dlogits(norm)" : "dlogits", i);
    }
  }
}

/* ---- whole model ---- */

static lt_model_t *tiny(int norm_topk, int tied, int critic) {
  char json[2048];
  snprintf(json, sizeof json,
           "{\"model_type\": \"qwen3_moe\", \"vocab_size\": 23, \"hidden_size\": 16, \"num_hidden_layers\": 3,"
           " \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"head_dim\": 8, \"intermediate_size\": 12,"
           " \"moe_intermediate_size\": 6, \"num_experts\": 4, \"num_experts_per_tok\": 2, \"norm_topk_prob\": %s,"
           " \"mlp_only_layers\": [1], \"max_position_embeddings\": 64, \"sliding_window\": 3,"
           " \"layer_types\": [\"full_attention\", \"sliding_attention\", \"full_attention\"],"
           " \"tie_word_embeddings\": %s, \"rms_norm_eps\": 1e-6}",
           norm_topk ? "true" : "false", tied ? "true" : "false");
  lt_model_config_t cfg;
  cr_assert_eq(lt_model_config_parse(json, strlen(json), "tiny", &cfg), 0);
  cfg.critic = critic;
  lt_model_t *m;
  cr_assert_eq(lt_model_create(&cfg, &m), 0);
  lt_model_init_random(m, 7, 0.35f);
  cr_assert_eq(lt_model_train_alloc(m, 64, 32), 0);
  return m;
}

static const int32_t toks[] = {1, 5, 7, 2, 9, 11, 3, 4, 22, 0, 13, 6};
static const int starts[] = {0, 7, 12};
/* Keep-sampling-mask supports of the tokens and their ids (NULL: full
 * softmax), and sampling temperatures (NULL: 1). */
static const int32_t *g_support, *g_support_ids;
static const float *g_temp;

/* The scalar the checks differentiate: Σ c_i · out_i in double.  With
 * route != NULL the experts are pinned (keep-routing), which keeps the
 * function smooth under perturbations that would flip a top-k choice. */
static double objective(lt_model_t *m, const float *c, int critic, const uint16_t *route) {
  lt_batch_t b = {.nseq = 2,
                  .start = starts,
                  .tokens = toks,
                  .route_ids = route,
                  .support = g_support,
                  .support_ids = g_support_ids,
                  .temperature = g_temp};
  lt_fwd_out_t o;
  cr_assert_eq(lt_model_forward(m, &b, &o), 0);
  const float *x = critic ? o.values : o.logprobs;
  double s = 0;
  for (int i = 0; i < 12; i++) s += (double)c[i] * x[i];
  return s;
}

/* The routing of the last forward as keep-routing ids [N][moe_layers][k]. */
static void capture_routing(const lt_model_t *m, uint16_t *route) {
  int K = m->cfg.topk, nml = lt_model_moe_layers(&m->cfg), ml = 0;
  for (int l = 0; l < m->cfg.layers; l++) {
    if (!m->cfg.moe[l]) continue;
    for (int t = 0; t < 12; t++)
      for (int j = 0; j < K; j++) route[((size_t)t * nml + ml) * K + j] = m->acts->ids[l][t * K + j];
    ml++;
  }
}

/* Per tensor, the directional derivative along a random direction: the
 * signal adds up over the whole tensor, so float rounding in the numerical
 * difference stays small against it. */
static void model_fd(int norm_topk, int tied, int critic) {
  lt_model_t *m = tiny(norm_topk, tied, critic);
  lt_rng_t r;
  lt_rng_seed(&r, 11);
  float c[12];
  fill(c, 12, &r, 1);
  uint16_t route[12 * 3 * 2];
  objective(m, c, critic, NULL);
  capture_routing(m, route);
  double base = objective(m, c, critic, NULL);
  cr_assert_float_eq(objective(m, c, critic, route), base, 1e-9, "pinning the model's own routing changes nothing");
  lt_model_zero_grad(m);
  cr_assert_eq(lt_model_backward(m, critic ? NULL : c, critic ? c : NULL), 0);
  const float e = 2e-3f; /* float rounding grows below, curvature above */
  float *dir = malloc(sizeof(float) * m->nparams), *saved = malloc(sizeof(float) * m->nparams);
  memcpy(saved, m->params, sizeof(float) * m->nparams);
  for (int t = 0; t < m->ntensors; t++) {
    const lt_tensor_t *tt = &m->tensors[t];
    size_t n = (size_t)tt->rows * tt->cols;
    fill(dir, (int)n, &r, 1);
    double an = 0;
    for (size_t i = 0; i < n; i++) an += (double)m->grads[tt->offset + i] * dir[i];
    for (size_t i = 0; i < n; i++) m->params[tt->offset + i] = saved[tt->offset + i] + e * dir[i];
    double p = objective(m, c, critic, route);
    for (size_t i = 0; i < n; i++) m->params[tt->offset + i] = saved[tt->offset + i] - e * dir[i];
    double q = objective(m, c, critic, route);
    memcpy(m->params + tt->offset, saved + tt->offset, sizeof(float) * n);
    expect_close(an, (p - q) / (2 * e), 1e-2, 5e-4, tt->name, t);
  }
  free(dir);
  free(saved);
  lt_model_free(m);
}

Test(learner_grad, whole_model_policy) { model_fd(1, 0, 0); }
Test(learner_grad, whole_model_policy_tied_no_norm_topk) { model_fd(0, 1, 0); }
Test(learner_grad, whole_model_critic) { model_fd(1, 0, 1); }

static const int32_t supports[12] = {0, 2, 6, 4, 0, 7, 0, 3, 23, 5, 9, 1};

/* Distinct ids per token ((7i + 5k) mod 23); some sets leave the token out. */
static int32_t *support_ids(void) {
  static int32_t ids[64];
  int n = 0;
  for (int i = 0; i < 12; i++)
    for (int k = 0; k < supports[i]; k++) ids[n++] = (7 * i + 5 * k) % 23;
  return ids;
}

static const float temps[12] = {1.0f, 0.6f, 0.7f, 1.3f, 0.0f, 0.5f, 2.0f, 0.9f, 0.8f, 1.0f, 0.6f, 0.75f};

Test(learner_grad, whole_model_keep_sampling_mask) {
  g_support = supports, g_support_ids = support_ids();
  model_fd(1, 0, 0);
  g_support = g_support_ids = NULL;
}

Test(learner_grad, whole_model_temperature) {
  g_temp = temps;
  model_fd(1, 0, 0);
  g_temp = NULL;
}

Test(learner_grad, whole_model_temperature_and_keep_sampling_mask) {
  g_support = supports, g_support_ids = support_ids(), g_temp = temps;
  model_fd(1, 0, 0);
  g_support = g_support_ids = NULL, g_temp = NULL;
}

/* The truncated softmax: the whole vocabulary as the set is the full softmax,
 * the set {token} gives probability 1, a smaller set never lowers a kept
 * token's probability, and temperature T divides the logits. */
Test(learner_grad, keep_sampling_mask_values) {
  lt_model_t *m = tiny(1, 0, 0);
  lt_batch_t b = {.nseq = 2, .start = starts, .tokens = toks};
  lt_fwd_out_t o;
  cr_assert_eq(lt_model_forward(m, &b, &o), 0);
  float full[12];
  memcpy(full, o.logprobs, sizeof full);
  int32_t sup[12], ids[12 * 23];
  for (int i = 0; i < 12; i++) {
    sup[i] = 23;
    for (int j = 0; j < 23; j++) ids[i * 23 + j] = j;
  }
  b.support = sup, b.support_ids = ids;
  cr_assert_eq(lt_model_forward(m, &b, &o), 0);
  for (int i = 0; i < 12; i++) cr_assert_float_eq(o.logprobs[i], full[i], 1e-6, "whole vocabulary at %d", i);
  for (int i = 0; i < 12; i++) sup[i] = 4;
  cr_assert_eq(lt_model_forward(m, &b, &o), 0);
  for (int i = 0; i < 12; i++) {
    cr_assert_leq(o.logprobs[i], 1e-6, "a probability at %d", i);
    cr_assert_geq(o.logprobs[i], full[i] - 1e-6, "renormalisation raises p at %d", i);
  }
  for (int i = 0; i < 12; i++) sup[i] = 1, ids[i] = toks[i];
  cr_assert_eq(lt_model_forward(m, &b, &o), 0);
  for (int i = 0; i < 12; i++) cr_assert_float_eq(o.logprobs[i], 0, 1e-6, "the set {token} at %d", i);
  ids[3] = 23;
  cr_assert_eq(lt_model_forward(m, &b, &o), LT_ERANGE, "an id outside the vocabulary is refused");
  /* T = 1 everywhere is the default; T → the logits divided by T. */
  float t1[12], t2[12];
  for (int i = 0; i < 12; i++) t1[i] = 1.0f, t2[i] = 0.5f;
  b = (lt_batch_t){.nseq = 2, .start = starts, .tokens = toks, .temperature = t1};
  cr_assert_eq(lt_model_forward(m, &b, &o), 0);
  for (int i = 0; i < 12; i++) cr_assert_float_eq(o.logprobs[i], full[i], 1e-6, "T = 1 at %d", i);
  b.temperature = t2;
  cr_assert_eq(lt_model_forward(m, &b, &o), 0);
  for (int i = 1; i < 12; i++)
    if (i != 7) cr_assert(fabsf(o.logprobs[i] - full[i]) > 1e-4f, "T = 0.5 changes the logprob at %d", i);
  lt_model_free(m);
}

/* ---- LoRA adapters (learner/lora.h) ---- */

/* The adapters' gradients by finite differences on the tiny model, whose layers 0 and 2 are MoE (the experts'
 * projections adapted) and layer 1 dense, every projection adapted: the base keeps no gradient (frozen), and each
 * adapter tensor's directional derivative matches.  B is random so that A's gradient is not zero. */
static void lora_fd(int critic) {
  lt_model_t *m = tiny(1, 0, critic);
  lt_lora_cfg_t lc = {.rank = 3, .alpha = 6, .targets = 0x7f, .init_seed = 5};
  lt_lora_t *l;
  cr_assert_eq(lt_lora_create(m, &lc, &l), 0, "%s", lt_error_msg());
  lt_rng_t r;
  lt_rng_seed(&r, 12);
  fill(l->params, (int)l->nparams, &r, 0.3f);
  lt_model_attach_lora(m, l);
  cr_assert_eq(lt_model_train_alloc(m, 64, 32), 0);
  cr_assert_null(m->grads, "the base keeps no gradient");
  float c[12];
  fill(c, 12, &r, 1);
  uint16_t route[12 * 3 * 2];
  objective(m, c, critic, NULL);
  capture_routing(m, route);
  lt_model_zero_grad(m);
  cr_assert_eq(lt_model_backward(m, critic ? NULL : c, critic ? c : NULL), 0, "%s", lt_error_msg());
  const float e = 1e-3f; /* a fourth-order difference: rounding and curvature both small */
  float *dir = malloc(sizeof(float) * l->nparams), *saved = malloc(sizeof(float) * l->nparams);
  memcpy(saved, l->params, sizeof(float) * l->nparams);
  for (int t = 0; t < l->ntensors; t++) {
    const lt_tensor_t *tt = &l->tensors[t];
    size_t n = (size_t)tt->rows * tt->cols;
    /* Along the gradient (scaled to unit RMS): a small gradient's signal stands above float rounding too. */
    double an = 0, f[4], g2 = 0;
    for (size_t i = 0; i < n; i++) g2 += (double)l->grads[tt->offset + i] * l->grads[tt->offset + i];
    if (g2 > 0)
      for (size_t i = 0; i < n; i++) dir[i] = (float)(l->grads[tt->offset + i] / sqrt(g2 / (double)n));
    else fill(dir, (int)n, &r, 1);
    for (size_t i = 0; i < n; i++) an += (double)l->grads[tt->offset + i] * dir[i];
    for (int k = 0; k < 4; k++) { /* at -2e, -e, +e, +2e */
      float h = e * (k < 2 ? k - 2 : k - 1);
      for (size_t i = 0; i < n; i++) l->params[tt->offset + i] = saved[tt->offset + i] + h * dir[i];
      f[k] = objective(m, c, critic, route);
    }
    memcpy(l->params + tt->offset, saved + tt->offset, sizeof(float) * n);
    /* An expert no token was routed to has none; every other module has one. */
    if (!strstr(tt->name, ".experts.")) cr_expect(an != 0, "%s: a zero gradient", tt->name);
    expect_close(an, (8 * (f[2] - f[1]) - (f[3] - f[0])) / (12 * e), 1e-2, 5e-4, tt->name, t);
  }
  free(dir);
  free(saved);
  lt_model_free(m);
}

Test(learner_grad, lora_adapters_dense_and_moe) { lora_fd(0); }
Test(learner_grad, lora_critic_adapters_and_score_head) { lora_fd(1); }
