/* `longtail config`: the resolved config of a job, or the config reference. */
#include <stdio.h>
#include <stdlib.h>

#include "cli/commands.h"
#include "util/buf.h"
#include "util/error.h"

int lt_cmd_config(int argc, char **argv) {
  lt_arg_t args[] = {
      {.name = "--set", .kind = LT_ARG_MULTI, .metavar = "PATH=VALUE", .help = "override a config key"},
      {.name = "--schema-md", .kind = LT_ARG_FLAG, .help = "print the config reference as Markdown (docs/config.md)"},
  };
  lt_cmd_args_t c = {.command = "config",
                     .usage = "[CONFIG] [--set PATH=VALUE ...] | --schema-md",
                     .summary =
                         "Prints the resolved config (defaults filled in, overrides applied) after validating "
                         "it, or the reference of every key.",
                     .args = args,
                     .nargs = 2,
                     .min_pos = 0,
                     .max_pos = 1};
  int rc = lt_args_parse(&c, argc, argv);
  if (rc) return rc == 1 ? 0 : rc;
  if (lt_args_flag(&c, "--schema-md")) {
    lt_buf_t b = {0};
    lt_config_doc_markdown(lt_all_schemas, lt_all_nschemas, &b);
    if (lt_buf_ok(&b) < 0) return lt_cli_fail("config", lt_error_set(LT_ENOMEM, "out of memory"));
    fwrite(b.data, 1, b.len, stdout);
    lt_buf_free(&b);
    return 0;
  }
  lt_config_t cfg;
  rc = lt_cli_load_config("config", c.npos ? c.pos[0] : NULL, lt_args_get(&c, "--set"), &cfg);
  if (rc) return rc;
  char *s = lt_config_dump(&cfg);
  lt_config_free(&cfg);
  if (!s) return lt_cli_fail("config", lt_error_set(LT_ENOMEM, "out of memory"));
  printf("%s\n", s);
  free(s);
  return 0;
}
