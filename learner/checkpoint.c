/* Model directories: config.json + model.safetensors (or sharded files with
 * model.safetensors.index.json), in Hugging Face's names and layout. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "learner/model.h"
#include "learner/safetensors.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/json.h"

#define MAX_SHARDS 256

typedef struct {
  lt_st_file_t *files[MAX_SHARDS];
  int n;
  cJSON *index; /* weight_map of a sharded checkpoint, or NULL */
} shards_t;

static void shards_close(shards_t *s) {
  for (int i = 0; i < s->n; i++) lt_st_close(s->files[i]);
  cJSON_Delete(s->index);
}

static int shards_open(const char *dir, shards_t *s) {
  memset(s, 0, sizeof *s);
  char path[4096];
  int rc = lt_path_join(path, sizeof path, dir, "model.safetensors");
  if (rc < 0) return rc;
  if (lt_fs_exists(path)) {
    s->n = 1;
    return lt_st_open(path, &s->files[0]);
  }
  if ((rc = lt_path_join(path, sizeof path, dir, "model.safetensors.index.json")) < 0) return rc;
  if (!lt_fs_exists(path))
    return lt_error_set(LT_ENOENT, "%s: no model.safetensors or model.safetensors.index.json", dir);
  cJSON *idx;
  if ((rc = lt_json_parse_file(path, &idx)) < 0) return rc;
  cJSON *map = cJSON_GetObjectItemCaseSensitive(idx, "weight_map");
  if (!cJSON_IsObject(map)) {
    cJSON_Delete(idx);
    return lt_error_set(LT_EFORMAT, "%s: weight_map: expected an object", path);
  }
  s->index = idx;
  /* Open each distinct shard once; the file names are checked to stay inside dir. */
  for (cJSON *e = map->child; e; e = e->next) {
    if (!cJSON_IsString(e) || strchr(e->valuestring, '/') || e->valuestring[0] == '.')
      return lt_error_set(LT_EFORMAT, "%s: weight_map.%s: expected a file name in the model directory", path, e->string);
    int seen = 0;
    for (int i = 0; i < s->n && !seen; i++) {
      const char *base = strrchr(s->files[i]->path, '/');
      seen = strcmp(base ? base + 1 : s->files[i]->path, e->valuestring) == 0;
    }
    if (seen) continue;
    if (s->n == MAX_SHARDS) return lt_error_set(LT_EFORMAT, "%s: more than %d shards", path, MAX_SHARDS);
    char sp[4096];
    if ((rc = lt_path_join(sp, sizeof sp, dir, e->valuestring)) < 0) return rc;
    if ((rc = lt_st_open(sp, &s->files[s->n])) < 0) return rc;
    s->n++;
  }
  return 0;
}

static const lt_st_entry_t *shards_find(const shards_t *s, const char *name, const lt_st_file_t **file) {
  for (int i = 0; i < s->n; i++) {
    const lt_st_entry_t *e = lt_st_find(s->files[i], name);
    if (e) {
      *file = s->files[i];
      return e;
    }
  }
  return NULL;
}

/* Tensors some checkpoints carry that do not change the computation. */
static int ignorable(const lt_model_t *m, const char *name) {
  return strstr(name, "rotary_emb.inv_freq") != NULL || (m->cfg.tied && strcmp(name, "lm_head.weight") == 0);
}

int lt_model_load_weights(lt_model_t *m, const char *dir) {
  shards_t s;
  int rc = shards_open(dir, &s);
  if (rc < 0) {
    shards_close(&s);
    return rc;
  }
  for (int i = 0; i < m->ntensors && rc == 0; i++) {
    const lt_tensor_t *t = &m->tensors[i];
    const lt_st_file_t *f;
    const lt_st_entry_t *e = shards_find(&s, t->name, &f);
    if (!e) {
      rc = lt_error_set(LT_EFORMAT, "%s: tensor '%s' is missing", dir, t->name);
      break;
    }
    int ok = t->ndim == 1 ? (e->ndim == 1 && e->shape[0] == t->cols)
                          : (e->ndim == 2 && e->shape[0] == t->rows && e->shape[1] == t->cols);
    if (!ok) {
      char want[64], got[96];
      if (t->ndim == 1)
        snprintf(want, sizeof want, "[%d]", t->cols);
      else
        snprintf(want, sizeof want, "[%d, %d]", t->rows, t->cols);
      int g = snprintf(got, sizeof got, "[");
      for (int d = 0; d < e->ndim; d++) g += snprintf(got + g, sizeof got - (size_t)g, d ? ", %lld" : "%lld", (long long)e->shape[d]);
      snprintf(got + g, sizeof got - (size_t)g, "]");
      rc = lt_error_set(LT_EFORMAT, "%s: tensor '%s' has shape %s, expected %s", dir, t->name, got, want);
      break;
    }
    rc = lt_st_read_f32(f, e, m->params + t->offset);
    /* A NaN or Inf would poison every logit it touches: refused here, not
     * discovered as a NaN loss steps later. */
    size_t n = (size_t)(t->ndim == 1 ? 1 : t->rows) * (size_t)t->cols;
    const float *v = m->params + t->offset;
    for (size_t k = 0; rc == 0 && k < n; k++)
      if (!isfinite(v[k])) rc = lt_error_set(LT_ECORRUPT, "%s: tensor '%s' holds %g at element %zu", dir, t->name, (double)v[k], k);
  }
  /* Extra tensors mean the config and the weights disagree. */
  for (int k = 0; k < s.n && rc == 0; k++)
    for (int i = 0; i < s.files[k]->n && rc == 0; i++) {
      const char *name = s.files[k]->entries[i].name;
      if (!lt_model_tensor(m, name) && !ignorable(m, name))
        rc = lt_error_set(LT_EFORMAT, "%s: unexpected tensor '%s' (not part of the configured model)", dir, name);
    }
  shards_close(&s);
  return rc;
}

int lt_model_load(const char *dir, lt_model_t **out) {
  *out = NULL;
  char path[4096];
  int rc = lt_path_join(path, sizeof path, dir, "config.json");
  if (rc < 0) return rc;
  if (!lt_fs_is_dir(dir)) return lt_error_set(LT_ENOENT, "%s: not a model directory", dir);
  lt_model_config_t cfg;
  if ((rc = lt_model_config_load(path, &cfg)) < 0) return rc;
  lt_model_t *m;
  if ((rc = lt_model_create(&cfg, &m)) < 0) return rc;
  if ((rc = lt_model_load_weights(m, dir)) < 0) {
    lt_model_free(m);
    return rc;
  }
  *out = m;
  return 0;
}

int lt_model_save(const lt_model_t *m, const char *dir) {
  int rc = lt_fs_mkdirs(dir, 0755);
  if (rc < 0) return rc;
  char *cfg = lt_model_config_json(&m->cfg);
  if (!cfg) return lt_error_set(LT_ENOMEM, "out of memory");
  char path[4096];
  if ((rc = lt_path_join(path, sizeof path, dir, "config.json")) == 0) rc = lt_fs_write_atomic(path, cfg, strlen(cfg));
  free(cfg);
  if (rc < 0) return rc;
  lt_st_tensor_t *t = calloc((size_t)m->ntensors, sizeof *t);
  if (!t) return lt_error_set(LT_ENOMEM, "out of memory");
  for (int i = 0; i < m->ntensors; i++) {
    const lt_tensor_t *s = &m->tensors[i];
    t[i].name = s->name;
    t[i].ndim = s->ndim;
    t[i].shape[0] = s->ndim == 1 ? s->cols : s->rows;
    t[i].shape[1] = s->cols;
    t[i].data = m->params + s->offset;
  }
  if ((rc = lt_path_join(path, sizeof path, dir, "model.safetensors")) == 0)
    rc = lt_st_write(path, t, m->ntensors, "{\"format\":\"pt\"}");
  free(t);
  return rc;
}
