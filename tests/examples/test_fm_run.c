/*
 * End-to-end runs of the fashion_mnist executable, as a user or a launcher starts it:
 *   test_fm_run BIN cli              flag errors exit 2 naming the flag; --help exits 0
 *   test_fm_run BIN missing_data     a missing or corrupt data set exits 2 with a hint
 *   test_fm_run BIN train            a short single-process run reaches 75% test accuracy
 *   test_fm_run BIN ranks N TRANSPORT [ALGORITHM]
 *                                    N processes with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT
 *                                    end with identical parameters (one `final` line each)
 * Each child's output goes to a temporary file; the parent polls for the children's exit
 * and kills them all when a deadline passes, so a hang fails the test instead of stalling.
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "test.h"

#define DATA_DIR "/usr/share/datasets/fashion-mnist"
#define MAX_RANKS 8
#define DEADLINE_S 80

static const char *bin;

typedef struct {
  pid_t pid;
  int status; /* exit status, or 128 + signal */
  char out_path[64], err_path[64];
  char *out, *err; /* captured text, NUL-terminated */
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

/* Starts BIN with `args` (NULL-terminated) and NAME=VALUE strings in `env` added. */
static void start(child_t *c, const char *const *args, const char *const *env) {
  char *argv[64];
  int argc = 0;
  argv[argc++] = (char *)bin;
  while (*args) argv[argc++] = (char *)*args++;
  argv[argc] = NULL;
  strcpy(c->out_path, "/tmp/fm_run_out_XXXXXX");
  strcpy(c->err_path, "/tmp/fm_run_err_XXXXXX");
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
    for (; env && *env; env++) putenv((char *)*env);
    execv(bin, argv);
    _exit(127);
  }
  close(ofd);
  close(efd);
}

/* Waits for all children (polling, so that one deadline covers them all), then reads their
 * output. Children still running at the deadline are killed and the test fails. */
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

static void release(child_t *c) {
  free(c->out);
  free(c->err);
}

/* Runs BIN once and checks its exit status and that stderr (or stdout) contains `want`. */
static void expect(const char *const *args, int status, const char *want_err,
                   const char *want_out) {
  child_t c;
  start(&c, args, NULL);
  wait_all(&c, 1);
  if (c.status != status || (want_err && !strstr(c.err, want_err)) ||
      (want_out && !strstr(c.out, want_out)))
    TEST_FAIL("%s %s ...: status %d (expected %d)\nstdout:\n%s\nstderr:\n%s\nexpected \"%s\"", bin,
              args[0] ? args[0] : "", c.status, status, c.out, c.err,
              want_err ? want_err : want_out);
  release(&c);
}

#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})

static void test_cli(void) {
  expect(ARGS("--help"), 0, NULL, "--limit-train");
  expect(ARGS("--no-such-flag"), 2, "unknown option \"--no-such-flag\"", NULL);
  expect(ARGS("--batch-size", "0"), 2, "--batch-size: \"0\" is not accepted", NULL);
  expect(ARGS("--hidden", "512,x"), 2, "--hidden", NULL);
  expect(ARGS("--lr"), 2, "--lr needs a value", NULL);
  expect(ARGS("--peer-mode", "ring"), 2, "--peer-mode does not apply", NULL);
  /* Every algorithm is accepted; a missing data set is still reported before anything runs. */
  expect(ARGS("--algorithm", "qadam", "--data-dir", "/nonexistent"), 2, "dataset-fashion-mnist",
         NULL);
  expect(ARGS("--algorithm", "sgd"), 2, "--algorithm", NULL);
}

static void test_missing_data(void) {
  expect(ARGS("--data-dir", "/nonexistent/fashion-mnist"), 2,
         "apt-get install dataset-fashion-mnist", NULL);
  expect(ARGS("--data-dir", "/nonexistent/fashion-mnist"), 2,
         "Debian package dataset-fashion-mnist", NULL);
  /* A corrupt file is named, with what is wrong with it. */
  char dir[] = "/tmp/fm_run_data_XXXXXX", path[128];
  ASSERT_TRUE(mkdtemp(dir) != NULL);
  snprintf(path, sizeof(path), "%s/train-images-idx3-ubyte.gz", dir);
  gzFile gz = gzopen(path, "wb");
  ASSERT_TRUE(gz != NULL);
  gzwrite(gz, "\0\0\x08\x01garbage", 11);
  gzclose(gz);
  expect(ARGS("--data-dir", dir), 2, "train-images-idx3-ubyte.gz: IDX magic 0x00000801", NULL);
  unlink(path);
  rmdir(dir);
}

/* Extracts the fields of the one `final` line of a run. */
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

static void test_train(void) {
  child_t c;
  start(&c, ARGS("--limit-train", "6000", "--epochs", "2", "--limit-test", "5000"), NULL);
  wait_all(&c, 1);
  if (c.status != 0) TEST_FAIL("status %d\nstdout:\n%s\nstderr:\n%s", c.status, c.out, c.err);
  printf("%s", c.out);
  final_t f = parse_final(&c);
  ASSERT_EQ(f.rank, 0);
  ASSERT_EQ(f.step, 2 * 94); /* ceil(6000 / 64) steps per epoch */
  ASSERT_EQ(strlen(f.crc), 8);
  ASSERT_TRUE(strstr(c.out, "epoch 1/2 loss") != NULL);
  ASSERT_TRUE(strstr(c.out, "epoch 2/2 loss") != NULL);
  /* An untrained network scores about 10%; two short epochs give about 80%. */
  if (f.acc < 0.75) TEST_FAIL("test accuracy %.4f is below 0.75", f.acc);
  release(&c);
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

/* Algorithms whose replicas stay bit-identical (the others average weights with neighbours or
 * in the background, so ranks legitimately differ). */
static int replicas_identical(const char *alg) {
  return strcmp(alg, "decentralized") != 0 && strcmp(alg, "low_precision_decentralized") != 0 &&
         strcmp(alg, "async") != 0;
}

static void test_ranks(int n, const char *transport, const char *alg) {
  child_t c[MAX_RANKS];
  static char env[MAX_RANKS][9][96];
  int port = free_port();
  for (int r = 0; r < n; r++) {
    snprintf(env[r][0], 96, "RANK=%d", r);
    snprintf(env[r][1], 96, "WORLD_SIZE=%d", n);
    snprintf(env[r][2], 96, "MASTER_ADDR=127.0.0.1");
    snprintf(env[r][3], 96, "MASTER_PORT=%d", port);
    snprintf(env[r][4], 96, "BAGUA_TRANSPORT=%s", transport);
    snprintf(env[r][5], 96, "BAGUA_JOB_ID=fm-test-%d", (int)getpid());
    /* A broken rank should fail the others well inside the test's deadline. */
    snprintf(env[r][6], 96, "BAGUA_COMM_TIMEOUT_MS=30000");
    /* With an explicit algorithm every rank emulates its own node, so compressed algorithms
     * really compress (on one node Bagua's hierarchical default would skip it). */
    snprintf(env[r][7], 96, "BAGUA_NODE_ID=%s%d", alg ? "fm-node" : "", alg ? r : 0);
    const char *e[] = {env[r][0], env[r][1], env[r][2], env[r][3],
                       env[r][4], env[r][5], env[r][6], alg ? env[r][7] : NULL,
                       NULL};
    start(&c[r],
          ARGS("--limit-train", "3000", "--epochs", "2", "--limit-test", "1000", "--batch-size",
               "32", "--algorithm", alg ? alg : "gradient_allreduce"),
          e);
  }
  wait_all(c, n);
  final_t f[MAX_RANKS];
  for (int r = 0; r < n; r++) {
    if (c[r].status != 0)
      TEST_FAIL("rank %d: status %d\nstdout:\n%s\nstderr:\n%s", r, c[r].status, c[r].out, c[r].err);
    f[r] = parse_final(&c[r]);
    printf("%s", r == 0 ? c[r].out : strstr(c[r].out, "final rank="));
  }
  for (int r = 0; r < n; r++) {
    ASSERT_EQ(f[r].rank, r);
    /* Each rank trains on floor(3000 / n) examples in batches of 32, for two epochs. */
    ASSERT_EQ(f[r].step, 2 * ((3000 / n + 31) / 32));
    if (replicas_identical(alg ? alg : "gradient_allreduce")) {
      ASSERT_STREQ(f[r].crc, f[0].crc);
      ASSERT_NEAR(f[r].acc, f[0].acc, 0);
    }
  }
  /* Rank 0 reports gradient traffic; the other ranks print only their final line. */
  ASSERT_TRUE(strstr(c[0].out, "epoch 2/2 loss") != NULL);
  /* Async averages in the background on a timer, so a short epoch may send nothing. */
  if (!alg || strcmp(alg, "async") != 0) ASSERT_TRUE(strstr(c[0].out, "bytes/step 0 ") == NULL);
  for (int r = 1; r < n; r++) ASSERT_TRUE(strstr(c[r].out, "epoch") == NULL);
  if (f[0].acc < 0.6) TEST_FAIL("test accuracy %.4f is below 0.6", f[0].acc);
  for (int r = 0; r < n; r++) release(&c[r]);
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s BIN cli|missing_data|train|ranks N TRANSPORT\n", argv[0]);
    return 1;
  }
  bin = argv[1];
  const char *what = argv[2];
  if (!strcmp(what, "cli")) {
    test_cli();
  } else if (!strcmp(what, "missing_data")) {
    test_missing_data();
  } else {
    if (access(DATA_DIR "/train-images-idx3-ubyte.gz", R_OK) != 0)
      TEST_SKIP("dataset-fashion-mnist is not installed (apt-get install dataset-fashion-mnist)");
    if (!strcmp(what, "train")) {
      test_train();
    } else if (!strcmp(what, "ranks") && (argc == 5 || argc == 6) && atoi(argv[3]) >= 1 &&
               atoi(argv[3]) <= MAX_RANKS) {
      test_ranks(atoi(argv[3]), argv[4], argc == 6 ? argv[5] : NULL);
    } else {
      fprintf(stderr, "unknown test \"%s\"\n", what);
      return 1;
    }
  }
  printf("ok\n");
  return 0;
}
