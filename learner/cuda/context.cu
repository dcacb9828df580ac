/* The CUDA context (device, stream, cuBLAS), memory, build info and the
 * matrix products (cuBLAS in fp32 or with bf16 operands). */
#include <stdio.h>
#include <stdlib.h>

#include <nccl.h>

#include "learner/cuda/internal.cuh"
extern "C" {
#include "util/error.h"
}

void lt__cuda_fail(const char *what, const char *err, const char *file, int line) {
  fprintf(stderr,
          "%s:%d: CUDA error: %s: %s\n"
          "hint: the learner's device state is lost; check `nvidia-smi` (driver, memory, Xid errors), "
          "run with learner.device=cpu to continue on the CPU, or rerun under compute-sanitizer.\n",
          file, line, what, err);
  abort();
}

extern "C" void lt__cuda_build_info(char *out, size_t cap) {
  int v = 0;
  ncclGetVersion(&v);
  snprintf(out, cap, "cuda=yes (runtime %d.%d, sm %s), nccl=%d.%d.%d", CUDART_VERSION / 1000,
           (CUDART_VERSION % 1000) / 10, LT_CUDA_ARCHS, v / 10000, (v / 100) % 100, v % 100);
}

extern "C" int lt__cuda_device_count(void) {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0; /* no driver or no GPU: 0, not an error */
}

int lt_gpu_open(int dev, lt_gpu_t **out) {
  *out = NULL;
  int n = lt__cuda_device_count();
  if (dev < 0 || dev >= n) return lt_error_set(LT_EDEVICE, "CUDA device %d: this machine has %d usable GPU(s)", dev, n);
  lt_gpu_t *g = (lt_gpu_t *)calloc(1, sizeof *g);
  if (!g) return lt_error_set(LT_ENOMEM, "CUDA context: out of memory");
  g->dev = dev;
  LT_CUDA(cudaSetDevice(dev));
  LT_CUDA(cudaGetDeviceProperties(&g->prop, dev));
  LT_CUDA(cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking));
  LT_CUBLAS(cublasCreate(&g->blas));
  LT_CUBLAS(cublasSetStream(g->blas, g->stream));
  /* fp32 products stay fp32 (no TF32): the parity tests compare with OpenBLAS. */
  LT_CUBLAS(cublasSetMathMode(g->blas, CUBLAS_DEFAULT_MATH));
  int rc = lt_gpu_alloc(g, (void **)&g->sum, sizeof *g->sum * (1 + LT_GPU_SUM_PARTS));
  if (rc < 0) {
    lt_gpu_close(g);
    return rc;
  }
  *out = g;
  return 0;
}

void lt_gpu_close(lt_gpu_t *g) {
  if (!g) return;
  cudaStreamSynchronize(g->stream);
  cudaFree(g->bfa);
  cudaFree(g->bfb);
  cudaFree(g->f32);
  cudaFree(g->sum);
  cublasDestroy(g->blas);
  cudaStreamDestroy(g->stream);
  free(g);
}

void lt_gpu_set_bf16(lt_gpu_t *g, int on) { g->bf16 = on; }
void lt_gpu_set_recompute(lt_gpu_t *g, int on) { g->recompute = on; }
void lt_gpu_set_flash(lt_gpu_t *g, int on) { g->flash = on; }

void lt_gpu_describe(const lt_gpu_t *g, char *out, size_t cap) {
  snprintf(out, cap, "%s, sm_%d%d, %d SMs, %.1f GiB", g->prop.name, g->prop.major, g->prop.minor,
           g->prop.multiProcessorCount, (double)g->prop.totalGlobalMem / (1 << 30));
}

int lt_gpu_alloc(lt_gpu_t *g, void **p, size_t bytes) {
  *p = NULL;
  if (!bytes) bytes = 4;
  cudaError_t e = cudaMalloc(p, bytes);
  if (e != cudaSuccess) {
    cudaGetLastError(); /* an allocation failure is not sticky: clear it */
    *p = NULL;
    return lt_error_set(LT_ENOMEM, "GPU memory: %zu bytes: %s", bytes, cudaGetErrorString(e));
  }
  LT_CUDA(cudaMemsetAsync(*p, 0, bytes, g->stream));
  return 0;
}

void lt_gpu_mem_info(lt_gpu_t *g, size_t *free_b, size_t *total_b) {
  (void)g;
  LT_CUDA(cudaMemGetInfo(free_b, total_b));
}

void lt_gpu_free(void *p) {
  if (p) cudaFree(p);
}

void lt_gpu_upload(lt_gpu_t *g, void *dst, const void *src, size_t bytes) {
  LT_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, g->stream));
  LT_CUDA(cudaStreamSynchronize(g->stream)); /* src may be reused by the caller at once */
}

void lt_gpu_download(lt_gpu_t *g, void *dst, const void *src, size_t bytes) {
  LT_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, g->stream));
  LT_CUDA(cudaStreamSynchronize(g->stream));
}

void lt_gpu_zero(lt_gpu_t *g, void *p, size_t bytes) { LT_CUDA(cudaMemsetAsync(p, 0, bytes, g->stream)); }

void lt_gpu_copy(lt_gpu_t *g, void *dst, const void *src, size_t bytes) {
  LT_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, g->stream));
}

void lt_gpu_sync(lt_gpu_t *g) { LT_CUDA(cudaStreamSynchronize(g->stream)); }

struct lt_gpu_timer {
  cudaEvent_t a, b;
};

lt_gpu_timer_t *lt_gpu_timer_start(lt_gpu_t *g) {
  lt_gpu_timer_t *t = (lt_gpu_timer_t *)malloc(sizeof *t);
  if (!t) return NULL;
  LT_CUDA(cudaEventCreate(&t->a));
  LT_CUDA(cudaEventCreate(&t->b));
  LT_CUDA(cudaEventRecord(t->a, g->stream));
  return t;
}

double lt_gpu_timer_stop(lt_gpu_t *g, lt_gpu_timer_t *t) {
  if (!t) return -1;
  float ms = 0;
  LT_CUDA(cudaEventRecord(t->b, g->stream));
  LT_CUDA(cudaEventSynchronize(t->b));
  LT_CUDA(cudaEventElapsedTime(&ms, t->a, t->b));
  cudaEventDestroy(t->a);
  cudaEventDestroy(t->b);
  free(t);
  return ms / 1e3;
}

/* Scratch is only ever grown: the stream is drained first, since queued kernels may still read the old one. */
static void *grow(lt_gpu_t *g, void **p, size_t *cap, size_t n, size_t elem) {
  if (n > *cap) {
    LT_CUDA(cudaStreamSynchronize(g->stream));
    cudaFree(*p);
    LT_CUDA(cudaMalloc(p, n * elem));
    *cap = n;
  }
  return *p;
}

__nv_bfloat16 *lt__gpu_bf16_scratch(lt_gpu_t *g, int which, size_t n) {
  return (__nv_bfloat16 *)(which ? grow(g, (void **)&g->bfb, &g->bfb_n, n, 2) : grow(g, (void **)&g->bfa, &g->bfa_n, n, 2));
}

float *lt__gpu_f32_scratch(lt_gpu_t *g, size_t n) { return (float *)grow(g, (void **)&g->f32, &g->f32_n, n, 4); }

__global__ void to_bf16_kernel(__nv_bfloat16 *dst, const float *src, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    dst[i] = __float2bfloat16_rn(src[i]);
}

void lt_gpu_to_bf16(lt_gpu_t *g, void *dst, const float *src, size_t n) {
  unsigned b = lt__blocks(n, 256);
  to_bf16_kernel<<<b < 65535u ? b : 65535u, 256, 0, g->stream>>>((__nv_bfloat16 *)dst, src, n);
  LT_LAUNCHED();
}

/* Column-major C[m, n] = β·C + op(A)·op(B) with fp32 or bf16 operands.  na and
 * nb are the element counts of A and B (what the bf16 conversion reads). */
static void gemm(lt_gpu_t *g, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const float *A, int lda,
                 size_t na, const float *B, int ldb, size_t nb, float beta, float *C, int ldc) {
  const float one = 1.0f;
  if (!g->bf16) {
    LT_CUBLAS(cublasSgemm(g->blas, ta, tb, m, n, k, &one, A, lda, B, ldb, &beta, C, ldc));
    return;
  }
  __nv_bfloat16 *a = lt__gpu_bf16_scratch(g, 0, na), *b = lt__gpu_bf16_scratch(g, 1, nb);
  lt_gpu_to_bf16(g, a, A, na);
  lt_gpu_to_bf16(g, b, B, nb);
  LT_CUBLAS(cublasGemmEx(g->blas, ta, tb, m, n, k, &one, a, CUDA_R_16BF, lda, b, CUDA_R_16BF, ldb, &beta, C, CUDA_R_32F,
                         ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

/* Row-major y[N, out] = x[N, in]·W[out, in]ᵀ is column-major yᵀ = Wᵀᵀ·xᵀ. */
static void linear(lt_gpu_t *g, float *y, const float *x, const float *W, int N, int in, int out, float beta) {
  if (N == 0) return;
  gemm(g, CUBLAS_OP_T, CUBLAS_OP_N, out, N, in, W, in, (size_t)out * in, x, in, (size_t)N * in, beta, y, out);
}

void lt_gpu_linear_forward(lt_gpu_t *g, float *y, const float *x, const float *W, int N, int in, int out) {
  linear(g, y, x, W, N, in, out, 0.0f);
}

void lt_gpu_linear_forward_acc(lt_gpu_t *g, float *y, const float *x, const float *W, int N, int in, int out) {
  linear(g, y, x, W, N, in, out, 1.0f);
}

void lt_gpu_linear_backward(lt_gpu_t *g, float *dx, float *dW, const float *dy, const float *x, const float *W, int N,
                            int in, int out) {
  if (N == 0) return;
  /* dxᵀ[in, N] += W(col-major [in, out])·dyᵀ[out, N] */
  if (dx) gemm(g, CUBLAS_OP_N, CUBLAS_OP_N, in, N, out, W, in, (size_t)out * in, dy, out, (size_t)N * out, 1.0f, dx, in);
  /* dWᵀ[in, out] += xᵀ[in, N]·dy[N, out] */
  if (dW) gemm(g, CUBLAS_OP_N, CUBLAS_OP_T, in, out, N, x, in, (size_t)N * in, dy, out, (size_t)N * out, 1.0f, dW, in);
}

void lt_gpu_gemm_bf16(lt_gpu_t *g, float *C, const void *A, const void *B, int M, int N, int K) {
  const float one = 1.0f, zero = 0.0f;
  /* Row-major C[M, N] = A[M, K]·B[N, K]ᵀ: column-major Cᵀ = Bᵀᵀ·Aᵀ. */
  LT_CUBLAS(cublasGemmEx(g->blas, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &one, B, CUDA_R_16BF, K, A, CUDA_R_16BF, K, &zero, C,
                         CUDA_R_32F, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}
