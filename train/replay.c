/* `longtail replay` (train/train.h): a learner step's batch recomputed from the buffer and its weights, with
 * what-if MIS bounds, beside the metrics the step logged; and the learner's per-token values recomputed and
 * stored for the steps of a run that did not store them (--fill-token-values). */
#include "train/train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buffer/buffer.h"
#include "train/internal.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/json.h"

static void add_stats(cJSON *o, const lt_step_stats_t *st, int with_loss) {
  cJSON_AddNumberToObject(o, "token_accept", st->token_accept);
  cJSON_AddNumberToObject(o, "traj_accept", st->traj_accept);
  cJSON_AddNumberToObject(o, "kept_fraction", st->kept_fraction);
  cJSON_AddNumberToObject(o, "mismatch_abs_log_ratio", st->mismatch);
  cJSON_AddNumberToObject(o, "mismatch_kl", st->kl_rollout);
  cJSON_AddNumberToObject(o, "entropy", st->entropy);
  if (with_loss) cJSON_AddNumberToObject(o, "actor_loss", st->actor_loss);
  else cJSON_AddNullToObject(o, "actor_loss");
  if (st->routing_confidence >= 0) cJSON_AddNumberToObject(o, "routing_confidence", st->routing_confidence);
}

/* Policy (and critic, from a full checkpoint) into a trainer set up as the run's. */
static int make_trainer(const lt_config_t *cfg, const char *dir, lt_trainer_t **tr, int *have_critic) {
  lt_trainer_cfg_t tc;
  int rc = lt__trainer_cfg(cfg, &tc);
  if (rc < 0) return rc;
  char pol[4200], cri[4200];
  snprintf(pol, sizeof pol, "%s/policy", dir);
  int full = lt_fs_is_dir(pol);
  if (!full) snprintf(pol, sizeof pol, "%s", dir);
  snprintf(cri, sizeof cri, "%s/critic", dir);
  lt_model_t *p = NULL, *c = NULL;
  if ((rc = lt_model_load_master(pol, &p)) < 0) return rc;
  *have_critic = tc.loss.group_adv || (full && lt_fs_is_dir(cri));
  if (full && lt_fs_is_dir(cri) && !tc.loss.group_adv && (rc = lt_model_load(cri, &c)) < 0) {
    lt_model_free(p);
    return rc;
  }
  if ((rc = lt_trainer_create(&tc, p, c, NULL, tr)) < 0) {
    lt_model_free(p);
    lt_model_free(c);
  }
  return rc;
}

/* The run's recorded config. */
static int run_config(lt_buffer_t *b, const lt_replay_opts_t *o, lt_config_t *cfg) {
  char *txt = lt_buffer_meta_get(b, "config");
  cJSON *root = txt ? cJSON_Parse(txt) : NULL;
  free(txt);
  if (!root) return lt_error_set(LT_ECORRUPT, "%s: the run's config is not recorded", lt_buffer_path(b));
  return lt_config_from_json(cfg, root, NULL, 0, o->schemas, o->nschemas);
}

/* What replaying one step needs: its batch packed for a trainer on `model`. */
typedef struct {
  lt_trainer_t *tr;
  int have_critic, nids;
  lt__packed_t p;
  lt_train_batch_t batch;
} step_t;

static void step_free(step_t *s) {
  lt__packed_free(&s->p);
  lt_trainer_free(s->tr);
  memset(s, 0, sizeof *s);
}

/* Step `step`'s batch in the learner's order (the trajectories it consumed, sorted and shuffled as it did),
 * packed for a trainer set up as the run's on the weights in `model`. */
static int step_load(lt_buffer_t *b, const lt_config_t *cfg, int64_t step, const char *model, step_t *s) {
  memset(s, 0, sizeof *s);
  int64_t *ids = NULL;
  int rc = lt_buffer_step_batch(b, step, &ids, &s->nids);
  if (rc == 0 && s->nids == 0)
    rc = lt_error_set(LT_ENOENT, "%s: learner step %lld trained on no recorded trajectories", lt_buffer_path(b),
                      (long long)step);
  if (rc == 0 && !lt_fs_is_dir(model))
    rc = lt_error_set(LT_ENOENT,
                      "%s: no such checkpoint (a run keeps its last 4 weight versions; give --model a "
                      "full checkpoint, checkpoints/full-NNNNNN, or the weights the step started from)",
                      model);
  if (rc == 0) rc = make_trainer(cfg, model, &s->tr, &s->have_critic);
  if (rc == 0) {
    lt__batch_shuffle(ids, s->nids, (uint64_t)lt_config_int(cfg, "run.seed"), step);
    rc = lt__batch_pack(b, lt_trainer_policy(s->tr), cfg, ids, s->nids, &s->p);
  }
  if (rc == 0)
    lt__packed_batch(&s->p, lt_config_bool(cfg, "learner.keep_routing"),
                     lt_config_bool(cfg, "learner.keep_sampling_mask"), &s->batch);
  free(ids);
  if (rc < 0) step_free(s);
  return rc;
}

/* A lookup that met a damaged page answered 0 or NULL: the damage, not what followed from it, is the error. */
static int damage_first(lt_buffer_t *b, int rc, cJSON **out) {
  if (rc != LT_ECORRUPT && lt_buffer_damaged(b) < 0) {
    cJSON_Delete(*out);
    *out = NULL;
    return LT_ECORRUPT;
  }
  return rc;
}

int lt_replay(const lt_replay_opts_t *o, cJSON **out) {
  *out = NULL;
  char path[4200];
  snprintf(path, sizeof path, "%s/buffer.db", o->run);
  lt_buffer_t *b;
  int rc = lt_buffer_open(path, LT_BUF_READONLY | (o->check ? LT_BUF_CHECK : 0), &b);
  if (rc < 0) return rc;
  lt_config_t cfg = {0};
  step_t s = {0};
  cJSON *res = NULL;
  if ((rc = run_config(b, o, &cfg)) < 0) goto out;
  int64_t step = o->step;
  if (step <= 0) {
    step = lt_buffer_last_consumed_step(b);
  }
  if (step <= 0) {
    rc = lt_error_set(LT_ENOENT, "%s: no learner step has trained on anything yet", o->run);
    goto out;
  }
  char model[4200];
  if (o->model) snprintf(model, sizeof model, "%s", o->model);
  else snprintf(model, sizeof model, "%s/checkpoints/v%lld", o->run, (long long)step - 1);
  if ((rc = step_load(b, &cfg, step, model, &s)) < 0) goto out;
  lt_step_stats_t st;
  if ((rc = lt_trainer_replay(s.tr, &s.batch, NULL, &st)) < 0) goto out;
  res = cJSON_CreateObject();
  cJSON_AddNumberToObject(res, "step", (double)step);
  cJSON_AddStringToObject(res, "model", model);
  cJSON_AddNumberToObject(res, "trajectories", s.nids);
  cJSON_AddNumberToObject(res, "tokens", st.tokens);
  cJSON_AddStringToObject(res, "objective", lt_config_str(&cfg, "learner.objective"));
  /* Without the step's critic the advantages, hence the loss, are not the learner's. */
  add_stats(cJSON_AddObjectToObject(res, "recomputed"), &st, s.have_critic);
  cJSON *logged = cJSON_AddObjectToObject(res, "logged");
  static const char *logged_names[] = {"mis/token_accept",       "mis/traj_accept", "mis/kept_fraction",
                                       "mismatch/abs_log_ratio", "mismatch/kl",     "actor/loss"};
  for (size_t i = 0; i < sizeof logged_names / sizeof *logged_names; i++) {
    double v;
    if (lt_buffer_metric_at(b, step, logged_names[i], &v) > 0) cJSON_AddNumberToObject(logged, logged_names[i], v);
  }
  if (o->token_bounds || o->traj_bounds) {
    lt_trainer_cfg_t tc;
    lt__trainer_cfg(&cfg, &tc);
    lt_loss_cfg_t lc = tc.loss;
    if (o->token_bounds) lc.tok_lo = (float)o->token_bounds[0], lc.tok_hi = (float)o->token_bounds[1];
    if (o->traj_bounds) lc.traj_lo = (float)o->traj_bounds[0], lc.traj_hi = (float)o->traj_bounds[1];
    lt_step_stats_t w;
    if ((rc = lt_trainer_replay(s.tr, &s.batch, &lc, &w)) < 0) goto out;
    cJSON *wi = cJSON_AddObjectToObject(res, "what_if");
    double tb[2] = {lc.tok_lo, lc.tok_hi}, jb[2] = {lc.traj_lo, lc.traj_hi};
    cJSON_AddItemToObject(wi, "token_bounds", cJSON_CreateDoubleArray(tb, 2));
    cJSON_AddItemToObject(wi, "traj_bounds", cJSON_CreateDoubleArray(jb, 2));
    add_stats(wi, &w, s.have_critic);
  }
  *out = res;
  res = NULL;
out:
  rc = damage_first(b, rc, out);
  cJSON_Delete(res);
  step_free(&s);
  lt_config_free(&cfg);
  lt_buffer_close(b);
  return rc;
}

/* The weights step `step` started from: its full checkpoint (policy and critic: the advantages too), else the
 * published version; "" when the run keeps neither. */
static void start_weights(const char *run, int64_t step, char *out, size_t cap) {
  snprintf(out, cap, "%s/checkpoints/full-%06lld", run, (long long)step - 1);
  if (lt_fs_is_dir(out)) return;
  snprintf(out, cap, "%s/checkpoints/v%lld", run, (long long)step - 1);
  if (!lt_fs_is_dir(out)) out[0] = 0;
}

/* Recomputes step `step`'s values at `model` and stores them, marked recomputed; the advantages only with the
 * step's critic (NaN, shown as none, otherwise). */
static int fill_step(lt_buffer_t *b, const lt_config_t *cfg, int64_t step, const char *model, cJSON *done) {
  step_t s;
  lt_token_values_t v = {0};
  int rc = step_load(b, cfg, step, model, &s);
  if (rc == 0) rc = lt_token_values_alloc(&v, s.batch.start[s.batch.nseq], s.batch.nseq);
  if (rc == 0) {
    s.batch.values = &v;
    lt_step_stats_t st;
    rc = lt_trainer_replay(s.tr, &s.batch, NULL, &st);
  }
  if (rc == 0) {
    for (int i = 0; !s.have_critic && i < v.ntokens; i++) v.adv[i] = NAN;
    lt_trainer_cfg_t tc;
    char loss[512], json[1024];
    if ((rc = lt__trainer_cfg(cfg, &tc)) < 0) goto out;
    lt__loss_json(&tc.loss, loss, sizeof loss);
    /* The weights they were recomputed with travel with them: the inspector says so. */
    cJSON *m = cJSON_CreateString(model);
    char *mq = m ? cJSON_PrintUnformatted(m) : NULL;
    cJSON_Delete(m);
    snprintf(json, sizeof json, "%.*s,\"model\":%s}", (int)strlen(loss) - 1, loss, mq ? mq : "null");
    free(mq);
    rc = lt__token_values_store(b, &s.p, &v, step, 1, json);
  }
  if (rc == 0) {
    cJSON *d = cJSON_CreateObject();
    cJSON_AddNumberToObject(d, "step", (double)step);
    cJSON_AddNumberToObject(d, "trajectories", s.nids);
    cJSON_AddStringToObject(d, "model", model);
    cJSON_AddBoolToObject(d, "advantages", s.have_critic);
    cJSON_AddItemToArray(done, d);
  }
out:
  lt_token_values_free(&v);
  step_free(&s);
  return rc;
}

int lt_replay_fill(const lt_replay_opts_t *o, cJSON **out) {
  *out = NULL;
  char path[4200];
  snprintf(path, sizeof path, "%s/buffer.db", o->run);
  lt_buffer_t *b;
  int rc = lt_buffer_open(path, o->check ? LT_BUF_CHECK : 0, &b); /* read-write: it stores what it recomputes */
  if (rc < 0) return rc;
  lt_config_t cfg = {0};
  cJSON *res = cJSON_CreateObject(), *filled = cJSON_AddArrayToObject(res, "filled"),
        *skipped = cJSON_AddArrayToObject(res, "skipped");
  if (!skipped) rc = lt_error_set(LT_ENOMEM, "replay: out of memory");
  if (rc == 0) rc = run_config(b, o, &cfg);
  int64_t last = rc == 0 ? lt_buffer_last_consumed_step(b) : 0;
  for (int64_t step = o->step > 0 ? o->step : 1; rc == 0 && step <= (o->step > 0 ? o->step : last); step++) {
    char model[4200], why[4400] = "";
    int64_t stored = lt_buffer_token_values_count(b, step);
    if (o->model) snprintf(model, sizeof model, "%s", o->model);
    else start_weights(o->run, step, model, sizeof model);
    if (stored < 0) rc = (int)stored;
    else if (stored > 0) snprintf(why, sizeof why, "the step stored its own values");
    else if (!model[0])
      snprintf(why, sizeof why,
               "the weights it started from are not kept (checkpoints/v%lld): `longtail retrain` "
               "rebuilds every version, then --step %lld --model RETRAINED/checkpoints/v%lld",
               (long long)step - 1, (long long)step, (long long)step - 1);
    else {
      int64_t *ids = NULL;
      int n = 0;
      if ((rc = lt_buffer_step_batch(b, step, &ids, &n)) == 0 && n == 0)
        snprintf(why, sizeof why, "it trained nothing");
      free(ids);
      if (rc == 0 && !why[0]) rc = fill_step(b, &cfg, step, model, filled);
    }
    if (rc == 0 && why[0]) {
      cJSON *sk = cJSON_CreateObject();
      cJSON_AddNumberToObject(sk, "step", (double)step);
      cJSON_AddStringToObject(sk, "why", why);
      cJSON_AddItemToArray(skipped, sk);
    }
  }
  rc = damage_first(b, rc, &res);
  if (rc == 0) *out = res;
  else cJSON_Delete(res);
  lt_config_free(&cfg);
  lt_buffer_close(b);
  return rc;
}
