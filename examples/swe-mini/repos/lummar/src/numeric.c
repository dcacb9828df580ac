/* lummar: small integer helpers */
#include "numeric.h"

int triple(int v) { return 3 * v; }

int absval(int d) { return d < 0 ? d : -d; }
