/* The agent loop (rollout/agent.h): one task from its environment's opening to a trajectory, turn by turn. */
#include "rollout/agent.h"

#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "text/toolcall.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/grow.h"
#include "util/log.h"
#include "util/time.h"

typedef struct side side_t;

struct lt_agent {
  lt_agent_t *self;         /* first, as a side call's agent: a gateway session is either (call_agent) */
  lt_agent_ctx_t *ctx;
  lt_task_t task;           /* copy; spec owned */
  lt_agent_done_cb cb;
  void *ud;
  lt_episode_t *ep;
  lt_gen_t *gen;
  uv_timer_t timer;         /* finishes on the loop (abort, early ends) */
  int finishing, reward_pending, discarded, closed;
  lt_traj_t traj;           /* the trajectory so far, the TRAJ it becomes: its tokens are one or more contexts one
                               after another (seq_starts: a diverging call or a context rewrite starts one) */
  cJSON *messages;
  int32_t *append;          /* context tokens waiting for the next turn */
  int nappend, capappend;
  char *last_text;
  char *stop_text;          /* the stop token that ended the last turn (chat templates) */
  int turns, generated, malformed;
  int seg_turns;            /* turns since the last context rewrite */
  int resets;               /* context rewrites so far */
  cJSON *opening;           /* the environment's opening chat, for discard-all restarts */
  lt_gen_t *sgen;           /* the policy summarizing its own context */
  double t_gen, t_env, t_reward, t0;
  /* outcome */
  lt_traj_status status;
  lt_finish finish;
  const char *reason;
  char *error;
  int has_reward;
  double reward;
  cJSON *components;
  /* an `agent` domain: the program plays the episode through the gateway */
  const lt_envs_agent_t *prog_opts;
  lt_program_t *prog;
  lt_oai_gen_t *og;         /* the call being generated */
  int committed;            /* the record's tokens up to the last answered call */
  int committed_sids;
  int call_gen;             /* where the call in flight's generated tokens start */
  int32_t *prompt;          /* the call's whole context: the record, then what it adds */
  int nprompt, capprompt;
  const char *limit;        /* "turn_limit" | "context_limit": the gateway ended the episode */
  int gen_base;             /* where the generation session's context starts in the record */
  double call_temp;         /* honor_sampling: the episode's temperature, < 0 before the first call */
  double t_call;            /* when the call in flight started generating */
  side_t *sides;            /* calls made while another was being answered, not yet ended */
  lt_traj_t side;           /* the answered ones' contexts (arrays only), before the record's in the TRAJ */
  uint64_t nsides;          /* side calls so far (their sessions' seeds) */
};

/* A call of the episode that arrived while another was being answered (an
 * agent asking for a session title beside its main request, parallel
 * sub-agents): it gets a generation session and a context of its own, exactly
 * as rendered, and once answered that context joins the trajectory. */
struct side {
  lt_agent_t *a;            /* first, as in lt_agent_t */
  side_t *next;
  lt_gen_t *gen;
  lt_oai_gen_t *og;         /* being generated */
  const int32_t *prompt;    /* the layer's rendered ids (valid until the call ends) */
  int nprompt;
  lt_traj_t rec;            /* its prompt (loss mask 0) and what it generated (arrays only) */
  int gen_at;               /* where rec's generated tokens start */
  int held;                 /* it holds the program's clock (lt_program_hold) until freed */
};

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

/* Routing entries per token of a record (layers x experts), 0 without. */
static size_t routed(const lt_traj_t *r) { return (size_t)r->routing_layers * (size_t)r->routing_k; }

/* Context tokens (prompt, chat markup, observations): loss mask 0. */
static int push_context(lt_traj_t *r, const int32_t *t, int n, const uint16_t *rids, const float *rprobs) {
  int rc = lt_traj_reserve(r, n);
  if (rc < 0) return rc;
  size_t R = routed(r);
  for (int i = 0; i < n; i++) {
    r->tokens[r->ntokens] = t[i];
    r->versions[r->ntokens] = -1;
    r->support[r->ntokens] = 0;
    r->logprobs[r->ntokens] = 0;
    r->loss_mask[r->ntokens] = 0;
    if (R) {
      if (rids) {
        memcpy(r->routing_ids + (size_t)r->ntokens * R, rids + (size_t)i * R, sizeof *rids * R);
        memcpy(r->routing_probs + (size_t)r->ntokens * R, rprobs + (size_t)i * R, sizeof *rprobs * R);
      } else {
        memset(r->routing_ids + (size_t)r->ntokens * R, 0, sizeof *rids * R);
        memset(r->routing_probs + (size_t)r->ntokens * R, 0, sizeof *rprobs * R);
      }
    }
    r->ntokens++;
  }
  return 0;
}

/* Where the current context starts in the record. */
static int seq0(const lt_traj_t *r) { return r->nseqs ? r->seq_starts[r->nseqs - 1] : 0; }

static int push_seq(lt_traj_t *r, int at) {
  lt_grow_t arr[] = {LT_GROW(r->seq_starts)};
  int rc = lt_grow(&r->cap_seqs, (size_t)r->nseqs + 1, 4, arr, 1);
  if (rc < 0) return rc;
  r->seq_starts[r->nseqs++] = at;
  return 0;
}

/* The record's next tokens start a new context of the trajectory; an empty
 * current context is reused. */
static int new_context(lt_traj_t *r) {
  int rc = r->nseqs ? 0 : push_seq(r, 0);
  if (rc == 0 && r->ntokens > seq0(r)) rc = push_seq(r, r->ntokens);
  return rc;
}

/* Keeps the record's first n tokens (and their sampling sets). */
static void rec_cut(lt_traj_t *r, int n) {
  int k = 0;
  for (int i = 0; i < n; i++) k += r->support[i];
  r->ntokens = n;
  r->nsupport_ids = k;
}

/* Room for n more sampling-set ids. */
static int reserve_support_ids(lt_traj_t *r, size_t n) {
  lt_grow_t arr[] = {LT_GROW(r->support_ids)};
  return lt_grow(&r->cap_support_ids, (size_t)r->nsupport_ids + n, 1024, arr, 1);
}

/* Appends src's contexts after dst's, each still a context of its own. */
static int rec_append(lt_traj_t *dst, const lt_traj_t *src) {
  int base = dst->ntokens, rc = dst->nseqs || !base ? 0 : push_seq(dst, 0);
  for (int k = 0; rc == 0 && src->ntokens && k < (src->nseqs ? src->nseqs : 1); k++)
    rc = push_seq(dst, base + (src->nseqs ? src->seq_starts[k] : 0));
  if (rc == 0) rc = lt_traj_reserve(dst, src->ntokens);
  if (rc == 0) rc = reserve_support_ids(dst, (size_t)src->nsupport_ids);
  if (rc < 0 || !src->ntokens) return rc;
  size_t n = (size_t)src->ntokens, R = routed(dst);
#define COPY_ARRAY(m, dtype, elem, is_routed, required) \
  if (dst->m) memcpy(dst->m + (size_t)base * ((is_routed) ? R : 1), src->m, sizeof *src->m * n * ((is_routed) ? R : 1));
  LT_TRAJ_TOKEN_ARRAYS(COPY_ARRAY)
#undef COPY_ARRAY
  if (src->nsupport_ids)
    memcpy(dst->support_ids + dst->nsupport_ids, src->support_ids, sizeof *src->support_ids * (size_t)src->nsupport_ids);
  dst->nsupport_ids += src->nsupport_ids;
  dst->ntokens += src->ntokens;
  return 0;
}

/* Appends one rendered message to the queue. */
static int queue_one(lt_agent_t *a, const char *role, const char *content) {
  return lt_chat_message(lt_backend_tokenizer(a->ctx->backend), lt_role_parse(role), content, &a->append, &a->nappend,
                         &a->capappend);
}

static int is_marker(const cJSON *m);

static int render_chat(const lt_agent_t *a, const cJSON *msgs, int gen_prompt, char **text, size_t *len) {
  int rc = lt_chat_render(a->ctx->chat, a->ctx->tool_format, msgs, cJSON_GetObjectItemCaseSensitive(a->task.spec, "tools"),
                          gen_prompt, text, len);
  if (rc < 0) lt_error_wrap(rc, "chat template");
  return rc;
}

/* References to hist's messages (markers left out) and then msgs'. */
static cJSON *refs(const cJSON *hist, const cJSON *msgs) {
  cJSON *all = cJSON_CreateArray();
  const cJSON *lists[2] = {hist, msgs};
  for (int k = 0; k < 2 && all; k++)
    for (const cJSON *m = lists[k] ? lists[k]->child : NULL; m; m = m->next)
      if (!is_marker(m) && !cJSON_AddItemReferenceToArray(all, (cJSON *)m)) {
        cJSON_Delete(all);
        return NULL;
      }
  return all;
}

/* render(hist + msgs, with the generation prompt) past render(hist), or NULL
 * when the first does not extend the second. */
static int extend(const lt_agent_t *a, const cJSON *hist, const cJSON *msgs, char **base, size_t *blen, const char **delta,
                  size_t *dlen, char **full, size_t *flen) {
  cJSON *h = refs(hist, NULL), *all = refs(hist, msgs);
  *flen = 0;
  int rc = h && all ? 0 : lt_error_set(LT_ENOMEM, "agent: out of memory");
  if (rc == 0) rc = render_chat(a, h, 0, base, blen);
  if (rc == 0) rc = render_chat(a, all, 1, full, flen);
  cJSON_Delete(h);
  cJSON_Delete(all);
  *delta = NULL;
  if (rc == 0 && *flen >= *blen && memcmp(*full, *base, *blen) == 0) *delta = *full + *blen, *dlen = *flen - *blen;
  return rc;
}

/* The text the template adds for `msgs` after `hist` (NULL: a fresh context,
 * the whole render, with what the template writes before any message: a BOS,
 * Qwen3's tools block).  Earlier turns stay in the context as they are
 * (generated tokens are never re-tokenized): after the stop token that ended
 * the last turn comes what the template writes after it, then
 * render(hist + msgs) past render(hist).  A template that renders earlier
 * turns differently once more follow (Qwen3 drops old reasoning at a new user
 * turn) gets msgs rendered on their own. */
static int template_delta(lt_agent_t *a, const cJSON *hist, const cJSON *msgs, lt_buf_t *out) {
  static const cJSON empty = {.type = cJSON_Array};
  char *base = NULL, *full = NULL;
  size_t blen = 0, dlen = 0, flen = 0;
  const char *delta;
  int rc = extend(a, hist ? hist : &empty, msgs, &base, &blen, &delta, &dlen, &full, &flen);
  if (rc == 0 && !hist) delta = full, dlen = flen;
  if (rc == 0 && hist && a->stop_text && a->stop_text[0]) {
    const char *q = NULL;
    for (const char *s = base; (s = strstr(s, a->stop_text)); s++) q = s;
    if (q) lt_buf_puts(out, q + strlen(a->stop_text));
  }
  if (rc == 0 && !delta && hist) {
    free(base), free(full);
    base = full = NULL;
    rc = extend(a, &empty, msgs, &base, &blen, &delta, &dlen, &full, &flen);
  }
  if (rc == 0 && !delta) rc = lt_error_set(LT_EINVAL, "chat template: rendering more messages changes the earlier text");
  if (rc == 0) lt_buf_append(out, delta, dlen);
  free(base), free(full);
  return rc == 0 ? lt_buf_ok(out) : rc;
}

/* Renders chat messages (and opens the assistant's turn) into the queue;
 * `log` also records them in the episode's messages. */
static int queue_chat(lt_agent_t *a, const cJSON *msgs, int log) {
  int rc = 0;
  if (a->ctx->chat) {
    int fresh = a->traj.ntokens == seq0(&a->traj) && a->nappend == 0; /* a new context renders from the start */
    lt_buf_t text = {0};
    rc = template_delta(a, fresh ? NULL : a->messages, msgs, &text);
    if (rc == 0) rc = lt_ids_text(lt_backend_tokenizer(a->ctx->backend), text.data ? text.data : "", &a->append, &a->nappend, &a->capappend);
    lt_buf_free(&text);
    for (const cJSON *m = msgs->child; m && rc == 0 && log; m = m->next) {
      cJSON *copy = cJSON_Duplicate(m, 1);
      if (!copy || !cJSON_AddItemToArray(a->messages, copy)) {
        cJSON_Delete(copy);
        rc = lt_error_set(LT_ENOMEM, "agent: out of memory");
      }
    }
    return rc;
  }
  for (const cJSON *m = msgs->child; m && rc == 0; m = m->next) {
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role"), *content = cJSON_GetObjectItemCaseSensitive(m, "content");
    if (!cJSON_IsString(role) || !cJSON_IsString(content))
      return lt_error_set(LT_EINVAL, "environment message without role/content");
    rc = queue_one(a, role->valuestring, content->valuestring);
    cJSON *copy = rc == 0 && log ? cJSON_Duplicate(m, 1) : NULL;
    if (rc == 0 && log && (!copy || !cJSON_AddItemToArray(a->messages, copy))) {
      cJSON_Delete(copy);
      rc = lt_error_set(LT_ENOMEM, "agent: out of memory");
    }
  }
  if (rc == 0) rc = lt_chat_open(lt_backend_tokenizer(a->ctx->backend), LT_ROLE_ASSISTANT, &a->append, &a->nappend, &a->capappend);
  return rc;
}

static int queue_messages(lt_agent_t *a, const cJSON *msgs) { return queue_chat(a, msgs, 1); }

static void set_outcome(lt_agent_t *a, lt_traj_status st, lt_finish fin, const char *reason, const char *err) {
  if (a->finishing) return;
  a->status = st;
  a->finish = fin;
  a->reason = reason;
  if (err) a->error = strdup(err);
}

static void deliver(lt_agent_t *a);
static void start_reward(lt_agent_t *a);

static void on_timer(uv_timer_t *t) { deliver(t->data); }
static void program_stop(lt_agent_t *a);

/* A timeout is the policy's failure (docs/losses.md, "How an episode ends"): the lowest reward its domain gives,
 * not a score of the unfinished answer and not a bootstrapped value. */
static int timeout_reward(lt_agent_t *a) {
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

static void finish_reward(lt_agent_t *a);

/* The environment judged the end state (lt_episode_end): its verdict is in the reference. */
static void on_ended(lt_episode_t *ep, int rc, void *ud) {
  lt_agent_t *a = ud;
  if (rc < 0) {
    a->status = LT_TRAJ_ENV_ERROR, a->finish = LT_FINISH_NONE, a->reason = "env_error";
    free(a->error);
    a->error = strdup(lt_error_msg());
  }
  finish_reward(a);
}

/* Ends the episode with the outcome set; the environment judges its end state where it does (swe: the diff and
 * the hidden tests, not for a timeout), then the reward runs when it makes sense. */
static void finish(lt_agent_t *a) {
  if (a->finishing) return;
  a->finishing = 1;
  program_stop(a);
  if (a->gen) {
    lt_gen_close(a->gen);
    a->gen = NULL;
  }
  int rc = a->status == LT_TRAJ_OK && a->ep ? lt_episode_end(a->ep, a->finish != LT_FINISH_TIMEOUT, on_ended, a) : 1;
  if (rc == 0) return; /* on_ended goes on */
  if (rc < 0) {
    a->status = LT_TRAJ_ENV_ERROR, a->finish = LT_FINISH_NONE, a->reason = "env_error";
    free(a->error);
    a->error = strdup(lt_error_msg());
  }
  finish_reward(a);
}

static void finish_reward(lt_agent_t *a) {
  if (a->status == LT_TRAJ_OK && a->finish == LT_FINISH_TIMEOUT && timeout_reward(a) < 0) {
    a->status = LT_TRAJ_ERROR, a->finish = LT_FINISH_NONE, a->reason = "worker_error";
    free(a->error);
    a->error = strdup(lt_error_msg());
  }
  if (a->status == LT_TRAJ_OK && !a->has_reward) /* an agent program may have reported its own */
    start_reward(a);
  else
    uv_timer_start(&a->timer, on_timer, 0, 0);
}

static void on_reward(lt_reward_result_t *res, void *ud) {
  lt_agent_t *a = ud;
  a->reward_pending = 0;
  a->t_reward = lt_time_mono_s() - a->t_reward;
  if (a->discarded) { /* the agent was dropped while the reward was in flight */
    cJSON_Delete(res->components);
    free(res->error);
    if (a->closed) free(a);
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
  deliver(a);
}

static void start_reward(lt_agent_t *a) {
  const cJSON *first_user = NULL;
  for (const cJSON *m = a->messages->child; m && !first_user; m = m->next) {
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(m, "role");
    if (cJSON_IsString(r) && !strcmp(r->valuestring, "user")) first_user = cJSON_GetObjectItemCaseSensitive(m, "content");
  }
  lt_reward_case_t k = {.domain = a->task.domain, .prompt = cJSON_IsString(first_user) ? first_user->valuestring : "",
                        .response = a->last_text ? a->last_text : "", .reference = lt_episode_reference(a->ep),
                        .messages = a->messages, .response_tokens = a->generated,
                        .truncated = a->finish == LT_FINISH_TRUNCATED, .malformed_tool_calls = a->malformed};
  a->t_reward = lt_time_mono_s();
  a->reward_pending = 1;
  int rc = lt_rewarder_score(a->ctx->rewarder, &k, on_reward, a);
  if (rc < 0) {
    a->reward_pending = 0;
    a->status = LT_TRAJ_REWARD_FAILED;
    free(a->error);
    a->error = strdup(lt_error_msg());
    uv_timer_start(&a->timer, on_timer, 0, 0);
  }
}


/* ---- context management ---- */

/* Text without its <think>...</think> blocks (caller frees). */
static char *strip_reasoning(const char *text) {
  size_t n = strlen(text);
  char *o = malloc(n + 1), *w = o;
  if (!o) return NULL;
  for (const char *p = text; *p;) {
    const char *open = strstr(p, "<think>"), *close = open ? strstr(open, "</think>") : NULL;
    if (!open || !close) {
      strcpy(w, p);
      return o;
    }
    memcpy(w, p, (size_t)(open - p));
    w += open - p;
    p = close + 8;
    while (*p == '\n') p++;
    *w = 0;
  }
  return o;
}

static int is_marker(const cJSON *m) { return cJSON_GetObjectItemCaseSensitive(m, "longtail_context") != NULL; }

/* Records in the messages that the context was rewritten, and why. */
static void mark(lt_agent_t *a, const char *kind) {
  cJSON *m = cJSON_CreateObject();
  char text[96];
  snprintf(text, sizeof text, "[longtail: context rewritten (%s) after turn %d]", kind, a->turns);
  cJSON_AddStringToObject(m, "role", "system");
  cJSON_AddStringToObject(m, "content", text);
  cJSON_AddStringToObject(m, "longtail_context", kind);
  cJSON_AddItemToArray(a->messages, m);
}

/* Starts a new context of the trajectory: it goes on from `chat` (rendered,
 * loss mask 0) in a fresh generation session, and the earlier contexts stay in
 * the record, trained with the rest (docs/agent.md).  A compression (not a
 * reasoning drop) counts against max_resets and starts a new count of turns. */
static int restart(lt_agent_t *a, const cJSON *chat, const char *kind, int compression) {
  a->nappend = 0;
  int rc = new_context(&a->traj);
  if (rc < 0) return rc;
  if (compression) a->seg_turns = 0, a->resets++;
  lt_gen_close(a->gen);
  a->gen = NULL;
  uint64_t salt = (uint64_t)(a->resets * 64 + a->turns) * 0x9e3779b97f4a7c15ull;
  rc = lt_gen_open(a->ctx->backend, (uint64_t)a->task.seed + salt, &a->gen);
  if (rc == 0) rc = queue_chat(a, chat, 0);
  if (rc == 0) mark(a, kind);
  return rc;
}

/* The whole conversation again, without the reasoning of assistant turns
 * before the latest user message (the reasoning of the current user turn stays). */
static int drop_old_reasoning(lt_agent_t *a) {
  const cJSON *last_user = NULL;
  for (const cJSON *m = a->messages->child; m; m = m->next) {
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(m, "role");
    if (cJSON_IsString(r) && !strcmp(r->valuestring, "user")) last_user = m;
  }
  cJSON *chat = cJSON_CreateArray();
  int before = 1, changed = 0;
  for (const cJSON *m = a->messages->child; m; m = m->next) {
    if (m == last_user) before = 0;
    if (is_marker(m)) continue;
    cJSON *c = cJSON_Duplicate(m, 1);
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(m, "role"), *t = cJSON_GetObjectItemCaseSensitive(m, "content");
    if (before && cJSON_IsString(r) && !strcmp(r->valuestring, "assistant") && cJSON_IsString(t) && strstr(t->valuestring, "<think>")) {
      char *s = strip_reasoning(t->valuestring);
      if (s) cJSON_ReplaceItemInObjectCaseSensitive(c, "content", cJSON_CreateString(s)), changed = 1;
      free(s);
    }
    cJSON_AddItemToArray(chat, c);
  }
  int rc = changed ? restart(a, chat, "reasoning_dropped", 0) : 0;
  cJSON_Delete(chat);
  return rc;
}

static int context_room(const lt_agent_t *a) {
  lt_backend_info_t bi;
  lt_backend_info(a->ctx->backend, &bi);
  return a->task.max_context < bi.max_context ? a->task.max_context : bi.max_context;
}

static void on_summary(lt_gen_t *g, const lt_turn_t *t, const lt_prefill_routing_t *pre, void *ud);

/* The policy summarizes its own context (ReSum-style, seed 004 §3.3.2); the
 * new context is the opening chat plus that summary.  Falls back to discard-all
 * when the history is too long to summarize. */
static int summarize(lt_agent_t *a) {
  const lt_context_opts_t *o = &a->ctx->context;
  int32_t *saved = a->append;
  int nsaved = a->nappend, capsaved = a->capappend;
  a->append = NULL, a->nappend = 0, a->capappend = 0;
  cJSON *chat = cJSON_CreateArray();
  for (const cJSON *m = a->messages->child; m; m = m->next)
    if (!is_marker(m)) cJSON_AddItemToArray(chat, cJSON_Duplicate(m, 1));
  cJSON *req = cJSON_CreateObject();
  cJSON_AddStringToObject(req, "role", "user");
  cJSON_AddStringToObject(req, "content", o->summary_prompt ? o->summary_prompt : "Summarize the progress so far.");
  cJSON_AddItemToArray(chat, req);
  int rc = queue_chat(a, chat, 0);
  cJSON_Delete(chat);
  int fits = rc == 0 && a->nappend + o->summary_tokens < context_room(a);
  if (rc == 0 && fits) rc = lt_gen_open(a->ctx->backend, (uint64_t)a->task.seed ^ 0x5u, &a->sgen);
  lt_sampling_t sp = {.temperature = 0.0f, .top_p = 1.0f};
  if (rc == 0 && fits) rc = lt_gen_turn(a->sgen, a->append, a->nappend, o->summary_tokens, &sp, on_summary, a);
  free(a->append);
  a->append = saved, a->nappend = nsaved, a->capappend = capsaved;
  if (rc < 0 || !fits) {
    if (a->sgen) lt_gen_close(a->sgen), a->sgen = NULL;
    return fits ? rc : restart(a, a->opening, "discard_all", 1);
  }
  return 1; /* on_summary continues */
}

/* After an environment step: 1 when a summary is being written (the episode
 * continues from on_summary), 0 to go on, < 0 on error. */
static int manage_context(lt_agent_t *a, int user_turn) {
  const lt_context_opts_t *o = &a->ctx->context;
  if (user_turn && o->keep_reasoning_latest) {
    int rc = drop_old_reasoning(a);
    if (rc < 0) return rc;
  }
  if (o->compression == LT_COMPRESS_NONE || o->threshold <= 0 || a->resets >= o->max_resets) return 0;
  if (a->traj.ntokens - seq0(&a->traj) + a->nappend < o->threshold) return 0;
  if (o->compression == LT_COMPRESS_DISCARD_ALL) return restart(a, a->opening, "discard_all", 1);
  return summarize(a);
}

static void next_turn(lt_agent_t *a);

static void on_step(lt_episode_t *ep, lt_env_step_t *res, void *ud) {
  lt_agent_t *a = ud;
  a->t_env += lt_time_mono_s() - a->t0;
  if (res->error) {
    set_outcome(a, LT_TRAJ_ENV_ERROR, LT_FINISH_NONE, "env_error", res->error_msg ? res->error_msg : lt_strerror(res->error));
  } else if (res->timeout) {
    set_outcome(a, LT_TRAJ_OK, LT_FINISH_TIMEOUT, res->timeout, NULL);
  } else if (res->done) {
    set_outcome(a, LT_TRAJ_OK, LT_FINISH_TERMINATED, a->reason ? a->reason : "env_done", NULL);
  } else if (a->seg_turns >= a->task.max_turns &&
             (a->ctx->context.compression != LT_COMPRESS_HYBRID || a->resets >= a->ctx->context.max_resets)) {
    set_outcome(a, LT_TRAJ_OK, LT_FINISH_TRUNCATED, "turn_limit", NULL);
  } else if (a->seg_turns >= a->task.max_turns) { /* hybrid: out of turns, start over from the question */
    int rc = restart(a, a->opening, "discard_all", 1);
    cJSON_Delete(res->observations);
    free(res->error_msg);
    if (rc < 0) {
      set_outcome(a, LT_TRAJ_ERROR, LT_FINISH_NONE, "worker_error", lt_error_msg());
      finish(a);
      return;
    }
    next_turn(a);
    return;
  } else {
    /* Observations become the next context, then the assistant speaks again. */
    int user_turn = 0;
    for (const cJSON *m = res->observations ? res->observations->child : NULL; m; m = m->next) {
      const cJSON *r = cJSON_GetObjectItemCaseSensitive(m, "role");
      user_turn |= cJSON_IsString(r) && !strcmp(r->valuestring, "user");
    }
    int rc = a->ctx->chat ? 0 : lt_ids_text(lt_backend_tokenizer(a->ctx->backend), "\n", &a->append, &a->nappend, &a->capappend);
    if (rc == 0) rc = queue_messages(a, res->observations);
    cJSON_Delete(res->observations);
    free(res->error_msg);
    if (rc == 0) rc = manage_context(a, user_turn);
    if (rc < 0) {
      set_outcome(a, LT_TRAJ_ENV_ERROR, LT_FINISH_NONE, "env_error", lt_error_msg());
      finish(a);
      return;
    }
    if (rc == 0) next_turn(a);
    return;
  }
  cJSON_Delete(res->observations);
  free(res->error_msg);
  finish(a);
}

/* Appends the turn's sampling sets to the trajectory's. */
static int push_support_ids(lt_traj_t *r, const lt_turn_t *t) {
  size_t n = 0;
  for (int i = 0; i < t->n; i++) n += (size_t)t->support[i];
  if (!n) return 0;
  int rc = reserve_support_ids(r, n);
  if (rc < 0) return rc;
  memcpy(r->support_ids + r->nsupport_ids, t->support_ids, sizeof *r->support_ids * n);
  r->nsupport_ids += (int)n;
  return 0;
}

/* A turn's prefilled tokens (loss mask 0), then what it generated (mask 1);
 * *gen_at: where the generated tokens start. */
static int push_turn_to(lt_traj_t *r, const int32_t *pre_ids, int npre, const lt_turn_t *t, const lt_prefill_routing_t *pre,
                        int *gen_at) {
  int rc = push_context(r, pre_ids, npre, pre->ids, pre->probs);
  *gen_at = r->ntokens;
  if (rc == 0 && t->error) rc = lt_error_set(t->error, "%s", t->error_msg ? t->error_msg : lt_strerror(t->error));
  if (rc == 0) rc = lt_traj_reserve(r, t->n);
  if (rc == 0) rc = push_support_ids(r, t);
  if (rc < 0) return rc;
  size_t R = routed(r);
  for (int i = 0; i < t->n; i++) {
    r->tokens[r->ntokens] = t->tokens[i];
    r->logprobs[r->ntokens] = t->logprobs[i];
    r->support[r->ntokens] = t->support[i];
    r->versions[r->ntokens] = t->versions[i];
    r->loss_mask[r->ntokens] = 1;
    if (R && t->routing_ids) {
      memcpy(r->routing_ids + (size_t)r->ntokens * R, t->routing_ids + (size_t)i * R, sizeof *r->routing_ids * R);
      memcpy(r->routing_probs + (size_t)r->ntokens * R, t->routing_probs + (size_t)i * R, sizeof *r->routing_probs * R);
    }
    r->ntokens++;
  }
  return 0;
}

/* The turn's prefilled queue, then what it generated: call_gen is where the
 * generated tokens start. */
static int push_turn(lt_agent_t *a, const lt_turn_t *t, const lt_prefill_routing_t *pre) {
  int rc = push_turn_to(&a->traj, a->append, a->nappend, t, pre, &a->call_gen);
  a->nappend = 0;
  return rc;
}

static void on_turn(lt_gen_t *g, const lt_turn_t *t, const lt_prefill_routing_t *pre, void *ud) {
  lt_agent_t *a = ud;
  a->t_gen += lt_time_mono_s() - a->t0;
  int rc = push_turn(a, t, pre);
  if (rc < 0) {
    set_outcome(a, LT_TRAJ_ERROR, LT_FINISH_NONE, "inference_error", lt_error_msg());
    finish(a);
    return;
  }
  a->generated += t->n;
  a->turns++;
  a->seg_turns++;
  /* The assistant's text, without its stop token. */
  const lt_tokenizer_t *tok = lt_backend_tokenizer(a->ctx->backend);
  int ntext = t->stopped ? t->n - 1 : t->n;
  char *text = NULL;
  size_t len;
  if ((rc = lt_tokenizer_decode(tok, t->tokens, ntext > 0 ? ntext : 0, 1, &text, &len)) < 0) {
    set_outcome(a, LT_TRAJ_ERROR, LT_FINISH_NONE, "inference_error", lt_error_msg());
    finish(a);
    return;
  }
  free(a->last_text);
  a->last_text = text;
  free(a->stop_text);
  a->stop_text = NULL;
  size_t slen;
  if (t->stopped && t->n > 0 && a->ctx->chat && lt_tokenizer_decode(tok, t->tokens + t->n - 1, 1, 0, &a->stop_text, &slen) < 0)
    a->stop_text = NULL; /* then nothing follows the stop token but the next messages */
  lt_toolcalls_t tc;
  if ((rc = lt_toolcall_parse_as(a->ctx->tool_format, text, len, &tc)) < 0) {
    set_outcome(a, LT_TRAJ_ERROR, LT_FINISH_NONE, "inference_error", lt_error_msg());
    finish(a);
    return;
  }
  a->malformed += tc.malformed;
  cJSON *msg = cJSON_CreateObject();
  cJSON_AddStringToObject(msg, "role", "assistant");
  cJSON_AddStringToObject(msg, "content", text);
  if (tc.ncalls) {
    cJSON *calls = cJSON_AddArrayToObject(msg, "tool_calls");
    for (int i = 0; i < tc.ncalls; i++) {
      cJSON *c = cJSON_CreateObject(), *args = tc.arguments[i] ? cJSON_Parse(tc.arguments[i]) : NULL;
      cJSON_AddStringToObject(c, "name", tc.calls[i].name);
      if (!args) { /* xml: every value is a string */
        args = cJSON_CreateObject();
        for (int k = 0; k < tc.calls[i].nargs; k++) cJSON_AddStringToObject(args, tc.calls[i].args[k].name, tc.calls[i].args[k].value);
      }
      cJSON_AddItemToObject(c, "arguments", args);
      cJSON_AddItemToArray(calls, c);
    }
  }
  cJSON_AddItemToArray(a->messages, msg);
  if (!t->stopped) { /* the token budget ran out mid-turn */
    lt_backend_info_t bi;
    lt_backend_info(a->ctx->backend, &bi);
    int at_limit = lt_gen_len(g) >= bi.max_context || lt_gen_len(g) >= a->task.max_context;
    set_outcome(a, LT_TRAJ_OK, LT_FINISH_TRUNCATED, at_limit ? "context_limit" : "max_new_tokens", NULL);
    lt_toolcalls_free(&tc);
    finish(a);
    return;
  }
  a->reason = tc.ncalls ? "env_done" : "stop";
  a->t0 = lt_time_mono_s();
  rc = lt_episode_step(a->ep, text, tc.calls, tc.ncalls, on_step, a);
  if (rc == 0 && tc.ncalls && a->ctx->fault_in_step && --*a->ctx->fault_in_step == 0) raise(SIGKILL); /* chaos: mid-tool-call */
  lt_toolcalls_free(&tc);
  if (rc < 0) {
    set_outcome(a, LT_TRAJ_ENV_ERROR, LT_FINISH_NONE, "env_error", lt_error_msg());
    finish(a);
  }
}

static void on_summary(lt_gen_t *g, const lt_turn_t *t, const lt_prefill_routing_t *pre, void *ud) {
  lt_agent_t *a = ud;
  char *text = NULL;
  size_t len = 0;
  int rc = t->error ? lt_error_set(t->error, "summary: %s", t->error_msg ? t->error_msg : lt_strerror(t->error)) : 0;
  int ntext = t->stopped ? t->n - 1 : t->n;
  if (rc == 0) rc = lt_tokenizer_decode(lt_backend_tokenizer(a->ctx->backend), t->tokens, ntext > 0 ? ntext : 0, 1, &text, &len);
  lt_gen_close(a->sgen);
  a->sgen = NULL;
  if (a->finishing) { /* aborted while summarizing */
    free(text);
    return;
  }
  cJSON *chat = rc == 0 ? cJSON_Duplicate(a->opening, 1) : NULL;
  if (chat) {
    char *s = text ? strip_reasoning(text) : NULL;
    char *body = malloc((s ? strlen(s) : 0) + 64);
    if (body) sprintf(body, "Summary of the progress so far:\n%s", s ? s : "");
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", "user");
    cJSON_AddStringToObject(m, "content", body ? body : "");
    cJSON_AddItemToArray(chat, m);
    cJSON *logged = cJSON_Duplicate(m, 1);
    free(s), free(body);
    rc = restart(a, chat, "summary", 1);
    if (rc == 0) cJSON_AddItemToArray(a->messages, logged); /* the summary the policy continues from */
    else cJSON_Delete(logged);
  }
  free(text);
  cJSON_Delete(chat);
  if (rc < 0) {
    set_outcome(a, LT_TRAJ_ERROR, LT_FINISH_NONE, "inference_error", lt_error_msg());
    finish(a);
    return;
  }
  next_turn(a);
}

static void next_turn(lt_agent_t *a) {
  int ctx = a->task.max_context;
  lt_backend_info_t bi;
  lt_backend_info(a->ctx->backend, &bi);
  if (bi.max_context < ctx) ctx = bi.max_context;
  int room = ctx - (a->traj.ntokens - seq0(&a->traj)) - a->nappend;
  if (room <= 0) {
    set_outcome(a, LT_TRAJ_OK, LT_FINISH_TRUNCATED, "context_limit", NULL);
    finish(a);
    return;
  }
  int max_new = a->task.max_new_tokens < room ? a->task.max_new_tokens : room;
  lt_sampling_t sp = {.temperature = a->task.eval ? 0.0f : (float)a->task.temperature, .top_p = (float)a->task.top_p,
                      .top_k = a->task.top_k};
  a->t0 = lt_time_mono_s();
  int rc = lt_gen_turn(a->gen, a->append, a->nappend, max_new, &sp, on_turn, a);
  if (rc < 0) {
    set_outcome(a, LT_TRAJ_ERROR, LT_FINISH_NONE, "inference_error", lt_error_msg());
    finish(a);
  }
}

/* The agent is freed once its timer is closed and no reward is in flight. */
static void on_closed(uv_handle_t *h) {
  lt_agent_t *a = h->data;
  a->closed = 1;
  if (!a->reward_pending) free(a);
}

static void release(lt_agent_t *a) {
  program_stop(a);
  free(a->prompt);
  if (a->gen) lt_gen_close(a->gen);
  if (a->sgen) lt_gen_close(a->sgen);
  cJSON_Delete(a->opening);
  if (a->ep) lt_episode_close(a->ep);
  lt_traj_free(&a->traj);
  lt_traj_free(&a->side);
  free(a->append), free(a->last_text), free(a->stop_text), free(a->error), free(a->task.domain), free(a->task.env), free(a->task.session);
  cJSON_Delete(a->task.spec);
  cJSON_Delete(a->messages);
  cJSON_Delete(a->components);
  uv_close((uv_handle_t *)&a->timer, on_closed);
}

/* The episode's diff (reference.diff, the swe environment's) as the TRAJ carries it: at most LT_PROTO_MAX_DIFF
 * bytes, a longer one cut at a line with a note of its size (kept for reading: the judge had the whole). */
static char *episode_diff(const lt_agent_t *a) {
  const cJSON *d = a->ep ? cJSON_GetObjectItemCaseSensitive(lt_episode_reference(a->ep), "diff") : NULL;
  if (!cJSON_IsString(d) || !d->valuestring[0]) return NULL;
  size_t n = strlen(d->valuestring);
  if (n <= LT_PROTO_MAX_DIFF) return strdup(d->valuestring);
  size_t keep = LT_PROTO_MAX_DIFF - 128;
  while (keep && d->valuestring[keep - 1] != '\n') keep--;
  char *s = malloc(LT_PROTO_MAX_DIFF + 1);
  if (s) snprintf(s, LT_PROTO_MAX_DIFF + 1, "%.*s# longtail: the diff was cut here, at %zu of its %zu bytes\n", (int)keep,
                  d->valuestring, keep, n);
  return s;
}

/* Completes the record with the outcome and hands it over as the TRAJ. */
static void deliver(lt_agent_t *a) {
  lt_msg_t m = {.type = LT_MSG_TRAJ};
  lt_traj_t *t = &m.u.traj;
  /* Concurrent calls' contexts first, so that the last context is the record's (a truncated trajectory
   * bootstraps from its end). */
  if (a->side.ntokens && rec_append(&a->side, &a->traj) == 0) {
    lt_traj_t r = a->traj;
    a->traj = a->side, a->side = r;
  } else if (a->side.ntokens) { /* past set_outcome: the episode is finishing */
    a->status = LT_TRAJ_ERROR, a->finish = LT_FINISH_NONE, a->reason = "worker_error";
    free(a->error);
    a->error = strdup("out of memory");
  }
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
  if (a->status == LT_TRAJ_OK && !a->has_reward) { /* cannot happen: no reward → reward_failed */
    t->status = LT_TRAJ_REWARD_FAILED;
  }
  t->reward = a->reward;
  t->components = a->components ? a->components : cJSON_CreateObject();
  a->components = NULL;
  t->turns = a->turns;
  t->eval = a->task.eval;
  t->gen_ms = a->t_gen * 1e3;
  t->env_ms = a->t_env * 1e3;
  t->reward_ms = a->has_reward ? a->t_reward * 1e3 : 0;
  t->messages = cJSON_Duplicate(a->messages, 1);
  t->diff = episode_diff(a);
  lt_backend_info_t bi;
  lt_backend_info(a->ctx->backend, &bi);
  /* What it sampled with; a server that truncates out of sight sends no
   * support, so the TASK's settings apply (docs/protocol.md). */
  t->temperature = a->task.eval ? 0.0 : a->task.temperature;
  if (a->call_temp >= 0) t->temperature = a->call_temp; /* an agent program's own (params.honor_sampling) */
  if (!bi.support_known) {
    free(t->support), free(t->support_ids);
    t->support = t->support_ids = NULL, t->nsupport_ids = 0;
  }
  if (!t->ntokens) { /* no routing frames for no tokens */
    free(t->routing_ids), free(t->routing_probs);
    t->routing_ids = NULL, t->routing_probs = NULL;
    t->routing_layers = t->routing_k = t->routing_experts = 0;
  }
  if (t->nseqs <= 1) { /* one context: no seq_starts frame (several: an agent program's calls that diverged, or the loop's rewrites) */
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
  lt_agent_done_cb cb = a->cb;
  void *ud = a->ud;
  release(a);
  cb(a, &m, ud);
}

static int program_start(lt_agent_t *a);

static void on_open(lt_episode_t *ep, int rc, cJSON *opening, void *ud) {
  lt_agent_t *a = ud;
  if (rc == 0 && a->prog_opts) { /* its program plays the episode */
    cJSON_Delete(opening);
    if ((rc = program_start(a)) < 0) {
      set_outcome(a, LT_TRAJ_ENV_ERROR, LT_FINISH_NONE, "env_error", lt_error_msg());
      finish(a);
    }
    return;
  }
  if (rc == 0) rc = queue_messages(a, opening);
  a->opening = opening; /* kept for discard-all restarts */
  if (rc < 0) {
    set_outcome(a, LT_TRAJ_ENV_ERROR, LT_FINISH_NONE, "env_error", lt_error_msg());
    finish(a);
    return;
  }
  if ((rc = lt_gen_open(a->ctx->backend, (uint64_t)a->task.seed, &a->gen)) < 0) {
    set_outcome(a, LT_TRAJ_ERROR, LT_FINISH_NONE, "inference_error", lt_error_msg());
    finish(a);
    return;
  }
  next_turn(a);
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
  lt_backend_info_t bi;
  lt_backend_info(ctx->backend, &bi);
  a->self = a;
  if (bi.routing_layers > 0 && bi.routing_k > 0) { /* an MoE backend's routing, recorded with every token */
    a->traj.routing_layers = a->side.routing_layers = bi.routing_layers;
    a->traj.routing_k = a->side.routing_k = bi.routing_k;
    a->traj.routing_experts = a->side.routing_experts = bi.routing_experts;
  }
  a->prog_opts = ctx->envs && a->task.domain ? lt_envs_agent(ctx->envs, a->task.domain) : NULL;
  int domain_turns = ctx->envs && a->task.domain ? lt_envs_max_turns(ctx->envs, a->task.domain) : 0;
  if (domain_turns > 0) a->task.max_turns = domain_turns; /* the domain's own (swe's params.max_turns) */
  a->call_temp = -1;
  uv_timer_init(ctx->loop, &a->timer);
  a->timer.data = a;
  *out = a;
  if (!a->task.domain || !a->task.env || !a->task.session || !a->task.spec || !a->messages) {
    set_outcome(a, LT_TRAJ_ERROR, LT_FINISH_NONE, "worker_error", "out of memory");
    finish(a);
    return 0;
  }
  /* From here on every failure becomes the trajectory's status, delivered on the loop.  The
   * environment opens off the loop where that blocks (a program in the sandbox). */
  if (lt_episode_open_async(ctx->envs, a->task.domain, a->task.spec, (uint64_t)task->seed, on_open, a, &a->ep) < 0) {
    set_outcome(a, LT_TRAJ_ENV_ERROR, LT_FINISH_NONE, "env_error", lt_error_msg());
    finish(a);
  }
  return 0;
}

void lt_agent_abort(lt_agent_t *a, const char *reason) {
  if (a->finishing) return; /* already ending (its reward is on the way) */
  set_outcome(a, LT_TRAJ_ABORTED, LT_FINISH_NONE, "aborted", reason ? reason : "aborted");
  finish(a);
}

void lt_agent_discard(lt_agent_t *a) {
  a->discarded = 1;
  uv_timer_stop(&a->timer);
  release(a);
}

/* ---- episodes played by an agent program through the gateway ----
 *
 * The record is one context: every token the episode's calls prefilled (loss
 * mask 0) and generated (mask 1) in order.  A call whose rendered prompt starts
 * with the record's text extends it: only the new text is tokenized, the
 * generated tokens stay the ones sampled (never re-tokenized) and the session
 * keeps its KV cache.  A call that diverges (the program edited or compacted
 * its history) starts a new context; the trajectory keeps them all.  A call
 * that arrives while another is being answered is a side call (side_t): its
 * own session and context, joined to the trajectory once answered. */

/* The agent of a gateway session: the agent itself, or one of its side calls. */
static lt_agent_t *call_agent(void *session) { return *(lt_agent_t **)session; }

static void side_free(side_t *c) {
  lt_agent_t *a = c->a;
  for (side_t **p = &a->sides; *p; p = &(*p)->next)
    if (*p == c) {
      *p = c->next;
      break;
    }
  if (c->gen) lt_gen_close(c->gen);
  if (c->held && a->prog) lt_program_release(a->prog);
  lt_traj_free(&c->rec);
  free(c);
}

/* Ends every side call (the episode ended): the calls in flight fail. */
static void sides_stop(lt_agent_t *a) {
  while (a->sides) {
    side_t *c = a->sides;
    lt_oai_gen_t *og = c->og;
    c->og = NULL;
    if (og) lt_oai_gen_end(og, LT_ECANCELED, 0, "the episode ended");
    side_free(c);
  }
}

/* A call is being answered from here to call_over: the program waits on the engine, so its timeout_s clock
 * stands still meanwhile, and its first call ends its start-up deadline (docs/agent-gateway.md: neither the
 * engine's slowness nor the program's start-up is the policy's). */
static void call_begin(lt_agent_t *a, lt_oai_gen_t *g) {
  a->og = g;
  if (a->prog) lt_program_hold(a->prog);
}

static lt_oai_gen_t *call_over(lt_agent_t *a) {
  lt_oai_gen_t *og = a->og;
  a->og = NULL;
  if (og && a->prog) lt_program_release(a->prog);
  return og;
}

static void end_call(lt_agent_t *a, int rc, const char *msg) {
  lt_oai_gen_t *og = call_over(a);
  if (og) lt_oai_gen_end(og, rc, 0, msg);
}

static void program_stop(lt_agent_t *a) {
  if (!a->prog_opts) return;
  lt_gateway_revoke(a->ctx->gateway, a);
  end_call(a, LT_ECANCELED, "the episode ended");
  sides_stop(a);
  if (a->prog) lt_program_kill(a->prog);
  a->prog = NULL;
}

/* A reward the program reported: its last stdout line {"reward": number, ...}. */
static int program_reward(lt_agent_t *a, const char *line) {
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
  return ok;
}

static void on_program_exit(lt_program_t *p, const lt_program_result_t *r, void *ud) {
  (void)p;
  lt_agent_t *a = ud;
  a->prog = NULL;
  a->t_env = lt_time_mono_s() - a->t0 - a->t_gen;
  char why[2300];
  if (r->signal) snprintf(why, sizeof why, "agent program killed by signal %d%s%s", r->signal, r->err_tail[0] ? ": " : "", r->err_tail);
  else snprintf(why, sizeof why, "agent program exited with status %d%s%s", r->exit_code, r->err_tail[0] ? ": " : "", r->err_tail);
  if (a->limit) set_outcome(a, LT_TRAJ_OK, LT_FINISH_TRUNCATED, a->limit, NULL);
  else if (r->timed_out) set_outcome(a, LT_TRAJ_OK, LT_FINISH_TIMEOUT, "agent_timeout", NULL);
  else if (r->exit_code != 0 || r->signal) set_outcome(a, LT_TRAJ_ENV_ERROR, LT_FINISH_NONE, "env_error", why);
  else set_outcome(a, LT_TRAJ_OK, LT_FINISH_TERMINATED, "agent_done", NULL);
  if (a->status == LT_TRAJ_OK && a->generated == 0) /* nothing to train on, and no reward to invent */
    set_outcome(a, LT_TRAJ_ENV_ERROR, LT_FINISH_NONE, "env_error",
                 a->limit ? "the agent program's first call did not fit rollout.max_context" : r->timed_out ? "the agent program was killed at its deadline before any of its calls was answered (it has timeout_s + 60 s to make its first)" : "the agent program exited without an answered call");
  else if (a->status == LT_TRAJ_OK && !a->limit && !r->timed_out && !a->prog_opts->image) /* in a root: judged */
    program_reward(a, r->last_line);
  finish(a);
}

/* An agent program inside the task's root: its end and its kill are the environment's (lt_episode_program). */
static int episode_program_wait(void *ep, int *wstatus) { return lt_episode_program_wait(ep, wstatus); }
static void episode_program_kill(void *ep) { lt_episode_program_kill(ep); }
static const lt_program_ops_t episode_program_ops = {episode_program_wait, episode_program_kill};

static int program_start(lt_agent_t *a) {
  if (!a->ctx->gateway) return lt_error_set(LT_EINVAL, "agent domain %s: this worker has no gateway", a->task.domain);
  cJSON *row = cJSON_Duplicate(a->task.spec, 1);
  if (row && !a->prog_opts->pass_answer) cJSON_DeleteItemFromObjectCaseSensitive(row, "answer");
  for (const char *const *k = a->prog_opts->hidden; row && k && *k; k++) cJSON_DeleteItemFromObjectCaseSensitive(row, *k);
  char *line = row ? cJSON_PrintUnformatted(row) : NULL;
  cJSON_Delete(row);
  char token[65], base[LT_GATEWAY_URL_MAX];
  int rc = line ? lt_gateway_admit(a->ctx->gateway, a, token, base) : lt_error_set(LT_ENOMEM, "agent: out of memory");
  size_t n = line ? strlen(line) + 64 : 0;
  char *url = malloc(128), *key = malloc(128), *task = malloc(n), *in = malloc(n);
  if (rc == 0 && (!url || !key || !task || !in)) rc = lt_error_set(LT_ENOMEM, "agent: out of memory");
  if (rc == 0) {
    snprintf(url, 128, "OPENAI_BASE_URL=%s", base);
    snprintf(key, 128, "OPENAI_API_KEY=%s", token);
    snprintf(task, n, "LONGTAIL_TASK=%s", line);
    snprintf(in, n, "%s\n", line);
    const char *env[] = {url, key, task, NULL};
    a->t0 = lt_time_mono_s();
    int fds[3];
    if (a->prog_opts->image) { /* inside the task's root, which the environment holds */
      if ((rc = lt_episode_program(a->ep, a->prog_opts->argv, env, fds)) == 0)
        rc = lt_program_attach(a->ctx->loop, fds, &episode_program_ops, a->ep, in, a->prog_opts->timeout_s,
                               on_program_exit, a, &a->prog);
    } else {
      rc = lt_program_start(a->ctx->loop, a->prog_opts->argv, env, in, a->prog_opts->timeout_s,
                            a->prog_opts->sandbox ? lt_gateway_port(a->ctx->gateway) : 0,
                            lt_envs_sandbox(a->ctx->envs)->max_conns, on_program_exit, a, &a->prog);
    }
  }
  if (rc < 0) lt_gateway_revoke(a->ctx->gateway, a);
  free(url), free(key), free(task), free(in), free(line);
  return rc;
}

/* The record's tokens [from, a->traj.ntokens) and then `add` become the queue to prefill. */
static int requeue(lt_agent_t *a, int from, const int32_t *add, int nadd) {
  int n = a->traj.ntokens - from;
  int32_t *p = malloc(sizeof *p * (size_t)(n + nadd + 1));
  if (!p) return lt_error_set(LT_ENOMEM, "agent: out of memory");
  if (n) memcpy(p, a->traj.tokens + from, sizeof *p * (size_t)n);
  if (nadd) memcpy(p + n, add, sizeof *p * (size_t)nadd);
  free(a->append);
  a->append = p, a->nappend = n + nadd, a->capappend = n + nadd + 1;
  a->traj.ntokens = from; /* pushed again, with the prefill's routing, when the turn ends */
  return 0;
}

/* Does the call extend the current context?  Then *add, *nadd (malloc'd) are
 * what it adds: the new text tokenized, the record's generated tokens kept. */
static int extension(lt_agent_t *a, const lt_oai_plan_t *plan, int32_t **add, int *nadd) {
  const lt_tokenizer_t *tok = lt_backend_tokenizer(a->ctx->backend);
  int s0 = seq0(&a->traj), n = a->traj.ntokens - s0, cap = 0, rc = 0;
  *add = NULL, *nadd = 0;
  if (n <= 0) return 0;
  if (!plan->chat) { /* a text prompt: the layer's ids must start with the context's */
    if (plan->nprompt <= n || memcmp(plan->prompt, a->traj.tokens + s0, sizeof *a->traj.tokens * (size_t)n)) return 0;
    if (!(*add = malloc(sizeof **add * (size_t)(plan->nprompt - n)))) return lt_error_set(LT_ENOMEM, "agent: out of memory");
    memcpy(*add, plan->prompt + n, sizeof **add * (size_t)(plan->nprompt - n));
    *nadd = plan->nprompt - n;
    return 1;
  }
  char *rec = NULL;
  size_t rlen = 0;
  int extends = 0;
  if ((rc = lt_tokenizer_decode(tok, a->traj.tokens + s0, n, 0, &rec, &rlen)) == 0) /* the call's prompt as the layer rendered it */
    extends = plan->ntext > rlen && memcmp(plan->text, rec, rlen) == 0;
  if (rc == 0 && extends) rc = lt_ids_text(tok, plan->text + rlen, add, nadd, &cap);
  free(rec);
  return rc < 0 ? rc : extends;
}

/* The call's context: the current one extended by the new text, or a new
 * context of the same trajectory, as the layer rendered it. */
static int call_context(lt_agent_t *a, lt_oai_plan_t *plan) {
  int32_t *add = NULL;
  int nadd = 0, rc = extension(a, plan, &add, &nadd);
  if (rc < 0) return rc;
  if (rc == 0) { /* a new context */
    free(add);
    if ((rc = new_context(&a->traj)) < 0) return rc;
    if (a->gen) lt_gen_close(a->gen), a->gen = NULL;
    add = (int32_t *)plan->prompt, nadd = plan->nprompt;
  }
  int s0 = seq0(&a->traj);
  if (a->gen && (a->gen_base != s0 || lt_gen_len(a->gen) != a->traj.ntokens - s0)) /* it holds tokens the record dropped */
    lt_gen_close(a->gen), a->gen = NULL;
  /* A fresh session prefills the whole context; a kept one only what the call adds. */
  rc = requeue(a, a->gen ? a->traj.ntokens : s0, add, nadd);
  if (add != plan->prompt) free(add);
  if (rc == 0 && !a->gen) {
    rc = lt_gen_open(a->ctx->backend, (uint64_t)a->task.seed + (uint64_t)a->turns * 0x9e3779b97f4a7c15ull, &a->gen);
    a->gen_base = s0;
  }
  if (rc < 0) return rc;
  int need = a->traj.ntokens - s0 + a->nappend;
  if (a->capprompt < need) {
    int32_t *p = realloc(a->prompt, sizeof *p * (size_t)need);
    if (!p) return lt_error_set(LT_ENOMEM, "agent: out of memory");
    a->prompt = p, a->capprompt = need;
  }
  if (a->traj.ntokens > s0) memcpy(a->prompt, a->traj.tokens + s0, sizeof *a->prompt * (size_t)(a->traj.ntokens - s0));
  if (a->nappend) memcpy(a->prompt + a->traj.ntokens - s0, a->append, sizeof *a->prompt * (size_t)a->nappend);
  plan->prompt = a->prompt;
  plan->nprompt = need;
  return 0;
}

static int gw_prepare(void *session, lt_oai_plan_t *plan) {
  lt_agent_t *a = session;
  if (a->finishing || a->limit) return lt_error_set(LT_EINVAL, "the episode has ended");
  if (plan->n != 1) return lt_error_set(LT_EINVAL, "n: the agent gateway answers one choice per call");
  int inflight = a->og != NULL; /* calls being answered count against the limit too */
  for (const side_t *c = a->sides; c; c = c->next) inflight++;
  if (a->turns + inflight >= a->task.max_turns) {
    a->limit = "turn_limit";
    lt_gateway_revoke(a->ctx->gateway, a);
    return lt_error_set(LT_EINVAL, "the episode reached its turn limit (rollout.max_turns = %d calls) and has ended",
                        a->task.max_turns);
  }
  if (!a->prog_opts->honor_sampling) {
    plan->sp = (lt_sampling_t){.temperature = a->task.eval ? 0.0f : (float)a->task.temperature,
                               .top_p = (float)a->task.top_p, .top_k = a->task.top_k};
  } else if (a->call_temp >= 0 && a->call_temp != plan->sp.temperature) {
    return lt_error_set(LT_EINVAL, "temperature: an episode samples at one temperature (%g so far), the learner corrects for it",
                        a->call_temp);
  }
  side_t *side = NULL;
  if (a->og) { /* another call is being answered: this one is a context of its own, as rendered */
    if (!(side = calloc(1, sizeof *side))) return lt_error_set(LT_ENOMEM, "agent: out of memory");
    *side = (side_t){.a = a, .next = a->sides, .prompt = plan->prompt, .nprompt = plan->nprompt, .rec = {.routing_layers = a->traj.routing_layers,
                         .routing_k = a->traj.routing_k, .routing_experts = a->traj.routing_experts}};
    a->sides = side;
  } else {
    a->traj.ntokens = a->committed, a->traj.nsupport_ids = a->committed_sids; /* a call never answered leaves no trace */
    while (a->traj.nseqs > 1 && a->traj.seq_starts[a->traj.nseqs - 1] >= a->committed) a->traj.nseqs--;
    int rc = call_context(a, plan);
    if (rc < 0) return rc;
  }
  int room = context_room(a) - plan->nprompt;
  if (room <= 0) {
    if (side) side_free(side);
    return lt_error_set(LT_ERANGE, "the context (%d tokens) fills rollout.max_context (%d)", plan->nprompt, context_room(a));
  }
  if (plan->max_new > room) plan->max_new = room;
  if (plan->max_new > a->task.max_new_tokens) plan->max_new = a->task.max_new_tokens; /* the rollout's budget */
  if (side) plan->session = side; /* the later hooks of this call get it */
  return 0;
}

/* What every answered call adds to the episode. */
static void count_answer(lt_agent_t *a, const lt_oai_result_t *r) {
  a->turns++;
  a->generated += r->choices[0].n;
  if (a->prog_opts->honor_sampling) a->call_temp = r->plan->sp.temperature;
}

static void side_on_turn(lt_gen_t *g, const lt_turn_t *t, const lt_prefill_routing_t *pre, void *ud) {
  (void)g;
  side_t *c = ud;
  lt_oai_gen_t *og = c->og;
  c->og = NULL;
  int rc = og ? push_turn_to(&c->rec, c->prompt, c->nprompt, t, pre, &c->gen_at) : 0;
  /* answered (gw_answered) runs inside lt_oai_gen_end, or never: the call is over after it. */
  if (og) lt_oai_gen_end(og, rc, t->stopped, rc < 0 ? lt_error_msg() : NULL);
  side_free(c);
}

static int side_on_token(lt_gen_t *g, int32_t token, float logprob, int ntop, const int32_t *ids, const float *lps, void *ud) {
  (void)g;
  side_t *c = ud;
  lt_oai_token_t t = {.token = token, .logprob = logprob, .ntop = ntop, .top_ids = ids, .top_logprobs = lps};
  return c->og ? lt_oai_gen_token(c->og, &t) : 1;
}

static int side_generate(side_t *c, lt_oai_gen_t *g, const lt_oai_job_t *job) {
  lt_agent_t *a = c->a;
  uint64_t seed = (uint64_t)a->task.seed + ++a->nsides * 0xbf58476d1ce4e5b9ull;
  int rc = lt_gen_open(a->ctx->backend, seed, &c->gen);
  if (rc == 0) {
    c->og = g;
    /* The program waits on this answer too: its clock stands still until the side call ends (the holds nest). */
    if (a->prog) lt_program_hold(a->prog), c->held = 1;
    lt_gen_watch(c->gen, job->plan->top_logprobs, side_on_token, c);
    rc = lt_gen_turn(c->gen, c->prompt, c->nprompt, job->plan->max_new, &job->plan->sp, side_on_turn, c);
  }
  if (rc < 0) side_free(c); /* the call fails: no hook of it follows */
  return rc;
}

/* A side call answered: its context as the agent was told it. */
static void side_answered(side_t *c, const lt_oai_result_t *r) {
  lt_agent_t *a = c->a;
  rec_cut(&c->rec, c->gen_at + r->choices[0].n); /* exactly the tokens the agent was told about */
  if (rec_append(&a->side, &c->rec) < 0) {
    LT_WARN("agent", "task %llu: a concurrent call's context is lost: %s", (unsigned long long)a->task.task_id, lt_error_msg());
    return;
  }
  count_answer(a, r);
}

static void gw_on_turn(lt_gen_t *g, const lt_turn_t *t, const lt_prefill_routing_t *pre, void *ud) {
  (void)g;
  lt_agent_t *a = ud;
  a->t_gen += lt_time_mono_s() - a->t_call;
  int rc = push_turn(a, t, pre);
  if (rc < 0) {
    lt_gen_close(a->gen), a->gen = NULL;
    end_call(a, rc, lt_error_msg());
    return;
  }
  lt_oai_gen_end(call_over(a), 0, t->stopped, NULL);
}

/* Each token as it is generated (streaming, stop strings, top_logprobs); 1 from
 * the layer ends the turn after it, so the session holds what the agent got. */
static int gw_on_token(lt_gen_t *g, int32_t token, float logprob, int ntop, const int32_t *ids, const float *lps, void *ud) {
  (void)g;
  lt_agent_t *a = ud;
  lt_oai_token_t t = {.token = token, .logprob = logprob, .ntop = ntop, .top_ids = ids, .top_logprobs = lps};
  return a->og ? lt_oai_gen_token(a->og, &t) : 1;
}

static int gw_generate(void *session, lt_oai_gen_t *g, const lt_oai_job_t *job) {
  lt_agent_t *a = call_agent(session);
  if (session != a) return side_generate(session, g, job);
  call_begin(a, g);
  a->t_call = lt_time_mono_s();
  lt_gen_watch(a->gen, job->plan->top_logprobs, gw_on_token, a);
  int rc = lt_gen_turn(a->gen, a->append, a->nappend, job->plan->max_new, &job->plan->sp, gw_on_turn, a);
  if (rc < 0) call_over(a);
  return rc;
}

static void gw_cancel(void *session) {
  lt_agent_t *a = call_agent(session);
  if (session != a) {
    side_free(session); /* its turn's callback will not run */
    return;
  }
  call_over(a);
  if (a->gen) lt_gen_close(a->gen), a->gen = NULL; /* its turn's callback will not run */
}

static void gw_context_limit(void *session, int need, int max_context) {
  lt_agent_t *a = call_agent(session);
  LT_DEBUG("agent", "task %llu: context %d of %d: the episode ends (context_limit)", (unsigned long long)a->task.task_id, need,
           max_context);
  a->limit = "context_limit";
  lt_gateway_revoke(a->ctx->gateway, a);
}

static void gw_answered(void *session, const lt_oai_result_t *r) {
  lt_agent_t *a = call_agent(session);
  if (session != a) {
    side_answered(session, r);
    return;
  }
  const lt_oai_choice_t *c = &r->choices[0];
  rec_cut(&a->traj, a->call_gen + c->n); /* exactly the tokens the agent was told about */
  a->committed = a->traj.ntokens;
  a->committed_sids = a->traj.nsupport_ids;
  count_answer(a, r);
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

const lt_gateway_session_ops_t lt_agent_gateway_ops = {.prepare = gw_prepare, .generate = gw_generate, .cancel = gw_cancel,
                                                       .context_limit = gw_context_limit, .answered = gw_answered};

void lt_agent_context_config(const lt_config_t *c, lt_context_opts_t *out) {
  const char *comp = lt_config_str(c, "rollout.compression");
  *out = (lt_context_opts_t){.keep_reasoning_latest = !strcmp(lt_config_str(c, "rollout.keep_reasoning"), "latest"),
                             .compression = !strcmp(comp, "summary")       ? LT_COMPRESS_SUMMARY
                                            : !strcmp(comp, "discard_all") ? LT_COMPRESS_DISCARD_ALL
                                            : !strcmp(comp, "hybrid")      ? LT_COMPRESS_HYBRID
                                                                           : LT_COMPRESS_NONE,
                             .threshold = (int)lt_config_int(c, "rollout.compression_threshold"),
                             .max_resets = (int)lt_config_int(c, "rollout.max_resets"),
                             .summary_tokens = (int)lt_config_int(c, "rollout.summary_tokens"),
                             .summary_prompt = lt_config_str(c, "rollout.summary_prompt")};
}
