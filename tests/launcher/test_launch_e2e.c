/*
 * End-to-end runs of bagua-launch with the real bagua-agent: a private etcd, real rendezvous
 * rounds, real workers.
 *
 *   test_launch_e2e MODE LAUNCHER AGENT [BENCH EXAMPLE_INI [ELASTIC_WORKER]]
 *
 * BENCH and EXAMPLE_INI are for allreduce, ELASTIC_WORKER (tests/agent's agent_elastic_worker;
 * empty: skip) for sigint_elastic.
 *
 * AGENT is the agent target's path; an empty argument or a missing file skips the test (77)
 * until the agent is built. bagua-launch is run without --agent, so its default discovery of
 * the agent in the build tree is tested too.
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

static pid_t start(char *const *args) {
  return lu_start_launcher(g_launcher, NULL, args, "e2e", g_marker, sizeof(g_marker), NULL, 0,
                           g_out);
}

static void expect(int cond, const char *what) {
  if (!cond) {
    lu_dump(g_out);
    TEST_FAIL("%s", what);
  }
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

static int count(const char *path, const char *needle) {
  char *t = lu_read(path);
  int n = 0;
  for (char *p = t; p && (p = strstr(p, needle)); p++) n++;
  free(t);
  return n;
}

/* 4 workers on one node: each sees the torchrun variables of a 4-rank world. */
static int mode_success(void) {
  char outf[256], prog[512];
  snprintf(outf, sizeof(outf), "%s/w.txt", g_dir);
  snprintf(prog, sizeof(prog),
           "echo \"W $RANK/$WORLD_SIZE local $LOCAL_RANK/$LOCAL_WORLD_SIZE\" >> %s", outf);
  long long t0 = lu_now_ms();
  int rc = lu_wait(start((char *[]){"--nproc-per-node", "4", "--", "sh", "-c", prog, NULL}), 40000);
  printf("job took %lld ms\n", lu_now_ms() - t0);
  expect(rc == 0, "exit 0");
  for (int r = 0; r < 4; r++) {
    char want[64];
    snprintf(want, sizeof(want), "W %d/4 local %d/4", r, r);
    if (count(outf, want) != 1) {
      lu_dump(outf);
      expect(0, want);
    }
  }
  assert_clean();
  return 0;
}

/* Two agents (emulated nodes) of two workers: one world of 4, distinct node ranks. */
static int mode_two_nodes(void) {
  char outf[256], prog[512];
  snprintf(outf, sizeof(outf), "%s/w.txt", g_dir);
  snprintf(prog, sizeof(prog), "echo \"W $RANK/$WORLD_SIZE node $GROUP_RANK\" >> %s", outf);
  int rc = lu_wait(
      start((char *[]){"--hosts", "localhost:2,localhost:2", "--", "sh", "-c", prog, NULL}), 40000);
  expect(rc == 0, "exit 0");
  const char *want[] = {"W 0/4 node 0", "W 1/4 node 0", "W 2/4 node 1", "W 3/4 node 1"};
  for (int i = 0; i < 4; i++)
    if (count(outf, want[i]) != 1) {
      lu_dump(outf);
      expect(0, want[i]);
    }
  assert_clean();
  return 0;
}

/* A worker fails with no restarts left: the job's exit code is the worker's. */
static int mode_failure(void) {
  int rc =
      lu_wait(start((char *[]){"--nproc-per-node", "3", "--max-restarts", "0", "--", "sh", "-c",
                               "if [ $RANK = 1 ]; then exit 7; fi; exec sleep 60", NULL}),
              40000);
  expect(rc == 7, "exit 7");
  char *out = lu_read(g_out);
  expect(out && strstr(out, "failed; root cause at ") && strstr(out, "rank 1: exit code 7"),
         "the root cause names rank 1 and code 7");
  free(out);
  assert_clean();
  return 0;
}

/* A real collective: bagua-bench allreduce with every element checked, 2 emulated nodes of 2
 * ranks (shared memory within a node, TCP across), configured by the shipped local.ini. */
static int mode_allreduce(const char *bench, const char *example) {
  if (access(bench, X_OK) != 0) TEST_SKIP("bagua-bench is not built");
  int rc = lu_wait(start((char *[]){"--config", (char *)example, "--hosts",
                                    "localhost:2,localhost:2", "--", (char *)bench, "allreduce",
                                    "--max-bytes", "1M", "--iters", "2", "--check", NULL}),
                   50000);
  expect(rc == 0, "exit 0");
  char *out = lu_read(g_out);
  expect(out && strstr(out, "nranks=4") != NULL, "rank 0 ran a 4-rank allreduce");
  free(out);
  assert_clean();
  return 0;
}

/* Ctrl-C: the agents stop their workers and everything exits with 130. */
static int mode_sigint(void) {
  char prog[512];
  snprintf(prog, sizeof(prog),
           "echo $$ > %s/w$RANK.tmp && mv %s/w$RANK.tmp %s/w$RANK && exec sleep 60", g_dir, g_dir,
           g_dir);
  pid_t pid = start((char *[]){"--nproc-per-node", "2", "--", "sh", "-c", prog, NULL});
  for (int r = 0; r < 2; r++) {
    char path[256];
    snprintf(path, sizeof(path), "%s/w%d", g_dir, r);
    expect(lu_wait_file(path, 30000), "workers started");
  }
  kill(pid, SIGINT);
  int rc = lu_wait(pid, 30000);
  expect(rc == 130, "exit 130");
  assert_clean();
  return 0;
}

/* Occurrences of `needle` in the run's output so far. */
static int count_output(const char *needle) {
  char *out = lu_read(g_out);
  int n = 0;
  for (const char *p = out; p && (p = strstr(p, needle)) != NULL; p += strlen(needle)) n++;
  free(out);
  return n;
}

/*
 * Ctrl-C with elastic workers (the default elastic mode, auto, and libbagua's elastic API):
 * every agent deregisters first, sees that no round without it can come (all of them leave),
 * and signals its worker at once, so the launcher is back well within the 5 s stop grace.
 */
static int mode_sigint_elastic(const char *worker) {
  if (!worker || !worker[0] || access(worker, X_OK) != 0)
    TEST_SKIP("agent_elastic_worker is not built (tests/agent)");
  pid_t pid = start((char *[]){"--hosts", "localhost:1,localhost:1", "--grace-ms", "5000", "--",
                               (char *)worker, "1000000", "20", NULL});
  for (long long end = lu_now_ms() + 30000; count_output("first_step_ms=") < 2;) {
    expect(lu_now_ms() < end, "both elastic workers ran a step within 30 s");
    usleep(20000);
  }
  long long t0 = lu_now_ms();
  kill(pid, SIGINT);
  int rc = lu_wait(pid, 30000);
  long long took = lu_now_ms() - t0;
  printf("Ctrl-C with elastic workers: bagua-launch exited %lld ms after SIGINT\n", took);
  expect(rc == 130, "exit 130");
  expect(count_output("mode=auto") == 2, "the workers ran in auto mode");
  expect(count_output("deregistered first") == 2, "both agents left gracefully");
  expect(took < 4000, "no agent waited out the grace period");
  assert_clean();
  return 0;
}

/*
 * A program that can never run (not found) fails the job at once with exit 2 and the exec
 * error, instead of being restarted --max-restarts times as a worker that "exited 127".
 */
static int mode_no_program(void) {
  long long t0 = lu_now_ms();
  int rc = lu_wait(start((char *[]){"--hosts", "localhost:1,localhost:1", "--max-restarts", "3",
                                    "--", "bagua-no-such-program-xyz", NULL}),
                   40000);
  long long took = lu_now_ms() - t0;
  printf("job took %lld ms\n", took);
  expect(rc == 2, "exit 2 (usage error)");
  expect(count(g_out,
               "cannot run the worker program \"bagua-no-such-program-xyz\": No such file "
               "or directory") >= 1,
         "the agent names the program and the error");
  expect(count(g_out, "round 2") == 0 && count(g_out, "restart 1") == 0, "nothing restarted");
  expect(took < 20000, "it failed at once");
  assert_clean();
  return 0;
}

/*
 * A .py program without its execute bit runs under python3 (torchrun's habit), and
 * -m MODULE runs a module; -x NAME=VALUE reaches the workers.
 */
static int mode_python(void) {
  if (system("command -v python3 >/dev/null 2>&1") != 0) TEST_SKIP("python3 is not in PATH");
  char script[256], outf[256], text[512], pp[300];
  snprintf(outf, sizeof(outf), "%s/w.txt", g_dir);
  snprintf(script, sizeof(script), "%s/bagua_e2e_job.py", g_dir);
  snprintf(text, sizeof(text),
           "import os, sys\n"
           "with open(%s, 'a') as f:\n"
           "    f.write('PY %%s rank %%s x=%%s args=%%s\\n' %% (__name__, os.environ['RANK'],\n"
           "            os.environ.get('BAGUA_TEST_X'), ' '.join(sys.argv[1:])))\n",
           "'w.txt'");
  /* The file is written relative to the job's directory, given by an absolute path below. */
  char body[1024];
  snprintf(body, sizeof(body), "import os\nos.chdir(%s%s%s)\n%s", "'", g_dir, "'", text);
  FILE *f = fopen(script, "w");
  expect(f != NULL, "write the script");
  fputs(body, f);
  fclose(f);
  chmod(script, 0644); /* no execute bit: only the interpreter can run it */
  int rc = lu_wait(start((char *[]){"--nproc-per-node", "2", "-x", "BAGUA_TEST_X=fwd", "--", script,
                                    "a b", NULL}),
                   40000);
  expect(rc == 0, "the .py script ran under python3");
  expect(count(outf, "PY __main__ rank 0 x=fwd args=a b") == 1 &&
             count(outf, "PY __main__ rank 1 x=fwd args=a b") == 1,
         "both ranks ran the script, with the -x variable");
  assert_clean();
  /* The same file as a module, found through PYTHONPATH (forwarded with -x NAME). */
  snprintf(pp, sizeof(pp), "PYTHONPATH=%s", g_dir);
  putenv(pp);
  rc = lu_wait(start((char *[]){"-x", "PYTHONPATH", "-x", "BAGUA_TEST_X=mod", "-m", "bagua_e2e_job",
                                "c", NULL}),
               40000);
  expect(rc == 0, "-m MODULE ran");
  expect(count(outf, "PY __main__ rank 0 x=mod args=c") == 1, "the module ran as __main__");
  assert_clean();
  /* A script that fails to import under the default interpreter: the verdict names it. */
  char bad[256];
  snprintf(bad, sizeof(bad), "%s/bagua_e2e_bad.py", g_dir);
  f = fopen(bad, "w");
  expect(f != NULL, "write the failing script");
  fputs("import bagua_no_such_module_xyz\n", f);
  fclose(f);
  rc = lu_wait(start((char *[]){"--max-restarts", "0", "--", bad, NULL}), 40000);
  expect(rc == 1, "exit 1, the worker's");
  expect(count(g_out, "under python3, the first on the agents' PATH") == 1,
         "the verdict names the interpreter and how to choose another");
  assert_clean();
  return 0;
}

int main(int argc, char **argv) {
  /* Run inside a Slurm allocation (a CI runner may be), the launcher would start agents
   * through srun: these tests start them locally. */
  unsetenv("SLURM_JOB_ID");
  unsetenv("SLURM_JOB_NODELIST");
  if (argc < 4) TEST_FAIL("usage: %s MODE LAUNCHER AGENT", argv[0]);
  g_launcher = argv[2];
  if (!argv[3][0] || access(argv[3], X_OK) != 0)
    TEST_SKIP("bagua-agent is not built yet (agent target missing); these tests need it");
  if (!etcd_fixture_available())
    TEST_SKIP("%s not found; install the Debian package etcd-server", ETCD_FIXTURE_BIN);
  lu_mkdtemp(g_dir, sizeof(g_dir));
  snprintf(g_out, sizeof(g_out), "%s/launch.out", g_dir);
  int rc;
  if (strcmp(argv[1], "success") == 0)
    rc = mode_success();
  else if (strcmp(argv[1], "two_nodes") == 0)
    rc = mode_two_nodes();
  else if (strcmp(argv[1], "failure") == 0)
    rc = mode_failure();
  else if (strcmp(argv[1], "sigint") == 0)
    rc = mode_sigint();
  else if (strcmp(argv[1], "no_program") == 0)
    rc = mode_no_program();
  else if (strcmp(argv[1], "python") == 0)
    rc = mode_python();
  else if (strcmp(argv[1], "allreduce") == 0 && argc > 5)
    rc = mode_allreduce(argv[4], argv[5]);
  else if (strcmp(argv[1], "sigint_elastic") == 0)
    rc = mode_sigint_elastic(argc > 6 ? argv[6] : NULL);
  else
    TEST_FAIL("unknown mode %s", argv[1]);
  lu_rmtree(g_dir);
  return rc;
}
