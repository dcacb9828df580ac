/* `longtail generate`: sample completions with the builtin engine. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "infer/engine.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"
#include "util/buf.h"
#include "util/error.h"
#include "util/json.h"

#define BATCH 8

typedef struct {
  lt_session_t *s;
  int32_t *out;
  float *lp;
  int n;
  int done;
  const char *finish;
} job_t;

static int emit(const lt_tokenizer_t *tok, job_t *j, lt_buf_t *b) {
  char *text;
  size_t len;
  /* The stop token ends the completion but is not part of its text. */
  int ntext = j->n && lt_tokenizer_is_stop(tok, j->out[j->n - 1]) ? j->n - 1 : j->n;
  int rc = lt_tokenizer_decode(tok, j->out, ntext, 1, &text, &len);
  if (rc < 0) return rc;
  lt_buf_reset(b);
  lt_buf_puts(b, "{\"text\":");
  lt_json_quote_n(b, text, len);
  lt_buf_puts(b, ",\"tokens\":");
  lt_json_i32_array(b, j->out, j->n);
  lt_buf_puts(b, ",\"logprobs\":");
  lt_json_f32_array(b, j->lp, j->n);
  lt_buf_printf(b, ",\"finish_reason\":\"%s\"}\n", j->finish);
  free(text);
  if (lt_buf_ok(b) < 0) return lt_error_set(LT_ENOMEM, "out of memory");
  fwrite(b->data, 1, b->len, stdout);
  return 0;
}

int lt_cmd_generate(int argc, char **argv) {
  lt_arg_t args[] = {
      {.name = "--model", .kind = LT_ARG_VALUE, .metavar = "DIR", .help = "checkpoint directory"},
      {.name = "--input",
       .kind = LT_ARG_VALUE,
       .metavar = "FILE.jsonl",
       .help = "lines {\"prompt\": text} or {\"tokens\": [ids]} ('-': stdin)"},
      {.name = "--temperature",
       .kind = LT_ARG_VALUE,
       .metavar = "T",
       .help = "sampling temperature (default 1; 0 = greedy)"},
      {.name = "--top-p", .kind = LT_ARG_VALUE, .metavar = "P", .help = "nucleus mass (default 1)"},
      {.name = "--top-k", .kind = LT_ARG_VALUE, .metavar = "K", .help = "top-k (default 0 = off)"},
      {.name = "--max-tokens",
       .kind = LT_ARG_VALUE,
       .metavar = "N",
       .help = "tokens to generate per line (default 128)"},
      {.name = "--seed", .kind = LT_ARG_VALUE, .metavar = "S", .help = "seed; line i uses S + i (default 0)"},
      {.name = "--chat", .kind = LT_ARG_FLAG, .help = "wrap a prompt as a user turn and open the assistant turn"},
  };
  lt_cmd_args_t c = {
      .command = "generate",
      .usage = "--model DIR --input FILE.jsonl [--temperature T --top-p P --top-k K --max-tokens N --seed S] [--chat]",
      .summary =
          "Samples a completion per line and prints {\"text\", \"tokens\", \"logprobs\", "
          "\"finish_reason\"} (\"stop\" at a stop token, \"length\" at --max-tokens or the "
          "context limit). Prompts are encoded as they are unless --chat.",
      .args = args,
      .nargs = 8,
      .min_pos = 0,
      .max_pos = 0};
  int rc = lt_args_parse(&c, argc, argv);
  if (rc) return rc == 1 ? 0 : rc;
  const char *dir = lt_args_str(&c, "--model", NULL), *input = lt_args_str(&c, "--input", NULL);
  if (!dir || !input) return lt_args_usage_error(&c, "--model and --input are required");
  double temp, top_p;
  long long top_k, max_tokens, seed;
  if ((rc = lt_args_double(&c, "--temperature", 1.0, &temp)) || (rc = lt_args_double(&c, "--top-p", 1.0, &top_p)) ||
      (rc = lt_args_long(&c, "--top-k", 0, 0, 1 << 24, &top_k)) ||
      (rc = lt_args_long(&c, "--max-tokens", 128, 1, 1 << 24, &max_tokens)) ||
      (rc = lt_args_long(&c, "--seed", 0, 0, 1LL << 62, &seed)))
    return rc;
  if (temp < 0 || top_p <= 0 || top_p > 1) return lt_args_usage_error(&c, "need --temperature ≥ 0 and 0 < --top-p ≤ 1");
  lt_engine_opts_t eo = {.device = "cpu", .threads = lt_cli_threads(), .max_sessions = BATCH};
  lt_engine_t *e;
  if ((rc = lt_engine_load(dir, &eo, &e)) < 0) return lt_cli_fail("generate", rc);
  const lt_tokenizer_t *tok = lt_engine_tokenizer(e);
  lt_engine_info_t info;
  lt_engine_info(e, &info);
  int chat = lt_args_flag(&c, "--chat");
  lt_sampling_t sp = {.temperature = (float)temp, .top_p = (float)top_p, .top_k = (int)top_k};
  lt_jsonl_t r;
  if ((rc = lt_jsonl_open(&r, input)) < 0) {
    lt_engine_free(e);
    return lt_cli_fail("generate", rc);
  }
  job_t jobs[BATCH];
  memset(jobs, 0, sizeof jobs);
  lt_session_t *act[BATCH];
  lt_sample_t smp[BATCH];
  lt_buf_t out = {0};
  long idx = 0;
  int eof = 0;
  while (rc == 0 && !eof) {
    /* Fill a batch of lines, prefill each, then decode them together. */
    int nj = 0;
    while (nj < BATCH) {
      cJSON *line;
      int k = lt_jsonl_next(&r, &line);
      if (k <= 0) {
        rc = k;
        eof = 1;
        break;
      }
      int32_t *ids = NULL;
      int n = 0, cap = 0;
      const cJSON *pt = cJSON_GetObjectItemCaseSensitive(line, "prompt");
      if (cJSON_IsString(pt)) {
        int32_t *enc;
        int ne;
        if (chat) rc = lt_chat_open(tok, LT_ROLE_USER, &ids, &n, &cap);
        if (rc == 0 && (rc = lt_tokenizer_encode(tok, pt->valuestring, strlen(pt->valuestring), &enc, &ne)) == 0) {
          for (int i = 0; i < ne && rc == 0; i++) rc = lt_ids_push(&ids, &n, &cap, enc[i]);
          free(enc);
        }
        if (chat && rc == 0) rc = lt_chat_close(tok, &ids, &n, &cap);
        if (chat && rc == 0) rc = lt_chat_open(tok, LT_ROLE_ASSISTANT, &ids, &n, &cap);
        if (rc == 0 && n == 0) rc = lt_error_set(LT_EINVAL, "%s:%ld: empty prompt", r.path, r.lineno);
      } else {
        rc = lt_cli_token_array(line, "tokens", info.vocab, 1, info.max_context, r.path, r.lineno, &ids, &n);
      }
      cJSON_Delete(line);
      job_t *j = &jobs[nj];
      if (rc == 0 && n >= info.max_context)
        rc = lt_error_set(LT_ERANGE, "%s:%ld: the prompt fills the context (%d)", r.path, r.lineno, info.max_context);
      if (rc == 0) rc = lt_session_open(e, &j->s);
      if (rc == 0) {
        lt_session_seed(j->s, (uint64_t)(seed + idx++));
        rc = lt_session_prefill(j->s, ids, n, NULL, NULL);
      }
      free(ids);
      if (rc == 0) {
        j->out = malloc(sizeof(int32_t) * (size_t)max_tokens);
        j->lp = malloc(sizeof(float) * (size_t)max_tokens);
        if (!j->out || !j->lp) rc = lt_error_set(LT_ENOMEM, "out of memory");
      }
      nj++;
      if (rc < 0) break;
    }
    for (;;) {
      int na = 0;
      for (int i = 0; rc == 0 && i < nj; i++)
        if (!jobs[i].done) act[na++] = jobs[i].s;
      if (!na || rc < 0) break;
      if ((rc = lt_engine_decode(e, act, na, &sp, smp, NULL, NULL)) < 0) break;
      int k = 0;
      for (int i = 0; i < nj; i++) {
        job_t *j = &jobs[i];
        if (j->done) continue;
        j->out[j->n] = smp[k].token;
        j->lp[j->n++] = smp[k].logprob;
        k++;
        if (lt_tokenizer_is_stop(tok, j->out[j->n - 1])) j->done = 1, j->finish = "stop";
        else if (j->n >= max_tokens || lt_session_len(j->s) >= info.max_context) j->done = 1, j->finish = "length";
      }
    }
    for (int i = 0; i < nj; i++) {
      if (rc == 0 && jobs[i].done) rc = emit(tok, &jobs[i], &out);
      lt_session_close(jobs[i].s);
      free(jobs[i].out);
      free(jobs[i].lp);
      memset(&jobs[i], 0, sizeof jobs[i]);
    }
  }
  lt_buf_free(&out);
  lt_jsonl_close(&r);
  lt_engine_free(e);
  return rc < 0 ? lt_cli_fail("generate", rc) : 0;
}
