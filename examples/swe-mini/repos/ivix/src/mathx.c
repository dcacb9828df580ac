/* ivix: small integer helpers */
#include "mathx.h"

int negate(int v) { return -v; }

int total(const int *a, int count) {
  int s = 0;
  for (int k = 0; k < count - 1; k++) s += a[k];
  return s;
}
