/* The config section of the environments: envs.<domain>.* (type, weight, group size, batch share, params). */
#include "envs/schema.h"

#define N(a) (int)(sizeof(a) / sizeof((a)[0]))
#define BIG 1e308

static const lt_cfg_entry_t envs_e[] = {
    {"envs", LT_CFG_MAP, "{\"arith\": {\"type\": \"arith\"}}", LT_CFG_NORANGE, NULL, "domain name (1 to 64 letters, digits, _ and -: it becomes a Prometheus label and a file name) → environment; each domain is one kind of task"},
    {"envs.*.type", LT_CFG_ENUM, NULL, LT_CFG_NORANGE, "arith|code|tools|external|http|dataset|agent|swe", "environment implementation"},
    {"envs.*.weight", LT_CFG_NUM, NULL, 0, BIG, NULL, "share of dispatched tasks (default 1)"},
    {"envs.*.group_size", LT_CFG_INT, NULL, 1, 4096, NULL, "samples per prompt of this domain (its group); default scheduler.group_size (seed 001 App. D.2: group counts per domain)"},
    {"envs.*.kl_coef", LT_CFG_NUM, NULL, 0, BIG, NULL, "coefficient of the unbiased KL to the reference policy for this domain's trajectories, per token in the loss (seed 002 §3.1); default learner.kl_coef"},
    {"envs.*.pass_threshold", LT_CFG_NUM, NULL, LT_CFG_NORANGE, NULL, "pass-rate oversampling: a trajectory without a verifier's verdict (reward components correct or verifier) passed when its reward is at least this; default 0.5 (scheduler.pass_rate_oversample)"},
    {"envs.*.batch_share", LT_CFG_NUM, NULL, 0, 1, NULL, "quota of each training batch for this domain: a batch takes up to batch_share × learner.batch.trajectories trajectories (whole complete groups; at least one group when the share is positive) from the domain while it has eligible complete groups; share it leaves unused goes to the other domains, so the learner never idles waiting for a slow domain. Domains without one split what the set shares leave (they must sum to at most 1); none set: arrival order (docs/losses.md)"},
    {"envs.*.noise", LT_CFG_JSON, NULL, LT_CFG_NORANGE, NULL, "noise wrapper: instruction, tool_failure, tool_partial, tool_inconsistent (probabilities at level 1); closed-loop curriculum: level_start (default 1: none), level_step (0.1), max_gap (0.1), clean_share (0.2), window (32) (docs/envs.md)"},
    {"envs.*.params", LT_CFG_JSON, NULL, LT_CFG_NORANGE, NULL, "environment parameters (docs/envs.md)"},
    {"envs.*.params.spec", LT_CFG_PATH, NULL, LT_CFG_NORANGE, NULL, "tools: the tool specification file (docs/envs.md)"},
    {"envs.*.params.dir", LT_CFG_PATH, NULL, LT_CFG_NORANGE, NULL, "external: the program's working directory (docs/envs.md)"},
    {"envs.*.params.train", LT_CFG_PATH, NULL, LT_CFG_NORANGE, NULL, "dataset: the training JSONL (docs/envs.md)"},
    {"envs.*.params.tasks", LT_CFG_PATH, NULL, LT_CFG_NORANGE, NULL, "agent: the task rows (JSONL, dataset rows: prompt or messages, answer, ...) (docs/agent-gateway.md); swe: the training tasks (JSONL in SWE-bench's fields: instance_id, problem_statement, image, repo_dir, patch, test_patch, FAIL_TO_PASS, PASS_TO_PASS, test_cmd; docs/envs.md)"},
    {"envs.*.params.image", LT_CFG_STR, NULL, LT_CFG_NORANGE, NULL, "swe: the image of rows that name none (oci:DIR[:TAG], oci-archive:FILE[:TAG], docker-archive:FILE); agent: run the program inside the task's root made from this image (or the row's image), reaching only its gateway port (docs/envs.md)"},
    {"envs.*.params.test_cmd", LT_CFG_STR, NULL, LT_CFG_NORANGE, NULL, "swe (and agent with image): the command that runs one test id for rows that name none ({test} is replaced by the id, quoted; exit 0: passed), run by /bin/sh in repo_dir"},
    {"envs.*.params.tools", LT_CFG_JSON, NULL, LT_CFG_NORANGE, NULL, "swe: the tools the policy gets, a subset of [\"bash\", \"view\", \"edit\"] (default all three)"},
    {"envs.*.params.max_turns", LT_CFG_INT, NULL, 1, 1 << 20, NULL, "swe: turns per episode in this domain, in place of rollout.max_turns (truncated: turn_limit)"},
    {"envs.*.params.tool_timeout_s", LT_CFG_NUM, NULL, 0, 86400, NULL, "swe: seconds per bash call (default 30); past it the command is killed and the episode ends as a timeout (tool_timeout; rollout.on_timeout)"},
    {"envs.*.params.test_timeout_s", LT_CFG_NUM, NULL, 0, 86400, NULL, "swe (and agent with image): seconds per test id when scoring (default 60); a test past it fails and the episode is not resolved"},
    {"envs.*.params.output_bytes", LT_CFG_INT, NULL, 256, 1 << 24, NULL, "swe: bytes of a tool's output shown to the policy (default 8192): the first and last halves, and how many bytes were cut between them"},
    {"envs.*.params.demos", LT_CFG_PATH, NULL, LT_CFG_NORANGE, NULL, "swe: demonstrations for the supervised warm start (JSONL: {\"instance_id\": a training task's, \"turns\": [assistant, tool, ..., assistant]} per line), each rendered after the task's real opening chat (docs/envs.md)"},
    {"envs.*.params.tool_format", LT_CFG_ENUM, NULL, LT_CFG_NORANGE, "xml|qwen|deepseek", "swe: the tool-call format the system message shows (default xml, the builtin models'; a chat template also gets the tools as function schemas)"},
    {"envs.*.params.command", LT_CFG_JSON, NULL, LT_CFG_NORANGE, NULL, "external, agent: the program's argv; agent: started once per episode with OPENAI_BASE_URL, OPENAI_API_KEY, ANTHROPIC_BASE_URL, ANTHROPIC_API_KEY and LONGTAIL_TASK (docs/agent-gateway.md)"},
    {"envs.*.params.timeout_s", LT_CFG_NUM, NULL, 0, BIG, NULL, "external: seconds per call (default 10); agent: seconds of its own time after its first call (start-up and waiting on the gateway excluded) an episode's program may run before its processes are killed (agent_timeout, a failure; default 600, at most 86400)"},
    {"envs.*.params.sandbox", LT_CFG_BOOL, NULL, LT_CFG_NORANGE, NULL, "agent: run the program in the sandbox, its only network its gateway (default: true where the host has user namespaces; false: a plain child process)"},
    {"envs.*.params.memory_mb", LT_CFG_INT, NULL, 1, 1 << 20, NULL, "agent: the memory limit of the program's sandbox, MiB (default sandbox.memory_mb; a Node or Bun agent CLI needs 1024 or more); refused with sandbox false"},
    {"envs.*.params.read_only", LT_CFG_JSON, NULL, LT_CFG_NORANGE, NULL, "agent: host directories bound read-only into the program's sandbox at their own path (its node_modules, its native binary; at most 16; relative ones from the working directory); files of command in them run in place; refused with sandbox false"},
    {"envs.*.params.stdin", LT_CFG_ENUM, NULL, LT_CFG_NORANGE, "task|prompt", "agent: what the program reads on stdin: the task's JSON (default) or its prompt text, the last user message (for an agent CLI's print mode: claude -p, codex exec)"},
    {"envs.*.params.pass_answer", LT_CFG_BOOL, NULL, LT_CFG_NORANGE, NULL, "agent: the program sees the row's answer (default false: the policy must not see the reference)"},
    {"envs.*.params.honor_sampling", LT_CFG_BOOL, NULL, LT_CFG_NORANGE, NULL, "agent: requests' temperature and top_p are used and recorded (default false: the rollout's settings)"},
    {"envs.*.params.eval", LT_CFG_PATH, NULL, LT_CFG_NORANGE, NULL, "dataset: the held-out evaluation JSONL (docs/envs.md); swe: the held-out tasks"},
};
const lt_cfg_schema_t lt_envs_schema = {"envs", "Environments, one per domain.", envs_e, N(envs_e)};
