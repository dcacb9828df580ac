/* The policy head's row kernels: log-sum-exp, log πθ of the target and the
 * entropy in one read of each logits row (an online softmax), and the logits
 * gradient. */
#include "learner/cuda/internal.cuh"
extern "C" {
#include "util/error.h"
}

#define HEAD_THREADS 512

/* Online softmax statistics: m (max), s = Σ e^(z−m), t = Σ e^(z−m)·z. */
struct stats {
  float m, s, t;
};

__device__ inline stats merge(stats a, stats b) {
  float M = fmaxf(a.m, b.m);
  if (M == -INFINITY) return a;
  float fa = expf(a.m - M), fb = expf(b.m - M);
  return {M, a.s * fa + b.s * fb, a.t * fa + b.t * fb};
}

/* Over the row's z·it, restricted to the ids with mark[j] != 0 when mark is set. */
__device__ stats row_stats(const float *z, int V, float it = 1.0f, const uint8_t *mark = NULL) {
  __shared__ stats sh[32];
  stats st = {-INFINITY, 0, 0};
  for (int j = threadIdx.x; j < V; j += blockDim.x) {
    if (mark && !mark[j]) continue;
    float x = z[j] * it;
    if (x > st.m) {
      float f = expf(st.m - x);
      st = {x, st.s * f + 1.0f, st.t * f + x};
    } else {
      float e = expf(x - st.m);
      st.s += e;
      st.t += e * x;
    }
  }
  for (int o = 16; o > 0; o >>= 1) {
    stats b = {__shfl_xor_sync(0xffffffffu, st.m, o), __shfl_xor_sync(0xffffffffu, st.s, o),
               __shfl_xor_sync(0xffffffffu, st.t, o)};
    st = merge(st, b);
  }
  int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
  __syncthreads();
  if (lane == 0) sh[w] = st;
  __syncthreads();
  if (threadIdx.x == 0) {
    stats a = sh[0];
    for (int x = 1; x < nw; x++) a = merge(a, sh[x]);
    sh[0] = a;
  }
  __syncthreads();
  return sh[0];
}

/* Marks (or clears) row r's Keep-Sampling-Mask set and its target in mark [V]:
 * the set is its ids plus the target, each once, as the CPU's lt__head_mark. */
__device__ void keep_mark(uint8_t *mark, const lt_gpu_head_opts_t *o, int r, int t, uint8_t v) {
  const int32_t *ids = o->keep_ids + o->keep_off[r];
  for (int i = threadIdx.x; i < o->keep_n[r]; i += blockDim.x) mark[ids[i]] = v;
  if (threadIdx.x == 0) mark[t] = v;
  __syncthreads();
}

__device__ inline float row_it(const lt_gpu_head_opts_t *o, int r) { return o->inv_temp ? o->inv_temp[r] : 1.0f; }

__device__ inline uint8_t *row_mark(const lt_gpu_head_opts_t *o, int r, int V) {
  return o->keep_n && o->keep_n[r] > 0 ? o->mark + (size_t)r * V : NULL;
}

/* lse over the kept set (or the whole row) of z·it, log π(t) = z_t·it − lse, and
 * the entropy of softmax(z·it) over the whole row (learner/forward.c's policy_head). */
__global__ void head_fwd(float *lse, float *logp, float *entropy, const float *logits, const int *target, int V,
                         lt_gpu_head_opts_t o) {
  int r = blockIdx.x, t = target[r];
  if (t < 0) return;
  const float *z = logits + (size_t)r * V;
  float it = row_it(&o, r);
  stats st = row_stats(z, V, it);
  float L = st.m + logf(st.s), H = L - st.t / st.s;
  uint8_t *mark = row_mark(&o, r, V);
  if (mark) {
    keep_mark(mark, &o, r, t, 1);
    stats k = row_stats(z, V, it, mark);
    L = k.m + logf(k.s);
    keep_mark(mark, &o, r, t, 0);
  }
  if (threadIdx.x == 0) {
    lse[r] = L;
    logp[r] = z[t] * it - L;
    entropy[r] = H;
  }
}

void lt_gpu_head_forward(lt_gpu_t *g, float *lse, float *logp, float *entropy, const float *logits, const int *target,
                         int n, int V, const lt_gpu_head_opts_t *opts) {
  if (!n) return;
  lt_gpu_head_opts_t o = opts ? *opts : lt_gpu_head_opts_t{};
  head_fwd<<<n, HEAD_THREADS, 0, g->stream>>>(lse, logp, entropy, logits, target, V, o);
  LT_LAUNCHED();
}

/* z ← dlogp·it · (1[j = t] − e^(z·it − lse)) on the kept ids (mark, or all), 0
 * elsewhere; rows without a target become zero. */
__device__ inline void write_grad(float *z, int V, int t, float dl, float L, float it = 1.0f, const uint8_t *mark = NULL) {
  float dt = dl * it;
  for (int j = threadIdx.x; j < V; j += blockDim.x) {
    float gj = t < 0 || dl == 0.0f || (mark && !mark[j]) ? 0.0f : -dt * expf(z[j] * it - L);
    z[j] = j == t ? gj + dt : gj;
  }
}

__global__ void head_bwd(float *logits, const float *lse, const float *dlogp, const int *target, int V,
                         lt_gpu_head_opts_t o) {
  int r = blockIdx.x, t = target[r];
  float *z = logits + (size_t)r * V;
  if (t < 0) {
    write_grad(z, V, -1, 0.0f, 0.0f);
    return;
  }
  uint8_t *mark = row_mark(&o, r, V);
  if (mark) keep_mark(mark, &o, r, t, 1);
  write_grad(z, V, t, dlogp[r], lse[r], row_it(&o, r), mark);
  if (mark) {
    __syncthreads(); /* every thread has read the marks */
    keep_mark(mark, &o, r, t, 0);
  }
}

void lt_gpu_head_backward(lt_gpu_t *g, float *logits, const float *lse, const float *dlogp, const int *target, int n,
                          int V, const lt_gpu_head_opts_t *opts) {
  if (!n) return;
  lt_gpu_head_opts_t o = opts ? *opts : lt_gpu_head_opts_t{};
  head_bwd<<<n, HEAD_THREADS, 0, g->stream>>>(logits, lse, dlogp, target, V, o);
  LT_LAUNCHED();
}
