/* Optimizers over the contiguous parameter buffer (learner/optim.h): AdamW and Muon, the learning-rate
 * schedule, gradient clipping. */
#include "learner/optim.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "learner/dist.h"
#include "learner/safetensors.h"
#include "util/error.h"

void lt_optim_cfg_default(lt_optim_cfg_t *c, lt_opt_kind kind) {
  memset(c, 0, sizeof *c);
  c->kind = kind;
  c->lr = 1e-3f;
  c->beta1 = 0.9f;
  c->beta2 = 0.95f;
  c->eps = 1e-8f;
  c->weight_decay = 0.1f;
  c->min_lr_ratio = 0.1f;
  c->grad_clip = 1.0f;
  c->muon_momentum = 0.95f;
  c->muon_steps = 5;
}

/* Muon updates hidden 2-D matrices; embeddings, the head (lm_head or score)
 * and routers stay with AdamW, as is usual for Muon. */
static int uses_muon(const lt_optim_cfg_t *c, const lt_tensor_t *t) {
  return c->kind == LT_OPT_MUON && t->ndim == 2 && strncmp(t->name, "model.layers.", 13) == 0 &&
         !lt_tensor_is_router(t);
}

int lt_optim_create(const lt_optim_cfg_t *cfg, const lt_model_t *m, lt_optim_t **out) {
  lt_params_t p = lt_model_trainable(m); /* an adapter's, when the model has one */
  *out = NULL;
  lt_optim_t *o = calloc(1, sizeof *o);
  if (!o) return lt_error_set(LT_ENOMEM, "optimizer: out of memory");
  o->cfg = *cfg;
  o->n = p.n;
  o->ntensors = p.ntensors;
  o->offsets = malloc(sizeof(size_t) * (size_t)(p.ntensors + 1));
  if (!o->offsets) {
    free(o);
    return lt_error_set(LT_ENOMEM, "optimizer: out of memory");
  }
  for (int i = 0; i < p.ntensors; i++) o->offsets[i] = p.tensors[i].offset;
  o->offsets[p.ntensors] = p.n;
  o->hi = p.n;
  lt_dist_shard(o->offsets, o->ntensors, lt_dist_rank(), lt_dist_size(), &o->lo, &o->hi);
  /* calloc(0) may return NULL: an empty shard still gets a valid pointer. */
  o->m = calloc(o->hi - o->lo + 1, sizeof(float));
  o->v = calloc(o->hi - o->lo + 1, sizeof(float));
  size_t big = 0;
  for (int i = 0; i < p.ntensors; i++) {
    const lt_tensor_t *t = &p.tensors[i];
    if (t->offset < o->lo || t->offset >= o->hi) continue;
    size_t mn = (size_t)(t->rows < t->cols ? t->rows : t->cols), mx = (size_t)(t->rows < t->cols ? t->cols : t->rows);
    size_t need = 3 * mn * mx + 2 * mn * mn;
    if (uses_muon(cfg, t) && need > big) big = need;
  }
  o->scratch_len = big;
  o->scratch = big ? malloc(sizeof(float) * big) : NULL;
  if (!o->m || !o->v || (big && !o->scratch)) {
    lt_optim_free(o);
    return lt_error_set(LT_ENOMEM, "optimizer state for %zu parameters: out of memory", p.n);
  }
  *out = o;
  return 0;
}

void lt_optim_free(lt_optim_t *o) {
  if (!o) return;
  free(o->m);
  free(o->v);
  free(o->scratch);
  free(o->offsets);
  free(o);
}

double lt_optim_lr(const lt_optim_cfg_t *c, int64_t step) {
  if (c->use_clock) step = c->clock;
  if (c->warmup > 0 && step < c->warmup) return c->lr * (double)(step + 1) / c->warmup;
  if (c->total <= 0) return c->lr;
  double p = (double)(step - c->warmup) / (double)c->total;
  if (p > 1) p = 1;
  double floor = c->min_lr_ratio;
  return c->lr * (floor + (1 - floor) * 0.5 * (1 + cos(M_PI * p)));
}

static int frozen(const lt_optim_t *o, const lt_tensor_t *t) { return o->cfg.freeze_router && lt_tensor_is_router(t); }

double lt_grad_norm(const lt_optim_t *o, const lt_model_t *m) {
  lt_params_t p = lt_model_trainable(m);
  double ss = 0;
  for (int i = 0; i < p.ntensors; i++) {
    const lt_tensor_t *t = &p.tensors[i];
    if (frozen(o, t)) continue;
    const float *g = p.grads + t->offset;
    size_t n = (size_t)t->rows * t->cols;
    for (size_t k = 0; k < n; k++) ss += (double)g[k] * g[k];
  }
  return sqrt(ss);
}

/* Orthogonalises X[r, c] (r ≤ c) in place with the quintic Newton–Schulz
 * iteration of Muon: X ← aX + (bA + cA²)X, A = XXᵀ, after X /= ‖X‖_F. */
static void newton_schulz(float *X, int r, int c, int steps, float *A, float *B, float *T) {
  const float a = 3.4445f, b = -4.7750f, cc = 2.0315f;
  double nrm = 0;
  for (size_t i = 0; i < (size_t)r * c; i++) nrm += (double)X[i] * X[i];
  float inv = (float)(1.0 / (sqrt(nrm) + 1e-7));
  for (size_t i = 0; i < (size_t)r * c; i++) X[i] *= inv;
  for (int s = 0; s < steps; s++) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, r, r, c, 1.0f, X, c, X, c, 0.0f, A, r);
    memcpy(B, A, sizeof(float) * (size_t)r * r);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, r, r, r, cc, A, r, A, r, b, B, r);
    memcpy(T, X, sizeof(float) * (size_t)r * c);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, r, c, r, 1.0f, B, r, T, c, a, X, c);
  }
}

static void muon_update(lt_optim_t *o, float *w, const float *g, float *mom, int rows, int cols, double lr) {
  const lt_optim_cfg_t *c = &o->cfg;
  size_t n = (size_t)rows * cols;
  int tr = rows > cols; /* orthogonalise the wide orientation */
  int r = tr ? cols : rows, cl = tr ? rows : cols;
  float *X = o->scratch, *A = X + n, *B = A + (size_t)r * r, *T = B + (size_t)r * r;
  for (size_t i = 0; i < n; i++) mom[i] = c->muon_momentum * mom[i] + g[i];
  /* Nesterov: orthogonalise g + μ·momentum. */
  for (int i = 0; i < rows; i++)
    for (int j = 0; j < cols; j++) {
      float v = g[(size_t)i * cols + j] + c->muon_momentum * mom[(size_t)i * cols + j];
      if (tr) X[(size_t)j * rows + i] = v;
      else X[(size_t)i * cols + j] = v;
    }
  newton_schulz(X, r, cl, c->muon_steps, A, B, T);
  /* 0.2·sqrt(max dim) matches AdamW's update RMS, so one learning rate serves both. */
  float scale = 0.2f * sqrtf((float)(rows > cols ? rows : cols));
  for (int i = 0; i < rows; i++)
    for (int j = 0; j < cols; j++) {
      size_t k = (size_t)i * cols + j;
      float u = tr ? X[(size_t)j * rows + i] : X[k];
      w[k] -= (float)(lr * (scale * u + c->weight_decay * w[k]));
    }
}

double lt_optim_step(lt_optim_t *o, lt_model_t *m, double *gnorm_out) {
  lt_params_t p = lt_model_trainable(m);
  const lt_optim_cfg_t *c = &o->cfg;
  double gnorm = lt_grad_norm(o, m);
  if (gnorm_out) *gnorm_out = gnorm;
  float gscale = (c->grad_clip > 0 && gnorm > c->grad_clip) ? (float)(c->grad_clip / (gnorm + 1e-12)) : 1.0f;
  double lr = lt_optim_lr(c, o->step);
  o->step++;
  double bc1 = 1.0 - pow(c->beta1, (double)o->step), bc2 = 1.0 - pow(c->beta2, (double)o->step);
  for (int i = 0; i < p.ntensors; i++) {
    const lt_tensor_t *t = &p.tensors[i];
    if (frozen(o, t) || t->offset < o->lo || t->offset >= o->hi) continue;
    size_t n = (size_t)t->rows * t->cols;
    float *w = p.params + t->offset, *g = p.grads + t->offset, *mm = o->m + (t->offset - o->lo),
          *vv = o->v + (t->offset - o->lo);
    if (gscale != 1.0f)
      for (size_t k = 0; k < n; k++) g[k] *= gscale;
    if (uses_muon(c, t)) {
      muon_update(o, w, g, mm, t->rows, t->cols, lr);
      continue;
    }
    /* No weight decay on norm weights (1-D tensors). */
    float wd = t->ndim == 1 ? 0.0f : c->weight_decay;
    for (size_t k = 0; k < n; k++) {
      mm[k] = c->beta1 * mm[k] + (1 - c->beta1) * g[k];
      vv[k] = c->beta2 * vv[k] + (1 - c->beta2) * g[k] * g[k];
      double mh = mm[k] / bc1, vh = vv[k] / bc2;
      w[k] -= (float)(lr * (mh / (sqrt(vh) + c->eps) + wd * w[k]));
    }
  }
  return lr;
}

int lt_optim_gather(const lt_optim_t *o, lt_model_t *m) {
  return lt_dist_size() > 1 ? lt_dist_allgather_shards(lt_model_trainable(m).params, o->offsets, o->ntensors) : 0;
}

size_t lt_optim_state_bytes(const lt_optim_t *o) { return 2 * sizeof(float) * (o->hi - o->lo); }

int lt_optim_save(const lt_optim_t *o, const char *path) {
  int rank = lt_dist_rank(), rc = 0;
  float *m = o->m, *v = o->v;
  if (lt_dist_size() > 1) {
    m = rank == 0 ? malloc(sizeof(float) * o->n) : NULL;
    v = rank == 0 ? malloc(sizeof(float) * o->n) : NULL;
    /* Every rank takes part in both gathers, whatever rank 0's allocation did. */
    int r1 = lt_dist_gather_shards(o->m, m, o->offsets, o->ntensors);
    int r2 = lt_dist_gather_shards(o->v, v, o->offsets, o->ntensors);
    rc = r1 < 0 ? r1 : r2;
    if (rc == 0 && rank == 0 && (!m || !v))
      rc = lt_error_set(LT_ENOMEM, "%s: out of memory gathering the optimizer state", path);
  }
  if (rc == 0 && rank == 0) {
    lt_st_tensor_t t[2] = {{"exp_avg", 1, {(int64_t)o->n}, m}, {"exp_avg_sq", 1, {(int64_t)o->n}, v}};
    char meta[256];
    snprintf(meta, sizeof meta, "{\"step\":\"%lld\",\"kind\":\"%s\"}", (long long)o->step,
             o->cfg.kind == LT_OPT_MUON ? "muon" : "adamw");
    rc = lt_st_write(path, t, 2, meta);
  }
  if (m != o->m) free(m);
  if (v != o->v) free(v);
  return rc;
}

int lt_optim_load(lt_optim_t *o, const char *path) {
  lt_st_file_t *f;
  int rc = lt_st_open(path, &f);
  if (rc < 0) return rc;
  const lt_st_entry_t *m = lt_st_find(f, "exp_avg"), *v = lt_st_find(f, "exp_avg_sq");
  if (!m || !v || lt_st_numel(m) != (int64_t)o->n || lt_st_numel(v) != (int64_t)o->n || m->dtype != LT_ST_F32) {
    lt_st_close(f);
    return lt_error_set(LT_EFORMAT, "%s: optimizer state does not match a model of %zu parameters", path, o->n);
  }
  float *full = malloc(sizeof(float) * (o->n + 1));
  if (!full) {
    lt_st_close(f);
    return lt_error_set(LT_ENOMEM, "%s: out of memory", path);
  }
  /* The file holds the whole state; this rank keeps its shard. */
  int rc1 = lt_st_read_f32(f, m, full);
  if (rc1 == 0) memcpy(o->m, full + o->lo, sizeof(float) * (o->hi - o->lo));
  if (rc1 == 0 && (rc1 = lt_st_read_f32(f, v, full)) == 0) memcpy(o->v, full + o->lo, sizeof(float) * (o->hi - o->lo));
  free(full);
  if (rc1 < 0) {
    lt_st_close(f);
    return rc1;
  }
  const char *s = lt_st_meta(f, "step"); /* safetensors metadata values are strings */
  long long step = s ? strtoll(s, NULL, 10) : -1;
  lt_st_close(f);
  if (step < 0) return lt_error_set(LT_EFORMAT, "%s: optimizer state has no step count", path);
  o->step = step;
  return 0;
}
