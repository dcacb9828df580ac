/* The configured domains and the episode plumbing every environment shares. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "envs/env.h"
#include "util/error.h"
#include "util/rng.h"
#include "util/sha256.h"

typedef struct {
  char *name;
  const lt_env_impl_t *impl;
  void *state;
  double weight;
} domain_t;

struct lt_envs {
  domain_t *d;
  int n;
  uv_loop_t *loop;
  lt_sandbox_limits_t sandbox;
  int pool_size;
  lt_sandbox_pool_t *pool;
  pthread_mutex_t pool_mu;
};

static const lt_env_impl_t *const impls[] = {&lt__env_arith, &lt__env_code, &lt__env_tools};

int lt__envs_pool(lt_envs_t *e, lt_sandbox_pool_t **out) {
  pthread_mutex_lock(&e->pool_mu);
  int rc = e->pool ? 0 : lt_sandbox_pool_create(&e->sandbox, e->pool_size, &e->pool);
  *out = e->pool;
  pthread_mutex_unlock(&e->pool_mu);
  return rc;
}

static const lt_env_impl_t *find_impl(const char *type) {
  for (size_t i = 0; i < sizeof impls / sizeof impls[0]; i++)
    if (strcmp(impls[i]->type, type) == 0) return impls[i];
  return NULL;
}

static uint64_t name_seed(uint64_t run_seed, const char *name) {
  char hex[65];
  lt_sha256_buf(name, strlen(name), hex);
  return lt_rng_mix(run_seed, strtoull(hex + 48, NULL, 16));
}

int lt_envs_create(const lt_config_t *cfg, uv_loop_t *loop, lt_envs_t **out) {
  *out = NULL;
  const cJSON *map = lt_config_get(cfg, "envs");
  lt_envs_t *e = calloc(1, sizeof *e);
  if (!e) return lt_error_set(LT_ENOMEM, "envs: out of memory");
  e->loop = loop;
  lt_sandbox_limits_from_config(cfg, &e->sandbox);
  e->pool_size = (int)lt_config_int(cfg, "sandbox.pool");
  pthread_mutex_init(&e->pool_mu, NULL);
  int n = map ? cJSON_GetArraySize(map) : 0;
  if (n == 0) {
    free(e);
    return lt_error_set(LT_ECONFIG, "envs: no environment configured");
  }
  e->d = calloc((size_t)n, sizeof *e->d);
  if (!e->d) {
    free(e);
    return lt_error_set(LT_ENOMEM, "envs: out of memory");
  }
  uint64_t seed = (uint64_t)lt_config_int(cfg, "run.seed");
  int rc = 0;
  for (const cJSON *d = map->child; d && rc == 0; d = d->next) {
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(d, "type");
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(d, "weight");
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(d, "params");
    if (!cJSON_IsString(ty)) {
      rc = lt_error_set(LT_ECONFIG, "envs.%s.type: missing", d->string);
      break;
    }
    domain_t *dom = &e->d[e->n];
    dom->impl = find_impl(ty->valuestring);
    if (!dom->impl) {
      rc = lt_error_set(LT_ECONFIG, "envs.%s.type: environment '%s' is not available in this build", d->string,
                        ty->valuestring);
      break;
    }
    if (params && !cJSON_IsObject(params)) {
      rc = lt_error_set(LT_ECONFIG, "envs.%s.params: expected object", d->string);
      break;
    }
    dom->weight = cJSON_IsNumber(w) ? w->valuedouble : 1.0;
    if (!(dom->name = strdup(d->string))) {
      rc = lt_error_set(LT_ENOMEM, "envs: out of memory");
      break;
    }
    cJSON *empty = params ? NULL : cJSON_CreateObject();
    rc = dom->impl->init(dom->name, params ? params : empty, name_seed(seed, dom->name), &dom->state);
    cJSON_Delete(empty);
    if (rc == 0) e->n++;
    else free(dom->name);
  }
  if (rc < 0) {
    lt_envs_free(e);
    return rc;
  }
  *out = e;
  return 0;
}

void lt_envs_free(lt_envs_t *e) {
  if (!e) return;
  for (int i = 0; i < e->n; i++) {
    e->d[i].impl->free(e->d[i].state);
    free(e->d[i].name);
  }
  free(e->d);
  lt_sandbox_pool_free(e->pool);
  pthread_mutex_destroy(&e->pool_mu);
  free(e);
}

int lt_envs_count(const lt_envs_t *e) { return e->n; }
const char *lt_envs_name(const lt_envs_t *e, int i) { return e->d[i].name; }
double lt_envs_weight(const lt_envs_t *e, int i) { return e->d[i].weight; }

static domain_t *find(const lt_envs_t *e, const char *name) {
  for (int i = 0; i < e->n; i++)
    if (strcmp(e->d[i].name, name) == 0) return &e->d[i];
  lt_error_set(LT_ENOENT, "no environment domain '%s'", name);
  return NULL;
}

const char *lt_envs_type(const lt_envs_t *e, const char *domain) {
  domain_t *d = find(e, domain);
  return d ? d->impl->type : NULL;
}

int lt_envs_sample(lt_envs_t *e, const char *domain, uint64_t index, int eval, cJSON **spec) {
  domain_t *d = find(e, domain);
  if (!d) return LT_ENOENT;
  return d->impl->sample(d->state, index, eval, spec);
}

int lt_envs_demo(lt_envs_t *e, const char *domain, uint64_t index, cJSON **messages, char **response) {
  domain_t *d = find(e, domain);
  if (!d) return LT_ENOENT;
  if (!d->impl->demo) return lt_error_set(LT_EUNSUPP, "environment '%s' has no demonstrations", d->impl->type);
  return d->impl->demo(d->state, index, messages, response);
}

int lt_episode_open(lt_envs_t *e, const char *domain, const cJSON *spec, uint64_t seed, lt_episode_t **out,
                    cJSON **messages) {
  *out = NULL;
  *messages = NULL;
  domain_t *d = find(e, domain);
  if (!d) return LT_ENOENT;
  if (!cJSON_IsObject(spec)) return lt_error_set(LT_EINVAL, "%s: task spec must be an object", domain);
  lt_episode_t *ep = calloc(1, sizeof *ep);
  if (!ep) return lt_error_set(LT_ENOMEM, "episode: out of memory");
  ep->envs = e;
  ep->domain = d;
  ep->state = d->state;
  int rc = d->impl->open(d->state, ep, spec, seed, messages);
  if (rc < 0) {
    if (d->impl->close) d->impl->close(ep);
    cJSON_Delete(ep->reference);
    free(ep);
    cJSON_Delete(*messages);
    *messages = NULL;
    return rc;
  }
  if (e->loop) {
    uv_timer_init(e->loop, &ep->timer);
    ep->timer.data = ep;
  }
  *out = ep;
  return 0;
}

static void deliver(uv_timer_t *t) {
  lt_episode_t *ep = t->data;
  ep->pending = 0;
  lt_env_step_t res = ep->result;
  memset(&ep->result, 0, sizeof ep->result);
  ep->cb(ep, &res, ep->ud);
}

static void calls_free(lt_tool_call_t *c, int n) {
  for (int i = 0; c && i < n; i++) {
    for (int k = 0; k < c[i].nargs; k++) free(c[i].args[k].name), free(c[i].args[k].value);
    free(c[i].args);
    free(c[i].name);
  }
  free(c);
}

static lt_tool_call_t *calls_copy(const lt_tool_call_t *c, int n) {
  lt_tool_call_t *o = n ? calloc((size_t)n, sizeof *o) : NULL;
  int ok = !n || o;
  for (int i = 0; ok && i < n; i++) {
    o[i].name = strdup(c[i].name);
    o[i].args = c[i].nargs ? calloc((size_t)c[i].nargs, sizeof *o[i].args) : NULL;
    o[i].nargs = o[i].args ? c[i].nargs : 0;
    ok = o[i].name && (!c[i].nargs || o[i].args);
    for (int k = 0; ok && k < o[i].nargs; k++)
      ok = (o[i].args[k].name = strdup(c[i].args[k].name)) && (o[i].args[k].value = strdup(c[i].args[k].value));
  }
  if (!ok) {
    calls_free(o, n);
    return NULL;
  }
  return o;
}

/* An environment failure is a result (status env_error), not a caller error. */
static void settle(lt_episode_t *ep, int rc) {
  if (rc < 0) {
    cJSON_Delete(ep->result.observations);
    memset(&ep->result, 0, sizeof ep->result);
    ep->result.error = rc;
    ep->result.error_msg = strdup(lt_error_msg());
  }
  if (!ep->result.observations) ep->result.observations = cJSON_CreateArray();
}

static void on_closed(uv_handle_t *h) { free(h->data); }

static void work_step(uv_work_t *w) {
  lt_episode_t *ep = w->data;
  domain_t *d = ep->domain;
  int rc = d->impl->step(ep, ep->work_text, ep->work_calls, ep->work_ncalls, &ep->result);
  if (rc < 0) settle(ep, rc); /* here: the error detail is this thread's */
}

static void work_done(uv_work_t *w, int status) {
  lt_episode_t *ep = w->data;
  free(ep->work_text);
  calls_free((lt_tool_call_t *)ep->work_calls, ep->work_ncalls);
  ep->work_text = NULL;
  ep->work_calls = NULL;
  if (ep->closed) { /* closed while on the thread pool: finish the close now */
    lt_episode_close(ep);
    return;
  }
  settle(ep, status == UV_ECANCELED ? lt_error_set(LT_ECANCELED, "step cancelled") : 0);
  ep->pending = 0;
  lt_env_step_t res = ep->result;
  memset(&ep->result, 0, sizeof ep->result);
  ep->cb(ep, &res, ep->ud);
}

int lt_episode_step(lt_episode_t *ep, const char *text, const lt_tool_call_t *calls, int ncalls, lt_env_step_cb cb,
                    void *ud) {
  if (!ep->envs->loop) return lt_error_set(LT_EINVAL, "episode step needs an event loop");
  if (ep->pending) return lt_error_set(LT_EBUSY, "episode: a step is already in flight");
  domain_t *d = ep->domain;
  memset(&ep->result, 0, sizeof ep->result);
  if (d->impl->blocking) {
    ep->work_text = strdup(text);
    ep->work_calls = calls_copy(calls, ncalls);
    ep->work_ncalls = ncalls;
    if (!ep->work_text || (ncalls && !ep->work_calls)) {
      free(ep->work_text);
      ep->work_text = NULL;
      return lt_error_set(LT_ENOMEM, "episode: out of memory");
    }
    ep->cb = cb;
    ep->ud = ud;
    ep->pending = 1;
    ep->work.data = ep;
    int rc = uv_queue_work(ep->envs->loop, &ep->work, work_step, work_done);
    if (rc == 0) return 0;
    ep->pending = 0;
    free(ep->work_text);
    calls_free((lt_tool_call_t *)ep->work_calls, ncalls);
    ep->work_text = NULL;
    ep->work_calls = NULL;
    return lt_error_set(LT_ESYS, "episode: cannot queue the step: %s", uv_strerror(rc));
  }
  settle(ep, d->impl->step(ep, text, calls, ncalls, &ep->result));
  ep->cb = cb;
  ep->ud = ud;
  ep->pending = 1;
  return uv_timer_start(&ep->timer, deliver, 0, 0) == 0 ? 0 : lt_error_set(LT_ESYS, "episode: cannot start timer");
}

const cJSON *lt_episode_reference(const lt_episode_t *ep) { return ep->reference; }

void lt_episode_close(lt_episode_t *ep) {
  if (!ep) return;
  if (ep->work_text) { /* a blocking step is queued or running: cancel it or let it end, then close */
    ep->closed = 1;
    uv_cancel((uv_req_t *)&ep->work);
    return;
  }
  domain_t *d = ep->domain;
  if (d->impl->close) d->impl->close(ep);
  cJSON_Delete(ep->reference);
  ep->reference = NULL;
  cJSON_Delete(ep->result.observations);
  free(ep->result.error_msg);
  memset(&ep->result, 0, sizeof ep->result);
  if (ep->envs->loop) {
    uv_timer_stop(&ep->timer);
    uv_close((uv_handle_t *)&ep->timer, on_closed);
  } else {
    free(ep);
  }
}
