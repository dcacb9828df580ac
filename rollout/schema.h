/* Config sections owned by the rollout worker. */
#ifndef LT_ROLLOUT_SCHEMA_H
#define LT_ROLLOUT_SCHEMA_H

#include "util/config.h"

extern const lt_cfg_schema_t lt_rollout_schema;
extern const lt_cfg_schema_t lt_workers_schema;

#endif
