/* An `agent` domain's episode, played by its program through the gateway (docs/agent-gateway.md): the program
 * starts with the episode's token and base URL; each call the gateway authenticates reaches the episode through
 * the session its token names (lt_gateway_session_t) and is generated, answered and recorded here.
 *
 * The record is one or more contexts: every token the episode's calls prefilled (loss mask 0) and generated (mask
 * 1) in order.  A call whose rendered prompt starts with the current context's text extends it: only the new text
 * is tokenized, the generated tokens stay the ones sampled (never re-tokenized) and the generation session keeps
 * its KV cache.  A call that diverges (the program edited or compacted its history) starts a new context.  A call
 * that arrives while another is being answered is a side call (play_side_t): its own session and context, joined
 * to the trajectory once answered.  The gateway's hooks get a tagged session: the episode's own (PLAY_MAIN), or a
 * side call's (PLAY_SIDE), which prepare() hands on for the rest of that call. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rollout/internal.h"
#include "util/error.h"
#include "util/log.h"
#include "util/time.h"

typedef struct play_side play_side_t;

struct lt_gateway_session {
  enum {
    PLAY_MAIN,
    PLAY_SIDE
  } kind; /* the episode's calls one after another, or one made while another was answered */
  lt__play_t *play;
  play_side_t *side; /* PLAY_SIDE: that call */
};

struct lt__play {
  lt_gateway_session_t session; /* PLAY_MAIN: what the episode's token names */
  lt_agent_t *a;
  const lt_envs_agent_t *opts;
  lt_program_t *prog;
  lt_oai_gen_t *og; /* the call being generated */
  int committed;    /* the record's tokens up to the last answered call */
  int committed_sids;
  int call_gen;    /* where the call in flight's generated tokens start */
  int32_t *prompt; /* the call's whole context: the record, then what it adds */
  int capprompt;
  const char *limit;  /* "turn_limit" | "context_limit": the gateway ended the episode */
  int gen_base;       /* where the generation session's context starts in the record */
  double call_temp;   /* honor_sampling: the episode's temperature, < 0 before the first call */
  double t_call;      /* when the call in flight started generating */
  play_side_t *sides; /* side calls not yet ended */
  lt_traj_t side;     /* the answered ones' contexts (arrays only), before the record's in the TRAJ */
  uint64_t nsides;    /* side calls so far (their sessions' seeds) */
};

/* A call of the episode that arrived while another was being answered (an
 * agent asking for a session title beside its main request, parallel
 * sub-agents): it gets a generation session and a context of its own, exactly
 * as rendered, and once answered that context joins the trajectory. */
struct play_side {
  lt_gateway_session_t session; /* PLAY_SIDE */
  play_side_t *next;
  lt_gen_t *gen;
  lt_oai_gen_t *og;      /* being generated */
  const int32_t *prompt; /* the layer's rendered ids (valid until the call ends) */
  int nprompt;
  lt_traj_t rec; /* its prompt (loss mask 0) and what it generated (arrays only) */
  int gen_at;    /* where rec's generated tokens start */
  int held;      /* it holds the program's clock (lt_program_hold) until freed */
};

#define LIMIT_GRACE_MS 2000 /* after the call past a limit, the program's time to exit before its group is killed */

/* The gateway ended the episode (turn_limit, context_limit): later calls get 401, and the program, which may go on
 * retrying them (an agent CLI compacts and calls again), has LIMIT_GRACE_MS to exit. */
static void play_limit(lt__play_t *p, const char *limit) {
  p->limit = limit;
  lt_gateway_revoke(p->a->ctx->gateway, &p->session);
  if (p->prog) lt_program_end_after(p->prog, LIMIT_GRACE_MS);
}

int lt__play_new(lt_agent_t *a, const lt_envs_agent_t *opts) {
  lt__play_t *p = calloc(1, sizeof *p);
  if (!p) return lt_error_set(LT_ENOMEM, "agent: out of memory");
  p->session = (lt_gateway_session_t){.kind = PLAY_MAIN, .play = p};
  p->a = a;
  p->opts = opts;
  p->call_temp = -1;
  p->side = (lt_traj_t){.routing_layers = a->traj.routing_layers,
                        .routing_k = a->traj.routing_k,
                        .routing_experts = a->traj.routing_experts};
  a->play = p;
  return 0;
}

static void play_side_free(play_side_t *c) {
  lt__play_t *p = c->session.play;
  for (play_side_t **q = &p->sides; *q; q = &(*q)->next)
    if (*q == c) {
      *q = c->next;
      break;
    }
  if (c->gen) lt_gen_close(c->gen);
  if (c->held && p->prog) lt_program_release(p->prog);
  lt_traj_free(&c->rec);
  free(c);
}

/* Ends every side call (the episode ended): the calls in flight fail. */
static void play_sides_stop(lt__play_t *p) {
  while (p->sides) {
    play_side_t *c = p->sides;
    lt_oai_gen_t *og = c->og;
    c->og = NULL;
    if (og) lt_oai_gen_end(og, LT_ECANCELED, 0, "the episode ended");
    play_side_free(c);
  }
}

/* A call is being answered from here to play_call_over: the program waits on the engine, so its timeout_s clock
 * stands still meanwhile, and its first call ends its start-up deadline (docs/agent-gateway.md: neither the
 * engine's slowness nor the program's start-up is the policy's). */
static void play_call_begin(lt__play_t *p, lt_oai_gen_t *g) {
  p->og = g;
  if (p->prog) lt_program_hold(p->prog);
}

static lt_oai_gen_t *play_call_over(lt__play_t *p) {
  lt_oai_gen_t *og = p->og;
  p->og = NULL;
  if (og && p->prog) lt_program_release(p->prog);
  return og;
}

static void play_end_call(lt__play_t *p, int rc, const char *msg) {
  lt_oai_gen_t *og = play_call_over(p);
  if (og) lt_oai_gen_end(og, rc, 0, msg);
}

void lt__play_stop(lt_agent_t *a) {
  lt__play_t *p = a->play;
  lt_gateway_revoke(a->ctx->gateway, &p->session);
  play_end_call(p, LT_ECANCELED, "the episode ended");
  play_sides_stop(p);
  if (p->prog) lt_program_kill(p->prog);
  p->prog = NULL;
}

int lt__play_seal(lt_agent_t *a) {
  lt__play_t *p = a->play;
  /* Concurrent calls' contexts first, so that the last context is the record's (a truncated trajectory
   * bootstraps from its end). */
  if (!p->side.ntokens) return 0;
  int rc = lt__rec_append(&p->side, &a->traj);
  if (rc < 0) return rc;
  lt_traj_t r = a->traj;
  a->traj = p->side, p->side = r;
  return 0;
}

void lt__play_free(lt_agent_t *a) {
  lt__play_t *p = a->play; /* stopped already (lt__play_stop): no program, call or side call is left */
  lt_traj_free(&p->side);
  free(p->prompt);
  free(p);
  a->play = NULL;
}

/* A reward the program reported, if it did: its last stdout line {"reward": number, ...}. */
static void play_reward(lt_agent_t *a, const char *line) {
  cJSON *o = line[0] == '{' ? cJSON_Parse(line) : NULL;
  const cJSON *r = cJSON_GetObjectItemCaseSensitive(o, "reward");
  int ok = cJSON_IsNumber(r) && isfinite(r->valuedouble);
  if (ok) {
    a->has_reward = 1;
    a->reward = r->valuedouble;
    cJSON_Delete(a->components);
    a->components = cJSON_CreateObject();
    cJSON_AddNumberToObject(a->components, "agent", a->reward);
  }
  cJSON_Delete(o);
}

/* Appends "; NAME: " and at most the last 1900 bytes of a stream's tail, less its trailing newlines. */
static int play_tail(char *why, size_t n, int k, const char *name, const char *tail) {
  size_t len = strlen(tail);
  while (len && (tail[len - 1] == '\n' || tail[len - 1] == '\r' || tail[len - 1] == ' ')) len--;
  size_t from = len > 1900 ? len - 1900 : 0;
  return len ? k + snprintf(why + k, n - (size_t)k, "; %s: %.*s", name, (int)(len - from), tail + from) : k;
}

/* Why a program failed: how it ended, and the ends of its stderr and stdout (an agent CLI's print mode writes its
 * error to stdout), within a TRAJ's string limit (LT_PROTO_MAX_STR). */
static void play_why(const lt_program_result_t *r, char *why, size_t n) {
  int k = r->signal ? snprintf(why, n, "agent program killed by signal %d", r->signal)
                    : snprintf(why, n, "agent program exited with status %d", r->exit_code);
  k = play_tail(why, n, k, "stderr", r->err_tail);
  play_tail(why, n, k, "stdout", r->out_tail);
}

static void play_on_exit(lt_program_t *prog, const lt_program_result_t *r, void *ud) {
  (void)prog;
  lt_agent_t *a = ud;
  lt__play_t *p = a->play;
  p->prog = NULL;
  a->t_env = lt_time_mono_s() - a->t0 - a->t_gen;
  int clean = !r->signal && r->exit_code == 0 && !r->timed_out; /* it exited 0 of its own accord */
  char why[4000];
  play_why(r, why, sizeof why);
  if (a->generated == 0 && (p->limit || r->timed_out || clean)) /* nothing to train on, and no reward to invent */
    lt__agent_end(a, LT_TRAJ_ENV_ERROR, LT_FINISH_NONE, "env_error",
                  p->limit       ? "the agent program's first call did not fit rollout.max_context"
                  : r->timed_out ? "the agent program was killed at its deadline before any of its calls was answered "
                                   "(it has timeout_s + 60 s to make its first)"
                                 : "the agent program exited without an answered call");
  else if (p->limit) lt__agent_end(a, LT_TRAJ_OK, LT_FINISH_TRUNCATED, p->limit, NULL);
  else if (r->timed_out) lt__agent_end(a, LT_TRAJ_OK, LT_FINISH_TIMEOUT, "agent_timeout", NULL);
  else if (!clean) lt__agent_end(a, LT_TRAJ_ENV_ERROR, LT_FINISH_NONE, "env_error", why);
  else {
    if (!p->opts->image) play_reward(a, r->last_line); /* in a task's root its hidden tests judge it */
    lt__agent_end(a, LT_TRAJ_OK, LT_FINISH_TERMINATED, "agent_done", NULL);
  }
}

/* What the program reads on stdin: the task's JSON line, or (params.stdin "prompt") its last user message's text. */
static char *play_stdin(const lt__play_t *p, const cJSON *row, const char *line) {
  const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(row, "messages"), *text = NULL;
  for (const cJSON *m = msgs ? msgs->child : NULL; m && p->opts->stdin_prompt; m = m->next) {
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
    if (cJSON_IsString(role) && !strcmp(role->valuestring, "user"))
      text = cJSON_GetObjectItemCaseSensitive(m, "content");
  }
  const char *s = !p->opts->stdin_prompt ? line : cJSON_IsString(text) ? text->valuestring : "";
  char *in = malloc(strlen(s) + 2);
  if (in) sprintf(in, "%s\n", s);
  return in;
}

/* An agent program inside the task's root: its end and its kill are the environment's (lt_episode_program). */
static int play_episode_wait(void *ep, int *wstatus) { return lt_episode_program_wait(ep, wstatus); }
static void play_episode_kill(void *ep) { lt_episode_program_kill(ep); }
static const lt_program_ops_t play_episode_ops = {play_episode_wait, play_episode_kill};

int lt__play_start(lt_agent_t *a) {
  lt__play_t *p = a->play;
  if (!a->ctx->gateway) return lt_error_set(LT_EINVAL, "agent domain %s: this worker has no gateway", a->task.domain);
  cJSON *row = cJSON_Duplicate(a->task.spec, 1);
  if (row && !p->opts->pass_answer) cJSON_DeleteItemFromObjectCaseSensitive(row, "answer");
  for (const char *const *k = p->opts->hidden; row && k && *k; k++) cJSON_DeleteItemFromObjectCaseSensitive(row, *k);
  char *line = row ? cJSON_PrintUnformatted(row) : NULL, *in = line ? play_stdin(p, row, line) : NULL;
  cJSON_Delete(row);
  char token[65], base[LT_GATEWAY_URL_MAX], url[128], key[128], aurl[128], akey[128];
  int rc = in ? lt_gateway_admit(a->ctx->gateway, &p->session, token, base)
              : lt_error_set(LT_ENOMEM, "agent: out of memory");
  char *task = rc == 0 ? malloc(strlen(line) + 16) : NULL;
  if (rc == 0 && !task) rc = lt_error_set(LT_ENOMEM, "agent: out of memory");
  if (rc == 0) {
    /* OpenAI's SDKs take the base with /v1, Anthropic's without (they add /v1/messages). */
    snprintf(url, sizeof url, "OPENAI_BASE_URL=%s", base);
    snprintf(key, sizeof key, "OPENAI_API_KEY=%s", token);
    snprintf(aurl, sizeof aurl, "ANTHROPIC_BASE_URL=%.*s", (int)(strlen(base) - 3), base);
    snprintf(akey, sizeof akey, "ANTHROPIC_API_KEY=%s", token);
    sprintf(task, "LONGTAIL_TASK=%s", line);
    const char *env[] = {url, key, aurl, akey, task, NULL};
    lt_sandbox_limits_t lim = *lt_envs_sandbox(a->ctx->envs); /* the run's sandbox section, the domain's overrides */
    lim.port = lt_gateway_port(a->ctx->gateway);
    if (p->opts->memory_mb) lim.memory_mb = p->opts->memory_mb;
    lim.ro_dirs = (const char *const *)p->opts->read_only;
    a->t0 = lt_time_mono_s();
    int fds[3];
    if (p->opts->image) { /* inside the task's root, which the environment holds */
      if ((rc = lt_episode_program(a->ep, p->opts->argv, env, fds)) == 0)
        rc = lt_program_attach(a->ctx->loop, fds, &play_episode_ops, a->ep, in, p->opts->timeout_s, play_on_exit, a,
                               &p->prog);
    } else {
      rc = lt_program_start(a->ctx->loop, p->opts->argv, env, in, p->opts->timeout_s, p->opts->sandbox ? &lim : NULL,
                            play_on_exit, a, &p->prog);
    }
  }
  if (rc < 0) lt_gateway_revoke(a->ctx->gateway, &p->session);
  free(task), free(in), free(line);
  return rc;
}

/* ---- the calls ---- */

/* The record's tokens [from, a->traj.ntokens) and then `add` become the queue to prefill. */
static int play_requeue(lt_agent_t *a, int from, const int32_t *add, int nadd) {
  int n = a->traj.ntokens - from;
  int32_t *q = malloc(sizeof *q * (size_t)(n + nadd + 1));
  if (!q) return lt_error_set(LT_ENOMEM, "agent: out of memory");
  if (n) memcpy(q, a->traj.tokens + from, sizeof *q * (size_t)n);
  if (nadd) memcpy(q + n, add, sizeof *q * (size_t)nadd);
  free(a->append);
  a->append = q, a->nappend = n + nadd, a->capappend = n + nadd + 1;
  a->traj.ntokens = from; /* pushed again, with the prefill's routing, when the turn ends */
  return 0;
}

/* Does the call extend the current context?  Then *add, *nadd (malloc'd) are
 * what it adds: the new text tokenized, the record's generated tokens kept. */
static int play_extension(lt_agent_t *a, const lt_oai_plan_t *plan, int32_t **add, int *nadd) {
  const lt_tokenizer_t *tok = lt_backend_tokenizer(a->ctx->backend);
  int s0 = lt__rec_seq0(&a->traj), n = a->traj.ntokens - s0, cap = 0, rc = 0;
  *add = NULL, *nadd = 0;
  if (n <= 0) return 0;
  if (!plan->chat) { /* a text prompt: the layer's ids must start with the context's */
    if (plan->nprompt <= n || memcmp(plan->prompt, a->traj.tokens + s0, sizeof *a->traj.tokens * (size_t)n)) return 0;
    if (!(*add = malloc(sizeof **add * (size_t)(plan->nprompt - n))))
      return lt_error_set(LT_ENOMEM, "agent: out of memory");
    memcpy(*add, plan->prompt + n, sizeof **add * (size_t)(plan->nprompt - n));
    *nadd = plan->nprompt - n;
    return 1;
  }
  char *rec = NULL;
  size_t rlen = 0;
  int extends = 0;
  if ((rc = lt_tokenizer_decode(tok, a->traj.tokens + s0, n, 0, &rec, &rlen)) ==
      0) /* the call's prompt as the layer rendered it */
    extends = plan->ntext > rlen && memcmp(plan->text, rec, rlen) == 0;
  if (rc == 0 && extends) rc = lt_ids_text(tok, plan->text + rlen, add, nadd, &cap);
  free(rec);
  return rc < 0 ? rc : extends;
}

/* The call's context: the current one extended by the new text, or a new
 * context of the same trajectory, as the layer rendered it. */
static int play_call_context(lt_agent_t *a, lt_oai_plan_t *plan) {
  lt__play_t *p = a->play;
  int32_t *add = NULL;
  int nadd = 0, rc = play_extension(a, plan, &add, &nadd);
  if (rc < 0) return rc;
  if (rc == 0) { /* a new context */
    free(add);
    if ((rc = lt__rec_new_context(&a->traj)) < 0) return rc;
    if (a->gen) lt_gen_close(a->gen), a->gen = NULL;
    add = (int32_t *)plan->prompt, nadd = plan->nprompt;
  }
  int s0 = lt__rec_seq0(&a->traj);
  if (a->gen &&
      (p->gen_base != s0 || lt_gen_len(a->gen) != a->traj.ntokens - s0)) /* it holds tokens the record dropped */
    lt_gen_close(a->gen), a->gen = NULL;
  /* A fresh session prefills the whole context; a kept one only what the call adds. */
  rc = play_requeue(a, a->gen ? a->traj.ntokens : s0, add, nadd);
  if (add != plan->prompt) free(add);
  if (rc == 0 && !a->gen) {
    rc = lt_gen_open(a->ctx->backend, (uint64_t)a->task.seed + (uint64_t)a->turns * 0x9e3779b97f4a7c15ull, &a->gen);
    p->gen_base = s0;
  }
  if (rc < 0) return rc;
  int need = a->traj.ntokens - s0 + a->nappend;
  if (p->capprompt < need) {
    int32_t *q = realloc(p->prompt, sizeof *q * (size_t)need);
    if (!q) return lt_error_set(LT_ENOMEM, "agent: out of memory");
    p->prompt = q, p->capprompt = need;
  }
  if (a->traj.ntokens > s0) memcpy(p->prompt, a->traj.tokens + s0, sizeof *p->prompt * (size_t)(a->traj.ntokens - s0));
  if (a->nappend) memcpy(p->prompt + a->traj.ntokens - s0, a->append, sizeof *p->prompt * (size_t)a->nappend);
  plan->prompt = p->prompt;
  plan->nprompt = need;
  return 0;
}

/* The episode's session (authorize() gave it): the call's context, sampling and budget; a call made while another
 * is being answered becomes a side call, whose session the call's later hooks get. */
static int play_prepare(lt_gateway_session_t *s, lt_oai_plan_t *plan) {
  lt__play_t *p = s->play;
  lt_agent_t *a = p->a;
  if (a->state != LT__EP_RUNNING || p->limit) return lt_error_set(LT_EINVAL, "the episode has ended");
  if (plan->n != 1) return lt_error_set(LT_EINVAL, "n: the agent gateway answers one choice per call");
  int inflight = p->og != NULL; /* calls being answered count against the limit too */
  for (const play_side_t *c = p->sides; c; c = c->next) inflight++;
  if (a->turns + inflight >= a->task.max_turns) {
    play_limit(p, "turn_limit");
    return lt_error_set(LT_EINVAL, "the episode reached its turn limit (rollout.max_turns = %d calls) and has ended",
                        a->task.max_turns);
  }
  if (!p->opts->honor_sampling) {
    plan->sp = (lt_sampling_t){.temperature = a->task.eval ? 0.0f : (float)a->task.temperature,
                               .top_p = (float)a->task.top_p,
                               .top_k = a->task.top_k};
  } else if (p->call_temp >= 0 && p->call_temp != plan->sp.temperature) {
    return lt_error_set(LT_EINVAL,
                        "temperature: an episode samples at one temperature (%g so far), the learner corrects for it",
                        p->call_temp);
  }
  play_side_t *side = NULL;
  if (p->og) { /* another call is being answered: this one is a context of its own, as rendered */
    if (!(side = calloc(1, sizeof *side))) return lt_error_set(LT_ENOMEM, "agent: out of memory");
    *side = (play_side_t){.session = {.kind = PLAY_SIDE, .play = p, .side = side},
                          .next = p->sides,
                          .prompt = plan->prompt,
                          .nprompt = plan->nprompt,
                          .rec = {.routing_layers = a->traj.routing_layers,
                                  .routing_k = a->traj.routing_k,
                                  .routing_experts = a->traj.routing_experts}};
    p->sides = side;
  } else {
    a->traj.ntokens = p->committed,
    a->traj.nsupport_ids = p->committed_sids; /* a call never answered leaves no trace */
    while (a->traj.nseqs > 1 && a->traj.seq_starts[a->traj.nseqs - 1] >= p->committed) a->traj.nseqs--;
    int rc = play_call_context(a, plan);
    if (rc < 0) return rc;
  }
  int room = lt__agent_context_room(a) - plan->nprompt;
  if (room <= 0) {
    if (side) play_side_free(side);
    return lt_error_set(LT_ERANGE, "the context (%d tokens) fills rollout.max_context (%d)", plan->nprompt,
                        lt__agent_context_room(a));
  }
  if (plan->max_new > room) plan->max_new = room;
  if (plan->max_new > a->task.max_new_tokens) plan->max_new = a->task.max_new_tokens; /* the rollout's budget */
  if (side) plan->session = &side->session; /* the later hooks of this call get it */
  return 0;
}

/* What every answered call adds to the episode. */
static void play_count_answer(lt__play_t *p, const lt_oai_result_t *r) {
  lt_agent_t *a = p->a;
  a->turns++;
  a->generated += r->choices[0].n;
  if (p->opts->honor_sampling) a->temperature = p->call_temp = r->plan->sp.temperature;
}

static void play_side_on_turn(lt_gen_t *g, const lt_turn_t *t, const lt_prefill_routing_t *pre, void *ud) {
  (void)g;
  play_side_t *c = ud;
  lt_oai_gen_t *og = c->og;
  c->og = NULL;
  int rc = og ? lt__rec_push_turn(&c->rec, c->prompt, c->nprompt, t, pre, &c->gen_at) : 0;
  /* answered (play_answered) runs inside lt_oai_gen_end, or never: the call is over after it. */
  if (og) lt_oai_gen_end(og, rc, t->stopped, rc < 0 ? lt_error_msg() : NULL);
  play_side_free(c);
}

/* Each token as it is generated (streaming, stop strings, top_logprobs), to the call whose address ud is (the
 * episode's or a side call's og; NULL once it ended); 1 from the layer ends the turn after it, so the session holds
 * what the agent got. */
static int play_on_token(lt_gen_t *g, int32_t token, float logprob, int ntop, const int32_t *ids, const float *lps,
                         void *ud) {
  (void)g;
  lt_oai_gen_t *og = *(lt_oai_gen_t **)ud;
  lt_oai_token_t t = {.token = token, .logprob = logprob, .ntop = ntop, .top_ids = ids, .top_logprobs = lps};
  return og ? lt_oai_gen_token(og, &t) : 1;
}

static int play_side_generate(play_side_t *c, lt_oai_gen_t *g, const lt_oai_job_t *job) {
  lt__play_t *p = c->session.play;
  uint64_t seed = (uint64_t)p->a->task.seed + ++p->nsides * 0xbf58476d1ce4e5b9ull;
  int rc = lt_gen_open(p->a->ctx->backend, seed, &c->gen);
  if (rc == 0) {
    c->og = g;
    /* The program waits on this answer too: its clock stands still until the side call ends (the holds nest). */
    if (p->prog) lt_program_hold(p->prog), c->held = 1;
    lt_gen_watch(c->gen, job->plan->top_logprobs, play_on_token, &c->og);
    rc = lt_gen_turn(c->gen, c->prompt, c->nprompt, job->plan->max_new, &job->plan->sp, play_side_on_turn, c);
  }
  if (rc < 0) play_side_free(c); /* the call fails: no hook of it follows */
  return rc;
}

/* A side call answered: its context as the agent was told it. */
static void play_side_answered(play_side_t *c, const lt_oai_result_t *r) {
  lt__play_t *p = c->session.play;
  lt__rec_cut(&c->rec, c->gen_at + r->choices[0].n); /* exactly the tokens the agent was told about */
  if (lt__rec_append(&p->side, &c->rec) < 0) {
    LT_WARN("agent", "task %llu: a concurrent call's context is lost: %s", (unsigned long long)p->a->task.task_id,
            lt_error_msg());
    return;
  }
  play_count_answer(p, r);
}

static void play_on_turn(lt_gen_t *g, const lt_turn_t *t, const lt_prefill_routing_t *pre, void *ud) {
  (void)g;
  lt__play_t *p = ud;
  lt_agent_t *a = p->a;
  a->t_gen += lt_time_mono_s() - p->t_call;
  int rc = lt__agent_push_turn(a, t, pre, &p->call_gen);
  if (rc < 0) {
    lt_gen_close(a->gen), a->gen = NULL;
    play_end_call(p, rc, lt_error_msg());
    return;
  }
  lt_oai_gen_end(play_call_over(p), 0, t->stopped, NULL);
}

static int play_generate(lt_gateway_session_t *s, lt_oai_gen_t *g, const lt_oai_job_t *job) {
  if (s->kind == PLAY_SIDE) return play_side_generate(s->side, g, job);
  lt__play_t *p = s->play;
  lt_agent_t *a = p->a;
  play_call_begin(p, g);
  p->t_call = lt_time_mono_s();
  lt_gen_watch(a->gen, job->plan->top_logprobs, play_on_token, &p->og);
  int rc = lt_gen_turn(a->gen, a->append, a->nappend, job->plan->max_new, &job->plan->sp, play_on_turn, p);
  if (rc < 0) play_call_over(p);
  return rc;
}

static void play_cancel(lt_gateway_session_t *s) {
  if (s->kind == PLAY_SIDE) {
    play_side_free(s->side); /* its turn's callback will not run */
    return;
  }
  play_call_over(s->play);
  lt_agent_t *a = s->play->a;
  if (a->gen) lt_gen_close(a->gen), a->gen = NULL; /* its turn's callback will not run */
}

static void play_context_limit(lt_gateway_session_t *s, int need, int max_context) {
  lt__play_t *p = s->play;
  LT_DEBUG("agent", "task %llu: context %d of %d: the episode ends (context_limit)",
           (unsigned long long)p->a->task.task_id, need, max_context);
  play_limit(p, "context_limit");
}

static void play_answered(lt_gateway_session_t *s, const lt_oai_result_t *r) {
  if (s->kind == PLAY_SIDE) {
    play_side_answered(s->side, r);
    return;
  }
  lt__play_t *p = s->play;
  lt_agent_t *a = p->a;
  const lt_oai_choice_t *c = &r->choices[0];
  lt__rec_cut(&a->traj, p->call_gen + c->n); /* exactly the tokens the agent was told about */
  p->committed = a->traj.ntokens;
  p->committed_sids = a->traj.nsupport_ids;
  play_count_answer(p, r);
  free(a->last_text);
  a->last_text = strdup(c->text ? c->text : "");
  cJSON *msgs = cJSON_Duplicate(r->plan->messages ? r->plan->messages : NULL, 1), *m = cJSON_CreateObject();
  if (!msgs) msgs = cJSON_CreateArray();
  cJSON_AddStringToObject(m, "role", "assistant");
  cJSON_AddStringToObject(m, "content", a->last_text ? a->last_text : "");
  cJSON_AddItemToArray(msgs, m);
  cJSON_Delete(a->messages);
  a->messages = msgs;
}

const lt_gateway_session_ops_t lt_agent_gateway_ops = {.prepare = play_prepare,
                                                       .generate = play_generate,
                                                       .cancel = play_cancel,
                                                       .context_limit = play_context_limit,
                                                       .answered = play_answered};
