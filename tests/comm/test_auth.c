/*
 * Authenticated, bounded handshakes (docs/security.md):
 *   vectors   SHA-256 (FIPS 180-4 examples) and HMAC-SHA256 (RFC 4231) test vectors, the
 *             constant-time comparison, and BAGUA_JOB_SECRET's validation
 *   theft     a client that knows the job hash and communicator id cannot take a rank slot
 *             when a secret is set (refused for authentication), and no refusal carries the
 *             job hash or the communicator id, with or without a secret
 *   silent    20 silent connections to the bootstrap root do not delay a 3-rank bootstrap
 *   streams   a data stream with the wrong secret is refused by a real rank; the right secret
 *             is accepted and the rank's reply proof checks out
 *   mismatch  ranks with different secrets, or a secret on one side only, fail with a message
 *             naming BAGUA_JOB_SECRET; equal secrets form a working communicator
 *   bind      the bootstrap root and the data streams listen on the address the rank
 *             advertises (the master address, or the route towards it), never on 0.0.0.0
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../test.h"
#include "bagua/bagua.h"
#include "comm/bootstrap.h"
#include "comm/wire.h"
#include "common/auth.h"
#include "common/params.h"
#include "common/sock.h"
#include "common/time.h"
#include "mp.h"

#define SECRET_A "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
#define SECRET_B "ff0102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"

static void set_secret(const char *s) {
  if (s)
    setenv("BAGUA_JOB_SECRET", s, 1);
  else
    unsetenv("BAGUA_JOB_SECRET");
  bagua__params_reload();
}

static void hex_eq(const uint8_t *got, const char *want) {
  char hex[2 * BAGUA_SHA256_BYTES + 1];
  bagua__auth_hex(got, BAGUA_SHA256_BYTES, hex);
  if (strcmp(hex, want) != 0) TEST_FAIL("digest %s, expected %s", hex, want);
}

static int vectors_test(void) {
  uint8_t d[32];
  /* FIPS 180-4 examples (NIST CSRC "SHA256.pdf") and the empty message. */
  bagua__sha256("abc", 3, d);
  hex_eq(d, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  bagua__sha256("", 0, d);
  hex_eq(d, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  bagua__sha256(two, strlen(two), d);
  hex_eq(d, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  /* One million 'a', fed in uneven pieces to exercise the buffering. */
  bagua__sha256_t s;
  bagua__sha256_init(&s);
  char a[997];
  memset(a, 'a', sizeof(a));
  size_t left = 1000000;
  for (size_t piece = 1; left > 0; piece = piece % 990 + 7) {
    size_t n = piece < left ? piece : left;
    bagua__sha256_update(&s, a, n);
    left -= n;
  }
  bagua__sha256_final(&s, d);
  hex_eq(d, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");

  /* RFC 4231 test cases 1, 2, 3, 6 (key longer than the block) and 7. */
  uint8_t key[131];
  memset(key, 0x0b, 20);
  bagua__hmac_sha256(key, 20, "Hi There", 8, d);
  hex_eq(d, "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  bagua__hmac_sha256("Jefe", 4, "what do ya want for nothing?", 28, d);
  hex_eq(d, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  uint8_t dd[50];
  memset(key, 0xaa, sizeof(key));
  memset(dd, 0xdd, sizeof(dd));
  bagua__hmac_sha256(key, 20, dd, sizeof(dd), d);
  hex_eq(d, "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
  const char *t6 = "Test Using Larger Than Block-Size Key - Hash Key First";
  bagua__hmac_sha256(key, 131, t6, strlen(t6), d);
  hex_eq(d, "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  const char *t7 =
      "This is a test using a larger than block-size key and a larger than block-size data. The "
      "key needs to be hashed before being used by the HMAC algorithm.";
  bagua__hmac_t m;
  bagua__hmac_init(&m, key, 131);
  bagua__hmac_update(&m, t7, 10);
  bagua__hmac_update(&m, t7 + 10, strlen(t7) - 10);
  bagua__hmac_final(&m, d);
  hex_eq(d, "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");

  uint8_t x[32] = {0}, y[32] = {0};
  ASSERT_TRUE(bagua__auth_equal(x, y, 32));
  y[31] = 1;
  ASSERT_TRUE(!bagua__auth_equal(x, y, 32));
  y[31] = 0;
  y[0] = 0x80;
  ASSERT_TRUE(!bagua__auth_equal(x, y, 32));

  uint8_t k[32];
  int have = -1;
  set_secret(NULL);
  ASSERT_OK(bagua__auth_job_key(k, &have));
  ASSERT_EQ(have, 0);
  set_secret(SECRET_A);
  ASSERT_OK(bagua__auth_job_key(k, &have));
  ASSERT_EQ(have, 1);
  ASSERT_EQ(k[0], 0);
  ASSERT_EQ(k[31], 0x1f);
  set_secret("abc");
  ASSERT_STATUS(bagua__auth_job_key(k, &have), BAGUA_ERR_INVALID_ARG);
  printf("short secret: %s\n", bagua_last_error());
  ASSERT_TRUE(strstr(bagua_last_error(), "BAGUA_JOB_SECRET") != NULL);
  ASSERT_TRUE(strstr(bagua_last_error(), "64 hexadecimal digits") != NULL);
  ASSERT_TRUE(strstr(bagua_last_error(), "abc") == NULL); /* the value is never printed */
  set_secret("zz0102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f");
  ASSERT_STATUS(bagua__auth_job_key(k, &have), BAGUA_ERR_INVALID_ARG);
  /* A communicator is not created with an invalid secret. */
  bagua_comm_config_t cfg = BAGUA_COMM_CONFIG_INIT;
  cfg.rank = 0;
  cfg.size = 2;
  cfg.bootstrap = "tcp://127.0.0.1:1";
  cfg.connect_timeout_ms = 2000;
  bagua_comm_t *c = NULL;
  ASSERT_TRUE(bagua_comm_create(&cfg, &c) != BAGUA_OK);
  set_secret(NULL);
  return 0;
}

/* ---------------------------------------------------------------------------------------- */

/* Forks a real rank `rank` of a `size`-rank tcp communicator on port; it allreduces once. */
static pid_t spawn_rank(int port, int rank, int size, const char *secret, int connect_ms) {
  fflush(stdout);
  fflush(stderr);
  pid_t p = fork();
  if (p != 0) return p;
  set_secret(secret);
  mp_opts_t o = {.nranks = size, .transport = BAGUA_TRANSPORT_TCP};
  bagua_comm_config_t cfg;
  mp_config(&o, port, rank, &cfg);
  if (connect_ms) cfg.connect_timeout_ms = connect_ms;
  bagua_comm_t *c = NULL;
  bagua_status_t st = bagua_comm_create(&cfg, &c);
  if (st != BAGUA_OK) {
    fprintf(stderr, "rank %d: create: %s: %s\n", rank, bagua_err_name(st), bagua_last_error());
    _exit(3);
  }
  int32_t v = rank + 1;
  if (bagua_allreduce(c, &v, &v, 1, BAGUA_I32, BAGUA_SUM) != BAGUA_OK || v != size * (size + 1) / 2)
    _exit(4);
  bagua_comm_destroy(c);
  _exit(0);
}

static int wait_ok(pid_t p) {
  int status = 0;
  waitpid(p, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static int connect_local(int port, int *fd) {
  uint32_t addr;
  bagua__resolve_ipv4("127.0.0.1", &addr);
  return bagua__connect(addr, (uint16_t)port, bagua__now_ms() + 10000, NULL, fd);
}

/* A refusal must name the reason only: no job hash, communicator id, rank or size. */
static void assert_bare(const bagua__wire_hdr_t *h) {
  ASSERT_EQ(h->job_hash, 0);
  ASSERT_EQ(h->comm_id, 0);
  ASSERT_EQ(h->rank, 0);
  ASSERT_EQ(h->size, 0);
}

/*
 * Plays rank 1 with the stolen job hash and communicator id (the old refusal leaked both) but
 * the given secret. Returns the refusal reason (0: accepted), and checks every header the root
 * sent before the proof for leaks.
 */
static uint32_t steal_slot(int port, uint64_t job, uint64_t comm, const char *secret) {
  set_secret(secret);
  int fd;
  ASSERT_OK(connect_local(port, &fd));
  bagua__wire_hdr_t h = {
      BAGUA_WIRE_MAGIC, BAGUA_WIRE_VERSION, BAGUA_MSG_BOOT_HELLO, 0, job, comm, 1, 2};
  bagua__endpoint_t ep = {0};
  bagua__hs_client_t cs;
  uint32_t refused = 0;
  bagua_status_t st =
      bagua__hs_hello(fd, &h, &ep, sizeof(ep), bagua__now_ms() + 10000, NULL, &cs, &refused);
  if (st == BAGUA_OK) {
    bagua__wire_hdr_t reply;
    bagua__endpoint_t table[2];
    st = bagua__hs_finish(fd, &cs, BAGUA_MSG_BOOT_TABLE, &reply, table, sizeof(table),
                          bagua__now_ms() + 10000, NULL, &refused);
    if (refused) assert_bare(&reply);
  }
  close(fd);
  return st == BAGUA_OK ? 0 : refused ? refused : 999;
}

/* Sends a raw header and returns the first reply header (zeros when none came). */
static bagua__wire_hdr_t raw_poke(int port, const bagua__wire_hdr_t *h) {
  int fd;
  ASSERT_OK(connect_local(port, &fd));
  bagua__send_all(fd, h, sizeof(*h), bagua__now_ms() + 2000, NULL);
  bagua__wire_hdr_t r = {0};
  if (bagua__recv_all(fd, &r, sizeof(r), bagua__now_ms() + 7000, NULL) != BAGUA_OK)
    memset(&r, 0, sizeof(r));
  close(fd);
  return r;
}

static int theft_test(void) {
  uint64_t job = bagua__hash64("test-job", 8, 0), comm = bagua__world_comm_id(job, 0);
  /* Without a secret: a wrong job hash is refused, and the refusal no longer carries the real
   * job hash or communicator id. */
  int port = mp_free_port();
  pid_t r0 = spawn_rank(port, 0, 2, NULL, 0);
  bagua__wire_hdr_t h = {
      BAGUA_WIRE_MAGIC, BAGUA_WIRE_VERSION, BAGUA_MSG_BOOT_HELLO, 0, job ^ 1, comm, 1, 2};
  bagua__wire_hdr_t r = raw_poke(port, &h);
  ASSERT_EQ(r.type, BAGUA_MSG_BOOT_NACK);
  ASSERT_EQ(r.arg, BAGUA_REFUSE_JOB);
  assert_bare(&r);
  pid_t r1 = spawn_rank(port, 1, 2, NULL, 0);
  ASSERT_EQ(wait_ok(r0), 0);
  ASSERT_EQ(wait_ok(r1), 0);

  /* With a secret: the thief knows the job hash and the communicator id, but not the secret.
   * It is refused for authentication, learns nothing, and the real rank 1 still joins. */
  port = mp_free_port();
  r0 = spawn_rank(port, 0, 2, SECRET_A, 0);
  ASSERT_EQ(steal_slot(port, job, comm, SECRET_B), BAGUA_REFUSE_AUTH);
  ASSERT_EQ(steal_slot(port, job, comm, NULL), 999); /* refuses locally: a secret is required */
  /* Any header, even a wrong job hash, gets the same content-free challenge: the root says
   * nothing about the header before the proof. */
  r = raw_poke(port, &h);
  ASSERT_EQ(r.type, BAGUA_MSG_CHALLENGE);
  ASSERT_EQ(r.arg, 1);
  assert_bare(&r);
  r1 = spawn_rank(port, 1, 2, SECRET_A, 0);
  ASSERT_EQ(wait_ok(r0), 0);
  ASSERT_EQ(wait_ok(r1), 0);
  set_secret(NULL);
  printf("theft: refused without leaking the job hash or communicator id\n");
  return 0;
}

/* `nsilent` connections that never send a byte are opened to the root before the real ranks
 * start; returns the seconds the 3-rank bootstrap and one allreduce took. */
static double silent_run(int nsilent) {
  int port = mp_free_port();
  double t0 = mp_now();
  pid_t r0 = spawn_rank(port, 0, 3, SECRET_A, 30000);
  int *fds = calloc((size_t)nsilent, sizeof(int));
  ASSERT_TRUE(fds != NULL);
  for (int i = 0; i < nsilent; i++) ASSERT_OK(connect_local(port, &fds[i]));
  pid_t r1 = spawn_rank(port, 1, 3, SECRET_A, 30000);
  pid_t r2 = spawn_rank(port, 2, 3, SECRET_A, 30000);
  ASSERT_EQ(wait_ok(r1), 0);
  ASSERT_EQ(wait_ok(r2), 0);
  ASSERT_EQ(wait_ok(r0), 0);
  double s = mp_now() - t0;
  for (int i = 0; i < nsilent; i++) close(fds[i]);
  free(fds);
  printf("silent: 3-rank bootstrap and allreduce with %d silent clients took %.2f s\n", nsilent, s);
  return s;
}

static int silent_test(void) {
  /* Served one at a time (2 s each) 20 silent clients cost over 40 s; served concurrently they
   * cost nothing. 200 is more than the root serves at once (128): the oldest silent ones give
   * way to the real ranks. */
  ASSERT_LT(silent_run(20) * 1000, 5000);
  ASSERT_LT(silent_run(200) * 1000, 5000);
  return 0;
}

/* ---------------------------------------------------------------------------------------- */

/* Plays rank 1 of a 2-rank tcp communicator: a real bootstrap, then the data stream. */
static int streams_test(void) {
  int port = mp_free_port();
  set_secret(SECRET_A);
  pid_t r0 = fork();
  if (r0 == 0) {
    mp_opts_t o = {.nranks = 2, .transport = BAGUA_TRANSPORT_TCP};
    bagua_comm_config_t cfg;
    mp_config(&o, port, 0, &cfg);
    cfg.connect_timeout_ms = 15000;
    bagua_comm_t *c = NULL;
    bagua_status_t st = bagua_comm_create(&cfg, &c);
    if (st != BAGUA_OK) _exit(3);
    bagua_comm_destroy(c);
    _exit(0);
  }
  uint64_t job = bagua__hash64("test-job", 8, 0), comm = bagua__world_comm_id(job, 0);
  uint32_t addr;
  bagua__resolve_ipv4("127.0.0.1", &addr);
  bagua__boot_tcp_t boot = {addr, (uint16_t)port};
  bagua__boot_ctx_t ctx = {1, 2, job, comm, bagua__now_ms() + 15000, NULL};
  bagua__endpoint_t mine = {0}, all[2];
  mine.node_hash = 42; /* another node than rank 0's: rank 0 expects BAGUA_NET_NSTREAMS */
  mine.rank = 1;
  /* Every record carries its stream count, which rank 0 compares with its own. */
  mine.nstreams = (uint16_t)bagua__param_int(BAGUA_P_NET_NSTREAMS);
  ASSERT_OK(bagua__bootstrap_tcp(&boot, &ctx, &mine, all));
  /* Rank 0 now waits for rank 1's data streams on all[0]. A stream with the wrong secret: */
  bagua__wire_hdr_t h = {
      BAGUA_WIRE_MAGIC, BAGUA_WIRE_VERSION, BAGUA_MSG_CONNECT, 0, job, comm, 1, 2};
  for (int attempt = 0; attempt < 2; attempt++) {
    set_secret(attempt == 0 ? SECRET_B : SECRET_A);
    int fd;
    ASSERT_OK(bagua__connect(all[0].addr, all[0].port, bagua__now_ms() + 5000, NULL, &fd));
    bagua__hs_client_t cs;
    uint32_t refused = 0;
    bagua__wire_hdr_t reply = {0};
    bagua_status_t st =
        bagua__hs_hello(fd, &h, NULL, 0, bagua__now_ms() + 5000, NULL, &cs, &refused);
    if (st == BAGUA_OK)
      st = bagua__hs_finish(fd, &cs, BAGUA_MSG_ACCEPT, &reply, NULL, 0, bagua__now_ms() + 5000,
                            NULL, &refused);
    if (attempt == 0) {
      ASSERT_STATUS(st, BAGUA_ERR_PROTOCOL);
      ASSERT_EQ(refused, BAGUA_REFUSE_AUTH);
      ASSERT_EQ(reply.type, BAGUA_MSG_REFUSE);
      assert_bare(&reply);
      close(fd);
      continue;
    }
    ASSERT_OK(st); /* the right secret: accepted, and rank 0's proof checked out */
    ASSERT_EQ(reply.type, BAGUA_MSG_ACCEPT);
    /* Rank 0 expects as many streams as the node hashes imply; it may want a second one. */
    int more =
        all[0].node_hash == mine.node_hash ? 0 : (int)bagua__param_int(BAGUA_P_NET_NSTREAMS) - 1;
    for (int s = 1; s <= more; s++) {
      int fd2;
      h.arg = (uint32_t)s;
      ASSERT_OK(bagua__connect(all[0].addr, all[0].port, bagua__now_ms() + 5000, NULL, &fd2));
      ASSERT_OK(bagua__hs_hello(fd2, &h, NULL, 0, bagua__now_ms() + 5000, NULL, &cs, &refused));
      ASSERT_OK(bagua__hs_finish(fd2, &cs, BAGUA_MSG_ACCEPT, &reply, NULL, 0,
                                 bagua__now_ms() + 5000, NULL, &refused));
    }
    ASSERT_EQ(wait_ok(r0), 0); /* rank 0 formed the communicator with the authenticated one */
  }
  set_secret(NULL);
  printf("streams: wrong secret refused (reason %d), right secret accepted\n", BAGUA_REFUSE_AUTH);
  return 0;
}

static int mismatch_test(void) {
  const char *pairs[3][2] = {{SECRET_A, SECRET_B}, {SECRET_A, NULL}, {NULL, SECRET_A}};
  for (int i = 0; i < 3; i++) {
    int port = mp_free_port();
    pid_t r0 = spawn_rank(port, 0, 2, pairs[i][0], 4000);
    pid_t r1 = spawn_rank(port, 1, 2, pairs[i][1], 4000);
    ASSERT_NE(wait_ok(r1), 0);
    ASSERT_NE(wait_ok(r0), 0);
  }
  /* Equal secrets: a working communicator (collectives over authenticated streams). */
  int port = mp_free_port();
  pid_t p[3];
  for (int r = 0; r < 3; r++) p[r] = spawn_rank(port, r, 3, SECRET_A, 0);
  for (int r = 0; r < 3; r++) ASSERT_EQ(wait_ok(p[r]), 0);
  return 0;
}

/* ---------------------------------------------------------------------------------------- */

/*
 * The listening TCP sockets of process `pid`: their local IPv4 addresses (network order) into
 * out[0..cap), read from /proc/net/tcp and matched by socket inode against /proc/PID/fd.
 */
static int listeners_of(pid_t pid, uint32_t *out, int cap) {
  unsigned long inodes[256];
  int ninodes = 0, n = 0;
  char path[64], link[64];
  snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
  DIR *d = opendir(path);
  if (!d) return 0;
  for (struct dirent *e; (e = readdir(d)) != NULL && ninodes < 256;) {
    char fdpath[320];
    snprintf(fdpath, sizeof(fdpath), "%s/%s", path, e->d_name);
    ssize_t len = readlink(fdpath, link, sizeof(link) - 1);
    if (len <= 0) continue;
    link[len] = '\0';
    unsigned long ino;
    if (sscanf(link, "socket:[%lu]", &ino) == 1) inodes[ninodes++] = ino;
  }
  closedir(d);
  FILE *f = fopen("/proc/net/tcp", "r");
  if (!f) return 0;
  char line[512];
  while (fgets(line, sizeof(line), f) && n < cap) {
    unsigned addr, port, st;
    unsigned long ino;
    if (sscanf(line, " %*d: %x:%x %*x:%*x %x %*x:%*x %*x:%*x %*x %*u %*u %lu", &addr, &port, &st,
               &ino) != 4 ||
        st != 0x0A)
      continue;
    for (int i = 0; i < ninodes; i++)
      if (inodes[i] == ino) out[n++] = (uint32_t)addr; /* the raw (network order) word */
  }
  fclose(f);
  return n;
}

/* Starts a lone rank of a 2-rank communicator bootstrapping at 127.0.0.2:port, waits until it
 * has `want` listeners and checks each one's address against `addr` (0: any but 0.0.0.0). */
static void check_bind(int rank, int want, const char *addr) {
  int port = mp_free_port();
  pid_t p = fork();
  if (p == 0) {
    mp_opts_t o = {.nranks = 2, .transport = BAGUA_TRANSPORT_TCP};
    bagua_comm_config_t cfg;
    mp_config(&o, port, rank, &cfg);
    static char boot[64];
    snprintf(boot, sizeof(boot), "tcp://127.0.0.2:%d", port);
    cfg.bootstrap = boot;
    cfg.connect_timeout_ms = 20000;
    bagua_comm_t *c = NULL;
    bagua_comm_create(&cfg, &c); /* the other rank never comes: killed while it waits */
    _exit(0);
  }
  uint32_t got[8], expect = 0;
  if (addr) bagua__resolve_ipv4(addr, &expect);
  int n = 0;
  for (int64_t end = bagua__now_ms() + 10000; bagua__now_ms() < end;) {
    n = listeners_of(p, got, 8);
    if (n >= want) break;
    struct timespec ts = {0, 20 * 1000000L};
    nanosleep(&ts, NULL);
  }
  kill(p, SIGKILL);
  wait_ok(p);
  if (n < want) TEST_FAIL("rank %d: %d listening sockets seen, expected %d", rank, n, want);
  for (int i = 0; i < n; i++) {
    char text[32];
    uint32_t be = got[i];
    bagua__ipv4_str(be, text, sizeof(text));
    printf("bind: rank %d listens on %s\n", rank, text);
    if (be == 0) TEST_FAIL("rank %d listens on 0.0.0.0", rank);
    if (addr && be != expect) TEST_FAIL("rank %d listens on %s, expected %s", rank, text, addr);
  }
}

static int bind_test(void) {
  set_secret(NULL);
  /* The root: its bootstrap listener and its data listener, both on the master address. */
  check_bind(0, 2, "127.0.0.2");
  /* Another rank: its data listener on the source address of the route to the root. */
  check_bind(1, 1, NULL);
  return 0;
}

int main(int argc, char **argv) {
  const char *which = argc > 1 ? argv[1] : "vectors";
  alarm(120);
  if (strcmp(which, "vectors") == 0) return vectors_test();
  if (strcmp(which, "theft") == 0) return theft_test();
  if (strcmp(which, "silent") == 0) return silent_test();
  if (strcmp(which, "streams") == 0) return streams_test();
  if (strcmp(which, "mismatch") == 0) return mismatch_test();
  if (strcmp(which, "bind") == 0) return bind_test();
  fprintf(stderr, "unknown case %s\n", which);
  return 2;
}
