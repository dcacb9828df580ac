/* lumba: small integer helpers */
#include "calc.h"

int negate(int v) { return -v; }

int magnitude(int v) { return v < 0 ? v : -v; }
