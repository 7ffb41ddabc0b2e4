/*
 * The TCP point-to-point engine. One call progresses any number of concurrent sends and
 * receives (at most one of each per peer) until all complete, so rings, pairwise exchanges
 * and fan-in/fan-out never deadlock on full socket buffers.
 *
 * A message of B bytes is cut into parts, one per stream (small messages use stream 0 only),
 * so several TCP connections carry one large message in parallel. Each part starts with a
 * 16-byte header (magic, per-stream sequence number, length): a receiver that expects a
 * different length or sequence number reports a protocol error instead of corrupting data.
 * Reducing receives land in a small staging buffer and are combined into the destination as
 * they arrive, so reduction overlaps with the transfer of the rest of the message.
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
#include "common/sock.h"
#include "kernels/kernels.h"

#define SMALL_MESSAGE (64 * 1024)
#define MAX_IO_CHUNK (1 << 20)
#define STAGE_BYTES (256 * 1024)

typedef struct {
  int fd, peer, stream, is_send;
  bagua__msg_hdr_t hdr;
  size_t hdr_done;
  char *ptr; /* next payload byte (send: source; recv: destination) */
  size_t left;
  /* Reducing receives only. */
  const char *local; /* local operand matching ptr */
  char *stage;
  size_t staged;
  size_t esize;
  bagua_dtype_t dt;
  bagua_op_t op;
} part_t;

/* Splits `bytes` into at most nstreams parts of whole 64-byte multiples. */
static int split_parts(size_t bytes, int nstreams, size_t *part_len) {
  if (bytes < SMALL_MESSAGE || nstreams == 1) {
    *part_len = bytes;
    return 1;
  }
  size_t per = (bytes + (size_t)nstreams - 1) / (size_t)nstreams;
  per = (per + 63) & ~(size_t)63;
  *part_len = per;
  return (int)((bytes + per - 1) / per);
}

static bagua_status_t ensure_scratch(bagua_comm_t *c, size_t bytes) {
  if (c->scratch_bytes >= bytes) return BAGUA_OK;
  void *p = realloc(c->scratch, bytes);
  if (!p) return BAGUA_ERR_NO_MEMORY;
  c->scratch = p;
  c->scratch_bytes = bytes;
  return BAGUA_OK;
}

/* Combines the whole elements in the staging buffer into the destination. */
static void flush_stage(part_t *p) {
  size_t n = p->staged / p->esize * p->esize;
  if (n == 0) return;
  bagua__reduce_out(p->dt, p->op, p->ptr, p->local, p->stage, n / p->esize);
  p->ptr += n;
  p->local += n;
  p->staged -= n;
  if (p->staged) memmove(p->stage, p->stage + n, p->staged);
}

/* One non-blocking step of a send part. Returns 1 on progress, 0 if it would block. */
static int step_send(bagua_comm_t *c, part_t *p, bagua_status_t *st) {
  struct iovec iov[2];
  int n = 0;
  if (p->hdr_done < sizeof(p->hdr)) {
    iov[n].iov_base = (char *)&p->hdr + p->hdr_done;
    iov[n++].iov_len = sizeof(p->hdr) - p->hdr_done;
  }
  if (p->left) {
    iov[n].iov_base = p->ptr;
    iov[n++].iov_len = p->left < MAX_IO_CHUNK ? p->left : MAX_IO_CHUNK;
  }
  struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
  ssize_t w = sendmsg(p->fd, &mh, MSG_NOSIGNAL);
  if (w < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return 0;
    BAGUA_WARN("send to rank %d failed: %s", p->peer, strerror(errno));
    *st = BAGUA_ERR_REMOTE;
    return 0;
  }
  size_t k = (size_t)w;
  if (p->hdr_done < sizeof(p->hdr)) {
    size_t h = sizeof(p->hdr) - p->hdr_done;
    if (k < h) {
      p->hdr_done += k;
      return 1;
    }
    p->hdr_done = sizeof(p->hdr);
    k -= h;
  }
  p->ptr += k;
  p->left -= k;
  atomic_fetch_add_explicit(&c->bytes_sent, k, memory_order_relaxed);
  return 1;
}

/* One non-blocking step of a receive part. Returns 1 on progress, 0 if it would block. */
static int step_recv(bagua_comm_t *c, part_t *p, bagua_status_t *st) {
  if (p->hdr_done < sizeof(p->hdr)) {
    ssize_t r = recv(p->fd, (char *)&p->hdr + p->hdr_done, sizeof(p->hdr) - p->hdr_done, 0);
    if (r == 0) {
      BAGUA_WARN("rank %d closed its connection (peer died or failed)", p->peer);
      *st = BAGUA_ERR_REMOTE;
      return 0;
    }
    if (r < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return 0;
      BAGUA_WARN("receive from rank %d failed: %s", p->peer, strerror(errno));
      *st = BAGUA_ERR_REMOTE;
      return 0;
    }
    p->hdr_done += (size_t)r;
    if (p->hdr_done < sizeof(p->hdr)) return 1;
    uint32_t want_seq = c->peers[p->peer].recv_seq[p->stream]++;
    if (p->hdr.magic != BAGUA_WIRE_MAGIC || p->hdr.seq != want_seq || p->hdr.bytes != p->left) {
      BAGUA_WARN(
          "protocol error from rank %d stream %d: got magic 0x%08x seq %u length %llu, "
          "expected seq %u length %zu (mismatched collective calls or counts?)",
          p->peer, p->stream, p->hdr.magic, p->hdr.seq, (unsigned long long)p->hdr.bytes, want_seq,
          p->left);
      *st = BAGUA_ERR_PROTOCOL;
      return 0;
    }
    return 1;
  }
  char *dst;
  size_t cap;
  if (p->stage) {
    dst = p->stage + p->staged;
    cap = STAGE_BYTES - p->staged;
    if (cap > p->left - p->staged) cap = p->left - p->staged;
  } else {
    dst = p->ptr;
    cap = p->left < MAX_IO_CHUNK ? p->left : MAX_IO_CHUNK;
  }
  ssize_t r = recv(p->fd, dst, cap, 0);
  if (r == 0) {
    BAGUA_WARN("rank %d closed its connection mid-message (peer died or failed)", p->peer);
    *st = BAGUA_ERR_REMOTE;
    return 0;
  }
  if (r < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return 0;
    BAGUA_WARN("receive from rank %d failed: %s", p->peer, strerror(errno));
    *st = BAGUA_ERR_REMOTE;
    return 0;
  }
  if (p->stage) {
    p->staged += (size_t)r;
    /* Reduce in batches so each reduction call covers a useful amount of data. */
    if (p->staged == p->left || p->staged >= STAGE_BYTES / 2) {
      size_t before = p->staged;
      flush_stage(p);
      p->left -= before - p->staged;
    }
  } else {
    p->ptr += r;
    p->left -= (size_t)r;
  }
  return 1;
}

static int part_done(const part_t *p) {
  return p->hdr_done == sizeof(p->hdr) && p->left == 0;
}

/* Opens the streams to the peers of an exchange that are not open yet (links.c). */
static bagua_status_t link_peers(bagua_comm_t *c, const bagua__send_t *sends, int nsends,
                                 const bagua__recv_t *recvs, int nrecvs) {
  int stack[32], *want = stack, n = 0, missing = 0;
  for (int i = 0; i < nsends && !missing; i++)
    missing = !__atomic_load_n(&c->peers[sends[i].peer].up, __ATOMIC_ACQUIRE);
  for (int i = 0; i < nrecvs && !missing; i++)
    missing = !__atomic_load_n(&c->peers[recvs[i].peer].up, __ATOMIC_ACQUIRE);
  if (!missing) return BAGUA_OK;
  if (nsends + nrecvs > 32 && !(want = malloc(sizeof(int) * (size_t)(nsends + nrecvs))))
    return BAGUA_ERR_NO_MEMORY;
  for (int i = 0; i < nsends; i++) want[n++] = sends[i].peer;
  for (int i = 0; i < nrecvs; i++) want[n++] = recvs[i].peer;
  bagua_status_t st = bagua__links_use(c, want, n);
  if (want != stack) free(want);
  return st;
}

bagua_status_t bagua__exchange(bagua_comm_t *c, const bagua__send_t *sends, int nsends,
                               const bagua__recv_t *recvs, int nrecvs) {
  BAGUA_CHECK(link_peers(c, sends, nsends, recvs, nrecvs));
  int maxparts = (nsends + nrecvs) * c->nstreams; /* no peer has more streams than this */
  part_t stack_parts[32];
  struct pollfd stack_pfd[32];
  part_t *parts = stack_parts;
  struct pollfd *pfd = stack_pfd;
  bagua_status_t st = BAGUA_OK;
  if (maxparts > 32) {
    parts = calloc((size_t)maxparts, sizeof(*parts));
    pfd = calloc((size_t)maxparts, sizeof(*pfd));
    if (!parts || !pfd) {
      st = BAGUA_ERR_NO_MEMORY;
      goto done;
    }
  }
  int np = 0, nstage = 0;
  for (int i = 0; i < nrecvs; i++)
    if (recvs[i].local)
      nstage += split_parts(recvs[i].bytes, bagua__peer_streams(c, recvs[i].peer), &(size_t){0});
  BAGUA_CHECK_GOTO(ensure_scratch(c, (size_t)nstage * STAGE_BYTES), st, done);
  int stage_idx = 0;
  for (int i = 0; i < nsends; i++) {
    size_t plen;
    int k = split_parts(sends[i].bytes, bagua__peer_streams(c, sends[i].peer), &plen);
    bagua__peer_t *peer = &c->peers[sends[i].peer];
    for (int s = 0; s < k; s++) {
      part_t *p = &parts[np++];
      memset(p, 0, sizeof(*p));
      size_t off = (size_t)s * plen;
      p->fd = peer->fds[s];
      p->peer = sends[i].peer;
      p->stream = s;
      p->is_send = 1;
      p->ptr = (char *)sends[i].buf + off;
      p->left = s == k - 1 ? sends[i].bytes - off : plen;
      p->hdr = (bagua__msg_hdr_t){BAGUA_WIRE_MAGIC, peer->send_seq[s]++, p->left};
    }
  }
  for (int i = 0; i < nrecvs; i++) {
    size_t plen;
    int k = split_parts(recvs[i].bytes, bagua__peer_streams(c, recvs[i].peer), &plen);
    for (int s = 0; s < k; s++) {
      part_t *p = &parts[np++];
      memset(p, 0, sizeof(*p));
      size_t off = (size_t)s * plen;
      p->fd = c->peers[recvs[i].peer].fds[s];
      p->peer = recvs[i].peer;
      p->stream = s;
      p->ptr = (char *)recvs[i].buf + off;
      p->left = s == k - 1 ? recvs[i].bytes - off : plen;
      if (recvs[i].local) {
        p->local = (const char *)recvs[i].local + off;
        p->stage = (char *)c->scratch + (size_t)stage_idx++ * STAGE_BYTES;
        p->esize = bagua_dtype_size(recvs[i].dt);
        p->dt = recvs[i].dt;
        p->op = recvs[i].op;
      }
    }
  }
  int64_t last_progress = bagua__now_ms();
  int idle_spins = 0;
  for (;;) {
    int active = 0, progressed = 0;
    if (bagua__flag_get(&c->abort_flag)) {
      st = BAGUA_ERR_ABORTED;
      goto done;
    }
    for (int i = 0; i < np; i++) {
      part_t *p = &parts[i];
      if (part_done(p)) continue;
      progressed |= p->is_send ? step_send(c, p, &st) : step_recv(c, p, &st);
      if (st != BAGUA_OK) goto done;
      if (!part_done(p)) active++;
    }
    if (!active) break;
    if (progressed) {
      last_progress = bagua__now_ms();
      idle_spins = 0;
      continue;
    }
    /* Small messages are latency-bound: retrying the non-blocking calls for a few
     * microseconds before sleeping in poll() saves the wake-up (about 20 us on loopback),
     * as MPI's busy polling does. Not when ranks outnumber CPUs: the peer then needs ours. */
    if (idle_spins < c->net_spin) {
      idle_spins++;
      continue;
    }
    int n = 0;
    for (int i = 0; i < np; i++) {
      if (part_done(&parts[i])) continue;
      pfd[n].fd = parts[i].fd;
      pfd[n].events = parts[i].is_send ? POLLOUT : POLLIN;
      pfd[n++].revents = 0;
    }
    int rc = poll(pfd, (nfds_t)n, 50);
    if (rc < 0 && errno != EINTR) {
      st = BAGUA_ERR_SYSTEM;
      goto done;
    }
    if (rc == 0 && bagua__now_ms() - last_progress > c->timeout_ms) {
      for (int i = 0; i < np; i++)
        if (!part_done(&parts[i])) {
          BAGUA_WARN("no progress for %d ms %s rank %d (peer stalled?); see BAGUA_COMM_TIMEOUT_MS",
                     c->timeout_ms, parts[i].is_send ? "sending to" : "receiving from",
                     parts[i].peer);
          break;
        }
      st = BAGUA_ERR_TIMEOUT;
      goto done;
    }
  }
done:
  if (parts != stack_parts) free(parts);
  if (pfd != stack_pfd) free(pfd);
  return st;
}
