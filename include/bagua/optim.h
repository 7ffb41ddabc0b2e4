/*
 * Optimizer steps over flat float32 buffers, the same code bagua_ddp_step() runs: a program
 * that keeps its own model and optimizer (the Fashion-MNIST example) gets updates that are
 * bit-identical to libbagua's on every rank and every CPU.
 *
 * Ownership: every buffer belongs to the caller and is only read or written during the call.
 * Threading: no state; calls on disjoint buffers may run concurrently.
 */
#ifndef BAGUA_OPTIM_H
#define BAGUA_OPTIM_H

#include <stddef.h>

#include "bagua/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* torch.optim.SGD's hyper-parameters (maximize=False). */
typedef struct {
  double lr;           /* > 0 */
  double momentum;     /* >= 0 */
  double dampening;    /* >= 0 */
  double weight_decay; /* >= 0 */
  int nesterov;        /* needs momentum > 0 and dampening 0, as torch.optim.SGD */
} bagua_sgd_config_t;

/*
 * One torch.optim.SGD step over n parameters: d = grad + weight_decay * param; with momentum,
 * buf = d on the first step (first_step = 1: momentum_buf is then only written) and
 * buf = momentum * buf + (1 - dampening) * d afterwards, d = nesterov ? d + momentum * buf :
 * buf; then param -= lr * d. momentum_buf (n floats) may be NULL when momentum is 0.
 * Returns BAGUA_ERR_INVALID_ARG, changing nothing, for a NULL buffer the step needs or a
 * hyper-parameter outside the ranges above.
 */
BAGUA_EXTERN bagua_status_t bagua_sgd_step(float *param, const float *grad, float *momentum_buf,
                                           size_t n, const bagua_sgd_config_t *cfg, int first_step);

#ifdef __cplusplus
}
#endif
#endif
