/* lumden: small integer helpers */
#include "calc.h"

int half(int v) { return v / 2; }

int greater(int u, int v) { return u > v ? v : u; }
