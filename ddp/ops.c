/*
 * Communication ops shared by the algorithms, run on the communication thread: the full
 * precision average (flat or hierarchical) and ByteGrad's compressed scatter-gather average
 * with optional error feedback.
 *
 * Hierarchical mode follows Bagua (reduce within the node to its leader, run the operation
 * among leaders, broadcast within the node) with one change: the node reduction sums and the
 * leaders divide by the global number of ranks, so the result is the true average even when
 * nodes hold different numbers of ranks (Bagua averages node averages).
 */
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/log.h"
#include "ddp_internal.h"
#include "kernels/kernels.h"

/* Every op here runs on the communication thread, so its device work goes on the COMM lane. */
#define L BAGUA__LANE_COMM

bagua_status_t bagua__ddp_node_reduce(bagua_ddp_t *d, float *buf, size_t n, int avg) {
  BAGUA_CHECK(d->s.dev->reduce(d, L, d->intra, buf, buf, n, BAGUA_F32, BAGUA_SUM, 0));
  if (avg && d->inter) BAGUA_CHECK(d->s.dev->div(d, L, buf, n, bagua_comm_size(d->intra)));
  return BAGUA_OK;
}

bagua_status_t bagua__ddp_node_bcast(bagua_ddp_t *d, float *buf, size_t n) {
  return d->s.dev->broadcast(d, L, d->intra, buf, buf, n, BAGUA_F32, 0);
}

bagua_status_t bagua__ddp_allreduce_avg(bagua_ddp_t *d, float *buf, size_t n, int hier) {
  if (!hier) return d->s.dev->allreduce(d, L, d->comm, buf, buf, n, BAGUA_F32, BAGUA_AVG);
  BAGUA_CHECK(bagua__ddp_node_reduce(d, buf, n, 0));
  if (d->inter) {
    BAGUA_CHECK(d->s.dev->allreduce(d, L, d->inter, buf, buf, n, BAGUA_F32, BAGUA_SUM));
    BAGUA_CHECK(d->s.dev->div(d, L, buf, n, d->size));
  }
  return bagua__ddp_node_bcast(d, buf, n);
}

bagua_status_t bagua__ddp_u8_init(bagua_ddp_t *d, int hier, int error_feedback,
                                  bagua__ddp_u8_t *u) {
  memset(u, 0, sizeof(*u));
  u->hier = hier;
  u->comm = hier ? d->inter : d->comm;
  if (!u->comm) return BAGUA_OK; /* a node member that is not its leader: no chunks here */
  u->n = bagua_comm_size(u->comm);
  size_t chunk = d->max_bucket / (size_t)u->n;
  u->region = bagua__minmax_u8_compressed_size(chunk, BAGUA_F32);
  /* Separate send and receive regions: NCCL's alltoall cannot work in place. */
  u->cbuf = d->s.dev->alloc(d, u->region * (size_t)u->n);
  u->rbuf = d->s.dev->alloc(d, u->region * (size_t)u->n);
  u->acc = bagua__ddp_alloc_floats(d, chunk);
  if (!u->cbuf || !u->rbuf || !u->acc) goto nomem;
  if (error_feedback) {
    u->worker_res = bagua__ddp_alloc_floats(d, d->total);
    u->server_res = bagua__ddp_alloc_floats(d, d->total / (size_t)u->n);
    if (!u->worker_res || !u->server_res) goto nomem;
  }
  return BAGUA_OK;
nomem:
  BAGUA_WARN("ddp: out of %s memory for the compression buffers of %zu elements", d->s.dev->name,
             d->total);
  bagua__ddp_u8_free(d, u);
  return BAGUA_ERR_NO_MEMORY;
}

void bagua__ddp_u8_free(bagua_ddp_t *d, bagua__ddp_u8_t *u) {
  bagua__ddp_free(d, u->cbuf);
  bagua__ddp_free(d, u->rbuf);
  bagua__ddp_free(d, u->acc);
  bagua__ddp_free(d, u->worker_res);
  bagua__ddp_free(d, u->server_res);
  memset(u, 0, sizeof(*u));
}

/*
 * Error feedback keeps, per quantization, r = Q(y) - y for the value y that was quantized and
 * subtracts it from the next step's input, so the error of one step is corrected in the next
 * (worker side on the whole bucket, server side on the chunk this rank reduces; the
 * "double squeeze" arrangement). Bagua itself quantizes twice without any feedback.
 */
static bagua_status_t compress_keep_error(bagua_ddp_t *d, const float *y, size_t chunk, size_t k,
                                          uint8_t *out, float *res) {
  BAGUA_CHECK(d->s.dev->compress(d, L, y, chunk, k, out));
  if (res) {
    BAGUA_CHECK(d->s.dev->decompress(d, L, out, chunk, k, res));
    BAGUA_CHECK(d->s.dev->axpy(d, L, -1.0f, y, res, chunk * k));
  }
  return BAGUA_OK;
}

bagua_status_t bagua__ddp_u8_allreduce(bagua_ddp_t *d, bagua__ddp_u8_t *u, float *buf, size_t off,
                                       size_t n) {
  if (u->hier) BAGUA_CHECK(bagua__ddp_node_reduce(d, buf, n, 0));
  if (u->comm && u->n == 1) {
    /* One participant: nothing to exchange, and quantizing would only add error. */
    BAGUA_CHECK(d->s.dev->div(d, L, buf, n, d->size));
  } else if (u->comm) {
    size_t k = (size_t)u->n, chunk = n / k;
    size_t region = bagua__minmax_u8_compressed_size(chunk, BAGUA_F32);
    int me = bagua_comm_rank(u->comm);
    float *wres = u->worker_res ? u->worker_res + off : NULL;
    float *sres = u->server_res ? u->server_res + off / k : NULL;
    /* 1. Compress the bucket as k chunks, each with its own min and max. */
    if (wres) BAGUA_CHECK(d->s.dev->axpy(d, L, -1.0f, wres, buf, n));
    BAGUA_CHECK(compress_keep_error(d, buf, chunk, k, u->cbuf, wres));
    /* 2. Rank r receives chunk r of every peer. */
    BAGUA_CHECK(d->s.dev->alltoall(d, L, u->comm, u->cbuf, u->rbuf, region, BAGUA_U8));
    /* 3-4. Decompress the k copies of this rank's chunk, sum them in f32 and average. */
    BAGUA_CHECK(d->s.dev->zero(d, L, u->acc, chunk * sizeof(float)));
    for (size_t i = 0; i < k; i++)
      BAGUA_CHECK(d->s.dev->decompress_add(d, L, u->rbuf + i * region, chunk, 1, u->acc));
    BAGUA_CHECK(d->s.dev->div(d, L, u->acc, chunk, d->size));
    /* 5. Re-compress only the reduced chunk, into this rank's block of the buffer. */
    if (sres) BAGUA_CHECK(d->s.dev->axpy(d, L, -1.0f, sres, u->acc, chunk));
    uint8_t *own = u->cbuf + (size_t)me * region;
    BAGUA_CHECK(compress_keep_error(d, u->acc, chunk, 1, own, sres));
    /* 6-7. Gather every reduced chunk (in place) and decompress all of them, own included,
     * so that every rank ends with bit-identical values. */
    BAGUA_CHECK(d->s.dev->allgather(d, L, u->comm, own, u->cbuf, region, BAGUA_U8));
    BAGUA_CHECK(d->s.dev->decompress(d, L, u->cbuf, chunk, k, buf));
  }
  if (u->hier) BAGUA_CHECK(bagua__ddp_node_bcast(d, buf, n));
  return BAGUA_OK;
}
