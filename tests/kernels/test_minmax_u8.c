/*
 * MinMaxUInt8: the layout (sizes, header, zeroed padding), the error bound of a round trip,
 * constant and degenerate chunks, and every vector implementation against the scalar one
 * byte for byte (compressed bytes, decompressed values, fused decompress-and-add), with
 * misaligned buffers and with garbage input (NaN, inf) that must still encode identically.
 */
#include <float.h>

#include "ktest.h"

static const bagua_dtype_t k_qdtypes[] = {BAGUA_F32, BAGUA_F16, BAGUA_BF16};

static float load_f(bagua_dtype_t dt, const unsigned char *p, size_t i) {
  uint16_t h;
  float f;
  if (dt == BAGUA_F32) {
    memcpy(&f, p + 4 * i, 4);
    return f;
  }
  memcpy(&h, p + 2 * i, 2);
  return dt == BAGUA_F16 ? bagua__f16_to_f32(h) : bagua__bf16_to_f32(h);
}

static void store_f(bagua_dtype_t dt, unsigned char *p, size_t i, float v) {
  uint16_t h;
  if (dt == BAGUA_F32) {
    memcpy(p + 4 * i, &v, 4);
    return;
  }
  h = dt == BAGUA_F16 ? bagua__f32_to_f16(v) : bagua__f32_to_bf16(v);
  memcpy(p + 2 * i, &h, 2);
}

static void test_sizes(void) {
  ASSERT_EQ(bagua__minmax_u8_compressed_size(0, BAGUA_F32), 32);
  ASSERT_EQ(bagua__minmax_u8_compressed_size(1, BAGUA_F32), 64);
  ASSERT_EQ(bagua__minmax_u8_compressed_size(32, BAGUA_F16), 64);
  ASSERT_EQ(bagua__minmax_u8_compressed_size(33, BAGUA_BF16), 96);
  ASSERT_EQ(bagua__minmax_u8_compressed_size(1000, BAGUA_F32), 32 + 1024);
  ASSERT_EQ(bagua__minmax_u8_compressed_size(10, BAGUA_F64), 0);
  ASSERT_EQ(bagua__minmax_u8_compressed_size(10, BAGUA_I32), 0);
  float x = 1.0f;
  unsigned char out[64];
  ASSERT_STATUS(bagua__minmax_u8_compress(BAGUA_F64, &x, 1, 1, out), BAGUA_ERR_INVALID_ARG);
  ASSERT_STATUS(bagua__minmax_u8_decompress(BAGUA_U8, out, 1, 1, &x), BAGUA_ERR_INVALID_ARG);
  ASSERT_STATUS(bagua__minmax_u8_decompress_add(BAGUA_I64, out, 1, 1, &x), BAGUA_ERR_INVALID_ARG);
  ASSERT_OK(bagua__minmax_u8_compress(BAGUA_F32, NULL, 0, 0, NULL));
}

/* Chunk c gets values in a range of its own, some far from zero relative to their spread. */
static void fill_ranges(bagua_dtype_t dt, unsigned char *p, size_t chunk, size_t n_chunks) {
  static const float ranges[][2] = {{-1, 1},     {0, 1e-3f}, {1000, 1001}, {-5e4f, 3e4f},
                                    {-2, -1.5f}, {3, 3},     {0, 0},       {-1e-30f, 1e-30f}};
  for (size_t c = 0; c < n_chunks; c++) {
    const float *r = ranges[c % 8];
    for (size_t i = 0; i < chunk; i++) store_f(dt, p, c * chunk + i, rnd_uniform(r[0], r[1]));
  }
}

/* The round-trip error of every element against the documented bound. */
static void test_error_bound(bagua_dtype_t dt, size_t chunk, size_t n_chunks) {
  size_t es = bagua_dtype_size(dt), csz = bagua__minmax_u8_compressed_size(chunk, dt);
  unsigned char *in = malloc(chunk * n_chunks * es + 1);
  unsigned char *comp = malloc(csz * n_chunks + 1);
  unsigned char *dec = malloc(chunk * n_chunks * es + 1);
  float *acc = calloc(chunk * n_chunks + 1, sizeof(float));
  if (!in || !comp || !dec || !acc) TEST_FAIL("out of memory");
  fill_ranges(dt, in, chunk, n_chunks);
  ASSERT_OK(bagua__minmax_u8_compress(dt, in, chunk, n_chunks, comp));
  ASSERT_OK(bagua__minmax_u8_decompress(dt, comp, chunk, n_chunks, dec));
  ASSERT_OK(bagua__minmax_u8_decompress_add(dt, comp, chunk, n_chunks, acc));
  for (size_t c = 0; c < n_chunks; c++) {
    float mn = INFINITY, mx = -INFINITY;
    for (size_t i = 0; i < chunk; i++) {
      float x = load_f(dt, in, c * chunk + i);
      mn = x < mn ? x : mn;
      mx = x > mx ? x : mx;
    }
    if (chunk == 0) continue;
    /* The header holds the exact min and max in the source dtype. */
    ASSERT_TRUE(load_f(dt, comp + c * csz, 0) == mn);
    ASSERT_TRUE(load_f(dt, comp + c * csz, 1) == mx);
    double mag = fmax(fabs(mn), fabs(mx));
    /* Half a quantization step, plus a few f32 roundings of values of size mag. */
    double tol = 0.5 * ((double)mx - mn + 1e-7) / 255 * (1 + 1e-6) + 8 * ldexp(mag, -24) + FLT_MIN;
    for (size_t i = 0; i < chunk; i++) {
      double x = load_f(dt, in, c * chunk + i);
      double y = acc[c * chunk + i];
      if (!(fabs(x - y) <= tol))
        TEST_FAIL("%s chunk %zu [%g, %g] element %zu: %.9g decodes to %.9g (error %.3g > %.3g)",
                  bagua_dtype_name(dt), c, mn, mx, i, x, y, fabs(x - y), tol);
      /* Decoding to the source dtype adds at most its half ulp. */
      double z = load_f(dt, dec, c * chunk + i);
      double ulp = dt == BAGUA_F32 ? 0 : ldexp(fabs(y), dt == BAGUA_F16 ? -11 : -8) + 6e-8;
      if (!(fabs(z - y) <= ulp))
        TEST_FAIL("%s element %zu: decompress %.9g vs f32 %.9g", bagua_dtype_name(dt), i, z, y);
    }
    if (mn == mx) {
      /*
       * A constant chunk has scale = 255/1e-7, so it decodes to within 2e-10 plus a few ulps
       * of itself (checked above), all in the one byte value; zeros decode to exactly zero.
       */
      for (size_t i = 0; i < chunk; i++) {
        ASSERT_EQ(comp[c * csz + 32 + i], comp[c * csz + 32]);
        if (mn == 0) ASSERT_TRUE(acc[c * chunk + i] == 0);
      }
    }
    /* Padding after the payload is zero. */
    for (size_t i = 32 + chunk; i < csz; i++) ASSERT_EQ(comp[c * csz + i], 0);
    for (size_t i = 2 * es; i < 32; i++) ASSERT_EQ(comp[c * csz + i], 0);
  }
  free(in);
  free(comp);
  free(dec);
  free(acc);
}

static void test_signed_zero_header(void) {
  float in[5] = {-0.0f, 0.0f, -0.0f, 0.0f, -0.0f};
  unsigned char comp[64];
  ASSERT_OK(bagua__minmax_u8_compress(BAGUA_F32, in, 5, 1, comp));
  uint32_t mn, mx;
  memcpy(&mn, comp, 4);
  memcpy(&mx, comp + 4, 4);
  ASSERT_EQ(mn, 0);
  ASSERT_EQ(mx, 0);
  float out[5];
  ASSERT_OK(bagua__minmax_u8_decompress(BAGUA_F32, comp, 5, 1, out));
  for (int i = 0; i < 5; i++) ASSERT_TRUE(out[i] == 0.0f);
}

/* Every vector implementation against the scalar one, byte for byte. */
static void test_vs_scalar(bagua_dtype_t dt, size_t chunk, size_t n_chunks, int garbage,
                           size_t in_off, size_t out_off) {
  size_t es = bagua_dtype_size(dt), csz = bagua__minmax_u8_compressed_size(chunk, dt);
  size_t n = chunk * n_chunks;
  gbuf_t in = gbuf_new(n * es, in_off);
  gbuf_t want = gbuf_new(csz * n_chunks, 0), got = gbuf_new(csz * n_chunks, out_off);
  gbuf_t dwant = gbuf_new(n * es, 0), dgot = gbuf_new(n * es, in_off);
  float *acc0 = malloc((n + 1) * sizeof(float)), *awant = malloc((n + 1) * sizeof(float));
  float *agot = malloc((n + 1) * sizeof(float));
  if (!acc0 || !awant || !agot) TEST_FAIL("out of memory");
  if (garbage)
    fill_random(dt, in.p, n);
  else
    fill_ranges(dt, in.p, chunk, n_chunks);
  for (size_t i = 0; i < n; i++) acc0[i] = rnd_uniform(-1, 1);

  bagua__kernels_force_isa("scalar");
  memset(want.p, 0xab, want.bytes);
  ASSERT_OK(bagua__minmax_u8_compress(dt, in.p, chunk, n_chunks, want.p));
  ASSERT_OK(bagua__minmax_u8_decompress(dt, want.p, chunk, n_chunks, dwant.p));
  memcpy(awant, acc0, n * sizeof(float));
  ASSERT_OK(bagua__minmax_u8_decompress_add(dt, want.p, chunk, n_chunks, awant));

  for (size_t k = 0; k < N_SIMD_ISAS; k++) {
    const char *isa = k_simd_isas[k];
    if (!use_isa(isa)) continue;
    memset(got.p, 0xcd, got.bytes);
    ASSERT_OK(bagua__minmax_u8_compress(dt, in.p, chunk, n_chunks, got.p));
    for (size_t i = 0; i < got.bytes; i++)
      if (got.p[i] != want.p[i])
        TEST_FAIL(
            "%s compress %s chunk=%zu x%zu garbage=%d: byte %zu (chunk %zu offset %zu) is "
            "%u, scalar %u",
            isa, bagua_dtype_name(dt), chunk, n_chunks, garbage, i, i / csz, i % csz, got.p[i],
            want.p[i]);
    ASSERT_OK(bagua__minmax_u8_decompress(dt, got.p, chunk, n_chunks, dgot.p));
    if (n && memcmp(dgot.p, dwant.p, n * es) != 0) {
      for (size_t i = 0; i < n; i++)
        if (memcmp(dgot.p + i * es, dwant.p + i * es, es) != 0)
          TEST_FAIL("%s decompress %s chunk=%zu: element %zu is %.9g, scalar %.9g", isa,
                    bagua_dtype_name(dt), chunk, i, load_f(dt, dgot.p, i), load_f(dt, dwant.p, i));
    }
    memcpy(agot, acc0, n * sizeof(float));
    ASSERT_OK(bagua__minmax_u8_decompress_add(dt, got.p, chunk, n_chunks, agot));
    for (size_t i = 0; i < n; i++)
      if (f32_bits(agot[i]) != f32_bits(awant[i]))
        TEST_FAIL("%s decompress_add %s chunk=%zu: element %zu is %.9g, scalar %.9g", isa,
                  bagua_dtype_name(dt), chunk, i, agot[i], awant[i]);
    gbuf_check(&got, "compress out");
    gbuf_check(&dgot, "decompress out");
  }
  gbuf_check(&in, "compress in");
  gbuf_free(&in);
  gbuf_free(&want);
  gbuf_free(&got);
  gbuf_free(&dwant);
  gbuf_free(&dgot);
  free(acc0);
  free(awant);
  free(agot);
}

int main(void) {
  test_sizes();
  test_signed_zero_header();
  bagua__kernels_force_isa(NULL);
  static const size_t n_chunks[] = {1, 3, 8};
  /* Input (and decompressed output) offsets in bytes, within and by whole elements. */
  static const size_t offs[] = {0, 1, 2, 3, 4, 8, 12};
  for (size_t t = 0; t < 3; t++)
    for (size_t c = 0; c < N_COUNTS; c++)
      for (size_t k = 0; k < 3; k++) {
        size_t chunk = k_counts[c], nc = n_chunks[k];
        if (chunk > 100000 && nc > 1) nc = 2; /* keep the large case cheap */
        test_error_bound(k_qdtypes[t], chunk, nc);
        test_vs_scalar(k_qdtypes[t], chunk, nc, 0, offs[(c + k) % 7], (c + 2 * k + 1) % 4);
        test_vs_scalar(k_qdtypes[t], chunk, nc, 1, offs[(c + k + 1) % 7], (c + k) % 4);
      }
  bagua__kernels_force_isa(NULL);
  printf("minmax_u8: layout, error bound and vector/scalar identity checked\n");
  return 0;
}
