/* The config section of the rewards: rewards.* and its per-domain overrides. */
#include "rewards/schema.h"

#define N(a) (int)(sizeof(a) / sizeof((a)[0]))
#define BIG 1e308
#define TYPES "rule|env|code|genrm|verifier|rubric|math"

static const lt_cfg_entry_t rewards_e[] = {
    {"rewards.type", LT_CFG_ENUM, "\"rule\"", LT_CFG_NORANGE, TYPES, "default reward for every domain (env: the environment's own verdict)"},
    {"rewards.domains", LT_CFG_MAP, NULL, LT_CFG_NORANGE, NULL, "per-domain overrides"},
    {"rewards.domains.*.type", LT_CFG_ENUM, NULL, LT_CFG_NORANGE, TYPES, "reward of this domain"},
    {"rewards.range", LT_CFG_NUM_LIST, "[]", LT_CFG_NORANGE, NULL, "[lowest, highest] reward a result may carry; a TRAJ outside is refused (empty: [0, 1] plus the shaping terms' bounds; env rewards: unchecked)"},
    {"rewards.domains.*.range", LT_CFG_NUM_LIST, NULL, LT_CFG_NORANGE, NULL, "[lowest, highest] reward of this domain (overrides rewards.range)"},
    {"rewards.rule.tolerance", LT_CFG_NUM, "1e-6", 0, 1, NULL, "relative tolerance of numeric answer matching"},
    {"rewards.math.tolerance", LT_CFG_NUM, "1e-6", 0, 1, NULL, "relative tolerance of the math reward's numeric comparisons (0.333 is not 1/3)"},
    {"rewards.format_penalty", LT_CFG_NUM, "0", 0, BIG, NULL, "subtracted once per malformed tool call (component tool_format)"},
    {"rewards.length_penalty.target", LT_CFG_INT, "0", 0, BIG, NULL, "response tokens beyond which the length penalty applies (0: off)"},
    {"rewards.length_penalty.coef", LT_CFG_NUM, "0.1", 0, BIG, NULL, "penalty per target-length of excess tokens (component length_penalty)"},
    {"rewards.language.script", LT_CFG_ENUM, "\"none\"", LT_CFG_NORANGE, "none|latin|cjk|cyrillic", "expected script of the response (language-consistency reward)"},
    {"rewards.language.coef", LT_CFG_NUM, "0.1", 0, BIG, NULL, "weight of the language-consistency component (fraction of letters in the script)"},
    {"rewards.genrm.endpoint", LT_CFG_STR, "\"\"", LT_CFG_NORANGE, NULL, "OpenAI-compatible chat-completions base URL of the reward model"},
    {"rewards.genrm.model", LT_CFG_STR, "\"\"", LT_CFG_NORANGE, NULL, "model name sent to it"},
    {"rewards.genrm.timeout_ms", LT_CFG_INT, "60000", 1, BIG, NULL, "per-request timeout"},
    {"rewards.genrm.retries", LT_CFG_INT, "3", 0, 100, NULL, "retries of transient failures (no connection, timeout, 429/5xx, no verdict in the reply)"},
    {"rewards.genrm.backoff_ms", LT_CFG_INT, "500", 0, 60000, NULL, "first retry delay, doubled per retry (at most 10 s)"},
    {"rewards.genrm.max_inflight", LT_CFG_INT, "16", 1, 4096, NULL, "judge requests in flight at once per process; the rest queue"},
    {"rewards.genrm.max_tokens", LT_CFG_INT, "1024", 1, BIG, NULL, "max_tokens of each judge request"},
    {"rewards.genrm.extra_body", LT_CFG_JSON, NULL, LT_CFG_NORANGE, NULL, "object merged into each judge request (e.g. logit_bias, chat_template_kwargs)"},
    {"rewards.genrm.prompt", LT_CFG_STR, "\"\"", LT_CFG_NORANGE, NULL, "pairwise prompt with {question} {response} {reference} (empty: the built-in one, docs/rewards.md)"},
    {"rewards.genrm.pattern", LT_CFG_STR, "\"\"", LT_CFG_NORANGE, NULL, "POSIX extended regex whose first group is the confidence (empty: <confidence>X</confidence>)"},
    {"rewards.genrm.scale", LT_CFG_NUM, "1", 0, BIG, NULL, "Bradley-Terry win rate = sigmoid(scale * (confidence - length penalty - center))"},
    {"rewards.genrm.center", LT_CFG_NUM, "5", -BIG, BIG, NULL, "confidence at which the candidate ties the reference"},
    {"rewards.genrm.length_penalty.target", LT_CFG_INT, "0", 0, BIG, NULL, "response tokens beyond which the confidence is penalised (0: off)"},
    {"rewards.genrm.length_penalty.coef", LT_CFG_NUM, "1", 0, BIG, NULL, "confidence points per target-length of excess tokens"},
    {"rewards.genrm.zero_patterns", LT_CFG_STR_LIST, "[]", LT_CFG_NORANGE, NULL, "regexes (fabricated citations, overconfident claims) whose match gives reward 0 without a judge call"},
    {"rewards.genrm.min_language_fraction", LT_CFG_NUM, "0.5", 0, 1, NULL, "with rewards.language.script set: below this fraction of letters in the script, reward 0"},
    {"rewards.genrm.reasoning_check.enabled", LT_CFG_BOOL, "false", LT_CFG_NORANGE, NULL, "longtail's heuristic, not seed 001's MetaRM: a second judge call checks the verdict's reasoning and a flawed one scales the policy's reward down (genrm, verifier, rubric; docs/rewards.md)"},
    {"rewards.genrm.reasoning_check.prompt", LT_CFG_STR, "\"\"", LT_CFG_NORANGE, NULL, "reasoning-check prompt with {question} {response} {judgment} (empty: built-in)"},
    {"rewards.genrm.reasoning_check.pattern", LT_CFG_STR, "\"\"", LT_CFG_NORANGE, NULL, "regex whose first group is True/False (empty: <flawed>...</flawed>)"},
    {"rewards.genrm.reasoning_check.penalty", LT_CFG_NUM, "0.5", 0, 1, NULL, "fraction of the reward removed when the reasoning is flawed"},
    {"rewards.genrm.metarm", LT_CFG_REMOVED, NULL, LT_CFG_NORANGE, NULL, "renamed rewards.genrm.reasoning_check (same keys): it was never seed 001's MetaRM, which corrects the GenRM's own training signal; it scales the policy's reward down when the judge's reasoning looks flawed (docs/rewards.md)"},
    {"rewards.verifier.prompt", LT_CFG_STR, "\"\"", LT_CFG_NORANGE, NULL, "grader prompt with {question} {response} {reference} (empty: built-in)"},
    {"rewards.verifier.pattern", LT_CFG_STR, "\"\"", LT_CFG_NORANGE, NULL, "regex whose first group is True/False (empty: <correct>...</correct>)"},
    {"rewards.rubric.prompt", LT_CFG_STR, "\"\"", LT_CFG_NORANGE, NULL, "rubric-judge prompt; {reference} is the rubric (empty: built-in)"},
    {"rewards.rubric.pattern", LT_CFG_STR, "\"\"", LT_CFG_NORANGE, NULL, "regex whose first group is satisfied|partially|unsatisfied"},
    {"rewards.rubric.partial", LT_CFG_NUM, "0", 0, 1, NULL, "reward of 'partially' (asymmetric binary: 0)"},
    {"rewards.code.test_timeout_s", LT_CFG_NUM, "2", 0.01, BIG, NULL, "deadline of each test of a code reward (the sandbox's limits apply to the run)"},
};
const lt_cfg_schema_t lt_rewards_schema = {"rewards", "Verifiers, GenRM and shaping.", rewards_e, N(rewards_e)};
