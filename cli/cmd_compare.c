/* `longtail compare RUN_A RUN_B [-o FILE.png|svg] [--json]`: the key metrics
 * of two runs side by side (whole-run mean and mean of the last 5 recorded
 * steps) and, with -o, the dashboard with both runs overlaid. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "util/error.h"

/* {mean, last-5 mean, count} of a metric; count 0 when the run has none. */
static void summary(lt_buffer_t *b, const char *name, double out[3]) {
  int64_t count, last;
  lt_buffer_metric_mean(b, name, LT_SPAN_ALL, 0, &out[0], &count);
  lt_buffer_metric_mean(b, name, LT_SPAN_LAST, 5, &out[1], &last);
  out[2] = (double)count;
}

int lt_cmd_compare(int argc, char **argv) {
  lt_arg_t args[] = {
      {.name = "-o",
       .kind = LT_ARG_VALUE,
       .metavar = "FILE",
       .help = "also draw the dashboard of both runs (.png or .svg)"},
      {.name = "--json", .kind = LT_ARG_FLAG, .help = "one JSON object instead of the table"},
      LT_CLI_CHECK_ARG,
  };
  lt_cmd_args_t c = {.command = "compare",
                     .usage = "RUN_A RUN_B [-o FILE.png|svg] [--json] [--check]",
                     .summary =
                         "Shows the key metrics of two runs side by side: the whole-run mean and the mean of "
                         "the last 5 recorded steps of each, and the first and last evaluation.",
                     .args = args,
                     .nargs = 3,
                     .min_pos = 2,
                     .max_pos = 2};
  int rc = lt_args_parse(&c, argc, argv);
  if (rc) return rc == 1 ? 0 : rc;
  lt_buffer_t *b[2] = {0};
  int check = lt_args_flag(&c, "--check");
  char names[2][128];
  for (int r = 0; r < 2 && !rc; r++) rc = lt_cli_open_run("compare", c.pos[r], check, &b[r], names[r], sizeof names[r]);
  if (rc) {
    if (b[0]) lt_buffer_close(b[0]);
    return rc;
  }
  if (!strcmp(names[0], names[1]))
    for (int r = 0; r < 2; r++) snprintf(names[r], sizeof names[r], "%s", c.pos[r]);
  int json = lt_args_flag(&c, "--json");
  cJSON *o = cJSON_CreateObject(), *runs = cJSON_AddArrayToObject(o, "runs"),
        *ms = cJSON_AddObjectToObject(o, "metrics");
  for (int r = 0; r < 2; r++) cJSON_AddItemToArray(runs, cJSON_CreateString(names[r]));
  if (!json)
    printf("%-34s %-27.27s %-27.27s\n%-34s %12s %12s   %12s %12s\n", "", names[0], names[1], "metric", "mean", "last 5",
           "mean", "last 5");
  for (int p = 0; p < lt_cli_ndashboard; p++) {
    char tmp[256];
    snprintf(tmp, sizeof tmp, "%s", lt_cli_dashboard[p]);
    for (char *save, *m = strtok_r(tmp, ",", &save); m; m = strtok_r(NULL, ",", &save)) {
      double s[2][3];
      for (int r = 0; r < 2; r++) summary(b[r], m, s[r]);
      cJSON *row = cJSON_AddArrayToObject(ms, m);
      for (int r = 0; r < 2; r++) {
        cJSON *e = cJSON_CreateObject();
        if (s[r][2] > 0) {
          cJSON_AddNumberToObject(e, "mean", s[r][0]);
          cJSON_AddNumberToObject(e, "last5", s[r][1]);
        }
        cJSON_AddNumberToObject(e, "points", s[r][2]);
        cJSON_AddItemToArray(row, e);
      }
      if (json) continue;
      printf("%-34s", m);
      for (int r = 0; r < 2; r++) {
        if (s[r][2] > 0) printf(" %12.5g %12.5g%s", s[r][0], s[r][1], r ? "" : "  ");
        else printf(" %12s %12s%s", "-", "-", r ? "" : "  ");
      }
      putchar('\n');
    }
  }
  for (int r = 0; r < 2; r++) rc = lt_cli_close_run("compare", b[r], rc);
  if (rc) {
    cJSON_Delete(o);
    return rc;
  }
  if (json) {
    char *s = cJSON_PrintUnformatted(o);
    printf("%s\n", s ? s : "{}");
    free(s);
  }
  cJSON_Delete(o);
  const char *out = lt_args_str(&c, "-o", NULL);
  if (!out) return 0;
  char title[300];
  snprintf(title, sizeof title, "%s vs %s", names[0], names[1]);
  return lt_cli_plot("compare", c.pos, 2, lt_cli_dashboard, lt_cli_ndashboard, title, out, 0, check);
}
