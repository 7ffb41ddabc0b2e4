/*
 * Public collective entry points. Every call is described once (call_t), checked once by
 * check_args() before any transport runs (the argument contract of include/bagua/comm.h),
 * then a collective agrees on its signature with the other ranks (comm/sig.c; on shared memory
 * inside its first round), whether or not its own check passed, and is dispatched to the
 * transport's implementation. Failures poison the communicator; invalid arguments and a
 * signature mismatch do not.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "communicator.h"
#include "shm/shm.h"
#include "tcp/tcp.h"
#include "common/check.h"
#include "common/log.h"
#include "kernels/kernels.h"

/* Point-to-point kinds, after the collective ones of wire.h. */
enum { P2P_SEND = 32, P2P_RECV, P2P_SENDRECV, P2P_NEIGHBOR };

/* What a public call passed. `count` is per rank block for the kinds with F_BLOCKS. */
typedef struct {
  int kind; /* BAGUA_COLL_* or P2P_* */
  const char *fn;
  const void *s;
  void *r;
  size_t count;
  bagua_dtype_t dt;
  int op;   /* kinds with F_OP */
  int root; /* kinds with F_ROOT */
  /* point-to-point: s/count go to peer (dst), r/count2 come from peer2 (src); the neighbour
   * exchange receives count elements from peer (left) into r and from peer2 (right) into r2 */
  int peer, peer2;
  size_t count2;
  void *r2;
} call_t;

enum { F_OP = 1, F_ROOT = 2, F_BLOCKS = 4, F_NODTYPE = 8 };

static unsigned flags_of(int kind) {
  switch (kind) {
    case BAGUA_COLL_ALLREDUCE:
      return F_OP;
    case BAGUA_COLL_REDUCE_SCATTER:
      return F_OP | F_BLOCKS;
    case BAGUA_COLL_ALLGATHER:
    case BAGUA_COLL_ALLTOALL:
      return F_BLOCKS;
    case BAGUA_COLL_BROADCAST:
      return F_ROOT;
    case BAGUA_COLL_REDUCE:
      return F_OP | F_ROOT;
    case BAGUA_COLL_GATHER:
    case BAGUA_COLL_SCATTER:
      return F_ROOT | F_BLOCKS;
    case BAGUA_COLL_BARRIER:
      return F_NODTYPE;
    default:
      return 0;
  }
}

static void names_of(char *buf, size_t n, int count, const char *(*name)(int)) {
  size_t at = 0;
  buf[0] = '\0';
  for (int i = 0; i < count && at < n; i++)
    at += (size_t)snprintf(buf + at, n - at, "%s%s", i ? " " : "", name(i));
}

static const char *dtype_name_i(int i) {
  return bagua_dtype_name((bagua_dtype_t)i);
}
static const char *op_name_i(int i) {
  return bagua_op_name((bagua_op_t)i);
}

/* [a, a + na) and [b, b + nb) share a byte. */
static int overlap(const void *a, size_t na, const void *b, size_t nb) {
  uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  return na && nb && x < y + nb && y < x + na;
}

static bagua_status_t need(const void *p, const char *fn, const char *what) {
  if (p) return BAGUA_OK;
  BAGUA_WARN("%s: %s is NULL but the count is not zero", fn, what);
  return BAGUA_ERR_INVALID_ARG;
}

/* A buffer of `nb` bytes at b that must be either the in-place position `inplace` of a buffer
 * of `na` bytes at a, or not overlap it at all. */
static bagua_status_t disjoint(const char *fn, const char *what, const void *a, size_t na,
                               const void *b, size_t nb, const void *inplace, const char *rule) {
  if (b == inplace || !overlap(a, na, b, nb)) return BAGUA_OK;
  BAGUA_WARN("%s: %s overlap; accepted: %s, or buffers that do not overlap", fn, what, rule);
  return BAGUA_ERR_INVALID_ARG;
}

static bagua_status_t check_peer(bagua_comm_t *c, const char *fn, const char *what, int peer,
                                 int allow_self) {
  if (peer < 0 || peer >= c->size || (!allow_self && peer == c->rank)) {
    BAGUA_WARN("%s: %s %d is invalid; accepted: a rank in [0, %d)%s", fn, what, peer, c->size,
               allow_self ? "" : " other than this rank");
    return BAGUA_ERR_INVALID_ARG;
  }
  return BAGUA_OK;
}

/* The buffers this rank uses, their sizes and the in-place rules of include/bagua/comm.h. */
static bagua_status_t check_buffers(bagua_comm_t *c, const call_t *a) {
  const char *fn = a->fn;
  size_t es = bagua_dtype_size(a->dt), b = a->count * es, nb = b * (size_t)c->size;
  int me = c->rank, root = a->root;
  const char *s = a->s;
  char *r = a->r;
  switch (a->kind) {
    case BAGUA_COLL_ALLREDUCE:
      BAGUA_CHECK(need(s, fn, "sendbuf"));
      BAGUA_CHECK(need(r, fn, "recvbuf"));
      return disjoint(fn, "sendbuf and recvbuf", s, b, r, b, s, "the same buffer (in place)");
    case BAGUA_COLL_REDUCE_SCATTER:
      BAGUA_CHECK(need(s, fn, "sendbuf"));
      BAGUA_CHECK(need(r, fn, "recvbuf"));
      return disjoint(fn, "sendbuf and recvbuf", s, nb, r, b, s + (size_t)me * b,
                      "recvbuf = sendbuf + rank * recvcount elements (in place)");
    case BAGUA_COLL_ALLGATHER:
      BAGUA_CHECK(need(s, fn, "sendbuf"));
      BAGUA_CHECK(need(r, fn, "recvbuf"));
      return disjoint(fn, "sendbuf and recvbuf", r, nb, s, b, r + (size_t)me * b,
                      "sendbuf = recvbuf + rank * sendcount elements (in place)");
    case BAGUA_COLL_ALLTOALL:
      BAGUA_CHECK(need(s, fn, "sendbuf"));
      BAGUA_CHECK(need(r, fn, "recvbuf"));
      return disjoint(fn, "sendbuf and recvbuf", s, nb, r, nb, s, "the same buffer (in place)");
    case BAGUA_COLL_BROADCAST:
      if (me == root) BAGUA_CHECK(need(s, fn, "sendbuf on the root"));
      BAGUA_CHECK(need(r, fn, "recvbuf"));
      if (me != root) return BAGUA_OK;
      return disjoint(fn, "sendbuf and recvbuf", s, b, r, b, s, "the same buffer (in place)");
    case BAGUA_COLL_REDUCE:
      BAGUA_CHECK(need(s, fn, "sendbuf"));
      if (me != root) return BAGUA_OK;
      BAGUA_CHECK(need(r, fn, "recvbuf on the root"));
      return disjoint(fn, "sendbuf and recvbuf", s, b, r, b, s, "the same buffer (in place)");
    case BAGUA_COLL_GATHER:
      BAGUA_CHECK(need(s, fn, "sendbuf"));
      if (me != root) return BAGUA_OK;
      BAGUA_CHECK(need(r, fn, "recvbuf on the root"));
      return disjoint(fn, "sendbuf and recvbuf", r, nb, s, b, r + (size_t)root * b,
                      "sendbuf = recvbuf + root * sendcount elements (in place)");
    case BAGUA_COLL_SCATTER:
      if (me == root) BAGUA_CHECK(need(s, fn, "sendbuf on the root"));
      BAGUA_CHECK(need(r, fn, "recvbuf"));
      if (me != root) return BAGUA_OK;
      return disjoint(fn, "sendbuf and recvbuf", s, nb, r, b, s + (size_t)root * b,
                      "recvbuf = sendbuf + root * recvcount elements (in place)");
    case P2P_SEND:
      return need(s, fn, "buf");
    case P2P_RECV:
      return need(r, fn, "buf");
    case P2P_SENDRECV:
      if (a->count) BAGUA_CHECK(need(s, fn, "sbuf"));
      if (a->count2) BAGUA_CHECK(need(r, fn, "rbuf"));
      return BAGUA_OK;
    case P2P_NEIGHBOR:
      BAGUA_CHECK(need(s, fn, "sendbuf"));
      BAGUA_CHECK(need(r, fn, "leftbuf"));
      BAGUA_CHECK(need(a->r2, fn, "rightbuf"));
      if (overlap(s, b, r, b) || overlap(s, b, a->r2, b) || overlap(r, b, a->r2, b)) {
        BAGUA_WARN(
            "%s: sendbuf, leftbuf and rightbuf overlap; accepted: three buffers that do "
            "not overlap",
            fn);
        return BAGUA_ERR_INVALID_ARG;
      }
      return BAGUA_OK;
    default:
      return BAGUA_OK;
  }
}

/*
 * The one argument check of every public collective and point-to-point call: communicator,
 * dtype, op, root, peers, counts, buffers and in-place rules. Nothing has been sent when it
 * fails, and an invalid argument does not poison.
 */
static bagua_status_t check_args(bagua_comm_t *c, const call_t *a) {
  const char *fn = a->fn;
  unsigned f = flags_of(a->kind);
  char list[160];
  if (!c) {
    BAGUA_WARN("%s: communicator is NULL", fn);
    return BAGUA_ERR_INVALID_ARG;
  }
  if (!(f & F_NODTYPE) && (unsigned)a->dt >= BAGUA_DTYPE__COUNT) {
    names_of(list, sizeof(list), BAGUA_DTYPE__COUNT, dtype_name_i);
    BAGUA_WARN("%s: dtype %d is invalid; accepted: %s", fn, (int)a->dt, list);
    return BAGUA_ERR_INVALID_ARG;
  }
  if ((f & F_OP) && (unsigned)a->op >= BAGUA_OP__COUNT) {
    names_of(list, sizeof(list), BAGUA_OP__COUNT, op_name_i);
    BAGUA_WARN("%s: op %d is invalid; accepted: %s", fn, a->op, list);
    return BAGUA_ERR_INVALID_ARG;
  }
  if ((f & F_ROOT) && (a->root < 0 || a->root >= c->size)) {
    BAGUA_WARN("%s: root %d is out of range; accepted: a rank in [0, %d)", fn, a->root, c->size);
    return BAGUA_ERR_INVALID_ARG;
  }
  size_t mult = (f & F_BLOCKS) ? (size_t)c->size : 1;
  size_t most = a->count > a->count2 ? a->count : a->count2;
  if (most > SIZE_MAX / 8 / mult) {
    BAGUA_WARN("%s: count %zu is too large; accepted: at most %zu", fn, most, SIZE_MAX / 8 / mult);
    return BAGUA_ERR_INVALID_ARG;
  }
  switch (a->kind) {
    case P2P_SEND:
    case P2P_RECV:
      BAGUA_CHECK(check_peer(c, fn, "peer", a->peer, 0));
      break;
    case P2P_SENDRECV:
      BAGUA_CHECK(check_peer(c, fn, "dst", a->peer, 1));
      BAGUA_CHECK(check_peer(c, fn, "src", a->peer2, 1));
      if ((a->peer == c->rank) != (a->peer2 == c->rank)) {
        BAGUA_WARN("%s: a rank can exchange with itself only as both dst and src", fn);
        return BAGUA_ERR_INVALID_ARG;
      }
      if (a->peer == c->rank && a->count != a->count2) {
        BAGUA_WARN("%s: self exchange with send count %zu != receive count %zu", fn, a->count,
                   a->count2);
        return BAGUA_ERR_INVALID_ARG;
      }
      break;
    case P2P_NEIGHBOR:
      BAGUA_CHECK(check_peer(c, fn, "left", a->peer, 0));
      BAGUA_CHECK(check_peer(c, fn, "right", a->peer2, 0));
      break;
    default:
      break;
  }
  if (a->count || a->count2) BAGUA_CHECK(check_buffers(c, a));
  return BAGUA_OK;
}

/* The poisoned-communicator rule: a failed communicator refuses every later call. */
static bagua_status_t check_alive(bagua_comm_t *c, const char *fn) {
  bagua_status_t st = (bagua_status_t)atomic_load(&c->async_error);
  if (st != BAGUA_OK) {
    BAGUA_WARN("%s: communicator already failed (%s); destroy it and create a new one", fn,
               bagua_err_name(st));
    return st;
  }
  return BAGUA_OK;
}

/* The check of a point-to-point call, which is matched per pair and has no agreement. */
static bagua_status_t check_call(bagua_comm_t *c, const call_t *a) {
  BAGUA_CHECK(check_args(c, a));
  return check_alive(c, a->fn);
}

static bagua_status_t finish(bagua_comm_t *c, bagua_status_t st) {
  return st == BAGUA_OK ? st : bagua__comm_poison(c, st);
}

static bagua_status_t dispatch(bagua_comm_t *c, const call_t *a) {
  const void *s = a->s;
  void *r = a->r;
  size_t n = a->count;
  bagua_dtype_t dt = a->dt;
  bagua_op_t op = (bagua_op_t)a->op;
  switch (a->kind) {
    case BAGUA_COLL_ALLREDUCE:
      return c->ops->allreduce(c, s, r, n, dt, op);
    case BAGUA_COLL_REDUCE_SCATTER:
      return c->ops->reduce_scatter(c, s, r, n, dt, op);
    case BAGUA_COLL_ALLGATHER:
      return c->ops->allgather(c, s, r, n, dt);
    case BAGUA_COLL_ALLTOALL:
      return c->ops->alltoall(c, s, r, n, dt);
    case BAGUA_COLL_BROADCAST:
      return c->ops->broadcast(c, c->rank == a->root ? s : r, r, n, dt, a->root);
    case BAGUA_COLL_REDUCE:
      return c->ops->reduce(c, s, r, n, dt, op, a->root);
    case BAGUA_COLL_GATHER:
      return c->ops->gather(c, s, r, n, dt, a->root);
    case BAGUA_COLL_SCATTER:
      return c->ops->scatter(c, s, r, n, dt, a->root);
    case BAGUA_COLL_BARRIER:
      return c->ops->barrier(c);
    default:
      return BAGUA_ERR_INTERNAL;
  }
}

/*
 * Checks a collective call, agrees on its signature and runs it. A count of 0 moves no data but
 * is still a collective call: its signature is compared like any other. A signature mismatch
 * returns BAGUA_ERR_PROTOCOL on every rank and leaves the communicator usable.
 *
 * A collective is collective on every path: a rank whose own check fails (a NULL buffer on the
 * root only, say, which the other ranks cannot see) still enters the agreement, with its
 * signature marked refused, instead of returning before it. Every rank then fails this call
 * with BAGUA_ERR_INVALID_ARG, and the next call pairs with the next call everywhere. (Returning
 * early left the other ranks' call to pair with this rank's next one: that call failed, and
 * every later one, as a mismatch.)
 */
static bagua_status_t collective(bagua_comm_t *c, const call_t *a) {
  if (!c) return check_args(c, a); /* names the NULL communicator */
  bagua_status_t mine = check_args(c, a);
  /* A failed communicator takes part in nothing; the argument error, if any, comes first. */
  if (atomic_load(&c->async_error) != BAGUA_OK)
    return mine != BAGUA_OK ? mine : check_alive(c, a->fn);
  unsigned f = flags_of(a->kind);
  bagua__coll_sig_t sig = {
      .count = a->count,
      .seq = c->coll_seq++,
      .kind = (uint8_t)a->kind,
      .op = (f & F_OP) ? (uint8_t)a->op : BAGUA_SIG_NONE,
      .dtype = (f & F_NODTYPE) ? BAGUA_SIG_NONE : (uint8_t)a->dt,
      .refused = mine != BAGUA_OK,
      .root = (f & F_ROOT) ? a->root : BAGUA_SIG_NO_ROOT,
      .magic = BAGUA_WIRE_MAGIC,
  };
  int on_shm = c->shm && c->ops == &bagua__shm_ops && !c->sig_by_parent;
  bagua_status_t st = BAGUA_OK;
  c->sig_mismatch = 0;
  if (on_shm)
    bagua__shm_expect(c->shm, &sig); /* published and compared in the call's first round */
  size_t bytes = a->count * (size_t)((f & F_NODTYPE) ? 0 : bagua_dtype_size(a->dt));
  /* A small allreduce over TCP rides in the agreement's own rounds (comm/sig.c): the 8-byte
   * allreduce then costs log2 n rounds, not twice that. Every rank decides alike: the choice
   * reads only c and the call, which the agreement itself then checks. */
  int ride = !on_shm && !c->sig_by_parent && mine == BAGUA_OK && a->kind == BAGUA_COLL_ALLREDUCE &&
             a->count > 0 && c->ops == &bagua__tcp_ops && bagua__sig_can_ride(c, bytes);
  bagua__sig_ride_t rd = {a->s, a->r, a->count, a->dt, (bagua_op_t)a->op};
  if (!on_shm && !c->sig_by_parent) st = bagua__sig_agree(c, &sig, ride ? &rd : NULL);
  /* A refused call moves no data here; on shared memory bagua__shm_sig_done then runs the
   * signature round by itself, which the others' first round meets. */
  if (st == BAGUA_OK && ride) {
    if (a->op == BAGUA_AVG) bagua__div(a->dt, a->r, a->count, c->size);
  } else if (st == BAGUA_OK && mine == BAGUA_OK &&
             (a->count > 0 || a->kind == BAGUA_COLL_BARRIER)) {
    st = dispatch(c, a);
  }
  if (on_shm) st = bagua__shm_sig_done(c->shm, st);
  if (st != BAGUA_OK && c->sig_mismatch) { /* logged by bagua__sig_compare, not a failure */
    st = (bagua_status_t)c->sig_mismatch;
    c->sig_mismatch = 0;
    return st;
  }
  /* Every rank refused (the agreement found no difference), or nothing to agree with. */
  if (st == BAGUA_OK && mine != BAGUA_OK) return mine;
  return finish(c, st);
}

bagua_status_t bagua_allreduce(bagua_comm_t *c, const void *s, void *r, size_t count,
                               bagua_dtype_t dt, bagua_op_t op) {
  call_t a = {.kind = BAGUA_COLL_ALLREDUCE,
              .fn = "bagua_allreduce",
              .s = s,
              .r = r,
              .count = count,
              .dt = dt,
              .op = (int)op};
  return collective(c, &a);
}

bagua_status_t bagua_reduce_scatter(bagua_comm_t *c, const void *s, void *r, size_t count,
                                    bagua_dtype_t dt, bagua_op_t op) {
  call_t a = {.kind = BAGUA_COLL_REDUCE_SCATTER,
              .fn = "bagua_reduce_scatter",
              .s = s,
              .r = r,
              .count = count,
              .dt = dt,
              .op = (int)op};
  return collective(c, &a);
}

bagua_status_t bagua_allgather(bagua_comm_t *c, const void *s, void *r, size_t count,
                               bagua_dtype_t dt) {
  call_t a = {.kind = BAGUA_COLL_ALLGATHER,
              .fn = "bagua_allgather",
              .s = s,
              .r = r,
              .count = count,
              .dt = dt};
  return collective(c, &a);
}

bagua_status_t bagua_alltoall(bagua_comm_t *c, const void *s, void *r, size_t count,
                              bagua_dtype_t dt) {
  call_t a = {.kind = BAGUA_COLL_ALLTOALL,
              .fn = "bagua_alltoall",
              .s = s,
              .r = r,
              .count = count,
              .dt = dt};
  return collective(c, &a);
}

bagua_status_t bagua_broadcast(bagua_comm_t *c, const void *s, void *r, size_t count,
                               bagua_dtype_t dt, int root) {
  call_t a = {.kind = BAGUA_COLL_BROADCAST,
              .fn = "bagua_broadcast",
              .s = s,
              .r = r,
              .count = count,
              .dt = dt,
              .root = root};
  return collective(c, &a);
}

bagua_status_t bagua_reduce(bagua_comm_t *c, const void *s, void *r, size_t count, bagua_dtype_t dt,
                            bagua_op_t op, int root) {
  call_t a = {.kind = BAGUA_COLL_REDUCE,
              .fn = "bagua_reduce",
              .s = s,
              .r = r,
              .count = count,
              .dt = dt,
              .op = (int)op,
              .root = root};
  return collective(c, &a);
}

bagua_status_t bagua_gather(bagua_comm_t *c, const void *s, void *r, size_t count, bagua_dtype_t dt,
                            int root) {
  call_t a = {.kind = BAGUA_COLL_GATHER,
              .fn = "bagua_gather",
              .s = s,
              .r = r,
              .count = count,
              .dt = dt,
              .root = root};
  return collective(c, &a);
}

bagua_status_t bagua_scatter(bagua_comm_t *c, const void *s, void *r, size_t count,
                             bagua_dtype_t dt, int root) {
  call_t a = {.kind = BAGUA_COLL_SCATTER,
              .fn = "bagua_scatter",
              .s = s,
              .r = r,
              .count = count,
              .dt = dt,
              .root = root};
  return collective(c, &a);
}

bagua_status_t bagua_barrier(bagua_comm_t *c) {
  call_t a = {.kind = BAGUA_COLL_BARRIER, .fn = "bagua_barrier"};
  return collective(c, &a);
}

/* Point-to-point calls are matched per pair of ranks by the receiver: a message of another
 * length (or out of sequence) is BAGUA_ERR_PROTOCOL there (comm/tcp/exchange.c). */

bagua_status_t bagua_send(bagua_comm_t *c, const void *buf, size_t count, bagua_dtype_t dt,
                          int peer) {
  call_t a = {
      .kind = P2P_SEND, .fn = "bagua_send", .s = buf, .count = count, .dt = dt, .peer = peer};
  BAGUA_CHECK(check_call(c, &a));
  bagua__send_t s = {peer, buf, count * bagua_dtype_size(dt)};
  return finish(c, bagua__exchange(c, &s, 1, NULL, 0));
}

bagua_status_t bagua_recv(bagua_comm_t *c, void *buf, size_t count, bagua_dtype_t dt, int peer) {
  call_t a = {
      .kind = P2P_RECV, .fn = "bagua_recv", .r = buf, .count = count, .dt = dt, .peer = peer};
  BAGUA_CHECK(check_call(c, &a));
  bagua__recv_t r = {peer, buf, count * bagua_dtype_size(dt), NULL, 0, 0};
  return finish(c, bagua__exchange(c, NULL, 0, &r, 1));
}

bagua_status_t bagua_sendrecv(bagua_comm_t *c, const void *sbuf, size_t scount, int dst, void *rbuf,
                              size_t rcount, int src, bagua_dtype_t dt) {
  call_t a = {.kind = P2P_SENDRECV,
              .fn = "bagua_sendrecv",
              .s = sbuf,
              .r = rbuf,
              .count = scount,
              .count2 = rcount,
              .dt = dt,
              .peer = dst,
              .peer2 = src};
  BAGUA_CHECK(check_call(c, &a));
  size_t es = bagua_dtype_size(dt);
  if (dst == c->rank) {
    if (scount) memmove(rbuf, sbuf, scount * es);
    return BAGUA_OK;
  }
  bagua__send_t s = {dst, sbuf, scount * es};
  bagua__recv_t r = {src, rbuf, rcount * es, NULL, 0, 0};
  return finish(c, bagua__exchange(c, &s, 1, &r, 1));
}

bagua_status_t bagua_neighbor_exchange(bagua_comm_t *c, const void *sbuf, size_t count, int left,
                                       void *lbuf, int right, void *rbuf, bagua_dtype_t dt) {
  call_t a = {.kind = P2P_NEIGHBOR,
              .fn = "bagua_neighbor_exchange",
              .s = sbuf,
              .r = lbuf,
              .r2 = rbuf,
              .count = count,
              .dt = dt,
              .peer = left,
              .peer2 = right};
  BAGUA_CHECK(check_call(c, &a));
  if (count == 0) return BAGUA_OK;
  size_t bytes = count * bagua_dtype_size(dt);
  /* The exchange engine takes at most one send and one receive per peer. */
  if (left == right) {
    bagua__send_t s = {left, sbuf, bytes};
    bagua__recv_t r = {left, lbuf, bytes, NULL, 0, 0};
    BAGUA_CHECK(finish(c, bagua__exchange(c, &s, 1, &r, 1)));
    memcpy(rbuf, lbuf, bytes);
    return BAGUA_OK;
  }
  bagua__send_t s[2] = {{left, sbuf, bytes}, {right, sbuf, bytes}};
  bagua__recv_t r[2] = {{left, lbuf, bytes, NULL, 0, 0}, {right, rbuf, bytes, NULL, 0, 0}};
  return finish(c, bagua__exchange(c, s, 2, r, 2));
}
