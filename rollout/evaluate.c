/* A held-out evaluation round without a daemon (rollout/evaluate.h): the worker's agent loop and builtin engine
 * on one loop, up to `slots` episodes at once, the same prompts and TASK settings as the daemon's rounds. */
#include "rollout/evaluate.h"

#include <stdlib.h>
#include <string.h>

#include "rollout/agent.h"
#include "util/error.h"
#include "util/rng.h"

typedef struct {
  lt_agent_ctx_t *ctx;
  lt_task_t base; /* the run's TASK settings */
  uint64_t seed;
  int n, next, running, slots, correct, rc;
} round_t;

static int start_more(round_t *r);

static void evaluate_on_done(lt_agent_t *a, lt_msg_t *m, void *ud) {
  (void)a;
  round_t *r = ud;
  lt_envs_t *envs = r->ctx->envs;
  r->correct += lt_traj_correct(&m->u.traj, lt_envs_pass_threshold(envs, lt_envs_index(envs, m->u.traj.domain)));
  lt_msg_free(m);
  r->running--;
  if (r->rc == 0) r->rc = start_more(r);
}

/* The next prompts while slots are free: prompt i of domain i mod the domains, its held-out sample i, as the
 * daemon numbers a round's prompts. */
static int start_more(round_t *r) {
  lt_envs_t *envs = r->ctx->envs;
  int ndom = lt_envs_count(envs);
  while (r->next < r->n && r->running < r->slots) {
    int i = r->next++;
    const char *dom = lt_envs_name(envs, i % ndom), *type = lt_envs_type(envs, dom);
    cJSON *spec;
    int rc = lt_envs_sample(envs, dom, (uint64_t)i, 1, &spec);
    if (rc < 0) return rc;
    lt_task_t k = r->base;
    k.task_id = k.group_id = (uint64_t)i + 1;
    k.prompt_id = i + 1;
    k.domain = (char *)dom;
    k.env = (char *)(type ? type : "unknown");
    k.seed = (int64_t)(lt_rng_mix(r->seed, (uint64_t)i + 1) % LT_PROTO_MAX_ID);
    k.eval = 1;
    k.spec = spec;
    lt_agent_t *a;
    rc = lt_agent_start(r->ctx, &k, evaluate_on_done, r, &a); /* it keeps a copy of the spec */
    cJSON_Delete(spec);
    if (rc < 0) return rc;
    r->running++;
  }
  return 0;
}

int lt_rollout_evaluate(const lt_eval_opts_t *o, int *correct, int *n) {
  const lt_config_t *c = o->cfg;
  uv_loop_t loop;
  uv_loop_init(&loop);
  lt_envs_t *envs = NULL;
  lt_rewarder_t *rw = NULL;
  lt_backend_t *be = NULL;
  lt_chat_template_t *chat = NULL;
  lt_tool_format fmt = 0;
  int rc = lt_envs_create(c, &loop, &envs);
  for (int i = 0; rc == 0 && i < lt_envs_count(envs); i++)
    if (lt_envs_agent(envs, lt_envs_name(envs, i)))
      rc = lt_error_set(LT_EUNSUPP, "domain %s runs agent programs: evaluate it with a run", lt_envs_name(envs, i));
  if (rc == 0) rc = lt_rewarder_create(&loop, c, &rw);
  lt_backend_opts_t bo = {.kind = "builtin",
                          .model_dir = o->model_dir,
                          .version = o->version,
                          .device = "cpu",
                          .threads = 1,
                          .max_sessions = o->slots,
                          .max_context = (int)lt_config_int(c, "rollout.max_context")};
  if (rc == 0) rc = lt_backend_create(&loop, &bo, &be);
  if (rc == 0) rc = lt_agent_chat_load(o->model_dir, lt_config_str(c, "rollout.tool_format"), &chat, &fmt);
  lt_agent_ctx_t ctx = {.loop = &loop, .envs = envs, .rewarder = rw, .backend = be, .chat = chat, .tool_format = fmt};
  lt_agent_context_config(c, &ctx.context);
  round_t r = {.ctx = &ctx,
               .seed = (uint64_t)lt_config_int(c, "run.seed"),
               .n = (int)lt_config_int(c, "eval.prompts"),
               .slots = o->slots > 0 ? o->slots : 1};
  lt_task_settings(c, &r.base);
  r.base.policy_version = o->version;
  if (rc == 0) rc = r.rc = start_more(&r);
  while (r.running > 0) uv_run(&loop, UV_RUN_ONCE); /* what started ends, even after an error */
  if (rc == 0) rc = r.rc;
  if (envs) lt_envs_shutdown(envs);
  if (rw) lt_rewarder_close(rw, NULL, NULL);
  if (be) lt_backend_close(be, NULL, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  if (envs) lt_envs_free(envs);
  lt_chat_template_free(chat);
  uv_loop_close(&loop);
  *correct = r.correct;
  *n = r.n;
  return rc;
}
