/* Hugging Face config.json ⇄ lt_model_config_t. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "learner/model.h"
#include "util/buf.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/json.h"

typedef struct {
  const cJSON *root;
  const char *what;
} rd_t;

static int get_int(rd_t *r, const char *key, int required, int def, int lo, int hi, int *out) {
  const cJSON *n = cJSON_GetObjectItemCaseSensitive(r->root, key);
  if (!n || cJSON_IsNull(n)) {
    if (required) return lt_error_set(LT_EFORMAT, "%s: %s: missing", r->what, key);
    *out = def;
    return 0;
  }
  if (!cJSON_IsNumber(n) || n->valuedouble != floor(n->valuedouble))
    return lt_error_set(LT_EFORMAT, "%s: %s: expected integer", r->what, key);
  if (n->valuedouble < lo || n->valuedouble > hi)
    return lt_error_set(LT_EFORMAT, "%s: %s: %.0f is outside [%d, %d]", r->what, key, n->valuedouble, lo, hi);
  *out = (int)n->valuedouble;
  return 0;
}

static int get_num(rd_t *r, const char *key, double def, double lo, double hi, double *out) {
  const cJSON *n = cJSON_GetObjectItemCaseSensitive(r->root, key);
  if (!n || cJSON_IsNull(n)) {
    *out = def;
    return 0;
  }
  if (!cJSON_IsNumber(n)) return lt_error_set(LT_EFORMAT, "%s: %s: expected number", r->what, key);
  if (!(n->valuedouble >= lo && n->valuedouble <= hi))
    return lt_error_set(LT_EFORMAT, "%s: %s: %g is outside [%g, %g]", r->what, key, n->valuedouble, lo, hi);
  *out = n->valuedouble;
  return 0;
}

static int get_bool(rd_t *r, const char *key, int def, int *out) {
  const cJSON *n = cJSON_GetObjectItemCaseSensitive(r->root, key);
  if (!n || cJSON_IsNull(n)) {
    *out = def;
    return 0;
  }
  if (!cJSON_IsBool(n)) return lt_error_set(LT_EFORMAT, "%s: %s: expected boolean", r->what, key);
  *out = cJSON_IsTrue(n);
  return 0;
}

/* First id of an int-or-list token id field, -1 if absent. */
static int get_token_id(rd_t *r, const char *key, int *out) {
  const cJSON *n = cJSON_GetObjectItemCaseSensitive(r->root, key);
  *out = -1;
  if (!n || cJSON_IsNull(n)) return 0;
  if (cJSON_IsArray(n)) n = n->child;
  if (!n) return 0;
  if (!cJSON_IsNumber(n)) return lt_error_set(LT_EFORMAT, "%s: %s: expected token id", r->what, key);
  *out = (int)n->valuedouble;
  return 0;
}

static int parse_layer_types(rd_t *r, lt_model_config_t *c, int use_sliding, int max_window_layers) {
  const cJSON *lt = cJSON_GetObjectItemCaseSensitive(r->root, "layer_types");
  if (lt && !cJSON_IsNull(lt)) {
    if (!cJSON_IsArray(lt) || cJSON_GetArraySize(lt) != c->layers)
      return lt_error_set(LT_EFORMAT, "%s: layer_types: expected an array of num_hidden_layers (%d) strings", r->what,
                          c->layers);
    int i = 0;
    for (const cJSON *e = lt->child; e; e = e->next, i++) {
      if (cJSON_IsString(e) && strcmp(e->valuestring, "full_attention") == 0) c->sliding[i] = 0;
      else if (cJSON_IsString(e) && strcmp(e->valuestring, "sliding_attention") == 0) c->sliding[i] = 1;
      else
        return lt_error_set(LT_EFORMAT, "%s: layer_types[%d]: expected \"full_attention\" or \"sliding_attention\"",
                            r->what, i);
    }
  } else {
    /* Hugging Face's rule when layer_types is absent. */
    for (int i = 0; i < c->layers; i++) c->sliding[i] = use_sliding && c->window > 0 && i >= max_window_layers;
  }
  for (int i = 0; i < c->layers; i++)
    if (c->sliding[i] && c->window <= 0)
      return lt_error_set(LT_EFORMAT, "%s: layer %d uses sliding attention but sliding_window is not set", r->what, i);
  return 0;
}

int lt_model_config_parse(const char *text, size_t len, const char *what, lt_model_config_t *c) {
  cJSON *root;
  int rc = lt_json_parse(text, len, what, &root);
  if (rc < 0) return rc;
  memset(c, 0, sizeof *c);
  rd_t r = {root, what};
  const cJSON *mt = cJSON_GetObjectItemCaseSensitive(root, "model_type");
  if (!cJSON_IsString(mt)) {
    rc = lt_error_set(LT_EFORMAT, "%s: model_type: missing", what);
    goto out;
  }
  if (strcmp(mt->valuestring, "qwen3") != 0 && strcmp(mt->valuestring, "qwen3_moe") != 0) {
    rc = lt_error_set(LT_EUNSUPP, "%s: model_type: '%s' is not supported (qwen3, qwen3_moe)", what, mt->valuestring);
    goto out;
  }
  snprintf(c->model_type, sizeof c->model_type, "%s", mt->valuestring);
  int is_moe = strcmp(c->model_type, "qwen3_moe") == 0;
  double eps, theta;
  int use_sliding = 0, max_window_layers = 0, sparse_step = 1;
  if ((rc = get_int(&r, "vocab_size", 1, 0, 1, 1 << 24, &c->vocab)) ||
      (rc = get_int(&r, "hidden_size", 1, 0, 1, 1 << 16, &c->hidden)) ||
      (rc = get_int(&r, "num_hidden_layers", 1, 0, 1, LT_MAX_LAYERS, &c->layers)) ||
      (rc = get_int(&r, "num_attention_heads", 1, 0, 1, 1024, &c->heads)) ||
      (rc = get_int(&r, "num_key_value_heads", 0, c->heads, 1, 1024, &c->kv_heads)) ||
      (rc = get_int(&r, "head_dim", 0, c->hidden / c->heads, 2, 4096, &c->head_dim)) ||
      (rc = get_int(&r, "intermediate_size", !is_moe, 0, 0, 1 << 20, &c->inter)) ||
      (rc = get_int(&r, "max_position_embeddings", 1, 0, 1, 1 << 24, &c->max_pos)) ||
      (rc = get_num(&r, "rms_norm_eps", 1e-6, 0, 1, &eps)) ||
      (rc = get_num(&r, "rope_theta", 10000.0, 1, 1e12, &theta)) ||
      (rc = get_bool(&r, "tie_word_embeddings", 0, &c->tied)) ||
      (rc = get_bool(&r, "use_sliding_window", 0, &use_sliding)) ||
      (rc = get_int(&r, "max_window_layers", 0, 0, 0, 1 << 20, &max_window_layers)) ||
      (rc = get_int(&r, "sliding_window", 0, 0, 0, 1 << 24, &c->window)) ||
      (rc = get_token_id(&r, "bos_token_id", &c->bos_id)) || (rc = get_token_id(&r, "eos_token_id", &c->eos_id)))
    goto out;
  c->eps = (float)eps;
  c->rope_theta = (float)theta;
  if (c->head_dim % 2) {
    rc = lt_error_set(LT_EFORMAT, "%s: head_dim: must be even for rotary embeddings", what);
    goto out;
  }
  if (c->heads % c->kv_heads) {
    rc = lt_error_set(LT_EFORMAT, "%s: num_attention_heads (%d) must be a multiple of num_key_value_heads (%d)", what,
                      c->heads, c->kv_heads);
    goto out;
  }
  if (is_moe) {
    if ((rc = get_int(&r, "num_experts", 1, 0, 0, 65535, &c->experts)) ||
        (rc = get_int(&r, "num_experts_per_tok", 1, 0, 1, 256, &c->topk)) ||
        (rc = get_int(&r, "moe_intermediate_size", 1, 0, 1, 1 << 20, &c->moe_inter)) ||
        (rc = get_bool(&r, "norm_topk_prob", 0, &c->norm_topk)) ||
        (rc = get_int(&r, "decoder_sparse_step", 0, 1, 1, LT_MAX_LAYERS, &sparse_step)))
      goto out;
    if (c->experts > 0 && c->topk > c->experts) {
      rc = lt_error_set(LT_EFORMAT, "%s: num_experts_per_tok (%d) exceeds num_experts (%d)", what, c->topk, c->experts);
      goto out;
    }
  }
  for (int i = 0; i < c->layers; i++) c->moe[i] = is_moe && c->experts > 0 && (i + 1) % sparse_step == 0;
  const cJSON *mlp_only = cJSON_GetObjectItemCaseSensitive(root, "mlp_only_layers");
  if (mlp_only && !cJSON_IsNull(mlp_only)) {
    if (!cJSON_IsArray(mlp_only)) {
      rc = lt_error_set(LT_EFORMAT, "%s: mlp_only_layers: expected an array of layer indices", what);
      goto out;
    }
    for (const cJSON *e = mlp_only->child; e; e = e->next) {
      if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble >= c->layers) {
        rc = lt_error_set(LT_EFORMAT, "%s: mlp_only_layers: %g is not a layer index", what,
                          cJSON_IsNumber(e) ? e->valuedouble : -1.0);
        goto out;
      }
      c->moe[(int)e->valuedouble] = 0;
    }
  }
  for (int i = 0; i < c->layers; i++)
    if (!c->moe[i] && c->inter <= 0) {
      rc = lt_error_set(LT_EFORMAT, "%s: intermediate_size: layer %d is dense and needs it", what, i);
      goto out;
    }
  if ((rc = parse_layer_types(&r, c, use_sliding, max_window_layers))) goto out;

  /* Values that change the computation in ways longtail does not implement. */
  const cJSON *n;
  if ((n = cJSON_GetObjectItemCaseSensitive(root, "attention_bias")) && cJSON_IsTrue(n)) {
    rc = lt_error_set(LT_EUNSUPP, "%s: attention_bias: true is not supported", what);
    goto out;
  }
  if ((n = cJSON_GetObjectItemCaseSensitive(root, "hidden_act")) &&
      (!cJSON_IsString(n) || strcmp(n->valuestring, "silu"))) {
    rc = lt_error_set(LT_EUNSUPP, "%s: hidden_act: only \"silu\" is supported", what);
    goto out;
  }
  if ((n = cJSON_GetObjectItemCaseSensitive(root, "rope_scaling")) && !cJSON_IsNull(n)) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(n, "rope_type");
    if (!t) t = cJSON_GetObjectItemCaseSensitive(n, "type");
    if (!cJSON_IsString(t) || strcmp(t->valuestring, "default") != 0) {
      rc = lt_error_set(LT_EUNSUPP, "%s: rope_scaling: only null or {\"rope_type\": \"default\"} is supported", what);
      goto out;
    }
  }
  if ((n = cJSON_GetObjectItemCaseSensitive(root, "attention_dropout")) && cJSON_IsNumber(n) && n->valuedouble != 0) {
    rc = lt_error_set(LT_EUNSUPP, "%s: attention_dropout: only 0 is supported", what);
    goto out;
  }
  const cJSON *arch = cJSON_GetObjectItemCaseSensitive(root, "architectures");
  for (const cJSON *e = cJSON_IsArray(arch) ? arch->child : NULL; e; e = e->next)
    if (cJSON_IsString(e) && strstr(e->valuestring, "ForTokenClassification")) c->critic = 1;
  if (c->critic) {
    int labels;
    if ((rc = get_int(&r, "num_labels", 0, 1, 1, 1, &labels))) goto out;
    c->tied = 0;
  }
  rc = 0;
out:
  cJSON_Delete(root);
  return rc;
}

int lt_model_config_load(const char *path, lt_model_config_t *cfg) {
  char *text;
  size_t len;
  int rc = lt_fs_read_file(path, 16u << 20, &text, &len);
  if (rc < 0) return rc;
  rc = lt_model_config_parse(text, len, path, cfg);
  free(text);
  return rc;
}

char *lt_model_config_json(const lt_model_config_t *c) {
  lt_buf_t b = {0};
  int is_moe = strcmp(c->model_type, "qwen3_moe") == 0;
  const char *arch = c->critic ? (is_moe ? "Qwen3MoeForTokenClassification" : "Qwen3ForTokenClassification")
                               : (is_moe ? "Qwen3MoeForCausalLM" : "Qwen3ForCausalLM");
  lt_buf_printf(&b, "{\n  \"architectures\": [\"%s\"],\n  \"model_type\": \"%s\",\n", arch, c->model_type);
  lt_buf_printf(&b, "  \"vocab_size\": %d,\n  \"hidden_size\": %d,\n  \"num_hidden_layers\": %d,\n", c->vocab,
                c->hidden, c->layers);
  lt_buf_printf(&b, "  \"num_attention_heads\": %d,\n  \"num_key_value_heads\": %d,\n  \"head_dim\": %d,\n", c->heads,
                c->kv_heads, c->head_dim);
  if (c->inter > 0) lt_buf_printf(&b, "  \"intermediate_size\": %d,\n", c->inter);
  if (is_moe) {
    lt_buf_printf(&b, "  \"num_experts\": %d,\n  \"num_experts_per_tok\": %d,\n  \"moe_intermediate_size\": %d,\n",
                  c->experts, c->topk, c->moe_inter);
    lt_buf_printf(&b, "  \"norm_topk_prob\": %s,\n  \"decoder_sparse_step\": 1,\n  \"mlp_only_layers\": [",
                  c->norm_topk ? "true" : "false");
    int first = 1;
    for (int i = 0; i < c->layers; i++)
      if (!c->moe[i]) {
        lt_buf_printf(&b, first ? "%d" : ", %d", i);
        first = 0;
      }
    lt_buf_puts(&b, "],\n");
  }
  lt_buf_printf(&b, "  \"max_position_embeddings\": %d,\n  \"rms_norm_eps\": %g,\n  \"rope_theta\": %.9g,\n",
                c->max_pos, c->eps, c->rope_theta);
  lt_buf_printf(&b, "  \"tie_word_embeddings\": %s,\n", c->tied ? "true" : "false");
  int any_sliding = 0;
  for (int i = 0; i < c->layers; i++) any_sliding |= c->sliding[i];
  if (any_sliding) {
    lt_buf_printf(&b, "  \"use_sliding_window\": true,\n  \"sliding_window\": %d,\n  \"layer_types\": [", c->window);
    for (int i = 0; i < c->layers; i++)
      lt_buf_printf(&b, "%s\"%s\"", i ? ", " : "", c->sliding[i] ? "sliding_attention" : "full_attention");
    lt_buf_puts(&b, "],\n");
  } else {
    lt_buf_puts(&b, "  \"use_sliding_window\": false,\n  \"sliding_window\": null,\n");
  }
  if (c->critic) lt_buf_puts(&b, "  \"num_labels\": 1,\n");
  if (c->bos_id >= 0) lt_buf_printf(&b, "  \"bos_token_id\": %d,\n", c->bos_id);
  if (c->eos_id >= 0) lt_buf_printf(&b, "  \"eos_token_id\": %d,\n", c->eos_id);
  lt_buf_puts(&b,
              "  \"hidden_act\": \"silu\",\n  \"attention_bias\": false,\n  \"attention_dropout\": 0.0,\n"
              "  \"rope_scaling\": null,\n  \"torch_dtype\": \"float32\"\n}\n");
  return lt_buf_take(&b);
}

int lt_model_moe_layers(const lt_model_config_t *c) {
  int n = 0;
  for (int i = 0; i < c->layers; i++) n += c->moe[i];
  return n;
}

int64_t lt_model_active_params(const lt_model_config_t *c) {
  int64_t D = c->hidden, hd = c->head_dim;
  int64_t attn = D * hd * (2 * c->heads + 2 * c->kv_heads);
  int64_t total = 0;
  for (int i = 0; i < c->layers; i++) {
    total += attn;
    if (c->moe[i]) total += D * c->experts + 3 * D * c->moe_inter * c->topk;
    else total += 3 * D * c->inter;
  }
  total += D * (c->critic ? 1 : c->vocab);
  return total;
}
