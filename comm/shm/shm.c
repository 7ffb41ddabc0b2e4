/*
 * Shared-memory transport for ranks on one node.
 *
 * Each rank owns two staging slots in one POSIX shared-memory arena. A collective is a series
 * of rounds: in round k every rank writes its contribution into its slot k%2, publishes k,
 * waits until the ranks it needs have published k, reads what it needs from their slots, and
 * marks k consumed. A slot is rewritten in round k+2 only after everyone consumed round k, so
 * two rounds are in flight and slow and fast ranks overlap. Slots are small (1 MiB by
 * default) so the data crosses between cores through the caches instead of DRAM, and every
 * rank reduces only its 1/n share of each block.
 *
 * Failure handling: waits spin briefly, then yield the core (ranks may outnumber cores), then
 * sleep in short naps (the peer is computing, see nap_or_yield), and
 * poll the abort flags, the timeout and the TCP control stream of every peer: a dead peer's
 * socket is closed by its kernel, so death is noticed within milliseconds even though shared
 * memory itself gives no signal.
 */
#include <errno.h>
#include <fcntl.h>
#include <immintrin.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "../tcp/tcp.h"
#include "shm.h"
#include "common/check.h"
#include "common/log.h"
#include "common/params.h"
#include "common/sock.h"
#include "kernels/kernels.h"

#define HEADER_BYTES 4096

/* One rank's control block. The signature of a call whose first round is k sits in sig[k & 1],
 * on the cache line of `pub`: the readers fetch it with the round counter they wait on anyway
 * (a rank compares the others' with a private copy of its own, so it never re-reads its own
 * line after a reader took it). sig[k & 1] is rewritten in round k + 2 only, after every rank
 * has consumed round k (and so compared it). */
typedef struct {
  _Atomic uint64_t pub;
  bagua__coll_sig_t sig[2];
  char pad1[64 - 8 - 2 * sizeof(bagua__coll_sig_t)];
  _Atomic uint64_t con;
  _Atomic uint32_t gone; /* this rank left: bagua__shm_destroy() or mark_gone_at_exit() */
  char pad2[52];
} ctrl_t;

_Static_assert(offsetof(ctrl_t, con) == 64, "pub and con on separate cache lines");
_Static_assert(sizeof(bagua__coll_sig_t) == 3 * sizeof(uint64_t), "sig_check compares 3 words");
_Static_assert(sizeof(ctrl_t) == 128, "one control block per pair of cache lines");

typedef struct {
  uint32_t magic;
  int32_t nranks;
  uint64_t slot_bytes;
  _Atomic int abort; /* set by a rank whose communicator failed */
} arena_hdr_t;

struct bagua__shm {
  bagua_comm_t *c;
  char *base;
  size_t map_bytes;
  arena_hdr_t *hdr;
  ctrl_t *ctrl;
  char *data;
  size_t slot;
  int n, me, spin;
  uint64_t round;
  int64_t next_liveness_ns;
  struct pollfd *pfd;
  const void **srcs;            /* the n slot pointers of the round being reduced */
  const bagua__coll_sig_t *sig; /* to publish with the next round this rank starts */
  bagua__coll_sig_t mine;       /* the one published last (a private copy to compare with) */
  uint64_t sig_round;           /* the round whose signatures are still to compare; 0: none */
  pid_t owner;                  /* the process that set the arena up (see mark_gone_at_exit) */
  bagua__shm_t *next_live;      /* the list of live arenas, under g_live_mu */
};

/* Messages at least this large are copied out with non-temporal stores: the destination will
 * not fit in cache anyway, and skipping the read-for-ownership of every destination line cuts
 * DRAM traffic per byte from three transfers to two. */
#define STREAM_THRESHOLD (8u << 20)

/* memcpy with SSE2 streaming stores (baseline x86-64, so no dispatch is needed). The caller
 * issues _mm_sfence() before publishing, because streaming stores are weakly ordered. */
static void copy_stream(char *dst, const char *src, size_t n) {
  size_t head = (16 - ((uintptr_t)dst & 15)) & 15;
  if (head > n) head = n;
  memcpy(dst, src, head);
  dst += head;
  src += head;
  n -= head;
  for (; n >= 64; n -= 64, dst += 64, src += 64) {
    __m128i a = _mm_loadu_si128((const __m128i *)src);
    __m128i b = _mm_loadu_si128((const __m128i *)(src + 16));
    __m128i c = _mm_loadu_si128((const __m128i *)(src + 32));
    __m128i d = _mm_loadu_si128((const __m128i *)(src + 48));
    _mm_stream_si128((__m128i *)dst, a);
    _mm_stream_si128((__m128i *)(dst + 16), b);
    _mm_stream_si128((__m128i *)(dst + 32), c);
    _mm_stream_si128((__m128i *)(dst + 48), d);
  }
  memcpy(dst, src, n);
}

static void copy_out(char *dst, const char *src, size_t n, int stream) {
  if (stream)
    copy_stream(dst, src, n);
  else
    memcpy(dst, src, n);
}

static char *slot_of(bagua__shm_t *s, int rank, uint64_t k) {
  return s->data + ((size_t)rank * 2 + (k & 1)) * s->slot;
}

/* Peer death shows up as a hang-up on its control stream. A hang-up is not always a death,
 * though: a rank that finished the last collective destroys its communicator while slower ranks
 * still wait for each other to complete it, and it owes them nothing more (everything it
 * publishes is in the arena, which stays mapped here). Such a rank raises `gone` before it
 * closes its streams, so its hang-up fails only a wait for that very rank (`who`, for *ctr to
 * reach v), and only if the counter has not reached v after all: the rank may have published
 * it and left since the caller last looked, and it publishes nothing after raising `gone`.
 * Any other hang-up is a rank that died. */
static bagua_status_t check_liveness(bagua__shm_t *s, int who, _Atomic uint64_t *ctr, uint64_t v) {
  int n = 0;
  for (int r = 0; r < s->n; r++) {
    if (r == s->me) continue;
    s->pfd[n].fd = s->c->peers[r].fds[0];
    s->pfd[n].events = POLLRDHUP;
    s->pfd[n++].revents = 0;
  }
  if (poll(s->pfd, (nfds_t)n, 0) > 0) {
    for (int i = 0, r = 0; i < n; i++, r++) {
      if (r == s->me) r++;
      if (!(s->pfd[i].revents & (POLLRDHUP | POLLHUP | POLLERR))) continue;
      if (!atomic_load_explicit(&s->ctrl[r].gone, memory_order_acquire)) {
        BAGUA_WARN("rank %d on this node closed its control connection (it died or failed)", r);
        return BAGUA_ERR_REMOTE;
      }
      if (r == who && atomic_load_explicit(ctr, memory_order_acquire) < v) {
        BAGUA_WARN(
            "rank %d destroyed its communicator while this rank waits for it in a "
            "collective (do all ranks call the same collectives?)",
            r);
        return BAGUA_ERR_REMOTE;
      }
    }
  }
  return BAGUA_OK;
}

/* How a wait gives its core away once spinning is over. The first YIELD_NS of a wait yield:
 * the peer is usually a round behind, a yield hands it the core at once, and a step of a small
 * model (a few ms on one host) cannot afford a late wake-up on each of its waits. A longer wait
 * means the peer is computing, for example the rest of its backward pass while this rank's
 * communication thread already reduces the first bucket. Yielding in a loop would then take
 * half a core from the computing threads of this very node for as long as the wait lasts
 * (sched_yield() keeps the caller runnable), so the waiter sleeps instead, in naps of an
 * eighth of the time waited so far (at most NAP_MAX_NS): the wake-up can come at most that
 * much late, about 12 % of a wait that was idle time anyway, and a wait of seconds costs a
 * few thousand wake-ups instead of a busy core. */
#define YIELD_NS 1000000
#define NAP_MAX_NS 1000000

static void nap_or_yield(int64_t waited_ns) {
  if (waited_ns < YIELD_NS) {
    sched_yield();
    return;
  }
  int64_t nap = waited_ns / 8;
  if (nap > NAP_MAX_NS) nap = NAP_MAX_NS;
  struct timespec ts = {0, (long)nap};
  nanosleep(&ts, NULL);
}

/* Waits until *ctr >= v. `who` names the rank waited on, for the timeout message. */
static bagua_status_t wait_ge(bagua__shm_t *s, _Atomic uint64_t *ctr, uint64_t v, int who) {
  if (atomic_load_explicit(ctr, memory_order_acquire) >= v) return BAGUA_OK;
  int64_t start = 0;
  for (;;) {
    for (int i = 0; i < s->spin; i++) {
      _mm_pause();
      if (atomic_load_explicit(ctr, memory_order_acquire) >= v) return BAGUA_OK;
    }
    int64_t now = bagua__now_ns();
    if (start == 0) start = now;
    nap_or_yield(now - start);
    if (atomic_load_explicit(ctr, memory_order_acquire) >= v) return BAGUA_OK;
    if (bagua__flag_get(&s->c->abort_flag)) return BAGUA_ERR_ABORTED;
    if (atomic_load_explicit(&s->hdr->abort, memory_order_relaxed)) {
      BAGUA_WARN("a rank on this node failed; aborting the shared-memory collective");
      return BAGUA_ERR_REMOTE;
    }
    now = bagua__now_ns();
    if (now >= s->next_liveness_ns) {
      s->next_liveness_ns = now + 2000000;
      BAGUA_CHECK(check_liveness(s, who, ctr, v));
    }
    if (now - start > (int64_t)s->c->timeout_ms * 1000000) {
      BAGUA_WARN("no progress for %d ms waiting for rank %d (stalled?); see BAGUA_COMM_TIMEOUT_MS",
                 s->c->timeout_ms, who);
      return BAGUA_ERR_TIMEOUT;
    }
  }
}

/* Starts round k: waits until every rank has consumed round k-2, which used the same slot. */
static bagua_status_t round_begin(bagua__shm_t *s, uint64_t *k) {
  *k = ++s->round;
  if (*k <= 2) return BAGUA_OK;
  for (int r = 0; r < s->n; r++)
    if (r != s->me) BAGUA_CHECK(wait_ge(s, &s->ctrl[r].con, *k - 2, r));
  return BAGUA_OK;
}

static void publish(bagua__shm_t *s, uint64_t k) {
  if (s->sig) {
    s->mine = *s->sig;
    s->ctrl[s->me].sig[k & 1] = s->mine;
    s->sig = NULL;
    s->sig_round = k;
  }
  atomic_store_explicit(&s->ctrl[s->me].pub, k, memory_order_release);
}

static void consumed(bagua__shm_t *s, uint64_t k) {
  atomic_store_explicit(&s->ctrl[s->me].con, k, memory_order_release);
}

static bagua_status_t wait_all(bagua__shm_t *s, uint64_t k) {
  for (int r = 0; r < s->n; r++)
    if (r != s->me) BAGUA_CHECK(wait_ge(s, &s->ctrl[r].pub, k, r));
  return BAGUA_OK;
}

/*
 * Called by every collective right after it publishes its first round k: once every rank has
 * published k (the arrival most rounds wait for anyway), compares their signatures. On a
 * mismatch every rank sees the same table, marks k consumed and returns BAGUA_ERR_PROTOCOL
 * before touching another rank's data, so all ranks leave the call in the same round.
 */
static bagua_status_t sig_check(bagua__shm_t *s, uint64_t k) {
  if (s->sig_round != k) return BAGUA_OK;
  s->sig_round = 0;
  /* The fast path compares words with this rank's own signature, reading each rank's right
   * after its round counter (one cache-line transfer for both); the slow path finds and names
   * the first difference, the same on every rank. */
  uint64_t w[3];
  int same = 1;
  memcpy(w, &s->mine, sizeof(w));
  for (int r = 0; r < s->n; r++) {
    if (r == s->me) continue;
    BAGUA_CHECK(wait_ge(s, &s->ctrl[r].pub, k, r));
    uint64_t v[3];
    memcpy(v, &s->ctrl[r].sig[k & 1], sizeof(v));
    same &= (v[0] == w[0]) & (v[1] == w[1]) & (v[2] == w[2]);
  }
  if (same) return BAGUA_OK;
  bagua_status_t st =
      bagua__sig_compare(s->c, (const char *)&s->ctrl[0].sig[k & 1], sizeof(ctrl_t), 0);
  if (st != BAGUA_OK) consumed(s, k);
  return st;
}

void bagua__shm_expect(bagua__shm_t *s, const bagua__coll_sig_t *sig) {
  s->sig = sig;
  s->sig_round = 0;
}

bagua_status_t bagua__shm_sig_done(bagua__shm_t *s, bagua_status_t st) {
  if (st == BAGUA_OK && s->sig) { /* the call ran no round of its own */
    uint64_t k;
    st = round_begin(s, &k);
    if (st == BAGUA_OK) {
      publish(s, k);
      st = sig_check(s, k);
      if (st == BAGUA_OK) consumed(s, k);
    }
  }
  s->sig = NULL;
  s->sig_round = 0;
  return st;
}

static void count_sent(bagua__shm_t *s, size_t bytes) {
  atomic_fetch_add_explicit(&s->c->bytes_sent, bytes, memory_order_relaxed);
}

static void split(size_t count, int n, int i, size_t *off, size_t *len) {
  bagua__block(count, n, i, 1, off, len);
}

/* Reduces element range [off, off+len) of round k's slots (each at byte offset `at`) into dst. */
static void reduce_slots(bagua__shm_t *s, uint64_t k, size_t at, size_t len, char *dst,
                         bagua_dtype_t dt, bagua_op_t op) {
  if (len == 0) return;
  /* One blocked pass over all n inputs (in rank order, so every rank's arithmetic is the same)
   * instead of n-1 passes over the destination. */
  for (int r = 0; r < s->n; r++) s->srcs[r] = slot_of(s, r, k) + at;
  bagua__reduce_n(dt, op, dst, s->srcs, s->n, len);
  if (op == BAGUA_AVG) bagua__div(dt, dst, len, s->n);
}

/* Below this size an allreduce is latency-bound: every rank reduces all inputs itself, in the
 * same rank order, so one synchronisation round suffices and results stay bit-identical. */
#define SMALL_ALLREDUCE (32u << 10)

static bagua_status_t shm_allreduce_small(bagua__shm_t *s, const void *sv, void *rv, size_t count,
                                          bagua_dtype_t dt, bagua_op_t op) {
  size_t bytes = count * bagua_dtype_size(dt);
  uint64_t k;
  BAGUA_CHECK(round_begin(s, &k));
  memcpy(slot_of(s, s->me, k), sv, bytes);
  count_sent(s, bytes);
  publish(s, k);
  BAGUA_CHECK(sig_check(s, k));
  BAGUA_CHECK(wait_all(s, k));
  reduce_slots(s, k, 0, count, rv, dt, op);
  consumed(s, k);
  return BAGUA_OK;
}

/* Allreduce (root BAGUA__NO_ROOT) or reduce to root: two rounds per block of slot-sized input. */
static bagua_status_t shm_reduce_common(bagua_comm_t *c, const void *sv, void *rv, size_t count,
                                        bagua_dtype_t dt, bagua_op_t op, int root) {
  bagua__shm_t *s = c->shm;
  size_t es = bagua_dtype_size(dt), per = s->slot / es;
  const char *src = sv;
  char *dst = rv;
  int stream = count * es >= STREAM_THRESHOLD;
  for (size_t off = 0; off < count; off += per) {
    size_t m = count - off < per ? count - off : per;
    uint64_t k, k2;
    BAGUA_CHECK(round_begin(s, &k));
    memcpy(slot_of(s, s->me, k), src + off * es, m * es);
    count_sent(s, m * es);
    publish(s, k);
    BAGUA_CHECK(sig_check(s, k));
    BAGUA_CHECK(wait_all(s, k));
    size_t co, cl;
    split(m, s->n, s->me, &co, &cl);
    BAGUA_CHECK(round_begin(s, &k2));
    reduce_slots(s, k, co * es, cl, slot_of(s, s->me, k2) + co * es, dt, op);
    consumed(s, k);
    publish(s, k2);
    if (root == BAGUA__NO_ROOT || root == s->me) {
      BAGUA_CHECK(wait_all(s, k2));
      for (int r = 0; r < s->n; r++) {
        size_t ro, rl;
        split(m, s->n, r, &ro, &rl);
        copy_out(dst + (off + ro) * es, slot_of(s, r, k2) + ro * es, rl * es, stream);
      }
      if (stream) _mm_sfence();
    }
    consumed(s, k2);
  }
  return BAGUA_OK;
}

static bagua_status_t shm_allreduce(bagua_comm_t *c, const void *sv, void *rv, size_t count,
                                    bagua_dtype_t dt, bagua_op_t op) {
  if (count * bagua_dtype_size(dt) <= SMALL_ALLREDUCE &&
      count * bagua_dtype_size(dt) <= c->shm->slot)
    return shm_allreduce_small(c->shm, sv, rv, count, dt, op);
  return shm_reduce_common(c, sv, rv, count, dt, op, BAGUA__NO_ROOT);
}

static bagua_status_t shm_reduce(bagua_comm_t *c, const void *sv, void *rv, size_t count,
                                 bagua_dtype_t dt, bagua_op_t op, int root) {
  return shm_reduce_common(c, sv, rv, count, dt, op, root);
}

static bagua_status_t shm_broadcast(bagua_comm_t *c, const void *sv, void *rv, size_t count,
                                    bagua_dtype_t dt, int root) {
  bagua__shm_t *s = c->shm;
  size_t bytes = count * bagua_dtype_size(dt);
  if (s->me == root && sv != rv) memcpy(rv, sv, bytes);
  for (size_t off = 0; off < bytes; off += s->slot) {
    size_t m = bytes - off < s->slot ? bytes - off : s->slot;
    uint64_t k;
    BAGUA_CHECK(round_begin(s, &k));
    if (s->me == root) {
      memcpy(slot_of(s, root, k), (const char *)sv + off, m);
      count_sent(s, m);
    }
    publish(s, k);
    BAGUA_CHECK(sig_check(s, k));
    if (s->me != root) {
      BAGUA_CHECK(wait_ge(s, &s->ctrl[root].pub, k, root));
      memcpy((char *)rv + off, slot_of(s, root, k), m);
    }
    consumed(s, k);
  }
  return BAGUA_OK;
}

/*
 * Block-wise personalised exchange shared by reduce_scatter, alltoall, gather and scatter:
 * each round carries m elements of each of the n blocks of a rank's input.
 */
typedef enum { X_REDUCE_SCATTER, X_ALLTOALL, X_ALLGATHER, X_GATHER, X_SCATTER } xkind_t;

static bagua_status_t shm_blocks(bagua_comm_t *c, xkind_t kind, const void *sv, void *rv,
                                 size_t count, bagua_dtype_t dt, bagua_op_t op, int root) {
  bagua__shm_t *s = c->shm;
  int n = s->n, me = s->me;
  size_t es = bagua_dtype_size(dt);
  /* Kinds where a rank contributes one block stage m elements; the others stage n blocks. */
  int one_block = kind == X_ALLGATHER || kind == X_GATHER;
  size_t per = s->slot / es / (one_block ? 1 : (size_t)n);
  const char *src = sv;
  char *dst = rv;
  for (size_t off = 0; off < count; off += per) {
    size_t m = count - off < per ? count - off : per, mb = m * es;
    uint64_t k;
    BAGUA_CHECK(round_begin(s, &k));
    char *mine = slot_of(s, me, k);
    int writer = kind != X_SCATTER || me == root;
    if (writer) {
      if (one_block) {
        memcpy(mine, src + off * es, mb);
      } else {
        for (int j = 0; j < n; j++)
          memcpy(mine + (size_t)j * mb, src + ((size_t)j * count + off) * es, mb);
      }
      count_sent(s, one_block ? mb : mb * (size_t)n);
    }
    publish(s, k);
    BAGUA_CHECK(sig_check(s, k));
    switch (kind) {
      case X_REDUCE_SCATTER:
        BAGUA_CHECK(wait_all(s, k));
        reduce_slots(s, k, (size_t)me * mb, m, dst + off * es, dt, op);
        break;
      case X_ALLTOALL:
        BAGUA_CHECK(wait_all(s, k));
        for (int j = 0; j < n; j++)
          memcpy(dst + ((size_t)j * count + off) * es, slot_of(s, j, k) + (size_t)me * mb, mb);
        break;
      case X_ALLGATHER:
      case X_GATHER:
        if (kind == X_GATHER && me != root) break;
        BAGUA_CHECK(wait_all(s, k));
        for (int j = 0; j < n; j++)
          memcpy(dst + ((size_t)j * count + off) * es, slot_of(s, j, k), mb);
        break;
      case X_SCATTER:
        BAGUA_CHECK(wait_ge(s, &s->ctrl[root].pub, k, root));
        memcpy(dst + off * es, slot_of(s, root, k) + (size_t)me * mb, mb);
        break;
    }
    consumed(s, k);
  }
  return BAGUA_OK;
}

static bagua_status_t shm_reduce_scatter(bagua_comm_t *c, const void *sv, void *rv, size_t count,
                                         bagua_dtype_t dt, bagua_op_t op) {
  return shm_blocks(c, X_REDUCE_SCATTER, sv, rv, count, dt, op, BAGUA__NO_ROOT);
}
static bagua_status_t shm_alltoall(bagua_comm_t *c, const void *sv, void *rv, size_t count,
                                   bagua_dtype_t dt) {
  return shm_blocks(c, X_ALLTOALL, sv, rv, count, dt, BAGUA_SUM, BAGUA__NO_ROOT);
}
static bagua_status_t shm_allgather(bagua_comm_t *c, const void *sv, void *rv, size_t count,
                                    bagua_dtype_t dt) {
  return shm_blocks(c, X_ALLGATHER, sv, rv, count, dt, BAGUA_SUM, BAGUA__NO_ROOT);
}
static bagua_status_t shm_gather(bagua_comm_t *c, const void *sv, void *rv, size_t count,
                                 bagua_dtype_t dt, int root) {
  return shm_blocks(c, X_GATHER, sv, rv, count, dt, BAGUA_SUM, root);
}
static bagua_status_t shm_scatter(bagua_comm_t *c, const void *sv, void *rv, size_t count,
                                  bagua_dtype_t dt, int root) {
  return shm_blocks(c, X_SCATTER, sv, rv, count, dt, BAGUA_SUM, root);
}

static bagua_status_t shm_barrier(bagua_comm_t *c) {
  bagua__shm_t *s = c->shm;
  uint64_t k;
  BAGUA_CHECK(round_begin(s, &k));
  publish(s, k);
  BAGUA_CHECK(sig_check(s, k));
  BAGUA_CHECK(wait_all(s, k));
  consumed(s, k);
  return BAGUA_OK;
}

const bagua__coll_ops_t bagua__shm_ops = {
    "shm",         shm_allreduce, shm_reduce_scatter, shm_allgather, shm_alltoall,
    shm_broadcast, shm_reduce,    shm_gather,         shm_scatter,   shm_barrier,
};

/*
 * A process that exits without destroying its communicators (a script that returns after its
 * last step, a Python communicator never collected) leaves just as a destroy would, and its
 * peers should read its hang-up as such (check_liveness). An exit handler marks the arenas of
 * the communicators still alive as gone. It only sets flags, so it is safe while another thread
 * still uses a communicator (that thread publishes nothing after the exit, and a peer waiting
 * for it fails at once, naming it). It acts only in the process that set an arena up: a forked
 * child that exits must not speak for its parent. It never waits: if another thread holds the
 * list's lock at exit, or a fork copied the lock held, the arenas stay unmarked and a peer
 * reads the exit as a death, as it would without the handler.
 */
static pthread_mutex_t g_live_mu = PTHREAD_MUTEX_INITIALIZER;
static bagua__shm_t *g_live;
static pthread_once_t g_exit_once = PTHREAD_ONCE_INIT;

static void mark_gone_at_exit(void) {
  if (pthread_mutex_trylock(&g_live_mu) != 0) return;
  pid_t me = getpid();
  for (bagua__shm_t *s = g_live; s; s = s->next_live)
    if (s->owner == me) atomic_store_explicit(&s->ctrl[s->me].gone, 1, memory_order_release);
  pthread_mutex_unlock(&g_live_mu);
}

static void register_exit_handler(void) {
  if (atexit(mark_gone_at_exit) != 0)
    BAGUA_WARN(
        "cannot register the exit handler of the shared-memory transport: a rank that "
        "exits without destroying its communicator will look dead to its peers");
}

static void live_add(bagua__shm_t *s) {
  pthread_once(&g_exit_once, register_exit_handler);
  s->owner = getpid();
  pthread_mutex_lock(&g_live_mu);
  s->next_live = g_live;
  g_live = s;
  pthread_mutex_unlock(&g_live_mu);
}

static void live_remove(bagua__shm_t *s) {
  pthread_mutex_lock(&g_live_mu);
  for (bagua__shm_t **p = &g_live; *p; p = &(*p)->next_live)
    if (*p == s) {
      *p = s->next_live;
      break;
    }
  pthread_mutex_unlock(&g_live_mu);
}

bagua_status_t bagua__shm_setup(bagua_comm_t *c) {
  bagua_status_t st = BAGUA_OK;
  bagua__shm_t *s = NULL;
  int fd = -1;
  char name[96];
  BAGUA_CALLOC(s, 1);
  s->c = c;
  s->n = c->size;
  s->me = c->rank;
  s->slot = ((size_t)bagua__param_int(BAGUA_P_SHM_SLOT_BYTES) + 4095) & ~(size_t)4095;
  s->spin = (int)bagua__param_int(BAGUA_P_SHM_SPIN);
  if (!bagua__param_is_set(BAGUA_P_SHM_SPIN)) {
    /* With more ranks than usable CPUs, the rank being waited for is usually descheduled:
     * spinning only delays it. Measured with 4 ranks on 2 CPUs: yielding at once gave 2.6-3.4
     * us per 8-byte allreduce against 6.9 us after 200 spins; with 2 ranks on 2 CPUs spinning
     * wins (0.39 against 0.55 us). Sleeping on a futex instead of yielding was tried and lost
     * (25-31 us, no bandwidth gain). */
    cpu_set_t set;
    int cpus = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
    if (s->n > cpus) s->spin = 0;
  }
  s->map_bytes = HEADER_BYTES + sizeof(ctrl_t) * (size_t)s->n;
  s->map_bytes = (s->map_bytes + 4095) & ~(size_t)4095;
  size_t ctrl_end = s->map_bytes;
  s->map_bytes += (size_t)s->n * 2 * s->slot;
  s->pfd = calloc((size_t)s->n, sizeof(*s->pfd));
  s->srcs = calloc((size_t)s->n, sizeof(*s->srcs));
  if (!s->pfd || !s->srcs) {
    free(s->pfd);
    free(s->srcs);
    free(s);
    return BAGUA_ERR_NO_MEMORY;
  }
  c->shm = s;
  snprintf(name, sizeof(name), "/bagua-%016llx-%d", (unsigned long long)c->comm_id,
           (int)c->eps[0].pid);
  if (c->rank == 0) {
    shm_unlink(name); /* a stale arena of a crashed run with the same id */
    fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    /* ftruncate alone succeeds on a tmpfs too small for the arena, whose pages then fault
     * with SIGBUS when first touched; posix_fallocate reserves them now, so a small /dev/shm
     * fails here, on every rank (the barrier below), with a message instead. */
    int rc = 0;
    if (fd < 0 || ftruncate(fd, (off_t)s->map_bytes) != 0)
      rc = errno;
    else
      rc = posix_fallocate(fd, 0, (off_t)s->map_bytes);
    if (rc != 0) {
      BAGUA_WARN(
          "cannot reserve shared memory %s of %zu bytes in /dev/shm: %s; make /dev/shm larger, "
          "lower BAGUA_SHM_SLOT_BYTES (the per-rank size), or use BAGUA_TRANSPORT=tcp",
          name, s->map_bytes, strerror(rc));
      st = BAGUA_ERR_SYSTEM;
    }
  }
  /* Creation must be complete before the others open it; the barrier also shares failure. */
  bagua_status_t bst = bagua__tcp_barrier(c);
  if (st == BAGUA_OK) st = bst;
  if (st != BAGUA_OK) goto fail;
  if (c->rank != 0) {
    fd = shm_open(name, O_RDWR, 0600);
    if (fd < 0) {
      BAGUA_WARN("cannot open shared memory %s: %s", name, strerror(errno));
      st = BAGUA_ERR_SYSTEM;
    }
  }
  if (fd >= 0) {
    s->base = mmap(NULL, s->map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (s->base == MAP_FAILED) {
      s->base = NULL;
      BAGUA_WARN("cannot map shared memory %s: %s", name, strerror(errno));
      st = BAGUA_ERR_SYSTEM;
    }
    close(fd);
  }
  if (st == BAGUA_OK) {
    s->hdr = (arena_hdr_t *)s->base;
    s->ctrl = (ctrl_t *)(s->base + HEADER_BYTES);
    s->data = s->base + ctrl_end;
    if (c->rank == 0) {
      s->hdr->magic = BAGUA_SHM_ARENA_MAGIC;
      s->hdr->nranks = s->n;
      s->hdr->slot_bytes = s->slot;
    }
  }
  /* After this barrier everyone has mapped the arena, so its name can go: nothing leaks in
   * /dev/shm even if every rank is killed later. */
  bst = bagua__tcp_barrier(c);
  if (st == BAGUA_OK) st = bst;
  if (c->rank == 0) shm_unlink(name);
  if (st != BAGUA_OK) goto fail;
  if (s->hdr->magic != BAGUA_SHM_ARENA_MAGIC || s->hdr->nranks != s->n ||
      s->hdr->slot_bytes != s->slot) {
    BAGUA_WARN(
        "shared memory arena layout differs between ranks (BAGUA_SHM_SLOT_BYTES must be "
        "the same on every rank)");
    st = BAGUA_ERR_INVALID_ARG;
    goto fail;
  }
  live_add(s);
  BAGUA_INFO(BAGUA_SUBSYS_INIT, "shm arena %s: %d ranks, %zu-byte slots", name, s->n, s->slot);
  return BAGUA_OK;
fail:
  return st; /* the caller destroys the communicator, which frees s */
}

void bagua__shm_abort(bagua__shm_t *s) {
  if (s && s->hdr) atomic_store(&s->hdr->abort, 1);
}

void bagua__shm_destroy(bagua__shm_t *s) {
  if (!s) return;
  if (s->owner) live_remove(s);
  /* The caller closes the streams next; this tells the ranks that see the hang-up that it is
   * a departure, not a death (check_liveness). */
  if (s->ctrl) atomic_store_explicit(&s->ctrl[s->me].gone, 1, memory_order_release);
  if (s->base) munmap(s->base, s->map_bytes);
  free(s->pfd);
  free(s->srcs);
  free(s);
}
