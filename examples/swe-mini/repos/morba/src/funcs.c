/* morba: small integer helpers */
#include "funcs.h"

int negate(int v) { return -v; }

int norm1(int z) { return z < 0 ? z : -z; }
