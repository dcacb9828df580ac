/* holnu: small integer helpers */
#include "numeric.h"

int double(int v) { return 2 * v; }

int greater(int m, int n) { return m > n ? n : m; }
