/* `longtail lora merge VERSION_DIR --out DIR`: a LoRA version (an adapter in PEFT's layout over its base) as a whole
 * Hugging Face checkpoint, W + (alpha/r)·B·A, loadable wherever a full checkpoint is (docs/lora.md). */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "learner/lora.h"
#include "text/tokenizer.h"
#include "util/error.h"

static int lora_merge(int argc, char **argv) {
  lt_arg_t args[] = {
      {.name = "--out",
       .kind = LT_ARG_VALUE,
       .metavar = "DIR",
       .help = "checkpoint directory to write (made if missing)"},
  };
  lt_cmd_args_t c = {.command = "lora merge",
                     .usage = "VERSION_DIR --out DIR",
                     .summary =
                         "Writes config.json, generation_config.json and model.safetensors (fp32) of the "
                         "version's base with its adapter merged, W + (lora_alpha/r)·B·A, and its tokenizer "
                         "files.",
                     .details =
                         "VERSION_DIR holds adapter_config.json and adapter_model.safetensors (a version of a "
                         "run with learner.lora, or any PEFT LoRA adapter of a Qwen3 model); its base is its "
                         "own model.safetensors or the folder base_model_name_or_path names.",
                     .args = args,
                     .nargs = 1,
                     .min_pos = 1,
                     .max_pos = 1};
  int rc = lt_args_parse(&c, argc, argv);
  if (rc) return rc == 1 ? 0 : rc;
  const char *dir = c.pos[0], *out = lt_args_str(&c, "--out", NULL);
  if (!out) return lt_args_usage_error(&c, "--out is required");
  if (!lt_lora_is_dir(dir))
    return lt_cli_fail("lora merge", lt_error_set(LT_EINVAL, "%s: no adapter_config.json (not a LoRA version)", dir));
  lt_model_t *m = NULL, *merged = NULL;
  if ((rc = lt_model_load_master(dir, &m)) == 0 && (rc = lt_lora_merged(m, &merged)) == 0 &&
      (rc = lt_model_save(merged, out)) == 0)
    rc = lt_tokenizer_copy_files(dir, out);
  if (rc == 0)
    printf("{\"out\": \"%s\", \"parameters\": %zu, \"rank\": %d, \"lora_alpha\": %g, \"adapter_parameters\": %zu}\n",
           out, merged->nparams, m->lora->cfg.rank, (double)m->lora->cfg.alpha, m->lora->nparams);
  lt_model_free(merged);
  lt_model_free(m);
  return rc < 0 ? lt_cli_fail("lora merge", rc) : 0;
}

int lt_cmd_lora(int argc, char **argv) {
  if (argc >= 2 && !strcmp(argv[1], "merge")) return lora_merge(argc - 1, argv + 1);
  FILE *f = argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) ? stdout : stderr;
  fprintf(f,
          "usage: longtail lora merge VERSION_DIR --out DIR\n\n"
          "  merge   a LoRA version's base with its adapter merged, as a whole checkpoint\n");
  return f == stdout ? 0 : LT_EXIT_USAGE;
}
