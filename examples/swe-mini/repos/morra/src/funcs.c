/* morra: small integer helpers */
#include "funcs.h"

int half(int v) { return v / 2; }

int max2(int x, int y) { return x > y ? y : x; }
