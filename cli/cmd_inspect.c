/* `longtail inspect RUN --task ID`: one trajectory for a terminal — its
 * outcome, the conversation with tool calls and observations, reward
 * components, the episode's diff (swe), and the token sequence coloured by the rollout logprob of each
 * generated token (prompt and observation tokens dimmed: the loss mask). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "buffer/buffer.h"
#include "cli/commands.h"
#include "text/tokenizer.h"
#include "util/buf.h"
#include "util/error.h"
#include "util/json.h"

#define DIM "\033[2m"
#define RESET "\033[0m"
#define BOLD "\033[1m"

/* A logprob's colour: likely tokens green, unlikely ones red. */
static const char *shade(float lp) {
  return lp >= -0.1f ? "\033[32m" : lp >= -1.0f ? "" : lp >= -3.0f ? "\033[33m" : "\033[31m";
}

static void put_text(const char *s, size_t n, int color, const char *style) {
  if (color && style[0]) fputs(style, stdout);
  for (size_t i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)s[i];
    if (ch == '\n') fputs(color ? "\u21b5\n" : "\n", stdout);
    else if (ch < 0x20 && ch != '\t') printf("\\x%02x", ch);
    else putchar(ch);
  }
  if (color && style[0]) fputs(RESET, stdout);
}

int lt_cmd_inspect(int argc, char **argv) {
  lt_arg_t args[] = {
      {.name = "--task", .kind = LT_ARG_VALUE, .metavar = "ID", .help = "the task whose trajectory to show"},
      {.name = "--color", .kind = LT_ARG_VALUE, .metavar = "WHEN", .help = "auto (a terminal) | always | never"},
      LT_CLI_CHECK_ARG,
  };
  lt_cmd_args_t c = {
      .command = "inspect",
      .usage = "RUN --task ID [--color auto|always|never] [--check]",
      .summary =
          "Shows one trajectory: outcome, reward components, the conversation with tool calls "
          "and observations, the episode's diff (swe), and every token coloured by its rollout logprob (green likely, "
          "red unlikely; dim: not trained on).",
      .args = args,
      .nargs = 3,
      .min_pos = 1,
      .max_pos = 1};
  int rc = lt_args_parse(&c, argc, argv);
  if (rc) return rc == 1 ? 0 : rc;
  long long id;
  if ((rc = lt_args_long(&c, "--task", -1, 0, 1LL << 62, &id))) return rc;
  if (id < 0) return lt_args_usage_error(&c, "--task ID is required");
  const char *when = lt_args_str(&c, "--color", "auto");
  if (strcmp(when, "auto") && strcmp(when, "always") && strcmp(when, "never"))
    return lt_args_usage_error(&c, "--color: '%s' is not auto, always or never", when);
  int color = !strcmp(when, "always") || (!strcmp(when, "auto") && isatty(1));
  lt_buffer_t *b;
  if ((rc = lt_cli_open_run("inspect", c.pos[0], lt_args_flag(&c, "--check"), &b, NULL, 0))) return rc;
  lt_traj_t t;
  lt_traj_meta_t m;
  if ((rc = lt_buffer_traj_load(b, id, LT_LOAD_ALL, &t, &m)) < 0) {
    lt_buffer_close(b);
    return lt_cli_fail("inspect", rc);
  }
  lt_tokenizer_t *tok = lt_cli_run_tokenizer(b);
  if ((rc = lt_cli_close_run("inspect", b, 0))) {
    lt_tokenizer_free(tok);
    lt_traj_free(&t);
    return rc;
  }
  printf("%stask %lld%s · group %llu · %s · %s", color ? BOLD : "", id, color ? RESET : "",
         (unsigned long long)t.group_id, t.domain, lt_sample_state_name(m.status));
  if (m.consumed_step >= 0) printf(" at learner step %lld", (long long)m.consumed_step);
  printf(" · worker %s · policy versions %lld..%lld\n", m.loaded_worker[0] ? m.loaded_worker : "?",
         (long long)m.version_min, (long long)m.version_max);
  printf("%s · %s (%s) · %d turn%s · reward ", lt_traj_status_name(t.status), lt_finish_name(t.finish),
         t.reason && t.reason[0] ? t.reason : "-", t.turns, t.turns == 1 ? "" : "s");
  if (t.has_reward) printf("%g", t.reward);
  else printf("none");
  char *comp = cJSON_PrintUnformatted(t.components); /* as stored */
  printf(" %s\n", comp ? comp : "{}");
  free(comp);
  if (t.error && t.error[0]) printf("error: %s\n", t.error);
  printf("time: generation %.0f ms, environment %.0f ms, reward %.0f ms\n", t.gen_ms, t.env_ms, t.reward_ms);
  /* The conversation as stored. */
  for (const cJSON *msg = t.messages ? t.messages->child : NULL; msg; msg = msg->next) {
    const char *role = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(msg, "role"));
    const char *content = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(msg, "content"));
    printf("\n%s── %s ──%s\n", color ? BOLD : "", role ? role : "?", color ? RESET : "");
    if (content) put_text(content, strlen(content), color, "");
    putchar('\n');
    const cJSON *calls = cJSON_GetObjectItemCaseSensitive(msg, "tool_calls");
    for (const cJSON *call = calls ? calls->child : NULL; call; call = call->next) {
      lt_buf_t a = {0};
      lt_json_write(&a, cJSON_GetObjectItemCaseSensitive(call, "arguments"));
      printf("  → tool call %s %s\n", cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(call, "name")),
             a.data ? (char *)a.data : "{}");
      lt_buf_free(&a);
    }
  }
  /* The episode's changes (a swe environment's diff): added lines green, removed red. */
  if (t.diff && t.diff[0]) {
    printf("\n%s── diff ──%s\n", color ? BOLD : "", color ? RESET : "");
    for (const char *p = t.diff; *p;) {
      const char *nl = strchr(p, '\n');
      size_t n = nl ? (size_t)(nl - p) : strlen(p);
      const char *style = !color                                                                      ? ""
                          : !strncmp(p, "+++", 3) || !strncmp(p, "---", 3) || !strncmp(p, "diff ", 5) ? BOLD
                          : *p == '@'                                                                 ? "\033[36m"
                          : *p == '+'                                                                 ? "\033[32m"
                          : *p == '-'                                                                 ? "\033[31m"
                                                                                                      : "";
      put_text(p, n, color, style);
      putchar('\n');
      p += n + (nl != NULL);
    }
  }
  /* Tokens: what the learner sees. */
  int gen = 0;
  double lpsum = 0, lpmin = 0;
  for (int i = 0; i < t.ntokens; i++)
    if (t.loss_mask[i]) {
      gen++;
      lpsum += t.logprobs[i];
      if (t.logprobs[i] < lpmin) lpmin = t.logprobs[i];
    }
  printf("\n%s── tokens ──%s %d in context, %d generated (mean logprob %.3f, min %.3f)%s\n", color ? BOLD : "",
         color ? RESET : "", t.ntokens, gen, gen ? lpsum / gen : 0, lpmin,
         color ? "; " DIM "dim: prompt/observation" RESET ", \033[32mgreen ≥ −0.1" RESET
                 ", plain ≥ −1, "
                 "\033[33myellow ≥ −3" RESET ", \033[31mred < −3" RESET
               : "; generated tokens as [text|logprob], others plain");
  for (int i = 0; i < t.ntokens; i++) {
    char *txt = NULL;
    size_t n = 0;
    char idbuf[32];
    if (!tok || lt_tokenizer_decode(tok, &t.tokens[i], 1, 0, &txt, &n) < 0) {
      n = (size_t)snprintf(idbuf, sizeof idbuf, "<%d>", t.tokens[i]);
      txt = NULL;
    }
    const char *s = txt ? txt : idbuf;
    if (t.loss_mask[i]) {
      if (color) put_text(s, n, 1, shade(t.logprobs[i]));
      else {
        putchar('[');
        put_text(s, n, 0, "");
        printf("|%.2f]", t.logprobs[i]);
      }
    } else {
      put_text(s, n, color, color ? DIM : "");
    }
    free(txt);
  }
  putchar('\n');
  lt_tokenizer_free(tok);
  lt_traj_free(&t);
  return 0;
}
