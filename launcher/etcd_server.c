/*
 * A private single-member etcd server (see etcd_server.h): free ports, a mkdtemp directory, etcd
 * run directly or under a keeper process, a health poll bounded by a deadline, and a stop that
 * escalates from SIGTERM to SIGKILL after a bounded wait.
 */
#include "etcd_server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/check.h"
#include "common/log.h"
#include "common/sock.h"
#include "common/time.h"

/* Describes a failure in e->err; long paths are cut rather than the message refused. */
__attribute__((format(printf, 2, 3))) static void set_err(bagua__etcd_local_t *e, const char *fmt,
                                                          ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->err, sizeof(e->err), fmt, ap);
  va_end(ap);
}

/* The outcome of one wait for a healthy etcd. */
enum { READY, EXITED, TIMED_OUT, SIGNALLED };

/* etcd's command line, built before any fork so the child only makes system calls. */
typedef struct {
  char client[200], advertise[96], peer[96], cluster[1024], token[96];
  char *argv[32];
} etcd_args_t;

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  remove(path);
  return 0;
}

void bagua__etcd_local_remove_tree(const char *dir) {
  if (dir && dir[0]) nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

int bagua__etcd_local_available(const char *bin) {
  return access(bin ? bin : BAGUA__ETCD_LOCAL_BIN, X_OK) == 0;
}

int bagua__etcd_local_free_port(const char *addr) {
  uint32_t a;
  if (bagua__resolve_ipv4(addr ? addr : "127.0.0.1", &a) != BAGUA_OK) return -1;
  return bagua__sock_spare_port(a);
}

/* Waits up to `ms` for the child `pid`; 1 once it has been reaped (or is not our child). */
static int reap(pid_t pid, int ms) {
  int64_t deadline = bagua__deadline_in(ms);
  for (;;) {
    int status;
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid || (r < 0 && errno == ECHILD)) return 1;
    if (bagua__expired(deadline)) return 0;
    bagua__sleep_ms(5);
  }
}

int bagua__etcd_local_kill(pid_t pid, int stop_timeout_ms) {
  if (pid <= 0) return 1;
  kill(pid, SIGTERM);
  /* A frozen (SIGSTOP) etcd would keep SIGTERM pending forever. */
  kill(pid, SIGCONT);
  if (reap(pid, stop_timeout_ms)) return 1;
  kill(pid, SIGKILL);
  return reap(pid, stop_timeout_ms);
}

/* One GET /health; 1 when etcd answers healthy. Bounded by one-second socket timeouts, which
 * Linux applies to connect() as well. */
static int healthy_once(const char *addr, int port, int any_answer) {
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
      ok = any_answer ? strncmp(buf, "HTTP/", 5) == 0
                      : strstr(buf, " 200 ") != NULL && strstr(buf, "\"health\":\"true\"") != NULL;
    }
  }
  close(fd);
  return ok;
}

/* Reads the pending signals of a signalfd; returns the first stop signal, or 0. Each read is
 * preceded by a poll, so a signalfd opened without SFD_NONBLOCK cannot block here. */
static int stop_signal(int sigfd) {
  int got = 0;
  struct pollfd p = {.fd = sigfd, .events = POLLIN};
  struct signalfd_siginfo si;
  while (sigfd >= 0 && poll(&p, 1, 0) > 0 && read(sigfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
    int s = (int)si.ssi_signo;
    if (!got && (s == SIGINT || s == SIGTERM || s == SIGHUP)) got = s;
  }
  return got;
}

static void build_args(const bagua__etcd_local_t *e, etcd_args_t *a) {
  snprintf(a->advertise, sizeof(a->advertise), "http://%s:%d", e->addr, e->client_port);
  /* Local clients use loopback even when other hosts use `addr`. */
  if (strcmp(e->addr, "127.0.0.1") == 0)
    snprintf(a->client, sizeof(a->client), "%s", a->advertise);
  else
    snprintf(a->client, sizeof(a->client), "%s,http://127.0.0.1:%d", a->advertise, e->client_port);
  snprintf(a->peer, sizeof(a->peer), "http://%s:%d", e->peer_addr, e->peer_port);
  if (e->initial_cluster[0])
    snprintf(a->cluster, sizeof(a->cluster), "%s", e->initial_cluster);
  else
    snprintf(a->cluster, sizeof(a->cluster), "%s=%s", e->name, a->peer);
  snprintf(a->token, sizeof(a->token), "%s-%d-%d", e->name, (int)e->owner, e->client_port);
  /*
   * A single member elects itself after one election timeout, so short timings make start-up
   * and restarts fast; with no peers they cost nothing afterwards. Lease TTLs stay honoured to
   * the second (etcd's minimum TTL derives from these and is well under one second here).
   */
  char *const argv[] = {(char *)e->bin,
                        "--name",
                        (char *)e->name,
                        "--data-dir",
                        (char *)e->data_dir,
                        "--listen-client-urls",
                        a->client,
                        "--advertise-client-urls",
                        a->advertise,
                        "--listen-peer-urls",
                        a->peer,
                        "--initial-advertise-peer-urls",
                        a->peer,
                        "--initial-cluster",
                        a->cluster,
                        "--initial-cluster-token",
                        a->token,
                        "--initial-cluster-state",
                        e->initial_cluster[0] ? "existing" : "new",
                        "--heartbeat-interval",
                        "20",
                        "--election-timeout",
                        "200",
                        "--logger",
                        "zap",
                        "--log-outputs",
                        "stderr",
                        NULL};
  _Static_assert(sizeof(argv) <= sizeof(a->argv), "etcd_args_t.argv is too small");
  memcpy(a->argv, argv, sizeof(argv));
}

/*
 * Forks etcd with its output appended to the log. Returns the child's pid, or -1 with errno
 * set. The child only makes system calls before exec, so this is safe in a forked copy of a
 * multi-threaded process.
 */
static pid_t fork_etcd(const bagua__etcd_local_t *e, const etcd_args_t *a) {
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid != 0) return pid;
  /* etcd must not outlive its parent, even one killed by SIGKILL (or by ctest's timeout). The
   * signal is tied to the forking thread, hence the check that the parent is still there. */
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(127);
  /* The caller may block signals (bagua-launch reads them from a signalfd) or ignore SIGPIPE;
   * etcd gets the defaults so that SIGTERM stops it. */
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  signal(SIGPIPE, SIG_DFL);
  int log = open(e->log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (log >= 0) {
    dup2(log, 1);
    dup2(log, 2);
  }
  if (null >= 0) dup2(null, 0);
  /* Sockets and pipes the caller holds (fake servers, peers, the keeper's pipes) must not stay
   * open in etcd. */
  closefrom(3);
  execv(e->bin, a->argv);
  dprintf(2, "cannot run %s: %s\n", e->bin, strerror(errno));
  _exit(127);
}

/*
 * The keeper: runs etcd and waits for the control pipe to close, then stops etcd and removes
 * the directory. Runs in a forked copy of the caller and never returns.
 */
static void keeper_main(const bagua__etcd_local_t *e, const etcd_args_t *a, int ctl_rd,
                        int evt_wr) {
  /* Its own process group: a terminal's Ctrl-C goes to the caller, which decides. */
  setpgid(0, 0);
  /* Keep only the two pipe ends (as fds 3 and 4) and stdio. They are first copied above 4,
   * so that neither can be overwritten by the other's dup2(). */
  ctl_rd = fcntl(ctl_rd, F_DUPFD, 5);
  evt_wr = fcntl(evt_wr, F_DUPFD, 5);
  if (ctl_rd < 0 || evt_wr < 0 || dup2(ctl_rd, 3) < 0 || dup2(evt_wr, 4) < 0) _exit(1);
  closefrom(5);
  ctl_rd = 3;
  evt_wr = 4;
  pid_t pid = fork_etcd(e, a);
  if (pid < 0) (void)!write(evt_wr, "x", 1);
  for (;;) {
    struct pollfd p = {.fd = ctl_rd, .events = POLLIN};
    if (poll(&p, 1, 100) > 0) {
      char c;
      ssize_t n = read(ctl_rd, &c, 1);
      if (n <= 0 && !(n < 0 && errno == EINTR)) break; /* end of file: the caller is done */
    }
    int status;
    if (pid > 0 && waitpid(pid, &status, WNOHANG) == pid) {
      pid = 0;
      (void)!write(evt_wr, "x", 1);
    }
  }
  bagua__etcd_local_kill(pid, e->stop_timeout_ms);
  bagua__etcd_local_remove_tree(e->dir);
  _exit(0);
}

/* Starts the keeper, which starts etcd. */
static bagua_status_t spawn_keeper(bagua__etcd_local_t *e, const etcd_args_t *a) {
  int ctl[2], evt[2];
  if (pipe2(ctl, O_CLOEXEC) != 0) {
    set_err(e, "pipe: %s", strerror(errno));
    return BAGUA_ERR_SYSTEM;
  }
  if (pipe2(evt, O_CLOEXEC) != 0) {
    set_err(e, "pipe: %s", strerror(errno));
    close(ctl[0]);
    close(ctl[1]);
    return BAGUA_ERR_SYSTEM;
  }
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    close(ctl[1]);
    close(evt[0]);
    keeper_main(e, a, ctl[0], evt[1]);
  }
  int fork_errno = errno;
  close(ctl[0]);
  close(evt[1]);
  if (pid < 0) {
    set_err(e, "fork: %s", strerror(fork_errno));
    close(ctl[1]);
    close(evt[0]);
    return BAGUA_ERR_SYSTEM;
  }
  /* Also set here, so the caller never signals its own group by mistake in between. */
  setpgid(pid, pid);
  e->keeper = pid;
  e->ctl_fd = ctl[1];
  e->evt_fd = evt[0];
  return BAGUA_OK;
}

/* Starts etcd, directly or under a keeper, on the ports and directory already chosen. */
static bagua_status_t spawn(bagua__etcd_local_t *e, int keeper) {
  etcd_args_t a;
  build_args(e, &a);
  if (keeper) return spawn_keeper(e, &a);
  fflush(NULL);
  pid_t pid = fork_etcd(e, &a);
  if (pid < 0) {
    set_err(e, "fork: %s", strerror(errno));
    return BAGUA_ERR_SYSTEM;
  }
  e->pid = pid;
  return BAGUA_OK;
}

int bagua__etcd_local_exited(bagua__etcd_local_t *e) {
  if (e->keeper > 0) {
    /* Readable: the keeper reported etcd's exit; end of file: the keeper itself is gone. */
    struct pollfd p = {.fd = e->evt_fd, .events = POLLIN};
    return poll(&p, 1, 0) > 0;
  }
  if (e->pid <= 0) return 1;
  /* Only the parent can reap etcd; elsewhere waitpid() would report ECHILD for a live one. */
  if (e->owner != getpid()) return 0;
  int status;
  pid_t r = waitpid(e->pid, &status, WNOHANG);
  if (r == e->pid || (r < 0 && errno == ECHILD)) {
    e->pid = 0;
    return 1;
  }
  return 0;
}

/* Polls until etcd is healthy, has exited, the deadline passed or a stop signal arrived. */
static int wait_ready(bagua__etcd_local_t *e, int64_t deadline, int sigfd) {
  for (;;) {
    if (healthy_once(e->addr, e->client_port, e->initial_cluster[0] != '\0')) return READY;
    if (bagua__etcd_local_exited(e)) return EXITED;
    int64_t left = bagua__ms_left(deadline);
    if (left <= 0) return TIMED_OUT;
    /* poll() skips negative descriptors, so this also serves as the pause between probes. */
    struct pollfd p[2] = {{.fd = e->keeper > 0 ? e->evt_fd : -1, .events = POLLIN},
                          {.fd = sigfd, .events = POLLIN}};
    int r = poll(p, 2, left < 20 ? (int)left : 20);
    if (r > 0 && p[1].revents) {
      int sig = stop_signal(sigfd);
      if (sig) {
        e->signo = sig;
        return SIGNALLED;
      }
    }
  }
}

bagua_status_t bagua__etcd_local_wait_healthy(bagua__etcd_local_t *e, int timeout_ms) {
  switch (wait_ready(e, bagua__deadline_in(timeout_ms), -1)) {
    case READY:
      return BAGUA_OK;
    case EXITED:
      set_err(e, "etcd for %s exited (log: %s)", e->endpoint, e->log_path);
      return BAGUA_ERR_REMOTE;
    default:
      set_err(e, "etcd at %s was not healthy within %d ms", e->endpoint, timeout_ms);
      return BAGUA_ERR_TIMEOUT;
  }
}

void bagua__etcd_local_dump_log(const bagua__etcd_local_t *e, long max_bytes) {
  FILE *f = e->log_path[0] ? fopen(e->log_path, "r") : NULL;
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

/* Stops the keeper (which stops etcd and removes the directory) or etcd; keeps `dir`. */
static void stop_processes(bagua__etcd_local_t *e) {
  if (e->pid > 0) bagua__etcd_local_kill(e->pid, e->stop_timeout_ms);
  e->pid = 0;
  if (e->keeper <= 0) return;
  close(e->ctl_fd);
  close(e->evt_fd);
  e->ctl_fd = e->evt_fd = -1;
  /* The keeper needs at most the stop timeout twice (SIGTERM, then SIGKILL). */
  if (!reap(e->keeper, 2 * e->stop_timeout_ms + 1000)) {
    kill(e->keeper, SIGKILL);
    reap(e->keeper, 1000);
  }
  e->keeper = 0;
}

/* Makes a fresh directory and picks fresh ports for one start attempt. */
static bagua_status_t prepare(bagua__etcd_local_t *e, const char *prefix, int client_port,
                              int peer_port) {
  snprintf(e->dir, sizeof(e->dir), "%s-XXXXXX", prefix);
  if (!mkdtemp(e->dir)) {
    set_err(e, "mkdtemp %s: %s", e->dir, strerror(errno));
    e->dir[0] = '\0';
    return BAGUA_ERR_SYSTEM;
  }
  snprintf(e->data_dir, sizeof(e->data_dir), "%s/data", e->dir);
  snprintf(e->log_path, sizeof(e->log_path), "%s/etcd.log", e->dir);
  if (client_port > 0 && client_port == peer_port) {
    set_err(e, "the etcd client and peer ports are both %d", client_port);
    return BAGUA_ERR_INVALID_ARG;
  }
  /* The client URL also listens on loopback, so the two ports must differ on any address. */
  do {
    e->client_port = client_port > 0 ? client_port : bagua__etcd_local_free_port(e->addr);
    e->peer_port = peer_port > 0 ? peer_port : bagua__etcd_local_free_port(e->peer_addr);
  } while (e->client_port > 0 && e->client_port == e->peer_port);
  if (e->client_port < 0 || e->peer_port < 0) {
    set_err(e, "no free TCP port on %s (the log says why)", e->addr);
    return BAGUA_ERR_SYSTEM;
  }
  snprintf(e->endpoint, sizeof(e->endpoint), "%s:%d", e->addr, e->client_port);
  return BAGUA_OK;
}

/* Copies a string option into a field; INVALID_ARG when it does not fit. */
static bagua_status_t copy_opt(bagua__etcd_local_t *e, char *dst, size_t cap, const char *src,
                               const char *what) {
  if (strlen(src) >= cap) {
    set_err(e, "the etcd %s is longer than %zu characters: %.200s", what, cap - 1, src);
    return BAGUA_ERR_INVALID_ARG;
  }
  memcpy(dst, src, strlen(src) + 1);
  return BAGUA_OK;
}

bagua_status_t bagua__etcd_local_start(bagua__etcd_local_t *e,
                                       const bagua__etcd_local_opts_t *opts) {
  const bagua__etcd_local_opts_t defaults = BAGUA__ETCD_LOCAL_OPTS_INIT;
  const bagua__etcd_local_opts_t *o = opts ? opts : &defaults;
  const char *prefix = o->dir_prefix ? o->dir_prefix : "/tmp/bagua-etcd";
  bagua_status_t st = BAGUA_OK;
  memset(e, 0, sizeof(*e));
  e->ctl_fd = e->evt_fd = -1;
  e->owner = getpid();
  e->start_timeout_ms =
      o->start_timeout_ms > 0 ? o->start_timeout_ms : BAGUA__ETCD_LOCAL_START_TIMEOUT_MS;
  e->stop_timeout_ms =
      o->stop_timeout_ms > 0 ? o->stop_timeout_ms : BAGUA__ETCD_LOCAL_STOP_TIMEOUT_MS;
  BAGUA_CHECK(
      copy_opt(e, e->bin, sizeof(e->bin), o->bin ? o->bin : BAGUA__ETCD_LOCAL_BIN, "binary path"));
  BAGUA_CHECK(copy_opt(e, e->addr, sizeof(e->addr), o->addr ? o->addr : "127.0.0.1", "address"));
  BAGUA_CHECK(copy_opt(e, e->name, sizeof(e->name), o->name ? o->name : "bagua", "member name"));
  BAGUA_CHECK(copy_opt(e, e->peer_addr, sizeof(e->peer_addr),
                       o->peer_addr ? o->peer_addr : "127.0.0.1", "peer address"));
  BAGUA_CHECK(copy_opt(e, e->initial_cluster, sizeof(e->initial_cluster),
                       o->initial_cluster ? o->initial_cluster : "", "initial cluster"));
  /* PREFIX-XXXXXX/etcd.log must fit in log_path. */
  if (strlen(prefix) + sizeof("-XXXXXX/etcd.log") > sizeof(e->log_path)) {
    set_err(e, "the etcd directory prefix is too long: %s", prefix);
    return BAGUA_ERR_INVALID_ARG;
  }
  if (!bagua__etcd_local_available(e->bin)) {
    set_err(e, "cannot run etcd %s: %s", e->bin, strerror(errno));
    return BAGUA_ERR_INVALID_ARG;
  }
  /* Ports are probed free and then handed to etcd, so another process can take them in
   * between; an etcd that exits during start-up is retried on fresh ports and a fresh
   * directory. */
  const int attempts = o->client_port > 0 ? 1 : BAGUA__ETCD_LOCAL_ATTEMPTS;
  for (int attempt = 0; attempt < attempts; attempt++) {
    BAGUA_CHECK_GOTO(prepare(e, prefix, o->client_port, o->peer_port), st, fail);
    BAGUA_CHECK_GOTO(spawn(e, o->keeper), st, fail);
    switch (wait_ready(e, bagua__deadline_in(e->start_timeout_ms), o->sigfd)) {
      case READY:
        return BAGUA_OK;
      case SIGNALLED:
        set_err(e, "SIG%s received while etcd was starting", sigabbrev_np(e->signo));
        st = BAGUA_ERR_ABORTED;
        goto fail;
      case TIMED_OUT:
        bagua__etcd_local_dump_log(e, 3000);
        set_err(e, "the private etcd at %s was not healthy within %d ms", e->endpoint,
                e->start_timeout_ms);
        st = BAGUA_ERR_TIMEOUT;
        goto fail;
      default:
        break;
    }
    BAGUA_INFO(BAGUA_SUBSYS_ETCD, "private etcd exited during start-up (attempt %d of %d)",
               attempt + 1, attempts);
    if (o->client_port > 0) {
      set_err(e, "etcd exited during start-up on port %d (someone else may hold it)",
              o->client_port);
      st = BAGUA_ERR_REMOTE;
      goto fail;
    }
    if (attempt + 1 == BAGUA__ETCD_LOCAL_ATTEMPTS) bagua__etcd_local_dump_log(e, 3000);
    stop_processes(e);
    bagua__etcd_local_remove_tree(e->dir);
    e->dir[0] = '\0';
  }
  _Static_assert(BAGUA__ETCD_LOCAL_ATTEMPTS == 3, "the message below says three times");
  set_err(e, "the private etcd exited during start-up three times (log above)");
  st = BAGUA_ERR_REMOTE;
fail:
  bagua__etcd_local_stop(e);
  return st;
}

/* The calls that act on etcd belong to the process that started it. */
static bagua_status_t check_owner(bagua__etcd_local_t *e, const char *what) {
  if (e->owner == getpid()) return BAGUA_OK;
  set_err(e, "etcd %s from process %d, which did not start etcd", what, (int)getpid());
  return BAGUA_ERR_INVALID_USAGE;
}

/* Down, up and signal need etcd to be a child of the caller. */
static bagua_status_t check_direct(bagua__etcd_local_t *e, const char *what) {
  BAGUA_CHECK(check_owner(e, what));
  if (e->keeper <= 0 && e->dir[0]) return BAGUA_OK;
  set_err(e, "etcd %s needs an etcd run directly and not stopped", what);
  return BAGUA_ERR_INVALID_USAGE;
}

bagua_status_t bagua__etcd_local_down(bagua__etcd_local_t *e) {
  BAGUA_CHECK(check_direct(e, "down"));
  stop_processes(e);
  return BAGUA_OK;
}

bagua_status_t bagua__etcd_local_up(bagua__etcd_local_t *e) {
  BAGUA_CHECK(check_direct(e, "up"));
  if (e->pid > 0) {
    set_err(e, "etcd up: etcd (pid %d) is already running", (int)e->pid);
    return BAGUA_ERR_INVALID_USAGE;
  }
  BAGUA_CHECK(spawn(e, 0));
  bagua_status_t st = bagua__etcd_local_wait_healthy(e, e->start_timeout_ms);
  if (st != BAGUA_OK) {
    bagua__etcd_local_dump_log(e, 3000);
    stop_processes(e);
  }
  return st;
}

bagua_status_t bagua__etcd_local_signal(bagua__etcd_local_t *e, int sig) {
  BAGUA_CHECK(check_direct(e, "signal"));
  if (e->pid <= 0 || kill(e->pid, sig) != 0) {
    set_err(e, "cannot signal etcd (pid %d): %s", (int)e->pid,
            e->pid <= 0 ? "it is down" : strerror(errno));
    return BAGUA_ERR_INVALID_USAGE;
  }
  return BAGUA_OK;
}

bagua_status_t bagua__etcd_local_stop(bagua__etcd_local_t *e) {
  /* A state that never started (zeroed, or filled by an initialiser) owns nothing. */
  if (e->owner == 0) return BAGUA_OK;
  BAGUA_CHECK(check_owner(e, "stop"));
  stop_processes(e);
  /* The keeper removes the directory; this covers a keeper that had to be killed. */
  bagua__etcd_local_remove_tree(e->dir);
  e->dir[0] = '\0';
  return BAGUA_OK;
}
