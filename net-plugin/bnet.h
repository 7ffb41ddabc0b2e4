/*
 * Bagua-Net internals: the multi-stream TCP transport behind the NCCL plugin tables.
 *
 * A connection is one control stream plus nstreams data streams, all TCP, opened by the
 * sender (connect) to the receiver's listener (accept). For every isend the sender writes a
 * 16-byte message header (tag, size) on the control stream and deals the payload, cut into at
 * most nstreams chunks of at least chunk_min bytes, round-robin over the data streams (a
 * payload of at most BNET_INLINE_MAX bytes follows its header on the control stream). The
 * receiver reads the headers in order, matches each message to the oldest posted receive
 * slot with the same tag, and hands the chunks to the data streams' workers, which read them
 * straight into the receive buffer. Both ends advance the same rotation cursor per message,
 * so every data stream carries its chunks in message order and no chunk needs a header.
 *
 * Threads: each stream of a comm has its own worker thread with its own queue; the only locks
 * are per queue and per comm (the receiver's matching). Nothing on the data path is shared
 * between comms. Requests come from a fixed pool per comm; test() only reads an atomic.
 *
 * Failures: a worker that sees an error (a reset, a failed send, EOF in the middle of a chunk,
 * a corrupted header) sets the comm's error, after which every request of the comm that is not
 * complete fails in test(). The end of the control stream only stops new messages: messages
 * already matched complete, receives still waiting for one fail. A killed peer closes its
 * sockets, so the survivor notices within one poll slice (50 ms).
 */
#ifndef BAGUA_NET_PLUGIN_BNET_H
#define BAGUA_NET_PLUGIN_BNET_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "nccl_net.h"

#define BNET_NAME "Bagua"
#define BNET_MAX_STREAMS 16 /* the upper bound of BAGUA_NET_NSTREAMS */
#define BNET_MAX_RECVS 8    /* buffers one irecv may group (maxRecvs) */
/* Requests per comm. NCCL keeps at most NCCL_NET_MAX_REQUESTS in flight; the rest is headroom
 * for other callers (the benchmark driver). When none is free, isend/irecv return a NULL
 * request and the caller retries. */
#define BNET_MAX_REQS (2 * NCCL_NET_MAX_REQUESTS)
/* A test() reports sizes as int, so no message may be larger than this. */
#define BNET_MAX_MSG ((size_t)INT32_MAX)

/* The listen handle NCCL carries to the peer. The first 32 bytes are the wire part; the rest
 * is the connecting side's private progress state (NCCL hands the same handle buffer to every
 * retry of connect), zero in the copy the listener produced. */
#define BNET_HANDLE_MAGIC 0x54454e42u /* "BNET" */
#define BNET_HANDLE_VERSION 1
typedef struct {
  uint32_t magic;
  uint16_t version;
  uint16_t kind; /* BNET_KIND_LISTEN */
  uint32_t addr; /* IPv4, network order */
  uint16_t port; /* host order */
  uint16_t reserved;
  uint64_t nonce; /* identifies the listen comm; every stream's hello repeats it */
  uint64_t reserved2;
  /* Connecting side only. */
  uint32_t stage_magic;
  uint32_t stage_pad;
  void *pending; /* struct bnet_conn_pending * while a connect is in progress */
} bnet_handle_t;
#define BNET_KIND_LISTEN 1
#define BNET_STAGE_MAGIC 0x47415453u /* "STAG" */
_Static_assert(sizeof(bnet_handle_t) <= NCCL_NET_HANDLE_MAXSIZE, "handle must fit NCCL's");

/* First bytes on every stream from the connecting side. */
#define BNET_HELLO_MAGIC 0x4c484e42u /* "BNHL" */
#define BNET_WIRE_VERSION 1
typedef struct {
  uint32_t magic;
  uint16_t version;
  uint16_t index; /* 0: control stream, 1..nstreams: data streams */
  uint64_t nonce; /* the listen handle's nonce */
  uint64_t conn_id;
  uint32_t nstreams;
  uint32_t chunk_min; /* the sender's chunk size floor; the receiver adopts it */
} bnet_hello_t;
_Static_assert(sizeof(bnet_hello_t) == 32, "hello is 32 bytes on the wire");

/* Messages up to this size travel inline on the control stream right after their header:
 * for them a trip through a data stream's thread costs more latency than the bytes. Part of
 * the wire protocol (both ends must agree), hence a constant and not a parameter. */
#define BNET_INLINE_MAX 8192

/* Message header on the control stream (little-endian hosts only, like the rest of Bagua). */
typedef struct {
  uint32_t magic; /* BNET_MSG_MAGIC: a desynchronised stream is caught at once */
  int32_t tag;
  uint64_t size;
} bnet_msg_t;
#define BNET_MSG_MAGIC 0x47534d42u /* "BMSG" */
_Static_assert(sizeof(bnet_msg_t) == 16, "message header is 16 bytes on the wire");

/* ---- Devices (devices.c) ---- */
typedef struct {
  char name[64];
  uint32_t addr; /* IPv4, network order */
  int speed_mbps;
} bnet_dev_t;

/* Enumerates the interfaces once per process; later calls return the cached result. */
ncclResult_t bagua__bnet_devices_init(void);
int bagua__bnet_ndevs(void);
const bnet_dev_t *bagua__bnet_dev(int dev);
/* Fills the v11 properties of `dev` (the older versions are converted from them). */
ncclResult_t bagua__bnet_get_properties(int dev, ncclNetProperties_v11_t *props);

/* ---- Comms, requests and the data path (transport.c) ---- */
typedef struct bnet_comm bnet_comm_t;
typedef struct bnet_req bnet_req_t;

/* Builds a comm from connected sockets (fds[0] control, fds[1..nstreams] data) and starts its
 * workers. On failure the fds are closed. */
ncclResult_t bagua__bnet_comm_create(int is_send, const int *fds, int nstreams, uint32_t chunk_min,
                                     bnet_comm_t **out);
ncclResult_t bagua__bnet_isend(bnet_comm_t *c, void *data, size_t size, int tag, void **request);
ncclResult_t bagua__bnet_irecv(bnet_comm_t *c, int n, void **data, const size_t *sizes,
                               const int *tags, void **request);
ncclResult_t bagua__bnet_test(void *request, int *done, int *sizes);
ncclResult_t bagua__bnet_comm_close(bnet_comm_t *c);
int bagua__bnet_comm_is_send(const bnet_comm_t *c);

/* ---- Connection set-up (connect.c) ---- */
typedef struct bnet_listen bnet_listen_t;
ncclResult_t bagua__bnet_listen(int dev, void *handle, void **listen_comm);
ncclResult_t bagua__bnet_connect(int dev, void *handle, void **send_comm);
ncclResult_t bagua__bnet_accept(void *listen_comm, void **recv_comm);
ncclResult_t bagua__bnet_close_listen(void *listen_comm);

/* The per-connection tunables, read and validated once (BAGUA_NET_NSTREAMS, ...). */
ncclResult_t bagua__bnet_params(int *nstreams, uint32_t *chunk_min);
/* 64 random bits for nonces and connection ids. */
uint64_t bagua__bnet_random64(void);

#endif
