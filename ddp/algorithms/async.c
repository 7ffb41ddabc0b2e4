/*
 * Asynchronous model averaging (Bagua's async_model_average.py and its
 * decentralized_full_precision_asynchronous op). During warm_up steps the gradients are
 * averaged like gradient_allreduce; afterwards every rank trains on its own and a background
 * thread, on its own communicator, averages the weights every sync_interval_ms:
 *   1. negotiate: allreduce-MIN of "keep going" (0 once any rank asked to stop), so that
 *      every rank's thread leaves at the same round and no collective is left unmatched;
 *   2. copy the weights into temp under the weight lock (a consistent snapshot);
 *   3. allreduce-SUM temp into reduced, without the lock (training goes on meanwhile);
 *   4. under the lock, x += reduced/n - temp, which keeps the local updates made while the
 *      round was in flight.
 * The training thread holds the same lock for the optimizer update and the copy into the
 * caller's arrays, so the caller always reads a consistent model.
 */
#include <stdlib.h>
#include <string.h>

#include "../ddp_internal.h"
#include "common/check.h"
#include "common/log.h"
#include "common/time.h"

typedef struct {
  pthread_mutex_t weight_lock;
  pthread_mutex_t ctl; /* guards stop and sleeps on wake */
  pthread_cond_t wake;
  int stop;    /* this rank asks the threads to stop */
  int running; /* thread started and not yet joined */
  int paused;  /* bagua_ddp_async_pause() was called and not resumed */
  pthread_t thread;
  float *temp, *reduced;
} state_t;

/* Sleeps one interval; returns 1 if this rank asked to stop meanwhile. */
static int sleep_interval(bagua_ddp_t *d, state_t *s) {
  int64_t deadline = bagua__deadline_in(d->s.sync_interval_ms);
  pthread_mutex_lock(&s->ctl);
  while (!s->stop && !atomic_load(&d->aborted))
    if (bagua__cond_wait_until(&s->wake, &s->ctl, deadline) != 0) break; /* timed out */
  int stop = s->stop;
  pthread_mutex_unlock(&s->ctl);
  return stop;
}

static bagua_status_t one_round(bagua_ddp_t *d, state_t *s, int *go_on) {
  int32_t flag = sleep_interval(d, s) ? 0 : 1;
  BAGUA_CHECK(bagua_allreduce(d->async_comm, &flag, &flag, 1, BAGUA_I32, BAGUA_MIN));
  *go_on = flag;
  if (!flag) return BAGUA_OK;
  size_t n = d->total;
  const bagua__ddp_dev_t *dev = d->s.dev;
  const bagua__lane_t A = BAGUA__LANE_ASYNC, C = BAGUA__LANE_COMPUTE;
  bagua_status_t st;
  /* On a GPU the weights are updated on the compute lane. Under the lock this lane is first
   * ordered after the updates enqueued so far, and the compute lane after this lane's access,
   * so the lock still makes the snapshot and the write exclusive with the local updates. */
  pthread_mutex_lock(&s->weight_lock);
  st = dev->order(d, C, A);
  if (st == BAGUA_OK) st = dev->copy(d, A, s->temp, d->params, n * sizeof(float));
  if (st == BAGUA_OK) st = dev->order(d, A, C);
  pthread_mutex_unlock(&s->weight_lock);
  BAGUA_CHECK(st);
  BAGUA_CHECK(dev->allreduce(d, A, d->async_comm, s->temp, s->reduced, n, BAGUA_F32, BAGUA_SUM));
  BAGUA_CHECK(dev->div(d, A, s->reduced, n, d->size));
  BAGUA_CHECK(dev->axpy(d, A, -1.0f, s->temp, s->reduced, n));
  /* Wait for the network here, off the lock: the compute lane must only ever wait for the
   * short copy and update below, never for peers. */
  BAGUA_CHECK(dev->sync(d, A));
  pthread_mutex_lock(&s->weight_lock);
  st = dev->order(d, C, A);
  if (st == BAGUA_OK) st = dev->axpy(d, A, 1.0f, s->reduced, d->params, n);
  if (st == BAGUA_OK) st = dev->order(d, A, C);
  pthread_mutex_unlock(&s->weight_lock);
  BAGUA_CHECK(st);
  /* One round in flight at a time; also where a failed collective on a GPU surfaces. */
  BAGUA_CHECK(dev->sync(d, A));
  atomic_fetch_add(&d->async_rounds, 1);
  return BAGUA_OK;
}

static void *averaging_thread(void *arg) {
  bagua_ddp_t *d = arg;
  state_t *s = d->algo_state;
  d->s.dev->thread_init(d);
  for (;;) {
    int go_on = 0;
    bagua_status_t st = one_round(d, s, &go_on);
    if (st != BAGUA_OK) {
      BAGUA_INFO(BAGUA_SUBSYS_COMM, "ddp async: averaging stopped by %s", bagua_err_name(st));
      bagua__ddp_fail(d, st);
      break;
    }
    if (!go_on) break;
  }
  return NULL;
}

static bagua_status_t start(bagua_ddp_t *d, state_t *s) {
  s->stop = 0;
  int rc = pthread_create(&s->thread, NULL, averaging_thread, d);
  if (rc != 0) {
    BAGUA_WARN("ddp async: cannot start the averaging thread: %s", strerror(rc));
    return BAGUA_ERR_SYSTEM;
  }
  s->running = 1;
  return BAGUA_OK;
}

static void stop(state_t *s) {
  if (!s->running) return;
  pthread_mutex_lock(&s->ctl);
  s->stop = 1;
  pthread_cond_broadcast(&s->wake);
  pthread_mutex_unlock(&s->ctl);
  pthread_join(s->thread, NULL);
  s->running = 0;
}

static bagua_status_t setup(bagua_ddp_t *d) {
  state_t *s = calloc(1, sizeof(*s));
  if (!s) return BAGUA_ERR_NO_MEMORY;
  pthread_mutex_init(&s->weight_lock, NULL);
  pthread_mutex_init(&s->ctl, NULL);
  bagua__cond_init(&s->wake);
  d->algo_state = s;
  d->weight_lock = &s->weight_lock;
  s->temp = bagua__ddp_alloc_floats(d, d->total);
  s->reduced = bagua__ddp_alloc_floats(d, d->total);
  return s->temp && s->reduced ? BAGUA_OK : BAGUA_ERR_NO_MEMORY;
}

static int grads_communicated(const bagua_ddp_t *d) {
  return d->steps < d->s.warmup_steps;
}

static bagua_status_t bucket_op(bagua_ddp_t *d, void *arg) {
  bagua__ddp_bucket_t *b = arg;
  return bagua__ddp_allreduce_avg(d, d->grads + b->offset, b->count, 0);
}

static bagua_status_t next_step(bagua_ddp_t *d) {
  state_t *s = d->algo_state;
  /* While a tuner holds communication (the advisor's compute probe), averaging waits: its
   * thread would take CPU from the compute being measured. It starts at the first step
   * boundary after the hold ends. */
  if (s->running || s->paused || d->sched.tuner_hold || d->steps < d->s.warmup_steps)
    return BAGUA_OK;
  return start(d, s);
}

static void teardown(bagua_ddp_t *d) {
  state_t *s = d->algo_state;
  if (!s) return;
  stop(s);
  /* The averaging lane's last work must be over before its buffers are freed. */
  (void)d->s.dev->sync(d, BAGUA__LANE_ASYNC);
  d->weight_lock = NULL;
  pthread_cond_destroy(&s->wake);
  pthread_mutex_destroy(&s->ctl);
  pthread_mutex_destroy(&s->weight_lock);
  bagua__ddp_free(d, s->temp);
  bagua__ddp_free(d, s->reduced);
  free(s);
  d->algo_state = NULL;
}

const bagua__ddp_algo_t bagua__ddp_async = {
    .name = "async",
    .caps = BAGUA__ALGO_WARMUP | BAGUA__ALGO_BACKGROUND,
    .hierarchical_default = 0,
    .setup = setup,
    .grads_communicated = grads_communicated,
    .bucket_op = bucket_op,
    .next_step = next_step,
    .teardown = teardown,
};

static bagua_status_t check_async(bagua_ddp_t *d, const char *fn) {
  if (!d) return BAGUA_ERR_INVALID_ARG;
  if (d->s.algo != &bagua__ddp_async || !d->is_ready) {
    BAGUA_WARN("%s: needs a context of algorithm \"async\" after bagua_ddp_ready() (this one: %s)",
               fn, d->s.algo->name);
    return BAGUA_ERR_INVALID_USAGE;
  }
  return (bagua_status_t)atomic_load(&d->error);
}

bagua_status_t bagua_ddp_async_pause(bagua_ddp_t *d) {
  BAGUA_CHECK(check_async(d, "bagua_ddp_async_pause"));
  state_t *s = d->algo_state;
  if (s->paused) {
    BAGUA_WARN("bagua_ddp_async_pause: averaging is already stopped; call resume first");
    return BAGUA_ERR_INVALID_USAGE;
  }
  /* Joining is bounded: the thread leaves at its next round, whose collectives every rank's
   * thread joins (or fail by timeout or a dead peer). */
  stop(s);
  s->paused = 1;
  bagua_status_t st = atomic_load(&d->error);
  if (st != BAGUA_OK) return st;
  /* One last full average so that every rank holds the same model. */
  st = d->s.dev->allreduce(d, BAGUA__LANE_COMPUTE, d->async_comm, d->params, d->params, d->total,
                           BAGUA_F32, BAGUA_AVG);
  if (st == BAGUA_OK) st = d->s.dev->sync(d, BAGUA__LANE_COMPUTE);
  if (st == BAGUA_OK) st = bagua__ddp_copy_back(d);
  return bagua__ddp_fail(d, st);
}

bagua_status_t bagua_ddp_async_resume(bagua_ddp_t *d) {
  BAGUA_CHECK(check_async(d, "bagua_ddp_async_resume"));
  state_t *s = d->algo_state;
  if (!s->paused) {
    BAGUA_WARN(
        "bagua_ddp_async_resume: averaging is not stopped; call bagua_ddp_async_pause first");
    return BAGUA_ERR_INVALID_USAGE;
  }
  s->paused = 0;
  if (d->steps >= d->s.warmup_steps) {
    bagua_status_t st = start(d, s);
    if (st != BAGUA_OK) return bagua__ddp_fail(d, st);
  }
  return BAGUA_OK;
}

bagua_status_t bagua_ddp_async_abort(bagua_ddp_t *d) {
  return bagua_ddp_async_pause(d);
}
