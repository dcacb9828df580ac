/* libFuzzer target: the math reward parses policy output and dataset answers,
 * so any bytes (answer, a newline, reference) must be judged equal, different
 * or unparseable, within its bounds, without a sanitizer report. */
#include <stdlib.h>
#include <string.h>

#include "rewards/reward.h"
#include "util/error.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *s = malloc(size + 1);
  if (!s) return 0;
  memcpy(s, data, size);
  s[size] = 0;
  char *extracted = lt_reward_math_extract(s);
  free(extracted);
  char *nl = strchr(s, '\n');
  const char *ref = "1";
  if (nl) *nl = 0, ref = nl + 1;
  const char *why = NULL;
  int rc = lt_reward_math_equal(s, ref, 1e-6, &why);
  if (rc != 0 && rc != 1 && rc != LT_EINVAL && rc != LT_ENOMEM) abort();
  if ((rc == LT_EINVAL) != (why != NULL)) abort();
  free(s);
  return 0;
}
