/*
 * The agent's worker start-up and output pump, in this process (no etcd):
 *
 *   test_workers_output log_full|exec_error
 *
 *  - log_full: a log file that takes no more lines (/dev/full, as a full disk) is reported
 *    once, with the worker's prefix and the error, and the lost lines are counted when the
 *    pump stops; the console still gets every line.
 *  - exec_error: a worker program that cannot be executed (missing, not executable) is no
 *    worker: bagua__workers_start() fails with BAGUA_ERR_INVALID_USAGE and a last error that
 *    names the program and the exec error, instead of a worker that "exited 127".
 *  - retag: a kept worker's new rank reaches its console prefix and its log file's header.
 *  - metrics_server: the metrics endpoint's bounds (metrics.h) and its hand-over of the text.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>

#include "common/log.h"
#include "common/time.h"
#include "metrics.h"
#include "output.h"
#include "test.h"
#include "workers.h"

/* stderr goes to a temporary file between capture_start() and capture_end(). */
static char g_cap_path[64];
static int g_cap_fd = -1, g_saved_err = -1;

static void capture_start(void) {
  snprintf(g_cap_path, sizeof(g_cap_path), "/tmp/bagua-test-workers-XXXXXX");
  g_cap_fd = mkstemp(g_cap_path);
  ASSERT_TRUE(g_cap_fd >= 0);
  fflush(stderr);
  g_saved_err = dup(STDERR_FILENO);
  dup2(g_cap_fd, STDERR_FILENO);
}

/* Restores stderr; returns what was written (malloc'ed). */
static char *capture_end(void) {
  fflush(stderr);
  dup2(g_saved_err, STDERR_FILENO);
  close(g_saved_err);
  char *text = calloc(1, 65536);
  ASSERT_TRUE(text != NULL);
  ssize_t n = pread(g_cap_fd, text, 65535, 0);
  text[n > 0 ? n : 0] = '\0';
  close(g_cap_fd);
  unlink(g_cap_path);
  return text;
}

static int count(const char *text, const char *needle) {
  int n = 0;
  for (const char *p = text; (p = strstr(p, needle)); p += strlen(needle)) n++;
  return n;
}

static int test_log_full(void) {
  int full = open("/dev/full", O_WRONLY | O_CLOEXEC);
  if (full < 0) TEST_SKIP("/dev/full: %s", strerror(errno));
  char console_path[] = "/tmp/bagua-test-console-XXXXXX";
  int console = mkstemp(console_path);
  ASSERT_TRUE(console >= 0);
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  capture_start();
  bagua__outpump_t *pump = NULL;
  ASSERT_OK(bagua__outpump_start(&pump));
  ASSERT_OK(bagua__outpump_add(pump, p[0], console, "[n1/0] ", full, 1));
  const char lines[] = "one\ntwo\nthree\n";
  ASSERT_EQ(write(p[1], lines, sizeof(lines) - 1), (ssize_t)sizeof(lines) - 1);
  close(p[1]);
  bagua__outpump_drain(pump, 5000);
  bagua__outpump_stop(pump);
  char *err = capture_end();
  char out[256] = "";
  ssize_t n = pread(console, out, sizeof(out) - 1, 0);
  out[n > 0 ? n : 0] = '\0';
  close(console);
  unlink(console_path);
  if (strcmp(out, "[n1/0] one\n[n1/0] two\n[n1/0] three\n") != 0)
    TEST_FAIL("console got \"%s\"", out);
  if (count(err, "cannot write the log file of [n1/0]: No space left on device") != 1)
    TEST_FAIL("expected one report of the first failure, stderr: %s", err);
  if (count(err, "3 line(s) of worker output could not be written to the log files") != 1)
    TEST_FAIL("expected the count when the pump stopped, stderr: %s", err);
  free(err);
  printf("log_full: ok\n");
  return 0;
}

/* Starts one worker running `prog`; returns the status, with the last error in `why`. */
static bagua_status_t start(const char *prog, bagua__workers_t *ws, bagua__outpump_t *pump,
                            char *why, size_t len) {
  bagua__agent_config_t cfg;
  memset(&cfg, 0, sizeof(cfg));
  char *argv[] = {(char *)prog, NULL};
  snprintf(cfg.job_id, sizeof(cfg.job_id), "j");
  snprintf(cfg.node_id, sizeof(cfg.node_id), "n1");
  cfg.endpoints = "127.0.0.1:1";
  cfg.nproc = 1;
  cfg.argv = argv;
  cfg.argc = 1;
  bagua__worker_assign_t a = {.round = 1,
                              .world_size = 1,
                              .group_world_size = 1,
                              .master_addr = "127.0.0.1",
                              .master_port = 1};
  capture_start();
  bagua_status_t st = bagua__workers_start(ws, &cfg, &a, pump);
  free(capture_end());
  snprintf(why, len, "%s", bagua_last_error());
  return st;
}

static int test_exec_error(void) {
  bagua__outpump_t *pump = NULL;
  ASSERT_OK(bagua__outpump_start(&pump));
  bagua__workers_t ws = {0};
  char why[512];
  ASSERT_STATUS(start("/nonexistent/bagua-prog", &ws, pump, why, sizeof(why)),
                BAGUA_ERR_INVALID_USAGE);
  if (!strstr(why, "cannot run \"/nonexistent/bagua-prog\" for rank 0: No such file or directory"))
    TEST_FAIL("last error \"%s\" does not name the program and the exec error", why);
  ASSERT_EQ(ws.n, 0); /* no worker was recorded: nothing "exited 127" */
  bagua__workers_clear(&ws);

  char script[] = "/tmp/bagua-test-noexec-XXXXXX";
  int fd = mkstemp(script);
  ASSERT_TRUE(fd >= 0);
  ASSERT_EQ(write(fd, "#!/bin/sh\n", 10), 10);
  close(fd);
  chmod(script, 0644);
  ASSERT_STATUS(start(script, &ws, pump, why, sizeof(why)), BAGUA_ERR_INVALID_USAGE);
  if (!strstr(why, "Permission denied")) TEST_FAIL("last error \"%s\" lacks EACCES", why);
  bagua__workers_clear(&ws);
  unlink(script);

  /* A program that runs is a worker, whatever it then does. */
  ASSERT_OK(start("/bin/false", &ws, pump, why, sizeof(why)));
  ASSERT_EQ(ws.n, 1);
  int status;
  ASSERT_EQ(waitpid(ws.w[0].pid, &status, 0), ws.w[0].pid);
  ASSERT_EQ(bagua__workers_on_exit(&ws, ws.w[0].pid, status), 1);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1);
  bagua__workers_clear(&ws);
  bagua__outpump_drain(pump, 2000);
  bagua__outpump_stop(pump);
  printf("exec_error: ok\n");
  return 0;
}

/* Reads the whole file at `path` into buf (NUL-terminated). */
static void read_file(const char *path, char *buf, size_t len) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  ssize_t n = fd >= 0 ? read(fd, buf, len - 1) : -1;
  buf[n > 0 ? n : 0] = '\0';
  if (fd >= 0) close(fd);
}

/* Waits up to 5 s until the file at `path` contains `needle`. */
static void wait_contains(const char *path, const char *needle) {
  char buf[4096];
  for (int i = 0; i < 500; i++) {
    read_file(path, buf, sizeof(buf));
    if (strstr(buf, needle)) return;
    usleep(10000);
  }
  TEST_FAIL("%s never contained \"%s\" (has \"%s\")", path, needle, buf);
}

/*
 * retag: a worker kept through a round change (in-process elasticity) gets its new rank in the
 * console prefix of every line it writes after the change, on both streams, and its log file
 * gets the new round's header line once, between the old round's lines and the new one's.
 */
static int test_retag(void) {
  char console_path[] = "/tmp/bagua-test-console-XXXXXX", log_path[] = "/tmp/bagua-test-log-XXXXXX";
  int console = mkstemp(console_path), log_fd = mkstemp(log_path);
  ASSERT_TRUE(console >= 0 && log_fd >= 0);
  int po[2], pe[2];
  ASSERT_EQ(pipe(po), 0);
  ASSERT_EQ(pipe(pe), 0);
  bagua__outpump_t *pump = NULL;
  ASSERT_OK(bagua__outpump_start(&pump));
  ASSERT_OK(bagua__outpump_add(pump, po[0], console, "[n1/3] ", log_fd, 42));
  ASSERT_OK(bagua__outpump_add(pump, pe[0], console, "[n1/3] ", dup(log_fd), 42));
  ASSERT_EQ(write(po[1], "before\n", 7), 7);
  wait_contains(log_path, "before\n");
  bagua__outpump_retag(pump, 42, "[n1/0] ", "=== round 2 rank 0 ===\n");
  bagua__outpump_retag(pump, 7, "[n9/9] ", "=== not this worker ===\n");
  ASSERT_EQ(write(po[1], "after\n", 6), 6);
  wait_contains(log_path, "after\n");
  ASSERT_EQ(write(pe[1], "err after\n", 10), 10);
  close(po[1]);
  close(pe[1]);
  bagua__outpump_drain(pump, 5000);
  bagua__outpump_stop(pump);
  char out[4096], log[4096];
  read_file(console_path, out, sizeof(out));
  read_file(log_path, log, sizeof(log));
  close(console);
  unlink(console_path);
  unlink(log_path);
  if (strcmp(out, "[n1/3] before\n[n1/0] after\n[n1/0] err after\n") != 0)
    TEST_FAIL("console got \"%s\"", out);
  if (strcmp(log, "before\n=== round 2 rank 0 ===\nafter\nerr after\n") != 0)
    TEST_FAIL("log got \"%s\"", log);
  printf("retag: ok\n");
  return 0;
}

static int connect_to(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_TRUE(fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
  struct timeval tv = {.tv_sec = 6};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

/* Sends `req` (may be NULL: nothing) and reads the answer until the server closes. */
static char *exchange(int fd, const char *req) {
  if (req) ASSERT_EQ(write(fd, req, strlen(req)), (ssize_t)strlen(req));
  static char buf[65536];
  size_t n = 0;
  ssize_t r;
  while (n + 1 < sizeof(buf) && (r = read(fd, buf + n, sizeof(buf) - 1 - n)) > 0) n += (size_t)r;
  buf[n] = '\0';
  close(fd);
  return buf;
}

static int g_publish_stop; /* atomic */

static void *publisher(void *arg) {
  bagua__metrics_t *m = arg;
  for (int i = 0; !__atomic_load_n(&g_publish_stop, __ATOMIC_ACQUIRE); i++) {
    char text[64];
    int n = snprintf(text, sizeof(text), "x_total %d\n", i);
    bagua__metrics_publish(m, text, (size_t)n);
  }
  return NULL;
}

/*
 * metrics_server: the agent's metrics endpoint on its own: answers while another thread keeps
 * publishing (the TSAN build checks the hand-over), refuses bad requests with their status,
 * closes a connection that sends nothing once its deadline passed, and with every slot held
 * by an idle connection still answers a scraper (the oldest idle connection gives way).
 */
static int test_metrics_server(void) {
  bagua__metrics_t *m = NULL;
  char err[512];
  ASSERT_EQ(bagua__metrics_start("127.0.0.1", 0, &m, err, sizeof(err)), 0);
  int port = bagua__metrics_port(m);
  /* The first request must find text: publish once before the racing publisher starts. */
  bagua__metrics_publish(m, "x_total 0\n", 10);
  pthread_t t;
  ASSERT_EQ(pthread_create(&t, NULL, publisher, m), 0);
  for (int i = 0; i < 50; i++) {
    char *a = exchange(connect_to(port), "GET /metrics HTTP/1.0\r\n\r\n");
    if (strncmp(a, "HTTP/1.0 200 OK\r\n", 17) != 0 || !strstr(a, "\r\n\r\nx_total "))
      TEST_FAIL("answer %d: %s", i, a);
  }
  __atomic_store_n(&g_publish_stop, 1, __ATOMIC_RELEASE);
  pthread_join(t, NULL);
  ASSERT_TRUE(strncmp(exchange(connect_to(port), "GET / HTTP/1.0\r\n\r\n"), "HTTP/1.0 404", 12) ==
              0);
  ASSERT_TRUE(strncmp(exchange(connect_to(port), "garbage\n\n"), "HTTP/1.0 40", 11) == 0);
  char big[METRICS_REQ_MAX + 100];
  memset(big, 'a', sizeof(big) - 1);
  big[sizeof(big) - 1] = '\0';
  ASSERT_TRUE(strncmp(exchange(connect_to(port), big), "HTTP/1.0 431", 12) == 0);
  /* Idle connections up to the cap, then a scraper: the oldest idle one gives way at once
   * and the scraper is answered (before, it was closed, so idle connections renewed every
   * deadline locked scrapers out). */
  int idle[METRICS_MAX_CONNS];
  for (int i = 0; i < METRICS_MAX_CONNS; i++) {
    idle[i] = connect_to(port);
    usleep(2000); /* accepted in this order: idle[0] is the oldest */
  }
  usleep(300000);
  long long t0 = bagua__now_ms();
  ASSERT_TRUE(strncmp(exchange(connect_to(port), "GET /metrics HTTP/1.0\r\n\r\n"),
                      "HTTP/1.0 200 OK", 15) == 0);
  ASSERT_STREQ(exchange(idle[0], NULL), "");
  ASSERT_TRUE(bagua__now_ms() - t0 < 1500);
  /* The other idle ones are closed at their deadline, and the endpoint serves again. */
  for (int i = 1; i < METRICS_MAX_CONNS; i++) ASSERT_STREQ(exchange(idle[i], NULL), "");
  long long waited = bagua__now_ms() - t0;
  if (waited > METRICS_DEADLINE_MS + 2000) TEST_FAIL("idle connections lived %lld ms", waited);
  ASSERT_TRUE(strncmp(exchange(connect_to(port), "GET /metrics HTTP/1.0\r\n\r\n"),
                      "HTTP/1.0 200 OK", 15) == 0);
  bagua__metrics_stop(m);
  /* A port in use is refused with a message naming it. */
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(sa);
  ASSERT_TRUE(bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 && listen(fd, 1) == 0);
  getsockname(fd, (struct sockaddr *)&sa, &len);
  ASSERT_EQ(bagua__metrics_start("127.0.0.1", ntohs(sa.sin_port), &m, err, sizeof(err)), -1);
  if (!strstr(err, "Address already in use")) TEST_FAIL("message: %s", err);
  ASSERT_EQ(bagua__metrics_start("localhost-ish", 0, &m, err, sizeof(err)), -1);
  if (!strstr(err, "is not an IPv4 address")) TEST_FAIL("message: %s", err);
  close(fd);
  printf("metrics_server: ok (idle connections closed after %lld ms)\n", waited);
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 2) TEST_FAIL("usage: %s log_full|exec_error|retag|metrics_server", argv[0]);
  if (strcmp(argv[1], "metrics_server") == 0) return test_metrics_server();
  if (strcmp(argv[1], "retag") == 0) return test_retag();
  if (strcmp(argv[1], "log_full") == 0) return test_log_full();
  if (strcmp(argv[1], "exec_error") == 0) return test_exec_error();
  TEST_FAIL("unknown mode %s", argv[1]);
}
