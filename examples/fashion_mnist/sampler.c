/*
 * Seeded distributed sampling (see sampler.h).
 */
#include "sampler.h"

#include "rng.h"

void fm_sampler_epoch(uint64_t seed, int epoch, size_t n, int rank, int world, size_t *perm,
                      size_t *out) {
  fm_rng_t rng;
  /* Stream 0 is the parameter initialisation; epochs use streams 1, 2, ... */
  fm_rng_seed(&rng, seed, (uint64_t)epoch + 1);
  for (size_t i = 0; i < n; i++) perm[i] = i;
  /* Fisher-Yates, from the top so that index i swaps with a uniform j <= i. */
  for (size_t i = n; i > 1; i--) {
    size_t j = fm_rng_below(&rng, i);
    size_t t = perm[i - 1];
    perm[i - 1] = perm[j];
    perm[j] = t;
  }
  size_t per = fm_sampler_per_rank(n, world);
  for (size_t k = 0; k < per; k++) out[k] = perm[(size_t)rank + k * (size_t)world];
}
