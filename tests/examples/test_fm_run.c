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
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "examples/fm_child.h"
#include "test.h"

#define DATA_DIR "/usr/share/datasets/fashion-mnist"
#define MAX_RANKS 8
#define DEADLINE_S 80

static const char *bin;

/* Runs BIN once and checks its exit status and that stderr (or stdout) contains `want`. */
static void expect(const char *const *args, int status, const char *want_err,
                   const char *want_out) {
  fm_child_t c;
  fm_child_start(&c, bin, args, NULL);
  fm_child_wait_all(&c, 1, DEADLINE_S);
  if (c.status != status || (want_err && !strstr(c.err, want_err)) ||
      (want_out && !strstr(c.out, want_out)))
    TEST_FAIL("%s %s ...: status %d (expected %d)\nstdout:\n%s\nstderr:\n%s\nexpected \"%s\"", bin,
              args[0] ? args[0] : "", c.status, status, c.out, c.err,
              want_err ? want_err : want_out);
  fm_child_release(&c);
}

static void test_cli(void) {
  expect(FM_ARGS("--help"), 0, NULL, "--limit-train");
  expect(FM_ARGS("--no-such-flag"), 2, "unknown option \"--no-such-flag\"", NULL);
  expect(FM_ARGS("--batch-size", "0"), 2, "--batch-size: \"0\" is not accepted", NULL);
  expect(FM_ARGS("--hidden", "512,x"), 2, "--hidden", NULL);
  expect(FM_ARGS("--lr"), 2, "--lr needs a value", NULL);
  expect(FM_ARGS("--peer-mode", "ring"), 2, "--peer-mode does not apply", NULL);
  /* Every algorithm is accepted; a missing data set is still reported before anything runs. */
  expect(FM_ARGS("--algorithm", "qadam", "--data-dir", "/nonexistent"), 2, "dataset-fashion-mnist",
         NULL);
  expect(FM_ARGS("--algorithm", "sgd"), 2, "--algorithm", NULL);
}

static void test_missing_data(void) {
  expect(FM_ARGS("--data-dir", "/nonexistent/fashion-mnist"), 2,
         "apt-get install dataset-fashion-mnist", NULL);
  expect(FM_ARGS("--data-dir", "/nonexistent/fashion-mnist"), 2,
         "Debian package dataset-fashion-mnist", NULL);
  /* A corrupt file is named, with what is wrong with it. */
  char dir[] = "/tmp/fm_run_data_XXXXXX", path[128];
  ASSERT_TRUE(mkdtemp(dir) != NULL);
  snprintf(path, sizeof(path), "%s/train-images-idx3-ubyte.gz", dir);
  gzFile gz = gzopen(path, "wb");
  ASSERT_TRUE(gz != NULL);
  gzwrite(gz, "\0\0\x08\x01garbage", 11);
  gzclose(gz);
  expect(FM_ARGS("--data-dir", dir), 2, "train-images-idx3-ubyte.gz: IDX magic 0x00000801", NULL);
  unlink(path);
  rmdir(dir);
}

/* Extracts the fields of the one `final` line of a run. */
static void test_train(void) {
  fm_child_t c;
  fm_child_start(&c, bin, FM_ARGS("--limit-train", "6000", "--epochs", "2", "--limit-test", "5000"),
                 NULL);
  fm_child_wait_all(&c, 1, DEADLINE_S);
  if (c.status != 0) TEST_FAIL("status %d\nstdout:\n%s\nstderr:\n%s", c.status, c.out, c.err);
  printf("%s", c.out);
  fm_final_t f = fm_child_final(&c);
  ASSERT_EQ(f.rank, 0);
  ASSERT_EQ(f.step, 2 * 94); /* ceil(6000 / 64) steps per epoch */
  ASSERT_EQ(strlen(f.crc), 8);
  ASSERT_TRUE(strstr(c.out, "epoch 1/2 loss") != NULL);
  ASSERT_TRUE(strstr(c.out, "epoch 2/2 loss") != NULL);
  /* An untrained network scores about 10%; two short epochs give about 80%. */
  if (f.acc < 0.75) TEST_FAIL("test accuracy %.4f is below 0.75", f.acc);
  fm_child_release(&c);
}

static void test_ranks(int n, const char *transport, const char *alg) {
  fm_child_t c[MAX_RANKS];
  static char env[MAX_RANKS][9][96];
  int port = fm_child_free_port();
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
    fm_child_start(&c[r], bin,
                   FM_ARGS("--limit-train", "3000", "--epochs", "2", "--limit-test", "1000",
                           "--batch-size", "32", "--algorithm", alg ? alg : "gradient_allreduce"),
                   e);
  }
  fm_child_wait_all(c, n, DEADLINE_S);
  fm_final_t f[MAX_RANKS];
  for (int r = 0; r < n; r++) {
    if (c[r].status != 0)
      TEST_FAIL("rank %d: status %d\nstdout:\n%s\nstderr:\n%s", r, c[r].status, c[r].out, c[r].err);
    f[r] = fm_child_final(&c[r]);
    printf("%s", r == 0 ? c[r].out : strstr(c[r].out, "final rank="));
  }
  for (int r = 0; r < n; r++) {
    ASSERT_EQ(f[r].rank, r);
    /* Each rank trains on floor(3000 / n) examples in batches of 32, for two epochs. */
    ASSERT_EQ(f[r].step, 2 * ((3000 / n + 31) / 32));
    if (fm_replicas_identical(alg ? alg : "gradient_allreduce")) {
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
  for (int r = 0; r < n; r++) fm_child_release(&c[r]);
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
