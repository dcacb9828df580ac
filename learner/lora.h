/* LoRA adapters (docs/lora.md): low-rank updates W + (alpha/r)·B·A of a frozen base's projections, trained in place
 * of the base, published and loaded in PEFT's layout.
 *
 * An adapter is its own parameter buffer (llm.c style: one contiguous fp32 buffer, a tensor table in PEFT's names
 * base_model.model.<module>.lora_A.weight [r, in] and .lora_B.weight [out, r]) attached to a model
 * (lt_model_attach_lora): the model's forward then adds s·(x·Aᵀ)·Bᵀ to each adapted projection (learner/proj.c),
 * its backward accumulates the adapter's gradients and no gradient of the base, and optimizers and the ranks'
 * all-reduce see only the adapter (lt_model_trainable).  A value model's adapter also carries its score head, trained
 * fully (PEFT's modules_to_save for sequence classification).
 *
 * A directory holds an adapter when it has adapter_config.json: lt_model_load reads its own model.safetensors, or
 * else its base's (adapter_config.json's base_model_name_or_path, relative to the directory), and attaches the
 * adapter. */
#ifndef LT_LEARNER_LORA_H
#define LT_LEARNER_LORA_H

#include <stddef.h>
#include <stdint.h>

#include "learner/model.h"
#include "learner/safetensors.h"

/* Adapter settings (learner.lora, learner.critic.lora). */
typedef struct {
  int rank;           /* r; 0: no adapter (full training) */
  float alpha;        /* lora_alpha: the update is scaled by alpha / r */
  unsigned targets;   /* bit p set: projection p (q_proj ... down_proj, the experts' in a MoE layer) is adapted */
  uint64_t init_seed; /* A's Kaiming-uniform draw */
} lt_lora_cfg_t;

/* The names a target list may hold: q_proj k_proj v_proj o_proj gate_proj up_proj down_proj, and all-linear (all
 * seven: PEFT's all-linear without the output head; a MoE router, mlp.gate, is never adapted). */
extern const char *const lt_lora_target_names[7];
/* Parses a list of target names into *targets; LT_ECONFIG naming `what` and the first name that is not one of the
 * model's projections. */
int lt_lora_targets_parse(const char *const *names, int n, const char *what, unsigned *targets);

struct lt_lora {
  lt_lora_cfg_t cfg;
  float scale;   /* alpha / r */
  float *params; /* [nparams] */
  float *grads;  /* [nparams], or NULL until lt_model_train_alloc */
  size_t nparams;
  lt_tensor_t *tensors; /* PEFT names, A before B of each module */
  int ntensors;
  int nexp;       /* slots per projection: the experts of a MoE model, else 1 */
  size_t *a_at;   /* [layers][7][nexp]: offset of A in params, B follows it; SIZE_MAX: not adapted */
  int score;      /* the tensor index of a value model's score head, or -1 */
  int off;        /* 1: the adapter is left out of the forward (the base alone: the KL reference) */
  float *scratch; /* [2][scratch_rows, r]: x·Aᵀ and its gradient */
  size_t scratch_rows;
};

/* An adapter for model m (its shapes; a value model's also holds its score head, copied from m), A and B zero. */
int lt_lora_create(const lt_model_t *m, const lt_lora_cfg_t *cfg, lt_lora_t **out);
void lt_lora_free(lt_lora_t *l);
/* PEFT's default initialisation: A ~ Kaiming-uniform (a = √5: U(−1/√in, 1/√in)) from cfg.init_seed, B = 0, so the
 * adapted model starts as its base. */
void lt_lora_init(lt_lora_t *l);
/* Attaches l to m, which owns it from then on: m's base is frozen (its gradients go) and a value model's score head
 * is read from the adapter. */
void lt_model_attach_lora(lt_model_t *m, lt_lora_t *l);
/* Detaches and frees m's adapter (the score head goes back into m's buffer). */
void lt_model_detach_lora(lt_model_t *m);
/* Sizes the adapter's scratch for projections of up to `rows` rows. */
int lt_lora_reserve(lt_lora_t *l, size_t rows);

/* y[N, out] += s · (x[N, in] · Aᵀ) · Bᵀ for projection p of layer l (expert e), when adapted and not off. */
void lt_lora_forward(lt_lora_t *l, int layer, int p, int e, float *y, const float *x, int N, int in, int out);
/* Its backward: dA, dB += (when the adapter has gradients), dx[N, in] += (dx NULL: not wanted). */
void lt_lora_backward(lt_lora_t *l, int layer, int p, int e, float *dx, const float *dy, const float *x, int N, int in,
                      int out);

/* Writes adapter_model.safetensors (in dtype, PEFT's keys; metadata "format": "pt") and adapter_config.json
 * (peft_type LORA, r, lora_alpha, target_modules, base_model_name_or_path = base, task_type CAUSAL_LM) into dir. */
int lt_lora_save(const lt_lora_t *l, const char *dir, lt_st_dtype dtype, const char *base);
/* Reads dir's adapter for model m (shapes checked against m, rank and targets from adapter_config.json). */
int lt_lora_load(const char *dir, const lt_model_t *m, lt_lora_t **out);
/* The adapter's values from dir into l (same rank and modules: a resume). */
int lt_lora_load_weights(lt_lora_t *l, const char *dir);
/* 1 when dir holds an adapter (adapter_config.json). */
int lt_lora_is_dir(const char *dir);
/* The base directory dir's adapter names (adapter_config.json's base_model_name_or_path; a relative one is taken from
 * dir), into out. */
int lt_lora_base_dir(const char *dir, char *out, size_t cap);
/* The weights file a version directory's SHA-256 is taken of: adapter_model.safetensors for an adapter without weights
 * of its own, else model.safetensors. */
const char *lt_model_weights_file(const char *dir);
/* A new model without adapter: m's weights with its adapter merged, W + (alpha/r)·B·A (what `longtail lora merge` and
 * checkpoint.lora_publish "merged" write). */
int lt_lora_merged(const lt_model_t *m, lt_model_t **out);

#endif
