/* `longtail template`: renders conversations with a model's own chat template. */
#include <stdio.h>
#include <stdlib.h>

#include "cli/commands.h"
#include "text/chat_template.h"
#include "util/buf.h"
#include "util/error.h"
#include "util/json.h"

/* {"text"} per line, or {"error"} where the template raises: a per-line
 * answer, not a failure. */
static int render_line(const cJSON *line, lt_buf_t *out, void *ud) {
  if (!cJSON_IsObject(line)) return lt_error_set(LT_EINVAL, "expected a JSON object");
  char *text = NULL;
  size_t len = 0;
  int rc = lt_chat_template_render(ud, line, &text, &len);
  if (rc == LT_EINVAL) {
    lt_buf_puts(out, "{\"error\":");
    lt_json_quote(out, lt_error_msg());
    lt_buf_puts(out, "}\n");
    rc = 0;
  } else if (rc == 0) {
    lt_buf_puts(out, "{\"text\":");
    lt_json_quote_n(out, text, len);
    lt_buf_puts(out, "}\n");
  }
  free(text);
  return rc;
}

int lt_cmd_template(int argc, char **argv) {
  lt_arg_t args[] = {
      {.name = "--tokenizer",
       .kind = LT_ARG_VALUE,
       .metavar = "DIR",
       .help = "model directory with tokenizer_config.json (or the file)"},
      {.name = "--input", .kind = LT_ARG_VALUE, .metavar = "FILE.jsonl", .help = "input lines ('-': stdin)"},
  };
  lt_cmd_args_t c = {.command = "template",
                     .usage = "--tokenizer DIR --input FILE.jsonl",
                     .summary =
                         "Renders each line {\"messages\": [...], \"tools\": [...]?, \"add_generation_prompt\": "
                         "bool?, ...} with the chat_template of DIR/tokenizer_config.json (its bos_token and "
                         "eos_token too) and prints {\"text\": \"...\"}, or {\"error\": \"...\"} where the "
                         "template raises. See docs/chat-templates.md.",
                     .args = args,
                     .nargs = 2,
                     .min_pos = 0,
                     .max_pos = 0};
  int rc = lt_args_parse(&c, argc, argv);
  if (rc) return rc == 1 ? 0 : rc;
  const char *dir = lt_args_str(&c, "--tokenizer", NULL), *input = lt_args_str(&c, "--input", NULL);
  if (!dir || !input) return lt_args_usage_error(&c, "--tokenizer and --input are required");
  lt_chat_template_t *t;
  if ((rc = lt_chat_template_load(dir, &t)) < 0) return lt_cli_fail("template", rc);
  rc = lt_cli_map_lines(input, render_line, t);
  lt_chat_template_free(t);
  if (rc < 0) return lt_cli_fail("template", rc);
  return fflush(stdout) == 0 ? 0 : lt_cli_fail("template", lt_error_set(LT_EIO, "cannot write stdout"));
}
