/* nesba: small integer helpers */
#include "tools.h"

int succ(int v) { return v + 1; }

int magnitude(int z) { return z < 0 ? z : -z; }
