/* `longtail retrain RUN --out DIR [--set PATH=VALUE ...] [--steps A..B]`: a run's learner steps trained again
 * offline (train/retrain.c), each checked bit for bit against the run's published version, or, with --set, a
 * what-if run folder trained on the same batches. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "learner/dist.h"
#include "rollout/evaluate.h"
#include "train/train.h"
#include "util/error.h"
#include "util/time.h"

static void on_step(void *ud, const lt_train_result_t *r, int same) {
  (void)ud;
  printf("step %-5lld v%-5lld %s  %6.2f s  %s\n", (long long)r->step, (long long)r->version, r->sha, r->step_s,
         same > 0    ? "identical"
         : same == 0 ? "DIFFERS"
                     : "what-if");
  fflush(stdout);
}

/* A what-if's held-out accuracy: the run's evaluation round on the builtin engine, as many episodes at once as a
 * local worker of the run ran. */
static int evaluate(void *ud, const lt_config_t *cfg, const char *model_dir, int64_t version, double *accuracy) {
  (void)ud;
  lt_eval_opts_t eo = {
      .cfg = cfg, .model_dir = model_dir, .version = version, .slots = (int)lt_config_int(cfg, "workers.slots")};
  int correct, n;
  int rc = lt_rollout_evaluate(&eo, &correct, &n);
  if (rc < 0) return rc;
  *accuracy = n ? (double)correct / n : 0;
  printf("eval v%-5lld held-out pass@1 %.1f%% (%d/%d)\n", (long long)version, 100 * *accuracy, correct, n);
  fflush(stdout);
  return 0;
}

/* "A..B", "A.." or "..B" into *a, *b (0: open). */
static int parse_steps(const char *s, long long *a, long long *b) {
  const char *dots = strstr(s, "..");
  char *end;
  *a = *b = 0;
  if (!dots) return -1;
  if (dots > s && ((*a = strtoll(s, &end, 10)) < 1 || end != dots)) return -1;
  if (dots[2] && ((*b = strtoll(dots + 2, &end, 10)) < 1 || *end)) return -1;
  return *b && *a > *b ? -1 : 0;
}

int lt_cmd_retrain(int argc, char **argv) {
  lt_arg_t args[] = {
      {.name = "--out",
       .kind = LT_ARG_VALUE,
       .metavar = "DIR",
       .help =
           "the new run folder (must not hold a run): every step's version in DIR/checkpoints/vN, metrics in DIR/buffer.db"},
      {.name = "--set",
       .kind = LT_ARG_MULTI,
       .metavar = "PATH=VALUE",
       .help =
           "a what-if: override a key of the run's config (learner.objective, learner.lr, learner.kl_coef, the MIS bounds, ...); nothing is then compared"},
      {.name = "--steps",
       .kind = LT_ARG_VALUE,
       .metavar = "A..B",
       .help = "write steps A to B only (A.., ..B; the steps before A are trained too, to reach A's weights)"},
  };
  lt_cmd_args_t c = {
      .command = "retrain",
      .usage = "RUN --out DIR [--set PATH=VALUE ...] [--steps A..B]",
      .summary =
          "Trains a run's learner steps again, offline, each on exactly the trajectories the "
          "run's buffer says it consumed, from the run's starting policy, under its config, KL "
          "reference and seeds. Without --set every step's weights are compared with the run's "
          "published version (SHA-256): it stops at the first step that differs, naming it and "
          "its first differing tensor (exit 1). With --set the same batches train under other "
          "choices, into a run folder stats, plot and compare read, its versions evaluated on the run's held-out "
          "prompts with the builtin engine where the run evaluated its own (docs/replay.md).",
      .args = args,
      .nargs = 3,
      .min_pos = 1,
      .max_pos = 1};
  int rc = lt_args_parse(&c, argc, argv);
  if (rc) return rc == 1 ? 0 : rc;
  const char *out = lt_args_str(&c, "--out", NULL), *steps = lt_args_str(&c, "--steps", NULL);
  if (!out) return lt_args_usage_error(&c, "--out DIR is required");
  long long a = 0, b = 0;
  if (steps && parse_steps(steps, &a, &b) < 0)
    return lt_args_usage_error(&c, "--steps: expected A..B with 1 <= A <= B, got '%s'", steps);
  const lt_arg_t *sets = lt_args_get(&c, "--set");
  lt_retrain_opts_t o = {.run = c.pos[0],
                         .out = out,
                         .sets = sets->values,
                         .nsets = sets->nvalues,
                         .first = a,
                         .last = b,
                         .schemas = lt_all_schemas,
                         .nschemas = lt_all_nschemas,
                         .step = on_step,
                         .eval = sets->nvalues > 0 ? evaluate : NULL}; /* identical weights score as the run's did */
  if (lt_dist_rank() > 0) return (rc = lt_retrain_follow(&o)) < 0 ? lt_cli_fail("retrain", rc) : 0;
  lt_retrain_result_t res;
  double t0 = lt_time_mono_s();
  if ((rc = lt_retrain(&o, &res)) < 0) return lt_cli_fail("retrain", rc);
  double wall = lt_time_mono_s() - t0;
  cJSON *extra = cJSON_CreateObject(), *j = cJSON_AddObjectToObject(extra, "retrain");
  cJSON_AddStringToObject(j, "from", c.pos[0]);
  cJSON_AddBoolToObject(j, "what_if", o.nsets > 0);
  cJSON_AddNumberToObject(j, "steps", (double)res.steps);
  cJSON_AddNumberToObject(j, "learner_s", res.learner_s);
  cJSON_AddNumberToObject(j, "run_learner_s", res.run_learner_s);
  if (o.nsets == 0) {
    cJSON_AddBoolToObject(j, "identical", res.differs == 0);
    if (res.differs) {
      cJSON_AddNumberToObject(j, "differs_at_step", (double)res.differs);
      cJSON_AddStringToObject(j, "tensor", res.tensor);
    }
  }
  if (res.differs)
    printf("\nstep %lld differs from the run's version: %s here, %s in the run; %s%s\n", (long long)res.differs,
           res.sha, res.run_sha,
           res.tensor[0] ? "first differing tensor " : "the run no longer keeps that version to name the tensor",
           res.tensor);
  else if (o.nsets == 0) printf("\n%lld steps bit-identical to %s\n", (long long)res.steps, c.pos[0]);
  printf("learner time %.2f s here, %.2f s in the run for the same steps\n", res.learner_s, res.run_learner_s);
  lt_cli_summarize("retrain", out, wall, 0, extra);
  return res.differs ? LT_EXIT_FAIL : 0;
}
