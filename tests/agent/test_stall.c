/*
 * A stalled elastic worker: one worker of a two-node in-process job is
 * SIGSTOPped for longer than BAGUA_COMM_TIMEOUT_MS and then resumed. Its peer's collective
 * times out and, with no membership change, nothing used to publish a round: every worker sat
 * in bagua_elastic_rebuild() for the 600 s default. Now the peer asks for a new round
 * (rounds/<N>/rebuild/<rank>), the leader retries the round with the same members ("stall"),
 * both workers move to it (the stalled one once resumed) and the job finishes.
 * `test_stall SCENARIO`; ctest registers each as stall_<scenario>.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "test.h"

#define STEPS "250"

static void test_resume(void) {
  /* The agents' environment reaches their workers: a short collective timeout, and a
   * rendezvous timeout well above the whole scenario so that only a new round can end it. */
  setenv("BAGUA_COMM_TIMEOUT_MS", "1500", 1);
  setenv("BAGUA_TRANSPORT", "tcp", 1);
  harness_t h;
  h_init(&h, "stall", 1);
  const char *a[] = {"--nnodes",
                     "2",
                     "--nproc-per-node",
                     "1",
                     "--elastic-mode",
                     "in-process",
                     "--rdzv-timeout",
                     "120",
                     FAST,
                     NULL};
  const char *cmd[] = {ELASTIC_WORKER_BIN, STEPS, "20", NULL};
  agent_proc_t ap[2];
  const char *nodes[] = {"n1", "n2"};
  for (int i = 0; i < 2; i++) {
    h_spawn_cmd(&h, &ap[i], nodes[i], NULL, a, cmd);
    h_wait_registered(&h, nodes[i], 10000);
  }
  long long pid[2];
  for (int i = 0; i < 2; i++) {
    pid[i] = h_wait_value_after(ap[i].out_path, "started pid=", 20000);
    h_wait_value_after(ap[i].out_path, "first_step_ms=", 20000);
  }
  /* Three collective timeouts long: the fault injected, not a synchronisation. */
  ASSERT_EQ(kill((pid_t)pid[1], SIGSTOP), 0);
  struct timespec ts = {4, 500 * 1000000L};
  nanosleep(&ts, NULL);
  ASSERT_EQ(kill((pid_t)pid[1], SIGCONT), 0);
  long long t0 = etcd_fixture_now_ms();
  for (int i = 0; i < 2; i++) {
    int code = h_wait_exit(&ap[i], 40000);
    if (code != 0) {
      h_dump(ap, 2);
      TEST_FAIL("agent %s exited %d", ap[i].node, code);
    }
  }
  printf("job ended %lld ms after SIGCONT\n", etcd_fixture_now_ms() - t0);
  long long value[2];
  for (int i = 0; i < 2; i++) {
    /* The same workers, moved to a retried round in-process. */
    ASSERT_EQ(h_file_value_after(ap[i].out_path, "started pid="), pid[i]);
    h_expect_stdout(&ap[i], "rebuilt round=2");
    h_expect_stderr(&ap[i], "round 2 (stall, in-process)");
    value[i] = h_file_value_after(ap[i].out_path, "step=" STEPS " value=");
    if (value[i] < 0) {
      h_dump(ap, 2);
      TEST_FAIL("node %s lacks its final line", ap[i].node);
    }
  }
  /* Both ranks restored the last commit and agree on the state. */
  ASSERT_EQ(value[0], value[1]);
  bagua__rdzv_status_t st;
  ASSERT_EQ(h_status(&h, &st), 0);
  ASSERT_EQ(st.state, BAGUA__JOB_SUCCEEDED);
  h_fini(&h);
}

int main(int argc, char **argv) {
  TEST_RUN_SCENARIOS(argc, argv, {"resume", test_resume});
}
