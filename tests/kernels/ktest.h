/*
 * Shared helpers for the kernel tests: a deterministic random generator, value generators
 * that mix ordinary numbers with the awkward ones (NaN with payloads, infinities, subnormals,
 * signed zeros, integer extremes), guarded buffers at chosen byte offsets, and the list of
 * vector implementations to compare with the scalar oracle.
 */
#ifndef BAGUA_TESTS_KERNELS_KTEST_H
#define BAGUA_TESTS_KERNELS_KTEST_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "tests/test.h"

static const char *const k_simd_isas[] = {"avx2", "avx512", "avx512zmm"};
#define N_SIMD_ISAS (sizeof(k_simd_isas) / sizeof(k_simd_isas[0]))

/* Element counts around every vector width and unroll boundary, plus one large odd count. */
static const size_t k_counts[] = {0,  1,  2,  3,  7,   15,  16,  17,   31,
                                  33, 63, 64, 65, 129, 255, 257, 1000, 1000003};
#define N_COUNTS (sizeof(k_counts) / sizeof(k_counts[0]))

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;

static inline uint64_t rnd64(void) {
  /* xorshift64*: enough for test data, and the same sequence on every run. */
  g_rng ^= g_rng >> 12;
  g_rng ^= g_rng << 25;
  g_rng ^= g_rng >> 27;
  return g_rng * 0x2545f4914f6cdd1dull;
}
static inline uint32_t rnd32(void) {
  return (uint32_t)(rnd64() >> 32);
}
/* Uniform in [lo, hi). */
static inline float rnd_uniform(float lo, float hi) {
  return lo + (hi - lo) * (float)(rnd32() >> 8) * (1.0f / 16777216.0f);
}

static inline uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
static inline float bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static const uint32_t k_f32_special[] = {
    0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00000u,
    0x7f800001u, 0x7fa00000u, 0xffc12345u, 0x00000001u, 0x80000001u, 0x007fffffu,
    0x00800000u, 0x7f7fffffu, 0xff7fffffu, 0x3f800000u, 0x477ff000u, 0x33000000u,
    0x38800000u, 0x3f808000u, 0x3f818000u, 0x00008000u, 0x00018000u};
#define N_F32_SPECIAL (sizeof(k_f32_special) / sizeof(k_f32_special[0]))

static inline float rnd_f32_any(void) {
  uint32_t r = rnd32() & 15;
  if (r == 0) return bits_f32(rnd32());
  if (r == 1) return bits_f32(k_f32_special[rnd32() % N_F32_SPECIAL]);
  if (r == 2) return (float)(int)(rnd32() % 7) - 3.0f; /* small integers: many equal pairs */
  return rnd_uniform(-100.0f, 100.0f);
}

static inline double rnd_f64_any(void) {
  uint32_t r = rnd32() & 15;
  double d;
  if (r == 0) {
    uint64_t u = rnd64();
    memcpy(&d, &u, 8);
    return d;
  }
  if (r == 1) {
    static const double sp[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, -NAN, 4.9e-324, 1e308};
    return sp[rnd32() % 8];
  }
  if (r == 2) return (double)(int)(rnd32() % 7) - 3.0;
  return (double)rnd_uniform(-100.0f, 100.0f) * 1.000000001;
}

/* Fills n elements of dt at p (any alignment) with the mixes above. */
static inline void fill_random(bagua_dtype_t dt, void *p, size_t n) {
  unsigned char *b = p;
  for (size_t i = 0; i < n; i++) {
    switch (dt) {
      case BAGUA_F32: {
        float f = rnd_f32_any();
        memcpy(b + 4 * i, &f, 4);
        break;
      }
      case BAGUA_F64: {
        double d = rnd_f64_any();
        memcpy(b + 8 * i, &d, 8);
        break;
      }
      case BAGUA_F16:
      case BAGUA_BF16: {
        uint16_t h;
        uint32_t r = rnd32() & 3;
        if (r == 0)
          h = (uint16_t)rnd32();
        else if (dt == BAGUA_F16)
          h = bagua__f32_to_f16(rnd_f32_any());
        else
          h = bagua__f32_to_bf16(rnd_f32_any());
        memcpy(b + 2 * i, &h, 2);
        break;
      }
      case BAGUA_I32: {
        static const int32_t sp[] = {INT32_MIN, INT32_MAX, -1, 0, 1};
        int32_t v = (rnd32() & 7) == 0 ? sp[rnd32() % 5] : (int32_t)rnd32();
        memcpy(b + 4 * i, &v, 4);
        break;
      }
      case BAGUA_I64: {
        static const int64_t sp[] = {INT64_MIN, INT64_MAX, -1, 0, 1};
        int64_t v = (rnd32() & 7) == 0 ? sp[rnd32() % 5] : (int64_t)rnd64();
        memcpy(b + 8 * i, &v, 8);
        break;
      }
      case BAGUA_U8:
        b[i] = (unsigned char)rnd32();
        break;
      default:
        break;
    }
  }
}

/*
 * A buffer of `bytes` usable bytes starting `off` bytes past a 64-byte boundary, followed by
 * guard bytes that a kernel must never touch (ASan cannot see an overrun that stays inside
 * the allocation).
 */
enum { GUARD = 96, GUARD_BYTE = 0xa5 };
typedef struct {
  unsigned char *base, *p;
  size_t bytes;
} gbuf_t;

static inline gbuf_t gbuf_new(size_t bytes, size_t off) {
  gbuf_t g;
  g.base = aligned_alloc(64, ((64 + bytes + GUARD) + 63) & ~(size_t)63);
  if (!g.base) TEST_FAIL("out of memory");
  g.p = g.base + off;
  g.bytes = bytes;
  memset(g.base, GUARD_BYTE, off);
  memset(g.p + bytes, GUARD_BYTE, GUARD);
  return g;
}

static inline void gbuf_check(const gbuf_t *g, const char *what) {
  for (unsigned char *q = g->base; q < g->p; q++)
    if (*q != GUARD_BYTE) TEST_FAIL("%s: byte written before the buffer", what);
  for (size_t i = 0; i < GUARD; i++)
    if (g->p[g->bytes + i] != GUARD_BYTE) TEST_FAIL("%s: byte %zu past the end written", what, i);
}

static inline void gbuf_free(gbuf_t *g) {
  free(g->base);
}

static inline int is_nan_elem(bagua_dtype_t dt, const unsigned char *p) {
  uint16_t h;
  float f;
  double d;
  switch (dt) {
    case BAGUA_F32:
      memcpy(&f, p, 4);
      return isnan(f);
    case BAGUA_F64:
      memcpy(&d, p, 8);
      return isnan(d);
    case BAGUA_F16:
      memcpy(&h, p, 2);
      return (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
    case BAGUA_BF16:
      memcpy(&h, p, 2);
      return (h & 0x7f80) == 0x7f80 && (h & 0x7f);
    default:
      return 0;
  }
}

/* Switches the process to `isa`; returns 0 (after a note) when this CPU lacks it. */
static inline int use_isa(const char *isa) {
  if (bagua__kernels_force_isa(isa) == 0) return 1;
  static int noted[8];
  int idx = strcmp(isa, "avx2") == 0 ? 0 : strcmp(isa, "avx512") == 0 ? 1 : 2;
  if (!noted[idx]) printf("note: %s not available on this CPU, not compared\n", isa);
  noted[idx] = 1;
  return 0;
}

#endif
