/* The CPU reference of every op (learner/ops.h): forward/backward pairs on fp32 arrays, over BLAS. */
#include "learner/ops.h"

#include <cblas.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "learner/internal.h"
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
  /* The team splits the work; the BLAS runs single-threaded inside each part (a team of one: the BLAS's threads). */
  if (lt__team_size(k) == 1) k = 1;
  int blas = k > 1 ? 1 : lt_ops_threads(n, NULL);
  if (openblas_get_num_threads() != blas) openblas_set_num_threads(blas);
  return k;
}

int lt_ops_blas_pin(int n, const lt_cpus_t *cpus) {
  if (!cpus || cpus->n == 0) return lt_ops_blas_threads(n);
  int k = lt_ops_threads(n, cpus), rc = lt_cpus_pin_self(cpus);
  if (rc < 0) return lt_error_wrap(rc, "learner.cpus");
  /* New team threads start from this pinned thread; those it had are pinned one by one. */
  if ((rc = lt__team_size(k)) < 0 || (rc = lt__team_pin(&cpus->set)) < 0) return lt_error_wrap(rc, "learner.cpus");
  if (k > 1) {
    if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
    return k;
  }
  /* A team of one uses the BLAS's threads: setting the count (re)starts its pool when a fork stopped it (its pre-fork
   * handler does), from this pinned thread; the threads it already had are pinned one by one (the last index is this
   * thread). */
  openblas_set_num_threads(k);
  for (int i = 0; i < k - 1; i++)
    if (openblas_setaffinity(i, sizeof cpus->set, (cpu_set_t *)&cpus->set) != 0)
      return lt_error_set(LT_ESYS, "learner.cpus: cannot pin the BLAS's thread %d: %s", i, strerror(errno));
  return k;
}

/* ---- splitting work among the team (learner/pool.c) ---- */

/* Less work than this many multiply-adds (or element visits) stays on the calling thread: a call to the team costs
 * microseconds. */
#define PAR_MIN_WORK 200000.0

typedef void (*range_fn)(void *arg, int lo, int hi);
typedef struct {
  range_fn fn;
  void *arg;
  int count, align;
} range_job_t;

static void range_part(void *p, int i, int n) {
  range_job_t *j = p;
  int lo, hi;
  lt__team_range(j->count, i, n, j->align, &lo, &hi);
  if (lo < hi) j->fn(j->arg, lo, hi);
}

/* fn over [0, count) in parts of whole multiples of align, one per team thread when the work is worth it. */
static void par_range(range_fn fn, void *arg, int count, int align, double work) {
  if (lt__team_threads() == 1 || work < PAR_MIN_WORK) {
    fn(arg, 0, count);
    return;
  }
  range_job_t j = {fn, arg, count, align};
  lt__team_run(range_part, &j);
}

typedef struct {
  CBLAS_TRANSPOSE ta, tb;
  int M, N, K, lda, ldb, ldc, by_rows;
  float alpha, beta;
  const float *A, *B;
  float *C;
} gemm_job_t;

/* Rows [lo, hi) of C (by_rows), else its columns: each element of C is one thread's, summed in the BLAS's order. */
static void gemm_range(void *p, int lo, int hi) {
  gemm_job_t *g = p;
  if (g->by_rows)
    cblas_sgemm(CblasRowMajor, g->ta, g->tb, hi - lo, g->N, g->K, g->alpha,
                g->A + (g->ta == CblasNoTrans ? (size_t)lo * g->lda : (size_t)lo), g->lda, g->B, g->ldb, g->beta,
                g->C + (size_t)lo * g->ldc, g->ldc);
  else
    cblas_sgemm(CblasRowMajor, g->ta, g->tb, g->M, hi - lo, g->K, g->alpha, g->A, g->lda,
                g->B + (g->tb == CblasNoTrans ? (size_t)lo : (size_t)lo * g->ldb), g->ldb, g->beta, g->C + lo, g->ldc);
}

void lt__gemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb,
              float beta, float *C, int ldc) {
  if (M == 0 || N == 0) return;
  gemm_job_t g = {ta ? CblasTrans : CblasNoTrans,
                  tb ? CblasTrans : CblasNoTrans,
                  M,
                  N,
                  K,
                  lda,
                  ldb,
                  ldc,
                  M >= N,
                  alpha,
                  beta,
                  A,
                  B,
                  C};
  int n = lt__team_threads();
  /* Parts of at least 16 rows (or columns), whole multiples of 16: the kernels' blocks. */
  if (g.by_rows ? M < 16 * n : N < 16 * n) g.by_rows = !g.by_rows;
  if ((g.by_rows ? M : N) < 16 * n) n = 1;
  par_range(gemm_range, &g, g.by_rows ? M : N, 16, n == 1 ? 0 : (double)M * N * K);
}

void lt_linear_forward(float *y, const float *x, const float *W, int N, int in, int out) {
  lt__gemm(0, 1, N, out, in, 1.0f, x, in, W, in, 0.0f, y, out);
}

void lt_linear_forward_acc(float *y, const float *x, const float *W, int N, int in, int out) {
  lt__gemm(0, 1, N, out, in, 1.0f, x, in, W, in, 1.0f, y, out);
}

void lt_linear_backward(float *dx, float *dW, const float *dy, const float *x, const float *W, int N, int in, int out) {
  if (N == 0) return;
  if (dx) lt__gemm(0, 0, N, in, out, 1.0f, dy, out, W, in, 1.0f, dx, in);
  if (dW) lt__gemm(1, 0, out, in, N, 1.0f, dy, out, x, in, 1.0f, dW, in);
}

typedef struct {
  float *out, *rstd, *dx, *dw;
  const float *x, *w, *dout, *crstd;
  int N, D;
  float eps;
} norm_job_t;

static void rmsnorm_rows(void *p, int lo, int hi) {
  norm_job_t *j = p;
  int D = j->D;
  for (int n = lo; n < hi; n++) {
    const float *xr = j->x + (size_t)n * D;
    float *o = j->out + (size_t)n * D;
    double ss = 0;
    for (int i = 0; i < D; i++) ss += (double)xr[i] * xr[i];
    float r = (float)(1.0 / sqrt(ss / D + j->eps));
    for (int i = 0; i < D; i++) o[i] = xr[i] * r * j->w[i];
    if (j->rstd) j->rstd[n] = r;
  }
}

void lt_rmsnorm_forward(float *out, float *rstd, const float *x, const float *w, int N, int D, float eps) {
  norm_job_t j = {.out = out, .rstd = rstd, .x = x, .w = w, .N = N, .D = D, .eps = eps};
  par_range(rmsnorm_rows, &j, N, 1, (double)N * D);
}

/* dx of rows [lo, hi) and, in a second range over the columns, dw: each dw[i] summed over the rows in order, as a
 * single thread would. */
static void rmsnorm_back_rows(void *p, int lo, int hi) {
  norm_job_t *j = p;
  int D = j->D;
  for (int n = lo; n < hi; n++) {
    const float *xr = j->x + (size_t)n * D, *g = j->dout + (size_t)n * D;
    float r = j->crstd[n];
    double dot = 0;
    for (int i = 0; i < D; i++) dot += (double)g[i] * j->w[i] * xr[i];
    float c = (float)(dot * r * r * r / D);
    float *d = j->dx + (size_t)n * D;
    for (int i = 0; i < D; i++) d[i] += r * g[i] * j->w[i] - c * xr[i];
  }
}

static void rmsnorm_back_cols(void *p, int lo, int hi) {
  norm_job_t *j = p;
  int D = j->D;
  for (int n = 0; n < j->N; n++) {
    const float *xr = j->x + (size_t)n * D, *g = j->dout + (size_t)n * D;
    float r = j->crstd[n];
    for (int i = lo; i < hi; i++) j->dw[i] += g[i] * xr[i] * r;
  }
}

void lt_rmsnorm_backward(float *dx, float *dw, const float *dout, const float *x, const float *w, const float *rstd,
                         int N, int D) {
  norm_job_t j = {.dx = dx, .dw = dw, .x = x, .w = w, .dout = dout, .crstd = rstd, .N = N, .D = D};
  if (dx) par_range(rmsnorm_back_rows, &j, N, 1, (double)N * D);
  if (dw) par_range(rmsnorm_back_cols, &j, D, 16, (double)N * D);
}

typedef struct {
  float *x;
  const int *pos;
  int heads, hd;
  const float *cos, *sin;
  float sgn;
} rope_job_t;

static void rope_rows(void *p, int lo, int hi) {
  rope_job_t *j = p;
  int half = j->hd / 2;
  for (int n = lo; n < hi; n++) {
    const float *c = j->cos + (size_t)j->pos[n] * half, *s = j->sin + (size_t)j->pos[n] * half;
    for (int h = 0; h < j->heads; h++) {
      float *v = j->x + ((size_t)n * j->heads + h) * j->hd;
      for (int i = 0; i < half; i++) {
        float a = v[i], b = v[i + half], si = j->sgn * s[i];
        v[i] = a * c[i] - b * si;
        v[i + half] = b * c[i] + a * si;
      }
    }
  }
}

void lt_rope_apply(float *x, const int *pos, int N, int heads, int hd, const float *cos, const float *sin,
                   int inverse) {
  rope_job_t j = {x, pos, heads, hd, cos, sin, inverse ? -1.0f : 1.0f};
  par_range(rope_rows, &j, N, 1, (double)N * heads * hd);
}

/* ---- eight floats at a time (GCC and Clang vector extensions: AVX where -march has it, SSE halves else) ---- */

typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));

static inline v8f v8_load(const float *p) {
  v8f v;
  memcpy(&v, p, sizeof v);
  return v;
}

static inline void v8_store(float *p, v8f v) { memcpy(p, &v, sizeof v); }

static inline v8f v8_all(float x) { return (v8f){x, x, x, x, x, x, x, x}; }

/* e^x as Cephes' expf computes it (within 2 ulp), 0 below e^-87.3 where expf turns subnormal, +inf above 88.7. */
static inline v8f v8_exp(v8f x) {
  const v8f lo = v8_all(-87.3365447f), hi = v8_all(88.7228394f), magic = v8_all(12582912.0f); /* 1.5 · 2^23 */
  v8i under = x < lo;
  x = (v8f)(((v8i)x & ~under) | ((v8i)lo & under));
  x = (v8f)(((v8i)x & ~(x > hi)) | ((v8i)hi & (x > hi)));
  v8f t = x * v8_all(1.44269504088896341f) + magic; /* round(x / ln 2) in t's low bits */
  v8f n = t - magic;
  v8i ni = (v8i)t - (v8i)magic;
  v8f r = x - n * v8_all(0.693359375f) - n * v8_all(-2.12194440e-4f);
  v8f p = v8_all(1.9875691500e-4f);
  p = p * r + v8_all(1.3981999507e-3f);
  p = p * r + v8_all(8.3334519073e-3f);
  p = p * r + v8_all(4.1665795894e-2f);
  p = p * r + v8_all(1.6666665459e-1f);
  p = p * r + v8_all(5.0000001201e-1f);
  p = p * (r * r) + r + v8_all(1.0f);
  v8f e = p * (v8f)((ni + 127) << 23); /* · 2^n */
  return (v8f)((v8i)e & ~under);
}

/* x[i] = e^(x[i] − m) for i < n, eight at a time; the tail through a padded copy, so that every element gets the
 * same arithmetic. */
static void exp_shifted(float *x, int n, float m) {
  int i = 0;
  for (; i + 8 <= n; i += 8) v8_store(x + i, v8_exp(v8_load(x + i) - v8_all(m)));
  if (i == n) return;
  float pad[8] = {0};
  memcpy(pad, x + i, sizeof(float) * (size_t)(n - i));
  v8_store(pad, v8_exp(v8_load(pad) - v8_all(m)));
  memcpy(x + i, pad, sizeof(float) * (size_t)(n - i));
}

typedef struct {
  float *h, *dg, *du;
  const float *g, *u, *dh;
} swiglu_job_t;

/* h = g · σ(g) · u over 8 elements. */
static inline v8f swiglu8(v8f g, v8f u) { return g / (v8_all(1.0f) + v8_exp(-g)) * u; }

static void swiglu_range(void *p, int lo, int hi) {
  swiglu_job_t *j = p;
  int i = lo;
  for (; i + 8 <= hi; i += 8) v8_store(j->h + i, swiglu8(v8_load(j->g + i), v8_load(j->u + i)));
  if (i == hi) return;
  float g[8] = {0}, u[8] = {0}, h[8];
  memcpy(g, j->g + i, sizeof(float) * (size_t)(hi - i));
  memcpy(u, j->u + i, sizeof(float) * (size_t)(hi - i));
  v8_store(h, swiglu8(v8_load(g), v8_load(u)));
  memcpy(j->h + i, h, sizeof(float) * (size_t)(hi - i));
}

void lt_swiglu_forward(float *h, const float *g, const float *u, int n) {
  swiglu_job_t j = {.h = h, .g = g, .u = u};
  par_range(swiglu_range, &j, n, 16, 4.0 * n);
}

/* du = dh · g · σ(g), dg = dh · u · σ(g) · (1 + g · (1 − σ(g))) over 8 elements. */
static inline void swiglu8_back(v8f g, v8f u, v8f dh, v8f *dg, v8f *du) {
  v8f one = v8_all(1.0f), s = one / (one + v8_exp(-g));
  *du = dh * g * s;
  *dg = dh * u * s * (one + g * (one - s));
}

static void swiglu_back_range(void *p, int lo, int hi) {
  swiglu_job_t *j = p;
  int i = lo;
  v8f dg, du;
  for (; i + 8 <= hi; i += 8) {
    swiglu8_back(v8_load(j->g + i), v8_load(j->u + i), v8_load(j->dh + i), &dg, &du);
    v8_store(j->dg + i, dg);
    v8_store(j->du + i, du);
  }
  if (i == hi) return;
  size_t k = sizeof(float) * (size_t)(hi - i);
  float g[8] = {0}, u[8] = {0}, dh[8] = {0}, a[8], b[8];
  memcpy(g, j->g + i, k), memcpy(u, j->u + i, k), memcpy(dh, j->dh + i, k);
  swiglu8_back(v8_load(g), v8_load(u), v8_load(dh), &dg, &du);
  v8_store(a, dg), v8_store(b, du);
  memcpy(j->dg + i, a, k), memcpy(j->du + i, b, k);
}

void lt_swiglu_backward(float *dg, float *du, const float *dh, const float *g, const float *u, int n) {
  swiglu_job_t j = {.dg = dg, .du = du, .g = g, .u = u, .dh = dh};
  par_range(swiglu_back_range, &j, n, 16, 4.0 * n);
}

/* Attention runs in blocks of query rows so the score block [ATT_BR, S] stays
 * in cache, with the products on BLAS.  Masked scores are -inf; a row's valid
 * keys are [lo(p), p] for query position p.  The team takes its tasks in any
 * order (each writes its own outputs, computed the same on any thread): the
 * forward's are (query block, head), the backward's a KV head each (its heads
 * and blocks in the serial order, since they add into its dk and dv). */
#define ATT_BR 64

static inline int key_lo(int p, int window) { return window > 0 && p - window + 1 > 0 ? p - window + 1 : 0; }

typedef struct {
  float *out, *lse, *dq, *dk, *dv, *scratch;
  const float *q, *k, *v, *dout, *o;
  int T, S, H, KV, hd, window, ntasks;
  atomic_int next;
} att_job_t;

/* Where task (query block i0, head h) reads and writes: nb query rows from position p0 against ns keys from klo;
 * qoff is its offset in q, out and dout (ldq apart), koff in k and v (ldk apart, its KV head). */
typedef struct {
  int nb, p0, klo, ns, ldq, ldk;
  size_t qoff, koff;
} att_block_t;

static att_block_t att_block(const att_job_t *j, int i0, int h) {
  att_block_t b = {
      .nb = j->T - i0 < ATT_BR ? j->T - i0 : ATT_BR, .p0 = j->S - j->T + i0, .ldq = j->H * j->hd, .ldk = j->KV * j->hd};
  b.klo = key_lo(b.p0, j->window);
  b.ns = b.p0 + b.nb - b.klo;
  b.qoff = (size_t)i0 * b.ldq + (size_t)h * j->hd;
  b.koff = (size_t)b.klo * b.ldk + (size_t)(h / (j->H / j->KV)) * j->hd;
  return b;
}

/* One (query block, head) of the forward, P its score block. */
static void att_fwd_task(const att_job_t *j, int i0, int h, float *P) {
  att_block_t b = att_block(j, i0, h);
  int ns = b.ns, hd = j->hd;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, b.nb, ns, hd, 1.0f / sqrtf((float)hd), j->q + b.qoff, b.ldq,
              j->k + b.koff, b.ldk, 0.0f, P, ns);
  for (int r = 0; r < b.nb; r++) {
    int p = b.p0 + r, lo = key_lo(p, j->window) - b.klo, hi = p - b.klo;
    float *row = P + (size_t)r * ns;
    float m = -FLT_MAX;
    for (int x = lo; x <= hi; x++)
      if (row[x] > m) m = row[x];
    double sum = 0;
    for (int x = 0; x < lo; x++) row[x] = 0;
    exp_shifted(row + lo, hi - lo + 1, m);
    for (int x = lo; x <= hi; x++) sum += row[x];
    for (int x = hi + 1; x < ns; x++) row[x] = 0;
    float inv = (float)(1.0 / sum);
    for (int x = lo; x <= hi; x++) row[x] *= inv;
    if (j->lse) j->lse[(size_t)(i0 + r) * j->H + h] = m + (float)log(sum);
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, b.nb, hd, ns, 1.0f, P, ns, j->v + b.koff, b.ldk, 0.0f,
              j->out + b.qoff, b.ldq);
}

/* One head h over query block i0 of the backward, P and dP its score blocks. */
static void att_bwd_task(const att_job_t *j, int i0, int h, float *P, float *dP) {
  att_block_t b = att_block(j, i0, h);
  float scale = 1.0f / sqrtf((float)j->hd);
  int nb = b.nb, ns = b.ns, hd = j->hd, ldq = b.ldq, ldk = b.ldk;
  const float *qb = j->q + b.qoff, *dob = j->dout + b.qoff, *kb = j->k + b.koff, *vb = j->v + b.koff;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nb, ns, hd, scale, qb, ldq, kb, ldk, 0.0f, P, ns);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nb, ns, hd, 1.0f, dob, ldq, vb, ldk, 0.0f, dP, ns);
  for (int r = 0; r < nb; r++) {
    int p = b.p0 + r, lo = key_lo(p, j->window) - b.klo, hi = p - b.klo;
    float L = j->lse[(size_t)(i0 + r) * j->H + h];
    const float *o = j->o + b.qoff + (size_t)r * ldq, *d = dob + (size_t)r * ldq;
    float Di = 0;
    for (int x = 0; x < hd; x++) Di += d[x] * o[x];
    float *pr = P + (size_t)r * ns, *dr = dP + (size_t)r * ns;
    for (int x = 0; x < lo; x++) pr[x] = dr[x] = 0;
    exp_shifted(pr + lo, hi - lo + 1, L);
    for (int x = lo; x <= hi; x++) dr[x] = pr[x] * (dr[x] - Di) * scale;
    for (int x = hi + 1; x < ns; x++) pr[x] = dr[x] = 0;
  }
  /* dq = dS·K (overwrites), dk += dSᵀ·Q, dv += Pᵀ·dO */
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nb, hd, ns, 1.0f, dP, ns, kb, ldk, 0.0f, j->dq + b.qoff, ldq);
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, ns, hd, nb, 1.0f, dP, ns, qb, ldq, 1.0f, j->dk + b.koff, ldk);
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, ns, hd, nb, 1.0f, P, ns, dob, ldq, 1.0f, j->dv + b.koff, ldk);
}

/* The tasks a part claims; part 0 works in the caller's scratch, the others in their own (without one, a part
 * claims nothing: the others take its share). */
static void att_part(att_job_t *j, int i, int backward) {
  float *scratch = i == 0 ? j->scratch : malloc(sizeof(float) * LT_ATT_SCRATCH(j->S));
  int nblocks = (j->T + ATT_BR - 1) / ATT_BR, group = j->H / j->KV;
  for (int t; scratch && (t = atomic_fetch_add(&j->next, 1)) < j->ntasks;) {
    if (!backward) {
      att_fwd_task(j, (t % nblocks) * ATT_BR, t / nblocks, scratch);
      continue;
    }
    for (int i0 = 0; i0 < j->T; i0 += ATT_BR)
      for (int h = t * group; h < (t + 1) * group; h++)
        att_bwd_task(j, i0, h, scratch, scratch + (size_t)ATT_BR * j->S);
  }
  if (i != 0) free(scratch);
}

static void att_fwd_part(void *p, int i, int n) { att_part(p, i, 0); }
static void att_bwd_part(void *p, int i, int n) { att_part(p, i, 1); }

/* Attention's multiply-adds for T queries over S keys, all heads (the team's threshold). */
static double att_work(int T, int S, int H, int hd) { return 2.0 * T * ((double)S - T / 2.0) * H * hd; }

void lt_attention_forward(float *out, float *lse, const float *q, const float *k, const float *v, int T, int S, int H,
                          int KV, int hd, int window, float *scratch) {
  att_job_t j = {.out = out,
                 .lse = lse,
                 .scratch = scratch,
                 .q = q,
                 .k = k,
                 .v = v,
                 .T = T,
                 .S = S,
                 .H = H,
                 .KV = KV,
                 .hd = hd,
                 .window = window,
                 .ntasks = H * ((T + ATT_BR - 1) / ATT_BR)};
  atomic_init(&j.next, 0);
  if (lt__team_threads() == 1 || att_work(T, S, H, hd) < PAR_MIN_WORK) att_fwd_part(&j, 0, 1);
  else lt__team_run(att_fwd_part, &j);
}

void lt_attention_backward(float *dq, float *dk, float *dv, const float *dout, const float *out, const float *lse,
                           const float *q, const float *k, const float *v, int T, int S, int H, int KV, int hd,
                           int window, float *scratch) {
  att_job_t j = {.dq = dq,
                 .dk = dk,
                 .dv = dv,
                 .lse = (float *)lse,
                 .scratch = scratch,
                 .q = q,
                 .k = k,
                 .v = v,
                 .dout = dout,
                 .o = out,
                 .T = T,
                 .S = S,
                 .H = H,
                 .KV = KV,
                 .hd = hd,
                 .window = window,
                 .ntasks = KV};
  atomic_init(&j.next, 0);
  if (lt__team_threads() == 1 || att_work(T, S, H, hd) < PAR_MIN_WORK) att_bwd_part(&j, 0, 1);
  else lt__team_run(att_bwd_part, &j);
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
