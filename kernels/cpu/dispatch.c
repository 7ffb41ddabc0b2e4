/*
 * Chooses the kernel implementation once per process and routes every public kernel call
 * through it. Also holds the parts of MinMaxUInt8 that are the same for every ISA: the chunk
 * layout and the header arithmetic, so the vector code only ever sees flat ranges.
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "common/log.h"
#include "internal.h"

#if BAGUA_KERNELS_X86
#include <cpuid.h>
#endif

static _Atomic(const bagua__kernel_table_t *) g_table;

#if BAGUA_KERNELS_X86
/* Asked through CPUID because not every compiler's __builtin_cpu_supports knows "f16c". */
static int have_f16c(void) {
  unsigned a, b, c, d;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
}
#endif

static int have_avx2(void) {
#if BAGUA_KERNELS_X86
  /* The compiler runtime also checks that the OS saves the YMM registers (XCR0). */
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && have_f16c();
#else
  return 0;
#endif
}

static int have_avx512(void) {
#if BAGUA_KERNELS_X86
  /* The runtime also checks that the OS saves the ZMM and mask registers (XCR0). */
  return have_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl");
#else
  return 0;
#endif
}

#if BAGUA_KERNELS_X86
/*
 * What "avx512" means: the 512-bit kernels where wide registers pay (f16/bf16 conversions,
 * quantization, the divider-bound Adam step), but the 256-bit AVX2 code for the kernels that
 * only stream memory (reduce of f32/f64/i32/i64/u8, axpy, scale, SGD). Measured on Zen 4
 * (bagua-bench kernel --bytes 64M), 512-bit loads and stores stream 10-15% slower from DRAM
 * than 256-bit ones and gain nothing in cache; Intel parts may also lower the clock for
 * 512-bit code. "avx512zmm" (tests and bagua-bench only) is the all-512-bit table.
 */
static bagua__kernel_table_t g_avx512_mixed;
static pthread_once_t g_avx512_once = PTHREAD_ONCE_INIT;

static void build_avx512_mixed(void) {
  static const bagua_dtype_t streaming[] = {BAGUA_F32, BAGUA_F64, BAGUA_I32, BAGUA_I64, BAGUA_U8};
  const bagua__kernel_table_t *y = &bagua__kernels_avx2_table;
  g_avx512_mixed = bagua__kernels_avx512_table;
  g_avx512_mixed.name = "avx512";
  for (size_t i = 0; i < sizeof(streaming) / sizeof(streaming[0]); i++)
    for (int op = 0; op < KOP__COUNT; op++)
      g_avx512_mixed.reduce[streaming[i]][op] = y->reduce[streaming[i]][op];
  g_avx512_mixed.axpy = y->axpy;
  g_avx512_mixed.scale = y->scale;
  g_avx512_mixed.sgd = y->sgd;
}

static const bagua__kernel_table_t *avx512_mixed(void) {
  pthread_once(&g_avx512_once, build_avx512_mixed);
  return &g_avx512_mixed;
}
#endif

static const bagua__kernel_table_t *best_table(void) {
#if BAGUA_KERNELS_X86
  if (have_avx512()) return avx512_mixed();
  if (have_avx2()) return &bagua__kernels_avx2_table;
#endif
  return &bagua__kernels_scalar_table;
}

/* Racing first calls all compute the same answer, so the first store simply wins. */
static const bagua__kernel_table_t *init_table(void) {
  const bagua__kernel_table_t *want = best_table(), *expected = NULL;
  if (atomic_compare_exchange_strong(&g_table, &expected, want))
    BAGUA_INFO(BAGUA_SUBSYS_KERNEL, "CPU kernels: %s", want->name);
  return atomic_load_explicit(&g_table, memory_order_acquire);
}

static inline const bagua__kernel_table_t *kt(void) {
  const bagua__kernel_table_t *t = atomic_load_explicit(&g_table, memory_order_acquire);
  return __builtin_expect(t != NULL, 1) ? t : init_table();
}

const char *bagua__kernels_isa(void) {
  return kt()->name;
}

int bagua__kernels_force_isa(const char *isa) {
  const bagua__kernel_table_t *t = NULL;
  if (isa == NULL || strcmp(isa, "auto") == 0) {
    t = best_table();
  } else if (strcmp(isa, "scalar") == 0) {
    t = &bagua__kernels_scalar_table;
#if BAGUA_KERNELS_X86
  } else if (strcmp(isa, "avx2") == 0 && have_avx2()) {
    t = &bagua__kernels_avx2_table;
  } else if (strcmp(isa, "avx512") == 0 && have_avx512()) {
    t = avx512_mixed();
  } else if (strcmp(isa, "avx512zmm") == 0 && have_avx512()) {
    t = &bagua__kernels_avx512_table;
#endif
  }
  if (t == NULL) return -1;
  atomic_store_explicit(&g_table, t, memory_order_release);
  return 0;
}

void bagua__reduce(bagua_dtype_t dt, bagua_op_t op, void *dst, const void *src, size_t count) {
  if ((unsigned)dt >= BAGUA_DTYPE__COUNT) return;
  kt()->reduce[dt][kop_index(op)](dst, dst, src, count);
}

void bagua__reduce_out(bagua_dtype_t dt, bagua_op_t op, void *dst, const void *a, const void *b,
                       size_t count) {
  if ((unsigned)dt >= BAGUA_DTYPE__COUNT) return;
  kt()->reduce[dt][kop_index(op)](dst, a, b, count);
}

/*
 * Bytes of dst per block: small enough that the block stays in L1 while every source is
 * folded into it, large enough that the per-call overhead of the kernels disappears.
 */
enum { REDUCE_N_BLOCK = 8192 };

void bagua__reduce_n(bagua_dtype_t dt, bagua_op_t op, void *dst, const void *const *srcs, int n,
                     size_t count) {
  if ((unsigned)dt >= BAGUA_DTYPE__COUNT || n < 1 || count == 0) return;
  size_t es = bagua_dtype_size(dt), block = REDUCE_N_BLOCK / es;
  bagua__binary_fn f = kt()->reduce[dt][kop_index(op)];
  if (n == 1) {
    if (dst != srcs[0]) memmove(dst, srcs[0], count * es);
    return;
  }
  for (size_t i = 0; i < count; i += block) {
    size_t m = count - i < block ? count - i : block, off = i * es;
    unsigned char *d = (unsigned char *)dst + off;
    f(d, (const unsigned char *)srcs[0] + off, (const unsigned char *)srcs[1] + off, m);
    for (int r = 2; r < n; r++) f(d, d, (const unsigned char *)srcs[r] + off, m);
  }
}

void bagua__div(bagua_dtype_t dt, void *buf, size_t count, int divisor) {
  kt()->div(dt, buf, count, divisor);
}

void bagua__f16_to_f32_n(float *dst, const uint16_t *src, size_t n) {
  kt()->f16_to_f32(dst, src, n);
}
void bagua__f32_to_f16_n(uint16_t *dst, const float *src, size_t n) {
  kt()->f32_to_f16(dst, src, n);
}
void bagua__bf16_to_f32_n(float *dst, const uint16_t *src, size_t n) {
  kt()->bf16_to_f32(dst, src, n);
}
void bagua__f32_to_bf16_n(uint16_t *dst, const float *src, size_t n) {
  kt()->f32_to_bf16(dst, src, n);
}

/* ---------------------------------------------------------------------------------------- */
/* MinMaxUInt8 chunk layout                                                                 */
/* ---------------------------------------------------------------------------------------- */

enum { MINMAX_HEADER = 32 };

static size_t quant_elem_size(bagua_dtype_t dt) {
  switch (dt) {
    case BAGUA_F32:
      return 4;
    case BAGUA_F16:
    case BAGUA_BF16:
      return 2;
    default:
      return 0;
  }
}

static inline size_t align32(size_t n) {
  return (n + 31) & ~(size_t)31;
}

size_t bagua__minmax_u8_compressed_size(size_t chunk_elems, bagua_dtype_t dt) {
  if (quant_elem_size(dt) == 0) return 0;
  return MINMAX_HEADER + align32(chunk_elems);
}

/* Header values in dt; min and max of f16/bf16 input are f16/bf16 values, so exact. */
static void put_header_value(bagua_dtype_t dt, unsigned char *p, float v) {
  uint16_t h;
  switch (dt) {
    case BAGUA_F16:
      h = bagua__f32_to_f16(v);
      memcpy(p, &h, 2);
      break;
    case BAGUA_BF16:
      h = bagua__f32_to_bf16(v);
      memcpy(p, &h, 2);
      break;
    default:
      memcpy(p, &v, 4);
      break;
  }
}

static float get_header_value(bagua_dtype_t dt, const unsigned char *p) {
  uint16_t h;
  float f;
  switch (dt) {
    case BAGUA_F16:
      memcpy(&h, p, 2);
      return bagua__f16_to_f32(h);
    case BAGUA_BF16:
      memcpy(&h, p, 2);
      return bagua__bf16_to_f32(h);
    default:
      memcpy(&f, p, 4);
      return f;
  }
}

bagua_status_t bagua__minmax_u8_compress(bagua_dtype_t dt, const void *in, size_t chunk_elems,
                                         size_t n_chunks, void *out) {
  size_t es = quant_elem_size(dt);
  if (es == 0) return BAGUA_ERR_INVALID_ARG;
  const bagua__kernel_table_t *t = kt();
  size_t stride = bagua__minmax_u8_compressed_size(chunk_elems, dt);
  for (size_t c = 0; c < n_chunks; c++) {
    const unsigned char *src = (const unsigned char *)in + c * chunk_elems * es;
    unsigned char *dst = (unsigned char *)out + c * stride;
    float mn, mx, scale, upper, lower;
    t->minmax(dt, src, chunk_elems, &mn, &mx);
    /* -0 and +0 compare equal, so which one a scan keeps depends on the order; store +0. */
    mn += 0.0f;
    mx += 0.0f;
    memset(dst, 0, MINMAX_HEADER);
    put_header_value(dt, dst, mn);
    put_header_value(dt, dst + es, mx);
    /* Derive the constants from the stored header, exactly as the decompressor will. */
    bagua__minmax_u8_params(get_header_value(dt, dst), get_header_value(dt, dst + es), &scale,
                            &upper, &lower);
    t->quantize(dt, src, chunk_elems, scale, upper, lower, dst + MINMAX_HEADER);
    memset(dst + MINMAX_HEADER + chunk_elems, 0, stride - MINMAX_HEADER - chunk_elems);
  }
  return BAGUA_OK;
}

bagua_status_t bagua__minmax_u8_decompress(bagua_dtype_t dt, const void *in, size_t chunk_elems,
                                           size_t n_chunks, void *out) {
  size_t es = quant_elem_size(dt);
  if (es == 0) return BAGUA_ERR_INVALID_ARG;
  const bagua__kernel_table_t *t = kt();
  size_t stride = bagua__minmax_u8_compressed_size(chunk_elems, dt);
  for (size_t c = 0; c < n_chunks; c++) {
    const unsigned char *src = (const unsigned char *)in + c * stride;
    float scale, upper, lower;
    bagua__minmax_u8_params(get_header_value(dt, src), get_header_value(dt, src + es), &scale,
                            &upper, &lower);
    t->dequantize(dt, src + MINMAX_HEADER, chunk_elems, scale, lower,
                  (unsigned char *)out + c * chunk_elems * es);
  }
  return BAGUA_OK;
}

bagua_status_t bagua__minmax_u8_decompress_add(bagua_dtype_t dt, const void *in, size_t chunk_elems,
                                               size_t n_chunks, float *acc) {
  size_t es = quant_elem_size(dt);
  if (es == 0) return BAGUA_ERR_INVALID_ARG;
  const bagua__kernel_table_t *t = kt();
  size_t stride = bagua__minmax_u8_compressed_size(chunk_elems, dt);
  for (size_t c = 0; c < n_chunks; c++) {
    const unsigned char *src = (const unsigned char *)in + c * stride;
    float scale, upper, lower;
    bagua__minmax_u8_params(get_header_value(dt, src), get_header_value(dt, src + es), &scale,
                            &upper, &lower);
    t->dequantize_add(src + MINMAX_HEADER, chunk_elems, scale, lower, acc + c * chunk_elems);
  }
  return BAGUA_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* axpy, scale, optimizers                                                                  */
/* ---------------------------------------------------------------------------------------- */

void bagua__axpy(float a, const float *x, float *y, size_t n) {
  kt()->axpy(a, x, y, n);
}

void bagua__scale(float a, float *x, size_t n) {
  kt()->scale(a, x, n);
}

void bagua__sgd_step(float *param, const float *grad, float *momentum_buf, size_t n,
                     const bagua__sgd_params_t *hp, int first_step) {
  bagua__sgd_consts_t c = {
      .lr = (float)hp->lr,
      .weight_decay = (float)hp->weight_decay,
      .momentum = (float)hp->momentum,
      .one_minus_dampening = (float)(1.0 - hp->dampening),
      .nesterov = hp->nesterov != 0,
      .first_step = first_step != 0,
  };
  kt()->sgd(param, grad, momentum_buf, n, &c);
}

void bagua__adam_step(float *param, const float *grad, float *exp_avg, float *exp_avg_sq, size_t n,
                      const bagua__adam_params_t *hp, int64_t step) {
  double bc1 = 1.0 - pow(hp->beta1, (double)step);
  double bc2 = 1.0 - pow(hp->beta2, (double)step);
  bagua__adam_consts_t c = {
      .beta1 = (float)hp->beta1,
      .one_minus_beta1 = (float)(1.0 - hp->beta1),
      .beta2 = (float)hp->beta2,
      .one_minus_beta2 = (float)(1.0 - hp->beta2),
      .eps = (float)hp->eps,
      .step_size = (float)(hp->lr / bc1),
      .bias2_sqrt = (float)sqrt(bc2),
      .weight_decay = (float)hp->weight_decay,
      .decay = (float)(1.0 - hp->lr * hp->weight_decay),
      .decoupled = hp->decoupled != 0,
  };
  kt()->adam(param, grad, exp_avg, exp_avg_sq, n, &c);
}
