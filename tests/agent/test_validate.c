/*
 * The validators bagua-launch and bagua-agent share (common/validate.h), and the agent's
 * table-driven command line built on them: the same value is accepted or refused by both
 * tools, with the same explanation.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent.h"
#include "common/flags.h"
#include "common/params.h"
#include "common/validate.h"
#include "test.h"

static char g_err[512];

/* Asserts that `st` is a refusal whose message contains `needle`. */
static void refused(bagua_status_t st, const char *needle) {
  if (st == BAGUA_OK) TEST_FAIL("accepted; expected a refusal containing \"%s\"", needle);
  if (!strstr(g_err, needle)) TEST_FAIL("message \"%s\" lacks \"%s\"", g_err, needle);
  if (!strstr(g_err, "; accepted: ")) TEST_FAIL("message \"%s\" says nothing accepted", g_err);
}

static void test_ids(void) {
  char id[BAGUA_ID_MAX_LEN + 2];
  memset(id, 'a', sizeof(id));
  id[BAGUA_ID_MAX_LEN] = '\0';
  ASSERT_OK(bagua__check_id(id, g_err, sizeof(g_err)));
  ASSERT_OK(bagua__check_id("job-1.A_b", g_err, sizeof(g_err)));
  id[BAGUA_ID_MAX_LEN] = 'a';
  id[BAGUA_ID_MAX_LEN + 1] = '\0';
  refused(bagua__check_id(id, g_err, sizeof(g_err)), "is longer than 64 characters");
  refused(bagua__check_id("", g_err, sizeof(g_err)), "the value is empty");
  refused(bagua__check_id("a/b", g_err, sizeof(g_err)), "\"a/b\" contains '/'");
  refused(bagua__check_id("..", g_err, sizeof(g_err)), "is a path component");
  refused(bagua__check_id("a\tb", g_err, sizeof(g_err)), "byte 0x09");
}

static void test_nnodes(void) {
  int64_t lo = 0, hi = 0;
  ASSERT_OK(bagua__check_nnodes("4", &lo, &hi, g_err, sizeof(g_err)));
  ASSERT_EQ(lo, 4);
  ASSERT_EQ(hi, 4);
  ASSERT_OK(bagua__check_nnodes("2:65536", &lo, &hi, g_err, sizeof(g_err)));
  ASSERT_EQ(lo, 2);
  ASSERT_EQ(hi, 65536);
  refused(bagua__check_nnodes("1:2:3", &lo, &hi, g_err, sizeof(g_err)),
          "\"1:2:3\" is not N or MIN:MAX");
  refused(bagua__check_nnodes("3:2", &lo, &hi, g_err, sizeof(g_err)), "MIN 3 larger than MAX 2");
  refused(bagua__check_nnodes("a:b", &lo, &hi, g_err, sizeof(g_err)), "\"a\" is not an integer");
  refused(bagua__check_nnodes("2:", &lo, &hi, g_err, sizeof(g_err)), "has an empty number");
  refused(bagua__check_nnodes("0", &lo, &hi, g_err, sizeof(g_err)), "0 is out of range");
  refused(bagua__check_nnodes("1:65537", &lo, &hi, g_err, sizeof(g_err)), "65537 is out of range");
  refused(bagua__check_nnodes("", &lo, &hi, g_err, sizeof(g_err)), "the value is empty");
}

static void test_endpoints(void) {
  ASSERT_OK(bagua__check_endpoints("127.0.0.1:2379", g_err, sizeof(g_err)));
  ASSERT_OK(
      bagua__check_endpoints("etcd-a:1,http://10.0.0.2:2379,https://h:2", g_err, sizeof(g_err)));
  refused(bagua__check_endpoints("etcdhost", g_err, sizeof(g_err)), "has no port");
  /* A host that ssh would read as an option: refused, for --node-addr too. */
  refused(bagua__check_host("-oProxyCommand=x", g_err, sizeof(g_err)), "starts with '-'");
  ASSERT_OK(bagua__check_host("node-1.example", g_err, sizeof(g_err)));
  refused(bagua__check_endpoints(":2379", g_err, sizeof(g_err)), "has no host");
  refused(bagua__check_endpoints("h:99999", g_err, sizeof(g_err)), "has port \"99999\"");
  refused(bagua__check_endpoints("a:1,,b:2", g_err, sizeof(g_err)), "has an empty entry");
  refused(bagua__check_endpoints("a b:1", g_err, sizeof(g_err)), "has a malformed host");

  char host[64];
  uint16_t port = 0;
  ASSERT_OK(bagua__endpoint_first("http://10.0.0.1:2380/v3,b:1", host, sizeof(host), &port, g_err,
                                  sizeof(g_err)));
  ASSERT_STREQ(host, "10.0.0.1");
  ASSERT_EQ(port, 2380);
  ASSERT_OK(bagua__endpoint_first("10.0.0.3:7,http://b:1", host, sizeof(host), &port, g_err,
                                  sizeof(g_err)));
  ASSERT_STREQ(host, "10.0.0.3");
  ASSERT_EQ(port, 7);
  ASSERT_OK(bagua__endpoint_first("etcd", host, sizeof(host), &port, g_err, sizeof(g_err)));
  ASSERT_STREQ(host, "etcd");
  ASSERT_EQ(port, BAGUA_ETCD_DEFAULT_PORT);
  refused(bagua__endpoint_first("etcd:23x9", host, sizeof(host), &port, g_err, sizeof(g_err)),
          "has port \"23x9\"");
  refused(bagua__endpoint_first("etcd:0", host, sizeof(host), &port, g_err, sizeof(g_err)),
          "has port \"0\"");
}

static void test_int_and_choice(void) {
  int64_t v = 0;
  ASSERT_OK(bagua__check_int("-3", -5, 5, &v, g_err, sizeof(g_err)));
  ASSERT_EQ(v, -3);
  refused(bagua__check_int("2x", 0, 9, &v, g_err, sizeof(g_err)), "\"2x\" is not an integer");
  refused(bagua__check_int(" 2", 0, 9, &v, g_err, sizeof(g_err)), "is not an integer");
  refused(bagua__check_int("10", 0, 9, &v, g_err, sizeof(g_err)), "10 is out of range");
  ASSERT_OK(bagua__check_choice("restart", "auto|restart|in-process", g_err, sizeof(g_err)));
  refused(bagua__check_choice("live", "auto|restart|in-process", g_err, sizeof(g_err)),
          "accepted: auto, restart or in-process");
  refused(bagua__check_choice("", "a|b", g_err, sizeof(g_err)), "the value is empty");
  /* One case rule for every word, the registry's: any ASCII case (tests/common/test_choices.c
   * checks that every reader agrees). */
  ASSERT_OK(bagua__check_choice("Restart", "auto|restart|in-process", g_err, sizeof(g_err)));
  ASSERT_OK(bagua__check_choice("IN-PROCESS", "auto|restart|in-process", g_err, sizeof(g_err)));
  refused(bagua__check_choice("restart ", "auto|restart|in-process", g_err, sizeof(g_err)),
          "accepted: auto, restart or in-process");
}

/* Runs the agent's parser on a NULL-terminated argument list. */
static int parse(bagua__agent_config_t *cfg, char **args) {
  static char *argv[32];
  int argc = 0;
  argv[argc++] = "bagua-agent";
  for (int i = 0; args[i]; i++) argv[argc++] = args[i];
  argv[argc] = NULL;
  return bagua__agent_parse_cli(argc, argv, cfg);
}

/* Every flag bagua-agent shares with bagua-launch (common/flags.def) is one the agent parses:
 * the launcher passes them, so a row the agent lacked would fail every job. */
static void test_shared_flags(void) {
  for (int f = 0; f < BAGUA__FLAG_COUNT; f++) {
    const char *flag = bagua__flag((bagua__flag_t)f)->flag;
    if (!bagua__agent_flag_known(flag)) TEST_FAIL("bagua-agent has no flag %s", flag);
  }
  ASSERT_TRUE(!bagua__agent_flag_known("--no-such-flag"));
}

static void test_agent_cli(void) {
  bagua__agent_config_t cfg;
  unsetenv("BAGUA_RDZV_ENDPOINT");
  unsetenv("BAGUA_JOB_ID");
  unsetenv("BAGUA_NODE_ID");
  setenv("BAGUA_STOP_GRACE_MS", "1234", 1);
  bagua__params_reload();
  ASSERT_EQ(
      parse(&cfg, (char *[]){"--rdzv-endpoint", "127.0.0.1:2379", "--job-id", "j1", "--node-id",
                             "n1", "--nnodes", "2:4", "--nproc-per-node", "3", "--lease-ttl", "7",
                             "--elastic-mode", "restart", "--", "true", "x", NULL}),
      0);
  ASSERT_STREQ(cfg.job_id, "j1");
  ASSERT_STREQ(cfg.node_id, "n1");
  ASSERT_EQ(cfg.nnodes_min, 2);
  ASSERT_EQ(cfg.nnodes_max, 4);
  ASSERT_EQ(cfg.nproc, 3);
  ASSERT_EQ(cfg.lease_ttl_s, 7);
  ASSERT_EQ(cfg.grace_ms, 1234); /* from the environment */
  ASSERT_EQ(cfg.max_restarts, bagua__param_int_default(BAGUA_P_MAX_RESTARTS));
  ASSERT_EQ(cfg.elastic_mode, BAGUA__ELASTIC_RESTART);
  ASSERT_EQ(cfg.argc, 2);
  ASSERT_STREQ(cfg.argv[0], "true");
  ASSERT_TRUE(cfg.log_dir == NULL);
  /* A flag beats the environment. */
  ASSERT_EQ(parse(&cfg, (char *[]){"--rdzv-endpoint", "h:1", "--job-id", "j1", "--nnodes", "1",
                                   "--nproc-per-node", "1", "--grace-ms", "5", "true", NULL}),
            0);
  ASSERT_EQ(cfg.grace_ms, 5);
  unsetenv("BAGUA_STOP_GRACE_MS");
  /* A word from the environment in another case is the word: what bagua-launch
   * --print-params and --dry-run accept, the agent accepts too. */
  setenv("BAGUA_ELASTIC_MODE", "Restart", 1);
  bagua__params_reload();
  ASSERT_EQ(parse(&cfg, (char *[]){"--rdzv-endpoint", "h:1", "--job-id", "j1", "--nnodes", "1",
                                   "--nproc-per-node", "1", "true", NULL}),
            0);
  ASSERT_EQ(cfg.elastic_mode, BAGUA__ELASTIC_RESTART);
  unsetenv("BAGUA_ELASTIC_MODE");
  bagua__params_reload();
  /* The flag follows the same rule (bagua-launch forwards the canonical word, but an agent
   * started by hand may be given any case). */
  ASSERT_EQ(parse(&cfg, (char *[]){"--rdzv-endpoint", "h:1", "--job-id", "j1", "--nnodes", "1",
                                   "--nproc-per-node", "1", "--elastic-mode", "In-Process", "true",
                                   NULL}),
            0);
  ASSERT_EQ(cfg.elastic_mode, BAGUA__ELASTIC_IN_PROCESS);
  /* torchrun's --redirects reaches the agent as BAGUA_REDIRECTS: checked at start, exit 2. */
  setenv("BAGUA_REDIRECTS", "0:1,1:3", 1);
  bagua__params_reload();
  ASSERT_EQ(parse(&cfg, (char *[]){"--rdzv-endpoint", "h:1", "--job-id", "j1", "--nnodes", "1",
                                   "--nproc-per-node", "1", "true", NULL}),
            0);
  setenv("BAGUA_REDIRECTS", "4", 1);
  bagua__params_reload();
  ASSERT_EQ(parse(&cfg, (char *[]){"--rdzv-endpoint", "h:1", "--job-id", "j1", "--nnodes", "1",
                                   "--nproc-per-node", "1", "true", NULL}),
            2);
  unsetenv("BAGUA_REDIRECTS");
  bagua__params_reload();
  /* torchrun's --node_rank: -1 (none) by default, a place below the job's MAX nodes, else 2. */
  ASSERT_EQ(cfg.node_rank, -1);
  ASSERT_EQ(parse(&cfg, (char *[]){"--rdzv-endpoint", "h:1", "--job-id", "j1", "--nnodes", "2",
                                   "--nproc-per-node", "1", "--node-rank", "1", "true", NULL}),
            0);
  ASSERT_EQ(cfg.node_rank, 1);
  ASSERT_EQ(parse(&cfg, (char *[]){"--rdzv-endpoint", "h:1", "--job-id", "j1", "--nnodes", "2",
                                   "--nproc-per-node", "1", "--node-rank", "2", "true", NULL}),
            2);
  ASSERT_EQ(parse(&cfg, (char *[]){"--rdzv-endpoint", "h:1", "--job-id", "j1", "--nnodes", "2",
                                   "--nproc-per-node", "1", "--node-rank", "-2", "true", NULL}),
            2);
  /* The registry's bounds, and the shared validators' refusals, exit 2. */
  int64_t lo = 0, hi = 0;
  bagua__param_bounds(BAGUA_P_LEASE_TTL_S, &lo, &hi);
  char below[32];
  snprintf(below, sizeof(below), "%lld", (long long)lo - 1);
  ASSERT_EQ(parse(&cfg, (char *[]){"--rdzv-endpoint", "h:1", "--job-id", "j1", "--nnodes", "1",
                                   "--nproc-per-node", "1", "--lease-ttl", below, "true", NULL}),
            2);
  ASSERT_EQ(parse(&cfg, (char *[]){"--rdzv-endpoint", "h:1", "--job-id", "j1", "--nnodes", "1:2:3",
                                   "--nproc-per-node", "1", "true", NULL}),
            2);
  ASSERT_EQ(parse(&cfg, (char *[]){"--rdzv-endpoint", "h", "--job-id", "j1", "--nnodes", "1",
                                   "--nproc-per-node", "1", "true", NULL}),
            2);
  ASSERT_EQ(parse(&cfg, (char *[]){"--rdzv-endpoint", "h:1", "--job-id", "", "--nnodes", "1",
                                   "--nproc-per-node", "1", "true", NULL}),
            2);
  ASSERT_EQ(parse(&cfg, (char *[]){"--help", NULL}), 1);
}

/* Runs the parser with stderr in a file; asserts exit 2 and a message containing `needle`. */
static void parse_refused(char **args, const char *needle) {
  bagua__agent_config_t cfg;
  char path[] = "/tmp/bagua-test-validate-XXXXXX";
  int fd = mkstemp(path);
  ASSERT_TRUE(fd >= 0);
  fflush(stderr);
  int saved = dup(STDERR_FILENO);
  dup2(fd, STDERR_FILENO);
  int rc = parse(&cfg, args);
  dup2(saved, STDERR_FILENO);
  close(saved);
  char text[4096] = "";
  ssize_t n = pread(fd, text, sizeof(text) - 1, 0);
  text[n > 0 ? n : 0] = '\0';
  close(fd);
  unlink(path);
  if (rc != 2) TEST_FAIL("exit %d, expected 2 (stderr: %s)", rc, text);
  if (!strstr(text, needle)) TEST_FAIL("stderr \"%s\" lacks \"%s\"", text, needle);
  if (!strstr(text, "accepted: ")) TEST_FAIL("stderr \"%s\" says nothing accepted", text);
}

/* Empty ids and directories, and programs that can never run, are usage errors. */
static void test_agent_cli_refusals(void) {
  parse_refused((char *[]){"--rdzv-endpoint", "h:1", "--job-id", "", "--nnodes", "1",
                           "--nproc-per-node", "1", "true", NULL},
                "--job-id \"\" is invalid: the value is empty");
  parse_refused((char *[]){"--rdzv-endpoint", "h:1", "--job-id", "j", "--nnodes", "1",
                           "--nproc-per-node", "1", "--log-dir", "", "true", NULL},
                "--log-dir \"\" is empty");
  parse_refused((char *[]){"--rdzv-endpoint", "h:1", "--job-id", "j", "--nnodes", "1:2:3",
                           "--nproc-per-node", "1", "true", NULL},
                "\"1:2:3\" is not N or MIN:MAX");
  /* Not found in PATH, and found but not executable (a script without its x bit). */
  parse_refused((char *[]){"--rdzv-endpoint", "h:1", "--job-id", "j", "--nnodes", "1",
                           "--nproc-per-node", "1", "bagua-no-such-program-xyz", NULL},
                "cannot run the worker program \"bagua-no-such-program-xyz\": No such file");
  char script[] = "/tmp/bagua-test-noexec-XXXXXX";
  int fd = mkstemp(script);
  ASSERT_TRUE(fd >= 0);
  close(fd);
  chmod(script, 0644);
  parse_refused((char *[]){"--rdzv-endpoint", "h:1", "--job-id", "j", "--nnodes", "1",
                           "--nproc-per-node", "1", script, NULL},
                "Permission denied");
  unlink(script);
  parse_refused((char *[]){"--rdzv-endpoint", "h:1", "--job-id", "j", "--nnodes", "1",
                           "--nproc-per-node", "1", "/tmp", NULL},
                "Is a directory");
}

/* --env-stdin: NAME=VALUE entries, each ended by NUL, are exported before anything is read. */
static void test_env_stdin(void) {
  bagua__agent_config_t cfg;
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  const char block[] = "BAGUA_TEST_SECRET=a b \"c\"=d\0BAGUA_STOP_GRACE_MS=777\0";
  ASSERT_EQ(write(p[1], block, sizeof(block) - 1), (ssize_t)sizeof(block) - 1);
  close(p[1]);
  int saved = dup(STDIN_FILENO);
  dup2(p[0], STDIN_FILENO);
  close(p[0]);
  ASSERT_EQ(parse(&cfg, (char *[]){"--env-stdin", "--rdzv-endpoint", "h:1", "--job-id", "j",
                                   "--nnodes", "1", "--nproc-per-node", "1", "true", NULL}),
            0);
  ASSERT_STREQ(getenv("BAGUA_TEST_SECRET"), "a b \"c\"=d");
  /* A registry parameter read this way counts as the environment's. */
  ASSERT_EQ(cfg.grace_ms, 777);
  dup2(saved, STDIN_FILENO);
  close(saved);
  unsetenv("BAGUA_STOP_GRACE_MS");
  unsetenv("BAGUA_TEST_SECRET");
  bagua__params_reload();
  /* A cut-off block (no final NUL) is refused. */
  ASSERT_EQ(pipe(p), 0);
  ASSERT_EQ(write(p[1], "A=1", 3), 3);
  close(p[1]);
  saved = dup(STDIN_FILENO);
  dup2(p[0], STDIN_FILENO);
  close(p[0]);
  parse_refused((char *[]){"--env-stdin", "--rdzv-endpoint", "h:1", "--job-id", "j", "--nnodes",
                           "1", "--nproc-per-node", "1", "true", NULL},
                "not ended by a NUL byte");
  dup2(saved, STDIN_FILENO);
  close(saved);
}

int main(int argc, char **argv) {
  TEST_RUN_CASES(argc, argv, "validate", TEST_CASE(ids), TEST_CASE(nnodes), TEST_CASE(endpoints),
                 TEST_CASE(int_and_choice), TEST_CASE(shared_flags), TEST_CASE(agent_cli),
                 TEST_CASE(agent_cli_refusals), TEST_CASE(env_stdin));
}
