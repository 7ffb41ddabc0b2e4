/*
 * Every collective x dtype x op on N ranks against a reference computed here, with the edge
 * counts (0, 1, counts not divisible by N, multi-segment sizes), in-place and out-of-place,
 * and unaligned buffers.
 * Usage: test_collectives tcp|shm|auto NRANKS [RANKS_PER_NODE] ["NAME=VALUE;..."]
 * RANKS_PER_NODE > 0 emulates nodes through node ids (one per rank gives multi-stream TCP).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../test.h"
#include "kernels/kernels.h"
#include "mp.h"

static const size_t k_counts[] = {0, 1, 2, 3, 7, 17, 1000, 70001};
#define NCOUNTS (sizeof(k_counts) / sizeof(k_counts[0]))

static int g_fail;

static double val(bagua_dtype_t dt, int rank, size_t i, int salt) {
  if (dt == BAGUA_U8) return (double)((rank * 7 + i * 13 + (size_t)salt) % 5);
  return (double)((long)((rank * 7 + i * 13 + (size_t)salt) % 9) - 4);
}

static void store(bagua_dtype_t dt, void *b, size_t i, double v) {
  char *p = (char *)b + i * bagua_dtype_size(dt);
  float f = (float)v;
  int32_t i32 = (int32_t)v;
  int64_t i64 = (int64_t)v;
  uint8_t u8 = (uint8_t)v;
  uint16_t h;
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
    case BAGUA_I64:
      memcpy(p, &i64, 8);
      break;
    case BAGUA_U8:
      memcpy(p, &u8, 1);
      break;
    case BAGUA_F16:
      h = bagua__f32_to_f16(f);
      memcpy(p, &h, 2);
      break;
    case BAGUA_BF16:
      h = bagua__f32_to_bf16(f);
      memcpy(p, &h, 2);
      break;
    default:
      break;
  }
}

static double load(bagua_dtype_t dt, const void *b, size_t i) {
  const char *p = (const char *)b + i * bagua_dtype_size(dt);
  float f;
  double d;
  int32_t i32;
  int64_t i64;
  uint16_t h;
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
    case BAGUA_I64:
      memcpy(&i64, p, 8);
      return (double)i64;
    case BAGUA_U8:
      return (double)*(const uint8_t *)p;
    case BAGUA_F16:
      memcpy(&h, p, 2);
      return bagua__f16_to_f32(h);
    case BAGUA_BF16:
      memcpy(&h, p, 2);
      return bagua__bf16_to_f32(h);
    default:
      return 0;
  }
}

static double reduced(bagua_dtype_t dt, bagua_op_t op, int n, size_t i, int salt) {
  double acc = val(dt, 0, i, salt);
  for (int r = 1; r < n; r++) {
    double v = val(dt, r, i, salt);
    acc = op == BAGUA_MIN ? fmin(acc, v) : op == BAGUA_MAX ? fmax(acc, v) : acc + v;
  }
  if (op == BAGUA_AVG) {
    acc /= n;
    if (dt == BAGUA_I32 || dt == BAGUA_I64 || dt == BAGUA_U8) acc = trunc(acc);
  }
  return acc;
}

static void expect(const char *what, bagua_dtype_t dt, bagua_op_t op, size_t count, size_t i,
                   double got, double want) {
  double tol = 0;
  if (op == BAGUA_AVG)
    tol = dt == BAGUA_BF16 ? 1e-2 : dt == BAGUA_F16 ? 1e-3 : dt == BAGUA_F32 ? 1e-6 : 1e-12;
  if (fabs(got - want) <= tol * fmax(1, fabs(want))) return;
  if (g_fail++ < 10)
    fprintf(stderr, "FAIL %s dtype=%s op=%s count=%zu: element %zu is %g, expected %g\n", what,
            bagua_dtype_name(dt), bagua_op_name(op), count, i, got, want);
}

/* Buffers offset by 1..3 bytes so transports and kernels see unaligned pointers. */
static char *alloc_unaligned(size_t bytes, size_t skew, char **base) {
  *base = malloc(bytes + 8);
  return *base + skew;
}

static int body(bagua_comm_t *c, void *arg) {
  (void)arg;
  int n = bagua_comm_size(c), me = bagua_comm_rank(c);
  for (int dti = 0; dti < BAGUA_DTYPE__COUNT; dti++) {
    bagua_dtype_t dt = (bagua_dtype_t)dti;
    size_t es = bagua_dtype_size(dt);
    for (size_t ci = 0; ci < NCOUNTS; ci++) {
      size_t count = k_counts[ci], skew = ci % 4, total = count * (size_t)n;
      char *sb, *rb;
      char *s = alloc_unaligned(total * es, skew, &sb),
           *r = alloc_unaligned(total * es, 3 - skew, &rb);
      for (int opi = 0; opi < BAGUA_OP__COUNT; opi++) {
        bagua_op_t op = (bagua_op_t)opi;
        int salt = dti * 31 + opi;
        /* allreduce, out of place then in place */
        for (int inplace = 0; inplace < 2; inplace++) {
          for (size_t i = 0; i < count; i++) store(dt, s, i, val(dt, me, i, salt));
          void *out = inplace ? s : r;
          ASSERT_OK(bagua_allreduce(c, s, out, count, dt, op));
          for (size_t i = 0; i < count; i++)
            expect(inplace ? "allreduce(in-place)" : "allreduce", dt, op, count, i,
                   load(dt, out, i), reduced(dt, op, n, i, salt));
        }
        /* reduce_scatter: rank me gets block me; in place means recv = send + me*block */
        for (int inplace = 0; inplace < 2; inplace++) {
          for (size_t i = 0; i < total; i++) store(dt, s, i, val(dt, me, i, salt));
          void *out = inplace ? s + (size_t)me * count * es : r;
          ASSERT_OK(bagua_reduce_scatter(c, s, out, count, dt, op));
          for (size_t i = 0; i < count; i++)
            expect("reduce_scatter", dt, op, count, i, load(dt, out, i),
                   reduced(dt, op, n, (size_t)me * count + i, salt));
        }
        /* reduce to a root that moves with the op */
        int root = opi % n;
        for (size_t i = 0; i < count; i++) store(dt, s, i, val(dt, me, i, salt));
        ASSERT_OK(bagua_reduce(c, s, me == root ? r : NULL, count, dt, op, root));
        if (me == root)
          for (size_t i = 0; i < count; i++)
            expect("reduce", dt, op, count, i, load(dt, r, i), reduced(dt, op, n, i, salt));
      }
      int salt = dti * 7;
      /* allgather, out of place and in place */
      for (int inplace = 0; inplace < 2; inplace++) {
        const char *src = inplace ? r + (size_t)me * count * es : s;
        for (size_t i = 0; i < count; i++) store(dt, (void *)src, i, val(dt, me, i, salt));
        ASSERT_OK(bagua_allgather(c, src, r, count, dt));
        for (size_t i = 0; i < total; i++)
          expect("allgather", dt, BAGUA_SUM, count, i, load(dt, r, i),
                 val(dt, (int)(i / (count ? count : 1)), i % (count ? count : 1), salt));
      }
      /* alltoall: block p of rank q's input carries val(q, p*count+i) */
      for (int inplace = 0; inplace < 2; inplace++) {
        for (size_t i = 0; i < total; i++) store(dt, s, i, val(dt, me, i, salt));
        void *out = inplace ? s : r;
        ASSERT_OK(bagua_alltoall(c, s, out, count, dt));
        for (size_t i = 0; i < total; i++) {
          size_t q = i / (count ? count : 1), j = i % (count ? count : 1);
          expect("alltoall", dt, BAGUA_SUM, count, i, load(dt, out, i),
                 val(dt, (int)q, (size_t)me * count + j, salt));
        }
      }
      /* broadcast from every root, in place on the root */
      for (int root = 0; root < n; root++) {
        for (size_t i = 0; i < count; i++)
          store(dt, r, i, me == root ? val(dt, root, i, salt) : 99);
        ASSERT_OK(bagua_broadcast(c, r, r, count, dt, root));
        for (size_t i = 0; i < count; i++)
          expect("broadcast", dt, BAGUA_SUM, count, i, load(dt, r, i), val(dt, root, i, salt));
      }
      /* gather and scatter with the last rank as root */
      int root = n - 1;
      for (size_t i = 0; i < count; i++) store(dt, s, i, val(dt, me, i, salt));
      ASSERT_OK(bagua_gather(c, s, me == root ? r : NULL, count, dt, root));
      if (me == root)
        for (size_t i = 0; i < total; i++)
          expect("gather", dt, BAGUA_SUM, count, i, load(dt, r, i),
                 val(dt, (int)(i / (count ? count : 1)), i % (count ? count : 1), salt));
      if (me == root)
        for (size_t i = 0; i < total; i++) store(dt, s, i, val(dt, 100, i, salt));
      ASSERT_OK(bagua_scatter(c, me == root ? s : NULL, r, count, dt, root));
      for (size_t i = 0; i < count; i++)
        expect("scatter", dt, BAGUA_SUM, count, i, load(dt, r, i),
               val(dt, 100, (size_t)me * count + i, salt));
      free(sb);
      free(rb);
      if (g_fail) return 1;
    }
  }
  /* send/recv around a ring and a barrier to finish */
  if (n > 1) {
    int64_t out = me, in = -1;
    ASSERT_OK(bagua_sendrecv(c, &out, 1, (me + 1) % n, &in, 1, (me + n - 1) % n, BAGUA_I64));
    ASSERT_EQ(in, (me + n - 1) % n);
    if (me == 0) ASSERT_OK(bagua_send(c, &out, 1, BAGUA_I64, 1));
    if (me == 1) {
      ASSERT_OK(bagua_recv(c, &in, 1, BAGUA_I64, 0));
      ASSERT_EQ(in, 0);
    }
    /* Both ring neighbours at once, large enough to be split over the streams; with two
     * ranks both are one peer and the right buffer gets a copy. */
    enum { NB = 100003 };
    int left = (me + n - 1) % n, right = (me + 1) % n;
    int32_t *mine = malloc(3 * NB * sizeof(int32_t)), *fl = mine + NB, *fr = mine + 2 * NB;
    for (int i = 0; i < NB; i++) mine[i] = me * 1000003 + i;
    ASSERT_OK(bagua_neighbor_exchange(c, mine, NB, left, fl, right, fr, BAGUA_I32));
    for (int i = 0; i < NB; i++) {
      if (fl[i] != left * 1000003 + i || fr[i] != right * 1000003 + i) {
        TEST_FAIL(
            "neighbor_exchange element %d: from the left %d (want %d), from the right %d "
            "(want %d)",
            i, fl[i], left * 1000003 + i, fr[i], right * 1000003 + i);
      }
    }
    free(mine);
  }
  ASSERT_OK(bagua_barrier(c));
  return g_fail ? 1 : 0;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s tcp|shm|auto NRANKS [RANKS_PER_NODE] [ENV]\n", argv[0]);
    return 2;
  }
  mp_opts_t o = {0};
  o.transport = strcmp(argv[1], "tcp") == 0   ? BAGUA_TRANSPORT_TCP
                : strcmp(argv[1], "shm") == 0 ? BAGUA_TRANSPORT_SHM
                                              : BAGUA_TRANSPORT_AUTO;
  o.nranks = atoi(argv[2]);
  o.ranks_per_node = argc > 3 ? atoi(argv[3]) : 0;
  o.setenv_list = argc > 4 ? argv[4] : NULL; /* e.g. "BAGUA_SHM_SLOT_BYTES=4096" */
  o.deadline_s = 300;
  int rc = mp_run(&o, body, NULL);
  printf("%s: %s on %d ranks\n", rc ? "FAILED" : "passed", argv[1], o.nranks);
  return rc;
}
