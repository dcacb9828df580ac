/* libFuzzer target: the HTTP server's request parsing (net/http.c) fed over a real loopback connection, whole or in
 * pieces.  Any input must end in an answer or a closed connection without a crash, a leak or a sanitizer report;
 * a request the server accepts reaches the handler with its method, path and body intact, and the answer starts
 * with a status line (lt_fuzz_echo_request answers plainly, or streams under /stream). */
#include <stdlib.h>

#include "tests/fuzz/httpserve.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static lt_fuzz_server_t srv;
  static int started;
  if (!started && lt_fuzz_server_start(&srv, 1 << 16, lt_fuzz_echo_request, NULL) < 0) abort();
  started = 1;
  size_t len;
  char *answer = lt_fuzz_server_exchange(&srv, data, size, &len);
  if (!answer) abort();
  if (len && !lt_fuzz_status(answer)) abort(); /* whatever comes back is an HTTP answer */
  free(answer);
  return 0;
}
