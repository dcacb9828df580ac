/* `longtail tokenize`: text ⇄ token ids with a model's tokenizer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "learner/model.h"
#include "text/tokenizer.h"
#include "util/buf.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/json.h"

static int decode_line(const cJSON *line, lt_buf_t *out, void *ud) {
  int32_t *ids;
  int n;
  char *text = NULL;
  size_t len;
  int rc = lt_json_get_i32_array(line, "ids", &ids, &n);
  if (rc == 0) {
    rc = lt_tokenizer_decode(ud, ids, n, 0, &text, &len);
    free(ids);
  }
  if (rc == 0) {
    lt_buf_puts(out, "{\"text\":");
    lt_json_quote_n(out, text, len);
    lt_buf_puts(out, "}\n");
  }
  free(text);
  return rc;
}

static int encode_line(const cJSON *line, lt_buf_t *out, void *ud) {
  const char *text;
  int32_t *ids = NULL;
  int n;
  int rc = lt_json_get_str(line, "text", &text);
  if (rc == 0) rc = lt_tokenizer_encode(ud, text, strlen(text), &ids, &n);
  if (rc == 0) {
    lt_buf_puts(out, "{\"ids\":");
    lt_json_i32_array(out, ids, n);
    lt_buf_puts(out, "}\n");
  }
  free(ids);
  return rc;
}

int lt_cmd_tokenize(int argc, char **argv) {
  lt_arg_t args[] = {
      {.name = "--tokenizer", .kind = LT_ARG_VALUE, .metavar = "PATH", .help = "tokenizer.json, or a model directory"},
      {.name = "--input", .kind = LT_ARG_VALUE, .metavar = "FILE.jsonl", .help = "input lines ('-': stdin)"},
      {.name = "--decode", .kind = LT_ARG_FLAG, .help = "decode {\"ids\"} lines to {\"text\"}"},
  };
  lt_cmd_args_t c = {.command = "tokenize",
                     .usage = "--tokenizer PATH --input FILE.jsonl [--decode]",
                     .summary =
                         "Encodes {\"text\"} lines to {\"ids\"} (no special tokens added), or with --decode "
                         "{\"ids\"} to {\"text\"}. PATH is a tokenizer.json or a model directory; a model "
                         "directory without tokenizer.json uses the byte tokenizer sized by its config.json.",
                     .args = args,
                     .nargs = 3,
                     .min_pos = 0,
                     .max_pos = 0};
  int rc = lt_args_parse(&c, argc, argv);
  if (rc) return rc == 1 ? 0 : rc;
  const char *path = lt_args_str(&c, "--tokenizer", NULL), *input = lt_args_str(&c, "--input", NULL);
  if (!path || !input) return lt_args_usage_error(&c, "--tokenizer and --input are required");
  lt_tokenizer_t *tok = NULL;
  char cfgpath[4096];
  if (lt_fs_is_dir(path) && lt_path_join(cfgpath, sizeof cfgpath, path, "tokenizer.json") == 0 &&
      !lt_fs_exists(cfgpath)) {
    lt_model_config_t mc;
    if (lt_path_join(cfgpath, sizeof cfgpath, path, "config.json") < 0) return lt_cli_fail("tokenize", LT_ERANGE);
    if ((rc = lt_model_config_load(cfgpath, &mc)) < 0) return lt_cli_fail("tokenize", rc);
    rc = lt_tokenizer_byte(mc.vocab, &tok);
  } else {
    rc = lt_tokenizer_load(path, &tok);
  }
  if (rc < 0) return lt_cli_fail("tokenize", rc);
  rc = lt_cli_map_lines(input, lt_args_flag(&c, "--decode") ? decode_line : encode_line, tok);
  lt_tokenizer_free(tok);
  if (rc < 0) return lt_cli_fail("tokenize", rc);
  return fflush(stdout) == 0 ? 0 : lt_cli_fail("tokenize", lt_error_set(LT_EIO, "cannot write stdout"));
}
