/*
 * AVX-512 (F, BW, VL) kernels. Only the functions in this file are compiled for those
 * extensions (the target pragma below gives every function defined after it
 * __attribute__((target("avx512f,avx512bw,avx512vl")))); dispatch.c calls into this table only
 * when the CPU and the OS report all three. The fused multiply-add instructions that come
 * with AVX-512F are never used: kernels/ is compiled with -ffp-contract=off.
 */
#include "internal.h"

#if BAGUA_KERNELS_X86

#include <immintrin.h>
#include <string.h>

/* The same target attribute for every function below, in each compiler's spelling. */
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl"))), \
                             apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl")
#endif

#define VBYTES 64
#define SIMD_TABLE bagua__kernels_avx512_table
/* dispatch.c names its mix of this table and the AVX2 one "avx512"; this is all 512-bit. */
#define SIMD_NAME "avx512zmm"

typedef __m512 vf;
typedef __m512d vd;
typedef __m512i vi;
typedef __m256i vh;

static inline vf vf_ld(const void *p) {
  return _mm512_loadu_ps(p);
}
static inline void vf_st(void *p, vf v) {
  _mm512_storeu_ps(p, v);
}
static inline vd vd_ld(const void *p) {
  return _mm512_loadu_pd(p);
}
static inline void vd_st(void *p, vd v) {
  _mm512_storeu_pd(p, v);
}
static inline vi vi_ld(const void *p) {
  return _mm512_loadu_si512(p);
}
static inline void vi_st(void *p, vi v) {
  _mm512_storeu_si512(p, v);
}
static inline vh vh_ld(const void *p) {
  return _mm256_loadu_si256((const __m256i *)p);
}
static inline void vh_st(void *p, vh v) {
  _mm256_storeu_si256((__m256i *)p, v);
}

static inline vf vf_set1(float x) {
  return _mm512_set1_ps(x);
}
static inline vf vf_add(vf a, vf b) {
  return _mm512_add_ps(a, b);
}
static inline vf vf_sub(vf a, vf b) {
  return _mm512_sub_ps(a, b);
}
static inline vf vf_mul(vf a, vf b) {
  return _mm512_mul_ps(a, b);
}
static inline vf vf_div(vf a, vf b) {
  return _mm512_div_ps(a, b);
}
static inline vf vf_sqrt(vf a) {
  return _mm512_sqrt_ps(a);
}
/* vminps/vmaxps return the second operand when either is NaN or both are zero: a < b ? a : b. */
static inline vf vf_min(vf a, vf b) {
  return _mm512_min_ps(a, b);
}
static inline vf vf_max(vf a, vf b) {
  return _mm512_max_ps(a, b);
}
static inline vf vf_rint(vf a) {
  return _mm512_roundscale_ps(a, _MM_FROUND_CUR_DIRECTION);
}
static inline vf vf_trunc(vf a) {
  return _mm512_roundscale_ps(a, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
}

static inline vd vd_set1(double x) {
  return _mm512_set1_pd(x);
}
static inline vd vd_add(vd a, vd b) {
  return _mm512_add_pd(a, b);
}
static inline vd vd_div(vd a, vd b) {
  return _mm512_div_pd(a, b);
}
static inline vd vd_min(vd a, vd b) {
  return _mm512_min_pd(a, b);
}
static inline vd vd_max(vd a, vd b) {
  return _mm512_max_pd(a, b);
}

static inline vi vi_add8(vi a, vi b) {
  return _mm512_add_epi8(a, b);
}
static inline vi vi_add32(vi a, vi b) {
  return _mm512_add_epi32(a, b);
}
static inline vi vi_add64(vi a, vi b) {
  return _mm512_add_epi64(a, b);
}
static inline vi vi_minu8(vi a, vi b) {
  return _mm512_min_epu8(a, b);
}
static inline vi vi_maxu8(vi a, vi b) {
  return _mm512_max_epu8(a, b);
}
static inline vi vi_min32(vi a, vi b) {
  return _mm512_min_epi32(a, b);
}
static inline vi vi_max32(vi a, vi b) {
  return _mm512_max_epi32(a, b);
}
static inline vi vi_min64(vi a, vi b) {
  return _mm512_min_epi64(a, b);
}
static inline vi vi_max64(vi a, vi b) {
  return _mm512_max_epi64(a, b);
}

static inline vf vf_from_f16(vh h) {
  return _mm512_cvtph_ps(h);
}

/* NaN lanes become +-0x7fc00000 first so that they convert to the canonical +-0x7e00. */
static inline vh vf_to_f16(vf v) {
  __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  vf canon = _mm512_castsi512_ps(
      _mm512_or_si512(_mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(INT32_MIN)),
                      _mm512_set1_epi32(0x7fc00000)));
  return _mm512_cvtps_ph(_mm512_mask_blend_ps(nan, v, canon), _MM_FROUND_TO_NEAREST_INT);
}

static inline vf vf_from_bf16(vh h) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/*
 * The integer form of bagua__f32_to_bf16. vcvtneps2bf16 (AVX512_BF16) is not used: it flushes
 * subnormals to zero, which the scalar definition does not.
 */
static inline vh vf_to_bf16(vf v) {
  vi x = _mm512_castps_si512(v);
  vi hi = _mm512_srli_epi32(x, 16);
  vi lsb = _mm512_and_si512(hi, _mm512_set1_epi32(1));
  vi rounded =
      _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7fff)), lsb), 16);
  vi quiet = _mm512_or_si512(hi, _mm512_set1_epi32(0x40));
  __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  return _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(nan, rounded, quiet));
}

static inline vf vf_from_u8(const void *p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p)));
}

static inline void vf_st_u8(void *p, vf v) {
  _mm_storeu_si128((__m128i *)p, _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(v)));
}

/*
 * The packs work within 128-bit lanes: dword 4k + j of the result holds register j's lane k,
 * so one dword permutation restores element order.
 */
static inline void vf_st_u8x4(void *p, vf a, vf b, vf c, vf d) {
  vi ab = _mm512_packs_epi32(_mm512_cvtps_epi32(a), _mm512_cvtps_epi32(b));
  vi cd = _mm512_packs_epi32(_mm512_cvtps_epi32(c), _mm512_cvtps_epi32(d));
  vi r = _mm512_packus_epi16(ab, cd);
  vi idx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  vi_st(p, _mm512_permutexvar_epi32(idx, r));
}

static inline vh vh_div_i32(vh x, vd d) {
  return _mm512_cvttpd_epi32(_mm512_div_pd(_mm512_cvtepi32_pd(x), d));
}

#include "simd_impl.h"

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#endif
