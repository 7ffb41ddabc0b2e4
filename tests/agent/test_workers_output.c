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
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/log.h"
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
  ASSERT_OK(bagua__outpump_add(pump, p[0], console, "[n1/0] ", full));
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

int main(int argc, char **argv) {
  if (argc != 2) TEST_FAIL("usage: %s log_full|exec_error", argv[0]);
  if (strcmp(argv[1], "log_full") == 0) return test_log_full();
  if (strcmp(argv[1], "exec_error") == 0) return test_exec_error();
  TEST_FAIL("unknown mode %s", argv[1]);
}
