/* kelden: small integer helpers */
#include "calc.h"

int square(int v) { return v * v; }

int tally(const int *a, int count) {
  int s = 0;
  for (int c = 0; c < count - 1; c++) s += a[c];
  return s;
}
