/*
 * Error checks for the example's .cu files (see the error convention in fm_cuda.h). Each macro
 * returns FM_CUDA_FAILED from the enclosing function, after recording which call failed and
 * the runtime's explanation, so a failure travels up as a return value and is never ignored.
 */
#ifndef FM_CUDA_CHECK_CUH
#define FM_CUDA_CHECK_CUH

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "fm_cuda.h"

/* Records "CALL failed: TEXT (FILE:LINE)" as this thread's last failure; returns
 * FM_CUDA_FAILED. */
int fm_cuda_fail(const char *call, const char *text, const char *file, int line);

#define FM_CUDA_CHECK(call)                                                       \
  do {                                                                            \
    cudaError_t fm_ce_ = (call);                                                  \
    if (fm_ce_ != cudaSuccess)                                                    \
      return fm_cuda_fail(#call, cudaGetErrorString(fm_ce_), __FILE__, __LINE__); \
  } while (0)

#define FM_CUBLAS_CHECK(call)                                                        \
  do {                                                                               \
    cublasStatus_t fm_bs_ = (call);                                                  \
    if (fm_bs_ != CUBLAS_STATUS_SUCCESS)                                             \
      return fm_cuda_fail(#call, cublasGetStatusString(fm_bs_), __FILE__, __LINE__); \
  } while (0)

/* After a kernel launch: a bad launch configuration (or an earlier asynchronous failure that
 * made the context unusable) is reported here, naming the kernel. */
#define FM_CUDA_LAUNCHED(kernel)                                                                \
  do {                                                                                          \
    cudaError_t fm_ce_ = cudaGetLastError();                                                    \
    if (fm_ce_ != cudaSuccess)                                                                  \
      return fm_cuda_fail("launch of " kernel, cudaGetErrorString(fm_ce_), __FILE__, __LINE__); \
  } while (0)

/* Threads per block of the element-wise kernels, and the grid that covers n elements with a
 * grid-stride loop (at most 65535 blocks: every kernel loops, so any n is covered). */
#define FM_CUDA_THREADS 256
static inline unsigned fm_cuda_blocks(size_t n) {
  size_t b = (n + FM_CUDA_THREADS - 1) / FM_CUDA_THREADS;
  return (unsigned)(b == 0 ? 1 : b > 65535 ? 65535 : b);
}

#endif
