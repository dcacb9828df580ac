/* Benchmark: the CPU learner's forward+backward GFLOP/s next to raw OpenBLAS
 * sgemm at the same matrix shapes, and the builtin engine's decode tokens/s.
 * Prints a table on stderr and one JSON object on the last stdout line. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/bench.h"
#include "infer/engine.h"
#include "learner/model.h"
#include "learner/ops.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/time.h"

#define REPS 5

static lt_model_t *load_config(const char *path, uint64_t seed) {
  lt_model_config_t c;
  if (lt_model_config_load(path, &c) < 0) {
    fprintf(stderr, "bench: %s\n", lt_error_msg());
    exit(1);
  }
  lt_model_t *m;
  if (lt_model_create(&c, &m) < 0) exit(1);
  lt_model_init_random(m, seed, 0.02f);
  return m;
}

/* Forward+backward over a packed batch: GFLOP/s counting 3× the forward. */
static double learner_gflops(lt_model_t *m, int nseq, int T) {
  int N = nseq * T;
  int32_t *toks = malloc(sizeof(int32_t) * (size_t)N);
  int *start = malloc(sizeof(int) * (size_t)(nseq + 1));
  float *d = malloc(sizeof(float) * (size_t)N);
  for (int i = 0; i < N; i++) toks[i] = (int32_t)((i * 7919) % 250), d[i] = 1.0f / N;
  for (int s = 0; s <= nseq; s++) start[s] = s * T;
  if (lt_model_train_alloc(m, N, T) < 0) exit(1);
  lt_batch_t b = {.nseq = nseq, .start = start, .tokens = toks};
  double flops = 3.0 * lt_model_forward_flops(&m->cfg, &b);
  lt_fwd_out_t o;
  lt_model_forward(m, &b, &o); /* warm-up */
  lt_model_backward(m, d, NULL);
  double t0 = lt_time_mono_s();
  lt_model_forward(m, &b, &o);
  lt_model_zero_grad(m);
  lt_model_backward(m, d, NULL);
  double dt = lt_time_mono_s() - t0;
  free(toks), free(start), free(d);
  return flops / dt * 1e-9;
}

/* Raw sgemm over the learner's own shapes: each linear layer's forward and
 * two backward products for one step. */
static double sgemm_gflops(const lt_model_config_t *c, int N) {
  int D = c->hidden, Im = c->moe_inter, Hq = c->heads * c->head_dim, Hk = c->kv_heads * c->head_dim;
  int shapes[][2] = {{D, Hq}, {D, Hk}, {D, Hk}, {Hq, D}, {D, Im}, {D, Im}, {Im, D}};
  int Ne = N * c->topk / (c->experts ? c->experts : 1); /* tokens per expert */
  size_t big = (size_t)N * 4096;
  float *a = calloc(big, 4), *w = calloc((size_t)4096 * 4096, 4), *y = calloc(big, 4);
  double flops = 0, t0 = lt_time_mono_s();
  for (int s = 0; s < 7; s++) {
    int in = shapes[s][0], out = shapes[s][1], rows = s >= 4 ? Ne : N, times = s >= 4 ? c->experts : 1;
    for (int e = 0; e < times; e++) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, out, in, 1, a, in, w, in, 0, y, out);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, in, out, 1, y, out, w, in, 1, a, in);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, rows, 1, y, out, a, in, 1, w, in);
      flops += 3.0 * 2.0 * rows * in * out;
    }
  }
  double dt = lt_time_mono_s() - t0;
  free(a), free(w), free(y);
  return flops * c->layers / (dt * c->layers) * 1e-9;
}

static double decode_tps(const char *cfg_path, const char *dir, int sessions, int prompt, int gen) {
  lt_model_t *m = load_config(cfg_path, 5);
  if (lt_model_save(m, dir) < 0) exit(1);
  lt_model_free(m);
  lt_engine_opts_t eo = {.device = "cpu", .threads = 0, .max_sessions = sessions, .max_context = prompt + gen + 1};
  lt_engine_t *e;
  if (lt_engine_load(dir, &eo, &e) < 0) {
    fprintf(stderr, "bench: %s\n", lt_error_msg());
    exit(1);
  }
  lt_session_t *s[64];
  int32_t p[1024];
  for (int i = 0; i < prompt; i++) p[i] = 65 + i % 26;
  for (int i = 0; i < sessions; i++) {
    lt_session_open(e, &s[i]);
    lt_session_seed(s[i], (uint64_t)i);
    lt_session_prefill(s[i], p, prompt, NULL, NULL);
  }
  lt_sampling_t sp = {.temperature = 1.0f, .top_p = 1.0f};
  lt_sample_t out[64];
  double t0 = lt_time_mono_s();
  for (int t = 0; t < gen; t++) lt_engine_decode(e, s, sessions, &sp, out, NULL, NULL);
  double dt = lt_time_mono_s() - t0;
  for (int i = 0; i < sessions; i++) lt_session_close(s[i]);
  lt_engine_free(e);
  return sessions * gen / dt;
}

int main(void) {
  const char *root = getenv("LT_ROOT") ? getenv("LT_ROOT") : ".";
  char cfg10[4096], cfgtiny[4096], tmp[] = "/tmp/lt-bench-XXXXXX";
  snprintf(cfg10, sizeof cfg10, "%s/configs/models/moe-10m.json", root);
  snprintf(cfgtiny, sizeof cfgtiny, "%s/configs/models/tiny-moe.json", root);
  if (!mkdtemp(tmp)) return 1;
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  double g[REPS], s[REPS], dec[REPS], tiny[REPS];
  lt_model_t *m = load_config(cfg10, 1), *mt = load_config(cfgtiny, 1);
  for (int r = 0; r < REPS; r++) {
    /* Each on every core: the learner as a step sets its threads (learner.threads 0), sgemm on OpenBLAS's own. */
    lt_ops_blas_threads((int)cores);
    g[r] = learner_gflops(m, 8, 256);
    openblas_set_num_threads((int)cores);
    s[r] = sgemm_gflops(&m->cfg, 8 * 256);
    lt_ops_blas_threads((int)cores);
    double fl = 3.0 * 2.0 * (double)lt_model_active_params(&mt->cfg) * 2048;
    tiny[r] = learner_gflops(mt, 8, 256) * 1e9 / fl * 2048; /* tokens/s */
    dec[r] = decode_tps(cfg10, tmp, 8, 32, 64);
    fprintf(stderr, "rep %d: learner %.2f GFLOP/s, sgemm %.2f GFLOP/s, tiny-moe %.0f train tok/s, decode %.0f tok/s\n",
            r, g[r], s[r], tiny[r], dec[r]);
  }
  lt_model_free(m);
  lt_model_free(mt);
  lt_fs_remove_tree(tmp);
  double gl, gh, sl, sh, dl, dh;
  double gm = bench_median(g, REPS, &gl, &gh), sm = bench_median(s, REPS, &sl, &sh);
  double dm = bench_median(dec, REPS, &dl, &dh), tm = bench_median(tiny, REPS, NULL, NULL);
  printf(
      "{\"cpu_learner_gflops\": %.4g, \"cpu_learner_gflops_min\": %.4g, \"cpu_learner_gflops_max\": %.4g, "
      "\"openblas_sgemm_gflops\": %.4g, \"openblas_sgemm_gflops_min\": %.4g, \"openblas_sgemm_gflops_max\": %.4g, "
      "\"cpu_learner_vs_sgemm\": %.4g, \"decode_tokens_per_s\": %.4g, \"decode_tokens_per_s_min\": %.4g, "
      "\"decode_tokens_per_s_max\": %.4g, \"tiny_moe_train_tokens_per_s\": %.4g, \"learner_threads\": %ld}\n",
      gm, gl, gh, sm, sl, sh, gm / sm, dm, dl, dh, tm, cores);
  return 0;
}
