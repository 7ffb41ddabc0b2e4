/*
 * The advisor inside the data-parallel layer (advise.c; docs/advisor.md): with BAGUA_ADVISE=1
 * or algorithm "auto" it measures the network through a private communicator when the
 * context becomes ready, the compute time of the first steps, then predicts every
 * algorithm's step time (advisor_model.h), has rank 0 print the ranked table, and with "auto"
 * moves every rank to the predicted fastest allowed algorithm at the same step.
 */
#ifndef BAGUA_DDP_ADVISE_H
#define BAGUA_DDP_ADVISE_H

#include <stddef.h>

#include "advisor_model.h"
#include "../ddp_internal.h"

/*
 * Algorithm "auto" (config.c): reads BAGUA_AUTO_ALLOW (validated by the registry) into
 * s->auto_allow and starts s->algo at the safest allowed algorithm (gradient_allreduce, then
 * bytegrad, decentralized, low_precision_decentralized, async; qadam only when it is the one
 * allowed, since it brings its own optimizer and a running context cannot change that).
 */
bagua_status_t bagua__ddp_auto_pick(bagua__ddp_settings_t *s);

/*
 * bagua_ddp_ready(), before the layout is built (no communication thread yet): when the
 * advisor is on, holds the context's communication for the probe's steps, splits its private
 * communicator off d->comm and measures latency, bandwidth (among node leaders and within
 * nodes) and the compression throughput. Collective over d->comm; bounded (a few small and a
 * few MiB-sized allreduces). Does nothing when off.
 */
bagua_status_t bagua__ddp_advise_start(bagua_ddp_t *d);

/*
 * The end of bagua_ddp_step(), after the step is complete. The warm-up step and the next
 * BAGUA_ADVISE_STEPS steps run with communication held (bagua__ddp_sched_hold, from
 * bagua__ddp_advise_start on), so that their compute time (`first_ready`: when the step's first
 * gradient was marked ready, 0 if none was) is the same figure under every algorithm. Then the
 * advisor predicts, prints (rank 0) and, with "auto", switches every rank
 * (bagua__ddp_reconfigure); communication resumes. After one more step it times
 * BAGUA_ADVISE_STEPS steps and rank 0 prints them against the prediction ("advise: check:").
 * Collective on the step that decides and on the last step checked.
 */
bagua_status_t bagua__ddp_advise_step(bagua_ddp_t *d, double first_ready);

void bagua__ddp_advise_free(bagua_ddp_t *d);
/* bagua_ddp_abort() (any thread, under d->comm_mu): aborts the advisor's communicator, so that
 * a probe or the decision's collectives end at once. */
void bagua__ddp_advise_abort(bagua_ddp_t *d);

/* The last table rank 0 formatted (NULL before the decision or on other ranks); for tests. */
const char *bagua__ddp_advise_table(const bagua_ddp_t *d);

/*
 * Formats the ranked table: a header with the measurements, then one line per algorithm
 * sorted by predicted step time ("advise: RANK NAME S/STEP ..."). avail[i] 0 marks an
 * algorithm whose settings were refused; allow is the "auto" mask (0: advice only),
 * `chosen` the algorithm picked (-1: none), `running` the one measured (-1: none) and
 * `measured_s` its median measured step time, shown next to its prediction. Returns the
 * length it wanted, as snprintf does.
 */
size_t bagua__ddp_advise_format(char *buf, size_t len, const bagua__adv_meas_t *m,
                                const bagua__adv_opts_t *opts, const bagua__adv_pred_t *pred,
                                const int *avail, unsigned allow, int chosen, int running,
                                double measured_s);

#endif
