/* morden: small integer helpers */
#include "util.h"

int double(int v) { return 2 * v; }

int dist0(int val) { return val < 0 ? val : -val; }
