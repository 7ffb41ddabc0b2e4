/*
 * Scalar axpy, scale and optimizer steps: the reference for the vector versions. Each line is
 * one f32 operation in a fixed order, with no fused multiply-add (kernels/ is built with
 * -ffp-contract=off), so the vector versions can reproduce every rounding.
 */
#include <math.h>

#include "internal.h"

void bagua__axpy_scalar(float a, const float *x, float *y, size_t n) {
  for (size_t i = 0; i < n; i++) y[i] = y[i] + a * x[i];
}

void bagua__scale_scalar(float a, float *x, size_t n) {
  for (size_t i = 0; i < n; i++) x[i] = x[i] * a;
}

/* torch.optim.SGD, one element: see bagua__sgd_step in kernels.h. */
void bagua__sgd_scalar(float *param, const float *grad, float *buf, size_t n,
                       const bagua__sgd_consts_t *c) {
  for (size_t i = 0; i < n; i++) {
    float p = param[i], d = grad[i];
    if (c->weight_decay != 0.0f) d = d + c->weight_decay * p;
    if (c->momentum != 0.0f) {
      float b = c->first_step ? d : buf[i] * c->momentum + c->one_minus_dampening * d;
      buf[i] = b;
      d = c->nesterov ? d + c->momentum * b : b;
    }
    param[i] = p - c->lr * d;
  }
}

/* torch.optim.Adam / AdamW, one element: see bagua__adam_step in kernels.h. */
void bagua__adam_scalar(float *param, const float *grad, float *m, float *v, size_t n,
                        const bagua__adam_consts_t *c) {
  for (size_t i = 0; i < n; i++) {
    float p = param[i], g = grad[i];
    if (c->decoupled)
      p = p * c->decay;
    else if (c->weight_decay != 0.0f)
      g = g + c->weight_decay * p;
    float mi = c->beta1 * m[i] + c->one_minus_beta1 * g;
    float vi = c->beta2 * v[i] + c->one_minus_beta2 * g * g;
    float denom = sqrtf(vi) / c->bias2_sqrt + c->eps;
    m[i] = mi;
    v[i] = vi;
    param[i] = p - c->step_size * mi / denom;
  }
}

void bagua__qadam_momentum(float *m, const float *g, const float *p, size_t n, float beta1,
                           float one_minus_beta1, float wd) {
  for (size_t i = 0; i < n; i++) m[i] = beta1 * m[i] + one_minus_beta1 * (g[i] + wd * p[i]);
}

void bagua__lpdec_diff(float *diff, const float *x, const float *s, const float *w, size_t n) {
  const float third = 1.0f / 3.0f, five_thirds = 5.0f / 3.0f;
  for (size_t i = 0; i < n; i++) diff[i] = x[i] + s[i] * third - five_thirds * w[i];
}
