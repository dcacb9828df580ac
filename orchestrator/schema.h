/* Config sections owned by the daemon (orchestrator/schema.c). */
#ifndef LT_ORCHESTRATOR_SCHEMA_H
#define LT_ORCHESTRATOR_SCHEMA_H

#include "util/config.h"

extern const lt_cfg_schema_t lt_run_schema;
extern const lt_cfg_schema_t lt_transport_schema;
extern const lt_cfg_schema_t lt_scheduler_schema;
extern const lt_cfg_schema_t lt_eval_schema;
extern const lt_cfg_schema_t lt_monitor_schema;

#endif
