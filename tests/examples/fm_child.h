/*
 * Running the fashion_mnist executable from a test: each child's stdout and stderr go to
 * temporary files, the parent polls all children under one deadline (killing them and failing
 * the test when it passes, so a hang cannot stall ctest), and the final line every rank prints
 * is parsed. Shared by tests/examples/test_fm_run.c and the GPU run test of the example.
 */
#ifndef BAGUA_TESTS_FM_CHILD_H
#define BAGUA_TESTS_FM_CHILD_H

#include <sys/types.h>

typedef struct {
  pid_t pid;
  int status; /* exit status, or 128 + signal */
  char out_path[64], err_path[64];
  char *out, *err; /* captured text, NUL-terminated; freed by fm_child_release() */
} fm_child_t;

/* A NULL-terminated argument list for fm_child_start(). */
#define FM_ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})

/* Starts `bin` with `args` (NULL-terminated, without argv[0]) and the NAME=VALUE strings of
 * `env` (NULL-terminated, may be NULL) added to the environment; RANK and WORLD_SIZE of the
 * caller's environment are removed, so a run never joins some other job. */
void fm_child_start(fm_child_t *c, const char *bin, const char *const *args,
                    const char *const *env);
/* Waits for all n children, at most `deadline_s` seconds in all, then reads their output.
 * At the deadline the rest are killed, every child's output is printed and the test fails. */
void fm_child_wait_all(fm_child_t *c, int n, int deadline_s);
void fm_child_release(fm_child_t *c);

/* A free loopback port for rank 0's bootstrap listener (bound, read back, released). */
int fm_child_free_port(void);

/* The `final rank=R step=S params_crc=C test_acc=A` line, which must appear exactly once. */
typedef struct {
  int rank;
  long long step;
  char crc[16];
  double acc;
} fm_final_t;

fm_final_t fm_child_final(const fm_child_t *c);

/* Whether `alg` keeps replicas bit-identical (the decentralized algorithms and async average
 * weights with neighbours or in the background, so their ranks legitimately differ). */
int fm_replicas_identical(const char *alg);

#endif
