/*
 * Every vector reduction (all dtypes, sum/avg/min/max, out-of-place, in place and with dst
 * aliasing b), the blocked multi-source reduction and every vector division must equal the
 * scalar oracle byte for byte, for counts around every vector boundary and for buffers
 * misaligned by 1 to 3 bytes or by whole elements.
 */
#include "ktest.h"

static const bagua_dtype_t k_dtypes[] = {BAGUA_F32, BAGUA_F16, BAGUA_BF16, BAGUA_F64,
                                         BAGUA_I32, BAGUA_I64, BAGUA_U8};
static const bagua_op_t k_ops[] = {BAGUA_SUM, BAGUA_AVG, BAGUA_MIN, BAGUA_MAX};

/*
 * Byte offsets of (dst, a, b): misaligned within an element, and misaligned by whole elements
 * (which makes the kernels peel a head to align dst).
 */
static const size_t k_offs[][3] = {{0, 0, 0}, {1, 2, 3},  {3, 1, 2},
                                   {2, 3, 1}, {4, 8, 12}, {8, 4, 0}};
#define N_OFFS (sizeof(k_offs) / sizeof(k_offs[0]))

/* got must equal want byte for byte, NaN payloads included. */
static void compare(const char *isa, const char *what, bagua_dtype_t dt, bagua_op_t op, size_t n,
                    size_t off, const unsigned char *got, const unsigned char *want,
                    const unsigned char *a, const unsigned char *b) {
  size_t es = bagua_dtype_size(dt);
  for (size_t i = 0; i < n; i++) {
    if (memcmp(got + i * es, want + i * es, es) == 0) continue;
    uint64_t g = 0, w = 0, va = 0, vb = 0;
    memcpy(&g, got + i * es, es);
    memcpy(&w, want + i * es, es);
    memcpy(&va, a + i * es, es);
    memcpy(&vb, b + i * es, es);
    TEST_FAIL("%s %s %s %s n=%zu off=%zu: element %zu is 0x%llx, oracle 0x%llx (a 0x%llx b 0x%llx)",
              isa, what, bagua_dtype_name(dt), bagua_op_name(op), n, off, i, (unsigned long long)g,
              (unsigned long long)w, (unsigned long long)va, (unsigned long long)vb);
  }
}

static void test_reduce_case(bagua_dtype_t dt, bagua_op_t op, size_t n, const size_t *off) {
  size_t es = bagua_dtype_size(dt), bytes = n * es;
  gbuf_t a = gbuf_new(bytes, off[1]), b = gbuf_new(bytes, off[2]);
  gbuf_t want = gbuf_new(bytes, 0), d = gbuf_new(bytes, off[0]);
  fill_random(dt, a.p, n);
  fill_random(dt, b.p, n);
  /* Make some pairs equal (and some signed-zero pairs) so min/max ties are exercised. */
  for (size_t i = 0; i + 7 < n; i += 7) memcpy(b.p + i * es, a.p + i * es, es);

  bagua__kernels_force_isa("scalar");
  bagua__reduce_out_scalar(dt, op, want.p, a.p, b.p, n);
  /* The dispatching entry points with the scalar table must be the oracle too. */
  bagua__reduce_out(dt, op, d.p, a.p, b.p, n);
  compare("scalar", "reduce_out", dt, op, n, off[0], d.p, want.p, a.p, b.p);

  for (size_t k = 0; k < N_SIMD_ISAS; k++) {
    const char *isa = k_simd_isas[k];
    if (!use_isa(isa)) continue;
    memset(d.p, 0x5a, bytes);
    bagua__reduce_out(dt, op, d.p, a.p, b.p, n);
    compare(isa, "reduce_out", dt, op, n, off[0], d.p, want.p, a.p, b.p);
    if (bytes) memcpy(d.p, a.p, bytes);
    bagua__reduce(dt, op, d.p, b.p, n); /* dst aliases a */
    compare(isa, "reduce", dt, op, n, off[0], d.p, want.p, a.p, b.p);
    if (bytes) memcpy(d.p, b.p, bytes);
    bagua__reduce_out(dt, op, d.p, a.p, d.p, n); /* dst aliases b */
    compare(isa, "reduce_out(dst=b)", dt, op, n, off[0], d.p, want.p, a.p, b.p);
    gbuf_check(&d, "reduce dst");
  }
  gbuf_check(&a, "reduce a");
  gbuf_check(&b, "reduce b");
  gbuf_free(&a);
  gbuf_free(&b);
  gbuf_free(&want);
  gbuf_free(&d);
}

/* bagua__reduce_n against the sequence of pairwise scalar reductions it promises to match. */
static void test_reduce_n_case(bagua_dtype_t dt, bagua_op_t op, int nsrc, size_t n, size_t off) {
  size_t es = bagua_dtype_size(dt), bytes = n * es;
  gbuf_t src[5], want = gbuf_new(bytes, 0), d = gbuf_new(bytes, off);
  const void *ptrs[5];
  for (int r = 0; r < nsrc; r++) {
    src[r] = gbuf_new(bytes, (off + (size_t)r) % 4);
    fill_random(dt, src[r].p, n);
    ptrs[r] = src[r].p;
  }
  if (nsrc == 1) {
    if (bytes) memcpy(want.p, src[0].p, bytes);
  } else {
    bagua__reduce_out_scalar(dt, op, want.p, src[0].p, src[1].p, n);
    for (int r = 2; r < nsrc; r++) bagua__reduce_out_scalar(dt, op, want.p, want.p, src[r].p, n);
  }
  const char *isas[N_SIMD_ISAS + 1] = {"scalar"};
  for (size_t k = 0; k < N_SIMD_ISAS; k++) isas[k + 1] = k_simd_isas[k];
  for (size_t k = 0; k < N_SIMD_ISAS + 1; k++) {
    if (!use_isa(isas[k])) continue;
    memset(d.p, 0x5a, bytes);
    bagua__reduce_n(dt, op, d.p, ptrs, nsrc, n);
    compare(isas[k], "reduce_n", dt, op, n, off, d.p, want.p, src[0].p, src[nsrc > 1].p);
    gbuf_check(&d, "reduce_n dst");
    if (nsrc >= 2) {
      /* In place into the first source. */
      gbuf_t s0 = gbuf_new(bytes, off);
      if (bytes) memcpy(s0.p, src[0].p, bytes);
      const void *p2[5];
      memcpy(p2, ptrs, sizeof(p2));
      p2[0] = s0.p;
      bagua__reduce_n(dt, op, s0.p, p2, nsrc, n);
      compare(isas[k], "reduce_n(dst=srcs[0])", dt, op, n, off, s0.p, want.p, src[0].p, src[1].p);
      gbuf_free(&s0);
    }
  }
  for (int r = 0; r < nsrc; r++) {
    gbuf_check(&src[r], "reduce_n src");
    gbuf_free(&src[r]);
  }
  gbuf_free(&want);
  gbuf_free(&d);
}

static void test_div_case(bagua_dtype_t dt, int divisor, size_t n, size_t off) {
  size_t es = bagua_dtype_size(dt), bytes = n * es;
  gbuf_t src = gbuf_new(bytes, 0), want = gbuf_new(bytes, 0), d = gbuf_new(bytes, off);
  fill_random(dt, src.p, n);
  if (dt == BAGUA_I32 || dt == BAGUA_I64) {
    /* INT_MIN / -1 is excluded by the contract (divisor >= 1), nothing else needs care. */
  }
  if (bytes) memcpy(want.p, src.p, bytes);
  bagua__div_scalar(dt, want.p, n, divisor);
  for (size_t k = 0; k < N_SIMD_ISAS; k++) {
    const char *isa = k_simd_isas[k];
    if (!use_isa(isa)) continue;
    if (bytes) memcpy(d.p, src.p, bytes);
    bagua__div(dt, d.p, n, divisor);
    for (size_t i = 0; i < n; i++) {
      if (memcmp(d.p + i * es, want.p + i * es, es) == 0) continue;
      uint64_t g = 0, w = 0, s = 0;
      memcpy(&g, d.p + i * es, es);
      memcpy(&w, want.p + i * es, es);
      memcpy(&s, src.p + i * es, es);
      TEST_FAIL("%s div %s /%d n=%zu off=%zu: element %zu (0x%llx) is 0x%llx, oracle 0x%llx", isa,
                bagua_dtype_name(dt), divisor, n, off, i, (unsigned long long)s,
                (unsigned long long)g, (unsigned long long)w);
    }
    gbuf_check(&d, "div");
  }
  gbuf_free(&src);
  gbuf_free(&want);
  gbuf_free(&d);
}

/* A few hand-checked values, so the oracle itself is pinned down and not only compared. */
static void test_oracle_semantics(void) {
  int32_t a32[2] = {INT32_MAX, 5}, b32[2] = {1, -7}, r32[2];
  bagua__reduce_out_scalar(BAGUA_I32, BAGUA_SUM, r32, a32, b32, 2);
  ASSERT_EQ(r32[0], INT32_MIN); /* wraps */
  ASSERT_EQ(r32[1], -2);
  uint8_t a8[2] = {200, 3}, b8[2] = {100, 4}, r8[2];
  bagua__reduce_out_scalar(BAGUA_U8, BAGUA_SUM, r8, a8, b8, 2);
  ASSERT_EQ(r8[0], 44);
  float af[3] = {NAN, 1.0f, 0.0f}, bf[3] = {1.0f, NAN, -0.0f}, rf[3];
  bagua__reduce_out_scalar(BAGUA_F32, BAGUA_MIN, rf, af, bf, 3);
  ASSERT_TRUE(isnan(rf[0]));     /* a NaN already in dst stays */
  ASSERT_TRUE(rf[1] == 1.0f);    /* a NaN arriving in src is ignored */
  ASSERT_EQ(f32_bits(rf[2]), 0); /* equal zeros keep dst's +0 */
  uint32_t na[2] = {0x7fc00001u, 0x7f800001u}, nb[2] = {0xffc00002u, 0x3f800000u}, nr[2];
  bagua__reduce_out_scalar(BAGUA_F32, BAGUA_SUM, nr, na, nb, 2);
  ASSERT_EQ(nr[0], 0x7fc00001u); /* two NaNs: a's */
  ASSERT_EQ(nr[1], 0x7fc00001u); /* a signalling NaN comes out quiet */
  int32_t d32[3] = {-7, 7, INT32_MIN};
  bagua__div_scalar(BAGUA_I32, d32, 3, 2);
  ASSERT_EQ(d32[0], -3); /* truncates toward zero */
  ASSERT_EQ(d32[1], 3);
  ASSERT_EQ(d32[2], INT32_MIN / 2);
  uint16_t h[2] = {0x3c00, 0x3c01}, g[2] = {0x3c00, 0x0000}, r16[2];
  bagua__reduce_out_scalar(BAGUA_F16, BAGUA_SUM, r16, h, g, 2);
  ASSERT_EQ(r16[0], 0x4000); /* 1 + 1 = 2 */
  ASSERT_EQ(r16[1], 0x3c01);
}

int main(void) {
  test_oracle_semantics();
  for (size_t t = 0; t < sizeof(k_dtypes) / sizeof(k_dtypes[0]); t++)
    for (size_t o = 0; o < sizeof(k_ops) / sizeof(k_ops[0]); o++)
      for (size_t c = 0; c < N_COUNTS; c++)
        for (size_t f = 0; f < N_OFFS; f++) {
          /* The large count costs most; the all-misaligned pattern covers it. */
          if (k_counts[c] > 100000 && f != 1) continue;
          test_reduce_case(k_dtypes[t], k_ops[o], k_counts[c], k_offs[f]);
        }
  static const int nsrcs[] = {1, 2, 3, 5};
  static const size_t n_counts[] = {0, 1, 17, 255, 2049, 5000, 20011};
  for (size_t t = 0; t < sizeof(k_dtypes) / sizeof(k_dtypes[0]); t++)
    for (size_t o = 0; o < sizeof(k_ops) / sizeof(k_ops[0]); o++)
      for (size_t s = 0; s < sizeof(nsrcs) / sizeof(nsrcs[0]); s++)
        for (size_t c = 0; c < sizeof(n_counts) / sizeof(n_counts[0]); c++)
          test_reduce_n_case(k_dtypes[t], k_ops[o], nsrcs[s], n_counts[c], (c + s) % 4 * 4);
  static const int divisors[] = {1, 2, 3, 7, 8, 255, 1000, 1 << 20};
  for (size_t t = 0; t < sizeof(k_dtypes) / sizeof(k_dtypes[0]); t++)
    for (size_t v = 0; v < sizeof(divisors) / sizeof(divisors[0]); v++)
      for (size_t c = 0; c < N_COUNTS; c++) {
        if (k_counts[c] > 100000 && v % 3 != 1) continue;
        test_div_case(k_dtypes[t], divisors[v], k_counts[c], (c + v) % 4);
      }
  bagua__kernels_force_isa(NULL);
  printf("reduce/div: all vector variants match the scalar oracle\n");
  return 0;
}
