/* Warm sandboxes: a background thread keeps `size` of them made, so that a run
 * only pays for sending its job.  Each sandbox still serves one job only.  The
 * sandboxes die with the thread that made them (PR_SET_PDEATHSIG), which is the
 * pool's own, so freeing the pool leaves nothing behind. */
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "sandbox/sandbox.h"
#include "util/error.h"

struct lt_sandbox_pool {
  lt_sandbox_limits_t lim;
  int size, n, stop;
  lt_sandbox_t **ready;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pthread_t th;
};

static void *refill(void *arg) {
  lt_sandbox_pool_t *p = arg;
  pthread_mutex_lock(&p->mu);
  while (!p->stop) {
    if (p->n >= p->size) {
      pthread_cond_wait(&p->cv, &p->mu);
      continue;
    }
    pthread_mutex_unlock(&p->mu);
    lt_sandbox_t *sb;
    int rc = lt_sandbox_create(&p->lim, &sb);
    pthread_mutex_lock(&p->mu);
    if (rc == 0) {
      p->ready[p->n++] = sb;
    } else { /* the run path makes its own and reports the error; retry later */
      struct timespec t;
      clock_gettime(CLOCK_REALTIME, &t);
      t.tv_sec += 1;
      pthread_cond_timedwait(&p->cv, &p->mu, &t);
    }
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

int lt_sandbox_pool_create(const lt_sandbox_limits_t *l, int size, lt_sandbox_pool_t **out) {
  *out = NULL;
  lt_sandbox_pool_t *p = calloc(1, sizeof *p);
  if (!p || !(p->ready = calloc((size_t)(size > 0 ? size : 1), sizeof *p->ready))) {
    free(p);
    return lt_error_set(LT_ENOMEM, "sandbox pool: out of memory");
  }
  p->lim = *l;
  p->size = size;
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->cv, NULL);
  if (size > 0 && pthread_create(&p->th, NULL, refill, p) != 0) {
    p->size = 0; /* no thread: every run is cold */
  }
  *out = p;
  return 0;
}

int lt_sandbox_pool_run(lt_sandbox_pool_t *p, const lt_sandbox_job_t *job, lt_sandbox_result_t *res) {
  lt_sandbox_t *sb = NULL;
  pthread_mutex_lock(&p->mu);
  if (p->n > 0) sb = p->ready[--p->n];
  pthread_cond_signal(&p->cv);
  pthread_mutex_unlock(&p->mu);
  if (!sb) return lt_sandbox_run(&p->lim, job, res);
  return lt_sandbox_exec(sb, job, res);
}

void lt_sandbox_pool_free(lt_sandbox_pool_t *p) {
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  p->stop = 1;
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
  if (p->size > 0) pthread_join(p->th, NULL);
  for (int i = 0; i < p->n; i++) lt_sandbox_destroy(p->ready[i]);
  pthread_mutex_destroy(&p->mu);
  pthread_cond_destroy(&p->cv);
  free(p->ready);
  free(p);
}
