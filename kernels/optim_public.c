/* bagua_sgd_step (include/bagua/optim.h): the argument contract, then the kernel
 * bagua_ddp_step() runs. */
#include "bagua/optim.h"

#include <math.h>

#include "common/log.h"
#include "kernels/kernels.h"

/* Whether x is finite and >= 0 (a NaN fails both). */
static int nonneg(double x) {
  return isfinite(x) && x >= 0;
}

bagua_status_t bagua_sgd_step(float *param, const float *grad, float *momentum_buf, size_t n,
                              const bagua_sgd_config_t *cfg, int first_step) {
  if (!cfg) {
    BAGUA_WARN("bagua_sgd_step: cfg is NULL");
    return BAGUA_ERR_INVALID_ARG;
  }
  if (!(isfinite(cfg->lr) && cfg->lr > 0) || !nonneg(cfg->momentum) || !nonneg(cfg->dampening) ||
      !nonneg(cfg->weight_decay)) {
    BAGUA_WARN(
        "bagua_sgd_step: lr=%g momentum=%g dampening=%g weight_decay=%g; accepted: lr > 0, "
        "the others >= 0, all finite",
        cfg->lr, cfg->momentum, cfg->dampening, cfg->weight_decay);
    return BAGUA_ERR_INVALID_ARG;
  }
  if (cfg->nesterov && (cfg->momentum <= 0 || cfg->dampening != 0)) {
    BAGUA_WARN(
        "bagua_sgd_step: nesterov needs momentum > 0 and dampening 0 (momentum=%g, "
        "dampening=%g)",
        cfg->momentum, cfg->dampening);
    return BAGUA_ERR_INVALID_ARG;
  }
  if (n == 0) return BAGUA_OK;
  if (!param || !grad || (cfg->momentum != 0 && !momentum_buf)) {
    BAGUA_WARN("bagua_sgd_step: %s is NULL with n=%zu",
               !param  ? "param"
               : !grad ? "grad"
                       : "momentum_buf (momentum > 0)",
               n);
    return BAGUA_ERR_INVALID_ARG;
  }
  bagua__sgd_params_t hp = {.lr = cfg->lr,
                            .momentum = cfg->momentum,
                            .dampening = cfg->dampening,
                            .weight_decay = cfg->weight_decay,
                            .nesterov = cfg->nesterov};
  bagua__sgd_step(param, grad, momentum_buf, n, &hp, first_step);
  return BAGUA_OK;
}
