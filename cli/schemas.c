/* The config schema is the union of the layers' fragments. */
#include <stdio.h>

#include "cli/commands.h"
#include "rewards/reward.h"
#include "envs/schema.h"
#include "learner/schema.h"
#include "orchestrator/schema.h"
#include "rewards/schema.h"
#include "rollout/schema.h"
#include "sandbox/schema.h"
#include "train/schema.h"
#include "util/cpus.h"
#include "util/error.h"

const lt_cfg_schema_t *const lt_all_schemas[] = {
    &lt_run_schema,     &lt_model_schema,      &lt_learner_schema, &lt_sft_schema,     &lt_scheduler_schema,
    &lt_workers_schema, &lt_transport_schema,  &lt_rollout_schema, &lt_envs_schema,    &lt_rewards_schema,
    &lt_sandbox_schema, &lt_checkpoint_schema, &lt_eval_schema,    &lt_monitor_schema, &lt_guardrails_schema,
};
const int lt_all_nschemas = (int)(sizeof lt_all_schemas / sizeof lt_all_schemas[0]);

int lt_cli_load_config(const char *command, const char *path, const lt_arg_t *sets, lt_config_t *cfg) {
  int rc =
      lt_config_load(cfg, path, sets ? sets->values : NULL, sets ? sets->nvalues : 0, lt_all_schemas, lt_all_nschemas);
  /* The learner's and the local workers' CPUs: online, and apart. */
  static const char *const cpu_keys[] = {"learner.cpus", "workers.cpus"};
  if (rc == 0 && ((rc = lt_reward_ranges_check(cfg)) < 0 || (rc = lt_learner_config_check(cfg)) < 0 ||
                  (rc = lt_cpus_config_check(cfg, cpu_keys, 2)) < 0))
    lt_config_free(cfg);
  if (rc == 0) return 0;
  if (rc == LT_ECONFIG)
    fprintf(stderr, "longtail %s: config error: %s%s%s%s\n", command, lt_error_msg(), path ? " (in " : "",
            path ? path : "", path ? ")" : "");
  else if (rc == LT_EFORMAT) fprintf(stderr, "longtail %s: config error: %s\n", command, lt_error_msg());
  else fprintf(stderr, "longtail %s: cannot load config: %s\n", command, lt_error_msg());
  return lt_error_exit_code(rc);
}
