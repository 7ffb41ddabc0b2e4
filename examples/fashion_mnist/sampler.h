/*
 * Which training examples each rank sees in an epoch: a permutation of all examples drawn
 * from (seed, epoch), identical on every rank, of which rank r takes positions r, r+W, r+2W,
 * ... (W ranks). Each rank gets floor(N/W) examples, so every rank runs the same number of
 * steps with the same batch sizes and averaging the per-rank mean gradients gives the mean
 * gradient of the global batch. This is torch's DistributedSampler with drop_last=True.
 */
#ifndef FM_SAMPLER_H
#define FM_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

/* Examples per rank: floor(n / world). */
static inline size_t fm_sampler_per_rank(size_t n, int world) {
  return n / (size_t)world;
}

/*
 * Writes this rank's fm_sampler_per_rank(n, world) example indices for `epoch` into out.
 * `perm` is scratch space for n indices (the caller's, so an epoch allocates nothing).
 */
void fm_sampler_epoch(uint64_t seed, int epoch, size_t n, int rank, int world, size_t *perm,
                      size_t *out);

#endif
