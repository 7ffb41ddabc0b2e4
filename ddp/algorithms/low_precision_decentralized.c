/*
 * Low-precision decentralized SGD (Bagua's decentralized_low_precision_synchronous op): after
 * the optimizer step, each rank sends its ring neighbours a MinMaxUInt8-compressed weight
 * DIFFERENCE and keeps compressed estimates of their replicas.
 *
 * Bagua keeps three extra model copies: its own replica W and the neighbours' L and R. The
 * update only ever uses L and R through their sum (diff = x + L/3 + R/3 - 5/3 W, then
 * L += Q(diff_left), R += Q(diff_right)), so this version keeps S = L + R instead: two extra
 * copies, the same mathematics (up to float rounding of the sum). The difference itself is
 * built in the gradient buffer, which is free once the optimizer has run. Per exchange:
 *   diff = x + S/3 - (5/3) W;  send Q(diff) to both neighbours, receive theirs;
 *   S += Q(diff_left) + Q(diff_right);  x = W + Q(diff);  W = x.
 * Every replica starts equal to the broadcast weights, so W = x0 and S = 2 x0 initially.
 */
#include <stdlib.h>

#include "../ddp_internal.h"
#include "common/check.h"

typedef struct {
  bagua_comm_t *comm; /* the ring's communicator: all ranks, or node leaders; NULL: none */
  float *w, *s;       /* own replica estimate, sum of the neighbours' */
  size_t region;      /* bytes of the compressed model */
  uint8_t *mine, *from_left, *from_right;
} state_t;

#define L BAGUA__LANE_COMM

static bagua_status_t ring_exchange(bagua_ddp_t *d, void *arg) {
  (void)arg;
  state_t *s = d->algo_state;
  const bagua__ddp_dev_t *dev = d->s.dev;
  size_t n = d->total;
  float *x = d->params, *diff = d->grads;
  if (d->s.hierarchical) BAGUA_CHECK(bagua__ddp_node_reduce(d, x, n, 1));
  int size = s->comm ? bagua_comm_size(s->comm) : 1;
  if (size > 1) {
    int me = bagua_comm_rank(s->comm);
    int left = (me + size - 1) % size, right = (me + 1) % size;
    BAGUA_CHECK(dev->lpdec_diff(d, L, diff, x, s->s, s->w, n));
    BAGUA_CHECK(dev->compress(d, L, diff, n, 1, s->mine));
    /* With two ranks the left and right neighbour are one peer: one exchange, added twice. */
    const uint8_t *second = s->from_left;
    if (size > 2) {
      BAGUA_CHECK(dev->neighbors(d, L, s->comm, s->mine, s->region, left, s->from_left, right,
                                 s->from_right, BAGUA_U8));
      second = s->from_right;
    } else {
      BAGUA_CHECK(dev->sendrecv(d, L, s->comm, s->mine, s->region, right, s->from_left, s->region,
                                left, BAGUA_U8));
    }
    BAGUA_CHECK(dev->decompress_add(d, L, s->from_left, n, 1, s->s));
    BAGUA_CHECK(dev->decompress_add(d, L, second, n, 1, s->s));
    BAGUA_CHECK(dev->decompress(d, L, s->mine, n, 1, x));
    BAGUA_CHECK(dev->axpy(d, L, 1.0f, s->w, x, n));
    BAGUA_CHECK(dev->copy(d, L, s->w, x, n * sizeof(float)));
  }
  if (d->s.hierarchical) BAGUA_CHECK(bagua__ddp_node_bcast(d, x, n));
  return BAGUA_OK;
}

static bagua_status_t setup(bagua_ddp_t *d) {
  state_t *s = calloc(1, sizeof(*s));
  if (!s) return BAGUA_ERR_NO_MEMORY;
  d->algo_state = s;
  s->comm = d->s.hierarchical ? d->inter : d->comm;
  if (!s->comm || bagua_comm_size(s->comm) < 2) return BAGUA_OK;
  s->region = bagua__minmax_u8_compressed_size(d->total, BAGUA_F32);
  s->w = bagua__ddp_alloc_floats(d, d->total);
  s->s = bagua__ddp_alloc_floats(d, d->total);
  s->mine = d->s.dev->alloc(d, 3 * s->region);
  if (!s->w || !s->s || !s->mine) return BAGUA_ERR_NO_MEMORY;
  s->from_left = s->mine + s->region;
  s->from_right = s->mine + 2 * s->region;
  /* Setup runs on the training thread, after the weights were broadcast on its lane. */
  size_t bytes = d->total * sizeof(float);
  BAGUA_CHECK(d->s.dev->copy(d, BAGUA__LANE_COMPUTE, s->w, d->params, bytes));
  BAGUA_CHECK(d->s.dev->copy(d, BAGUA__LANE_COMPUTE, s->s, d->params, bytes));
  return d->s.dev->scale(d, BAGUA__LANE_COMPUTE, 2.0f, s->s, d->total);
}

/* Runs after the optimizer, synchronously (Bagua's post-optimizer-step hook). */
static bagua_status_t post_update(bagua_ddp_t *d) {
  if (d->steps % d->s.comm_interval != 0) return BAGUA_OK;
  BAGUA_CHECK(bagua__ddp_submit(d, ring_exchange, NULL));
  return bagua__ddp_wait(d);
}

static void teardown(bagua_ddp_t *d) {
  state_t *s = d->algo_state;
  if (!s) return;
  bagua__ddp_free(d, s->w);
  bagua__ddp_free(d, s->s);
  bagua__ddp_free(d, s->mine);
  free(s);
  d->algo_state = NULL;
}

const bagua__ddp_algo_t bagua__ddp_low_precision_decentralized = {
    .name = "low_precision_decentralized",
    .caps = BAGUA__ALGO_PEERS,
    .hierarchical_default = 1,
    .setup = setup,
    .post_update = post_update,
    .teardown = teardown,
};
