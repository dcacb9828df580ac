/* Policy objectives, advantages and the value loss (learner/loss.h, docs/losses.md), per token on packed
 * sequences. */
#include "learner/loss.h"

#include <math.h>
#include <string.h>

#include "util/error.h"

/* Mask bounds are inclusive; logprobs arrive as floats, so a ratio meant to sit
 * exactly on a bound may land 1e-7 outside it in log space. */
#define BOUND_SLACK 1e-6

static const char *names[LT_OBJ_N] = {"mispo", "ppo", "grpo", "gspo", "tis"};

const char *lt_objective_name(lt_objective o) { return (unsigned)o < LT_OBJ_N ? names[o] : "?"; }

int lt_objective_parse(const char *s) {
  for (int i = 0; i < LT_OBJ_N; i++)
    if (strcmp(s, names[i]) == 0) return i;
  return -1;
}

void lt_loss_cfg_default(lt_loss_cfg_t *c, lt_objective obj) {
  memset(c, 0, sizeof *c);
  c->obj = obj;
  c->tok_lo = 0.5f;
  c->tok_hi = 2.0f;
  c->traj_lo = 0.996f;
  c->traj_hi = 1.001f;
  c->clip_lo = c->clip_hi = obj == LT_OBJ_GSPO ? 1e-4f : 0.2f;
  c->delta = obj == LT_OBJ_GRPO ? 0.1f : 0.0f;
  c->tis_cap = 2.0f;
  c->group_adv = obj == LT_OBJ_GRPO;
}

static int in_bounds(double logx, float lo, float hi) {
  return logx >= log((double)lo) - BOUND_SLACK && logx <= log((double)hi) + BOUND_SLACK;
}

/* min(r·A, clip(r)·A) and its derivative with respect to log r. */
static double clipped_term(double r, double A, double lo, double hi, double *dterm_dlogr, int *clipped) {
  double rc = r < 1 - lo ? 1 - lo : r > 1 + hi ? 1 + hi : r;
  double u = r * A, c = rc * A;
  if (u <= c) {
    *dterm_dlogr = u; /* d(r·A)/dlog r = r·A */
    *clipped = 0;
    return u;
  }
  *dterm_dlogr = 0;
  *clipped = 1;
  return c;
}

int lt_traj_end(const int *traj, int nseq, int s) {
  int e = s + 1;
  while (traj && e < nseq && traj[e] == traj[s]) e++;
  return e;
}

/* Loss-mask tokens, and trajectories that have at least one. */
static void count_loss_tokens(const lt_loss_in_t *in, int *ntok, int *ntraj_tok) {
  *ntok = *ntraj_tok = 0;
  for (int s = 0, e; s < in->nseq; s = e) {
    e = lt_traj_end(in->traj, in->nseq, s);
    int k = 0;
    for (int t = in->start[s]; t < in->start[e]; t++) k += in->mask[t] != 0;
    *ntok += k;
    *ntraj_tok += k > 0;
  }
}

/* Per-token weight: 1/ntok for token-mean objectives, 1/(trajectories · T) for the group forms. */
static double token_weight(const lt_loss_cfg_t *cfg, int ntok, int ntraj_tok, int T) {
  return cfg->group_adv ? 1.0 / ((double)ntraj_tok * T) : 1.0 / ntok;
}

int lt_loss_token_local(const lt_loss_cfg_t *cfg, int with_ref) {
  return cfg->obj != LT_OBJ_GSPO && !(cfg->obj == LT_OBJ_GRPO && cfg->delta > 0) && !(cfg->kl_coef > 0 && with_ref);
}

int lt_loss_compute(const lt_loss_cfg_t *cfg, const lt_loss_in_t *in, float *dlogp, lt_loss_stats_t *st) {
  return lt_loss_compute_marked(cfg, in, dlogp, st, NULL);
}

int lt_loss_compute_marked(const lt_loss_cfg_t *cfg, const lt_loss_in_t *in, float *dlogp, lt_loss_stats_t *st,
                           const lt_loss_marks_t *marks) {
  memset(st, 0, sizeof *st);
  int N = in->start[in->nseq] - in->start[0];
  memset(dlogp + in->start[0], 0, sizeof(float) * (size_t)N);
  uint8_t *flags = marks ? marks->flags : NULL;
  float *traj_ratio = marks ? marks->traj_ratio : NULL;
  if (flags) memset(flags + in->start[0], 0, (size_t)N);
  for (int s = 0; traj_ratio && s < in->nseq; s++) traj_ratio[s] = NAN;
  int ntok, ntraj_tok;
  count_loss_tokens(in, &ntok, &ntraj_tok);
  st->tokens = ntok;
  st->trajs = ntraj_tok;
  if (ntok == 0) return 0;
  const float *old = in->logp_old ? in->logp_old : in->logp;
  double loss = 0, mism = 0, klr = 0, klref = 0;
  int clipped_n = 0;
  /* A trajectory's contexts are consecutive, so its tokens are the range [a, b). */
  for (int s0 = 0, s1; s0 < in->nseq; s0 = s1) {
    s1 = lt_traj_end(in->traj, in->nseq, s0);
    int a = in->start[s0], b = in->start[s1], T = 0;
    double sum_logx = 0, sum_logr = 0, sum_div = 0;
    for (int t = a; t < b; t++) {
      if (!in->mask[t]) continue;
      T++;
      double logx = (double)old[t] - in->logp_rollout[t];
      sum_logx += logx;
      sum_logr += (double)in->logp[t] - old[t];
      sum_div += (double)in->logp_rollout[t] - in->logp[t];
      mism += fabs(logx);
      /* k3 of KL(π_rollout ‖ π_old) on rollout samples, x = π_old/π_rollout (docs/losses.md) */
      klr += exp(logx) - 1 - logx;
    }
    if (!T) continue;
    double w = token_weight(cfg, ntok, ntraj_tok, T);
    int traj_ok = in_bounds(sum_logx / T, cfg->traj_lo, cfg->traj_hi);
    for (int s = s0; traj_ratio && s < s1; s++) traj_ratio[s] = (float)exp(sum_logx / T);
    int masked_objective = cfg->obj == LT_OBJ_MISPO || cfg->obj == LT_OBJ_GSPO;
    st->trajs_kept += masked_objective ? traj_ok : 1;
    double r_seq = exp(sum_logr / T), gspo_grad = 0;
    for (int t = a, s = s0; t < b; t++) {
      while (t >= in->start[s + 1]) s++; /* the context of token t, for its KL coefficient */
      if (!in->mask[t]) continue;
      double logx = (double)old[t] - in->logp_rollout[t];
      int tok_ok = in_bounds(logx, cfg->tok_lo, cfg->tok_hi);
      st->tokens_in_bounds += tok_ok;
      double A = in->adv[t], g = 0, d;
      int clipped = 0, kept = 0;
      switch (cfg->obj) {
      case LT_OBJ_MISPO:
        if (tok_ok && traj_ok) {
          loss -= w * in->logp[t] * A;
          g = -w * A;
          kept = 1;
        }
        break;
      case LT_OBJ_PPO:
      case LT_OBJ_GRPO: {
        if (cfg->obj == LT_OBJ_GRPO && cfg->delta > 0 && A < 0 && sum_div / T > cfg->delta) break;
        double r = exp((double)in->logp[t] - old[t]);
        loss -= w * clipped_term(r, A, cfg->clip_lo, cfg->clip_hi, &d, &clipped);
        g = -w * d;
        kept = !clipped;
        break;
      }
      case LT_OBJ_GSPO:
        if (tok_ok && traj_ok) {
          loss -= w * clipped_term(r_seq, A, cfg->clip_lo, cfg->clip_hi, &d, &clipped);
          gspo_grad += -w * d / T; /* r_seq depends on every token of the trajectory */
          kept = !clipped;
        }
        break;
      case LT_OBJ_TIS: /* truncated importance sampling on the train–rollout ratio (docs/losses.md) */
        d = exp(logx) < cfg->tis_cap ? exp(logx) : cfg->tis_cap;
        clipped = exp(logx) > cfg->tis_cap;
        loss -= w * d * in->logp[t] * A;
        g = -w * d * A;
        kept = 1;
        break;
      case LT_OBJ_N: break;
      }
      clipped_n += clipped;
      st->tokens_kept += kept;
      if (flags)
        flags[t] = (uint8_t)(LT_TOKV_LOSS | (tok_ok ? LT_TOKV_TOKEN_OK : 0) | (traj_ok ? LT_TOKV_TRAJ_OK : 0) |
                             (clipped ? LT_TOKV_CLIPPED : 0) | (kept ? LT_TOKV_KEPT : 0));
      double klc = in->kl_coef ? in->kl_coef[s] : cfg->kl_coef;
      if (klc > 0 && in->logp_ref) {
        /* Unbiased KL (seed 002 eq. 7): ρ·(e^z − z − 1) with ρ = πθ/π_rollout, z = log π_ref − log πθ.
         * The tokens were drawn from π_rollout (eq. 7's "old policy" is the sampler), so that is the
         * importance ratio's denominator, not the learner's π_old; d/dlog πθ = ρ·(log πθ − log π_ref). */
        double rho = exp((double)in->logp[t] - in->logp_rollout[t]), z = (double)in->logp_ref[t] - in->logp[t];
        double kl = rho * (exp(z) - z - 1);
        loss += klc * w * kl;
        g += klc * w * rho * -z;
        klref += kl;
      }
      dlogp[t] = (float)g;
    }
    if (gspo_grad != 0)
      for (int t = a; t < b; t++)
        if (in->mask[t]) dlogp[t] += (float)gspo_grad;
  }
  st->loss = loss;
  st->mismatch = mism / ntok;
  st->kl_rollout = klr / ntok;
  st->clip_frac = (double)clipped_n / ntok;
  st->kl_ref = klref / ntok;
  return 0;
}

int lt_loss_token_weights(const lt_loss_cfg_t *cfg, const lt_loss_in_t *in, float *weight) {
  if (!lt_loss_token_local(cfg, in->logp_ref != NULL))
    return lt_error_set(LT_EUNSUPP, "%s with these options is not token-local; use the unfused loss",
                        lt_objective_name(cfg->obj));
  int N = in->start[in->nseq] - in->start[0], ntok, ntraj_tok;
  memset(weight + in->start[0], 0, sizeof(float) * (size_t)N);
  count_loss_tokens(in, &ntok, &ntraj_tok);
  const float *old = in->logp_old ? in->logp_old : in->logp;
  for (int s0 = 0, s1; s0 < in->nseq; s0 = s1) {
    s1 = lt_traj_end(in->traj, in->nseq, s0);
    int a = in->start[s0], b = in->start[s1], T = 0;
    double sum_logx = 0;
    for (int t = a; t < b; t++)
      if (in->mask[t]) {
        T++;
        sum_logx += (double)old[t] - in->logp_rollout[t];
      }
    if (!T) continue;
    double w = token_weight(cfg, ntok, ntraj_tok, T);
    int traj_ok = cfg->obj != LT_OBJ_MISPO || in_bounds(sum_logx / T, cfg->traj_lo, cfg->traj_hi);
    for (int t = a; t < b; t++) {
      if (!in->mask[t]) continue;
      double x = exp((double)old[t] - in->logp_rollout[t]);
      int tok_ok = cfg->obj != LT_OBJ_MISPO || in_bounds(log(x), cfg->tok_lo, cfg->tok_hi);
      double tis = cfg->obj == LT_OBJ_TIS ? (x < cfg->tis_cap ? x : cfg->tis_cap) : 1.0;
      weight[t] = traj_ok && tok_ok ? (float)(w * tis) : 0.0f;
    }
  }
  return 0;
}

void lt_adv_group(const double *reward, const int64_t *group, const int *traj, int n, int std_norm, double *adv) {
  for (int i = 0; i < n; i++) {
    double sum = 0, sq = 0;
    int k = 0;
    for (int j = 0; j < n; j = lt_traj_end(traj, n, j)) /* each trajectory once, whatever its contexts */
      if (group[j] == group[i]) {
        sum += reward[j];
        sq += reward[j] * reward[j];
        k++;
      }
    double mean = sum / k, var = sq / k - mean * mean;
    adv[i] = reward[i] - mean;
    if (std_norm) adv[i] /= sqrt(var > 0 ? var : 0) + 1e-6;
  }
}

void lt_adv_critic(int nseq, const int *start, const uint8_t *mask, const float *values, const double *reward,
                   const uint8_t *truncated, const int *traj, float *adv, float *target, double *rhat) {
  for (int s0 = 0, s1; s0 < nseq; s0 = s1) {
    s1 = lt_traj_end(traj, nseq, s0);
    /* A truncated trajectory bootstraps from V(s_T) at the end of its last context, not each context from its own. */
    double R = truncated && truncated[s1 - 1] ? values[start[s1] - 1] : reward[s0];
    for (int s = s0; s < s1; s++) {
      int a = start[s], b = start[s + 1];
      if (rhat) rhat[s] = R;
      for (int t = a; t < b; t++) {
        int ok = mask[t] && t > a;
        adv[t] = ok ? (float)(R - values[t - 1]) : 0.0f;
        if (target) target[t] = ok ? (float)R : 0.0f;
      }
    }
  }
}

double lt_value_loss(int nseq, const int *start, const uint8_t *mask, const float *values, const float *target,
                     float *dvalues) {
  int n = 0;
  for (int s = 0; s < nseq; s++)
    for (int t = start[s] + 1; t < start[s + 1]; t++) n += mask[t] != 0;
  memset(dvalues + start[0], 0, sizeof(float) * (size_t)(start[nseq] - start[0]));
  if (!n) return 0;
  double loss = 0;
  for (int s = 0; s < nseq; s++)
    for (int t = start[s] + 1; t < start[s + 1]; t++) {
      if (!mask[t]) continue;
      double e = (double)values[t - 1] - target[t];
      loss += 0.5 * e * e / n;
      dvalues[t - 1] += (float)(e / n);
    }
  return loss;
}
