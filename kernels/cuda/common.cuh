/*
 * Shared by the .cu files of kernels/cuda: element types, half-precision conversions and NaN
 * rules that reproduce the CPU oracle bit for bit, block reductions, and the host-side helpers
 * that check a launch and size a grid. Private to kernels/cuda.
 *
 * The code is C-like CUDA C++: templates only where the element type must be a compile-time
 * constant (one kernel per dtype), no classes, no exceptions, no standard library.
 */
#ifndef BAGUA_KERNELS_CUDA_COMMON_CUH
#define BAGUA_KERNELS_CUDA_COMMON_CUH

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "cuda_kernels.h"

extern "C" {
/* log.h has no C++ guard; its functions are defined in C. */
#include "common/log.h"
}

/* ---------------------------------------------------------------------------------------- */
/* Host helpers (common.cu)                                                                 */
/* ---------------------------------------------------------------------------------------- */

/* BAGUA_OK, or BAGUA_ERR_CUDA with a warning naming `what` when the last launch failed. */
bagua_status_t bagua__cuda_check_launch(const char *what);
/* BAGUA_OK for cudaSuccess, else BAGUA_ERR_CUDA with a warning naming `what`. */
bagua_status_t bagua__cuda_status(cudaError_t e, const char *what);
/* Blocks of `block` threads for `items` work items, one item per thread, capped at `cap`
 * (the kernels loop over the rest) and at least 1. */
unsigned bagua__cuda_blocks(size_t items, unsigned block, unsigned cap);

/* Element size of a dtype accepted by MinMaxUInt8 (F32, F16, BF16); 0 otherwise. */
static inline size_t bg_quant_elem_size(bagua_dtype_t dt) {
  return dt == BAGUA_F32 ? 4 : (dt == BAGUA_F16 || dt == BAGUA_BF16) ? 2 : 0;
}

static __host__ __device__ __forceinline__ int bg_misaligned(const void *p, size_t align) {
  return ((uintptr_t)p & (align - 1)) != 0;
}

/* ---------------------------------------------------------------------------------------- */
/* NaN rules of the x86 CPU oracle                                                          */
/* ---------------------------------------------------------------------------------------- */

/*
 * An NVIDIA GPU returns the canonical NaN 0x7fffffff from any arithmetic with a NaN result,
 * whereas SSE returns the NaN operand made quiet (the first one if both are NaN) and, for an
 * invalid operation on numbers (inf - inf, 0 * inf, 0 / 0), the "default NaN" 0xffc00000. The
 * CPU contract pins those payloads for the reductions and MinMaxUInt8, so the device code
 * computes the ordinary result and, only on the rare NaN path, picks the NaN x86 would have.
 * Finite results are untouched, so this costs one compare per operation.
 */
#define BG_X86_DEFAULT_NAN_F32 0xffc00000u
#define BG_X86_DEFAULT_NAN_F64 0xfff8000000000000ull

static __device__ __forceinline__ float bg_x86_nan_f32(float a, float b) {
  if (a != a) return __uint_as_float(__float_as_uint(a) | 0x00400000u);
  if (b != b) return __uint_as_float(__float_as_uint(b) | 0x00400000u);
  return __uint_as_float(BG_X86_DEFAULT_NAN_F32);
}

static __device__ __forceinline__ double bg_x86_nan_f64(double a, double b) {
  if (a != a)
    return __longlong_as_double(__double_as_longlong(a) | (long long)0x0008000000000000ull);
  if (b != b)
    return __longlong_as_double(__double_as_longlong(b) | (long long)0x0008000000000000ull);
  return __longlong_as_double((long long)BG_X86_DEFAULT_NAN_F64);
}

static __device__ __forceinline__ float bg_x86_add(float a, float b) {
  float r = a + b;
  return r == r ? r : bg_x86_nan_f32(a, b);
}
static __device__ __forceinline__ float bg_x86_sub(float a, float b) {
  float r = a - b;
  return r == r ? r : bg_x86_nan_f32(a, b);
}
static __device__ __forceinline__ float bg_x86_mul(float a, float b) {
  float r = a * b;
  return r == r ? r : bg_x86_nan_f32(a, b);
}
static __device__ __forceinline__ float bg_x86_div(float a, float b) {
  float r = a / b;
  return r == r ? r : bg_x86_nan_f32(a, b);
}
/* glibc's rintf and SSE4.1 roundss both return a NaN argument quieted, payload kept. */
static __device__ __forceinline__ float bg_x86_rint(float a) {
  return a == a ? rintf(a) : bg_x86_nan_f32(a, a);
}
static __device__ __forceinline__ double bg_x86_add_f64(double a, double b) {
  double r = a + b;
  return r == r ? r : bg_x86_nan_f64(a, b);
}
static __device__ __forceinline__ double bg_x86_div_f64(double a, double b) {
  double r = a / b;
  return r == r ? r : bg_x86_nan_f64(a, b);
}

/* ---------------------------------------------------------------------------------------- */
/* Half-precision conversions identical to kernels/cpu/half.c                               */
/* ---------------------------------------------------------------------------------------- */

/*
 * The hardware conversions round to nearest even and handle subnormals, overflow and zeros
 * exactly like the CPU code; they differ only for NaN, where the GPU returns a canonical NaN.
 * So NaN takes the CPU's rule explicitly: f16 -> f32 keeps the payload and sets the quiet bit,
 * f32 -> f16 gives 0x7e00 with the sign kept, and bf16 is done entirely with integer
 * operations (they are as cheap as the conversion instruction).
 */
static __device__ __forceinline__ float bg_f16_to_f32(uint16_t h) {
  if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0)
    return __uint_as_float(((uint32_t)(h & 0x8000u) << 16) | 0x7fc00000u |
                           ((uint32_t)(h & 0x3ffu) << 13));
  return __half2float(__ushort_as_half(h));
}

static __device__ __forceinline__ uint16_t bg_f32_to_f16(float f) {
  uint32_t x = __float_as_uint(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)(((x >> 16) & 0x8000u) | 0x7e00u);
  return __half_as_ushort(__float2half_rn(f));
}

static __device__ __forceinline__ float bg_bf16_to_f32(uint16_t h) {
  return __uint_as_float((uint32_t)h << 16);
}

static __device__ __forceinline__ uint16_t bg_f32_to_bf16(float f) {
  uint32_t x = __float_as_uint(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return (uint16_t)(x >> 16);
}

/* ---------------------------------------------------------------------------------------- */
/* Element types                                                                            */
/* ---------------------------------------------------------------------------------------- */

/*
 * bg_dt<DT>: S is how an element is stored, C the type it is combined in, ld/st convert
 * between them (f16 and bf16 are combined in f32 and rounded back on every store).
 */
template <int DT>
struct bg_dt;

#define BG_DT(dt, s_type, c_type, load, store)                    \
  template <>                                                     \
  struct bg_dt<dt> {                                              \
    typedef s_type S;                                             \
    typedef c_type C;                                             \
    static __device__ __forceinline__ C ld(S v) { return load; }  \
    static __device__ __forceinline__ S st(C v) { return store; } \
  };

BG_DT(BAGUA_F32, float, float, v, v)
BG_DT(BAGUA_F16, uint16_t, float, bg_f16_to_f32(v), bg_f32_to_f16(v))
BG_DT(BAGUA_BF16, uint16_t, float, bg_bf16_to_f32(v), bg_f32_to_bf16(v))
BG_DT(BAGUA_F64, double, double, v, v)
BG_DT(BAGUA_I32, int32_t, int32_t, v, v)
BG_DT(BAGUA_I64, int64_t, int64_t, v, v)
BG_DT(BAGUA_U8, uint8_t, uint8_t, v, v)
#undef BG_DT

/* 16 bytes viewed as elements: the unit of the wide loads and stores. */
template <typename S>
union bg_pack {
  uint4 u;
  S v[16 / sizeof(S)];
};

/* ---------------------------------------------------------------------------------------- */
/* Block reduction                                                                          */
/* ---------------------------------------------------------------------------------------- */

/*
 * Min and max over the block; the result is valid in thread 0. blockDim.x must be a multiple
 * of 32. fminf/fmaxf ignore a NaN operand exactly like the CPU's `x < lo ? x : lo`, and the
 * inputs are never NaN here; they may keep -0 where the CPU keeps +0 (or the reverse), which
 * the header then erases by storing min + 0 and max + 0. Contains __syncthreads(); callers
 * that use it in a loop must synchronise again before the next use.
 */
static __device__ __forceinline__ void bg_block_minmax(float *lo, float *hi) {
  __shared__ float s_lo[32], s_hi[32];
  float l = *lo, h = *hi;
  for (int o = 16; o > 0; o >>= 1) {
    l = fminf(l, __shfl_xor_sync(0xffffffffu, l, o));
    h = fmaxf(h, __shfl_xor_sync(0xffffffffu, h, o));
  }
  int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nwarps = blockDim.x >> 5;
  if (lane == 0) {
    s_lo[warp] = l;
    s_hi[warp] = h;
  }
  __syncthreads();
  if (warp == 0) {
    l = lane < nwarps ? s_lo[lane] : INFINITY;
    h = lane < nwarps ? s_hi[lane] : -INFINITY;
    for (int o = 16; o > 0; o >>= 1) {
      l = fminf(l, __shfl_xor_sync(0xffffffffu, l, o));
      h = fmaxf(h, __shfl_xor_sync(0xffffffffu, h, o));
    }
  }
  *lo = l;
  *hi = h;
}

/* Index of this thread in a 1-D (x) grid-stride loop, and the stride. */
static __device__ __forceinline__ size_t bg_tid_x(void) {
  return (size_t)blockIdx.x * blockDim.x + threadIdx.x;
}
static __device__ __forceinline__ size_t bg_nthreads_x(void) {
  return (size_t)gridDim.x * blockDim.x;
}

#endif
