/*
 * Round publication and worker environment for the elastic tests (see rounds.h).
 */
#include "rounds.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../test.h"
#include "common/etcd/etcd.h"
#include "common/params.h"
#include "common/rdzv/rdzv.h"
#include "etcd_fixture.h"

/* The nodes this process has assigned so far (every job alike), and the members of the round
 * it published last: a node that leaves the round learns it from its assignment, as a
 * registered node that the leader leaves out does, and `departed` counts those who left. */
#define KNOWN_MAX 64
static char g_known[KNOWN_MAX][BAGUA_RDZV_ID_MAX];
static int g_nknown;
static char g_prev[KNOWN_MAX][BAGUA_RDZV_ID_MAX];
static int g_nprev;

static int member_of(const bagua__rdzv_round_t *r, const char *id) {
  return bagua__rdzv_round_find(r, id) >= 0;
}

static void put_assign(bagua__etcd_t *c, const char *job, const char *node,
                       const bagua__rdzv_assign_t *a) {
  char key[256];
  ASSERT_TRUE(bagua__rdzv_key(key, sizeof(key), job, BAGUA__RDZV_KEY_ASSIGN, 0, node, 0) == 0);
  char *v = bagua__rdzv_assign_encode(a);
  ASSERT_TRUE(v != NULL);
  ASSERT_OK(bagua__etcd_put(c, key, v, strlen(v), 0, NULL, NULL));
  free(v);
}

void rounds_put_json(const char *endpoint, const char *job, const char *json) {
  bagua__etcd_t *c = NULL;
  ASSERT_OK(bagua__etcd_create(endpoint, 5000, &c));
  char key[128];
  snprintf(key, sizeof(key), "/bagua/%s/round", job);
  ASSERT_OK(bagua__etcd_put(c, key, json, strlen(json), 0, NULL, NULL));
  /* Then what the leader writes after a round: every node's assignment (agent/assign.c). */
  bagua__rdzv_round_t r;
  char why[160];
  if (bagua__rdzv_round_decode(json, &r, why, sizeof(why)) != 0)
    TEST_FAIL("rounds_put_json: %s: %s", json, why);
  if (r.departed == 0)
    for (int i = 0; i < g_nprev; i++) r.departed += !member_of(&r, g_prev[i]);
  bagua__rdzv_assign_t *place = calloc((size_t)r.nmembers, sizeof(*place));
  ASSERT_TRUE(place != NULL);
  bagua__rdzv_assign_all(&r, 3, place);
  for (int i = 0; i < r.nmembers; i++) put_assign(c, job, r.members[i].id, &place[i]);
  bagua__rdzv_assign_t spare;
  bagua__rdzv_assign_of(&r, -1, 0, &spare);
  for (int i = 0; i < g_nknown; i++)
    if (!member_of(&r, g_known[i])) put_assign(c, job, g_known[i], &spare);
  g_nprev = 0;
  for (int i = 0; i < r.nmembers && i < KNOWN_MAX; i++) {
    snprintf(g_prev[g_nprev++], BAGUA_RDZV_ID_MAX, "%s", r.members[i].id);
    int seen = 0;
    for (int k = 0; k < g_nknown && !seen; k++) seen = strcmp(g_known[k], r.members[i].id) == 0;
    if (!seen && g_nknown < KNOWN_MAX)
      snprintf(g_known[g_nknown++], BAGUA_RDZV_ID_MAX, "%s", r.members[i].id);
  }
  free(place);
  bagua__rdzv_round_clear(&r);
  bagua__etcd_destroy(c);
}

void rounds_put(const char *endpoint, const char *job, int round, int first, int n) {
  /* The same round record bagua-agent's leader writes (docs/agent.md). */
  char json[512], *p = json;
  p += sprintf(p, "{\"round\":%d,\"members\":[", round);
  for (int i = 0; i < n; i++) p += sprintf(p, "%s\"n%d\"", i ? "," : "", first + i);
  p += sprintf(p, "],\"nprocs\":[");
  for (int i = 0; i < n; i++) p += sprintf(p, "%s1", i ? "," : "");
  sprintf(p,
          "],\"world_size\":%d,\"reason\":\"membership\",\"master_addr\":\"127.0.0.1\","
          "\"master_port\":1}",
          n);
  rounds_put_json(endpoint, job, json);
}

void rounds_worker_env(const char *endpoint, const char *job, int round, int rank, int size,
                       int slot) {
  char buf[128];
  snprintf(buf, sizeof(buf), "etcd://%s", endpoint);
  setenv("BAGUA_BOOTSTRAP", buf, 1);
  setenv("BAGUA_JOB_ID", job, 1);
  snprintf(buf, sizeof(buf), "%d", round);
  setenv("BAGUA_ROUND", buf, 1);
  snprintf(buf, sizeof(buf), "%d", rank);
  setenv("RANK", buf, 1);
  snprintf(buf, sizeof(buf), "%d", size);
  setenv("WORLD_SIZE", buf, 1);
  snprintf(buf, sizeof(buf), "n%d", slot);
  setenv("BAGUA_NODE_ID", buf, 1);
  setenv("LOCAL_RANK", "0", 1);
  setenv("BAGUA_TRANSPORT", "tcp", 1);
  setenv("BAGUA_CONNECT_TIMEOUT_MS", "15000", 1);
  setenv("BAGUA_COMM_TIMEOUT_MS", "10000", 1);
  setenv("BAGUA_RDZV_TIMEOUT_S", "20", 1);
  bagua__params_reload();
}

void rounds_sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

rounds_proc_t rounds_spawn(rounds_worker_fn fn, const char *endpoint, int round, int rank, int size,
                           int slot) {
  int fds[2];
  ASSERT_TRUE(pipe(fds) == 0);
  rounds_proc_t p = {fork(), fds[0]};
  ASSERT_TRUE(p.pid >= 0);
  if (p.pid == 0) {
    close(fds[0]);
    _exit(fn(endpoint, round, rank, size, slot, fds[1]));
  }
  close(fds[1]);
  return p;
}

void rounds_finish(rounds_proc_t p, void *result, size_t bytes) {
  int status;
  ASSERT_TRUE(waitpid(p.pid, &status, 0) == p.pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ASSERT_TRUE(read(p.rfd, result, bytes) == (ssize_t)bytes);
  close(p.rfd);
}

void rounds_wait_progress(volatile int64_t *progress, int slot, int64_t step) {
  long long deadline = etcd_fixture_now_ms() + 30000;
  while (progress[slot] < step) {
    ASSERT_LT(etcd_fixture_now_ms(), deadline);
    rounds_sleep_ms(2);
  }
}
