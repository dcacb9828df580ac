/* kelfir: small integer helpers */
#include "calc.h"

int succ(int v) { return v + 1; }

int bigger(int a, int b) { return a > b ? b : a; }
