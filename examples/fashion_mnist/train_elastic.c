/*
 * --elastic training: the loop of train.c rebuilt around the in-process elastic API, the
 * load-balanced sampler and the data-parallel layer attached to the elastic context (see
 * train.h for what it prints).
 *
 * Exactly-once bookkeeping. After each step the ranks allgather the sample indices they just
 * trained on and mark them in a bitmap of the epoch (registered state, so a rolled-back step
 * unmarks its samples again). A sample marked twice is counted as a duplicate; at the end of
 * every epoch rank 0 prints how many samples were processed, missed and duplicated. With
 * drop_last the sampler leaves at most world - 1 samples of an epoch out.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bagua/ddp.h"
#include "bagua/loader.h"
#include "grad_sync.h"
#include "train.h"

#define EVAL_BATCH 256

typedef struct {
  const fm_options_t *o;
  bagua_elastic_t *e;
  const fm_dataset_t *data;
  fm_mlp_t model;
  fm_sgd_t opt;
  fm_grad_sync_t *sync;
  bagua_sampler_t *sampler;
  /* Registered state, identical on every rank. */
  bagua_sampler_state_t pos; /* the sampler position of the last commit */
  int64_t samples_seen;      /* examples processed by all ranks */
  int64_t duplicates;        /* samples of the current epoch processed more than once */
  uint8_t *seen;             /* bitmap of the current epoch's processed samples */
  size_t seen_bytes;
  /* Per step. */
  int64_t *batch; /* this rank's sample indices */
  int64_t *all;   /* every rank's, allgathered */
  size_t *bidx;   /* this rank's as size_t, for fm_dataset_gather */
  float *x;
  uint8_t *y;
  int first_step_pending; /* rank 0 reports the new round's first completed step */
} trainer_t;

static double mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + 1e-6 * (double)ts.tv_nsec;
}

static void report_error(const char *what, bagua_status_t st) {
  fprintf(stderr, "fashion_mnist: %s: %s%s%s\n", what, bagua_strerror(st),
          *bagua_last_error() ? ": " : "", bagua_last_error());
}

/* Puts the sampler at the registered position, as this rank of the current world. */
static bagua_status_t adopt_position(trainer_t *t) {
  bagua_status_t st = bagua_sampler_set_state(t->sampler, 0, &t->pos);
  if (st == BAGUA_OK)
    st = bagua_sampler_set_world(t->sampler, bagua_elastic_rank(t->e), bagua_elastic_size(t->e),
                                 t->pos.committed_steps);
  if (st != BAGUA_OK) report_error("cannot position the sampler", st);
  return st;
}

static bagua_status_t commit(trainer_t *t) {
  bagua_sampler_commit(t->sampler);
  bagua_sampler_get_state(t->sampler, &t->pos);
  return bagua_elastic_commit(t->e);
}

/* Result of a round change: go on, stop with an error, or leave (not a member any more). */
typedef enum { ROUND_OK, ROUND_FAILED, ROUND_LEFT } round_result_t;

/* Moves to the newest round (after a restore when `failed`) and reports it on rank 0. */
static round_result_t change_round(trainer_t *t, int failed) {
  double t0 = mono_ms();
  int64_t old_round = bagua_elastic_round(t->e);
  if (failed) bagua_elastic_restore(t->e);
  bagua_status_t st = bagua_elastic_rebuild(t->e);
  if (st == BAGUA_ERR_ABORTED) {
    printf("fashion_mnist: node not in the new round: left the job after round %lld at step %lld\n",
           (long long)old_round, (long long)bagua_elastic_step(t->e));
    return ROUND_LEFT;
  }
  if (st != BAGUA_OK) {
    report_error("rebuild failed", st);
    return ROUND_FAILED;
  }
  if (adopt_position(t) != BAGUA_OK) return ROUND_FAILED;
  if (bagua_elastic_rank(t->e) == 0) {
    printf("round %lld world %d recovery_ms %.0f%s\n", (long long)bagua_elastic_round(t->e),
           bagua_elastic_size(t->e), mono_ms() - t0, failed ? " (after a failed step)" : "");
    t->first_step_pending = 1;
  }
  return ROUND_OK;
}

/* One training step on `n` samples through the data-parallel layer. */
static bagua_status_t train_step(trainer_t *t, size_t n) {
  fm_mlp_t *m = &t->model;
  for (size_t i = 0; i < n; i++) t->bidx[i] = (size_t)t->batch[i];
  fm_dataset_gather(&t->data->train, t->bidx, 0, n, t->x, t->y);
  fm_mlp_forward(m, t->x, (int)n);
  int correct = 0;
  fm_mlp_loss(m, t->y, &correct);
  int rc = fm_mlp_backward(m, fm_grad_sync_on_grad_ready, t->sync);
  return rc ? (bagua_status_t)rc : fm_grad_sync_step(t->sync);
}

/* Marks every rank's samples of the step in the epoch bitmap (identical on all ranks). */
static bagua_status_t mark_samples(trainer_t *t, size_t n) {
  int world = bagua_elastic_size(t->e);
  bagua_status_t st = bagua_allgather(bagua_elastic_comm(t->e), t->batch, t->all, n, BAGUA_I64);
  if (st != BAGUA_OK) return st;
  for (size_t i = 0; i < n * (size_t)world; i++) {
    uint64_t k = (uint64_t)t->all[i];
    uint8_t bit = (uint8_t)(1u << (k & 7));
    if (t->seen[k >> 3] & bit) t->duplicates++;
    t->seen[k >> 3] |= bit;
  }
  t->samples_seen += (int64_t)n * world;
  return BAGUA_OK;
}

/* Rank 0's epoch line: accuracy and the exactly-once check. Resets the bitmap. */
static void end_epoch(trainer_t *t, int64_t epoch) {
  size_t n = t->data->train.count, processed = 0;
  for (size_t i = 0; i < t->seen_bytes; i++) processed += (size_t)__builtin_popcount(t->seen[i]);
  if (bagua_elastic_rank(t->e) == 0)
    printf(
        "epoch %lld/%d done: step %lld world %d samples_seen %lld test_acc %.4f coverage "
        "processed %zu of %zu missed %zu duplicates %lld\n",
        (long long)epoch, t->o->epochs, (long long)bagua_elastic_step(t->e),
        bagua_elastic_size(t->e), (long long)t->samples_seen,
        fm_evaluate(&t->model, &t->data->test, t->x, t->y), processed, n, n - processed,
        (long long)t->duplicates);
  memset(t->seen, 0, t->seen_bytes);
  t->duplicates = 0;
}

/* Model, sampler and registered state; then the synchronised start. Returns an exit status. */
static int setup(trainer_t *t) {
  const fm_options_t *o = t->o;
  size_t n = t->data->train.count;
  int sizes[FM_MAX_HIDDEN + 2];
  sizes[0] = FM_IMAGE_PIXELS;
  for (int i = 0; i < o->nhidden; i++) sizes[i + 1] = o->hidden[i];
  sizes[o->nhidden + 1] = FM_CLASSES;
  int max_batch = o->batch_size > EVAL_BATCH ? o->batch_size : EVAL_BATCH;
  t->seen_bytes = (n + 7) / 8;
  t->seen = calloc(t->seen_bytes ? t->seen_bytes : 1, 1);
  t->batch = malloc(sizeof(int64_t) * (size_t)o->batch_size);
  t->bidx = malloc(sizeof(size_t) * (size_t)o->batch_size);
  t->x = malloc(sizeof(float) * (size_t)max_batch * FM_IMAGE_PIXELS);
  t->y = malloc((size_t)max_batch);
  double *cx = calloc(n ? n : 1, sizeof(double)); /* equal complexities: a shuffled sampler */
  if (!t->seen || !t->batch || !t->bidx || !t->x || !t->y || !cx ||
      fm_mlp_create(&t->model, sizes, o->nhidden + 2, max_batch, o->seed) != 0 ||
      fm_sgd_init(&t->opt, t->model.nparams, o->lr, o->momentum, o->weight_decay) != 0) {
    fprintf(stderr, "fashion_mnist: out of memory\n");
    free(cx);
    return 1;
  }
  bagua_sampler_config_t sc = BAGUA_SAMPLER_CONFIG_INIT;
  sc.num_samples = (int64_t)n;
  sc.complexities = cx;
  sc.seed = o->seed;
  sc.shuffle = 1;
  sc.batch_size = o->batch_size;
  sc.drop_last = 1;
  sc.rank = bagua_elastic_rank(t->e);
  sc.world = bagua_elastic_size(t->e);
  bagua_status_t st = bagua_sampler_create(&sc, &t->sampler);
  free(cx);
  if (st == BAGUA_OK) st = bagua_sampler_set_epoch(t->sampler, 0);
  if (st != BAGUA_OK) {
    report_error("sampler", st);
    return 2;
  }
  bagua_sampler_get_state(t->sampler, &t->pos);
  bagua_elastic_t *e = t->e;
  /* The program's own state is synchronised first; the data-parallel context is created
   * after the sync, which is where a newcomer meets the survivors' rebuild (ddp.h). */
  if ((st = bagua_elastic_register(e, "sampler", &t->pos, sizeof(t->pos))) != BAGUA_OK ||
      (st = bagua_elastic_register(e, "samples_seen", &t->samples_seen, sizeof(int64_t))) !=
          BAGUA_OK ||
      (st = bagua_elastic_register(e, "duplicates", &t->duplicates, sizeof(int64_t))) != BAGUA_OK ||
      (st = bagua_elastic_register(e, "coverage", t->seen, t->seen_bytes)) != BAGUA_OK ||
      (st = bagua_elastic_sync(e)) != BAGUA_OK || (st = adopt_position(t)) != BAGUA_OK) {
    report_error("elastic state", st);
    return 1;
  }
  long total = (long)(n / ((size_t)o->batch_size * (size_t)bagua_elastic_size(e))) * o->epochs;
  st = fm_grad_sync_create_elastic(e, &t->model, &t->opt, o, total > 0 ? total : 1, &t->sync);
  if (st != BAGUA_OK) return st == BAGUA_ERR_NOT_SUPPORTED ? 2 : 1;
  return 0;
}

static void cleanup(trainer_t *t) {
  fm_grad_sync_destroy(t->sync); /* before the elastic context it is attached to */
  bagua_sampler_destroy(t->sampler);
  fm_sgd_free(&t->opt);
  fm_mlp_destroy(&t->model);
  free(t->seen);
  free(t->batch);
  free(t->all);
  free(t->bidx);
  free(t->x);
  free(t->y);
}

int fm_train_run_elastic(const fm_options_t *o, bagua_elastic_t *e, const fm_dataset_t *data) {
  trainer_t t = {.o = o, .e = e, .data = data};
  int status = setup(&t);
  if (status != 0) goto out;
  status = 1;
  if (bagua_elastic_rank(e) == 0)
    printf(
        "fashion_mnist: elastic, round %lld world %d, model %zu params, algorithm %s, epoch "
        "%lld step %lld\n",
        (long long)bagua_elastic_round(e), bagua_elastic_size(e), t.model.nparams,
        fm_algorithm_name(o->algorithm), (long long)bagua_elastic_epoch(e),
        (long long)bagua_elastic_step(e));
  double t0 = mono_ms();
  t.first_step_pending = bagua_elastic_rank(e) == 0; /* the starting round's, too */
  int all_world = 0;                                 /* the world t.all was sized for */
  while (bagua_elastic_epoch(e) < o->epochs) {
    int changed = 0;
    bagua_status_t st = bagua_elastic_check_all(e, &changed);
    if (st != BAGUA_OK || changed) {
      round_result_t r = change_round(&t, st != BAGUA_OK);
      if (r == ROUND_LEFT) status = 0;
      if (r != ROUND_OK) goto out;
      continue;
    }
    if (all_world != bagua_elastic_size(e)) {
      all_world = bagua_elastic_size(e);
      free(t.all);
      t.all = malloc(sizeof(int64_t) * (size_t)o->batch_size * (size_t)all_world);
      if (!t.all) {
        fprintf(stderr, "fashion_mnist: out of memory\n");
        goto out;
      }
    }
    size_t got = 0;
    st = bagua_sampler_next_batch(t.sampler, t.batch, (size_t)o->batch_size, &got);
    if (st != BAGUA_OK) {
      report_error("sampler", st);
      goto out;
    }
    if (got == 0) { /* the epoch is exhausted: the next one starts with the current world */
      int64_t epoch = bagua_elastic_epoch(e) + 1;
      end_epoch(&t, epoch);
      bagua_elastic_set_epoch(e, epoch);
      if ((st = bagua_sampler_set_epoch(t.sampler, (uint64_t)epoch)) != BAGUA_OK ||
          (st = commit(&t)) != BAGUA_OK) {
        report_error("new epoch", st);
        goto out;
      }
      continue;
    }
    st = train_step(&t, got);
    if (st == BAGUA_OK) st = mark_samples(&t, got);
    if (st != BAGUA_OK) {
      round_result_t r = change_round(&t, 1);
      if (r == ROUND_LEFT) status = 0;
      if (r != ROUND_OK) goto out;
      continue;
    }
    bagua_elastic_set_step(e, bagua_elastic_step(e) + 1);
    if ((st = commit(&t)) != BAGUA_OK) {
      report_error("commit", st);
      goto out;
    }
    if (t.first_step_pending) {
      struct timespec wall;
      clock_gettime(CLOCK_REALTIME, &wall);
      printf("round %lld first_step_mono_ms %.0f unix_ms %lld\n", (long long)bagua_elastic_round(e),
             mono_ms(), (long long)wall.tv_sec * 1000 + wall.tv_nsec / 1000000);
      t.first_step_pending = 0;
    }
  }
  double acc = fm_evaluate(&t.model, &data->test, t.x, t.y);
  if (bagua_elastic_rank(e) == 0)
    printf("done: %lld steps in %.1fs\n", (long long)bagua_elastic_step(e), (mono_ms() - t0) / 1e3);
  printf("final rank=%d step=%lld params_crc=%08x test_acc=%.4f samples_seen=%lld\n",
         bagua_elastic_rank(e), (long long)bagua_elastic_step(e), fm_params_crc(&t.model), acc,
         (long long)t.samples_seen);
  status = 0;
out:
  cleanup(&t);
  return status;
}
