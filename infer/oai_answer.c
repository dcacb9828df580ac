/* The OpenAI layer's answers: tokens as the engine reports them, stop
 * strings on the decoded text, tool calls parsed back, and the answer as one
 * JSON object or as server-sent events (`stream: true`). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "infer/internal.h"
#include "util/buf.h"
#include "util/error.h"
#include "util/grow.h"
#include "util/json.h"

void lt__oai_gen_release(lt_oai_gen_t *g) {
  free(g->tokens), free(g->logprobs), free(g->ntop), free(g->top_ids), free(g->top_lps), free(g->text);
  cJSON_Delete(g->tool_calls);
  g->tokens = NULL, g->logprobs = NULL, g->ntop = NULL, g->top_ids = NULL, g->top_lps = NULL, g->text = NULL;
  g->tool_calls = NULL;
}

static int push(lt_oai_gen_t *g, const lt_oai_token_t *t, int K) {
  lt_grow_t arr[] = {LT_GROW(g->tokens), LT_GROW(g->logprobs), LT_GROW_K(g->ntop, K ? 1 : 0), LT_GROW_K(g->top_ids, K),
                     LT_GROW_K(g->top_lps, K)};
  if (lt_grow(&g->cap, (size_t)g->n + 1, 64, arr, sizeof arr / sizeof *arr) < 0) return LT_ENOMEM;
  g->tokens[g->n] = t->token;
  g->logprobs[g->n] = t->logprob;
  if (K) {
    int m = t->ntop < K ? t->ntop : K;
    g->ntop[g->n] = m > 0 ? m : 0;
    if (m > 0) {
      memcpy(g->top_ids + (size_t)g->n * K, t->top_ids, sizeof *g->top_ids * (size_t)m);
      memcpy(g->top_lps + (size_t)g->n * K, t->top_logprobs, sizeof *g->top_lps * (size_t)m);
    }
  }
  g->n++;
  return 0;
}

static int append_text(lt_oai_gen_t *g, const char *s, size_t n) {
  if (g->tlen + n + 1 > g->tcap) {
    size_t cap = g->tcap ? 2 * g->tcap : 256;
    while (cap < g->tlen + n + 1) cap *= 2;
    char *t = realloc(g->text, cap);
    if (!t) return LT_ENOMEM;
    g->text = t, g->tcap = cap;
  }
  memcpy(g->text + g->tlen, s, n);
  g->tlen += n;
  g->text[g->tlen] = 0;
  return 0;
}

/* Cuts the text at the earliest stop string that the new bytes completed. */
static int match_stop(lt__oai_call_t *k, lt_oai_gen_t *g, size_t before) {
  size_t best = (size_t)-1;
  for (int i = 0; i < k->nstops; i++) {
    size_t sl = strlen(k->stops[i]), from = before + 1 > sl ? before + 1 - sl : 0;
    const char *p = g->tlen >= sl ? memmem(g->text + from, g->tlen - from, k->stops[i], sl) : NULL;
    if (p && (size_t)(p - g->text) < best) best = (size_t)(p - g->text);
  }
  if (best == (size_t)-1) return 0;
  g->tlen = best;
  g->text[best] = 0;
  g->cut = 1;
  return 1;
}

static char *token_text(const lt__oai_call_t *k, int32_t id, int as_id) {
  char *t = NULL;
  size_t n;
  if (as_id) {
    char buf[32];
    snprintf(buf, sizeof buf, "token_id:%d", id);
    return strdup(buf);
  }
  return lt_tokenizer_decode(k->a->o.tok, &id, 1, 0, &t, &n) < 0 ? NULL : t;
}

static cJSON *token_entry(const lt__oai_call_t *k, int32_t id, float lp) {
  cJSON *e = cJSON_CreateObject();
  char *tt = token_text(k, id, k->token_ids), *raw = token_text(k, id, 0);
  cJSON_AddStringToObject(e, "token", tt ? tt : "");
  cJSON_AddNumberToObject(e, "logprob", lp);
  cJSON *bytes = cJSON_AddArrayToObject(e, "bytes");
  for (const unsigned char *p = (const unsigned char *)raw; p && *p; p++) cJSON_AddItemToArray(bytes, cJSON_CreateNumber(*p));
  free(tt);
  free(raw);
  return e;
}

/* The logprobs object of tokens [from, to) of a choice, in the endpoint's shape. */
static cJSON *logprobs_json(const lt__oai_call_t *k, lt_oai_gen_t *g, int from, int to) {
  int K = k->plan.top_logprobs;
  cJSON *lp = cJSON_CreateObject();
  if (k->plan.chat) {
    cJSON *content = cJSON_AddArrayToObject(lp, "content");
    for (int i = from; i < to; i++) {
      cJSON *e = token_entry(k, g->tokens[i], g->logprobs[i]), *tops = cJSON_AddArrayToObject(e, "top_logprobs");
      for (int j = 0; K && j < g->ntop[i]; j++)
        cJSON_AddItemToArray(tops, token_entry(k, g->top_ids[(size_t)i * K + j], g->top_lps[(size_t)i * K + j]));
      cJSON_AddItemToArray(content, e);
    }
    return lp;
  }
  cJSON *toks = cJSON_AddArrayToObject(lp, "tokens"), *lps = cJSON_AddArrayToObject(lp, "token_logprobs");
  cJSON *off = cJSON_AddArrayToObject(lp, "text_offset");
  cJSON *tops = K ? cJSON_AddArrayToObject(lp, "top_logprobs") : NULL;
  if (!K) cJSON_AddNullToObject(lp, "top_logprobs");
  /* Offsets continue from the last chunk's: recounting every earlier token per chunk is quadratic. */
  size_t at = g->off_tok <= from ? g->off_at : 0;
  for (int i = g->off_tok <= from ? g->off_tok : 0; i < from; i++) {
    char *raw = token_text(k, g->tokens[i], 0);
    at += raw ? strlen(raw) : 0;
    free(raw);
  }
  for (int i = from; i < to; i++) {
    char *tt = token_text(k, g->tokens[i], k->token_ids), *raw = token_text(k, g->tokens[i], 0);
    cJSON_AddItemToArray(toks, cJSON_CreateString(tt ? tt : ""));
    cJSON_AddItemToArray(lps, cJSON_CreateNumber(g->logprobs[i]));
    cJSON_AddItemToArray(off, cJSON_CreateNumber((double)at));
    at += raw ? strlen(raw) : 0;
    if (tops) {
      cJSON *d = cJSON_CreateObject();
      for (int j = 0; j < g->ntop[i]; j++) {
        char *a = token_text(k, g->top_ids[(size_t)i * K + j], k->token_ids);
        if (a && !cJSON_GetObjectItemCaseSensitive(d, a)) cJSON_AddNumberToObject(d, a, g->top_lps[(size_t)i * K + j]);
        free(a);
      }
      cJSON_AddItemToArray(tops, d);
    }
    free(tt);
    free(raw);
  }
  g->off_tok = to;
  g->off_at = at;
  return lp;
}

static cJSON *usage_json(const lt__oai_call_t *k) {
  int gen = 0;
  for (int i = 0; i < k->plan.n; i++) gen += k->gens[i].n;
  cJSON *u = cJSON_CreateObject();
  cJSON_AddNumberToObject(u, "prompt_tokens", k->plan.nprompt);
  cJSON_AddNumberToObject(u, "completion_tokens", gen);
  cJSON_AddNumberToObject(u, "total_tokens", k->plan.nprompt + gen);
  return u;
}

static cJSON *envelope(const lt__oai_call_t *k, int chunk) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "id", k->id);
  cJSON_AddStringToObject(o, "object", k->plan.chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion");
  cJSON_AddNumberToObject(o, "created", k->created);
  cJSON_AddStringToObject(o, "model", k->a->model);
  cJSON_AddNumberToObject(o, "policy_version", (double)k->a->version);
  return o;
}

/* ---- streaming ---- */

static int send_event(lt__oai_call_t *k, cJSON *o) {
  if (!o) return LT_ENOMEM;
  lt_buf_t b = {0};
  lt_buf_puts(&b, "data: ");
  lt_json_write(&b, o); /* valid UTF-8 whatever the policy generated (lt__oai_send_json) */
  lt_buf_puts(&b, "\n\n");
  cJSON_Delete(o);
  int rc = lt_buf_ok(&b) < 0 ? LT_ENOMEM : lt_http_stream_write(k->conn, b.data, b.len);
  lt_buf_free(&b);
  return rc;
}

/* One chunk of choice g: delta text (or NULL), tool calls, tokens [from, to) for logprobs, finish reason. */
static int send_chunk(lt__oai_call_t *k, lt_oai_gen_t *g, const char *text, size_t len, int role, cJSON *calls,
                      int from, int to, const char *finish) {
  cJSON *o = envelope(k, 1), *ch = cJSON_CreateObject();
  cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "choices"), ch);
  cJSON_AddNumberToObject(ch, "index", g->index);
  char *t = text ? strndup(text, len) : NULL;
  if (k->plan.chat) {
    cJSON *d = cJSON_AddObjectToObject(ch, "delta");
    if (role) cJSON_AddStringToObject(d, "role", "assistant");
    if (t) cJSON_AddStringToObject(d, "content", t);
    if (calls) cJSON_AddItemToObject(d, "tool_calls", calls);
  } else {
    cJSON_AddStringToObject(ch, "text", t ? t : "");
  }
  free(t);
  if (k->logprobs && to > from) cJSON_AddItemToObject(ch, "logprobs", logprobs_json(k, g, from, to));
  else cJSON_AddNullToObject(ch, "logprobs");
  if (finish) cJSON_AddStringToObject(ch, "finish_reason", finish);
  else cJSON_AddNullToObject(ch, "finish_reason");
  if (k->include_usage) cJSON_AddNullToObject(o, "usage");
  return send_event(k, o);
}

int lt__oai_stream_begin(lt__oai_call_t *k) {
  int rc = lt_http_stream_begin(k->conn, 200, "text/event-stream");
  if (rc < 0) return rc;
  k->streaming = 1;
  for (int i = 0; k->plan.chat && i < k->plan.n && rc == 0; i++) {
    k->gens[i].index = i;
    rc = send_chunk(k, &k->gens[i], "", 0, 1, NULL, 0, 0, NULL);
  }
  return rc == LT_ECANCELED ? 0 : rc; /* a client that left is noticed by the tokens */
}

void lt__oai_stream_error(lt__oai_call_t *k, int status, const char *param, const char *code, const char *msg) {
  cJSON *o = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(o, "error");
  cJSON_AddStringToObject(e, "message", msg);
  cJSON_AddStringToObject(e, "type", status >= 500 ? "server_error" : "invalid_request_error");
  if (param) cJSON_AddStringToObject(e, "param", param);
  else cJSON_AddNullToObject(e, "param");
  if (code) cJSON_AddStringToObject(e, "code", code);
  else cJSON_AddNullToObject(e, "code");
  send_event(k, o);
  lt_http_stream_end(k->conn);
}

/* How much of the text may go out now: not what could still become a stop
 * string, not half a UTF-8 character; nothing while tool calls may follow
 * (they are parsed from the whole text at the end). */
static size_t releasable(const lt__oai_call_t *k, const lt_oai_gen_t *g) {
  if (k->parse_tools) return g->sent;
  size_t hold = 0;
  for (int i = 0; i < k->nstops; i++) {
    size_t sl = strlen(k->stops[i]);
    if (sl - 1 > hold) hold = sl - 1;
  }
  size_t end = g->tlen > hold ? g->tlen - hold : 0;
  const unsigned char *t = (const unsigned char *)g->text;
  for (size_t back = 0; back < 4 && end > g->sent + back; back++) {
    unsigned char c = t[end - 1 - back];
    if ((c & 0xC0) == 0x80) continue;
    size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    if (need > back + 1) end -= back + 1;
    break;
  }
  return end > g->sent ? end : g->sent;
}

static void stream_progress(lt__oai_call_t *k, lt_oai_gen_t *g) {
  if (k->parse_tools) return;
  size_t end = releasable(k, g);
  if (end == g->sent && !(k->logprobs && g->n > g->tok_sent)) return;
  send_chunk(k, g, g->text + g->sent, end - g->sent, 0, NULL, g->tok_sent, k->logprobs ? g->n : g->tok_sent, NULL);
  g->sent = end;
  g->tok_sent = g->n;
}

/* ---- tokens ---- */

int lt_oai_gen_token(lt_oai_gen_t *g, const lt_oai_token_t *t) {
  lt__oai_call_t *k = g->call;
  if (!g->live) return 1;
  if (push(g, t, k->plan.top_logprobs) < 0) return 1; /* ends the choice short; the answer says "length" */
  int stop = 0;
  if (!g->cut && !lt_tokenizer_is_stop(k->a->o.tok, t->token)) {
    char *s = NULL;
    size_t n = 0, before = g->tlen;
    if (lt_tokenizer_decode(k->a->o.tok, &t->token, 1, k->skip_special, &s, &n) == 0 && append_text(g, s, n) == 0)
      stop = match_stop(k, g, before);
    free(s);
  }
  if (k->streaming) stream_progress(k, g);
  return stop || !lt_http_conn_alive(k->conn);
}

static const char *call_marker(lt_tool_format f) {
  return f == LT_TOOLFMT_DEEPSEEK ? "<\xef\xbd\x9c" "tool\xe2\x96\x81" "call" : "<tool_call>";
}

/* Tool calls in the text → OpenAI's tool_calls (arguments as JSON text). */
static int parse_calls(lt__oai_call_t *k, lt_oai_gen_t *g) {
  g->content_len = g->tlen;
  if (!k->parse_tools) return 0;
  lt_toolcalls_t tc;
  int rc = lt_toolcall_parse_as(k->a->o.tool_format, g->text ? g->text : "", g->tlen, &tc);
  if (rc < 0) return rc;
  if (tc.ncalls) {
    const char *m = g->text ? strstr(g->text, call_marker(k->a->o.tool_format)) : NULL;
    if (m) g->content_len = (size_t)(m - g->text);
    g->tool_calls = cJSON_CreateArray();
    for (int i = 0; i < tc.ncalls && g->tool_calls; i++) {
      cJSON *c = cJSON_CreateObject(), *fn;
      char id[96];
      snprintf(id, sizeof id, "call_%s_%d_%d", k->id, g->index, i);
      cJSON_AddNumberToObject(c, "index", i);
      cJSON_AddStringToObject(c, "id", id);
      cJSON_AddStringToObject(c, "type", "function");
      fn = cJSON_AddObjectToObject(c, "function");
      cJSON_AddStringToObject(fn, "name", tc.calls[i].name);
      if (tc.arguments[i]) {
        cJSON_AddStringToObject(fn, "arguments", tc.arguments[i]);
      } else { /* xml: every value a string */
        cJSON *args = cJSON_CreateObject();
        for (int j = 0; j < tc.calls[i].nargs; j++) cJSON_AddStringToObject(args, tc.calls[i].args[j].name, tc.calls[i].args[j].value);
        char *s = cJSON_PrintUnformatted(args);
        cJSON_AddStringToObject(fn, "arguments", s ? s : "{}");
        free(s);
        cJSON_Delete(args);
      }
      cJSON_AddItemToArray(g->tool_calls, c);
    }
    g->finish = "tool_calls";
  }
  lt_toolcalls_free(&tc);
  return 0;
}

static int blank(const char *s, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (s[i] != ' ' && s[i] != '\n' && s[i] != '\t' && s[i] != '\r') return 0;
  return 1;
}

static void answer_json(lt__oai_call_t *k) {
  cJSON *o = envelope(k, 0), *choices = cJSON_AddArrayToObject(o, "choices");
  for (int i = 0; i < k->plan.n; i++) {
    lt_oai_gen_t *g = &k->gens[i];
    cJSON *ch = cJSON_CreateObject();
    cJSON_AddItemToArray(choices, ch);
    cJSON_AddNumberToObject(ch, "index", i);
    char *t = strndup(g->text ? g->text : "", g->content_len);
    if (k->plan.chat) {
      cJSON *m = cJSON_AddObjectToObject(ch, "message");
      cJSON_AddStringToObject(m, "role", "assistant");
      if (g->tool_calls && blank(t, g->content_len)) cJSON_AddNullToObject(m, "content");
      else cJSON_AddStringToObject(m, "content", t ? t : "");
      if (g->tool_calls) {
        for (cJSON *c = g->tool_calls->child; c; c = c->next) cJSON_DeleteItemFromObject(c, "index");
        cJSON_AddItemReferenceToObject(m, "tool_calls", g->tool_calls);
      }
    } else {
      cJSON_AddStringToObject(ch, "text", t ? t : "");
    }
    free(t);
    if (k->logprobs) cJSON_AddItemToObject(ch, "logprobs", logprobs_json(k, g, 0, g->n));
    else cJSON_AddNullToObject(ch, "logprobs");
    cJSON_AddStringToObject(ch, "finish_reason", g->finish);
  }
  cJSON_AddItemToObject(o, "usage", usage_json(k));
  lt__oai_send_json(k->conn, 200, o);
}

static void stream_finish_choice(lt__oai_call_t *k, lt_oai_gen_t *g) {
  size_t end = g->tool_calls ? g->content_len : g->tlen;
  int from = g->tok_sent;
  const char *text = g->text ? g->text + g->sent : "";
  size_t len = end > g->sent ? end - g->sent : 0;
  if (g->tool_calls && blank(text, len)) len = 0;
  cJSON *calls = g->tool_calls ? cJSON_Duplicate(g->tool_calls, 1) : NULL;
  if (len || calls || (k->logprobs && g->n > from)) send_chunk(k, g, len ? text : NULL, len, 0, calls, from, k->logprobs ? g->n : from, NULL);
  g->sent = end;
  g->tok_sent = g->n;
  send_chunk(k, g, k->plan.chat ? NULL : "", 0, 0, NULL, 0, 0, g->finish);
}

static void complete(lt__oai_call_t *k) {
  lt_oai_t *a = k->a;
  int alive = lt_http_conn_alive(k->conn);
  if (k->streaming) {
    if (k->include_usage) {
      cJSON *o = envelope(k, 1);
      cJSON_AddArrayToObject(o, "choices");
      cJSON_AddItemToObject(o, "usage", usage_json(k));
      send_event(k, o);
    }
    static const char done[] = "data: [DONE]\n\n";
    lt_http_stream_write(k->conn, done, sizeof done - 1);
    lt_http_stream_end(k->conn);
  } else {
    answer_json(k);
  }
  if (alive && a->o.hooks.answered) {
    lt_oai_choice_t ch[LT_OAI_MAX_N];
    char *texts[LT_OAI_MAX_N] = {0};
    for (int i = 0; i < k->plan.n; i++) {
      lt_oai_gen_t *g = &k->gens[i];
      texts[i] = strndup(g->text ? g->text : "", g->content_len);
      ch[i] = (lt_oai_choice_t){.tokens = g->tokens, .logprobs = g->logprobs, .n = g->n, .finish_reason = g->finish,
                                .text = texts[i] ? texts[i] : ""};
    }
    lt_oai_result_t r = {.plan = &k->plan, .nchoices = k->plan.n, .choices = ch};
    a->o.hooks.answered(a->o.hooks.ud, &r);
    for (int i = 0; i < k->plan.n; i++) free(texts[i]);
  }
  lt__oai_call_done(k);
}

void lt_oai_gen_end(lt_oai_gen_t *g, int rc, int eos, const char *msg) {
  lt__oai_call_t *k = g->call;
  g->live = 0;
  k->pending--;
  if (rc == LT_ERANGE) {
    lt__oai_context_full(k, k->plan.nprompt + g->n);
    return;
  }
  if (rc == 0 && (rc = parse_calls(k, g)) < 0) msg = lt_error_msg();
  if (rc < 0) {
    lt__oai_call_fail(k, 500, NULL, NULL, msg ? msg : lt_strerror(rc));
    return;
  }
  if (!g->finish) g->finish = g->cut || eos ? "stop" : "length";
  if (k->streaming) stream_finish_choice(k, g);
  if (k->pending == 0) complete(k);
}
