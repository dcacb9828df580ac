/* The OpenAI layer's requests: routes, validation of every field (what is
 * not supported is refused by name), chat rendering through the model's
 * template, the hooks, and starting one generation per choice.  Answers are
 * built in oai_answer.c. */
#include "infer/internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "util/buf.h"
#include "util/error.h"
#include "util/json.h"

void lt_oai_send_error(lt_http_conn_t *c, int status, const char *param, const char *code, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  cJSON *o = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(o, "error");
  cJSON_AddStringToObject(e, "message", msg);
  cJSON_AddStringToObject(e, "type", status == 401 ? "authentication_error"
                                     : status >= 500 ? "server_error"
                                                     : "invalid_request_error");
  if (param) cJSON_AddStringToObject(e, "param", param);
  else cJSON_AddNullToObject(e, "param");
  if (code) cJSON_AddStringToObject(e, "code", code);
  else cJSON_AddNullToObject(e, "code");
  lt__oai_send_json(c, status, o);
}

void lt__oai_send_json(lt_http_conn_t *c, int status, cJSON *o) {
  /* lt_json_write, not cJSON's printer: text an untrained policy generated may
   * be invalid UTF-8, which strict clients (Python's json) refuse. */
  lt_buf_t b = {0};
  if (o) lt_json_write(&b, o);
  cJSON_Delete(o);
  if (!o || lt_buf_ok(&b) < 0) lt_http_respond(c, 500, NULL, "out of memory\n", 14);
  else lt_http_respond(c, status, "application/json", b.data, b.len);
  lt_buf_free(&b);
}

int lt_oai_create(const lt_oai_opts_t *o, lt_oai_t **out) {
  *out = NULL;
  if (!o->tok || !o->hooks.generate || !o->hooks.cancel || o->max_context <= 0)
    return lt_error_set(LT_EINVAL, "openai layer: a tokenizer, generate/cancel hooks and max_context are required");
  lt_oai_t *a = calloc(1, sizeof *a);
  if (!a) return lt_error_set(LT_ENOMEM, "openai layer: out of memory");
  a->o = *o;
  snprintf(a->model, sizeof a->model, "%s", o->model && o->model[0] ? o->model : "longtail");
  a->o.model = a->model;
  *out = a;
  return 0;
}

void lt_oai_set_version(lt_oai_t *a, int64_t version) { a->version = version; }

void lt_oai_free(lt_oai_t *a) {
  if (!a) return;
  while (a->calls) lt__oai_call_fail(a->calls, 503, NULL, NULL, "the server is shutting down");
  free(a);
}

/* ---- rendering ---- */

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
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(p, "type"), *text = cJSON_GetObjectItemCaseSensitive(p, "text");
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
    if (strcmp(r, "system") && strcmp(r, "developer") && strcmp(r, "user") && strcmp(r, "assistant") && strcmp(r, "tool")) {
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
      const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name"), *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
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

int lt_oai_render(const lt_oai_t *a, const cJSON *messages, const cJSON *tools, int gen, char **text, size_t *len) {
  int rc = lt_chat_render(a->o.chat, a->o.tool_format, messages, tools, gen, text, len);
  if (rc == LT_EINVAL && a->o.chat) lt_error_wrap(rc, "chat template");
  return rc;
}

/* ---- validation ---- */

static const cJSON *field(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  return v && !cJSON_IsNull(v) ? v : NULL;
}

/* A number in [lo, hi] (integral when `integer`), or def when absent. */
static int num(const cJSON *body, const char *k, double def, double lo, double hi, int integer, double *out, char *param,
               size_t plen) {
  const cJSON *v = field(body, k);
  *out = def;
  if (!v) return 0;
  snprintf(param, plen, "%s", k);
  if (!cJSON_IsNumber(v) || v->valuedouble < lo || v->valuedouble > hi || (integer && floor(v->valuedouble) != v->valuedouble))
    return lt_error_set(LT_EINVAL, "'%s' must be %s in [%g, %g]", k, integer ? "an integer" : "a number", lo, hi);
  *out = v->valuedouble;
  return 0;
}

/* Fields accepted at their neutral values only: anything else would change
 * the answer in a way this server does not implement. */
static int neutral_only(const cJSON *body, char *param, size_t plen) {
  static const char *zero[] = {"presence_penalty", "frequency_penalty"};
  for (size_t i = 0; i < sizeof zero / sizeof *zero; i++) {
    const cJSON *v = field(body, zero[i]);
    if (v && !(cJSON_IsNumber(v) && v->valuedouble == 0)) {
      snprintf(param, plen, "%s", zero[i]);
      return lt_error_set(LT_EUNSUPP, "'%s' is not supported (only 0)", zero[i]);
    }
  }
  const cJSON *v = field(body, "logit_bias");
  if (v && !(cJSON_IsObject(v) && !v->child)) {
    snprintf(param, plen, "logit_bias");
    return lt_error_set(LT_EUNSUPP, "'logit_bias' is not supported");
  }
  v = field(body, "response_format");
  const cJSON *t = cJSON_GetObjectItemCaseSensitive(v, "type");
  if (v && !(cJSON_IsString(t) && !strcmp(t->valuestring, "text"))) {
    snprintf(param, plen, "response_format");
    return lt_error_set(LT_EUNSUPP, "'response_format' is not supported (only {\"type\": \"text\"})");
  }
  v = field(body, "parallel_tool_calls");
  if (v && !cJSON_IsTrue(v)) {
    snprintf(param, plen, "parallel_tool_calls");
    return lt_error_set(LT_EUNSUPP, "'parallel_tool_calls' is not supported (only true)");
  }
  v = field(body, "store");
  if (v && !cJSON_IsFalse(v)) {
    snprintf(param, plen, "store");
    return lt_error_set(LT_EUNSUPP, "'store' is not supported (only false)");
  }
  static const char *off[] = {"echo", "suffix"};
  for (size_t i = 0; i < sizeof off / sizeof *off; i++)
    if ((v = field(body, off[i])) && !cJSON_IsFalse(v)) {
      snprintf(param, plen, "%s", off[i]);
      return lt_error_set(LT_EUNSUPP, "'%s' is not supported", off[i]);
    }
  if ((v = field(body, "best_of")) && !(cJSON_IsNumber(v) && v->valuedouble == 1)) {
    snprintf(param, plen, "best_of");
    return lt_error_set(LT_EUNSUPP, "'best_of' is not supported (only 1)");
  }
  return 0;
}

static int known_fields(const cJSON *body, int chat, char *param, size_t plen) {
  static const char *common[] = {"model", "max_tokens", "temperature", "top_p", "top_k", "n", "stream", "stream_options",
                                 "stop", "seed", "logprobs", "user", "presence_penalty", "frequency_penalty",
                                 "logit_bias", "return_tokens_as_token_ids", "skip_special_tokens", NULL};
  static const char *chat_only[] = {"messages", "max_completion_tokens", "top_logprobs", "tools", "tool_choice",
                                    "parallel_tool_calls", "response_format", "store", "metadata", NULL};
  static const char *completion_only[] = {"prompt", "echo", "suffix", "best_of", NULL};
  for (const cJSON *f = body->child; f; f = f->next) {
    int ok = 0;
    for (const char **k = common; *k && !ok; k++) ok = !strcmp(*k, f->string);
    for (const char **k = chat ? chat_only : completion_only; *k && !ok; k++) ok = !strcmp(*k, f->string);
    if (!ok) {
      snprintf(param, plen, "%s", f->string);
      return lt_error_set(LT_EUNSUPP, "unrecognized request argument supplied: %s", f->string);
    }
  }
  return 0;
}

static int parse_stop(lt__oai_call_t *k, char *param, size_t plen) {
  const cJSON *v = field(k->plan.body, "stop");
  if (!v) return 0;
  snprintf(param, plen, "stop");
  const cJSON *one = cJSON_IsString(v) ? v : NULL;
  if (!one && (!cJSON_IsArray(v) || cJSON_GetArraySize(v) > LT_OAI_MAX_STOP))
    return lt_error_set(LT_EINVAL, "'stop' must be a string or a list of up to %d strings", LT_OAI_MAX_STOP);
  for (const cJSON *s = one ? one : v->child; s; s = one ? NULL : s->next) {
    if (!cJSON_IsString(s) || !s->valuestring[0])
      return lt_error_set(LT_EINVAL, "'stop' entries must be non-empty strings");
    k->stops[k->nstops++] = s->valuestring;
  }
  return 0;
}

static int parse_tools(lt__oai_call_t *k, char *param, size_t plen) {
  const cJSON *tools = field(k->plan.body, "tools"), *choice = field(k->plan.body, "tool_choice");
  snprintf(param, plen, "tools");
  if (tools && !cJSON_IsArray(tools)) return lt_error_set(LT_EINVAL, "'tools' must be a list");
  int ti = 0;
  for (const cJSON *t = tools ? tools->child : NULL; t; t = t->next, ti++) {
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(t, "type"), *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
    if (!cJSON_IsString(type) || strcmp(type->valuestring, "function") || !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(fn, "name"))) {
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

/* Fills the call's plan from the body; on failure `param` names the field. */
static int parse(lt__oai_call_t *k, char *param, size_t plen) {
  lt_oai_t *a = k->a;
  const cJSON *body = k->plan.body;
  int chat = k->plan.chat, rc;
  if ((rc = known_fields(body, chat, param, plen)) < 0 || (rc = neutral_only(body, param, plen)) < 0) return rc;
  double n, temp, top_p, top_k, maxt, seed, lp = 0, top = 0;
  const char *mk = chat && field(body, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  if ((rc = num(body, "n", 1, 1, LT_OAI_MAX_N, 1, &n, param, plen)) < 0 ||
      (rc = num(body, "temperature", 1, 0, 100, 0, &temp, param, plen)) < 0 ||
      (rc = num(body, "top_p", 1, 1e-9, 1, 0, &top_p, param, plen)) < 0 ||
      (rc = num(body, "top_k", 0, -1, 1 << 24, 1, &top_k, param, plen)) < 0 ||
      (rc = num(body, mk, -1, 1, 1 << 30, 1, &maxt, param, plen)) < 0 ||
      (rc = num(body, "seed", (double)(a->o.seed_base + a->ncalls), -9007199254740991.0, 9007199254740991.0, 1, &seed,
                param, plen)) < 0)
    return rc;
  const cJSON *lpv = field(body, "logprobs");
  if (chat) {
    snprintf(param, plen, "logprobs");
    if (lpv && !cJSON_IsBool(lpv)) return lt_error_set(LT_EINVAL, "'logprobs' must be a boolean");
    k->logprobs = cJSON_IsTrue(lpv);
    if ((rc = num(body, "top_logprobs", 0, 0, LT_OAI_MAX_TOP_LOGPROBS, 1, &top, param, plen)) < 0) return rc;
    if (top > 0 && !k->logprobs) return lt_error_set(LT_EINVAL, "'top_logprobs' needs 'logprobs': true");
  } else {
    if ((rc = num(body, "logprobs", -1, 0, LT_OAI_MAX_TOP_LOGPROBS, 1, &lp, param, plen)) < 0) return rc;
    k->logprobs = lp >= 0;
    top = lp > 0 ? lp : 0;
  }
  const cJSON *st = field(body, "stream"), *so = field(body, "stream_options");
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
  k->token_ids = cJSON_IsTrue(field(body, "return_tokens_as_token_ids"));
  k->skip_special = cJSON_IsTrue(field(body, "skip_special_tokens"));
  if ((rc = parse_stop(k, param, plen)) < 0) return rc;
  k->plan.n = (int)n;
  k->plan.requested_max = (int)maxt;
  k->plan.requested_temperature = (float)temp;
  k->plan.requested_top_p = (float)top_p;
  k->plan.sp = (lt_sampling_t){.temperature = (float)temp, .top_p = (float)top_p, .top_k = top_k > 0 ? (int)top_k : 0};
  k->plan.seed = (uint64_t)(int64_t)seed;
  k->plan.top_logprobs = (int)top;
  /* the prompt */
  if (chat) {
    if ((rc = parse_tools(k, param, plen)) < 0) return rc;
    if ((rc = normalize(field(body, "messages"), &k->messages, param, plen)) < 0) return rc;
    k->plan.messages = k->messages;
    char *text;
    size_t len;
    snprintf(param, plen, "messages");
    if ((rc = lt_oai_render(a, k->messages, k->plan.tools, 1, &text, &len)) < 0) return rc;
    rc = lt_ids_text(a->o.tok, text, &k->ids, &k->nids, &k->cap);
    free(text);
    if (rc < 0) return rc;
  } else {
    const cJSON *p = field(body, "prompt");
    snprintf(param, plen, "prompt");
    if (cJSON_IsArray(p) && cJSON_GetArraySize(p) == 1 && !cJSON_IsNumber(p->child)) p = p->child;
    if (cJSON_IsString(p)) {
      if ((rc = lt_ids_text(a->o.tok, p->valuestring, &k->ids, &k->nids, &k->cap)) < 0) return rc;
    } else if (cJSON_IsArray(p)) {
      for (const cJSON *e = p->child; e; e = e->next) {
        if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble >= a->o.vocab || floor(e->valuedouble) != e->valuedouble)
          return lt_error_set(LT_EINVAL, "'prompt' token ids must be integers in [0, %d)", a->o.vocab);
        if ((rc = lt_ids_push(&k->ids, &k->nids, &k->cap, (int32_t)e->valuedouble)) < 0) return rc;
      }
    } else {
      return lt_error_set(LT_EINVAL, "'prompt' must be a string or a list of token ids (one prompt)");
    }
  }
  if (!k->nids) return lt_error_set(LT_EINVAL, "the prompt is empty");
  k->plan.prompt = k->ids;
  k->plan.nprompt = k->nids;
  return 0;
}

/* ---- calls ---- */

static void call_free(lt__oai_call_t *k) {
  lt_oai_t *a = k->a;
  if (k->prev) k->prev->next = k->next;
  else if (a->calls == k) a->calls = k->next;
  if (k->next) k->next->prev = k->prev;
  for (int i = 0; i < k->plan.n; i++) lt__oai_gen_release(&k->gens[i]);
  cJSON_Delete((cJSON *)k->plan.body);
  cJSON_Delete(k->messages);
  free(k->ids);
  free(k);
}

void lt__oai_call_done(lt__oai_call_t *k) { call_free(k); }

void lt__oai_call_fail(lt__oai_call_t *k, int status, const char *param, const char *code, const char *msg) {
  for (int i = 0; i < k->plan.n; i++)
    if (k->gens[i].live) {
      k->gens[i].live = 0;
      k->a->o.hooks.cancel(k->a->o.hooks.ud, k->gens[i].handle);
    }
  if (k->streaming) lt__oai_stream_error(k, status, param, code, msg);
  else lt_oai_send_error(k->conn, status, param, code, "%s", msg);
  call_free(k);
}

static void context_full(lt__oai_call_t *k, int need) {
  lt_oai_t *a = k->a;
  if (a->o.hooks.context_limit) a->o.hooks.context_limit(a->o.hooks.ud, k->plan.session, need, a->o.max_context);
  char msg[256];
  snprintf(msg, sizeof msg, "this model's maximum context length is %d tokens; the messages take %d", a->o.max_context,
           need);
  lt__oai_call_fail(k, 400, k->plan.chat ? "messages" : "prompt", "context_length_exceeded", msg);
}

void lt__oai_context_full(lt__oai_call_t *k, int need) { context_full(k, need); }

static void start(lt__oai_call_t *k) {
  lt_oai_t *a = k->a;
  const lt_oai_hooks_t *h = &a->o.hooks;
  int room = a->o.max_context - k->plan.nprompt;
  int asked = k->plan.requested_max > 0 ? k->plan.requested_max : k->plan.chat ? room : 16;
  k->plan.max_new = asked < room ? asked : room;
  int rc = h->prepare ? h->prepare(h->ud, &k->plan) : 0;
  if (rc == LT_ERANGE || (rc == 0 && k->plan.nprompt >= a->o.max_context)) {
    context_full(k, k->plan.nprompt);
    return;
  }
  if (rc < 0) {
    lt__oai_call_fail(k, rc == LT_ENOMEM ? 500 : 400, NULL, NULL, lt_error_msg());
    return;
  }
  room = a->o.max_context - k->plan.nprompt;
  if (k->plan.max_new > room) k->plan.max_new = room;
  snprintf(k->id, sizeof k->id, "%s-%llu", k->plan.chat ? "chatcmpl" : "cmpl", (unsigned long long)a->ncalls);
  k->created = (double)time(NULL);
  if (k->stream && (rc = lt__oai_stream_begin(k)) < 0) {
    lt__oai_call_fail(k, 500, NULL, NULL, "the stream could not start");
    return;
  }
  for (int i = 0; i < k->plan.n; i++) {
    lt_oai_gen_t *g = &k->gens[i];
    g->call = k;
    g->index = i;
    lt_oai_job_t job = {.plan = &k->plan, .index = i, .seed = k->plan.seed + (uint64_t)i};
    if ((rc = h->generate(h->ud, g, &job, &g->handle)) < 0) {
      if (rc == LT_ERANGE) context_full(k, k->plan.nprompt);
      else lt__oai_call_fail(k, 500, NULL, NULL, lt_error_msg());
      return;
    }
    g->live = 1;
    k->pending++;
  }
}

static void models(lt_oai_t *a, lt_http_conn_t *c, const char *id) {
  cJSON *m = cJSON_CreateObject();
  cJSON_AddStringToObject(m, "id", id ? id : a->model);
  cJSON_AddStringToObject(m, "object", "model");
  cJSON_AddNumberToObject(m, "created", 0);
  cJSON_AddStringToObject(m, "owned_by", "longtail");
  cJSON_AddNumberToObject(m, "max_model_len", a->o.max_context);
  cJSON_AddNumberToObject(m, "policy_version", (double)a->version);
  if (id) {
    lt__oai_send_json(c, 200, m);
    return;
  }
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "object", "list");
  cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "data"), m);
  lt__oai_send_json(c, 200, o);
}

static const char *bearer(const char *auth) {
  if (!auth || strncasecmp(auth, "Bearer ", 7)) return NULL;
  auth += 7;
  while (*auth == ' ') auth++;
  return auth;
}

int lt_oai_handle(lt_oai_t *a, lt_http_conn_t *c, const lt_http_req_t *req) {
  char path[512];
  snprintf(path, sizeof path, "%s", req->path);
  char *q = strchr(path, '?');
  if (q) *q = 0;
  int chat = !strcmp(path, "/v1/chat/completions"), completion = !strcmp(path, "/v1/completions");
  int list = !strcmp(path, "/v1/models"), one = !strncmp(path, "/v1/models/", 11) && path[11];
  if (!chat && !completion && !list && !one) return 0;
  const lt_oai_hooks_t *h = &a->o.hooks;
  void *session = NULL;
  if (h->authorize && h->authorize(h->ud, bearer(req->authorization), &session) < 0) {
    lt_oai_send_error(c, 401, NULL, "invalid_api_key", "%s", lt_error_msg());
    return 1;
  }
  int post = !strcmp(req->method, "POST"), get = !strcmp(req->method, "GET");
  if ((list || one) != get || (chat || completion) != post) {
    lt_oai_send_error(c, 405, NULL, NULL, "%s does not take %s", path, req->method);
    return 1;
  }
  if (list || one) {
    models(a, c, one ? path + 11 : NULL); /* whatever the id: the current policy */
    return 1;
  }
  cJSON *body = NULL;
  if (lt_json_parse(req->body, req->body_len, "request body", &body) < 0 || !cJSON_IsObject(body)) {
    lt_oai_send_error(c, 400, NULL, NULL, "%s", body ? "the body must be a JSON object" : lt_error_msg());
    cJSON_Delete(body);
    return 1;
  }
  lt__oai_call_t *k = calloc(1, sizeof *k);
  if (!k) {
    cJSON_Delete(body);
    lt_oai_send_error(c, 500, NULL, NULL, "out of memory");
    return 1;
  }
  k->a = a;
  k->conn = c;
  k->plan.body = body;
  k->plan.chat = chat;
  k->plan.session = session;
  k->next = a->calls;
  if (a->calls) a->calls->prev = k;
  a->calls = k;
  a->ncalls++;
  char param[128] = "";
  int rc = parse(k, param, sizeof param);
  if (rc < 0) {
    lt__oai_call_fail(k, rc == LT_ENOMEM ? 500 : 400, param[0] ? param : NULL, rc == LT_EUNSUPP ? "unsupported_parameter" : NULL,
                      lt_error_msg());
    return 1;
  }
  start(k);
  return 1;
}
