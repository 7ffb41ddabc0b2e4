/*
 * Scalar half-precision conversions: the definition every vector conversion must match.
 * f32 -> f16 and f32 -> bf16 round to nearest even; f16 -> f32 is exact and quiets a
 * signalling NaN; bf16 -> f32 is a plain shift.
 */
#include <string.h>

#include "../kernels.h"

float bagua__f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t man = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {
      /* Subnormal: normalise the mantissa into an f32 normal number. */
      int e = -1;
      do {
        e++;
        man <<= 1;
      } while ((man & 0x400) == 0);
      bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ff) << 13);
    }
  } else if (exp == 0x1f) {
    /* Infinity, or NaN made quiet like the F16C/AVX-512 conversion instructions do, so the
     * scalar and vector paths agree bit for bit (the payload is kept). */
    bits = sign | 0x7f800000u | (man << 13) | (man ? 0x400000u : 0);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

uint16_t bagua__f32_to_f16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000;
  uint32_t absx = x & 0x7fffffffu;
  if (absx > 0x7f800000u) return (uint16_t)(sign | 0x7e00);  /* NaN */
  if (absx >= 0x477ff000u) return (uint16_t)(sign | 0x7c00); /* overflow to inf */
  if (absx < 0x38800000u) {
    /* Result is subnormal or zero: shift with round-to-nearest-even. */
    if (absx < 0x33000000u) return (uint16_t)sign;
    uint32_t man = (absx & 0x7fffff) | 0x800000;
    int shift = 126 - (int)(absx >> 23); /* value = man * 2^(E-150) = r * 2^-24 */
    uint32_t half = 1u << (shift - 1);
    uint32_t rem = man & ((1u << shift) - 1);
    uint32_t r = man >> shift;
    if (rem > half || (rem == half && (r & 1))) r++;
    return (uint16_t)(sign | r);
  }
  uint32_t r = absx - 0x38000000u; /* rebias exponent from 127 to 15 */
  uint32_t rem = r & 0x1fff;
  r >>= 13;
  if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) r++;
  return (uint16_t)(sign | r);
}

float bagua__bf16_to_f32(uint16_t h) {
  uint32_t bits = (uint32_t)h << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

uint16_t bagua__f32_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40); /* quiet NaN */
  x += 0x7fffu + ((x >> 16) & 1);
  return (uint16_t)(x >> 16);
}
