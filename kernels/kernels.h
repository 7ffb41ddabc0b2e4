/*
 * Internal CPU kernel interface used by the communicator and the algorithms.
 *
 * Every function accepts unaligned pointers and any count (including 0). f16 and bf16
 * values are converted to f32, combined, and rounded back to nearest-even, so a reduction
 * of two half-precision values is exact whenever the f32 result is representable.
 * An implementation is chosen once per process (scalar, AVX2, AVX-512) on first use; the
 * scalar versions (bagua__*_scalar) are the oracle the tests compare against.
 */
#ifndef BAGUA_KERNELS_H
#define BAGUA_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "bagua/types.h"

/* dst[i] = dst[i] (op) src[i]. BAGUA_AVG combines like BAGUA_SUM (divide separately). */
void bagua__reduce(bagua_dtype_t dt, bagua_op_t op, void *dst, const void *src, size_t count);
/* dst[i] = a[i] (op) b[i]; dst may alias a or b. */
void bagua__reduce_out(bagua_dtype_t dt, bagua_op_t op, void *dst, const void *a, const void *b,
                       size_t count);
/* buf[i] /= divisor (integer types truncate toward zero). Used to finish BAGUA_AVG. */
void bagua__div(bagua_dtype_t dt, void *buf, size_t count, int divisor);

/* Scalar oracles with the same contracts. */
void bagua__reduce_out_scalar(bagua_dtype_t dt, bagua_op_t op, void *dst, const void *a,
                              const void *b, size_t count);
void bagua__div_scalar(bagua_dtype_t dt, void *buf, size_t count, int divisor);

/* Half-precision conversions (round to nearest even; NaN stays NaN). */
float bagua__f16_to_f32(uint16_t h);
uint16_t bagua__f32_to_f16(float f);
float bagua__bf16_to_f32(uint16_t h);
uint16_t bagua__f32_to_bf16(float f);

/* Name of the implementation chosen for this process: "scalar", "avx2" or "avx512". */
const char *bagua__kernels_isa(void);

#endif
