/*
 * Collective signatures: every rank of a collective call must agree on its kind, count,
 * dtype, op and root before any data moves, or every rank returns BAGUA_ERR_PROTOCOL. A rank
 * that refused its own arguments still takes part, with `refused` set: then every rank
 * returns BAGUA_ERR_INVALID_ARG.
 *
 * Shared memory compares the signatures each rank publishes in the arena's control area in the
 * call's first round (comm/shm/shm.c). TCP (and the hierarchical mix) first spreads the
 * bytewise minimum and maximum of the signatures in ceil(log2 n) rounds (48 bytes; 112 on a
 * power of two, where the frame has a slot for a small allreduce to ride in); only when
 * they differ does it gather every signature on every rank (a Bruck allgather) to name the
 * difference. Message sizes never depend on the signatures, so a mismatch leaves every stream
 * in step and the communicator usable. (Gathering the table every time cost O(n) bytes per rank
 * per collective: 24 KiB at 1024 ranks for an 8-byte allreduce. One all-to-all round was
 * measured slower with 4 ranks on 2 CPUs: 97-116 against 92-95 us per 8-byte allreduce.) Both
 * end in bagua__sig_compare(), so every rank sees the same table and logs the same first
 * difference.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "communicator.h"
#include "tcp/tcp.h"
#include "common/check.h"
#include "common/log.h"
#include "kernels/kernels.h"

const char *bagua__coll_name(int kind) {
  static const char *const names[] = {
      [BAGUA_COLL_ALLREDUCE] = "allreduce", [BAGUA_COLL_REDUCE_SCATTER] = "reduce_scatter",
      [BAGUA_COLL_ALLGATHER] = "allgather", [BAGUA_COLL_ALLTOALL] = "alltoall",
      [BAGUA_COLL_BROADCAST] = "broadcast", [BAGUA_COLL_REDUCE] = "reduce",
      [BAGUA_COLL_GATHER] = "gather",       [BAGUA_COLL_SCATTER] = "scatter",
      [BAGUA_COLL_BARRIER] = "barrier",
  };
  if (kind <= 0 || kind > BAGUA_COLL_BARRIER) return "an unknown collective";
  return names[kind];
}

static const char *dtype_text(uint8_t d, char *buf, size_t n) {
  const char *s = d == BAGUA_SIG_NONE ? NULL : bagua_dtype_name((bagua_dtype_t)d);
  if (s) return s;
  snprintf(buf, n, "%s", d == BAGUA_SIG_NONE ? "none" : "?");
  return buf;
}

static const char *op_text(uint8_t o, char *buf, size_t n) {
  const char *s = o == BAGUA_SIG_NONE ? NULL : bagua_op_name((bagua_op_t)o);
  if (s) return s;
  snprintf(buf, n, "%s", o == BAGUA_SIG_NONE ? "none" : "?");
  return buf;
}

static const char *root_text(int32_t r, char *buf, size_t n) {
  if (r == BAGUA_SIG_NO_ROOT)
    snprintf(buf, n, "none");
  else
    snprintf(buf, n, "%d", (int)r);
  return buf;
}

/* Logs the first field in which rank q's signature `b` differs from rank 0's `a`. */
static void log_difference(const bagua__coll_sig_t *a, const bagua__coll_sig_t *b, int q) {
  char x[16], y[16], what[160];
  const char *name = bagua__coll_name(b->kind);
  if (b->magic != BAGUA_WIRE_MAGIC || a->magic != BAGUA_WIRE_MAGIC)
    snprintf(what, sizeof(what),
             "rank %d sent no collective signature (a point-to-point call against a "
             "collective, or another build)",
             b->magic != BAGUA_WIRE_MAGIC ? q : 0);
  else if (a->kind != b->kind)
    snprintf(what, sizeof(what), "rank %d called %s, rank 0 %s", q, name,
             bagua__coll_name(a->kind));
  else if (a->count != b->count)
    snprintf(what, sizeof(what), "rank %d called %s with count %llu, rank 0 with %llu", q, name,
             (unsigned long long)b->count, (unsigned long long)a->count);
  else if (a->dtype != b->dtype)
    snprintf(what, sizeof(what), "rank %d called %s with dtype %s, rank 0 with %s", q, name,
             dtype_text(b->dtype, x, sizeof(x)), dtype_text(a->dtype, y, sizeof(y)));
  else if (a->op != b->op)
    snprintf(what, sizeof(what), "rank %d called %s with op %s, rank 0 with %s", q, name,
             op_text(b->op, x, sizeof(x)), op_text(a->op, y, sizeof(y)));
  else if (a->root != b->root)
    snprintf(what, sizeof(what), "rank %d called %s with root %s, rank 0 with %s", q, name,
             root_text(b->root, x, sizeof(x)), root_text(a->root, y, sizeof(y)));
  else
    snprintf(what, sizeof(what), "rank %d is at collective #%u (%s), rank 0 at #%u", q,
             (unsigned)b->seq, name, (unsigned)a->seq);
  BAGUA_WARN(
      "collective calls differ across ranks: %s; the call fails on every rank with "
      "BAGUA_ERR_PROTOCOL and the communicator stays usable",
      what);
}

/*
 * A call that some rank refused (its own check of its arguments failed, comm/coll.c) fails on
 * every rank with BAGUA_ERR_INVALID_ARG, before any other difference is looked at: the
 * refusing rank's fields may be anything. The refusing ranks have logged their own reason
 * (and keep it as their last error); the others name the first refusing rank.
 */
static bagua_status_t check_refused(bagua_comm_t *c, const char *base, size_t stride, int rot) {
  int n = c->size, first = -1, count = 0, mine = 0;
  for (int q = 0; q < n; q++) {
    const bagua__coll_sig_t *b =
        (const bagua__coll_sig_t *)(base + (size_t)bagua__mod(q - rot, n) * stride);
    if (!b->refused) continue;
    if (first < 0) first = q;
    count++;
    if (q == c->rank) mine = 1;
  }
  if (count == 0) return BAGUA_OK;
  const bagua__coll_sig_t *f =
      (const bagua__coll_sig_t *)(base + (size_t)bagua__mod(first - rot, n) * stride);
  if (mine)
    BAGUA_INFO(BAGUA_SUBSYS_COMM,
               "bagua_%s: %d of %d ranks refused their arguments (first: rank %d)",
               bagua__coll_name(f->kind), count, n, first);
  else
    BAGUA_WARN(
        "bagua_%s: rank %d refused its arguments (%d of %d ranks did; the warning on rank %d "
        "names the argument); the call fails on every rank with BAGUA_ERR_INVALID_ARG and the "
        "communicator stays usable",
        bagua__coll_name(f->kind), first, count, n, first);
  c->sig_mismatch = BAGUA_ERR_INVALID_ARG;
  return BAGUA_ERR_INVALID_ARG;
}

bagua_status_t bagua__sig_compare(bagua_comm_t *c, const char *base, size_t stride, int rot) {
  int n = c->size;
  BAGUA_CHECK(check_refused(c, base, stride, rot));
  /* Rank q's signature is entry (q - rot) mod n. */
  const bagua__coll_sig_t *first =
      (const bagua__coll_sig_t *)(base + (size_t)bagua__mod(-rot, n) * stride);
  for (int q = 1; q < n; q++) {
    const bagua__coll_sig_t *b =
        (const bagua__coll_sig_t *)(base + (size_t)bagua__mod(q - rot, n) * stride);
    if (memcmp(first, b, sizeof(*b)) == 0) continue;
    log_difference(first, b, q);
    c->sig_mismatch = BAGUA_ERR_PROTOCOL;
    return BAGUA_ERR_PROTOCOL;
  }
  return BAGUA_OK;
}

/* Bytewise minimum and maximum of the signatures seen so far: equal everywhere exactly when
 * every signature seen is the same. Combining is idempotent, so overlapping coverage (a
 * dissemination round on a world that is not a power of two) changes nothing. */
typedef struct {
  unsigned char lo[sizeof(bagua__coll_sig_t)], hi[sizeof(bagua__coll_sig_t)];
} sig_range_t;

/* Bruck allgather of the whole table: after the round of distance d, all[j] holds rank
 * (r + j)'s signature for j < min(2d, n). Message sizes depend on n only. */
static bagua_status_t gather_all(bagua_comm_t *c, const bagua__coll_sig_t *sig) {
  int n = c->size, r = c->rank;
  bagua__coll_sig_t *all = malloc((size_t)n * sizeof(*all));
  if (!all) return BAGUA_ERR_NO_MEMORY;
  bagua_status_t st = BAGUA_OK;
  all[0] = *sig;
  int have = 1;
  for (int d = 1; d < n; d <<= 1) {
    int m = have < n - have ? have : n - have;
    bagua__send_t snd = {bagua__mod(r - d, n), all, (size_t)m * sizeof(*all)};
    bagua__recv_t rcv = {bagua__mod(r + d, n), all + have, (size_t)m * sizeof(*all), NULL, 0, 0};
    BAGUA_CHECK_GOTO(bagua__exchange(c, &snd, 1, &rcv, 1), st, out);
    atomic_fetch_sub_explicit(&c->bytes_sent, snd.bytes, memory_order_relaxed);
    have += m;
  }
  /* all[j] is rank (r + j)'s: rank q sits at index q - r. */
  st = bagua__sig_compare(c, (const char *)all, sizeof(*all), r);
out:
  free(all);
  return st;
}

/* The rounds of the agreement on a world whose size is a power of two: recursive doubling, each
 * frame the range so far and a fixed slot a small allreduce rides in (bagua__sig_agree). The
 * frame's size is the same for every call, so a mismatch still leaves the streams in step. */
typedef struct {
  sig_range_t range;
  unsigned char slot[BAGUA__SIG_SLOT];
} sig_frame_t;

static void widen(sig_range_t *acc, const sig_range_t *in) {
  for (size_t i = 0; i < sizeof(acc->lo); i++) {
    if (in->lo[i] < acc->lo[i]) acc->lo[i] = in->lo[i];
    if (in->hi[i] > acc->hi[i]) acc->hi[i] = in->hi[i];
  }
}

static bagua_status_t agree_doubling(bagua_comm_t *c, sig_range_t *range,
                                     const bagua__sig_ride_t *ride, unsigned char *result) {
  int n = c->size, r = c->rank;
  size_t used = ride ? ride->count * bagua_dtype_size(ride->dt) : 0;
  sig_frame_t acc, in;
  memset(&acc, 0, sizeof(acc));
  acc.range = *range;
  if (ride) memcpy(acc.slot, ride->send, used);
  for (int mask = 1; mask < n; mask <<= 1) {
    int peer = r ^ mask;
    bagua__send_t snd = {peer, &acc, sizeof(acc)};
    bagua__recv_t rcv = {peer, &in, sizeof(in), NULL, 0, 0};
    BAGUA_CHECK(bagua__exchange(c, &snd, 1, &rcv, 1));
    /* The range is not payload; the slot's used bytes are, as in any allreduce round. */
    atomic_fetch_sub_explicit(&c->bytes_sent, sizeof(acc) - used, memory_order_relaxed);
    widen(&acc.range, &in.range);
    /* Both partners combine the same two operands (commutative ops), so every rank ends with
     * bit-identical values, as in the transport's own recursive doubling. */
    if (ride) bagua__reduce(ride->dt, ride->op, acc.slot, in.slot, ride->count);
  }
  *range = acc.range;
  memcpy(result, acc.slot, used);
  return BAGUA_OK;
}

int bagua__sig_can_ride(const bagua_comm_t *c, size_t bytes) {
  return c->size > 1 && (c->size & (c->size - 1)) == 0 && bytes <= BAGUA__SIG_SLOT;
}

bagua_status_t bagua__sig_agree(bagua_comm_t *c, const bagua__coll_sig_t *sig,
                                const bagua__sig_ride_t *ride) {
  int n = c->size, r = c->rank;
  if (n == 1) return BAGUA_OK;
  /* The signatures' bytewise range reaches every rank in ceil(log2 n) rounds: recursive
   * doubling on a power of two (where a small allreduce rides along), else the partners of
   * the Bruck allgather. Every rank ends with the range over all ranks, so they all agree
   * whether the table is needed; only a mismatch gathers it, to name the first difference (the
   * common case sends O(log n) bytes per rank per collective, not O(n)). */
  sig_range_t acc, in;
  unsigned char result[BAGUA__SIG_SLOT];
  memcpy(acc.lo, sig, sizeof(*sig));
  memcpy(acc.hi, sig, sizeof(*sig));
  if ((n & (n - 1)) == 0) {
    BAGUA_CHECK(agree_doubling(c, &acc, ride, result));
  } else {
    for (int d = 1; d < n; d <<= 1) {
      bagua__send_t snd = {bagua__mod(r - d, n), &acc, sizeof(acc)};
      bagua__recv_t rcv = {bagua__mod(r + d, n), &in, sizeof(in), NULL, 0, 0};
      BAGUA_CHECK(bagua__exchange(c, &snd, 1, &rcv, 1));
      /* Like the message headers, signatures are not payload: bytes_sent counts data only. */
      atomic_fetch_sub_explicit(&c->bytes_sent, snd.bytes, memory_order_relaxed);
      widen(&acc, &in);
    }
  }
  if (memcmp(acc.lo, acc.hi, sizeof(acc.lo)) == 0) {
    /* Only an agreed call writes its result: a mismatch leaves the caller's buffer as it was,
     * as on the path where the transport runs after the agreement. */
    if (ride) memcpy(ride->out, result, ride->count * bagua_dtype_size(ride->dt));
    return BAGUA_OK;
  }
  return gather_all(c, sig);
}
