/*
 * The private etcd helper (launcher/etcd_server.h) on its own: the failures a start reports and
 * the clean-up after each; a direct etcd that goes down and up on the same port, is frozen
 * and is still stopped within the stop timeout; calls from another process do nothing; a
 * start aborted by a signal; and etcd under a keeper, which stops etcd and removes the
 * directory once the process that started it is gone.
 */
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bagua/error.h"
#include "etcd_server.h"
#include "common/time.h"
#include "etcd_fixture.h"
#include "test.h"

/* Every directory of this test starts with this prefix (set in main, unique per run). */
static char g_prefix[64];

/* Number of directories PREFIX-* left in /tmp. */
static int count_dirs(void) {
  const char *base = strrchr(g_prefix, '/') + 1;
  DIR *d = opendir("/tmp");
  if (!d) TEST_FAIL("opendir /tmp");
  int n = 0;
  struct dirent *de;
  while ((de = readdir(d)) != NULL)
    if (strncmp(de->d_name, base, strlen(base)) == 0) n++;
  closedir(d);
  return n;
}

static int dir_exists(const char *dir) {
  struct stat sb;
  return stat(dir, &sb) == 0;
}

/* A fake etcd that never answers: a shell script that sleeps. */
static void write_sleeper(char *path, size_t len) {
  snprintf(path, len, "/tmp/bagua-etcd-local-sleeper-%d.sh", (int)getpid());
  FILE *f = fopen(path, "w");
  if (!f) TEST_FAIL("cannot write %s", path);
  fprintf(f, "#!/bin/sh\nexec sleep 30\n");
  fclose(f);
  chmod(path, 0755);
}

static bagua__etcd_local_opts_t opts_for(const char *bin) {
  bagua__etcd_local_opts_t o = BAGUA__ETCD_LOCAL_OPTS_INIT;
  o.bin = bin;
  o.name = "local-test";
  o.dir_prefix = g_prefix;
  return o;
}

/* Failed starts report why and leave no directory or process behind. */
static void test_start_failures(void) {
  bagua__etcd_local_t e;
  bagua__etcd_local_opts_t o = opts_for("/nonexistent/etcd");
  ASSERT_STATUS(bagua__etcd_local_start(&e, &o), BAGUA_ERR_INVALID_ARG);
  ASSERT_TRUE(strstr(e.err, "cannot run etcd /nonexistent/etcd") != NULL);

  /* An etcd that exits at once is tried three times on fresh directories. */
  o = opts_for("/bin/false");
  ASSERT_STATUS(bagua__etcd_local_start(&e, &o), BAGUA_ERR_REMOTE);
  ASSERT_TRUE(strstr(e.err, "exited during start-up three times") != NULL);
  ASSERT_EQ(count_dirs(), 0);

  /* One that never answers is given up after the start timeout, and stopped. */
  char sleeper[128];
  write_sleeper(sleeper, sizeof(sleeper));
  o = opts_for(sleeper);
  o.start_timeout_ms = 300;
  long long t0 = bagua__now_ms();
  ASSERT_STATUS(bagua__etcd_local_start(&e, &o), BAGUA_ERR_TIMEOUT);
  ASSERT_LT(bagua__now_ms() - t0, 3000);
  ASSERT_TRUE(strstr(e.err, "not healthy within 300 ms") != NULL);
  ASSERT_EQ(e.pid, 0);
  ASSERT_EQ(count_dirs(), 0);
  ASSERT_OK(bagua__etcd_local_stop(&e)); /* safe after a failed start */
  unlink(sleeper);
}

/* A stop signal read from the signalfd aborts the start, directly and under a keeper. */
static void test_start_signal(int keeper) {
  char sleeper[128];
  write_sleeper(sleeper, sizeof(sleeper));
  sigset_t mask, old;
  sigemptyset(&mask);
  sigaddset(&mask, SIGHUP);
  sigprocmask(SIG_BLOCK, &mask, &old);
  int sigfd = signalfd(-1, &mask, SFD_CLOEXEC);
  ASSERT_TRUE(sigfd >= 0);
  pid_t parent = getpid(), kid = fork();
  if (kid == 0) {
    bagua__sleep_ms(300);
    kill(parent, SIGHUP);
    _exit(0);
  }
  bagua__etcd_local_t e;
  bagua__etcd_local_opts_t o = opts_for(sleeper);
  o.keeper = keeper;
  o.sigfd = sigfd;
  long long t0 = bagua__now_ms();
  ASSERT_STATUS(bagua__etcd_local_start(&e, &o), BAGUA_ERR_ABORTED);
  ASSERT_LT(bagua__now_ms() - t0, 5000);
  ASSERT_EQ(e.signo, SIGHUP);
  ASSERT_EQ(e.keeper, 0);
  ASSERT_EQ(count_dirs(), 0);
  waitpid(kid, NULL, 0);
  close(sigfd);
  sigprocmask(SIG_SETMASK, &old, NULL);
  unlink(sleeper);
}

/* Run directly: down and up on the same port and data, frozen, other processes refused. */
static void test_direct(void) {
  bagua__etcd_local_t e;
  bagua__etcd_local_opts_t o = opts_for(NULL);
  ASSERT_OK(bagua__etcd_local_start(&e, &o));
  ASSERT_GT(e.pid, 0);
  ASSERT_EQ(e.keeper, 0);
  ASSERT_EQ(bagua__etcd_local_exited(&e), 0);
  char dir[sizeof(e.dir)];
  snprintf(dir, sizeof(dir), "%s", e.dir);
  ASSERT_TRUE(dir_exists(e.data_dir));
  int port = e.client_port;

  ASSERT_OK(bagua__etcd_local_down(&e));
  ASSERT_EQ(e.pid, 0);
  ASSERT_EQ(bagua__etcd_local_exited(&e), 1);
  ASSERT_TRUE(dir_exists(e.data_dir));
  ASSERT_STATUS(bagua__etcd_local_signal(&e, SIGSTOP), BAGUA_ERR_INVALID_USAGE);
  ASSERT_OK(bagua__etcd_local_up(&e));
  ASSERT_EQ(e.client_port, port);
  ASSERT_STATUS(bagua__etcd_local_up(&e), BAGUA_ERR_INVALID_USAGE); /* already up */

  /* Another process may read the state but not act on it. */
  pid_t kid = fork();
  if (kid == 0) {
    int ok = bagua__etcd_local_stop(&e) == BAGUA_ERR_INVALID_USAGE &&
             bagua__etcd_local_signal(&e, SIGKILL) == BAGUA_ERR_INVALID_USAGE &&
             bagua__etcd_local_exited(&e) == 0;
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(kid, &status, 0), kid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ASSERT_OK(bagua__etcd_local_wait_healthy(&e, 5000));

  /* A frozen etcd does not answer, and is still stopped well within the stop timeout. */
  ASSERT_OK(bagua__etcd_local_signal(&e, SIGSTOP));
  ASSERT_STATUS(bagua__etcd_local_wait_healthy(&e, 300), BAGUA_ERR_TIMEOUT);
  long long t0 = bagua__now_ms();
  ASSERT_OK(bagua__etcd_local_stop(&e));
  ASSERT_LT(bagua__now_ms() - t0, BAGUA__ETCD_LOCAL_STOP_TIMEOUT_MS);
  ASSERT_EQ(e.pid, 0);
  ASSERT_TRUE(!dir_exists(dir));
  ASSERT_OK(bagua__etcd_local_stop(&e)); /* twice */
}

/* Under a keeper: healthy on loopback, no down/up, and gone with the process that started
 * it even when that process never calls stop. */
static void test_keeper(void) {
  bagua__etcd_local_t e;
  bagua__etcd_local_opts_t o = opts_for(NULL);
  o.keeper = 1;
  ASSERT_OK(bagua__etcd_local_start(&e, &o));
  ASSERT_GT(e.keeper, 0);
  ASSERT_EQ(e.pid, 0);
  ASSERT_TRUE(e.evt_fd >= 0 && e.ctl_fd >= 0);
  ASSERT_EQ(bagua__etcd_local_exited(&e), 0);
  ASSERT_OK(bagua__etcd_local_wait_healthy(&e, 5000));
  ASSERT_STATUS(bagua__etcd_local_down(&e), BAGUA_ERR_INVALID_USAGE);
  char dir[sizeof(e.dir)];
  snprintf(dir, sizeof(dir), "%s", e.dir);
  ASSERT_OK(bagua__etcd_local_stop(&e));
  ASSERT_EQ(e.keeper, 0);
  ASSERT_TRUE(!dir_exists(dir));

  /* A child starts etcd under a keeper, reports the directory and exits without stopping. */
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  pid_t kid = fork();
  if (kid == 0) {
    close(p[0]);
    bagua__etcd_local_t k;
    if (bagua__etcd_local_start(&k, &o) != BAGUA_OK) _exit(1);
    (void)!write(p[1], k.dir, sizeof(k.dir));
    _exit(0);
  }
  close(p[1]);
  memset(dir, 0, sizeof(dir));
  ASSERT_EQ(read(p[0], dir, sizeof(dir)), (long)sizeof(dir));
  close(p[0]);
  int status = 0;
  ASSERT_EQ(waitpid(kid, &status, 0), kid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  long long deadline = bagua__now_ms() + 2 * BAGUA__ETCD_LOCAL_STOP_TIMEOUT_MS;
  while (dir_exists(dir) && bagua__now_ms() < deadline) bagua__sleep_ms(20);
  ASSERT_TRUE(!dir_exists(dir));
}

int main(void) {
  if (!bagua__etcd_local_available(NULL))
    TEST_SKIP("%s not found; install the Debian package etcd-server", BAGUA__ETCD_LOCAL_BIN);
  snprintf(g_prefix, sizeof(g_prefix), "/tmp/bagua-etcd-local-test-%d", (int)getpid());
  test_start_failures();
  test_start_signal(0);
  test_start_signal(1);
  test_direct();
  test_keeper();
  ASSERT_EQ(count_dirs(), 0);
  printf("ok\n");
  return 0;
}
