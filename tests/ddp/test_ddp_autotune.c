/*
 * Autotuning (BAGUA_AUTOTUNE=1, ddp/tune/autotune.c) with real ranks and real steps.
 *
 *   same   2 ranks on 2 emulated nodes over TCP, gradient_allreduce: after every step each rank
 *          records the settings in effect (layout version, bucket size, hierarchical, streams,
 *          segment, bucket count, ring threshold, read from the context and its communicator, not
 * from the tuner); the records are equal on every rank at every step, at least one setting changed
 * (the layout at least once), tuning ended within the step budget, the weights are bit-identical
 * across ranks and the loss went down. hier   4 ranks, 2 per node: hierarchical is a searched
 * dimension and really applied (the context ran steps with hierarchical 0 and with 1), same checks
 * as above. csv    2 ranks on one node (shared memory): BAGUA_LOG_DIR/autotune.csv has the header,
 * one row per trial with the settings measured and exactly one chosen row; streams and segment
 * cannot matter here, so every row keeps them. released  as same, after bagua_ddp_release_params()
 * (the Python front end's zero-copy views): the layout never moves (layout version 0), streams and
 * segment are tuned. bad    BAGUA_AUTOTUNE=2 and =yes are refused by bagua_ddp_create() with
 *          BAGUA_ERR_INVALID_ARG and a warning naming the variable and what is accepted; ranks
 *          with different values are refused with BAGUA_ERR_INVALID_USAGE on every rank.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../comm/mp.h"
#include "../test.h"
#include "comm/tune.h"
#include "common/params.h"
#include "ddp/tune/autotune.h"
#include "ddp/ddp_internal.h"
#include "problem.h"

#define STEPS 40
#define NREC 7

static problem_t prob = {.d_in = 128, .d_out = 32, .n = 32, .nsplit = 8, .noise = 0.1f};

typedef struct {
  int expect_hier_both; /* hier mode: steps with hierarchical 0 and 1 must both occur */
  const char *csv_dir;  /* csv mode: where autotune.csv is expected (rank 0 reads it) */
  int release;          /* released mode: bagua_ddp_release_params() after ready */
} spec_t;

/* What is in effect after a step, from the context itself. */
static void record(bagua_ddp_t *d, int64_t *rec) {
  rec[0] = bagua_ddp_layout_version(d);
  rec[1] = (int64_t)d->s.bucket_bytes;
  rec[2] = d->s.hierarchical;
  rec[3] = bagua__comm_streams(d->comm);
  rec[4] = (int64_t)bagua__comm_segment(d->comm);
  rec[5] = d->nbuckets;
  rec[6] = (int64_t)bagua__comm_ring_min(d->comm);
}

static void check_csv(const char *dir, const bagua__autotune_info_t *info) {
  char path[512], line[512];
  snprintf(path, sizeof(path), "%s/autotune.csv", dir);
  FILE *f = fopen(path, "r");
  if (!f) TEST_FAIL("%s was not written", path);
  if (!fgets(line, sizeof(line), f)) TEST_FAIL("%s is empty", path);
  ASSERT_STREQ(line,
               "trial,step,bucket_bytes,hierarchical,streams,segment_bytes,ring_min_bytes,"
               "seconds_per_step,samples_per_s,chosen\n");
  int rows = 0, chosen = 0;
  long long buckets[64];
  while (fgets(line, sizeof(line), f)) {
    int trial, hier, streams, ch;
    long long step, bucket, seg, ring;
    double sps;
    /* samples_per_s is empty: this program counts no samples. */
    if (sscanf(line, "%d,%lld,%lld,%d,%d,%lld,%lld,%lf,,%d", &trial, &step, &bucket, &hier,
               &streams, &seg, &ring, &sps, &ch) != 9)
      TEST_FAIL("row %d of %s does not parse: %s", rows, path, line);
    ASSERT_EQ(trial, rows);
    ASSERT_TRUE(sps > 0);
    ASSERT_EQ(streams, 0);  /* one node: no TCP peer, not tuned */
    ASSERT_EQ(seg, 262144); /* the default segment, not tuned over shared memory */
    ASSERT_EQ(hier, 0);     /* one node: not tuned */
    ASSERT_EQ(ring, 65536); /* the default threshold: no TCP collective over shared memory */
    chosen += ch;
    if (rows < 64) buckets[rows] = bucket;
    rows++;
  }
  fclose(f);
  ASSERT_EQ(rows, info->trials);
  ASSERT_EQ(chosen, 1);
  ASSERT_GE(rows, 2);
  ASSERT_NE(buckets[0], buckets[1]); /* the second trial measured another bucket size */
}

static int body(bagua_comm_t *c, void *arg) {
  const spec_t *sp = arg;
  int rank = bagua_comm_rank(c), n = bagua_comm_size(c);
  shard_t s;
  model_t m;
  shard_make(&prob, rank, &s);
  model_init(&prob, 1 + rank, &m);
  bagua_ddp_config_t cfg = BAGUA_DDP_CONFIG_INIT;
  cfg.algorithm = "gradient_allreduce";
  cfg.lr = 0.05;
  bagua_ddp_t *d = NULL;
  ASSERT_OK(bagua_ddp_create(c, &cfg, &d));
  model_register(&m, d, 0);
  ASSERT_OK(bagua_ddp_ready(d));
  if (sp->release) ASSERT_OK(bagua_ddp_release_params(d));
  double loss0 = model_union_loss(&m, n);
  int64_t *rec = calloc((size_t)STEPS * NREC, sizeof(int64_t));
  int64_t *lo = calloc((size_t)STEPS * NREC, sizeof(int64_t));
  int64_t *hi = calloc((size_t)STEPS * NREC, sizeof(int64_t));
  ASSERT_TRUE(rec && lo && hi);
  for (int t = 0; t < STEPS; t++) {
    ASSERT_OK(model_train_step(&m, &s, d, 0));
    record(d, rec + (size_t)t * NREC);
  }
  double loss1 = model_union_loss(&m, n);
  bagua__autotune_info_t info;
  bagua__autotune_info(d, &info);

  /* The same settings at every step on every rank. */
  ASSERT_OK(bagua_allreduce(c, rec, lo, (size_t)STEPS * NREC, BAGUA_I64, BAGUA_MIN));
  ASSERT_OK(bagua_allreduce(c, rec, hi, (size_t)STEPS * NREC, BAGUA_I64, BAGUA_MAX));
  for (int i = 0; i < STEPS * NREC; i++)
    if (lo[i] != hi[i])
      TEST_FAIL("rank %d: step %d field %d differs across ranks: %lld .. %lld", rank, i / NREC + 1,
                i % NREC, (long long)lo[i], (long long)hi[i]);
  /* Something changed, and the layout at least once; tuning ended in the budget. */
  ASSERT_TRUE(info.enabled);
  ASSERT_TRUE(info.done);
  ASSERT_GE(info.changes, 1);
  ASSERT_GE(info.trials, 2);
  int changed = 0, hier_seen[2] = {0, 0};
  for (int t = 1; t < STEPS; t++)
    for (int k = 1; k < NREC; k++) changed |= rec[t * NREC + k] != rec[(t - 1) * NREC + k];
  for (int t = 0; t < STEPS; t++) hier_seen[rec[t * NREC + 2] != 0] = 1;
  ASSERT_TRUE(changed);
  ASSERT_LT(info.last_change_step, STEPS);
  if (sp->release) {
    /* Zero-copy callers hold views into the flat storage: the layout never moves, only the
     * communicator settings are tuned; the weights live in the views. */
    for (int t = 0; t < STEPS; t++) ASSERT_EQ(rec[t * NREC], 0);
    for (int i = 0; i < d->ntensors; i++)
      assert_same_on_all_ranks(c, bagua_ddp_param(d, i), d->tensors[i].count, "flat weights");
    if (rank == 0)
      printf("released: %d trials, %d changes, layout never moved\n", info.trials, info.changes);
    free(rec);
    free(lo);
    free(hi);
    bagua_ddp_destroy(d);
    model_free(&m);
    shard_free(&s);
    return 0;
  }
  ASSERT_GE(rec[(STEPS - 1) * NREC], 1); /* layout_version: re-bucketed at least once */
  if (sp->expect_hier_both && !(hier_seen[0] && hier_seen[1]))
    TEST_FAIL("hierarchical was never switched: steps with 0: %d, with 1: %d", hier_seen[0],
              hier_seen[1]);
  /* The maths is unchanged: one model on every rank, and it learned. */
  assert_same_on_all_ranks(c, m.w, (size_t)prob.d_in * prob.d_out, "weights");
  assert_same_on_all_ranks(c, m.b, (size_t)prob.d_out, "bias");
  if (!(loss1 < loss0)) TEST_FAIL("loss went from %g to %g", loss0, loss1);
  if (sp->csv_dir && rank == 0) check_csv(sp->csv_dir, &info);
  if (rank == 0)
    printf(
        "autotune: %d trials, %d changes (steps %lld..%lld), final bucket %lld B, hier %lld, "
        "streams %lld, segment %lld B; loss %.4g -> %.4g\n",
        info.trials, info.changes, (long long)info.first_change_step,
        (long long)info.last_change_step, (long long)rec[(STEPS - 1) * NREC + 1],
        (long long)rec[(STEPS - 1) * NREC + 2], (long long)rec[(STEPS - 1) * NREC + 3],
        (long long)rec[(STEPS - 1) * NREC + 4], loss0, loss1);
  free(rec);
  free(lo);
  free(hi);
  bagua_ddp_destroy(d);
  model_free(&m);
  shard_free(&s);
  assert_no_leaks();
  return 0;
}

/* A bad BAGUA_AUTOTUNE is refused on every rank, naming the variable and what it accepts. The
 * variable is set after the communicator exists: bagua_comm_create() would refuse it too. */
static int body_bad(bagua_comm_t *c, void *arg) {
  (void)arg;
  const char *values[] = {"2", "yes", "-1"};
  for (size_t i = 0; i < sizeof(values) / sizeof(values[0]); i++) {
    setenv("BAGUA_AUTOTUNE", values[i], 1);
    bagua__params_reload();
    bagua_ddp_t *d = (bagua_ddp_t *)1;
    ASSERT_STATUS(bagua_ddp_create(c, NULL, &d), BAGUA_ERR_INVALID_ARG);
    ASSERT_TRUE(d == NULL);
    const char *w = bagua_last_error();
    if (!strstr(w, "BAGUA_AUTOTUNE") || !strstr(w, values[i]) || !strstr(w, "accepted") ||
        !strstr(w, "[0, 1]"))
      TEST_FAIL("the warning for BAGUA_AUTOTUNE=%s does not name it and what is accepted: %s",
                values[i], w);
  }
  /* Ranks that disagree: refused on every rank, naming the variable, instead of a hang or a
   * mismatched collective. */
  setenv("BAGUA_AUTOTUNE", bagua_comm_rank(c) == 0 ? "1" : "0", 1);
  bagua__params_reload();
  bagua_ddp_t *d = (bagua_ddp_t *)1;
  ASSERT_STATUS(bagua_ddp_create(c, NULL, &d), BAGUA_ERR_INVALID_USAGE);
  ASSERT_TRUE(d == NULL);
  if (!strstr(bagua_last_error(), "BAGUA_AUTOTUNE") || !strstr(bagua_last_error(), "every rank"))
    TEST_FAIL("the warning for ranks that disagree does not say so: %s", bagua_last_error());
  unsetenv("BAGUA_AUTOTUNE");
  bagua__params_reload();
  ASSERT_OK(bagua_barrier(c));
  if (bagua_comm_rank(c) == 0)
    printf("bad: BAGUA_AUTOTUNE=2, yes and -1 were refused, and ranks that disagree\n");
  return 0;
}

#define SMALL_WINDOWS                                                             \
  "BAGUA_AUTOTUNE=1;BAGUA_AUTOTUNE_WARMUP_STEPS=2;BAGUA_AUTOTUNE_SAMPLE_STEPS=2;" \
  "BAGUA_AUTOTUNE_SETTLE_STEPS=1;BAGUA_AUTOTUNE_MAX_SAMPLES=10;BAGUA_BUCKET_SIZE=16384"

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "";
  if (strcmp(mode, "same") == 0) {
    spec_t sp = {0, NULL, 0};
    mp_opts_t o = {.nranks = 2,
                   .transport = BAGUA_TRANSPORT_TCP,
                   .ranks_per_node = 1,
                   .deadline_s = 80,
                   .setenv_list = SMALL_WINDOWS};
    return mp_run(&o, body, &sp);
  }
  if (strcmp(mode, "hier") == 0) {
    spec_t sp = {1, NULL, 0};
    mp_opts_t o = {.nranks = 4,
                   .transport = BAGUA_TRANSPORT_AUTO,
                   .ranks_per_node = 2,
                   .deadline_s = 80,
                   .setenv_list = SMALL_WINDOWS};
    return mp_run(&o, body, &sp);
  }
  if (strcmp(mode, "csv") == 0) {
    char dir[] = "/tmp/bagua_autotune_XXXXXX";
    if (!mkdtemp(dir)) TEST_FAIL("mkdtemp failed");
    char env[512];
    snprintf(env, sizeof(env), SMALL_WINDOWS ";BAGUA_LOG_DIR=%s", dir);
    spec_t sp = {0, dir, 0};
    mp_opts_t o = {
        .nranks = 2, .transport = BAGUA_TRANSPORT_AUTO, .deadline_s = 80, .setenv_list = env};
    int rc = mp_run(&o, body, &sp);
    char path[600];
    snprintf(path, sizeof(path), "%s/autotune.csv", dir);
    unlink(path);
    rmdir(dir);
    return rc;
  }
  if (strcmp(mode, "released") == 0) {
    spec_t sp = {0, NULL, 1};
    mp_opts_t o = {.nranks = 2,
                   .transport = BAGUA_TRANSPORT_TCP,
                   .ranks_per_node = 1,
                   .deadline_s = 80,
                   .setenv_list = SMALL_WINDOWS};
    return mp_run(&o, body, &sp);
  }
  if (strcmp(mode, "bad") == 0) {
    mp_opts_t o = {.nranks = 2, .transport = BAGUA_TRANSPORT_TCP};
    return mp_run(&o, body_bad, NULL);
  }
  TEST_FAIL("usage: %s same|hier|csv|released|bad", argv[0]);
}
