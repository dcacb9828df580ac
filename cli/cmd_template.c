/* `longtail template`: renders conversations with a model's own chat template. */
#include <stdio.h>
#include <stdlib.h>

#include "cli/commands.h"
#include "learner/chat_template.h"
#include "util/buf.h"
#include "util/error.h"
#include "util/json.h"

int lt_cmd_template(int argc, char **argv) {
  lt_arg_t args[] = {
      {.name = "--tokenizer", .kind = LT_ARG_VALUE, .metavar = "DIR", .help = "model directory with tokenizer_config.json (or the file)"},
      {.name = "--input", .kind = LT_ARG_VALUE, .metavar = "FILE.jsonl", .help = "input lines ('-': stdin)"},
  };
  lt_cmd_args_t c = {.command = "template",
                     .usage = "--tokenizer DIR --input FILE.jsonl",
                     .summary = "Renders each line {\"messages\": [...], \"tools\": [...]?, \"add_generation_prompt\": "
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
  lt_jsonl_t r;
  if ((rc = lt_jsonl_open(&r, input)) < 0) {
    lt_chat_template_free(t);
    return lt_cli_fail("template", rc);
  }
  lt_buf_t out = {0};
  cJSON *line;
  while ((rc = lt_jsonl_next(&r, &line)) == 1) {
    lt_buf_reset(&out);
    char *text = NULL;
    size_t len = 0;
    if (!cJSON_IsObject(line)) {
      cJSON_Delete(line);
      rc = lt_error_set(LT_EINVAL, "%s:%ld: expected a JSON object", r.path, r.lineno);
      break;
    }
    rc = lt_chat_template_render(t, line, &text, &len);
    cJSON_Delete(line);
    if (rc == LT_EINVAL) { /* the template raised: a per-line answer, not a failure */
      lt_buf_puts(&out, "{\"error\":");
      lt_json_quote(&out, lt_error_msg());
      lt_buf_puts(&out, "}\n");
      rc = 0;
    } else if (rc == 0) {
      lt_buf_puts(&out, "{\"text\":");
      lt_json_quote_n(&out, text, len);
      lt_buf_puts(&out, "}\n");
    }
    free(text);
    if (rc < 0) {
      lt_error_wrap(rc, "%s:%ld", r.path, r.lineno);
      break;
    }
    if (lt_buf_ok(&out) < 0) {
      rc = lt_error_set(LT_ENOMEM, "out of memory");
      break;
    }
    fwrite(out.data, 1, out.len, stdout);
  }
  lt_buf_free(&out);
  lt_jsonl_close(&r);
  lt_chat_template_free(t);
  if (rc < 0) return lt_cli_fail("template", rc);
  return fflush(stdout) == 0 ? 0 : lt_cli_fail("template", lt_error_set(LT_EIO, "cannot write stdout"));
}
