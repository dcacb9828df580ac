/* The agent: one task from its environment's opening to a trajectory, played
 * by the builtin loop (rollout/loop.c) — generate until a stop or a tool
 * call, run the calls through the environment, append the observations (loss
 * mask 0), repeat until the environment ends the episode or a limit truncates
 * it — or, for an `agent` domain, by its program through the gateway
 * (rollout/agent_gateway.c); then the reward.  How it ended is recorded
 * precisely (terminated / truncated by a budget / a timeout, with its reason;
 * environment and reward failures as their own statuses).  Its lifecycle is
 * the table in rollout/agent.c. */
#ifndef LT_ROLLOUT_AGENT_H
#define LT_ROLLOUT_AGENT_H

#include "envs/env.h"
#include "text/chat_template.h"
#include "proto/proto.h"
#include "rewards/reward.h"
#include "infer/backend.h"
#include "rollout/gateway.h"
#include "text/toolcall.h"

/* Context management (rollout.keep_reasoning, rollout.compression; seed 004
 * §3.3.2, seed 002's thinking retention).  A rewrite starts a new context: the
 * trajectory then holds the rewritten context (loss mask 0) and what the policy
 * generates after it; earlier turns stay in the messages, untrained. */
typedef enum { LT_COMPRESS_NONE, LT_COMPRESS_SUMMARY, LT_COMPRESS_DISCARD_ALL, LT_COMPRESS_HYBRID } lt_compression;

typedef struct {
  int keep_reasoning_latest; /* a new user message drops the <think> blocks of earlier assistant turns */
  lt_compression compression;
  int threshold;      /* context tokens that trigger compression (0: off) */
  int max_resets;     /* rewrites per episode, then the limits truncate as usual */
  int summary_tokens; /* budget of the policy's own summary */
  const char *summary_prompt;
} lt_context_opts_t;

/* The context settings of a run's config (rollout.keep_reasoning, compression, ...). */
void lt_agent_context_config(const lt_config_t *cfg, lt_context_opts_t *out);

typedef struct {
  uv_loop_t *loop;
  lt_envs_t *envs;
  lt_rewarder_t *rewarder;
  lt_backend_t *backend;
  lt_context_opts_t context;
  int *fault_in_step;             /* LT_FAULT=kill_in_step=N: the process dies while the Nth tool call runs */
  const lt_chat_template_t *chat; /* the checkpoint's own chat template; NULL: ChatML */
  lt_tool_format tool_format;     /* how the policy writes tool calls */
  lt_gateway_t *gateway;          /* serves the programs of `agent` domains (NULL: the run has none) */
  const lt_config_t *cfg;         /* the job's: a timeout's reward, lt_reward_failure (NULL: 0) */
} lt_agent_ctx_t;

typedef struct lt_agent lt_agent_t;

/* Receives the finished trajectory as a TRAJ message (the callee owns it and
 * frees it with lt_msg_free).  By then the agent's generation sessions, its
 * environment's episode and its program are released, so the callback may
 * start another agent in its place; the agent's memory is freed after the
 * callback returns (a is valid, but done, during it). */
typedef void (*lt_agent_done_cb)(lt_agent_t *a, lt_msg_t *traj, void *ud);

/* The checkpoint's chat template (*chat NULL when model_dir has no
 * tokenizer_config.json with one: the builtin ChatML) and the tool format
 * named by rollout.tool_format ("auto": the one the template teaches). */
int lt_agent_chat_load(const char *model_dir, const char *tool_format, lt_chat_template_t **chat, lt_tool_format *fmt);

int lt_agent_start(lt_agent_ctx_t *ctx, const lt_task_t *task, lt_agent_done_cb cb, void *ud, lt_agent_t **out);
/* Ends the task now with status aborted (callback runs on the loop); a no-op
 * once it has ended (its reward or delivery is on the way). */
void lt_agent_abort(lt_agent_t *a, const char *reason);
uint64_t lt_agent_task_id(const lt_agent_t *a);
/* Drops the agent without a callback (worker shutdown); not from inside its
 * callback. */
void lt_agent_discard(lt_agent_t *a);

/* The gateway's view of an `agent` domain's episode (rollout/agent_gateway.c). */
extern const lt_gateway_session_ops_t lt_agent_gateway_ops;

#endif
