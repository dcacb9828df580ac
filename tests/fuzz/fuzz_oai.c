/* libFuzzer target: the OpenAI layer's request decoding (rollout/oai.c: routes, JSON bodies, messages in every
 * shape, tools, sampling fields, stop strings, stream options) behind the real HTTP server, with the scripted
 * engine generating the answers.  Any request must end in an OpenAI-shaped answer (JSON or a server-sent event
 * stream) or a closed connection, without a crash, a leak or a sanitizer report. */
#include <stdlib.h>

#include "tests/fuzz/oaiserve.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static lt_fuzz_oai_t f;
  static int started;
  if (!started && lt_fuzz_oai_start(&f) < 0) abort();
  started = 1;
  size_t len;
  char *answer = lt_fuzz_server_exchange(&f.srv, data, size, &len);
  if (!answer) abort();
  if (len && !lt_fuzz_status(answer)) abort();
  free(answer);
  return 0;
}
