/*
 * The TCP transport: the links of a communicator, its TCP streams to its peers opened when
 * first needed (links.c); the point-to-point exchange engine over them (exchange.c); the
 * pipelined ring for large allreduce, reduce-scatter and allgather (ring.c); and the tcp
 * transport's collectives with their choice of algorithm (coll.c, bagua__tcp_ops).
 * Not installed.
 *
 * Threading: accepting never waits for the caller: a thread per communicator serves the
 * handshakes of incoming streams whenever they come. The streams of one peer are written by
 * exactly one side of links.c: the acceptor for higher ranks, the caller's thread for lower
 * ones; a peer becomes usable (`up`, release/acquire) once all its streams are there, and from
 * then on only the collectives touch them. bagua__links_shutdown() may be called from any
 * thread.
 *
 * Ownership: bagua__links_start() owns the listening socket from then on, also on failure; the
 * communicator owns its links (bagua__links_stop() before the streams are closed) and the
 * engines' buffers kept between calls (c->scratch, c->partials).
 *
 * Failure: the exchange engine and the rings do not poison on error; callers do
 * (bagua__comm_poison, communicator.h). A receiver that expects a different length or
 * sequence number reports a protocol error instead of corrupting data; a wait for a peer ends at
 * the communicator's timeout or when its abort flag is set.
 */
#ifndef BAGUA_COMM_TCP_H
#define BAGUA_COMM_TCP_H

#include <stddef.h>
#include <stdint.h>

#include "../communicator.h"

/* ---- links: the TCP streams to the peers, opened on first use (comm/tcp/links.c) ---- */

/* The name of the acceptor thread (at most 15 characters). */
#define BAGUA_ACCEPTOR_THREAD_NAME "bagua-accept"
/* Starts the thread that accepts the streams higher ranks open to this one, on `lfd` (owned
 * from now on, also on failure). */
bagua_status_t bagua__links_start(bagua_comm_t *c, int lfd);
/* Makes sure the streams to every rank in want[0..n-1] (this rank and repeats allowed) are
 * open: connects those to lower ranks, waits for higher ones to connect, before `deadline_ms`
 * (BAGUA_ERR_TIMEOUT naming a rank that never came), or until the abort flag is set. O(1) when
 * they are open already. */
bagua_status_t bagua__links_ensure(bagua_comm_t *c, const int *want, int n, int64_t deadline_ms);
/* bagua__links_ensure from a collective: the communicator's timeout bounds the wait, as any
 * other wait of a collective for a peer. */
bagua_status_t bagua__links_use(bagua_comm_t *c, const int *want, int n);
/* Shuts every stream down (a poison: peers notice at once) and stops installing new ones; any
 * thread. */
void bagua__links_shutdown(bagua_comm_t *c);
/* Stops the acceptor and closes the listener (before the streams are closed). */
void bagua__links_stop(bagua_comm_t *c);
/* Peers whose streams are open (for tests and diagnostics). */
int bagua__links_count(const bagua_comm_t *c);
/* The ranks recursive-doubling allreduce (comm/tcp/coll.c) exchanges with, in out[] (at
 * most 2 + log2(n) of them). Returns how many. */
int bagua__rd_partners(int n, int r, int *out);

/* ---- point-to-point exchange engine over the TCP streams (comm/tcp/exchange.c) ---- */
typedef struct {
  int peer;
  const void *buf;
  size_t bytes;
} bagua__send_t;

typedef struct {
  int peer;
  void *buf;         /* destination */
  size_t bytes;      /* expected bytes; a different size from the peer is a protocol error */
  const void *local; /* reduce mode: buf = local (op) incoming; NULL means plain copy */
  bagua_dtype_t dt;
  bagua_op_t op;
} bagua__recv_t;

/* Progresses all sends and receives concurrently until all complete. At most one send and one
 * receive per peer. Does not poison on error; callers do. */
bagua_status_t bagua__exchange(bagua_comm_t *c, const bagua__send_t *sends, int nsends,
                               const bagua__recv_t *recvs, int nrecvs);

/* Pipelined rings (comm/tcp/ring.c): usable when both ring neighbours have the same number of
 * streams. The allreduce leaves rank r's result in all of rbuf; the reduce-scatter reduces
 * `count` elements per rank (rbuf: this rank's block, may be sbuf's block r; AVG divided) and
 * keeps three blocks of partial sums in the communicator (c->partials) between calls; the allgather
 * expects chunk r of `count` elements (split as in the ring) already in place. */
int bagua__ring_usable(const bagua_comm_t *c);
bagua_status_t bagua__ring_allreduce(bagua_comm_t *c, const void *sbuf, void *rbuf, size_t count,
                                     bagua_dtype_t dt, bagua_op_t op);
bagua_status_t bagua__ring_reduce_scatter(bagua_comm_t *c, const void *sbuf, void *rbuf,
                                          size_t count, bagua_dtype_t dt, bagua_op_t op);
bagua_status_t bagua__ring_allgather(bagua_comm_t *c, void *buf, size_t count, size_t es);

/* TCP collectives over bagua__exchange (comm/tcp/coll.c): the entries of bagua__tcp_ops, also
 * named by the hierarchical transport's table for the collectives it has no version of. They
 * run over the TCP streams of the whole communicator they are given. */
extern const bagua__coll_ops_t bagua__tcp_ops;
bagua_status_t bagua__tcp_allreduce(bagua_comm_t *c, const void *s, void *r, size_t count,
                                    bagua_dtype_t dt, bagua_op_t op);
bagua_status_t bagua__tcp_reduce_scatter(bagua_comm_t *c, const void *s, void *r, size_t count,
                                         bagua_dtype_t dt, bagua_op_t op);
bagua_status_t bagua__tcp_allgather(bagua_comm_t *c, const void *s, void *r, size_t count,
                                    bagua_dtype_t dt);
bagua_status_t bagua__tcp_alltoall(bagua_comm_t *c, const void *s, void *r, size_t count,
                                   bagua_dtype_t dt);
bagua_status_t bagua__tcp_broadcast(bagua_comm_t *c, const void *s, void *r, size_t count,
                                    bagua_dtype_t dt, int root);
bagua_status_t bagua__tcp_reduce(bagua_comm_t *c, const void *s, void *r, size_t count,
                                 bagua_dtype_t dt, bagua_op_t op, int root);
bagua_status_t bagua__tcp_gather(bagua_comm_t *c, const void *s, void *r, size_t count,
                                 bagua_dtype_t dt, int root);
bagua_status_t bagua__tcp_scatter(bagua_comm_t *c, const void *s, void *r, size_t count,
                                  bagua_dtype_t dt, int root);
/* Dissemination barrier: ceil(log2 n) rounds of empty messages. The tcp transport's; the
 * shared-memory set-up also uses it, before its arena exists. */
bagua_status_t bagua__tcp_barrier(bagua_comm_t *c);

#endif
