/*
 * Plain SGD with momentum and weight decay over the model's flat parameter buffer, using
 * the library's torch.optim.SGD step (bagua_sgd_step) so that the update is bit-identical
 * on every rank and every ISA for identical gradients.
 */
#ifndef FM_OPTIM_H
#define FM_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#include "bagua/optim.h"
#include "mlp.h"

typedef struct {
  bagua_sgd_config_t hp;
  float *momentum_buf; /* nparams floats, owned; NULL when momentum is 0 */
  int64_t steps;       /* updates applied so far */
} fm_sgd_t;

/* Returns 0, or -1 when out of memory or a hyper-parameter is out of range (logged). */
int fm_sgd_init(fm_sgd_t *o, size_t nparams, double lr, double momentum, double weight_decay);
void fm_sgd_free(fm_sgd_t *o);
/* params -= lr * (momentum-smoothed grads + weight_decay * params), over the whole model. */
void fm_sgd_step(fm_sgd_t *o, fm_mlp_t *m);

#endif
