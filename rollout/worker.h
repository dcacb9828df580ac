/* The rollout worker process (docs/operations.md): a DEALER that says HELLO,
 * runs up to `slots` tasks at once, returns trajectories, and keeps each one
 * in a spool directory until the daemon's ACK — so neither a worker restart
 * nor a daemon restart loses rollout work. */
#ifndef LT_ROLLOUT_WORKER_H
#define LT_ROLLOUT_WORKER_H

#include "util/config.h"

typedef struct {
  const char *connect; /* daemon endpoint */
  const char *name;    /* stable name (routing id and spool) */
  int slots;
  const char *backend; /* builtin | openai | scripted */
  const char *device;
  int threads;
  const char *model;       /* weights to start from; default: the daemon's (WELCOME) */
  const char *spool;       /* directory for unacknowledged trajectories */
  double daemon_gone_s;    /* exit after the daemon has been unreachable this long */
  const char *server_key;  /* CURVE: the daemon's public key file (NULL: plain TCP) */
  const char *key;         /* CURVE: this worker's key pair, PREFIX.key and PREFIX.pub */
  const char *weights_dir; /* checkpoint.publish_dir as this machine mounts it: versions read from there, or NULL */
  /* the config schema, to validate the settings the daemon sends */
  const lt_cfg_schema_t *const *schemas;
  int nschemas;
} lt_worker_opts_t;

/* Runs until BYE, a signal, or the daemon being gone too long; returns the
 * process exit code. */
int lt_worker_run(const lt_worker_opts_t *o);

#endif
