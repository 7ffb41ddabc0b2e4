/*
 * MinMaxUInt8 on the GPU, byte for byte the CPU layout and arithmetic (kernels/cpu/dispatch.c
 * and quant_scalar.c): per chunk a 32-byte header (min, max in the source dtype, then zeros),
 * one byte per element, zero padding to a multiple of 32.
 *
 * Bagua computes min and max with two cub::DeviceReduce calls per chunk and then quantizes,
 * reading the input three times with 2 * n_chunks + 1 launches. Here:
 *  - a chunk of at most 8192 elements is handled by one block in one kernel for all chunks:
 *    the block loads its chunk into registers, reduces min and max together, writes the
 *    header and quantizes from registers (one read of the input);
 *  - a larger chunk takes three launches for all chunks together: a fused min/max pass whose
 *    blocks write their partial results into the chunk's own payload area (free until the
 *    quantizer overwrites it, so no workspace is needed), a one-block-per-chunk kernel that
 *    folds the partials and writes the header, and the quantizing pass (two reads in all;
 *    9 bytes of traffic per f32 element instead of 13).
 * Min and max ignore NaN and cannot depend on the reduction order except for the sign of a
 * zero, which the header normalises, so the result equals the sequential CPU scan.
 */
#include "common.cuh"

enum {
  MM_HEADER = 32,
  MM_SMALL_ITEMS = 8,    /* elements per thread held in registers by the one-pass kernel */
  MM_SMALL_MAX = 8192,   /* 1024 threads x MM_SMALL_ITEMS */
  MM_BLOCK = 256,        /* threads per block of the multi-block kernels */
  MM_VEC = 16,           /* elements per thread per step: one 16-byte store of bytes */
  MM_TILE = 4096,        /* elements per block of the min/max pass, at least */
  MM_MAX_PARTIALS = 1024 /* blocks per chunk in the min/max pass */
};

/* The multi-block path stores 8 bytes per partial in a payload of at least MM_SMALL_MAX + 1
 * bytes, so MM_MAX_PARTIALS partials always fit. */
static_assert(8 * MM_MAX_PARTIALS <= MM_SMALL_MAX, "partials must fit in the payload area");

struct mm_params {
  float scale, upper, lower;
};

/*
 * Bagua's constants, in f32 as kernels/cpu/internal.h computes them; the x86 NaN rules matter
 * only for chunks with infinite or no finite values, whose decoded NaNs then carry the same
 * bits as on the CPU.
 */
static __device__ __forceinline__ mm_params mm_params_from(float mn, float mx) {
  mm_params p;
  float s = bg_x86_div(255.0f, bg_x86_add(bg_x86_sub(mx, mn), 1e-7f));
  float u = bg_x86_rint(bg_x86_mul(mx, s));
  p.scale = s;
  p.upper = u;
  p.lower = bg_x86_sub(u, 255.0f);
  return p;
}

/* quant_scalar.c's clamp order, so that NaN elements and NaN constants give the same byte. */
static __device__ __forceinline__ uint8_t mm_quantize(float x, const mm_params &p) {
  float t = rintf(x * p.scale);
  t = t < p.upper ? t : p.upper;
  float r = t - p.lower;
  r = r < 255.0f ? r : 255.0f;
  return r > 0.0f ? (uint8_t)(int)r : (uint8_t)0;
}

static __device__ __forceinline__ float mm_dequantize(uint8_t q, const mm_params &p) {
  return bg_x86_div(bg_x86_add((float)q, p.lower), p.scale);
}

/* The compressed buffer may have any alignment, so header fields move byte by byte. */
template <typename T>
static __device__ __forceinline__ void mm_put(unsigned char *p, T v) {
  const unsigned char *b = (const unsigned char *)&v;
#pragma unroll
  for (int i = 0; i < (int)sizeof(T); i++) p[i] = b[i];
}
template <typename T>
static __device__ __forceinline__ T mm_get(const unsigned char *p) {
  T v;
  unsigned char *b = (unsigned char *)&v;
#pragma unroll
  for (int i = 0; i < (int)sizeof(T); i++) b[i] = p[i];
  return v;
}

/*
 * Writes a region's header from the scanned min and max and returns the constants derived from
 * the stored values, exactly as the decompressor will derive them. One thread.
 */
template <int DT>
static __device__ mm_params mm_write_header(unsigned char *reg, float lo, float hi) {
  typedef bg_dt<DT> D;
  typedef typename D::S S;
  lo += 0.0f; /* -0 becomes +0 */
  hi += 0.0f;
  S smin = D::st(lo), smax = D::st(hi);
#pragma unroll
  for (int i = 0; i < MM_HEADER; i++) reg[i] = 0;
  mm_put<S>(reg, smin);
  mm_put<S>(reg + sizeof(S), smax);
  return mm_params_from(D::ld(smin), D::ld(smax));
}

template <int DT>
static __device__ __forceinline__ mm_params mm_read_params(const unsigned char *reg) {
  typedef bg_dt<DT> D;
  typedef typename D::S S;
  return mm_params_from(D::ld(mm_get<S>(reg)), D::ld(mm_get<S>(reg + sizeof(S))));
}

/* Loads MM_VEC consecutive elements starting at a 16-byte aligned address. */
template <int DT>
static __device__ __forceinline__ void mm_load_vec(const typename bg_dt<DT>::S *src, float *x) {
  typedef bg_dt<DT> D;
  typedef typename D::S S;
  const int pe = 16 / sizeof(S);
  const uint4 *vp = (const uint4 *)src;
#pragma unroll
  for (int w = 0; w < MM_VEC / pe; w++) {
    bg_pack<S> pk;
    pk.u = vp[w];
#pragma unroll
    for (int j = 0; j < pe; j++) x[w * pe + j] = D::ld(pk.v[j]);
  }
}

/* ---------------------------------------------------------------------------------------- */
/* One pass: a block per chunk                                                              */
/* ---------------------------------------------------------------------------------------- */

template <int DT>
__global__ void __launch_bounds__(1024)
    mm_compress_small(const typename bg_dt<DT>::S *in, size_t chunk, size_t n_chunks,
                      unsigned char *out, size_t stride) {
  typedef bg_dt<DT> D;
  __shared__ mm_params s_p;
  for (size_t c = blockIdx.x; c < n_chunks; c += gridDim.x) {
    const typename D::S *src = in + c * chunk;
    unsigned char *reg = out + c * stride;
    float v[MM_SMALL_ITEMS];
    float lo = INFINITY, hi = -INFINITY;
#pragma unroll
    for (int k = 0; k < MM_SMALL_ITEMS; k++) {
      size_t i = (size_t)k * blockDim.x + threadIdx.x;
      v[k] = 0.0f;
      if (i < chunk) {
        v[k] = D::ld(src[i]);
        lo = fminf(lo, v[k]);
        hi = fmaxf(hi, v[k]);
      }
    }
    bg_block_minmax(&lo, &hi);
    if (threadIdx.x == 0) s_p = mm_write_header<DT>(reg, lo, hi);
    __syncthreads();
    mm_params p = s_p;
    unsigned char *q = reg + MM_HEADER;
#pragma unroll
    for (int k = 0; k < MM_SMALL_ITEMS; k++) {
      size_t i = (size_t)k * blockDim.x + threadIdx.x;
      if (i < chunk) q[i] = mm_quantize(v[k], p);
    }
    size_t pad_end = (chunk + 31) & ~(size_t)31;
    for (size_t i = chunk + threadIdx.x; i < pad_end; i += blockDim.x) q[i] = 0;
    /* s_p and the reduction's shared memory are reused for the next chunk. */
    __syncthreads();
  }
}

/* ---------------------------------------------------------------------------------------- */
/* Large chunks: min/max pass, finish, quantize                                             */
/* ---------------------------------------------------------------------------------------- */

template <int DT>
__global__ void __launch_bounds__(MM_BLOCK)
    mm_minmax_partial(const typename bg_dt<DT>::S *in, size_t chunk, size_t n_chunks,
                      unsigned char *out, size_t stride) {
  typedef bg_dt<DT> D;
  typedef typename D::S S;
  const size_t pe = 16 / sizeof(S);
  size_t tid = bg_tid_x(), nth = bg_nthreads_x();
  for (size_t c = blockIdx.y; c < n_chunks; c += gridDim.y) {
    const S *src = in + c * chunk;
    float lo = INFINITY, hi = -INFINITY;
    size_t head = 0;
    if (!bg_misaligned(src, 16)) {
      size_t npacks = chunk / pe;
      const uint4 *vp = (const uint4 *)src;
      for (size_t k = tid; k < npacks; k += nth) {
        bg_pack<S> pk;
        pk.u = vp[k];
#pragma unroll
        for (int j = 0; j < (int)pe; j++) {
          float x = D::ld(pk.v[j]);
          lo = fminf(lo, x);
          hi = fmaxf(hi, x);
        }
      }
      head = npacks * pe;
    }
    for (size_t i = head + tid; i < chunk; i += nth) {
      float x = D::ld(src[i]);
      lo = fminf(lo, x);
      hi = fmaxf(hi, x);
    }
    bg_block_minmax(&lo, &hi);
    if (threadIdx.x == 0) {
      unsigned char *slot = out + c * stride + MM_HEADER + 8 * (size_t)blockIdx.x;
      mm_put<float>(slot, lo);
      mm_put<float>(slot + 4, hi);
    }
    __syncthreads();
  }
}

template <int DT>
__global__ void __launch_bounds__(MM_BLOCK)
    mm_finish_header(size_t n_chunks, unsigned nparts, unsigned char *out, size_t stride) {
  for (size_t c = blockIdx.x; c < n_chunks; c += gridDim.x) {
    unsigned char *reg = out + c * stride;
    float lo = INFINITY, hi = -INFINITY;
    for (unsigned b = threadIdx.x; b < nparts; b += blockDim.x) {
      lo = fminf(lo, mm_get<float>(reg + MM_HEADER + 8 * (size_t)b));
      hi = fmaxf(hi, mm_get<float>(reg + MM_HEADER + 8 * (size_t)b + 4));
    }
    bg_block_minmax(&lo, &hi);
    if (threadIdx.x == 0) (void)mm_write_header<DT>(reg, lo, hi);
    __syncthreads();
  }
}

template <int DT>
__global__ void __launch_bounds__(MM_BLOCK)
    mm_quantize_chunks(const typename bg_dt<DT>::S *in, size_t chunk, size_t n_chunks,
                       unsigned char *out, size_t stride) {
  typedef bg_dt<DT> D;
  typedef typename D::S S;
  __shared__ mm_params s_p;
  size_t tid = bg_tid_x(), nth = bg_nthreads_x();
  for (size_t c = blockIdx.y; c < n_chunks; c += gridDim.y) {
    const S *src = in + c * chunk;
    unsigned char *reg = out + c * stride, *q = reg + MM_HEADER;
    if (threadIdx.x == 0) s_p = mm_read_params<DT>(reg);
    __syncthreads();
    mm_params p = s_p;
    size_t head = 0;
    if (!bg_misaligned(src, 16) && !bg_misaligned(q, 16)) {
      size_t nvec = chunk / MM_VEC;
      for (size_t k = tid; k < nvec; k += nth) {
        float x[MM_VEC];
        mm_load_vec<DT>(src + k * MM_VEC, x);
        bg_pack<uint8_t> o;
#pragma unroll
        for (int j = 0; j < MM_VEC; j++) o.v[j] = mm_quantize(x[j], p);
        ((uint4 *)q)[k] = o.u;
      }
      head = nvec * MM_VEC;
    }
    for (size_t i = head + tid; i < chunk; i += nth) q[i] = mm_quantize(D::ld(src[i]), p);
    if (blockIdx.x == 0) {
      size_t pad_end = (chunk + 31) & ~(size_t)31;
      for (size_t i = chunk + threadIdx.x; i < pad_end; i += blockDim.x) q[i] = 0;
    }
    __syncthreads();
  }
}

/* ---------------------------------------------------------------------------------------- */
/* Decompression                                                                            */
/* ---------------------------------------------------------------------------------------- */

/* The payload bytes of one 16-byte store of decoded elements: 4 for f32, 8 for f16/bf16. */
template <int N>
struct mm_qvec;
template <>
struct mm_qvec<4> {
  typedef uint32_t T;
};
template <>
struct mm_qvec<8> {
  typedef uint2 T;
};

/*
 * ADD = 0: out[c][j] = decoded value in DT; ADD = 1: acc[c][j] += decoded value (f32). The sum
 * is written value + acc because that is the operand order the CPU code ends up with (measured
 * with NaN payloads on x86: when both are NaN, the decoded value's NaN survives).
 */
template <int DT, int ADD>
__global__ void __launch_bounds__(MM_BLOCK)
    mm_decompress_chunks(const unsigned char *in, size_t chunk, size_t n_chunks, void *out_,
                         size_t stride) {
  typedef bg_dt<DT> D;
  typedef typename bg_dt<ADD ? (int)BAGUA_F32 : DT>::S O;
  __shared__ mm_params s_p;
  size_t tid = bg_tid_x(), nth = bg_nthreads_x();
  for (size_t c = blockIdx.y; c < n_chunks; c += gridDim.y) {
    const unsigned char *reg = in + c * stride, *q = reg + MM_HEADER;
    O *dst = (O *)out_ + c * chunk;
    if (threadIdx.x == 0) s_p = mm_read_params<DT>(reg);
    __syncthreads();
    mm_params p = s_p;
    size_t head = 0;
    if (!bg_misaligned(q, 16) && !bg_misaligned(dst, 16)) {
      /* A warp takes a tile of 32 x MM_VEC elements. In store round w, lane l reads pe payload
       * bytes and writes the 16 bytes holding elements w*32*pe + l*pe .. + pe of the tile, so
       * each warp-wide store covers 512 contiguous bytes. (Each lane writing its own 16
       * consecutive elements, as the first version did, spreads every store instruction over
       * 2 KiB in 16-byte pieces: on an H200 that ran at a third of a copy's rate.) Slot k of
       * the loop is lane k % 32 of tile k / 32; threads of a warp hold consecutive k. */
      const int pe = 16 / sizeof(O);
      typedef typename mm_qvec<16 / sizeof(O)>::T QV; /* pe payload bytes */
      size_t ntile = chunk / (32 * MM_VEC);
      for (size_t k = tid; k < ntile * 32; k += nth) {
        size_t base = (k / 32) * (32 * MM_VEC) + (k % 32) * (size_t)pe;
#pragma unroll
        for (int w = 0; w < MM_VEC / pe; w++) {
          size_t e = base + (size_t)w * 32 * pe;
          union {
            QV u;
            uint8_t b[sizeof(QV)];
          } qq;
          qq.u = *(const QV *)(q + e);
          uint4 *vp = (uint4 *)(dst + e);
          bg_pack<O> o;
          if constexpr (ADD) o.u = *vp;
#pragma unroll
          for (int j = 0; j < pe; j++) {
            float v = mm_dequantize(qq.b[j], p);
            if constexpr (ADD)
              o.v[j] = (O)bg_x86_add(v, (float)o.v[j]);
            else
              o.v[j] = D::st(v);
          }
          *vp = o.u;
        }
      }
      head = ntile * 32 * MM_VEC;
    }
    for (size_t i = head + tid; i < chunk; i += nth) {
      float v = mm_dequantize(q[i], p);
      if constexpr (ADD)
        dst[i] = (O)bg_x86_add(v, (float)dst[i]);
      else
        dst[i] = D::st(v);
    }
    __syncthreads();
  }
}

/* ---------------------------------------------------------------------------------------- */
/* Entry points                                                                             */
/* ---------------------------------------------------------------------------------------- */

static bagua_status_t check_args(const char *what, bagua_dtype_t dt, const void *typed,
                                 const void *bytes, size_t chunk, size_t n_chunks, size_t *es) {
  *es = bg_quant_elem_size(dt);
  if (*es == 0) {
    BAGUA_WARN("%s: dtype %d is not f32, f16 or bf16", what, (int)dt);
    return BAGUA_ERR_INVALID_ARG;
  }
  if (chunk == 0 || n_chunks == 0) return BAGUA_OK;
  if (typed == NULL || bytes == NULL) {
    BAGUA_WARN("%s: NULL buffer for %zu chunks of %zu elements", what, n_chunks, chunk);
    return BAGUA_ERR_INVALID_ARG;
  }
  if (bg_misaligned(typed, *es)) {
    BAGUA_WARN("%s: element buffer %p is not aligned to its %zu-byte elements", what, typed, *es);
    return BAGUA_ERR_INVALID_ARG;
  }
  return BAGUA_OK;
}

/* gridDim.y is limited to 65535; the kernels loop over further chunks. */
static unsigned grid_y(size_t n_chunks) {
  return n_chunks > 65535 ? 65535u : (unsigned)n_chunks;
}

template <int DT>
static void launch_compress(const void *in, size_t chunk, size_t n_chunks, unsigned char *out,
                            size_t stride, cudaStream_t s) {
  typedef typename bg_dt<DT>::S S;
  const S *src = (const S *)in;
  if (chunk <= MM_SMALL_MAX) {
    /* Just enough whole warps that MM_SMALL_ITEMS elements per thread cover the chunk. */
    unsigned block = (unsigned)((chunk + MM_SMALL_ITEMS - 1) / MM_SMALL_ITEMS);
    block = (block + 31) & ~31u;
    if (block < 32) block = 32;
    unsigned grid = n_chunks > (1u << 20) ? (1u << 20) : (unsigned)n_chunks;
    mm_compress_small<DT><<<grid, block, 0, s>>>(src, chunk, n_chunks, out, stride);
    return;
  }
  size_t parts = (chunk + MM_TILE - 1) / MM_TILE;
  if (parts > MM_MAX_PARTIALS) parts = MM_MAX_PARTIALS;
  dim3 g1((unsigned)parts, grid_y(n_chunks));
  mm_minmax_partial<DT><<<g1, MM_BLOCK, 0, s>>>(src, chunk, n_chunks, out, stride);
  unsigned g2 = n_chunks > (1u << 20) ? (1u << 20) : (unsigned)n_chunks;
  mm_finish_header<DT><<<g2, MM_BLOCK, 0, s>>>(n_chunks, (unsigned)parts, out, stride);
  dim3 g3(bagua__cuda_blocks((chunk + MM_VEC - 1) / MM_VEC, MM_BLOCK, 1u << 16), grid_y(n_chunks));
  mm_quantize_chunks<DT><<<g3, MM_BLOCK, 0, s>>>(src, chunk, n_chunks, out, stride);
}

template <int DT, int ADD>
static void launch_decompress(const void *in, size_t chunk, size_t n_chunks, void *out,
                              size_t stride, cudaStream_t s) {
  dim3 g(bagua__cuda_blocks((chunk + MM_VEC - 1) / MM_VEC, MM_BLOCK, 1u << 16), grid_y(n_chunks));
  mm_decompress_chunks<DT, ADD>
      <<<g, MM_BLOCK, 0, s>>>((const unsigned char *)in, chunk, n_chunks, out, stride);
}

extern "C" bagua_status_t bagua__cuda_minmax_u8_compress(bagua_dtype_t dt, const void *in,
                                                         size_t chunk_elems, size_t n_chunks,
                                                         void *out, cudaStream_t stream) {
  size_t es;
  bagua_status_t st = check_args("minmax_u8_compress", dt, in, out, chunk_elems, n_chunks, &es);
  if (st != BAGUA_OK || n_chunks == 0) return st;
  if (out == NULL) {
    BAGUA_WARN("minmax_u8_compress: NULL output for %zu chunks", n_chunks);
    return BAGUA_ERR_INVALID_ARG;
  }
  /* Even empty chunks get a header (min +inf, max -inf), as on the CPU. */
  size_t stride = bagua__minmax_u8_compressed_size(chunk_elems, dt);
  unsigned char *o = (unsigned char *)out;
  switch (dt) {
    case BAGUA_F32:
      launch_compress<BAGUA_F32>(in, chunk_elems, n_chunks, o, stride, stream);
      break;
    case BAGUA_F16:
      launch_compress<BAGUA_F16>(in, chunk_elems, n_chunks, o, stride, stream);
      break;
    default:
      launch_compress<BAGUA_BF16>(in, chunk_elems, n_chunks, o, stride, stream);
      break;
  }
  return bagua__cuda_check_launch("minmax_u8_compress");
}

extern "C" bagua_status_t bagua__cuda_minmax_u8_decompress(bagua_dtype_t dt, const void *in,
                                                           size_t chunk_elems, size_t n_chunks,
                                                           void *out, cudaStream_t stream) {
  size_t es;
  bagua_status_t st = check_args("minmax_u8_decompress", dt, out, in, chunk_elems, n_chunks, &es);
  if (st != BAGUA_OK || chunk_elems == 0 || n_chunks == 0) return st;
  size_t stride = bagua__minmax_u8_compressed_size(chunk_elems, dt);
  switch (dt) {
    case BAGUA_F32:
      launch_decompress<BAGUA_F32, 0>(in, chunk_elems, n_chunks, out, stride, stream);
      break;
    case BAGUA_F16:
      launch_decompress<BAGUA_F16, 0>(in, chunk_elems, n_chunks, out, stride, stream);
      break;
    default:
      launch_decompress<BAGUA_BF16, 0>(in, chunk_elems, n_chunks, out, stride, stream);
      break;
  }
  return bagua__cuda_check_launch("minmax_u8_decompress");
}

extern "C" bagua_status_t bagua__cuda_minmax_u8_decompress_add(bagua_dtype_t dt, const void *in,
                                                               size_t chunk_elems, size_t n_chunks,
                                                               float *acc, cudaStream_t stream) {
  size_t es;
  bagua_status_t st =
      check_args("minmax_u8_decompress_add", dt, acc, in, chunk_elems, n_chunks, &es);
  if (st != BAGUA_OK || chunk_elems == 0 || n_chunks == 0) return st;
  if (bg_misaligned(acc, 4)) {
    BAGUA_WARN("minmax_u8_decompress_add: accumulator %p is not 4-byte aligned", (void *)acc);
    return BAGUA_ERR_INVALID_ARG;
  }
  size_t stride = bagua__minmax_u8_compressed_size(chunk_elems, dt);
  switch (dt) {
    case BAGUA_F32:
      launch_decompress<BAGUA_F32, 1>(in, chunk_elems, n_chunks, acc, stride, stream);
      break;
    case BAGUA_F16:
      launch_decompress<BAGUA_F16, 1>(in, chunk_elems, n_chunks, acc, stride, stream);
      break;
    default:
      launch_decompress<BAGUA_BF16, 1>(in, chunk_elems, n_chunks, acc, stride, stream);
      break;
  }
  return bagua__cuda_check_launch("minmax_u8_decompress_add");
}
