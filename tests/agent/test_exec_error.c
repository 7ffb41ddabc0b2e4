/*
 * A worker program that stops being executable while the job runs: the
 * program deletes itself and fails, so the restart's exec fails with ENOENT. Before, the root
 * cause read "exited with code 127" and every restart was spent on an exec that could only
 * fail again; now the failure record carries the exec error and is marked permanent, so the
 * leader fails the job at once and the root cause names the error.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "harness.h"
#include "test.h"

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  harness_t h;
  h_init(&h, "execerr", 1);
  char script[512];
  h_path(&h, "vanishing.sh", script, sizeof(script));
  FILE *f = fopen(script, "w");
  ASSERT_TRUE(f != NULL);
  fprintf(f, "#!/bin/sh\nrm -f \"$0\"\nexit 3\n");
  fclose(f);
  ASSERT_EQ(chmod(script, 0755), 0);

  const char *a[] = {"--nnodes", "1", "--nproc-per-node", "1", "--max-restarts", "3", FAST, NULL};
  const char *cmd[] = {script, NULL};
  agent_proc_t ap;
  h_spawn_cmd(&h, &ap, "n1", NULL, a, cmd);
  int code = h_wait_exit(&ap, 40000);
  if (code != 127) {
    h_dump(&ap, 1);
    TEST_FAIL("agent exited %d, want 127 (the program was not found)", code);
  }
  bagua__rdzv_status_t st;
  ASSERT_EQ(h_status(&h, &st), 0);
  ASSERT_EQ((int)st.state, (int)BAGUA__JOB_FAILED);
  ASSERT_TRUE(st.has_root);
  printf("root cause: round %lld, reason \"%s\", permanent %d\n", (long long)st.root.round,
         st.root.reason, st.root.permanent);
  ASSERT_TRUE(strstr(st.root.reason, "No such file or directory") != NULL);
  ASSERT_TRUE(strstr(st.root.reason, "vanishing.sh") != NULL);
  ASSERT_EQ(st.root.permanent, 1);
  /* Round 1 ran the program (it failed with 3), round 2's exec failed, and no third round
   * was spent on it although two restarts were left. */
  ASSERT_EQ(st.root.round, 2);
  bagua__rdzv_round_t r;
  ASSERT_EQ(h_round(&h, &r), 0);
  ASSERT_EQ(r.round, 2);
  bagua__rdzv_round_clear(&r);
  h_expect_stderr(&ap, "never started: cannot run");
  h_fini(&h);
  printf("PASS exec_error\n");
  return 0;
}
