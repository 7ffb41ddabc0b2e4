/*
 * NCCL communicator life cycle: creation over a CPU communicator, the non-blocking polling
 * that bounds every wait, abort from any thread, completion queries and teardown.
 *
 * Why non-blocking: a blocking NCCL communicator can sit forever in ncclCommInitRank or
 * ncclCommFinalize when a peer never arrives or has died, and the only way out is another
 * thread calling ncclCommAbort. With config.blocking = 0 every NCCL call returns at once
 * (possibly ncclInProgress) and this file polls ncclCommGetAsyncError against a deadline, so
 * each call returns within a known time and the lock that makes abort safe is never held while
 * waiting.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/communicator.h"
#include "common/check.h"
#include "common/log.h"
#include "common/time.h"
#include "nccl_internal.h"
#include "nccl_settings.h"

/* Sleeps *pause_ns and doubles it up to 1 ms: quick answers stay quick, long waits stay cheap.
 * The first pauses are shorter than the millisecond bagua__sleep_ms() resolves, hence nanosleep. */
static void backoff(long *pause_ns) {
  struct timespec ts = {0, *pause_ns};
  nanosleep(&ts, NULL);
  if (*pause_ns < 1000000) *pause_ns *= 2;
}

bagua_status_t bagua__nccl_poison(bagua_nccl_comm_t *c, bagua_status_t st) {
  int expected = BAGUA_OK;
  atomic_compare_exchange_strong(&c->error, &expected, (int)st);
  return st;
}

void bagua__nccl_abort_locked(bagua_nccl_comm_t *c) {
  if (c->nccl == NULL) return;
  int saved = -1;
  if (cudaGetDevice(&saved) == cudaSuccess && saved != c->device) cudaSetDevice(c->device);
  ncclResult_t r = ncclCommAbort(c->nccl);
  if (r != ncclSuccess) BAGUA_WARN("ncclCommAbort: %s", ncclGetErrorString(r));
  c->nccl = NULL;
  if (saved >= 0 && saved != c->device) cudaSetDevice(saved);
}

/* An NCCL error: warn with everything NCCL can tell, abort so that peers fail promptly too
 * (their connections to this rank close), poison. Lock held. */
static bagua_status_t nccl_error(bagua_nccl_comm_t *c, ncclResult_t r, const char *what) {
  const char *last = bagua__nccl_last_error(c->nccl);
  BAGUA_WARN("%s failed on rank %d of %d: %s%s%s", what, c->rank, c->size, ncclGetErrorString(r),
             *last ? ": " : "", last);
  bagua__nccl_abort_locked(c);
  return bagua__nccl_poison(c, BAGUA_ERR_NCCL);
}

bagua_status_t bagua__nccl_cuda(bagua_nccl_comm_t *c, cudaError_t e, const char *what) {
  if (e == cudaSuccess) return BAGUA_OK;
  BAGUA_WARN("%s failed on rank %d of %d (device %d): %s (%s)", what, c->rank, c->size, c->device,
             cudaGetErrorString(e), cudaGetErrorName(e));
  return bagua__nccl_poison(c, BAGUA_ERR_CUDA);
}

/* After another thread aborted the communicator while this one was waiting. */
static bagua_status_t aborted_status(bagua_nccl_comm_t *c) {
  bagua_status_t st = (bagua_status_t)atomic_load(&c->error);
  return st != BAGUA_OK ? st : BAGUA_ERR_ABORTED;
}

bagua_status_t bagua__nccl_settle(bagua_nccl_comm_t *c, ncclResult_t r, const char *what,
                                  int timeout_ms) {
  int64_t deadline = bagua__deadline_in(timeout_ms);
  long pause_ns = 10000;
  while (r == ncclInProgress) {
    if (bagua__expired(deadline)) {
      BAGUA_WARN(
          "%s still in progress after %d ms on rank %d of %d: aborting the NCCL "
          "communicator (see BAGUA_CONNECT_TIMEOUT_MS / BAGUA_COMM_TIMEOUT_MS)",
          what, timeout_ms, c->rank, c->size);
      bagua__nccl_abort_locked(c);
      return bagua__nccl_poison(c, BAGUA_ERR_TIMEOUT);
    }
    pthread_mutex_unlock(&c->lock);
    backoff(&pause_ns);
    pthread_mutex_lock(&c->lock);
    if (c->nccl == NULL) return aborted_status(c);
    ncclResult_t state = ncclSuccess;
    r = ncclCommGetAsyncError(c->nccl, &state);
    if (r == ncclSuccess) r = state;
  }
  return r == ncclSuccess ? BAGUA_OK : nccl_error(c, r, what);
}

bagua_status_t bagua__nccl_enter(bagua_nccl_comm_t *c, int *saved_dev) {
  if (c == NULL) {
    BAGUA_WARN("NULL NCCL communicator");
    return BAGUA_ERR_INVALID_ARG;
  }
  bagua_status_t st = (bagua_status_t)atomic_load(&c->error);
  if (st != BAGUA_OK) return st;
  pthread_mutex_lock(&c->lock);
  if (c->nccl == NULL) {
    pthread_mutex_unlock(&c->lock);
    return aborted_status(c);
  }
  int cur = -1;
  if (cudaGetDevice(&cur) != cudaSuccess) cur = -1;
  *saved_dev = cur;
  if (cur != c->device) {
    cudaError_t e = cudaSetDevice(c->device);
    if (e != cudaSuccess) {
      pthread_mutex_unlock(&c->lock);
      return bagua__nccl_cuda(c, e, "cudaSetDevice");
    }
  }
  return BAGUA_OK;
}

bagua_status_t bagua__nccl_leave(bagua_nccl_comm_t *c, int saved_dev, bagua_status_t st) {
  if (saved_dev >= 0 && saved_dev != c->device) cudaSetDevice(saved_dev);
  pthread_mutex_unlock(&c->lock);
  return st;
}

/* ---------------------------------------------------------------------------------------- */
/* Creation and teardown                                                                    */
/* ---------------------------------------------------------------------------------------- */

int bagua_nccl_available(void) {
  return 1;
}

/* Local preparation of one rank: device, stream, and on rank 0 the NCCL unique id. */
static bagua_status_t prepare_local(bagua_comm_t *cpu, int cuda_device, bagua_nccl_comm_t *c,
                                    ncclUniqueId *id) {
  int ndev = 0;
  cudaError_t e = cudaGetDeviceCount(&ndev);
  if (e != cudaSuccess || ndev <= 0) {
    BAGUA_WARN("rank %d: no usable CUDA device (%s)", c->rank,
               e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount reports 0");
    return BAGUA_ERR_CUDA;
  }
  c->device = cuda_device >= 0 ? cuda_device : bagua_comm_local_rank(cpu) % ndev;
  if (c->device >= ndev) {
    BAGUA_WARN("rank %d: CUDA device %d requested but only %d are visible", c->rank, c->device,
               ndev);
    return BAGUA_ERR_INVALID_ARG;
  }
  e = cudaSetDevice(c->device);
  if (e != cudaSuccess) return bagua__nccl_cuda(c, e, "cudaSetDevice");
  /* The highest priority lets communication kernels start ahead of queued compute, which is
   * what overlapping gradient exchange with the backward pass needs. */
  int least = 0, greatest = 0;
  e = cudaDeviceGetStreamPriorityRange(&least, &greatest);
  if (e == cudaSuccess)
    e = cudaStreamCreateWithPriority(&c->stream, cudaStreamNonBlocking, greatest);
  if (e != cudaSuccess) return bagua__nccl_cuda(c, e, "cudaStreamCreateWithPriority");
  if (c->rank == 0) {
    ncclResult_t r = ncclGetUniqueId(id);
    if (r != ncclSuccess) {
      const char *last = bagua__nccl_last_error(NULL);
      BAGUA_WARN("ncclGetUniqueId: %s%s%s", ncclGetErrorString(r), *last ? ": " : "", last);
      return BAGUA_ERR_NCCL;
    }
  }
  return BAGUA_OK;
}

static void free_comm(bagua_nccl_comm_t *c, int lock_inited) {
  if (c->nccl) {
    ncclCommAbort(c->nccl);
    c->nccl = NULL;
  }
  if (c->stream) cudaStreamDestroy(c->stream);
  if (lock_inited) pthread_mutex_destroy(&c->lock);
  free(c);
}

bagua_status_t bagua_nccl_comm_create(bagua_comm_t *cpu_comm, int cuda_device,
                                      bagua_nccl_comm_t **out) {
  if (cpu_comm == NULL || out == NULL) {
    BAGUA_WARN("bagua_nccl_comm_create: NULL %s", cpu_comm == NULL ? "CPU communicator" : "out");
    return BAGUA_ERR_INVALID_ARG;
  }
  *out = NULL;
  int saved_dev = -1, lock_inited = 0;
  bagua_status_t st = BAGUA_OK;
  ncclUniqueId id;
  memset(&id, 0, sizeof(id));
  if (cudaGetDevice(&saved_dev) != cudaSuccess) saved_dev = -1;

  int32_t local = BAGUA_OK, worst = BAGUA_OK;
  bagua_nccl_comm_t *c = calloc(1, sizeof(*c));
  if (c == NULL) {
    BAGUA_WARN("out of memory allocating the NCCL communicator");
    local = BAGUA_ERR_NO_MEMORY;
  } else {
    c->rank = bagua_comm_rank(cpu_comm);
    c->size = bagua_comm_size(cpu_comm);
    c->device = -1;
    c->timeout_ms = cpu_comm->timeout_ms;
    c->connect_timeout_ms = cpu_comm->connect_timeout_ms;
    atomic_init(&c->error, BAGUA_OK);
    local = prepare_local(cpu_comm, cuda_device, c, &id);
  }

  /*
   * Every rank learns whether all of them are ready before anyone enters NCCL's bootstrap, so a
   * rank without a GPU makes the whole group fail at once instead of leaving the others waiting
   * in ncclCommInitRank until the connect timeout.
   */
  BAGUA_CHECK_GOTO(bagua_allreduce(cpu_comm, &local, &worst, 1, BAGUA_I32, BAGUA_MAX), st, fail);
  if (worst != BAGUA_OK) {
    if (local == BAGUA_OK)
      BAGUA_WARN(
          "rank %d: another rank could not prepare its GPU (%s); not creating the NCCL "
          "communicator",
          bagua_comm_rank(cpu_comm), bagua_err_name((bagua_status_t)worst));
    st = (bagua_status_t)worst;
    goto fail;
  }
  BAGUA_CHECK_GOTO(bagua_broadcast(cpu_comm, &id, &id, sizeof(id), BAGUA_U8, 0), st, fail);

  if (pthread_mutex_init(&c->lock, NULL) != 0) {
    BAGUA_WARN("pthread_mutex_init failed");
    st = BAGUA_ERR_SYSTEM;
    goto fail;
  }
  lock_inited = 1;
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  pthread_mutex_lock(&c->lock);
  ncclResult_t r = ncclCommInitRankConfig(&c->nccl, c->size, id, c->rank, &cfg);
  if (r != ncclSuccess && r != ncclInProgress && c->nccl == NULL) {
    const char *last = bagua__nccl_last_error(NULL);
    BAGUA_WARN("ncclCommInitRankConfig failed on rank %d of %d: %s%s%s", c->rank, c->size,
               ncclGetErrorString(r), *last ? ": " : "", last);
    st = BAGUA_ERR_NCCL;
  } else {
    st = bagua__nccl_settle(c, r, "ncclCommInitRankConfig", c->connect_timeout_ms);
  }
  pthread_mutex_unlock(&c->lock);
  if (st != BAGUA_OK) goto fail;
  BAGUA_INFO(BAGUA_SUBSYS_INIT, "NCCL communicator: rank %d of %d on CUDA device %d", c->rank,
             c->size, c->device);
  if (saved_dev >= 0) cudaSetDevice(saved_dev);
  *out = c;
  return BAGUA_OK;

fail:
  if (c) free_comm(c, lock_inited);
  if (saved_dev >= 0) cudaSetDevice(saved_dev);
  return st != BAGUA_OK ? st : (bagua_status_t)local;
}

void bagua_nccl_comm_destroy(bagua_nccl_comm_t *c) {
  if (c == NULL) return;
  pthread_mutex_lock(&c->lock);
  int saved = -1;
  if (cudaGetDevice(&saved) == cudaSuccess && saved != c->device) cudaSetDevice(c->device);
  if (c->nccl != NULL) {
    if (atomic_load(&c->error) == BAGUA_OK) {
      /* Finalize flushes what is still queued; a dead peer would make it wait forever, hence
       * the same bound as any other wait, after which settle() aborts. */
      bagua_status_t st =
          bagua__nccl_settle(c, ncclCommFinalize(c->nccl), "ncclCommFinalize", c->timeout_ms);
      if (st == BAGUA_OK && c->nccl != NULL) {
        ncclCommDestroy(c->nccl);
        c->nccl = NULL;
      }
    }
    bagua__nccl_abort_locked(c);
  }
  pthread_mutex_unlock(&c->lock);
  if (c->stream) cudaStreamDestroy(c->stream);
  if (saved >= 0 && saved != c->device) cudaSetDevice(saved);
  pthread_mutex_destroy(&c->lock);
  free(c);
}

void bagua_nccl_comm_abort(bagua_nccl_comm_t *c) {
  if (c == NULL) return;
  bagua__nccl_poison(c, BAGUA_ERR_ABORTED);
  pthread_mutex_lock(&c->lock);
  bagua__nccl_abort_locked(c);
  pthread_mutex_unlock(&c->lock);
}

/* ---------------------------------------------------------------------------------------- */
/* Accessors and completion                                                                 */
/* ---------------------------------------------------------------------------------------- */

int bagua_nccl_comm_rank(const bagua_nccl_comm_t *c) {
  return c ? c->rank : -1;
}
int bagua_nccl_comm_size(const bagua_nccl_comm_t *c) {
  return c ? c->size : -1;
}
int bagua_nccl_comm_device(const bagua_nccl_comm_t *c) {
  return c ? c->device : -1;
}
int bagua__nccl_comm_timeout_ms(const bagua_nccl_comm_t *c) {
  return c ? c->timeout_ms : 0;
}
void *bagua_nccl_comm_stream(const bagua_nccl_comm_t *c) {
  return c ? (void *)c->stream : NULL;
}
uint64_t bagua_nccl_comm_bytes_sent(const bagua_nccl_comm_t *c) {
  return c ? atomic_load_explicit(&((bagua_nccl_comm_t *)c)->bytes_sent, memory_order_relaxed) : 0;
}

/* One look at the stream and at NCCL's asynchronous state; lock held. */
static bagua_status_t poll_once(bagua_nccl_comm_t *c) {
  cudaError_t e = cudaStreamQuery(c->stream);
  if (e == cudaSuccess) return BAGUA_OK;
  if (e != cudaErrorNotReady) return bagua__nccl_cuda(c, e, "cudaStreamQuery");
  ncclResult_t state = ncclSuccess, r = ncclCommGetAsyncError(c->nccl, &state);
  if (r == ncclSuccess) r = state;
  if (r != ncclSuccess && r != ncclInProgress) return nccl_error(c, r, "NCCL (asynchronous error)");
  return BAGUA_ERR_IN_PROGRESS;
}

bagua_status_t bagua_nccl_comm_query(bagua_nccl_comm_t *c) {
  int dev;
  BAGUA_CHECK(bagua__nccl_enter(c, &dev));
  return bagua__nccl_leave(c, dev, poll_once(c));
}

bagua_status_t bagua_nccl_comm_synchronize(bagua_nccl_comm_t *c) {
  int dev;
  BAGUA_CHECK(bagua__nccl_enter(c, &dev));
  int64_t deadline = bagua__deadline_in(c->timeout_ms);
  long pause_ns = 10000;
  bagua_status_t st;
  for (;;) {
    st = poll_once(c);
    if (st != BAGUA_ERR_IN_PROGRESS) break;
    if (bagua__expired(deadline)) {
      BAGUA_WARN(
          "NCCL communicator (rank %d of %d): queued work not finished after %d ms, "
          "aborting it (see BAGUA_COMM_TIMEOUT_MS)",
          c->rank, c->size, c->timeout_ms);
      bagua__nccl_abort_locked(c);
      st = bagua__nccl_poison(c, BAGUA_ERR_TIMEOUT);
      break;
    }
    pthread_mutex_unlock(&c->lock);
    backoff(&pause_ns);
    pthread_mutex_lock(&c->lock);
    if (c->nccl == NULL) {
      st = aborted_status(c);
      break;
    }
  }
  return bagua__nccl_leave(c, dev, st);
}

bagua_status_t bagua_nccl_comm_get_async_error(bagua_nccl_comm_t *c) {
  if (c == NULL) return BAGUA_ERR_INVALID_ARG;
  pthread_mutex_lock(&c->lock);
  if (atomic_load(&c->error) == BAGUA_OK && c->nccl != NULL) {
    ncclResult_t state = ncclSuccess, r = ncclCommGetAsyncError(c->nccl, &state);
    if (r == ncclSuccess) r = state;
    if (r != ncclSuccess && r != ncclInProgress) nccl_error(c, r, "NCCL (asynchronous error)");
  }
  pthread_mutex_unlock(&c->lock);
  return (bagua_status_t)atomic_load(&c->error);
}
