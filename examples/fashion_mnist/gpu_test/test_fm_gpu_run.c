/*
 * End-to-end `fashion_mnist --device cuda` runs on the whole data set, two epochs:
 *   test_fm_gpu_run BIN NRANKS ALGORITHM
 * NRANKS = 1 is a single process; NRANKS = 2 starts two processes with the torchrun-style
 * variables (env:// bootstrap on loopback), each emulating its own node (BAGUA_NODE_ID) so the
 * compressed algorithms really compress, and each with its own NCCL_HOSTID: NCCL refuses two
 * ranks on one GPU of one host ("Duplicate GPU detected"), and distinct host ids make it treat
 * them as two hosts joined by its socket transport, so the test runs on a single-GPU machine
 * (tests/gpu/test_gpu_nccl.c does the same).
 *
 * Checks: every rank exits 0 with one final line, the step count, test accuracy >= 0.80 for
 * gradient_allreduce (0.75 for the relaxed algorithms, which trade some accuracy per epoch),
 * and identical params_crc on all ranks where the algorithm keeps replicas identical. Exits
 * 77 (skipped) when the data set is missing or when every rank reports "no CUDA device" (exit
 * status 3), which is what a machine without a GPU or driver does.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "examples/fm_child.h"
#include "test.h"

#define DATA_DIR "/usr/share/datasets/fashion-mnist"
#define TRAIN_EXAMPLES 60000
#define BATCH 64
#define EPOCHS 2
#define MAX_RANKS 2
#define DEADLINE_S 240
#define NO_DEVICE_STATUS 3

static const char *bin;

int main(int argc, char **argv) {
  if (argc != 4 || atoi(argv[2]) < 1 || atoi(argv[2]) > MAX_RANKS) {
    fprintf(stderr, "usage: %s BIN NRANKS(1..%d) ALGORITHM\n", argv[0], MAX_RANKS);
    return 1;
  }
  bin = argv[1];
  int n = atoi(argv[2]);
  const char *alg = argv[3];
  if (access(DATA_DIR "/train-images-idx3-ubyte.gz", R_OK) != 0)
    TEST_SKIP("dataset-fashion-mnist is not installed (apt-get install dataset-fashion-mnist)");

  fm_child_t c[MAX_RANKS];
  static char env[MAX_RANKS][8][96];
  char epochs[16];
  snprintf(epochs, sizeof(epochs), "%d", EPOCHS);
  const char *const *args = FM_ARGS("--device", "cuda", "--epochs", epochs, "--algorithm", alg);
  int port = fm_child_free_port();
  for (int r = 0; r < n; r++) {
    const char *e[9] = {NULL};
    if (n > 1) {
      snprintf(env[r][0], 96, "RANK=%d", r);
      snprintf(env[r][1], 96, "WORLD_SIZE=%d", n);
      snprintf(env[r][2], 96, "MASTER_ADDR=127.0.0.1");
      snprintf(env[r][3], 96, "MASTER_PORT=%d", port);
      snprintf(env[r][4], 96, "BAGUA_JOB_ID=fm-gpu-test-%d", (int)getpid());
      /* A broken rank should fail the others well inside the deadline. */
      snprintf(env[r][5], 96, "BAGUA_COMM_TIMEOUT_MS=60000");
      snprintf(env[r][6], 96, "BAGUA_NODE_ID=fm-gpu-node%d", r);
      snprintf(env[r][7], 96, "NCCL_HOSTID=fm-gpu-test-%d-%d", (int)getpid(), r);
      for (int k = 0; k < 8; k++) e[k] = env[r][k];
    }
    fm_child_start(&c[r], bin, args, e);
  }
  fm_child_wait_all(c, n, DEADLINE_S);

  int no_device = 0;
  for (int r = 0; r < n; r++)
    no_device += c[r].status == NO_DEVICE_STATUS && strstr(c[r].err, "no CUDA device");
  if (no_device > 0 && no_device == n) {
    /* The runtime's reason, as the program printed it, up to the end of its line. */
    const char *why = strstr(c[0].err, "no CUDA device");
    size_t len = strcspn(why, "\n");
    printf("SKIP: %.*s\n", (int)len, why);
    return 77;
  }

  fm_final_t f[MAX_RANKS];
  for (int r = 0; r < n; r++) {
    if (c[r].status != 0)
      TEST_FAIL("rank %d: status %d\nstdout:\n%s\nstderr:\n%s", r, c[r].status, c[r].out, c[r].err);
    f[r] = fm_child_final(&c[r]);
    printf("%s", r == 0 ? c[r].out : strstr(c[r].out, "final rank="));
  }
  long long steps = EPOCHS * ((TRAIN_EXAMPLES / n + BATCH - 1) / BATCH);
  for (int r = 0; r < n; r++) {
    ASSERT_EQ(f[r].rank, r);
    ASSERT_EQ(f[r].step, steps);
    ASSERT_EQ(strlen(f[r].crc), 8);
    if (fm_replicas_identical(alg)) {
      ASSERT_STREQ(f[r].crc, f[0].crc);
      ASSERT_NEAR(f[r].acc, f[0].acc, 0);
    }
  }
  ASSERT_TRUE(strstr(c[0].out, "gemm cublas") != NULL);
  ASSERT_TRUE(strstr(c[0].out, ", device cuda:") != NULL);
  ASSERT_TRUE(strstr(c[0].out, "epoch 2/2 loss") != NULL);
  for (int r = 1; r < n; r++) ASSERT_TRUE(strstr(c[r].out, "epoch 1/") == NULL);
  /* Gradients (or weights) travel between two ranks, except for async, whose background
   * averaging runs on a timer and may send nothing in a short epoch. */
  if (n > 1 && strcmp(alg, "async") != 0) ASSERT_TRUE(strstr(c[0].out, "bytes/step 0 ") == NULL);
  double min_acc = strcmp(alg, "gradient_allreduce") == 0 ? 0.80 : 0.75;
  for (int r = 0; r < n; r++)
    if (f[r].acc < min_acc)
      TEST_FAIL("rank %d: test accuracy %.4f is below %.2f", r, f[r].acc, min_acc);
  for (int r = 0; r < n; r++) {
    free(c[r].out);
    free(c[r].err);
  }
  printf("ok\n");
  return 0;
}
