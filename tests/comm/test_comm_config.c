/*
 * libbagua checks what a program puts in bagua_comm_config_t and bagua_elastic_config_t as it
 * checks the BAGUA_* variables behind them, before it touches the network or etcd:
 *
 *  - every numeric field with a registry parameter is bounded by that parameter's row, and
 *    the refusal names the field, the value and the accepted range (-1 still means "take the
 *    variable");
 *  - the job id, from the config or from BAGUA_JOB_ID, follows the tools' id rule, so an id
 *    with '/' or ".." can never name keys outside the job's etcd prefix;
 *  - the communicator keeps the timeouts it resolved, which is what the NCCL communicator and
 *    the data-parallel layer wait with;
 *  - a word variable is read in its canonical spelling (BAGUA_TRANSPORT=TCP is tcp).
 *
 * "Before the network": the etcd endpoint and the bootstrap address are a listening socket of
 * this test, and a refused configuration must not have connected to it.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../test.h"
#include "bagua/comm.h"
#include "bagua/elastic.h"
#include "bagua/port.h"
#include "comm/communicator.h"
#include "common/params.h"

static int g_trap = -1;       /* listening socket that no refused configuration may reach */
static char g_trap_addr[64];  /* its 127.0.0.1:PORT */
static char g_trap_boot[128]; /* etcd://127.0.0.1:PORT */
static char g_spare_boot[64]; /* tcp://127.0.0.1:PORT for a one-rank communicator */

static void open_trap(void) {
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof(a);
  g_trap = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  ASSERT_TRUE(g_trap >= 0);
  ASSERT_EQ(bind(g_trap, (struct sockaddr *)&a, sizeof(a)), 0);
  ASSERT_EQ(listen(g_trap, 16), 0);
  ASSERT_EQ(getsockname(g_trap, (struct sockaddr *)&a, &len), 0);
  snprintf(g_trap_addr, sizeof(g_trap_addr), "127.0.0.1:%d", ntohs(a.sin_port));
  snprintf(g_trap_boot, sizeof(g_trap_boot), "etcd://%s", g_trap_addr);
  int spare = 0;
  ASSERT_OK(bagua_spare_port("127.0.0.1", &spare));
  snprintf(g_spare_boot, sizeof(g_spare_boot), "tcp://127.0.0.1:%d", spare);
}

/* Fails the test when anything connected to the trap since the last call. */
static void trap_untouched(const char *what) {
  int fd = accept(g_trap, NULL, NULL);
  if (fd >= 0) {
    close(fd);
    TEST_FAIL("%s: connected to the etcd endpoint although the configuration was refused", what);
  }
  ASSERT_TRUE(errno == EAGAIN || errno == EWOULDBLOCK);
}

/* Asserts that the last warning contains every one of the NULL-terminated `needles`. */
static void warned(const char *what, const char *const *needles) {
  for (; *needles; needles++)
    if (!strstr(bagua_last_error(), *needles))
      TEST_FAIL("%s: warning \"%s\" lacks \"%s\"", what, bagua_last_error(), *needles);
}

#define WARNED(what, ...) warned(what, (const char *const[]){__VA_ARGS__, NULL})

/* A one-rank communicator config whose bootstrap, if it were reached, is the trap. */
static bagua_comm_config_t trap_comm_config(void) {
  bagua_comm_config_t cfg = BAGUA_COMM_CONFIG_INIT;
  cfg.rank = 0;
  cfg.size = 1;
  cfg.bootstrap = g_trap_boot;
  cfg.job_id = "job-1";
  return cfg;
}

static void comm_refused(const char *what, const bagua_comm_config_t *cfg) {
  bagua_comm_t *c = NULL;
  bagua_status_t st = bagua_comm_create(cfg, &c);
  if (st != BAGUA_ERR_INVALID_ARG)
    TEST_FAIL("%s: bagua_comm_create returned %s, expected BAGUA_ERR_INVALID_ARG (warning: %s)",
              what, bagua_err_name(st), bagua_last_error());
  ASSERT_TRUE(c == NULL);
  trap_untouched(what);
}

static void test_comm_job_id(void) {
  bagua_comm_config_t cfg = trap_comm_config();
  cfg.job_id = "a/b";
  comm_refused("config.job_id a/b", &cfg);
  WARNED("config.job_id a/b", "bagua_comm_create", "config.job_id", "\"a/b\"", "contains '/'",
         "accepted: 1 to 64 characters from A-Z a-z 0-9 . _ -");
  cfg.job_id = "..";
  comm_refused("config.job_id ..", &cfg);
  WARNED("config.job_id ..", "\"..\" is a path component");
  cfg.job_id = "";
  comm_refused("config.job_id empty", &cfg);
  WARNED("config.job_id empty", "the value is empty");

  /* From the environment: the same rule, and the warning names the variable. */
  cfg.job_id = NULL;
  setenv("BAGUA_JOB_ID", "other/../job", 1);
  bagua__params_reload();
  comm_refused("BAGUA_JOB_ID other/../job", &cfg);
  WARNED("BAGUA_JOB_ID other/../job", "BAGUA_JOB_ID=\"other/../job\"", "contains '/'");
  /* An empty variable is no value: the registry's default id, as for the tools. */
  setenv("BAGUA_JOB_ID", "", 1);
  bagua__params_reload();
  cfg.bootstrap = g_spare_boot;
  bagua_comm_t *c = NULL;
  ASSERT_OK(bagua_comm_create(&cfg, &c));
  bagua_comm_destroy(c);
  unsetenv("BAGUA_JOB_ID");
  bagua__params_reload();
  printf("passed comm job id\n");
}

static void test_comm_bounds(void) {
  bagua_comm_config_t cfg;
#define REFUSE(field_, value_, range_)                                                       \
  do {                                                                                       \
    cfg = trap_comm_config();                                                                \
    cfg.field_ = value_;                                                                     \
    comm_refused("config." #field_ " " #value_, &cfg);                                       \
    WARNED("config." #field_, "bagua_comm_create: config." #field_ " " #value_ " ", range_); \
  } while (0)
  REFUSE(timeout_ms, 10,
         "accepted: an integer in [50, 86400000] (the bounds of BAGUA_COMM_TIMEOUT_MS)");
  REFUSE(timeout_ms, 0, "or -1 to use the variable");
  REFUSE(timeout_ms, 86400001, "[50, 86400000]");
  REFUSE(connect_timeout_ms, 49, "[50, 86400000] (the bounds of BAGUA_CONNECT_TIMEOUT_MS)");
  REFUSE(connect_timeout_ms, -5, "[50, 86400000]");
  REFUSE(nstreams, 17, "[1, 16] (the bounds of BAGUA_NET_NSTREAMS)");
  REFUSE(nstreams, 0, "[1, 16]");
  REFUSE(rank, -2, "[-1, 1048576] (the bounds of RANK)");
  REFUSE(size, 1048577, "[-1, 1048576] (the bounds of WORLD_SIZE)");
#undef REFUSE
  cfg = trap_comm_config();
  cfg.transport = 3;
  comm_refused("config.transport 3", &cfg);
  WARNED("config.transport 3", "config.transport 3 is invalid", "or -1 to use BAGUA_TRANSPORT");
  cfg.transport = -2;
  comm_refused("config.transport -2", &cfg);

  /* The bounds themselves are accepted, and the communicator keeps what it resolved: the
   * NCCL communicator and the data-parallel layer take their timeouts from it. */
  cfg = trap_comm_config();
  cfg.bootstrap = g_spare_boot;
  cfg.timeout_ms = 50;
  cfg.connect_timeout_ms = 86400000;
  cfg.nstreams = 16;
  bagua_comm_t *c = NULL;
  ASSERT_OK(bagua_comm_create(&cfg, &c));
  ASSERT_EQ(c->timeout_ms, 50);
  ASSERT_EQ(c->connect_timeout_ms, 86400000);
  bagua_comm_destroy(c);
  /* Unset fields take the variables. */
  setenv("BAGUA_COMM_TIMEOUT_MS", "777", 1);
  bagua__params_reload();
  cfg.timeout_ms = -1;
  ASSERT_OK(bagua_comm_create(&cfg, &c));
  ASSERT_EQ(c->timeout_ms, 777);
  bagua_comm_destroy(c);
  unsetenv("BAGUA_COMM_TIMEOUT_MS");
  bagua__params_reload();
  printf("passed comm bounds\n");
}

/* A word variable reaches the communicator in its canonical spelling. */
static void test_transport_word(void) {
  bagua_comm_config_t cfg = trap_comm_config();
  cfg.bootstrap = g_spare_boot;
  bagua_comm_t *c = NULL;
  setenv("BAGUA_TRANSPORT", "TCP", 1);
  bagua__params_reload();
  ASSERT_OK(bagua_comm_create(&cfg, &c));
  ASSERT_EQ(c->requested_transport, BAGUA_TRANSPORT_TCP);
  bagua_comm_destroy(c);
  setenv("BAGUA_TRANSPORT", "Shm", 1);
  bagua__params_reload();
  ASSERT_OK(bagua_comm_create(&cfg, &c));
  ASSERT_EQ(c->requested_transport, BAGUA_TRANSPORT_SHM);
  bagua_comm_destroy(c);
  unsetenv("BAGUA_TRANSPORT");
  bagua__params_reload();
  printf("passed transport word\n");
}

/* A one-rank elastic config whose etcd, if it were reached, is the trap. */
static bagua_elastic_config_t trap_elastic_config(void) {
  bagua_elastic_config_t cfg = BAGUA_ELASTIC_CONFIG_INIT;
  cfg.etcd = g_trap_addr;
  cfg.job_id = "job-1";
  cfg.node_id = "solo";
  cfg.round = 0;
  cfg.rank = 0;
  cfg.size = 1;
  return cfg;
}

static void elastic_refused(const char *what, const bagua_elastic_config_t *cfg) {
  bagua_elastic_t *e = NULL;
  bagua_status_t st = bagua_elastic_create(cfg, &e);
  if (st != BAGUA_ERR_INVALID_ARG)
    TEST_FAIL("%s: bagua_elastic_create returned %s, expected BAGUA_ERR_INVALID_ARG (warning: %s)",
              what, bagua_err_name(st), bagua_last_error());
  ASSERT_TRUE(e == NULL);
  trap_untouched(what);
}

static void test_elastic(void) {
  bagua_elastic_config_t cfg = trap_elastic_config();
  cfg.job_id = "a/b";
  elastic_refused("elastic config.job_id a/b", &cfg);
  WARNED("elastic config.job_id a/b", "bagua_elastic_create", "config.job_id", "\"a/b\"",
         "contains '/'", "accepted: 1 to 64 characters");
  cfg.job_id = NULL;
  setenv("BAGUA_JOB_ID", "x/../y", 1);
  bagua__params_reload();
  elastic_refused("elastic BAGUA_JOB_ID x/../y", &cfg);
  WARNED("elastic BAGUA_JOB_ID x/../y", "BAGUA_JOB_ID=\"x/../y\"", "contains '/'");
  unsetenv("BAGUA_JOB_ID");
  bagua__params_reload();
#define REFUSE(field_, value_, range_)                                                         \
  do {                                                                                         \
    cfg = trap_elastic_config();                                                               \
    cfg.field_ = value_;                                                                       \
    elastic_refused("elastic config." #field_ " " #value_, &cfg);                              \
    WARNED("elastic config." #field_, "bagua_elastic_create: config." #field_ " " #value_ " ", \
           range_);                                                                            \
  } while (0)
  REFUSE(timeout_ms, 10, "[50, 86400000] (the bounds of BAGUA_COMM_TIMEOUT_MS)");
  REFUSE(connect_timeout_ms, 0, "[50, 86400000] (the bounds of BAGUA_CONNECT_TIMEOUT_MS)");
  REFUSE(round_wait_ms, -2, "[0, 86400000] (the bounds of BAGUA_RDZV_TIMEOUT_MS)");
  REFUSE(round_wait_ms, 86400001, "[0, 86400000]");
  REFUSE(round, -2, "[-1, 1000000000] (the bounds of BAGUA_ROUND)");
  REFUSE(local_rank, -3, "[-1, 1048576] (the bounds of LOCAL_RANK)");
  REFUSE(rank, -2, "(the bounds of RANK)");
#undef REFUSE
  printf("passed elastic config\n");
}

int main(void) {
  /* An etcd request that did go out would wait this long, not 5 s, before the test fails. */
  setenv("BAGUA_ETCD_TIMEOUT_MS", "200", 1);
  setenv("BAGUA_ROUND", "0", 1);
  unsetenv("BAGUA_JOB_ID");
  unsetenv("BAGUA_TRANSPORT");
  bagua__params_reload();
  open_trap();
  test_comm_job_id();
  test_comm_bounds();
  test_transport_word();
  test_elastic();
  close(g_trap);
  printf("comm config: ok\n");
  return 0;
}
