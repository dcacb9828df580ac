/* The CPU reference of every op: forward/backward pairs on fp32 arrays.
 * These are what the CUDA kernels are tested against.  Backward functions
 * accumulate (+=) into parameter gradients and into input gradients unless
 * noted, so residual branches simply add up. */
#ifndef LT_LEARNER_OPS_H
#define LT_LEARNER_OPS_H

#include <stdint.h>

#include "util/cpus.h"

/* The BLAS build and the CPU kernel it picked ("OpenBLAS 0.3.21 ...; core Cooperlake"): bit-identical learner
 * steps need the same one (docs/replay.md). */
const char *lt_ops_blas(void);
/* The BLAS threads of this process's learner maths: n (0: every core), set before each step since the builtin
 * engine in the same process sets its own.  A product split among another number of threads sums in another
 * order: learner.threads is part of what a step's result depends on.  Returns the number in use. */
int lt_ops_blas_threads(int n);
/* The same for a learner with learner.cpus (NULL or empty: not pinned, as lt_ops_blas_threads): n threads (0:
 * every CPU of cpus), the calling thread and the BLAS's pinned to cpus.  The number in use, or LT_ESYS when the
 * pinning failed (a CPU the process's cgroup does not allow). */
int lt_ops_blas_pin(int n, const lt_cpus_t *cpus);
/* The number lt_ops_blas_pin(n, cpus) would use, changing nothing. */
int lt_ops_threads(int n, const lt_cpus_t *cpus);

/* y[N, out] = x[N, in] · W[out, in]ᵀ  (Hugging Face Linear layout). */
void lt_linear_forward(float *y, const float *x, const float *W, int N, int in, int out);
/* y[N, out] += x · Wᵀ (residual branches). */
void lt_linear_forward_acc(float *y, const float *x, const float *W, int N, int in, int out);
/* dx[N, in] += dy · W;  dW[out, in] += dyᵀ · x.  Either may be NULL. */
void lt_linear_backward(float *dx, float *dW, const float *dy, const float *x, const float *W, int N, int in, int out);

/* out[N, D] = x / sqrt(mean(x²) + eps) * w;  rstd[N] saved for backward. */
void lt_rmsnorm_forward(float *out, float *rstd, const float *x, const float *w, int N, int D, float eps);
/* dx[N, D] += ...;  dw[D] += ... */
void lt_rmsnorm_backward(float *dx, float *dw, const float *dout, const float *x, const float *w, const float *rstd,
                         int N, int D);

/* Rotate-half rotary embedding in place on x[N, heads, hd] at positions pos[N].
 * cos/sin tables are [max_pos, hd/2].  inverse = 1 applies the transpose (the backward). */
void lt_rope_apply(float *x, const int *pos, int N, int heads, int hd, const float *cos, const float *sin, int inverse);

/* h = silu(g) * u over n elements. */
void lt_swiglu_forward(float *h, const float *g, const float *u, int n);
/* dg, du (overwritten) from dh. */
void lt_swiglu_backward(float *dg, float *du, const float *dh, const float *g, const float *u, int n);

/* Scratch floats the attention functions need for S keys. */
#define LT_ATT_SCRATCH(S) (2 * 64 * (size_t)(S))

/* Causal (optionally sliding-window) grouped-query attention for one sequence.
 * q[T, H, hd] are the queries of positions S−T .. S−1; k, v[S, KV, hd] are the
 * keys and values of positions 0 .. S−1.  Query i sees key j when j ≤ S−T+i and,
 * with window W > 0, S−T+i − j < W.  out[T, H, hd]; lse[T, H] (log-sum-exp of
 * each score row, for the backward).  scratch: LT_ATT_SCRATCH(S) floats. */
void lt_attention_forward(float *out, float *lse, const float *q, const float *k, const float *v, int T, int S, int H,
                          int KV, int hd, int window, float *scratch);
/* dq[T, H, hd] (overwritten), dk, dv[S, KV, hd] (+=).  scratch: LT_ATT_SCRATCH(S) floats. */
void lt_attention_backward(float *dq, float *dk, float *dv, const float *dout, const float *out, const float *lse,
                           const float *q, const float *k, const float *v, int T, int S, int H, int KV, int hd,
                           int window, float *scratch);

/* Row softmax in place over n columns. */
void lt_softmax_row(float *x, int n);

/* Router for one token: softmax over E logits, then the top-k experts (or
 * the given ids for keep-routing).  probs[E] receive the softmax; ids[k] and
 * weights[k] the choice (weights renormalised over the k when norm_topk).
 * Returns the routing confidence: the router's mass on the experts the token
 * actually uses, before renormalisation — its own top-k, or under Keep Routing
 * the replayed ids, so that a learner router that disagrees with the rollout's
 * choice shows as low confidence. */
float lt_router_forward(float *probs, uint16_t *ids, float *weights, const float *logits, int E, int k, int norm_topk,
                        const uint16_t *forced_ids);
/* dlogits[E] (overwritten) from dweights[k]. */
void lt_router_backward(float *dlogits, const float *probs, const uint16_t *ids, const float *dweights, int E, int k,
                        int norm_topk);

#endif
