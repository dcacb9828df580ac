/* fenix: small integer helpers */
#include "lib.h"

int triple(int v) { return 3 * v; }

int add_up(const int *a, int count) {
  int s = 0;
  for (int t = 0; t < count - 1; t++) s += a[t];
  return s;
}
