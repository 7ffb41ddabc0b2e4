/*
 * Scalar reduction kernels: the reference every SIMD variant is tested against. Loads and
 * stores go through memcpy so that unaligned buffers are well defined; compilers turn these
 * into plain moves.
 */
#include <string.h>

#include "../kernels.h"

#define DEFINE_REDUCE(suffix, T, LOAD, STORE)                                                 \
  static void reduce_##suffix(bagua_op_t op, unsigned char *d, const unsigned char *a,        \
                              const unsigned char *b, size_t n) {                             \
    for (size_t i = 0; i < n; i++) {                                                          \
      T x = LOAD(a + i * sizeof_##suffix), y = LOAD(b + i * sizeof_##suffix), r;              \
      switch (op) {                                                                           \
        case BAGUA_MIN:                                                                       \
          r = y < x ? y : x;                                                                  \
          break;                                                                              \
        case BAGUA_MAX:                                                                       \
          r = y > x ? y : x;                                                                  \
          break;                                                                              \
        default:                                                                              \
          r = x + y;                                                                          \
          break;                                                                              \
      }                                                                                       \
      STORE(d + i * sizeof_##suffix, r);                                                      \
    }                                                                                         \
  }

#define LOADER(name, T) \
  static inline T name(const unsigned char *p) { \
    T v;                                         \
    memcpy(&v, p, sizeof(T));                    \
    return v;                                    \
  }
#define STORER(name, T) \
  static inline void name(unsigned char *p, T v) { memcpy(p, &v, sizeof(T)); }

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

static inline float ld_f16(const unsigned char *p) { return bagua__f16_to_f32(ld_u16(p)); }
static inline void st_f16(unsigned char *p, float v) { st_u16(p, bagua__f32_to_f16(v)); }
static inline float ld_bf16(const unsigned char *p) { return bagua__bf16_to_f32(ld_u16(p)); }
static inline void st_bf16(unsigned char *p, float v) { st_u16(p, bagua__f32_to_bf16(v)); }

enum {
  sizeof_f32 = 4,
  sizeof_f64 = 8,
  sizeof_i32 = 4,
  sizeof_i64 = 8,
  sizeof_u8 = 1,
  sizeof_f16 = 2,
  sizeof_bf16 = 2
};

DEFINE_REDUCE(f32, float, ld_f32, st_f32)
DEFINE_REDUCE(f64, double, ld_f64, st_f64)
DEFINE_REDUCE(i32, int32_t, ld_i32, st_i32)
DEFINE_REDUCE(i64, int64_t, ld_i64, st_i64)
DEFINE_REDUCE(f16, float, ld_f16, st_f16)
DEFINE_REDUCE(bf16, float, ld_bf16, st_bf16)

/* u8 sums wrap modulo 256, like every other unsigned byte reduction (NCCL, MPI). */
static void reduce_u8(bagua_op_t op, unsigned char *d, const unsigned char *a,
                      const unsigned char *b, size_t n) {
  for (size_t i = 0; i < n; i++) {
    uint8_t x = a[i], y = b[i];
    d[i] = op == BAGUA_MIN ? (y < x ? y : x) : op == BAGUA_MAX ? (y > x ? y : x) : (uint8_t)(x + y);
  }
}

void bagua__reduce_out_scalar(bagua_dtype_t dt, bagua_op_t op, void *dst, const void *a,
                              const void *b, size_t n) {
  unsigned char *d = dst;
  const unsigned char *x = a, *y = b;
  switch (dt) {
    case BAGUA_F32: reduce_f32(op, d, x, y, n); break;
    case BAGUA_F64: reduce_f64(op, d, x, y, n); break;
    case BAGUA_I32: reduce_i32(op, d, x, y, n); break;
    case BAGUA_I64: reduce_i64(op, d, x, y, n); break;
    case BAGUA_U8: reduce_u8(op, d, x, y, n); break;
    case BAGUA_F16: reduce_f16(op, d, x, y, n); break;
    case BAGUA_BF16: reduce_bf16(op, d, x, y, n); break;
    default: break;
  }
}

void bagua__div_scalar(bagua_dtype_t dt, void *buf, size_t n, int divisor) {
  unsigned char *p = buf;
  if (divisor == 1) return;
  for (size_t i = 0; i < n; i++) {
    switch (dt) {
      case BAGUA_F32: st_f32(p + 4 * i, ld_f32(p + 4 * i) / (float)divisor); break;
      case BAGUA_F64: st_f64(p + 8 * i, ld_f64(p + 8 * i) / (double)divisor); break;
      case BAGUA_I32: st_i32(p + 4 * i, ld_i32(p + 4 * i) / divisor); break;
      case BAGUA_I64: st_i64(p + 8 * i, ld_i64(p + 8 * i) / divisor); break;
      case BAGUA_U8: p[i] = (uint8_t)(p[i] / divisor); break;
      case BAGUA_F16: st_f16(p + 2 * i, ld_f16(p + 2 * i) / (float)divisor); break;
      case BAGUA_BF16: st_bf16(p + 2 * i, ld_bf16(p + 2 * i) / (float)divisor); break;
      default: break;
    }
  }
}
