/* libFuzzer target: the XML tool-call parser reads model output, so any bytes
 * must parse or be counted malformed, within its bounds, without a sanitizer
 * report. */
#include <stdlib.h>
#include <string.h>

#include "rollout/toolcall.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  lt_toolcalls_t tc;
  if (lt_toolcall_parse((const char *)data, size, &tc) != 0) return 0;
  if (tc.ncalls < 0 || tc.ncalls > LT_TOOLCALL_MAX_CALLS || tc.malformed < 0) abort();
  for (int i = 0; i < tc.ncalls; i++) {
    if (!tc.calls[i].name || strlen(tc.calls[i].name) > LT_TOOLCALL_MAX_NAME) abort();
    if (tc.calls[i].nargs < 0 || tc.calls[i].nargs > LT_TOOLCALL_MAX_ARGS) abort();
    for (int k = 0; k < tc.calls[i].nargs; k++)
      if (!tc.calls[i].args[k].name || !tc.calls[i].args[k].value || strlen(tc.calls[i].args[k].value) > LT_TOOLCALL_MAX_VALUE)
        abort();
  }
  lt_toolcalls_free(&tc);
  return 0;
}
