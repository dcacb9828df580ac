/* make bench-gpu: the CUDA learner's throughput next to baselines measured in
 * the same run on the same GPU.
 *   - cuBLAS bf16 GEMM (8192³, fp32 accumulation) and fp32 SGEMM rates;
 *   - training tokens/s and MFU (forward + backward + AdamW, bf16 products;
 *     6·N·T plus attention FLOPs) for the Qwen3-0.6B, Qwen3-1.7B and MoE shapes
 *     at 4k and 16k tokens per sequence, against the GPU's bf16 dense peak and
 *     against the GEMM rate measured above.
 * Each figure is the median of LT_BENCH_REPS (default REPS) timed repetitions
 * after a warm-up; the spread (min–max) is printed beside it.  Writes one JSON
 * object to argv[1] (keys gpu_train_tokens_per_s_<shape>_<len>,
 * gpu_mfu_<shape>_<len>, and "train": the batches, which bench/gpu/torch_train.py
 * trains with PyTorch and adds torch_* and gpu_vs_torch_* keys for). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "learner/gpu.h"
#include "learner/model.h"
#include "util/error.h"
#include "util/rng.h"

#define REPS 5

static lt_gpu_t *G;

static void die(const char *what) {
  fprintf(stderr, "bench-gpu: %s: %s\n", what, lt_error_msg());
  exit(1);
}

static void *dalloc(size_t bytes) {
  void *p;
  if (lt_gpu_alloc(G, &p, bytes) < 0) die("allocation");
  return p;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

typedef struct {
  double med, lo, hi;
} stat_t;

static stat_t summarize(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp);
  return (stat_t){v[n / 2], v[0], v[n - 1]};
}

static stat_t bench_gemm(int bf16) {
  int n = 8192, iters = 10;
  size_t nn = (size_t)n * n;
  float *C = dalloc(nn * 4), *A = NULL, *B = NULL;
  void *a16 = NULL, *b16 = NULL;
  A = dalloc(nn * 4);
  B = dalloc(nn * 4);
  lt_rng_t r;
  lt_rng_seed(&r, 1);
  float *h = malloc(nn * 4);
  for (size_t i = 0; i < nn; i++) h[i] = (float)(lt_rng_uniform(&r) - 0.5);
  lt_gpu_upload(G, A, h, nn * 4);
  lt_gpu_upload(G, B, h, nn * 4);
  free(h);
  if (bf16) {
    a16 = dalloc(nn * 2);
    b16 = dalloc(nn * 2);
    lt_gpu_to_bf16(G, a16, A, nn);
    lt_gpu_to_bf16(G, b16, B, nn);
  }
  double v[REPS];
  for (int rep = -1; rep < REPS; rep++) {
    lt_gpu_timer_t *t = lt_gpu_timer_start(G);
    for (int i = 0; i < iters; i++) {
      if (bf16) lt_gpu_gemm_bf16(G, C, a16, b16, n, n, n);
      else lt_gpu_linear_forward(G, C, A, B, n, n, n);
    }
    double s = lt_gpu_timer_stop(G, t);
    if (rep >= 0) v[rep] = 2.0 * n * (double)n * n * iters / s / 1e12;
  }
  lt_gpu_free(A), lt_gpu_free(B), lt_gpu_free(C), lt_gpu_free(a16), lt_gpu_free(b16);
  return summarize(v, REPS);
}

/* The shapes users train (configs/models/qwen3-*.json) at 4k and 16k tokens per
 * sequence.  Each step packs `tokens` tokens (tokens / len sequences); the 1.7B
 * shape's 4k step holds 8192 so its fp32 activations fit 80 GB; a shape whose
 * activations do not fit runs with learner.gpu.recompute ("recompute" in "train").  The same
 * batches are trained by PyTorch in bench/gpu/torch_train.py (see "train"). */
typedef struct {
  const char *shape, *config, *len;
  int seq_len, tokens;
} shape_t;

static const shape_t SHAPES[] = {
    {"qwen3-0.6b", "configs/models/qwen3-0.6b.json", "4k", 4096, 16384},
    {"qwen3-0.6b", "configs/models/qwen3-0.6b.json", "16k", 16384, 16384},
    {"qwen3-1.7b", "configs/models/qwen3-1.7b.json", "4k", 4096, 8192},
    {"qwen3-1.7b", "configs/models/qwen3-1.7b.json", "16k", 16384, 16384},
    {"moe", "configs/models/qwen3-moe-1.6b-a0.4b.json", "4k", 4096, 16384},
    {"moe", "configs/models/qwen3-moe-1.6b-a0.4b.json", "16k", 16384, 16384},
};
#define NSHAPES ((int)(sizeof SHAPES / sizeof SHAPES[0]))

typedef struct {
  stat_t tok_s, tflops;
  double params;
  int recompute;    /* 1: it fitted only with learner.gpu.recompute */
  char status[256]; /* "ok" or why the shape did not run */
} train_t;

/* Weights uniform with the initializer's std (norms at 1): a benchmark needs
 * their scale, not normal draws, and a 1.7B model draws in seconds this way. */
static void fill_fast(lt_model_t *m, float std) {
  uint64_t x = 0x9e3779b97f4a7c15ull;
  float a = std * 1.7320508f / 2147483648.0f; /* uniform on ±std·√3 */
  for (int i = 0; i < m->ntensors; i++) {
    const lt_tensor_t *t = &m->tensors[i];
    float *p = m->params + t->offset;
    size_t n = (size_t)t->rows * (size_t)t->cols;
    for (size_t k = 0; k < n; k++) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      p[k] = t->ndim == 1 ? 1.0f : a * (float)(int32_t)(x >> 32);
    }
  }
}

static int env_int(const char *name, int dflt) {
  const char *v = getenv(name);
  return v && *v ? atoi(v) : dflt;
}

/* Forward, backward and AdamW with bf16 products, REPS timed steps after one
 * warm-up (one timed step when the warm-up took over 20 s, to fit one GPU window). */
static void bench_train(lt_model_t *m, const shape_t *sh, train_t *out) {
  const lt_model_config_t *c = &m->cfg;
  int N = sh->tokens, nseq = sh->tokens / sh->seq_len, reps = env_int("LT_BENCH_REPS", REPS);
  if (reps < 1 || reps > 32) reps = REPS;
  out->params = (double)m->nparams;
  lt_gpu_model_t *gm = NULL;
  size_t fr = 0, tot;
  /* Every layer's activations when they fit, else learner.gpu.recompute; 3 GiB stay for the
   * bf16 and logits scratch still to come (a failure there would abort the run). */
  for (out->recompute = 0; out->recompute < 2 && !gm; out->recompute++) {
    lt_gpu_set_recompute(G, out->recompute);
    if (lt_gpu_model_create(G, m, N, sh->seq_len, 0, m->nparams, &gm) < 0) continue;
    lt_gpu_mem_info(G, &fr, &tot);
    if (fr < ((size_t)3 << 30)) lt_gpu_model_free(gm), gm = NULL;
  }
  out->recompute--;
  lt_gpu_set_recompute(G, 0);
  if (!gm) {
    snprintf(out->status, sizeof out->status, "out of GPU memory, also with learner.gpu.recompute (%.1f GiB free)",
             fr / 1073741824.0);
    return;
  }
  int32_t *tok = malloc(sizeof(int32_t) * N);
  int *start = malloc(sizeof(int) * (nseq + 1));
  float *dl = malloc(sizeof(float) * N);
  lt_rng_t r;
  lt_rng_seed(&r, 2);
  for (int i = 0; i < N; i++) tok[i] = (int32_t)lt_rng_below(&r, c->vocab), dl[i] = -1.0f / N;
  for (int s = 0; s <= nseq; s++) start[s] = s * sh->seq_len;
  lt_batch_t b = {.nseq = nseq, .start = start, .tokens = tok};
  lt_optim_cfg_t oc;
  lt_optim_cfg_default(&oc, LT_OPT_ADAMW);
  double flops = 3.0 * lt_model_forward_flops(c, &b); /* backward ≈ 2 × forward */
  double ts[32], tf[32];
  lt_gpu_set_bf16(G, 1);
  for (int rep = -1; rep < reps; rep++) {
    lt_gpu_timer_t *t = lt_gpu_timer_start(G);
    lt_fwd_out_t o;
    if (lt_gpu_model_forward(gm, &b, &o) < 0) die("forward");
    lt_gpu_model_zero_grad(gm);
    if (lt_gpu_model_backward(gm, dl, NULL) < 0) die("backward");
    if (lt_gpu_model_step(gm, &oc, rep + 1, NULL, NULL) < 0) die("step");
    double s = lt_gpu_timer_stop(G, t);
    if (rep >= 0) ts[rep] = N / s, tf[rep] = flops / s / 1e12;
    if (rep < 0 && s > 20) reps = 1;
  }
  lt_gpu_set_bf16(G, 0);
  out->tok_s = summarize(ts, reps);
  out->tflops = summarize(tf, reps);
  snprintf(out->status, sizeof out->status, "ok");
  free(tok), free(start), free(dl);
  lt_gpu_model_free(gm);
}

/* LT_BENCH_SHAPES: a comma-separated subset of the shapes (default: all). */
static int wanted(const char *shape) {
  const char *w = getenv("LT_BENCH_SHAPES");
  if (!w || !*w) return 1;
  size_t n = strlen(shape);
  for (const char *p = w; (p = strstr(p, shape)); p += n)
    if ((p == w || p[-1] == ',') && (p[n] == 0 || p[n] == ',')) return 1;
  return 0;
}

typedef struct {
  const char *dev;
  double peak;
  stat_t g16, g32;
} base_t;

/* The results so far, rewritten after every shape so a run cut short by its window keeps what it measured. */
static void write_results(const char *path, const base_t *B, train_t *tr) {
  FILE *f = path ? fopen(path, "w") : stdout;
  if (!f) die(path);
  fprintf(f,
          "{\"device\": \"%s\", \"bf16_peak_tflops\": %.0f, \"gemm_bf16_tflops\": %.2f, \"gemm_fp32_tflops\": %.2f,"
          " \"reps\": %d",
          B->dev, B->peak, B->g16.med, B->g32.med, env_int("LT_BENCH_REPS", REPS));
  for (int i = 0; i < NSHAPES; i++)
    if (strcmp(tr[i].status, "ok") == 0)
      fprintf(f, ", \"gpu_train_tokens_per_s_%s_%s\": %.0f, \"gpu_mfu_%s_%s\": %.4f", SHAPES[i].shape, SHAPES[i].len,
              tr[i].tok_s.med, SHAPES[i].shape, SHAPES[i].len, B->peak ? tr[i].tflops.med / B->peak : 0);
  fprintf(f, ", \"train\": [");
  for (int i = 0; i < NSHAPES; i++) {
    for (char *q = tr[i].status; *q; q++) /* error text inside a JSON string */
      if (*q == '"' || *q == '\\' || (unsigned char)*q < 0x20) *q = '\'';
    fprintf(f,
            "%s{\"shape\": \"%s\", \"len\": \"%s\", \"config\": \"%s\", \"seq_len\": %d, \"tokens\": %d,"
            " \"recompute\": %s, \"status\": \"%s\"}",
            i ? ", " : "", SHAPES[i].shape, SHAPES[i].len, SHAPES[i].config, SHAPES[i].seq_len, SHAPES[i].tokens,
            tr[i].recompute ? "true" : "false", tr[i].status);
  }
  fprintf(f, "]}\n");
  if (f != stdout) fclose(f);
}

int main(int argc, char **argv) {
  if (lt_gpu_open(0, &G) < 0) die("open");
  char dev[256];
  lt_gpu_describe(G, dev, sizeof dev);
  /* Dense bf16 tensor-core peak of the part, for MFU (H100 SXM 989, H200 989, A100 312 TFLOP/s). */
  double peak = strstr(dev, "H100") || strstr(dev, "H200") ? 989.0 : strstr(dev, "A100") ? 312.0 : 0;
  printf("device: %s (bf16 dense peak %.0f TFLOP/s)\n", dev, peak);
  /* LT_BENCH_FLASH=1: attention on tensor cores (lt_gpu_set_flash, off by default until checked). */
  if (env_int("LT_BENCH_FLASH", 0)) {
    lt_gpu_set_flash(G, 1);
    printf("attention: tensor cores (LT_BENCH_FLASH=1)\n");
  }
  stat_t g16 = bench_gemm(1), g32 = bench_gemm(0);
  printf("%-44s %9.1f TFLOP/s (%.1f–%.1f)\n", "cuBLAS bf16 GEMM 8192³", g16.med, g16.lo, g16.hi);
  printf("%-44s %9.1f TFLOP/s (%.1f–%.1f)\n", "cuBLAS fp32 SGEMM 8192³ (no TF32)", g32.med, g32.lo, g32.hi);
  base_t B = {dev, peak, g16, g32};
  train_t tr[NSHAPES];
  for (int i = 0; i < NSHAPES; i++)
    memset(&tr[i], 0, sizeof tr[i]), snprintf(tr[i].status, sizeof tr[i].status, "not run");
  write_results(argc > 1 ? argv[1] : NULL, &B, tr);
  lt_model_t *m = NULL;
  const char *root = getenv("LT_ROOT"), *loaded = NULL;
  for (int i = 0; i < NSHAPES; i++) {
    const shape_t *sh = &SHAPES[i];
    if (!wanted(sh->shape)) {
      snprintf(tr[i].status, sizeof tr[i].status, "not selected (LT_BENCH_SHAPES)");
      continue;
    }
    if (!loaded || strcmp(loaded, sh->config) != 0) { /* one host model per config, both lengths */
      lt_model_free(m);
      loaded = sh->config;
      char path[1024];
      snprintf(path, sizeof path, "%s/%s", root ? root : ".", sh->config);
      lt_model_config_t c;
      if (lt_model_config_load(path, &c) < 0) die(path);
      if (lt_model_create(&c, &m) < 0) die("model");
      fill_fast(m, 0.02f);
    }
    bench_train(m, sh, &tr[i]);
    if (strcmp(tr[i].status, "ok") == 0)
      printf(
          "train %-10s %-3s (%.2fB params, %d tok/step%s) %9.0f tok/s (%.0f–%.0f)  %.1f TFLOP/s  MFU %.1f%%  of GEMM %.1f%%\n",
          sh->shape, sh->len, tr[i].params / 1e9, sh->tokens, tr[i].recompute ? ", recompute" : "", tr[i].tok_s.med,
          tr[i].tok_s.lo, tr[i].tok_s.hi, tr[i].tflops.med, peak ? 100 * tr[i].tflops.med / peak : 0,
          100 * tr[i].tflops.med / g16.med);
    else printf("train %-10s %-3s: %s\n", sh->shape, sh->len, tr[i].status);
    fflush(stdout);
    write_results(argc > 1 ? argv[1] : NULL, &B, tr);
  }
  lt_model_free(m);
  lt_gpu_close(G);
  return 0;
}
