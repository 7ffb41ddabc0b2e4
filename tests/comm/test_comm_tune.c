/*
 * The communicator settings autotuning changes at run time (comm/tune.h), on 3 ranks that each
 * emulate a node and open 4 TCP streams per peer: for every count of streams in use (1..4) and
 * several ring segments (4 KiB, 64 KiB, 1 MiB), set the same way on every rank between
 * collectives, a large allreduce (the pipelined ring, split over the streams) and a broadcast
 * (the exchange engine) give exact results; a split inherits the values; bad values are
 * refused with a warning and change nothing. The ring threshold (BAGUA_NET_RING_MIN_BYTES) picks
 * the algorithm of a small allreduce, which the bytes each rank sends show: the ring's 2(n-1)
 * blocks on every rank, or recursive doubling's whole buffers (twice on the rank that folds
 * rank 2 in, once elsewhere). Two ranks whose thresholds disagree (a misconfigured job) both
 * fail their first allreduce between the two with BAGUA_ERR_PROTOCOL and a message that names
 * the mismatch, at once rather than at the communicator's timeout.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../test.h"
#include "comm/tune.h"
#include "mp.h"

#define COUNT ((1 << 20) + 7) /* odd: the last block and the last part are short */

static void check_collectives(bagua_comm_t *c, float *buf, const char *what) {
  int rank = bagua_comm_rank(c), n = bagua_comm_size(c);
  /* Small integers: every sum is exact in f32, whatever the order of the additions. */
  for (size_t i = 0; i < COUNT; i++) buf[i] = (float)((i * 7 + (size_t)rank * 13) % 101);
  ASSERT_OK(bagua_allreduce(c, buf, buf, COUNT, BAGUA_F32, BAGUA_SUM));
  for (size_t i = 0; i < COUNT; i++) {
    float want = 0;
    for (int r = 0; r < n; r++) want += (float)((i * 7 + (size_t)r * 13) % 101);
    if (buf[i] != want)
      TEST_FAIL("%s: allreduce element %zu is %g, want %g", what, i, buf[i], want);
  }
  for (size_t i = 0; i < COUNT; i++) buf[i] = rank == 1 ? (float)(i % 977) : -1.0f;
  ASSERT_OK(bagua_broadcast(c, buf, buf, COUNT, BAGUA_F32, 1));
  for (size_t i = 0; i < COUNT; i++)
    if (buf[i] != (float)(i % 977)) TEST_FAIL("%s: broadcast element %zu is %g", what, i, buf[i]);
}

/* A 12 KiB allreduce (3 blocks of 4 KiB) under ring threshold `ring_min`: exact sums, and the
 * bytes this rank sent. */
static uint64_t small_allreduce(bagua_comm_t *c, size_t ring_min) {
  enum { N = 3072 };
  static float buf[N];
  int rank = bagua_comm_rank(c), n = bagua_comm_size(c);
  ASSERT_OK(bagua__comm_set_ring_min(c, ring_min));
  ASSERT_EQ(bagua__comm_ring_min(c), ring_min);
  for (int i = 0; i < N; i++) buf[i] = (float)((i * 5 + rank * 3) % 61);
  uint64_t before = bagua_comm_bytes_sent(c);
  ASSERT_OK(bagua_allreduce(c, buf, buf, N, BAGUA_F32, BAGUA_SUM));
  uint64_t sent = bagua_comm_bytes_sent(c) - before;
  for (int i = 0; i < N; i++) {
    float want = 0;
    for (int r = 0; r < n; r++) want += (float)((i * 5 + r * 3) % 61);
    if (buf[i] != want)
      TEST_FAIL("ring threshold %zu: element %d is %g, want %g", ring_min, i, buf[i], want);
  }
  return sent;
}

static int body(bagua_comm_t *c, void *arg) {
  (void)arg;
  float *buf = malloc(COUNT * sizeof(float));
  ASSERT_TRUE(buf != NULL);
  ASSERT_EQ(bagua__comm_max_streams(c), 4);
  ASSERT_EQ(bagua__comm_streams(c), 4);
  ASSERT_TRUE(bagua__comm_uses_ring(c));
  const size_t segs[] = {4096, 65536, 1 << 20};
  for (int s = 1; s <= 4; s++) {
    for (size_t k = 0; k < sizeof(segs) / sizeof(segs[0]); k++) {
      char what[64];
      snprintf(what, sizeof(what), "%d streams, segment %zu", s, segs[k]);
      ASSERT_OK(bagua__comm_set_streams(c, s));
      ASSERT_OK(bagua__comm_set_segment(c, segs[k]));
      ASSERT_EQ(bagua__comm_streams(c), s);
      ASSERT_EQ(bagua__comm_segment(c), segs[k]);
      check_collectives(c, buf, what);
    }
  }
  /* A split keeps the values in effect; a split with more streams can use them all. */
  bagua_comm_t *sub = NULL, *wide = NULL;
  ASSERT_OK(bagua_comm_split(c, 0, bagua_comm_rank(c), &sub));
  ASSERT_EQ(bagua__comm_streams(sub), 4);
  ASSERT_EQ(bagua__comm_segment(sub), 1 << 20);
  ASSERT_OK(bagua__comm_set_streams(c, 2));
  ASSERT_OK(bagua__comm_split_streams(c, 0, bagua_comm_rank(c), 8, &wide));
  ASSERT_EQ(bagua__comm_max_streams(wide), 8);
  ASSERT_EQ(bagua__comm_streams(wide), 2);
  ASSERT_OK(bagua__comm_set_streams(wide, 8));
  check_collectives(wide, buf, "split with 8 streams");
  /* Out of range: refused, naming what is accepted, nothing changed. */
  ASSERT_STATUS(bagua__comm_set_streams(c, 0), BAGUA_ERR_INVALID_ARG);
  ASSERT_STATUS(bagua__comm_set_streams(c, 5), BAGUA_ERR_INVALID_ARG);
  if (!strstr(bagua_last_error(), "accepted: 1..4")) TEST_FAIL("warning: %s", bagua_last_error());
  ASSERT_STATUS(bagua__comm_set_segment(c, 100), BAGUA_ERR_INVALID_ARG);
  if (!strstr(bagua_last_error(), "BAGUA_NET_SEGMENT_BYTES"))
    TEST_FAIL("warning: %s", bagua_last_error());
  ASSERT_EQ(bagua__comm_streams(c), 2);
  ASSERT_EQ(bagua__comm_segment(c), 1 << 20);
  check_collectives(c, buf, "after refusals");
  /* The ring threshold: the default, then the ring, then recursive doubling, for 12 KiB. */
  ASSERT_EQ(bagua__comm_ring_min(c), 65536);
  uint64_t ring = small_allreduce(c, 0), rd = small_allreduce(c, 1 << 20);
  ASSERT_EQ(ring, 4 * 4096);
  ASSERT_EQ(rd, bagua_comm_rank(c) == 1 ? 2 * 12288 : 12288);
  ASSERT_STATUS(bagua__comm_set_ring_min(c, (size_t)1 << 31), BAGUA_ERR_INVALID_ARG);
  if (!strstr(bagua_last_error(), "BAGUA_NET_RING_MIN_BYTES"))
    TEST_FAIL("warning: %s", bagua_last_error());
  ASSERT_EQ(bagua__comm_ring_min(c), 1 << 20);
  bagua_comm_t *sub2 = NULL;
  ASSERT_OK(bagua_comm_split(c, 0, bagua_comm_rank(c), &sub2));
  ASSERT_EQ(bagua__comm_ring_min(sub2), 1 << 20);
  bagua_comm_destroy(sub2);
  bagua_comm_destroy(wide);
  bagua_comm_destroy(sub);
  free(buf);
  if (bagua_comm_rank(c) == 0)
    printf(
        "comm_tune: 12 stream/segment settings, the ring threshold, splits and refusals "
        "checked\n");
  return 0;
}

/* Rank 0 takes the ring for 16 KiB, rank 1 recursive doubling. */
static int mismatch_body(bagua_comm_t *c, void *arg) {
  (void)arg;
  static float buf[4096];
  int rank = bagua_comm_rank(c);
  ASSERT_OK(bagua__comm_set_ring_min(c, rank == 0 ? 0 : 1 << 20));
  double t0 = mp_now();
  ASSERT_STATUS(bagua_allreduce(c, buf, buf, 4096, BAGUA_F32, BAGUA_SUM), BAGUA_ERR_PROTOCOL);
  if (!strstr(bagua_last_error(), "mismatched collective calls or counts"))
    TEST_FAIL("rank %d: the error does not name the mismatch: %s", rank, bagua_last_error());
  if (mp_now() - t0 > 5)
    TEST_FAIL("rank %d: the mismatch took %.1f s to fail", rank, mp_now() - t0);
  if (rank == 0) printf("comm_tune: disagreeing ring thresholds fail at once on both ranks\n");
  return 0;
}

int main(void) {
  mp_opts_t o = {.nranks = 3,
                 .transport = BAGUA_TRANSPORT_TCP,
                 .ranks_per_node = 1,
                 .deadline_s = 100,
                 /* The registry default threshold, not a measured one: the test checks it. */
                 .setenv_list = "BAGUA_NET_NSTREAMS=4;BAGUA_NET_CALIBRATE=0"};
  if (mp_run(&o, body, NULL) != 0) return 1;
  mp_opts_t two = {.nranks = 2,
                   .transport = BAGUA_TRANSPORT_TCP,
                   .ranks_per_node = 1,
                   .timeout_ms = 30000,
                   .deadline_s = 60};
  return mp_run(&two, mismatch_body, NULL);
}
