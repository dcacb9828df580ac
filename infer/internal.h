/* Internals of infer/ shared between its files, not a public header: the
 * backend driver and its implementations (backend*.c), and the OpenAI
 * layer's requests (oai.c) and answers (oai_answer.c). */
#ifndef LT_INFER_INTERNAL_H
#define LT_INFER_INTERNAL_H

#include "infer/backend.h"
#include "infer/oai.h"

/* ---- the backend driver and its implementations (backend*.c) ---- */

typedef enum { LT_GEN_IDLE, LT_GEN_PREFILL, LT_GEN_DECODE } lt_gen_state;

struct lt_gen {
  lt_backend_t *b;
  void *impl; /* the implementation's session */
  lt_gen_state state;
  int32_t *append; /* context tokens to add before generating */
  int nappend;
  int max_new;
  lt_sampling_t sp;
  lt_turn_cb cb;
  void *ud;
  int len; /* tokens in the context */
  /* this turn's output */
  int n;
  size_t cap;
  int32_t *tokens, *support, *versions;
  int32_t *sids; /* support ids of this turn's tokens */
  size_t nsids, sids_cap;
  float *logprobs;
  uint16_t *rids, *pre_rids;
  float *rprobs, *pre_rprobs;
  int stopped;
  int ended;   /* the watcher ended the turn */
  int watched; /* this turn's tokens reported to the watcher */
  lt_token_cb watch;
  void *watch_ud;
  int want_top, ntop; /* alternatives asked for; those of the last token (filled by the impl) */
  int32_t top_ids[LT_ENGINE_MAX_TOP];
  float top_lps[LT_ENGINE_MAX_TOP];
  int error; /* LT_E* of a failure that ends this session's turn */
  char error_msg[512];
  int64_t due_ns;    /* when the next token is ready (scripted; openai: asleep while a request runs) */
  int heap_at;       /* its place in the driver's heap of due times, -1: not waiting (idle, or being stepped) */
  uint64_t heap_seq; /* ties on due_ns go first in, first out */
  int closed;        /* closed during a step: freed when the step ends */
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
  /* Optional (NULL: LT_EUNSUPP): LoRA adapters by name, and a session's choice of one. */
  int (*adapter_load)(lt_backend_t *b, const char *name, const char *dir);
  int (*adapter_unload)(lt_backend_t *b, const char *name);
  int (*gen_adapter)(lt_gen_t *g, const char *name);
} lt_backend_impl_t;

struct lt_backend {
  uv_loop_t *loop;
  const lt_backend_impl_t *impl;
  void *state;
  lt_tokenizer_t *own_tok; /* scripted: the byte tokenizer */
  const lt_tokenizer_t *tok;
  lt_backend_info_t info;
  uv_idle_t idle;   /* drives prefill and decode steps */
  uv_timer_t timer; /* scripted: wakes when the next token is due */
  unsigned wakes;   /* lt__backend_wake calls: a step that asked for more must not end the ticking */
  lt_gen_t *gens;
  int ngens;
  /* Sessions with a turn running, by due_ns (a min-heap): a step pops the due
   * ones instead of walking every session (thousands per worker, mostly
   * waiting). */
  lt_gen_t **heap;
  int nheap, capheap;
  uint64_t heap_seq;
  int stepping; /* in a step: closed sessions wait in `dead` */
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

/* ---- the OpenAI layer: the core (oai.c: routes, calls, rendering; oai_answer.c: tokens, stop strings, tool
 * calls, streaming) and one file per API shape, each a request parser into the common plan and an answer writer:
 * oai_openai.c (chat completions and completions), oai_messages.c (Anthropic Messages), oai_responses.c (OpenAI
 * Responses) ---- */

#define LT_OAI_MAX_STOP 16

typedef struct lt__oai_call lt__oai_call_t;

/* One API shape.  parse fills the call from its body: the plan's sampling, n, requested_max and seed, the call's
 * stream flags and stops, and either k->messages (OpenAI's chat shape: string contents, tool_calls with
 * arguments as JSON text or an object) with plan.tools (OpenAI function tools) for the core to render, or
 * prompt ids (completions).  The writers answer in the shape's JSON and server-sent events. */
typedef struct {
  const char *id_prefix; /* of the call's id, separator included as each API writes it ("chatcmpl-", "msg_", "resp_") */
  const char *call_prefix; /* of its tool calls' ids ("call", "toolu") */
  const char *input;       /* the body's field that holds the conversation ("messages", "input") */
  /* The context-full error's message in the API's own words (agents read it to compact their history); NULL:
   * OpenAI's. */
  void (*too_long)(char *msg, size_t n, int need, int max);
  int (*parse)(lt__oai_call_t *k, char *param, size_t plen);
  /* The stream's head went out (status 200, text/event-stream): the first events. */
  int (*stream_begin)(lt__oai_call_t *k);
  /* Choice g's text [g->sent, end) may go out (it can no longer become a stop string), and its tokens
   * [g->tok_sent, g->n); the writer advances g->sent and g->tok_sent over what it sent. */
  void (*stream_text)(lt__oai_call_t *k, lt_oai_gen_t *g, size_t end);
  /* Choice g ended (streaming): the rest of its content, its tool calls, its end. */
  void (*stream_choice_end)(lt__oai_call_t *k, lt_oai_gen_t *g);
  /* Every choice ended: the JSON answer, or the stream's last events (the stream is ended by the core). */
  void (*answer)(lt__oai_call_t *k);
  /* An error before the stream started, as JSON in the shape's error format. */
  void (*error)(lt_http_conn_t *c, int status, const char *param, const char *code, const char *msg);
  /* An error after it started: the shape's error event (the core ends the stream). */
  void (*stream_error)(lt__oai_call_t *k, int status, const char *param, const char *code, const char *msg);
} lt__oai_dialect_t;

extern const lt__oai_dialect_t lt__oai_openai, lt__oai_messages, lt__oai_responses;

struct lt_oai_gen {
  lt__oai_call_t *call;
  int index;
  void *handle;    /* the engine's */
  int live;        /* generating: cancel it if the call fails */
  int32_t *tokens; /* every token reported, [0, n) */
  float *logprobs;
  int n;
  size_t cap;
  int *ntop;        /* alternatives per token (top_logprobs) */
  int32_t *top_ids; /* [cap][plan.top_logprobs] */
  float *top_lps;
  char *text; /* the decoded text of the tokens (stop tokens excluded) */
  size_t tlen, tcap;
  size_t sent;  /* bytes of text already streamed */
  int tok_sent; /* tokens whose logprobs were streamed */
  int off_tok;  /* /v1/completions text_offset: tokens [0, off_tok) span off_at bytes */
  size_t off_at;
  int cut;            /* a stop string matched: text ends before it */
  int stop_index;     /* which one (k->stops[]) */
  const char *finish; /* "stop" | "length" | "tool_calls" once ended */
  cJSON *tool_calls;  /* parsed from the text at the end (OpenAI's message.tool_calls) */
  size_t content_len; /* text before the first tool-call block */
  int text_open;      /* messages/responses streams: the text block (message item) was opened */
};

struct lt__oai_call {
  lt_oai_t *a;
  const lt__oai_dialect_t *d;
  lt_http_conn_t *conn;
  lt__oai_call_t *prev, *next;
  lt_oai_plan_t plan; /* plan.body is owned */
  cJSON *messages;    /* normalised (plan.messages) */
  cJSON *tools;       /* converted to OpenAI's function tools (plan.tools), when the shape's differ */
  int thinking;       /* the template's enable_thinking: -1 left to the template, 0 off, 1 on */
  char *text;         /* the rendered prompt (plan.text) */
  int32_t *ids;       /* rendered prompt */
  int nids, cap;
  int stream, include_usage, logprobs, token_ids, skip_special, parse_tools;
  const char *stops[LT_OAI_MAX_STOP];
  int nstops;
  int count_only; /* /v1/messages/count_tokens: render and count, generate nothing */
  int streaming;  /* the stream's head went out */
  int pending;    /* choices not ended */
  int seq;        /* responses: the next event's sequence_number */
  char id[64];
  double created;
  lt_oai_gen_t gens[LT_OAI_MAX_N];
};

struct lt_oai {
  lt_oai_opts_t o;
  char model[256];
  int64_t version;
  uint64_t ncalls;
  lt__oai_call_t *calls;
  char skipped[8][32]; /* tool types already logged as skipped (one line each, not one per call) */
  int nskipped;
};

void lt__oai_send_json(lt_http_conn_t *c, int status, cJSON *o);
/* OpenAI's error object {"message", "type", "param", "code"} (the "error" of an answer or an event). */
cJSON *lt__oai_error_json(int status, const char *param, const char *code, const char *msg);
/* An error answer in OpenAI's shape (chat completions, completions, responses). */
void lt__oai_error(lt_http_conn_t *c, int status, const char *param, const char *code, const char *msg);
/* Cancels the live generations, answers the error (an error event when
 * streaming) and frees the call. */
void lt__oai_call_fail(lt__oai_call_t *k, int status, const char *param, const char *code, const char *msg);
/* The context filled: the context_limit hook, then the error. */
void lt__oai_context_full(lt__oai_call_t *k, int need);
/* Frees the call once answered. */
void lt__oai_call_done(lt__oai_call_t *k);
void lt__oai_gen_release(lt_oai_gen_t *g);
/* The stream's head, then the shape's first events. */
int lt__oai_stream_begin(lt__oai_call_t *k);
/* One server-sent event: "event: NAME" when name is not NULL, then "data: JSON" (o is consumed). */
int lt__oai_send_event(lt__oai_call_t *k, const char *name, cJSON *o);
/* Whether s[0, n) is only white space. */
int lt__oai_blank(const char *s, size_t n);

/* ---- request fields, shared by the parsers (on failure `param` names the field) ---- */

/* The member k of o unless it is absent or null. */
const cJSON *lt__oai_field(const cJSON *o, const char *k);
/* A number in [lo, hi] (integral when `integer`), or def when absent. */
int lt__oai_num(const cJSON *body, const char *k, double def, double lo, double hi, int integer, double *out,
                char *param, size_t plen);
/* A boolean, 0 when absent. */
int lt__oai_bool(const cJSON *body, const char *k, int *out, char *param, size_t plen);
/* Every member of body is named in one of the NULL-terminated lists (b may be NULL); else LT_EUNSUPP naming it. */
int lt__oai_known(const cJSON *body, const char *const *a, const char *const *b, char *param, size_t plen);
/* The stop strings of field k: a string or a list of up to LT_OAI_MAX_STOP non-empty strings (one only if !list). */
int lt__oai_stops(lt__oai_call_t *k, const char *key, char *param, size_t plen);
/* The call's sampling as asked: n = 1, temperature, top_p, top_k, max tokens (-1 when not given), the seed. */
void lt__oai_sampling(lt__oai_call_t *k, double temp, double top_p, double top_k, double maxt, double seed);
/* Logs once per layer that tools of `type` are skipped (the policy has only the function tools). */
void lt__oai_skip_tool(lt_oai_t *a, const char *api, const char *type);
/* The body's `tools`, flat tools {type, name, description, <schema_key>} (Anthropic's custom tools, the Responses
 * API's function tools), as OpenAI's chat tools in k->tools (plan.tools, parse_tools set): those of type `type`,
 * and untyped ones when `untyped`; any other type (a server tool) is skipped, logged once. */
int lt__oai_flat_tools(lt__oai_call_t *k, const char *api, const char *type, int untyped, const char *schema_key,
                       int schema_required, char *param, size_t plen);
/* Appends a message {role, content} to k->messages; returns it (NULL: out of memory). */
cJSON *lt__oai_add_message(lt__oai_call_t *k, const char *role, const char *content);

#endif
