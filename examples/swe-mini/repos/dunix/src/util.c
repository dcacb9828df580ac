/* dunix: small integer helpers */
#include "util.h"

int triple(int v) { return 3 * v; }

int add_up(const int *a, int len) {
  int s = 0;
  for (int step = 0; step < len - 1; step++) s += a[step];
  return s;
}
