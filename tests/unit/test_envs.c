/* Environments: arith problems, worked steps, held-out split, demonstrations, episodes. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "cli/commands.h"
#include "envs/env.h"
#include "rewards/reward.h"
#include "sandbox/sandbox.h"
#include "tests/support/harness.h"
#include "util/error.h"
#include "util/json.h"

static lt_envs_t *make_envs(const char *json, uv_loop_t *loop) {
  lt_config_t cfg;
  cJSON *root = cJSON_Parse(json);
  cr_assert_not_null(root);
  cr_assert_eq(lt_config_from_json(&cfg, root, NULL, 0, lt_all_schemas, lt_all_nschemas), 0, "%s", lt_error_msg());
  lt_envs_t *e;
  int rc = lt_envs_create(&cfg, loop, &e);
  lt_config_free(&cfg);
  cr_assert_eq(rc, 0, "%s", lt_error_msg());
  return e;
}

static const char *spec_str(const cJSON *s, const char *k) { return cJSON_GetObjectItem(s, k)->valuestring; }

Test(envs, arith_problems_are_deterministic_and_correct) {
  lt_envs_t *e = make_envs(
      "{\"envs\": {\"math\": {\"type\": \"arith\", \"params\": {\"digits_min\": 1, \"digits_max\": 13, "
      "\"ops\": [\"+\", \"-\", \"*\"]}}}}",
      NULL);
  for (uint64_t i = 0; i < 300; i++) {
    cJSON *s1, *s2;
    cr_assert_eq(lt_envs_sample(e, "math", i, 0, &s1), 0);
    cr_assert_eq(lt_envs_sample(e, "math", i, 0, &s2), 0);
    cr_assert(cJSON_Compare(s1, s2, 1), "problem %llu is not deterministic", (unsigned long long)i);
    const char *a = spec_str(s1, "a"), *b = spec_str(s1, "b"), *op = spec_str(s1, "op"), *ans = spec_str(s1, "answer");
    if (strlen(a) <= 9 && strlen(b) <= 9) { /* check in 64-bit arithmetic where it fits */
      long long x = atoll(a), y = atoll(b), want = op[0] == '+' ? x + y : op[0] == '-' ? x - y : x * y;
      cr_expect_eq(atoll(ans), want, "%s%s%s = %s", a, op, b, ans);
    }
    cJSON_Delete(s1), cJSON_Delete(s2);
  }
  lt_envs_free(e);
}

/* The worker asks the environment, not its type name, whether a domain needs the sandbox. */
Test(envs, an_environment_declares_whether_it_needs_the_sandbox) {
  lt_envs_t *e = make_envs("{\"envs\": {\"py\": {\"type\": \"code\"}, \"math\": {\"type\": \"arith\"}}}", NULL);
  cr_expect_eq(lt_envs_needs_sandbox(e, "py"), 1);
  cr_expect_eq(lt_envs_needs_sandbox(e, "math"), 0);
  cr_expect_eq(lt_envs_needs_sandbox(e, "nope"), 0);
  lt_envs_free(e);
}

Test(envs, held_out_problems_never_appear_in_training) {
  lt_envs_t *e =
      make_envs("{\"envs\": {\"m\": {\"type\": \"arith\", \"params\": {\"digits_min\": 2, \"digits_max\": 2}}}}", NULL);
  /* 2-digit addition has 8100 problems: sample heavily from both splits. */
  char(*seen)[16] = calloc(8000, 16);
  int nseen = 0;
  for (uint64_t i = 0; i < 8000; i++) {
    cJSON *s;
    cr_assert_eq(lt_envs_sample(e, "m", i, 0, &s), 0);
    snprintf(seen[nseen++], 16, "%s+%s", spec_str(s, "a"), spec_str(s, "b"));
    cJSON_Delete(s);
  }
  int distinct_eval = 0;
  for (uint64_t i = 0; i < 300; i++) {
    cJSON *s;
    cr_assert_eq(lt_envs_sample(e, "m", i, 1, &s), 0);
    char key[16];
    snprintf(key, sizeof key, "%s+%s", spec_str(s, "a"), spec_str(s, "b"));
    for (int k = 0; k < nseen; k++)
      cr_assert_str_neq(seen[k], key, "held-out problem %s was sampled for training", key);
    distinct_eval++;
    cJSON_Delete(s);
  }
  cr_expect_eq(distinct_eval, 300);
  free(seen);
  lt_envs_free(e);
}

Test(envs, worked_steps_and_demonstration_errors) {
  lt_envs_t *e = make_envs(
      "{\"envs\": {\"m\": {\"type\": \"arith\", \"params\": {\"digits_min\": 3, \"digits_max\": 3, "
      "\"demo_error_rate\": 1.0}}}}",
      NULL);
  /* With every demonstration wrong, problems with a carry get the wrong answer in the demo. */
  int with_carry = 0, wrong = 0;
  for (uint64_t i = 0; i < 200; i++) {
    cJSON *msgs, *spec;
    char *resp;
    cr_assert_eq(lt_envs_demo(e, "m", i, &msgs, &resp), 0);
    cr_assert_eq(lt_envs_sample(e, "m", i, 0, &spec), 0);
    const char *q = cJSON_GetObjectItem(cJSON_GetArrayItem(msgs, 0), "content")->valuestring;
    char want[64];
    snprintf(want, sizeof want, "%s+%s=", spec_str(spec, "a"), spec_str(spec, "b"));
    cr_expect_str_eq(q, want);
    char *got = lt_reward_extract_answer(resp);
    cr_assert_not_null(got, "%s", resp);
    int carry = strstr(resp, "+1=") != NULL || strcmp(got, spec_str(spec, "answer")) != 0;
    if (strcmp(got, spec_str(spec, "answer")) != 0) wrong++;
    with_carry += carry;
    free(got), free(resp);
    cJSON_Delete(msgs), cJSON_Delete(spec);
  }
  cr_expect_gt(wrong, 60);
  cr_expect_leq(wrong, with_carry);
  lt_envs_free(e);
  /* Exact worked format. */
  e = make_envs("{\"envs\": {\"m\": {\"type\": \"arith\"}}}", NULL);
  uv_loop_t loop;
  uv_loop_init(&loop);
  lt_envs_free(e);
  e = make_envs("{\"envs\": {\"m\": {\"type\": \"arith\"}}}", &loop);
  cJSON *spec = cJSON_Parse("{\"a\": \"478\", \"op\": \"+\", \"b\": \"356\"}"), *msgs;
  lt_episode_t *ep;
  cr_assert_eq(lt_episode_open(e, "m", spec, 1, &ep, &msgs), 0);
  cr_expect_str_eq(cJSON_GetObjectItem(lt_episode_reference(ep), "answer")->valuestring, "834");
  cJSON_Delete(msgs);
  lt_episode_close(ep);
  cJSON *bad = cJSON_Parse("{\"a\": \"12x\", \"op\": \"+\", \"b\": \"3\"}");
  cr_expect_eq(lt_episode_open(e, "m", bad, 1, &ep, &msgs), LT_EINVAL);
  cJSON_Delete(bad);
  cJSON_Delete(spec);
  uv_run(&loop, UV_RUN_DEFAULT);
  lt_envs_free(e);
  cr_expect_eq(uv_loop_close(&loop), 0);
}

static void step_done(lt_episode_t *ep, lt_env_step_t *res, void *ud) {
  *(int *)ud = res->done + 10 * (res->error != 0);
  cJSON_Delete(res->observations);
  free(res->error_msg);
  lt_episode_close(ep);
}

Test(envs, episode_step_completes_on_the_loop) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  lt_envs_t *e = make_envs("{\"envs\": {\"m\": {\"type\": \"arith\"}}}", &loop);
  cJSON *spec, *msgs;
  cr_assert_eq(lt_envs_sample(e, "m", 5, 0, &spec), 0);
  lt_episode_t *ep;
  cr_assert_eq(lt_episode_open(e, "m", spec, 1, &ep, &msgs), 0);
  int got = -1;
  cr_assert_eq(lt_episode_step(ep, "#### 1", NULL, 0, step_done, &got), 0);
  cr_expect_eq(got, -1, "the callback must not run inside the call");
  uv_run(&loop, UV_RUN_DEFAULT);
  cr_expect_eq(got, 1);
  cJSON_Delete(spec), cJSON_Delete(msgs);
  lt_envs_free(e);
  cr_expect_eq(uv_loop_close(&loop), 0);
}

Test(envs, bad_params_name_the_key) {
  lt_config_t cfg;
  cJSON *root = cJSON_Parse("{\"envs\": {\"m\": {\"type\": \"arith\", \"params\": {\"digits_mx\": 3}}}}");
  cr_assert_eq(lt_config_from_json(&cfg, root, NULL, 0, lt_all_schemas, lt_all_nschemas), 0);
  lt_envs_t *e;
  cr_expect_eq(lt_envs_create(&cfg, NULL, &e), LT_ECONFIG);
  cr_expect(strstr(lt_error_msg(), "envs.m.params.digits_mx"), "%s", lt_error_msg());
  lt_config_free(&cfg);
}

static int have_sandbox(void) {
  lt_sandbox_caps_t c;
  lt_sandbox_probe(&c);
  return c.userns;
}

static void on_code_step(lt_episode_t *ep, lt_env_step_t *res, void *ud) { *(lt_env_step_t *)ud = *res; }

/* Every task's reference solution passes all its tests in the sandbox, through
 * an episode on the loop (the step runs on the thread pool); a wrong one does not. */
Test(envs, code_tasks_reference_solutions_pass_in_the_sandbox, .timeout = 120) {
  if (!have_sandbox()) cr_skip_test("no user namespaces: the code environment cannot run here");
  uv_loop_t loop;
  uv_loop_init(&loop);
  lt_envs_t *e = make_envs("{\"envs\": {\"py\": {\"type\": \"code\"}}, \"sandbox\": {\"pool\": 1}}", &loop);
  int seen_tasks = 0;
  char names[16][32] = {{0}};
  for (uint64_t i = 0; i < 40 && seen_tasks < 8; i++) {
    cJSON *spec, *msgs, *open_msgs;
    char *resp;
    cr_assert_eq(lt_envs_sample(e, "py", i, 0, &spec), 0);
    const char *task = cJSON_GetObjectItem(spec, "task")->valuestring;
    int known = 0;
    for (int k = 0; k < seen_tasks; k++) known |= strcmp(names[k], task) == 0;
    if (known) {
      cJSON_Delete(spec);
      continue;
    }
    snprintf(names[seen_tasks++], 32, "%s", task);
    cr_assert_eq(lt_envs_demo(e, "py", i, &msgs, &resp), 0);
    lt_episode_t *ep;
    cr_assert_eq(lt_episode_open(e, "py", spec, 1, &ep, &open_msgs), 0, "%s", lt_error_msg());
    lt_env_step_t res = {0};
    res.done = -1;
    cr_assert_eq(lt_episode_step(ep, resp, NULL, 0, on_code_step, &res), 0);
    while (res.done == -1) uv_run(&loop, UV_RUN_ONCE);
    cr_expect_eq(res.error, 0, "%s", res.error_msg ? res.error_msg : "");
    cr_expect_eq(res.done, 1);
    const cJSON *ref = lt_episode_reference(ep);
    cr_expect_float_eq(cJSON_GetObjectItem(ref, "score")->valuedouble, 1.0, 0, "task %s: %s", task, resp);
    cJSON_Delete(res.observations);
    /* A wrong program on the same episode scores below 1, and "passed" printouts earn nothing. */
    res.done = -1;
    cr_assert_eq(lt_episode_step(ep, "```python\ndef solve(*a):\n    print('R 0 1')\n    return 0\n```", NULL, 0,
                                 on_code_step, &res),
                 0);
    while (res.done == -1) uv_run(&loop, UV_RUN_ONCE);
    cr_expect_lt(cJSON_GetObjectItem(lt_episode_reference(ep), "score")->valuedouble, 1.0, "task %s", task);
    cJSON_Delete(res.observations);
    lt_episode_close(ep);
    cJSON_Delete(spec), cJSON_Delete(msgs), cJSON_Delete(open_msgs), free(resp);
  }
  cr_expect_eq(seen_tasks, 8, "the bank has 8 tasks");
  uv_run(&loop, UV_RUN_DEFAULT);
  lt_envs_free(e);
  cr_expect_eq(uv_loop_close(&loop), 0);
}

/* Closing an episode while its step runs on the thread pool frees it afterwards without calling back. */
Test(envs, code_episode_closed_mid_step) {
  if (!have_sandbox()) cr_skip_test("no user namespaces: the code environment cannot run here");
  uv_loop_t loop;
  uv_loop_init(&loop);
  lt_envs_t *e = make_envs("{\"envs\": {\"py\": {\"type\": \"code\"}}, \"sandbox\": {\"pool\": 0}}", &loop);
  cJSON *spec, *msgs;
  cr_assert_eq(lt_envs_sample(e, "py", 3, 0, &spec), 0);
  lt_episode_t *ep;
  cr_assert_eq(lt_episode_open(e, "py", spec, 1, &ep, &msgs), 0);
  lt_env_step_t res = {0};
  res.done = -1;
  cr_assert_eq(lt_episode_step(ep, "```python\ndef solve(*a):\n    return 1\n```", NULL, 0, on_code_step, &res), 0);
  lt_episode_close(ep);
  uv_run(&loop, UV_RUN_DEFAULT);
  cr_expect_eq(res.done, -1, "a closed episode's callback ran");
  lt_envs_free(e);
  cr_expect_eq(uv_loop_close(&loop), 0);
  cJSON_Delete(spec), cJSON_Delete(msgs);
}

/* ---- tools: SQLite domains from a JSON spec ---- */

static char *fill_params(const char *t, const cJSON *params) {
  char out[1024] = "";
  for (const char *p = t; *p;) {
    const char *c = *p == '{' ? strchr(p, '}') : NULL;
    char key[64] = "";
    if (c) snprintf(key, sizeof key, "%.*s", (int)(c - p - 1), p + 1);
    const cJSON *v = c ? cJSON_GetObjectItem(params, key) : NULL;
    size_t l = strlen(out);
    if (v) snprintf(out + l, sizeof out - l, "%s", v->valuestring), p = c + 1;
    else snprintf(out + l, sizeof out - l, "%c", *p++);
  }
  return strdup(out);
}

static void on_tool_step(lt_episode_t *ep, lt_env_step_t *res, void *ud) { *(lt_env_step_t *)ud = *res; }

static lt_env_step_t step_now(uv_loop_t *loop, lt_episode_t *ep, const char *text, lt_tool_call_t *calls, int n) {
  lt_env_step_t res = {.done = -1};
  cr_assert_eq(lt_episode_step(ep, text, calls, n, on_tool_step, &res), 0, "%s", lt_error_msg());
  while (res.done == -1) uv_run(loop, UV_RUN_ONCE);
  return res;
}

/* For every domain shipped: the reference solution, called as the policy would,
 * reaches the expected end state (success); a reply without acting does not. */
Test(envs, tools_domains_reference_solutions_succeed) {
  const char *domains[] = {"bank", "library", "pantry", "safe"};
  for (int d = 0; d < 4; d++) {
    char json[1024], path[4200];
    snprintf(path, sizeof path, "%s/configs/envs/%s.json", lt_test_root(), domains[d]);
    snprintf(json, sizeof json, "{\"envs\": {\"t\": {\"type\": \"tools\", \"params\": {\"spec\": \"%s\"}}}}", path);
    uv_loop_t loop;
    uv_loop_init(&loop);
    lt_envs_t *e = make_envs(json, &loop);
    cJSON *dspec = NULL;
    cr_assert_eq(lt_json_parse_file(path, &dspec), 0);
    int successes = 0, tasks_seen[8] = {0};
    for (uint64_t i = 0; i < 30; i++) {
      cJSON *spec, *msgs;
      cr_assert_eq(lt_envs_sample(e, "t", i, i % 5 == 0, &spec), 0, "%s", lt_error_msg());
      int ti = cJSON_GetObjectItem(spec, "task")->valueint;
      tasks_seen[ti] = 1;
      const cJSON *task = cJSON_GetArrayItem(cJSON_GetObjectItem(dspec, "tasks"), ti),
                  *params = cJSON_GetObjectItem(spec, "params");
      lt_episode_t *ep;
      cr_assert_eq(lt_episode_open(e, "t", spec, 1, &ep, &msgs), 0, "%s", lt_error_msg());
      cr_expect(strstr(cJSON_GetArrayItem(msgs, 0)->child->next->valuestring, "<tool_call>"),
                "the system prompt shows the call format");
      /* Answering at once fails (nothing done, or no answer given). */
      if (i % 3 == 0) {
        lt_env_step_t r0 = step_now(&loop, ep, "Done!", NULL, 0);
        cr_expect(cJSON_IsFalse(cJSON_GetObjectItem(lt_episode_reference(ep), "success")),
                  "task %d succeeded without acting", ti);
        cJSON_Delete(r0.observations);
      }
      for (const cJSON *st = cJSON_GetObjectItem(task, "solution")->child; st; st = st->next) {
        const cJSON *args = cJSON_GetObjectItem(st, "args");
        lt_tool_arg_t a[8];
        int na = 0;
        for (const cJSON *x = args->child; x; x = x->next, na++)
          a[na] = (lt_tool_arg_t){x->string, fill_params(x->valuestring, params)};
        lt_tool_call_t call = {cJSON_GetObjectItem(st, "tool")->valuestring, a, na};
        lt_env_step_t r = step_now(&loop, ep, "calling", &call, 1);
        cr_expect_eq(r.done, 0);
        /* Cut here (token or turn limit), the episode has a verdict: not succeeded. */
        cr_expect(cJSON_IsFalse(cJSON_GetObjectItem(lt_episode_reference(ep), "success")),
                  "no verdict before the final reply");
        const char *obs = cJSON_GetObjectItem(cJSON_GetArrayItem(r.observations, 0), "content")->valuestring;
        cr_expect(strstr(obs, "\"ok\":true"), "%s: %s", call.name, obs);
        cJSON_Delete(r.observations);
        for (int k = 0; k < na; k++) free(a[k].value);
      }
      const cJSON *ans = cJSON_GetObjectItem(task, "answer");
      char *reply = ans ? fill_params(ans->valuestring, params) : strdup("All done.");
      char text[256];
      snprintf(text, sizeof text, "The answer is %s.", reply);
      lt_env_step_t fin = step_now(&loop, ep, text, NULL, 0);
      cr_expect_eq(fin.done, 1);
      int ok = cJSON_IsTrue(cJSON_GetObjectItem(lt_episode_reference(ep), "success"));
      cr_expect(ok, "%s task %d (index %llu): the reference solution did not succeed", domains[d], ti,
                (unsigned long long)i);
      successes += ok;
      cJSON_Delete(fin.observations);
      free(reply);
      lt_episode_close(ep);
      cJSON_Delete(spec), cJSON_Delete(msgs);
    }
    cr_expect_eq(successes, 30);
    for (int t = 0; t < cJSON_GetArraySize(cJSON_GetObjectItem(dspec, "tasks")); t++)
      cr_expect(tasks_seen[t], "task %d never sampled", t);
    cJSON_Delete(dspec);
    uv_run(&loop, UV_RUN_DEFAULT);
    lt_envs_free(e);
    cr_expect_eq(uv_loop_close(&loop), 0);
  }
}

/* Demonstrations are whole reference episodes of training instances (every
 * call with its real result, then the reply); at demo_error_rate 1 each one
 * replies one call early.  Held-out instances never appear in training. */
Test(envs, tools_demos_and_held_out_split) {
  char json[1024], path[4200];
  snprintf(path, sizeof path, "%s/configs/envs/pantry.json", lt_test_root());
  cJSON *dspec = NULL;
  cr_assert_eq(lt_json_parse_file(path, &dspec), 0);
  const cJSON *tasks = cJSON_GetObjectItem(dspec, "tasks");
  for (int wrong = 0; wrong < 2; wrong++) {
    snprintf(json, sizeof json,
             "{\"envs\": {\"p\": {\"type\": \"tools\", \"params\": {\"spec\": \"%s\", \"demo_error_rate\": %d}}}}",
             path, wrong);
    lt_envs_t *e = make_envs(json, NULL);
    for (uint64_t i = 0; i < 40; i++) {
      cJSON *msgs, *spec;
      char *resp;
      cr_assert_eq(lt_envs_demo(e, "p", i, &msgs, &resp), 0, "%s", lt_error_msg());
      cr_assert_eq(lt_envs_sample(e, "p", i, 0, &spec), 0);
      const cJSON *task = cJSON_GetArrayItem(tasks, cJSON_GetObjectItem(spec, "task")->valueint);
      int calls = 0, n = cJSON_GetArraySize(cJSON_GetObjectItem(task, "solution"));
      for (const cJSON *m = msgs->child; m; m = m->next) {
        const char *role = spec_str(m, "role"), *content = spec_str(m, "content");
        if (!strcmp(role, "assistant")) {
          cr_expect(strncmp(content, "<tool_call><name>", 17) == 0, "%s", content);
          calls++;
        }
        if (!strcmp(role, "tool")) cr_expect(strstr(content, "\"ok\":true"), "%s", content);
      }
      cr_expect_eq(calls, n - wrong, "instance %llu: %d calls of %d", (unsigned long long)i, calls, n);
      cr_expect(strcmp(resp, "Done.") == 0 || cJSON_GetObjectItem(task, "answer"), "%s", resp);
      free(resp);
      cJSON_Delete(msgs), cJSON_Delete(spec);
    }
    lt_envs_free(e);
  }
  /* The split: no evaluation instance is a training instance. */
  snprintf(json, sizeof json, "{\"envs\": {\"p\": {\"type\": \"tools\", \"params\": {\"spec\": \"%s\"}}}}", path);
  lt_envs_t *e = make_envs(json, NULL);
  char **train = calloc(2000, sizeof *train);
  for (uint64_t i = 0; i < 2000; i++) {
    cJSON *s;
    cr_assert_eq(lt_envs_sample(e, "p", i, 0, &s), 0);
    train[i] = cJSON_PrintUnformatted(s);
    cJSON_Delete(s);
  }
  for (uint64_t i = 0; i < 200; i++) {
    cJSON *s;
    cr_assert_eq(lt_envs_sample(e, "p", i, 1, &s), 0);
    char *txt = cJSON_PrintUnformatted(s);
    for (int k = 0; k < 2000; k++) cr_assert(strcmp(txt, train[k]), "held-out instance %s was trained on", txt);
    free(txt);
    cJSON_Delete(s);
  }
  for (int k = 0; k < 2000; k++) free(train[k]);
  free(train);
  lt_envs_free(e);
  /* A bad parameter names itself. */
  lt_config_t cfg;
  snprintf(json, sizeof json,
           "{\"envs\": {\"p\": {\"type\": \"tools\", \"params\": {\"spec\": \"%s\", \"eval_fraction\": 2}}}}", path);
  cr_assert_eq(lt_config_from_json(&cfg, cJSON_Parse(json), NULL, 0, lt_all_schemas, lt_all_nschemas), 0);
  cr_expect_eq(lt_envs_create(&cfg, NULL, &e), LT_ECONFIG);
  cr_expect(strstr(lt_error_msg(), "envs.p.params.eval_fraction"), "%s", lt_error_msg());
  lt_config_free(&cfg);
  cJSON_Delete(dspec);
}

/* Dependencies, preconditions and typed arguments are enforced, with errors the policy can read. */
Test(envs, tools_enforce_dependencies_and_types) {
  char json[1024], path[4200];
  snprintf(path, sizeof path, "%s/configs/envs/bank.json", lt_test_root());
  snprintf(json, sizeof json, "{\"envs\": {\"bank\": {\"type\": \"tools\", \"params\": {\"spec\": \"%s\"}}}}", path);
  uv_loop_t loop;
  uv_loop_init(&loop);
  lt_envs_t *e = make_envs(json, &loop);
  cJSON *spec, *msgs;
  cr_assert_eq(lt_envs_sample(e, "bank", 0, 0, &spec), 0);
  lt_episode_t *ep;
  cr_assert_eq(lt_episode_open(e, "bank", spec, 1, &ep, &msgs), 0);
  lt_tool_arg_t t1[] = {{"from", "A11"}, {"to", "A12"}, {"amount", "10"}};
  lt_tool_arg_t bad[] = {{"from", "A11"}, {"to", "A12"}, {"amount", "ten"}};
  lt_tool_arg_t v[] = {{"customer", "C1"}, {"pin", "0000"}};
  lt_tool_arg_t v_ok[] = {{"customer", "C1"}, {"pin", "4821"}};
  lt_tool_arg_t big[] = {{"from", "A11"}, {"to", "A12"}, {"amount", "100000"}};
  struct {
    lt_tool_call_t c;
    const char *want;
  } cases[] = {{{"transfer", t1, 3}, "needs verify_identity first"},
               {{"verify_identity", v, 2}, "identity not verified"},
               {{"nope", NULL, 0}, "unknown tool"},
               {{"verify_identity", v_ok, 2}, "identity verified"},
               {{"transfer", bad, 3}, "must be an integer"},
               {{"transfer", t1, 2}, "missing argument 'amount'"},
               {{"transfer", big, 3}, "insufficient funds"},
               {{"transfer", t1, 3}, "transfer done"}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    lt_env_step_t r = step_now(&loop, ep, "x", &cases[i].c, 1);
    const char *obs = cJSON_GetObjectItem(cJSON_GetArrayItem(r.observations, 0), "content")->valuestring;
    cr_expect(strstr(obs, cases[i].want), "call %zu: %s", i, obs);
    cJSON_Delete(r.observations);
  }
  lt_episode_close(ep);
  cJSON_Delete(spec), cJSON_Delete(msgs);
  /* A broken spec is a config error naming the file. */
  lt_config_t cfg;
  cr_assert_eq(
      lt_config_from_json(
          &cfg,
          cJSON_Parse("{\"envs\": {\"x\": {\"type\": \"tools\", \"params\": {\"spec\": \"/nonexistent.json\"}}}}"),
          NULL, 0, lt_all_schemas, lt_all_nschemas),
      0);
  lt_envs_t *bad_envs;
  cr_expect_eq(lt_envs_create(&cfg, &loop, &bad_envs), LT_ECONFIG);
  cr_expect(strstr(lt_error_msg(), "envs.x.params.spec"), "%s", lt_error_msg());
  lt_config_free(&cfg);
  uv_run(&loop, UV_RUN_DEFAULT);
  lt_envs_free(e);
  cr_expect_eq(uv_loop_close(&loop), 0);
}

/* A task's setup statements put per-instance state the instruction does not
 * reveal into the episode's database (the safe's code): tries are answered
 * from it, and a setup that fails is an error naming the spec.  Task
 * templates are drawn by weight. */
Test(envs, tools_task_setup_hides_the_instance_state) {
  char json[1024], path[4200];
  snprintf(path, sizeof path, "%s/configs/envs/safe.json", lt_test_root());
  snprintf(json, sizeof json, "{\"envs\": {\"s\": {\"type\": \"tools\", \"params\": {\"spec\": \"%s\"}}}}", path);
  uv_loop_t loop;
  uv_loop_init(&loop);
  lt_envs_t *e = make_envs(json, &loop);
  int codes_seen[16] = {0}, deepest = 0;
  for (uint64_t i = 0; i < 60; i++) {
    cJSON *spec, *msgs;
    cr_assert_eq(lt_envs_sample(e, "s", i, 0, &spec), 0, "%s", lt_error_msg());
    deepest += cJSON_GetObjectItem(spec, "task")->valueint == 3;
    int code = atoi(cJSON_GetObjectItem(cJSON_GetObjectItem(spec, "params"), "code")->valuestring);
    cr_assert(code >= 1 && code <= 15);
    codes_seen[code] = 1;
    lt_episode_t *ep;
    cr_assert_eq(lt_episode_open(e, "s", spec, 1, &ep, &msgs), 0, "%s", lt_error_msg());
    lt_tool_arg_t a[] = {{"code", "8"}};
    lt_tool_call_t call = {"try", a, 1};
    lt_env_step_t r = step_now(&loop, ep, "x", &call, 1);
    const char *obs = cJSON_GetObjectItem(cJSON_GetArrayItem(r.observations, 0), "content")->valuestring;
    const char *want = code > 8 ? "higher" : code < 8 ? "lower" : "open";
    cr_expect(strstr(obs, want), "code %d, try 8: %s", code, obs);
    cJSON_Delete(r.observations);
    lt_env_step_t fin = step_now(&loop, ep, "Done.", NULL, 0);
    cr_expect_eq(cJSON_IsTrue(cJSON_GetObjectItem(lt_episode_reference(ep), "success")), code == 8, "code %d", code);
    cJSON_Delete(fin.observations);
    lt_episode_close(ep);
    cJSON_Delete(spec), cJSON_Delete(msgs);
  }
  int distinct = 0;
  for (int c = 1; c <= 15; c++) distinct += codes_seen[c];
  cr_expect_geq(distinct, 10, "only %d codes drawn", distinct);
  /* The four-try task has weight 3 of 6: about half the draws. */
  cr_expect(deepest >= 20 && deepest <= 40, "the weight-3 task drawn %d times of 60", deepest);
  uv_run(&loop, UV_RUN_DEFAULT);
  lt_envs_free(e);
  cr_expect_eq(uv_loop_close(&loop), 0); /* before the loop is initialised again below */
  /* A setup statement that cannot run (a missing table) is a config error naming the spec at start; one that
   * fails on an instance (here NULL into NOT NULL) is an error naming the spec when the task is opened. */
  char *dir = lt_test_tmpdir("setup"), bad[4300];
  snprintf(bad, sizeof bad, "%s/bad.json", dir);
  const char *fmt =
      "{\"name\": \"b\", \"system\": \"s\", \"schema\": [\"CREATE TABLE t(x INTEGER NOT NULL)\"], "
      "\"tools\": [{\"name\": \"look\", \"args\": {}, \"query\": \"SELECT x FROM t\"}], "
      "\"tasks\": [{\"pick\": \"SELECT 1 AS one\", \"instruction\": \"Look.\", \"setup\": [\"%s\"], "
      "\"solution\": [{\"tool\": \"look\", \"args\": {}}]}], \"state\": \"SELECT x FROM t\"}";
  char text[1024];
  snprintf(text, sizeof text, fmt, "INSERT INTO missing VALUES (:one)");
  lt_test_write(bad, text);
  snprintf(json, sizeof json, "{\"envs\": {\"b\": {\"type\": \"tools\", \"params\": {\"spec\": \"%s\"}}}}", bad);
  lt_config_t cfg;
  cr_assert_eq(lt_config_from_json(&cfg, cJSON_Parse(json), NULL, 0, lt_all_schemas, lt_all_nschemas), 0);
  cr_expect_eq(lt_envs_create(&cfg, NULL, &e), LT_ECONFIG);
  cr_expect(strstr(lt_error_msg(), "setup") && strstr(lt_error_msg(), "bad.json"), "%s", lt_error_msg());
  lt_config_free(&cfg);
  snprintf(text, sizeof text, fmt, "INSERT INTO t VALUES (:none)");
  lt_test_write(bad, text);
  uv_loop_init(&loop);
  e = make_envs(json, &loop);
  cJSON *spec, *msgs = NULL;
  cr_assert_eq(lt_envs_sample(e, "b", 0, 0, &spec), 0, "%s", lt_error_msg());
  lt_episode_t *ep = NULL;
  cr_expect_lt(lt_episode_open(e, "b", spec, 1, &ep, &msgs), 0);
  cr_expect(strstr(lt_error_msg(), "setup fails") && strstr(lt_error_msg(), "bad.json"), "%s", lt_error_msg());
  cJSON_Delete(spec);
  uv_run(&loop, UV_RUN_DEFAULT);
  lt_envs_free(e);
  cr_expect_eq(uv_loop_close(&loop), 0);
  lt_test_rmdir(dir);
}

/* The noise curriculum is closed-loop (seed 004 §3.3.3): a share of training tasks stays clean, and the level
 * rises only when the noisy tasks' success at the current level is within max_gap of the clean ones'; outcomes
 * of tasks dispatched at an earlier level do not count; the open-loop ramp's key is refused. */
Test(envs, noise_curriculum_is_closed_loop) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  lt_envs_t *e = make_envs(
      "{\"envs\": {\"a\": {\"type\": \"arith\", \"noise\": {\"instruction\": 1, \"level_start\": 0.2, "
      "\"level_step\": 0.3, \"max_gap\": 0.1, \"clean_share\": 0.25, \"window\": 4}}}}",
      &loop);
  cJSON *clean = NULL, *noisy = NULL;
  int nclean = 0;
  for (uint64_t i = 0; i < 400; i++) {
    cJSON *s;
    cr_assert_eq(lt_envs_sample(e, "a", i, 0, &s), 0, "%s", lt_error_msg());
    double l = cJSON_GetObjectItem(s, "noise_level")->valuedouble;
    cr_assert(l == 0 || l == 0.2, "task %llu: level %g is neither clean nor the start level", (unsigned long long)i, l);
    nclean += l == 0;
    if (l == 0 && !clean) clean = s;
    else if (l > 0 && !noisy) noisy = s;
    else cJSON_Delete(s);
  }
  cr_expect(nclean > 70 && nclean < 130, "about a quarter of the tasks stay clean: %d of 400", nclean);
  double level, gap;
  /* Clean 4/4, noisy 2/4: the gap 0.5 is too wide, the level stays; the window starts again. */
  for (int k = 0; k < 4; k++) {
    cr_expect_eq(lt_envs_noise_record(e, 0, clean, 1, &level, &gap), 0);
    cr_expect_eq(lt_envs_noise_record(e, 0, noisy, k < 2, &level, &gap), 0);
  }
  /* Clean 3/4, noisy 3/4: gap 0, the level rises by level_step on the 8th outcome. */
  for (int k = 0; k < 4; k++) cr_expect_eq(lt_envs_noise_record(e, 0, clean, k > 0, &level, &gap), 0);
  for (int k = 0; k < 3; k++) cr_expect_eq(lt_envs_noise_record(e, 0, noisy, k > 0, &level, &gap), 0);
  cr_assert_eq(lt_envs_noise_record(e, 0, noisy, 1, &level, &gap), 1);
  cr_expect_float_eq(level, 0.5, 1e-12);
  cr_expect_float_eq(gap, 0.0, 1e-12);
  /* Outcomes of tasks sampled at 0.2 no longer count; new noisy tasks carry 0.5. */
  for (int k = 0; k < 20; k++) cr_expect_eq(lt_envs_noise_record(e, 0, noisy, 0, &level, &gap), 0);
  cJSON *s;
  uint64_t i = 0;
  do {
    cr_assert_eq(lt_envs_sample(e, "a", i++, 0, &s), 0);
    if (cJSON_GetObjectItem(s, "noise_level")->valuedouble > 0) break;
    cJSON_Delete(s);
  } while (1);
  cr_expect_float_eq(cJSON_GetObjectItem(s, "noise_level")->valuedouble, 0.5, 1e-12);
  for (int k = 0; k < 4; k++) lt_envs_noise_record(e, 0, clean, 1, &level, &gap);
  for (int k = 0; k < 3; k++) lt_envs_noise_record(e, 0, s, 1, &level, &gap);
  cr_assert_eq(lt_envs_noise_record(e, 0, s, 1, &level, &gap), 1, "the 20 stale failures did not count");
  cr_expect_float_eq(level, 0.8, 1e-12);
  cJSON_Delete(s);
  cJSON_Delete(clean), cJSON_Delete(noisy);
  uv_run(&loop, UV_RUN_DEFAULT);
  lt_envs_free(e);
  /* The open-loop ramp is gone: its key is refused naming the closed loop's. */
  lt_config_t cfg;
  cr_assert_eq(lt_config_from_json(
                   &cfg, cJSON_Parse("{\"envs\": {\"a\": {\"type\": \"arith\", \"noise\": {\"ramp_tasks\": 10}}}}"),
                   NULL, 0, lt_all_schemas, lt_all_nschemas),
               0);
  cr_expect_lt(lt_envs_create(&cfg, &loop, &e), 0);
  cr_expect(strstr(lt_error_msg(), "ramp_tasks: removed") && strstr(lt_error_msg(), "max_gap"), "%s", lt_error_msg());
  lt_config_free(&cfg);
  cr_expect_eq(uv_loop_close(&loop), 0);
}

/* The noise wrapper: instructions get typos and filler but keep every id, number
 * and every word the task names (customer names: the verifier needs them); tool
 * calls fail transiently without effect, results come partial or re-rendered;
 * retrying still solves every task; evaluation stays clean. */
Test(envs, noise_keeps_tasks_solvable) {
  char path[4200], noisy_json[2048], clean_json[2048];
  snprintf(path, sizeof path, "%s/configs/envs/bank.json", lt_test_root());
  snprintf(clean_json, sizeof clean_json,
           "{\"envs\": {\"bank\": {\"type\": \"tools\", \"params\": {\"spec\": \"%s\"}}}}", path);
  snprintf(
      noisy_json, sizeof noisy_json,
      "{\"envs\": {\"bank\": {\"type\": \"tools\", \"params\": {\"spec\": \"%s\"}, \"noise\": {\"instruction\": 1, "
      "\"tool_failure\": 0.5, \"tool_partial\": 1, \"tool_inconsistent\": 1}}}}",
      path);
  uv_loop_t loop;
  uv_loop_init(&loop);
  lt_envs_t *clean = make_envs(clean_json, &loop), *noisy = make_envs(noisy_json, &loop);
  cJSON *dspec;
  cr_assert_eq(lt_json_parse_file(path, &dspec), 0);
  int failures = 0, changed = 0, names = 0;
  for (uint64_t i = 0; i < 40; i++) {
    cJSON *s1, *s2, *m1, *m2;
    cr_assert_eq(lt_envs_sample(clean, "bank", i, 0, &s1), 0);
    cr_assert_eq(lt_envs_sample(noisy, "bank", i, 0, &s2), 0);
    double lvl = cJSON_GetObjectItem(s2, "noise_level")->valuedouble;
    cr_expect_float_eq(lvl, 1.0, 0, "no curriculum keys: full noise at task %llu", (unsigned long long)i);
    lt_episode_t *e1, *e2;
    cr_assert_eq(lt_episode_open(clean, "bank", s1, 7, &e1, &m1), 0);
    cr_assert_eq(lt_episode_open(noisy, "bank", s2, 100 + i, &e2, &m2), 0);
    const char *c1 = cJSON_GetObjectItem(cJSON_GetArrayItem(m1, 1), "content")->valuestring;
    const char *c2 = cJSON_GetObjectItem(cJSON_GetArrayItem(m2, 1), "content")->valuestring;
    changed += strcmp(c1, c2) != 0;
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", c1);
    for (char *save, *w = strtok_r(buf, " ,.:()?", &save); w; w = strtok_r(NULL, " ,.:()?", &save))
      if (strpbrk(w, "0123456789")) cr_expect(strstr(c2, w), "noise changed '%s': %s", w, c2);
    const cJSON *name = cJSON_GetObjectItem(cJSON_GetObjectItem(s2, "params"), "name");
    if (cJSON_IsString(name) && strstr(c1, name->valuestring)) {
      names++;
      cr_expect(strstr(c2, name->valuestring), "noise changed the customer's name '%s': %s", name->valuestring, c2);
    }
    const cJSON *task =
        cJSON_GetArrayItem(cJSON_GetObjectItem(dspec, "tasks"), cJSON_GetObjectItem(s2, "task")->valueint);
    const cJSON *params = cJSON_GetObjectItem(s2, "params");
    for (const cJSON *st = cJSON_GetObjectItem(task, "solution")->child; st; st = st->next) {
      lt_tool_arg_t a[8];
      int na = 0;
      for (const cJSON *x = cJSON_GetObjectItem(st, "args")->child; x; x = x->next, na++)
        a[na] = (lt_tool_arg_t){x->string, fill_params(x->valuestring, params)};
      lt_tool_call_t call = {cJSON_GetObjectItem(st, "tool")->valuestring, a, na};
      int ok = 0;
      for (int tries = 0; tries < 30 && !ok; tries++) {
        lt_env_step_t r = step_now(&loop, e2, "calling", &call, 1);
        cr_assert_eq(r.done, 0, "a failed call must not end the episode");
        const char *obs = cJSON_GetObjectItem(cJSON_GetArrayItem(r.observations, 0), "content")->valuestring;
        ok = strstr(obs, "\"ok\":true") != NULL;
        failures += strstr(obs, "temporarily unavailable") != NULL;

        cJSON_Delete(r.observations);
      }
      cr_expect(ok, "%s never succeeded", call.name);
      for (int k = 0; k < na; k++) free(a[k].value);
    }
    const cJSON *ans = cJSON_GetObjectItem(task, "answer");
    char *reply = ans ? fill_params(ans->valuestring, params) : strdup("done");
    lt_env_step_t fin = step_now(&loop, e2, reply, NULL, 0);
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(lt_episode_reference(e2), "success")), "task %llu unsolved under noise",
              (unsigned long long)i);
    cJSON_Delete(fin.observations);
    free(reply);
    lt_episode_close(e1), lt_episode_close(e2);
    cJSON_Delete(s1), cJSON_Delete(s2), cJSON_Delete(m1), cJSON_Delete(m2);
  }
  cr_expect_gt(failures, 3, "tool failures were injected");
  cr_expect_gt(changed, 20, "instructions were perturbed");
  cr_expect_gt(names, 20, "the instructions name their customers");
  cJSON *ev;
  cr_assert_eq(lt_envs_sample(noisy, "bank", 3, 1, &ev), 0);
  cr_expect_null(cJSON_GetObjectItem(ev, "noise_level"), "evaluation tasks are clean");
  cJSON_Delete(ev);
  cJSON_Delete(dspec);
  uv_run(&loop, UV_RUN_DEFAULT);
  lt_envs_free(clean), lt_envs_free(noisy);
  cr_expect_eq(uv_loop_close(&loop), 0);
}

/* ---- external: a JSON-lines program in the sandbox ---- */

typedef struct {
  int done, rc;
  cJSON *msgs;
  char err[512];
} opened_t;

static void on_opened(lt_episode_t *ep, int rc, cJSON *messages, void *ud) {
  opened_t *o = ud;
  o->done = 1;
  o->rc = rc;
  o->msgs = messages;
  if (rc < 0) snprintf(o->err, sizeof o->err, "%s", lt_error_msg());
}

static lt_envs_t *external_envs(uv_loop_t *loop, const char *dir, const char *cmd_json) {
  char json[2048];
  snprintf(
      json, sizeof json,
      "{\"envs\": {\"ext\": {\"type\": \"external\", \"params\": {\"command\": %s, \"dir\": \"%s\", \"timeout_s\": 3}}}}",
      cmd_json, dir);
  return make_envs(json, loop);
}

/* The shipped Python example, driven as the agent loop does: async open, tool
 * calls each answered by a fresh sandboxed run, the verdict in the reference. */
Test(envs, external_program_plays_an_episode, .timeout = 120) {
  if (!have_sandbox()) cr_skip_test("no user namespaces: external environments cannot run here");
  char dir[4200];
  snprintf(dir, sizeof dir, "%s/examples/envs/guess", lt_test_root());
  uv_loop_t loop;
  uv_loop_init(&loop);
  lt_envs_t *e = external_envs(&loop, dir, "[\"python3\", \"env.py\"]");
  cJSON *spec;
  cr_assert_eq(lt_envs_sample(e, "ext", 4, 0, &spec), 0);
  opened_t o = {0};
  lt_episode_t *ep;
  cr_assert_eq(lt_episode_open_async(e, "ext", spec, 11, on_opened, &o, &ep), 0, "%s", lt_error_msg());
  cr_expect_eq(o.done, 0, "the open answers on the loop, later");
  while (!o.done) uv_run(&loop, UV_RUN_ONCE);
  cr_assert_eq(o.rc, 0, "%s", o.err);
  cr_expect(strstr(cJSON_GetArrayItem(o.msgs, 0)->child->next->valuestring, "1 to 100"));
  int lo = 1, hi = 100, found = 0, turns = 0;
  while (!found && turns < 8) {
    char n[16];
    snprintf(n, sizeof n, "%d", (lo + hi) / 2);
    lt_tool_arg_t a = {"n", n};
    lt_tool_call_t c = {"guess", &a, 1};
    lt_env_step_t r = step_now(&loop, ep, "guessing", &c, 1);
    cr_assert_eq(r.error, 0, "%s", r.error_msg ? r.error_msg : "");
    const char *obs = cJSON_GetObjectItem(cJSON_GetArrayItem(r.observations, 0), "content")->valuestring;
    if (!strcmp(obs, "correct!")) found = 1;
    else if (!strcmp(obs, "higher")) lo = atoi(n) + 1;
    else hi = atoi(n) - 1;
    turns++;
    cr_expect_eq(r.done, found);
    cJSON_Delete(r.observations);
  }
  cr_expect(found, "binary search finds it in at most 7 guesses");
  cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(lt_episode_reference(ep), "success")));
  lt_episode_close(ep);
  cJSON_Delete(o.msgs), cJSON_Delete(spec);
  uv_run(&loop, UV_RUN_DEFAULT);
  lt_envs_free(e);
  cr_expect_eq(uv_loop_close(&loop), 0);
}

/* A crashing program is an environment error; a hung one ends the episode as a
 * timeout (sandbox_timeout, the policy's failure) or fails its open; garbage is a protocol error. */
Test(envs, external_program_faults, .timeout = 120) {
  if (!have_sandbox()) cr_skip_test("no user namespaces: external environments cannot run here");
  char *dir = lt_test_tmpdir("ext-faults");
  char path[4300];
  snprintf(path, sizeof path, "%s/env.py", dir);
  cr_assert_eq(lt_test_write(path,
                             "import json, sys, time\n"
                             "req = json.loads(sys.stdin.readline())\n"
                             "mode = 'ok' if req['op'] == 'reset' else req['tool_calls'][0]['name']\n"
                             "if mode == 'crash': sys.exit(3)\n"
                             "if mode == 'hang': time.sleep(60)\n"
                             "if mode == 'garbage': print('not json'); sys.exit(0)\n"
                             "if mode == 'refuse': print(json.dumps({'error': 'no such move'})); sys.exit(0)\n"
                             "print(json.dumps({'messages': [{'role': 'user', 'content': 'go'}], 'state': 1}))\n"),
               0);
  uv_loop_t loop;
  uv_loop_init(&loop);
  lt_envs_t *e = external_envs(&loop, dir, "[\"python3\", \"env.py\"]");
  cJSON *spec;
  cr_assert_eq(lt_envs_sample(e, "ext", 0, 0, &spec), 0);
  const char *modes[] = {"crash", "garbage", "refuse", "hang"};
  for (int i = 0; i < 4; i++) {
    opened_t o = {0};
    lt_episode_t *ep;
    cr_assert_eq(lt_episode_open_async(e, "ext", spec, 1, on_opened, &o, &ep), 0);
    while (!o.done) uv_run(&loop, UV_RUN_ONCE);
    cr_assert_eq(o.rc, 0, "%s", o.err);
    lt_tool_call_t c = {(char *)modes[i], NULL, 0};
    lt_env_step_t r = step_now(&loop, ep, "x", &c, 1);
    if (i < 3) {
      cr_expect_lt(r.error, 0, "%s should be an environment error", modes[i]);
      cr_expect(r.error_msg && strstr(r.error_msg, "envs.ext"), "%s: %s", modes[i], r.error_msg ? r.error_msg : "");
    } else {
      cr_expect_eq(r.error, 0);
      cr_expect(r.done && r.timeout && !strcmp(r.timeout, "sandbox_timeout"),
                "a hung step ends the episode as a timeout");
    }
    cJSON_Delete(r.observations);
    free(r.error_msg);
    lt_episode_close(ep);
    cJSON_Delete(o.msgs);
  }
  /* Closing an episode whose open is still running frees it later without calling back. */
  opened_t o = {0};
  lt_episode_t *ep;
  cr_assert_eq(lt_episode_open_async(e, "ext", spec, 1, on_opened, &o, &ep), 0);
  lt_episode_close(ep);
  uv_run(&loop, UV_RUN_DEFAULT);
  cr_expect_eq(o.done, 0);
  cJSON_Delete(spec);
  lt_envs_free(e);
  cr_expect_eq(uv_loop_close(&loop), 0);
  lt_test_rmdir(dir);
}

/* ---- http: the same protocol against an endpoint (a counter game served here) ---- */

#include "net/http.h"

typedef struct {
  int requests;
  const char *fault; /* "500" or "hang" for step requests, else NULL */
} counter_srv_t;

static void counter_handler(lt_http_conn_t *c, const lt_http_req_t *req, void *ud) {
  counter_srv_t *s = ud;
  s->requests++;
  cJSON *q = cJSON_Parse(req->body), *a = cJSON_CreateObject();
  const char *op = cJSON_GetObjectItem(q, "op")->valuestring;
  if (!strcmp(op, "step") && s->fault && !strcmp(s->fault, "500")) {
    lt_http_respond(c, 500, "text/plain", "down", 4);
  } else if (!strcmp(op, "step") && s->fault && !strcmp(s->fault, "hang")) {
    /* never answers */
  } else {
    if (!strcmp(op, "reset")) {
      cJSON *m = cJSON_AddArrayToObject(a, "messages"), *u = cJSON_CreateObject();
      cJSON_AddStringToObject(u, "role", "user");
      cJSON_AddStringToObject(u, "content", "Call inc until the counter reaches 3.");
      cJSON_AddItemToArray(m, u);
      cJSON_AddNumberToObject(a, "state", 0);
    } else {
      int n = cJSON_GetObjectItem(q, "state")->valueint + cJSON_GetArraySize(cJSON_GetObjectItem(q, "tool_calls"));
      cJSON *obs = cJSON_AddArrayToObject(a, "observations"), *o = cJSON_CreateObject();
      char txt[16];
      snprintf(txt, sizeof txt, "%d", n);
      cJSON_AddStringToObject(o, "name", "inc");
      cJSON_AddStringToObject(o, "content", txt);
      cJSON_AddItemToArray(obs, o);
      cJSON_AddNumberToObject(a, "state", n);
      cJSON_AddBoolToObject(a, "done", n >= 3);
      cJSON *ref = cJSON_AddObjectToObject(a, "reference");
      cJSON_AddBoolToObject(ref, "success", n == 3);
    }
    char *b = cJSON_PrintUnformatted(a);
    lt_http_respond(c, 200, "application/json", b, strlen(b));
    free(b);
  }
  cJSON_Delete(q), cJSON_Delete(a);
}

Test(envs, http_environment_plays_and_fails_cleanly, .timeout = 60) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  counter_srv_t srv = {0};
  lt_http_server_t *hs;
  lt_http_opts_t ho = {.host = "127.0.0.1", .max_body = 1 << 20, .max_conns = 16, .timeout_ms = 5000};
  cr_assert_eq(lt_http_listen(&loop, &ho, counter_handler, &srv, &hs), 0);
  char json[512];
  snprintf(json, sizeof json,
           "{\"envs\": {\"c\": {\"type\": \"http\", \"params\": {\"endpoint\": \"http://127.0.0.1:%d/env\", "
           "\"timeout_ms\": 300, \"retries\": 1}}}}",
           lt_http_port(hs));
  lt_envs_t *e = make_envs(json, &loop);
  cJSON *spec;
  cr_assert_eq(lt_envs_sample(e, "c", 0, 0, &spec), 0);
  const char *faults[] = {NULL, "500", "hang"};
  for (int f = 0; f < 3; f++) {
    srv.fault = faults[f];
    opened_t o = {0};
    lt_episode_t *ep;
    cr_assert_eq(lt_episode_open_async(e, "c", spec, 1, on_opened, &o, &ep), 0, "%s", lt_error_msg());
    while (!o.done) uv_run(&loop, UV_RUN_ONCE);
    cr_assert_eq(o.rc, 0, "%s", o.err);
    lt_tool_call_t c = {"inc", NULL, 0};
    lt_env_step_t r = {0};
    for (int i = 0; i < 3; i++) {
      r = step_now(&loop, ep, "inc", &c, 1);
      if (r.done || r.error) break;
      cJSON_Delete(r.observations);
    }
    if (f == 0) {
      cr_expect_eq(r.error, 0);
      cr_expect(r.done);
      cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(lt_episode_reference(ep), "success")));
    } else if (f == 1) {
      cr_expect_lt(r.error, 0, "a 5xx that persists is an environment error");
      cr_expect(r.error_msg && strstr(r.error_msg, "envs.c"), "%s", r.error_msg ? r.error_msg : "");
    } else {
      cr_expect_eq(r.error, 0);
      cr_expect(r.done && r.timeout && !strcmp(r.timeout, "tool_timeout"), "a silent endpoint is a timeout");
    }
    cJSON_Delete(r.observations);
    free(r.error_msg);
    lt_episode_close(ep);
    cJSON_Delete(o.msgs);
  }
  /* Closing with a request in flight drops it. */
  srv.fault = NULL;
  opened_t o = {0};
  lt_episode_t *ep;
  cr_assert_eq(lt_episode_open_async(e, "c", spec, 1, on_opened, &o, &ep), 0);
  lt_episode_close(ep);
  cJSON_Delete(spec);
  lt_envs_shutdown(e);
  lt_http_close(hs, NULL, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  cr_expect_eq(o.done, 0);
  lt_envs_free(e);
  cr_expect_eq(uv_loop_close(&loop), 0);
}

/* The agent environment's settings: each bad one is refused naming its key; a good one exposes the program's
 * settings to the worker (lt_envs_agent) and samples the rows by the dataset's rules, answer in the spec. */
Test(envs, agent_params_are_checked_and_exposed) {
  char *dir = lt_test_tmpdir("agentenv");
  char tasks[4200], js[8192];
  snprintf(tasks, sizeof tasks, "%s/tasks.jsonl", dir);
  cr_assert_eq(
      lt_test_write(tasks, "{\"prompt\": \"1+1?\", \"answer\": \"2\"}\n{\"prompt\": \"2+2?\", \"answer\": 4}\n"), 0);
  const char *bad[][2] = {
      {"\"command\": [], \"tasks\": \"%s\"", "params.command"},
      {"\"command\": [\"x\", 3], \"tasks\": \"%s\"", "params.command"},
      {"\"command\": [\"x\"], \"tasks\": \"%s\", \"timeout_s\": 0", "params.timeout_s"},
      {"\"command\": [\"x\"], \"tasks\": \"%s\", \"sandbox\": 1", "params.sandbox"},
      {"\"command\": [\"x\"], \"tasks\": \"%s\", \"pass_answer\": 1", "params.pass_answer"},
      {"\"command\": [\"x\"], \"tasks\": \"%s\", \"comand\": 1", "params.comand"},
      {"\"command\": [\"x\"], \"tasks\": \"%s/nope.jsonl\"", "params.tasks"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char params[1024];
    snprintf(params, sizeof params, bad[i][0], i == 6 ? dir : tasks);
    snprintf(js, sizeof js, "{\"envs\": {\"a\": {\"type\": \"agent\", \"params\": {%s}}}}", params);
    lt_config_t cfg;
    cr_assert_eq(lt_config_from_json(&cfg, cJSON_Parse(js), NULL, 0, lt_all_schemas, lt_all_nschemas), 0, "%s",
                 lt_error_msg());
    lt_envs_t *e;
    cr_expect_lt(lt_envs_create(&cfg, NULL, &e), 0, "accepted: %s", params);
    cr_expect(strstr(lt_error_msg(), bad[i][1]), "%s: %s", params, lt_error_msg());
    lt_config_free(&cfg);
  }
  snprintf(
      js, sizeof js,
      "{\"envs\": {\"a\": {\"type\": \"agent\", \"params\": {\"command\": [\"python3\", \"agent.py\"], \"tasks\": \"%s\","
      " \"timeout_s\": 5, \"honor_sampling\": true}}, \"m\": {\"type\": \"arith\"}}}",
      tasks);
  lt_envs_t *e = make_envs(js, NULL);
  const lt_envs_agent_t *a = lt_envs_agent(e, "a");
  cr_assert_not_null(a);
  cr_assert_str_eq(a->argv[1], "agent.py");
  cr_assert_null(a->argv[2]);
  cr_assert_float_eq(a->timeout_s, 5, 1e-12);
  cr_assert(a->honor_sampling && !a->pass_answer);
  cr_assert_eq(a->sandbox, have_sandbox(), "sandboxed by default exactly where the host can make a sandbox");
  cr_assert_null(lt_envs_agent(e, "m"));
  cr_assert_null(lt_envs_agent(e, "nope"));
  int answers = 0;
  for (uint64_t i = 0; i < 2; i++) {
    cJSON *spec;
    cr_assert_eq(lt_envs_sample(e, "a", i, 0, &spec), 0, "%s", lt_error_msg());
    answers += atoi(spec_str(spec, "answer"));
    cJSON_Delete(spec);
  }
  cr_assert_eq(answers, 6, "one epoch: each row once");
  lt_envs_free(e);
  lt_test_rmdir(dir);
}

/* A domain's group size and pass threshold, read once by the registry for the daemon and the offline evaluation. */
Test(envs, a_domain_says_its_group_size_and_pass_threshold) {
  lt_envs_t *e = make_envs(
      "{\"envs\": {\"a\": {\"type\": \"arith\", \"group_size\": 3, \"pass_threshold\": 0.9},"
      " \"b\": {\"type\": \"arith\"}}}",
      NULL);
  int a = lt_envs_index(e, "a"), b = lt_envs_index(e, "b");
  cr_expect_eq(lt_envs_group_size(e, a, 8), 3);
  cr_expect_eq(lt_envs_group_size(e, b, 8), 8, "unset: scheduler.group_size");
  cr_expect_float_eq(lt_envs_pass_threshold(e, a), 0.9, 1e-12);
  cr_expect_float_eq(lt_envs_pass_threshold(e, b), 0.5, 1e-12);
  cr_expect_float_eq(lt_envs_pass_threshold(e, -1), 0.5, 1e-12, "no such domain");
  lt_envs_free(e);
}
