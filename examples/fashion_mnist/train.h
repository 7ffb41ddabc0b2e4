/*
 * The training loop: epochs of sharded mini-batch SGD with per-epoch reporting on rank 0 and
 * the final line every rank prints:
 *   final rank=R step=S params_crc=HEX test_acc=A
 * where HEX is zlib's crc32 of all parameters as bytes, so replicas can be compared.
 */
#ifndef FM_TRAIN_H
#define FM_TRAIN_H

#include "bagua/bagua.h"
#include "bagua/elastic.h"
#include "cli.h"
#include "dataset.h"

/* Trains and evaluates; returns the process exit status (0, 1 on a runtime failure, 2 on a
 * configuration that cannot run, such as fewer training examples than ranks). */
int fm_train_run(const fm_options_t *o, bagua_comm_t *comm, const fm_dataset_t *data);

/*
 * --elastic: the same model and SGD, trained through the in-process elastic API
 * (bagua/elastic.h) with the library's sampler (bagua/loader.h). The parameters, the momentum
 * buffer, the optimizer's step count, the sampler position and samples_seen are registered and
 * committed after every step; a new round (seen at a step boundary, or through a failed
 * gradient allreduce, which is restored first) is joined with bagua_elastic_rebuild. Rank 0
 * prints "round N world W recovery_ms T" per world change; the final line gains
 * " samples_seen=N" (examples processed across all ranks). Gradients are averaged with one
 * allreduce per step (gradient_allreduce only).
 */
int fm_train_run_elastic(const fm_options_t *o, bagua_elastic_t *e, const fm_dataset_t *data);

#endif
