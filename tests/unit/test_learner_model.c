/* The model against an independent numpy implementation of Hugging Face's
 * Qwen3/Qwen3-MoE forward, checkpoint round trips and bad files, the engine's
 * KV-cache and batching consistency, optimizers. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "infer/engine.h"
#include "learner/model.h"
#include "learner/optim.h"
#include "learner/safetensors.h"
#include "tests/support/harness.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/json.h"
#include "util/buf.h"
#include <unistd.h>

/* A small random checkpoint written to dir; the extra JSON is spliced in. */
static void make_ckpt(const char *dir, const char *moe, const char *extra, uint64_t seed, float std) {
  char json[4096];
  snprintf(json, sizeof json,
           "{\"model_type\": \"%s\", \"vocab_size\": 300, \"hidden_size\": 32, \"num_hidden_layers\": 4,"
           " \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"head_dim\": 16, \"intermediate_size\": 48,"
           " \"moe_intermediate_size\": 24, \"num_experts\": 6, \"num_experts_per_tok\": 2,"
           " \"max_position_embeddings\": 128, \"rope_theta\": 1000.0, \"rms_norm_eps\": 1e-5%s%s}",
           moe, extra[0] ? ", " : "", extra);
  lt_model_config_t c;
  cr_assert_eq(lt_model_config_parse(json, strlen(json), "test", &c), 0, "%s", lt_error_msg());
  lt_model_t *m;
  cr_assert_eq(lt_model_create(&c, &m), 0);
  lt_model_init_random(m, seed, std);
  cr_assert_eq(lt_model_save(m, dir), 0, "%s", lt_error_msg());
  lt_model_free(m);
}

/* Rewrites dir/model.safetensors with BF16 tensors (what the Hub ships). */
static void to_bf16(const char *dir) {
  char p[4096];
  snprintf(p, sizeof p, "%s/model.safetensors", dir);
  lt_st_file_t *f;
  cr_assert_eq(lt_st_open(p, &f), 0);
  FILE *o = fopen("/tmp/lt-bf16.tmp", "wb");
  char hdr[65536];
  size_t hl = 0, off = 0;
  hl += (size_t)snprintf(hdr + hl, sizeof hdr - hl, "{");
  for (int i = 0; i < f->n; i++) {
    const lt_st_entry_t *e = &f->entries[i];
    size_t nb = (size_t)lt_st_numel(e) * 2;
    char shape[64];
    if (e->ndim == 1) snprintf(shape, sizeof shape, "[%lld]", (long long)e->shape[0]);
    else snprintf(shape, sizeof shape, "[%lld,%lld]", (long long)e->shape[0], (long long)e->shape[1]);
    hl += (size_t)snprintf(hdr + hl, sizeof hdr - hl,
                           "%s\"%s\":{\"dtype\":\"BF16\",\"shape\":%s,\"data_offsets\":[%zu,%zu]}", i ? "," : "",
                           e->name, shape, off, off + nb);
    off += nb;
  }
  hl += (size_t)snprintf(hdr + hl, sizeof hdr - hl, "}");
  uint64_t len = hl;
  fwrite(&len, 8, 1, o);
  fwrite(hdr, 1, hl, o);
  for (int i = 0; i < f->n; i++) {
    const lt_st_entry_t *e = &f->entries[i];
    int64_t n = lt_st_numel(e);
    float *x = malloc(sizeof(float) * (size_t)n);
    lt_st_read_f32(f, e, x);
    for (int64_t k = 0; k < n; k++) {
      uint16_t h = lt_f32_to_bf16(x[k]);
      fwrite(&h, 2, 1, o);
    }
    free(x);
  }
  fclose(o);
  lt_st_close(f);
  cr_assert_eq(rename("/tmp/lt-bf16.tmp", p), 0);
}

static const char *cases_jsonl =
    "{\"tokens\": [1, 17, 250, 3, 3, 99, 4, 299, 12, 0, 77, 5, 6, 7, 8, 9, 10, 11, 42, 43]}\n"
    "{\"tokens\": [5]}\n"
    "{\"tokens\": [256, 257, 1, 2, 3, 4, 5, 6, 7, 8, 9]}\n";

/* Runs longtail logprobs and the numpy reference on the same lines. */
static void compare_with_reference(const char *dir, double tol) {
  char in[4096];
  snprintf(in, sizeof in, "%s/in.jsonl", dir);
  lt_test_write(in, cases_jsonl);
  lt_run_t a, b;
  cr_assert_eq(lt_test_sh(&a, 120, "'%s' logprobs --model '%s' --input '%s'", lt_test_bin(), dir, in), 0);
  cr_assert_eq(a.status, 0, "%s", a.err);
  cr_assert_eq(lt_test_sh(&b, 120, "/usr/bin/python3 '%s/tests/ref/qwen3_ref.py' '%s' < '%s'", lt_test_root(), dir, in),
               0);
  cr_assert_eq(b.status, 0, "reference failed: %s", b.err);
  char *pa = a.out, *pb = b.out;
  int lines = 0;
  for (;;) {
    char *ea = strchr(pa, '\n'), *eb = strchr(pb, '\n');
    if (!ea || !eb) break;
    *ea = *eb = 0;
    cJSON *ja = cJSON_Parse(pa), *jb = cJSON_Parse(pb);
    cr_assert(ja && jb);
    float *la, *lb;
    int na, nb;
    cr_assert_eq(lt_json_get_f32_array(ja, "logprobs", &la, &na), 0);
    cr_assert_eq(lt_json_get_f32_array(jb, "logprobs", &lb, &nb), 0);
    cr_assert_eq(na, nb);
    for (int i = 0; i < na; i++)
      cr_expect(fabs(la[i] - lb[i]) <= tol, "line %d token %d: %g vs reference %g", lines, i, la[i], lb[i]);
    const cJSON *ca = cJSON_GetObjectItem(ja, "routing_confidence"),
                *cb = cJSON_GetObjectItem(jb, "routing_confidence");
    cr_expect(cJSON_IsNull(ca) == cJSON_IsNull(cb));
    if (cJSON_IsNumber(ca) && cJSON_IsNumber(cb)) cr_expect(fabs(ca->valuedouble - cb->valuedouble) < 1e-5);
    free(la), free(lb);
    cJSON_Delete(ja), cJSON_Delete(jb);
    pa = ea + 1, pb = eb + 1;
    lines++;
  }
  cr_expect_eq(lines, 3);
  lt_run_free(&a);
  lt_run_free(&b);
}

Test(learner_model, matches_reference_moe_sliding_untied, .timeout = 120) {
  char *d = lt_test_tmpdir("ref");
  make_ckpt(d, "qwen3_moe",
            "\"norm_topk_prob\": true, \"mlp_only_layers\": [2], \"sliding_window\": 5, \"layer_types\": "
            "[\"sliding_attention\", \"full_attention\", \"sliding_attention\", \"full_attention\"]",
            3, 0.3f);
  compare_with_reference(d, 1e-4);
  lt_test_rmdir(d);
}

Test(learner_model, matches_reference_moe_tied_sparse_step, .timeout = 120) {
  char *d = lt_test_tmpdir("ref");
  make_ckpt(d, "qwen3_moe", "\"norm_topk_prob\": false, \"tie_word_embeddings\": true, \"decoder_sparse_step\": 2", 4,
            0.3f);
  compare_with_reference(d, 1e-4);
  lt_test_rmdir(d);
}

Test(learner_model, matches_reference_dense_bf16, .timeout = 120) {
  char *d = lt_test_tmpdir("ref");
  make_ckpt(d, "qwen3", "\"use_sliding_window\": true, \"sliding_window\": 4, \"max_window_layers\": 2", 5, 0.3f);
  to_bf16(d);
  compare_with_reference(d, 1e-4);
  lt_test_rmdir(d);
}

Test(learner_model, config_refusals_name_the_field) {
  struct {
    const char *json, *needle;
  } cases[] = {
      {"{\"model_type\": \"llama\"}", "model_type"},
      {"{\"model_type\": \"qwen3\", \"vocab_size\": 8, \"hidden_size\": 8, \"num_hidden_layers\": 1, \"num_attention_heads\": 2, "
       "\"intermediate_size\": 8, \"max_position_embeddings\": 8, \"attention_bias\": true}",
       "attention_bias"},
      {"{\"model_type\": \"qwen3\", \"vocab_size\": 8, \"hidden_size\": 8, \"num_hidden_layers\": 1, \"num_attention_heads\": 2, "
       "\"intermediate_size\": 8, \"max_position_embeddings\": 8, \"hidden_act\": \"gelu\"}",
       "hidden_act"},
      {"{\"model_type\": \"qwen3\", \"vocab_size\": 8, \"hidden_size\": 8, \"num_hidden_layers\": 1, \"num_attention_heads\": 2, "
       "\"intermediate_size\": 8, \"max_position_embeddings\": 8, \"rope_scaling\": {\"rope_type\": \"yarn\"}}",
       "rope_scaling"},
      {"{\"model_type\": \"qwen3\", \"vocab_size\": 8, \"hidden_size\": 8, \"num_hidden_layers\": 1, \"num_attention_heads\": 3, "
       "\"num_key_value_heads\": 2, \"intermediate_size\": 8, \"max_position_embeddings\": 8}",
       "num_key_value_heads"},
      {"{\"model_type\": \"qwen3\", \"vocab_size\": \"x\"}", "vocab_size"},
      {"{\"model_type\": \"qwen3_moe\", \"vocab_size\": 8, \"hidden_size\": 8, \"num_hidden_layers\": 1, \"num_attention_heads\": 2, "
       "\"max_position_embeddings\": 8, \"num_experts\": 2, \"num_experts_per_tok\": 3, \"moe_intermediate_size\": 4}",
       "num_experts_per_tok"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    lt_model_config_t c;
    int rc = lt_model_config_parse(cases[i].json, strlen(cases[i].json), "cfg.json", &c);
    cr_expect_lt(rc, 0, "case %zu accepted", i);
    cr_expect(strstr(lt_error_msg(), cases[i].needle), "case %zu: '%s' does not name %s", i, lt_error_msg(),
              cases[i].needle);
  }
}

Test(learner_model, save_load_identity_and_bad_files) {
  char *d = lt_test_tmpdir("ckpt");
  make_ckpt(d, "qwen3_moe", "\"norm_topk_prob\": true", 9, 0.1f);
  lt_model_t *a, *b;
  cr_assert_eq(lt_model_load(d, &a), 0, "%s", lt_error_msg());
  char d2[4200];
  snprintf(d2, sizeof d2, "%s/again", d);
  cr_assert_eq(lt_model_save(a, d2), 0);
  cr_assert_eq(lt_model_load(d2, &b), 0);
  cr_assert_eq(a->nparams, b->nparams);
  cr_expect_eq(memcmp(a->params, b->params, sizeof(float) * a->nparams), 0, "save → load changed the weights");
  cr_expect_eq(memcmp(&a->cfg, &b->cfg, sizeof a->cfg), 0, "save → load changed the config");
  lt_model_free(b);
  /* A shape mismatch, a missing tensor, a truncated file. */
  char p[4300];
  snprintf(p, sizeof p, "%s/model.safetensors", d2);
  lt_st_tensor_t t[2] = {{"model.embed_tokens.weight", 2, {300, 31}, a->params},
                         {"model.norm.weight", 1, {32}, a->params}};
  cr_assert_eq(lt_st_write(p, t, 2, NULL), 0);
  cr_expect_eq(lt_model_load(d2, &b), LT_EFORMAT);
  cr_expect(strstr(lt_error_msg(), "model.embed_tokens.weight") && strstr(lt_error_msg(), "[300, 31]"), "%s",
            lt_error_msg());
  t[0].shape[1] = 32;
  cr_assert_eq(lt_st_write(p, t, 2, NULL), 0);
  cr_expect_eq(lt_model_load(d2, &b), LT_EFORMAT);
  cr_expect(strstr(lt_error_msg(), "missing"), "%s", lt_error_msg());
  lt_run_t r;
  lt_test_sh(&r, 10, "head -c 1000 '%s/model.safetensors' > '%s'", d, p);
  lt_run_free(&r);
  cr_expect_eq(lt_model_load(d2, &b), LT_EFORMAT);
  cr_expect(strstr(lt_error_msg(), "truncated") || strstr(lt_error_msg(), "outside"), "%s", lt_error_msg());
  lt_model_free(a);
  lt_test_rmdir(d);
}

Test(learner_model, sharded_checkpoint_loads) {
  char *d = lt_test_tmpdir("shard");
  make_ckpt(d, "qwen3", "", 2, 0.1f);
  lt_model_t *a;
  cr_assert_eq(lt_model_load(d, &a), 0);
  /* Split the tensors over two files with an index. */
  char p1[4200], p2[4200], idx[4200];
  snprintf(p1, sizeof p1, "%s/model-00001-of-00002.safetensors", d);
  snprintf(p2, sizeof p2, "%s/model-00002-of-00002.safetensors", d);
  snprintf(idx, sizeof idx, "%s/model.safetensors.index.json", d);
  int half = a->ntensors / 2;
  lt_st_tensor_t *t = calloc((size_t)a->ntensors, sizeof *t);
  lt_buf_t j = {0};
  lt_buf_puts(&j, "{\"metadata\": {}, \"weight_map\": {");
  for (int i = 0; i < a->ntensors; i++) {
    const lt_tensor_t *s = &a->tensors[i];
    t[i] = (lt_st_tensor_t){s->name, s->ndim, {s->ndim == 1 ? s->cols : s->rows, s->cols}, a->params + s->offset};
    lt_buf_printf(&j, "%s\"%s\": \"%s\"", i ? ", " : "", s->name,
                  i < half ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors");
  }
  lt_buf_puts(&j, "}}");
  cr_assert_eq(lt_st_write(p1, t, half, NULL), 0);
  cr_assert_eq(lt_st_write(p2, t + half, a->ntensors - half, NULL), 0);
  cr_assert_eq(lt_test_write(idx, j.data), 0);
  char single[4200];
  snprintf(single, sizeof single, "%s/model.safetensors", d);
  unlink(single);
  lt_model_t *b;
  cr_assert_eq(lt_model_load(d, &b), 0, "%s", lt_error_msg());
  cr_expect_eq(memcmp(a->params, b->params, sizeof(float) * a->nparams), 0);
  lt_buf_free(&j);
  free(t);
  lt_model_free(a);
  lt_model_free(b);
  lt_test_rmdir(d);
}

/* A saved checkpoint is a Hugging Face model folder: shards and their index
 * past the size limit, generation_config.json beside config.json. */
Test(learner_model, large_save_is_sharded_with_an_index) {
  char *d = lt_test_tmpdir("shardsave");
  make_ckpt(d, "qwen3_moe", "\"norm_topk_prob\": true", 9, 0.1f);
  lt_model_t *a, *b;
  cr_assert_eq(lt_model_load(d, &a), 0, "%s", lt_error_msg());
  char out[4200], p[4300];
  snprintf(out, sizeof out, "%s/sharded", d);
  int64_t max = (int64_t)a->nparams * 4 / 3 + 1; /* three or four shards */
  cr_assert_eq(lt_model_save_sharded(a, out, max), 0, "%s", lt_error_msg());
  snprintf(p, sizeof p, "%s/model.safetensors", out);
  cr_expect(!lt_fs_exists(p), "a single file beside the shards");
  snprintf(p, sizeof p, "%s/model.safetensors.index.json", out);
  cJSON *idx;
  cr_assert_eq(lt_json_parse_file(p, &idx), 0, "%s", lt_error_msg());
  cJSON *map = cJSON_GetObjectItem(idx, "weight_map");
  cr_assert_eq(cJSON_GetArraySize(map), a->ntensors);
  cr_expect_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(idx, "metadata"), "total_size")->valuedouble,
               (double)a->nparams * 4);
  const char *last = cJSON_GetArrayItem(map, a->ntensors - 1)->valuestring;
  cr_expect(!strncmp(last, "model-0000", 10) && strstr(last, "-of-0000") && strstr(last, ".safetensors"), "%s", last);
  int nshards = atoi(last + 6);
  cr_expect(nshards >= 3 && nshards <= 4, "%d shards", nshards);
  for (int k = 1; k <= nshards; k++) {
    snprintf(p, sizeof p, "%s/model-%05d-of-%05d.safetensors", out, k, nshards);
    struct stat st;
    cr_assert_eq(stat(p, &st), 0, "%s is missing", p);
  }
  cJSON_Delete(idx);
  cr_assert_eq(lt_model_load(out, &b), 0, "%s", lt_error_msg());
  cr_expect_eq(memcmp(a->params, b->params, sizeof(float) * a->nparams), 0, "the shards changed the weights");
  lt_model_free(b);
  snprintf(p, sizeof p, "%s/generation_config.json", out);
  cJSON *gen;
  cr_assert_eq(lt_json_parse_file(p, &gen), 0, "%s", lt_error_msg());
  if (a->cfg.eos_id >= 0) cr_expect_eq(cJSON_GetObjectItem(gen, "eos_token_id")->valuedouble, a->cfg.eos_id);
  cJSON_Delete(gen);
  /* Under the limit: the one file. */
  snprintf(out, sizeof out, "%s/single", d);
  cr_assert_eq(lt_model_save_sharded(a, out, LT_MODEL_SHARD_BYTES), 0);
  snprintf(p, sizeof p, "%s/model.safetensors", out);
  cr_expect(lt_fs_exists(p));
  lt_model_free(a);
  lt_test_rmdir(d);
}

/* Greedy decoding with the KV cache, batched over sessions and across a
 * multi-turn prefill, gives the logprobs and routing of a full forward. */
Test(learner_model, kv_cache_batched_decode_equals_full_forward, .timeout = 120) {
  char *d = lt_test_tmpdir("engine");
  make_ckpt(d, "qwen3_moe",
            "\"norm_topk_prob\": true, \"sliding_window\": 6, \"layer_types\": "
            "[\"sliding_attention\", \"full_attention\", \"sliding_attention\", \"full_attention\"]",
            21, 0.25f);
  lt_engine_opts_t eo = {.device = "cpu", .threads = 1, .max_sessions = 3, .max_context = 128};
  lt_engine_t *e;
  cr_assert_eq(lt_engine_load(d, &eo, &e), 0, "%s", lt_error_msg());
  lt_engine_info_t info;
  lt_engine_info(e, &info);
  enum { NS = 3, GEN = 12, OBS = 4, GEN2 = 6 };
  int32_t prompt[NS][5] = {{1, 2, 3, 4, 5}, {9, 8}, {100, 200, 150}};
  int plen[NS] = {5, 2, 3};
  lt_session_t *s[NS];
  int32_t seq[NS][64];
  float lp[NS][64];
  uint16_t rid[NS][64][8];
  int len[NS];
  int nml = info.moe_layers, K = info.topk;
  for (int i = 0; i < NS; i++) {
    cr_assert_eq(lt_session_open(e, &s[i]), 0);
    cr_assert_eq(lt_session_prefill(s[i], prompt[i], plen[i], &rid[i][0][0], (float[64 * 8]){0}), 0);
    memcpy(seq[i], prompt[i], sizeof(int32_t) * (size_t)plen[i]);
    len[i] = plen[i];
  }
  lt_sampling_t greedy = {.temperature = 0};
  lt_sample_t out[NS];
  uint16_t ids[NS * 8];
  float probs[NS * 8];
  for (int step = 0; step < GEN + GEN2; step++) {
    if (step == GEN) /* a tool observation arrives: the cache continues */
      for (int i = 0; i < NS; i++) {
        int32_t obs[OBS] = {7 + i, 11, 13, 17};
        cr_assert_eq(lt_session_prefill(s[i], obs, OBS, &rid[i][len[i]][0], (float[OBS * 8]){0}), 0);
        for (int k = 0; k < OBS; k++) lp[i][len[i] + k] = NAN, seq[i][len[i] + k] = obs[k];
        len[i] += OBS;
      }
    cr_assert_eq(lt_engine_decode(e, s, NS, &greedy, out, ids, probs), 0);
    for (int i = 0; i < NS; i++) {
      seq[i][len[i]] = out[i].token;
      lp[i][len[i]] = out[i].logprob;
      memcpy(rid[i][len[i]], ids + i * nml * K, sizeof(uint16_t) * (size_t)(nml * K));
      len[i]++;
    }
  }
  for (int i = 0; i < NS; i++) cr_expect_eq(lt_session_len(s[i]), len[i]);
  /* The same sequences through the training forward, packed in one batch. */
  lt_model_t *m;
  cr_assert_eq(lt_model_load(d, &m), 0);
  cr_assert_eq(lt_model_eval_alloc(m, 256, 64), 0);
  int32_t packed[256];
  int start[NS + 1] = {0};
  for (int i = 0; i < NS; i++) {
    memcpy(packed + start[i], seq[i], sizeof(int32_t) * (size_t)len[i]);
    start[i + 1] = start[i] + len[i];
  }
  lt_batch_t b = {.nseq = NS, .start = start, .tokens = packed};
  lt_fwd_out_t fo;
  cr_assert_eq(lt_model_forward(m, &b, &fo), 0);
  int checked = 0;
  for (int i = 0; i < NS; i++)
    for (int t = plen[i]; t < len[i]; t++) {
      if (isnan(lp[i][t])) continue;
      cr_expect(fabsf(lp[i][t] - fo.logprobs[start[i] + t]) <= 1e-5f, "seq %d token %d: cache %g vs full %g", i, t,
                lp[i][t], fo.logprobs[start[i] + t]);
      checked++;
    }
  cr_expect_eq(checked, NS * (GEN + GEN2));
  /* Routing recorded by the engine equals the full forward's choice. */
  int ml = 0;
  for (int l = 0; l < m->cfg.layers; l++) {
    if (!m->cfg.moe[l]) continue;
    for (int i = 0; i < NS; i++)
      for (int t = 0; t < len[i]; t++)
        for (int k = 0; k < K; k++)
          cr_expect_eq(rid[i][t][ml * K + k], m->acts->ids[l][(start[i] + t) * K + k], "routing seq %d pos %d", i, t);
    ml++;
  }
  for (int i = 0; i < NS; i++) lt_session_close(s[i]);
  lt_model_free(m);
  lt_engine_free(e);
  lt_test_rmdir(d);
}

Test(learner_model, sampling_support_and_determinism) {
  float logits[6] = {2.0f, 1.0f, 0.5f, 0.0f, -1.0f, -3.0f}, scratch[12];
  lt_rng_t r1, r2;
  lt_rng_seed(&r1, 5);
  lt_rng_seed(&r2, 5);
  lt_sample_t a, b;
  lt_sampling_t p = {.temperature = 1.0f, .top_p = 1.0f, .top_k = 2};
  for (int i = 0; i < 50; i++) {
    lt_sample_logits(logits, 6, &p, &r1, scratch, &a);
    lt_sample_logits(logits, 6, &p, &r2, scratch, &b);
    cr_expect_eq(a.token, b.token);
    cr_expect(a.token == 0 || a.token == 1, "top-k 2 sampled %d", a.token);
    cr_expect_eq(a.support, 2);
  }
  /* logprob is under the distribution it was drawn from: top-2, renormalised;
   * the set's ids come back when asked for. */
  int32_t ids[6];
  lt_sample_logits(logits, 6, &p, &r1, scratch, &a);
  lt_sample_support_ids(scratch, a.support, ids);
  cr_expect_float_eq(a.logprob, logits[a.token] - log(exp(logits[0]) + exp(logits[1])), 1e-5);
  cr_expect(ids[0] == 0 && ids[1] == 1, "top-2 ids %d %d", ids[0], ids[1]);
  /* Untruncated: support 0 (the whole vocabulary), logprob under softmax(z / T). */
  p = (lt_sampling_t){.temperature = 0.5f, .top_p = 1.0f};
  lt_sample_logits(logits, 6, &p, &r1, scratch, &a);
  double z = 0;
  for (int i = 0; i < 6; i++) z += exp(logits[i] / 0.5);
  cr_expect_eq(a.support, 0);
  cr_expect_float_eq(a.logprob, logits[a.token] / 0.5 - log(z), 1e-5);
  /* top-p 0.5: the first token alone holds 0.59 of the mass. */
  p = (lt_sampling_t){.temperature = 1.0f, .top_p = 0.5f};
  lt_sample_logits(logits, 6, &p, &r1, scratch, &a);
  cr_expect_eq(a.support, 1);
  cr_expect_eq(a.token, 0);
}

/* What the rollout samples with and what the learner scores agree: for each
 * sampling setting the engine's logprobs equal the training forward's given
 * the recorded temperature and Keep-Sampling-Mask ids (docs/losses.md). */
Test(learner_model, sampled_logprobs_equal_training_forward, .timeout = 120) {
  char *d = lt_test_tmpdir("engine");
  make_ckpt(d, "qwen3_moe", "\"norm_topk_prob\": true", 23, 0.25f);
  lt_engine_opts_t eo = {.device = "cpu", .threads = 1, .max_sessions = 1, .max_context = 128};
  lt_engine_t *e;
  cr_assert_eq(lt_engine_load(d, &eo, &e), 0, "%s", lt_error_msg());
  lt_model_t *m;
  cr_assert_eq(lt_model_load(d, &m), 0);
  cr_assert_eq(lt_model_eval_alloc(m, 64, 64), 0);
  const lt_sampling_t settings[] = {{1.0f, 1.0f, 0}, {0.6f, 1.0f, 0}, {1.0f, 0.9f, 0}, {0.7f, 1.0f, 20}};
  enum { P = 3, GEN = 24, V = 300 };
  for (size_t k = 0; k < sizeof settings / sizeof settings[0]; k++) {
    int32_t toks[P + GEN] = {5, 17, 42}, support[P + GEN] = {0}, *ids = malloc(sizeof(int32_t) * GEN * V);
    float lp[P + GEN], temp[P + GEN];
    size_t nids = 0;
    lt_session_t *s;
    cr_assert_eq(lt_session_open(e, &s), 0);
    lt_session_seed(s, 99 + k);
    cr_assert_eq(lt_session_prefill(s, toks, P, NULL, NULL), 0);
    for (int t = P; t < P + GEN; t++) {
      lt_sample_t out;
      cr_assert_eq(lt_engine_decode(e, &s, 1, &settings[k], &out, NULL, NULL), 0);
      memcpy(ids + nids, lt_session_support_ids(s), sizeof(int32_t) * (size_t)out.support);
      toks[t] = out.token, lp[t] = out.logprob, support[t] = out.support, temp[t] = settings[k].temperature;
      nids += (size_t)out.support;
    }
    lt_session_close(s);
    int start[2] = {0, P + GEN};
    lt_batch_t b = {
        .nseq = 1, .start = start, .tokens = toks, .support = support, .support_ids = ids, .temperature = temp};
    lt_fwd_out_t fo;
    cr_assert_eq(lt_model_forward(m, &b, &fo), 0, "%s", lt_error_msg());
    for (int t = P; t < P + GEN; t++)
      cr_expect(fabsf(lp[t] - fo.logprobs[t]) <= 2e-5f, "setting %zu token %d: rollout %g vs learner %g", k, t, lp[t],
                fo.logprobs[t]);
    if (k >= 2) cr_expect_gt(nids, 0, "setting %zu truncated nothing", k);
    free(ids);
  }
  lt_model_free(m);
  lt_engine_free(e);
  lt_test_rmdir(d);
}

/* A tiny model memorises one sequence: the loss falls. */
static double train_steps(lt_opt_kind kind, int steps) {
  char json[] =
      "{\"model_type\": \"qwen3_moe\", \"vocab_size\": 20, \"hidden_size\": 16, \"num_hidden_layers\": 2,"
      " \"num_attention_heads\": 2, \"head_dim\": 8, \"moe_intermediate_size\": 16, \"num_experts\": 4,"
      " \"num_experts_per_tok\": 2, \"max_position_embeddings\": 32, \"norm_topk_prob\": true}";
  lt_model_config_t c;
  cr_assert_eq(lt_model_config_parse(json, strlen(json), "t", &c), 0);
  lt_model_t *m;
  cr_assert_eq(lt_model_create(&c, &m), 0);
  lt_model_init_random(m, 1, 0.1f);
  cr_assert_eq(lt_model_train_alloc(m, 16, 16), 0);
  lt_optim_cfg_t oc;
  lt_optim_cfg_default(&oc, kind);
  oc.lr = 1e-2f;
  oc.weight_decay = 0;
  lt_optim_t *o;
  cr_assert_eq(lt_optim_create(&oc, m, &o), 0);
  int32_t toks[10] = {1, 5, 9, 2, 7, 7, 3, 11, 4, 19};
  int start[2] = {0, 10};
  float d[10];
  double first = 0, last = 0;
  for (int s = 0; s < steps; s++) {
    lt_batch_t b = {.nseq = 1, .start = start, .tokens = toks};
    lt_fwd_out_t fo;
    cr_assert_eq(lt_model_forward(m, &b, &fo), 0);
    double nll = 0;
    for (int i = 1; i < 10; i++) nll -= fo.logprobs[i], d[i] = -1.0f / 9;
    d[0] = 0;
    if (s == 0) first = nll / 9;
    last = nll / 9;
    lt_model_zero_grad(m);
    cr_assert_eq(lt_model_backward(m, d, NULL), 0);
    lt_optim_step(o, m, NULL);
  }
  lt_optim_free(o);
  lt_model_free(m);
  return last / first;
}

Test(learner_model, adamw_and_muon_reduce_the_loss) {
  cr_expect_lt(train_steps(LT_OPT_ADAMW, 60), 0.3);
  cr_expect_lt(train_steps(LT_OPT_MUON, 60), 0.3);
}

Test(learner_model, adamw_step_hand_computed_and_schedule) {
  lt_optim_cfg_t c;
  lt_optim_cfg_default(&c, LT_OPT_ADAMW);
  c.lr = 0.1f;
  c.warmup = 4;
  c.total = 10;
  c.min_lr_ratio = 0.1f;
  double lr = 0.1f; /* the configured float */
  cr_expect_float_eq(lt_optim_lr(&c, 0), lr / 4, 1e-12);
  cr_expect_float_eq(lt_optim_lr(&c, 3), lr, 1e-12);
  cr_expect_float_eq(lt_optim_lr(&c, 9), lr * (0.1 + 0.9 * 0.5 * (1 + cos(M_PI * 0.5))), 1e-7);
  cr_expect_float_eq(lt_optim_lr(&c, 100), lr * 0.1f, 1e-9);
}

Test(learner_model, optimizer_state_round_trips_bit_exactly) {
  char *d = lt_test_tmpdir("optim");
  make_ckpt(d, "qwen3_moe", "", 2, 0.1f);
  for (int kind = 0; kind < 2; kind++) {
    lt_model_t *a, *b;
    cr_assert_eq(lt_model_load(d, &a), 0);
    cr_assert_eq(lt_model_load(d, &b), 0);
    cr_assert_eq(lt_model_train_alloc(a, 8, 8), 0);
    cr_assert_eq(lt_model_train_alloc(b, 8, 8), 0);
    lt_optim_cfg_t oc;
    lt_optim_cfg_default(&oc, (lt_opt_kind)kind);
    oc.freeze_router = 1;
    lt_optim_t *oa, *ob;
    cr_assert_eq(lt_optim_create(&oc, a, &oa), 0);
    cr_assert_eq(lt_optim_create(&oc, b, &ob), 0);
    lt_rng_t r;
    lt_rng_seed(&r, 3);
    for (int s = 0; s < 3; s++) {
      for (size_t i = 0; i < a->nparams; i++) a->grads[i] = (float)lt_rng_normal(&r);
      lt_optim_step(oa, a, NULL);
    }
    char p[4200];
    snprintf(p, sizeof p, "%s/optim-%d.safetensors", d, kind);
    cr_assert_eq(lt_optim_save(oa, p), 0);
    cr_assert_eq(lt_optim_load(ob, p), 0, "%s", lt_error_msg());
    memcpy(b->params, a->params, sizeof(float) * a->nparams);
    for (size_t i = 0; i < a->nparams; i++) a->grads[i] = b->grads[i] = (float)lt_rng_normal(&r);
    lt_optim_step(oa, a, NULL);
    lt_optim_step(ob, b, NULL);
    cr_expect_eq(memcmp(a->params, b->params, sizeof(float) * a->nparams), 0, "resumed optimizer diverged (kind %d)",
                 kind);
    /* The frozen router did not move. */
    lt_model_t *orig;
    cr_assert_eq(lt_model_load(d, &orig), 0);
    const lt_tensor_t *rt = lt_model_tensor(a, "model.layers.0.mlp.gate.weight");
    cr_expect_eq(memcmp(a->params + rt->offset, orig->params + rt->offset, sizeof(float) * (size_t)rt->rows * rt->cols),
                 0);
    lt_model_free(orig);
    lt_optim_free(oa), lt_optim_free(ob);
    lt_model_free(a), lt_model_free(b);
  }
  lt_test_rmdir(d);
}

/* The real shapes the GPU benchmarks train (configs/models/qwen3-*.json): each
 * parses with Qwen3's published dimensions, and its tensor table holds exactly
 * the closed-form count (embeddings, per layer q/k/v/o + q/k norms + two norms +
 * the MLP or the router and experts, the final norm, lm_head unless tied). */
static void check_real_shape(const char *file, int D, int I, int L, int H, int KV, int E, int K, int Im, int tied,
                             size_t expect) {
  char path[4096];
  snprintf(path, sizeof path, "%s/configs/models/%s", lt_test_root(), file);
  lt_model_config_t c;
  cr_assert_eq(lt_model_config_load(path, &c), 0, "%s", lt_error_msg());
  cr_expect_eq(c.vocab, 151936, "%s", file);
  cr_expect_eq(c.hidden, D, "%s", file);
  cr_expect_eq(c.layers, L, "%s", file);
  cr_expect_eq(c.heads, H, "%s", file);
  cr_expect_eq(c.kv_heads, KV, "%s", file);
  cr_expect_eq(c.head_dim, 128, "%s", file);
  cr_expect_eq(c.tied, tied, "%s", file);
  cr_expect_eq(c.window, 0, "%s", file);
  cr_expect_float_eq(c.rope_theta, 1e6f, 1.0f, "%s", file);
  cr_expect_float_eq(c.eps, 1e-6f, 1e-12f, "%s", file);
  cr_expect_eq(c.experts, E, "%s", file);
  size_t V = 151936, hd = 128, attn = (size_t)D * hd * (2 * H + 2 * KV) + 2 * hd + 2 * (size_t)D;
  size_t mlp = E ? (size_t)E * D + 3 * (size_t)E * D * Im : 3 * (size_t)D * I;
  if (E) {
    cr_expect_eq(c.topk, K, "%s", file);
    cr_expect_eq(c.moe_inter, Im, "%s", file);
    cr_expect_eq(lt_model_moe_layers(&c), L, "%s", file);
  } else {
    cr_expect_eq(c.inter, I, "%s", file);
  }
  size_t formula = V * D * (tied ? 1 : 2) + (size_t)L * (attn + mlp) + (size_t)D;
  cr_expect_eq(formula, expect, "%s: the formula gives %zu, expected %zu", file, formula, expect);
  cr_expect_eq(lt_model_nparams(&c), expect, "%s: the tensor table holds %zu parameters, expected %zu", file,
               lt_model_nparams(&c), expect);
}

Test(learner_model, real_shape_configs_have_qwen3_dimensions) {
  check_real_shape("qwen3-0.6b.json", 1024, 3072, 28, 16, 8, 0, 0, 0, 1, 596049920);
  check_real_shape("qwen3-1.7b.json", 2048, 6144, 28, 16, 8, 0, 0, 0, 1, 1720574976);
  /* Qwen3-30B-A3B's layout (128-dim heads, GQA, 8 of many fine-grained experts, untied) scaled to train on one 80 GB GPU. */
  check_real_shape("qwen3-moe-1.6b-a0.4b.json", 1024, 0, 16, 16, 4, 64, 8, 384, 0, 1604097024);
  lt_model_config_t c;
  char path[4096];
  snprintf(path, sizeof path, "%s/configs/models/qwen3-moe-1.6b-a0.4b.json", lt_test_root());
  cr_assert_eq(lt_model_config_load(path, &c), 0);
  cr_expect_eq(lt_model_active_params(&c), 391512064, "active parameters per token: %lld",
               (long long)lt_model_active_params(&c));
}
