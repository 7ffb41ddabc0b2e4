/*
 * The communication thread: one per context, running jobs (a ready bucket's op list, a
 * weight exchange) strictly in the order the training thread submitted them, as Bagua's
 * single comm worker does. A job that finds the context failed returns at once, so after an
 * error the queue drains quickly and the training thread sees the error at its next wait.
 */
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/log.h"
#include "common/time.h"
#include "ddp_internal.h"

static void *comm_thread(void *arg) {
  bagua_ddp_t *d = arg;
  bagua__ddp_sched_t *q = &d->sched;
  d->s.dev->thread_init(d);
  pthread_mutex_lock(&q->mu);
  for (;;) {
    while (q->completed == q->released && !q->stop) pthread_cond_wait(&q->cv_work, &q->mu);
    if (q->completed == q->released) break; /* stop requested and nothing left */
    size_t slot = (size_t)(q->completed % q->cap);
    bagua__ddp_job_t *job = &q->jobs[slot];
    pthread_mutex_unlock(&q->mu);
    job->t_start = bagua__now_s();
    bagua_status_t st = atomic_load(&d->error);
    /* On a GPU the job's work must not start before the compute-stream work that was
     * enqueued when it was submitted (the gradients it carries, the update before it). */
    if (st == BAGUA_OK) st = d->s.dev->job_wait(d, slot);
    if (st == BAGUA_OK) st = job->fn(d, job->arg);
    if (st != BAGUA_OK) bagua__ddp_fail(d, st);
    job->t_end = bagua__now_s();
    pthread_mutex_lock(&q->mu);
    q->completed++;
    pthread_cond_broadcast(&q->cv_done);
  }
  pthread_mutex_unlock(&q->mu);
  return NULL;
}

bagua_status_t bagua__ddp_sched_start(bagua_ddp_t *d, size_t cap) {
  bagua__ddp_sched_t *q = &d->sched;
  q->cap = cap;
  q->hold = !d->s.overlap || q->tuner_hold;
  q->jobs = calloc(cap, sizeof(*q->jobs));
  if (!q->jobs) return BAGUA_ERR_NO_MEMORY;
  bagua_status_t st = d->s.dev->jobs_init(d, cap);
  if (st != BAGUA_OK) {
    free(q->jobs);
    q->jobs = NULL;
    return st;
  }
  pthread_mutex_init(&q->mu, NULL);
  /* Waits use the monotonic clock so that a wall-clock jump cannot stretch or cut them. */
  bagua__cond_init(&q->cv_work);
  bagua__cond_init(&q->cv_done);
  int rc = pthread_create(&q->thread, NULL, comm_thread, d);
  if (rc != 0) {
    BAGUA_WARN("bagua_ddp_ready: cannot start the communication thread: %s", strerror(rc));
    pthread_cond_destroy(&q->cv_work);
    pthread_cond_destroy(&q->cv_done);
    pthread_mutex_destroy(&q->mu);
    d->s.dev->jobs_fini(d);
    free(q->jobs);
    q->jobs = NULL;
    return BAGUA_ERR_SYSTEM;
  }
  q->started = 1;
  return BAGUA_OK;
}

static bagua_status_t enqueue(bagua_ddp_t *d, bagua__ddp_job_fn fn, void *arg) {
  bagua__ddp_sched_t *q = &d->sched;
  pthread_mutex_lock(&q->mu);
  /* The step statistics read the records of a whole step, so a slot is reused only once its
   * job has completed and belongs to an earlier step. */
  if (q->submitted - d->iter_first_job >= q->cap || q->submitted - q->completed >= q->cap) {
    pthread_mutex_unlock(&q->mu);
    BAGUA_WARN("ddp: more than %zu communication jobs in one step (internal limit)", q->cap);
    return bagua__ddp_fail(d, BAGUA_ERR_INTERNAL);
  }
  size_t slot = (size_t)(q->submitted % q->cap);
  bagua_status_t st = d->s.dev->job_mark(d, slot);
  if (st != BAGUA_OK) {
    pthread_mutex_unlock(&q->mu);
    return bagua__ddp_fail(d, st);
  }
  bagua__ddp_job_t *job = &q->jobs[slot];
  job->fn = fn;
  job->arg = arg;
  job->t_start = job->t_end = 0;
  q->submitted++;
  if (!q->hold) {
    q->released = q->submitted;
    pthread_cond_signal(&q->cv_work);
  }
  pthread_mutex_unlock(&q->mu);
  return BAGUA_OK;
}

bagua_status_t bagua__ddp_phase_submit(bagua_ddp_t *d) {
  if (!d->phase.armed) return BAGUA_OK;
  d->phase.armed = 0;
  /* The check of the step before has completed (every step waits for its jobs before it ends),
   * so one field carries the number; the job reads it after the queue's lock handed it over. */
  d->phase.sent = d->phase.number;
  return enqueue(d, bagua__ddp_phase_job, NULL);
}

bagua_status_t bagua__ddp_submit(bagua_ddp_t *d, bagua__ddp_job_fn fn, void *arg) {
  /* The step's first job, whatever the algorithm makes it (a bucket, a weight exchange), runs
   * after the phase check: jobs run in submission order, so none of the step's data moves
   * before every rank has agreed on the step number. */
  BAGUA_CHECK(bagua__ddp_phase_submit(d));
  return enqueue(d, fn, arg);
}

void bagua__ddp_release(bagua_ddp_t *d) {
  bagua__ddp_sched_t *q = &d->sched;
  if (!q->started || !q->hold) return;
  pthread_mutex_lock(&q->mu);
  if (q->released != q->submitted) {
    q->released = q->submitted;
    pthread_cond_signal(&q->cv_work);
  }
  pthread_mutex_unlock(&q->mu);
}

void bagua__ddp_sched_hold(bagua_ddp_t *d, int on) {
  bagua__ddp_sched_t *q = &d->sched;
  q->tuner_hold = on;
  if (!q->started) return; /* bagua__ddp_sched_start() reads tuner_hold */
  pthread_mutex_lock(&q->mu);
  q->hold = on || !d->s.overlap;
  /* Jobs submitted under the hold (a decentralized exchange queued at the last step's end)
   * would otherwise wait for the next step's release. */
  if (!q->hold && q->released != q->submitted) {
    q->released = q->submitted;
    pthread_cond_signal(&q->cv_work);
  }
  pthread_mutex_unlock(&q->mu);
}

bagua_status_t bagua__ddp_wait(bagua_ddp_t *d) {
  bagua__ddp_sched_t *q = &d->sched;
  if (!q->started) return atomic_load(&d->error);
  bagua__ddp_release(d);
  pthread_mutex_lock(&q->mu);
  /* Every job ends by itself: each collective it runs completes, fails, or times out after
   * BAGUA_COMM_TIMEOUT_MS without progress, and bagua_ddp_abort() makes it fail at once.
   * The slices only keep this loop responsive should a wake-up be missed. */
  while (q->completed < q->submitted)
    bagua__cond_wait_until(&q->cv_done, &q->mu, bagua__deadline_in(100));
  pthread_mutex_unlock(&q->mu);
  bagua_status_t st = atomic_load(&d->error);
  if (st != BAGUA_OK) return bagua__ddp_phase_explain(d, st);
  /* The jobs only enqueued their work on a GPU: wait for it (bounded, see dev.h). */
  return bagua__ddp_fail(d, d->s.dev->sync(d, BAGUA__LANE_COMM));
}

void bagua__ddp_sched_stop(bagua_ddp_t *d) {
  bagua__ddp_sched_t *q = &d->sched;
  if (!q->started) return;
  pthread_mutex_lock(&q->mu);
  q->released = q->submitted; /* held jobs still run (they fail fast after an error) */
  q->stop = 1;
  pthread_cond_broadcast(&q->cv_work);
  pthread_mutex_unlock(&q->mu);
  pthread_join(q->thread, NULL);
  q->started = 0;
  /* Work the jobs enqueued on a GPU must be over before the buffers are freed; sync ends
   * by itself after an abort or a timeout. */
  (void)d->s.dev->sync(d, BAGUA__LANE_COMM);
  d->s.dev->jobs_fini(d);
  pthread_cond_destroy(&q->cv_work);
  pthread_cond_destroy(&q->cv_done);
  pthread_mutex_destroy(&q->mu);
  free(q->jobs);
  q->jobs = NULL;
}

void bagua__ddp_sched_times(bagua_ddp_t *d, uint64_t first, double from, double to, double *busy,
                            double *overlap) {
  bagua__ddp_sched_t *q = &d->sched;
  *busy = *overlap = 0;
  if (!q->started) return;
  pthread_mutex_lock(&q->mu);
  uint64_t end = q->completed;
  pthread_mutex_unlock(&q->mu);
  for (uint64_t i = first; i < end; i++) {
    const bagua__ddp_job_t *j = &q->jobs[i % q->cap];
    *busy += j->t_end - j->t_start;
    double s = j->t_start > from ? j->t_start : from;
    double e = j->t_end < to ? j->t_end : to;
    if (e > s) *overlap += e - s;
  }
}
