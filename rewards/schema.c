#include "rewards/schema.h"

#define N(a) (int)(sizeof(a) / sizeof((a)[0]))
#define BIG 1e308

static const lt_cfg_entry_t rewards_e[] = {
    {"rewards.type", LT_CFG_ENUM, "\"rule\"", LT_CFG_NORANGE, "rule|code|genrm|verifier|rubric", "default reward for every domain"},
    {"rewards.domains", LT_CFG_MAP, NULL, LT_CFG_NORANGE, NULL, "per-domain overrides"},
    {"rewards.domains.*.type", LT_CFG_ENUM, NULL, LT_CFG_NORANGE, "rule|code|genrm|verifier|rubric", "reward of this domain"},
    {"rewards.genrm.endpoint", LT_CFG_STR, "\"\"", LT_CFG_NORANGE, NULL, "OpenAI-compatible chat-completions base URL of the reward model"},
    {"rewards.genrm.model", LT_CFG_STR, "\"\"", LT_CFG_NORANGE, NULL, "model name sent to it"},
    {"rewards.genrm.timeout_ms", LT_CFG_INT, "60000", 1, BIG, NULL, "per-request timeout"},
    {"rewards.genrm.retries", LT_CFG_INT, "3", 0, 100, NULL, "retries of transient failures, with exponential back-off"},
};
const lt_cfg_schema_t lt_rewards_schema = {"rewards", "Verifiers, GenRM and shaping.", rewards_e, N(rewards_e)};
