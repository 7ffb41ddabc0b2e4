/*
 * Communicator life cycle: creation from a bootstrap, the TCP mesh, transport selection,
 * split, abort and destruction.
 */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bootstrap.h"
#include "comm_internal.h"
#include "common/check.h"
#include "common/log.h"
#include "common/params.h"
#include "common/sock.h"

bagua_status_t bagua__comm_alloc(int rank, int size, bagua_comm_t **out) {
  bagua_comm_t *c = calloc(1, sizeof(*c));
  if (!c) return BAGUA_ERR_NO_MEMORY;
  c->rank = rank;
  c->size = size;
  c->eps = calloc((size_t)size, sizeof(*c->eps));
  c->peers = calloc((size_t)size, sizeof(*c->peers));
  if (!c->eps || !c->peers) {
    free(c->eps);
    free(c->peers);
    free(c);
    return BAGUA_ERR_NO_MEMORY;
  }
  c->segment_bytes = (size_t)bagua__param_int(BAGUA_P_NET_SEGMENT_BYTES);
  *out = c;
  return BAGUA_OK;
}

static void close_peers(bagua_comm_t *c) {
  if (!c->peers) return;
  for (int r = 0; r < c->size; r++) {
    bagua__peer_t *p = &c->peers[r];
    if (p->fds) {
      for (int s = 0; s < p->nstreams; s++)
        if (p->fds[s] >= 0) close(p->fds[s]);
    }
    free(p->fds);
    free(p->send_seq);
    free(p->recv_seq);
    p->fds = NULL;
  }
}

static void shutdown_peers(bagua_comm_t *c) {
  for (int r = 0; r < c->size; r++) {
    bagua__peer_t *p = &c->peers[r];
    if (!p->fds) continue;
    for (int s = 0; s < p->nstreams; s++)
      if (p->fds[s] >= 0) shutdown(p->fds[s], SHUT_RDWR);
  }
}

bagua_status_t bagua__comm_poison(bagua_comm_t *c, bagua_status_t st) {
  if (st == BAGUA_OK || st == BAGUA_ERR_INVALID_ARG) return st;
  int expected = BAGUA_OK;
  if (atomic_compare_exchange_strong(&c->async_error, &expected, (int)st)) {
    BAGUA_INFO(BAGUA_SUBSYS_COMM, "communicator failed (%s); closing its connections",
               bagua_err_name(st));
    if (c->shm) bagua__shm_abort(c->shm);
    shutdown_peers(c);
    if (c->intra) bagua__comm_poison(c->intra, st);
    if (c->inter) bagua__comm_poison(c->inter, st);
  }
  return st;
}

void bagua_comm_abort(bagua_comm_t *c) {
  if (!c) return;
  bagua__flag_set(&c->abort_flag);
  bagua__comm_poison(c, BAGUA_ERR_ABORTED);
}

bagua_status_t bagua_comm_get_async_error(const bagua_comm_t *c) {
  return c ? (bagua_status_t)atomic_load(&c->async_error) : BAGUA_ERR_INVALID_ARG;
}

void bagua_comm_destroy(bagua_comm_t *c) {
  if (!c) return;
  bagua_comm_destroy(c->intra);
  bagua_comm_destroy(c->inter);
  if (c->shm) bagua__shm_destroy(c->shm);
  close_peers(c);
  free(c->peers);
  free(c->eps);
  free(c->scratch);
  free(c);
}

int bagua_comm_rank(const bagua_comm_t *c) {
  return c ? c->rank : -1;
}
int bagua_comm_size(const bagua_comm_t *c) {
  return c ? c->size : -1;
}
int bagua_comm_local_rank(const bagua_comm_t *c) {
  return c ? c->local_rank : -1;
}
int bagua_comm_local_size(const bagua_comm_t *c) {
  return c ? c->local_size : -1;
}
int bagua_comm_node_count(const bagua_comm_t *c) {
  return c ? c->node_count : -1;
}
const char *bagua_comm_transport_name(const bagua_comm_t *c) {
  return c ? c->transport_name : "none";
}
uint64_t bagua_comm_bytes_sent(const bagua_comm_t *c) {
  if (!c) return 0;
  uint64_t n = atomic_load(&c->bytes_sent);
  if (c->intra) n += bagua_comm_bytes_sent(c->intra);
  if (c->inter) n += bagua_comm_bytes_sent(c->inter);
  return n;
}

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

bagua_status_t bagua_comm_create(const bagua_comm_config_t *cfg, bagua_comm_t **out) {
  bagua_comm_config_t def = BAGUA_COMM_CONFIG_INIT;
  if (!out) return BAGUA_ERR_INVALID_ARG;
  *out = NULL;
  if (!cfg) cfg = &def;
  if (cfg->struct_size < sizeof(bagua_comm_config_t)) {
    BAGUA_WARN(
        "bagua_comm_create: config struct_size %zu is smaller than this library's %zu; "
        "initialise it with BAGUA_COMM_CONFIG_INIT",
        cfg->struct_size, sizeof(bagua_comm_config_t));
    return BAGUA_ERR_INVALID_ARG;
  }
  BAGUA_CHECK(bagua__params_check());
  int rank = cfg->rank >= 0 ? cfg->rank : (int)bagua__param_int(BAGUA_P_RANK);
  int size = cfg->size >= 0 ? cfg->size : (int)bagua__param_int(BAGUA_P_WORLD_SIZE);
  if (size < 1 || rank < 0 || rank >= size) {
    BAGUA_WARN(
        "bagua_comm_create: rank %d / world size %d is invalid; set RANK in [0, WORLD_SIZE) "
        "and WORLD_SIZE >= 1 (or the config fields)",
        rank, size);
    return BAGUA_ERR_INVALID_ARG;
  }
  const char *boot = cfg->bootstrap ? cfg->bootstrap : bagua__param_str(BAGUA_P_BOOTSTRAP);
  const char *job = cfg->job_id ? cfg->job_id : bagua__param_str(BAGUA_P_JOB_ID);
  bagua__boot_tcp_t tcp = {0, 0};
  bagua__boot_etcd_t etcd = {boot + 7, job, bagua__param_int(BAGUA_P_ROUND),
                             (int)bagua__param_int(BAGUA_P_ETCD_TIMEOUT_MS)};
  bagua__bootstrap_fn boot_fn = bagua__bootstrap_tcp;
  void *boot_arg = &tcp;
  if (strncmp(boot, "etcd://", 7) == 0) {
    if (etcd.round < 0 || boot[7] == '\0') {
      BAGUA_WARN(
          "bootstrap \"%s\" needs an endpoint and BAGUA_ROUND (bagua-agent sets both); "
          "accepted: etcd://HOST:PORT[,HOST:PORT] with BAGUA_ROUND >= 0",
          boot);
      return BAGUA_ERR_INVALID_ARG;
    }
    boot_fn = bagua__bootstrap_etcd;
    boot_arg = &etcd;
  } else if (strcmp(boot, "env://") == 0) {
    BAGUA_CHECK(bagua__resolve_ipv4(bagua__param_str(BAGUA_P_MASTER_ADDR), &tcp.master_addr));
    tcp.master_port = (uint16_t)bagua__param_int(BAGUA_P_MASTER_PORT);
  } else if (strncmp(boot, "tcp://", 6) == 0) {
    char host[256];
    const char *colon = strrchr(boot + 6, ':');
    long port = colon ? strtol(colon + 1, NULL, 10) : 0;
    if (!colon || port < 1 || port > 65535 || (size_t)(colon - boot - 6) >= sizeof(host)) {
      BAGUA_WARN("bootstrap \"%s\" is malformed; accepted: env:// or tcp://HOST:PORT", boot);
      return BAGUA_ERR_INVALID_ARG;
    }
    memcpy(host, boot + 6, (size_t)(colon - boot - 6));
    host[colon - boot - 6] = '\0';
    BAGUA_CHECK(bagua__resolve_ipv4(host, &tcp.master_addr));
    tcp.master_port = (uint16_t)port;
  } else {
    BAGUA_WARN(
        "bootstrap \"%s\" is not supported by bagua_comm_create; accepted: env://, "
        "tcp://HOST:PORT",
        boot);
    return BAGUA_ERR_INVALID_ARG;
  }
  int transport = cfg->transport;
  if (transport < 0) {
    const char *t = bagua__param_str(BAGUA_P_TRANSPORT);
    transport = strcasecmp(t, "tcp") == 0   ? BAGUA_TRANSPORT_TCP
                : strcasecmp(t, "shm") == 0 ? BAGUA_TRANSPORT_SHM
                                            : BAGUA_TRANSPORT_AUTO;
  } else if (transport > BAGUA_TRANSPORT_SHM) {
    BAGUA_WARN("bagua_comm_create: transport %d is invalid; accepted: 0 auto, 1 tcp, 2 shm",
               transport);
    return BAGUA_ERR_INVALID_ARG;
  }
  int nstreams = cfg->nstreams > 0 ? cfg->nstreams : (int)bagua__param_int(BAGUA_P_NET_NSTREAMS);
  if (nstreams > 16) {
    BAGUA_WARN("bagua_comm_create: nstreams %d is invalid; accepted: 1..16", nstreams);
    return BAGUA_ERR_INVALID_ARG;
  }
  bagua__log_set_rank(rank);
  bagua__comm_build_t b = {
      .rank = rank,
      .size = size,
      .job_id = job,
      .node_id = cfg->node_id,
      /* Each rendezvous round builds a distinct communicator, so stale peers cannot join it. */
      .round = boot_fn == bagua__bootstrap_etcd ? etcd.round : 0,
      .nstreams = nstreams,
      .transport = transport,
      .timeout_ms =
          cfg->timeout_ms > 0 ? cfg->timeout_ms : (int)bagua__param_int(BAGUA_P_COMM_TIMEOUT_MS),
      .connect_timeout_ms = cfg->connect_timeout_ms > 0
                                ? cfg->connect_timeout_ms
                                : (int)bagua__param_int(BAGUA_P_CONNECT_TIMEOUT_MS),
      .boot_fn = boot_fn,
      .boot_arg = boot_arg,
  };
  return bagua__comm_build(&b, out);
}

bagua_status_t bagua__comm_build(const bagua__comm_build_t *b, bagua_comm_t **out) {
  bagua_status_t st;
  bagua_comm_t *c = NULL;
  int lfd = -1;
  *out = NULL;
  BAGUA_CHECK(bagua__comm_alloc(b->rank, b->size, &c));
  c->job_hash = bagua__hash64(b->job_id, strlen(b->job_id), 0);
  c->comm_id = bagua__world_comm_id(c->job_hash, b->round);
  c->nstreams = b->nstreams;
  c->requested_transport = b->transport;
  c->timeout_ms = b->timeout_ms;
  c->connect_timeout_ms = b->connect_timeout_ms;
  if (b->on_alloc) b->on_alloc(c, b->hook_arg);
  uint16_t port = 0;
  BAGUA_CHECK_GOTO(bagua__listen(0 /* INADDR_ANY */, 0, &lfd, &port), st, fail);
  bagua__endpoint_t mine;
  bagua__boot_ctx_t ctx = {
      b->rank,       b->size, c->job_hash, c->comm_id, bagua__now_ms() + c->connect_timeout_ms,
      &c->abort_flag};
  BAGUA_CHECK_GOTO(bagua__endpoint_init(&mine, b->node_id, port, b->rank), st, fail);
  BAGUA_CHECK_GOTO(b->boot_fn(b->boot_arg, &ctx, &mine, c->eps), st, fail);
  st = bagua__comm_connect(c, lfd); /* closes lfd in every case */
  lfd = -1;
  if (st != BAGUA_OK) goto fail;
  *out = c;
  return BAGUA_OK;
fail:
  if (lfd >= 0) close(lfd);
  if (b->on_release) b->on_release(c, b->hook_arg);
  bagua_comm_destroy(c);
  return st;
}

static int cmp_member(const void *a, const void *b) {
  const bagua__endpoint_t *x = a, *y = b;
  if (x->key != y->key) return x->key < y->key ? -1 : 1;
  return x->rank < y->rank ? -1 : x->rank > y->rank;
}

bagua_status_t bagua_comm_split(bagua_comm_t *c, int color, int key, bagua_comm_t **out) {
  bagua_status_t st = BAGUA_OK;
  bagua__endpoint_t *all = NULL;
  bagua_comm_t *nc = NULL;
  int lfd = -1;
  if (!c || !out) return BAGUA_ERR_INVALID_ARG;
  *out = NULL;
  uint16_t port = 0;
  BAGUA_CHECK(bagua__listen(0, 0, &lfd, &port));
  bagua__endpoint_t mine = c->eps[c->rank];
  mine.port = port;
  mine.color = color < 0 ? -1 : color;
  mine.key = key;
  mine.rank = c->rank;
  all = calloc((size_t)c->size, sizeof(*all));
  if (!all) {
    st = BAGUA_ERR_NO_MEMORY;
    goto fail;
  }
  BAGUA_CHECK_GOTO(bagua_allgather(c, &mine, all, sizeof(mine), BAGUA_U8), st, fail);
  uint32_t seq = ++c->split_seq;
  if (color < 0) goto fail; /* not a member: st is BAGUA_OK and *out stays NULL */
  int n = 0;
  for (int r = 0; r < c->size; r++)
    if (all[r].color == color) all[n++] = all[r];
  qsort(all, (size_t)n, sizeof(*all), cmp_member);
  int me = 0;
  for (int i = 0; i < n; i++)
    if (all[i].rank == c->rank) me = i;
  BAGUA_CHECK_GOTO(bagua__comm_alloc(me, n, &nc), st, fail);
  memcpy(nc->eps, all, sizeof(*all) * (size_t)n);
  uint32_t ids[2] = {seq, (uint32_t)color};
  nc->job_hash = c->job_hash;
  nc->comm_id = bagua__hash64(ids, sizeof(ids), c->comm_id);
  nc->nstreams = c->nstreams;
  nc->requested_transport = c->requested_transport;
  nc->timeout_ms = c->timeout_ms;
  nc->connect_timeout_ms = c->connect_timeout_ms;
  st = bagua__comm_connect(nc, lfd);
  lfd = -1;
  if (st != BAGUA_OK) goto fail;
  *out = nc;
  nc = NULL;
fail:
  if (lfd >= 0) close(lfd);
  bagua_comm_destroy(nc);
  free(all);
  return st;
}

bagua_status_t bagua_comm_split_node(bagua_comm_t *c, bagua_comm_t **intra, bagua_comm_t **inter) {
  if (!c || !intra || !inter) return BAGUA_ERR_INVALID_ARG;
  *intra = *inter = NULL;
  BAGUA_CHECK(bagua_comm_split(c, c->node_index, c->rank, intra));
  bagua_status_t st = bagua_comm_split(c, c->local_rank == 0 ? 0 : -1, c->rank, inter);
  if (st != BAGUA_OK) {
    bagua_comm_destroy(*intra);
    *intra = NULL;
  }
  return st;
}

bagua_status_t bagua_comm_init(const bagua_comm_config_t *cfg, bagua_comm_t **out) {
  return bagua_comm_create(cfg, out);
}
