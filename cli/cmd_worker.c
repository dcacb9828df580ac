/* `longtail worker`: a rollout worker that connects to a daemon. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/commands.h"
#include "rollout/worker.h"
#include "util/error.h"
#include "util/log.h"

int lt_cmd_worker(int argc, char **argv) {
  lt_arg_t args[] = {
      {.name = "--connect",
       .kind = LT_ARG_VALUE,
       .metavar = "ENDPOINT",
       .help = "the daemon's endpoint (tcp://host:port)"},
      {.name = "--slots", .kind = LT_ARG_VALUE, .metavar = "N", .help = "tasks run at once (default 4)"},
      {.name = "--backend",
       .kind = LT_ARG_VALUE,
       .metavar = "NAME",
       .help = "builtin | openai | scripted (default builtin)"},
      {.name = "--device",
       .kind = LT_ARG_VALUE,
       .metavar = "DEV",
       .help = "cpu | cuda for the builtin engine (default cpu)"},
      {.name = "--threads", .kind = LT_ARG_VALUE, .metavar = "N", .help = "compute threads (default 1)"},
      {.name = "--model", .kind = LT_ARG_VALUE, .metavar = "DIR", .help = "initial weights (default: the daemon's)"},
      {.name = "--name", .kind = LT_ARG_VALUE, .metavar = "NAME", .help = "stable worker name (default host-pid)"},
      {.name = "--spool",
       .kind = LT_ARG_VALUE,
       .metavar = "DIR",
       .help = "unacknowledged trajectories (default /tmp/longtail-spool-NAME)"},
      {.name = "--daemon-gone",
       .kind = LT_ARG_VALUE,
       .metavar = "SECONDS",
       .help = "exit after the daemon is gone this long (default 600)"},
      {.name = "--server-key",
       .kind = LT_ARG_VALUE,
       .metavar = "FILE",
       .help = "CURVE: the daemon's public key (its keygen .pub)"},
      {.name = "--key",
       .kind = LT_ARG_VALUE,
       .metavar = "PREFIX",
       .help = "CURVE: this worker's key pair, PREFIX.key and PREFIX.pub"},
      {.name = "--weights-dir",
       .kind = LT_ARG_VALUE,
       .metavar = "DIR",
       .help =
           "the daemon's checkpoint.publish_dir as mounted here (NFS, Lustre): versions are read from it (hash-checked) instead of downloaded"},
  };
  lt_cmd_args_t c = {
      .command = "worker",
      .usage =
          "--connect ENDPOINT [--slots N] [--backend builtin|openai|scripted] [--device cpu|cuda] [--server-key FILE --key PREFIX]",
      .summary =
          "Runs rollouts for a training daemon: receives tasks, runs the agent loop with its "
          "inference backend, environments and rewards, and returns trajectories, keeping each "
          "in its spool until the daemon acknowledges it.",
      .args = args,
      .nargs = (int)(sizeof args / sizeof args[0]),
      .min_pos = 0,
      .max_pos = 0};
  int rc = lt_args_parse(&c, argc, argv);
  if (rc) return rc == 1 ? 0 : rc;
  long long slots, threads;
  double gone;
  if ((rc = lt_args_long(&c, "--slots", 4, 1, 4096, &slots)) ||
      (rc = lt_args_long(&c, "--threads", 1, 0, 1024, &threads)) ||
      (rc = lt_args_double(&c, "--daemon-gone", 600, &gone)))
    return rc;
  const char *connect = lt_args_str(&c, "--connect", NULL);
  if (!connect) return lt_args_usage_error(&c, "--connect is required");
  const char *backend = lt_args_str(&c, "--backend", "builtin"), *device = lt_args_str(&c, "--device", "cpu");
  if (strcmp(backend, "builtin") && strcmp(backend, "openai") && strcmp(backend, "scripted"))
    return lt_args_usage_error(&c, "--backend: '%s' is not one of builtin|openai|scripted", backend);
  if (strcmp(device, "cpu") && strcmp(device, "cuda"))
    return lt_args_usage_error(&c, "--device: '%s' is not cpu|cuda", device);
  char name[256], spool[4096];
  char host[128] = "host";
  gethostname(host, sizeof host - 1);
  snprintf(name, sizeof name, "%s", lt_args_str(&c, "--name", ""));
  if (!name[0]) snprintf(name, sizeof name, "%s-%d", host, (int)getpid());
  snprintf(spool, sizeof spool, "%s", lt_args_str(&c, "--spool", ""));
  if (!spool[0]) snprintf(spool, sizeof spool, "/tmp/longtail-spool-%s", name);
  const char *server_key = lt_args_str(&c, "--server-key", NULL), *key = lt_args_str(&c, "--key", NULL);
  if (!server_key != !key) return lt_args_usage_error(&c, "--server-key and --key go together (CURVE)");
  lt_log_set_process(name);
  lt_worker_opts_t o = {.connect = connect,
                        .name = name,
                        .slots = (int)slots,
                        .backend = backend,
                        .device = device,
                        .threads = (int)threads,
                        .model = lt_args_str(&c, "--model", NULL),
                        .spool = spool,
                        .daemon_gone_s = gone,
                        .server_key = server_key,
                        .key = key,
                        .weights_dir = lt_args_str(&c, "--weights-dir", NULL),
                        .schemas = lt_all_schemas,
                        .nschemas = lt_all_nschemas};
  return lt_worker_run(&o);
}
