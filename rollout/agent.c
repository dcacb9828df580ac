/* The agent (rollout/agent.h): one task's episode, from its environment's opening to the TRAJ it becomes.  This
 * file is the episode's lifecycle, the same for its two modes: the builtin loop (rollout/loop.c) generates turns and
 * steps the environment; an `agent` domain's program plays it through the gateway (rollout/agent_gateway.c).
 *
 * The lifecycle (lt__ep_state, rollout/internal.h), each transition made by the function named:
 *
 *   from                    to        by                 when
 *   -                       OPENING   lt_agent_start     the environment opens (lt_episode_open_async)
 *   OPENING                 RUNNING   agent_on_open      the opening chat: the loop's first turn, or the program starts
 *   OPENING, RUNNING        JUDGING   lt__agent_end      it ended ok in an environment that judges its end state
 *                                                        (lt_episode_end: swe's diff and hidden tests)
 *   JUDGING                 (as below) agent_on_judged   the verdict landed (or the judge failed: env_error)
 *   OPENING, RUNNING        SCORING   lt__agent_end      it ended ok without a reward of its own: the reward is asked
 *   OPENING, RUNNING        ENDED     lt__agent_end      it ended otherwise (an error, an abort, the program's reward)
 *   SCORING                 ENDED     agent_on_reward    the reward, or its failure, landed
 *   ENDED                   CLOSING   agent_deliver      the TRAJ goes to the callback
 *   OPENING, RUNNING, JUDGING, ENDED
 *                           CLOSING   lt_agent_discard   dropped without a callback (worker shutdown; a judge in
 *                                                        flight is the environment's to cancel or finish)
 *   SCORING                 DROPPED   lt_agent_discard   dropped, but the reward cannot be called back
 *   DROPPED                 CLOSING   agent_on_reward    the reward landed, unused
 *   CLOSING                 -         agent_on_closed    the timer closed: agent_destroy, the one free
 *
 * Leaving RUNNING (lt__agent_end, lt_agent_discard) stops all that could still call the agent back but the reward
 * and the environment: the generation sessions, the loop's summary, the program and its calls (agent_halt).  An
 * environment's callback that lands after the end (a step, the opening) is dropped.  The environment closes at the
 * delivery, before the callback, so the callback may start another episode in the agent's place, or at the
 * discard; the agent's memory goes last, in agent_destroy. */
#include <stdlib.h>
#include <string.h>

#include "rollout/internal.h"
#include "text/toolcall.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/time.h"

uint64_t lt_agent_task_id(const lt_agent_t *a) { return a->task.task_id; }

int lt_agent_chat_load(const char *model_dir, const char *tool_format, lt_chat_template_t **chat, lt_tool_format *fmt) {
  *chat = NULL;
  int rc = model_dir && lt_fs_is_dir(model_dir) ? lt_chat_template_load(model_dir, chat) : LT_ENOENT;
  if (rc == LT_ENOENT) rc = 0, lt_error_clear();
  if (rc < 0) return rc;
  if (!tool_format || !strcmp(tool_format, "auto")) {
    *fmt = lt_toolcall_format_detect(*chat ? lt_chat_template_source(*chat, 1) : NULL);
    return 0;
  }
  if ((rc = lt_toolcall_format_parse(tool_format, fmt)) < 0) {
    lt_chat_template_free(*chat);
    *chat = NULL;
  }
  return rc;
}

int lt__agent_context_room(const lt_agent_t *a) {
  lt_backend_info_t bi;
  lt_backend_info(a->ctx->backend, &bi);
  return a->task.max_context < bi.max_context ? a->task.max_context : bi.max_context;
}

int lt__agent_push_turn(lt_agent_t *a, const lt_turn_t *t, const lt_prefill_routing_t *pre, int *gen_at) {
  int rc = lt__rec_push_turn(&a->traj, a->append, a->nappend, t, pre, gen_at);
  a->nappend = 0;
  return rc;
}

/* The one free: every path ends here, from the timer's close; what runs was stopped (agent_halt) and the episode
 * closed before (agent_deliver, lt_agent_discard), while the gateway, engine and environments were still up. */
static void agent_destroy(lt_agent_t *a) {
  if (a->play) lt__play_free(a);
  if (a->loop) lt__loop_free(a);
  lt_traj_free(&a->traj);
  free(a->append), free(a->last_text), free(a->error), free(a->task.domain), free(a->task.env), free(a->task.session);
  cJSON_Delete(a->task.spec);
  cJSON_Delete(a->messages);
  cJSON_Delete(a->components);
  free(a);
}

static void agent_on_closed(uv_handle_t *h) { agent_destroy(h->data); }

static void agent_close(lt_agent_t *a) {
  a->state = LT__EP_CLOSING;
  uv_close((uv_handle_t *)&a->timer, agent_on_closed);
}

/* Stops what could still call the agent back, but the reward and the environment. */
static void agent_halt(lt_agent_t *a) {
  if (a->play) lt__play_stop(a);
  if (a->loop) lt__loop_stop(a);
  if (a->gen) lt_gen_close(a->gen), a->gen = NULL;
}

/* The episode's diff (reference.diff, the swe environment's) as the TRAJ carries it: at most LT_PROTO_MAX_DIFF
 * bytes, a longer one cut at a line with a note of its size (kept for reading: the judge had the whole). */
static char *agent_episode_diff(const lt_agent_t *a) {
  const cJSON *d = a->ep ? cJSON_GetObjectItemCaseSensitive(lt_episode_reference(a->ep), "diff") : NULL;
  if (!cJSON_IsString(d) || !d->valuestring[0]) return NULL;
  size_t n = strlen(d->valuestring);
  if (n <= LT_PROTO_MAX_DIFF) return strdup(d->valuestring);
  size_t keep = LT_PROTO_MAX_DIFF - 128;
  while (keep && d->valuestring[keep - 1] != '\n') keep--;
  char *s = malloc(LT_PROTO_MAX_DIFF + 1);
  if (s)
    snprintf(s, LT_PROTO_MAX_DIFF + 1, "%.*s# longtail: the diff was cut here, at %zu of its %zu bytes\n", (int)keep,
             d->valuestring, keep, n);
  return s;
}

/* Completes the record with the outcome and hands it over as the TRAJ. */
static void agent_deliver(lt_agent_t *a) {
  if (a->play && lt__play_seal(a) < 0) {
    a->status = LT_TRAJ_ERROR, a->finish = LT_FINISH_NONE, a->reason = "worker_error";
    free(a->error);
    a->error = strdup("out of memory");
  }
  lt_msg_t m = {.type = LT_MSG_TRAJ};
  lt_traj_t *t = &m.u.traj;
  *t = a->traj; /* the arrays move into the message */
  a->traj = (lt_traj_t){0};
  t->task_id = a->task.task_id;
  t->group_id = a->task.group_id;
  t->domain = strdup(a->task.domain ? a->task.domain : "");
  t->status = a->status;
  t->finish = a->finish;
  t->reason = strdup(a->reason ? a->reason : "");
  t->error = strdup(a->error ? a->error : "");
  t->has_reward = a->status == LT_TRAJ_OK && a->has_reward;
  if (a->status == LT_TRAJ_OK && !a->has_reward) /* cannot happen: no reward → reward_failed */
    t->status = LT_TRAJ_REWARD_FAILED;
  t->reward = a->reward;
  t->components = a->components ? a->components : cJSON_CreateObject();
  a->components = NULL;
  t->turns = a->turns;
  t->eval = a->task.eval;
  t->gen_ms = a->t_gen * 1e3;
  t->env_ms = a->t_env * 1e3;
  t->reward_ms = a->has_reward ? a->t_reward * 1e3 : 0;
  t->messages = cJSON_Duplicate(a->messages, 1);
  t->diff = agent_episode_diff(a);
  t->temperature = a->temperature;
  lt_backend_info_t bi;
  lt_backend_info(a->ctx->backend, &bi);
  /* A server that truncates out of sight sends no support, so the TASK's settings apply (docs/protocol.md). */
  if (!bi.support_known) {
    free(t->support), free(t->support_ids);
    t->support = t->support_ids = NULL, t->nsupport_ids = 0;
  }
  if (!t->ntokens) { /* no routing frames for no tokens */
    free(t->routing_ids), free(t->routing_probs);
    t->routing_ids = NULL, t->routing_probs = NULL;
    t->routing_layers = t->routing_k = t->routing_experts = 0;
  }
  if (t->nseqs <=
      1) { /* one context: no seq_starts frame (several: an agent program's calls that diverged, or the loop's rewrites) */
    free(t->seq_starts);
    t->seq_starts = NULL, t->nseqs = 0;
  }
  if (!t->tokens) { /* an episode that ended before any token: keep the required arrays non-NULL */
#define PLACEHOLDER(m, dtype, elem, routed, required) \
  if (required) t->m = calloc(1, sizeof *t->m);
    LT_TRAJ_TOKEN_ARRAYS(PLACEHOLDER)
#undef PLACEHOLDER
    t->ntokens = 0;
  }
  lt_episode_close(a->ep); /* its resources go before the callback, which may start the next episode */
  a->ep = NULL;
  a->cb(a, &m, a->ud);
  agent_close(a);
}

static void agent_on_timer(uv_timer_t *t) { agent_deliver(t->data); }

static void agent_ended(lt_agent_t *a) {
  a->state = LT__EP_ENDED;
  uv_timer_start(&a->timer, agent_on_timer, 0, 0);
}

static void agent_on_reward(lt_reward_result_t *res, void *ud) {
  lt_agent_t *a = ud;
  a->t_reward = lt_time_mono_s() - a->t_reward;
  if (a->state == LT__EP_DROPPED) {
    cJSON_Delete(res->components);
    free(res->error);
    agent_close(a);
    return;
  }
  if (res->status == 0) {
    a->has_reward = 1;
    a->reward = res->reward;
    cJSON_Delete(a->components);
    a->components = res->components;
  } else {
    a->status = LT_TRAJ_REWARD_FAILED;
    free(a->error);
    a->error = res->error;
    res->error = NULL;
    cJSON_Delete(res->components);
  }
  free(res->error);
  a->state = LT__EP_ENDED;
  agent_deliver(a);
}

static void agent_score(lt_agent_t *a) {
  const cJSON *first_user = NULL;
  for (const cJSON *m = a->messages->child; m && !first_user; m = m->next) {
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(m, "role");
    if (cJSON_IsString(r) && !strcmp(r->valuestring, "user"))
      first_user = cJSON_GetObjectItemCaseSensitive(m, "content");
  }
  lt_reward_case_t k = {.domain = a->task.domain,
                        .prompt = cJSON_IsString(first_user) ? first_user->valuestring : "",
                        .response = a->last_text ? a->last_text : "",
                        .reference = lt_episode_reference(a->ep),
                        .messages = a->messages,
                        .response_tokens = a->generated,
                        .truncated = a->finish == LT_FINISH_TRUNCATED,
                        .malformed_tool_calls = a->malformed};
  a->t_reward = lt_time_mono_s();
  a->state = LT__EP_SCORING;
  if (lt_rewarder_score(a->ctx->rewarder, &k, agent_on_reward, a) < 0) {
    a->status = LT_TRAJ_REWARD_FAILED;
    free(a->error);
    a->error = strdup(lt_error_msg());
    agent_ended(a);
  }
}

/* A timeout is the policy's failure (docs/losses.md, "How an episode ends"): the lowest reward its domain gives,
 * not a score of the unfinished answer and not a bootstrapped value. */
static int agent_timeout_reward(lt_agent_t *a) {
  cJSON *c = cJSON_CreateObject();
  double r = lt_reward_failure(a->ctx->cfg, a->task.domain);
  if (!c || !cJSON_AddNumberToObject(c, "timeout", r)) {
    cJSON_Delete(c);
    return lt_error_set(LT_ENOMEM, "agent: out of memory");
  }
  cJSON_Delete(a->components);
  a->components = c;
  a->has_reward = 1;
  a->reward = r;
  return 0;
}

/* The outcome is set: a timeout gets its failure reward, an ok end without a reward of its own is scored. */
static void agent_reward(lt_agent_t *a) {
  if (a->status == LT_TRAJ_OK && a->finish == LT_FINISH_TIMEOUT && agent_timeout_reward(a) < 0) {
    a->status = LT_TRAJ_ERROR, a->finish = LT_FINISH_NONE, a->reason = "worker_error";
    free(a->error);
    a->error = strdup(lt_error_msg());
  }
  if (a->status == LT_TRAJ_OK && !a->has_reward) /* an agent program may have reported its own */
    agent_score(a);
  else agent_ended(a);
}

/* The environment judged the end state: its verdict is in the reference; rc < 0: it could not (env_error). */
static void agent_on_judged(lt_episode_t *ep, int rc, void *ud) {
  (void)ep;
  lt_agent_t *a = ud;
  if (rc < 0) {
    a->status = LT_TRAJ_ENV_ERROR, a->finish = LT_FINISH_NONE, a->reason = "env_error";
    free(a->error);
    a->error = strdup(lt_error_msg());
  }
  agent_reward(a);
}

void lt__agent_end(lt_agent_t *a, lt_traj_status st, lt_finish fin, const char *reason, const char *err) {
  if (a->state != LT__EP_OPENING && a->state != LT__EP_RUNNING) return;
  a->status = st;
  a->finish = fin;
  a->reason = reason;
  free(a->error);
  a->error = err ? strdup(err) : NULL;
  agent_halt(a);
  /* swe judges its end state (a timeout gets its diff, not its tests); 1: nothing to judge */
  int rc =
      a->status == LT_TRAJ_OK && a->ep ? lt_episode_end(a->ep, a->finish != LT_FINISH_TIMEOUT, agent_on_judged, a) : 1;
  if (rc == 0) a->state = LT__EP_JUDGING;
  else if (rc < 0) agent_on_judged(a->ep, rc, a);
  else agent_reward(a);
}

static void agent_on_open(lt_episode_t *ep, int rc, cJSON *opening, void *ud) {
  (void)ep;
  lt_agent_t *a = ud;
  if (a->state != LT__EP_OPENING || rc < 0) { /* it ended while it opened (aborted), or the opening failed */
    cJSON_Delete(opening);
    if (rc < 0) lt__agent_end(a, LT_TRAJ_ENV_ERROR, LT_FINISH_NONE, "env_error", lt_error_msg());
    return;
  }
  a->state = LT__EP_RUNNING;
  if (a->loop) {
    lt__loop_start(a, opening);
    return;
  }
  cJSON_Delete(opening); /* the program reads its task from LONGTAIL_TASK */
  if (lt__play_start(a) < 0) lt__agent_end(a, LT_TRAJ_ENV_ERROR, LT_FINISH_NONE, "env_error", lt_error_msg());
}

int lt_agent_start(lt_agent_ctx_t *ctx, const lt_task_t *task, lt_agent_done_cb cb, void *ud, lt_agent_t **out) {
  *out = NULL;
  lt_agent_t *a = calloc(1, sizeof *a);
  if (!a) return lt_error_set(LT_ENOMEM, "agent: out of memory");
  a->ctx = ctx;
  a->task = *task;
  a->task.domain = strdup(task->domain ? task->domain : "");
  a->task.env = strdup(task->env ? task->env : "");
  a->task.session = strdup(task->session ? task->session : "");
  a->task.spec = cJSON_Duplicate(task->spec, 1);
  a->messages = cJSON_CreateArray();
  a->cb = cb;
  a->ud = ud;
  a->temperature = task->eval ? 0.0 : task->temperature;
  lt_backend_info_t bi;
  lt_backend_info(ctx->backend, &bi);
  if (bi.routing_layers > 0 && bi.routing_k > 0) { /* an MoE backend's routing, recorded with every token */
    a->traj.routing_layers = bi.routing_layers;
    a->traj.routing_k = bi.routing_k;
    a->traj.routing_experts = bi.routing_experts;
  }
  int domain_turns = ctx->envs && a->task.domain ? lt_envs_max_turns(ctx->envs, a->task.domain) : 0;
  if (domain_turns > 0) a->task.max_turns = domain_turns; /* the domain's own (swe's params.max_turns) */
  uv_timer_init(ctx->loop, &a->timer);
  a->timer.data = a;
  *out = a;
  const lt_envs_agent_t *prog = ctx->envs && a->task.domain ? lt_envs_agent(ctx->envs, a->task.domain) : NULL;
  int rc = !a->task.domain || !a->task.env || !a->task.session || !a->task.spec || !a->messages
               ? lt_error_set(LT_ENOMEM, "out of memory")
           : prog ? lt__play_new(a, prog)
                  : lt__loop_new(a);
  if (rc < 0) {
    lt__agent_end(a, LT_TRAJ_ERROR, LT_FINISH_NONE, "worker_error", lt_error_msg());
    return 0;
  }
  /* From here on every failure becomes the trajectory's status, delivered on the loop.  The
   * environment opens off the loop where that blocks (a program in the sandbox). */
  if (lt_episode_open_async(ctx->envs, a->task.domain, a->task.spec, (uint64_t)task->seed, agent_on_open, a, &a->ep) <
      0)
    lt__agent_end(a, LT_TRAJ_ENV_ERROR, LT_FINISH_NONE, "env_error", lt_error_msg());
  return 0;
}

void lt_agent_abort(lt_agent_t *a, const char *reason) {
  lt__agent_end(a, LT_TRAJ_ABORTED, LT_FINISH_NONE, "aborted", reason ? reason : "aborted"); /* no-op once ended */
}

void lt_agent_discard(lt_agent_t *a) {
  if (a->state == LT__EP_DROPPED || a->state == LT__EP_CLOSING) return;
  agent_halt(a);           /* a no-op once it ended */
  lt_episode_close(a->ep); /* now, while the environments are up (a worker's shutdown closes them next) */
  a->ep = NULL;
  uv_timer_stop(&a->timer);
  if (a->state == LT__EP_SCORING) a->state = LT__EP_DROPPED; /* the reward cannot be called back: it closes */
  else agent_close(a);
}
