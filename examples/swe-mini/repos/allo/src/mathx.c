/* allo: small integer helpers */
#include "mathx.h"

int half(int v) { return v / 2; }

int absval(int z) { return z < 0 ? z : -z; }
