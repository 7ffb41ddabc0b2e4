/*
 * SGD optimizer state and step (see optim.h).
 */
#include "optim.h"

#include <stdlib.h>
#include <string.h>

int fm_sgd_init(fm_sgd_t *o, size_t nparams, double lr, double momentum, double weight_decay) {
  memset(o, 0, sizeof(*o));
  o->hp.lr = lr;
  o->hp.momentum = momentum;
  o->hp.weight_decay = weight_decay;
  /* An empty step checks the hyper-parameters once, so fm_sgd_step cannot be refused. */
  if (bagua_sgd_step(NULL, NULL, NULL, 0, &o->hp, 1) != BAGUA_OK) return -1;
  if (momentum != 0.0) {
    /* The first step only writes the buffer (torch semantics), so it needs no zeroing. */
    o->momentum_buf = malloc(sizeof(float) * (nparams ? nparams : 1));
    if (!o->momentum_buf) return -1;
  }
  return 0;
}

void fm_sgd_free(fm_sgd_t *o) {
  free(o->momentum_buf);
  memset(o, 0, sizeof(*o));
}

void fm_sgd_step(fm_sgd_t *o, fm_mlp_t *m) {
  /* fm_sgd_init checked the hyper-parameters and allocated the buffer momentum needs. */
  bagua_status_t st =
      bagua_sgd_step(m->params, m->grads, o->momentum_buf, m->nparams, &o->hp, o->steps == 0);
  (void)st;
  o->steps++;
}
