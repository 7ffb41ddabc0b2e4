/*
 * Building a data-parallel context's flat layout and threads (bagua__ddp_build, which
 * bagua_ddp_ready, an elastic rebuild and a reconfiguration share) and taking it down again;
 * the carried state is unpacked here from registration order (bagua__ddp_pack's layout).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/log.h"
#include "common/time.h"
#include "ddp_internal.h"

/* The snapshot is host memory whatever the device: it must outlive the device buffers. */
bagua_status_t bagua__ddp_pack(bagua_ddp_t *d, const float *flat, float *packed) {
  if (!flat || !packed) return BAGUA_OK;
  size_t o = 0;
  for (int i = 0; i < d->ntensors; i++) {
    const bagua__ddp_tensor_t *t = &d->tensors[i];
    BAGUA_CHECK(d->s.dev->to_host(d, BAGUA__LANE_COMPUTE, packed + o, flat + t->offset,
                                  t->count * sizeof(float)));
    o += t->count;
  }
  return BAGUA_OK;
}

bagua_status_t bagua__ddp_unpack(bagua_ddp_t *d, const float *packed, float *flat) {
  if (!flat || !packed) return BAGUA_OK;
  size_t o = 0;
  for (int i = 0; i < d->ntensors; i++) {
    const bagua__ddp_tensor_t *t = &d->tensors[i];
    BAGUA_CHECK(d->s.dev->from_host(d, BAGUA__LANE_COMPUTE, flat + t->offset, packed + o,
                                    t->count * sizeof(float)));
    o += t->count;
  }
  return BAGUA_OK;
}

static size_t gcd(size_t a, size_t b) {
  while (b) {
    size_t r = a % b;
    a = b;
    b = r;
  }
  return a;
}

bagua_status_t bagua__ddp_copy_back(bagua_ddp_t *d) {
  bagua_status_t st = BAGUA_OK;
  if (d->weight_lock) pthread_mutex_lock(d->weight_lock);
  for (int i = 0; i < d->ntensors && st == BAGUA_OK; i++) {
    bagua__ddp_tensor_t *t = &d->tensors[i];
    if (t->user_param)
      st = d->s.dev->copy(d, BAGUA__LANE_COMPUTE, t->user_param, d->params + t->offset,
                          t->count * sizeof(float));
  }
  if (d->weight_lock) pthread_mutex_unlock(d->weight_lock);
  return st;
}

/* On a GPU the registered arrays must be device memory the context can copy from and to.
 * Released `param` arrays (NULL) are never touched again. */
static bagua_status_t check_pointers(bagua_ddp_t *d) {
  for (int i = 0; i < d->ntensors; i++) {
    bagua__ddp_tensor_t *t = &d->tensors[i];
    int param_ok = d->released ? !t->user_param || d->s.dev->owns(d, t->user_param)
                               : d->s.dev->owns(d, t->user_param);
    if (!param_ok || (t->user_grad && !d->s.dev->owns(d, t->user_grad))) {
      BAGUA_WARN(
          "bagua_ddp_ready: tensor %d (\"%s\"): its %s array is not %s memory; with "
          "config.device \"%s\" register device pointers",
          i, t->name, d->s.dev->owns(d, t->user_param) ? "grad" : "param", d->s.dev->name,
          d->s.dev->name);
      return BAGUA_ERR_INVALID_ARG;
    }
  }
  return BAGUA_OK;
}

void bagua__ddp_reset_step(bagua_ddp_t *d) {
  /* With numbered steps, the step's first job, if it has one, is preceded by the phase check
   * (phase.c). */
  d->phase.armed = d->phase.numbered && d->size > 1;
  for (int i = 0; i < d->ntensors; i++) d->tensors[i].ready = 0;
  for (int b = 0; b < d->nbuckets; b++) d->buckets[b].pending = d->buckets[b].ntensors;
  d->next_bucket = 0;
  d->first_ready = 0;
  d->iter_first_job = d->sched.submitted;
  d->bytes_mark = bagua__ddp_bytes_sent(d);
  d->compute_start = bagua__now_s();
}

/* Every rank must have registered the same tensors with the same settings, or the
 * collectives below would mismatch; compare a fingerprint first and say so clearly. */
static bagua_status_t check_same_layout(bagua_ddp_t *d) {
  int64_t h = (int64_t)(bagua__ddp_layout_hash(d) >> 2), v[2] = {h, -h};
  BAGUA_CHECK(bagua_allreduce(d->comm, v, v, 2, BAGUA_I64, BAGUA_MIN));
  if (v[0] != h || -v[1] != h) {
    BAGUA_WARN(
        "bagua_ddp_ready: ranks registered different tensors or configurations; every "
        "rank must register the same tensor sizes (and bagua_ddp_register_shape shapes) in "
        "the same order with the same settings (and number its steps before ready, or not, "
        "like the others)");
    return BAGUA_ERR_INVALID_USAGE;
  }
  return BAGUA_OK;
}

/* Rank 0's step count, learning rate and step number, so that a rank joining a running job
 * (elastic) continues the schedule (warm-up, communication interval) and the numbering where
 * the others are. */
static bagua_status_t sync_scalars(bagua_ddp_t *d) {
  int64_t v[3] = {d->steps, 0, d->phase.number};
  memcpy(&v[1], &d->lr, sizeof(double));
  BAGUA_CHECK(bagua_broadcast(d->comm, v, v, 3, BAGUA_I64, 0));
  d->steps = v[0];
  memcpy(&d->lr, &v[1], sizeof(double));
  d->phase.number = v[2];
  d->st.steps = d->steps;
  return BAGUA_OK;
}

bagua_status_t bagua__ddp_build(bagua_ddp_t *d, const bagua__ddp_carry_t *carry) {
  const bagua__lane_t L = BAGUA__LANE_COMPUTE;
  const bagua__ddp_carry_t none = {0};
  bagua_status_t st;
  if (!carry) carry = &none;
  size_t n = (size_t)d->size, m = (size_t)d->node_count;
  size_t align = n / gcd(n, m) * m * 16;
  BAGUA_CHECK_GOTO(bagua__ddp_partition(d->tensors, d->ntensors, d->s.bucket_bytes, align,
                                        &d->buckets, &d->nbuckets, &d->total, &d->max_bucket),
                   st, fail);
  BAGUA_CHECK_GOTO(check_pointers(d), st, fail);
  d->params = bagua__ddp_alloc_floats(d, d->total);
  d->grads = bagua__ddp_alloc_floats(d, d->total);
  if (!d->params || !d->grads) {
    BAGUA_WARN("bagua_ddp_ready: out of %s memory for %zu parameters", d->s.dev->name, d->total);
    st = BAGUA_ERR_NO_MEMORY;
    goto fail;
  }
  if (carry->params) {
    BAGUA_CHECK_GOTO(bagua__ddp_unpack(d, carry->params, d->params), st, fail);
  } else {
    for (int i = 0; i < d->ntensors; i++) {
      bagua__ddp_tensor_t *t = &d->tensors[i];
      BAGUA_CHECK_GOTO(
          d->s.dev->copy(d, L, d->params + t->offset, t->user_param, t->count * sizeof(float)), st,
          fail);
    }
  }
  BAGUA_CHECK_GOTO(check_same_layout(d), st, fail);
  if (!carry->local) {
    BAGUA_CHECK_GOTO(sync_scalars(d), st, fail);
    BAGUA_CHECK_GOTO(
        d->s.dev->broadcast(d, L, d->comm, d->params, d->params, d->total, BAGUA_F32, 0), st, fail);
  }
  BAGUA_CHECK_GOTO(bagua__ddp_optim_setup(d), st, fail);
  /* A rebuild carries the optimizer state over in registration order (the bucket padding
   * depends on the world size and the bucket size, so the flat layout may have changed). */
  BAGUA_CHECK_GOTO(bagua__ddp_unpack(d, carry->m, d->opt_m), st, fail);
  BAGUA_CHECK_GOTO(bagua__ddp_unpack(d, carry->v, d->opt_v), st, fail);
  /* The state is zero on a fresh start; broadcasting it keeps ranks identical should a
   * caller ever load state on rank 0 only. */
  if (d->opt_m && !carry->local)
    BAGUA_CHECK_GOTO(d->s.dev->broadcast(d, L, d->comm, d->opt_m, d->opt_m, d->total, BAGUA_F32, 0),
                     st, fail);
  if (d->opt_v && !carry->local)
    BAGUA_CHECK_GOTO(d->s.dev->broadcast(d, L, d->comm, d->opt_v, d->opt_v, d->total, BAGUA_F32, 0),
                     st, fail);
  d->setup_called = 1;
  if (d->s.algo->setup) BAGUA_CHECK_GOTO(d->s.algo->setup(d), st, fail);
  d->is_ready = 1;
  BAGUA_CHECK_GOTO(bagua__ddp_sched_start(d, (size_t)d->nbuckets + 8), st, fail);
  BAGUA_CHECK_GOTO(bagua__ddp_copy_back(d), st, fail);
  BAGUA_INFO(BAGUA_SUBSYS_COMM, "ddp: %d tensors in %d buckets, %zu elements (largest bucket %zu)",
             d->ntensors, d->nbuckets, d->total, d->max_bucket);
  bagua__ddp_reset_step(d);
  if (d->s.algo->next_step) BAGUA_CHECK_GOTO(d->s.algo->next_step(d), st, fail);
  return BAGUA_OK;
fail:
  return bagua__ddp_fail(d, st);
}

void bagua__ddp_unbuild(bagua_ddp_t *d) {
  bagua__ddp_sched_stop(d);
  /* On a GPU the copies and the update enqueued on the compute stream may still read the
   * buffers freed below (bounded; see dev.h). */
  (void)d->s.dev->sync(d, BAGUA__LANE_COMPUTE);
  if (d->setup_called && d->s.algo->teardown) d->s.algo->teardown(d);
  d->setup_called = 0;
  d->is_ready = 0;
  free(d->buckets);
  bagua__ddp_free(d, d->params);
  bagua__ddp_free(d, d->grads);
  bagua__ddp_free(d, d->opt_m);
  bagua__ddp_free(d, d->opt_v);
  d->buckets = NULL;
  d->params = d->grads = d->opt_m = d->opt_v = NULL;
  d->nbuckets = 0;
  d->total = d->max_bucket = 0;
  memset(&d->sched, 0, sizeof(d->sched));
}
