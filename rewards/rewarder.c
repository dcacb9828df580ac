/* The rewarder: picks each domain's reward, runs it, adds shaping, and
 * delivers results on the loop. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "envs/env.h"
#include "rewards/internal.h"
#include "util/error.h"

typedef struct job {
  lt_rewarder_t *r;
  lt_reward_cb cb;
  void *ud;
  lt_reward_result_t res;
  uv_timer_t timer;
  lt__judge_req_t *jr;  /* a judge call in flight */
  char *shape_response; /* what shaping needs once the judge or the tests answer */
  int shape_tokens, shape_malformed;
  uv_work_t work; /* code tests on the thread pool */
  char *code;
  cJSON *tests;
  lt_envs_code_result_t cres;
  int work_rc, in_work, abandoned;
  char work_err[512];
  struct job *prev, *next;
} job_t;

struct lt_rewarder {
  uv_loop_t *loop;
  lt__reward_cfg_t cfg;
  lt__reward_type dflt;
  cJSON *domains;     /* rewards.domains copy */
  lt__judge_t *judge; /* when some domain's reward is a judge's */
  lt_sandbox_limits_t sandbox;
  int pool_size;
  double test_timeout_s;
  lt_sandbox_pool_t *pool; /* made at the first code reward */
  job_t *jobs;             /* in flight */
  int closing, handles;
  void (*done)(void *);
  void *done_ud;
};

static const char *type_names[] = {"rule", "env", "code", "genrm", "verifier", "rubric", "math"};

static int parse_type(const char *s) {
  for (int i = 0; i < (int)(sizeof type_names / sizeof type_names[0]); i++)
    if (strcmp(s, type_names[i]) == 0) return i;
  return -1;
}

static int is_judge(lt__reward_type t) { return t == LT_RW_GENRM || t == LT_RW_VERIFIER || t == LT_RW_RUBRIC; }

int lt_rewarder_create(uv_loop_t *loop, const lt_config_t *cfg, lt_rewarder_t **out) {
  *out = NULL;
  lt_rewarder_t *r = calloc(1, sizeof *r);
  if (!r) return lt_error_set(LT_ENOMEM, "rewarder: out of memory");
  r->loop = loop;
  r->dflt = (lt__reward_type)parse_type(lt_config_str(cfg, "rewards.type"));
  r->cfg.tolerance = lt_config_num(cfg, "rewards.rule.tolerance");
  r->cfg.math_tolerance = lt_config_num(cfg, "rewards.math.tolerance");
  r->cfg.format_penalty = lt_config_num(cfg, "rewards.format_penalty");
  r->cfg.length_target = (int)lt_config_int(cfg, "rewards.length_penalty.target");
  r->cfg.length_coef = lt_config_num(cfg, "rewards.length_penalty.coef");
  const char *sc = lt_config_str(cfg, "rewards.language.script");
  r->cfg.script = !strcmp(sc, "latin") ? 1 : !strcmp(sc, "cjk") ? 2 : !strcmp(sc, "cyrillic") ? 3 : 0;
  r->cfg.language_coef = lt_config_num(cfg, "rewards.language.coef");
  lt_sandbox_limits_from_config(cfg, &r->sandbox);
  r->pool_size = (int)lt_config_int(cfg, "sandbox.pool");
  r->test_timeout_s = lt_config_num(cfg, "rewards.code.test_timeout_s");
  const cJSON *d = lt_config_get(cfg, "rewards.domains");
  if (d && !(r->domains = cJSON_Duplicate(d, 1))) {
    free(r);
    return lt_error_set(LT_ENOMEM, "rewarder: out of memory");
  }
  int judged = is_judge(r->dflt);
  for (const cJSON *e = r->domains ? r->domains->child : NULL; e; e = e->next) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(e, "type");
    judged |= cJSON_IsString(t) && is_judge((lt__reward_type)parse_type(t->valuestring));
  }
  int rc = judged ? lt__judge_create(loop, cfg, &r->judge) : 0;
  if (rc < 0) {
    cJSON_Delete(r->domains);
    free(r);
    return rc;
  }
  *out = r;
  return 0;
}

static lt__reward_type type_for(const lt_rewarder_t *r, const char *domain) {
  const cJSON *d = domain && r->domains ? cJSON_GetObjectItemCaseSensitive(r->domains, domain) : NULL;
  const cJSON *t = cJSON_GetObjectItemCaseSensitive(d, "type");
  return cJSON_IsString(t) ? (lt__reward_type)parse_type(t->valuestring) : r->dflt;
}

static void release(lt_rewarder_t *r) {
  if (r->handles > 0 || !r->closing) return;
  void (*done)(void *) = r->done;
  void *ud = r->done_ud;
  cJSON_Delete(r->domains);
  lt_sandbox_pool_free(r->pool);
  free(r);
  if (done) done(ud);
}

static void on_closed(uv_handle_t *h) {
  job_t *j = h->data;
  lt_rewarder_t *r = j->r;
  free(j->shape_response);
  free(j->code);
  cJSON_Delete(j->tests);
  free(j);
  r->handles--;
  release(r);
}

static void on_judge_closed(void *ud) {
  lt_rewarder_t *r = ud;
  r->handles--;
  release(r);
}

static void unlink_job(job_t *j) {
  if (j->prev) j->prev->next = j->next;
  else j->r->jobs = j->next;
  if (j->next) j->next->prev = j->prev;
}

static void complete(job_t *j) {
  unlink_job(j);
  lt_reward_result_t res = j->res;
  memset(&j->res, 0, sizeof j->res);
  j->cb(&res, j->ud);
  uv_close((uv_handle_t *)&j->timer, on_closed);
}

static void rewarder_deliver(uv_timer_t *t) { complete(t->data); }

/* No value on failure, never a made-up reward; shaping on success. */
static void settle(lt_rewarder_t *r, const lt_reward_case_t *k, job_t *j) {
  if (j->res.status == 0) {
    if (k && !j->res.zeroed) lt__reward_shape(&r->cfg, k, &j->res);
    return;
  }
  cJSON_Delete(j->res.components);
  j->res.components = cJSON_CreateObject();
  j->res.reward = 0;
}

static void on_judge(lt_reward_result_t *res, void *ud) {
  job_t *j = ud;
  j->jr = NULL;
  cJSON_Delete(j->res.components);
  j->res = *res;
  /* The judge's case is gone by now; the shaping terms it needs were kept. */
  lt_reward_case_t k = {
      .response = j->shape_response, .response_tokens = j->shape_tokens, .malformed_tool_calls = j->shape_malformed};
  settle(j->r, &k, j);
  complete(j);
}

static void code_work(uv_work_t *w) {
  job_t *j = w->data;
  j->work_rc = lt_envs_code_test(j->r->pool, j->code, j->tests, j->r->test_timeout_s, &j->cres);
  if (j->work_rc < 0) snprintf(j->work_err, sizeof j->work_err, "code reward: %s", lt_error_msg());
}

static void code_done(uv_work_t *w, int status) {
  job_t *j = w->data;
  j->in_work = 0;
  if (j->abandoned) { /* the rewarder closed meanwhile and reported it cancelled */
    uv_close((uv_handle_t *)&j->timer, on_closed);
    return;
  }
  if (status == UV_ECANCELED) j->work_rc = LT_ECANCELED, snprintf(j->work_err, sizeof j->work_err, "cancelled");
  j->res.attempts = 1;
  if (j->work_rc < 0) {
    j->res.status = j->work_rc; /* the sandbox failed, not the program: no reward */
    j->res.error = strdup(j->work_err);
  } else {
    j->res.reward = j->cres.total ? (double)j->cres.passed / j->cres.total : 0;
    cJSON_AddNumberToObject(j->res.components, "code_tests_passed", j->cres.passed);
    cJSON_AddNumberToObject(j->res.components, "code_tests_total", j->cres.total);
    cJSON_AddNumberToObject(j->res.components, "code", j->res.reward);
  }
  lt_reward_case_t k = {
      .response = j->shape_response, .response_tokens = j->shape_tokens, .malformed_tool_calls = j->shape_malformed};
  settle(j->r, &k, j);
  complete(j);
}

/* Sandboxed tests of the response's last code block against reference.tests. */
static int start_code(lt_rewarder_t *r, const lt_reward_case_t *k, job_t *j) {
  const cJSON *tests = cJSON_GetObjectItemCaseSensitive(k->reference, "tests");
  if (!cJSON_IsArray(tests)) return lt_error_set(LT_EINVAL, "code reward: the reference has no \"tests\" array");
  if (!(j->code = lt_envs_code_extract(k->response ? k->response : ""))) {
    j->res.attempts = 1; /* no program: the policy's failure, scored 0 */
    cJSON_AddNumberToObject(j->res.components, "code", 0);
    cJSON_AddNumberToObject(j->res.components, "code_found", 0);
    return 1;
  }
  int rc = r->pool ? 0 : lt_sandbox_pool_create(&r->sandbox, r->pool_size, &r->pool);
  if (rc < 0) return rc;
  if (!(j->tests = cJSON_Duplicate(tests, 1))) return lt_error_set(LT_ENOMEM, "code reward: out of memory");
  j->work.data = j;
  if ((rc = uv_queue_work(r->loop, &j->work, code_work, code_done)) != 0)
    return lt_error_set(LT_ESYS, "code reward: cannot queue: %s", uv_strerror(rc));
  j->in_work = 1;
  return 0;
}

/* The environment's own verdict: reference.success (bool) or reference.score, and the numbers of
 * reference.components as components beside "env" (swe: fail_to_pass, pass_to_pass, resolved). */
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
  const cJSON *more = cJSON_GetObjectItemCaseSensitive(k->reference, "components");
  for (const cJSON *c = cJSON_IsObject(more) ? more->child : NULL; c; c = c->next)
    if (cJSON_IsNumber(c) && isfinite(c->valuedouble) && strcmp(c->string, "env"))
      cJSON_AddNumberToObject(res->components, c->string, c->valuedouble);
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
  LT_ASSERT(uv_timer_init(r->loop, &j->timer) == 0, "uv_timer_init");
  j->timer.data = j;
  r->handles++;
  j->next = r->jobs;
  if (r->jobs) r->jobs->prev = j;
  r->jobs = j;
  if (is_judge(t) || t == LT_RW_CODE) {
    j->shape_response = strdup(k->response ? k->response : "");
    j->shape_tokens = k->response_tokens;
    j->shape_malformed = k->malformed_tool_calls;
    int rc = !j->shape_response ? lt_error_set(LT_ENOMEM, "rewarder: out of memory")
             : t == LT_RW_CODE  ? start_code(r, k, j)
                                : lt__judge_score(r->judge, t, &r->cfg, k, on_judge, j, &j->jr);
    if (rc == 0) return 0;
    if (rc < 0) {
      j->res.status = rc;
      j->res.error = strdup(lt_error_msg());
    }
  } else if (t == LT_RW_RULE) {
    lt__reward_rule(&r->cfg, k, &j->res);
  } else if (t == LT_RW_MATH) {
    lt__reward_math(&r->cfg, k, &j->res);
  } else if (t == LT_RW_ENV) {
    env_verdict(k, &j->res);
  } else {
    j->res.status = LT_EUNSUPP;
    j->res.error = strdup("this reward type is not available in this build");
  }
  settle(r, k, j);
  uv_timer_start(&j->timer, rewarder_deliver, 0, 0);
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
    if (j->jr) lt__judge_cancel(j->jr);
    if (j->in_work) { /* a running test cannot be stopped: it finishes, then the job is freed */
      j->abandoned = 1;
      uv_cancel((uv_req_t *)&j->work);
    }
    cJSON_Delete(j->res.components);
    free(j->res.error);
    memset(&j->res, 0, sizeof j->res);
    lt_reward_result_t res = {.status = LT_ECANCELED, .components = cJSON_CreateObject(), .error = strdup("canceled")};
    j->cb(&res, j->ud);
    if (!j->abandoned) uv_close((uv_handle_t *)&j->timer, on_closed);
  }
  if (r->judge) {
    r->handles++;
    lt__judge_close(r->judge, on_judge_closed, r);
    r->judge = NULL;
  }
  release(r);
}
