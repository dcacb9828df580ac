#include "rewards/schema.h"

#define N(a) (int)(sizeof(a) / sizeof((a)[0]))
#define BIG 1e308
#define TYPES "rule|env|code|genrm|verifier|rubric"

static const lt_cfg_entry_t rewards_e[] = {
    {"rewards.type", LT_CFG_ENUM, "\"rule\"", LT_CFG_NORANGE, TYPES, "default reward for every domain (env: the environment's own verdict)"},
    {"rewards.domains", LT_CFG_MAP, NULL, LT_CFG_NORANGE, NULL, "per-domain overrides"},
    {"rewards.domains.*.type", LT_CFG_ENUM, NULL, LT_CFG_NORANGE, TYPES, "reward of this domain"},
    {"rewards.rule.tolerance", LT_CFG_NUM, "1e-6", 0, 1, NULL, "relative tolerance of numeric answer matching"},
    {"rewards.format_penalty", LT_CFG_NUM, "0", 0, BIG, NULL, "subtracted once per malformed tool call (component tool_format)"},
    {"rewards.length_penalty.target", LT_CFG_INT, "0", 0, BIG, NULL, "response tokens beyond which the length penalty applies (0: off)"},
    {"rewards.length_penalty.coef", LT_CFG_NUM, "0.1", 0, BIG, NULL, "penalty per target-length of excess tokens (component length_penalty)"},
    {"rewards.language.script", LT_CFG_ENUM, "\"none\"", LT_CFG_NORANGE, "none|latin|cjk|cyrillic", "expected script of the response (language-consistency reward)"},
    {"rewards.language.coef", LT_CFG_NUM, "0.1", 0, BIG, NULL, "weight of the language-consistency component (fraction of letters in the script)"},
    {"rewards.genrm.endpoint", LT_CFG_STR, "\"\"", LT_CFG_NORANGE, NULL, "OpenAI-compatible chat-completions base URL of the reward model"},
    {"rewards.genrm.model", LT_CFG_STR, "\"\"", LT_CFG_NORANGE, NULL, "model name sent to it"},
    {"rewards.genrm.timeout_ms", LT_CFG_INT, "60000", 1, BIG, NULL, "per-request timeout"},
    {"rewards.genrm.retries", LT_CFG_INT, "3", 0, 100, NULL, "retries of transient failures, with exponential back-off"},
};
const lt_cfg_schema_t lt_rewards_schema = {"rewards", "Verifiers, GenRM and shaping.", rewards_e, N(rewards_e)};
