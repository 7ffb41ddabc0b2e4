/*
 * bagua-launch starts the agents of many hosts with a bounded fan-out (--fanout): at most N
 * agents are starting (started, their node not yet registered in etcd) at any time. Every
 * "host" is this machine, reached through a stand-in remote command.
 *
 *   test_launch_fanout MODE LAUNCHER AGENT
 *
 * Modes:
 *   many_hosts: 48 hosts, --fanout 8, the real bagua-agent and a real etcd (the fixture). The
 *     stand-in remote command is this binary ("remote" below): it writes a start key into
 *     etcd and then runs the agent. etcd's revisions order every start and every registration
 *     (nodes/<node>), so the test replays them and checks that no more than 8 agents were ever
 *     started but unregistered, without comparing clocks; the launcher's INFO lines say the
 *     same from its side. The job forms one round of all 48 nodes and exits 0.
 *   signal: 6 hosts whose remote commands never start an agent, --fanout 2: SIGTERM while
 *     the first 2 are starting stops them, starts no more, and nothing is left.
 *   stuck: 4 such hosts, --fanout 1, --rdzv-timeout 1: each start stops counting after 1 s
 *     (the start timeout), so the next host starts; all 4 are started one by one, then SIGINT.
 *   start_failure: 6 hosts, --fanout 2, the second host's remote command fails as ssh does: a
 *     job that needs it fails at once (exit 3, ssh's words) and starts no more; an elastic one
 *     goes on, and the slot it freed starts the next host.
 *   bad_value: --fanout 0, -1, x and 65537, and BAGUA_LAUNCH_FANOUT=0, exit 2 naming the
 *     setting and the accepted range, and start nothing.
 *
 * many_hosts skips (77) without the agent; every mode skips without /usr/bin/etcd.
 *
 *   test_launch_fanout remote ENDPOINT DIR HOST CMD...
 *
 * puts the key DIR HOST ("1") into the etcd at ENDPOINT, then executes CMD.
 */
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/etcd/etcd.h"
#include "etcd_fixture.h"
#include "launch_util.h"
#include "test.h"

#define MANY_HOSTS 48
#define MANY_FANOUT 8

static const char *g_launcher;
static char g_dir[128], g_out[256], g_marker[128];

static pid_t start(char *const *args, char *const *env, int nenv) {
  return lu_start_launcher(g_launcher, NULL, args, "fanout", g_marker, sizeof(g_marker), env, nenv,
                           g_out);
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
    expect(lu_now_ms() < end, what);
    usleep(20000);
  }
}

static void write_file(const char *path, const char *text, int exec) {
  FILE *f = fopen(path, "w");
  if (!f) TEST_FAIL("cannot write %s", path);
  fputs(text, f);
  fclose(f);
  if (exec) chmod(path, 0755);
}

static void assert_clean(void) {
  if (!lu_wait_no_marked(g_marker, 20000)) {
    lu_dump(g_out);
    TEST_FAIL("processes started by the run are still alive");
  }
}

/*
 * The launcher's INFO line per start ("agent 3/48 started for host fan02 (node fan02, pid
 * N): 3 starting, fanout 8"): how many there are, and the most agents starting at once.
 */
static int starts_logged(int *max_starting, int fanout) {
  char *t = lu_read(g_out), tail[64];
  int n = 0;
  *max_starting = 0;
  snprintf(tail, sizeof(tail), " starting, fanout %d", fanout);
  for (char *p = t; p && (p = strstr(p, tail)); p++, n++) {
    char *q = p;
    while (q > t && q[-1] >= '0' && q[-1] <= '9') q--;
    int k = atoi(q);
    if (k > *max_starting) *max_starting = k;
  }
  free(t);
  return n;
}

/* ---- many_hosts: etcd's history of starts and registrations ---- */

typedef struct {
  pthread_mutex_t mu;
  char start_dir[128], nodes_dir[128];
  /* In revision order: +1 a start (the stand-in ran), -1 a node's first registration. */
  int steps[4 * MANY_HOSTS];
  char names[4 * MANY_HOSTS][32];
  int n, done;
} history_t;

static int on_event(void *arg, const bagua__etcd_event_t *ev) {
  history_t *h = arg;
  if (ev->type != BAGUA__ETCD_EVENT_PUT) return 0;
  pthread_mutex_lock(&h->mu);
  size_t sl = strlen(h->start_dir), nl = strlen(h->nodes_dir);
  int step = 0;
  const char *name = NULL;
  if (strncmp(ev->key, h->start_dir, sl) == 0) {
    step = 1;
    name = ev->key + sl;
    if (strcmp(name, "~end") == 0) h->done = 1;
  } else if (strncmp(ev->key, h->nodes_dir, nl) == 0 && ev->version == 1) {
    step = -1; /* later puts of a record are no registration */
    name = ev->key + nl;
  }
  if (step && !h->done && h->n < (int)(sizeof(h->steps) / sizeof(h->steps[0]))) {
    h->steps[h->n] = step;
    snprintf(h->names[h->n], sizeof(h->names[0]), "%s", name);
    h->n++;
  }
  pthread_mutex_unlock(&h->mu);
  return 0;
}

/* The most agents that were started but not registered at one revision, and how many started
 * and registered in all. */
static int max_unregistered(history_t *h, int *starts, int *regs) {
  char pending[MANY_HOSTS][32];
  int npending = 0, max = 0;
  *starts = *regs = 0;
  for (int i = 0; i < h->n; i++) {
    if (h->steps[i] > 0) {
      (*starts)++;
      if (npending < MANY_HOSTS)
        snprintf(pending[npending++], sizeof(pending[0]), "%s", h->names[i]);
      if (npending > max) max = npending;
      continue;
    }
    (*regs)++;
    for (int k = 0; k < npending; k++)
      if (strcmp(pending[k], h->names[i]) == 0) {
        memmove(pending[k], pending[k + 1], sizeof(pending[0]) * (size_t)(npending - k - 1));
        npending--;
        break;
      }
  }
  return max;
}

static int mode_many_hosts(const char *agent) {
  if (!agent[0] || access(agent, X_OK) != 0)
    TEST_SKIP("bagua-agent is not built yet (agent target missing); this mode needs it");
  etcd_fixture_t fx;
  etcd_fixture_start(&fx);
  char job[64], self[PATH_MAX], hosts[MANY_HOSTS * 8], tmpl[PATH_MAX + 256], outf[256], prog[512];
  lu_unique("fan", job, sizeof(job));
  ssize_t sn = readlink("/proc/self/exe", self, sizeof(self) - 1);
  expect(sn > 0, "this test's own path");
  self[sn] = '\0';

  static history_t h = {.mu = PTHREAD_MUTEX_INITIALIZER};
  snprintf(h.start_dir, sizeof(h.start_dir), "/fanout-test/%s/start/", job);
  snprintf(h.nodes_dir, sizeof(h.nodes_dir), "/bagua/%s/nodes/", job);
  bagua__etcd_t *c;
  ASSERT_OK(bagua__etcd_create(fx.host_port, 5000, &c));
  bagua__etcd_kv_t kv;
  int found;
  int64_t rev0 = 0;
  ASSERT_OK(bagua__etcd_get(c, "/fanout-test/none", &kv, &found, &rev0));
  bagua__etcd_kv_clear(&kv);
  bagua__etcd_span_t spans[2] = {{h.start_dir, NULL, 1}, {h.nodes_dir, NULL, 1}};
  bagua__etcd_watch_opts_t wo = {.start_revision = rev0 + 1};
  bagua__etcd_watch_t *w;
  ASSERT_OK(bagua__etcd_watch_ranges(c, spans, 2, &wo, on_event, &h, &w));

  size_t o = 0;
  for (int i = 0; i < MANY_HOSTS; i++)
    o += (size_t)snprintf(hosts + o, sizeof(hosts) - o, "%sfan%02d", i ? "," : "", i);
  snprintf(tmpl, sizeof(tmpl), "%s remote %s %s {host} {cmd}", self, fx.host_port, h.start_dir);
  snprintf(outf, sizeof(outf), "%s/workers.txt", g_dir);
  snprintf(prog, sizeof(prog), "echo \"W ws=$WORLD_SIZE node=$BAGUA_NODE_ID.\" >> %s", outf);
  char fanout[16];
  snprintf(fanout, sizeof(fanout), "%d", MANY_FANOUT);
  long long t0 = lu_now_ms();
  pid_t pid = start((char *[]){"--rdzv-endpoint",
                               fx.host_port,
                               "--job-id",
                               job,
                               "--hosts",
                               hosts,
                               "--fanout",
                               fanout,
                               "--remote-cmd",
                               tmpl,
                               "--agent",
                               (char *)agent,
                               "--last-call-ms",
                               "200",
                               "--settle-ms",
                               "200",
                               "--grace-ms",
                               "2000",
                               "--",
                               "sh",
                               "-c",
                               prog,
                               NULL},
                    NULL, 0);
  int rc = lu_wait(pid, 80000);
  printf("%d hosts, fanout %d: the job took %lld ms\n", MANY_HOSTS, MANY_FANOUT, lu_now_ms() - t0);
  expect(rc == 0, "the job of 48 hosts succeeded (exit 0)");

  /* Every worker ran in the one round of all 48 nodes. */
  char want[64];
  snprintf(want, sizeof(want), "ws=%d node=", MANY_HOSTS);
  if (count(outf, want) != MANY_HOSTS) lu_dump(outf);
  expect(count(outf, want) == MANY_HOSTS, "48 workers in a world of 48");
  for (int i = 0; i < MANY_HOSTS; i++) {
    snprintf(want, sizeof(want), "node=fan%02d.", i);
    expect(count(outf, want) == 1, "one worker per host");
  }

  /* The launcher's view: one INFO line per start, never more than 8 starting, and the first
   * 8 all started before any registration could be read. */
  int max_logged = 0, nlogged = starts_logged(&max_logged, MANY_FANOUT);
  printf("launcher: %d starts logged, at most %d starting\n", nlogged, max_logged);
  expect(nlogged == MANY_HOSTS, "one INFO line per agent start");
  expect(max_logged == MANY_FANOUT, "the launcher had 8 agents starting, and never more");

  /* etcd's view: the sentinel marks the end of the history. */
  char end_key[160];
  snprintf(end_key, sizeof(end_key), "%s~end", h.start_dir);
  ASSERT_OK(bagua__etcd_put(c, end_key, "1", 1, 0, NULL, NULL));
  for (long long end = lu_now_ms() + 10000;;) {
    pthread_mutex_lock(&h.mu);
    int done = h.done;
    pthread_mutex_unlock(&h.mu);
    if (done) break;
    expect(lu_now_ms() < end, "the watch delivered the run's history");
    usleep(10000);
  }
  bagua__etcd_watch_stop(w);
  int starts, regs, max = max_unregistered(&h, &starts, &regs);
  printf("etcd: %d starts, %d registrations, at most %d started but unregistered\n", starts, regs,
         max);
  expect(starts == MANY_HOSTS && regs == MANY_HOSTS, "48 starts and 48 registrations in etcd");
  expect(max <= MANY_FANOUT, "never more than 8 agents started but unregistered");
  expect(max >= 2, "agents started in parallel");
  bagua__etcd_destroy(c);
  assert_clean();
  etcd_fixture_stop(&fx);
  return 0;
}

/* ---- hosts whose remote command never starts an agent ---- */

/* A stand-in remote command that logs its host and then waits (never registers); the host
 * `fail` (may be NULL) fails as ssh does instead. Returns the --remote-cmd template. */
static const char *standin(const char *fail) {
  static char tmpl[300];
  char path[256], text[1024];
  snprintf(path, sizeof(path), "%s/stand-in", g_dir);
  snprintf(text, sizeof(text),
           "#!/bin/sh\necho \"START $1\" >> %s/starts.log\n"
           "if [ \"$1\" = \"%s\" ]; then\n"
           "  echo \"ssh: Could not resolve hostname $1: Name or service not known\" >&2\n"
           "  exit 255\nfi\nexec sleep 60\n",
           g_dir, fail ? fail : "");
  write_file(path, text, 1);
  snprintf(tmpl, sizeof(tmpl), "%s {host}", path);
  return tmpl;
}

/* The fixture's etcd as the endpoint: the hosts never register, nothing else is needed. */
static void hanging_args(char **args, int *n, const etcd_fixture_t *fx, const char *hosts,
                         const char *fanout, const char *tmpl) {
  char *fixed[] = {"--rdzv-endpoint", (char *)fx->host_port, "--hosts",      (char *)hosts,
                   "--fanout",        (char *)fanout,        "--remote-cmd", (char *)tmpl,
                   "--agent",         "/bin/false",          "--grace-ms",   "500"};
  *n = 0;
  for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++) args[(*n)++] = fixed[i];
}

static void finish_args(char **args, int n) {
  args[n++] = "--";
  args[n++] = "true";
  args[n] = NULL;
}

static int mode_signal(void) {
  etcd_fixture_t fx;
  etcd_fixture_start(&fx);
  char *args[24], log[256];
  int n;
  snprintf(log, sizeof(log), "%s/starts.log", g_dir);
  hanging_args(args, &n, &fx, "fan0,fan1,fan2,fan3,fan4,fan5", "2", standin(NULL));
  finish_args(args, n);
  pid_t pid = start(args, NULL, 0);
  wait_count(log, "START ", 2, 20000, "the first 2 hosts started");
  /* Nothing registers and nothing exits: the other 4 wait (well within the start timeout). */
  usleep(700000);
  expect(count(log, "START ") == 2, "no more than --fanout 2 hosts started");
  kill(pid, SIGTERM);
  int rc = lu_wait(pid, 20000);
  expect(rc == 143, "SIGTERM: exit 143");
  expect(count(g_out, "SIGTERM received: stopping 2 agent(s), 4 more will not start") == 1,
         "the stop names the agents not started");
  expect(count(log, "START ") == 2 && count(g_out, " starting, fanout 2") == 2,
         "no agent started after the signal");
  assert_clean();
  etcd_fixture_stop(&fx);
  return 0;
}

static int mode_stuck(void) {
  etcd_fixture_t fx;
  etcd_fixture_start(&fx);
  char *args[24], log[256];
  int n;
  snprintf(log, sizeof(log), "%s/starts.log", g_dir);
  hanging_args(args, &n, &fx, "fan0,fan1,fan2,fan3", "1", standin(NULL));
  args[n++] = "--rdzv-timeout";
  args[n++] = "1";
  finish_args(args, n);
  long long t0 = lu_now_ms();
  pid_t pid = start(args, NULL, 0);
  wait_count(log, "START fan3", 1, 20000, "every host started, one after the other");
  long long took = lu_now_ms() - t0;
  printf("4 stuck hosts, fanout 1, start timeout 1 s: the 4th started after %lld ms\n", took);
  expect(took >= 2900, "each start counted for its timeout (1 s) first");
  wait_count(g_out, "has not registered within 1 s; the next agents start without waiting", 3, 5000,
             "each timeout that let the next host start was reported");
  int max = 0;
  expect(starts_logged(&max, 1) == 4 && max == 1, "one agent starting at a time");
  kill(pid, SIGINT);
  expect(lu_wait(pid, 20000) == 130, "SIGINT: exit 130");
  expect(count(g_out, "SIGINT received: stopping 4 agent(s) (") == 1,
         "the agents past their start timeout were still supervised");
  assert_clean();
  etcd_fixture_stop(&fx);
  return 0;
}

static int mode_start_failure(void) {
  etcd_fixture_t fx;
  etcd_fixture_start(&fx);
  char *args[24], log[256];
  int n;
  snprintf(log, sizeof(log), "%s/starts.log", g_dir);
  const char *tmpl = standin("fan1");
  /* A job that needs every host fails at once, and starts no more. */
  hanging_args(args, &n, &fx, "fan0,fan1,fan2,fan3,fan4,fan5", "2", tmpl);
  finish_args(args, n);
  int rc = lu_wait(start(args, NULL, 0), 30000);
  expect(rc == 3, "a host the job needs could not start it: exit 3");
  expect(count(g_out,
               "the agent for host fan1 could not be started (exit code 255: ssh: Could not "
               "resolve hostname fan1: Name or service not known); stopping the job") == 1,
         "ssh's words are reported");
  /* fan0's stand-in may be stopped before its shell writes its line (a loaded machine): only
   * the hosts after the failure must be missing. */
  expect(count(log, "START fan1") == 1, "the failing host was started");
  int later = 0;
  for (int h = 2; h < 6; h++) {
    char line[32];
    snprintf(line, sizeof(line), "START fan%d", h);
    later += count(log, line);
  }
  expect(later == 0 && count(log, "START ") <= 2, "no host started after the failure");
  assert_clean();

  /* An elastic job goes on without it, and the freed slot starts the next host. */
  unlink(log);
  unlink(g_out);
  hanging_args(args, &n, &fx, "fan0,fan1,fan2,fan3,fan4,fan5", "2", tmpl);
  args[n++] = "--nnodes";
  args[n++] = "1:6";
  finish_args(args, n);
  pid_t pid = start(args, NULL, 0);
  wait_count(g_out, "the elastic job goes on without it", 1, 20000, "the elastic job went on");
  wait_count(log, "START fan2", 1, 20000, "the slot fan1 freed started fan2");
  usleep(300000);
  expect(count(log, "START ") == 3, "fan0 and fan2 hold the 2 slots");
  kill(pid, SIGTERM);
  expect(lu_wait(pid, 20000) == 143, "SIGTERM: exit 143");
  assert_clean();
  etcd_fixture_stop(&fx);
  return 0;
}

static int mode_bad_value(void) {
  const char *bad[] = {"0", "-1", "x", "65537"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    unlink(g_out);
    int rc = lu_wait(
        start((char *[]){"--hosts", "fan0,fan1", "--fanout", (char *)bad[i], "--", "true", NULL},
              NULL, 0),
        10000);
    char *out = lu_read(g_out), *last = lu_last_line(out ? out : "");
    printf("--fanout %s: exit %d: %s\n", bad[i], rc, last);
    expect(rc == 2, "a bad --fanout exits 2");
    expect(strncmp(last, "bagua-launch: --fanout: ", 24) == 0 &&
               strstr(last, "; accepted: an integer in [1, 65536]") != NULL,
           "the message names --fanout and the accepted range");
    free(last);
    free(out);
  }
  unlink(g_out);
  int rc = lu_wait(start((char *[]){"--hosts", "fan0,fan1", "--", "true", NULL},
                         (char *[]){"BAGUA_LAUNCH_FANOUT=0"}, 1),
                   10000);
  expect(rc == 2 && count(g_out,
                          "BAGUA_LAUNCH_FANOUT=0 is out of range; accepted: an integer in "
                          "[1, 65536]") >= 1,
         "a bad BAGUA_LAUNCH_FANOUT exits 2 naming it and the accepted range");
  expect(count(g_out, "started for host") == 0, "nothing was started");
  assert_clean();
  return 0;
}

/* The stand-in remote command of many_hosts. */
static int remote_main(int argc, char **argv) {
  if (argc < 6) {
    fprintf(stderr, "usage: %s remote ENDPOINT DIR HOST CMD...\n", argv[0]);
    return 2;
  }
  bagua__etcd_t *c;
  char key[512];
  snprintf(key, sizeof(key), "%s%s", argv[3], argv[4]);
  if (bagua__etcd_create(argv[2], 5000, &c) != BAGUA_OK) return 255;
  bagua_status_t st = bagua__etcd_put(c, key, "1", 1, 0, NULL, NULL);
  bagua__etcd_destroy(c);
  if (st != BAGUA_OK) return 255;
  execvp(argv[5], argv + 5);
  perror(argv[5]);
  return 127;
}

int main(int argc, char **argv) {
  if (argc >= 2 && strcmp(argv[1], "remote") == 0) return remote_main(argc, argv);
  /* Inside a Slurm allocation the launcher would take its hosts from Slurm's variables. */
  unsetenv("SLURM_JOB_ID");
  unsetenv("SLURM_JOB_NODELIST");
  if (argc < 4) TEST_FAIL("usage: %s MODE LAUNCHER AGENT", argv[0]);
  g_launcher = argv[2];
  if (!etcd_fixture_available())
    TEST_SKIP("%s not found; install the Debian package etcd-server", ETCD_FIXTURE_BIN);
  lu_mkdtemp(g_dir, sizeof(g_dir));
  snprintf(g_out, sizeof(g_out), "%s/launch.out", g_dir);
  int rc;
  if (strcmp(argv[1], "many_hosts") == 0)
    rc = mode_many_hosts(argv[3]);
  else if (strcmp(argv[1], "signal") == 0)
    rc = mode_signal();
  else if (strcmp(argv[1], "stuck") == 0)
    rc = mode_stuck();
  else if (strcmp(argv[1], "start_failure") == 0)
    rc = mode_start_failure();
  else if (strcmp(argv[1], "bad_value") == 0)
    rc = mode_bad_value();
  else
    TEST_FAIL("unknown mode %s", argv[1]);
  /* BAGUA_TEST_VERBOSE=1 prints the launcher's output of a passing run too. */
  if (getenv("BAGUA_TEST_VERBOSE")) lu_dump(g_out);
  lu_rmtree(g_dir);
  return rc;
}
