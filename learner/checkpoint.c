/* Model directories: config.json + model.safetensors (or sharded files with
 * model.safetensors.index.json), in Hugging Face's names and layout. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "learner/lora.h"
#include "learner/model.h"
#include "learner/safetensors.h"
#include "util/buf.h"
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

/* `file`: the single-file name to look for first (model.safetensors, or a published version's fp32
 * master.safetensors). */
static int shards_open(const char *dir, const char *file, shards_t *s) {
  memset(s, 0, sizeof *s);
  char path[4096];
  int rc = lt_path_join(path, sizeof path, dir, file);
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
      return lt_error_set(LT_EFORMAT, "%s: weight_map.%s: expected a file name in the model directory", path,
                          e->string);
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

static int load_weights(lt_model_t *m, const char *dir, const char *file) {
  shards_t s;
  int rc = shards_open(dir, file, &s);
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
      if (t->ndim == 1) snprintf(want, sizeof want, "[%d]", t->cols);
      else snprintf(want, sizeof want, "[%d, %d]", t->rows, t->cols);
      int g = snprintf(got, sizeof got, "[");
      for (int d = 0; d < e->ndim; d++)
        g += snprintf(got + g, sizeof got - (size_t)g, d ? ", %lld" : "%lld", (long long)e->shape[d]);
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
      if (!isfinite(v[k]))
        rc = lt_error_set(LT_ECORRUPT, "%s: tensor '%s' holds %g at element %zu", dir, t->name, (double)v[k], k);
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

int lt_model_load_weights(lt_model_t *m, const char *dir) { return load_weights(m, dir, "model.safetensors"); }

/* dir's model: config.json and `master` (master.safetensors when it has one) or model.safetensors — dir's own, or
 * for an adapter without weights of its own its base's — and dir's adapter attached when it has one. */
static int load(const char *dir, int master, lt_model_t **out) {
  *out = NULL;
  if (!lt_fs_is_dir(dir)) return lt_error_set(LT_ENOENT, "%s: not a model directory", dir);
  char base[4096], path[4096];
  const char *wdir = dir;
  int rc = 0, adapter = lt_lora_is_dir(dir);
  if (adapter && strcmp(lt_model_weights_file(dir), "model.safetensors")) {
    if ((rc = lt_lora_base_dir(dir, base, sizeof base)) < 0) return rc;
    if (strcmp(lt_model_weights_file(base), "model.safetensors"))
      return lt_error_set(LT_EFORMAT, "%s: its base %s is an adapter too (one level only)", dir, base);
    wdir = base;
  }
  if ((rc = lt_path_join(path, sizeof path, wdir, "master.safetensors")) < 0) return rc;
  const char *file = master && lt_fs_exists(path) ? "master.safetensors" : "model.safetensors";
  if ((rc = lt_path_join(path, sizeof path, wdir, "config.json")) < 0) return rc;
  lt_model_config_t cfg;
  if ((rc = lt_model_config_load(path, &cfg)) < 0) return rc;
  lt_model_t *m;
  lt_lora_t *l = NULL;
  if ((rc = lt_model_create(&cfg, &m)) < 0) return rc;
  if ((rc = load_weights(m, wdir, file)) == 0 && adapter && (rc = lt_lora_load(dir, m, &l)) == 0)
    lt_model_attach_lora(m, l);
  if (rc < 0) {
    lt_model_free(m);
    return rc;
  }
  *out = m;
  return 0;
}

int lt_model_load(const char *dir, lt_model_t **out) { return load(dir, 0, out); }

int lt_model_load_master(const char *dir, lt_model_t **out) { return load(dir, 1, out); }

/* What Hugging Face's generate() reads beside config.json; a source
 * checkpoint's own file, copied with its tokenizer, replaces it. */
static int write_generation_config(const lt_model_t *m, const char *dir) {
  lt_buf_t b = {0};
  lt_buf_puts(&b, "{\n  \"_from_model_config\": true");
  if (m->cfg.bos_id >= 0) lt_buf_printf(&b, ",\n  \"bos_token_id\": %d", m->cfg.bos_id);
  if (m->cfg.eos_id >= 0) lt_buf_printf(&b, ",\n  \"eos_token_id\": %d", m->cfg.eos_id);
  lt_buf_puts(&b, "\n}\n");
  char path[4096];
  int rc = lt_buf_ok(&b) < 0 ? lt_error_set(LT_ENOMEM, "out of memory")
                             : lt_path_join(path, sizeof path, dir, "generation_config.json");
  if (rc == 0) rc = lt_fs_write_atomic(path, b.data, b.len);
  lt_buf_free(&b);
  return rc;
}

/* Tensors [from, to) into `file` of dir. */
static int write_shard(const lt_model_t *m, const char *dir, const char *file, int from, int to, lt_st_dtype dtype) {
  lt_st_tensor_t *t = calloc((size_t)(to - from), sizeof *t);
  if (!t) return lt_error_set(LT_ENOMEM, "out of memory");
  for (int i = from; i < to; i++) {
    const lt_tensor_t *s = &m->tensors[i];
    t[i - from] = (lt_st_tensor_t){.name = s->name, .ndim = s->ndim, .data = m->params + s->offset};
    t[i - from].shape[0] = s->ndim == 1 ? s->cols : s->rows;
    t[i - from].shape[1] = s->cols;
  }
  char path[4096];
  int rc = lt_path_join(path, sizeof path, dir, file);
  if (rc == 0) rc = lt_st_write_as(path, t, to - from, "{\"format\":\"pt\"}", dtype);
  free(t);
  return rc;
}

static int64_t tensor_bytes(const lt_tensor_t *t) { return (int64_t)(t->ndim == 1 ? 1 : t->rows) * t->cols * 4; }

/* Hugging Face's layout for large models: model-0000i-of-0000n.safetensors
 * of at most max_bytes each (one tensor may exceed it alone) and
 * model.safetensors.index.json mapping every tensor to its file. */
static int save_shards(const lt_model_t *m, const char *dir, int64_t max_bytes) {
  int *start = malloc(((size_t)m->ntensors + 1) * sizeof *start), n = 0;
  if (!start) return lt_error_set(LT_ENOMEM, "out of memory");
  int64_t total = 0, cur = 0;
  for (int i = 0; i < m->ntensors; i++) {
    int64_t b = tensor_bytes(&m->tensors[i]);
    if (i == 0 || (cur > 0 && cur + b > max_bytes)) start[n++] = i, cur = 0;
    cur += b;
    total += b;
  }
  start[n] = m->ntensors;
  lt_buf_t idx = {0};
  lt_buf_printf(&idx, "{\n  \"metadata\": {\"total_size\": %lld},\n  \"weight_map\": {", (long long)total);
  int rc = 0;
  for (int k = 0; k < n && rc == 0; k++) {
    char file[64];
    snprintf(file, sizeof file, "model-%05d-of-%05d.safetensors", k + 1, n);
    rc = write_shard(m, dir, file, start[k], start[k + 1], LT_ST_F32);
    for (int i = start[k]; i < start[k + 1]; i++) {
      lt_buf_puts(&idx, i ? ",\n    " : "\n    ");
      lt_json_quote(&idx, m->tensors[i].name);
      lt_buf_printf(&idx, ": \"%s\"", file);
    }
  }
  lt_buf_puts(&idx, "\n  }\n}\n");
  free(start);
  char path[4096];
  if (rc == 0 && lt_buf_ok(&idx) < 0) rc = lt_error_set(LT_ENOMEM, "out of memory");
  if (rc == 0) rc = lt_path_join(path, sizeof path, dir, "model.safetensors.index.json");
  if (rc == 0) rc = lt_fs_write_atomic(path, idx.data, idx.len);
  lt_buf_free(&idx);
  /* A single file left from before would shadow the index when loading. */
  if (rc == 0 && lt_path_join(path, sizeof path, dir, "model.safetensors") == 0 && lt_fs_exists(path) &&
      unlink(path) < 0)
    rc = lt_error_set(LT_EIO, "cannot remove %s: %s", path, strerror(errno));
  return rc;
}

/* config.json (saying the dtype of model.safetensors) and generation_config.json. */
static int write_configs(const lt_model_t *m, const char *dir, lt_st_dtype dtype) {
  int rc = lt_fs_mkdirs(dir, 0755);
  if (rc < 0) return rc;
  char *cfg = lt_model_config_json(&m->cfg);
  if (!cfg) return lt_error_set(LT_ENOMEM, "out of memory");
  char *dt = strstr(cfg, "\"torch_dtype\": \"float32\"");
  if (dt && dtype == LT_ST_BF16) { /* transformers reads torch_dtype as the checkpoint's own dtype */
    char *b = malloc(strlen(cfg) + 2);
    if (!b) {
      free(cfg);
      return lt_error_set(LT_ENOMEM, "out of memory");
    }
    size_t pre = (size_t)(dt - cfg) + strlen("\"torch_dtype\": \"");
    memcpy(b, cfg, pre);
    strcpy(b + pre, "bfloat16");
    strcpy(b + pre + 8, dt + strlen("\"torch_dtype\": \"float32"));
    free(cfg);
    cfg = b;
  }
  char path[4096];
  if ((rc = lt_path_join(path, sizeof path, dir, "config.json")) == 0) rc = lt_fs_write_atomic(path, cfg, strlen(cfg));
  free(cfg);
  if (rc == 0) rc = write_generation_config(m, dir);
  return rc;
}

int lt_model_save_sharded(const lt_model_t *m, const char *dir, int64_t max_shard_bytes) {
  int rc = write_configs(m, dir, LT_ST_F32);
  if (rc < 0) return rc;
  int64_t total = 0;
  for (int i = 0; i < m->ntensors; i++) total += tensor_bytes(&m->tensors[i]);
  if (max_shard_bytes > 0 && total > max_shard_bytes) return save_shards(m, dir, max_shard_bytes);
  return write_shard(m, dir, "model.safetensors", 0, m->ntensors, LT_ST_F32);
}

int lt_model_save(const lt_model_t *m, const char *dir) { return lt_model_save_sharded(m, dir, 0); }

int lt_model_save_as(const lt_model_t *m, const char *dir, lt_st_dtype dtype) {
  int rc = write_configs(m, dir, dtype);
  if (rc == 0) rc = write_shard(m, dir, "model.safetensors", 0, m->ntensors, dtype);
  char path[4096];
  if (rc == 0) rc = lt_path_join(path, sizeof path, dir, "master.safetensors");
  if (rc < 0) return rc;
  if (dtype != LT_ST_F32) return write_shard(m, dir, "master.safetensors", 0, m->ntensors, LT_ST_F32);
  /* An fp32 version is its own master: a stale one from before would be read instead of it. */
  if (lt_fs_exists(path) && unlink(path) < 0)
    return lt_error_set(LT_EIO, "cannot remove %s: %s", path, strerror(errno));
  return 0;
}
