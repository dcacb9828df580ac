/* Config section owned by the environments. */
#ifndef LT_ENVS_SCHEMA_H
#define LT_ENVS_SCHEMA_H

#include "util/config.h"

extern const lt_cfg_schema_t lt_envs_schema;

#endif
