/*
 * Communicator splitting: colour/key ordering, ranks that opt out, node splits on emulated
 * nodes, and collectives on every sub-communicator while the parent stays usable.
 */
#include <stdio.h>
#include <stdlib.h>

#include "../test.h"
#include "mp.h"

static int body(bagua_comm_t *c, void *arg) {
  (void)arg;
  int me = bagua_comm_rank(c), n = bagua_comm_size(c);
  /* Even and odd ranks, ordered by descending parent rank through the key. */
  bagua_comm_t *half = NULL;
  ASSERT_OK(bagua_comm_split(c, me % 2, -me, &half));
  int members = (n + 1 - me % 2) / 2;
  ASSERT_EQ(bagua_comm_size(half), members);
  int expect_rank = 0;
  for (int r = n - 1; r > me; r--)
    if (r % 2 == me % 2) expect_rank++;
  ASSERT_EQ(bagua_comm_rank(half), expect_rank);
  int64_t v = me, sum = 0;
  ASSERT_OK(bagua_allreduce(half, &v, &sum, 1, BAGUA_I64, BAGUA_SUM));
  int64_t want = 0;
  for (int r = me % 2; r < n; r += 2) want += r;
  ASSERT_EQ(sum, want);
  /* A rank with a negative colour joins nothing. */
  bagua_comm_t *sub = NULL;
  ASSERT_OK(bagua_comm_split(c, me == 0 ? -1 : 7, 0, &sub));
  ASSERT_TRUE((me == 0) == (sub == NULL));
  if (sub) {
    ASSERT_EQ(bagua_comm_size(sub), n - 1);
    ASSERT_OK(bagua_barrier(sub));
  }
  /* Node split on nodes of two ranks: intra on everyone, inter on local rank 0 only. */
  bagua_comm_t *intra = NULL, *inter = NULL;
  ASSERT_OK(bagua_comm_split_node(c, &intra, &inter));
  ASSERT_EQ(bagua_comm_size(intra), bagua_comm_local_size(c));
  ASSERT_EQ(bagua_comm_rank(intra), bagua_comm_local_rank(c));
  ASSERT_TRUE((bagua_comm_local_rank(c) == 0) == (inter != NULL));
  if (inter) ASSERT_EQ(bagua_comm_size(inter), bagua_comm_node_count(c));
  float f = 1, g = 0;
  ASSERT_OK(bagua_allreduce(intra, &f, &g, 1, BAGUA_F32, BAGUA_SUM));
  ASSERT_EQ((int)g, bagua_comm_local_size(c));
  /* The parent still works after all this. */
  ASSERT_OK(bagua_allreduce(c, &f, &g, 1, BAGUA_F32, BAGUA_SUM));
  ASSERT_EQ((int)g, n);
  bagua_comm_destroy(half);
  bagua_comm_destroy(sub);
  bagua_comm_destroy(intra);
  bagua_comm_destroy(inter);
  return 0;
}

int main(void) {
  mp_opts_t o = {
      .nranks = 5, .transport = BAGUA_TRANSPORT_AUTO, .ranks_per_node = 2, .deadline_s = 60};
  int rc = mp_run(&o, body, NULL);
  printf("%s split\n", rc ? "FAILED" : "passed");
  return rc;
}
