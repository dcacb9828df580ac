/* The training daemon (`longtail train`): one libuv loop that dispatches
 * tasks to workers over ZeroMQ, ingests trajectories into the SQLite buffer
 * through the writer thread, drives the trainer thread and publishes new
 * weights (docs/operations.md, docs/buffer.md). */
#ifndef LT_ORCHESTRATOR_DAEMON_H
#define LT_ORCHESTRATOR_DAEMON_H

#include <stdint.h>

#include "buffer/buffer.h"
#include "proto/proto.h"
#include "ui/ui.h"
#include "util/config.h"

typedef struct {
  lt_config_t *cfg;    /* validated job config (owned by the caller) */
  const char *run_dir; /* the run's directory (it exists; cli/cmd_train.c names it) */
  int resume;
  const char *self_exe; /* this binary, to spawn local workers */
  /* The rewards a domain can produce (rewards/ lt_reward_range): 1 with [*lo, *hi], 0 unbounded, < 0 an error.
   * Given by the caller so that the daemon does not reach into rewards/; NULL: every domain unbounded. */
  int (*reward_range)(const lt_config_t *cfg, const char *domain, double *lo, double *hi);
  lt_ui_tokenizer_fn ui_tokenizer; /* the console's (monitor.ui_port) token text; NULL: token ids only */
} lt_daemon_opts_t;

/* Runs the job to completion or a signal; returns the exit code. */
int lt_daemon_run(const lt_daemon_opts_t *o);

#endif
