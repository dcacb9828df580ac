/* OpenAI's chat completions and completions (/v1/chat/completions, /v1/completions): the request parser (every
 * field validated, what is not supported refused by name) and the answers, as one JSON object or as server-sent
 * events `data: {...}` ending with `data: [DONE]`. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "infer/internal.h"
#include "util/buf.h"
#include "util/error.h"
#include "util/json.h"

/* ---- requests ---- */

/* Content as OpenAI sends it: a string, null, or a list of {"type": "text",
 * "text": ...} parts, joined. */
static int content_text(const cJSON *content, int mi, lt_buf_t *out, char *param, size_t plen) {
  if (!content || cJSON_IsNull(content)) return 0;
  if (cJSON_IsString(content)) {
    lt_buf_puts(out, content->valuestring);
    return 0;
  }
  snprintf(param, plen, "messages[%d].content", mi);
  if (!cJSON_IsArray(content)) return lt_error_set(LT_EINVAL, "%s must be a string or a list of text parts", param);
  int pi = 0;
  for (const cJSON *p = content->child; p; p = p->next, pi++) {
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(p, "type"),
                *text = cJSON_GetObjectItemCaseSensitive(p, "text");
    if (!cJSON_IsString(type) || strcmp(type->valuestring, "text") || !cJSON_IsString(text)) {
      snprintf(param, plen, "messages[%d].content[%d].type", mi, pi);
      return lt_error_set(LT_EINVAL, "%s: only {\"type\": \"text\", \"text\": ...} parts are supported (got %s)", param,
                          cJSON_IsString(type) ? type->valuestring : "no type");
    }
    lt_buf_puts(out, text->valuestring);
  }
  return 0;
}

/* A copy of messages with every content a string (templates expect that) and
 * tool_calls checked. */
static int normalize(const cJSON *msgs, cJSON **out, char *param, size_t plen) {
  *out = NULL;
  snprintf(param, plen, "messages");
  if (!cJSON_IsArray(msgs) || !msgs->child) return lt_error_set(LT_EINVAL, "'messages' must be a non-empty list");
  cJSON *norm = cJSON_CreateArray();
  if (!norm) return lt_error_set(LT_ENOMEM, "out of memory");
  int mi = 0, rc = 0;
  for (const cJSON *m = msgs->child; m && rc == 0; m = m->next, mi++) {
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
    snprintf(param, plen, "messages[%d].role", mi);
    if (!cJSON_IsObject(m) || !cJSON_IsString(role)) {
      rc = lt_error_set(LT_EINVAL, "%s: each message needs a string 'role'", param);
      break;
    }
    const char *r = role->valuestring;
    if (strcmp(r, "system") && strcmp(r, "developer") && strcmp(r, "user") && strcmp(r, "assistant") &&
        strcmp(r, "tool")) {
      rc = lt_error_set(LT_EINVAL, "%s: '%s' is not one of system, developer, user, assistant, tool", param, r);
      break;
    }
    cJSON *c = cJSON_Duplicate(m, 1);
    if (!c || !cJSON_AddItemToArray(norm, c)) {
      cJSON_Delete(c);
      rc = lt_error_set(LT_ENOMEM, "out of memory");
      break;
    }
    if (!strcmp(r, "developer")) cJSON_SetValuestring(cJSON_GetObjectItemCaseSensitive(c, "role"), "system");
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
    if (cJSON_IsArray(content)) {
      lt_buf_t b = {0};
      if ((rc = content_text(content, mi, &b, param, plen)) == 0 && (rc = lt_buf_ok(&b)) == 0 &&
          !cJSON_ReplaceItemInObjectCaseSensitive(c, "content", cJSON_CreateString(b.data ? b.data : "")))
        rc = lt_error_set(LT_ENOMEM, "out of memory");
      lt_buf_free(&b);
    } else if (content && !cJSON_IsString(content) && !cJSON_IsNull(content)) {
      snprintf(param, plen, "messages[%d].content", mi);
      rc = lt_error_set(LT_EINVAL, "%s must be a string or a list of text parts", param);
    }
    const cJSON *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
    int ci = 0;
    for (const cJSON *tc = cJSON_IsArray(calls) ? calls->child : NULL; tc && rc == 0; tc = tc->next, ci++) {
      const cJSON *fn = cJSON_GetObjectItemCaseSensitive(tc, "function");
      const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name"),
                  *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
      snprintf(param, plen, "messages[%d].tool_calls[%d].function", mi, ci);
      if (!cJSON_IsString(name) || !(cJSON_IsString(args) || cJSON_IsObject(args)))
        rc = lt_error_set(LT_EINVAL, "%s needs a string 'name' and 'arguments' (JSON text)", param);
    }
    if (rc == 0 && calls && !cJSON_IsNull(calls) && !cJSON_IsArray(calls)) {
      snprintf(param, plen, "messages[%d].tool_calls", mi);
      rc = lt_error_set(LT_EINVAL, "%s must be a list", param);
    }
  }
  if (rc < 0) cJSON_Delete(norm);
  else *out = norm;
  return rc;
}

/* Fields accepted at their neutral values only: anything else would change
 * the answer in a way this server does not implement. */
static int neutral_only(const cJSON *body, char *param, size_t plen) {
  static const char *zero[] = {"presence_penalty", "frequency_penalty"};
  for (size_t i = 0; i < sizeof zero / sizeof *zero; i++) {
    const cJSON *v = lt__oai_field(body, zero[i]);
    if (v && !(cJSON_IsNumber(v) && v->valuedouble == 0)) {
      snprintf(param, plen, "%s", zero[i]);
      return lt_error_set(LT_EUNSUPP, "'%s' is not supported (only 0)", zero[i]);
    }
  }
  const cJSON *v = lt__oai_field(body, "logit_bias");
  if (v && !(cJSON_IsObject(v) && !v->child)) {
    snprintf(param, plen, "logit_bias");
    return lt_error_set(LT_EUNSUPP, "'logit_bias' is not supported");
  }
  v = lt__oai_field(body, "response_format");
  const cJSON *t = cJSON_GetObjectItemCaseSensitive(v, "type");
  if (v && !(cJSON_IsString(t) && !strcmp(t->valuestring, "text"))) {
    snprintf(param, plen, "response_format");
    return lt_error_set(LT_EUNSUPP, "'response_format' is not supported (only {\"type\": \"text\"})");
  }
  v = lt__oai_field(body, "parallel_tool_calls");
  if (v && !cJSON_IsTrue(v)) {
    snprintf(param, plen, "parallel_tool_calls");
    return lt_error_set(LT_EUNSUPP, "'parallel_tool_calls' is not supported (only true)");
  }
  v = lt__oai_field(body, "store");
  if (v && !cJSON_IsFalse(v)) {
    snprintf(param, plen, "store");
    return lt_error_set(LT_EUNSUPP, "'store' is not supported (only false)");
  }
  static const char *off[] = {"echo", "suffix"};
  for (size_t i = 0; i < sizeof off / sizeof *off; i++)
    if ((v = lt__oai_field(body, off[i])) && !cJSON_IsFalse(v)) {
      snprintf(param, plen, "%s", off[i]);
      return lt_error_set(LT_EUNSUPP, "'%s' is not supported", off[i]);
    }
  if ((v = lt__oai_field(body, "best_of")) && !(cJSON_IsNumber(v) && v->valuedouble == 1)) {
    snprintf(param, plen, "best_of");
    return lt_error_set(LT_EUNSUPP, "'best_of' is not supported (only 1)");
  }
  return 0;
}

static int parse_tools(lt__oai_call_t *k, char *param, size_t plen) {
  const cJSON *tools = lt__oai_field(k->plan.body, "tools"), *choice = lt__oai_field(k->plan.body, "tool_choice");
  snprintf(param, plen, "tools");
  if (tools && !cJSON_IsArray(tools)) return lt_error_set(LT_EINVAL, "'tools' must be a list");
  int ti = 0;
  for (const cJSON *t = tools ? tools->child : NULL; t; t = t->next, ti++) {
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(t, "type"),
                *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
    if (!cJSON_IsString(type) || strcmp(type->valuestring, "function") ||
        !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(fn, "name"))) {
      snprintf(param, plen, "tools[%d]", ti);
      return lt_error_set(LT_EINVAL, "%s must be {\"type\": \"function\", \"function\": {\"name\": ...}}", param);
    }
  }
  k->plan.tools = tools && tools->child ? tools : NULL;
  k->parse_tools = k->plan.tools != NULL;
  if (!choice) return 0;
  snprintf(param, plen, "tool_choice");
  if (cJSON_IsString(choice) && !strcmp(choice->valuestring, "none")) k->parse_tools = 0;
  else if (!cJSON_IsString(choice) || strcmp(choice->valuestring, "auto"))
    return lt_error_set(LT_EUNSUPP, "'tool_choice' may be \"auto\" or \"none\" (a forced call is not supported)");
  return 0;
}

/* Chat completions and completions: the plan from the body; on failure `param` names the field. */
static int openai_parse(lt__oai_call_t *k, char *param, size_t plen) {
  lt_oai_t *a = k->a;
  const cJSON *body = k->plan.body;
  int chat = k->plan.chat, rc;
  static const char *const common[] = {"model",
                                       "max_tokens",
                                       "temperature",
                                       "top_p",
                                       "top_k",
                                       "n",
                                       "stream",
                                       "stream_options",
                                       "stop",
                                       "seed",
                                       "logprobs",
                                       "user",
                                       "presence_penalty",
                                       "frequency_penalty",
                                       "logit_bias",
                                       "return_tokens_as_token_ids",
                                       "skip_special_tokens",
                                       NULL};
  static const char *const chat_only[] = {"messages",        "max_completion_tokens",
                                          "top_logprobs",    "tools",
                                          "tool_choice",     "parallel_tool_calls",
                                          "response_format", "store",
                                          "metadata",        NULL};
  static const char *const completion_only[] = {"prompt", "echo", "suffix", "best_of", NULL};
  if ((rc = lt__oai_known(body, common, chat ? chat_only : completion_only, param, plen)) < 0 ||
      (rc = neutral_only(body, param, plen)) < 0)
    return rc;
  double n, temp, top_p, top_k, maxt, seed, lp = 0, top = 0;
  const char *mk = chat && lt__oai_field(body, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  if ((rc = lt__oai_num(body, "n", 1, 1, LT_OAI_MAX_N, 1, &n, param, plen)) < 0 ||
      (rc = lt__oai_num(body, "temperature", 1, 0, 100, 0, &temp, param, plen)) < 0 ||
      (rc = lt__oai_num(body, "top_p", 1, 1e-9, 1, 0, &top_p, param, plen)) < 0 ||
      (rc = lt__oai_num(body, "top_k", 0, -1, 1 << 24, 1, &top_k, param, plen)) < 0 ||
      (rc = lt__oai_num(body, mk, -1, 1, 1 << 30, 1, &maxt, param, plen)) < 0 ||
      (rc = lt__oai_num(body, "seed", (double)(a->o.seed_base + a->ncalls), -9007199254740991.0, 9007199254740991.0, 1,
                        &seed, param, plen)) < 0)
    return rc;
  const cJSON *lpv = lt__oai_field(body, "logprobs");
  if (chat) {
    snprintf(param, plen, "logprobs");
    if (lpv && !cJSON_IsBool(lpv)) return lt_error_set(LT_EINVAL, "'logprobs' must be a boolean");
    k->logprobs = cJSON_IsTrue(lpv);
    if ((rc = lt__oai_num(body, "top_logprobs", 0, 0, LT_OAI_MAX_TOP_LOGPROBS, 1, &top, param, plen)) < 0) return rc;
    if (top > 0 && !k->logprobs) return lt_error_set(LT_EINVAL, "'top_logprobs' needs 'logprobs': true");
  } else {
    if ((rc = lt__oai_num(body, "logprobs", -1, 0, LT_OAI_MAX_TOP_LOGPROBS, 1, &lp, param, plen)) < 0) return rc;
    k->logprobs = lp >= 0;
    top = lp > 0 ? lp : 0;
  }
  const cJSON *st = lt__oai_field(body, "stream"), *so = lt__oai_field(body, "stream_options");
  snprintf(param, plen, "stream");
  if (st && !cJSON_IsBool(st)) return lt_error_set(LT_EINVAL, "'stream' must be a boolean");
  k->stream = cJSON_IsTrue(st);
  snprintf(param, plen, "stream_options");
  if (so && (!k->stream || !cJSON_IsObject(so)))
    return lt_error_set(LT_EINVAL, "'stream_options' is only allowed with 'stream': true, as an object");
  for (const cJSON *f = so ? so->child : NULL; f; f = f->next)
    if (strcmp(f->string, "include_usage") || !cJSON_IsBool(f)) {
      snprintf(param, plen, "stream_options.%s", f->string);
      return lt_error_set(LT_EUNSUPP, "'%s': only include_usage (a boolean) is supported", param);
    }
  k->include_usage = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(so, "include_usage"));
  k->token_ids = cJSON_IsTrue(lt__oai_field(body, "return_tokens_as_token_ids"));
  k->skip_special = cJSON_IsTrue(lt__oai_field(body, "skip_special_tokens"));
  if ((rc = lt__oai_stops(k, "stop", param, plen)) < 0) return rc;
  lt__oai_sampling(k, temp, top_p, top_k, maxt, seed);
  k->plan.n = (int)n;
  k->plan.top_logprobs = (int)top;
  /* the prompt */
  if (chat) {
    if ((rc = parse_tools(k, param, plen)) < 0) return rc;
    return normalize(lt__oai_field(body, "messages"), &k->messages, param, plen); /* the core renders them */
  }
  const cJSON *p = lt__oai_field(body, "prompt");
  snprintf(param, plen, "prompt");
  if (cJSON_IsArray(p) && cJSON_GetArraySize(p) == 1 && !cJSON_IsNumber(p->child)) p = p->child;
  if (cJSON_IsString(p)) return lt_ids_text(a->o.tok, p->valuestring, &k->ids, &k->nids, &k->cap);
  if (!cJSON_IsArray(p))
    return lt_error_set(LT_EINVAL, "'prompt' must be a string or a list of token ids (one prompt)");
  for (const cJSON *e = p->child; e; e = e->next) {
    if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble >= a->o.vocab ||
        floor(e->valuedouble) != e->valuedouble)
      return lt_error_set(LT_EINVAL, "'prompt' token ids must be integers in [0, %d)", a->o.vocab);
    if ((rc = lt_ids_push(&k->ids, &k->nids, &k->cap, (int32_t)e->valuedouble)) < 0) return rc;
  }
  return 0;
}

/* ---- answers ---- */

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
  for (const unsigned char *p = (const unsigned char *)raw; p && *p; p++)
    cJSON_AddItemToArray(bytes, cJSON_CreateNumber(*p));
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
  cJSON_AddStringToObject(o, "object",
                          k->plan.chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion");
  cJSON_AddNumberToObject(o, "created", k->created);
  cJSON_AddStringToObject(o, "model", k->a->model);
  cJSON_AddNumberToObject(o, "policy_version", (double)k->a->version);
  return o;
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
  return lt__oai_send_event(k, NULL, o);
}

/* Chat: each choice's first event, the assistant's role. */
static int openai_stream_begin(lt__oai_call_t *k) {
  int rc = 0;
  for (int i = 0; k->plan.chat && i < k->plan.n && rc == 0; i++) {
    k->gens[i].index = i;
    rc = send_chunk(k, &k->gens[i], "", 0, 1, NULL, 0, 0, NULL);
  }
  return rc;
}

static void openai_stream_error(lt__oai_call_t *k, int status, const char *param, const char *code, const char *msg) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddItemToObject(o, "error", lt__oai_error_json(status, param, code, msg));
  lt__oai_send_event(k, NULL, o);
}

static void openai_stream_text(lt__oai_call_t *k, lt_oai_gen_t *g, size_t end) {
  if (end == g->sent && !(k->logprobs && g->n > g->tok_sent)) return;
  send_chunk(k, g, g->text + g->sent, end - g->sent, 0, NULL, g->tok_sent, k->logprobs ? g->n : g->tok_sent, NULL);
  g->sent = end;
  g->tok_sent = g->n;
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
      if (g->tool_calls && lt__oai_blank(t, g->content_len)) cJSON_AddNullToObject(m, "content");
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

static void openai_stream_choice_end(lt__oai_call_t *k, lt_oai_gen_t *g) {
  size_t end = g->tool_calls ? g->content_len : g->tlen;
  int from = g->tok_sent;
  const char *text = g->text ? g->text + g->sent : "";
  size_t len = end > g->sent ? end - g->sent : 0;
  if (g->tool_calls && lt__oai_blank(text, len)) len = 0;
  cJSON *calls = g->tool_calls ? cJSON_Duplicate(g->tool_calls, 1) : NULL;
  if (len || calls || (k->logprobs && g->n > from))
    send_chunk(k, g, len ? text : NULL, len, 0, calls, from, k->logprobs ? g->n : from, NULL);
  g->sent = end;
  g->tok_sent = g->n;
  send_chunk(k, g, k->plan.chat ? NULL : "", 0, 0, NULL, 0, 0, g->finish);
}

/* Every choice ended: the JSON answer, or the stream's usage event and [DONE]. */
static void openai_answer(lt__oai_call_t *k) {
  if (!k->streaming) {
    answer_json(k);
    return;
  }
  if (k->include_usage) {
    cJSON *o = envelope(k, 1);
    cJSON_AddArrayToObject(o, "choices");
    cJSON_AddItemToObject(o, "usage", usage_json(k));
    lt__oai_send_event(k, NULL, o);
  }
  static const char done[] = "data: [DONE]\n\n";
  lt_http_stream_write(k->conn, done, sizeof done - 1);
}

const lt__oai_dialect_t lt__oai_openai = {.id_prefix = "chatcmpl-",
                                          .call_prefix = "call",
                                          .input = "messages",
                                          .parse = openai_parse,
                                          .stream_begin = openai_stream_begin,
                                          .stream_text = openai_stream_text,
                                          .stream_choice_end = openai_stream_choice_end,
                                          .answer = openai_answer,
                                          .error = lt__oai_error,
                                          .stream_error = openai_stream_error};
