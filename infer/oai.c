/* The OpenAI layer's core: the routes, the calls (authorization, the API shape's parser, rendering through the
 * model's template, the hooks, one generation per choice), and the request fields every parser shares.  The API
 * shapes are oai_openai.c, oai_messages.c and oai_responses.c; answers are built in oai_answer.c. */
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
#include "util/log.h"

cJSON *lt__oai_error_json(int status, const char *param, const char *code, const char *msg) {
  cJSON *e = cJSON_CreateObject();
  cJSON_AddStringToObject(e, "message", msg);
  cJSON_AddStringToObject(e, "type",
                          status == 401   ? "authentication_error"
                          : status >= 500 ? "server_error"
                                          : "invalid_request_error");
  if (param) cJSON_AddStringToObject(e, "param", param);
  else cJSON_AddNullToObject(e, "param");
  if (code) cJSON_AddStringToObject(e, "code", code);
  else cJSON_AddNullToObject(e, "code");
  return e;
}

void lt_oai_send_error(lt_http_conn_t *c, int status, const char *param, const char *code, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  lt__oai_error(c, status, param, code, msg);
}

void lt__oai_error(lt_http_conn_t *c, int status, const char *param, const char *code, const char *msg) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddItemToObject(o, "error", lt__oai_error_json(status, param, code, msg));
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

/* ---- request fields ---- */

const cJSON *lt__oai_field(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  return v && !cJSON_IsNull(v) ? v : NULL;
}

int lt__oai_num(const cJSON *body, const char *k, double def, double lo, double hi, int integer, double *out,
                char *param, size_t plen) {
  const cJSON *v = lt__oai_field(body, k);
  *out = def;
  if (!v) return 0;
  snprintf(param, plen, "%s", k);
  if (!cJSON_IsNumber(v) || v->valuedouble < lo || v->valuedouble > hi ||
      (integer && floor(v->valuedouble) != v->valuedouble))
    return lt_error_set(LT_EINVAL, "'%s' must be %s in [%g, %g]", k, integer ? "an integer" : "a number", lo, hi);
  *out = v->valuedouble;
  return 0;
}

int lt__oai_bool(const cJSON *body, const char *k, int *out, char *param, size_t plen) {
  const cJSON *v = lt__oai_field(body, k);
  *out = cJSON_IsTrue(v);
  if (!v || cJSON_IsBool(v)) return 0;
  snprintf(param, plen, "%s", k);
  return lt_error_set(LT_EINVAL, "'%s' must be a boolean", k);
}

int lt__oai_known(const cJSON *body, const char *const *a, const char *const *b, char *param, size_t plen) {
  for (const cJSON *f = body->child; f; f = f->next) {
    int ok = 0;
    for (const char *const *k = a; *k && !ok; k++) ok = !strcmp(*k, f->string);
    for (const char *const *k = b; k && *k && !ok; k++) ok = !strcmp(*k, f->string);
    if (!ok) {
      snprintf(param, plen, "%s", f->string);
      return lt_error_set(LT_EUNSUPP, "unrecognized request argument supplied: %s", f->string);
    }
  }
  return 0;
}

int lt__oai_stops(lt__oai_call_t *k, const char *key, char *param, size_t plen) {
  const cJSON *v = lt__oai_field(k->plan.body, key);
  if (!v) return 0;
  snprintf(param, plen, "%s", key);
  const cJSON *one = cJSON_IsString(v) ? v : NULL;
  if (!one && (!cJSON_IsArray(v) || cJSON_GetArraySize(v) > LT_OAI_MAX_STOP))
    return lt_error_set(LT_EINVAL, "'%s' must be a string or a list of up to %d strings", key, LT_OAI_MAX_STOP);
  for (const cJSON *s = one ? one : v->child; s; s = one ? NULL : s->next) {
    if (!cJSON_IsString(s) || !s->valuestring[0])
      return lt_error_set(LT_EINVAL, "'%s' entries must be non-empty strings", key);
    k->stops[k->nstops++] = s->valuestring;
  }
  return 0;
}

void lt__oai_sampling(lt__oai_call_t *k, double temp, double top_p, double top_k, double maxt, double seed) {
  k->plan.n = 1;
  k->plan.requested_max = (int)maxt;
  k->plan.requested_temperature = (float)temp;
  k->plan.requested_top_p = (float)top_p;
  k->plan.sp = (lt_sampling_t){.temperature = (float)temp, .top_p = (float)top_p, .top_k = top_k > 0 ? (int)top_k : 0};
  k->plan.seed = (uint64_t)(int64_t)seed;
}

void lt__oai_skip_tool(lt_oai_t *a, const char *api, const char *type) {
  for (int i = 0; i < a->nskipped; i++)
    if (!strcmp(a->skipped[i], type)) return;
  if (a->nskipped < (int)(sizeof a->skipped / sizeof *a->skipped))
    snprintf(a->skipped[a->nskipped++], sizeof a->skipped[0], "%s", type);
  LT_INFO("oai", "%s: tools of type '%s' are skipped: the policy calls function tools only (logged once)", api, type);
}

/* An OpenAI function tool {type: function, function: {name, description, parameters}} appended to k->tools. */
static int add_tool(lt__oai_call_t *k, const cJSON *name, const cJSON *description, const cJSON *parameters) {
  if (!k->tools && !(k->tools = cJSON_CreateArray())) return lt_error_set(LT_ENOMEM, "out of memory");
  cJSON *t = cJSON_CreateObject(), *fn = cJSON_AddObjectToObject(t, "function");
  cJSON_AddItemToArray(k->tools, t);
  int ok = fn && cJSON_AddStringToObject(t, "type", "function") &&
           cJSON_AddItemToObject(fn, "name", cJSON_Duplicate(name, 1));
  if (ok && description) ok = cJSON_AddItemToObject(fn, "description", cJSON_Duplicate(description, 1));
  if (ok && parameters) ok = cJSON_AddItemToObject(fn, "parameters", cJSON_Duplicate(parameters, 1));
  return ok ? 0 : lt_error_set(LT_ENOMEM, "out of memory");
}

int lt__oai_flat_tools(lt__oai_call_t *k, const char *api, const char *type, int untyped, const char *schema_key,
                       int schema_required, char *param, size_t plen) {
  const cJSON *tools = lt__oai_field(k->plan.body, "tools");
  snprintf(param, plen, "tools");
  if (tools && !cJSON_IsArray(tools)) return lt_error_set(LT_EINVAL, "'tools' must be a list");
  int ti = 0, rc;
  for (const cJSON *t = tools ? tools->child : NULL; t; t = t->next, ti++) {
    const cJSON *ty = lt__oai_field(t, "type"), *name = lt__oai_field(t, "name"),
                *desc = lt__oai_field(t, "description"), *schema = lt__oai_field(t, schema_key);
    if (ty ? !cJSON_IsString(ty) || strcmp(ty->valuestring, type) : !untyped) {
      lt__oai_skip_tool(k->a, api, cJSON_IsString(ty) ? ty->valuestring : "?");
      continue;
    }
    snprintf(param, plen, "tools[%d]", ti);
    if (!cJSON_IsString(name) || (desc && !cJSON_IsString(desc)) ||
        (schema ? !cJSON_IsObject(schema) : schema_required))
      return lt_error_set(LT_EINVAL, "%s: a %s tool needs a string 'name' %s an object '%s'%s", param, type,
                          schema_required ? "and" : "(and", schema_key, schema_required ? "" : ")");
    if ((rc = add_tool(k, name, desc, schema)) < 0) return rc;
  }
  k->plan.tools = k->tools;
  k->parse_tools = k->tools != NULL;
  return 0;
}

cJSON *lt__oai_add_message(lt__oai_call_t *k, const char *role, const char *content) {
  if (!k->messages && !(k->messages = cJSON_CreateArray())) return NULL;
  cJSON *m = cJSON_CreateObject();
  if (!m || !cJSON_AddItemToArray(k->messages, m) || !cJSON_AddStringToObject(m, "role", role) ||
      !cJSON_AddStringToObject(m, "content", content))
    return NULL;
  return m;
}

/* ---- rendering ---- */

/* The call's messages and tools through the model's template (ChatML without one), the generation prompt
 * opened; the template's enable_thinking set when the request asked (templates without it ignore it). */
static int render_call(lt__oai_call_t *k, size_t *len) {
  const lt_oai_t *a = k->a;
  int rc;
  if (k->thinking < 0 || !a->o.chat) {
    rc = lt_chat_render(a->o.chat, a->o.tool_format, k->messages, k->plan.tools, 1, &k->text, len);
  } else {
    cJSON *vars = lt_chat_vars(k->messages, k->plan.tools, 1);
    rc = vars && cJSON_AddBoolToObject(vars, "enable_thinking", k->thinking)
             ? lt_chat_template_render(a->o.chat, vars, &k->text, len)
             : lt_error_set(LT_ENOMEM, "out of memory");
    cJSON_Delete(vars);
  }
  if (rc == LT_EINVAL && a->o.chat) lt_error_wrap(rc, "chat template");
  return rc;
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
  cJSON_Delete(k->tools);
  free(k->text);
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
  if (k->streaming) {
    k->d->stream_error(k, status, param, code, msg);
    lt_http_stream_end(k->conn);
  } else {
    k->d->error(k->conn, status, param, code, msg);
  }
  call_free(k);
}

void lt__oai_context_full(lt__oai_call_t *k, int need) {
  lt_oai_t *a = k->a;
  if (a->o.hooks.context_limit) a->o.hooks.context_limit(a->o.hooks.ud, k->plan.session, need, a->o.max_context);
  char msg[256];
  if (k->d->too_long) k->d->too_long(msg, sizeof msg, need, a->o.max_context);
  else
    snprintf(msg, sizeof msg, "this model's maximum context length is %d tokens; the messages take %d",
             a->o.max_context, need);
  lt__oai_call_fail(k, 400, k->plan.chat ? k->d->input : "prompt", "context_length_exceeded", msg);
}

static void start(lt__oai_call_t *k) {
  lt_oai_t *a = k->a;
  const lt_oai_hooks_t *h = &a->o.hooks;
  int room = a->o.max_context - k->plan.nprompt;
  int asked = k->plan.requested_max > 0 ? k->plan.requested_max : k->plan.chat ? room : 16;
  k->plan.max_new = asked < room ? asked : room;
  int rc = h->prepare ? h->prepare(h->ud, &k->plan) : 0;
  if (rc == LT_ERANGE || (rc == 0 && k->plan.nprompt >= a->o.max_context)) {
    lt__oai_context_full(k, k->plan.nprompt);
    return;
  }
  if (rc < 0) {
    lt__oai_call_fail(k, rc == LT_ENOMEM ? 500 : 400, NULL, NULL, lt_error_msg());
    return;
  }
  room = a->o.max_context - k->plan.nprompt;
  if (k->plan.max_new > room) k->plan.max_new = room;
  snprintf(k->id, sizeof k->id, "%s%llu", k->plan.chat ? k->d->id_prefix : "cmpl-", (unsigned long long)a->ncalls);
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
      if (rc == LT_ERANGE) lt__oai_context_full(k, k->plan.nprompt);
      else lt__oai_call_fail(k, 500, NULL, NULL, lt_error_msg());
      return;
    }
    g->live = 1;
    k->pending++;
  }
}

/* The body through the shape's parser, the messages rendered and tokenized; on failure `param` names the field. */
static int parse(lt__oai_call_t *k, char *param, size_t plen) {
  k->thinking = -1;
  int rc = k->d->parse(k, param, plen);
  if (rc < 0) return rc;
  if (k->messages) {
    size_t len;
    k->plan.messages = k->messages;
    snprintf(param, plen, "%s", k->d->input);
    if ((rc = render_call(k, &len)) < 0) return rc;
    k->plan.text = k->text;
    k->plan.ntext = len;
    if ((rc = lt_ids_text(k->a->o.tok, k->text, &k->ids, &k->nids, &k->cap)) < 0) return rc;
  }
  if (!k->nids) return lt_error_set(LT_EINVAL, "the prompt is empty");
  k->plan.prompt = k->ids;
  k->plan.nprompt = k->nids;
  return 0;
}

/* ---- routes ---- */

typedef enum { R_CHAT, R_COMPLETIONS, R_MESSAGES, R_COUNT_TOKENS, R_RESPONSES, R_MODELS, R_MODEL } route_kind;

static const struct {
  const char *method, *path; /* a path ending in '/' takes an id after it */
  route_kind kind;
  const lt__oai_dialect_t *d;
} routes[] = {
    {"POST", "/v1/chat/completions", R_CHAT, &lt__oai_openai},
    {"POST", "/v1/completions", R_COMPLETIONS, &lt__oai_openai},
    {"POST", "/v1/messages", R_MESSAGES, &lt__oai_messages},
    {"POST", "/v1/messages/count_tokens", R_COUNT_TOKENS, &lt__oai_messages},
    {"POST", "/v1/responses", R_RESPONSES, &lt__oai_responses},
    {"GET", "/v1/models", R_MODELS, &lt__oai_openai},
    {"GET", "/v1/models/", R_MODEL, &lt__oai_openai},
};

void lt_oai_send_no_route(lt_http_conn_t *c, const lt_http_req_t *req, const char *prefix, const char *more) {
  lt_buf_t b = {0};
  for (size_t i = 0; i < sizeof routes / sizeof *routes; i++)
    lt_buf_printf(&b, "%s%s %s%s%s", i ? ", " : "", routes[i].method, prefix, routes[i].path,
                  routes[i].kind == R_MODEL ? "{id}" : "");
  if (lt_buf_ok(&b) < 0) {
    lt_http_respond(c, 500, NULL, "out of memory\n", 14);
  } else {
    char path[160];
    snprintf(path, sizeof path, "%s", req->path);
    lt_oai_send_error(c, 404, NULL, NULL, "no route %s %s; the routes are %s%s%s", req->method, path, b.data,
                      more && more[0] ? ", " : "", more ? more : "");
  }
  lt_buf_free(&b);
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

/* The API key: "Authorization: Bearer KEY" (OpenAI's SDKs, ANTHROPIC_AUTH_TOKEN) or "X-Api-Key: KEY"
 * (ANTHROPIC_API_KEY). */
static const char *api_key(const lt_http_req_t *req) {
  const char *auth = req->authorization;
  if (!auth || strncasecmp(auth, "Bearer ", 7)) return req->api_key;
  auth += 7;
  while (*auth == ' ') auth++;
  return auth;
}

int lt_oai_handle(lt_oai_t *a, lt_http_conn_t *c, const lt_http_req_t *req) {
  const char *path = req->path; /* without its query: ?beta=true (Anthropic's SDK) and the like */
  size_t r = 0, nroutes = sizeof routes / sizeof *routes;
  for (; r < nroutes; r++) {
    size_t n = strlen(routes[r].path);
    if (routes[r].kind == R_MODEL ? !strncmp(path, routes[r].path, n) && path[n] : !strcmp(path, routes[r].path)) break;
  }
  if (r == nroutes) return 0;
  const lt__oai_dialect_t *d = routes[r].d;
  route_kind kind = routes[r].kind;
  const lt_oai_hooks_t *h = &a->o.hooks;
  void *session = NULL;
  if (h->authorize && h->authorize(h->ud, api_key(req), &session) < 0) {
    d->error(c, 401, NULL, "invalid_api_key", lt_error_msg());
    return 1;
  }
  if (strcmp(req->method, routes[r].method)) {
    char msg[600];
    snprintf(msg, sizeof msg, "%s does not take %s", path, req->method);
    d->error(c, 405, NULL, NULL, msg);
    return 1;
  }
  if (kind == R_MODELS || kind == R_MODEL) {
    models(a, c, kind == R_MODEL ? path + strlen(routes[r].path) : NULL); /* whatever the id: the current policy */
    return 1;
  }
  cJSON *body = NULL;
  if (lt_json_parse(req->body, req->body_len, "request body", &body) < 0 || !cJSON_IsObject(body)) {
    d->error(c, 400, NULL, NULL, body ? "the body must be a JSON object" : lt_error_msg());
    cJSON_Delete(body);
    return 1;
  }
  lt__oai_call_t *k = calloc(1, sizeof *k);
  if (!k) {
    cJSON_Delete(body);
    d->error(c, 500, NULL, NULL, "out of memory");
    return 1;
  }
  k->a = a;
  k->d = d;
  k->conn = c;
  k->plan.body = body;
  k->plan.chat = kind != R_COMPLETIONS;
  k->plan.session = session;
  k->count_only = kind == R_COUNT_TOKENS;
  k->next = a->calls;
  if (a->calls) a->calls->prev = k;
  a->calls = k;
  a->ncalls++;
  char param[128] = "";
  int rc = parse(k, param, sizeof param);
  if (rc < 0) {
    lt__oai_call_fail(k, rc == LT_ENOMEM ? 500 : 400, param[0] ? param : NULL,
                      rc == LT_EUNSUPP ? "unsupported_parameter" : NULL, lt_error_msg());
    return 1;
  }
  if (k->count_only) { /* /v1/messages/count_tokens: the prompt's tokens, nothing generated */
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "input_tokens", k->nids);
    lt__oai_send_json(c, 200, o);
    call_free(k);
    return 1;
  }
  start(k);
  return 1;
}
