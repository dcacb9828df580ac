/* Internals of learner/ shared between its files, not a public header: the device the trainer runs its models on
 * (the CPU, learner/device_cpu.c, or one GPU, learner/device_cuda.c), the projections every adapted matrix product
 * goes through (learner/proj.c), and what forward.c, backward.c and params.c share. */
#ifndef LT_LEARNER_INTERNAL_H
#define LT_LEARNER_INTERNAL_H

#include "learner/model.h"
#include "learner/optim.h"
#include "learner/trainer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the models a trainer holds, by name ---- */

typedef enum {
  LT__POLICY, /* the actor: trained, published */
  LT__CRITIC, /* the value model: trained, never published */
  LT__REF,    /* the KL reference: scored, never trained */
  LT__NMODELS
} lt__model_id;

/* "policy", "critic", "reference" (log lines and errors). */
const char *lt__model_name(lt__model_id id);

/* One model as a device holds it.  The device's copy is the authority: on the CPU it is the host model itself; on a
 * GPU the host copy is current only after `pull` (the trainer pulls where a checkpoint or a published version reads
 * it: lt_trainer_policy, lt_trainer_save). */
typedef struct {
  lt__model_id id;
  lt_model_t *host;
  lt_optim_t *opt;         /* NULL for a model that is only scored (the reference) */
  int cap_tokens, cap_seq; /* the workspace reserved so far */
  int host_stale;          /* an update moved the device copy since the host's was pulled */
  void *impl;              /* the device's state for this model (CUDA: its lt_gpu_model_t) */
} lt__dmodel_t;

typedef struct lt__device lt__device_t;

/* What a device does for the trainer.  Every call but open and close takes one model. */
typedef struct {
  const char *name;
  int (*open)(lt__device_t *d, const lt_trainer_cfg_t *cfg);
  void (*close)(lt__device_t *d);
  /* Sizes m's workspace for `tokens` packed tokens in sequences of at most `seq` (the trainer calls it only to grow;
   * a model with an optimizer gets its gradients too). */
  int (*reserve)(lt__device_t *d, lt__dmodel_t *m, int tokens, int seq);
  /* lt_model_forward / lt_model_backward on the device copy; out's arrays are host arrays. */
  int (*forward)(lt__device_t *d, lt__dmodel_t *m, const lt_batch_t *b, lt_fwd_out_t *out);
  int (*backward)(lt__device_t *d, lt__dmodel_t *m, const float *dlogprobs, const float *dvalues);
  void (*zero_grad)(lt__device_t *d, lt__dmodel_t *m);
  /* Sums m's gradients over the learner ranks (MPI on host buffers, NCCL on device ones). */
  int (*reduce_grads)(lt__device_t *d, lt__dmodel_t *m);
  /* One optimizer update of m with its summed gradients: this rank's ZeRO-1 shard, then every rank's updated slice to
   * all; *gnorm the gradient norm before clipping, *lr the learning rate used. */
  int (*update)(lt__device_t *d, lt__dmodel_t *m, double *gnorm, double *lr);
  /* Device → host: m->host's parameters, and its optimizer's moments when `moments`. */
  void (*pull)(lt__device_t *d, lt__dmodel_t *m, int moments);
  /* Forgets m's device copy (the host state was replaced: a resume); the next reserve rebuilds it from the host. */
  void (*drop)(lt__device_t *d, lt__dmodel_t *m);
} lt__device_impl_t;

struct lt__device {
  const lt__device_impl_t *impl;
  void *state; /* the implementation's (CUDA: the lt_gpu_t context) */
};

extern const lt__device_impl_t lt__device_cpu;
#ifdef LT_HAVE_CUDA
extern const lt__device_impl_t lt__device_cuda;
#endif
/* The device learner.device asked for (cfg->cuda); LT_EUNSUPP when this build has none. */
int lt__device_pick(const lt_trainer_cfg_t *cfg, const lt__device_impl_t **out);

/* ---- projections (learner/proj.c) ---- */

/* The matrices of a layer that a projection names (Hugging Face's module names: q_proj ... down_proj; in a MoE layer
 * gate/up/down are the experts'). */
typedef enum { LT_PROJ_Q, LT_PROJ_K, LT_PROJ_V, LT_PROJ_O, LT_PROJ_GATE, LT_PROJ_UP, LT_PROJ_DOWN, LT_PROJ_N } lt__proj;

/* The one forward/backward pair of every projection of a layer's matrices: y[N, out] = x[N, in] · Wᵀ (acc: y +=, the
 * residual branches o_proj and down_proj), W the matrix of projection p of layer l (of expert e in a MoE layer, else
 * e = 0). */
void lt__proj_forward(const lt_model_t *m, int l, lt__proj p, int e, float *y, const float *x, int N, int acc);
/* dx[N, in] += dy · W (dx NULL: not wanted); W's gradient += dyᵀ · x when the model keeps gradients. */
void lt__proj_backward(lt_model_t *m, int l, lt__proj p, int e, float *dx, const float *dy, const float *x, int N);
/* in and out sizes of projection p in layer l. */
void lt__proj_shape(const lt_model_config_t *c, int l, lt__proj p, int *in, int *out);
/* Projection p's matrix among a layer's views L (of m's parameters or gradients), expert e's in a MoE layer. */
float *lt__proj_matrix(const lt_model_t *m, const lt_layer_w_t *L, int l, lt__proj p, int e);
/* The adapter's gradient buffer (lt_model_train_alloc of a model with an adapter: its base keeps none). */
int lt__lora_train_alloc(lt_model_t *m);

/* ---- the team (learner/pool.c): the learner's threads ---- */

/* Part `part` of `nparts` of some work. */
typedef void (*lt__team_fn)(void *arg, int part, int nparts);
/* n threads, the caller included (learner.threads): new ones start from the calling thread, on its CPUs.  n, or
 * LT_ESYS when a thread could not start (the team keeps those it has). */
int lt__team_size(int n);
int lt__team_threads(void);
/* Pins the team's threads but the caller's (which pins itself). */
int lt__team_pin(const cpu_set_t *set);
/* fn(arg, i, n) for each part i of n = lt__team_threads(): part 0 on the calling thread, part i on thread i; returns
 * when all are done.  Nested inside a part, or while another thread uses the team, the parts run here, in order: the
 * same parts, so the same results. */
void lt__team_run(lt__team_fn fn, void *arg);
/* [*lo, *hi) of part i of n over count items, cut at multiples of align. */
static inline void lt__team_range(int count, int i, int n, int align, int *lo, int *hi) {
  int blocks = (count + align - 1) / align;
  *lo = (int)((long long)blocks * i / n) * align;
  *hi = (int)((long long)blocks * (i + 1) / n) * align;
  if (*hi > count) *hi = count;
  if (*lo > count) *lo = count;
}
/* Row-major sgemm, C[M, N] = alpha · op(A) · op(B) + beta · C (ta, tb: transpose A, B), its rows (or columns) split
 * among the team when it is worth it; each element of C is computed by one thread, the BLAS single-threaded. */
void lt__gemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb,
              float beta, float *C, int ldc);

/* ---- shared by forward.c, backward.c and params.c ---- */

/* Binds m->g's views to m->grads (params.c). */
void lt__model_bind_grads(lt_model_t *m);
/* The temperature token i of b was sampled at (1 when unknown or greedy), and the marking of a Keep-Sampling-Mask
 * set — ids[0..n) plus target — with v in mark[V]. */
float lt__head_temperature(const lt_batch_t *b, int i);
void lt__head_mark(float *mark, const int32_t *ids, int n, int32_t target, float v);

#ifdef __cplusplus
}
#endif

#endif
