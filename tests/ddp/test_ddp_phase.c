/*
 * The phase check (ddp/phase.c): when the program numbers its steps (bagua_ddp_set_step), every
 * step that communicates first compares the ranks' numbers, so ranks out of step fail instead
 * of averaging one iteration's buckets with another's.
 *
 *   skip ALGO N TRANSPORT    every rank numbers its steps with its loop counter; the last rank
 *                            skips iteration SKIP. Every rank's first step that communicates
 *                            after it must return BAGUA_ERR_PROTOCOL (not OK, not a timeout)
 *                            within seconds, at the same library step on every rank, with
 *                            bagua_last_error() naming both numbers, no payload byte of that
 *                            step sent and no update made from it; later calls return the error
 *                            again and destroy completes.
 *   extra ALGO N TRANSPORT   the same with the last rank running iteration SKIP twice (a retried
 *                            batch numbered again).
 *   inphase ALGO N TRANSPORT every rank numbers its steps alike (from 1000): the weights and the
 *                            bytes sent are bit-identical to a run that numbers nothing, and no
 *                            step fails. Prints a hash of the weights, to compare with builds
 *                            without the check.
 *   usage N TRANSPORT        numbering before ready on one rank only fails ready on every rank;
 *                            bad numbers, and numbers for a context that numbered nothing before
 *                            ready, are refused; ready gives every rank rank 0's number; local
 *                            iterations (bagua_ddp_local_step) count, and alike keep the step.
 *   end N TRANSPORT          gradient_allreduce, steps not numbered: the last rank skips
 *                            iteration SKIP. By the library's own count the ranks stay in step
 *                            (the same calls in the same order), so no step fails until the
 *                            end, where the others' last step has no partner: it fails (the last
 *                            rank has destroyed its context) and never hangs. This is the limit
 *                            that numbering removes.
 *
 * Options after TRANSPORT: rpn=R (ranks per emulated node), hier=H, warmup=W, interval=K,
 * peer=MODE.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../comm/mp.h"
#include "../test.h"
#include "ddp/ddp_internal.h"
#include "problem.h"

static problem_t prob = {.d_in = 16, .d_out = 4, .n = 32, .nsplit = 4, .noise = 0.1f};

enum { SKIP = 3, STEPS = 8 };

typedef struct {
  const char *mode, *algorithm, *peer;
  int hier, warmup, interval;
} targs_t;

/* A ready context; `first` >= 0 numbers the steps from it (before ready), -1 does not. */
static bagua_ddp_t *create(bagua_comm_t *c, const targs_t *a, model_t *m, int64_t first) {
  bagua_ddp_config_t cfg = BAGUA_DDP_CONFIG_INIT;
  cfg.algorithm = a->algorithm;
  cfg.peer_mode = a->peer;
  cfg.hierarchical = a->hier;
  cfg.warmup_steps = a->warmup;
  if (a->interval > 0) cfg.comm_interval = a->interval;
  cfg.bucket_bytes = 128; /* several buckets */
  cfg.lr = 0.1;
  cfg.sync_interval_ms = 2;
  model_init(&prob, 0, m);
  bagua_ddp_t *ddp;
  ASSERT_OK(bagua_ddp_create(c, &cfg, &ddp));
  model_register(m, ddp, 0);
  if (first >= 0) ASSERT_OK(bagua_ddp_set_step(ddp, first));
  ASSERT_OK(bagua_ddp_ready(ddp));
  return ddp;
}

static uint64_t hash_weights(const model_t *m) {
  uint64_t h = 0xcbf29ce484222325ULL;
  const unsigned char *p = (const unsigned char *)m->w;
  for (size_t i = 0; i < (size_t)prob.d_in * prob.d_out * sizeof(float); i++)
    h = (h ^ p[i]) * 0x100000001b3ULL;
  p = (const unsigned char *)m->b;
  for (size_t i = 0; i < (size_t)prob.d_out * sizeof(float); i++) h = (h ^ p[i]) * 0x100000001b3ULL;
  return h;
}

/* skip and extra: the last rank is out of step from iteration SKIP on. */
static int body_out_of_step(bagua_comm_t *c, void *arg) {
  const targs_t *a = arg;
  int me = bagua_comm_rank(c), victim = bagua_comm_size(c) - 1, extra = !strcmp(a->mode, "extra");
  shard_t s;
  shard_make(&prob, me, &s);
  model_t m;
  bagua_ddp_t *ddp = create(c, a, &m, 0);
  size_t nw = (size_t)prob.d_in * prob.d_out;
  float *w_before = malloc(nw * sizeof(float)), *b_before = malloc(prob.d_out * sizeof(float));
  bagua_status_t st = BAGUA_OK;
  int iter = -1, runs = 0;
  double t_skip = 0, t_fail = 0;
  uint64_t mark = 0;
  for (int t = 0; t < STEPS && st == BAGUA_OK; t++) {
    int again = extra && me == victim && t == SKIP && runs == 0;
    if (me == victim && !extra && t == SKIP) {
      t_skip = mp_now();
      continue; /* the program skips this iteration: no call into the library */
    }
    if (t == SKIP && !t_skip) t_skip = mp_now();
    memcpy(w_before, m.w, nw * sizeof(float));
    memcpy(b_before, m.b, prob.d_out * sizeof(float));
    st = bagua_ddp_set_step(ddp, t);
    if (st == BAGUA_OK) st = model_train_step(&m, &s, ddp, 0);
    iter = t;
    /* The bytes at the end of the last good step, as its statistics counted them (a check in
     * flight, such as the one decentralized starts at the end of a step, is counted only once
     * it completes, so only a count taken with no job running is exact). */
    bagua_ddp_stats_t now = {.struct_size = sizeof(now)};
    ASSERT_OK(bagua_ddp_stats(ddp, &now));
    if (st == BAGUA_OK) mark = ddp->bytes_start + now.bytes_total;
    if (again) { /* the victim runs this iteration once more, with the same number */
      runs = 1;
      t--;
    }
  }
  t_fail = mp_now();
  bagua_ddp_stats_t stats = {.struct_size = sizeof(stats)};
  ASSERT_OK(bagua_ddp_stats(ddp, &stats));
  printf("rank %d: %s at iteration %d after %lld steps, %.3f s after the skip: %s\n", me,
         bagua_err_name(st), iter, (long long)stats.steps, t_fail - t_skip, bagua_last_error());
  if (st != BAGUA_ERR_PROTOCOL)
    TEST_FAIL("rank %d: the out-of-step run returned %s, expected BAGUA_ERR_PROTOCOL", me,
              bagua_err_name(st));
  /* The first step that communicates out of step fails: the skipped iteration's library step
   * (the repeated one's with extra) for the algorithms that communicate within a step;
   * decentralized exchanges a step's weights at the end of the step before, before the program
   * set the step's number, so its check fails one step later (the exchange it let through
   * carried the weights of a step every rank had completed alike). */
  int64_t want_steps = SKIP + extra + !strcmp(a->algorithm, "decentralized");
  ASSERT_EQ(stats.steps, want_steps);
  /* The numbers the ranks carried into the failed check: the others at the step after the ones
   * completed, the victim one further (skip) or one behind (extra). */
  long long others = want_steps, mine = me == victim ? others + (extra ? -1 : 1) : others;
  char want[96];
  snprintf(want, sizeof(want), "step %lld met step %lld", mine,
           me == victim ? others : others + (extra ? -1 : 1));
  if (!strstr(bagua_last_error(), want))
    TEST_FAIL("rank %d: the warning does not say \"%s\": %s", me, want, bagua_last_error());
  ASSERT_TRUE(t_fail - t_skip < 5.0); /* far below the communicator timeout (10 s) */
  /* Nothing of the failed step moved or was applied (its jobs have all ended). */
  ASSERT_EQ(bagua__ddp_bytes_sent(ddp) - mark, 0);
  if (memcmp(w_before, m.w, nw * sizeof(float)) ||
      memcmp(b_before, m.b, prob.d_out * sizeof(float)))
    TEST_FAIL("rank %d: the failed step changed the weights", me);
  /* Sticky. */
  ASSERT_STATUS(bagua_ddp_grad_ready(ddp, 0), BAGUA_ERR_PROTOCOL);
  ASSERT_STATUS(bagua_ddp_step(ddp), BAGUA_ERR_PROTOCOL);
  bagua_ddp_destroy(ddp);
  free(w_before);
  free(b_before);
  model_free(&m);
  shard_free(&s);
  assert_no_leaks();
  return 0;
}

/* Trains STEPS steps, numbered from `first` (-1: not numbered); returns the hash of the
 * weights and the bytes sent. */
static uint64_t train(bagua_comm_t *c, const targs_t *a, int64_t first, uint64_t *bytes) {
  shard_t s;
  shard_make(&prob, bagua_comm_rank(c), &s);
  model_t m;
  bagua_ddp_t *ddp = create(c, a, &m, first);
  for (int t = 0; t < STEPS; t++) {
    /* Every other step is numbered explicitly; the others count on by themselves. */
    if (first >= 0 && t % 2) ASSERT_OK(bagua_ddp_set_step(ddp, first + t));
    ASSERT_OK(model_train_step(&m, &s, ddp, 0));
  }
  bagua_ddp_stats_t stats = {.struct_size = sizeof(stats)};
  ASSERT_OK(bagua_ddp_stats(ddp, &stats));
  *bytes = stats.bytes_total;
  uint64_t h = hash_weights(&m);
  bagua_ddp_destroy(ddp);
  model_free(&m);
  shard_free(&s);
  return h;
}

static int body_inphase(bagua_comm_t *c, void *arg) {
  const targs_t *a = arg;
  int me = bagua_comm_rank(c);
  uint64_t bytes_plain, bytes_numbered;
  uint64_t plain = train(c, a, -1, &bytes_plain);
  uint64_t numbered = train(c, a, 1000, &bytes_numbered);
  printf("rank %d: %s weights %016llx (numbered %016llx), bytes %llu (numbered %llu)\n", me,
         a->algorithm, (unsigned long long)plain, (unsigned long long)numbered,
         (unsigned long long)bytes_plain, (unsigned long long)bytes_numbered);
  ASSERT_TRUE(plain == numbered);
  ASSERT_EQ(bytes_plain, bytes_numbered);
  ASSERT_GT(bytes_plain, 0);
  assert_no_leaks();
  return 0;
}

static int body_end(bagua_comm_t *c, void *arg) {
  const targs_t *a = arg;
  int me = bagua_comm_rank(c), victim = bagua_comm_size(c) - 1;
  shard_t s;
  shard_make(&prob, me, &s);
  model_t m;
  bagua_ddp_t *ddp = create(c, a, &m, -1);
  bagua_status_t st = BAGUA_OK;
  int t = 0;
  for (; t < STEPS && st == BAGUA_OK; t++)
    if (me != victim || t != SKIP) st = model_train_step(&m, &s, ddp, 0);
  double t0 = mp_now();
  printf("rank %d: %s at iteration %d\n", me, bagua_err_name(st), t - 1);
  if (me == victim) {
    ASSERT_OK(st); /* in step with the others by the library's count until its end */
  } else {
    /* The last step meets no partner: the victim's context is gone. */
    ASSERT_TRUE(st != BAGUA_OK);
    ASSERT_EQ(t, STEPS);
  }
  bagua_ddp_destroy(ddp);
  ASSERT_TRUE(mp_now() - t0 < 5.0);
  model_free(&m);
  shard_free(&s);
  assert_no_leaks();
  return 0;
}

/* The rules of numbering: before ready on every rank or none, rank 0's number after ready,
 * bad numbers refused, and a context that numbers nothing refuses numbers later. */
static int body_usage(bagua_comm_t *c, void *arg) {
  targs_t a = *(const targs_t *)arg;
  int me = bagua_comm_rank(c);
  shard_t s;
  shard_make(&prob, me, &s);
  model_t m;
  /* Not numbered: later numbers are refused, and steps are not checked. */
  bagua_ddp_t *ddp = create(c, &a, &m, -1);
  ASSERT_STATUS(bagua_ddp_set_step(ddp, 5), BAGUA_ERR_INVALID_USAGE);
  ASSERT_OK(bagua_ddp_local_step(ddp)); /* nothing to count: a no-op */
  ASSERT_EQ(ddp->phase.number, 0);
  ASSERT_OK(model_train_step(&m, &s, ddp, 0));
  bagua_ddp_destroy(ddp);
  model_free(&m);
  /* Numbered on one rank only: ready fails on every rank instead of mismatching checks. */
  bagua_ddp_config_t cfg = BAGUA_DDP_CONFIG_INIT;
  ASSERT_OK(bagua_ddp_create(c, &cfg, &ddp));
  model_init(&prob, 0, &m);
  model_register(&m, ddp, 0);
  ASSERT_STATUS(bagua_ddp_set_step(ddp, -1), BAGUA_ERR_INVALID_ARG);
  ASSERT_STATUS(bagua_ddp_set_step(ddp, BAGUA__DDP_MAX_STEP + 1), BAGUA_ERR_INVALID_ARG);
  if (me == 1) ASSERT_OK(bagua_ddp_set_step(ddp, 0));
  ASSERT_STATUS(bagua_ddp_ready(ddp), BAGUA_ERR_INVALID_USAGE);
  if (!strstr(bagua_last_error(), "number its steps"))
    TEST_FAIL("rank %d: the warning does not mention numbering: %s", me, bagua_last_error());
  bagua_ddp_destroy(ddp);
  model_free(&m);
  /* Different numbers before ready: ready gives every rank rank 0's, so the steps that follow,
   * counting on by themselves, are in step. */
  ddp = create(c, &a, &m, 100 + 7 * me);
  for (int t = 0; t < 3; t++) ASSERT_OK(model_train_step(&m, &s, ddp, 0));
  ASSERT_EQ(ddp->phase.number, 103);
  /* Renumbered alike mid-run: still in step. */
  ASSERT_OK(bagua_ddp_set_step(ddp, 5000));
  for (int t = 0; t < 3; t++) ASSERT_OK(model_train_step(&m, &s, ddp, 0));
  ASSERT_EQ(ddp->phase.number, 5003);
  /* Local iterations alike on every rank (gradient accumulation): each counts, still in step. */
  for (int t = 0; t < 2; t++) ASSERT_OK(bagua_ddp_local_step(ddp));
  ASSERT_EQ(ddp->phase.number, 5005);
  ASSERT_OK(model_train_step(&m, &s, ddp, 0));
  ASSERT_EQ(ddp->phase.number, 5006);
  bagua_ddp_destroy(ddp);
  model_free(&m);
  shard_free(&s);
  ASSERT_OK(bagua_barrier(c));
  if (me == 0) printf("usage: passed\n");
  assert_no_leaks();
  return 0;
}

int main(int argc, char **argv) {
  int end = argc >= 2 && (!strcmp(argv[1], "end") || !strcmp(argv[1], "usage"));
  if (argc < (end ? 4 : 5)) {
    fprintf(stderr,
            "usage: %s skip|extra|inphase ALGORITHM NRANKS tcp|shm|auto [KEY=VALUE ...]\n"
            "       %s end|usage NRANKS tcp|shm|auto\n",
            argv[0], argv[0]);
    return 2;
  }
  targs_t a = {
      .mode = argv[1], .algorithm = end ? "gradient_allreduce" : argv[2], .hier = -1, .warmup = -1};
  int next = end ? 2 : 3;
  mp_opts_t o = {.nranks = atoi(argv[next]), .timeout_ms = 10000, .deadline_s = 60};
  const char *tr = argv[next + 1];
  o.transport = !strcmp(tr, "tcp")   ? BAGUA_TRANSPORT_TCP
                : !strcmp(tr, "shm") ? BAGUA_TRANSPORT_SHM
                                     : BAGUA_TRANSPORT_AUTO;
  o.ranks_per_node = o.transport == BAGUA_TRANSPORT_TCP ? 1 : 0;
  for (int i = next + 2; i < argc; i++) {
    char *eq = strchr(argv[i], '=');
    if (!eq) return 2;
    *eq = '\0';
    const char *k = argv[i], *v = eq + 1;
    if (!strcmp(k, "rpn"))
      o.ranks_per_node = atoi(v);
    else if (!strcmp(k, "hier"))
      a.hier = atoi(v);
    else if (!strcmp(k, "warmup"))
      a.warmup = atoi(v);
    else if (!strcmp(k, "interval"))
      a.interval = atoi(v);
    else if (!strcmp(k, "peer"))
      a.peer = v;
    else {
      fprintf(stderr, "unknown option %s\n", k);
      return 2;
    }
  }
  mp_body_fn body = body_out_of_step;
  if (!strcmp(a.mode, "end"))
    body = body_end;
  else if (!strcmp(a.mode, "usage"))
    body = body_usage;
  else if (!strcmp(a.mode, "inphase"))
    body = body_inphase;
  if (!end && strcmp(a.mode, "skip") && strcmp(a.mode, "extra") && strcmp(a.mode, "inphase"))
    return 2;
  double t0 = mp_now();
  int rc = mp_run(&o, body, &a);
  printf("%s %s %s on %d ranks (%s) in %.1f s\n", rc ? "FAILED" : "passed", a.mode, a.algorithm,
         o.nranks, tr, mp_now() - t0);
  return rc;
}
