#include "problem.h"

#include <stdlib.h>
#include <string.h>

#include "../test.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
void assert_no_leaks(void) {
  if (__lsan_do_recoverable_leak_check()) TEST_FAIL("memory leaked (see the report above)");
}
#else
void assert_no_leaks(void) {}
#endif

static uint64_t splitmix(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/* Uniform in [-1, 1). */
static float uni(uint64_t *s) {
  return (float)((double)(splitmix(s) >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0);
}

static void truth(const problem_t *p, float *w, float *b) {
  uint64_t s = 12345;
  for (int i = 0; i < p->d_in * p->d_out; i++) w[i] = uni(&s);
  for (int j = 0; j < p->d_out; j++) b[j] = uni(&s);
}

void shard_make(const problem_t *p, int rank, shard_t *s) {
  s->p = p;
  s->x = calloc((size_t)p->n * p->d_in, sizeof(float));
  s->y = calloc((size_t)p->n * p->d_out, sizeof(float));
  float *w = calloc((size_t)p->d_in * p->d_out, sizeof(float)), *b = calloc(p->d_out, 4);
  truth(p, w, b);
  uint64_t st = 1000 + (uint64_t)rank;
  for (int k = 0; k < p->n; k++) {
    float *x = s->x + (size_t)k * p->d_in, *y = s->y + (size_t)k * p->d_out;
    for (int i = 0; i < p->d_in; i++) x[i] = uni(&st);
    for (int j = 0; j < p->d_out; j++) {
      double acc = b[j];
      for (int i = 0; i < p->d_in; i++) acc += (double)x[i] * w[i * p->d_out + j];
      /* Sum of three uniforms: roughly normal noise with standard deviation `noise`. */
      acc += p->noise * (uni(&st) + uni(&st) + uni(&st));
      y[j] = (float)acc;
    }
  }
  free(w);
  free(b);
}

void shard_free(shard_t *s) {
  free(s->x);
  free(s->y);
}

void model_init(const problem_t *p, int seed, model_t *m) {
  m->p = p;
  m->w = calloc((size_t)p->d_in * p->d_out, sizeof(float));
  m->gw = calloc((size_t)p->d_in * p->d_out, sizeof(float));
  m->b = calloc(p->d_out, sizeof(float));
  m->gb = calloc(p->d_out, sizeof(float));
  uint64_t s = 777 + (uint64_t)seed;
  for (int i = 0; i < p->d_in * p->d_out; i++) m->w[i] = 0.1f * uni(&s);
  for (int j = 0; j < p->d_out; j++) m->b[j] = 0.1f * uni(&s);
}

void model_free(model_t *m) {
  free(m->w);
  free(m->gw);
  free(m->b);
  free(m->gb);
}

/* Residuals r = x W + b - y for every sample, and the loss. */
static double residuals(const model_t *m, const shard_t *s, float *r) {
  const problem_t *p = m->p;
  double loss = 0;
  for (int k = 0; k < p->n; k++) {
    const float *x = s->x + (size_t)k * p->d_in;
    for (int j = 0; j < p->d_out; j++) {
      float acc = m->b[j];
      for (int i = 0; i < p->d_in; i++) acc += x[i] * m->w[i * p->d_out + j];
      float e = acc - s->y[(size_t)k * p->d_out + j];
      r[(size_t)k * p->d_out + j] = e;
      loss += 0.5 * (double)e * e;
    }
  }
  return loss / p->n;
}

static void grad_rows(const model_t *m, const shard_t *s, const float *r, int row0, int rows,
                      float *gw) {
  const problem_t *p = m->p;
  memset(gw, 0, (size_t)rows * p->d_out * sizeof(float));
  for (int k = 0; k < p->n; k++) {
    const float *x = s->x + (size_t)k * p->d_in, *rk = r + (size_t)k * p->d_out;
    for (int i = 0; i < rows; i++)
      for (int j = 0; j < p->d_out; j++) gw[i * p->d_out + j] += x[row0 + i] * rk[j];
  }
  for (int i = 0; i < rows * p->d_out; i++) gw[i] /= (float)p->n;
}

static void grad_bias(const model_t *m, const float *r, float *gb) {
  const problem_t *p = m->p;
  memset(gb, 0, p->d_out * sizeof(float));
  for (int k = 0; k < p->n; k++)
    for (int j = 0; j < p->d_out; j++) gb[j] += r[(size_t)k * p->d_out + j];
  for (int j = 0; j < p->d_out; j++) gb[j] /= (float)p->n;
}

static void block(const problem_t *p, int blk, int *row0, int *rows) {
  int per = p->d_in / p->nsplit;
  *row0 = blk * per;
  *rows = blk == p->nsplit - 1 ? p->d_in - *row0 : per;
}

double model_loss(model_t *m, const shard_t *s, int grads) {
  const problem_t *p = m->p;
  float *r = malloc((size_t)p->n * p->d_out * sizeof(float));
  double loss = residuals(m, s, r);
  if (grads) {
    grad_bias(m, r, m->gb);
    for (int blk = 0; blk < p->nsplit; blk++) {
      int row0, rows;
      block(p, blk, &row0, &rows);
      grad_rows(m, s, r, row0, rows, m->gw + (size_t)row0 * p->d_out);
    }
  }
  free(r);
  return loss;
}

double model_union_loss(model_t *m, int nranks) {
  double sum = 0;
  for (int r = 0; r < nranks; r++) {
    shard_t s;
    shard_make(m->p, r, &s);
    sum += model_loss(m, &s, 0);
    shard_free(&s);
  }
  return sum / nranks;
}

double problem_floor(const problem_t *p) {
  /* Each of the three uniforms has variance 1/3, so the noise variance is noise^2. */
  return 0.5 * (double)p->noise * p->noise * p->d_out;
}

int model_register(model_t *m, bagua_ddp_t *ddp, unsigned zero_copy_mask) {
  const problem_t *p = m->p;
  int idx = 0;
  ASSERT_OK(bagua_ddp_register(ddp, "b", m->b, (zero_copy_mask & 1) ? NULL : m->gb, p->d_out));
  idx++;
  for (int blk = p->nsplit - 1; blk >= 0; blk--, idx++) {
    int row0, rows;
    block(p, blk, &row0, &rows);
    char name[32];
    snprintf(name, sizeof(name), "w%d", blk);
    size_t off = (size_t)row0 * p->d_out;
    ASSERT_OK(bagua_ddp_register(ddp, name, m->w + off,
                                 (zero_copy_mask >> idx & 1) ? NULL : m->gw + off,
                                 (size_t)rows * p->d_out));
  }
  return idx;
}

bagua_status_t model_train_step(model_t *m, const shard_t *s, bagua_ddp_t *ddp,
                                unsigned zero_copy_mask) {
  const problem_t *p = m->p;
  float *r = malloc((size_t)p->n * p->d_out * sizeof(float));
  residuals(m, s, r);
  bagua_status_t st;
  float *gb = (zero_copy_mask & 1) ? bagua_ddp_grad(ddp, 0) : m->gb;
  grad_bias(m, r, gb);
  if ((st = bagua_ddp_grad_ready(ddp, 0)) != BAGUA_OK) goto out;
  int idx = 1;
  for (int blk = p->nsplit - 1; blk >= 0; blk--, idx++) {
    int row0, rows;
    block(p, blk, &row0, &rows);
    float *gw =
        (zero_copy_mask >> idx & 1) ? bagua_ddp_grad(ddp, idx) : m->gw + (size_t)row0 * p->d_out;
    grad_rows(m, s, r, row0, rows, gw);
    if ((st = bagua_ddp_grad_ready(ddp, idx)) != BAGUA_OK) goto out;
  }
  st = bagua_ddp_step(ddp);
out:
  free(r);
  return st;
}

void assert_same_on_all_ranks(bagua_comm_t *c, const float *v, size_t n, const char *what) {
  float *lo = malloc(n * sizeof(float)), *hi = malloc(n * sizeof(float));
  ASSERT_OK(bagua_allreduce(c, v, lo, n, BAGUA_F32, BAGUA_MIN));
  ASSERT_OK(bagua_allreduce(c, v, hi, n, BAGUA_F32, BAGUA_MAX));
  for (size_t i = 0; i < n; i++)
    if (memcmp(&lo[i], &v[i], 4) != 0 || memcmp(&hi[i], &v[i], 4) != 0)
      TEST_FAIL("%s differs across ranks at %zu: here %.9g, min %.9g, max %.9g", what, i, v[i],
                lo[i], hi[i]);
  free(lo);
  free(hi);
}
