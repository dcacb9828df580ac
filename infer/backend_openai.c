/* An OpenAI-compatible completions server (vLLM, `longtail serve`) as
 * a worker backend.  The server is stateless, so each turn sends the whole
 * context as token ids to /v1/completions and asks for the sampled tokens'
 * ids and logprobs (`return_tokens_as_token_ids`, `logprobs`); a token a
 * trainer cannot attribute to an id is an error, never a guess.  Requests run
 * on the worker's loop through the curl multi adapter (net/http.h).
 *
 * The model directory gives the tokenizer and the context length; the
 * server must serve the same weights (after each WEIGHTS message the worker
 * POSTs {"path", "model_path"} to workers.openai.reload_url when set).  With
 * workers.openai.lora a LoRA run's versions go to the server as adapters by
 * name instead (vLLM's /v1/load_lora_adapter {"lora_name", "lora_path"}, as
 * `longtail serve` has it): once loaded, requests name the version's
 * adapter; the one before it stays loaded for requests still running, older
 * ones are unloaded. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "learner/lora.h"
#include "learner/model.h"
#include "net/http.h"
#include "infer/internal.h"
#include "util/buf.h"
#include "util/error.h"
#include "util/json.h"
#include "util/log.h"

typedef struct {
  lt_httpc_t *cli;
  char url[1024], reload_url[1024], model[256];
  lt_httpc_opts_t ho;
  /* workers.openai.lora */
  int lora;
  char base_model[256]; /* workers.openai.model: what a version without adapter is asked as */
  char lora_url[1024], unload_url[1024];
  char loaded[2][128];                    /* the adapters on the server: the version in use and the one before */
  char loading[128];                      /* the name being loaded */
  int64_t named_version, loading_version; /* the versions of model and loading: what a request's tokens are */
} state_t;

typedef struct {
  int32_t *ctx; /* the whole context so far */
  int n, cap;
  lt_httpc_req_t *inflight;
  int ready; /* tokens of an answer were pushed; decode consumes the flag */
  uint64_t seed;
  int64_t version; /* workers.openai.lora: the version the request in flight named, -1: none */
} sess_t;

static int o_init(lt_backend_t *b, const lt_backend_opts_t *o) {
  if (!o->endpoint || !o->endpoint[0])
    return lt_error_set(LT_ECONFIG, "backend openai: workers.openai.endpoint is empty (e.g. http://127.0.0.1:8000)");
  if (!o->model_dir || !o->model_dir[0])
    return lt_error_set(LT_ECONFIG, "backend openai: a model directory is needed for the tokenizer (--model)");
  char cfgp[4200];
  snprintf(cfgp, sizeof cfgp, "%s/config.json", o->model_dir);
  lt_model_config_t mc;
  int rc = lt_model_config_load(cfgp, &mc);
  if (rc < 0) return rc;
  lt_tokenizer_t *tok;
  if ((rc = lt_tokenizer_for_model(o->model_dir, mc.vocab, &tok)) < 0) return rc;
  state_t *s = calloc(1, sizeof *s);
  if (!s) {
    lt_tokenizer_free(tok);
    return lt_error_set(LT_ENOMEM, "backend openai: out of memory");
  }
  if ((rc = lt_httpc_create(b->loop, &s->cli)) < 0) {
    lt_tokenizer_free(tok);
    free(s);
    return rc;
  }
  size_t el = strlen(o->endpoint);
  while (el && o->endpoint[el - 1] == '/') el--;
  snprintf(s->url, sizeof s->url, "%.*s/v1/completions", (int)el, o->endpoint);
  snprintf(s->reload_url, sizeof s->reload_url, "%s", o->reload_url ? o->reload_url : "");
  snprintf(s->model, sizeof s->model, "%s", o->model ? o->model : "");
  snprintf(s->base_model, sizeof s->base_model, "%s", s->model);
  s->lora = o->lora;
  s->named_version = o->version;
  snprintf(s->lora_url, sizeof s->lora_url, "%.*s/v1/load_lora_adapter", (int)el, o->endpoint);
  snprintf(s->unload_url, sizeof s->unload_url, "%.*s/v1/unload_lora_adapter", (int)el, o->endpoint);
  s->ho = (lt_httpc_opts_t){
      .timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : 120000, .retries = o->retries, .backoff_ms = 250};
  b->state = s;
  b->own_tok = tok;
  b->tok = tok;
  b->info.vocab = mc.vocab;
  b->info.max_context = o->max_context > 0 && o->max_context < mc.max_pos ? o->max_context : mc.max_pos;
  return 0;
}

static void o_fini(lt_backend_t *b) {
  state_t *s = b->state;
  lt_httpc_close(s->cli, NULL, NULL);
  free(s);
}

static int o_open(lt_backend_t *b, lt_gen_t *g, uint64_t seed) {
  sess_t *ss = calloc(1, sizeof *ss);
  if (!ss) return lt_error_set(LT_ENOMEM, "backend openai: out of memory");
  ss->seed = seed;
  g->impl = ss;
  return 0;
}

static void o_close(lt_gen_t *g) {
  sess_t *ss = g->impl;
  lt_httpc_cancel(ss->inflight);
  free(ss->ctx);
  free(ss);
}

static int o_prefill(lt_gen_t *g) {
  sess_t *ss = g->impl;
  for (int i = 0; i < g->nappend; i++) {
    int rc = lt_ids_push(&ss->ctx, &ss->n, &ss->cap, g->append[i]);
    if (rc < 0) return rc;
  }
  return 0;
}

/* "token_id:123" (vLLM's return_tokens_as_token_ids) → 123, else -1. */
static int32_t token_id(const cJSON *t, int vocab) {
  if (!cJSON_IsString(t) || strncmp(t->valuestring, "token_id:", 9)) return -1;
  char *end;
  long v = strtol(t->valuestring + 9, &end, 10);
  return *end || v < 0 || v >= vocab ? -1 : (int32_t)v;
}

static void on_answer(int rc, long status, const char *body, size_t len, const char *err, void *ud) {
  lt_gen_t *g = ud;
  sess_t *ss = g->impl;
  ss->inflight = NULL;
  cJSON *o = NULL;
  if (rc == 0 && lt_json_parse(body, len, "completion", &o) < 0) rc = LT_EPROTO;
  const cJSON *ch = rc ? NULL : cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(o, "choices"), 0);
  const cJSON *lp = cJSON_GetObjectItemCaseSensitive(ch, "logprobs");
  const cJSON *toks = cJSON_GetObjectItemCaseSensitive(lp, "tokens");
  const cJSON *lps = cJSON_GetObjectItemCaseSensitive(lp, "token_logprobs");
  if (rc == 0 && (!cJSON_IsArray(toks) || !cJSON_IsArray(lps) || cJSON_GetArraySize(toks) != cJSON_GetArraySize(lps))) {
    rc = lt_error_set(LT_EPROTO, "the answer has no choices[0].logprobs.tokens/token_logprobs of equal length");
  }
  int got = 0;
  for (const cJSON *t = rc ? NULL : toks->child, *l = rc ? NULL : lps->child; t && l; t = t->next, l = l->next) {
    int32_t id = token_id(t, g->b->info.vocab);
    if (id < 0) {
      rc = lt_error_set(LT_EPROTO,
                        "token %.40s is not \"token_id:N\" with N in the vocabulary: the server must honour "
                        "return_tokens_as_token_ids (vLLM, longtail serve)",
                        cJSON_IsString(t) ? t->valuestring : "?");
      break;
    }
    if ((rc = lt__gen_push(g, id, cJSON_IsNumber(l) ? (float)l->valuedouble : 0.f, 0, NULL, NULL, NULL)) < 0) break;
    if (ss->version >= 0) g->versions[g->n - 1] = (int32_t)ss->version; /* the adapter it asked for, not the newest */
    if ((rc = lt_ids_push(&ss->ctx, &ss->n, &ss->cap, id)) < 0) break;
    got++;
  }
  const cJSON *fr = cJSON_GetObjectItemCaseSensitive(ch, "finish_reason");
  if (rc == 0 && cJSON_IsString(fr) && !strcmp(fr->valuestring, "stop")) g->stopped = 1;
  if (rc == 0 && got == 0 && !g->stopped) rc = lt_error_set(LT_EPROTO, "the server returned no tokens");
  if (rc < 0) {
    g->error = rc;
    snprintf(g->error_msg, sizeof g->error_msg, "backend openai: %s", err ? err : lt_error_msg());
  }
  cJSON_Delete(o);
  ss->ready = 1;
  lt__gen_due(g, 0);
}

static int request(lt_gen_t *g) {
  state_t *s = g->b->state;
  sess_t *ss = g->impl;
  int room = g->b->info.max_context - ss->n, want = g->max_new - g->n;
  lt_buf_t body = {0};
  lt_buf_puts(&body, "{");
  ss->version = s->lora ? s->named_version : -1;
  if (s->model[0]) { /* servers with one model take a request without a name */
    lt_buf_puts(&body, "\"model\":");
    lt_json_quote(&body, s->model);
    lt_buf_puts(&body, ",");
  }
  lt_buf_puts(&body, "\"prompt\":");
  lt_json_i32_array(&body, ss->ctx, ss->n);
  lt_buf_printf(&body,
                ",\"max_tokens\":%d,\"temperature\":%.9g,\"top_p\":%.9g,\"seed\":%llu,\"logprobs\":1,"
                "\"return_tokens_as_token_ids\":true,\"skip_special_tokens\":false",
                want < room ? want : room, g->sp.temperature, g->sp.top_p,
                (unsigned long long)(ss->seed + (uint64_t)ss->n));
  if (g->sp.top_k > 0) lt_buf_printf(&body, ",\"top_k\":%d", g->sp.top_k);
  lt_buf_puts(&body, "}");
  if (body.oom) {
    lt_buf_free(&body);
    return lt_error_set(LT_ENOMEM, "backend openai: out of memory");
  }
  int rc = lt_httpc_request(s->cli, s->url, (const char *)body.data, &s->ho, on_answer, g, &ss->inflight);
  lt_buf_free(&body);
  if (rc == 0) g->due_ns = INT64_MAX / 2; /* asleep until the answer wakes the driver */
  return rc;
}

static int o_decode(lt_backend_t *b, lt_gen_t **gens, int n) {
  for (int i = 0; i < n; i++) {
    lt_gen_t *g = gens[i];
    sess_t *ss = g->impl;
    if (ss->inflight) continue;
    if (ss->ready) { /* an answer arrived; the driver checks whether the turn is over */
      ss->ready = 0;
      continue;
    }
    int rc = request(g);
    if (rc < 0) {
      g->error = rc;
      snprintf(g->error_msg, sizeof g->error_msg, "%s", lt_error_msg());
    }
  }
  return 0;
}

static void on_reloaded(int rc, long status, const char *body, size_t len, const char *err, void *ud) {
  if (rc < 0) LT_ERROR("backend", "weights reload request failed: %s", err);
}

/* POSTs {"k1": v1, "k2": v2} (k2 NULL: the first pair alone) to url; cb gets the answer. */
static int post_pair(state_t *s, const char *url, const char *k1, const char *v1, const char *k2, const char *v2,
                     lt_httpc_cb cb, void *ud) {
  lt_buf_t body = {0};
  lt_buf_putc(&body, '{');
  lt_json_quote(&body, k1);
  lt_buf_putc(&body, ':');
  lt_json_quote(&body, v1);
  if (k2) {
    lt_buf_putc(&body, ',');
    lt_json_quote(&body, k2);
    lt_buf_putc(&body, ':');
    lt_json_quote(&body, v2);
  }
  lt_buf_putc(&body, '}');
  int rc = body.oom ? lt_error_set(LT_ENOMEM, "backend openai: out of memory")
                    : lt_httpc_request(s->cli, url, (const char *)body.data, &s->ho, cb, ud, NULL);
  lt_buf_free(&body);
  return rc;
}

static void on_unloaded(int rc, long status, const char *body, size_t len, const char *err, void *ud) {
  if (rc < 0) LT_WARN("backend", "unloading an old LoRA adapter failed: %s", err);
}

/* The adapter is on the server: requests name it from now on (their tokens are its version's), and the one two
 * versions back goes. */
static void on_lora_loaded(int rc, long status, const char *body, size_t len, const char *err, void *ud) {
  state_t *s = ud;
  if (rc < 0) {
    LT_ERROR("backend", "loading the LoRA adapter %s into the server failed: %s", s->loading, err);
    return;
  }
  if (s->loaded[1][0] && post_pair(s, s->unload_url, "lora_name", s->loaded[1], NULL, NULL, on_unloaded, NULL) < 0)
    LT_WARN("backend", "cannot unload the LoRA adapter %s: %s", s->loaded[1], lt_error_msg());
  memcpy(s->loaded[1], s->loaded[0], sizeof s->loaded[1]);
  memcpy(s->loaded[0], s->loading, sizeof s->loaded[0]);
  snprintf(s->model, sizeof s->model, "%s", s->loading);
  s->named_version = s->loading_version;
}

/* workers.openai.lora: a version with an adapter is loaded by name ("longtail-vN", N from its folder); one without
 * (the base, v0) is asked for by workers.openai.model again. */
static int lora_reload(state_t *s, const char *dir, int64_t version) {
  if (!lt_lora_is_dir(dir)) {
    snprintf(s->model, sizeof s->model, "%s", s->base_model);
    s->named_version = version;
    return 0;
  }
  s->loading_version = version;
  const char *base = strrchr(dir, '/');
  snprintf(s->loading, sizeof s->loading, "longtail-%s", base && base[1] ? base + 1 : dir);
  return post_pair(s, s->lora_url, "lora_name", s->loading, "lora_path", dir, on_lora_loaded, s);
}

static int o_reload(lt_backend_t *b, const char *dir, const char *sha256) {
  state_t *s = b->state;
  if (s->lora) return lora_reload(s, dir, b->reload_version);
  if (!s->reload_url[0]) return 0; /* the server's weights are managed elsewhere */
  return post_pair(s, s->reload_url, "path", dir, "model_path", dir, on_reloaded, NULL);
}

const lt_backend_impl_t lt__backend_openai = {.init = o_init,
                                              .fini = o_fini,
                                              .open = o_open,
                                              .close = o_close,
                                              .prefill = o_prefill,
                                              .decode = o_decode,
                                              .reload = o_reload};
