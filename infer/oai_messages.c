/* Anthropic's Messages API (/v1/messages, /v1/messages/count_tokens), as Claude Code and the official SDKs speak
 * it: the request parser turns `system`, `messages` (text, tool_use and tool_result blocks) and `tools` into the
 * layer's chat plan; the writer answers with a `message` object, or its server-sent events (message_start,
 * content_block_start/delta/stop, message_delta, message_stop, ping), and errors in Anthropic's shape. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "infer/internal.h"
#include "util/buf.h"
#include "util/error.h"
#include "util/json.h"

/* ---- requests ---- */

/* The text of `content` (a string, or a list of text blocks joined by newlines) into out; `where` names it. */
static int anthropic_text(const cJSON *content, const char *where, lt_buf_t *out, char *param, size_t plen) {
  if (cJSON_IsString(content)) {
    lt_buf_puts(out, content->valuestring);
    return lt_buf_ok(out);
  }
  snprintf(param, plen, "%s", where);
  if (!cJSON_IsArray(content)) return lt_error_set(LT_EINVAL, "%s must be a string or a list of text blocks", where);
  int bi = 0;
  for (const cJSON *b = content->child; b; b = b->next, bi++) {
    const cJSON *type = lt__oai_field(b, "type"), *text = lt__oai_field(b, "text");
    if (!cJSON_IsString(type) || strcmp(type->valuestring, "text") || !cJSON_IsString(text)) {
      snprintf(param, plen, "%s[%d].type", where, bi);
      return lt_error_set(
          LT_EINVAL, "%s: only text blocks {\"type\": \"text\", \"text\": ...} are supported here (got %s)%s", param,
          cJSON_IsString(type) ? type->valuestring : "no type",
          cJSON_IsString(type) && (!strcmp(type->valuestring, "image") || !strcmp(type->valuestring, "document"))
              ? ": the policy reads text only"
              : "");
    }
    if (bi) lt_buf_puts(out, "\n");
    lt_buf_puts(out, text->valuestring);
  }
  return lt_buf_ok(out);
}

/* A message's user text so far becomes a user message (tool results between text blocks keep their order). */
static int anthropic_flush_user(lt__oai_call_t *k, lt_buf_t *text, int *have) {
  if (!*have) return 0;
  int rc = lt_buf_ok(text) == 0 && lt__oai_add_message(k, "user", text->data ? text->data : "")
               ? 0
               : lt_error_set(LT_ENOMEM, "out of memory");
  lt_buf_free(text);
  *have = 0;
  return rc;
}

/* messages[mi], a user's or the assistant's blocks, into OpenAI's chat messages: text blocks are the content,
 * tool_use blocks the assistant's tool_calls (their input object as the arguments), tool_result blocks tool
 * messages; thinking blocks are left out (the policy's reasoning comes back in its text). */
static int anthropic_blocks(lt__oai_call_t *k, int mi, int assistant, const cJSON *content, char *param, size_t plen) {
  lt_buf_t text = {0};
  int have = 0, bi = 0, rc = 0;
  cJSON *calls = NULL;
  for (const cJSON *b = content->child; b && rc == 0; b = b->next, bi++) {
    const cJSON *type = lt__oai_field(b, "type");
    const char *t = cJSON_IsString(type) ? type->valuestring : "";
    char where[96];
    snprintf(where, sizeof where, "messages[%d].content[%d]", mi, bi);
    snprintf(param, plen, "%s", where);
    if (!strcmp(t, "text")) {
      const cJSON *s = lt__oai_field(b, "text");
      if (!cJSON_IsString(s)) {
        rc = lt_error_set(LT_EINVAL, "%s: a text block needs a string 'text'", where);
        break;
      }
      if (have) lt_buf_puts(&text, "\n");
      lt_buf_puts(&text, s->valuestring);
      have = 1;
    } else if (assistant && !strcmp(t, "tool_use")) {
      const cJSON *id = lt__oai_field(b, "id"), *name = lt__oai_field(b, "name"), *input = lt__oai_field(b, "input");
      if (!cJSON_IsString(id) || !cJSON_IsString(name) || (input && !cJSON_IsObject(input))) {
        rc =
            lt_error_set(LT_EINVAL, "%s: a tool_use block needs a string 'id' and 'name' and an object 'input'", where);
        break;
      }
      cJSON *c = cJSON_CreateObject(), *fn = cJSON_AddObjectToObject(c, "function");
      if (!calls) calls = cJSON_CreateArray();
      if (!calls || !fn || !cJSON_AddItemToArray(calls, c) || !cJSON_AddStringToObject(c, "id", id->valuestring) ||
          !cJSON_AddStringToObject(c, "type", "function") || !cJSON_AddStringToObject(fn, "name", name->valuestring) ||
          !cJSON_AddItemToObject(fn, "arguments", input ? cJSON_Duplicate(input, 1) : cJSON_CreateObject()))
        rc = lt_error_set(LT_ENOMEM, "out of memory");
    } else if (!assistant && !strcmp(t, "tool_result")) {
      const cJSON *id = lt__oai_field(b, "tool_use_id"), *c = lt__oai_field(b, "content");
      lt_buf_t out = {0};
      char at[128];
      snprintf(at, sizeof at, "%s.content", where);
      if (!cJSON_IsString(id)) {
        rc = lt_error_set(LT_EINVAL, "%s: a tool_result block needs a string 'tool_use_id'", where);
      } else if ((rc = anthropic_flush_user(k, &text, &have)) == 0 &&
                 (!c || (rc = anthropic_text(c, at, &out, param, plen)) == 0)) {
        cJSON *m = lt__oai_add_message(k, "tool", out.data ? out.data : "");
        if (!m || !cJSON_AddStringToObject(m, "tool_call_id", id->valuestring))
          rc = lt_error_set(LT_ENOMEM, "out of memory");
      }
      lt_buf_free(&out);
    } else if (!(assistant && (!strcmp(t, "thinking") || !strcmp(t, "redacted_thinking")))) {
      snprintf(param, plen, "%s.type", where);
      rc = lt_error_set(LT_EINVAL, "%s: '%s' blocks are not supported in %s messages%s", param, t[0] ? t : "untyped",
                        assistant ? "assistant" : "user",
                        !strcmp(t, "image") || !strcmp(t, "document") ? " (the policy reads text only)" : "");
    }
  }
  if (rc == 0 && assistant) {
    cJSON *m = lt_buf_ok(&text) == 0 ? lt__oai_add_message(k, "assistant", text.data ? text.data : "") : NULL;
    if (!m || (calls && !cJSON_AddItemToObject(m, "tool_calls", calls))) rc = lt_error_set(LT_ENOMEM, "out of memory");
    else calls = NULL;
  } else if (rc == 0 && (have || !content->child)) {
    have = 1;
    rc = anthropic_flush_user(k, &text, &have);
  }
  cJSON_Delete(calls);
  lt_buf_free(&text);
  return rc;
}

static int anthropic_messages(lt__oai_call_t *k, char *param, size_t plen) {
  const cJSON *body = k->plan.body, *sys = lt__oai_field(body, "system"), *msgs = lt__oai_field(body, "messages");
  int rc = 0;
  if (sys) {
    lt_buf_t b = {0};
    if ((rc = anthropic_text(sys, "system", &b, param, plen)) == 0 &&
        !lt__oai_add_message(k, "system", b.data ? b.data : ""))
      rc = lt_error_set(LT_ENOMEM, "out of memory");
    lt_buf_free(&b);
    if (rc < 0) return rc;
  }
  snprintf(param, plen, "messages");
  if (!cJSON_IsArray(msgs) || !msgs->child) return lt_error_set(LT_EINVAL, "'messages' must be a non-empty list");
  int mi = 0;
  for (const cJSON *m = msgs->child; m; m = m->next, mi++) {
    const cJSON *role = lt__oai_field(m, "role"), *content = lt__oai_field(m, "content");
    const char *r = cJSON_IsString(role) ? role->valuestring : "";
    char where[64];
    snprintf(where, sizeof where, "messages[%d].content", mi);
    snprintf(param, plen, "messages[%d].role", mi);
    if (strcmp(r, "user") && strcmp(r, "assistant") && strcmp(r, "system"))
      return lt_error_set(LT_EINVAL, "%s must be \"user\", \"assistant\" or \"system\"", param);
    if (!strcmp(r, "assistant") && !m->next)
      return lt_error_set(LT_EINVAL, "%s: a last assistant message (a prefill to continue) is not supported", param);
    snprintf(param, plen, "%s", where);
    if (!cJSON_IsString(content) && !cJSON_IsArray(content))
      return lt_error_set(LT_EINVAL, "%s must be a string or a list of content blocks", where);
    if (!strcmp(r, "system") || cJSON_IsString(content)) { /* a system entry inside messages is system text, in place */
      lt_buf_t b = {0};
      if ((rc = anthropic_text(content, where, &b, param, plen)) == 0 &&
          !lt__oai_add_message(k, r, b.data ? b.data : ""))
        rc = lt_error_set(LT_ENOMEM, "out of memory");
      lt_buf_free(&b);
    } else {
      rc = anthropic_blocks(k, mi, !strcmp(r, "assistant"), content, param, plen);
    }
    if (rc < 0) return rc;
  }
  return 0;
}

/* tools (custom tools: name, description, input_schema) as function tools; tool_choice; thinking. */
static int anthropic_options(lt__oai_call_t *k, char *param, size_t plen) {
  const cJSON *body = k->plan.body, *choice = lt__oai_field(body, "tool_choice");
  int rc = lt__oai_flat_tools(k, "/v1/messages", "custom", 1, "input_schema", 1, param, plen);
  if (rc < 0) return rc;
  snprintf(param, plen, "tool_choice");
  const cJSON *ct = lt__oai_field(choice, "type");
  const char *c = cJSON_IsString(ct) ? ct->valuestring : "";
  if (choice && strcmp(c, "auto") && strcmp(c, "any") && strcmp(c, "tool") && strcmp(c, "none"))
    return lt_error_set(LT_EINVAL, "'tool_choice' must be {\"type\": \"auto\" | \"any\" | \"tool\" | \"none\"}");
  if (!strcmp(c, "none")) k->parse_tools = 0; /* any and tool: the policy is not forced, it calls what it writes */
  const cJSON *th = lt__oai_field(body, "thinking"), *tt = lt__oai_field(th, "type");
  const char *t = cJSON_IsString(tt) ? tt->valuestring : "";
  snprintf(param, plen, "thinking");
  if (th && strcmp(t, "enabled") && strcmp(t, "adaptive") && strcmp(t, "disabled"))
    return lt_error_set(LT_EINVAL, "'thinking' must be {\"type\": \"enabled\" | \"adaptive\" | \"disabled\"}");
  if (th) k->thinking = strcmp(t, "disabled") != 0; /* the template's switch (Qwen3's enable_thinking) */
  return 0;
}

static int anthropic_parse(lt__oai_call_t *k, char *param, size_t plen) {
  const cJSON *body = k->plan.body;
  /* Accepted with no effect: what the policy cannot honour (prompt caching, context editing, effort). */
  static const char *const common[] = {"model",    "messages",           "system",        "tools", "tool_choice",
                                       "thinking", "context_management", "output_config", NULL};
  static const char *const create[] = {"max_tokens", "metadata", "stop_sequences", "stream", "temperature",
                                       "top_p",      "top_k",    "service_tier",   NULL};
  int rc;
  if ((rc = lt__oai_known(body, common, k->count_only ? NULL : create, param, plen)) < 0 ||
      (rc = anthropic_options(k, param, plen)) < 0 || (rc = anthropic_messages(k, param, plen)) < 0)
    return rc;
  if (k->count_only) return 0;
  double temp, top_p, top_k, maxt;
  snprintf(param, plen, "max_tokens");
  if (!lt__oai_field(body, "max_tokens")) return lt_error_set(LT_EINVAL, "'max_tokens' is required");
  if ((rc = lt__oai_num(body, "max_tokens", -1, 1, 1 << 30, 1, &maxt, param, plen)) < 0 ||
      (rc = lt__oai_num(body, "temperature", 1, 0, 1, 0, &temp, param, plen)) < 0 ||
      (rc = lt__oai_num(body, "top_p", 1, 1e-9, 1, 0, &top_p, param, plen)) < 0 ||
      (rc = lt__oai_num(body, "top_k", 0, 0, 1 << 24, 1, &top_k, param, plen)) < 0 ||
      (rc = lt__oai_bool(body, "stream", &k->stream, param, plen)) < 0)
    return rc;
  snprintf(param, plen, "stop_sequences");
  const cJSON *stops = lt__oai_field(body, "stop_sequences");
  if (stops && !cJSON_IsArray(stops)) return lt_error_set(LT_EINVAL, "'stop_sequences' must be a list of strings");
  if ((rc = lt__oai_stops(k, "stop_sequences", param, plen)) < 0) return rc;
  lt__oai_sampling(k, temp, top_p, top_k, maxt, (double)(k->a->o.seed_base + k->a->ncalls));
  return 0;
}

/* ---- answers ---- */

static const char *anthropic_stop_reason(const lt__oai_call_t *k, const lt_oai_gen_t *g) {
  if (g->tool_calls) return "tool_use";
  if (g->cut && k->nstops) return "stop_sequence";
  return !strcmp(g->finish, "length") ? "max_tokens" : "end_turn";
}

/* The length of the text block's text: 0 when the answer has none (no text, or only white space before tool calls). */
static size_t anthropic_content(const lt_oai_gen_t *g) {
  size_t n = g->tool_calls ? g->content_len : g->tlen;
  return n && !(g->tool_calls && lt__oai_blank(g->text, n)) ? n : 0;
}

/* A tool_use block as it ends: its input is the call's arguments, parsed. */
static cJSON *anthropic_tool_use(const cJSON *call, int with_input) {
  const cJSON *fn = cJSON_GetObjectItemCaseSensitive(call, "function");
  cJSON *b = cJSON_CreateObject();
  cJSON_AddStringToObject(b, "type", "tool_use");
  cJSON_AddStringToObject(b, "id", cJSON_GetObjectItemCaseSensitive(call, "id")->valuestring);
  cJSON_AddStringToObject(b, "name", cJSON_GetObjectItemCaseSensitive(fn, "name")->valuestring);
  cJSON *input = with_input ? cJSON_Parse(cJSON_GetObjectItemCaseSensitive(fn, "arguments")->valuestring) : NULL;
  cJSON_AddItemToObject(b, "input", cJSON_IsObject(input) ? input : (cJSON_Delete(input), cJSON_CreateObject()));
  return b;
}

static cJSON *anthropic_message(const lt__oai_call_t *k, cJSON *content, const char *stop_reason,
                                const char *stop_sequence, int output_tokens) {
  cJSON *o = cJSON_CreateObject(), *u;
  cJSON_AddStringToObject(o, "id", k->id);
  cJSON_AddStringToObject(o, "type", "message");
  cJSON_AddStringToObject(o, "role", "assistant");
  cJSON_AddStringToObject(o, "model", k->a->model);
  cJSON_AddItemToObject(o, "content", content);
  if (stop_reason) cJSON_AddStringToObject(o, "stop_reason", stop_reason);
  else cJSON_AddNullToObject(o, "stop_reason");
  if (stop_sequence) cJSON_AddStringToObject(o, "stop_sequence", stop_sequence);
  else cJSON_AddNullToObject(o, "stop_sequence");
  u = cJSON_AddObjectToObject(o, "usage");
  cJSON_AddNumberToObject(u, "input_tokens", k->plan.nprompt);
  cJSON_AddNumberToObject(u, "output_tokens", output_tokens);
  cJSON_AddNumberToObject(u, "cache_creation_input_tokens", 0);
  cJSON_AddNumberToObject(u, "cache_read_input_tokens", 0);
  cJSON_AddNumberToObject(o, "policy_version", (double)k->a->version);
  return o;
}

static const char *anthropic_stop_sequence(const lt__oai_call_t *k, const lt_oai_gen_t *g) {
  return !g->tool_calls && g->cut && k->nstops ? k->stops[g->stop_index] : NULL;
}

static int anthropic_stream_begin(lt__oai_call_t *k) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "type", "message_start");
  cJSON_AddItemToObject(o, "message", anthropic_message(k, cJSON_CreateArray(), NULL, NULL, 0));
  int rc = lt__oai_send_event(k, "message_start", o);
  if (rc == 0) {
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "type", "ping");
    rc = lt__oai_send_event(k, "ping", p);
  }
  return rc;
}

static void anthropic_block_event(lt__oai_call_t *k, const char *type, int index, const char *key, cJSON *v) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "type", type);
  cJSON_AddNumberToObject(o, "index", index);
  if (key) cJSON_AddItemToObject(o, key, v);
  lt__oai_send_event(k, type, o);
}

static void anthropic_delta(lt__oai_call_t *k, int index, const char *type, const char *key, const char *s, size_t n) {
  cJSON *d = cJSON_CreateObject();
  char *t = strndup(s, n);
  cJSON_AddStringToObject(d, "type", type);
  cJSON_AddStringToObject(d, key, t ? t : "");
  free(t);
  anthropic_block_event(k, "content_block_delta", index, "delta", d);
}

/* Text block 0: opened at its first text. */
static void anthropic_stream_text(lt__oai_call_t *k, lt_oai_gen_t *g, size_t end) {
  if (end > g->sent) {
    if (!g->text_open) {
      cJSON *b = cJSON_CreateObject();
      cJSON_AddStringToObject(b, "type", "text");
      cJSON_AddStringToObject(b, "text", "");
      anthropic_block_event(k, "content_block_start", 0, "content_block", b);
      g->text_open = 1;
    }
    anthropic_delta(k, 0, "text_delta", "text", g->text + g->sent, end - g->sent);
  }
  g->sent = end > g->sent ? end : g->sent;
  g->tok_sent = g->n;
}

static void anthropic_stream_choice_end(lt__oai_call_t *k, lt_oai_gen_t *g) {
  size_t n = anthropic_content(g);
  if (n) anthropic_stream_text(k, g, n);
  if (g->text_open) anthropic_block_event(k, "content_block_stop", 0, NULL, NULL);
  int index = g->text_open;
  for (const cJSON *c = g->tool_calls ? g->tool_calls->child : NULL; c; c = c->next, index++) {
    anthropic_block_event(k, "content_block_start", index, "content_block", anthropic_tool_use(c, 0));
    const char *args =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c, "function"), "arguments")->valuestring;
    anthropic_delta(k, index, "input_json_delta", "partial_json", args, strlen(args));
    anthropic_block_event(k, "content_block_stop", index, NULL, NULL);
  }
}

static void anthropic_answer(lt__oai_call_t *k) {
  lt_oai_gen_t *g = &k->gens[0];
  const char *reason = anthropic_stop_reason(k, g), *seq = anthropic_stop_sequence(k, g);
  if (k->streaming) {
    cJSON *o = cJSON_CreateObject(), *d, *u;
    cJSON_AddStringToObject(o, "type", "message_delta");
    d = cJSON_AddObjectToObject(o, "delta");
    cJSON_AddStringToObject(d, "stop_reason", reason);
    if (seq) cJSON_AddStringToObject(d, "stop_sequence", seq);
    else cJSON_AddNullToObject(d, "stop_sequence");
    u = cJSON_AddObjectToObject(o, "usage");
    cJSON_AddNumberToObject(u, "input_tokens", k->plan.nprompt);
    cJSON_AddNumberToObject(u, "output_tokens", g->n);
    lt__oai_send_event(k, "message_delta", o);
    o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", "message_stop");
    lt__oai_send_event(k, "message_stop", o);
    return;
  }
  cJSON *content = cJSON_CreateArray();
  size_t n = anthropic_content(g);
  char *text = n ? strndup(g->text, n) : NULL;
  if (text) {
    cJSON *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "type", "text");
    cJSON_AddStringToObject(b, "text", text);
    cJSON_AddItemToArray(content, b);
  }
  free(text);
  for (const cJSON *c = g->tool_calls ? g->tool_calls->child : NULL; c; c = c->next)
    cJSON_AddItemToArray(content, anthropic_tool_use(c, 1));
  lt__oai_send_json(k->conn, 200, anthropic_message(k, content, reason, seq, g->n));
}

/* {"type": "error", "error": {"type", "message"}}: Anthropic's error types by status; the field a 400 is about
 * leads the message (Anthropic's errors have no "param"). */
static cJSON *anthropic_error_json(int status, const char *param, const char *code, const char *msg) {
  const char *type = status == 401   ? "authentication_error"
                     : status == 403 ? "permission_error"
                     : status == 404 ? "not_found_error"
                     : status == 413 ? "request_too_large"
                     : status == 429 ? "rate_limit_error"
                     : status == 503 ? "overloaded_error"
                     : status >= 500 ? "api_error"
                                     : "invalid_request_error";
  char text[1200];
  /* The context-full sentence goes bare, as Anthropic's: Claude Code compacts on ^prompt is too long: N tokens >
   * M maximum$. */
  if (param && !strstr(msg, param) && !(code && !strcmp(code, "context_length_exceeded")))
    snprintf(text, sizeof text, "%s: %s", param, msg);
  else snprintf(text, sizeof text, "%s", msg);
  cJSON *o = cJSON_CreateObject(), *e;
  cJSON_AddStringToObject(o, "type", "error");
  e = cJSON_AddObjectToObject(o, "error");
  cJSON_AddStringToObject(e, "type", type);
  cJSON_AddStringToObject(e, "message", text);
  return o;
}

static void anthropic_error(lt_http_conn_t *c, int status, const char *param, const char *code, const char *msg) {
  lt__oai_send_json(c, status, anthropic_error_json(status, param, code, msg));
}

static void anthropic_stream_error(lt__oai_call_t *k, int status, const char *param, const char *code,
                                   const char *msg) {
  lt__oai_send_event(k, "error", anthropic_error_json(status, param, code, msg));
}

/* Anthropic's words, on which Claude Code compacts its history. */
static void anthropic_too_long(char *msg, size_t n, int need, int max) {
  snprintf(msg, n, "prompt is too long: %d tokens > %d maximum", need, max);
}

const lt__oai_dialect_t lt__oai_messages = {.id_prefix = "msg_",
                                            .call_prefix = "toolu",
                                            .input = "messages",
                                            .too_long = anthropic_too_long,
                                            .parse = anthropic_parse,
                                            .stream_begin = anthropic_stream_begin,
                                            .stream_text = anthropic_stream_text,
                                            .stream_choice_end = anthropic_stream_choice_end,
                                            .answer = anthropic_answer,
                                            .error = anthropic_error,
                                            .stream_error = anthropic_stream_error};
