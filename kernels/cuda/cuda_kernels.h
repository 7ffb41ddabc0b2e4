/*
 * CUDA kernels: the device counterparts of the CPU kernels in kernels/kernels.h, for buffers in
 * GPU memory. Internal to libbagua (hidden symbols); built only when CUDA is found. Owned by the
 * kernels engineer, like the rest of kernels/.
 *
 * Every entry point enqueues its work on `stream` and returns without waiting for it, like a
 * cudaMemcpyAsync: the buffers must stay valid and untouched by other streams until the stream
 * reaches that point. The return value covers the arguments and the launch only; a fault while
 * the kernel runs surfaces at the next synchronisation, as usual in CUDA. A launch failure is
 * BAGUA_ERR_CUDA with cudaGetErrorString's text in the warning; a bad argument is
 * BAGUA_ERR_INVALID_ARG, and then nothing is enqueued.
 *
 * Buffers: typed pointers (f32, f16, bf16, ...) must be aligned to their element size, as CUDA
 * requires of any device load; nothing more is needed (16-byte alignment only enables the wide
 * loads). Compressed MinMaxUInt8 buffers may have any alignment. A count of 0 enqueues nothing
 * and pointers may then be NULL.
 *
 * Results: each kernel evaluates the same f32 (or f64, or integer) operations in the same order
 * as the scalar CPU oracle (no fused multiply-add: built with --fmad=false; IEEE division and
 * square root), so results are bit-identical to bagua__kernels_force_isa("scalar") for every
 * non-NaN value. Where the CPU contract also pins NaN payloads (reductions, MinMaxUInt8), the
 * device code reproduces what x86 SSE returns (the NaN operand quieted, else the default NaN
 * 0xffc00000) instead of the GPU's canonical 0x7fffffff, so those kernels are bit-identical
 * for every input on an x86 host. axpy, scale and the optimizer steps return some NaN where
 * the CPU returns a NaN (the CPU contract leaves the payload open there too).
 */
#ifndef BAGUA_KERNELS_CUDA_H
#define BAGUA_KERNELS_CUDA_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "bagua/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* kernels.h has no C++ guard of its own; its declarations must keep C linkage here. */
#include "kernels/kernels.h"

/*
 * MinMaxUInt8 in exactly the CPU layout (see bagua__minmax_u8_compress in kernels/kernels.h;
 * bagua__minmax_u8_compressed_size gives the region size). Compressed bytes are identical to
 * the CPU's for every input, so a GPU rank and a CPU rank can exchange them.
 *
 * Compression reads the input once when a chunk has at most 8192 elements (one thread block
 * holds the chunk in registers, reduces min and max, then quantizes) and twice otherwise (a
 * fused min/max pass that writes per-block partial results into the chunk's own payload area,
 * a tiny per-chunk finishing kernel, then the quantizing pass). Bagua reads it three times.
 */
bagua_status_t bagua__cuda_minmax_u8_compress(bagua_dtype_t dt, const void *in, size_t chunk_elems,
                                              size_t n_chunks, void *out, cudaStream_t stream);
bagua_status_t bagua__cuda_minmax_u8_decompress(bagua_dtype_t dt, const void *in,
                                                size_t chunk_elems, size_t n_chunks, void *out,
                                                cudaStream_t stream);
/* acc[c * chunk_elems + j] += decoded value j of region c, in f32 (ByteGrad's reduce step). */
bagua_status_t bagua__cuda_minmax_u8_decompress_add(bagua_dtype_t dt, const void *in,
                                                    size_t chunk_elems, size_t n_chunks, float *acc,
                                                    cudaStream_t stream);

/*
 * dst[i] = (...((srcs[0][i] op srcs[1][i]) op srcs[2][i]) ...) op srcs[n-1][i], bit for bit
 * what bagua__reduce_n gives (f16/bf16 rounded after every step), for every dtype. BAGUA_AVG
 * sums and then divides by n like bagua__div (integers truncate toward zero), so the average
 * of n chunks costs one pass. `srcs` is a host array of n >= 1 device pointers; dst may be the
 * same pointer as any of the first 32 sources (each element is read before it is written), but
 * must not partially overlap any source. n == 1 copies.
 */
bagua_status_t bagua__cuda_reduce_n(bagua_dtype_t dt, bagua_op_t op, void *dst,
                                    const void *const *srcs, int n, size_t count,
                                    cudaStream_t stream);

/*
 * y[i] = y[i] + a * x[i] and x[i] = x[i] * a for F32, F16 or BF16 (the same dtype for x and y),
 * computed in f32 with two roundings and rounded once to the dtype. For F32 this is
 * bagua__axpy / bagua__scale.
 */
bagua_status_t bagua__cuda_axpy(bagua_dtype_t dt, float a, const void *x, void *y, size_t n,
                                cudaStream_t stream);
bagua_status_t bagua__cuda_scale(bagua_dtype_t dt, float a, void *x, size_t n, cudaStream_t stream);

/*
 * Optimizer steps over flat f32 parameters and state, as bagua__sgd_step and bagua__adam_step
 * (same hyper-parameter structs, same host-side double arithmetic). The gradient may be F32,
 * F16 or BF16 (`grad_dt`); half-precision gradients are widened exactly to f32, so the result
 * equals the CPU step applied to the widened gradient.
 */
bagua_status_t bagua__cuda_sgd_step(float *param, const void *grad, bagua_dtype_t grad_dt,
                                    float *momentum_buf, size_t n, const bagua__sgd_params_t *hp,
                                    int first_step, cudaStream_t stream);
bagua_status_t bagua__cuda_adam_step(float *param, const void *grad, bagua_dtype_t grad_dt,
                                     float *exp_avg, float *exp_avg_sq, size_t n,
                                     const bagua__adam_params_t *hp, int64_t step,
                                     cudaStream_t stream);

/*
 * The data-parallel layer's own element-wise steps (ddp_ops.cu), each the f32 arithmetic of
 * its CPU counterpart: buf /= (float)k; QAdam's m = beta1 m + (1 - beta1)(g + wd p)
 * (bagua__qadam_momentum in kernels/kernels.h) and its frozen-variance update
 * (bagua__ddp_qadam_frozen_step); and low-precision decentralized SGD's
 * diff = x + s/3 - (5/3) w (bagua__lpdec_diff in kernels/kernels.h). f32 buffers,
 * element-aligned.
 */
bagua_status_t bagua__cuda_div_f32(float *buf, size_t n, int k, cudaStream_t stream);
bagua_status_t bagua__cuda_qadam_momentum(float *m, const float *g, const float *p, size_t n,
                                          float beta1, float one_minus_beta1, float wd,
                                          cudaStream_t stream);
bagua_status_t bagua__cuda_lpdec_diff(float *diff, const float *x, const float *s, const float *w,
                                      size_t n, cudaStream_t stream);
bagua_status_t bagua__cuda_qadam_frozen(float *p, const float *m, const float *v, size_t n,
                                        double lr, double beta1, double beta2, double eps,
                                        int64_t step, int64_t v_step, cudaStream_t stream);

/* PowerSGD's low-rank products and Gram-Schmidt (lowrank.cu), bagua__lowrank_* of
 * kernels/kernels.h with their order of operations. */
bagua_status_t bagua__cuda_lowrank_mq(const float *m, size_t rows, size_t cols, const float *qt,
                                      size_t r, float *p, cudaStream_t stream);
bagua_status_t bagua__cuda_lowrank_mtp(const float *m, size_t rows, size_t cols, const float *p,
                                       size_t r, float *qt, cudaStream_t stream);
bagua_status_t bagua__cuda_lowrank_pqt(const float *p, const float *qt, size_t rows, size_t cols,
                                       size_t r, float *m, float *err, cudaStream_t stream);
bagua_status_t bagua__cuda_lowrank_orthonormalise(float *p, size_t rows, size_t r, float eps,
                                                  cudaStream_t stream);

/*
 * Number of CUDA devices this process can use; 0 (with *why set to the CUDA error text, which
 * stays valid for the process) when there is no device or no usable driver. `why` may be NULL.
 */
int bagua__cuda_device_count(const char **why);

#ifdef __cplusplus
}
#endif
#endif
