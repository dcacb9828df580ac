/* bin/longtail: git-style dispatch to subcommands. */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "learner/dist.h"
#include "util/config.h"
#include "util/error.h"
#include "util/log.h"

const lt_command_t lt_commands[] = {
    {"train", lt_cmd_train, "run the RL training daemon on a config"},
    {"worker", lt_cmd_worker, "run a rollout worker that connects to a daemon"},
    {"serve", lt_cmd_serve, "serve the builtin engine over an OpenAI-compatible HTTP API"},
    {"sft", lt_cmd_sft, "supervised fine-tuning (warm start) on demonstrations"},
    {"init", lt_cmd_init, "write a randomly initialised checkpoint from a model config"},
    {"lora", lt_cmd_lora, "merge a LoRA version's adapter into its base as a whole checkpoint"},
    {"stats", lt_cmd_stats, "summarise a run (live or finished)"},
    {"export", lt_cmd_export, "export trajectories as chat JSONL or token records"},
    {"plot", lt_cmd_plot, "plot metrics of one or more runs (PNG/SVG)"},
    {"replay", lt_cmd_replay, "recompute logprobs and MIS masks of recorded trajectories under a checkpoint"},
    {"retrain", lt_cmd_retrain,
     "train a run's learner steps again on the trajectories each consumed (bit-identical, or what-if)"},
    {"inspect", lt_cmd_inspect, "render one trajectory for a terminal"},
    {"compare", lt_cmd_compare, "compare the metrics of two runs"},
    {"ui", lt_cmd_ui, "serve a run's web console (overview, curves, trajectories)"},
    {"logprobs", lt_cmd_logprobs, "per-token logprobs, entropy and routing confidence of token sequences"},
    {"grad", lt_cmd_grad, "gradients of a policy loss on a batch"},
    {"generate", lt_cmd_generate, "sample completions with the builtin engine"},
    {"tokenize", lt_cmd_tokenize, "encode text to token ids or decode ids to text"},
    {"template", lt_cmd_template, "render conversations with a model's own chat template"},
    {"reward", lt_cmd_reward, "score responses with the configured reward functions"},
    {"sandbox", lt_cmd_sandbox, "run a command in the isolated sandbox"},
    {"swe", lt_cmd_swe, "validate a software-engineering task set: gold patches resolve, no patch does not"},
    {"keygen", lt_cmd_keygen, "make a CURVE key pair for the daemon–worker link"},
    {"config", lt_cmd_config, "print the resolved config, or the config reference"},
};
const int lt_ncommands = (int)(sizeof lt_commands / sizeof lt_commands[0]);

/* The commands whose processes are learner ranks under mpirun/srun
 * (docs/distributed.md); the others run alone wherever they are started. */
static int learner_ranks(const char *cmd) {
  return strcmp(cmd, "train") == 0 || strcmp(cmd, "grad") == 0 || strcmp(cmd, "retrain") == 0;
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: longtail [--version] [--help] [--log-level LEVEL] [--log-format text|json] COMMAND [ARGS]\n\n"
          "commands:\n");
  for (int i = 0; i < lt_ncommands; i++) fprintf(f, "  %-10s %s\n", lt_commands[i].name, lt_commands[i].summary);
  fprintf(f, "\n'longtail COMMAND --help' describes a command.\n");
}

int main(int argc, char **argv) {
  int i = 1;
  for (; i < argc && argv[i][0] == '-'; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--version") == 0 || strcmp(a, "-V") == 0) {
      lt_cli_print_version();
      return 0;
    }
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(stdout);
      return 0;
    }
    if ((strcmp(a, "--log-level") == 0 || strcmp(a, "--log-format") == 0) && i + 1 < argc) {
      const char *v = argv[++i];
      if (a[6] == 'l') {
        int l = lt_log_level_parse(v);
        if (l < 0) {
          fprintf(stderr, "longtail: --log-level: '%s' is not one of debug|info|warn|error|off\n", v);
          return LT_EXIT_USAGE;
        }
        lt_log_set_level((lt_log_level)l);
      } else if (strcmp(v, "json") == 0 || strcmp(v, "text") == 0) {
        lt_log_set_format(v[0] == 'j' ? LT_LOG_JSON : LT_LOG_TEXT);
      } else {
        fprintf(stderr, "longtail: --log-format: '%s' is not one of text|json\n", v);
        return LT_EXIT_USAGE;
      }
      continue;
    }
    fprintf(stderr, "longtail: unknown option '%s'\n", a);
    usage(stderr);
    return LT_EXIT_USAGE;
  }
  if (i >= argc) {
    usage(stderr);
    return LT_EXIT_USAGE;
  }
  const char *cmd = argv[i];
  for (int k = 0; k < lt_ncommands; k++)
    if (strcmp(lt_commands[k].name, cmd) == 0) {
      /* Under a launcher (mpirun, srun) this process is one learner rank. */
      int rc = learner_ranks(cmd) ? lt_dist_init() : 0;
      if (rc < 0) {
        fprintf(stderr, "longtail: %s\n", lt_error_msg());
        return lt_error_exit_code(rc);
      }
      rc = lt_commands[k].fn(argc - i, argv + i);
      lt_dist_finalize(rc);
      return rc;
    }
  const char *best = NULL;
  int bd = 99;
  for (int k = 0; k < lt_ncommands; k++) {
    int d = lt_edit_distance(lt_commands[k].name, cmd);
    if (d < bd) {
      bd = d;
      best = lt_commands[k].name;
    }
  }
  if (bd <= 2) fprintf(stderr, "longtail: unknown command '%s' (did you mean '%s'?)\n", cmd, best);
  else fprintf(stderr, "longtail: unknown command '%s'\n", cmd);
  usage(stderr);
  return LT_EXIT_USAGE;
}
