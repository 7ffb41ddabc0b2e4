/* closefrom() and nftw() need the GNU feature set, which must be chosen before any include. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "etcd_fixture.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Live fixtures of this process, copied by value so the exit handler never follows a pointer
 * into a stack frame that no longer exists. */
#define MAX_LIVE 8
static struct {
  pid_t owner, pid;
  char dir[128];
} g_live[MAX_LIVE];
static int g_atexit_registered;

long long etcd_fixture_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

int etcd_fixture_available(void) {
  return access(ETCD_FIXTURE_BIN, X_OK) == 0;
}

int etcd_fixture_free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  int port = -1;
  if (bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
      getsockname(fd, (struct sockaddr *)&a, &len) == 0)
    port = ntohs(a.sin_port);
  close(fd);
  return port;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  remove(path);
  return 0;
}

static void remove_tree(const char *dir) {
  if (dir[0]) nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* Waits up to `ms` for `pid` to exit. Returns 1 if it has been reaped. */
static int reap(pid_t pid, int ms) {
  long long deadline = etcd_fixture_now_ms() + ms;
  for (;;) {
    int status;
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid || (r < 0 && errno == ECHILD)) return 1;
    if (etcd_fixture_now_ms() >= deadline) return 0;
    sleep_ms(5);
  }
}

static void kill_and_reap(pid_t pid) {
  kill(pid, SIGTERM);
  /* A frozen (SIGSTOP) etcd would keep SIGTERM pending forever. */
  kill(pid, SIGCONT);
  if (!reap(pid, ETCD_FIXTURE_STOP_TIMEOUT_MS)) {
    kill(pid, SIGKILL);
    reap(pid, ETCD_FIXTURE_STOP_TIMEOUT_MS);
  }
}

static void cleanup_at_exit(void) {
  for (int i = 0; i < MAX_LIVE; i++) {
    if (g_live[i].owner != getpid()) continue;
    if (g_live[i].pid > 0) kill_and_reap(g_live[i].pid);
    remove_tree(g_live[i].dir);
    g_live[i].owner = 0;
  }
}

static void track(const etcd_fixture_t *fx) {
  int free_slot = -1;
  for (int i = 0; i < MAX_LIVE; i++) {
    if (g_live[i].owner == fx->owner && strcmp(g_live[i].dir, fx->dir) == 0) {
      g_live[i].pid = fx->pid;
      return;
    }
    if (g_live[i].owner != getpid() && free_slot < 0) free_slot = i;
  }
  if (free_slot < 0) return;
  g_live[free_slot].owner = fx->owner;
  g_live[free_slot].pid = fx->pid;
  snprintf(g_live[free_slot].dir, sizeof(g_live[free_slot].dir), "%s", fx->dir);
  if (!g_atexit_registered) {
    atexit(cleanup_at_exit);
    g_atexit_registered = 1;
  }
}

static void untrack(const etcd_fixture_t *fx) {
  for (int i = 0; i < MAX_LIVE; i++)
    if (g_live[i].owner == fx->owner && strcmp(g_live[i].dir, fx->dir) == 0) g_live[i].owner = 0;
}

/* Forks and execs etcd with loopback-only client and peer URLs. */
static int spawn(etcd_fixture_t *fx) {
  char client[64], peer[64], cluster[96], token[64];
  snprintf(client, sizeof(client), "http://127.0.0.1:%d", fx->client_port);
  snprintf(peer, sizeof(peer), "http://127.0.0.1:%d", fx->peer_port);
  snprintf(cluster, sizeof(cluster), "fixture=%s", peer);
  snprintf(token, sizeof(token), "bagua-test-%d-%d", (int)fx->owner, fx->client_port);
  /*
   * A single member elects itself after one election timeout; a short one makes start-up and
   * restarts fast. Lease TTLs stay honoured to the second (etcd's minimum TTL derives from
   * these and is well under one second here).
   */
  char *const argv[] = {(char *)ETCD_FIXTURE_BIN,
                        "--name",
                        "fixture",
                        "--data-dir",
                        fx->data_dir,
                        "--listen-client-urls",
                        client,
                        "--advertise-client-urls",
                        client,
                        "--listen-peer-urls",
                        peer,
                        "--initial-advertise-peer-urls",
                        peer,
                        "--initial-cluster",
                        cluster,
                        "--initial-cluster-token",
                        token,
                        "--initial-cluster-state",
                        "new",
                        "--heartbeat-interval",
                        "20",
                        "--election-timeout",
                        "200",
                        "--logger",
                        "zap",
                        "--log-outputs",
                        "stderr",
                        NULL};
  pid_t parent = getpid();
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) {
    fprintf(stderr, "etcd fixture: fork failed: %s\n", strerror(errno));
    return -1;
  }
  if (pid == 0) {
    /* etcd must not outlive the test, even when the test is killed by ctest's timeout. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    int log = open(fx->log_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
    int null = open("/dev/null", O_RDONLY);
    if (log >= 0) {
      dup2(log, 1);
      dup2(log, 2);
    }
    if (null >= 0) dup2(null, 0);
    /* Sockets the test holds (fake servers, peers) must not stay open in etcd. */
    closefrom(3);
    execv(ETCD_FIXTURE_BIN, argv);
    _exit(127);
  }
  fx->pid = pid;
  track(fx);
  return 0;
}

/* One HTTP GET /health; returns 1 when etcd reports itself healthy. */
static int healthy_once(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  struct timeval tv = {1, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int ok = 0;
  if (connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0) {
    const char req[] = "GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    if (send(fd, req, sizeof(req) - 1, MSG_NOSIGNAL) == (ssize_t)sizeof(req) - 1) {
      char buf[2048];
      size_t len = 0;
      ssize_t r;
      while (len + 1 < sizeof(buf) && (r = recv(fd, buf + len, sizeof(buf) - 1 - len, 0)) > 0)
        len += (size_t)r;
      buf[len] = '\0';
      ok = strstr(buf, " 200 ") != NULL && strstr(buf, "\"health\":\"true\"") != NULL;
    }
  }
  close(fd);
  return ok;
}

int etcd_fixture_wait_healthy(etcd_fixture_t *fx, int timeout_ms) {
  long long deadline = etcd_fixture_now_ms() + timeout_ms;
  while (etcd_fixture_now_ms() < deadline) {
    if (fx->pid > 0) {
      int status;
      if (waitpid(fx->pid, &status, WNOHANG) == fx->pid) {
        fprintf(stderr, "etcd fixture: etcd (pid %d) exited during start-up (status 0x%x)\n",
                (int)fx->pid, status);
        fx->pid = 0;
        track(fx);
        return -1;
      }
    }
    if (healthy_once(fx->client_port)) return 0;
    sleep_ms(20);
  }
  fprintf(stderr, "etcd fixture: etcd on %s not healthy within %d ms\n", fx->endpoint, timeout_ms);
  return -1;
}

void etcd_fixture_dump_log(const etcd_fixture_t *fx, long max_bytes) {
  FILE *f = fopen(fx->log_path, "r");
  if (!f) return;
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, size > max_bytes ? size - max_bytes : 0, SEEK_SET);
  fprintf(stderr, "---- end of %s ----\n", fx->log_path);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) fwrite(buf, 1, n, stderr);
  fprintf(stderr, "---- end of etcd log ----\n");
  fclose(f);
}

static int is_owner(const etcd_fixture_t *fx) {
  return fx->owner == getpid();
}

int etcd_fixture_try_start(etcd_fixture_t *fx) {
  memset(fx, 0, sizeof(*fx));
  if (!etcd_fixture_available()) {
    printf("SKIP: %s not found; install the Debian package etcd-server\n", ETCD_FIXTURE_BIN);
    return 77;
  }
  fx->owner = getpid();
  /* Ports are probed free and then handed to etcd, so another process can take them in
   * between; a start that fails is retried on fresh ports. */
  for (int attempt = 0; attempt < 3; attempt++) {
    snprintf(fx->dir, sizeof(fx->dir), "/tmp/bagua-etcd-XXXXXX");
    if (!mkdtemp(fx->dir)) {
      fprintf(stderr, "etcd fixture: mkdtemp failed: %s\n", strerror(errno));
      fx->dir[0] = '\0';
      return -1;
    }
    snprintf(fx->data_dir, sizeof(fx->data_dir), "%s/data", fx->dir);
    snprintf(fx->log_path, sizeof(fx->log_path), "%s/etcd.log", fx->dir);
    do {
      fx->client_port = etcd_fixture_free_port();
      fx->peer_port = etcd_fixture_free_port();
    } while (fx->client_port == fx->peer_port && fx->client_port > 0);
    if (fx->client_port < 0 || fx->peer_port < 0) {
      fprintf(stderr, "etcd fixture: no free loopback port\n");
      remove_tree(fx->dir);
      return -1;
    }
    snprintf(fx->endpoint, sizeof(fx->endpoint), "http://127.0.0.1:%d", fx->client_port);
    snprintf(fx->host_port, sizeof(fx->host_port), "127.0.0.1:%d", fx->client_port);
    if (spawn(fx) == 0 && etcd_fixture_wait_healthy(fx, ETCD_FIXTURE_START_TIMEOUT_MS) == 0)
      return 0;
    etcd_fixture_dump_log(fx, 3000);
    if (fx->pid > 0) kill_and_reap(fx->pid);
    fx->pid = 0;
    untrack(fx);
    remove_tree(fx->dir);
  }
  fx->dir[0] = '\0';
  return -1;
}

void etcd_fixture_start(etcd_fixture_t *fx) {
  int rc = etcd_fixture_try_start(fx);
  if (rc == 77) exit(77);
  if (rc != 0) {
    fprintf(stderr, "FAIL: could not start etcd for the test\n");
    exit(1);
  }
}

int etcd_fixture_down(etcd_fixture_t *fx) {
  if (!is_owner(fx)) return -1;
  if (fx->pid > 0) kill_and_reap(fx->pid);
  fx->pid = 0;
  track(fx);
  return 0;
}

int etcd_fixture_up(etcd_fixture_t *fx) {
  if (!is_owner(fx) || fx->pid > 0) return -1;
  if (spawn(fx) != 0) return -1;
  if (etcd_fixture_wait_healthy(fx, ETCD_FIXTURE_START_TIMEOUT_MS) != 0) {
    etcd_fixture_dump_log(fx, 3000);
    return -1;
  }
  return 0;
}

int etcd_fixture_restart(etcd_fixture_t *fx) {
  if (etcd_fixture_down(fx) != 0) return -1;
  return etcd_fixture_up(fx);
}

int etcd_fixture_signal(etcd_fixture_t *fx, int sig) {
  if (!is_owner(fx) || fx->pid <= 0) return -1;
  return kill(fx->pid, sig);
}

int etcd_fixture_stop(etcd_fixture_t *fx) {
  if (!is_owner(fx)) return -1;
  if (fx->pid > 0) kill_and_reap(fx->pid);
  fx->pid = 0;
  untrack(fx);
  remove_tree(fx->dir);
  fx->dir[0] = '\0';
  return 0;
}
