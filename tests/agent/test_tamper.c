/*
 * A hostile or clumsy writer to etcd: values written by hand into a
 * running job's keys must never wedge it. Each scenario starts two real agents whose workers
 * wait on a gate file, tampers with one key while round 1 runs, opens the gate, and expects
 * the job to end normally within a few seconds (before the schema module, every one of them
 * hung until the test's timeout). Also: the per-job secret reaches the workers through their
 * environment, with the rendezvous timeout, and --secret-file is checked.
 * `test_tamper SCENARIO`; ctest registers each as tamper_<scenario>.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/rdzv/rdzv.h"
#include "harness.h"
#include "test.h"

/* Short enough that a wedge shows as a test failure, long enough for a loaded 2-core VM. */
#define END_MS 15000

typedef struct {
  harness_t h;
  agent_proc_t ap[3];
  int n; /* agents started */
  char gate[400];
  const char *nnodes;
} job_t;

/* Two agents (n1 first, so it leads), one worker each, waiting on the gate in round 1. */
static void start(job_t *j, const char *name, const char *nnodes, const char *extra_flag,
                  const char *extra_value) {
  h_init(&j->h, name, 1);
  h_path(&j->h, "gate", j->gate, sizeof(j->gate));
  const char *args[] = {"--nnodes", nnodes, "--nproc-per-node", "1",         "--rdzv-timeout",
                        "15",       FAST,   extra_flag,         extra_value, NULL};
  const char *const *all[] = {args, args};
  const char *nodes[] = {"n1", "n2"};
  const char *wargs[] = {"--wait", j->gate, NULL};
  h_spawn_in_order(&j->h, j->ap, 2, nodes, all, wargs);
  j->n = 2;
  j->nnodes = nnodes;
  h_wait_round_files(&j->h, 1, 2, 15000);
}

/* A third agent (n3) joins; the leader must form round 2 with exactly n1, n2, n3. */
static void join_third(job_t *j) {
  const char *args[] = {"--nnodes", j->nnodes, "--nproc-per-node", "1", "--rdzv-timeout", "15",
                        FAST,       NULL};
  const char *wargs[] = {"--wait", j->gate, NULL};
  h_spawn(&j->h, &j->ap[2], "n3", NULL, args, wargs);
  j->n = 3;
  h_wait_round_files(&j->h, 2, 3, 15000);
  bagua__rdzv_round_t r;
  ASSERT_EQ(h_round(&j->h, &r), 0);
  ASSERT_EQ(r.round, 2);
  ASSERT_EQ(r.nmembers, 3);
  ASSERT_EQ(r.world_size, 3);
  for (int i = 0; i < 3; i++) ASSERT_TRUE(r.members[i].id[0] == 'n' && r.members[i].nproc == 1);
  bagua__rdzv_round_clear(&r);
}

/* Puts `value` under /bagua/<job>/<name> (lease 0: none). */
static void put(job_t *j, const char *name, const char *value, int64_t lease) {
  char key[256];
  snprintf(key, sizeof(key), "/bagua/%s/%s", j->h.job, name);
  ASSERT_OK(bagua__etcd_put(j->h.c, key, value, strlen(value), lease, NULL, NULL));
}

/* Waits until one of the agents printed `needle` on stderr. */
static void wait_either(job_t *j, const char *needle, int timeout_ms) {
  long long d = etcd_fixture_now_ms() + timeout_ms;
  while (!h_file_contains(j->ap[0].err_path, needle) &&
         !h_file_contains(j->ap[1].err_path, needle)) {
    if (etcd_fixture_now_ms() > d) {
      h_dump(j->ap, j->n);
      TEST_FAIL("no agent printed \"%s\" within %d ms", needle, timeout_ms);
    }
    usleep(10000);
  }
}

/* Opens the gate; every agent must exit 0 and the job must have succeeded in its last round
 * (1, or 2 after join_third) with no round after it. */
static void finish_ok(job_t *j) {
  char buf[400];
  int last = j->n == 3 ? 2 : 1;
  h_touch(&j->h, "gate", buf, sizeof(buf));
  long long t0 = etcd_fixture_now_ms();
  for (int i = 0; i < j->n; i++) {
    int code = h_wait_exit(&j->ap[i], END_MS);
    if (code != 0) h_dump(j->ap, j->n);
    ASSERT_EQ(code, 0);
  }
  printf("job ended %lld ms after the gate opened\n", etcd_fixture_now_ms() - t0);
  bagua__rdzv_status_t st;
  ASSERT_EQ(h_status(&j->h, &st), 0);
  ASSERT_EQ(st.state, BAGUA__JOB_SUCCEEDED);
  ASSERT_EQ(st.round, last);
  ASSERT_EQ(h_count_round_files(&j->h, last + 1), 0);
  h_fini(&j->h);
}

/* `etcdctl put /bagua/J/leader nobody`: a leader key no agent holds is removed and a real
 * leader elected, which ends the job. */
static void test_leader_nobody(void) {
  job_t j;
  start(&j, "tamper_leader", "2", NULL, NULL);
  put(&j, "leader", "nobody", 0);
  wait_either(&j, "removed a corrupt leader key", 5000);
  finish_ok(&j);
}

/* A leader key naming a real node but on no lease is no campaign either. */
static void test_leader_nolease(void) {
  job_t j;
  start(&j, "tamper_leader2", "2", NULL, NULL);
  put(&j, "leader", "n2", 0);
  wait_either(&j, "removed a corrupt leader key", 5000);
  finish_ok(&j);
}

/* `{"garbage":` in round: the leader restores round 1 from its own copy. */
static void test_round_garbage(void) {
  job_t j;
  start(&j, "tamper_round", "2", NULL, NULL);
  put(&j, "round", "{\"garbage\":", 0);
  wait_either(&j, "restored round 1 from the leader's copy", 5000);
  bagua__rdzv_round_t r;
  ASSERT_EQ(h_round(&j.h, &r), 0);
  ASSERT_EQ(r.round, 1);
  ASSERT_EQ(r.world_size, 2);
  bagua__rdzv_round_clear(&r);
  finish_ok(&j);
}

/* `{"garbage":` in status: the leader rewrites it as running, and the job still ends. */
static void test_status_garbage(void) {
  job_t j;
  start(&j, "tamper_status", "2", NULL, NULL);
  put(&j, "status", "{\"garbage\":", 0);
  wait_either(&j, "rewrote it as running", 5000);
  finish_ok(&j);
}

/* A node record with "nproc":2147483647 (on a live lease, so only its value is wrong) is never
 * admitted: before, the leader published a world of -2147483647 that every agent refused. A
 * real node that joins afterwards gets a round of the three real nodes. */
static void test_nproc_overflow(void) {
  job_t j;
  start(&j, "tamper_nproc", "2:4", NULL, NULL);
  int64_t lease = 0;
  ASSERT_OK(bagua__etcd_lease_grant(j.h.c, 60, &lease, NULL));
  put(&j, "nodes/evil",
      "{\"host\":\"h\",\"addr\":\"127.0.0.1\",\"nproc\":2147483647,\"master_port\":5}", lease);
  wait_either(&j, "nodes/evil", 5000);
  wait_either(&j, "\"nproc\"", 100);
  join_third(&j);
  finish_ok(&j);
}

/* A phantom node record (valid JSON, no lease) is never admitted: before, it joined the next
 * round, whose workers then waited for it (and the job for its report) for ever. */
static void test_phantom(void) {
  job_t j;
  start(&j, "tamper_phantom", "2:4", NULL, NULL);
  put(&j, "nodes/ghost",
      "{\"host\":\"h\",\"addr\":\"127.0.0.1\",\"nproc\":1,\"master_port\":5,\"pid\":1}", 0);
  wait_either(&j, "it is on no lease", 5000);
  join_third(&j);
  finish_ok(&j);
}

/* The lease check the agents make before admitting a node: etcd's TimeToLive. */
static void test_lease_api(void) {
  harness_t h;
  h_init(&h, "tamper_lease", 1);
  int64_t lease = 0;
  int alive = -1;
  ASSERT_OK(bagua__etcd_lease_grant(h.c, 30, &lease, NULL));
  ASSERT_OK(bagua__rdzv_lease_alive(h.c, lease, &alive));
  ASSERT_EQ(alive, 1);
  ASSERT_OK(bagua__etcd_lease_revoke(h.c, lease));
  ASSERT_OK(bagua__rdzv_lease_alive(h.c, lease, &alive));
  ASSERT_EQ(alive, 0);
  alive = -1;
  ASSERT_OK(bagua__rdzv_lease_alive(h.c, 0x7badbeef, &alive));
  ASSERT_EQ(alive, 0);
  h_fini(&h);
}

/* ---------------------------------------------------------------------------------------- */

static void secret_of_job(job_t *j, char *out, size_t len) {
  char key[256];
  snprintf(key, sizeof(key), "/bagua/%s/secret", j->h.job);
  bagua__etcd_kv_t kv;
  int found = 0;
  ASSERT_OK(bagua__etcd_get(j->h.c, key, &kv, &found, NULL));
  ASSERT_TRUE(found);
  snprintf(out, len, "%s", kv.value);
  bagua__etcd_kv_clear(&kv);
}

/* The first agent writes a random secret; every worker gets it (and the rendezvous timeout)
 * in its environment. */
static void test_secret(void) {
  job_t j;
  start(&j, "tamper_secret", "2", NULL, NULL);
  char secret[128], a[128], b[128];
  secret_of_job(&j, secret, sizeof(secret));
  ASSERT_EQ((int)strlen(secret), 64);
  ASSERT_STREQ(h_env(&j.h, 1, "n1", 0, "BAGUA_JOB_SECRET", a, sizeof(a)), secret);
  ASSERT_STREQ(h_env(&j.h, 1, "n2", 0, "BAGUA_JOB_SECRET", b, sizeof(b)), secret);
  h_expect_env(&j.h, 1, "n1", 0, "BAGUA_RDZV_TIMEOUT_MS", "15000");
  finish_ok(&j);
}

/* Someone overwrites the secret of a running job: the agents, whose workers hold the real
 * one, write it back (a later round's workers get the same secret as the first). */
static void test_secret_overwritten(void) {
  job_t j;
  start(&j, "tamper_secret2", "2", NULL, NULL);
  char secret[128], now[128], env[128];
  secret_of_job(&j, secret, sizeof(secret));
  put(&j, "secret", "{\"garbage\":", 0);
  wait_either(&j, "wrote this job's secret back", 5000);
  secret_of_job(&j, now, sizeof(now));
  ASSERT_STREQ(now, secret);
  ASSERT_STREQ(h_env(&j.h, 1, "n1", 0, "BAGUA_JOB_SECRET", env, sizeof(env)), secret);
  finish_ok(&j);
}

static void write_file(const char *path, const char *text, mode_t mode) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
  ASSERT_TRUE(fd >= 0);
  ASSERT_EQ((int)write(fd, text, strlen(text)), (int)strlen(text));
  close(fd);
  ASSERT_EQ(chmod(path, mode), 0);
}

/* --secret-file: refused when others may read it; used (and stored) when it is private. */
static void test_secret_file(void) {
  const char *mine = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
  harness_t h;
  h_init(&h, "tamper_secretfile", 1);
  char path[400];
  h_path(&h, "secret", path, sizeof(path));
  write_file(path, mine, 0644);
  agent_proc_t ap;
  const char *args[] = {"--nnodes", "1", "--nproc-per-node", "1", "--secret-file", path,
                        FAST,       NULL};
  h_spawn(&h, &ap, "n1", NULL, args, NULL);
  ASSERT_EQ(h_wait_exit(&ap, 10000), 2);
  h_expect_stderr(&ap, "chmod 600");
  h_fini(&h);

  /* start() makes its own harness directory: keep the file outside it. */
  job_t j;
  char keep[] = "/tmp/bagua-secret-XXXXXX";
  int fd = mkstemp(keep);
  ASSERT_TRUE(fd >= 0);
  close(fd);
  write_file(keep, mine, 0600);
  start(&j, "tamper_secretfile2", "2", "--secret-file", keep);
  char secret[128], a[128];
  secret_of_job(&j, secret, sizeof(secret));
  ASSERT_STREQ(secret, mine);
  ASSERT_STREQ(h_env(&j.h, 1, "n2", 0, "BAGUA_JOB_SECRET", a, sizeof(a)), mine);
  unlink(keep);
  finish_ok(&j);
}

/* BAGUA_JOB_SECRET in the agents' environment (as a launcher passes it) is the job's. */
static void test_secret_env(void) {
  const char *mine = "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100";
  setenv("BAGUA_JOB_SECRET", mine, 1);
  job_t j;
  start(&j, "tamper_secretenv", "2", NULL, NULL);
  char secret[128], a[128];
  secret_of_job(&j, secret, sizeof(secret));
  ASSERT_STREQ(secret, mine);
  ASSERT_STREQ(h_env(&j.h, 1, "n1", 0, "BAGUA_JOB_SECRET", a, sizeof(a)), mine);
  finish_ok(&j);
}

/* Garbage in a live agent's own node record (a plain put, which also takes the key off the
 * agent's lease): the agent writes its record back, and the job is not failed. Before, a
 * deleted record was restored but a corrupt one never: the leader saw one node fewer than
 * MIN and failed the job after --rdzv-timeout. */
static void test_own_node_garbage(void) {
  job_t j;
  start(&j, "tamper_ownnode", "2", NULL, NULL);
  put(&j, "nodes/n2", "{\"garbage\":", 0);
  wait_either(&j, "rewrote this node's record", 5000);
  char key[256];
  snprintf(key, sizeof(key), "/bagua/%s/nodes/n2", j.h.job);
  bagua__etcd_kv_t kv;
  int found = 0;
  ASSERT_OK(bagua__etcd_get(j.h.c, key, &kv, &found, NULL));
  ASSERT_TRUE(found);
  ASSERT_TRUE(kv.lease != 0);
  ASSERT_TRUE(strstr(kv.value, "\"nproc\":1") != NULL);
  bagua__etcd_kv_clear(&kv);
  /* The same with a valid-looking record on no lease. */
  put(&j, "nodes/n1", "{\"host\":\"h\",\"addr\":\"127.0.0.1\",\"nproc\":1,\"master_port\":5}", 0);
  wait_either(&j, "a record on no lease", 5000);
  finish_ok(&j);
}

int main(int argc, char **argv) {
  TEST_RUN_SCENARIOS(
      argc, argv, {"leader_nobody", test_leader_nobody}, {"leader_nolease", test_leader_nolease},
      {"round_garbage", test_round_garbage}, {"status_garbage", test_status_garbage},
      {"nproc_overflow", test_nproc_overflow}, {"phantom", test_phantom},
      {"lease_api", test_lease_api}, {"secret", test_secret},
      {"secret_overwritten", test_secret_overwritten}, {"secret_env", test_secret_env},
      {"secret_file", test_secret_file}, {"own_node_garbage", test_own_node_garbage});
}
