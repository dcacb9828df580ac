/* LoRA adapters (learner/lora.h): the parameter buffer and its PEFT tensor table, PEFT's initialisation, the
 * low-rank forward/backward of an adapted projection, the adapter files, merging. */
#include "learner/lora.h"

#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "learner/internal.h"
#include "util/buf.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/json.h"
#include "util/rng.h"

/* Indexed by lt__proj (learner/internal.h). */
const char *const lt_lora_target_names[7] = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                             "gate_proj", "up_proj", "down_proj"};
#define ALL_TARGETS 0x7fu
#define SCORE_NAME "base_model.model.score.weight"

int lt_lora_targets_parse(const char *const *names, int n, const char *what, unsigned *targets) {
  unsigned t = 0;
  for (int i = 0; i < n; i++) {
    int p = 0;
    while (p < LT_PROJ_N && strcmp(names[i], lt_lora_target_names[p])) p++;
    if (p < LT_PROJ_N) t |= 1u << p;
    else if (!strcmp(names[i], "all-linear")) t |= ALL_TARGETS;
    else
      return lt_error_set(LT_ECONFIG,
                          "%s: \"%s\" is not a projection of this model (q_proj k_proj v_proj o_proj "
                          "gate_proj up_proj down_proj, the experts' in a MoE layer; or all-linear)",
                          what, names[i]);
  }
  if (!t) return lt_error_set(LT_ECONFIG, "%s: no target module", what);
  *targets = t;
  return 0;
}

static int experts_of(const lt_model_config_t *c, int l, int p) {
  return c->moe[l] && p >= LT_PROJ_GATE ? c->experts : 1;
}
static size_t slot(const lt_lora_t *l, int layer, int p, int e) {
  return ((size_t)layer * LT_PROJ_N + (size_t)p) * (size_t)l->nexp + (size_t)e;
}

/* PEFT's module path of projection p in layer l (expert e of a MoE layer). */
static void module_name(const lt_model_config_t *c, int l, int p, int e, char *out, size_t cap) {
  if (p <= LT_PROJ_O) snprintf(out, cap, "model.layers.%d.self_attn.%s", l, lt_lora_target_names[p]);
  else if (c->moe[l]) snprintf(out, cap, "model.layers.%d.mlp.experts.%d.%s", l, e, lt_lora_target_names[p]);
  else snprintf(out, cap, "model.layers.%d.mlp.%s", l, lt_lora_target_names[p]);
}

void lt_lora_free(lt_lora_t *l) {
  if (!l) return;
  free(l->params);
  free(l->grads);
  free(l->tensors);
  free(l->a_at);
  free(l->scratch);
  free(l);
}

static int add_tensor(lt_lora_t *l, int *cap, const char *name, int rows, int cols) {
  if (l->ntensors == *cap) {
    *cap = *cap ? 2 * *cap : 64;
    lt_tensor_t *t = realloc(l->tensors, sizeof *t * (size_t)*cap);
    if (!t) return lt_error_set(LT_ENOMEM, "adapter: out of memory");
    l->tensors = t;
  }
  lt_tensor_t *t = &l->tensors[l->ntensors++];
  snprintf(t->name, sizeof t->name, "%s", name);
  t->ndim = 2;
  t->rows = rows;
  t->cols = cols;
  t->offset = l->nparams;
  l->nparams += (size_t)rows * (size_t)cols;
  return 0;
}

int lt_lora_create(const lt_model_t *m, const lt_lora_cfg_t *cfg, lt_lora_t **out) {
  *out = NULL;
  const lt_model_config_t *c = &m->cfg;
  if (cfg->rank < 1) return lt_error_set(LT_EINVAL, "adapter: rank %d", cfg->rank);
  lt_lora_t *l = calloc(1, sizeof *l);
  int nexp = c->experts > 1 ? c->experts : 1;
  size_t slots = (size_t)c->layers * LT_PROJ_N * (size_t)nexp;
  if (!l || !(l->a_at = malloc(sizeof *l->a_at * slots))) {
    lt_lora_free(l);
    return lt_error_set(LT_ENOMEM, "adapter: out of memory");
  }
  l->cfg = *cfg;
  l->nexp = nexp;
  l->scale = cfg->alpha / (float)cfg->rank;
  l->score = -1;
  for (size_t i = 0; i < slots; i++) l->a_at[i] = SIZE_MAX;
  int cap = 0, rc = 0, r = cfg->rank;
  char mod[96], name[128];
  for (int L = 0; L < c->layers && rc == 0; L++)
    for (int p = 0; p < LT_PROJ_N && rc == 0; p++) {
      if (!(cfg->targets & (1u << p))) continue;
      int in, o;
      lt__proj_shape(c, L, (lt__proj)p, &in, &o);
      for (int e = 0; e < experts_of(c, L, p) && rc == 0; e++) {
        module_name(c, L, p, e, mod, sizeof mod);
        l->a_at[slot(l, L, p, e)] = l->nparams;
        snprintf(name, sizeof name, "base_model.model.%s.lora_A.weight", mod);
        if ((rc = add_tensor(l, &cap, name, r, in)) == 0) {
          snprintf(name, sizeof name, "base_model.model.%s.lora_B.weight", mod);
          rc = add_tensor(l, &cap, name, o, r);
        }
      }
    }
  const lt_tensor_t *score = c->critic ? lt_model_tensor(m, "score.weight") : NULL;
  if (rc == 0 && score) { /* trained fully beside the adapter, as PEFT's modules_to_save */
    l->score = l->ntensors;
    rc = add_tensor(l, &cap, SCORE_NAME, score->rows, score->cols);
  }
  if (rc == 0 && !(l->params = calloc(l->nparams ? l->nparams : 1, sizeof(float))))
    rc = lt_error_set(LT_ENOMEM, "adapter: cannot allocate %zu parameters", l->nparams);
  if (rc < 0) {
    lt_lora_free(l);
    return rc;
  }
  if (score)
    memcpy(l->params + l->tensors[l->score].offset, m->params + score->offset, sizeof(float) * (size_t)score->cols);
  *out = l;
  return 0;
}

void lt_lora_init(lt_lora_t *l) {
  lt_rng_t rng;
  lt_rng_seed(&rng, l->cfg.init_seed);
  for (int i = 0; i < l->ntensors; i++) {
    const lt_tensor_t *t = &l->tensors[i];
    if (i == l->score) continue;
    float *p = l->params + t->offset;
    size_t n = (size_t)t->rows * (size_t)t->cols;
    /* torch's kaiming_uniform_(a = √5) bound: gain √(2 / (1 + a²)) · √(3 / fan_in) = 1 / √fan_in. */
    double bound = 1.0 / sqrt((double)t->cols);
    int is_a = strstr(t->name, ".lora_A.") != NULL;
    for (size_t k = 0; k < n; k++) p[k] = is_a ? (float)((2.0 * lt_rng_uniform(&rng) - 1.0) * bound) : 0.0f;
  }
}

/* A value model reads and trains its score head in the adapter's buffer while one is attached. */
static void bind_score(lt_model_t *m) {
  lt_lora_t *l = m->lora;
  if (!l || l->score < 0) return;
  size_t off = l->tensors[l->score].offset;
  m->w.head = l->params + off;
  m->g.head = l->grads ? l->grads + off : NULL;
}

void lt_model_attach_lora(lt_model_t *m, lt_lora_t *l) {
  lt_model_detach_lora(m);
  free(m->grads); /* the base is frozen from now on */
  m->grads = NULL;
  memset(&m->g, 0, sizeof m->g);
  m->lora = l;
  bind_score(m);
}

void lt_model_detach_lora(lt_model_t *m) {
  lt_lora_t *l = m->lora;
  if (!l) return;
  const lt_tensor_t *s = l->score >= 0 ? lt_model_tensor(m, "score.weight") : NULL;
  if (s) {
    memcpy(m->params + s->offset, l->params + l->tensors[l->score].offset, sizeof(float) * (size_t)s->cols);
    m->w.head = m->params + s->offset;
    m->g.head = m->grads ? m->grads + s->offset : NULL;
  }
  lt_lora_free(l);
  m->lora = NULL;
}

int lt__lora_train_alloc(lt_model_t *m) {
  lt_lora_t *l = m->lora;
  if (!l->grads && !(l->grads = calloc(l->nparams ? l->nparams : 1, sizeof(float))))
    return lt_error_set(LT_ENOMEM, "adapter gradients: out of memory");
  bind_score(m);
  return 0;
}

int lt_lora_reserve(lt_lora_t *l, size_t rows) {
  if (rows <= l->scratch_rows) return 0;
  float *s = realloc(l->scratch, sizeof(float) * 2 * rows * (size_t)l->cfg.rank);
  if (!s) return lt_error_set(LT_ENOMEM, "adapter scratch for %zu rows: out of memory", rows);
  l->scratch = s;
  l->scratch_rows = rows;
  return 0;
}

/* Projection p's A (B follows it, [out, r]), or NULL when it is not adapted or the adapter is off. */
static float *adapter_a(const lt_lora_t *l, int layer, int p, int e) {
  size_t at = l->off ? SIZE_MAX : l->a_at[slot(l, layer, p, e)];
  return at == SIZE_MAX ? NULL : l->params + at;
}

void lt_lora_forward(lt_lora_t *l, int layer, int p, int e, float *y, const float *x, int N, int in, int out) {
  const float *A = adapter_a(l, layer, p, e);
  if (!A || N == 0) return;
  int r = l->cfg.rank;
  const float *B = A + (size_t)r * in;
  float *t = l->scratch; /* [N, r] = x · Aᵀ */
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, r, in, 1.0f, x, in, A, in, 0.0f, t, r);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, out, r, l->scale, t, r, B, r, 1.0f, y, out);
}

void lt_lora_backward(lt_lora_t *l, int layer, int p, int e, float *dx, const float *dy, const float *x, int N, int in,
                      int out) {
  const float *A = adapter_a(l, layer, p, e);
  if (!A || N == 0) return;
  int r = l->cfg.rank;
  size_t at = (size_t)(A - l->params);
  const float *B = A + (size_t)r * in;
  float *t = l->scratch, *dt = l->scratch + l->scratch_rows * (size_t)r; /* [N, r] each */
  float *dA = l->grads ? l->grads + at : NULL, *dB = dA ? dA + (size_t)r * in : NULL;
  /* y += s · t · Bᵀ with t = x · Aᵀ:  dB += s · dyᵀ · t,  dt = s · dy · B,  dA += dtᵀ · x,  dx += dt · A. */
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, r, in, 1.0f, x, in, A, in, 0.0f, t, r);
  if (dB) cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, r, N, l->scale, dy, out, t, r, 1.0f, dB, r);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, r, out, l->scale, dy, out, B, r, 0.0f, dt, r);
  if (dA) cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r, in, N, 1.0f, dt, r, x, in, 1.0f, dA, in);
  if (dx) cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, in, r, 1.0f, dt, r, A, in, 1.0f, dx, in);
}

/* ---- files ---- */

int lt_lora_is_dir(const char *dir) {
  char p[4096];
  return lt_path_join(p, sizeof p, dir, "adapter_config.json") == 0 && lt_fs_exists(p);
}

/* dir holds weights of its own (model.safetensors, or a sharded index). */
static int has_weights(const char *dir) {
  char p[4096], q[4096];
  return (lt_path_join(p, sizeof p, dir, "model.safetensors") == 0 && lt_fs_exists(p)) ||
         (lt_path_join(q, sizeof q, dir, "model.safetensors.index.json") == 0 && lt_fs_exists(q));
}

const char *lt_model_weights_file(const char *dir) {
  return !has_weights(dir) && lt_lora_is_dir(dir) ? "adapter_model.safetensors" : "model.safetensors";
}

static int read_config(const char *dir, cJSON **out) {
  char p[4096];
  int rc = lt_path_join(p, sizeof p, dir, "adapter_config.json");
  return rc < 0 ? rc : lt_json_parse_file(p, out);
}

int lt_lora_base_dir(const char *dir, char *out, size_t cap) {
  cJSON *j;
  int rc = read_config(dir, &j);
  if (rc < 0) return rc;
  const char *base = NULL;
  if (lt_json_get_str(j, "base_model_name_or_path", &base) < 0 || !base[0])
    rc = lt_error_set(LT_EFORMAT, "%s/adapter_config.json: no base_model_name_or_path", dir);
  else if (base[0] == '/')
    rc = snprintf(out, cap, "%s", base) >= (int)cap ? lt_error_set(LT_EINVAL, "%s: path too long", base) : 0;
  else rc = lt_path_join(out, cap, dir, base);
  cJSON_Delete(j);
  return rc;
}

/* The targets of adapter_config.json's target_modules: a list of names, or one string ("all-linear"). */
static int config_targets(const cJSON *tm, const char *what, unsigned *targets) {
  const char *names[64];
  int n = 0;
  if (cJSON_IsString(tm)) names[n++] = tm->valuestring;
  for (const cJSON *e = cJSON_IsArray(tm) ? tm->child : NULL; e && n < 64; e = e->next) {
    if (!cJSON_IsString(e)) return lt_error_set(LT_EFORMAT, "%s: target_modules: expected names", what);
    names[n++] = e->valuestring;
  }
  return lt_lora_targets_parse(names, n, what, targets);
}

int lt_lora_load_weights(lt_lora_t *l, const char *dir) {
  char path[4096];
  int rc = lt_path_join(path, sizeof path, dir, "adapter_master.safetensors");
  if (rc == 0 && !lt_fs_exists(path)) rc = lt_path_join(path, sizeof path, dir, "adapter_model.safetensors");
  lt_st_file_t *f;
  if (rc < 0 || (rc = lt_st_open(path, &f)) < 0) return rc;
  for (int i = 0; i < l->ntensors && rc == 0; i++) {
    const lt_tensor_t *t = &l->tensors[i];
    const lt_st_entry_t *e = lt_st_find(f, t->name);
    if (!e) rc = lt_error_set(LT_EFORMAT, "%s: tensor '%s' is missing", path, t->name);
    else if (e->ndim != 2 || e->shape[0] != t->rows || e->shape[1] != t->cols)
      rc = lt_error_set(LT_EFORMAT, "%s: tensor '%s' is not [%d, %d]", path, t->name, t->rows, t->cols);
    else rc = lt_st_read_f32(f, e, l->params + t->offset);
    size_t n = (size_t)t->rows * (size_t)t->cols;
    for (size_t k = 0; rc == 0 && k < n; k++)
      if (!isfinite(l->params[t->offset + k]))
        rc = lt_error_set(LT_ECORRUPT, "%s: tensor '%s' holds %g", path, t->name, (double)l->params[t->offset + k]);
  }
  for (int i = 0; i < f->n && rc == 0; i++) { /* modules the model has no room for: another base, or other targets */
    int known = 0;
    for (int k = 0; k < l->ntensors && !known; k++) known = !strcmp(f->entries[i].name, l->tensors[k].name);
    if (!known)
      rc =
          lt_error_set(LT_EFORMAT, "%s: tensor '%s' is not a module of this model's adapter", path, f->entries[i].name);
  }
  lt_st_close(f);
  return rc;
}

int lt_lora_load(const char *dir, const lt_model_t *m, lt_lora_t **out) {
  *out = NULL;
  cJSON *j;
  int rc = read_config(dir, &j);
  if (rc < 0) return rc;
  char what[4200];
  snprintf(what, sizeof what, "%s/adapter_config.json", dir);
  const char *type = NULL;
  double r = 0, alpha = 0;
  lt_lora_cfg_t c = {0};
  if (lt_json_get_str(j, "peft_type", &type) < 0 || strcmp(type, "LORA"))
    rc = lt_error_set(LT_EFORMAT, "%s: peft_type is not \"LORA\"", what);
  else if (lt_json_get_f64(j, "r", &r) < 0 || r < 1 || r != floor(r) || r > 65536)
    rc = lt_error_set(LT_EFORMAT, "%s: r: expected a positive integer", what);
  else if (lt_json_get_f64(j, "lora_alpha", &alpha) < 0 || !(alpha > 0))
    rc = lt_error_set(LT_EFORMAT, "%s: lora_alpha: expected a positive number", what);
  else if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "use_dora")) ||
           cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "use_rslora")))
    rc = lt_error_set(LT_EUNSUPP, "%s: DoRA and rsLoRA adapters are not supported (plain LoRA only)", what);
  else rc = config_targets(cJSON_GetObjectItemCaseSensitive(j, "target_modules"), what, &c.targets);
  cJSON_Delete(j);
  c.rank = (int)r;
  c.alpha = (float)alpha;
  lt_lora_t *l = NULL;
  if (rc == 0) rc = lt_lora_create(m, &c, &l);
  if (rc == 0) rc = lt_lora_load_weights(l, dir);
  if (rc < 0) {
    lt_lora_free(l);
    return rc;
  }
  *out = l;
  return 0;
}

static int write_tensors(const lt_lora_t *l, const char *dir, const char *file, lt_st_dtype dtype) {
  lt_st_tensor_t *t = calloc((size_t)l->ntensors, sizeof *t);
  if (!t) return lt_error_set(LT_ENOMEM, "out of memory");
  for (int i = 0; i < l->ntensors; i++) {
    const lt_tensor_t *s = &l->tensors[i];
    t[i] = (lt_st_tensor_t){.name = s->name, .ndim = 2, .shape = {s->rows, s->cols}, .data = l->params + s->offset};
  }
  char path[4096];
  int rc = lt_path_join(path, sizeof path, dir, file);
  if (rc == 0) rc = lt_st_write_as(path, t, l->ntensors, "{\"format\":\"pt\"}", dtype);
  free(t);
  return rc;
}

int lt_lora_save(const lt_lora_t *l, const char *dir, lt_st_dtype dtype, const char *base) {
  int rc = lt_fs_mkdirs(dir, 0755);
  if (rc == 0) rc = write_tensors(l, dir, "adapter_model.safetensors", dtype);
  char path[4096];
  if (rc == 0) rc = lt_path_join(path, sizeof path, dir, "adapter_master.safetensors");
  if (rc < 0) return rc;
  /* As a version's master.safetensors: the fp32 values beside a bf16 file, for a learner resuming from it. */
  if (dtype != LT_ST_F32) rc = write_tensors(l, dir, "adapter_master.safetensors", LT_ST_F32);
  else if (lt_fs_exists(path) && unlink(path) < 0)
    rc = lt_error_set(LT_EIO, "cannot remove %s: %s", path, strerror(errno));
  if (rc < 0) return rc;
  lt_buf_t b = {0};
  lt_buf_puts(&b, "{\n  \"base_model_name_or_path\": ");
  lt_json_quote(&b, base);
  lt_buf_printf(&b,
                ",\n  \"bias\": \"none\",\n  \"fan_in_fan_out\": false,\n  \"inference_mode\": true,\n"
                "  \"init_lora_weights\": true,\n  \"lora_alpha\": %.9g,\n  \"lora_dropout\": 0.0,\n"
                "  \"modules_to_save\": %s,\n  \"peft_type\": \"LORA\",\n  \"r\": %d,\n  \"target_modules\": [",
                (double)l->cfg.alpha, l->score >= 0 ? "[\"score\"]" : "null", l->cfg.rank);
  for (int p = 0, k = 0; p < LT_PROJ_N; p++)
    if (l->cfg.targets & (1u << p)) lt_buf_printf(&b, "%s\"%s\"", k++ ? ", " : "", lt_lora_target_names[p]);
  lt_buf_printf(&b, "],\n  \"task_type\": \"%s\",\n  \"use_dora\": false,\n  \"use_rslora\": false\n}\n",
                l->score >= 0 ? "SEQ_CLS" : "CAUSAL_LM");
  if (lt_buf_ok(&b) < 0) rc = lt_error_set(LT_ENOMEM, "out of memory");
  if (rc == 0) rc = lt_path_join(path, sizeof path, dir, "adapter_config.json");
  if (rc == 0) rc = lt_fs_write_atomic(path, b.data, b.len);
  lt_buf_free(&b);
  return rc;
}

int lt_lora_merged(const lt_model_t *m, lt_model_t **out) {
  lt_model_t *r;
  int rc = lt_model_create(&m->cfg, &r);
  if (rc < 0) return rc;
  memcpy(r->params, m->params, sizeof(float) * m->nparams);
  const lt_lora_t *l = m->lora;
  const lt_model_config_t *c = &m->cfg;
  for (int L = 0; l && L < c->layers; L++)
    for (int p = 0; p < LT_PROJ_N; p++)
      for (int e = 0; e < experts_of(c, L, p); e++) {
        size_t at = l->a_at[slot(l, L, p, e)];
        if (at == SIZE_MAX) continue;
        int in, o, rk = l->cfg.rank;
        lt__proj_shape(c, L, (lt__proj)p, &in, &o);
        const float *A = l->params + at, *B = A + (size_t)rk * in;
        float *W = r->params + (lt__proj_matrix(m, &m->w.layer[L], L, (lt__proj)p, e) - m->params);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, o, in, rk, l->scale, B, rk, A, in, 1.0f, W, in);
      }
  if (l && l->score >= 0) memcpy(r->w.head, m->w.head, sizeof(float) * (size_t)c->hidden);
  r->threads = m->threads;
  *out = r;
  return 0;
}
