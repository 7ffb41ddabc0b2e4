/*
 * PowerSGD (ddp/algorithms/powersgd.c) on real communicators with forked ranks. Gradients are
 * written straight into the flat storage (zero-copy) and read back after bagua_ddp_wait()
 * (optimizer "none"), so each check sees exactly what the algorithm made of them.
 *
 *   exact N [hier]
 *                gradients U V_r^T whose mean has rank 4 = the rank used: P spans the mean's
 *                columns, P P^T projects onto them, and the result is the exact mean (1e-5);
 *                hier: on emulated nodes of 2 ranks, low rank among the node leaders
 *   reference N  three steps with error feedback on full-rank gradients against the
 *                algorithm written out in double in this file, from the same initial Q
 *   train        the least-squares problem of problem.c with rank 2 ends within a tolerance
 *                of gradient_allreduce's loss
 *   uncompressed vectors and matrices too small to gain are the mean bit for bit (2 ranks,
 *                where a sum of two floats has one rounding in any order), also next to a
 *                compressed matrix in the same bucket
 *   errors       bad ranks, ranks for other algorithms, bad shapes, shapes after ready,
 *                shapes that differ between ranks
 *   warmup N     the first K steps are gradient_allreduce bit for bit, step K is not
 *   bytes N      bytes per step against gradient_allreduce's, by the expected factor
 *   kernels      (no ranks) the Gram-Schmidt gives orthonormal columns, and zero or tiny
 *                columns stay finite; the products against plain loops
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../comm/mp.h"
#include "../test.h"
#include "ddp/ddp_internal.h"
#include "kernels/kernels.h"
#include "problem.h"

/* The model of most checks: a vector, two matrices that compress at rank 4 and one too small
 * to (4 x 6: 2 (4 + 6) 4 >= 24). */
typedef struct {
  size_t rows, cols; /* rows 0: registered without a shape */
} shape_t;
static const shape_t k_model[] = {{0, 37}, {32, 48}, {4, 6}, {24, 20}};
#define NT ((int)(sizeof(k_model) / sizeof(k_model[0])))

static size_t count_of(const shape_t *s) {
  return s->rows ? s->rows * s->cols : s->cols;
}

/* A deterministic value in [-1, 1) from its coordinates. */
static float hashf(uint64_t a, uint64_t b, uint64_t c) {
  uint64_t z = a * 0x9e3779b97f4a7c15ULL ^ (b + 0x632be59bd9b4e019ULL) * 0xbf58476d1ce4e5b9ULL ^
               (c + 1) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  z *= 0xd6e8feb86659fd39ULL;
  z ^= z >> 29;
  return (float)((double)(z >> 40) / (double)(1ull << 23) - 1.0);
}

typedef float (*grad_fn)(int rank, int t, size_t i, int step);

/* Full-rank gradients, different on every rank and step. */
static float g_full(int rank, int t, size_t i, int step) {
  return hashf((uint64_t)rank, (uint64_t)t * 1000003u + i, (uint64_t)step);
}

/* Matrices U V_rank^T with U (rows x 4) shared by the ranks: the mean has rank 4. Vectors as
 * g_full. */
static float g_rank4(int rank, int t, size_t i, int step) {
  const shape_t *s = &k_model[t];
  if (!s->rows) return g_full(rank, t, i, step);
  size_t a = i / s->cols, j = i % s->cols;
  float v = 0;
  for (int k = 0; k < 4; k++)
    v += hashf(999, (uint64_t)t * 100 + k, a) *
         hashf((uint64_t)rank, (uint64_t)t * 100 + k, j + 1000 * (size_t)step);
  return v;
}

typedef struct {
  const char *algo;
  int rank, warmup, ef;
  int hier; /* config.hierarchical */
  int64_t bucket_bytes;
  const shape_t *model;
  int nt;
  grad_fn g;
  int steps;
  float **out; /* out[step * nt + t]: the communicated gradient (allocated here) */
  uint64_t bytes_last_step;
} run_t;

static int run(bagua_comm_t *c, run_t *r) {
  int me = bagua_comm_rank(c);
  bagua_ddp_config_t cfg = BAGUA_DDP_CONFIG_INIT;
  cfg.algorithm = r->algo;
  cfg.optimizer = "none";
  cfg.bucket_bytes = r->bucket_bytes;
  cfg.hierarchical = r->hier;
  if (!strcmp(r->algo, "powersgd")) {
    cfg.rank = r->rank;
    cfg.warmup_steps = r->warmup;
    cfg.error_feedback = r->ef;
  }
  bagua_ddp_t *ddp;
  ASSERT_OK(bagua_ddp_create(c, &cfg, &ddp));
  float **p = calloc((size_t)r->nt, sizeof(float *));
  for (int t = 0; t < r->nt; t++) {
    p[t] = calloc(count_of(&r->model[t]), sizeof(float));
    ASSERT_OK(bagua_ddp_register(ddp, NULL, p[t], NULL, count_of(&r->model[t])));
    if (r->model[t].rows) ASSERT_OK(bagua_ddp_register_shape(ddp, t, r->model[t].rows));
  }
  ASSERT_OK(bagua_ddp_ready(ddp));
  r->out = calloc((size_t)(r->steps * r->nt), sizeof(float *));
  for (int step = 0; step < r->steps; step++) {
    for (int t = 0; t < r->nt; t++) {
      float *g = bagua_ddp_grad(ddp, t);
      for (size_t i = 0; i < count_of(&r->model[t]); i++) g[i] = r->g(me, t, i, step);
      ASSERT_OK(bagua_ddp_grad_ready(ddp, t));
    }
    ASSERT_OK(bagua_ddp_wait(ddp));
    for (int t = 0; t < r->nt; t++) {
      size_t n = count_of(&r->model[t]);
      float *o = malloc(n * sizeof(float));
      memcpy(o, bagua_ddp_grad(ddp, t), n * sizeof(float));
      r->out[step * r->nt + t] = o;
    }
    ASSERT_OK(bagua_ddp_step(ddp));
  }
  bagua_ddp_stats_t st = {.struct_size = sizeof(st)};
  ASSERT_OK(bagua_ddp_stats(ddp, &st));
  r->bytes_last_step = st.bytes_last_step;
  bagua_ddp_destroy(ddp);
  for (int t = 0; t < r->nt; t++) free(p[t]);
  free(p);
  return 0;
}

static void run_free(run_t *r) {
  for (int k = 0; r->out && k < r->steps * r->nt; k++) free(r->out[k]);
  free(r->out);
  r->out = NULL;
}

/* The f32 mean over n ranks, summed in rank order (exact for n = 2 in any order). */
static float mean_of(grad_fn g, int n, int t, size_t i, int step) {
  float s = 0;
  for (int k = 0; k < n; k++) s += g(k, t, i, step);
  return s / (float)n;
}

static int same_bits(const float *a, float b) {
  return memcmp(a, &b, sizeof(float)) == 0;
}

/* ---- exact ---------------------------------------------------------------------------- */

static int body_exact(bagua_comm_t *c, void *arg) {
  int n = bagua_comm_size(c);
  run_t r = {.algo = "powersgd",
             .hier = *(int *)arg,
             .rank = 4,
             .warmup = 0,
             .ef = 0,
             .bucket_bytes = 4096,
             .model = k_model,
             .nt = NT,
             .g = g_rank4,
             .steps = 3};
  ASSERT_OK(run(c, &r));
  double worst = 0;
  for (int step = 0; step < r.steps; step++)
    for (int t = 0; t < NT; t++) {
      size_t cnt = count_of(&k_model[t]);
      double *want = calloc(cnt, sizeof(double)), scale = 0;
      for (size_t i = 0; i < cnt; i++) {
        for (int k = 0; k < n; k++) want[i] += g_rank4(k, t, i, step);
        want[i] /= n;
        scale = fmax(scale, fabs(want[i]));
      }
      /* Relative to the matrix's largest element: f32 Gram-Schmidt's error is one of the
       * whole matrix, not of each element. */
      for (size_t i = 0; i < cnt; i++) {
        double got = r.out[step * NT + t][i], e = fabs(got - want[i]) / scale;
        if (e > worst) worst = e;
        if (e > 1e-5)
          TEST_FAIL("step %d tensor %d[%zu]: %.8g, the mean is %.8g (error %.2e)", step, t, i, got,
                    want[i], e);
      }
      free(want);
    }
  if (bagua_comm_rank(c) == 0) printf("exact: worst relative error %.2e\n", worst);
  run_free(&r);
  assert_no_leaks();
  return 0;
}

/* ---- reference ------------------------------------------------------------------------ */

/* torch's PowerSGD on one matrix, in double, for all n ranks at once: a[k] are the ranks'
 * gradients (rows x cols), err[k] their errors, qt the kept Q (r x cols); out gets Mhat. */
static void ref_step(int n, size_t rows, size_t cols, size_t r, double **a, double **err,
                     double *qt, double *out, int ef) {
  double *p = calloc(rows * r, sizeof(double));
  for (int k = 0; k < n; k++) {
    if (ef)
      for (size_t x = 0; x < rows * cols; x++) a[k][x] += err[k][x];
    for (size_t i = 0; i < rows; i++)
      for (size_t c = 0; c < r; c++)
        for (size_t j = 0; j < cols; j++) p[i * r + c] += a[k][i * cols + j] * qt[c * cols + j];
  }
  for (size_t c = 0; c < r; c++) {
    double nn = 0;
    for (size_t i = 0; i < rows; i++) nn += p[i * r + c] * p[i * r + c];
    nn = sqrt(nn) + 1e-8;
    for (size_t i = 0; i < rows; i++) p[i * r + c] /= nn;
    for (size_t c2 = c + 1; c2 < r; c2++) {
      double dot = 0;
      for (size_t i = 0; i < rows; i++) dot += p[i * r + c] * p[i * r + c2];
      for (size_t i = 0; i < rows; i++) p[i * r + c2] -= dot * p[i * r + c];
    }
  }
  memset(qt, 0, r * cols * sizeof(double));
  for (int k = 0; k < n; k++)
    for (size_t i = 0; i < rows; i++)
      for (size_t c = 0; c < r; c++)
        for (size_t j = 0; j < cols; j++) qt[c * cols + j] += a[k][i * cols + j] * p[i * r + c];
  for (size_t x = 0; x < r * cols; x++) qt[x] /= n;
  for (size_t i = 0; i < rows; i++)
    for (size_t j = 0; j < cols; j++) {
      double v = 0;
      for (size_t c = 0; c < r; c++) v += p[i * r + c] * qt[c * cols + j];
      out[i * cols + j] = v;
    }
  for (int k = 0; k < n && ef; k++)
    for (size_t x = 0; x < rows * cols; x++) err[k][x] = a[k][x] - out[x];
  free(p);
}

static int body_reference(bagua_comm_t *c, void *arg) {
  (void)arg;
  int n = bagua_comm_size(c);
  enum { STEPS = 3, RANK = 3 };
  run_t r = {.algo = "powersgd",
             .rank = RANK,
             .warmup = 0,
             .ef = 1,
             .bucket_bytes = 4096,
             .model = k_model,
             .nt = NT,
             .g = g_full,
             .steps = STEPS};
  ASSERT_OK(run(c, &r));
  double worst = 0;
  for (int t = 0; t < NT; t++) {
    const shape_t *s = &k_model[t];
    size_t cnt = count_of(s);
    size_t rr = s->rows ? (RANK < s->rows ? RANK : s->rows) : 0;
    if (rr > s->cols) rr = s->cols;
    int compressed = s->rows && 2 * (s->rows + s->cols) * rr < s->rows * s->cols;
    double **a = calloc((size_t)n, sizeof(double *)), **err = calloc((size_t)n, sizeof(double *));
    for (int k = 0; k < n; k++) {
      a[k] = calloc(cnt, sizeof(double));
      err[k] = calloc(cnt, sizeof(double));
    }
    double *qt = calloc(rr * s->cols + 1, sizeof(double)), *want = calloc(cnt, sizeof(double));
    float *q0 = calloc(rr * s->cols + 1, sizeof(float));
    bagua__randn_f32(bagua__ddp_powersgd_seed(t), q0, rr * s->cols);
    for (size_t x = 0; x < rr * s->cols; x++) qt[x] = q0[x];
    for (int step = 0; step < STEPS; step++) {
      for (int k = 0; k < n; k++)
        for (size_t i = 0; i < cnt; i++) a[k][i] = g_full(k, t, i, step);
      if (compressed) {
        ref_step(n, s->rows, s->cols, rr, a, err, qt, want, 1);
      } else {
        for (size_t i = 0; i < cnt; i++) want[i] = mean_of(g_full, n, t, i, step);
      }
      double scale = 0;
      for (size_t i = 0; i < cnt; i++) scale = fmax(scale, fabs(want[i]));
      for (size_t i = 0; i < cnt; i++) {
        double got = r.out[step * NT + t][i], e = fabs(got - want[i]) / (scale + 1e-30);
        if (e > worst) worst = e;
        if (e > (compressed ? 1e-4 : 1e-6))
          TEST_FAIL("step %d tensor %d[%zu] (%s): %.8g, the reference %.8g", step, t, i,
                    compressed ? "compressed" : "uncompressed", got, want[i]);
      }
    }
    for (int k = 0; k < n; k++) {
      free(a[k]);
      free(err[k]);
    }
    free(a);
    free(err);
    free(qt);
    free(q0);
    free(want);
  }
  if (bagua_comm_rank(c) == 0)
    printf("reference: %d steps, worst error %.2e of the largest element\n", STEPS, worst);
  run_free(&r);
  assert_no_leaks();
  return 0;
}

/* ---- train ---------------------------------------------------------------------------- */

static problem_t k_prob = {.d_in = 64, .d_out = 16, .n = 64, .nsplit = 4, .noise = 0.1f};
enum { TRAIN_STEPS = 300 };

static double train(bagua_comm_t *c, const char *algo, uint64_t *bytes) {
  int me = bagua_comm_rank(c), n = bagua_comm_size(c);
  shard_t s;
  model_t m;
  shard_make(&k_prob, me, &s);
  model_init(&k_prob, me, &m);
  bagua_ddp_config_t cfg = BAGUA_DDP_CONFIG_INIT;
  cfg.algorithm = algo;
  cfg.lr = 0.3;
  cfg.bucket_bytes = 2048;
  if (!strcmp(algo, "powersgd")) {
    cfg.rank = 2;
    cfg.warmup_steps = 5;
  }
  bagua_ddp_t *ddp;
  ASSERT_OK(bagua_ddp_create(c, &cfg, &ddp));
  int nt = model_register(&m, ddp, 0);
  /* Tensors 1 .. nsplit are W's row blocks, registered last first (problem.c). */
  for (int t = 1; t < nt; t++)
    ASSERT_OK(bagua_ddp_register_shape(ddp, t, k_prob.d_in / k_prob.nsplit));
  ASSERT_OK(bagua_ddp_ready(ddp));
  double loss0 = model_union_loss(&m, n);
  for (int step = 0; step < TRAIN_STEPS; step++) ASSERT_OK(model_train_step(&m, &s, ddp, 0));
  bagua_ddp_stats_t st = {.struct_size = sizeof(st)};
  ASSERT_OK(bagua_ddp_stats(ddp, &st));
  *bytes = st.bytes_last_step;
  assert_same_on_all_ranks(c, m.w, (size_t)k_prob.d_in * k_prob.d_out, "weights");
  double loss = model_union_loss(&m, n);
  if (me == 0)
    printf("train %s: loss %.5f -> %.5f (floor %.5f), %llu bytes in the last step\n", algo, loss0,
           loss, problem_floor(&k_prob), (unsigned long long)*bytes);
  bagua_ddp_destroy(ddp);
  model_free(&m);
  shard_free(&s);
  return loss;
}

static int body_train(bagua_comm_t *c, void *arg) {
  (void)arg;
  uint64_t b_ar, b_ps;
  double ar = train(c, "gradient_allreduce", &b_ar);
  double ps = train(c, "powersgd", &b_ps);
  /* Full precision reaches the data's noise (it fits a little of it: 128 samples, 1040
   * weights); rank 2 of 16 x 16 blocks with error feedback must end within a tenth of it. */
  ASSERT_TRUE(ar < 1.5 * problem_floor(&k_prob));
  if (ps > 1.1 * ar)
    TEST_FAIL("powersgd's loss %.5f is too far above gradient_allreduce's %.5f", ps, ar);
  ASSERT_LT(b_ps, b_ar);
  assert_no_leaks();
  return 0;
}

/* ---- uncompressed --------------------------------------------------------------------- */

static const shape_t k_small[] = {{0, 37}, {4, 6}, {1, 50}, {50, 1}, {3, 100}, {0, 5}};
/* A vector and a small matrix sharing one bucket with a compressed matrix. */
static const shape_t k_mixed[] = {{0, 37}, {32, 48}, {4, 6}};

static int check_mean(const run_t *r, int n, const char *what) {
  for (int step = 0; step < r->steps; step++)
    for (int t = 0; t < r->nt; t++) {
      if (r->model == k_mixed && t == 1) continue; /* the compressed one */
      for (size_t i = 0; i < count_of(&r->model[t]); i++) {
        float want = mean_of(r->g, n, t, i, step);
        if (!same_bits(&r->out[step * r->nt + t][i], want))
          TEST_FAIL("%s: step %d tensor %d[%zu]: %.9g, the mean is %.9g", what, step, t, i,
                    r->out[step * r->nt + t][i], want);
      }
    }
  return 0;
}

static int body_uncompressed(bagua_comm_t *c, void *arg) {
  (void)arg;
  int n = bagua_comm_size(c);
  run_t a = {.algo = "powersgd",
             .rank = 4,
             .warmup = 0,
             .ef = 1,
             .bucket_bytes = 256,
             .model = k_small,
             .nt = 6,
             .g = g_full,
             .steps = 3};
  ASSERT_OK(run(c, &a));
  ASSERT_OK(check_mean(&a, n, "small tensors"));
  run_free(&a);
  run_t b = {.algo = "powersgd",
             .rank = 4,
             .warmup = 0,
             .ef = 1,
             .bucket_bytes = 1 << 20,
             .model = k_mixed,
             .nt = 3,
             .g = g_full,
             .steps = 3};
  ASSERT_OK(run(c, &b));
  ASSERT_OK(check_mean(&b, n, "next to a compressed matrix"));
  run_free(&b);
  if (bagua_comm_rank(c) == 0) printf("uncompressed: the mean bit for bit\n");
  assert_no_leaks();
  return 0;
}

/* ---- errors --------------------------------------------------------------------------- */

static bagua_status_t create_with(bagua_comm_t *c, const char *algo, int rank) {
  bagua_ddp_config_t cfg = BAGUA_DDP_CONFIG_INIT;
  cfg.algorithm = algo;
  cfg.rank = rank;
  bagua_ddp_t *ddp = NULL;
  bagua_status_t st = bagua_ddp_create(c, &cfg, &ddp);
  if (st == BAGUA_OK) bagua_ddp_destroy(ddp);
  return st;
}

static int body_errors(bagua_comm_t *c, void *arg) {
  (void)arg;
  int me = bagua_comm_rank(c);
  /* Refusals happen before anything collective, so every rank sees the same one. */
  ASSERT_STATUS(create_with(c, "powersgd", 0), BAGUA_ERR_INVALID_ARG);
  ASSERT_TRUE(strstr(bagua_last_error(), "config.rank") != NULL);
  ASSERT_STATUS(create_with(c, "powersgd", -2), BAGUA_ERR_INVALID_ARG);
  ASSERT_STATUS(create_with(c, "powersgd", 1025), BAGUA_ERR_INVALID_ARG);
  ASSERT_STATUS(create_with(c, "powersgd", 1 << 30), BAGUA_ERR_INVALID_ARG);
  ASSERT_STATUS(create_with(c, "gradient_allreduce", 4), BAGUA_ERR_INVALID_ARG);
  ASSERT_TRUE(strstr(bagua_last_error(), "powersgd") != NULL);
  ASSERT_OK(create_with(c, "powersgd", 1024));
  ASSERT_OK(create_with(c, "powersgd", -1));
  {
    /* A config from a header before `rank` (struct_size ends there) reads it as unset. */
    bagua_ddp_config_t old = BAGUA_DDP_CONFIG_INIT;
    old.algorithm = "powersgd";
    old.struct_size = offsetof(bagua_ddp_config_t, rank);
    old.rank = 0; /* beyond struct_size: never read */
    bagua_ddp_t *d = NULL;
    ASSERT_OK(bagua_ddp_create(c, &old, &d));
    ASSERT_EQ(d->s.rank, 4);
    bagua_ddp_destroy(d);
    old.struct_size = offsetof(bagua_ddp_config_t, rank) - 1;
    ASSERT_STATUS(bagua_ddp_create(c, &old, &d), BAGUA_ERR_INVALID_ARG);
  }
  ASSERT_STREQ(bagua_ddp_algorithm_options("powersgd"),
               "hierarchical error_feedback warmup_steps rank");

  bagua_ddp_config_t cfg = BAGUA_DDP_CONFIG_INIT;
  cfg.algorithm = "powersgd";
  bagua_ddp_t *ddp;
  ASSERT_OK(bagua_ddp_create(c, &cfg, &ddp));
  float w[48] = {0};
  ASSERT_STATUS(bagua_ddp_register_shape(ddp, 0, 4), BAGUA_ERR_INVALID_ARG); /* none yet */
  ASSERT_OK(bagua_ddp_register(ddp, "w", w, NULL, 48));
  ASSERT_STATUS(bagua_ddp_register_shape(NULL, 0, 4), BAGUA_ERR_INVALID_ARG);
  ASSERT_STATUS(bagua_ddp_register_shape(ddp, -1, 4), BAGUA_ERR_INVALID_ARG);
  ASSERT_STATUS(bagua_ddp_register_shape(ddp, 1, 4), BAGUA_ERR_INVALID_ARG);
  ASSERT_STATUS(bagua_ddp_register_shape(ddp, 0, 0), BAGUA_ERR_INVALID_ARG);
  ASSERT_TRUE(strstr(bagua_last_error(), "rows = 0") != NULL);
  ASSERT_STATUS(bagua_ddp_register_shape(ddp, 0, 7), BAGUA_ERR_INVALID_ARG);
  ASSERT_TRUE(strstr(bagua_last_error(), "48 elements") != NULL);
  ASSERT_STATUS(bagua_ddp_register_shape(ddp, 0, 49), BAGUA_ERR_INVALID_ARG);
  ASSERT_OK(bagua_ddp_register_shape(ddp, 0, 48));
  ASSERT_OK(bagua_ddp_register_shape(ddp, 0, 1));
  /* Ranks that disagree on a shape are caught by ready, as for the tensors themselves. */
  ASSERT_OK(bagua_ddp_register_shape(ddp, 0, me == 0 ? 4 : 6));
  ASSERT_STATUS(bagua_ddp_ready(ddp), BAGUA_ERR_INVALID_USAGE);
  bagua_ddp_destroy(ddp);

  ASSERT_OK(bagua_ddp_create(c, &cfg, &ddp));
  ASSERT_OK(bagua_ddp_register(ddp, "w", w, NULL, 48));
  ASSERT_OK(bagua_ddp_register_shape(ddp, 0, 4));
  ASSERT_OK(bagua_ddp_ready(ddp));
  ASSERT_STATUS(bagua_ddp_register_shape(ddp, 0, 4), BAGUA_ERR_INVALID_USAGE);
  bagua_ddp_destroy(ddp);
  if (me == 0) printf("errors: passed\n");
  assert_no_leaks();
  return 0;
}

/* ---- warmup --------------------------------------------------------------------------- */

static int body_warmup(bagua_comm_t *c, void *arg) {
  (void)arg;
  enum { K = 3 };
  run_t ps = {.algo = "powersgd",
              .rank = 2,
              .warmup = K,
              .ef = 1,
              .bucket_bytes = 4096,
              .model = k_model,
              .nt = NT,
              .g = g_full,
              .steps = K + 1};
  run_t ar = ps;
  ar.algo = "gradient_allreduce";
  ASSERT_OK(run(c, &ps));
  ASSERT_OK(run(c, &ar));
  for (int step = 0; step <= K; step++) {
    int differ = 0;
    for (int t = 0; t < NT; t++)
      differ |= memcmp(ps.out[step * NT + t], ar.out[step * NT + t],
                       count_of(&k_model[t]) * sizeof(float)) != 0;
    if (step < K && differ) TEST_FAIL("warm-up step %d differs from gradient_allreduce", step);
    if (step == K && !differ) TEST_FAIL("step %d after the warm-up was not compressed", step);
  }
  if (bagua_comm_rank(c) == 0) printf("warmup: %d steps bit for bit, then compressed\n", K);
  run_free(&ps);
  run_free(&ar);
  assert_no_leaks();
  return 0;
}

/* ---- bytes ---------------------------------------------------------------------------- */

static const shape_t k_big[] = {{128, 256}, {256, 64}, {0, 64}};

static int body_bytes(bagua_comm_t *c, void *arg) {
  (void)arg;
  enum { RANK = 4 };
  run_t ps = {.algo = "powersgd",
              .rank = RANK,
              .warmup = 0,
              .ef = 1,
              .bucket_bytes = 1 << 20,
              .model = k_big,
              .nt = 3,
              .g = g_full,
              .steps = 3};
  run_t ar = ps;
  ar.algo = "gradient_allreduce";
  ASSERT_OK(run(c, &ps));
  ASSERT_OK(run(c, &ar));
  /* Elements on the wire: (rows + cols) r per matrix against rows cols, vectors as they are. */
  double full = 0, low = 0;
  for (int t = 0; t < 3; t++) {
    full += (double)count_of(&k_big[t]);
    low += k_big[t].rows ? (double)(k_big[t].rows + k_big[t].cols) * RANK : (double)k_big[t].cols;
  }
  double want = low / full, got = (double)ps.bytes_last_step / (double)ar.bytes_last_step;
  if (bagua_comm_rank(c) == 0)
    printf("bytes: powersgd %llu, gradient_allreduce %llu per step: %.4f, expected %.4f\n",
           (unsigned long long)ps.bytes_last_step, (unsigned long long)ar.bytes_last_step, got,
           want);
  /* Three allreduces instead of one add a little per-message framing. */
  if (!(got > 0.8 * want && got < 1.25 * want))
    TEST_FAIL("bytes ratio %.4f, expected %.4f", got, want);
  run_free(&ps);
  run_free(&ar);
  assert_no_leaks();
  return 0;
}

/* ---- kernels ------------------------------------------------------------------------- */

static int test_kernels(void) {
  enum { ROWS = 300, R = 5, COLS = 77 };
  float p[ROWS * R], m[ROWS * COLS], qt[R * COLS], out[ROWS * R], q2[R * COLS];
  for (int x = 0; x < ROWS * R; x++) p[x] = hashf(1, (uint64_t)x, 0);
  for (int i = 0; i < ROWS; i++) {
    p[i * R + 2] = 0.0f;   /* a zero column */
    p[i * R + 4] = 1e-30f; /* and one far below eps */
  }
  bagua__lowrank_orthonormalise(p, ROWS, R, 1e-8f);
  for (int a = 0; a < R; a++)
    for (int b = 0; b < R; b++) {
      double dot = 0;
      for (int i = 0; i < ROWS; i++) {
        ASSERT_TRUE(isfinite(p[i * R + a]));
        dot += (double)p[i * R + a] * p[i * R + b];
      }
      int live = a != 2 && a != 4 && b != 2 && b != 4;
      double want = live && a == b ? 1.0 : 0.0;
      if (live || a == b) ASSERT_NEAR(dot, want, 1e-5);
    }
  for (int x = 0; x < ROWS * COLS; x++) m[x] = hashf(2, (uint64_t)x, 0);
  for (int x = 0; x < R * COLS; x++) qt[x] = hashf(3, (uint64_t)x, 0);
  bagua__lowrank_mq(m, ROWS, COLS, qt, R, out);
  bagua__lowrank_mtp(m, ROWS, COLS, out, R, q2);
  for (int i = 0; i < ROWS; i++)
    for (int k = 0; k < R; k++) {
      double v = 0;
      for (int j = 0; j < COLS; j++) v += (double)m[i * COLS + j] * qt[k * COLS + j];
      ASSERT_NEAR(out[i * R + k], v, 1e-4);
    }
  for (int k = 0; k < R; k++)
    for (int j = 0; j < COLS; j++) {
      double v = 0;
      for (int i = 0; i < ROWS; i++) v += (double)out[i * R + k] * m[i * COLS + j];
      ASSERT_NEAR(q2[k * COLS + j], v, 1e-3 * (1 + fabs(v)));
    }
  float keep[ROWS * COLS], err[ROWS * COLS];
  memcpy(keep, m, sizeof(m));
  bagua__lowrank_pqt(out, q2, ROWS, COLS, R, m, err);
  for (int i = 0; i < ROWS; i++)
    for (int j = 0; j < COLS; j++) {
      double v = 0;
      for (int k = 0; k < R; k++) v += (double)out[i * R + k] * q2[k * COLS + j];
      ASSERT_NEAR(m[i * COLS + j], v, 1e-3 * (1 + fabs(v)));
      ASSERT_TRUE(err[i * COLS + j] == keep[i * COLS + j] - m[i * COLS + j]);
    }
  printf("passed powersgd kernels\n");
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  const char *what = argv[1];
  if (!strcmp(what, "kernels")) return test_kernels();
  mp_opts_t o = {
      .nranks = argc > 2 ? atoi(argv[2]) : 2, .transport = BAGUA_TRANSPORT_TCP, .deadline_s = 80};
  mp_body_fn body = !strcmp(what, "exact")          ? body_exact
                    : !strcmp(what, "reference")    ? body_reference
                    : !strcmp(what, "train")        ? body_train
                    : !strcmp(what, "uncompressed") ? body_uncompressed
                    : !strcmp(what, "errors")       ? body_errors
                    : !strcmp(what, "warmup")       ? body_warmup
                    : !strcmp(what, "bytes")        ? body_bytes
                                                    : NULL;
  if (!body) return 2;
  int hier = argc > 3 && !strcmp(argv[3], "hier");
  if (hier) {
    o.transport = BAGUA_TRANSPORT_AUTO;
    o.ranks_per_node = 2;
  }
  double t0 = mp_now();
  int rc = mp_run(&o, body, &hier);
  printf("%s powersgd %s on %d ranks%s in %.1f s\n", rc ? "FAILED" : "passed", what, o.nranks,
         hier ? " (hierarchical)" : "", mp_now() - t0);
  return rc;
}
