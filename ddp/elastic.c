/*
 * A data-parallel context that follows an elastic context through world changes
 * (bagua_ddp_elastic_attach in include/bagua/ddp.h).
 *
 * The commit snapshot is kept in registration order rather than in the flat bucket layout:
 * bucket padding depends on the world size, so the layout of the next round may differ. A
 * rebuild stops the context's threads, takes the state to carry (the snapshot after a restore,
 * the live state otherwise), re-splits the private communicators from the new round's world
 * communicator and then runs the same collective sequence as bagua_ddp_create() followed by
 * bagua_ddp_ready(), which is exactly what a newcomer runs: both meet in it and every rank
 * leaves with rank 0's weights, optimizer state and step count.
 */
#include <stdlib.h>
#include <string.h>

#include "bagua/elastic.h"
#include "common/check.h"
#include "common/log.h"
#include "common/time.h"
#include "ddp_internal.h"

/* Live state -> snapshot. The weight lock keeps async averaging from tearing the weights. */
static bagua_status_t snapshot(bagua_ddp_t *d) {
  bagua__ddp_elastic_t *el = &d->el;
  if (d->weight_lock) pthread_mutex_lock(d->weight_lock);
  bagua_status_t st = bagua__ddp_pack(d, d->params, el->params);
  if (d->weight_lock) pthread_mutex_unlock(d->weight_lock);
  BAGUA_CHECK(st);
  BAGUA_CHECK(bagua__ddp_pack(d, d->opt_m, el->m));
  BAGUA_CHECK(bagua__ddp_pack(d, d->opt_v, el->v));
  el->steps = d->steps;
  el->restore_pending = 0;
  return BAGUA_OK;
}

static bagua_status_t on_commit(void *arg) {
  bagua_ddp_t *d = arg;
  if (!d->is_ready) return BAGUA_OK;
  return snapshot(d);
}

static void on_restore(void *arg) {
  bagua_ddp_t *d = arg;
  d->el.restore_pending = 1;
}

/* Watch thread: a member of the round left. Ending our communication makes the step in
 * progress return BAGUA_ERR_ABORTED, which sends the program to restore and rebuild. */
static void on_abort(void *arg) {
  bagua_ddp_t *d = arg;
  bagua__ddp_fail(d, BAGUA_ERR_ABORTED);
  bagua__ddp_comms_abort(d);
}

static bagua_status_t on_reset(bagua_elastic_t *e, const bagua_elastic_reset_t *info, void *arg) {
  bagua_ddp_t *d = arg;
  bagua__ddp_elastic_t *el = &d->el;
  bagua_status_t st;
  double t0 = bagua__now_s();
  /* Threads blocked on the old world's communicators leave at once. */
  bagua__ddp_comms_abort(d);
  bagua__ddp_sched_stop(d);
  (void)d->s.dev->sync(d, BAGUA__LANE_COMPUTE);
  if (d->setup_called && d->s.algo->teardown) d->s.algo->teardown(d);
  d->setup_called = 0;
  /* A round change noticed at a step boundary carries the live state (the program's
   * registered buffers are synchronised live too); after a cut-off step, the last commit. */
  if (!el->restore_pending && d->is_ready) BAGUA_CHECK_GOTO(snapshot(d), st, fail);
  /* bagua__ddp_build() reads the weights from the registered arrays, as bagua_ddp_ready(). */
  size_t o = 0;
  for (int i = 0; i < d->ntensors; i++) {
    bagua__ddp_tensor_t *t = &d->tensors[i];
    BAGUA_CHECK_GOTO(d->s.dev->from_host(d, BAGUA__LANE_COMPUTE, t->user_param, el->params + o,
                                         t->count * sizeof(float)),
                     st, fail);
    o += t->count;
  }
  uint64_t carried = bagua__ddp_bytes_sent(d) - d->bytes_start;
  bagua__ddp_unbuild(d);
  bagua__ddp_comms_close(d);
  atomic_store(&d->error, BAGUA_OK);
  atomic_store(&d->aborted, 0);
  d->steps = el->steps;
  BAGUA_CHECK_GOTO(bagua__ddp_comms_open(d, bagua_elastic_comm(e)), st, fail);
  d->bytes_start = bagua__ddp_bytes_sent(d) - carried; /* byte counters continue */
  bagua__ddp_carry_t carry = {.m = el->m, .v = el->v};
  BAGUA_CHECK_GOTO(bagua__ddp_build(d, &carry), st, fail);
  /* Like bagua_elastic_sync(), the synchronised state is the new commit. */
  BAGUA_CHECK_GOTO(snapshot(d), st, fail);
  BAGUA_INFO(BAGUA_SUBSYS_COMM,
             "ddp: rebuilt for round %lld, rank %d of %d (was %d of %d), step %lld, %d buckets, "
             "%.1f ms",
             (long long)info->new_round, d->rank, d->size, info->old_rank, info->old_size,
             (long long)d->steps, d->nbuckets, 1e3 * (bagua__now_s() - t0));
  return BAGUA_OK;
fail:
  BAGUA_WARN("ddp: rebuild for round %lld failed: %s", (long long)info->new_round,
             bagua_err_name(st));
  return bagua__ddp_fail(d, st);
}

bagua_status_t bagua_ddp_elastic_attach(bagua_ddp_t *d, bagua_elastic_t *e) {
  if (!d || !e) return BAGUA_ERR_INVALID_ARG;
  if (!d->is_ready || d->el.e || d->released) {
    BAGUA_WARN("bagua_ddp_elastic_attach: %s",
               d->el.e       ? "already attached"
               : d->released ? "the parameters were released (the rebuild reads them)"
                             : "call it after bagua_ddp_ready()");
    return BAGUA_ERR_INVALID_USAGE;
  }
  /* A newcomer's bagua_ddp_ready() would run the advisor's probes that the survivors' rebuild
   * does not, and could not know which algorithm "auto" moved the survivors to. */
  if (d->advise || d->s.auto_allow) {
    BAGUA_WARN(
        "bagua_ddp_elastic_attach: the advisor (BAGUA_ADVISE=1 or algorithm \"auto\") cannot "
        "follow world changes; run elastic jobs with a named algorithm and without --advise");
    return BAGUA_ERR_NOT_SUPPORTED;
  }
  bagua__ddp_elastic_t *el = &d->el;
  size_t n = 0;
  for (int i = 0; i < d->ntensors; i++) n += d->tensors[i].count;
  el->nparams = n;
  el->params = malloc(n * sizeof(float));
  el->m = d->opt_m ? malloc(n * sizeof(float)) : NULL;
  el->v = d->opt_v ? malloc(n * sizeof(float)) : NULL;
  if (!el->params || (d->opt_m && !el->m) || (d->opt_v && !el->v)) {
    BAGUA_WARN("bagua_ddp_elastic_attach: out of memory for a %zu-parameter snapshot", n);
    bagua__ddp_elastic_detach(d);
    return BAGUA_ERR_NO_MEMORY;
  }
  bagua_status_t st = snapshot(d);
  if (st != BAGUA_OK) {
    bagua__ddp_elastic_detach(d);
    return st;
  }
  bagua_elastic_participant_t p = {sizeof(p), on_commit, on_restore, on_abort, on_reset};
  st = bagua_elastic_attach(e, &p, d);
  if (st != BAGUA_OK) {
    bagua__ddp_elastic_detach(d);
    return st;
  }
  el->e = e;
  return BAGUA_OK;
}

void bagua__ddp_elastic_detach(bagua_ddp_t *d) {
  bagua__ddp_elastic_t *el = &d->el;
  if (el->e) bagua_elastic_detach(el->e, d);
  free(el->params);
  free(el->m);
  free(el->v);
  memset(el, 0, sizeof(*el));
}
