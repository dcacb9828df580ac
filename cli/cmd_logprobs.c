/* `longtail logprobs`: per-token logprobs, entropy and routing confidence. */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli/commands.h"
#include "learner/model.h"
#include "util/buf.h"
#include "util/error.h"
#include "util/json.h"

int lt_cmd_logprobs(int argc, char **argv) {
  lt_arg_t args[] = {
      {.name = "--model", .kind = LT_ARG_VALUE, .metavar = "DIR", .help = "checkpoint directory"},
      {.name = "--input",
       .kind = LT_ARG_VALUE,
       .metavar = "FILE.jsonl",
       .help = "lines {\"tokens\": [ids]} ('-': stdin)"},
  };
  lt_cmd_args_t c = {.command = "logprobs",
                     .usage = "--model DIR --input FILE.jsonl",
                     .summary =
                         "For each line {\"tokens\": [ids]} prints {\"logprobs\", \"entropy\", "
                         "\"routing_confidence\"}: logprobs[i] = log p(tokens[i] | tokens[<i]) (element 0 is "
                         "0), entropy[i] of the distribution that predicted token i, and the mean top-k router "
                         "mass over positions and MoE layers (null for dense models).",
                     .args = args,
                     .nargs = 2,
                     .min_pos = 0,
                     .max_pos = 0};
  int rc = lt_args_parse(&c, argc, argv);
  if (rc) return rc == 1 ? 0 : rc;
  const char *dir = lt_args_str(&c, "--model", NULL), *input = lt_args_str(&c, "--input", NULL);
  if (!dir || !input) return lt_args_usage_error(&c, "--model and --input are required");
  openblas_set_num_threads(lt_cli_threads());
  lt_model_t *m;
  if ((rc = lt_model_load(dir, &m)) < 0) return lt_cli_fail("logprobs", rc);
  if (m->cfg.critic) {
    lt_model_free(m);
    return lt_cli_fail("logprobs", lt_error_set(LT_EINVAL, "%s is a value model, not a policy", dir));
  }
  lt_jsonl_t r;
  if ((rc = lt_jsonl_open(&r, input)) < 0) {
    lt_model_free(m);
    return lt_cli_fail("logprobs", rc);
  }
  lt_buf_t out = {0};
  cJSON *line;
  int cap = 0;
  while ((rc = lt_jsonl_next(&r, &line)) == 1) {
    int32_t *toks;
    int n;
    rc = lt_cli_token_array(line, "tokens", m->cfg.vocab, 1, m->cfg.max_pos, r.path, r.lineno, &toks, &n);
    cJSON_Delete(line);
    if (rc < 0) break;
    if (n > cap) { /* the workspace grows with the longest sequence seen */
      cap = n;
      if ((rc = lt_model_eval_alloc(m, cap, cap)) < 0) {
        free(toks);
        break;
      }
    }
    int start[2] = {0, n};
    lt_batch_t b = {.nseq = 1, .start = start, .tokens = toks};
    lt_fwd_out_t o;
    rc = lt_model_forward(m, &b, &o);
    free(toks);
    if (rc < 0) break;
    lt_buf_reset(&out);
    lt_buf_puts(&out, "{\"logprobs\":");
    lt_json_f32_array(&out, o.logprobs, n);
    lt_buf_puts(&out, ",\"entropy\":");
    lt_json_f32_array(&out, o.entropy, n);
    lt_buf_puts(&out, ",\"routing_confidence\":");
    lt_json_num(&out, o.routing_confidence < 0 ? NAN : o.routing_confidence);
    lt_buf_puts(&out, "}\n");
    if (lt_buf_ok(&out) < 0) {
      rc = lt_error_set(LT_ENOMEM, "out of memory");
      break;
    }
    fwrite(out.data, 1, out.len, stdout);
  }
  lt_buf_free(&out);
  lt_jsonl_close(&r);
  lt_model_free(m);
  if (rc < 0) return lt_cli_fail("logprobs", rc);
  return 0;
}
