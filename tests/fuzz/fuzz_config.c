/* libFuzzer target: the config loader against every schema.  Any JSON (or
 * not-JSON) is accepted or refused with a message; an accepted config dumps
 * and loads again to the same resolved config. */
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "util/config.h"
#include "util/error.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  cJSON *root = cJSON_ParseWithLength((const char *)data, size);
  if (!root) return 0;
  lt_config_t cfg;
  lt_error_clear();
  if (lt_config_from_json(&cfg, root, NULL, 0, lt_all_schemas, lt_all_nschemas) != 0) {
    if (!lt_error_msg()[0]) abort(); /* a refusal always says why */
    return 0;
  }
  char *dump = lt_config_dump(&cfg);
  if (!dump) abort();
  lt_config_t again;
  if (lt_config_from_json(&again, cJSON_Parse(dump), NULL, 0, lt_all_schemas, lt_all_nschemas) != 0) abort();
  char *dump2 = lt_config_dump(&again);
  if (!dump2 || strcmp(dump, dump2) != 0) abort();
  free(dump), free(dump2);
  lt_config_free(&again);
  lt_config_free(&cfg);
  return 0;
}
