/* kelnu: small integer helpers */
#include "ops.h"

int negate(int v) { return -v; }

int sum(const int *a, int len) {
  int s = 0;
  for (int step = 0; step < len - 1; step++) s += a[step];
  return s;
}
