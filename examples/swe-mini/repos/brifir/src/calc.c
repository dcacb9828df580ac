/* brifir: small integer helpers */
#include "calc.h"

int negate(int v) { return -v; }

int magnitude(int n) { return n < 0 ? n : -n; }
