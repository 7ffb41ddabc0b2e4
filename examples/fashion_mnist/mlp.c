/*
 * MLP forward and backward passes on top of fm_sgemm (see mlp.h).
 */
#include "mlp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"

static float *alloc_floats(size_t n) {
  /* 64-byte alignment keeps rows of the wide layers on cache-line boundaries. */
  size_t bytes = (n * sizeof(float) + 63) & ~(size_t)63;
  return aligned_alloc(64, bytes ? bytes : 64);
}

static void init_params(fm_mlp_t *m, uint64_t seed) {
  fm_rng_t rng;
  fm_rng_seed(&rng, seed, 0);
  for (int l = 0; l < m->nlayers; l++) {
    const fm_layer_t *ly = &m->layer[l];
    /* He initialisation keeps the variance of ReLU activations constant from layer to layer;
     * the output layer has no ReLU after it, so it uses Glorot's bound instead. */
    int last = l == m->nlayers - 1;
    float bound = last ? sqrtf(6.0f / (float)(ly->in + ly->out)) : sqrtf(6.0f / (float)ly->in);
    float *w = fm_mlp_weights(m, l);
    for (size_t i = 0; i < (size_t)ly->in * (size_t)ly->out; i++)
      w[i] = (2.0f * fm_rng_uniform(&rng) - 1.0f) * bound;
    memset(fm_mlp_bias(m, l), 0, sizeof(float) * (size_t)ly->out);
  }
}

int fm_mlp_create(fm_mlp_t *m, const int *sizes, int nsizes, int max_batch, uint64_t seed) {
  memset(m, 0, sizeof(*m));
  if (nsizes < 2 || nsizes > FM_MLP_MAX_LAYERS + 1 || max_batch < 1) return -1;
  m->nlayers = nsizes - 1;
  m->max_batch = max_batch;
  int widest = 0;
  for (int l = 0; l < m->nlayers; l++) {
    fm_layer_t *ly = &m->layer[l];
    ly->in = sizes[l];
    ly->out = sizes[l + 1];
    ly->offset = m->nparams;
    ly->count = (size_t)ly->in * (size_t)ly->out + (size_t)ly->out;
    m->nparams += ly->count;
    if (ly->out > widest) widest = ly->out;
    if (ly->in > widest) widest = ly->in;
  }
  m->params = alloc_floats(m->nparams);
  m->grads = alloc_floats(m->nparams);
  if (!m->params || !m->grads) goto fail;
  memset(m->grads, 0, sizeof(float) * m->nparams);
  for (int l = 0; l < m->nlayers; l++) {
    m->act[l] = alloc_floats((size_t)max_batch * (size_t)m->layer[l].out);
    if (!m->act[l]) goto fail;
  }
  for (int i = 0; i < 2; i++) {
    m->delta[i] = alloc_floats((size_t)max_batch * (size_t)widest);
    if (!m->delta[i]) goto fail;
  }
  if (fm_gemm_ws_init(&m->ws) != 0) goto fail;
  init_params(m, seed);
  return 0;
fail:
  fm_mlp_destroy(m);
  return -1;
}

void fm_mlp_destroy(fm_mlp_t *m) {
  free(m->params);
  free(m->grads);
  for (int l = 0; l < FM_MLP_MAX_LAYERS; l++) free(m->act[l]);
  free(m->delta[0]);
  free(m->delta[1]);
  fm_gemm_ws_free(&m->ws);
  memset(m, 0, sizeof(*m));
}

const float *fm_mlp_forward(fm_mlp_t *m, const float *x, int batch) {
  m->input = x;
  m->batch = batch;
  const float *in = x;
  for (int l = 0; l < m->nlayers; l++) {
    const fm_layer_t *ly = &m->layer[l];
    float *out = m->act[l];
    /* out = in * W, then the bias and (except after the last layer) ReLU in one pass. */
    fm_sgemm(&m->ws, batch, ly->out, ly->in, in, ly->in, 1, fm_mlp_weights(m, l), ly->out, 1, out,
             ly->out, 0);
    const float *b = fm_mlp_bias(m, l);
    int relu = l < m->nlayers - 1;
    for (int r = 0; r < batch; r++) {
      float *row = out + (size_t)r * ly->out;
      for (int j = 0; j < ly->out; j++) {
        float v = row[j] + b[j];
        row[j] = relu && v < 0.0f ? 0.0f : v;
      }
    }
    in = out;
  }
  return m->act[m->nlayers - 1];
}

static int argmax(const float *v, int n) {
  int best = 0;
  for (int j = 1; j < n; j++)
    if (v[j] > v[best]) best = j;
  return best;
}

double fm_mlp_loss(fm_mlp_t *m, const uint8_t *y, int *correct) {
  int classes = m->layer[m->nlayers - 1].out, batch = m->batch;
  const float *logits = m->act[m->nlayers - 1];
  float *d = m->delta[0];
  double total = 0.0;
  /* The gradient of the mean loss with respect to the logits is (softmax - onehot) / batch. */
  float inv_batch = 1.0f / (float)batch;
  for (int r = 0; r < batch; r++) {
    const float *z = logits + (size_t)r * classes;
    float *dz = d + (size_t)r * classes;
    int top = argmax(z, classes);
    /* Subtracting the largest logit keeps expf() from overflowing. */
    float zmax = z[top], sum = 0.0f;
    for (int j = 0; j < classes; j++) sum += (dz[j] = expf(z[j] - zmax));
    total += (double)(logf(sum) + zmax - z[y[r]]);
    for (int j = 0; j < classes; j++) dz[j] = dz[j] / sum * inv_batch;
    dz[y[r]] -= inv_batch;
    *correct += top == y[r];
  }
  return total / batch;
}

int fm_mlp_count_correct(const fm_mlp_t *m, const uint8_t *y) {
  int classes = m->layer[m->nlayers - 1].out, n = 0;
  const float *logits = m->act[m->nlayers - 1];
  for (int r = 0; r < m->batch; r++) n += argmax(logits + (size_t)r * classes, classes) == y[r];
  return n;
}

int fm_mlp_backward(fm_mlp_t *m, fm_grad_ready_cb cb, void *ctx) {
  int batch = m->batch, cur = 0;
  for (int l = m->nlayers - 1; l >= 0; l--) {
    const fm_layer_t *ly = &m->layer[l];
    const float *dz = m->delta[cur];
    const float *in = l > 0 ? m->act[l - 1] : m->input;
    float *gw = m->grads + ly->offset, *gb = gw + (size_t)ly->in * (size_t)ly->out;
    /* dW = X^T * dZ: X^T is X read with swapped strides. */
    fm_sgemm(&m->ws, ly->in, ly->out, batch, in, 1, ly->in, dz, ly->out, 1, gw, ly->out, 0);
    /* db = column sums of dZ. */
    memset(gb, 0, sizeof(float) * (size_t)ly->out);
    for (int r = 0; r < batch; r++)
      for (int j = 0; j < ly->out; j++) gb[j] += dz[(size_t)r * ly->out + j];
    if (cb) {
      int rc = cb(ctx, l);
      if (rc != 0) return rc;
    }
    if (l == 0) break;
    /* dX = dZ * W^T, then through the ReLU of the layer below: its output was positive
     * exactly where the pre-activation was, so the mask comes from the stored output. */
    float *dx = m->delta[cur ^ 1];
    fm_sgemm(&m->ws, batch, ly->in, ly->out, dz, ly->out, 1, fm_mlp_weights(m, l), 1, ly->out, dx,
             ly->in, 0);
    const float *a = m->act[l - 1];
    for (size_t i = 0; i < (size_t)batch * (size_t)ly->in; i++)
      if (a[i] <= 0.0f) dx[i] = 0.0f;
    cur ^= 1;
  }
  return 0;
}
