/*
 * Where the data-parallel layer's flat buffers live and how work on them runs: the device
 * operations of ddp/. Every algorithm, the optimizer and the context itself touch the
 * flat parameters, gradients, optimizer state and scratch buffers only through this table,
 * so one implementation of each algorithm serves host memory (dev_cpu.c: plain calls into
 * kernels/ and the CPU communicators) and GPU memory (dev_cuda.c: CUDA kernels and NCCL).
 * That is also why the CPU tests exercise the same op sequence the GPU runs.
 *
 * Lanes. Work is issued on one of three lanes, each a strictly ordered sequence:
 *   COMPUTE  the training thread (on CUDA: the caller's compute stream);
 *   COMM     the communication thread (on CUDA: a stream of the library's own);
 *   ASYNC    the async algorithm's averaging thread (on CUDA: another own stream).
 * An operation issued on a lane runs after everything issued on that lane before it, and a
 * collective on any communicator counts as issued on the lane named in its call (on CUDA it
 * executes on the NCCL communicator's stream, bracketed by events in and out of the lane).
 * Across lanes nothing is ordered unless one of these says so:
 *   order(from, to)   later work on `to` starts after the work issued on `from` so far;
 *   sync(lane)        the calling thread waits for the lane's work (bounded: an error of any
 *                     communicator, bagua_ddp_abort() or BAGUA_COMM_TIMEOUT_MS ends it);
 *   job_mark/job_wait the training thread marks job slot k on COMPUTE when it submits the
 *                     job; the communication thread makes COMM wait for that mark before it
 *                     issues the job's work (a bucket's communication waits for the
 *                     gradients it carries, a weight exchange for the update before it).
 * On the CPU every operation has finished when its call returns, so all of these are no-ops.
 *
 * Memory. alloc returns zeroed, 64-byte aligned storage of the device (free with the same
 * table's free); copy and zero work within it; to_host/from_host move data between it and
 * host memory and wait for that transfer. Pointers registered by the caller belong to the same
 * device as the flat buffers.
 *
 * Every operation returns BAGUA_OK or an error (a CUDA launch failure, a communicator error);
 * an error of one enqueued on a GPU may instead surface at the next sync.
 */
#ifndef BAGUA_COMM_DDP_DEV_H
#define BAGUA_COMM_DDP_DEV_H

#include <stddef.h>
#include <stdint.h>

#include "bagua/comm.h"
#include "bagua/ddp.h"
#include "kernels/kernels.h"

typedef enum { BAGUA__LANE_COMPUTE = 0, BAGUA__LANE_COMM, BAGUA__LANE_ASYNC } bagua__lane_t;
#define BAGUA__NLANES 3

typedef struct {
  const char *name; /* "cpu" or "cuda" */

  /* ---- lifecycle ---- */
  /* After bagua__ddp_comms_open() split the CPU communicators: the device's own resources and
   * its communicators over each of d->comm, d->intra, d->inter and d->async_comm that exists.
   * Collective over d->comm. close() frees what open() made (NULL-safe, training thread);
   * abort() may run on any thread and makes work in flight end with BAGUA_ERR_ABORTED. */
  bagua_status_t (*open)(bagua_ddp_t *d);
  void (*abort)(bagua_ddp_t *d);
  void (*close)(bagua_ddp_t *d);
  /* First call of a thread the context starts (the communication and averaging threads). */
  void (*thread_init)(bagua_ddp_t *d);
  /* bagua__ddp_sched_start()/stop(): per-slot marks for `slots` job slots. */
  bagua_status_t (*jobs_init)(bagua_ddp_t *d, size_t slots);
  void (*jobs_fini)(bagua_ddp_t *d);

  /* ---- memory ---- */
  void *(*alloc)(bagua_ddp_t *d, size_t bytes); /* NULL when out of memory */
  void (*free)(bagua_ddp_t *d, void *p);
  bagua_status_t (*copy)(bagua_ddp_t *d, bagua__lane_t l, void *dst, const void *src, size_t bytes);
  bagua_status_t (*zero)(bagua_ddp_t *d, bagua__lane_t l, void *dst, size_t bytes);
  bagua_status_t (*to_host)(bagua_ddp_t *d, bagua__lane_t l, void *host, const void *src,
                            size_t bytes);
  bagua_status_t (*from_host)(bagua_ddp_t *d, bagua__lane_t l, void *dst, const void *host,
                              size_t bytes);
  /* Whether `p` is memory this device can work on (a registered pointer is checked). */
  int (*owns)(bagua_ddp_t *d, const void *p);

  /* ---- f32 kernels, as in kernels/kernels.h ---- */
  bagua_status_t (*div)(bagua_ddp_t *d, bagua__lane_t l, float *buf, size_t n, int k);
  bagua_status_t (*add)(bagua_ddp_t *d, bagua__lane_t l, float *dst, const float *src, size_t n);
  bagua_status_t (*axpy)(bagua_ddp_t *d, bagua__lane_t l, float a, const float *x, float *y,
                         size_t n);
  bagua_status_t (*scale)(bagua_ddp_t *d, bagua__lane_t l, float a, float *x, size_t n);
  bagua_status_t (*compress)(bagua_ddp_t *d, bagua__lane_t l, const float *in, size_t chunk,
                             size_t k, uint8_t *out);
  bagua_status_t (*decompress)(bagua_ddp_t *d, bagua__lane_t l, const uint8_t *in, size_t chunk,
                               size_t k, float *out);
  bagua_status_t (*decompress_add)(bagua_ddp_t *d, bagua__lane_t l, const uint8_t *in, size_t chunk,
                                   size_t k, float *acc);
  bagua_status_t (*sgd)(bagua_ddp_t *d, bagua__lane_t l, float *p, const float *g, float *m,
                        size_t n, const bagua__sgd_params_t *hp, int first_step);
  bagua_status_t (*adam)(bagua_ddp_t *d, bagua__lane_t l, float *p, const float *g, float *m,
                         float *v, size_t n, const bagua__adam_params_t *hp, int64_t step);
  /* QAdam after warm-up (bagua__ddp_qadam_frozen_step's arithmetic). */
  bagua_status_t (*qadam_frozen)(bagua_ddp_t *d, bagua__lane_t l, float *p, const float *m,
                                 const float *v, size_t n, double lr, double beta1, double beta2,
                                 double eps, int64_t step, int64_t v_step);
  /* m = beta1 m + (1 - beta1)(g + wd p), all in f32. */
  bagua_status_t (*qadam_momentum)(bagua_ddp_t *d, bagua__lane_t l, float *m, const float *g,
                                   const float *p, size_t n, float beta1, float one_minus_beta1,
                                   float wd);
  /* diff = x + s/3 - (5/3) w (low-precision decentralized). */
  bagua_status_t (*lpdec_diff)(bagua_ddp_t *d, bagua__lane_t l, float *diff, const float *x,
                               const float *s, const float *w, size_t n);
  /* PowerSGD's low-rank products and Gram-Schmidt (bagua__lowrank_* in kernels/kernels.h):
   * P = M Q, Qt = (M^T P)^T, M = P Q^T (err = M - P Q^T first when err is set) and the
   * orthonormalisation of P's r columns. */
  bagua_status_t (*lowrank_mq)(bagua_ddp_t *d, bagua__lane_t l, const float *m, size_t rows,
                               size_t cols, const float *qt, size_t r, float *p);
  bagua_status_t (*lowrank_mtp)(bagua_ddp_t *d, bagua__lane_t l, const float *m, size_t rows,
                                size_t cols, const float *p, size_t r, float *qt);
  bagua_status_t (*lowrank_pqt)(bagua_ddp_t *d, bagua__lane_t l, const float *p, const float *qt,
                                size_t rows, size_t cols, size_t r, float *m, float *err);
  bagua_status_t (*lowrank_orthonormalise)(bagua_ddp_t *d, bagua__lane_t l, float *p, size_t rows,
                                           size_t r, float eps);

  /* ---- collectives on one of the context's communicators (d->comm, intra, inter,
   * async_comm), with bagua_allreduce() etc.'s arguments; buffers are device memory ---- */
  bagua_status_t (*allreduce)(bagua_ddp_t *d, bagua__lane_t l, bagua_comm_t *c, const void *s,
                              void *r, size_t n, bagua_dtype_t dt, bagua_op_t op);
  bagua_status_t (*reduce)(bagua_ddp_t *d, bagua__lane_t l, bagua_comm_t *c, const void *s, void *r,
                           size_t n, bagua_dtype_t dt, bagua_op_t op, int root);
  bagua_status_t (*broadcast)(bagua_ddp_t *d, bagua__lane_t l, bagua_comm_t *c, const void *s,
                              void *r, size_t n, bagua_dtype_t dt, int root);
  /* Not in place: s and r must not overlap. */
  bagua_status_t (*alltoall)(bagua_ddp_t *d, bagua__lane_t l, bagua_comm_t *c, const void *s,
                             void *r, size_t n, bagua_dtype_t dt);
  /* In place when s is r + rank * n elements. */
  bagua_status_t (*allgather)(bagua_ddp_t *d, bagua__lane_t l, bagua_comm_t *c, const void *s,
                              void *r, size_t n, bagua_dtype_t dt);
  bagua_status_t (*sendrecv)(bagua_ddp_t *d, bagua__lane_t l, bagua_comm_t *c, const void *s,
                             size_t sn, int dst, void *r, size_t rn, int src, bagua_dtype_t dt);
  /* bagua_neighbor_exchange(): s to both neighbours, theirs into rl and rr, concurrently.
   * Callers pass left != right (with two ranks they use sendrecv). */
  bagua_status_t (*neighbors)(bagua_ddp_t *d, bagua__lane_t l, bagua_comm_t *c, const void *s,
                              size_t n, int left, void *rl, int right, void *rr, bagua_dtype_t dt);

  /* ---- ordering ---- */
  bagua_status_t (*order)(bagua_ddp_t *d, bagua__lane_t from, bagua__lane_t to);
  bagua_status_t (*sync)(bagua_ddp_t *d, bagua__lane_t l);
  bagua_status_t (*job_mark)(bagua_ddp_t *d, size_t slot);
  bagua_status_t (*job_wait)(bagua_ddp_t *d, size_t slot);

  /* ---- accounting ---- */
  /* Bytes sent by communicators of the device's own (NCCL), beyond what the CPU communicators
   * count; NULL where the CPU communicators carry all traffic. Any thread. */
  uint64_t (*bytes_sent)(const bagua_ddp_t *d);
} bagua__ddp_dev_t;

extern const bagua__ddp_dev_t bagua__ddp_dev_cpu;
/* The CUDA device, or NULL in a build without CUDA and NCCL (dev_cuda.c / dev_cuda_none.c). */
const bagua__ddp_dev_t *bagua__ddp_dev_cuda(void);

#endif
