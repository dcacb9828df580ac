/* `longtail replay` (train/train.h): a learner step's batch recomputed from the buffer and its weights, with
 * what-if MIS bounds, beside the metrics the step logged. */
#include "train/train.h"

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

int lt_replay(const lt_replay_opts_t *o, cJSON **out) {
  *out = NULL;
  char path[4200];
  snprintf(path, sizeof path, "%s/buffer.db", o->run);
  lt_buffer_t *b;
  int rc = lt_buffer_open(path, LT_BUF_READONLY | (o->check ? LT_BUF_CHECK : 0), &b);
  if (rc < 0) return rc;
  lt_config_t cfg = {0};
  lt_trainer_t *tr = NULL;
  lt__packed_t p = {0};
  int64_t *ids = NULL;
  int nids = 0;
  cJSON *res = NULL;
  char *txt = lt_buffer_meta_get(b, "config");
  cJSON *root = txt ? cJSON_Parse(txt) : NULL;
  free(txt);
  if (!root) {
    rc = lt_error_set(LT_ECORRUPT, "%s: the run's config is not recorded", path);
    goto out;
  }
  if ((rc = lt_config_from_json(&cfg, root, NULL, 0, o->schemas, o->nschemas)) < 0) goto out;
  int64_t step = o->step;
  if (step <= 0) {
    step = lt_buffer_last_consumed_step(b);
  }
  if (step <= 0) {
    rc = lt_error_set(LT_ENOENT, "%s: no learner step has trained on anything yet", o->run);
    goto out;
  }
  /* The step's batch in the learner's order: groups by their first member, members by arrival. */
  if ((rc = lt_buffer_step_batch(b, step, &ids, &nids)) < 0) goto out;
  if (nids == 0) {
    rc = lt_error_set(LT_ENOENT, "%s: learner step %lld trained on no recorded trajectories", o->run, (long long)step);
    goto out;
  }
  char model[4200];
  if (o->model) snprintf(model, sizeof model, "%s", o->model);
  else snprintf(model, sizeof model, "%s/checkpoints/v%lld", o->run, (long long)step - 1);
  if (!lt_fs_is_dir(model)) {
    rc = lt_error_set(LT_ENOENT, "%s: no such checkpoint (a run keeps its last 4 weight versions; give --model a "
                                 "full checkpoint, checkpoints/full-NNNNNN, or the weights the step started from)", model);
    goto out;
  }
  int have_critic = 0;
  if ((rc = make_trainer(&cfg, model, &tr, &have_critic)) < 0) goto out;
  lt__batch_shuffle(ids, nids, (uint64_t)lt_config_int(&cfg, "run.seed"), step);
  if ((rc = lt__batch_pack(b, lt_trainer_policy(tr), &cfg, ids, nids, &p)) < 0) goto out;
  lt_train_batch_t batch;
  lt__packed_batch(&p, lt_config_bool(&cfg, "learner.keep_routing"), lt_config_bool(&cfg, "learner.keep_sampling_mask"),
                   &batch);
  lt_step_stats_t st;
  if ((rc = lt_trainer_replay(tr, &batch, NULL, &st)) < 0) goto out;
  res = cJSON_CreateObject();
  cJSON_AddNumberToObject(res, "step", (double)step);
  cJSON_AddStringToObject(res, "model", model);
  cJSON_AddNumberToObject(res, "trajectories", nids);
  cJSON_AddNumberToObject(res, "tokens", st.tokens);
  cJSON_AddStringToObject(res, "objective", lt_config_str(&cfg, "learner.objective"));
  /* Without the step's critic the advantages, hence the loss, are not the learner's. */
  add_stats(cJSON_AddObjectToObject(res, "recomputed"), &st, have_critic);
  cJSON *logged = cJSON_AddObjectToObject(res, "logged");
  static const char *logged_names[] = {"mis/token_accept", "mis/traj_accept", "mis/kept_fraction",
                                       "mismatch/abs_log_ratio", "mismatch/kl", "actor/loss"};
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
    if ((rc = lt_trainer_replay(tr, &batch, &lc, &w)) < 0) goto out;
    cJSON *wi = cJSON_AddObjectToObject(res, "what_if");
    double tb[2] = {lc.tok_lo, lc.tok_hi}, jb[2] = {lc.traj_lo, lc.traj_hi};
    cJSON_AddItemToObject(wi, "token_bounds", cJSON_CreateDoubleArray(tb, 2));
    cJSON_AddItemToObject(wi, "traj_bounds", cJSON_CreateDoubleArray(jb, 2));
    add_stats(wi, &w, have_critic);
  }
  *out = res;
  res = NULL;
out:
  /* A lookup that met a damaged page answered 0 or NULL: the damage, not what followed from it, is the error. */
  if (rc != LT_ECORRUPT && lt_buffer_damaged(b) < 0) {
    rc = LT_ECORRUPT;
    cJSON_Delete(*out);
    *out = NULL;
  }
  cJSON_Delete(res);
  lt__packed_free(&p);
  free(ids);
  lt_trainer_free(tr);
  lt_config_free(&cfg);
  lt_buffer_close(b);
  return rc;
}
