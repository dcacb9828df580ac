/* The CUDA device (learner/internal.h): each model's parameters, gradients, AdamW moments and workspace live on GPU 0
 * (an lt_gpu_model_t, learner/gpu.h) and are the authority; the host model is brought up to date only by pull.  The
 * ranks' sums and all-gathers run over NCCL on the device buffers.  Built with CUDA only (LT_HAVE_CUDA). */
#ifdef LT_HAVE_CUDA
#include "learner/dist.h"
#include "learner/gpu.h"
#include "learner/internal.h"
#include "util/error.h"
#include "util/log.h"

static int cuda_open(lt__device_t *d, const lt_trainer_cfg_t *cfg) {
  /* The adapters' maths has CPU code only: none for the GPU was written without a GPU to verify it on. */
  if (cfg->lora.rank > 0 || cfg->critic_lora.rank > 0)
    return lt_error_set(LT_ECONFIG,
                        "learner.lora: the CUDA learner has no LoRA path (unverified on a GPU, so not "
                        "written); train adapters on the CPU learner (learner.device \"cpu\") or set "
                        "learner.lora.rank 0");
  if (cfg->actor_opt.kind != LT_OPT_ADAMW)
    return lt_error_set(LT_ECONFIG,
                        "learner.device cuda: the GPU optimizer is AdamW; learner.optimizer muon runs on the CPU");
  lt_gpu_t *g;
  int rc = lt_gpu_open(0, &g);
  if (rc < 0) return lt_error_wrap(rc, "learner.device cuda");
  d->state = g;
  char desc[256];
  lt_gpu_describe(g, desc, sizeof desc);
  lt_gpu_set_bf16(g, cfg->gpu_bf16);
  lt_gpu_set_recompute(g, cfg->gpu_recompute);
  lt_log(LT_LOG_INFO, "learner", "CUDA learner on %s%s%s", desc, cfg->gpu_bf16 ? ", bf16 matrix products" : "",
         cfg->gpu_recompute ? ", recomputing activations" : "");
  return 0;
}

static void cuda_close(lt__device_t *d) { lt_gpu_close(d->state); }

static void cuda_pull(lt__device_t *d, lt__dmodel_t *m, int moments) {
  if (!m->impl) return;
  lt_gpu_model_download(m->impl, m->host->params, NULL);
  if (moments && m->opt) lt_gpu_model_moments(m->impl, m->opt->m, m->opt->v, 0);
  m->host_stale = 0;
}

static void cuda_drop(lt__device_t *d, lt__dmodel_t *m) {
  lt_gpu_model_free(m->impl);
  m->impl = NULL;
}

/* A device workspace has one size: a larger one is a new device model, made from the host copy once it is brought up
 * to date (parameters and moments). */
static int cuda_reserve(lt__device_t *d, lt__dmodel_t *m, int tokens, int seq) {
  cuda_pull(d, m, 1);
  cuda_drop(d, m);
  lt_optim_t *o = m->opt;
  lt_gpu_model_t *gm;
  int rc = lt_gpu_model_create(d->state, m->host, tokens, seq, o ? o->lo : 0, o ? o->hi : 0, &gm);
  if (rc < 0) return rc;
  if (o) lt_gpu_model_moments(gm, o->m, o->v, 1);
  m->impl = gm;
  return 0;
}

static int cuda_forward(lt__device_t *d, lt__dmodel_t *m, const lt_batch_t *b, lt_fwd_out_t *out) {
  return lt_gpu_model_forward(m->impl, b, out);
}

static int cuda_backward(lt__device_t *d, lt__dmodel_t *m, const float *dlogprobs, const float *dvalues) {
  return lt_gpu_model_backward(m->impl, dlogprobs, dvalues);
}

/* Before the first reserve there are no device gradients to zero. */
static void cuda_zero_grad(lt__device_t *d, lt__dmodel_t *m) {
  if (m->impl) lt_gpu_model_zero_grad(m->impl);
}

static int cuda_reduce_grads(lt__device_t *d, lt__dmodel_t *m) {
  return lt_dist_nccl_sum(lt_gpu_model_grads(m->impl), m->host->nparams);
}

static int cuda_update(lt__device_t *d, lt__dmodel_t *m, double *gnorm, double *lr) {
  lt_optim_t *o = m->opt;
  int rc = lt_gpu_model_step(m->impl, &o->cfg, o->step, gnorm, lr);
  if (rc < 0) return rc;
  o->step++;
  m->host_stale = 1;
  lt_gpu_sync(d->state); /* the update runs on the model's stream; NCCL gathers on stream 0 */
  return lt_dist_nccl_allgather_shards(lt_gpu_model_params(m->impl), o->offsets, o->ntensors);
}

const lt__device_impl_t lt__device_cuda = {
    .name = "cuda",
    .open = cuda_open,
    .close = cuda_close,
    .reserve = cuda_reserve,
    .forward = cuda_forward,
    .backward = cuda_backward,
    .zero_grad = cuda_zero_grad,
    .reduce_grads = cuda_reduce_grads,
    .update = cuda_update,
    .pull = cuda_pull,
    .drop = cuda_drop,
};
#endif
