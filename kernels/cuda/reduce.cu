/*
 * Reduction of n device buffers into one (sum, average, min, max), the device counterpart of
 * bagua__reduce_n followed by bagua__div for BAGUA_AVG. One pass reads every source once and
 * writes dst once: (n + 1) buffers of traffic, the minimum.
 *
 * Semantics copied from kernels/cpu/reduce_scalar.c: the sources are folded left to right,
 * `min` is `src < acc ? src : acc` (a NaN already in the accumulator stays), float sums return
 * the NaN operand quieted (the accumulator's if both are NaN), integer sums wrap, f16/bf16 are
 * rounded back to their format after every step and a NaN is stored as that format's canonical
 * quiet NaN with its sign. AVG divides once at the end, in the element's arithmetic.
 */
#include "common.cuh"

enum { RD_MAX_SRCS = 32, RD_BLOCK = 256 };
enum { RD_SUM = 0, RD_MIN = 1, RD_MAX = 2 };

/* Source pointers travel by value in the kernel's parameter space (256 bytes). */
struct rd_srcs {
  const void *p[RD_MAX_SRCS];
};

static __device__ __forceinline__ float rd_sum(float x, float y) {
  return bg_x86_add(x, y);
}
static __device__ __forceinline__ double rd_sum(double x, double y) {
  return bg_x86_add_f64(x, y);
}
static __device__ __forceinline__ int32_t rd_sum(int32_t x, int32_t y) {
  return (int32_t)((uint32_t)x + (uint32_t)y);
}
static __device__ __forceinline__ int64_t rd_sum(int64_t x, int64_t y) {
  return (int64_t)((uint64_t)x + (uint64_t)y);
}
static __device__ __forceinline__ uint8_t rd_sum(uint8_t x, uint8_t y) {
  return (uint8_t)(x + y);
}

static __device__ __forceinline__ float rd_div(float x, int n) {
  return bg_x86_div(x, (float)n);
}
static __device__ __forceinline__ double rd_div(double x, int n) {
  return bg_x86_div_f64(x, (double)n);
}
static __device__ __forceinline__ int32_t rd_div(int32_t x, int n) {
  return x / n;
}
static __device__ __forceinline__ int64_t rd_div(int64_t x, int n) {
  return x / n;
}
static __device__ __forceinline__ uint8_t rd_div(uint8_t x, int n) {
  return (uint8_t)(x / n);
}

/* x is the accumulator (the CPU's `a`), y the incoming source (`b`). */
template <int OP, typename C>
static __device__ __forceinline__ C rd_combine(C x, C y) {
  if constexpr (OP == RD_MIN)
    return y < x ? y : x;
  else if constexpr (OP == RD_MAX)
    return y > x ? y : x;
  else
    return rd_sum(x, y);
}

/*
 * Folds one element of every source. The accumulator goes through the storage format after
 * each step because the CPU oracle stores dst and loads it again between sources.
 */
template <int DT, int OP>
static __device__ __forceinline__ typename bg_dt<DT>::S rd_element(typename bg_dt<DT>::S first,
                                                                   const rd_srcs &srcs, int n,
                                                                   size_t i, int divisor) {
  typedef bg_dt<DT> D;
  typedef typename D::S S;
  typedef typename D::C C;
  C acc = D::ld(first);
  for (int k = 1; k < n; k++)
    acc = D::ld(D::st(rd_combine<OP>(acc, D::ld(((const S *)srcs.p[k])[i]))));
  return divisor > 1 ? D::st(rd_div(acc, divisor)) : D::st(acc);
}

template <int DT, int OP>
__global__ void __launch_bounds__(RD_BLOCK)
    rd_kernel(void *dst_, rd_srcs srcs, int n, size_t count, int divisor, int vec) {
  typedef bg_dt<DT> D;
  typedef typename D::S S;
  typedef typename D::C C;
  const int pe = 16 / sizeof(S);
  S *dst = (S *)dst_;
  size_t tid = bg_tid_x(), nth = bg_nthreads_x(), head = 0;
  if (vec) {
    size_t npacks = count / pe;
    for (size_t k = tid; k < npacks; k += nth) {
      bg_pack<S> a, b;
      C acc[16 / sizeof(S)];
      a.u = ((const uint4 *)srcs.p[0])[k];
#pragma unroll
      for (int j = 0; j < pe; j++) acc[j] = D::ld(a.v[j]);
      for (int s = 1; s < n; s++) {
        b.u = ((const uint4 *)srcs.p[s])[k];
#pragma unroll
        for (int j = 0; j < pe; j++) acc[j] = D::ld(D::st(rd_combine<OP>(acc[j], D::ld(b.v[j]))));
      }
#pragma unroll
      for (int j = 0; j < pe; j++)
        a.v[j] = divisor > 1 ? D::st(rd_div(acc[j], divisor)) : D::st(acc[j]);
      ((uint4 *)dst)[k] = a.u;
    }
    head = npacks * pe;
  }
  for (size_t i = head + tid; i < count; i += nth)
    dst[i] = rd_element<DT, OP>(((const S *)srcs.p[0])[i], srcs, n, i, divisor);
}

typedef void (*rd_kernel_fn)(void *, rd_srcs, int, size_t, int, int);

#define RD_ROW(dt) \
  { rd_kernel<dt, RD_SUM>, rd_kernel<dt, RD_MIN>, rd_kernel<dt, RD_MAX> }
/* Indexed by bagua_dtype_t (F32, F16, BF16, F64, I32, I64, U8) and RD_SUM/MIN/MAX. */
static const rd_kernel_fn k_rd[BAGUA_DTYPE__COUNT][3] = {
    RD_ROW(BAGUA_F32), RD_ROW(BAGUA_F16), RD_ROW(BAGUA_BF16), RD_ROW(BAGUA_F64),
    RD_ROW(BAGUA_I32), RD_ROW(BAGUA_I64), RD_ROW(BAGUA_U8)};
#undef RD_ROW
static_assert(BAGUA_F32 == 0 && BAGUA_F16 == 1 && BAGUA_BF16 == 2 && BAGUA_F64 == 3 &&
                  BAGUA_I32 == 4 && BAGUA_I64 == 5 && BAGUA_U8 == 6,
              "k_rd rows follow bagua_dtype_t");

extern "C" bagua_status_t bagua__cuda_reduce_n(bagua_dtype_t dt, bagua_op_t op, void *dst,
                                               const void *const *srcs, int n, size_t count,
                                               cudaStream_t stream) {
  if ((unsigned)dt >= BAGUA_DTYPE__COUNT || (unsigned)op >= BAGUA_OP__COUNT || n < 1 ||
      srcs == NULL) {
    BAGUA_WARN("cuda reduce_n: bad argument (dtype %d, op %d, n %d, srcs %p)", (int)dt, (int)op, n,
               (const void *)srcs);
    return BAGUA_ERR_INVALID_ARG;
  }
  if (count == 0) return BAGUA_OK;
  size_t es = bagua_dtype_size(dt);
  int aligned16 = !bg_misaligned(dst, 16);
  for (int k = 0; k < n; k++) {
    if (srcs[k] == NULL || dst == NULL || bg_misaligned(srcs[k], es) || bg_misaligned(dst, es)) {
      BAGUA_WARN("cuda reduce_n: source %d (%p) or dst (%p) is NULL or not aligned to %zu bytes", k,
                 srcs[k], dst, es);
      return BAGUA_ERR_INVALID_ARG;
    }
    aligned16 = aligned16 && !bg_misaligned(srcs[k], 16);
  }
  if (n == 1) {
    if (dst == srcs[0]) return BAGUA_OK;
    return bagua__cuda_status(
        cudaMemcpyAsync(dst, srcs[0], count * es, cudaMemcpyDeviceToDevice, stream),
        "cuda reduce_n: cudaMemcpyAsync");
  }
  int kop = op == BAGUA_MIN ? RD_MIN : op == BAGUA_MAX ? RD_MAX : RD_SUM;
  rd_kernel_fn fn = k_rd[dt][kop];
  unsigned grid =
      bagua__cuda_blocks(aligned16 ? (count + 16 / es - 1) / (16 / es) : count, RD_BLOCK, 1u << 20);
  /*
   * More than RD_MAX_SRCS sources: later passes fold further sources into dst, which is the
   * CPU's order exactly since the CPU also keeps its running result in dst.
   */
  int done = 0;
  while (done < n) {
    rd_srcs a;
    int m = 0;
    if (done > 0) a.p[m++] = dst;
    while (m < RD_MAX_SRCS && done < n) a.p[m++] = srcs[done++];
    int divisor = (op == BAGUA_AVG && done == n) ? n : 1;
    fn<<<grid, RD_BLOCK, 0, stream>>>(dst, a, m, count, divisor, aligned16);
    bagua_status_t st = bagua__cuda_check_launch("reduce_n");
    if (st != BAGUA_OK) return st;
  }
  return BAGUA_OK;
}
