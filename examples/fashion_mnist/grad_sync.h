/*
 * The one place where training meets communication.
 *
 * The training loop only ever calls these functions: backward hands
 * fm_grad_sync_on_grad_ready() to fm_mlp_backward() as its grad-ready callback (so it runs
 * once per layer, last layer first, as soon as that layer's gradient is final), and after
 * backward the loop calls fm_grad_sync_step(), which finishes any communication still in
 * flight and updates the parameters. The synchronisation strategy lives in this file pair
 * and nothing else.
 *
 * With several ranks (or --elastic) every algorithm runs through the library's data-parallel
 * layer (bagua/ddp.h): layers are registered last first in copy mode (the model keeps its own
 * arrays), the hook checks that gradients arrive in backward order and marks a layer's
 * gradient ready so its bucket is communicated while backward goes on, and the step runs the
 * algorithm's optimizer over the fused buffers and writes the weights back into the model.
 * With one rank it communicates nothing and runs the example's SGD (optim.h, the library's
 * bagua_sgd_step) directly.
 */
#ifndef FM_GRAD_SYNC_H
#define FM_GRAD_SYNC_H

#include <stdint.h>
#include <stdio.h>

#include "bagua/bagua.h"
#include "bagua/elastic.h"
#include "cli.h"
#include "mlp.h"
#include "optim.h"

typedef struct fm_grad_sync fm_grad_sync_t;

/* 1 when this build can run the algorithm settings in `o`; otherwise prints why to `err` and
 * returns 0. Called before joining the job, so an unsupported setting fails fast. */
int fm_grad_sync_supported(const fm_options_t *o, FILE *err);

/*
 * Creates the synchroniser for `model`, whose parameters `opt` updates, over `comm`. All
 * three are borrowed and must outlive it. `o` selects the algorithm; `total_steps` (the whole
 * run) sets QAdam's warm-up when --warmup-steps is not given.
 */
bagua_status_t fm_grad_sync_create(bagua_comm_t *comm, fm_mlp_t *model, fm_sgd_t *opt,
                                   const fm_options_t *o, long total_steps, fm_grad_sync_t **out);
/*
 * --elastic: the same over the current round of `e`, always through the data-parallel layer
 * (also with one rank, since the world may grow), attached to `e` so that the context's
 * weights and optimizer state follow commits, restores and rebuilds.
 */
bagua_status_t fm_grad_sync_create_elastic(bagua_elastic_t *e, fm_mlp_t *model, fm_sgd_t *opt,
                                           const fm_options_t *o, long total_steps,
                                           fm_grad_sync_t **out);
void fm_grad_sync_destroy(fm_grad_sync_t *s);

/*
 * The data-parallel layer's settings for `o`: the algorithm and its options, the optimizer and
 * its learning rate, over a run of `total_steps` steps (QAdam's default warm-up is a fifth of
 * it). The device fields keep their defaults (host memory); the GPU loop sets them.
 */
void fm_grad_sync_ddp_config(const fm_options_t *o, long total_steps, bagua_ddp_config_t *cfg);

/* The grad-ready hook (an fm_grad_ready_cb, ctx is the fm_grad_sync_t): layer `layer`'s
 * gradient slice is final. Returns 0 or a bagua_status_t. */
int fm_grad_sync_on_grad_ready(void *ctx, int layer);

/* After backward: completes the step's communication and applies the optimizer update. */
bagua_status_t fm_grad_sync_step(fm_grad_sync_t *s);

/* Fraction (0..1) of communication work that overlapped with computation since creation. */
double fm_grad_sync_overlap(const fm_grad_sync_t *s);

/* Seconds spent inside communication calls since creation. */
double fm_grad_sync_comm_seconds(const fm_grad_sync_t *s);

/* Bytes this rank has sent for gradient synchronisation since creation (whatever
 * communicators the strategy uses). */
uint64_t fm_grad_sync_bytes_sent(const fm_grad_sync_t *s);

#endif
