/* Config sections owned by the learner. */
#ifndef LT_LEARNER_SCHEMA_H
#define LT_LEARNER_SCHEMA_H

#include "util/config.h"

extern const lt_cfg_schema_t lt_model_schema;
extern const lt_cfg_schema_t lt_learner_schema;
extern const lt_cfg_schema_t lt_sft_schema;

#endif
