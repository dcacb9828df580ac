/* `longtail grad`: gradients of a policy loss on a batch, at the checkpoint,
 * and optionally the state after one full learner step on it.  Under a
 * launcher each rank works on its token-balanced share of the batch and rank 0
 * writes the results (learner/dist.h). */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "learner/dist.h"
#include "learner/loss.h"
#include "learner/model.h"
#include "learner/safetensors.h"
#include "learner/trainer.h"
#include "util/error.h"
#include "util/json.h"

typedef struct {
  int32_t *tokens;
  float *logp_rollout, *adv;
  uint8_t *mask;
  int *start;
  double *reward; /* per sequence, for --step-out */
  int64_t *group;
  uint8_t *truncated;
  int *traj; /* per sequence: its trajectory (consecutive lines with one "trajectory" are its contexts) */
  int n, nseq, cap, scap;
} packed_t;

static void packed_free(packed_t *p) {
  free(p->tokens), free(p->logp_rollout), free(p->adv), free(p->mask), free(p->start);
  free(p->reward), free(p->group), free(p->truncated), free(p->traj);
}

/* Reallocates n arrays of elements of size[i] to cap elements each; the ones
 * that could not grow keep their old block (freed with the rest). */
static int realloc_all(void **arr[], const size_t *size, int n, int cap) {
  int ok = 1;
  for (int i = 0; i < n; i++) {
    void *q = realloc(*arr[i], size[i] * (size_t)cap);
    if (q) *arr[i] = q;
    else ok = 0;
  }
  return ok ? 0 : lt_error_set(LT_ENOMEM, "grad: out of memory");
}

static int grow(packed_t *p, int need) {
  if (need <= p->cap) return 0;
  int cap = p->cap ? p->cap : 1024;
  while (cap < need) cap *= 2;
  void **arr[] = {(void **)&p->tokens, (void **)&p->logp_rollout, (void **)&p->adv, (void **)&p->mask};
  const size_t size[] = {sizeof *p->tokens, sizeof *p->logp_rollout, sizeof *p->adv, sizeof *p->mask};
  int rc = realloc_all(arr, size, 4, cap);
  if (rc == 0) p->cap = cap;
  return rc;
}

/* The optional per-sequence fields a learner step needs: reward (default 0),
 * group (default: the line's index) and truncated (default false); and
 * trajectory (≥ 0; default: a trajectory of its own). */
static int read_seq_fields(packed_t *p, const cJSON *line, const char *path, long ln) {
  double r = 0;
  int64_t g = p->nseq, traj = -1 - (int64_t)p->nseq;
  int tr = 0, rc = 0;
  if (cJSON_GetObjectItemCaseSensitive(line, "reward") && (rc = lt_json_get_f64(line, "reward", &r)) == 0 &&
      !isfinite(r))
    rc = lt_error_set(LT_EINVAL, "reward: not finite");
  if (rc == 0 && cJSON_GetObjectItemCaseSensitive(line, "group")) rc = lt_json_get_i64(line, "group", &g);
  if (rc == 0 && cJSON_GetObjectItemCaseSensitive(line, "truncated")) rc = lt_json_get_bool(line, "truncated", &tr);
  if (rc == 0 && cJSON_GetObjectItemCaseSensitive(line, "trajectory") &&
      (rc = lt_json_get_i64(line, "trajectory", &traj)) == 0 && (traj < 0 || traj > INT32_MAX))
    rc = lt_error_set(LT_EINVAL, "trajectory: expected an integer in [0, 2^31)");
  if (rc < 0) return lt_error_wrap(rc, "%s:%ld", path, ln);
  p->traj[p->nseq] = (int)traj;
  p->reward[p->nseq] = r;
  p->group[p->nseq] = g;
  p->truncated[p->nseq] = (uint8_t)tr;
  return 0;
}

/* One batch line: tokens, loss_mask, rollout_logprobs, advantages, all of one length. */
static int read_line(packed_t *p, const cJSON *line, const lt_model_t *m, const char *path, long ln) {
  int32_t *toks = NULL, *mask = NULL;
  float *lp = NULL, *adv = NULL;
  int n, nm, nl, na;
  int rc = lt_cli_token_array(line, "tokens", m->cfg.vocab, 1, m->cfg.max_pos, path, ln, &toks, &n);
  if (rc == 0 && (rc = lt_json_get_i32_array(line, "loss_mask", &mask, &nm)) < 0) lt_error_wrap(rc, "%s:%ld", path, ln);
  if (rc == 0 && (rc = lt_json_get_f32_array(line, "rollout_logprobs", &lp, &nl)) < 0)
    lt_error_wrap(rc, "%s:%ld", path, ln);
  if (rc == 0 && (rc = lt_json_get_f32_array(line, "advantages", &adv, &na)) < 0) lt_error_wrap(rc, "%s:%ld", path, ln);
  if (rc == 0 && (nm != n || nl != n || na != n))
    rc =
        lt_error_set(LT_EINVAL, "%s:%ld: loss_mask, rollout_logprobs and advantages must have the %d entries of tokens",
                     path, ln, n);
  for (int i = 0; rc == 0 && i < n; i++) {
    if (mask[i] != 0 && mask[i] != 1)
      rc = lt_error_set(LT_EINVAL, "%s:%ld: loss_mask[%d]: expected 0 or 1", path, ln, i);
    else if (i == 0 && mask[0])
      rc = lt_error_set(LT_EINVAL, "%s:%ld: loss_mask[0] must be 0 (nothing predicts the first token)", path, ln);
    else if (!isfinite(lp[i]) || lp[i] > 0)
      rc = lt_error_set(LT_EINVAL, "%s:%ld: rollout_logprobs[%d]: expected a finite value ≤ 0", path, ln, i);
    else if (!isfinite(adv[i])) rc = lt_error_set(LT_EINVAL, "%s:%ld: advantages[%d]: not finite", path, ln, i);
  }
  if (rc == 0 && p->nseq + 2 > p->scap) {
    int sc = p->scap ? 2 * p->scap : 64;
    void **arr[] = {(void **)&p->start, (void **)&p->reward, (void **)&p->group, (void **)&p->truncated,
                    (void **)&p->traj};
    const size_t size[] = {sizeof *p->start, sizeof *p->reward, sizeof *p->group, sizeof *p->truncated,
                           sizeof *p->traj};
    if ((rc = realloc_all(arr, size, 5, sc)) == 0) p->scap = sc;
  }
  if (rc == 0) rc = read_seq_fields(p, line, path, ln);
  if (rc == 0 && (rc = grow(p, p->n + n)) == 0) {
    if (p->nseq == 0) p->start[0] = 0;
    for (int i = 0; i < n; i++) {
      p->tokens[p->n + i] = toks[i];
      p->mask[p->n + i] = (uint8_t)mask[i];
      p->logp_rollout[p->n + i] = lp[i];
      p->adv[p->n + i] = adv[i];
    }
    p->n += n;
    p->start[++p->nseq] = p->n;
  }
  free(toks), free(mask), free(lp), free(adv);
  return rc;
}

/* A bounds flag into a float pair of the loss config. */
static int bounds(lt_cmd_args_t *c, const char *flag, float *lo, float *hi) {
  double v[2] = {*lo, *hi};
  int rc = lt_args_bounds(c, flag, v, NULL);
  *lo = (float)v[0];
  *hi = (float)v[1];
  return rc;
}

/* The gradients of this rank's token-balanced share of the batch, rescaled to
 * the global normaliser and summed over the ranks: m->grads and *st (its
 * counts and means over the whole batch) are what one process computes on
 * all of it.  *rconf: learner routing confidence (-1 for dense). */
static int share_grad(lt_model_t *m, const lt_loss_cfg_t *lc, const packed_t *p, lt_loss_stats_t *st, double *rconf) {
  int a, b;
  lt_dist_share(p->start, p->traj, 0, p->nseq, lt_dist_rank(), lt_dist_size(), &a, &b);
  int t0 = p->start[a], n = p->start[b] - t0, maxlen = 1, rc = 0;
  int *starts = malloc(sizeof(int) * (size_t)(b - a + 1));
  float *dlogp = malloc(sizeof(float) * (size_t)(n + 1));
  if (!starts || !dlogp) rc = lt_error_set(LT_ENOMEM, "grad: out of memory");
  for (int s = a; rc == 0 && s <= b; s++) {
    starts[s - a] = p->start[s] - t0;
    if (s < b && p->start[s + 1] - p->start[s] > maxlen) maxlen = p->start[s + 1] - p->start[s];
  }
  memset(st, 0, sizeof *st);
  double conf = 0;
  lt_fwd_out_t fo = {.routing_confidence = -1};
  /* An empty share still needs the gradient buffer it contributes zeros from. */
  if (rc == 0) rc = lt_model_train_alloc(m, n > 0 ? n : 1, maxlen);
  if (rc == 0) lt_model_zero_grad(m);
  if (rc == 0 && b > a) {
    lt_batch_t bt = {.nseq = b - a, .start = starts, .tokens = p->tokens + t0};
    if ((rc = lt_model_forward(m, &bt, &fo)) == 0) {
      lt_loss_in_t in = {.nseq = b - a,
                         .start = starts,
                         .logp = fo.logprobs,
                         .logp_rollout = p->logp_rollout + t0,
                         .adv = p->adv + t0,
                         .mask = p->mask + t0,
                         .traj = p->traj + a};
      rc = lt_loss_compute(lc, &in, dlogp, st);
      conf = fo.routing_confidence * n;
    }
  }
  /* The group forms average over trajectories, the other objectives over loss tokens. */
  double global, w = 1;
  if (rc == 0) rc = lt_dist_weight(lc->group_adv ? st->trajs : st->tokens, &global, &w);
  if (rc == 0 && b > a) {
    for (int i = 0; i < n; i++) dlogp[i] *= (float)w;
    rc = lt_model_backward(m, dlogp, NULL);
  }
  if (rc == 0) rc = lt_dist_sum_f32(m->grads, m->nparams);
  double v[9] = {st->loss * w,
                 st->tokens_kept,
                 st->trajs_kept,
                 st->tokens,
                 st->trajs,
                 st->tokens_in_bounds,
                 st->mismatch * st->tokens,
                 st->clip_frac * st->tokens,
                 conf};
  if (rc == 0 && lt_dist_size() > 1 && (rc = lt_dist_sum_f64(v, 9)) == 0) {
    *st = (lt_loss_stats_t){.loss = v[0],
                            .tokens_kept = (int)v[1],
                            .trajs_kept = (int)v[2],
                            .tokens = (int)v[3],
                            .trajs = (int)v[4],
                            .tokens_in_bounds = (int)v[5],
                            .mismatch = v[3] ? v[6] / v[3] : 0,
                            .clip_frac = v[3] ? v[7] / v[3] : 0};
    conf = v[8];
  }
  *rconf = lt_model_moe_layers(&m->cfg) == 0 ? -1 : conf / p->n;
  free(starts);
  free(dlogp);
  return rc;
}

/* Writes the gradient buffer under the checkpoint's names and shapes. */
static int write_grads(const lt_model_t *m, const char *out) {
  lt_st_tensor_t *t = calloc((size_t)m->ntensors, sizeof *t);
  if (!t) return lt_error_set(LT_ENOMEM, "grad: out of memory");
  for (int i = 0; i < m->ntensors; i++) {
    const lt_tensor_t *s = &m->tensors[i];
    t[i] = (lt_st_tensor_t){.name = s->name,
                            .ndim = s->ndim,
                            .shape = {s->ndim == 1 ? s->cols : s->rows, s->cols},
                            .data = m->grads + s->offset};
  }
  int rc = lt_st_write(out, t, m->ntensors, "{\"format\":\"pt\",\"content\":\"gradients\"}");
  free(t);
  return rc;
}

/* One full learner step (π_old pre-pass, critic, advantages from the lines'
 * rewards, the objective, AdamW or Muon) on the batch; rank 0 writes the
 * trainer's state (policy/, critic/, optimizer files) to dir.  Takes m. */
static int learner_step(lt_model_t *m, const lt_loss_cfg_t *lc, const packed_t *p, const char *optimizer,
                        int minibatches, const char *dir, size_t *optim_bytes) {
  lt_trainer_cfg_t tc = {
      .loss = *lc, .actor_minibatches = minibatches, .critic_minibatches = minibatches, .threads = lt_cli_threads()};
  lt_opt_kind kind = strcmp(optimizer, "muon") == 0 ? LT_OPT_MUON : LT_OPT_ADAMW;
  lt_optim_cfg_default(&tc.actor_opt, kind);
  lt_optim_cfg_default(&tc.critic_opt, LT_OPT_ADAMW);
  lt_trainer_t *tr;
  int rc = lt_trainer_create(&tc, m, NULL, NULL, &tr);
  if (rc < 0) return rc;
  lt_train_batch_t b = {.nseq = p->nseq,
                        .start = p->start,
                        .tokens = p->tokens,
                        .logp_rollout = p->logp_rollout,
                        .mask = p->mask,
                        .reward = p->reward,
                        .truncated = p->truncated,
                        .group = p->group,
                        .traj = p->traj};
  lt_step_stats_t st;
  rc = lt_trainer_step(tr, &b, &st);
  if (rc == 0) rc = lt_trainer_save(tr, dir);
  *optim_bytes = lt_trainer_optim_bytes(tr);
  lt_trainer_free(tr);
  return rc;
}

int lt_cmd_grad(int argc, char **argv) {
  lt_arg_t args[] = {
      {.name = "--model", .kind = LT_ARG_VALUE, .metavar = "DIR", .help = "checkpoint directory"},
      {.name = "--batch",
       .kind = LT_ARG_VALUE,
       .metavar = "FILE.jsonl",
       .help =
           "lines {tokens, loss_mask, rollout_logprobs, advantages}, optional trajectory: consecutive lines with one trajectory (≥ 0) are its contexts, one unit of the objective"},
      {.name = "--loss", .kind = LT_ARG_VALUE, .metavar = "NAME", .help = "mispo | ppo | grpo | gspo"},
      {.name = "--out",
       .kind = LT_ARG_VALUE,
       .metavar = "GRADS.safetensors",
       .help = "where to write the gradients (F32)"},
      {.name = "--token-bounds",
       .kind = LT_ARG_VALUE,
       .metavar = "LO,HI",
       .help = "MIS token ratio bounds (default 0.5,2)"},
      {.name = "--traj-bounds",
       .kind = LT_ARG_VALUE,
       .metavar = "LO,HI",
       .help = "MIS trajectory bounds (default 0.996,1.001)"},
      {.name = "--clip", .kind = LT_ARG_VALUE, .metavar = "EPS", .help = "ratio clip ε (default 0.2; GSPO 1e-4)"},
      {.name = "--delta",
       .kind = LT_ARG_VALUE,
       .metavar = "D",
       .help = "GRPO off-policy sequence masking threshold (default 0.1)"},
      {.name = "--step-out",
       .kind = LT_ARG_VALUE,
       .metavar = "DIR",
       .help =
           "also run one full learner step on the batch (lines may carry reward, group, truncated) and write its state to DIR; the JSON line gains optimizer_bytes, rank 0's share of the optimizer state"},
      {.name = "--optimizer",
       .kind = LT_ARG_VALUE,
       .metavar = "NAME",
       .help = "adamw | muon for --step-out (default adamw)"},
      {.name = "--minibatches",
       .kind = LT_ARG_VALUE,
       .metavar = "K",
       .help = "actor and critic mini-batches of --step-out (default 1)"},
  };
  lt_cmd_args_t c = {.command = "grad",
                     .usage = "--model DIR --batch FILE.jsonl --loss mispo|ppo|grpo|gspo --out GRADS.safetensors",
                     .summary =
                         "Evaluates the loss at the checkpoint's weights (π_old = πθ) and writes dLoss/dparameter "
                         "for every parameter under the checkpoint's names and shapes; prints one JSON line "
                         "{\"loss\", \"tokens_kept\", \"trajectories_kept\", ..., \"ranks\"}. Under mpirun/srun "
                         "the ranks split the batch and rank 0 writes.",
                     .args = args,
                     .nargs = 11,
                     .min_pos = 0,
                     .max_pos = 0};
  int rc = lt_args_parse(&c, argc, argv);
  if (rc) return rc == 1 ? 0 : rc;
  const char *dir = lt_args_str(&c, "--model", NULL), *batch = lt_args_str(&c, "--batch", NULL);
  const char *loss = lt_args_str(&c, "--loss", NULL), *out = lt_args_str(&c, "--out", NULL);
  if (!dir || !batch || !loss || !out)
    return lt_args_usage_error(&c, "--model, --batch, --loss and --out are required");
  int obj = lt_objective_parse(loss);
  if (obj < 0) return lt_args_usage_error(&c, "--loss: '%s' is not one of mispo|ppo|grpo|gspo", loss);
  lt_loss_cfg_t lc;
  lt_loss_cfg_default(&lc, (lt_objective)obj);
  double clip, delta;
  if ((rc = bounds(&c, "--token-bounds", &lc.tok_lo, &lc.tok_hi)) ||
      (rc = bounds(&c, "--traj-bounds", &lc.traj_lo, &lc.traj_hi)) ||
      (rc = lt_args_double(&c, "--clip", lc.clip_lo, &clip)) || (rc = lt_args_double(&c, "--delta", lc.delta, &delta)))
    return rc;
  lc.clip_lo = lc.clip_hi = (float)clip;
  lc.delta = (float)delta;
  const char *step_out = lt_args_str(&c, "--step-out", NULL), *optimizer = lt_args_str(&c, "--optimizer", "adamw");
  long long minibatches;
  if ((rc = lt_args_long(&c, "--minibatches", 1, 1, 1 << 20, &minibatches))) return rc;
  if (strcmp(optimizer, "adamw") != 0 && strcmp(optimizer, "muon") != 0)
    return lt_args_usage_error(&c, "--optimizer: '%s' is not one of adamw|muon", optimizer);
  openblas_set_num_threads(lt_cli_threads());
  lt_model_t *m;
  if ((rc = lt_model_load(dir, &m)) < 0) return lt_cli_fail("grad", rc);
  packed_t p = {0};
  lt_jsonl_t r;
  rc = m->cfg.critic ? lt_error_set(LT_EINVAL, "%s is a value model, not a policy", dir) : lt_jsonl_open(&r, batch);
  if (rc == 0) {
    cJSON *line;
    while ((rc = lt_jsonl_next(&r, &line)) == 1) {
      rc = read_line(&p, line, m, r.path, r.lineno);
      cJSON_Delete(line);
      if (rc < 0) break;
    }
    lt_jsonl_close(&r);
    if (rc == 0 && p.nseq == 0) rc = lt_error_set(LT_EINVAL, "%s: no batch lines", batch);
  }
  lt_loss_stats_t st;
  double conf = -1;
  if (rc == 0) rc = share_grad(m, &lc, &p, &st, &conf);
  int rank0 = lt_dist_rank() == 0;
  double gn = 0;
  for (size_t i = 0; rc == 0 && i < m->nparams; i++) gn += (double)m->grads[i] * m->grads[i];
  if (rc == 0 && rank0) rc = write_grads(m, out);
  char rconf[32] = "null";
  if (rc == 0 && conf >= 0) snprintf(rconf, sizeof rconf, "%.6g", conf);
  char obytes[32] = "";
  if (rc == 0 && step_out) {
    size_t ob = 0;
    rc = learner_step(m, &lc, &p, optimizer, (int)minibatches, step_out, &ob);
    m = NULL; /* the trainer took it */
    snprintf(obytes, sizeof obytes, ", \"optimizer_bytes\": %zu", ob);
  }
  if (rc == 0 && rank0)
    printf(
        "{\"loss\": %.9g, \"tokens_kept\": %d, \"trajectories_kept\": %d, \"tokens\": %d, \"trajectories\": %d, "
        "\"token_accept_ratio\": %.6g, \"traj_accept_ratio\": %.6g, \"mismatch\": %.6g, \"clip_frac\": %.6g, "
        "\"grad_norm\": %.9g, \"routing_confidence\": %s, \"ranks\": %d%s}\n",
        st.loss, st.tokens_kept, st.trajs_kept, st.tokens, st.trajs,
        st.tokens ? (double)st.tokens_in_bounds / st.tokens : 0.0, st.trajs ? (double)st.trajs_kept / st.trajs : 0.0,
        st.mismatch, st.clip_frac, sqrt(gn), rconf, lt_dist_size(), obytes);
  packed_free(&p);
  lt_model_free(m);
  return rc < 0 ? lt_cli_fail("grad", rc) : 0;
}
