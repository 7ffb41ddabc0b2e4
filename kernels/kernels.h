/*
 * Internal CPU kernel interface used by the communicator and the algorithms. Owned by the
 * kernels engineer (kernels/, tests/kernels/, bench/kernel_bench.c).
 *
 * Every function accepts unaligned pointers (for the void * arguments) and any count
 * (including 0, where the pointers may be NULL). f16 and bf16 values are converted to f32,
 * combined, and rounded back to nearest-even, so a reduction of two half-precision values is
 * exact whenever the f32 result is representable.
 *
 * An implementation is chosen once per process (scalar, AVX2+F16C, AVX-512F/BW/VL) on first
 * use, from what the CPU reports (on AVX-512 CPUs the purely memory-bound kernels keep 256-bit
 * registers, which stream faster; see kernels/cpu/dispatch.c); the library is built for baseline
 * x86-64 and only the functions inside kernels/cpu/avx2.c and kernels/cpu/avx512.c use the wider
 * instructions. The scalar code is the oracle: every vector variant produces bit-identical results
 * for every input of the reductions, divisions, conversions and MinMaxUInt8, NaN payloads included
 * (see the semantics listed in kernels/cpu/reduce_scalar.c and quant_scalar.c). For axpy, scale and
 * the optimizer steps results are bit-identical for all non-NaN values; where two NaNs meet in one
 * operation, which payload survives is unspecified.
 */
#ifndef BAGUA_KERNELS_H
#define BAGUA_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "bagua/types.h"

/*
 * dst[i] = dst[i] (op) src[i]. BAGUA_AVG combines like BAGUA_SUM (divide separately).
 * min is `src < dst ? src : dst` and max `src > dst ? src : dst` element by element, so a NaN
 * already in dst stays and a NaN arriving in src is ignored. A float sum with a NaN input is
 * that NaN (dst's if both are). Integer sums wrap.
 */
void bagua__reduce(bagua_dtype_t dt, bagua_op_t op, void *dst, const void *src, size_t count);
/* dst[i] = a[i] (op) b[i]; dst may be the same pointer as a or b (not a partial overlap). */
void bagua__reduce_out(bagua_dtype_t dt, bagua_op_t op, void *dst, const void *a, const void *b,
                       size_t count);
/*
 * dst[i] = (...((srcs[0][i] op srcs[1][i]) op srcs[2][i]) ...) op srcs[n-1][i], bit for bit what
 * bagua__reduce_out(srcs[0], srcs[1]) followed by bagua__reduce for each further source gives
 * (f16/bf16 round after every step), but computed one L1-sized block at a time so that dst
 * goes to memory once: (n+1) buffers of traffic instead of 3(n-1). n >= 1 (n == 1 copies);
 * dst may be srcs[0] or srcs[1] but no other source.
 */
void bagua__reduce_n(bagua_dtype_t dt, bagua_op_t op, void *dst, const void *const *srcs, int n,
                     size_t count);

/*
 * buf[i] /= divisor (integer types truncate toward zero). Used to finish BAGUA_AVG; divisor
 * must be >= 1 for the integer types (it is the number of ranks).
 */
void bagua__div(bagua_dtype_t dt, void *buf, size_t count, int divisor);

/* Scalar oracles with the same contracts. */
void bagua__reduce_out_scalar(bagua_dtype_t dt, bagua_op_t op, void *dst, const void *a,
                              const void *b, size_t count);
void bagua__div_scalar(bagua_dtype_t dt, void *buf, size_t count, int divisor);

/*
 * Half-precision conversions (round to nearest even; NaN stays NaN). f16 -> f32 quiets a
 * signalling NaN like the F16C instruction does; f32 -> f16 returns the canonical quiet NaN
 * 0x7e00 with the sign kept; f32 -> bf16 keeps the top payload bits and sets the quiet bit.
 */
float bagua__f16_to_f32(uint16_t h);
uint16_t bagua__f32_to_f16(float f);
float bagua__bf16_to_f32(uint16_t h);
uint16_t bagua__f32_to_bf16(float f);

/* Bulk versions of the four conversions above, vectorised, with identical results. */
void bagua__f16_to_f32_n(float *dst, const uint16_t *src, size_t n);
void bagua__f32_to_f16_n(uint16_t *dst, const float *src, size_t n);
void bagua__bf16_to_f32_n(float *dst, const uint16_t *src, size_t n);
void bagua__f32_to_bf16_n(uint16_t *dst, const float *src, size_t n);

/* Name of the implementation in use: "scalar", "avx2" or "avx512" ("avx512zmm" if forced). */
const char *bagua__kernels_isa(void);

/*
 * For tests and bagua-bench only: use the implementation called `isa` ("scalar", "avx2",
 * "avx512", or "avx512zmm", which also runs the memory-bound kernels with 512-bit registers
 * where "avx512" keeps them at 256 bits) for the rest of the process, or the automatic choice
 * again for NULL or "auto".
 * Returns 0, or -1 (and changes nothing) when the name is unknown or this CPU lacks the
 * instructions. Not safe to call while other threads are running kernels.
 */
int bagua__kernels_force_isa(const char *isa);

/*
 * MinMaxUInt8 compression in Bagua's layout (ByteGrad, QAdam, low-precision decentralized).
 *
 * The input is n_chunks consecutive chunks of chunk_elems elements of dt (F32, F16 or BF16).
 * Each chunk becomes one region of bagua__minmax_u8_compressed_size(chunk_elems, dt) bytes,
 * and region c starts at byte c * that size of the output:
 *   bytes [0, sizeof(T))          the chunk minimum, in dt;
 *   bytes [sizeof(T), 2*sizeof(T)) the chunk maximum, in dt;
 *   bytes up to 32                zero;
 *   bytes [32, 32 + chunk_elems)  one uint8 per element;
 *   bytes up to the 32-aligned end zero.
 * With scale = 255/(max-min+1e-7), upper = rint(max*scale) and lower = upper-255, all in f32,
 * an element x becomes q = clamp(min(rint(x*scale), upper) - lower, 0, 255) and decodes to
 * (q + lower)/scale. NaN elements are ignored by min/max (and encode to some byte), a -0
 * minimum or maximum is stored as +0, and non-finite values cannot be represented (as in
 * Bagua). The result is identical on every ISA, so compressed bytes can be compared.
 * The decoding error of a finite element is at most about (max-min)/255/2.
 */
/* Bytes of ONE compressed chunk (a multiple of 32); 0 for a dtype other than F32/F16/BF16. */
size_t bagua__minmax_u8_compressed_size(size_t chunk_elems, bagua_dtype_t dt);
/* Compresses n_chunks chunks; BAGUA_ERR_INVALID_ARG for an unsupported dtype. */
bagua_status_t bagua__minmax_u8_compress(bagua_dtype_t dt, const void *in, size_t chunk_elems,
                                         size_t n_chunks, void *out);
/* Decodes n_chunks regions back to n_chunks * chunk_elems elements of dt (rounded to dt). */
bagua_status_t bagua__minmax_u8_decompress(bagua_dtype_t dt, const void *in, size_t chunk_elems,
                                           size_t n_chunks, void *out);
/*
 * acc[c * chunk_elems + j] += decoded value j of region c, in f32 whatever dt the header has
 * (no rounding to dt in between). For ByteGrad's reduce step, call it once per received
 * region with n_chunks = 1 and the same acc to sum the peers' copies of one chunk.
 */
bagua_status_t bagua__minmax_u8_decompress_add(bagua_dtype_t dt, const void *in, size_t chunk_elems,
                                               size_t n_chunks, float *acc);

/* y[i] = y[i] + a * x[i] (two roundings, no fused multiply-add). */
void bagua__axpy(float a, const float *x, float *y, size_t n);
/* x[i] = x[i] * a. */
void bagua__scale(float a, float *x, size_t n);

/*
 * Optimizer steps over flat f32 buffers with caller-owned state, following torch.optim
 * (single-tensor path, maximize=False, amsgrad=False). Hyper-parameters are doubles like
 * Python floats; what they combine into (1 - dampening, lr / (1 - beta1^step), ...) is
 * computed in double once per call and then rounded to f32.
 */
typedef struct {
  double lr, momentum, dampening, weight_decay;
  int nesterov;
} bagua__sgd_params_t;

/*
 * torch.optim.SGD: d = g + weight_decay*p; with momentum, buf = d on the first step (pass
 * first_step = 1; momentum_buf is then only written) and buf = momentum*buf + (1-dampening)*d
 * afterwards, and d = nesterov ? d + momentum*buf : buf; finally p = p - lr*d.
 * momentum_buf may be NULL when momentum is 0.
 */
void bagua__sgd_step(float *param, const float *grad, float *momentum_buf, size_t n,
                     const bagua__sgd_params_t *hp, int first_step);

typedef struct {
  double lr, beta1, beta2, eps, weight_decay;
  int decoupled; /* 0: Adam (L2 term added to the gradient); 1: AdamW (p *= 1 - lr*wd) */
} bagua__adam_params_t;

/*
 * torch.optim.Adam / AdamW. `step` is the step count after incrementing it (1 on the first
 * call). exp_avg and exp_avg_sq start as zeros. With bc1 = 1 - beta1^step and
 * bc2 = 1 - beta2^step: m = beta1*m + (1-beta1)*g, v = beta2*v + (1-beta2)*g*g,
 * p = p - (lr/bc1) * m / (sqrt(v)/sqrt(bc2) + eps).
 */
void bagua__adam_step(float *param, const float *grad, float *exp_avg, float *exp_avg_sq, size_t n,
                      const bagua__adam_params_t *hp, int64_t step);

/*
 * The element-wise updates of two algorithms, written once here for the host as their CUDA
 * twins are in kernels/cuda/ddp_ops.cu, under the same floating-point rules (no fused
 * multiply-add: -ffp-contract=off here, --fmad=false there), so that a CPU and a GPU rank of
 * the same job compute the same bits. f32 buffers of n elements.
 *   QAdam's momentum: m = beta1 * m + one_minus_beta1 * (g + wd * p).
 *   Low-precision decentralized SGD's difference: diff = x + s / 3 - (5 / 3) * w.
 */
void bagua__qadam_momentum(float *m, const float *g, const float *p, size_t n, float beta1,
                           float one_minus_beta1, float wd);
void bagua__lpdec_diff(float *diff, const float *x, const float *s, const float *w, size_t n);

/*
 * PowerSGD's low-rank products (ddp/algorithms/powersgd.c) on f32 row-major matrices: M is
 * rows x cols, P is rows x r and Qt is r x cols (Q transposed, so that every product below
 * walks contiguous rows). Each has a CUDA twin in kernels/cuda/lowrank.cu that performs the
 * same operations in the same order, so CPU and GPU ranks compute the same bits:
 *   mq:   P[i][k] = sum_j M[i][j] Qt[k][j], summed in 8 lanes (lane j % 8, in order of j),
 *         the lanes then added as ((0+1)+(2+3))+((4+5)+(6+7)): a fixed order that the
 *         compiler can still vectorise;
 *   mtp:  Qt[k][j] = sum_i P[i][k] M[i][j], in order of i (Q = M^T P);
 *   pqt:  Mhat[i][j] = sum_k P[i][k] Qt[k][j], in order of k; with err, err = M - Mhat is
 *         written first; then M = Mhat;
 *   orthonormalise: modified Gram-Schmidt over P's r columns as torch's PowerSGD hook does
 *         it: col_i /= (|col_i| + eps), then every later column loses its projection on
 *         col_i. Norms and dot products are accumulated in double over
 *         BAGUA__LOWRANK_LANES strided lanes combined by a halving tree (the CUDA block's
 *         reduction). eps > 0 keeps a column of zero norm finite (it stays zero).
 * The buffers must not overlap, except that pqt's M is read and written in place.
 */
#define BAGUA__LOWRANK_LANES 256
void bagua__lowrank_mq(const float *m, size_t rows, size_t cols, const float *qt, size_t r,
                       float *p);
void bagua__lowrank_mtp(const float *m, size_t rows, size_t cols, const float *p, size_t r,
                        float *qt);
void bagua__lowrank_pqt(const float *p, const float *qt, size_t rows, size_t cols, size_t r,
                        float *m, float *err);
void bagua__lowrank_orthonormalise(float *p, size_t rows, size_t r, float eps);
/* n approximately standard normal f32 values from `seed` (splitmix64; each value the sum of 12
 * uniforms minus 6, so only exact IEEE additions and no libm call: the same bits on every
 * host), for PowerSGD's initial Q, which must be identical on all ranks. */
void bagua__randn_f32(uint64_t seed, float *out, size_t n);

#endif
