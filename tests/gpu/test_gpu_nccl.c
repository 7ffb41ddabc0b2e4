/*
 * The NCCL communicator end to end: creation over a CPU communicator, every collective and
 * point-to-point call with every element checked, ordering with another stream through events,
 * query/synchronize, argument errors, and the failure paths (a receive that never completes
 * must end in BAGUA_ERR_TIMEOUT, or in BAGUA_ERR_ABORTED when another thread aborts).
 *
 *   test_gpu_nccl NRANKS        NRANKS = 1, or 2 processes sharing CUDA device 0
 *
 * NCCL refuses two ranks on one GPU of one host ("Duplicate GPU detected"), so with two ranks
 * each process gives NCCL its own NCCL_HOSTID: NCCL then treats them as two hosts and connects
 * them with its socket transport over loopback. That exercises the whole path (bootstrap
 * through the CPU communicator, proxy, network transport) on a single-GPU machine.
 */
#include <pthread.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bagua/nccl.h"
#include "gpu_test.h"
#include "tests/comm/mp.h"

static const bagua_dtype_t k_dts[] = {BAGUA_F32, BAGUA_F16, BAGUA_BF16, BAGUA_F64,
                                      BAGUA_I32, BAGUA_I64, BAGUA_U8};
static const size_t k_counts_nccl[] = {1, 1000, (1 << 20) + 3};

/* Small integers, exact in every dtype and in every sum and average below. */
static double value(int rank, size_t i) {
  return (double)((rank + 1) * (int)(i % 13 + 1));
}

static void set_val(bagua_dtype_t dt, unsigned char *p, size_t i, double v) {
  float f = (float)v;
  uint16_t h;
  int32_t i32 = (int32_t)v;
  int64_t i64 = (int64_t)v;
  switch (dt) {
    case BAGUA_F32:
      memcpy(p + 4 * i, &f, 4);
      break;
    case BAGUA_F16:
    case BAGUA_BF16:
      h = dt == BAGUA_F16 ? bagua__f32_to_f16(f) : bagua__f32_to_bf16(f);
      memcpy(p + 2 * i, &h, 2);
      break;
    case BAGUA_F64:
      memcpy(p + 8 * i, &v, 8);
      break;
    case BAGUA_I32:
      memcpy(p + 4 * i, &i32, 4);
      break;
    case BAGUA_I64:
      memcpy(p + 8 * i, &i64, 8);
      break;
    default:
      p[i] = (unsigned char)v;
      break;
  }
}

static double get_val(bagua_dtype_t dt, const unsigned char *p, size_t i) {
  float f;
  uint16_t h;
  double d;
  int32_t i32;
  int64_t i64;
  switch (dt) {
    case BAGUA_F32:
      memcpy(&f, p + 4 * i, 4);
      return f;
    case BAGUA_F16:
    case BAGUA_BF16:
      memcpy(&h, p + 2 * i, 2);
      return dt == BAGUA_F16 ? bagua__f16_to_f32(h) : bagua__bf16_to_f32(h);
    case BAGUA_F64:
      memcpy(&d, p + 8 * i, 8);
      return d;
    case BAGUA_I32:
      memcpy(&i32, p + 4 * i, 4);
      return i32;
    case BAGUA_I64:
      memcpy(&i64, p + 8 * i, 8);
      return (double)i64;
    default:
      return p[i];
  }
}

static int is_int(bagua_dtype_t dt) {
  return dt == BAGUA_I32 || dt == BAGUA_I64 || dt == BAGUA_U8;
}

/* What `op` over value(0..size-1, i) gives. */
static double reduced(bagua_dtype_t dt, bagua_op_t op, int size, size_t i) {
  double k = (double)(i % 13 + 1), sum = k * size * (size + 1) / 2;
  switch (op) {
    case BAGUA_MIN:
      return k;
    case BAGUA_MAX:
      return k * size;
    case BAGUA_AVG:
      return is_int(dt) ? (double)((long long)sum / size) : sum / size;
    default:
      return sum;
  }
}

typedef struct {
  int rank, size;
  bagua_nccl_comm_t *c;
  unsigned char *h; /* host staging, big enough for size * max count of the widest dtype */
  void *d0, *d1;    /* device buffers of the same size */
} ctx_t;

static void sync_ok(ctx_t *x, const char *what) {
  bagua_status_t st = bagua_nccl_comm_synchronize(x->c);
  if (st != BAGUA_OK)
    TEST_FAIL("rank %d: %s: synchronize returned %s (%s)", x->rank, what, bagua_err_name(st),
              bagua_last_error());
}

static void upload(ctx_t *x, void *d, bagua_dtype_t dt, size_t n, int rank, size_t base) {
  for (size_t i = 0; i < n; i++) set_val(dt, x->h, i, value(rank, base + i));
  CUDA_OK(cudaMemcpy(d, x->h, n * bagua_dtype_size(dt), cudaMemcpyHostToDevice));
}

static void download(ctx_t *x, const void *d, bagua_dtype_t dt, size_t n) {
  CUDA_OK(cudaMemcpy(x->h, d, n * bagua_dtype_size(dt), cudaMemcpyDeviceToHost));
}

#define EXPECT_VAL(x, what, dt, i, want)                                             \
  do {                                                                               \
    double g_ = get_val((dt), (x)->h, (i)), w_ = (want);                             \
    if (g_ != w_)                                                                    \
      TEST_FAIL("rank %d: %s %s: element %zu is %g, expected %g", (x)->rank, (what), \
                bagua_dtype_name(dt), (size_t)(i), g_, w_);                          \
  } while (0)

static void test_allreduce(ctx_t *x) {
  for (size_t t = 0; t < sizeof(k_dts) / sizeof(k_dts[0]); t++)
    for (int op = 0; op < BAGUA_OP__COUNT; op++)
      for (size_t ci = 0; ci < 3; ci++) {
        bagua_dtype_t dt = k_dts[t];
        size_t n = k_counts_nccl[ci];
        int in_place = (int)((ci + (size_t)op) & 1);
        upload(x, x->d0, dt, n, x->rank, 0);
        ASSERT_OK(
            bagua_nccl_allreduce(x->c, x->d0, in_place ? x->d0 : x->d1, n, dt, (bagua_op_t)op));
        sync_ok(x, "allreduce");
        download(x, in_place ? x->d0 : x->d1, dt, n);
        for (size_t i = 0; i < n; i++)
          EXPECT_VAL(x, "allreduce", dt, i, reduced(dt, (bagua_op_t)op, x->size, i));
      }
}

static void test_reduce_scatter_allgather(ctx_t *x) {
  for (size_t t = 0; t < sizeof(k_dts) / sizeof(k_dts[0]); t++) {
    bagua_dtype_t dt = k_dts[t];
    size_t rc = 1001, es = bagua_dtype_size(dt);
    /* reduce_scatter: element j of block b is value(rank, b*rc + j). */
    upload(x, x->d0, dt, rc * (size_t)x->size, x->rank, 0);
    ASSERT_OK(bagua_nccl_reduce_scatter(x->c, x->d0, x->d1, rc, dt, BAGUA_SUM));
    sync_ok(x, "reduce_scatter");
    download(x, x->d1, dt, rc);
    for (size_t j = 0; j < rc; j++)
      EXPECT_VAL(x, "reduce_scatter", dt, j,
                 reduced(dt, BAGUA_SUM, x->size, (size_t)x->rank * rc + j));
    /* allgather, in place: this rank's block already sits at its position in d1. */
    upload(x, (char *)x->d1 + (size_t)x->rank * rc * es, dt, rc, x->rank, 0);
    ASSERT_OK(bagua_nccl_allgather(x->c, (char *)x->d1 + (size_t)x->rank * rc * es, x->d1, rc, dt));
    sync_ok(x, "allgather");
    download(x, x->d1, dt, rc * (size_t)x->size);
    for (int b = 0; b < x->size; b++)
      for (size_t j = 0; j < rc; j++)
        EXPECT_VAL(x, "allgather", dt, (size_t)b * rc + j, value(b, j));
  }
}

static void test_broadcast_reduce(ctx_t *x) {
  size_t n = (1 << 18) + 5;
  for (int root = 0; root < x->size; root++) {
    upload(x, x->d0, BAGUA_F32, n, x->rank, 0);
    ASSERT_OK(bagua_nccl_broadcast(x->c, x->d0, x->d0, n, BAGUA_F32, root));
    sync_ok(x, "broadcast");
    download(x, x->d0, BAGUA_F32, n);
    for (size_t i = 0; i < n; i++) EXPECT_VAL(x, "broadcast", BAGUA_F32, i, value(root, i));

    upload(x, x->d0, BAGUA_BF16, n, x->rank, 0);
    CUDA_OK(cudaMemset(x->d1, 0, n * 2));
    ASSERT_OK(bagua_nccl_reduce(x->c, x->d0, x->rank == root ? x->d1 : NULL, n, BAGUA_BF16,
                                BAGUA_MAX, root));
    sync_ok(x, "reduce");
    download(x, x->d1, BAGUA_BF16, n);
    for (size_t i = 0; i < n; i++)
      EXPECT_VAL(x, "reduce", BAGUA_BF16, i,
                 x->rank == root ? reduced(BAGUA_BF16, BAGUA_MAX, x->size, i) : 0.0);
  }
}

static void test_alltoall(ctx_t *x) {
  for (size_t t = 0; t < sizeof(k_dts) / sizeof(k_dts[0]); t++) {
    bagua_dtype_t dt = k_dts[t];
    size_t n = 777, es = bagua_dtype_size(dt);
    /* Block b of this rank's sendbuf holds value(rank, b*n + j), so rank r receives in block b
     * what rank b sent in block r. */
    upload(x, x->d0, dt, n * (size_t)x->size, x->rank, 0);
    ASSERT_OK(bagua_nccl_alltoall(x->c, x->d0, x->d1, n, dt));
    sync_ok(x, "alltoall");
    download(x, x->d1, dt, n * (size_t)x->size);
    for (int b = 0; b < x->size; b++)
      for (size_t j = 0; j < n; j++)
        EXPECT_VAL(x, "alltoall", dt, (size_t)b * n + j, value(b, (size_t)x->rank * n + j));
    ASSERT_STATUS(bagua_nccl_alltoall(x->c, x->d0, (char *)x->d0 + es, n, dt),
                  BAGUA_ERR_INVALID_ARG);
  }
}

static void test_p2p(ctx_t *x) {
  size_t n = 100003;
  int next = (x->rank + 1) % x->size, prev = (x->rank + x->size - 1) % x->size;
  upload(x, x->d0, BAGUA_F32, n, x->rank, 0);
  ASSERT_OK(bagua_nccl_sendrecv(x->c, x->d0, n, next, x->d1, n, prev, BAGUA_F32));
  sync_ok(x, "sendrecv");
  download(x, x->d1, BAGUA_F32, n);
  for (size_t i = 0; i < n; i++) EXPECT_VAL(x, "sendrecv", BAGUA_F32, i, value(prev, i));

  /* Both neighbours at once, as low-precision decentralized SGD does. */
  size_t bytes = n * 4;
  bagua_nccl_p2p_t ops[4] = {{next, 0, x->d0, n, BAGUA_F32},
                             {prev, 0, x->d0, n, BAGUA_F32},
                             {prev, 1, x->d1, n, BAGUA_F32},
                             {next, 1, (char *)x->d1 + bytes, n, BAGUA_F32}};
  ASSERT_OK(bagua_nccl_group_p2p(x->c, ops, 4));
  sync_ok(x, "group_p2p");
  download(x, x->d1, BAGUA_F32, 2 * n);
  for (size_t i = 0; i < n; i++) {
    EXPECT_VAL(x, "group_p2p from prev", BAGUA_F32, i, value(prev, i));
    EXPECT_VAL(x, "group_p2p from next", BAGUA_F32, n + i, value(next, i));
  }

  if (x->size == 1) {
    ASSERT_STATUS(bagua_nccl_send(x->c, x->d0, n, BAGUA_F32, 0), BAGUA_ERR_INVALID_ARG);
    return;
  }
  /* Plain send and receive, ordered so that they cannot deadlock: rank 0 first sends. */
  for (int round = 0; round < 2; round++) {
    int sender = round;
    if (x->rank == sender) {
      ASSERT_OK(bagua_nccl_send(x->c, x->d0, n, BAGUA_F32, 1 - sender));
    } else {
      CUDA_OK(cudaMemset(x->d1, 0, bytes));
      ASSERT_OK(bagua_nccl_recv(x->c, x->d1, n, BAGUA_F32, sender));
    }
    sync_ok(x, "send/recv");
    if (x->rank != sender) {
      download(x, x->d1, BAGUA_F32, n);
      for (size_t i = 0; i < n; i++) EXPECT_VAL(x, "recv", BAGUA_F32, i, value(sender, i));
    }
  }
}

/*
 * Events: a compute stream fills the buffer, the communicator's stream waits for it, and the
 * compute stream waits for the allreduce before copying the result back, with no host
 * synchronisation in between.
 */
static void test_events(ctx_t *x) {
  size_t n = (1 << 20) + 1, bytes = n * 4;
  cudaStream_t compute;
  cudaEvent_t filled, reduced_ev;
  float *pinned;
  CUDA_OK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
  CUDA_OK(cudaEventCreateWithFlags(&filled, cudaEventDisableTiming));
  CUDA_OK(cudaEventCreateWithFlags(&reduced_ev, cudaEventDisableTiming));
  CUDA_OK(cudaMallocHost((void **)&pinned, bytes));
  for (size_t i = 0; i < n; i++) pinned[i] = (float)value(x->rank, i);
  CUDA_OK(cudaMemsetAsync(x->d0, 0, bytes, compute));
  CUDA_OK(cudaMemcpyAsync(x->d0, pinned, bytes, cudaMemcpyHostToDevice, compute));
  CUDA_OK(cudaEventRecord(filled, compute));
  ASSERT_OK(bagua_nccl_wait_event(x->c, filled));
  ASSERT_OK(bagua_nccl_allreduce(x->c, x->d0, x->d0, n, BAGUA_F32, BAGUA_SUM));
  ASSERT_OK(bagua_nccl_record_event(x->c, reduced_ev));
  CUDA_OK(cudaStreamWaitEvent(compute, reduced_ev, 0));
  CUDA_OK(cudaMemcpyAsync(pinned, x->d0, bytes, cudaMemcpyDeviceToHost, compute));
  CUDA_OK(cudaStreamSynchronize(compute));
  for (size_t i = 0; i < n; i++)
    if (pinned[i] != (float)reduced(BAGUA_F32, BAGUA_SUM, x->size, i))
      TEST_FAIL("rank %d: events: element %zu is %g", x->rank, i, (double)pinned[i]);
  /* Everything enqueued has finished, so a query must say so. */
  bagua_status_t st = bagua_nccl_comm_query(x->c);
  for (int i = 0; i < 1000 && st == BAGUA_ERR_IN_PROGRESS; i++) {
    usleep(1000);
    st = bagua_nccl_comm_query(x->c);
  }
  ASSERT_OK(st);
  ASSERT_OK(bagua_nccl_comm_get_async_error(x->c));
  cudaFreeHost(pinned);
  cudaEventDestroy(filled);
  cudaEventDestroy(reduced_ev);
  cudaStreamDestroy(compute);
}

static void test_args(ctx_t *x) {
  ASSERT_STATUS(bagua_nccl_allreduce(x->c, x->d0, x->d1, 4, BAGUA_DTYPE__COUNT, BAGUA_SUM),
                BAGUA_ERR_INVALID_ARG);
  ASSERT_STATUS(bagua_nccl_allreduce(x->c, x->d0, x->d1, 4, BAGUA_F32, BAGUA_OP__COUNT),
                BAGUA_ERR_INVALID_ARG);
  ASSERT_STATUS(bagua_nccl_broadcast(x->c, x->d0, x->d1, 4, BAGUA_F32, x->size),
                BAGUA_ERR_INVALID_ARG);
  ASSERT_STATUS(bagua_nccl_allreduce(x->c, NULL, x->d1, 4, BAGUA_F32, BAGUA_SUM),
                BAGUA_ERR_INVALID_ARG);
  ASSERT_STATUS(bagua_nccl_wait_event(x->c, NULL), BAGUA_ERR_INVALID_ARG);
  /* Argument errors leave the communicator usable, and count 0 is a valid no-op. */
  ASSERT_OK(bagua_nccl_allreduce(x->c, NULL, NULL, 0, BAGUA_F32, BAGUA_SUM));
  ASSERT_OK(bagua_nccl_comm_get_async_error(x->c));
  ASSERT_EQ(bagua_nccl_comm_rank(x->c), x->rank);
  ASSERT_EQ(bagua_nccl_comm_size(x->c), x->size);
  ASSERT_EQ(bagua_nccl_comm_device(x->c), 0);
  ASSERT_TRUE(bagua_nccl_comm_stream(x->c) != NULL);
}

typedef struct {
  bagua_nccl_comm_t *c;
  int delay_ms;
} aborter_t;

static void *abort_later(void *arg) {
  aborter_t *a = arg;
  usleep((useconds_t)a->delay_ms * 1000);
  bagua_nccl_comm_abort(a->c);
  return NULL;
}

/*
 * Rank 0 posts a receive that rank 1 never matches, so the communicator's stream cannot
 * finish. With `abort_ms` > 0 another thread aborts after that long and synchronize must
 * return BAGUA_ERR_ABORTED soon after; otherwise synchronize must give up with
 * BAGUA_ERR_TIMEOUT after the communicator's timeout. Rank 1 waits on the CPU communicator and
 * then drops its side.
 */
static void test_stuck(bagua_comm_t *cpu, ctx_t *x, int abort_ms, int timeout_ms) {
  bagua_nccl_comm_t *c = NULL;
  ASSERT_OK(bagua_nccl_comm_create(cpu, 0, &c));
  /* NCCL connects peers lazily, on their first exchange, and that needs both sides; one
   * exchange first makes the unmatched receive below only wait for data. */
  int peer = 1 - x->rank;
  ASSERT_OK(bagua_nccl_sendrecv(c, x->d0, 1000, peer, x->d1, 1000, peer, BAGUA_F32));
  ASSERT_OK(bagua_nccl_comm_synchronize(c));
  if (x->rank == 0) {
    ASSERT_OK(bagua_nccl_recv(c, x->d1, 1000, BAGUA_F32, 1));
    pthread_t th;
    aborter_t a = {c, abort_ms};
    if (abort_ms > 0) ASSERT_EQ(pthread_create(&th, NULL, abort_later, &a), 0);
    double t0 = mp_now();
    bagua_status_t st = bagua_nccl_comm_synchronize(c);
    double waited_ms = (mp_now() - t0) * 1e3;
    if (abort_ms > 0) {
      pthread_join(th, NULL);
      ASSERT_STATUS(st, BAGUA_ERR_ABORTED);
      ASSERT_LT(waited_ms, abort_ms + 2000);
    } else {
      ASSERT_STATUS(st, BAGUA_ERR_TIMEOUT);
      ASSERT_GE(waited_ms, timeout_ms * 0.9);
      ASSERT_LT(waited_ms, timeout_ms + 3000);
    }
    /* Poisoned: every later call reports the same failure at once. */
    ASSERT_STATUS(bagua_nccl_allreduce(c, x->d0, x->d0, 4, BAGUA_F32, BAGUA_SUM), st);
    ASSERT_STATUS(bagua_nccl_comm_get_async_error(c), st);
    printf("rank 0: stuck receive ended with %s after %.0f ms\n", bagua_err_name(st), waited_ms);
  } else {
    /* Rank 0 reaches the barrier only after its wait, which may take the whole communicator
     * timeout; the CPU barrier has the same timeout, so rank 1 enters it no earlier than that
     * wait could end (a first run on a GPU failed here when the barrier gave up first). */
    usleep((useconds_t)(abort_ms > 0 ? abort_ms : timeout_ms) * 1000);
  }
  ASSERT_OK(bagua_barrier(cpu));
  if (x->rank != 0) bagua_nccl_comm_abort(c);
  bagua_nccl_comm_destroy(c);
}

static int body(bagua_comm_t *cpu, void *arg) {
  int timeout_ms = *(const int *)arg;
  ctx_t x;
  memset(&x, 0, sizeof(x));
  x.rank = bagua_comm_rank(cpu);
  x.size = bagua_comm_size(cpu);
  if (x.size > 1) {
    /* Before any NCCL call in this process: NCCL reads its environment once. */
    char host_id[64];
    snprintf(host_id, sizeof(host_id), "bagua-gpu-test-rank%d", x.rank);
    setenv("NCCL_HOSTID", host_id, 1);
    setenv("NCCL_IB_DISABLE", "1", 0);
    setenv("NCCL_SOCKET_IFNAME", "lo", 0);
  }
  ASSERT_EQ(bagua_nccl_available(), 1);
  bagua_status_t st = bagua_nccl_comm_create(cpu, 0, &x.c);
  if (st != BAGUA_OK)
    TEST_FAIL("rank %d: bagua_nccl_comm_create returned %s: %s", x.rank, bagua_err_name(st),
              bagua_last_error());
  size_t bytes = 8 * (size_t)x.size * ((1 << 20) + 8) * 2;
  x.h = malloc(bytes);
  if (!x.h) TEST_FAIL("out of memory");
  CUDA_OK(cudaMalloc(&x.d0, bytes));
  CUDA_OK(cudaMalloc(&x.d1, bytes));

  /* The byte counter follows the ring model: 2(n-1)/n of an allreduce buffer, none on 1 rank,
   * and nothing for test_args's refused calls and empty allreduce. */
  uint64_t sent0 = bagua_nccl_comm_bytes_sent(x.c);
  ASSERT_TRUE(sent0 == 0);
  test_args(&x);
  ASSERT_OK(bagua_nccl_allreduce(x.c, x.d0, x.d1, 1000, BAGUA_F32, BAGUA_SUM));
  ASSERT_OK(bagua_nccl_comm_synchronize(x.c));
  ASSERT_TRUE(bagua_nccl_comm_bytes_sent(x.c) - sent0 ==
              (uint64_t)(2 * (x.size - 1) * 4000 / x.size));
  test_allreduce(&x);
  test_reduce_scatter_allgather(&x);
  test_broadcast_reduce(&x);
  test_alltoall(&x);
  test_p2p(&x);
  test_events(&x);
  /* An abort from this thread: everything afterwards reports it. */
  bagua_nccl_comm_t *c = x.c;
  ASSERT_OK(bagua_barrier(cpu));
  bagua_nccl_comm_abort(c);
  ASSERT_STATUS(bagua_nccl_allreduce(c, x.d0, x.d0, 4, BAGUA_F32, BAGUA_SUM), BAGUA_ERR_ABORTED);
  ASSERT_STATUS(bagua_nccl_comm_synchronize(c), BAGUA_ERR_ABORTED);
  bagua_nccl_comm_destroy(c);

  if (x.size > 1) {
    test_stuck(cpu, &x, 0, timeout_ms);   /* timeout */
    test_stuck(cpu, &x, 500, timeout_ms); /* abort from another thread */
  }
  /* A communicator destroyed normally (finalize path). */
  ASSERT_OK(bagua_nccl_comm_create(cpu, -1, &x.c));
  ASSERT_OK(bagua_nccl_allreduce(x.c, x.d0, x.d1, 1000, BAGUA_F32, BAGUA_SUM));
  bagua_nccl_comm_destroy(x.c);

  cudaFree(x.d0);
  cudaFree(x.d1);
  free(x.h);
  printf("rank %d of %d: NCCL communicator checks passed\n", x.rank, x.size);
  return 0;
}

int main(int argc, char **argv) {
  int nranks = argc > 1 ? atoi(argv[1]) : 1;
  if (nranks < 1 || nranks > 2) {
    fprintf(stderr, "usage: test_gpu_nccl 1|2\n");
    return 2;
  }
  gpu_require_device_in_child();
  int timeout_ms = 4000;
  mp_opts_t o = {0};
  o.nranks = nranks;
  o.transport = BAGUA_TRANSPORT_AUTO;
  o.timeout_ms = timeout_ms;
  o.deadline_s = 240;
  int rc = mp_run(&o, body, &timeout_ms);
  if (rc == 0) printf("test_gpu_nccl %d: ok\n", nranks);
  return rc;
}
