/*
 * The training loop: epochs of sharded mini-batch SGD with per-epoch reporting on rank 0 and
 * the final line every rank prints:
 *   final rank=R step=S params_crc=HEX test_acc=A
 * where HEX is zlib's crc32 of all parameters as bytes, so replicas can be compared.
 */
#ifndef FM_TRAIN_H
#define FM_TRAIN_H

#include "bagua/bagua.h"
#include "cli.h"
#include "dataset.h"

/* Trains and evaluates; returns the process exit status (0, 1 on a runtime failure, 2 on a
 * configuration that cannot run, such as fewer training examples than ranks). */
int fm_train_run(const fm_options_t *o, bagua_comm_t *comm, const fm_dataset_t *data);

#endif
