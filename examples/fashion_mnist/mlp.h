/*
 * A multi-layer perceptron: fully connected layers with ReLU between them and a softmax
 * cross-entropy loss on the last layer's outputs.
 *
 * Storage is what a data-parallel library wants to see: all parameters live in one flat
 * float buffer, layer l occupying [layer[l].offset, layer[l].offset + layer[l].count) with
 * its weights (in x out, row-major, so the forward pass is X * W) followed by its biases;
 * the gradients use the same layout in a second buffer. A layer's slice is therefore one
 * contiguous tensor to register, reduce or checksum.
 *
 * Backward walks from the last layer to the first. As soon as a layer's weight and bias
 * gradients are complete it calls the grad-ready callback with the layer's index, before
 * computing the gradient that flows into the layer below, so communication of layer l can
 * overlap the backward computation of layers l-1..0. Gradients are the mean over the batch.
 *
 * Not thread-safe: one thread runs forward and backward (the callback may hand the gradient
 * slice to other threads; backward does not touch layer l's gradient after its callback).
 */
#ifndef FM_MLP_H
#define FM_MLP_H

#include <stddef.h>
#include <stdint.h>

#include "gemm.h"

#define FM_MLP_MAX_LAYERS 17

typedef struct {
  int in, out;
  size_t offset; /* first element of the layer in params/grads */
  size_t count;  /* in*out weights, then out biases */
} fm_layer_t;

/* Called by backward with the index of the layer whose gradient is final; a non-zero return
 * stops backward, which returns that value. */
typedef int (*fm_grad_ready_cb)(void *ctx, int layer);

typedef struct {
  int nlayers;
  fm_layer_t layer[FM_MLP_MAX_LAYERS];
  size_t nparams;
  float *params; /* nparams floats, owned */
  float *grads;  /* nparams floats, owned; written (not accumulated) by backward */
  int max_batch;
  /* Forward state kept for backward: the input of the last forward pass (borrowed) and each
   * layer's output (post-ReLU for hidden layers, logits for the last). */
  const float *input;
  int batch;
  float *act[FM_MLP_MAX_LAYERS];
  float *delta[2]; /* ping-pong buffers for the loss gradient flowing backward */
  fm_gemm_ws_t ws;
} fm_mlp_t;

/*
 * Builds an MLP with layer widths sizes[0] (inputs) .. sizes[nsizes-1] (classes), 2 <= nsizes
 * <= FM_MLP_MAX_LAYERS + 1, for batches of up to max_batch rows, and initialises it from
 * `seed` (He-uniform weights for layers followed by ReLU, Glorot-uniform for the last, zero
 * biases): the same seed gives bit-identical parameters on every machine. Returns 0, or -1
 * when out of memory (m is then safe to destroy).
 */
int fm_mlp_create(fm_mlp_t *m, const int *sizes, int nsizes, int max_batch, uint64_t seed);
void fm_mlp_destroy(fm_mlp_t *m);

static inline float *fm_mlp_weights(const fm_mlp_t *m, int l) {
  return m->params + m->layer[l].offset;
}
static inline float *fm_mlp_bias(const fm_mlp_t *m, int l) {
  return fm_mlp_weights(m, l) + (size_t)m->layer[l].in * (size_t)m->layer[l].out;
}

/* Runs batch rows of x (batch x sizes[0], kept until backward) through the network and
 * returns the logits (batch x classes, owned by m). */
const float *fm_mlp_forward(fm_mlp_t *m, const float *x, int batch);

/*
 * Mean softmax cross-entropy of the last forward pass against labels y; stores its gradient
 * for backward and adds the number of rows whose largest logit is the label to *correct.
 */
double fm_mlp_loss(fm_mlp_t *m, const uint8_t *y, int *correct);

/* Rows of the last forward pass whose largest logit is the label (for evaluation). */
int fm_mlp_count_correct(const fm_mlp_t *m, const uint8_t *y);

/* Backward pass for the last forward pass and loss: fills grads layer by layer, last layer
 * first, calling cb(ctx, l) after each (cb may be NULL). Returns 0 or cb's non-zero value. */
int fm_mlp_backward(fm_mlp_t *m, fm_grad_ready_cb cb, void *ctx);

#endif
