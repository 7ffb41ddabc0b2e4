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
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test.h"

#define DATA_DIR "/usr/share/datasets/fashion-mnist"
#define TRAIN_EXAMPLES 60000
#define BATCH 64
#define EPOCHS 2
#define MAX_RANKS 2
#define DEADLINE_S 240
#define NO_DEVICE_STATUS 3

static const char *bin;

typedef struct {
  pid_t pid;
  int status; /* exit status, or 128 + signal */
  char out_path[64], err_path[64];
  char *out, *err;
} child_t;

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  ASSERT_TRUE(f != NULL);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)n + 1);
  ASSERT_TRUE(buf != NULL);
  ASSERT_EQ(fread(buf, 1, (size_t)n, f), (size_t)n);
  buf[n] = '\0';
  fclose(f);
  return buf;
}

/* Starts BIN with argv and the NAME=VALUE strings of env added to the environment. */
static void start(child_t *c, char *const *argv, char **env) {
  strcpy(c->out_path, "/tmp/fm_gpu_out_XXXXXX");
  strcpy(c->err_path, "/tmp/fm_gpu_err_XXXXXX");
  int ofd = mkstemp(c->out_path), efd = mkstemp(c->err_path);
  ASSERT_TRUE(ofd >= 0 && efd >= 0);
  c->pid = fork();
  ASSERT_TRUE(c->pid >= 0);
  if (c->pid == 0) {
    dup2(ofd, 1);
    dup2(efd, 2);
    /* A run from the caller's environment must not join some other job. */
    unsetenv("RANK");
    unsetenv("WORLD_SIZE");
    for (; env && *env; env++) putenv(*env);
    execv(bin, argv);
    _exit(127);
  }
  close(ofd);
  close(efd);
}

/* Waits for all children under one deadline (killing the rest when it passes), then reads
 * their output. */
static void wait_all(child_t *c, int n) {
  time_t deadline = time(NULL) + DEADLINE_S;
  int left = n;
  for (int i = 0; i < n; i++) c[i].status = -1;
  while (left > 0) {
    for (int i = 0; i < n; i++) {
      int st;
      if (c[i].status != -1 || waitpid(c[i].pid, &st, WNOHANG) != c[i].pid) continue;
      c[i].status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      left--;
    }
    if (left > 0 && time(NULL) > deadline) {
      for (int i = 0; i < n; i++)
        if (c[i].status == -1) kill(c[i].pid, SIGKILL), waitpid(c[i].pid, NULL, 0);
      for (int i = 0; i < n; i++) {
        c[i].out = slurp(c[i].out_path);
        c[i].err = slurp(c[i].err_path);
        fprintf(stderr, "rank %d stdout:\n%s\nstderr:\n%s\n", i, c[i].out, c[i].err);
      }
      TEST_FAIL("%d of %d fashion_mnist processes still running after %d s", left, n, DEADLINE_S);
    }
    if (left > 0) usleep(20 * 1000);
  }
  for (int i = 0; i < n; i++) {
    c[i].out = slurp(c[i].out_path);
    c[i].err = slurp(c[i].err_path);
    unlink(c[i].out_path);
    unlink(c[i].err_path);
  }
}

/* A free loopback port for rank 0's bootstrap listener (bound, read back, released). */
static int free_port(void) {
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof(sa);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_TRUE(fd >= 0);
  ASSERT_EQ(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
  ASSERT_EQ(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
  close(fd);
  return ntohs(sa.sin_port);
}

typedef struct {
  int rank;
  long long step;
  char crc[16];
  double acc;
} final_t;

static final_t parse_final(const child_t *c) {
  final_t f;
  const char *p = strstr(c->out, "final rank=");
  if (!p) TEST_FAIL("no final line in:\n%s\nstderr:\n%s", c->out, c->err);
  if (strstr(p + 1, "final rank=")) TEST_FAIL("more than one final line in:\n%s", c->out);
  if (sscanf(p, "final rank=%d step=%lld params_crc=%15s test_acc=%lf", &f.rank, &f.step, f.crc,
             &f.acc) != 4)
    TEST_FAIL("malformed final line in:\n%s", c->out);
  return f;
}

/* Algorithms whose replicas stay bit-identical (the others average weights with neighbours or
 * in the background, so ranks legitimately differ). */
static int replicas_identical(const char *alg) {
  return strcmp(alg, "decentralized") != 0 && strcmp(alg, "low_precision_decentralized") != 0 &&
         strcmp(alg, "async") != 0;
}

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

  child_t c[MAX_RANKS];
  static char env[MAX_RANKS][8][96];
  char epochs[16];
  snprintf(epochs, sizeof(epochs), "%d", EPOCHS);
  char *args[] = {(char *)bin, "--device",    "cuda",      "--epochs",
                  epochs,      "--algorithm", (char *)alg, NULL};
  int port = free_port();
  for (int r = 0; r < n; r++) {
    char *e[9] = {NULL};
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
    start(&c[r], args, e);
  }
  wait_all(c, n);

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

  final_t f[MAX_RANKS];
  for (int r = 0; r < n; r++) {
    if (c[r].status != 0)
      TEST_FAIL("rank %d: status %d\nstdout:\n%s\nstderr:\n%s", r, c[r].status, c[r].out, c[r].err);
    f[r] = parse_final(&c[r]);
    printf("%s", r == 0 ? c[r].out : strstr(c[r].out, "final rank="));
  }
  long long steps = EPOCHS * ((TRAIN_EXAMPLES / n + BATCH - 1) / BATCH);
  for (int r = 0; r < n; r++) {
    ASSERT_EQ(f[r].rank, r);
    ASSERT_EQ(f[r].step, steps);
    ASSERT_EQ(strlen(f[r].crc), 8);
    if (replicas_identical(alg)) {
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
