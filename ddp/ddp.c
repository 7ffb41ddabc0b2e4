/*
 * The data-parallel context: creation, tensor registration, the flat layout, the ready
 * protocol that hands buckets to the communication thread in order, and the step that waits
 * for them and runs the algorithm's update. include/bagua/ddp.h documents the contract.
 */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/check.h"
#include "common/log.h"
#include "tune.h"
#include "comm/tune.h"
#include "common/time.h"
#include "ddp_internal.h"

static bagua_status_t usage(const char *fn, const char *why) {
  BAGUA_WARN("%s: %s", fn, why);
  return BAGUA_ERR_INVALID_USAGE;
}

/* The error every call reports once the context has failed or was aborted (training thread:
 * a failed phase check is explained the first time). */
static bagua_status_t sticky(bagua_ddp_t *d) {
  return bagua__ddp_phase_explain(d, (bagua_status_t)atomic_load(&d->error));
}

/* ------------------------------------------------------------------------------------------ */
/* creation and registration                                                                  */
/* ------------------------------------------------------------------------------------------ */

bagua_status_t bagua_ddp_create(bagua_comm_t *comm, const bagua_ddp_config_t *cfg,
                                bagua_ddp_t **out) {
  bagua_ddp_config_t def = BAGUA_DDP_CONFIG_INIT;
  bagua_status_t st;
  if (!out) {
    BAGUA_WARN("bagua_ddp_create: out is NULL; pass where to store the new context");
    return BAGUA_ERR_INVALID_ARG;
  }
  *out = NULL;
  if (!comm) {
    BAGUA_WARN("bagua_ddp_create: comm is NULL; pass a communicator from bagua_comm_create()");
    return BAGUA_ERR_INVALID_ARG;
  }
  bagua__ddp_settings_t s;
  BAGUA_CHECK(bagua__ddp_settings(cfg ? cfg : &def, &s));
  bagua_ddp_t *d = calloc(1, sizeof(*d));
  if (!d) return BAGUA_ERR_NO_MEMORY;
  d->s = s;
  d->lr = s.lr;
  d->overlap_req = s.overlap;
  pthread_mutex_init(&d->comm_mu, NULL);
  BAGUA_CHECK_GOTO(bagua__ddp_comms_open(d, comm), st, fail);
  BAGUA_INFO(BAGUA_SUBSYS_COMM,
             "ddp: %s on %d ranks (%d nodes), device %s, hierarchical %d, bucket %zu bytes, lr %g, "
             "overlap %d%s",
             s.algo->name, d->size, d->node_count, d->s.dev->name, s.hierarchical, s.bucket_bytes,
             s.lr, d->s.overlap, d->overlap_req < 0 ? " (BAGUA_OVERLAP=-1)" : "");
  *out = d;
  return BAGUA_OK;
fail:
  bagua_ddp_destroy(d);
  return st;
}

bagua_status_t bagua_ddp_register(bagua_ddp_t *d, const char *name, float *param, float *grad,
                                  size_t count) {
  if (!d) return BAGUA_ERR_INVALID_ARG;
  if (d->is_ready) return usage("bagua_ddp_register", "called after bagua_ddp_ready()");
  if (!param || count == 0 || count > ((size_t)1 << 40)) {
    BAGUA_WARN("bagua_ddp_register(\"%s\"): %s", name ? name : "",
               !param ? "param is NULL; it must hold the tensor's initial weights"
                      : "count must be 1 .. 2^40 elements");
    return BAGUA_ERR_INVALID_ARG;
  }
  if (d->ntensors == d->tensors_cap) {
    int cap = d->tensors_cap ? 2 * d->tensors_cap : 16;
    bagua__ddp_tensor_t *t = realloc(d->tensors, (size_t)cap * sizeof(*t));
    if (!t) return BAGUA_ERR_NO_MEMORY;
    d->tensors = t;
    d->tensors_cap = cap;
  }
  bagua__ddp_tensor_t *t = &d->tensors[d->ntensors];
  memset(t, 0, sizeof(*t));
  char auto_name[32];
  snprintf(auto_name, sizeof(auto_name), "tensor%d", d->ntensors);
  t->name = strdup(name ? name : auto_name);
  if (!t->name) return BAGUA_ERR_NO_MEMORY;
  t->user_param = param;
  t->user_grad = grad;
  t->count = count;
  d->ntensors++;
  return BAGUA_OK;
}

bagua_status_t bagua_ddp_register_shape(bagua_ddp_t *d, int index, size_t rows) {
  if (!d) return BAGUA_ERR_INVALID_ARG;
  if (d->is_ready) return usage("bagua_ddp_register_shape", "called after bagua_ddp_ready()");
  if (index < 0 || index >= d->ntensors) {
    if (d->ntensors == 0)
      BAGUA_WARN(
          "bagua_ddp_register_shape: index %d is invalid: no tensor is registered yet "
          "(bagua_ddp_register comes first)",
          index);
    else
      BAGUA_WARN(
          "bagua_ddp_register_shape: index %d is invalid; accepted: 0 .. %d (the "
          "tensors registered so far)",
          index, d->ntensors - 1);
    return BAGUA_ERR_INVALID_ARG;
  }
  bagua__ddp_tensor_t *t = &d->tensors[index];
  if (rows == 0 || t->count % rows != 0) {
    BAGUA_WARN(
        "bagua_ddp_register_shape(\"%s\"): rows = %zu is invalid; accepted: a divisor "
        ">= 1 of the tensor's %zu elements",
        t->name, rows, t->count);
    return BAGUA_ERR_INVALID_ARG;
  }
  /* One row is a vector: stored as 0 so that both spellings hash alike across ranks. */
  t->rows = rows == 1 ? 0 : rows;
  return BAGUA_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* ready                                                                                      */
/* ------------------------------------------------------------------------------------------ */

static bagua_status_t zero_padding(bagua_ddp_t *d, float *buf) {
  for (int b = 0; b < d->nbuckets; b++) {
    const bagua__ddp_bucket_t *k = &d->buckets[b];
    if (k->count > k->used)
      BAGUA_CHECK(d->s.dev->zero(d, BAGUA__LANE_COMPUTE, buf + k->offset + k->used,
                                 (k->count - k->used) * sizeof(float)));
  }
  return BAGUA_OK;
}

bagua_status_t bagua_ddp_ready(bagua_ddp_t *d) {
  if (!d) return BAGUA_ERR_INVALID_ARG;
  if (d->is_ready) return usage("bagua_ddp_ready", "called twice");
  if (sticky(d)) return sticky(d);
  if (d->ntensors == 0) return usage("bagua_ddp_ready", "no tensor was registered");
  d->bytes_start = bagua__ddp_bytes_sent(d);
  /* The tuners (the advisor probes the network) start before the communication thread. */
  bagua_status_t st = bagua__ddp_tune_on_ready(d);
  if (st != BAGUA_OK) return bagua__ddp_fail(d, st);
  st = bagua__ddp_build(d, NULL);
  /* Progress reports start with the first ready context: its step count is the program's. */
  if (st == BAGUA_OK) bagua__ddp_progress_open(d);
  return st;
}

float *bagua_ddp_param(bagua_ddp_t *d, int i) {
  if (!d || !d->is_ready || i < 0 || i >= d->ntensors) return NULL;
  return d->params + d->tensors[i].offset;
}

float *bagua_ddp_grad(bagua_ddp_t *d, int i) {
  if (!d || !d->is_ready || i < 0 || i >= d->ntensors) return NULL;
  return d->grads + d->tensors[i].offset;
}

/* ------------------------------------------------------------------------------------------ */
/* the step                                                                                   */
/* ------------------------------------------------------------------------------------------ */

static int grads_communicated(const bagua_ddp_t *d) {
  const bagua__ddp_algo_t *a = d->s.algo;
  return a->grads_communicated ? a->grads_communicated(d) : a->bucket_op != NULL;
}

/* Hands over every bucket that is complete and next in order (Bagua's ordered ring). */
static bagua_status_t mark_ready(bagua_ddp_t *d, int i) {
  bagua__ddp_tensor_t *t = &d->tensors[i];
  if (t->user_grad)
    BAGUA_CHECK(d->s.dev->copy(d, BAGUA__LANE_COMPUTE, d->grads + t->offset, t->user_grad,
                               t->count * sizeof(float)));
  t->ready = 1;
  d->buckets[t->bucket].pending--;
  int comm = grads_communicated(d);
  while (d->next_bucket < d->nbuckets && d->buckets[d->next_bucket].pending == 0) {
    bagua__ddp_bucket_t *b = &d->buckets[d->next_bucket++];
    if (comm) BAGUA_CHECK(bagua__ddp_submit(d, d->s.algo->bucket_op, b));
  }
  return BAGUA_OK;
}

bagua_status_t bagua_ddp_grad_ready(bagua_ddp_t *d, int i) {
  if (!d) return BAGUA_ERR_INVALID_ARG;
  if (!d->is_ready) return usage("bagua_ddp_grad_ready", "called before bagua_ddp_ready()");
  if (sticky(d)) return sticky(d);
  if (i < 0 || i >= d->ntensors) {
    BAGUA_WARN("bagua_ddp_grad_ready: index %d is invalid; accepted: 0 .. %d", i, d->ntensors - 1);
    return BAGUA_ERR_INVALID_ARG;
  }
  if (d->tensors[i].ready) {
    BAGUA_WARN("bagua_ddp_grad_ready: tensor %d (\"%s\") was already marked in this step", i,
               d->tensors[i].name);
    return BAGUA_ERR_INVALID_USAGE;
  }
  if (d->first_ready == 0) d->first_ready = bagua__now_s();
  return mark_ready(d, i);
}

bagua_status_t bagua_ddp_set_step(bagua_ddp_t *d, int64_t step) {
  if (!d) return BAGUA_ERR_INVALID_ARG;
  if (sticky(d)) return sticky(d);
  if (step < 0 || step > BAGUA__DDP_MAX_STEP) {
    BAGUA_WARN("bagua_ddp_set_step: step %lld is invalid; accepted: 0 .. %lld", (long long)step,
               (long long)BAGUA__DDP_MAX_STEP);
    return BAGUA_ERR_INVALID_ARG;
  }
  if (!d->is_ready) {
    /* ready compares this across the ranks with the layout (bagua__ddp_layout_hash). */
    d->phase.numbered = 1;
    d->phase.number = step;
    return BAGUA_OK;
  }
  if (!d->phase.numbered)
    return usage("bagua_ddp_set_step",
                 "the steps were not numbered before bagua_ddp_ready(); number the first step "
                 "before it, on every rank, to number steps at all");
  d->phase.number = step;
  /* A step whose buckets will carry gradients starts its check now, so that it runs during the
   * forward pass instead of before the first bucket. Only then: a step that communicates
   * nothing (async after its warm-up) must not check, and the other algorithms' first job comes
   * with its own timing (the check precedes it there). */
  if (grads_communicated(d)) return bagua__ddp_fail(d, bagua__ddp_phase_submit(d));
  return BAGUA_OK;
}

static bagua_status_t check_step(bagua_ddp_t *d, const char *fn);

bagua_status_t bagua_ddp_local_step(bagua_ddp_t *d) {
  BAGUA_CHECK(check_step(d, "bagua_ddp_local_step"));
  if (!d->phase.numbered) return BAGUA_OK;
  if (d->phase.number >= BAGUA__DDP_MAX_STEP) {
    BAGUA_WARN("bagua_ddp_local_step: the step number is already %lld, the largest accepted",
               (long long)d->phase.number);
    return BAGUA_ERR_INVALID_USAGE;
  }
  /* The phase check of the current step reads the number when it is queued: a step that has
   * started communicating keeps the number it sent, and the next one is numbered from here. */
  d->phase.number++;
  return BAGUA_OK;
}

static void update_stats(bagua_ddp_t *d, double t_entry, double t_waited) {
  double busy, overlap;
  bagua__ddp_sched_times(d, d->iter_first_job, d->compute_start, t_entry, &busy, &overlap);
  uint64_t bytes = bagua__ddp_bytes_sent(d);
  bagua_ddp_stats_t *s = &d->st;
  s->bytes_last_step = bytes - d->bytes_mark;
  s->bytes_total = bytes - d->bytes_start;
  s->comm_s_last_step = busy;
  s->comm_s_total += busy;
  s->overlap_last_step = busy > 0 ? overlap / busy : 0;
  /* The running fraction is kept as overlapped seconds over busy seconds. */
  double prev_overlap_s = s->overlap_total * (s->comm_s_total - busy);
  s->overlap_total = s->comm_s_total > 0 ? (prev_overlap_s + overlap) / s->comm_s_total : 0;
  s->wait_s_last_step = t_waited;
}

/* The end of the backward pass: marks what is not yet marked, waits for every bucket's
 * communication and runs the algorithm's pre-update work. */
static bagua_status_t finish_backward(bagua_ddp_t *d) {
  d->t_entry = bagua__now_s();
  for (int i = 0; i < d->ntensors; i++)
    if (!d->tensors[i].ready) BAGUA_CHECK(mark_ready(d, i));
  BAGUA_CHECK(bagua__ddp_wait(d));
  d->t_waited = bagua__now_s() - d->t_entry;
  /* Compression leaves small values in the padding; keep it at zero for the update. */
  BAGUA_CHECK(zero_padding(d, d->grads));
  d->t_algo = 0;
  if (d->s.algo->pre_update) {
    double t0 = bagua__now_s();
    BAGUA_CHECK(d->s.algo->pre_update(d));
    d->t_algo = bagua__now_s() - t0;
  }
  d->waited = 1;
  return BAGUA_OK;
}

static bagua_status_t check_step(bagua_ddp_t *d, const char *fn) {
  if (!d) return BAGUA_ERR_INVALID_ARG;
  if (!d->is_ready) return usage(fn, "called before bagua_ddp_ready()");
  return sticky(d);
}

bagua_status_t bagua_ddp_wait(bagua_ddp_t *d) {
  bagua_status_t st;
  BAGUA_CHECK(check_step(d, "bagua_ddp_wait"));
  if (d->waited) return BAGUA_OK;
  BAGUA_CHECK_GOTO(finish_backward(d), st, fail);
  /* Hand the communicated gradients (and the weights pre-update work changed) to the
   * caller's own arrays, for an optimizer that runs outside the library. */
  for (int i = 0; i < d->ntensors; i++) {
    bagua__ddp_tensor_t *t = &d->tensors[i];
    if (t->user_grad)
      BAGUA_CHECK_GOTO(d->s.dev->copy(d, BAGUA__LANE_COMPUTE, t->user_grad, d->grads + t->offset,
                                      t->count * sizeof(float)),
                       st, fail);
  }
  BAGUA_CHECK_GOTO(bagua__ddp_copy_back(d), st, fail);
  return BAGUA_OK;
fail:
  return bagua__ddp_fail(d, st);
}

/* optimizer "none": the caller updated the weights, in its `param` arrays or (released) in
 * the flat storage; bring the arrays in (bagua_ddp_step then zeroes the padding). */
static bagua_status_t take_caller_update(bagua_ddp_t *d) {
  bagua_status_t st = BAGUA_OK;
  for (int i = 0; i < d->ntensors && st == BAGUA_OK; i++) {
    bagua__ddp_tensor_t *t = &d->tensors[i];
    if (t->user_param)
      st = d->s.dev->copy(d, BAGUA__LANE_COMPUTE, d->params + t->offset, t->user_param,
                          t->count * sizeof(float));
  }
  return st;
}

bagua_status_t bagua_ddp_step(bagua_ddp_t *d) {
  bagua_status_t st;
  BAGUA_CHECK(check_step(d, "bagua_ddp_step"));
  const bagua__ddp_algo_t *a = d->s.algo;
  if (!d->waited) BAGUA_CHECK_GOTO(finish_backward(d), st, fail);
  if (d->weight_lock) pthread_mutex_lock(d->weight_lock);
  if (d->s.optimizer == BAGUA__OPT_NONE)
    st = take_caller_update(d);
  else
    st = a->update ? a->update(d) : bagua__ddp_optim_step(d);
  if (st == BAGUA_OK) st = zero_padding(d, d->params);
  if (d->weight_lock) pthread_mutex_unlock(d->weight_lock);
  if (st != BAGUA_OK) goto fail;
  if (a->post_update) {
    double t0 = bagua__now_s();
    BAGUA_CHECK_GOTO(a->post_update(d), st, fail);
    d->t_algo += bagua__now_s() - t0;
  }
  BAGUA_CHECK_GOTO(bagua__ddp_copy_back(d), st, fail);
  d->steps++;
  d->phase.number++;
  d->st.steps = d->steps;
  update_stats(d, d->t_entry, d->t_waited);
  bagua__ddp_progress_update(d);
  double first_ready = d->first_ready; /* the advisor's backward window */
  bagua__ddp_reset_step(d);
  d->waited = 0;
  if (a->next_step) BAGUA_CHECK_GOTO(a->next_step(d), st, fail);
  /* The tuners (ddp/tune.h): measure this step; the advisor's deciding step may move every
   * rank to another algorithm ("auto"), autotuning to other settings, at this boundary. */
  BAGUA_CHECK_GOTO(bagua__ddp_tune_on_step(d, first_ready), st, fail);
  return BAGUA_OK;
fail:
  return bagua__ddp_fail(d, st);
}

bagua_status_t bagua_ddp_release_params(bagua_ddp_t *d) {
  BAGUA_CHECK(check_step(d, "bagua_ddp_release_params"));
  if (d->el.e)
    return usage("bagua_ddp_release_params",
                 "an elastic context is attached: its rebuild reads the registered arrays");
  for (int i = 0; i < d->ntensors; i++) d->tensors[i].user_param = NULL;
  d->released = 1;
  return BAGUA_OK;
}

void bagua_ddp_lock_weights(bagua_ddp_t *d) {
  if (d && d->weight_lock) pthread_mutex_lock(d->weight_lock);
}

void bagua_ddp_unlock_weights(bagua_ddp_t *d) {
  if (d && d->weight_lock) pthread_mutex_unlock(d->weight_lock);
}

bagua_status_t bagua_ddp_set_lr(bagua_ddp_t *d, double lr) {
  if (!d) return BAGUA_ERR_INVALID_ARG;
  if (!(lr >= 0 && lr < 1e30)) {
    BAGUA_WARN("bagua_ddp_set_lr: lr %g is invalid; accepted: a finite value >= 0", lr);
    return BAGUA_ERR_INVALID_ARG;
  }
  d->lr = lr;
  return BAGUA_OK;
}

bagua_status_t bagua_ddp_stats(const bagua_ddp_t *d, bagua_ddp_stats_t *out) {
  if (!d || !out || out->struct_size < offsetof(bagua_ddp_stats_t, steps)) {
    BAGUA_WARN("bagua_ddp_stats: pass a context and stats with struct_size set");
    return BAGUA_ERR_INVALID_ARG;
  }
  bagua_ddp_stats_t s = d->st;
  s.struct_size = out->struct_size;
  s.steps = d->steps;
  s.num_tensors = d->ntensors;
  s.num_buckets = d->nbuckets;
  s.flat_elems = d->total;
  s.async_rounds = atomic_load(&d->async_rounds);
  size_t n = out->struct_size < sizeof(s) ? out->struct_size : sizeof(s);
  memcpy(out, &s, n);
  return BAGUA_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* abort and destruction                                                                      */
/* ------------------------------------------------------------------------------------------ */

void bagua_ddp_abort(bagua_ddp_t *d) {
  if (!d) return;
  atomic_store(&d->aborted, 1);
  bagua__ddp_fail(d, BAGUA_ERR_ABORTED);
  bagua__ddp_comms_abort(d);
}

void bagua_ddp_destroy(bagua_ddp_t *d) {
  if (!d) return;
  bagua__ddp_progress_close(d);
  bagua__ddp_tune_free(d);
  bagua__ddp_elastic_detach(d);
  bagua__ddp_unbuild(d);
  bagua__ddp_comms_close(d);
  for (int i = 0; i < d->ntensors; i++) free(d->tensors[i].name);
  free(d->tensors);
  pthread_mutex_destroy(&d->comm_mu);
  free(d);
}
