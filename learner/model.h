/* The policy and critic: a Qwen3 / Qwen3-MoE compatible decoder (docs/model.md).
 *
 * Layout (llm.c style): every parameter lives in one contiguous fp32 buffer,
 * described by a tensor table that maps Hugging Face names to offsets and
 * shapes.  Gradients use the same layout in a second buffer, so optimizers and
 * all-reduces see one flat array.
 *
 * Training batches are packed: the tokens of several sequences are
 * concatenated (N tokens in all) so every linear layer is one matrix product
 * over N rows; attention runs per sequence. */
#ifndef LT_LEARNER_MODEL_H
#define LT_LEARNER_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "learner/safetensors.h"

#define LT_MAX_LAYERS 256

typedef struct {
  int vocab;     /* vocab_size */
  int hidden;    /* hidden_size */
  int inter;     /* intermediate_size (dense MLP layers) */
  int moe_inter; /* moe_intermediate_size */
  int layers;    /* num_hidden_layers */
  int heads;     /* num_attention_heads */
  int kv_heads;  /* num_key_value_heads */
  int head_dim;
  int experts;   /* num_experts (0: dense model) */
  int topk;      /* num_experts_per_tok */
  int norm_topk; /* norm_topk_prob */
  float eps;     /* rms_norm_eps */
  float rope_theta;
  int max_pos;                    /* max_position_embeddings */
  int tied;                       /* tie_word_embeddings */
  int window;                     /* sliding_window (tokens, 0: none) */
  uint8_t sliding[LT_MAX_LAYERS]; /* layer uses sliding-window attention */
  uint8_t moe[LT_MAX_LAYERS];     /* layer uses the MoE block */
  int critic;                     /* value model: score head [1, hidden] instead of lm_head */
  int bos_id, eos_id;             /* -1 when unknown */
  char model_type[32];            /* "qwen3" | "qwen3_moe" */
} lt_model_config_t;

/* One named tensor of the parameter buffer. */
typedef struct {
  char name[96];
  size_t offset;  /* in floats */
  int ndim;       /* 1 (norm weights) or 2 */
  int rows, cols; /* 1-D tensors have rows = 1 */
} lt_tensor_t;

/* Views into the parameter (or gradient) buffer for one layer. */
typedef struct {
  float *ln1;    /* [D] input_layernorm */
  float *wq;     /* [H*hd, D] */
  float *wk;     /* [KV*hd, D] */
  float *wv;     /* [KV*hd, D] */
  float *wo;     /* [D, H*hd] */
  float *qnorm;  /* [hd] */
  float *knorm;  /* [hd] */
  float *ln2;    /* [D] post_attention_layernorm */
  float *router; /* [E, D] (MoE layers) */
  float *w_gate; /* [I, D] dense, or [E][Im, D] experts */
  float *w_up;   /* same shape as w_gate */
  float *w_down; /* [D, I] dense, or [E][D, Im] experts */
} lt_layer_w_t;

typedef struct {
  float *embed; /* [V, D] */
  lt_layer_w_t layer[LT_MAX_LAYERS];
  float *norm; /* [D] */
  float *head; /* [V, D] lm_head (== embed when tied), or [1, D] score (critic) */
} lt_model_weights_t;

/* Activation workspace, sized once for a maximum shape.  Training mode keeps
 * every layer's intermediates for the backward; inference mode keeps one
 * layer's worth.  N is the packed token count, I the larger of the dense
 * intermediate size and k × moe_intermediate_size. */
typedef struct {
  int max_tokens, max_seq, train;
  int N; /* tokens of the last forward */
  /* per layer (index 0 only in inference mode) */
  float **x;             /* [L+1][N, D] residual stream entering layer l; x[L] leaves the last */
  float **h1, **r1;      /* ln1 output [N, D], its rstd [N] */
  float **qp, **q, **rq; /* q before norm [N, H*hd], after norm + rope, rstd [N*H] */
  float **kp, **k, **rk; /* same for k [N, KV*hd], rstd [N*KV] */
  float **v;             /* [N, KV*hd] */
  float **att, **lse;    /* attention output [N, H*hd], row log-sum-exp [N*H] */
  float **x2;            /* residual after attention [N, D] */
  float **h2, **r2;      /* ln2 output, rstd */
  float **g, **u;        /* dense gate/up [N, I], or experts' [N*k, Im] in routed order */
  float **probs;         /* router softmax [N, E] */
  uint16_t **ids;        /* chosen experts [N, k] */
  float **wts;           /* combine weights [N, k] */
  int **perm;            /* routed order: perm[r] = token*k + slot, grouped by expert */
  int **eoff;            /* [E+1] start of each expert's group in routed order */
  float **y;             /* expert outputs [N*k, D] in routed order */
  float *hf, *rf;        /* final norm output [N, D], rstd [N] */
  float *logprobs, *entropy, *values, *head_lse; /* [N] */
  float *route_conf;                             /* [N] top-k mass summed over MoE layers */
  int *pos;                                      /* [N] position of each token */
  int32_t *tok;                                  /* [N] token ids */
  int *last;                                     /* [N] 1 if the token ends its segment */
  /* scratch */
  float *attn_scratch; /* [LT_ATT_SCRATCH(max_seq)] */
  float *head_scratch; /* [LT_HEAD_CHUNK, V] */
  float *head_sel;     /* [V] keep-sampling-mask scratch (set membership, gradients) */
  float *act;          /* [N, I] SwiGLU output */
  float *xe;           /* [N*k, D] gathered expert inputs */
  float *rlogits;      /* [N, E] router logits / their gradient */
  /* gradients of activations (training mode) */
  float *dres, *dx2, *dh, *dq, *datt, *dk, *dkp, *dv, *dg, *du, *dact, *dy, *dxe, *dw;
} lt_acts_t;

#define LT_HEAD_CHUNK 64

/* A packed batch: sequence s is tokens[start[s] .. start[s+1]). */
typedef struct {
  int nseq;
  const int *start;      /* [nseq + 1] */
  const int32_t *tokens; /* [N] */
  /* Keep Routing: expert ids to use instead of the router's top-k,
   * [N][moe_layers][topk] in MoE-layer order; NULL: route normally. */
  const uint16_t *route_ids;
  /* Keep Sampling Mask (docs/losses.md): per token, the size of the top-p/top-k
   * set the rollout sampled it from (0: the whole vocabulary), and the sets'
   * token ids concatenated in token order (support[i] ids for token i).  The
   * logprob is then taken under the softmax renormalised over exactly that
   * set (plus the token itself).  NULL: the full softmax. */
  const int32_t *support;
  const int32_t *support_ids;
  /* Per token, the temperature T it was sampled at: logprobs and entropy are
   * those of softmax(z / T).  NULL, or T ≤ 0 (greedy): T = 1. */
  const float *temperature;
} lt_batch_t;

typedef struct lt_lora lt_lora_t; /* learner/lora.h */

typedef struct {
  lt_model_config_t cfg;
  float *params; /* [nparams] */
  float *grads;  /* [nparams] or NULL until lt_model_train_alloc */
  size_t nparams;
  lt_tensor_t *tensors;
  int ntensors;
  lt_model_weights_t w; /* views into params */
  lt_model_weights_t g; /* views into grads */
  float *rope_cos;      /* [max_pos, hd/2] */
  float *rope_sin;
  lt_acts_t *acts; /* training workspace (lt_model_train_alloc) */
  lt_batch_t last; /* batch of the last training forward, for the backward */
  int threads;
  lt_lora_t *lora; /* an attached adapter (learner/lora.h), or NULL; with one the base is frozen: grads stays
                          NULL and training updates the adapter */
} lt_model_t;

/* The parameters training updates, as one flat buffer with its tensor table: what optimizers and the ranks'
 * all-reduce see. */
typedef struct {
  float *params, *grads;
  size_t n;
  const lt_tensor_t *tensors;
  int ntensors;
} lt_params_t;

/* A model's trainable parameters: its adapter's when it has one, else all its weights. */
lt_params_t lt_model_trainable(const lt_model_t *m);

/* A run of tokens of one sequence at positions pos0 .. pos0+n−1.  In
 * inference, k/v point at the session's per-layer caches [max_ctx, KV*hd]
 * (positions before pos0 are already there; this forward appends the rest). */
typedef struct {
  const int32_t *tokens;
  int n;
  int pos0;
  float **k, **v;            /* [layers] caches, NULL in training */
  const uint16_t *route_ids; /* keep-routing ids [n][moe_layers][topk], or NULL */
  uint16_t *route_out_ids;   /* if set: router choice [n][moe_layers][topk] */
  float *route_out_probs;    /* if set: their probabilities before renormalisation */
} lt_segment_t;

/* Per-token outputs of a training forward.  Arrays are [N] and owned by the
 * workspace (valid until the next forward). */
typedef struct {
  const float *logprobs;     /* log p(tokens[i] | tokens[<i]) of the same sequence; 0 at sequence starts */
  const float *entropy;      /* entropy of the distribution that predicted token i; 0 at starts */
  const float *values;       /* critic: V(state after tokens[..i]) at every position */
  double routing_confidence; /* mean over tokens and MoE layers of the top-k mass; -1 for dense */
  const float *route_conf;   /* [N] each token's top-k mass summed over MoE layers; NULL for dense */
} lt_fwd_out_t;

/* ---- configuration (learner/model_config.c) ---- */
/* Parses a Hugging Face config.json; refuses what longtail cannot honour with
 * an error naming the field. */
int lt_model_config_parse(const char *json_text, size_t len, const char *what, lt_model_config_t *cfg);
int lt_model_config_load(const char *path, lt_model_config_t *cfg);
/* config.json text (malloc'd) that Hugging Face tools load. */
char *lt_model_config_json(const lt_model_config_t *cfg);
int lt_model_moe_layers(const lt_model_config_t *cfg);
/* Parameters active per token (for FLOP counts). */
int64_t lt_model_active_params(const lt_model_config_t *cfg);

/* ---- parameters (learner/params.c) ---- */
int lt_model_create(const lt_model_config_t *cfg, lt_model_t **out);
/* The parameter count lt_model_create would allocate (0 when out of memory). */
size_t lt_model_nparams(const lt_model_config_t *cfg);
void lt_model_free(lt_model_t *m);
/* Normal(0, std) for matrices and embeddings, ones for norms. */
void lt_model_init_random(lt_model_t *m, uint64_t seed, float std);
const lt_tensor_t *lt_model_tensor(const lt_model_t *m, const char *name);
/* Turns a policy into a critic sharing its trunk (score head zero). */
int lt_model_make_critic(const lt_model_t *policy, lt_model_t **out);
/* Router weights: the tensors the freeze-router option skips. */
int lt_tensor_is_router(const lt_tensor_t *t);

/* ---- checkpoints (learner/checkpoint.c) ---- */
/* Loads config.json + model.safetensors (or a sharded index) from dir; a directory with an adapter
 * (adapter_config.json, learner/lora.h) gets it attached, over its base's weights when it has none of its own. */
int lt_model_load(const char *dir, lt_model_t **out);
/* Writes config.json, generation_config.json and model.safetensors (F32)
 * atomically into dir: the one file the daemon hashes and workers load.  The
 * base's weights only: an attached adapter is saved by lt_lora_save. */
int lt_model_save(const lt_model_t *m, const char *dir);
/* The same, but weights over max_shard_bytes (> 0) go to Hugging Face's
 * shards, model-0000i-of-0000n.safetensors, with model.safetensors.index.json. */
int lt_model_save_sharded(const lt_model_t *m, const char *dir, int64_t max_shard_bytes);
/* Hugging Face's default max_shard_size, used for saved checkpoints. */
#define LT_MODEL_SHARD_BYTES ((int64_t)5000000000)
int lt_model_load_weights(lt_model_t *m, const char *dir);
/* A published version as the learner holds it: its fp32 master.safetensors when it has one (a version
 * published in bf16), else model.safetensors. */
int lt_model_load_master(const char *dir, lt_model_t **out);
/* A published version: model.safetensors in `dtype` (what workers load) and, unless that is F32, the
 * fp32 weights beside it as master.safetensors. */
int lt_model_save_as(const lt_model_t *m, const char *dir, lt_st_dtype dtype);

/* ---- forward/backward (learner/forward.c, learner/backward.c) ---- */
int lt_acts_create(const lt_model_config_t *cfg, int max_tokens, int max_seq, int train, lt_acts_t **out);
void lt_acts_free(lt_acts_t *a);
/* Inference forward over segments attached to KV caches; logits[nseg, V]
 * receives each segment's last-position logits (NULL: skip the head). */
int lt_model_forward_segments(lt_model_t *m, lt_acts_t *a, const lt_segment_t *segs, int nseg, float *logits);
/* Sizes the forward workspace for at most max_tokens packed tokens and
 * sequences of at most max_seq tokens (evaluation: no gradients). */
int lt_model_eval_alloc(lt_model_t *m, int max_tokens, int max_seq);
/* The same, plus the gradient buffer of the trainable parameters (lt_model_trainable), for training. */
int lt_model_train_alloc(lt_model_t *m, int max_tokens, int max_seq);
int lt_model_forward(lt_model_t *m, const lt_batch_t *b, lt_fwd_out_t *out);
/* Accumulates into the trainable parameters' gradients (m->grads, or its
 * adapter's) the gradient of L given dL/dlogprobs[N] (policy) or
 * dL/dvalues[N] (critic), for the batch of the last forward. */
int lt_model_backward(lt_model_t *m, const float *dlogprobs, const float *dvalues);
void lt_model_zero_grad(lt_model_t *m); /* the trainable parameters' */
/* FLOPs of one forward over n tokens whose sequences have the given lengths. */
double lt_model_forward_flops(const lt_model_config_t *cfg, const lt_batch_t *b);

#endif
