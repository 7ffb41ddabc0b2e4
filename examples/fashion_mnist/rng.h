/*
 * Deterministic pseudo-random numbers for the Fashion-MNIST example: xoshiro256** seeded
 * through splitmix64. Every rank seeds its generators from --seed alone, so the initial
 * parameters and the per-epoch shuffle are identical everywhere without any communication.
 * Only integer arithmetic is used, so the sequence does not depend on the CPU or compiler.
 */
#ifndef FM_RNG_H
#define FM_RNG_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
  uint64_t s[4];
} fm_rng_t;

static inline uint64_t fm_splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/* Seeds a generator from a seed and a stream number (e.g. the epoch), so streams differ. */
static inline void fm_rng_seed(fm_rng_t *r, uint64_t seed, uint64_t stream) {
  uint64_t x = seed ^ (stream * 0xd1342543de82ef95ULL);
  for (int i = 0; i < 4; i++) r->s[i] = fm_splitmix64(&x);
}

static inline uint64_t fm_rng_next(fm_rng_t *r) {
  uint64_t *s = r->s;
  uint64_t x = s[1] * 5;
  uint64_t result = ((x << 7) | (x >> 57)) * 9;
  uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = (s[3] << 45) | (s[3] >> 19);
  return result;
}

/* Uniform in [0, 1) with 24 random bits, exactly representable as a float. */
static inline float fm_rng_uniform(fm_rng_t *r) {
  return (float)(fm_rng_next(r) >> 40) * (1.0f / 16777216.0f);
}

/* Uniform integer in [0, n); the multiply-shift bias is below n / 2^64, far under noise. */
static inline size_t fm_rng_below(fm_rng_t *r, size_t n) {
  return (size_t)(((unsigned __int128)fm_rng_next(r) * n) >> 64);
}

#endif
