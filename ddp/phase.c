/*
 * The phase check: when the program numbers its steps (bagua_ddp_set_step), every step that
 * communicates starts its communication by comparing the step's number across the ranks, so
 * that a rank which skipped an iteration (or ran one twice) fails the step on every rank with
 * BAGUA_ERR_PROTOCOL instead of averaging its bucket i with another iteration's bucket i.
 *
 * Why the program's numbers. A step is a collective call, so the number of steps each rank has
 * completed (d->steps) stays equal on every rank by construction: a rank that skips an
 * iteration without calling into the library makes the same calls in the same order as the
 * others, one iteration late, and its next step meets theirs as a perfect match. Only the
 * program knows which iteration a step belongs to. Checking the library's own count would find
 * nothing and still cost an exchange per step, so unnumbered contexts do not check at all (they
 * run exactly as before); a rank that runs out of steps then shows only at the end, where the
 * others' last step meets no partner and fails (BAGUA_ERR_REMOTE once the rank has destroyed
 * its context, else BAGUA_ERR_TIMEOUT), never hanging.
 *
 * How. The context's private communicators skip the per-call signature agreement of
 * comm/sig.c, and nothing below the layer tells one step's calls from another's: they are the
 * same calls. One 16-byte allreduce-MIN of {number, -number} gives every rank the lowest and
 * the highest number at once. It is a job of the communication thread queued before the
 * step's first job, so it completes before any of the step's data moves (on a GPU, before any
 * of its NCCL work is enqueued), and it runs on d->comm, which spans every rank whatever the
 * algorithm and the hierarchy use for the data. Every rank computes the same extremes, so every
 * rank fails the same check. Numbering is on for every rank or none (ready compares it with the
 * layout), so every rank queues the same checks.
 *
 * Which steps. Those whose buckets carry gradients (gradient_allreduce, bytegrad, qadam, async
 * during its warm-up; the check starts when the program numbers the step, during its forward
 * pass, or else before the first bucket), and those whose weight exchange runs
 * (decentralized, checked when the exchange is queued at the end of the step before;
 * low_precision_decentralized, after the update). Steps that communicate nothing
 * (decentralized between exchanges, async after its warm-up, whose ranks are at different
 * steps by design while the averaging thread's rounds agree through their own negotiation)
 * have no check, and the next step that communicates compares the numbers again.
 */

#include "common/check.h"
#include "common/log.h"
#include "ddp_internal.h"

bagua_status_t bagua__ddp_phase_job(bagua_ddp_t *d, void *arg) {
  (void)arg;
  bagua__ddp_phase_t *p = &d->phase;
  int64_t mine = p->sent, v[2] = {mine, -mine};
  uint64_t before = bagua_comm_bytes_sent(d->comm);
  BAGUA_CHECK(bagua_allreduce(d->comm, v, v, 2, BAGUA_I64, BAGUA_MIN));
  /* Like the communicators' signatures, the check is not payload: the statistics leave it out
   * (bagua__ddp_bytes_sent), so bytes per step stay those of the algorithm. */
  atomic_fetch_add(&p->bytes, bagua_comm_bytes_sent(d->comm) - before);
  if (v[0] == mine && -v[1] == mine) return BAGUA_OK;
  /* Every rank gets the same lowest and highest number, so every rank fails here, before the
   * step's first bucket. The training thread reports it (bagua__ddp_phase_explain), where the
   * program's call returns the error and bagua_last_error() is read. */
  p->lo = v[0];
  p->hi = -v[1];
  atomic_store(&p->failed, 1);
  BAGUA_INFO(BAGUA_SUBSYS_COMM,
             "ddp: phase check: this rank at step %lld, the ranks at %lld .. %lld", (long long)mine,
             (long long)p->lo, (long long)p->hi);
  return BAGUA_ERR_PROTOCOL;
}

bagua_status_t bagua__ddp_phase_explain(bagua_ddp_t *d, bagua_status_t st) {
  bagua__ddp_phase_t *p = &d->phase;
  if (st != BAGUA_ERR_PROTOCOL || !atomic_load(&p->failed) || p->told) return st;
  p->told = 1;
  BAGUA_WARN(
      "ddp: the ranks are at different steps: this rank's step %lld met step %lld on another "
      "rank (numbers across the ranks: %lld .. %lld); a rank skipped a step or ran one more. "
      "The step fails with BAGUA_ERR_PROTOCOL on every rank before any of its data moved",
      (long long)p->sent, (long long)(p->sent == p->lo ? p->hi : p->lo), (long long)p->lo,
      (long long)p->hi);
  return st;
}
