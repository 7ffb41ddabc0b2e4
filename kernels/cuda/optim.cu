/*
 * axpy, scale, SGD and Adam/AdamW over flat device buffers. Each element runs the statements
 * of kernels/cpu/optim_scalar.c in the same order, one f32 operation each (the directory is
 * built with --fmad=false, so no multiply-add is fused), and the hyper-parameters go through
 * the same double-precision host arithmetic as kernels/cpu/dispatch.c before being rounded to
 * f32 once, so results equal the scalar CPU oracle bit for bit for non-NaN values.
 */
#include <math.h>

#include "common.cuh"

enum { OP_BLOCK = 256 };

/* The constants dispatch.c derives; kept identical field by field. */
struct sgd_consts {
  float lr, weight_decay, momentum, one_minus_dampening;
  int nesterov, first_step;
};

struct adam_consts {
  float beta1, one_minus_beta1, beta2, one_minus_beta2, eps;
  float step_size;  /* lr / (1 - beta1^step) */
  float bias2_sqrt; /* sqrt(1 - beta2^step) */
  float weight_decay, decay;
  int decoupled;
};

/* Four consecutive elements from a 16-byte (f32) or 8-byte (f16, bf16) aligned address. */
template <int DT>
static __device__ __forceinline__ void ld4(const typename bg_dt<DT>::S *p, float *x) {
  typedef bg_dt<DT> D;
  if constexpr (sizeof(typename D::S) == 4) {
    float4 v = *(const float4 *)p;
    x[0] = D::ld(v.x), x[1] = D::ld(v.y), x[2] = D::ld(v.z), x[3] = D::ld(v.w);
  } else {
    union {
      uint2 u;
      typename D::S h[4];
    } v;
    v.u = *(const uint2 *)p;
    for (int j = 0; j < 4; j++) x[j] = D::ld(v.h[j]);
  }
}

template <int DT>
static __device__ __forceinline__ void st4(typename bg_dt<DT>::S *p, const float *x) {
  typedef bg_dt<DT> D;
  if constexpr (sizeof(typename D::S) == 4) {
    *(float4 *)p = make_float4(x[0], x[1], x[2], x[3]);
  } else {
    union {
      uint2 u;
      typename D::S h[4];
    } v;
    for (int j = 0; j < 4; j++) v.h[j] = D::st(x[j]);
    *(uint2 *)p = v.u;
  }
}

static __device__ __forceinline__ void ldf4(const float *p, float *x) {
  float4 v = *(const float4 *)p;
  x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
}
static __device__ __forceinline__ void stf4(float *p, const float *x) {
  *(float4 *)p = make_float4(x[0], x[1], x[2], x[3]);
}

/* ---------------------------------------------------------------------------------------- */
/* Per-element statements (optim_scalar.c)                                                  */
/* ---------------------------------------------------------------------------------------- */

static __device__ __forceinline__ void sgd_elem(float *p, float g, float *buf,
                                                const sgd_consts &c) {
  float d = g;
  if (c.weight_decay != 0.0f) d = d + c.weight_decay * *p;
  if (c.momentum != 0.0f) {
    float b = c.first_step ? d : *buf * c.momentum + c.one_minus_dampening * d;
    *buf = b;
    d = c.nesterov ? d + c.momentum * b : b;
  }
  *p = *p - c.lr * d;
}

static __device__ __forceinline__ void adam_elem(float *p_, float g, float *m, float *v,
                                                 const adam_consts &c) {
  float p = *p_;
  if (c.decoupled)
    p = p * c.decay;
  else if (c.weight_decay != 0.0f)
    g = g + c.weight_decay * p;
  float mi = c.beta1 * *m + c.one_minus_beta1 * g;
  float vi = c.beta2 * *v + c.one_minus_beta2 * g * g;
  float denom = sqrtf(vi) / c.bias2_sqrt + c.eps;
  *m = mi;
  *v = vi;
  *p_ = p - c.step_size * mi / denom;
}

/* ---------------------------------------------------------------------------------------- */
/* Kernels: four elements per thread step when every buffer allows wide accesses            */
/* ---------------------------------------------------------------------------------------- */

template <int DT>
__global__ void __launch_bounds__(OP_BLOCK)
    axpy_kernel(float a, const typename bg_dt<DT>::S *x, typename bg_dt<DT>::S *y, size_t n,
                int vec) {
  typedef bg_dt<DT> D;
  size_t tid = bg_tid_x(), nth = bg_nthreads_x(), head = 0;
  if (vec) {
    for (size_t k = tid; k < n / 4; k += nth) {
      float xv[4], yv[4];
      ld4<DT>(x + 4 * k, xv);
      ld4<DT>(y + 4 * k, yv);
#pragma unroll
      for (int j = 0; j < 4; j++) yv[j] = yv[j] + a * xv[j];
      st4<DT>(y + 4 * k, yv);
    }
    head = n / 4 * 4;
  }
  for (size_t i = head + tid; i < n; i += nth) y[i] = D::st(D::ld(y[i]) + a * D::ld(x[i]));
}

template <int DT>
__global__ void __launch_bounds__(OP_BLOCK)
    scale_kernel(float a, typename bg_dt<DT>::S *x, size_t n, int vec) {
  typedef bg_dt<DT> D;
  size_t tid = bg_tid_x(), nth = bg_nthreads_x(), head = 0;
  if (vec) {
    for (size_t k = tid; k < n / 4; k += nth) {
      float xv[4];
      ld4<DT>(x + 4 * k, xv);
#pragma unroll
      for (int j = 0; j < 4; j++) xv[j] = xv[j] * a;
      st4<DT>(x + 4 * k, xv);
    }
    head = n / 4 * 4;
  }
  for (size_t i = head + tid; i < n; i += nth) x[i] = D::st(D::ld(x[i]) * a);
}

template <int GDT>
__global__ void __launch_bounds__(OP_BLOCK)
    sgd_kernel(float *param, const typename bg_dt<GDT>::S *grad, float *buf, size_t n, sgd_consts c,
               int vec) {
  typedef bg_dt<GDT> G;
  int use_buf = c.momentum != 0.0f;
  size_t tid = bg_tid_x(), nth = bg_nthreads_x(), head = 0;
  if (vec) {
    for (size_t k = tid; k < n / 4; k += nth) {
      float p[4], g[4], b[4] = {0, 0, 0, 0};
      ldf4(param + 4 * k, p);
      ld4<GDT>(grad + 4 * k, g);
      /* On the first step the buffer is only written, as on the CPU. */
      if (use_buf && !c.first_step) ldf4(buf + 4 * k, b);
#pragma unroll
      for (int j = 0; j < 4; j++) sgd_elem(&p[j], g[j], &b[j], c);
      stf4(param + 4 * k, p);
      if (use_buf) stf4(buf + 4 * k, b);
    }
    head = n / 4 * 4;
  }
  for (size_t i = head + tid; i < n; i += nth) {
    float p = param[i], b = use_buf && !c.first_step ? buf[i] : 0.0f;
    sgd_elem(&p, G::ld(grad[i]), &b, c);
    param[i] = p;
    if (use_buf) buf[i] = b;
  }
}

template <int GDT>
__global__ void __launch_bounds__(OP_BLOCK)
    adam_kernel(float *param, const typename bg_dt<GDT>::S *grad, float *m, float *v, size_t n,
                adam_consts c, int vec) {
  typedef bg_dt<GDT> G;
  size_t tid = bg_tid_x(), nth = bg_nthreads_x(), head = 0;
  if (vec) {
    for (size_t k = tid; k < n / 4; k += nth) {
      float p[4], g[4], mv[4], vv[4];
      ldf4(param + 4 * k, p);
      ld4<GDT>(grad + 4 * k, g);
      ldf4(m + 4 * k, mv);
      ldf4(v + 4 * k, vv);
#pragma unroll
      for (int j = 0; j < 4; j++) adam_elem(&p[j], g[j], &mv[j], &vv[j], c);
      stf4(param + 4 * k, p);
      stf4(m + 4 * k, mv);
      stf4(v + 4 * k, vv);
    }
    head = n / 4 * 4;
  }
  for (size_t i = head + tid; i < n; i += nth) {
    float p = param[i], mi = m[i], vi = v[i];
    adam_elem(&p, G::ld(grad[i]), &mi, &vi, c);
    param[i] = p;
    m[i] = mi;
    v[i] = vi;
  }
}

/* ---------------------------------------------------------------------------------------- */
/* Entry points                                                                             */
/* ---------------------------------------------------------------------------------------- */

/* F32, F16 or BF16 buffer of n elements, element-aligned; 16-byte alignment noted in *vec. */
static bagua_status_t check_buf(const char *what, const char *name, bagua_dtype_t dt, const void *p,
                                size_t n, int *vec) {
  size_t es = bg_quant_elem_size(dt);
  if (es == 0) {
    BAGUA_WARN("%s: %s has dtype %d; only f32, f16 and bf16 are supported", what, name, (int)dt);
    return BAGUA_ERR_INVALID_ARG;
  }
  if (n == 0) return BAGUA_OK;
  if (p == NULL || bg_misaligned(p, es)) {
    BAGUA_WARN("%s: %s (%p) is NULL or not aligned to its %zu-byte elements", what, name, p, es);
    return BAGUA_ERR_INVALID_ARG;
  }
  /* Four elements per wide access: 16 bytes of f32, 8 bytes of f16/bf16. */
  if (bg_misaligned(p, 4 * es)) *vec = 0;
  return BAGUA_OK;
}

static unsigned op_grid(size_t n, int vec) {
  return bagua__cuda_blocks(vec ? (n + 3) / 4 : n, OP_BLOCK, 1u << 20);
}

extern "C" bagua_status_t bagua__cuda_axpy(bagua_dtype_t dt, float a, const void *x, void *y,
                                           size_t n, cudaStream_t stream) {
  int vec = 1;
  bagua_status_t st = check_buf("cuda axpy", "x", dt, x, n, &vec);
  if (st == BAGUA_OK) st = check_buf("cuda axpy", "y", dt, y, n, &vec);
  if (st != BAGUA_OK || n == 0) return st;
  unsigned grid = op_grid(n, vec);
  if (dt == BAGUA_F32)
    axpy_kernel<BAGUA_F32><<<grid, OP_BLOCK, 0, stream>>>(a, (const float *)x, (float *)y, n, vec);
  else if (dt == BAGUA_F16)
    axpy_kernel<BAGUA_F16>
        <<<grid, OP_BLOCK, 0, stream>>>(a, (const uint16_t *)x, (uint16_t *)y, n, vec);
  else
    axpy_kernel<BAGUA_BF16>
        <<<grid, OP_BLOCK, 0, stream>>>(a, (const uint16_t *)x, (uint16_t *)y, n, vec);
  return bagua__cuda_check_launch("axpy");
}

extern "C" bagua_status_t bagua__cuda_scale(bagua_dtype_t dt, float a, void *x, size_t n,
                                            cudaStream_t stream) {
  int vec = 1;
  bagua_status_t st = check_buf("cuda scale", "x", dt, x, n, &vec);
  if (st != BAGUA_OK || n == 0) return st;
  unsigned grid = op_grid(n, vec);
  if (dt == BAGUA_F32)
    scale_kernel<BAGUA_F32><<<grid, OP_BLOCK, 0, stream>>>(a, (float *)x, n, vec);
  else if (dt == BAGUA_F16)
    scale_kernel<BAGUA_F16><<<grid, OP_BLOCK, 0, stream>>>(a, (uint16_t *)x, n, vec);
  else
    scale_kernel<BAGUA_BF16><<<grid, OP_BLOCK, 0, stream>>>(a, (uint16_t *)x, n, vec);
  return bagua__cuda_check_launch("scale");
}

extern "C" bagua_status_t bagua__cuda_sgd_step(float *param, const void *grad,
                                               bagua_dtype_t grad_dt, float *momentum_buf, size_t n,
                                               const bagua__sgd_params_t *hp, int first_step,
                                               cudaStream_t stream) {
  int vec = 1;
  if (hp == NULL) {
    BAGUA_WARN("cuda sgd_step: NULL hyper-parameters");
    return BAGUA_ERR_INVALID_ARG;
  }
  sgd_consts c;
  c.lr = (float)hp->lr;
  c.weight_decay = (float)hp->weight_decay;
  c.momentum = (float)hp->momentum;
  c.one_minus_dampening = (float)(1.0 - hp->dampening);
  c.nesterov = hp->nesterov != 0;
  c.first_step = first_step != 0;
  bagua_status_t st = check_buf("cuda sgd_step", "param", BAGUA_F32, param, n, &vec);
  if (st == BAGUA_OK) st = check_buf("cuda sgd_step", "grad", grad_dt, grad, n, &vec);
  if (st == BAGUA_OK && c.momentum != 0.0f)
    st = check_buf("cuda sgd_step", "momentum_buf", BAGUA_F32, momentum_buf, n, &vec);
  if (st != BAGUA_OK || n == 0) return st;
  unsigned grid = op_grid(n, vec);
  if (grad_dt == BAGUA_F32)
    sgd_kernel<BAGUA_F32>
        <<<grid, OP_BLOCK, 0, stream>>>(param, (const float *)grad, momentum_buf, n, c, vec);
  else if (grad_dt == BAGUA_F16)
    sgd_kernel<BAGUA_F16>
        <<<grid, OP_BLOCK, 0, stream>>>(param, (const uint16_t *)grad, momentum_buf, n, c, vec);
  else
    sgd_kernel<BAGUA_BF16>
        <<<grid, OP_BLOCK, 0, stream>>>(param, (const uint16_t *)grad, momentum_buf, n, c, vec);
  return bagua__cuda_check_launch("sgd_step");
}

extern "C" bagua_status_t bagua__cuda_adam_step(float *param, const void *grad,
                                                bagua_dtype_t grad_dt, float *exp_avg,
                                                float *exp_avg_sq, size_t n,
                                                const bagua__adam_params_t *hp, int64_t step,
                                                cudaStream_t stream) {
  int vec = 1;
  if (hp == NULL) {
    BAGUA_WARN("cuda adam_step: NULL hyper-parameters");
    return BAGUA_ERR_INVALID_ARG;
  }
  /* Exactly dispatch.c's expressions (the host code is built with -ffp-contract=off). */
  double bc1 = 1.0 - pow(hp->beta1, (double)step);
  double bc2 = 1.0 - pow(hp->beta2, (double)step);
  adam_consts c;
  c.beta1 = (float)hp->beta1;
  c.one_minus_beta1 = (float)(1.0 - hp->beta1);
  c.beta2 = (float)hp->beta2;
  c.one_minus_beta2 = (float)(1.0 - hp->beta2);
  c.eps = (float)hp->eps;
  c.step_size = (float)(hp->lr / bc1);
  c.bias2_sqrt = (float)sqrt(bc2);
  c.weight_decay = (float)hp->weight_decay;
  c.decay = (float)(1.0 - hp->lr * hp->weight_decay);
  c.decoupled = hp->decoupled != 0;
  bagua_status_t st = check_buf("cuda adam_step", "param", BAGUA_F32, param, n, &vec);
  if (st == BAGUA_OK) st = check_buf("cuda adam_step", "grad", grad_dt, grad, n, &vec);
  if (st == BAGUA_OK) st = check_buf("cuda adam_step", "exp_avg", BAGUA_F32, exp_avg, n, &vec);
  if (st == BAGUA_OK)
    st = check_buf("cuda adam_step", "exp_avg_sq", BAGUA_F32, exp_avg_sq, n, &vec);
  if (st != BAGUA_OK || n == 0) return st;
  unsigned grid = op_grid(n, vec);
  if (grad_dt == BAGUA_F32)
    adam_kernel<BAGUA_F32>
        <<<grid, OP_BLOCK, 0, stream>>>(param, (const float *)grad, exp_avg, exp_avg_sq, n, c, vec);
  else if (grad_dt == BAGUA_F16)
    adam_kernel<BAGUA_F16><<<grid, OP_BLOCK, 0, stream>>>(param, (const uint16_t *)grad, exp_avg,
                                                          exp_avg_sq, n, c, vec);
  else
    adam_kernel<BAGUA_BF16><<<grid, OP_BLOCK, 0, stream>>>(param, (const uint16_t *)grad, exp_avg,
                                                           exp_avg_sq, n, c, vec);
  return bagua__cuda_check_launch("adam_step");
}
