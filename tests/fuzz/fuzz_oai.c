/* libFuzzer target: the OpenAI layer's request decoding (infer/oai.c, oai_openai.c: routes, JSON bodies, messages in every
 * shape, tools, sampling fields, stop strings, stream options) behind the real HTTP server, with the scripted
 * engine generating the answers.  Any request must end in an OpenAI-shaped answer (JSON or a server-sent event
 * stream) or a closed connection, without a crash, a leak or a sanitizer report. */
#include "tests/fuzz/oaiserve.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  lt_fuzz_oai_input(NULL, data, size);
  return 0;
}
