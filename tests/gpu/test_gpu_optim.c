/*
 * axpy, scale, SGD and Adam/AdamW on the GPU against the scalar CPU oracle: bit-identical for
 * every non-NaN result (where the CPU gives NaN the GPU must too, payload free), for f32, f16
 * and bf16 (axpy/scale data, optimizer gradients), odd counts and buffers that are not 16-byte
 * aligned, over the hyper-parameter combinations that change the arithmetic.
 */
#include "gpu_test.h"
#include "tests/kernels/ktest.h"

static const bagua_dtype_t k_fdt[] = {BAGUA_F32, BAGUA_F16, BAGUA_BF16};
static const size_t k_n[] = {0, 1, 3, 4, 5, 17, 1000, 65539};

static float ld(bagua_dtype_t dt, const unsigned char *p, size_t i) {
  uint16_t h;
  float f;
  if (dt == BAGUA_F32) {
    memcpy(&f, p + 4 * i, 4);
    return f;
  }
  memcpy(&h, p + 2 * i, 2);
  return dt == BAGUA_F16 ? bagua__f16_to_f32(h) : bagua__bf16_to_f32(h);
}

static void st(bagua_dtype_t dt, unsigned char *p, size_t i, float v) {
  uint16_t h;
  if (dt == BAGUA_F32) {
    memcpy(p + 4 * i, &v, 4);
    return;
  }
  h = dt == BAGUA_F16 ? bagua__f32_to_f16(v) : bagua__f32_to_bf16(v);
  memcpy(p + 2 * i, &h, 2);
}

/* Element i equal, or both NaN. */
static void expect_elems(const char *what, bagua_dtype_t dt, const unsigned char *got,
                         const unsigned char *want, size_t n) {
  size_t es = bagua_dtype_size(dt);
  for (size_t i = 0; i < n; i++) {
    if (memcmp(got + i * es, want + i * es, es) == 0) continue;
    if (is_nan_elem(dt, got + i * es) && is_nan_elem(dt, want + i * es)) continue;
    TEST_FAIL("%s %s n=%zu: element %zu is %.9g on the GPU, %.9g on the CPU", what,
              bagua_dtype_name(dt), n, i, (double)ld(dt, got, i), (double)ld(dt, want, i));
  }
}

static void test_axpy_scale(bagua_dtype_t dt, size_t n, size_t off_el, float a) {
  size_t es = bagua_dtype_size(dt), bytes = n * es;
  unsigned char *x = malloc(bytes + 1), *y = malloc(bytes + 1), *want = malloc(bytes + 1),
                *got = malloc(bytes + 1);
  if (!x || !y || !want || !got) TEST_FAIL("out of memory");
  fill_random(dt, x, n);
  fill_random(dt, y, n);
  dbuf_t dx = dbuf_new(bytes, off_el * es), dy = dbuf_new(bytes, off_el * es);
  dbuf_put(&dx, x);
  dbuf_put(&dy, y);

  /* axpy: y + a*x in f32, rounded once to dt; for f32 the library's own oracle. */
  memcpy(want, y, bytes);
  if (dt == BAGUA_F32) {
    bagua__axpy(a, (const float *)x, (float *)want, n);
  } else {
    for (size_t i = 0; i < n; i++) st(dt, want, i, ld(dt, want, i) + a * ld(dt, x, i));
  }
  ASSERT_OK(bagua__cuda_axpy(dt, a, dx.p, dy.p, n, 0));
  CUDA_OK(cudaDeviceSynchronize());
  dbuf_get(&dy, got);
  expect_elems("axpy", dt, got, want, n);
  dbuf_check_guards(&dy, "axpy y");

  /* scale, applied to the axpy result. */
  if (dt == BAGUA_F32) {
    bagua__scale(a, (float *)want, n);
  } else {
    for (size_t i = 0; i < n; i++) st(dt, want, i, ld(dt, want, i) * a);
  }
  dbuf_put(&dy, got);
  ASSERT_OK(bagua__cuda_scale(dt, a, dy.p, n, 0));
  CUDA_OK(cudaDeviceSynchronize());
  dbuf_get(&dy, got);
  expect_elems("scale", dt, got, want, n);
  dbuf_check_guards(&dy, "scale x");

  dbuf_free(&dx);
  dbuf_free(&dy);
  free(x);
  free(y);
  free(want);
  free(got);
}

/* Finite optimizer inputs, with a few exact zeros and large values mixed in. */
static void fill_state(float *p, size_t n, float lo, float hi) {
  for (size_t i = 0; i < n; i++) {
    uint32_t r = rnd32() & 31;
    p[i] = r == 0 ? 0.0f : r == 1 ? rnd_uniform(lo, hi) * 1e6f : rnd_uniform(lo, hi);
  }
}

typedef struct {
  float *param, *buf, *m, *v;
  unsigned char *grad; /* in grad dtype */
  float *grad32;       /* the same gradient widened, for the CPU */
} optim_host_t;

static void test_optim(bagua_dtype_t gdt, size_t n, size_t off_el) {
  size_t ges = bagua_dtype_size(gdt), fb = n * 4;
  optim_host_t h;
  h.param = malloc(fb + 4);
  h.buf = malloc(fb + 4);
  h.m = malloc(fb + 4);
  h.v = malloc(fb + 4);
  h.grad = malloc(n * ges + 4);
  h.grad32 = malloc(fb + 4);
  float *wp = malloc(fb + 4), *wb = malloc(fb + 4), *wm = malloc(fb + 4), *wv = malloc(fb + 4);
  float *gp = malloc(fb + 4), *gb = malloc(fb + 4), *gm = malloc(fb + 4), *gv = malloc(fb + 4);
  if (!h.param || !h.buf || !h.m || !h.v || !h.grad || !h.grad32 || !wp || !wb || !wm || !wv ||
      !gp || !gb || !gm || !gv)
    TEST_FAIL("out of memory");
  dbuf_t dp = dbuf_new(fb, off_el * 4), db = dbuf_new(fb, off_el * 4);
  dbuf_t dm = dbuf_new(fb, off_el * 4), dv = dbuf_new(fb, off_el * 4);
  dbuf_t dg = dbuf_new(n * ges, off_el * ges);

  static const double moms[] = {0.0, 0.9}, wds[] = {0.0, 1e-2}, damps[] = {0.0, 0.1};
  for (int mi = 0; mi < 2; mi++)
    for (int nest = 0; nest < 2; nest++)
      for (int wi = 0; wi < 2; wi++)
        for (int di = 0; di < 2; di++)
          for (int first = 0; first < 2; first++) {
            if (nest && moms[mi] == 0.0) continue;
            bagua__sgd_params_t hp = {0.05, moms[mi], damps[di], wds[wi], nest};
            fill_state(h.param, n, -1, 1);
            fill_state(h.buf, n, -1, 1);
            fill_state(h.grad32, n, -2, 2);
            for (size_t i = 0; i < n; i++) {
              st(gdt, h.grad, i, h.grad32[i]);
              h.grad32[i] = ld(gdt, h.grad, i); /* exactly what the GPU will see */
            }
            memcpy(wp, h.param, fb);
            memcpy(wb, h.buf, fb);
            bagua__sgd_step(wp, h.grad32, wb, n, &hp, first);
            dbuf_put(&dp, h.param);
            dbuf_put(&db, h.buf);
            dbuf_put(&dg, h.grad);
            ASSERT_OK(
                bagua__cuda_sgd_step((float *)dp.p, dg.p, gdt, (float *)db.p, n, &hp, first, 0));
            CUDA_OK(cudaDeviceSynchronize());
            dbuf_get(&dp, gp);
            dbuf_get(&db, gb);
            expect_elems("sgd param", BAGUA_F32, (unsigned char *)gp, (unsigned char *)wp, n);
            expect_elems("sgd momentum", BAGUA_F32, (unsigned char *)gb, (unsigned char *)wb, n);
          }

  static const int64_t steps[] = {1, 10, 1000};
  for (int dec = 0; dec < 2; dec++)
    for (int wi = 0; wi < 2; wi++)
      for (int si = 0; si < 3; si++) {
        bagua__adam_params_t hp = {1e-3, 0.9, 0.999, 1e-8, wds[wi], dec};
        fill_state(h.param, n, -1, 1);
        fill_state(h.m, n, -0.1f, 0.1f);
        fill_state(h.v, n, 0, 0.01f); /* a second moment is never negative */
        fill_state(h.grad32, n, -2, 2);
        for (size_t i = 0; i < n; i++) {
          st(gdt, h.grad, i, h.grad32[i]);
          h.grad32[i] = ld(gdt, h.grad, i);
        }
        memcpy(wp, h.param, fb);
        memcpy(wm, h.m, fb);
        memcpy(wv, h.v, fb);
        bagua__adam_step(wp, h.grad32, wm, wv, n, &hp, steps[si]);
        dbuf_put(&dp, h.param);
        dbuf_put(&dm, h.m);
        dbuf_put(&dv, h.v);
        dbuf_put(&dg, h.grad);
        ASSERT_OK(bagua__cuda_adam_step((float *)dp.p, dg.p, gdt, (float *)dm.p, (float *)dv.p, n,
                                        &hp, steps[si], 0));
        CUDA_OK(cudaDeviceSynchronize());
        dbuf_get(&dp, gp);
        dbuf_get(&dm, gm);
        dbuf_get(&dv, gv);
        expect_elems("adam param", BAGUA_F32, (unsigned char *)gp, (unsigned char *)wp, n);
        expect_elems("adam exp_avg", BAGUA_F32, (unsigned char *)gm, (unsigned char *)wm, n);
        expect_elems("adam exp_avg_sq", BAGUA_F32, (unsigned char *)gv, (unsigned char *)wv, n);
      }
  dbuf_check_guards(&dp, "param");
  dbuf_check_guards(&db, "momentum");
  dbuf_check_guards(&dm, "exp_avg");
  dbuf_check_guards(&dv, "exp_avg_sq");
  dbuf_free(&dp);
  dbuf_free(&db);
  dbuf_free(&dm);
  dbuf_free(&dv);
  dbuf_free(&dg);
  free(h.param);
  free(h.buf);
  free(h.m);
  free(h.v);
  free(h.grad);
  free(h.grad32);
  free(wp);
  free(wb);
  free(wm);
  free(wv);
  free(gp);
  free(gb);
  free(gm);
  free(gv);
}

static void test_args(void) {
  float *d;
  CUDA_OK(cudaMalloc((void **)&d, 256));
  bagua__sgd_params_t sgd = {0.1, 0.9, 0, 0, 0};
  ASSERT_STATUS(bagua__cuda_axpy(BAGUA_F64, 1.0f, d, d + 8, 4, 0), BAGUA_ERR_INVALID_ARG);
  ASSERT_STATUS(bagua__cuda_scale(BAGUA_F32, 1.0f, (char *)d + 1, 4, 0), BAGUA_ERR_INVALID_ARG);
  /* Momentum needs its buffer. */
  ASSERT_STATUS(bagua__cuda_sgd_step(d, d + 8, BAGUA_F32, NULL, 4, &sgd, 0, 0),
                BAGUA_ERR_INVALID_ARG);
  ASSERT_STATUS(bagua__cuda_adam_step(d, d + 8, BAGUA_F32, d + 16, d + 24, 4, NULL, 1, 0),
                BAGUA_ERR_INVALID_ARG);
  ASSERT_OK(bagua__cuda_axpy(BAGUA_F32, 1.0f, NULL, NULL, 0, 0));
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
  for (size_t t = 0; t < sizeof(k_fdt) / sizeof(k_fdt[0]); t++)
    for (size_t i = 0; i < sizeof(k_n) / sizeof(k_n[0]); i++)
      for (size_t off = 0; off < 2; off++) {
        test_axpy_scale(k_fdt[t], k_n[i], off, 0.75f);
        test_axpy_scale(k_fdt[t], k_n[i], off, -1e-3f);
        test_optim(k_fdt[t], k_n[i], off);
        cases += 3;
      }
  test_axpy_scale(BAGUA_F32, 1000003, 0, 0.5f);
  test_optim(BAGUA_F32, 1000003, 0);
  test_optim(BAGUA_BF16, 1000003, 1);
  printf("gpu optim: %d cases identical to the scalar CPU oracle\n", cases + 3);
  return 0;
}
