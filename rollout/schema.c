/* The config sections of the rollout worker: rollout.* (sampling, turn and context limits, context compression,
 * tool-call format) and workers.* (its slots, backend and device, the scripted and openai backends' settings, when
 * it gives up on a silent daemon; the daemon reads spawn_local, restart and the rest when it starts local workers). */
#include "rollout/schema.h"

#include "proto/proto.h" /* the ranges a TASK may carry (its decoder refuses the rest) */

#define N(a) (int)(sizeof(a) / sizeof((a)[0]))
#define BIG 1e308

static const lt_cfg_entry_t rollout_e[] = {
    {"rollout.temperature", LT_CFG_NUM, "1.0", 0, 100, NULL, "sampling temperature"},
    {"rollout.top_p", LT_CFG_NUM, "1.0", 0, 1, NULL, "nucleus sampling mass"},
    {"rollout.top_k", LT_CFG_INT, "0", 0, 1 << 24, NULL, "top-k sampling (0: off)"},
    {"rollout.max_new_tokens", LT_CFG_INT, "256", 1, LT_PROTO_MAX_TOKENS, NULL, "tokens generated per turn"},
    {"rollout.max_turns", LT_CFG_INT, "8", 1, 1 << 20, NULL, "turns per episode (truncated: turn_limit)"},
    {"rollout.max_context", LT_CFG_INT, "2048", 1, LT_PROTO_MAX_TOKENS, NULL,
     "context length per episode (truncated: context_limit)"},
    {"rollout.on_timeout", LT_CFG_ENUM, "\"fail\"", LT_CFG_NORANGE, "fail|mask",
     "a timeout (agent_timeout, tool_timeout, sandbox_timeout, ...): fail trains it as a failure (the lower bound of its domain's reward range); mask keeps it in the buffer out of every loss (rollout/timeouts_masked). Never bootstrapped"},
    {"rollout.keep_reasoning", LT_CFG_ENUM, "\"latest\"", LT_CFG_NORANGE, "latest|all",
     "keep reasoning of the latest user turn only, or of all turns"},
    {"rollout.compression", LT_CFG_ENUM, "\"none\"", LT_CFG_NORANGE, "none|summary|discard_all|hybrid",
     "context management past compression_threshold (hybrid: summary there, discard_all at the turn limit)"},
    {"rollout.compression_threshold", LT_CFG_INT, "0", 0, BIG, NULL,
     "tokens of context that trigger compression (0: off)"},
    {"rollout.max_resets", LT_CFG_INT, "2", 0, 1000, NULL, "context rewrites per episode (compression, discard)"},
    {"rollout.summary_tokens", LT_CFG_INT, "256", 1, BIG, NULL, "tokens the policy may spend summarizing its context"},
    {"rollout.tool_format", LT_CFG_ENUM, "\"auto\"", LT_CFG_NORANGE, "auto|xml|qwen|deepseek",
     "how the policy writes tool calls (auto: the format its chat template teaches; xml without one)"},
    {"rollout.summary_prompt", LT_CFG_STR,
     "\"Summarize the progress so far: what was tried, what the tools returned, and what is left to do. Be brief.\"",
     LT_CFG_NORANGE, NULL, "the request for a summary, appended as a user message"},
};
const lt_cfg_schema_t lt_rollout_schema = {"rollout", "Sampling and the agent loop.", rollout_e, N(rollout_e)};

static const lt_cfg_entry_t workers_e[] = {
    {"workers.spawn_local", LT_CFG_INT, "2", 0, 1024, NULL,
     "worker processes the daemon starts on this machine (0: remote workers only)"},
    {"workers.slots", LT_CFG_INT, "4", 1, 65536, NULL, "concurrent sessions per local worker"},
    {"workers.backend", LT_CFG_ENUM, "\"builtin\"", LT_CFG_NORANGE, "builtin|openai|scripted",
     "inference backend of local workers ('scripted' is a fast fake policy for load tests)"},
    {"workers.device", LT_CFG_ENUM, "\"cpu\"", LT_CFG_NORANGE, "cpu|cuda|auto", "device of the builtin engine"},
    {"workers.threads", LT_CFG_INT, "1", 0, 1024, NULL,
     "compute threads per local worker (0: all cores, or every CPU of workers.cpus)"},
    {"workers.cpus", LT_CFG_STR, "\"\"", LT_CFG_NORANGE, NULL,
     "CPUs the local workers (workers.spawn_local) and their sandboxes run on, as taskset -c takes them (\"4-15\"); disjoint from learner.cpus; empty: wherever the OS puts them (docs/operations.md, \"Pinning the learner and the workers\")"},
    {"workers.restart", LT_CFG_BOOL, "true", LT_CFG_NORANGE, NULL, "restart local workers that die"},
    {"workers.daemon_gone_s", LT_CFG_NUM, "600", 1, BIG, NULL,
     "a worker exits after the daemon has been unreachable this long"},
    {"workers.scripted.mean_tokens", LT_CFG_INT, "32", 1, BIG, NULL,
     "scripted backend: typical turn length (exponential)"},
    {"workers.scripted.tail_fraction", LT_CFG_NUM, "0.05", 0, 1, NULL,
     "scripted backend: share of turns in the long tail"},
    {"workers.scripted.tail_factor", LT_CFG_NUM, "16", 1, BIG, NULL,
     "scripted backend: how much longer tail turns are"},
    {"workers.scripted.token_us", LT_CFG_INT, "0", 0, BIG, NULL, "scripted backend: simulated microseconds per token"},
    {"workers.scripted.answer", LT_CFG_STR, "\" #### 0\"", LT_CFG_NORANGE, NULL,
     "scripted backend: how each turn ends (a final answer, or a tool call for multi-turn load)"},
    {"workers.openai.endpoint", LT_CFG_STR, "\"\"", LT_CFG_NORANGE, NULL,
     "base URL of an OpenAI-compatible server (backend openai)"},
    {"workers.openai.model", LT_CFG_STR, "\"\"", LT_CFG_NORANGE, NULL, "model name sent to that server"},
    {"workers.openai.timeout_ms", LT_CFG_INT, "120000", 1, BIG, NULL, "per-request timeout"},
    {"workers.openai.retries", LT_CFG_INT, "3", 0, 100, NULL, "retries of transient failures, with back-off"},
    {"workers.openai.reload_url", LT_CFG_STR, "\"\"", LT_CFG_NORANGE, NULL,
     "URL the worker POSTs {\"path\": DIR} to after new weights (empty: none)"},
    {"workers.openai.lora", LT_CFG_BOOL, "false", LT_CFG_NORANGE, NULL,
     "a LoRA run (learner.lora): each version's adapter is loaded into the server by name with POST /v1/load_lora_adapter {\"lora_name\": \"longtail-vN\", \"lora_path\": DIR} (vLLM with --enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING, `longtail serve`) and requests name it (docs/lora.md)"},
};
const lt_cfg_schema_t lt_workers_schema = {"workers", "Rollout worker processes.", workers_e, N(workers_e)};
