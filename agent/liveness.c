/*
 * The liveness channel between agents: one watched TCP connection per watched peer
 * (liveness.h).
 *
 * The handshake, one line each way after the connect (all lines end in '\n'):
 *   server: "bagua-live2 <1 with a secret, else 0> <server nonce, 32 hex>"
 *   client: "<client nonce, 32 hex> <HMAC(secret, "live-c" sn cn target-id) in hex, or ->"
 *   server: "bagua-live <node id> <lease> <HMAC(secret, "live-s" sn cn id lease) in hex, or ->"
 * so a prober that cannot prove the job secret learns nothing about the node, and the client
 * checks that the hello comes from a holder of the secret too. Inbound connections that do not
 * finish their part within HELLO_MS are closed; their number is capped well under the
 * descriptor limit, and a failing accept() pauses the listener instead of spinning on it.
 *
 * The proof of death is narrow on purpose. A connect that is refused or times out proves
 * nothing (the peer may not listen yet, or be stalled), and neither does a connection that ends
 * before the peer's hello arrived. Only the end of a connection whose hello named the very
 * registration (node id and lease) the caller names counts: then the peer's kernel closed the
 * socket, which it does when the process dies or exits.
 */
#include "liveness.h"

#include <arpa/inet.h>
#include <errno.h>
#include <sys/resource.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/auth.h"
#include "common/log.h"
#include "common/sock.h"
#include "common/time.h"

/* Bounds on a connect and on the hello that follows it. */
#define CONNECT_MS 2000
#define HELLO_MS 2000
/* Reconnect attempts back off from the first to the last delay. */
#define BACKOFF_MIN_MS 250
#define BACKOFF_MAX_MS 5000
/* Incoming connections kept at most: one per peer is expected; this only bounds a flood. The
 * cap is also at most a quarter of the descriptor limit (in_cap_for), so that a flood never
 * takes the descriptors the agent needs for its workers' pipes and its etcd connections. */
#define MAX_INCOMING 1024
#define MIN_INCOMING 16
/* A failing accept() (descriptors or memory exhausted) pauses the listener this long at first,
 * doubling up to the second bound while it keeps failing. */
#define ACCEPT_PAUSE_MIN_MS 100
#define ACCEPT_PAUSE_MAX_MS 2000
#define NONCE_BYTES 16
/* "bagua-live <node id> <lease> <64 hex>\n" always fits. */
#define HELLO_MAX (BAGUA_AGENT_ID_MAX + 112)
#define HELLO_WORD "bagua-live"
#define CHALLENGE_WORD "bagua-live2"
#define BYE_WORD "bagua-bye"

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
  int seen;       /* named by the current update */
  int challenged; /* the server's challenge was answered; the next line is its hello */
  uint8_t sn[NONCE_BYTES], cn[NONCE_BYTES];
  char buf[HELLO_MAX];
  size_t len;
} peer_t;

/* An accepted connection: waiting for the client's proof, then only watched to be closed. */
typedef struct {
  int fd;
  int up; /* the client proved the secret and got the hello */
  int64_t deadline_ms;
  uint8_t sn[NONCE_BYTES], cn[NONCE_BYTES];
  char buf[2 * NONCE_BYTES + 2 * BAGUA_SHA256_BYTES + 8];
  size_t len;
} in_t;

struct bagua__liveness {
  char self[BAGUA_AGENT_ID_MAX];
  int64_t lease;
  int lfd;
  int port;
  peer_t *peers;
  size_t npeers, peers_cap;
  in_t *in; /* accepted connections */
  size_t nin, in_cap;
  size_t in_max; /* the cap on accepted connections */
  int have_key;
  uint8_t key[BAGUA_AUTH_KEY_BYTES];
  int64_t accept_pause_until, accept_pause_ms;
  int accept_warned;
  bagua__liveness_death_t *dead;
  size_t ndead, dead_cap;
  int leaving; /* bagua__liveness_leaving: say goodbye to the watchers on destroy */
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

/* A quarter of the soft descriptor limit, within [MIN_INCOMING, MAX_INCOMING]. */
static size_t in_cap_for(void) {
  struct rlimit rl;
  size_t cap = MAX_INCOMING;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur / 4 < cap)
    cap = (size_t)(rl.rlim_cur / 4);
  return cap < MIN_INCOMING ? MIN_INCOMING : cap;
}

bagua__liveness_t *bagua__liveness_create(const char *self_id) {
  return bagua__liveness_create_on(self_id, NULL);
}

bagua__liveness_t *bagua__liveness_create_on(const char *self_id, const char *bind_addr) {
  uint32_t ip = htonl(INADDR_ANY);
  if (bind_addr && bind_addr[0]) {
    struct in_addr ia;
    if (inet_pton(AF_INET, bind_addr, &ia) == 1) {
      ip = ia.s_addr;
    } else if (bagua__resolve_ipv4(bind_addr, &ip) != BAGUA_OK) {
      errno = EADDRNOTAVAIL;
      return NULL;
    }
  }
  bagua__liveness_t *l = calloc(1, sizeof(*l));
  if (!l) return NULL;
  snprintf(l->self, sizeof(l->self), "%s", self_id);
  l->in_max = in_cap_for();
  l->lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = ip};
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
  p->challenged = 0;
}

static void live_mac(const bagua__liveness_t *l, const char *label, const uint8_t *sn,
                     const uint8_t *cn, const char *id, long long lease, char *hex);

/* Tells a watcher that this agent leaves on purpose (its lease is revoked already), so that
 * the end of the connection is not taken for a death: "bagua-bye <HMAC(secret, "live-b" sn cn
 * id lease)>", or "-" without a secret. */
static void say_bye(const bagua__liveness_t *l, const in_t *c) {
  char mac[2 * BAGUA_SHA256_BYTES + 1] = "-", line[160];
  if (l->have_key) live_mac(l, "live-b", c->sn, c->cn, l->self, (long long)l->lease, mac);
  int n = snprintf(line, sizeof(line), BYE_WORD " %s\n", mac);
  ssize_t w = send(c->fd, line, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
  (void)w;
}

void bagua__liveness_destroy(bagua__liveness_t *l) {
  if (!l) return;
  for (size_t i = 0; i < l->npeers; i++) peer_close(&l->peers[i]);
  for (size_t i = 0; i < l->nin; i++) {
    if (l->in[i].up && l->leaving) say_bye(l, &l->in[i]);
    close(l->in[i].fd);
  }
  memset(l->key, 0, sizeof(l->key));
  if (l->lfd >= 0) close(l->lfd);
  free(l->peers);
  free(l->in);
  free(l->dead);
  free(l);
}

void bagua__liveness_leaving(bagua__liveness_t *l) {
  if (l) l->leaving = 1;
}

int bagua__liveness_port(const bagua__liveness_t *l) {
  return l->port;
}

void bagua__liveness_set_lease(bagua__liveness_t *l, int64_t lease) {
  l->lease = lease;
}

int bagua__liveness_set_secret(bagua__liveness_t *l, const char *hex) {
  if (!hex || !hex[0]) {
    l->have_key = 0;
    memset(l->key, 0, sizeof(l->key));
    return 0;
  }
  if (bagua__auth_unhex(hex, l->key, sizeof(l->key)) != 0) {
    l->have_key = 0;
    memset(l->key, 0, sizeof(l->key));
    return -1;
  }
  l->have_key = 1;
  return 0;
}

size_t bagua__liveness_confirmed(const bagua__liveness_t *l) {
  size_t n = 0;
  for (size_t i = 0; i < l->npeers; i++) n += l->peers[i].state == PEER_UP;
  return n;
}

size_t bagua__liveness_incoming(const bagua__liveness_t *l, size_t *cap) {
  if (cap) *cap = l->in_max;
  return l->nin;
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
  /* While accept() is paused the listener is left out (a negative fd is ignored by poll): it
   * would stay readable and turn the caller's loop into a spin. */
  int paused = bagua__now_ms() < l->accept_pause_until;
  pfd[k++] = (struct pollfd){.fd = paused ? -1 : l->lfd, .events = POLLIN};
  for (size_t i = 0; i < l->npeers; i++) {
    const peer_t *p = &l->peers[i];
    if (p->fd < 0) continue;
    pfd[k++] =
        (struct pollfd){.fd = p->fd, .events = p->state == PEER_CONNECTING ? POLLOUT : POLLIN};
  }
  for (size_t i = 0; i < l->nin; i++)
    pfd[k++] = (struct pollfd){.fd = l->in[i].fd, .events = POLLIN};
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

/* The hex HMAC of one side (the file's header); lease < 0 leaves it out (client proof). */
static void live_mac(const bagua__liveness_t *l, const char *label, const uint8_t *sn,
                     const uint8_t *cn, const char *id, long long lease, char *hex) {
  uint8_t mac[BAGUA_SHA256_BYTES];
  bagua__hmac_t m;
  bagua__hmac_init(&m, l->key, sizeof(l->key));
  bagua__hmac_update(&m, label, strlen(label));
  bagua__hmac_update(&m, sn, NONCE_BYTES);
  bagua__hmac_update(&m, cn, NONCE_BYTES);
  bagua__hmac_update(&m, id, strlen(id));
  if (lease >= 0) {
    char num[32];
    int n = snprintf(num, sizeof(num), " %lld", lease);
    bagua__hmac_update(&m, num, (size_t)n);
  }
  bagua__hmac_final(&m, mac);
  bagua__auth_hex(mac, sizeof(mac), hex);
}

/* Whether a received hex mac equals the expected one, in constant time. */
static int mac_ok(const char *got_hex, const char *want_hex) {
  uint8_t got[BAGUA_SHA256_BYTES], want[BAGUA_SHA256_BYTES];
  if (bagua__auth_unhex(got_hex, got, sizeof(got)) != 0 ||
      bagua__auth_unhex(want_hex, want, sizeof(want)) != 0)
    return 0;
  return bagua__auth_equal(got, want, sizeof(got));
}

/* Whether the hello in p->buf names the registration the entry watches (and, with a secret,
 * carries the server's proof). */
static int hello_matches(const bagua__liveness_t *l, const peer_t *p) {
  char word[16], id[BAGUA_AGENT_ID_MAX], mac[2 * BAGUA_SHA256_BYTES + 2];
  long long lease = 0;
  if (sscanf(p->buf, "%15s %127s %lld %65s", word, id, &lease, mac) != 4) return 0;
  if (strcmp(word, HELLO_WORD) != 0 || strcmp(id, p->id) != 0 || lease != p->lease) return 0;
  if (!l->have_key) return 1;
  char want[2 * BAGUA_SHA256_BYTES + 1];
  live_mac(l, "live-s", p->sn, p->cn, p->id, lease, want);
  return mac_ok(mac, want);
}

/* Whether p->buf holds the peer's goodbye line (with a secret: with the peer's proof). */
static int bye_matches(const bagua__liveness_t *l, const peer_t *p) {
  char word[16], mac[2 * BAGUA_SHA256_BYTES + 2];
  if (!strchr(p->buf, '\n') || sscanf(p->buf, "%15s %65s", word, mac) != 2 ||
      strcmp(word, BYE_WORD) != 0)
    return 0;
  if (!l->have_key) return 1;
  char want[2 * BAGUA_SHA256_BYTES + 1];
  live_mac(l, "live-b", p->sn, p->cn, p->id, (long long)p->lease, want);
  return mac_ok(mac, want);
}

/* Answers the server's challenge in p->buf with this side's proof; returns 0 or -1. */
static int answer_challenge(const bagua__liveness_t *l, peer_t *p) {
  char word[16], sn[2 * NONCE_BYTES + 2];
  int auth = -1;
  if (sscanf(p->buf, "%15s %d %33s", word, &auth, sn) != 3 || strcmp(word, CHALLENGE_WORD) != 0 ||
      bagua__auth_unhex(sn, p->sn, NONCE_BYTES) != 0) {
    BAGUA_INFO(BAGUA_SUBSYS_AGENT, "agent: liveness port %s:%d does not speak the protocol",
               p->addr, p->port);
    return -1;
  }
  if (auth != l->have_key) {
    BAGUA_INFO(BAGUA_SUBSYS_AGENT,
               "agent: liveness peer %s at %s:%d %s and this agent %s: check that every agent "
               "of the job has the same secret",
               p->id, p->addr, p->port, auth ? "requires a job secret" : "holds no job secret",
               auth ? "holds none" : "holds one");
    return -1;
  }
  if (bagua__auth_random(p->cn, NONCE_BYTES) != BAGUA_OK) return -1;
  char cn[2 * NONCE_BYTES + 1], mac[2 * BAGUA_SHA256_BYTES + 1] = "-", line[160];
  bagua__auth_hex(p->cn, NONCE_BYTES, cn);
  if (l->have_key) live_mac(l, "live-c", p->sn, p->cn, p->id, -1, mac);
  int n = snprintf(line, sizeof(line), "%s %s\n", cn, mac);
  /* A fresh socket's send buffer always takes these few bytes; anything short is a retry. */
  if (send(p->fd, line, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT) != n) return -1;
  p->challenged = 1;
  p->len = 0;
  return 0;
}

/* Reads the peer's challenge, then its hello; returns 1 once the hello is complete and
 * matches. */
static int read_hello(bagua__liveness_t *l, peer_t *p, int64_t now) {
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
  if (!p->challenged) {
    if (answer_challenge(l, p) != 0) retry_later(p, now);
    return 0;
  }
  if (!hello_matches(l, p)) {
    /* Another registration of the node (or not an agent of this job) answers on that port. */
    BAGUA_INFO(BAGUA_SUBSYS_AGENT, "agent: liveness hello from %s:%d does not match node %s",
               p->addr, p->port, p->id);
    retry_later(p, now);
    return 0;
  }
  p->state = PEER_UP;
  p->backoff_ms = BACKOFF_MIN_MS;
  p->len = 0;
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
    read_hello(l, p, now);
    return 0;
  }
  ssize_t r = read(p->fd, p->buf + p->len, sizeof(p->buf) - 1 - p->len);
  if (r > 0) {
    p->len += (size_t)r;
    p->buf[p->len] = '\0';
    if (bye_matches(l, p)) {
      BAGUA_INFO(BAGUA_SUBSYS_AGENT, "agent: node %s left the job (liveness goodbye)", p->id);
      peer_close(p);
      p->next_try_ms = now + BACKOFF_MAX_MS;
      return 0;
    }
    /* Anything else is not a goodbye: it is read and forgotten, a full line at a time. */
    if (strchr(p->buf, '\n') || p->len + 1 >= sizeof(p->buf)) p->len = 0;
    return 0;
  }
  if (r < 0 && (errno == EAGAIN || errno == EINTR)) return 0;
  if (r < 0 && errno != ECONNRESET && errno != EPIPE) {
    /* Any other error (a timeout, an unreachable route) says nothing about the process. */
    retry_later(p, now);
    return 0;
  }
  note_death(l, p);
  /* The registration is on its way out; the next update drops or replaces the entry. */
  peer_close(p);
  p->next_try_ms = now + BACKOFF_MAX_MS;
  return 1;
}

static void in_drop(bagua__liveness_t *l, size_t i) {
  close(l->in[i].fd);
  l->in[i] = l->in[--l->nin];
}

/* Closes accepted connections that did not prove the secret in time. */
static void expire_incoming(bagua__liveness_t *l, int64_t now) {
  for (size_t i = 0; i < l->nin;) {
    if (!l->in[i].up && now >= l->in[i].deadline_ms)
      in_drop(l, i);
    else
      i++;
  }
}

/* Makes room for one more accepted connection; returns 0, or -1 when none can be made. */
static int in_room(bagua__liveness_t *l) {
  if (l->nin < l->in_max) return grow((void **)&l->in, &l->in_cap, l->nin, sizeof(*l->in));
  /* At the cap, the oldest connection that has not proved anything yet gives way: a flood of
   * silent clients then cannot lock a real peer out for longer than its own retry. */
  size_t oldest = l->nin;
  for (size_t i = 0; i < l->nin; i++)
    if (!l->in[i].up && (oldest == l->nin || l->in[i].deadline_ms < l->in[oldest].deadline_ms))
      oldest = i;
  if (oldest == l->nin) return -1;
  in_drop(l, oldest);
  return 0;
}

static void accept_all(bagua__liveness_t *l, int64_t now) {
  for (int i = 0; i < 64; i++) {
    int fd = accept4(l->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED)
        return;
      /* Descriptors or memory ran out (EMFILE, ENFILE, ENOBUFS, ENOMEM): the pending
       * connection stays in the backlog and the listener stays readable, so pause it. */
      l->accept_pause_ms = l->accept_pause_ms ? l->accept_pause_ms * 2 : ACCEPT_PAUSE_MIN_MS;
      if (l->accept_pause_ms > ACCEPT_PAUSE_MAX_MS) l->accept_pause_ms = ACCEPT_PAUSE_MAX_MS;
      l->accept_pause_until = now + l->accept_pause_ms;
      if (!l->accept_warned)
        BAGUA_WARN(
            "agent: liveness listener: accept failed (%s); pausing it for up to %d ms at a time "
            "(logged once)",
            strerror(errno), ACCEPT_PAUSE_MAX_MS);
      l->accept_warned = 1;
      return;
    }
    l->accept_pause_ms = 0;
    if (in_room(l) != 0) {
      close(fd);
      continue;
    }
    in_t *c = &l->in[l->nin];
    memset(c, 0, sizeof(*c));
    c->fd = fd;
    c->deadline_ms = now + HELLO_MS;
    char sn[2 * NONCE_BYTES + 1], line[64];
    if (bagua__auth_random(c->sn, NONCE_BYTES) != BAGUA_OK) {
      close(fd);
      continue;
    }
    bagua__auth_hex(c->sn, NONCE_BYTES, sn);
    int n = snprintf(line, sizeof(line), CHALLENGE_WORD " %d %s\n", l->have_key, sn);
    /* A fresh socket's send buffer always takes these few bytes; anything short is dropped. */
    if (send(fd, line, (size_t)n, MSG_NOSIGNAL) != n) {
      close(fd);
      continue;
    }
    l->nin++;
  }
}

/* Checks the client's proof in c->buf and sends the hello; returns 0, or -1 to drop. */
static int answer_proof(bagua__liveness_t *l, in_t *c) {
  char cnhex[2 * NONCE_BYTES + 2], mac[2 * BAGUA_SHA256_BYTES + 2];
  uint8_t cn[NONCE_BYTES];
  if (sscanf(c->buf, "%33s %65s", cnhex, mac) != 2 || bagua__auth_unhex(cnhex, cn, NONCE_BYTES))
    return -1;
  char want[2 * BAGUA_SHA256_BYTES + 1] = "-";
  if (l->have_key) {
    live_mac(l, "live-c", c->sn, cn, l->self, -1, want);
    /* A wrong proof gets no answer at all: nothing to learn from a refusal either. */
    if (!mac_ok(mac, want)) return -1;
    live_mac(l, "live-s", c->sn, cn, l->self, (long long)l->lease, want);
  }
  memcpy(c->cn, cn, NONCE_BYTES);
  char hello[HELLO_MAX];
  int n = snprintf(hello, sizeof(hello), HELLO_WORD " %s %lld %s\n", l->self, (long long)l->lease,
                   want);
  if (n <= 0 || (size_t)n >= sizeof(hello) || send(c->fd, hello, (size_t)n, MSG_NOSIGNAL) != n)
    return -1;
  c->up = 1;
  return 0;
}

/* An event on an accepted connection: the client's proof, then only its end. */
static void incoming_event(bagua__liveness_t *l, size_t i) {
  in_t *c = &l->in[i];
  if (c->up) {
    char junk[256];
    ssize_t r = read(c->fd, junk, sizeof(junk));
    if (r > 0 || (r < 0 && (errno == EAGAIN || errno == EINTR))) return;
    in_drop(l, i);
    return;
  }
  ssize_t r = read(c->fd, c->buf + c->len, sizeof(c->buf) - 1 - c->len);
  if (r < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (r <= 0) {
    in_drop(l, i);
    return;
  }
  c->len += (size_t)r;
  c->buf[c->len] = '\0';
  if (!strchr(c->buf, '\n')) {
    if (c->len + 1 >= sizeof(c->buf)) in_drop(l, i);
    return;
  }
  if (answer_proof(l, c) != 0) in_drop(l, i);
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
      if (l->in[i].fd == pfd[k].fd) {
        incoming_event(l, i);
        done = 1;
      }
  }
  if (accept_ready) accept_all(l, now);
  expire_incoming(l, now);
  return deaths;
}

/* ---------------------------------------------------------------------------------------- */
/* Following the peers to watch                                                             */
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
static void peer_reset(peer_t *p, const bagua__live_peer_t *n) {
  peer_close(p);
  snprintf(p->id, sizeof(p->id), "%s", n->id);
  snprintf(p->addr, sizeof(p->addr), "%s", n->addr);
  p->port = n->port;
  p->lease = n->lease;
  p->resolved = 0;
  p->next_try_ms = 0;
  p->backoff_ms = BACKOFF_MIN_MS;
}

void bagua__liveness_update(bagua__liveness_t *l, const bagua__live_peer_t *peers, size_t npeers,
                            int64_t now_ms) {
  expire_incoming(l, now_ms);
  for (size_t i = 0; i < l->npeers; i++) l->peers[i].seen = 0;
  for (size_t i = 0; i < npeers; i++) {
    const bagua__live_peer_t *n = &peers[i];
    if (n->port <= 0 || strcmp(n->id, l->self) == 0) continue;
    peer_t *p = find_peer(l, n->id);
    if (!p) {
      if (grow((void **)&l->peers, &l->peers_cap, l->npeers, sizeof(*l->peers)) != 0) continue;
      p = &l->peers[l->npeers++];
      memset(p, 0, sizeof(*p));
      p->fd = -1;
      peer_reset(p, n);
    } else if (p->lease != n->lease || p->port != n->port || strcmp(p->addr, n->addr) != 0) {
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
