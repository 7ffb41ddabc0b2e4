/*
 * The data-parallel layer in cuda mode (config.device = "cuda", include/bagua/ddp.h) against
 * its cpu mode, which the CPU tests validate and which therefore serves as the oracle.
 *
 *   test_gpu_ddp NRANKS        NRANKS = 1, or 2 processes sharing CUDA device 0
 *
 * For every algorithm (and the optimizers sgd with momentum, adam and adamw) each rank trains a
 * model of six tensors of awkward sizes, spread over four buckets, for ten steps in cuda mode:
 * device arrays registered, some tensors in copy mode (a registered device gradient array) and
 * some zero-copy (gradients written into bagua_ddp_grad()), gradients copied on a non-default
 * compute stream that bagua_ddp_grad_ready() is called right after, in backward order (powersgd
 * with two of them given matrix shapes). Then the identical schedule runs in cpu mode over the
 * same CPU communicator, and the final weights must agree:
 *   - one rank: bit for bit (the CUDA kernels are bit-exact with the CPU ones and every
 *     algorithm issues the same operations in both modes), except async, which is timing-bound;
 *   - two ranks: within 1e-5 relative for the full-precision algorithms (NCCL may round its
 *     sums differently from the CPU transport) and within a few quantization bins per step
 *     where weights or gradients cross MinMaxUInt8 between ranks (a sum rounded differently
 *     can move a value into the neighbouring bin);
 *   - async: after bagua_ddp_async_pause() every rank holds the same finite weights.
 * The centralized algorithms must also leave identical weights on both ranks.
 *
 * With two ranks two more runs check the failure paths in cuda mode: bagua_ddp_abort() from
 * another thread ends a step whose peer has stalled (BAGUA_ERR_ABORTED within seconds), and a
 * peer that never calls the step makes the other rank's step fail with BAGUA_ERR_TIMEOUT after
 * BAGUA_COMM_TIMEOUT_MS.
 *
 * Two ranks on one GPU need distinct NCCL_HOSTID values (see test_gpu_nccl.c).
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bagua/ddp.h"
#include "bagua/nccl.h"
#include "gpu_test.h"
#include "tests/comm/mp.h"

/* Registration (= backward) order; 2048-byte buckets give [70000] [1 1000] [7 4099] [3]. */
enum { NT = 6, NBUCKETS = 4, STEPS = 10, BUCKET_BYTES = 2048, DEV = 0 };
static const size_t k_sizes[NT] = {70000, 1, 1000, 7, 4099, 3};

typedef struct {
  const char *name, *algorithm, *peer_mode, *optimizer;
  double lr, momentum;
  double beta1;     /* 0: the default */
  int hierarchical; /* -1: the algorithm's default */
  int error_feedback, warmup_steps;
  int comm_interval;   /* 0: 1 */
  unsigned zero_copy;  /* bit i: tensor i registered with grad = NULL */
  int legacy_stream;   /* cuda_stream = NULL: the legacy default stream */
  int skip_last_ready; /* the last tensor is left for bagua_ddp_step() to mark */
  int any_device;      /* cuda_device = -1 (on one rank only, where it means device 0) */
  int rank;            /* powersgd: config.rank (0: the default) */
  int shapes;          /* tensors 0 and 2 registered as matrices (280 x 250, 40 x 25) */
} case_t;

/* Fields left out are 0: flat (not hierarchical), copy mode, the caller's own stream. */
static const case_t k_cases[] = {
    {.name = "gradient_allreduce, sgd momentum, copy",
     .algorithm = "gradient_allreduce",
     .optimizer = "sgd",
     .lr = 0.01,
     .momentum = 0.9},
    {.name = "gradient_allreduce, adam, zero-copy",
     .algorithm = "gradient_allreduce",
     .optimizer = "adam",
     .lr = 0.01,
     .zero_copy = 0x3f},
    {.name = "gradient_allreduce, adamw, mixed, legacy stream, step marks the last",
     .algorithm = "gradient_allreduce",
     .optimizer = "adamw",
     .lr = 0.01,
     .zero_copy = 0x15,
     .legacy_stream = 1,
     .skip_last_ready = 1,
     .any_device = 1},
    {.name = "bytegrad flat, sgd, mixed",
     .algorithm = "bytegrad",
     .optimizer = "sgd",
     .lr = 0.01,
     .zero_copy = 0x2a},
    {.name = "bytegrad flat, error feedback, zero-copy",
     .algorithm = "bytegrad",
     .optimizer = "sgd",
     .lr = 0.01,
     .error_feedback = 1,
     .zero_copy = 0x3f},
    {.name = "bytegrad hierarchical (default), sgd momentum",
     .algorithm = "bytegrad",
     .optimizer = "sgd",
     .lr = 0.01,
     .momentum = 0.9,
     .hierarchical = -1},
    {.name = "decentralized all, sgd momentum",
     .algorithm = "decentralized",
     .peer_mode = "all",
     .optimizer = "sgd",
     .lr = 0.01,
     .momentum = 0.9},
    {.name = "decentralized shift_one, adam, mixed",
     .algorithm = "decentralized",
     .peer_mode = "shift_one",
     .optimizer = "adam",
     .lr = 0.01,
     .zero_copy = 0x15},
    {.name = "decentralized ring, interval 2, zero-copy",
     .algorithm = "decentralized",
     .peer_mode = "ring",
     .optimizer = "sgd",
     .lr = 0.01,
     .comm_interval = 2,
     .zero_copy = 0x3f},
    {.name = "low_precision_decentralized, sgd, mixed",
     .algorithm = "low_precision_decentralized",
     .optimizer = "sgd",
     .lr = 0.01,
     .zero_copy = 0x2a},
    {.name = "qadam flat, warm-up 3",
     .algorithm = "qadam",
     .lr = 0.01,
     .beta1 = 0.5,
     .warmup_steps = 3,
     .zero_copy = 0x15},
    {.name = "qadam hierarchical (default), error feedback, warm-up 3",
     .algorithm = "qadam",
     .lr = 0.01,
     .beta1 = 0.5,
     .warmup_steps = 3,
     .hierarchical = -1,
     .error_feedback = 1},
    /* Two ranks compress both matrices at rank 2 (one rank has nothing to compress): the
     * kernels repeat the CPU's order of operations, so only NCCL's rounding of the sums of P
     * and Q separates the modes. Written without a GPU to run it on. */
    {.name = "powersgd flat, rank 2, warm-up 2, error feedback, mixed",
     .algorithm = "powersgd",
     .optimizer = "sgd",
     .lr = 0.01,
     .warmup_steps = 2,
     .error_feedback = 1,
     .rank = 2,
     .shapes = 1,
     .zero_copy = 0x2a},
    {.name = "async, warm-up 3",
     .algorithm = "async",
     .optimizer = "sgd",
     .lr = 0.01,
     .warmup_steps = 3,
     .zero_copy = 0x2a},
};

#define DDP_OK(x, k, call)                                                      \
  do {                                                                          \
    bagua_status_t st_ = (call);                                                \
    if (st_ != BAGUA_OK)                                                        \
      TEST_FAIL("rank %d, %s: %s returned %s: %s", (x)->rank, (k)->name, #call, \
                bagua_err_name(st_), bagua_last_error());                       \
  } while (0)

/* ---- deterministic data ---- */

static uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/* Uniform in [0, 1) from four coordinates. */
static double unit(uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
  uint64_t h = mix64(a * 0x9e3779b97f4a7c15ULL + 1);
  h = mix64(h ^ (b + 0x632be59bd9b4e019ULL));
  h = mix64(h ^ (c + 0x85157af5ULL));
  h = mix64(h ^ d);
  return (double)(h >> 11) * (1.0 / 9007199254740992.0);
}

/*
 * Gradient element i of tensor k at step t on rank r. The magnitude lies in [0.5, 1] and the
 * sign depends on the element only, so the average over ranks is never near zero: Adam's and
 * QAdam's division by sqrt(v) then cannot magnify a rounding difference, and every bucket
 * chunk spans about [-1, 1], which fixes the quantization bin the tolerances below assume.
 */
static float grad_value(int r, int t, int k, size_t i) {
  float sign = unit(7, (uint64_t)k, i, 0) < 0.5 ? -1.0f : 1.0f;
  return sign * (0.5f + 0.5f * (float)unit(1, (uint64_t)r, (uint64_t)t, (uint64_t)k * 1000003 + i));
}

/* Initial weights differ per rank on purpose: bagua_ddp_ready() must hand out rank 0's. */
static float init_value(int r, int k, size_t i) {
  return (float)(unit(2, (uint64_t)r, (uint64_t)k, i) - 0.5);
}

static uint32_t crc32_of(const void *p, size_t n) {
  const unsigned char *b = p;
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < n; i++) {
    c ^= b[i];
    for (int j = 0; j < 8; j++) c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
  }
  return ~c;
}

/* ---- per-rank context ---- */

typedef struct {
  int rank, size;
  size_t off[NT], total; /* tensors packed one after another (no padding) */
  float *init, *init0;   /* this rank's and rank 0's initial weights */
  float *grads;          /* STEPS x total gradients of this rank */
  float *d_grads;        /* the same in device memory */
  float *pinned;         /* total elements of page-locked memory for reading weights back */
  cudaStream_t stream;   /* the non-default compute stream */
} ctx_t;

static void ctx_init(ctx_t *x, bagua_comm_t *c) {
  memset(x, 0, sizeof(*x));
  x->rank = bagua_comm_rank(c);
  x->size = bagua_comm_size(c);
  for (int k = 0; k < NT; k++) {
    x->off[k] = x->total;
    x->total += k_sizes[k];
  }
  x->init = malloc(x->total * sizeof(float));
  x->init0 = malloc(x->total * sizeof(float));
  x->grads = malloc((size_t)STEPS * x->total * sizeof(float));
  if (!x->init || !x->init0 || !x->grads) TEST_FAIL("out of memory");
  for (int k = 0; k < NT; k++)
    for (size_t i = 0; i < k_sizes[k]; i++) {
      x->init[x->off[k] + i] = init_value(x->rank, k, i);
      x->init0[x->off[k] + i] = init_value(0, k, i);
      for (int t = 0; t < STEPS; t++)
        x->grads[(size_t)t * x->total + x->off[k] + i] = grad_value(x->rank, t, k, i);
    }
  size_t gbytes = (size_t)STEPS * x->total * sizeof(float);
  CUDA_OK(cudaSetDevice(DEV));
  CUDA_OK(cudaStreamCreateWithFlags(&x->stream, cudaStreamNonBlocking));
  CUDA_OK(cudaMalloc((void **)&x->d_grads, gbytes));
  CUDA_OK(cudaMemcpy(x->d_grads, x->grads, gbytes, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMallocHost((void **)&x->pinned, x->total * sizeof(float)));
  /* A copy from pageable memory may return before its DMA has finished; the runs below read
   * d_grads from a non-blocking stream, which does not wait for the legacy stream. */
  CUDA_OK(cudaDeviceSynchronize());
}

static void ctx_free(ctx_t *x) {
  cudaFree(x->d_grads);
  cudaFreeHost(x->pinned);
  cudaStreamDestroy(x->stream);
  free(x->init);
  free(x->init0);
  free(x->grads);
}

/* Before any NCCL call of this process: NCCL reads its environment once. */
static void nccl_env(int rank, int size) {
  if (size < 2) return;
  char host_id[64];
  snprintf(host_id, sizeof(host_id), "bagua-gpu-ddp-rank%d", rank);
  setenv("NCCL_HOSTID", host_id, 1);
  setenv("NCCL_IB_DISABLE", "1", 0);
  setenv("NCCL_SOCKET_IFNAME", "lo", 0);
}

/* A host function enqueued on the compute stream: the gradient copies behind it run only
 * after it returns, well after the host called bagua_ddp_grad_ready() for them, so a bucket
 * whose communication does not wait for the compute stream would send stale gradients. */
static void CUDART_CB stall_stream(void *arg) {
  (void)arg;
  usleep(2000);
}

static void expect_memory_type(const ctx_t *x, const case_t *k, const void *p, int cuda,
                               const char *what, int i) {
  if (!p) TEST_FAIL("rank %d, %s: %s(%d) is NULL after ready", x->rank, k->name, what, i);
  struct cudaPointerAttributes a;
  memset(&a, 0, sizeof(a));
  CUDA_OK(cudaPointerGetAttributes(&a, p));
  if (cuda && (a.type != cudaMemoryTypeDevice || a.device != DEV))
    TEST_FAIL("rank %d, %s: %s(%d) = %p is not memory of device %d (type %d, device %d)", x->rank,
              k->name, what, i, p, DEV, (int)a.type, a.device);
  if (!cuda && a.type != cudaMemoryTypeUnregistered)
    TEST_FAIL("rank %d, %s: cpu mode: %s(%d) = %p is not plain host memory (type %d)", x->rank,
              k->name, what, i, p, (int)a.type);
}

/* The registered `param` arrays, packed. In cuda mode the copies queue on the compute stream,
 * behind whatever bagua_ddp_ready() or bagua_ddp_step() enqueued there. */
static void read_weights(ctx_t *x, int cuda, cudaStream_t s, float *const *param, float *out) {
  for (int k = 0; k < NT; k++) {
    size_t bytes = k_sizes[k] * sizeof(float);
    if (cuda)
      CUDA_OK(cudaMemcpyAsync(x->pinned + x->off[k], param[k], bytes, cudaMemcpyDeviceToHost, s));
    else
      memcpy(out + x->off[k], param[k], bytes);
  }
  if (cuda) {
    CUDA_OK(cudaStreamSynchronize(s));
    memcpy(out, x->pinned, x->total * sizeof(float));
  }
}

static int is_async(const case_t *k) {
  return strcmp(k->algorithm, "async") == 0;
}

/*
 * One training run of case k in cuda or cpu mode over `c`; the final weights go to `out`.
 * Returns the async averaging rounds of this rank (async only).
 */
static uint64_t run(bagua_comm_t *c, ctx_t *x, const case_t *k, int cuda, float *out) {
  bagua_ddp_config_t cfg = BAGUA_DDP_CONFIG_INIT;
  cfg.algorithm = k->algorithm;
  cfg.peer_mode = k->peer_mode;
  cfg.optimizer = k->optimizer;
  cfg.bucket_bytes = BUCKET_BYTES;
  cfg.hierarchical = k->hierarchical;
  cfg.error_feedback = k->error_feedback;
  cfg.warmup_steps = k->warmup_steps;
  cfg.comm_interval = k->comm_interval ? k->comm_interval : 1;
  cfg.lr = k->lr;
  cfg.momentum = k->momentum;
  if (k->beta1 > 0) cfg.beta1 = k->beta1;
  if (is_async(k)) cfg.sync_interval_ms = 2;
  if (k->rank) cfg.rank = k->rank;
  cudaStream_t s = k->legacy_stream ? NULL : x->stream;
  if (cuda) {
    cfg.device = "cuda";
    cfg.cuda_device = k->any_device && x->size == 1 ? -1 : DEV;
    cfg.cuda_stream = s;
  } else {
    cfg.device = "cpu";
  }

  float *param[NT], *grad[NT];
  for (int i = 0; i < NT; i++) {
    size_t bytes = k_sizes[i] * sizeof(float);
    int zc = (k->zero_copy >> i) & 1;
    grad[i] = NULL;
    if (cuda) {
      CUDA_OK(cudaMalloc((void **)&param[i], bytes));
      CUDA_OK(cudaMemcpy(param[i], x->init + x->off[i], bytes, cudaMemcpyHostToDevice));
      if (!zc) {
        CUDA_OK(cudaMalloc((void **)&grad[i], bytes));
        CUDA_OK(cudaMemset(grad[i], 0, bytes));
      }
    } else {
      param[i] = malloc(bytes);
      if (!param[i]) TEST_FAIL("out of memory");
      memcpy(param[i], x->init + x->off[i], bytes);
      if (!zc && !(grad[i] = calloc(k_sizes[i], sizeof(float)))) TEST_FAIL("out of memory");
    }
  }
  /* bagua_ddp_ready() reads the weights on the compute stream, which does not wait for the
   * legacy stream the uploads above went through. */
  if (cuda) CUDA_OK(cudaDeviceSynchronize());

  bagua_ddp_t *ddp = NULL;
  DDP_OK(x, k, bagua_ddp_create(c, &cfg, &ddp));
  for (int i = 0; i < NT; i++) {
    char name[16];
    snprintf(name, sizeof(name), "t%d", i);
    DDP_OK(x, k, bagua_ddp_register(ddp, name, param[i], grad[i], k_sizes[i]));
  }
  if (k->shapes) {
    DDP_OK(x, k, bagua_ddp_register_shape(ddp, 0, 280));
    DDP_OK(x, k, bagua_ddp_register_shape(ddp, 2, 40));
  }
  DDP_OK(x, k, bagua_ddp_ready(ddp));

  /* The views into the flat storage are device memory in cuda mode and host memory in cpu
   * mode; bad indices give NULL. */
  for (int i = 0; i < NT; i++) {
    expect_memory_type(x, k, bagua_ddp_param(ddp, i), cuda, "bagua_ddp_param", i);
    expect_memory_type(x, k, bagua_ddp_grad(ddp, i), cuda, "bagua_ddp_grad", i);
  }
  ASSERT_TRUE(bagua_ddp_param(ddp, NT) == NULL && bagua_ddp_param(ddp, -1) == NULL);
  ASSERT_TRUE(bagua_ddp_grad(ddp, NT) == NULL && bagua_ddp_grad(ddp, -1) == NULL);

  /* Every rank starts from rank 0's weights, written back into its registered arrays. */
  read_weights(x, cuda, s, param, out);
  size_t d = first_diff(out, x->init0, x->total * sizeof(float));
  if (d != (size_t)-1)
    TEST_FAIL("rank %d, %s, %s mode: after ready, weight %zu is %.9g, rank 0's is %.9g", x->rank,
              k->name, cuda ? "cuda" : "cpu", d / 4, out[d / 4], x->init0[d / 4]);

  double t_async = 0;
  int64_t nsteps = 0;
  bagua_ddp_stats_t st = {.struct_size = sizeof(st)};
  for (int t = 0;; t++) {
    if (is_async(k)) {
      /* Past the fixed schedule, train on until the background thread has averaged a few
       * times (steps are not collective after the warm-up, so the ranks may differ here). */
      DDP_OK(x, k, bagua_ddp_stats(ddp, &st));
      if (t >= STEPS && (st.async_rounds >= 3 || mp_now() - t_async > 10.0)) break;
    } else if (t == STEPS) {
      break;
    }
    size_t base = (size_t)(t % STEPS) * x->total;
    if (cuda && t % 2 == 0) CUDA_OK(cudaLaunchHostFunc(s, stall_stream, NULL));
    for (int i = 0; i < NT; i++) {
      size_t bytes = k_sizes[i] * sizeof(float);
      float *dst = ((k->zero_copy >> i) & 1) ? bagua_ddp_grad(ddp, i) : grad[i];
      if (!dst) TEST_FAIL("rank %d, %s: no gradient array for tensor %d", x->rank, k->name, i);
      if (cuda)
        CUDA_OK(cudaMemcpyAsync(dst, x->d_grads + base + x->off[i], bytes, cudaMemcpyDeviceToDevice,
                                s));
      else
        memcpy(dst, x->grads + base + x->off[i], bytes);
      if (!(k->skip_last_ready && i == NT - 1)) DDP_OK(x, k, bagua_ddp_grad_ready(ddp, i));
    }
    DDP_OK(x, k, bagua_ddp_step(ddp));
    nsteps++;
    if (is_async(k) && t + 1 >= k->warmup_steps) {
      if (t_async == 0) t_async = mp_now();
      usleep(3000); /* stands for the forward pass: the averaging thread gets rounds in */
    }
  }
  if (is_async(k)) {
    DDP_OK(x, k, bagua_ddp_async_pause(ddp));
    /* The final average may have run on the library's own stream. */
    if (cuda) CUDA_OK(cudaDeviceSynchronize());
  }
  DDP_OK(x, k, bagua_ddp_stats(ddp, &st));
  ASSERT_EQ(st.steps, nsteps);
  ASSERT_EQ(st.num_tensors, NT);
  ASSERT_EQ(st.num_buckets, NBUCKETS);
  read_weights(x, cuda, s, param, out);
  bagua_ddp_destroy(ddp);
  for (int i = 0; i < NT; i++) {
    if (cuda) {
      cudaFree(param[i]);
      cudaFree(grad[i]);
    } else {
      free(param[i]);
      free(grad[i]);
    }
  }
  return st.async_rounds;
}

/*
 * The largest difference allowed between the cpu and cuda weights of case k where quantized
 * values cross between ranks, or 0 where nothing is quantized: one rank, or hierarchical mode,
 * since all ranks of this test are on one node and the node leaders' communicator then has a
 * single member (ByteGrad and QAdam average at full precision, low-precision decentralized has
 * no neighbour). Were a sum to round differently, a value may fall into the neighbouring bin
 * of a MinMaxUInt8 chunk; `bin` is one bin of a chunk spanning [-1, 1], the range of the
 * gradients (and of QAdam's momentum, an average of them). Per step in weight space:
 *   bytegrad: both quantizations may move the averaged gradient by a bin, times lr; with error
 *             feedback the residual carries one more into the next step;
 *   low-precision decentralized: the weight difference sent spans about 6 lr (the update plus
 *             the replicas' disagreement), and it enters both x and the neighbour's replica sum;
 *   qadam: two quantizations of m, times lr / (1 - beta1^t) <= 1.07 lr (beta1 = 0.5 here),
 *             divided by sqrt(v) >= 0.5, with m's error persisting 1 / (1 - beta1) = 2 steps.
 * A real defect (a gradient not averaged, a stale bucket, a wrong bias correction) moves the
 * weights by a good part of lr on most elements every step, several times these bounds.
 */
static double quantized_tol(const case_t *k, int size) {
  const double bin = 2.0 / 255;
  int hier = k->hierarchical < 0 ? 1 : k->hierarchical;
  if (size < 2 || hier) return 0;
  if (!strcmp(k->algorithm, "bytegrad")) return STEPS * k->lr * bin * (k->error_feedback ? 4 : 2);
  if (!strcmp(k->algorithm, "low_precision_decentralized")) return STEPS * 2 * (3 * k->lr * bin);
  if (!strcmp(k->algorithm, "qadam")) return (STEPS - k->warmup_steps) * k->lr * bin * 10;
  return 0;
}

static int centralized(const case_t *k) {
  return !strcmp(k->algorithm, "gradient_allreduce") || !strcmp(k->algorithm, "bytegrad") ||
         !strcmp(k->algorithm, "qadam") || !strcmp(k->algorithm, "powersgd");
}

/* Fails unless every rank of c holds weights with the same CRC. */
static void expect_same_on_ranks(bagua_comm_t *c, const ctx_t *x, const case_t *k, const float *w,
                                 const char *mode) {
  int64_t mine = crc32_of(w, x->total * sizeof(float)), all[2] = {0, 0};
  ASSERT_OK(bagua_allgather(c, &mine, all, 1, BAGUA_I64));
  for (int r = 0; r < x->size; r++)
    if (all[r] != mine)
      TEST_FAIL(
          "rank %d, %s, %s mode: weights differ across ranks (crc %08llx here, %08llx on "
          "rank %d)",
          x->rank, k->name, mode, (unsigned long long)mine, (unsigned long long)all[r], r);
}

/* Compares the final weights of the two modes (secs: the cuda run, NCCL set-up included). */
static void compare(const ctx_t *x, const case_t *k, const float *cpu, const float *gpu,
                    double secs) {
  double qtol = quantized_tol(k, x->size), worst = 0, worst_ratio = 0;
  size_t ndiff = 0, at = 0;
  for (size_t i = 0; i < x->total; i++) {
    if (memcmp(&cpu[i], &gpu[i], sizeof(float)) == 0) continue;
    ndiff++;
    double diff = fabs((double)cpu[i] - (double)gpu[i]);
    double tol = qtol > 0 ? qtol : 1e-5 * fmax(1.0, fabs((double)cpu[i]));
    if (x->size == 1) tol = 0; /* bit for bit */
    double ratio = tol > 0 ? diff / tol : INFINITY;
    if (!(ratio <= worst_ratio)) { /* also true for NaN */
      worst_ratio = ratio;
      worst = diff;
      at = i;
    }
  }
  if (ndiff == 0) {
    if (x->rank == 0) printf("  %-70s rank 0: bit-identical (%.2f s)\n", k->name, secs);
    return;
  }
  printf(
      "  %-70s rank %d: %zu of %zu weights differ, largest %.3g at %zu (cpu %.9g, cuda "
      "%.9g), %.3g of the tolerance\n",
      k->name, x->rank, ndiff, x->total, worst, at, cpu[at], gpu[at], worst_ratio);
  if (!(worst_ratio <= 1.0))
    TEST_FAIL("rank %d, %s: cuda mode differs from cpu mode beyond the tolerance (%s)", x->rank,
              k->name,
              x->size == 1 ? "one rank: must be bit-identical"
              : qtol > 0   ? "a few quantization bins"
                           : "1e-5 relative");
}

static int body_compare(bagua_comm_t *c, void *arg) {
  (void)arg;
  nccl_env(bagua_comm_rank(c), bagua_comm_size(c));
  ctx_t x;
  ctx_init(&x, c);
  float *cpu = malloc(x.total * sizeof(float)), *gpu = malloc(x.total * sizeof(float));
  if (!cpu || !gpu) TEST_FAIL("out of memory");
  if (x.rank == 0)
    printf("%d rank(s), %zu weights in %d tensors, %d steps:\n", x.size, x.total, NT, STEPS);
  for (size_t n = 0; n < sizeof(k_cases) / sizeof(k_cases[0]); n++) {
    const case_t *k = &k_cases[n];
    double t0 = mp_now();
    uint64_t rounds = run(c, &x, k, 1, gpu);
    double secs = mp_now() - t0;
    for (size_t i = 0; i < x.total; i++)
      if (!isfinite(gpu[i]))
        TEST_FAIL("rank %d, %s: cuda weight %zu is %g", x.rank, k->name, i, (double)gpu[i]);
    if (is_async(k)) {
      /* Averaging in the background depends on timing: only the end state is defined. */
      expect_same_on_ranks(c, &x, k, gpu, "cuda");
      if (rounds < 1) TEST_FAIL("rank %d, %s: no background averaging round", x.rank, k->name);
      if (x.rank == 0)
        printf("  %-70s same on every rank after async_abort (%llu rounds, %.2f s)\n", k->name,
               (unsigned long long)rounds, secs);
      continue;
    }
    run(c, &x, k, 0, cpu);
    compare(&x, k, cpu, gpu, secs);
    if (centralized(k) && x.size > 1) {
      expect_same_on_ranks(c, &x, k, gpu, "cuda");
      expect_same_on_ranks(c, &x, k, cpu, "cpu");
    }
  }
  free(cpu);
  free(gpu);
  ctx_free(&x);
  ASSERT_OK(bagua_barrier(c));
  if (x.rank == 0) printf("rank 0 of %d: cuda mode matches cpu mode\n", x.size);
  return 0;
}

/* ---- failures (two ranks) ---- */

enum { SMALL = 4096 };

typedef struct {
  bagua_ddp_t *ddp;
  float *param, *grad;
  cudaStream_t stream;
} small_t;

/* A one-tensor gradient_allreduce context in cuda mode that has completed two steps on both
 * ranks, so that NCCL's connections (made lazily, on the first exchange) exist. */
static void small_open(bagua_comm_t *c, small_t *m) {
  nccl_env(bagua_comm_rank(c), bagua_comm_size(c));
  CUDA_OK(cudaSetDevice(DEV));
  CUDA_OK(cudaStreamCreateWithFlags(&m->stream, cudaStreamNonBlocking));
  CUDA_OK(cudaMalloc((void **)&m->param, SMALL * sizeof(float)));
  CUDA_OK(cudaMalloc((void **)&m->grad, SMALL * sizeof(float)));
  CUDA_OK(cudaMemset(m->param, 0, SMALL * sizeof(float)));
  CUDA_OK(cudaMemset(m->grad, 0, SMALL * sizeof(float)));
  CUDA_OK(cudaDeviceSynchronize());
  bagua_ddp_config_t cfg = BAGUA_DDP_CONFIG_INIT;
  cfg.device = "cuda";
  cfg.cuda_device = DEV;
  cfg.cuda_stream = m->stream;
  ASSERT_OK(bagua_ddp_create(c, &cfg, &m->ddp));
  ASSERT_OK(bagua_ddp_register(m->ddp, "x", m->param, m->grad, SMALL));
  ASSERT_OK(bagua_ddp_ready(m->ddp));
  ASSERT_OK(bagua_ddp_step(m->ddp));
  ASSERT_OK(bagua_ddp_step(m->ddp));
  CUDA_OK(cudaStreamSynchronize(m->stream));
}

static void small_close(small_t *m) {
  bagua_ddp_destroy(m->ddp);
  cudaFree(m->param);
  cudaFree(m->grad);
  cudaStreamDestroy(m->stream);
}

/*
 * Steps until one fails or `limit_s` pass. In cuda mode a step may return once its work is
 * enqueued, so a stuck collective can surface in a later call; a short pause between steps
 * keeps the number of queued collectives small.
 */
static bagua_status_t step_until_error(bagua_ddp_t *ddp, double limit_s, double *secs) {
  double t0 = mp_now();
  bagua_status_t st = BAGUA_OK;
  while (st == BAGUA_OK && mp_now() - t0 < limit_s) {
    st = bagua_ddp_step(ddp);
    if (st == BAGUA_OK) usleep(1000);
  }
  *secs = mp_now() - t0;
  return st;
}

static void *abort_later(void *arg) {
  usleep(300 * 1000);
  bagua_ddp_abort(arg);
  return NULL;
}

/* Rank 1 stalls before its step: rank 0's step can only end by the abort from its other
 * thread. Rank 1 then finds its peer gone and must fail too, at the latest by timeout. */
static int body_abort(bagua_comm_t *c, void *arg) {
  int timeout_ms = *(const int *)arg, me = bagua_comm_rank(c);
  small_t m;
  small_open(c, &m);
  double secs;
  bagua_status_t st;
  if (me == 0) {
    pthread_t th;
    ASSERT_EQ(pthread_create(&th, NULL, abort_later, m.ddp), 0);
    st = step_until_error(m.ddp, 20.0, &secs);
    pthread_join(th, NULL);
    printf("abort: rank 0's step returned %s %.3f s after it began (abort at 0.3 s)\n",
           bagua_err_name(st), secs);
    ASSERT_STATUS(st, BAGUA_ERR_ABORTED);
    if (!(secs > 0.25 && secs < 3.3)) TEST_FAIL("the aborted step took %.3f s", secs);
    ASSERT_STATUS(bagua_ddp_step(m.ddp), BAGUA_ERR_ABORTED);
    ASSERT_STATUS(bagua_ddp_grad_ready(m.ddp, 0), BAGUA_ERR_ABORTED);
  } else {
    usleep(1500 * 1000);
    st = step_until_error(m.ddp, timeout_ms / 1000.0 + 5.0, &secs);
    printf("abort: rank 1, whose peer aborted, failed with %s after %.3f s\n", bagua_err_name(st),
           secs);
    if (st == BAGUA_OK) TEST_FAIL("rank 1 kept stepping although its peer aborted");
  }
  small_close(&m);
  return 0;
}

/* Rank 1 never calls the step (it stays alive, its context healthy): rank 0's step must fail
 * with BAGUA_ERR_TIMEOUT once BAGUA_COMM_TIMEOUT_MS has passed without progress. */
static int body_timeout(bagua_comm_t *c, void *arg) {
  int timeout_ms = *(const int *)arg, me = bagua_comm_rank(c);
  small_t m;
  small_open(c, &m);
  if (me == 0) {
    double secs;
    bagua_status_t st = step_until_error(m.ddp, timeout_ms / 1000.0 + 10.0, &secs);
    printf("timeout: rank 0's step returned %s after %.3f s (timeout %.1f s)\n", bagua_err_name(st),
           secs, timeout_ms / 1000.0);
    ASSERT_STATUS(st, BAGUA_ERR_TIMEOUT);
    if (!(secs >= 0.9 * timeout_ms / 1000.0 && secs < timeout_ms / 1000.0 + 5.0))
      TEST_FAIL("the step timed out after %.3f s, the timeout being %d ms", secs, timeout_ms);
    ASSERT_STATUS(bagua_ddp_step(m.ddp), BAGUA_ERR_TIMEOUT);
  } else {
    /* Long enough for rank 0 to time out and finish; then leave without a collective. */
    usleep((useconds_t)(timeout_ms + 6000) * 1000);
    bagua_ddp_abort(m.ddp);
  }
  small_close(&m);
  return 0;
}

int main(int argc, char **argv) {
  int nranks = argc > 1 ? atoi(argv[1]) : 1;
  if (nranks < 1 || nranks > 2) {
    fprintf(stderr, "usage: test_gpu_ddp 1|2\n");
    return 2;
  }
  gpu_require_device_in_child();
  ASSERT_EQ(bagua_nccl_available(), 1);
  double t0 = mp_now();
  mp_opts_t o = {0};
  o.nranks = nranks;
  o.transport = BAGUA_TRANSPORT_AUTO;
  o.timeout_ms = 30000;
  o.deadline_s = 420;
  if (mp_run(&o, body_compare, NULL) != 0) TEST_FAIL("cuda vs cpu comparison failed");
  if (nranks == 2) {
    /* The timeouts are set both ways: in the communicator's configuration, which its splits
     * and NCCL communicators inherit, and in the environment the library reads. */
    int abort_timeout_ms = 6000, stuck_timeout_ms = 4000;
    o.deadline_s = 60;
    o.timeout_ms = abort_timeout_ms;
    o.setenv_list = "BAGUA_COMM_TIMEOUT_MS=6000";
    if (mp_run(&o, body_abort, &abort_timeout_ms) != 0) TEST_FAIL("abort check failed");
    o.timeout_ms = stuck_timeout_ms;
    o.setenv_list = "BAGUA_COMM_TIMEOUT_MS=4000";
    if (mp_run(&o, body_timeout, &stuck_timeout_ms) != 0) TEST_FAIL("timeout check failed");
  }
  printf("test_gpu_ddp %d: ok in %.1f s\n", nranks, mp_now() - t0);
  return 0;
}
