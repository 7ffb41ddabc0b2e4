/*
 * The liveness channel between agents (docs/agent.md, "Liveness channel").
 *
 * Every agent listens on a TCP port it advertises in its node record ("live_port") and keeps
 * one connection to each peer its caller names: the few members that follow it on the round's
 * ring (ring.h), so that an agent holds O(1) connections at any job size and every member is
 * watched by as many predecessors. The accepting side sends a challenge
 * (a nonce); the connecting side answers with a proof of the job secret (HMAC, common/auth.h)
 * naming the node it means to reach, and only then does the accepting side send one hello line
 * naming its node id and lease, with its own proof; nothing else is ever sent. Without a secret
 * (bagua__liveness_set_secret not called) the proofs are "-" and the channel is
 * unauthenticated: any prober that answers the challenge learns the node id (docs/security.md).
 * Accepted connections are capped at a quarter of the descriptor limit (at most 1024), those
 * that do not prove the secret within 2 s are closed, and a failing accept() pauses the
 * listener (logged once) instead of leaving it readable in the caller's poll. When an established,
 * hello-confirmed outgoing connection ends (EOF or reset), the peer's process has closed its
 * sockets: it died or exited, and the caller may revoke its lease at once instead of waiting for
 * the lease to expire, unless the peer said goodbye first (it left on purpose: it revoked its own
 * lease, then sent an authenticated goodbye line). A stalled peer keeps its connections open, and
 * a host that vanishes without a FIN or RST sends nothing: both are left to the lease.
 *
 * Nothing here blocks: connects are non-blocking with a bound, reconnects are rate-limited, and
 * all I/O happens when poll() says a descriptor is ready. The object is used by one thread.
 */
#ifndef BAGUA_AGENT_LIVENESS_H
#define BAGUA_AGENT_LIVENESS_H

#include <poll.h>
#include <stddef.h>
#include <stdint.h>

#include "schema.h"

typedef struct bagua__liveness bagua__liveness_t;

/* A peer to watch: one registration of another node. */
typedef struct {
  char id[BAGUA_AGENT_ID_MAX];
  char addr[256];
  int port; /* its liveness port */
  int64_t lease;
} bagua__live_peer_t;

/* A node whose confirmed liveness connection ended, and the lease its hello named. */
typedef struct {
  char id[BAGUA_AGENT_ID_MAX];
  int64_t lease;
} bagua__liveness_death_t;

/* Listens on a free port of every local address. Returns NULL (errno set) on failure. Kept for
 * callers that know no address; bagua__liveness_create_on is preferred. */
bagua__liveness_t *bagua__liveness_create(const char *self_id);
/* Listens on a free port of bind_addr (a dotted quad or a resolvable name: the node's
 * advertised address); NULL or "" means every local address. NULL (errno set) on failure. */
bagua__liveness_t *bagua__liveness_create_on(const char *self_id, const char *bind_addr);
/* The job secret (64 hex digits, as BAGUA_JOB_SECRET) that both ends of every liveness
 * connection must prove from now on; NULL or "" turns authentication off. Returns 0, or -1
 * (authentication off) when hex is not 64 hex digits. Set it before the first poll. */
int bagua__liveness_set_secret(bagua__liveness_t *l, const char *hex);
/* Outgoing connections whose hello was confirmed (for tests and diagnostics). */
size_t bagua__liveness_confirmed(const bagua__liveness_t *l);
/* Accepted connections held now, and the cap on them (for tests and diagnostics). */
size_t bagua__liveness_incoming(const bagua__liveness_t *l, size_t *cap);
void bagua__liveness_destroy(bagua__liveness_t *l);
/* This agent leaves the job on purpose (its lease is revoked already): destroy then sends each
 * watcher a goodbye proved with the secret, and they do not take the end for a death. */
void bagua__liveness_leaving(bagua__liveness_t *l);
/* The port to advertise in the node record. */
int bagua__liveness_port(const bagua__liveness_t *l);
/* The lease named in hellos sent from now on (0 while unregistered). */
void bagua__liveness_set_lease(bagua__liveness_t *l, int64_t lease);

/* How many descriptors bagua__liveness_fill writes. */
size_t bagua__liveness_nfds(const bagua__liveness_t *l);
/* Writes the descriptors to poll and their events into pfd[0 .. nfds-1]. */
void bagua__liveness_fill(const bagua__liveness_t *l, struct pollfd *pfd);
/*
 * Acts on the revents poll() set in the array bagua__liveness_fill wrote (the object must not
 * have changed in between): accepts, completes connects, reads hellos, notices ends. Returns
 * the number of nodes found dead by this call; they are queued for bagua__liveness_deaths.
 */
int bagua__liveness_handle(bagua__liveness_t *l, const struct pollfd *pfd, size_t n);

/*
 * Brings the outgoing connections in line with the `n` peers to watch: connects to those that
 * advertise a port (rate-limited), drops connections to peers no longer named or named with
 * another registration, and gives up on connects and hellos that take too long. `now_ms` is
 * monotonic.
 */
void bagua__liveness_update(bagua__liveness_t *l, const bagua__live_peer_t *peers, size_t n,
                            int64_t now_ms);

/* The queued deaths (valid until the next call on the object), and their removal. */
const bagua__liveness_death_t *bagua__liveness_deaths(const bagua__liveness_t *l, size_t *n);
void bagua__liveness_clear_deaths(bagua__liveness_t *l);

#endif
