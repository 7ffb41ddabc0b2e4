/*
 * MinMaxUInt8 on the GPU against the scalar CPU oracle, byte for byte: compressed regions
 * (header, payload, padding), decompressed values and fused decompress-and-add, for f32, f16
 * and bf16, chunk sizes on both sides of the one-pass limit (8192 elements) and of the vector
 * widths, several chunks, element buffers that are not 16-byte aligned and compressed buffers
 * at odd byte offsets, with finite data and with garbage (NaN, inf, subnormals). Guard bytes
 * around every device buffer catch out-of-bounds writes.
 */
#include "gpu_test.h"
#include "tests/kernels/ktest.h"

static const bagua_dtype_t k_qdt[] = {BAGUA_F32, BAGUA_F16, BAGUA_BF16};
static const size_t k_chunk[] = {0,    1,    2,    3,    31,    33,    255,   1000,
                                 4095, 8191, 8192, 8193, 20000, 65537, 100003};
static const size_t k_nchunks[] = {1, 3, 8};

static void store_f(bagua_dtype_t dt, unsigned char *p, size_t i, float v) {
  uint16_t h;
  if (dt == BAGUA_F32) {
    memcpy(p + 4 * i, &v, 4);
    return;
  }
  h = dt == BAGUA_F16 ? bagua__f32_to_f16(v) : bagua__f32_to_bf16(v);
  memcpy(p + 2 * i, &h, 2);
}

/* mode 0: finite values in a range per chunk; 1: anything (fill_random); 2: degenerate chunks
 * (all NaN, all +inf, constant, a single -0) cycling through the chunks. */
static void fill(bagua_dtype_t dt, unsigned char *p, size_t chunk, size_t n_chunks, int mode) {
  static const float ranges[][2] = {{-1, 1}, {0, 1e-3f}, {1000, 1001}, {-5e4f, 3e4f}, {-2, -1.5f}};
  if (mode == 1) {
    fill_random(dt, p, chunk * n_chunks);
    return;
  }
  for (size_t c = 0; c < n_chunks; c++) {
    for (size_t i = 0; i < chunk; i++) {
      float v;
      if (mode == 0) {
        v = rnd_uniform(ranges[c % 5][0], ranges[c % 5][1]);
      } else {
        switch (c % 4) {
          case 0:
            v = NAN;
            break;
          case 1:
            v = INFINITY;
            break;
          case 2:
            v = 3.0f;
            break;
          default:
            v = i == chunk / 2 ? -0.0f : 0.0f;
            break;
        }
      }
      store_f(dt, p, c * chunk + i, v);
    }
  }
}

static void expect_same(const char *what, const void *gpu, const void *cpu, size_t bytes,
                        bagua_dtype_t dt, size_t chunk, size_t n_chunks, int mode) {
  size_t d = first_diff(gpu, cpu, bytes);
  if (d == (size_t)-1) return;
  TEST_FAIL("%s %s chunk=%zu x %zu mode=%d: byte %zu differs (gpu 0x%02x, cpu 0x%02x)", what,
            bagua_dtype_name(dt), chunk, n_chunks, mode, d, ((const unsigned char *)gpu)[d],
            ((const unsigned char *)cpu)[d]);
}

static void run_case(bagua_dtype_t dt, size_t chunk, size_t n_chunks, int mode, size_t off_el,
                     size_t off_q) {
  size_t es = bagua_dtype_size(dt), n = chunk * n_chunks;
  size_t stride = bagua__minmax_u8_compressed_size(chunk, dt), qbytes = stride * n_chunks;
  unsigned char *in = malloc(n * es + 1), *q_cpu = malloc(qbytes), *q_gpu = malloc(qbytes);
  unsigned char *dec_cpu = malloc(n * es + 1), *dec_gpu = malloc(n * es + 1);
  float *acc_cpu = malloc(n * 4 + 4), *acc_gpu = malloc(n * 4 + 4);
  if (!in || !q_cpu || !q_gpu || !dec_cpu || !dec_gpu || !acc_cpu || !acc_gpu)
    TEST_FAIL("out of memory");
  fill(dt, in, chunk, n_chunks, mode);
  for (size_t i = 0; i < n; i++)
    acc_cpu[i] = (i % 97 == 5) ? NAN : rnd_uniform(-10.0f, 10.0f); /* some NaN accumulators */

  ASSERT_OK(bagua__minmax_u8_compress(dt, in, chunk, n_chunks, q_cpu));
  ASSERT_OK(bagua__minmax_u8_decompress(dt, q_cpu, chunk, n_chunks, dec_cpu));

  dbuf_t din = dbuf_new(n * es, off_el * es), dq = dbuf_new(qbytes, off_q);
  dbuf_t ddec = dbuf_new(n * es, off_el * es), dacc = dbuf_new(n * 4, off_el * 4);
  dbuf_put(&din, in);
  ASSERT_OK(bagua__cuda_minmax_u8_compress(dt, din.p, chunk, n_chunks, dq.p, 0));
  CUDA_OK(cudaDeviceSynchronize());
  dbuf_get(&dq, q_gpu);
  expect_same("compress", q_gpu, q_cpu, qbytes, dt, chunk, n_chunks, mode);
  dbuf_check_guards(&dq, "compress output");

  /* Decompression reads the CPU's bytes, so the two directions are checked separately. */
  dbuf_put(&dq, q_cpu);
  ASSERT_OK(bagua__cuda_minmax_u8_decompress(dt, dq.p, chunk, n_chunks, ddec.p, 0));
  dbuf_put(&dacc, acc_cpu);
  ASSERT_OK(bagua__cuda_minmax_u8_decompress_add(dt, dq.p, chunk, n_chunks, (float *)dacc.p, 0));
  CUDA_OK(cudaDeviceSynchronize());
  dbuf_get(&ddec, dec_gpu);
  dbuf_get(&dacc, acc_gpu);
  ASSERT_OK(bagua__minmax_u8_decompress_add(dt, q_cpu, chunk, n_chunks, acc_cpu));
  expect_same("decompress", dec_gpu, dec_cpu, n * es, dt, chunk, n_chunks, mode);
  expect_same("decompress_add", acc_gpu, acc_cpu, n * 4, dt, chunk, n_chunks, mode);
  dbuf_check_guards(&ddec, "decompress output");
  dbuf_check_guards(&dacc, "decompress_add accumulator");

  dbuf_free(&din);
  dbuf_free(&dq);
  dbuf_free(&ddec);
  dbuf_free(&dacc);
  free(in);
  free(q_cpu);
  free(q_gpu);
  free(dec_cpu);
  free(dec_gpu);
  free(acc_cpu);
  free(acc_gpu);
}

static void test_args(void) {
  float *d;
  CUDA_OK(cudaMalloc((void **)&d, 256));
  ASSERT_STATUS(bagua__cuda_minmax_u8_compress(BAGUA_F64, d, 4, 1, d + 16, 0),
                BAGUA_ERR_INVALID_ARG);
  ASSERT_STATUS(bagua__cuda_minmax_u8_decompress(BAGUA_I32, d, 4, 1, d + 16, 0),
                BAGUA_ERR_INVALID_ARG);
  /* f32 elements must be 4-byte aligned on the device. */
  ASSERT_STATUS(bagua__cuda_minmax_u8_compress(BAGUA_F32, (char *)d + 2, 4, 1, d + 16, 0),
                BAGUA_ERR_INVALID_ARG);
  ASSERT_STATUS(bagua__cuda_minmax_u8_compress(BAGUA_F32, NULL, 4, 1, d, 0), BAGUA_ERR_INVALID_ARG);
  ASSERT_OK(bagua__cuda_minmax_u8_compress(BAGUA_F32, NULL, 4, 0, NULL, 0));
  ASSERT_OK(bagua__cuda_minmax_u8_decompress(BAGUA_F16, NULL, 0, 3, NULL, 0));
  CUDA_OK(cudaDeviceSynchronize());
  cudaFree(d);
}

int main(void) {
  gpu_require_device();
  ASSERT_EQ(bagua__kernels_force_isa("scalar"), 0); /* the oracle */
  (void)k_simd_isas;
  (void)k_counts;
  test_args();
  int cases = 0;
  for (size_t t = 0; t < sizeof(k_qdt) / sizeof(k_qdt[0]); t++)
    for (size_t c = 0; c < sizeof(k_chunk) / sizeof(k_chunk[0]); c++)
      for (size_t k = 0; k < sizeof(k_nchunks) / sizeof(k_nchunks[0]); k++)
        for (int mode = 0; mode < 3; mode++) {
          /* Aligned, and misaligned in both buffers, alternating to bound the run time. */
          size_t off_el = (c + k + (size_t)mode) & 1, off_q = off_el ? 5 : 0;
          run_case(k_qdt[t], k_chunk[c], k_nchunks[k], mode, off_el, off_q);
          cases++;
        }
  /* One large bucket split like ByteGrad's: 16 chunks of 1 Mi elements. */
  run_case(BAGUA_F32, 1 << 20, 16, 0, 0, 0);
  run_case(BAGUA_F16, 1 << 20, 16, 1, 0, 0);
  printf("gpu minmax_u8: %d cases identical to the scalar CPU oracle\n", cases + 2);
  return 0;
}
