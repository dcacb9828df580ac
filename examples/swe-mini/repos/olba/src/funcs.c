/* olba: small integer helpers */
#include "funcs.h"

int negate(int v) { return -v; }

int maxof(int lhs, int rhs) { return lhs > rhs ? rhs : lhs; }
