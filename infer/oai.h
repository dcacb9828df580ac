/* The OpenAI-compatible API layer, shared by `longtail serve` and the agent
 * gateway of the `agent` environment (one implementation).  It parses and
 * validates requests in three API shapes — OpenAI's chat completions and
 * completions, Anthropic's Messages, OpenAI's Responses — renders their
 * conversations (text, tools, tool calls and tool results) through the
 * model's chat template into prompt token ids, asks the caller's engine to
 * generate, and answers in the shape asked: JSON, or server-sent events for
 * `stream: true`.  Every shape goes through the same plan, hooks and
 * template, so the gateway records all three token-exact alike.  It knows
 * nothing of sessions, KV caches or recording: the caller plugs those in
 * through lt_oai_hooks_t.
 *
 * Routes (lt_oai_handle): POST /v1/chat/completions, POST /v1/completions,
 * POST /v1/messages, POST /v1/messages/count_tokens, POST /v1/responses,
 * GET /v1/models, GET /v1/models/{id}.  Whatever `model` a request names,
 * the current policy answers (agent programs come configured with arbitrary
 * model names).  Unsupported fields get a 400 naming the field; errors have
 * the shape's format (OpenAI's {"error": {"message", "type", "param",
 * "code"}}, Anthropic's {"type": "error", "error": {"type", "message"}}).
 *
 * Flow of one call (everything on the loop that runs the HTTP server):
 *   1. authorize(key)               optional; refusal → 401
 *   2. parse + render + tokenize    → lt_oai_plan_t (400 on bad input)
 *   3. prepare(plan)                optional; may replace the prompt ids,
 *                                   override sampling, clamp max_new
 *   4. context check                prompt ≥ max_context → context_limit()
 *                                   hook and a 400 "context_length_exceeded"
 *   5. generate() once per choice   (n of them, index 0..n-1); the engine
 *                                   reports each token with lt_oai_gen_token
 *                                   and the end with lt_oai_gen_end
 *   6. answered(result)             the exact prompt ids and, per choice,
 *                                   the exact tokens/logprobs returned
 */
#ifndef LT_INFER_OAI_H
#define LT_INFER_OAI_H

#include <cjson/cJSON.h>
#include <stdint.h>

#include "text/chat_template.h"
#include "infer/engine.h"
#include "text/tokenizer.h"
#include "net/http.h"
#include "text/toolcall.h"

#define LT_OAI_MAX_N 16            /* choices per request */
#define LT_OAI_MAX_TOP_LOGPROBS 20 /* OpenAI's limit */

typedef struct lt_oai lt_oai_t;
typedef struct lt_oai_gen lt_oai_gen_t; /* one choice being generated */

/* What one call will generate: built by the layer, adjustable by prepare(). */
typedef struct {
  /* the request, read-only */
  int chat;              /* 1: a conversation (chat completions, messages, responses), 0: /v1/completions */
  const cJSON *body;     /* the whole request body, in the shape of its route */
  const cJSON *messages; /* chat: the conversation in OpenAI's chat shape, whatever the route's (content
                                 normalised to strings; assistant tool_calls, tool messages) */
  const cJSON *tools;    /* chat: the tools as OpenAI function tools, or NULL */
  const char *text;      /* chat: the rendered prompt, ntext bytes (what the prompt ids tokenize), for a
                                 caller that matches turns against its own token record */
  size_t ntext;
  void *session;                                /* what authorize() set (NULL without it) */
  int n;                                        /* choices */
  int requested_max;                            /* max_tokens / max_completion_tokens as asked; -1: not given */
  float requested_temperature, requested_top_p; /* as asked (1 when not given) */
  /* the plan; prepare() may change any of these */
  const int32_t *prompt; /* the rendered prompt's token ids (the whole context) */
  int nprompt;           /* prepare() may point prompt at memory it owns (token-exact reuse of
                                 earlier turns); it must stay valid until answered() or the call's end */
  int max_new;           /* tokens per choice: the request's, clamped to the room left in the context;
                                 prepare() may clamp it further (the rollout's budget) */
  lt_sampling_t sp;      /* the request's settings; prepare() overrides them with the rollout's */
  uint64_t seed;         /* choice i uses seed + i */
  int top_logprobs;      /* alternatives wanted per token, 0..LT_OAI_MAX_TOP_LOGPROBS */
} lt_oai_plan_t;

/* One choice's generation, as handed to the engine. */
typedef struct {
  const lt_oai_plan_t *plan; /* prompt, max_new, sp, top_logprobs, session */
  int index;                 /* choice index, 0..n-1 */
  uint64_t seed;             /* plan->seed + index */
} lt_oai_job_t;

/* One generated token as the engine reports it.  top_* are the most likely
 * tokens of the distribution it was drawn from (most likely first; may be
 * fewer than asked, e.g. an engine that cannot see them reports none). */
typedef struct {
  int32_t token;
  float logprob;
  int ntop;
  const int32_t *top_ids;
  const float *top_logprobs;
} lt_oai_token_t;

/* A finished choice, as returned to the client (for token-exact recording):
 * tokens[0..n) are every token the policy generated for it and the client
 * was told about, the stop token or the token completing a stop string
 * included (= usage.completion_tokens summed over choices). */
typedef struct {
  const int32_t *tokens;
  const float *logprobs;
  int n;
  const char *finish_reason; /* "stop" | "length" | "tool_calls" */
  const char *text;          /* the content returned (stop string and tool-call blocks removed) */
} lt_oai_choice_t;

typedef struct {
  const lt_oai_plan_t *plan; /* prompt/nprompt as generated from, sp and max_new as used */
  int nchoices;
  const lt_oai_choice_t *choices;
} lt_oai_result_t;

typedef struct {
  void *ud; /* first argument of every hook */
  /* Optional.  `bearer` is the API key: the token of "Authorization: Bearer
   * <token>", else the X-Api-Key header (Anthropic's SDKs), NULL without
   * either.  Returns 0 and may set *session (handed to every later hook of
   * the call), or < 0 to refuse: 401 with lt_error_msg() as the message.
   * NULL hook: no authentication. */
  int (*authorize)(void *ud, const char *bearer, void **session);
  /* Optional.  Called once the request parsed and rendered; may change the
   * plan (see lt_oai_plan_t).  < 0 refuses the call: LT_ERANGE is a context
   * that no longer fits (→ context_limit hook + 400 context_length_exceeded),
   * anything else a 400 (LT_EINVAL) or 500 with lt_error_msg(). */
  int (*prepare)(void *ud, lt_oai_plan_t *plan);
  /* Required.  Starts generating one choice: report tokens with
   * lt_oai_gen_token and the end with lt_oai_gen_end, on the loop, never
   * inside this call.  *handle is the engine's, handed back to cancel.
   * Returns < 0 if it cannot start (nothing is reported then). */
  int (*generate)(void *ud, lt_oai_gen_t *g, const lt_oai_job_t *job, void **handle);
  /* Required.  Stops a generation the layer no longer needs (client gone,
   * another choice failed, shutdown): no lt_oai_gen_* call may follow. */
  void (*cancel)(void *ud, void *handle);
  /* Optional.  The context no longer fits: the prompt (need tokens) exceeds
   * max_context, prepare() or an engine said LT_ERANGE.  The client gets a
   * 400 with code "context_length_exceeded" (or an error event when
   * streaming).  The agent gateway ends the episode as context_limit here. */
  void (*context_limit)(void *ud, void *session, int need, int max_context);
  /* Optional.  The call was answered in full (every choice ended, the JSON
   * sent or the stream finished); not called for failed calls, nor when the
   * client left before the end (it was told nothing complete). */
  void (*answered)(void *ud, const lt_oai_result_t *r);
} lt_oai_hooks_t;

typedef struct {
  const lt_tokenizer_t *tok;
  const lt_chat_template_t *chat; /* the model's own template; NULL: ChatML */
  lt_tool_format tool_format;     /* how the policy writes tool calls (lt_toolcall_format_detect) */
  const char *model;              /* id in answers and /v1/models */
  int vocab;                      /* token ids in prompts must be below this */
  int max_context;                /* tokens per call, prompt included */
  uint64_t seed_base;             /* seeds of requests that give none: seed_base + a call counter */
  lt_oai_hooks_t hooks;
} lt_oai_opts_t;

int lt_oai_create(const lt_oai_opts_t *o, lt_oai_t **out);
/* Cancels every call in flight (their connections close) and frees. */
void lt_oai_free(lt_oai_t *o);
/* The policy version reported in answers ("policy_version"). */
void lt_oai_set_version(lt_oai_t *o, int64_t version);

/* Serves the request if its path is one of the layer's routes (returns 1;
 * the layer answers c, now or later), else returns 0 and leaves c to the
 * caller (its own routes, or a 404 through lt_oai_send_error). */
int lt_oai_handle(lt_oai_t *o, lt_http_conn_t *c, const lt_http_req_t *req);

/* Engine → layer.  Returns 0 to go on, 1 when the layer has what it needs
 * (a stop string matched, the client left): the engine then generates no
 * more tokens for g and calls lt_oai_gen_end soon (the token just reported
 * is the last one kept). */
int lt_oai_gen_token(lt_oai_gen_t *g, const lt_oai_token_t *t);
/* The choice ended: rc 0 (eos: 1 when it ended on a stop token, 0 on the
 * token budget or after lt_oai_gen_token returned 1), or rc < 0 with `msg`
 * (LT_ERANGE: the context filled → context_limit).  g is invalid afterwards. */
void lt_oai_gen_end(lt_oai_gen_t *g, int rc, int eos, const char *msg);

/* An error in OpenAI's shape: {"error": {"message", "type", "param", "code"}}
 * (type "invalid_request_error" below 500, else "server_error"; param and
 * code null when NULL). */
void lt_oai_send_error(lt_http_conn_t *c, int status, const char *param, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* The 404 of a path that is no route: it names every route of the layer, each
 * after `prefix` (the gateway's "/e/ID"), then `more` (the caller's own
 * routes, or NULL). */
void lt_oai_send_no_route(lt_http_conn_t *c, const lt_http_req_t *req, const char *prefix, const char *more);

#endif
