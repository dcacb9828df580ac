/* Config sections of the step driver (train/step.c): full checkpoints and the guardrails that act on a step. */
#include "train/schema.h"

#define N(a) (int)(sizeof(a) / sizeof((a)[0]))
#define BIG 1e308

static const lt_cfg_entry_t checkpoint_e[] = {
    {"checkpoint.every", LT_CFG_INT, "10", 0, BIG, NULL,
     "full checkpoint (policy, critic, optimizer, RNG, scheduler) every N learner steps (0: only at exit)"},
    {"checkpoint.keep", LT_CFG_INT, "3", 1, 1000, NULL, "full checkpoints kept"},
    {"checkpoint.publish_dtype", LT_CFG_ENUM, "\"fp32\"", LT_CFG_NORANGE, "fp32|bf16",
     "dtype of each published version's model.safetensors (or adapter_model.safetensors), what workers load: fp32 (the learner's own weights) or bf16 (for inference servers and remote workers; the fp32 weights stay beside it as master.safetensors)"},
    {"checkpoint.lora_publish", LT_CFG_ENUM, "\"adapter\"", LT_CFG_NORANGE, "adapter|merged",
     "with learner.lora: what a version holds; adapter: vN/adapter_model.safetensors and adapter_config.json in PEFT's layout (the base is published once, as v0), merged: the whole model with the adapter merged in, as without LoRA (docs/lora.md)"},
    {"checkpoint.publish_deltas", LT_CFG_BOOL, "true", LT_CFG_NORANGE, NULL,
     "write vN/delta.zst (version N against N-1) at every publish, which workers holding N-1 download instead of the whole file; false: full files only (as before deltas, for comparison)"},
    {"checkpoint.publish_dir", LT_CFG_PATH, "\"\"", LT_CFG_NORANGE, NULL,
     "a shared filesystem folder (NFS, Lustre) every published version is also copied to, as <dir>/<sha256>/, for workers that read versions from it (\"\": off)"},
};
const lt_cfg_schema_t lt_checkpoint_schema = {"checkpoint", "Checkpoints for --resume.", checkpoint_e, N(checkpoint_e)};

static const lt_cfg_entry_t guardrails_e[] = {
    {"guardrails.max_mismatch", LT_CFG_NUM, "0", 0, BIG, NULL,
     "train–rollout mismatch (mean |log π_old − log π_rollout|) above which staleness is tightened (0: off)"},
    {"guardrails.min_token_accept", LT_CFG_NUM, "0", 0, 1, NULL,
     "MIS token acceptance below which staleness is tightened and keep_routing turned on (0: off)"},
    {"guardrails.min_traj_accept", LT_CFG_NUM, "0", 0, 1, NULL,
     "MIS trajectory acceptance below which staleness is tightened (0: off)"},
    {"guardrails.min_entropy", LT_CFG_NUM, "0", 0, BIG, NULL,
     "policy entropy (nats) below which the actor learning rate is halved (0: off)"},
    {"guardrails.grad_spike", LT_CFG_NUM, "0", 0, BIG, NULL,
     "actor gradient norm above this multiple of its running mean: roll back to the last good checkpoint and skip the batch (0: off)"},
    {"guardrails.lr_floor", LT_CFG_NUM, "0.05", 0, 1, NULL,
     "the learning rate is never lowered below this fraction of learner.lr"},
};
const lt_cfg_schema_t lt_guardrails_schema = {
    "guardrails", "Limits that act: staleness, keep routing, learning rate, rollback.", guardrails_e, N(guardrails_e)};
