/*
 * The GPU training loop (see train_cuda.h).
 */
#include "train_cuda.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "data_cuda.h"
#include "grad_sync.h"
#include "mlp.h"
#include "mlp_cuda.h"
#include "report.h"
#include "sampler.h"
#include "train.h"

/* Rows per forward pass when evaluating. Larger than the CPU loop's 256: on a GPU a pass costs
 * about the same whatever its size up to thousands of rows, and the buffers are small. */
#define EVAL_BATCH 1024

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Everything one rank's run owns. */
typedef struct {
  const fm_options_t *o;
  bagua_comm_t *comm;
  const fm_dataset_t *data;
  int rank, world, device;
  size_t per_rank, steps_per_epoch;
  /* The host model only provides the initial weights (fm_mlp_create, so they equal the CPU
   * path's) and receives the final ones for the checksum. */
  fm_mlp_t host;
  fm_mlp_cuda_t *model;
  fm_data_cuda_t *dev_data;
  bagua_ddp_t *ddp;
  size_t *perm, *idx; /* shuffle scratch and this rank's examples for the epoch */
  int64_t step;       /* optimizer steps taken */
  int expected_layer; /* the layer the next grad-ready callback must name */
} trainer_t;

static int cuda_failed(const trainer_t *t, const char *what) {
  fprintf(stderr, "fashion_mnist: rank %d: %s failed on the GPU: %s\n", t->rank, what,
          fm_cuda_error());
  return 1;
}

static void ddp_failed(const trainer_t *t, const char *what, bagua_status_t st) {
  fprintf(stderr, "fashion_mnist: rank %d: %s failed: %s%s%s\n", t->rank, what, bagua_strerror(st),
          *bagua_last_error() ? ": " : "", bagua_last_error());
}

/* 1 when every rank passes ok != 0 (see main.c's all_ranks_ok). */
static int all_ranks_ok(bagua_comm_t *comm, int ok) {
  int32_t v = ok;
  if (bagua_comm_size(comm) == 1) return ok;
  if (bagua_allreduce(comm, &v, &v, 1, BAGUA_I32, BAGUA_MIN) != BAGUA_OK) return 0;
  return v;
}

/* The grad-ready hook: layer `layer`'s gradient kernels are enqueued, so the data-parallel
 * layer records its event on the compute stream and may start communicating the bucket. */
static int on_grad_ready(void *ctx, int layer) {
  trainer_t *t = ctx;
  if (layer != t->expected_layer) {
    fprintf(stderr, "fashion_mnist: gradient of layer %d ready, expected layer %d\n", layer,
            t->expected_layer);
    return BAGUA_ERR_INTERNAL;
  }
  t->expected_layer--;
  return bagua_ddp_grad_ready(t->ddp, t->host.nlayers - 1 - layer);
}

/* Fraction of the test split classified correctly by the current device parameters. */
static int evaluate(trainer_t *t, double *acc) {
  const fm_split_t *test = &t->data->test;
  int64_t correct = 0;
  /* The accumulators must hold nothing but this evaluation's counts. */
  if (fm_mlp_cuda_take_stats(t->model, NULL, NULL) != 0) return cuda_failed(t, "evaluation");
  for (size_t first = 0; first < test->count; first += EVAL_BATCH) {
    int n = (int)(test->count - first < EVAL_BATCH ? test->count - first : EVAL_BATCH);
    if (fm_data_cuda_gather_test(t->dev_data, first, n) != 0 ||
        fm_mlp_cuda_forward(t->model, fm_data_cuda_x(t->dev_data), n) != 0 ||
        fm_mlp_cuda_count_correct(t->model, fm_data_cuda_y(t->dev_data)) != 0)
      return cuda_failed(t, "evaluation");
  }
  if (fm_mlp_cuda_take_stats(t->model, NULL, &correct) != 0) return cuda_failed(t, "evaluation");
  *acc = test->count ? (double)correct / (double)test->count : 0.0;
  return 0;
}

static bagua_ddp_stats_t ddp_stats(const trainer_t *t) {
  bagua_ddp_stats_t st = {0};
  st.struct_size = sizeof(st);
  bagua_ddp_stats(t->ddp, &st);
  return st;
}

/* One pass over this rank's shard. Returns 0 or 1 (after printing the failure). */
static int run_epoch(trainer_t *t, int epoch, fm_epoch_stats_t *es) {
  const fm_options_t *o = t->o;
  fm_sampler_epoch(o->seed, epoch, t->data->train.count, t->rank, t->world, t->perm, t->idx);
  bagua_ddp_stats_t s0 = ddp_stats(t);
  double t0 = now_s();
  if (fm_data_cuda_set_epoch(t->dev_data, t->idx, t->per_rank) != 0)
    return cuda_failed(t, "uploading the epoch's sample order");
  for (size_t s = 0; s < t->steps_per_epoch; s++) {
    size_t first = s * (size_t)o->batch_size, left = t->per_rank - first;
    int b = (int)(left < (size_t)o->batch_size ? left : (size_t)o->batch_size);
    if (fm_data_cuda_gather_train(t->dev_data, first, b) != 0 ||
        fm_mlp_cuda_forward(t->model, fm_data_cuda_x(t->dev_data), b) != 0 ||
        fm_mlp_cuda_loss(t->model, fm_data_cuda_y(t->dev_data)) != 0)
      return cuda_failed(t, "forward pass");
    t->expected_layer = t->host.nlayers - 1;
    int rc = fm_mlp_cuda_backward(t->model, on_grad_ready, t);
    if (rc == FM_CUDA_FAILED) return cuda_failed(t, "backward pass");
    bagua_status_t st = rc ? (bagua_status_t)rc : bagua_ddp_step(t->ddp);
    if (st != BAGUA_OK) {
      char what[96];
      snprintf(what, sizeof(what), "gradient synchronisation at step %lld", (long long)t->step);
      ddp_failed(t, what, st);
      return 1;
    }
    t->step++;
  }
  /* Waits for the GPU, so the epoch's time covers all of its work. */
  double loss_sum;
  int64_t correct;
  if (fm_mlp_cuda_take_stats(t->model, &loss_sum, &correct) != 0)
    return cuda_failed(t, "the epoch's training steps");
  bagua_ddp_stats_t s1 = ddp_stats(t);
  es->loss_sum = loss_sum;
  es->correct = (double)correct;
  es->seconds = now_s() - t0;
  es->comm_seconds = s1.comm_s_total - s0.comm_s_total;
  es->bytes = s1.bytes_total - s0.bytes_total;
  return 0;
}

/* Rank 0's epoch line, as train.c prints it; the test accuracy is measured on the GPU. */
static int report_epoch(trainer_t *t, int epoch, const fm_epoch_stats_t *es) {
  fm_epoch_stats_t global = *es;
  double acc;
  if (fm_report_reduce(t->comm, &global) != BAGUA_OK) return 1;
  if (t->rank != 0) return 0;
  if (evaluate(t, &acc) != 0) return 1;
  fm_report_epoch(t->o, epoch, &global, (double)t->per_rank * t->world, t->steps_per_epoch, acc,
                  ddp_stats(t).overlap_total);
  return 0;
}

/* Model, data and buffers of this rank; returns 0 or an exit status. Local: no collective. */
static int setup_local(trainer_t *t) {
  const fm_options_t *o = t->o;
  int sizes[FM_MAX_HIDDEN + 2];
  size_t n = t->data->train.count;
  sizes[0] = FM_IMAGE_PIXELS;
  for (int i = 0; i < o->nhidden; i++) sizes[i + 1] = o->hidden[i];
  sizes[o->nhidden + 1] = FM_CLASSES;
  int max_batch = o->batch_size > EVAL_BATCH ? o->batch_size : EVAL_BATCH;
  float scale, shift;
  fm_dataset_normalisation(&scale, &shift);
  t->perm = malloc(sizeof(size_t) * (n ? n : 1));
  t->idx = malloc(sizeof(size_t) * (t->per_rank ? t->per_rank : 1));
  /* The host model holds weights only, so its activation buffers need a single row. */
  if (!t->perm || !t->idx || fm_mlp_create(&t->host, sizes, o->nhidden + 2, 1, o->seed) != 0) {
    fprintf(stderr, "fashion_mnist: out of memory\n");
    return 1;
  }
  if (fm_mlp_cuda_create(&t->host, max_batch, &t->model) != 0)
    return cuda_failed(t, "setting up the model");
  if (fm_data_cuda_create(t->data, t->per_rank, max_batch, scale, shift,
                          fm_mlp_cuda_stream(t->model), &t->dev_data) != 0)
    return cuda_failed(t, "uploading the data set");
  return 0;
}

/*
 * The data-parallel context in CUDA mode over this rank's device buffers. Layers are
 * registered last first (backward order); both the parameters and the gradients are the
 * model's own device arrays (copy mode): the library reads the gradients after the event
 * bagua_ddp_grad_ready() records, and writes the updated weights back into the parameters on
 * the model's stream, where the next forward pass is ordered after them.
 */
static int setup_ddp(trainer_t *t) {
  bagua_ddp_config_t cfg;
  long total_steps = (long)t->steps_per_epoch * t->o->epochs;
  fm_grad_sync_ddp_config(t->o, total_steps, &cfg);
  cfg.device = "cuda";
  cfg.cuda_device = t->device;
  cfg.cuda_stream = fm_mlp_cuda_stream(t->model);
  bagua_status_t st = bagua_ddp_create(t->comm, &cfg, &t->ddp);
  float *params = fm_mlp_cuda_params(t->model), *grads = fm_mlp_cuda_grads(t->model);
  for (int l = t->host.nlayers - 1; l >= 0 && st == BAGUA_OK; l--) {
    const fm_layer_t *ly = &t->host.layer[l];
    char name[32];
    snprintf(name, sizeof(name), "layer%d", l);
    st = bagua_ddp_register(t->ddp, name, params + ly->offset, grads + ly->offset, ly->count);
  }
  if (st == BAGUA_OK) st = bagua_ddp_ready(t->ddp);
  if (st != BAGUA_OK) {
    char what[96];
    snprintf(what, sizeof(what), "setting up %s on the GPU", fm_algorithm_name(t->o->algorithm));
    ddp_failed(t, what, st);
    return st == BAGUA_ERR_NOT_SUPPORTED || st == BAGUA_ERR_INVALID_ARG ? 2 : 1;
  }
  return 0;
}

static int setup(trainer_t *t) {
  size_t n = t->data->train.count;
  t->per_rank = fm_sampler_per_rank(n, t->world);
  if (t->per_rank == 0) {
    fprintf(stderr, "fashion_mnist: %zu training examples cannot be shared by %d ranks\n", n,
            t->world);
    return 2;
  }
  t->steps_per_epoch = (t->per_rank + (size_t)t->o->batch_size - 1) / (size_t)t->o->batch_size;
  /* bagua_ddp_create() is collective: a rank that could not allocate its model says so to the
   * others first, so that they fail at once instead of waiting for it until the timeout. */
  int status = setup_local(t);
  if (!all_ranks_ok(t->comm, status == 0)) {
    if (status == 0)
      fprintf(stderr, "fashion_mnist: rank %d: another rank could not set up its GPU model\n",
              t->rank);
    return status ? status : 1;
  }
  return setup_ddp(t);
}

static void teardown(trainer_t *t) {
  /* The context uses the model's stream until it is destroyed, so it goes first. */
  bagua_ddp_destroy(t->ddp);
  fm_data_cuda_destroy(t->dev_data);
  fm_mlp_cuda_destroy(t->model);
  fm_mlp_destroy(&t->host);
  free(t->perm);
  free(t->idx);
}

int fm_train_run_cuda(const fm_options_t *o, bagua_comm_t *comm, const fm_dataset_t *data,
                      int device) {
  trainer_t t = {.o = o, .comm = comm, .data = data, .device = device};
  t.rank = bagua_comm_rank(comm);
  t.world = bagua_comm_size(comm);
  double train_seconds = 0.0, acc;
  int status = setup(&t);
  if (status != 0) goto out;
  status = 1;
  if (t.rank == 0) {
    char name[256], desc[300];
    fm_cuda_device_name(name, sizeof(name));
    snprintf(desc, sizeof(desc), "cuda:%d (%s)", device, name);
    fm_report_header(o, comm, &t.host, data, t.per_rank, t.steps_per_epoch, fm_mlp_cuda_gemm_name(),
                     desc);
  }
  for (int epoch = 1; epoch <= o->epochs; epoch++) {
    fm_epoch_stats_t es;
    if (run_epoch(&t, epoch, &es) != 0 || report_epoch(&t, epoch, &es) != 0) goto out;
    train_seconds += es.seconds;
  }
  if (evaluate(&t, &acc) != 0) goto out;
  /* The checksum covers the weights the context last wrote back into the model's arrays. */
  if (fm_mlp_cuda_download(t.model, FM_MLP_CUDA_PARAMS, t.host.params) != 0) {
    cuda_failed(&t, "copying the parameters to the host");
    goto out;
  }
  if (t.rank == 0) fm_report_done(t.step, train_seconds);
  fm_report_final(t.rank, t.step, fm_params_crc(&t.host), acc);
  status = 0;
out:
  teardown(&t);
  return status;
}
