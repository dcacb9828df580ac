/* Growth of parallel arrays: a trajectory's per-token arrays (tokens, logprobs, mask, versions, supports,
 * routing) share one length and one capacity, in the agent loop, the backend's generations, packing and SFT;
 * this grows them all at once so that none of them is forgotten. */
#ifndef LT_UTIL_GROW_H
#define LT_UTIL_GROW_H

#include <stddef.h>

typedef struct {
  void *pp;    /* the address of the array's pointer (T **) */
  size_t elem; /* bytes per element; 0: the array is not in use and stays as it is */
} lt_grow_t;

/* An array of one element per entry, and of k elements per entry (routing: layers x experts). */
#define LT_GROW(arr) \
  { &(arr), sizeof *(arr) }
#define LT_GROW_K(arr, k) \
  { &(arr), sizeof *(arr) * (size_t)(k) }

/* Makes the n arrays hold at least `need` entries: *cap doubles (from `first` when it is 0) until it does, and
 * every array is reallocated to the new capacity.  0, or LT_ENOMEM with *cap unchanged (every array still
 * valid and at least *cap entries long). */
int lt_grow(size_t *cap, size_t need, size_t first, const lt_grow_t *a, int n);

#endif
