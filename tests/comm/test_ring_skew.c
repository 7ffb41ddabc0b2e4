/*
 * The pipelined TCP reduce-scatter when one rank is late. The ring keeps the partial sums that
 * pass through a rank in three chunk-sized slots, reused every third message. A rank whose
 * successor is late cannot forward (its socket buffers are full) while its predecessor, which
 * does not depend on the late rank for the first messages, keeps delivering; without the
 * ring's receive rule the fourth message would overwrite a slot not yet forwarded. Six ranks
 * (four partial-sum messages), small socket buffers so that a 1 MiB chunk cannot be handed to
 * the kernel whole, and each rank late in turn; every rank checks its exact block each time.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "../test.h"
#include "mp.h"

#define BLOCK (256 * 1024) /* floats per rank: 1 MiB chunks */
#define LATE_MS 300

static float value(int rank, size_t i, int round) {
  /* Small integers: every sum is exact in f32, whatever the order of the additions. */
  return (float)((i * 7 + (size_t)rank * 13 + (size_t)round * 5) % 101);
}

static int body(bagua_comm_t *c, void *arg) {
  (void)arg;
  int n = bagua_comm_size(c), me = bagua_comm_rank(c);
  size_t total = (size_t)BLOCK * (size_t)n;
  float *in = malloc(total * sizeof(float)), *out = malloc(BLOCK * sizeof(float));
  if (!in || !out) TEST_FAIL("out of memory");
  for (int round = 0; round < n; round++) {
    for (size_t i = 0; i < total; i++) in[i] = value(me, i, round);
    if (me == round) nanosleep(&(struct timespec){0, LATE_MS * 1000000L}, NULL);
    ASSERT_OK(bagua_reduce_scatter(c, in, out, BLOCK, BAGUA_F32, BAGUA_SUM));
    for (size_t i = 0; i < BLOCK; i++) {
      size_t g = (size_t)me * BLOCK + i;
      float want = 0;
      for (int r = 0; r < n; r++) want += value(r, g, round);
      if (out[i] != want)
        TEST_FAIL("rank %d, rank %d late: element %zu is %g, want %g", me, round, i, out[i], want);
    }
  }
  free(in);
  free(out);
  return 0;
}

int main(void) {
  /* One node per rank: two streams per peer (two lanes). 64 KiB socket buffers: a chunk does
   * not fit, so a rank's send waits for its successor. */
  mp_opts_t o = {.nranks = 6,
                 .transport = BAGUA_TRANSPORT_TCP,
                 .ranks_per_node = 1,
                 .deadline_s = 100,
                 .setenv_list = "BAGUA_NET_SOCKBUF_BYTES=65536;BAGUA_NET_RING_PIPELINE=1"};
  int rc = mp_run(&o, body, NULL);
  printf("%s: reduce-scatter on 6 ranks, each late in turn\n", rc ? "FAILED" : "passed");
  return rc;
}
