#include "orchestrator/replay.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buffer/buffer.h"
#include "orchestrator/daemon.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/json.h"

typedef struct {
  int64_t *ids;
  int n, cap;
} idlist_t;

static int id_row(int n, const char *const *c, void *ud) {
  idlist_t *l = ud;
  if (l->n == l->cap) {
    int cap = l->cap ? 2 * l->cap : 256;
    int64_t *v = realloc(l->ids, sizeof *v * (size_t)cap);
    if (!v) return 1;
    l->ids = v;
    l->cap = cap;
  }
  l->ids[l->n++] = c[0] ? atoll(c[0]) : 0;
  return 0;
}

static int metric_row(int n, const char *const *c, void *ud) {
  if (c[0] && c[1]) cJSON_AddNumberToObject(ud, c[0], atof(c[1]));
  return 0;
}

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
  if ((rc = lt_model_load(pol, &p)) < 0) return rc;
  *have_critic = tc.loss.obj == LT_OBJ_GRPO || (full && lt_fs_is_dir(cri));
  if (full && lt_fs_is_dir(cri) && tc.loss.obj != LT_OBJ_GRPO && (rc = lt_model_load(cri, &c)) < 0) {
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
  int rc = lt_buffer_open(path, LT_BUF_READONLY | LT_BUF_CHECK, &b);
  if (rc < 0) return rc;
  lt_config_t cfg = {0};
  lt_trainer_t *tr = NULL;
  lt__packed_t p = {0};
  idlist_t ids = {0};
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
    double last = 0;
    lt_buffer_numbers(b, "SELECT max(consumed_step) FROM trajectories WHERE status = 'consumed'", &last, 1);
    step = (int64_t)last;
  }
  if (step <= 0) {
    rc = lt_error_set(LT_ENOENT, "%s: no learner step has trained on anything yet", o->run);
    goto out;
  }
  /* The step's batch in the learner's order: groups by their first member, members by arrival. */
  char sql[512];
  snprintf(sql, sizeof sql,
           "SELECT t.task_id FROM trajectories t JOIN (SELECT group_id, min(id) AS first FROM trajectories "
           "WHERE consumed_step = %lld AND status = 'consumed' GROUP BY group_id) g USING (group_id) "
           "WHERE t.consumed_step = %lld AND t.status = 'consumed' ORDER BY g.first, t.id",
           (long long)step, (long long)step);
  if ((rc = lt_buffer_query(b, sql, id_row, &ids)) < 0) goto out;
  if (ids.n == 0) {
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
  if ((rc = lt__batch_pack(b, lt_trainer_policy(tr), ids.ids, ids.n, &p)) < 0) goto out;
  lt_train_batch_t batch;
  lt__packed_batch(&p, lt_config_bool(&cfg, "learner.keep_routing"), lt_config_bool(&cfg, "learner.keep_sampling_mask"),
                   &batch);
  lt_step_stats_t st;
  if ((rc = lt_trainer_replay(tr, &batch, NULL, &st)) < 0) goto out;
  res = cJSON_CreateObject();
  cJSON_AddNumberToObject(res, "step", (double)step);
  cJSON_AddStringToObject(res, "model", model);
  cJSON_AddNumberToObject(res, "trajectories", ids.n);
  cJSON_AddNumberToObject(res, "tokens", st.tokens);
  cJSON_AddStringToObject(res, "objective", lt_config_str(&cfg, "learner.objective"));
  /* Without the step's critic the advantages, hence the loss, are not the learner's. */
  add_stats(cJSON_AddObjectToObject(res, "recomputed"), &st, have_critic);
  cJSON *logged = cJSON_AddObjectToObject(res, "logged");
  snprintf(sql, sizeof sql,
           "SELECT name, value FROM metrics WHERE step = %lld AND name IN ('mis/token_accept', 'mis/traj_accept', "
           "'mis/kept_fraction', 'mismatch/abs_log_ratio', 'mismatch/kl', 'actor/loss') ORDER BY time_ms",
           (long long)step);
  lt_buffer_query(b, sql, metric_row, logged);
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
  cJSON_Delete(res);
  lt__packed_free(&p);
  free(ids.ids);
  lt_trainer_free(tr);
  lt_config_free(&cfg);
  lt_buffer_close(b);
  return rc;
}
