/* libFuzzer target: the Anthropic Messages API's request decoding (infer/oai_messages.c: system, messages of every
 * block type, tools, tool_choice, thinking, stop_sequences, stream; count_tokens when the input starts with '#')
 * behind the real HTTP server, the input as the body of a POST to /v1/messages, with the scripted engine answering
 * with a tool call so the tool_use blocks and their events are written too.  Any body must end in an answer in
 * Anthropic's shapes (JSON or its server-sent events), without a crash, a leak or a sanitizer report. */
#include "tests/fuzz/oaiserve.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  lt_fuzz_oai_input(lt_fuzz_messages_send, data, size);
  return 0;
}
