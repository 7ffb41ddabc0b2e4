/*
 * Pipelined ring for large allreduce, reduce-scatter and allgather over TCP.
 *
 * In a ring, every byte a rank sends to its successor is either its own input (the first
 * message) or a byte it has just received from its predecessor (reduced with its own
 * contribution during reduce-scatter, copied during allgather). So on each stream, message k
 * towards the next rank is exactly message k-1 from the previous rank after processing. This
 * engine exploits that: it receives from the predecessor, reduces in batches of the
 * communicator's segment (BAGUA_NET_SEGMENT_BYTES, or what autotuning set; staged in half-segment
 * steps) and forwards each processed batch at once, with no barrier between ring steps. All 2(n-1)
 * steps of an allreduce overlap, which matters most when ranks outnumber cores and a
 * step-by-step ring would wait for the slowest rank at every step.
 *
 * The wire format is the exchange engine's (one header per message part and stream, with
 * per-stream sequence numbers), so both engines can be used on the same connections.
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "tcp.h"
#include "common/check.h"
#include "common/log.h"
#include "common/params.h"
#include "common/sock.h"
#include "kernels/kernels.h"

#define MAX_IO_CHUNK (1 << 20)
#define SMALL_MESSAGE (64 * 1024) /* must match exchange.c's split rule */

typedef struct {
  int fd_next, fd_prev;
  /* Send side: message index, header progress, bytes of the current part sent. */
  int ks, shdr_ready; /* shdr_ready: header of the current part prepared (sequence taken) */
  bagua__msg_hdr_t shdr;
  size_t shdr_done, sent;
  /* Receive side: message index, header, bytes of the current part received / processed. */
  int km;
  bagua__msg_hdr_t rhdr;
  size_t rhdr_done, got, done;
  char *stage;
  size_t staged;
} lane_t;

/* What a ring computes. A reduce-scatter is an allreduce's first n-1 messages. */
typedef enum { RING_ALLREDUCE, RING_REDUCE_SCATTER, RING_ALLGATHER } ring_kind_t;

/* Chunk-sized slots for a reduce-scatter's partial sums (see may_recv). */
#define RS_SLOTS 3

typedef struct {
  bagua_comm_t *c;
  int n, r, next, prev, nmsg, lanes;
  ring_kind_t kind;
  const char *sbuf;
  char *rbuf; /* allreduce and allgather: the full-layout result */
  /* Reduce-scatter: where this rank's fully reduced chunk goes, and RS_SLOTS chunk-sized slots
   * for the partial sums that pass through this rank (message m's in slot m % RS_SLOTS). */
  char *out, *slots;
  size_t slot_bytes;
  size_t count, es;
  bagua_dtype_t dt;
  bagua_op_t op;
  size_t seg; /* staging bytes per lane: the pipeline segment */
} ring_t;

static void chunk(const ring_t *g, int i, size_t *off, size_t *len) {
  bagua__block(g->count, g->n, i, g->es, off, len);
}

/* Whether received message m is reduced with this rank's input (the reduce-scatter steps). */
static int reduces(const ring_t *g, int m) {
  return g->kind != RING_ALLGATHER && m < g->n - 1;
}

/* Chunk carried by received message m. Allreduce: reduce-scatter steps, then allgather. */
static int recv_chunk(const ring_t *g, int m) {
  if (reduces(g, m)) return bagua__mod(g->r - m - 2, g->n);
  if (g->kind == RING_ALLREDUCE) return bagua__mod(g->r - (m - (g->n - 1)) - 1, g->n);
  return bagua__mod(g->r - m - 1, g->n);
}

static int send_chunk(const ring_t *g, int k) {
  if (k == 0) return g->kind == RING_ALLGATHER ? g->r : bagua__mod(g->r - 1, g->n);
  return recv_chunk(g, k - 1);
}

/* Where received message m's chunk (at offset coff of the full layout) is written. */
static char *recv_dst(const ring_t *g, int m, size_t coff) {
  if (g->kind != RING_REDUCE_SCATTER) return g->rbuf + coff;
  if (m == g->n - 2) return g->out;
  return g->slots + (size_t)(m % RS_SLOTS) * g->slot_bytes;
}

/* Where send message k's chunk (at offset coff) is read: the input first, then what was
 * received (and processed) from the predecessor. */
static const char *send_src(const ring_t *g, int k, size_t coff) {
  if (k == 0 && g->kind != RING_ALLGATHER) return g->sbuf + coff;
  if (g->kind == RING_REDUCE_SCATTER)
    return g->slots + (size_t)((k - 1) % RS_SLOTS) * g->slot_bytes;
  return g->rbuf + coff;
}

/*
 * Whether message m may be received now. A reduce-scatter's slot for message m last held
 * message m - RS_SLOTS, which send message m - RS_SLOTS + 1 reads; every lane must have sent
 * it, because the lanes split chunks of different lengths at different offsets. Waiting
 * cannot deadlock: what it waits for depends only on lower-numbered messages. Three slots
 * (rather than two) leave a predecessor a whole message of slack.
 */
static int may_recv(const ring_t *g, int m, int min_ks) {
  return g->kind != RING_REDUCE_SCATTER || m >= g->n - 2 || min_ks > m - RS_SLOTS + 1;
}

/* Byte range of stream `s` within a chunk of `len` bytes (the exchange engine's split). */
static void part(const ring_t *g, size_t len, int s, size_t *off, size_t *plen) {
  int ns = g->lanes;
  if (len < SMALL_MESSAGE || ns == 1) {
    *off = 0;
    *plen = s == 0 ? len : 0;
    return;
  }
  size_t per = (len + (size_t)ns - 1) / (size_t)ns;
  per = (per + 63) & ~(size_t)63;
  size_t o = (size_t)s * per;
  *off = o < len ? o : len;
  *plen = o >= len ? 0 : (len - o < per ? len - o : per);
}

/* Whether stream s carries a header for a chunk of `len` bytes (parts past the end do not). */
static int has_part(const ring_t *g, size_t len, int s) {
  if (s == 0) return 1;
  if (len < SMALL_MESSAGE || g->lanes == 1) return 0;
  size_t off, plen;
  part(g, len, s, &off, &plen);
  return plen > 0;
}

/* Processes staged bytes of the current receive part: reduce (or divide for AVG) and advance. */
static void process(ring_t *g, lane_t *L, char *dst_part, const char *local_part, int m) {
  size_t n = L->staged / g->es * g->es;
  if (n == 0) return;
  bagua__reduce_out(g->dt, g->op, dst_part + L->done, local_part + L->done, L->stage, n / g->es);
  if (g->op == BAGUA_AVG && m == g->n - 2) bagua__div(g->dt, dst_part + L->done, n / g->es, g->n);
  L->done += n;
  L->staged -= n;
  if (L->staged) memmove(L->stage, L->stage + n, L->staged);
}

/* Skips messages that have no part on this stream, for both directions. */
static void skip_empty(ring_t *g, lane_t *L, int s) {
  size_t off, len;
  while (L->ks < g->nmsg) {
    chunk(g, send_chunk(g, L->ks), &off, &len);
    if (has_part(g, len, s)) break;
    L->ks++;
  }
  while (L->km < g->nmsg) {
    chunk(g, recv_chunk(g, L->km), &off, &len);
    if (has_part(g, len, s)) break;
    L->km++;
  }
}

static bagua_status_t step_recv(ring_t *g, lane_t *L, int s, int *progress) {
  bagua_comm_t *c = g->c;
  size_t coff, clen, poff, plen;
  chunk(g, recv_chunk(g, L->km), &coff, &clen);
  part(g, clen, s, &poff, &plen);
  if (L->rhdr_done < sizeof(L->rhdr)) {
    ssize_t k =
        recv(L->fd_prev, (char *)&L->rhdr + L->rhdr_done, sizeof(L->rhdr) - L->rhdr_done, 0);
    if (k == 0) {
      BAGUA_WARN("rank %d closed its connection (peer died or failed)", g->prev);
      return BAGUA_ERR_REMOTE;
    }
    if (k < 0)
      return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? BAGUA_OK
                                                                       : BAGUA_ERR_REMOTE;
    *progress = 1;
    L->rhdr_done += (size_t)k;
    if (L->rhdr_done < sizeof(L->rhdr)) return BAGUA_OK;
    uint32_t want = c->peers[g->prev].recv_seq[s]++;
    if (L->rhdr.magic != BAGUA_WIRE_MAGIC || L->rhdr.seq != want || L->rhdr.bytes != plen) {
      BAGUA_WARN(
          "protocol error from rank %d stream %d: seq %u length %llu, expected seq %u "
          "length %zu (mismatched collective calls or counts?)",
          g->prev, s, L->rhdr.seq, (unsigned long long)L->rhdr.bytes, want, plen);
      return BAGUA_ERR_PROTOCOL;
    }
  }
  char *dst = recv_dst(g, L->km, coff) + poff;
  int reduce = reduces(g, L->km);
  if (L->got < plen) {
    char *into = reduce ? L->stage + L->staged : dst + L->got;
    size_t cap = plen - L->got;
    if (reduce && cap > g->seg - L->staged) cap = g->seg - L->staged;
    if (!reduce && cap > MAX_IO_CHUNK) cap = MAX_IO_CHUNK;
    ssize_t k = recv(L->fd_prev, into, cap, 0);
    if (k == 0) {
      BAGUA_WARN("rank %d closed its connection mid-message (peer died or failed)", g->prev);
      return BAGUA_ERR_REMOTE;
    }
    if (k < 0)
      return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? BAGUA_OK
                                                                       : BAGUA_ERR_REMOTE;
    *progress = 1;
    L->got += (size_t)k;
    if (reduce) {
      L->staged += (size_t)k;
      if (L->got == plen || L->staged >= g->seg / 2)
        process(g, L, dst, g->sbuf + coff + poff, L->km);
    } else {
      L->done = L->got;
    }
  }
  if (L->done == plen) { /* part complete: move on to the next message */
    L->km++;
    L->rhdr_done = L->got = L->done = L->staged = 0;
  }
  return BAGUA_OK;
}

/* Bytes of send message ks's part on stream s that may be sent now. */
static size_t send_avail(const ring_t *g, const lane_t *L, size_t plen) {
  if (L->ks == 0) return plen;
  if (L->km > L->ks - 1) return plen;
  if (L->km == L->ks - 1) return L->done;
  return 0;
}

static bagua_status_t step_send(ring_t *g, lane_t *L, int s, int *progress) {
  bagua_comm_t *c = g->c;
  size_t coff, clen, poff, plen;
  chunk(g, send_chunk(g, L->ks), &coff, &clen);
  part(g, clen, s, &poff, &plen);
  if (!L->shdr_ready) {
    L->shdr = (bagua__msg_hdr_t){BAGUA_WIRE_MAGIC, c->peers[g->next].send_seq[s]++, plen};
    L->shdr_ready = 1;
  }
  size_t avail = send_avail(g, L, plen);
  const char *src = send_src(g, L->ks, coff) + poff;
  struct iovec iov[2];
  int ni = 0;
  if (L->shdr_done < sizeof(L->shdr)) {
    iov[ni].iov_base = (char *)&L->shdr + L->shdr_done;
    iov[ni++].iov_len = sizeof(L->shdr) - L->shdr_done;
  }
  if (avail > L->sent) {
    size_t k = avail - L->sent;
    iov[ni].iov_base = (char *)src + L->sent;
    iov[ni++].iov_len = k < MAX_IO_CHUNK ? k : MAX_IO_CHUNK;
  }
  if (ni == 0) return BAGUA_OK;
  struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)ni};
  ssize_t w = sendmsg(L->fd_next, &mh, MSG_NOSIGNAL);
  if (w < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return BAGUA_OK;
    BAGUA_WARN("send to rank %d failed: %s", g->next, strerror(errno));
    return BAGUA_ERR_REMOTE;
  }
  *progress = 1;
  size_t k = (size_t)w;
  if (L->shdr_done < sizeof(L->shdr)) {
    size_t h = sizeof(L->shdr) - L->shdr_done;
    if (k < h) {
      L->shdr_done += k;
      return BAGUA_OK;
    }
    L->shdr_done = sizeof(L->shdr);
    k -= h;
  }
  L->sent += k;
  atomic_fetch_add_explicit(&c->bytes_sent, k, memory_order_relaxed);
  if (L->sent == plen) {
    L->ks++;
    L->shdr_done = L->sent = 0;
    L->shdr_ready = 0;
  }
  return BAGUA_OK;
}

/* The first message some lane has not finished sending. */
static int min_sent(const lane_t *lanes, int ns) {
  int m = lanes[0].ks;
  for (int s = 1; s < ns; s++)
    if (lanes[s].ks < m) m = lanes[s].ks;
  return m;
}

static bagua_status_t run(ring_t *g) {
  bagua_comm_t *c = g->c;
  bagua_status_t st = BAGUA_OK;
  int neighbours[2] = {g->prev, g->next};
  BAGUA_CHECK(bagua__links_use(c, neighbours, 2));
  lane_t lanes[16];
  struct pollfd pfd[32];
  int ns = g->lanes;
  g->seg = c->segment_bytes;
  if (c->scratch_bytes < (size_t)ns * g->seg) {
    void *p = realloc(c->scratch, (size_t)ns * g->seg);
    if (!p) return BAGUA_ERR_NO_MEMORY;
    c->scratch = p;
    c->scratch_bytes = (size_t)ns * g->seg;
  }
  for (int s = 0; s < ns; s++) {
    memset(&lanes[s], 0, sizeof(lanes[s]));
    lanes[s].fd_next = c->peers[g->next].fds[s];
    lanes[s].fd_prev = c->peers[g->prev].fds[s];
    lanes[s].stage = (char *)c->scratch + (size_t)s * g->seg;
  }
  int64_t last_progress = bagua__now_ms();
  for (;;) {
    int active = 0, progress = 0, min_ks = min_sent(lanes, ns);
    if (bagua__flag_get(&c->abort_flag)) return BAGUA_ERR_ABORTED;
    for (int s = 0; s < ns; s++) {
      lane_t *L = &lanes[s];
      /* Sending first, as the exchange engine does, puts this rank's first header on the wire
       * before it can find a mismatch in the peer's: when two ranks disagree on a collective,
       * both then report the mismatch instead of one seeing the other hang up. */
      skip_empty(g, L, s);
      if (L->ks < g->nmsg) BAGUA_CHECK(step_send(g, L, s, &progress));
      skip_empty(g, L, s);
      if (L->km < g->nmsg && may_recv(g, L->km, min_ks)) BAGUA_CHECK(step_recv(g, L, s, &progress));
      skip_empty(g, L, s);
      active += (L->km < g->nmsg) + (L->ks < g->nmsg);
    }
    if (!active) break;
    if (progress) {
      last_progress = bagua__now_ms();
      continue;
    }
    int np = 0;
    min_ks = min_sent(lanes, ns);
    for (int s = 0; s < ns; s++) {
      lane_t *L = &lanes[s];
      if (L->km < g->nmsg && may_recv(g, L->km, min_ks))
        pfd[np++] = (struct pollfd){L->fd_prev, POLLIN, 0};
      if (L->ks < g->nmsg) {
        size_t coff, clen, poff, plen;
        chunk(g, send_chunk(g, L->ks), &coff, &clen);
        part(g, clen, s, &poff, &plen);
        if (send_avail(g, L, plen) > L->sent || L->shdr_done < sizeof(L->shdr))
          pfd[np++] = (struct pollfd){L->fd_next, POLLOUT, 0};
      }
    }
    int rc = poll(pfd, (nfds_t)np, 50);
    if (rc < 0 && errno != EINTR) return BAGUA_ERR_SYSTEM;
    if (rc == 0 && bagua__now_ms() - last_progress > c->timeout_ms) {
      BAGUA_WARN(
          "no progress for %d ms in a ring with ranks %d and %d (peer stalled?); see "
          "BAGUA_COMM_TIMEOUT_MS",
          c->timeout_ms, g->prev, g->next);
      return BAGUA_ERR_TIMEOUT;
    }
  }
  return st;
}

/* Both neighbours must use the same number of streams; true unless nodes are mixed. */
int bagua__ring_usable(const bagua_comm_t *c) {
  if (!bagua__param_int(BAGUA_P_NET_RING_PIPELINE)) return 0;
  int next = (c->rank + 1) % c->size, prev = (c->rank + c->size - 1) % c->size;
  return bagua__peer_streams(c, next) == bagua__peer_streams(c, prev);
}

/* A ring over this rank's neighbours, with as many lanes as streams to the next rank. */
static ring_t ring_init(bagua_comm_t *c, ring_kind_t kind, size_t count, size_t es) {
  int n = c->size, r = c->rank;
  ring_t g = {.c = c,
              .n = n,
              .r = r,
              .next = (r + 1) % n,
              .prev = (r + n - 1) % n,
              .nmsg = kind == RING_ALLREDUCE ? 2 * (n - 1) : n - 1,
              .kind = kind,
              .count = count,
              .es = es,
              .dt = BAGUA_U8,
              .op = BAGUA_SUM};
  g.lanes = bagua__peer_streams(c, g.next);
  return g;
}

bagua_status_t bagua__ring_allreduce(bagua_comm_t *c, const void *sbuf, void *rbuf, size_t count,
                                     bagua_dtype_t dt, bagua_op_t op) {
  ring_t g = ring_init(c, RING_ALLREDUCE, count, bagua_dtype_size(dt));
  g.sbuf = sbuf;
  g.rbuf = rbuf;
  g.dt = dt;
  g.op = op;
  return run(&g);
}

bagua_status_t bagua__ring_reduce_scatter(bagua_comm_t *c, const void *sbuf, void *rbuf,
                                          size_t count, bagua_dtype_t dt, bagua_op_t op) {
  size_t es = bagua_dtype_size(dt);
  ring_t g = ring_init(c, RING_REDUCE_SCATTER, count * (size_t)c->size, es);
  g.sbuf = sbuf;
  g.out = rbuf;
  g.dt = dt;
  g.op = op;
  /* Partial sums need a home until they are forwarded: the input is the caller's and const.
   * Chunk 0 is the longest. With two ranks the only received chunk is the final one. */
  size_t off0;
  bagua__block(g.count, g.n, 0, es, &off0, &g.slot_bytes);
  size_t need = c->size > 2 ? RS_SLOTS * g.slot_bytes : 0;
  if (c->partials_bytes < need) {
    free(c->partials);
    c->partials_bytes = 0;
    if (!(c->partials = malloc(need))) return BAGUA_ERR_NO_MEMORY;
    c->partials_bytes = need;
  }
  g.slots = c->partials;
  return run(&g);
}

bagua_status_t bagua__ring_allgather(bagua_comm_t *c, void *buf, size_t count, size_t es) {
  ring_t g = ring_init(c, RING_ALLGATHER, count, es);
  g.rbuf = buf;
  return run(&g);
}
