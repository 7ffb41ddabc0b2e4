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
#include "mlp.h"

/* Trains and evaluates; returns the process exit status (0, 1 on a runtime failure, 2 on a
 * configuration that cannot run, such as fewer training examples than ranks). */
int fm_train_run(const fm_options_t *o, bagua_comm_t *comm, const fm_dataset_t *data);

/*
 * --elastic (train_elastic.c): the same model trained through the in-process elastic API
 * (bagua/elastic.h) with the library's load-balanced sampler (bagua/loader.h) and the
 * data-parallel layer attached to the elastic context, so every algorithm runs elastically.
 * The sampler position, samples_seen and a per-epoch coverage bitmap are registered state
 * and committed after every step with the context's weights and optimizer state. Ranks agree
 * at each step boundary whether a new round was published (bagua_elastic_check_all); a
 * failed step is restored to the last commit first. Rank 0 prints
 * "round N world W recovery_ms T" per world change and "round N first_step_mono_ms T unix_ms U"
 * (monotonic and wall-clock) after the new round's first step; every epoch it checks that no sample
 * was processed twice. A worker whose node is not a member of a new round (it left) prints "left
 * the job" and returns 0. The final line gains " samples_seen=N".
 */
int fm_train_run_elastic(const fm_options_t *o, bagua_elastic_t *e, const fm_dataset_t *data);

/* Fraction of the test split classified correctly by the current parameters (x, y: scratch
 * for max_batch rows). */
double fm_evaluate(fm_mlp_t *m, const fm_split_t *test, float *x, uint8_t *y);
/* zlib crc32 of all parameters as bytes, to compare replicas. */
uint32_t fm_params_crc(const fm_mlp_t *m);

#endif
