/* Inference backends of a worker: builtin (learner/engine.h), an
 * OpenAI-compatible server (libcurl multi on the loop) and a scripted fake
 * policy for load tests.  A backend runs generation "turns" for many
 * sessions at once on the worker's loop. */
#ifndef LT_ROLLOUT_BACKEND_H
#define LT_ROLLOUT_BACKEND_H

#include <stdint.h>
#include <uv.h>

#include "learner/engine.h"
#include "learner/tokenizer.h"

typedef struct lt_backend lt_backend_t;
typedef struct lt_gen lt_gen_t;

/* The tokens one turn generated, with what the learner needs about them.
 * Arrays are owned by the backend until the next turn of the same session. */
typedef struct {
  int n;
  const int32_t *tokens;
  const float *logprobs;
  const int32_t *support;    /* size of each token's top-p/top-k set, 0: the whole vocabulary */
  const int32_t *support_ids;/* the sets' ids, support[i] of them for token i (Keep Sampling Mask) */
  const int32_t *versions;   /* policy version that produced each token */
  const uint16_t *routing_ids; /* [n][layers][k] or NULL */
  const float *routing_probs;
  int stopped;               /* ended on a stop token (else the token budget) */
  int error;                 /* LT_E* on failure */
  const char *error_msg;
} lt_turn_t;

/* Routing recorded for tokens appended to the context (prefill). */
typedef struct {
  const uint16_t *ids;
  const float *probs;
} lt_prefill_routing_t;

typedef void (*lt_turn_cb)(lt_gen_t *g, const lt_turn_t *turn, const lt_prefill_routing_t *prefill, void *ud);

typedef struct {
  const char *kind;          /* "builtin" | "openai" | "scripted" */
  const char *model_dir;     /* builtin: initial weights */
  int64_t version;           /* the version of those weights: stamped on every token until a reload */
  const char *device;
  int threads;
  int max_sessions;
  int max_context;
  /* openai */
  const char *endpoint, *model;
  int timeout_ms, retries;
  const char *reload_url;    /* POSTed {"path": DIR} after new weights (NULL/empty: none) */
  /* scripted: a fake policy whose turn lengths are long-tailed */
  int vocab;                 /* byte-tokenizer vocabulary size (0: LT_TOKENIZER_BYTE_VOCAB, the builtin models') */
  int mean_tokens;           /* typical turn length */
  double tail_fraction;      /* share of turns that are tail_factor times longer */
  double tail_factor;
  int token_us;              /* simulated time per token (0: as fast as possible) */
  const char *answer;        /* each turn's ending (NULL: " #### 0"); may hold a tool call */
} lt_backend_opts_t;

typedef struct {
  int vocab;                 /* token ids in [0, vocab) are valid input */
  int routing_layers, routing_k, routing_experts;
  int max_context;
  int64_t version;           /* weights version in use */
  int support_known;         /* 1: each token's exact sampling set is recorded; 0: the server truncates
                                where it cannot be seen (openai), so the TRAJ carries no support */
} lt_backend_info_t;

int lt_backend_create(uv_loop_t *loop, const lt_backend_opts_t *o, lt_backend_t **out);
void lt_backend_info(const lt_backend_t *b, lt_backend_info_t *info);
const lt_tokenizer_t *lt_backend_tokenizer(const lt_backend_t *b);
/* New weights: applied between decode steps (a token boundary). */
int lt_backend_reload(lt_backend_t *b, const char *dir, const char *sha256, int64_t version);
void lt_backend_close(lt_backend_t *b, void (*done)(void *), void *ud);

int lt_gen_open(lt_backend_t *b, uint64_t seed, lt_gen_t **out);
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

/* ---- internal: shared by rollout/backend*.c ---- */

typedef enum { LT_GEN_IDLE, LT_GEN_PREFILL, LT_GEN_DECODE } lt_gen_state;

struct lt_gen {
  lt_backend_t *b;
  void *impl;              /* the implementation's session */
  lt_gen_state state;
  int32_t *append;         /* context tokens to add before generating */
  int nappend;
  int max_new;
  lt_sampling_t sp;
  lt_turn_cb cb;
  void *ud;
  int len;                 /* tokens in the context */
  /* this turn's output */
  int n;
  size_t cap;
  int32_t *tokens, *support, *versions;
  int32_t *sids;           /* support ids of this turn's tokens */
  size_t nsids, sids_cap;
  float *logprobs;
  uint16_t *rids, *pre_rids;
  float *rprobs, *pre_rprobs;
  int stopped;
  int ended;               /* the watcher ended the turn */
  int watched;             /* this turn's tokens reported to the watcher */
  lt_token_cb watch;
  void *watch_ud;
  int want_top, ntop;      /* alternatives asked for; those of the last token (filled by the impl) */
  int32_t top_ids[LT_ENGINE_MAX_TOP];
  float top_lps[LT_ENGINE_MAX_TOP];
  int error;               /* LT_E* of a failure that ends this session's turn */
  char error_msg[512];
  int64_t due_ns;          /* when the next token is ready (scripted; openai: asleep while a request runs) */
  int heap_at;             /* its place in the driver's heap of due times, -1: not waiting (idle, or being stepped) */
  uint64_t heap_seq;       /* ties on due_ns go first in, first out */
  int closed;              /* closed during a step: freed when the step ends */
  struct lt_gen *prev, *next;
};

typedef struct {
  int (*init)(lt_backend_t *b, const lt_backend_opts_t *o);
  void (*fini)(lt_backend_t *b);
  int (*open)(lt_backend_t *b, lt_gen_t *g, uint64_t seed);
  void (*close)(lt_gen_t *g);
  /* Adds g->append to the context; fills g->pre_rids/pre_rprobs when routing is recorded. */
  int (*prefill)(lt_gen_t *g);
  /* One token for each of gens[0..n) (all with the same sampling): appends to g->tokens... */
  int (*decode)(lt_backend_t *b, lt_gen_t **gens, int n);
  int (*reload)(lt_backend_t *b, const char *dir, const char *sha256);
} lt_backend_impl_t;

struct lt_backend {
  uv_loop_t *loop;
  const lt_backend_impl_t *impl;
  void *state;
  lt_tokenizer_t *own_tok;      /* scripted: the byte tokenizer */
  const lt_tokenizer_t *tok;
  lt_backend_info_t info;
  uv_idle_t idle;               /* drives prefill and decode steps */
  uv_timer_t timer;             /* scripted: wakes when the next token is due */
  unsigned wakes;               /* lt__backend_wake calls: a step that asked for more must not end the ticking */
  lt_gen_t *gens;
  int ngens;
  /* Sessions with a turn running, by due_ns (a min-heap): a step pops the due
   * ones instead of walking every session (thousands per worker, mostly
   * waiting). */
  lt_gen_t **heap;
  int nheap, capheap;
  uint64_t heap_seq;
  int stepping;                 /* in a step: closed sessions wait in `dead` */
  lt_gen_t *dead;
  char *reload_dir, reload_sha[65];
  int64_t reload_version;
  void (*done)(void *);
  void *done_ud;
  int handles;
};

/* Makes the driver run a step soon (an asynchronous answer arrived). */
void lt__backend_wake(lt_backend_t *b);
/* Sets when g can advance next, outside a decode step (an answer arrived). */
void lt__gen_due(lt_gen_t *g, int64_t due_ns);

/* Appends one generated token to g's turn output (grows the arrays). */
int lt__gen_push(lt_gen_t *g, int32_t token, float logprob, int32_t support, const int32_t *support_ids,
                 const uint16_t *rids, const float *rprobs);

extern const lt_backend_impl_t lt__backend_builtin, lt__backend_scripted, lt__backend_openai;

#endif
