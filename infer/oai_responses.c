/* OpenAI's Responses API (/v1/responses), stateless (`store: false`), as Codex CLI and the official SDKs speak it:
 * the request parser turns `instructions` and `input` (messages, function_call and function_call_output items) and
 * the function tools into the layer's chat plan; the writer answers with a `response` object whose output holds a
 * `message` (output_text) and `function_call` items, or its server-sent events (response.created ...
 * response.completed), each with its sequence_number. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "infer/internal.h"
#include "util/buf.h"
#include "util/error.h"
#include "util/json.h"

/* ---- requests ---- */

/* A message's or a function_call_output's content: a string, or a list of text parts (input_text, output_text,
 * refusal) joined by newlines; `where` names it. */
static int responses_text(const cJSON *content, const char *where, lt_buf_t *out, char *param, size_t plen) {
  snprintf(param, plen, "%s", where);
  if (cJSON_IsString(content)) {
    lt_buf_puts(out, content->valuestring);
    return lt_buf_ok(out);
  }
  if (!cJSON_IsArray(content)) return lt_error_set(LT_EINVAL, "%s must be a string or a list of text parts", where);
  int pi = 0;
  for (const cJSON *p = content->child; p; p = p->next, pi++) {
    const cJSON *type = lt__oai_field(p, "type");
    const char *t = cJSON_IsString(type) ? type->valuestring : "";
    const cJSON *text = lt__oai_field(p, !strcmp(t, "refusal") ? "refusal" : "text");
    if (strcmp(t, "input_text") && strcmp(t, "output_text") && strcmp(t, "refusal")) {
      snprintf(param, plen, "%s[%d].type", where, pi);
      return lt_error_set(LT_EINVAL, "%s: '%s' parts are not supported (text parts only%s)", param,
                          t[0] ? t : "untyped", strncmp(t, "input_", 6) ? "" : ": the policy reads text only");
    }
    if (!cJSON_IsString(text)) {
      snprintf(param, plen, "%s[%d]", where, pi);
      return lt_error_set(LT_EINVAL, "%s: a %s part needs its text as a string", param, t);
    }
    if (pi) lt_buf_puts(out, "\n");
    lt_buf_puts(out, text->valuestring);
  }
  return lt_buf_ok(out);
}

static int responses_message(lt__oai_call_t *k, const char *role, const cJSON *content, const char *where, char *param,
                             size_t plen) {
  lt_buf_t b = {0};
  int rc = responses_text(content, where, &b, param, plen);
  if (rc == 0 && !lt__oai_add_message(k, role, b.data ? b.data : "")) rc = lt_error_set(LT_ENOMEM, "out of memory");
  lt_buf_free(&b);
  return rc;
}

/* A function_call item: a call of the assistant message it follows (the calls of one answer come one after
 * another), else of a new assistant message. */
static int responses_call(lt__oai_call_t *k, const cJSON *item, int follows_assistant, const char *where) {
  const cJSON *id = lt__oai_field(item, "call_id"), *name = lt__oai_field(item, "name"),
              *args = lt__oai_field(item, "arguments");
  if (!cJSON_IsString(id) || !cJSON_IsString(name) || !cJSON_IsString(args))
    return lt_error_set(LT_EINVAL, "%s: a function_call item needs string 'call_id', 'name' and 'arguments'", where);
  cJSON *m = follows_assistant ? cJSON_GetArrayItem(k->messages, cJSON_GetArraySize(k->messages) - 1)
                               : lt__oai_add_message(k, "assistant", "");
  cJSON *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
  if (m && !calls) calls = cJSON_AddArrayToObject(m, "tool_calls");
  cJSON *c = cJSON_CreateObject(), *fn = cJSON_AddObjectToObject(c, "function");
  if (!calls || !fn || !cJSON_AddItemToArray(calls, c) || !cJSON_AddStringToObject(c, "id", id->valuestring) ||
      !cJSON_AddStringToObject(c, "type", "function") || !cJSON_AddStringToObject(fn, "name", name->valuestring) ||
      !cJSON_AddStringToObject(fn, "arguments", args->valuestring))
    return lt_error_set(LT_ENOMEM, "out of memory");
  return 0;
}

/* instructions, then input (a string, or items) as OpenAI's chat messages. */
static int responses_input(lt__oai_call_t *k, char *param, size_t plen) {
  const cJSON *body = k->plan.body, *ins = lt__oai_field(body, "instructions"), *input = lt__oai_field(body, "input");
  int rc;
  snprintf(param, plen, "instructions");
  if (ins && !cJSON_IsString(ins)) return lt_error_set(LT_EINVAL, "'instructions' must be a string");
  if (ins && !lt__oai_add_message(k, "system", ins->valuestring)) return lt_error_set(LT_ENOMEM, "out of memory");
  snprintf(param, plen, "input");
  if (cJSON_IsString(input))
    return lt__oai_add_message(k, "user", input->valuestring) ? 0 : lt_error_set(LT_ENOMEM, "out of memory");
  if (!cJSON_IsArray(input) || !input->child)
    return lt_error_set(LT_EINVAL, "'input' must be a string or a non-empty list of items");
  int ii = 0, after_assistant = 0; /* the last item was the assistant's (its message or one of its calls) */
  for (const cJSON *it = input->child; it; it = it->next, ii++) {
    const cJSON *type = lt__oai_field(it, "type"), *role = lt__oai_field(it, "role");
    const char *t = cJSON_IsString(type) ? type->valuestring : type ? "" : "message";
    char where[64];
    snprintf(where, sizeof where, "input[%d]", ii);
    snprintf(param, plen, "%s", where);
    if (!cJSON_IsObject(it)) return lt_error_set(LT_EINVAL, "%s must be an item object", where);
    if (!strcmp(t, "message")) {
      const char *r = cJSON_IsString(role) ? role->valuestring : "";
      char at[80];
      snprintf(at, sizeof at, "%s.content", where);
      snprintf(param, plen, "%s.role", where);
      if (strcmp(r, "user") && strcmp(r, "assistant") && strcmp(r, "system") && strcmp(r, "developer"))
        return lt_error_set(LT_EINVAL, "%s must be \"user\", \"assistant\", \"system\" or \"developer\"", param);
      rc = responses_message(k, !strcmp(r, "developer") ? "system" : r, lt__oai_field(it, "content"), at, param, plen);
      after_assistant = !strcmp(r, "assistant");
    } else if (!strcmp(t, "function_call")) {
      rc = responses_call(k, it, after_assistant, where);
      after_assistant = 1;
    } else if (!strcmp(t, "function_call_output")) {
      const cJSON *id = lt__oai_field(it, "call_id");
      char at[80];
      snprintf(at, sizeof at, "%s.output", where);
      if (!cJSON_IsString(id))
        return lt_error_set(LT_EINVAL, "%s: a function_call_output item needs a string 'call_id'", where);
      if ((rc = responses_message(k, "tool", lt__oai_field(it, "output"), at, param, plen)) == 0 &&
          !cJSON_AddStringToObject(cJSON_GetArrayItem(k->messages, cJSON_GetArraySize(k->messages) - 1), "tool_call_id",
                                   id->valuestring))
        rc = lt_error_set(LT_ENOMEM, "out of memory");
      after_assistant = 0;
    } else if (!strcmp(t, "reasoning")) { /* echoed back by the program; the policy's reasoning is in its text */
      continue;
    } else {
      snprintf(param, plen, "%s.type", where);
      return lt_error_set(LT_EINVAL,
                          "%s: '%s' items are not supported (message, function_call, function_call_output and "
                          "reasoning are)",
                          param, t[0] ? t : "untyped");
    }
    if (rc < 0) return rc;
  }
  return 0;
}

/* Function tools (flat: name, description, parameters) as OpenAI's chat tools; other tool types are skipped. */
static int responses_tools(lt__oai_call_t *k, char *param, size_t plen) {
  const cJSON *choice = lt__oai_field(k->plan.body, "tool_choice");
  int rc = lt__oai_flat_tools(k, "/v1/responses", "function", 0, "parameters", 0, param, plen);
  if (rc < 0) return rc;
  snprintf(param, plen, "tool_choice");
  if (choice && !cJSON_IsString(choice) && !cJSON_IsObject(choice))
    return lt_error_set(LT_EINVAL, "'tool_choice' must be \"auto\", \"none\", \"required\" or an object");
  if (cJSON_IsString(choice) && strcmp(choice->valuestring, "auto") && strcmp(choice->valuestring, "none") &&
      strcmp(choice->valuestring, "required"))
    return lt_error_set(LT_EINVAL, "'tool_choice' must be \"auto\", \"none\", \"required\" or an object");
  if (cJSON_IsString(choice) && !strcmp(choice->valuestring, "none")) k->parse_tools = 0; /* else not forced */
  return 0;
}

/* What a stateless server that generates text cannot do is refused by name; what changes nothing is accepted. */
static int responses_options(lt__oai_call_t *k, char *param, size_t plen) {
  const cJSON *body = k->plan.body, *v;
  int flag, rc;
  if ((v = lt__oai_field(body, "previous_response_id"))) {
    snprintf(param, plen, "previous_response_id");
    return lt_error_set(LT_EUNSUPP,
                        "'previous_response_id' is not supported: this server stores no responses (as with "
                        "store: false); send the whole conversation in 'input'");
  }
  if ((rc = lt__oai_bool(body, "background", &flag, param, plen)) < 0) return rc;
  if (flag) return lt_error_set(LT_EUNSUPP, "'background' is not supported (only false)");
  static const char *const bools[] = {"store", "parallel_tool_calls"};
  for (size_t i = 0; i < sizeof bools / sizeof *bools; i++)
    if ((rc = lt__oai_bool(body, bools[i], &flag, param, plen)) < 0) return rc;
  v = lt__oai_field(body, "include");
  snprintf(param, plen, "include");
  for (const cJSON *s = cJSON_IsArray(v) ? v->child : NULL; s; s = s->next)
    if (!cJSON_IsString(s)) return lt_error_set(LT_EINVAL, "'include' must be a list of strings");
  if (v && !cJSON_IsArray(v)) return lt_error_set(LT_EINVAL, "'include' must be a list of strings");
  v = lt__oai_field(body, "text");
  const cJSON *fmt = lt__oai_field(v, "format"), *ft = lt__oai_field(fmt, "type");
  snprintf(param, plen, "text.format");
  if ((v && !cJSON_IsObject(v)) || (fmt && !(cJSON_IsString(ft) && !strcmp(ft->valuestring, "text"))))
    return lt_error_set(LT_EUNSUPP, "'text.format' is not supported (only {\"type\": \"text\"})");
  v = lt__oai_field(body, "truncation");
  snprintf(param, plen, "truncation");
  if (v && !(cJSON_IsString(v) && !strcmp(v->valuestring, "disabled")))
    return lt_error_set(LT_EUNSUPP, "'truncation' is not supported (only \"disabled\")");
  const cJSON *effort = lt__oai_field(lt__oai_field(body, "reasoning"), "effort");
  if (cJSON_IsString(effort)) k->thinking = strcmp(effort->valuestring, "none") != 0; /* the template's switch */
  return 0;
}

static int responses_parse(lt__oai_call_t *k, char *param, size_t plen) {
  const cJSON *body = k->plan.body;
  /* metadata, user, safety_identifier, prompt_cache_key, service_tier, client_metadata (Codex), stream_options,
   * include and reasoning's summary are accepted with no effect: nothing is stored, cached or summarized. */
  static const char *const known[] = {"model",
                                      "input",
                                      "instructions",
                                      "tools",
                                      "tool_choice",
                                      "parallel_tool_calls",
                                      "max_output_tokens",
                                      "temperature",
                                      "top_p",
                                      "stream",
                                      "store",
                                      "include",
                                      "reasoning",
                                      "text",
                                      "truncation",
                                      "previous_response_id",
                                      "background",
                                      "metadata",
                                      "user",
                                      "safety_identifier",
                                      "prompt_cache_key",
                                      "service_tier",
                                      "client_metadata",
                                      "stream_options",
                                      NULL};
  double temp, top_p, maxt;
  int rc;
  if ((rc = lt__oai_known(body, known, NULL, param, plen)) < 0 || (rc = responses_options(k, param, plen)) < 0 ||
      (rc = responses_tools(k, param, plen)) < 0 || (rc = responses_input(k, param, plen)) < 0 ||
      (rc = lt__oai_num(body, "max_output_tokens", -1, 1, 1 << 30, 1, &maxt, param, plen)) < 0 ||
      (rc = lt__oai_num(body, "temperature", 1, 0, 2, 0, &temp, param, plen)) < 0 ||
      (rc = lt__oai_num(body, "top_p", 1, 1e-9, 1, 0, &top_p, param, plen)) < 0 ||
      (rc = lt__oai_bool(body, "stream", &k->stream, param, plen)) < 0)
    return rc;
  lt__oai_sampling(k, temp, top_p, 0, maxt, (double)(k->a->o.seed_base + k->a->ncalls));
  return 0;
}

/* ---- answers ---- */

/* The message item's text length, and whether there is one: not when only white space precedes tool calls. */
static int responses_has_message(const lt_oai_gen_t *g, size_t *len) {
  *len = g->tool_calls ? g->content_len : g->tlen;
  return !g->tool_calls || !lt__oai_blank(g->text, *len);
}

static cJSON *responses_text_part(const char *text, size_t n) {
  cJSON *p = cJSON_CreateObject();
  char *t = strndup(text ? text : "", n);
  cJSON_AddStringToObject(p, "type", "output_text");
  cJSON_AddStringToObject(p, "text", t ? t : "");
  cJSON_AddArrayToObject(p, "annotations");
  cJSON_AddArrayToObject(p, "logprobs");
  free(t);
  return p;
}

static void responses_item_id(const lt__oai_call_t *k, const char *kind, int i, char *out, size_t n) {
  snprintf(out, n, "%s_%s_%d", kind, k->id, i);
}

/* The message item, its text [0, n) (or no content while it is being streamed: n == (size_t)-1). */
static cJSON *responses_message_item(const lt__oai_call_t *k, const lt_oai_gen_t *g, size_t n) {
  cJSON *it = cJSON_CreateObject(), *content;
  char id[96];
  responses_item_id(k, "msg", 0, id, sizeof id);
  cJSON_AddStringToObject(it, "id", id);
  cJSON_AddStringToObject(it, "type", "message");
  cJSON_AddStringToObject(it, "status", n == (size_t)-1 ? "in_progress" : "completed");
  cJSON_AddStringToObject(it, "role", "assistant");
  content = cJSON_AddArrayToObject(it, "content");
  if (n != (size_t)-1) cJSON_AddItemToArray(content, responses_text_part(g->text, n));
  return it;
}

/* The function_call item of call c (OpenAI's chat shape), its arguments empty while they are being streamed. */
static cJSON *responses_call_item(const lt__oai_call_t *k, const cJSON *c, int i, int done) {
  const cJSON *fn = cJSON_GetObjectItemCaseSensitive(c, "function");
  cJSON *it = cJSON_CreateObject();
  char id[96];
  responses_item_id(k, "fc", i, id, sizeof id);
  cJSON_AddStringToObject(it, "id", id);
  cJSON_AddStringToObject(it, "type", "function_call");
  cJSON_AddStringToObject(it, "status", done ? "completed" : "in_progress");
  cJSON_AddStringToObject(it, "call_id", cJSON_GetObjectItemCaseSensitive(c, "id")->valuestring);
  cJSON_AddStringToObject(it, "name", cJSON_GetObjectItemCaseSensitive(fn, "name")->valuestring);
  cJSON_AddStringToObject(it, "arguments", done ? cJSON_GetObjectItemCaseSensitive(fn, "arguments")->valuestring : "");
  return it;
}

/* The response object: status "in_progress" with no output and usage yet, or the answer of choice 0. */
static cJSON *responses_object(const lt__oai_call_t *k, const char *status, const char *error_code,
                               const char *error_msg) {
  const cJSON *body = k->plan.body;
  const lt_oai_gen_t *g = &k->gens[0];
  int done = !strcmp(status, "completed") || !strcmp(status, "incomplete");
  cJSON *o = cJSON_CreateObject(), *out, *v;
  cJSON_AddStringToObject(o, "id", k->id);
  cJSON_AddStringToObject(o, "object", "response");
  cJSON_AddNumberToObject(o, "created_at", k->created);
  cJSON_AddStringToObject(o, "status", status);
  if (error_msg) {
    cJSON *e = cJSON_AddObjectToObject(o, "error");
    cJSON_AddStringToObject(e, "code", error_code ? error_code : "server_error");
    cJSON_AddStringToObject(e, "message", error_msg);
  } else {
    cJSON_AddNullToObject(o, "error");
  }
  if (!strcmp(status, "incomplete"))
    cJSON_AddStringToObject(cJSON_AddObjectToObject(o, "incomplete_details"), "reason", "max_output_tokens");
  else cJSON_AddNullToObject(o, "incomplete_details");
  v = (cJSON *)lt__oai_field(body, "instructions");
  cJSON_AddItemToObject(o, "instructions", v ? cJSON_Duplicate(v, 1) : cJSON_CreateNull());
  if (k->plan.requested_max > 0) cJSON_AddNumberToObject(o, "max_output_tokens", k->plan.requested_max);
  else cJSON_AddNullToObject(o, "max_output_tokens");
  cJSON_AddStringToObject(o, "model", k->a->model);
  out = cJSON_AddArrayToObject(o, "output");
  size_t n;
  if (done && responses_has_message(g, &n)) cJSON_AddItemToArray(out, responses_message_item(k, g, n));
  int i = 0;
  for (const cJSON *c = done && g->tool_calls ? g->tool_calls->child : NULL; c; c = c->next, i++)
    cJSON_AddItemToArray(out, responses_call_item(k, c, i, 1));
  v = (cJSON *)lt__oai_field(body, "parallel_tool_calls");
  cJSON_AddBoolToObject(o, "parallel_tool_calls", !v || cJSON_IsTrue(v));
  cJSON_AddNullToObject(o, "previous_response_id");
  cJSON *r = cJSON_AddObjectToObject(o, "reasoning");
  cJSON_AddNullToObject(r, "effort");
  cJSON_AddNullToObject(r, "summary");
  cJSON_AddBoolToObject(o, "store", 0);
  cJSON_AddNumberToObject(o, "temperature", k->plan.sp.temperature);
  cJSON_AddStringToObject(cJSON_AddObjectToObject(cJSON_AddObjectToObject(o, "text"), "format"), "type", "text");
  v = (cJSON *)lt__oai_field(body, "tool_choice");
  cJSON_AddItemToObject(o, "tool_choice", v ? cJSON_Duplicate(v, 1) : cJSON_CreateString("auto"));
  v = (cJSON *)lt__oai_field(body, "tools");
  cJSON_AddItemToObject(o, "tools", v ? cJSON_Duplicate(v, 1) : cJSON_CreateArray());
  cJSON_AddNumberToObject(o, "top_p", k->plan.sp.top_p);
  cJSON_AddStringToObject(o, "truncation", "disabled");
  if (done) {
    cJSON *u = cJSON_AddObjectToObject(o, "usage");
    cJSON_AddNumberToObject(u, "input_tokens", k->plan.nprompt);
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "input_tokens_details"), "cached_tokens", 0);
    cJSON_AddNumberToObject(u, "output_tokens", g->n);
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "output_tokens_details"), "reasoning_tokens", 0);
    cJSON_AddNumberToObject(u, "total_tokens", k->plan.nprompt + g->n);
  } else {
    cJSON_AddNullToObject(o, "usage");
  }
  cJSON_AddObjectToObject(o, "metadata");
  cJSON_AddNumberToObject(o, "policy_version", (double)k->a->version);
  return o;
}

static const char *responses_status(const lt_oai_gen_t *g) {
  return !g->tool_calls && !strcmp(g->finish, "length") ? "incomplete" : "completed";
}

/* One event: its type, sequence_number and, when given, "response" (else the caller's fields in o). */
static int responses_event(lt__oai_call_t *k, const char *type, cJSON *o) {
  if (!o) return LT_ENOMEM;
  cJSON_AddStringToObject(o, "type", type);
  cJSON_AddNumberToObject(o, "sequence_number", k->seq++);
  return lt__oai_send_event(k, type, o);
}

static int responses_event_response(lt__oai_call_t *k, const char *type, cJSON *response) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddItemToObject(o, "response", response);
  return responses_event(k, type, o);
}

/* An event about item `index` (and its content part 0 when part): item_id, output_index, content_index. */
static cJSON *responses_at(const lt__oai_call_t *k, const char *kind, int id, int index, int part) {
  cJSON *o = cJSON_CreateObject();
  char item[96];
  responses_item_id(k, kind, id, item, sizeof item);
  cJSON_AddStringToObject(o, "item_id", item);
  cJSON_AddNumberToObject(o, "output_index", index);
  if (part) cJSON_AddNumberToObject(o, "content_index", 0);
  return o;
}

static int responses_stream_begin(lt__oai_call_t *k) {
  int rc = responses_event_response(k, "response.created", responses_object(k, "in_progress", NULL, NULL));
  return rc == 0 ? responses_event_response(k, "response.in_progress", responses_object(k, "in_progress", NULL, NULL))
                 : rc;
}

static void responses_open_message(lt__oai_call_t *k, lt_oai_gen_t *g) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "output_index", 0);
  cJSON_AddItemToObject(o, "item", responses_message_item(k, g, (size_t)-1));
  responses_event(k, "response.output_item.added", o);
  o = responses_at(k, "msg", 0, 0, 1);
  cJSON_AddItemToObject(o, "part", responses_text_part("", 0));
  responses_event(k, "response.content_part.added", o);
  g->text_open = 1;
}

static void responses_stream_text(lt__oai_call_t *k, lt_oai_gen_t *g, size_t end) {
  if (end > g->sent) {
    if (!g->text_open) responses_open_message(k, g);
    cJSON *o = responses_at(k, "msg", 0, 0, 1);
    char *t = strndup(g->text + g->sent, end - g->sent);
    cJSON_AddStringToObject(o, "delta", t ? t : "");
    cJSON_AddArrayToObject(o, "logprobs");
    free(t);
    responses_event(k, "response.output_text.delta", o);
    g->sent = end;
  }
  g->tok_sent = g->n;
}

static void responses_stream_choice_end(lt__oai_call_t *k, lt_oai_gen_t *g) {
  size_t n;
  int index = 0;
  if (responses_has_message(g, &n)) {
    responses_stream_text(k, g, n);
    if (!g->text_open) responses_open_message(k, g);
    cJSON *o = responses_at(k, "msg", 0, 0, 1);
    char *t = strndup(g->text ? g->text : "", n);
    cJSON_AddStringToObject(o, "text", t ? t : "");
    cJSON_AddArrayToObject(o, "logprobs");
    free(t);
    responses_event(k, "response.output_text.done", o);
    o = responses_at(k, "msg", 0, 0, 1);
    cJSON_AddItemToObject(o, "part", responses_text_part(g->text, n));
    responses_event(k, "response.content_part.done", o);
    o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "output_index", 0);
    cJSON_AddItemToObject(o, "item", responses_message_item(k, g, n));
    responses_event(k, "response.output_item.done", o);
    index = 1;
  }
  int i = 0;
  for (const cJSON *c = g->tool_calls ? g->tool_calls->child : NULL; c; c = c->next, i++, index++) {
    const cJSON *fn = cJSON_GetObjectItemCaseSensitive(c, "function");
    const char *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments")->valuestring;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "output_index", index);
    cJSON_AddItemToObject(o, "item", responses_call_item(k, c, i, 0));
    responses_event(k, "response.output_item.added", o);
    o = responses_at(k, "fc", i, index, 0);
    cJSON_AddStringToObject(o, "delta", args);
    responses_event(k, "response.function_call_arguments.delta", o);
    o = responses_at(k, "fc", i, index, 0);
    cJSON_AddStringToObject(o, "name", cJSON_GetObjectItemCaseSensitive(fn, "name")->valuestring);
    cJSON_AddStringToObject(o, "arguments", args);
    responses_event(k, "response.function_call_arguments.done", o);
    o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "output_index", index);
    cJSON_AddItemToObject(o, "item", responses_call_item(k, c, i, 1));
    responses_event(k, "response.output_item.done", o);
  }
}

static void responses_answer(lt__oai_call_t *k) {
  const char *status = responses_status(&k->gens[0]);
  cJSON *r = responses_object(k, status, NULL, NULL);
  if (!k->streaming) lt__oai_send_json(k->conn, 200, r);
  else responses_event_response(k, !strcmp(status, "completed") ? "response.completed" : "response.incomplete", r);
}

/* After the stream started: response.failed, with the error in the response (as Codex reads it). */
static void responses_stream_error(lt__oai_call_t *k, int status, const char *param, const char *code,
                                   const char *msg) {
  (void)param;
  responses_event_response(k, "response.failed",
                           responses_object(k, "failed",
                                            code            ? code
                                            : status >= 500 ? "server_error"
                                                            : "invalid_request",
                                            msg));
}

const lt__oai_dialect_t lt__oai_responses = {.id_prefix = "resp_",
                                             .call_prefix = "call",
                                             .input = "input",
                                             .parse = responses_parse,
                                             .stream_begin = responses_stream_begin,
                                             .stream_text = responses_stream_text,
                                             .stream_choice_end = responses_stream_choice_end,
                                             .answer = responses_answer,
                                             .error = lt__oai_error,
                                             .stream_error = responses_stream_error};
