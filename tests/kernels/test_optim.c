/*
 * axpy, scale and the optimizer steps: every vector implementation against the scalar one bit
 * for bit (over several consecutive steps, so the state buffers are compared too), and the
 * scalar one against a plain double-precision restatement of torch.optim's update rules.
 */
#include "ktest.h"

static const size_t k_optim_counts[] = {0, 1, 2, 3, 7, 15, 16, 17, 31, 33, 255, 1000, 100003};
#define N_OPTIM_COUNTS (sizeof(k_optim_counts) / sizeof(k_optim_counts[0]))

static float *fvec(size_t n) {
  float *p = malloc((n + 4) * sizeof(float));
  if (!p) TEST_FAIL("out of memory");
  return p;
}

static void fill_f(float *p, size_t n, float lo, float hi) {
  for (size_t i = 0; i < n; i++) p[i] = rnd_uniform(lo, hi);
}

static void same_bits(const char *isa, const char *what, const float *got, const float *want,
                      size_t n) {
  for (size_t i = 0; i < n; i++)
    if (f32_bits(got[i]) != f32_bits(want[i]))
      TEST_FAIL("%s %s n=%zu: element %zu is %.9g (0x%08x), scalar %.9g (0x%08x)", isa, what, n, i,
                got[i], f32_bits(got[i]), want[i], f32_bits(want[i]));
}

static void test_axpy_scale(size_t n, size_t off) {
  float *x = fvec(n) + off, *y0 = fvec(n) + off, *yw = fvec(n), *yg = fvec(n) + off;
  fill_f(x, n, -10, 10);
  fill_f(y0, n, -10, 10);
  bagua__kernels_force_isa("scalar");
  memcpy(yw, y0, n * sizeof(float));
  bagua__axpy(0.37f, x, yw, n);
  for (size_t i = 0; i < n; i++) ASSERT_TRUE(yw[i] == y0[i] + 0.37f * x[i]);
  for (size_t k = 0; k < N_SIMD_ISAS; k++) {
    if (!use_isa(k_simd_isas[k])) continue;
    memcpy(yg, y0, n * sizeof(float));
    bagua__axpy(0.37f, x, yg, n);
    same_bits(k_simd_isas[k], "axpy", yg, yw, n);
  }
  bagua__kernels_force_isa("scalar");
  memcpy(yw, y0, n * sizeof(float));
  bagua__scale(-1.7f, yw, n);
  for (size_t i = 0; i < n; i++) ASSERT_TRUE(yw[i] == y0[i] * -1.7f);
  for (size_t k = 0; k < N_SIMD_ISAS; k++) {
    if (!use_isa(k_simd_isas[k])) continue;
    memcpy(yg, y0, n * sizeof(float));
    bagua__scale(-1.7f, yg, n);
    same_bits(k_simd_isas[k], "scale", yg, yw, n);
  }
  free(x - off);
  free(y0 - off);
  free(yw);
  free(yg - off);
}

/* torch.optim.SGD restated in double for one element. */
static void sgd_ref(double *p, double g, double *buf, const bagua__sgd_params_t *hp, int first) {
  double d = g;
  if (hp->weight_decay != 0) d += hp->weight_decay * *p;
  if (hp->momentum != 0) {
    if (first)
      *buf = d;
    else
      *buf = hp->momentum * *buf + (1 - hp->dampening) * d;
    d = hp->nesterov ? d + hp->momentum * *buf : *buf;
  }
  *p -= hp->lr * d;
}

/* torch.optim.Adam / AdamW restated in double for one element. */
static void adam_ref(double *p, double g, double *m, double *v, const bagua__adam_params_t *hp,
                     int64_t step) {
  if (hp->decoupled)
    *p *= 1 - hp->lr * hp->weight_decay;
  else
    g += hp->weight_decay * *p;
  *m = hp->beta1 * *m + (1 - hp->beta1) * g;
  *v = hp->beta2 * *v + (1 - hp->beta2) * g * g;
  double bc1 = 1 - pow(hp->beta1, (double)step), bc2 = 1 - pow(hp->beta2, (double)step);
  *p -= hp->lr / bc1 * *m / (sqrt(*v) / sqrt(bc2) + hp->eps);
}

enum { STEPS = 4 };

static void test_sgd(const bagua__sgd_params_t *hp, size_t n, size_t off) {
  float *p0 = fvec(n), *g[STEPS];
  for (int s = 0; s < STEPS; s++) {
    g[s] = fvec(n);
    fill_f(g[s], n, -1, 1);
  }
  fill_f(p0, n, -2, 2);
  float *pw = fvec(n), *bw = fvec(n), *pg = fvec(n) + off, *bg = fvec(n) + off;
  double *pr = malloc((n + 1) * sizeof(double)), *br = malloc((n + 1) * sizeof(double));
  if (!pr || !br) TEST_FAIL("out of memory");
  memcpy(pw, p0, n * sizeof(float));
  memset(bw, 0x7f, n * sizeof(float)); /* garbage: the first step must overwrite it */
  for (size_t i = 0; i < n; i++) pr[i] = p0[i];
  bagua__kernels_force_isa("scalar");
  for (int s = 0; s < STEPS; s++) {
    bagua__sgd_step(pw, g[s], hp->momentum != 0 ? bw : NULL, n, hp, s == 0);
    for (size_t i = 0; i < n; i++) sgd_ref(&pr[i], g[s][i], &br[i], hp, s == 0);
  }
  for (size_t i = 0; i < n; i++) ASSERT_NEAR(pw[i], pr[i], 1e-5 * (1 + fabs(pr[i])));
  if (hp->momentum != 0)
    for (size_t i = 0; i < n; i++) ASSERT_NEAR(bw[i], br[i], 1e-5 * (1 + fabs(br[i])));
  for (size_t k = 0; k < N_SIMD_ISAS; k++) {
    if (!use_isa(k_simd_isas[k])) continue;
    memcpy(pg, p0, n * sizeof(float));
    memset(bg, 0x7f, n * sizeof(float));
    for (int s = 0; s < STEPS; s++)
      bagua__sgd_step(pg, g[s], hp->momentum != 0 ? bg : NULL, n, hp, s == 0);
    same_bits(k_simd_isas[k], "sgd param", pg, pw, n);
    if (hp->momentum != 0) same_bits(k_simd_isas[k], "sgd momentum", bg, bw, n);
  }
  for (int s = 0; s < STEPS; s++) free(g[s]);
  free(p0);
  free(pw);
  free(bw);
  free(pg - off);
  free(bg - off);
  free(pr);
  free(br);
}

static void test_adam(const bagua__adam_params_t *hp, size_t n, size_t off) {
  float *p0 = fvec(n), *g[STEPS];
  for (int s = 0; s < STEPS; s++) {
    g[s] = fvec(n);
    fill_f(g[s], n, -1, 1);
    /* Some exact zeros: v stays 0 there and the step relies on eps. */
    for (size_t i = 0; i < n; i += 13) g[s][i] = 0;
  }
  fill_f(p0, n, -2, 2);
  float *pw = fvec(n), *mw = fvec(n), *vw = fvec(n);
  float *pg = fvec(n) + off, *mg = fvec(n) + off, *vg = fvec(n) + off;
  double *pr = malloc((n + 1) * sizeof(double)), *mr = calloc(n + 1, sizeof(double));
  double *vr = calloc(n + 1, sizeof(double));
  if (!pr || !mr || !vr) TEST_FAIL("out of memory");
  memcpy(pw, p0, n * sizeof(float));
  memset(mw, 0, n * sizeof(float));
  memset(vw, 0, n * sizeof(float));
  for (size_t i = 0; i < n; i++) pr[i] = p0[i];
  bagua__kernels_force_isa("scalar");
  for (int s = 0; s < STEPS; s++) {
    bagua__adam_step(pw, g[s], mw, vw, n, hp, s + 1);
    for (size_t i = 0; i < n; i++) adam_ref(&pr[i], g[s][i], &mr[i], &vr[i], hp, s + 1);
  }
  for (size_t i = 0; i < n; i++) {
    ASSERT_NEAR(pw[i], pr[i], 1e-5 * (1 + fabs(pr[i])));
    ASSERT_NEAR(mw[i], mr[i], 1e-6 * (1 + fabs(mr[i])));
    ASSERT_NEAR(vw[i], vr[i], 1e-6 * (1 + fabs(vr[i])));
  }
  for (size_t k = 0; k < N_SIMD_ISAS; k++) {
    if (!use_isa(k_simd_isas[k])) continue;
    memcpy(pg, p0, n * sizeof(float));
    memset(mg, 0, n * sizeof(float));
    memset(vg, 0, n * sizeof(float));
    for (int s = 0; s < STEPS; s++) bagua__adam_step(pg, g[s], mg, vg, n, hp, s + 1);
    same_bits(k_simd_isas[k], "adam param", pg, pw, n);
    same_bits(k_simd_isas[k], "adam exp_avg", mg, mw, n);
    same_bits(k_simd_isas[k], "adam exp_avg_sq", vg, vw, n);
  }
  for (int s = 0; s < STEPS; s++) free(g[s]);
  free(p0);
  free(pw);
  free(mw);
  free(vw);
  free(pg - off);
  free(mg - off);
  free(vg - off);
  free(pr);
  free(mr);
  free(vr);
}

int main(void) {
  static const bagua__sgd_params_t sgd[] = {
      {0.1, 0, 0, 0, 0},      {0.1, 0.9, 0, 0, 0},  {0.05, 0.9, 0.1, 0, 0},
      {0.1, 0.9, 0, 1e-2, 1}, {0.1, 0, 0, 1e-2, 0}, {0.01, 0.5, 0.5, 1e-4, 0},
  };
  static const bagua__adam_params_t adam[] = {
      {1e-3, 0.9, 0.999, 1e-8, 0, 0},
      {1e-2, 0.9, 0.999, 1e-8, 1e-2, 0},
      {1e-2, 0.9, 0.999, 1e-8, 1e-2, 1},
      {3e-4, 0.8, 0.99, 1e-6, 0, 1},
  };
  for (size_t c = 0; c < N_OPTIM_COUNTS; c++) {
    size_t n = k_optim_counts[c], off = c % 4;
    test_axpy_scale(n, off);
    for (size_t i = 0; i < sizeof(sgd) / sizeof(sgd[0]); i++) test_sgd(&sgd[i], n, off);
    for (size_t i = 0; i < sizeof(adam) / sizeof(adam[0]); i++) test_adam(&adam[i], n, off);
  }
  bagua__kernels_force_isa(NULL);
  printf("axpy/scale/sgd/adam: vector == scalar, scalar ~= restated torch.optim\n");
  return 0;
}
