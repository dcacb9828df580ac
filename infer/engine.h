/* The builtin inference engine: incremental decoding with a per-session KV
 * cache, batched across sessions, on CPU (and CUDA where built).  Workers use
 * it by default; `longtail generate`, `serve` and the evaluator use it too.
 *
 * CONTRACT (shared by learner/ and rollout/; extend, do not break).
 *
 * Threading: one engine is used by one thread at a time (the caller
 * serialises); an engine may use internal threads for its math. */
#ifndef LT_INFER_ENGINE_H
#define LT_INFER_ENGINE_H

#include <stdint.h>

#include "util/rng.h"

typedef struct lt_engine lt_engine_t;
typedef struct lt_session lt_session_t;

typedef struct {
  const char *device; /* "cpu" (default) | "cuda" | "auto" */
  int threads;        /* compute threads (0: all cores) */
  int max_sessions;   /* sessions open at once (KV caches), e.g. the worker's slots */
  int max_context;    /* tokens per session (≤ the model's max_position_embeddings) */
} lt_engine_opts_t;

typedef struct {
  int vocab;
  int layers;
  int moe_layers; /* layers with a router (0 for dense models) */
  int experts;    /* experts per MoE layer */
  int topk;       /* experts per token */
  int max_context;
  int64_t params; /* parameter count */
} lt_engine_info_t;

typedef struct {
  float temperature; /* 0: greedy */
  float top_p;       /* 1: off */
  int top_k;         /* 0: off */
} lt_sampling_t;

/* One sampled token and what the learner needs to know about it. */
typedef struct {
  int32_t token;
  float logprob;   /* log p(token) under the distribution it was drawn from: softmax(logits / T)
                          renormalised over the top-p/top-k set (docs/losses.md); greedy: the full softmax at T = 1 */
  int32_t support; /* size of the top-p/top-k set it was drawn from; 0: the whole vocabulary */
  float entropy;   /* entropy of softmax(logits / temperature) */
} lt_sample_t;

/* Samples one token from logits[V] (the engine's sampler, exported so every
 * backend draws identically).  scratch: 2·V floats; when out->support > 0 it
 * holds the set afterwards (lt_sample_support_ids reads it). */
void lt_sample_logits(const float *logits, int V, const lt_sampling_t *p, lt_rng_t *rng, float *scratch,
                      lt_sample_t *out);

/* The token ids of the set the last lt_sample_logits on scratch drew from:
 * ids[0 .. out->support). */
void lt_sample_support_ids(const float *scratch, int support, int32_t *ids);

/* Loads config.json + model.safetensors (+ tokenizer if present); a LoRA
 * adapter's folder gives its base with the adapter applied (learner/lora.h). */
int lt_engine_load(const char *model_dir, const lt_engine_opts_t *opts, lt_engine_t **out);
/* Swaps in new weights of the same architecture between decode steps (weight
 * sync); verifies the weights file (model.safetensors, or an adapter's
 * adapter_model.safetensors) against sha256 when non-NULL.  An adapter of
 * the base already loaded costs an adapter load: the base stays.  Open
 * sessions keep their KV caches (multi-version trajectories). */
int lt_engine_reload(lt_engine_t *e, const char *model_dir, const char *sha256);
void lt_engine_info(const lt_engine_t *e, lt_engine_info_t *info);
/* LoRA adapters by name (`longtail serve --lora`, /v1/load_lora_adapter): loads dir's adapter (PEFT's layout, of a
 * model with this engine's shapes) as `name`; LT_EDUP when the name is taken.  Unloading frees it once no session
 * uses it. */
int lt_engine_adapter_load(lt_engine_t *e, const char *name, const char *dir);
int lt_engine_adapter_unload(lt_engine_t *e, const char *name);
int lt_engine_adapter_known(const lt_engine_t *e, const char *name);
/* The engine's tokenizer (byte tokenizer if the model has none); owned by e. */
const struct lt_tokenizer *lt_engine_tokenizer(const lt_engine_t *e);
void lt_engine_free(lt_engine_t *e);

int lt_session_open(lt_engine_t *e, lt_session_t **out);
void lt_session_close(lt_session_t *s);
/* The session generates with the adapter loaded as `name` (NULL or "": the engine's own weights); before its
 * first token.  Sessions of different adapters decode in one step, one forward per adapter. */
int lt_session_adapter(lt_session_t *s, const char *name);
/* Seeds the session's sampling stream (deterministic per seed). */
void lt_session_seed(lt_session_t *s, uint64_t seed);
/* The Keep-Sampling-Mask set of the session's last sampled token (its
 * lt_sample_t.support ids; valid until the session's next decode). */
const int32_t *lt_session_support_ids(const lt_session_t *s);
#define LT_ENGINE_MAX_TOP 20
/* Keeps, for each token the session samples from now on, the k (≤
 * LT_ENGINE_MAX_TOP) most likely tokens of the distribution it was drawn
 * from (OpenAI's top_logprobs); 0 stops it. */
void lt_session_want_top(lt_session_t *s, int k);
/* Those of the last sampled token, most likely first, with their logprobs
 * in that distribution (as lt_sample_t.logprob); returns how many (fewer
 * than k when the top-p/top-k set is smaller).  Valid until the next decode. */
int lt_session_top(const lt_session_t *s, const int32_t **ids, const float **logprobs);
/* Tokens in the session's KV cache. */
int lt_session_len(const lt_session_t *s);

/* Appends tokens (prompt, observation) to the session's cache.  If routing
 * arrays are given they receive, per token and MoE layer, the top-k expert
 * ids and router probabilities (before renormalisation):
 * [n][moe_layers][topk].  Fails with LT_ERANGE past max_context. */
int lt_session_prefill(lt_session_t *s, const int32_t *tokens, int n, uint16_t *routing_ids, float *routing_probs);

/* One decode step for n sessions at once: samples the next token of each from
 * its last position, appends it to that session's cache, and fills out[i].
 * routing_ids/probs (optional) receive [n][moe_layers][topk] for the sampled
 * tokens' own forward (written when the token is appended).
 * Each session draws from its own stream (lt_session_seed), so results do not
 * depend on which sessions share a batch. */
int lt_engine_decode(lt_engine_t *e, lt_session_t *const *sessions, int n, const lt_sampling_t *params,
                     lt_sample_t *out, uint16_t *routing_ids, float *routing_probs);

#endif
