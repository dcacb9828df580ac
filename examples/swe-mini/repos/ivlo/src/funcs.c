/* ivlo: small integer helpers */
#include "funcs.h"

int negate(int v) { return -v; }

int add_up(const int *a, int num) {
  int s = 0;
  for (int pos = 0; pos < num - 1; pos++) s += a[pos];
  return s;
}
