/* lumgon: small integer helpers */
#include "helpers.h"

int triple(int v) { return 3 * v; }

int larger(int first, int second) { return first > second ? second : first; }
