/*
 * The argument and signature contract of the collectives (docs/comm.md, "Argument contract"):
 *
 *   mismatch  every mismatch kind (count, dtype, op, root, collective) on every collective makes
 *             every rank return BAGUA_ERR_PROTOCOL with a message naming the difference, and a
 *             correct collective succeeds afterwards;
 *   roots     root -1, root == size and INT_MIN are BAGUA_ERR_INVALID_ARG on every rank for
 *             every collective that takes a root, and do not poison the communicator;
 *   refuse    an argument error on one rank only (the root-only buffer checks of broadcast,
 *             reduce, gather and scatter, a NULL or overlapping buffer, an invalid dtype, op
 *             or root elsewhere), on the root, on another rank and on both: every rank returns
 *             BAGUA_ERR_INVALID_ARG at that call, the refusing rank naming its argument and
 *             the others the refusing rank, and the next call works on every rank;
 *   property  seeded random sequences of collectives, some with a random field changed on a
 *             random rank or refused arguments on one rank: every call either returns OK with
 *             the oracle's result on every rank or fails on every rank (BAGUA_ERR_PROTOCOL, or
 *             BAGUA_ERR_INVALID_ARG for a refusal), never OK with wrong data; crashes and
 *             hangs fail through mp_run's deadline and the communicator timeout.
 *
 * Usage: test_coll_contract mismatch|roots|refuse|property tcp|shm|auto NRANKS [RANKS_PER_NODE]
 *        ["NAME=VALUE;..."]. The property seed is BAGUA_TEST_SEED (printed; default: the time),
 *        the number of calls BAGUA_TEST_CALLS (default 400).
 */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../test.h"
#include "mp.h"

enum {
  K_ALLREDUCE = 1,
  K_REDUCE_SCATTER,
  K_ALLGATHER,
  K_ALLTOALL,
  K_BROADCAST,
  K_REDUCE,
  K_GATHER,
  K_SCATTER,
  K_BARRIER,
  K_COUNT = K_BARRIER
};

static const char *const k_names[] = {"",         "allreduce", "reduce_scatter", "allgather",
                                      "alltoall", "broadcast", "reduce",         "gather",
                                      "scatter",  "barrier"};

static int has_op(int k) {
  return k == K_ALLREDUCE || k == K_REDUCE_SCATTER || k == K_REDUCE;
}
static int has_root(int k) {
  return k == K_BROADCAST || k == K_REDUCE || k == K_GATHER || k == K_SCATTER;
}

typedef struct {
  int kind;
  size_t count;
  bagua_dtype_t dt;
  bagua_op_t op;
  int root;
  int inplace; /* allreduce only */
} call_t;

/* Small integers: exact in every dtype used here, and sums of up to 64 ranks too. */
static double val(int rank, size_t i, int salt) {
  return (double)((long)(((size_t)rank * 7 + i * 13 + (size_t)salt) % 9) - 4);
}

static void store(bagua_dtype_t dt, void *b, size_t i, double v) {
  char *p = (char *)b + i * bagua_dtype_size(dt);
  float f = (float)v;
  int32_t i32 = (int32_t)v;
  int64_t i64 = (int64_t)v;
  switch (dt) {
    case BAGUA_F32:
      memcpy(p, &f, 4);
      break;
    case BAGUA_F64:
      memcpy(p, &v, 8);
      break;
    case BAGUA_I32:
      memcpy(p, &i32, 4);
      break;
    default:
      memcpy(p, &i64, 8);
      break;
  }
}

static double load(bagua_dtype_t dt, const void *b, size_t i) {
  const char *p = (const char *)b + i * bagua_dtype_size(dt);
  float f;
  double d;
  int32_t i32;
  int64_t i64;
  switch (dt) {
    case BAGUA_F32:
      memcpy(&f, p, 4);
      return f;
    case BAGUA_F64:
      memcpy(&d, p, 8);
      return d;
    case BAGUA_I32:
      memcpy(&i32, p, 4);
      return i32;
    default:
      memcpy(&i64, p, 8);
      return (double)i64;
  }
}

static double fold(bagua_op_t op, int n, size_t i, int salt) {
  double acc = val(0, i, salt);
  for (int q = 1; q < n; q++) {
    double v = val(q, i, salt);
    if (op == BAGUA_SUM) acc += v;
    if (op == BAGUA_MIN && v < acc) acc = v;
    if (op == BAGUA_MAX && v > acc) acc = v;
  }
  return acc;
}

/* Fills this rank's input for `a` (n blocks for the block kinds, so one buffer serves all). */
static void fill(const call_t *a, void *s, int me, int n, int salt) {
  size_t total = a->count * (size_t)n;
  for (size_t i = 0; i < total; i++) store(a->dt, s, i, val(me, i, salt));
}

static bagua_status_t issue(bagua_comm_t *c, const call_t *a, void *s, void *r) {
  void *out = a->inplace ? s : r;
  switch (a->kind) {
    case K_ALLREDUCE:
      return bagua_allreduce(c, s, out, a->count, a->dt, a->op);
    case K_REDUCE_SCATTER:
      return bagua_reduce_scatter(c, s, r, a->count, a->dt, a->op);
    case K_ALLGATHER:
      return bagua_allgather(c, s, r, a->count, a->dt);
    case K_ALLTOALL:
      return bagua_alltoall(c, s, r, a->count, a->dt);
    case K_BROADCAST:
      return bagua_broadcast(c, s, r, a->count, a->dt, a->root);
    case K_REDUCE:
      return bagua_reduce(c, s, r, a->count, a->dt, a->op, a->root);
    case K_GATHER:
      return bagua_gather(c, s, r, a->count, a->dt, a->root);
    case K_SCATTER:
      return bagua_scatter(c, s, r, a->count, a->dt, a->root);
    default:
      return bagua_barrier(c);
  }
}

/* Checks the output of a successful call against the oracle; returns 0 when right. */
static int verify(const call_t *a, const void *s, const void *r, int me, int n, int salt) {
  const void *out = a->inplace ? s : r;
  size_t cnt = a->count, total = cnt * (size_t)n;
  for (size_t i = 0; i < total; i++) {
    double want, got;
    size_t j = cnt ? i / cnt : 0, e = cnt ? i % cnt : 0;
    switch (a->kind) {
      case K_ALLREDUCE:
        if (i >= cnt) return 0;
        want = fold(a->op, n, i, salt);
        break;
      case K_REDUCE:
        if (i >= cnt || me != a->root) return 0;
        want = fold(a->op, n, i, salt);
        break;
      case K_REDUCE_SCATTER:
        if (i >= cnt) return 0;
        want = fold(a->op, n, (size_t)me * cnt + i, salt);
        break;
      case K_ALLGATHER:
        want = val((int)j, e, salt);
        break;
      case K_GATHER:
        if (me != a->root) return 0;
        want = val((int)j, e, salt);
        break;
      case K_ALLTOALL:
        want = val((int)j, (size_t)me * cnt + e, salt);
        break;
      case K_BROADCAST:
        if (i >= cnt) return 0;
        want = val(a->root, i, salt);
        break;
      case K_SCATTER:
        if (i >= cnt) return 0;
        want = val(a->root, (size_t)me * cnt + i, salt);
        break;
      default:
        return 0;
    }
    got = load(a->dt, out, i);
    if (got != want) {
      fprintf(stderr, "rank %d: %s count %zu %s element %zu is %g, expected %g\n", me,
              k_names[a->kind], cnt, bagua_dtype_name(a->dt), i, got, want);
      return 1;
    }
  }
  return 0;
}

/* A correct collective right after a refused one: the communicator must still be usable. */
static int still_usable(bagua_comm_t *c, int me, int n) {
  int32_t v[5], want = 0;
  for (int q = 0; q < n; q++) want += q + 1;
  for (int i = 0; i < 5; i++) v[i] = me + 1;
  bagua_status_t st = bagua_allreduce(c, v, v, 5, BAGUA_I32, BAGUA_SUM);
  if (st != BAGUA_OK) {
    fprintf(stderr, "rank %d: allreduce after a refused call returned %s\n", me,
            bagua_err_name(st));
    return 1;
  }
  for (int i = 0; i < 5; i++)
    if (v[i] != want) {
      fprintf(stderr, "rank %d: allreduce after a refused call gave %d, expected %d\n", me, v[i],
              want);
      return 1;
    }
  return 0;
}

typedef struct {
  int ranks;
  char *s, *r;
  size_t cap; /* bytes of each buffer */
} bufs_t;

static void bufs_init(bufs_t *b, int n, size_t max_count) {
  b->cap = max_count * 8 * (size_t)n + 64;
  b->s = calloc(1, b->cap);
  b->r = calloc(1, b->cap);
  if (!b->s || !b->r) TEST_FAIL("out of memory");
}

/* ---- mismatch: every kind of difference on every collective ---- */

enum { M_COUNT, M_COUNT_BIG, M_DTYPE, M_OP, M_ROOT, M_KIND, M__N };
static const char *const m_names[] = {"count", "count (multi-round)", "dtype", "op",
                                      "root",  "collective"};
/* What the warning must name for each mismatch kind. */
static const char *const m_words[] = {"count", "count", "dtype", "op", "root", "called"};

static int mismatch_body(bagua_comm_t *c, void *arg) {
  (void)arg;
  int n = bagua_comm_size(c), me = bagua_comm_rank(c), odd = n - 1, fails = 0;
  bufs_t b;
  bufs_init(&b, n, 70001);
  /* 64 elements go through the transport after the agreement; 2 (8 bytes) ride in the
   * agreement's own frames on a power-of-two TCP world (comm/sig.c), against calls that ride
   * differently (12 bytes) or not at all (the multi-round count, another collective). */
  static const size_t bases[] = {64, 2};
  for (size_t bi = 0; bi < sizeof(bases) / sizeof(bases[0]); bi++)
    for (int k = 1; k <= K_COUNT; k++) {
      for (int m = 0; m < M__N; m++) {
        if (k == K_BARRIER && m != M_KIND) continue;
        if (m == M_OP && !has_op(k)) continue;
        if (m == M_ROOT && !has_root(k)) continue;
        call_t a = {k, bases[bi], BAGUA_F32, BAGUA_SUM, 0, 0};
        if (me == odd) {
          switch (m) {
            case M_COUNT:
              a.count = bases[bi] + 1;
              break;
            case M_COUNT_BIG:
              a.count = 70001;
              break;
            case M_DTYPE:
              a.dt = BAGUA_I32; /* same element size: the silent case before the check */
              break;
            case M_OP:
              a.op = BAGUA_MAX;
              break;
            case M_ROOT:
              a.root = 1;
              break;
            default:
              a.kind = k % K_COUNT + 1;
              break;
          }
        }
        fill(&a, b.s, me, n, k);
        /* On TCP no data moves before the agreement passes, riding or not: a refused call
         * leaves the receive buffer as it was. */
        int tcp = strcmp(bagua_comm_transport_name(c), "tcp") == 0;
        memset(b.r, 0x5a, b.cap);
        bagua_status_t st = issue(c, &a, b.s, b.r);
        const char *err = bagua_last_error();
        for (size_t i = 0; tcp && i < b.cap; i++)
          if ((unsigned char)b.r[i] != 0x5a) {
            fprintf(stderr, "FAIL rank %d: %s with a %s mismatch wrote the receive buffer\n", me,
                    k_names[k], m_names[m]);
            fails++;
            break;
          }
        if (st != BAGUA_ERR_PROTOCOL) {
          fprintf(stderr,
                  "FAIL rank %d: %s with a %s mismatch returned %s, expected "
                  "BAGUA_ERR_PROTOCOL\n",
                  me, k_names[k], m_names[m], bagua_err_name(st));
          fails++;
        } else if (!strstr(err, m_words[m]) || !strstr(err, "rank")) {
          fprintf(stderr,
                  "FAIL rank %d: %s with a %s mismatch: the warning \"%s\" does not name "
                  "it\n",
                  me, k_names[k], m_names[m], err);
          fails++;
        }
        if (bagua_comm_get_async_error(c) != BAGUA_OK) {
          fprintf(stderr, "FAIL rank %d: a mismatch poisoned the communicator (%s)\n", me,
                  bagua_err_name(bagua_comm_get_async_error(c)));
          return 1;
        }
        if (still_usable(c, me, n)) return 1;
      }
    }
  if (me == 0 && !fails) printf("mismatch: every kind on every collective refused by all ranks\n");
  free(b.s);
  free(b.r);
  return fails ? 1 : 0;
}

/* ---- roots: -1, size and INT_MIN refused everywhere, without poisoning ---- */

static int roots_body(bagua_comm_t *c, void *arg) {
  (void)arg;
  int n = bagua_comm_size(c), me = bagua_comm_rank(c), fails = 0;
  const int bad[] = {-1, n, n + 1, INT_MIN, INT_MAX};
  bufs_t b;
  bufs_init(&b, n, 64);
  for (int k = 1; k <= K_COUNT; k++) {
    if (!has_root(k)) continue;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
      for (size_t count = 0; count <= 16; count += 16) {
        call_t a = {k, count, BAGUA_F32, BAGUA_SUM, bad[i], 0};
        bagua_status_t st = issue(c, &a, b.s, b.r);
        if (st != BAGUA_ERR_INVALID_ARG) {
          fprintf(stderr, "FAIL rank %d: %s with root %d count %zu returned %s\n", me, k_names[k],
                  bad[i], count, bagua_err_name(st));
          fails++;
        } else if (!strstr(bagua_last_error(), "root")) {
          fprintf(stderr, "FAIL rank %d: the warning \"%s\" does not name the root\n", me,
                  bagua_last_error());
          fails++;
        }
      }
    }
  }
  /* Other invalid arguments the one check refuses, also without poisoning. */
  float x[8] = {0};
  ASSERT_STATUS(bagua_allreduce(c, x, x, 1, BAGUA_F32, (bagua_op_t)-1), BAGUA_ERR_INVALID_ARG);
  ASSERT_STATUS(bagua_allreduce(c, x, x, 1, (bagua_dtype_t)99, BAGUA_SUM), BAGUA_ERR_INVALID_ARG);
  ASSERT_STATUS(bagua_allreduce(c, NULL, x, 1, BAGUA_F32, BAGUA_SUM), BAGUA_ERR_INVALID_ARG);
  ASSERT_STATUS(bagua_allreduce(c, x, x + 1, 4, BAGUA_F32, BAGUA_SUM), BAGUA_ERR_INVALID_ARG);
  ASSERT_STATUS(bagua_allreduce(c, x, x, SIZE_MAX / 2, BAGUA_F32, BAGUA_SUM),
                BAGUA_ERR_INVALID_ARG);
  ASSERT_STATUS(bagua_send(c, x, 1, BAGUA_F32, -1), BAGUA_ERR_INVALID_ARG);
  if (bagua_comm_get_async_error(c) != BAGUA_OK) TEST_FAIL("an invalid argument poisoned");
  if (still_usable(c, me, n)) return 1;
  /* And the valid roots still work on every collective that has one. */
  for (int k = 1; k <= K_COUNT; k++) {
    if (!has_root(k)) continue;
    for (int root = 0; root < n; root++) {
      call_t a = {k, 16, BAGUA_F32, BAGUA_SUM, root, 0};
      fill(&a, b.s, me, n, root);
      ASSERT_OK(issue(c, &a, b.s, b.r));
      if (verify(&a, b.s, b.r, me, n, root)) fails++;
    }
  }
  free(b.s);
  free(b.r);
  return fails ? 1 : 0;
}

/* ---- refuse: an argument error that only some ranks see fails on every rank ---- */

/* The local errors: each makes the check of the rank that has it fail, on its own. */
enum { R_NULL_SEND, R_NULL_RECV, R_OVERLAP, R_DTYPE, R_OP, R_ROOT, R__N };
static const char *const r_names[] = {"NULL sendbuf",  "NULL recvbuf", "overlapping buffers",
                                      "invalid dtype", "invalid op",   "out-of-range root"};
/* What the refusing rank's own warning must name. */
static const char *const r_words[] = {"sendbuf", "recvbuf", "overlap", "dtype", "op", "root"};

/* Whether error e at a rank that is (or is not) the root is refused by that rank's check: the
 * root-only checks (broadcast's and scatter's send buffer, reduce's and gather's receive
 * buffer and in-place rules) are the ones only one rank can evaluate. */
static int refusable(int k, int e, int at_root) {
  switch (e) {
    case R_NULL_SEND:
      return k == K_BROADCAST || k == K_SCATTER ? at_root : k != K_BARRIER;
    case R_NULL_RECV:
      return k == K_REDUCE || k == K_GATHER ? at_root : k != K_BARRIER;
    case R_OVERLAP:
      return has_root(k) ? at_root : k != K_BARRIER;
    case R_DTYPE:
      return k != K_BARRIER;
    case R_OP:
      return has_op(k);
    default:
      return has_root(k);
  }
}

/* Calls `a` with error e applied on this rank. */
static bagua_status_t issue_bad(bagua_comm_t *c, call_t a, int e, char *s, char *r) {
  size_t es = bagua_dtype_size(a.dt);
  switch (e) {
    case R_NULL_SEND:
      return issue(c, &a, NULL, r);
    case R_NULL_RECV:
      /* broadcast's root reads s, the others write r: a NULL r at a non-root */
      return issue(c, &a, s, NULL);
    case R_OVERLAP:
      /* The send buffer one element past the receive buffer's start (or its in-place
       * position): overlapping, and not the in-place layout of any collective. */
      if (a.kind == K_REDUCE_SCATTER || a.kind == K_SCATTER) return issue(c, &a, s, s + es);
      return issue(c, &a, r + es, r);
    case R_DTYPE:
      a.dt = (bagua_dtype_t)99;
      return issue(c, &a, s, r);
    case R_OP:
      a.op = (bagua_op_t)77;
      return issue(c, &a, s, r);
    default:
      a.root = -1;
      return issue(c, &a, s, r);
  }
}

static int refuse_body(bagua_comm_t *c, void *arg) {
  (void)arg;
  int n = bagua_comm_size(c), me = bagua_comm_rank(c), fails = 0, cases = 0;
  bufs_t b;
  bufs_init(&b, n, 70001);
  const size_t counts[] = {64, 70001}; /* one round and many rounds on shared memory */
  for (int k = 1; k <= K_COUNT; k++) {
    for (int e = 0; e < R__N; e++) {
      for (int root = 0; root < n; root += n - 1) {
        /* The refusing rank: the root for the root-only checks, a non-root when there is one
         * and the error is refusable there, and both at once. */
        for (int sel = 0; sel < 3; sel++) {
          int bad[2] = {-1, -1};
          int other = root == 0 ? n - 1 : 0;
          if (sel == 0 || sel == 2) bad[0] = refusable(k, e, 1) ? root : -1;
          if (sel == 1 || sel == 2) bad[1] = refusable(k, e, 0) ? other : -1;
          if (bad[0] < 0 && bad[1] < 0) continue;
          if (sel == 2 && (bad[0] < 0 || bad[1] < 0)) continue;
          if (!has_root(k) && root != 0) continue;
          int mine = me == bad[0] || me == bad[1];
          int first = bad[0] < 0 ? bad[1] : bad[1] < 0 ? bad[0] : bad[0] < bad[1] ? bad[0] : bad[1];
          size_t count = counts[cases % 2];
          call_t a = {k, count, BAGUA_F32, BAGUA_SUM, root, 0};
          fill(&a, b.s, me, n, k);
          bagua_status_t st = mine ? issue_bad(c, a, e, b.s, b.r) : issue(c, &a, b.s, b.r);
          const char *err = bagua_last_error();
          char want[64];
          snprintf(want, sizeof(want), "rank %d refused its arguments", first);
          cases++;
          if (st != BAGUA_ERR_INVALID_ARG) {
            fprintf(stderr,
                    "FAIL rank %d: %s (root %d, count %zu) with a %s on rank %d%s returned %s, "
                    "expected BAGUA_ERR_INVALID_ARG on every rank\n",
                    me, k_names[k], root, count, r_names[e], first, sel == 2 ? " and another" : "",
                    bagua_err_name(st));
            fails++;
          } else if (mine ? !strstr(err, r_words[e]) : !strstr(err, want)) {
            fprintf(stderr,
                    "FAIL rank %d: %s with a %s on rank %d: the warning \"%s\" does not "
                    "name %s\n",
                    me, k_names[k], r_names[e], first, err, mine ? r_words[e] : want);
            fails++;
          }
          if (bagua_comm_get_async_error(c) != BAGUA_OK) {
            fprintf(stderr, "FAIL rank %d: a refused call poisoned the communicator (%s)\n", me,
                    bagua_err_name(bagua_comm_get_async_error(c)));
            return 1;
          }
          /* In phase: the next call pairs with the next call on every rank. */
          if (still_usable(c, me, n)) return 1;
        }
      }
    }
  }
  /* Every rank refusing, each for its own reason: each keeps its own reason. */
  float x[8] = {0};
  bagua_status_t st = me % 2 ? bagua_allreduce(c, NULL, x, 1, BAGUA_F32, BAGUA_SUM)
                             : bagua_allreduce(c, x, x, 1, (bagua_dtype_t)99, BAGUA_SUM);
  if (st != BAGUA_ERR_INVALID_ARG || !strstr(bagua_last_error(), me % 2 ? "sendbuf" : "dtype")) {
    fprintf(stderr, "FAIL rank %d: every rank refusing returned %s (\"%s\")\n", me,
            bagua_err_name(st), bagua_last_error());
    fails++;
  }
  if (still_usable(c, me, n)) return 1;
  if (me == 0 && !fails)
    printf("refuse: %d one-rank argument errors refused by every rank, communicator in phase\n",
           cases);
  free(b.s);
  free(b.r);
  return fails ? 1 : 0;
}

/* ---- property: random calls with random per-rank mismatches ---- */

static uint64_t g_seed;
static int g_calls = 400;

static uint64_t next(uint64_t *x) { /* splitmix64 */
  uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static int pick(uint64_t *x, int n) {
  return (int)(next(x) % (uint64_t)n);
}

static const size_t p_counts[] = {0, 1, 3, 17, 1000, 9000, 70001};
static const bagua_dtype_t p_dtypes[] = {BAGUA_F32, BAGUA_I32, BAGUA_F64, BAGUA_I64};
static const bagua_op_t p_ops[] = {BAGUA_SUM, BAGUA_MIN, BAGUA_MAX};

static int property_body(bagua_comm_t *c, void *arg) {
  (void)arg;
  int n = bagua_comm_size(c), me = bagua_comm_rank(c);
  uint64_t x = g_seed; /* the same stream on every rank: each knows the whole script */
  bufs_t b;
  bufs_init(&b, n, 70002);
  int refused = 0, ok = 0;
  for (int i = 0; i < g_calls; i++) {
    call_t a = {
        pick(&x, K_COUNT) + 1, p_counts[pick(&x, (int)(sizeof(p_counts) / sizeof(p_counts[0])))],
        p_dtypes[pick(&x, 4)], p_ops[pick(&x, 3)],
        pick(&x, n),           pick(&x, 2)};
    if (a.kind != K_ALLREDUCE) a.inplace = 0;
    /* One call in three changes one field on one rank (n > 1), drawn so that it always
     * changes the signature. Every rank draws the same change and knows the outcome. */
    int mutate = n > 1 && pick(&x, 3) == 0, who = pick(&x, n), what = pick(&x, 6);
    if (a.kind == K_BARRIER) what = 4; /* a barrier has only its kind */
    if (what == 2 && !has_op(a.kind)) what = 4;
    if (what == 3 && !has_root(a.kind)) what = 4;
    call_t m = a;
    switch (what) {
      case 0:
        m.count = a.count < 70001 ? a.count + 1 + (size_t)pick(&x, 3) : a.count - 1;
        break;
      case 1: {
        int di = 0;
        while (p_dtypes[di] != a.dt) di++;
        m.dt = p_dtypes[(di + 1 + pick(&x, 3)) % 4];
        break;
      }
      case 2: {
        int oi = 0;
        while (p_ops[oi] != a.op) oi++;
        m.op = p_ops[(oi + 1 + pick(&x, 2)) % 3];
        break;
      }
      case 3:
        m.root = (a.root + 1 + pick(&x, n - 1)) % n;
        break;
      case 5:
        /* A refusal that only rank `who` sees: NULL buffers (refused by every kind's check
         * with a count), or an invalid dtype with count 0. */
        if (a.count == 0) m.dt = (bagua_dtype_t)99;
        break;
      default:
        m.kind = (a.kind + pick(&x, K_COUNT - 1)) % K_COUNT + 1;
        m.inplace = 0;
        break;
    }
    call_t mine = mutate && me == who ? m : a;
    int salt = i;
    fill(&mine, b.s, me, n, salt);
    memset(b.r, 0x5a, b.cap);
    int refuse = mutate && what == 5 && me == who && a.count > 0;
    bagua_status_t st = refuse ? issue(c, &mine, NULL, NULL) : issue(c, &mine, b.s, b.r);
    /* Every rank must have seen the same outcome: compare statuses with a correct call. */
    int32_t sts[64];
    int32_t my = (int32_t)st;
    bagua_status_t ast = bagua_allgather(c, &my, sts, 1, BAGUA_I32);
    if (ast != BAGUA_OK)
      TEST_FAIL("seed %llu call %d: the allgather of statuses returned %s (communicator lost)",
                (unsigned long long)g_seed, i, bagua_err_name(ast));
    for (int q = 0; q < n; q++)
      if (sts[q] != my)
        TEST_FAIL("seed %llu call %d (%s count %zu): rank %d returned %s, rank %d %s",
                  (unsigned long long)g_seed, i, k_names[a.kind], a.count, me, bagua_err_name(st),
                  q, bagua_err_name((bagua_status_t)sts[q]));
    if (mutate) {
      bagua_status_t want = what == 5 ? BAGUA_ERR_INVALID_ARG : BAGUA_ERR_PROTOCOL;
      if (st != want)
        TEST_FAIL(
            "seed %llu call %d: %s count %zu with a %s (field %d on rank %d) "
            "returned %s on every rank, expected %s",
            (unsigned long long)g_seed, i, k_names[a.kind], a.count,
            what == 5 ? "refusal" : "mismatch", what, who, bagua_err_name(st),
            bagua_err_name(want));
      refused++;
    } else {
      if (st != BAGUA_OK)
        TEST_FAIL("seed %llu call %d: %s count %zu returned %s", (unsigned long long)g_seed, i,
                  k_names[a.kind], a.count, bagua_err_name(st));
      if (verify(&mine, b.s, b.r, me, n, salt))
        TEST_FAIL("seed %llu call %d: wrong data", (unsigned long long)g_seed, i);
      ok++;
    }
  }
  if (me == 0)
    printf("property: %d calls right on every rank, %d refused on every rank\n", ok, refused);
  free(b.s);
  free(b.r);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr,
            "usage: %s mismatch|roots|refuse|property tcp|shm|auto NRANKS [RANKS_PER_NODE] "
            "[NAME=VALUE;...]\n",
            argv[0]);
    return 2;
  }
  mp_opts_t o = {0};
  const char *t = argv[2];
  o.transport = strcmp(t, "tcp") == 0   ? BAGUA_TRANSPORT_TCP
                : strcmp(t, "shm") == 0 ? BAGUA_TRANSPORT_SHM
                                        : BAGUA_TRANSPORT_AUTO;
  o.nranks = atoi(argv[3]);
  o.ranks_per_node = argc > 4 ? atoi(argv[4]) : 0;
  o.setenv_list = argc > 5 ? argv[5] : NULL;
  o.timeout_ms = 15000; /* a rank left waiting fails with BAGUA_ERR_TIMEOUT */
  o.deadline_s = 50;    /* and a hang or crash fails the run */
  if (o.nranks < 2 || o.nranks > 64) TEST_FAIL("NRANKS must be in [2, 64]");
  mp_body_fn body = NULL;
  if (strcmp(argv[1], "mismatch") == 0) body = mismatch_body;
  if (strcmp(argv[1], "roots") == 0) body = roots_body;
  if (strcmp(argv[1], "refuse") == 0) body = refuse_body;
  if (strcmp(argv[1], "property") == 0) {
    body = property_body;
    const char *s = getenv("BAGUA_TEST_SEED"), *k = getenv("BAGUA_TEST_CALLS");
    g_seed = s && *s ? strtoull(s, NULL, 0) : (uint64_t)time(NULL) ^ (uint64_t)clock();
    if (k && *k) g_calls = atoi(k);
    printf("property: seed %llu (rerun with BAGUA_TEST_SEED=%llu), %d calls, %s, %d ranks\n",
           (unsigned long long)g_seed, (unsigned long long)g_seed, g_calls, t, o.nranks);
  }
  if (!body) TEST_FAIL("unknown mode %s", argv[1]);
  int rc = mp_run(&o, body, NULL);
  if (rc) fprintf(stderr, "FAIL: %s on %s with %d ranks\n", argv[1], t, o.nranks);
  return rc ? 1 : 0;
}
