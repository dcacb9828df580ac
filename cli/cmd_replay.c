/* `longtail replay RUN [--model CKPT] [--step N] [--token-bounds a,b] [--traj-bounds c,d] [--json]
 * [--fill-token-values]`. */
#include <stdio.h>
#include <stdlib.h>

#include "cli/commands.h"
#include "train/train.h"
#include "util/error.h"

static double num(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

static void row(const char *label, const char *key, const cJSON *rec, const char *lkey, const cJSON *logged,
                const cJSON *wi) {
  printf("%-26s %14.6g %14.6g", label, num(rec, key), num(logged, lkey));
  if (wi) printf(" %14.6g", num(wi, key));
  putchar('\n');
}

int lt_cmd_replay(int argc, char **argv) {
  lt_arg_t args[] = {
      {.name = "--model",
       .kind = LT_ARG_VALUE,
       .metavar = "CKPT",
       .help =
           "policy weights or a full checkpoint (default: RUN/checkpoints/v<N-1>, the weights step N started from)"},
      {.name = "--step",
       .kind = LT_ARG_VALUE,
       .metavar = "N",
       .help = "learner step whose batch is replayed (default: the last)"},
      {.name = "--token-bounds", .kind = LT_ARG_VALUE, .metavar = "LO,HI", .help = "what-if MIS token-ratio bounds"},
      {.name = "--traj-bounds", .kind = LT_ARG_VALUE, .metavar = "LO,HI", .help = "what-if MIS trajectory bounds"},
      {.name = "--json", .kind = LT_ARG_FLAG, .help = "one JSON object instead of the table"},
      {.name = "--fill-token-values",
       .kind = LT_ARG_FLAG,
       .help =
           "store the learner's per-token values, recomputed, for every step (or --step N) that stored none, for the web console's inspector (docs/ui.md); writes RUN/buffer.db"},
      LT_CLI_CHECK_ARG,
  };
  lt_cmd_args_t c = {
      .command = "replay",
      .usage =
          "RUN [--model CKPT] [--step N] [--token-bounds LO,HI] [--traj-bounds LO,HI] [--json] [--check] "
          "[--fill-token-values]",
      .summary =
          "Recomputes the policy's logprobs on the trajectories a learner step trained on: "
          "train-rollout mismatch, what the MIS masks kept, the loss the step started from "
          "(needs a full checkpoint for the critic), next to what the learner logged, and what "
          "other bounds would have kept.",
      .args = args,
      .nargs = 7,
      .min_pos = 1,
      .max_pos = 1};
  int rc = lt_args_parse(&c, argc, argv);
  if (rc) return rc == 1 ? 0 : rc;
  long long step;
  double tb[2], jb[2];
  int tset, jset;
  if ((rc = lt_args_long(&c, "--step", 0, 1, 1LL << 50, &step)) ||
      (rc = lt_args_bounds(&c, "--token-bounds", tb, &tset)) || (rc = lt_args_bounds(&c, "--traj-bounds", jb, &jset)))
    return rc;
  lt_replay_opts_t o = {.run = c.pos[0],
                        .model = lt_args_str(&c, "--model", NULL),
                        .step = step,
                        .token_bounds = tset ? tb : NULL,
                        .traj_bounds = jset ? jb : NULL,
                        .check = lt_args_flag(&c, "--check"),
                        .schemas = lt_all_schemas,
                        .nschemas = lt_all_nschemas};
  cJSON *r;
  int fill = lt_args_flag(&c, "--fill-token-values");
  if (fill && (tset || jset))
    return lt_args_usage_error(&c, "--fill-token-values stores the run's own values: no what-if bounds");
  if (fill && o.model && !step)
    return lt_args_usage_error(&c, "--fill-token-values --model needs --step: the weights one step started from");
  if ((rc = (fill ? lt_replay_fill : lt_replay)(&o, &r)) < 0) return lt_cli_fail("replay", rc);
  if (lt_args_flag(&c, "--json")) {
    char *s = cJSON_PrintUnformatted(r);
    printf("%s\n", s ? s : "{}");
    free(s);
  } else if (fill) {
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(r, "filled"))
        printf("step %.0f: %.0f trajectories recomputed with %s%s\n", num(e, "step"), num(e, "trajectories"),
               cJSON_GetObjectItem(e, "model")->valuestring,
               cJSON_IsTrue(cJSON_GetObjectItem(e, "advantages")) ? "" : " (no critic there: no advantages)");
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(r, "skipped"))
        printf("step %.0f: skipped: %s\n", num(e, "step"), cJSON_GetObjectItem(e, "why")->valuestring);
  } else {
    const cJSON *rec = cJSON_GetObjectItem(r, "recomputed"), *lg = cJSON_GetObjectItem(r, "logged"),
                *wi = cJSON_GetObjectItem(r, "what_if");
    printf("step %.0f (%s): %.0f trajectories, %.0f tokens, under %s\n", num(r, "step"),
           cJSON_GetObjectItem(r, "objective")->valuestring, num(r, "trajectories"), num(r, "tokens"),
           cJSON_GetObjectItem(r, "model")->valuestring);
    printf("%-26s %14s %14s%s\n", "", "recomputed", "logged", wi ? "        what-if" : "");
    row("token acceptance", "token_accept", rec, "mis/token_accept", lg, wi);
    row("trajectory acceptance", "traj_accept", rec, "mis/traj_accept", lg, wi);
    row("kept fraction", "kept_fraction", rec, "mis/kept_fraction", lg, wi);
    row("mismatch |log ratio|", "mismatch_abs_log_ratio", rec, "mismatch/abs_log_ratio", lg, wi);
    row("mismatch KL", "mismatch_kl", rec, "mismatch/kl", lg, wi);
    row("actor loss (pre-update)", "actor_loss", rec, "actor/loss", lg, wi);
    if (cJSON_IsNull(cJSON_GetObjectItem(rec, "actor_loss")))
      printf("(no critic in %s: pass a full checkpoint for the loss)\n", cJSON_GetObjectItem(r, "model")->valuestring);
  }
  cJSON_Delete(r);
  return 0;
}
