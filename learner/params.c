/* The parameter buffer: tensor table, views, initialisation. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "learner/internal.h"
#include "learner/lora.h"
#include "util/error.h"
#include "util/rng.h"

typedef struct {
  lt_tensor_t *t;
  int n, cap;
  size_t off;
} table_t;

static int add_v(table_t *tb, int ndim, int rows, int cols, const char *fmt, va_list ap) {
  if (tb->n == tb->cap) {
    int cap = tb->cap ? tb->cap * 2 : 64;
    lt_tensor_t *nt = realloc(tb->t, sizeof *nt * (size_t)cap);
    if (!nt) return lt_error_set(LT_ENOMEM, "tensor table: out of memory");
    tb->t = nt;
    tb->cap = cap;
  }
  lt_tensor_t *t = &tb->t[tb->n++];
  vsnprintf(t->name, sizeof t->name, fmt, ap);
  t->ndim = ndim;
  t->rows = rows;
  t->cols = cols;
  t->offset = tb->off;
  tb->off += (size_t)rows * (size_t)cols;
  return 0;
}

/* A matrix [rows, cols]. */
static int add(table_t *tb, int rows, int cols, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int add(table_t *tb, int rows, int cols, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int rc = add_v(tb, 2, rows, cols, fmt, ap);
  va_end(ap);
  return rc;
}

/* A vector [n] (norm weights). */
static int vec(table_t *tb, int n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int vec(table_t *tb, int n, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int rc = add_v(tb, 1, 1, n, fmt, ap);
  va_end(ap);
  return rc;
}

/* Builds the table in a fixed order; each expert group of a layer is
 * contiguous so kernels can index expert e at base + e * size. */
static int build_table(const lt_model_config_t *c, table_t *tb) {
  int D = c->hidden, hd = c->head_dim, H = c->heads, KV = c->kv_heads;
  int rc = add(tb, c->vocab, D, "model.embed_tokens.weight");
  for (int l = 0; l < c->layers && rc == 0; l++) {
    const char *p = "model.layers";
    rc = vec(tb, D, "%s.%d.input_layernorm.weight", p, l);
    if (!rc) rc = add(tb, H * hd, D, "%s.%d.self_attn.q_proj.weight", p, l);
    if (!rc) rc = add(tb, KV * hd, D, "%s.%d.self_attn.k_proj.weight", p, l);
    if (!rc) rc = add(tb, KV * hd, D, "%s.%d.self_attn.v_proj.weight", p, l);
    if (!rc) rc = add(tb, D, H * hd, "%s.%d.self_attn.o_proj.weight", p, l);
    if (!rc) rc = vec(tb, hd, "%s.%d.self_attn.q_norm.weight", p, l);
    if (!rc) rc = vec(tb, hd, "%s.%d.self_attn.k_norm.weight", p, l);
    if (!rc) rc = vec(tb, D, "%s.%d.post_attention_layernorm.weight", p, l);
    if (rc) break;
    if (c->moe[l]) {
      int I = c->moe_inter;
      rc = add(tb, c->experts, D, "%s.%d.mlp.gate.weight", p, l);
      for (int e = 0; e < c->experts && !rc; e++) rc = add(tb, I, D, "%s.%d.mlp.experts.%d.gate_proj.weight", p, l, e);
      for (int e = 0; e < c->experts && !rc; e++) rc = add(tb, I, D, "%s.%d.mlp.experts.%d.up_proj.weight", p, l, e);
      for (int e = 0; e < c->experts && !rc; e++) rc = add(tb, D, I, "%s.%d.mlp.experts.%d.down_proj.weight", p, l, e);
    } else {
      rc = add(tb, c->inter, D, "%s.%d.mlp.gate_proj.weight", p, l);
      if (!rc) rc = add(tb, c->inter, D, "%s.%d.mlp.up_proj.weight", p, l);
      if (!rc) rc = add(tb, D, c->inter, "%s.%d.mlp.down_proj.weight", p, l);
    }
  }
  if (!rc) rc = vec(tb, D, "model.norm.weight");
  if (!rc && c->critic) rc = add(tb, 1, D, "score.weight");
  if (!rc && !c->critic && !c->tied) rc = add(tb, c->vocab, D, "lm_head.weight");
  return rc;
}

static float *at(float *base, const lt_model_t *m, const char *name) {
  const lt_tensor_t *t = lt_model_tensor(m, name);
  return t ? base + t->offset : NULL;
}

static void bind(const lt_model_t *m, float *base, lt_model_weights_t *w) {
  const lt_model_config_t *c = &m->cfg;
  char n[128];
  w->embed = at(base, m, "model.embed_tokens.weight");
  for (int l = 0; l < c->layers; l++) {
    lt_layer_w_t *L = &w->layer[l];
#define V(field, suffix)                                  \
  snprintf(n, sizeof n, "model.layers.%d.%s", l, suffix); \
  L->field = at(base, m, n);
    V(ln1, "input_layernorm.weight");
    V(wq, "self_attn.q_proj.weight");
    V(wk, "self_attn.k_proj.weight");
    V(wv, "self_attn.v_proj.weight");
    V(wo, "self_attn.o_proj.weight");
    V(qnorm, "self_attn.q_norm.weight");
    V(knorm, "self_attn.k_norm.weight");
    V(ln2, "post_attention_layernorm.weight");
    if (c->moe[l]) {
      V(router, "mlp.gate.weight");
      V(w_gate, "mlp.experts.0.gate_proj.weight");
      V(w_up, "mlp.experts.0.up_proj.weight");
      V(w_down, "mlp.experts.0.down_proj.weight");
    } else {
      L->router = NULL;
      V(w_gate, "mlp.gate_proj.weight");
      V(w_up, "mlp.up_proj.weight");
      V(w_down, "mlp.down_proj.weight");
    }
#undef V
  }
  w->norm = at(base, m, "model.norm.weight");
  w->head = c->critic ? at(base, m, "score.weight") : c->tied ? w->embed : at(base, m, "lm_head.weight");
}

const lt_tensor_t *lt_model_tensor(const lt_model_t *m, const char *name) {
  for (int i = 0; i < m->ntensors; i++)
    if (strcmp(m->tensors[i].name, name) == 0) return &m->tensors[i];
  return NULL;
}

int lt_tensor_is_router(const lt_tensor_t *t) {
  size_t n = strlen(t->name);
  return n > 16 && strcmp(t->name + n - 16, ".mlp.gate.weight") == 0;
}

static int rope_tables(lt_model_t *m) {
  const lt_model_config_t *c = &m->cfg;
  int half = c->head_dim / 2;
  size_t n = (size_t)c->max_pos * (size_t)half;
  m->rope_cos = malloc(sizeof(float) * n);
  m->rope_sin = malloc(sizeof(float) * n);
  if (!m->rope_cos || !m->rope_sin) return lt_error_set(LT_ENOMEM, "rope tables: out of memory");
  for (int i = 0; i < half; i++) {
    /* Computed like Hugging Face: inv_freq in fp32, angle = pos * inv_freq in fp32. */
    float inv = (float)(1.0 / pow((double)c->rope_theta, (double)(2 * i) / (double)c->head_dim));
    for (int p = 0; p < c->max_pos; p++) {
      float ang = (float)p * inv;
      m->rope_cos[(size_t)p * half + i] = cosf(ang);
      m->rope_sin[(size_t)p * half + i] = sinf(ang);
    }
  }
  return 0;
}

size_t lt_model_nparams(const lt_model_config_t *cfg) {
  table_t tb = {0};
  size_t n = build_table(cfg, &tb) < 0 ? 0 : tb.off;
  free(tb.t);
  return n;
}

int lt_model_create(const lt_model_config_t *cfg, lt_model_t **out) {
  *out = NULL;
  lt_model_t *m = calloc(1, sizeof *m);
  if (!m) return lt_error_set(LT_ENOMEM, "model: out of memory");
  m->cfg = *cfg;
  table_t tb = {0};
  int rc = build_table(cfg, &tb);
  if (rc < 0) {
    free(tb.t);
    free(m);
    return rc;
  }
  m->tensors = tb.t;
  m->ntensors = tb.n;
  m->nparams = tb.off;
  m->params = calloc(m->nparams, sizeof(float));
  if (!m->params) {
    lt_model_free(m);
    return lt_error_set(LT_ENOMEM, "model: cannot allocate %zu parameters", tb.off);
  }
  if ((rc = rope_tables(m)) < 0) {
    lt_model_free(m);
    return rc;
  }
  bind(m, m->params, &m->w);
  m->threads = 1;
  *out = m;
  return 0;
}

void lt_model_free(lt_model_t *m) {
  if (!m) return;
  lt_lora_free(m->lora);
  lt_acts_free(m->acts);
  free(m->params);
  free(m->grads);
  free(m->tensors);
  free(m->rope_cos);
  free(m->rope_sin);
  free(m);
}

void lt_model_init_random(lt_model_t *m, uint64_t seed, float std) {
  lt_rng_t r;
  lt_rng_seed(&r, seed);
  for (int i = 0; i < m->ntensors; i++) {
    const lt_tensor_t *t = &m->tensors[i];
    float *p = m->params + t->offset;
    size_t n = (size_t)t->rows * (size_t)t->cols;
    int is_norm = t->ndim == 1;
    for (size_t k = 0; k < n; k++) p[k] = is_norm ? 1.0f : (float)(std * lt_rng_normal(&r));
  }
}

int lt_model_make_critic(const lt_model_t *policy, lt_model_t **out) {
  lt_model_config_t c = policy->cfg;
  c.critic = 1;
  c.tied = 0;
  lt_model_t *m;
  int rc = lt_model_create(&c, &m);
  if (rc < 0) return rc;
  /* Same trunk: copy every tensor the critic shares with the policy. */
  for (int i = 0; i < m->ntensors; i++) {
    const lt_tensor_t *src = lt_model_tensor(policy, m->tensors[i].name);
    if (src)
      memcpy(m->params + m->tensors[i].offset, policy->params + src->offset,
             sizeof(float) * (size_t)src->rows * (size_t)src->cols);
  }
  m->threads = policy->threads;
  *out = m;
  return 0;
}

void lt__model_bind_grads(lt_model_t *m) { bind(m, m->grads, &m->g); }

lt_params_t lt_model_trainable(const lt_model_t *m) {
  const lt_lora_t *l = m->lora;
  if (l) return (lt_params_t){l->params, l->grads, l->nparams, l->tensors, l->ntensors};
  return (lt_params_t){m->params, m->grads, m->nparams, m->tensors, m->ntensors};
}
