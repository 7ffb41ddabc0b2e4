/*
 * bagua__cuda_reduce_n against the scalar CPU oracle (bagua__reduce_n, then bagua__div for
 * BAGUA_AVG), byte for byte, NaN payloads included: every dtype and operator, 1 to 40 sources
 * (more than 32 takes several passes), odd counts, buffers that are not 16-byte aligned, and
 * dst separate from the sources or equal to one of them.
 */
#include "gpu_test.h"
#include "tests/kernels/ktest.h"

static const int k_nsrc[] = {1, 2, 3, 4, 7, 33, 40};
static const size_t k_cnt[] = {0, 1, 2, 7, 17, 31, 1000, 4099};

/* alias: 0 dst separate, 1 dst is srcs[0], 2 dst is srcs[n-1] (a source the CPU may not alias,
 * so the oracle runs on a separate dst; the GPU contract allows any of the first 32). */
static void run_case(bagua_dtype_t dt, bagua_op_t op, int n, size_t count, size_t off_el,
                     int alias) {
  size_t es = bagua_dtype_size(dt), bytes = count * es;
  if (alias == 2 && n > 32) return;
  unsigned char **h = calloc((size_t)n, sizeof(*h));
  const void **hs = calloc((size_t)n, sizeof(*hs));
  dbuf_t *d = calloc((size_t)n, sizeof(*d));
  const void **ds = calloc((size_t)n, sizeof(*ds));
  unsigned char *want = malloc(bytes + 1), *got = malloc(bytes + 1);
  if (!h || !hs || !d || !ds || !want || !got) TEST_FAIL("out of memory");
  for (int k = 0; k < n; k++) {
    h[k] = malloc(bytes + 1);
    if (!h[k]) TEST_FAIL("out of memory");
    fill_random(dt, h[k], count);
    hs[k] = h[k];
    /* Sources at different offsets from each other when misaligned: only element alignment
     * is common to all of them, so the kernel must take its scalar path. */
    d[k] = dbuf_new(bytes, off_el ? (size_t)(k % 3 + 1) * es : 0);
    dbuf_put(&d[k], h[k]);
    ds[k] = d[k].p;
  }
  bagua__reduce_n(dt, op, want, hs, n, count);
  if (op == BAGUA_AVG) bagua__div(dt, want, count, n);

  dbuf_t dd = {0};
  void *dst;
  if (alias == 1) {
    dst = d[0].p;
  } else if (alias == 2) {
    dst = d[n - 1].p;
  } else {
    dd = dbuf_new(bytes, off_el * es);
    dst = dd.p;
  }
  ASSERT_OK(bagua__cuda_reduce_n(dt, op, dst, ds, n, count, 0));
  CUDA_OK(cudaDeviceSynchronize());
  if (count) CUDA_OK(cudaMemcpy(got, dst, bytes, cudaMemcpyDeviceToHost));
  size_t diff = first_diff(got, want, bytes);
  if (diff != (size_t)-1)
    TEST_FAIL("reduce_n %s %s n=%d count=%zu off=%zu alias=%d: element %zu differs",
              bagua_dtype_name(dt), bagua_op_name(op), n, count, off_el, alias, diff / es);
  for (int k = 0; k < n; k++) {
    dbuf_check_guards(&d[k], "reduce_n source");
    dbuf_free(&d[k]);
    free(h[k]);
  }
  if (dd.base) {
    dbuf_check_guards(&dd, "reduce_n dst");
    dbuf_free(&dd);
  }
  free(h);
  free(hs);
  free(d);
  free(ds);
  free(want);
  free(got);
}

static void test_args(void) {
  float *d;
  CUDA_OK(cudaMalloc((void **)&d, 256));
  const void *srcs[2] = {d, d + 8};
  ASSERT_STATUS(bagua__cuda_reduce_n(BAGUA_DTYPE__COUNT, BAGUA_SUM, d, srcs, 2, 4, 0),
                BAGUA_ERR_INVALID_ARG);
  ASSERT_STATUS(bagua__cuda_reduce_n(BAGUA_F32, BAGUA_OP__COUNT, d, srcs, 2, 4, 0),
                BAGUA_ERR_INVALID_ARG);
  ASSERT_STATUS(bagua__cuda_reduce_n(BAGUA_F32, BAGUA_SUM, d, srcs, 0, 4, 0),
                BAGUA_ERR_INVALID_ARG);
  const void *bad[2] = {d, (const char *)d + 2};
  ASSERT_STATUS(bagua__cuda_reduce_n(BAGUA_F32, BAGUA_SUM, d + 16, bad, 2, 4, 0),
                BAGUA_ERR_INVALID_ARG);
  ASSERT_OK(bagua__cuda_reduce_n(BAGUA_F32, BAGUA_SUM, NULL, srcs, 2, 0, 0));
  CUDA_OK(cudaDeviceSynchronize());
  cudaFree(d);
}

int main(void) {
  gpu_require_device();
  ASSERT_EQ(bagua__kernels_force_isa("scalar"), 0);
  (void)k_simd_isas;
  (void)k_counts;
  test_args();
  int cases = 0;
  for (int dt = 0; dt < BAGUA_DTYPE__COUNT; dt++)
    for (int op = 0; op < BAGUA_OP__COUNT; op++)
      for (size_t s = 0; s < sizeof(k_nsrc) / sizeof(k_nsrc[0]); s++)
        for (size_t c = 0; c < sizeof(k_cnt) / sizeof(k_cnt[0]); c++)
          for (int alias = 0; alias < 3; alias++) {
            size_t off = (c + s + (size_t)alias) & 1;
            run_case((bagua_dtype_t)dt, (bagua_op_t)op, k_nsrc[s], k_cnt[c], off, alias);
            cases++;
          }
  /* Large and odd: every vector path plus a scalar tail, aligned and not. */
  for (int dt = 0; dt < BAGUA_DTYPE__COUNT; dt++) {
    run_case((bagua_dtype_t)dt, BAGUA_AVG, 3, 1000003, 0, 0);
    run_case((bagua_dtype_t)dt, BAGUA_SUM, 2, 1000003, 1, 1);
    run_case((bagua_dtype_t)dt, BAGUA_MAX, 33, 100003, 0, 1);
    cases += 3;
  }
  printf("gpu reduce_n: %d cases identical to the scalar CPU oracle\n", cases);
  return 0;
}
