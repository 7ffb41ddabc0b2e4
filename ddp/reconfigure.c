/*
 * Moving a running data-parallel context to new settings between two steps (autotuning and
 * the advisor's algorithm switch use it; ddp_internal.h states the contract).
 *
 * The move is an elastic rebuild without a world change: stop the threads, pack each rank's
 * own state in registration order, re-lay the buckets for the new settings and unpack it.
 * Unlike the elastic rebuild nothing is broadcast from rank 0: ranks of a decentralized run
 * hold different weights on purpose, and a reconfiguration must not change the maths.
 */
#include <stdlib.h>
#include <string.h>

#include "comm/tune.h"
#include "common/check.h"
#include "common/log.h"
#include "common/time.h"
#include "ddp_internal.h"

static bagua_status_t refuse(const char *why) {
  BAGUA_WARN("ddp: reconfiguration refused: %s", why);
  return BAGUA_ERR_INVALID_USAGE;
}

/* Whether the algorithm's ranks may be at different steps (background averaging, as async,
 * past its warm-up). */
static int unsynchronised(const bagua__ddp_settings_t *s, int64_t steps) {
  return (s->algo->caps & BAGUA__ALGO_BACKGROUND) && steps >= s->warmup_steps;
}

/* Splits the node-level and averaging communicators `next` needs off d->comm and destroys
 * those it does not need. Collective over d->comm: every rank takes the same branches. */
static bagua_status_t swap_comms(bagua_ddp_t *d, const bagua__ddp_settings_t *next) {
  bagua_comm_t *intra = d->intra, *inter = d->inter, *async_comm = d->async_comm;
  bagua_comm_t *drop[3] = {NULL, NULL, NULL};
  bagua_status_t st = BAGUA_OK;
  if (next->hierarchical && !d->s.hierarchical) {
    BAGUA_CHECK(bagua_comm_split_node(d->comm, &intra, &inter));
  } else if (!next->hierarchical && d->s.hierarchical) {
    drop[0] = intra;
    drop[1] = inter;
    intra = inter = NULL;
  }
  int want_async = (next->algo->caps & BAGUA__ALGO_BACKGROUND) != 0;
  if (want_async && !async_comm) {
    st = bagua_comm_split(d->comm, 0, bagua_comm_rank(d->comm), &async_comm);
    if (st != BAGUA_OK) {
      if (intra != d->intra) bagua_comm_destroy(intra);
      if (inter != d->inter) bagua_comm_destroy(inter);
      return st;
    }
  } else if (!want_async && async_comm) {
    drop[2] = async_comm;
    async_comm = NULL;
  }
  /* As in bagua__ddp_comms_open(): the layer's own calls, the same on every rank. */
  bagua__comm_set_calls_agreed(intra);
  bagua__comm_set_calls_agreed(inter);
  bagua__comm_set_calls_agreed(async_comm);
  pthread_mutex_lock(&d->comm_mu);
  d->intra = intra;
  d->inter = inter;
  d->async_comm = async_comm;
  pthread_mutex_unlock(&d->comm_mu);
  for (int i = 0; i < 3; i++) bagua_comm_destroy(drop[i]);
  return BAGUA_OK;
}

bagua_status_t bagua__ddp_reconfigure(bagua_ddp_t *d, const bagua__ddp_settings_t *next) {
  if (!d || !next) return BAGUA_ERR_INVALID_ARG;
  if (!d->is_ready) return refuse("the context is not ready");
  bagua_status_t st = (bagua_status_t)atomic_load(&d->error);
  if (st != BAGUA_OK) return st;
  if (d->waited || d->first_ready != 0)
    return refuse("a step is in progress; reconfigure right after bagua_ddp_step()");
  if (next->optimizer != d->s.optimizer || next->dev != d->s.dev ||
      next->cuda_device != d->s.cuda_device || next->cuda_stream != d->s.cuda_stream)
    return refuse("the optimizer and the device cannot change in a running context");
  if (unsynchronised(&d->s, d->steps) || unsynchronised(next, d->steps))
    return refuse("async past its warm-up: its ranks are not at the same step");

  const bagua__ddp_settings_t old = d->s;
  double t0 = bagua__now_s();
  size_t n = 0;
  for (int i = 0; i < d->ntensors; i++) n += d->tensors[i].count;
  float *p = malloc(n * sizeof(float));
  float *m = d->opt_m ? malloc(n * sizeof(float)) : NULL;
  float *v = d->opt_v ? malloc(n * sizeof(float)) : NULL;
  if (!p || (d->opt_m && !m) || (d->opt_v && !v)) {
    BAGUA_WARN("ddp: reconfiguration: out of memory for a %zu-parameter copy", n);
    st = BAGUA_ERR_NO_MEMORY;
    goto fail;
  }
  /* The communication thread is idle between steps, so the flat buffers are stable. */
  BAGUA_CHECK_GOTO(bagua__ddp_pack(d, d->params, p), st, fail);
  BAGUA_CHECK_GOTO(bagua__ddp_pack(d, d->opt_m, m), st, fail);
  BAGUA_CHECK_GOTO(bagua__ddp_pack(d, d->opt_v, v), st, fail);
  uint64_t carried = bagua__ddp_bytes_sent(d) - d->bytes_start;
  bagua__ddp_unbuild(d);
  /* The device's communicators (NCCL) mirror the CPU ones: rebuild them on the new set. */
  d->s.dev->close(d);
  BAGUA_CHECK_GOTO(swap_comms(d, next), st, fail);
  d->s = *next;
  BAGUA_CHECK_GOTO(d->s.dev->open(d), st, fail);
  d->bytes_start = bagua__ddp_bytes_sent(d) - carried; /* byte counters continue */
  bagua__ddp_carry_t carry = {.params = p, .m = m, .v = v, .local = 1};
  BAGUA_CHECK_GOTO(bagua__ddp_build(d, &carry), st, fail);
  d->layout_version++;
  BAGUA_INFO(BAGUA_SUBSYS_COMM,
             "ddp: reconfigured at step %lld: %s -> %s, bucket %zu -> %zu bytes, hierarchical "
             "%d -> %d, %d buckets, %.1f ms",
             (long long)d->steps, old.algo->name, d->s.algo->name, old.bucket_bytes,
             d->s.bucket_bytes, old.hierarchical, d->s.hierarchical, d->nbuckets,
             1e3 * (bagua__now_s() - t0));
  free(p);
  free(m);
  free(v);
  return BAGUA_OK;
fail:
  free(p);
  free(m);
  free(v);
  return bagua__ddp_fail(d, st);
}

int64_t bagua_ddp_layout_version(const bagua_ddp_t *d) {
  return d ? d->layout_version : -1;
}
