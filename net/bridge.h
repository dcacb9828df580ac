/* A thread of its own beside a libuv loop: the one way longtail moves work off the loop and results back
 * (the daemon's buffer writer and learner, the worker's spool writer).  The thread runs `run` until it returns;
 * loop and thread share state under the bridge's lock; the thread wakes the loop with lt_bridge_notify
 * (on_notify then runs on the loop, coalesced as uv_async is), the loop wakes the thread with
 * lt_bridge_signal. */
#ifndef LT_NET_BRIDGE_H
#define LT_NET_BRIDGE_H

#include <stdint.h>
#include <uv.h>

typedef struct lt_bridge lt_bridge_t;

/* Starts the thread; *out is set before it runs.  On failure nothing is left running (the handle is released
 * as the loop turns) and *out is NULL. */
int lt_bridge_start(uv_loop_t *loop, void (*run)(lt_bridge_t *b, void *ud), void (*on_notify)(void *ud), void *ud,
                    const char *what, lt_bridge_t **out);
void lt_bridge_lock(lt_bridge_t *b);
void lt_bridge_unlock(lt_bridge_t *b);
/* With the lock held: sleeps until signalled, or until timeout_ms (> 0) passes. */
void lt_bridge_wait(lt_bridge_t *b, int timeout_ms);
/* With the lock held: wakes the thread. */
void lt_bridge_signal(lt_bridge_t *b);
/* From any thread: on_notify will run on the loop. */
void lt_bridge_notify(lt_bridge_t *b);
/* On the loop, once `run` has returned or is about to: joins the thread, releases everything, then done(ud). */
void lt_bridge_close(lt_bridge_t *b, void (*done)(void *ud), void *ud);

#endif
