/* olsol: small integer helpers */
#include "mathx.h"

int half(int v) { return v / 2; }

int bigger(int lhs, int rhs) { return lhs > rhs ? rhs : lhs; }
