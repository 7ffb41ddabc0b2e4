/*
 * The optional tuners of a data-parallel context: the advisor (ddp/tune/advise.c), which
 * measures the job and ranks or picks the algorithm, and autotuning (ddp/tune/autotune.c),
 * which searches bucket size, hierarchy, streams and ring settings. The core calls them only
 * through this table, at fixed points of a context's life, so that it names neither and a
 * tuner is added by its files and its row in bagua__ddp_tuners.
 *
 * Every hook may be NULL. They run on the training thread, except `abort` (any thread, under
 * the context's comm_mu, as bagua__ddp_comms_abort runs). Collective hooks must make the same
 * calls in the same order on every rank.
 */
#ifndef BAGUA_DDP_TUNE_H
#define BAGUA_DDP_TUNE_H

#include <stdint.h>

#include "ddp_internal.h"

typedef struct {
  const char *name;
  /* config: picks the algorithm when the program asks for "auto" (the first tuner that has
   * this hook decides). */
  bagua_status_t (*choose_algorithm)(bagua__ddp_settings_t *s);
  /* The private communicator the context works on, split off the program's `comm`
   * (collective; the first tuner that has this hook makes it, else a plain split). */
  bagua_status_t (*comm_split)(bagua_ddp_t *d, bagua_comm_t *comm, bagua_comm_t **out);
  /* Mixed into the layout fingerprint that ready() compares across ranks. */
  uint64_t (*fingerprint)(const bagua_ddp_t *d);
  /* bagua_ddp_ready(), before the layout is built and the communication thread starts. */
  bagua_status_t (*on_ready)(bagua_ddp_t *d);
  /* The end of every step, after the algorithm's next_step: measure, and maybe move every
   * rank to other settings at this step boundary. `first_ready`: when the step's first
   * gradient was ready (the backward window). */
  bagua_status_t (*on_step)(bagua_ddp_t *d, double first_ready);
  void (*abort)(bagua_ddp_t *d);
  /* bagua_ddp_destroy(); must accept a tuner that never started. */
  void (*free)(bagua_ddp_t *d);
} bagua__ddp_tuner_t;

/* The tuners, in the order their hooks run; NULL-terminated. */
extern const bagua__ddp_tuner_t *const bagua__ddp_tuners[];

/* The table's hooks, each run over every tuner that has it (see above). */
bagua_status_t bagua__ddp_tune_choose_algorithm(bagua__ddp_settings_t *s);
bagua_status_t bagua__ddp_tune_comm_split(bagua_ddp_t *d, bagua_comm_t *comm, bagua_comm_t **out);
uint64_t bagua__ddp_tune_fingerprint(const bagua_ddp_t *d);
bagua_status_t bagua__ddp_tune_on_ready(bagua_ddp_t *d);
bagua_status_t bagua__ddp_tune_on_step(bagua_ddp_t *d, double first_ready);
void bagua__ddp_tune_abort(bagua_ddp_t *d);
void bagua__ddp_tune_free(bagua_ddp_t *d);
#endif
