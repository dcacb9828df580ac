/* LoRA adapters (learner/lora.h): PEFT's initialisation, the adapted forward and the adapters' gradients against an
 * independent float64 PyTorch implementation (tests/ref/lora_ref.py, Debian's python3-torch), dense and MoE, the files
 * in PEFT's layout, merging, and the config's refusals. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "learner/lora.h"
#include "learner/model.h"
#include "learner/safetensors.h"
#include "learner/schema.h"
#include "tests/support/harness.h"
#include "train/internal.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/buf.h"
#include "util/json.h"
#include "util/rng.h"

static const lt_tensor_t *find(const lt_lora_t *l, const char *name) {
  for (int i = 0; i < l->ntensors; i++)
    if (!strcmp(l->tensors[i].name, name)) return &l->tensors[i];
  return NULL;
}

static lt_model_t *small(int moe) {
  const char *json =
      moe ? "{\"model_type\": \"qwen3_moe\", \"vocab_size\": 29, \"hidden_size\": 16, \"num_hidden_layers\": 3,"
            " \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"head_dim\": 8,"
            " \"intermediate_size\": 12, \"moe_intermediate_size\": 6, \"num_experts\": 4,"
            " \"num_experts_per_tok\": 2, \"norm_topk_prob\": true, \"mlp_only_layers\": [1],"
            " \"max_position_embeddings\": 64, \"rms_norm_eps\": 1e-6}"
          : "{\"model_type\": \"qwen3\", \"vocab_size\": 29, \"hidden_size\": 16, \"num_hidden_layers\": 2,"
            " \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"head_dim\": 8,"
            " \"intermediate_size\": 20, \"max_position_embeddings\": 64, \"sliding_window\": 4,"
            " \"layer_types\": [\"sliding_attention\", \"full_attention\"], \"rms_norm_eps\": 1e-6}";
  lt_model_config_t cfg;
  cr_assert_eq(lt_model_config_parse(json, strlen(json), "small", &cfg), 0, "%s", lt_error_msg());
  lt_model_t *m;
  cr_assert_eq(lt_model_create(&cfg, &m), 0);
  lt_model_init_random(m, 3, 0.3f);
  return m;
}

static const int32_t toks[] = {1, 5, 7, 2, 9, 11, 3, 4, 22, 0, 13, 6, 28, 17};
#define NT 14

/* Logprobs of toks as one sequence (route: keep-routing ids, or NULL). */
static const float *logprobs(lt_model_t *m, const uint16_t *route) {
  static const int start[] = {0, NT};
  lt_batch_t b = {.nseq = 1, .start = start, .tokens = toks, .route_ids = route};
  lt_fwd_out_t o;
  cr_assert_eq(lt_model_forward(m, &b, &o), 0, "%s", lt_error_msg());
  return o.logprobs;
}

/* PEFT's default: A ~ U(−1/√in, 1/√in) (kaiming_uniform_, a = √5), B = 0, scale alpha/r; the adapted model is its base,
 * to the bit. */
Test(learner_lora, peft_init_starts_at_the_base) {
  lt_model_t *m = small(1);
  cr_assert_eq(lt_model_eval_alloc(m, NT, NT), 0);
  float base[NT];
  memcpy(base, logprobs(m, NULL), sizeof base);
  lt_lora_cfg_t c = {.rank = 4, .alpha = 8, .targets = 0x7f, .init_seed = 1};
  lt_lora_t *l;
  cr_assert_eq(lt_lora_create(m, &c, &l), 0);
  lt_lora_init(l);
  cr_assert_float_eq(l->scale, 2.0f, 0);
  int nA = 0;
  for (int i = 0; i < l->ntensors; i++) {
    const lt_tensor_t *t = &l->tensors[i];
    const float *p = l->params + t->offset;
    size_t n = (size_t)t->rows * t->cols;
    int is_a = strstr(t->name, ".lora_A.weight") != NULL;
    double bound = 1 / sqrt((double)t->cols), mx = 0;
    for (size_t k = 0; k < n; k++) mx = fmax(mx, fabs(p[k]));
    if (is_a) {
      nA++;
      cr_expect_eq(t->rows, 4, "%s: A is [r, in]", t->name);
      cr_expect(mx <= bound && mx > 0.5 * bound, "%s: max |A| %g against the bound %g", t->name, mx, bound);
    } else {
      cr_expect_eq(t->cols, 4, "%s: B is [out, r]", t->name);
      cr_expect_eq(mx, 0, "%s: B starts at zero", t->name);
    }
  }
  /* 3 layers × 4 attention projections, the dense layer's 3 and 2 MoE layers × 4 experts × 3. */
  cr_expect_eq(nA, 12 + 3 + 24);
  cr_expect_not_null(find(l, "base_model.model.model.layers.0.mlp.experts.3.down_proj.lora_B.weight"));
  cr_expect_not_null(find(l, "base_model.model.model.layers.1.mlp.gate_proj.lora_A.weight"));
  lt_model_attach_lora(m, l);
  const float *lp = logprobs(m, NULL);
  for (int i = 0; i < NT; i++) cr_expect_eq(lp[i], base[i], "token %d: %g vs the base's %g", i, lp[i], base[i]);
  lt_model_free(m);
}

/* A model and a random adapter (B too, so that A's gradient is not zero) written to dir/base and dir/adapter. */
static lt_model_t *adapted(int moe, unsigned targets, const char *dir) {
  lt_model_t *m = small(moe);
  lt_lora_cfg_t c = {.rank = 3, .alpha = 5, .targets = targets, .init_seed = 2};
  lt_lora_t *l;
  cr_assert_eq(lt_lora_create(m, &c, &l), 0);
  lt_rng_t r;
  lt_rng_seed(&r, 9);
  for (size_t i = 0; i < l->nparams; i++) l->params[i] = (float)(0.3 * lt_rng_normal(&r));
  char p[4096];
  snprintf(p, sizeof p, "%s/base", dir);
  cr_assert_eq(lt_model_save(m, p), 0, "%s", lt_error_msg());
  snprintf(p, sizeof p, "%s/adapter", dir);
  cr_assert_eq(lt_lora_save(l, p, LT_ST_F32, "../base"), 0, "%s", lt_error_msg());
  lt_model_attach_lora(m, l);
  cr_assert_eq(lt_model_train_alloc(m, NT, NT), 0);
  return m;
}

/* The adapted forward and every adapter tensor's gradient of Σ c_t · log p_t against float64 PyTorch. */
static void torch_parity(int moe, unsigned targets) {
  cr_assert_eq(system("/usr/bin/python3 -c 'import torch' 2>/dev/null"), 0,
               "Debian's python3-torch is needed (scripts/deps.sh installs it)");
  char *d = lt_test_tmpdir("lora-torch");
  lt_model_t *m = adapted(moe, targets, d);
  lt_lora_t *l = m->lora;
  float c[NT];
  lt_rng_t r;
  lt_rng_seed(&r, 4);
  for (int i = 0; i < NT; i++) c[i] = (float)lt_rng_normal(&r);
  int nml = lt_model_moe_layers(&m->cfg), K = m->cfg.topk;
  float lp[NT];
  memcpy(lp, logprobs(m, NULL), sizeof lp);
  lt_model_zero_grad(m);
  cr_assert_eq(lt_model_backward(m, c, NULL), 0, "%s", lt_error_msg());
  /* The request: tokens, coefficients and the experts longtail chose (pinned on both sides). */
  lt_buf_t b = {0};
  lt_buf_puts(&b, "{\"tokens\": [");
  for (int i = 0; i < NT; i++) lt_buf_printf(&b, "%s%d", i ? ", " : "", toks[i]);
  lt_buf_puts(&b, "], \"coef\": [");
  for (int i = 0; i < NT; i++) lt_buf_printf(&b, "%s%.9g", i ? ", " : "", (double)c[i]);
  lt_buf_puts(&b, "]");
  if (nml) {
    lt_buf_puts(&b, ", \"route\": [");
    for (int t = 0; t < NT; t++) {
      lt_buf_puts(&b, t ? ", [" : "[");
      for (int l2 = 0, ml = 0; l2 < m->cfg.layers; l2++) {
        if (!m->cfg.moe[l2]) continue;
        lt_buf_puts(&b, ml++ ? ", [" : "[");
        for (int k = 0; k < K; k++) lt_buf_printf(&b, "%s%d", k ? ", " : "", m->acts->ids[l2][t * K + k]);
        lt_buf_puts(&b, "]");
      }
      lt_buf_puts(&b, "]");
    }
    lt_buf_puts(&b, "]");
  }
  lt_buf_puts(&b, "}\n");
  char in[4200];
  snprintf(in, sizeof in, "%s/in.jsonl", d);
  cr_assert_eq(lt_fs_write_atomic(in, b.data, b.len), 0);
  lt_buf_free(&b);
  lt_run_t run;
  cr_assert_eq(lt_test_sh(&run, 120, "/usr/bin/python3 '%s/tests/ref/lora_ref.py' '%s/base' '%s/adapter' < '%s'",
                          lt_test_root(), d, d, in),
               0);
  cr_assert_eq(run.status, 0, "reference failed: %s", run.err);
  cJSON *j = cJSON_Parse(run.out);
  cr_assert_not_null(j, "reference output: %s", run.out);
  float *ref;
  int n;
  cr_assert_eq(lt_json_get_f32_array(j, "logprobs", &ref, &n), 0);
  cr_assert_eq(n, NT);
  for (int i = 0; i < NT; i++)
    cr_expect(fabs(lp[i] - ref[i]) < 2e-5, "logprob %d: %g vs PyTorch's %g", i, lp[i], ref[i]);
  free(ref);
  const cJSON *g = cJSON_GetObjectItem(j, "grads");
  cr_assert_eq(cJSON_GetArraySize(g), l->ntensors, "the same adapter tensors");
  for (int t = 0; t < l->ntensors; t++) {
    const lt_tensor_t *tt = &l->tensors[t];
    float *want;
    cr_assert_eq(lt_json_get_f32_array(g, tt->name, &want, &n), 0, "PyTorch has no gradient of %s", tt->name);
    cr_assert_eq(n, tt->rows * tt->cols);
    double scale = 1e-3, err = 0;
    for (int k = 0; k < n; k++) scale = fmax(scale, fabs(want[k]));
    for (int k = 0; k < n; k++) err = fmax(err, fabs(l->grads[tt->offset + k] - want[k]));
    cr_expect(err <= 1e-4 * scale, "%s: max |longtail − PyTorch| %g against max |grad| %g", tt->name, err, scale);
    free(want);
  }
  cJSON_Delete(j);
  lt_run_free(&run);
  lt_model_free(m);
  lt_test_rmdir(d);
}

Test(learner_lora, dense_adapters_match_float64_pytorch, .timeout = 120) { torch_parity(0, 0x7f); }
Test(learner_lora, moe_expert_adapters_match_float64_pytorch, .timeout = 120) { torch_parity(1, 0x7f); }
/* q_proj and down_proj only: the others stay plain, in the forward and in the files. */
Test(learner_lora, some_targets_match_float64_pytorch, .timeout = 120) { torch_parity(1, 1u << 0 | 1u << 6); }

/* The files: PEFT's keys and shapes, adapter_config.json's fields; loading the directory gives the base with the
 * adapter (its base found through base_model_name_or_path); merging W + (alpha/r)·B·A gives the same function. */
Test(learner_lora, peft_files_round_trip_and_merge) {
  char *d = lt_test_tmpdir("lora-files");
  lt_model_t *m = adapted(1, 0x7f, d);
  char p[4200];
  snprintf(p, sizeof p, "%s/adapter/adapter_model.safetensors", d);
  lt_st_file_t *f;
  cr_assert_eq(lt_st_open(p, &f), 0, "%s", lt_error_msg());
  const lt_st_entry_t *e = lt_st_find(f, "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight");
  cr_assert_not_null(e);
  cr_expect(e->ndim == 2 && e->shape[0] == 3 && e->shape[1] == 16, "lora_A is [r, in]");
  e = lt_st_find(f, "base_model.model.model.layers.2.mlp.experts.1.down_proj.lora_B.weight");
  cr_assert_not_null(e);
  cr_expect(e->ndim == 2 && e->shape[0] == 16 && e->shape[1] == 3, "lora_B is [out, r]");
  cr_expect_str_eq(lt_st_meta(f, "format"), "pt");
  lt_st_close(f);
  snprintf(p, sizeof p, "%s/adapter/adapter_config.json", d);
  cJSON *j;
  cr_assert_eq(lt_json_parse_file(p, &j), 0);
  cr_expect_str_eq(cJSON_GetObjectItem(j, "peft_type")->valuestring, "LORA");
  cr_expect_eq(cJSON_GetObjectItem(j, "r")->valuedouble, 3);
  cr_expect_eq(cJSON_GetObjectItem(j, "lora_alpha")->valuedouble, 5);
  cr_expect_str_eq(cJSON_GetObjectItem(j, "base_model_name_or_path")->valuestring, "../base");
  cr_expect_str_eq(cJSON_GetObjectItem(j, "task_type")->valuestring, "CAUSAL_LM");
  cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "target_modules")), 7);
  cJSON_Delete(j);
  snprintf(p, sizeof p, "%s/adapter", d);
  cr_expect_str_eq(lt_model_weights_file(p), "adapter_model.safetensors");
  lt_model_t *back;
  cr_assert_eq(lt_model_load(p, &back), 0, "%s", lt_error_msg());
  cr_assert_not_null(back->lora);
  cr_assert_eq(memcmp(back->lora->params, m->lora->params, sizeof(float) * m->lora->nparams), 0);
  cr_assert_eq(memcmp(back->params, m->params, sizeof(float) * m->nparams), 0);
  cr_assert_eq(lt_model_eval_alloc(back, NT, NT), 0);
  float want[NT];
  memcpy(want, logprobs(back, NULL), sizeof want);
  lt_model_t *merged;
  cr_assert_eq(lt_lora_merged(back, &merged), 0);
  cr_assert_null(merged->lora);
  cr_assert_eq(lt_model_eval_alloc(merged, NT, NT), 0);
  const float *got = logprobs(merged, NULL);
  for (int i = 0; i < NT; i++)
    cr_expect(fabs(got[i] - want[i]) < 1e-5, "token %d: merged %g, adapted %g", i, got[i], want[i]);
  lt_model_free(merged);
  lt_model_free(back);
  lt_model_free(m);
  lt_test_rmdir(d);
}

/* An adapter of another model (a MoE model's, for a dense one): refused, naming the tensor. */
Test(learner_lora, an_adapter_for_another_model_is_refused) {
  char *d = lt_test_tmpdir("lora-other");
  lt_model_free(adapted(1, 0x7f, d));
  lt_model_t *dense = small(0);
  char p[4200];
  snprintf(p, sizeof p, "%s/adapter", d);
  lt_lora_t *l;
  cr_assert_lt(lt_lora_load(p, dense, &l), 0);
  cr_expect(strstr(lt_error_msg(), "adapter_model.safetensors: tensor 'base_model.model.model.layers.0."), "%s",
            lt_error_msg());
  lt_model_free(dense);
  lt_test_rmdir(d);
}

static int load_cfg(const char *json, lt_config_t *cfg) {
  return lt_config_from_json(cfg, cJSON_Parse(json), NULL, 0, lt_all_schemas, lt_all_nschemas);
}

/* The validator refuses a target the model does not have, naming it. */
Test(learner_lora, validator_names_an_unknown_target) {
  lt_config_t cfg;
  cr_assert_eq(load_cfg("{\"learner\": {\"lora\": {\"rank\": 8, \"targets\": [\"q_proj\", \"c_attn\"]}}}", &cfg), 0);
  cr_expect_eq(lt_learner_config_check(&cfg), LT_ECONFIG);
  cr_expect(strstr(lt_error_msg(), "learner.lora.targets") && strstr(lt_error_msg(), "\"c_attn\""), "%s",
            lt_error_msg());
  lt_config_free(&cfg);
  cr_assert_eq(
      load_cfg("{\"learner\": {\"lora\": {\"rank\": 8}, \"critic\": {\"lora\": {\"targets\": [\"gate\"]}}}}", &cfg), 0);
  cr_expect_eq(lt_learner_config_check(&cfg), LT_ECONFIG, "a MoE router is never adapted");
  cr_expect(strstr(lt_error_msg(), "learner.critic.lora.targets") && strstr(lt_error_msg(), "\"gate\""), "%s",
            lt_error_msg());
  lt_config_free(&cfg);
  cr_assert_eq(load_cfg("{\"learner\": {\"lora\": {\"rank\": 8, \"targets\": [\"all-linear\"]}}}", &cfg), 0);
  cr_expect_eq(lt_learner_config_check(&cfg), 0, "%s", lt_error_msg());
  lt_lora_cfg_t c;
  cr_expect_eq(lt_learner_lora_cfg(&cfg, 1, &c), 0);
  cr_expect(c.rank == 8 && c.targets == 0x7f && c.alpha == 32, "the critic's default: the policy's adapters");
  lt_config_free(&cfg);
}

/* The CUDA learner has no LoRA path (no GPU was lent to verify one): learner.device "cuda" with learner.lora is a
 * config error naming both, on any machine. */
Test(learner_lora, cuda_learner_refuses_lora) {
  lt_config_t cfg;
  cr_assert_eq(load_cfg("{\"learner\": {\"device\": \"cuda\", \"lora\": {\"rank\": 4}}}", &cfg), 0);
  lt_trainer_cfg_t tc;
  cr_expect_eq(lt__trainer_cfg(&cfg, &tc), LT_ECONFIG);
  cr_expect(strstr(lt_error_msg(), "\"cuda\"") && strstr(lt_error_msg(), "learner.lora"), "%s", lt_error_msg());
  lt_config_free(&cfg);
  /* auto on a machine with a GPU, or cpu: the CPU learner trains the adapters. */
  cr_assert_eq(load_cfg("{\"learner\": {\"device\": \"auto\", \"lora\": {\"rank\": 4}}}", &cfg), 0);
  cr_expect_eq(lt__trainer_cfg(&cfg, &tc), 0, "%s", lt_error_msg());
  cr_expect_eq(tc.cuda, 0);
  cr_expect_eq(tc.lora.rank, 4);
  lt_config_free(&cfg);
}
