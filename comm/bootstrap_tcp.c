/*
 * env:// bootstrap: a TCP rendezvous at MASTER_ADDR:MASTER_PORT, as torch and NCCL do, and the
 * connection handshake it shares with the data streams (bootstrap.h, "Handshake").
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap.h"
#include "common/auth.h"
#include "common/check.h"
#include "common/log.h"
#include "common/sock.h"

uint64_t bagua__hash64(const void *data, size_t len, uint64_t seed) {
  /* FNV-1a: enough to tell jobs and nodes apart; not a security boundary. */
  const unsigned char *p = data;
  uint64_t h = 1469598103934665603ULL ^ seed;
  for (size_t i = 0; i < len; i++) {
    h ^= p[i];
    h *= 1099511628211ULL;
  }
  return h;
}

uint64_t bagua__world_comm_id(uint64_t job_hash, int64_t round) {
  return bagua__hash64(&round, sizeof(round), bagua__hash64("world", 5, job_hash));
}

int bagua__wire_check(const bagua__wire_hdr_t *h, uint32_t type, uint64_t job_hash,
                      uint64_t comm_id, int size, uint32_t *reason, char *why, size_t whylen) {
  *reason = 0;
  if (h->magic != BAGUA_WIRE_MAGIC) {
    snprintf(why, whylen, "bad magic 0x%08x (not a Bagua peer)", h->magic);
    return -1; /* no reply: the other end does not speak our protocol */
  }
  if (h->version != BAGUA_WIRE_VERSION) {
    snprintf(why, whylen, "protocol version %u, expected %u", h->version, BAGUA_WIRE_VERSION);
    *reason = BAGUA_REFUSE_VERSION;
  } else if (h->type != type) {
    snprintf(why, whylen, "message type %u, expected %u", h->type, type);
    *reason = BAGUA_REFUSE_VERSION;
  } else if (h->job_hash != job_hash) {
    snprintf(why, whylen, "peer belongs to another job (BAGUA_JOB_ID differs)");
    *reason = BAGUA_REFUSE_JOB;
  } else if (h->comm_id != comm_id) {
    snprintf(why, whylen, "peer is building another communicator");
    *reason = BAGUA_REFUSE_COMM;
  } else if (h->size != size) {
    snprintf(why, whylen, "peer has world size %d, expected %d", h->size, size);
    *reason = BAGUA_REFUSE_SIZE;
  } else if (h->rank < 0 || h->rank >= size) {
    snprintf(why, whylen, "peer rank %d out of range [0, %d)", h->rank, size);
    *reason = BAGUA_REFUSE_RANK;
  } else {
    return 0;
  }
  return -1;
}

const char *bagua__refuse_text(uint32_t r) {
  switch (r) {
    case BAGUA_REFUSE_JOB:
      return "job id differs from the other ranks' (BAGUA_JOB_ID)";
    case BAGUA_REFUSE_VERSION:
      return "protocol version differs (mixed Bagua-C builds)";
    case BAGUA_REFUSE_SIZE:
      return "world size differs from the other ranks' (WORLD_SIZE)";
    case BAGUA_REFUSE_RANK:
      return "rank out of range or already taken by another process";
    case BAGUA_REFUSE_COMM:
      return "connection meant for another communicator";
    case BAGUA_REFUSE_AUTH:
      return "authentication failed: the job secret (BAGUA_JOB_SECRET) differs or is missing";
    default:
      return "unknown reason";
  }
}

/* ---------------------------------------------------------------------------------------- */
/* Proofs                                                                                    */
/* ---------------------------------------------------------------------------------------- */

/* The proof of one side: HMAC(key, label || sn || cn || header || body). */
static void proof(const uint8_t *key, const char *label, const uint8_t *sn, const uint8_t *cn,
                  const bagua__wire_hdr_t *h, const void *body, size_t blen, uint8_t *out) {
  bagua__hmac_t m;
  bagua__hmac_init(&m, key, BAGUA_AUTH_KEY_BYTES);
  bagua__hmac_update(&m, label, strlen(label));
  bagua__hmac_update(&m, sn, 32);
  bagua__hmac_update(&m, cn, 32);
  bagua__hmac_update(&m, h, sizeof(*h));
  if (blen) bagua__hmac_update(&m, body, blen);
  bagua__hmac_final(&m, out);
}

static const char CLIENT_LABEL[] = "bagua-c2";
static const char SERVER_LABEL[] = "bagua-s2";

/* A header that names nothing but the message and its argument: challenges and refusals. */
static bagua__wire_hdr_t bare_hdr(uint32_t type, uint32_t arg) {
  bagua__wire_hdr_t h = {BAGUA_WIRE_MAGIC, BAGUA_WIRE_VERSION, type, arg, 0, 0, 0, 0};
  return h;
}

/* ---------------------------------------------------------------------------------------- */
/* Server                                                                                    */
/* ---------------------------------------------------------------------------------------- */

typedef struct {
  int fd;
  int challenged; /* the challenge was sent; reading the proof and payload */
  int64_t deadline_ms;
  size_t got;
  unsigned char buf[sizeof(bagua__wire_hdr_t) + sizeof(bagua__wire_auth_t) + BAGUA_HS_PAYLOAD_MAX];
  uint8_t sn[32];
} hs_conn_t;

typedef struct {
  const bagua__hs_server_t *srv;
  int have_key;
  uint8_t key[BAGUA_AUTH_KEY_BYTES];
  hs_conn_t *conns;   /* cap of them */
  struct pollfd *pfd; /* cap + 2 */
  int n, cap;
  int dropped; /* silent or malformed connections dropped, for one summary line */
  int refused; /* refusals sent */
  int junk;    /* connections that did not speak the protocol */
} hs_state_t;

static void conn_drop(hs_state_t *S, int i) {
  close(S->conns[i].fd);
  S->conns[i] = S->conns[--S->n];
}

static void refuse(hs_state_t *S, int i, uint32_t reason, const char *why) {
  const bagua__hs_server_t *srv = S->srv;
  /* The first refusals are warnings (a misconfigured rank shows at once); a flood of them
   * from a stranger only adds INFO lines. */
  if (S->refused++ < 3)
    BAGUA_WARN("%s: refused a connection: %s", srv->what, why);
  else
    BAGUA_INFO(BAGUA_SUBSYS_INIT, "%s: refused a connection: %s", srv->what, why);
  /* The refusal carries the reason only: nothing of this job, communicator or rank. A client
   * that went away already is told nothing, which is fine. */
  bagua__wire_hdr_t nack = bare_hdr(srv->nack_type, reason);
  ssize_t sent = send(S->conns[i].fd, &nack, sizeof(nack), MSG_NOSIGNAL | MSG_DONTWAIT);
  (void)sent;
  conn_drop(S, i);
}

/* The header checks: the generic ones, then the caller's. 0 or a refusal reason. */
static uint32_t check_hdr(hs_state_t *S, const bagua__wire_hdr_t *h, char *why, size_t whylen) {
  const bagua__hs_server_t *srv = S->srv;
  uint32_t reason = 0;
  if (bagua__wire_check(h, srv->type, srv->job_hash, srv->comm_id, srv->size, &reason, why,
                        whylen) != 0)
    return reason ? reason : BAGUA_REFUSE_VERSION;
  return srv->check ? srv->check(srv->arg, h, why, whylen) : 0;
}

/* Bytes conn i waits for before its next step. */
static size_t conn_need(const hs_state_t *S, int i) {
  return sizeof(bagua__wire_hdr_t) +
         (S->conns[i].challenged ? sizeof(bagua__wire_auth_t) + S->srv->payload_len : 0);
}

/*
 * Reads what conn i sent and takes the next step. Returns BAGUA_OK (conn kept, dropped or
 * admitted; *admitted says which), or the admit callback's error.
 */
static bagua_status_t conn_step(hs_state_t *S, int i, int *admitted) {
  hs_conn_t *c = &S->conns[i];
  const bagua__hs_server_t *srv = S->srv;
  *admitted = 0;
  size_t need = conn_need(S, i);
  ssize_t r = recv(c->fd, c->buf + c->got, need - c->got, 0);
  if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return BAGUA_OK;
  if (r <= 0) {
    S->dropped++;
    conn_drop(S, i);
    return BAGUA_OK;
  }
  c->got += (size_t)r;
  if (c->got < need) return BAGUA_OK;
  bagua__wire_hdr_t h;
  memcpy(&h, c->buf, sizeof(h));
  char why[160];
  if (h.magic != BAGUA_WIRE_MAGIC) {
    /* No reply: the other end does not speak our protocol. As with refusals, the first ones
     * are warnings and a flood of them (a port scanner) adds INFO lines only. */
    if (S->junk++ < 3)
      BAGUA_WARN("%s: dropped a connection with bad magic 0x%08x (not a Bagua peer)", srv->what,
                 h.magic);
    else
      BAGUA_INFO(BAGUA_SUBSYS_INIT, "%s: dropped a connection with bad magic 0x%08x", srv->what,
                 h.magic);
    conn_drop(S, i);
    return BAGUA_OK;
  }
  if (!c->challenged) {
    /* Without a secret the header is all there is to check, so refuse early with the reason;
     * with one, nothing is said about the header before the client proved the secret. */
    uint32_t reason = S->have_key ? 0 : check_hdr(S, &h, why, sizeof(why));
    if (reason) {
      refuse(S, i, reason, why);
      return BAGUA_OK;
    }
    struct {
      bagua__wire_hdr_t h;
      uint8_t nonce[32];
    } ch = {bare_hdr(BAGUA_MSG_CHALLENGE, (uint32_t)S->have_key), {0}};
    memcpy(ch.nonce, c->sn, sizeof(c->sn));
    /* A fresh socket's send buffer always takes these bytes; a short send drops the client. */
    if (send(c->fd, &ch, sizeof(ch), MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)sizeof(ch)) {
      S->dropped++;
      conn_drop(S, i);
      return BAGUA_OK;
    }
    c->challenged = 1;
    return BAGUA_OK;
  }
  bagua__wire_auth_t a;
  memcpy(&a, c->buf + sizeof(h), sizeof(a));
  const unsigned char *payload = c->buf + sizeof(h) + sizeof(a);
  if (S->have_key) {
    uint8_t want[32];
    proof(S->key, CLIENT_LABEL, c->sn, a.nonce, &h, payload, srv->payload_len, want);
    if (!bagua__auth_equal(want, a.mac, sizeof(want))) {
      refuse(S, i, BAGUA_REFUSE_AUTH, "no valid proof of the job secret (BAGUA_JOB_SECRET)");
      return BAGUA_OK;
    }
  }
  /* Checked again without a secret too: another connection may have taken the slot since. */
  uint32_t reason = check_hdr(S, &h, why, sizeof(why));
  if (reason) {
    refuse(S, i, reason, why);
    return BAGUA_OK;
  }
  bagua__hs_peer_t peer = {.fd = c->fd, .hdr = h, .payload = payload};
  memcpy(peer.sn, c->sn, 32);
  memcpy(peer.cn, a.nonce, 32);
  bagua_status_t st = srv->admit(srv->arg, &peer);
  /* The callback owns the descriptor now, whatever it returned. */
  S->conns[i] = S->conns[--S->n];
  *admitted = 1;
  return st;
}

/*
 * Accepts what the backlog holds, making room by evicting the oldest pending connection that
 * has not been challenged yet (else the oldest): a flood of silent clients then costs the real
 * ones at most a retry, never the deadline. Returns -1 when accept failed for lack of
 * descriptors or memory (the caller backs off).
 */
static int accept_ready(hs_state_t *S, int lfd, int64_t now) {
  for (int k = 0; k < 64; k++) {
    int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED)
        return 0;
      BAGUA_INFO(BAGUA_SUBSYS_INIT, "%s: accept failed: %s", S->srv->what, strerror(errno));
      return -1;
    }
    if (S->n == S->cap) {
      int oldest = -1;
      for (int pass = 0; pass < 2 && oldest < 0; pass++)
        for (int i = 0; i < S->n; i++)
          if ((pass || !S->conns[i].challenged) &&
              (oldest < 0 || S->conns[i].deadline_ms < S->conns[oldest].deadline_ms))
            oldest = i;
      S->dropped++;
      conn_drop(S, oldest);
    }
    hs_conn_t *c = &S->conns[S->n];
    memset(c, 0, sizeof(*c));
    c->fd = fd;
    c->deadline_ms = now + BAGUA_HS_CONN_MS;
    if (S->srv->expected >= 0 && c->deadline_ms > S->srv->deadline_ms)
      c->deadline_ms = S->srv->deadline_ms;
    if (bagua__auth_random(c->sn, sizeof(c->sn)) != BAGUA_OK) {
      close(fd);
      return -1;
    }
    bagua__sock_tune(fd);
    S->n++;
  }
  return 0;
}

/* How long the serve loop may sleep in poll: until the earliest pending deadline, and in
 * slices of at most 50 ms when it must watch an abort flag or its own deadline (a server that
 * serves for a communicator's life sleeps until something happens). */
static int poll_wait_ms(const hs_state_t *S, int64_t now) {
  const bagua__hs_server_t *srv = S->srv;
  int64_t until = srv->expected >= 0 ? srv->deadline_ms : INT64_MAX;
  for (int i = 0; i < S->n; i++)
    if (S->conns[i].deadline_ms < until) until = S->conns[i].deadline_ms;
  if (srv->expected >= 0 || srv->abort_flag) {
    if (until > now + 50) until = now + 50;
  }
  if (until == INT64_MAX) return -1;
  return until <= now ? 0 : (int)(until - now);
}

bagua_status_t bagua__hs_serve(int lfd, const bagua__hs_server_t *srv) {
  bagua_status_t st = BAGUA_OK;
  int forever = srv->expected < 0;
  hs_state_t *S = calloc(1, sizeof(*S));
  if (!S) return BAGUA_ERR_NO_MEMORY;
  S->srv = srv;
  S->cap = srv->max_pending > BAGUA_HS_MIN_PENDING ? srv->max_pending : BAGUA_HS_MIN_PENDING;
  S->conns = calloc((size_t)S->cap, sizeof(*S->conns));
  S->pfd = calloc((size_t)S->cap + 2, sizeof(*S->pfd));
  if (!S->conns || !S->pfd) {
    st = BAGUA_ERR_NO_MEMORY;
    goto done;
  }
  BAGUA_CHECK_GOTO(bagua__auth_job_key(S->key, &S->have_key), st, done);
  int have = 0;
  int64_t accept_pause_until = 0;
  struct pollfd *pfd = S->pfd;
  while (forever || have < srv->expected) {
    if (bagua__flag_get(srv->abort_flag)) {
      st = BAGUA_ERR_ABORTED;
      goto done;
    }
    int64_t now = bagua__now_ms();
    if (!forever && now >= srv->deadline_ms) {
      BAGUA_WARN(
          "%s: only %d of %d expected connections completed their handshake before the "
          "connect timeout (BAGUA_CONNECT_TIMEOUT_MS)",
          srv->what, have, srv->expected);
      st = BAGUA_ERR_TIMEOUT;
      goto done;
    }
    for (int i = 0; i < S->n;) {
      if (now >= S->conns[i].deadline_ms) {
        S->dropped++;
        conn_drop(S, i);
      } else {
        i++;
      }
    }
    /* The listener is left out while accept is backing off (descriptors exhausted): it would
     * stay readable and turn this loop into a spin. */
    int np = 0, listening = now >= accept_pause_until, waking = forever && srv->wake_fd >= 0;
    if (listening) pfd[np++] = (struct pollfd){.fd = lfd, .events = POLLIN};
    int first_conn = np;
    for (int i = 0; i < S->n; i++)
      pfd[np++] = (struct pollfd){.fd = S->conns[i].fd, .events = POLLIN};
    if (waking) pfd[np++] = (struct pollfd){.fd = srv->wake_fd, .events = POLLIN};
    int wait = poll_wait_ms(S, now);
    if (!listening && (wait < 0 || wait > 100)) wait = 100; /* accept's back-off ends */
    int rc = poll(pfd, (nfds_t)np, wait);
    if (rc < 0 && errno != EINTR) {
      BAGUA_WARN("%s: poll failed: %s", srv->what, strerror(errno));
      st = BAGUA_ERR_SYSTEM;
      goto done;
    }
    if (rc <= 0) continue;
    if (waking && pfd[np - 1].revents) {
      st = BAGUA_ERR_ABORTED; /* asked to stop */
      goto done;
    }
    /* Serve the pending connections by descriptor (the array shifts as they are dropped). */
    int nconn = np - first_conn - waking;
    for (int k = first_conn; k < first_conn + nconn && (forever || have < srv->expected); k++) {
      if (!pfd[k].revents) continue;
      for (int i = 0; i < S->n; i++) {
        if (S->conns[i].fd != pfd[k].fd) continue;
        int admitted = 0;
        BAGUA_CHECK_GOTO(conn_step(S, i, &admitted), st, done);
        have += admitted;
        break;
      }
    }
    if (listening && (pfd[0].revents & POLLIN) && (forever || have < srv->expected) &&
        accept_ready(S, lfd, bagua__now_ms()) != 0)
      accept_pause_until = bagua__now_ms() + 100;
  }
done:
  if (S->dropped)
    BAGUA_INFO(BAGUA_SUBSYS_INIT,
               "%s: dropped %d connection(s) that sent no complete handshake in time", srv->what,
               S->dropped);
  while (S->n > 0) conn_drop(S, S->n - 1);
  memset(S->key, 0, sizeof(S->key));
  free(S->conns);
  free(S->pfd);
  free(S);
  return st;
}

bagua_status_t bagua__hs_reply(const bagua__hs_peer_t *peer, const bagua__wire_hdr_t *h,
                               const void *body, size_t blen, int64_t deadline_ms,
                               const volatile int *abort_flag) {
  uint8_t key[BAGUA_AUTH_KEY_BYTES];
  int have_key = 0;
  BAGUA_CHECK(bagua__auth_job_key(key, &have_key));
  struct {
    bagua__wire_hdr_t h;
    bagua__wire_auth_t a;
  } msg = {*h, {{0}, {0}}};
  if (have_key) proof(key, SERVER_LABEL, peer->sn, peer->cn, h, body, blen, msg.a.mac);
  memset(key, 0, sizeof(key));
  BAGUA_CHECK(bagua__send_all(peer->fd, &msg, sizeof(msg), deadline_ms, abort_flag));
  if (blen) BAGUA_CHECK(bagua__send_all(peer->fd, body, blen, deadline_ms, abort_flag));
  return BAGUA_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* Client                                                                                    */
/* ---------------------------------------------------------------------------------------- */

static int is_refusal(const bagua__wire_hdr_t *h) {
  return h->magic == BAGUA_WIRE_MAGIC &&
         (h->type == BAGUA_MSG_BOOT_NACK || h->type == BAGUA_MSG_REFUSE);
}

bagua_status_t bagua__hs_hello(int fd, const bagua__wire_hdr_t *h, const void *payload, size_t plen,
                               int64_t deadline_ms, const volatile int *abort_flag,
                               bagua__hs_client_t *cs, uint32_t *refused) {
  bagua_status_t st = BAGUA_OK;
  uint8_t key[BAGUA_AUTH_KEY_BYTES];
  int have_key = 0;
  *refused = 0;
  BAGUA_CHECK(bagua__auth_job_key(key, &have_key));
  BAGUA_CHECK_GOTO(bagua__send_all(fd, h, sizeof(*h), deadline_ms, abort_flag), st, done);
  struct {
    bagua__wire_hdr_t h;
    uint8_t nonce[32];
  } ch;
  BAGUA_CHECK_GOTO(bagua__recv_all(fd, &ch.h, sizeof(ch.h), deadline_ms, abort_flag), st, done);
  if (is_refusal(&ch.h)) {
    *refused = ch.h.arg;
    st = BAGUA_ERR_PROTOCOL;
    goto done;
  }
  if (ch.h.magic != BAGUA_WIRE_MAGIC || ch.h.type != BAGUA_MSG_CHALLENGE) {
    BAGUA_WARN("handshake: the peer answered with message type %u, not a challenge", ch.h.type);
    st = BAGUA_ERR_PROTOCOL;
    goto done;
  }
  BAGUA_CHECK_GOTO(bagua__recv_all(fd, ch.nonce, sizeof(ch.nonce), deadline_ms, abort_flag), st,
                   done);
  if (ch.h.arg && !have_key) {
    BAGUA_WARN(
        "handshake: the peer requires a job secret and this process has none: set the job's "
        "BAGUA_JOB_SECRET (bagua-agent passes it to its workers)");
    st = BAGUA_ERR_PROTOCOL;
    goto done;
  }
  if (!ch.h.arg && have_key) {
    BAGUA_WARN(
        "handshake: the peer holds no job secret, and this process (BAGUA_JOB_SECRET set) does "
        "not talk to unauthenticated peers: give every rank the same BAGUA_JOB_SECRET");
    st = BAGUA_ERR_PROTOCOL;
    goto done;
  }
  memcpy(cs->sn, ch.nonce, 32);
  BAGUA_CHECK_GOTO(bagua__auth_random(cs->cn, sizeof(cs->cn)), st, done);
  unsigned char msg[sizeof(bagua__wire_auth_t) + BAGUA_HS_PAYLOAD_MAX];
  bagua__wire_auth_t a = {{0}, {0}};
  memcpy(a.nonce, cs->cn, 32);
  if (have_key) proof(key, CLIENT_LABEL, cs->sn, cs->cn, h, payload, plen, a.mac);
  memcpy(msg, &a, sizeof(a));
  if (plen) memcpy(msg + sizeof(a), payload, plen);
  BAGUA_CHECK_GOTO(bagua__send_all(fd, msg, sizeof(a) + plen, deadline_ms, abort_flag), st, done);
done:
  memset(key, 0, sizeof(key));
  return st;
}

bagua_status_t bagua__hs_finish(int fd, const bagua__hs_client_t *cs, uint32_t want_type,
                                bagua__wire_hdr_t *reply, void *body, size_t blen,
                                int64_t deadline_ms, const volatile int *abort_flag,
                                uint32_t *refused) {
  *refused = 0;
  BAGUA_CHECK(bagua__recv_all(fd, reply, sizeof(*reply), deadline_ms, abort_flag));
  if (is_refusal(reply)) {
    *refused = reply->arg;
    return BAGUA_ERR_PROTOCOL;
  }
  if (reply->magic != BAGUA_WIRE_MAGIC || reply->type != want_type) {
    BAGUA_WARN("handshake: unexpected reply type %u (expected %u)", reply->type, want_type);
    return BAGUA_ERR_PROTOCOL;
  }
  bagua__wire_auth_t a;
  BAGUA_CHECK(bagua__recv_all(fd, &a, sizeof(a), deadline_ms, abort_flag));
  if (blen) BAGUA_CHECK(bagua__recv_all(fd, body, blen, deadline_ms, abort_flag));
  uint8_t key[BAGUA_AUTH_KEY_BYTES];
  int have_key = 0;
  BAGUA_CHECK(bagua__auth_job_key(key, &have_key));
  if (!have_key) return BAGUA_OK;
  uint8_t want[32];
  proof(key, SERVER_LABEL, cs->sn, cs->cn, reply, body, blen, want);
  memset(key, 0, sizeof(key));
  if (!bagua__auth_equal(want, a.mac, sizeof(want))) {
    BAGUA_WARN("handshake: the peer's reply carries no valid proof of the job secret");
    return BAGUA_ERR_PROTOCOL;
  }
  return BAGUA_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* The env:// bootstrap                                                                      */
/* ---------------------------------------------------------------------------------------- */

static bagua__wire_hdr_t make_hdr(const bagua__boot_ctx_t *ctx, uint32_t type, uint32_t arg) {
  bagua__wire_hdr_t h = {BAGUA_WIRE_MAGIC, BAGUA_WIRE_VERSION, type,      arg,
                         ctx->job_hash,    ctx->comm_id,       ctx->rank, ctx->size};
  return h;
}

typedef struct {
  const bagua__boot_ctx_t *ctx;
  bagua__endpoint_t *all;
  bagua__hs_peer_t *peers; /* per rank; fd -1 until registered */
} root_t;

static uint32_t root_check(void *arg, const bagua__wire_hdr_t *h, char *why, size_t whylen) {
  root_t *R = arg;
  if (h->rank == 0 || R->peers[h->rank].fd >= 0) {
    snprintf(why, whylen, "rank %d registered twice", h->rank);
    return BAGUA_REFUSE_RANK;
  }
  return 0;
}

static bagua_status_t root_admit(void *arg, const bagua__hs_peer_t *peer) {
  root_t *R = arg;
  int r = peer->hdr.rank;
  memcpy(&R->all[r], peer->payload, sizeof(R->all[r]));
  R->peers[r] = *peer;
  R->peers[r].payload = NULL;
  BAGUA_INFO(BAGUA_SUBSYS_INIT, "bootstrap: rank %d registered", r);
  return BAGUA_OK;
}

bagua_status_t bagua__bootstrap_tcp_root(int lfd, const bagua__boot_ctx_t *ctx,
                                         bagua__endpoint_t *mine, bagua__endpoint_t *all) {
  bagua_status_t st = BAGUA_OK;
  root_t R = {ctx, all, NULL};
  R.peers = calloc((size_t)ctx->size, sizeof(*R.peers));
  if (!R.peers) {
    st = BAGUA_ERR_NO_MEMORY;
    goto done;
  }
  for (int i = 0; i < ctx->size; i++) R.peers[i].fd = -1;
  all[0] = *mine;
  bagua__hs_server_t srv = {.type = BAGUA_MSG_BOOT_HELLO,
                            .nack_type = BAGUA_MSG_BOOT_NACK,
                            .job_hash = ctx->job_hash,
                            .comm_id = ctx->comm_id,
                            .size = ctx->size,
                            .payload_len = sizeof(bagua__endpoint_t),
                            .expected = ctx->size - 1,
                            /* Every rank may connect at once: none of them is evicted. */
                            .max_pending = ctx->size,
                            .deadline_ms = ctx->deadline_ms,
                            .abort_flag = ctx->abort_flag,
                            .what = "bootstrap",
                            .check = root_check,
                            .admit = root_admit,
                            .arg = &R};
  BAGUA_CHECK_GOTO(bagua__hs_serve(lfd, &srv), st, done);
  for (int r = 1; r < ctx->size; r++) {
    bagua__wire_hdr_t h = make_hdr(ctx, BAGUA_MSG_BOOT_TABLE, 0);
    BAGUA_CHECK_GOTO(bagua__hs_reply(&R.peers[r], &h, all, sizeof(*all) * (size_t)ctx->size,
                                     ctx->deadline_ms, ctx->abort_flag),
                     st, done);
  }
done:
  if (R.peers)
    for (int i = 0; i < ctx->size; i++)
      if (R.peers[i].fd >= 0) close(R.peers[i].fd);
  free(R.peers);
  close(lfd);
  return st;
}

static bagua_status_t root_run(const bagua__boot_tcp_t *cfg, const bagua__boot_ctx_t *ctx,
                               bagua__endpoint_t *mine, bagua__endpoint_t *all) {
  int lfd = -1;
  if (mine->addr == 0) mine->addr = cfg->master_addr;
  BAGUA_CHECK(bagua__listen(cfg->master_addr, cfg->master_port, &lfd, NULL));
  return bagua__bootstrap_tcp_root(lfd, ctx, mine, all);
}

/* One attempt of a rank's registration with the root: connect, hello, the table back. */
static bagua_status_t client_once(const bagua__boot_tcp_t *cfg, const bagua__boot_ctx_t *ctx,
                                  bagua__endpoint_t *mine, bagua__endpoint_t *all,
                                  bagua__wire_hdr_t *reply, uint32_t *refused) {
  int fd = -1;
  BAGUA_CHECK(
      bagua__connect(cfg->master_addr, cfg->master_port, ctx->deadline_ms, ctx->abort_flag, &fd));
  if (mine->addr == 0) mine->addr = bagua__sock_local_addr(fd);
  bagua__wire_hdr_t h = make_hdr(ctx, BAGUA_MSG_BOOT_HELLO, 0);
  bagua__hs_client_t cs;
  bagua_status_t st =
      bagua__hs_hello(fd, &h, mine, sizeof(*mine), ctx->deadline_ms, ctx->abort_flag, &cs, refused);
  if (st == BAGUA_OK)
    st = bagua__hs_finish(fd, &cs, BAGUA_MSG_BOOT_TABLE, reply, all,
                          sizeof(*all) * (size_t)ctx->size, ctx->deadline_ms, ctx->abort_flag,
                          refused);
  close(fd);
  return st;
}

bagua_status_t bagua__bootstrap_tcp(void *arg, const bagua__boot_ctx_t *ctx,
                                    bagua__endpoint_t *mine, bagua__endpoint_t *all) {
  const bagua__boot_tcp_t *cfg = arg;
  bagua_status_t st = BAGUA_OK;
  if (ctx->size == 1) {
    all[0] = *mine;
    return BAGUA_OK;
  }
  if (ctx->rank == 0) return root_run(cfg, ctx, mine, all);
  char ip[32];
  bagua__ipv4_str(cfg->master_addr, ip, sizeof(ip));
  bagua__wire_hdr_t reply;
  uint32_t refused = 0;
  /* A connection the root dropped before the handshake (its pending connections were full, or
   * this one was slower than BAGUA_HS_CONN_MS) is only a retry: the root drops no rank that
   * keeps trying, and stops at its own deadline. */
  int delay_ms = 10, tries = 0;
  for (;;) {
    st = client_once(cfg, ctx, mine, all, &reply, &refused);
    tries++;
    if (st != BAGUA_ERR_REMOTE || refused || bagua__flag_get(ctx->abort_flag) ||
        bagua__now_ms() + delay_ms >= ctx->deadline_ms)
      break;
    BAGUA_INFO(BAGUA_SUBSYS_INIT, "bootstrap: rank 0 at %s:%u closed the connection; retrying", ip,
               (unsigned)cfg->master_port);
    struct timespec ts = {0, (long)delay_ms * 1000000L};
    nanosleep(&ts, NULL);
    if (delay_ms < 200) delay_ms *= 2;
  }
  if (refused) {
    BAGUA_WARN("bootstrap: rank 0 at %s:%u refused rank %d: %s", ip, (unsigned)cfg->master_port,
               ctx->rank, bagua__refuse_text(refused));
  } else if (st == BAGUA_ERR_TIMEOUT || st == BAGUA_ERR_REMOTE) {
    BAGUA_WARN("bootstrap: no answer from rank 0 at %s:%u (%s, %d attempt(s))", ip,
               (unsigned)cfg->master_port, bagua_strerror(st), tries);
  } else if (st == BAGUA_OK && reply.size != ctx->size) {
    BAGUA_WARN("bootstrap: rank 0 answered with world size %d, expected %d", reply.size, ctx->size);
    st = BAGUA_ERR_PROTOCOL;
  }
  return st;
}
