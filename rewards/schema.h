/* Config section owned by the reward layer. */
#ifndef LT_REWARDS_SCHEMA_H
#define LT_REWARDS_SCHEMA_H

#include "util/config.h"

extern const lt_cfg_schema_t lt_rewards_schema;

#endif
