/*
 * The authenticated handshake (comm/bootstrap_tcp.c, wire version 2) against a peer that sends
 * whatever it likes: both the server (bagua__hs_serve, which anyone who can reach a bootstrap
 * root or a rank's data port talks to) and the client (bagua__hs_hello + bagua__hs_finish,
 * which talks to whoever answers on the root's address). Whatever the peer sends, each side
 * returns within its deadline without a crash, admits nothing that bagua__wire_check refuses,
 * and, with a job secret, admits or accepts nothing at all (the peer cannot forge a proof over
 * a fresh random nonce).
 *
 * Input: a flags byte (bit 0: BAGUA_JOB_SECRET set; bit 1: fuzz the client, else the server),
 * then the bytes the peer sends, written before the side under test starts and followed by
 * end-of-file. The server side listens on loopback; the client side uses a socket pair.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "comm/bootstrap.h"
#include "comm/wire.h"
#include "common/params.h"
#include "common/sock.h"
#include "common/time.h"
#include "fuzz.h"

#define JOB_HASH 0x1122334455667788ull
#define COMM_ID 0x0102030405060708ull
#define WORLD 4
#define PAYLOAD 16
/* Short, so that a connection the server drops costs little fuzzing time; long enough for a
 * loopback accept and two reads. */
#define SERVER_DEADLINE_MS 5
#define CLIENT_DEADLINE_MS 200
#define PEER_MAX 512

static int g_lfd = -1;
static uint16_t g_port;
static int g_secret = -1;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  fuzz_quiet_log();
  uint32_t lo = 0;
  if (bagua__resolve_ipv4("127.0.0.1", &lo) != BAGUA_OK ||
      bagua__listen(lo, 0, &g_lfd, &g_port) != BAGUA_OK)
    abort();
  return 0;
}

static void use_secret(int on) {
  if (on == g_secret) return;
  if (on)
    setenv("BAGUA_JOB_SECRET", "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f",
           1);
  else
    unsetenv("BAGUA_JOB_SECRET");
  bagua__params_reload();
  g_secret = on;
}

typedef struct {
  int admitted;
} server_ctx_t;

static bagua_status_t admit(void *arg, const bagua__hs_peer_t *peer) {
  server_ctx_t *s = arg;
  uint32_t reason = 0;
  char why[160];
  /* What is admitted passed the header check and cannot come from a forger. */
  FUZZ_ASSERT(bagua__wire_check(&peer->hdr, BAGUA_MSG_BOOT_HELLO, JOB_HASH, COMM_ID, WORLD, &reason,
                                why, sizeof(why)) == 0);
  FUZZ_ASSERT(peer->hdr.rank >= 0 && peer->hdr.rank < WORLD);
  FUZZ_ASSERT(!g_secret);
  s->admitted++;
  close(peer->fd);
  return BAGUA_OK;
}

/*
 * A client socket connected to the listener. The harness makes hundreds of loopback connections
 * a second right after test suites that made many more, so a connect can fail for want of a
 * local port or backlog slot for a moment (a clean-clone CI run saw one after 2600 inputs, not
 * reproducible with the same input): that is the machine, not the code under test, so it is
 * retried for up to a second. The client closes with an RST (linger 0) and leaves no TIME_WAIT.
 */
static int connect_client(void) {
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(g_port)};
  bagua__resolve_ipv4("127.0.0.1", &sa.sin_addr.s_addr);
  for (int attempt = 0; attempt < 200; attempt++) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    FUZZ_ASSERT(fd >= 0);
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) return fd;
    int err = errno;
    close(fd);
    if (attempt == 199) {
      fprintf(stderr, "fuzz_handshake: connect to the listener failed 200 times: %s\n",
              strerror(err));
      abort();
    }
    usleep(5000);
  }
  return -1;
}

static void fuzz_server(const uint8_t *data, size_t size) {
  int fd = connect_client();
  if (size && send(fd, data, size, MSG_NOSIGNAL) != (ssize_t)size) abort();
  shutdown(fd, SHUT_WR);
  server_ctx_t ctx = {0};
  bagua__hs_server_t srv = {.type = BAGUA_MSG_BOOT_HELLO,
                            .nack_type = BAGUA_MSG_BOOT_NACK,
                            .job_hash = JOB_HASH,
                            .comm_id = COMM_ID,
                            .size = WORLD,
                            .payload_len = PAYLOAD,
                            .expected = 1,
                            .deadline_ms = bagua__now_ms() + SERVER_DEADLINE_MS,
                            .what = "fuzz",
                            .admit = admit,
                            .arg = &ctx};
  int64_t t0 = bagua__now_ms();
  bagua_status_t st = bagua__hs_serve(g_lfd, &srv);
  FUZZ_ASSERT(bagua__now_ms() - t0 < 1000);
  FUZZ_ASSERT(st == BAGUA_OK ? ctx.admitted == 1 : st == BAGUA_ERR_TIMEOUT);
  close(fd);
  /* A connection the server never accepted (its deadline came first) is drained here, so the
   * next input starts with an empty backlog. */
  struct pollfd p = {.fd = g_lfd, .events = POLLIN};
  while (poll(&p, 1, 0) == 1) {
    int a = accept(g_lfd, NULL, NULL);
    if (a < 0) break;
    close(a);
  }
}

static void fuzz_client(const uint8_t *data, size_t size) {
  int sv[2];
  FUZZ_ASSERT(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
  if (size && send(sv[1], data, size, MSG_NOSIGNAL) != (ssize_t)size) abort();
  shutdown(sv[1], SHUT_WR);
  bagua__wire_hdr_t h = {
      BAGUA_WIRE_MAGIC, BAGUA_WIRE_VERSION, BAGUA_MSG_BOOT_HELLO, 0, JOB_HASH, COMM_ID, 1, WORLD};
  uint8_t payload[PAYLOAD] = {0}, body[PAYLOAD];
  bagua__hs_client_t cs;
  bagua__wire_hdr_t reply;
  uint32_t refused = 0;
  int64_t t0 = bagua__now_ms(), deadline = t0 + CLIENT_DEADLINE_MS;
  bagua_status_t st =
      bagua__hs_hello(sv[0], &h, payload, sizeof(payload), deadline, NULL, &cs, &refused);
  if (st == BAGUA_OK)
    st = bagua__hs_finish(sv[0], &cs, BAGUA_MSG_BOOT_TABLE, &reply, body, sizeof(body), deadline,
                          NULL, &refused);
  FUZZ_ASSERT(bagua__now_ms() - t0 < 1000);
  if (st == BAGUA_OK) {
    /* Accepted: a reply of the type asked for, and never without the secret's proof. */
    FUZZ_ASSERT(reply.magic == BAGUA_WIRE_MAGIC && reply.type == BAGUA_MSG_BOOT_TABLE);
    FUZZ_ASSERT(!g_secret);
  }
  close(sv[0]);
  close(sv[1]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  if (size > PEER_MAX + 1) size = PEER_MAX + 1;
  use_secret(data[0] & 1);
  if (data[0] & 2)
    fuzz_client(data + 1, size - 1);
  else
    fuzz_server(data + 1, size - 1);
  return 0;
}
