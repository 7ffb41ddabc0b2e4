/*
 * Private etcd for standalone jobs: free ports, a mkdtemp directory, a keeper process that
 * guarantees clean-up however the launcher ends, and a health poll bounded by a deadline.
 */
#include "etcd_local.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/sock.h"

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  remove(path);
  return 0;
}

void bagua__launch_remove_tree(const char *dir) {
  if (dir && dir[0]) nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* A TCP port on `addr` that was free a moment ago, or -1. */
static int free_port(const char *addr) {
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
  if (inet_pton(AF_INET, addr, &a.sin_addr) != 1) return -1;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  socklen_t len = sizeof(a);
  int port = -1;
  if (bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
      getsockname(fd, (struct sockaddr *)&a, &len) == 0)
    port = ntohs(a.sin_port);
  close(fd);
  return port;
}

/* One GET /health; 1 when etcd answers healthy. Bounded by a one-second socket timeout. */
static int healthy_once(const char *addr, int port) {
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  if (inet_pton(AF_INET, addr, &a.sin_addr) != 1) return 0;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  struct timeval tv = {1, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  int ok = 0;
  if (connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0) {
    char req[128];
    int n = snprintf(req, sizeof(req), "GET /health HTTP/1.0\r\nHost: %s\r\n\r\n", addr);
    if (send(fd, req, (size_t)n, MSG_NOSIGNAL) == n) {
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

/* Waits up to `ms` for `pid`; 1 when it has been reaped. */
static int reap(pid_t pid, int ms) {
  int64_t deadline = bagua__now_ms() + ms;
  for (;;) {
    int status;
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid || (r < 0 && errno != EINTR)) return 1;
    if (bagua__now_ms() >= deadline) return 0;
    sleep_ms(5);
  }
}

/*
 * The keeper: runs etcd and waits for the control pipe to close. Runs in a forked copy of the
 * launcher, so it only uses system calls and never returns.
 */
static void keeper_main(char *const argv[], const char *bin, const char *log_path, const char *dir,
                        int ctl_rd, int evt_wr) {
  /* Its own process group: a terminal's Ctrl-C goes to the launcher, which decides. */
  setpgid(0, 0);
  /* Keep only the two pipe ends (as fds 3 and 4) and stdio. */
  if (dup2(ctl_rd, 3) < 0 || dup2(evt_wr, 4) < 0) _exit(1);
  closefrom(5);
  ctl_rd = 3;
  evt_wr = 4;
  pid_t keeper = getpid();
  pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != keeper) _exit(127);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    signal(SIGPIPE, SIG_DFL);
    int log = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (log >= 0) {
      dup2(log, 1);
      dup2(log, 2);
    }
    if (null >= 0) dup2(null, 0);
    closefrom(3);
    execv(bin, argv);
    dprintf(2, "cannot run %s: %s\n", bin, strerror(errno));
    _exit(127);
  }
  if (pid < 0) {
    (void)!write(evt_wr, "x", 1);
  }
  for (;;) {
    struct pollfd p = {.fd = ctl_rd, .events = POLLIN};
    int r = poll(&p, 1, 100);
    if (r > 0) {
      char c;
      ssize_t n = read(ctl_rd, &c, 1);
      if (n <= 0 && !(n < 0 && errno == EINTR)) break; /* end of file: the launcher is done */
    }
    if (pid > 0) {
      int status;
      if (waitpid(pid, &status, WNOHANG) == pid) {
        pid = 0;
        (void)!write(evt_wr, "x", 1);
      }
    }
  }
  if (pid > 0) {
    kill(pid, SIGTERM);
    kill(pid, SIGCONT);
    if (!reap(pid, LAUNCH_ETCD_STOP_TIMEOUT_MS)) {
      kill(pid, SIGKILL);
      reap(pid, LAUNCH_ETCD_STOP_TIMEOUT_MS);
    }
  }
  bagua__launch_remove_tree(dir);
  _exit(0);
}

/* Forks the keeper for one attempt on fresh ports. Returns 0 or -1 (errno-style message). */
static int spawn(const char *bin, bagua__launch_etcd_t *e, char *err, size_t errlen) {
  char data_dir[96], client[160], advertise[96], peer[64], cluster[96], token[64];
  int peer_port;
  do {
    e->client_port = free_port(e->addr);
    peer_port = free_port("127.0.0.1");
  } while (e->client_port > 0 && e->client_port == peer_port);
  if (e->client_port < 0 || peer_port < 0) {
    snprintf(err, errlen, "no free TCP port on %s: %s", e->addr, strerror(errno));
    return -1;
  }
  snprintf(data_dir, sizeof(data_dir), "%s/data", e->dir);
  snprintf(advertise, sizeof(advertise), "http://%s:%d", e->addr, e->client_port);
  /* Local agents and the launcher itself use loopback even when other hosts use `addr`. */
  if (strcmp(e->addr, "127.0.0.1") == 0)
    snprintf(client, sizeof(client), "%s", advertise);
  else
    snprintf(client, sizeof(client), "%s,http://127.0.0.1:%d", advertise, e->client_port);
  snprintf(peer, sizeof(peer), "http://127.0.0.1:%d", peer_port);
  snprintf(cluster, sizeof(cluster), "bagua-launch=%s", peer);
  snprintf(token, sizeof(token), "bagua-launch-%d-%d", (int)getpid(), e->client_port);
  snprintf(e->endpoint, sizeof(e->endpoint), "%s:%d", e->addr, e->client_port);
  /*
   * A single member elects itself after one election timeout, so short timings make start-up
   * fast; with no peers they cost nothing afterwards.
   */
  char *const argv[] = {(char *)bin,    "--name",
                        "bagua-launch", "--data-dir",
                        data_dir,       "--listen-client-urls",
                        client,         "--advertise-client-urls",
                        advertise,      "--listen-peer-urls",
                        peer,           "--initial-advertise-peer-urls",
                        peer,           "--initial-cluster",
                        cluster,        "--initial-cluster-token",
                        token,          "--initial-cluster-state",
                        "new",          "--heartbeat-interval",
                        "20",           "--election-timeout",
                        "200",          "--logger",
                        "zap",          "--log-outputs",
                        "stderr",       NULL};
  int ctl[2], evt[2];
  if (pipe2(ctl, O_CLOEXEC) != 0) {
    snprintf(err, errlen, "pipe: %s", strerror(errno));
    return -1;
  }
  if (pipe2(evt, O_CLOEXEC) != 0) {
    snprintf(err, errlen, "pipe: %s", strerror(errno));
    close(ctl[0]);
    close(ctl[1]);
    return -1;
  }
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    close(ctl[1]);
    close(evt[0]);
    keeper_main(argv, bin, e->log_path, e->dir, ctl[0], evt[1]);
  }
  close(ctl[0]);
  close(evt[1]);
  if (pid < 0) {
    snprintf(err, errlen, "fork: %s", strerror(errno));
    close(ctl[1]);
    close(evt[0]);
    return -1;
  }
  /* Also set here, so the launcher never signals its own group by mistake in between. */
  setpgid(pid, pid);
  e->keeper = pid;
  e->ctl_fd = ctl[1];
  e->evt_fd = evt[0];
  return 0;
}

int bagua__launch_etcd_died(bagua__launch_etcd_t *e) {
  if (e->keeper <= 0) return 1;
  struct pollfd p = {.fd = e->evt_fd, .events = POLLIN};
  return poll(&p, 1, 0) > 0;
}

void bagua__launch_etcd_dump_log(const bagua__launch_etcd_t *e, long max_bytes) {
  FILE *f = fopen(e->log_path, "r");
  if (!f) return;
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, size > max_bytes ? size - max_bytes : 0, SEEK_SET);
  fprintf(stderr, "---- end of the private etcd's log (%s) ----\n", e->log_path);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) fwrite(buf, 1, n, stderr);
  fprintf(stderr, "---- end of etcd log ----\n");
  fclose(f);
}

/* Stops the keeper of one attempt without removing the directory. */
static void stop_keeper(bagua__launch_etcd_t *e) {
  if (e->keeper <= 0) return;
  close(e->ctl_fd);
  close(e->evt_fd);
  /* The keeper needs at most the etcd stop timeout twice (SIGTERM, then SIGKILL). */
  if (!reap(e->keeper, 2 * LAUNCH_ETCD_STOP_TIMEOUT_MS + 1000)) {
    kill(e->keeper, SIGKILL);
    reap(e->keeper, 1000);
  }
  e->keeper = 0;
}

/* Reads pending signals from a signalfd; returns the first stop signal, or 0. */
static int stop_signal(int sigfd) {
  struct signalfd_siginfo si;
  int got = 0;
  while (sigfd >= 0 && read(sigfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
    int s = (int)si.ssi_signo;
    if (!got && (s == SIGINT || s == SIGTERM || s == SIGHUP)) got = s;
  }
  return got;
}

int bagua__launch_etcd_start(const char *bin, const char *addr, int sigfd, bagua__launch_etcd_t *e,
                             char *err, size_t errlen) {
  memset(e, 0, sizeof(*e));
  e->ctl_fd = e->evt_fd = -1;
  snprintf(e->addr, sizeof(e->addr), "%s", addr);
  if (access(bin, X_OK) != 0) {
    snprintf(err, errlen,
             "cannot run etcd %s: %s; accepted: --etcd-bin PATH, or --rdzv-endpoint of a running "
             "etcd (Debian package etcd-server)",
             bin, strerror(errno));
    return -1;
  }
  int64_t t0 = bagua__now_ms();
  /* Ports are probed free and then handed to etcd, so another process can take them in
   * between; an etcd that exits during start-up is retried on fresh ports and a fresh
   * directory (stopping the keeper removes the old one). */
  for (int attempt = 0; attempt < 3; attempt++) {
    snprintf(e->dir, sizeof(e->dir), "/tmp/bagua-launch-XXXXXX");
    if (!mkdtemp(e->dir)) {
      snprintf(err, errlen, "mkdtemp %s: %s", e->dir, strerror(errno));
      e->dir[0] = '\0';
      return -1;
    }
    snprintf(e->log_path, sizeof(e->log_path), "%s/etcd.log", e->dir);
    if (spawn(bin, e, err, errlen) != 0) goto fail;
    int64_t deadline = bagua__now_ms() + LAUNCH_ETCD_START_TIMEOUT_MS;
    int exited = 0;
    while (!exited) {
      if (healthy_once(e->addr, e->client_port)) {
        BAGUA_INFO(BAGUA_SUBSYS_LAUNCH, "private etcd healthy at %s after %lld ms (dir %s)",
                   e->endpoint, (long long)(bagua__now_ms() - t0), e->dir);
        return 0;
      }
      struct pollfd p[2] = {{.fd = e->evt_fd, .events = POLLIN}, {.fd = sigfd, .events = POLLIN}};
      int r = poll(p, sigfd >= 0 ? 2 : 1, 10);
      if (r > 0 && p[0].revents) exited = 1;
      if (r > 0 && sigfd >= 0 && p[1].revents) {
        int sig = stop_signal(sigfd);
        if (sig) {
          bagua__launch_etcd_stop(e);
          return sig;
        }
      }
      if (bagua__now_ms() >= deadline) {
        bagua__launch_etcd_dump_log(e, 3000);
        snprintf(err, errlen, "the private etcd at %s was not healthy within %d ms", e->endpoint,
                 LAUNCH_ETCD_START_TIMEOUT_MS);
        goto fail;
      }
    }
    BAGUA_INFO(BAGUA_SUBSYS_LAUNCH, "private etcd exited during start-up (attempt %d)",
               attempt + 1);
    if (attempt == 2) bagua__launch_etcd_dump_log(e, 3000);
    stop_keeper(e);
    bagua__launch_remove_tree(e->dir);
  }
  snprintf(err, errlen, "the private etcd exited during start-up three times (log above)");
fail:
  bagua__launch_etcd_stop(e);
  return -1;
}

void bagua__launch_etcd_stop(bagua__launch_etcd_t *e) {
  stop_keeper(e);
  /* The keeper removes the directory; this covers a keeper that was killed first. */
  bagua__launch_remove_tree(e->dir);
  e->dir[0] = '\0';
}
