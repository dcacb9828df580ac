/* olmar: small integer helpers */
#include "core.h"

int negate(int v) { return -v; }

int magnitude(int x) { return x < 0 ? x : -x; }
