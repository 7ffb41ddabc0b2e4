/*
 * End-to-end runs of host discovery and of Slurm allocations with the real bagua-agent and a
 * real etcd (the launcher's private one). Every "host" is this machine: distinct host names
 * are mapped to local execution by the remote command (a small script that drops the host and
 * runs the command), or by an `srun` shim first on PATH.
 *
 *   test_launch_discovery MODE LAUNCHER AGENT
 *
 * Modes:
 *   discovery: an elastic job (--nnodes 2:3) whose script reads a file the test rewrites:
 *     hostA and hostB at start, then hostC appears (its agent starts, a round of 3 nodes),
 *     then garbage (reported, the hosts are kept), then hostC vanishes (its agent is drained,
 *     the job goes on with 2 nodes) and the job ends with exit 0.
 *   discovery_stubborn: a drained agent whose remote command ignores SIGTERM is killed after
 *     its grace, is no failure, and the job goes on without it.
 *   slurm: SLURM_JOB_ID, SLURM_JOB_NODELIST=fnode[1-2] and SLURM_TASKS_PER_NODE=2(x2) with an
 *     srun shim: --dry-run shows the hosts from SLURM_JOB_NODELIST and the srun commands, and
 *     a job of 4 ranks runs across the 2 fake nodes.
 *
 * AGENT empty or missing skips (77), as does a missing /usr/bin/etcd.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "etcd_fixture.h"
#include "launch_util.h"
#include "test.h"

static const char *g_launcher;
static char g_dir[128], g_out[256], g_marker[128];
static char *g_extra_env[8];
static int g_extra_env_n;

static pid_t start(char *const *args) {
  return lu_start_launcher(g_launcher, NULL, args, "disc", g_marker, sizeof(g_marker), g_extra_env,
                           g_extra_env_n, g_out);
}

static void expect(int cond, const char *what) {
  if (!cond) {
    lu_dump(g_out);
    TEST_FAIL("%s", what);
  }
}

static int count(const char *path, const char *needle) {
  char *t = lu_read(path);
  int n = 0;
  for (char *p = t; p && (p = strstr(p, needle)); p++) n++;
  free(t);
  return n;
}

/* Polls until `path` holds at least `n` occurrences of `needle`. */
static void wait_count(const char *path, const char *needle, int n, int timeout_ms,
                       const char *what) {
  for (long long end = lu_now_ms() + timeout_ms; count(path, needle) < n;) {
    if (lu_now_ms() >= end) {
      lu_dump(path);
      expect(0, what);
    }
    usleep(20000);
  }
}

static void write_file(const char *path, const char *text, int exec) {
  /* Written aside and renamed, so a script run never reads half a file. */
  char tmp[300];
  snprintf(tmp, sizeof(tmp), "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  if (!f) TEST_FAIL("cannot write %s", tmp);
  fputs(text, f);
  fclose(f);
  if (exec) chmod(tmp, 0755);
  if (rename(tmp, path) != 0) TEST_FAIL("cannot rename %s", tmp);
}

static void assert_clean(void) {
  char *out = lu_read(g_out), dir[128];
  if (!lu_wait_no_marked(g_marker, 20000)) {
    lu_dump(g_out);
    TEST_FAIL("processes started by the run are still alive");
  }
  if (out && lu_find_etcd_dir(out, dir, sizeof(dir)) && !lu_wait_gone(dir, 10000)) {
    lu_dump(g_out);
    TEST_FAIL("the private etcd's directory %s is still there", dir);
  }
  free(out);
}

static int mode_discovery(void) {
  char hosts[256], script[256], remote[256], tmpl[300], outf[256], stop[256], prog[1024], text[512];
  /* A CI job that itself runs inside a Slurm allocation must not change this run (the flag
   * beats Slurm's variables anyway; this keeps --dry-run-like output the same too). */
  g_extra_env[g_extra_env_n++] = "-SLURM_JOB_ID";
  g_extra_env[g_extra_env_n++] = "-SLURM_JOB_NODELIST";
  snprintf(hosts, sizeof(hosts), "%s/hosts.txt", g_dir);
  snprintf(script, sizeof(script), "%s/discover.sh", g_dir);
  snprintf(remote, sizeof(remote), "%s/fake-remote", g_dir);
  snprintf(outf, sizeof(outf), "%s/workers.txt", g_dir);
  snprintf(stop, sizeof(stop), "%s/stop", g_dir);
  write_file(hosts, "hostA:1\nhostB:1\n", 0);
  snprintf(text, sizeof(text), "#!/bin/sh\nexec cat %s\n", hosts);
  write_file(script, text, 1);
  /* "Remote" hosts run here: the host word is logged and dropped. */
  snprintf(text, sizeof(text),
           "#!/bin/sh\nhost=$1; shift\necho \"REMOTE $host\" >> %s/remote.log\nexec \"$@\"\n",
           g_dir);
  write_file(remote, text, 1);
  snprintf(tmpl, sizeof(tmpl), "%s {host}", remote);
  /* Each worker says which world it is in, then waits for the test's stop file. */
  snprintf(prog, sizeof(prog),
           "echo \"W ws=$WORLD_SIZE round=$BAGUA_ROUND node=$BAGUA_NODE_ID\" >> %s; "
           "while [ ! -e %s ]; do sleep 0.05; done",
           outf, stop);
  pid_t pid = start((char *[]){"--host-discovery-script",
                               script,
                               "--discovery-interval-ms",
                               "200",
                               "--nnodes",
                               "2:3",
                               "--rdzv-host",
                               "127.0.0.1",
                               "--remote-cmd",
                               tmpl,
                               "--settle-ms",
                               "200",
                               "--last-call-ms",
                               "200",
                               "--grace-ms",
                               "2000",
                               "--",
                               "sh",
                               "-c",
                               prog,
                               NULL});
  wait_count(outf, "ws=2", 2, 30000, "the two first hosts ran a round of 2");
  /* hostC appears: its agent starts and the job grows to 3 nodes. */
  write_file(hosts, "hostA:1\nhostB:1\nhostC:1\n", 0);
  wait_count(g_out, "discovery: host hostC appeared: starting its agent (1 worker(s))", 1, 10000,
             "hostC's agent was started");
  wait_count(outf, "ws=3", 3, 30000, "a round of 3 nodes ran, hostC included");
  expect(count(outf, "ws=3 round=") == 3 && count(outf, "node=hostC") >= 1,
         "hostC's worker is in the round of 3");
  /* Garbage: reported with its line, the job keeps its hosts. */
  write_file(hosts, "hostA:1\nhost B:1\n", 0);
  wait_count(g_out, "failed: line 2: \"host B:1\": host name \"host B\" contains ' '", 1, 10000,
             "the bad line was reported");
  expect(count(g_out, "the job keeps its current hosts") >= 1, "the hosts were kept");
  expect(count(g_out, "is gone") == 0, "nothing was drained for garbage");
  /* hostC vanishes: its agent is drained and the others go on as a round of 2. */
  int ws2 = count(outf, "ws=2");
  write_file(hosts, "hostA:1\nhostB:1\n", 0);
  wait_count(g_out, "works again", 1, 10000, "the script's recovery was reported");
  wait_count(g_out, "discovery: host hostC is gone: draining its agent", 1, 10000,
             "hostC's agent was drained");
  wait_count(g_out, "discovery: the agent for host hostC left the job", 1, 20000,
             "hostC's agent left");
  wait_count(outf, "ws=2", ws2 + 2, 30000, "hostA and hostB went on as a round of 2");
  write_file(stop, "", 0);
  int rc = lu_wait(pid, 30000);
  expect(rc == 0, "the job succeeded (exit 0) without hostC");
  expect(count(g_out, "failed along the way") == 0, "the drained agent is no failure");
  char log[256];
  snprintf(log, sizeof(log), "%s/remote.log", g_dir);
  expect(count(log, "REMOTE hostA") == 1 && count(log, "REMOTE hostB") == 1 &&
             count(log, "REMOTE hostC") == 1,
         "one agent per host, hostC's started by discovery");
  assert_clean();
  return 0;
}

/*
 * A drained agent that does not leave: hostC's remote command ignores SIGTERM (and does not
 * pass it on), so the launcher kills its process group after 2 x --grace-ms + 3 s; the job
 * goes on with the others once hostC's lease has expired, and succeeds.
 */
static int mode_discovery_stubborn(void) {
  char hosts[256], script[256], remote[256], tmpl[300], outf[256], stop[256], prog[1024], text[512];
  g_extra_env[g_extra_env_n++] = "-SLURM_JOB_ID";
  snprintf(hosts, sizeof(hosts), "%s/hosts.txt", g_dir);
  snprintf(script, sizeof(script), "%s/discover.sh", g_dir);
  snprintf(remote, sizeof(remote), "%s/fake-remote", g_dir);
  snprintf(outf, sizeof(outf), "%s/workers.txt", g_dir);
  snprintf(stop, sizeof(stop), "%s/stop", g_dir);
  write_file(hosts, "hostA:1\nhostB:1\nhostC:1\n", 0);
  snprintf(text, sizeof(text), "#!/bin/sh\nexec cat %s\n", hosts);
  write_file(script, text, 1);
  write_file(remote,
             "#!/bin/sh\nhost=$1; shift\n"
             "if [ \"$host\" = hostC ]; then trap '' TERM; \"$@\"; exit $?; fi\nexec \"$@\"\n",
             1);
  snprintf(tmpl, sizeof(tmpl), "%s {host}", remote);
  snprintf(prog, sizeof(prog),
           "echo \"W ws=$WORLD_SIZE node=$BAGUA_NODE_ID\" >> %s; "
           "while [ ! -e %s ]; do sleep 0.05; done",
           outf, stop);
  pid_t pid = start((char *[]){"--host-discovery-script",
                               script,
                               "--discovery-interval-ms",
                               "200",
                               "--nnodes",
                               "2:3",
                               "--rdzv-host",
                               "127.0.0.1",
                               "--remote-cmd",
                               tmpl,
                               "--settle-ms",
                               "200",
                               "--last-call-ms",
                               "200",
                               "--grace-ms",
                               "500",
                               "--lease-ttl",
                               "2",
                               "--",
                               "sh",
                               "-c",
                               prog,
                               NULL});
  wait_count(outf, "ws=3", 3, 30000, "a round of 3 nodes ran");
  int ws2 = count(outf, "ws=2");
  long long t0 = lu_now_ms();
  write_file(hosts, "hostA:1\nhostB:1\n", 0);
  wait_count(g_out, "discovery: host hostC is gone: draining its agent", 1, 10000,
             "hostC's agent was drained");
  wait_count(g_out,
             "discovery: the agent for host hostC is still running 4000 ms after SIGTERM; "
             "killing it",
             1, 15000, "the stubborn agent was killed after 2 x 500 ms + 3 s");
  long long took = lu_now_ms() - t0;
  printf("drained agent killed %lld ms after the host vanished\n", took);
  expect(took >= 3500, "the kill waited for the grace");
  wait_count(g_out, "discovery: the agent for host hostC left the job (signal 9", 1, 10000,
             "its end is reported as a leave");
  wait_count(outf, "ws=2", ws2 + 2, 30000, "hostA and hostB went on as a round of 2");
  write_file(stop, "", 0);
  int rc = lu_wait(pid, 30000);
  expect(rc == 0, "the job succeeded (exit 0)");
  expect(count(g_out, "failed along the way") == 0, "the killed drained agent is no failure");
  assert_clean();
  return 0;
}

static int mode_slurm(void) {
  char bin[256], srun[300], text[512], path[4096], outf[256], prog[512];
  snprintf(bin, sizeof(bin), "%s/bin", g_dir);
  mkdir(bin, 0755);
  snprintf(srun, sizeof(srun), "%s/srun", bin);
  /* The shim runs "srun [options] -w HOST CMD..." here, logging the host. */
  snprintf(text, sizeof(text),
           "#!/bin/sh\nhost=\nwhile [ $# -gt 0 ]; do\n  case \"$1\" in\n"
           "    -w) host=$2; shift 2 ;;\n    -*) shift ;;\n    *) break ;;\n  esac\ndone\n"
           "echo \"SRUN $host\" >> %s/srun.log\nexec \"$@\"\n",
           g_dir);
  write_file(srun, text, 1);
  snprintf(path, sizeof(path), "PATH=%s:%s", bin, getenv("PATH") ? getenv("PATH") : "/usr/bin");
  g_extra_env[g_extra_env_n++] = path;
  g_extra_env[g_extra_env_n++] = "SLURM_JOB_ID=999";
  g_extra_env[g_extra_env_n++] = "SLURM_JOB_NODELIST=fnode[1-2]";
  g_extra_env[g_extra_env_n++] = "SLURM_TASKS_PER_NODE=2(x2)";
  g_extra_env[g_extra_env_n++] = "-SLURM_NTASKS_PER_NODE";
  snprintf(outf, sizeof(outf), "%s/workers.txt", g_dir);
  snprintf(prog, sizeof(prog), "echo \"W $RANK/$WORLD_SIZE node=$BAGUA_NODE_ID\" >> %s", outf);

  int rc = lu_wait(
      start((char *[]){"--dry-run", "--rdzv-host", "127.0.0.1", "--", "sh", "-c", prog, NULL}),
      20000);
  expect(rc == 0, "--dry-run exits 0");
  expect(count(g_out, "; from SLURM_JOB_NODELIST (Slurm job 999)") == 1,
         "the dry run names SLURM_JOB_NODELIST as the hosts' source");
  expect(count(g_out,
               "fnode1             = 2                            ; SLURM_JOB_NODELIST, "
               "slots SLURM_TASKS_PER_NODE") == 1 &&
             count(g_out, "fnode2             = 2 ") == 1,
         "both fake nodes with 2 slots each");
  expect(count(g_out, "srun --nodes=1 --ntasks=1 -w fnode1 env ") == 1 &&
             count(g_out, "srun --nodes=1 --ntasks=1 -w fnode2 env ") == 1,
         "one srun job step per node");

  rc = lu_wait(start((char *[]){"--rdzv-host", "127.0.0.1", "--", "sh", "-c", prog, NULL}), 40000);
  expect(rc == 0, "the job across 2 fake Slurm nodes succeeded");
  /* Node ranks follow registration order (oldest first), so either node may hold 0..1. */
  const char *want[] = {"W 0/4 node=fnode", "W 1/4 node=fnode", "W 2/4 node=fnode",
                        "W 3/4 node=fnode", "/4 node=fnode1\n", "/4 node=fnode2\n"};
  const int times[] = {1, 1, 1, 1, 2, 2};
  for (int i = 0; i < 6; i++)
    if (count(outf, want[i]) != times[i]) {
      lu_dump(outf);
      expect(0, want[i]);
    }
  char log[256];
  snprintf(log, sizeof(log), "%s/srun.log", g_dir);
  expect(count(log, "SRUN fnode1") == 1 && count(log, "SRUN fnode2") == 1,
         "each agent ran as a job step through srun");
  assert_clean();
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 4) TEST_FAIL("usage: %s MODE LAUNCHER AGENT", argv[0]);
  g_launcher = argv[2];
  if (!argv[3][0] || access(argv[3], X_OK) != 0)
    TEST_SKIP("bagua-agent is not built yet (agent target missing); these tests need it");
  if (!etcd_fixture_available())
    TEST_SKIP("%s not found; install the Debian package etcd-server", ETCD_FIXTURE_BIN);
  lu_mkdtemp(g_dir, sizeof(g_dir));
  snprintf(g_out, sizeof(g_out), "%s/launch.out", g_dir);
  int rc;
  /* BAGUA_TEST_VERBOSE=1 prints the launcher's output of a passing run too. */
  const int verbose = getenv("BAGUA_TEST_VERBOSE") != NULL;
  if (strcmp(argv[1], "discovery") == 0)
    rc = mode_discovery();
  else if (strcmp(argv[1], "discovery_stubborn") == 0)
    rc = mode_discovery_stubborn();
  else if (strcmp(argv[1], "slurm") == 0)
    rc = mode_slurm();
  else
    TEST_FAIL("unknown mode %s", argv[1]);
  if (verbose) lu_dump(g_out);
  lu_rmtree(g_dir);
  return rc;
}
