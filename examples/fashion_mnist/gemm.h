/*
 * Single-precision matrix product for the MLP, written like a BLIS/GotoBLAS SGEMM: operands
 * are packed into cache-sized blocks and a register-blocked 6x16 micro-kernel does the
 * multiply-adds. The micro-kernel uses AVX2+FMA (selected at run time, so the binary still
 * runs on baseline x86-64) or a portable C loop.
 *
 * Operands are described by row and column strides, so the transposed products of the
 * backward pass (X^T * dY and dY * W^T) need no transposed copies: element (i, k) of A is
 * A[i*rsa + k*csa] and element (k, j) of B is B[k*rsb + j*csb]. C is row-major with leading
 * dimension ldc.
 */
#ifndef FM_GEMM_H
#define FM_GEMM_H

#include <stddef.h>

/* Packing buffers, one set per thread that calls fm_sgemm (the MLP owns one). */
typedef struct {
  float *a; /* FM_GEMM_MC x FM_GEMM_KC */
  float *b; /* FM_GEMM_KC x FM_GEMM_NC */
} fm_gemm_ws_t;

/* Returns 0, or -1 when out of memory. */
int fm_gemm_ws_init(fm_gemm_ws_t *ws);
void fm_gemm_ws_free(fm_gemm_ws_t *ws);

/* C = A*B (accumulate == 0) or C += A*B, for A M x K and B K x N. M, N or K may be 0. */
void fm_sgemm(fm_gemm_ws_t *ws, int m, int n, int k, const float *a, ptrdiff_t rsa, ptrdiff_t csa,
              const float *b, ptrdiff_t rsb, ptrdiff_t csb, float *c, ptrdiff_t ldc,
              int accumulate);

/* "avx2" or "generic": the micro-kernel in use. */
const char *fm_gemm_isa(void);
/* For tests: 1 selects the portable micro-kernel even on AVX2 machines, 0 the automatic one. */
void fm_gemm_force_generic(int on);

#endif
