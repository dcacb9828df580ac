/* libFuzzer target: the OpenAI Responses API's request decoding (infer/oai_responses.c: instructions, input as a
 * string or items of every type, tools of every type, tool_choice, reasoning, text, include, stream) behind the real
 * HTTP server, the input as the body of a POST to /v1/responses, with the scripted engine answering with a tool call
 * so the function_call items and their events are written too.  Any body must end in an answer (JSON or the
 * response's server-sent events), without a crash, a leak or a sanitizer report. */
#include "tests/fuzz/oaiserve.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  lt_fuzz_oai_input(lt_fuzz_responses_send, data, size);
  return 0;
}
