/* Cross-file internals of the CUDA learner: the context, the abort-on-device-
 * error checks, launch helpers. */
#ifndef LT_LEARNER_CUDA_INTERNAL_CUH
#define LT_LEARNER_CUDA_INTERNAL_CUH

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "learner/gpu.h"
#include "learner/internal.h"

/* Blocks of a reduction whose partials are summed in a fixed order (no atomics: the same bits every run). */
#define LT_GPU_SUM_PARTS 1024u

struct lt_gpu {
  int dev;
  cudaStream_t stream;
  cublasHandle_t blas;
  int bf16;
  int recompute;
  int flash;                 /* attention on tensor cores (learner/cuda/flash.cu, lt_gpu_set_flash) */             /* models created from now on recompute activations (lt_gpu_set_recompute) */
  /* bf16 operand scratch of the linear layers, grown on demand */
  __nv_bfloat16 *bfa, *bfb;
  size_t bfa_n, bfb_n;
  float *f32;                /* float scratch of the kernels, grown on demand */
  size_t f32_n;
  double *sum;               /* an accumulator for reductions (gradient norm), then LT_GPU_SUM_PARTS block partials */
  cudaDeviceProp prop;
};

/* A device error leaves the learner's state unknown: abort with where and a hint. */
void lt__cuda_fail(const char *what, const char *err, const char *file, int line);
#define LT_CUDA(call)                                                                                  \
  do {                                                                                                 \
    cudaError_t e_ = (call);                                                                           \
    if (e_ != cudaSuccess) lt__cuda_fail(#call, cudaGetErrorString(e_), __FILE__, __LINE__);            \
  } while (0)
#define LT_CUBLAS(call)                                                                                \
  do {                                                                                                 \
    cublasStatus_t s_ = (call);                                                                        \
    if (s_ != CUBLAS_STATUS_SUCCESS) lt__cuda_fail(#call, cublasGetStatusString(s_), __FILE__, __LINE__); \
  } while (0)
#define LT_LAUNCHED() LT_CUDA(cudaGetLastError())

static inline unsigned lt__blocks(size_t n, unsigned threads) { return (unsigned)((n + threads - 1) / threads); }

/* The tensor-core attention when it is on and the head dim is 64 or 128 (returns 1), else 0:
 * the caller runs the CUDA-core kernels. */
int lt__flash_forward(lt_gpu_t *g, float *out, float *lse, const float *q, const float *k, const float *v, int T, int S,
                      int H, int KV, int hd, int window);
int lt__flash_backward(lt_gpu_t *g, float *dq, float *dk, float *dv, const float *dout, const float *out,
                       const float *lse, const float *q, const float *k, const float *v, int T, int S, int H, int KV,
                       int hd, int window);

/* Grows the context's bf16 scratch a or b, or its float scratch, to n elements. */
__nv_bfloat16 *lt__gpu_bf16_scratch(lt_gpu_t *g, int which, size_t n);
float *lt__gpu_f32_scratch(lt_gpu_t *g, size_t n);

/* Block-wide sum / max over blockDim.x threads (a multiple of 32, ≤ 1024). */
template <typename T> __device__ inline T lt__warp_sum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ inline float lt__warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
template <typename T> __device__ inline T lt__block_sum(T v, T *sh) {
  int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = lt__warp_sum(v);
  __syncthreads(); /* sh may still be read by a previous reduction */
  if (lane == 0) sh[w] = v;
  __syncthreads();
  v = threadIdx.x < nw ? sh[threadIdx.x] : (T)0;
  if (w == 0) v = lt__warp_sum(v);
  if (threadIdx.x == 0) sh[0] = v;
  __syncthreads();
  return sh[0];
}
__device__ inline float lt__block_max(float v, float *sh) {
  int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = lt__warp_max(v);
  __syncthreads();
  if (lane == 0) sh[w] = v;
  __syncthreads();
  v = threadIdx.x < nw ? sh[threadIdx.x] : -INFINITY;
  if (w == 0) v = lt__warp_max(v);
  if (threadIdx.x == 0) sh[0] = v;
  __syncthreads();
  return sh[0];
}

#endif
