/*
 * The data-parallel layer under in-process elasticity (bagua_ddp_elastic_attach), for every
 * algorithm, against a real etcd with the test playing bagua-agent.
 *
 *   test_elastic_ddp ALGO churn: three workers train; n2 is SIGKILLed mid-run and round 2
 *       drops it (the survivors' step fails, they restore the last commit and rebuild); then
 *       round 3 adds a newcomer n3, which builds its context with bagua_ddp_create/ready while
 *       the survivors rebuild theirs, and receives rank 0's weights, optimizer state and step.
 *   test_elastic_ddp ALGO stall: three workers train; n2 is SIGSTOPped (a stall, not a death)
 *       and round 2 drops it. The survivors' sockets to it stay open, so only the departure
 *       abort (BAGUA_ELASTIC_ABORT_DELAY_MS) ends their blocked step: they must recover long
 *       before the 10 s communication timeout.
 *
 * The model: three tensors (1000, 37 and 500 elements, small buckets so that there are several)
 * pulled towards a rank-dependent target, f = 1/2 |w - t_r|^2. Every worker starts from
 * different random weights, so identical results also show that rank 0's state reached all.
 * Checks: every worker reaches STEPS (the elastic step counter and the context's own step
 * count agree, so no step was lost or repeated), the world sizes recorded per committed step
 * change as the rounds did, the loss went down, and for the centralised algorithms (and async
 * after bagua_ddp_async_pause) the final weights are bit-identical on every rank.
 */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "../test.h"
#include "bagua/comm.h"
#include "bagua/ddp.h"
#include "bagua/elastic.h"
#include "etcd_fixture.h"
#include "rounds.h"

#define STEPS 120
#define JOB "elastic-ddp-test"
#define NT 3
static const size_t counts[NT] = {1000, 37, 500};

typedef struct {
  int64_t step, ddp_steps, round, size;
  uint32_t crc;
  double loss_first, loss_last;
  int64_t sizes[STEPS]; /* world size each committed step ran with (registered state) */
  int64_t rebuilds;
} result_t;

static const char *algo;
static volatile int64_t *progress; /* shared: each worker's committed step */

static int identical_at_end(void) {
  return strcmp(algo, "gradient_allreduce") == 0 || strcmp(algo, "bytegrad") == 0 ||
         strcmp(algo, "qadam") == 0 || strcmp(algo, "async") == 0;
}

static double target(size_t i, int64_t rank) {
  return sin(0.01 * (double)i + 0.5 * (double)rank);
}

static int worker(const char *endpoint, int round, int rank, int size, int slot, int wfd) {
  rounds_worker_env(endpoint, JOB, round, rank, size, slot);
  result_t res;
  memset(&res, 0, sizeof(res));
  res.loss_first = -1;
  bagua_elastic_t *e = NULL;
  ASSERT_OK(bagua_elastic_create(NULL, &e));
  ASSERT_OK(bagua_elastic_register(e, "sizes", res.sizes, sizeof(res.sizes)));
  ASSERT_OK(bagua_elastic_sync(e));

  float *w[NT], *g[NT];
  srand(1000 + slot);
  for (int t = 0; t < NT; t++) {
    w[t] = malloc(counts[t] * sizeof(float));
    g[t] = malloc(counts[t] * sizeof(float));
    for (size_t i = 0; i < counts[t]; i++) w[t][i] = (float)rand() / (float)RAND_MAX - 0.5f;
  }
  bagua_ddp_config_t cfg = BAGUA_DDP_CONFIG_INIT;
  cfg.algorithm = algo;
  cfg.bucket_bytes = 2048;
  cfg.lr = strcmp(algo, "qadam") == 0 ? 0.01 : 0.05;
  cfg.momentum = strcmp(algo, "qadam") == 0 ? 0.0 : 0.9;
  cfg.warmup_steps = strcmp(algo, "qadam") == 0 ? 30 : strcmp(algo, "async") == 0 ? 10 : -1;
  cfg.sync_interval_ms = 5;
  bagua_ddp_t *ddp = NULL;
  ASSERT_OK(bagua_ddp_create(bagua_elastic_comm(e), &cfg, &ddp));
  for (int t = 0; t < NT; t++) ASSERT_OK(bagua_ddp_register(ddp, NULL, w[t], g[t], counts[t]));
  ASSERT_OK(bagua_ddp_ready(ddp));
  ASSERT_OK(bagua_ddp_elastic_attach(ddp, e));

  while (bagua_elastic_step(e) < STEPS) {
    int changed = 0;
    bagua_status_t st = bagua_elastic_check_all(e, &changed);
    if (st == BAGUA_OK && changed) {
      ASSERT_OK(bagua_elastic_rebuild(e));
      res.rebuilds++;
      continue;
    }
    double loss = 0;
    if (st == BAGUA_OK) {
      int64_t r = bagua_elastic_rank(e);
      for (int t = NT - 1; t >= 0; t--) {
        for (size_t i = 0; i < counts[t]; i++) {
          double d = (double)w[t][i] - target(i + 1000 * (size_t)t, r);
          g[t][i] = (float)d;
          loss += 0.5 * d * d;
        }
        st = bagua_ddp_grad_ready(ddp, t);
        if (st != BAGUA_OK) break;
      }
    }
    if (st == BAGUA_OK) st = bagua_ddp_step(ddp);
    if (st != BAGUA_OK) {
      ASSERT_TRUE(st == BAGUA_ERR_REMOTE || st == BAGUA_ERR_ABORTED || st == BAGUA_ERR_TIMEOUT);
      ASSERT_OK(bagua_elastic_restore(e));
      ASSERT_OK(bagua_elastic_rebuild(e));
      res.rebuilds++;
      continue;
    }
    if (res.loss_first < 0) res.loss_first = loss;
    res.loss_last = loss;
    int64_t s = bagua_elastic_step(e);
    res.sizes[s] = bagua_elastic_size(e);
    bagua_elastic_set_step(e, s + 1);
    ASSERT_OK(bagua_elastic_commit(e));
    progress[slot] = s + 1;
    rounds_sleep_ms(10);
  }
  if (strcmp(algo, "async") == 0) ASSERT_OK(bagua_ddp_async_pause(ddp));
  bagua_ddp_stats_t stt = {.struct_size = sizeof(stt)};
  ASSERT_OK(bagua_ddp_stats(ddp, &stt));
  res.step = bagua_elastic_step(e);
  res.ddp_steps = stt.steps;
  res.round = bagua_elastic_round(e);
  res.size = bagua_elastic_size(e);
  uLong crc = crc32(0L, Z_NULL, 0);
  for (int t = 0; t < NT; t++) crc = crc32_z(crc, (const Bytef *)w[t], counts[t] * sizeof(float));
  res.crc = (uint32_t)crc;
  printf(
      "worker n%d (%s): rank %lld of %lld in round %lld, %lld rebuilds, crc %08x, loss %.4g -> "
      "%.4g\n",
      slot, algo, (long long)bagua_elastic_rank(e), (long long)res.size, (long long)res.round,
      (long long)res.rebuilds, res.crc, res.loss_first, res.loss_last);
  fflush(stdout);
  /* The context goes first: it is attached to the elastic context. */
  bagua_ddp_destroy(ddp);
  bagua_elastic_destroy(e);
  for (int t = 0; t < NT; t++) {
    free(w[t]);
    free(g[t]);
  }
  ASSERT_TRUE(write(wfd, &res, sizeof(res)) == (ssize_t)sizeof(res));
  return 0;
}

static void check(result_t *rs, int n, int64_t want_round, int64_t want_size) {
  for (int k = 0; k < n; k++) {
    ASSERT_EQ(rs[k].step, STEPS);
    ASSERT_EQ(rs[k].ddp_steps, STEPS); /* the context's count travelled with the state */
    ASSERT_EQ(rs[k].round, want_round);
    ASSERT_EQ(rs[k].size, want_size);
    ASSERT_TRUE(memcmp(rs[k].sizes, rs[0].sizes, sizeof(rs[0].sizes)) == 0);
    if (identical_at_end()) ASSERT_EQ(rs[k].crc, rs[0].crc);
    if (rs[k].loss_first > 0) ASSERT_TRUE(rs[k].loss_last < rs[k].loss_first);
  }
  ASSERT_EQ(rs[0].sizes[0], 3);
  ASSERT_EQ(rs[0].sizes[STEPS - 1], want_size);
}

static void test_churn(const etcd_fixture_t *fx) {
  rounds_put(fx->host_port, JOB, 1, 0, 3);
  rounds_proc_t p[4];
  for (int r = 0; r < 3; r++) p[r] = rounds_spawn(worker, fx->host_port, 1, r, 3, r);
  rounds_wait_progress(progress, 2, 25);
  ASSERT_TRUE(kill(p[2].pid, SIGKILL) == 0);
  int status;
  waitpid(p[2].pid, &status, 0);
  close(p[2].rfd);
  rounds_sleep_ms(200);
  rounds_put(fx->host_port, JOB, 2, 0, 2);
  rounds_wait_progress(progress, 0, progress[0] + 25);
  /* Members n0, n1 and the newcomer n3 (rank 2). */
  char json[256];
  snprintf(json, sizeof(json),
           "{\"round\":3,\"members\":[\"n0\",\"n1\",\"n3\"],\"nprocs\":[1,1,1],"
           "\"world_size\":3,\"reason\":\"membership\","
           "\"master_addr\":\"127.0.0.1\",\"master_port\":1}");
  rounds_put_json(fx->host_port, JOB, json);
  p[3] = rounds_spawn(worker, fx->host_port, 3, 2, 3, 3);
  result_t rs[3];
  rounds_finish(p[0], &rs[0], sizeof(result_t));
  rounds_finish(p[1], &rs[1], sizeof(result_t));
  rounds_finish(p[3], &rs[2], sizeof(result_t));
  check(rs, 3, 3, 3);
  int saw2 = 0;
  for (int s = 0; s < STEPS; s++) saw2 |= rs[0].sizes[s] == 2;
  ASSERT_TRUE(saw2);
  ASSERT_GE(rs[0].rebuilds, 2);
  printf("passed elastic ddp %s churn 3 -> 2 -> 3\n", algo);
}

static void test_stall(const etcd_fixture_t *fx) {
  rounds_put(fx->host_port, JOB, 1, 0, 3);
  rounds_proc_t p[3];
  for (int r = 0; r < 3; r++) p[r] = rounds_spawn(worker, fx->host_port, 1, r, 3, r);
  rounds_wait_progress(progress, 2, 25);
  ASSERT_TRUE(kill(p[2].pid, SIGSTOP) == 0);
  rounds_sleep_ms(100);
  long long t_pub = etcd_fixture_now_ms();
  rounds_put(fx->host_port, JOB, 2, 0, 2);
  result_t rs[2];
  rounds_finish(p[0], &rs[0], sizeof(result_t));
  rounds_finish(p[1], &rs[1], sizeof(result_t));
  long long took = etcd_fixture_now_ms() - t_pub;
  kill(p[2].pid, SIGKILL);
  int status;
  waitpid(p[2].pid, &status, 0);
  close(p[2].rfd);
  check(rs, 2, 2, 2);
  /* Far below the 10 s communication timeout: the departure abort ended the blocked step. */
  printf("elastic ddp %s stall: survivors finished %lld ms after the round was published\n", algo,
         took);
  ASSERT_LT(took, 8000);
  printf("passed elastic ddp %s stall\n", algo);
}

int main(int argc, char **argv) {
  if (argc < 3) TEST_FAIL("usage: %s ALGORITHM churn|stall", argv[0]);
  algo = argv[1];
  progress = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_TRUE(progress != MAP_FAILED);
  etcd_fixture_t fx;
  etcd_fixture_start(&fx);
  if (strcmp(argv[2], "churn") == 0)
    test_churn(&fx);
  else if (strcmp(argv[2], "stall") == 0)
    test_stall(&fx);
  else
    TEST_FAIL("unknown case %s (churn, stall)", argv[2]);
  etcd_fixture_stop(&fx);
  return 0;
}
