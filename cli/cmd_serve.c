/* `longtail serve --model DIR [--port P]`: the builtin engine behind the
 * OpenAI-compatible layer (infer/oai.h: /v1/completions,
 * /v1/chat/completions, /v1/messages, /v1/responses, /v1/models), plus /health and SGLang's
 * /update_weights_from_disk, on one libuv loop.  Each choice is a fresh
 * engine session; concurrent ones share batched decode steps through the
 * rollout backend, and beyond --slots they wait in FIFO order. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/commands.h"
#include "net/signals.h"
#include "text/chat_template.h"
#include "learner/lora.h"
#include "learner/model.h"
#include "text/tokenizer.h"
#include "net/http.h"
#include "infer/backend.h"
#include "infer/oai.h"
#include "util/buf.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/json.h"
#include "util/log.h"
#include "util/sha256.h"

typedef struct server server_t;

/* One choice being generated: a fresh session of the builtin engine. */
typedef struct job {
  server_t *s;
  lt_oai_gen_t *og;
  const lt_oai_plan_t *plan;
  uint64_t seed;
  lt_gen_t *g;
  struct job *prev, *next; /* queued or running */
} job_t;

struct server {
  uv_loop_t loop;
  lt_http_server_t *http;
  lt_backend_t *b;
  lt_chat_template_t *chat; /* the checkpoint's own; NULL: ChatML */
  lt_oai_t *oai;
  lt_backend_info_t info;
  char model[256];
  int slots, active;
  job_t *queue, *running; /* queue: FIFO, head first */
  uv_timer_t kick;        /* starts queued jobs after a cancellation */
  int64_t version;
  uv_signal_t sigint, sigterm;
};

static void unlink_job(job_t **list, job_t *j) {
  if (j->prev) j->prev->next = j->next;
  else *list = j->next;
  if (j->next) j->next->prev = j->prev;
  j->prev = j->next = NULL;
}

static int on_token(lt_gen_t *g, int32_t token, float logprob, int ntop, const int32_t *ids, const float *lps,
                    void *ud) {
  job_t *j = ud;
  lt_oai_token_t t = {.token = token, .logprob = logprob, .ntop = ntop, .top_ids = ids, .top_logprobs = lps};
  return lt_oai_gen_token(j->og, &t);
}

static void start_next(server_t *s);

static void on_turn(lt_gen_t *g, const lt_turn_t *t, const lt_prefill_routing_t *pre, void *ud) {
  job_t *j = ud;
  server_t *s = j->s;
  unlink_job(&s->running, j);
  s->active--;
  lt_gen_close(j->g); /* closing the session inside its callback is allowed */
  lt_oai_gen_t *og = j->og;
  free(j);
  lt_oai_gen_end(og, t->error, t->stopped, t->error ? (t->error_msg ? t->error_msg : lt_strerror(t->error)) : NULL);
  start_next(s);
}

/* The request's `model` chooses a LoRA adapter loaded under that name (vLLM's convention); any other name is the
 * served model itself. */
static int lora_choose(job_t *j) {
  const cJSON *m = cJSON_GetObjectItemCaseSensitive(j->plan->body, "model");
  int rc = cJSON_IsString(m) ? lt_gen_adapter(j->g, m->valuestring) : 0;
  if (rc == LT_ENOENT || rc == LT_EUNSUPP) lt_error_clear();
  return rc == LT_ENOENT || rc == LT_EUNSUPP ? 0 : rc;
}

static int start(job_t *j) {
  server_t *s = j->s;
  int rc = lt_gen_open(s->b, j->seed, &j->g);
  if (rc == 0 && (rc = lora_choose(j)) < 0) lt_gen_close(j->g);
  if (rc < 0) return rc;
  lt_gen_watch(j->g, j->plan->top_logprobs, on_token, j);
  if ((rc = lt_gen_turn(j->g, j->plan->prompt, j->plan->nprompt, j->plan->max_new, &j->plan->sp, on_turn, j)) < 0) {
    lt_gen_close(j->g);
    return rc;
  }
  j->next = s->running;
  if (s->running) s->running->prev = j;
  s->running = j;
  s->active++;
  return 0;
}

/* Runs on the loop only (never inside a layer call): a failure to start ends
 * that choice, which may end its call. */
static void start_next(server_t *s) {
  while (s->queue && s->active < s->slots) {
    job_t *j = s->queue;
    unlink_job(&s->queue, j);
    int rc = start(j);
    if (rc < 0) {
      lt_oai_gen_t *og = j->og;
      free(j);
      lt_oai_gen_end(og, rc, 0, lt_error_msg());
    }
  }
}

static void on_kick(uv_timer_t *t) { start_next(t->data); }

static int serve_generate(void *ud, lt_oai_gen_t *og, const lt_oai_job_t *job, void **handle) {
  server_t *s = ud;
  job_t *j = calloc(1, sizeof *j);
  if (!j) return lt_error_set(LT_ENOMEM, "out of memory");
  *j = (job_t){.s = s, .og = og, .plan = job->plan, .seed = job->seed};
  *handle = j;
  if (!s->queue && s->active < s->slots) { /* a free slot: start now, failures are this call's */
    int rc = start(j);
    if (rc < 0) free(j);
    return rc;
  }
  job_t **at = &s->queue; /* beyond --slots: wait in FIFO order */
  job_t *last = NULL;
  while (*at) last = *at, at = &(*at)->next;
  *at = j;
  j->prev = last;
  return 0;
}

static void serve_cancel(void *ud, void *handle) {
  server_t *s = ud;
  job_t *j = handle;
  if (j->g) {
    unlink_job(&s->running, j);
    s->active--;
    lt_gen_close(j->g);
    uv_timer_start(&s->kick, on_kick, 0, 0); /* a slot is free; not from inside the layer's call */
  } else {
    unlink_job(&s->queue, j);
  }
  free(j);
}

/* The whole checkpoint loads (config, every tensor, all finite) and fits the
 * served model, before the answer says so: the reload itself happens later,
 * at a token boundary, where a failure could no longer be reported. */
static int verify_checkpoint(server_t *s, const char *dir, const char *sha256) {
  if (!lt_fs_is_dir(dir)) return lt_error_set(LT_ENOENT, "%s: not a checkpoint directory", dir);
  char st[4200];
  snprintf(st, sizeof st, "%s/%s", dir, lt_model_weights_file(dir)); /* an adapter's file for a LoRA version */
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

/* The JSON object a POST route takes, or NULL when the request was answered with an error (405, 400). */
static cJSON *post_body(lt_http_conn_t *c, const lt_http_req_t *req, const char *path) {
  if (strcmp(req->method, "POST")) {
    lt_oai_send_error(c, 405, NULL, NULL, "%s does not take %s", path, req->method);
    return NULL;
  }
  cJSON *body = NULL;
  if (lt_json_parse(req->body, req->body_len, "request body", &body) < 0 || !cJSON_IsObject(body)) {
    lt_oai_send_error(c, 400, NULL, NULL, "%s", body ? "the body must be a JSON object" : lt_error_msg());
    cJSON_Delete(body);
    return NULL;
  }
  return body;
}

/* POST /v1/load_lora_adapter {"lora_name", "lora_path"} and /v1/unload_lora_adapter {"lora_name"}, in vLLM's shapes
 * and answers (a plain-text success, an OpenAI error naming what failed).  Returns 0 when path is neither. */
static int lora_route(server_t *s, lt_http_conn_t *c, const lt_http_req_t *req, const char *path) {
  int load = !strcmp(path, "/v1/load_lora_adapter");
  if (!load && strcmp(path, "/v1/unload_lora_adapter")) return 0;
  cJSON *body = post_body(c, req, path);
  if (!body) return 1;
  const cJSON *name = cJSON_GetObjectItemCaseSensitive(body, "lora_name");
  const cJSON *dir = cJSON_GetObjectItemCaseSensitive(body, "lora_path");
  int rc = 0;
  if (!cJSON_IsString(name) || (load && !cJSON_IsString(dir)))
    lt_oai_send_error(c, 400, cJSON_IsString(name) ? "lora_path" : "lora_name", NULL, "'%s' is required",
                      cJSON_IsString(name) ? "lora_path" : "lora_name");
  else if ((rc = load ? lt_backend_adapter_load(s->b, name->valuestring, dir->valuestring)
                      : lt_backend_adapter_unload(s->b, name->valuestring)) < 0)
    lt_oai_send_error(c, rc == LT_ENOENT && !load ? 404 : 400, load ? "lora_path" : "lora_name", NULL, "%s",
                      lt_error_msg());
  else {
    char msg[512];
    int n = snprintf(msg, sizeof msg, "Success: LoRA adapter '%s' %s successfully.", name->valuestring,
                     load ? "added" : "removed");
    LT_INFO("serve", "LoRA adapter %s %s%s", name->valuestring, load ? "loaded from " : "unloaded",
            load ? dir->valuestring : "");
    lt_http_respond(c, 200, "text/plain", msg, (size_t)(n < (int)sizeof msg ? n : (int)sizeof msg - 1));
  }
  cJSON_Delete(body);
  return 1;
}

static void on_request(lt_http_conn_t *c, const lt_http_req_t *req, void *ud) {
  server_t *s = ud;
  const char *path = req->path;
  if (!strcmp(path, "/health")) {
    static const char ok[] = "{\"status\":\"ok\"}";
    lt_http_respond(c, 200, "application/json", ok, sizeof ok - 1);
  } else if (!strcmp(path, "/update_weights_from_disk")) {
    cJSON *body = post_body(c, req, path);
    if (!body) return;
    /* SGLang's name and fields ("model_path"); "path" as longtail workers send it. */
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(body, "model_path");
    if (!cJSON_IsString(p)) p = cJSON_GetObjectItemCaseSensitive(body, "path");
    const cJSON *sha = cJSON_GetObjectItemCaseSensitive(body, "sha256");
    if (!cJSON_IsString(p)) {
      lt_oai_send_error(c, 400, "model_path", NULL, "'model_path' (a checkpoint directory) is required");
    } else if (verify_checkpoint(s, p->valuestring, cJSON_IsString(sha) ? sha->valuestring : NULL) < 0) {
      lt_oai_send_error(c, 400, "model_path", NULL, "%s", lt_error_msg());
    } else if (lt_backend_reload(s->b, p->valuestring, cJSON_IsString(sha) ? sha->valuestring : NULL, s->version + 1) <
               0) {
      lt_oai_send_error(c, 500, NULL, NULL, "%s", lt_error_msg());
    } else {
      s->version++;
      lt_oai_set_version(s->oai, s->version);
      LT_INFO("serve", "weights from %s (version %lld), applied at the next token boundary", p->valuestring,
              (long long)s->version);
      cJSON *o = cJSON_CreateObject();
      cJSON_AddBoolToObject(o, "success", 1);
      cJSON_AddNumberToObject(o, "version", (double)s->version);
      char *txt = cJSON_PrintUnformatted(o);
      if (txt) lt_http_respond(c, 200, "application/json", txt, strlen(txt));
      else lt_http_respond(c, 500, NULL, "out of memory\n", 14);
      free(txt);
      cJSON_Delete(o);
    }
    cJSON_Delete(body);
  } else if (lora_route(s, c, req, path)) {
  } else if (!lt_oai_handle(s->oai, c, req)) {
    lt_oai_send_no_route(c, req, "",
                         "GET /health, POST /update_weights_from_disk, POST /v1/load_lora_adapter, "
                         "POST /v1/unload_lora_adapter");
  }
}

static void on_stopped(void *ud) { (void)ud; }

static void on_signal(uv_signal_t *h, int sig) {
  server_t *s = h->data;
  LT_INFO("serve", "signal %d: stopping", sig);
  /* Requests in flight or queued are answered 503 and their generations dropped. */
  lt_oai_free(s->oai);
  s->oai = NULL;
  uv_close((uv_handle_t *)&s->kick, NULL);
  lt_http_close(s->http, on_stopped, NULL);
  lt_backend_close(s->b, on_stopped, NULL);
  uv_close((uv_handle_t *)&s->sigint, NULL);
  uv_close((uv_handle_t *)&s->sigterm, NULL);
}

/* --lora NAME=DIR, each. */
static int lora_preload(server_t *s, const lt_arg_t *a) {
  for (int i = 0; i < a->nvalues; i++) {
    const char *eq = strchr(a->values[i], '=');
    char name[128];
    if (!eq || eq == a->values[i] || !eq[1] || (size_t)(eq - a->values[i]) >= sizeof name)
      return lt_error_set(LT_EINVAL, "--lora %s: expected NAME=DIR", a->values[i]);
    snprintf(name, sizeof name, "%.*s", (int)(eq - a->values[i]), a->values[i]);
    int rc = lt_backend_adapter_load(s->b, name, eq + 1);
    if (rc < 0) return lt_error_wrap(rc, "--lora %s", name);
    LT_INFO("serve", "LoRA adapter %s from %s", name, eq + 1);
  }
  return 0;
}

/* Releases what setup made so far (the loop runs to let handles close). */
static int setup_failed(server_t *s, int rc) {
  rc = lt_cli_fail("serve", rc);
  lt_oai_free(s->oai);
  uv_close((uv_handle_t *)&s->kick, NULL);
  if (s->b) lt_backend_close(s->b, NULL, NULL);
  uv_run(&s->loop, UV_RUN_DEFAULT);
  uv_loop_close(&s->loop);
  lt_chat_template_free(s->chat);
  free(s);
  return rc;
}

int lt_cmd_serve(int argc, char **argv) {
  lt_arg_t args[] = {
      {.name = "--model", .kind = LT_ARG_VALUE, .metavar = "DIR", .help = "checkpoint directory (HF layout)"},
      {.name = "--port",
       .kind = LT_ARG_VALUE,
       .metavar = "P",
       .help = "TCP port (default 8000; 0: any free port, printed)"},
      {.name = "--host", .kind = LT_ARG_VALUE, .metavar = "IP", .help = "address to listen on (default 127.0.0.1)"},
      {.name = "--slots",
       .kind = LT_ARG_VALUE,
       .metavar = "N",
       .help = "requests generated at once (default 8); more wait"},
      {.name = "--max-context",
       .kind = LT_ARG_VALUE,
       .metavar = "N",
       .help = "tokens per request, prompt included (default: the model's)"},
      {.name = "--name",
       .kind = LT_ARG_VALUE,
       .metavar = "ID",
       .help = "model id in answers and /v1/models (default: the directory's name)"},
      {.name = "--seed",
       .kind = LT_ARG_VALUE,
       .metavar = "S",
       .help = "base of per-request seeds when a request gives none (default 0)"},
      {.name = "--lora",
       .kind = LT_ARG_MULTI,
       .metavar = "NAME=DIR",
       .help = "a LoRA adapter (PEFT's layout, e.g. a LoRA run's version) a request selects with \"model\": NAME; "
               "repeatable; more load at run time with POST /v1/load_lora_adapter"},
      {.name = "--scripted",
       .kind = LT_ARG_VALUE,
       .metavar = "TEXT",
       .help = "serve the scripted fake policy instead of the model, for testing agent programs: each answer is filler "
               "then TEXT (a tool call, say); --model then only lends its chat template"},
  };
  lt_cmd_args_t c = {.command = "serve",
                     .usage =
                         "--model DIR [--port P] [--host IP] [--slots N] [--max-context N] [--name ID] "
                         "[--lora NAME=DIR]... [--scripted TEXT]",
                     .summary =
                         "Serves the builtin engine over an OpenAI-compatible HTTP API: POST /v1/completions "
                         "and /v1/chat/completions (stream, stop, n, seed, tools, logprobs and top_logprobs, "
                         "return_tokens_as_token_ids), Anthropic's POST /v1/messages (and count_tokens), "
                         "OpenAI's POST /v1/responses, GET /v1/models, /v1/models/{id} and /health, "
                         "POST /update_weights_from_disk {\"model_path\": DIR}, /v1/load_lora_adapter and "
                         "/v1/unload_lora_adapter.  See docs/serve.md and docs/lora.md.",
                     .args = args,
                     .nargs = 9,
                     .min_pos = 0,
                     .max_pos = 0};
  int rc = lt_args_parse(&c, argc, argv);
  if (rc) return rc == 1 ? 0 : rc;
  const char *dir = lt_args_str(&c, "--model", NULL);
  if (!dir) return lt_args_usage_error(&c, "--model DIR is required");
  long long port, slots, maxctx, seed;
  if ((rc = lt_args_long(&c, "--port", 8000, 0, 65535, &port)) ||
      (rc = lt_args_long(&c, "--slots", 8, 1, 4096, &slots)) ||
      (rc = lt_args_long(&c, "--max-context", 0, 0, 1 << 24, &maxctx)) ||
      (rc = lt_args_long(&c, "--seed", 0, 0, 1LL << 62, &seed)))
    return rc;
  server_t *s = calloc(1, sizeof *s);
  if (!s) return LT_EXIT_FAIL;
  s->slots = (int)slots;
  const char *name = lt_args_str(&c, "--name", NULL);
  if (name) snprintf(s->model, sizeof s->model, "%s", name);
  else lt_path_base(dir, s->model, sizeof s->model);
  if ((rc = uv_loop_init(&s->loop)) != 0) {
    free(s);
    return lt_cli_fail("serve", lt_error_set(LT_ESYS, "its event loop: %s", uv_strerror(rc)));
  }
  LT_ASSERT(uv_timer_init(&s->loop, &s->kick) == 0, "uv_timer_init");
  s->kick.data = s;
  lt_log_set_process("serve");
  const char *scripted = lt_args_str(&c, "--scripted", NULL);
  lt_backend_opts_t bo = {.kind = scripted ? "scripted" : "builtin",
                          .model_dir = dir,
                          .device = "cpu",
                          .threads = lt_cli_threads(),
                          .max_sessions = s->slots,
                          .max_context = (int)maxctx,
                          .mean_tokens = 8,
                          .answer = scripted};
  if ((rc = lt_backend_create(&s->loop, &bo, &s->b)) < 0) return setup_failed(s, rc);
  if ((rc = lora_preload(s, lt_args_get(&c, "--lora"))) < 0) return setup_failed(s, rc);
  lt_backend_info(s->b, &s->info);
  if ((rc = lt_chat_template_load(dir, &s->chat)) < 0 && rc != LT_ENOENT) return setup_failed(s, rc);
  lt_oai_opts_t oo = {.tok = lt_backend_tokenizer(s->b),
                      .chat = s->chat,
                      .model = s->model,
                      .vocab = s->info.vocab,
                      .max_context = s->info.max_context,
                      .seed_base = (uint64_t)seed,
                      .tool_format = lt_toolcall_format_detect(s->chat ? lt_chat_template_source(s->chat, 1) : NULL),
                      .hooks = {.ud = s, .generate = serve_generate, .cancel = serve_cancel}};
  if ((rc = lt_oai_create(&oo, &s->oai)) < 0) return setup_failed(s, rc);
  const char *host = lt_args_str(&c, "--host", "127.0.0.1");
  lt_http_opts_t ho = {.host = host, .port = (int)port, .max_body = 16u << 20, .max_conns = 1024, .timeout_ms = 30000};
  if ((rc = lt_http_listen(&s->loop, &ho, on_request, s, &s->http)) < 0) return setup_failed(s, rc);
  if ((rc = lt_signals_watch(&s->loop, &s->sigint, &s->sigterm, on_signal, s)) < 0) {
    lt_http_close(s->http, NULL, NULL);
    return setup_failed(s, rc);
  }
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
