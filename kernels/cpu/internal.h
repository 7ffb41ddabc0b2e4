/*
 * Private to kernels/cpu: the dispatch table every implementation (scalar, AVX2, AVX-512)
 * fills in, and the small scalar helpers they must all share so that their results are
 * bit-identical. Owned by the kernels engineer; nothing outside kernels/ includes this.
 */
#ifndef BAGUA_KERNELS_CPU_INTERNAL_H
#define BAGUA_KERNELS_CPU_INTERNAL_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "../kernels.h"

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define BAGUA_KERNELS_X86 1
#else
#define BAGUA_KERNELS_X86 0
#endif

/* Index of an operator in the reduce table: AVG combines like SUM. */
enum { KOP_SUM = 0, KOP_MIN = 1, KOP_MAX = 2, KOP__COUNT = 3 };

static inline int kop_index(bagua_op_t op) {
  return op == BAGUA_MIN ? KOP_MIN : op == BAGUA_MAX ? KOP_MAX : KOP_SUM;
}

/*
 * Optimizer hyper-parameters after the host-side arithmetic (done in double, like the Python
 * floats PyTorch uses) has been rounded to f32 once. Every implementation receives the same
 * constants, so the only arithmetic left per element is f32 and identical in all of them.
 */
typedef struct {
  float lr, weight_decay, momentum, one_minus_dampening;
  int nesterov, first_step;
} bagua__sgd_consts_t;

typedef struct {
  float beta1, one_minus_beta1, beta2, one_minus_beta2, eps;
  float step_size;    /* lr / (1 - beta1^step) */
  float bias2_sqrt;   /* sqrt(1 - beta2^step) */
  float weight_decay; /* Adam: added to the gradient as weight_decay * param */
  float decay;        /* AdamW: param *= 1 - lr * weight_decay before the update */
  int decoupled;
} bagua__adam_consts_t;

typedef void (*bagua__binary_fn)(void *dst, const void *a, const void *b, size_t n);

typedef struct {
  const char *name; /* as bagua__kernels_isa() reports it */
  bagua__binary_fn reduce[BAGUA_DTYPE__COUNT][KOP__COUNT];
  void (*div)(bagua_dtype_t dt, void *buf, size_t n, int divisor);
  void (*f16_to_f32)(float *dst, const uint16_t *src, size_t n);
  void (*f32_to_f16)(uint16_t *dst, const float *src, size_t n);
  void (*bf16_to_f32)(float *dst, const uint16_t *src, size_t n);
  void (*f32_to_bf16)(uint16_t *dst, const float *src, size_t n);
  /* One chunk each; dt is F32, F16 or BF16 (checked by the caller). */
  void (*minmax)(bagua_dtype_t dt, const void *in, size_t n, float *mn, float *mx);
  void (*quantize)(bagua_dtype_t dt, const void *in, size_t n, float scale, float upper,
                   float lower, uint8_t *q);
  void (*dequantize)(bagua_dtype_t dt, const uint8_t *q, size_t n, float scale, float lower,
                     void *out);
  void (*dequantize_add)(const uint8_t *q, size_t n, float scale, float lower, float *acc);
  void (*axpy)(float a, const float *x, float *y, size_t n);
  void (*scale)(float a, float *x, size_t n);
  void (*sgd)(float *param, const float *grad, float *buf, size_t n, const bagua__sgd_consts_t *c);
  void (*adam)(float *param, const float *grad, float *m, float *v, size_t n,
               const bagua__adam_consts_t *c);
} bagua__kernel_table_t;

/* Scalar oracles of the table entries (quant_scalar.c, optim_scalar.c). */
void bagua__minmax_scalar(bagua_dtype_t dt, const void *in, size_t n, float *mn, float *mx);
void bagua__quantize_scalar(bagua_dtype_t dt, const void *in, size_t n, float scale, float upper,
                            float lower, uint8_t *q);
void bagua__dequantize_scalar(bagua_dtype_t dt, const uint8_t *q, size_t n, float scale,
                              float lower, void *out);
void bagua__dequantize_add_scalar(const uint8_t *q, size_t n, float scale, float lower, float *acc);
void bagua__axpy_scalar(float a, const float *x, float *y, size_t n);
void bagua__scale_scalar(float a, float *x, size_t n);
void bagua__sgd_scalar(float *param, const float *grad, float *buf, size_t n,
                       const bagua__sgd_consts_t *c);
void bagua__adam_scalar(float *param, const float *grad, float *m, float *v, size_t n,
                        const bagua__adam_consts_t *c);

extern const bagua__kernel_table_t bagua__kernels_scalar_table;
#if BAGUA_KERNELS_X86
extern const bagua__kernel_table_t bagua__kernels_avx2_table;
extern const bagua__kernel_table_t bagua__kernels_avx512_table;
#endif

/*
 * MinMaxUInt8 quantization constants of one chunk, shared by every implementation so the
 * compressor and the decompressor of any ISA derive exactly the same floats from the header.
 * Computed in f32 as Bagua's formula reads: scale = 255/(max-min+1e-7), upper = rint(max*scale),
 * lower = upper-255. rintf rounds in the current mode, like the vector rounding used per element.
 */
static inline void bagua__minmax_u8_params(float mn, float mx, float *scale, float *upper,
                                           float *lower) {
  float s = 255.0f / (mx - mn + 1e-7f);
  float u = rintf(mx * s);
  *scale = s;
  *upper = u;
  *lower = u - 255.0f;
}

#endif
