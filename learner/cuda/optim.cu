/* AdamW on the device: lt_optim_step's update (global-norm clip, decoupled
 * weight decay off for 1-D tensors, frozen router) over the tensors of one
 * ZeRO-1 shard of the parameter buffer (all of it on one rank). */
#include <math.h>

#include "learner/cuda/internal.cuh"
extern "C" {
#include "util/error.h"
}

/* Each block's partial sum into part[blockIdx.x]; sum_parts adds them to *out in block order.  No atomics: the
 * gradient norm (and so the clipping scale) is the same bits every run, which retrain needs (docs/replay.md). */
__global__ void sumsq_kernel(double *part, const float *x, size_t n) {
  __shared__ double sh[32];
  double s = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    s += (double)x[i] * x[i];
  s = lt__block_sum(s, sh);
  if (threadIdx.x == 0) part[blockIdx.x] = s;
}

__global__ void sum_parts(double *out, const double *part, unsigned n) {
  double s = 0;
  for (unsigned i = 0; i < n; i++) s += part[i];
  *out += s;
}

static int frozen(const lt_optim_cfg_t *c, const lt_tensor_t *t) { return c->freeze_router && lt_tensor_is_router(t); }

static size_t numel(const lt_tensor_t *t) { return (size_t)t->rows * t->cols; }

double lt_gpu_grad_norm(lt_gpu_t *g, const lt_optim_cfg_t *c, const lt_model_t *host, const float *grads) {
  double *acc = g->sum;
  lt_gpu_zero(g, acc, sizeof *acc);
  for (int i = 0; i < host->ntensors; i++) {
    const lt_tensor_t *t = &host->tensors[i];
    if (frozen(c, t)) continue;
    unsigned b = lt__blocks(numel(t), 256);
    if (b > LT_GPU_SUM_PARTS) b = LT_GPU_SUM_PARTS;
    sumsq_kernel<<<b, 256, 0, g->stream>>>(acc + 1, grads + t->offset, numel(t));
    LT_LAUNCHED();
    sum_parts<<<1, 1, 0, g->stream>>>(acc, acc + 1, b);
    LT_LAUNCHED();
  }
  double ss = 0;
  lt_gpu_download(g, &ss, acc, sizeof ss);
  return sqrt(ss);
}

__global__ void adamw_kernel(float *w, float *gr, float *m, float *v, size_t n, float gscale, float b1, float b2,
                             float eps, double lr, double bc1, double bc2, float wd) {
  for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < n; k += (size_t)gridDim.x * blockDim.x) {
    float gk = gr[k] * gscale;
    gr[k] = gk;
    m[k] = b1 * m[k] + (1 - b1) * gk;
    v[k] = b2 * v[k] + (1 - b2) * gk * gk;
    double mh = m[k] / bc1, vh = v[k] / bc2;
    w[k] -= (float)(lr * (mh / (sqrt(vh) + eps) + wd * w[k]));
  }
}

int lt_gpu_adamw_step(lt_gpu_t *g, const lt_optim_cfg_t *c, const lt_model_t *host, float *params, float *grads,
                      float *m, float *v, size_t lo, size_t hi, int64_t step, double *gnorm_out, double *lr_out) {
  if (c->kind != LT_OPT_ADAMW) return lt_error_set(LT_EUNSUPP, "GPU optimizer: only AdamW runs on the GPU (Muon: CPU)");
  double gnorm = lt_gpu_grad_norm(g, c, host, grads);
  if (gnorm_out) *gnorm_out = gnorm;
  float gscale = (c->grad_clip > 0 && gnorm > c->grad_clip) ? (float)(c->grad_clip / (gnorm + 1e-12)) : 1.0f;
  double lr = lt_optim_lr(c, step);
  double bc1 = 1.0 - pow(c->beta1, (double)(step + 1)), bc2 = 1.0 - pow(c->beta2, (double)(step + 1));
  for (int i = 0; i < host->ntensors; i++) {
    const lt_tensor_t *t = &host->tensors[i];
    if (frozen(c, t) || t->offset < lo || t->offset >= hi) continue; /* another rank's shard */
    size_t n = numel(t), o = t->offset;
    unsigned b = lt__blocks(n, 256);
    adamw_kernel<<<b < 4096u ? b : 4096u, 256, 0, g->stream>>>(params + o, grads + o, m + o - lo, v + o - lo, n, gscale, c->beta1,
                                                              c->beta2, c->eps, lr, bc1, bc2,
                                                              t->ndim == 1 ? 0.0f : c->weight_decay);
    LT_LAUNCHED();
  }
  if (lr_out) *lr_out = lr;
  return 0;
}
