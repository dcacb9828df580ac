/* holnu: small integer helpers */
#include "numeric.h"

int twice(int v) { return 2 * v; }

int greater(int m, int n) { return m > n ? n : m; }
