/*
 * The data-parallel context's primitives, below everything else in ddp/: failing a context
 * (the sticky error every thread reads), allocating on its device, and opening, aborting and
 * closing its private communicators. ddp.c (the public API), build.c, elastic.c, the
 * scheduler and the optimizer all call these, and these call none of them.
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
