/*
 * The tcp transport's collectives (bagua__tcp_ops), built on the point-to-point exchange
 * engine. The hierarchical transport also runs them for the collectives it does not
 * special-case.
 *
 * Large messages use bandwidth-optimal rings (reduce-scatter then allgather, each rank moving
 * 2(n-1)/n of the data); small ones use latency-optimal recursive doubling and binomial
 * trees. Every reduction of a given element happens in one place and its result is copied,
 * so all ranks end with bit-identical values.
 */
#include <stdlib.h>
#include <string.h>

#include "tcp.h"
#include "common/check.h"
#include "kernels/kernels.h"

#define SMALL_BYTES (64 * 1024)
#define CHAIN_SEGMENTS 32

static bagua_status_t sendrecv_bytes(bagua_comm_t *c, const void *s, size_t sb, int dst, void *r,
                                     size_t rb, int src, const void *local, bagua_dtype_t dt,
                                     bagua_op_t op) {
  bagua__send_t snd = {dst, s, sb};
  bagua__recv_t rcv = {src, r, rb, local, dt, op};
  return bagua__exchange(c, &snd, 1, &rcv, 1);
}

/*
 * Ring reduce-scatter over `count` elements cut into n chunks. Rank r ends with chunk r fully
 * reduced at `final`. Intermediate partial sums go to `work` (full layout) when given, else to
 * the two chunk-sized ping-pong buffers in pp.
 */
static bagua_status_t ring_reduce_scatter(bagua_comm_t *c, const char *sbuf, char *work,
                                          char *pp[2], char *final, size_t count, bagua_dtype_t dt,
                                          bagua_op_t op) {
  int n = c->size, r = c->rank;
  size_t es = bagua_dtype_size(dt);
  int next = bagua__mod(r + 1, n), prev = bagua__mod(r - 1, n);
  for (int s = 0; s < n - 1; s++) {
    int si = bagua__mod(r - s - 1, n), ri = bagua__mod(r - s - 2, n);
    size_t so, sl, ro, rl;
    bagua__block(count, n, si, es, &so, &sl);
    bagua__block(count, n, ri, es, &ro, &rl);
    const char *src = s == 0 ? sbuf + so : (work ? work + so : pp[(s - 1) & 1]);
    char *dst = s == n - 2 ? final : (work ? work + ro : pp[s & 1]);
    BAGUA_CHECK(sendrecv_bytes(c, src, sl, next, dst, rl, prev, sbuf + ro, dt, op));
  }
  return BAGUA_OK;
}

/* Ring allgather: rank r holds chunk r of buf; afterwards every rank holds every chunk. */
static bagua_status_t ring_allgather(bagua_comm_t *c, char *buf, size_t count, size_t es) {
  if (bagua__ring_usable(c)) return bagua__ring_allgather(c, buf, count, es);
  int n = c->size, r = c->rank;
  int next = bagua__mod(r + 1, n), prev = bagua__mod(r - 1, n);
  for (int s = 0; s < n - 1; s++) {
    int si = bagua__mod(r - s, n), ri = bagua__mod(r - s - 1, n);
    size_t so, sl, ro, rl;
    bagua__block(count, n, si, es, &so, &sl);
    bagua__block(count, n, ri, es, &ro, &rl);
    BAGUA_CHECK(sendrecv_bytes(c, buf + so, sl, next, buf + ro, rl, prev, NULL, 0, 0));
  }
  return BAGUA_OK;
}

int bagua__rd_partners(int n, int r, int *out) {
  int pof2 = 1, k = 0;
  while (pof2 * 2 <= n) pof2 *= 2;
  int rem = n - pof2, newrank = r < 2 * rem ? (r % 2 ? r / 2 : -1) : r - rem;
  /* The same pairs rd_allreduce exchanges with: the fold partner, then one per round. */
  if (r < 2 * rem) out[k++] = r % 2 ? r - 1 : r + 1;
  for (int mask = 1; newrank >= 0 && mask < pof2; mask <<= 1) {
    int pn = newrank ^ mask;
    out[k++] = pn < rem ? pn * 2 + 1 : pn + rem;
  }
  return k;
}

/* Recursive doubling with the usual fold of the ranks beyond the largest power of two. */
static bagua_status_t rd_allreduce(bagua_comm_t *c, char *buf, size_t count, bagua_dtype_t dt,
                                   bagua_op_t op) {
  int n = c->size, r = c->rank;
  size_t bytes = count * bagua_dtype_size(dt);
  int pof2 = 1;
  while (pof2 * 2 <= n) pof2 *= 2;
  int rem = n - pof2, newrank;
  bagua_status_t st = BAGUA_OK;
  char *tmp = malloc(bytes ? bytes : 1);
  if (!tmp) return BAGUA_ERR_NO_MEMORY;
  if (r < 2 * rem) {
    if (r % 2 == 0) {
      bagua__send_t s = {r + 1, buf, bytes};
      BAGUA_CHECK_GOTO(bagua__exchange(c, &s, 1, NULL, 0), st, out);
      newrank = -1;
    } else {
      bagua__recv_t rv = {r - 1, buf, bytes, buf, dt, op};
      BAGUA_CHECK_GOTO(bagua__exchange(c, NULL, 0, &rv, 1), st, out);
      newrank = r / 2;
    }
  } else {
    newrank = r - rem;
  }
  if (newrank >= 0) {
    for (int mask = 1; mask < pof2; mask <<= 1) {
      int pn = newrank ^ mask;
      int peer = pn < rem ? pn * 2 + 1 : pn + rem;
      memcpy(tmp, buf, bytes);
      BAGUA_CHECK_GOTO(sendrecv_bytes(c, tmp, bytes, peer, buf, bytes, peer, buf, dt, op), st, out);
    }
  }
  if (r < 2 * rem) {
    if (r % 2) {
      bagua__send_t s = {r - 1, buf, bytes};
      BAGUA_CHECK_GOTO(bagua__exchange(c, &s, 1, NULL, 0), st, out);
    } else {
      bagua__recv_t rv = {r + 1, buf, bytes, NULL, dt, op};
      BAGUA_CHECK_GOTO(bagua__exchange(c, NULL, 0, &rv, 1), st, out);
    }
  }
out:
  free(tmp);
  return st;
}

bagua_status_t bagua__tcp_allreduce(bagua_comm_t *c, const void *s, void *r, size_t count,
                                    bagua_dtype_t dt, bagua_op_t op) {
  size_t es = bagua_dtype_size(dt), bytes = count * es;
  if (c->size == 1 || bytes < c->ring_min_bytes || count < (size_t)c->size) {
    if (s != r) memcpy(r, s, bytes);
    if (c->size > 1) BAGUA_CHECK(rd_allreduce(c, r, count, dt, op));
    if (op == BAGUA_AVG) bagua__div(dt, r, count, c->size);
    return BAGUA_OK;
  }
  if (bagua__ring_usable(c)) return bagua__ring_allreduce(c, s, r, count, dt, op);
  size_t off, len;
  bagua__block(count, c->size, c->rank, es, &off, &len);
  BAGUA_CHECK(ring_reduce_scatter(c, s, r, NULL, (char *)r + off, count, dt, op));
  if (op == BAGUA_AVG) bagua__div(dt, (char *)r + off, len / es, c->size);
  return ring_allgather(c, r, count, es);
}

bagua_status_t bagua__tcp_reduce_scatter(bagua_comm_t *c, const void *s, void *r, size_t count,
                                         bagua_dtype_t dt, bagua_op_t op) {
  size_t es = bagua_dtype_size(dt), block = count * es;
  if (c->size == 1) {
    if (s != r) memmove(r, s, block);
  } else if (bagua__ring_usable(c)) {
    return bagua__ring_reduce_scatter(c, s, r, count, dt, op); /* divides for AVG */
  } else {
    char *pp = malloc(2 * block + 1);
    if (!pp) return BAGUA_ERR_NO_MEMORY;
    char *two[2] = {pp, pp + block};
    bagua_status_t st = ring_reduce_scatter(c, s, NULL, two, r, count * (size_t)c->size, dt, op);
    free(pp);
    BAGUA_CHECK(st);
  }
  if (op == BAGUA_AVG) bagua__div(dt, r, count, c->size);
  return BAGUA_OK;
}

bagua_status_t bagua__tcp_allgather(bagua_comm_t *c, const void *s, void *r, size_t count,
                                    bagua_dtype_t dt) {
  size_t es = bagua_dtype_size(dt), block = count * es;
  char *mine = (char *)r + (size_t)c->rank * block;
  if (s != mine) memmove(mine, s, block);
  return ring_allgather(c, r, count * (size_t)c->size, es);
}

bagua_status_t bagua__tcp_alltoall(bagua_comm_t *c, const void *s, void *r, size_t count,
                                   bagua_dtype_t dt) {
  int n = c->size;
  size_t block = count * bagua_dtype_size(dt);
  bagua_status_t st = BAGUA_OK;
  char *copy = NULL;
  if (s == r && n > 1) {
    copy = malloc(block * (size_t)n);
    if (!copy) return BAGUA_ERR_NO_MEMORY;
    memcpy(copy, s, block * (size_t)n);
    s = copy;
  }
  bagua__send_t *sends = calloc((size_t)n, sizeof(*sends));
  bagua__recv_t *recvs = calloc((size_t)n, sizeof(*recvs));
  if (!sends || !recvs) {
    st = BAGUA_ERR_NO_MEMORY;
    goto out;
  }
  int k = 0;
  for (int p = 0; p < n; p++) {
    if (p == c->rank) continue;
    sends[k] = (bagua__send_t){p, (const char *)s + (size_t)p * block, block};
    recvs[k++] = (bagua__recv_t){p, (char *)r + (size_t)p * block, block, NULL, 0, 0};
  }
  memmove((char *)r + (size_t)c->rank * block, (const char *)s + (size_t)c->rank * block, block);
  st = bagua__exchange(c, sends, k, recvs, k);
out:
  free(sends);
  free(recvs);
  free(copy);
  return st;
}

/* Binomial-tree broadcast in ranks relative to the root. */
static bagua_status_t tree_bcast(bagua_comm_t *c, void *buf, size_t bytes, int root) {
  int n = c->size, vr = bagua__mod(c->rank - root, n);
  int mask = 1;
  while (mask < n) {
    if (vr & mask) {
      bagua__recv_t rv = {bagua__mod(vr - mask + root, n), buf, bytes, NULL, 0, 0};
      BAGUA_CHECK(bagua__exchange(c, NULL, 0, &rv, 1));
      break;
    }
    mask <<= 1;
  }
  bagua__send_t sends[32];
  int k = 0;
  for (mask >>= 1; mask > 0; mask >>= 1)
    if (vr + mask < n) sends[k++] = (bagua__send_t){bagua__mod(vr + mask + root, n), buf, bytes};
  return k ? bagua__exchange(c, sends, k, NULL, 0) : BAGUA_OK;
}

/*
 * Pipelined chain broadcast in ranks relative to the root: the message is cut into segments,
 * and in step k rank v receives segment k from v-1 while forwarding segment k-1 to v+1. Every
 * link carries the message once, so with S segments it takes about (S + n - 2) / S times one
 * link's transfer time. Scatter-then-allgather needs 2(n-1)/n of it: on 4 hosts behind 1 Gbit/s
 * ports that capped broadcast at 60-62 % of the link rate (docs/linkrate.md).
 */
static bagua_status_t chain_bcast(bagua_comm_t *c, char *buf, size_t count, size_t es, int root) {
  int n = c->size, vr = bagua__mod(c->rank - root, n);
  int next = bagua__mod(vr + 1 + root, n), prev = bagua__mod(vr - 1 + root, n);
  /* At most CHAIN_SEGMENTS segments of at least SMALL_BYTES, whole elements each. */
  size_t bytes = count * es, seg = bytes / CHAIN_SEGMENTS;
  if (seg < SMALL_BYTES) seg = SMALL_BYTES;
  seg = (seg + es - 1) / es * es;
  size_t nseg = (bytes + seg - 1) / seg;
  for (size_t k = 0; k <= nseg; k++) {
    bagua__send_t snd = {next, NULL, 0};
    bagua__recv_t rcv = {prev, NULL, 0, NULL, 0, 0};
    int ns = 0, nr = 0;
    if (vr < n - 1 && (vr == 0 ? k < nseg : k >= 1)) {
      size_t j = vr == 0 ? k : k - 1, off = j * seg;
      snd.buf = buf + off;
      snd.bytes = bytes - off < seg ? bytes - off : seg;
      ns = 1;
    }
    if (vr > 0 && k < nseg) {
      size_t off = k * seg;
      rcv.buf = buf + off;
      rcv.bytes = bytes - off < seg ? bytes - off : seg;
      nr = 1;
    }
    if (ns || nr) BAGUA_CHECK(bagua__exchange(c, &snd, ns, &rcv, nr));
  }
  return BAGUA_OK;
}

bagua_status_t bagua__tcp_broadcast(bagua_comm_t *c, const void *s, void *r, size_t count,
                                    bagua_dtype_t dt, int root) {
  size_t es = bagua_dtype_size(dt), bytes = count * es;
  int n = c->size;
  if (c->rank == root && s != r) memcpy(r, s, bytes);
  if (n == 1) return BAGUA_OK;
  if (bytes < 4 * SMALL_BYTES || count < (size_t)n) return tree_bcast(c, r, bytes, root);
  if (n > 2) return chain_bcast(c, r, count, es, root);
  /* Scatter from the root, then ring allgather: the root sends each byte once. */
  if (c->rank == root) {
    bagua__send_t *sends = calloc((size_t)n, sizeof(*sends));
    if (!sends) return BAGUA_ERR_NO_MEMORY;
    int k = 0;
    for (int p = 0; p < n; p++) {
      if (p == root) continue;
      size_t off, len;
      bagua__block(count, n, p, es, &off, &len);
      sends[k++] = (bagua__send_t){p, (char *)r + off, len};
    }
    bagua_status_t st = bagua__exchange(c, sends, k, NULL, 0);
    free(sends);
    BAGUA_CHECK(st);
  } else {
    size_t off, len;
    bagua__block(count, n, c->rank, es, &off, &len);
    bagua__recv_t rv = {root, (char *)r + off, len, NULL, 0, 0};
    BAGUA_CHECK(bagua__exchange(c, NULL, 0, &rv, 1));
  }
  return ring_allgather(c, r, count, es);
}

bagua_status_t bagua__tcp_reduce(bagua_comm_t *c, const void *s, void *r, size_t count,
                                 bagua_dtype_t dt, bagua_op_t op, int root) {
  size_t es = bagua_dtype_size(dt), bytes = count * es;
  int n = c->size, vr = bagua__mod(c->rank - root, n);
  bagua_status_t st = BAGUA_OK;
  char *acc = malloc(bytes + 1);
  if (!acc) return BAGUA_ERR_NO_MEMORY;
  memcpy(acc, s, bytes);
  if (bytes < 4 * SMALL_BYTES || count < (size_t)n) {
    /* Binomial tree: children fold into parents; the root ends with the total. */
    for (int mask = 1; mask < n; mask <<= 1) {
      if (vr & mask) {
        bagua__send_t sd = {bagua__mod(vr - mask + root, n), acc, bytes};
        BAGUA_CHECK_GOTO(bagua__exchange(c, &sd, 1, NULL, 0), st, out);
        break;
      }
      if (vr + mask < n) {
        bagua__recv_t rv = {bagua__mod(vr + mask + root, n), acc, bytes, acc, dt, op};
        BAGUA_CHECK_GOTO(bagua__exchange(c, NULL, 0, &rv, 1), st, out);
      }
    }
    if (c->rank == root) memcpy(r, acc, bytes);
  } else {
    /* Ring reduce-scatter into acc, then every rank sends its reduced chunk to the root. */
    size_t off, len;
    bagua__block(count, n, c->rank, es, &off, &len);
    BAGUA_CHECK_GOTO(ring_reduce_scatter(c, s, acc, NULL, acc + off, count, dt, op), st, out);
    if (c->rank == root) {
      bagua__recv_t *rv = calloc((size_t)n, sizeof(*rv));
      if (!rv) {
        st = BAGUA_ERR_NO_MEMORY;
        goto out;
      }
      int k = 0;
      for (int p = 0; p < n; p++) {
        size_t po, pl;
        bagua__block(count, n, p, es, &po, &pl);
        if (p == root)
          memcpy((char *)r + po, acc + po, pl);
        else
          rv[k++] = (bagua__recv_t){p, (char *)r + po, pl, NULL, 0, 0};
      }
      st = bagua__exchange(c, NULL, 0, rv, k);
      free(rv);
      if (st != BAGUA_OK) goto out;
    } else {
      bagua__send_t sd = {root, acc + off, len};
      BAGUA_CHECK_GOTO(bagua__exchange(c, &sd, 1, NULL, 0), st, out);
    }
  }
  if (c->rank == root && op == BAGUA_AVG) bagua__div(dt, r, count, n);
out:
  free(acc);
  return st;
}

bagua_status_t bagua__tcp_gather(bagua_comm_t *c, const void *s, void *r, size_t count,
                                 bagua_dtype_t dt, int root) {
  size_t block = count * bagua_dtype_size(dt);
  int n = c->size;
  if (c->rank != root) {
    bagua__send_t sd = {root, s, block};
    return bagua__exchange(c, &sd, 1, NULL, 0);
  }
  memmove((char *)r + (size_t)root * block, s, block);
  bagua__recv_t *rv = calloc((size_t)n, sizeof(*rv));
  if (!rv) return BAGUA_ERR_NO_MEMORY;
  int k = 0;
  for (int p = 0; p < n; p++)
    if (p != root) rv[k++] = (bagua__recv_t){p, (char *)r + (size_t)p * block, block, NULL, 0, 0};
  bagua_status_t st = bagua__exchange(c, NULL, 0, rv, k);
  free(rv);
  return st;
}

bagua_status_t bagua__tcp_scatter(bagua_comm_t *c, const void *s, void *r, size_t count,
                                  bagua_dtype_t dt, int root) {
  size_t block = count * bagua_dtype_size(dt);
  int n = c->size;
  if (c->rank != root) {
    bagua__recv_t rv = {root, r, block, NULL, 0, 0};
    return bagua__exchange(c, NULL, 0, &rv, 1);
  }
  bagua__send_t *sd = calloc((size_t)n, sizeof(*sd));
  if (!sd) return BAGUA_ERR_NO_MEMORY;
  int k = 0;
  for (int p = 0; p < n; p++)
    if (p != root) sd[k++] = (bagua__send_t){p, (const char *)s + (size_t)p * block, block};
  bagua_status_t st = bagua__exchange(c, sd, k, NULL, 0);
  free(sd);
  memmove(r, (const char *)s + (size_t)root * block, block);
  return st;
}

/* Dissemination barrier: ceil(log2 n) rounds of empty messages. */
bagua_status_t bagua__tcp_barrier(bagua_comm_t *c) {
  int n = c->size;
  for (int k = 1; k < n; k <<= 1)
    BAGUA_CHECK(sendrecv_bytes(c, NULL, 0, bagua__mod(c->rank + k, n), NULL, 0,
                               bagua__mod(c->rank - k, n), NULL, 0, 0));
  return BAGUA_OK;
}

const bagua__coll_ops_t bagua__tcp_ops = {
    .name = "tcp",
    .allreduce = bagua__tcp_allreduce,
    .reduce_scatter = bagua__tcp_reduce_scatter,
    .allgather = bagua__tcp_allgather,
    .alltoall = bagua__tcp_alltoall,
    .broadcast = bagua__tcp_broadcast,
    .reduce = bagua__tcp_reduce,
    .gather = bagua__tcp_gather,
    .scatter = bagua__tcp_scatter,
    .barrier = bagua__tcp_barrier,
};
