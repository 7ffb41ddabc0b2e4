/*
 * Bagua-C NCCL communicator: collectives on GPU buffers, created over a CPU communicator.
 *
 * This header needs no CUDA or NCCL headers and is always installed: CUDA streams and events
 * appear as `void *` (pass a cudaStream_t / cudaEvent_t), device buffers are plain pointers.
 * The functions always exist in libbagua; in a build without CUDA and NCCL,
 * bagua_nccl_available() returns 0 and every other call returns BAGUA_ERR_NOT_SUPPORTED (or
 * does nothing), so programs need no #ifdef to link against either build.
 *
 * Execution model: a communicator owns one CUDA stream on its device (high priority,
 * non-blocking with respect to the legacy default stream). Every collective is enqueued on that
 * stream and the call returns once it is enqueued, not when it has finished: use
 * bagua_nccl_record_event() plus cudaStreamWaitEvent on a compute stream, or
 * bagua_nccl_comm_synchronize(), before reading results on another stream or the host.
 * bagua_nccl_wait_event() makes the communicator's stream wait for work queued on a compute
 * stream (for example the backward pass that produced a gradient) without blocking the host.
 *
 * Buffers: device memory (or managed memory) owned by the caller, which must keep it valid
 * until the stream has passed the operation. Counts are in elements of `dtype`; a count of 0
 * is valid. In-place operation works as in NCCL (same pointer; for reduce_scatter/allgather
 * the in-place position is this rank's block), except alltoall, which must not be in place.
 *
 * Threading: one thread at a time per communicator, like the CPU communicator;
 * bagua_nccl_comm_abort() may be called from any thread at any time.
 *
 * Failures: the underlying NCCL communicator is non-blocking, so no call here waits forever.
 * Creation gives up after BAGUA_CONNECT_TIMEOUT_MS (or the CPU communicator's connect timeout)
 * with BAGUA_ERR_TIMEOUT; bagua_nccl_comm_synchronize() after BAGUA_COMM_TIMEOUT_MS. A timeout
 * aborts the NCCL communicator, which makes kernels stuck waiting for a dead peer exit. NCCL
 * and CUDA failures return BAGUA_ERR_NCCL / BAGUA_ERR_CUDA with NCCL's or CUDA's text in the
 * warning (bagua_last_error()). After any error other than BAGUA_ERR_INVALID_ARG the
 * communicator is poisoned: later calls return the same error; destroy it and create another.
 */
#ifndef BAGUA_NCCL_H
#define BAGUA_NCCL_H

#include <stddef.h>

#include "bagua/comm.h"
#include "bagua/error.h"
#include "bagua/types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bagua_nccl_comm_s bagua_nccl_comm_t;

/* 1 when this libbagua was built with CUDA and NCCL, 0 otherwise. */
BAGUA_EXTERN int bagua_nccl_available(void);

/*
 * Creates an NCCL communicator with the ranks and size of `cpu_comm`, on CUDA device
 * `cuda_device` (-1: the CPU communicator's local rank modulo the number of visible devices).
 * Rank 0 creates the NCCL unique id and broadcasts it over `cpu_comm`, so any way the CPU
 * communicator was bootstrapped (env://, tcp://, etcd) works. Collective over `cpu_comm`, which
 * is only used during this call. On success *out is a communicator the caller frees with
 * bagua_nccl_comm_destroy(). Sets the calling thread's current CUDA device only for the
 * duration of the call.
 */
BAGUA_EXTERN bagua_status_t bagua_nccl_comm_create(bagua_comm_t *cpu_comm, int cuda_device,
                                                   bagua_nccl_comm_t **out);

BAGUA_EXTERN int bagua_nccl_comm_rank(const bagua_nccl_comm_t *comm);
BAGUA_EXTERN int bagua_nccl_comm_size(const bagua_nccl_comm_t *comm);
BAGUA_EXTERN int bagua_nccl_comm_device(const bagua_nccl_comm_t *comm);
/* The communicator's CUDA stream (a cudaStream_t), owned by the communicator. */
BAGUA_EXTERN void *bagua_nccl_comm_stream(const bagua_nccl_comm_t *comm);
/*
 * Bytes this rank has handed NCCL to send to peers since creation, counting operations that
 * were enqueued. NCCL chooses its algorithms itself, so collectives are counted as its ring
 * algorithms move data (an allreduce of B bytes on n ranks: 2(n-1)/n * B); point-to-point
 * sends count exactly. Thread-safe; 0 without NCCL.
 */
BAGUA_EXTERN uint64_t bagua_nccl_comm_bytes_sent(const bagua_nccl_comm_t *comm);

/* ---- collectives, enqueued on the communicator's stream ---- */
BAGUA_EXTERN bagua_status_t bagua_nccl_allreduce(bagua_nccl_comm_t *comm, const void *sendbuf,
                                                 void *recvbuf, size_t count, bagua_dtype_t dtype,
                                                 bagua_op_t op);
/* sendbuf holds size*recvcount elements; rank r receives the reduction of block r. */
BAGUA_EXTERN bagua_status_t bagua_nccl_reduce_scatter(bagua_nccl_comm_t *comm, const void *sendbuf,
                                                      void *recvbuf, size_t recvcount,
                                                      bagua_dtype_t dtype, bagua_op_t op);
/* recvbuf holds size*sendcount elements, block r from rank r. */
BAGUA_EXTERN bagua_status_t bagua_nccl_allgather(bagua_nccl_comm_t *comm, const void *sendbuf,
                                                 void *recvbuf, size_t sendcount,
                                                 bagua_dtype_t dtype);
/* sendbuf is read on the root only; recvbuf is written on every rank. */
BAGUA_EXTERN bagua_status_t bagua_nccl_broadcast(bagua_nccl_comm_t *comm, const void *sendbuf,
                                                 void *recvbuf, size_t count, bagua_dtype_t dtype,
                                                 int root);
/* recvbuf is written on the root only (may be NULL elsewhere). */
BAGUA_EXTERN bagua_status_t bagua_nccl_reduce(bagua_nccl_comm_t *comm, const void *sendbuf,
                                              void *recvbuf, size_t count, bagua_dtype_t dtype,
                                              bagua_op_t op, int root);
/* Both buffers hold size*count elements; block j of rank i's sendbuf lands in block i of rank
 * j's recvbuf. Grouped ncclSend/ncclRecv; sendbuf and recvbuf must not overlap. */
BAGUA_EXTERN bagua_status_t bagua_nccl_alltoall(bagua_nccl_comm_t *comm, const void *sendbuf,
                                                void *recvbuf, size_t count, bagua_dtype_t dtype);
/*
 * Point-to-point. As in NCCL, a send does not complete until the peer posts the matching
 * receive, and the two are matched in call order per pair of ranks; a rank that sends and then
 * receives while its peer does the same deadlocks on the GPU: use bagua_nccl_sendrecv() or
 * bagua_nccl_group_p2p() for exchanges. A rank may not send to itself with these two.
 */
BAGUA_EXTERN bagua_status_t bagua_nccl_send(bagua_nccl_comm_t *comm, const void *buf, size_t count,
                                            bagua_dtype_t dtype, int peer);
BAGUA_EXTERN bagua_status_t bagua_nccl_recv(bagua_nccl_comm_t *comm, void *buf, size_t count,
                                            bagua_dtype_t dtype, int peer);
/* Sends to `dst` and receives from `src` as one group (any of them may be this rank). */
BAGUA_EXTERN bagua_status_t bagua_nccl_sendrecv(bagua_nccl_comm_t *comm, const void *sendbuf,
                                                size_t sendcount, int dst, void *recvbuf,
                                                size_t recvcount, int src, bagua_dtype_t dtype);

/* One operation of bagua_nccl_group_p2p(). */
typedef struct {
  int peer;
  int is_recv;  /* 0: send `buf` to peer; 1: receive into `buf` from peer */
  void *buf;    /* device memory; only read for a send */
  size_t count; /* elements of dtype */
  bagua_dtype_t dtype;
} bagua_nccl_p2p_t;

/* Posts all `n` sends and receives as one NCCL group, so they progress together (neighbour
 * exchanges of decentralized algorithms). */
BAGUA_EXTERN bagua_status_t bagua_nccl_group_p2p(bagua_nccl_comm_t *comm,
                                                 const bagua_nccl_p2p_t *ops, int n);

/* ---- ordering with other streams ---- */
/* The communicator's stream waits for `cuda_event` (a cudaEvent_t recorded on, for example, the
 * compute stream) before running later collectives. Does not block the host. */
BAGUA_EXTERN bagua_status_t bagua_nccl_wait_event(bagua_nccl_comm_t *comm, void *cuda_event);
/* Records `cuda_event` on the communicator's stream after the collectives enqueued so far. */
BAGUA_EXTERN bagua_status_t bagua_nccl_record_event(bagua_nccl_comm_t *comm, void *cuda_event);
/* BAGUA_OK when everything enqueued so far has finished, BAGUA_ERR_IN_PROGRESS when not yet,
 * or the error that stopped it. Never blocks. */
BAGUA_EXTERN bagua_status_t bagua_nccl_comm_query(bagua_nccl_comm_t *comm);
/* Blocks until everything enqueued so far has finished, polling for asynchronous NCCL errors;
 * after BAGUA_COMM_TIMEOUT_MS it aborts the communicator and returns BAGUA_ERR_TIMEOUT. */
BAGUA_EXTERN bagua_status_t bagua_nccl_comm_synchronize(bagua_nccl_comm_t *comm);

/* ---- failure handling and teardown ---- */
/*
 * Thread-safe: aborts the NCCL communicator (ncclCommAbort, which also stops its kernels) and
 * makes every current and later call on `comm` return BAGUA_ERR_ABORTED. The stream and the
 * object stay valid until bagua_nccl_comm_destroy().
 */
BAGUA_EXTERN void bagua_nccl_comm_abort(bagua_nccl_comm_t *comm);
/* The error that poisoned the communicator (or an asynchronous NCCL error that has occurred
 * since), BAGUA_OK if none. Thread-safe. */
BAGUA_EXTERN bagua_status_t bagua_nccl_comm_get_async_error(bagua_nccl_comm_t *comm);
/*
 * Finalizes (waits for outstanding operations, up to BAGUA_COMM_TIMEOUT_MS, then aborts) and
 * frees the NCCL communicator, its stream and `comm` (NULL is accepted).
 */
BAGUA_EXTERN void bagua_nccl_comm_destroy(bagua_nccl_comm_t *comm);

#ifdef __cplusplus
}
#endif
#endif
