/* Fused causal / sliding-window GQA attention for one sequence.  One block
 * per (query row, head); its warps stride over the visible keys with an
 * online softmax, so no score matrix is ever written; the warps' partial
 * results are merged in shared memory.  Head dims up to 256. */
#include <float.h>

#include "learner/cuda/internal.cuh"

#define ATT_WARPS 4
#define ATT_MAXC 8 /* head-dim values per lane: hd ≤ 32 · ATT_MAXC */

__device__ inline int key_lo(int p, int window) { return window > 0 && p - window + 1 > 0 ? p - window + 1 : 0; }

__global__ void attn_fwd(float *out, float *lse, const float *q, const float *k, const float *v, int T, int S, int H,
                         int KV, int hd, int window, float scale) {
  __shared__ float s_acc[ATT_WARPS][32 * ATT_MAXC], s_m[ATT_WARPS], s_l[ATT_WARPS];
  int i = blockIdx.x, h = blockIdx.y, kh = h / (H / KV);
  int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  int p = S - T + i, lo = key_lo(p, window);
  const float *qr = q + ((size_t)i * H + h) * hd;
  float qv[ATT_MAXC], acc[ATT_MAXC];
  for (int c = 0; c < ATT_MAXC; c++) {
    int d = lane + 32 * c;
    qv[c] = d < hd ? qr[d] : 0.0f;
    acc[c] = 0;
  }
  float m = -INFINITY, l = 0;
  for (int j = lo + w; j <= p; j += ATT_WARPS) {
    const float *kr = k + ((size_t)j * KV + kh) * hd, *vr = v + ((size_t)j * KV + kh) * hd;
    float s = 0;
    for (int c = 0; c < ATT_MAXC; c++) {
      int d = lane + 32 * c;
      if (d < hd) s += qv[c] * kr[d];
    }
    s = lt__warp_sum(s) * scale;
    float mn = fmaxf(m, s), corr = expf(m - mn), e = expf(s - mn);
    l = l * corr + e;
    for (int c = 0; c < ATT_MAXC; c++) {
      int d = lane + 32 * c;
      if (d < hd) acc[c] = acc[c] * corr + e * vr[d];
    }
    m = mn;
  }
  for (int c = 0; c < ATT_MAXC; c++) s_acc[w][lane + 32 * c] = acc[c];
  if (lane == 0) {
    s_m[w] = m;
    s_l[w] = l;
  }
  __syncthreads();
  float M = -INFINITY;
  for (int x = 0; x < ATT_WARPS; x++) M = fmaxf(M, s_m[x]);
  float L = 0, f[ATT_WARPS];
  for (int x = 0; x < ATT_WARPS; x++) {
    f[x] = s_l[x] > 0 ? expf(s_m[x] - M) : 0.0f; /* a warp that saw no key has m = -inf */
    L += s_l[x] * f[x];
  }
  float *o = out + ((size_t)i * H + h) * hd;
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float a = 0;
    for (int x = 0; x < ATT_WARPS; x++) a += s_acc[x][d] * f[x];
    o[d] = a / L;
  }
  if (lse && threadIdx.x == 0) lse[(size_t)i * H + h] = M + logf(L);
}

void lt_gpu_attention_forward(lt_gpu_t *g, float *out, float *lse, const float *q, const float *k, const float *v, int T,
                              int S, int H, int KV, int hd, int window) {
  if (T == 0 || lt__flash_forward(g, out, lse, q, k, v, T, S, H, KV, hd, window)) return;
  dim3 grid(T, H);
  attn_fwd<<<grid, 32 * ATT_WARPS, 0, g->stream>>>(out, lse, q, k, v, T, S, H, KV, hd, window, 1.0f / sqrtf((float)hd));
  LT_LAUNCHED();
}

/* dS = P ⊙ (dO·Vᵀ − D) · scale with D = rowsum(dO ⊙ O); dq = dS·K, dk += dSᵀ·Q,
 * dv += Pᵀ·dO.  Two kernels, each the only writer of what it computes (no
 * atomics): one block per (query, head) for dq (it also leaves D), then one
 * block per (key, KV head) for dk and dv, which recomputes P and dS. */
__global__ void attn_bwd_q(float *dq, float *Dout, const float *dout, const float *out, const float *lse, const float *q,
                           const float *k, const float *v, int T, int S, int H, int KV, int hd, int window, float scale) {
  __shared__ float s_dq[ATT_WARPS][32 * ATT_MAXC];
  int i = blockIdx.x, h = blockIdx.y, kh = h / (H / KV);
  int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  int p = S - T + i, lo = key_lo(p, window);
  size_t qo = ((size_t)i * H + h) * hd;
  float qv[ATT_MAXC], dov[ATT_MAXC], acc[ATT_MAXC], Di = 0;
  for (int c = 0; c < ATT_MAXC; c++) {
    int d = lane + 32 * c;
    qv[c] = d < hd ? q[qo + d] : 0.0f;
    dov[c] = d < hd ? dout[qo + d] : 0.0f;
    Di += d < hd ? dov[c] * out[qo + d] : 0.0f;
    acc[c] = 0;
  }
  Di = lt__warp_sum(Di);
  if (threadIdx.x == 0) Dout[(size_t)i * H + h] = Di;
  float L = lse[(size_t)i * H + h];
  for (int j = lo + w; j <= p; j += ATT_WARPS) {
    size_t ko = ((size_t)j * KV + kh) * hd;
    float s = 0, dp = 0;
    for (int c = 0; c < ATT_MAXC; c++) {
      int d = lane + 32 * c;
      if (d < hd) {
        s += qv[c] * k[ko + d];
        dp += dov[c] * v[ko + d];
      }
    }
    s = lt__warp_sum(s) * scale;
    dp = lt__warp_sum(dp);
    float ds = expf(s - L) * (dp - Di) * scale;
    for (int c = 0; c < ATT_MAXC; c++) {
      int d = lane + 32 * c;
      if (d < hd) acc[c] += ds * k[ko + d];
    }
  }
  for (int c = 0; c < ATT_MAXC; c++) s_dq[w][lane + 32 * c] = acc[c];
  __syncthreads();
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float a = 0;
    for (int x = 0; x < ATT_WARPS; x++) a += s_dq[x][d];
    dq[qo + d] = a;
  }
}

__global__ void attn_bwd_kv(float *dk, float *dv, const float *Dq, const float *dout, const float *lse, const float *q,
                            const float *k, const float *v, int T, int S, int H, int KV, int hd, int window, float scale) {
  __shared__ float s_dk[ATT_WARPS][32 * ATT_MAXC], s_dv[ATT_WARPS][32 * ATT_MAXC];
  int j = blockIdx.x, kh = blockIdx.y, group = H / KV;
  int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  size_t ko = ((size_t)j * KV + kh) * hd;
  float kv[ATT_MAXC], vv[ATT_MAXC], ak[ATT_MAXC], av[ATT_MAXC];
  for (int c = 0; c < ATT_MAXC; c++) {
    int d = lane + 32 * c;
    kv[c] = d < hd ? k[ko + d] : 0.0f;
    vv[c] = d < hd ? v[ko + d] : 0.0f;
    ak[c] = av[c] = 0;
  }
  /* Queries that see key j: positions j .. j + W − 1 (all later ones without a window). */
  int i0 = j - (S - T) > 0 ? j - (S - T) : 0;
  int i1 = window > 0 && j + window - 1 - (S - T) < T - 1 ? j + window - 1 - (S - T) : T - 1;
  int pairs = (i1 - i0 + 1) * group;
  for (int u = w; u < pairs; u += ATT_WARPS) {
    int i = i0 + u / group, h = kh * group + u % group;
    size_t qo = ((size_t)i * H + h) * hd;
    float s = 0, dp = 0;
    for (int c = 0; c < ATT_MAXC; c++) {
      int d = lane + 32 * c;
      if (d < hd) {
        s += q[qo + d] * kv[c];
        dp += dout[qo + d] * vv[c];
      }
    }
    s = lt__warp_sum(s) * scale;
    dp = lt__warp_sum(dp);
    float pj = expf(s - lse[(size_t)i * H + h]), ds = pj * (dp - Dq[(size_t)i * H + h]) * scale;
    for (int c = 0; c < ATT_MAXC; c++) {
      int d = lane + 32 * c;
      if (d < hd) {
        ak[c] += ds * q[qo + d];
        av[c] += pj * dout[qo + d];
      }
    }
  }
  for (int c = 0; c < ATT_MAXC; c++) {
    s_dk[w][lane + 32 * c] = ak[c];
    s_dv[w][lane + 32 * c] = av[c];
  }
  __syncthreads();
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float a = 0, b = 0;
    for (int x = 0; x < ATT_WARPS; x++) a += s_dk[x][d], b += s_dv[x][d];
    dk[ko + d] += a;
    dv[ko + d] += b;
  }
}

void lt_gpu_attention_backward(lt_gpu_t *g, float *dq, float *dk, float *dv, const float *dout, const float *out,
                               const float *lse, const float *q, const float *k, const float *v, int T, int S, int H,
                               int KV, int hd, int window) {
  if (T == 0 || lt__flash_backward(g, dq, dk, dv, dout, out, lse, q, k, v, T, S, H, KV, hd, window)) return;
  float scale = 1.0f / sqrtf((float)hd), *D = lt__gpu_f32_scratch(g, (size_t)T * H);
  attn_bwd_q<<<dim3(T, H), 32 * ATT_WARPS, 0, g->stream>>>(dq, D, dout, out, lse, q, k, v, T, S, H, KV, hd, window, scale);
  LT_LAUNCHED();
  attn_bwd_kv<<<dim3(S, KV), 32 * ATT_WARPS, 0, g->stream>>>(dk, dv, D, dout, lse, q, k, v, T, S, H, KV, hd, window, scale);
  LT_LAUNCHED();
}
