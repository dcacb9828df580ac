/* libFuzzer target: the tool-call parsers read model output, so any bytes
 * must parse or be counted malformed, in every format, within their bounds,
 * without a sanitizer report. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "text/toolcall.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  for (int f = LT_TOOLFMT_XML; f <= LT_TOOLFMT_DEEPSEEK; f++) {
    lt_toolcalls_t tc;
    if (lt_toolcall_parse_as((lt_tool_format)f, (const char *)data, size, &tc) != 0) continue;
    if (tc.ncalls < 0 || tc.ncalls > LT_TOOLCALL_MAX_CALLS || tc.malformed < 0) abort();
    for (int i = 0; i < tc.ncalls; i++) {
      if (!tc.calls[i].name || strlen(tc.calls[i].name) > LT_TOOLCALL_MAX_NAME) abort();
      if (tc.calls[i].nargs < 0 || tc.calls[i].nargs > LT_TOOLCALL_MAX_ARGS) abort();
      if (f != LT_TOOLFMT_XML && (!tc.arguments[i] || strlen(tc.arguments[i]) > LT_TOOLCALL_MAX_VALUE)) abort();
      for (int k = 0; k < tc.calls[i].nargs; k++)
        if (!tc.calls[i].args[k].name || !tc.calls[i].args[k].value ||
            strlen(tc.calls[i].args[k].value) > LT_TOOLCALL_MAX_VALUE)
          abort();
    }
    lt_toolcalls_free(&tc);
  }
  return 0;
}
