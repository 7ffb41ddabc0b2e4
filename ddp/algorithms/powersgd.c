/*
 * PowerSGD (Vogels et al. 2019), as torch's powerSGD_hook defines it: each gradient matrix M
 * of a bucket (a tensor with a shape from bagua_ddp_register_shape(), viewed as rows x cols)
 * is replaced by the rank-r approximation of the average over the ranks:
 *
 *   M += error;  P = M Q;  allreduce(P);  orthonormalise P's columns;  Q = M^T P;
 *   allreduce(Q) / world;  Mhat = P Q^T;  error = M - Mhat;  M = Mhat,
 *
 * with Q kept from the previous step (warm start) and, before the first, drawn from a seeded
 * generator identical on every rank. The P of all matrices of a bucket travel in one
 * allreduce and so do the Q, as torch batches them. Vectors and matrices too small to gain
 * (torch's min_compression_rate 2: compressed only when 2 (rows + cols) r < rows cols) are
 * averaged uncompressed, packed into one allreduce per bucket; a bucket without any matrix to
 * compress is averaged exactly as gradient_allreduce does it. The first warmup_steps steps
 * (torch's start_powerSGD_iter) are gradient_allreduce.
 *
 * One difference from torch: the error is kept for the compressed matrices only. torch keeps
 * it for the whole bucket, so an uncompressed tensor's "error" there is its rank's deviation
 * from the mean, which sums to zero over the ranks and changes the next mean only by
 * rounding; without it the uncompressed tensors get the plain mean, bit for bit.
 *
 * Hierarchical: the node reduces the bucket onto its leader (a sum), the leaders run the above
 * among themselves on their sums scaled by leaders / ranks (so that the leaders' mean is the
 * mean over every rank, even with nodes of different sizes), and the leader broadcasts the
 * result within its node; the error and Q live on the leaders.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../ddp_internal.h"
#include "common/check.h"
#include "common/log.h"

#define L BAGUA__LANE_COMM

/* torch's PowerSGD adds this to every column norm (orthogonalization_epsilon when set): a
 * column of zero norm, a zero gradient, then stays zero instead of turning into NaN. */
#define ORTHO_EPS 1e-8f

typedef struct {
  int tensor;
  size_t rows, cols, r;
  size_t p_off; /* in the bucket's P pack */
  size_t q_off; /* in st->q, r x cols (Q transposed) */
  size_t e_off; /* in st->err, rows x cols */
} mat_t;

typedef struct {
  int first, n;          /* its matrices: mats[first, first + n) */
  size_t p_count;        /* elements of its P pack */
  size_t q_off, q_count; /* its Q slice of st->q (the matrices' Q, back to back) */
  size_t u_count;        /* elements of its uncompressed tensors */
} bk_t;

typedef struct {
  bagua_comm_t *comm; /* where the low-rank factors travel; NULL on a node member (hier) */
  int n;              /* its size */
  mat_t *mats;
  int nmats;
  bk_t *bk; /* one per bucket */
  float *q, *err, *p, *u;
} state_t;

uint64_t bagua__ddp_powersgd_seed(int tensor) {
  return 0x9d2c5680u + (uint64_t)tensor;
}

/* Whether tensor t is compressed, and at which rank (torch's _should_compress). */
static size_t rank_of(const bagua_ddp_t *d, const bagua__ddp_tensor_t *t, size_t *cols) {
  if (!t->rows) return 0;
  size_t rows = t->rows, c = t->count / rows, r = (size_t)d->s.rank;
  if (r > rows) r = rows;
  if (r > c) r = c;
  *cols = c;
  /* rows * cols <= 2^40 (bagua_ddp_register), so none of these overflow. */
  return 2 * (rows + c) * r < rows * c ? r : 0;
}

static void teardown(bagua_ddp_t *d) {
  state_t *st = d->algo_state;
  if (!st) return;
  bagua__ddp_free(d, st->q);
  bagua__ddp_free(d, st->err);
  bagua__ddp_free(d, st->p);
  bagua__ddp_free(d, st->u);
  free(st->mats);
  free(st->bk);
  free(st);
  d->algo_state = NULL;
}

static bagua_status_t setup(bagua_ddp_t *d) {
  bagua_status_t rc = BAGUA_ERR_NO_MEMORY;
  float *host = NULL;
  size_t q_total = 0, e_total = 0, p_max = 0, u_max = 0, q_max = 0;
  state_t *st = calloc(1, sizeof(*st));
  if (!st) return BAGUA_ERR_NO_MEMORY;
  d->algo_state = st;
  st->comm = d->s.hierarchical ? d->inter : d->comm;
  st->n = st->comm ? bagua_comm_size(st->comm) : 0;
  st->bk = calloc((size_t)d->nbuckets + 1, sizeof(*st->bk));
  st->mats = calloc((size_t)d->ntensors + 1, sizeof(*st->mats));
  if (!st->bk || !st->mats) goto fail;
  for (int b = 0; b < d->nbuckets; b++) {
    const bagua__ddp_bucket_t *bu = &d->buckets[b];
    bk_t *k = &st->bk[b];
    k->first = st->nmats;
    k->q_off = q_total;
    for (int i = bu->first; i < bu->first + bu->ntensors; i++) {
      const bagua__ddp_tensor_t *t = &d->tensors[i];
      size_t cols = 0, r = rank_of(d, t, &cols);
      if (!r) {
        k->u_count += t->count;
        continue;
      }
      mat_t *m = &st->mats[st->nmats++];
      *m = (mat_t){.tensor = i,
                   .rows = t->rows,
                   .cols = cols,
                   .r = r,
                   .p_off = k->p_count,
                   .q_off = q_total,
                   .e_off = e_total};
      k->p_count += t->rows * r;
      q_total += cols * r;
      e_total += t->count;
      if (cols * r > q_max) q_max = cols * r;
    }
    k->n = st->nmats - k->first;
    k->q_count = q_total - k->q_off;
    if (k->p_count > p_max) p_max = k->p_count;
    if (k->u_count > u_max) u_max = k->u_count;
  }
  /* A node member (hierarchical), a single participant (which compresses nothing, see
   * bucket_op) and a model without matrices keep nothing. */
  if (!st->comm || st->n == 1 || st->nmats == 0) return BAGUA_OK;
  st->q = bagua__ddp_alloc_floats(d, q_total);
  st->p = bagua__ddp_alloc_floats(d, p_max);
  st->u = bagua__ddp_alloc_floats(d, u_max);
  if (d->s.error_feedback) st->err = bagua__ddp_alloc_floats(d, e_total);
  host = malloc((q_max ? q_max : 1) * sizeof(float));
  if (!st->q || !st->p || !st->u || (d->s.error_feedback && !st->err) || !host) {
    BAGUA_WARN(
        "ddp: powersgd: out of %s memory for the low-rank factors (%zu elements of Q, "
        "%zu of error)",
        d->s.dev->name, q_total, d->s.error_feedback ? e_total : (size_t)0);
    goto fail;
  }
  /* The same Q on every rank, whatever the bucket layout: one stream per tensor. */
  for (int i = 0; i < st->nmats; i++) {
    const mat_t *m = &st->mats[i];
    bagua__randn_f32(bagua__ddp_powersgd_seed(m->tensor), host, m->cols * m->r);
    BAGUA_CHECK_GOTO(d->s.dev->from_host(d, BAGUA__LANE_COMPUTE, st->q + m->q_off, host,
                                         m->cols * m->r * sizeof(float)),
                     rc, fail);
  }
  free(host);
  return BAGUA_OK;
fail:
  free(host);
  teardown(d); /* the core calls it again after a failed setup: it finds nothing */
  return rc;
}

/* Copies the bucket's uncompressed tensors into st->u (to_u) or back. */
static bagua_status_t pack(bagua_ddp_t *d, const state_t *st, const bagua__ddp_bucket_t *b,
                           const bk_t *k, int to_u) {
  size_t off = 0;
  int next = k->first; /* the bucket's matrices are in registration order */
  for (int i = b->first; i < b->first + b->ntensors; i++) {
    const bagua__ddp_tensor_t *t = &d->tensors[i];
    if (next < k->first + k->n && st->mats[next].tensor == i) {
      next++;
      continue;
    }
    float *g = d->grads + t->offset;
    BAGUA_CHECK(d->s.dev->copy(d, L, to_u ? st->u + off : g, to_u ? g : st->u + off,
                               t->count * sizeof(float)));
    off += t->count;
  }
  return BAGUA_OK;
}

/* The low-rank average among st->comm's st->n ranks (the header's sequence). */
static bagua_status_t compress_avg(bagua_ddp_t *d, state_t *st, const bagua__ddp_bucket_t *b,
                                   const bk_t *k) {
  const bagua__ddp_dev_t *dev = d->s.dev;
  if (k->u_count) {
    BAGUA_CHECK(pack(d, st, b, k, 1));
    BAGUA_CHECK(dev->allreduce(d, L, st->comm, st->u, st->u, k->u_count, BAGUA_F32, BAGUA_AVG));
    BAGUA_CHECK(pack(d, st, b, k, 0));
  }
  const mat_t *mats = st->mats + k->first;
  for (int i = 0; i < k->n; i++) {
    const mat_t *m = &mats[i];
    float *g = d->grads + d->tensors[m->tensor].offset;
    if (st->err) BAGUA_CHECK(dev->add(d, L, g, st->err + m->e_off, m->rows * m->cols));
    BAGUA_CHECK(
        dev->lowrank_mq(d, L, g, m->rows, m->cols, st->q + m->q_off, m->r, st->p + m->p_off));
  }
  /* A sum: the orthonormalisation makes P's scale irrelevant. */
  BAGUA_CHECK(dev->allreduce(d, L, st->comm, st->p, st->p, k->p_count, BAGUA_F32, BAGUA_SUM));
  for (int i = 0; i < k->n; i++) {
    const mat_t *m = &mats[i];
    float *g = d->grads + d->tensors[m->tensor].offset;
    BAGUA_CHECK(dev->lowrank_orthonormalise(d, L, st->p + m->p_off, m->rows, m->r, ORTHO_EPS));
    BAGUA_CHECK(
        dev->lowrank_mtp(d, L, g, m->rows, m->cols, st->p + m->p_off, m->r, st->q + m->q_off));
  }
  float *q = st->q + k->q_off;
  BAGUA_CHECK(dev->allreduce(d, L, st->comm, q, q, k->q_count, BAGUA_F32, BAGUA_SUM));
  BAGUA_CHECK(dev->div(d, L, q, k->q_count, st->n));
  for (int i = 0; i < k->n; i++) {
    const mat_t *m = &mats[i];
    float *g = d->grads + d->tensors[m->tensor].offset;
    BAGUA_CHECK(dev->lowrank_pqt(d, L, st->p + m->p_off, st->q + m->q_off, m->rows, m->cols, m->r,
                                 g, st->err ? st->err + m->e_off : NULL));
  }
  return BAGUA_OK;
}

static bagua_status_t bucket_op(bagua_ddp_t *d, void *arg) {
  bagua__ddp_bucket_t *b = arg;
  state_t *st = d->algo_state;
  const bk_t *k = &st->bk[b - d->buckets];
  float *g = d->grads + b->offset;
  int hier = d->s.hierarchical;
  /* The warm-up, and buckets with nothing to compress, are gradient_allreduce bit for bit. */
  if (d->steps < d->s.warmup_steps || k->n == 0)
    return bagua__ddp_allreduce_avg(d, g, b->count, hier);
  if (hier) BAGUA_CHECK(bagua__ddp_node_reduce(d, g, b->count, 0));
  if (st->comm && st->n == 1) {
    /* One participant: nothing to save on the wire, and the approximation would only lose. */
    if (hier) BAGUA_CHECK(d->s.dev->div(d, L, g, b->count, d->size));
  } else if (st->comm) {
    if (hier && st->n != d->size)
      BAGUA_CHECK(d->s.dev->scale(d, L, (float)((double)st->n / d->size), g, b->count));
    BAGUA_CHECK(compress_avg(d, st, b, k));
  }
  if (hier) BAGUA_CHECK(bagua__ddp_node_bcast(d, g, b->count));
  return BAGUA_OK;
}

const bagua__ddp_algo_t bagua__ddp_powersgd = {
    .name = "powersgd",
    .caps = BAGUA__ALGO_ERROR_FEEDBACK | BAGUA__ALGO_WARMUP | BAGUA__ALGO_LOW_RANK |
            BAGUA__ALGO_ALLREDUCE,
    .default_warmup_steps = 10,
    .default_error_feedback = 1,
    .hierarchical_default = 0,
    .setup = setup,
    .bucket_op = bucket_op,
    .teardown = teardown,
};
