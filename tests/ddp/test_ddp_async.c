/*
 * Asynchronous model averaging: stop and restart without deadlock.
 *
 *   unequal   ranks train different numbers of steps between the calls (there is no
 *             collective in an async step), one rank reaches bagua_ddp_async_pause() late;
 *             after each abort every rank holds the same weights; resume continues the
 *             rounds; a second abort in a row is refused; destroy while averaging runs.
 *   warmup    abort and resume during the warm-up (no thread yet), the thread starting at
 *             the end of the warm-up, destroy while it runs.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../comm/mp.h"
#include "../test.h"
#include "problem.h"

static problem_t prob = {.d_in = 16, .d_out = 4, .n = 32, .nsplit = 4, .noise = 0.1f};

static bagua_ddp_t *make(bagua_comm_t *c, model_t *m, int warmup) {
  bagua_ddp_config_t cfg = BAGUA_DDP_CONFIG_INIT;
  cfg.algorithm = "async";
  cfg.sync_interval_ms = 2;
  cfg.warmup_steps = warmup;
  cfg.bucket_bytes = 128;
  cfg.lr = 0.3;
  bagua_ddp_t *ddp;
  ASSERT_OK(bagua_ddp_create(c, &cfg, &ddp));
  model_register(m, ddp, 0);
  ASSERT_OK(bagua_ddp_ready(ddp));
  return ddp;
}

static void train(bagua_ddp_t *ddp, model_t *m, const shard_t *s, int steps) {
  for (int t = 0; t < steps; t++) {
    ASSERT_OK(model_train_step(m, s, ddp, 0));
    usleep(400);
  }
}

static uint64_t rounds(bagua_ddp_t *ddp) {
  bagua_ddp_stats_t st = {.struct_size = sizeof(st)};
  ASSERT_OK(bagua_ddp_stats(ddp, &st));
  return st.async_rounds;
}

/*
 * Averaging rounds happen only while every rank averages, between a resume and a pause, and a
 * fixed number of short steps gives a descheduled rank room for one round or none. So each
 * rank trains on, one step at a time, until it has seen `want` rounds (bounded: 10 s is a
 * hang, not a slow machine). Rounds are collective, so every rank's count gets there.
 */
static void train_until_rounds(bagua_ddp_t *ddp, model_t *m, const shard_t *s, uint64_t want) {
  double deadline = mp_now() + 10.0;
  while (rounds(ddp) < want && mp_now() < deadline) train(ddp, m, s, 1);
}

static int body_unequal(bagua_comm_t *c, void *arg) {
  int me = bagua_comm_rank(c), n = bagua_comm_size(c);
  size_t nw = (size_t)prob.d_in * prob.d_out;
  shard_t s;
  shard_make(&prob, me, &s);
  model_t m;
  model_init(&prob, me, &m);
  bagua_ddp_t *ddp = make(c, &m, 3);
  double t0 = mp_now();
  train(ddp, &m, &s, 40 + 25 * me);
  train_until_rounds(ddp, &m, &s, 2);
  if (me == 0) usleep(200 * 1000); /* a late rank: the others wait in abort */
  ASSERT_OK(bagua_ddp_async_pause(ddp));
  assert_same_on_all_ranks(c, m.w, nw, "W after abort");
  assert_same_on_all_ranks(c, m.b, prob.d_out, "b after abort");
  uint64_t r1 = rounds(ddp);
  ASSERT_GE(r1, 2);
  ASSERT_STATUS(bagua_ddp_async_pause(ddp), BAGUA_ERR_INVALID_USAGE);
  double loss1 = model_union_loss(&m, n);
  /* Steps while stopped are local SGD only. */
  train(ddp, &m, &s, 5);
  ASSERT_EQ(rounds(ddp), r1);
  ASSERT_OK(bagua_ddp_async_resume(ddp));
  ASSERT_STATUS(bagua_ddp_async_resume(ddp), BAGUA_ERR_INVALID_USAGE);
  train(ddp, &m, &s, 60 - 20 * me);
  train_until_rounds(ddp, &m, &s, r1 + 1);
  ASSERT_OK(bagua_ddp_async_pause(ddp));
  assert_same_on_all_ranks(c, m.w, nw, "W after the second abort");
  uint64_t r2 = rounds(ddp);
  ASSERT_GT(r2, r1);
  double loss2 = model_union_loss(&m, n);
  ASSERT_OK(bagua_ddp_async_resume(ddp));
  train(ddp, &m, &s, 10 + 10 * me);
  bagua_ddp_destroy(ddp); /* with the averaging thread running */
  if (me == 0)
    printf("unequal: rounds %llu then %llu; union loss %.5f then %.5f (floor %.5f); %.2f s\n",
           (unsigned long long)r1, (unsigned long long)r2, loss1, loss2, problem_floor(&prob),
           mp_now() - t0);
  ASSERT_TRUE(loss2 < 1.25 * problem_floor(&prob));
  model_free(&m);
  shard_free(&s);
  assert_no_leaks();
  return 0;
}

static int body_warmup(bagua_comm_t *c, void *arg) {
  int me = bagua_comm_rank(c);
  shard_t s;
  shard_make(&prob, me, &s);
  model_t m;
  model_init(&prob, me, &m);
  bagua_ddp_t *ddp = make(c, &m, 10);
  train(ddp, &m, &s, 3);
  ASSERT_OK(bagua_ddp_async_pause(ddp));
  ASSERT_EQ(rounds(ddp), 0);
  ASSERT_OK(bagua_ddp_async_resume(ddp));
  train(ddp, &m, &s, 7); /* the warm-up ends: the thread starts */
  train(ddp, &m, &s, 20 + 10 * me);
  uint64_t r = rounds(ddp);
  if (me == 0) printf("warmup: %llu rounds after the warm-up\n", (unsigned long long)r);
  bagua_ddp_destroy(ddp);
  model_free(&m);
  shard_free(&s);
  assert_no_leaks();
  return 0;
}

int main(int argc, char **argv) {
  const char *what = argc > 1 ? argv[1] : "unequal";
  mp_opts_t o = {
      .nranks = 3, .transport = BAGUA_TRANSPORT_TCP, .ranks_per_node = 1, .deadline_s = 60};
  mp_body_fn body = body_unequal;
  if (!strcmp(what, "warmup")) {
    o.nranks = 2;
    o.transport = BAGUA_TRANSPORT_SHM;
    o.ranks_per_node = 0;
    body = body_warmup;
  }
  double t0 = mp_now();
  int rc = mp_run(&o, body, NULL);
  printf("%s async %s in %.1f s\n", rc ? "FAILED" : "passed", what, mp_now() - t0);
  return rc;
}
