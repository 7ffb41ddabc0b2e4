/*
 * Internal definition of the NCCL communicator shared by the files of comm/nccl. Not installed;
 * only compiled when CUDA and NCCL were found.
 *
 * Locking: `lock` is held around every NCCL and CUDA call made on behalf of the communicator,
 * and released while waiting, so that bagua_nccl_comm_abort() from another thread can always
 * take it, call ncclCommAbort and set `nccl` to NULL between two of the owner's polls. The
 * owner re-checks `nccl` each time it takes the lock again.
 */
#ifndef BAGUA_COMM_NCCL_INTERNAL_H
#define BAGUA_COMM_NCCL_INTERNAL_H

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <pthread.h>
#include <stdatomic.h>

#include "bagua/nccl.h"

#if NCCL_VERSION_CODE < NCCL_VERSION(2, 14, 0)
#error "the Bagua NCCL communicator needs NCCL 2.14 or newer (non-blocking communicators)"
#endif

struct bagua_nccl_comm_s {
  ncclComm_t nccl; /* NULL once aborted; guarded by lock */
  cudaStream_t stream;
  int rank, size, device;
  int timeout_ms;         /* bound on waiting for enqueued work (synchronize, finalize) */
  int connect_timeout_ms; /* bound on communicator creation */
  pthread_mutex_t lock;
  atomic_int error;            /* bagua_status_t that poisoned the communicator; BAGUA_OK if none */
  _Atomic uint64_t bytes_sent; /* see counted() in nccl_coll.c */
};

/*
 * Marks the communicator failed with `st` (the first error wins) and returns `st`. Does not
 * abort NCCL by itself; callers that know the NCCL state is unusable call
 * bagua__nccl_abort_locked().
 */
bagua_status_t bagua__nccl_poison(bagua_nccl_comm_t *c, bagua_status_t st);
/* ncclCommAbort, once; lock held. */
void bagua__nccl_abort_locked(bagua_nccl_comm_t *c);

/*
 * Start of every operation: checks that the communicator is usable, takes the lock and makes
 * the communicator's device current (the previous one is saved in *saved_dev). On failure the
 * lock is not held.
 */
bagua_status_t bagua__nccl_enter(bagua_nccl_comm_t *c, int *saved_dev);
/* End of an operation: restores the device and releases the lock; returns `st`. */
bagua_status_t bagua__nccl_leave(bagua_nccl_comm_t *c, int saved_dev, bagua_status_t st);

/*
 * Turns the result of an NCCL call into a status, lock held. ncclInProgress (a non-blocking
 * communicator still working) is polled with ncclCommGetAsyncError until it resolves, for at
 * most `timeout_ms`, releasing the lock between polls; a timeout aborts NCCL. Errors poison
 * the communicator, with NCCL's error string and last-error text in the warning.
 */
bagua_status_t bagua__nccl_settle(bagua_nccl_comm_t *c, ncclResult_t r, const char *what,
                                  int timeout_ms);
/* cudaSuccess -> BAGUA_OK; anything else poisons with BAGUA_ERR_CUDA and warns. */
bagua_status_t bagua__nccl_cuda(bagua_nccl_comm_t *c, cudaError_t e, const char *what);

/* bagua_dtype_t / bagua_op_t to NCCL's; BAGUA_ERR_INVALID_ARG (with a warning) if unknown. */
bagua_status_t bagua__nccl_dtype(bagua_dtype_t dt, ncclDataType_t *out, const char *what);
bagua_status_t bagua__nccl_op(bagua_op_t op, ncclRedOp_t *out, const char *what);

/* NCCL's text about its last failure ("" if none); `comm` may be NULL. */
static inline const char *bagua__nccl_last_error(ncclComm_t comm) {
  const char *s = ncclGetLastError(comm);
  return s ? s : "";
}

/* Monotonic clock in milliseconds. */

#endif
