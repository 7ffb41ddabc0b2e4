/*
 * The links of a communicator: its TCP streams to its peers, opened when first needed.
 *
 * A full mesh gives every rank 2(N-1) x streams sockets and makes creation O(N^2) in all; at
 * 128 ranks on one host it did not form. So a new communicator opens only the streams its
 * collectives use first (ring neighbours, recursive-doubling partners, ranks on its node,
 * bagua__comm_connect) and every other one on first use, from the collective that needs it: the
 * higher rank of a pair connects and the lower one accepts, as at creation.
 *
 * Accepting never waits for the caller: a thread per communicator serves the handshakes of
 * incoming streams whenever they come (bagua__hs_serve for its whole life, asleep while nothing
 * happens). So a rank that needs a lower peer connects without waiting for that peer to reach
 * the same collective, a rank that needs a higher one waits only for it to connect, and no
 * order of first uses can deadlock. The streams of one peer are written by exactly one side of
 * this file: the acceptor for higher ranks, the caller's thread for lower ones; a peer becomes
 * usable (`up`, release/acquire) once all its streams are there, and from then on only the
 * collectives touch them.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tcp.h"
#include "common/check.h"
#include "common/log.h"
#include "common/sock.h"
#include "common/time.h"

struct bagua__links {
  bagua_comm_t *c;
  int lfd;
  int wake_fd; /* eventfd: the acceptor stops */
  pthread_t thread;
  int started;
  pthread_mutex_t mu;   /* the streams of peers not up yet, and the error */
  pthread_cond_t cv;    /* a peer came up, or the acceptor ended */
  bagua_status_t error; /* how the acceptor ended by itself (BAGUA_OK while it runs) */
  int ended;
  int stopped; /* no stream is installed any more (poison, destroy) */
};

static int is_up(const bagua__peer_t *p) {
  return __atomic_load_n(&p->up, __ATOMIC_ACQUIRE);
}

/* ---------------------------------------------------------------------------------------- */
/* Accepting (the acceptor thread)                                                           */
/* ---------------------------------------------------------------------------------------- */

static bagua__wire_hdr_t stream_hdr(const bagua_comm_t *c, uint32_t type, uint32_t arg) {
  bagua__wire_hdr_t h = {BAGUA_WIRE_MAGIC, BAGUA_WIRE_VERSION, type,    arg,
                         c->job_hash,      c->comm_id,         c->rank, c->size};
  return h;
}

static uint32_t stream_check(void *arg, const bagua__wire_hdr_t *h, char *why, size_t whylen) {
  bagua__links_t *L = arg;
  bagua_comm_t *c = L->c;
  uint32_t reason = 0;
  pthread_mutex_lock(&L->mu);
  if (h->rank <= c->rank || h->arg >= (uint32_t)c->peers[h->rank].nstreams ||
      c->peers[h->rank].fds[h->arg] >= 0 || L->stopped) {
    snprintf(why, whylen, "unexpected stream %u from rank %d", h->arg, h->rank);
    reason = BAGUA_REFUSE_RANK;
  }
  pthread_mutex_unlock(&L->mu);
  return reason;
}

static bagua_status_t stream_admit(void *arg, const bagua__hs_peer_t *peer) {
  bagua__links_t *L = arg;
  bagua_comm_t *c = L->c;
  bagua__wire_hdr_t ok = stream_hdr(c, BAGUA_MSG_ACCEPT, peer->hdr.arg);
  if (bagua__hs_reply(peer, &ok, NULL, 0, bagua__now_ms() + BAGUA_HS_CONN_MS, NULL) != BAGUA_OK) {
    close(peer->fd); /* the peer went away: it retries, or its collective fails */
    return BAGUA_OK;
  }
  bagua__peer_t *p = &c->peers[peer->hdr.rank];
  pthread_mutex_lock(&L->mu);
  if (L->stopped || p->fds[peer->hdr.arg] >= 0) {
    close(peer->fd);
  } else {
    p->fds[peer->hdr.arg] = peer->fd;
    if (++p->accepted == p->nstreams) {
      __atomic_store_n(&p->up, 1, __ATOMIC_RELEASE);
      pthread_cond_broadcast(&L->cv);
    }
  }
  pthread_mutex_unlock(&L->mu);
  return BAGUA_OK;
}

static void *acceptor_main(void *arg) {
  bagua__links_t *L = arg;
  bagua_comm_t *c = L->c;
  /* A name in ps/top and /proc/<pid>/task/<tid>/comm: this thread sleeps in poll for the
   * communicator's life, which tools (and tests) must not take for a stuck exchange. */
  pthread_setname_np(pthread_self(), BAGUA_ACCEPTOR_THREAD_NAME);
  /* Every higher rank may connect all its streams at once (an alltoall's first use). */
  int pending = 0;
  for (int r = c->rank + 1; r < c->size; r++) pending += c->peers[r].nstreams;
  bagua__hs_server_t srv = {.type = BAGUA_MSG_CONNECT,
                            .nack_type = BAGUA_MSG_REFUSE,
                            .job_hash = c->job_hash,
                            .comm_id = c->comm_id,
                            .size = c->size,
                            .payload_len = 0,
                            .expected = -1,
                            .max_pending = pending,
                            .wake_fd = L->wake_fd,
                            .abort_flag = NULL,
                            .what = "peer connection",
                            .check = stream_check,
                            .admit = stream_admit,
                            .arg = L};
  bagua_status_t st = bagua__hs_serve(L->lfd, &srv);
  pthread_mutex_lock(&L->mu);
  L->error = st == BAGUA_ERR_ABORTED ? BAGUA_OK : st;
  L->ended = 1;
  pthread_cond_broadcast(&L->cv);
  pthread_mutex_unlock(&L->mu);
  if (st != BAGUA_ERR_ABORTED)
    BAGUA_WARN("rank %d: the thread accepting peer connections ended: %s", c->rank,
               bagua_strerror(st));
  return NULL;
}

bagua_status_t bagua__links_start(bagua_comm_t *c, int lfd) {
  bagua__links_t *L = calloc(1, sizeof(*L));
  if (!L) {
    close(lfd);
    return BAGUA_ERR_NO_MEMORY;
  }
  L->c = c;
  L->lfd = lfd;
  pthread_mutex_init(&L->mu, NULL);
  bagua__cond_init(&L->cv);
  L->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  int rc = L->wake_fd < 0 ? errno : pthread_create(&L->thread, NULL, acceptor_main, L);
  if (rc != 0) {
    BAGUA_WARN("cannot start the thread accepting peer connections: %s", strerror(rc));
    if (L->wake_fd >= 0) close(L->wake_fd);
    close(lfd);
    pthread_cond_destroy(&L->cv);
    pthread_mutex_destroy(&L->mu);
    free(L);
    return BAGUA_ERR_SYSTEM;
  }
  L->started = 1;
  c->links = L;
  return BAGUA_OK;
}

static void wake_acceptor(bagua__links_t *L) {
  uint64_t one = 1;
  ssize_t w = write(L->wake_fd, &one, sizeof(one));
  (void)w;
}

void bagua__links_shutdown(bagua_comm_t *c) {
  bagua__links_t *L = c->links;
  if (L) {
    pthread_mutex_lock(&L->mu);
    L->stopped = 1;
  }
  for (int r = 0; r < c->size; r++) {
    bagua__peer_t *p = &c->peers[r];
    if (!p->fds) continue;
    for (int s = 0; s < p->nstreams; s++)
      if (p->fds[s] >= 0) shutdown(p->fds[s], SHUT_RDWR);
  }
  if (L) {
    pthread_cond_broadcast(&L->cv);
    pthread_mutex_unlock(&L->mu);
    wake_acceptor(L);
  }
}

void bagua__links_stop(bagua_comm_t *c) {
  bagua__links_t *L = c->links;
  if (!L) return;
  wake_acceptor(L);
  pthread_join(L->thread, NULL);
  close(L->lfd);
  close(L->wake_fd);
  pthread_cond_destroy(&L->cv);
  pthread_mutex_destroy(&L->mu);
  free(L);
  c->links = NULL;
}

/* ---------------------------------------------------------------------------------------- */
/* Connecting (the caller's thread)                                                          */
/* ---------------------------------------------------------------------------------------- */

/* Stream s to lower rank r: connect, hello. A connection the peer's acceptor dropped before
 * its handshake (its pending connections were full) is retried until the deadline. */
static bagua_status_t open_stream(bagua_comm_t *c, int r, int s, int64_t deadline,
                                  bagua__hs_client_t *hs, uint32_t *refused) {
  int delay_ms = 5;
  for (;;) {
    int fd = -1;
    BAGUA_CHECK(bagua__connect(c->eps[r].addr, c->eps[r].port, deadline, &c->abort_flag, &fd));
    bagua__wire_hdr_t h = stream_hdr(c, BAGUA_MSG_CONNECT, (uint32_t)s);
    bagua_status_t st = bagua__hs_hello(fd, &h, NULL, 0, deadline, &c->abort_flag, hs, refused);
    if (st == BAGUA_OK) {
      /* Under the lock: a poison on another thread shuts down whatever streams exist. */
      pthread_mutex_lock(&c->links->mu);
      c->peers[r].fds[s] = fd;
      pthread_mutex_unlock(&c->links->mu);
      return BAGUA_OK;
    }
    close(fd);
    if (st != BAGUA_ERR_REMOTE || *refused || bagua__now_ms() + delay_ms >= deadline) return st;
    struct timespec ts = {0, (long)delay_ms * 1000000L};
    nanosleep(&ts, NULL);
    if (delay_ms < 200) delay_ms *= 2;
  }
}

static void refused_warning(int peer, uint32_t refused) {
  if (refused)
    BAGUA_WARN(
        "rank %d refused our connection: %s (all ranks need the same BAGUA_JOB_ID, "
        "BAGUA_JOB_SECRET and Bagua-C build)",
        peer, bagua__refuse_text(refused));
}

/* Opens every stream to the lower ranks among want[0..n-1] that are not up: every hello
 * first, then every reply, so that the peers' acceptors work on them together. */
static bagua_status_t connect_lower(bagua_comm_t *c, const int *want, int n, int64_t deadline) {
  bagua_status_t st = BAGUA_OK;
  int total = 0;
  for (int i = 0; i < n; i++)
    if (want[i] < c->rank && !is_up(&c->peers[want[i]])) total += c->peers[want[i]].nstreams;
  if (total == 0) return BAGUA_OK;
  bagua__hs_client_t *hs = calloc((size_t)total, sizeof(*hs));
  int *of = calloc((size_t)total, sizeof(*of)), *sidx = calloc((size_t)total, sizeof(*sidx));
  if (!hs || !of || !sidx) {
    st = BAGUA_ERR_NO_MEMORY;
    goto out;
  }
  int k = 0;
  uint32_t refused = 0;
  for (int i = 0; i < n; i++) {
    int r = want[i];
    bagua__peer_t *p = &c->peers[r];
    if (r >= c->rank || is_up(p)) continue;
    for (int s = 0; s < p->nstreams; s++) {
      if (p->fds[s] >= 0) continue; /* named twice in `want`, or opened before a failure */
      of[k] = r;
      sidx[k] = s;
      st = open_stream(c, r, s, deadline, &hs[k], &refused);
      if (st != BAGUA_OK) {
        refused_warning(r, refused);
        goto out;
      }
      k++;
    }
  }
  for (int i = 0; i < k; i++) {
    bagua__wire_hdr_t h;
    st = bagua__hs_finish(c->peers[of[i]].fds[sidx[i]], &hs[i], BAGUA_MSG_ACCEPT, &h, NULL, 0,
                          deadline, &c->abort_flag, &refused);
    if (st != BAGUA_OK) {
      refused_warning(of[i], refused);
      goto out;
    }
  }
  for (int i = 0; i < n; i++) {
    bagua__peer_t *p = &c->peers[want[i]];
    if (want[i] >= c->rank || is_up(p)) continue;
    int all = 1;
    for (int s = 0; s < p->nstreams; s++) all &= p->fds[s] >= 0;
    if (all) __atomic_store_n(&p->up, 1, __ATOMIC_RELEASE);
  }
out:
  free(hs);
  free(of);
  free(sidx);
  return st;
}

/* Waits until every higher rank among want[0..n-1] has connected all its streams. */
static bagua_status_t await_higher(bagua_comm_t *c, const int *want, int n, int64_t deadline) {
  bagua__links_t *L = c->links;
  bagua_status_t st = BAGUA_OK;
  pthread_mutex_lock(&L->mu);
  for (;;) {
    int missing = -1;
    for (int i = 0; i < n && missing < 0; i++)
      if (want[i] > c->rank && !is_up(&c->peers[want[i]])) missing = want[i];
    if (missing < 0) break;
    if (bagua__flag_get(&c->abort_flag) || L->stopped) {
      st = BAGUA_ERR_ABORTED;
      break;
    }
    if (L->ended) {
      st = L->error != BAGUA_OK ? L->error : BAGUA_ERR_ABORTED;
      break;
    }
    int64_t now = bagua__now_ms();
    if (now >= deadline) {
      BAGUA_WARN("rank %d did not connect to this rank (%d) within the timeout (is it alive?)",
                 missing, c->rank);
      st = BAGUA_ERR_TIMEOUT;
      break;
    }
    /* Slices, so that an abort from another thread is seen within 50 ms. */
    int64_t until = deadline < now + 50 ? deadline : now + 50;
    bagua__cond_wait_until(&L->cv, &L->mu, until);
  }
  pthread_mutex_unlock(&L->mu);
  return st;
}

bagua_status_t bagua__links_ensure(bagua_comm_t *c, const int *want, int n, int64_t deadline_ms) {
  int missing = 0;
  for (int i = 0; i < n && !missing; i++)
    missing = want[i] != c->rank && !is_up(&c->peers[want[i]]);
  if (!missing) return BAGUA_OK;
  if (!c->links) return BAGUA_ERR_INVALID_USAGE; /* a communicator of one has no peers */
  int64_t t0 = bagua__now_ms();
  BAGUA_CHECK(connect_lower(c, want, n, deadline_ms));
  BAGUA_CHECK(await_higher(c, want, n, deadline_ms));
  BAGUA_INFO(BAGUA_SUBSYS_COMM, "rank %d: links to %d peer(s) ready in %lld ms", c->rank, n,
             (long long)(bagua__now_ms() - t0));
  return BAGUA_OK;
}

bagua_status_t bagua__links_use(bagua_comm_t *c, const int *want, int n) {
  return bagua__links_ensure(c, want, n, bagua__now_ms() + c->timeout_ms);
}

int bagua__links_count(const bagua_comm_t *c) {
  int n = 0;
  for (int r = 0; r < c->size; r++) n += r != c->rank && is_up(&c->peers[r]);
  return n;
}
