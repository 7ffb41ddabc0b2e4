/*
 * Command line of the Fashion-MNIST example. Every flag is validated up front: an unknown
 * flag, a missing or malformed value, a value out of range, or an algorithm option given
 * with an algorithm that has no such option is reported with the flag's name and what it
 * accepts, and the program exits with status 2 before loading anything.
 */
#ifndef FM_CLI_H
#define FM_CLI_H

#include <stdint.h>
#include <stdio.h>

#define FM_MAX_HIDDEN 16

typedef enum {
  FM_ALG_GRADIENT_ALLREDUCE = 0,
  FM_ALG_BYTEGRAD,
  FM_ALG_DECENTRALIZED,
  FM_ALG_LOW_PRECISION_DECENTRALIZED,
  FM_ALG_QADAM,
  FM_ALG_ASYNC,
  FM_ALG__COUNT
} fm_algorithm_t;

typedef enum { FM_PEER_ALL = 0, FM_PEER_SHIFT_ONE, FM_PEER_RING } fm_peer_mode_t;

/* Where the model trains. FM_DEVICE_CUDA is accepted only by a build with CUDA and NCCL
 * (FM_HAVE_CUDA) and not with --elastic. */
typedef enum { FM_DEVICE_CPU = 0, FM_DEVICE_CUDA } fm_device_t;

typedef struct {
  int epochs;
  int batch_size; /* per rank */
  double lr, momentum, weight_decay;
  int lr_given; /* --lr appeared: qadam otherwise takes its own Adam-scale default */
  /* --algorithm appeared. Without it the algorithm is BAGUA_ALGORITHM's (bagua-launch's
   * [algorithm] name), else gradient_allreduce, and the library is left to apply it. */
  int algorithm_given;
  int hidden[FM_MAX_HIDDEN];
  int nhidden;
  uint64_t seed;
  const char *data_dir; /* points into argv or a string literal */
  long limit_train;     /* 0: all examples */
  long limit_test;      /* 0: all examples */
  /* Algorithm and its options; after parsing, options the user did not give hold the
   * algorithm's default (Bagua's defaults, see docs/fashion_mnist.md). The library is handed
   * only the options given (`given`), so that BAGUA_* variables fill in the rest. */
  fm_algorithm_t algorithm;
  int hierarchical;
  fm_peer_mode_t peer_mode;
  int comm_interval;
  int error_feedback;
  long warmup_steps;
  int sync_interval_ms;
  double bucket_mb; /* 0: the library's default (BAGUA_BUCKET_SIZE) */
  int elastic;      /* --elastic: in-process elasticity through bagua/elastic.h */
  fm_device_t device;
  /* Which algorithm options appeared on the command line (bit per fm_cli_alg_opt_t). */
  unsigned given;
} fm_options_t;

typedef enum {
  FM_OPT_HIERARCHICAL = 1u << 0,
  FM_OPT_PEER_MODE = 1u << 1,
  FM_OPT_COMM_INTERVAL = 1u << 2,
  FM_OPT_ERROR_FEEDBACK = 1u << 3,
  FM_OPT_WARMUP_STEPS = 1u << 4,
  FM_OPT_SYNC_INTERVAL_MS = 1u << 5,
  FM_OPT_BUCKET_MB = 1u << 6,
  FM_OPT_ELASTIC = 1u << 7
} fm_cli_alg_opt_t;

enum { FM_CLI_OK = 0, FM_CLI_HELP = 1, FM_CLI_ERROR = 2 };

/*
 * Parses argv into *o. Returns FM_CLI_OK; FM_CLI_HELP after printing the usage to `out`
 * (--help); FM_CLI_ERROR after printing one line naming the problem to `err`.
 */
int fm_cli_parse(int argc, char **argv, fm_options_t *o, FILE *out, FILE *err);

const char *fm_algorithm_name(fm_algorithm_t a);
const char *fm_peer_mode_name(fm_peer_mode_t p);

#endif
