/* alix: small integer helpers */
#include "util.h"

int half(int v) { return v / 2; }

int greater(int first, int second) { return first > second ? second : first; }
