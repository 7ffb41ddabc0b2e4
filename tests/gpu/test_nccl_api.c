/*
 * The NCCL communicator API in every build, GPU or not:
 *  - without CUDA/NCCL compiled in, every entry point exists and says BAGUA_ERR_NOT_SUPPORTED;
 *  - with them compiled in but no usable device (a CI machine with the toolkit only), creation
 *    over 1 and 2 ranks fails promptly on every rank with BAGUA_ERR_CUDA instead of leaving
 *    the ranks in NCCL's bootstrap until a timeout;
 *  - with a device, creation and destruction succeed (the full checks are in test_gpu_nccl).
 */
#include <stdlib.h>
#include <unistd.h>

#include "bagua/nccl.h"
#include "tests/comm/mp.h"
#include "tests/test.h"

static int body(bagua_comm_t *cpu, void *arg) {
  (void)arg;
  /* Two ranks on one GPU need distinct NCCL host ids (see test_gpu_nccl.c). */
  char host_id[64];
  snprintf(host_id, sizeof(host_id), "bagua-api-test-rank%d", bagua_comm_rank(cpu));
  setenv("NCCL_HOSTID", host_id, 1);
  setenv("NCCL_IB_DISABLE", "1", 0);
  setenv("NCCL_SOCKET_IFNAME", "lo", 0);
  bagua_nccl_comm_t *c = (bagua_nccl_comm_t *)1;
  double t0 = mp_now();
  bagua_status_t st = bagua_nccl_comm_create(cpu, 0, &c);
  double ms = (mp_now() - t0) * 1e3;
  if (!bagua_nccl_available()) {
    ASSERT_STATUS(st, BAGUA_ERR_NOT_SUPPORTED);
    ASSERT_TRUE(c == NULL);
    ASSERT_STATUS(bagua_nccl_allreduce(NULL, NULL, NULL, 0, BAGUA_F32, BAGUA_SUM),
                  BAGUA_ERR_NOT_SUPPORTED);
    ASSERT_STATUS(bagua_nccl_comm_synchronize(NULL), BAGUA_ERR_NOT_SUPPORTED);
    ASSERT_EQ(bagua_nccl_comm_rank(NULL), -1);
    ASSERT_TRUE(bagua_nccl_comm_stream(NULL) == NULL);
    bagua_nccl_comm_abort(NULL);
    bagua_nccl_comm_destroy(NULL);
    return 0;
  }
  if (st == BAGUA_OK) {
    printf("rank %d: a CUDA device is present; NCCL communicator created in %.0f ms\n",
           bagua_comm_rank(cpu), ms);
    ASSERT_OK(bagua_nccl_comm_synchronize(c));
    bagua_nccl_comm_destroy(c);
    return 0;
  }
  /* No device: every rank must learn it within the agreement round, far below any timeout. */
  ASSERT_TRUE(c == NULL);
  if (st != BAGUA_ERR_CUDA && st != BAGUA_ERR_NCCL)
    TEST_FAIL("rank %d: creation without a device returned %s", bagua_comm_rank(cpu),
              bagua_err_name(st));
  ASSERT_LT(ms, 5000);
  printf("rank %d: no usable device, creation failed with %s in %.0f ms: %s\n",
         bagua_comm_rank(cpu), bagua_err_name(st), ms, bagua_last_error());
  /* Calls on a NULL communicator are argument errors, not crashes. */
  ASSERT_STATUS(bagua_nccl_allreduce(NULL, NULL, NULL, 0, BAGUA_F32, BAGUA_SUM),
                BAGUA_ERR_INVALID_ARG);
  ASSERT_STATUS(bagua_nccl_comm_get_async_error(NULL), BAGUA_ERR_INVALID_ARG);
  bagua_nccl_comm_abort(NULL);
  bagua_nccl_comm_destroy(NULL);
  return 0;
}

int main(void) {
  ASSERT_STATUS(bagua_nccl_comm_create(NULL, 0, NULL),
                bagua_nccl_available() ? BAGUA_ERR_INVALID_ARG : BAGUA_ERR_NOT_SUPPORTED);
  for (int n = 1; n <= 2; n++) {
    mp_opts_t o = {0};
    o.nranks = n;
    o.transport = BAGUA_TRANSPORT_AUTO;
    o.deadline_s = 60;
    if (mp_run(&o, body, NULL) != 0) TEST_FAIL("a rank failed with %d ranks", n);
  }
  printf("nccl api: ok (%s)\n", bagua_nccl_available() ? "built with NCCL" : "built without NCCL");
  return 0;
}
