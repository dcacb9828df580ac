/* The agent gateway end to end (docs/agent-gateway.md): `longtail train` with
 * the learner on and an `agent` domain whose episodes are played by programs
 * that only know the OpenAI API — Python with urllib, Node with the official
 * `openai` SDK.  Each stored trajectory's generated tokens must be exactly the
 * tokens the gateway returned to its agent: as many as the calls'
 * usage.completion_tokens, decoding to the same text, one generated span per
 * call.  Misbehaving agents (crash, hang, garbage requests, ended episodes'
 * keys) each end with a clear status and the worker keeps serving. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cJSON.h"
#include "text/tokenizer.h"
#include "sandbox/sandbox.h"
#include "tests/support/harness.h"
#include "tests/support/live.h"

typedef struct {
  char *dir;
  char rd[4200], db[4300], log[4200];
} job_t;

/* Runs a bounded training job whose `envs` section is envs_fmt (with %s for the agent log file and the tasks);
 * rollout: the rollout section (NULL: the tests' usual one); scripted_more: more members of workers.scripted;
 * frozen: learner.enabled false, so every token is sampled under v0 whenever the episode runs; more: more members
 * of the config (a sandbox section, say).  Returns `longtail train`'s exit status. */
static int job_status(job_t *j, const char *tag, int rows, int max_tasks, int group, const char *scripted_answer,
                      const char *scripted_more, const char *rollout, int frozen, const char *more,
                      const char *envs_fmt) {
  j->dir = lt_test_tmpdir(tag);
  char tasks[4200], cfg[4200], envs[8192], js[16384];
  snprintf(tasks, sizeof tasks, "%s/tasks.jsonl", j->dir);
  snprintf(cfg, sizeof cfg, "%s/cfg.json", j->dir);
  snprintf(j->rd, sizeof j->rd, "%s/run", j->dir);
  snprintf(j->db, sizeof j->db, "%s/buffer.db", j->rd);
  snprintf(j->log, sizeof j->log, "%s/calls.jsonl", j->dir);
  FILE *f = fopen(tasks, "w");
  cr_assert_not_null(f);
  for (int i = 0; i < rows; i++)
    fprintf(f, "{\"id\": \"t%d\", \"prompt\": \"What is %d+%d?\", \"answer\": \"%d\"}\n", i, i, i, 2 * i);
  fclose(f);
  snprintf(envs, sizeof envs, envs_fmt, j->log, tasks, j->log, tasks, j->log, tasks, j->log, tasks, tasks);
  snprintf(
      js, sizeof js,
      "{\"run\": {\"seed\": 7}, \"model\": {\"init\": \"%s/configs/models/tiny-moe.json\"}, \"envs\": %s,"
      " \"learner\": {\"enabled\": %s, \"batch\": {\"trajectories\": 4}, \"threads\": 1, \"actor_minibatches\": 1, \"critic_minibatches\": 1},"
      " \"scheduler\": {\"group_size\": %d, \"max_tasks\": %d, \"dynamic_filter\": false, \"task_timeout_s\": 60},"
      " \"rollout\": %s,"
      " \"workers\": {\"spawn_local\": 1, \"slots\": 3, \"backend\": \"scripted\", \"daemon_gone_s\": 20,"
      "   \"scripted\": {\"mean_tokens\": 12, \"tail_fraction\": 0%s%s%s%s}},"
      " \"transport\": {\"endpoint\": \"tcp://127.0.0.1:%d\", \"heartbeat_ms\": 200, \"liveness\": 5},"
      " \"eval\": {\"every\": 0}, \"monitor\": {\"progress\": \"off\"}%s}",
      lt_test_root(), envs, frozen ? "false" : "true", group, max_tasks,
      rollout ? rollout : "{\"max_new_tokens\": 160, \"max_turns\": 8}", scripted_answer ? ", \"answer\": \"" : "",
      scripted_answer ? scripted_answer : "", scripted_answer ? "\"" : "", scripted_more, lt_test_free_port(), more);
  cr_assert_eq(lt_test_write(cfg, js), 0);
  const char *argv[] = {"longtail", "train", cfg, "--run-dir", j->rd, NULL};
  pid_t d = lt_test_spawn(j->dir, "daemon", argv);
  cr_assert_gt(d, 0);
  return lt_test_wait(d, 150);
}

static void run_job_with(job_t *j, const char *tag, int rows, int max_tasks, int group, const char *scripted_answer,
                         const char *scripted_more, const char *rollout, int frozen, const char *envs_fmt) {
  int st = job_status(j, tag, rows, max_tasks, group, scripted_answer, scripted_more, rollout, frozen, "", envs_fmt);
  cr_assert_eq(st, 0, "longtail train exit %d (logs in %s)", st, j->dir);
}

static void run_job(job_t *j, const char *tag, int rows, int max_tasks, int group, const char *scripted_answer,
                    const char *envs_fmt) {
  run_job_with(j, tag, rows, max_tasks, group, scripted_answer, "", NULL, 0, envs_fmt);
}

/* One domain "chat" of the urllib agent in `mode` (the format's %s: its log, its tasks), with extra params. */
static void python_envs(char *envs, size_t cap, const char *mode, const char *params) {
  snprintf(
      envs, cap,
      "{\"chat\": {\"type\": \"agent\", \"params\": {\"command\": [\"python3\", \"%s/tests/integ/agents/urllib_agent.py\", \"%%s\","
      " \"%s\"], \"tasks\": \"%%s\", \"timeout_s\": 30, \"sandbox\": false%s}}}",
      lt_test_root(), mode, params);
}

/* The run's trajectories as `longtail export --format F` lines (a JSON array). */
static cJSON *export(const job_t *j, const char *format) {
  lt_run_t r;
  cr_assert_eq(lt_test_sh(&r, 60, "%s export %s --format %s", lt_test_bin(), j->rd, format), 0);
  cr_assert_eq(r.status, 0, "export: %s", r.err);
  cJSON *all = cJSON_CreateArray();
  for (char *line = strtok(r.out, "\n"); line; line = strtok(NULL, "\n")) cJSON_AddItemToArray(all, cJSON_Parse(line));
  lt_run_free(&r);
  return all;
}

/* Skips a test of sandboxed programs where the host gives no user namespaces (agent programs then run as plain
 * children). */
static void need_sandbox(void) {
  lt_sandbox_caps_t caps;
  lt_sandbox_probe(&caps);
  if (!caps.userns)
    cr_skip_test("this host gives no user namespaces: no sandbox (agent programs run as plain children)");
}

/* The agents' log: one object per line. */
static cJSON *read_log(const char *path) {
  char *text = lt_test_read(path);
  cr_assert_not_null(text, "no agent log at %s", path);
  cJSON *all = cJSON_CreateArray();
  for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) cJSON_AddItemToArray(all, cJSON_Parse(line));
  free(text);
  return all;
}

static const char *str(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsString(v) ? v->valuestring : "";
}

static double num(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k)->valuedouble; }

/* A tokens/2 line's sequences one after another, as a tokens/1 line's arrays (caller deletes). */
static cJSON *flatten(const cJSON *tr) {
  cJSON *o = cJSON_CreateObject(), *toks = cJSON_AddArrayToObject(o, "tokens"),
        *mask = cJSON_AddArrayToObject(o, "loss_mask");
  const cJSON *seqs = cJSON_GetObjectItemCaseSensitive(tr, "sequences");
  for (const cJSON *s = seqs ? seqs->child : NULL; s || !seqs; s = s ? s->next : NULL) {
    const cJSON *from = seqs ? s : tr;
    for (const cJSON *x = cJSON_GetObjectItemCaseSensitive(from, "tokens")->child; x; x = x->next)
      cJSON_AddItemToArray(toks, cJSON_CreateNumber(x->valuedouble));
    for (const cJSON *x = cJSON_GetObjectItemCaseSensitive(from, "loss_mask")->child; x; x = x->next)
      cJSON_AddItemToArray(mask, cJSON_CreateNumber(x->valuedouble));
    if (!seqs) break;
  }
  return o;
}

/* Do the generated tokens [start, start + n) decode to the text a call returned (the generated text without its
 * stop token, less any tool-call block)? */
static int span_is(const lt_tokenizer_t *tok, const cJSON *toks, int start, int n, const cJSON *call) {
  int32_t *ids = malloc(sizeof *ids * (size_t)(n ? n : 1));
  for (int i = 0; i < n; i++) ids[i] = cJSON_GetArrayItem(toks, start + i)->valueint;
  char *text = NULL;
  size_t len;
  int ok = lt_tokenizer_decode(tok, ids, n, 1, &text, &len) == 0 && strstr(text, str(call, "content")) == text;
  free(ids);
  free(text);
  return ok;
}

/* any_order: a call's context may come anywhere in the trajectory (calls made at once), else in the log's order. */
static int matches_flat(const lt_tokenizer_t *tok, const cJSON *tr, const cJSON *calls, const char *key,
                        int any_order) {
  const cJSON *toks = cJSON_GetObjectItemCaseSensitive(tr, "tokens"),
              *mask = cJSON_GetObjectItemCaseSensitive(tr, "loss_mask");
  int n = cJSON_GetArraySize(toks), at = 0, nspan = 0, start[64], len[64], used[64] = {0};
  while (nspan < 64) { /* the generated spans, in order */
    while (at < n && cJSON_GetArrayItem(mask, at)->valueint == 0) at++;
    if (at == n) break;
    start[nspan] = at;
    while (at < n && cJSON_GetArrayItem(mask, at)->valueint == 1) at++;
    len[nspan] = at - start[nspan];
    nspan++;
  }
  int next = 0, ncalls = 0;
  for (const cJSON *c = calls->child; c; c = c->next) {
    if (strcmp(str(c, "key"), key) || !cJSON_GetObjectItemCaseSensitive(c, "completion_tokens")) continue;
    int want = (int)num(c, "completion_tokens"), found = -1;
    for (int k = any_order ? 0 : next; k < (any_order ? nspan : next + 1) && k < nspan && found < 0; k++)
      if (!used[k] && len[k] == want && span_is(tok, toks, start[k], want, c)) found = k;
    if (found < 0) return 0;
    used[found] = 1;
    next = found + 1;
    ncalls++;
  }
  return ncalls == nspan; /* no generated token the agent never saw */
}

/* Does trajectory `tr` (export tokens) hold exactly the answers of the episode
 * `key` in the log: one generated span per call, as many tokens as it was told,
 * the same text? */
static int matches(const lt_tokenizer_t *tok, const cJSON *tr_line, const cJSON *calls, const char *key,
                   int any_order) {
  cJSON *flat = flatten(tr_line);
  int ok = matches_flat(tok, flat, calls, key, any_order);
  cJSON_Delete(flat);
  return ok;
}

/* Every trajectory matches one episode of the log, each episode used once. */
static void check_token_exact_as(const job_t *j, int expect, int any_order) {
  cJSON *tr = export(j, "tokens"), *calls = read_log(j->log);
  lt_tokenizer_t *tok;
  cr_assert_eq(lt_tokenizer_byte(LT_TOKENIZER_BYTE_VOCAB, &tok), 0);
  int n = 0;
  char used[64][80];
  int nused = 0;
  for (const cJSON *t = tr->child; t; t = t->next, n++) {
    int found = 0;
    for (const cJSON *c = calls->child; c && !found; c = c->next) {
      const char *key = str(c, "key");
      int seen = 0;
      for (int i = 0; i < nused; i++) seen |= !strcmp(used[i], key);
      if (!key[0] || seen || !matches(tok, t, calls, key, any_order)) continue;
      snprintf(used[nused++], sizeof used[0], "%s", key);
      found = 1;
    }
    cr_assert(found, "trajectory %d (task %.0f) matches no agent's answers", n, num(t, "task_id"));
  }
  cr_assert_eq(n, expect);
  lt_tokenizer_free(tok);
  cJSON_Delete(tr);
  cJSON_Delete(calls);
}

static void check_token_exact(const job_t *j, int expect) { check_token_exact_as(j, expect, 0); }

Test(agent_gateway, python_urllib_agent_trains_on_exactly_the_tokens_it_was_sent, .timeout = 240) {
  char envs[4096];
  python_envs(envs, sizeof envs, "normal", "");
  job_t j;
  run_job(&j, "gw_py", 6, 8, 2, NULL, envs);
  check_token_exact(&j, 8);
  /* three calls each, the program's own reward, trained on */
  cJSON *tr = export(&j, "jsonl");
  for (const cJSON *t = tr->child; t; t = t->next) {
    cr_assert_str_eq(str(t, "traj_status"), "ok");
    cr_assert_eq(num(t, "turns"), 4);
    cr_assert_float_eq(num(t, "reward"), 0.5, 1e-9);
    cr_assert_float_eq(num(cJSON_GetObjectItemCaseSensitive(t, "components"), "agent"), 0.5, 1e-9);
    cr_assert_str_eq(str(t, "reason"), "agent_done");
  }
  cJSON_Delete(tr);
  cr_assert_geq(lt_test_sql1(j.db, "SELECT count(*) FROM trajectories WHERE status = 'consumed'"), 4,
                "too few trained");
  /* the compacted history started a second context: export shows both */
  tr = export(&j, "tokens");
  for (const cJSON *t = tr->child; t; t = t->next) {
    cr_assert_str_eq(str(t, "format"), "longtail.tokens/2");
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(t, "sequences")), 2);
    cr_assert_float_eq(num(t, "temperature"), 1, 1e-9, "the rollout's, not the request's");
  }
  cJSON_Delete(tr);
  lt_test_rmdir(j.dir);
}

/* The official `openai` npm SDK: a plain call, a streamed call with usage and a tool, the tool's answer and a last
 * call; the policy (scripted) ends every turn with a call of the tool, which the calls with tools get as tool_calls.  No reward from the program: the domain's
 * reward judges the final message. */
Test(agent_gateway, node_openai_sdk_agent_streams_calls_tools_and_trains_token_exact, .timeout = 300) {
  lt_test_need_openai_sdk();
  char envs[4096];
  snprintf(
      envs, sizeof envs,
      "{\"sdk\": {\"type\": \"agent\", \"params\": {\"command\": [\"node\", \"%s/tests/integ/agents/openai_sdk_agent.mjs\", \"%%s\"],"
      " \"tasks\": \"%%s\", \"timeout_s\": 60, \"sandbox\": false}}}",
      lt_test_root());
  job_t j;
  run_job(&j, "gw_node", 4, 4, 2,
          "<tool_call><name>add</name><arg name=\\\"a\\\">1</arg><arg name=\\\"b\\\">2</arg></tool_call>", envs);
  check_token_exact(&j, 4);
  cJSON *calls = read_log(j.log);
  int streamed = 0, with_tools = 0;
  for (const cJSON *c = calls->child; c; c = c->next) {
    streamed += cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "streamed"));
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(c, "tool_calls");
    if (cJSON_GetArraySize(tc) > 0) {
      with_tools++;
      cr_assert_str_eq(str(cJSON_GetObjectItemCaseSensitive(tc->child, "function"), "name"), "add");
    }
  }
  cr_assert_eq(cJSON_GetArraySize(calls), 12, "three calls per episode");
  cr_assert_eq(streamed, 4);
  cr_assert_eq(with_tools, 8, "every answer to a call with tools carried the policy's tool call");
  cJSON_Delete(calls);
  cJSON *tr = export(&j, "jsonl");
  for (const cJSON *t = tr->child; t; t = t->next) {
    cr_assert_str_eq(str(t, "traj_status"), "ok");
    cr_assert_eq(num(t, "turns"), 3);
    cr_assert_null(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(t, "components"), "agent"));
  }
  cJSON_Delete(tr);
  lt_test_rmdir(j.dir);
}

/* An agent of the official SDK of another API shape (tests/integ/agents/SCRIPT): three calls per episode over one
 * growing conversation, the policy (scripted) ending every turn with a call of the tool, the second and third
 * streamed and parsed by the SDK.  Token-exact as with chat completions (one generated span per call, as many tokens
 * as the call's usage.output_tokens, decoding to its text), and the program's history matched to the tokens already
 * sampled: each trajectory is one context.  The agent also asked an unknown route, which named the routes. */
static void sdk_agent_trains_token_exact(const char *tag, const char *script) {
  lt_test_need_openai_sdk();
  char envs[4096];
  snprintf(
      envs, sizeof envs,
      "{\"sdk\": {\"type\": \"agent\", \"params\": {\"command\": [\"node\", \"%s/tests/integ/agents/%s\", \"%%s\"],"
      " \"tasks\": \"%%s\", \"timeout_s\": 60, \"sandbox\": false}}}",
      lt_test_root(), script);
  job_t j;
  run_job(&j, tag, 4, 4, 2,
          "<tool_call><name>add</name><arg name=\\\"a\\\">1</arg><arg name=\\\"b\\\">2</arg></tool_call>", envs);
  cJSON *tr = export(&j, "jsonl");
  cr_assert_eq(cJSON_GetArraySize(tr), 4);
  for (const cJSON *t = tr->child; t; t = t->next) {
    cr_assert_str_eq(str(t, "traj_status"), "ok", "%s: %s", str(t, "reason"), str(t, "error"));
    cr_assert_eq(num(t, "turns"), 3);
  }
  cJSON_Delete(tr);
  check_token_exact(&j, 4);
  cJSON *calls = read_log(j.log);
  int answers = 0, streamed = 0, with_tools = 0, routes = 0;
  for (const cJSON *c = calls->child; c; c = c->next) {
    const cJSON *r404 = cJSON_GetObjectItemCaseSensitive(c, "route404");
    if (r404) {
      routes++;
      cr_assert_eq(num(r404, "status"), 404);
      const char *b = str(r404, "body");
      cr_assert(strstr(b, "POST /e/ID/v1/messages") && strstr(b, "POST /e/ID/v1/responses") &&
                    strstr(b, "POST /e/ID/v1/chat/completions") && strstr(b, "GET /e/ID/v1/models"),
                "%s", b);
      continue;
    }
    answers++;
    streamed += cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "streamed"));
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(c, "tool_calls");
    if (cJSON_GetArraySize(tc) == 1 && !strcmp(str(tc->child, "name"), "add")) with_tools++;
  }
  cr_assert_eq(answers, 12, "three calls per episode");
  cr_assert_eq(streamed, 8);
  cr_assert_eq(with_tools, 12, "every answer carried the policy's tool call");
  cr_assert_eq(routes, strstr(script, "anthropic") ? 4 : 0);
  cJSON_Delete(calls);
  tr = export(&j, "tokens");
  for (const cJSON *t = tr->child; t; t = t->next) {
    const cJSON *seqs = cJSON_GetObjectItemCaseSensitive(t, "sequences");
    cr_assert(!seqs || cJSON_GetArraySize(seqs) == 1, "the later calls extend the first call's context");
  }
  cJSON_Delete(tr);
  cr_assert_geq(lt_test_sql1(j.db, "SELECT count(*) FROM trajectories WHERE status = 'consumed'"), 4,
                "too few trained");
  lt_test_rmdir(j.dir);
}

/* Anthropic's Messages API (/v1/messages, ?beta=true, count_tokens) through the official @anthropic-ai/sdk. */
Test(agent_gateway, anthropic_sdk_agent_messages_with_tools_train_token_exact, .timeout = 300) {
  sdk_agent_trains_token_exact("gw_anthropic", "anthropic_sdk_agent.mjs");
}

/* OpenAI's Responses API, stateless as Codex calls it, through the official openai SDK. */
Test(agent_gateway, responses_api_agent_with_tools_trains_token_exact, .timeout = 300) {
  sdk_agent_trains_token_exact("gw_responses", "responses_sdk_agent.mjs");
}

/* Calls of one episode at once (issue 32): the official SDK's agent sends its first call and, before that is
 * answered, a call for a session title (as opencode does; agents with parallel sub-agents alike).  Each is served
 * (the policy is slow: 12 tokens at 20 ms), recorded token-exact as a context of its own of the one trajectory,
 * and trained: no episode fails on a 400 "still being answered". */
Test(agent_gateway, concurrent_calls_of_one_episode_are_contexts_of_its_trajectory, .timeout = 300) {
  lt_test_need_openai_sdk();
  char envs[4096];
  snprintf(
      envs, sizeof envs,
      "{\"sdk\": {\"type\": \"agent\", \"params\": {\"command\": [\"node\", \"%s/tests/integ/agents/openai_sdk_agent.mjs\", \"%%s\","
      " \"concurrent\"], \"tasks\": \"%%s\", \"timeout_s\": 60, \"sandbox\": false}}}",
      lt_test_root());
  job_t j;
  run_job_with(&j, "gw_conc", 4, 4, 2,
               "<tool_call><name>add</name><arg name=\\\"a\\\">1</arg><arg name=\\\"b\\\">2</arg></tool_call>",
               ", \"token_us\": 20000", NULL, 0, envs);
  cJSON *tr = export(&j, "jsonl");
  cr_assert_eq(cJSON_GetArraySize(tr), 4);
  for (const cJSON *t = tr->child; t; t = t->next) {
    cr_assert_str_eq(str(t, "traj_status"), "ok", "%s: %s", str(t, "reason"), str(t, "error"));
    cr_assert_eq(num(t, "turns"), 4, "the title call counts as a call of the episode");
  }
  cJSON_Delete(tr);
  /* The two calls were in flight together, and each episode's four answers are in its trajectory. */
  cJSON *calls = read_log(j.log);
  int titles = 0;
  for (const cJSON *c = calls->child; c; c = c->next) {
    if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "title"))) continue;
    titles++;
    const cJSON *m = NULL;
    for (const cJSON *d = calls->child; d && !m; d = d->next)
      if (d != c && !strcmp(str(d, "key"), str(c, "key")) && cJSON_GetObjectItemCaseSensitive(d, "start")) m = d;
    cr_assert_not_null(m, "the main call of the title's episode was not answered");
    cr_assert(num(c, "start") < num(m, "end") && num(m, "start") < num(c, "end"), "the calls did not overlap");
  }
  cr_assert_eq(titles, 4);
  cJSON_Delete(calls);
  check_token_exact_as(&j, 4, 1);
  tr = export(&j, "tokens");
  for (const cJSON *t = tr->child; t; t = t->next)
    cr_assert_geq(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(t, "sequences")), 2,
                  "the title is a context of its own");
  cJSON_Delete(tr);
  cr_assert_geq(lt_test_sql1(j.db, "SELECT count(*) FROM trajectories WHERE status = 'consumed'"), 4,
                "too few trained");
  lt_test_rmdir(j.dir);
}

/* A hang's trajectory as a timeout is stored (issue 32): status ok, reason agent_timeout, not truncated (never
 * bootstrapped), its one answered call kept, and the reward of a failed episode: the lower bound of the domain's
 * reward range (0 here), a number, not null. */
static void check_timeout_failure(const cJSON *t, const char *dom) {
  cr_assert_str_eq(str(t, "traj_status"), "ok", "%s: %s", dom, str(t, "error"));
  cr_assert_str_eq(str(t, "reason"), "agent_timeout");
  cr_assert_str_eq(str(t, "finish"), "timeout");
  cr_assert(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(t, "truncated")), "%s: a timeout is not a truncation", dom);
  cr_assert(cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(t, "reward")), "%s: a timeout's reward is a number", dom);
  cr_assert_float_eq(num(t, "reward"), 0, 1e-12);
  cr_assert_eq(num(t, "turns"), 1);
}

/* Misbehaving programs, side by side in one run: a program that cannot start and a crash are env_errors saying why,
 * with no reward; a hang is killed at timeout_s with every process of its group and is the policy's failure (issue 32:
 * not truncated, never bootstrapped; status ok, reason agent_timeout, the lower bound of the reward range); garbage
 * requests get 400/401 and change nothing; an ended episode's key, and a running one's on another episode's URL, get 401.  Every task still ends and the worker
 * keeps serving. */
Test(agent_gateway, crashes_hangs_garbage_and_stale_keys_end_cleanly, .timeout = 300) {
  char envs[8192], one[1024];
  const char *modes[] = {"crash", "hang", "garbage", "stale"};
  strcpy(envs, "{");
  for (int i = 0; i < 4; i++) {
    snprintf(
        one, sizeof one,
        "%s\"%s\": {\"type\": \"agent\", \"params\": {\"command\": [\"python3\", \"%s/tests/integ/agents/urllib_agent.py\","
        " \"%%s\", \"%s\"], \"tasks\": \"%%s\", \"timeout_s\": %d, \"sandbox\": false}}",
        i ? ", " : "", modes[i], lt_test_root(), modes[i], i == 1 ? 3 : 30);
    strcat(envs, one);
  }
  strcat(
      envs,
      ", \"missing\": {\"type\": \"agent\", \"params\": {\"command\": [\"/nonexistent/agent-program\"], \"tasks\": \"%s\","
      " \"sandbox\": false}}}");
  job_t j;
  run_job(&j, "gw_bad", 4, 20, 1, NULL, envs);
  cJSON *tr = export(&j, "jsonl");
  int seen[5] = {0};
  for (const cJSON *t = tr->child; t; t = t->next) {
    const char *dom = str(t, "domain");
    if (!strcmp(dom, "missing")) {
      cr_assert_str_eq(str(t, "traj_status"), "env_error");
      cr_assert(strstr(str(t, "error"), "/nonexistent/agent-program: cannot start"), "%s", str(t, "error"));
      seen[4]++;
    } else if (!strcmp(dom, "crash")) {
      cr_assert_str_eq(str(t, "traj_status"), "env_error");
      cr_assert(strstr(str(t, "error"), "exited with status 3"), "%s", str(t, "error"));
      cr_assert(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(t, "reward")), "a crash is never a zero reward");
      seen[0]++;
    } else if (!strcmp(dom, "hang")) {
      check_timeout_failure(t, "hang");
      seen[1]++;
    } else {
      cr_assert_str_eq(str(t, "traj_status"), "ok", "%s: %s", dom, str(t, "error"));
      cr_assert_str_eq(str(t, "reason"), "agent_done");
      cr_assert_eq(num(t, "turns"), 4, "the refused calls are not turns");
      seen[!strcmp(dom, "garbage") ? 2 : 3]++;
    }
  }
  cr_assert_eq(cJSON_GetArraySize(tr), 20, "every task ended");
  for (int i = 0; i < 5; i++) cr_assert_gt(seen[i], 0, "no %s episode ran", i < 4 ? modes[i] : "missing");
  cJSON_Delete(tr);
  cJSON *calls = read_log(j.log);
  int garbage = 0, stale = 0, foreign = 0;
  for (const cJSON *c = calls->child; c; c = c->next) {
    const char *g = str(c, "garbage");
    if (g[0]) {
      int want = !strcmp(g, "no_key") || !strcmp(g, "bad_key") ? 401 : 400;
      cr_assert_eq(num(c, "status"), want, "%s: %.0f (%s)", g, num(c, "status"), str(c, "error"));
      cr_assert(str(c, "error")[0], "%s: the error says what is wrong", g);
      garbage++;
    }
    if (str(c, "stale")[0]) {
      cr_assert_eq(num(c, "status"), 401, "a key of an ended episode: %.0f", num(c, "status"));
      stale++;
    }
    if (str(c, "foreign")[0]) {
      cr_assert_eq(num(c, "status"), 401, "a running episode's key on another episode's URL: %.0f", num(c, "status"));
      cr_assert(strstr(str(c, "error"), "another episode"), "%s", str(c, "error"));
      foreign++;
    }
    cr_assert_null(cJSON_GetObjectItemCaseSensitive(c, "error_status"), "an agent's own call failed: %s",
                   cJSON_PrintUnformatted(c));
  }
  cr_assert_eq(garbage, 4 * seen[2]);
  cr_assert_gt(stale, 0);
  cr_assert_gt(foreign, 0);
  cJSON_Delete(calls);
  lt_run_t r;
  cr_assert_eq(lt_test_sh(&r, 10, "pgrep -f '[u]rllib_agent.py %s' | wc -l", j.log), 0);
  cr_assert_eq(atoi(r.out), 0, "agent processes outlived their episodes");
  lt_run_free(&r);
  lt_test_rmdir(j.dir);
}

/* Issue 32, item 5: neither the engine's slowness nor the program's start-up is the policy's time.  Every answer
 * takes the scripted engine over 4.5 s (9+ tokens at 0.5 s each), past the hanging programs' whole timeout_s of 3 s,
 * and the late_hang program sleeps 4 s before its first call: timeout_s counts only the program's own time after
 * its first call, so each first call is answered and the hang after it is the timeout (ok, agent_timeout), never an
 * env_error "before any answered call". */
Test(agent_gateway, time_spent_waiting_on_the_engine_is_not_the_programs, .timeout = 240) {
  char envs[4096];
  snprintf(
      envs, sizeof envs,
      "{\"hang\": {\"type\": \"agent\", \"params\": {\"command\": [\"python3\", \"%s/tests/integ/agents/urllib_agent.py\","
      " \"%%s\", \"hang\"], \"tasks\": \"%%s\", \"timeout_s\": 3, \"sandbox\": false}},"
      " \"late\": {\"type\": \"agent\", \"params\": {\"command\": [\"python3\", \"%s/tests/integ/agents/urllib_agent.py\","
      " \"%%s\", \"late_hang\"], \"tasks\": \"%%s\", \"timeout_s\": 3, \"sandbox\": false}}}",
      lt_test_root(), lt_test_root());
  job_t j;
  run_job_with(&j, "gw_slow", 4, 6, 1, NULL, ", \"token_us\": 500000", NULL, 0, envs);
  cJSON *tr = export(&j, "jsonl");
  cr_assert_eq(cJSON_GetArraySize(tr), 6);
  int late = 0;
  for (const cJSON *t = tr->child; t; t = t->next) {
    check_timeout_failure(t, str(t, "domain"));
    late += !strcmp(str(t, "domain"), "late");
  }
  cr_assert_gt(late, 0, "no late_hang episode ran");
  cJSON_Delete(tr);
  lt_test_rmdir(j.dir);
}

/* rollout.on_timeout "mask": a hang's trajectory is kept in the buffer (export shows it, sample status masked) but
 * trains neither the actor nor the critic (never consumed), and each is counted in rollout/timeouts_masked; the
 * domain that ends well still trains. */
Test(agent_gateway, on_timeout_mask_keeps_timeouts_out_of_the_losses_and_counts_them, .timeout = 300) {
  char envs[8192];
  snprintf(
      envs, sizeof envs,
      "{\"hang\": {\"type\": \"agent\", \"params\": {\"command\": [\"python3\", \"%s/tests/integ/agents/urllib_agent.py\","
      " \"%%s\", \"hang\"], \"tasks\": \"%%s\", \"timeout_s\": 3, \"sandbox\": false}},"
      " \"ok\": {\"type\": \"agent\", \"params\": {\"command\": [\"python3\", \"%s/tests/integ/agents/urllib_agent.py\","
      " \"%%s\", \"normal\"], \"tasks\": \"%%s\", \"timeout_s\": 30, \"sandbox\": false}}}",
      lt_test_root(), lt_test_root());
  job_t j;
  run_job_with(&j, "gw_mask", 4, 16, 1, NULL, "",
               "{\"max_new_tokens\": 160, \"max_turns\": 8, \"on_timeout\": \"mask\"}", 0, envs);
  cJSON *tr = export(&j, "jsonl");
  int hangs = 0, oks = 0;
  for (const cJSON *t = tr->child; t; t = t->next) {
    if (!strcmp(str(t, "domain"), "hang")) {
      check_timeout_failure(t, "masked");
      cr_assert_str_eq(str(t, "status"), "masked");
      cr_assert(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(t, "consumed_step")), "a masked timeout was trained on");
      hangs++;
    } else {
      cr_assert_str_eq(str(t, "reason"), "agent_done");
      oks++;
    }
  }
  cJSON_Delete(tr);
  cr_assert_eq(hangs + oks, 16);
  cr_assert_gt(hangs, 0);
  cr_assert_gt(lt_test_sql1(j.db, "SELECT count(*) FROM trajectories WHERE status = 'consumed'"), 0, "nothing trained");
  cr_assert_eq(lt_test_sql1(j.db, "SELECT count(*) FROM trajectories WHERE status = 'masked'"), hangs);
  cr_assert_eq(
      lt_test_sql1(j.db, "SELECT CAST(sum(value) AS INTEGER) FROM metrics WHERE name = 'rollout/timeouts_masked'"),
      hangs, "rollout/timeouts_masked counts every masked timeout");
  lt_test_rmdir(j.dir);
}

static int cmp_str(const void *x, const void *y) { return strcmp(*(char *const *)x, *(char *const *)y); }

/* The `sequences` of the exported trajectories of domain `dom`, each as JSON, sorted, one per line. */
static char *sequences_of(const job_t *j, const char *dom) {
  cJSON *tr = export(j, "tokens");
  char *seq[64];
  int n = 0;
  for (const cJSON *t = tr->child; t && n < 64; t = t->next)
    if (!strcmp(str(t, "domain"), dom))
      seq[n++] = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(t, "sequences"));
  cJSON_Delete(tr);
  qsort(seq, (size_t)n, sizeof *seq, cmp_str);
  size_t len = 1;
  for (int i = 0; i < n; i++) len += strlen(seq[i]) + 1;
  char *all = calloc(1, len);
  for (int i = 0; i < n; i++) strcat(strcat(all, seq[i]), "\n"), free(seq[i]);
  return all;
}

/* params.sandbox (the default where the host has user namespaces): the program runs in longtail's sandbox and its
 * only network is its gateway.  The sandboxed urllib agent first tries a listener of this test on the host's
 * loopback and the internet (exit 7 if either answers), then records exactly the tokens (and versions, logprobs,
 * masks) the same run unsandboxed records; a hanging agent that left a setsid sleeper behind dies at timeout_s with
 * all of it.  Both runs freeze the policy (learner.enabled false): with a learner, which version a turn samples
 * under depends on when it runs, which the sandbox cannot change and a busy machine does (it failed 1 run in 3). */
Test(agent_gateway, sandboxed_agent_reaches_only_its_gateway_and_trains_the_same_tokens, .timeout = 300) {
  need_sandbox();
  int port;
  int l = lt_test_listen_loopback(&port);
  cr_assert_geq(l, 0);
  char envs[4096], plain[4096];
  snprintf(
      envs, sizeof envs,
      "{\"chat\": {\"type\": \"agent\", \"params\": {\"command\": [\"python3\", \"%s/tests/integ/agents/urllib_agent.py\","
      " \"-%%s\", \"probe:%d\"], \"tasks\": \"%%s\", \"timeout_s\": 30}},"
      " \"hang\": {\"type\": \"agent\", \"params\": {\"command\": [\"python3\", \"%s/tests/integ/agents/urllib_agent.py\","
      " \"-%%s\", \"hang_setsid\"], \"tasks\": \"%%s\", \"timeout_s\": 3, \"sandbox\": true}}}",
      lt_test_root(), port, lt_test_root());
  job_t j;
  run_job_with(&j, "gw_sandbox", 4, 8, 2, NULL, "", NULL, 1, envs);
  cJSON *tr = export(&j, "jsonl");
  int chat = 0, hang = 0;
  for (const cJSON *t = tr->child; t; t = t->next) {
    if (!strcmp(str(t, "domain"), "hang")) {
      cr_assert_str_eq(str(t, "reason"), "agent_timeout", "%s", str(t, "error"));
      hang++;
      continue;
    }
    cr_assert_str_eq(str(t, "traj_status"), "ok", "%s", str(t, "error"));
    cr_assert_str_eq(str(t, "reason"), "agent_done");
    cr_assert_eq(num(t, "turns"), 4);
    cr_assert_float_eq(num(t, "reward"), 0.5, 1e-9);
    chat++;
  }
  cr_assert_eq(chat + hang, 8, "every task ended");
  cr_assert_gt(chat, 0);
  cr_assert_gt(hang, 0);
  cJSON_Delete(tr);
  fcntl(l, F_SETFL, O_NONBLOCK);
  cr_assert_lt(accept(l, NULL, NULL), 0, "the test's listener got a connection from a sandboxed agent");
  close(l);
  lt_run_t r;
  cr_assert_eq(lt_test_sh(&r, 10, "pgrep -f '[u]rllib_agent.py -%s' | wc -l", j.log), 0);
  cr_assert_eq(atoi(r.out), 0, "sandboxed agent processes outlived their episodes");
  lt_run_free(&r);
  /* the same run without the sandbox, under the same (frozen) policy: the same tokens, task by task */
  snprintf(
      plain, sizeof plain,
      "{\"chat\": {\"type\": \"agent\", \"params\": {\"command\": [\"python3\", \"%s/tests/integ/agents/urllib_agent.py\","
      " \"-%%s\", \"normal\"], \"tasks\": \"%%s\", \"timeout_s\": 30, \"sandbox\": false}},"
      " \"hang\": {\"type\": \"agent\", \"params\": {\"command\": [\"python3\", \"%s/tests/integ/agents/urllib_agent.py\","
      " \"-%%s\", \"hang\"], \"tasks\": \"%%s\", \"timeout_s\": 3, \"sandbox\": false}}}",
      lt_test_root(), lt_test_root());
  job_t u;
  run_job_with(&u, "gw_plain", 4, 8, 2, NULL, "", NULL, 1, plain);
  char *a = sequences_of(&j, "chat"), *b = sequences_of(&u, "chat");
  cr_assert(a[0], "no chat trajectory");
  cr_assert_str_eq(a, b, "the sandboxed run recorded other tokens than the plain one");
  free(a), free(b);
  lt_test_rmdir(j.dir);
  lt_test_rmdir(u.dir);
}

/* The gateway's limits end an episode whatever the program does next: the call past rollout.max_turns gets a 400
 * and the episode is truncated (turn_limit); a context that no longer fits rollout.max_context gets OpenAI's
 * context_length_exceeded and the episode is truncated (context_limit).  Both programs exit 0 and print a reward:
 * the truncation stands, and the domain's reward (not the program's) judges the last answer. */
static void limit_run(const char *tag, const char *rollout, const char *reason, int turns) {
  char envs[4096];
  python_envs(envs, sizeof envs, "normal", "");
  job_t j;
  run_job_with(&j, tag, 4, 4, 2, NULL, "", rollout, 0, envs);
  cJSON *tr = export(&j, "jsonl");
  cr_assert_eq(cJSON_GetArraySize(tr), 4);
  for (const cJSON *t = tr->child; t; t = t->next) {
    cr_assert_str_eq(str(t, "traj_status"), "ok");
    cr_assert_str_eq(str(t, "reason"), reason);
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(t, "truncated")));
    cr_assert_eq(num(t, "turns"), turns);
    cr_assert_null(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(t, "components"), "agent"));
  }
  cJSON_Delete(tr);
  cJSON *calls = read_log(j.log);
  int refused = 0;
  for (const cJSON *c = calls->child; c; c = c->next)
    if (cJSON_GetObjectItemCaseSensitive(c, "error_status")) {
      cr_assert_eq(num(c, "error_status"), 400);
      refused++;
    }
  cr_assert_eq(refused, 4, "one refused call per episode");
  cJSON_Delete(calls);
  check_token_exact(&j, 4);
  lt_test_rmdir(j.dir);
}

Test(agent_gateway, the_turn_limit_ends_an_episode_truncated, .timeout = 200) {
  limit_run("gw_turns", "{\"max_new_tokens\": 40, \"max_turns\": 2}", "turn_limit", 2);
}

Test(agent_gateway, a_context_that_no_longer_fits_ends_an_episode_truncated, .timeout = 200) {
  limit_run("gw_ctx", "{\"max_new_tokens\": 40, \"max_turns\": 8, \"max_context\": 100}", "context_limit", 1);
}

/* params.honor_sampling: the program's temperature is used and recorded for the learner; an episode keeps one (a
 * call that changes it is refused, naming the field).  Without it the rollout's temperature is recorded. */
Test(agent_gateway, honor_sampling_records_the_programs_temperature, .timeout = 200) {
  char envs[4096];
  python_envs(envs, sizeof envs, "temp", ", \"honor_sampling\": true");
  job_t j;
  run_job(&j, "gw_temp", 4, 4, 2, NULL, envs);
  cJSON *tr = export(&j, "tokens");
  for (const cJSON *t = tr->child; t; t = t->next) {
    cr_assert_float_eq(num(t, "temperature"), 0.5, 1e-9);
    cr_assert_eq(num(t, "turns"), 4);
  }
  cr_assert_eq(cJSON_GetArraySize(tr), 4);
  cJSON_Delete(tr);
  cJSON *calls = read_log(j.log);
  int refused = 0;
  for (const cJSON *c = calls->child; c; c = c->next)
    if (cJSON_GetObjectItemCaseSensitive(c, "temp_change")) {
      cr_assert_eq(num(c, "temp_change"), 400);
      cr_assert(strstr(str(c, "error"), "temperature"), "%s", str(c, "error"));
      refused++;
    }
  cr_assert_eq(refused, 4);
  cJSON_Delete(calls);
  lt_test_rmdir(j.dir);
}

/* Issue 41: a run whose agent program cannot work (it writes its error to stdout and exits 1 before any call, as
 * `claude -p` does) is not silent.  The daemon logs each failed episode with its error (rate-limited), the error keeps
 * the end of the program's stdout as well as its stderr, rollout/failed/env_error counts them, and a run that ends
 * with no trainable trajectory says so and exits 8 (docs/exit-codes.md) instead of 0. */
Test(agent_gateway, a_run_whose_episodes_all_fail_says_why_counts_them_and_exits_8, .timeout = 200) {
  char envs[4096], path[4300];
  python_envs(envs, sizeof envs, "crash_stdout", "");
  job_t j;
  int st = job_status(&j, "gw_allfail", 4, 4, 2, NULL, "", NULL, 0, "", envs);
  snprintf(path, sizeof path, "%s/daemon.err", j.dir);
  char *err = lt_test_read(path);
  cr_assert_not_null(err);
  cr_assert_eq(st, 8, "longtail train exit %d: %s", st, err);
  cr_assert(strstr(err, "no trainable trajectory: of 4 episodes, 4 env_error"), "%s", err);
  cr_assert(strstr(err, "failed: env_error: agent program exited with status 1; stdout: Invalid API key"), "%s", err);
  int said = 0;
  for (const char *p = strstr(err, "episode_failed:"); p; p = strstr(p + 1, "episode_failed:")) said++;
  cr_assert_eq(said, 1, "four failures within 10 s are said once: %s", err);
  free(err);
  cJSON *tr = export(&j, "jsonl");
  cr_assert_eq(cJSON_GetArraySize(tr), 4);
  for (const cJSON *t = tr->child; t; t = t->next) {
    cr_assert_str_eq(str(t, "traj_status"), "env_error");
    cr_assert(strstr(str(t, "error"), "exited with status 1; stdout: Invalid API key · Please run /login"), "%s",
              str(t, "error"));
  }
  cJSON_Delete(tr);
  cr_assert_eq(
      lt_test_sql1(j.db, "SELECT CAST(sum(value) AS INTEGER) FROM metrics WHERE name = 'rollout/failed/env_error'"), 4);
  lt_test_rmdir(j.dir);
}

/* Issue 41: the agent environment exports ANTHROPIC_BASE_URL (the episode's base, so that /v1/messages after it
 * lands on the gateway) and ANTHROPIC_API_KEY beside the OpenAI variables: an agent that speaks only Anthropic's
 * Messages API finds its episode with them alone, and trains token-exact. */
Test(agent_gateway, the_anthropic_variables_lead_a_messages_agent_to_its_episode, .timeout = 200) {
  char envs[4096];
  python_envs(envs, sizeof envs, "messages", "");
  job_t j;
  run_job(&j, "gw_messages", 4, 4, 2, NULL, envs);
  check_token_exact(&j, 4);
  cJSON *tr = export(&j, "jsonl");
  for (const cJSON *t = tr->child; t; t = t->next) {
    cr_assert_str_eq(str(t, "traj_status"), "ok", "%s", str(t, "error"));
    cr_assert_eq(num(t, "turns"), 4);
    cr_assert_float_eq(num(t, "reward"), 0.5, 1e-9);
  }
  cJSON_Delete(tr);
  lt_test_rmdir(j.dir);
}

/* Issue 41: a sandboxed agent program runs under the run's `sandbox` section (a Bun-based CLI was killed at the
 * default 512 MB whatever the config said), and its domain's params.memory_mb overrides the memory limit.  Both
 * domains' programs hold 400 MB: under the run's 256 MB one is killed (env_error), with its domain's 1024 MB the
 * other trains.  A setting the program cannot honour is a config error: memory_mb without a sandbox. */
Test(agent_gateway, sandboxed_programs_take_the_runs_sandbox_section_and_their_domains_memory, .timeout = 300) {
  need_sandbox();
  char envs[4096], path[4300];
  snprintf(envs, sizeof envs,
           "{\"big\": {\"type\": \"agent\", \"params\": {\"command\": [\"python3\", "
           "\"%s/tests/integ/agents/urllib_agent.py\","
           " \"-%%s\", \"alloc:400\"], \"tasks\": \"%%s\", \"timeout_s\": 30, \"memory_mb\": 1024}},"
           " \"small\": {\"type\": \"agent\", \"params\": {\"command\": [\"python3\", "
           "\"%s/tests/integ/agents/urllib_agent.py\","
           " \"-%%s\", \"alloc:400\"], \"tasks\": \"%%s\", \"timeout_s\": 30}}}",
           lt_test_root(), lt_test_root());
  job_t j;
  cr_assert_eq(job_status(&j, "gw_memory", 4, 8, 2, NULL, "", NULL, 0, ", \"sandbox\": {\"memory_mb\": 256}", envs), 0);
  cJSON *tr = export(&j, "jsonl");
  int big = 0, small = 0;
  for (const cJSON *t = tr->child; t; t = t->next) {
    if (!strcmp(str(t, "domain"), "big")) {
      cr_assert_str_eq(str(t, "traj_status"), "ok", "%s", str(t, "error"));
      cr_assert_eq(num(t, "turns"), 4);
      big++;
    } else {
      cr_assert_str_eq(str(t, "traj_status"), "env_error", "the run's sandbox.memory_mb did not hold");
      small++;
    }
  }
  cr_assert_eq(big + small, 8);
  cr_assert_gt(big, 0);
  cr_assert_gt(small, 0);
  cJSON_Delete(tr);
  lt_test_rmdir(j.dir);
  python_envs(envs, sizeof envs, "normal", ", \"memory_mb\": 1024");
  job_t k;
  cr_assert_eq(job_status(&k, "gw_memory_plain", 4, 4, 2, NULL, "", NULL, 0, "", envs), 2,
               "memory_mb without a sandbox");
  snprintf(path, sizeof path, "%s/daemon.err", k.dir);
  char *err = lt_test_read(path);
  cr_assert(
      err && strstr(err, "envs.chat.params.memory_mb: applies to the program's sandbox, and params.sandbox is false"),
      "%s", err);
  free(err);
  lt_test_rmdir(k.dir);
}

/* Issue 41: params.read_only binds host directories read-only into the program's sandbox, and a file of its
 * command that lies in one runs in place: the Node agent of the official `openai` SDK runs from its directory with
 * its node_modules beside it, not copied anywhere (it logs into the sandbox's /tmp: nothing of the host is
 * writable). */
Test(agent_gateway, a_sandboxed_node_agent_runs_from_its_read_only_directory, .timeout = 300) {
  need_sandbox();
  lt_test_need_openai_sdk();
  char envs[4096];
  snprintf(envs, sizeof envs,
           "{\"sdk\": {\"type\": \"agent\", \"params\": {\"command\": [\"node\", "
           "\"%s/tests/integ/agents/openai_sdk_agent.mjs\","
           " \"/tmp/calls.jsonl\", \"-%%s\"], \"tasks\": \"%%s\", \"timeout_s\": 60, \"read_only\": "
           "[\"%s/tests/integ/agents\"],"
           " \"memory_mb\": 1024}}}",
           lt_test_root(), lt_test_root());
  job_t j;
  run_job(&j, "gw_ro", 4, 4, 2,
          "<tool_call><name>add</name><arg name=\\\"a\\\">1</arg><arg name=\\\"b\\\">2</arg></tool_call>", envs);
  cJSON *tr = export(&j, "jsonl");
  cr_assert_eq(cJSON_GetArraySize(tr), 4);
  for (const cJSON *t = tr->child; t; t = t->next) {
    cr_assert_str_eq(str(t, "traj_status"), "ok", "%s", str(t, "error"));
    cr_assert_eq(num(t, "turns"), 3);
  }
  cJSON_Delete(tr);
  lt_test_rmdir(j.dir);
}

/* ---- real agent CLIs (issue 41): each example's `agent` domain as it is, at test size ---- */

/* Runs examples/agents/EXAMPLE/config.json (its command line, sandbox, read-only node_modules, stdin prompt) with the
 * scripted policy and 4 tasks: every episode is stored ok with the tokens the policy generated for the CLI's calls,
 * and the learner trains on them.  Skipped where the CLIs cannot be installed or run, or there is no sandbox. */
static void cli_trains(const char *tag, const char *example) {
  need_sandbox();
  lt_test_need_npm("test-agent-clis.sh", "Claude Code and Codex CLI");
  job_t j = {.dir = lt_test_tmpdir(tag)};
  snprintf(j.rd, sizeof j.rd, "%s/run", j.dir);
  snprintf(j.db, sizeof j.db, "%s/buffer.db", j.rd);
  char cfg[4200];
  snprintf(cfg, sizeof cfg, "%s/examples/agents/%s/config.json", lt_test_root(), example);
  const char *argv[] = {"longtail",
                        "train",
                        cfg,
                        "--run-dir",
                        j.rd,
                        "--set",
                        "scheduler.max_tasks=4",
                        "--set",
                        "scheduler.group_size=2",
                        "--set",
                        "learner.batch.trajectories=4",
                        "--set",
                        "workers.backend=scripted",
                        "--set",
                        "workers.scripted.mean_tokens=8",
                        "--set",
                        "workers.scripted.tail_fraction=0",
                        NULL};
  pid_t d = lt_test_spawn(j.dir, "daemon", argv);
  cr_assert_gt(d, 0);
  int st = lt_test_wait(d, 300);
  cr_assert_eq(st, 0, "longtail train exit %d (logs in %s)", st, j.dir);
  cJSON *tr = export(&j, "tokens");
  lt_tokenizer_t *tok;
  cr_assert_eq(lt_tokenizer_byte(LT_TOKENIZER_BYTE_VOCAB, &tok), 0);
  cr_assert_eq(cJSON_GetArraySize(tr), 4);
  for (const cJSON *t = tr->child; t; t = t->next) {
    cr_assert_str_eq(str(t, "traj_status"), "ok", "%s: %s", str(t, "reason"), str(t, "error"));
    cJSON *flat = flatten(t);
    const cJSON *toks = cJSON_GetObjectItemCaseSensitive(flat, "tokens"),
                *mask = cJSON_GetObjectItemCaseSensitive(flat, "loss_mask");
    int n = cJSON_GetArraySize(toks), ngen = 0;
    int32_t *gen = malloc(sizeof *gen * (size_t)n);
    for (int i = 0; i < n; i++)
      if (cJSON_GetArrayItem(mask, i)->valueint) gen[ngen++] = cJSON_GetArrayItem(toks, i)->valueint;
    char *text = NULL;
    size_t len;
    cr_assert_eq(lt_tokenizer_decode(tok, gen, ngen, 1, &text, &len), 0);
    cr_assert(ngen > 0 && strstr(text, "#### 0"), "the policy's answer is not in the trajectory: %s", text);
    free(text), free(gen);
    cJSON_Delete(flat);
  }
  lt_tokenizer_free(tok);
  cJSON_Delete(tr);
  cr_assert_geq(lt_test_sql1(j.db, "SELECT count(*) FROM trajectories WHERE status = 'consumed'"), 4,
                "the run did not train");
  lt_test_rmdir(j.dir);
}

/* Claude Code: Anthropic's Messages API, found through ANTHROPIC_BASE_URL and ANTHROPIC_API_KEY. */
Test(agent_cli, claude_code_trains_through_an_agent_environment, .timeout = 1200) {
  cli_trains("cli_claude", "claude-code");
}

/* Codex CLI: OpenAI's Responses API, through a provider whose base_url is the episode's OPENAI_BASE_URL. */
Test(agent_cli, codex_cli_trains_through_an_agent_environment, .timeout = 1200) { cli_trains("cli_codex", "codex"); }
