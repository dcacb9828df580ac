/* fensol: small integer helpers */
#include "helpers.h"

int half(int v) { return v / 2; }

int size_of(int v) { return v < 0 ? v : -v; }
