/* Inference backends of a worker: builtin (infer/engine.h), an
 * OpenAI-compatible server (libcurl multi on the loop) and a scripted fake
 * policy for load tests.  A backend runs generation "turns" for many
 * sessions at once on the worker's loop. */
#ifndef LT_INFER_BACKEND_H
#define LT_INFER_BACKEND_H

#include <stdint.h>
#include <uv.h>

#include "infer/engine.h"
#include "text/tokenizer.h"

typedef struct lt_backend lt_backend_t;
typedef struct lt_gen lt_gen_t;

/* The tokens one turn generated, with what the learner needs about them.
 * Arrays are owned by the backend until the next turn of the same session. */
typedef struct {
  int n;
  const int32_t *tokens;
  const float *logprobs;
  const int32_t *support;      /* size of each token's top-p/top-k set, 0: the whole vocabulary */
  const int32_t *support_ids;  /* the sets' ids, support[i] of them for token i (Keep Sampling Mask) */
  const int32_t *versions;     /* policy version that produced each token */
  const uint16_t *routing_ids; /* [n][layers][k] or NULL */
  const float *routing_probs;
  int stopped; /* ended on a stop token (else the token budget) */
  int error;   /* LT_E* on failure */
  const char *error_msg;
} lt_turn_t;

/* Routing recorded for tokens appended to the context (prefill). */
typedef struct {
  const uint16_t *ids;
  const float *probs;
} lt_prefill_routing_t;

typedef void (*lt_turn_cb)(lt_gen_t *g, const lt_turn_t *turn, const lt_prefill_routing_t *prefill, void *ud);

typedef struct {
  const char *kind;      /* "builtin" | "openai" | "scripted" */
  const char *model_dir; /* builtin: initial weights */
  int64_t version;       /* the version of those weights: stamped on every token until a reload */
  const char *device;
  int threads;
  int max_sessions;
  int max_context;
  /* openai */
  const char *endpoint, *model;
  int timeout_ms, retries;
  const char *reload_url; /* POSTed {"path": DIR} after new weights (NULL/empty: none) */
  int lora;               /* a LoRA run's versions go to the server by name (vLLM's /v1/load_lora_adapter) and
                                requests name the current one (workers.openai.lora) */
  /* scripted: a fake policy whose turn lengths are long-tailed */
  int vocab;            /* byte-tokenizer vocabulary size (0: LT_TOKENIZER_BYTE_VOCAB, the builtin models') */
  int mean_tokens;      /* typical turn length */
  double tail_fraction; /* share of turns that are tail_factor times longer */
  double tail_factor;
  int token_us;       /* simulated time per token (0: as fast as possible) */
  const char *answer; /* each turn's ending (NULL: " #### 0"); may hold a tool call */
} lt_backend_opts_t;

typedef struct {
  int vocab; /* token ids in [0, vocab) are valid input */
  int routing_layers, routing_k, routing_experts;
  int max_context;
  int64_t version;   /* weights version in use */
  int support_known; /* 1: each token's exact sampling set is recorded; 0: the server truncates
                                where it cannot be seen (openai), so the TRAJ carries no support */
} lt_backend_info_t;

int lt_backend_create(uv_loop_t *loop, const lt_backend_opts_t *o, lt_backend_t **out);
void lt_backend_info(const lt_backend_t *b, lt_backend_info_t *info);
const lt_tokenizer_t *lt_backend_tokenizer(const lt_backend_t *b);
/* New weights: applied between decode steps (a token boundary). */
int lt_backend_reload(lt_backend_t *b, const char *dir, const char *sha256, int64_t version);
void lt_backend_close(lt_backend_t *b, void (*done)(void *), void *ud);

/* LoRA adapters by name (builtin: lt_engine_adapter_load; others: LT_EUNSUPP). */
int lt_backend_adapter_load(lt_backend_t *b, const char *name, const char *dir);
int lt_backend_adapter_unload(lt_backend_t *b, const char *name);

int lt_gen_open(lt_backend_t *b, uint64_t seed, lt_gen_t **out);
/* The session generates with the adapter loaded as `name` (before its first turn); LT_ENOENT when none is. */
int lt_gen_adapter(lt_gen_t *g, const char *name);
/* Appends `append` to the session's context, then generates up to max_new
 * tokens.  cb runs on the loop when the turn ends (never inside the call). */
int lt_gen_turn(lt_gen_t *g, const int32_t *append, int nappend, int max_new, const lt_sampling_t *sp, lt_turn_cb cb,
                void *ud);
int lt_gen_len(const lt_gen_t *g);
/* Watches the session's tokens as they are generated (streaming, stop
 * strings): cb runs on the loop after each token with the `top` (≤
 * LT_ENGINE_MAX_TOP) most likely alternatives where the backend sees them
 * (builtin; others report none).  cb returns 1 to end the turn after this
 * token (the turn's callback follows, stopped = 0); it must not close
 * sessions.  cb NULL stops watching. */
typedef int (*lt_token_cb)(lt_gen_t *g, int32_t token, float logprob, int ntop, const int32_t *top_ids,
                           const float *top_logprobs, void *ud);
void lt_gen_watch(lt_gen_t *g, int top, lt_token_cb cb, void *ud);
/* Cancels a running turn (its callback is not called) and frees the session. */
void lt_gen_close(lt_gen_t *g);

#endif
