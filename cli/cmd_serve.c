/* `longtail serve --model DIR [--port P]`: the builtin engine behind an
 * OpenAI-compatible HTTP server (/v1/completions, /v1/chat/completions with
 * logprobs, /v1/models, /health, and SGLang's /update_weights_from_disk), on
 * one libuv loop.  Concurrent requests share batched decode steps through the
 * rollout backend; beyond --slots they wait in FIFO order. */
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/commands.h"
#include "learner/chat_template.h"
#include "learner/model.h"
#include "learner/tokenizer.h"
#include "net/http.h"
#include "rollout/backend.h"
#include "util/buf.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/json.h"
#include "util/log.h"
#include "util/sha256.h"

typedef struct server server_t;

typedef struct req {
  server_t *s;
  lt_http_conn_t *conn;
  int chat;
  int32_t *prompt;
  int nprompt, cap;
  int max_new;
  lt_sampling_t sp;
  uint64_t seed;
  int logprobs;     /* return per-token logprobs */
  int token_ids;    /* return_tokens_as_token_ids (vLLM): tokens as "token_id:N" */
  lt_gen_t *g;
  struct req *next;
} req_t;

struct server {
  uv_loop_t loop;
  lt_http_server_t *http;
  lt_backend_t *b;
  const lt_tokenizer_t *tok;
  lt_chat_template_t *chat; /* the checkpoint's own; NULL: ChatML */
  lt_backend_info_t info;
  char model[256];
  int slots, active;
  req_t *qhead, *qtail;
  uint64_t served, seed_base;
  int64_t version;
  uv_signal_t sigint, sigterm;
};

static void send_json(lt_http_conn_t *c, int status, cJSON *o) {
  char *s = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  if (!s) {
    lt_http_respond(c, 500, NULL, "out of memory\n", 14);
    return;
  }
  lt_http_respond(c, status, "application/json", s, strlen(s));
  free(s);
}

/* The OpenAI error object. */
static void send_error(lt_http_conn_t *c, int status, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void send_error(lt_http_conn_t *c, int status, const char *param, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  cJSON *o = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(o, "error");
  cJSON_AddStringToObject(e, "message", msg);
  cJSON_AddStringToObject(e, "type", status >= 500 ? "server_error" : "invalid_request_error");
  if (param) cJSON_AddStringToObject(e, "param", param);
  else cJSON_AddNullToObject(e, "param");
  cJSON_AddNullToObject(e, "code");
  send_json(c, status, o);
}

static void req_free(req_t *r) {
  if (r->g) lt_gen_close(r->g);
  free(r->prompt);
  free(r);
}

static char *token_text(const server_t *s, int32_t id, int as_id) {
  if (as_id) {
    char buf[32];
    snprintf(buf, sizeof buf, "token_id:%d", id);
    return strdup(buf);
  }
  char *t = NULL;
  size_t n;
  if (lt_tokenizer_decode(s->tok, &id, 1, 0, &t, &n) < 0) return NULL;
  return t;
}

static void start_next(server_t *s);

static void on_turn(lt_gen_t *g, const lt_turn_t *t, const lt_prefill_routing_t *pre, void *ud) {
  req_t *r = ud;
  server_t *s = r->s;
  s->active--;
  if (t->error) {
    send_error(r->conn, 500, NULL, "generation failed: %s", t->error_msg ? t->error_msg : lt_strerror(t->error));
  } else {
    /* The stop token is part of the tokens and logprobs (a trainer needs it) but
     * not of the text, as OpenAI servers do. */
    int ntext = t->n - (t->stopped && t->n ? 1 : 0);
    char *text = NULL;
    size_t tlen = 0;
    if (lt_tokenizer_decode(s->tok, t->tokens, ntext, 1, &text, &tlen) < 0) text = NULL;
    char id[64];
    snprintf(id, sizeof id, "%s-%llu", r->chat ? "chatcmpl" : "cmpl", (unsigned long long)++s->served);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddStringToObject(o, "object", r->chat ? "chat.completion" : "text_completion");
    cJSON_AddNumberToObject(o, "created", (double)time(NULL));
    cJSON_AddStringToObject(o, "model", s->model);
    cJSON *ch = cJSON_CreateObject();
    cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "choices"), ch);
    cJSON_AddNumberToObject(ch, "index", 0);
    if (r->chat) {
      cJSON *m = cJSON_AddObjectToObject(ch, "message");
      cJSON_AddStringToObject(m, "role", "assistant");
      cJSON_AddStringToObject(m, "content", text ? text : "");
    } else {
      cJSON_AddStringToObject(ch, "text", text ? text : "");
    }
    if (r->logprobs) {
      cJSON *lp = cJSON_AddObjectToObject(ch, "logprobs");
      if (r->chat) {
        cJSON *content = cJSON_AddArrayToObject(lp, "content");
        for (int i = 0; i < t->n; i++) {
          char *tt = token_text(s, t->tokens[i], r->token_ids);
          cJSON *e = cJSON_CreateObject();
          cJSON_AddStringToObject(e, "token", tt ? tt : "");
          cJSON_AddNumberToObject(e, "logprob", t->logprobs[i]);
          cJSON *bytes = cJSON_AddArrayToObject(e, "bytes");
          char *raw = token_text(s, t->tokens[i], 0);
          for (const unsigned char *p = (const unsigned char *)raw; p && *p; p++)
            cJSON_AddItemToArray(bytes, cJSON_CreateNumber(*p));
          cJSON_AddArrayToObject(e, "top_logprobs");
          cJSON_AddItemToArray(content, e);
          free(tt);
          free(raw);
        }
      } else {
        cJSON *toks = cJSON_AddArrayToObject(lp, "tokens"), *lps = cJSON_AddArrayToObject(lp, "token_logprobs");
        cJSON *off = cJSON_AddArrayToObject(lp, "text_offset");
        cJSON_AddNullToObject(lp, "top_logprobs");
        size_t at = 0;
        for (int i = 0; i < t->n; i++) {
          char *tt = token_text(s, t->tokens[i], r->token_ids), *raw = token_text(s, t->tokens[i], 0);
          cJSON_AddItemToArray(toks, cJSON_CreateString(tt ? tt : ""));
          cJSON_AddItemToArray(lps, cJSON_CreateNumber(t->logprobs[i]));
          cJSON_AddItemToArray(off, cJSON_CreateNumber((double)at));
          at += raw ? strlen(raw) : 0;
          free(tt);
          free(raw);
        }
      }
    } else {
      cJSON_AddNullToObject(ch, "logprobs");
    }
    cJSON_AddStringToObject(ch, "finish_reason", t->stopped ? "stop" : "length");
    cJSON *u = cJSON_AddObjectToObject(o, "usage");
    cJSON_AddNumberToObject(u, "prompt_tokens", r->nprompt);
    cJSON_AddNumberToObject(u, "completion_tokens", t->n);
    cJSON_AddNumberToObject(u, "total_tokens", r->nprompt + t->n);
    cJSON_AddNumberToObject(o, "policy_version", (double)s->version);
    free(text);
    send_json(r->conn, 200, o);
  }
  req_free(r); /* closes the session: allowed inside its callback */
  start_next(s);
}

static int start(server_t *s, req_t *r) {
  int rc = lt_gen_open(s->b, r->seed, &r->g);
  if (rc == 0) rc = lt_gen_turn(r->g, r->prompt, r->nprompt, r->max_new, &r->sp, on_turn, r);
  if (rc < 0) return rc;
  s->active++;
  return 0;
}

static void start_next(server_t *s) {
  while (s->qhead && s->active < s->slots) {
    req_t *r = s->qhead;
    s->qhead = r->next;
    if (!s->qhead) s->qtail = NULL;
    if (!lt_http_conn_alive(r->conn)) { /* the client gave up while queued */
      lt_http_respond(r->conn, 499, NULL, "", 0);
      req_free(r);
      continue;
    }
    if (start(s, r) < 0) {
      send_error(r->conn, 500, NULL, "%s", lt_error_msg());
      req_free(r);
    }
  }
}

static int num_field(const cJSON *o, const char *k, double def, double lo, double hi, double *out, lt_http_conn_t *c) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  if (!v || cJSON_IsNull(v)) {
    *out = def;
    return 0;
  }
  if (!cJSON_IsNumber(v) || v->valuedouble < lo || v->valuedouble > hi) {
    send_error(c, 400, k, "'%s' must be a number in [%g, %g]", k, lo, hi);
    return -1;
  }
  *out = v->valuedouble;
  return 0;
}

/* The prompt of a completion: a string, token ids, or a one-element list of either. */
static int parse_prompt(server_t *s, req_t *r, const cJSON *p) {
  if (cJSON_IsArray(p) && cJSON_GetArraySize(p) == 1 && !cJSON_IsNumber(p->child)) p = p->child;
  if (cJSON_IsString(p)) return lt_ids_text(s->tok, p->valuestring, &r->prompt, &r->nprompt, &r->cap);
  if (!cJSON_IsArray(p)) return lt_error_set(LT_EINVAL, "'prompt' must be a string or a list of token ids (n = 1)");
  for (const cJSON *e = p->child; e; e = e->next) {
    if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble >= s->info.vocab ||
        (int64_t)e->valuedouble != e->valuedouble)
      return lt_error_set(LT_EINVAL, "'prompt' token ids must be integers in [0, %d)", s->info.vocab);
    int rc = lt_ids_push(&r->prompt, &r->nprompt, &r->cap, (int32_t)e->valuedouble);
    if (rc < 0) return rc;
  }
  return 0;
}

static int parse_messages(server_t *s, req_t *r, const cJSON *msgs) {
  if (!cJSON_IsArray(msgs) || !msgs->child) return lt_error_set(LT_EINVAL, "'messages' must be a non-empty list");
  if (s->chat) {
    cJSON *vars = cJSON_CreateObject();
    char *text = NULL;
    size_t len;
    int rc = vars && cJSON_AddItemReferenceToObject(vars, "messages", (cJSON *)msgs) && cJSON_AddTrueToObject(vars, "add_generation_prompt")
                 ? lt_chat_template_render(s->chat, vars, &text, &len)
                 : lt_error_set(LT_ENOMEM, "out of memory");
    if (rc == 0) rc = lt_ids_text(s->tok, text, &r->prompt, &r->nprompt, &r->cap);
    else if (rc == LT_EINVAL) lt_error_wrap(rc, "chat template");
    free(text);
    cJSON_Delete(vars);
    return rc;
  }
  for (const cJSON *m = msgs->child; m; m = m->next) {
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role"), *content = cJSON_GetObjectItemCaseSensitive(m, "content");
    if (!cJSON_IsString(role) || !(cJSON_IsString(content) || cJSON_IsNull(content)))
      return lt_error_set(LT_EINVAL, "each message needs a string 'role' and a string 'content'");
    int rc = lt_chat_message(s->tok, lt_role_parse(role->valuestring), cJSON_IsString(content) ? content->valuestring : "",
                             &r->prompt, &r->nprompt, &r->cap);
    if (rc < 0) return rc;
  }
  return lt_chat_open(s->tok, LT_ROLE_ASSISTANT, &r->prompt, &r->nprompt, &r->cap);
}

static void on_generate(server_t *s, lt_http_conn_t *c, const cJSON *body, int chat) {
  req_t *r = calloc(1, sizeof *r);
  if (!r) {
    send_error(c, 500, NULL, "out of memory");
    return;
  }
  r->s = s;
  r->conn = c;
  r->chat = chat;
  double n, temp, top_p, top_k, max_tokens, seed, lp = 0;
  const cJSON *mt = cJSON_GetObjectItemCaseSensitive(body, "max_completion_tokens");
  if (num_field(body, "n", 1, 1, 1, &n, c) || num_field(body, "temperature", 1, 0, 100, &temp, c) ||
      num_field(body, "top_p", 1, 1e-9, 1, &top_p, c) || num_field(body, "top_k", 0, -1, 1 << 24, &top_k, c) ||
      num_field(body, mt ? "max_completion_tokens" : "max_tokens", chat ? s->info.max_context : 16, 0, 1 << 24,
                &max_tokens, c) ||
      num_field(body, "seed", (double)(s->seed_base + s->served + (uint64_t)s->active), 0, 9007199254740991.0, &seed, c)) {
    req_free(r);
    return;
  }
  const cJSON *lpv = cJSON_GetObjectItemCaseSensitive(body, "logprobs");
  if (chat) {
    if (lpv && !cJSON_IsNull(lpv) && !cJSON_IsBool(lpv)) {
      send_error(c, 400, "logprobs", "'logprobs' must be a boolean in chat completions");
      req_free(r);
      return;
    }
    lp = cJSON_IsTrue(lpv);
  } else if (num_field(body, "logprobs", -1, 0, 20, &lp, c)) {
    req_free(r);
    return;
  } else {
    lp = lp >= 0; /* the chosen token's logprob; top alternatives are not computed */
  }
  static const char *unsupported[] = {"stop", "echo", "stream", "suffix", "best_of", "tools", "logit_bias"};
  for (size_t i = 0; i < sizeof unsupported / sizeof *unsupported; i++) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(body, unsupported[i]);
    if (v && !cJSON_IsNull(v) && !cJSON_IsFalse(v) && !(cJSON_IsArray(v) && !v->child)) {
      send_error(c, 400, unsupported[i], "'%s' is not supported by longtail serve", unsupported[i]);
      req_free(r);
      return;
    }
  }
  const cJSON *model = cJSON_GetObjectItemCaseSensitive(body, "model");
  if (cJSON_IsString(model) && model->valuestring[0] && strcmp(model->valuestring, s->model)) {
    send_error(c, 404, "model", "model '%s' is not served here (this server has '%s')", model->valuestring, s->model);
    req_free(r);
    return;
  }
  int rc = chat ? parse_messages(s, r, cJSON_GetObjectItemCaseSensitive(body, "messages"))
                : parse_prompt(s, r, cJSON_GetObjectItemCaseSensitive(body, "prompt"));
  if (rc == 0 && r->nprompt == 0) rc = lt_error_set(LT_EINVAL, "the prompt is empty");
  if (rc == 0 && r->nprompt >= s->info.max_context)
    rc = lt_error_set(LT_ERANGE, "the prompt (%d tokens) fills the context of %d", r->nprompt, s->info.max_context);
  if (rc < 0) {
    send_error(c, 400, chat ? "messages" : "prompt", "%s", lt_error_msg());
    req_free(r);
    return;
  }
  int room = s->info.max_context - r->nprompt;
  r->max_new = (int)max_tokens < room ? (int)max_tokens : room;
  r->sp = (lt_sampling_t){.temperature = (float)temp, .top_p = (float)top_p, .top_k = top_k > 0 ? (int)top_k : 0};
  r->seed = (uint64_t)seed;
  r->logprobs = (int)lp;
  r->token_ids = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(body, "return_tokens_as_token_ids"));
  if (s->qtail) s->qtail->next = r;
  else s->qhead = r;
  s->qtail = r;
  start_next(s);
}


/* The whole checkpoint loads (config, every tensor, all finite) and fits the
 * served model, before the answer says so: the reload itself happens later,
 * at a token boundary, where a failure could no longer be reported. */
static int verify_checkpoint(server_t *s, const char *dir, const char *sha256) {
  if (!lt_fs_is_dir(dir)) return lt_error_set(LT_ENOENT, "%s: not a checkpoint directory", dir);
  char st[4200];
  snprintf(st, sizeof st, "%s/model.safetensors", dir);
  if (sha256 && sha256[0]) {
    char got[65];
    int rc = lt_sha256_file(st, got);
    if (rc < 0) return rc;
    if (strcmp(got, sha256)) return lt_error_set(LT_ECORRUPT, "%s: sha256 %s, not the announced %s", st, got, sha256);
  }
  lt_model_t *m;
  int rc = lt_model_load(dir, &m);
  if (rc < 0) return rc;
  lt_backend_info_t bi;
  lt_backend_info(s->b, &bi);
  if (m->cfg.vocab != bi.vocab)
    rc = lt_error_set(LT_EINVAL, "%s: vocabulary of %d, the served model has %d", dir, m->cfg.vocab, bi.vocab);
  lt_model_free(m);
  return rc;
}

static void on_request(lt_http_conn_t *c, const lt_http_req_t *req, void *ud) {
  server_t *s = ud;
  char path[256];
  snprintf(path, sizeof path, "%s", req->path);
  char *q = strchr(path, '?');
  if (q) *q = 0;
  int get = !strcmp(req->method, "GET"), post = !strcmp(req->method, "POST");
  if (!strcmp(path, "/health")) {
    static const char ok[] = "{\"status\":\"ok\"}";
    lt_http_respond(c, 200, "application/json", ok, sizeof ok - 1);
  } else if (!strcmp(path, "/v1/models") && get) {
    cJSON *o = cJSON_CreateObject(), *m = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "data"), m);
    cJSON_AddStringToObject(m, "id", s->model);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", 0);
    cJSON_AddStringToObject(m, "owned_by", "longtail");
    cJSON_AddNumberToObject(m, "max_model_len", s->info.max_context);
    send_json(c, 200, o);
  } else if ((!strcmp(path, "/v1/completions") || !strcmp(path, "/v1/chat/completions") ||
              !strcmp(path, "/update_weights_from_disk")) && post) {
    cJSON *body = NULL;
    if (lt_json_parse(req->body, req->body_len, "request body", &body) < 0 || !cJSON_IsObject(body)) {
      send_error(c, 400, NULL, "%s", body ? "the body must be a JSON object" : lt_error_msg());
      cJSON_Delete(body);
      return;
    }
    if (!strcmp(path, "/update_weights_from_disk")) {
      /* SGLang's name and fields ("model_path"); "path" as longtail workers send it. */
      const cJSON *p = cJSON_GetObjectItemCaseSensitive(body, "model_path");
      if (!cJSON_IsString(p)) p = cJSON_GetObjectItemCaseSensitive(body, "path");
      const cJSON *sha = cJSON_GetObjectItemCaseSensitive(body, "sha256");
      if (!cJSON_IsString(p)) {
        send_error(c, 400, "model_path", "'model_path' (a checkpoint directory) is required");
      } else if (verify_checkpoint(s, p->valuestring, cJSON_IsString(sha) ? sha->valuestring : NULL) < 0) {
        send_error(c, 400, "model_path", "%s", lt_error_msg());
      } else if (lt_backend_reload(s->b, p->valuestring, cJSON_IsString(sha) ? sha->valuestring : NULL,
                                   s->version + 1) < 0) {
        send_error(c, 500, NULL, "%s", lt_error_msg());
      } else {
        s->version++;
        LT_INFO("serve", "weights from %s (version %lld), applied at the next token boundary", p->valuestring,
                (long long)s->version);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddBoolToObject(o, "success", 1);
        cJSON_AddNumberToObject(o, "version", (double)s->version);
        send_json(c, 200, o);
      }
    } else {
      on_generate(s, c, body, path[4] == 'c' && path[5] == 'h');
    }
    cJSON_Delete(body);
  } else if (!strcmp(path, "/v1/models") || !strcmp(path, "/v1/completions") || !strcmp(path, "/v1/chat/completions") ||
             !strcmp(path, "/update_weights_from_disk")) {
    send_error(c, 405, NULL, "%s does not take %s", path, req->method);
  } else {
    send_error(c, 404, NULL, "no route %s (try /v1/completions, /v1/chat/completions, /v1/models, /health)", path);
  }
}

static void on_stopped(void *ud) { (void)ud; }

static void on_signal(uv_signal_t *h, int sig) {
  server_t *s = h->data;
  LT_INFO("serve", "signal %d: stopping", sig);
  /* Requests in flight or queued are dropped with their connections. */
  while (s->qhead) {
    req_t *r = s->qhead;
    s->qhead = r->next;
    req_free(r);
  }
  s->qtail = NULL;
  lt_http_close(s->http, on_stopped, NULL);
  lt_backend_close(s->b, on_stopped, NULL);
  uv_close((uv_handle_t *)&s->sigint, NULL);
  uv_close((uv_handle_t *)&s->sigterm, NULL);
}

int lt_cmd_serve(int argc, char **argv) {
  lt_arg_t args[] = {
      {.name = "--model", .kind = LT_ARG_VALUE, .metavar = "DIR", .help = "checkpoint directory (HF layout)"},
      {.name = "--port", .kind = LT_ARG_VALUE, .metavar = "P", .help = "TCP port (default 8000; 0: any free port, printed)"},
      {.name = "--host", .kind = LT_ARG_VALUE, .metavar = "IP", .help = "address to listen on (default 127.0.0.1)"},
      {.name = "--slots", .kind = LT_ARG_VALUE, .metavar = "N", .help = "requests generated at once (default 8); more wait"},
      {.name = "--max-context", .kind = LT_ARG_VALUE, .metavar = "N", .help = "tokens per request, prompt included (default: the model's)"},
      {.name = "--name", .kind = LT_ARG_VALUE, .metavar = "ID", .help = "model id in answers and /v1/models (default: the directory's name)"},
      {.name = "--seed", .kind = LT_ARG_VALUE, .metavar = "S", .help = "base of per-request seeds when a request gives none (default 0)"},
  };
  lt_cmd_args_t c = {.command = "serve",
                     .usage = "--model DIR [--port P] [--host IP] [--slots N] [--max-context N] [--name ID]",
                     .summary = "Serves the builtin engine over an OpenAI-compatible HTTP API: POST /v1/completions "
                                "and /v1/chat/completions (logprobs of the sampled tokens, return_tokens_as_token_ids), "
                                "GET /v1/models and /health, POST /update_weights_from_disk {\"model_path\": DIR}.",
                     .args = args,
                     .nargs = 7,
                     .min_pos = 0,
                     .max_pos = 0};
  int rc = lt_args_parse(&c, argc, argv);
  if (rc) return rc == 1 ? 0 : rc;
  const char *dir = lt_args_str(&c, "--model", NULL);
  if (!dir) return lt_args_usage_error(&c, "--model DIR is required");
  long long port, slots, maxctx, seed;
  if ((rc = lt_args_long(&c, "--port", 8000, 0, 65535, &port)) || (rc = lt_args_long(&c, "--slots", 8, 1, 4096, &slots)) ||
      (rc = lt_args_long(&c, "--max-context", 0, 0, 1 << 24, &maxctx)) ||
      (rc = lt_args_long(&c, "--seed", 0, 0, 1LL << 62, &seed)))
    return rc;
  server_t *s = calloc(1, sizeof *s);
  if (!s) return LT_EXIT_FAIL;
  s->slots = (int)slots;
  s->seed_base = (uint64_t)seed;
  const char *name = lt_args_str(&c, "--name", NULL);
  if (name) snprintf(s->model, sizeof s->model, "%s", name);
  else lt_path_base(dir, s->model, sizeof s->model);
  uv_loop_init(&s->loop);
  lt_log_set_process("serve");
  lt_backend_opts_t bo = {.kind = "builtin", .model_dir = dir, .device = "cpu", .threads = lt_cli_threads(),
                          .max_sessions = s->slots, .max_context = (int)maxctx};
  if ((rc = lt_backend_create(&s->loop, &bo, &s->b)) < 0) {
    rc = lt_cli_fail("serve", rc);
    uv_loop_close(&s->loop);
    free(s);
    return rc;
  }
  s->tok = lt_backend_tokenizer(s->b);
  lt_backend_info(s->b, &s->info);
  if ((rc = lt_chat_template_load(dir, &s->chat)) < 0 && rc != LT_ENOENT) {
    rc = lt_cli_fail("serve", rc);
    lt_backend_close(s->b, NULL, NULL);
    uv_run(&s->loop, UV_RUN_DEFAULT);
    uv_loop_close(&s->loop);
    free(s);
    return rc;
  }
  const char *host = lt_args_str(&c, "--host", "127.0.0.1");
  lt_http_opts_t ho = {.host = host, .port = (int)port, .max_body = 16u << 20, .max_conns = 1024, .timeout_ms = 30000};
  if ((rc = lt_http_listen(&s->loop, &ho, on_request, s, &s->http)) < 0) {
    rc = lt_cli_fail("serve", rc);
    lt_backend_close(s->b, NULL, NULL);
    uv_run(&s->loop, UV_RUN_DEFAULT);
    uv_loop_close(&s->loop);
    lt_chat_template_free(s->chat);
    free(s);
    return rc;
  }
  uv_signal_init(&s->loop, &s->sigint);
  uv_signal_init(&s->loop, &s->sigterm);
  s->sigint.data = s->sigterm.data = s;
  uv_signal_start(&s->sigint, on_signal, SIGINT);
  uv_signal_start(&s->sigterm, on_signal, SIGTERM);
  /* The address on stdout, so a script that asked for port 0 learns the port. */
  printf("http://%s:%d\n", host, lt_http_port(s->http));
  fflush(stdout);
  LT_INFO("serve", "model %s (%s), context %d, %d slots, %s", s->model, dir, s->info.max_context, s->slots,
          s->chat ? "its own chat template" : "ChatML");
  uv_run(&s->loop, UV_RUN_DEFAULT);
  uv_loop_close(&s->loop);
  lt_chat_template_free(s->chat);
  free(s);
  return 0;
}
