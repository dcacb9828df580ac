/* `longtail init`: a randomly initialised checkpoint from a model config. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "learner/model.h"
#include "text/tokenizer.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/json.h"

/* DIR may be new, but its folder must exist (as for keygen's PREFIX): a mistyped path is a file-system error
 * (exit 3), not a tree of folders made where nobody looks. */
static int parent_exists(const char *out) {
  char parent[4096];
  size_t n = strlen(out);
  if (n >= sizeof parent) return lt_error_set(LT_EINVAL, "--out: path too long");
  memcpy(parent, out, n + 1);
  while (n > 1 && parent[n - 1] == '/') parent[--n] = 0;
  char *slash = strrchr(parent, '/');
  if (!slash) return 0;          /* in the working directory */
  if (slash == parent) return 0; /* under / */
  *slash = 0;
  if (!lt_fs_is_dir(parent)) return lt_error_set(LT_EIO, "cannot create %s: its folder %s does not exist", out, parent);
  return 0;
}

int lt_cmd_init(int argc, char **argv) {
  lt_arg_t args[] = {
      {.name = "--config",
       .kind = LT_ARG_VALUE,
       .metavar = "MODEL_CONFIG.json",
       .help = "a Hugging Face config.json (qwen3 or qwen3_moe)"},
      {.name = "--out", .kind = LT_ARG_VALUE, .metavar = "DIR", .help = "checkpoint directory to write"},
      {.name = "--seed", .kind = LT_ARG_VALUE, .metavar = "N", .help = "random seed (default 1)"},
      {.name = "--critic", .kind = LT_ARG_FLAG, .help = "write a value model (score head) instead of a policy"},
      {.name = "--byte-tokenizer",
       .kind = LT_ARG_FLAG,
       .help =
           "also write the byte tokenizer as tokenizer.json + tokenizer_config.json (ChatML template), so Hugging Face "
           "tools load the folder with its tokenizer"},
  };
  lt_cmd_args_t c = {.command = "init",
                     .usage = "--config MODEL_CONFIG.json --out DIR [--seed N] [--critic] [--byte-tokenizer]",
                     .summary =
                         "Writes config.json, generation_config.json and model.safetensors with weights drawn "
                         "from N(0, initializer_range) (norms at 1), loadable by Hugging Face tools.",
                     .args = args,
                     .nargs = 5,
                     .min_pos = 0,
                     .max_pos = 0};
  int rc = lt_args_parse(&c, argc, argv);
  if (rc) return rc == 1 ? 0 : rc;
  const char *cfgpath = lt_args_str(&c, "--config", NULL), *out = lt_args_str(&c, "--out", NULL);
  if (!cfgpath || !out) return lt_args_usage_error(&c, "--config and --out are required");
  long long seed;
  if ((rc = lt_args_long(&c, "--seed", 1, 0, (1LL << 62), &seed))) return rc;
  if ((rc = parent_exists(out)) < 0) return lt_cli_fail("init", rc);
  lt_model_config_t mc;
  if ((rc = lt_model_config_load(cfgpath, &mc)) < 0) return lt_cli_fail("init", rc);
  mc.critic = lt_args_flag(&c, "--critic");
  if (mc.critic) mc.tied = 0;
  double std = 0.02;
  cJSON *raw;
  if (lt_json_parse_file(cfgpath, &raw) == 0) {
    const cJSON *ir = cJSON_GetObjectItemCaseSensitive(raw, "initializer_range");
    if (cJSON_IsNumber(ir) && ir->valuedouble > 0) std = ir->valuedouble;
    cJSON_Delete(raw);
  }
  lt_model_t *m;
  if ((rc = lt_model_create(&mc, &m)) < 0) return lt_cli_fail("init", rc);
  lt_model_init_random(m, (uint64_t)seed, (float)std);
  rc = lt_model_save(m, out);
  if (rc == 0 && lt_args_flag(&c, "--byte-tokenizer")) rc = lt_tokenizer_byte_write(mc.vocab, out);
  size_t n = m->nparams;
  lt_model_free(m);
  if (rc < 0) return lt_cli_fail("init", rc);
  printf("{\"out\": \"%s\", \"parameters\": %zu}\n", out, n);
  return 0;
}
