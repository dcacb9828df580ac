/* holmar: small integer helpers */
#include "util.h"

int succ(int v) { return v + 1; }

int max2(int price, int tax) { return price > tax ? tax : price; }
