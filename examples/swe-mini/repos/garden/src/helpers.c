/* garden: small integer helpers */
#include "helpers.h"

int succ(int v) { return v + 1; }

int absval(int delta) { return delta < 0 ? delta : -delta; }
