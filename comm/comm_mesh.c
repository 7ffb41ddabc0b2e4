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

/* Accepts the streams that higher ranks open to us, refusing anything malformed. */
static bagua_status_t accept_streams(bagua_comm_t *c, int lfd, int64_t deadline) {
  int expected = 0, have = 0;
  for (int r = c->rank + 1; r < c->size; r++) expected += c->peers[r].nstreams;
  while (have < expected) {
    int fd = -1;
    bagua_status_t st = bagua__accept(lfd, deadline, &c->abort_flag, &fd);
    if (st != BAGUA_OK) {
      if (st == BAGUA_ERR_TIMEOUT)
        BAGUA_WARN("only %d of %d peer streams connected before the connect timeout", have,
                   expected);
      return st;
    }
    bagua__wire_hdr_t h;
    int64_t dl = bagua__now_ms() + 2000;
    if (dl > deadline) dl = deadline;
    if (bagua__recv_all(fd, &h, sizeof(h), dl, &c->abort_flag) != BAGUA_OK) {
      BAGUA_WARN("refused a connection that sent no complete handshake");
      close(fd);
      continue;
    }
    uint32_t reason;
    char why[160];
    int bad = bagua__wire_check(&h, BAGUA_MSG_CONNECT, c->job_hash, c->comm_id, c->size, &reason,
                                why, sizeof(why));
    if (!bad && (h.rank <= c->rank || h.arg >= (uint32_t)c->peers[h.rank].nstreams ||
                 c->peers[h.rank].fds[h.arg] >= 0)) {
      bad = 1;
      reason = BAGUA_REFUSE_RANK;
      snprintf(why, sizeof(why), "unexpected stream %u from rank %d", h.arg, h.rank);
    }
    if (bad) {
      BAGUA_WARN("refused a peer connection: %s", why);
      if (reason) {
        bagua__wire_hdr_t r = stream_hdr(c, BAGUA_MSG_REFUSE, reason);
        bagua__send_all(fd, &r, sizeof(r), bagua__now_ms() + 500, &c->abort_flag);
      }
      close(fd);
      continue;
    }
    bagua__wire_hdr_t ok = stream_hdr(c, BAGUA_MSG_ACCEPT, h.arg);
    if (bagua__send_all(fd, &ok, sizeof(ok), dl, &c->abort_flag) != BAGUA_OK) {
      close(fd);
      continue;
    }
    c->peers[h.rank].fds[h.arg] = fd;
    have++;
  }
  return BAGUA_OK;
}

bagua_status_t bagua__comm_connect(bagua_comm_t *c, int lfd) {
  bagua_status_t st = BAGUA_OK;
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
  /* Ordering that cannot deadlock: open streams to lower ranks (the kernel's listen backlog
   * completes them without the peer's help), accept from higher ranks, then read replies. */
  for (int r = 0; r < c->rank; r++) {
    for (int s = 0; s < c->peers[r].nstreams; s++) {
      int fd = -1;
      BAGUA_CHECK_GOTO(
          bagua__connect(c->eps[r].addr, c->eps[r].port, deadline, &c->abort_flag, &fd), st, done);
      c->peers[r].fds[s] = fd;
      bagua__wire_hdr_t h = stream_hdr(c, BAGUA_MSG_CONNECT, (uint32_t)s);
      BAGUA_CHECK_GOTO(bagua__send_all(fd, &h, sizeof(h), deadline, &c->abort_flag), st, done);
    }
  }
  BAGUA_CHECK_GOTO(accept_streams(c, lfd, deadline), st, done);
  for (int r = 0; r < c->rank; r++) {
    for (int s = 0; s < c->peers[r].nstreams; s++) {
      bagua__wire_hdr_t h;
      BAGUA_CHECK_GOTO(bagua__recv_all(c->peers[r].fds[s], &h, sizeof(h), deadline, &c->abort_flag),
                       st, done);
      if (h.magic != BAGUA_WIRE_MAGIC || h.type != BAGUA_MSG_ACCEPT) {
        BAGUA_WARN(
            "rank %d refused our connection (reason %u): check BAGUA_JOB_ID and that all "
            "ranks run the same Bagua-C build",
            r, h.arg);
        st = BAGUA_ERR_PROTOCOL;
        goto done;
      }
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
done:
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
