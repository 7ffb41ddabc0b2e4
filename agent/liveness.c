/*
 * The liveness channel between agents: one watched TCP connection per peer (liveness.h).
 *
 * The proof of death is narrow on purpose. A connect that is refused or times out proves
 * nothing (the peer may not listen yet, or be stalled), and neither does a connection that ends
 * before the peer's hello arrived. Only the end of a connection whose hello named the very
 * registration (node id and lease) the snapshot shows counts: then the peer's kernel closed the
 * socket, which it does when the process dies or exits.
 */
#include "liveness.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/log.h"
#include "common/sock.h"
#include "common/time.h"

/* Bounds on a connect and on the hello that follows it. */
#define CONNECT_MS 2000
#define HELLO_MS 2000
/* Reconnect attempts back off from the first to the last delay. */
#define BACKOFF_MIN_MS 250
#define BACKOFF_MAX_MS 5000
/* Incoming connections kept at most: one per peer is expected; this only bounds a flood. */
#define MAX_INCOMING 4096
/* "bagua-live <node id> <lease>\n" always fits. */
#define HELLO_MAX (BAGUA_AGENT_ID_MAX + 48)
#define HELLO_WORD "bagua-live"

typedef enum { PEER_IDLE = 0, PEER_CONNECTING, PEER_HELLO, PEER_UP } peer_state_t;

/* An outgoing connection to one registration of another node. */
typedef struct {
  char id[BAGUA_AGENT_ID_MAX];
  char addr[256];
  int port;
  int64_t lease;
  int resolved; /* 0: not yet, 1: `ip` holds the address, -1: the address does not resolve */
  uint32_t ip;
  int fd;
  peer_state_t state;
  int64_t deadline_ms; /* of the connect or the hello */
  int64_t next_try_ms;
  int backoff_ms;
  int seen; /* in the snapshot of the current update */
  char buf[HELLO_MAX];
  size_t len;
} peer_t;

struct bagua__liveness {
  char self[BAGUA_AGENT_ID_MAX];
  int64_t lease;
  int lfd;
  int port;
  peer_t *peers;
  size_t npeers, peers_cap;
  int *in; /* accepted connections, watched only to be closed */
  size_t nin, in_cap;
  bagua__liveness_death_t *dead;
  size_t ndead, dead_cap;
};

/* Grows *arr (elements of `size` bytes) to hold one more than `n`; returns 0 or -1. */
static int grow(void **arr, size_t *cap, size_t n, size_t size) {
  if (n < *cap) return 0;
  size_t nc = *cap ? *cap * 2 : 8;
  void *p = realloc(*arr, nc * size);
  if (!p) return -1;
  *arr = p;
  *cap = nc;
  return 0;
}

bagua__liveness_t *bagua__liveness_create(const char *self_id) {
  bagua__liveness_t *l = calloc(1, sizeof(*l));
  if (!l) return NULL;
  snprintf(l->self, sizeof(l->self), "%s", self_id);
  l->lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};
  socklen_t len = sizeof(sa);
  if (l->lfd < 0 || bind(l->lfd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
      listen(l->lfd, 128) != 0 || getsockname(l->lfd, (struct sockaddr *)&sa, &len) != 0) {
    int e = errno;
    if (l->lfd >= 0) close(l->lfd);
    free(l);
    errno = e;
    return NULL;
  }
  l->port = ntohs(sa.sin_port);
  return l;
}

static void peer_close(peer_t *p) {
  if (p->fd >= 0) close(p->fd);
  p->fd = -1;
  p->state = PEER_IDLE;
  p->len = 0;
}

void bagua__liveness_destroy(bagua__liveness_t *l) {
  if (!l) return;
  for (size_t i = 0; i < l->npeers; i++) peer_close(&l->peers[i]);
  for (size_t i = 0; i < l->nin; i++) close(l->in[i]);
  if (l->lfd >= 0) close(l->lfd);
  free(l->peers);
  free(l->in);
  free(l->dead);
  free(l);
}

int bagua__liveness_port(const bagua__liveness_t *l) {
  return l->port;
}

void bagua__liveness_set_lease(bagua__liveness_t *l, int64_t lease) {
  l->lease = lease;
}

/* ---------------------------------------------------------------------------------------- */
/* Polling                                                                                   */
/* ---------------------------------------------------------------------------------------- */

size_t bagua__liveness_nfds(const bagua__liveness_t *l) {
  size_t n = 1 + l->nin;
  for (size_t i = 0; i < l->npeers; i++) n += l->peers[i].fd >= 0;
  return n;
}

void bagua__liveness_fill(const bagua__liveness_t *l, struct pollfd *pfd) {
  size_t k = 0;
  pfd[k++] = (struct pollfd){.fd = l->lfd, .events = POLLIN};
  for (size_t i = 0; i < l->npeers; i++) {
    const peer_t *p = &l->peers[i];
    if (p->fd < 0) continue;
    pfd[k++] =
        (struct pollfd){.fd = p->fd, .events = p->state == PEER_CONNECTING ? POLLOUT : POLLIN};
  }
  for (size_t i = 0; i < l->nin; i++) pfd[k++] = (struct pollfd){.fd = l->in[i], .events = POLLIN};
}

/* Closes the connection and schedules the next attempt after the current back-off. */
static void retry_later(peer_t *p, int64_t now) {
  peer_close(p);
  p->next_try_ms = now + p->backoff_ms;
  p->backoff_ms = p->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : p->backoff_ms * 2;
}

static void note_death(bagua__liveness_t *l, const peer_t *p) {
  for (size_t i = 0; i < l->ndead; i++)
    if (l->dead[i].lease == p->lease && strcmp(l->dead[i].id, p->id) == 0) return;
  if (grow((void **)&l->dead, &l->dead_cap, l->ndead, sizeof(*l->dead)) != 0) return;
  bagua__liveness_death_t *d = &l->dead[l->ndead++];
  snprintf(d->id, sizeof(d->id), "%s", p->id);
  d->lease = p->lease;
}

/* Whether the hello in p->buf names the registration the entry watches. */
static int hello_matches(const peer_t *p) {
  char word[16], id[BAGUA_AGENT_ID_MAX];
  long long lease = 0;
  if (sscanf(p->buf, "%15s %127s %lld", word, id, &lease) != 3) return 0;
  return strcmp(word, HELLO_WORD) == 0 && strcmp(id, p->id) == 0 && lease == p->lease;
}

/* Reads the peer's hello; returns 1 once it is complete and matches. */
static int read_hello(peer_t *p, int64_t now) {
  ssize_t r = read(p->fd, p->buf + p->len, sizeof(p->buf) - 1 - p->len);
  if (r < 0 && (errno == EAGAIN || errno == EINTR)) return 0;
  if (r <= 0) {
    /* An end before the hello proves nothing: the peer may have been on its way out. */
    retry_later(p, now);
    return 0;
  }
  p->len += (size_t)r;
  p->buf[p->len] = '\0';
  if (!strchr(p->buf, '\n')) {
    if (p->len + 1 >= sizeof(p->buf)) retry_later(p, now);
    return 0;
  }
  if (!hello_matches(p)) {
    /* Another registration of the node (or not an agent at all) answers on that port. */
    BAGUA_INFO(BAGUA_SUBSYS_AGENT, "agent: liveness hello from %s:%d does not match node %s",
               p->addr, p->port, p->id);
    retry_later(p, now);
    return 0;
  }
  p->state = PEER_UP;
  p->backoff_ms = BACKOFF_MIN_MS;
  return 1;
}

/* An event on an outgoing connection; returns 1 when it proved the peer dead. */
static int peer_event(bagua__liveness_t *l, peer_t *p, int64_t now) {
  if (p->state == PEER_CONNECTING) {
    int err = 0;
    socklen_t len = sizeof(err);
    if (getsockopt(p->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
    if (err == EINPROGRESS) return 0;
    if (err != 0) {
      retry_later(p, now); /* refused or unreachable: not a death, the peer may not listen yet */
      return 0;
    }
    p->state = PEER_HELLO;
    p->deadline_ms = now + HELLO_MS;
    p->len = 0;
    return 0;
  }
  if (p->state == PEER_HELLO) {
    read_hello(p, now);
    return 0;
  }
  char junk[256];
  ssize_t r = read(p->fd, junk, sizeof(junk));
  if (r > 0 || (r < 0 && (errno == EAGAIN || errno == EINTR))) return 0;
  if (r < 0 && errno != ECONNRESET && errno != EPIPE) {
    /* Any other error (a timeout, an unreachable route) says nothing about the process. */
    retry_later(p, now);
    return 0;
  }
  note_death(l, p);
  /* The registration is on its way out; the next snapshot drops or replaces the entry. */
  peer_close(p);
  p->next_try_ms = now + BACKOFF_MAX_MS;
  return 1;
}

static void accept_all(bagua__liveness_t *l) {
  char hello[HELLO_MAX];
  int n = snprintf(hello, sizeof(hello), HELLO_WORD " %s %lld\n", l->self, (long long)l->lease);
  for (int i = 0; i < 64; i++) {
    int fd = accept4(l->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    /* A fresh socket's send buffer always takes these few bytes; anything short is dropped. */
    if (l->nin >= MAX_INCOMING || send(fd, hello, (size_t)n, MSG_NOSIGNAL) != n ||
        grow((void **)&l->in, &l->in_cap, l->nin, sizeof(*l->in)) != 0) {
      close(fd);
      continue;
    }
    l->in[l->nin++] = fd;
  }
}

/* An event on an accepted connection: it is only closed once the other side closes it. */
static void incoming_event(bagua__liveness_t *l, size_t i) {
  char junk[256];
  ssize_t r = read(l->in[i], junk, sizeof(junk));
  if (r > 0 || (r < 0 && (errno == EAGAIN || errno == EINTR))) return;
  close(l->in[i]);
  l->in[i] = l->in[--l->nin];
}

int bagua__liveness_handle(bagua__liveness_t *l, const struct pollfd *pfd, size_t n) {
  int64_t now = bagua__now_ms();
  int deaths = 0, accept_ready = 0;
  /* Descriptors are matched by number. Only accept_all creates new ones, and it runs last, so
   * a number closed here cannot be reused by a later entry of the same array. */
  for (size_t k = 0; k < n; k++) {
    if (!pfd[k].revents) continue;
    if (pfd[k].fd == l->lfd) {
      accept_ready = 1;
      continue;
    }
    int done = 0;
    for (size_t i = 0; i < l->npeers && !done; i++)
      if (l->peers[i].fd == pfd[k].fd) {
        deaths += peer_event(l, &l->peers[i], now);
        done = 1;
      }
    for (size_t i = 0; i < l->nin && !done; i++)
      if (l->in[i] == pfd[k].fd) {
        incoming_event(l, i);
        done = 1;
      }
  }
  if (accept_ready) accept_all(l);
  return deaths;
}

/* ---------------------------------------------------------------------------------------- */
/* Following the snapshot                                                                    */
/* ---------------------------------------------------------------------------------------- */

static void start_connect(peer_t *p, int64_t now) {
  if (p->resolved == 0) {
    /* Node addresses are normally dotted quads; a host name is resolved once per
     * registration, which may wait on the resolver. */
    struct in_addr ia;
    if (inet_pton(AF_INET, p->addr, &ia) == 1) {
      p->ip = ia.s_addr;
      p->resolved = 1;
    } else {
      p->resolved = bagua__resolve_ipv4(p->addr, &p->ip) == BAGUA_OK ? 1 : -1;
    }
  }
  if (p->resolved < 0) return;
  p->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (p->fd < 0) {
    retry_later(p, now);
    return;
  }
  struct sockaddr_in sa = {
      .sin_family = AF_INET, .sin_port = htons((uint16_t)p->port), .sin_addr.s_addr = p->ip};
  if (connect(p->fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
    p->state = PEER_HELLO;
    p->deadline_ms = now + HELLO_MS;
  } else if (errno == EINPROGRESS) {
    p->state = PEER_CONNECTING;
    p->deadline_ms = now + CONNECT_MS;
  } else {
    retry_later(p, now);
  }
}

static peer_t *find_peer(bagua__liveness_t *l, const char *id) {
  for (size_t i = 0; i < l->npeers; i++)
    if (strcmp(l->peers[i].id, id) == 0) return &l->peers[i];
  return NULL;
}

/* Points the entry at a (new) registration, dropping any connection to an older one. */
static void peer_reset(peer_t *p, const bagua__agent_node_t *n) {
  peer_close(p);
  snprintf(p->id, sizeof(p->id), "%s", n->id);
  snprintf(p->addr, sizeof(p->addr), "%s", n->addr);
  p->port = n->live_port;
  p->lease = n->lease;
  p->resolved = 0;
  p->next_try_ms = 0;
  p->backoff_ms = BACKOFF_MIN_MS;
}

void bagua__liveness_update(bagua__liveness_t *l, const bagua__agent_snap_t *s, int64_t now_ms) {
  for (size_t i = 0; i < l->npeers; i++) l->peers[i].seen = 0;
  for (size_t i = 0; i < s->nnodes; i++) {
    const bagua__agent_node_t *n = &s->nodes[i];
    if (n->live_port <= 0 || strcmp(n->id, l->self) == 0) continue;
    peer_t *p = find_peer(l, n->id);
    if (!p) {
      if (grow((void **)&l->peers, &l->peers_cap, l->npeers, sizeof(*l->peers)) != 0) continue;
      p = &l->peers[l->npeers++];
      memset(p, 0, sizeof(*p));
      p->fd = -1;
      peer_reset(p, n);
    } else if (p->lease != n->lease || p->port != n->live_port || strcmp(p->addr, n->addr) != 0) {
      peer_reset(p, n);
    }
    p->seen = 1;
  }
  for (size_t i = 0; i < l->npeers;) {
    peer_t *p = &l->peers[i];
    if (!p->seen) {
      peer_close(p);
      *p = l->peers[--l->npeers];
      continue;
    }
    if ((p->state == PEER_CONNECTING || p->state == PEER_HELLO) && now_ms >= p->deadline_ms)
      retry_later(p, now_ms); /* a stalled peer completes no hello: that is not a death */
    if (p->state == PEER_IDLE && now_ms >= p->next_try_ms) start_connect(p, now_ms);
    i++;
  }
}

const bagua__liveness_death_t *bagua__liveness_deaths(const bagua__liveness_t *l, size_t *n) {
  *n = l->ndead;
  return l->dead;
}

void bagua__liveness_clear_deaths(bagua__liveness_t *l) {
  l->ndead = 0;
}
