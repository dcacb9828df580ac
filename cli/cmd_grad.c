/* `longtail grad`: gradients of a policy loss on a batch, at the checkpoint. */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "learner/loss.h"
#include "learner/model.h"
#include "learner/safetensors.h"
#include "util/error.h"
#include "util/json.h"

typedef struct {
  int32_t *tokens;
  float *logp_rollout, *adv;
  uint8_t *mask;
  int *start;
  int n, nseq, cap, scap;
} packed_t;

static void packed_free(packed_t *p) {
  free(p->tokens), free(p->logp_rollout), free(p->adv), free(p->mask), free(p->start);
}

static int grow(packed_t *p, int need) {
  if (need <= p->cap) return 0;
  int cap = p->cap ? p->cap : 1024;
  while (cap < need) cap *= 2;
  int32_t *t = realloc(p->tokens, sizeof *t * (size_t)cap);
  if (t) p->tokens = t;
  float *l = realloc(p->logp_rollout, sizeof *l * (size_t)cap);
  if (l) p->logp_rollout = l;
  float *a = realloc(p->adv, sizeof *a * (size_t)cap);
  if (a) p->adv = a;
  uint8_t *m = realloc(p->mask, (size_t)cap);
  if (m) p->mask = m;
  if (!t || !l || !a || !m) return lt_error_set(LT_ENOMEM, "grad: out of memory");
  p->cap = cap;
  return 0;
}

/* One batch line: tokens, loss_mask, rollout_logprobs, advantages, all of one length. */
static int read_line(packed_t *p, const cJSON *line, const lt_model_t *m, const char *path, long ln) {
  int32_t *toks = NULL, *mask = NULL;
  float *lp = NULL, *adv = NULL;
  int n, nm, nl, na;
  int rc = lt_cli_token_array(line, "tokens", m->cfg.vocab, 1, m->cfg.max_pos, path, ln, &toks, &n);
  if (rc == 0 && (rc = lt_json_get_i32_array(line, "loss_mask", &mask, &nm)) < 0) lt_error_wrap(rc, "%s:%ld", path, ln);
  if (rc == 0 && (rc = lt_json_get_f32_array(line, "rollout_logprobs", &lp, &nl)) < 0) lt_error_wrap(rc, "%s:%ld", path, ln);
  if (rc == 0 && (rc = lt_json_get_f32_array(line, "advantages", &adv, &na)) < 0) lt_error_wrap(rc, "%s:%ld", path, ln);
  if (rc == 0 && (nm != n || nl != n || na != n))
    rc = lt_error_set(LT_EINVAL, "%s:%ld: loss_mask, rollout_logprobs and advantages must have the %d entries of tokens",
                      path, ln, n);
  for (int i = 0; rc == 0 && i < n; i++) {
    if (mask[i] != 0 && mask[i] != 1) rc = lt_error_set(LT_EINVAL, "%s:%ld: loss_mask[%d]: expected 0 or 1", path, ln, i);
    else if (i == 0 && mask[0]) rc = lt_error_set(LT_EINVAL, "%s:%ld: loss_mask[0] must be 0 (nothing predicts the first token)", path, ln);
    else if (!isfinite(lp[i]) || lp[i] > 0) rc = lt_error_set(LT_EINVAL, "%s:%ld: rollout_logprobs[%d]: expected a finite value ≤ 0", path, ln, i);
    else if (!isfinite(adv[i])) rc = lt_error_set(LT_EINVAL, "%s:%ld: advantages[%d]: not finite", path, ln, i);
  }
  if (rc == 0 && p->nseq + 2 > p->scap) {
    int sc = p->scap ? 2 * p->scap : 64;
    int *s = realloc(p->start, sizeof *s * (size_t)sc);
    if (!s) rc = lt_error_set(LT_ENOMEM, "grad: out of memory");
    else p->start = s, p->scap = sc;
  }
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

int lt_cmd_grad(int argc, char **argv) {
  lt_arg_t args[] = {
      {.name = "--model", .kind = LT_ARG_VALUE, .metavar = "DIR", .help = "checkpoint directory"},
      {.name = "--batch", .kind = LT_ARG_VALUE, .metavar = "FILE.jsonl", .help = "lines {tokens, loss_mask, rollout_logprobs, advantages}"},
      {.name = "--loss", .kind = LT_ARG_VALUE, .metavar = "NAME", .help = "mispo | ppo | grpo | gspo"},
      {.name = "--out", .kind = LT_ARG_VALUE, .metavar = "GRADS.safetensors", .help = "where to write the gradients (F32)"},
      {.name = "--token-bounds", .kind = LT_ARG_VALUE, .metavar = "LO,HI", .help = "MIS token ratio bounds (default 0.5,2)"},
      {.name = "--traj-bounds", .kind = LT_ARG_VALUE, .metavar = "LO,HI", .help = "MIS trajectory bounds (default 0.996,1.001)"},
      {.name = "--clip", .kind = LT_ARG_VALUE, .metavar = "EPS", .help = "ratio clip ε (default 0.2; GSPO 1e-4)"},
      {.name = "--delta", .kind = LT_ARG_VALUE, .metavar = "D", .help = "GRPO off-policy sequence masking threshold (default 0.1)"},
  };
  lt_cmd_args_t c = {.command = "grad",
                     .usage = "--model DIR --batch FILE.jsonl --loss mispo|ppo|grpo|gspo --out GRADS.safetensors",
                     .summary = "Evaluates the loss at the checkpoint's weights (π_old = πθ) and writes dLoss/dparameter "
                                "for every parameter under the checkpoint's names and shapes; prints one JSON line "
                                "{\"loss\", \"tokens_kept\", \"trajectories_kept\", ...}.",
                     .args = args,
                     .nargs = 8,
                     .min_pos = 0,
                     .max_pos = 0};
  int rc = lt_args_parse(&c, argc, argv);
  if (rc) return rc == 1 ? 0 : rc;
  const char *dir = lt_args_str(&c, "--model", NULL), *batch = lt_args_str(&c, "--batch", NULL);
  const char *loss = lt_args_str(&c, "--loss", NULL), *out = lt_args_str(&c, "--out", NULL);
  if (!dir || !batch || !loss || !out) return lt_args_usage_error(&c, "--model, --batch, --loss and --out are required");
  int obj = lt_objective_parse(loss);
  if (obj < 0) return lt_args_usage_error(&c, "--loss: '%s' is not one of mispo|ppo|grpo|gspo", loss);
  lt_loss_cfg_t lc;
  lt_loss_cfg_default(&lc, (lt_objective)obj);
  double clip, delta;
  if ((rc = bounds(&c, "--token-bounds", &lc.tok_lo, &lc.tok_hi)) || (rc = bounds(&c, "--traj-bounds", &lc.traj_lo, &lc.traj_hi)) ||
      (rc = lt_args_double(&c, "--clip", lc.clip_lo, &clip)) || (rc = lt_args_double(&c, "--delta", lc.delta, &delta)))
    return rc;
  lc.clip_lo = lc.clip_hi = (float)clip;
  lc.delta = (float)delta;
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
  int maxlen = 0;
  for (int s = 0; rc == 0 && s < p.nseq; s++)
    if (p.start[s + 1] - p.start[s] > maxlen) maxlen = p.start[s + 1] - p.start[s];
  lt_fwd_out_t fo;
  lt_loss_stats_t st;
  float *dlogp = NULL;
  if (rc == 0) rc = lt_model_train_alloc(m, p.n, maxlen);
  if (rc == 0) {
    lt_batch_t b = {.nseq = p.nseq, .start = p.start, .tokens = p.tokens};
    rc = lt_model_forward(m, &b, &fo);
  }
  if (rc == 0 && !(dlogp = malloc(sizeof(float) * (size_t)p.n))) rc = lt_error_set(LT_ENOMEM, "grad: out of memory");
  if (rc == 0) {
    lt_loss_in_t in = {.nseq = p.nseq, .start = p.start, .logp = fo.logprobs, .logp_rollout = p.logp_rollout,
                       .adv = p.adv, .mask = p.mask};
    rc = lt_loss_compute(&lc, &in, dlogp, &st);
  }
  if (rc == 0) {
    lt_model_zero_grad(m);
    rc = lt_model_backward(m, dlogp, NULL);
  }
  double gn = 0;
  if (rc == 0) {
    lt_st_tensor_t *t = calloc((size_t)m->ntensors, sizeof *t);
    if (!t) rc = lt_error_set(LT_ENOMEM, "grad: out of memory");
    for (int i = 0; t && i < m->ntensors; i++) {
      const lt_tensor_t *s = &m->tensors[i];
      t[i] = (lt_st_tensor_t){.name = s->name, .ndim = s->ndim, .shape = {s->ndim == 1 ? s->cols : s->rows, s->cols},
                              .data = m->grads + s->offset};
    }
    for (size_t i = 0; i < m->nparams; i++) gn += (double)m->grads[i] * m->grads[i];
    if (t) rc = lt_st_write(out, t, m->ntensors, "{\"format\":\"pt\",\"content\":\"gradients\"}");
    free(t);
  }
  char rconf[32] = "null";
  if (rc == 0 && fo.routing_confidence >= 0) snprintf(rconf, sizeof rconf, "%.6g", fo.routing_confidence);
  if (rc == 0)
    printf("{\"loss\": %.9g, \"tokens_kept\": %d, \"trajectories_kept\": %d, \"tokens\": %d, \"trajectories\": %d, "
           "\"token_accept_ratio\": %.6g, \"traj_accept_ratio\": %.6g, \"mismatch\": %.6g, \"clip_frac\": %.6g, "
           "\"grad_norm\": %.9g, \"routing_confidence\": %s}\n",
           st.loss, st.tokens_kept, st.trajs_kept, st.tokens, st.trajs, st.tokens ? (double)st.tokens_in_bounds / st.tokens : 0.0,
           st.trajs ? (double)st.trajs_kept / st.trajs : 0.0, st.mismatch, st.clip_frac, sqrt(gn), rconf);
  free(dlogp);
  packed_free(&p);
  lt_model_free(m);
  return rc < 0 ? lt_cli_fail("grad", rc) : 0;
}
