/* The agent gateway's endpoint: one loopback HTTP server per worker, the
 * shared OpenAI layer behind it, and the table of live episode tokens.  Each
 * episode has its own base URL (/e/ID/v1) and token: a call is served only
 * when its token is the live token of the episode its URL names.  Every
 * program connects from loopback, so the URL is what tells one program's call
 * from another's: a token of another episode, live or ended, or an unknown
 * one gets a 401 and touches nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "rollout/gateway.h"
#include "util/error.h"
#include "util/log.h"

typedef struct {
  char token[65];
  unsigned id; /* the episode's /e/ID/ in its base URL */
  lt_gateway_session_t *session;
} entry_t;

struct lt_gateway {
  lt_http_server_t *http;
  lt_oai_t *oai;
  lt_gateway_session_ops_t ops;
  int port;
  unsigned next_id, cur_id; /* cur_id: the episode the request being handled names */
  entry_t *e;
  int n, cap;
};

static int gateway_authorize(void *ud, const char *bearer, void **session) {
  lt_gateway_t *gw = ud;
  if (!bearer || !bearer[0])
    return lt_error_set(LT_EINVAL,
                        "missing API key: send the episode's key (OPENAI_API_KEY) as a bearer token or X-Api-Key");
  for (int i = 0; i < gw->n; i++)
    if (!strcmp(gw->e[i].token, bearer)) {
      if (gw->e[i].id != gw->cur_id)
        return lt_error_set(
            LT_EINVAL,
            "this API key belongs to another episode: call your own OPENAI_BASE_URL with your own OPENAI_API_KEY");
      *session = gw->e[i].session;
      return 0;
    }
  return lt_error_set(LT_EINVAL, "unknown API key: no live episode has this token (it ended, or never existed)");
}

/* The layer's hooks carry the session as void *: it is always an lt_gateway_session_t the owner made. */
static int gateway_prepare(void *ud, lt_oai_plan_t *plan) {
  return ((lt_gateway_t *)ud)->ops.prepare(plan->session, plan);
}

static int gateway_generate(void *ud, lt_oai_gen_t *g, const lt_oai_job_t *job, void **handle) {
  *handle = job->plan->session;
  return ((lt_gateway_t *)ud)->ops.generate(job->plan->session, g, job);
}

static void gateway_cancel(void *ud, void *handle) { ((lt_gateway_t *)ud)->ops.cancel(handle); }

static void gateway_context_limit(void *ud, void *session, int need, int max_context) {
  ((lt_gateway_t *)ud)->ops.context_limit(session, need, max_context);
}

static void gateway_answered(void *ud, const lt_oai_result_t *r) {
  ((lt_gateway_t *)ud)->ops.answered(r->plan->session, r);
}

static void gateway_on_request(lt_http_conn_t *c, const lt_http_req_t *req, void *ud) {
  lt_gateway_t *gw = ud;
  /* /e/ID/v1/... : the layer sees /v1/... and gateway_authorize() checks the token against episode ID. */
  unsigned id = 0;
  int used = 0;
  if (sscanf(req->path, "/e/%u%n", &id, &used) == 1 && used > 3 && req->path[used] == '/' && id > 0) {
    lt_http_req_t r = *req;
    r.path = req->path + used;
    gw->cur_id = id;
    int handled = lt_oai_handle(gw->oai, c, &r);
    gw->cur_id = 0;
    if (handled) return;
  }
  lt_oai_send_no_route(c, req, "/e/ID", NULL);
}

int lt_gateway_create(uv_loop_t *loop, const lt_gateway_opts_t *o, lt_gateway_t **out) {
  *out = NULL;
  lt_gateway_t *gw = calloc(1, sizeof *gw);
  if (!gw) return lt_error_set(LT_ENOMEM, "gateway: out of memory");
  gw->ops = o->ops;
  uint64_t seed = 0;
  if (getrandom(&seed, sizeof seed, 0) != (ssize_t)sizeof seed) seed = (uint64_t)(uintptr_t)gw;
  lt_oai_opts_t oo = {.tok = o->tok,
                      .chat = o->chat,
                      .tool_format = o->tool_format,
                      .model = "longtail-policy",
                      .vocab = o->vocab,
                      .max_context = o->max_context,
                      .seed_base = seed,
                      .hooks = {.ud = gw,
                                .authorize = gateway_authorize,
                                .prepare = gateway_prepare,
                                .generate = gateway_generate,
                                .cancel = gateway_cancel,
                                .context_limit = gateway_context_limit,
                                .answered = gateway_answered}};
  int rc = lt_oai_create(&oo, &gw->oai);
  /* Agent programs send long system prompts and tool schemas: bodies up to 16 MiB. */
  /* Several connections per episode (SDKs keep a pool), so one program's idle ones never crowd out the others'. */
  int conns = o->slots > 0 ? 4 * o->slots : 256;
  lt_http_opts_t ho = {.host = "127.0.0.1",
                       .port = 0,
                       .max_body = 16u << 20,
                       .max_conns = conns < 256 ? 256 : conns,
                       .timeout_ms = 60000};
  if (rc == 0) rc = lt_http_listen(loop, &ho, gateway_on_request, gw, &gw->http);
  if (rc < 0) {
    lt_gateway_close(gw);
    return lt_error_wrap(rc, "agent gateway");
  }
  gw->port = lt_http_port(gw->http);
  LT_INFO("gateway", "agent programs call http://127.0.0.1:%d/e/ID/v1", gw->port);
  *out = gw;
  return 0;
}

int lt_gateway_port(const lt_gateway_t *gw) { return gw->port; }

int lt_gateway_admit(lt_gateway_t *gw, lt_gateway_session_t *session, char token[65], char url[LT_GATEWAY_URL_MAX]) {
  unsigned char raw[24];
  if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw)
    return lt_error_set(LT_EIO, "gateway: no random bytes for a token");
  memcpy(token, "lt-", 3);
  for (size_t i = 0; i < sizeof raw; i++) snprintf(token + 3 + 2 * i, 3, "%02x", raw[i]);
  if (gw->n == gw->cap) {
    int cap = gw->cap ? 2 * gw->cap : 16;
    entry_t *e = realloc(gw->e, sizeof *e * (size_t)cap);
    if (!e) return lt_error_set(LT_ENOMEM, "gateway: out of memory");
    gw->e = e, gw->cap = cap;
  }
  memcpy(gw->e[gw->n].token, token, 65);
  gw->e[gw->n].id = ++gw->next_id ? gw->next_id : ++gw->next_id; /* 0 names no episode */
  snprintf(url, LT_GATEWAY_URL_MAX, "http://127.0.0.1:%d/e/%u/v1", gw->port, gw->e[gw->n].id);
  gw->e[gw->n++].session = session;
  return 0;
}

void lt_gateway_revoke(lt_gateway_t *gw, lt_gateway_session_t *session) {
  for (int i = 0; gw && i < gw->n; i++)
    if (gw->e[i].session == session) gw->e[i--] = gw->e[--gw->n];
}

void lt_gateway_set_version(lt_gateway_t *gw, int64_t version) {
  if (gw) lt_oai_set_version(gw->oai, version);
}

void lt_gateway_close(lt_gateway_t *gw) {
  if (!gw) return;
  if (gw->oai) lt_oai_free(gw->oai);
  if (gw->http) lt_http_close(gw->http, NULL, NULL);
  free(gw->e);
  free(gw);
}
