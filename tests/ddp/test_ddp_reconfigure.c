/*
 * bagua__ddp_reconfigure: a running context moved to other settings between two steps, the
 * building block of autotuning and of the advisor's algorithm switch.
 *
 *   exact    2 ranks over TCP, Adam (two state vectors carried), two tensors in zero-copy
 *            mode: re-bucketing twice and turning hierarchical on leaves every weight
 *            bit-identical to an identical run that never moved (a sum of two values does not
 *            depend on how the buffer is cut), the layout version counts the moves, the bucket
 *            count follows the bucket size, and the views are fetched again after each move.
 *   switch   4 ranks as 2 emulated nodes: gradient_allreduce, then hierarchical, bytegrad,
 *            decentralized (ring), low-precision decentralized and gradient_allreduce again,
 *            one move every 5 steps: the loss keeps falling, and the ranks hold identical
 *            weights at the end of the bytegrad phase. A change of optimizer and a move in the
 *            middle of a step are refused with BAGUA_ERR_INVALID_USAGE, and the context goes on.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../comm/mp.h"
#include "../test.h"
#include "ddp/ddp_internal.h"
#include "problem.h"

static problem_t prob = {.d_in = 64, .d_out = 8, .n = 32, .nsplit = 4, .noise = 0.1f};

enum { STEPS = 24, ZC_MASK = 0x5 };

/* Trains STEPS steps; with `move`, re-buckets at 6 and 12 and turns hierarchical on at 18.
 * Leaves the final weights in m. */
static void run_exact(bagua_comm_t *c, int move, model_t *m, int64_t *version, int *buckets) {
  shard_t s;
  shard_make(&prob, bagua_comm_rank(c), &s);
  model_init(&prob, 1, m);
  bagua_ddp_config_t cfg = BAGUA_DDP_CONFIG_INIT;
  cfg.algorithm = "gradient_allreduce";
  cfg.optimizer = "adam";
  cfg.lr = 0.02;
  cfg.bucket_bytes = 1 << 20;
  cfg.hierarchical = 0;
  bagua_ddp_t *ddp = NULL;
  ASSERT_OK(bagua_ddp_create(c, &cfg, &ddp));
  model_register(m, ddp, ZC_MASK);
  ASSERT_OK(bagua_ddp_ready(ddp));
  ASSERT_EQ(bagua_ddp_layout_version(ddp), 0);
  for (int t = 0; t < STEPS; t++) {
    ASSERT_OK(model_train_step(m, &s, ddp, ZC_MASK));
    if (!move) continue;
    bagua__ddp_settings_t next = ddp->s;
    if (t == 5) next.bucket_bytes = 512; /* one tensor per bucket */
    if (t == 11) next.bucket_bytes = 1000;
    if (t == 17) next.hierarchical = 1;
    if (t == 5 || t == 11 || t == 17) {
      int before = ddp->nbuckets;
      ASSERT_OK(bagua__ddp_reconfigure(ddp, &next));
      if (t == 5 && !(ddp->nbuckets > before))
        TEST_FAIL("512-byte buckets: %d buckets, before %d", ddp->nbuckets, before);
      if (t == 17) ASSERT_TRUE(ddp->intra != NULL);
    }
  }
  *version = bagua_ddp_layout_version(ddp);
  *buckets = ddp->nbuckets;
  bagua_ddp_destroy(ddp);
  shard_free(&s);
}

static int body_exact(bagua_comm_t *c, void *arg) {
  (void)arg;
  model_t moved, still;
  int64_t v_moved, v_still;
  int b_moved, b_still;
  run_exact(c, 1, &moved, &v_moved, &b_moved);
  run_exact(c, 0, &still, &v_still, &b_still);
  ASSERT_EQ(v_moved, 3);
  ASSERT_EQ(v_still, 0);
  if (b_moved == b_still) TEST_FAIL("the moved run ended with %d buckets, as the other", b_moved);
  size_t nw = (size_t)prob.d_in * prob.d_out;
  if (memcmp(moved.w, still.w, nw * sizeof(float)) != 0 ||
      memcmp(moved.b, still.b, (size_t)prob.d_out * sizeof(float)) != 0)
    TEST_FAIL("rank %d: weights after three moves differ from the run without them",
              bagua_comm_rank(c));
  double loss = model_union_loss(&moved, 2);
  if (bagua_comm_rank(c) == 0)
    printf("exact: 3 moves (%d buckets at the end), weights bit-identical, loss %.5f\n", b_moved,
           loss);
  model_free(&moved);
  model_free(&still);
  assert_no_leaks();
  return 0;
}

/* The phases of the switch test: the settings after step 5k. */
static void phase(bagua_ddp_t *d, int k, bagua__ddp_settings_t *n) {
  *n = d->s;
  switch (k) {
    case 1:
      n->hierarchical = 1;
      break;
    case 2:
      n->algo = &bagua__ddp_bytegrad;
      break;
    case 3:
      n->algo = &bagua__ddp_decentralized;
      n->peer_mode = BAGUA__PEER_RING;
      break;
    case 4:
      n->algo = &bagua__ddp_low_precision_decentralized;
      break;
    case 5:
      n->algo = &bagua__ddp_gradient_allreduce;
      n->peer_mode = BAGUA__PEER_ALL;
      n->hierarchical = 0;
      break;
  }
}

static int body_switch(bagua_comm_t *c, void *arg) {
  (void)arg;
  int n = bagua_comm_size(c);
  shard_t s;
  model_t m;
  shard_make(&prob, bagua_comm_rank(c), &s);
  model_init(&prob, 1, &m);
  bagua_ddp_config_t cfg = BAGUA_DDP_CONFIG_INIT;
  cfg.algorithm = "gradient_allreduce";
  cfg.lr = 0.05;
  cfg.hierarchical = 0;
  bagua_ddp_t *ddp = NULL;
  ASSERT_OK(bagua_ddp_create(c, &cfg, &ddp));
  model_register(&m, ddp, 0);
  ASSERT_OK(bagua_ddp_ready(ddp));
  double loss0 = model_union_loss(&m, n);

  /* Refused moves leave the context as it was. */
  bagua__ddp_settings_t bad = ddp->s;
  bad.optimizer = BAGUA__OPT_ADAM;
  ASSERT_STATUS(bagua__ddp_reconfigure(ddp, &bad), BAGUA_ERR_INVALID_USAGE);
  ASSERT_OK(bagua_ddp_grad_ready(ddp, 0));
  bad = ddp->s;
  bad.bucket_bytes = 4096;
  ASSERT_STATUS(bagua__ddp_reconfigure(ddp, &bad), BAGUA_ERR_INVALID_USAGE);
  ASSERT_OK(bagua_ddp_step(ddp));
  ASSERT_EQ(bagua_ddp_layout_version(ddp), 0);

  for (int t = 1; t < 30; t++) {
    ASSERT_OK(model_train_step(&m, &s, ddp, 0));
    if (t == 14) {
      /* bytegrad ran steps 10..14: every rank decompressed the same average. */
      assert_same_on_all_ranks(c, m.w, (size_t)prob.d_in * prob.d_out, "W after bytegrad");
    }
    if ((t + 1) % 5 == 0 && t + 1 < 30) {
      bagua__ddp_settings_t next;
      phase(ddp, (t + 1) / 5, &next);
      ASSERT_OK(bagua__ddp_reconfigure(ddp, &next));
    }
  }
  ASSERT_STREQ(bagua_ddp_algorithm(ddp), "gradient_allreduce");
  ASSERT_EQ(bagua_ddp_layout_version(ddp), 5);
  double loss = model_union_loss(&m, n);
  if (!(loss < 0.5 * loss0))
    TEST_FAIL("rank %d: loss %.5f after 30 steps across 6 settings, from %.5f", bagua_comm_rank(c),
              loss, loss0);
  if (bagua_comm_rank(c) == 0)
    printf("switch: 5 moves across 5 algorithms, loss %.5f -> %.5f, bad moves refused\n", loss0,
           loss);
  bagua_ddp_destroy(ddp);
  model_free(&m);
  shard_free(&s);
  assert_no_leaks();
  return 0;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "";
  if (strcmp(mode, "exact") == 0) {
    mp_opts_t o = {.nranks = 2, .transport = BAGUA_TRANSPORT_TCP};
    return mp_run(&o, body_exact, NULL);
  }
  if (strcmp(mode, "switch") == 0) {
    mp_opts_t o = {.nranks = 4, .transport = BAGUA_TRANSPORT_AUTO, .ranks_per_node = 2};
    return mp_run(&o, body_switch, NULL);
  }
  TEST_FAIL("usage: %s exact|switch", argv[0]);
}
