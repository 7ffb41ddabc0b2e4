/*
 * Dispatch for the reduction kernels. For now every call goes to the scalar reference; the
 * SIMD variants plug in here through the table chosen once at start-up.
 */
#include "../kernels.h"

void bagua__reduce(bagua_dtype_t dt, bagua_op_t op, void *dst, const void *src, size_t count) {
  bagua__reduce_out_scalar(dt, op, dst, dst, src, count);
}

void bagua__reduce_out(bagua_dtype_t dt, bagua_op_t op, void *dst, const void *a, const void *b,
                       size_t count) {
  bagua__reduce_out_scalar(dt, op, dst, a, b, count);
}

void bagua__div(bagua_dtype_t dt, void *buf, size_t count, int divisor) {
  bagua__div_scalar(dt, buf, count, divisor);
}

const char *bagua__kernels_isa(void) { return "scalar"; }
