/* The agent loop's context management, end to end on a loop: the scripted
 * policy (every turn ends with reasoning and a tool call) against an HTTP
 * environment whose simulated user answers every call. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include "cli/commands.h"
#include "net/http.h"
#include "rollout/agent.h"
#include "util/error.h"

/* The step (1, 2, ...) before whose answer the agent is aborted, counted down; 0: none (abort_trigger). */
static int abort_in;
static uv_async_t abort_trigger;

/* ud: the step (1, 2, ...) whose tool the environment reports timed out, counted down; 0: none. */
static void user_env(lt_http_conn_t *c, const lt_http_req_t *req, void *ud) {
  int *timeout_in = ud;
  cJSON *q = cJSON_Parse(req->body), *a = cJSON_CreateObject();
  /* Signalled before the answer is written, the abort is read in the same poll as the answer and before it. */
  if (strcmp(cJSON_GetObjectItem(q, "op")->valuestring, "reset") && abort_in > 0 && --abort_in == 0)
    uv_async_send(&abort_trigger);
  if (!strcmp(cJSON_GetObjectItem(q, "op")->valuestring, "reset")) {
    cJSON *m = cJSON_AddArrayToObject(a, "messages"), *u = cJSON_CreateObject();
    cJSON_AddStringToObject(u, "role", "user");
    cJSON_AddStringToObject(u, "content", "ORIGINAL-QUESTION: count with me.");
    cJSON_AddItemToArray(m, u);
  } else {
    cJSON *obs = cJSON_AddArrayToObject(a, "observations"), *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "role", "user");
    cJSON_AddStringToObject(o, "content", "USER-AGAIN: and one more.");
    cJSON_AddItemToArray(obs, o);
    if (*timeout_in > 0 && --*timeout_in == 0) cJSON_AddStringToObject(a, "truncated", "tool_timeout");
  }
  cJSON_AddNumberToObject(a, "state", 0);
  char *b = cJSON_PrintUnformatted(a);
  lt_http_respond(c, 200, "application/json", b, strlen(b));
  free(b);
  cJSON_Delete(q), cJSON_Delete(a);
}

typedef struct {
  lt_msg_t traj;
  int done;
  char *all; /* every context of the trajectory, decoded */
} got_t;

static void on_done(lt_agent_t *a, lt_msg_t *traj, void *ud) {
  (void)a;
  got_t *g = ud;
  if (g->done++) lt_msg_free(&g->traj); /* a second callback: counted, and the test fails on it */
  g->traj = *traj;
}

static void on_abort_trigger(uv_async_t *h) { lt_agent_abort(h->data, "the test aborts it"); }

static int count(const char *hay, const char *needle) {
  int n = 0;
  for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle)) n++;
  return n;
}

static int markers(const cJSON *msgs, const char *kind) {
  int n = 0;
  for (const cJSON *m = msgs->child; m; m = m->next) {
    const cJSON *k = cJSON_GetObjectItem(m, "longtail_context");
    n += cJSON_IsString(k) && !strcmp(k->valuestring, kind);
  }
  return n;
}

/* A "tools" list the next run_with puts in the task spec (JSON text; NULL: none). */
static const char *spec_tools;

/* Runs one episode; the trajectory's last context decoded into *text, all of
 * it into g->all.  chat: the model's chat template (NULL: ChatML); answer: the
 * policy's turn ending; timeout_step > 0: that step's tool times out, and the rewards range is [-2, 1]. */
static void run_with(const lt_context_opts_t *co, int max_turns, const lt_chat_template_t *chat, lt_tool_format fmt,
                     const char *answer, int timeout_step, got_t *g, char **text) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  lt_http_server_t *hs;
  lt_http_opts_t ho = {.host = "127.0.0.1", .max_body = 1 << 20, .max_conns = 16, .timeout_ms = 5000};
  int timeout_in = timeout_step;
  cr_assert_eq(lt_http_listen(&loop, &ho, user_env, &timeout_in, &hs), 0);
  char json[512];
  snprintf(json, sizeof json,
           "{\"envs\": {\"u\": {\"type\": \"http\", \"params\": {\"endpoint\": \"http://127.0.0.1:%d/\"}}}%s}",
           lt_http_port(hs), timeout_step ? ", \"rewards\": {\"range\": [-2, 1]}" : "");
  lt_config_t cfg;
  cr_assert_eq(lt_config_from_json(&cfg, cJSON_Parse(json), NULL, 0, lt_all_schemas, lt_all_nschemas), 0, "%s",
               lt_error_msg());
  lt_envs_t *envs;
  lt_rewarder_t *rw;
  cr_assert_eq(lt_envs_create(&cfg, &loop, &envs), 0, "%s", lt_error_msg());
  cr_assert_eq(lt_rewarder_create(&loop, &cfg, &rw), 0);
  lt_backend_opts_t bo = {.kind = "scripted",
                          .vocab = 264,
                          .mean_tokens = 4,
                          .tail_fraction = 0,
                          .tail_factor = 1,
                          .max_sessions = 4,
                          .max_context = 4096,
                          .answer = answer};
  lt_backend_t *be;
  cr_assert_eq(lt_backend_create(&loop, &bo, &be), 0, "%s", lt_error_msg());
  lt_agent_ctx_t ctx = {.loop = &loop,
                        .envs = envs,
                        .rewarder = rw,
                        .backend = be,
                        .context = *co,
                        .chat = chat,
                        .tool_format = fmt,
                        .cfg = &cfg};
  cJSON *spec;
  cr_assert_eq(lt_envs_sample(envs, "u", 0, 0, &spec), 0);
  if (spec_tools) cJSON_AddItemToObject(spec, "tools", cJSON_Parse(spec_tools));
  lt_task_t task = {.task_id = 1,
                    .group_id = 1,
                    .domain = "u",
                    .env = "http",
                    .session = "",
                    .seed = 3,
                    .temperature = 1,
                    .top_p = 1,
                    .max_new_tokens = 128,
                    .max_turns = max_turns,
                    .max_context = 4096,
                    .spec = spec};
  lt_agent_t *a;
  memset(g, 0, sizeof *g);
  cr_assert_eq(uv_async_init(&loop, &abort_trigger, on_abort_trigger), 0);
  cr_assert_eq(lt_agent_start(&ctx, &task, on_done, g, &a), 0);
  abort_trigger.data = a;
  for (int i = 0; i < 20000 && !g->done; i++) uv_run(&loop, UV_RUN_ONCE);
  cr_assert(g->done, "the episode did not end");
  for (int i = 0; i < 8; i++) uv_run(&loop, UV_RUN_NOWAIT); /* a late second callback would come here */
  cr_assert_eq(g->done, 1, "the episode was delivered %d times", g->done);
  uv_close((uv_handle_t *)&abort_trigger, NULL);
  size_t len;
  const lt_traj_t *t = &g->traj.u.traj;
  int last = t->nseqs > 1 ? t->seq_starts[t->nseqs - 1] : 0;
  cr_assert_eq(lt_tokenizer_decode(lt_backend_tokenizer(be), t->tokens + last, t->ntokens - last, 0, text, &len), 0);
  cr_assert_eq(lt_tokenizer_decode(lt_backend_tokenizer(be), t->tokens, t->ntokens, 0, &g->all, &len), 0);
  cJSON_Delete(spec);
  lt_envs_shutdown(envs);
  lt_rewarder_close(rw, NULL, NULL);
  lt_backend_close(be, NULL, NULL);
  lt_http_close(hs, NULL, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  lt_envs_free(envs);
  lt_config_free(&cfg);
  cr_expect_eq(uv_loop_close(&loop), 0, "handles left open");
}

static void run(const lt_context_opts_t *co, int max_turns, got_t *g, char **text) {
  run_with(co, max_turns, NULL, LT_TOOLFMT_XML, "<think>PLAN-SECRET</think> <tool_call><name>ask</name></tool_call>", 0,
           g, text);
}

/* A checkpoint with its own chat template: prompts are the template's text,
 * extended turn by turn after the tokens the policy generated, and its tool
 * calls are read in the format the template teaches. */
Test(agent, prompts_follow_the_models_chat_template) {
  char dir[] = "/tmp/lt-agent-tpl-XXXXXX", path[64];
  cr_assert(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
  FILE *f = fopen(path, "w");
  cr_assert(f);
  fputs(
      "{\"eos_token\": \"<|im_end|>\", \"chat_template\": \"{% for m in messages %}<<{{ m.role }}>>{{ m.content }}"
      "{{ '<|im_end|>' if m.role == 'assistant' }}\\n{% endfor %}{% if add_generation_prompt %}<<assistant>>{% endif %}"
      "{# <tool_call>{json}</tool_call> #}\"}",
      f);
  fclose(f);
  lt_chat_template_t *chat;
  lt_tool_format fmt;
  cr_assert_eq(lt_agent_chat_load(dir, "auto", &chat, &fmt), 0, "%s", lt_error_msg());
  cr_assert_not_null(chat);
  cr_expect_eq(fmt, LT_TOOLFMT_QWEN);
  lt_context_opts_t co = {.max_resets = 2};
  got_t g;
  char *text;
  run_with(&co, 3, chat, fmt, "<tool_call>{\"name\": \"ask\", \"arguments\": {\"n\": 2}}</tool_call>", 0, &g, &text);
  lt_traj_t *t = &g.traj.u.traj;
  cr_expect_eq(t->turns, 3);
  cr_expect_eq(count(text, "<|im_start|>"), 0, "no ChatML: %s", text);
  static const char head[] = "<<user>>ORIGINAL-QUESTION: count with me.\n<<assistant>>";
  cr_expect(!strncmp(text, head, sizeof head - 1), "%s", text);
  cr_expect_eq(count(text, "<|im_end|>\n<<user>>USER-AGAIN: and one more.\n<<assistant>>"), 2, "%s", text);
  cr_expect_eq(count(text, "<<assistant>>"), 3, "%s", text);
  /* the calls were parsed from the JSON format, arguments keep their types */
  char *all = cJSON_PrintUnformatted(t->messages);
  cr_expect_eq(count(all, "\"tool_calls\":[{\"name\":\"ask\",\"arguments\":{\"n\":2}}]"), 3, "%s", all);
  free(all), free(text), free(g.all);
  lt_msg_free(&g.traj);
  lt_chat_template_free(chat);
  unlink(path);
  rmdir(dir);
  cr_expect_eq(lt_agent_chat_load("/nonexistent", "auto", &chat, &fmt), 0);
  cr_expect_null(chat);
  cr_expect_eq(fmt, LT_TOOLFMT_XML);
  cr_expect_eq(lt_agent_chat_load("/nonexistent", "yaml", &chat, &fmt), LT_EINVAL);
}

/* The agent loop builds template variables as the OpenAI layer does: a task
 * whose tools list is empty renders as one without tools; and the first
 * prompt is the template's whole render. */
Test(agent, an_empty_tools_list_renders_as_no_tools) {
  char dir[] = "/tmp/lt-agent-tools-XXXXXX", path[64];
  cr_assert(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
  FILE *f = fopen(path, "w");
  cr_assert(f);
  fputs(
      "{\"eos_token\": \"<|im_end|>\", \"chat_template\": \"[BOS]{% for m in messages %}<<{{ m.role }}>>"
      "{% if tools is defined %}TOOLS{% endif %}{{ m.content }}\\n{% endfor %}{% if add_generation_prompt %}<<assistant>>{% endif %}\"}",
      f);
  fclose(f);
  lt_chat_template_t *chat;
  lt_tool_format fmt;
  cr_assert_eq(lt_agent_chat_load(dir, "auto", &chat, &fmt), 0, "%s", lt_error_msg());
  lt_context_opts_t co = {.max_resets = 2};
  got_t g;
  char *text;
  spec_tools = "[]";
  run_with(&co, 1, chat, fmt, "done", 0, &g, &text);
  spec_tools = NULL;
  cr_expect_eq(count(text, "TOOLS"), 0, "%s", text);
  /* a fresh context is the whole render: what comes before the first message included */
  cr_expect(!strncmp(text, "[BOS]<<user>>ORIGINAL-QUESTION", 30), "%s", text);
  free(text);
  lt_msg_free(&g.traj);
  lt_chat_template_free(chat);
  unlink(path);
  rmdir(dir);
}

Test(agent, reasoning_is_kept_for_the_latest_user_turn_only) {
  lt_context_opts_t co = {.keep_reasoning_latest = 1, .max_resets = 2};
  got_t g;
  char *text;
  run(&co, 4, &g, &text);
  lt_traj_t *t = &g.traj.u.traj;
  cr_expect_eq(t->turns, 4);
  cr_expect_str_eq(t->reason, "turn_limit");
  /* All four turns reasoned (the messages keep everything)... */
  char *all = cJSON_PrintUnformatted(t->messages);
  cr_expect_eq(count(all, "PLAN-SECRET"), 4, "%s", all);
  cr_expect_eq(markers(t->messages, "reasoning_dropped"), 3);
  /* ...but the context the last turn was generated from holds only its own reasoning. */
  cr_expect_eq(count(text, "PLAN-SECRET"), 1, "%s", text);
  cr_expect_eq(count(text, "ORIGINAL-QUESTION"), 1);
  cr_expect_eq(count(text, "USER-AGAIN"), 3);
  cr_expect_eq(count(text, "<tool_call>"), 4, "earlier answers stay, without their reasoning: %s", text);
  /* Each rewrite started a context of the trajectory, and the earlier ones stay: every turn's generated
   * reasoning is in the record (loss mask 1), so it trains. */
  cr_expect_eq(t->nseqs, 4, "a context per user turn");
  cr_expect_eq(count(g.all, "PLAN-SECRET"), 4, "%s", g.all);
  free(all), free(text), free(g.all);
  lt_msg_free(&g.traj);
  /* keep_reasoning = all: nothing is rewritten. */
  co.keep_reasoning_latest = 0;
  run(&co, 4, &g, &text);
  cr_expect_eq(count(text, "PLAN-SECRET"), 4);
  cr_expect_eq(markers(g.traj.u.traj.messages, "reasoning_dropped"), 0);
  cr_expect_eq(g.traj.u.traj.nseqs, 0, "one context");
  free(text), free(g.all);
  lt_msg_free(&g.traj);
}

Test(agent, discard_all_and_summary_compress_past_the_threshold) {
  lt_context_opts_t co = {.compression = LT_COMPRESS_DISCARD_ALL, .threshold = 120, .max_resets = 2};
  got_t g;
  char *text;
  run(&co, 8, &g, &text);
  lt_traj_t *t = &g.traj.u.traj;
  cr_expect_eq(markers(t->messages, "discard_all"), 2, "two resets, then the limits apply as usual");
  cr_expect_eq(count(text, "ORIGINAL-QUESTION"), 1, "a reset restarts from the original question");
  cr_expect_lt(count(text, "PLAN-SECRET"), t->turns, "the last context holds its own turns (%d turns in all)",
               t->turns);
  cr_expect_gt(t->turns, 8, "resets gave the episode more turns than one context allows");
  /* The contexts before each reset stay in the trajectory: every turn it generated trains. */
  cr_expect_eq(t->nseqs, 3, "two resets: three contexts");
  cr_expect_eq(count(g.all, "PLAN-SECRET"), t->turns, "%s", g.all);
  cr_expect_eq(count(g.all, "ORIGINAL-QUESTION"), 3, "each context starts from the question");
  int gen = 0;
  for (int i = 0; i < t->ntokens; i++) gen += t->loss_mask[i];
  cr_expect_gt(gen, count(text, "PLAN-SECRET") * 4, "generated tokens of the earlier contexts are trained (%d)", gen);
  free(text), free(g.all);
  lt_msg_free(&g.traj);

  co = (lt_context_opts_t){.compression = LT_COMPRESS_SUMMARY,
                           .threshold = 120,
                           .max_resets = 1,
                           .summary_tokens = 32,
                           .summary_prompt = "SUMMARIZE-NOW"};
  run(&co, 8, &g, &text);
  t = &g.traj.u.traj;
  cr_expect_eq(markers(t->messages, "summary"), 1);
  cr_expect_eq(count(text, "Summary of the progress so far"), 1, "%s", text);
  cr_expect_eq(count(text, "ORIGINAL-QUESTION"), 1);
  cr_expect_eq(count(text, "SUMMARIZE-NOW"), 0, "the request for the summary is not part of the new context");
  cr_expect_eq(t->nseqs, 2, "the context before the summary stays");
  cr_expect_eq(count(g.all, "PLAN-SECRET"), t->turns, "%s", g.all);
  cr_expect_eq(count(g.all, "SUMMARIZE-NOW"), 0, "the summary's own call is not recorded");
  free(text), free(g.all);
  lt_msg_free(&g.traj);
}

Test(agent, hybrid_restarts_at_the_turn_limit) {
  lt_context_opts_t co = {.compression = LT_COMPRESS_HYBRID, .threshold = 100000, .max_resets = 1};
  got_t g;
  char *text;
  run(&co, 3, &g, &text);
  lt_traj_t *t = &g.traj.u.traj;
  cr_expect_eq(t->turns, 6, "3 turns, a discard-all restart, 3 more");
  cr_expect_str_eq(t->reason, "turn_limit");
  cr_expect_eq(markers(t->messages, "discard_all"), 1);
  cr_expect_eq(t->nseqs, 2);
  cr_expect_eq(count(g.all, "PLAN-SECRET"), 6, "all six turns are recorded");
  free(text), free(g.all);
  lt_msg_free(&g.traj);
}

/* Issue 32: a tool that times out ends the episode as the policy's failure, on the worker already: finish timeout,
 * reason tool_timeout, never truncated, and the lower bound of the domain's reward range (-2 here) without asking
 * the reward (which would score the unfinished answer). */
Test(agent, a_tool_timeout_ends_the_episode_as_a_failure_not_a_truncation) {
  lt_context_opts_t co = {0};
  got_t g;
  char *text;
  run_with(&co, 8, NULL, LT_TOOLFMT_XML, "<tool_call><name>ask</name></tool_call>", 2, &g, &text);
  lt_traj_t *t = &g.traj.u.traj;
  cr_assert_eq(t->status, LT_TRAJ_OK, "%s", t->error);
  cr_assert_eq(t->finish, LT_FINISH_TIMEOUT);
  cr_assert_str_eq(t->reason, "tool_timeout");
  cr_assert_eq(t->turns, 2);
  cr_assert(t->has_reward);
  cr_assert_float_eq(t->reward, -2, 1e-12);
  cr_assert_float_eq(cJSON_GetObjectItem(t->components, "timeout")->valuedouble, -2, 1e-12);
  free(text);
  lt_msg_free(&g.traj);
}

/* The lifecycle (rollout/agent.c): an episode aborted while its environment steps has ended, and the step's answer
 * that lands after that is dropped: the trajectory is delivered once, aborted, with the turns it had (the answer
 * is read in the same poll as the abort, before the delivery; the loop used to take it up and start another turn
 * on the generation session the abort had closed). */
Test(agent, an_answer_that_lands_after_an_abort_is_dropped) {
  lt_context_opts_t co = {0};
  got_t g;
  char *text;
  abort_in = 2;
  run_with(&co, 8, NULL, LT_TOOLFMT_XML, "<tool_call><name>ask</name></tool_call>", 0, &g, &text);
  lt_traj_t *t = &g.traj.u.traj;
  cr_assert_eq(abort_in, 0, "the second step never came");
  cr_assert_eq(t->status, LT_TRAJ_ABORTED, "%d: %s", t->status, t->error);
  cr_assert_str_eq(t->reason, "aborted");
  cr_assert_str_eq(t->error, "the test aborts it");
  cr_assert_eq(t->turns, 2);
  cr_assert_not(t->has_reward);
  free(text);
  lt_msg_free(&g.traj);
}
