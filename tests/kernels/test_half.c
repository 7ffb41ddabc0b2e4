/*
 * Half-precision conversions: the scalar definitions against independent ones written with
 * double arithmetic (every f16, and f32 inputs around every rounding boundary: ties,
 * subnormal results, overflow, NaN payloads), hand-picked edge cases, and the vector bulk
 * conversions of every ISA against the scalar ones bit for bit.
 */
#include "ktest.h"

/* f16 -> f32 by its definition: (-1)^s * 2^(e-15) * 1.m, or 2^-14 * 0.m for subnormals. */
static void check_f16_to_f32_all(void) {
  for (uint32_t h = 0; h < 65536; h++) {
    uint32_t s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    float got = bagua__f16_to_f32((uint16_t)h);
    uint32_t gb = f32_bits(got);
    if (e == 31) {
      if (m == 0) {
        ASSERT_EQ(gb, s ? 0xff800000u : 0x7f800000u);
      } else {
        /* NaN: sign and payload kept, quiet bit set. */
        ASSERT_EQ(gb, (s << 31) | 0x7fc00000u | (m << 13));
      }
      continue;
    }
    double v = e == 0 ? ldexp((double)m, -24) : ldexp((double)(1024 + m), (int)e - 25);
    float want = (float)(s ? -v : v);
    if (f32_bits(want) != gb) TEST_FAIL("f16 0x%04x -> 0x%08x, want 0x%08x", h, gb, f32_bits(want));
  }
}

/*
 * Nearest value of a binary format with `mant` stored mantissa bits, smallest normal exponent
 * `emin` and largest finite `maxf`, ties to even, computed in double: x/q is exact because q is
 * a power of two, and nearbyint rounds half to even.
 */
static double round_to_format(double x, int mant, int emin, double maxf, double inf_at) {
  if (x == 0) return x;
  int e;
  frexp(x, &e);
  e -= 1; /* x = 1.f * 2^e */
  if (e < emin) e = emin;
  double q = ldexp(1.0, e - mant);
  double r = nearbyint(x / q) * q;
  if (fabs(r) > maxf || fabs(x) >= inf_at) return x > 0 ? INFINITY : -INFINITY;
  if (r == 0) return x > 0 ? 0.0 : -0.0;
  return r;
}

static void check_one_f32(float x) {
  uint16_t h = bagua__f32_to_f16(x), b = bagua__f32_to_bf16(x);
  if (isnan(x)) {
    ASSERT_EQ(h, (f32_bits(x) >> 31) ? 0xfe00 : 0x7e00);
    ASSERT_EQ(b, (f32_bits(x) >> 16) | 0x40);
    return;
  }
  /* f16: 10 mantissa bits, emin -14, max 65504, values >= 65520 round to infinity. */
  float wh = (float)round_to_format(x, 10, -14, 65504.0, 65520.0);
  float gh = bagua__f16_to_f32(h);
  if (f32_bits(wh) != f32_bits(gh))
    TEST_FAIL("f32 0x%08x -> f16 0x%04x (= 0x%08x), want 0x%08x", f32_bits(x), h, f32_bits(gh),
              f32_bits(wh));
  /* bf16: 7 mantissa bits, emin -126, max 0x7f7f0000. */
  double maxb = (double)bits_f32(0x7f7f0000u);
  double inf_at = maxb + ldexp(1.0, 127 - 8); /* halfway to 2^128 */
  float wb = (float)round_to_format(x, 7, -126, maxb, inf_at);
  float gb = bagua__bf16_to_f32(b);
  if (f32_bits(wb) != f32_bits(gb))
    TEST_FAIL("f32 0x%08x -> bf16 0x%04x, want 0x%08x", f32_bits(x), b, f32_bits(wb));
}

/*
 * f32 inputs that cover every rounding decision: for each exponent from deep below the f16
 * subnormal range to above its overflow (and the bf16 subnormal range), random mantissas with
 * the dropped low bits set to just below, exactly at and just above the halfway point, plus
 * fully random patterns. Returned for reuse by the vector comparison.
 */
static float *boundary_inputs(size_t *count) {
  size_t cap = 1 << 20, n = 0;
  float *v = malloc(cap * sizeof(float));
  if (!v) TEST_FAIL("out of memory");
  for (int e = 0; e < 255 && n + 64 * 12 < cap; e++) {
    int interesting = (e >= 95 && e <= 145) || e < 10 || e > 250;
    int reps = interesting ? 48 : 4;
    for (int r = 0; r < reps; r++) {
      uint32_t mant = rnd32() & 0x7fffff;
      /* Bits dropped by f16: 13 for normal results, more for subnormal ones. */
      int unbiased = e - 127;
      int drop16 = unbiased >= -14 ? 13 : 13 + (-14 - unbiased);
      if (drop16 > 24) drop16 = 24;
      int drops[2] = {drop16, 16};
      for (int k = 0; k < 2; k++) {
        int d = drops[k];
        uint32_t half = d >= 24 ? 0 : 1u << (d - 1);
        uint32_t mask = d >= 23 ? 0x7fffffu : (1u << d) - 1;
        uint32_t lows[3] = {half - 1, half, half + 1};
        for (int l = 0; l < 3; l++) {
          uint32_t m = (mant & ~mask) | (lows[l] & mask);
          for (uint32_t s = 0; s < 2; s++) v[n++] = bits_f32((s << 31) | ((uint32_t)e << 23) | m);
        }
      }
    }
  }
  for (size_t i = 0; i < N_F32_SPECIAL; i++) v[n++] = bits_f32(k_f32_special[i]);
  while (n < cap) v[n++] = bits_f32(rnd32());
  *count = n;
  return v;
}

static void check_edge_cases(void) {
  struct {
    uint32_t in;
    uint16_t f16, bf16;
  } cases[] = {
      {0x477fe000u, 0x7bff, 0x4780}, /* 65504, the largest f16 */
      {0x477fefffu, 0x7bff, 0x4780}, /* just below the overflow tie */
      {0x477ff000u, 0x7c00, 0x4780}, /* 65520: tie, rounds to even = infinity */
      {0x33800000u, 0x0001, 0x3380}, /* 2^-24, the smallest f16 subnormal */
      {0x33000000u, 0x0000, 0x3300}, /* 2^-25: tie between 0 and 2^-24, to even 0 */
      {0x33000001u, 0x0001, 0x3300}, /* just above the tie */
      {0x33c00000u, 0x0002, 0x33c0}, /* 1.5 * 2^-24: tie, to even 2 */
      {0x38800000u, 0x0400, 0x3880}, /* 2^-14, the smallest f16 normal */
      {0x387fc000u, 0x03ff, 0x3880}, /* 2^-14 - 2^-24, the largest f16 subnormal */
      {0x387fe000u, 0x0400, 0x3880}, /* 2^-14 - 2^-25: ties up into the normal range */
      {0x3f801000u, 0x3c00, 0x3f80}, /* 1 + 2^-11: f16 tie to even */
      {0x3f803000u, 0x3c02, 0x3f80}, /* 1 + 3 * 2^-11: f16 tie to even (up) */
      {0x3f808000u, 0x3c04, 0x3f80}, /* 1 + 2^-8: bf16 tie to even (down) */
      {0x3f818000u, 0x3c0c, 0x3f82}, /* bf16 tie to even (up) */
      {0x7f7fffffu, 0x7c00, 0x7f80}, /* FLT_MAX overflows both */
      {0x00008000u, 0x0000, 0x0000}, /* f32 subnormal: bf16 tie to even 0 */
      {0x00018000u, 0x0000, 0x0002}, /* bf16 subnormal tie to even (up) */
      {0x80000000u, 0x8000, 0x8000}, /* -0 */
      {0x7f800000u, 0x7c00, 0x7f80}, /* inf */
      {0xff800000u, 0xfc00, 0xff80}, /* -inf */
      {0x7fc00000u, 0x7e00, 0x7fc0}, /* quiet NaN */
      {0x7f800001u, 0x7e00, 0x7fc0}, /* signalling NaN, low payload */
      {0xffa12345u, 0xfe00, 0xffe1}, /* negative signalling NaN with payload */
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    float x = bits_f32(cases[i].in);
    if (bagua__f32_to_f16(x) != cases[i].f16)
      TEST_FAIL("f16(0x%08x) = 0x%04x, want 0x%04x", cases[i].in, bagua__f32_to_f16(x),
                cases[i].f16);
    if (bagua__f32_to_bf16(x) != cases[i].bf16)
      TEST_FAIL("bf16(0x%08x) = 0x%04x, want 0x%04x", cases[i].in, bagua__f32_to_bf16(x),
                cases[i].bf16);
  }
  ASSERT_EQ(f32_bits(bagua__f16_to_f32(0x7c01)), 0x7fc02000u); /* sNaN is quieted */
  ASSERT_EQ(f32_bits(bagua__f16_to_f32(0x0001)), 0x33800000u);
  ASSERT_EQ(f32_bits(bagua__f16_to_f32(0x03ff)), 0x387fc000u);
  ASSERT_EQ(f32_bits(bagua__bf16_to_f32(0x7f81)), 0x7f810000u); /* bf16 widening is a shift */
}

static void check_vectors(const float *v, size_t n) {
  uint16_t *all = malloc(65536 * 2 + 8);
  float *f_want = malloc(65536 * 4 + 8), *f_got = malloc(65536 * 4 + 8);
  uint16_t *h_want = malloc(n * 2 + 8), *h_got = malloc(n * 2 + 8);
  if (!all || !f_want || !f_got || !h_want || !h_got) TEST_FAIL("out of memory");
  for (uint32_t i = 0; i < 65536; i++) all[i] = (uint16_t)i;
  for (size_t k = 0; k < N_SIMD_ISAS; k++) {
    const char *isa = k_simd_isas[k];
    for (int bf = 0; bf < 2; bf++) {
      const char *fmt = bf ? "bf16" : "f16";
      /* Every 16-bit pattern widened, starting at several offsets to vary the tail length. */
      for (size_t start = 0; start < 4; start++) {
        size_t m = 65536 - start;
        bagua__kernels_force_isa("scalar");
        (bf ? bagua__bf16_to_f32_n : bagua__f16_to_f32_n)(f_want, all + start, m);
        if (!use_isa(isa)) break;
        (bf ? bagua__bf16_to_f32_n : bagua__f16_to_f32_n)(f_got, all + start, m);
        for (size_t i = 0; i < m; i++)
          if (f32_bits(f_got[i]) != f32_bits(f_want[i]))
            TEST_FAIL("%s %s->f32 of 0x%04x: 0x%08x, scalar 0x%08x", isa, fmt, all[start + i],
                      f32_bits(f_got[i]), f32_bits(f_want[i]));
      }
      for (size_t start = 0; start < 4; start++) {
        size_t m = n - start;
        bagua__kernels_force_isa("scalar");
        (bf ? bagua__f32_to_bf16_n : bagua__f32_to_f16_n)(h_want, v + start, m);
        if (!use_isa(isa)) break;
        (bf ? bagua__f32_to_bf16_n : bagua__f32_to_f16_n)(h_got, v + start, m);
        for (size_t i = 0; i < m; i++)
          if (h_got[i] != h_want[i])
            TEST_FAIL("%s f32->%s of 0x%08x: 0x%04x, scalar 0x%04x", isa, fmt,
                      f32_bits(v[start + i]), h_got[i], h_want[i]);
      }
    }
  }
  bagua__kernels_force_isa(NULL);
  free(all);
  free(f_want);
  free(f_got);
  free(h_want);
  free(h_got);
}

int main(void) {
  check_f16_to_f32_all();
  check_edge_cases();
  size_t n;
  float *v = boundary_inputs(&n);
  for (size_t i = 0; i < n; i++) check_one_f32(v[i]);
  check_vectors(v, n);
  free(v);
  printf("half conversions: %zu f32 inputs and all 65536 f16/bf16 patterns checked\n", n);
  return 0;
}
