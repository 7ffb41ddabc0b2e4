/*
 * Communicator life cycle: allocation, creation (bagua_comm_create and the shared world
 * build), split, failure (poison and abort), destruction and the accessors. The TCP mesh is
 * set up in comm_mesh.c and the configuration resolved in comm_config.c.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bootstrap.h"
#include "communicator.h"
#include "shm/shm.h"
#include "tcp/tcp.h"
#include "common/check.h"
#include "common/log.h"
#include "common/params.h"
#include "common/sock.h"
#include "common/time.h"
#include "tune.h"

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
  c->ring_min_bytes = (size_t)bagua__param_int(BAGUA_P_NET_RING_MIN_BYTES);
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

bagua_status_t bagua__comm_poison(bagua_comm_t *c, bagua_status_t st) {
  if (st == BAGUA_OK || st == BAGUA_ERR_INVALID_ARG) return st;
  int expected = BAGUA_OK;
  if (atomic_compare_exchange_strong(&c->async_error, &expected, (int)st)) {
    BAGUA_INFO(BAGUA_SUBSYS_COMM, "communicator failed (%s); closing its connections",
               bagua_err_name(st));
    if (c->shm) bagua__shm_abort(c->shm);
    bagua__links_shutdown(c);
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
  bagua__links_stop(c);
  close_peers(c);
  free(c->peers);
  free(c->eps);
  free(c->node_of);
  free(c->local_of);
  free(c->scratch);
  free(c->partials);
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

bagua_status_t bagua_comm_create(const bagua_comm_config_t *cfg, bagua_comm_t **out) {
  bagua_comm_config_t def = BAGUA_COMM_CONFIG_INIT;
  bagua__comm_boot_args_t args;
  bagua__comm_build_t b;
  if (!out) return BAGUA_ERR_INVALID_ARG;
  *out = NULL;
  BAGUA_CHECK(bagua__comm_config_resolve(cfg ? cfg : &def, &args, &b));
  bagua__log_set_rank(b.s.rank);
  return bagua__comm_build(&b, out);
}

/*
 * The address this rank's peers will connect to, decided before the listener exists so that
 * the listener binds exactly it: BAGUA_NODE_ADDR when set (bagua__endpoint_init has resolved
 * it), else the source address of the route to the rendezvous (etcd, or the TCP bootstrap's
 * root), which is the address the bootstrap would otherwise have recorded for this rank. The
 * TCP root advertises the master address itself, as its bootstrap listener does.
 */
static bagua_status_t advertised_addr(const bagua__comm_build_t *b, uint32_t *addr) {
  char text[INET_ADDRSTRLEN];
  if (*addr) return BAGUA_OK;
  if (b->boot_fn == bagua__bootstrap_etcd) {
    const bagua__boot_etcd_t *e = b->boot_arg;
    if (bagua__route_addr(e->endpoint, addr) == BAGUA_OK) return BAGUA_OK;
    BAGUA_WARN("cannot determine this node's address towards etcd at %s; set BAGUA_NODE_ADDR",
               e->endpoint);
    return BAGUA_ERR_INVALID_ARG;
  }
  if (b->boot_fn != bagua__bootstrap_tcp) return BAGUA_OK; /* a test's own bootstrap */
  const bagua__boot_tcp_t *t = b->boot_arg;
  if (b->s.rank == 0 || bagua__route_addr_ipv4(t->master_addr, t->master_port, addr) == BAGUA_OK) {
    if (b->s.rank == 0) *addr = t->master_addr;
    return BAGUA_OK;
  }
  bagua__ipv4_str(t->master_addr, text, sizeof(text));
  BAGUA_WARN(
      "cannot determine this node's address towards the bootstrap at %s:%u (%s); set "
      "BAGUA_NODE_ADDR",
      text, (unsigned)t->master_port, strerror(errno));
  return BAGUA_ERR_INVALID_ARG;
}

bagua_status_t bagua__comm_build(const bagua__comm_build_t *b, bagua_comm_t **out) {
  bagua_status_t st;
  bagua_comm_t *c = NULL;
  int lfd = -1;
  *out = NULL;
  BAGUA_CHECK(bagua__comm_alloc(b->s.rank, b->s.size, &c));
  c->job_hash = bagua__hash64(b->s.job_id, strlen(b->s.job_id), 0);
  c->comm_id = bagua__world_comm_id(c->job_hash, b->round);
  c->nstreams = b->s.nstreams;
  c->streams_chosen = b->s.nstreams_chosen;
  c->requested_transport = b->s.transport;
  c->timeout_ms = b->s.timeout_ms;
  c->connect_timeout_ms = b->s.connect_timeout_ms;
  if (b->on_alloc) b->on_alloc(c, b->hook_arg);
  bagua__endpoint_t mine;
  BAGUA_CHECK_GOTO(bagua__endpoint_init(&mine, b->s.node_id, 0, b->s.rank), st, fail);
  mine.nstreams = (uint16_t)c->nstreams; /* compared across ranks by bagua__comm_connect */
  BAGUA_CHECK_GOTO(advertised_addr(b, &mine.addr), st, fail);
  /* The data streams listen on the address peers are told, not on every interface: a port
   * on an interface nobody was told about only serves strangers (docs/security.md). */
  BAGUA_CHECK_GOTO(bagua__listen(mine.addr, 0, &lfd, &mine.port), st, fail);
  bagua__boot_ctx_t ctx = {
      b->s.rank,     b->s.size, c->job_hash, c->comm_id, bagua__now_ms() + c->connect_timeout_ms,
      &c->abort_flag};
  BAGUA_CHECK_GOTO(b->boot_fn(b->boot_arg, &ctx, &mine, c->eps), st, fail);
  st = bagua__comm_connect(c, lfd); /* closes lfd in every case */
  lfd = -1;
  if (st != BAGUA_OK) goto fail;
  BAGUA_CHECK_GOTO(bagua__comm_calibrate(c), st, fail);
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
  return bagua__comm_split_streams(c, color, key, 0, out);
}

bagua_status_t bagua__comm_split_streams(bagua_comm_t *c, int color, int key, int nstreams,
                                         bagua_comm_t **out) {
  bagua_status_t st = BAGUA_OK;
  bagua__endpoint_t *all = NULL;
  bagua_comm_t *nc = NULL;
  int lfd = -1;
  if (!c || !out) return BAGUA_ERR_INVALID_ARG;
  *out = NULL;
  /* More streams than BAGUA_NET_NSTREAMS allows would be refused in a config; here too. */
  char err[256];
  if (nstreams > 0 && bagua__param_check_int(BAGUA_P_NET_NSTREAMS, "split streams", nstreams, err,
                                             sizeof(err)) != BAGUA_OK) {
    BAGUA_WARN("bagua_comm_split: %s", err);
    return BAGUA_ERR_INVALID_ARG;
  }
  uint16_t port = 0;
  /* The sub-communicator's streams listen where this rank's world streams do. */
  BAGUA_CHECK(bagua__listen(c->eps[c->rank].addr, 0, &lfd, &port));
  bagua__endpoint_t mine = c->eps[c->rank];
  mine.port = port;
  mine.color = color < 0 ? -1 : color;
  mine.key = key;
  mine.rank = c->rank;
  mine.nstreams = (uint16_t)(nstreams > 0 ? nstreams : c->nstreams);
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
  /* Every member passes the same count (a collective argument), so both ends of each
   * connection open the same streams. A split keeps the parent's tuning (tune.h). */
  nc->nstreams = nstreams > 0 ? nstreams : c->nstreams;
  nc->active_streams = c->active_streams;
  nc->segment_bytes = c->segment_bytes;
  nc->ring_min_bytes = c->ring_min_bytes;
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
