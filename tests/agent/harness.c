/* Harness for the agent integration tests (see harness.h). */
#include "etcd_server.h"
#include "harness.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test.h"

#ifndef AGENT_BIN
#error "AGENT_BIN must name the bagua-agent executable"
#endif
#ifndef WORKER_BIN
#error "WORKER_BIN must name the agent_worker executable"
#endif

/* Agents started by this process, so a failed assertion can show what they printed. */
#define MAX_AGENTS 16
static agent_proc_t g_agents[MAX_AGENTS]; /* copies: node and output paths */
static int g_nagents;
static int g_clean;
/* The exit handler runs after the test function's frame (which holds the harness_t) is gone,
 * so everything it needs is copied here by value, and it only ever deletes a directory whose
 * name it created itself. */
#define DIR_PREFIX "/tmp/bagua-agent-test-"
static char g_dir[256];
static etcd_fixture_t g_fx;
static int g_have_fx;

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

static void dump_file(const char *label, const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return;
  fprintf(stderr, "----- %s (%s)\n", label, path);
  char line[1024];
  while (fgets(line, sizeof(line), f)) fputs(line, stderr);
  fclose(f);
}

void h_dump(const agent_proc_t *aps, int n) {
  for (int i = 0; i < n; i++) {
    char label[128];
    snprintf(label, sizeof(label), "agent %s stdout", aps[i].node);
    dump_file(label, aps[i].out_path);
    snprintf(label, sizeof(label), "agent %s stderr", aps[i].node);
    dump_file(label, aps[i].err_path);
  }
}

static void at_exit(void) {
  if (!g_clean) {
    /* A failed assertion: the agents' output explains it. They are still alive (they die
     * with this process) and their files are still there. */
    h_dump(g_agents, g_nagents);
    if (g_have_fx) etcd_fixture_dump_log(&g_fx, 2000);
  }
  if (strncmp(g_dir, DIR_PREFIX, strlen(DIR_PREFIX)) == 0 && strlen(g_dir) > strlen(DIR_PREFIX) &&
      strstr(g_dir, "..") == NULL)
    bagua__etcd_local_remove_tree(g_dir);
  g_dir[0] = '\0';
}

void h_init(harness_t *h, const char *job, int with_etcd) {
  memset(h, 0, sizeof(*h));
  snprintf(h->job, sizeof(h->job), "%s", job);
  snprintf(h->dir, sizeof(h->dir), DIR_PREFIX "XXXXXX");
  if (!mkdtemp(h->dir)) TEST_FAIL("mkdtemp: %s", strerror(errno));
  snprintf(g_dir, sizeof(g_dir), "%s", h->dir);
  atexit(at_exit);
  snprintf(h->wdir, sizeof(h->wdir), "%s/w", h->dir);
  if (mkdir(h->wdir, 0755) != 0) TEST_FAIL("mkdir %s: %s", h->wdir, strerror(errno));
  if (with_etcd) {
    etcd_fixture_start(&h->fx);
    h->have_etcd = 1;
    g_fx = h->fx;
    g_have_fx = 1;
    if (bagua__etcd_create(h->fx.endpoint, 5000, &h->c) != BAGUA_OK)
      TEST_FAIL("cannot create an etcd client");
  }
  /* The agents make their private directories (elastic marks) under TMPDIR: inside this
   * test's directory, what an agent the test SIGKILLs leaves behind is removed with it. Set
   * after etcd started, so its data directory stays where the fixture put it. */
  setenv("TMPDIR", h->dir, 1);
}

void h_fini(harness_t *h) {
  g_clean = 1;
  bagua__etcd_destroy(h->c);
  h->c = NULL;
  if (h->have_etcd) etcd_fixture_stop(&h->fx);
  h->have_etcd = 0;
  g_have_fx = 0;
}

void h_spawn_cmd(harness_t *h, agent_proc_t *ap, const char *node, const char *endpoint,
                 const char *const *args, const char *const *cmd) {
  h_spawn_files(h, ap, node, node, endpoint, args, cmd);
}

void h_spawn_files(harness_t *h, agent_proc_t *ap, const char *node, const char *files,
                   const char *endpoint, const char *const *args, const char *const *cmd) {
  memset(ap, 0, sizeof(*ap));
  snprintf(ap->node, sizeof(ap->node), "%s", node);
  snprintf(ap->out_path, sizeof(ap->out_path), "%s/%s.out", h->dir, files);
  snprintf(ap->err_path, sizeof(ap->err_path), "%s/%s.err", h->dir, files);
  const char *argv[96];
  int n = 0;
  argv[n++] = AGENT_BIN;
  argv[n++] = "--rdzv-endpoint";
  argv[n++] = endpoint ? endpoint : h->fx.host_port;
  argv[n++] = "--job-id";
  argv[n++] = h->job;
  argv[n++] = "--node-id";
  argv[n++] = node;
  for (int i = 0; args && args[i] && n < 80; i++) argv[n++] = args[i];
  if (cmd) argv[n++] = "--";
  for (int i = 0; cmd && cmd[i] && n < 94; i++) argv[n++] = cmd[i];
  argv[n] = NULL;
  if (g_nagents < MAX_AGENTS) g_agents[g_nagents++] = *ap;
  pid_t parent = getpid();
  ap->start_ms = etcd_fixture_now_ms();
  pid_t pid = fork();
  if (pid < 0) TEST_FAIL("fork: %s", strerror(errno));
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(99);
    int out = open(ap->out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int err = open(ap->err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (out < 0 || err < 0) _exit(98);
    dup2(out, 1);
    dup2(err, 2);
    execv(AGENT_BIN, (char *const *)argv);
    _exit(97);
  }
  ap->pid = pid;
}

void h_spawn(harness_t *h, agent_proc_t *ap, const char *node, const char *endpoint,
             const char *const *args, const char *const *worker_args) {
  const char *cmd[48];
  int n = 0;
  cmd[n++] = WORKER_BIN;
  cmd[n++] = "--out";
  cmd[n++] = h->wdir;
  for (int i = 0; worker_args && worker_args[i] && n < 47; i++) cmd[n++] = worker_args[i];
  cmd[n] = NULL;
  h_spawn_cmd(h, ap, node, endpoint, args, cmd);
}

int h_poll_exit(agent_proc_t *ap) {
  if (ap->exited) return 1;
  int status;
  pid_t r = waitpid(ap->pid, &status, WNOHANG);
  if (r != ap->pid) return 0;
  ap->exited = 1;
  ap->exit_ms = etcd_fixture_now_ms();
  ap->code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return 1;
}

int h_wait_exit(agent_proc_t *ap, int timeout_ms) {
  long long deadline = etcd_fixture_now_ms() + timeout_ms;
  while (!h_poll_exit(ap)) {
    if (etcd_fixture_now_ms() > deadline)
      TEST_FAIL("agent %s did not exit within %d ms", ap->node, timeout_ms);
    sleep_ms(10);
  }
  return ap->code;
}

void h_kill(agent_proc_t *ap, int sig) {
  if (!ap->exited) kill(ap->pid, sig);
}

void h_wait_registered(harness_t *h, const char *node, int timeout_ms) {
  char key[256];
  snprintf(key, sizeof(key), "/bagua/%s/nodes/%s", h->job, node);
  long long deadline = etcd_fixture_now_ms() + timeout_ms;
  for (;;) {
    bagua__etcd_kv_t kv;
    int found = 0;
    if (bagua__etcd_get(h->c, key, &kv, &found, NULL) == BAGUA_OK && found) {
      bagua__etcd_kv_clear(&kv);
      return;
    }
    if (etcd_fixture_now_ms() > deadline)
      TEST_FAIL("%s not registered within %d ms", node, timeout_ms);
    sleep_ms(10);
  }
}

int h_count_round_files(harness_t *h, int round) {
  DIR *d = opendir(h->wdir);
  if (!d) return 0;
  char pre[32];
  snprintf(pre, sizeof(pre), "r%d.", round);
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    size_t len = strlen(e->d_name);
    if (strncmp(e->d_name, pre, strlen(pre)) == 0 && len > 4 &&
        strcmp(e->d_name + len - 4, ".env") == 0)
      n++;
  }
  closedir(d);
  return n;
}

long long h_wait_round_files(harness_t *h, int round, int n, int timeout_ms) {
  long long t0 = etcd_fixture_now_ms();
  while (h_count_round_files(h, round) < n) {
    if (etcd_fixture_now_ms() - t0 > timeout_ms)
      TEST_FAIL("round %d: %d of %d worker files after %d ms", round, h_count_round_files(h, round),
                n, timeout_ms);
    sleep_ms(5);
  }
  return etcd_fixture_now_ms() - t0;
}

const char *h_env(harness_t *h, int round, const char *node, int local_rank, const char *key,
                  char *buf, size_t len) {
  char path[600];
  snprintf(path, sizeof(path), "%s/r%d.%s.%d.env", h->wdir, round, node, local_rank);
  FILE *f = fopen(path, "r");
  if (!f) TEST_FAIL("no worker file %s", path);
  char line[1024];
  size_t klen = strlen(key);
  while (fgets(line, sizeof(line), f)) {
    if (strncmp(line, key, klen) != 0 || line[klen] != '=') continue;
    line[strcspn(line, "\n")] = '\0';
    snprintf(buf, len, "%s", line + klen + 1);
    fclose(f);
    return buf;
  }
  fclose(f);
  TEST_FAIL("%s has no %s", path, key);
}

int h_env_int(harness_t *h, int round, const char *node, int local_rank, const char *key) {
  char buf[64];
  return atoi(h_env(h, round, node, local_rank, key, buf, sizeof(buf)));
}

static int get_value(harness_t *h, const char *name, char **out) {
  char key[256];
  snprintf(key, sizeof(key), "/bagua/%s/%s", h->job, name);
  bagua__etcd_kv_t kv;
  int found = 0;
  if (bagua__etcd_get(h->c, key, &kv, &found, NULL) != BAGUA_OK || !found) return -1;
  *out = strdup(kv.value);
  bagua__etcd_kv_clear(&kv);
  return *out ? 0 : -1;
}

int h_status(harness_t *h, bagua__rdzv_status_t *st) {
  char *v = NULL;
  if (get_value(h, "status", &v) != 0) return -1;
  int rc = bagua__rdzv_status_decode(v, st, NULL, 0);
  free(v);
  return rc;
}

int h_round(harness_t *h, bagua__rdzv_round_t *r) {
  char *v = NULL;
  if (get_value(h, "round", &v) != 0) return -1;
  int rc = bagua__rdzv_round_decode(v, r, NULL, 0);
  free(v);
  return rc;
}

int h_file_contains(const char *path, const char *needle) {
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  char *buf = NULL;
  size_t cap = 0;
  ssize_t n = getdelim(&buf, &cap, '\0', f);
  fclose(f);
  int found = n > 0 && strstr(buf, needle) != NULL;
  free(buf);
  return found;
}

const char *h_path(harness_t *h, const char *name, char *buf, size_t len) {
  snprintf(buf, len, "%s/%s", h->dir, name);
  return buf;
}

const char *h_touch(harness_t *h, const char *name, char *buf, size_t len) {
  h_path(h, name, buf, len);
  int fd = open(buf, O_WRONLY | O_CREAT, 0644);
  if (fd < 0) TEST_FAIL("cannot create %s: %s", buf, strerror(errno));
  close(fd);
  return buf;
}

int h_pid_alive(pid_t pid) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  char buf[512];
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = '\0';
  const char *rp = strrchr(buf, ')');
  return rp && rp[1] == ' ' && rp[2] != 'Z' && rp[2] != 'X';
}

void h_spawn_in_order(harness_t *h, agent_proc_t *aps, int n, const char *const *nodes,
                      const char *const *const *args, const char *const *wargs) {
  for (int i = 0; i < n; i++) {
    h_spawn(h, &aps[i], nodes[i], NULL, args[i], wargs);
    h_wait_registered(h, nodes[i], 10000);
  }
}

void h_expect_stderr(const agent_proc_t *ap, const char *needle) {
  if (!h_file_contains(ap->err_path, needle))
    TEST_FAIL("agent %s's stderr lacks \"%s\"", ap->node, needle);
}

void h_expect_stdout(const agent_proc_t *ap, const char *needle) {
  if (!h_file_contains(ap->out_path, needle))
    TEST_FAIL("agent %s's stdout lacks \"%s\"", ap->node, needle);
}

void h_expect_env(harness_t *h, int round, const char *node, int lr, const char *key,
                  const char *want) {
  char buf[256];
  ASSERT_STREQ(h_env(h, round, node, lr, key, buf, sizeof(buf)), want);
}

void h_wait_stderr(const agent_proc_t *ap, const char *needle, int timeout_ms) {
  long long d = etcd_fixture_now_ms() + timeout_ms;
  while (!h_file_contains(ap->err_path, needle))
    if (etcd_fixture_now_ms() > d)
      TEST_FAIL("agent %s did not print \"%s\" within %d ms", ap->node, needle, timeout_ms);
    else
      usleep(10000);
}

char *h_slurp(const char *path) {
  FILE *f = fopen(path, "r");
  size_t cap = 1 << 16, n = 0;
  char *buf = malloc(cap);
  if (!buf) TEST_FAIL("out of memory");
  while (f) {
    if (n + 4096 > cap) {
      cap *= 2;
      char *nb = realloc(buf, cap);
      if (!nb) TEST_FAIL("out of memory");
      buf = nb;
    }
    size_t r = fread(buf + n, 1, cap - n - 1, f);
    if (r == 0) break;
    n += r;
  }
  if (f) fclose(f);
  buf[n] = '\0';
  return buf;
}

int h_count_in(const char *hay, const char *needle) {
  int k = 0;
  for (const char *p = hay; (p = strstr(p, needle)) != NULL; p += strlen(needle)) k++;
  return k;
}

long long h_file_value_after(const char *path, const char *needle) {
  char *buf = h_slurp(path);
  const char *p = strstr(buf, needle);
  long long v = p ? atoll(p + strlen(needle)) : -1;
  free(buf);
  return v;
}

long long h_wait_value_after(const char *path, const char *needle, int timeout_ms) {
  long long deadline = etcd_fixture_now_ms() + timeout_ms;
  for (;;) {
    long long v = h_file_value_after(path, needle);
    if (v >= 0) return v;
    if (etcd_fixture_now_ms() > deadline) TEST_FAIL("%s lacks \"%s\"", path, needle);
    usleep(5000);
  }
}

int h_children(pid_t parent, pid_t *out, int cap) {
  DIR *d = opendir("/proc");
  if (!d) return 0;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL && n < cap) {
    char *end;
    long pid = strtol(e->d_name, &end, 10);
    if (*end || pid <= 0) continue;
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) continue;
    size_t k = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[k] = '\0';
    /* The command name in parentheses may hold spaces: parse after its closing one. */
    const char *rp = strrchr(buf, ')');
    char state;
    int ppid;
    if (rp && sscanf(rp + 1, " %c %d", &state, &ppid) == 2 && ppid == parent && state != 'Z')
      out[n++] = (pid_t)pid;
  }
  closedir(d);
  return n;
}
