/*
 * Bagua-C communicator: a group of ranks that run collectives together.
 *
 * Threading: one thread at a time may call collectives on a communicator (the usual rule of
 * MPI and NCCL communicators). bagua_comm_abort() is the exception: any thread may call it at
 * any time, and every blocked or later call on that communicator returns BAGUA_ERR_ABORTED.
 *
 * Buffers: every buffer passed to a collective is owned by the caller, may have any
 * alignment, and is not referenced after the call returns. All calls block until the local
 * part of the operation is complete. Counts are in elements of `dtype`; a count of 0 moves no
 * data but is still a collective call (every rank makes it, and it is checked like any other).
 * In-place operation is requested by passing the same pointer as send and receive buffer (for
 * reduce_scatter/allgather/gather/scatter the in-place position is this rank's block of the
 * larger buffer, on the root for gather/scatter); any other overlap of the buffers is refused.
 *
 * Arguments: every call checks its arguments on the calling rank before anything is sent: a
 * NULL communicator, a dtype or op out of range, a root or peer outside [0, size), a NULL
 * buffer this rank uses with a non-zero count, an overlap other than in place, or a count
 * whose bytes overflow return BAGUA_ERR_INVALID_ARG with a warning naming the argument and
 * what is accepted (bagua_last_error()); the communicator stays usable.
 *
 * Agreement: every rank of a collective must pass the same kind of call, count, dtype, op and
 * root. Before moving data the ranks compare these (a signature); when they differ, the call
 * returns BAGUA_ERR_PROTOCOL on every rank, with a warning naming the first difference (for
 * example "rank 1 called allreduce with count 100, rank 0 with 64"), on every transport, and
 * the communicator stays usable. Point-to-point calls are matched by the receiver only: a
 * message of another size is BAGUA_ERR_PROTOCOL there, and poisons.
 *
 * Failures: a peer that dies makes the survivors' calls return BAGUA_ERR_REMOTE; a peer that
 * stalls makes them return BAGUA_ERR_TIMEOUT after the communicator's timeout (config
 * timeout_ms, else BAGUA_COMM_TIMEOUT_MS) without progress.
 * After any error other than BAGUA_ERR_INVALID_ARG and a collective's signature mismatch the
 * communicator is poisoned (its connections are closed so that every other rank also fails
 * promptly); destroy it and create a new one. The receive buffers of a failed call hold
 * unspecified data.
 */
#ifndef BAGUA_COMM_H
#define BAGUA_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "bagua/error.h"
#include "bagua/types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bagua_comm_s bagua_comm_t;

typedef enum {
  BAGUA_TRANSPORT_AUTO = 0, /* shm between ranks on one node, tcp across nodes */
  BAGUA_TRANSPORT_TCP = 1,
  BAGUA_TRANSPORT_SHM = 2 /* all ranks must be on one node */
} bagua_transport_kind_t;

/*
 * Creation settings. Initialise with BAGUA_COMM_CONFIG_INIT, then override fields; a field
 * left at its "unset" value (-1 / NULL) takes the BAGUA_* environment parameter, then the
 * built-in default (bagua-launch --print-params lists them). A numeric field that is set must
 * lie within the bounds of the parameter named in its comment, as the variable must, and the
 * job id (from the field or BAGUA_JOB_ID) must be 1 to 64 characters from A-Z a-z 0-9 . _ -
 * other than "." and "..", as for bagua-launch --job-id, because it names the job's etcd keys.
 * bagua_comm_create() refuses anything else with BAGUA_ERR_INVALID_ARG and a warning naming
 * the field, the value and what is accepted, before it touches the network.
 */
typedef struct {
  size_t struct_size;     /* sizeof(bagua_comm_config_t), for ABI growth */
  int rank;               /* -1: RANK */
  int size;               /* -1: WORLD_SIZE */
  const char *bootstrap;  /* NULL: BAGUA_BOOTSTRAP; "env://" or "tcp://HOST:PORT" */
  int transport;          /* -1: BAGUA_TRANSPORT; else a bagua_transport_kind_t */
  const char *job_id;     /* NULL: BAGUA_JOB_ID */
  const char *node_id;    /* NULL: BAGUA_NODE_ID, else GROUP_RANK, else the host name */
  int timeout_ms;         /* -1: BAGUA_COMM_TIMEOUT_MS */
  int connect_timeout_ms; /* -1: BAGUA_CONNECT_TIMEOUT_MS */
  int nstreams;           /* -1: BAGUA_NET_NSTREAMS */
} bagua_comm_config_t;

#define BAGUA_COMM_CONFIG_INIT                                                           \
  {                                                                                      \
    .struct_size = sizeof(bagua_comm_config_t), .rank = -1, .size = -1, .transport = -1, \
    .timeout_ms = -1, .connect_timeout_ms = -1, .nstreams = -1                           \
  }

/*
 * Creates a communicator; collective over all `size` ranks (blocks until all have joined, up
 * to the connect timeout). `cfg` may be NULL (everything from the environment). On success
 * *out is a new communicator the caller frees with bagua_comm_destroy().
 */
BAGUA_EXTERN bagua_status_t bagua_comm_create(const bagua_comm_config_t *cfg, bagua_comm_t **out);

/*
 * Splits `comm` into sub-communicators: ranks passing the same `color` form one, ordered by
 * `key` then by parent rank. A negative color returns *out = NULL (the rank joins none).
 * Collective over `comm`. The new communicator is independent of the parent's lifetime.
 */
BAGUA_EXTERN bagua_status_t bagua_comm_split(bagua_comm_t *comm, int color, int key,
                                             bagua_comm_t **out);

/*
 * Intra-node and inter-node (node leaders) communicators for hierarchical algorithms. *intra
 * always receives a communicator; *inter receives one on node leaders (local rank 0) and NULL
 * elsewhere. Collective over `comm`.
 */
BAGUA_EXTERN bagua_status_t bagua_comm_split_node(bagua_comm_t *comm, bagua_comm_t **intra,
                                                  bagua_comm_t **inter);

BAGUA_EXTERN int bagua_comm_rank(const bagua_comm_t *comm);
BAGUA_EXTERN int bagua_comm_size(const bagua_comm_t *comm);
/* Rank among ranks of the same node, and number of such ranks / of nodes. */
BAGUA_EXTERN int bagua_comm_local_rank(const bagua_comm_t *comm);
BAGUA_EXTERN int bagua_comm_local_size(const bagua_comm_t *comm);
BAGUA_EXTERN int bagua_comm_node_count(const bagua_comm_t *comm);
/* Name of the transport in use: "tcp", "shm" or "hier(shm+tcp)". */
BAGUA_EXTERN const char *bagua_comm_transport_name(const bagua_comm_t *comm);
/* Bytes this rank has written to sockets or shared memory for peers since creation. */
BAGUA_EXTERN uint64_t bagua_comm_bytes_sent(const bagua_comm_t *comm);

/* Thread-safe; makes all current and future calls on `comm` return BAGUA_ERR_ABORTED. */
BAGUA_EXTERN void bagua_comm_abort(bagua_comm_t *comm);
/* The first error that poisoned the communicator, BAGUA_OK if none. Thread-safe. */
BAGUA_EXTERN bagua_status_t bagua_comm_get_async_error(const bagua_comm_t *comm);
/* Closes connections, unmaps shared memory and frees `comm` (NULL is accepted). Not collective:
 * a rank may destroy its communicator once its own last collective has returned, while the
 * others still complete it; a peer that then waits for this rank fails with BAGUA_ERR_REMOTE.
 * Exiting the process (exit(), not _exit() or a signal) without destroying counts as a destroy
 * for this purpose. */
BAGUA_EXTERN void bagua_comm_destroy(bagua_comm_t *comm);

/* ---- collectives ---- */
BAGUA_EXTERN bagua_status_t bagua_allreduce(bagua_comm_t *comm, const void *sendbuf, void *recvbuf,
                                            size_t count, bagua_dtype_t dtype, bagua_op_t op);
/* sendbuf holds size*recvcount elements; rank r receives the reduction of block r. */
BAGUA_EXTERN bagua_status_t bagua_reduce_scatter(bagua_comm_t *comm, const void *sendbuf,
                                                 void *recvbuf, size_t recvcount,
                                                 bagua_dtype_t dtype, bagua_op_t op);
/* recvbuf holds size*sendcount elements, block r from rank r. */
BAGUA_EXTERN bagua_status_t bagua_allgather(bagua_comm_t *comm, const void *sendbuf, void *recvbuf,
                                            size_t sendcount, bagua_dtype_t dtype);
/* Both buffers hold size*count elements; block j of rank i's sendbuf lands in block i of
 * rank j's recvbuf. In-place (sendbuf == recvbuf) is supported. */
BAGUA_EXTERN bagua_status_t bagua_alltoall(bagua_comm_t *comm, const void *sendbuf, void *recvbuf,
                                           size_t count, bagua_dtype_t dtype);
/* On the root sendbuf is read; on every rank recvbuf is written (it may equal sendbuf). */
BAGUA_EXTERN bagua_status_t bagua_broadcast(bagua_comm_t *comm, const void *sendbuf, void *recvbuf,
                                            size_t count, bagua_dtype_t dtype, int root);
/* recvbuf is written on the root only (may be NULL elsewhere). */
BAGUA_EXTERN bagua_status_t bagua_reduce(bagua_comm_t *comm, const void *sendbuf, void *recvbuf,
                                         size_t count, bagua_dtype_t dtype, bagua_op_t op,
                                         int root);
/* recvbuf (size*sendcount elements) is written on the root only. */
BAGUA_EXTERN bagua_status_t bagua_gather(bagua_comm_t *comm, const void *sendbuf, void *recvbuf,
                                         size_t sendcount, bagua_dtype_t dtype, int root);
/* sendbuf (size*recvcount elements) is read on the root only. */
BAGUA_EXTERN bagua_status_t bagua_scatter(bagua_comm_t *comm, const void *sendbuf, void *recvbuf,
                                          size_t recvcount, bagua_dtype_t dtype, int root);
/* Point-to-point, matched in call order per pair of ranks. Both sides must agree on count;
 * a mismatch returns BAGUA_ERR_PROTOCOL. A rank may send to itself only through sendrecv. */
BAGUA_EXTERN bagua_status_t bagua_send(bagua_comm_t *comm, const void *buf, size_t count,
                                       bagua_dtype_t dtype, int peer);
BAGUA_EXTERN bagua_status_t bagua_recv(bagua_comm_t *comm, void *buf, size_t count,
                                       bagua_dtype_t dtype, int peer);
/* Sends to `dst` and receives from `src` concurrently (no deadlock in rings). */
BAGUA_EXTERN bagua_status_t bagua_sendrecv(bagua_comm_t *comm, const void *sendbuf,
                                           size_t sendcount, int dst, void *recvbuf,
                                           size_t recvcount, int src, bagua_dtype_t dtype);
/*
 * The exchange of a ring neighbourhood (decentralized training) in one step: sends sendbuf
 * (count elements) to both `left` and `right` and receives count elements from each, into
 * leftbuf and rightbuf, all concurrently. Both neighbours must call it with this rank as their
 * right and left neighbour respectively. With left == right (two ranks) it is one exchange
 * with that peer, and rightbuf gets a copy of leftbuf. Neither may be this rank; leftbuf and
 * rightbuf must not overlap each other or sendbuf.
 */
BAGUA_EXTERN bagua_status_t bagua_neighbor_exchange(bagua_comm_t *comm, const void *sendbuf,
                                                    size_t count, int left, void *leftbuf,
                                                    int right, void *rightbuf, bagua_dtype_t dtype);
BAGUA_EXTERN bagua_status_t bagua_barrier(bagua_comm_t *comm);

#ifdef __cplusplus
}
#endif
#endif
