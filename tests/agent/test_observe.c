/*
 * Observability (docs/observability.md), against a real etcd and real agents running a real
 * libbagua DDP worker (agent_ddp_worker):
 *
 *   test_observe status_list|unknown_job|metrics|metrics_in_use
 *
 *  - status_list: two agents; the progress record of each node appears and its step
 *    advances; `bagua-launch status` (table and --json, parsed) and `list` (both) show the
 *    job, its round, members, ranks and the workers' steps; the launcher's progress line
 *    shows the step, the total and an ETA; once the job ended, status says succeeded.
 *  - unknown_job: status of a job etcd does not hold exits 2 naming it; an unreachable etcd
 *    exits 3 within the request timeout, naming the endpoint.
 *  - metrics: GET /metrics over a plain socket: status line, content type, HELP/TYPE lines,
 *    values consistent with the job (round 1, one node, leader, worker step advancing); other
 *    paths get 404.
 *  - metrics_in_use: --metrics-port of a port already bound: exit 2 with a message naming it.
 *  - metrics_unreachable: --metrics-addr of a multicast, the broadcast or a reserved address
 *    (which the kernel lets a TCP socket bind, and no client can reach): exit 2 naming it.
 */
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "launch_progress.h"
#include "metrics.h"
#include "test.h"

/* Short windows but a lease that a loaded machine cannot lose by accident: these tests look
 * at one round. */
#define STEADY \
  "--last-call-ms", "200", "--settle-ms", "300", "--lease-ttl", "10", "--grace-ms", "2000"

/* Runs bagua-launch with `args` (NULL-terminated, after the program name) and the extra
 * environment entry `env` (or NULL); its stdout and stderr go into out/err (malloc'ed).
 * Returns its exit status; fails the test after `timeout_ms`. */
static int run_launch(harness_t *h, const char *const *args, const char *env, char **out,
                      char **err, int timeout_ms) {
  char opath[400], epath[400];
  h_path(h, "launch.out", opath, sizeof(opath));
  h_path(h, "launch.err", epath, sizeof(epath));
  const char *argv[32];
  int n = 0;
  argv[n++] = LAUNCH_BIN;
  for (int i = 0; args[i] && n < 31; i++) argv[n++] = args[i];
  argv[n] = NULL;
  pid_t pid = fork();
  if (pid < 0) TEST_FAIL("fork: %s", strerror(errno));
  if (pid == 0) {
    int o = open(opath, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int e = open(epath, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (o < 0 || e < 0) _exit(98);
    dup2(o, 1);
    dup2(e, 2);
    if (env) putenv((char *)env);
    execv(LAUNCH_BIN, (char *const *)argv);
    _exit(97);
  }
  long long deadline = etcd_fixture_now_ms() + timeout_ms;
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (etcd_fixture_now_ms() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      TEST_FAIL("bagua-launch %s did not exit within %d ms", args[0], timeout_ms);
    }
    usleep(10000);
  }
  *out = h_slurp(opath);
  *err = h_slurp(epath);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* The progress record of `node` (0 when found). */
static int read_progress(harness_t *h, const char *node, bagua__rdzv_progress_t *p) {
  char key[256];
  snprintf(key, sizeof(key), "/bagua/%s/progress/%s", h->job, node);
  bagua__etcd_kv_t kv;
  int found = 0;
  memset(p, 0, sizeof(*p));
  if (bagua__etcd_get(h->c, key, &kv, &found, NULL) != BAGUA_OK || !found) return -1;
  snprintf(p->node, sizeof(p->node), "%s", node);
  char why[256] = "";
  int rc = bagua__rdzv_progress_decode(kv.value, p, why, sizeof(why));
  if (rc != 0) TEST_FAIL("progress record of %s refused: %s: %s", node, why, kv.value);
  bagua__etcd_kv_clear(&kv);
  return 0;
}

/* Waits until node's progress record shows worker 0 beyond `above` steps; returns the step. */
static long long wait_step(harness_t *h, const char *node, long long above, int timeout_ms) {
  long long deadline = etcd_fixture_now_ms() + timeout_ms;
  for (;;) {
    bagua__rdzv_progress_t p;
    long long step = -1;
    if (read_progress(h, node, &p) == 0 && p.nworkers > 0) step = p.w[0].step;
    bagua__rdzv_progress_clear(&p);
    if (step > above) return step;
    if (etcd_fixture_now_ms() > deadline)
      TEST_FAIL("node %s's progress did not pass step %lld within %d ms (last %lld)", node, above,
                timeout_ms, step);
    usleep(50000);
  }
}

static const cJSON *item(const cJSON *o, const char *name) {
  const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, name);
  if (!f) TEST_FAIL("JSON lacks \"%s\"", name);
  return f;
}

static void test_status_list(void) {
  harness_t h;
  h_init(&h, "observe", 1);
  const char *a[] = {"--nnodes", "2", "--nproc-per-node", "1", STEADY, NULL};
  const char *cmd[] = {DDP_WORKER_BIN, "400", "20", NULL};
  agent_proc_t ap[2];
  const char *nodes[] = {"n1", "n2"};
  for (int i = 0; i < 2; i++) {
    h_spawn_cmd(&h, &ap[i], nodes[i], NULL, a, cmd);
    h_wait_registered(&h, nodes[i], 10000);
  }
  long long s1 = wait_step(&h, "n1", 0, 20000);
  wait_step(&h, "n2", 0, 20000);
  long long s2 = wait_step(&h, "n1", s1, 10000);
  printf("progress of n1: step %lld, then %lld\n", s1, s2);
  bagua__rdzv_progress_t p;
  ASSERT_EQ(read_progress(&h, "n2", &p), 0);
  ASSERT_EQ(p.round, 1);
  ASSERT_EQ(p.nworkers, 1);
  ASSERT_EQ(p.w[0].rank, 1);
  ASSERT_EQ(p.w[0].total_steps, 400);
  ASSERT_TRUE(p.w[0].bytes_sent > 0);
  bagua__rdzv_progress_clear(&p);

  char *out, *err;
  const char *st[] = {"status", "--rdzv-endpoint", h.fx.host_port, "--job-id", h.job, NULL};
  int rc = run_launch(&h, st, NULL, &out, &err, 15000);
  if (rc != 0) TEST_FAIL("status exited %d: %s", rc, err);
  printf("%s", out);
  ASSERT_TRUE(strstr(out, "job observe: running, round 1 (initial), 2 node(s), world size 2") !=
              NULL);
  ASSERT_TRUE(strstr(out, "progress: step ") != NULL);
  ASSERT_TRUE(strstr(out, "/400, ") != NULL);
  ASSERT_TRUE(strstr(out, "n1 ") != NULL && strstr(out, "n2 ") != NULL);
  ASSERT_TRUE(strstr(out, "member   1..1") != NULL);
  free(out);
  free(err);

  const char *sj[] = {"status", "--rdzv-endpoint", h.fx.host_port, "--job-id", h.job, "--json",
                      NULL};
  ASSERT_EQ(run_launch(&h, sj, NULL, &out, &err, 15000), 0);
  cJSON *o = cJSON_Parse(out);
  if (!o) TEST_FAIL("status --json is not JSON: %s", out);
  ASSERT_STREQ(item(o, "state")->valuestring, "running");
  ASSERT_EQ((int)item(o, "round")->valuedouble, 1);
  ASSERT_EQ((int)item(o, "world_size")->valuedouble, 2);
  ASSERT_EQ((int)item(o, "total_steps")->valuedouble, 400);
  const cJSON *members = item(o, "members");
  ASSERT_EQ(cJSON_GetArraySize(members), 2);
  for (int i = 0; i < 2; i++) {
    const cJSON *m = cJSON_GetArrayItem(members, i);
    ASSERT_STREQ(item(m, "node")->valuestring, nodes[i]);
    const cJSON *ranks = item(m, "ranks");
    ASSERT_EQ(cJSON_GetArraySize(ranks), 1);
    ASSERT_EQ((int)cJSON_GetArrayItem(ranks, 0)->valuedouble, i);
    const cJSON *w = cJSON_GetArrayItem(item(m, "workers"), 0);
    if (!w) TEST_FAIL("member %s has no worker progress: %s", nodes[i], out);
    ASSERT_EQ((int)item(w, "rank")->valuedouble, i);
    ASSERT_TRUE(item(w, "step")->valuedouble >= 1);
    ASSERT_TRUE(item(w, "steps_per_second")->valuedouble >= 0);
  }
  cJSON_Delete(o);
  free(out);
  free(err);

  const char *ls[] = {"list", "--rdzv-endpoint", h.fx.host_port, NULL};
  ASSERT_EQ(run_launch(&h, ls, NULL, &out, &err, 15000), 0);
  printf("%s", out);
  ASSERT_TRUE(strstr(out, "observe ") != NULL && strstr(out, "running") != NULL);
  free(out);
  free(err);
  const char *lj[] = {"list", "--rdzv-endpoint", h.fx.host_port, "--json", NULL};
  ASSERT_EQ(run_launch(&h, lj, NULL, &out, &err, 15000), 0);
  o = cJSON_Parse(out);
  if (!o) TEST_FAIL("list --json is not JSON: %s", out);
  const cJSON *jobs = item(o, "jobs");
  ASSERT_EQ(cJSON_GetArraySize(jobs), 1);
  ASSERT_STREQ(item(cJSON_GetArrayItem(jobs, 0), "job")->valuestring, "observe");
  ASSERT_EQ((int)item(cJSON_GetArrayItem(jobs, 0), "nodes")->valuedouble, 2);
  cJSON_Delete(o);
  free(out);
  free(err);

  char line[512];
  ASSERT_EQ(bagua__launch_progress_line(h.c, h.job, line, sizeof(line)), 0);
  printf("progress line: %s\n", line);
  ASSERT_TRUE(strstr(line, "job observe round 1: 2 node(s), world 2, step ") != NULL);
  ASSERT_TRUE(strstr(line, "/400, ") != NULL);
  ASSERT_TRUE(strstr(line, " steps/s") != NULL);

  for (int i = 0; i < 2; i++) ASSERT_EQ(h_wait_exit(&ap[i], 40000), 0);
  ASSERT_EQ(run_launch(&h, sj, NULL, &out, &err, 15000), 0);
  o = cJSON_Parse(out);
  if (!o) TEST_FAIL("status --json is not JSON: %s", out);
  ASSERT_STREQ(item(o, "state")->valuestring, "succeeded");
  cJSON_Delete(o);
  free(out);
  free(err);
  h_fini(&h);
}

static void test_unknown_job(void) {
  harness_t h;
  h_init(&h, "unknown", 1);
  char *out, *err;
  const char *st[] = {"status", "--rdzv-endpoint", h.fx.host_port, "--job-id", "nosuch", NULL};
  ASSERT_EQ(run_launch(&h, st, NULL, &out, &err, 15000), 2);
  if (!strstr(err, "no job \"nosuch\" in etcd at ")) TEST_FAIL("stderr: %s", err);
  ASSERT_STREQ(out, "");
  free(out);
  free(err);
  /* Nothing listens on a freshly freed port: the read fails within the request timeout. */
  char ep[64];
  snprintf(ep, sizeof(ep), "127.0.0.1:%d", etcd_fixture_free_port());
  const char *un[] = {"status", "--rdzv-endpoint", ep, "--job-id", "j", NULL};
  long long t0 = etcd_fixture_now_ms();
  ASSERT_EQ(run_launch(&h, un, "BAGUA_ETCD_TIMEOUT_MS=1000", &out, &err, 15000), 3);
  long long took = etcd_fixture_now_ms() - t0;
  if (!strstr(err, "cannot read from etcd at ") || !strstr(err, ep)) TEST_FAIL("stderr: %s", err);
  if (took > 6000) TEST_FAIL("an unreachable etcd took %lld ms to report", took);
  printf("unreachable etcd reported after %lld ms\n", took);
  free(out);
  free(err);
  const char *bad[] = {"status", "--rdzv-endpoint", h.fx.host_port, NULL};
  ASSERT_EQ(run_launch(&h, bad, NULL, &out, &err, 15000), 2);
  if (!strstr(err, "--job-id is required")) TEST_FAIL("stderr: %s", err);
  free(out);
  free(err);
  h_fini(&h);
}

/* One HTTP exchange with 127.0.0.1:port; returns the whole answer (malloc'ed). */
static char *http(int port, const char *request) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0)
    TEST_FAIL("connect to the metrics port %d: %s", port, strerror(errno));
  struct timeval tv = {.tv_sec = 5};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ASSERT_EQ(write(fd, request, strlen(request)), (ssize_t)strlen(request));
  size_t cap = 1 << 16, n = 0;
  char *buf = malloc(cap);
  ssize_t r;
  while (n + 1 < cap && (r = read(fd, buf + n, cap - 1 - n)) > 0) n += (size_t)r;
  buf[n] = '\0';
  close(fd);
  return buf;
}

/* The value of the sample line that starts with `prefix` ("name{labels}"), or -1. */
static double sample(const char *text, const char *name, const char *label) {
  for (const char *p = text; (p = strstr(p, name)) != NULL; p++) {
    if (p != text && p[-1] != '\n') continue;
    const char *eol = strchr(p, '\n');
    size_t len = eol ? (size_t)(eol - p) : strlen(p);
    char line[512];
    snprintf(line, sizeof(line), "%.*s", (int)len, p);
    if (line[strlen(name)] != '{' || (label && !strstr(line, label))) continue;
    const char *sp = strrchr(line, ' ');
    return sp ? atof(sp + 1) : -1;
  }
  return -1;
}

static void test_metrics(void) {
  harness_t h;
  h_init(&h, "metrics", 1);
  int port = etcd_fixture_free_port();
  char ps[16];
  snprintf(ps, sizeof(ps), "%d", port);
  const char *a[] = {"--nnodes", "1", "--nproc-per-node", "1", "--metrics-port", ps, STEADY, NULL};
  const char *cmd[] = {DDP_WORKER_BIN, "300", "20", NULL};
  agent_proc_t ap;
  h_spawn_cmd(&h, &ap, "n1", NULL, a, cmd);
  h_wait_registered(&h, "n1", 10000);
  long long deadline = etcd_fixture_now_ms() + 20000;
  char *text = NULL;
  double step1 = -1;
  while (step1 < 1) {
    free(text);
    text = http(port, "GET /metrics HTTP/1.0\r\n\r\n");
    step1 = sample(text, "bagua_worker_step", "rank=\"0\"");
    if (etcd_fixture_now_ms() > deadline) TEST_FAIL("no worker step in the metrics: %s", text);
    if (step1 < 1) usleep(100000);
  }
  printf("%s", text);
  ASSERT_TRUE(strncmp(text, "HTTP/1.0 200 OK\r\n", 17) == 0);
  ASSERT_TRUE(strstr(text, "Content-Type: text/plain; version=0.0.4") != NULL);
  ASSERT_TRUE(strstr(text, "# TYPE bagua_worker_step gauge\n") != NULL);
  ASSERT_TRUE(strstr(text, "# HELP bagua_agent_worker_exits_total ") != NULL);
  ASSERT_TRUE(strstr(text, "# TYPE bagua_worker_bytes_sent_total counter\n") != NULL);
  ASSERT_EQ((int)sample(text, "bagua_agent_round", "node=\"n1\""), 1);
  ASSERT_EQ((int)sample(text, "bagua_agent_round_nodes", NULL), 1);
  ASSERT_EQ((int)sample(text, "bagua_agent_world_size", NULL), 1);
  ASSERT_EQ((int)sample(text, "bagua_agent_is_leader", NULL), 1);
  ASSERT_EQ((int)sample(text, "bagua_agent_is_member", NULL), 1);
  ASSERT_EQ((int)sample(text, "bagua_agent_workers_running", NULL), 1);
  ASSERT_EQ((int)sample(text, "bagua_worker_total_steps", NULL), 300);
  ASSERT_TRUE(sample(text, "bagua_agent_last_recovery_seconds", NULL) >= 0);
  ASSERT_TRUE(sample(text, "bagua_agent_worker_exits_total", "outcome=\"failed\"") == 0);
  double step2 = step1;
  while (step2 <= step1) {
    usleep(300000);
    free(text);
    text = http(port, "GET /metrics HTTP/1.0\r\n\r\n");
    step2 = sample(text, "bagua_worker_step", "rank=\"0\"");
    if (etcd_fixture_now_ms() > deadline + 10000) TEST_FAIL("the step did not advance: %s", text);
  }
  printf("metrics: worker step %g then %g\n", step1, step2);
  free(text);
  /* Connections held open without a request (twice the cap) do not lock a scraper out: the
   * oldest idle one gives way to each new connection. */
  int idle[2 * METRICS_MAX_CONNS];
  for (int i = 0; i < 2 * METRICS_MAX_CONNS; i++) {
    idle[i] = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(connect(idle[i], (struct sockaddr *)&sa, sizeof(sa)), 0);
  }
  usleep(100000); /* the server has accepted them all */
  long long t0 = etcd_fixture_now_ms();
  text = http(port, "GET /metrics HTTP/1.0\r\n\r\n");
  printf("metrics: scrape with %d idle connections open took %lld ms\n", 2 * METRICS_MAX_CONNS,
         etcd_fixture_now_ms() - t0);
  ASSERT_TRUE(strncmp(text, "HTTP/1.0 200 OK\r\n", 17) == 0);
  ASSERT_LT(etcd_fixture_now_ms() - t0, METRICS_DEADLINE_MS);
  for (int i = 0; i < 2 * METRICS_MAX_CONNS; i++) close(idle[i]);
  free(text);
  text = http(port, "GET /other HTTP/1.0\r\n\r\n");
  ASSERT_TRUE(strncmp(text, "HTTP/1.0 404 ", 13) == 0);
  free(text);
  text = http(port, "POST /metrics HTTP/1.0\r\n\r\n");
  ASSERT_TRUE(strncmp(text, "HTTP/1.0 405 ", 13) == 0);
  free(text);
  /* A request head over the limit gets its 431, not a reset (the server stops reading with
   * input still unread, which makes a plain close() reset the connection). */
  char big[METRICS_REQ_MAX + 512];
  int nb = snprintf(big, sizeof(big), "GET /metrics HTTP/1.0\r\nX-Pad: ");
  memset(big + nb, 'a', sizeof(big) - (size_t)nb - 5);
  memcpy(big + sizeof(big) - 5, "\r\n\r\n", 5);
  text = http(port, big);
  if (strncmp(text, "HTTP/1.0 431 ", 13) != 0) TEST_FAIL("oversized request got: \"%.60s\"", text);
  free(text);
  ASSERT_EQ(h_wait_exit(&ap, 40000), 0);
  h_fini(&h);
}

static void test_metrics_in_use(void) {
  harness_t h;
  h_init(&h, "metrics_in_use", 1);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(sa);
  ASSERT_TRUE(fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 && listen(fd, 1) == 0);
  ASSERT_EQ(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
  char ps[16];
  snprintf(ps, sizeof(ps), "%d", ntohs(sa.sin_port));
  const char *a[] = {"--nnodes", "1", "--nproc-per-node", "1", "--metrics-port", ps, STEADY, NULL};
  const char *cmd[] = {"/bin/true", NULL};
  agent_proc_t ap;
  h_spawn_cmd(&h, &ap, "n1", NULL, a, cmd);
  ASSERT_EQ(h_wait_exit(&ap, 10000), 2);
  char want[128];
  snprintf(want, sizeof(want), "cannot serve metrics on 127.0.0.1:%s: Address already in use", ps);
  h_expect_stderr(&ap, want);
  close(fd);
  h_fini(&h);
}

static void test_metrics_unreachable(void) {
  harness_t h;
  h_init(&h, "metrics_unreachable", 1);
  static const char *const addrs[][2] = {{"224.0.0.1", "a multicast address"},
                                         {"255.255.255.255", "a broadcast or reserved address"},
                                         {"240.1.2.3", "a broadcast or reserved address"}};
  for (size_t i = 0; i < sizeof(addrs) / sizeof(addrs[0]); i++) {
    const char *a[] = {"--nnodes",       "1", "--nproc-per-node", "1",
                       "--metrics-port", "9", "--metrics-addr",   addrs[i][0],
                       STEADY,           NULL};
    const char *cmd[] = {"/bin/true", NULL};
    agent_proc_t ap;
    h_spawn_cmd(&h, &ap, "n1", NULL, a, cmd);
    ASSERT_EQ(h_wait_exit(&ap, 10000), 2);
    char want[160];
    snprintf(want, sizeof(want), "--metrics-addr \"%s\" is %s", addrs[i][0], addrs[i][1]);
    h_expect_stderr(&ap, want);
  }
  h_fini(&h);
}

int main(int argc, char **argv) {
  TEST_RUN_SCENARIOS(argc, argv, {"status_list", test_status_list},
                     {"unknown_job", test_unknown_job}, {"metrics", test_metrics},
                     {"metrics_in_use", test_metrics_in_use},
                     {"metrics_unreachable", test_metrics_unreachable});
}
