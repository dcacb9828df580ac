/* Config section owned by the sandbox. */
#ifndef LT_SANDBOX_SCHEMA_H
#define LT_SANDBOX_SCHEMA_H

#include "util/config.h"

extern const lt_cfg_schema_t lt_sandbox_schema;

#endif
