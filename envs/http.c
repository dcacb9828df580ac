/* The `http` environment: the external protocol (envs/protocol.c) over HTTP —
 * each reset and step is one POST of the request to params.endpoint, answered
 * with the JSON object.  Requests run on the worker's loop through libcurl
 * multi (net/http.h), with the client's timeout and retries on 5xx, 429 and
 * lost connections; an endpoint that stays silent on a step ends the episode as
 * the policy's failure (tool_timeout), one that answers an error fails it (env_error). */
#include <stdlib.h>
#include <string.h>

#include "envs/internal.h"
#include "net/http.h"
#include "util/error.h"

typedef struct {
  char domain[64];
  char *url;
  lt_httpc_opts_t opts;
  lt_httpc_t *http; /* made on the loop at the first request */
} http_state_t;

static int http_init(const char *dom, const cJSON *p, uint64_t seed, void **state) {
  const cJSON *url = cJSON_GetObjectItemCaseSensitive(p, "endpoint"),
              *t = cJSON_GetObjectItemCaseSensitive(p, "timeout_ms");
  const cJSON *r = cJSON_GetObjectItemCaseSensitive(p, "retries");
  if (!cJSON_IsString(url) || strncmp(url->valuestring, "http", 4) != 0)
    return lt_error_set(LT_ECONFIG, "envs.%s.params.endpoint: expected the environment's URL (http://host:port/path)",
                        dom);
  if ((t && (!cJSON_IsNumber(t) || t->valuedouble < 1)) || (r && (!cJSON_IsNumber(r) || r->valuedouble < 0)))
    return lt_error_set(LT_ECONFIG, "envs.%s.params: timeout_ms must be >= 1 and retries >= 0", dom);
  http_state_t *s = calloc(1, sizeof *s);
  if (!s || !(s->url = strdup(url->valuestring))) {
    free(s);
    return lt_error_set(LT_ENOMEM, "http env: out of memory");
  }
  snprintf(s->domain, sizeof s->domain, "%s", dom);
  s->opts = (lt_httpc_opts_t){
      .timeout_ms = t ? (int)t->valuedouble : 30000, .retries = r ? (int)r->valuedouble : 2, .backoff_ms = 200};
  *state = s;
  return 0;
}

static void http_shutdown(void *state) {
  http_state_t *s = state;
  if (s->http) lt_httpc_close(s->http, NULL, NULL);
  s->http = NULL;
}

static void http_free(void *state) {
  http_state_t *s = state;
  if (!s) return;
  free(s->url);
  free(s);
}

static int post(lt_episode_t *ep, cJSON *req, lt_httpc_cb cb) {
  http_state_t *s = ep->state;
  int rc = s->http ? 0 : lt_httpc_create(lt__envs_loop(ep->envs), &s->http);
  char *body = rc == 0 ? cJSON_PrintUnformatted(req) : NULL;
  cJSON_Delete(req);
  if (rc < 0) return rc;
  if (!body) return lt_error_set(LT_ENOMEM, "http env: out of memory");
  lt_httpc_req_t *r;
  rc = lt_httpc_request(s->http, s->url, body, &s->opts, cb, ep, &r);
  free(body);
  if (rc == 0) ep->io = r;
  return rc;
}

static void on_reset(int rc, long status, const char *body, size_t len, const char *err, void *ud) {
  lt_episode_t *ep = ud;
  http_state_t *s = ep->state;
  ep->io = NULL;
  cJSON *a = NULL, *msgs = NULL;
  if (rc < 0) rc = lt_error_set(rc, "envs.%s: reset: %s", s->domain, err ? err : lt_strerror(rc));
  else if ((rc = lt__envproto_parse(s->domain, body, len, &a)) == 0) rc = lt__envproto_opened(ep, s->domain, a, &msgs);
  cJSON_Delete(a);
  lt__episode_opened(ep, rc, msgs);
}

static int http_open_async(void *state, lt_episode_t *ep, const cJSON *spec, uint64_t seed) {
  return post(ep, lt__envproto_reset(spec, seed), on_reset);
}

static void on_step(int rc, long status, const char *body, size_t len, const char *err, void *ud) {
  lt_episode_t *ep = ud;
  http_state_t *s = ep->state;
  ep->io = NULL;
  cJSON *a = NULL;
  if (rc == LT_ETIMEDOUT) { /* the environment did not answer the policy's tool calls in time: the policy's failure */
    ep->result.observations = cJSON_CreateArray();
    ep->result.timeout = "tool_timeout";
    ep->result.done = 1;
    rc = 0;
  } else if (rc < 0) {
    rc = lt_error_set(rc, "envs.%s: step: %s", s->domain, err ? err : lt_strerror(rc));
  } else if ((rc = lt__envproto_parse(s->domain, body, len, &a)) == 0) {
    lt__envproto_stepped(ep, a, ep->work_ncalls, &ep->result);
  }
  cJSON_Delete(a);
  lt__episode_stepped(ep, rc);
}

static int http_step_async(lt_episode_t *ep, const char *text, const lt_tool_call_t *calls, int ncalls) {
  return post(ep, lt__envproto_step(ep, text, calls, ncalls), on_step);
}

static void http_cancel(lt_episode_t *ep) {
  if (ep->io) lt_httpc_cancel(ep->io);
  ep->io = NULL;
}

const lt_env_impl_t lt__env_http = {
    .type = "http",
    .init = http_init,
    .free = http_free,
    .sample = lt__envproto_sample,
    .close = lt__envproto_close,
    .open_async = http_open_async,
    .step_async = http_step_async,
    .cancel = http_cancel,
    .shutdown = http_shutdown,
};
