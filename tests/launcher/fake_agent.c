/*
 * A stand-in for bagua-agent, for the launcher's own tests (test names say "fake"): it honours
 * the agent's command-line contract and exit statuses, talks to etcd the way the launcher
 * expects (nodes/<id>, status with a root cause), and runs its workers locally. It has no
 * rendezvous rounds, restarts or ranks across nodes: RANK is LOCAL_RANK.
 *
 * It prints one line "FAKE-AGENT node=<id> nproc=<n> args: <argv>" so tests can check what the
 * launcher passed.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/etcd/etcd.h"
#include "common/sock.h"

#define MAX_WORKERS 64

static const char *g_endpoint, *g_job, *g_node = "fake-node", *g_nnodes;
static int g_nproc = -1, g_grace_ms = 5000;
static pid_t g_pids[MAX_WORKERS];
static int g_live;

static int usage(const char *what) {
  fprintf(stderr, "fake-agent: %s\n", what);
  return 2;
}

static int64_t wall_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void put_status(bagua__etcd_t *c, const char *json) {
  char key[256];
  bagua__etcd_kv_t cur = {0};
  int found = 0;
  snprintf(key, sizeof(key), "/bagua/%s/status", g_job);
  /* A terminal status is written once: only a "running" record may be replaced. */
  if (bagua__etcd_get(c, key, &cur, &found, NULL) != BAGUA_OK) return;
  if (!found || strstr(cur.value, "\"running\"")) {
    int swapped;
    bagua__etcd_cas(c, key, found ? cur.mod_revision : 0, json, strlen(json), 0, &swapped, NULL,
                    NULL);
  }
  bagua__etcd_kv_clear(&cur);
}

static void stop_workers(int sig) {
  for (int i = 0; i < g_nproc; i++)
    if (g_pids[i] > 0) kill(g_pids[i], sig);
}

/* Waits for every worker, with SIGKILL after the grace period. */
static void drain(void) {
  int64_t deadline = bagua__now_ms() + g_grace_ms;
  int killed = 0;
  while (g_live > 0) {
    int status;
    pid_t p = waitpid(-1, &status, WNOHANG);
    if (p > 0) {
      for (int i = 0; i < g_nproc; i++)
        if (g_pids[i] == p) g_pids[i] = 0, g_live--;
      continue;
    }
    if (p < 0 && errno == ECHILD) break;
    if (!killed && bagua__now_ms() >= deadline) {
      stop_workers(SIGKILL);
      killed = 1;
    }
    struct timespec ts = {0, 5 * 1000000};
    nanosleep(&ts, NULL);
  }
}

/* --env-stdin, as bagua-agent reads it: "NAME=VALUE\0" entries up to end-of-file. */
static int read_env_stdin(void) {
  static char buf[1 << 16];
  size_t n = 0;
  ssize_t r;
  while ((r = read(0, buf + n, sizeof(buf) - 1 - n)) > 0) n += (size_t)r;
  if (r < 0 || (n > 0 && buf[n - 1] != '\0')) return -1;
  for (size_t o = 0, len; o < n; o += len + 1) {
    len = strlen(buf + o);
    char *eq = strchr(buf + o, '=');
    if (!eq || eq == buf + o) return -1;
    *eq = '\0';
    setenv(buf + o, eq + 1, 1);
  }
  return 0;
}

int main(int argc, char **argv) {
  int i = 1;
  for (; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--") == 0) {
      i++;
      break;
    }
    if (a[0] != '-') break;
    if (strcmp(a, "--env-stdin") == 0) {
      if (read_env_stdin() != 0) return usage("--env-stdin: malformed input");
      continue;
    }
    if (i + 1 >= argc) return usage("missing value");
    const char *v = argv[++i];
    if (strcmp(a, "--rdzv-endpoint") == 0)
      g_endpoint = v;
    else if (strcmp(a, "--job-id") == 0)
      g_job = v;
    else if (strcmp(a, "--nnodes") == 0)
      g_nnodes = v;
    else if (strcmp(a, "--nproc-per-node") == 0)
      g_nproc = atoi(v);
    else if (strcmp(a, "--node-id") == 0)
      g_node = v;
    else if (strcmp(a, "--grace-ms") == 0)
      g_grace_ms = atoi(v);
    else if (strcmp(a, "--node-addr") && strcmp(a, "--max-restarts") && strcmp(a, "--lease-ttl") &&
             strcmp(a, "--rdzv-timeout") && strcmp(a, "--last-call-ms") &&
             strcmp(a, "--settle-ms") && strcmp(a, "--log-dir") && strcmp(a, "--elastic-mode"))
      return usage("unknown option");
  }
  if (!g_endpoint || !g_job || !g_nnodes || g_nproc < 1 || g_nproc > MAX_WORKERS || i >= argc)
    return usage("missing required option or program");
  /* The agent's private directory, named as bagua-agent names it. BAGUA_FAKE_LEAVE_DIR=1
   * leaves it behind, as an agent killed with SIGKILL would. */
  char priv[512];
  const char *tmp = getenv("TMPDIR");
  snprintf(priv, sizeof(priv), "%s/bagua-agent.%s.%d.XXXXXX", tmp && tmp[0] ? tmp : "/tmp", g_node,
           (int)getpid());
  if (!mkdtemp(priv)) priv[0] = '\0';
  const char *leave = getenv("BAGUA_FAKE_LEAVE_DIR");
  if (leave && strcmp(leave, "1") == 0) priv[0] = '\0';
  printf("FAKE-AGENT node=%s nproc=%d args:", g_node, g_nproc);
  for (int k = 1; k < argc; k++) printf(" %s", argv[k]);
  printf("\n");
  fflush(stdout);

  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGINT);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGHUP);
  sigaddset(&mask, SIGCHLD);
  sigprocmask(SIG_BLOCK, &mask, NULL);
  int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);

  bagua__etcd_t *etcd = NULL;
  if (bagua__etcd_create(g_endpoint, 5000, &etcd) != BAGUA_OK) return 3;
  char key[256];
  snprintf(key, sizeof(key), "/bagua/%s/nodes/%s", g_job, g_node);
  if (bagua__etcd_put(etcd, key, "{}", 2, 0, NULL, NULL) != BAGUA_OK) {
    bagua__etcd_destroy(etcd);
    return 3;
  }
  put_status(etcd, "{\"state\":\"running\"}");

  pid_t self = getpid();
  for (int r = 0; r < g_nproc; r++) {
    fflush(NULL);
    pid_t p = fork();
    if (p == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != self) _exit(1);
      sigset_t none;
      sigemptyset(&none);
      sigprocmask(SIG_SETMASK, &none, NULL);
      char num[16];
      snprintf(num, sizeof(num), "%d", r);
      setenv("RANK", num, 1);
      setenv("LOCAL_RANK", num, 1);
      setenv("GROUP_RANK", "0", 1);
      snprintf(num, sizeof(num), "%d", g_nproc);
      setenv("WORLD_SIZE", num, 1);
      setenv("LOCAL_WORLD_SIZE", num, 1);
      setenv("BAGUA_JOB_ID", g_job, 1);
      setenv("BAGUA_NODE_ID", g_node, 1);
      setenv("BAGUA_RDZV_ENDPOINT", g_endpoint, 1);
      execvp(argv[i], argv + i);
      _exit(127);
    }
    g_pids[r] = p;
    g_live++;
  }

  int rc = 0;
  while (g_live > 0) {
    struct pollfd pf = {.fd = sfd, .events = POLLIN};
    poll(&pf, 1, 100);
    struct signalfd_siginfo si;
    while (read(sfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
      int sig = (int)si.ssi_signo;
      if (sig == SIGCHLD) continue;
      stop_workers(SIGTERM);
      drain();
      rc = 128 + sig;
      goto out;
    }
    int status;
    pid_t p;
    while ((p = waitpid(-1, &status, WNOHANG)) > 0) {
      int rank = -1;
      for (int k = 0; k < g_nproc; k++)
        if (g_pids[k] == p) rank = k, g_pids[k] = 0, g_live--;
      int failed = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
      if (!failed || rc != 0) continue;
      int sig = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
      rc = sig ? 128 + sig : WEXITSTATUS(status);
      char json[512];
      snprintf(json, sizeof(json),
               "{\"state\":\"failed\",\"exit_code\":%d,\"root_cause\":{\"time_ms\":%lld,"
               "\"node\":\"%s\",\"host\":\"fakehost\",\"rank\":%d,\"%s\":%d,\"round\":1}}",
               rc, (long long)wall_ms(), g_node, rank, sig ? "signal" : "exit_code",
               sig ? sig : rc);
      put_status(etcd, json);
      stop_workers(SIGTERM);
      drain();
      goto out;
    }
  }
  put_status(etcd, "{\"state\":\"succeeded\",\"exit_code\":0}");
out:
  if (priv[0]) rmdir(priv);
  bagua__etcd_destroy(etcd);
  return rc;
}
