/*
 * QAdam (Bagua's q_adam.py; the docs call it "QAdam-1bit" but it is 8-bit). Steps
 * 0 .. warmup_steps-1 average the gradients at full precision (flat, as in Bagua) and run
 * plain Adam, updating m and v. From then on each ready bucket updates its momentum locally,
 * m = beta1 m + (1 - beta1)(g + weight_decay p), and averages m with ByteGrad's compressed
 * op (hierarchical by default); the step uses that m with v frozen at its warm-up value and
 * the bias correction of m at the running step count t and of v at the step tw where it froze:
 *   p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^tw) + eps).
 * Bagua corrects v with t as well, which shrinks the frozen estimate over time and grows the
 * effective step size (about 2x over a 5-epoch Fashion-MNIST run).
 * Bagua switches by rebuilding its buckets around m (need_reset); here the bucket op just
 * changes with the step count, since m shares the gradients' flat layout.
 */
#include <stdlib.h>

#include "../ddp_internal.h"
#include "common/check.h"

static int warm(const bagua_ddp_t *d) {
  return d->steps < d->s.warmup_steps;
}

static bagua_status_t setup(bagua_ddp_t *d) {
  bagua__ddp_u8_t *u = calloc(1, sizeof(*u));
  if (!u) return BAGUA_ERR_NO_MEMORY;
  d->algo_state = u;
  return bagua__ddp_u8_init(d, d->s.hierarchical, d->s.error_feedback, u);
}

static bagua_status_t bucket_op(bagua_ddp_t *d, void *arg) {
  bagua__ddp_bucket_t *b = arg;
  if (warm(d)) return bagua__ddp_allreduce_avg(d, d->grads + b->offset, b->count, 0);
  float *m = d->opt_m + b->offset;
  const float *g = d->grads + b->offset, *p = d->params + b->offset;
  BAGUA_CHECK(d->s.dev->qadam_momentum(d, BAGUA__LANE_COMM, m, g, p, b->count, (float)d->s.beta1,
                                       (float)(1.0 - d->s.beta1), (float)d->s.weight_decay));
  BAGUA_CHECK(bagua__ddp_u8_allreduce(d, d->algo_state, m, b->offset, b->count));
  if (b->count > b->used)
    BAGUA_CHECK(
        d->s.dev->zero(d, BAGUA__LANE_COMM, m + b->used, (b->count - b->used) * sizeof(float)));
  return BAGUA_OK;
}

static bagua_status_t update(bagua_ddp_t *d) {
  if (warm(d)) return bagua__ddp_optim_step(d);
  return d->s.dev->qadam_frozen(d, BAGUA__LANE_COMPUTE, d->params, d->opt_m, d->opt_v, d->total,
                                d->lr, d->s.beta1, d->s.beta2, d->s.eps, d->steps + 1,
                                d->s.warmup_steps);
}

static void teardown(bagua_ddp_t *d) {
  if (d->algo_state) bagua__ddp_u8_free(d, d->algo_state);
  free(d->algo_state);
  d->algo_state = NULL;
}

const bagua__ddp_algo_t bagua__ddp_qadam = {
    .name = "qadam",
    .caps = BAGUA__ALGO_ERROR_FEEDBACK | BAGUA__ALGO_WARMUP | BAGUA__ALGO_OWN_OPTIMIZER,
    .default_warmup_steps = 100,
    .optimizer = "qadam",
    .hierarchical_default = 1,
    .setup = setup,
    .bucket_op = bucket_op,
    .update = update,
    .teardown = teardown,
};
