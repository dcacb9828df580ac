/* Group commit off the worker's loop: a thread of its own writes the spool's
 * batches, one at a time, so a slow fsync never stalls sessions, heartbeats
 * or receipts (and the libuv pool, busy with environment steps, never delays
 * a trajectory's delivery).  What finishes while a batch is written goes in
 * the next one. */
#include <stdlib.h>

#include "rollout/spool.h"
#include "util/error.h"

struct lt_spool_writer {
  lt_spool_t *spool;
  lt_spool_durable_fn durable;
  void (*failed)(int rc, void *ud);
  void *ud;
  uv_thread_t thread;
  uv_mutex_t mu;
  uv_cond_t cv;
  uv_async_t async;
  lt_spool_batch_t *job; /* handed to the thread; NULL when idle */
  int job_rc, job_done, quit;
};

static void thread_main(void *arg) {
  lt_spool_writer_t *sw = arg;
  uv_mutex_lock(&sw->mu);
  for (;;) {
    while (!sw->quit && (!sw->job || sw->job_done)) uv_cond_wait(&sw->cv, &sw->mu);
    if (sw->quit) break;
    lt_spool_batch_t *b = sw->job;
    uv_mutex_unlock(&sw->mu);
    int rc = lt_spool_batch_write(b);
    uv_mutex_lock(&sw->mu);
    sw->job_rc = rc;
    sw->job_done = 1;
    uv_async_send(&sw->async);
  }
  uv_mutex_unlock(&sw->mu);
}

/* Hands the pending records to the thread when it is idle. */
static void start_job(lt_spool_writer_t *sw) {
  lt_spool_batch_t *b;
  int k = lt_spool_batch_take(sw->spool, &b);
  if (k < 0 && sw->failed) sw->failed(k, sw->ud);
  if (k <= 0) return;
  uv_mutex_lock(&sw->mu);
  sw->job = b;
  sw->job_done = 0;
  uv_cond_signal(&sw->cv);
  uv_mutex_unlock(&sw->mu);
}

static void on_async(uv_async_t *h) {
  lt_spool_writer_t *sw = h->data;
  uv_mutex_lock(&sw->mu);
  lt_spool_batch_t *b = sw->job_done ? sw->job : NULL;
  int rc = sw->job_rc;
  if (b) sw->job = NULL;
  uv_mutex_unlock(&sw->mu);
  if (!b) return;
  if ((rc = lt_spool_batch_done(sw->spool, b, rc, sw->durable, sw->ud)) < 0) {
    if (sw->failed) sw->failed(rc, sw->ud); /* no retry at once: a full disk would spin; the next kick retries */
  } else if (lt_spool_pending(sw->spool)) {
    start_job(sw);
  }
}

static void on_closed(uv_handle_t *h) { free(h->data); }

int lt_spool_writer_start(uv_loop_t *loop, lt_spool_t *s, lt_spool_durable_fn durable, void (*failed)(int rc, void *ud),
                          void *ud, lt_spool_writer_t **out) {
  *out = NULL;
  lt_spool_writer_t *sw = calloc(1, sizeof *sw);
  if (!sw) return lt_error_set(LT_ENOMEM, "spool writer: out of memory");
  *sw = (lt_spool_writer_t){.spool = s, .durable = durable, .failed = failed, .ud = ud};
  if (uv_mutex_init(&sw->mu) != 0) {
    free(sw);
    return lt_error_set(LT_ESYS, "spool writer: cannot make a mutex");
  }
  int rc = uv_cond_init(&sw->cv);
  if (rc == 0 && (rc = uv_async_init(loop, &sw->async, on_async)) != 0) uv_cond_destroy(&sw->cv);
  if (rc != 0) {
    uv_mutex_destroy(&sw->mu);
    free(sw);
    return lt_error_set(LT_ESYS, "spool writer: %s", uv_strerror(rc));
  }
  sw->async.data = sw;
  if ((rc = uv_thread_create(&sw->thread, thread_main, sw)) != 0) {
    uv_close((uv_handle_t *)&sw->async, on_closed);
    uv_cond_destroy(&sw->cv);
    uv_mutex_destroy(&sw->mu);
    return lt_error_set(LT_ESYS, "spool writer: cannot start its thread: %s", uv_strerror(rc));
  }
  *out = sw;
  return 0;
}

void lt_spool_writer_kick(lt_spool_writer_t *sw) {
  uv_mutex_lock(&sw->mu);
  int busy = sw->job != NULL;
  uv_mutex_unlock(&sw->mu);
  if (!busy) start_job(sw); /* else its completion takes what is pending */
}

void lt_spool_writer_stop(lt_spool_writer_t *sw) {
  if (!sw) return;
  /* The thread finishes a write it started; one it did not start is done here:
   * either way the batch's records end on disk or pending again. */
  uv_mutex_lock(&sw->mu);
  sw->quit = 1;
  uv_cond_signal(&sw->cv);
  uv_mutex_unlock(&sw->mu);
  uv_thread_join(&sw->thread);
  lt_spool_batch_t *b = sw->job;
  sw->job = NULL;
  if (b) lt_spool_batch_done(sw->spool, b, sw->job_done ? sw->job_rc : lt_spool_batch_write(b), NULL, NULL);
  uv_cond_destroy(&sw->cv);
  uv_mutex_destroy(&sw->mu);
  uv_close((uv_handle_t *)&sw->async, on_closed);
}
