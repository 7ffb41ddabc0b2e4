/*
 * PowerSGD's low-rank products and Gram-Schmidt on the GPU (ddp/dev_cuda.c), the twins of
 * kernels/cpu/lowrank.c: every output element is computed by one thread in exactly the CPU's
 * order of operations (the 8 lanes of mq, the order of i in mtp and of k in pqt), and the
 * Gram-Schmidt reductions use the CPU's BAGUA__LOWRANK_LANES lanes and halving tree as one
 * block's shared-memory reduction, so that with --fmad=false a CPU and a GPU rank agree bit for
 * bit. Simple kernels: the matrices of a bucket are small next to its gradients, and the
 * products are memory-bound at the ranks PowerSGD uses.
 */
#include "common.cuh"

enum { LR_BLOCK = 256 };

static unsigned lr_grid(size_t n) {
  return bagua__cuda_blocks(n, LR_BLOCK, 1u << 20);
}

__global__ void __launch_bounds__(LR_BLOCK)
    mq_kernel(const float *m, size_t rows, size_t cols, const float *qt, size_t r, float *p) {
  for (size_t o = bg_tid_x(); o < rows * r; o += bg_nthreads_x()) {
    size_t i = o / r, k = o % r;
    const float *mi = m + i * cols, *qk = qt + k * cols;
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    size_t j = 0;
    for (; j + 8 <= cols; j += 8)
      for (int l = 0; l < 8; l++) acc[l] += mi[j + l] * qk[j + l];
    for (int l = 0; j < cols; j++, l++) acc[l] += mi[j] * qk[j];
    p[o] = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  }
}

__global__ void __launch_bounds__(LR_BLOCK)
    mtp_kernel(const float *m, size_t rows, size_t cols, const float *p, size_t r, float *qt) {
  for (size_t o = bg_tid_x(); o < r * cols; o += bg_nthreads_x()) {
    size_t k = o / cols, j = o % cols;
    float s = 0.0f;
    for (size_t i = 0; i < rows; i++) s += p[i * r + k] * m[i * cols + j];
    qt[o] = s;
  }
}

__global__ void __launch_bounds__(LR_BLOCK)
    pqt_kernel(const float *p, const float *qt, size_t rows, size_t cols, size_t r, float *m,
               float *err) {
  for (size_t o = bg_tid_x(); o < rows * cols; o += bg_nthreads_x()) {
    size_t i = o / cols, j = o % cols;
    float hat = 0.0f;
    for (size_t k = 0; k < r; k++) hat += p[i * r + k] * qt[k * cols + j];
    if (err) err[o] = m[o] - hat;
    m[o] = hat;
  }
}

/* The lanes-and-tree dot product of kernels/cpu/lowrank.c over one block (every thread gets
 * the result). */
static __device__ double block_dot(const float *a, const float *b, size_t n, size_t stride,
                                   double *sh) {
  unsigned t = threadIdx.x;
  double s = 0.0;
  for (size_t x = t; x < n; x += BAGUA__LOWRANK_LANES)
    s += (double)a[x * stride] * (double)b[x * stride];
  sh[t] = s;
  __syncthreads();
  for (unsigned h = BAGUA__LOWRANK_LANES / 2; h > 0; h /= 2) {
    if (t < h) sh[t] += sh[t + h];
    __syncthreads();
  }
  double v = sh[0];
  __syncthreads();
  return v;
}

/* One block of BAGUA__LOWRANK_LANES threads: the columns are sequential by nature. */
__global__ void __launch_bounds__(BAGUA__LOWRANK_LANES)
    orthonormalise_kernel(float *p, size_t rows, size_t r, float eps) {
  __shared__ double sh[BAGUA__LOWRANK_LANES];
  for (size_t i = 0; i < r; i++) {
    float *ci = p + i;
    float norm = (float)(sqrt(block_dot(ci, ci, rows, r, sh)) + (double)eps);
    for (size_t x = threadIdx.x; x < rows; x += BAGUA__LOWRANK_LANES) ci[x * r] = ci[x * r] / norm;
    __syncthreads();
    for (size_t j = i + 1; j < r; j++) {
      float *cj = p + j;
      float proj = (float)block_dot(ci, cj, rows, r, sh);
      for (size_t x = threadIdx.x; x < rows; x += BAGUA__LOWRANK_LANES)
        cj[x * r] = cj[x * r] - proj * ci[x * r];
      __syncthreads();
    }
  }
}

extern "C" bagua_status_t bagua__cuda_lowrank_mq(const float *m, size_t rows, size_t cols,
                                                 const float *qt, size_t r, float *p,
                                                 cudaStream_t stream) {
  if (rows * r == 0) return BAGUA_OK;
  mq_kernel<<<lr_grid(rows * r), LR_BLOCK, 0, stream>>>(m, rows, cols, qt, r, p);
  return bagua__cuda_check_launch("lowrank_mq");
}

extern "C" bagua_status_t bagua__cuda_lowrank_mtp(const float *m, size_t rows, size_t cols,
                                                  const float *p, size_t r, float *qt,
                                                  cudaStream_t stream) {
  if (r * cols == 0) return BAGUA_OK;
  mtp_kernel<<<lr_grid(r * cols), LR_BLOCK, 0, stream>>>(m, rows, cols, p, r, qt);
  return bagua__cuda_check_launch("lowrank_mtp");
}

extern "C" bagua_status_t bagua__cuda_lowrank_pqt(const float *p, const float *qt, size_t rows,
                                                  size_t cols, size_t r, float *m, float *err,
                                                  cudaStream_t stream) {
  if (rows * cols == 0) return BAGUA_OK;
  pqt_kernel<<<lr_grid(rows * cols), LR_BLOCK, 0, stream>>>(p, qt, rows, cols, r, m, err);
  return bagua__cuda_check_launch("lowrank_pqt");
}

extern "C" bagua_status_t bagua__cuda_lowrank_orthonormalise(float *p, size_t rows, size_t r,
                                                             float eps, cudaStream_t stream) {
  if (rows * r == 0) return BAGUA_OK;
  orthonormalise_kernel<<<1, BAGUA__LOWRANK_LANES, 0, stream>>>(p, rows, r, eps);
  return bagua__cuda_check_launch("lowrank_orthonormalise");
}
