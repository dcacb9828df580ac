/* FlashAttention-2-style attention on tensor cores (lt_gpu_set_flash): the
 * contracts of lt_gpu_attention_forward / _backward (causal, sliding window,
 * GQA, T ≤ S) with bf16 operands and fp32 accumulation, for head dims 64 and
 * 128.  Tiles of 64 queries × 64 keys; each of a block's 4 warps owns 16 rows
 * of a tile and multiplies with WMMA 16×16×16 fragments; the online softmax
 * keeps the output rows in shared memory (fp32), rescaled per key tile.
 * The backward is deterministic (no atomics): one kernel per query tile
 * computes dq, one per (KV head, key tile) accumulates dk and dv over the
 * group's heads and every query tile that sees its keys. */
#include <mma.h>

#include "learner/cuda/internal.cuh"

using namespace nvcuda;
typedef __nv_bfloat16 bf16;

#define FT 64 /* query and key rows of a tile */
#define FTHREADS 128

typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc_t;
typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> a_row_t;
typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::col_major> a_col_t;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> b_row_t;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> b_col_t;

__device__ inline int flash_key_lo(int p, int window) { return window > 0 && p - window + 1 > 0 ? p - window + 1 : 0; }

/* rows × HD of a [*, ld] fp32 matrix into a bf16 tile [FT, HD]; rows past n are zero. */
template <int HD> __device__ void load_tile(bf16 *dst, const float *src, int n, int ld) {
  for (int i = threadIdx.x; i < FT * HD; i += FTHREADS) {
    int r = i / HD, c = i % HD;
    dst[i] = __float2bfloat16_rn(r < n ? src[(size_t)r * ld + c] : 0.0f);
  }
}

/* S[16 × 64] (ld FT) = A[16 × HD] · B[64 × HD]ᵀ, A and B row-major bf16 tiles of ld HD. */
template <int HD> __device__ void warp_abt(float *S, const bf16 *A, const bf16 *B) {
  for (int c = 0; c < FT / 16; c++) {
    acc_t acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int kk = 0; kk < HD; kk += 16) {
      a_row_t a;
      b_col_t b;
      wmma::load_matrix_sync(a, A + kk, HD);
      wmma::load_matrix_sync(b, B + (size_t)c * 16 * HD + kk, HD);
      wmma::mma_sync(acc, a, b, acc);
    }
    wmma::store_matrix_sync(S + c * 16, acc, FT, wmma::mem_row_major);
  }
}

/* C[16 × HD] (fp32, ld HD) += P[16 × 64] (bf16, ld FT) · B[64 × HD] (bf16 row-major, ld HD). */
template <int HD> __device__ void warp_acc_pb(float *C, const bf16 *P, const bf16 *B) {
  for (int c = 0; c < HD / 16; c++) {
    acc_t acc;
    wmma::load_matrix_sync(acc, C + c * 16, HD, wmma::mem_row_major);
    for (int kk = 0; kk < FT; kk += 16) {
      a_row_t a;
      b_row_t b;
      wmma::load_matrix_sync(a, P + kk, FT);
      wmma::load_matrix_sync(b, B + (size_t)kk * HD + c * 16, HD);
      wmma::mma_sync(acc, a, b, acc);
    }
    wmma::store_matrix_sync(C + c * 16, acc, HD, wmma::mem_row_major);
  }
}

/* C[16 × HD] (fp32, ld HD) += Pᵀ[16 × 64] · B[64 × HD]: P is a [64 q, 64 k] bf16 tile (ld FT) whose
 * key columns k0 .. k0+15 this warp owns. */
template <int HD> __device__ void warp_acc_ptb(float *C, const bf16 *P, int k0, const bf16 *B) {
  for (int c = 0; c < HD / 16; c++) {
    acc_t acc;
    wmma::load_matrix_sync(acc, C + c * 16, HD, wmma::mem_row_major);
    for (int kk = 0; kk < FT; kk += 16) {
      a_col_t a;
      b_row_t b;
      wmma::load_matrix_sync(a, P + (size_t)kk * FT + k0, FT);
      wmma::load_matrix_sync(b, B + (size_t)kk * HD + c * 16, HD);
      wmma::mma_sync(acc, a, b, acc);
    }
    wmma::store_matrix_sync(C + c * 16, acc, HD, wmma::mem_row_major);
  }
}

/* Is key j visible to the query at position p (row valid, key inside the sequence)? */
__device__ inline bool visible(bool row_ok, int j, int S, int p, int window) {
  return row_ok && j < S && j <= p && j >= flash_key_lo(p, window);
}

template <int HD> static size_t fwd_smem() {
  return sizeof(bf16) * (3 * FT * HD + FT * FT) + sizeof(float) * (FT * FT + FT * HD + 2 * FT);
}

template <int HD>
__global__ void __launch_bounds__(FTHREADS)
    flash_fwd(float *out, float *lse, const float *q, const float *k, const float *v, int T, int S, int H, int KV,
              int window, float scale) {
  extern __shared__ __align__(128) unsigned char smem[];
  bf16 *Qs = (bf16 *)smem, *Ks = Qs + FT * HD, *Vs = Ks + FT * HD, *Ps = Vs + FT * HD;
  float *Ss = (float *)(Ps + FT * FT), *Os = Ss + FT * FT, *Ms = Os + FT * HD, *Ls = Ms + FT;
  int i0 = blockIdx.x * FT, h = blockIdx.y, kh = h / (H / KV), w = threadIdx.x >> 5, lane = threadIdx.x & 31;
  int ldq = H * HD, ldk = KV * HD, nq = min(FT, T - i0);
  load_tile<HD>(Qs, q + (size_t)i0 * ldq + h * HD, nq, ldq);
  for (int i = threadIdx.x; i < FT * HD; i += FTHREADS) Os[i] = 0;
  if (threadIdx.x < FT) Ms[threadIdx.x] = -INFINITY, Ls[threadIdx.x] = 0;
  int pmin = S - T + i0, pmax = pmin + nq - 1;
  /* Each lane pair owns a row of the warp's 16, one half of its columns each. */
  int rr = w * 16 + (lane >> 1), half = lane & 1, p = pmin + rr;
  bool row_ok = rr < nq;
  for (int j0 = flash_key_lo(pmin, window); j0 <= pmax; j0 += FT) {
    __syncthreads(); /* the previous tile's K and V are no longer read */
    load_tile<HD>(Ks, k + (size_t)j0 * ldk + kh * HD, min(FT, S - j0), ldk);
    load_tile<HD>(Vs, v + (size_t)j0 * ldk + kh * HD, min(FT, S - j0), ldk);
    __syncthreads();
    warp_abt<HD>(Ss + w * 16 * FT, Qs + (size_t)w * 16 * HD, Ks);
    __syncwarp();
    float *srow = Ss + rr * FT;
    float mx = -INFINITY;
    for (int c = half * 32; c < half * 32 + 32; c++) {
      float s = visible(row_ok, j0 + c, S, p, window) ? srow[c] * scale : -INFINITY;
      srow[c] = s;
      mx = fmaxf(mx, s);
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    float mold = Ms[rr], mnew = fmaxf(mold, mx), alpha = mnew == -INFINITY ? 1.0f : __expf(mold - mnew), sum = 0;
    for (int c = half * 32; c < half * 32 + 32; c++) {
      float e = srow[c] == -INFINITY ? 0.0f : __expf(srow[c] - mnew);
      Ps[rr * FT + c] = __float2bfloat16_rn(e);
      sum += e;
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    for (int d = half * (HD / 2); d < (half + 1) * (HD / 2); d++) Os[rr * HD + d] *= alpha;
    __syncwarp(); /* both lanes of the pair read Ms[rr] before it changes */
    if (!half) Ms[rr] = mnew, Ls[rr] = Ls[rr] * alpha + sum;
    __syncwarp();
    warp_acc_pb<HD>(Os + (size_t)w * 16 * HD, Ps + w * 16 * FT, Vs);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < nq * HD; i += FTHREADS) {
    int r = i / HD, d = i % HD;
    out[(size_t)(i0 + r) * ldq + h * HD + d] = Os[i] / Ls[r];
  }
  if (lse && threadIdx.x < nq) lse[(size_t)(i0 + threadIdx.x) * H + h] = Ms[threadIdx.x] + logf(Ls[threadIdx.x]);
}

/* Row statistics of a query tile for the backward: L = lse, D = rowsum(dO ⊙ O) (fp32, from global). */
template <int HD>
__device__ void row_stats_bwd(float *Lr, float *Dr, const float *lse, const float *dout, const float *out, int i0, int nq,
                              int h, int H) {
  int w = threadIdx.x >> 5, lane = threadIdx.x & 31, rr = w * 16 + (lane >> 1), half = lane & 1;
  float d = 0;
  if (rr < nq) {
    size_t o = ((size_t)(i0 + rr) * H + h) * HD;
    for (int c = half * (HD / 2); c < (half + 1) * (HD / 2); c++) d += dout[o + c] * out[o + c];
  }
  d += __shfl_xor_sync(0xffffffffu, d, 1);
  if (!half) {
    Dr[rr] = d;
    Lr[rr] = rr < nq ? lse[(size_t)(i0 + rr) * H + h] : 0.0f;
  }
}

template <int HD> static size_t bwd_q_smem() {
  return sizeof(bf16) * (4 * FT * HD + FT * FT) + sizeof(float) * (2 * FT * FT + FT * HD + 2 * FT);
}

template <int HD>
__global__ void __launch_bounds__(FTHREADS)
    flash_bwd_q(float *dq, const float *dout, const float *out, const float *lse, const float *q, const float *k,
                const float *v, int T, int S, int H, int KV, int window, float scale) {
  extern __shared__ __align__(128) unsigned char smem[];
  bf16 *Qs = (bf16 *)smem, *dOs = Qs + FT * HD, *Ks = dOs + FT * HD, *Vs = Ks + FT * HD, *dSs = Vs + FT * HD;
  float *Ss = (float *)(dSs + FT * FT), *dPs = Ss + FT * FT, *dQs = dPs + FT * FT, *Lr = dQs + FT * HD, *Dr = Lr + FT;
  int i0 = blockIdx.x * FT, h = blockIdx.y, kh = h / (H / KV), w = threadIdx.x >> 5, lane = threadIdx.x & 31;
  int ldq = H * HD, ldk = KV * HD, nq = min(FT, T - i0);
  load_tile<HD>(Qs, q + (size_t)i0 * ldq + h * HD, nq, ldq);
  load_tile<HD>(dOs, dout + (size_t)i0 * ldq + h * HD, nq, ldq);
  for (int i = threadIdx.x; i < FT * HD; i += FTHREADS) dQs[i] = 0;
  row_stats_bwd<HD>(Lr, Dr, lse, dout, out, i0, nq, h, H);
  int pmin = S - T + i0, pmax = pmin + nq - 1;
  int rr = w * 16 + (lane >> 1), half = lane & 1, p = pmin + rr;
  bool row_ok = rr < nq;
  for (int j0 = flash_key_lo(pmin, window); j0 <= pmax; j0 += FT) {
    __syncthreads();
    load_tile<HD>(Ks, k + (size_t)j0 * ldk + kh * HD, min(FT, S - j0), ldk);
    load_tile<HD>(Vs, v + (size_t)j0 * ldk + kh * HD, min(FT, S - j0), ldk);
    __syncthreads();
    warp_abt<HD>(Ss + w * 16 * FT, Qs + (size_t)w * 16 * HD, Ks);
    warp_abt<HD>(dPs + w * 16 * FT, dOs + (size_t)w * 16 * HD, Vs);
    __syncwarp();
    float L = Lr[rr], D = Dr[rr];
    for (int c = half * 32; c < half * 32 + 32; c++) {
      float pj = visible(row_ok, j0 + c, S, p, window) ? __expf(Ss[rr * FT + c] * scale - L) : 0.0f;
      dSs[rr * FT + c] = __float2bfloat16_rn(pj * (dPs[rr * FT + c] - D) * scale);
    }
    __syncwarp();
    warp_acc_pb<HD>(dQs + (size_t)w * 16 * HD, dSs + w * 16 * FT, Ks);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < nq * HD; i += FTHREADS) dq[(size_t)(i0 + i / HD) * ldq + h * HD + i % HD] = dQs[i];
}

template <int HD> static size_t bwd_kv_smem() {
  return sizeof(bf16) * (4 * FT * HD + 2 * FT * FT) + sizeof(float) * (FT * FT + 2 * FT * HD + 2 * FT);
}

template <int HD>
__global__ void __launch_bounds__(FTHREADS)
    flash_bwd_kv(float *dk, float *dv, const float *dout, const float *out, const float *lse, const float *q,
                 const float *k, const float *v, int T, int S, int H, int KV, int window, float scale) {
  extern __shared__ __align__(128) unsigned char smem[];
  bf16 *Ks = (bf16 *)smem, *Vs = Ks + FT * HD, *Qs = Vs + FT * HD, *dOs = Qs + FT * HD, *Ps = dOs + FT * HD;
  bf16 *dSs = Ps + FT * FT;
  float *Ss = (float *)(dSs + FT * FT), *dKs = Ss + FT * FT, *dVs = dKs + FT * HD, *Lr = dVs + FT * HD, *Dr = Lr + FT;
  int j0 = blockIdx.x * FT, kh = blockIdx.y, group = H / KV, w = threadIdx.x >> 5, lane = threadIdx.x & 31;
  int ldq = H * HD, ldk = KV * HD, nk = min(FT, S - j0), j1 = j0 + nk - 1;
  load_tile<HD>(Ks, k + (size_t)j0 * ldk + kh * HD, nk, ldk);
  load_tile<HD>(Vs, v + (size_t)j0 * ldk + kh * HD, nk, ldk);
  for (int i = threadIdx.x; i < FT * HD; i += FTHREADS) { /* dk, dv accumulate into what is there */
    int r = i / HD, c = i % HD;
    size_t o = (size_t)(j0 + r) * ldk + kh * HD + c;
    dKs[i] = r < nk ? dk[o] : 0.0f;
    dVs[i] = r < nk ? dv[o] : 0.0f;
  }
  /* Queries that see a key of this tile: positions j0 .. j1 + window − 1 (all later ones without a window). */
  int ilo = max(0, j0 - (S - T)), ihi = window > 0 ? min(T - 1, j1 + window - 1 - (S - T)) : T - 1;
  int rr = w * 16 + (lane >> 1), half = lane & 1;
  for (int h = kh * group; h < (kh + 1) * group; h++)
    for (int i0 = ilo; i0 <= ihi; i0 += FT) {
      int nq = min(FT, T - i0), p = S - T + i0 + rr;
      bool row_ok = rr < nq;
      __syncthreads(); /* the previous tile's Q, dO, P and dS are no longer read */
      load_tile<HD>(Qs, q + (size_t)i0 * ldq + h * HD, nq, ldq);
      load_tile<HD>(dOs, dout + (size_t)i0 * ldq + h * HD, nq, ldq);
      row_stats_bwd<HD>(Lr, Dr, lse, dout, out, i0, nq, h, H);
      __syncthreads();
      warp_abt<HD>(Ss + w * 16 * FT, Qs + (size_t)w * 16 * HD, Ks);
      __syncwarp();
      float pj[32], L = Lr[rr], D = Dr[rr];
      for (int c = 0; c < 32; c++) {
        int col = half * 32 + c;
        pj[c] = visible(row_ok, j0 + col, S, p, window) ? __expf(Ss[rr * FT + col] * scale - L) : 0.0f;
        Ps[rr * FT + col] = __float2bfloat16_rn(pj[c]);
      }
      __syncwarp(); /* S is read: its rows take dP */
      warp_abt<HD>(Ss + w * 16 * FT, dOs + (size_t)w * 16 * HD, Vs);
      __syncwarp();
      for (int c = 0; c < 32; c++) {
        int col = half * 32 + c;
        dSs[rr * FT + col] = __float2bfloat16_rn(pj[c] * (Ss[rr * FT + col] - D) * scale);
      }
      __syncthreads(); /* every warp's rows of P and dS are in */
      warp_acc_ptb<HD>(dVs + (size_t)w * 16 * HD, Ps, w * 16, dOs);
      warp_acc_ptb<HD>(dKs + (size_t)w * 16 * HD, dSs, w * 16, Qs);
    }
  __syncthreads();
  for (int i = threadIdx.x; i < nk * HD; i += FTHREADS) {
    size_t o = (size_t)(j0 + i / HD) * ldk + kh * HD + i % HD;
    dk[o] = dKs[i];
    dv[o] = dVs[i];
  }
}

/* Tiles above the default 48 KiB of shared memory need the kernel's opt-in. */
template <typename K> static void smem_opt_in(K kernel, size_t bytes) {
  LT_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
}

int lt__flash_forward(lt_gpu_t *g, float *out, float *lse, const float *q, const float *k, const float *v, int T, int S,
                      int H, int KV, int hd, int window) {
  if (!g->flash || (hd != 64 && hd != 128)) return 0;
  dim3 grid((unsigned)((T + FT - 1) / FT), (unsigned)H);
  float scale = 1.0f / sqrtf((float)hd);
  if (hd == 64) {
    smem_opt_in(flash_fwd<64>, fwd_smem<64>());
    flash_fwd<64><<<grid, FTHREADS, fwd_smem<64>(), g->stream>>>(out, lse, q, k, v, T, S, H, KV, window, scale);
  } else {
    smem_opt_in(flash_fwd<128>, fwd_smem<128>());
    flash_fwd<128><<<grid, FTHREADS, fwd_smem<128>(), g->stream>>>(out, lse, q, k, v, T, S, H, KV, window, scale);
  }
  LT_LAUNCHED();
  return 1;
}

template <int HD>
static void flash_bwd(lt_gpu_t *g, float *dq, float *dk, float *dv, const float *dout, const float *out, const float *lse,
                      const float *q, const float *k, const float *v, int T, int S, int H, int KV, int window) {
  float scale = 1.0f / sqrtf((float)HD);
  smem_opt_in(flash_bwd_q<HD>, bwd_q_smem<HD>());
  smem_opt_in(flash_bwd_kv<HD>, bwd_kv_smem<HD>());
  flash_bwd_q<HD><<<dim3((unsigned)((T + FT - 1) / FT), (unsigned)H), FTHREADS, bwd_q_smem<HD>(), g->stream>>>(
      dq, dout, out, lse, q, k, v, T, S, H, KV, window, scale);
  LT_LAUNCHED();
  flash_bwd_kv<HD><<<dim3((unsigned)((S + FT - 1) / FT), (unsigned)KV), FTHREADS, bwd_kv_smem<HD>(), g->stream>>>(
      dk, dv, dout, out, lse, q, k, v, T, S, H, KV, window, scale);
  LT_LAUNCHED();
}

int lt__flash_backward(lt_gpu_t *g, float *dq, float *dk, float *dv, const float *dout, const float *out,
                       const float *lse, const float *q, const float *k, const float *v, int T, int S, int H, int KV,
                       int hd, int window) {
  if (!g->flash || (hd != 64 && hd != 128)) return 0;
  if (hd == 64)
    flash_bwd<64>(g, dq, dk, dv, dout, out, lse, q, k, v, T, S, H, KV, window);
  else
    flash_bwd<128>(g, dq, dk, dv, dout, out, lse, q, k, v, T, S, H, KV, window);
  return 1;
}
