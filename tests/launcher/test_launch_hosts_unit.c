/*
 * Unit tests without agents: host discovery (the script output parser, the diff between the
 * running hosts and the script's, running a script with its bounds) and Slurm (host-list
 * expansion, tasks per node, and the hosts and remote command a configuration resolves to
 * inside an allocation).
 *
 *   test_launch_hosts_unit
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/params.h"
#include "discovery.h"
#include "launch.h"
#include "launch_util.h"
#include "slurm.h"
#include "test.h"

static char g_dir[128];

/* ---- discovery: parsing ---- */

static void parse_ok(const char *text, int want_n, const char *const *names, const int *slots) {
  bagua__discovery_host_t *h = NULL;
  int n = -1;
  char err[512];
  if (bagua__discovery_parse(text, strlen(text), &h, &n, err, sizeof(err)) != 0)
    TEST_FAIL("parse of \"%s\" failed: %s", text, err);
  ASSERT_EQ(n, want_n);
  for (int i = 0; i < n; i++) {
    ASSERT_STREQ(h[i].name, names[i]);
    ASSERT_EQ(h[i].slots, slots[i]);
  }
  bagua__discovery_hosts_free(h, n);
}

static void parse_bad(const char *text, size_t len, const char *want) {
  bagua__discovery_host_t *h = (void *)1;
  int n = -1;
  char err[512] = "";
  if (bagua__discovery_parse(text, len, &h, &n, err, sizeof(err)) == 0)
    TEST_FAIL("parse of \"%s\" succeeded; expected an error with \"%s\"", text, want);
  if (!strstr(err, want)) TEST_FAIL("error \"%s\" lacks \"%s\"", err, want);
  if (!strstr(err, "accepted: ")) TEST_FAIL("error \"%s\" does not say what is accepted", err);
  ASSERT_TRUE(h == NULL);
  ASSERT_EQ(n, 0);
}

static void test_parse(void) {
  parse_ok("a:2\nb\n", 2, (const char *[]){"a", "b"}, (int[]){2, 0});
  /* Comments, blanks, CRLF, no final newline, indentation. */
  parse_ok("# hosts\n\n  node-1.example:4  # four\r\nnode_2:1", 2,
           (const char *[]){"node-1.example", "node_2"}, (int[]){4, 1});
  parse_bad("a:2\nb c\n", 8, "line 2: \"b c\": host name \"b c\" contains ' '");
  parse_bad("a:0\n", 4, "line 1: \"a:0\": slot count 0 is out of range");
  parse_bad("a:x\n", 4, "line 1: \"a:x\": slot count \"x\" is not an integer");
  parse_bad("a:4097\n", 7, "slot count 4097 is out of range");
  parse_bad("a:\n", 3, "slot count \"\" is not an integer");
  parse_bad("a:1\nb:1\na:2\n", 12, "line 3: \"a:2\": host a is listed again (first on line 1)");
  parse_bad("-oProxyCommand=x\n", 17, "starts with '-'");
  parse_bad(":3\n", 3, "the host name is empty");
  parse_bad("", 0, "it printed no host");
  parse_bad("# nothing\n\n", 11, "it printed no host");
  parse_bad("a\0b\n", 4, "line 1: contains a NUL byte");
  char longline[400];
  memset(longline, 'x', sizeof(longline) - 1);
  longline[sizeof(longline) - 1] = '\0';
  parse_bad(longline, strlen(longline), "line 1: longer than");
}

/* ---- discovery: the diff ---- */

static bagua__discovery_host_t *hosts(const char *spec, int *n) {
  /* "a:2,b,c" */
  bagua__discovery_host_t *h = NULL;
  char copy[256], *save = NULL;
  snprintf(copy, sizeof(copy), "%s", spec);
  *n = 0;
  for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    h = realloc(h, sizeof(*h) * (size_t)(*n + 1));
    char *c = strchr(t, ':');
    if (c) *c = '\0';
    h[*n] = (bagua__discovery_host_t){.name = strdup(t), .slots = c ? atoi(c + 1) : 0};
    (*n)++;
  }
  return h;
}

static void test_diff(void) {
  bagua__discovery_diff_t d;
  int n;
  /* A new host starts, a vanished one drains. */
  bagua__discovery_host_t *f = hosts("a,c", &n);
  const char *run[] = {"a", "b"};
  ASSERT_EQ(bagua__discovery_diff(run, NULL, 2, NULL, 0, f, n, 3, &d), 0);
  ASSERT_EQ(d.nstart, 1);
  ASSERT_STREQ(f[d.start[0]].name, "c");
  ASSERT_EQ(d.ndrain, 1);
  ASSERT_STREQ(run[d.drain[0]], "b");
  ASSERT_EQ(d.nwaiting, 0);
  bagua__discovery_diff_free(&d);
  /* MAX counts the agents that are still draining: c waits until b's agent has exited. */
  ASSERT_EQ(bagua__discovery_diff(run, NULL, 2, NULL, 0, f, n, 2, &d), 0);
  ASSERT_EQ(d.nstart, 0);
  ASSERT_EQ(d.ndrain, 1);
  ASSERT_EQ(d.nwaiting, 1);
  ASSERT_STREQ(f[d.waiting[0]].name, "c");
  bagua__discovery_diff_free(&d);
  /* After b's agent exited (no longer running nor draining), c starts. */
  const char *run_a[] = {"a"};
  ASSERT_EQ(bagua__discovery_diff(run_a, NULL, 1, NULL, 0, f, n, 2, &d), 0);
  ASSERT_EQ(d.nstart, 1);
  ASSERT_EQ(d.ndrain, 0);
  bagua__discovery_diff_free(&d);
  bagua__discovery_hosts_free(f, n);
  /* A host that returns while its old agent is still leaving waits for it (same node id). */
  f = hosts("a,b", &n);
  const char *drn[] = {"b"};
  ASSERT_EQ(bagua__discovery_diff(run_a, NULL, 1, drn, 1, f, n, 8, &d), 0);
  ASSERT_EQ(d.nstart, 0);
  ASSERT_EQ(d.nwaiting, 1);
  bagua__discovery_diff_free(&d);
  bagua__discovery_hosts_free(f, n);
  /* New hosts start in the order printed, up to MAX; slot changes are reported. */
  f = hosts("z,a:4,y,x", &n);
  int slots[] = {2};
  ASSERT_EQ(bagua__discovery_diff(run_a, slots, 1, NULL, 0, f, n, 3, &d), 0);
  ASSERT_EQ(d.nstart, 2);
  ASSERT_STREQ(f[d.start[0]].name, "z");
  ASSERT_STREQ(f[d.start[1]].name, "y");
  ASSERT_EQ(d.nwaiting, 1);
  ASSERT_STREQ(f[d.waiting[0]].name, "x");
  ASSERT_EQ(d.nchanged, 1);
  ASSERT_STREQ(f[d.changed[0]].name, "a");
  bagua__discovery_diff_free(&d);
  /* Nothing changes: nothing to do. */
  ASSERT_EQ(bagua__discovery_diff(run_a, NULL, 1, NULL, 0, f, 2 > n ? n : 2, 1, &d), 0);
  ASSERT_EQ(d.ndrain, 0);
  ASSERT_EQ(d.nstart, 0);
  bagua__discovery_diff_free(&d);
  bagua__discovery_hosts_free(f, n);
}

/* ---- discovery: running the script ---- */

static void write_script(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  ASSERT_TRUE(f != NULL);
  fputs(text, f);
  fclose(f);
  chmod(path, 0755);
}

static void once_bad(const char *cmd, int timeout, const char *want) {
  bagua__discovery_host_t *h = NULL;
  int n = 0;
  char err[1024] = "";
  long long t0 = lu_now_ms();
  if (bagua__discovery_once(cmd, timeout, &h, &n, err, sizeof(err)) == 0)
    TEST_FAIL("%s succeeded; expected \"%s\"", cmd, want);
  if (!strstr(err, want)) TEST_FAIL("error \"%s\" lacks \"%s\"", err, want);
  ASSERT_LT(lu_now_ms() - t0, timeout + 3000);
}

static void test_run(void) {
  char ok[256], fail[256], slow[256], garbage[256], big[256], cmd[300];
  snprintf(ok, sizeof(ok), "%s/ok.sh", g_dir);
  write_script(ok, "#!/bin/sh\necho 'h1:2'\necho h2\n");
  bagua__discovery_host_t *h = NULL;
  int n = 0;
  char err[1024];
  if (bagua__discovery_once(ok, 5000, &h, &n, err, sizeof(err)) != 0) TEST_FAIL("%s", err);
  ASSERT_EQ(n, 2);
  ASSERT_STREQ(h[0].name, "h1");
  ASSERT_EQ(h[0].slots, 2);
  bagua__discovery_hosts_free(h, n);
  /* Words: an interpreter and its script. */
  snprintf(cmd, sizeof(cmd), "sh %s", ok);
  if (bagua__discovery_once(cmd, 5000, &h, &n, err, sizeof(err)) != 0) TEST_FAIL("%s", err);
  ASSERT_EQ(n, 2);
  bagua__discovery_hosts_free(h, n);

  snprintf(fail, sizeof(fail), "%s/fail.sh", g_dir);
  write_script(fail, "#!/bin/sh\necho h1\nexit 3\n");
  once_bad(fail, 5000, "exited with code 3; accepted: exit status 0");
  /* A script that hangs (and a child of it holding the pipe) is killed at its timeout. */
  snprintf(slow, sizeof(slow), "%s/slow.sh", g_dir);
  write_script(slow, "#!/bin/sh\necho h1\nsleep 29.731 &\nsleep 29.731\n");
  once_bad(slow, 300, "did not finish within 300 ms and was killed");
  ASSERT_TRUE(lu_wait_no_procs("sleep 29.731", 5000));
  snprintf(garbage, sizeof(garbage), "%s/garbage.sh", g_dir);
  write_script(garbage, "#!/bin/sh\necho h1:2\necho 'h2:two'\n");
  once_bad(garbage, 5000, "line 2: \"h2:two\": slot count \"two\" is not an integer");
  once_bad("/nonexistent/discover.sh", 5000, "cannot run /nonexistent/discover.sh");
  snprintf(big, sizeof(big), "%s/big.sh", g_dir);
  write_script(big, "#!/bin/sh\nyes h1 | head -c 2000000\n");
  once_bad(big, 5000, "printed more than 1048576 bytes");
}

/* ---- Slurm ---- */

static void expand_ok(const char *text, const char *want) {
  char **names = NULL, err[512], got[4096] = "";
  int n = 0;
  if (bagua__slurm_expand_hostlist(text, &names, &n, err, sizeof(err)) != 0)
    TEST_FAIL("expanding \"%s\": %s", text, err);
  size_t o = 0;
  for (int i = 0; i < n; i++)
    o += (size_t)snprintf(got + o, sizeof(got) - o, "%s%s", i ? " " : "", names[i]);
  bagua__slurm_names_free(names, n);
  ASSERT_STREQ(got, want);
}

static void expand_bad(const char *text, const char *want) {
  char **names = NULL, err[512] = "";
  int n = 0;
  if (bagua__slurm_expand_hostlist(text, &names, &n, err, sizeof(err)) == 0)
    TEST_FAIL("expanding \"%s\" succeeded; expected \"%s\"", text, want);
  if (!strstr(err, want)) TEST_FAIL("error \"%s\" lacks \"%s\"", err, want);
  if (!strstr(err, "accepted: ")) TEST_FAIL("error \"%s\" does not say what is accepted", err);
}

static void tasks_ok(const char *text, int nnodes, const char *want) {
  int *slots = NULL;
  char err[512], got[512] = "";
  if (bagua__slurm_parse_tasks(text, nnodes, &slots, err, sizeof(err)) != 0)
    TEST_FAIL("tasks \"%s\": %s", text, err);
  size_t o = 0;
  for (int i = 0; i < nnodes; i++)
    o += (size_t)snprintf(got + o, sizeof(got) - o, "%s%d", i ? " " : "", slots[i]);
  free(slots);
  ASSERT_STREQ(got, want);
}

static void tasks_bad(const char *text, int nnodes, const char *want) {
  int *slots = NULL;
  char err[512] = "";
  if (bagua__slurm_parse_tasks(text, nnodes, &slots, err, sizeof(err)) == 0)
    TEST_FAIL("tasks \"%s\" succeeded; expected \"%s\"", text, want);
  if (!strstr(err, want)) TEST_FAIL("error \"%s\" lacks \"%s\"", err, want);
  ASSERT_TRUE(slots == NULL);
}

static void test_slurm_parsers(void) {
  expand_ok("node[01-04,07],gpu-[1-3]x,login1",
            "node01 node02 node03 node04 node07 gpu-1x gpu-2x gpu-3x login1");
  expand_ok("n1", "n1");
  expand_ok("n[8-11]", "n8 n9 n10 n11");
  expand_ok("n[008-010]", "n008 n009 n010");
  expand_ok("rack[1-2]-n[1-2]", "rack1-n1 rack1-n2 rack2-n1 rack2-n2");
  expand_ok("a[3],b", "a3 b");
  expand_bad("node[1-3", "'[' without ']'");
  expand_bad("node1-3]", "']' without '['");
  expand_bad("node[1-[2]]", "nested '['");
  expand_bad("a,,b", "entry 2 is empty");
  expand_bad("a,", "entry 2 is empty");
  expand_bad("", "the host list is empty");
  expand_bad("n[]", "empty brackets");
  expand_bad("n[5-2]", "LO 5 larger than HI 2");
  expand_bad("n[a-b]", "range \"a-b\" is not N or LO-HI");
  expand_bad("n[1-]", "range \"1-\" is not N or LO-HI");
  expand_bad("n[1,,2]", "range \"\" is not N or LO-HI");
  expand_bad("n[0-99999]", "more than 65536 hosts");
  expand_bad("bad host", "contains ' '");
  expand_bad("-x[1-2]", "starts with '-'");

  tasks_ok("2(x3),1", 4, "2 2 2 1");
  tasks_ok("4", 3, "4 4 4");
  tasks_ok("1,2,3", 3, "1 2 3");
  tasks_ok("8(x2)", 2, "8 8");
  tasks_bad("2(x3),1", 3, "more than the 3 node(s)");
  tasks_bad("2(x2)", 3, "counts for 2 node(s) but SLURM_JOB_NODELIST has 3");
  tasks_bad("2(3)", 3, "the repeat is not (xM)");
  tasks_bad("2(x0)", 1, "the repeat is not (xM)");
  tasks_bad("2(x2", 2, "the repeat is not (xM)");
  tasks_bad("0", 1, "slot count 0 is out of range");
  tasks_bad("a", 1, "is not an integer");
  tasks_bad("1,,1", 2, "entry 2 \"\" is empty");
  tasks_bad("", 1, "the value is empty");
}

/* ---- resolution inside an allocation, and with a discovery script ---- */

static char *configure(char **args, int *rc) {
  bagua__launch_config_t cfg;
  char err[LAUNCH_ERR_LEN], *text = NULL;
  size_t len = 0;
  int argc = 0;
  while (args[argc]) argc++;
  bagua__params_reload();
  *rc = bagua__launch_configure(argc, args, &cfg, err, sizeof(err));
  if (*rc != 0) return strdup(err);
  FILE *out = open_memstream(&text, &len);
  bagua__launch_dump(&cfg, out);
  fclose(out);
  bagua__launch_config_free(&cfg);
  return text;
}

static void expect_in(const char *text, const char *want) {
  if (!strstr(text, want)) TEST_FAIL("\"%s\" not in:\n%s", want, text);
}

static void test_slurm_config(void) {
  int rc;
  setenv("SLURM_JOB_ID", "4242", 1);
  setenv("SLURM_JOB_NODELIST", "gpu[01-02],cpu7", 1);
  setenv("SLURM_TASKS_PER_NODE", "2(x2),1", 1);
  unsetenv("SLURM_NTASKS_PER_NODE");
  char *t = configure((char *[]){"bagua-launch", "--job-id", "j", "prog", NULL}, &rc);
  ASSERT_EQ(rc, 0);
  expect_in(t, "; from SLURM_JOB_NODELIST (Slurm job 4242)");
  expect_in(t,
            "gpu01              = 2                            ; SLURM_JOB_NODELIST, slots "
            "SLURM_TASKS_PER_NODE");
  expect_in(t, "cpu7               = 1 ");
  expect_in(t,
            "remote_cmd         = srun --nodes=1 --ntasks=1 -w {host} {cmd} ; default inside a "
            "Slurm allocation");
  expect_in(t, "nnodes             = 3:3 ");
  free(t);
  /* A flag beats the environment: hosts, nproc_per_node, remote command. */
  t = configure((char *[]){"bagua-launch", "--job-id", "j", "--nproc-per-node", "3", "--remote-cmd",
                           "ssh {host}", "prog", NULL},
                &rc);
  ASSERT_EQ(rc, 0);
  expect_in(t,
            "gpu01              = 3                            ; SLURM_JOB_NODELIST, slots "
            "--nproc-per-node");
  expect_in(t, "remote_cmd         = ssh {host}");
  free(t);
  t = configure((char *[]){"bagua-launch", "--job-id", "j", "--hosts", "x:1", "prog", NULL}, &rc);
  ASSERT_EQ(rc, 0);
  ASSERT_TRUE(strstr(t, "gpu01") == NULL);
  expect_in(t, "remote_cmd         = ssh -o BatchMode=yes {host}  ; default\n");
  free(t);
  /* SLURM_NTASKS_PER_NODE is the user's explicit request. */
  setenv("SLURM_NTASKS_PER_NODE", "4", 1);
  t = configure((char *[]){"bagua-launch", "--job-id", "j", "prog", NULL}, &rc);
  ASSERT_EQ(rc, 0);
  expect_in(t,
            "cpu7               = 4                            ; SLURM_JOB_NODELIST, slots "
            "SLURM_NTASKS_PER_NODE");
  free(t);
  unsetenv("SLURM_NTASKS_PER_NODE");
  /* Malformed variables stop everything, naming the variable. */
  setenv("SLURM_JOB_NODELIST", "gpu[01-02", 1);
  t = configure((char *[]){"bagua-launch", "--job-id", "j", "prog", NULL}, &rc);
  ASSERT_EQ(rc, 2);
  expect_in(t, "environment SLURM_JOB_NODELIST=\"gpu[01-02\": '[' without ']'");
  free(t);
  setenv("SLURM_JOB_NODELIST", "gpu[01-02]", 1);
  t = configure((char *[]){"bagua-launch", "--job-id", "j", "prog", NULL}, &rc);
  ASSERT_EQ(rc, 2);
  expect_in(t, "environment SLURM_TASKS_PER_NODE=\"2(x2),1\": it gives counts for more than");
  free(t);
  /* Outside an allocation (no job id) the node list means nothing. */
  unsetenv("SLURM_JOB_ID");
  t = configure((char *[]){"bagua-launch", "--job-id", "j", "prog", NULL}, &rc);
  ASSERT_EQ(rc, 0);
  expect_in(t, "; none: one local agent");
  free(t);
  unsetenv("SLURM_JOB_NODELIST");
  unsetenv("SLURM_TASKS_PER_NODE");
}

static void test_discovery_config(void) {
  char script[256], ini[256];
  int rc;
  snprintf(script, sizeof(script), "%s/hosts.sh", g_dir);
  write_script(script, "#!/bin/sh\necho 'ha:2'\necho hb\necho hc:1\n");
  char *t = configure((char *[]){"bagua-launch", "--job-id", "j", "--host-discovery-script", script,
                                 "--nnodes", "1:2", "prog", NULL},
                      &rc);
  ASSERT_EQ(rc, 0);
  expect_in(t, "ha                 = 2                            ; discovery script, line 1");
  expect_in(t, "hb                 = 1                            ; discovery script, line 2");
  expect_in(t, "; hc waits: nnodes 1:2 allows 2 agents");
  expect_in(t, "discovery_interval_ms = 1000");
  free(t);
  /* Not elastic: nnodes defaults to the hosts found, and the script runs once. */
  t = configure(
      (char *[]){"bagua-launch", "--job-id", "j", "--host-discovery-script", script, "prog", NULL},
      &rc);
  ASSERT_EQ(rc, 0);
  expect_in(t, "nnodes             = 3:3 ");
  expect_in(t, "(not used: the job is not elastic, the script runs once)");
  free(t);
  /* One source of hosts per layer. */
  t = configure((char *[]){"bagua-launch", "--job-id", "j", "--host-discovery-script", script,
                           "--hosts", "a", "prog", NULL},
                &rc);
  ASSERT_EQ(rc, 2);
  expect_in(t, "--host-discovery-script and --hosts both give the hosts; accepted: one of them");
  free(t);
  snprintf(ini, sizeof(ini), "%s/job.ini", g_dir);
  FILE *f = fopen(ini, "w");
  fprintf(f, "[job]\nhost_discovery_script = %s\ndiscovery_interval_ms = 250\n", script);
  fclose(f);
  t = configure(
      (char *[]){"bagua-launch", "--job-id", "j", "--config", ini, "--nnodes", "2:4", "prog", NULL},
      &rc);
  ASSERT_EQ(rc, 0);
  expect_in(t, "discovery_interval_ms = 250");
  expect_in(t, "hc                 = 1 ");
  free(t);
  /* --hosts beats the INI's script (flag > INI); the script is shown as not used. */
  t = configure(
      (char *[]){"bagua-launch", "--job-id", "j", "--config", ini, "--hosts", "q", "prog", NULL},
      &rc);
  ASSERT_EQ(rc, 0);
  expect_in(t, "(not used: the hosts come from a higher layer)");
  ASSERT_TRUE(strstr(t, "ha ") == NULL);
  free(t);
  /* A failing script at start stops everything with the script's reason. */
  write_script(script, "#!/bin/sh\necho 'ha:2'\necho 'h b'\n");
  t = configure(
      (char *[]){"bagua-launch", "--job-id", "j", "--host-discovery-script", script, "prog", NULL},
      &rc);
  ASSERT_EQ(rc, 2);
  expect_in(t, "line 2: \"h b\": host name \"h b\" contains ' '; accepted: one HOST or HOST:SLOTS");
  free(t);
  t = configure(
      (char *[]){"bagua-launch", "--job-id", "j", "--discovery-interval-ms", "5", "prog", NULL},
      &rc);
  ASSERT_EQ(rc, 2);
  expect_in(t, "--discovery-interval-ms");
  free(t);
}

int main(void) {
  unsetenv("SLURM_JOB_ID");
  unsetenv("SLURM_JOB_NODELIST");
  unsetenv("SLURM_NTASKS_PER_NODE");
  unsetenv("SLURM_TASKS_PER_NODE");
  lu_mkdtemp(g_dir, sizeof(g_dir));
  test_parse();
  test_diff();
  test_run();
  test_slurm_parsers();
  test_slurm_config();
  test_discovery_config();
  lu_rmtree(g_dir);
  printf("ok\n");
  return 0;
}
