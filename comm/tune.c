/*
 * Settings of a running communicator that autotuning changes between collectives (tune.h):
 * the streams a message is spread over, the ring's pipeline segment and the ring threshold.
 */
#include "communicator.h"
#include "tcp/tcp.h"
#include "common/log.h"
#include "common/params.h"
#include "tune.h"

/* Whether some peer is on another node: only those connections have several streams. */
static int has_remote_peer(const bagua_comm_t *c) {
  for (int r = 0; r < c->size; r++)
    if (c->eps[r].node_hash != c->eps[c->rank].node_hash) return 1;
  return 0;
}

int bagua__comm_max_streams(const bagua_comm_t *c) {
  if (!c) return 0;
  int n = has_remote_peer(c) ? c->nstreams : 0;
  /* A hierarchical transport talks to other nodes through its leaders' communicator. */
  int m = bagua__comm_max_streams(c->inter);
  return n > m ? n : m;
}

int bagua__comm_streams(const bagua_comm_t *c) {
  int max = bagua__comm_max_streams(c);
  if (max == 0) return 0;
  return c->active_streams > 0 && c->active_streams < max ? c->active_streams : max;
}

bagua_status_t bagua__comm_set_streams(bagua_comm_t *c, int n) {
  if (!c) return BAGUA_OK;
  int max = c->nstreams > 0 ? c->nstreams : 1;
  if (n < 1 || n > max) {
    BAGUA_WARN("communicator: %d streams per peer is invalid; accepted: 1..%d (the streams opened)",
               n, max);
    return BAGUA_ERR_INVALID_ARG;
  }
  c->active_streams = n;
  /* The node-level communicators may have been opened with fewer streams (shm: one). */
  if (c->intra) bagua__comm_set_streams(c->intra, n < c->intra->nstreams ? n : c->intra->nstreams);
  if (c->inter) bagua__comm_set_streams(c->inter, n < c->inter->nstreams ? n : c->inter->nstreams);
  return BAGUA_OK;
}

int bagua__comm_uses_tcp(const bagua_comm_t *c) {
  if (!c) return 0;
  /* The TCP collectives (comm/tcp/coll.c) serve TCP; a hierarchical transport runs them among
   * the node leaders. Shared memory never does. */
  if (c->ops == &bagua__tcp_ops && c->size > 1) return 1;
  return bagua__comm_uses_tcp(c->inter);
}

int bagua__comm_uses_ring(const bagua_comm_t *c) {
  return bagua__param_int(BAGUA_P_NET_RING_PIPELINE) && bagua__comm_uses_tcp(c);
}

/* Whether `bytes` is within the bounds of parameter `id`; warns naming `what` and the variable
 * otherwise. */
static int in_bounds(bagua__param_id_t id, const char *what, size_t bytes) {
  int64_t lo, hi;
  bagua__param_bounds(id, &lo, &hi);
  if (bytes >= (size_t)lo && bytes <= (size_t)hi) return 1;
  BAGUA_WARN("communicator: %s %zu bytes is invalid; accepted: %lld..%lld (as %s)", what, bytes,
             (long long)lo, (long long)hi, bagua__param_env_name(id));
  return 0;
}

size_t bagua__comm_segment(const bagua_comm_t *c) {
  return c ? c->segment_bytes : 0;
}

bagua_status_t bagua__comm_set_segment(bagua_comm_t *c, size_t bytes) {
  if (!c) return BAGUA_OK;
  if (!in_bounds(BAGUA_P_NET_SEGMENT_BYTES, "segment", bytes)) return BAGUA_ERR_INVALID_ARG;
  c->segment_bytes = bytes;
  if (c->intra) c->intra->segment_bytes = bytes;
  if (c->inter) bagua__comm_set_segment(c->inter, bytes);
  return BAGUA_OK;
}

size_t bagua__comm_ring_min(const bagua_comm_t *c) {
  return c ? c->ring_min_bytes : 0;
}

bagua_status_t bagua__comm_set_ring_min(bagua_comm_t *c, size_t bytes) {
  if (!c) return BAGUA_OK;
  if (!in_bounds(BAGUA_P_NET_RING_MIN_BYTES, "ring threshold", bytes)) return BAGUA_ERR_INVALID_ARG;
  c->ring_min_bytes = bytes;
  if (c->intra) c->intra->ring_min_bytes = bytes;
  if (c->inter) bagua__comm_set_ring_min(c->inter, bytes);
  return BAGUA_OK;
}

void bagua__comm_set_calls_agreed(bagua_comm_t *c) {
  if (!c) return;
  /* The same flag a hierarchical parent sets on its node-level communicators, whose calls it
   * has agreed on already. */
  c->sig_by_parent = 1;
  if (c->intra) c->intra->sig_by_parent = 1;
  if (c->inter) c->inter->sig_by_parent = 1;
}
