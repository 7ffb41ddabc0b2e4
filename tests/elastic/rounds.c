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
#include "etcd_fixture.h"

void rounds_put_json(const char *endpoint, const char *job, const char *json) {
  bagua__etcd_t *c = NULL;
  ASSERT_OK(bagua__etcd_create(endpoint, 5000, &c));
  char key[128];
  snprintf(key, sizeof(key), "/bagua/%s/round", job);
  ASSERT_OK(bagua__etcd_put(c, key, json, strlen(json), 0, NULL, NULL));
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
