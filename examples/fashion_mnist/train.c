/*
 * Training loop, evaluation and reporting (see train.h).
 */
#include "train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zlib.h>

#include "grad_sync.h"
#include "mlp.h"
#include "optim.h"
#include "report.h"
#include "sampler.h"

/* Rows per forward pass when evaluating: large enough to keep the GEMM efficient. */
#define EVAL_BATCH 256

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double fm_evaluate(fm_mlp_t *m, const fm_split_t *test, float *x, uint8_t *y) {
  size_t correct = 0;
  for (size_t first = 0; first < test->count; first += (size_t)m->max_batch) {
    size_t n =
        test->count - first < (size_t)m->max_batch ? test->count - first : (size_t)m->max_batch;
    fm_dataset_gather(test, NULL, first, n, x, y);
    fm_mlp_forward(m, x, (int)n);
    correct += (size_t)fm_mlp_count_correct(m, y);
  }
  return test->count ? (double)correct / (double)test->count : 0.0;
}

uint32_t fm_params_crc(const fm_mlp_t *m) {
  uLong crc = crc32(0L, Z_NULL, 0);
  return (uint32_t)crc32_z(crc, (const Bytef *)m->params, m->nparams * sizeof(float));
}

/* Everything one rank's training run owns. */
typedef struct {
  const fm_options_t *o;
  bagua_comm_t *comm;
  const fm_dataset_t *data;
  int rank, world;
  size_t per_rank, steps_per_epoch;
  fm_mlp_t model;
  fm_sgd_t opt;
  fm_grad_sync_t *sync;
  size_t *perm, *idx; /* shuffle scratch and this rank's examples for the epoch */
  float *x;           /* one batch of normalised images */
  uint8_t *y;         /* and its labels */
  int64_t step;       /* optimizer steps taken */
} trainer_t;

/* One pass over this rank's shard: forward, loss, backward with the grad-ready hook, step. */
static bagua_status_t run_epoch(trainer_t *t, int epoch, fm_epoch_stats_t *es) {
  const fm_options_t *o = t->o;
  fm_sampler_epoch(o->seed, epoch, t->data->train.count, t->rank, t->world, t->perm, t->idx);
  double t0 = now_s(), c0 = fm_grad_sync_comm_seconds(t->sync);
  uint64_t bytes0 = fm_grad_sync_bytes_sent(t->sync);
  int correct = 0;
  memset(es, 0, sizeof(*es));
  for (size_t s = 0; s < t->steps_per_epoch; s++) {
    size_t first = s * (size_t)o->batch_size, left = t->per_rank - first;
    int b = (int)(left < (size_t)o->batch_size ? left : (size_t)o->batch_size);
    fm_dataset_gather(&t->data->train, t->idx + first, 0, (size_t)b, t->x, t->y);
    fm_mlp_forward(&t->model, t->x, b);
    es->loss_sum += fm_mlp_loss(&t->model, t->y, &correct) * b;
    int rc = fm_mlp_backward(&t->model, fm_grad_sync_on_grad_ready, t->sync);
    bagua_status_t st = rc ? (bagua_status_t)rc : fm_grad_sync_step(t->sync);
    if (st != BAGUA_OK) {
      fprintf(stderr,
              "fashion_mnist: rank %d: gradient synchronisation failed at step %lld: %s%s%s\n",
              t->rank, (long long)t->step, bagua_strerror(st), *bagua_last_error() ? ": " : "",
              bagua_last_error());
      return st;
    }
    t->step++;
  }
  es->correct = correct;
  es->seconds = now_s() - t0;
  es->comm_seconds = fm_grad_sync_comm_seconds(t->sync) - c0;
  es->bytes = fm_grad_sync_bytes_sent(t->sync) - bytes0;
  return BAGUA_OK;
}

/* Rank 0's epoch line. Loss and accuracy cover the whole global epoch, not just rank 0's
 * shard; the small reduction that gathers them runs after the byte count was taken, so the
 * per-step traffic is gradients only. */
static bagua_status_t report_epoch(trainer_t *t, int epoch, const fm_epoch_stats_t *es) {
  fm_epoch_stats_t global = *es;
  bagua_status_t st = fm_report_reduce(t->comm, &global);
  if (st != BAGUA_OK || t->rank != 0) return st;
  double acc = fm_evaluate(&t->model, &t->data->test, t->x, t->y);
  fm_report_epoch(t->o, epoch, &global, (double)t->per_rank * t->world, t->steps_per_epoch, acc,
                  fm_grad_sync_overlap(t->sync));
  return BAGUA_OK;
}

/* Allocates the model, optimizer, synchroniser and buffers; returns an exit status. */
static int setup(trainer_t *t) {
  const fm_options_t *o = t->o;
  int sizes[FM_MAX_HIDDEN + 2];
  size_t n = t->data->train.count;
  t->per_rank = fm_sampler_per_rank(n, t->world);
  if (t->per_rank == 0) {
    fprintf(stderr, "fashion_mnist: %zu training examples cannot be shared by %d ranks\n", n,
            t->world);
    return 2;
  }
  t->steps_per_epoch = (t->per_rank + (size_t)o->batch_size - 1) / (size_t)o->batch_size;
  sizes[0] = FM_IMAGE_PIXELS;
  for (int i = 0; i < o->nhidden; i++) sizes[i + 1] = o->hidden[i];
  sizes[o->nhidden + 1] = FM_CLASSES;
  int max_batch = o->batch_size > EVAL_BATCH ? o->batch_size : EVAL_BATCH;
  t->perm = malloc(sizeof(size_t) * n);
  t->idx = malloc(sizeof(size_t) * t->per_rank);
  t->x = malloc(sizeof(float) * (size_t)max_batch * FM_IMAGE_PIXELS);
  t->y = malloc((size_t)max_batch);
  if (!t->perm || !t->idx || !t->x || !t->y ||
      fm_mlp_create(&t->model, sizes, o->nhidden + 2, max_batch, o->seed) != 0 ||
      fm_sgd_init(&t->opt, t->model.nparams, o->lr, o->momentum, o->weight_decay) != 0) {
    fprintf(stderr, "fashion_mnist: out of memory\n");
    return 1;
  }
  bagua_status_t st = fm_grad_sync_create(t->comm, &t->model, &t->opt, o,
                                          (long)t->steps_per_epoch * o->epochs, &t->sync);
  if (st != BAGUA_OK) return st == BAGUA_ERR_NOT_SUPPORTED ? 2 : 1;
  return 0;
}

int fm_train_run(const fm_options_t *o, bagua_comm_t *comm, const fm_dataset_t *data) {
  trainer_t t = {.o = o, .comm = comm, .data = data};
  t.rank = bagua_comm_rank(comm);
  t.world = bagua_comm_size(comm);
  double train_seconds = 0.0;
  int status = setup(&t);
  if (status != 0) goto out;
  status = 1;
  if (t.rank == 0)
    fm_report_header(o, comm, &t.model, data, t.per_rank, t.steps_per_epoch, fm_gemm_isa(), NULL);
  for (int epoch = 1; epoch <= o->epochs; epoch++) {
    fm_epoch_stats_t es;
    if (run_epoch(&t, epoch, &es) != BAGUA_OK || report_epoch(&t, epoch, &es) != BAGUA_OK) goto out;
    train_seconds += es.seconds;
  }
  double acc = fm_evaluate(&t.model, &data->test, t.x, t.y);
  if (t.rank == 0) fm_report_done(t.step, train_seconds);
  fm_report_final(t.rank, t.step, fm_params_crc(&t.model), acc);
  status = 0;
out:
  fm_grad_sync_destroy(t.sync);
  fm_sgd_free(&t.opt);
  fm_mlp_destroy(&t.model);
  free(t.perm);
  free(t.idx);
  free(t.x);
  free(t.y);
  return status;
}
