/*
 * The bagua-launch binary on bad input and on the informational flags.
 *
 *   test_launch_cli golden LAUNCHER CASES GOLDEN_DIR   (working directory: the INI folder)
 *   test_launch_cli info|missing_agent|dry_run|dry_run_secret|unreachable_refused|
 *                   unreachable_silent LAUNCHER FAKE_AGENT
 *
 * "golden" runs every case of cases.txt whose golden exit status is not 0 through the binary
 * and checks the exit status, that the last line of its output is the golden message, and
 * that nothing was left behind: every process a run starts inherits a unique marker variable,
 * and none may exist once bagua-launch has exited; no private etcd directory was created.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "launch.h"
#include "launch_util.h"
#include "test.h"

static const char *g_launcher, *g_fake;
static char g_out[256], g_marker[128];

/* Environment for one run: the launcher's variables unset, INFO logs on, a unique marker. */
static void base_env(char **env, int *n) {
  static char unset[LS__COUNT][64];
  *n = 0;
  for (int s = 0; s < LS__COUNT; s++) {
    const bagua__launch_desc_t *d = bagua__launch_desc((bagua__launch_setting_t)s);
    if (!d->env) continue;
    snprintf(unset[s], sizeof(unset[s]), "-%s", d->env);
    env[(*n)++] = unset[s];
  }
  env[(*n)++] = "BAGUA_DEBUG=INFO";
  env[(*n)++] = "BAGUA_DEBUG_SUBSYS=LAUNCH";
  char unique[64];
  lu_unique("cli", unique, sizeof(unique));
  snprintf(g_marker, sizeof(g_marker), "BAGUA_TEST_MARKER=%s", unique);
  env[(*n)++] = g_marker;
}

/* Runs bagua-launch with `args` (NULL-terminated) and extra env; returns the exit status and
 * the output (caller frees). */
static int run(char *const *args, char *const *extra_env, int timeout_ms, char **output) {
  char *argv[64], *env[64];
  int n = 0, ne = 0;
  argv[n++] = (char *)g_launcher;
  for (int i = 0; args[i]; i++) argv[n++] = args[i];
  argv[n] = NULL;
  base_env(env, &ne);
  for (int i = 0; extra_env && extra_env[i]; i++) env[ne++] = extra_env[i];
  env[ne] = NULL;
  unlink(g_out);
  int rc = lu_run(argv, env, g_out, timeout_ms);
  *output = lu_read(g_out);
  if (!*output) *output = strdup("");
  return rc;
}

/* Nothing a run started may outlive it, and no private etcd directory may have been made. */
static void assert_nothing_left(const char *output) {
  if (!lu_wait_no_marked(g_marker, 5000)) TEST_FAIL("processes of the run are still alive");
  if (strstr(output, "/tmp/bagua-launch-"))
    TEST_FAIL("a private etcd directory was created:\n%s", output);
  if (strstr(output, "FAKE-AGENT")) TEST_FAIL("an agent was started:\n%s", output);
}

static void trim(char **s) {
  while (**s == ' ' || **s == '\t') (*s)++;
  size_t n = strlen(*s);
  while (n > 0 && ((*s)[n - 1] == ' ' || (*s)[n - 1] == '\t' || (*s)[n - 1] == '\n'))
    (*s)[--n] = '\0';
}

static int golden(const char *cases, const char *dir) {
  FILE *f = fopen(cases, "r");
  if (!f) TEST_FAIL("cannot open %s", cases);
  char *line = NULL;
  size_t cap = 0;
  int nrun = 0, nfail = 0;
  while (getline(&line, &cap, f) >= 0) {
    char *p = line;
    trim(&p);
    if (!*p || *p == '#') continue;
    char *bar1 = strchr(p, '|'), *bar2 = bar1 ? strchr(bar1 + 1, '|') : NULL;
    if (!bar2) TEST_FAIL("malformed case line: %s", p);
    *bar1 = *bar2 = '\0';
    char *name = p;
    trim(&name);
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s.txt", dir, name);
    char *want = lu_read(path);
    if (!want) TEST_FAIL("missing golden file %s", path);
    int want_rc = atoi(want + 5);
    if (want_rc == 0) {
      free(want);
      continue;
    }
    bagua__launch_argv_t env = {0}, words = {0};
    char serr[128];
    if (bagua__launch_split_words(bar1 + 1, &env, serr, sizeof(serr)) != 0 ||
        bagua__launch_split_words(bar2 + 1, &words, serr, sizeof(serr)) != 0)
      TEST_FAIL("case %s: %s", name, serr);
    char *out = NULL;
    int rc = run(words.v ? words.v : (char *[]){NULL}, env.v, 10000, &out);
    char *want_last = lu_last_line(want), *got_last = lu_last_line(out);
    nrun++;
    if (rc != want_rc || strcmp(want_last, got_last) != 0) {
      nfail++;
      fprintf(stderr, "FAIL case %s: exit %d (want %d)\n  want: %s\n  got:  %s\n", name, rc,
              want_rc, want_last, got_last);
    }
    assert_nothing_left(out);
    free(want_last);
    free(got_last);
    free(out);
    free(want);
    bagua__launch_argv_free(&env);
    bagua__launch_argv_free(&words);
  }
  free(line);
  fclose(f);
  printf("%d error case(s) through the binary, %d failed\n", nrun, nfail);
  ASSERT_GT(nrun, 20);
  return nfail ? 1 : 0;
}

static void expect(int cond, const char *what, const char *out) {
  if (!cond) TEST_FAIL("%s; output:\n%s", what, out);
}

static int info(void) {
  char *out;
  int rc = run((char *[]){"--help", NULL}, NULL, 10000, &out);
  expect(rc == 0 && strstr(out, "Usage: bagua-launch [options] PROGRAM"), "--help", out);
  free(out);
  rc = run((char *[]){"--version", NULL}, NULL, 10000, &out);
  expect(rc == 0 && strncmp(out, "bagua-launch ", 13) == 0, "--version", out);
  free(out);
  /* --print-params works even with a bad value in the environment, and shows it. */
  rc = run((char *[]){"--print-params", NULL}, (char *[]){"BAGUA_MAX_RESTARTS=x", NULL}, 10000,
           &out);
  expect(rc == 0 && strstr(out, "BAGUA_RDZV_ENDPOINT") && strstr(out, "(invalid)"),
         "--print-params", out);
  assert_nothing_left(out);
  free(out);
  return 0;
}

static int missing_agent(void) {
  char *out;
  int rc = run((char *[]){"--agent", "/nonexistent/bagua-agent", "prog", NULL}, NULL, 10000, &out);
  char *last = lu_last_line(out);
  expect(rc == 2, "exit 2", out);
  ASSERT_STREQ(last,
               "bagua-launch: cannot run agent /nonexistent/bagua-agent: No such file or "
               "directory; accepted: --agent PATH");
  assert_nothing_left(out);
  free(last);
  free(out);
  return 0;
}

static int dry_run(void) {
  char *out;
  int rc = run((char *[]){"--dry-run", "--job-id", "dry", "--agent", (char *)g_fake, "--hosts",
                          "nodeA:2,localhost", "--remote-cmd", "ip netns exec {host}",
                          "--nproc-per-node", "3", "prog", "a b", NULL},
               (char *[]){"BAGUA_ELASTIC_MODE=in-process", NULL}, 10000, &out);
  expect(rc == 0, "exit 0", out);
  expect(strstr(out, "\nip netns exec nodeA env BAGUA_") != NULL,
         "the remote command wraps env and the agent", out);
  /* Registry settings of the launcher's environment travel to remote agents. */
  expect(strstr(out, " BAGUA_DEBUG=INFO ") && strstr(out, " BAGUA_ETCD_TIMEOUT_MS=5000 "),
         "BAGUA_* settings are forwarded", out);
  expect(strstr(out, "--nproc-per-node 2 --node-id nodeA ") != NULL, "nodeA gets 2 workers", out);
  expect(strstr(out, "--nproc-per-node 3 --node-id localhost ") != NULL,
         "localhost gets --nproc-per-node", out);
  expect(strstr(out, "-- prog 'a b'") != NULL, "the program follows --", out);
  /* The elastic mode is an agent flag for local and remote agents alike, never an env word. */
  const char *em = strstr(out, "--elastic-mode in-process -- prog");
  expect(em && strstr(em + 1, "--elastic-mode in-process -- prog"),
         "both agents get --elastic-mode from the environment", out);
  expect(strstr(out, "BAGUA_ELASTIC_MODE=") == NULL, "BAGUA_ELASTIC_MODE is not forwarded", out);
  assert_nothing_left(out);
  free(out);

  /* ssh gets "--" before the destination, and the -x and [env] values travel on the
   * agent's stdin (--env-stdin), named but not shown on any command line. */
  rc = run((char *[]){"--dry-run", "--job-id", "dry", "--agent", "/opt/bagua-agent", "--hosts",
                      "nodeA:1", "--remote-cmd", "ssh -p 2222 -o BatchMode=yes {host}", "-x",
                      "TOKEN=s3cr3t-value", "prog", NULL},
           NULL, 10000, &out);
  expect(rc == 0, "exit 0", out);
  expect(strstr(out, "\nssh -p 2222 -o BatchMode=yes -- nodeA 'env ") != NULL,
         "-- before the ssh destination, after the options and their arguments", out);
  expect(strstr(out, "/opt/bagua-agent --env-stdin --rdzv-endpoint") != NULL,
         "the remote agent reads its variables from stdin", out);
  expect(strstr(out, ";   its stdin (--env-stdin): TOKEN\n") != NULL,
         "the dry run names the variables on stdin", out);
  const char *cmds = strstr(out, "; agent commands");
  expect(cmds && !strstr(cmds, "s3cr3t-value"), "no agent command shows the value", out);
  free(out);
  return 0;
}

/*
 * --dry-run with the job secret, a registry secret (common/params.def), in the environment,
 * then given again with -x NAME=VALUE (which beats the environment): no value is printed, in
 * the [env] section or in any agent command; the remote agent's command names the variable
 * among those it gets on its stdin.
 */
static int dry_run_secret(void) {
  static const char env_value[] =
      "00112233445566778899aabbccddeeff0123456789abcdef0123456789abcdef";
  static const char x_value[] = "ffeeddccbbaa99887766554433221100fedcba9876543210fedcba9876543210";
  char entry[96], xarg[96], *out;
  snprintf(entry, sizeof(entry), "BAGUA_JOB_SECRET=%s", env_value);
  snprintf(xarg, sizeof(xarg), "BAGUA_JOB_SECRET=%s", x_value);
  int rc = run(
      (char *[]){"--dry-run", "--job-id", "dry", "--agent", "/opt/bagua-agent", "--hosts",
                 "nodeA:1,localhost", "--remote-cmd", "ssh -o BatchMode=yes {host}", "prog", NULL},
      (char *[]){entry, NULL}, 10000, &out);
  expect(rc == 0, "exit 0", out);
  expect(strstr(out, env_value) == NULL, "the dry run does not show the job secret", out);
  expect(strstr(out, "/opt/bagua-agent --env-stdin --rdzv-endpoint") != NULL,
         "the remote agent reads its stdin", out);
  expect(strstr(out, ";   its stdin (--env-stdin): BAGUA_JOB_SECRET\n") != NULL,
         "the job secret is named among the variables on stdin", out);
  assert_nothing_left(out);
  free(out);

  rc = run((char *[]){"--dry-run", "--job-id", "dry", "--agent", "/opt/bagua-agent", "--hosts",
                      "nodeA:1", "--remote-cmd", "ssh -o BatchMode=yes {host}", "-x", xarg, "prog",
                      NULL},
           (char *[]){entry, NULL}, 10000, &out);
  expect(rc == 0, "exit 0", out);
  expect(strstr(out, env_value) == NULL && strstr(out, x_value) == NULL,
         "the dry run shows neither value of the job secret", out);
  expect(
      strstr(out, "\nBAGUA_JOB_SECRET   = <secret, 64 characters>      ; -x NAME=VALUE\n") != NULL,
      "the [env] section masks the -x value", out);
  expect(strstr(out, ";   its stdin (--env-stdin): BAGUA_JOB_SECRET\n") != NULL,
         "the -x value travels on stdin, once", out);
  assert_nothing_left(out);
  free(out);
  return 0;
}

/* A port nothing listens on (it was free a moment ago). */
static int closed_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof(a);
  bind(fd, (struct sockaddr *)&a, sizeof(a));
  getsockname(fd, (struct sockaddr *)&a, &len);
  close(fd);
  return ntohs(a.sin_port);
}

static int unreachable(int silent) {
  char ep[64], want[160];
  int lfd = -1, port;
  if (silent) {
    /* Accepts TCP connections (the kernel's backlog) but never answers. */
    lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    ASSERT_EQ(bind(lfd, (struct sockaddr *)&a, sizeof(a)), 0);
    ASSERT_EQ(listen(lfd, 16), 0);
    getsockname(lfd, (struct sockaddr *)&a, &len);
    port = ntohs(a.sin_port);
  } else {
    port = closed_port();
  }
  snprintf(ep, sizeof(ep), "127.0.0.1:%d", port);
  snprintf(want, sizeof(want), "bagua-launch: cannot reach the rendezvous endpoint %s (", ep);
  long long t0 = lu_now_ms();
  char *out;
  /* An etcd user's command: the backend is named, so no private etcd stands in (a one-node job
   * without one falls back to a private etcd: test_launch_torchrun's endpoint_unanswered). */
  int rc = run((char *[]){"--rdzv-endpoint", ep, "--rdzv-backend", "etcd", "--etcd-timeout-ms",
                          "1000", "--agent", (char *)g_fake, "--", "/bin/true", NULL},
               NULL, 20000, &out);
  long long took = lu_now_ms() - t0;
  char *last = lu_last_line(out);
  expect(rc == 3, "exit 3", out);
  expect(strncmp(last, want, strlen(want)) == 0, "the message names the endpoint", out);
  expect(strstr(last, silent ? "BAGUA_ERR_TIMEOUT" : "BAGUA_ERR_CURL") != NULL,
         "the message says why", out);
  /* The etcd timeout is 1 s; process start-up and the exit add little. */
  if (took > 4000) TEST_FAIL("took %lld ms to fail", took);
  assert_nothing_left(out);
  printf("failed in %lld ms: %s\n", took, last);
  free(last);
  free(out);
  if (lfd >= 0) close(lfd);
  return 0;
}

int main(int argc, char **argv) {
  /* Run inside a Slurm allocation (a CI runner may be), the launcher would start agents
   * through srun: these tests start them locally. */
  unsetenv("SLURM_JOB_ID");
  unsetenv("SLURM_JOB_NODELIST");
  if (argc < 3) TEST_FAIL("usage: %s MODE LAUNCHER ...", argv[0]);
  const char *mode = argv[1];
  g_launcher = argv[2];
  g_fake = argc > 3 ? argv[3] : "";
  lu_unique("/tmp/bagua-lt-cli-out", g_out, sizeof(g_out));
  int rc;
  if (strcmp(mode, "golden") == 0 && argc > 4)
    rc = golden(argv[3], argv[4]);
  else if (strcmp(mode, "info") == 0)
    rc = info();
  else if (strcmp(mode, "missing_agent") == 0)
    rc = missing_agent();
  else if (strcmp(mode, "dry_run") == 0)
    rc = dry_run();
  else if (strcmp(mode, "dry_run_secret") == 0)
    rc = dry_run_secret();
  else if (strcmp(mode, "unreachable_refused") == 0)
    rc = unreachable(0);
  else if (strcmp(mode, "unreachable_silent") == 0)
    rc = unreachable(1);
  else
    TEST_FAIL("unknown mode %s", mode);
  unlink(g_out);
  return rc;
}
