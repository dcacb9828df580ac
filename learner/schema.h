/* Config sections owned by the learner. */
#ifndef LT_LEARNER_SCHEMA_H
#define LT_LEARNER_SCHEMA_H

#include "learner/lora.h"
#include "util/config.h"

extern const lt_cfg_schema_t lt_model_schema;
extern const lt_cfg_schema_t lt_learner_schema;
extern const lt_cfg_schema_t lt_sft_schema;

/* The adapters learner.lora (critic 0) or learner.critic.lora (critic 1) ask for: rank 0 is full training.
 * LT_ECONFIG naming the key: an unknown target module, a zero alpha. */
int lt_learner_lora_cfg(const lt_config_t *cfg, int critic, lt_lora_cfg_t *out);
/* What every command that loads a job config checks of the learner's sections (lt_learner_lora_cfg of both). */
int lt_learner_config_check(const lt_config_t *cfg);

#endif
