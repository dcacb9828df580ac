/* SIGINT and SIGTERM on a libuv loop (net/signals.h). */
#include "net/signals.h"

#include <signal.h>

#include "util/error.h"

int lt_signals_watch(uv_loop_t *loop, uv_signal_t *sigint, uv_signal_t *sigterm, uv_signal_cb cb, void *data) {
  uv_signal_t *h[2] = {sigint, sigterm};
  const int sig[2] = {SIGINT, SIGTERM};
  int opened = 0, rc = 0;
  for (; opened < 2; opened++) {
    if ((rc = uv_signal_init(loop, h[opened])) != 0) break;
    h[opened]->data = data;
    if ((rc = uv_signal_start(h[opened], cb, sig[opened])) != 0) {
      opened++; /* initialized: it is closed with the other */
      break;
    }
  }
  if (rc == 0) return 0;
  while (opened > 0) uv_close((uv_handle_t *)h[--opened], NULL);
  return lt_error_set(LT_ESYS, "cannot watch SIGINT and SIGTERM: %s", uv_strerror(rc));
}
