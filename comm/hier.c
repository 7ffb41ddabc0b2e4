/*
 * Hierarchical collectives for communicators that span several nodes with several ranks on
 * some of them: shared memory within each node, TCP among one leader per node. Collectives
 * without a hierarchical version use the TCP algorithms (comm/tcp/coll.c) over the TCP streams
 * of the whole communicator (opened on first use): its ops table names them.
 */
#include <string.h>

#include "communicator.h"
#include "tcp/tcp.h"
#include "common/check.h"
#include "kernels/kernels.h"

bagua_status_t bagua__hier_setup(bagua_comm_t *c) {
  BAGUA_CHECK(bagua_comm_split_node(c, &c->intra, &c->inter));
  /* Every call on c agrees on its signature over c's whole mesh first (comm/coll.c), so the
   * stages it runs on the node and leader communicators need no agreement of their own. */
  c->intra->sig_by_parent = 1;
  if (c->inter) c->inter->sig_by_parent = 1;
  return BAGUA_OK;
}

static bagua_status_t h_allreduce(bagua_comm_t *c, const void *s, void *r, size_t count,
                                  bagua_dtype_t dt, bagua_op_t op) {
  /* AVG must divide by the global size once, so the stages sum and the leader divides. */
  bagua_op_t stage_op = op == BAGUA_AVG ? BAGUA_SUM : op;
  BAGUA_CHECK(bagua_reduce(c->intra, s, r, count, dt, stage_op, 0));
  if (c->inter) {
    BAGUA_CHECK(bagua_allreduce(c->inter, r, r, count, dt, stage_op));
    if (op == BAGUA_AVG) bagua__div(dt, r, count, c->size);
  }
  return bagua_broadcast(c->intra, r, r, count, dt, 0);
}

static bagua_status_t h_broadcast(bagua_comm_t *c, const void *s, void *r, size_t count,
                                  bagua_dtype_t dt, int root) {
  /* Where the root sits, from the topology computed once per communicator (comm_mesh.c). */
  int rnode = c->node_of[root], rlocal = c->local_of[root];
  if (c->rank == root && s != r) memcpy(r, s, count * bagua_dtype_size(dt));
  if (c->node_index == rnode) BAGUA_CHECK(bagua_broadcast(c->intra, r, r, count, dt, rlocal));
  if (c->inter) BAGUA_CHECK(bagua_broadcast(c->inter, r, r, count, dt, rnode));
  if (c->node_index != rnode) BAGUA_CHECK(bagua_broadcast(c->intra, r, r, count, dt, 0));
  return BAGUA_OK;
}

static bagua_status_t h_barrier(bagua_comm_t *c) {
  BAGUA_CHECK(bagua_barrier(c->intra));
  if (c->inter) BAGUA_CHECK(bagua_barrier(c->inter));
  return bagua_barrier(c->intra);
}

/* The collectives without a hierarchical version run the TCP algorithms on c itself, over the
 * streams to every rank of the communicator. */
const bagua__coll_ops_t bagua__hier_ops = {
    .name = "hier(shm+tcp)",
    .allreduce = h_allreduce,
    .reduce_scatter = bagua__tcp_reduce_scatter,
    .allgather = bagua__tcp_allgather,
    .alltoall = bagua__tcp_alltoall,
    .broadcast = h_broadcast,
    .reduce = bagua__tcp_reduce,
    .gather = bagua__tcp_gather,
    .scatter = bagua__tcp_scatter,
    .barrier = h_barrier,
};
