/*
 * AVX2 + F16C kernels. Only the functions in this file are compiled for those extensions
 * (through the target pragma below, which gives every function defined after it
 * __attribute__((target("avx2,f16c")))), so the rest of the library still runs on any x86-64;
 * dispatch.c calls into this table only when the CPU reports both features. FMA is deliberately
 * not enabled: the results must round exactly like the scalar oracle.
 */
#include "internal.h"

#if BAGUA_KERNELS_X86

#include <immintrin.h>
#include <string.h>

/* The same target attribute for every function below, in each compiler's spelling. */
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,f16c")
#endif

#define VBYTES 32
#define SIMD_TABLE bagua__kernels_avx2_table
#define SIMD_NAME "avx2"

typedef __m256 vf;
typedef __m256d vd;
typedef __m256i vi;
typedef __m128i vh;

static inline vf vf_ld(const void *p) {
  return _mm256_loadu_ps((const float *)p);
}
static inline void vf_st(void *p, vf v) {
  _mm256_storeu_ps((float *)p, v);
}
static inline vd vd_ld(const void *p) {
  return _mm256_loadu_pd((const double *)p);
}
static inline void vd_st(void *p, vd v) {
  _mm256_storeu_pd((double *)p, v);
}
static inline vi vi_ld(const void *p) {
  return _mm256_loadu_si256((const __m256i *)p);
}
static inline void vi_st(void *p, vi v) {
  _mm256_storeu_si256((__m256i *)p, v);
}
static inline vh vh_ld(const void *p) {
  return _mm_loadu_si128((const __m128i *)p);
}
static inline void vh_st(void *p, vh v) {
  _mm_storeu_si128((__m128i *)p, v);
}

static inline vf vf_set1(float x) {
  return _mm256_set1_ps(x);
}
static inline vf vf_add(vf a, vf b) {
  return _mm256_add_ps(a, b);
}
static inline vf vf_sub(vf a, vf b) {
  return _mm256_sub_ps(a, b);
}
static inline vf vf_mul(vf a, vf b) {
  return _mm256_mul_ps(a, b);
}
static inline vf vf_div(vf a, vf b) {
  return _mm256_div_ps(a, b);
}
static inline vf vf_sqrt(vf a) {
  return _mm256_sqrt_ps(a);
}
static inline vf vf_min(vf a, vf b) {
  return _mm256_min_ps(a, b);
}
static inline vf vf_max(vf a, vf b) {
  return _mm256_max_ps(a, b);
}
static inline vf vf_rint(vf a) {
  return _mm256_round_ps(a, _MM_FROUND_CUR_DIRECTION);
}
static inline vf vf_trunc(vf a) {
  return _mm256_round_ps(a, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
}

static inline vd vd_set1(double x) {
  return _mm256_set1_pd(x);
}
static inline vd vd_add(vd a, vd b) {
  return _mm256_add_pd(a, b);
}
static inline vd vd_div(vd a, vd b) {
  return _mm256_div_pd(a, b);
}
static inline vd vd_min(vd a, vd b) {
  return _mm256_min_pd(a, b);
}
static inline vd vd_max(vd a, vd b) {
  return _mm256_max_pd(a, b);
}

static inline vi vi_add8(vi a, vi b) {
  return _mm256_add_epi8(a, b);
}
static inline vi vi_add32(vi a, vi b) {
  return _mm256_add_epi32(a, b);
}
static inline vi vi_add64(vi a, vi b) {
  return _mm256_add_epi64(a, b);
}
static inline vi vi_minu8(vi a, vi b) {
  return _mm256_min_epu8(a, b);
}
static inline vi vi_maxu8(vi a, vi b) {
  return _mm256_max_epu8(a, b);
}
static inline vi vi_min32(vi a, vi b) {
  return _mm256_min_epi32(a, b);
}
static inline vi vi_max32(vi a, vi b) {
  return _mm256_max_epi32(a, b);
}
/* AVX2 has no 64-bit min/max: select with a signed compare. */
static inline vi vi_min64(vi a, vi b) {
  return _mm256_blendv_epi8(a, b, _mm256_cmpgt_epi64(a, b));
}
static inline vi vi_max64(vi a, vi b) {
  return _mm256_blendv_epi8(a, b, _mm256_cmpgt_epi64(b, a));
}

static inline vf vf_from_f16(vh h) {
  return _mm256_cvtph_ps(h);
}

/*
 * vcvtps2ph keeps the top NaN payload bits, while the scalar conversion returns the canonical
 * quiet NaN: replace NaN lanes by +-0x7fc00000 first, which converts to +-0x7e00.
 */
static inline vh vf_to_f16(vf v) {
  vf nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
  vf canon = _mm256_or_ps(_mm256_and_ps(v, _mm256_set1_ps(-0.0f)),
                          _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000)));
  return _mm256_cvtps_ph(_mm256_blendv_ps(v, canon, nan), _MM_FROUND_TO_NEAREST_INT);
}

static inline vf vf_from_bf16(vh h) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* The integer form of bagua__f32_to_bf16: round to nearest even, NaN -> quiet NaN. */
static inline vh vf_to_bf16(vf v) {
  vi x = _mm256_castps_si256(v);
  vi lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
  vi rounded =
      _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)), lsb), 16);
  vi quiet = _mm256_or_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(0x40));
  vi nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  vi r = _mm256_blendv_epi8(rounded, quiet, nan);
  return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}

static inline vf vf_from_u8(const void *p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p)));
}

static inline void vf_st_u8(void *p, vf v) {
  vi x = _mm256_cvtps_epi32(v);
  __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(x), _mm256_extracti128_si256(x, 1));
  _mm_storel_epi64((__m128i *)p, _mm_packus_epi16(w, w));
}

/*
 * Two saturating packs give bytes in the order a0-3 b0-3 c0-3 d0-3 | a4-7 b4-7 c4-7 d4-7;
 * one dword permutation restores element order.
 */
static inline void vf_st_u8x4(void *p, vf a, vf b, vf c, vf d) {
  vi ab = _mm256_packs_epi32(_mm256_cvtps_epi32(a), _mm256_cvtps_epi32(b));
  vi cd = _mm256_packs_epi32(_mm256_cvtps_epi32(c), _mm256_cvtps_epi32(d));
  vi r = _mm256_packus_epi16(ab, cd);
  vi_st(p, _mm256_permutevar8x32_epi32(r, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}

static inline vh vh_div_i32(vh x, vd d) {
  return _mm256_cvttpd_epi32(_mm256_div_pd(_mm256_cvtepi32_pd(x), d));
}

#include "simd_impl.h"

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#endif
