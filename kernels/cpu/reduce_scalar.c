/*
 * Scalar reduction, division and conversion kernels: the reference every SIMD variant is
 * tested against, and the implementation used on CPUs without AVX2. Loads and stores go
 * through memcpy so that unaligned buffers are well defined; compilers turn these into plain
 * moves.
 *
 * Semantics the vector code reproduces exactly:
 *  - min is `y < x ? y : x` and max is `y > x ? y : x` with x from a and y from b, so a NaN in
 *    b never wins and a NaN in a always does (this is what x86 minps/maxps do with the
 *    operands in that order);
 *  - a float sum with a NaN input returns that NaN, quieted; with two, a's;
 *  - integer sums wrap modulo 2^bits (computed in unsigned arithmetic, never signed overflow);
 *  - f16/bf16 are widened to f32, combined in f32 and rounded back to nearest even; a NaN
 *    result is stored as the canonical quiet NaN of that format with its sign kept.
 */
#include <string.h>

#include "internal.h"

#define LOADER(name, T)                          \
  static inline T name(const unsigned char *p) { \
    T v;                                         \
    memcpy(&v, p, sizeof(T));                    \
    return v;                                    \
  }
#define STORER(name, T)                            \
  static inline void name(unsigned char *p, T v) { \
    memcpy(p, &v, sizeof(T));                      \
  }

LOADER(ld_f32, float)
LOADER(ld_f64, double)
LOADER(ld_i32, int32_t)
LOADER(ld_i64, int64_t)
LOADER(ld_u8, uint8_t)
LOADER(ld_u16, uint16_t)
STORER(st_f32, float)
STORER(st_f64, double)
STORER(st_i32, int32_t)
STORER(st_i64, int64_t)
STORER(st_u8, uint8_t)
STORER(st_u16, uint16_t)

static inline float ld_f16(const unsigned char *p) {
  return bagua__f16_to_f32(ld_u16(p));
}
static inline void st_f16(unsigned char *p, float v) {
  st_u16(p, bagua__f32_to_f16(v));
}
static inline float ld_bf16(const unsigned char *p) {
  return bagua__bf16_to_f32(ld_u16(p));
}
static inline void st_bf16(unsigned char *p, float v) {
  st_u16(p, bagua__f32_to_bf16(v));
}

enum {
  sizeof_f32 = 4,
  sizeof_f64 = 8,
  sizeof_i32 = 4,
  sizeof_i64 = 8,
  sizeof_u8 = 1,
  sizeof_f16 = 2,
  sizeof_bf16 = 2
};

/*
 * Element combiners. The integer sums go through the unsigned type so overflow wraps. When
 * both float inputs are NaN, C leaves open which payload `x + y` returns (x86 returns its first
 * source operand, and the compiler may swap the operands), so the oracle pins it to a's NaN,
 * which is what the vector addps(a, b) returns.
 */
#define ADD_FLOAT(T, x, y) ((x) != (x) ? (x) + (x) : (x) + (y))
#define ADD_WRAP_i32(T, x, y) ((T)((uint32_t)(x) + (uint32_t)(y)))
#define ADD_WRAP_i64(T, x, y) ((T)((uint64_t)(x) + (uint64_t)(y)))
#define ADD_WRAP_u8(T, x, y) ((T)((x) + (y)))
#define MIN_ELEM(T, x, y) ((y) < (x) ? (y) : (x))
#define MAX_ELEM(T, x, y) ((y) > (x) ? (y) : (x))

#define DEFINE_BINARY(name, suffix, T, LOAD, STORE, COMBINE)                    \
  static void name(void *dst, const void *a, const void *b, size_t n) {         \
    unsigned char *d = dst;                                                     \
    const unsigned char *pa = a, *pb = b;                                       \
    for (size_t i = 0; i < n; i++) {                                            \
      T x = LOAD(pa + i * sizeof_##suffix), y = LOAD(pb + i * sizeof_##suffix); \
      STORE(d + i * sizeof_##suffix, COMBINE(T, x, y));                         \
    }                                                                           \
  }

#define DEFINE_REDUCE(suffix, T, LOAD, STORE, ADD)              \
  DEFINE_BINARY(sum_##suffix, suffix, T, LOAD, STORE, ADD)      \
  DEFINE_BINARY(min_##suffix, suffix, T, LOAD, STORE, MIN_ELEM) \
  DEFINE_BINARY(max_##suffix, suffix, T, LOAD, STORE, MAX_ELEM)

DEFINE_REDUCE(f32, float, ld_f32, st_f32, ADD_FLOAT)
DEFINE_REDUCE(f64, double, ld_f64, st_f64, ADD_FLOAT)
DEFINE_REDUCE(i32, int32_t, ld_i32, st_i32, ADD_WRAP_i32)
DEFINE_REDUCE(i64, int64_t, ld_i64, st_i64, ADD_WRAP_i64)
DEFINE_REDUCE(u8, uint8_t, ld_u8, st_u8, ADD_WRAP_u8)
DEFINE_REDUCE(f16, float, ld_f16, st_f16, ADD_FLOAT)
DEFINE_REDUCE(bf16, float, ld_bf16, st_bf16, ADD_FLOAT)

void bagua__reduce_out_scalar(bagua_dtype_t dt, bagua_op_t op, void *dst, const void *a,
                              const void *b, size_t n) {
  if ((unsigned)dt >= BAGUA_DTYPE__COUNT) return;
  bagua__kernels_scalar_table.reduce[dt][kop_index(op)](dst, a, b, n);
}

void bagua__div_scalar(bagua_dtype_t dt, void *buf, size_t n, int divisor) {
  unsigned char *p = buf;
  if (divisor == 1) return;
  for (size_t i = 0; i < n; i++) {
    switch (dt) {
      case BAGUA_F32:
        st_f32(p + 4 * i, ld_f32(p + 4 * i) / (float)divisor);
        break;
      case BAGUA_F64:
        st_f64(p + 8 * i, ld_f64(p + 8 * i) / (double)divisor);
        break;
      case BAGUA_I32:
        st_i32(p + 4 * i, ld_i32(p + 4 * i) / divisor);
        break;
      case BAGUA_I64:
        st_i64(p + 8 * i, ld_i64(p + 8 * i) / divisor);
        break;
      case BAGUA_U8:
        p[i] = (uint8_t)(p[i] / divisor);
        break;
      case BAGUA_F16:
        st_f16(p + 2 * i, ld_f16(p + 2 * i) / (float)divisor);
        break;
      case BAGUA_BF16:
        st_bf16(p + 2 * i, ld_bf16(p + 2 * i) / (float)divisor);
        break;
      default:
        return;
    }
  }
}

static void f16_to_f32_scalar(float *dst, const uint16_t *src, size_t n) {
  for (size_t i = 0; i < n; i++) dst[i] = bagua__f16_to_f32(src[i]);
}
static void f32_to_f16_scalar(uint16_t *dst, const float *src, size_t n) {
  for (size_t i = 0; i < n; i++) dst[i] = bagua__f32_to_f16(src[i]);
}
static void bf16_to_f32_scalar(float *dst, const uint16_t *src, size_t n) {
  for (size_t i = 0; i < n; i++) dst[i] = bagua__bf16_to_f32(src[i]);
}
static void f32_to_bf16_scalar(uint16_t *dst, const float *src, size_t n) {
  for (size_t i = 0; i < n; i++) dst[i] = bagua__f32_to_bf16(src[i]);
}

#define REDUCE_ROW(suffix) \
  { sum_##suffix, min_##suffix, max_##suffix }

const bagua__kernel_table_t bagua__kernels_scalar_table = {
    .name = "scalar",
    .reduce =
        {
            [BAGUA_F32] = REDUCE_ROW(f32),
            [BAGUA_F16] = REDUCE_ROW(f16),
            [BAGUA_BF16] = REDUCE_ROW(bf16),
            [BAGUA_F64] = REDUCE_ROW(f64),
            [BAGUA_I32] = REDUCE_ROW(i32),
            [BAGUA_I64] = REDUCE_ROW(i64),
            [BAGUA_U8] = REDUCE_ROW(u8),
        },
    .div = bagua__div_scalar,
    .f16_to_f32 = f16_to_f32_scalar,
    .f32_to_f16 = f32_to_f16_scalar,
    .bf16_to_f32 = bf16_to_f32_scalar,
    .f32_to_bf16 = f32_to_bf16_scalar,
    .minmax = bagua__minmax_scalar,
    .quantize = bagua__quantize_scalar,
    .dequantize = bagua__dequantize_scalar,
    .dequantize_add = bagua__dequantize_add_scalar,
    .axpy = bagua__axpy_scalar,
    .scale = bagua__scale_scalar,
    .sgd = bagua__sgd_scalar,
    .adam = bagua__adam_scalar,
};
