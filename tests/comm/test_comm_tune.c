/*
 * The communicator settings autotuning changes at run time (comm/tune.h), on 3 ranks that each
 * emulate a node and open 4 TCP streams per peer: for every count of streams in use (1..4) and
 * several ring segments (4 KiB, 64 KiB, 1 MiB), set the same way on every rank between
 * collectives, a large allreduce (the pipelined ring, split over the streams) and a broadcast
 * (the exchange engine) give exact results; a split inherits the values; bad values are
 * refused with a warning and change nothing.
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
  bagua_comm_destroy(wide);
  bagua_comm_destroy(sub);
  free(buf);
  if (bagua_comm_rank(c) == 0)
    printf("comm_tune: 12 stream/segment settings, splits and refusals checked\n");
  return 0;
}

int main(void) {
  mp_opts_t o = {.nranks = 3,
                 .transport = BAGUA_TRANSPORT_TCP,
                 .ranks_per_node = 1,
                 .deadline_s = 100,
                 .setenv_list = "BAGUA_NET_NSTREAMS=4"};
  return mp_run(&o, body, NULL);
}
