/* A thread beside a libuv loop (net/bridge.h): the thread, the lock it shares with the loop, and the
 * uv_async that wakes the loop. */
#include "net/bridge.h"

#include <stdlib.h>

#include "util/error.h"

struct lt_bridge {
  uv_thread_t thread;
  uv_mutex_t mu;
  uv_cond_t cv;
  uv_async_t async;
  void (*run)(lt_bridge_t *b, void *ud);
  void (*on_notify)(void *ud);
  void *ud;
  void (*done)(void *ud);
  void *done_ud;
};

static void thread_main(void *arg) {
  lt_bridge_t *b = arg;
  b->run(b, b->ud);
}

static void on_async(uv_async_t *a) {
  lt_bridge_t *b = a->data;
  b->on_notify(b->ud);
}

static void on_closed(uv_handle_t *h) {
  lt_bridge_t *b = h->data;
  void (*done)(void *) = b->done;
  void *ud = b->done_ud;
  uv_cond_destroy(&b->cv);
  uv_mutex_destroy(&b->mu);
  free(b);
  if (done) done(ud);
}

int lt_bridge_start(uv_loop_t *loop, void (*run)(lt_bridge_t *b, void *ud), void (*on_notify)(void *ud), void *ud,
                    const char *what, lt_bridge_t **out) {
  *out = NULL;
  lt_bridge_t *b = calloc(1, sizeof *b);
  if (!b) return lt_error_set(LT_ENOMEM, "%s: out of memory", what);
  *b = (lt_bridge_t){.run = run, .on_notify = on_notify, .ud = ud};
  int rc = uv_mutex_init(&b->mu);
  if (rc == 0 && (rc = uv_cond_init(&b->cv)) != 0) uv_mutex_destroy(&b->mu);
  if (rc == 0 && (rc = uv_async_init(loop, &b->async, on_async)) != 0) {
    uv_cond_destroy(&b->cv);
    uv_mutex_destroy(&b->mu);
  }
  if (rc != 0) {
    free(b);
    return lt_error_set(LT_ESYS, "%s: %s", what, uv_strerror(rc));
  }
  b->async.data = b;
  *out = b; /* before the thread starts: `run` may reach the bridge through the caller's copy */
  if ((rc = uv_thread_create(&b->thread, thread_main, b)) != 0) {
    *out = NULL;
    uv_close((uv_handle_t *)&b->async, on_closed);
    return lt_error_set(LT_ESYS, "%s: cannot start its thread: %s", what, uv_strerror(rc));
  }
  return 0;
}

void lt_bridge_lock(lt_bridge_t *b) { uv_mutex_lock(&b->mu); }

void lt_bridge_unlock(lt_bridge_t *b) { uv_mutex_unlock(&b->mu); }

void lt_bridge_wait(lt_bridge_t *b, int timeout_ms) {
  if (timeout_ms > 0) uv_cond_timedwait(&b->cv, &b->mu, (uint64_t)timeout_ms * 1000000ull);
  else uv_cond_wait(&b->cv, &b->mu);
}

void lt_bridge_signal(lt_bridge_t *b) { uv_cond_signal(&b->cv); }

void lt_bridge_notify(lt_bridge_t *b) { uv_async_send(&b->async); }

void lt_bridge_close(lt_bridge_t *b, void (*done)(void *ud), void *ud) {
  uv_thread_join(&b->thread);
  b->done = done;
  b->done_ud = ud;
  uv_close((uv_handle_t *)&b->async, on_closed);
}
