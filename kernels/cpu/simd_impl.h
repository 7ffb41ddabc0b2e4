/*
 * ISA-independent body of the vector kernels, included once by avx2.c and once by avx512.c
 * after each has defined the same small set of primitives for its register width:
 *
 *   VBYTES           bytes in a full register (32 or 64)
 *   vf, vd, vi       f32, f64 and integer full registers
 *   vh               an integer register of VBYTES/2 bytes: one 16-bit value per f32 lane
 *   vf_ld/vf_st ...  unaligned loads and stores (vd_, vi_, vh_ likewise)
 *   vf_add, vf_sub, vf_mul, vf_div, vf_sqrt, vf_set1
 *   vf_min(a, b)     a < b ? a : b per lane (x86 minps), vf_max(a, b) a > b ? a : b
 *   vf_rint, vf_trunc rounding to integral values (current mode / toward zero)
 *   vd_*             the same for f64; vi_add8/32/64, vi_minu8/min32/min64, ... for integers
 *   vf_from_f16, vf_to_f16, vf_from_bf16, vf_to_bf16  half-precision conversions of vh
 *   vf_from_u8(p), vf_st_u8(p, v)  EF32 bytes to f32 lanes and back (v integral in 0..255)
 *   vf_st_u8x4(p, a, b, c, d)  4 x EF32 integral f32 lanes to bytes, saturating at 0 and 255
 *   vh_div_i32(x, d) EF64 int32 values in a vh, divided by the f64 vector d, truncated
 *
 * Every kernel runs its vector body over whole registers, and over zero- (or NaN-) padded
 * stack copies of the partial blocks (the remainder, and the head peeled off to align the
 * output of long buffers), so every element goes through exactly the same instructions and
 * the results cannot depend on position or alignment.
 *
 * No function here may use a fused multiply-add: the scalar oracle rounds after every
 * operation, and kernels/ is compiled with -ffp-contract=off so the compiler does not fuse
 * the separate multiply and add intrinsics either.
 */

#define EF32 (VBYTES / 4)
#define EF64 (VBYTES / 8)
#define HBYTES (VBYTES / 2)
/* Largest block one vector body handles: four registers (quantize reads 4 x EF32 f32s). */
#define TAIL_BYTES (4 * VBYTES)

typedef unsigned char uchar;

/* Vector constants the bodies need, built once per call by the driver's caller. */
typedef struct {
  vf a, b, c, d;
  vd da;
} kctx;

/* ---------------------------------------------------------------------------------------- */
/* Drivers                                                                                  */
/* ---------------------------------------------------------------------------------------- */

/*
 * Buffers at least this long first get their output pointer aligned to the register width
 * (when the misalignment is a whole number of elements): a misaligned 64-byte store splits
 * two cache lines every time, which costs AVX-512 about 15% on L2-resident data. The head goes
 * through the same vector body as the tail, so the results do not change.
 */
#define ALIGN_MIN_BYTES 2048

static inline size_t head_bytes(const void *out, size_t out_es, size_t out_bytes) {
  size_t head = (size_t)(-(uintptr_t)out) & (VBYTES - 1);
  if (out_bytes < ALIGN_MIN_BYTES || head % out_es != 0) return 0;
  return head;
}

/*
 * d = f(a, b) over n elements of ES bytes, STEP bytes per call of VEC. Unrolled four times,
 * which only matters for cache-resident data (from DRAM the loop waits on memory anyway).
 */
#define BINARY_DRIVER(name, ES, STEP, VEC)                                             \
  /* Fewer than STEP bytes, through zero-padded stack copies. */                       \
  static inline void name##_part(uchar *d, const uchar *x, const uchar *y, size_t m) { \
    uchar ta[TAIL_BYTES] __attribute__((aligned(64))) = {0};                           \
    uchar tb[TAIL_BYTES] __attribute__((aligned(64))) = {0};                           \
    uchar td[TAIL_BYTES] __attribute__((aligned(64)));                                 \
    memcpy(ta, x, m);                                                                  \
    memcpy(tb, y, m);                                                                  \
    VEC(td, ta, tb);                                                                   \
    memcpy(d, td, m);                                                                  \
  }                                                                                    \
  static void name(void *dst, const void *a, const void *b, size_t n) {                \
    uchar *d = dst;                                                                    \
    const uchar *x = a, *y = b;                                                        \
    size_t bytes = n * (ES), i = 0;                                                    \
    for (size_t head = head_bytes(d, ES, bytes); head > 0;) {                          \
      size_t m = head < (STEP) ? head : (STEP);                                        \
      if (m == (STEP))                                                                 \
        VEC(d + i, x + i, y + i);                                                      \
      else                                                                             \
        name##_part(d + i, x + i, y + i, m);                                           \
      i += m;                                                                          \
      head -= m;                                                                       \
    }                                                                                  \
    for (; i + 4 * (STEP) <= bytes; i += 4 * (STEP)) {                                 \
      VEC(d + i, x + i, y + i);                                                        \
      VEC(d + i + (STEP), x + i + (STEP), y + i + (STEP));                             \
      VEC(d + i + 2 * (STEP), x + i + 2 * (STEP), y + i + 2 * (STEP));                 \
      VEC(d + i + 3 * (STEP), x + i + 3 * (STEP), y + i + 3 * (STEP));                 \
    }                                                                                  \
    for (; i + (STEP) <= bytes; i += (STEP)) VEC(d + i, x + i, y + i);                 \
    if (i < bytes) name##_part(d + i, x + i, y + i, bytes - i);                        \
  }

/*
 * out = f(in, out) over n elements, E elements per call of VEC, IES/OES bytes per input and
 * output element. out is read too (for in-place and accumulating kernels), so a partial block
 * starts from a copy of the current output.
 */
#define MAP_DRIVER(name, IES, OES, E, VEC)                                               \
  static inline void name##_part(uchar *out, const uchar *in, size_t m, const kctx *k) { \
    uchar ti[TAIL_BYTES] __attribute__((aligned(64))) = {0};                             \
    uchar to[TAIL_BYTES] __attribute__((aligned(64))) = {0};                             \
    memcpy(ti, in, m *(IES));                                                            \
    memcpy(to, out, m *(OES));                                                           \
    VEC(to, ti, k);                                                                      \
    memcpy(out, to, m *(OES));                                                           \
  }                                                                                      \
  static void name(uchar *out, const uchar *in, size_t n, const kctx *k) {               \
    size_t i = 0;                                                                        \
    for (size_t head = head_bytes(out, OES, n * (OES)) / (OES); head > 0;) {             \
      size_t m = head < (E) ? head : (E);                                                \
      if (m == (E))                                                                      \
        VEC(out + i * (OES), in + i * (IES), k);                                         \
      else                                                                               \
        name##_part(out + i * (OES), in + i * (IES), m, k);                              \
      i += m;                                                                            \
      head -= m;                                                                         \
    }                                                                                    \
    for (; i + 4 * (E) <= n; i += 4 * (E)) {                                             \
      VEC(out + i * (OES), in + i * (IES), k);                                           \
      VEC(out + (i + (E)) * (OES), in + (i + (E)) * (IES), k);                           \
      VEC(out + (i + 2 * (E)) * (OES), in + (i + 2 * (E)) * (IES), k);                   \
      VEC(out + (i + 3 * (E)) * (OES), in + (i + 3 * (E)) * (IES), k);                   \
    }                                                                                    \
    for (; i + (E) <= n; i += (E)) VEC(out + i * (OES), in + i * (IES), k);              \
    if (i < n) name##_part(out + i * (OES), in + i * (IES), n - i, k);                   \
  }

/*
 * Up to three f32 arrays updated in place (w0, w1, w2; unused ones may be NULL if VEC does
 * not touch them for the given constants) and one read-only f32 array r, EF32 per call.
 */
#define F32_UPDATE_DRIVER(name, CT, VEC)                                                       \
  static inline void name##_part(float *w0, float *w1, float *w2, const float *r, size_t m,    \
                                 const CT *c) {                                                \
    float t0[EF32] __attribute__((aligned(64))) = {0};                                         \
    float t1[EF32] __attribute__((aligned(64))) = {0};                                         \
    float t2[EF32] __attribute__((aligned(64))) = {0};                                         \
    float tr[EF32] __attribute__((aligned(64))) = {0};                                         \
    size_t bytes = m * sizeof(float);                                                          \
    memcpy(t0, w0, bytes);                                                                     \
    if (w1) memcpy(t1, w1, bytes);                                                             \
    if (w2) memcpy(t2, w2, bytes);                                                             \
    if (r) memcpy(tr, r, bytes);                                                               \
    VEC(t0, w1 ? t1 : NULL, w2 ? t2 : NULL, r ? tr : NULL, c);                                 \
    memcpy(w0, t0, bytes);                                                                     \
    if (w1) memcpy(w1, t1, bytes);                                                             \
    if (w2) memcpy(w2, t2, bytes);                                                             \
  }                                                                                            \
  static void name(float *w0, float *w1, float *w2, const float *r, size_t n, const CT *c) {   \
    size_t i = head_bytes(w0, sizeof(float), n * sizeof(float)) / sizeof(float);               \
    if (i) name##_part(w0, w1, w2, r, i, c);                                                   \
    for (; i + 2 * EF32 <= n; i += 2 * EF32) {                                                 \
      VEC(w0 + i, w1 ? w1 + i : NULL, w2 ? w2 + i : NULL, r ? r + i : NULL, c);                \
      VEC(w0 + i + EF32, w1 ? w1 + i + EF32 : NULL, w2 ? w2 + i + EF32 : NULL,                 \
          r ? r + i + EF32 : NULL, c);                                                         \
    }                                                                                          \
    for (; i + EF32 <= n; i += EF32)                                                           \
      VEC(w0 + i, w1 ? w1 + i : NULL, w2 ? w2 + i : NULL, r ? r + i : NULL, c);                \
    if (i < n)                                                                                 \
      name##_part(w0 + i, w1 ? w1 + i : NULL, w2 ? w2 + i : NULL, r ? r + i : NULL, n - i, c); \
  }

/* ---------------------------------------------------------------------------------------- */
/* Element access for the float-like dtypes: EF32 elements per register                    */
/* ---------------------------------------------------------------------------------------- */

static inline vf ld_f32x(const uchar *p) {
  return vf_ld(p);
}
static inline void st_f32x(uchar *p, vf v) {
  vf_st(p, v);
}
static inline vf ld_f16x(const uchar *p) {
  return vf_from_f16(vh_ld(p));
}
static inline void st_f16x(uchar *p, vf v) {
  vh_st(p, vf_to_f16(v));
}
static inline vf ld_bf16x(const uchar *p) {
  return vf_from_bf16(vh_ld(p));
}
static inline void st_bf16x(uchar *p, vf v) {
  vh_st(p, vf_to_bf16(v));
}

/* ---------------------------------------------------------------------------------------- */
/* Reductions                                                                               */
/* ---------------------------------------------------------------------------------------- */

/* The oracle's min is `y < x ? y : x` with x from a, y from b: vf_min(y, x) exactly. */
#define VEC_BINARY(vname, LD, ST, EXPR)                                  \
  static inline void vname(uchar *d, const uchar *pa, const uchar *pb) { \
    __auto_type x = LD(pa);                                              \
    __auto_type y = LD(pb);                                              \
    ST(d, EXPR);                                                         \
  }

#define DEFINE_REDUCE(sfx, ES, STEP, LD, ST, ADD, MIN, MAX) \
  VEC_BINARY(vsum_##sfx, LD, ST, ADD(x, y))                 \
  VEC_BINARY(vmin_##sfx, LD, ST, MIN(y, x))                 \
  VEC_BINARY(vmax_##sfx, LD, ST, MAX(y, x))                 \
  BINARY_DRIVER(sum_##sfx, ES, STEP, vsum_##sfx)            \
  BINARY_DRIVER(min_##sfx, ES, STEP, vmin_##sfx)            \
  BINARY_DRIVER(max_##sfx, ES, STEP, vmax_##sfx)

DEFINE_REDUCE(f32, 4, VBYTES, ld_f32x, st_f32x, vf_add, vf_min, vf_max)
DEFINE_REDUCE(f16, 2, HBYTES, ld_f16x, st_f16x, vf_add, vf_min, vf_max)
DEFINE_REDUCE(bf16, 2, HBYTES, ld_bf16x, st_bf16x, vf_add, vf_min, vf_max)
DEFINE_REDUCE(f64, 8, VBYTES, vd_ld, vd_st, vd_add, vd_min, vd_max)
DEFINE_REDUCE(i32, 4, VBYTES, vi_ld, vi_st, vi_add32, vi_min32, vi_max32)
DEFINE_REDUCE(i64, 8, VBYTES, vi_ld, vi_st, vi_add64, vi_min64, vi_max64)
DEFINE_REDUCE(u8, 1, VBYTES, vi_ld, vi_st, vi_add8, vi_minu8, vi_maxu8)

/* ---------------------------------------------------------------------------------------- */
/* Division (finishing BAGUA_AVG) and bulk conversions                                      */
/* ---------------------------------------------------------------------------------------- */

static inline void vdiv_f32(uchar *o, const uchar *i, const kctx *k) {
  st_f32x(o, vf_div(ld_f32x(i), k->a));
}
static inline void vdiv_f16(uchar *o, const uchar *i, const kctx *k) {
  st_f16x(o, vf_div(ld_f16x(i), k->a));
}
static inline void vdiv_bf16(uchar *o, const uchar *i, const kctx *k) {
  st_bf16x(o, vf_div(ld_bf16x(i), k->a));
}
static inline void vdiv_f64(uchar *o, const uchar *i, const kctx *k) {
  vd_st(o, vd_div(vd_ld(i), k->da));
}
/*
 * int32 / d through f64 is exact after truncation: the true quotient is at least 1/d away
 * from the next integer when it is not one, and the f64 rounding error is below 2^-22/d.
 */
static inline void vdiv_i32(uchar *o, const uchar *i, const kctx *k) {
  vh_st(o, vh_div_i32(vh_ld(i), k->da));
}
/* uint8 / d through f32 is exact after truncation for the same reason (x < 2^24). */
static inline void vdiv_u8(uchar *o, const uchar *i, const kctx *k) {
  vf_st_u8(o, vf_trunc(vf_div(vf_from_u8(i), k->a)));
}
MAP_DRIVER(div_f32, 4, 4, EF32, vdiv_f32)
MAP_DRIVER(div_f16, 2, 2, EF32, vdiv_f16)
MAP_DRIVER(div_bf16, 2, 2, EF32, vdiv_bf16)
MAP_DRIVER(div_f64, 8, 8, EF64, vdiv_f64)
MAP_DRIVER(div_i32, 4, 4, EF64, vdiv_i32)
MAP_DRIVER(div_u8, 1, 1, EF32, vdiv_u8)

static void simd_div(bagua_dtype_t dt, void *buf, size_t n, int divisor) {
  if (divisor == 1) return;
  kctx k;
  k.a = vf_set1((float)divisor);
  k.da = vd_set1((double)divisor);
  switch (dt) {
    case BAGUA_F32:
      div_f32(buf, buf, n, &k);
      return;
    case BAGUA_F16:
      div_f16(buf, buf, n, &k);
      return;
    case BAGUA_BF16:
      div_bf16(buf, buf, n, &k);
      return;
    case BAGUA_F64:
      div_f64(buf, buf, n, &k);
      return;
    case BAGUA_I32:
      if (divisor >= 1)
        div_i32(buf, buf, n, &k);
      else
        bagua__div_scalar(dt, buf, n, divisor);
      return;
    case BAGUA_U8:
      if (divisor >= 1)
        div_u8(buf, buf, n, &k);
      else
        bagua__div_scalar(dt, buf, n, divisor);
      return;
    default:
      /* int64 has no exact vector path (f64 loses bits above 2^53); it is never a hot path. */
      bagua__div_scalar(dt, buf, n, divisor);
      return;
  }
}

static inline void vcvt_f16_f32(uchar *o, const uchar *i, const kctx *k) {
  st_f32x(o, ld_f16x(i));
}
static inline void vcvt_f32_f16(uchar *o, const uchar *i, const kctx *k) {
  st_f16x(o, ld_f32x(i));
}
static inline void vcvt_bf16_f32(uchar *o, const uchar *i, const kctx *k) {
  st_f32x(o, ld_bf16x(i));
}
static inline void vcvt_f32_bf16(uchar *o, const uchar *i, const kctx *k) {
  st_bf16x(o, ld_f32x(i));
}
MAP_DRIVER(cvt_f16_f32, 2, 4, EF32, vcvt_f16_f32)
MAP_DRIVER(cvt_f32_f16, 4, 2, EF32, vcvt_f32_f16)
MAP_DRIVER(cvt_bf16_f32, 2, 4, EF32, vcvt_bf16_f32)
MAP_DRIVER(cvt_f32_bf16, 4, 2, EF32, vcvt_f32_bf16)

static void simd_f16_to_f32(float *dst, const uint16_t *src, size_t n) {
  cvt_f16_f32((uchar *)dst, (const uchar *)src, n, NULL);
}
static void simd_f32_to_f16(uint16_t *dst, const float *src, size_t n) {
  cvt_f32_f16((uchar *)dst, (const uchar *)src, n, NULL);
}
static void simd_bf16_to_f32(float *dst, const uint16_t *src, size_t n) {
  cvt_bf16_f32((uchar *)dst, (const uchar *)src, n, NULL);
}
static void simd_f32_to_bf16(uint16_t *dst, const float *src, size_t n) {
  cvt_f32_bf16((uchar *)dst, (const uchar *)src, n, NULL);
}

/* ---------------------------------------------------------------------------------------- */
/* MinMaxUInt8                                                                              */
/* ---------------------------------------------------------------------------------------- */

/*
 * Min and max ignoring NaN, from +inf/-inf: vf_min(x, lo) keeps lo when x is NaN, so the lanes
 * never hold a NaN and the lane order of the final combination cannot change the value. Two
 * accumulator pairs hide the latency of the dependent min/max chain. The tail is padded with
 * NaN (the byte pair c0 7f is a quiet NaN as f16, as bf16 and, doubled, as f32).
 */
#define DEFINE_MINMAX(sfx, ES, LD)                                                    \
  static void minmax_##sfx(const uchar *in, size_t n, float *mn, float *mx) {         \
    vf lo0 = vf_set1(INFINITY), hi0 = vf_set1(-INFINITY), lo1 = lo0, hi1 = hi0;       \
    size_t i = 0;                                                                     \
    for (; i + 2 * EF32 <= n; i += 2 * EF32) {                                        \
      vf x0 = LD(in + i * (ES)), x1 = LD(in + (i + EF32) * (ES));                     \
      lo0 = vf_min(x0, lo0);                                                          \
      hi0 = vf_max(x0, hi0);                                                          \
      lo1 = vf_min(x1, lo1);                                                          \
      hi1 = vf_max(x1, hi1);                                                          \
    }                                                                                 \
    if (i < n) {                                                                      \
      for (; i < n; i += EF32) {                                                      \
        uchar t[TAIL_BYTES] __attribute__((aligned(64)));                             \
        size_t m = (n - i < EF32 ? n - i : EF32) * (ES);                              \
        for (size_t j = 0; j < sizeof(t); j += 2) {                                   \
          t[j] = 0xc0;                                                                \
          t[j + 1] = 0x7f;                                                            \
        }                                                                             \
        memcpy(t, in + i * (ES), m);                                                  \
        vf x = LD(t);                                                                 \
        lo0 = vf_min(x, lo0);                                                         \
        hi0 = vf_max(x, hi0);                                                         \
      }                                                                               \
    }                                                                                 \
    lo0 = vf_min(lo1, lo0);                                                           \
    hi0 = vf_max(hi1, hi0);                                                           \
    float l[EF32] __attribute__((aligned(64))), h[EF32] __attribute__((aligned(64))); \
    vf_st(l, lo0);                                                                    \
    vf_st(h, hi0);                                                                    \
    float rl = l[0], rh = h[0];                                                       \
    for (int j = 1; j < EF32; j++) {                                                  \
      rl = l[j] < rl ? l[j] : rl;                                                     \
      rh = h[j] > rh ? h[j] : rh;                                                     \
    }                                                                                 \
    *mn = rl;                                                                         \
    *mx = rh;                                                                         \
  }

DEFINE_MINMAX(f32, 4, ld_f32x)
DEFINE_MINMAX(f16, 2, ld_f16x)
DEFINE_MINMAX(bf16, 2, ld_bf16x)

static void simd_minmax(bagua_dtype_t dt, const void *in, size_t n, float *mn, float *mx) {
  switch (dt) {
    case BAGUA_F16:
      minmax_f16(in, n, mn, mx);
      return;
    case BAGUA_BF16:
      minmax_bf16(in, n, mn, mx);
      return;
    default:
      minmax_f32(in, n, mn, mx);
      return;
  }
}

/*
 * k->a = scale, k->b = upper, k->c = lower, k->d = 255; see bagua__quantize_scalar. The lower
 * clamp at 0 (and NaN) comes free from the saturating packs, four registers at a time.
 */
static inline vf quant1(vf x, const kctx *k) {
  return vf_min(vf_sub(vf_min(vf_rint(vf_mul(x, k->a)), k->b), k->c), k->d);
}

#define DEFINE_QUANT(sfx, ES, LD, ST)                                                   \
  static inline void vquant_##sfx(uchar *o, const uchar *i, const kctx *k) {            \
    vf_st_u8x4(o, quant1(LD(i), k), quant1(LD(i + EF32 * (ES)), k),                     \
               quant1(LD(i + 2 * EF32 * (ES)), k), quant1(LD(i + 3 * EF32 * (ES)), k)); \
  }                                                                                     \
  static inline void vdequant_##sfx(uchar *o, const uchar *i, const kctx *k) {          \
    ST(o, vf_div(vf_add(vf_from_u8(i), k->c), k->a));                                   \
  }                                                                                     \
  MAP_DRIVER(quant_##sfx, ES, 1, 4 * EF32, vquant_##sfx)                                \
  MAP_DRIVER(dequant_##sfx, 1, ES, EF32, vdequant_##sfx)

DEFINE_QUANT(f32, 4, ld_f32x, st_f32x)
DEFINE_QUANT(f16, 2, ld_f16x, st_f16x)
DEFINE_QUANT(bf16, 2, ld_bf16x, st_bf16x)

static inline void vdequant_add(uchar *o, const uchar *i, const kctx *k) {
  st_f32x(o, vf_add(ld_f32x(o), vf_div(vf_add(vf_from_u8(i), k->c), k->a)));
}
MAP_DRIVER(dequant_add, 1, 4, EF32, vdequant_add)

static void simd_quantize(bagua_dtype_t dt, const void *in, size_t n, float scale, float upper,
                          float lower, uint8_t *q) {
  kctx k;
  k.a = vf_set1(scale);
  k.b = vf_set1(upper);
  k.c = vf_set1(lower);
  k.d = vf_set1(255.0f);
  switch (dt) {
    case BAGUA_F16:
      quant_f16(q, in, n, &k);
      return;
    case BAGUA_BF16:
      quant_bf16(q, in, n, &k);
      return;
    default:
      quant_f32(q, in, n, &k);
      return;
  }
}

static void simd_dequantize(bagua_dtype_t dt, const uint8_t *q, size_t n, float scale, float lower,
                            void *out) {
  kctx k;
  k.a = vf_set1(scale);
  k.c = vf_set1(lower);
  switch (dt) {
    case BAGUA_F16:
      dequant_f16(out, q, n, &k);
      return;
    case BAGUA_BF16:
      dequant_bf16(out, q, n, &k);
      return;
    default:
      dequant_f32(out, q, n, &k);
      return;
  }
}

static void simd_dequantize_add(const uint8_t *q, size_t n, float scale, float lower, float *acc) {
  kctx k;
  k.a = vf_set1(scale);
  k.c = vf_set1(lower);
  dequant_add((uchar *)acc, q, n, &k);
}

/* ---------------------------------------------------------------------------------------- */
/* axpy, scale and optimizer steps                                                          */
/* ---------------------------------------------------------------------------------------- */

typedef struct {
  vf a;
} axpy_c;

static inline void vaxpy(float *y, float *u1, float *u2, const float *x, const axpy_c *c) {
  vf_st(y, vf_add(vf_ld(y), vf_mul(c->a, vf_ld(x))));
}
static inline void vscale(float *x, float *u1, float *u2, const float *u3, const axpy_c *c) {
  vf_st(x, vf_mul(vf_ld(x), c->a));
}
F32_UPDATE_DRIVER(axpy_drv, axpy_c, vaxpy)
F32_UPDATE_DRIVER(scale_drv, axpy_c, vscale)

static void simd_axpy(float a, const float *x, float *y, size_t n) {
  axpy_c c = {vf_set1(a)};
  axpy_drv(y, NULL, NULL, x, n, &c);
}
static void simd_scale(float a, float *x, size_t n) {
  axpy_c c = {vf_set1(a)};
  scale_drv(x, NULL, NULL, NULL, n, &c);
}

typedef struct {
  vf lr, wd, mom, damp1;
  int has_wd, has_mom, nesterov, first;
} sgd_c;

/* Mirrors bagua__sgd_scalar operation for operation. */
static inline void vsgd(float *param, float *buf, float *unused, const float *grad,
                        const sgd_c *c) {
  vf p = vf_ld(param), d = vf_ld(grad);
  if (c->has_wd) d = vf_add(d, vf_mul(c->wd, p));
  if (c->has_mom) {
    vf b = c->first ? d : vf_add(vf_mul(vf_ld(buf), c->mom), vf_mul(c->damp1, d));
    vf_st(buf, b);
    d = c->nesterov ? vf_add(d, vf_mul(c->mom, b)) : b;
  }
  vf_st(param, vf_sub(p, vf_mul(c->lr, d)));
}
F32_UPDATE_DRIVER(sgd_drv, sgd_c, vsgd)

static void simd_sgd(float *param, const float *grad, float *buf, size_t n,
                     const bagua__sgd_consts_t *k) {
  sgd_c c = {vf_set1(k->lr),
             vf_set1(k->weight_decay),
             vf_set1(k->momentum),
             vf_set1(k->one_minus_dampening),
             k->weight_decay != 0.0f,
             k->momentum != 0.0f,
             k->nesterov,
             k->first_step};
  sgd_drv(param, c.has_mom ? buf : NULL, NULL, grad, n, &c);
}

typedef struct {
  vf b1, c1, b2, c2, eps, step, bc2, wd, decay;
  int decoupled, has_wd;
} adam_c;

/* Mirrors bagua__adam_scalar operation for operation. */
static inline void vadam(float *param, float *m, float *v, const float *grad, const adam_c *c) {
  vf p = vf_ld(param), g = vf_ld(grad);
  if (c->decoupled)
    p = vf_mul(p, c->decay);
  else if (c->has_wd)
    g = vf_add(g, vf_mul(c->wd, p));
  vf mi = vf_add(vf_mul(c->b1, vf_ld(m)), vf_mul(c->c1, g));
  vf vi = vf_add(vf_mul(c->b2, vf_ld(v)), vf_mul(vf_mul(c->c2, g), g));
  vf denom = vf_add(vf_div(vf_sqrt(vi), c->bc2), c->eps);
  vf_st(m, mi);
  vf_st(v, vi);
  vf_st(param, vf_sub(p, vf_div(vf_mul(c->step, mi), denom)));
}
F32_UPDATE_DRIVER(adam_drv, adam_c, vadam)

static void simd_adam(float *param, const float *grad, float *m, float *v, size_t n,
                      const bagua__adam_consts_t *k) {
  adam_c c = {vf_set1(k->beta1),      vf_set1(k->one_minus_beta1),
              vf_set1(k->beta2),      vf_set1(k->one_minus_beta2),
              vf_set1(k->eps),        vf_set1(k->step_size),
              vf_set1(k->bias2_sqrt), vf_set1(k->weight_decay),
              vf_set1(k->decay),      k->decoupled,
              k->weight_decay != 0.0f};
  adam_drv(param, m, v, grad, n, &c);
}

/* ---------------------------------------------------------------------------------------- */

#define SIMD_REDUCE_ROW(sfx) \
  { sum_##sfx, min_##sfx, max_##sfx }

const bagua__kernel_table_t SIMD_TABLE = {
    .name = SIMD_NAME,
    .reduce =
        {
            [BAGUA_F32] = SIMD_REDUCE_ROW(f32),
            [BAGUA_F16] = SIMD_REDUCE_ROW(f16),
            [BAGUA_BF16] = SIMD_REDUCE_ROW(bf16),
            [BAGUA_F64] = SIMD_REDUCE_ROW(f64),
            [BAGUA_I32] = SIMD_REDUCE_ROW(i32),
            [BAGUA_I64] = SIMD_REDUCE_ROW(i64),
            [BAGUA_U8] = SIMD_REDUCE_ROW(u8),
        },
    .div = simd_div,
    .f16_to_f32 = simd_f16_to_f32,
    .f32_to_f16 = simd_f32_to_f16,
    .bf16_to_f32 = simd_bf16_to_f32,
    .f32_to_bf16 = simd_f32_to_bf16,
    .minmax = simd_minmax,
    .quantize = simd_quantize,
    .dequantize = simd_dequantize,
    .dequantize_add = simd_dequantize_add,
    .axpy = simd_axpy,
    .scale = simd_scale,
    .sgd = simd_sgd,
    .adam = simd_adam,
};
