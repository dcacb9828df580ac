/* `longtail reward`: score responses offline with a config's rewards section. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "cli/commands.h"
#include "rewards/reward.h"
#include "util/buf.h"
#include "util/error.h"
#include "util/json.h"

#define WINDOW 64 /* cases in flight */

typedef struct {
  cJSON *line;
  cJSON *ref; /* owned when built from a string reference */
  lt_reward_case_t k;
  lt_reward_result_t res;
  int done;
} slot_t;

typedef struct {
  slot_t s[WINDOW];
  long head, tail; /* cases [head, tail) are in flight, in input order */
  lt_buf_t out;
  int rc;
} state_t;

static void on_result(lt_reward_result_t *res, void *ud) {
  slot_t *s = ud;
  s->res = *res;
  s->done = 1;
}

static void flush_done(state_t *st) {
  while (st->head < st->tail && st->s[st->head % WINDOW].done) {
    slot_t *s = &st->s[st->head % WINDOW];
    lt_buf_reset(&st->out);
    lt_buf_puts(&st->out, "{\"reward\":");
    if (s->res.status == 0) lt_json_num(&st->out, s->res.reward);
    else lt_buf_puts(&st->out, "null");
    lt_buf_printf(&st->out, ",\"status\":\"%s\",\"attempts\":%d,\"components\":", s->res.status == 0 ? "ok" : "failed",
                  s->res.attempts);
    char *c = cJSON_PrintUnformatted(s->res.components);
    lt_buf_puts(&st->out, c ? c : "{}");
    free(c);
    if (s->res.status) {
      lt_buf_puts(&st->out, ",\"error\":");
      lt_json_quote(&st->out, s->res.error ? s->res.error : lt_strerror(s->res.status));
    }
    lt_buf_puts(&st->out, "}\n");
    if (lt_buf_ok(&st->out) == 0) fwrite(st->out.data, 1, st->out.len, stdout);
    cJSON_Delete(s->res.components);
    free(s->res.error);
    cJSON_Delete(s->line);
    cJSON_Delete(s->ref);
    memset(s, 0, sizeof *s);
    st->head++;
  }
}

/* Fills a case from a line; the case borrows the line's strings. */
static int make_case(slot_t *s, const char *path, long ln) {
  const cJSON *l = s->line;
  const cJSON *p = cJSON_GetObjectItemCaseSensitive(l, "prompt"), *r = cJSON_GetObjectItemCaseSensitive(l, "response");
  const cJSON *ref = cJSON_GetObjectItemCaseSensitive(l, "reference"),
              *d = cJSON_GetObjectItemCaseSensitive(l, "domain");
  if (!cJSON_IsString(p) || !cJSON_IsString(r))
    return lt_error_set(
        LT_EINVAL,
        "%s:%ld: expected {\"prompt\", \"response\", \"reference\", \"domain\"?} with string prompt and response", path,
        ln);
  if (d && !cJSON_IsString(d)) return lt_error_set(LT_EINVAL, "%s:%ld: domain: expected string", path, ln);
  if (cJSON_IsString(ref) || cJSON_IsNumber(ref)) {
    s->ref = cJSON_CreateObject();
    if (!s->ref) return lt_error_set(LT_ENOMEM, "out of memory");
    if (cJSON_IsString(ref)) cJSON_AddStringToObject(s->ref, "answer", ref->valuestring);
    else cJSON_AddNumberToObject(s->ref, "answer", ref->valuedouble);
    if (cJSON_IsNumber(ref)) { /* numbers compare as their decimal text */
      char buf[64];
      snprintf(buf, sizeof buf, "%.17g", ref->valuedouble);
      cJSON_ReplaceItemInObject(s->ref, "answer", cJSON_CreateString(buf));
    }
  } else if (!cJSON_IsObject(ref)) {
    return lt_error_set(LT_EINVAL, "%s:%ld: reference: expected a string, number or object", path, ln);
  }
  s->k = (lt_reward_case_t){.domain = d ? d->valuestring : NULL,
                            .prompt = p->valuestring,
                            .response = r->valuestring,
                            .reference = s->ref ? s->ref : ref,
                            .response_tokens = (int)strlen(r->valuestring)};
  const cJSON *rt = cJSON_GetObjectItemCaseSensitive(l, "response_tokens");
  if (cJSON_IsNumber(rt)) s->k.response_tokens = (int)rt->valuedouble;
  return 0;
}

int lt_cmd_reward(int argc, char **argv) {
  lt_arg_t args[] = {
      {.name = "--config",
       .kind = LT_ARG_VALUE,
       .metavar = "CFG",
       .help = "a config (a file holding only a rewards section is fine)"},
      {.name = "--input",
       .kind = LT_ARG_VALUE,
       .metavar = "CASES.jsonl",
       .help = "lines {prompt, response, reference, domain?} ('-': stdin)"},
      {.name = "--set", .kind = LT_ARG_MULTI, .metavar = "PATH=VALUE", .help = "override a config key"},
  };
  lt_cmd_args_t c = {.command = "reward",
                     .usage = "--config CFG --input CASES.jsonl",
                     .summary =
                         "Scores each case with the reward the config gives its domain and prints "
                         "{\"reward\": number|null, \"status\": \"ok\"|\"failed\", \"attempts\", \"components\"} "
                         "in input order. A reference given as a string is the expected answer.",
                     .args = args,
                     .nargs = 3,
                     .min_pos = 0,
                     .max_pos = 0};
  int rc = lt_args_parse(&c, argc, argv);
  if (rc) return rc == 1 ? 0 : rc;
  const char *cfgpath = lt_args_str(&c, "--config", NULL), *input = lt_args_str(&c, "--input", NULL);
  if (!cfgpath || !input) return lt_args_usage_error(&c, "--config and --input are required");
  lt_config_t cfg;
  if ((rc = lt_cli_load_config("reward", cfgpath, lt_args_get(&c, "--set"), &cfg))) return rc;
  uv_loop_t loop;
  if ((rc = uv_loop_init(&loop)) != 0) {
    lt_config_free(&cfg);
    return lt_cli_fail("reward", lt_error_set(LT_ESYS, "its event loop: %s", uv_strerror(rc)));
  }
  lt_rewarder_t *rw;
  if ((rc = lt_rewarder_create(&loop, &cfg, &rw)) < 0) {
    lt_config_free(&cfg);
    uv_loop_close(&loop);
    return lt_cli_fail("reward", rc);
  }
  lt_jsonl_t r;
  state_t *st = calloc(1, sizeof *st);
  rc = st ? lt_jsonl_open(&r, input) : lt_error_set(LT_ENOMEM, "out of memory");
  int eof = rc < 0;
  while (rc == 0 && (!eof || st->head < st->tail)) {
    while (!eof && st->tail - st->head < WINDOW) {
      slot_t *s = &st->s[st->tail % WINDOW];
      int k = lt_jsonl_next(&r, &s->line);
      if (k <= 0) {
        rc = k;
        eof = 1;
        break;
      }
      if ((rc = make_case(s, r.path, r.lineno)) < 0 || (rc = lt_rewarder_score(rw, &s->k, on_result, s)) < 0) {
        cJSON_Delete(s->line);
        cJSON_Delete(s->ref);
        memset(s, 0, sizeof *s);
        eof = 1;
        break;
      }
      st->tail++;
    }
    uv_run(&loop, UV_RUN_ONCE);
    flush_done(st);
  }
  if (st) lt_jsonl_close(&r);
  lt_rewarder_close(rw, NULL, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  flush_done(st);
  uv_loop_close(&loop);
  if (st) lt_buf_free(&st->out);
  free(st);
  lt_config_free(&cfg);
  return rc < 0 ? lt_cli_fail("reward", rc) : 0;
}
