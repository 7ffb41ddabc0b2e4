/*
 * Bucket layout and the ready protocol.
 *
 *   layout     bagua__ddp_partition on its own: one huge tensor, many tiny ones, exact fits
 *              and overshoot, padding to the alignment, contiguous offsets.
 *   shift_one  the peer schedule for 1..12 ranks: a perfect matching on even counts (Bagua's
 *              formula exactly), one rotating rank sitting out on odd counts.
 *   exact NRANKS tcp|shm|auto [hier]
 *              odd-sized tensors (1 element to 100k) in small buckets, integer gradients whose
 *              average is exact, zero-copy and copy-mode tensors mixed, gradients marked
 *              ready in reverse and scrambled order or not at all: the weights must follow
 *              SGD with the exact average bit for bit, and the views equal the arrays.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../comm/mp.h"
#include "../test.h"
#include "ddp/ddp_internal.h"
#include "problem.h"

static void check_layout(bagua__ddp_tensor_t *t, int nt, size_t bucket_bytes, size_t align,
                         int want_buckets) {
  bagua__ddp_bucket_t *b;
  int nb;
  size_t total, maxb;
  ASSERT_OK(bagua__ddp_partition(t, nt, bucket_bytes, align, &b, &nb, &total, &maxb));
  if (want_buckets > 0) ASSERT_EQ(nb, want_buckets);
  size_t off = 0, biggest = 0;
  int next = 0;
  for (int k = 0; k < nb; k++) {
    ASSERT_EQ(b[k].offset, off);
    ASSERT_EQ(b[k].first, next);
    ASSERT_TRUE(b[k].ntensors >= 1);
    ASSERT_EQ(b[k].count % align, 0);
    ASSERT_TRUE(b[k].count >= b[k].used && b[k].count - b[k].used < align);
    size_t inner = b[k].offset, bytes = 0;
    for (int i = b[k].first; i < b[k].first + b[k].ntensors; i++) {
      ASSERT_EQ(t[i].bucket, k);
      ASSERT_EQ(t[i].offset, inner);
      inner += t[i].count;
      /* Greedy: the bucket was still short of the size before its last tensor. */
      if (i < b[k].first + b[k].ntensors - 1) ASSERT_LT(bytes + t[i].count * 4, bucket_bytes);
      bytes += t[i].count * 4;
    }
    ASSERT_EQ(inner - b[k].offset, b[k].used);
    if (k < nb - 1) ASSERT_GE(bytes, bucket_bytes);
    off += b[k].count;
    next += b[k].ntensors;
    if (b[k].count > biggest) biggest = b[k].count;
  }
  ASSERT_EQ(next, nt);
  ASSERT_EQ(total, off);
  ASSERT_EQ(maxb, biggest);
  free(b);
}

static int test_layout(void) {
  bagua__ddp_tensor_t t[1000];
  memset(t, 0, sizeof(t));
  /* One huge tensor far beyond the bucket size is one bucket, padded. */
  t[0].count = 10 * 1000 * 1000 + 3;
  check_layout(t, 1, 1024, 5 * 16, 1);
  /* Many tiny tensors: 16 one-element tensors fill a 64-byte bucket. */
  for (int i = 0; i < 1000; i++) t[i].count = 1;
  check_layout(t, 1000, 64, 3 * 16, 63);
  /* Exact fit closes the bucket; the next tensor starts a new one. */
  for (int i = 0; i < 3; i++) t[i].count = 10;
  check_layout(t, 3, 80, 16, 2);
  /* Overshoot: a bucket closes only once it holds at least the size. */
  t[0].count = 5, t[1].count = 100, t[2].count = 5;
  check_layout(t, 3, 40, 16, 2);
  /* A bucket size larger than the model: one bucket. */
  check_layout(t, 3, (size_t)1 << 40, 7 * 16, 1);
  /* Mixed sizes and an odd alignment (5 ranks on 3 nodes: lcm 15, times 16). */
  size_t sizes[] = {1, 3, 1000, 7, 100000, 5, 16, 17, 33, 4096, 4095, 2};
  for (int i = 0; i < 12; i++) t[i].count = sizes[i];
  check_layout(t, 12, 1024, 15 * 16, -1);
  bagua__ddp_bucket_t *b;
  int nb;
  size_t total, maxb;
  ASSERT_STATUS(bagua__ddp_partition(t, 0, 64, 16, &b, &nb, &total, &maxb), BAGUA_ERR_INVALID_ARG);
  printf("layout: passed\n");
  return 0;
}

/* Bagua's shift_one formula for an even number of ranks. */
static int bagua_peer(int rank, int n, int step) {
  if (rank < n / 2) return ((step + rank) % ((n + 1) / 2)) + n / 2;
  return (((rank - n / 2 - step) % (n / 2)) + n / 2) % (n / 2);
}

static int test_shift_one(void) {
  for (int n = 1; n <= 12; n++) {
    int *sat = calloc(n, sizeof(int));
    for (int step = 0; step < 3 * n; step++) {
      int sitting = 0;
      for (int r = 0; r < n; r++) {
        int p = bagua__ddp_shift_one_peer(r, n, step);
        ASSERT_TRUE(p >= 0 && p < n);
        ASSERT_EQ(bagua__ddp_shift_one_peer(p, n, step), r); /* a matching */
        if (p == r) {
          sitting++;
          sat[r]++;
        }
        if (n % 2 == 0) ASSERT_EQ(p, bagua_peer(r, n, step));
      }
      ASSERT_EQ(sitting, n % 2); /* none on even counts, exactly one on odd counts */
    }
    /* On odd counts the rank sitting out rotates: each sits out 3 times in 3n steps. */
    for (int r = 0; r < n && n % 2; r++) ASSERT_EQ(sat[r], 3);
    free(sat);
  }
  printf("shift_one: passed\n");
  return 0;
}

static const size_t sizes[] = {1, 3, 1000, 7, 100000, 5, 16, 17, 33};
#define NTENS ((int)(sizeof(sizes) / sizeof(sizes[0])))

static float grad_value(int rank, int t, size_t i, int step) {
  return (float)((rank + 1) * ((int)((i + (size_t)t * 7 + (size_t)step) % 9) - 4));
}

static int body_exact(bagua_comm_t *c, void *arg) {
  int hier = *(int *)arg;
  int me = bagua_comm_rank(c), n = bagua_comm_size(c);
  float *p[NTENS], *g[NTENS];
  bagua_ddp_config_t cfg = BAGUA_DDP_CONFIG_INIT;
  cfg.bucket_bytes = 1024;
  cfg.hierarchical = hier;
  cfg.lr = 1.0;
  bagua_ddp_t *ddp;
  ASSERT_OK(bagua_ddp_create(c, &cfg, &ddp));
  for (int t = 0; t < NTENS; t++) {
    p[t] = calloc(sizes[t], sizeof(float));
    g[t] = calloc(sizes[t], sizeof(float));
    for (size_t i = 0; i < sizes[t]; i++) p[t][i] = (float)(me + 1); /* rank 0's wins */
    /* Odd tensors are zero-copy: their gradients go straight into the flat buffer. */
    ASSERT_OK(bagua_ddp_register(ddp, NULL, p[t], t % 2 ? NULL : g[t], sizes[t]));
  }
  ASSERT_STATUS(bagua_ddp_grad_ready(ddp, 0), BAGUA_ERR_INVALID_USAGE); /* before ready */
  ASSERT_TRUE(bagua_ddp_grad(ddp, 0) == NULL);
  ASSERT_OK(bagua_ddp_ready(ddp));
  ASSERT_TRUE(bagua_ddp_grad(ddp, NTENS) == NULL && bagua_ddp_param(ddp, -1) == NULL);
  for (int t = 0; t < NTENS; t++)
    for (size_t i = 0; i < sizes[t]; i++) ASSERT_TRUE(p[t][i] == 1.0f);
  bagua_ddp_stats_t st = {.struct_size = sizeof(st)};
  ASSERT_OK(bagua_ddp_stats(ddp, &st));
  if (me == 0)
    printf("exact: %d tensors in %d buckets, %zu flat elements\n", st.num_tensors, st.num_buckets,
           st.flat_elems);
  ASSERT_EQ(st.num_tensors, NTENS);
  ASSERT_TRUE(st.num_buckets >= 3);
  for (int step = 0; step < 4; step++) {
    for (int t = 0; t < NTENS; t++) {
      float *dst = t % 2 ? bagua_ddp_grad(ddp, t) : g[t];
      for (size_t i = 0; i < sizes[t]; i++) {
        dst[i] = grad_value(me, t, i, step);
      }
    }
    /* Step 0: registration order; 1: reverse; 2: scrambled, one tensor marked twice;
     * 3: none marked (bagua_ddp_step marks them). */
    if (step == 0)
      for (int t = 0; t < NTENS; t++) ASSERT_OK(bagua_ddp_grad_ready(ddp, t));
    if (step == 1)
      for (int t = NTENS - 1; t >= 0; t--) ASSERT_OK(bagua_ddp_grad_ready(ddp, t));
    if (step == 2) {
      for (int k = 0; k < NTENS; k += 2) ASSERT_OK(bagua_ddp_grad_ready(ddp, (k * 5) % NTENS));
      ASSERT_STATUS(bagua_ddp_grad_ready(ddp, 0), BAGUA_ERR_INVALID_USAGE);
      ASSERT_STATUS(bagua_ddp_grad_ready(ddp, NTENS), BAGUA_ERR_INVALID_ARG);
    }
    ASSERT_OK(bagua_ddp_step(ddp));
    for (int t = 0; t < NTENS; t++) {
      const float *view = bagua_ddp_param(ddp, t);
      for (size_t i = 0; i < sizes[t]; i++) {
        if (memcmp(&view[i], &p[t][i], 4) != 0)
          TEST_FAIL("step %d tensor %d[%zu]: view %g != array %g", step, t, i, view[i], p[t][i]);
      }
    }
  }
  /* Replay the arithmetic: the integer sums are exact in any order, the average is one f32
   * division, and SGD with lr 1 subtracts it: w = w - avg from w = 1 (rank 0's value). */
  for (int t = 0; t < NTENS; t++)
    for (size_t i = 0; i < sizes[t]; i++) {
      float w = 1.0f;
      for (int step = 0; step < 4; step++) {
        float s = 0;
        for (int r = 0; r < n; r++) s += grad_value(r, t, i, step);
        w = w - 1.0f * (s / (float)n);
      }
      if (memcmp(&w, &p[t][i], 4) != 0)
        TEST_FAIL("rank %d tensor %d[%zu]: %.9g, expected %.9g", me, t, i, p[t][i], w);
    }
  for (int t = 0; t < NTENS; t++) {
    free(p[t]);
    free(g[t]);
  }
  bagua_ddp_destroy(ddp);
  assert_no_leaks();
  return 0;
}

int main(int argc, char **argv) {
  const char *what = argc > 1 ? argv[1] : "layout";
  if (!strcmp(what, "layout")) return test_layout();
  if (!strcmp(what, "shift_one")) return test_shift_one();
  if (argc < 4) return 2;
  mp_opts_t o = {.nranks = atoi(argv[2]), .deadline_s = 60};
  o.transport = !strcmp(argv[3], "tcp")   ? BAGUA_TRANSPORT_TCP
                : !strcmp(argv[3], "shm") ? BAGUA_TRANSPORT_SHM
                                          : BAGUA_TRANSPORT_AUTO;
  o.ranks_per_node = o.transport == BAGUA_TRANSPORT_AUTO ? 2 : 0;
  int hier = argc > 4 && !strcmp(argv[4], "hier");
  double t0 = mp_now();
  int rc = mp_run(&o, body_exact, &hier);
  printf("%s exact on %d ranks (%s%s) in %.1f s\n", rc ? "FAILED" : "passed", o.nranks, argv[3],
         hier ? ", hierarchical" : "", mp_now() - t0);
  return rc;
}
