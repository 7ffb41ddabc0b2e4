/*
 * Public collective entry points: argument checks, the poisoned-communicator rule, dispatch
 * to the transport's implementation (or the generic one) and poisoning on failure.
 */
#include <stdint.h>
#include <string.h>

#include "comm_internal.h"
#include "common/check.h"
#include "common/log.h"

/* How many buffers of `count` elements a collective touches on one rank. */
#define PER_RANK 0 /* one per rank of the communicator (count * size elements) */

/* Checks what every collective needs. `mult` is how many times `count` elements one buffer
 * holds: 1, or PER_RANK for count * size (read only after `c` is known not to be NULL). */
static bagua_status_t check_args(bagua_comm_t *c, const char *fn, bagua_dtype_t dt, int op,
                                 int root, size_t count, size_t mult) {
  if (!c) {
    BAGUA_WARN("%s: communicator is NULL", fn);
    return BAGUA_ERR_INVALID_ARG;
  }
  if (mult == PER_RANK) mult = (size_t)c->size;
  if ((unsigned)dt >= BAGUA_DTYPE__COUNT) {
    BAGUA_WARN("%s: dtype %d is invalid; accepted: f32 f16 bf16 f64 i32 i64 u8", fn, (int)dt);
    return BAGUA_ERR_INVALID_ARG;
  }
  if (op >= 0 && (unsigned)op >= BAGUA_OP__COUNT) {
    BAGUA_WARN("%s: op %d is invalid; accepted: sum avg min max", fn, op);
    return BAGUA_ERR_INVALID_ARG;
  }
  if (root != -1 && (root < 0 || root >= c->size)) {
    BAGUA_WARN("%s: root %d is out of range [0, %d)", fn, root, c->size);
    return BAGUA_ERR_INVALID_ARG;
  }
  if (count > SIZE_MAX / 8 / (mult ? mult : 1)) {
    BAGUA_WARN("%s: count %zu is too large", fn, count);
    return BAGUA_ERR_INVALID_ARG;
  }
  bagua_status_t st = (bagua_status_t)atomic_load(&c->async_error);
  if (st != BAGUA_OK) {
    BAGUA_WARN("%s: communicator already failed (%s); destroy it and create a new one", fn,
               bagua_err_name(st));
    return st;
  }
  return BAGUA_OK;
}

#define NEED_BUF(p, fn, name)                                           \
  do {                                                                  \
    if ((p) == NULL) {                                                  \
      BAGUA_WARN("%s: %s is NULL but the count is not zero", fn, name); \
      return BAGUA_ERR_INVALID_ARG;                                     \
    }                                                                   \
  } while (0)

static bagua_status_t finish(bagua_comm_t *c, bagua_status_t st) {
  return st == BAGUA_OK ? st : bagua__comm_poison(c, st);
}

#define OPS(c, name) ((c)->ops->name ? (c)->ops->name : bagua__generic_ops.name)

bagua_status_t bagua_allreduce(bagua_comm_t *c, const void *s, void *r, size_t count,
                               bagua_dtype_t dt, bagua_op_t op) {
  BAGUA_CHECK(check_args(c, "bagua_allreduce", dt, (int)op, -1, count, 1));
  if (count == 0) return BAGUA_OK;
  NEED_BUF(s, "bagua_allreduce", "sendbuf");
  NEED_BUF(r, "bagua_allreduce", "recvbuf");
  return finish(c, OPS(c, allreduce)(c, s, r, count, dt, op));
}

bagua_status_t bagua_reduce_scatter(bagua_comm_t *c, const void *s, void *r, size_t count,
                                    bagua_dtype_t dt, bagua_op_t op) {
  BAGUA_CHECK(check_args(c, "bagua_reduce_scatter", dt, (int)op, -1, count, PER_RANK));
  if (count == 0) return BAGUA_OK;
  NEED_BUF(s, "bagua_reduce_scatter", "sendbuf");
  NEED_BUF(r, "bagua_reduce_scatter", "recvbuf");
  return finish(c, OPS(c, reduce_scatter)(c, s, r, count, dt, op));
}

bagua_status_t bagua_allgather(bagua_comm_t *c, const void *s, void *r, size_t count,
                               bagua_dtype_t dt) {
  BAGUA_CHECK(check_args(c, "bagua_allgather", dt, -1, -1, count, PER_RANK));
  if (count == 0) return BAGUA_OK;
  NEED_BUF(s, "bagua_allgather", "sendbuf");
  NEED_BUF(r, "bagua_allgather", "recvbuf");
  return finish(c, OPS(c, allgather)(c, s, r, count, dt));
}

bagua_status_t bagua_alltoall(bagua_comm_t *c, const void *s, void *r, size_t count,
                              bagua_dtype_t dt) {
  BAGUA_CHECK(check_args(c, "bagua_alltoall", dt, -1, -1, count, PER_RANK));
  if (count == 0) return BAGUA_OK;
  NEED_BUF(s, "bagua_alltoall", "sendbuf");
  NEED_BUF(r, "bagua_alltoall", "recvbuf");
  return finish(c, OPS(c, alltoall)(c, s, r, count, dt));
}

bagua_status_t bagua_broadcast(bagua_comm_t *c, const void *s, void *r, size_t count,
                               bagua_dtype_t dt, int root) {
  BAGUA_CHECK(check_args(c, "bagua_broadcast", dt, -1, root, count, 1));
  if (count == 0) return BAGUA_OK;
  if (c->rank == root) NEED_BUF(s, "bagua_broadcast", "sendbuf on the root");
  NEED_BUF(r, "bagua_broadcast", "recvbuf");
  return finish(c, OPS(c, broadcast)(c, c->rank == root ? s : r, r, count, dt, root));
}

bagua_status_t bagua_reduce(bagua_comm_t *c, const void *s, void *r, size_t count, bagua_dtype_t dt,
                            bagua_op_t op, int root) {
  BAGUA_CHECK(check_args(c, "bagua_reduce", dt, (int)op, root, count, 1));
  if (count == 0) return BAGUA_OK;
  NEED_BUF(s, "bagua_reduce", "sendbuf");
  if (c->rank == root) NEED_BUF(r, "bagua_reduce", "recvbuf on the root");
  return finish(c, OPS(c, reduce)(c, s, r, count, dt, op, root));
}

bagua_status_t bagua_gather(bagua_comm_t *c, const void *s, void *r, size_t count, bagua_dtype_t dt,
                            int root) {
  BAGUA_CHECK(check_args(c, "bagua_gather", dt, -1, root, count, PER_RANK));
  if (count == 0) return BAGUA_OK;
  NEED_BUF(s, "bagua_gather", "sendbuf");
  if (c->rank == root) NEED_BUF(r, "bagua_gather", "recvbuf on the root");
  return finish(c, OPS(c, gather)(c, s, r, count, dt, root));
}

bagua_status_t bagua_scatter(bagua_comm_t *c, const void *s, void *r, size_t count,
                             bagua_dtype_t dt, int root) {
  BAGUA_CHECK(check_args(c, "bagua_scatter", dt, -1, root, count, PER_RANK));
  if (count == 0) return BAGUA_OK;
  if (c->rank == root) NEED_BUF(s, "bagua_scatter", "sendbuf on the root");
  NEED_BUF(r, "bagua_scatter", "recvbuf");
  return finish(c, OPS(c, scatter)(c, s, r, count, dt, root));
}

bagua_status_t bagua_barrier(bagua_comm_t *c) {
  BAGUA_CHECK(check_args(c, "bagua_barrier", BAGUA_U8, -1, -1, 0, 1));
  return finish(c, OPS(c, barrier)(c));
}

static bagua_status_t check_peer(bagua_comm_t *c, const char *fn, int peer, int allow_self) {
  if (peer < 0 || peer >= c->size || (!allow_self && peer == c->rank)) {
    BAGUA_WARN("%s: peer %d is invalid; accepted: a rank in [0, %d)%s", fn, peer, c->size,
               allow_self ? "" : " other than this rank");
    return BAGUA_ERR_INVALID_ARG;
  }
  return BAGUA_OK;
}

bagua_status_t bagua_send(bagua_comm_t *c, const void *buf, size_t count, bagua_dtype_t dt,
                          int peer) {
  BAGUA_CHECK(check_args(c, "bagua_send", dt, -1, -1, count, 1));
  BAGUA_CHECK(check_peer(c, "bagua_send", peer, 0));
  if (count) NEED_BUF(buf, "bagua_send", "buf");
  bagua__send_t s = {peer, buf, count * bagua_dtype_size(dt)};
  return finish(c, bagua__exchange(c, &s, 1, NULL, 0));
}

bagua_status_t bagua_recv(bagua_comm_t *c, void *buf, size_t count, bagua_dtype_t dt, int peer) {
  BAGUA_CHECK(check_args(c, "bagua_recv", dt, -1, -1, count, 1));
  BAGUA_CHECK(check_peer(c, "bagua_recv", peer, 0));
  if (count) NEED_BUF(buf, "bagua_recv", "buf");
  bagua__recv_t r = {peer, buf, count * bagua_dtype_size(dt), NULL, 0, 0};
  return finish(c, bagua__exchange(c, NULL, 0, &r, 1));
}

bagua_status_t bagua_sendrecv(bagua_comm_t *c, const void *sbuf, size_t scount, int dst, void *rbuf,
                              size_t rcount, int src, bagua_dtype_t dt) {
  BAGUA_CHECK(check_args(c, "bagua_sendrecv", dt, -1, -1, scount > rcount ? scount : rcount, 1));
  BAGUA_CHECK(check_peer(c, "bagua_sendrecv", dst, 1));
  BAGUA_CHECK(check_peer(c, "bagua_sendrecv", src, 1));
  size_t es = bagua_dtype_size(dt);
  if ((dst == c->rank) != (src == c->rank)) {
    BAGUA_WARN("bagua_sendrecv: a rank can exchange with itself only as both dst and src");
    return BAGUA_ERR_INVALID_ARG;
  }
  if (scount) NEED_BUF(sbuf, "bagua_sendrecv", "sbuf");
  if (rcount) NEED_BUF(rbuf, "bagua_sendrecv", "rbuf");
  if (dst == c->rank) {
    if (scount != rcount) {
      BAGUA_WARN("bagua_sendrecv: self exchange with send count %zu != receive count %zu", scount,
                 rcount);
      return BAGUA_ERR_INVALID_ARG;
    }
    if (scount) memmove(rbuf, sbuf, scount * es);
    return BAGUA_OK;
  }
  bagua__send_t s = {dst, sbuf, scount * es};
  bagua__recv_t r = {src, rbuf, rcount * es, NULL, 0, 0};
  return finish(c, bagua__exchange(c, &s, 1, &r, 1));
}

bagua_status_t bagua_neighbor_exchange(bagua_comm_t *c, const void *sbuf, size_t count, int left,
                                       void *lbuf, int right, void *rbuf, bagua_dtype_t dt) {
  const char *fn = "bagua_neighbor_exchange";
  BAGUA_CHECK(check_args(c, fn, dt, -1, -1, count, 1));
  BAGUA_CHECK(check_peer(c, fn, left, 0));
  BAGUA_CHECK(check_peer(c, fn, right, 0));
  if (count == 0) return BAGUA_OK;
  NEED_BUF(sbuf, fn, "sendbuf");
  NEED_BUF(lbuf, fn, "leftbuf");
  NEED_BUF(rbuf, fn, "rightbuf");
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
