/* `longtail plot RUN... --metric NAME ... | --dashboard -o FILE.png|svg`. */
#include <stdio.h>

#include "cli/commands.h"
#include "util/error.h"

int lt_cmd_plot(int argc, char **argv) {
  lt_arg_t args[] = {
      {.name = "--metric",
       .kind = LT_ARG_MULTI,
       .metavar = "NAME",
       .help =
           "a panel: metric names or GLOB patterns, comma-separated curves drawn together (e.g. reward/mean or 'mis/*')"},
      {.name = "--dashboard",
       .kind = LT_ARG_FLAG,
       .help =
           "a grid of the key metrics (reward, accuracy, acceptance, mismatch, routing confidence, staleness, throughput, gradient norm, entropy)"},
      {.name = "-o", .kind = LT_ARG_VALUE, .metavar = "FILE", .help = "output image, .png or .svg"},
      {.name = "--title",
       .kind = LT_ARG_VALUE,
       .metavar = "TEXT",
       .help = "title over the panels (default: the runs' names)"},
      LT_CLI_CHECK_ARG,
  };
  lt_cmd_args_t c = {.command = "plot",
                     .usage = "RUN... (--metric NAME ... | --dashboard) -o FILE.png|svg [--check]",
                     .summary =
                         "Plots metrics of one or more runs (directories or buffer.db files, live or finished) "
                         "through gnuplot; with several runs the curves are overlaid.",
                     .args = args,
                     .nargs = 5,
                     .min_pos = 1,
                     .max_pos = -1};
  int rc = lt_args_parse(&c, argc, argv);
  if (rc) return rc == 1 ? 0 : rc;
  lt_arg_t *m = lt_args_get(&c, "--metric");
  int dash = lt_args_flag(&c, "--dashboard");
  if (!dash && m->nvalues == 0) return lt_args_usage_error(&c, "give --metric NAME or --dashboard");
  if (dash && m->nvalues) return lt_args_usage_error(&c, "--metric and --dashboard do not go together");
  const char *out = lt_args_str(&c, "-o", NULL);
  if (!out) return lt_args_usage_error(&c, "-o FILE.png|svg is required");
  char title[1024] = "";
  size_t len = 0;
  for (int i = 0; i < c.npos && len < sizeof title; i++)
    len += (size_t)snprintf(title + len, sizeof title - len, "%s%s", i ? " vs " : "", c.pos[i]);
  return lt_cli_plot("plot", c.pos, c.npos, dash ? lt_cli_dashboard : m->values, dash ? lt_cli_ndashboard : m->nvalues,
                     lt_args_str(&c, "--title", title), out, !dash, lt_args_flag(&c, "--check"));
}
