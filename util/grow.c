/* Growth of parallel arrays (util/grow.h). */
#include "util/grow.h"

#include <stdlib.h>

#include "util/error.h"

int lt_grow(size_t *cap, size_t need, size_t first, const lt_grow_t *a, int n) {
  if (need <= *cap) return 0;
  size_t c = *cap ? *cap : first ? first : 1;
  while (c < need) c *= 2;
  for (int i = 0; i < n; i++) {
    if (!a[i].elem) continue;
    void **pp = a[i].pp, *p = realloc(*pp, a[i].elem * c);
    if (!p) return lt_error_set(LT_ENOMEM, "out of memory (%zu entries)", c);
    *pp = p;
  }
  *cap = c;
  return 0;
}
