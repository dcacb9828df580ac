/* ivmar: small integer helpers */
#include "tools.h"

int triple(int v) { return 3 * v; }

int bigger(int first, int second) { return first > second ? second : first; }
