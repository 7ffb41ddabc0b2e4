/*
 * The agent's liveness channel under a hostile world (docs/security.md):
 *   auth     two agents with the same secret watch each other (a death is reported); with
 *            different secrets the connection never counts (no death is reported)
 *   prober   a prober that cannot prove the secret gets a challenge without the node id, and no
 *            hello after a wrong proof
 *   idle     inbound connections that never send their proof are closed after the hello bound
 *   flood    1100 connections against an agent whose descriptor limit is 256: the connections
 *            it holds stay under its cap, its descriptors under the limit, and it can still
 *            make pipes (start workers)
 *   emfile   with its descriptors exhausted, a failing accept() does not spin the poll loop,
 *            and accepting resumes once descriptors are free again
 *   bind     bagua__liveness_create_on binds the given address, not the wildcard
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "liveness.h"
#include "common/time.h"
#include "test.h"

#define SECRET_A "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
#define SECRET_B "ff0102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"

/* One pass of the agent's loop (wait.c's poll, then the ring's update of the peers to
 * watch); returns the number of deaths found. */
static int pass(bagua__liveness_t *l, const bagua__live_peer_t *peer, int timeout_ms) {
  size_t n = bagua__liveness_nfds(l);
  struct pollfd *pfd = calloc(n, sizeof(*pfd));
  ASSERT_TRUE(pfd != NULL);
  bagua__liveness_fill(l, pfd);
  int rc = poll(pfd, n, timeout_ms);
  int deaths = rc > 0 ? bagua__liveness_handle(l, pfd, n) : 0;
  free(pfd);
  /* The agent hands on its watched peers after every wait, even none. */
  bagua__liveness_update(l, peer, peer ? 1 : 0, bagua__now_ms());
  return deaths;
}

/* Drives both objects for ms milliseconds; returns the deaths `a` found. */
static int drive(bagua__liveness_t *a, const bagua__live_peer_t *pa, bagua__liveness_t *b, int ms) {
  int deaths = 0;
  int64_t end = bagua__now_ms() + ms;
  while (bagua__now_ms() < end) {
    deaths += pass(a, pa, 10);
    if (b) pass(b, NULL, 10);
  }
  return deaths;
}

static void peer_of(bagua__live_peer_t *p, const char *id, int port, int64_t lease) {
  memset(p, 0, sizeof(*p));
  snprintf(p->id, sizeof(p->id), "%s", id);
  snprintf(p->addr, sizeof(p->addr), "127.0.0.1");
  p->port = port;
  p->lease = lease;
}

/* A then watches B; returns whether A reported B's death after B went away (B leaves on
 * purpose, saying goodbye, when `leaves`). */
static int watched_end(const char *secret_a, const char *secret_b, int leaves) {
  int match = (!secret_a && !secret_b) || (secret_a && secret_b && !strcmp(secret_a, secret_b));
  bagua__liveness_t *a = bagua__liveness_create_on("node-a", "127.0.0.1");
  bagua__liveness_t *b = bagua__liveness_create_on("node-b", "127.0.0.1");
  ASSERT_TRUE(a && b);
  ASSERT_EQ(bagua__liveness_set_secret(a, secret_a), 0);
  ASSERT_EQ(bagua__liveness_set_secret(b, secret_b), 0);
  bagua__liveness_set_lease(b, 77);
  bagua__live_peer_t peer;
  peer_of(&peer, "node-b", bagua__liveness_port(b), 77);
  /* Wait for the hello to be confirmed (bounded); mismatched secrets never get there. */
  int64_t end = bagua__now_ms() + (match ? 10000 : 1000);
  while (bagua__now_ms() < end && bagua__liveness_confirmed(a) == 0) drive(a, &peer, b, 20);
  ASSERT_EQ(bagua__liveness_confirmed(a), match);
  /* B's side of the connection is up once it answered the proof. */
  end = bagua__now_ms() + 2000;
  while (match && bagua__now_ms() < end && bagua__liveness_incoming(b, NULL) == 0)
    drive(a, &peer, b, 20);
  if (leaves) bagua__liveness_leaving(b);
  bagua__liveness_destroy(b);
  int deaths = 0;
  end = bagua__now_ms() + (match && !leaves ? 10000 : 1000);
  while (bagua__now_ms() < end && deaths == 0) deaths += drive(a, &peer, NULL, 20);
  size_t nd = 0;
  const bagua__liveness_death_t *d = bagua__liveness_deaths(a, &nd);
  if (deaths) ASSERT_TRUE(nd == 1 && strcmp(d[0].id, "node-b") == 0 && d[0].lease == 77);
  /* After a goodbye the connection is closed, not reported. */
  if (leaves && match) ASSERT_EQ(bagua__liveness_confirmed(a), 0);
  bagua__liveness_destroy(a);
  return deaths > 0;
}

static int watched_death(const char *secret_a, const char *secret_b) {
  return watched_end(secret_a, secret_b, 0);
}

static int auth_test(void) {
  ASSERT_TRUE(watched_death(SECRET_A, SECRET_A));
  ASSERT_TRUE(watched_death(NULL, NULL)); /* unauthenticated, as before */
  ASSERT_TRUE(!watched_death(SECRET_A, SECRET_B));
  ASSERT_TRUE(!watched_death(SECRET_A, NULL));
  ASSERT_TRUE(!watched_death(NULL, SECRET_A));
  /* A node that leaves on purpose says goodbye (proved with the secret): no death. */
  ASSERT_TRUE(!watched_end(SECRET_A, SECRET_A, 1));
  ASSERT_TRUE(!watched_end(NULL, NULL, 1));
  bagua__liveness_t *a = bagua__liveness_create_on("node-a", "127.0.0.1");
  ASSERT_EQ(bagua__liveness_set_secret(a, "xyz"), -1);
  bagua__liveness_destroy(a);
  printf("auth: deaths count only between holders of the same secret\n");
  return 0;
}

static int connect_to(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
  return fd;
}

/* Reads what arrives on fd while driving l for ms; returns the bytes (0: EOF seen, -1: none). */
static ssize_t read_while(bagua__liveness_t *l, int fd, char *buf, size_t cap, int ms) {
  size_t got = 0;
  int64_t end = bagua__now_ms() + ms;
  fcntl(fd, F_SETFL, O_NONBLOCK);
  while (bagua__now_ms() < end) {
    pass(l, NULL, 10);
    ssize_t r = read(fd, buf + got, cap - 1 - got);
    if (r == 0) break;
    if (r > 0) got += (size_t)r;
  }
  buf[got] = '\0';
  return (ssize_t)got;
}

static int prober_test(void) {
  bagua__liveness_t *b = bagua__liveness_create_on("node-secret-id", "127.0.0.1");
  ASSERT_EQ(bagua__liveness_set_secret(b, SECRET_A), 0);
  bagua__liveness_set_lease(b, 4242);
  int fd = connect_to(bagua__liveness_port(b));
  char buf[512];
  read_while(b, fd, buf, sizeof(buf), 200);
  printf("prober sees: %s", buf);
  ASSERT_TRUE(strncmp(buf, "bagua-live2 1 ", 14) == 0);
  ASSERT_TRUE(strstr(buf, "node-secret-id") == NULL && strstr(buf, "4242") == NULL);
  /* A proof made without the secret: no hello, the connection is closed. */
  const char *bad =
      "00112233445566778899aabbccddeeff "
      "0000000000000000000000000000000000000000000000000000000000000000\n";
  ASSERT_EQ(write(fd, bad, strlen(bad)), (ssize_t)strlen(bad));
  ssize_t n = read_while(b, fd, buf, sizeof(buf), 300);
  ASSERT_EQ(n, 0);
  close(fd);
  size_t cap = 0;
  ASSERT_EQ(bagua__liveness_incoming(b, &cap), 0);
  bagua__liveness_destroy(b);
  return 0;
}

static int idle_test(void) {
  bagua__liveness_t *b = bagua__liveness_create_on("node-b", "127.0.0.1");
  ASSERT_EQ(bagua__liveness_set_secret(b, SECRET_A), 0);
  int fds[30];
  for (int i = 0; i < 30; i++) fds[i] = connect_to(bagua__liveness_port(b));
  int64_t t0 = bagua__now_ms();
  while (bagua__now_ms() - t0 < 500) pass(b, NULL, 10);
  size_t cap = 0;
  ASSERT_EQ(bagua__liveness_incoming(b, &cap), 30);
  /* The hello bound is 2 s: by 3 s every silent connection is closed. */
  while (bagua__now_ms() - t0 < 3000) pass(b, NULL, 10);
  ASSERT_EQ(bagua__liveness_incoming(b, &cap), 0);
  char c;
  for (int i = 0; i < 30; i++) {
    ASSERT_EQ(read(fds[i], &c, 0), 0);
    close(fds[i]);
  }
  bagua__liveness_destroy(b);
  return 0;
}

static int count_fds(void) {
  int n = 0;
  DIR *d = opendir("/proc/self/fd");
  if (!d) return -1;
  for (struct dirent *e; (e = readdir(d));) n += e->d_name[0] != '.';
  closedir(d);
  return n - 1; /* the directory's own descriptor */
}

/* Connects n sockets without waiting (the kernel completes them from the backlog). */
static int *flood(int port, int n) {
  int *fds = calloc((size_t)n, sizeof(int));
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  for (int i = 0; i < n; i++) {
    fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    ASSERT_TRUE(fds[i] >= 0);
    connect(fds[i], (struct sockaddr *)&sa, sizeof(sa));
  }
  return fds;
}

/* The agent side runs in a child whose descriptor limit is 256, as a small ulimit would set. */
static int flood_test(void) {
  struct rlimit rl;
  getrlimit(RLIMIT_NOFILE, &rl);
  if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < 1200) {
    printf("skipped: the hard descriptor limit %lu is below 1200\n", (unsigned long)rl.rlim_max);
    return 77;
  }
  rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > 4096 ? 4096 : rl.rlim_max;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &rl), 0);
  int pfd[2];
  ASSERT_EQ(pipe(pfd), 0);
  fflush(stdout);
  pid_t child = fork();
  if (child == 0) {
    close(pfd[0]);
    struct rlimit small = {256, 256};
    ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &small), 0);
    bagua__liveness_t *l = bagua__liveness_create_on("node-b", "127.0.0.1");
    ASSERT_TRUE(l != NULL);
    ASSERT_EQ(bagua__liveness_set_secret(l, SECRET_A), 0);
    int port = bagua__liveness_port(l);
    ASSERT_EQ(write(pfd[1], &port, sizeof(port)), (ssize_t)sizeof(port));
    size_t cap = 0, most = 0;
    int most_fds = 0;
    int64_t end = bagua__now_ms() + 3000;
    while (bagua__now_ms() < end) {
      pass(l, NULL, 20);
      size_t held = bagua__liveness_incoming(l, &cap);
      if (held > most) most = held;
      int nfd = count_fds();
      if (nfd > most_fds) most_fds = nfd;
    }
    printf("flood: held at most %zu connections (cap %zu), %d descriptors (limit 256)\n", most, cap,
           most_fds);
    ASSERT_LE(cap, 64);
    ASSERT_LE(most, cap);
    ASSERT_LT(most_fds, 256 - 64);
    /* Workers can still be started: pipes and processes are available. */
    int p2[2];
    ASSERT_EQ(pipe(p2), 0);
    bagua__liveness_destroy(l);
    fflush(stdout);
    _exit(0);
  }
  close(pfd[1]);
  int port = 0;
  ASSERT_EQ(read(pfd[0], &port, sizeof(port)), (ssize_t)sizeof(port));
  int *fds = flood(port, 1100);
  int status = 0;
  waitpid(child, &status, 0);
  for (int i = 0; i < 1100; i++) close(fds[i]);
  free(fds);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  return 0;
}

static int emfile_test(void) {
  bagua__liveness_t *l = bagua__liveness_create_on("node-b", "127.0.0.1");
  ASSERT_TRUE(l != NULL);
  int port = bagua__liveness_port(l);
  /* Exhaust the descriptors under a small limit, then let connections wait in the backlog. */
  struct rlimit small = {64, 64};
  getrlimit(RLIMIT_NOFILE, &small);
  small.rlim_cur = 64;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &small), 0);
  int dummies[64], nd = 0;
  int conn[4];
  for (int i = 0; i < 4; i++) conn[i] = connect_to(port);
  for (int fd; nd < 64 && (fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;) dummies[nd++] = fd;
  ASSERT_EQ(errno, EMFILE);
  struct rusage r0, r1;
  getrusage(RUSAGE_SELF, &r0);
  int passes = 0;
  int64_t t0 = bagua__now_ms();
  while (bagua__now_ms() - t0 < 2000) {
    pass(l, NULL, 100); /* the agent's loop waits with a timeout like this one */
    passes++;
  }
  getrusage(RUSAGE_SELF, &r1);
  double cpu =
      (double)(r1.ru_utime.tv_sec - r0.ru_utime.tv_sec + r1.ru_stime.tv_sec - r0.ru_stime.tv_sec) +
      (double)(r1.ru_utime.tv_usec - r0.ru_utime.tv_usec + r1.ru_stime.tv_usec -
               r0.ru_stime.tv_usec) *
          1e-6;
  printf("emfile: %d passes and %.3f s of CPU in 2 s with accept failing\n", passes, cpu);
  /* A spinning loop makes thousands of passes and burns the whole 2 s of CPU. */
  ASSERT_LE(passes, 40);
  ASSERT_TRUE(cpu < 0.5);
  for (int i = 0; i < nd; i++) close(dummies[i]);
  int64_t t1 = bagua__now_ms();
  size_t held = 0, cap = 0;
  while (bagua__now_ms() - t1 < 3000 && (held = bagua__liveness_incoming(l, &cap)) < 4)
    pass(l, NULL, 50);
  ASSERT_EQ(held, 4); /* accepting resumed */
  for (int i = 0; i < 4; i++) close(conn[i]);
  bagua__liveness_destroy(l);
  return 0;
}

static int bind_test(void) {
  bagua__liveness_t *l = bagua__liveness_create_on("node-b", "127.0.0.1");
  ASSERT_TRUE(l != NULL);
  int fd = -1;
  /* The listener's own address: ask the kernel through a connection's peer name. */
  fd = connect_to(bagua__liveness_port(l));
  struct sockaddr_in sa;
  socklen_t len = sizeof(sa);
  ASSERT_EQ(getpeername(fd, (struct sockaddr *)&sa, &len), 0);
  close(fd);
  /* 127.0.0.2 is a local address too: a wildcard listener would accept there, this one not. */
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in other = {.sin_family = AF_INET,
                              .sin_port = htons((uint16_t)bagua__liveness_port(l))};
  inet_pton(AF_INET, "127.0.0.2", &other.sin_addr);
  int rc = connect(s, (struct sockaddr *)&other, sizeof(other));
  ASSERT_TRUE(rc != 0 && errno == ECONNREFUSED);
  close(s);
  bagua__liveness_destroy(l);
  ASSERT_TRUE(bagua__liveness_create_on("node-b", "no-such-host.invalid") == NULL);
  return 0;
}

int main(int argc, char **argv) {
  const char *which = argc > 1 ? argv[1] : "auth";
  signal(SIGPIPE, SIG_IGN);
  alarm(60);
  if (strcmp(which, "auth") == 0) return auth_test();
  if (strcmp(which, "prober") == 0) return prober_test();
  if (strcmp(which, "idle") == 0) return idle_test();
  if (strcmp(which, "flood") == 0) return flood_test();
  if (strcmp(which, "emfile") == 0) return emfile_test();
  if (strcmp(which, "bind") == 0) return bind_test();
  fprintf(stderr, "unknown case %s\n", which);
  return 2;
}
