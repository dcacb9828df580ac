/* The CPU reference of every op (learner/ops.h): forward/backward pairs on fp32 arrays, over BLAS. */
#include "learner/ops.h"

#include <cblas.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "util/error.h"

const char *lt_ops_blas(void) {
  static char id[512];
  if (!id[0]) snprintf(id, sizeof id, "%s; core %s", openblas_get_config(), openblas_get_corename());
  return id;
}

int lt_ops_threads(int n, const lt_cpus_t *cpus) {
  return n > 0 ? n : cpus && cpus->n > 0 ? cpus->n : openblas_get_num_procs();
}

int lt_ops_blas_threads(int n) {
  int k = lt_ops_threads(n, NULL);
  if (openblas_get_num_threads() != k) openblas_set_num_threads(k);
  return k;
}

int lt_ops_blas_pin(int n, const lt_cpus_t *cpus) {
  if (!cpus || cpus->n == 0) return lt_ops_blas_threads(n);
  int k = lt_ops_threads(n, cpus), rc = lt_cpus_pin_self(cpus);
  if (rc < 0) return lt_error_wrap(rc, "learner.cpus");
  /* Setting the count (re)starts the BLAS's thread pool when a fork stopped it (its pre-fork handler does), from
   * this now pinned thread; the threads it already had are pinned one by one (the last index is this thread). */
  openblas_set_num_threads(k);
  for (int i = 0; i < k - 1; i++)
    if (openblas_setaffinity(i, sizeof cpus->set, (cpu_set_t *)&cpus->set) != 0)
      return lt_error_set(LT_ESYS, "learner.cpus: cannot pin the BLAS's thread %d: %s", i, strerror(errno));
  return k;
}

void lt_linear_forward(float *y, const float *x, const float *W, int N, int in, int out) {
  if (N == 0) return;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, out, in, 1.0f, x, in, W, in, 0.0f, y, out);
}

void lt_linear_forward_acc(float *y, const float *x, const float *W, int N, int in, int out) {
  if (N == 0) return;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, out, in, 1.0f, x, in, W, in, 1.0f, y, out);
}

void lt_linear_backward(float *dx, float *dW, const float *dy, const float *x, const float *W, int N, int in, int out) {
  if (N == 0) return;
  if (dx) cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, in, out, 1.0f, dy, out, W, in, 1.0f, dx, in);
  if (dW) cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, N, 1.0f, dy, out, x, in, 1.0f, dW, in);
}

void lt_rmsnorm_forward(float *out, float *rstd, const float *x, const float *w, int N, int D, float eps) {
  for (int n = 0; n < N; n++) {
    const float *xr = x + (size_t)n * D;
    float *o = out + (size_t)n * D;
    double ss = 0;
    for (int i = 0; i < D; i++) ss += (double)xr[i] * xr[i];
    float r = (float)(1.0 / sqrt(ss / D + eps));
    for (int i = 0; i < D; i++) o[i] = xr[i] * r * w[i];
    if (rstd) rstd[n] = r;
  }
}

void lt_rmsnorm_backward(float *dx, float *dw, const float *dout, const float *x, const float *w, const float *rstd,
                         int N, int D) {
  for (int n = 0; n < N; n++) {
    const float *xr = x + (size_t)n * D, *g = dout + (size_t)n * D;
    float r = rstd[n];
    double dot = 0;
    for (int i = 0; i < D; i++) {
      dot += (double)g[i] * w[i] * xr[i];
      if (dw) dw[i] += g[i] * xr[i] * r;
    }
    if (!dx) continue;
    float c = (float)(dot * r * r * r / D);
    float *d = dx + (size_t)n * D;
    for (int i = 0; i < D; i++) d[i] += r * g[i] * w[i] - c * xr[i];
  }
}

void lt_rope_apply(float *x, const int *pos, int N, int heads, int hd, const float *cos, const float *sin, int inverse) {
  int half = hd / 2;
  float sgn = inverse ? -1.0f : 1.0f;
  for (int n = 0; n < N; n++) {
    const float *c = cos + (size_t)pos[n] * half, *s = sin + (size_t)pos[n] * half;
    for (int h = 0; h < heads; h++) {
      float *v = x + ((size_t)n * heads + h) * hd;
      for (int i = 0; i < half; i++) {
        float a = v[i], b = v[i + half], si = sgn * s[i];
        v[i] = a * c[i] - b * si;
        v[i + half] = b * c[i] + a * si;
      }
    }
  }
}

static inline float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

void lt_swiglu_forward(float *h, const float *g, const float *u, int n) {
  for (int i = 0; i < n; i++) h[i] = g[i] * sigmoidf(g[i]) * u[i];
}

void lt_swiglu_backward(float *dg, float *du, const float *dh, const float *g, const float *u, int n) {
  for (int i = 0; i < n; i++) {
    float s = sigmoidf(g[i]);
    du[i] = dh[i] * g[i] * s;
    dg[i] = dh[i] * u[i] * s * (1.0f + g[i] * (1.0f - s));
  }
}

/* Attention runs in blocks of query rows so the score block [ATT_BR, S] stays
 * in cache, with the products on BLAS.  Masked scores are -inf; a row's valid
 * keys are [lo(p), p] for query position p. */
#define ATT_BR 64

static inline int key_lo(int p, int window) { return window > 0 && p - window + 1 > 0 ? p - window + 1 : 0; }

void lt_attention_forward(float *out, float *lse, const float *q, const float *k, const float *v, int T, int S, int H,
                          int KV, int hd, int window, float *scratch) {
  float scale = 1.0f / sqrtf((float)hd);
  int group = H / KV, ldq = H * hd, ldk = KV * hd;
  for (int i0 = 0; i0 < T; i0 += ATT_BR) {
    int nb = T - i0 < ATT_BR ? T - i0 : ATT_BR;
    int p0 = S - T + i0, p1 = p0 + nb - 1;
    int klo = key_lo(p0, window), ns = p1 - klo + 1;
    for (int h = 0; h < H; h++) {
      int kh = h / group;
      float *P = scratch;
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nb, ns, hd, scale, q + (size_t)i0 * ldq + h * hd, ldq,
                  k + (size_t)klo * ldk + kh * hd, ldk, 0.0f, P, ns);
      for (int r = 0; r < nb; r++) {
        int p = p0 + r, lo = key_lo(p, window) - klo, hi = p - klo;
        float *row = P + (size_t)r * ns;
        float m = -FLT_MAX;
        for (int j = lo; j <= hi; j++)
          if (row[j] > m) m = row[j];
        double sum = 0;
        for (int j = 0; j < lo; j++) row[j] = 0;
        for (int j = lo; j <= hi; j++) {
          row[j] = expf(row[j] - m);
          sum += row[j];
        }
        for (int j = hi + 1; j < ns; j++) row[j] = 0;
        float inv = (float)(1.0 / sum);
        for (int j = lo; j <= hi; j++) row[j] *= inv;
        if (lse) lse[(size_t)(i0 + r) * H + h] = m + (float)log(sum);
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nb, hd, ns, 1.0f, P, ns, v + (size_t)klo * ldk + kh * hd, ldk,
                  0.0f, out + (size_t)i0 * ldq + h * hd, ldq);
    }
  }
}

void lt_attention_backward(float *dq, float *dk, float *dv, const float *dout, const float *out, const float *lse,
                           const float *q, const float *k, const float *v, int T, int S, int H, int KV, int hd,
                           int window, float *scratch) {
  float scale = 1.0f / sqrtf((float)hd);
  int group = H / KV, ldq = H * hd, ldk = KV * hd;
  for (int i0 = 0; i0 < T; i0 += ATT_BR) {
    int nb = T - i0 < ATT_BR ? T - i0 : ATT_BR;
    int p0 = S - T + i0, p1 = p0 + nb - 1;
    int klo = key_lo(p0, window), ns = p1 - klo + 1;
    for (int h = 0; h < H; h++) {
      int kh = h / group;
      float *P = scratch, *dP = scratch + (size_t)ATT_BR * ns;
      const float *qb = q + (size_t)i0 * ldq + h * hd, *dob = dout + (size_t)i0 * ldq + h * hd;
      const float *kb = k + (size_t)klo * ldk + kh * hd, *vb = v + (size_t)klo * ldk + kh * hd;
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nb, ns, hd, scale, qb, ldq, kb, ldk, 0.0f, P, ns);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nb, ns, hd, 1.0f, dob, ldq, vb, ldk, 0.0f, dP, ns);
      for (int r = 0; r < nb; r++) {
        int p = p0 + r, lo = key_lo(p, window) - klo, hi = p - klo;
        float L = lse[(size_t)(i0 + r) * H + h];
        const float *o = out + (size_t)(i0 + r) * ldq + h * hd, *d = dob + (size_t)r * ldq;
        float Di = 0;
        for (int x = 0; x < hd; x++) Di += d[x] * o[x];
        float *pr = P + (size_t)r * ns, *dr = dP + (size_t)r * ns;
        for (int j = 0; j < ns; j++) {
          if (j < lo || j > hi) {
            pr[j] = dr[j] = 0;
            continue;
          }
          pr[j] = expf(pr[j] - L);
          dr[j] = pr[j] * (dr[j] - Di) * scale;
        }
      }
      /* dq = dS·K (overwrites), dk += dSᵀ·Q, dv += Pᵀ·dO */
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nb, hd, ns, 1.0f, dP, ns, kb, ldk, 0.0f,
                  dq + (size_t)i0 * ldq + h * hd, ldq);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, ns, hd, nb, 1.0f, dP, ns, qb, ldq, 1.0f,
                  dk + (size_t)klo * ldk + kh * hd, ldk);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, ns, hd, nb, 1.0f, P, ns, dob, ldq, 1.0f,
                  dv + (size_t)klo * ldk + kh * hd, ldk);
    }
  }
}

void lt_softmax_row(float *x, int n) {
  float m = -FLT_MAX;
  for (int i = 0; i < n; i++)
    if (x[i] > m) m = x[i];
  double s = 0;
  for (int i = 0; i < n; i++) {
    x[i] = expf(x[i] - m);
    s += x[i];
  }
  float inv = (float)(1.0 / s);
  for (int i = 0; i < n; i++) x[i] *= inv;
}

/* The k largest of probs[E] (partial selection: k is small; ties go to the lower index). */
static void router_topk(const float *probs, int E, int k, uint16_t *ids) {
  for (int s = 0; s < k; s++) {
    int best = -1;
    for (int e = 0; e < E; e++) {
      int taken = 0;
      for (int t = 0; t < s; t++) taken |= ids[t] == e;
      if (!taken && (best < 0 || probs[e] > probs[best])) best = e;
    }
    ids[s] = (uint16_t)best;
  }
}

float lt_router_forward(float *probs, uint16_t *ids, float *weights, const float *logits, int E, int k, int norm_topk,
                        const uint16_t *forced_ids) {
  memcpy(probs, logits, sizeof(float) * (size_t)E);
  lt_softmax_row(probs, E);
  if (forced_ids) memcpy(ids, forced_ids, sizeof(uint16_t) * (size_t)k);
  else router_topk(probs, E, k, ids);
  float mass = 0;
  for (int s = 0; s < k; s++) mass += probs[ids[s]];
  for (int s = 0; s < k; s++) weights[s] = norm_topk ? probs[ids[s]] / mass : probs[ids[s]];
  return mass;
}

void lt_router_backward(float *dlogits, const float *probs, const uint16_t *ids, const float *dweights, int E, int k,
                        int norm_topk) {
  /* dL/dp over the chosen experts (zero elsewhere), then the softmax backward. */
  float dp[256];
  float mass = 0, wd = 0;
  for (int s = 0; s < k; s++) mass += probs[ids[s]];
  for (int s = 0; s < k; s++) wd += dweights[s] * probs[ids[s]] / mass;
  for (int s = 0; s < k; s++) dp[s] = norm_topk ? (dweights[s] - wd) / mass : dweights[s];
  float pdp = 0;
  for (int s = 0; s < k; s++) pdp += probs[ids[s]] * dp[s];
  for (int e = 0; e < E; e++) dlogits[e] = -probs[e] * pdp;
  for (int s = 0; s < k; s++) dlogits[ids[s]] += probs[ids[s]] * dp[s];
}
