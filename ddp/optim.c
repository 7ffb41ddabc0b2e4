/*
 * The generic fused optimizer (Bagua's contrib/fuse/optimizer.py, without its search for
 * contiguous runs): parameters, gradients and every state tensor already live in flat
 * buffers with the same layout, so one kernel call updates the whole model. Padding elements
 * have zero weight and zero gradient and stay zero under every update rule used here.
 */
#include <math.h>

#include "common/log.h"
#include "ddp_internal.h"
#include "kernels/kernels.h"

bagua_status_t bagua__ddp_optim_setup(bagua_ddp_t *d) {
  int opt = d->s.optimizer;
  int need_v = opt == BAGUA__OPT_ADAM || opt == BAGUA__OPT_ADAMW || opt == BAGUA__OPT_QADAM;
  int need_m = need_v || (opt == BAGUA__OPT_SGD && d->s.momentum != 0);
  if (need_m && !(d->opt_m = bagua__ddp_alloc_floats(d, d->total))) goto nomem;
  if (need_v && !(d->opt_v = bagua__ddp_alloc_floats(d, d->total))) goto nomem;
  return BAGUA_OK;
nomem:
  BAGUA_WARN("ddp: out of %s memory for the optimizer state of %zu elements", d->s.dev->name,
             d->total);
  return BAGUA_ERR_NO_MEMORY;
}

bagua_status_t bagua__ddp_optim_step(bagua_ddp_t *d) {
  const bagua__ddp_settings_t *s = &d->s;
  switch (s->optimizer) {
    case BAGUA__OPT_NONE:
      return BAGUA_OK; /* the caller's own optimizer updated the weights */
    case BAGUA__OPT_SGD: {
      bagua__sgd_params_t hp = {d->lr, s->momentum, s->dampening, s->weight_decay, s->nesterov};
      return d->s.dev->sgd(d, BAGUA__LANE_COMPUTE, d->params, d->grads, d->opt_m, d->total, &hp,
                           d->steps == 0);
    }
    case BAGUA__OPT_ADAM:
    case BAGUA__OPT_ADAMW:
    case BAGUA__OPT_QADAM: { /* QAdam's warm-up is plain Adam with L2 weight decay */
      bagua__adam_params_t hp = {d->lr,  s->beta1,        s->beta2,
                                 s->eps, s->weight_decay, s->optimizer == BAGUA__OPT_ADAMW};
      return d->s.dev->adam(d, BAGUA__LANE_COMPUTE, d->params, d->grads, d->opt_m, d->opt_v,
                            d->total, &hp, d->steps + 1);
    }
  }
  return BAGUA_ERR_INTERNAL;
}

void bagua__ddp_qadam_frozen_step(float *p, const float *m, const float *v, size_t n, double lr,
                                  double beta1, double beta2, double eps, int64_t step,
                                  int64_t v_step) {
  /* The same arithmetic as the Adam kernel's final line, with m and v given. v stopped
   * updating at v_step, so its bias correction stays at v_step: correcting a frozen v with the
   * running count (as Bagua does) shrinks the variance estimate as training goes on and so
   * silently grows the effective step size (about 2x over a 5-epoch Fashion-MNIST run). */
  double bc1 = 1.0 - pow(beta1, (double)step);
  double bc2 = 1.0 - pow(beta2, (double)(v_step < step ? v_step : step));
  float step_size = (float)(lr / bc1);
  float bias2_sqrt = (float)sqrt(bc2);
  float e = (float)eps;
  for (size_t i = 0; i < n; i++) p[i] = p[i] - step_size * m[i] / (sqrtf(v[i]) / bias2_sqrt + e);
}
