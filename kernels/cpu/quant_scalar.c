/*
 * Scalar MinMaxUInt8 kernels over one chunk: the reference for the vector versions. The
 * chunk layout (header, padding, several chunks) is handled once in dispatch.c; these only
 * scan, quantize and dequantize flat element ranges.
 *
 * Every step is written so that the vector code can reproduce it exactly with min/max
 * instructions whose NaN behaviour is `a < b ? a : b`:
 *  - min and max start at +inf and -inf and ignore NaN (a NaN never compares less or
 *    greater), so the result does not depend on the scan order (the caller turns -0 into +0,
 *    the one remaining order dependence);
 *  - q = clamp(min(rint(x*scale), upper) - lower, 0, 255), where the clamps are ordered so
 *    that NaN maps to a fixed value (a NaN element meets `t < upper ? t : upper` and becomes
 *    upper; a NaN difference meets `r < 255 ? r : 255` and becomes 255). Even garbage input
 *    gives the same bytes on every ISA, and no out-of-range float-to-integer conversion
 *    (undefined behaviour in C) can happen.
 */
#include <math.h>
#include <string.h>

#include "internal.h"

static inline float load_elem(bagua_dtype_t dt, const unsigned char *p, size_t i) {
  uint16_t h;
  float f;
  switch (dt) {
    case BAGUA_F16:
      memcpy(&h, p + 2 * i, 2);
      return bagua__f16_to_f32(h);
    case BAGUA_BF16:
      memcpy(&h, p + 2 * i, 2);
      return bagua__bf16_to_f32(h);
    default:
      memcpy(&f, p + 4 * i, 4);
      return f;
  }
}

static inline void store_elem(bagua_dtype_t dt, unsigned char *p, size_t i, float v) {
  uint16_t h;
  switch (dt) {
    case BAGUA_F16:
      h = bagua__f32_to_f16(v);
      memcpy(p + 2 * i, &h, 2);
      break;
    case BAGUA_BF16:
      h = bagua__f32_to_bf16(v);
      memcpy(p + 2 * i, &h, 2);
      break;
    default:
      memcpy(p + 4 * i, &v, 4);
      break;
  }
}

void bagua__minmax_scalar(bagua_dtype_t dt, const void *in, size_t n, float *mn, float *mx) {
  float lo = INFINITY, hi = -INFINITY;
  for (size_t i = 0; i < n; i++) {
    float x = load_elem(dt, in, i);
    lo = x < lo ? x : lo;
    hi = x > hi ? x : hi;
  }
  *mn = lo;
  *mx = hi;
}

void bagua__quantize_scalar(bagua_dtype_t dt, const void *in, size_t n, float scale, float upper,
                            float lower, uint8_t *q) {
  for (size_t i = 0; i < n; i++) {
    float t = rintf(load_elem(dt, in, i) * scale);
    t = t < upper ? t : upper;
    float r = t - lower;
    r = r < 255.0f ? r : 255.0f; /* NaN becomes 255 here */
    /* r is integral; the vector code saturates at 0 while packing to bytes. */
    q[i] = r > 0.0f ? (uint8_t)(int)r : 0;
  }
}

void bagua__dequantize_scalar(bagua_dtype_t dt, const uint8_t *q, size_t n, float scale,
                              float lower, void *out) {
  for (size_t i = 0; i < n; i++) store_elem(dt, out, i, ((float)q[i] + lower) / scale);
}

void bagua__dequantize_add_scalar(const uint8_t *q, size_t n, float scale, float lower,
                                  float *acc) {
  for (size_t i = 0; i < n; i++) acc[i] = acc[i] + ((float)q[i] + lower) / scale;
}
