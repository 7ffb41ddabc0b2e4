/*
 * libbagua's etcd bootstrap against a real etcd: the ranks of round 1 (3 ranks) and then of
 * round 2 (2 ranks, a shrunk world) form communicators through /bagua/<job>/rounds/<N>/,
 * with round 1's keys still present; round 3 forms 32 ranks and leaves one key in etcd (rank
 * 0's address: the others register with rank 0, so etcd's work does not grow with N^2); a
 * missing round and an unreachable etcd fail cleanly.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../test.h"
#include "bagua/bagua.h"
#include "common/etcd/etcd.h"
#include "common/params.h"
#include "etcd_fixture.h"

static int rank_main(const char *endpoint, int round, int rank, int size) {
  char buf[128];
  snprintf(buf, sizeof(buf), "etcd://%s", endpoint);
  setenv("BAGUA_BOOTSTRAP", buf, 1);
  setenv("BAGUA_JOB_ID", "etcd-boot-test", 1);
  snprintf(buf, sizeof(buf), "%d", round);
  setenv("BAGUA_ROUND", buf, 1);
  snprintf(buf, sizeof(buf), "%d", rank);
  setenv("RANK", buf, 1);
  snprintf(buf, sizeof(buf), "%d", size);
  setenv("WORLD_SIZE", buf, 1);
  setenv("BAGUA_CONNECT_TIMEOUT_MS", "15000", 1);
  bagua__params_reload();
  bagua_comm_t *c = NULL;
  ASSERT_OK(bagua_comm_create(NULL, &c));
  ASSERT_EQ(bagua_comm_size(c), size);
  ASSERT_EQ(bagua_comm_rank(c), rank);
  int64_t v = rank + 1, sum = 0;
  ASSERT_OK(bagua_allreduce(c, &v, &sum, 1, BAGUA_I64, BAGUA_SUM));
  ASSERT_EQ(sum, (int64_t)size * (size + 1) / 2);
  bagua_comm_destroy(c);
  return 0;
}

static int run_round(const char *endpoint, int round, int size) {
  pid_t pids[64];
  ASSERT_LE(size, 64);
  for (int r = 0; r < size; r++) {
    pids[r] = fork();
    if (pids[r] == 0) _exit(rank_main(endpoint, round, r, size));
  }
  int failed = 0;
  for (int r = 0; r < size; r++) {
    int status;
    waitpid(pids[r], &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) failed = 1;
  }
  return failed;
}

int main(void) {
  etcd_fixture_t fx;
  etcd_fixture_start(&fx);
  ASSERT_EQ(run_round(fx.host_port, 1, 3), 0);
  ASSERT_EQ(run_round(fx.host_port, 2, 2), 0);
  ASSERT_EQ(run_round(fx.host_port, 3, 32), 0);
  {
    bagua__etcd_t *ec = NULL;
    ASSERT_OK(bagua__etcd_create(fx.host_port, 2000, &ec));
    bagua__etcd_kv_t *kvs = NULL;
    size_t n = 0;
    ASSERT_OK(bagua__etcd_range_prefix(ec, "/bagua/etcd-boot-test/rounds/3/", &kvs, &n, NULL));
    ASSERT_EQ(n, 1);
    ASSERT_STREQ(kvs[0].key, "/bagua/etcd-boot-test/rounds/3/bootstrap/0");
    bagua__etcd_kvs_free(kvs, n);
    bagua__etcd_destroy(ec);
  }
  /* etcd:// without a round is refused with a message naming what is needed. */
  char buf[128];
  snprintf(buf, sizeof(buf), "etcd://%s", fx.host_port);
  setenv("BAGUA_BOOTSTRAP", buf, 1);
  unsetenv("BAGUA_ROUND");
  setenv("RANK", "0", 1);
  setenv("WORLD_SIZE", "2", 1);
  bagua__params_reload();
  bagua_comm_t *c = NULL;
  ASSERT_STATUS(bagua_comm_create(NULL, &c), BAGUA_ERR_INVALID_ARG);
  ASSERT_TRUE(strstr(bagua_last_error(), "BAGUA_ROUND") != NULL);
  /* An unreachable etcd fails within the etcd timeout instead of hanging. */
  snprintf(buf, sizeof(buf), "etcd://127.0.0.1:%d", etcd_fixture_free_port());
  setenv("BAGUA_BOOTSTRAP", buf, 1);
  setenv("BAGUA_ROUND", "1", 1);
  setenv("BAGUA_ETCD_TIMEOUT_MS", "500", 1);
  bagua__params_reload();
  long long t0 = etcd_fixture_now_ms();
  bagua_status_t st = bagua_comm_create(NULL, &c);
  long long ms = etcd_fixture_now_ms() - t0;
  printf("unreachable etcd: %s after %lld ms\n", bagua_err_name(st), ms);
  ASSERT_TRUE(st == BAGUA_ERR_CURL || st == BAGUA_ERR_TIMEOUT);
  ASSERT_LT(ms, 5000);
  etcd_fixture_stop(&fx);
  printf("passed etcd bootstrap\n");
  return 0;
}
