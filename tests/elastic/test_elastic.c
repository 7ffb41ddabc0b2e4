/*
 * In-process elasticity against a real etcd, with the test playing bagua-agent: it publishes
 * the round key and starts worker processes (fork, one emulated node each).
 *
 *   shrink: 3 workers train; one is SIGKILLed mid-run; round 2 (2 members) is published a
 *           little later, so the survivors first see a failed collective, restore the last
 *           commit, wait for the new round and rebuild.
 *   shrink_skip: as shrink, but round 2 still lists the dead node and round 3 drops it; the
 *           survivors abandon round 2's bootstrap when round 3 appears.
 *   grow:   2 workers train; round 2 adds a third node whose worker joins, receives the state
 *           from rank 0 through sync, and the old workers notice the round at a step boundary.
 *   grow_mixed: as grow, but only one old worker pauses between steps, so the other one is
 *           inside a collective when the first rebuilds and notices through its failure.
 *   errors: one process: argument checks, commit/restore, rebuild timeout, node left out.
 *
 * The model is exact integer arithmetic: every step s adds (s+1)*(i+1) to element i, computed
 * as an allreduce of rank-weighted contributions divided by the rank weights' sum, so the
 * result does not depend on the world size and the final vector shows whether every step was
 * counted exactly once. Survivors (and the newcomer) must end with identical state.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../test.h"
#include "bagua/comm.h"
#include "bagua/elastic.h"
#include "common/etcd/etcd.h"
#include "common/params.h"
#include "etcd_fixture.h"
#include "rounds.h"

#define STEPS 80
#define DIM 8
#define JOB "elastic-test"

typedef struct {
  int64_t x[DIM];
  int64_t sizes[STEPS]; /* world size each committed step ran with */
} model_t;

typedef struct {
  int64_t step;
  int64_t resets;    /* reset callbacks seen */
  int64_t last_size; /* world size reported by the last reset */
  int64_t final_round;
  int64_t via_check, via_error; /* how the world change was noticed */
  model_t m;
} result_t;

/* Set before the workers are forked: the grow_mixed case. */
static int mixed;

/* Shared with the workers (MAP_SHARED before fork): each worker's committed step, and
 * whether it has seen a collective fail (failed[slot], in the same page). */
static volatile int64_t *progress, *failed;

static void put_json(const char *endpoint, const char *json) {
  rounds_put_json(endpoint, JOB, json);
}

static void put_round(const char *endpoint, int round, int n) {
  rounds_put(endpoint, JOB, round, 0, n);
}

static bagua_status_t on_reset(bagua_elastic_t *e, const bagua_elastic_reset_t *info, void *arg) {
  result_t *r = arg;
  (void)e;
  r->resets++;
  r->last_size = info->new_size;
  /* The step counter was synchronised before callbacks run, so every rank sees the same. */
  return info->new_size >= 1 ? BAGUA_OK : BAGUA_ERR_INTERNAL;
}

static void sleep_ms(int ms) {
  rounds_sleep_ms(ms);
}

static int worker(const char *endpoint, int round, int rank, int size, int slot, int wfd) {
  rounds_worker_env(endpoint, JOB, round, rank, size, slot);

  result_t res;
  memset(&res, 0, sizeof(res));
  bagua_elastic_t *e = NULL;
  ASSERT_OK(bagua_elastic_create(NULL, &e));
  ASSERT_OK(bagua_elastic_register(e, "model", &res.m, sizeof(res.m)));
  ASSERT_OK(bagua_elastic_on_reset(e, on_reset, &res));
  ASSERT_OK(bagua_elastic_sync(e));
  int rebuilds = 0;
  while (bagua_elastic_step(e) < STEPS) {
    if (bagua_elastic_check(e)) {
      ASSERT_OK(bagua_elastic_rebuild(e));
      rebuilds++;
      res.via_check++;
      continue;
    }
    int64_t s = bagua_elastic_step(e), r = bagua_elastic_rank(e), n = bagua_elastic_size(e);
    int64_t g[DIM], sum[DIM];
    for (int i = 0; i < DIM; i++) g[i] = (s + 1) * (i + 1) * (r + 1);
    bagua_status_t st = bagua_allreduce(bagua_elastic_comm(e), g, sum, DIM, BAGUA_I64, BAGUA_SUM);
    if (st != BAGUA_OK) {
      /* A peer died or left: roll back to the last completed step and join the new round. */
      ASSERT_TRUE(st == BAGUA_ERR_REMOTE || st == BAGUA_ERR_ABORTED || st == BAGUA_ERR_TIMEOUT);
      failed[slot] = 1;
      ASSERT_OK(bagua_elastic_restore(e));
      ASSERT_OK(bagua_elastic_rebuild(e));
      rebuilds++;
      res.via_error++;
      continue;
    }
    for (int i = 0; i < DIM; i++) res.m.x[i] += sum[i] / (n * (n + 1) / 2);
    res.m.sizes[s] = n;
    bagua_elastic_set_step(e, s + 1);
    ASSERT_OK(bagua_elastic_commit(e));
    progress[slot] = s + 1;
    /* In the mixed case only n0 pauses, so n1 waits inside the next allreduce when n0 sees
     * the new round: n0 rebuilds through check, n1 through the collective n0 cut off. */
    if (!mixed || slot == 0) sleep_ms(15);
  }
  res.step = bagua_elastic_step(e);
  res.final_round = bagua_elastic_round(e);
  printf(
      "worker n%d: rank %d of %d in round %lld after %d rebuilds (%lld via check, %lld via "
      "a failed collective)\n",
      slot, bagua_elastic_rank(e), bagua_elastic_size(e), (long long)res.final_round, rebuilds,
      (long long)res.via_check, (long long)res.via_error);
  fflush(stdout); /* the worker leaves through _exit, which does not flush stdio */
  bagua_elastic_destroy(e);
  ASSERT_TRUE(write(wfd, &res, sizeof(res)) == (ssize_t)sizeof(res));
  return 0;
}

static void check_results(result_t *rs, int n, int64_t want_size_before, int64_t want_after,
                          int64_t want_round) {
  for (int k = 0; k < n; k++) {
    ASSERT_EQ(rs[k].step, STEPS);
    ASSERT_EQ(rs[k].final_round, want_round);
    ASSERT_EQ(rs[k].last_size, want_after);
    ASSERT_TRUE(memcmp(&rs[k].m, &rs[0].m, sizeof(model_t)) == 0);
  }
  for (int i = 0; i < DIM; i++) ASSERT_EQ(rs[0].m.x[i], (int64_t)(i + 1) * STEPS * (STEPS + 1) / 2);
  /* The world changed once, from before to after, at some step in the middle. */
  int changes = 0;
  ASSERT_EQ(rs[0].m.sizes[0], want_size_before);
  ASSERT_EQ(rs[0].m.sizes[STEPS - 1], want_after);
  for (int s = 1; s < STEPS; s++) changes += rs[0].m.sizes[s] != rs[0].m.sizes[s - 1];
  ASSERT_EQ(changes, 1);
}

/* Waits (up to 30 s) until every slot in [0, n) has seen a collective fail. */
static void wait_failed(int n) {
  long long deadline = etcd_fixture_now_ms() + 30000;
  for (int k = 0; k < n; k++) {
    while (!failed[k]) {
      ASSERT_LT(etcd_fixture_now_ms(), deadline);
      sleep_ms(1);
    }
  }
}

/* Waits (up to 30 s) until `n` keys exist under /bagua/<job>/rounds/<round>/: the address
 * rank 0 publishes once it is inside that round's bootstrap. */
static void wait_round_keys(const char *endpoint, int round, size_t n) {
  bagua__etcd_t *c = NULL;
  ASSERT_OK(bagua__etcd_create(endpoint, 2000, &c));
  char prefix[128];
  snprintf(prefix, sizeof(prefix), "/bagua/%s/rounds/%d/", JOB, round);
  long long deadline = etcd_fixture_now_ms() + 30000;
  for (;;) {
    bagua__etcd_kv_t *kvs = NULL;
    size_t got = 0;
    ASSERT_OK(bagua__etcd_range_prefix(c, prefix, &kvs, &got, NULL));
    bagua__etcd_kvs_free(kvs, got);
    if (got >= n) break;
    ASSERT_LT(etcd_fixture_now_ms(), deadline);
    sleep_ms(2);
  }
  bagua__etcd_destroy(c);
}

static void test_shrink(const etcd_fixture_t *fx, int skip) {
  long long t0 = etcd_fixture_now_ms();
  progress[0] = progress[1] = progress[2] = 0;
  failed[0] = failed[1] = failed[2] = 0;
  put_round(fx->host_port, 1, 3);
  rounds_proc_t p[3];
  for (int r = 0; r < 3; r++) p[r] = rounds_spawn(worker, fx->host_port, 1, r, 3, r);
  rounds_wait_progress(progress, 2, 20);
  ASSERT_TRUE(kill(p[2].pid, SIGKILL) == 0);
  int status;
  waitpid(p[2].pid, &status, 0);
  close(p[2].rfd);
  /* An agent publishes the next round only after its lease TTL plus the settle window;
   * meanwhile the survivors' collective fails and they wait for the round. The test plays
   * that order: the round appears once both survivors have seen their collective fail. */
  wait_failed(2);
  if (skip) {
    /* A round that still lists the dead node: the survivors' bootstrap of it cannot complete
     * until round 3 drops the node, and the watch must cut that bootstrap short (the connect
     * timeout is 15 s, so the test also bounds how long that takes). Round 3 appears once
     * rank 0 waits in round 2's bootstrap (its address is in etcd; rank 1 registers with it
     * at once, or goes straight to round 3), plus a moment for rank 1. */
    put_round(fx->host_port, 2, 3);
    wait_round_keys(fx->host_port, 2, 1);
    sleep_ms(100);
    put_round(fx->host_port, 3, 2);
  } else {
    put_round(fx->host_port, 2, 2);
  }
  result_t rs[2];
  rounds_finish(p[0], &rs[0], sizeof(result_t));
  rounds_finish(p[1], &rs[1], sizeof(result_t));
  for (int k = 0; k < 2; k++) ASSERT_GE(rs[k].resets, 1);
  check_results(rs, 2, 3, 2, skip ? 3 : 2);
  /* Well below BAGUA_CONNECT_TIMEOUT_MS (15 s): round 2's bootstrap was abandoned at once. */
  ASSERT_LT(etcd_fixture_now_ms() - t0, 10000);
  printf("passed elastic shrink 3 -> 2%s\n", skip ? " (skipping round 2)" : "");
}

static void test_grow(const etcd_fixture_t *fx) {
  progress[0] = progress[1] = progress[2] = 0;
  put_round(fx->host_port, 1, 2);
  rounds_proc_t p[3];
  for (int r = 0; r < 2; r++) p[r] = rounds_spawn(worker, fx->host_port, 1, r, 2, r);
  rounds_wait_progress(progress, 0, 20);
  put_round(fx->host_port, 2, 3);
  p[2] = rounds_spawn(worker, fx->host_port, 2, 2, 3, 2);
  result_t rs[3];
  for (int k = 0; k < 3; k++) rounds_finish(p[k], &rs[k], sizeof(result_t));
  ASSERT_GE(rs[0].resets, 1);
  ASSERT_GE(rs[1].resets, 1);
  ASSERT_EQ(rs[2].resets, 0); /* the newcomer synced at start and never rebuilt */
  /* Nothing cuts the old communicator before a survivor rebuilds, so the first one to move
   * must have seen the round through the watch. */
  ASSERT_GE(rs[0].via_check + rs[1].via_check, 1);
  rs[2].last_size = 3;
  check_results(rs, 3, 2, 3, 2);
  printf("passed elastic grow 2 -> 3\n");
}

/*
 * One process, explicit config: argument checks, commit/restore, a rebuild that finds no new
 * round (timeout), and a round that leaves this node out (BAGUA_ERR_ABORTED).
 */
static void test_errors(const etcd_fixture_t *fx) {
  bagua__params_reload(); /* nothing set: BAGUA_NODE_ID is missing */
  bagua_elastic_t *e = NULL;
  ASSERT_STATUS(bagua_elastic_create(NULL, &e), BAGUA_ERR_INVALID_ARG);
  ASSERT_TRUE(strstr(bagua_last_error(), "BAGUA_NODE_ID") != NULL);
  put_json(fx->host_port,
           "{\"round\":1,\"members\":[\"solo\"],\"nprocs\":[1],\"world_size\":1,"
           "\"master_addr\":\"127.0.0.1\",\"master_port\":1}");
  bagua_elastic_config_t cfg = BAGUA_ELASTIC_CONFIG_INIT;
  cfg.etcd = fx->host_port;
  cfg.job_id = JOB;
  cfg.node_id = "solo";
  cfg.round = 1;
  cfg.rank = 0;
  cfg.size = 1;
  cfg.round_wait_ms = 300;
  ASSERT_OK(bagua_elastic_create(&cfg, &e));
  int64_t a[4] = {1, 2, 3, 4};
  ASSERT_OK(bagua_elastic_register(e, "a", a, sizeof(a)));
  ASSERT_STATUS(bagua_elastic_register(e, "a", a, sizeof(a)), BAGUA_ERR_INVALID_ARG);
  ASSERT_OK(bagua_elastic_sync(e));
  a[0] = 10;
  bagua_elastic_set_step(e, 7);
  ASSERT_OK(bagua_elastic_commit(e));
  a[0] = 99;
  bagua_elastic_set_step(e, 8);
  ASSERT_OK(bagua_elastic_restore(e));
  ASSERT_EQ(a[0], 10);
  ASSERT_EQ(bagua_elastic_step(e), 7);
  ASSERT_EQ(bagua_elastic_check(e), 0);
  long long t0 = etcd_fixture_now_ms();
  ASSERT_STATUS(bagua_elastic_rebuild(e), BAGUA_ERR_TIMEOUT);
  ASSERT_LT(etcd_fixture_now_ms() - t0, 5000);
  ASSERT_TRUE(bagua_elastic_comm(e) == NULL);
  ASSERT_STATUS(bagua_elastic_sync(e), BAGUA_ERR_INVALID_USAGE);
  /* A worker follows its node's assignment, never the round record (which lists every member:
   * N workers reading it cost O(N^2) bytes per round): a round record alone changes nothing. */
  {
    bagua__etcd_t *c = NULL;
    ASSERT_OK(bagua__etcd_create(fx->host_port, 5000, &c));
    const char *only =
        "{\"round\":9,\"members\":[\"other\"],\"nprocs\":[1],\"world_size\":1,"
        "\"master_addr\":\"127.0.0.1\",\"master_port\":1}";
    ASSERT_OK(bagua__etcd_put(c, "/bagua/" JOB "/round", only, strlen(only), 0, NULL, NULL));
    bagua__etcd_destroy(c);
    sleep_ms(300);
    ASSERT_EQ(bagua_elastic_check(e), 0);
  }
  put_json(fx->host_port,
           "{\"round\":2,\"members\":[\"other\"],\"nprocs\":[1],\"world_size\":1,"
           "\"master_addr\":\"127.0.0.1\",\"master_port\":1}");
  long long deadline = etcd_fixture_now_ms() + 10000;
  while (!bagua_elastic_check(e)) {
    ASSERT_LT(etcd_fixture_now_ms(), deadline);
    sleep_ms(2);
  }
  ASSERT_STATUS(bagua_elastic_rebuild(e), BAGUA_ERR_ABORTED);
  ASSERT_TRUE(strstr(bagua_last_error(), "not a member") != NULL);
  bagua_elastic_destroy(e);
  printf("passed elastic errors\n");
}

int main(int argc, char **argv) {
  const char *which = argc > 1 ? argv[1] : "shrink";
  progress = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_TRUE(progress != MAP_FAILED);
  failed = progress + 8;
  etcd_fixture_t fx;
  etcd_fixture_start(&fx);
  if (strcmp(which, "shrink") == 0)
    test_shrink(&fx, 0);
  else if (strcmp(which, "shrink_skip") == 0)
    test_shrink(&fx, 1);
  else if (strcmp(which, "grow") == 0)
    test_grow(&fx);
  else if (strcmp(which, "grow_mixed") == 0)
    mixed = 1, test_grow(&fx);
  else if (strcmp(which, "errors") == 0)
    test_errors(&fx);
  else
    TEST_FAIL("unknown case %s (shrink, shrink_skip, grow, grow_mixed, errors)", which);
  etcd_fixture_stop(&fx);
  return 0;
}
