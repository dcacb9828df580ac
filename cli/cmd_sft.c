/* `longtail sft CONFIG --out DIR`: the supervised warm start on its own. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "envs/env.h"
#include "train/train.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/json.h"

int lt_cmd_sft(int argc, char **argv) {
  lt_arg_t args[] = {
      {.name = "--out",
       .kind = LT_ARG_VALUE,
       .metavar = "DIR",
       .help = "checkpoint directory to write the tuned policy to"},
      {.name = "--metrics", .kind = LT_ARG_VALUE, .metavar = "FILE", .help = "append sft/loss lines (JSON) to FILE"},
      {.name = "--set", .kind = LT_ARG_MULTI, .metavar = "PATH=VALUE", .help = "override a config key"},
  };
  lt_cmd_args_t c = {.command = "sft",
                     .usage = "CONFIG --out DIR [--metrics FILE] [--set PATH=VALUE ...]",
                     .summary =
                         "Supervised fine-tuning of the config's policy (model.path, or model.init drawn with "
                         "run.seed) on sft.data (JSONL of {\"prompt\", \"response\"}) or, when that is empty, on "
                         "the environments' demonstrations, rendered in the chat format the workers use. "
                         "Writes a checkpoint that model.path can point at.",
                     .args = args,
                     .nargs = 3,
                     .min_pos = 1,
                     .max_pos = 1};
  int rc = lt_args_parse(&c, argc, argv);
  if (rc) return rc == 1 ? 0 : rc;
  const char *out = lt_args_str(&c, "--out", NULL), *mpath = lt_args_str(&c, "--metrics", NULL);
  if (!out) return lt_args_usage_error(&c, "--out is required");
  lt_config_t cfg;
  if ((rc = lt_cli_load_config("sft", c.pos[0], lt_args_get(&c, "--set"), &cfg))) return rc;
  lt_envs_t *envs = NULL;
  FILE *mf = NULL;
  char src[4096];
  double loss = 0;
  if ((rc = lt_fs_mkdirs(out, 0755)) == 0 && (rc = lt_envs_create(&cfg, NULL, &envs)) == 0 &&
      (rc = lt_policy_source(&cfg, out, src, sizeof src)) == 0) {
    if (mpath && !(mf = fopen(mpath, "a"))) rc = lt_error_set(LT_EIO, "--metrics: cannot open %s", mpath);
    lt_sft_opts_t o = {.cfg = &cfg, .envs = envs, .in_dir = src, .out_dir = out, .metrics = mf, .progress = 1};
    if (rc == 0) rc = lt_sft_run(&o, &loss);
  }
  if (mf) fclose(mf);
  lt_envs_free(envs);
  long long steps = lt_config_int(&cfg, "sft.steps");
  lt_config_free(&cfg);
  if (rc < 0) return lt_cli_fail("sft", rc);
  lt_buf_t b = {0};
  lt_buf_printf(&b, "{\"out\": ");
  lt_json_quote(&b, out); /* a path may hold quotes or backslashes */
  lt_buf_printf(&b, ", \"steps\": %lld, \"final_loss\": %.6f}", steps, loss);
  char *line = lt_buf_take(&b);
  printf("%s\n", line ? line : "{}");
  free(line);
  return 0;
}
