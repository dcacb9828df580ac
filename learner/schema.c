/* The config sections of the model and the learner: model.*, learner.*, sft.*. */
#include "learner/schema.h"

#include <stdio.h>

#include "util/error.h"

#define N(a) (int)(sizeof(a) / sizeof((a)[0]))
#define BIG 1e308

static const lt_cfg_entry_t model_e[] = {
    {"model.path", LT_CFG_PATH, "\"\"", LT_CFG_NORANGE, NULL,
     "checkpoint directory (config.json + model.safetensors) to start from"},
    {"model.init", LT_CFG_PATH, "\"\"", LT_CFG_NORANGE, NULL,
     "model config.json to initialise randomly when model.path is empty"},
    {"model.tokenizer", LT_CFG_PATH, "\"\"", LT_CFG_NORANGE, NULL,
     "tokenizer.json path; empty: the model directory's, else the byte tokenizer"},
    {"model.critic_path", LT_CFG_PATH, "\"\"", LT_CFG_NORANGE, NULL,
     "critic checkpoint; empty: initialised from the policy"},
};
const lt_cfg_schema_t lt_model_schema = {"model", "Policy and critic checkpoints.", model_e, N(model_e)};

static const lt_cfg_entry_t learner_e[] = {
    {"learner.enabled", LT_CFG_BOOL, "true", LT_CFG_NORANGE, NULL,
     "train; false: only collect trajectories (the run ends when scheduler.max_tasks are done)"},
    {"learner.objective", LT_CFG_ENUM, "\"mispo\"", LT_CFG_NORANGE, "mispo|ppo|grpo|gspo|tis",
     "policy objective (docs/losses.md)"},
    {"learner.batch.trajectories", LT_CFG_INT, "64", 1, 1000000, NULL, "eligible trajectories per learner step"},
    {"learner.steps", LT_CFG_INT, "0", 0, BIG, NULL, "learner steps before the run ends (0: until tasks run out)"},
    {"learner.actor_minibatches", LT_CFG_INT, "4", 1, 100000, NULL, "actor mini-batches per step (one epoch)"},
    {"learner.critic_minibatches", LT_CFG_INT, "12", 1, 100000, NULL, "critic mini-batches per step"},
    {"learner.device", LT_CFG_ENUM, "\"auto\"", LT_CFG_NORANGE, "auto|cpu|cuda",
     "where the learner runs (auto: CUDA when this build has it and a GPU is present, unless learner.optimizer is muon or learner.lora is on; cuda: insist)"},
    {"learner.gpu.bf16", LT_CFG_BOOL, "false", LT_CFG_NORANGE, NULL,
     "CUDA learner: matrix products with bf16 operands and fp32 accumulation (faster, less exact; off: fp32, what the CPU reference matches)"},
    {"learner.gpu.recompute", LT_CFG_BOOL, "false", LT_CFG_NORANGE, NULL,
     "CUDA learner: keep one layer's activations and recompute each layer's forward in the backward (about a third more compute; long sequences of larger models fit one GPU)"},
    {"learner.threads", LT_CFG_INT, "0", 0, 1024, NULL,
     "CPU threads for the learner (0: all cores, or every CPU of learner.cpus)"},
    {"learner.cpus", LT_CFG_STR, "\"\"", LT_CFG_NORANGE, NULL,
     "CPUs the learner's threads run on, its BLAS's and its weight publishing included, as taskset -c takes them (\"0-3,8\"); disjoint from workers.cpus; empty: wherever the OS puts them (docs/operations.md, \"Pinning the learner and the workers\")"},
    {"learner.optimizer", LT_CFG_ENUM, "\"adamw\"", LT_CFG_NORANGE, "adamw|muon",
     "actor optimizer (muon: Newton–Schulz for 2-D weights, AdamW for the rest)"},
    {"learner.lr", LT_CFG_NUM, "2e-6", 0, BIG, NULL, "actor peak learning rate"},
    {"learner.warmup_steps", LT_CFG_INT, "20", 0, BIG, NULL,
     "actor linear warm-up, in learner steps (every mini-batch update of step k uses step k's rate)"},
    {"learner.weight_decay", LT_CFG_NUM, "0.1", 0, BIG, NULL, "decoupled weight decay"},
    {"learner.grad_clip", LT_CFG_NUM, "1.0", 0, BIG, NULL, "global gradient-norm clip (0: off)"},
    {"learner.lora.rank", LT_CFG_INT, "0", 0, 4096, NULL,
     "LoRA: rank r of the policy's adapters, trained on the frozen base (docs/lora.md); 0: full training"},
    {"learner.lora.alpha", LT_CFG_NUM, "32", 0, BIG, NULL,
     "LoRA: lora_alpha; the adapter's update B·A is scaled by alpha / r"},
    {"learner.lora.targets", LT_CFG_STR_LIST, "[\"all-linear\"]", LT_CFG_NORANGE, NULL,
     "LoRA: the modules adapted, in Hugging Face's names: q_proj k_proj v_proj o_proj gate_proj up_proj down_proj (a MoE layer's experts' included), or all-linear (all seven, as PEFT spells it; routers and the output head are never adapted)"},
    {"learner.lora.init_seed", LT_CFG_INT, "0", 0, BIG, NULL,
     "LoRA: seed of A's Kaiming-uniform initialisation (B starts at zero, so the first version is the base)"},
    {"learner.critic.lora.rank", LT_CFG_INT, "-1", -1, 4096, NULL,
     "LoRA: the critic's adapters (its score head trains fully beside them); -1: learner.lora's; 0: the critic trains fully"},
    {"learner.critic.lora.alpha", LT_CFG_NUM, "-1", -1, BIG, NULL,
     "LoRA: the critic's lora_alpha; -1: learner.lora.alpha"},
    {"learner.critic.lora.targets", LT_CFG_STR_LIST, "[]", LT_CFG_NORANGE, NULL,
     "LoRA: the critic's adapted modules; empty: learner.lora.targets"},
    {"learner.critic.lr", LT_CFG_NUM, "5e-6", 0, BIG, NULL, "critic peak learning rate"},
    {"learner.critic.warmup_steps", LT_CFG_INT, "50", 0, BIG, NULL, "critic linear warm-up, in learner steps"},
    {"learner.mispo.token_bounds", LT_CFG_NUM_LIST, "[0.5, 2.0]", 0, BIG, NULL,
     "MIS-PO token ratio bounds [ρ_min, ρ_max]"},
    {"learner.mispo.traj_bounds", LT_CFG_NUM_LIST, "[0.996, 1.001]", 0, BIG, NULL,
     "MIS-PO trajectory geometric-mean bounds"},
    {"learner.grpo.std_normalize", LT_CFG_BOOL, "false", LT_CFG_NORANGE, NULL,
     "GRPO: divide advantages by the group's reward std (off as in DeepSeek-V3.2 §3.1; docs/losses.md)"},
    {"learner.grpo.delta", LT_CFG_NUM, "0.1", 0, BIG, NULL,
     "GRPO off-policy sequence masking δ (DeepSeek-V3.2 eq. 9): a negative-advantage sequence whose mean log(π_rollout/πθ) exceeds δ is masked; 0: off"},
    {"learner.gspo.advantage", LT_CFG_ENUM, "\"critic\"", LT_CFG_NORANGE, "group|critic",
     "GSPO's advantages: critic (R̂ − V(s_t), token-mean like MIS-PO) or group (seed 004 §3.3.1 eq. 1: R − the group's mean reward, no critic, each sequence weighs 1/|B|; learner.grpo.std_normalize applies) (docs/losses.md)"},
    {"learner.grpo.epsilon", LT_CFG_NUM, "0.2", 0, 1, NULL, "GRPO ratio clip ε: [1−ε, 1+ε]"},
    {"learner.tis.cap", LT_CFG_NUM, "2", 1, BIG, NULL,
     "TIS: cap C of the train–rollout weight min(π_old/π_rollout, C)"},
    {"learner.kl_coef", LT_CFG_NUM, "0", 0, BIG, NULL,
     "unbiased KL to the reference policy (DeepSeek-V3.2 eq. 7); 0: off"},
    {"learner.keep_sampling_mask", LT_CFG_BOOL, "false", LT_CFG_NORANGE, NULL,
     "train under the rollout's top-p/top-k support"},
    {"learner.store_token_values", LT_CFG_BOOL, "true", LT_CFG_NORANGE, NULL,
     "store what each step computed for every token it trained (π_old/π_rollout ratio, log π_old, advantage, entropy, MIS-PO masks, the trajectory verdict) in the buffer's token_values table, for the web console's inspector (docs/ui.md); false: not stored"},
    {"learner.keep_routing", LT_CFG_BOOL, "false", LT_CFG_NORANGE, NULL,
     "replay the rollout's expert choices in the learner's forward"},
};
const lt_cfg_schema_t lt_learner_schema = {"learner", "The RL learner: objective, batches, optimizers.", learner_e,
                                           N(learner_e)};

static const lt_cfg_entry_t sft_e[] = {
    {"sft.enabled", LT_CFG_BOOL, "false", LT_CFG_NORANGE, NULL,
     "warm-start the policy with supervised fine-tuning before RL"},
    {"sft.data", LT_CFG_PATH, "\"\"", LT_CFG_NORANGE, NULL,
     "JSONL of {prompt, response}; empty: the environment's demonstration generator"},
    {"sft.steps", LT_CFG_INT, "100", 0, BIG, NULL, "SFT optimizer steps"},
    {"sft.batch", LT_CFG_INT, "16", 1, BIG, NULL, "sequences per SFT step"},
    {"sft.lr", LT_CFG_NUM, "1e-3", 0, BIG, NULL, "SFT peak learning rate"},
};
const lt_cfg_schema_t lt_sft_schema = {"sft", "Supervised warm start.", sft_e, N(sft_e)};

/* The names of a string list (at most 64). */
static int target_list(const lt_config_t *c, const char *key, const char **names, int *n) {
  *n = 0;
  for (const cJSON *e = lt_config_get(c, key)->child; e; e = e->next) {
    if (*n == 64) return lt_error_set(LT_ECONFIG, "%s: more than 64 names", key);
    names[(*n)++] = e->valuestring;
  }
  return 0;
}

int lt_learner_lora_cfg(const lt_config_t *c, int critic, lt_lora_cfg_t *out) {
  const char *names[64];
  int n, rc;
  *out = (lt_lora_cfg_t){.rank = (int)lt_config_int(c, "learner.lora.rank"),
                         .alpha = (float)lt_config_num(c, "learner.lora.alpha"),
                         .init_seed = (uint64_t)lt_config_int(c, "learner.lora.init_seed")};
  const char *tkey = "learner.lora.targets", *akey = "learner.lora.alpha";
  if (critic) {
    int r = (int)lt_config_int(c, "learner.critic.lora.rank");
    double a = lt_config_num(c, "learner.critic.lora.alpha");
    if (r >= 0) out->rank = r;
    if (a >= 0) out->alpha = (float)a, akey = "learner.critic.lora.alpha";
    if (cJSON_GetArraySize(lt_config_get(c, "learner.critic.lora.targets"))) tkey = "learner.critic.lora.targets";
  }
  if (out->rank == 0) return 0;
  if (!(out->alpha > 0))
    return lt_error_set(LT_ECONFIG, "%s: must be > 0 with a LoRA rank (the update is scaled by alpha / r)", akey);
  if ((rc = target_list(c, tkey, names, &n)) < 0) return rc;
  return lt_lora_targets_parse(names, n, tkey, &out->targets);
}

int lt_learner_config_check(const lt_config_t *c) {
  lt_lora_cfg_t l;
  int rc = lt_learner_lora_cfg(c, 0, &l);
  return rc < 0 ? rc : lt_learner_lora_cfg(c, 1, &l);
}
