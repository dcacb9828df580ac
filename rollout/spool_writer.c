/* Group commit off the worker's loop: a thread of its own writes the spool's
 * batches, one at a time, so a slow fsync never stalls sessions, heartbeats
 * or receipts (and the libuv pool, busy with environment steps, never delays
 * a trajectory's delivery).  What finishes while a batch is written goes in
 * the next one. */
#include <stdlib.h>

#include "net/bridge.h"
#include "rollout/spool.h"
#include "util/error.h"

struct lt_spool_writer {
  lt_spool_t *spool;
  lt_spool_durable_fn durable;
  void (*failed)(int rc, void *ud);
  void *ud;
  lt_bridge_t *br;
  lt_spool_batch_t *job; /* handed to the thread; NULL when idle */
  int job_rc, job_done, quit;
};

static void spool_writer_run(lt_bridge_t *br, void *arg) {
  lt_spool_writer_t *sw = arg;
  lt_bridge_lock(br);
  for (;;) {
    while (!sw->quit && (!sw->job || sw->job_done)) lt_bridge_wait(br, 0);
    if (sw->quit) break;
    lt_spool_batch_t *b = sw->job;
    lt_bridge_unlock(br);
    int rc = lt_spool_batch_write(b);
    lt_bridge_lock(br);
    sw->job_rc = rc;
    sw->job_done = 1;
    lt_bridge_notify(br);
  }
  lt_bridge_unlock(br);
}

/* Hands the pending records to the thread when it is idle. */
static void start_job(lt_spool_writer_t *sw) {
  lt_spool_batch_t *b;
  int k = lt_spool_batch_take(sw->spool, &b);
  if (k < 0 && sw->failed) sw->failed(k, sw->ud);
  if (k <= 0) return;
  lt_bridge_lock(sw->br);
  sw->job = b;
  sw->job_done = 0;
  lt_bridge_signal(sw->br);
  lt_bridge_unlock(sw->br);
}

static void spool_writer_on_notify(void *arg) {
  lt_spool_writer_t *sw = arg;
  lt_bridge_lock(sw->br);
  lt_spool_batch_t *b = sw->job_done ? sw->job : NULL;
  int rc = sw->job_rc;
  if (b) sw->job = NULL;
  lt_bridge_unlock(sw->br);
  if (!b) return;
  if ((rc = lt_spool_batch_done(sw->spool, b, rc, sw->durable, sw->ud)) < 0) {
    if (sw->failed) sw->failed(rc, sw->ud); /* no retry at once: a full disk would spin; the next kick retries */
  } else if (lt_spool_pending(sw->spool)) {
    start_job(sw);
  }
}

int lt_spool_writer_start(uv_loop_t *loop, lt_spool_t *s, lt_spool_durable_fn durable, void (*failed)(int rc, void *ud),
                          void *ud, lt_spool_writer_t **out) {
  *out = NULL;
  lt_spool_writer_t *sw = calloc(1, sizeof *sw);
  if (!sw) return lt_error_set(LT_ENOMEM, "spool writer: out of memory");
  *sw = (lt_spool_writer_t){.spool = s, .durable = durable, .failed = failed, .ud = ud};
  int rc = lt_bridge_start(loop, spool_writer_run, spool_writer_on_notify, sw, "spool writer", &sw->br);
  if (rc < 0) {
    free(sw);
    return rc;
  }
  *out = sw;
  return 0;
}

void lt_spool_writer_kick(lt_spool_writer_t *sw) {
  lt_bridge_lock(sw->br);
  int busy = sw->job != NULL;
  lt_bridge_unlock(sw->br);
  if (!busy) start_job(sw); /* else its completion takes what is pending */
}

void lt_spool_writer_stop(lt_spool_writer_t *sw) {
  if (!sw) return;
  /* The thread finishes a write it started; one it did not start is done here:
   * either way the batch's records end on disk or pending again. */
  lt_bridge_lock(sw->br);
  sw->quit = 1;
  lt_bridge_signal(sw->br);
  lt_bridge_unlock(sw->br);
  lt_bridge_close(sw->br, free, sw); /* joins the thread now; sw is freed as the loop turns */
  lt_spool_batch_t *b = sw->job;
  sw->job = NULL;
  if (b) lt_spool_batch_done(sw->spool, b, sw->job_done ? sw->job_rc : lt_spool_batch_write(b), NULL, NULL);
}
