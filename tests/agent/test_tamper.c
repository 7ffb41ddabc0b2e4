/*
 * A hostile or clumsy writer to etcd: values written by hand into a
 * running job's keys must never wedge it. Each scenario starts two real agents whose workers
 * wait on a gate file, tampers with one key while round 1 runs, opens the gate, and expects
 * the job to end normally within a few seconds (before the schema module, every one of them
 * hung until the test's timeout). Also: the per-job secret reaches the workers through their
 * environment, with the rendezvous timeout, and --secret-file is checked. And a forged member
 * (a valid node record on a lease kept alive, no agent behind it) is dropped after the act
 * deadline instead of holding its rounds for ever.
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

/* Opens the gate; every agent must exit 0 and the job must have succeeded in round `last`
 * with no round after it. Leaves etcd running. */
static void end_in(job_t *j, int last) {
  char buf[400];
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
}

/* end_in, then etcd is stopped. */
static void finish_in(job_t *j, int last) {
  end_in(j, last);
  h_fini(&j->h);
}

/* finish_in the last round: 1, or 2 after join_third. */
static void finish_ok(job_t *j) {
  finish_in(j, j->n == 3 ? 2 : 1);
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

/* Whether etcd still knows a lease: a renewal answers TTL 0 for one it does not. */
static int lease_alive(bagua__etcd_t *c, int64_t lease) {
  int64_t ttl = -1;
  ASSERT_OK(bagua__etcd_lease_keepalive_once(c, lease, &ttl));
  return ttl > 0;
}

/* What the agents rely on instead of asking etcd about every node's lease: etcd refuses a
 * record on a lease it does not know, and deletes a lease's records with it. */
static void test_lease_api(void) {
  harness_t h;
  h_init(&h, "tamper_lease", 1);
  int64_t lease = 0;
  ASSERT_OK(bagua__etcd_lease_grant(h.c, 30, &lease, NULL));
  ASSERT_TRUE(lease_alive(h.c, lease));
  ASSERT_OK(bagua__etcd_put(h.c, "/bagua/tamper_lease/nodes/x", "{}", 2, lease, NULL, NULL));
  ASSERT_OK(bagua__etcd_lease_revoke(h.c, lease));
  ASSERT_TRUE(!lease_alive(h.c, lease));
  bagua__etcd_kv_t kv;
  int found = 1;
  ASSERT_OK(bagua__etcd_get(h.c, "/bagua/tamper_lease/nodes/x", &kv, &found, NULL));
  ASSERT_EQ(found, 0);
  /* A made-up lease: the write is refused, so no record can claim a lease that is not. */
  ASSERT_EQ(bagua__etcd_put(h.c, "/bagua/tamper_lease/nodes/y", "{}", 2, 0x7badbeef, NULL, NULL),
            BAGUA_ERR_ETCD);
  ASSERT_OK(bagua__etcd_get(h.c, "/bagua/tamper_lease/nodes/y", &kv, &found, NULL));
  ASSERT_EQ(found, 0);
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

/* ---------------------------------------------------------------------------------------- */
/* A forged member: a schema-valid node record on a lease that someone keeps alive, with no    */
/* agent behind it                                                                            */
/* ---------------------------------------------------------------------------------------- */

/* The act deadline the agents apply: BAGUA_RDZV_ACK_TIMEOUT_MS, raised to its floor of
 * 2 x --grace-ms + --lease-ttl (FAST: 2 x 2 s + 2 s). */
#define ACK_ENV "3000"
#define ACK_BOUND_MS 6000

typedef struct {
  int64_t lease;
  bagua__etcd_keeper_t *keeper;
} forger_t;

/* Writes nodes/forged, valid for the schema, on a lease of its own that this process keeps
 * alive (as someone with write access to the job's prefix could): the agents admit it to the
 * next round, and nothing but the act deadline removes it. */
static void forge(job_t *j, forger_t *f) {
  ASSERT_OK(bagua__etcd_lease_grant(j->h.c, 5, &f->lease, NULL));
  ASSERT_OK(bagua__etcd_keeper_start(j->h.c, f->lease, 5, &f->keeper));
  put(j, "nodes/forged",
      "{\"host\":\"forged-host\",\"addr\":\"127.0.0.1\",\"nproc\":1,\"pid\":4242,"
      "\"version\":\"0\",\"join_ms\":1,\"master_port\":5999,\"tag\":\"\"}",
      f->lease);
}

/* Prints the first line of an agent's stderr that contains `needle`. */
static void print_line(job_t *j, const char *needle) {
  for (int i = 0; i < j->n; i++) {
    char *text = h_slurp(j->ap[i].err_path);
    char *at = strstr(text, needle);
    if (at) {
      while (at > text && at[-1] != '\n') at--;
      printf("agent %s said: %.*s\n", j->ap[i].node, (int)strcspn(at, "\n"), at);
      free(text);
      return;
    }
    free(text);
  }
}

/* Round `n` (0: the current one) has exactly the members `csv`. */
static void expect_round(job_t *j, int n, const char *csv) {
  bagua__rdzv_round_t r;
  ASSERT_EQ(h_round(&j->h, &r), 0);
  if (n) ASSERT_EQ(r.round, n);
  char got[256] = "";
  for (int i = 0; i < r.nmembers; i++)
    snprintf(got + strlen(got), sizeof(got) - strlen(got), "%s%s", i ? "," : "", r.members[i].id);
  ASSERT_STREQ(got, csv);
  bagua__rdzv_round_clear(&r);
}

/* While a 2-node job runs, a forged member joins (round 2 names it). The leader drops it after
 * the act deadline, revokes its lease, and forms round 3 of the real nodes, whose job then
 * ends normally; the forged record is gone and not admitted again. Without the rule, round 2
 * waits for the forged member until its lease ends, which its keeper never lets happen. */
static void test_forged_member(void) {
  setenv("BAGUA_RDZV_ACK_TIMEOUT_MS", ACK_ENV, 1);
  job_t j;
  forger_t f;
  start(&j, "tamper_forged", "2:3", NULL, NULL);
  forge(&j, &f);
  long long t0 = etcd_fixture_now_ms();
  h_wait_round_files(&j.h, 2, 2, 15000);
  expect_round(&j, 2, "n1,n2,forged");
  long long waited = h_wait_round_files(&j.h, 3, 2, ACK_BOUND_MS + 12000);
  printf("round 3 without the forged member %lld ms after it was written\n",
         etcd_fixture_now_ms() - t0);
  (void)waited;
  expect_round(&j, 3, "n1,n2");
  wait_either(&j, "dropped node forged from round 2: it has not acted in the round", 2000);
  wait_either(&j, "revoked its lease", 100);
  print_line(&j, "dropped node forged");
  ASSERT_TRUE(!lease_alive(j.h.c, f.lease));
  bagua__etcd_keeper_stop(f.keeper);
  finish_in(&j, 3);
}

/* The same, with the real workers done while the forged member is in their round: the job
 * succeeds once the forged member is dropped (its workers never ran). */
static void test_forged_finish(void) {
  setenv("BAGUA_RDZV_ACK_TIMEOUT_MS", ACK_ENV, 1);
  job_t j;
  forger_t f;
  start(&j, "tamper_forged2", "2:3", NULL, NULL);
  forge(&j, &f);
  h_wait_round_files(&j.h, 2, 2, 15000);
  expect_round(&j, 2, "n1,n2,forged");
  long long t0 = etcd_fixture_now_ms();
  end_in(&j, 2);
  long long took = etcd_fixture_now_ms() - t0;
  printf("the job ended %lld ms after round 2's workers were released\n", took);
  ASSERT_TRUE(took < ACK_BOUND_MS + 8000);
  if (!h_file_contains(j.ap[0].err_path, "dropped node forged") &&
      !h_file_contains(j.ap[1].err_path, "dropped node forged"))
    TEST_FAIL("no agent said it dropped the forged member");
  print_line(&j, "dropped node forged");
  bagua__etcd_keeper_stop(f.keeper);
  h_fini(&j.h);
}

int main(int argc, char **argv) {
  TEST_RUN_SCENARIOS(
      argc, argv, {"leader_nobody", test_leader_nobody}, {"leader_nolease", test_leader_nolease},
      {"round_garbage", test_round_garbage}, {"status_garbage", test_status_garbage},
      {"nproc_overflow", test_nproc_overflow}, {"phantom", test_phantom},
      {"lease_api", test_lease_api}, {"secret", test_secret},
      {"secret_overwritten", test_secret_overwritten}, {"secret_env", test_secret_env},
      {"secret_file", test_secret_file}, {"own_node_garbage", test_own_node_garbage},
      {"forged_member", test_forged_member}, {"forged_finish", test_forged_finish});
}
