/*
 * Decentralized SGD: ranks exchange WEIGHTS, not gradients. As in Bagua, the exchange of the
 * weights x_t a step starts from is launched as soon as they exist (end of bagua_ddp_ready()
 * or of the previous step, where Bagua uses a forward pre-hook), so it overlaps the forward
 * and backward passes; the step then adopts the peers' average and applies the gradient
 * computed at x_t: x_{t+1} = avg(x_t, peers) - lr * g(x_t). Every comm_interval steps only.
 *
 * Peer modes, among ranks (or among node leaders when hierarchical):
 *   all        allreduce-average of the weights;
 *   shift_one  one peer per step, the pair averaging its two models. Bagua's formula for an
 *              even number n of ranks; Bagua rejects odd n, here one rank per step sits
 *              out (rotating) and the other n-1 follow the same formula;
 *   ring       both ring neighbours, x = (x_left + x + x_right) / 3 (declared but
 *              unimplemented in Bagua).
 */
#include <stdlib.h>

#include "../ddp_internal.h"
#include "common/check.h"

typedef struct {
  float *peer;       /* the averaged weights, adopted by the next update */
  float *recv[2];    /* peers' weights */
  int pending;       /* an exchange was launched for the current step */
  int64_t exchanges; /* shift_one's step counter: incremented on every exchange */
} state_t;

static int64_t mod(int64_t a, int64_t m) {
  return ((a % m) + m) % m;
}

int bagua__ddp_shift_one_peer(int rank, int n, int64_t step) {
  if (n <= 1) return rank;
  int64_t sit = -1, m = n, i = rank;
  if (n % 2) {
    sit = mod(step, n);
    if (rank == sit) return rank;
    m = n - 1;
    i = mod(rank - sit - 1, n); /* position among the active ranks, cyclic after the sitter */
  }
  int64_t h = m / 2, j;
  if (i < h)
    j = mod(step + i, h) + h;
  else
    j = mod(i - h - step, h);
  return (int)(n % 2 ? mod(j + sit + 1, n) : j);
}

#define L BAGUA__LANE_COMM

static bagua_status_t exchange(bagua_ddp_t *d, void *arg) {
  (void)arg;
  state_t *s = d->algo_state;
  const bagua__ddp_dev_t *dev = d->s.dev;
  int hier = d->s.hierarchical;
  size_t n = d->total;
  BAGUA_CHECK(dev->copy(d, L, s->peer, d->params, n * sizeof(float)));
  if (hier) BAGUA_CHECK(bagua__ddp_node_reduce(d, s->peer, n, 1));
  bagua_comm_t *c = hier ? d->inter : d->comm;
  int size = c ? bagua_comm_size(c) : 1, me = c ? bagua_comm_rank(c) : 0;
  if (c && size > 1) {
    switch (d->s.peer_mode) {
      case BAGUA__PEER_ALL:
        BAGUA_CHECK(dev->allreduce(d, L, c, s->peer, s->peer, n, BAGUA_F32, BAGUA_AVG));
        break;
      case BAGUA__PEER_SHIFT_ONE: {
        int p = bagua__ddp_shift_one_peer(me, size, s->exchanges);
        if (p == me) break;
        BAGUA_CHECK(dev->sendrecv(d, L, c, s->peer, n, p, s->recv[0], n, p, BAGUA_F32));
        BAGUA_CHECK(dev->add(d, L, s->peer, s->recv[0], n));
        BAGUA_CHECK(dev->div(d, L, s->peer, n, 2));
        break;
      }
      case BAGUA__PEER_RING: {
        int left = (me + size - 1) % size, right = (me + 1) % size;
        /* With two ranks both neighbours are the same peer: one exchange, counted twice. */
        if (size == 2) {
          BAGUA_CHECK(dev->sendrecv(d, L, c, s->peer, n, right, s->recv[0], n, left, BAGUA_F32));
          BAGUA_CHECK(dev->add(d, L, s->peer, s->recv[0], n));
          BAGUA_CHECK(dev->add(d, L, s->peer, s->recv[0], n));
        } else {
          BAGUA_CHECK(
              dev->neighbors(d, L, c, s->peer, n, left, s->recv[0], right, s->recv[1], BAGUA_F32));
          BAGUA_CHECK(dev->add(d, L, s->peer, s->recv[0], n));
          BAGUA_CHECK(dev->add(d, L, s->peer, s->recv[1], n));
        }
        BAGUA_CHECK(dev->div(d, L, s->peer, n, 3));
        break;
      }
    }
  }
  if (hier) BAGUA_CHECK(bagua__ddp_node_bcast(d, s->peer, n));
  s->exchanges++;
  return BAGUA_OK;
}

static bagua_status_t setup(bagua_ddp_t *d) {
  state_t *s = calloc(1, sizeof(*s));
  if (!s) return BAGUA_ERR_NO_MEMORY;
  d->algo_state = s;
  int nrecv = d->s.peer_mode == BAGUA__PEER_RING ? 2 : d->s.peer_mode == BAGUA__PEER_SHIFT_ONE;
  if (!(s->peer = bagua__ddp_alloc_floats(d, d->total))) return BAGUA_ERR_NO_MEMORY;
  for (int i = 0; i < nrecv; i++)
    if (!(s->recv[i] = bagua__ddp_alloc_floats(d, d->total))) return BAGUA_ERR_NO_MEMORY;
  return BAGUA_OK;
}

static bagua_status_t next_step(bagua_ddp_t *d) {
  state_t *s = d->algo_state;
  if (d->steps % d->s.comm_interval != 0) return BAGUA_OK;
  s->pending = 1;
  return bagua__ddp_submit(d, exchange, NULL);
}

static bagua_status_t pre_update(bagua_ddp_t *d) {
  state_t *s = d->algo_state;
  int pending = s->pending;
  s->pending = 0;
  if (!pending) return BAGUA_OK;
  return d->s.dev->copy(d, BAGUA__LANE_COMPUTE, d->params, s->peer, d->total * sizeof(float));
}

static void teardown(bagua_ddp_t *d) {
  state_t *s = d->algo_state;
  if (!s) return;
  bagua__ddp_free(d, s->peer);
  bagua__ddp_free(d, s->recv[0]);
  bagua__ddp_free(d, s->recv[1]);
  free(s);
  d->algo_state = NULL;
}

const bagua__ddp_algo_t bagua__ddp_decentralized = {
    .name = "decentralized",
    .caps = BAGUA__ALGO_PEERS | BAGUA__ALGO_PEER_CHOICE,
    .hierarchical_default = 1,
    .setup = setup,
    .pre_update = pre_update,
    .next_step = next_step,
    .teardown = teardown,
};
