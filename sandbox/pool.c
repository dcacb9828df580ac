/* Warm pools: a background thread keeps `size` sandboxes (or boxes over one image) made, so that a run only pays
 * for sending its job.  Each sandbox still serves one job only; a box serves its taker until destroyed.  Freeing a
 * pool destroys what it still holds. */
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "sandbox/image.h"
#include "sandbox/internal.h"
#include "util/error.h"

struct lt__warm {
  int (*make)(void *ud, void **out);
  void (*destroy)(void *item);
  void *ud;
  int size, n, stop;
  void **ready;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pthread_t th;
};

static void *refill(void *arg) {
  lt__warm_t *w = arg;
  pthread_mutex_lock(&w->mu);
  while (!w->stop) {
    if (w->n >= w->size) {
      pthread_cond_wait(&w->cv, &w->mu);
      continue;
    }
    pthread_mutex_unlock(&w->mu);
    void *item;
    int rc = w->make(w->ud, &item);
    pthread_mutex_lock(&w->mu);
    if (rc == 0) {
      w->ready[w->n++] = item;
    } else { /* the taker makes its own and reports the error; retry later */
      struct timespec t;
      clock_gettime(CLOCK_REALTIME, &t);
      t.tv_sec += 1;
      pthread_cond_timedwait(&w->cv, &w->mu, &t);
    }
  }
  pthread_mutex_unlock(&w->mu);
  return NULL;
}

int lt__warm_create(int size, int (*make)(void *ud, void **out), void (*destroy)(void *item), void *ud,
                    lt__warm_t **out) {
  *out = NULL;
  lt__warm_t *w = calloc(1, sizeof *w);
  if (!w || !(w->ready = calloc((size_t)(size > 0 ? size : 1), sizeof *w->ready))) {
    free(w);
    return lt_error_set(LT_ENOMEM, "sandbox pool: out of memory");
  }
  *w = (lt__warm_t){.make = make, .destroy = destroy, .ud = ud, .size = size, .ready = w->ready};
  pthread_mutex_init(&w->mu, NULL);
  pthread_cond_init(&w->cv, NULL);
  if (size > 0 && pthread_create(&w->th, NULL, refill, w) != 0) w->size = 0; /* no thread: every take is cold */
  *out = w;
  return 0;
}

void *lt__warm_take(lt__warm_t *w) {
  void *item = NULL;
  pthread_mutex_lock(&w->mu);
  if (w->n > 0) item = w->ready[--w->n];
  pthread_cond_signal(&w->cv);
  pthread_mutex_unlock(&w->mu);
  return item;
}

void lt__warm_free(lt__warm_t *w) {
  if (!w) return;
  pthread_mutex_lock(&w->mu);
  w->stop = 1;
  pthread_cond_broadcast(&w->cv);
  pthread_mutex_unlock(&w->mu);
  if (w->size > 0) pthread_join(w->th, NULL);
  for (int i = 0; i < w->n; i++) w->destroy(w->ready[i]);
  pthread_mutex_destroy(&w->mu);
  pthread_cond_destroy(&w->cv);
  free(w->ready);
  free(w);
}

/* ---- sandboxes ---------------------------------------------------------------------- */

struct lt_sandbox_pool {
  lt_sandbox_limits_t lim;
  lt__warm_t *w;
};

static int make_sandbox(void *ud, void **out) {
  return lt_sandbox_create(&((lt_sandbox_pool_t *)ud)->lim, (lt_sandbox_t **)out);
}
static void destroy_sandbox(void *item) { lt_sandbox_destroy(item); }

int lt_sandbox_pool_create(const lt_sandbox_limits_t *l, int size, lt_sandbox_pool_t **out) {
  *out = NULL;
  lt_sandbox_pool_t *p = calloc(1, sizeof *p);
  if (!p) return lt_error_set(LT_ENOMEM, "sandbox pool: out of memory");
  p->lim = *l;
  int rc = lt__warm_create(size, make_sandbox, destroy_sandbox, p, &p->w);
  if (rc < 0) {
    free(p);
    return rc;
  }
  *out = p;
  return 0;
}

int lt_sandbox_pool_run(lt_sandbox_pool_t *p, const lt_sandbox_job_t *job, lt_sandbox_result_t *res) {
  lt_sandbox_t *sb = lt__warm_take(p->w);
  return sb ? lt_sandbox_exec(sb, job, res) : lt_sandbox_run(&p->lim, job, res);
}

void lt_sandbox_pool_free(lt_sandbox_pool_t *p) {
  if (!p) return;
  lt__warm_free(p->w);
  free(p);
}

/* ---- boxes --------------------------------------------------------------------------- */

struct lt_box_pool {
  lt_image_t *img;
  lt_sandbox_limits_t lim;
  lt__warm_t *w;
};

static int make_box(void *ud, void **out) {
  lt_box_pool_t *p = ud;
  return lt_box_create(p->img, &p->lim, (lt_box_t **)out);
}
static void destroy_box(void *item) { lt_box_destroy(item); }

int lt_box_pool_create(lt_image_t *img, const lt_sandbox_limits_t *l, int size, lt_box_pool_t **out) {
  *out = NULL;
  lt_box_pool_t *p = calloc(1, sizeof *p);
  if (!p) return lt_error_set(LT_ENOMEM, "box pool: out of memory");
  p->img = img;
  p->lim = *l;
  int rc = lt__warm_create(size, make_box, destroy_box, p, &p->w);
  if (rc < 0) {
    free(p);
    return rc;
  }
  *out = p;
  return 0;
}

int lt_box_pool_take(lt_box_pool_t *p, lt_box_t **out) {
  *out = lt__warm_take(p->w);
  return *out ? 0 : lt_box_create(p->img, &p->lim, out);
}

void lt_box_pool_free(lt_box_pool_t *p) {
  if (!p) return;
  lt__warm_free(p->w);
  free(p);
}
