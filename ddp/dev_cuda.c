/*
 * The GPU device of the data-parallel layer (dev.h): flat buffers in CUDA device memory,
 * kernels from kernels/cuda, collectives over NCCL communicators (include/bagua/nccl.h) that
 * mirror the context's CPU communicators. Built only with CUDA and NCCL.
 *
 * Streams. The COMPUTE lane is the caller's stream (config.cuda_stream; NULL is the legacy
 * default stream); COMM and ASYNC are streams of this device, non-blocking and of the highest
 * priority, so that communication is not queued behind the backward kernels. Each NCCL
 * communicator owns one more stream; a collective issued on lane L is bracketed by events: the
 * communicator's stream waits for L's work so far, and L waits for the collective.
 *
 * Waiting. Nothing here waits on the GPU without a bound: sync() polls the stream, the NCCL
 * communicators' asynchronous errors and the context's abort flag, and after
 * BAGUA_COMM_TIMEOUT_MS aborts the NCCL communicators (which makes their kernels exit) and
 * returns BAGUA_ERR_TIMEOUT. After an error it still waits, for a further bounded time, for
 * the stream to drain, so that the buffers are not freed under running kernels.
 */
#include <cuda_runtime_api.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bagua/nccl.h"
#include "common/check.h"
#include "common/log.h"
#include "common/params.h"
#include "common/time.h"
#include "ddp_internal.h"
#include "dev.h"
#include "kernels/cuda/cuda_kernels.h"

/* The CPU communicators an NCCL one may mirror, in creation order. */
enum { NC_COMM = 0, NC_INTRA, NC_INTER, NC_ASYNC, NC_COUNT };

typedef struct {
  int device;
  int timeout_ms;
  cudaStream_t lane[BAGUA__NLANES]; /* [COMPUTE] is the caller's, the others are owned */
  int own_lane[BAGUA__NLANES];
  cudaEvent_t order_ev[BAGUA__NLANES][BAGUA__NLANES];
  bagua_comm_t *cpu[NC_COUNT];
  bagua_nccl_comm_t *nc[NC_COUNT];
  cudaEvent_t in_ev[NC_COUNT], out_ev[NC_COUNT];
  cudaEvent_t *job_ev;
  size_t njobs;
  atomic_int aborted;
  atomic_int wedged; /* a lane did not drain: never free device memory again */
} state_t;

static state_t *S(bagua_ddp_t *d) {
  return d->dev_state;
}

static bagua_status_t cu(cudaError_t e, const char *what) {
  if (e == cudaSuccess) return BAGUA_OK;
  (void)cudaGetLastError(); /* a non-sticky error must not resurface at an unrelated call */
  BAGUA_WARN("ddp (cuda): %s failed: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
  return BAGUA_ERR_CUDA;
}

/* ------------------------------------------------------------------------------------------ */
/* lifecycle                                                                                  */
/* ------------------------------------------------------------------------------------------ */

static void abort_state(state_t *s) {
  atomic_store(&s->aborted, 1);
  for (int i = 0; i < NC_COUNT; i++)
    if (s->nc[i]) bagua_nccl_comm_abort(s->nc[i]);
}

/* Called with d->comm_mu held (bagua__ddp_comms_abort), so the state cannot be detached and
 * freed underneath. */
static void abort_(bagua_ddp_t *d) {
  state_t *s = S(d);
  if (s) abort_state(s);
}

static void free_state(state_t *s) {
  /* Finalizing waits (bounded) for the communicators' outstanding work; destroying a stream
   * or an event with work pending is legal, CUDA releases it once the work is done. */
  for (int i = NC_COUNT - 1; i >= 0; i--) bagua_nccl_comm_destroy(s->nc[i]);
  for (int i = 0; i < NC_COUNT; i++) {
    if (s->in_ev[i]) cudaEventDestroy(s->in_ev[i]);
    if (s->out_ev[i]) cudaEventDestroy(s->out_ev[i]);
  }
  for (int a = 0; a < BAGUA__NLANES; a++) {
    for (int b = 0; b < BAGUA__NLANES; b++)
      if (s->order_ev[a][b]) cudaEventDestroy(s->order_ev[a][b]);
    if (s->own_lane[a]) cudaStreamDestroy(s->lane[a]);
  }
  free(s);
}

/* The state is detached under d->comm_mu, so an abort from another thread (bagua_ddp_abort,
 * the elastic departure timer) sees either the whole state or none. */
static void close_(bagua_ddp_t *d) {
  pthread_mutex_lock(&d->comm_mu);
  state_t *s = d->dev_state;
  d->dev_state = NULL;
  pthread_mutex_unlock(&d->comm_mu);
  if (s) free_state(s);
}

static bagua_status_t event(cudaEvent_t *ev) {
  return cu(cudaEventCreateWithFlags(ev, cudaEventDisableTiming), "cudaEventCreateWithFlags");
}

/* The caller's compute stream must belong to the chosen device, and must be one stream for
 * every thread (cudaStreamPerThread names a different stream on each thread, so events
 * recorded on it by the averaging thread would order nothing). */
static bagua_status_t check_stream(bagua_ddp_t *d, int device) {
  cudaStream_t cs = (cudaStream_t)d->s.cuda_stream;
  if (cs == cudaStreamPerThread) {
    BAGUA_WARN(
        "bagua_ddp_create: config.cuda_stream = cudaStreamPerThread is not accepted; "
        "accepted: NULL (the legacy default stream) or a stream created on device %d",
        device);
    return BAGUA_ERR_INVALID_ARG;
  }
  if (!cs || cs == cudaStreamLegacy) return BAGUA_OK;
  int sd = -1;
  BAGUA_CHECK(cu(cudaStreamGetDevice(cs, &sd), "cudaStreamGetDevice(config.cuda_stream)"));
  if (sd != device) {
    BAGUA_WARN(
        "bagua_ddp_create: config.cuda_stream belongs to device %d, but the context uses "
        "device %d; accepted: a stream of device %d (or set config.cuda_device)",
        sd, device, device);
    return BAGUA_ERR_INVALID_ARG;
  }
  return BAGUA_OK;
}

static bagua_status_t open_(bagua_ddp_t *d) {
  bagua_status_t st;
  state_t *s = calloc(1, sizeof(*s));
  if (!s) return BAGUA_ERR_NO_MEMORY;
  s->timeout_ms = (int)bagua__param_int(BAGUA_P_COMM_TIMEOUT_MS);
  s->cpu[NC_COMM] = d->comm;
  s->cpu[NC_INTRA] = d->intra;
  s->cpu[NC_INTER] = d->inter;
  s->cpu[NC_ASYNC] = d->async_comm;
  /* The first creation also settles, on every rank at once, whether each has a usable device:
   * bagua_nccl_comm_create agrees on the outcome over the CPU communicator before NCCL starts. */
  BAGUA_CHECK_GOTO(bagua_nccl_comm_create(d->comm, d->s.cuda_device, &s->nc[NC_COMM]), st, fail);
  s->device = bagua_nccl_comm_device(s->nc[NC_COMM]);
  /* The training thread issues the COMPUTE lane's work, so it works on the chosen device. */
  BAGUA_CHECK_GOTO(cu(cudaSetDevice(s->device), "cudaSetDevice"), st, fail);
  BAGUA_CHECK_GOTO(check_stream(d, s->device), st, fail);
  for (int i = NC_INTRA; i < NC_COUNT; i++)
    if (s->cpu[i])
      BAGUA_CHECK_GOTO(bagua_nccl_comm_create(s->cpu[i], s->device, &s->nc[i]), st, fail);
  int lo = 0, hi = 0;
  BAGUA_CHECK_GOTO(
      cu(cudaDeviceGetStreamPriorityRange(&lo, &hi), "cudaDeviceGetStreamPriorityRange"), st, fail);
  s->lane[BAGUA__LANE_COMPUTE] = (cudaStream_t)d->s.cuda_stream;
  for (int l = BAGUA__LANE_COMM; l < BAGUA__NLANES; l++) {
    BAGUA_CHECK_GOTO(cu(cudaStreamCreateWithPriority(&s->lane[l], cudaStreamNonBlocking, hi),
                        "cudaStreamCreateWithPriority"),
                     st, fail);
    s->own_lane[l] = 1;
  }
  for (int a = 0; a < BAGUA__NLANES; a++)
    for (int b = 0; b < BAGUA__NLANES; b++)
      if (a != b) BAGUA_CHECK_GOTO(event(&s->order_ev[a][b]), st, fail);
  for (int i = 0; i < NC_COUNT; i++) {
    if (!s->nc[i]) continue;
    BAGUA_CHECK_GOTO(event(&s->in_ev[i]), st, fail);
    BAGUA_CHECK_GOTO(event(&s->out_ev[i]), st, fail);
  }
  pthread_mutex_lock(&d->comm_mu);
  d->dev_state = s;
  pthread_mutex_unlock(&d->comm_mu);
  BAGUA_INFO(BAGUA_SUBSYS_COMM, "ddp: cuda device %d, NCCL communicators ready", s->device);
  return BAGUA_OK;
fail:
  /* Peers that got further fail at their first collective (NCCL aborts on destroy here). */
  abort_state(s);
  free_state(s);
  return st;
}

static void thread_init(bagua_ddp_t *d) {
  state_t *s = S(d);
  /* A new thread starts on device 0; this one issues work for the context's device. */
  if (s) (void)cu(cudaSetDevice(s->device), "cudaSetDevice");
}

static void jobs_fini(bagua_ddp_t *d) {
  state_t *s = S(d);
  if (!s || !s->job_ev) return;
  for (size_t i = 0; i < s->njobs; i++)
    if (s->job_ev[i]) cudaEventDestroy(s->job_ev[i]);
  free(s->job_ev);
  s->job_ev = NULL;
  s->njobs = 0;
}

static bagua_status_t jobs_init(bagua_ddp_t *d, size_t slots) {
  state_t *s = S(d);
  s->job_ev = calloc(slots, sizeof(*s->job_ev));
  if (!s->job_ev) return BAGUA_ERR_NO_MEMORY;
  s->njobs = slots;
  for (size_t i = 0; i < slots; i++) {
    bagua_status_t st = event(&s->job_ev[i]);
    if (st != BAGUA_OK) {
      jobs_fini(d);
      return st;
    }
  }
  return BAGUA_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* ordering and waiting                                                                       */
/* ------------------------------------------------------------------------------------------ */

static bagua_status_t order(bagua_ddp_t *d, bagua__lane_t from, bagua__lane_t to) {
  state_t *s = S(d);
  if (from == to) return BAGUA_OK;
  cudaEvent_t ev = s->order_ev[from][to];
  BAGUA_CHECK(cu(cudaEventRecord(ev, s->lane[from]), "cudaEventRecord"));
  return cu(cudaStreamWaitEvent(s->lane[to], ev, 0), "cudaStreamWaitEvent");
}

static bagua_status_t job_mark(bagua_ddp_t *d, size_t slot) {
  state_t *s = S(d);
  return cu(cudaEventRecord(s->job_ev[slot], s->lane[BAGUA__LANE_COMPUTE]), "cudaEventRecord");
}

static bagua_status_t job_wait(bagua_ddp_t *d, size_t slot) {
  state_t *s = S(d);
  return cu(cudaStreamWaitEvent(s->lane[BAGUA__LANE_COMM], s->job_ev[slot], 0),
            "cudaStreamWaitEvent");
}

/* The first error any NCCL communicator of the context has met, or BAGUA_OK. */
static bagua_status_t nccl_error(state_t *s) {
  for (int i = 0; i < NC_COUNT; i++) {
    if (!s->nc[i]) continue;
    bagua_status_t st = bagua_nccl_comm_get_async_error(s->nc[i]);
    if (st != BAGUA_OK) return st;
  }
  return BAGUA_OK;
}

/*
 * Polling back-off: the first polls come quickly (a step's communication often ends within
 * microseconds of the host starting to wait), later ones up to 1 ms apart, so that a long wait
 * neither burns a core nor keeps taking the NCCL communicators' locks. The pauses start below
 * the millisecond that bagua__sleep_ms() resolves, hence nanosleep.
 */
static void pause_for(double *us) {
  struct timespec ts = {0, (long)(*us * 1000)};
  nanosleep(&ts, NULL);
  if (*us < 1000) *us *= 2;
}

static const char *lane_name(bagua__lane_t l) {
  return l == BAGUA__LANE_COMPUTE ? "compute" : l == BAGUA__LANE_COMM ? "comm" : "async";
}

/*
 * Waits until lane l is idle, for at most the timeout, without looking at the communicators:
 * used after an abort (to keep buffers alive while kernels exit) and around host transfers,
 * which an aborted communicator must not fail (the elastic rebuild snapshots the weights after
 * aborting). A lane that does not drain marks the state wedged: its memory is then leaked
 * rather than freed under running kernels.
 */
static bagua_status_t drain(state_t *s, bagua__lane_t l) {
  int64_t deadline = bagua__deadline_in(s->timeout_ms);
  double us = 5;
  for (;;) {
    cudaError_t e = cudaStreamQuery(s->lane[l]);
    if (e == cudaSuccess) return BAGUA_OK;
    if (e != cudaErrorNotReady) return cu(e, "a kernel or copy of the data-parallel layer");
    if (bagua__expired(deadline)) {
      BAGUA_WARN("ddp (cuda): the %s lane did not drain within %d ms; its buffers are leaked",
                 lane_name(l), s->timeout_ms);
      atomic_store(&s->wedged, 1);
      return BAGUA_ERR_TIMEOUT;
    }
    pause_for(&us);
  }
}

static bagua_status_t sync_(bagua_ddp_t *d, bagua__lane_t l) {
  state_t *s = S(d);
  if (!s) return BAGUA_OK;
  int64_t deadline = bagua__deadline_in(s->timeout_ms), next_check = bagua__now_ns();
  double us = 5;
  for (;;) {
    cudaError_t e = cudaStreamQuery(s->lane[l]);
    if (e == cudaSuccess) break;
    bagua_status_t st = BAGUA_OK;
    if (e != cudaErrorNotReady) {
      st = cu(e, "a kernel or copy of the data-parallel layer");
    } else if (bagua__now_ns() >= next_check) {
      /* The communicators' error state is behind their locks; look at it once a millisecond. */
      next_check = bagua__now_ns() + 1000000;
      st = nccl_error(s);
      if (st == BAGUA_OK && (atomic_load(&s->aborted) || atomic_load(&d->aborted)))
        st = BAGUA_ERR_ABORTED;
      if (st == BAGUA_OK && bagua__expired(deadline)) {
        BAGUA_WARN(
            "ddp (cuda): work on the %s lane did not finish within %d ms "
            "(BAGUA_COMM_TIMEOUT_MS); aborting the NCCL communicators",
            lane_name(l), s->timeout_ms);
        st = BAGUA_ERR_TIMEOUT;
      }
    }
    if (st != BAGUA_OK) {
      /* Aborting NCCL makes kernels waiting for a peer exit, so the lane drains. */
      abort_state(s);
      (void)drain(s, l);
      return st;
    }
    pause_for(&us);
  }
  return nccl_error(s);
}

/* ------------------------------------------------------------------------------------------ */
/* memory                                                                                     */
/* ------------------------------------------------------------------------------------------ */

static void *alloc(bagua_ddp_t *d, size_t bytes) {
  state_t *s = S(d);
  void *p = NULL;
  size_t n = bytes ? bytes : 64;
  if (cu(cudaMalloc(&p, n), "cudaMalloc") != BAGUA_OK) return NULL;
  /* Zeroed on the compute lane: every use by another lane is ordered after the compute lane's
   * work at that time (a job's mark, an order()), so it sees the zeros. */
  if (cu(cudaMemsetAsync(p, 0, n, s->lane[BAGUA__LANE_COMPUTE]), "cudaMemsetAsync") != BAGUA_OK) {
    cudaFree(p);
    return NULL;
  }
  return p;
}

static void free_(bagua_ddp_t *d, void *p) {
  state_t *s = S(d);
  /* cudaFree waits for the whole device, without a bound, and kernels of a wedged lane may
   * still use the buffer: leak it instead (drain() said so). */
  if (s && atomic_load(&s->wedged)) return;
  (void)cu(cudaFree(p), "cudaFree");
}

static bagua_status_t copy(bagua_ddp_t *d, bagua__lane_t l, void *dst, const void *src,
                           size_t bytes) {
  if (!bytes || dst == src) return BAGUA_OK;
  return cu(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, S(d)->lane[l]), "cudaMemcpyAsync");
}

static bagua_status_t zero(bagua_ddp_t *d, bagua__lane_t l, void *dst, size_t bytes) {
  if (!bytes) return BAGUA_OK;
  return cu(cudaMemsetAsync(dst, 0, bytes, S(d)->lane[l]), "cudaMemsetAsync");
}

static bagua_status_t transfer(bagua_ddp_t *d, bagua__lane_t l, void *dst, const void *src,
                               size_t bytes) {
  if (!bytes) return BAGUA_OK;
  /* A copy to or from pageable host memory blocks the calling thread until the lane reaches
   * it, without a bound; waiting for the lane first keeps that wait bounded. The waits do not
   * look at the communicators: the elastic rebuild snapshots after aborting them. */
  state_t *s = S(d);
  BAGUA_CHECK(drain(s, l));
  BAGUA_CHECK(
      cu(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s->lane[l]), "cudaMemcpyAsync"));
  return drain(s, l);
}

static int owns(bagua_ddp_t *d, const void *p) {
  struct cudaPointerAttributes a;
  if (!p || cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  if (a.type == cudaMemoryTypeManaged) return 1;
  return a.type == cudaMemoryTypeDevice && a.device == S(d)->device;
}

/* ------------------------------------------------------------------------------------------ */
/* kernels                                                                                    */
/* ------------------------------------------------------------------------------------------ */

#define LANE(d, l) (S(d)->lane[l])

static bagua_status_t div_(bagua_ddp_t *d, bagua__lane_t l, float *buf, size_t n, int k) {
  return bagua__cuda_div_f32(buf, n, k, LANE(d, l));
}

static bagua_status_t add(bagua_ddp_t *d, bagua__lane_t l, float *dst, const float *src, size_t n) {
  const void *srcs[2] = {dst, src};
  return bagua__cuda_reduce_n(BAGUA_F32, BAGUA_SUM, dst, srcs, 2, n, LANE(d, l));
}

static bagua_status_t axpy(bagua_ddp_t *d, bagua__lane_t l, float a, const float *x, float *y,
                           size_t n) {
  return bagua__cuda_axpy(BAGUA_F32, a, x, y, n, LANE(d, l));
}

static bagua_status_t scale(bagua_ddp_t *d, bagua__lane_t l, float a, float *x, size_t n) {
  return bagua__cuda_scale(BAGUA_F32, a, x, n, LANE(d, l));
}

static bagua_status_t compress(bagua_ddp_t *d, bagua__lane_t l, const float *in, size_t chunk,
                               size_t k, uint8_t *out) {
  return bagua__cuda_minmax_u8_compress(BAGUA_F32, in, chunk, k, out, LANE(d, l));
}

static bagua_status_t decompress(bagua_ddp_t *d, bagua__lane_t l, const uint8_t *in, size_t chunk,
                                 size_t k, float *out) {
  return bagua__cuda_minmax_u8_decompress(BAGUA_F32, in, chunk, k, out, LANE(d, l));
}

static bagua_status_t decompress_add(bagua_ddp_t *d, bagua__lane_t l, const uint8_t *in,
                                     size_t chunk, size_t k, float *acc) {
  return bagua__cuda_minmax_u8_decompress_add(BAGUA_F32, in, chunk, k, acc, LANE(d, l));
}

static bagua_status_t sgd(bagua_ddp_t *d, bagua__lane_t l, float *p, const float *g, float *m,
                          size_t n, const bagua__sgd_params_t *hp, int first_step) {
  return bagua__cuda_sgd_step(p, g, BAGUA_F32, m, n, hp, first_step, LANE(d, l));
}

static bagua_status_t adam(bagua_ddp_t *d, bagua__lane_t l, float *p, const float *g, float *m,
                           float *v, size_t n, const bagua__adam_params_t *hp, int64_t step) {
  return bagua__cuda_adam_step(p, g, BAGUA_F32, m, v, n, hp, step, LANE(d, l));
}

static bagua_status_t qadam_frozen(bagua_ddp_t *d, bagua__lane_t l, float *p, const float *m,
                                   const float *v, size_t n, double lr, double beta1, double beta2,
                                   double eps, int64_t step, int64_t v_step) {
  return bagua__cuda_qadam_frozen(p, m, v, n, lr, beta1, beta2, eps, step, v_step, LANE(d, l));
}

static bagua_status_t qadam_momentum(bagua_ddp_t *d, bagua__lane_t l, float *m, const float *g,
                                     const float *p, size_t n, float beta1, float one_minus_beta1,
                                     float wd) {
  return bagua__cuda_qadam_momentum(m, g, p, n, beta1, one_minus_beta1, wd, LANE(d, l));
}

static bagua_status_t lpdec_diff(bagua_ddp_t *d, bagua__lane_t l, float *diff, const float *x,
                                 const float *s, const float *w, size_t n) {
  return bagua__cuda_lpdec_diff(diff, x, s, w, n, LANE(d, l));
}

static bagua_status_t lowrank_mq(bagua_ddp_t *d, bagua__lane_t l, const float *m, size_t rows,
                                 size_t cols, const float *qt, size_t r, float *p) {
  return bagua__cuda_lowrank_mq(m, rows, cols, qt, r, p, LANE(d, l));
}

static bagua_status_t lowrank_mtp(bagua_ddp_t *d, bagua__lane_t l, const float *m, size_t rows,
                                  size_t cols, const float *p, size_t r, float *qt) {
  return bagua__cuda_lowrank_mtp(m, rows, cols, p, r, qt, LANE(d, l));
}

static bagua_status_t lowrank_pqt(bagua_ddp_t *d, bagua__lane_t l, const float *p, const float *qt,
                                  size_t rows, size_t cols, size_t r, float *m, float *err) {
  return bagua__cuda_lowrank_pqt(p, qt, rows, cols, r, m, err, LANE(d, l));
}

static bagua_status_t lowrank_orthonormalise(bagua_ddp_t *d, bagua__lane_t l, float *p, size_t rows,
                                             size_t r, float eps) {
  return bagua__cuda_lowrank_orthonormalise(p, rows, r, eps, LANE(d, l));
}

/* ------------------------------------------------------------------------------------------ */
/* collectives                                                                                */
/* ------------------------------------------------------------------------------------------ */

/* The NCCL communicator mirroring `c`, with its stream ordered after lane l's work so far. */
static bagua_status_t enter(bagua_ddp_t *d, bagua__lane_t l, bagua_comm_t *c, int *idx) {
  state_t *s = S(d);
  for (int i = 0; i < NC_COUNT; i++) {
    if (c && s->cpu[i] == c && s->nc[i]) {
      *idx = i;
      BAGUA_CHECK(cu(cudaEventRecord(s->in_ev[i], s->lane[l]), "cudaEventRecord"));
      return bagua_nccl_wait_event(s->nc[i], s->in_ev[i]);
    }
  }
  BAGUA_WARN("ddp (cuda): no NCCL communicator mirrors communicator %p (internal)", (void *)c);
  return BAGUA_ERR_INTERNAL;
}

/* Lane l's later work waits for the collective just enqueued on communicator idx. */
static bagua_status_t leave(bagua_ddp_t *d, bagua__lane_t l, int idx, bagua_status_t st) {
  state_t *s = S(d);
  BAGUA_CHECK(st);
  BAGUA_CHECK(bagua_nccl_record_event(s->nc[idx], s->out_ev[idx]));
  return cu(cudaStreamWaitEvent(s->lane[l], s->out_ev[idx], 0), "cudaStreamWaitEvent");
}

static bagua_status_t allreduce(bagua_ddp_t *d, bagua__lane_t l, bagua_comm_t *c, const void *sb,
                                void *rb, size_t n, bagua_dtype_t dt, bagua_op_t op) {
  int i;
  /* ncclAvg multiplies by 1/n before summing; the CPU sums, then divides. Summing here and
   * dividing with the CPU's kernel keeps the two devices' rounding the same. */
  int avg = op == BAGUA_AVG && dt == BAGUA_F32;
  BAGUA_CHECK(enter(d, l, c, &i));
  BAGUA_CHECK(
      leave(d, l, i, bagua_nccl_allreduce(S(d)->nc[i], sb, rb, n, dt, avg ? BAGUA_SUM : op)));
  return avg ? bagua__cuda_div_f32(rb, n, bagua_comm_size(c), LANE(d, l)) : BAGUA_OK;
}

static bagua_status_t reduce(bagua_ddp_t *d, bagua__lane_t l, bagua_comm_t *c, const void *sb,
                             void *rb, size_t n, bagua_dtype_t dt, bagua_op_t op, int root) {
  int i;
  BAGUA_CHECK(enter(d, l, c, &i));
  return leave(d, l, i, bagua_nccl_reduce(S(d)->nc[i], sb, rb, n, dt, op, root));
}

static bagua_status_t broadcast(bagua_ddp_t *d, bagua__lane_t l, bagua_comm_t *c, const void *sb,
                                void *rb, size_t n, bagua_dtype_t dt, int root) {
  int i;
  BAGUA_CHECK(enter(d, l, c, &i));
  return leave(d, l, i, bagua_nccl_broadcast(S(d)->nc[i], sb, rb, n, dt, root));
}

static bagua_status_t alltoall(bagua_ddp_t *d, bagua__lane_t l, bagua_comm_t *c, const void *sb,
                               void *rb, size_t n, bagua_dtype_t dt) {
  int i;
  BAGUA_CHECK(enter(d, l, c, &i));
  return leave(d, l, i, bagua_nccl_alltoall(S(d)->nc[i], sb, rb, n, dt));
}

static bagua_status_t allgather(bagua_ddp_t *d, bagua__lane_t l, bagua_comm_t *c, const void *sb,
                                void *rb, size_t n, bagua_dtype_t dt) {
  int i;
  BAGUA_CHECK(enter(d, l, c, &i));
  return leave(d, l, i, bagua_nccl_allgather(S(d)->nc[i], sb, rb, n, dt));
}

static bagua_status_t sendrecv(bagua_ddp_t *d, bagua__lane_t l, bagua_comm_t *c, const void *sb,
                               size_t sn, int dst, void *rb, size_t rn, int src, bagua_dtype_t dt) {
  int i;
  BAGUA_CHECK(enter(d, l, c, &i));
  return leave(d, l, i, bagua_nccl_sendrecv(S(d)->nc[i], sb, sn, dst, rb, rn, src, dt));
}

/* One NCCL group, so that both neighbours' transfers progress together. */
static bagua_status_t neighbors(bagua_ddp_t *d, bagua__lane_t l, bagua_comm_t *c, const void *sb,
                                size_t n, int left, void *rl, int right, void *rr,
                                bagua_dtype_t dt) {
  int i;
  BAGUA_CHECK(enter(d, l, c, &i));
  bagua_nccl_p2p_t ops[4] = {{left, 0, (void *)sb, n, dt},
                             {right, 0, (void *)sb, n, dt},
                             {left, 1, rl, n, dt},
                             {right, 1, rr, n, dt}};
  return leave(d, l, i, bagua_nccl_group_p2p(S(d)->nc[i], ops, 4));
}

static uint64_t bytes_sent(const bagua_ddp_t *d) {
  const state_t *s = d->dev_state;
  uint64_t sum = 0;
  for (int i = 0; i < NC_COUNT; i++) sum += bagua_nccl_comm_bytes_sent(s->nc[i]);
  return sum;
}

static const bagua__ddp_dev_t dev_cuda = {
    .name = "cuda",
    .open = open_,
    .abort = abort_,
    .close = close_,
    .thread_init = thread_init,
    .jobs_init = jobs_init,
    .jobs_fini = jobs_fini,
    .alloc = alloc,
    .free = free_,
    .copy = copy,
    .zero = zero,
    .to_host = transfer,
    .from_host = transfer,
    .owns = owns,
    .div = div_,
    .add = add,
    .axpy = axpy,
    .scale = scale,
    .compress = compress,
    .decompress = decompress,
    .decompress_add = decompress_add,
    .sgd = sgd,
    .adam = adam,
    .qadam_frozen = qadam_frozen,
    .qadam_momentum = qadam_momentum,
    .lpdec_diff = lpdec_diff,
    .lowrank_mq = lowrank_mq,
    .lowrank_mtp = lowrank_mtp,
    .lowrank_pqt = lowrank_pqt,
    .lowrank_orthonormalise = lowrank_orthonormalise,
    .allreduce = allreduce,
    .reduce = reduce,
    .broadcast = broadcast,
    .alltoall = alltoall,
    .allgather = allgather,
    .sendrecv = sendrecv,
    .neighbors = neighbors,
    .order = order,
    .sync = sync_,
    .job_mark = job_mark,
    .job_wait = job_wait,
    .bytes_sent = bytes_sent,
};

const bagua__ddp_dev_t *bagua__ddp_dev_cuda(void) {
  return &dev_cuda;
}
