/*
 * The advisor (ddp/tune/advise.c, ddp/tune/advisor_model.c; docs/advisor.md).
 *
 *   model     the prediction model on fixed measurements, against values computed by hand
 *             (the comments show the arithmetic): ByteGrad beats gradient_allreduce on a
 *             100 Mbit/s link for a 10 M-parameter model, the two tie within 2 % on a fast
 *             link with long compute, the overlap of buckets with backward, hierarchical
 *             costs, and the table's format and order.
 *   settings  algorithm "auto" and BAGUA_AUTO_ALLOW in one process: the starting algorithm,
 *             the allowed set, qadam left out unless alone, a bad word refused by name.
 *   advise2   2 ranks over TCP with BAGUA_ADVISE=1: rank 0 prints a ranked table of all six
 *             algorithms once, and the algorithm the program runs is not changed.
 *   advise4   4 ranks on 2 emulated nodes: the table reports 2 nodes and a within-node figure.
 *   auto      2 ranks, BAGUA_ALGORITHM=auto, BAGUA_AUTO_ALLOW=gradient_allreduce,bytegrad: every
 *             rank ends on the same allowed algorithm, weights identical, loss decreasing.
 *   auto_async 2 ranks, allowed gradient_allreduce,async: async (no exposed communication) is
 *             always predicted fastest, so every rank switches at the same step (layout
 *             version 1) and training goes on; after a pause the weights agree.
 *   probe     2 ranks, BAGUA_OVERLAP=1, each of gradient_allreduce, bytegrad, decentralized,
 *             low_precision_decentralized and async in turn: during the warm-up and the probe
 *             steps communication is held (every job the step submitted is still held after
 *             its gradients are ready, async averages no round), afterwards the context's own
 *             overlap returns and rank 0 prints the check line. The ranks take turns to
 *             compute 100 ms in the probe steps, so that a rank that finishes first waits for
 *             the other in its communication: the compute figure is then the same under every
 *             algorithm (about 60 ms: the median of 100 and 20 ms), where it used to count
 *             low_precision_decentralized's wait in its exchange after the update as compute
 *             (about 100 ms).
 */
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../comm/mp.h"
#include "../test.h"
#include "common/params.h"
#include "ddp/tune/advise.h"
#include "ddp/ddp_internal.h"
#include "problem.h"

/* ------------------------------------------------------------------------------------------ */
/* model                                                                                      */
/* ------------------------------------------------------------------------------------------ */

static bagua__adv_pred_t predict(const bagua__adv_meas_t *m, bagua__adv_algo_t a, int hier,
                                 int peer) {
  bagua__adv_opts_t o = bagua__adv_default_opts(a);
  if (hier >= 0) o.hierarchical = hier;
  o.peer_mode = peer;
  return bagua__adv_predict(m, &o);
}

#define NEAR(a, b) ASSERT_NEAR(a, b, 1e-9 + 1e-9 * fabs((double)(b)))

static int mode_model(void) {
  /* 4 hosts, one rank each, 100 Mbit/s = 12.5e6 B/s, 100 us per round; a 10 M-parameter model
   * (40e6 bytes) in one bucket; 0.2 s of compute of which 0.13 s backward; compression 1 GB/s. */
  double one[1] = {40e6};
  bagua__adv_meas_t slow = {.ranks = 4,
                            .nodes = 4,
                            .ranks_per_node = 1,
                            .bucket_bytes = one,
                            .nbuckets = 1,
                            .compute_s = 0.2,
                            .backward_s = 0.13,
                            .inter_lat = 1e-4,
                            .inter_bw = 12.5e6,
                            .quant_bw = 1e9,
                            .overlap = 1.0};
  /* gradient_allreduce: ring 2*3*1e-4 + 1.5*40e6/12.5e6 = 4.8006 s, all exposed (one bucket
   * ready at the end of backward). */
  bagua__adv_pred_t ga = predict(&slow, BAGUA__ADV_GRADIENT_ALLREDUCE, -1, 0);
  NEAR(ga.comm_s, 4.8006);
  NEAR(ga.exposed_s, 4.8006);
  NEAR(ga.step_s, 5.0006);
  NEAR(ga.bytes, 60e6);
  /* bytegrad (hierarchical, one rank per node: among the 4): 4 chunks of 2.5e6 elements,
   * regions of 32 + 2.5e6 bytes, 10000128 in all; the alltoall (every block at once, one
   * round) 1e-4 + 0.75*10000128/12.5e6 = 0.60010768 s, the allgather ring (3 rounds)
   * 3e-4 + the same = 0.60030768 s; quantization (3 + 1/4)*40e6/1e9 = 0.13 s. */
  bagua__adv_pred_t bg = predict(&slow, BAGUA__ADV_BYTEGRAD, -1, 0);
  NEAR(bg.quant_s, 0.13);
  NEAR(bg.comm_s, 0.60010768 + 0.60030768 + 0.13);
  NEAR(bg.step_s, 0.2 + 0.60010768 + 0.60030768 + 0.13);
  NEAR(bg.bytes, 2 * 0.75 * 10000128);
  ASSERT_TRUE(bg.step_s < ga.step_s);
  bagua__adv_pred_t qa = predict(&slow, BAGUA__ADV_QADAM, -1, 0);
  NEAR(qa.step_s, bg.step_s);
  /* decentralized all: the same allreduce of the weights plus the copy into the exchange
   * buffer (40e6 / 1e9 = 0.04 s), overlapping the 0.2 s compute, then the copy back (0.04 s)
   * exposed. */
  bagua__adv_pred_t de = predict(&slow, BAGUA__ADV_DECENTRALIZED, -1, 0);
  NEAR(de.exposed_s, 4.8006 + 0.04 - 0.2 + 0.04);
  NEAR(de.step_s, 4.8806);
  NEAR(de.quant_s, 0.08);
  ASSERT_TRUE(de.step_s < ga.step_s);
  /* shift_one: one exchange of 40e6 bytes, 1e-4 + 3.2 s, and 3.5 passes (copy, add, halving)
   * on the exchange's side: 0.14 s; the copy back 0.04 s. */
  bagua__adv_pred_t so = predict(&slow, BAGUA__ADV_DECENTRALIZED, -1, 1);
  NEAR(so.step_s, 3.2001 + 0.14 + 0.04);
  /* ring of 4: both neighbours at once, 80e6 bytes through the link and one round; 5 passes
   * (copy, two adds, division) 0.2 s, the copy back 0.04 s. */
  bagua__adv_pred_t ri = predict(&slow, BAGUA__ADV_DECENTRALIZED, -1, 2);
  NEAR(ri.step_s, 1e-4 + 6.4 + 0.2 + 0.04);
  NEAR(ri.bytes, 80e6);
  /* low_precision_decentralized: 32 + 1e7 bytes to each neighbour at once,
   * 1e-4 + 2 * 0.80000256, plus 7.5 compression-sized passes over 40e6 bytes (0.3 s); nothing
   * overlaps. */
  bagua__adv_pred_t lp = predict(&slow, BAGUA__ADV_LOW_PRECISION_DECENTRALIZED, -1, 0);
  NEAR(lp.exposed_s, 1e-4 + 2 * 0.80000256 + 0.3);
  NEAR(lp.step_s, 0.2 + 1e-4 + 2 * 0.80000256 + 0.3);
  /* async: the step never waits; one 4.8006 s round per 0.5 + 4.8006 s. */
  bagua__adv_pred_t as = predict(&slow, BAGUA__ADV_ASYNC, -1, 0);
  NEAR(as.step_s, 0.2);
  NEAR(as.comm_s, 4.8006 * 0.2 / 5.3006);
  /* Each pattern at the bandwidth measured for it: an alltoall and a sendrecv ring at half
   * the allreduce's 12.5e6 B/s slow bytegrad's alltoall (1e-4 + 0.75*10000128/6.25e6) and
   * shift_one's exchange (1e-4 + 40e6/6.25e6), not the allgather. */
  bagua__adv_meas_t pat = slow;
  pat.inter_bw_a2a = pat.inter_bw_p2p = 6.25e6;
  NEAR(predict(&pat, BAGUA__ADV_BYTEGRAD, -1, 0).comm_s,
       (1e-4 + 0.75 * 10000128 / 6.25e6) + 0.60030768 + 0.13);
  NEAR(predict(&pat, BAGUA__ADV_DECENTRALIZED, -1, 1).step_s, 6.4001 + 0.14 + 0.04);
  /* Every 2nd step: half of the exposed time per step. */
  bagua__adv_opts_t o = bagua__adv_default_opts(BAGUA__ADV_DECENTRALIZED);
  o.comm_interval = 2;
  NEAR(bagua__adv_predict(&slow, &o).exposed_s, (4.8006 + 0.08 - 0.2) / 2);

  /* 10 Gbit/s and 2 s of compute: 8 buckets of 5e6 bytes, each ready 0.1625 s apart, each
   * done long before the next; only the last bucket is exposed. gradient_allreduce:
   * 6e-4 + 1.5*5e6/1.25e9 = 0.0066 s; bytegrad adds 3.25*5e6/1e9 = 0.01625 s of
   * quantization. They tie within 2 %. */
  double eight[8];
  for (int i = 0; i < 8; i++) eight[i] = 5e6;
  bagua__adv_meas_t fast = slow;
  fast.bucket_bytes = eight;
  fast.nbuckets = 8;
  fast.compute_s = 2.0;
  fast.backward_s = 1.3;
  fast.inter_bw = 1.25e9;
  ga = predict(&fast, BAGUA__ADV_GRADIENT_ALLREDUCE, -1, 0);
  bg = predict(&fast, BAGUA__ADV_BYTEGRAD, -1, 0);
  NEAR(ga.exposed_s, 0.0066);
  NEAR(ga.comm_s, 8 * 0.0066);
  ASSERT_TRUE(fabs(ga.step_s - bg.step_s) / ga.step_s < 0.02);

  /* Overlap: two buckets of 20e6 bytes, 2.4006 s each. Backward 6 s: bucket 0 is ready at 3,
   * done at 5.4006, before bucket 1 is ready at 6: exposed 2.4006. Backward 4 s: bucket 1
   * waits for bucket 0 (done at 4.4006): exposed 4.4006 + 2.4006 - 4 = 2.8012. */
  double two[2] = {20e6, 20e6};
  bagua__adv_meas_t ov = slow;
  ov.bucket_bytes = two;
  ov.nbuckets = 2;
  ov.compute_s = 10;
  ov.backward_s = 6;
  NEAR(predict(&ov, BAGUA__ADV_GRADIENT_ALLREDUCE, -1, 0).exposed_s, 2.4006);
  ov.backward_s = 4;
  NEAR(predict(&ov, BAGUA__ADV_GRADIENT_ALLREDUCE, -1, 0).exposed_s, 2.8012);
  /* Communication at half speed while backward runs (backward 6 s): bucket 0 (ready at 3)
   * gets 1.5 s of its 2.4006 done by 6 and ends at 6.9006; bucket 1 then ends at 9.3012:
   * exposed 3.3012. With no progress at all (ranks use every core) all of it is exposed. */
  ov.backward_s = 6;
  ov.overlap = 0.5;
  NEAR(predict(&ov, BAGUA__ADV_GRADIENT_ALLREDUCE, -1, 0).exposed_s, 3.3012);
  ov.overlap = 0;
  NEAR(predict(&ov, BAGUA__ADV_GRADIENT_ALLREDUCE, -1, 0).exposed_s, 2 * 2.4006);

  /* The ring threshold: a 52e3-byte bucket (the torch example's CNN) takes recursive doubling
   * under the default 64 KiB, 2 rounds of 1e-4 + 52e3/12.5e6 s sending 104e3 bytes, and the
   * ring under a threshold of 4 KiB, 6*1e-4 + 1.5*52e3/12.5e6 s sending 78e3 bytes. */
  double cnn[1] = {52e3};
  bagua__adv_meas_t small = slow;
  small.bucket_bytes = cnn;
  bagua__adv_pred_t rd = predict(&small, BAGUA__ADV_GRADIENT_ALLREDUCE, -1, 0);
  NEAR(rd.bytes, 104e3);
  NEAR(rd.comm_s, 2 * (1e-4 + 52e3 / 12.5e6));
  small.ring_min_bytes = 4096;
  bagua__adv_pred_t ring = predict(&small, BAGUA__ADV_GRADIENT_ALLREDUCE, -1, 0);
  NEAR(ring.bytes, 78e3);
  NEAR(ring.comm_s, 6e-4 + 1.5 * 52e3 / 12.5e6);
  /* The same for decentralized's exchange over the 0.2 s of compute. */
  bagua__adv_meas_t busy = slow;
  busy.overlap = 0;
  NEAR(predict(&busy, BAGUA__ADV_DECENTRALIZED, -1, 0).exposed_s, 4.8806);
  busy.overlap = 0.5;
  NEAR(predict(&busy, BAGUA__ADV_DECENTRALIZED, -1, 0).exposed_s, 4.8806 - 0.1);
  /* Spare cores for the communication threads: 4 ranks on 2, 4, 6 and 8 cores. */
  NEAR(bagua__adv_overlap_efficiency(2, 4), 0.0);
  NEAR(bagua__adv_overlap_efficiency(4, 4), 0.0);
  NEAR(bagua__adv_overlap_efficiency(6, 4), 0.5);
  NEAR(bagua__adv_overlap_efficiency(8, 4), 1.0);

  /* 2 nodes x 2 ranks: 1 GB/s and 10 us within a node, 12.5e6 B/s and 100 us between, no
   * quantization cost. Node reduce + broadcast: 2*(1e-5 + 0.5*40e6/1e9) = 0.04002 s. */
  bagua__adv_meas_t hier = slow;
  hier.nodes = 2;
  hier.ranks_per_node = 2;
  hier.intra_lat = 1e-5;
  hier.intra_bw = 1e9;
  hier.quant_bw = 0;
  /* Flat ring over 4: each node boundary crossed once, at the link's speed. */
  NEAR(predict(&hier, BAGUA__ADV_GRADIENT_ALLREDUCE, 0, 0).comm_s, 4.8006);
  /* Hierarchical: 0.04002 + leaders' allreduce 2e-4 + 40e6/12.5e6. */
  NEAR(predict(&hier, BAGUA__ADV_GRADIENT_ALLREDUCE, 1, 0).comm_s, 0.04002 + 3.2002);
  /* bytegrad among the 2 leaders: regions 2*(32 + 5e6); each exchange
   * 1e-4 + 0.5*10000064/12.5e6. */
  NEAR(predict(&hier, BAGUA__ADV_BYTEGRAD, 1, 0).comm_s, 0.04002 + 2 * (1e-4 + 0.40000256));
  /* Flat bytegrad: the alltoall puts both ranks of a node on its link (6.25e6 B/s), the
   * allgather ring does not. */
  NEAR(predict(&hier, BAGUA__ADV_BYTEGRAD, 0, 0).comm_s,
       (1e-4 + 0.75 * 10000128 / 6.25e6) + (3e-4 + 0.75 * 10000128 / 12.5e6));

  /* The table: every algorithm once, ranked by predicted time, the choice marked. */
  bagua__adv_opts_t opts[BAGUA__ADV_COUNT];
  bagua__adv_pred_t pred[BAGUA__ADV_COUNT];
  int avail[BAGUA__ADV_COUNT];
  for (int i = 0; i < BAGUA__ADV_COUNT; i++) {
    opts[i] = bagua__adv_default_opts((bagua__adv_algo_t)i);
    pred[i] = bagua__adv_predict(&slow, &opts[i]);
    avail[i] = 1;
  }
  unsigned allow = 1u << BAGUA__ADV_GRADIENT_ALLREDUCE | 1u << BAGUA__ADV_BYTEGRAD;
  char buf[4096];
  size_t n = bagua__ddp_advise_format(buf, sizeof(buf), &slow, opts, pred, avail, allow,
                                      BAGUA__ADV_BYTEGRAD, BAGUA__ADV_GRADIENT_ALLREDUCE, 5.25);
  ASSERT_TRUE(n > 0 && n < sizeof(buf));
  ASSERT_EQ(bagua__ddp_advise_format(NULL, 0, &slow, opts, pred, avail, allow, 1, 0, 5.25), n);
  printf("%s", buf);
  /* Expected order: async 0.2, bytegrad = qadam 1.53 (bytegrad first: the sort is stable),
   * low_precision_decentralized 2.1, decentralized 4.8806, gradient_allreduce 5.0006. */
  const char *order[] = {"async",         "bytegrad",
                         "qadam",         "low_precision_decentralized",
                         "decentralized", "gradient_allreduce"};
  const char *at = buf;
  for (int i = 0; i < 6; i++) {
    char row[64];
    snprintf(row, sizeof(row), "advise: %-4d %s ", i + 1, order[i]);
    const char *hit = strstr(at, row);
    if (!hit) TEST_FAIL("the table lacks \"%s\" after the previous row:\n%s", row, buf);
    at = hit;
  }
  if (!strstr(strstr(buf, "advise: 2    bytegrad"), "<- chosen"))
    TEST_FAIL("bytegrad is not marked as chosen:\n%s", buf);
  if (!strstr(buf, "(not allowed)")) TEST_FAIL("no algorithm marked not allowed:\n%s", buf);
  if (!strstr(strstr(buf, " gradient_allreduce "), "running: measured 5.2500 s/step"))
    TEST_FAIL("the running algorithm's measured step time is missing:\n%s", buf);
  printf("model: predictions match the hand-computed values; the table is ranked\n");
  return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* settings                                                                                   */
/* ------------------------------------------------------------------------------------------ */

static const char *const k_vars[] = {"BAGUA_ALGORITHM", "BAGUA_AUTO_ALLOW", "BAGUA_ADVISE",
                                     "BAGUA_ADVISE_STEPS"};

static void env(const char *list) {
  for (size_t i = 0; i < sizeof(k_vars) / sizeof(k_vars[0]); i++) unsetenv(k_vars[i]);
  mp_apply_env(list);
  bagua__params_reload(); /* also when `list` is NULL */
}

static bagua__ddp_settings_t resolve(const char *list, const char *algorithm) {
  bagua_ddp_config_t cfg = BAGUA_DDP_CONFIG_INIT;
  cfg.algorithm = algorithm;
  bagua__ddp_settings_t s;
  env(list);
  bagua_status_t st = bagua__ddp_settings(&cfg, &s);
  if (st != BAGUA_OK)
    TEST_FAIL("env \"%s\": bagua__ddp_settings returned %s: %s", list ? list : "",
              bagua_err_name(st), bagua_last_error());
  return s;
}

#define BIT(a) (1u << BAGUA__ADV_##a)

static int mode_settings(void) {
  bagua__ddp_settings_t s = resolve("BAGUA_ALGORITHM=auto", NULL);
  ASSERT_STREQ(s.algo->name, "gradient_allreduce");
  ASSERT_EQ(s.auto_allow, 0x3fu & ~BIT(QADAM));
  s = resolve("BAGUA_ALGORITHM=AUTO;BAGUA_AUTO_ALLOW=async,Decentralized", NULL);
  ASSERT_STREQ(s.algo->name, "decentralized");
  ASSERT_EQ(s.auto_allow, BIT(ASYNC) | BIT(DECENTRALIZED));
  /* qadam brings its own optimizer: left out when others are allowed, alone it runs. */
  s = resolve("BAGUA_ALGORITHM=auto;BAGUA_AUTO_ALLOW=qadam,bytegrad", NULL);
  ASSERT_STREQ(s.algo->name, "bytegrad");
  ASSERT_EQ(s.auto_allow, BIT(BYTEGRAD));
  s = resolve("BAGUA_ALGORITHM=auto;BAGUA_AUTO_ALLOW=qadam", NULL);
  ASSERT_STREQ(s.algo->name, "qadam");
  ASSERT_EQ(s.optimizer, BAGUA__OPT_QADAM);
  /* The program may ask for "auto" itself; a program that names an algorithm is not auto. */
  s = resolve("BAGUA_AUTO_ALLOW=bytegrad,low_precision_decentralized", "auto");
  ASSERT_STREQ(s.algo->name, "bytegrad");
  s = resolve("BAGUA_ALGORITHM=auto", "bytegrad");
  ASSERT_STREQ(s.algo->name, "bytegrad");
  ASSERT_EQ(s.auto_allow, 0);
  s = resolve("BAGUA_ADVISE=1", NULL);
  ASSERT_EQ(s.auto_allow, 0);

  /* A bad word is refused, named, with what is accepted. */
  bagua_ddp_config_t cfg = BAGUA_DDP_CONFIG_INIT;
  const char *bad[] = {"BAGUA_ALGORITHM=auto;BAGUA_AUTO_ALLOW=gradient_allreduce,sgd",
                       "BAGUA_ALGORITHM=auto;BAGUA_AUTO_ALLOW=bytegrad,,async"};
  const char *word[] = {"\"sgd\"", "\"\""};
  for (int i = 0; i < 2; i++) {
    env(bad[i]);
    ASSERT_STATUS(bagua__ddp_settings(&cfg, &s), BAGUA_ERR_INVALID_ARG);
    const char *w = bagua_last_error();
    if (!strstr(w, "BAGUA_AUTO_ALLOW") || !strstr(w, word[i]) || !strstr(w, "accepted") ||
        !strstr(w, "low_precision_decentralized"))
      TEST_FAIL(
          "the warning for %s does not name the variable, the word %s and the accepted "
          "names: %s",
          bad[i], word[i], w);
  }
  cfg.algorithm = "automatic";
  env(NULL);
  ASSERT_STATUS(bagua__ddp_settings(&cfg, &s), BAGUA_ERR_INVALID_ARG);
  if (!strstr(bagua_last_error(), "auto")) TEST_FAIL("%s", bagua_last_error());
  printf("settings: auto starts safe, keeps to the allowed set, refuses bad names\n");
  return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* multi-rank runs                                                                            */
/* ------------------------------------------------------------------------------------------ */

static problem_t prob = {.d_in = 96, .d_out = 8, .n = 48, .nsplit = 4, .noise = 0.1f};

typedef struct {
  int steps;
  const char *expect_nodes; /* a phrase the table must hold, or NULL */
} run_arg_t;

/* Rank 0's stderr goes to a file while the context runs; returns what was written. */
static char *capture_end(int saved, const char *path) {
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  FILE *f = fopen(path, "r");
  if (!f) TEST_FAIL("cannot read back %s", path);
  static char text[1 << 16];
  size_t n = fread(text, 1, sizeof(text) - 1, f);
  text[n] = '\0';
  fclose(f);
  unlink(path);
  return text;
}

static int body_advise(bagua_comm_t *c, void *arg) {
  const run_arg_t *ra = arg;
  int rank = bagua_comm_rank(c);
  char path[64];
  int saved = -1;
  if (rank == 0) {
    snprintf(path, sizeof(path), "/tmp/bagua_advise_%d.txt", (int)getpid());
    saved = dup(2);
    int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0600);
    ASSERT_TRUE(saved >= 0 && fd >= 0);
    dup2(fd, 2);
    close(fd);
  }
  shard_t s;
  model_t m;
  shard_make(&prob, rank, &s);
  model_init(&prob, 1, &m);
  bagua_ddp_t *ddp = NULL;
  ASSERT_OK(bagua_ddp_create(c, NULL, &ddp));
  model_register(&m, ddp, 0);
  ASSERT_OK(bagua_ddp_ready(ddp));
  for (int t = 0; t < ra->steps; t++) ASSERT_OK(model_train_step(&m, &s, ddp, 0));
  /* BAGUA_ADVISE alone advises: the program's algorithm runs on. */
  ASSERT_STREQ(bagua_ddp_algorithm(ddp), "gradient_allreduce");
  ASSERT_EQ(bagua_ddp_layout_version(ddp), 0);
  if (rank == 0) {
    const char *table = bagua__ddp_advise_table(ddp);
    char *printed = capture_end(saved, path);
    if (!table) TEST_FAIL("rank 0 formatted no table; stderr was:\n%s", printed);
    printf("%s", printed);
    const char *names[] = {"gradient_allreduce",          "bytegrad", "decentralized",
                           "low_precision_decentralized", "qadam",    "async"};
    for (int i = 0; i < 6; i++) {
      char row[64];
      snprintf(row, sizeof(row), " %s ", names[i]);
      if (!strstr(table, row)) TEST_FAIL("the table lacks %s:\n%s", names[i], table);
    }
    for (int r = 1; r <= 6; r++) {
      char row[32];
      snprintf(row, sizeof(row), "advise: %-4d ", r);
      if (!strstr(table, row)) TEST_FAIL("the table lacks rank %d:\n%s", r, table);
    }
    /* Printed once, as formatted. */
    const char *first = strstr(printed, table);
    if (!first || strstr(first + strlen(table), "advise: 1    "))
      TEST_FAIL("not printed exactly once:\n%s", printed);
    if (ra->expect_nodes && !strstr(table, ra->expect_nodes))
      TEST_FAIL("the table lacks \"%s\":\n%s", ra->expect_nodes, table);
    if (strstr(table, "<- chosen")) TEST_FAIL("advice alone chose something:\n%s", table);
  } else {
    ASSERT_TRUE(bagua__ddp_advise_table(ddp) == NULL);
  }
  bagua_ddp_destroy(ddp);
  model_free(&m);
  shard_free(&s);
  assert_no_leaks();
  return 0;
}

/* Every rank runs auto; the algorithm it ends on must be allowed and the same everywhere. */
static int body_auto(bagua_comm_t *c, void *arg) {
  const char *allowed = arg;
  int rank = bagua_comm_rank(c), n = bagua_comm_size(c);
  shard_t s;
  model_t m;
  shard_make(&prob, rank, &s);
  model_init(&prob, 1, &m);
  bagua_ddp_t *ddp = NULL;
  ASSERT_OK(bagua_ddp_create(c, NULL, &ddp));
  model_register(&m, ddp, 0);
  ASSERT_OK(bagua_ddp_ready(ddp));
  /* "auto" cannot follow an elastic world: the attach is refused before the elastic context
   * is looked at (a dummy address stands for one). */
  static char not_an_elastic_context;
  ASSERT_STATUS(bagua_ddp_elastic_attach(ddp, (struct bagua_elastic_s *)&not_an_elastic_context),
                BAGUA_ERR_NOT_SUPPORTED);
  double before = model_union_loss(&m, n);
  const char *start = bagua_ddp_algorithm(ddp);
  ASSERT_STREQ(start, "gradient_allreduce");
  for (int t = 0; t < 30; t++) ASSERT_OK(model_train_step(&m, &s, ddp, 0));
  const char *end = bagua_ddp_algorithm(ddp);
  char word[64];
  snprintf(word, sizeof(word), ",%s,", end);
  char list[160];
  snprintf(list, sizeof(list), ",%s,", allowed);
  if (!strstr(list, word)) TEST_FAIL("rank %d ends on %s, not one of %s", rank, end, allowed);
  int32_t mine = (int32_t)(strlen(end) * 31 + (unsigned char)end[0]), lo = mine, hi = mine;
  ASSERT_OK(bagua_allreduce(c, &lo, &lo, 1, BAGUA_I32, BAGUA_MIN));
  ASSERT_OK(bagua_allreduce(c, &hi, &hi, 1, BAGUA_I32, BAGUA_MAX));
  if (lo != hi) TEST_FAIL("ranks end on different algorithms (rank %d: %s)", rank, end);
  int switched = strcmp(end, start) != 0;
  ASSERT_EQ(bagua_ddp_layout_version(ddp), switched);
  if (strcmp(end, "async") == 0) ASSERT_OK(bagua_ddp_async_pause(ddp));
  size_t nw = (size_t)prob.d_in * prob.d_out;
  assert_same_on_all_ranks(c, m.w, nw, "weights");
  assert_same_on_all_ranks(c, m.b, (size_t)prob.d_out, "bias");
  double after = model_union_loss(&m, n);
  if (!(after < 0.8 * before))
    TEST_FAIL("loss %.6g -> %.6g over 30 steps under auto (%s)", before, after, end);
  if (rank == 0)
    printf("auto among %s: %s -> %s, loss %.4g -> %.4g\n", allowed, start, end, before, after);
  bagua_ddp_destroy(ddp);
  model_free(&m);
  shard_free(&s);
  assert_no_leaks();
  return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* probe                                                                                      */
/* ------------------------------------------------------------------------------------------ */

#define PROBE_STEPS 2    /* BAGUA_ADVISE_STEPS below */
#define PROBE_TURN_S 0.1 /* the compute a rank spends in its turn */
#define PROBE_ELEMS 4096

static const char *const k_probe_algos[] = {"gradient_allreduce", "bytegrad", "decentralized",
                                            "low_precision_decentralized", "async"};
#define PROBE_NALGOS (int)(sizeof(k_probe_algos) / sizeof(k_probe_algos[0]))

static void sleep_s(double s) {
  double end = mp_now() + s;
  while (mp_now() < end) usleep(1000);
}

/* Whether every job submitted so far may run, and whether the queue holds. */
static void sched_state(bagua_ddp_t *d, int *all_released, int *hold) {
  pthread_mutex_lock(&d->sched.mu);
  *all_released = d->sched.released == d->sched.submitted;
  *hold = d->sched.hold;
  pthread_mutex_unlock(&d->sched.mu);
}

/* One algorithm: the steps of the probe, of the check and one more. Returns the compute figure
 * of rank 0's table (other ranks: 0). */
static double probe_one(bagua_comm_t *c, const char *algo) {
  int rank = bagua_comm_rank(c);
  float *w = calloc(2 * PROBE_ELEMS, sizeof(float)), *g = calloc(2 * PROBE_ELEMS, sizeof(float));
  ASSERT_TRUE(w && g);
  bagua_ddp_config_t cfg = BAGUA_DDP_CONFIG_INIT;
  cfg.algorithm = algo;
  bagua_ddp_t *ddp = NULL;
  ASSERT_OK(bagua_ddp_create(c, &cfg, &ddp));
  ASSERT_OK(bagua_ddp_register(ddp, "a", w, g, PROBE_ELEMS));
  ASSERT_OK(bagua_ddp_register(ddp, "b", w + PROBE_ELEMS, g + PROBE_ELEMS, PROBE_ELEMS));
  ASSERT_OK(bagua_ddp_ready(ddp));
  int jobs = strcmp(algo, "low_precision_decentralized") && strcmp(algo, "async");
  /* Step 0 is the warm-up, 1 .. PROBE_STEPS the probe (the decision at the end of the last),
   * one settling step, then PROBE_STEPS checked steps. */
  for (int t = 0; t < 2 * PROBE_STEPS + 3; t++) {
    int probing = t <= PROBE_STEPS;
    for (int i = 0; i < 2 * PROBE_ELEMS; i++) g[i] = 1e-3f * (float)(rank + 1);
    ASSERT_OK(bagua_ddp_grad_ready(ddp, 0));
    ASSERT_OK(bagua_ddp_grad_ready(ddp, 1));
    /* The rest of this rank's backward pass: its turn in the probe, else a little. */
    sleep_s(probing && t > 0 && t % 2 == rank ? PROBE_TURN_S : 0.02);
    int all_released, hold;
    sched_state(ddp, &all_released, &hold);
    if (probing) {
      if (!hold) TEST_FAIL("%s, step %d: communication is not held during the probe", algo, t);
      /* The buckets (gradient_allreduce, bytegrad) or the exchange queued at the last step's
       * end (decentralized) wait for the end of the backward pass. */
      if (jobs && all_released)
        TEST_FAIL("%s, step %d: a job was let run during the probe's backward pass", algo, t);
      if (atomic_load(&ddp->async_rounds) != 0)
        TEST_FAIL("%s, step %d: async averaged during the probe", algo, t);
    } else if (hold || !all_released) {
      TEST_FAIL("%s, step %d: communication is still held after the probe", algo, t);
    }
    ASSERT_OK(bagua_ddp_step(ddp));
  }
  if (strcmp(algo, "async") == 0) {
    /* Averaging resumes once the probe is over (a round every millisecond). */
    double end = mp_now() + 10;
    while (atomic_load(&ddp->async_rounds) == 0 && mp_now() < end) usleep(1000);
    if (atomic_load(&ddp->async_rounds) == 0) TEST_FAIL("async did not resume after the probe");
    ASSERT_OK(bagua_ddp_async_pause(ddp));
  }
  double compute = 0;
  const char *table = bagua__ddp_advise_table(ddp);
  if (rank == 0) {
    const char *at = table ? strstr(table, "measured compute ") : NULL;
    if (!at || sscanf(at, "measured compute %lf", &compute) != 1)
      TEST_FAIL("%s: no compute figure in rank 0's table:\n%s", algo, table ? table : "(none)");
  }
  bagua_ddp_destroy(ddp);
  free(w);
  free(g);
  return compute;
}

static int body_probe(bagua_comm_t *c, void *arg) {
  (void)arg;
  int rank = bagua_comm_rank(c);
  char path[64];
  int saved = -1;
  if (rank == 0) {
    snprintf(path, sizeof(path), "/tmp/bagua_probe_%d.txt", (int)getpid());
    saved = dup(2);
    int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0600);
    ASSERT_TRUE(saved >= 0 && fd >= 0);
    dup2(fd, 2);
    close(fd);
  }
  double compute[PROBE_NALGOS];
  for (int i = 0; i < PROBE_NALGOS; i++) compute[i] = probe_one(c, k_probe_algos[i]);
  if (rank == 0) {
    char *printed = capture_end(saved, path);
    printf("%s", printed);
    for (int i = 0; i < PROBE_NALGOS; i++) {
      char line[96];
      snprintf(line, sizeof(line), "advise: check: %s predicted ", k_probe_algos[i]);
      if (!strstr(printed, line)) TEST_FAIL("no check line for %s:\n%s", k_probe_algos[i], printed);
      printf("probe: %-28s compute %.4f s/step\n", k_probe_algos[i], compute[i]);
      /* Each rank's median over its two probe steps is its turn and a step without one. A
       * wait for the other rank's turn counted as compute gives the whole turn instead. */
      if (compute[i] < 0.25 * PROBE_TURN_S || compute[i] > 0.8 * PROBE_TURN_S)
        TEST_FAIL(
            "%s: compute %.4f s/step, not about half a turn of %.2f s (waiting for the "
            "other rank was counted as compute, or the compute was not counted)",
            k_probe_algos[i], compute[i], PROBE_TURN_S);
    }
  }
  assert_no_leaks();
  return 0;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "";
  if (strcmp(mode, "model") == 0) return mode_model();
  if (strcmp(mode, "settings") == 0) return mode_settings();
  if (strcmp(mode, "advise2") == 0) {
    mp_opts_t o = {.nranks = 2,
                   .transport = BAGUA_TRANSPORT_TCP,
                   .setenv_list = "BAGUA_ADVISE=1;BAGUA_ADVISE_STEPS=2"};
    run_arg_t ra = {.steps = 6, .expect_nodes = "2 ranks on 1 node (up to 2 per node)"};
    return mp_run(&o, body_advise, &ra);
  }
  if (strcmp(mode, "advise4") == 0) {
    mp_opts_t o = {.nranks = 4,
                   .transport = BAGUA_TRANSPORT_AUTO,
                   .ranks_per_node = 2,
                   .setenv_list = "BAGUA_ADVISE=1;BAGUA_ADVISE_STEPS=2"};
    run_arg_t ra = {.steps = 5, .expect_nodes = "4 ranks on 2 nodes (up to 2 per node)"};
    return mp_run(&o, body_advise, &ra);
  }
  if (strcmp(mode, "auto") == 0) {
    const char *allowed = "gradient_allreduce,bytegrad";
    mp_opts_t o = {.nranks = 2,
                   .transport = BAGUA_TRANSPORT_TCP,
                   .setenv_list =
                       "BAGUA_ALGORITHM=auto;BAGUA_ADVISE_STEPS=2;"
                       "BAGUA_AUTO_ALLOW=gradient_allreduce,bytegrad;"
                       "BAGUA_HIERARCHICAL=0"};
    return mp_run(&o, body_auto, (void *)allowed);
  }
  if (strcmp(mode, "auto_async") == 0) {
    const char *allowed = "gradient_allreduce,async";
    mp_opts_t o = {.nranks = 2,
                   .transport = BAGUA_TRANSPORT_TCP,
                   .setenv_list =
                       "BAGUA_ALGORITHM=auto;BAGUA_ADVISE_STEPS=2;"
                       "BAGUA_AUTO_ALLOW=gradient_allreduce,async;"
                       "BAGUA_SYNC_INTERVAL_MS=2"};
    return mp_run(&o, body_auto, (void *)allowed);
  }
  if (strcmp(mode, "probe") == 0) {
    mp_opts_t o = {.nranks = 2,
                   .transport = BAGUA_TRANSPORT_TCP,
                   .setenv_list =
                       "BAGUA_ADVISE=1;BAGUA_ADVISE_STEPS=2;BAGUA_OVERLAP=1;"
                       "BAGUA_SYNC_INTERVAL_MS=1"};
    return mp_run(&o, body_probe, NULL);
  }
  TEST_FAIL("usage: %s model|settings|advise2|advise4|auto|auto_async|probe", argv[0]);
}
