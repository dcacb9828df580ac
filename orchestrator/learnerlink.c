/* The learner thread and its link to the loop.
 *
 * The thread owns the trainer and its own buffer handle.  It waits for enough
 * eligible trajectories (staleness bound, complete groups, dynamic filter),
 * trains one step, writes the new policy version to RUN_DIR/checkpoints/vN and
 * posts the result to the loop through a uv_async; the loop publishes the
 * weights, writes the metrics and schedules evaluations.  The loop never waits
 * on the learner; the learner never touches the loop's state. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "learner/tokenizer.h"
#include "learner/trainer.h"
#include "orchestrator/daemon.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/json.h"
#include "util/log.h"
#include "util/sha256.h"
#include "util/time.h"

#define STALE_BINS 8      /* staleness histogram: 0..6 and 7+ */
#define AUTO_STALE_MAX 8  /* ceiling of scheduler.max_staleness auto */
#define KEEP_VERSIONS 4   /* weight directories kept for workers still loading them */

enum { RES_STEP, RES_EVENT, RES_SKIP, RES_FAILED, RES_STOPPED };

typedef struct res {
  int kind;
  int64_t step, version;
  char dir[4096], sha[65];
  lt_step_stats_t st;
  double reward_mean, trunc_rate, stale_mean, route_rollout, step_s, gen_tokens, wait_s;
  int stale_max, stale_hist[STALE_BINS], marked_stale, filtered, quarantined, max_staleness;
  int flushed;              /* RES_SKIP: nothing trainable although no more data will come */
  int ndom;
  char dom[8][64];
  double dom_reward[8];
  char event_kind[32], *detail;
  struct res *next;
} res_t;

struct lt__learner {
  lt_daemon_t *d;
  uv_thread_t th;
  int th_started;
  uv_mutex_t mu;
  uv_cond_t cv;
  uv_mutex_t compute;       /* held by the thread while it computes (see lt__learner_fork_lock) */
  uv_async_t async;
  /* under mu */
  int quit, wake, paused, flush;
  res_t *head, *tail;
  /* loop side */
  void (*done)(void *);
  void *done_ud;
  /* thread side */
  lt_buffer_t *buf;
  lt_trainer_t *tr;
  char tok_src[4096];
  int64_t version, step, steps_wanted, last_full;
  char last_full_dir[4096];
  int batch, group, dynfilter, max_stale, stale_auto;
  int keep_routing, keep_sampling_mask; /* batches carry the rollout's expert ids / sampling supports */
  double grad_mean;         /* running mean of the actor gradient norm (guardrails.grad_spike) */
  int grad_seen;
  double last_step_end;
};

/* ---- posting to the loop ---- */

static void post(lt__learner_t *l, res_t *r) {
  uv_mutex_lock(&l->mu);
  if (l->tail) l->tail->next = r;
  else l->head = r;
  l->tail = r;
  uv_mutex_unlock(&l->mu);
  uv_async_send(&l->async);
}

static void post_event(lt__learner_t *l, const char *kind, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void post_event(lt__learner_t *l, const char *kind, const char *fmt, ...) {
  res_t *r = calloc(1, sizeof *r);
  char detail[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(detail, sizeof detail, fmt, ap);
  va_end(ap);
  if (!r || !(r->detail = strdup(detail))) {
    free(r);
    LT_WARN("learner", "%s: %s", kind, detail);
    return;
  }
  r->kind = RES_EVENT;
  snprintf(r->event_kind, sizeof r->event_kind, "%s", kind);
  post(l, r);
}

/* ---- setup ---- */

static int first_text(int n, const char *const *c, void *ud) {
  snprintf(ud, 4096, "%s", c[0] ? c[0] : "");
  return 1;
}

/* scheduler.json beside a full checkpoint: what the trainer state does not hold. */
static int save_full(lt__learner_t *l) {
  lt_daemon_t *d = l->d;
  char dir[4200], p[4300];
  snprintf(dir, sizeof dir, "%s/checkpoints/full-%06lld", d->run_dir, (long long)l->step);
  int rc = lt_trainer_save(l->tr, dir);
  if (rc < 0) return rc;
  char js[256];
  snprintf(js, sizeof js, "{\"step\": %lld, \"version\": %lld, \"max_staleness\": %d, \"keep_routing\": %d}\n",
           (long long)l->step, (long long)l->version, l->max_stale, l->keep_routing);
  snprintf(p, sizeof p, "%s/scheduler.json", dir);
  if ((rc = lt_fs_write_atomic(p, js, strlen(js))) < 0) return rc;
  if ((rc = lt_buffer_meta_set(l->buf, "full_checkpoint", dir)) < 0) return rc;
  /* Older full checkpoints beyond checkpoint.keep go. */
  int keep = (int)lt_config_int(d->cfg, "checkpoint.keep");
  int64_t every = lt_config_int(d->cfg, "checkpoint.every");
  if (l->last_full_dir[0] && strcmp(l->last_full_dir, dir) && keep <= 1) lt_fs_remove_tree(l->last_full_dir);
  if (every > 0 && keep > 1) {
    char old[4200];
    snprintf(old, sizeof old, "%s/checkpoints/full-%06lld", d->run_dir, (long long)(l->step - every * keep));
    if (l->step - every * keep >= 0 && lt_fs_is_dir(old)) lt_fs_remove_tree(old);
  }
  snprintf(l->last_full_dir, sizeof l->last_full_dir, "%s", dir);
  l->last_full = l->step;
  return 0;
}

static int load_scheduler(lt__learner_t *l, const char *dir) {
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
  cJSON_Delete(j);
  l->step = step;
  l->version = version;
  l->max_stale = (int)ms;
  l->keep_routing = (int)kr;
  return 0;
}

static int policy_dir_of(lt__learner_t *l, int64_t version, char *out, size_t n) {
  return snprintf(out, n, "%s/checkpoints/v%lld", l->d->run_dir, (long long)version) >= (int)n
             ? lt_error_set(LT_EINVAL, "run directory path too long")
             : 0;
}

static int build_trainer(lt__learner_t *l, const char *policy_dir) {
  const lt_config_t *c = l->d->cfg;
  lt_trainer_cfg_t tc;
  int rc = lt__trainer_cfg(c, &tc);
  if (rc < 0) return rc;
  lt_model_t *policy = NULL, *critic = NULL, *ref = NULL;
  if ((rc = lt_model_load(policy_dir, &policy)) < 0) return rc;
  const char *cp = lt_config_str(c, "model.critic_path");
  if (cp[0] && tc.loss.obj != LT_OBJ_GRPO && (rc = lt_model_load(cp, &critic)) == 0 && !critic->cfg.critic)
    rc = lt_error_set(LT_ECONFIG, "model.critic_path: %s is not a value model (no score head)", cp);
  if (rc == 0 && tc.loss.kl_coef > 0) rc = lt_model_load(policy_dir, &ref);
  if (rc == 0) rc = lt_trainer_create(&tc, policy, critic, ref, &l->tr);
  if (rc < 0) {
    lt_model_free(policy);
    lt_model_free(critic);
    lt_model_free(ref);
  }
  return rc;
}

/* ---- one step ---- */

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

/* Picks the batch: stale trajectories are marked, zero-variance groups
 * filtered, complete groups taken in arrival order.  Returns the number of
 * trajectories chosen into ids (0: not enough yet). */
static int select_batch(lt__learner_t *l, int flush, int64_t *ids, res_t *r) {
  int cap = l->batch * 8 + 1024, n = 0;
  lt_ready_t *rows = malloc(sizeof *rows * (size_t)cap);
  int64_t *stale = malloc(sizeof(int64_t) * (size_t)cap), *filt = malloc(sizeof(int64_t) * (size_t)cap);
  int ns = 0, nf = 0, chosen = 0, rc = 0;
  if (!rows || !stale || !filt) {
    rc = lt_error_set(LT_ENOMEM, "learner: out of memory");
    goto out;
  }
  if ((rc = lt_buffer_ready(l->buf, rows, cap, &n)) < 0) goto out;
  /* Stale first: they leave the candidate set whatever their group does. */
  int live = 0;
  for (int i = 0; i < n; i++) {
    if (rows[i].version_min >= 0 && l->version - rows[i].version_min > l->max_stale) stale[ns++] = rows[i].task_id;
    else rows[live++] = rows[i];
  }
  /* Groups in order of their first ready member. */
  int64_t *gids = malloc(sizeof(int64_t) * (size_t)(live + 1));
  if (!gids) {
    rc = lt_error_set(LT_ENOMEM, "learner: out of memory");
    goto out;
  }
  int ng = 0;
  for (int i = 0; i < live; i++) gids[ng++] = rows[i].group_id;
  qsort(gids, (size_t)ng, sizeof *gids, cmp_i64);
  int u = 0;
  for (int i = 0; i < ng; i++)
    if (u == 0 || gids[u - 1] != gids[i]) gids[u++] = gids[i];
  ng = u;
  uint8_t *seen = calloc((size_t)(ng + 1), 1);
  if (!seen) {
    free(gids);
    rc = lt_error_set(LT_ENOMEM, "learner: out of memory");
    goto out;
  }
  for (int i = 0; i < live && chosen < l->batch; i++) {
    int64_t *g = bsearch(&rows[i].group_id, gids, (size_t)ng, sizeof *gids, cmp_i64);
    size_t gi = (size_t)(g - gids);
    if (seen[gi]) continue;
    seen[gi] = 1;
    int members = 0, complete = rows[i].group_done >= l->group;
    double rmin = INFINITY, rmax = -INFINITY;
    for (int j = i; j < live; j++)
      if (rows[j].group_id == rows[i].group_id) {
        members++;
        rmin = fmin(rmin, rows[j].reward);
        rmax = fmax(rmax, rows[j].reward);
      }
    if (!complete && !flush) continue;
    int zero_var = l->dynfilter && l->group > 1 && members >= 2 && rmax - rmin < 1e-9;
    for (int j = i; j < live; j++)
      if (rows[j].group_id == rows[i].group_id) {
        if (zero_var) filt[nf++] = rows[j].task_id;
        else ids[chosen++] = rows[j].task_id;
      }
  }
  free(seen);
  free(gids);
  int64_t next = l->step + 1;
  if (ns && (rc = lt_buffer_traj_mark(l->buf, stale, ns, LT_TR_STALE, next)) < 0) goto out;
  if (nf && (rc = lt_buffer_traj_mark(l->buf, filt, nf, LT_TR_FILTERED, next)) < 0) goto out;
  r->marked_stale += ns;
  r->filtered += nf;
  if (chosen < l->batch && !(flush && chosen > 0)) chosen = 0;
out:
  free(rows);
  free(stale);
  free(filt);
  return rc < 0 ? rc : chosen;
}

/* Packs the chosen trajectories and fills the step's data statistics. */
static int pack(lt__learner_t *l, const int64_t *ids, int n, lt__packed_t *p, res_t *r) {
  int rc = lt__batch_pack(l->buf, lt_trainer_policy(l->tr), ids, n, p);
  if (rc < 0) return rc;
  if (p->nbad) { /* quarantined: failed, counted, and the run goes on */
    if ((rc = lt_buffer_traj_mark(l->buf, p->bad, p->nbad, LT_TR_FAILED, l->step + 1)) < 0 ||
        (rc = lt_buffer_counter_add(l->buf, "trajectories_quarantined", p->nbad)) < 0)
      return rc;
    for (int i = 0; i < p->nbad; i++)
      post_event(l, "quarantined", "trajectory of task %lld cannot be trained on: %s", (long long)p->bad[i], p->bad_why[i]);
    r->quarantined = p->nbad;
  }
  n = p->n;
  if (n == 0) return 0;
  r->reward_mean = p->reward_mean;
  r->trunc_rate = p->trunc_rate;
  r->route_rollout = p->route_rollout;
  r->gen_tokens = p->gen_tokens;
  r->ndom = p->ndom;
  memcpy(r->dom, p->dom, sizeof r->dom);
  memcpy(r->dom_reward, p->dom_reward, sizeof r->dom_reward);
  for (int s = 0; s < n; s++) {
    int age = p->vmin[s] >= 0 ? (int)(l->version - p->vmin[s]) : 0;
    r->stale_hist[age < STALE_BINS - 1 ? age : STALE_BINS - 1]++;
    r->stale_mean += age;
    if (age > r->stale_max) r->stale_max = age;
  }
  r->stale_mean /= n;
  return 0;
}

/* Writes the policy as version v for the workers; older versions go. */
static int publish(lt__learner_t *l, int64_t v, res_t *r) {
  if (policy_dir_of(l, v, r->dir, sizeof r->dir) < 0) return LT_EINVAL;
  int rc = lt_model_save(lt_trainer_policy(l->tr), r->dir);
  if (rc == 0 && l->tok_src[0]) rc = lt_tokenizer_copy_files(l->tok_src, r->dir);
  char st[4200];
  snprintf(st, sizeof st, "%s/model.safetensors", r->dir);
  if (rc == 0) rc = lt_sha256_file(st, r->sha);
  if (rc < 0) return rc;
  if (v - KEEP_VERSIONS > 0) {
    char old[4200];
    if (policy_dir_of(l, v - KEEP_VERSIONS, old, sizeof old) == 0 && lt_fs_is_dir(old)) lt_fs_remove_tree(old);
  }
  return 0;
}

/* Guardrails: limits that act.  Each action is an event with its cause. */
static int guardrails(lt__learner_t *l, res_t *r, int *rollback) {
  const lt_config_t *c = l->d->cfg;
  const lt_step_stats_t *st = &r->st;
  double mm = lt_config_num(c, "guardrails.max_mismatch"), ta = lt_config_num(c, "guardrails.min_token_accept");
  double ja = lt_config_num(c, "guardrails.min_traj_accept"), me = lt_config_num(c, "guardrails.min_entropy");
  double gs = lt_config_num(c, "guardrails.grad_spike"), floor = lt_config_num(c, "monitor.routing_confidence_floor");
  int nml = lt_model_moe_layers(&lt_trainer_policy(l->tr)->cfg);
  *rollback = 0;
  if (gs > 0 && l->grad_seen >= 5 && st->actor_grad_norm > gs * l->grad_mean) {
    post_event(l, "guardrail", "step %lld: actor gradient norm %.4g is %.1fx its running mean %.4g: rolling back to the "
               "last good checkpoint and skipping the batch", (long long)l->step, st->actor_grad_norm,
               st->actor_grad_norm / l->grad_mean, l->grad_mean);
    *rollback = 1;
    return 0;
  }
  if (isfinite(st->actor_grad_norm)) {
    l->grad_mean = l->grad_seen ? 0.9 * l->grad_mean + 0.1 * st->actor_grad_norm : st->actor_grad_norm;
    l->grad_seen++;
  }
  int tighten = 0;
  if (mm > 0 && st->mismatch > mm) {
    post_event(l, "guardrail", "step %lld: train-rollout mismatch %.4f > guardrails.max_mismatch %.4f: tightening staleness",
               (long long)l->step, st->mismatch, mm);
    tighten = 1;
  }
  if (ta > 0 && st->token_accept < ta) {
    post_event(l, "guardrail", "step %lld: MIS token acceptance %.3f < guardrails.min_token_accept %.3f: tightening "
               "staleness%s", (long long)l->step, st->token_accept, ta, nml && !l->keep_routing ? ", keep_routing on" : "");
    tighten = 1;
    if (nml) l->keep_routing = 1;
  }
  if (ja > 0 && st->traj_accept < ja) {
    post_event(l, "guardrail", "step %lld: MIS trajectory acceptance %.3f < guardrails.min_traj_accept %.3f: tightening "
               "staleness", (long long)l->step, st->traj_accept, ja);
    tighten = 1;
  }
  if (tighten && l->max_stale > 0) l->max_stale--;
  if (me > 0 && st->entropy < me) {
    double lf = lt_config_num(c, "guardrails.lr_floor");
    double cur = st->lr / (lt_config_num(c, "learner.lr") > 0 ? lt_config_num(c, "learner.lr") : 1);
    if (cur * 0.5 >= lf) {
      lt_trainer_scale_lr(l->tr, 0.5);
      post_event(l, "guardrail", "step %lld: entropy %.4f < guardrails.min_entropy %.4f: actor learning rate halved",
                 (long long)l->step, st->entropy, me);
    }
  }
  double conf = st->routing_confidence >= 0 ? st->routing_confidence : 1;
  if (r->route_rollout >= 0 && r->route_rollout < conf) conf = r->route_rollout;
  if (floor > 0 && nml && conf < floor) {
    const char *mit = lt_config_str(c, "monitor.routing_mitigation");
    const char *did = "none";
    if (!strcmp(mit, "keep_routing") && !l->keep_routing) l->keep_routing = 1, did = "keep_routing on";
    else if (!strcmp(mit, "staleness") && l->max_stale > 0) l->max_stale = 0, did = "max_staleness 0";
    post_event(l, "routing_alarm", "step %lld: routing confidence %.4f < monitor.routing_confidence_floor %.4f "
               "(learner %.4f, rollout %.4f); mitigation: %s", (long long)l->step, conf, floor, st->routing_confidence,
               r->route_rollout, did);
  }
  /* scheduler.max_staleness auto: follow the measured mismatch. */
  if (l->stale_auto && !tighten) {
    double target = mm > 0 ? mm : 0.05;
    if (st->mismatch > target && l->max_stale > 0) {
      l->max_stale--;
      post_event(l, "staleness", "step %lld: mismatch %.4f > %.4f: max_staleness auto -> %d", (long long)l->step,
                 st->mismatch, target, l->max_stale);
    } else if (st->mismatch < target / 2 && l->max_stale < AUTO_STALE_MAX) {
      l->max_stale++;
      post_event(l, "staleness", "step %lld: mismatch %.4f < %.4f: max_staleness auto -> %d", (long long)l->step,
                 st->mismatch, target / 2, l->max_stale);
    }
  }
  return 0;
}

/* 1: trained a step, 0: nothing to do yet, <0: error. */
static int try_step(lt__learner_t *l, int flush) {
  res_t *r = calloc(1, sizeof *r);
  int64_t *ids = malloc(sizeof(int64_t) * (size_t)(l->batch * 8 + 1024));
  lt__packed_t p = {0};
  int rc = r && ids ? 0 : lt_error_set(LT_ENOMEM, "learner: out of memory");
  int n = rc == 0 ? select_batch(l, flush, ids, r) : rc;
  if (n <= 0) {
    rc = n;
    if (rc == 0 && r && (flush || r->marked_stale || r->filtered)) {
      r->kind = RES_SKIP;
      r->flushed = flush;
      post(l, r);
      r = NULL;
    }
    goto out;
  }
  double t0 = lt_time_mono_s();
  if ((rc = pack(l, ids, n, &p, r)) < 0) goto out;
  if ((n = p.n) == 0) { /* all quarantined */
    r->kind = RES_SKIP;
    r->flushed = flush;
    post(l, r);
    r = NULL;
    goto out;
  }
  lt_train_batch_t b;
  lt__packed_batch(&p, l->keep_routing, l->keep_sampling_mask, &b);
  if ((rc = lt_trainer_step(l->tr, &b, &r->st)) < 0) goto out;
  l->step++;
  int rollback = 0;
  guardrails(l, r, &rollback);
  if (rollback && l->last_full_dir[0]) {
    int64_t keep_step = l->step;
    if ((rc = lt_trainer_load(l->tr, l->last_full_dir)) < 0) goto out;
    l->step = keep_step; /* step numbers stay monotonic; the weights are the good ones */
    if ((rc = lt_buffer_traj_mark(l->buf, p.ids, n, LT_TR_FILTERED, l->step)) < 0) goto out;
  } else if ((rc = lt_buffer_traj_mark(l->buf, p.ids, n, LT_TR_CONSUMED, l->step)) < 0) {
    goto out;
  }
  l->version++;
  if ((rc = publish(l, l->version, r)) < 0) goto out;
  int64_t every = lt_config_int(l->d->cfg, "checkpoint.every");
  if (every > 0 && l->step % every == 0 && (rc = save_full(l)) < 0) goto out;
  double now = lt_time_mono_s();
  r->kind = RES_STEP;
  r->step = l->step;
  r->version = l->version;
  r->step_s = now - t0;
  r->wait_s = l->last_step_end > 0 ? t0 - l->last_step_end : 0;
  r->max_staleness = l->max_stale;
  l->last_step_end = now;
  post(l, r);
  r = NULL;
  rc = 1;
out:
  lt__packed_free(&p);
  free(ids);
  free(r);
  return rc;
}

static void thread_main(void *arg) {
  lt__learner_t *l = arg;
  for (;;) {
    uv_mutex_lock(&l->mu);
    while (!l->quit && (!l->wake || l->paused)) uv_cond_timedwait(&l->cv, &l->mu, 200 * 1000000ull);
    int quit = l->quit, flush = l->flush;
    l->wake = 0;
    l->flush = 0;
    uv_mutex_unlock(&l->mu);
    if (quit) break;
    if (l->steps_wanted && l->step >= l->steps_wanted) continue;
    uv_mutex_lock(&l->compute);
    int rc = try_step(l, flush);
    uv_mutex_unlock(&l->compute);
    if (rc < 0) {
      res_t *r = calloc(1, sizeof *r);
      if (r && (r->detail = strdup(lt_error_msg()))) {
        r->kind = RES_FAILED;
        post(l, r);
      } else {
        free(r);
      }
      break;
    }
    if (rc == 1) {
      uv_mutex_lock(&l->mu);
      l->wake = 1; /* more may be ready already */
      uv_mutex_unlock(&l->mu);
    }
  }
  /* The final full checkpoint, so --resume continues from here. */
  uv_mutex_lock(&l->compute);
  int failed = l->tr && l->step > l->last_full && save_full(l) < 0;
  uv_mutex_unlock(&l->compute);
  if (failed)
    post_event(l, "checkpoint_failed", "final checkpoint: %s", lt_error_msg());
  res_t *r = calloc(1, sizeof *r);
  if (r) r->kind = RES_STOPPED;
  if (r) post(l, r);
}

/* ---- loop side ---- */

static void emit_step(lt_daemon_t *d, const res_t *r) {
  const lt_step_stats_t *s = &r->st;
  d->step = r->step;
  lt__publish_weights(d, r->version, r->dir, r->sha);
  struct {
    const char *name;
    double v;
  } m[] = {
      {"reward/mean", r->reward_mean},          {"rollout/truncation_rate", r->trunc_rate},
      {"mis/token_accept", s->token_accept},    {"mis/traj_accept", s->traj_accept},
      {"mis/kept_fraction", s->kept_fraction},  {"mismatch/abs_log_ratio", s->mismatch},
      {"mismatch/kl", s->kl_rollout},           {"policy/entropy", s->entropy},
      {"actor/loss", s->actor_loss},            {"actor/grad_norm", s->actor_grad_norm},
      {"actor/lr", s->lr},                      {"actor/clip_frac", s->clip_frac},
      {"critic/value_loss", s->critic_loss},    {"critic/grad_norm", s->critic_grad_norm},
      {"critic/value_mean", s->value_mean},     {"critic/return_mean", s->return_mean},
      {"advantage/mean", s->adv_mean},          {"advantage/std", s->adv_std},
      {"kl/ref", s->kl_ref},                    {"staleness/mean", r->stale_mean},
      {"staleness/max", r->stale_max},          {"scheduler/max_staleness", r->max_staleness},
      {"buffer/stale", r->marked_stale},        {"buffer/filtered", r->filtered},
      {"learner/step_s", r->step_s},            {"learner/wait_s", r->wait_s},
      {"learner/tokens_per_s", r->step_s > 0 ? s->tokens / r->step_s : 0},
      {"batch/trajectories", s->trajectories},  {"batch/tokens", s->tokens},
  };
  for (size_t i = 0; i < sizeof m / sizeof m[0]; i++) lt__metric(d, m[i].name, m[i].v);
  if (s->routing_confidence >= 0) lt__metric(d, "routing/confidence_learner", s->routing_confidence);
  if (r->route_rollout >= 0) lt__metric(d, "routing/confidence_rollout", r->route_rollout);
  for (int i = 0; i < STALE_BINS; i++) {
    char nm[96];
    snprintf(nm, sizeof nm, i == STALE_BINS - 1 ? "staleness/hist_%d+" : "staleness/hist_%d", i);
    lt__metric(d, nm, r->stale_hist[i]);
  }
  for (int i = 0; i < r->ndom; i++) {
    char nm[96];
    snprintf(nm, sizeof nm, "reward/%s", r->dom[i]);
    lt__metric(d, nm, r->dom_reward[i]);
  }
  double el = (lt__now_ms() - d->started_ms) / 1000.0;
  double gen = r->gen_tokens, span = r->step_s + r->wait_s;
  if (span > 0) lt__metric(d, "throughput/gen_tokens_per_s", gen / span);
  if (el > 0) lt__metric(d, "throughput/trajectories_per_s", d->trajs_in / el);
  d->last_reward = r->reward_mean;
  d->last_tokens_per_s = span > 0 ? gen / span : 0;
  int64_t every = lt_config_int(d->cfg, "eval.every");
  if (every > 0 && d->step >= d->eval_next && !(d->steps && d->step >= d->steps)) {
    d->eval_next = d->step + every;
    lt__eval_start(d);
  }
}

static void on_close(uv_handle_t *h) {
  lt__learner_t *l = h->data;
  void (*done)(void *) = l->done;
  void *ud = l->done_ud;
  uv_mutex_destroy(&l->mu);
  uv_mutex_destroy(&l->compute);
  uv_cond_destroy(&l->cv);
  lt_trainer_free(l->tr);
  lt_buffer_close(l->buf);
  free(l);
  if (done) done(ud);
}

static void on_async(uv_async_t *a) {
  lt__learner_t *l = a->data;
  lt_daemon_t *d = l->d;
  uv_mutex_lock(&l->mu);
  res_t *r = l->head;
  l->head = l->tail = NULL;
  uv_mutex_unlock(&l->mu);
  int stopped = 0, stepped = 0;
  while (r) {
    res_t *next = r->next;
    switch (r->kind) {
    case RES_STEP:
      d->ready_pending -= r->st.trajectories + r->marked_stale + r->filtered + r->quarantined;
      emit_step(d, r);
      stepped = 1;
      break;
    case RES_EVENT: lt__event(d, r->event_kind, "%s", r->detail); break;
    case RES_SKIP:
      d->ready_pending -= r->marked_stale + r->filtered + r->quarantined;
      /* Sync mode: the released batch was dropped entirely (filtered or stale);
       * release another.  A flush that found nothing at all (the learner woke
       * before any task existed) releases nothing: it used to double every batch. */
      if (r->flushed && d->sync && d->sync_released > d->step && r->marked_stale + r->filtered > 0)
        d->sync_released = d->step;
      break;
    case RES_FAILED:
      LT_ERROR("learner", "%s", r->detail);
      lt__event(d, "learner_failed", "%s", r->detail);
      lt__finish(d, LT_EXIT_FAIL);
      break;
    case RES_STOPPED: stopped = 1; break;
    }
    free(r->detail);
    free(r);
    r = next;
  }
  lt__scheduler_refill(d);
  lt__scheduler_dispatch(d);
  /* A flush step takes one batch: when nothing more will come, what it left
   * needs another (the flag it consumed would otherwise be lost with no result
   * left to raise it again, and the run would never end). */
  if (stepped && d->ready_pending > 0) lt__learner_notify(d);
  lt__check_done(d);
  if (stopped) {
    uv_thread_join(&l->th);
    d->learner = NULL;
    uv_close((uv_handle_t *)&l->async, on_close);
  }
}

int lt__learner_start(lt_daemon_t *d) {
  lt__learner_t *l = calloc(1, sizeof *l);
  if (!l) return lt_error_set(LT_ENOMEM, "learner: out of memory");
  l->d = d;
  l->batch = (int)lt_config_int(d->cfg, "learner.batch.trajectories");
  l->group = d->group_size;
  l->dynfilter = lt_config_bool(d->cfg, "scheduler.dynamic_filter");
  l->steps_wanted = d->steps;
  l->keep_routing = lt_config_bool(d->cfg, "learner.keep_routing");
  l->keep_sampling_mask = lt_config_bool(d->cfg, "learner.keep_sampling_mask");
  const cJSON *ms = lt_config_get(d->cfg, "scheduler.max_staleness");
  l->stale_auto = cJSON_IsString(ms);
  l->max_stale = cJSON_IsNumber(ms) ? (int)ms->valuedouble : 2;
  if (d->sync) l->max_stale = 0;
  l->version = d->version;
  l->step = d->step;
  uv_mutex_init(&l->mu);
  uv_mutex_init(&l->compute);
  uv_cond_init(&l->cv);
  char p[4200];
  snprintf(p, sizeof p, "%s/buffer.db", d->run_dir);
  int rc = lt_buffer_open(p, 0, &l->buf);
  /* Tokenizer files travel with every version: from the first policy. */
  char v0[4096];
  if (rc == 0) {
    snprintf(v0, sizeof v0, "%s", d->weights_dir);
    snprintf(l->tok_src, sizeof l->tok_src, "%s", d->weights_dir);
  }
  if (rc == 0 && d->o.resume) {
    char *full = lt_buffer_meta_get(l->buf, "full_checkpoint");
    if (full && lt_fs_is_dir(full)) {
      /* Exact continuation: the trainer as it was at its last full checkpoint. */
      rc = load_scheduler(l, full);
      if (rc == 0) rc = policy_dir_of(l, l->version, v0, sizeof v0);
      if (rc == 0 && !lt_fs_is_dir(v0)) snprintf(v0, sizeof v0, "%s/policy", full);
      if (rc == 0) rc = build_trainer(l, v0);
      if (rc == 0) rc = lt_trainer_load(l->tr, full);
      if (rc == 0) {
        snprintf(l->last_full_dir, sizeof l->last_full_dir, "%s", full);
        l->last_full = l->step;
      }
    } else {
      /* No full checkpoint yet: start over from the first policy. */
      lt_buffer_query(l->buf, "SELECT path FROM checkpoints WHERE kind = 'weights' ORDER BY version LIMIT 1", first_text, v0);
      l->step = 0;
      l->version = 0;
      rc = build_trainer(l, v0);
    }
    free(full);
    int n = rc == 0 ? lt_buffer_traj_rewind(l->buf, l->step) : rc;
    if (n < 0) rc = n;
    if (rc == 0) {
      LT_INFO("learner", "resuming at learner step %lld, policy v%lld (%d trajectories back to ready)", (long long)l->step,
              (long long)l->version, n);
      d->step = l->step;
      if (l->version != d->version) {
        char st[4200], sha[65];
        snprintf(st, sizeof st, "%s/model.safetensors", v0);
        if ((rc = lt_sha256_file(st, sha)) == 0) {
          d->version = l->version;
          snprintf(d->weights_dir, sizeof d->weights_dir, "%s", v0);
          snprintf(d->weights_sha, sizeof d->weights_sha, "%s", sha);
        }
      }
    }
  } else if (rc == 0) {
    rc = build_trainer(l, v0);
  }
  if (rc == 0) rc = uv_async_init(&d->loop, &l->async, on_async) == 0 ? 0 : lt_error_set(LT_ESYS, "uv_async_init failed");
  if (rc < 0) {
    lt_trainer_free(l->tr);
    lt_buffer_close(l->buf);
    uv_mutex_destroy(&l->mu);
    uv_mutex_destroy(&l->compute);
    uv_cond_destroy(&l->cv);
    free(l);
    return lt_error_wrap(rc, "learner");
  }
  l->async.data = l;
  /* Before the thread starts: from then on the handle is the thread's alone. */
  d->ready_pending = lt_buffer_count_status(l->buf, LT_TR_READY);
  if (uv_thread_create(&l->th, thread_main, l) != 0) {
    uv_close((uv_handle_t *)&l->async, on_close);
    return lt_error_set(LT_ESYS, "learner: cannot start its thread");
  }
  l->th_started = 1;
  d->learner = l;
  lt__learner_notify(d);
  return 0;
}

void lt__learner_notify(lt_daemon_t *d) {
  lt__learner_t *l = d->learner;
  if (!l) return;
  /* Nothing more will come for this step (sync barrier met, or tasks exhausted):
   * train on what there is. */
  int flush = d->open_train == 0 && (d->sync || (d->max_tasks > 0 && d->tasks_created >= d->max_tasks));
  uv_mutex_lock(&l->mu);
  l->wake = 1;
  l->flush |= flush;
  uv_cond_signal(&l->cv);
  uv_mutex_unlock(&l->mu);
}

void lt__learner_pause(lt_daemon_t *d, int on) {
  lt__learner_t *l = d->learner;
  if (!l) return;
  uv_mutex_lock(&l->mu);
  l->paused = on;
  l->wake = 1;
  uv_cond_signal(&l->cv);
  uv_mutex_unlock(&l->mu);
}

void lt__learner_stop(lt_daemon_t *d, void (*done)(void *), void *ud) {
  lt__learner_t *l = d->learner;
  if (!l) {
    done(ud);
    return;
  }
  l->done = done;
  l->done_ud = ud;
  uv_mutex_lock(&l->mu);
  l->quit = 1;
  uv_cond_signal(&l->cv);
  uv_mutex_unlock(&l->mu);
}

int lt__learner_fork_lock(lt_daemon_t *d) { return !d->learner || uv_mutex_trylock(&d->learner->compute) == 0; }

void lt__learner_fork_unlock(lt_daemon_t *d) {
  if (d->learner) uv_mutex_unlock(&d->learner->compute);
}
