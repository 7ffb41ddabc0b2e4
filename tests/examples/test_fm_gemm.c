/*
 * The packed SGEMM against a double-precision triple loop, for both micro-kernels, the three
 * operand layouts the MLP uses (A*B, A^T*B, A*B^T), shapes with partial tiles and with more
 * than one cache block in every dimension, and with and without accumulation.
 */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gemm.h"
#include "rng.h"
#include "test.h"

static void fill(fm_rng_t *r, float *v, size_t n) {
  for (size_t i = 0; i < n; i++) v[i] = 2.0f * fm_rng_uniform(r) - 1.0f;
}

/* One product of shape m x n x k with A and/or B read transposed from row-major storage. */
static void check(fm_gemm_ws_t *ws, fm_rng_t *r, int m, int n, int k, int ta, int tb, int acc) {
  /* Stored A is m x k (or k x m when transposed), B is k x n (or n x k); C has a wider
   * leading dimension than n so that writes past a row's end would be caught. */
  size_t ldc = (size_t)n + 3;
  float *a = malloc(sizeof(float) * ((size_t)m * k + 1));
  float *b = malloc(sizeof(float) * ((size_t)k * n + 1));
  float *c = malloc(sizeof(float) * ((size_t)m * ldc + 1));
  float *c0 = malloc(sizeof(float) * ((size_t)m * ldc + 1));
  ASSERT_TRUE(a && b && c && c0);
  fill(r, a, (size_t)m * k);
  fill(r, b, (size_t)k * n);
  fill(r, c0, (size_t)m * ldc);
  memcpy(c, c0, sizeof(float) * (size_t)m * ldc);
  ptrdiff_t rsa = ta ? 1 : k, csa = ta ? m : 1, rsb = tb ? 1 : n, csb = tb ? k : 1;
  fm_sgemm(ws, m, n, k, a, rsa, csa, b, rsb, csb, c, (ptrdiff_t)ldc, acc);
  for (int i = 0; i < m; i++) {
    for (int j = 0; j < (int)ldc; j++) {
      float got = c[(size_t)i * ldc + j];
      if (j >= n) {
        /* Padding columns are never written. */
        ASSERT_TRUE(memcmp(&got, &c0[(size_t)i * ldc + j], sizeof(got)) == 0);
        continue;
      }
      double want = acc ? c0[(size_t)i * ldc + j] : 0.0, mag = fabs(want);
      for (int p = 0; p < k; p++) {
        double x = a[i * rsa + p * csa], y = b[p * rsb + j * csb];
        want += x * y;
        mag += fabs(x * y);
      }
      /* Any summation order is within (k+1) * eps * sum|terms| of the exact result. */
      double tol = (k + 2) * (double)FLT_EPSILON * mag + 1e-30;
      if (fabs(got - want) > tol)
        TEST_FAIL("m=%d n=%d k=%d ta=%d tb=%d acc=%d: C[%d][%d] = %.9g, expected %.9g (tol %g)", m,
                  n, k, ta, tb, acc, i, j, got, want, tol);
    }
  }
  free(a);
  free(b);
  free(c);
  free(c0);
}

int main(void) {
  static const int shapes[][3] = {
      {1, 1, 1},     {6, 16, 1},    {5, 15, 7},     {7, 17, 3},     {64, 10, 512},
      {64, 512, 33}, {13, 40, 300}, {100, 33, 513}, {200, 600, 20}, {97, 530, 260},
  };
  fm_gemm_ws_t ws;
  fm_rng_t r;
  ASSERT_EQ(fm_gemm_ws_init(&ws), 0);
  fm_rng_seed(&r, 12345, 0);
  const char *isas[2] = {"generic", "avx2"};
  for (int g = 0; g < 2; g++) {
    fm_gemm_force_generic(g == 0);
    if (strcmp(fm_gemm_isa(), isas[g]) != 0) {
      printf("skipping the %s micro-kernel: this CPU lacks it\n", isas[g]);
      continue;
    }
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
      for (int t = 0; t < 3; t++)
        for (int acc = 0; acc < 2; acc++)
          check(&ws, &r, shapes[s][0], shapes[s][1], shapes[s][2], t == 1, t == 2, acc);
    printf("%s: ok\n", isas[g]);
  }
  /* Degenerate shapes: nothing to do, or an empty sum that clears C. */
  float c[4] = {1, 2, 3, 4}, dummy = 0;
  fm_sgemm(&ws, 0, 2, 2, &dummy, 2, 1, &dummy, 2, 1, c, 2, 0);
  ASSERT_TRUE(c[0] == 1.0f);
  fm_sgemm(&ws, 2, 2, 0, &dummy, 0, 1, &dummy, 2, 1, c, 2, 1);
  ASSERT_TRUE(c[3] == 4.0f);
  fm_sgemm(&ws, 2, 2, 0, &dummy, 0, 1, &dummy, 2, 1, c, 2, 0);
  ASSERT_TRUE(c[0] == 0.0f && c[3] == 0.0f);
  fm_gemm_force_generic(0);
  fm_gemm_ws_free(&ws);
  return 0;
}
