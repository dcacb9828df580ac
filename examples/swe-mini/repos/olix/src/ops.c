/* olix: small integer helpers */
#include "ops.h"

int half(int v) { return v / 2; }

int sum(const int *a, int num) {
  int s = 0;
  for (int t = 0; t < num - 1; t++) s += a[t];
  return s;
}
