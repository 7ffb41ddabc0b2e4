/*
 * Collectives and point-to-point operations of the NCCL communicator, each enqueued on the
 * communicator's stream. Arguments are checked here, before NCCL sees them, so that a bad
 * argument is BAGUA_ERR_INVALID_ARG and leaves the communicator usable; everything NCCL itself
 * rejects poisons it (see nccl_comm.c).
 *
 * alltoall and sendrecv are groups of ncclSend/ncclRecv rather than ncclAlltoAll, which only
 * recent NCCL releases provide.
 */
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/log.h"
#include "nccl_internal.h"

bagua_status_t bagua__nccl_dtype(bagua_dtype_t dt, ncclDataType_t *out, const char *what) {
  switch (dt) {
    case BAGUA_F32:
      *out = ncclFloat32;
      return BAGUA_OK;
    case BAGUA_F16:
      *out = ncclFloat16;
      return BAGUA_OK;
    case BAGUA_BF16:
      *out = ncclBfloat16;
      return BAGUA_OK;
    case BAGUA_F64:
      *out = ncclFloat64;
      return BAGUA_OK;
    case BAGUA_I32:
      *out = ncclInt32;
      return BAGUA_OK;
    case BAGUA_I64:
      *out = ncclInt64;
      return BAGUA_OK;
    case BAGUA_U8:
      *out = ncclUint8;
      return BAGUA_OK;
    default:
      BAGUA_WARN("%s: unknown dtype %d", what, (int)dt);
      return BAGUA_ERR_INVALID_ARG;
  }
}

/* BAGUA_AVG is NCCL's ncclAvg: the sum divided by the number of ranks (integers truncate). */
bagua_status_t bagua__nccl_op(bagua_op_t op, ncclRedOp_t *out, const char *what) {
  switch (op) {
    case BAGUA_SUM:
      *out = ncclSum;
      return BAGUA_OK;
    case BAGUA_AVG:
      *out = ncclAvg;
      return BAGUA_OK;
    case BAGUA_MIN:
      *out = ncclMin;
      return BAGUA_OK;
    case BAGUA_MAX:
      *out = ncclMax;
      return BAGUA_OK;
    default:
      BAGUA_WARN("%s: unknown reduction op %d", what, (int)op);
      return BAGUA_ERR_INVALID_ARG;
  }
}

static bagua_status_t need_buf(const char *what, const char *name, const void *p, size_t count) {
  if (count > 0 && p == NULL) {
    BAGUA_WARN("%s: %s is NULL for %zu elements", what, name, count);
    return BAGUA_ERR_INVALID_ARG;
  }
  return BAGUA_OK;
}

/* Checks a rank argument after bagua__nccl_enter (so c is valid); releases on failure. */
static bagua_status_t check_rank(bagua_nccl_comm_t *c, int dev, const char *what, const char *name,
                                 int r) {
  if (r >= 0 && r < c->size) return BAGUA_OK;
  BAGUA_WARN("%s: %s %d is not a rank of this communicator of %d", what, name, r, c->size);
  return bagua__nccl_leave(c, dev, BAGUA_ERR_INVALID_ARG);
}

#define NCCL_RUN(c, dev, call, what) \
  bagua__nccl_leave((c), (dev), bagua__nccl_settle((c), (call), (what), (c)->timeout_ms))

/*
 * Adds what this rank hands NCCL to send for a successful operation to the communicator's
 * counter (bagua_nccl_comm_bytes_sent). NCCL picks its algorithm itself, so collectives are
 * counted as its ring algorithms move data, the usual model for bus bandwidth: each rank sends
 * 2(n-1)/n of an allreduce buffer, (n-1)/n of a broadcast or reduce buffer, and n-1 blocks of a
 * reduce-scatter, allgather or alltoall.
 */
static bagua_status_t counted(bagua_nccl_comm_t *c, bagua_status_t st, double bytes) {
  if (st == BAGUA_OK && bytes > 0)
    atomic_fetch_add_explicit(&c->bytes_sent, (uint64_t)bytes, memory_order_relaxed);
  return st;
}

/* Bytes of `count` elements, and the share (n-1)/n of them, on communicator c. */
static double nbytes(size_t count, bagua_dtype_t dt) {
  return (double)count * (double)bagua_dtype_size(dt);
}
static double ring_share(const bagua_nccl_comm_t *c) {
  return c->size > 1 ? (double)(c->size - 1) / c->size : 0.0;
}

bagua_status_t bagua_nccl_allreduce(bagua_nccl_comm_t *c, const void *sendbuf, void *recvbuf,
                                    size_t count, bagua_dtype_t dtype, bagua_op_t op) {
  static const char what[] = "bagua_nccl_allreduce";
  ncclDataType_t t;
  ncclRedOp_t o;
  int dev;
  BAGUA_CHECK(bagua__nccl_dtype(dtype, &t, what));
  BAGUA_CHECK(bagua__nccl_op(op, &o, what));
  BAGUA_CHECK(need_buf(what, "sendbuf", sendbuf, count));
  BAGUA_CHECK(need_buf(what, "recvbuf", recvbuf, count));
  BAGUA_CHECK(bagua__nccl_enter(c, &dev));
  if (count == 0) return bagua__nccl_leave(c, dev, BAGUA_OK);
  return counted(c,
                 NCCL_RUN(c, dev, ncclAllReduce(sendbuf, recvbuf, count, t, o, c->nccl, c->stream),
                          "ncclAllReduce"),
                 2 * ring_share(c) * nbytes(count, dtype));
}

bagua_status_t bagua_nccl_reduce_scatter(bagua_nccl_comm_t *c, const void *sendbuf, void *recvbuf,
                                         size_t recvcount, bagua_dtype_t dtype, bagua_op_t op) {
  static const char what[] = "bagua_nccl_reduce_scatter";
  ncclDataType_t t;
  ncclRedOp_t o;
  int dev;
  BAGUA_CHECK(bagua__nccl_dtype(dtype, &t, what));
  BAGUA_CHECK(bagua__nccl_op(op, &o, what));
  BAGUA_CHECK(need_buf(what, "sendbuf", sendbuf, recvcount));
  BAGUA_CHECK(need_buf(what, "recvbuf", recvbuf, recvcount));
  BAGUA_CHECK(bagua__nccl_enter(c, &dev));
  if (recvcount == 0) return bagua__nccl_leave(c, dev, BAGUA_OK);
  return counted(
      c,
      NCCL_RUN(c, dev, ncclReduceScatter(sendbuf, recvbuf, recvcount, t, o, c->nccl, c->stream),
               "ncclReduceScatter"),
      (c->size - 1) * nbytes(recvcount, dtype));
}

bagua_status_t bagua_nccl_allgather(bagua_nccl_comm_t *c, const void *sendbuf, void *recvbuf,
                                    size_t sendcount, bagua_dtype_t dtype) {
  static const char what[] = "bagua_nccl_allgather";
  ncclDataType_t t;
  int dev;
  BAGUA_CHECK(bagua__nccl_dtype(dtype, &t, what));
  BAGUA_CHECK(need_buf(what, "sendbuf", sendbuf, sendcount));
  BAGUA_CHECK(need_buf(what, "recvbuf", recvbuf, sendcount));
  BAGUA_CHECK(bagua__nccl_enter(c, &dev));
  if (sendcount == 0) return bagua__nccl_leave(c, dev, BAGUA_OK);
  return counted(c,
                 NCCL_RUN(c, dev, ncclAllGather(sendbuf, recvbuf, sendcount, t, c->nccl, c->stream),
                          "ncclAllGather"),
                 (c->size - 1) * nbytes(sendcount, dtype));
}

bagua_status_t bagua_nccl_broadcast(bagua_nccl_comm_t *c, const void *sendbuf, void *recvbuf,
                                    size_t count, bagua_dtype_t dtype, int root) {
  static const char what[] = "bagua_nccl_broadcast";
  ncclDataType_t t;
  int dev;
  BAGUA_CHECK(bagua__nccl_dtype(dtype, &t, what));
  BAGUA_CHECK(need_buf(what, "recvbuf", recvbuf, count));
  BAGUA_CHECK(bagua__nccl_enter(c, &dev));
  BAGUA_CHECK(check_rank(c, dev, what, "root", root));
  if (root == c->rank && count > 0 && sendbuf == NULL) {
    BAGUA_WARN("%s: sendbuf is NULL on the root", what);
    return bagua__nccl_leave(c, dev, BAGUA_ERR_INVALID_ARG);
  }
  if (count == 0) return bagua__nccl_leave(c, dev, BAGUA_OK);
  return counted(
      c,
      NCCL_RUN(c, dev, ncclBroadcast(sendbuf, recvbuf, count, t, root, c->nccl, c->stream),
               "ncclBroadcast"),
      ring_share(c) * nbytes(count, dtype));
}

bagua_status_t bagua_nccl_reduce(bagua_nccl_comm_t *c, const void *sendbuf, void *recvbuf,
                                 size_t count, bagua_dtype_t dtype, bagua_op_t op, int root) {
  static const char what[] = "bagua_nccl_reduce";
  ncclDataType_t t;
  ncclRedOp_t o;
  int dev;
  BAGUA_CHECK(bagua__nccl_dtype(dtype, &t, what));
  BAGUA_CHECK(bagua__nccl_op(op, &o, what));
  BAGUA_CHECK(need_buf(what, "sendbuf", sendbuf, count));
  BAGUA_CHECK(bagua__nccl_enter(c, &dev));
  BAGUA_CHECK(check_rank(c, dev, what, "root", root));
  if (root == c->rank && count > 0 && recvbuf == NULL) {
    BAGUA_WARN("%s: recvbuf is NULL on the root", what);
    return bagua__nccl_leave(c, dev, BAGUA_ERR_INVALID_ARG);
  }
  if (count == 0) return bagua__nccl_leave(c, dev, BAGUA_OK);
  return counted(
      c,
      NCCL_RUN(c, dev, ncclReduce(sendbuf, recvbuf, count, t, o, root, c->nccl, c->stream),
               "ncclReduce"),
      ring_share(c) * nbytes(count, dtype));
}

/* ---------------------------------------------------------------------------------------- */
/* Point to point                                                                           */
/* ---------------------------------------------------------------------------------------- */

/*
 * Posts `n` sends and receives as one NCCL group, lock held. An error inside the group still
 * closes it with ncclGroupEnd (NCCL requires every ncclGroupStart to be matched) and is
 * reported in preference to ncclGroupEnd's result.
 */
static bagua_status_t run_group(bagua_nccl_comm_t *c, const bagua_nccl_p2p_t *ops, int n,
                                const char *what) {
  ncclResult_t r = ncclGroupStart();
  if (r != ncclSuccess) return bagua__nccl_settle(c, r, "ncclGroupStart", c->timeout_ms);
  ncclResult_t first = ncclSuccess;
  for (int i = 0; i < n && (first == ncclSuccess || first == ncclInProgress); i++) {
    /* The caller checked every dtype, so bagua__nccl_dtype() sets t; GCC cannot see that
     * through the call, and at -O3 it reports t as maybe uninitialised without the initialiser. */
    ncclDataType_t t = ncclUint8;
    bagua__nccl_dtype(ops[i].dtype, &t, what);
    if (ops[i].is_recv)
      first = ncclRecv(ops[i].buf, ops[i].count, t, ops[i].peer, c->nccl, c->stream);
    else
      first = ncclSend(ops[i].buf, ops[i].count, t, ops[i].peer, c->nccl, c->stream);
  }
  r = ncclGroupEnd();
  if (first != ncclSuccess && first != ncclInProgress) r = first;
  double sent = 0;
  for (int i = 0; i < n; i++)
    if (!ops[i].is_recv && ops[i].peer != c->rank) sent += nbytes(ops[i].count, ops[i].dtype);
  return counted(c, bagua__nccl_settle(c, r, what, c->timeout_ms), sent);
}

static bagua_status_t check_p2p(const char *what, const bagua_nccl_p2p_t *op) {
  ncclDataType_t t;
  BAGUA_CHECK(bagua__nccl_dtype(op->dtype, &t, what));
  return need_buf(what, op->is_recv ? "receive buffer" : "send buffer", op->buf, op->count);
}

bagua_status_t bagua_nccl_group_p2p(bagua_nccl_comm_t *c, const bagua_nccl_p2p_t *ops, int n) {
  static const char what[] = "bagua_nccl_group_p2p";
  int dev;
  if (n < 0 || (n > 0 && ops == NULL)) {
    BAGUA_WARN("%s: %d operations at %p", what, n, (const void *)ops);
    return BAGUA_ERR_INVALID_ARG;
  }
  for (int i = 0; i < n; i++) BAGUA_CHECK(check_p2p(what, &ops[i]));
  BAGUA_CHECK(bagua__nccl_enter(c, &dev));
  for (int i = 0; i < n; i++) BAGUA_CHECK(check_rank(c, dev, what, "peer", ops[i].peer));
  if (n == 0) return bagua__nccl_leave(c, dev, BAGUA_OK);
  return bagua__nccl_leave(c, dev, run_group(c, ops, n, what));
}

bagua_status_t bagua_nccl_sendrecv(bagua_nccl_comm_t *c, const void *sendbuf, size_t sendcount,
                                   int dst, void *recvbuf, size_t recvcount, int src,
                                   bagua_dtype_t dtype) {
  bagua_nccl_p2p_t ops[2] = {{dst, 0, (void *)sendbuf, sendcount, dtype},
                             {src, 1, recvbuf, recvcount, dtype}};
  return bagua_nccl_group_p2p(c, ops, 2);
}

static bagua_status_t single_p2p(bagua_nccl_comm_t *c, const bagua_nccl_p2p_t *op,
                                 const char *what) {
  int dev;
  BAGUA_CHECK(check_p2p(what, op));
  BAGUA_CHECK(bagua__nccl_enter(c, &dev));
  BAGUA_CHECK(check_rank(c, dev, what, "peer", op->peer));
  if (op->peer == c->rank) {
    /* A lone send to oneself never meets its receive: NCCL would wait on the GPU forever. */
    BAGUA_WARN("%s: peer %d is this rank; use bagua_nccl_sendrecv to copy to oneself", what,
               op->peer);
    return bagua__nccl_leave(c, dev, BAGUA_ERR_INVALID_ARG);
  }
  ncclDataType_t t = ncclUint8; /* set below: check_p2p() accepted the dtype (see run_group) */
  bagua__nccl_dtype(op->dtype, &t, what);
  ncclResult_t r = op->is_recv ? ncclRecv(op->buf, op->count, t, op->peer, c->nccl, c->stream)
                               : ncclSend(op->buf, op->count, t, op->peer, c->nccl, c->stream);
  return counted(c, NCCL_RUN(c, dev, r, what), op->is_recv ? 0 : nbytes(op->count, op->dtype));
}

bagua_status_t bagua_nccl_send(bagua_nccl_comm_t *c, const void *buf, size_t count,
                               bagua_dtype_t dtype, int peer) {
  bagua_nccl_p2p_t op = {peer, 0, (void *)buf, count, dtype};
  return single_p2p(c, &op, "bagua_nccl_send");
}

bagua_status_t bagua_nccl_recv(bagua_nccl_comm_t *c, void *buf, size_t count, bagua_dtype_t dtype,
                               int peer) {
  bagua_nccl_p2p_t op = {peer, 1, buf, count, dtype};
  return single_p2p(c, &op, "bagua_nccl_recv");
}

/*
 * Alltoall: this rank's own block is a device-to-device copy on the communicator's stream;
 * the others are one group of sends and receives (2(n-1) operations). In place cannot work
 * (a block would be overwritten while a peer still reads it), so overlap is refused.
 */
bagua_status_t bagua_nccl_alltoall(bagua_nccl_comm_t *c, const void *sendbuf, void *recvbuf,
                                   size_t count, bagua_dtype_t dtype) {
  static const char what[] = "bagua_nccl_alltoall";
  ncclDataType_t t;
  int dev;
  BAGUA_CHECK(bagua__nccl_dtype(dtype, &t, what));
  BAGUA_CHECK(need_buf(what, "sendbuf", sendbuf, count));
  BAGUA_CHECK(need_buf(what, "recvbuf", recvbuf, count));
  BAGUA_CHECK(bagua__nccl_enter(c, &dev));
  if (count == 0) return bagua__nccl_leave(c, dev, BAGUA_OK);
  size_t block = count * bagua_dtype_size(dtype), total = block * (size_t)c->size;
  const char *s = sendbuf;
  char *r = recvbuf;
  if (s < r + total && r < s + total) {
    BAGUA_WARN(
        "%s: sendbuf and recvbuf overlap; in-place alltoall is not supported on GPU "
        "buffers",
        what);
    return bagua__nccl_leave(c, dev, BAGUA_ERR_INVALID_ARG);
  }
  bagua_status_t st =
      bagua__nccl_cuda(c,
                       cudaMemcpyAsync(r + (size_t)c->rank * block, s + (size_t)c->rank * block,
                                       block, cudaMemcpyDeviceToDevice, c->stream),
                       "cudaMemcpyAsync (alltoall, own block)");
  if (st != BAGUA_OK || c->size == 1) return bagua__nccl_leave(c, dev, st);
  bagua_nccl_p2p_t *ops = calloc(2 * (size_t)(c->size - 1), sizeof(*ops));
  if (ops == NULL) {
    BAGUA_WARN("%s: out of memory", what);
    return bagua__nccl_leave(c, dev, BAGUA_ERR_NO_MEMORY);
  }
  int n = 0;
  for (int p = 0; p < c->size; p++) {
    if (p == c->rank) continue;
    ops[n++] = (bagua_nccl_p2p_t){p, 0, (void *)(s + (size_t)p * block), count, dtype};
    ops[n++] = (bagua_nccl_p2p_t){p, 1, r + (size_t)p * block, count, dtype};
  }
  st = run_group(c, ops, n, "ncclGroupEnd (alltoall)");
  free(ops);
  return bagua__nccl_leave(c, dev, st);
}

/* ---------------------------------------------------------------------------------------- */
/* Ordering with other streams                                                              */
/* ---------------------------------------------------------------------------------------- */

bagua_status_t bagua_nccl_wait_event(bagua_nccl_comm_t *c, void *cuda_event) {
  int dev;
  if (cuda_event == NULL) {
    BAGUA_WARN("bagua_nccl_wait_event: NULL event");
    return BAGUA_ERR_INVALID_ARG;
  }
  BAGUA_CHECK(bagua__nccl_enter(c, &dev));
  return bagua__nccl_leave(
      c, dev,
      bagua__nccl_cuda(c, cudaStreamWaitEvent(c->stream, (cudaEvent_t)cuda_event, 0),
                       "cudaStreamWaitEvent"));
}

bagua_status_t bagua_nccl_record_event(bagua_nccl_comm_t *c, void *cuda_event) {
  int dev;
  if (cuda_event == NULL) {
    BAGUA_WARN("bagua_nccl_record_event: NULL event");
    return BAGUA_ERR_INVALID_ARG;
  }
  BAGUA_CHECK(bagua__nccl_enter(c, &dev));
  return bagua__nccl_leave(
      c, dev,
      bagua__nccl_cuda(c, cudaEventRecord((cudaEvent_t)cuda_event, c->stream), "cudaEventRecord"));
}
