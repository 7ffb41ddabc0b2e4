/*
 * The lines a (non-elastic) training run prints, shared by the CPU loop (train.c) and the GPU
 * loop (train_cuda.c) so that the two cannot drift apart: tests and benchmark scripts parse
 * them. Rank 0 prints the header, one line per epoch and "done: ..."; every rank prints the
 * final line
 *   final rank=R step=S params_crc=HEX test_acc=A
 */
#ifndef FM_REPORT_H
#define FM_REPORT_H

#include <stddef.h>
#include <stdint.h>

#include "bagua/bagua.h"
#include "cli.h"
#include "dataset.h"
#include "mlp.h"

/* What one epoch measured on one rank; loss_sum and correct become global sums after
 * fm_report_reduce(). */
typedef struct {
  double loss_sum, correct, seconds, comm_seconds;
  uint64_t bytes;
} fm_epoch_stats_t;

/*
 * The run's description, printed by rank 0. `gemm` names the matrix-product code ("avx2",
 * "generic", "cublas"); `device`, when not NULL, is appended as ", device DEVICE" (the CPU
 * loop passes NULL, which keeps its line as it always was).
 */
void fm_report_header(const fm_options_t *o, bagua_comm_t *comm, const fm_mlp_t *m,
                      const fm_dataset_t *data, size_t per_rank, size_t steps_per_epoch,
                      const char *gemm, const char *device);

/* Sums es->loss_sum and es->correct over all ranks, in place. Collective over comm (nothing
 * to do with one rank); prints the failure and returns its status. */
bagua_status_t fm_report_reduce(bagua_comm_t *comm, fm_epoch_stats_t *es);

/* Rank 0's line for an epoch: es holds the global sums, `total` the examples of the global
 * epoch, test_acc and overlap (0..1) what the caller measured. */
void fm_report_epoch(const fm_options_t *o, int epoch, const fm_epoch_stats_t *es, double total,
                     size_t steps_per_epoch, double test_acc, double overlap);

/* Rank 0's summary after the last epoch. */
void fm_report_done(int64_t steps, double train_seconds);

/* Every rank's last line. */
void fm_report_final(int rank, int64_t step, uint32_t params_crc, double test_acc);

#endif
