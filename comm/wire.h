/*
 * Wire formats shared by the bootstrap, the TCP transport and the shared-memory arena. Every offset
 * is pinned with a static assertion so that a change to the layout is a compile error, not a silent
 * protocol break between builds.
 */
#ifndef BAGUA_COMM_WIRE_H
#define BAGUA_COMM_WIRE_H

#include <stddef.h>
#include <stdint.h>

#define BAGUA_WIRE_MAGIC 0x42414755u /* "BAGU" */
/* The first word of a node's shared-memory arena (comm/shm/shm.c): a segment that does not
 * start with it, or whose rank count or slot size differs, was made by another job or build. */
#define BAGUA_SHM_ARENA_MAGIC 0x42534d41u /* "BSMA" */
/* 2: the accepting side answers a client's header with a CHALLENGE (nonce); the client's proof
 * (bagua__wire_auth_t) and the server's reply proof follow (comm/bootstrap.h, "Handshake").
 * 3: every collective starts with the exchange of its signature (bagua__coll_sig_t).
 * 4: a signature's `refused` byte marks a rank whose own argument check failed, and an
 * endpoint record carries the rank's stream count (`nstreams`, where `pad` was).
 * 5: on a power-of-two world the signature rounds are recursive doubling, each frame with a
 * 64-byte slot a small allreduce rides in (comm/sig.c). */
#define BAGUA_WIRE_VERSION 5u

enum {
  BAGUA_MSG_BOOT_HELLO = 1, /* rank -> bootstrap root: my endpoint record */
  BAGUA_MSG_BOOT_TABLE = 2, /* root -> rank: all records */
  BAGUA_MSG_BOOT_NACK = 3,  /* root -> rank: refused, `arg` holds the reason */
  BAGUA_MSG_CONNECT = 4,    /* rank -> rank: opening a data stream */
  BAGUA_MSG_ACCEPT = 5,     /* reply to CONNECT */
  BAGUA_MSG_REFUSE = 6,     /* reply to CONNECT: refused, `arg` holds the reason */
  BAGUA_MSG_CHALLENGE = 7   /* accepting side -> client: a nonce follows; `arg` = 1 when the
                               server holds a job secret and checks the client's proof */
};

/* Reasons carried in `arg` of NACK/REFUSE messages. */
enum {
  BAGUA_REFUSE_JOB = 1,     /* job id hash differs */
  BAGUA_REFUSE_VERSION = 2, /* protocol version differs */
  BAGUA_REFUSE_SIZE = 3,    /* world size differs */
  BAGUA_REFUSE_RANK = 4,    /* rank out of range or already taken */
  BAGUA_REFUSE_COMM = 5,    /* communicator id differs */
  BAGUA_REFUSE_AUTH = 6     /* no valid proof of the job secret */
};

/* Handshake header: the first bytes of every bootstrap and stream connection. */
typedef struct {
  uint32_t magic;
  uint32_t version;
  uint32_t type;
  uint32_t arg;      /* stream index, refuse reason, ... */
  uint64_t job_hash; /* hash of the job id */
  uint64_t comm_id;  /* identity of the communicator being built */
  int32_t rank;
  int32_t size;
} bagua__wire_hdr_t;

_Static_assert(offsetof(bagua__wire_hdr_t, magic) == 0, "wire layout");
_Static_assert(offsetof(bagua__wire_hdr_t, type) == 8, "wire layout");
_Static_assert(offsetof(bagua__wire_hdr_t, job_hash) == 16, "wire layout");
_Static_assert(offsetof(bagua__wire_hdr_t, comm_id) == 24, "wire layout");
_Static_assert(offsetof(bagua__wire_hdr_t, rank) == 32, "wire layout");
_Static_assert(sizeof(bagua__wire_hdr_t) == 40, "wire layout");

/*
 * The proof that follows a client's header (after the server's challenge) and the server's
 * reply header. Client: nonce = its own nonce, mac = HMAC(secret, "bagua-c2" || server nonce ||
 * client nonce || header || payload). Server reply: nonce = zeros, mac = HMAC(secret,
 * "bagua-s2" || server nonce || client nonce || reply header || body). Without a secret both
 * macs are zeros and unchecked. The header binds job hash, communicator id, rank, size, message
 * type (the direction) and stream index, so a proof is good for one connection only.
 */
typedef struct {
  uint8_t nonce[32];
  uint8_t mac[32];
} bagua__wire_auth_t;

_Static_assert(offsetof(bagua__wire_auth_t, mac) == 32, "wire layout");
_Static_assert(sizeof(bagua__wire_auth_t) == 64, "wire layout");

/* One rank's endpoint, exchanged by every bootstrap. */
typedef struct {
  uint32_t addr;      /* IPv4, network order */
  uint16_t port;      /* host order */
  uint16_t nstreams;  /* streams per peer on another node; every rank must have the same */
  uint64_t node_hash; /* ranks with equal hashes share a node (shared memory possible) */
  int32_t pid;
  int32_t color; /* used by split */
  int32_t key;   /* used by split */
  int32_t rank;  /* rank in the communicator the record was gathered over */
} bagua__endpoint_t;

_Static_assert(offsetof(bagua__endpoint_t, nstreams) == 6, "wire layout");
_Static_assert(offsetof(bagua__endpoint_t, node_hash) == 8, "wire layout");
_Static_assert(offsetof(bagua__endpoint_t, pid) == 16, "wire layout");
_Static_assert(sizeof(bagua__endpoint_t) == 32, "wire layout");

/* Data-stream message header preceding each part of a message on one TCP stream. */
typedef struct {
  uint32_t magic;
  uint32_t seq; /* per stream and direction; catches lost or mismatched messages */
  uint64_t bytes;
} bagua__msg_hdr_t;

_Static_assert(sizeof(bagua__msg_hdr_t) == 16, "wire layout");

/* The collective kinds named by a signature. */
enum {
  BAGUA_COLL_ALLREDUCE = 1,
  BAGUA_COLL_REDUCE_SCATTER = 2,
  BAGUA_COLL_ALLGATHER = 3,
  BAGUA_COLL_ALLTOALL = 4,
  BAGUA_COLL_BROADCAST = 5,
  BAGUA_COLL_REDUCE = 6,
  BAGUA_COLL_GATHER = 7,
  BAGUA_COLL_SCATTER = 8,
  BAGUA_COLL_BARRIER = 9
};

/* Stored in `op` and `dtype` by a collective that has none, in `root` by one without a root. */
#define BAGUA_SIG_NONE 0xffu
#define BAGUA_SIG_NO_ROOT INT32_MIN

/*
 * The signature of one collective call: what every rank of the call must agree on before any
 * data moves. TCP exchanges it among all ranks at the start of every collective (comm/sig.c);
 * shared memory publishes it next to the round counter of the call's first round
 * (comm/shm/shm.c). `count` is the count argument of the call (elements per rank block for
 * reduce_scatter, allgather, alltoall, gather and scatter); `seq` numbers the collectives this
 * rank has started on the communicator. Every matched call keeps it equal on all ranks (a
 * mismatch advances it everywhere too), so it checks the library's own bookkeeping; it does
 * not catch a rank that skipped a call (its next call then meets the others' with equal seq,
 * and is caught by kind, count, dtype, op or root when they differ).
 *
 * `refused` is 1 on a rank whose own check of its arguments failed (a NULL or overlapping
 * buffer, an invalid dtype, op, root or count): it still takes part in the agreement, so that
 * every rank fails the same call and the next one pairs up again (comm/coll.c).
 */
typedef struct {
  uint64_t count;
  uint32_t seq;
  uint8_t kind;    /* BAGUA_COLL_* */
  uint8_t op;      /* bagua_op_t or BAGUA_SIG_NONE */
  uint8_t dtype;   /* bagua_dtype_t or BAGUA_SIG_NONE */
  uint8_t refused; /* 1: this rank refused its arguments; 0 otherwise */
  int32_t root;    /* [0, size) or BAGUA_SIG_NO_ROOT */
  uint32_t magic;  /* BAGUA_WIRE_MAGIC: tells a signature from stray data */
} bagua__coll_sig_t;

_Static_assert(offsetof(bagua__coll_sig_t, seq) == 8, "wire layout");
_Static_assert(offsetof(bagua__coll_sig_t, kind) == 12, "wire layout");
_Static_assert(offsetof(bagua__coll_sig_t, refused) == 15, "wire layout");
_Static_assert(offsetof(bagua__coll_sig_t, root) == 16, "wire layout");
_Static_assert(offsetof(bagua__coll_sig_t, magic) == 20, "wire layout");
_Static_assert(sizeof(bagua__coll_sig_t) == 24, "wire layout");

uint64_t bagua__hash64(const void *data, size_t len, uint64_t seed);
/* Identity of the world communicator of a job's rendezvous round (0 outside bagua-agent). */
uint64_t bagua__world_comm_id(uint64_t job_hash, int64_t round);

#endif
