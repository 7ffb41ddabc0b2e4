/*
 * Bagua-Net data path: comms, their stream workers, isend/irecv/test and close.
 * The protocol is described in bnet.h.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bnet.h"
#include "common/log.h"
#include "common/sock.h"
#include "common/time.h"

/* One piece of work for a stream worker: move len bytes between ptr and the socket, then
 * count the piece off its request. */
typedef struct {
  char *ptr;
  size_t len;
  bnet_req_t *req;
} bnet_task_t;

typedef struct {
  bnet_comm_t *comm;
  int index; /* 0: control stream */
  int fd;
  int started;
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bnet_task_t *ring;
  unsigned cap, head, tail; /* tail - head tasks queued; indices wrap modulo cap */
} bnet_stream_t;

struct bnet_req {
  bnet_comm_t *comm;
  int used; /* touched only by the NCCL thread (isend/irecv/test) */
  int n;    /* 1 for sends; the number of grouped buffers for receives */
  /* Work left: one per unmatched receive slot or unsent header, plus one per queued chunk.
   * The request is complete when it reaches zero. */
  int64_t pending;
  bnet_msg_t hdr; /* send: the header the control stream carries */
  /* Receive slots; matched/size are written by the control thread under comm->mu before the
   * slot's chunks are queued, and read by test() only after pending reached zero. */
  char *data[BNET_MAX_RECVS];
  size_t cap[BNET_MAX_RECVS];
  size_t size[BNET_MAX_RECVS];
  int tags[BNET_MAX_RECVS];
  int matched[BNET_MAX_RECVS];
  int all_matched; /* every slot has its message (atomic: set by the control thread) */
};

struct bnet_comm {
  int is_send;
  int nstreams;
  uint32_t chunk_min;
  volatile int stop;  /* set by close: every worker returns within one poll slice */
  int error;          /* first failure, an ncclResult_t (atomic) */
  int error_reported; /* test() warned about it once */
  int peer_closed;    /* receive side: the control stream ended (atomic) */
  char errmsg[160];   /* what the failing worker saw */
  unsigned cursor;    /* rotation over the data streams (NCCL thread or control thread) */
  bnet_stream_t streams[1 + BNET_MAX_STREAMS];
  bnet_req_t reqs[BNET_MAX_REQS];
  /* Receive side: receives posted by irecv and not yet fully matched, oldest first. */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bnet_req_t *posted[BNET_MAX_REQS];
  int nposted;
};

int bagua__bnet_comm_is_send(const bnet_comm_t *c) {
  return c->is_send;
}

/* Records the first failure of a comm; later ones are consequences of it. The message is
 * written before the error code is published (under the comm lock, release order), so test()
 * never reads a half-written message. Callers must not hold c->mu. */
static void comm_fail(bnet_comm_t *c, ncclResult_t code, const char *fmt, const char *detail,
                      int index) {
  pthread_mutex_lock(&c->mu);
  if (__atomic_load_n(&c->error, __ATOMIC_ACQUIRE) == 0) {
    snprintf(c->errmsg, sizeof(c->errmsg), fmt, detail, index);
    __atomic_store_n(&c->error, (int)code, __ATOMIC_RELEASE);
    BAGUA_INFO(BAGUA_SUBSYS_NET, "bagua-net %s comm %p: %s", c->is_send ? "send" : "recv",
               (void *)c, c->errmsg);
  }
  pthread_mutex_unlock(&c->mu);
}

/* Splits a message: at most nstreams chunks of at least chunk_min bytes. */
static size_t chunk_bytes(const bnet_comm_t *c, size_t size) {
  size_t per = (size + (size_t)c->nstreams - 1) / (size_t)c->nstreams;
  return per < c->chunk_min ? c->chunk_min : per;
}

/* Queues a task; capacity is sized so that it never runs out (bnet.h), so a full ring is a
 * bug, reported rather than overwritten. */
static int stream_push(bnet_stream_t *s, char *ptr, size_t len, bnet_req_t *req) {
  pthread_mutex_lock(&s->mu);
  if (s->tail - s->head >= s->cap) {
    pthread_mutex_unlock(&s->mu);
    return -1;
  }
  s->ring[s->tail % s->cap] = (bnet_task_t){ptr, len, req};
  s->tail++;
  pthread_cond_signal(&s->cv);
  pthread_mutex_unlock(&s->mu);
  return 0;
}

/* Waits for the next task; returns 0 with the task, or -1 once the comm stops. */
static int stream_pop(bnet_stream_t *s, bnet_task_t *t) {
  bnet_comm_t *c = s->comm;
  pthread_mutex_lock(&s->mu);
  while (s->tail == s->head && !bagua__flag_get(&c->stop))
    bagua__cond_wait_until(&s->cv, &s->mu, bagua__deadline_in(100));
  int rc = -1;
  if (s->tail != s->head) {
    *t = s->ring[s->head % s->cap];
    s->head++;
    rc = 0;
  }
  pthread_mutex_unlock(&s->mu);
  return rc;
}

static void req_done_one(bnet_req_t *r) {
  __atomic_sub_fetch(&r->pending, 1, __ATOMIC_ACQ_REL);
}

/* Queues the chunks of one message of `size` bytes at `base` on the data streams, following
 * the rotation both ends share. The caller has already counted them into r->pending. */
static int queue_chunks(bnet_comm_t *c, char *base, size_t size, bnet_req_t *r) {
  if (size == 0) return 0;
  size_t chunk = chunk_bytes(c, size);
  for (size_t off = 0; off < size; off += chunk) {
    size_t len = size - off < chunk ? size - off : chunk;
    bnet_stream_t *s = &c->streams[1 + c->cursor % (unsigned)c->nstreams];
    c->cursor++;
    if (stream_push(s, base + off, len, r) != 0) return -1;
  }
  return 0;
}

static int64_t count_chunks(const bnet_comm_t *c, size_t size) {
  if (size == 0) return 0;
  size_t chunk = chunk_bytes(c, size);
  return (int64_t)((size + chunk - 1) / chunk);
}

/* Send side, every stream; receive side, data streams: move queued bytes. */
static void *stream_worker(void *arg) {
  bnet_stream_t *s = arg;
  bnet_comm_t *c = s->comm;
  bnet_task_t t;
  while (stream_pop(s, &t) == 0) {
    bagua_status_t st = c->is_send
                            ? bagua__send_all(s->fd, t.ptr, t.len, BAGUA__NO_DEADLINE, &c->stop)
                            : bagua__recv_all(s->fd, t.ptr, t.len, BAGUA__NO_DEADLINE, &c->stop);
    if (st == BAGUA_ERR_ABORTED) break;
    if (st != BAGUA_OK) {
      comm_fail(c, ncclRemoteError, "connection to the peer lost (%s) on stream %d",
                c->is_send ? "send failed" : "EOF or reset", s->index);
      break;
    }
    req_done_one(t.req);
  }
  return NULL;
}

/* Finds the oldest posted receive with an unmatched slot for `tag`; called under c->mu. */
static int find_slot(bnet_comm_t *c, int tag, bnet_req_t **out_req, int *out_slot) {
  for (int i = 0; i < c->nposted; i++) {
    bnet_req_t *r = c->posted[i];
    for (int k = 0; k < r->n; k++) {
      if (r->matched[k] || r->tags[k] != tag) continue;
      *out_req = r;
      *out_slot = k;
      return 1;
    }
  }
  return 0;
}

/* Receive side, control stream: read headers in order, match, and queue the chunks. */
static void *recv_control(void *arg) {
  bnet_stream_t *s = arg;
  bnet_comm_t *c = s->comm;
  for (;;) {
    bnet_msg_t h;
    bagua_status_t st = bagua__recv_all(s->fd, &h, sizeof(h), BAGUA__NO_DEADLINE, &c->stop);
    if (st == BAGUA_ERR_ABORTED) break;
    if (st != BAGUA_OK) {
      /* No further message will come. That is not an error for messages already matched:
       * their chunks may still be arriving on the data streams after a peer that closed
       * normally (a broken data stream fails them by itself). Only receives still waiting
       * for a message fail, in test(). */
      __atomic_store_n(&c->peer_closed, 1, __ATOMIC_RELEASE);
      BAGUA_INFO(BAGUA_SUBSYS_NET, "bagua-net recv comm %p: the peer closed the connection",
                 (void *)c);
      break;
    }
    if (h.magic != BNET_MSG_MAGIC || h.size > BNET_MAX_MSG) {
      comm_fail(c, ncclInternalError, "protocol error: %s (stream %d)",
                "bad message header on the control stream", 0);
      break;
    }
    bnet_req_t *r = NULL;
    int k = -1;
    pthread_mutex_lock(&c->mu);
    while (!find_slot(c, h.tag, &r, &k) && !bagua__flag_get(&c->stop))
      bagua__cond_wait_until(&c->cv, &c->mu, bagua__deadline_in(100));
    if (k < 0) {
      pthread_mutex_unlock(&c->mu);
      break; /* stopped */
    }
    if (h.size > r->cap[k]) {
      pthread_mutex_unlock(&c->mu);
      char what[96];
      snprintf(what, sizeof(what), "a %llu-byte message (tag %d) does not fit a %zu-byte buffer",
               (unsigned long long)h.size, h.tag, r->cap[k]);
      comm_fail(c, ncclInvalidUsage, "%s (stream %d)", what, 0);
      break;
    }
    r->matched[k] = 1;
    r->size[k] = (size_t)h.size;
    int all = 1;
    for (int j = 0; j < r->n; j++) all &= r->matched[j];
    if (all) {
      __atomic_store_n(&r->all_matched, 1, __ATOMIC_RELEASE);
      for (int i = 0; i < c->nposted; i++)
        if (c->posted[i] == r) {
          memmove(&c->posted[i], &c->posted[i + 1], (size_t)(c->nposted - i - 1) * sizeof(r));
          c->nposted--;
          break;
        }
    }
    pthread_mutex_unlock(&c->mu);
    if (h.size <= BNET_INLINE_MAX) {
      /* The payload follows on this stream: read it straight into the matched buffer. */
      st = bagua__recv_all(s->fd, r->data[k], r->size[k], BAGUA__NO_DEADLINE, &c->stop);
      if (st == BAGUA_ERR_ABORTED) break;
      if (st != BAGUA_OK) {
        comm_fail(c, ncclRemoteError, "connection to the peer lost (%s) on stream %d",
                  "EOF or reset", 0);
        break;
      }
      req_done_one(r);
      continue;
    }
    /* Count the chunks in before queueing them, then retire the slot's own unit of work, so
     * that pending cannot touch zero while chunks are outstanding. */
    __atomic_add_fetch(&r->pending, count_chunks(c, r->size[k]), __ATOMIC_ACQ_REL);
    if (queue_chunks(c, r->data[k], r->size[k], r) != 0) {
      comm_fail(c, ncclInternalError, "internal error: %s (stream %d)", "stream queue full", 0);
      break;
    }
    req_done_one(r);
  }
  return NULL;
}

ncclResult_t bagua__bnet_comm_create(int is_send, const int *fds, int nstreams, uint32_t chunk_min,
                                     bnet_comm_t **out) {
  *out = NULL;
  int nfds = 1 + nstreams;
  bnet_comm_t *c = calloc(1, sizeof(*c));
  if (!c) goto fail_fds;
  c->is_send = is_send;
  c->nstreams = nstreams;
  c->chunk_min = chunk_min;
  pthread_mutex_init(&c->mu, NULL);
  bagua__cond_init(&c->cv);
  /* A send stream holds at most two tasks per request (a header and its inline payload, or
   * one chunk); a receive data stream at most one chunk per grouped buffer. */
  unsigned cap = is_send ? 2 * BNET_MAX_REQS : BNET_MAX_REQS * BNET_MAX_RECVS;
  /* Every stream owns its fd and lock from here on, so close can clean up any partial state. */
  for (int i = 0; i < nfds; i++) {
    bnet_stream_t *s = &c->streams[i];
    s->comm = c;
    s->index = i;
    s->fd = fds[i];
    s->cap = cap;
    pthread_mutex_init(&s->mu, NULL);
    bagua__cond_init(&s->cv);
  }
  for (int i = 0; i < nfds; i++) {
    c->streams[i].ring = calloc(cap, sizeof(bnet_task_t));
    if (!c->streams[i].ring) goto fail_comm;
  }
  for (int i = 0; i < BNET_MAX_REQS; i++) c->reqs[i].comm = c;
  for (int i = 0; i < nfds; i++) {
    bnet_stream_t *s = &c->streams[i];
    void *(*fn)(void *) = (!is_send && i == 0) ? recv_control : stream_worker;
    int rc = pthread_create(&s->thread, NULL, fn, s);
    if (rc != 0) {
      BAGUA_WARN("bagua-net: cannot start a stream thread: %s", strerror(rc));
      goto fail_comm;
    }
    s->started = 1;
  }
  *out = c;
  return ncclSuccess;

fail_comm:
  /* Closing stops and joins what started, and closes every fd. */
  bagua__bnet_comm_close(c);
  return ncclSystemError;
fail_fds:
  BAGUA_WARN("bagua-net: out of memory creating a comm");
  for (int i = 0; i < nfds; i++) close(fds[i]);
  return ncclSystemError;
}

static bnet_req_t *req_alloc(bnet_comm_t *c) {
  for (int i = 0; i < BNET_MAX_REQS; i++) {
    bnet_req_t *r = &c->reqs[i];
    if (!r->used) {
      bnet_comm_t *keep = r->comm;
      memset(r, 0, sizeof(*r));
      r->comm = keep;
      r->used = 1;
      return r;
    }
  }
  return NULL;
}

static ncclResult_t comm_error(bnet_comm_t *c) {
  return (ncclResult_t)__atomic_load_n(&c->error, __ATOMIC_ACQUIRE);
}

ncclResult_t bagua__bnet_isend(bnet_comm_t *c, void *data, size_t size, int tag, void **request) {
  *request = NULL;
  if (size > BNET_MAX_MSG || (size > 0 && !data)) {
    BAGUA_WARN(
        "bagua-net: isend of %zu bytes at %p refused: the limit is maxP2pBytes = %zu "
        "and the buffer must not be NULL",
        size, data, BNET_MAX_MSG);
    return ncclInvalidArgument;
  }
  ncclResult_t err = comm_error(c);
  if (err != ncclSuccess) {
    BAGUA_WARN("bagua-net: isend on a failed connection: %s", c->errmsg);
    return err;
  }
  bnet_req_t *r = req_alloc(c);
  if (!r) return ncclSuccess; /* all requests busy: NCCL retries later */
  r->n = 1;
  r->size[0] = size;
  r->hdr = (bnet_msg_t){.magic = BNET_MSG_MAGIC, .tag = tag, .size = size};
  int inl = size <= BNET_INLINE_MAX;
  r->pending = 1 + (inl ? (size > 0) : count_chunks(c, size));
  if (stream_push(&c->streams[0], (char *)&r->hdr, sizeof(r->hdr), r) != 0 ||
      (inl && size > 0 && stream_push(&c->streams[0], data, size, r) != 0) ||
      (!inl && queue_chunks(c, data, size, r) != 0)) {
    BAGUA_WARN("bagua-net: internal error: a stream queue of send comm %p is full", (void *)c);
    return ncclInternalError;
  }
  *request = r;
  return ncclSuccess;
}

ncclResult_t bagua__bnet_irecv(bnet_comm_t *c, int n, void **data, const size_t *sizes,
                               const int *tags, void **request) {
  *request = NULL;
  if (n < 1 || n > BNET_MAX_RECVS) {
    BAGUA_WARN("bagua-net: irecv of %d buffers refused: between 1 and maxRecvs = %d", n,
               BNET_MAX_RECVS);
    return ncclInvalidArgument;
  }
  for (int k = 0; k < n; k++) {
    if (sizes[k] > BNET_MAX_MSG || (sizes[k] > 0 && !data[k])) {
      BAGUA_WARN(
          "bagua-net: irecv buffer %d of %zu bytes at %p refused: the limit is "
          "maxP2pBytes = %zu and the buffer must not be NULL",
          k, sizes[k], data[k], BNET_MAX_MSG);
      return ncclInvalidArgument;
    }
    for (int j = 0; j < k; j++)
      if (tags[j] == tags[k]) {
        BAGUA_WARN("bagua-net: irecv refused: buffers %d and %d share tag %d", j, k, tags[k]);
        return ncclInvalidArgument;
      }
  }
  ncclResult_t err = comm_error(c);
  if (err != ncclSuccess) {
    BAGUA_WARN("bagua-net: irecv on a failed connection: %s", c->errmsg);
    return err;
  }
  bnet_req_t *r = req_alloc(c);
  if (!r) return ncclSuccess;
  r->n = n;
  r->pending = n;
  for (int k = 0; k < n; k++) {
    r->data[k] = data[k];
    r->cap[k] = sizes[k];
    r->tags[k] = tags[k];
  }
  pthread_mutex_lock(&c->mu);
  c->posted[c->nposted++] = r; /* cannot overflow: at most BNET_MAX_REQS requests exist */
  pthread_cond_signal(&c->cv);
  pthread_mutex_unlock(&c->mu);
  *request = r;
  return ncclSuccess;
}

ncclResult_t bagua__bnet_test(void *request, int *done, int *sizes) {
  bnet_req_t *r = request;
  *done = 0;
  if (!r || !r->used) {
    BAGUA_WARN("bagua-net: test() on a request that is not in flight (%p)", request);
    return ncclInvalidUsage;
  }
  bnet_comm_t *c = r->comm;
  if (__atomic_load_n(&r->pending, __ATOMIC_ACQUIRE) == 0) {
    if (sizes)
      for (int k = 0; k < r->n; k++) sizes[k] = (int)r->size[k];
    *done = 1;
    r->used = 0;
    return ncclSuccess;
  }
  ncclResult_t err = comm_error(c);
  if (err == ncclSuccess && !c->is_send && __atomic_load_n(&c->peer_closed, __ATOMIC_ACQUIRE) &&
      !__atomic_load_n(&r->all_matched, __ATOMIC_ACQUIRE)) {
    /* The control thread may have matched the last slot just before it saw the end of the
     * stream: look at pending once more before failing the request. */
    if (__atomic_load_n(&r->pending, __ATOMIC_ACQUIRE) == 0)
      return bagua__bnet_test(r, done, sizes);
    comm_fail(c, ncclRemoteError, "the peer closed the connection (%s) on stream %d",
              "a posted receive will never get its message", 0);
    err = comm_error(c);
  }
  if (err != ncclSuccess) {
    if (!c->error_reported) {
      c->error_reported = 1;
      BAGUA_WARN("bagua-net: %s request failed: %s", c->is_send ? "send" : "receive", c->errmsg);
    }
    return err;
  }
  return ncclSuccess;
}

ncclResult_t bagua__bnet_comm_close(bnet_comm_t *c) {
  if (!c) return ncclSuccess;
  bagua__flag_set(&c->stop);
  int nfds = 1 + c->nstreams;
  for (int i = 0; i < nfds; i++) {
    bnet_stream_t *s = &c->streams[i];
    pthread_mutex_lock(&s->mu);
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
  }
  pthread_mutex_lock(&c->mu);
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
  for (int i = 0; i < nfds; i++) {
    bnet_stream_t *s = &c->streams[i];
    if (s->started) pthread_join(s->thread, NULL);
  }
  for (int i = 0; i < nfds; i++) {
    bnet_stream_t *s = &c->streams[i];
    if (s->fd >= 0) close(s->fd);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s->ring);
  }
  pthread_mutex_destroy(&c->mu);
  pthread_cond_destroy(&c->cv);
  free(c);
  return ncclSuccess;
}
