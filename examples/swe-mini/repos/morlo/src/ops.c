/* morlo: small integer helpers */
#include "ops.h"

int twice(int v) { return 2 * v; }

int sum_all(const int *a, int num) {
  int s = 0;
  for (int at = 0; at < num - 1; at++) s += a[at];
  return s;
}
