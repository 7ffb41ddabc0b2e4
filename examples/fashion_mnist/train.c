/*
 * Training loop, evaluation and reporting (see train.h).
 */
#include "train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zlib.h>

#include "bagua/loader.h"
#include "grad_sync.h"
#include "mlp.h"
#include "optim.h"
#include "sampler.h"

/* Rows per forward pass when evaluating: large enough to keep the GEMM efficient. */
#define EVAL_BATCH 256

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Fraction of the test split classified correctly by the current parameters. */
static double evaluate(fm_mlp_t *m, const fm_split_t *test, float *x, uint8_t *y) {
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

static uint32_t params_crc(const fm_mlp_t *m) {
  uLong crc = crc32(0L, Z_NULL, 0);
  return (uint32_t)crc32_z(crc, (const Bytef *)m->params, m->nparams * sizeof(float));
}

static void print_header(const fm_options_t *o, bagua_comm_t *comm, const fm_mlp_t *m,
                         const fm_dataset_t *data, size_t per_rank, size_t steps) {
  int world = bagua_comm_size(comm);
  char arch[256];
  int used = snprintf(arch, sizeof(arch), "%d", m->layer[0].in);
  for (int l = 0; l < m->nlayers && used < (int)sizeof(arch); l++)
    used += snprintf(arch + used, sizeof(arch) - (size_t)used, "-%d", m->layer[l].out);
  printf(
      "fashion_mnist: %d rank%s (%s), model %s (%zu params), gemm %s, train %zu (%zu per rank, "
      "%zu steps/epoch), test %zu, batch %d per rank, lr %g momentum %g weight_decay %g "
      "seed %llu, algorithm %s\n",
      world, world == 1 ? "" : "s", world == 1 ? "single process" : bagua_comm_transport_name(comm),
      arch, m->nparams, fm_gemm_isa(), data->train.count, per_rank, steps, data->test.count,
      o->batch_size, o->lr, o->momentum, o->weight_decay, (unsigned long long)o->seed,
      fm_algorithm_name(o->algorithm));
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

/* What one epoch measured on this rank. */
typedef struct {
  double loss_sum, correct, seconds, comm_seconds;
  uint64_t bytes;
} epoch_stats_t;

/* One pass over this rank's shard: forward, loss, backward with the grad-ready hook, step. */
static bagua_status_t run_epoch(trainer_t *t, int epoch, epoch_stats_t *es) {
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
static bagua_status_t report_epoch(trainer_t *t, int epoch, const epoch_stats_t *es) {
  double stats[2] = {es->loss_sum, es->correct};
  if (t->world > 1) {
    bagua_status_t st = bagua_allreduce(t->comm, stats, stats, 2, BAGUA_F64, BAGUA_SUM);
    if (st != BAGUA_OK) {
      fprintf(stderr, "fashion_mnist: rank %d: epoch statistics allreduce failed: %s\n", t->rank,
              bagua_strerror(st));
      return st;
    }
  }
  if (t->rank != 0) return BAGUA_OK;
  double total = (double)t->per_rank * t->world;
  double acc = evaluate(&t->model, &t->data->test, t->x, t->y);
  printf(
      "epoch %d/%d loss %.4f train_acc %.4f test_acc %.4f time %.2fs samples/s %.0f "
      "bytes/step %.0f comm %.1f%% overlap %.1f%%\n",
      epoch, t->o->epochs, stats[0] / total, stats[1] / total, acc, es->seconds,
      total / es->seconds, (double)es->bytes / (double)t->steps_per_epoch,
      100.0 * es->comm_seconds / es->seconds, 100.0 * fm_grad_sync_overlap(t->sync));
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
  if (t.rank == 0) print_header(o, comm, &t.model, data, t.per_rank, t.steps_per_epoch);
  for (int epoch = 1; epoch <= o->epochs; epoch++) {
    epoch_stats_t es;
    if (run_epoch(&t, epoch, &es) != BAGUA_OK || report_epoch(&t, epoch, &es) != BAGUA_OK) goto out;
    train_seconds += es.seconds;
  }
  double acc = evaluate(&t.model, &data->test, t.x, t.y);
  if (t.rank == 0)
    printf("done: %lld steps in %.1fs of training\n", (long long)t.step, train_seconds);
  printf("final rank=%d step=%lld params_crc=%08x test_acc=%.4f\n", t.rank, (long long)t.step,
         params_crc(&t.model), acc);
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

/* ---------------------------------------------------------------------------------------- */
/* --elastic                                                                                 */
/* ---------------------------------------------------------------------------------------- */

typedef struct {
  const fm_options_t *o;
  bagua_elastic_t *e;
  const fm_dataset_t *data;
  fm_mlp_t model;
  fm_sgd_t opt;
  bagua_sampler_t *sampler;
  bagua_sampler_state_t pos; /* registered: the sampler position of the last commit */
  int64_t samples_seen;      /* registered: examples processed by all ranks */
  int64_t *batch;            /* this rank's sample indices for the step */
  size_t *bidx;              /* the same as size_t, for fm_dataset_gather */
  float *x;
  uint8_t *y;
} elastic_trainer_t;

static double now_ms(void) {
  return now_s() * 1000.0;
}

/* Puts the sampler at the registered position, as this rank of the current world. */
static bagua_status_t adopt_position(elastic_trainer_t *t) {
  bagua_status_t st = bagua_sampler_set_state(t->sampler, 0, &t->pos);
  if (st == BAGUA_OK)
    st = bagua_sampler_set_world(t->sampler, bagua_elastic_rank(t->e), bagua_elastic_size(t->e),
                                 t->pos.committed_steps);
  if (st != BAGUA_OK)
    fprintf(stderr, "fashion_mnist: rank %d: cannot position the sampler: %s\n",
            bagua_elastic_rank(t->e), bagua_strerror(st));
  return st;
}

static bagua_status_t commit(elastic_trainer_t *t) {
  bagua_sampler_commit(t->sampler);
  bagua_sampler_get_state(t->sampler, &t->pos);
  return bagua_elastic_commit(t->e);
}

/* Moves to the newest round (after a restore when `failed`) and reports it on the new rank 0. */
static bagua_status_t change_round(elastic_trainer_t *t, int failed) {
  double t0 = now_ms();
  if (failed) bagua_elastic_restore(t->e);
  bagua_status_t st = bagua_elastic_rebuild(t->e);
  if (st != BAGUA_OK) {
    fprintf(stderr, "fashion_mnist: rebuild failed: %s%s%s\n", bagua_strerror(st),
            *bagua_last_error() ? ": " : "", bagua_last_error());
    return st;
  }
  if ((st = adopt_position(t)) != BAGUA_OK) return st;
  if (bagua_elastic_rank(t->e) == 0)
    printf("round %lld world %d recovery_ms %.0f\n", (long long)bagua_elastic_round(t->e),
           bagua_elastic_size(t->e), now_ms() - t0);
  return BAGUA_OK;
}

static int no_hook(void *ctx, int layer) {
  (void)ctx;
  (void)layer;
  return 0;
}

/* One training step on `n` samples; BAGUA_OK, or the allreduce's error. */
static bagua_status_t elastic_step(elastic_trainer_t *t, size_t n) {
  fm_mlp_t *m = &t->model;
  for (size_t i = 0; i < n; i++) t->bidx[i] = (size_t)t->batch[i];
  fm_dataset_gather(&t->data->train, t->bidx, 0, n, t->x, t->y);
  fm_mlp_forward(m, t->x, (int)n);
  int correct = 0;
  fm_mlp_loss(m, t->y, &correct);
  fm_mlp_backward(m, no_hook, NULL);
  int world = bagua_elastic_size(t->e);
  if (world > 1) {
    bagua_status_t st = bagua_allreduce(bagua_elastic_comm(t->e), m->grads, m->grads, m->nparams,
                                        BAGUA_F32, BAGUA_SUM);
    if (st != BAGUA_OK) return st;
    float inv = 1.0f / (float)world;
    for (size_t i = 0; i < m->nparams; i++) m->grads[i] *= inv;
  }
  fm_sgd_step(&t->opt, m);
  return BAGUA_OK;
}

int fm_train_run_elastic(const fm_options_t *o, bagua_elastic_t *e, const fm_dataset_t *data) {
  elastic_trainer_t t = {.o = o, .e = e, .data = data};
  int status = 1;
  double *cx = NULL;
  size_t n = data->train.count;
  int sizes[FM_MAX_HIDDEN + 2];
  sizes[0] = FM_IMAGE_PIXELS;
  for (int i = 0; i < o->nhidden; i++) sizes[i + 1] = o->hidden[i];
  sizes[o->nhidden + 1] = FM_CLASSES;
  int max_batch = o->batch_size > EVAL_BATCH ? o->batch_size : EVAL_BATCH;
  t.batch = malloc(sizeof(int64_t) * (size_t)o->batch_size);
  t.bidx = malloc(sizeof(size_t) * (size_t)o->batch_size);
  t.x = malloc(sizeof(float) * (size_t)max_batch * FM_IMAGE_PIXELS);
  t.y = malloc((size_t)max_batch);
  cx = calloc(n ? n : 1, sizeof(double)); /* equal complexities: a plain shuffled sampler */
  if (!t.batch || !t.bidx || !t.x || !t.y || !cx ||
      fm_mlp_create(&t.model, sizes, o->nhidden + 2, max_batch, o->seed) != 0 ||
      fm_sgd_init(&t.opt, t.model.nparams, o->lr, o->momentum, o->weight_decay) != 0) {
    fprintf(stderr, "fashion_mnist: out of memory\n");
    goto out;
  }
  if (t.opt.momentum_buf) memset(t.opt.momentum_buf, 0, sizeof(float) * t.model.nparams);
  bagua_sampler_config_t sc = BAGUA_SAMPLER_CONFIG_INIT;
  sc.num_samples = (int64_t)n;
  sc.complexities = cx;
  sc.seed = o->seed;
  sc.shuffle = 1;
  sc.batch_size = o->batch_size;
  sc.drop_last = 1;
  sc.rank = bagua_elastic_rank(e);
  sc.world = bagua_elastic_size(e);
  bagua_status_t st = bagua_sampler_create(&sc, &t.sampler);
  if (st == BAGUA_OK) st = bagua_sampler_set_epoch(t.sampler, 0);
  if (st != BAGUA_OK) {
    fprintf(stderr, "fashion_mnist: sampler: %s\n", bagua_strerror(st));
    status = 2;
    goto out;
  }
  bagua_sampler_get_state(t.sampler, &t.pos);
  if ((st = bagua_elastic_register(e, "params", t.model.params, sizeof(float) * t.model.nparams)) !=
          BAGUA_OK ||
      (t.opt.momentum_buf &&
       (st = bagua_elastic_register(e, "momentum", t.opt.momentum_buf,
                                    sizeof(float) * t.model.nparams)) != BAGUA_OK) ||
      (st = bagua_elastic_register(e, "sgd.steps", &t.opt.steps, sizeof(t.opt.steps))) !=
          BAGUA_OK ||
      (st = bagua_elastic_register(e, "sampler", &t.pos, sizeof(t.pos))) != BAGUA_OK ||
      (st = bagua_elastic_register(e, "samples_seen", &t.samples_seen, sizeof(t.samples_seen))) !=
          BAGUA_OK ||
      (st = bagua_elastic_sync(e)) != BAGUA_OK || (st = adopt_position(&t)) != BAGUA_OK) {
    fprintf(stderr, "fashion_mnist: elastic state: %s%s%s\n", bagua_strerror(st),
            *bagua_last_error() ? ": " : "", bagua_last_error());
    goto out;
  }
  if (bagua_elastic_rank(e) == 0)
    printf("fashion_mnist: elastic, round %lld world %d, model %zu params, epoch %lld step %lld\n",
           (long long)bagua_elastic_round(e), bagua_elastic_size(e), t.model.nparams,
           (long long)bagua_elastic_epoch(e), (long long)bagua_elastic_step(e));
  double t0 = now_s();
  while (bagua_elastic_epoch(e) < o->epochs) {
    if (bagua_elastic_check(e)) {
      if (change_round(&t, 0) != BAGUA_OK) goto out;
      continue;
    }
    size_t got = 0;
    st = bagua_sampler_next_batch(t.sampler, t.batch, (size_t)o->batch_size, &got);
    if (st != BAGUA_OK) {
      fprintf(stderr, "fashion_mnist: sampler: %s\n", bagua_strerror(st));
      goto out;
    }
    if (got == 0) { /* the epoch is exhausted: the next one starts with the current world */
      int64_t epoch = bagua_elastic_epoch(e) + 1;
      if (bagua_elastic_rank(e) == 0)
        printf("epoch %lld/%d done: step %lld samples_seen %lld test_acc %.4f\n", (long long)epoch,
               o->epochs, (long long)bagua_elastic_step(e), (long long)t.samples_seen,
               evaluate(&t.model, &data->test, t.x, t.y));
      bagua_elastic_set_epoch(e, epoch);
      if ((st = bagua_sampler_set_epoch(t.sampler, (uint64_t)epoch)) != BAGUA_OK ||
          (st = commit(&t)) != BAGUA_OK)
        goto out;
      continue;
    }
    st = elastic_step(&t, got);
    if (st != BAGUA_OK) {
      if (change_round(&t, 1) != BAGUA_OK) goto out;
      continue;
    }
    t.samples_seen += (int64_t)got * bagua_elastic_size(e);
    bagua_elastic_set_step(e, bagua_elastic_step(e) + 1);
    if (commit(&t) != BAGUA_OK) goto out;
  }
  double acc = evaluate(&t.model, &data->test, t.x, t.y);
  if (bagua_elastic_rank(e) == 0)
    printf("done: %lld steps in %.1fs\n", (long long)bagua_elastic_step(e), now_s() - t0);
  printf("final rank=%d step=%lld params_crc=%08x test_acc=%.4f samples_seen=%lld\n",
         bagua_elastic_rank(e), (long long)bagua_elastic_step(e), params_crc(&t.model), acc,
         (long long)t.samples_seen);
  status = 0;
out:
  bagua_sampler_destroy(t.sampler);
  fm_sgd_free(&t.opt);
  fm_mlp_destroy(&t.model);
  free(cx);
  free(t.batch);
  free(t.bidx);
  free(t.x);
  free(t.y);
  return status;
}
