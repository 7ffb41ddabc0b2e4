/*
 * Bad configurations, misuse of the API, and failures.
 *
 *   config    every invalid field is refused with BAGUA_ERR_INVALID_ARG and a warning that
 *             names it, before any communication (so a refused rank cannot hang the others).
 *   usage     calls out of order, bad arguments, a tensor registered with a different size
 *             on one rank (ready fails on every rank instead of hanging).
 *   kill ALGO a rank dies in the middle of training: every survivor's next call returns an
 *             error within seconds (from the communication or averaging thread), later calls
 *             return it again, and destroy completes.
 *   abort     bagua_ddp_abort() from another thread ends a step blocked on a peer that never
 *             comes: the peer joins only once it sees the abort, so the step can end only
 *             through it.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../comm/mp.h"
#include "../test.h"
#include "problem.h"

static problem_t prob = {.d_in = 16, .d_out = 4, .n = 32, .nsplit = 4, .noise = 0.1f};

#define BAD(field_name, ...)                                                          \
  do {                                                                                \
    bagua_ddp_config_t cfg = BAGUA_DDP_CONFIG_INIT;                                   \
    __VA_ARGS__;                                                                      \
    bagua_ddp_t *ddp = (bagua_ddp_t *)1;                                              \
    ASSERT_STATUS(bagua_ddp_create(c, &cfg, &ddp), BAGUA_ERR_INVALID_ARG);            \
    ASSERT_TRUE(ddp == NULL);                                                         \
    if (!strstr(bagua_last_error(), field_name))                                      \
      TEST_FAIL("the warning does not name %s: %s", field_name, bagua_last_error());  \
    if (!strstr(bagua_last_error(), "accepted"))                                      \
      TEST_FAIL("the warning does not say what is accepted: %s", bagua_last_error()); \
    nbad++;                                                                           \
  } while (0)

static int body_config(bagua_comm_t *c, void *arg) {
  int nbad = 0;
  BAD("algorithm", cfg.algorithm = "sgd_magic");
  BAD("bucket_bytes", cfg.bucket_bytes = -5);
  BAD("hierarchical", cfg.hierarchical = 2);
  BAD("hierarchical", cfg.algorithm = "async", cfg.hierarchical = 1);
  BAD("peer_mode", cfg.algorithm = "decentralized", cfg.peer_mode = "star");
  BAD("peer_mode", cfg.algorithm = "low_precision_decentralized", cfg.peer_mode = "shift_one");
  BAD("peer_mode", cfg.peer_mode = "ring");
  BAD("comm_interval", cfg.algorithm = "decentralized", cfg.comm_interval = 0);
  BAD("comm_interval", cfg.algorithm = "bytegrad", cfg.comm_interval = 2);
  BAD("error_feedback", cfg.algorithm = "bytegrad", cfg.error_feedback = 2);
  BAD("error_feedback", cfg.algorithm = "decentralized", cfg.error_feedback = 1);
  BAD("warmup_steps", cfg.algorithm = "qadam", cfg.warmup_steps = -3);
  BAD("warmup_steps", cfg.algorithm = "bytegrad", cfg.warmup_steps = 5);
  BAD("sync_interval_ms", cfg.algorithm = "async", cfg.sync_interval_ms = 0);
  BAD("optimizer", cfg.optimizer = "rmsprop");
  BAD("optimizer", cfg.optimizer = "qadam");
  BAD("optimizer", cfg.algorithm = "qadam", cfg.optimizer = "adam");
  BAD("lr", cfg.lr = 0.0 / 0.0);
  BAD("momentum", cfg.momentum = -1);
  BAD("dampening", cfg.dampening = 2);
  BAD("nesterov", cfg.nesterov = 1);
  BAD("nesterov", cfg.nesterov = 3, cfg.momentum = 0.9);
  BAD("beta1", cfg.optimizer = "adam", cfg.beta1 = 1.0);
  BAD("beta2", cfg.optimizer = "adamw", cfg.beta2 = -0.1);
  BAD("eps", cfg.algorithm = "qadam", cfg.eps = 0);
  BAD("weight_decay", cfg.weight_decay = 1.0 / 0.0);
  BAD("struct_size", cfg.struct_size = 8);
  bagua_ddp_t *ddp = NULL;
  ASSERT_STATUS(bagua_ddp_create(NULL, NULL, &ddp), BAGUA_ERR_INVALID_ARG);
  ASSERT_STATUS(bagua_ddp_create(c, NULL, NULL), BAGUA_ERR_INVALID_ARG);
  /* The communicator is still in step on every rank after all these refusals. */
  ASSERT_OK(bagua_barrier(c));
  /* And the defaults of every algorithm are accepted. */
  const char *algos[] = {"gradient_allreduce",          "bytegrad", "decentralized",
                         "low_precision_decentralized", "qadam",    "async"};
  for (int i = 0; i < 6; i++) {
    bagua_ddp_config_t cfg = BAGUA_DDP_CONFIG_INIT;
    cfg.algorithm = algos[i];
    ASSERT_OK(bagua_ddp_create(c, &cfg, &ddp));
    bagua_ddp_destroy(ddp);
  }
  ASSERT_OK(bagua_ddp_create(c, NULL, &ddp));
  bagua_ddp_destroy(ddp);
  bagua_ddp_destroy(NULL);
  if (bagua_comm_rank(c) == 0) printf("config: %d invalid configurations refused\n", nbad);
  assert_no_leaks();
  return 0;
}

static int body_usage(bagua_comm_t *c, void *arg) {
  int me = bagua_comm_rank(c);
  float p[16] = {0}, g[16] = {0};
  bagua_ddp_t *ddp;
  ASSERT_OK(bagua_ddp_create(c, NULL, &ddp));
  ASSERT_STATUS(bagua_ddp_ready(ddp), BAGUA_ERR_INVALID_USAGE); /* nothing registered */
  ASSERT_STATUS(bagua_ddp_step(ddp), BAGUA_ERR_INVALID_USAGE);
  ASSERT_STATUS(bagua_ddp_register(ddp, "x", NULL, g, 4), BAGUA_ERR_INVALID_ARG);
  ASSERT_STATUS(bagua_ddp_register(ddp, "x", p, g, 0), BAGUA_ERR_INVALID_ARG);
  ASSERT_OK(bagua_ddp_register(ddp, "x", p, g, 8));
  ASSERT_OK(bagua_ddp_ready(ddp));
  ASSERT_STATUS(bagua_ddp_ready(ddp), BAGUA_ERR_INVALID_USAGE);
  ASSERT_STATUS(bagua_ddp_register(ddp, "y", p, g, 4), BAGUA_ERR_INVALID_USAGE);
  ASSERT_STATUS(bagua_ddp_set_lr(ddp, -1), BAGUA_ERR_INVALID_ARG);
  ASSERT_STATUS(bagua_ddp_async_pause(ddp), BAGUA_ERR_INVALID_USAGE);
  ASSERT_STATUS(bagua_ddp_async_resume(ddp), BAGUA_ERR_INVALID_USAGE);
  bagua_ddp_stats_t st = {.struct_size = 0};
  ASSERT_STATUS(bagua_ddp_stats(ddp, &st), BAGUA_ERR_INVALID_ARG);
  /* A smaller (older) stats struct is filled up to its size. */
  struct {
    size_t struct_size;
    int64_t steps;
  } small = {sizeof(small), -1};
  ASSERT_OK(bagua_ddp_stats(ddp, (bagua_ddp_stats_t *)&small));
  ASSERT_EQ(small.steps, 0);
  ASSERT_OK(bagua_ddp_step(ddp));
  ASSERT_OK(bagua_ddp_stats(ddp, (bagua_ddp_stats_t *)&small));
  ASSERT_EQ(small.steps, 1);
  bagua_ddp_destroy(ddp);

  /* Different registrations: every rank's ready fails, none hangs. */
  ASSERT_OK(bagua_ddp_create(c, NULL, &ddp));
  ASSERT_OK(bagua_ddp_register(ddp, "x", p, g, me == 0 ? 10 : 11));
  ASSERT_STATUS(bagua_ddp_ready(ddp), BAGUA_ERR_INVALID_USAGE);
  ASSERT_TRUE(strstr(bagua_last_error(), "different") != NULL);
  bagua_ddp_destroy(ddp);
  /* Different configurations likewise. */
  bagua_ddp_config_t cfg = BAGUA_DDP_CONFIG_INIT;
  cfg.algorithm = me == 1 ? "bytegrad" : "gradient_allreduce";
  cfg.hierarchical = 0;
  ASSERT_OK(bagua_ddp_create(c, &cfg, &ddp));
  ASSERT_OK(bagua_ddp_register(ddp, "x", p, g, 16));
  ASSERT_STATUS(bagua_ddp_ready(ddp), BAGUA_ERR_INVALID_USAGE);
  bagua_ddp_destroy(ddp);
  ASSERT_OK(bagua_barrier(c));
  if (me == 0) printf("usage: passed\n");
  assert_no_leaks();
  return 0;
}

static const char *kill_algo;

static int body_kill(bagua_comm_t *c, void *arg) {
  int me = bagua_comm_rank(c), victim = bagua_comm_size(c) - 1;
  shard_t s;
  shard_make(&prob, me, &s);
  model_t m;
  model_init(&prob, me, &m);
  bagua_ddp_config_t cfg = BAGUA_DDP_CONFIG_INIT;
  cfg.algorithm = kill_algo;
  cfg.bucket_bytes = 128;
  cfg.sync_interval_ms = 2;
  bagua_ddp_t *ddp;
  ASSERT_OK(bagua_ddp_create(c, &cfg, &ddp));
  model_register(&m, ddp, 0);
  ASSERT_OK(bagua_ddp_ready(ddp));
  for (int t = 0; t < 10; t++) ASSERT_OK(model_train_step(&m, &s, ddp, 0));
  if (me == victim) {
    /* Dies with a bucket handed over and the rest not. */
    ASSERT_OK(bagua_ddp_grad_ready(ddp, 0));
    ASSERT_OK(bagua_ddp_grad_ready(ddp, 1));
    _exit(0);
  }
  double t0 = mp_now();
  bagua_status_t st = BAGUA_OK;
  /* async after warm-up has no collective in a step: the averaging thread notices. */
  for (int t = 0; t < 10000 && st == BAGUA_OK; t++) {
    st = model_train_step(&m, &s, ddp, 0);
    if (st == BAGUA_OK) usleep(1000);
  }
  double dt = mp_now() - t0;
  if (me == 0)
    printf("kill %s: survivors see %s after %.3f s\n", kill_algo, bagua_err_name(st), dt);
  ASSERT_TRUE(st == BAGUA_ERR_REMOTE || st == BAGUA_ERR_ABORTED || st == BAGUA_ERR_TIMEOUT ||
              st == BAGUA_ERR_PROTOCOL);
  ASSERT_TRUE(dt < 5.0);
  /* Sticky: every later call reports the same error. */
  ASSERT_STATUS(bagua_ddp_step(ddp), st);
  ASSERT_STATUS(bagua_ddp_grad_ready(ddp, 0), st);
  bagua_ddp_destroy(ddp);
  model_free(&m);
  shard_free(&s);
  assert_no_leaks();
  return 0;
}

/* Shared by the ranks (mapped MAP_SHARED before mp_run forks them). */
typedef struct {
  volatile int returned; /* abort case: rank 0's aborted step has returned */
} shared_t;

static shared_t *g_sh;

typedef struct {
  bagua_ddp_t *ddp;
  pid_t tid;           /* the training thread */
  atomic_int entering; /* it is about to call bagua_ddp_step() */
  double abort_time;   /* read after pthread_join */
} aborter_t;

static void *aborter(void *arg) {
  aborter_t *a = arg;
  while (!atomic_load(&a->entering)) usleep(100);
  mp_wait_blocked(a->tid);
  a->abort_time = mp_now();
  bagua_ddp_abort(a->ddp);
  return NULL;
}

static int body_abort(bagua_comm_t *c, void *arg) {
  int me = bagua_comm_rank(c);
  float p[1024] = {0}, g[1024] = {0};
  bagua_ddp_t *ddp;
  ASSERT_OK(bagua_ddp_create(c, NULL, &ddp));
  ASSERT_OK(bagua_ddp_register(ddp, "x", p, g, 1024));
  ASSERT_OK(bagua_ddp_ready(ddp));
  ASSERT_OK(bagua_ddp_step(ddp));
  if (me == 0) {
    /* Rank 1 joins this step only once rank 0's has returned: it can only end by the abort. */
    aborter_t a = {.ddp = ddp, .tid = gettid()};
    pthread_t th;
    pthread_create(&th, NULL, aborter, &a);
    atomic_store(&a.entering, 1);
    bagua_status_t st = bagua_ddp_step(ddp);
    double t1 = mp_now();
    g_sh->returned = 1;
    ASSERT_STATUS(st, BAGUA_ERR_ABORTED);
    pthread_join(th, NULL);
    double dt = t1 - a.abort_time;
    printf("abort: the blocked step returned %.3f s after the abort\n", dt);
    ASSERT_TRUE(dt >= 0 && dt < 3.0);
    ASSERT_STATUS(bagua_ddp_step(ddp), BAGUA_ERR_ABORTED);
  } else {
    double until = mp_now() + 30;
    while (!g_sh->returned) {
      ASSERT_TRUE(mp_now() < until);
      usleep(1000);
    }
    /* The peer aborted. This rank's first step may still complete (the peer's half of that
     * exchange was already sent); a later one must fail instead of waiting for it. */
    double t0 = mp_now();
    bagua_status_t st = BAGUA_OK;
    for (int t = 0; t < 1000 && st == BAGUA_OK; t++) st = bagua_ddp_step(ddp);
    ASSERT_TRUE(st != BAGUA_OK);
    ASSERT_TRUE(mp_now() - t0 < 3.0);
  }
  bagua_ddp_destroy(ddp);
  assert_no_leaks();
  return 0;
}

int main(int argc, char **argv) {
  const char *what = argc > 1 ? argv[1] : "config";
  mp_opts_t o = {
      .nranks = 2, .transport = BAGUA_TRANSPORT_TCP, .ranks_per_node = 1, .deadline_s = 60};
  mp_body_fn body = body_config;
  if (!strcmp(what, "usage")) {
    o.nranks = 3;
    body = body_usage;
  } else if (!strcmp(what, "kill")) {
    o.nranks = 3;
    kill_algo = argc > 2 ? argv[2] : "gradient_allreduce";
    body = body_kill;
  } else if (!strcmp(what, "abort")) {
    body = body_abort;
  }
  g_sh = mmap(NULL, sizeof(shared_t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_TRUE(g_sh != MAP_FAILED);
  double t0 = mp_now();
  int rc = mp_run(&o, body, NULL);
  printf("%s errors %s in %.1f s\n", rc ? "FAILED" : "passed", what, mp_now() - t0);
  return rc;
}
