/*
 * The TCP mesh of a new communicator: the node topology derived from the endpoint records,
 * this rank's own endpoint record, the streams to every peer (opened to lower ranks, accepted
 * from higher ones, each checked at the handshake) and the choice of transport over them.
 */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm_internal.h"
#include "common/check.h"
#include "common/log.h"
#include "common/params.h"
#include "common/sock.h"
#include "common/time.h"

/* Derives node-local ranks and node counts from the endpoints' node hashes. */
static void compute_topology(bagua_comm_t *c) {
  cpu_set_t set;
  int cpus = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
  uint64_t mine = c->eps[c->rank].node_hash;
  c->local_rank = c->local_size = c->node_count = 0;
  c->node_index = -1;
  for (int r = 0; r < c->size; r++) {
    int first = 1;
    for (int q = 0; q < r; q++)
      if (c->eps[q].node_hash == c->eps[r].node_hash) first = 0;
    if (first) {
      if (c->eps[r].node_hash == mine) c->node_index = c->node_count;
      c->node_count++;
    }
    if (c->eps[r].node_hash == mine) {
      if (r < c->rank) c->local_rank++;
      c->local_size++;
    }
  }
  /* Busy-polling before sleeping helps only while every rank of this node has a CPU. */
  c->net_spin = (int)bagua__param_int(BAGUA_P_NET_SPIN);
  if (!bagua__param_is_set(BAGUA_P_NET_SPIN) && c->local_size > cpus) c->net_spin = 0;
}

static bagua__wire_hdr_t stream_hdr(const bagua_comm_t *c, uint32_t type, uint32_t arg) {
  bagua__wire_hdr_t h = {BAGUA_WIRE_MAGIC, BAGUA_WIRE_VERSION, type,    arg,
                         c->job_hash,      c->comm_id,         c->rank, c->size};
  return h;
}

typedef struct {
  bagua_comm_t *c;
  int64_t deadline;
} accept_arg_t;

static uint32_t stream_check(void *arg, const bagua__wire_hdr_t *h, char *why, size_t whylen) {
  bagua_comm_t *c = ((accept_arg_t *)arg)->c;
  if (h->rank <= c->rank || h->arg >= (uint32_t)c->peers[h->rank].nstreams ||
      c->peers[h->rank].fds[h->arg] >= 0) {
    snprintf(why, whylen, "unexpected stream %u from rank %d", h->arg, h->rank);
    return BAGUA_REFUSE_RANK;
  }
  return 0;
}

static bagua_status_t stream_admit(void *arg, const bagua__hs_peer_t *peer) {
  accept_arg_t *A = arg;
  bagua_comm_t *c = A->c;
  bagua__wire_hdr_t ok = stream_hdr(c, BAGUA_MSG_ACCEPT, peer->hdr.arg);
  if (bagua__hs_reply(peer, &ok, NULL, 0, A->deadline, &c->abort_flag) != BAGUA_OK) {
    close(peer->fd);
    return BAGUA_ERR_REMOTE;
  }
  c->peers[peer->hdr.rank].fds[peer->hdr.arg] = peer->fd;
  return BAGUA_OK;
}

/*
 * Accepts the streams that higher ranks open to us, all handshakes at once (bootstrap.h),
 * refusing anything malformed or unauthenticated.
 */
static bagua_status_t accept_streams(bagua_comm_t *c, int lfd, int64_t deadline) {
  int expected = 0;
  for (int r = c->rank + 1; r < c->size; r++) expected += c->peers[r].nstreams;
  if (expected == 0) return BAGUA_OK;
  accept_arg_t A = {c, deadline};
  bagua__hs_server_t srv = {.type = BAGUA_MSG_CONNECT,
                            .nack_type = BAGUA_MSG_REFUSE,
                            .job_hash = c->job_hash,
                            .comm_id = c->comm_id,
                            .size = c->size,
                            .payload_len = 0,
                            .expected = expected,
                            .deadline_ms = deadline,
                            .abort_flag = &c->abort_flag,
                            .what = "peer connection",
                            .check = stream_check,
                            .admit = stream_admit,
                            .arg = &A};
  return bagua__hs_serve(lfd, &srv);
}

bagua_status_t bagua__comm_connect(bagua_comm_t *c, int lfd) {
  bagua_status_t st = BAGUA_OK;
  bagua__hs_client_t *hs = NULL; /* per outgoing stream, between hello and reply */
  uint32_t refused = 0;
  int peer = -1; /* the lower rank whose handshake is under way */
  int64_t deadline = bagua__now_ms() + c->connect_timeout_ms;
  compute_topology(c);
  if (c->requested_transport == BAGUA_TRANSPORT_SHM && c->node_count > 1) {
    BAGUA_WARN(
        "BAGUA_TRANSPORT=shm needs every rank on one node, but the ranks span %d nodes; "
        "use auto or tcp",
        c->node_count);
    st = BAGUA_ERR_INVALID_ARG;
    goto done;
  }
  /* Shared memory only needs one control stream per peer (liveness and send/recv). */
  int shm_only = c->requested_transport == BAGUA_TRANSPORT_SHM ||
                 (c->requested_transport == BAGUA_TRANSPORT_AUTO && c->node_count == 1);
  if (shm_only) c->nstreams = 1; /* every peer is on this node anyway */
  for (int r = 0; r < c->size; r++) {
    bagua__peer_t *p = &c->peers[r];
    /* Several streams spread a message over flows (and NIC queues) between hosts; on one host
     * the traffic never leaves the kernel, and extra streams only cost system calls. Both
     * ends derive the same count from the shared node hashes. */
    p->nstreams = c->eps[r].node_hash == c->eps[c->rank].node_hash ? 1 : c->nstreams;
    p->fds = malloc(sizeof(int) * (size_t)p->nstreams);
    p->send_seq = calloc((size_t)p->nstreams, sizeof(uint32_t));
    p->recv_seq = calloc((size_t)p->nstreams, sizeof(uint32_t));
    if (!p->fds || !p->send_seq || !p->recv_seq) {
      st = BAGUA_ERR_NO_MEMORY;
      goto done;
    }
    for (int s = 0; s < p->nstreams; s++) p->fds[s] = -1;
  }
  /* Ordering that cannot deadlock: open streams to lower ranks and answer their challenges
   * (a lower rank reaches its accept loop without waiting for us), accept from higher ranks,
   * serving all their handshakes at once, then read the lower ranks' replies. */
  hs = calloc((size_t)c->rank + 1, sizeof(*hs) * (size_t)(c->nstreams > 0 ? c->nstreams : 1));
  if (!hs) {
    st = BAGUA_ERR_NO_MEMORY;
    goto done;
  }
  for (int r = 0; r < c->rank; r++) {
    for (int s = 0; s < c->peers[r].nstreams; s++) {
      int fd = -1;
      peer = r;
      BAGUA_CHECK_GOTO(
          bagua__connect(c->eps[r].addr, c->eps[r].port, deadline, &c->abort_flag, &fd), st, done);
      c->peers[r].fds[s] = fd;
      bagua__wire_hdr_t h = stream_hdr(c, BAGUA_MSG_CONNECT, (uint32_t)s);
      st = bagua__hs_hello(fd, &h, NULL, 0, deadline, &c->abort_flag,
                           &hs[(size_t)r * (size_t)c->nstreams + (size_t)s], &refused);
      if (st != BAGUA_OK) goto refused;
    }
  }
  BAGUA_CHECK_GOTO(accept_streams(c, lfd, deadline), st, done);
  for (int r = 0; r < c->rank; r++) {
    for (int s = 0; s < c->peers[r].nstreams; s++) {
      bagua__wire_hdr_t h;
      peer = r;
      st = bagua__hs_finish(c->peers[r].fds[s], &hs[(size_t)r * (size_t)c->nstreams + (size_t)s],
                            BAGUA_MSG_ACCEPT, &h, NULL, 0, deadline, &c->abort_flag, &refused);
      if (st != BAGUA_OK) goto refused;
    }
  }
  if (c->size == 1) {
    c->ops = &bagua__generic_ops;
    c->transport_name = "self";
  } else if (shm_only) {
    c->ops = &bagua__shm_ops;
    c->transport_name = "shm";
    BAGUA_CHECK_GOTO(bagua__shm_setup(c), st, done);
  } else if (c->requested_transport == BAGUA_TRANSPORT_TCP || c->node_count == c->size) {
    c->ops = &bagua__generic_ops;
    c->transport_name = "tcp";
  } else {
    c->ops = &bagua__generic_ops; /* used while the sub-communicators are built */
    c->transport_name = "tcp";
    BAGUA_CHECK_GOTO(bagua__hier_setup(c), st, done);
    c->ops = &bagua__hier_ops;
    c->transport_name = "hier(shm+tcp)";
  }
  BAGUA_INFO(BAGUA_SUBSYS_INIT, "communicator rank %d/%d ready: transport %s, %d streams, %d nodes",
             c->rank, c->size, c->transport_name, c->nstreams, c->node_count);
  goto done;
refused:
  if (refused)
    BAGUA_WARN(
        "rank %d refused our connection: %s (all ranks need the same BAGUA_JOB_ID, "
        "BAGUA_JOB_SECRET and Bagua-C build)",
        peer, bagua__refuse_text(refused));
done:
  free(hs);
  if (lfd >= 0) close(lfd);
  return st;
}

/* Chooses the node identity: explicit id, then the launcher's node rank, then the host. */
static uint64_t node_hash(const char *node_id) {
  char buf[256];
  if (!node_id || !node_id[0]) node_id = bagua__param_str(BAGUA_P_NODE_ID);
  if (node_id && node_id[0]) {
    snprintf(buf, sizeof(buf), "id:%s", node_id);
  } else if (bagua__param_int(BAGUA_P_GROUP_RANK) >= 0) {
    snprintf(buf, sizeof(buf), "group:%lld", (long long)bagua__param_int(BAGUA_P_GROUP_RANK));
  } else {
    char host[200] = "localhost";
    gethostname(host, sizeof(host) - 1);
    snprintf(buf, sizeof(buf), "host:%s", host);
  }
  return bagua__hash64(buf, strlen(buf), 0);
}

bagua_status_t bagua__endpoint_init(bagua__endpoint_t *ep, const char *node_id, uint16_t port,
                                    int rank) {
  memset(ep, 0, sizeof(*ep));
  ep->port = port;
  ep->node_hash = node_hash(node_id);
  ep->pid = (int32_t)getpid();
  ep->rank = rank;
  if (bagua__param_str(BAGUA_P_NODE_ADDR)[0])
    return bagua__resolve_ipv4(bagua__param_str(BAGUA_P_NODE_ADDR), &ep->addr);
  return BAGUA_OK;
}
