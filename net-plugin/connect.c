/*
 * Bagua-Net connection set-up: listen, connect and accept, all non-blocking.
 *
 * NCCL calls connect and accept again and again until they return a comm, from its proxy
 * thread, so neither may wait. connect keeps its progress in the private tail of the handle
 * (bnet_handle_t.pending), the one buffer NCCL passes to every retry; accept keeps it in the
 * listen comm. The connecting side opens 1 + nstreams sockets and writes a hello on each;
 * the listener groups accepted sockets by the hello's connection id and returns a receive
 * comm once a group is complete. Everything half-open is dropped after
 * BAGUA_CONNECT_TIMEOUT_MS.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bnet.h"
#include "common/log.h"
#include "common/params.h"
#include "common/sock.h"
#include "common/time.h"

#define MAX_FDS (1 + BNET_MAX_STREAMS)
#define MAX_PENDING 64 /* accepted sockets whose hello is still incomplete */
#define MAX_GROUPS 16  /* connections whose streams are still arriving */

typedef struct {
  int fd;
  size_t got;
  bnet_hello_t hello;
  int64_t deadline;
} pending_sock_t;

typedef struct {
  int used;
  uint64_t conn_id;
  int nstreams;
  uint32_t chunk_min;
  int count;
  int fds[MAX_FDS];
  int64_t deadline;
} group_t;

struct bnet_listen {
  int fd;
  int dev;
  uint64_t nonce;
  pending_sock_t socks[MAX_PENDING];
  int nsocks;
  group_t groups[MAX_GROUPS];
};

typedef struct bnet_conn_pending {
  int nfds;
  int fds[MAX_FDS];
  int connected[MAX_FDS];
  size_t sent[MAX_FDS];
  bnet_hello_t hello[MAX_FDS];
  uint32_t chunk_min;
  int64_t deadline;
  char peer[32];
} conn_pending_t;

/* Keepalive on every stream: a peer host that vanishes without closing its sockets (powered
 * off, unplugged) is noticed on an idle connection after about KEEPIDLE + KEEPCNT * KEEPINTVL
 * seconds, so a receive waiting for its next message fails instead of hanging. Probes cost
 * nothing while data flows, and an alive but slow peer's kernel answers them. (A sender with
 * unacknowledged data relies on TCP's retransmission limit instead: TCP_USER_TIMEOUT would
 * also cut a receiver that merely posts its receive late, which NCCL does legitimately.) */
#define KEEPIDLE_S 60
#define KEEPINTVL_S 10
#define KEEPCNT 6

static void tune_stream(int fd) {
  bagua__sock_tune(fd); /* TCP_NODELAY, BAGUA_NET_SOCKBUF_BYTES, non-blocking */
  int on = 1, idle = KEEPIDLE_S, intvl = KEEPINTVL_S, cnt = KEEPCNT;
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
}

static int64_t setup_deadline(void) {
  return bagua__deadline_in(bagua__param_int(BAGUA_P_CONNECT_TIMEOUT_MS));
}

ncclResult_t bagua__bnet_listen(int dev, void *handle, void **listen_comm) {
  *listen_comm = NULL;
  const bnet_dev_t *d = bagua__bnet_dev(dev);
  if (!d || !handle) {
    BAGUA_WARN("bagua-net: listen on device %d refused: there are %d devices", dev,
               bagua__bnet_ndevs());
    return ncclInvalidArgument;
  }
  bnet_listen_t *l = calloc(1, sizeof(*l));
  if (!l) {
    BAGUA_WARN("bagua-net: out of memory in listen");
    return ncclSystemError;
  }
  uint16_t port = 0;
  if (bagua__listen(d->addr, 0, &l->fd, &port) != BAGUA_OK) {
    free(l);
    return ncclSystemError;
  }
  l->dev = dev;
  l->nonce = bagua__bnet_random64();
  for (int g = 0; g < MAX_GROUPS; g++)
    for (int i = 0; i < MAX_FDS; i++) l->groups[g].fds[i] = -1;
  bnet_handle_t *h = handle;
  memset(h, 0, sizeof(*h));
  h->magic = BNET_HANDLE_MAGIC;
  h->version = BNET_HANDLE_VERSION;
  h->kind = BNET_KIND_LISTEN;
  h->addr = d->addr;
  h->port = port;
  h->nonce = l->nonce;
  BAGUA_INFO(BAGUA_SUBSYS_NET, "bagua-net: listening on %s port %u", d->name, (unsigned)port);
  *listen_comm = l;
  return ncclSuccess;
}

static void pending_free(conn_pending_t *p) {
  for (int i = 0; i < p->nfds; i++)
    if (p->fds[i] >= 0) close(p->fds[i]);
  free(p);
}

/* Checks that a handle came from a Bagua-Net listener of this protocol version. */
static ncclResult_t check_handle(const bnet_handle_t *h) {
  if (h->magic != BNET_HANDLE_MAGIC || h->kind != BNET_KIND_LISTEN) {
    BAGUA_WARN(
        "bagua-net: connect refused a handle that is not a Bagua-Net listen handle "
        "(magic 0x%08x, kind %u): the peer runs another network plugin; load the same "
        "plugin (NCCL_NET_PLUGIN) on every rank",
        h->magic, (unsigned)h->kind);
    return ncclInvalidArgument;
  }
  if (h->version != BNET_HANDLE_VERSION) {
    BAGUA_WARN(
        "bagua-net: connect refused a listen handle of version %u (this plugin speaks "
        "%u): every rank must load the same Bagua-Net build",
        (unsigned)h->version, (unsigned)BNET_HANDLE_VERSION);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

static ncclResult_t connect_start(const bnet_handle_t *h, conn_pending_t **out) {
  int nstreams = 0;
  uint32_t chunk_min = 0;
  ncclResult_t rc = bagua__bnet_params(&nstreams, &chunk_min);
  if (rc != ncclSuccess) return rc;
  conn_pending_t *p = calloc(1, sizeof(*p));
  if (!p) return ncclSystemError;
  p->nfds = 1 + nstreams;
  p->chunk_min = chunk_min;
  p->deadline = setup_deadline();
  bagua__ipv4_str(h->addr, p->peer, sizeof(p->peer));
  uint64_t conn_id = bagua__bnet_random64();
  for (int i = 0; i < p->nfds; i++) p->fds[i] = -1;
  for (int i = 0; i < p->nfds; i++) {
    p->hello[i] = (bnet_hello_t){.magic = BNET_HELLO_MAGIC,
                                 .version = BNET_WIRE_VERSION,
                                 .index = (uint16_t)i,
                                 .nonce = h->nonce,
                                 .conn_id = conn_id,
                                 .nstreams = (uint32_t)nstreams,
                                 .chunk_min = chunk_min};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      BAGUA_WARN("bagua-net: socket() failed: %s", strerror(errno));
      goto fail;
    }
    p->fds[i] = fd;
    struct sockaddr_in sa = {
        .sin_family = AF_INET, .sin_port = htons(h->port), .sin_addr.s_addr = h->addr};
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
      p->connected[i] = 1;
    else if (errno != EINPROGRESS) {
      BAGUA_WARN("bagua-net: connect to %s:%u failed: %s", p->peer, (unsigned)h->port,
                 strerror(errno));
      goto fail;
    }
  }
  *out = p;
  return ncclSuccess;
fail:
  pending_free(p);
  return ncclSystemError;
}

/* Advances every socket as far as it goes without waiting; 1 once all hellos are out. */
static int connect_progress(conn_pending_t *p, uint16_t port, ncclResult_t *rc) {
  int done = 1;
  *rc = ncclSuccess;
  for (int i = 0; i < p->nfds; i++) {
    if (!p->connected[i]) {
      struct pollfd pfd = {.fd = p->fds[i], .events = POLLOUT};
      if (poll(&pfd, 1, 0) <= 0) {
        done = 0;
        continue;
      }
      int err = 0;
      socklen_t len = sizeof(err);
      getsockopt(p->fds[i], SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0) {
        BAGUA_WARN("bagua-net: connect to %s:%u failed: %s", p->peer, (unsigned)port,
                   strerror(err));
        *rc = ncclRemoteError;
        return 0;
      }
      p->connected[i] = 1;
    }
    while (p->sent[i] < sizeof(bnet_hello_t)) {
      ssize_t n = send(p->fds[i], (char *)&p->hello[i] + p->sent[i],
                       sizeof(bnet_hello_t) - p->sent[i], MSG_NOSIGNAL);
      if (n > 0) {
        p->sent[i] += (size_t)n;
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) break;
      BAGUA_WARN("bagua-net: sending the hello to %s:%u failed: %s", p->peer, (unsigned)port,
                 strerror(errno));
      *rc = ncclRemoteError;
      return 0;
    }
    if (p->sent[i] < sizeof(bnet_hello_t)) done = 0;
  }
  return done;
}

ncclResult_t bagua__bnet_connect(int dev, void *handle, void **send_comm) {
  *send_comm = NULL;
  if (!bagua__bnet_dev(dev) || !handle) {
    BAGUA_WARN("bagua-net: connect on device %d refused: there are %d devices", dev,
               bagua__bnet_ndevs());
    return ncclInvalidArgument;
  }
  bnet_handle_t *h = handle;
  ncclResult_t rc = check_handle(h);
  if (rc != ncclSuccess) return rc;
  if (h->stage_magic != BNET_STAGE_MAGIC) {
    conn_pending_t *p = NULL;
    rc = connect_start(h, &p);
    if (rc != ncclSuccess) return rc;
    h->stage_magic = BNET_STAGE_MAGIC;
    h->pending = p;
  }
  conn_pending_t *p = h->pending;
  if (!connect_progress(p, h->port, &rc)) {
    if (rc == ncclSuccess && bagua__expired(p->deadline)) {
      BAGUA_WARN(
          "bagua-net: connecting to %s:%u did not complete within "
          "BAGUA_CONNECT_TIMEOUT_MS=%lld",
          p->peer, (unsigned)h->port, (long long)bagua__param_int(BAGUA_P_CONNECT_TIMEOUT_MS));
      rc = ncclRemoteError;
    }
    if (rc == ncclSuccess) return ncclSuccess; /* not yet: NCCL calls again */
    goto done;
  }
  for (int i = 0; i < p->nfds; i++) tune_stream(p->fds[i]);
  bnet_comm_t *c = NULL;
  rc = bagua__bnet_comm_create(1, p->fds, p->nfds - 1, p->chunk_min, &c);
  p->nfds = 0; /* the comm owns (or, on failure, closed) the fds */
  if (rc == ncclSuccess) {
    BAGUA_INFO(BAGUA_SUBSYS_NET, "bagua-net: connected to %s:%u with %d data streams", p->peer,
               (unsigned)h->port, (int)p->hello[0].nstreams);
    *send_comm = c;
  }
done:
  pending_free(p);
  h->pending = NULL;
  h->stage_magic = 0;
  return rc;
}

static void group_clear(group_t *g) {
  for (int i = 0; i < MAX_FDS; i++) {
    if (g->fds[i] >= 0) close(g->fds[i]);
    g->fds[i] = -1;
  }
  g->used = 0;
  g->count = 0;
}

/* Files a socket whose hello is complete; returns 0, or -1 when the hello is refused (the
 * caller closes the socket). */
static int file_socket(bnet_listen_t *l, int fd, const bnet_hello_t *hl) {
  if (hl->magic != BNET_HELLO_MAGIC || hl->version != BNET_WIRE_VERSION || hl->nonce != l->nonce ||
      hl->nstreams < 1 || hl->nstreams > BNET_MAX_STREAMS || hl->index > hl->nstreams ||
      hl->chunk_min == 0) {
    BAGUA_WARN(
        "bagua-net: refused a connection whose hello is not for this listener (magic "
        "0x%08x, version %u, %u streams): a peer of another version or a stray client",
        hl->magic, (unsigned)hl->version, hl->nstreams);
    return -1;
  }
  group_t *g = NULL, *free_g = NULL;
  for (int i = 0; i < MAX_GROUPS; i++) {
    if (l->groups[i].used && l->groups[i].conn_id == hl->conn_id) g = &l->groups[i];
    if (!l->groups[i].used && !free_g) free_g = &l->groups[i];
  }
  if (!g) {
    if (!free_g) {
      BAGUA_WARN("bagua-net: more than %d connections are arriving at once; refused one",
                 MAX_GROUPS);
      return -1;
    }
    g = free_g;
    g->used = 1;
    g->conn_id = hl->conn_id;
    g->nstreams = (int)hl->nstreams;
    g->chunk_min = hl->chunk_min;
    g->deadline = setup_deadline();
  }
  if ((int)hl->nstreams != g->nstreams || g->fds[hl->index] >= 0) {
    BAGUA_WARN("bagua-net: refused a stream that contradicts its connection's hello");
    return -1;
  }
  g->fds[hl->index] = fd;
  g->count++;
  return 0;
}

/* Reads what has arrived of the hellos of accepted sockets. */
static void read_hellos(bnet_listen_t *l) {
  for (int i = 0; i < l->nsocks;) {
    pending_sock_t *s = &l->socks[i];
    int drop = 0, filed = 0;
    while (s->got < sizeof(bnet_hello_t)) {
      ssize_t n = recv(s->fd, (char *)&s->hello + s->got, sizeof(bnet_hello_t) - s->got, 0);
      if (n > 0) {
        s->got += (size_t)n;
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) break;
      drop = 1; /* closed or reset before its hello was complete */
      break;
    }
    if (!drop && s->got == sizeof(bnet_hello_t)) {
      if (file_socket(l, s->fd, &s->hello) == 0)
        filed = 1;
      else
        drop = 1;
    }
    if (!drop && !filed && bagua__expired(s->deadline)) {
      BAGUA_WARN(
          "bagua-net: dropped a connection that sent no complete hello within "
          "BAGUA_CONNECT_TIMEOUT_MS");
      drop = 1;
    }
    if (drop) close(s->fd);
    if (drop || filed) {
      l->socks[i] = l->socks[--l->nsocks];
      continue;
    }
    i++;
  }
}

ncclResult_t bagua__bnet_accept(void *listen_comm, void **recv_comm) {
  *recv_comm = NULL;
  bnet_listen_t *l = listen_comm;
  if (!l) {
    BAGUA_WARN("bagua-net: accept on a NULL listen comm");
    return ncclInvalidArgument;
  }
  while (l->nsocks < MAX_PENDING) {
    int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED) break;
      BAGUA_WARN("bagua-net: accept failed: %s", strerror(errno));
      return ncclSystemError;
    }
    l->socks[l->nsocks++] = (pending_sock_t){.fd = fd, .deadline = setup_deadline()};
  }
  read_hellos(l);
  for (int i = 0; i < MAX_GROUPS; i++) {
    group_t *g = &l->groups[i];
    if (!g->used) continue;
    if (g->count == 1 + g->nstreams) {
      for (int k = 0; k < g->count; k++) tune_stream(g->fds[k]);
      bnet_comm_t *c = NULL;
      ncclResult_t rc = bagua__bnet_comm_create(0, g->fds, g->nstreams, g->chunk_min, &c);
      for (int k = 0; k < MAX_FDS; k++) g->fds[k] = -1; /* owned (or closed) by the comm */
      group_clear(g);
      if (rc != ncclSuccess) return rc;
      BAGUA_INFO(BAGUA_SUBSYS_NET, "bagua-net: accepted a connection with %d data streams",
                 g->nstreams);
      *recv_comm = c;
      return ncclSuccess;
    }
    if (bagua__expired(g->deadline)) {
      BAGUA_WARN(
          "bagua-net: dropped a connection: %d of its %d streams arrived within "
          "BAGUA_CONNECT_TIMEOUT_MS",
          g->count, 1 + g->nstreams);
      group_clear(g);
    }
  }
  return ncclSuccess;
}

ncclResult_t bagua__bnet_close_listen(void *listen_comm) {
  bnet_listen_t *l = listen_comm;
  if (!l) return ncclSuccess;
  for (int i = 0; i < l->nsocks; i++) close(l->socks[i].fd);
  for (int i = 0; i < MAX_GROUPS; i++) group_clear(&l->groups[i]);
  if (l->fd >= 0) close(l->fd);
  free(l);
  return ncclSuccess;
}
