/* `longtail train CONFIG`: the RL training daemon. */
#include <stdio.h>

#include "cli/commands.h"
#include "orchestrator/daemon.h"
#include "util/error.h"
#include "util/fs.h"

int lt_cmd_train(int argc, char **argv) {
  lt_arg_t args[] = {
      {.name = "--run-dir", .kind = LT_ARG_VALUE, .metavar = "DIR", .help = "where the run lives (default: run.root/<name>, and runs/latest)"},
      {.name = "--resume", .kind = LT_ARG_FLAG, .help = "continue the run in --run-dir from its last checkpoint"},
      {.name = "--set", .kind = LT_ARG_MULTI, .metavar = "PATH=VALUE", .help = "override a config key"},
  };
  lt_cmd_args_t c = {.command = "train",
                     .usage = "CONFIG [--run-dir DIR] [--resume] [--set PATH=VALUE ...]",
                     .summary = "Runs the training daemon: dispatches rollouts to workers (it starts "
                                "workers.spawn_local of them itself), buffers trajectories in RUN_DIR/buffer.db and "
                                "trains the policy. SIGINT/SIGTERM stop it cleanly; a second signal exits at once.",
                     .args = args,
                     .nargs = 3,
                     .min_pos = 1,
                     .max_pos = 1};
  int rc = lt_args_parse(&c, argc, argv);
  if (rc) return rc == 1 ? 0 : rc;
  const char *run_dir = lt_args_str(&c, "--run-dir", NULL);
  if (lt_args_flag(&c, "--resume") && !run_dir) return lt_args_usage_error(&c, "--resume needs --run-dir");
  lt_config_t cfg;
  if ((rc = lt_cli_load_config("train", c.pos[0], lt_args_get(&c, "--set"), &cfg))) return rc;
  char exe[4096];
  if ((rc = lt_fs_self_exe(exe, sizeof exe)) < 0) {
    lt_config_free(&cfg);
    return lt_cli_fail("train", rc);
  }
  lt_daemon_opts_t o = {.cfg = &cfg, .config_path = c.pos[0], .run_dir = run_dir, .resume = lt_args_flag(&c, "--resume"),
                        .self_exe = exe};
  int code = lt_daemon_run(&o);
  lt_config_free(&cfg);
  return code;
}
