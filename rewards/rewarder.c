/* The rewarder: picks each domain's reward, runs it, adds shaping, and
 * delivers results on the loop. */
#include <stdlib.h>
#include <string.h>

#include "rewards/reward.h"
#include "util/error.h"

typedef struct job {
  lt_rewarder_t *r;
  lt_reward_cb cb;
  void *ud;
  lt_reward_result_t res;
  uv_timer_t timer;
  struct job *prev, *next;
} job_t;

struct lt_rewarder {
  uv_loop_t *loop;
  lt__reward_cfg_t cfg;
  lt__reward_type dflt;
  cJSON *domains;  /* rewards.domains copy */
  job_t *jobs;     /* in flight */
  int closing, handles;
  void (*done)(void *);
  void *done_ud;
};

static const char *type_names[] = {"rule", "env", "code", "genrm", "verifier", "rubric"};

static int parse_type(const char *s) {
  for (int i = 0; i < 6; i++)
    if (strcmp(s, type_names[i]) == 0) return i;
  return -1;
}

int lt_rewarder_create(uv_loop_t *loop, const lt_config_t *cfg, lt_rewarder_t **out) {
  *out = NULL;
  lt_rewarder_t *r = calloc(1, sizeof *r);
  if (!r) return lt_error_set(LT_ENOMEM, "rewarder: out of memory");
  r->loop = loop;
  r->dflt = (lt__reward_type)parse_type(lt_config_str(cfg, "rewards.type"));
  r->cfg.tolerance = lt_config_num(cfg, "rewards.rule.tolerance");
  r->cfg.format_penalty = lt_config_num(cfg, "rewards.format_penalty");
  r->cfg.length_target = (int)lt_config_int(cfg, "rewards.length_penalty.target");
  r->cfg.length_coef = lt_config_num(cfg, "rewards.length_penalty.coef");
  const char *sc = lt_config_str(cfg, "rewards.language.script");
  r->cfg.script = !strcmp(sc, "latin") ? 1 : !strcmp(sc, "cjk") ? 2 : !strcmp(sc, "cyrillic") ? 3 : 0;
  r->cfg.language_coef = lt_config_num(cfg, "rewards.language.coef");
  const cJSON *d = lt_config_get(cfg, "rewards.domains");
  if (d && !(r->domains = cJSON_Duplicate(d, 1))) {
    free(r);
    return lt_error_set(LT_ENOMEM, "rewarder: out of memory");
  }
  *out = r;
  return 0;
}

static lt__reward_type type_for(const lt_rewarder_t *r, const char *domain) {
  const cJSON *d = domain && r->domains ? cJSON_GetObjectItemCaseSensitive(r->domains, domain) : NULL;
  const cJSON *t = cJSON_GetObjectItemCaseSensitive(d, "type");
  return cJSON_IsString(t) ? (lt__reward_type)parse_type(t->valuestring) : r->dflt;
}

static void on_closed(uv_handle_t *h) {
  job_t *j = h->data;
  lt_rewarder_t *r = j->r;
  free(j);
  if (--r->handles == 0 && r->closing) {
    void (*done)(void *) = r->done;
    void *ud = r->done_ud;
    cJSON_Delete(r->domains);
    free(r);
    if (done) done(ud);
  }
}

static void unlink_job(job_t *j) {
  if (j->prev) j->prev->next = j->next;
  else j->r->jobs = j->next;
  if (j->next) j->next->prev = j->prev;
}

static void deliver(uv_timer_t *t) {
  job_t *j = t->data;
  unlink_job(j);
  lt_reward_result_t res = j->res;
  memset(&j->res, 0, sizeof j->res);
  j->cb(&res, j->ud);
  uv_close((uv_handle_t *)&j->timer, on_closed);
}

/* The environment's own verdict: reference.success (bool) or reference.score. */
static void env_verdict(const lt_reward_case_t *k, lt_reward_result_t *res) {
  const cJSON *s = cJSON_GetObjectItemCaseSensitive(k->reference, "success");
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(k->reference, "score");
  res->attempts = 1;
  if (cJSON_IsBool(s)) {
    res->reward = cJSON_IsTrue(s);
  } else if (cJSON_IsNumber(v)) {
    res->reward = v->valuedouble;
  } else {
    res->status = LT_EINVAL;
    res->error = strdup("env reward: the environment gave no verdict (reference.success or reference.score)");
    return;
  }
  cJSON_AddNumberToObject(res->components, "env", res->reward);
}

int lt_rewarder_score(lt_rewarder_t *r, const lt_reward_case_t *k, lt_reward_cb cb, void *ud) {
  if (r->closing) return lt_error_set(LT_ECANCELED, "rewarder is closing");
  job_t *j = calloc(1, sizeof *j);
  if (!j) return lt_error_set(LT_ENOMEM, "rewarder: out of memory");
  j->r = r;
  j->cb = cb;
  j->ud = ud;
  j->res.components = cJSON_CreateObject();
  if (!j->res.components) {
    free(j);
    return lt_error_set(LT_ENOMEM, "rewarder: out of memory");
  }
  lt__reward_type t = type_for(r, k->domain);
  switch (t) {
  case LT_RW_RULE: lt__reward_rule(&r->cfg, k, &j->res); break;
  case LT_RW_ENV: env_verdict(k, &j->res); break;
  default:
    j->res.status = LT_EUNSUPP;
    j->res.error = strdup("this reward type is not available in this build");
  }
  if (j->res.status == 0) lt__reward_shape(&r->cfg, k, &j->res);
  if (j->res.status != 0) { /* no value, never a made-up reward */
    cJSON_Delete(j->res.components);
    j->res.components = cJSON_CreateObject();
    j->res.reward = 0;
  }
  uv_timer_init(r->loop, &j->timer);
  j->timer.data = j;
  r->handles++;
  j->next = r->jobs;
  if (r->jobs) r->jobs->prev = j;
  r->jobs = j;
  uv_timer_start(&j->timer, deliver, 0, 0);
  return 0;
}

void lt_rewarder_close(lt_rewarder_t *r, void (*done)(void *), void *ud) {
  r->closing = 1;
  r->done = done;
  r->done_ud = ud;
  while (r->jobs) {
    job_t *j = r->jobs;
    unlink_job(j);
    uv_timer_stop(&j->timer);
    cJSON_Delete(j->res.components);
    free(j->res.error);
    lt_reward_result_t res = {.status = LT_ECANCELED, .components = cJSON_CreateObject(), .error = strdup("canceled")};
    j->cb(&res, j->ud);
    uv_close((uv_handle_t *)&j->timer, on_closed);
  }
  if (r->handles == 0) {
    cJSON_Delete(r->domains);
    free(r);
    if (done) done(ud);
  }
}
