/* The configured domains and the episode plumbing every environment shares. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "envs/internal.h"
#include "util/error.h"
#include "util/rng.h"
#include "util/sha256.h"

typedef struct {
  char *name;
  const lt_env_impl_t *impl;
  void *state;
  double weight;
  int group;   /* envs.<d>.group_size, 0 when unset */
  double pass; /* envs.<d>.pass_threshold, else 0.5 */
  lt__noise_t noise;
} domain_t;

struct lt_envs {
  domain_t *d;
  int n;
  uv_loop_t *loop;
  lt_sandbox_limits_t sandbox;
  int pool_size;
  lt_sandbox_pool_t *pool;
  pthread_mutex_t pool_mu;
  char *image_cache; /* where images unpack (swe, agent in an image) */
  int gateway_port;  /* what agent programs in an image reach */
};

static const lt_env_impl_t *const impls[] = {&lt__env_arith, &lt__env_code,    &lt__env_tools, &lt__env_external,
                                             &lt__env_http,  &lt__env_dataset, &lt__env_agent, &lt__env_swe};

int lt__envs_pool(lt_envs_t *e, lt_sandbox_pool_t **out) {
  pthread_mutex_lock(&e->pool_mu);
  int rc = e->pool ? 0 : lt_sandbox_pool_create(&e->sandbox, e->pool_size, &e->pool);
  *out = e->pool;
  pthread_mutex_unlock(&e->pool_mu);
  return rc;
}

const lt_sandbox_limits_t *lt__envs_boxes(const lt_envs_t *e, int *pool, const char **cache_dir, int *gateway_port) {
  *pool = e->pool_size;
  *cache_dir = e->image_cache;
  *gateway_port = e->gateway_port;
  return &e->sandbox;
}

void lt_envs_set_gateway(lt_envs_t *e, int port) { e->gateway_port = port; }

const lt_env_impl_t *lt__episode_impl(const lt_episode_t *ep) { return ((const domain_t *)ep->domain)->impl; }

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
  char cache[4096];
  lt_sandbox_image_cache(cfg, cache, sizeof cache);
  if (!(e->image_cache = strdup(cache))) {
    free(e);
    return lt_error_set(LT_ENOMEM, "envs: out of memory");
  }
  int n = map ? cJSON_GetArraySize(map) : 0;
  if (n == 0) {
    lt_envs_free(e);
    return lt_error_set(LT_ECONFIG, "envs: no environment configured");
  }
  e->d = calloc((size_t)n, sizeof *e->d);
  if (!e->d) {
    lt_envs_free(e);
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
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(d, "group_size");
    const cJSON *pass = cJSON_GetObjectItemCaseSensitive(d, "pass_threshold");
    dom->group = cJSON_IsNumber(g) ? (int)g->valuedouble : 0;
    dom->pass = cJSON_IsNumber(pass) ? pass->valuedouble : 0.5; /* as held-out accuracy counts one */
    if ((rc = lt__noise_parse(d->string, cJSON_GetObjectItemCaseSensitive(d, "noise"), &dom->noise)) < 0) break;
    if (!(dom->name = strdup(d->string))) {
      rc = lt_error_set(LT_ENOMEM, "envs: out of memory");
      break;
    }
    cJSON *empty = params ? NULL : cJSON_CreateObject();
    rc = dom->impl->init(dom->name, params ? params : empty, name_seed(seed, dom->name), &dom->state);
    cJSON_Delete(empty);
    if (rc == 0 && dom->impl->attach) dom->impl->attach(dom->state, e);
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
  free(e->image_cache);
  free(e);
}

void lt_envs_shutdown(lt_envs_t *e) {
  for (int i = 0; e && i < e->n; i++)
    if (e->d[i].impl->shutdown) e->d[i].impl->shutdown(e->d[i].state);
}

uv_loop_t *lt__envs_loop(lt_envs_t *e) { return e->loop; }

int lt_envs_count(const lt_envs_t *e) { return e->n; }
const char *lt_envs_name(const lt_envs_t *e, int i) { return e->d[i].name; }
double lt_envs_weight(const lt_envs_t *e, int i) { return e->d[i].weight; }
int lt_envs_group_size(const lt_envs_t *e, int i, int dflt) { return e->d[i].group ? e->d[i].group : dflt; }
double lt_envs_pass_threshold(const lt_envs_t *e, int i) { return i >= 0 ? e->d[i].pass : 0.5; }

int lt_envs_index(const lt_envs_t *e, const char *domain) {
  for (int i = 0; i < e->n; i++)
    if (strcmp(e->d[i].name, domain) == 0) return i;
  return -1;
}

static domain_t *find(const lt_envs_t *e, const char *name) {
  int i = lt_envs_index(e, name);
  if (i >= 0) return &e->d[i];
  lt_error_set(LT_ENOENT, "no environment domain '%s'", name);
  return NULL;
}

const char *lt_envs_type(const lt_envs_t *e, const char *domain) {
  domain_t *d = find(e, domain);
  return d ? d->impl->type : NULL;
}

int lt_envs_needs_sandbox(const lt_envs_t *e, const char *domain) {
  domain_t *d = find(e, domain);
  return d && d->impl->sandbox;
}

const lt_sandbox_limits_t *lt_envs_sandbox(const lt_envs_t *e) { return &e->sandbox; }

int lt_envs_max_turns(const lt_envs_t *e, const char *domain) {
  domain_t *d = find(e, domain);
  return d && d->impl->max_turns ? d->impl->max_turns(d->state) : 0;
}

const lt_envs_agent_t *lt_envs_agent(const lt_envs_t *e, const char *domain) {
  domain_t *d = find(e, domain);
  return d && d->impl == &lt__env_agent ? lt__agent_params(d->state) : NULL;
}

int lt_envs_sample(lt_envs_t *e, const char *domain, uint64_t index, int eval, cJSON **spec) {
  domain_t *d = find(e, domain);
  if (!d) return LT_ENOENT;
  int rc = d->impl->sample(d->state, index, eval, spec);
  /* Evaluation stays clean: robustness is trained, accuracy is measured as is. */
  if (rc == 0 && d->noise.on && !eval) cJSON_AddNumberToObject(*spec, "noise_level", lt__noise_level(&d->noise, index));
  return rc;
}

int lt_envs_noise_record(lt_envs_t *e, int i, const cJSON *spec, int success, double *level, double *gap) {
  const cJSON *lvl = cJSON_GetObjectItemCaseSensitive(spec, "noise_level");
  if (i < 0 || i >= e->n || !cJSON_IsNumber(lvl) || !lt__noise_record(&e->d[i].noise, lvl->valuedouble, success))
    return 0;
  *level = e->d[i].noise.level;
  *gap = e->d[i].noise.last_gap;
  return 1;
}

void lt_envs_noise_resume(lt_envs_t *e, int i, double level) {
  lt__noise_t *n = &e->d[i].noise;
  if (n->on && level > n->level) n->level = level < 1 ? level : 1;
}

int lt_envs_demo(lt_envs_t *e, const char *domain, uint64_t index, cJSON **messages, char **response) {
  domain_t *d = find(e, domain);
  if (!d) return LT_ENOENT;
  if (!d->impl->demo) return lt_error_set(LT_EUNSUPP, "environment '%s' has no demonstrations", d->impl->type);
  return d->impl->demo(d->state, index, messages, response);
}

static void on_closed(uv_handle_t *h);
static void settle(lt_episode_t *ep, int rc);
static void noise_after(lt_episode_t *ep, lt_env_step_t *res);

/* The instruction noise on an opening chat. */
static void open_noise(lt_episode_t *ep, int rc, const cJSON *spec, uint64_t seed, cJSON **messages) {
  domain_t *d = ep->domain;
  const cJSON *lvl = cJSON_GetObjectItemCaseSensitive(spec, "noise_level");
  ep->noise_level = d->noise.on && cJSON_IsNumber(lvl) ? lvl->valuedouble : -1;
  lt_rng_seed(&ep->noise_rng, lt_rng_mix(seed, 0x6e6f697365ull));
  for (cJSON *m = rc == 0 && ep->noise_level > 0 && *messages ? (*messages)->child : NULL; m; m = m->next) {
    cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role"), *c = cJSON_GetObjectItemCaseSensitive(m, "content");
    if (!cJSON_IsString(role) || strcmp(role->valuestring, "user") || !cJSON_IsString(c)) continue;
    char *noisy =
        lt__noise_instruction(&d->noise, ep->noise_level, &ep->noise_rng, c->valuestring, spec, ep->reference);
    if (noisy) cJSON_ReplaceItemInObjectCaseSensitive(m, "content", cJSON_CreateString(noisy));
    free(noisy);
  }
}

/* The implementation's open plus the instruction noise; runs on any thread. */
static int open_run(lt_episode_t *ep, const cJSON *spec, uint64_t seed, cJSON **messages) {
  domain_t *d = ep->domain;
  *messages = NULL;
  if (!d->impl->open) return lt_error_set(LT_EUNSUPP, "environment '%s' opens only on an event loop", d->impl->type);
  int rc = d->impl->open(d->state, ep, spec, seed, messages);
  open_noise(ep, rc, spec, seed, messages);
  if (rc < 0) {
    cJSON_Delete(*messages);
    *messages = NULL;
  }
  return rc;
}

static lt_episode_t *ep_new(lt_envs_t *e, const char *domain, const cJSON *spec) {
  domain_t *d = find(e, domain);
  if (!d) return NULL;
  if (!cJSON_IsObject(spec)) {
    lt_error_set(LT_EINVAL, "%s: task spec must be an object", domain);
    return NULL;
  }
  lt_episode_t *ep = calloc(1, sizeof *ep);
  if (!ep) {
    lt_error_set(LT_ENOMEM, "episode: out of memory");
    return NULL;
  }
  ep->envs = e;
  ep->domain = d;
  ep->state = d->state;
  ep->noise_level = -1;
  if (e->loop) {
    LT_ASSERT(uv_timer_init(e->loop, &ep->timer) == 0, "uv_timer_init");
    ep->timer.data = ep;
  }
  return ep;
}

static void ep_free_now(lt_episode_t *ep) {
  domain_t *d = ep->domain;
  if (d->impl->close) d->impl->close(ep);
  cJSON_Delete(ep->reference);
  if (ep->envs->loop) uv_close((uv_handle_t *)&ep->timer, on_closed);
  else free(ep);
}

int lt_episode_open(lt_envs_t *e, const char *domain, const cJSON *spec, uint64_t seed, lt_episode_t **out,
                    cJSON **messages) {
  *out = NULL;
  *messages = NULL;
  lt_episode_t *ep = ep_new(e, domain, spec);
  if (!ep) return find(e, domain) ? LT_EINVAL : LT_ENOENT;
  int rc = open_run(ep, spec, seed, messages);
  if (rc < 0) {
    ep_free_now(ep);
    return rc;
  }
  *out = ep;
  return 0;
}

static void open_work(uv_work_t *w) {
  lt_episode_t *ep = w->data;
  ep->open_rc = open_run(ep, ep->open_spec, ep->open_seed, &ep->open_messages);
  if (ep->open_rc < 0) ep->open_err = strdup(lt_error_msg()); /* this thread's detail */
}

static void open_deliver(lt_episode_t *ep) {
  cJSON_Delete(ep->open_spec);
  ep->open_spec = NULL;
  ep->pending = 0;
  if (ep->closed) { /* closed while opening: the caller has let go */
    cJSON_Delete(ep->open_messages);
    free(ep->open_err);
    ep->open_messages = NULL, ep->open_err = NULL;
    ep->closed = 0;
    lt_episode_close(ep);
    return;
  }
  cJSON *m = ep->open_messages;
  ep->open_messages = NULL;
  if (ep->open_rc < 0) lt_error_set(ep->open_rc, "%s", ep->open_err ? ep->open_err : lt_strerror(ep->open_rc));
  free(ep->open_err);
  ep->open_err = NULL;
  ep->open_cb(ep, ep->open_rc, m, ep->ud);
}

static void open_done(uv_work_t *w, int status) {
  lt_episode_t *ep = w->data;
  ep->opening = 0;
  if (status == UV_ECANCELED) ep->open_rc = LT_ECANCELED;
  open_deliver(ep);
}

static void open_timer(uv_timer_t *t) { open_deliver(t->data); }

void lt__episode_opened(lt_episode_t *ep, int rc, cJSON *messages) {
  ep->async_op = 0;
  ep->open_messages = messages;
  open_noise(ep, rc, ep->open_spec, ep->open_seed, &ep->open_messages);
  ep->open_rc = rc;
  if (rc < 0) {
    ep->open_err = strdup(lt_error_msg());
    cJSON_Delete(ep->open_messages);
    ep->open_messages = NULL;
  }
  open_deliver(ep);
}

void lt__episode_stepped(lt_episode_t *ep, int rc) {
  ep->async_op = 0;
  settle(ep, rc);
  noise_after(ep, &ep->result);
  ep->pending = 0;
  lt_env_step_t res = ep->result;
  memset(&ep->result, 0, sizeof ep->result);
  ep->cb(ep, &res, ep->ud);
}

int lt_episode_open_async(lt_envs_t *e, const char *domain, const cJSON *spec, uint64_t seed, lt_episode_open_cb cb,
                          void *ud, lt_episode_t **out) {
  *out = NULL;
  if (!e->loop) return lt_error_set(LT_EINVAL, "episode open needs an event loop");
  lt_episode_t *ep = ep_new(e, domain, spec);
  if (!ep) return find(e, domain) ? LT_EINVAL : LT_ENOENT;
  domain_t *d = ep->domain;
  ep->open_cb = cb;
  ep->ud = ud;
  ep->open_seed = seed;
  ep->pending = 1;
  if (!(ep->open_spec = cJSON_Duplicate(spec, 1))) {
    ep_free_now(ep);
    return lt_error_set(LT_ENOMEM, "episode: out of memory");
  }
  int rc;
  if (d->impl->open_async) {
    ep->async_op = 1;
    if ((rc = d->impl->open_async(d->state, ep, spec, seed)) < 0) {
      ep->async_op = 0;
      cJSON_Delete(ep->open_spec);
      ep_free_now(ep);
      return rc;
    }
    *out = ep;
    return 0;
  }
  if (d->impl->blocking) {
    ep->work.data = ep;
    ep->opening = 1;
    rc = uv_queue_work(e->loop, &ep->work, open_work, open_done);
    if (rc != 0) ep->opening = 0;
  } else { /* quick: open now, answer on the next loop turn */
    ep->open_rc = open_run(ep, spec, seed, &ep->open_messages);
    if (ep->open_rc < 0) ep->open_err = strdup(lt_error_msg());
    rc = uv_timer_start(&ep->timer, open_timer, 0, 0);
  }
  if (rc != 0) {
    cJSON_Delete(ep->open_spec);
    cJSON_Delete(ep->open_messages);
    free(ep->open_err);
    ep_free_now(ep);
    return lt_error_set(LT_ESYS, "episode: cannot schedule the open: %s", uv_strerror(rc));
  }
  *out = ep;
  return 0;
}

static void noise_clear(lt_episode_t *ep) {
  for (int i = 0; i < ep->noise_ncalls; i++) free(ep->noise_names[i]);
  free(ep->noise_names);
  free(ep->noise_failed);
  ep->noise_names = NULL;
  ep->noise_failed = NULL;
  ep->noise_ncalls = 0;
}

/* Decides which calls fail transiently (they do not run); the calls to run go to *run (shallow copies). */
static int noise_before(lt_episode_t *ep, const lt_tool_call_t *calls, int n, lt_tool_call_t **run, int *nrun) {
  domain_t *d = ep->domain;
  *run = NULL;
  *nrun = n;
  if (ep->noise_level <= 0 || n == 0) return 0;
  ep->noise_failed = calloc((size_t)n, 1);
  ep->noise_names = calloc((size_t)n, sizeof *ep->noise_names);
  *run = calloc((size_t)n, sizeof **run);
  if (!ep->noise_failed || !ep->noise_names || !*run) {
    free(*run);
    noise_clear(ep);
    return lt_error_set(LT_ENOMEM, "episode: out of memory");
  }
  ep->noise_ncalls = n;
  *nrun = 0;
  for (int i = 0; i < n; i++) {
    ep->noise_names[i] = strdup(calls[i].name);
    ep->noise_failed[i] = (unsigned char)lt__noise_tool_fails(&d->noise, ep->noise_level, &ep->noise_rng);
    if (!ep->noise_failed[i]) (*run)[(*nrun)++] = calls[i];
  }
  return 0;
}

/* Puts the failed calls' errors back in order and perturbs the others' results. */
static void noise_after(lt_episode_t *ep, lt_env_step_t *res) {
  domain_t *d = ep->domain;
  if (ep->noise_ncalls == 0 || res->error) {
    noise_clear(ep);
    return;
  }
  cJSON *out = cJSON_CreateArray(), *obs = res->observations;
  for (int i = 0; i < ep->noise_ncalls; i++) {
    cJSON *m;
    if (ep->noise_failed[i]) {
      m = cJSON_CreateObject();
      cJSON_AddStringToObject(m, "role", "tool");
      cJSON_AddStringToObject(m, "name", ep->noise_names[i] ? ep->noise_names[i] : "");
      cJSON_AddStringToObject(m, "content", "{\"ok\":false,\"error\":\"service temporarily unavailable, try again\"}");
    } else {
      if (!(m = cJSON_DetachItemFromArray(obs, 0))) continue;
      cJSON *c = cJSON_GetObjectItemCaseSensitive(m, "content");
      char *noisy =
          cJSON_IsString(c) ? lt__noise_observation(&d->noise, ep->noise_level, &ep->noise_rng, c->valuestring) : NULL;
      if (noisy) cJSON_ReplaceItemInObjectCaseSensitive(m, "content", cJSON_CreateString(noisy));
      free(noisy);
    }
    cJSON_AddItemToArray(out, m);
  }
  while (obs && obs->child) cJSON_AddItemToArray(out, cJSON_DetachItemFromArray(obs, 0)); /* extra observations stay */
  cJSON_Delete(obs);
  res->observations = out;
  noise_clear(ep);
}

static void episode_deliver(uv_timer_t *t) {
  lt_episode_t *ep = t->data;
  ep->pending = 0;
  noise_after(ep, &ep->result);
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

static void on_closed(uv_handle_t *h) {
  lt_episode_t *ep = h->data;
  free(ep);
}

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
  noise_after(ep, &ep->result);
  ep->pending = 0;
  lt_env_step_t res = ep->result;
  memset(&ep->result, 0, sizeof ep->result);
  ep->cb(ep, &res, ep->ud);
}

static int step_start(lt_episode_t *ep, domain_t *d, const lt_tool_call_t *calls, int ncalls, const char *text,
                      lt_env_step_cb cb, void *ud);

int lt_episode_step(lt_episode_t *ep, const char *text, const lt_tool_call_t *calls, int ncalls, lt_env_step_cb cb,
                    void *ud) {
  if (!ep->envs->loop) return lt_error_set(LT_EINVAL, "episode step needs an event loop");
  if (ep->pending) return lt_error_set(LT_EBUSY, "episode: a step is already in flight");
  domain_t *d = ep->domain;
  memset(&ep->result, 0, sizeof ep->result);
  lt_tool_call_t *kept;
  int nkept;
  int rc0 = noise_before(ep, calls, ncalls, &kept, &nkept);
  if (rc0 < 0) return rc0;
  if (kept && nkept == 0) { /* every call failed: nothing runs (a final answer it is not) */
    free(kept);
    ep->result.observations = cJSON_CreateArray();
    ep->cb = cb;
    ep->ud = ud;
    ep->pending = 1;
    return uv_timer_start(&ep->timer, episode_deliver, 0, 0) == 0
               ? 0
               : lt_error_set(LT_ESYS, "episode: cannot start timer");
  }
  if (kept) calls = kept;
  ncalls = nkept;
  int rc1 = step_start(ep, d, calls, ncalls, text, cb, ud);
  free(kept);
  if (rc1 < 0) noise_clear(ep);
  return rc1;
}

static int step_start(lt_episode_t *ep, domain_t *d, const lt_tool_call_t *calls, int ncalls, const char *text,
                      lt_env_step_cb cb, void *ud) {
  if (d->impl->step_async) {
    ep->work_ncalls = ncalls;
    ep->cb = cb;
    ep->ud = ud;
    ep->pending = 1;
    ep->async_op = 1;
    int rc = d->impl->step_async(ep, text, calls, ncalls);
    if (rc < 0) ep->pending = 0, ep->async_op = 0;
    return rc;
  }
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
  return uv_timer_start(&ep->timer, episode_deliver, 0, 0) == 0 ? 0
                                                                : lt_error_set(LT_ESYS, "episode: cannot start timer");
}

const cJSON *lt_episode_reference(const lt_episode_t *ep) { return ep->reference; }

static void end_work(uv_work_t *w) {
  lt_episode_t *ep = w->data;
  domain_t *d = ep->domain;
  ep->end_rc = d->impl->end(ep, ep->end_score);
  if (ep->end_rc < 0) ep->end_err = strdup(lt_error_msg()); /* this thread's detail */
}

static void end_done(uv_work_t *w, int status) {
  lt_episode_t *ep = w->data;
  ep->ending = 0;
  ep->pending = 0;
  int rc = status == UV_ECANCELED ? LT_ECANCELED : ep->end_rc;
  char *err = ep->end_err;
  ep->end_err = NULL;
  if (ep->closed) { /* closed while ending: the caller has let go */
    free(err);
    lt_episode_close(ep);
    return;
  }
  if (rc < 0) lt_error_set(rc, "%s", err ? err : lt_strerror(rc));
  free(err);
  ep->end_cb(ep, rc, ep->ud);
}

int lt_episode_end(lt_episode_t *ep, int score, lt_episode_end_cb cb, void *ud) {
  domain_t *d = ep->domain;
  if (!d->impl->end || !ep->judged) return 1;
  if (!ep->envs->loop) return lt_error_set(LT_EINVAL, "episode end needs an event loop");
  if (ep->pending) return lt_error_set(LT_EBUSY, "episode: a step is still in flight");
  ep->end_cb = cb;
  ep->ud = ud;
  ep->end_score = score;
  ep->work.data = ep;
  int rc = uv_queue_work(ep->envs->loop, &ep->work, end_work, end_done);
  if (rc != 0) return lt_error_set(LT_ESYS, "episode: cannot queue its end: %s", uv_strerror(rc));
  ep->ending = ep->pending = 1;
  return 0;
}

int lt__step_single_turn(lt_episode_t *ep, const char *text, const lt_tool_call_t *calls, int ncalls,
                         lt_env_step_t *res) {
  res->done = 1;
  return 0;
}

void lt_episode_close(lt_episode_t *ep) {
  if (!ep) return;
  if (ep->async_op) { /* an HTTP open or step in flight: drop it, no completion follows */
    domain_t *d = ep->domain;
    ep->async_op = 0;
    if (d->impl->cancel) d->impl->cancel(ep);
    cJSON_Delete(ep->open_spec);
    ep->open_spec = NULL;
  }
  if (ep->opening || ep->open_spec) { /* the open is on the thread pool or its answer on the timer */
    ep->closed = 1;
    if (ep->opening) uv_cancel((uv_req_t *)&ep->work);
    return;
  }
  if (ep->work_text || ep->ending) { /* a blocking step or end is queued or running: cancel it or let it end */
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
  noise_clear(ep);
  if (ep->envs->loop) {
    uv_timer_stop(&ep->timer);
    uv_close((uv_handle_t *)&ep->timer, on_closed);
  } else {
    free(ep);
  }
}
