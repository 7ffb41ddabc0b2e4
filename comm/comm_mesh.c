/*
 * What a new communicator is made of: the node topology derived from the endpoint records,
 * this rank's own endpoint record, the streams it opens first (tcp/links.c opens the others
 * when a collective first needs them) and the choice of transport over them.
 */
#include <arpa/inet.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "communicator.h"
#include "shm/shm.h"
#include "tcp/tcp.h"
#include "common/check.h"
#include "common/log.h"
#include "common/params.h"
#include "common/sock.h"
#include "common/time.h"

/* Derives every rank's node index and local rank, this rank's node-local rank and size and the
 * node count from the endpoints' node hashes: O(N log N), by sorting (rank, hash) pairs, not a
 * comparison of every pair of ranks. Nodes are numbered in the order of their first rank. */
typedef struct {
  uint64_t hash;
  int rank;
} node_key_t;

static int cmp_node_key(const void *a, const void *b) {
  const node_key_t *x = a, *y = b;
  if (x->hash != y->hash) return x->hash < y->hash ? -1 : 1;
  return (x->rank > y->rank) - (x->rank < y->rank);
}

/* Whether two endpoint addresses (network order) are on one host as far as can be told: the
 * same address, or both loopback (a host's emulated nodes, 127.x.y.z). */
static int same_host(uint32_t a, uint32_t b) {
  return a == b || ((ntohl(a) >> 24) == 127 && (ntohl(b) >> 24) == 127);
}

/*
 * Whether this rank's CPUs are shared with more ranks than there are CPUs: the CPUs this
 * process may run on, against the ranks of this communicator on this host. Those are the
 * ranks of its node, or, when every rank is declared a node of its own on one host (the scale
 * tests, and jobs of emulated nodes), every rank whose address is this host's. A rank that
 * spins then takes the CPU the peer it waits for needs: at 64 such ranks on 2 CPUs an 8-byte
 * allreduce took 153 ms with spinning and 9 ms without.
 */
static int oversubscribed(const bagua_comm_t *c) {
  cpu_set_t set;
  int cpus = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
  if (c->local_size > cpus) return 1;
  int here = 0;
  uint32_t mine = c->eps[c->rank].addr;
  for (int r = 0; r < c->size && here <= cpus; r++) here += same_host(c->eps[r].addr, mine);
  return here > cpus;
}

static int cmp_int(const void *a, const void *b) {
  return (*(const int *)a > *(const int *)b) - (*(const int *)a < *(const int *)b);
}

static bagua_status_t compute_topology(bagua_comm_t *c) {
  int n = c->size;
  node_key_t *k = malloc((size_t)n * sizeof(*k));
  int *firsts = malloc((size_t)n * sizeof(*firsts));
  c->node_of = malloc((size_t)n * sizeof(*c->node_of));
  c->local_of = malloc((size_t)n * sizeof(*c->local_of));
  if (!k || !firsts || !c->node_of || !c->local_of) {
    free(k);
    free(firsts);
    return BAGUA_ERR_NO_MEMORY;
  }
  for (int r = 0; r < n; r++) k[r] = (node_key_t){c->eps[r].node_hash, r};
  qsort(k, (size_t)n, sizeof(*k), cmp_node_key);
  /* Within a node the ranks come in order: the local rank is the position in its group, and
   * the group's first rank orders the nodes. */
  int nfirst = 0;
  for (int i = 0, local = 0; i < n; i++) {
    local = i > 0 && k[i].hash == k[i - 1].hash ? local + 1 : 0;
    c->local_of[k[i].rank] = local;
    if (local == 0) firsts[nfirst++] = k[i].rank;
  }
  qsort(firsts, (size_t)nfirst, sizeof(*firsts), cmp_int);
  for (int i = 0, j = 0; i < n; i++) {
    /* k[i]'s group starts at the nearest earlier entry with local rank 0. */
    j = c->local_of[k[i].rank] == 0 ? i : j;
    int first = k[j].rank;
    int *at = bsearch(&first, firsts, (size_t)nfirst, sizeof(*firsts), cmp_int);
    c->node_of[k[i].rank] = (int)(at - firsts);
  }
  c->node_count = nfirst;
  c->node_index = c->node_of[c->rank];
  c->local_rank = c->local_of[c->rank];
  c->local_size = 0;
  for (int r = 0; r < n; r++) c->local_size += c->node_of[r] == c->node_index;
  free(k);
  free(firsts);
  /* Busy-polling before sleeping helps only while this process has a CPU to itself. */
  c->net_spin = (int)bagua__param_int(BAGUA_P_NET_SPIN);
  if (!bagua__param_is_set(BAGUA_P_NET_SPIN) && oversubscribed(c)) c->net_spin = 0;
  return BAGUA_OK;
}

/* The peers a new communicator connects to before it returns, as the collectives it runs
 * first use them: the ranks at distances 1, 2, 4, ... either way (the ring and chain
 * collectives, every collective's signature, the barrier), its recursive-doubling partners (small
 * allreduces, the calibration) and, on a node with several ranks, every rank of the node (the
 * shared-memory transport watches each one's control stream). Every rank computes its side of the
 * same pairs, so the sets agree. Others open on first use. Returns how many, in out[] (room for
 * size + 97 entries). */
static int first_peers(const bagua_comm_t *c, int shm_only, int *out) {
  int n = 0, size = c->size, r = c->rank;
  /* Forced TCP uses no shared memory, so the node's ranks are peers like any other. */
  int node_peers = c->local_size > 1 && c->requested_transport != BAGUA_TRANSPORT_TCP;
  if (shm_only || node_peers)
    for (int q = 0; q < size; q++)
      if (q != r && (shm_only || c->node_of[q] == c->node_index)) out[n++] = q;
  if (shm_only) return n;
  /* Distances 1, 2, 4, ... both ways: the ring's neighbours and the partners of the
   * dissemination rounds every TCP collective starts with (its signature, comm/sig.c) and of
   * the barrier. */
  for (int d = 1; d < size; d <<= 1) {
    out[n++] = (r + d) % size;
    out[n++] = (r + size - d % size) % size;
  }
  n += bagua__rd_partners(size, r, out + n);
  return n;
}

/*
 * Both ends of a connection must open the same number of streams: a rank that opens more waits
 * for the rest of its streams to be accepted until the connect timeout, and one that opens
 * fewer waits as long for streams that never come. Every rank holds the same table, so every
 * rank refuses a difference at once, with the same message.
 */
static bagua_status_t check_nstreams(const bagua_comm_t *c) {
  int want = c->eps[0].nstreams;
  for (int r = 1; r < c->size; r++) {
    if (c->eps[r].nstreams == want) continue;
    BAGUA_WARN(
        "BAGUA_NET_NSTREAMS differs across ranks: rank %d has %d streams per peer, rank 0 has "
        "%d; set the same BAGUA_NET_NSTREAMS (or config.nstreams) on every rank",
        r, (int)c->eps[r].nstreams, want);
    return BAGUA_ERR_INVALID_ARG;
  }
  return BAGUA_OK;
}

bagua_status_t bagua__comm_connect(bagua_comm_t *c, int lfd) {
  bagua_status_t st = BAGUA_OK;
  int *first = NULL;
  BAGUA_CHECK_GOTO(check_nstreams(c), st, done);
  BAGUA_CHECK_GOTO(compute_topology(c), st, done);
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
    p->nstreams = c->node_of[r] == c->node_index ? 1 : c->nstreams;
    p->fds = malloc(sizeof(int) * (size_t)p->nstreams);
    p->send_seq = calloc((size_t)p->nstreams, sizeof(uint32_t));
    p->recv_seq = calloc((size_t)p->nstreams, sizeof(uint32_t));
    if (!p->fds || !p->send_seq || !p->recv_seq) {
      st = BAGUA_ERR_NO_MEMORY;
      goto done;
    }
    for (int s = 0; s < p->nstreams; s++) p->fds[s] = -1;
  }
  if (c->size > 1) {
    st = bagua__links_start(c, lfd); /* owns lfd from here on */
    lfd = -1;
    if (st != BAGUA_OK) goto done;
    /* The node's ranks, two per power of two below size, one per doubling round and a fold. */
    first = malloc(((size_t)c->size + 2 * 32 + 33) * sizeof(*first));
    if (!first) {
      st = BAGUA_ERR_NO_MEMORY;
      goto done;
    }
    int n = first_peers(c, shm_only, first);
    BAGUA_CHECK_GOTO(bagua__links_ensure(c, first, n, bagua__now_ms() + c->connect_timeout_ms), st,
                     done);
  }
  if (c->size == 1) {
    c->ops = &bagua__tcp_ops;
    c->transport_name = "self";
  } else if (shm_only) {
    c->ops = &bagua__shm_ops;
    c->transport_name = "shm";
    BAGUA_CHECK_GOTO(bagua__shm_setup(c), st, done);
  } else if (c->requested_transport == BAGUA_TRANSPORT_TCP || c->node_count == c->size) {
    c->ops = &bagua__tcp_ops;
    c->transport_name = "tcp";
  } else {
    c->ops = &bagua__tcp_ops; /* used while the sub-communicators are built */
    c->transport_name = "tcp";
    BAGUA_CHECK_GOTO(bagua__hier_setup(c), st, done);
    c->ops = &bagua__hier_ops;
    c->transport_name = "hier(shm+tcp)";
  }
  BAGUA_INFO(BAGUA_SUBSYS_INIT,
             "communicator rank %d/%d ready: transport %s, %d streams, %d nodes, %d peers linked",
             c->rank, c->size, c->transport_name, c->nstreams, c->node_count,
             bagua__links_count(c));
done:
  free(first);
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
