/* alba: small integer helpers */
#include "ops.h"

int negate(int v) { return -v; }

int absval(int v) { return v < 0 ? v : -v; }
