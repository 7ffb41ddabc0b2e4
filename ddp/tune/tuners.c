/* The table of tuners and the loops the core calls (see ddp/tune.h). */
#include "../tune.h"

#include "common/check.h"

extern const bagua__ddp_tuner_t bagua__ddp_advisor_tuner, bagua__ddp_autotune_tuner;

/* The advisor first: on its deciding step it may move every rank to another algorithm, which
 * autotuning then tunes (or leaves alone). */
const bagua__ddp_tuner_t *const bagua__ddp_tuners[] = {&bagua__ddp_advisor_tuner,
                                                       &bagua__ddp_autotune_tuner, NULL};

bagua_status_t bagua__ddp_tune_choose_algorithm(bagua__ddp_settings_t *s) {
  for (int i = 0; bagua__ddp_tuners[i]; i++)
    if (bagua__ddp_tuners[i]->choose_algorithm) return bagua__ddp_tuners[i]->choose_algorithm(s);
  BAGUA_WARN("bagua_ddp_create: algorithm \"auto\" needs the advisor, which this build lacks");
  return BAGUA_ERR_NOT_SUPPORTED;
}

bagua_status_t bagua__ddp_tune_comm_split(bagua_ddp_t *d, bagua_comm_t *comm, bagua_comm_t **out) {
  for (int i = 0; bagua__ddp_tuners[i]; i++)
    if (bagua__ddp_tuners[i]->comm_split) return bagua__ddp_tuners[i]->comm_split(d, comm, out);
  return bagua_comm_split(comm, 0, bagua_comm_rank(comm), out);
}

uint64_t bagua__ddp_tune_fingerprint(const bagua_ddp_t *d) {
  uint64_t h = 0;
  for (int i = 0; bagua__ddp_tuners[i]; i++)
    if (bagua__ddp_tuners[i]->fingerprint)
      h = h * 0x100000001b3ull ^ bagua__ddp_tuners[i]->fingerprint(d);
  return h;
}

bagua_status_t bagua__ddp_tune_on_ready(bagua_ddp_t *d) {
  for (int i = 0; bagua__ddp_tuners[i]; i++)
    if (bagua__ddp_tuners[i]->on_ready) BAGUA_CHECK(bagua__ddp_tuners[i]->on_ready(d));
  return BAGUA_OK;
}

bagua_status_t bagua__ddp_tune_on_step(bagua_ddp_t *d, double first_ready) {
  for (int i = 0; bagua__ddp_tuners[i]; i++)
    if (bagua__ddp_tuners[i]->on_step) BAGUA_CHECK(bagua__ddp_tuners[i]->on_step(d, first_ready));
  return BAGUA_OK;
}

void bagua__ddp_tune_abort(bagua_ddp_t *d) {
  for (int i = 0; bagua__ddp_tuners[i]; i++)
    if (bagua__ddp_tuners[i]->abort) bagua__ddp_tuners[i]->abort(d);
}

void bagua__ddp_tune_free(bagua_ddp_t *d) {
  for (int i = 0; bagua__ddp_tuners[i]; i++)
    if (bagua__ddp_tuners[i]->free) bagua__ddp_tuners[i]->free(d);
}
