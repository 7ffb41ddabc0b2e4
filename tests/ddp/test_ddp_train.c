/*
 * Trains the synthetic least-squares problem with one algorithm on N ranks and checks that
 * the loss on the union of all shards falls below a threshold near the noise floor (starting
 * far above it). Centralized algorithms must also leave bit-identical weights on every rank,
 * and gradient_allreduce must match a single-process run on the union of the data.
 *
 * usage: test_ddp_train ALGORITHM NRANKS tcp|shm|auto [KEY=VALUE ...]
 *   rpn=R     ranks per emulated node (default 1 for tcp, 0 = one node otherwise)
 *   peer=M    peer_mode           hier=H   hierarchical (-1 default)
 *   ef=1      error feedback      warmup=W  warm-up steps
 *   opt=NAME  optimizer           lr=X     learning rate     momentum=X
 *   steps=N   training steps      bucket=B bucket bytes      interval=K comm_interval
 *   sync=MS   async interval      zc=MASK  zero-copy gradient tensors (bit i: tensor i)
 *   decay=X   multiply lr by X every step     maxloss=F  threshold = F * noise floor
 *   sleep_us=U  pause after every step (async: lets background rounds happen)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../comm/mp.h"
#include "../test.h"
#include "problem.h"

typedef struct {
  const char *algorithm, *peer, *opt;
  int hier, ef, warmup, steps, interval, sync_ms, sleep_us;
  long bucket;
  unsigned zc;
  double lr, momentum, decay, maxloss;
} targs_t;

/* Few samples per shard on purpose: a model trained on one shard alone overfits it and misses
 * the threshold on the union, so the threshold tells communication from none (each run
 * checks this with the same configuration on a communicator of one rank). */
static problem_t prob = {.d_in = 16, .d_out = 4, .n = 32, .nsplit = 4, .noise = 0.1f};

static int centralized(const char *a) {
  return !strcmp(a, "gradient_allreduce") || !strcmp(a, "bytegrad") || !strcmp(a, "qadam");
}

/* The same SGD steps in one process on the union of the shards. */
static void reference_run(const targs_t *a, int nranks, model_t *ref) {
  model_init(&prob, 0, ref); /* rank 0's initial weights win the broadcast */
  shard_t *sh = calloc(nranks, sizeof(*sh));
  for (int r = 0; r < nranks; r++) shard_make(&prob, r, &sh[r]);
  size_t nw = (size_t)prob.d_in * prob.d_out;
  float *gw = calloc(nw, sizeof(float)), *gb = calloc(prob.d_out, sizeof(float));
  double lr = a->lr;
  for (int t = 0; t < a->steps; t++) {
    memset(gw, 0, nw * sizeof(float));
    memset(gb, 0, prob.d_out * sizeof(float));
    for (int r = 0; r < nranks; r++) {
      model_loss(ref, &sh[r], 1);
      for (size_t i = 0; i < nw; i++) gw[i] += ref->gw[i];
      for (int j = 0; j < prob.d_out; j++) gb[j] += ref->gb[j];
    }
    float flr = (float)lr;
    for (size_t i = 0; i < nw; i++) ref->w[i] -= flr * (gw[i] / nranks);
    for (int j = 0; j < prob.d_out; j++) ref->b[j] -= flr * (gb[j] / nranks);
    lr *= a->decay;
  }
  for (int r = 0; r < nranks; r++) shard_free(&sh[r]);
  free(sh);
  free(gw);
  free(gb);
}

typedef struct {
  double loss0, loss_before_abort, secs, bytes_per_step;
  bagua_ddp_stats_t st;
} result_t;

/* Waits until the async averaging thread has completed a round after *seen, then records the
 * new count. Every rank's thread runs rounds on its own timer, so this always makes progress
 * unless averaging is broken, which the deadline turns into a failure. */
static void wait_for_round(bagua_ddp_t *ddp, uint64_t *seen) {
  double deadline = mp_now() + 10.0;
  for (;;) {
    bagua_ddp_stats_t st = {.struct_size = sizeof(st)};
    ASSERT_OK(bagua_ddp_stats(ddp, &st));
    if (st.async_rounds > *seen) {
      *seen = st.async_rounds;
      return;
    }
    if (mp_now() > deadline)
      TEST_FAIL("no async averaging round completed within 10 s (rounds so far: %llu)",
                (unsigned long long)*seen);
    usleep(200);
  }
}

/* Trains `m` on shard `s` with the configuration of `a` over the ranks of `c`. */
static void train(bagua_comm_t *c, const targs_t *a, const shard_t *s, model_t *m, int nunion,
                  result_t *res) {
  bagua_ddp_config_t cfg = BAGUA_DDP_CONFIG_INIT;
  cfg.algorithm = a->algorithm;
  cfg.peer_mode = a->peer;
  cfg.optimizer = a->opt;
  cfg.hierarchical = a->hier;
  cfg.error_feedback = a->ef;
  cfg.warmup_steps = a->warmup;
  cfg.comm_interval = a->interval;
  cfg.sync_interval_ms = a->sync_ms;
  cfg.bucket_bytes = a->bucket;
  cfg.lr = a->lr;
  cfg.momentum = a->momentum;
  bagua_ddp_t *ddp = NULL;
  ASSERT_OK(bagua_ddp_create(c, &cfg, &ddp));
  model_register(m, ddp, a->zc);
  ASSERT_OK(bagua_ddp_ready(ddp));
  size_t nw = (size_t)prob.d_in * prob.d_out;
  assert_same_on_all_ranks(c, m->w, nw, "initial W");
  assert_same_on_all_ranks(c, m->b, prob.d_out, "initial b");
  res->loss0 = model_union_loss(m, nunion);
  double t0 = mp_now(), lr = a->lr;
  uint64_t bytes = 0, rounds_seen = 0;
  int is_async = !strcmp(a->algorithm, "async");
  int warmup = a->warmup > 0 ? a->warmup : 0; /* the async default is no warm-up */
  for (int t = 0; t < a->steps; t++) {
    ASSERT_OK(model_train_step(m, s, ddp, a->zc));
    bagua_ddp_stats_t st = {.struct_size = sizeof(st)};
    ASSERT_OK(bagua_ddp_stats(ddp, &st));
    bytes += st.bytes_last_step;
    lr *= a->decay;
    if (a->decay != 1.0) ASSERT_OK(bagua_ddp_set_lr(ddp, lr));
    /* Stands for a longer forward pass, so that async averaging gets rounds in. */
    if (a->sleep_us) usleep((useconds_t)a->sleep_us);
    /* Pace the local steps on the background rounds: after warm-up (the thread starts at the
     * end of step warmup-1), at least one round completes between two steps of this rank. How
     * far a rank drifts from the average between rounds is then bounded by the algorithm
     * (about one local step), not by how the machine happens to schedule the threads. */
    if (is_async && t + 1 >= warmup) wait_for_round(ddp, &rounds_seen);
  }
  res->secs = mp_now() - t0;
  res->bytes_per_step = (double)bytes / a->steps;
  res->loss_before_abort = model_union_loss(m, nunion);
  /* Abort stops every rank's averaging thread at its next round, so it waits until every rank
   * has left the loop above: a rank still pacing its last step on a round would wait forever. */
  if (is_async) {
    ASSERT_OK(bagua_barrier(c));
    ASSERT_OK(bagua_ddp_async_pause(ddp));
  }
  res->st.struct_size = sizeof(res->st);
  ASSERT_OK(bagua_ddp_stats(ddp, &res->st));
  bagua_ddp_destroy(ddp);
}

static int body(bagua_comm_t *c, void *arg) {
  const targs_t *a = arg;
  int me = bagua_comm_rank(c), n = bagua_comm_size(c);
  shard_t s;
  shard_make(&prob, me, &s);
  size_t nw = (size_t)prob.d_in * prob.d_out;
  double floor = problem_floor(&prob), limit = a->maxloss * floor;

  /* The baseline: the same configuration on a communicator of this rank alone. */
  bagua_comm_t *solo = NULL;
  ASSERT_OK(bagua_comm_split(c, me, 0, &solo));
  model_t alone;
  model_init(&prob, me, &alone);
  result_t r_alone;
  train(solo, a, &s, &alone, n, &r_alone);
  double loss_alone = model_union_loss(&alone, n);
  model_free(&alone);
  bagua_comm_destroy(solo);

  model_t m;
  model_init(&prob, me, &m); /* ranks start apart: bagua_ddp_ready() must align them */
  result_t r;
  train(c, a, &s, &m, n, &r);
  double loss = model_union_loss(&m, n);
  if (me == 0)
    printf(
        "%s n=%d: loss %.5f -> %.5f (floor %.5f, limit %.5f) in %d steps, %.2f s, "
        "%d buckets, %.0f bytes/step, overlap %.2f, async rounds %llu; one rank alone: "
        "%.5f\n",
        a->algorithm, n, r.loss0, loss, floor, limit, a->steps, r.secs, r.st.num_buckets,
        r.bytes_per_step, r.st.overlap_total, (unsigned long long)r.st.async_rounds, loss_alone);
  if (!(loss_alone > limit))
    TEST_FAIL("rank %d: the limit %g is too loose: training alone reaches %g", me, limit,
              loss_alone);
  if (!(r.loss0 > 10 * limit))
    TEST_FAIL("initial loss %g is not far above the limit %g", r.loss0, limit);
  if (!(loss < limit)) TEST_FAIL("rank %d: loss %g did not reach %g", me, loss, limit);
  if (!strcmp(a->algorithm, "async")) {
    /* Every rank's own model, before the final average, must already be much better than
     * training alone: the background rounds did the averaging. With steps paced on rounds
     * (see train) a rank is at most about one local step from the average; measured over 88 rank
     * runs, 4 jobs at once on 2 vCPUs: 0.0148 to 0.0163 against bounds of 0.0267 to 0.0298
     * (rank-dependent), a margin of at least 39 %. Before pacing it reached 0.0267. */
    double mid = 0.5 * (limit + loss_alone);
    if (!(r.loss_before_abort < mid))
      TEST_FAIL("rank %d: loss %g before the final average is not below %g", me,
                r.loss_before_abort, mid);
    ASSERT_GE(r.st.async_rounds, 3);
  }
  if (centralized(a->algorithm) || !strcmp(a->algorithm, "async")) {
    assert_same_on_all_ranks(c, m.w, nw, "final W");
    assert_same_on_all_ranks(c, m.b, prob.d_out, "final b");
  }
  if (!strcmp(a->algorithm, "gradient_allreduce") && a->momentum == 0 && !a->opt) {
    model_t ref;
    reference_run(a, n, &ref);
    double worst = 0;
    for (size_t i = 0; i < nw; i++) worst = fmax(worst, fabs(ref.w[i] - m.w[i]));
    for (int j = 0; j < prob.d_out; j++) worst = fmax(worst, fabs(ref.b[j] - m.b[j]));
    if (me == 0) printf("largest difference from the single-process run: %.3g\n", worst);
    ASSERT_TRUE(worst < 1e-4);
    model_free(&ref);
  }
  model_free(&m);
  shard_free(&s);
  assert_no_leaks();
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s ALGORITHM NRANKS tcp|shm|auto [KEY=VALUE ...]\n", argv[0]);
    return 2;
  }
  targs_t a = {.algorithm = argv[1],
               .hier = -1,
               .warmup = -1,
               .steps = 300,
               .interval = 1,
               .sync_ms = 5,
               .bucket = 128,
               .lr = 0.5,
               .decay = 1.0,
               .maxloss = 1.25};
  mp_opts_t o = {.nranks = atoi(argv[2]), .deadline_s = 60};
  o.transport = !strcmp(argv[3], "tcp")   ? BAGUA_TRANSPORT_TCP
                : !strcmp(argv[3], "shm") ? BAGUA_TRANSPORT_SHM
                                          : BAGUA_TRANSPORT_AUTO;
  o.ranks_per_node = o.transport == BAGUA_TRANSPORT_TCP ? 1 : 0;
  for (int i = 4; i < argc; i++) {
    char *eq = strchr(argv[i], '=');
    if (!eq) return 2;
    *eq = '\0';
    const char *k = argv[i], *v = eq + 1;
    if (!strcmp(k, "rpn"))
      o.ranks_per_node = atoi(v);
    else if (!strcmp(k, "peer"))
      a.peer = v;
    else if (!strcmp(k, "opt"))
      a.opt = v;
    else if (!strcmp(k, "hier"))
      a.hier = atoi(v);
    else if (!strcmp(k, "ef"))
      a.ef = atoi(v);
    else if (!strcmp(k, "warmup"))
      a.warmup = atoi(v);
    else if (!strcmp(k, "steps"))
      a.steps = atoi(v);
    else if (!strcmp(k, "interval"))
      a.interval = atoi(v);
    else if (!strcmp(k, "sync"))
      a.sync_ms = atoi(v);
    else if (!strcmp(k, "bucket"))
      a.bucket = atol(v);
    else if (!strcmp(k, "sleep_us"))
      a.sleep_us = atoi(v);
    else if (!strcmp(k, "zc"))
      a.zc = (unsigned)strtoul(v, NULL, 0);
    else if (!strcmp(k, "lr"))
      a.lr = atof(v);
    else if (!strcmp(k, "momentum"))
      a.momentum = atof(v);
    else if (!strcmp(k, "decay"))
      a.decay = atof(v);
    else if (!strcmp(k, "maxloss"))
      a.maxloss = atof(v);
    else if (!strcmp(k, "overlap")) /* BAGUA_OVERLAP: 0 holds, 1 overlaps (default: auto) */
      o.setenv_list = !strcmp(v, "1") ? "BAGUA_OVERLAP=1" : "BAGUA_OVERLAP=0";
    else {
      fprintf(stderr, "unknown option %s\n", k);
      return 2;
    }
  }
  double t0 = mp_now();
  int rc = mp_run(&o, body, &a);
  printf("%s %s on %d ranks (%s) in %.1f s\n", rc ? "FAILED" : "passed", a.algorithm, o.nranks,
         argv[3], mp_now() - t0);
  return rc;
}
