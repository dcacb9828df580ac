/* The builtin agent loop (rollout/internal.h): the policy generates a turn, its tool calls run through the
 * environment, the observations are appended (loss mask 0), until the environment ends the episode or a limit
 * truncates it.  Prompts render through the checkpoint's chat template (ChatML without one), turn by turn, the
 * generated tokens never re-tokenized; the context is managed past its threshold (rollout.keep_reasoning,
 * rollout.compression: a rewrite starts a new context of the trajectory). */
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "rollout/internal.h"
#include "text/toolcall.h"
#include "util/error.h"
#include "util/time.h"

struct lt__loop {
  char *stop_text;         /* the stop token that ended the last turn (chat templates) */
  const char *done_reason; /* the outcome's reason should the environment end the episode after this turn */
  int seg_turns;           /* turns since the last context rewrite */
  int resets;              /* context rewrites so far */
  cJSON *opening;          /* the environment's opening chat, for discard-all restarts */
  lt_gen_t *sgen;          /* the policy summarizing its own context */
};

int lt__loop_new(lt_agent_t *a) {
  if (!(a->loop = calloc(1, sizeof *a->loop))) return lt_error_set(LT_ENOMEM, "agent: out of memory");
  return 0;
}

void lt__loop_stop(lt_agent_t *a) {
  if (a->loop->sgen) lt_gen_close(a->loop->sgen), a->loop->sgen = NULL;
}

void lt__loop_free(lt_agent_t *a) { /* stopped already (lt__loop_stop) */
  cJSON_Delete(a->loop->opening);
  free(a->loop->stop_text);
  free(a->loop);
  a->loop = NULL;
}

/* ---- rendering ---- */

/* Appends one rendered message to the queue. */
static int loop_queue_one(lt_agent_t *a, const char *role, const char *content) {
  return lt_chat_message(lt_backend_tokenizer(a->ctx->backend), lt_role_parse(role), content, &a->append, &a->nappend,
                         &a->capappend);
}

static int loop_is_marker(const cJSON *m) { return cJSON_GetObjectItemCaseSensitive(m, "longtail_context") != NULL; }

static int loop_render(const lt_agent_t *a, const cJSON *msgs, int gen_prompt, char **text, size_t *len) {
  int rc = lt_chat_render(a->ctx->chat, a->ctx->tool_format, msgs,
                          cJSON_GetObjectItemCaseSensitive(a->task.spec, "tools"), gen_prompt, text, len);
  if (rc < 0) lt_error_wrap(rc, "chat template");
  return rc;
}

/* References to hist's messages (markers left out) and then msgs'. */
static cJSON *loop_refs(const cJSON *hist, const cJSON *msgs) {
  cJSON *all = cJSON_CreateArray();
  const cJSON *lists[2] = {hist, msgs};
  for (int k = 0; k < 2 && all; k++)
    for (const cJSON *m = lists[k] ? lists[k]->child : NULL; m; m = m->next)
      if (!loop_is_marker(m) && !cJSON_AddItemReferenceToArray(all, (cJSON *)m)) {
        cJSON_Delete(all);
        return NULL;
      }
  return all;
}

/* render(hist + msgs, with the generation prompt) past render(hist), or NULL
 * when the first does not extend the second. */
static int loop_extend(const lt_agent_t *a, const cJSON *hist, const cJSON *msgs, char **base, size_t *blen,
                       const char **delta, size_t *dlen, char **full, size_t *flen) {
  cJSON *h = loop_refs(hist, NULL), *all = loop_refs(hist, msgs);
  *flen = 0;
  int rc = h && all ? 0 : lt_error_set(LT_ENOMEM, "agent: out of memory");
  if (rc == 0) rc = loop_render(a, h, 0, base, blen);
  if (rc == 0) rc = loop_render(a, all, 1, full, flen);
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
static int loop_template_delta(lt_agent_t *a, const cJSON *hist, const cJSON *msgs, lt_buf_t *out) {
  static const cJSON empty = {.type = cJSON_Array};
  const char *stop = a->loop->stop_text;
  char *base = NULL, *full = NULL;
  size_t blen = 0, dlen = 0, flen = 0;
  const char *delta;
  int rc = loop_extend(a, hist ? hist : &empty, msgs, &base, &blen, &delta, &dlen, &full, &flen);
  if (rc == 0 && !hist) delta = full, dlen = flen;
  if (rc == 0 && hist && stop && stop[0]) {
    const char *q = NULL;
    for (const char *s = base; (s = strstr(s, stop)); s++) q = s;
    if (q) lt_buf_puts(out, q + strlen(stop));
  }
  if (rc == 0 && !delta && hist) {
    free(base), free(full);
    base = full = NULL;
    rc = loop_extend(a, &empty, msgs, &base, &blen, &delta, &dlen, &full, &flen);
  }
  if (rc == 0 && !delta)
    rc = lt_error_set(LT_EINVAL, "chat template: rendering more messages changes the earlier text");
  if (rc == 0) lt_buf_append(out, delta, dlen);
  free(base), free(full);
  return rc == 0 ? lt_buf_ok(out) : rc;
}

/* Renders chat messages (and opens the assistant's turn) into the queue;
 * `log` also records them in the episode's messages. */
static int loop_queue_chat(lt_agent_t *a, const cJSON *msgs, int log) {
  int rc = 0;
  if (a->ctx->chat) {
    int fresh = a->traj.ntokens == lt__rec_seq0(&a->traj) && a->nappend == 0; /* a new context renders from the start */
    lt_buf_t text = {0};
    rc = loop_template_delta(a, fresh ? NULL : a->messages, msgs, &text);
    if (rc == 0)
      rc = lt_ids_text(lt_backend_tokenizer(a->ctx->backend), text.data ? text.data : "", &a->append, &a->nappend,
                       &a->capappend);
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
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role"),
                *content = cJSON_GetObjectItemCaseSensitive(m, "content");
    if (!cJSON_IsString(role) || !cJSON_IsString(content))
      return lt_error_set(LT_EINVAL, "environment message without role/content");
    rc = loop_queue_one(a, role->valuestring, content->valuestring);
    cJSON *copy = rc == 0 && log ? cJSON_Duplicate(m, 1) : NULL;
    if (rc == 0 && log && (!copy || !cJSON_AddItemToArray(a->messages, copy))) {
      cJSON_Delete(copy);
      rc = lt_error_set(LT_ENOMEM, "agent: out of memory");
    }
  }
  if (rc == 0)
    rc = lt_chat_open(lt_backend_tokenizer(a->ctx->backend), LT_ROLE_ASSISTANT, &a->append, &a->nappend, &a->capappend);
  return rc;
}

/* ---- context management ---- */

/* Text without its <think>...</think> blocks (caller frees). */
static char *loop_strip_reasoning(const char *text) {
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

/* Records in the messages that the context was rewritten, and why. */
static void loop_mark(lt_agent_t *a, const char *kind) {
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
static int loop_restart(lt_agent_t *a, const cJSON *chat, const char *kind, int compression) {
  lt__loop_t *l = a->loop;
  a->nappend = 0;
  int rc = lt__rec_new_context(&a->traj);
  if (rc < 0) return rc;
  if (compression) l->seg_turns = 0, l->resets++;
  lt_gen_close(a->gen);
  a->gen = NULL;
  uint64_t salt = (uint64_t)(l->resets * 64 + a->turns) * 0x9e3779b97f4a7c15ull;
  rc = lt_gen_open(a->ctx->backend, (uint64_t)a->task.seed + salt, &a->gen);
  if (rc == 0) rc = loop_queue_chat(a, chat, 0);
  if (rc == 0) loop_mark(a, kind);
  return rc;
}

/* The whole conversation again, without the reasoning of assistant turns
 * before the latest user message (the reasoning of the current user turn stays). */
static int loop_drop_old_reasoning(lt_agent_t *a) {
  const cJSON *last_user = NULL;
  for (const cJSON *m = a->messages->child; m; m = m->next) {
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(m, "role");
    if (cJSON_IsString(r) && !strcmp(r->valuestring, "user")) last_user = m;
  }
  cJSON *chat = cJSON_CreateArray();
  int before = 1, changed = 0;
  for (const cJSON *m = a->messages->child; m; m = m->next) {
    if (m == last_user) before = 0;
    if (loop_is_marker(m)) continue;
    cJSON *c = cJSON_Duplicate(m, 1);
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(m, "role"), *t = cJSON_GetObjectItemCaseSensitive(m, "content");
    if (before && cJSON_IsString(r) && !strcmp(r->valuestring, "assistant") && cJSON_IsString(t) &&
        strstr(t->valuestring, "<think>")) {
      char *s = loop_strip_reasoning(t->valuestring);
      if (s) cJSON_ReplaceItemInObjectCaseSensitive(c, "content", cJSON_CreateString(s)), changed = 1;
      free(s);
    }
    cJSON_AddItemToArray(chat, c);
  }
  int rc = changed ? loop_restart(a, chat, "reasoning_dropped", 0) : 0;
  cJSON_Delete(chat);
  return rc;
}

static void loop_on_summary(lt_gen_t *g, const lt_turn_t *t, const lt_prefill_routing_t *pre, void *ud);

/* The policy summarizes its own context (ReSum-style, seed 004 §3.3.2); the
 * new context is the opening chat plus that summary.  Falls back to discard-all
 * when the history is too long to summarize. */
static int loop_summarize(lt_agent_t *a) {
  const lt_context_opts_t *o = &a->ctx->context;
  lt__loop_t *l = a->loop;
  int32_t *saved = a->append;
  int nsaved = a->nappend, capsaved = a->capappend;
  a->append = NULL, a->nappend = 0, a->capappend = 0;
  cJSON *chat = cJSON_CreateArray();
  for (const cJSON *m = a->messages->child; m; m = m->next)
    if (!loop_is_marker(m)) cJSON_AddItemToArray(chat, cJSON_Duplicate(m, 1));
  cJSON *req = cJSON_CreateObject();
  cJSON_AddStringToObject(req, "role", "user");
  cJSON_AddStringToObject(req, "content", o->summary_prompt ? o->summary_prompt : "Summarize the progress so far.");
  cJSON_AddItemToArray(chat, req);
  int rc = loop_queue_chat(a, chat, 0);
  cJSON_Delete(chat);
  int fits = rc == 0 && a->nappend + o->summary_tokens < lt__agent_context_room(a);
  if (rc == 0 && fits) rc = lt_gen_open(a->ctx->backend, (uint64_t)a->task.seed ^ 0x5u, &l->sgen);
  lt_sampling_t sp = {.temperature = 0.0f, .top_p = 1.0f};
  if (rc == 0 && fits) rc = lt_gen_turn(l->sgen, a->append, a->nappend, o->summary_tokens, &sp, loop_on_summary, a);
  free(a->append);
  a->append = saved, a->nappend = nsaved, a->capappend = capsaved;
  if (rc < 0 || !fits) {
    lt__loop_stop(a);
    return fits ? rc : loop_restart(a, l->opening, "discard_all", 1);
  }
  return 1; /* loop_on_summary continues */
}

/* After an environment step: 1 when a summary is being written (the episode
 * continues from loop_on_summary), 0 to go on, < 0 on error. */
static int loop_manage_context(lt_agent_t *a, int user_turn) {
  const lt_context_opts_t *o = &a->ctx->context;
  if (user_turn && o->keep_reasoning_latest) {
    int rc = loop_drop_old_reasoning(a);
    if (rc < 0) return rc;
  }
  if (o->compression == LT_COMPRESS_NONE || o->threshold <= 0 || a->loop->resets >= o->max_resets) return 0;
  if (a->traj.ntokens - lt__rec_seq0(&a->traj) + a->nappend < o->threshold) return 0;
  if (o->compression == LT_COMPRESS_DISCARD_ALL) return loop_restart(a, a->loop->opening, "discard_all", 1);
  return loop_summarize(a);
}

/* ---- turns ---- */

static void loop_next_turn(lt_agent_t *a);

/* The environment's answer to a turn: the episode ends, or its observations are the next context. */
static void loop_on_step(lt_episode_t *ep, lt_env_step_t *res, void *ud) {
  (void)ep;
  lt_agent_t *a = ud;
  lt__loop_t *l = a->loop;
  cJSON *obs = res->observations;
  char *err = res->error_msg;
  const lt_context_opts_t *co = &a->ctx->context;
  int rc = 0, user_turn = 0;
  if (a->state != LT__EP_RUNNING) { /* it ended (aborted) while the environment stepped */
  } else if (res->error) {
    lt__agent_end(a, LT_TRAJ_ENV_ERROR, LT_FINISH_NONE, "env_error", err ? err : lt_strerror(res->error));
  } else if (res->timeout) {
    lt__agent_end(a, LT_TRAJ_OK, LT_FINISH_TIMEOUT, res->timeout, NULL);
  } else if (res->done) {
    lt__agent_end(a, LT_TRAJ_OK, LT_FINISH_TERMINATED, l->done_reason ? l->done_reason : "env_done", NULL);
  } else if (l->seg_turns >= a->task.max_turns &&
             (co->compression != LT_COMPRESS_HYBRID || l->resets >= co->max_resets)) {
    lt__agent_end(a, LT_TRAJ_OK, LT_FINISH_TRUNCATED, "turn_limit", NULL);
  } else if (l->seg_turns >= a->task.max_turns) { /* hybrid: out of turns, start over from the question */
    if ((rc = loop_restart(a, l->opening, "discard_all", 1)) < 0)
      lt__agent_end(a, LT_TRAJ_ERROR, LT_FINISH_NONE, "worker_error", lt_error_msg());
    else loop_next_turn(a);
  } else { /* observations become the next context, then the assistant speaks again */
    for (const cJSON *m = obs ? obs->child : NULL; m; m = m->next) {
      const cJSON *r = cJSON_GetObjectItemCaseSensitive(m, "role");
      user_turn |= cJSON_IsString(r) && !strcmp(r->valuestring, "user");
    }
    rc = a->ctx->chat
             ? 0
             : lt_ids_text(lt_backend_tokenizer(a->ctx->backend), "\n", &a->append, &a->nappend, &a->capappend);
    if (rc == 0) rc = loop_queue_chat(a, obs, 1);
    if (rc == 0) rc = loop_manage_context(a, user_turn);
    if (rc < 0) lt__agent_end(a, LT_TRAJ_ENV_ERROR, LT_FINISH_NONE, "env_error", lt_error_msg());
    else if (rc == 0) loop_next_turn(a);
  }
  cJSON_Delete(obs);
  free(err);
}

/* The turn's assistant message (its tool calls parsed) into the messages; the calls in *tc. */
static int loop_log_turn(lt_agent_t *a, const char *text, size_t len, lt_toolcalls_t *tc) {
  int rc = lt_toolcall_parse_as(a->ctx->tool_format, text, len, tc);
  if (rc < 0) return rc;
  a->malformed += tc->malformed;
  cJSON *msg = cJSON_CreateObject();
  cJSON_AddStringToObject(msg, "role", "assistant");
  cJSON_AddStringToObject(msg, "content", text);
  if (tc->ncalls) {
    cJSON *calls = cJSON_AddArrayToObject(msg, "tool_calls");
    for (int i = 0; i < tc->ncalls; i++) {
      cJSON *c = cJSON_CreateObject(), *args = tc->arguments[i] ? cJSON_Parse(tc->arguments[i]) : NULL;
      cJSON_AddStringToObject(c, "name", tc->calls[i].name);
      if (!args) { /* xml: every value is a string */
        args = cJSON_CreateObject();
        for (int k = 0; k < tc->calls[i].nargs; k++)
          cJSON_AddStringToObject(args, tc->calls[i].args[k].name, tc->calls[i].args[k].value);
      }
      cJSON_AddItemToObject(c, "arguments", args);
      cJSON_AddItemToArray(calls, c);
    }
  }
  cJSON_AddItemToArray(a->messages, msg);
  return 0;
}

static void loop_on_turn(lt_gen_t *g, const lt_turn_t *t, const lt_prefill_routing_t *pre, void *ud) {
  lt_agent_t *a = ud;
  lt__loop_t *l = a->loop;
  a->t_gen += lt_time_mono_s() - a->t0;
  int gen_at, rc = lt__agent_push_turn(a, t, pre, &gen_at);
  if (rc < 0) {
    lt__agent_end(a, LT_TRAJ_ERROR, LT_FINISH_NONE, "inference_error", lt_error_msg());
    return;
  }
  a->generated += t->n;
  a->turns++;
  l->seg_turns++;
  /* The assistant's text, without its stop token. */
  const lt_tokenizer_t *tok = lt_backend_tokenizer(a->ctx->backend);
  int ntext = t->stopped ? t->n - 1 : t->n;
  char *text = NULL;
  size_t len, slen;
  if ((rc = lt_tokenizer_decode(tok, t->tokens, ntext > 0 ? ntext : 0, 1, &text, &len)) < 0) {
    lt__agent_end(a, LT_TRAJ_ERROR, LT_FINISH_NONE, "inference_error", lt_error_msg());
    return;
  }
  free(a->last_text);
  a->last_text = text;
  free(l->stop_text);
  l->stop_text = NULL;
  if (t->stopped && t->n > 0 && a->ctx->chat &&
      lt_tokenizer_decode(tok, t->tokens + t->n - 1, 1, 0, &l->stop_text, &slen) < 0)
    l->stop_text = NULL; /* then nothing follows the stop token but the next messages */
  lt_toolcalls_t tc;
  if (loop_log_turn(a, text, len, &tc) < 0) {
    lt__agent_end(a, LT_TRAJ_ERROR, LT_FINISH_NONE, "inference_error", lt_error_msg());
    return;
  }
  if (!t->stopped) { /* the token budget ran out mid-turn */
    lt_backend_info_t bi;
    lt_backend_info(a->ctx->backend, &bi);
    int at_limit = lt_gen_len(g) >= bi.max_context || lt_gen_len(g) >= a->task.max_context;
    lt_toolcalls_free(&tc);
    lt__agent_end(a, LT_TRAJ_OK, LT_FINISH_TRUNCATED, at_limit ? "context_limit" : "max_new_tokens", NULL);
    return;
  }
  l->done_reason = tc.ncalls ? "env_done" : "stop";
  a->t0 = lt_time_mono_s();
  rc = lt_episode_step(a->ep, text, tc.calls, tc.ncalls, loop_on_step, a);
  if (rc == 0 && tc.ncalls && a->ctx->fault_in_step && --*a->ctx->fault_in_step == 0)
    raise(SIGKILL); /* chaos: mid-tool-call */
  lt_toolcalls_free(&tc);
  if (rc < 0) lt__agent_end(a, LT_TRAJ_ENV_ERROR, LT_FINISH_NONE, "env_error", lt_error_msg());
}

static void loop_on_summary(lt_gen_t *g, const lt_turn_t *t, const lt_prefill_routing_t *pre, void *ud) {
  (void)g, (void)pre;
  lt_agent_t *a = ud;
  char *text = NULL;
  size_t len = 0;
  int rc = t->error ? lt_error_set(t->error, "summary: %s", t->error_msg ? t->error_msg : lt_strerror(t->error)) : 0;
  int ntext = t->stopped ? t->n - 1 : t->n;
  if (rc == 0)
    rc = lt_tokenizer_decode(lt_backend_tokenizer(a->ctx->backend), t->tokens, ntext > 0 ? ntext : 0, 1, &text, &len);
  lt__loop_stop(a);
  cJSON *chat = rc == 0 ? cJSON_Duplicate(a->loop->opening, 1) : NULL;
  if (chat) {
    char *s = text ? loop_strip_reasoning(text) : NULL;
    char *body = malloc((s ? strlen(s) : 0) + 64);
    if (body) sprintf(body, "Summary of the progress so far:\n%s", s ? s : "");
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", "user");
    cJSON_AddStringToObject(m, "content", body ? body : "");
    cJSON_AddItemToArray(chat, m);
    cJSON *logged = cJSON_Duplicate(m, 1);
    free(s), free(body);
    rc = loop_restart(a, chat, "summary", 1);
    if (rc == 0) cJSON_AddItemToArray(a->messages, logged); /* the summary the policy continues from */
    else cJSON_Delete(logged);
  }
  free(text);
  cJSON_Delete(chat);
  if (rc < 0) lt__agent_end(a, LT_TRAJ_ERROR, LT_FINISH_NONE, "inference_error", lt_error_msg());
  else loop_next_turn(a);
}

static void loop_next_turn(lt_agent_t *a) {
  int room = lt__agent_context_room(a) - (a->traj.ntokens - lt__rec_seq0(&a->traj)) - a->nappend;
  if (room <= 0) {
    lt__agent_end(a, LT_TRAJ_OK, LT_FINISH_TRUNCATED, "context_limit", NULL);
    return;
  }
  int max_new = a->task.max_new_tokens < room ? a->task.max_new_tokens : room;
  lt_sampling_t sp = {.temperature = a->task.eval ? 0.0f : (float)a->task.temperature,
                      .top_p = (float)a->task.top_p,
                      .top_k = a->task.top_k};
  a->t0 = lt_time_mono_s();
  if (lt_gen_turn(a->gen, a->append, a->nappend, max_new, &sp, loop_on_turn, a) < 0)
    lt__agent_end(a, LT_TRAJ_ERROR, LT_FINISH_NONE, "inference_error", lt_error_msg());
}

void lt__loop_start(lt_agent_t *a, cJSON *opening) {
  a->loop->opening = opening; /* kept for discard-all restarts */
  if (loop_queue_chat(a, opening, 1) < 0) {
    lt__agent_end(a, LT_TRAJ_ENV_ERROR, LT_FINISH_NONE, "env_error", lt_error_msg());
    return;
  }
  if (lt_gen_open(a->ctx->backend, (uint64_t)a->task.seed, &a->gen) < 0) {
    lt__agent_end(a, LT_TRAJ_ERROR, LT_FINISH_NONE, "inference_error", lt_error_msg());
    return;
  }
  loop_next_turn(a);
}

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
