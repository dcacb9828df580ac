/* libFuzzer target: chat templates ship with downloaded models, so any bytes
 * must compile or be refused, and any compiled template must render or raise
 * within its limits, without a sanitizer report.  Input: TEMPLATE, optionally
 * followed by a NUL byte and the JSON variables (else a small conversation). */
#include <stdlib.h>
#include <string.h>

#include "text/jinja.h"

static const char CONVERSATION[] =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"be brief\"}, {\"role\": \"user\", \"content\": \"hi\"},"
    " {\"role\": \"assistant\", \"content\": \"<think>x</think>yo\", \"tool_calls\": [{\"type\": \"function\","
    " \"function\": {\"name\": \"f\", \"arguments\": {\"a\": [1, 2.5, null]}}}]}, {\"role\": \"tool\", \"content\": \"r\"}],"
    " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}], \"add_generation_prompt\": true,"
    " \"bos_token\": \"<s>\", \"eos_token\": \"</s>\"}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *src = (const char *)data;
  const char *nul = memchr(src, 0, size);
  size_t tlen = nul ? (size_t)(nul - src) : size;
  lt_jinja_t *t;
  if (lt_jinja_compile(src, tlen, &t) != 0) return 0;
  cJSON *vars = nul ? cJSON_ParseWithLength(nul + 1, size - tlen - 1) : cJSON_Parse(CONVERSATION);
  lt_jinja_limits_t lim = {.max_memory = 32 << 20, .max_output = 1 << 20, .max_steps = 200000};
  char *out = NULL;
  size_t len = 0;
  int rc = lt_jinja_render(t, vars, &lim, &out, &len);
  if (rc == 0 && (!out || strlen(out) > len || len > lim.max_output)) abort();
  if (rc != 0 && out) abort();
  free(out);
  cJSON_Delete(vars);
  lt_jinja_free(t);
  return 0;
}
