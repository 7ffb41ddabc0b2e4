/*
 * Element-wise kernels that only the data-parallel layer needs on a GPU (ddp/dev_cuda.c):
 * division by a rank count, QAdam's momentum update and frozen-variance step, and the weight
 * difference of low-precision decentralized SGD. Each performs the f32 operations of its CPU
 * counterpart in ddp/ (dev_cpu.c, optim.c) in the same order; with --fmad=false and IEEE
 * division and square root the results are bit-identical for finite values.
 */
#include "common.cuh"

enum { DDP_BLOCK = 256 };

static unsigned grid_for(size_t n) {
  return bagua__cuda_blocks(n, DDP_BLOCK, 1u << 20);
}

__global__ void __launch_bounds__(DDP_BLOCK) div_kernel(float *buf, size_t n, float k) {
  for (size_t i = bg_tid_x(); i < n; i += bg_nthreads_x()) buf[i] = buf[i] / k;
}

__global__ void __launch_bounds__(DDP_BLOCK)
    qadam_momentum_kernel(float *m, const float *g, const float *p, size_t n, float beta1,
                          float one_minus_beta1, float wd) {
  for (size_t i = bg_tid_x(); i < n; i += bg_nthreads_x())
    m[i] = beta1 * m[i] + one_minus_beta1 * (g[i] + wd * p[i]);
}

__global__ void __launch_bounds__(DDP_BLOCK)
    lpdec_diff_kernel(float *diff, const float *x, const float *s, const float *w, size_t n) {
  const float third = 1.0f / 3.0f, five_thirds = 5.0f / 3.0f;
  for (size_t i = bg_tid_x(); i < n; i += bg_nthreads_x())
    diff[i] = x[i] + s[i] * third - five_thirds * w[i];
}

__global__ void __launch_bounds__(DDP_BLOCK)
    qadam_frozen_kernel(float *p, const float *m, const float *v, size_t n, float step_size,
                        float bias2_sqrt, float e) {
  for (size_t i = bg_tid_x(); i < n; i += bg_nthreads_x())
    p[i] = p[i] - step_size * m[i] / (sqrtf(v[i]) / bias2_sqrt + e);
}

extern "C" bagua_status_t bagua__cuda_div_f32(float *buf, size_t n, int k, cudaStream_t stream) {
  if (n == 0) return BAGUA_OK;
  if (k <= 0) {
    BAGUA_WARN("cuda div: divisor %d is invalid; accepted: >= 1", k);
    return BAGUA_ERR_INVALID_ARG;
  }
  /* The CPU divides by (float)divisor, so the device does too. */
  div_kernel<<<grid_for(n), DDP_BLOCK, 0, stream>>>(buf, n, (float)k);
  return bagua__cuda_check_launch("div");
}

extern "C" bagua_status_t bagua__cuda_qadam_momentum(float *m, const float *g, const float *p,
                                                     size_t n, float beta1, float one_minus_beta1,
                                                     float wd, cudaStream_t stream) {
  if (n == 0) return BAGUA_OK;
  qadam_momentum_kernel<<<grid_for(n), DDP_BLOCK, 0, stream>>>(m, g, p, n, beta1, one_minus_beta1,
                                                               wd);
  return bagua__cuda_check_launch("qadam_momentum");
}

extern "C" bagua_status_t bagua__cuda_lpdec_diff(float *diff, const float *x, const float *s,
                                                 const float *w, size_t n, cudaStream_t stream) {
  if (n == 0) return BAGUA_OK;
  lpdec_diff_kernel<<<grid_for(n), DDP_BLOCK, 0, stream>>>(diff, x, s, w, n);
  return bagua__cuda_check_launch("lpdec_diff");
}

extern "C" bagua_status_t bagua__cuda_qadam_frozen(float *p, const float *m, const float *v,
                                                   size_t n, double lr, double beta1, double beta2,
                                                   double eps, int64_t step, int64_t v_step,
                                                   cudaStream_t stream) {
  if (n == 0) return BAGUA_OK;
  /* The host-side double arithmetic of bagua__ddp_qadam_frozen_step, to the same floats. */
  double bc1 = 1.0 - pow(beta1, (double)step);
  double bc2 = 1.0 - pow(beta2, (double)(v_step < step ? v_step : step));
  float step_size = (float)(lr / bc1);
  float bias2_sqrt = (float)sqrt(bc2);
  qadam_frozen_kernel<<<grid_for(n), DDP_BLOCK, 0, stream>>>(p, m, v, n, step_size, bias2_sqrt,
                                                             (float)eps);
  return bagua__cuda_check_launch("qadam_frozen");
}
