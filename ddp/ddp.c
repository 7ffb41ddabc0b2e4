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

bagua_status_t bagua__ddp_fail(bagua_ddp_t *d, bagua_status_t st) {
  if (st == BAGUA_OK) return st;
  int expected = BAGUA_OK;
  if (atomic_compare_exchange_strong(&d->error, &expected, (int)st))
    BAGUA_INFO(BAGUA_SUBSYS_COMM, "ddp: failed with %s; later calls return it", bagua_err_name(st));
  return st;
}

uint64_t bagua__ddp_bytes_sent(const bagua_ddp_t *d) {
  uint64_t dev = d->s.dev && d->s.dev->bytes_sent && d->dev_state ? d->s.dev->bytes_sent(d) : 0;
  /* The phase checks' bytes are control, not payload (phase.c). A check counts them once it
   * completes, so the sum is exact whenever none is in flight, as at the end of a step, where
   * the statistics read it. */
  uint64_t checks = atomic_load(&d->phase.bytes);
  return bagua_comm_bytes_sent(d->comm) + bagua_comm_bytes_sent(d->intra) +
         bagua_comm_bytes_sent(d->inter) + bagua_comm_bytes_sent(d->async_comm) + dev - checks;
}

float *bagua__ddp_alloc_floats(bagua_ddp_t *d, size_t n) {
  if (n > SIZE_MAX / sizeof(float) - 64) return NULL;
  return d->s.dev->alloc(d, n * sizeof(float));
}

void bagua__ddp_free(bagua_ddp_t *d, void *p) {
  if (p) d->s.dev->free(d, p);
}

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

/*
 * Counts the job's ranks on this machine by host name rather than by node id: emulated nodes
 * (BAGUA_NODE_ID, network namespaces) on one host share its CPUs. Collective over d->comm.
 */
static bagua_status_t count_machine_ranks(bagua_ddp_t *d) {
  char name[256] = "";
  gethostname(name, sizeof(name) - 1);
  uint64_t h = 0xcbf29ce484222325ULL;
  for (const char *p = name; *p; p++) h = (h ^ (unsigned char)*p) * 0x100000001b3ULL;
  int64_t mine = (int64_t)(h >> 1), *all = malloc((size_t)d->size * sizeof(int64_t));
  if (!all) return BAGUA_ERR_NO_MEMORY;
  bagua_status_t st = bagua_allgather(d->comm, &mine, all, 1, BAGUA_I64);
  d->machine_ranks = 0;
  for (int i = 0; i < d->size && st == BAGUA_OK; i++) d->machine_ranks += all[i] == mine;
  free(all);
  cpu_set_t set;
  d->cpus = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
  return st;
}

/*
 * BAGUA_OVERLAP=-1 (an opt-in heuristic; the default is 1, see docs/algorithms.md for the
 * measurement that decided it): whether communicating during the backward pass can pay. On a GPU
 * the computation runs on the device and the communication thread has a CPU to itself. On the CPU
 * device, when the job's ranks on this machine are at least its usable CPUs, every CPU already
 * computes, so a communication thread running during backward takes its CPU from a rank's
 * computation and the overlap buys nothing (docs/benchmarks.md §8); holding communication
 * until the backward ends costs no more than that. Every rank must decide alike (the advisor
 * reads the setting), so the slowest machine's answer wins. Both collectives run whatever
 * BAGUA_OVERLAP says: an elastic newcomer's bagua_ddp_create() meets the survivors' rebuild,
 * which opens its communicators the same way.
 */
static bagua_status_t resolve_overlap(bagua_ddp_t *d) {
  int32_t mine = d->s.dev != &bagua__ddp_dev_cpu || d->machine_ranks < d->cpus, all;
  BAGUA_CHECK(bagua_allreduce(d->comm, &mine, &all, 1, BAGUA_I32, BAGUA_MIN));
  d->s.overlap = d->overlap_req < 0 ? all : d->overlap_req;
  return BAGUA_OK;
}

bagua_status_t bagua__ddp_comms_open(bagua_ddp_t *d, bagua_comm_t *comm) {
  bagua_comm_t *c = NULL, *intra = NULL, *inter = NULL, *async_comm = NULL;
  bagua_status_t st;
  /* A private communicator: the communication thread may then use it while the caller keeps
   * using its own (a communicator admits one calling thread at a time). */
  BAGUA_CHECK(bagua__ddp_tune_comm_split(d, comm, &c)); /* autotuning: more streams */
  if (d->s.hierarchical) BAGUA_CHECK_GOTO(bagua_comm_split_node(c, &intra, &inter), st, fail);
  if (d->s.algo->caps & BAGUA__ALGO_BACKGROUND)
    BAGUA_CHECK_GOTO(bagua_comm_split(c, 0, bagua_comm_rank(c), &async_comm), st, fail);
  /* The layer issues the same calls in the same order on every rank of these (ready()
   * compares the registrations), so they skip the per-call signature agreement. */
  bagua__comm_set_calls_agreed(c);
  bagua__comm_set_calls_agreed(intra);
  bagua__comm_set_calls_agreed(inter);
  bagua__comm_set_calls_agreed(async_comm);
  pthread_mutex_lock(&d->comm_mu);
  d->comm = c;
  d->intra = intra;
  d->inter = inter;
  d->async_comm = async_comm;
  d->rank = bagua_comm_rank(c);
  d->size = bagua_comm_size(c);
  d->node_count = bagua_comm_node_count(c);
  pthread_mutex_unlock(&d->comm_mu);
  /* The checks' bytes are counted against d->comm's counter, which starts again at 0; a failed
   * check is forgotten with the error an elastic rebuild clears. */
  atomic_store(&d->phase.bytes, 0);
  atomic_store(&d->phase.failed, 0);
  d->phase.told = 0;
  st = count_machine_ranks(d);
  if (st == BAGUA_OK) st = resolve_overlap(d);
  /* The device's communicators (NCCL on CUDA) mirror the CPU ones just made. */
  if (st == BAGUA_OK) st = d->s.dev->open(d);
  if (st != BAGUA_OK) {
    bagua__ddp_comms_close(d);
    return st;
  }
  return BAGUA_OK;
fail:
  bagua_comm_destroy(async_comm);
  bagua_comm_destroy(inter);
  bagua_comm_destroy(intra);
  bagua_comm_destroy(c);
  return st;
}

void bagua__ddp_comms_abort(bagua_ddp_t *d) {
  pthread_mutex_lock(&d->comm_mu);
  bagua_comm_abort(d->comm);
  bagua_comm_abort(d->intra);
  bagua_comm_abort(d->inter);
  bagua_comm_abort(d->async_comm);
  bagua__ddp_tune_abort(d);
  d->s.dev->abort(d);
  pthread_mutex_unlock(&d->comm_mu);
}

void bagua__ddp_comms_close(bagua_ddp_t *d) {
  d->s.dev->close(d);
  pthread_mutex_lock(&d->comm_mu);
  bagua_comm_t *c[4] = {d->async_comm, d->inter, d->intra, d->comm};
  d->comm = d->intra = d->inter = d->async_comm = NULL;
  pthread_mutex_unlock(&d->comm_mu);
  for (int i = 0; i < 4; i++) bagua_comm_destroy(c[i]);
}

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

/* ------------------------------------------------------------------------------------------ */
/* ready                                                                                      */
/* ------------------------------------------------------------------------------------------ */

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

static bagua_status_t zero_padding(bagua_ddp_t *d, float *buf) {
  for (int b = 0; b < d->nbuckets; b++) {
    const bagua__ddp_bucket_t *k = &d->buckets[b];
    if (k->count > k->used)
      BAGUA_CHECK(d->s.dev->zero(d, BAGUA__LANE_COMPUTE, buf + k->offset + k->used,
                                 (k->count - k->used) * sizeof(float)));
  }
  return BAGUA_OK;
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

static void reset_step(bagua_ddp_t *d) {
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
  if (v[0] != h || -v[1] != h)
    return usage("bagua_ddp_ready",
                 "ranks registered different tensors or configurations; every rank must "
                 "register the same tensor sizes in the same order with the same settings (and "
                 "number its steps before ready, or not, like the others)");
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
  reset_step(d);
  if (d->s.algo->next_step) BAGUA_CHECK_GOTO(d->s.algo->next_step(d), st, fail);
  return BAGUA_OK;
fail:
  return bagua__ddp_fail(d, st);
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
  reset_step(d);
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
