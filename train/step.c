/* The step driver: each step takes its batch from the buffer (train/select.c), packs it (train/pack.c), trains
 * it on the learner, applies the guardrails, publishes the new policy version to RUN_DIR/checkpoints/vN and
 * keeps full checkpoints for resume.  It runs on one thread (the daemon's trainer thread); what the run should
 * know comes back as results and events. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "learner/dist.h"
#include "learner/ops.h"
#include "learner/ranks.h"
#include "text/tokenizer.h"
#include "train/internal.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/json.h"
#include "util/log.h"
#include "util/delta.h"
#include "util/sha256.h"
#include "util/time.h"

#define AUTO_STALE_MAX 8 /* ceiling of scheduler.max_staleness auto */
#define KEEP_VERSIONS 4  /* weight directories kept for workers still loading them */

enum { MITIGATE_NONE, MITIGATE_KEEP_ROUTING, MITIGATE_STALENESS };

/* guardrails.* and monitor.routing_*, read once: a step does not look keys up. */
typedef struct {
  double max_mismatch, min_token_accept, min_traj_accept, min_entropy, grad_spike, lr_floor, lr, routing_floor;
  int mitigation;
} guard_cfg_t;

struct lt_train {
  const lt_config_t *cfg;
  void (*event_fn)(void *ud, const char *kind, const char *detail);
  void *event_ud;
  char run_dir[4096];
  lt_buffer_t *buf;
  lt_buffer_t *src; /* retrain: the run whose steps are trained again (lt_train_opts_t.source) */
  lt_trainer_t *tr;
  char tok_src[4096];
  lt_st_dtype publish_dtype;       /* checkpoint.publish_dtype */
  char publish_dir[4096];          /* checkpoint.publish_dir, "" when off */
  int publish_deltas;              /* checkpoint.publish_deltas */
  int lora_merged;                 /* checkpoint.lora_publish "merged" (with learner.lora) */
  char lora_base[4096];            /* with learner.lora: the run's first policy, every adapter version's base */
  char weights_dir[4096], sha[65]; /* where it starts (lt_train_position) */
  int64_t version, step, steps_wanted, last_full;
  char last_full_dir[4096];
  int batch, group, dynfilter, max_stale, stale_auto;
  lt__domains_t doms;                   /* envs.<d>.group_size and batch_share */
  int critic_returns;                   /* the objective trains on R̂ (V(s_T) when truncated), not the raw reward */
  uint64_t seed;                        /* run.seed: each step's mini-batch order */
  int keep_routing, keep_sampling_mask; /* batches carry the rollout's expert ids / sampling supports */
  int64_t ckpt_every;
  int ckpt_keep;
  guard_cfg_t g;
  double grad_mean; /* running mean of the actor gradient norm (guardrails.grad_spike) */
  int grad_seen;
  double last_step_end;
  int store_values;    /* learner.store_token_values: each step's per-token values to the buffer */
  char loss_json[512]; /* the objective and bounds they are tested against, stored with them */
};

static void event(lt_train_t *l, const char *kind, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void event(lt_train_t *l, const char *kind, const char *fmt, ...) {
  char detail[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(detail, sizeof detail, fmt, ap);
  va_end(ap);
  if (l->event_fn) l->event_fn(l->event_ud, kind, detail);
  else LT_WARN("learner", "%s: %s", kind, detail);
}

/* ---- setup ---- */

/* scheduler.json beside a full checkpoint: what the trainer state does not hold. */
static int save_full(lt_train_t *l) {
  char dir[4200], p[4300];
  snprintf(dir, sizeof dir, "%s/checkpoints/full-%06lld", l->run_dir, (long long)l->step);
  int rc = lt_ranks_save(l->tr, dir);
  /* The policy inside is a Hugging Face model folder: it carries the tokenizer too. */
  snprintf(p, sizeof p, "%s/policy", dir);
  if (rc == 0 && l->tok_src[0]) rc = lt_tokenizer_copy_files(l->tok_src, p);
  if (rc < 0) return rc;
  char js[256];
  /* The gradient spike guard's running mean travels too (%.17g: bit-exact), so that a resumed run takes the
   * guardrail decisions the uninterrupted one would have (and retrain reproduces it). */
  snprintf(js, sizeof js,
           "{\"step\": %lld, \"version\": %lld, \"max_staleness\": %d, \"keep_routing\": %d, \"grad_mean\": %.17g, "
           "\"grad_seen\": %d}\n",
           (long long)l->step, (long long)l->version, l->max_stale, l->keep_routing, l->grad_mean, l->grad_seen);
  snprintf(p, sizeof p, "%s/scheduler.json", dir);
  if ((rc = lt_fs_write_atomic(p, js, strlen(js))) < 0) return rc;
  if ((rc = lt_buffer_meta_set(l->buf, "full_checkpoint", dir)) < 0) return rc;
  /* Older full checkpoints beyond checkpoint.keep go. */
  int keep = l->ckpt_keep;
  int64_t every = l->ckpt_every;
  if (l->last_full_dir[0] && strcmp(l->last_full_dir, dir) && keep <= 1) lt_fs_remove_tree(l->last_full_dir);
  if (every > 0 && keep > 1) {
    char old[4200];
    snprintf(old, sizeof old, "%s/checkpoints/full-%06lld", l->run_dir, (long long)(l->step - every * keep));
    if (l->step - every * keep >= 0 && lt_fs_is_dir(old)) lt_fs_remove_tree(old);
  }
  snprintf(l->last_full_dir, sizeof l->last_full_dir, "%s", dir);
  l->last_full = l->step;
  return 0;
}

static int load_scheduler(lt_train_t *l, const char *dir) {
  char p[4300];
  snprintf(p, sizeof p, "%s/scheduler.json", dir);
  cJSON *j;
  int rc = lt_json_parse_file(p, &j);
  if (rc < 0) return rc;
  int64_t step, version, ms, kr;
  if (lt_json_get_i64(j, "step", &step) < 0 || lt_json_get_i64(j, "version", &version) < 0 ||
      lt_json_get_i64(j, "max_staleness", &ms) < 0 || lt_json_get_i64(j, "keep_routing", &kr) < 0) {
    cJSON_Delete(j);
    return lt_error_set(LT_EFORMAT, "%s: expected step, version, max_staleness, keep_routing", p);
  }
  /* Absent from checkpoints written before it was kept: the guard starts over. */
  const cJSON *gm = cJSON_GetObjectItemCaseSensitive(j, "grad_mean"),
              *gn = cJSON_GetObjectItemCaseSensitive(j, "grad_seen");
  l->grad_mean = cJSON_IsNumber(gm) ? gm->valuedouble : 0;
  l->grad_seen = cJSON_IsNumber(gn) ? (int)gn->valuedouble : 0;
  cJSON_Delete(j);
  l->step = step;
  l->version = version;
  l->max_stale = (int)ms;
  l->keep_routing = (int)kr;
  return 0;
}

static int policy_dir_of(lt_train_t *l, int64_t version, char *out, size_t n) {
  return snprintf(out, n, "%s/checkpoints/v%lld", l->run_dir, (long long)version) >= (int)n
             ? lt_error_set(LT_EINVAL, "run directory path too long")
             : 0;
}

/* The other learner ranks build the same trainer from the same policy. */
static int build_trainer(lt_train_t *l, const char *policy_dir) {
  int rc = lt_train_build_trainer(l->cfg, policy_dir, &l->tr);
  return rc < 0 ? rc : lt_ranks_init(policy_dir);
}

int lt_train_build_trainer(const lt_config_t *c, const char *policy_dir, lt_trainer_t **out) {
  lt_trainer_cfg_t tc;
  int rc = lt__trainer_cfg(c, &tc);
  if (rc < 0) return rc;
  lt_model_t *policy = NULL, *critic = NULL, *ref = NULL;
  if ((rc = lt_model_load_master(policy_dir, &policy)) < 0) return rc;
  const char *cp = lt_config_str(c, "model.critic_path");
  if (cp[0] && !tc.loss.group_adv && (rc = lt_model_load(cp, &critic)) == 0 && !critic->cfg.critic)
    rc = lt_error_set(LT_ECONFIG, "model.critic_path: %s is not a value model (no score head)", cp);
  if (rc == 0 && lt__domains_any_kl(c) && !tc.ref_base) rc = lt_model_load_master(policy_dir, &ref);
  if (rc == 0) return lt_trainer_create(&tc, policy, critic, ref, out); /* it frees the models if it fails */
  lt_model_free(policy);
  lt_model_free(critic);
  lt_model_free(ref);
  return rc;
}

static void read_guards(const lt_config_t *c, guard_cfg_t *g) {
  g->max_mismatch = lt_config_num(c, "guardrails.max_mismatch");
  g->min_token_accept = lt_config_num(c, "guardrails.min_token_accept");
  g->min_traj_accept = lt_config_num(c, "guardrails.min_traj_accept");
  g->min_entropy = lt_config_num(c, "guardrails.min_entropy");
  g->grad_spike = lt_config_num(c, "guardrails.grad_spike");
  g->lr_floor = lt_config_num(c, "guardrails.lr_floor");
  g->lr = lt_config_num(c, "learner.lr");
  g->routing_floor = lt_config_num(c, "monitor.routing_confidence_floor");
  const char *mit = lt_config_str(c, "monitor.routing_mitigation");
  g->mitigation = !strcmp(mit, "keep_routing") ? MITIGATE_KEEP_ROUTING
                  : !strcmp(mit, "staleness")  ? MITIGATE_STALENESS
                                               : MITIGATE_NONE;
}

/* Resume: the trainer of the last full checkpoint (or the first policy when there is none), and the buffer
 * rewound to its step. */
static int resume(lt_train_t *l, char *v0, size_t cap) {
  lt_ckpt_row_t first = {0};
  int rc = lt_buffer_weights(l->buf, 1, &first);
  if (rc < 0) return rc;
  if (rc > 0) snprintf(l->lora_base, sizeof l->lora_base, "%s", first.path); /* the adapters' base: the first policy */
  rc = 0;
  char *full = lt_buffer_meta_get(l->buf, "full_checkpoint");
  if (full && lt_fs_is_dir(full)) {
    /* Exact continuation: the trainer as it was at its last full checkpoint. */
    rc = load_scheduler(l, full);
    if (rc == 0) rc = policy_dir_of(l, l->version, v0, cap);
    if (rc == 0 && !lt_fs_is_dir(v0)) snprintf(v0, cap, "%s/policy", full);
    if (rc == 0) rc = build_trainer(l, v0);
    if (rc == 0) rc = lt_ranks_load(l->tr, full);
    if (rc == 0) {
      snprintf(l->last_full_dir, sizeof l->last_full_dir, "%s", full);
      l->last_full = l->step;
    }
  } else {
    /* No full checkpoint yet: start over from the first policy. */
    snprintf(v0, cap, "%s", first.path);
    l->step = 0;
    l->version = 0;
    if (rc == 0) rc = build_trainer(l, v0);
  }
  free(full);
  int n = rc == 0 ? lt_buffer_traj_rewind(l->buf, l->step) : rc;
  if (n < 0) return n;
  LT_INFO("learner", "resuming at learner step %lld, policy v%lld (%d trajectories back to ready)", (long long)l->step,
          (long long)l->version, n);
  return 0;
}

int lt_train_open(const lt_train_opts_t *o, lt_train_t **out) {
  lt_train_t *l = calloc(1, sizeof *l);
  if (!l) return lt_error_set(LT_ENOMEM, "learner: out of memory");
  const lt_config_t *c = o->cfg;
  l->cfg = c;
  l->event_fn = o->event;
  l->event_ud = o->ud;
  l->src = o->source;
  snprintf(l->run_dir, sizeof l->run_dir, "%s", o->run_dir);
  l->batch = (int)lt_config_int(c, "learner.batch.trajectories");
  l->group = o->group_size;
  l->dynfilter = lt__dynamic_filter(c);
  int drc = lt__domains_read(c, l->group, &l->doms);
  if (drc < 0) {
    free(l);
    return drc;
  }
  l->critic_returns = !lt__group_advantages(c);
  l->seed = (uint64_t)lt_config_int(c, "run.seed");
  l->steps_wanted = o->steps;
  l->keep_routing = lt_config_bool(c, "learner.keep_routing");
  l->keep_sampling_mask = lt_config_bool(c, "learner.keep_sampling_mask");
  l->ckpt_every = lt_config_int(c, "checkpoint.every");
  l->ckpt_keep = (int)lt_config_int(c, "checkpoint.keep");
  l->publish_dtype = strcmp(lt_config_str(c, "checkpoint.publish_dtype"), "bf16") ? LT_ST_F32 : LT_ST_BF16;
  snprintf(l->publish_dir, sizeof l->publish_dir, "%s", lt_config_str(c, "checkpoint.publish_dir"));
  l->publish_deltas = lt_config_bool(c, "checkpoint.publish_deltas");
  l->lora_merged = !strcmp(lt_config_str(c, "checkpoint.lora_publish"), "merged");
  snprintf(l->lora_base, sizeof l->lora_base, "%s", o->weights_dir);
  read_guards(c, &l->g);
  /* retrain trains another run's trajectories, which its own buffer does not hold */
  l->store_values = lt_config_bool(c, "learner.store_token_values") && !l->src;
  lt_trainer_cfg_t tc;
  if (lt__trainer_cfg(c, &tc) == 0) lt__loss_json(&tc.loss, l->loss_json, sizeof l->loss_json);
  if (tc.lora.rank > 0 && !l->lora_merged && l->publish_dir[0]) {
    lt__domains_free(&l->doms);
    free(l);
    return lt_error_set(LT_ECONFIG,
                        "checkpoint.publish_dir: adapter versions name their base by its place in the run "
                        "directory; with learner.lora set checkpoint.lora_publish \"merged\" to publish there");
  }
  const cJSON *ms = lt_config_get(c, "scheduler.max_staleness");
  l->stale_auto = cJSON_IsString(ms);
  l->max_stale = cJSON_IsNumber(ms) ? (int)ms->valuedouble : 2;
  if (o->sync) l->max_stale = 0;
  l->version = o->version;
  l->step = o->step;
  snprintf(l->weights_dir, sizeof l->weights_dir, "%s", o->weights_dir);
  /* Tokenizer files travel with every version: from the first policy. */
  snprintf(l->tok_src, sizeof l->tok_src, "%s", o->weights_dir);
  char p[4200], v0[4096];
  snprintf(p, sizeof p, "%s/buffer.db", o->run_dir);
  snprintf(v0, sizeof v0, "%s", o->weights_dir);
  int rc = lt_buffer_open(p, 0, &l->buf);
  /* What retrain needs to reproduce the steps bit for bit besides the data (a resume on another machine records
   * its own). */
  char blas[640];
  lt_cpus_t cpus;
  lt_cpus_config(c, "learner.cpus", &cpus); /* checked when the config was loaded */
  snprintf(blas, sizeof blas, "%s; %d threads", lt_ops_blas(),
           lt_ops_threads((int)lt_config_int(c, "learner.threads"), &cpus));
  if (rc == 0 && !l->src) rc = lt_buffer_meta_set(l->buf, "learner_blas", blas);
  if (rc == 0 && o->resume) {
    rc = resume(l, v0, sizeof v0);
    if (rc == 0 && l->version != o->version) {
      char st[4200];
      snprintf(st, sizeof st, "%s/%s", v0, lt_model_weights_file(v0));
      if ((rc = lt_sha256_file(st, l->sha)) == 0) snprintf(l->weights_dir, sizeof l->weights_dir, "%s", v0);
    }
  } else if (rc == 0) {
    rc = build_trainer(l, v0);
  }
  if (rc < 0) {
    lt_train_close(l);
    return lt_error_wrap(rc, "learner");
  }
  *out = l;
  return 0;
}

void lt_train_position(const lt_train_t *t, int64_t *step, int64_t *version, const char **weights_dir,
                       const char **sha) {
  *step = t->step;
  *version = t->version;
  *weights_dir = t->weights_dir;
  *sha = t->sha;
}

int64_t lt_train_ready(lt_train_t *t) { return lt_buffer_count_status(t->buf, LT_SAMPLE_READY); }

int lt_train_done(const lt_train_t *t) { return t->steps_wanted && t->step >= t->steps_wanted; }

void lt_train_close(lt_train_t *t) {
  if (!t) return;
  lt_trainer_free(t->tr);
  lt_buffer_close(t->buf);
  lt__domains_free(&t->doms);
  free(t);
}

int lt_train_finish(lt_train_t *t) {
  int rc = t->tr && t->step > t->last_full ? save_full(t) : 0;
  if (rc < 0) event(t, "checkpoint_failed", "final checkpoint: %s", lt_error_msg());
  if (lt_ranks_stop() < 0) event(t, "learner_ranks", "stopping the other ranks: %s", lt_error_msg());
  return rc;
}

/* ---- one step ---- */

/* Packs the chosen trajectories and fills the step's data statistics. */
static int pack(lt_train_t *l, int64_t *ids, int n, lt__packed_t *p, lt_train_result_t *r) {
  if (!l->src) lt__batch_shuffle(ids, n, l->seed, l->step + 1); /* the step about to run; retrain's comes shuffled */
  int rc = lt__batch_pack(l->src ? l->src : l->buf, lt_trainer_policy(l->tr), l->cfg, ids, n, p);
  if (rc < 0) return rc;
  if (p->nbad && l->src) /* the run trained on it: the buffer has changed since */
    return lt_error_set(LT_ECORRUPT, "the trajectory of task %lld it trained on cannot be trained on now: %s",
                        (long long)p->bad[0], p->bad_why[0]);
  if (p->nbad) { /* quarantined: moved aside, counted, its task reopened for the caller; the run goes on */
    if (!(r->requeue = calloc((size_t)p->nbad, sizeof *r->requeue)))
      return lt_error_set(LT_ENOMEM, "learner: out of memory");
    for (int i = 0; i < p->nbad; i++) {
      if ((rc = lt_buffer_traj_quarantine(l->buf, p->bad[i], l->step + 1, p->bad_why[i], lt_time_wall_ms(),
                                          &r->requeue[i])) < 0)
        return rc;
      r->quarantined++;
      if ((rc = lt_buffer_counter_add(l->buf, "trajectories_quarantined", 1)) < 0) return rc;
      event(l, "quarantined", "trajectory of task %lld cannot be trained on: %s", (long long)p->bad[i], p->bad_why[i]);
    }
  }
  n = p->n;
  if (n == 0) return 0;
  r->reward_mean = p->reward_mean;
  r->reward_min = p->reward_min;
  r->reward_max = p->reward_max;
  r->trunc_rate = p->trunc_rate;
  r->turns_mean = p->turns_mean;
  r->route_rollout = p->route_rollout;
  r->gen_tokens = p->gen_tokens;
  r->ndom = p->ndom;
  memcpy(r->dom, p->dom, sizeof r->dom);
  memcpy(r->dom_reward, p->dom_reward, sizeof r->dom_reward);
  memcpy(r->dom_min, p->dom_min, sizeof r->dom_min);
  memcpy(r->dom_max, p->dom_max, sizeof r->dom_max);
  for (int s = 0; s < n; s++) {
    int age = p->vmin[s] >= 0 ? (int)(l->version - p->vmin[s]) : 0;
    r->stale_hist[age < LT_TRAIN_STALE_BINS - 1 ? age : LT_TRAIN_STALE_BINS - 1]++;
    r->stale_mean += age;
    if (s == 0 || age < r->stale_min) r->stale_min = age;
    if (age > r->stale_max) r->stale_max = age;
  }
  r->stale_mean /= n;
  return 0;
}

/* Writes the policy as version v for the workers (in checkpoint.publish_dtype, with delta.zst against v-1 for
 * workers that hold it unless checkpoint.publish_deltas is off, and a copy in checkpoint.publish_dir); older
 * versions go. */
static int publish(lt_train_t *l, int64_t v, lt_train_result_t *r) {
  if (policy_dir_of(l, v, r->dir, sizeof r->dir) < 0) return LT_EINVAL;
  int rc = lt__publish_version(lt_trainer_policy(l->tr), r->dir, l->publish_dtype, l->lora_merged, l->lora_base);
  if (rc == 0 && l->tok_src[0]) rc = lt_tokenizer_copy_files(l->tok_src, r->dir);
  char st[4200], prev[4200];
  const char *file = lt_model_weights_file(r->dir); /* model.safetensors, or an adapter's file */
  snprintf(st, sizeof st, "%s/%s", r->dir, file);
  if (rc == 0) rc = lt_sha256_file(st, r->sha);
  if (rc == 0 && l->publish_deltas && v > 0 && policy_dir_of(l, v - 1, prev, sizeof prev - 40) == 0) {
    /* A delta only where the previous version is still on disk (a resumed run may have pruned it) and holds the
     * same kind of file (v0, the base, is no adapter's predecessor). */
    char base[4300], delta[4300];
    snprintf(base, sizeof base, "%s/%s", prev, file);
    snprintf(delta, sizeof delta, "%s/delta.zst", r->dir);
    if (lt_fs_exists(base)) rc = lt_delta_create(base, st, delta, NULL);
  }
  if (rc == 0 && l->publish_dir[0]) rc = lt_train_publish_copy(r->dir, l->publish_dir, r->sha);
  if (rc < 0) return rc;
  if (!l->src && v - KEEP_VERSIONS > 0) { /* retrain keeps every version: they are what it is for */
    char old[4200];
    if (policy_dir_of(l, v - KEEP_VERSIONS, old, sizeof old) == 0 && lt_fs_is_dir(old)) lt_fs_remove_tree(old);
  }
  return 0;
}

/* Guardrails: limits that act.  Each action is an event with its cause. */
static int guardrails(lt_train_t *l, lt_train_result_t *r, int *rollback) {
  const guard_cfg_t *g = &l->g;
  const lt_step_stats_t *st = &r->st;
  double mm = g->max_mismatch, ta = g->min_token_accept, ja = g->min_traj_accept, me = g->min_entropy;
  double gs = g->grad_spike, floor = g->routing_floor;
  int nml = lt_model_moe_layers(lt_trainer_model_config(l->tr));
  *rollback = 0;
  if (gs > 0 && l->grad_seen >= 5 && st->actor_grad_norm > gs * l->grad_mean) {
    event(l, "guardrail",
          "step %lld: actor gradient norm %.4g is %.1fx its running mean %.4g: rolling back to the "
          "last good checkpoint and skipping the batch",
          (long long)l->step, st->actor_grad_norm, st->actor_grad_norm / l->grad_mean, l->grad_mean);
    *rollback = 1;
    return 0;
  }
  if (isfinite(st->actor_grad_norm)) {
    l->grad_mean = l->grad_seen ? 0.9 * l->grad_mean + 0.1 * st->actor_grad_norm : st->actor_grad_norm;
    l->grad_seen++;
  }
  int tighten = 0;
  if (mm > 0 && st->mismatch > mm) {
    event(l, "guardrail", "step %lld: train-rollout mismatch %.4f > guardrails.max_mismatch %.4f: tightening staleness",
          (long long)l->step, st->mismatch, mm);
    tighten = 1;
  }
  if (ta > 0 && st->token_accept < ta) {
    event(l, "guardrail",
          "step %lld: MIS token acceptance %.3f < guardrails.min_token_accept %.3f: tightening "
          "staleness%s",
          (long long)l->step, st->token_accept, ta, nml && !l->keep_routing ? ", keep_routing on" : "");
    tighten = 1;
    if (nml) l->keep_routing = 1;
  }
  if (ja > 0 && st->traj_accept < ja) {
    event(l, "guardrail",
          "step %lld: MIS trajectory acceptance %.3f < guardrails.min_traj_accept %.3f: tightening "
          "staleness",
          (long long)l->step, st->traj_accept, ja);
    tighten = 1;
  }
  if (tighten && l->max_stale > 0) l->max_stale--;
  if (me > 0 && st->entropy < me) {
    double cur = st->lr / (g->lr > 0 ? g->lr : 1);
    if (cur * 0.5 >= g->lr_floor) {
      int rc = lt_ranks_scale_lr(l->tr, 0.5);
      if (rc < 0) return rc;
      event(l, "guardrail", "step %lld: entropy %.4f < guardrails.min_entropy %.4f: actor learning rate halved",
            (long long)l->step, st->entropy, me);
    }
  }
  double conf = st->routing_confidence >= 0 ? st->routing_confidence : 1;
  if (r->route_rollout >= 0 && r->route_rollout < conf) conf = r->route_rollout;
  if (floor > 0 && nml && conf < floor) {
    const char *did = "none";
    if (g->mitigation == MITIGATE_KEEP_ROUTING && !l->keep_routing) l->keep_routing = 1, did = "keep_routing on";
    else if (g->mitigation == MITIGATE_STALENESS && l->max_stale > 0) l->max_stale = 0, did = "max_staleness 0";
    event(l, "routing_alarm",
          "step %lld: routing confidence %.4f < monitor.routing_confidence_floor %.4f "
          "(learner %.4f, rollout %.4f); mitigation: %s",
          (long long)l->step, conf, floor, st->routing_confidence, r->route_rollout, did);
  }
  /* scheduler.max_staleness auto: follow the measured mismatch. */
  if (l->stale_auto && !tighten) {
    double target = mm > 0 ? mm : 0.05;
    if (st->mismatch > target && l->max_stale > 0) {
      l->max_stale--;
      event(l, "staleness", "step %lld: mismatch %.4f > %.4f: max_staleness auto -> %d", (long long)l->step,
            st->mismatch, target, l->max_stale);
    } else if (st->mismatch < target / 2 && l->max_stale < AUTO_STALE_MAX) {
      l->max_stale++;
      event(l, "staleness", "step %lld: mismatch %.4f < %.4f: max_staleness auto -> %d", (long long)l->step,
            st->mismatch, target / 2, l->max_stale);
    }
  }
  return 0;
}

int lt_train_step(lt_train_t *l, int flush, lt_train_result_t *r) {
  memset(r, 0, sizeof *r);
  int64_t *ids = NULL;
  lt__packed_t p = {0};
  lt_token_values_t tv = {0};
  int rc = 0, n;
  lt__select_t sel = {.batch = l->batch,
                      .group = l->group,
                      .dynfilter = l->dynfilter,
                      .critic_returns = l->critic_returns,
                      .max_stale = l->max_stale,
                      .doms = &l->doms,
                      .version = l->version,
                      .step = l->step};
  if (l->src) n = lt__retrain_batch(l->src, l->step + 1, l->seed, &ids);
  else if ((ids = malloc(sizeof(int64_t) * (size_t)(l->batch * 8 + 1024))))
    n = lt__select_batch(l->buf, &sel, flush, ids, &r->marked_stale, &r->filtered);
  else n = lt_error_set(LT_ENOMEM, "learner: out of memory");
  if (n <= 0) {
    rc = n;
    goto out;
  }
  double t0 = lt_time_mono_s();
  if ((rc = pack(l, ids, n, &p, r)) < 0) goto out;
  if ((n = p.n) == 0) goto out; /* all quarantined: nothing trained (rc 0) */
  lt_train_batch_t b;
  lt__packed_batch(&p, l->keep_routing, l->keep_sampling_mask, &b);
  r->skip_sampling = p.skip_sampling;
  r->skip_routing = p.skip_routing;
  if (l->store_values && (rc = lt_token_values_alloc(&tv, b.start[b.nseq], b.nseq)) == 0) b.values = &tv;
  if (rc < 0 || (rc = lt_ranks_step(l->tr, &b, &r->st)) < 0) goto out;
  r->ranks = lt_dist_size();
  l->step++;
  int rollback = 0;
  if ((rc = guardrails(l, r, &rollback)) < 0) goto out;
  if (rollback && l->last_full_dir[0]) {
    int64_t keep_step = l->step;
    if ((rc = lt_ranks_load(l->tr, l->last_full_dir)) < 0) goto out;
    l->step = keep_step; /* step numbers stay monotonic; the weights are the good ones */
    if (!l->src && (rc = lt_buffer_traj_mark(l->buf, p.ids, n, LT_SAMPLE_FILTERED, l->step)) < 0) goto out;
  } else if (!l->src && (rc = lt_buffer_traj_mark(l->buf, p.ids, n, LT_SAMPLE_CONSUMED, l->step)) < 0) {
    goto out;
  }
  if (b.values && (rc = lt__token_values_store(l->buf, &p, &tv, l->step, 0, l->loss_json)) < 0) goto out;
  l->version++;
  double tp = lt_time_mono_s();
  if ((rc = publish(l, l->version, r)) < 0) goto out;
  r->publish_s = lt_time_mono_s() - tp;
  if (l->ckpt_every > 0 && l->step % l->ckpt_every == 0 && (rc = save_full(l)) < 0) goto out;
  double now = lt_time_mono_s();
  r->step = l->step;
  r->version = l->version;
  r->step_s = now - t0;
  r->wait_s = l->last_step_end > 0 ? t0 - l->last_step_end : 0;
  r->max_staleness = l->max_stale;
  l->last_step_end = now;
  rc = 1;
out:
  if (rc < 0) lt_train_result_free(r);
  lt_token_values_free(&tv);
  lt__packed_free(&p);
  free(ids);
  return rc;
}

void lt_train_result_free(lt_train_result_t *r) {
  for (int i = 0; r->requeue && i < r->quarantined; i++) lt_buffer_quarantined_free(&r->requeue[i]);
  free(r->requeue);
  r->requeue = NULL;
}

int lt_train_ranks(void) { return lt_dist_size(); }

int lt_train_keepalive(lt_train_t *t) {
  int rc = lt_ranks_keepalive();
  if (rc < 0) event(t, "learner_ranks", "%s", lt_error_msg());
  return rc;
}

int lt_train_stop_ranks(void) { return lt_ranks_stop(); }
