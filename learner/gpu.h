/* The CUDA learner (learner/cuda/): every op of learner/ops.h on device
 * pointers, the policy head, AdamW, and the whole model's forward and
 * backward on one GPU (the loss runs on the host, lt_loss_compute).  The CPU code is the
 * reference: tests/gpu/ compares each of these with it.
 *
 * Precision: parameters, gradients and optimizer state are fp32 (master
 * weights).  Matrix products run on cuBLAS either in plain fp32 (TF32 off, the
 * mode the parity tests use) or with bf16 operands and fp32 accumulation
 * (lt_gpu_set_bf16).
 *
 * Errors: allocation and argument errors return negative LT_E* codes; a
 * failing kernel launch or CUDA/cuBLAS call is an unrecoverable device error
 * and aborts with file:line and a hint (the one place longtail aborts).
 *
 * Only built with CUDA (LT_HAVE_CUDA); the CPU learner never needs it. */
#ifndef LT_LEARNER_GPU_H
#define LT_LEARNER_GPU_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "learner/loss.h"
#include "learner/model.h"
#include "learner/optim.h"

typedef struct lt_gpu lt_gpu_t;

/* ---- context and memory (learner/cuda/context.cu) ---- */
/* Opens device `dev` with one stream and one cuBLAS handle. */
int lt_gpu_open(int dev, lt_gpu_t **out);
void lt_gpu_close(lt_gpu_t *g);
/* 1: matrix products with bf16 operands, fp32 accumulation; 0: fp32. */
void lt_gpu_set_bf16(lt_gpu_t *g, int on);
/* 1: models created from now on keep each layer's input and one layer's
 * activations, and recompute a layer's forward in the backward
 * (learner.gpu.recompute: long sequences of larger models fit). */
void lt_gpu_set_recompute(lt_gpu_t *g, int on);
/* 1: attention with head dims 64 and 128 on tensor cores (FlashAttention-2
 * style, bf16 operands, fp32 accumulation, deterministic backward); 0: the
 * fp32 CUDA-core kernels.  Off by default until a GPU run has checked it
 * (make test-gpu's "flash attention" lines). */
void lt_gpu_set_flash(lt_gpu_t *g, int on);
/* "NVIDIA H100 80GB HBM3, sm_90, 132 SMs" */
void lt_gpu_describe(const lt_gpu_t *g, char *out, size_t cap);
int lt_gpu_alloc(lt_gpu_t *g, void **p, size_t bytes); /* zeroed */
void lt_gpu_free(void *p);
/* Free and total device memory in bytes (what the benchmarks check before a shape). */
void lt_gpu_mem_info(lt_gpu_t *g, size_t *free_b, size_t *total_b);
void lt_gpu_upload(lt_gpu_t *g, void *dst, const void *src, size_t bytes);
void lt_gpu_download(lt_gpu_t *g, void *dst, const void *src, size_t bytes);
void lt_gpu_zero(lt_gpu_t *g, void *p, size_t bytes);
void lt_gpu_copy(lt_gpu_t *g, void *dst, const void *src, size_t bytes); /* device to device */
void lt_gpu_sync(lt_gpu_t *g);
/* Seconds between two points on the stream (for benchmarks). */
typedef struct lt_gpu_timer lt_gpu_timer_t;
lt_gpu_timer_t *lt_gpu_timer_start(lt_gpu_t *g);
double lt_gpu_timer_stop(lt_gpu_t *g, lt_gpu_timer_t *t);

/* ---- ops on device pointers, the same contracts as learner/ops.h ---- */
void lt_gpu_linear_forward(lt_gpu_t *g, float *y, const float *x, const float *W, int N, int in, int out);
/* y += x·Wᵀ (residual branches). */
void lt_gpu_linear_forward_acc(lt_gpu_t *g, float *y, const float *x, const float *W, int N, int in, int out);
void lt_gpu_linear_backward(lt_gpu_t *g, float *dx, float *dW, const float *dy, const float *x, const float *W, int N,
                            int in, int out);
/* C[M, N] = A[M, K] · B[N, K]ᵀ with bf16 operands (device bf16 arrays) and fp32
 * accumulation and output: the raw rate the benchmarks compare with. */
void lt_gpu_gemm_bf16(lt_gpu_t *g, float *C, const void *A, const void *B, int M, int N, int K);
/* fp32 → bf16 (round to nearest even) of n values. */
void lt_gpu_to_bf16(lt_gpu_t *g, void *dst, const float *src, size_t n);
void lt_gpu_rmsnorm_forward(lt_gpu_t *g, float *out, float *rstd, const float *x, const float *w, int N, int D,
                            float eps);
void lt_gpu_rmsnorm_backward(lt_gpu_t *g, float *dx, float *dw, const float *dout, const float *x, const float *w,
                             const float *rstd, int N, int D);
void lt_gpu_rope_apply(lt_gpu_t *g, float *x, const int *pos, int N, int heads, int hd, const float *cos,
                       const float *sin, int inverse);
void lt_gpu_swiglu_forward(lt_gpu_t *g, float *h, const float *gate, const float *up, size_t n);
void lt_gpu_swiglu_backward(lt_gpu_t *g, float *dgate, float *dup, const float *dh, const float *gate, const float *up,
                            size_t n);
/* Fused attention for one sequence (no [T, S] score matrix in memory):
 * lt_attention_forward's contract; dq overwritten, dk/dv accumulated. */
void lt_gpu_attention_forward(lt_gpu_t *g, float *out, float *lse, const float *q, const float *k, const float *v,
                              int T, int S, int H, int KV, int hd, int window);
void lt_gpu_attention_backward(lt_gpu_t *g, float *dq, float *dk, float *dv, const float *dout, const float *out,
                               const float *lse, const float *q, const float *k, const float *v, int T, int S, int H,
                               int KV, int hd, int window);
/* Router of N tokens: lt_router_forward row by row.  forced_ids [N, k] or NULL;
 * mass[N] receives each token's routing confidence (the mass on the experts it
 * uses: its own top-k, or the forced ids). */
void lt_gpu_router_forward(lt_gpu_t *g, float *probs, uint16_t *ids, float *weights, float *mass, const float *logits,
                           int N, int E, int k, int norm_topk, const uint16_t *forced_ids);
void lt_gpu_router_backward(lt_gpu_t *g, float *dlogits, const float *probs, const uint16_t *ids, const float *dweights,
                            int N, int E, int k, int norm_topk);

/* ---- head and loss (learner/cuda/head.cu) ---- */
/* Per-row options of the head (device arrays; a NULL member is off): the
 * sampling temperature, and the Keep Sampling Mask (docs/losses.md) under which
 * log π(target) is renormalised over exactly the row's kept ids plus the target. */
typedef struct {
  const float *inv_temp;   /* [n] 1/T of the row's target; NULL: T = 1 */
  const int *keep_n;       /* [n] size of the row's kept set, 0: the whole vocabulary; NULL: none */
  const int *keep_off;     /* [n] where the row's ids start in keep_ids */
  const int32_t *keep_ids; /* the sets' ids, concatenated */
  uint8_t *mark;           /* [n, V] zeroed scratch (left zeroed), needed with keep_n */
} lt_gpu_head_opts_t;
/* For each row r of logits [n, V] with target[r] ≥ 0: lse[r] (over the kept set),
 * logp[r] = z[target]/T − lse, entropy[r] of softmax(z/T) (rows with target < 0
 * are skipped).  opts NULL: T = 1, the whole vocabulary. */
void lt_gpu_head_forward(lt_gpu_t *g, float *lse, float *logp, float *entropy, const float *logits, const int *target,
                         int n, int V, const lt_gpu_head_opts_t *opts);
/* logits [n, V] overwritten with dL/dz = dlogp[r]/T · (1[j = target] − p_j), p
 * the (kept-set) softmax of z/T and 0 outside the kept set; the same opts as the forward. */
void lt_gpu_head_backward(lt_gpu_t *g, float *logits, const float *lse, const float *dlogp, const int *target, int n,
                          int V, const lt_gpu_head_opts_t *opts);

/* ---- optimizer (learner/cuda/optim.cu) ---- */
/* Global gradient L2 norm over the model's tensors (frozen router excluded). */
double lt_gpu_grad_norm(lt_gpu_t *g, const lt_optim_cfg_t *c, const lt_model_t *host, const float *grads);
/* lt_optim_step's AdamW on device buffers (params and grads in the host
 * model's layout) for the whole tensors in [lo, hi) (a rank's ZeRO-1 shard,
 * lt_dist_shard; 0 and nparams on one rank), whose moments m, v hold hi - lo
 * floats; the norm is the whole buffer's.  Muon is refused (LT_EUNSUPP).
 * step: updates done before. */
int lt_gpu_adamw_step(lt_gpu_t *g, const lt_optim_cfg_t *c, const lt_model_t *host, float *params, float *grads,
                      float *m, float *v, size_t lo, size_t hi, int64_t step, double *gnorm, double *lr_out);

/* ---- the whole model (learner/cuda/model.cu) ---- */
typedef struct lt_gpu_model lt_gpu_model_t;
/* Copies the host model's parameters to the device and sizes a training
 * workspace for max_tokens packed tokens of sequences up to max_seq; with
 * hi > lo, AdamW moments for the parameter shard [lo, hi) (zeros). */
int lt_gpu_model_create(lt_gpu_t *g, const lt_model_t *host, int max_tokens, int max_seq, size_t lo, size_t hi,
                        lt_gpu_model_t **out);
void lt_gpu_model_free(lt_gpu_model_t *gm);
/* lt_model_forward on the GPU; out's arrays are host arrays owned by gm. */
int lt_gpu_model_forward(lt_gpu_model_t *gm, const lt_batch_t *b, lt_fwd_out_t *out);
/* lt_model_backward: accumulates into the device gradients. dlogprobs is a host [N] array. */
int lt_gpu_model_backward(lt_gpu_model_t *gm, const float *dlogprobs, const float *dvalues);
void lt_gpu_model_zero_grad(lt_gpu_model_t *gm);
/* AdamW of the created shard on the device copy (its moments live on the
 * device); step: updates done before. */
int lt_gpu_model_step(lt_gpu_model_t *gm, const lt_optim_cfg_t *c, int64_t step, double *gnorm, double *lr);
/* The shard's optimizer moments [hi - lo] between host arrays and the device. */
void lt_gpu_model_moments(lt_gpu_model_t *gm, float *m, float *v, int to_device);
/* The device parameter buffer (nparams floats), for the ranks' all-gather. */
float *lt_gpu_model_params(lt_gpu_model_t *gm);
/* Copies parameters / gradients back into host buffers of nparams floats. */
void lt_gpu_model_download(lt_gpu_model_t *gm, float *params, float *grads);
/* The device gradient buffer (nparams floats), for the ranks' ncclAllReduce. */
float *lt_gpu_model_grads(lt_gpu_model_t *gm);

#ifdef __cplusplus
}
#endif

#endif
