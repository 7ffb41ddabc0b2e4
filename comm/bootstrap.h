/*
 * Bootstraps: how the ranks of a new communicator learn each other's endpoints. A bootstrap
 * is an allgather of one bagua__endpoint_t per rank. env:// (this file's implementation) uses
 * a TCP rendezvous at MASTER_ADDR:MASTER_PORT; split uses the parent communicator; the etcd
 * bootstrap (bagua-agent) plugs in through the same function type.
 */
#ifndef BAGUA_COMM_BOOTSTRAP_H
#define BAGUA_COMM_BOOTSTRAP_H

#include "bagua/error.h"
#include "wire.h"

typedef struct {
  int rank, size;
  uint64_t job_hash, comm_id;
  int64_t deadline_ms;
  const volatile int *abort_flag;
} bagua__boot_ctx_t;

typedef bagua_status_t (*bagua__bootstrap_fn)(void *arg, const bagua__boot_ctx_t *ctx,
                                              bagua__endpoint_t *mine, bagua__endpoint_t *all);

/*
 * TCP rendezvous: rank 0 listens on master_addr:master_port, collects every rank's record
 * and sends the table back, through the handshake below (authenticated when a job secret is
 * set). Connections with a wrong magic, version, job, size, proof or a duplicate rank are
 * refused with a reason that reveals nothing of the job, and do not disturb the rendezvous;
 * silent ones are dropped after BAGUA_HS_CONN_MS without delaying the others. A record whose
 * addr is 0 gets the local address of the connection to the root (rank 0: the master address).
 */
typedef struct {
  uint32_t master_addr;
  uint16_t master_port;
} bagua__boot_tcp_t;

bagua_status_t bagua__bootstrap_tcp(void *arg, const bagua__boot_ctx_t *ctx,
                                    bagua__endpoint_t *mine, bagua__endpoint_t *all);
/* Rank 0's side on a listener the caller made (closed here, whatever the outcome); mine->addr
 * must be set. */
bagua_status_t bagua__bootstrap_tcp_root(int lfd, const bagua__boot_ctx_t *ctx,
                                         bagua__endpoint_t *mine, bagua__endpoint_t *all);

/* etcd bootstrap (bagua-agent rounds): rank 0 publishes its TCP bootstrap listener under
 * /bagua/<job>/rounds/<round>/bootstrap/0; the others read it and register there. */
typedef struct {
  const char *endpoint; /* etcd endpoint(s), "HOST:PORT[,HOST:PORT]" */
  const char *job_id;
  int64_t round;
  int etcd_timeout_ms;
} bagua__boot_etcd_t;

bagua_status_t bagua__bootstrap_etcd(void *arg, const bagua__boot_ctx_t *ctx,
                                     bagua__endpoint_t *mine, bagua__endpoint_t *all);

/*
 * Handshake (wire version 2), used by the TCP bootstrap and the data streams alike:
 *
 *   client -> server  header (job hash, communicator id, rank, size, type, stream index)
 *   server -> client  CHALLENGE header (nothing about the server's job) + 32-byte nonce,
 *                     or a NACK/REFUSE whose `arg` is the reason and whose other fields are 0
 *   client -> server  bagua__wire_auth_t (client nonce, proof) + payload (an endpoint record)
 *   server -> client  reply header + bagua__wire_auth_t (server proof) + body, or NACK/REFUSE
 *
 * With a job secret (BAGUA_JOB_SECRET, common/auth.h) the server checks the proof before it
 * looks at the header, so a client without the secret learns only "authentication failed",
 * and the client checks the server's proof (mutual). Without a secret the header is checked
 * at once and the proofs are zeros: the channel is unauthenticated (docs/security.md). A
 * secret on one side only fails on both with a message naming BAGUA_JOB_SECRET.
 *
 * The server side (bagua__hs_serve) serves every pending connection at once with poll(), each
 * under its own deadline (BAGUA_HS_CONN_MS), so silent or slow clients delay nobody. It runs on
 * the caller's thread and returns once `expected` connections were admitted, or at the
 * deadline, or when the abort flag is set; or, with `expected` < 0 and a `wake_fd`, it serves
 * until that descriptor becomes readable (a thread that accepts for a communicator's whole
 * life, comm/tcp/links.c), sleeping in poll while nothing is pending.
 *
 * Pending connections are capped (`max_pending`, at least BAGUA_HS_MIN_PENDING): beyond it the
 * oldest one that has not been challenged yet gives way (a flood of silent clients then costs
 * real ones at most a retry, which every client makes), and a client that is dropped reconnects
 * until its deadline.
 */
#define BAGUA_HS_CONN_MS 5000
#define BAGUA_HS_PAYLOAD_MAX 64
#define BAGUA_HS_MIN_PENDING 128

/* An admitted connection, handed to the server's admit callback. */
typedef struct {
  int fd; /* owned by the callback from then on */
  bagua__wire_hdr_t hdr;
  const void *payload; /* payload_len bytes, valid during the callback */
  uint8_t sn[32], cn[32];
} bagua__hs_peer_t;

typedef struct {
  uint32_t type;      /* the client message expected (BOOT_HELLO, CONNECT) */
  uint32_t nack_type; /* the refusal message sent back (BOOT_NACK, REFUSE) */
  uint64_t job_hash, comm_id;
  int size;
  size_t payload_len;  /* <= BAGUA_HS_PAYLOAD_MAX */
  int expected;        /* admitted connections to wait for; < 0: serve until wake_fd */
  int max_pending;     /* connections served at once (below BAGUA_HS_MIN_PENDING: that) */
  int wake_fd;         /* readable: stop (BAGUA_ERR_ABORTED); -1 (or 0 with expected >= 0): none */
  int64_t deadline_ms; /* ignored with expected < 0 */
  const volatile int *abort_flag;
  const char *what; /* for log lines: "bootstrap", "peer connection" */
  /* Extra rule after bagua__wire_check (slot free, stream index in range): 0 admits, else a
   * refusal reason with a sentence in why. */
  uint32_t (*check)(void *arg, const bagua__wire_hdr_t *h, char *why, size_t whylen);
  /* Takes an admitted connection; an error status ends the serve with that status. */
  bagua_status_t (*admit)(void *arg, const bagua__hs_peer_t *peer);
  void *arg;
} bagua__hs_server_t;

bagua_status_t bagua__hs_serve(int lfd, const bagua__hs_server_t *srv);
/* Server: sends the reply header, the server proof and body to an admitted peer. */
bagua_status_t bagua__hs_reply(const bagua__hs_peer_t *peer, const bagua__wire_hdr_t *h,
                               const void *body, size_t blen, int64_t deadline_ms,
                               const volatile int *abort_flag);

/* Client state between the hello and the reply. */
typedef struct {
  uint8_t sn[32], cn[32];
} bagua__hs_client_t;

/*
 * Client: sends the header, answers the challenge with the proof and the payload. A refusal
 * returns BAGUA_ERR_PROTOCOL with its reason in *refused (0 for a local failure, e.g. a secret
 * on one side only, which is logged here).
 */
bagua_status_t bagua__hs_hello(int fd, const bagua__wire_hdr_t *h, const void *payload, size_t plen,
                               int64_t deadline_ms, const volatile int *abort_flag,
                               bagua__hs_client_t *cs, uint32_t *refused);
/* Client: receives the reply of type want_type with blen bytes of body and checks the server's
 * proof; refusals as for bagua__hs_hello. */
bagua_status_t bagua__hs_finish(int fd, const bagua__hs_client_t *cs, uint32_t want_type,
                                bagua__wire_hdr_t *reply, void *body, size_t blen,
                                int64_t deadline_ms, const volatile int *abort_flag,
                                uint32_t *refused);
/* A sentence for a refusal reason. */
const char *bagua__refuse_text(uint32_t reason);

/* Validates a received handshake header; fills a sentence into why on refusal. */
int bagua__wire_check(const bagua__wire_hdr_t *h, uint32_t type, uint64_t job_hash,
                      uint64_t comm_id, int size, uint32_t *reason, char *why, size_t whylen);

#endif
