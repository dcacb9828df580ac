/* The policy head's row kernels: log-sum-exp, log πθ of the target and the
 * entropy in one read of each logits row (an online softmax), the logits
 * gradient, and the fused token-level loss. */
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

__device__ stats row_stats(const float *z, int V) {
  __shared__ stats sh[32];
  stats st = {-INFINITY, 0, 0};
  for (int j = threadIdx.x; j < V; j += blockDim.x) {
    float x = z[j];
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

__global__ void head_fwd(float *lse, float *logp, float *entropy, const float *logits, const int *target, int V) {
  int r = blockIdx.x, t = target[r];
  if (t < 0) return;
  const float *z = logits + (size_t)r * V;
  stats st = row_stats(z, V);
  if (threadIdx.x == 0) {
    float L = st.m + logf(st.s);
    lse[r] = L;
    logp[r] = z[t] - L;
    entropy[r] = L - st.t / st.s;
  }
}

void lt_gpu_head_forward(lt_gpu_t *g, float *lse, float *logp, float *entropy, const float *logits, const int *target,
                         int n, int V) {
  if (!n) return;
  head_fwd<<<n, HEAD_THREADS, 0, g->stream>>>(lse, logp, entropy, logits, target, V);
  LT_LAUNCHED();
}

/* z ← dlogp · (1[j = t] − e^(z − lse)); rows without a target become zero. */
__device__ inline void write_grad(float *z, int V, int t, float dl, float L) {
  for (int j = threadIdx.x; j < V; j += blockDim.x) {
    float gj = t < 0 || dl == 0.0f ? 0.0f : -dl * expf(z[j] - L);
    z[j] = j == t ? gj + dl : gj;
  }
}

__global__ void head_bwd(float *logits, const float *lse, const float *dlogp, const int *target, int V) {
  int r = blockIdx.x, t = target[r];
  write_grad(logits + (size_t)r * V, V, t, t < 0 ? 0.0f : dlogp[r], t < 0 ? 0.0f : lse[r]);
}

void lt_gpu_head_backward(lt_gpu_t *g, float *logits, const float *lse, const float *dlogp, const int *target, int n,
                          int V) {
  if (!n) return;
  head_bwd<<<n, HEAD_THREADS, 0, g->stream>>>(logits, lse, dlogp, target, V);
  LT_LAUNCHED();
}

/* One row: statistics, the objective's term and dLoss/dlog πθ, then the row
 * becomes its logits gradient.  MIS-PO, TIS: −w·log πθ·A; PPO/GRPO: −w·min(r·A, clip(r)·A). */
__global__ void loss_fused(float *logits, const int *target, const float *old, const float *adv, const float *weight,
                           int V, int obj, float clip_lo, float clip_hi, float *logp, float *entropy, float *terms) {
  __shared__ float s_dl;
  int r = blockIdx.x, t = target[r];
  float *z = logits + (size_t)r * V;
  if (t < 0) {
    write_grad(z, V, -1, 0, 0);
    return;
  }
  stats st = row_stats(z, V);
  float L = st.m + logf(st.s);
  if (threadIdx.x == 0) {
    float lp = z[t] - L, w = weight[r], A = adv[r], term = 0, dl = 0;
    if (w != 0.0f) {
      if (obj == LT_OBJ_MISPO || obj == LT_OBJ_TIS) { /* TIS: w carries min(x, C) */
        term = -w * lp * A;
        dl = -w * A;
      } else {
        float ratio = expf(lp - old[r]);
        float rc = fminf(fmaxf(ratio, 1.0f - clip_lo), 1.0f + clip_hi);
        float u = ratio * A, c = rc * A;
        term = -w * fminf(u, c);
        dl = u <= c ? -w * u : 0.0f; /* d(r·A)/dlog r = r·A; the clipped branch is flat */
      }
    }
    logp[r] = lp;
    entropy[r] = L - st.t / st.s;
    terms[r] = term;
    s_dl = dl;
  }
  __syncthreads();
  write_grad(z, V, t, s_dl, L);
}

int lt_gpu_loss_fused(lt_gpu_t *g, const lt_loss_cfg_t *cfg, float *logits, const lt_gpu_loss_rows_t *rows, int n,
                      int V, float *logp, float *entropy, float *loss_terms) {
  if (!lt_loss_token_local(cfg, cfg->kl_coef > 0)) /* the kernel has no KL term: refuse any */
    return lt_error_set(LT_EUNSUPP, "fused loss: %s with these options needs whole sequences; use the unfused path",
                        lt_objective_name(cfg->obj));
  if (!n) return 0;
  loss_fused<<<n, HEAD_THREADS, 0, g->stream>>>(logits, rows->target, rows->logp_old, rows->adv, rows->weight, V,
                                                (int)cfg->obj, cfg->clip_lo, cfg->clip_hi, logp, entropy, loss_terms);
  LT_LAUNCHED();
  return 0;
}
