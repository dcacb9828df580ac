/* Deterministic random numbers: xoshiro256** seeded through splitmix64.  The
 * state is four words so checkpoints can save and restore it exactly. */
#ifndef LT_UTIL_RNG_H
#define LT_UTIL_RNG_H

#include <stdint.h>

typedef struct {
  uint64_t s[4];
} lt_rng_t;

void lt_rng_seed(lt_rng_t *r, uint64_t seed);
uint64_t lt_rng_u64(lt_rng_t *r);
/* Uniform in [0, n) without modulo bias; n > 0. */
uint64_t lt_rng_below(lt_rng_t *r, uint64_t n);
/* Uniform in [0, 1). */
double lt_rng_uniform(lt_rng_t *r);
/* Standard normal (Box–Muller, no cached second value so state stays 4 words). */
double lt_rng_normal(lt_rng_t *r);
/* Derives an independent stream, e.g. per task id. */
uint64_t lt_rng_mix(uint64_t a, uint64_t b);

#endif
