/*
 * GradientAllReduce: each ready bucket's gradients are averaged over all ranks at full
 * precision (Bagua's CentralizedFullPrecisionSynchronous with average=True), flat or
 * hierarchical, while the caller continues its backward pass.
 */
#include "../ddp_internal.h"

static bagua_status_t bucket_op(bagua_ddp_t *d, void *arg) {
  bagua__ddp_bucket_t *b = arg;
  return bagua__ddp_allreduce_avg(d, d->grads + b->offset, b->count, d->s.hierarchical);
}

const bagua__ddp_algo_t bagua__ddp_gradient_allreduce = {
    .name = "gradient_allreduce",
    .caps = BAGUA__ALGO_ALLREDUCE,
    .hierarchical_default = 0,
    .bucket_op = bucket_op,
};
