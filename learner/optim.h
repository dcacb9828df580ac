/* Optimizers over the contiguous buffer of a model's trainable parameters (lt_model_trainable: its weights, or its
 * adapter's): AdamW, and Muon
 * (Newton–Schulz orthogonalised momentum for 2-D hidden weight matrices, AdamW
 * for embeddings, the output head, norms and routers).  Warm-up + cosine
 * schedule, global-norm clipping, optional frozen router.  The state has the
 * parameters' layout and is saved and restored bit-exactly. */
#ifndef LT_LEARNER_OPTIM_H
#define LT_LEARNER_OPTIM_H

#include <stdint.h>

#include "learner/model.h"

typedef enum { LT_OPT_ADAMW = 0, LT_OPT_MUON } lt_opt_kind;

typedef struct {
  lt_opt_kind kind;
  float lr; /* peak learning rate */
  float beta1, beta2, eps;
  float weight_decay;  /* decoupled */
  int warmup;          /* linear warm-up steps */
  int64_t total;       /* steps of the cosine decay after warm-up (0: constant) */
  float min_lr_ratio;  /* cosine floor as a fraction of lr */
  float grad_clip;     /* global-norm clip (0: off) */
  int freeze_router;   /* router weights get no update */
  float muon_momentum; /* 0.95 */
  int muon_steps;      /* Newton–Schulz iterations (5) */
  /* Where the warm-up/decay schedule stands.  0: at the update count; 1: at
   * `clock`, which the trainer sets to its learner steps so that warm-up
   * counts steps as the reports' schedules do, however many mini-batch
   * updates a step makes (docs/config.md). */
  int use_clock;
  int64_t clock;
} lt_optim_cfg_t;

/* Under several learner ranks (learner/dist.h) the state is sharded (ZeRO
 * stage 1): this rank keeps and updates the moments of the whole tensors in
 * [lo, hi) of the parameter buffer, and the updated slices are all-gathered
 * so every rank ends the step with the same parameters. */
typedef struct {
  lt_optim_cfg_t cfg;
  size_t n;        /* parameters of the model */
  size_t lo, hi;   /* this rank's shard (0, n with one rank) */
  size_t *offsets; /* [ntensors + 1] tensor boundaries, for the collectives */
  int ntensors;
  float *m, *v;   /* [hi - lo] first/second moments of the shard (Muon keeps its momentum in m) */
  int64_t step;   /* updates done */
  float *scratch; /* Newton–Schulz work space */
  size_t scratch_len;
} lt_optim_t;

void lt_optim_cfg_default(lt_optim_cfg_t *c, lt_opt_kind kind);
int lt_optim_create(const lt_optim_cfg_t *cfg, const lt_model_t *m, lt_optim_t **out);
void lt_optim_free(lt_optim_t *o);
/* The learning rate of update number `step` (0-based; c->clock instead when c->use_clock). */
double lt_optim_lr(const lt_optim_cfg_t *c, int64_t step);
/* Clips m->grads to the global norm, updates m->params (this rank's shard);
 * *gnorm receives the norm before clipping.  Returns the learning rate used.
 * With several ranks, lt_optim_gather must follow before the parameters are
 * read. */
double lt_optim_step(lt_optim_t *o, lt_model_t *m, double *gnorm);
/* All-gathers the ranks' updated slices of m->params (no-op on one rank). */
int lt_optim_gather(const lt_optim_t *o, lt_model_t *m);
/* Bytes of optimizer state this rank holds (falls as 1/ranks). */
size_t lt_optim_state_bytes(const lt_optim_t *o);
/* Global L2 norm of the gradient buffer (frozen router excluded). */
double lt_grad_norm(const lt_optim_t *o, const lt_model_t *m);
/* State files (safetensors: moments + step in the metadata), whole whatever
 * the number of ranks: save gathers the shards and rank 0 writes (every rank
 * must call it); load reads the file and keeps this rank's shard. */
int lt_optim_save(const lt_optim_t *o, const char *path);
int lt_optim_load(lt_optim_t *o, const char *path);

#endif
