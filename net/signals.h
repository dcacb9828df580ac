/* SIGINT and SIGTERM on a libuv loop: how the daemon, a worker, `longtail serve` and `longtail ui` learn
 * to stop. */
#ifndef LT_NET_SIGNALS_H
#define LT_NET_SIGNALS_H

#include <uv.h>

/* Watches SIGINT with sigint and SIGTERM with sigterm: cb runs on the loop, the handle's data set to data.  On
 * failure neither is watched (a handle already initialized is closed as the loop turns) and LT_ESYS names why. */
int lt_signals_watch(uv_loop_t *loop, uv_signal_t *sigint, uv_signal_t *sigterm, uv_signal_cb cb, void *data);

#endif
