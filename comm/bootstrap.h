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
 * and sends the table back. Connections with a wrong magic, version, job, size or a duplicate
 * rank are refused with a reason and do not disturb the rendezvous. A record whose addr is 0
 * gets the local address of the connection to the root (rank 0: the master address).
 */
typedef struct {
  uint32_t master_addr;
  uint16_t master_port;
} bagua__boot_tcp_t;

bagua_status_t bagua__bootstrap_tcp(void *arg, const bagua__boot_ctx_t *ctx,
                                    bagua__endpoint_t *mine, bagua__endpoint_t *all);

/* etcd bootstrap (bagua-agent rounds): records under /bagua/<job>/rounds/<round>/bootstrap/. */
typedef struct {
  const char *endpoint; /* etcd endpoint(s), "HOST:PORT[,HOST:PORT]" */
  const char *job_id;
  int64_t round;
  int etcd_timeout_ms;
} bagua__boot_etcd_t;

bagua_status_t bagua__bootstrap_etcd(void *arg, const bagua__boot_ctx_t *ctx,
                                     bagua__endpoint_t *mine, bagua__endpoint_t *all);

/* Validates a received handshake header; fills a sentence into why on refusal. */
int bagua__wire_check(const bagua__wire_hdr_t *h, uint32_t type, uint64_t job_hash,
                      uint64_t comm_id, int size, uint32_t *reason, char *why, size_t whylen);

#endif
