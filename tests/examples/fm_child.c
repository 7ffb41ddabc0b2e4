/* Child processes of the fashion_mnist end-to-end tests (fm_child.h). */
#include "fm_child.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/sock.h"
#include "test.h"

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  ASSERT_TRUE(f != NULL);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)n + 1);
  ASSERT_TRUE(buf != NULL);
  ASSERT_EQ(fread(buf, 1, (size_t)n, f), (size_t)n);
  buf[n] = '\0';
  fclose(f);
  return buf;
}

void fm_child_start(fm_child_t *c, const char *bin, const char *const *args,
                    const char *const *env) {
  char *argv[64];
  int argc = 0;
  argv[argc++] = (char *)bin;
  while (*args && argc < 63) argv[argc++] = (char *)*args++;
  argv[argc] = NULL;
  memset(c, 0, sizeof(*c));
  strcpy(c->out_path, "/tmp/fm_run_out_XXXXXX");
  strcpy(c->err_path, "/tmp/fm_run_err_XXXXXX");
  int ofd = mkstemp(c->out_path), efd = mkstemp(c->err_path);
  ASSERT_TRUE(ofd >= 0 && efd >= 0);
  c->pid = fork();
  ASSERT_TRUE(c->pid >= 0);
  if (c->pid == 0) {
    dup2(ofd, 1);
    dup2(efd, 2);
    unsetenv("RANK");
    unsetenv("WORLD_SIZE");
    for (; env && *env; env++) putenv((char *)*env);
    execv(bin, argv);
    _exit(127);
  }
  close(ofd);
  close(efd);
}

static void read_outputs(fm_child_t *c, int n) {
  for (int i = 0; i < n; i++) {
    c[i].out = slurp(c[i].out_path);
    c[i].err = slurp(c[i].err_path);
    unlink(c[i].out_path);
    unlink(c[i].err_path);
  }
}

void fm_child_wait_all(fm_child_t *c, int n, int deadline_s) {
  time_t deadline = time(NULL) + deadline_s;
  int left = n;
  for (int i = 0; i < n; i++) c[i].status = -1;
  while (left > 0) {
    for (int i = 0; i < n; i++) {
      int st;
      if (c[i].status != -1 || waitpid(c[i].pid, &st, WNOHANG) != c[i].pid) continue;
      c[i].status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      left--;
    }
    if (left > 0 && time(NULL) > deadline) {
      for (int i = 0; i < n; i++)
        if (c[i].status == -1) kill(c[i].pid, SIGKILL), waitpid(c[i].pid, NULL, 0);
      read_outputs(c, n);
      for (int i = 0; i < n; i++)
        fprintf(stderr, "rank %d stdout:\n%s\nstderr:\n%s\n", i, c[i].out, c[i].err);
      TEST_FAIL("%d of %d fashion_mnist processes still running after %d s", left, n, deadline_s);
    }
    if (left > 0) usleep(20 * 1000);
  }
  read_outputs(c, n);
}

void fm_child_release(fm_child_t *c) {
  free(c->out);
  free(c->err);
  c->out = c->err = NULL;
}

int fm_child_free_port(void) {
  int port = bagua__sock_spare_port(htonl(INADDR_LOOPBACK));
  ASSERT_TRUE(port > 0);
  return port;
}

fm_final_t fm_child_final(const fm_child_t *c) {
  fm_final_t f;
  const char *p = strstr(c->out, "final rank=");
  if (!p) TEST_FAIL("no final line in:\n%s\nstderr:\n%s", c->out, c->err);
  if (strstr(p + 1, "final rank=")) TEST_FAIL("more than one final line in:\n%s", c->out);
  if (sscanf(p, "final rank=%d step=%lld params_crc=%15s test_acc=%lf", &f.rank, &f.step, f.crc,
             &f.acc) != 4)
    TEST_FAIL("malformed final line in:\n%s", c->out);
  return f;
}

int fm_replicas_identical(const char *alg) {
  return strcmp(alg, "decentralized") != 0 && strcmp(alg, "low_precision_decentralized") != 0 &&
         strcmp(alg, "async") != 0;
}
