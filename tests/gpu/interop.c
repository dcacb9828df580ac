/* The longtail side of scripts/gpu-check.sh's interoperability check, built
 * with the learner and util layers alone (a GPU machine without the daemon's
 * libraries builds it): writes the checkpoint `longtail init --config CONFIG
 * --seed SEED` writes (same calls, same bytes), NSEQ random token sequences,
 * and the log-probabilities `longtail logprobs` prints for them (the CPU
 * forward, fp32).  bench/gpu/hf_interop.py then loads OUT with transformers.
 *
 *   longtail-interop CONFIG OUT NSEQ SEED
 *     OUT/ckpt/       config.json, generation_config.json, model.safetensors
 *     OUT/seqs.jsonl  {"tokens": [...]} per line
 *     OUT/longtail.jsonl  {"logprobs": [...]} per line */
#include <stdio.h>
#include <stdlib.h>

#include "learner/model.h"
#include "util/buf.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/json.h"
#include "util/rng.h"

static int fail(const char *what) {
  fprintf(stderr, "longtail-interop: %s: %s\n", what, lt_error_msg());
  return 1;
}

int main(int argc, char **argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: longtail-interop CONFIG OUT NSEQ SEED\n");
    return 2;
  }
  const char *cfgpath = argv[1], *out = argv[2];
  int nseq = atoi(argv[3]);
  uint64_t seed = strtoull(argv[4], NULL, 10);
  lt_model_config_t mc;
  if (lt_model_config_load(cfgpath, &mc) < 0) return fail(cfgpath);
  double std = 0.02; /* as longtail init: the config's initializer_range */
  cJSON *raw;
  if (lt_json_parse_file(cfgpath, &raw) == 0) {
    const cJSON *ir = cJSON_GetObjectItemCaseSensitive(raw, "initializer_range");
    if (cJSON_IsNumber(ir) && ir->valuedouble > 0) std = ir->valuedouble;
    cJSON_Delete(raw);
  }
  lt_model_t *m;
  if (lt_model_create(&mc, &m) < 0) return fail("model");
  lt_model_init_random(m, seed, (float)std);
  char path[4096];
  snprintf(path, sizeof path, "%s/ckpt", out);
  if (lt_fs_mkdirs(out, 0755) < 0 || lt_model_save(m, path) < 0) return fail(path);
  /* Lengths 17..272 and ids over the whole vocabulary (the embedding rows and logits columns at its end too). */
  lt_rng_t r;
  lt_rng_seed(&r, seed + 1);
  int maxlen = 272 < mc.max_pos ? 272 : mc.max_pos;
  int32_t *tok = malloc(sizeof(int32_t) * (size_t)maxlen);
  if (!tok || lt_model_eval_alloc(m, maxlen, maxlen) < 0) return fail("workspace");
  snprintf(path, sizeof path, "%s/seqs.jsonl", out);
  FILE *fs = fopen(path, "w");
  snprintf(path, sizeof path, "%s/longtail.jsonl", out);
  FILE *fl = fopen(path, "w");
  if (!fs || !fl) return fail(path);
  lt_buf_t b = {0};
  for (int s = 0; s < nseq; s++) {
    int n = 17 + (int)lt_rng_below(&r, (uint64_t)(maxlen - 16));
    for (int i = 0; i < n; i++) tok[i] = (int32_t)lt_rng_below(&r, (uint64_t)mc.vocab);
    int start[2] = {0, n};
    lt_batch_t batch = {.nseq = 1, .start = start, .tokens = tok};
    lt_fwd_out_t o;
    if (lt_model_forward(m, &batch, &o) < 0) return fail("forward");
    lt_buf_reset(&b);
    lt_buf_puts(&b, "{\"tokens\":[");
    for (int i = 0; i < n; i++) lt_buf_printf(&b, i ? ",%d" : "%d", tok[i]);
    lt_buf_puts(&b, "]}\n");
    fwrite(b.data, 1, b.len, fs);
    lt_buf_reset(&b);
    lt_buf_puts(&b, "{\"logprobs\":");
    lt_json_f32_array(&b, o.logprobs, n);
    lt_buf_puts(&b, "}\n");
    if (lt_buf_ok(&b) < 0) return fail("output");
    fwrite(b.data, 1, b.len, fl);
  }
  lt_buf_free(&b);
  free(tok);
  lt_model_free(m);
  if (fclose(fs) != 0 || fclose(fl) != 0) return fail("write");
  printf("{\"out\": \"%s\", \"sequences\": %d}\n", out, nseq);
  return 0;
}
