/*
 * Internal definition of the communicator shared by comm/ files: the communicator itself, the
 * table of collectives a transport implements, the poison contract every transport follows on
 * failure, and the small helpers all transports share. Each transport declares the rest in its
 * own header (comm/tcp/tcp.h, comm/shm/shm.h). Not installed.
 */
#ifndef BAGUA_COMM_COMMUNICATOR_H
#define BAGUA_COMM_COMMUNICATOR_H

#include <stdatomic.h>
#include <stdint.h>

#include "bagua/comm.h"
#include "bootstrap.h"
#include "common/params.h"
#include "wire.h"

typedef struct bagua__shm bagua__shm_t;

/* Connection to one peer: `nstreams` TCP sockets; stream 0 also serves as control channel.
 * They are opened when first needed (comm/tcp/links.c): `up` says they all are. */
typedef struct {
  int nstreams;       /* 1 for peers on the same node, the communicator's count across nodes */
  int *fds;           /* -1 until opened */
  uint32_t *send_seq; /* per stream */
  uint32_t *recv_seq; /* per stream */
  int up;             /* atomic (release/acquire): every stream is open and handshaken */
  int accepted;       /* streams the acceptor installed (links.c, under its lock) */
} bagua__peer_t;

typedef struct bagua__links bagua__links_t;

/*
 * The collectives of one transport. Every entry is set: a transport without its own version of
 * a collective names the one it runs instead (the hierarchical transport names the TCP
 * algorithms, comm/tcp/tcp.h), so comm/coll.c calls the entry as it is.
 */
typedef struct {
  const char *name;
  bagua_status_t (*allreduce)(bagua_comm_t *c, const void *s, void *r, size_t n, bagua_dtype_t dt,
                              bagua_op_t op);
  bagua_status_t (*reduce_scatter)(bagua_comm_t *c, const void *s, void *r, size_t n,
                                   bagua_dtype_t dt, bagua_op_t op);
  bagua_status_t (*allgather)(bagua_comm_t *c, const void *s, void *r, size_t n, bagua_dtype_t dt);
  bagua_status_t (*alltoall)(bagua_comm_t *c, const void *s, void *r, size_t n, bagua_dtype_t dt);
  bagua_status_t (*broadcast)(bagua_comm_t *c, const void *s, void *r, size_t n, bagua_dtype_t dt,
                              int root);
  bagua_status_t (*reduce)(bagua_comm_t *c, const void *s, void *r, size_t n, bagua_dtype_t dt,
                           bagua_op_t op, int root);
  bagua_status_t (*gather)(bagua_comm_t *c, const void *s, void *r, size_t n, bagua_dtype_t dt,
                           int root);
  bagua_status_t (*scatter)(bagua_comm_t *c, const void *s, void *r, size_t n, bagua_dtype_t dt,
                            int root);
  bagua_status_t (*barrier)(bagua_comm_t *c);
} bagua__coll_ops_t;

struct bagua_comm_s {
  int rank, size;
  int local_rank, local_size, node_count, node_index;
  int nstreams;            /* streams per peer on another node (BAGUA_NET_NSTREAMS) */
  int active_streams;      /* of those, how many a message is spread over (tune.h); 0: all */
  int streams_chosen;      /* the user chose nstreams: the calibration keeps it */
  int requested_transport; /* bagua_transport_kind_t asked for; inherited by splits */
  uint32_t split_seq;      /* splits performed on this communicator, for child ids */
  int timeout_ms;
  int connect_timeout_ms;
  uint64_t job_hash, comm_id;
  bagua__endpoint_t *eps; /* one per rank, from the bootstrap */
  bagua__peer_t *peers;   /* one per rank; peers[rank] unused */
  bagua__links_t *links;  /* the listener and its acceptor thread (NULL for one rank) */
  int *node_of;           /* per rank: its node's index (node order of first appearance) */
  int *local_of;          /* per rank: its rank among the ranks of its node */
  const bagua__coll_ops_t *ops;
  const char *transport_name;
  bagua__shm_t *shm; /* shared-memory arena when the shm transport is in use */
  /* Hierarchical mode: node-local communicator and leaders' communicator (NULL if none). */
  bagua_comm_t *intra, *inter;
  size_t segment_bytes;  /* the TCP ring's pipeline segment (tune.h) */
  size_t ring_min_bytes; /* allreduce: the ring from this size, recursive doubling below */
  int net_spin;  /* busy-poll rounds before poll() in the TCP engine; 0 when oversubscribed */
  void *scratch; /* reduce staging for the TCP engine */
  size_t scratch_bytes;
  /* The TCP reduce-scatter ring's partial sums, kept between calls: a fresh buffer of tens of
   * MiB pays its page faults on every call (45 % of a 64 MiB reduce-scatter over loopback). */
  void *partials;
  size_t partials_bytes;
  uint32_t coll_seq; /* collectives started on this communicator: the signature's `seq` */
  int sig_by_parent; /* 1: a hierarchical parent agreed on every call (intra and inter) */
  int sig_mismatch;  /* the status bagua__sig_compare returned (BAGUA_ERR_PROTOCOL for a
                      * mismatch, BAGUA_ERR_INVALID_ARG for a refusal): not a failure; 0: none */
  volatile int abort_flag;
  _Atomic int async_error;
  _Atomic uint64_t bytes_sent;
};

/* a mod n in [0, n), for ring neighbour arithmetic with negative offsets. */
static inline int bagua__mod(int a, int n) {
  return ((a % n) + n) % n;
}

/* The streams a message to peer r is spread over: its established streams, or fewer while
 * bagua__comm_set_streams() asks for fewer. Both ends compute the same count. */
static inline int bagua__peer_streams(const bagua_comm_t *c, int r) {
  int n = c->peers[r].nstreams;
  return c->active_streams > 0 && c->active_streams < n ? c->active_streams : n;
}

/* Block i of `count` elements split over n blocks, as every transport splits messages: the
 * first count % n blocks get one extra element. Offset and length are in elements times `es`
 * (pass es = 1 for element units). */
static inline void bagua__block(size_t count, int n, int i, size_t es, size_t *off, size_t *len) {
  size_t base = count / (size_t)n, extra = count % (size_t)n, ui = (size_t)i;
  *off = (ui * base + (ui < extra ? ui : extra)) * es;
  *len = (base + (ui < extra ? 1 : 0)) * es;
}

/* Marks the communicator failed with `st` and shuts its connections down so every peer fails
 * promptly instead of waiting for its own timeout. Returns `st` for convenience. */
bagua_status_t bagua__comm_poison(bagua_comm_t *c, bagua_status_t st);

/* Hierarchical composition of shm within nodes and tcp across them (comm/hier.c). */
extern const bagua__coll_ops_t bagua__hier_ops;
/* Sets a new TCP (or hierarchical) communicator's allreduce ring threshold from what its
 * links measure (comm/calibrate.c). Collective over c; called once c is connected. */
bagua_status_t bagua__comm_calibrate(bagua_comm_t *c);
bagua_status_t bagua__hier_setup(bagua_comm_t *c);

/* ---- TCP mesh set-up (comm/comm_mesh.c) ---- */

/* Opens the TCP streams a new communicator uses first (links.c: the others open on first use)
 * given c->eps and the listening socket, then picks and sets up the transport. Used by every
 * way of creating a communicator. Takes ownership of lfd. On failure the caller destroys the
 * half-built communicator. */
bagua_status_t bagua__comm_connect(bagua_comm_t *c, int lfd);
/* Fills this rank's endpoint record (listen port, node hash, pid, rank, BAGUA_NODE_ADDR when
 * set) the same way for every creation path, so all of them group ranks into nodes by one
 * rule. `node_id` NULL or "" falls back to BAGUA_NODE_ID, then GROUP_RANK, then the host. */
bagua_status_t bagua__endpoint_init(bagua__endpoint_t *ep, const char *node_id, uint16_t port,
                                    int rank);

/* ---- configuration (comm/comm_config.c) ---- */

/* The "unset" value of a numeric config field: the field takes its BAGUA_* parameter. */
#define BAGUA__CONFIG_UNSET (-1)

/*
 * The settings every world communicator is created with. A caller copies in what its own
 * config says and leaves the rest unset (BAGUA__CONFIG_UNSET or NULL);
 * bagua__comm_settings_resolve() then checks every set field against what its parameter
 * accepts and gives every unset field its BAGUA_* parameter, so that bagua_comm_create() and
 * bagua_elastic_create() resolve each setting by one rule.
 */
typedef struct {
  int rank, size;         /* -1: RANK, WORLD_SIZE (rank < size checked by the caller) */
  const char *job_id;     /* NULL: BAGUA_JOB_ID (common/validate.h's id rule either way) */
  const char *node_id;    /* NULL: BAGUA_NODE_ID; "" then means as bagua__endpoint_init */
  int transport;          /* -1: BAGUA_TRANSPORT; else a bagua_transport_kind_t */
  int timeout_ms;         /* -1: BAGUA_COMM_TIMEOUT_MS */
  int connect_timeout_ms; /* -1: BAGUA_CONNECT_TIMEOUT_MS */
  int nstreams;           /* -1: BAGUA_NET_NSTREAMS */
  /* Filled by bagua__comm_settings_resolve(): 1 when the caller's config or BAGUA_NET_NSTREAMS
   * chose nstreams, 0 when it is the registry's default (the calibration may then lower it). */
  int nstreams_chosen;
} bagua__comm_settings_t;

/* The settings of a config struct with the fields bagua_comm_config_t and
 * bagua_elastic_config_t share (rank, size, job_id, node_id, transport and both timeouts),
 * before bagua__comm_settings_resolve() fills the unset ones. */
#define BAGUA__COMM_SETTINGS_OF(cfg, streams)                                \
  ((bagua__comm_settings_t){.rank = (cfg)->rank,                             \
                            .size = (cfg)->size,                             \
                            .job_id = (cfg)->job_id,                         \
                            .node_id = (cfg)->node_id,                       \
                            .transport = (cfg)->transport,                   \
                            .timeout_ms = (cfg)->timeout_ms,                 \
                            .connect_timeout_ms = (cfg)->connect_timeout_ms, \
                            .nstreams = (streams)})

/* Validates the parameter registry, checks the set fields of `s` against what the registry
 * accepts (and the job id against the tools' id rule), then fills the unset ones. `who` names
 * the public caller in warnings. Returns BAGUA_ERR_INVALID_ARG (with a warning) for a bad
 * field or parameter, before anything touches the network or etcd. */
bagua_status_t bagua__comm_settings_resolve(const char *who, bagua__comm_settings_t *s);
/* A numeric config field named `field` ("config.timeout_ms") that has registry parameter
 * `id`: BAGUA_OK when it is BAGUA__CONFIG_UNSET or within the parameter's bounds, else
 * BAGUA_ERR_INVALID_ARG with a warning naming `who`, the field, its value and the range. */
bagua_status_t bagua__comm_config_int(const char *who, const char *field, bagua__param_id_t id,
                                      int64_t value);

/* ---- life cycle (comm/comm.c) ---- */

/* Allocates a communicator with the fields every creation path needs. */
bagua_status_t bagua__comm_alloc(int rank, int size, bagua_comm_t **out);

/*
 * Everything a world communicator is built from, resolved (bagua_comm_create fills it from its
 * config and the parameters; the elastic context from a round record). The hooks let a caller
 * abort a communicator while it is still being built: `on_alloc` runs right after allocation,
 * before the bootstrap (from then on another thread may call bagua_comm_abort on it), and
 * `on_release` right before a failed build destroys it (after it returns, nobody may touch it).
 * Both may be NULL.
 */
typedef struct {
  bagua__comm_settings_t s; /* resolved: no field is unset */
  int64_t round;            /* makes the communicator id: stale peers cannot join */
  bagua__bootstrap_fn boot_fn;
  void *boot_arg;
  void (*on_alloc)(bagua_comm_t *c, void *arg);
  void (*on_release)(bagua_comm_t *c, void *arg);
  void *hook_arg;
} bagua__comm_build_t;

/* Listens, bootstraps and connects a world communicator (collective over its ranks). */
bagua_status_t bagua__comm_build(const bagua__comm_build_t *b, bagua_comm_t **out);

/* Storage for the argument of whichever bootstrap bagua__comm_config_resolve() picks. */
typedef struct {
  bagua__boot_tcp_t tcp;
  bagua__boot_etcd_t etcd;
} bagua__comm_boot_args_t;

/* Resolves a bagua_comm_config_t (NULL fields and -1 from the parameters) into the build
 * description of bagua_comm_create(), including the bootstrap its URL names; `args` holds
 * the bootstrap's argument and must outlive the build. */
bagua_status_t bagua__comm_config_resolve(const bagua_comm_config_t *cfg,
                                          bagua__comm_boot_args_t *args, bagua__comm_build_t *b);

/* ---- collective signatures (comm/sig.c) ---- */

/* The root argument passed to transports by collectives without a root. Never a valid public
 * root: the public check refuses every value outside [0, size). */
#define BAGUA__NO_ROOT BAGUA_SIG_NO_ROOT

const char *bagua__coll_name(int kind);
/* Compares the n signatures at base + i * stride, where rank q's is entry (q - rot) mod n.
 * When some rank refused its arguments, names the first one on the others and returns
 * BAGUA_ERR_INVALID_ARG; otherwise on a difference logs the first one (the same text on every
 * rank) and returns BAGUA_ERR_PROTOCOL. Either way c->sig_mismatch gets the status. */
bagua_status_t bagua__sig_compare(bagua_comm_t *c, const char *base, size_t stride, int rot);
/* A small allreduce that rides in the agreement's frames (bagua__sig_agree): `count` elements
 * of `dt` from `send`, combined with `op` (BAGUA_AVG sums; the caller divides), into `out`,
 * which is written only once the agreement's rounds are done. */
#define BAGUA__SIG_SLOT 64 /* bytes of payload an agreement frame carries (wire version 5) */
typedef struct {
  const void *send;
  void *out;
  size_t count;
  bagua_dtype_t dt;
  bagua_op_t op;
} bagua__sig_ride_t;
/* Whether an allreduce of `bytes` can ride in c's agreement: c's size is a power of two (its
 * rounds are then recursive doubling) and the data fits the slot. Depends on c and the call
 * only, never on other ranks' calls: the frames are the same size whether or not data rides. */
int bagua__sig_can_ride(const bagua_comm_t *c, size_t bytes);
/* Agrees on every rank's signature over the TCP mesh and compares them (all ranks agree on the
 * verdict; the streams stay in step either way). With `ride` (only where
 * bagua__sig_can_ride), the allreduce is done too, valid where the agreement returns OK. */
bagua_status_t bagua__sig_agree(bagua_comm_t *c, const bagua__coll_sig_t *sig,
                                const bagua__sig_ride_t *ride);

#endif
