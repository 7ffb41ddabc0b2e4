/*
 * A synthetic least-squares problem for the data-parallel tests: Y = X W* + b* + noise, with
 * every rank holding its own shard of samples and the model's weight matrix split into
 * several tensors (so that it spans several buckets). Every rank can regenerate every shard,
 * so each can evaluate its model on the union of the data and replay a single-process run.
 */
#ifndef BAGUA_TESTS_DDP_PROBLEM_H
#define BAGUA_TESTS_DDP_PROBLEM_H

#include "bagua/bagua.h"
#include "bagua/ddp.h"

typedef struct {
  int d_in, d_out, n; /* features, outputs, samples per shard */
  int nsplit;         /* W is registered as this many row blocks */
  float noise;
} problem_t;

typedef struct {
  const problem_t *p;
  float *x, *y; /* n x d_in, n x d_out */
} shard_t;

typedef struct {
  const problem_t *p;
  float *w, *b;   /* d_in x d_out, d_out */
  float *gw, *gb; /* gradients */
} model_t;

void shard_make(const problem_t *p, int rank, shard_t *s);
void shard_free(shard_t *s);
/* Deterministic initial weights, different for every `seed` (ranks start apart on purpose). */
void model_init(const problem_t *p, int seed, model_t *m);
void model_free(model_t *m);
/* Mean over the shard of 0.5 * |x W + b - y|^2; fills m->gw, m->gb with its gradient when
 * grads is set. */
double model_loss(model_t *m, const shard_t *s, int grads);
/* Mean loss over the shards of ranks 0 .. nranks-1. */
double model_union_loss(model_t *m, int nranks);
/* Noise floor of the loss: 0.5 * noise^2 * d_out. */
double problem_floor(const problem_t *p);

/* Registers the model's tensors in backward order (b, then W's blocks from last to first);
 * returns the number of tensors. zero_copy_mask bit i registers tensor i with grad = NULL. */
int model_register(model_t *m, bagua_ddp_t *ddp, unsigned zero_copy_mask);
/* One training step: gradients tensor by tensor with bagua_ddp_grad_ready() after each. */
bagua_status_t model_train_step(model_t *m, const shard_t *s, bagua_ddp_t *ddp,
                                unsigned zero_copy_mask);

/* Fails the test unless the float arrays are bit-identical on every rank of c. */
void assert_same_on_all_ranks(bagua_comm_t *c, const float *v, size_t n, const char *what);

/* Under AddressSanitizer: fails the test if memory allocated so far is unreachable. The
 * forked ranks leave through _exit(), which skips LeakSanitizer's exit-time check, so the
 * rank bodies call this before returning. Elsewhere it does nothing. */
void assert_no_leaks(void);

#endif
