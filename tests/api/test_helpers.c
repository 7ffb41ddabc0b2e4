/*
 * The public helpers a client needs besides communicators: bagua_sgd_step (torch.optim.SGD
 * over flat buffers, the update bagua_ddp_step runs) and bagua_spare_port. Built against
 * include/ alone, as a client outside the library is.
 */
#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bagua/bagua.h"
#include "test.h"

static void test_sgd(void) {
  /* torch.optim.SGD(lr=0.1, momentum=0.9, weight_decay=0.01), two steps, by hand in double. */
  float p[3] = {1.0f, -2.0f, 0.5f}, g[3] = {0.5f, 0.25f, -1.0f}, buf[3];
  double want[3], mom[3] = {0, 0, 0};
  bagua_sgd_config_t cfg = {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01};
  for (int i = 0; i < 3; i++) want[i] = p[i];
  for (int step = 0; step < 2; step++) {
    ASSERT_OK(bagua_sgd_step(p, g, buf, 3, &cfg, step == 0));
    for (int i = 0; i < 3; i++) {
      double d = g[i] + 0.01 * want[i];
      mom[i] = step == 0 ? d : 0.9 * mom[i] + d;
      want[i] -= 0.1 * mom[i];
    }
  }
  for (int i = 0; i < 3; i++) ASSERT_TRUE(fabs(p[i] - want[i]) < 1e-6);

  /* Refusals change nothing. */
  float before = p[0];
  bagua_sgd_config_t bad = cfg;
  bad.lr = 0;
  ASSERT_STATUS(bagua_sgd_step(p, g, buf, 3, &bad, 0), BAGUA_ERR_INVALID_ARG);
  bad = cfg;
  bad.momentum = NAN;
  ASSERT_STATUS(bagua_sgd_step(p, g, buf, 3, &bad, 0), BAGUA_ERR_INVALID_ARG);
  bad = cfg;
  bad.nesterov = 1;
  bad.dampening = 0.1;
  ASSERT_STATUS(bagua_sgd_step(p, g, buf, 3, &bad, 0), BAGUA_ERR_INVALID_ARG);
  ASSERT_STATUS(bagua_sgd_step(p, g, NULL, 3, &cfg, 0), BAGUA_ERR_INVALID_ARG);
  ASSERT_STATUS(bagua_sgd_step(p, NULL, buf, 3, &cfg, 0), BAGUA_ERR_INVALID_ARG);
  ASSERT_STATUS(bagua_sgd_step(p, g, buf, 3, NULL, 0), BAGUA_ERR_INVALID_ARG);
  ASSERT_TRUE(p[0] == before);
  /* No momentum: no buffer needed; n = 0 touches nothing. */
  bagua_sgd_config_t plain = {.lr = 0.5};
  ASSERT_OK(bagua_sgd_step(p, g, NULL, 3, &plain, 0));
  ASSERT_TRUE(p[0] == before - 0.25f);
  ASSERT_OK(bagua_sgd_step(NULL, NULL, NULL, 0, &plain, 0));
}

static void test_spare_port(void) {
  int port = 0;
  ASSERT_OK(bagua_spare_port("127.0.0.1", &port));
  ASSERT_TRUE(port > 0 && port < 65536);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET,
                           .sin_port = htons((uint16_t)port),
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  ASSERT_EQ(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
  close(fd);
  ASSERT_OK(bagua_spare_port(NULL, &port));
  ASSERT_OK(bagua_spare_port("", &port));
  ASSERT_STATUS(bagua_spare_port("no.such.host.invalid", &port), BAGUA_ERR_INVALID_ARG);
  ASSERT_STATUS(bagua_spare_port("127.0.0.1", NULL), BAGUA_ERR_INVALID_ARG);
}

int main(void) {
  test_sgd();
  test_spare_port();
  printf("PASS api_helpers\n");
  return 0;
}
