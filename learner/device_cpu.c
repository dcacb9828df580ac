/* The CPU device (learner/internal.h): the host model is the device copy; its workspace and gradients live in the
 * model (lt_model_train_alloc), the optimizer runs on the host, the ranks' sums over MPI. */
#include "learner/dist.h"
#include "learner/internal.h"

static int cpu_open(lt__device_t *d, const lt_trainer_cfg_t *cfg) { return 0; }

static void cpu_close(lt__device_t *d) {}

static int cpu_reserve(lt__device_t *d, lt__dmodel_t *m, int tokens, int seq) {
  return m->opt ? lt_model_train_alloc(m->host, tokens, seq) : lt_model_eval_alloc(m->host, tokens, seq);
}

static int cpu_forward(lt__device_t *d, lt__dmodel_t *m, const lt_batch_t *b, lt_fwd_out_t *out) {
  return lt_model_forward(m->host, b, out);
}

static int cpu_backward(lt__device_t *d, lt__dmodel_t *m, const float *dlogprobs, const float *dvalues) {
  return lt_model_backward(m->host, dlogprobs, dvalues);
}

static void cpu_zero_grad(lt__device_t *d, lt__dmodel_t *m) { lt_model_zero_grad(m->host); }

/* Only the trainable parameters' gradients: an adapter's alone when the model has one. */
static int cpu_reduce_grads(lt__device_t *d, lt__dmodel_t *m) {
  lt_params_t p = lt_model_trainable(m->host);
  return lt_dist_sum_f32(p.grads, p.n);
}

static int cpu_update(lt__device_t *d, lt__dmodel_t *m, double *gnorm, double *lr) {
  *lr = lt_optim_step(m->opt, m->host, gnorm);
  return lt_optim_gather(m->opt, m->host);
}

/* The host model is the only copy: nothing to bring back or forget. */
static void cpu_pull(lt__device_t *d, lt__dmodel_t *m, int moments) {}

static void cpu_drop(lt__device_t *d, lt__dmodel_t *m) {}

const lt__device_impl_t lt__device_cpu = {
    .name = "cpu",
    .open = cpu_open,
    .close = cpu_close,
    .reserve = cpu_reserve,
    .forward = cpu_forward,
    .backward = cpu_backward,
    .zero_grad = cpu_zero_grad,
    .reduce_grads = cpu_reduce_grads,
    .update = cpu_update,
    .pull = cpu_pull,
    .drop = cpu_drop,
};
