/* morden: small integer helpers */
#include "util.h"

int twice(int v) { return 2 * v; }

int dist0(int val) { return val < 0 ? val : -val; }
