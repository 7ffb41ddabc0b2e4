/*
 * PowerSGD's low-rank products and Gram-Schmidt (kernels/kernels.h). Plain C whose inner loops
 * are contiguous and free of loop-carried dependences (or carry them in fixed lanes), so that
 * the compiler vectorises them without changing the order of any floating-point operation;
 * kernels/cuda/lowrank.cu repeats each order exactly.
 */
#include <math.h>
#include <string.h>

#include "kernels/kernels.h"

void bagua__lowrank_mq(const float *m, size_t rows, size_t cols, const float *qt, size_t r,
                       float *p) {
  for (size_t i = 0; i < rows; i++) {
    const float *mi = m + i * cols;
    for (size_t k = 0; k < r; k++) {
      const float *qk = qt + k * cols;
      float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      size_t j = 0;
      for (; j + 8 <= cols; j += 8)
        for (int l = 0; l < 8; l++) acc[l] += mi[j + (size_t)l] * qk[j + (size_t)l];
      for (int l = 0; j < cols; j++, l++) acc[l] += mi[j] * qk[j];
      p[i * r + k] =
          ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    }
  }
}

void bagua__lowrank_mtp(const float *m, size_t rows, size_t cols, const float *p, size_t r,
                        float *qt) {
  if (rows == 0 || cols == 0 || r == 0) return;
  memset(qt, 0, r * cols * sizeof(float));
  /* Row by row, so that M is read once; each Qt row gets one axpy per row of M. */
  for (size_t i = 0; i < rows; i++) {
    const float *mi = m + i * cols;
    for (size_t k = 0; k < r; k++) {
      float a = p[i * r + k];
      float *qk = qt + k * cols;
      for (size_t j = 0; j < cols; j++) qk[j] += a * mi[j];
    }
  }
}

void bagua__lowrank_pqt(const float *p, const float *qt, size_t rows, size_t cols, size_t r,
                        float *m, float *err) {
  enum { BLOCK = 256 }; /* Mhat is built a block of a row at a time, in registers or L1 */
  float hat[BLOCK];
  for (size_t i = 0; i < rows; i++) {
    float *mi = m + i * cols;
    float *ei = err ? err + i * cols : NULL;
    for (size_t j0 = 0; j0 < cols; j0 += BLOCK) {
      size_t n = cols - j0 < BLOCK ? cols - j0 : BLOCK;
      for (size_t j = 0; j < n; j++) hat[j] = 0.0f;
      for (size_t k = 0; k < r; k++) {
        float a = p[i * r + k];
        const float *qk = qt + k * cols + j0;
        for (size_t j = 0; j < n; j++) hat[j] += a * qk[j];
      }
      if (ei)
        for (size_t j = 0; j < n; j++) ei[j0 + j] = mi[j0 + j] - hat[j];
      memcpy(mi + j0, hat, n * sizeof(float));
    }
  }
}

/* sum_x a[x * stride] * b[x * stride] over n, in double, in the lanes-and-tree order. */
static double dot_lanes(const float *a, const float *b, size_t n, size_t stride) {
  double acc[BAGUA__LOWRANK_LANES];
  for (size_t t = 0; t < BAGUA__LOWRANK_LANES; t++) {
    double s = 0.0;
    for (size_t x = t; x < n; x += BAGUA__LOWRANK_LANES)
      s += (double)a[x * stride] * (double)b[x * stride];
    acc[t] = s;
  }
  for (size_t h = BAGUA__LOWRANK_LANES / 2; h > 0; h /= 2)
    for (size_t t = 0; t < h; t++) acc[t] += acc[t + h];
  return acc[0];
}

void bagua__lowrank_orthonormalise(float *p, size_t rows, size_t r, float eps) {
  for (size_t i = 0; i < r; i++) {
    float *ci = p + i;
    float norm = (float)(sqrt(dot_lanes(ci, ci, rows, r)) + (double)eps);
    for (size_t x = 0; x < rows; x++) ci[x * r] = ci[x * r] / norm;
    for (size_t j = i + 1; j < r; j++) {
      float *cj = p + j;
      float proj = (float)dot_lanes(ci, cj, rows, r);
      for (size_t x = 0; x < rows; x++) cj[x * r] = cj[x * r] - proj * ci[x * r];
    }
  }
}

static uint64_t splitmix64(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

void bagua__randn_f32(uint64_t seed, float *out, size_t n) {
  uint64_t s = seed;
  for (size_t i = 0; i < n; i++) {
    double sum = 0.0;
    for (int k = 0; k < 12; k++) sum += (double)(splitmix64(&s) >> 11) * 0x1.0p-53;
    out[i] = (float)(sum - 6.0);
  }
}
