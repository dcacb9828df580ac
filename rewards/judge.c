/* Rewards from a judge model over HTTP (an OpenAI-compatible chat-completions
 * server, through libcurl multi on the loop):
 *   genrm     pairwise against the reference: <confidence>X</confidence>, minus a
 *             length penalty, becomes a Bradley–Terry win rate σ(scale·(X − center));
 *             rule-flagged responses get 0 without asking (seed 001 §5.2.2);
 *   verifier  <correct>True|False</correct> (model-based STEM checking, seed 001 D.2.2);
 *   rubric    satisfied / partially / unsatisfied mapped to asymmetric binary rewards;
 *   reasoning check (optional; longtail's heuristic, not seed 001's MetaRM) a second
 *             call judging the first verdict's reasoning; a flawed one scales the
 *             policy's reward down.
 * Transient failures (no connection, timeout, 429/5xx, a reply without a verdict)
 * are retried with exponential back-off; one that persists ends as a failure
 * with no value.  At most max_inflight requests run at once; the rest queue. */
#include <math.h>
#include <regex.h>
#include <stdlib.h>
#include <string.h>

#include "net/http.h"
#include "rewards/internal.h"
#include "util/buf.h"
#include "util/error.h"

enum { P_GENRM, P_VERIFIER, P_RUBRIC, P_CHECK, NPAT };

struct lt__judge {
  uv_loop_t *loop;
  lt_httpc_t *http;
  char *url, *model;
  cJSON *extra; /* merged into each request body */
  int timeout_ms, retries, backoff_ms, max_tokens, max_inflight, inflight;
  char *prompt[NPAT];
  regex_t pat[NPAT];
  regex_t *zero; /* rewards.genrm.zero_patterns */
  int nzero;
  double scale, center, len_coef, min_language, rubric_partial, check_penalty;
  int len_target, check;
  lt__judge_req_t *live, *queue_head, *queue_tail;
  int handles, closing, http_open;
  void (*done)(void *);
  void *done_ud;
};

struct lt__judge_req {
  lt__judge_t *j;
  lt__reward_type type;
  int stage; /* 0: the verdict; 1: the reasoning check on it */
  char *question, *response, *reference, *judgment;
  int response_tokens;
  double value;
  lt_reward_result_t res;
  lt_httpc_req_t *http;
  uv_timer_t timer; /* back-off, and delivery on the loop */
  int holding;      /* has an in-flight slot */
  lt__judge_cb cb;
  void *ud;
  lt__judge_req_t *prev, *next, *qnext;
};

static const char *const default_prompt[NPAT] = {
    "You compare a candidate response with a reference response to the same question.\n\n"
    "[Question]\n{question}\n\n[Reference response]\n{reference}\n\n[Candidate response]\n{response}\n\n"
    "Reason briefly, then give your confidence from 0 to 10 that the candidate is better than the reference "
    "(5: equally good) as <confidence>X</confidence>.",
    "Decide whether the response reaches the reference answer.\n\n[Question]\n{question}\n\n[Reference answer]\n"
    "{reference}\n\n[Response]\n{response}\n\nReason briefly, then answer <correct>True</correct> or "
    "<correct>False</correct>.",
    "Judge the response against the rubric.\n\n[Question]\n{question}\n\n[Rubric]\n{reference}\n\n[Response]\n"
    "{response}\n\nReason briefly, then answer <verdict>satisfied</verdict>, <verdict>partially</verdict> or "
    "<verdict>unsatisfied</verdict>.",
    "A judge evaluated a response. Check whether the judgment rests on flawed reasoning (a right verdict for wrong "
    "reasons counts as flawed).\n\n[Question]\n{question}\n\n[Response]\n{response}\n\n[Judgment]\n{judgment}\n\n"
    "Answer <flawed>True</flawed> or <flawed>False</flawed>.",
};
static const char *const default_pattern[NPAT] = {
    "<confidence>[[:space:]]*([-+]?[0-9]*\\.?[0-9]+([eE][-+]?[0-9]+)?)[[:space:]]*</confidence>",
    "<correct>[[:space:]]*(True|False|true|false)[[:space:]]*</correct>",
    "<verdict>[[:space:]]*(satisfied|partially|unsatisfied)[[:space:]]*</verdict>",
    "<flawed>[[:space:]]*(True|False|true|false)[[:space:]]*</flawed>",
};
static const char *const key_prefix[NPAT] = {"rewards.genrm", "rewards.verifier", "rewards.rubric",
                                             "rewards.genrm.reasoning_check"};

static const char *cfg_str_or(const lt_config_t *cfg, const char *path, const char *dflt) {
  const char *s = lt_config_str(cfg, path);
  return s && *s ? s : dflt;
}

static int compile(regex_t *re, const char *pattern, const char *key) {
  int e = regcomp(re, pattern, REG_EXTENDED);
  if (e == 0) return 0;
  char msg[200];
  regerror(e, re, msg, sizeof msg);
  return lt_error_set(LT_ECONFIG, "%s: invalid regular expression: %s", key, msg);
}

static void judge_free(lt__judge_t *j) {
  for (int i = 0; i < NPAT; i++) {
    free(j->prompt[i]);
    if (j->prompt[i]) regfree(&j->pat[i]);
  }
  for (int i = 0; i < j->nzero; i++) regfree(&j->zero[i]);
  free(j->zero);
  free(j->url);
  free(j->model);
  cJSON_Delete(j->extra);
  free(j);
}

/* {endpoint}: ".../chat/completions" as given, ".../v1" + "/chat/completions", else + "/v1/chat/completions". */
static char *make_url(const char *e) {
  lt_buf_t b = {0};
  size_t n = strlen(e);
  while (n && e[n - 1] == '/') n--;
  lt_buf_append(&b, e, n);
  if (n >= 17 && strncmp(e + n - 17, "/chat/completions", 17) == 0) {
  } else if (n >= 3 && strncmp(e + n - 3, "/v1", 3) == 0) {
    lt_buf_puts(&b, "/chat/completions");
  } else {
    lt_buf_puts(&b, "/v1/chat/completions");
  }
  return lt_buf_take(&b);
}

int lt__judge_create(uv_loop_t *loop, const lt_config_t *cfg, lt__judge_t **out) {
  *out = NULL;
  const char *endpoint = lt_config_str(cfg, "rewards.genrm.endpoint");
  if (!endpoint || !*endpoint)
    return lt_error_set(LT_ECONFIG,
                        "rewards.genrm.endpoint: a judge reward (genrm, verifier, rubric) needs the URL of "
                        "an OpenAI-compatible server");
  lt__judge_t *j = calloc(1, sizeof *j);
  if (!j) return lt_error_set(LT_ENOMEM, "judge: out of memory");
  j->loop = loop;
  j->url = make_url(endpoint);
  j->model = strdup(lt_config_str(cfg, "rewards.genrm.model"));
  j->timeout_ms = (int)lt_config_int(cfg, "rewards.genrm.timeout_ms");
  j->retries = (int)lt_config_int(cfg, "rewards.genrm.retries");
  j->backoff_ms = (int)lt_config_int(cfg, "rewards.genrm.backoff_ms");
  j->max_tokens = (int)lt_config_int(cfg, "rewards.genrm.max_tokens");
  j->max_inflight = (int)lt_config_int(cfg, "rewards.genrm.max_inflight");
  j->scale = lt_config_num(cfg, "rewards.genrm.scale");
  j->center = lt_config_num(cfg, "rewards.genrm.center");
  j->len_target = (int)lt_config_int(cfg, "rewards.genrm.length_penalty.target");
  j->len_coef = lt_config_num(cfg, "rewards.genrm.length_penalty.coef");
  j->min_language = lt_config_num(cfg, "rewards.genrm.min_language_fraction");
  j->rubric_partial = lt_config_num(cfg, "rewards.rubric.partial");
  j->check = lt_config_bool(cfg, "rewards.genrm.reasoning_check.enabled");
  j->check_penalty = lt_config_num(cfg, "rewards.genrm.reasoning_check.penalty");
  const cJSON *extra = lt_config_get(cfg, "rewards.genrm.extra_body");
  int rc = 0;
  if (extra && !cJSON_IsObject(extra)) rc = lt_error_set(LT_ECONFIG, "rewards.genrm.extra_body: expected an object");
  else if (extra) j->extra = cJSON_Duplicate(extra, 1);
  if (!j->url || !j->model) rc = lt_error_set(LT_ENOMEM, "judge: out of memory");
  char key[96];
  for (int i = 0; i < NPAT && rc == 0; i++) {
    snprintf(key, sizeof key, "%s.prompt", key_prefix[i]);
    if (!(j->prompt[i] = strdup(cfg_str_or(cfg, key, default_prompt[i])))) {
      rc = lt_error_set(LT_ENOMEM, "judge: out of memory");
      break;
    }
    snprintf(key, sizeof key, "%s.pattern", key_prefix[i]);
    if ((rc = compile(&j->pat[i], cfg_str_or(cfg, key, default_pattern[i]), key)) < 0) {
      free(j->prompt[i]);
      j->prompt[i] = NULL;
    } else if (j->pat[i].re_nsub < 1) {
      regfree(&j->pat[i]);
      free(j->prompt[i]);
      j->prompt[i] = NULL;
      rc = lt_error_set(LT_ECONFIG, "%s: needs a group ( ) around the verdict", key);
    }
  }
  const cJSON *zp = lt_config_get(cfg, "rewards.genrm.zero_patterns");
  int nz = cJSON_IsArray(zp) ? cJSON_GetArraySize(zp) : 0;
  if (rc == 0 && zp && !cJSON_IsArray(zp))
    rc = lt_error_set(LT_ECONFIG, "rewards.genrm.zero_patterns: expected an array");
  if (rc == 0 && nz && !(j->zero = calloc((size_t)nz, sizeof *j->zero)))
    rc = lt_error_set(LT_ENOMEM, "judge: out of memory");
  for (int i = 0; i < nz && rc == 0; i++) {
    const cJSON *p = cJSON_GetArrayItem(zp, i);
    snprintf(key, sizeof key, "rewards.genrm.zero_patterns[%d]", i);
    if (!cJSON_IsString(p)) rc = lt_error_set(LT_ECONFIG, "%s: expected a string", key);
    else if ((rc = compile(&j->zero[i], p->valuestring, key)) == 0) j->nzero++;
  }
  if (rc == 0 && (rc = lt_httpc_create(loop, &j->http)) == 0) j->http_open = 1;
  if (rc < 0) {
    judge_free(j);
    return rc;
  }
  *out = j;
  return 0;
}

/* ---- one request ------------------------------------------------------------------ */

static void finish_close(lt__judge_t *j) {
  if (j->closing && j->handles == 0 && !j->http_open) {
    void (*done)(void *) = j->done;
    void *ud = j->done_ud;
    judge_free(j);
    if (done) done(ud);
  }
}

static void on_timer_closed(uv_handle_t *h) {
  lt__judge_req_t *r = h->data;
  lt__judge_t *j = r->j;
  cJSON_Delete(r->res.components);
  free(r->res.error);
  free(r->question), free(r->response), free(r->reference), free(r->judgment);
  free(r);
  j->handles--;
  finish_close(j);
}

static void send_call(lt__judge_req_t *r);

static void release_slot(lt__judge_req_t *r) {
  lt__judge_t *j = r->j;
  if (!r->holding) return;
  r->holding = 0;
  j->inflight--;
  while (j->queue_head && j->inflight < j->max_inflight && !j->closing) {
    lt__judge_req_t *q = j->queue_head;
    j->queue_head = q->qnext;
    if (!j->queue_head) j->queue_tail = NULL;
    q->holding = 1;
    j->inflight++;
    send_call(q);
  }
}

static void unqueue(lt__judge_req_t *r) {
  lt__judge_t *j = r->j;
  for (lt__judge_req_t **p = &j->queue_head, *prev = NULL; *p; prev = *p, p = &(*p)->qnext)
    if (*p == r) {
      *p = r->qnext;
      if (j->queue_tail == r) j->queue_tail = prev;
      return;
    }
}

/* Forgets the request; its memory goes when the loop releases the timer. */
static void retire(lt__judge_req_t *r) {
  lt__judge_t *j = r->j;
  if (r->prev) r->prev->next = r->next;
  else j->live = r->next;
  if (r->next) r->next->prev = r->prev;
  uv_timer_stop(&r->timer);
  uv_close((uv_handle_t *)&r->timer, on_timer_closed);
}

static void judge_deliver(uv_timer_t *t) {
  lt__judge_req_t *r = t->data;
  lt_reward_result_t res = r->res;
  memset(&r->res, 0, sizeof r->res);
  lt__judge_cb cb = r->cb;
  void *ud = r->ud;
  retire(r);
  cb(&res, ud);
}

static void finish(lt__judge_req_t *r, int status, const char *err) {
  release_slot(r);
  if (status) {
    r->res.status = status;
    r->res.error = strdup(err ? err : lt_strerror(status));
    cJSON_Delete(r->res.components); /* no value, no components of a value */
    r->res.components = cJSON_CreateObject();
    r->res.reward = 0;
  }
  uv_timer_start(&r->timer, judge_deliver, 0, 0);
}

static void fill(lt_buf_t *b, const char *tmpl, const lt__judge_req_t *r) {
  struct {
    const char *key, *val;
  } v[] = {{"{question}", r->question},
           {"{response}", r->response},
           {"{reference}", r->reference},
           {"{judgment}", r->judgment}};
  for (const char *p = tmpl; *p;) {
    int hit = 0;
    for (size_t i = 0; i < sizeof v / sizeof v[0] && !hit; i++) {
      size_t kl = strlen(v[i].key);
      if (strncmp(p, v[i].key, kl) == 0) {
        lt_buf_puts(b, v[i].val ? v[i].val : "");
        p += kl;
        hit = 1;
      }
    }
    if (!hit) lt_buf_putc(b, *p++);
  }
}

static void on_answer(int rc, long status, const char *body, size_t len, const char *err, void *ud);

static void send_call(lt__judge_req_t *r) {
  lt__judge_t *j = r->j;
  int which = r->stage ? P_CHECK : r->type == LT_RW_GENRM ? P_GENRM : r->type == LT_RW_VERIFIER ? P_VERIFIER : P_RUBRIC;
  lt_buf_t prompt = {0};
  fill(&prompt, j->prompt[which], r);
  cJSON *req = cJSON_CreateObject(), *msgs = cJSON_AddArrayToObject(req, "messages"), *m = cJSON_CreateObject();
  cJSON_AddStringToObject(m, "role", "user");
  cJSON_AddStringToObject(m, "content", prompt.data ? prompt.data : "");
  cJSON_AddItemToArray(msgs, m);
  cJSON_AddStringToObject(req, "model", j->model);
  cJSON_AddNumberToObject(req, "temperature", 0);
  cJSON_AddNumberToObject(req, "max_tokens", j->max_tokens);
  for (const cJSON *e = j->extra ? j->extra->child : NULL; e; e = e->next) {
    cJSON_DeleteItemFromObjectCaseSensitive(req, e->string);
    cJSON_AddItemToObject(req, e->string, cJSON_Duplicate(e, 1));
  }
  char *body = cJSON_PrintUnformatted(req);
  cJSON_Delete(req);
  lt_buf_free(&prompt);
  lt_httpc_opts_t o = {.timeout_ms = j->timeout_ms, .retries = 0};
  r->res.attempts++;
  int e = body ? lt_httpc_request(j->http, j->url, body, &o, on_answer, r, &r->http) : LT_ENOMEM;
  free(body);
  if (e < 0) { /* as if the attempt failed at once */
    r->http = NULL;
    on_answer(e, 0, "", 0, lt_error_msg(), r);
  }
}

static void on_backoff(uv_timer_t *t) { send_call(t->data); }

/* The last match of the verdict pattern's first group; 0 if none. */
static int verdict(const regex_t *re, const char *text, char *out, size_t n) {
  regmatch_t m[2];
  int found = 0;
  for (const char *p = text; *p && regexec(re, p, 2, m, p == text ? 0 : REG_NOTBOL) == 0;) {
    if (m[1].rm_so >= 0) {
      size_t l = (size_t)(m[1].rm_eo - m[1].rm_so);
      snprintf(out, n, "%.*s", (int)(l < n ? l : n - 1), p + m[1].rm_so);
      found = 1;
    }
    p += m[0].rm_eo > 0 ? m[0].rm_eo : 1;
  }
  return found;
}

static int is_true(const char *s) { return strcmp(s, "True") == 0 || strcmp(s, "true") == 0; }

/* The verdict's reward; 0 when the reply has none. */
static int score_reply(lt__judge_req_t *r, const char *content) {
  lt__judge_t *j = r->j;
  char v[64];
  if (r->stage == 1) {
    if (!verdict(&j->pat[P_CHECK], content, v, sizeof v)) return 0;
    int flawed = is_true(v);
    cJSON_AddNumberToObject(r->res.components, "reasoning_flawed", flawed);
    r->res.reward = flawed ? r->value * (1 - j->check_penalty) : r->value;
    return 1;
  }
  if (r->type == LT_RW_GENRM) {
    char *end;
    if (!verdict(&j->pat[P_GENRM], content, v, sizeof v)) return 0;
    double c = strtod(v, &end);
    if (end == v || !isfinite(c)) return 0;
    double pen = 0;
    if (j->len_target > 0 && r->response_tokens > j->len_target)
      pen = j->len_coef * (double)(r->response_tokens - j->len_target) / j->len_target;
    double win = 1 / (1 + exp(-j->scale * (c - pen - j->center)));
    cJSON_AddNumberToObject(r->res.components, "genrm_confidence", c);
    if (j->len_target > 0) cJSON_AddNumberToObject(r->res.components, "genrm_length_penalty", -pen);
    cJSON_AddNumberToObject(r->res.components, "genrm_win_rate", win);
    r->value = win;
  } else if (r->type == LT_RW_VERIFIER) {
    if (!verdict(&j->pat[P_VERIFIER], content, v, sizeof v)) return 0;
    r->value = is_true(v);
    cJSON_AddNumberToObject(r->res.components, "verifier", r->value);
  } else {
    if (!verdict(&j->pat[P_RUBRIC], content, v, sizeof v)) return 0;
    /* "partially" tends to disagree with experts: it maps to a configurable low value (seed 001 §5.2.2). */
    r->value = strcmp(v, "satisfied") == 0 ? 1 : strcmp(v, "partially") == 0 ? j->rubric_partial : 0;
    cJSON_AddNumberToObject(r->res.components, "rubric", r->value);
  }
  r->res.reward = r->value;
  return 1;
}

static void on_answer(int rc, long status, const char *body, size_t len, const char *err, void *ud) {
  lt__judge_req_t *r = ud;
  lt__judge_t *j = r->j;
  r->http = NULL;
  char why[600];
  int transient = 1;
  if (rc == 0) {
    cJSON *a = cJSON_ParseWithLength(body, len);
    const cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(a, "choices"), 0);
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(ch, "message"), "content");
    if (cJSON_IsString(c) && score_reply(r, c->valuestring)) {
      if (r->stage == 0 && j->check) {
        free(r->judgment);
        r->judgment = strdup(c->valuestring);
        cJSON_Delete(a);
        r->stage = 1;
        send_call(r);
        return;
      }
      cJSON_Delete(a);
      finish(r, 0, NULL);
      return;
    }
    snprintf(why, sizeof why, "%s: %s", j->url,
             !a                   ? "the reply is not JSON"
             : !cJSON_IsString(c) ? "the reply has no choices[0].message.content"
                                  : "the reply has no verdict matching the pattern");
    cJSON_Delete(a);
  } else {
    snprintf(why, sizeof why, "%s", err ? err : lt_strerror(rc));
    transient = rc != LT_EREMOTE || status == 0 || status == 429 || status >= 500;
  }
  if (transient && r->res.attempts <= j->retries && !j->closing) {
    uint64_t delay = (uint64_t)j->backoff_ms;
    for (int i = 1; i < r->res.attempts && delay < 10000; i++) delay *= 2;
    uv_timer_start(&r->timer, on_backoff, delay < 10000 ? delay : 10000, 0);
    return;
  }
  char msg[700];
  snprintf(msg, sizeof msg, "%s reward: %s (after %d attempt%s)", r->stage ? "reasoning check" : "judge", why,
           r->res.attempts, r->res.attempts == 1 ? "" : "s");
  finish(r, rc == LT_ETIMEDOUT ? LT_ETIMEDOUT : rc == LT_EUNREACH ? LT_EUNREACH : LT_EREMOTE, msg);
}

/* Rule flags that zero a genrm reward without asking the judge. */
static const char *zero_flag(const lt__judge_t *j, const lt__reward_cfg_t *rc, const char *response) {
  for (int i = 0; i < j->nzero; i++)
    if (regexec(&j->zero[i], response, 0, NULL, 0) == 0) return "pattern";
  if (rc->script && lt__reward_script_fraction(response, rc->script) < j->min_language) return "language";
  return NULL;
}

static char *reference_text(const cJSON *ref) {
  static const char *const keys[] = {"answer", "rubric", "response", "reference"};
  if (cJSON_IsString(ref)) return strdup(ref->valuestring);
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(ref, keys[i]);
    if (cJSON_IsString(v)) return strdup(v->valuestring);
  }
  return ref ? cJSON_PrintUnformatted(ref) : strdup("");
}

int lt__judge_score(lt__judge_t *j, lt__reward_type type, const lt__reward_cfg_t *rc, const lt_reward_case_t *k,
                    lt__judge_cb cb, void *ud, lt__judge_req_t **out) {
  *out = NULL;
  if (j->closing) return lt_error_set(LT_ECANCELED, "judge is closing");
  lt__judge_req_t *r = calloc(1, sizeof *r);
  if (!r) return lt_error_set(LT_ENOMEM, "judge: out of memory");
  r->j = j;
  r->type = type;
  r->cb = cb;
  r->ud = ud;
  r->response_tokens = k->response_tokens;
  r->question = strdup(k->prompt ? k->prompt : "");
  r->response = strdup(k->response ? k->response : "");
  r->reference = reference_text(k->reference);
  r->res.components = cJSON_CreateObject();
  if (!r->question || !r->response || !r->reference || !r->res.components) {
    free(r->question), free(r->response), free(r->reference), cJSON_Delete(r->res.components), free(r);
    return lt_error_set(LT_ENOMEM, "judge: out of memory");
  }
  LT_ASSERT(uv_timer_init(j->loop, &r->timer) == 0, "uv_timer_init");
  r->timer.data = r;
  j->handles++;
  r->next = j->live;
  if (j->live) j->live->prev = r;
  j->live = r;
  const char *flag = type == LT_RW_GENRM ? zero_flag(j, rc, r->response) : NULL;
  if (flag) { /* zero, with the reason as a component: fabricated or inconsistent answers earn nothing */
    cJSON_AddNumberToObject(r->res.components, flag[0] == 'p' ? "genrm_zeroed_pattern" : "genrm_zeroed_language", 1);
    r->res.reward = 0;
    r->res.zeroed = 1;
    finish(r, 0, NULL);
  } else if (j->inflight < j->max_inflight) {
    r->holding = 1;
    j->inflight++;
    uv_timer_start(&r->timer, on_backoff, 0, 0); /* the first call also starts on the loop */
  } else {
    if (j->queue_tail) j->queue_tail->qnext = r;
    else j->queue_head = r;
    j->queue_tail = r;
  }
  *out = r;
  return 0;
}

void lt__judge_cancel(lt__judge_req_t *r) {
  if (r->http) lt_httpc_cancel(r->http);
  r->http = NULL;
  unqueue(r);
  release_slot(r);
  retire(r);
}

static void on_http_closed(void *ud) {
  lt__judge_t *j = ud;
  j->http_open = 0;
  finish_close(j);
}

void lt__judge_close(lt__judge_t *j, void (*done)(void *), void *ud) {
  j->closing = 1;
  j->done = done;
  j->done_ud = ud;
  while (j->live) lt__judge_cancel(j->live);
  lt_httpc_close(j->http, on_http_closed, j);
}
