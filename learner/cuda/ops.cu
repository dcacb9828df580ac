/* Element-wise, normalisation, rotary and router kernels: the CUDA side of
 * learner/ops.c, same contracts (backwards accumulate unless noted). */
#include <float.h>

#include "learner/cuda/internal.cuh"

static unsigned row_threads(int D) {
  unsigned t = (unsigned)((D + 31) / 32 * 32);
  return t > 256 ? 256 : t;
}

/* One block per row: out = x · rstd · w. */
__global__ void rmsnorm_fwd(float *out, float *rstd, const float *x, const float *w, int D, float eps) {
  __shared__ float sh[32];
  const float *xr = x + (size_t)blockIdx.x * D;
  float *o = out + (size_t)blockIdx.x * D;
  float ss = 0;
  for (int i = threadIdx.x; i < D; i += blockDim.x) ss += xr[i] * xr[i];
  ss = lt__block_sum(ss, sh);
  float r = rsqrtf(ss / D + eps);
  for (int i = threadIdx.x; i < D; i += blockDim.x) o[i] = xr[i] * r * w[i];
  if (rstd && threadIdx.x == 0) rstd[blockIdx.x] = r;
}

void lt_gpu_rmsnorm_forward(lt_gpu_t *g, float *out, float *rstd, const float *x, const float *w, int N, int D,
                            float eps) {
  if (N == 0) return;
  rmsnorm_fwd<<<N, row_threads(D), 0, g->stream>>>(out, rstd, x, w, D, eps);
  LT_LAUNCHED();
}

__global__ void rmsnorm_bwd_dx(float *dx, const float *dout, const float *x, const float *w, const float *rstd, int D) {
  __shared__ float sh[32];
  size_t o = (size_t)blockIdx.x * D;
  float r = rstd[blockIdx.x], dot = 0;
  for (int i = threadIdx.x; i < D; i += blockDim.x) dot += dout[o + i] * w[i] * x[o + i];
  dot = lt__block_sum(dot, sh);
  float c = dot * r * r * r / D;
  for (int i = threadIdx.x; i < D; i += blockDim.x) dx[o + i] += r * dout[o + i] * w[i] - c * x[o + i];
}

/* dw[i] += Σ_n dout·x·rstd, each column by one thread over the rows in order: no atomics, the same bits every run
 * (retrain, docs/replay.md); the threads of a warp read consecutive columns of a row. */
__global__ void rmsnorm_bwd_dw(float *dw, const float *dout, const float *x, const float *rstd, int N, int D) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= D) return;
  float s = 0;
  for (int n = 0; n < N; n++) s += dout[(size_t)n * D + i] * x[(size_t)n * D + i] * rstd[n];
  dw[i] += s;
}

void lt_gpu_rmsnorm_backward(lt_gpu_t *g, float *dx, float *dw, const float *dout, const float *x, const float *w,
                             const float *rstd, int N, int D) {
  if (N == 0) return;
  if (dx) {
    rmsnorm_bwd_dx<<<N, row_threads(D), 0, g->stream>>>(dx, dout, x, w, rstd, D);
    LT_LAUNCHED();
  }
  if (dw) {
    rmsnorm_bwd_dw<<<lt__blocks(D, 128), 128, 0, g->stream>>>(dw, dout, x, rstd, N, D);
    LT_LAUNCHED();
  }
}

__global__ void rope_kernel(float *x, const int *pos, int N, int heads, int hd, const float *cs, const float *sn,
                            float sgn) {
  int half = hd / 2;
  size_t total = (size_t)N * heads * half;
  for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < total; e += (size_t)gridDim.x * blockDim.x) {
    int i = (int)(e % half);
    size_t nh = e / half;
    int n = (int)(nh / heads);
    float *v = x + nh * hd;
    float c = cs[(size_t)pos[n] * half + i], s = sgn * sn[(size_t)pos[n] * half + i];
    float a = v[i], b = v[i + half];
    v[i] = a * c - b * s;
    v[i + half] = b * c + a * s;
  }
}

void lt_gpu_rope_apply(lt_gpu_t *g, float *x, const int *pos, int N, int heads, int hd, const float *cos,
                       const float *sin, int inverse) {
  size_t total = (size_t)N * heads * (hd / 2);
  if (!total) return;
  unsigned b = lt__blocks(total, 256);
  rope_kernel<<<b < 65535u ? b : 65535u, 256, 0, g->stream>>>(x, pos, N, heads, hd, cos, sin, inverse ? -1.0f : 1.0f);
  LT_LAUNCHED();
}

__device__ inline float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

__global__ void swiglu_fwd(float *h, const float *gt, const float *up, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    h[i] = gt[i] * sigmoid(gt[i]) * up[i];
}

__global__ void swiglu_bwd(float *dg, float *du, const float *dh, const float *gt, const float *up, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    float s = sigmoid(gt[i]);
    du[i] = dh[i] * gt[i] * s;
    dg[i] = dh[i] * up[i] * s * (1.0f + gt[i] * (1.0f - s));
  }
}

static unsigned grid_for(size_t n) {
  unsigned b = lt__blocks(n, 256);
  return b < 65535u ? (b ? b : 1) : 65535u;
}

void lt_gpu_swiglu_forward(lt_gpu_t *g, float *h, const float *gate, const float *up, size_t n) {
  if (!n) return;
  swiglu_fwd<<<grid_for(n), 256, 0, g->stream>>>(h, gate, up, n);
  LT_LAUNCHED();
}

void lt_gpu_swiglu_backward(lt_gpu_t *g, float *dgate, float *dup, const float *dh, const float *gate, const float *up,
                            size_t n) {
  if (!n) return;
  swiglu_bwd<<<grid_for(n), 256, 0, g->stream>>>(dgate, dup, dh, gate, up, n);
  LT_LAUNCHED();
}

/* One thread per token: E ≤ 256 and k small, so a register loop beats a block. */
__global__ void router_fwd(float *probs, uint16_t *ids, float *weights, float *mass, const float *logits, int N, int E,
                           int k, int norm_topk, const uint16_t *forced) {
  int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= N) return;
  const float *z = logits + (size_t)t * E;
  float *p = probs + (size_t)t * E;
  uint16_t *id = ids + (size_t)t * k;
  float *w = weights + (size_t)t * k;
  float m = -FLT_MAX;
  for (int e = 0; e < E; e++) m = fmaxf(m, z[e]);
  double s = 0;
  for (int e = 0; e < E; e++) {
    p[e] = expf(z[e] - m);
    s += p[e];
  }
  float inv = (float)(1.0 / s);
  for (int e = 0; e < E; e++) p[e] *= inv;
  if (forced) {
    for (int j = 0; j < k; j++) id[j] = forced[(size_t)t * k + j];
  } else {
    for (int j = 0; j < k; j++) { /* ties to the lower index, as the CPU */
      int best = -1;
      for (int e = 0; e < E; e++) {
        int taken = 0;
        for (int q = 0; q < j; q++) taken |= id[q] == e;
        if (!taken && (best < 0 || p[e] > p[best])) best = e;
      }
      id[j] = (uint16_t)best;
    }
  }
  /* The mass on the experts used (own top-k or replayed) is also the routing confidence. */
  float ms = 0;
  for (int j = 0; j < k; j++) ms += p[id[j]];
  for (int j = 0; j < k; j++) w[j] = norm_topk ? p[id[j]] / ms : p[id[j]];
  if (mass) mass[t] = ms;
}

void lt_gpu_router_forward(lt_gpu_t *g, float *probs, uint16_t *ids, float *weights, float *mass, const float *logits,
                           int N, int E, int k, int norm_topk, const uint16_t *forced_ids) {
  if (!N) return;
  router_fwd<<<lt__blocks(N, 128), 128, 0, g->stream>>>(probs, ids, weights, mass, logits, N, E, k, norm_topk,
                                                        forced_ids);
  LT_LAUNCHED();
}

__global__ void router_bwd(float *dlogits, const float *probs, const uint16_t *ids, const float *dweights, int N, int E,
                           int k, int norm_topk) {
  int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= N) return;
  const float *p = probs + (size_t)t * E, *dw = dweights + (size_t)t * k;
  const uint16_t *id = ids + (size_t)t * k;
  float *dz = dlogits + (size_t)t * E;
  float mass = 0, wd = 0, pdp = 0;
  for (int j = 0; j < k; j++) mass += p[id[j]];
  for (int j = 0; j < k; j++) wd += dw[j] * p[id[j]] / mass;
  for (int j = 0; j < k; j++) pdp += p[id[j]] * (norm_topk ? (dw[j] - wd) / mass : dw[j]);
  for (int e = 0; e < E; e++) dz[e] = -p[e] * pdp;
  for (int j = 0; j < k; j++) dz[id[j]] += p[id[j]] * (norm_topk ? (dw[j] - wd) / mass : dw[j]);
}

void lt_gpu_router_backward(lt_gpu_t *g, float *dlogits, const float *probs, const uint16_t *ids, const float *dweights,
                            int N, int E, int k, int norm_topk) {
  if (!N) return;
  router_bwd<<<lt__blocks(N, 128), 128, 0, g->stream>>>(dlogits, probs, ids, dweights, N, E, k, norm_topk);
  LT_LAUNCHED();
}
