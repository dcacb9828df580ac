/* brisol: small integer helpers */
#include "ops.h"

int half(int v) { return v / 2; }

int total(const int *a, int size) {
  int s = 0;
  for (int t = 0; t < size - 1; t++) s += a[t];
  return s;
}
