/*
 * ByteGrad: each ready bucket goes through the MinMaxUInt8 scatter-gather average of ops.c
 * (compress in one chunk per rank, alltoall, decompress and average own chunk, compress,
 * allgather, decompress), hierarchical by default as in Bagua. With error_feedback the
 * quantization error of both compressions is carried into the next step, which Bagua lacks.
 */
#include <stdlib.h>

#include "../ddp_internal.h"

static bagua_status_t setup(bagua_ddp_t *d) {
  bagua__ddp_u8_t *u = calloc(1, sizeof(*u));
  if (!u) return BAGUA_ERR_NO_MEMORY;
  d->algo_state = u;
  return bagua__ddp_u8_init(d, d->s.hierarchical, d->s.error_feedback, u);
}

static bagua_status_t bucket_op(bagua_ddp_t *d, void *arg) {
  bagua__ddp_bucket_t *b = arg;
  return bagua__ddp_u8_allreduce(d, d->algo_state, d->grads + b->offset, b->offset, b->count);
}

static void teardown(bagua_ddp_t *d) {
  if (d->algo_state) bagua__ddp_u8_free(d, d->algo_state);
  free(d->algo_state);
  d->algo_state = NULL;
}

const bagua__ddp_algo_t bagua__ddp_bytegrad = {
    .name = "bytegrad",
    .caps = BAGUA__ALGO_ERROR_FEEDBACK,
    .hierarchical_default = 1,
    .setup = setup,
    .bucket_op = bucket_op,
    .teardown = teardown,
};
