/* Config sections owned by train/ (train/schema.c). */
#ifndef LT_TRAIN_SCHEMA_H
#define LT_TRAIN_SCHEMA_H

#include "util/config.h"

extern const lt_cfg_schema_t lt_checkpoint_schema;
extern const lt_cfg_schema_t lt_guardrails_schema;

#endif
