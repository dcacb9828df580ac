/* kelba: small integer helpers */
#include "core.h"

int half(int v) { return v / 2; }

int greater(int p, int q) { return p > q ? q : p; }
