/*
 * The host-memory device of the data-parallel layer (dev.h): plain calls into the CPU
 * kernels and the CPU communicators. Every call has finished when it returns, so the lane
 * arguments and the ordering operations have nothing to do.
 */
#include <stdlib.h>
#include <string.h>

#include "ddp_internal.h"
#include "dev.h"

static bagua_status_t open_(bagua_ddp_t *d) {
  (void)d;
  return BAGUA_OK;
}

static void nothing(bagua_ddp_t *d) {
  (void)d;
}

static bagua_status_t jobs_init(bagua_ddp_t *d, size_t slots) {
  (void)d;
  (void)slots;
  return BAGUA_OK;
}

static void *alloc(bagua_ddp_t *d, size_t bytes) {
  (void)d;
  /* 64-byte alignment lets the vector kernels stream whole cache lines; aligned_alloc needs
   * a size that is a multiple of the alignment. */
  if (bytes > SIZE_MAX - 64) return NULL;
  size_t n = (bytes + 63) & ~(size_t)63;
  if (n == 0) n = 64;
  void *p = aligned_alloc(64, n);
  if (p) memset(p, 0, n);
  return p;
}

static void free_(bagua_ddp_t *d, void *p) {
  (void)d;
  free(p);
}

static bagua_status_t copy(bagua_ddp_t *d, bagua__lane_t l, void *dst, const void *src,
                           size_t bytes) {
  (void)d;
  (void)l;
  if (bytes && dst != src) memmove(dst, src, bytes);
  return BAGUA_OK;
}

static bagua_status_t zero(bagua_ddp_t *d, bagua__lane_t l, void *dst, size_t bytes) {
  (void)d;
  (void)l;
  if (bytes) memset(dst, 0, bytes);
  return BAGUA_OK;
}

static int owns(bagua_ddp_t *d, const void *p) {
  (void)d;
  return p != NULL;
}

static bagua_status_t div_(bagua_ddp_t *d, bagua__lane_t l, float *buf, size_t n, int k) {
  (void)d;
  (void)l;
  bagua__div(BAGUA_F32, buf, n, k);
  return BAGUA_OK;
}

static bagua_status_t add(bagua_ddp_t *d, bagua__lane_t l, float *dst, const float *src, size_t n) {
  (void)d;
  (void)l;
  bagua__reduce(BAGUA_F32, BAGUA_SUM, dst, src, n);
  return BAGUA_OK;
}

static bagua_status_t axpy(bagua_ddp_t *d, bagua__lane_t l, float a, const float *x, float *y,
                           size_t n) {
  (void)d;
  (void)l;
  bagua__axpy(a, x, y, n);
  return BAGUA_OK;
}

static bagua_status_t scale(bagua_ddp_t *d, bagua__lane_t l, float a, float *x, size_t n) {
  (void)d;
  (void)l;
  bagua__scale(a, x, n);
  return BAGUA_OK;
}

static bagua_status_t compress(bagua_ddp_t *d, bagua__lane_t l, const float *in, size_t chunk,
                               size_t k, uint8_t *out) {
  (void)d;
  (void)l;
  return bagua__minmax_u8_compress(BAGUA_F32, in, chunk, k, out);
}

static bagua_status_t decompress(bagua_ddp_t *d, bagua__lane_t l, const uint8_t *in, size_t chunk,
                                 size_t k, float *out) {
  (void)d;
  (void)l;
  return bagua__minmax_u8_decompress(BAGUA_F32, in, chunk, k, out);
}

static bagua_status_t decompress_add(bagua_ddp_t *d, bagua__lane_t l, const uint8_t *in,
                                     size_t chunk, size_t k, float *acc) {
  (void)d;
  (void)l;
  return bagua__minmax_u8_decompress_add(BAGUA_F32, in, chunk, k, acc);
}

static bagua_status_t sgd(bagua_ddp_t *d, bagua__lane_t l, float *p, const float *g, float *m,
                          size_t n, const bagua__sgd_params_t *hp, int first_step) {
  (void)d;
  (void)l;
  bagua__sgd_step(p, g, m, n, hp, first_step);
  return BAGUA_OK;
}

static bagua_status_t adam(bagua_ddp_t *d, bagua__lane_t l, float *p, const float *g, float *m,
                           float *v, size_t n, const bagua__adam_params_t *hp, int64_t step) {
  (void)d;
  (void)l;
  bagua__adam_step(p, g, m, v, n, hp, step);
  return BAGUA_OK;
}

static bagua_status_t qadam_frozen(bagua_ddp_t *d, bagua__lane_t l, float *p, const float *m,
                                   const float *v, size_t n, double lr, double beta1, double beta2,
                                   double eps, int64_t step, int64_t v_step) {
  (void)d;
  (void)l;
  bagua__ddp_qadam_frozen_step(p, m, v, n, lr, beta1, beta2, eps, step, v_step);
  return BAGUA_OK;
}

static bagua_status_t qadam_momentum(bagua_ddp_t *d, bagua__lane_t l, float *m, const float *g,
                                     const float *p, size_t n, float beta1, float one_minus_beta1,
                                     float wd) {
  (void)d;
  (void)l;
  bagua__qadam_momentum(m, g, p, n, beta1, one_minus_beta1, wd);
  return BAGUA_OK;
}

static bagua_status_t lpdec_diff(bagua_ddp_t *d, bagua__lane_t l, float *diff, const float *x,
                                 const float *s, const float *w, size_t n) {
  (void)d;
  (void)l;
  bagua__lpdec_diff(diff, x, s, w, n);
  return BAGUA_OK;
}

static bagua_status_t lowrank_mq(bagua_ddp_t *d, bagua__lane_t l, const float *m, size_t rows,
                                 size_t cols, const float *qt, size_t r, float *p) {
  (void)d;
  (void)l;
  bagua__lowrank_mq(m, rows, cols, qt, r, p);
  return BAGUA_OK;
}

static bagua_status_t lowrank_mtp(bagua_ddp_t *d, bagua__lane_t l, const float *m, size_t rows,
                                  size_t cols, const float *p, size_t r, float *qt) {
  (void)d;
  (void)l;
  bagua__lowrank_mtp(m, rows, cols, p, r, qt);
  return BAGUA_OK;
}

static bagua_status_t lowrank_pqt(bagua_ddp_t *d, bagua__lane_t l, const float *p, const float *qt,
                                  size_t rows, size_t cols, size_t r, float *m, float *err) {
  (void)d;
  (void)l;
  bagua__lowrank_pqt(p, qt, rows, cols, r, m, err);
  return BAGUA_OK;
}

static bagua_status_t lowrank_orthonormalise(bagua_ddp_t *d, bagua__lane_t l, float *p, size_t rows,
                                             size_t r, float eps) {
  (void)d;
  (void)l;
  bagua__lowrank_orthonormalise(p, rows, r, eps);
  return BAGUA_OK;
}

static bagua_status_t allreduce(bagua_ddp_t *d, bagua__lane_t l, bagua_comm_t *c, const void *s,
                                void *r, size_t n, bagua_dtype_t dt, bagua_op_t op) {
  (void)d;
  (void)l;
  return bagua_allreduce(c, s, r, n, dt, op);
}

static bagua_status_t reduce(bagua_ddp_t *d, bagua__lane_t l, bagua_comm_t *c, const void *s,
                             void *r, size_t n, bagua_dtype_t dt, bagua_op_t op, int root) {
  (void)d;
  (void)l;
  return bagua_reduce(c, s, r, n, dt, op, root);
}

static bagua_status_t broadcast(bagua_ddp_t *d, bagua__lane_t l, bagua_comm_t *c, const void *s,
                                void *r, size_t n, bagua_dtype_t dt, int root) {
  (void)d;
  (void)l;
  return bagua_broadcast(c, s, r, n, dt, root);
}

static bagua_status_t alltoall(bagua_ddp_t *d, bagua__lane_t l, bagua_comm_t *c, const void *s,
                               void *r, size_t n, bagua_dtype_t dt) {
  (void)d;
  (void)l;
  return bagua_alltoall(c, s, r, n, dt);
}

static bagua_status_t allgather(bagua_ddp_t *d, bagua__lane_t l, bagua_comm_t *c, const void *s,
                                void *r, size_t n, bagua_dtype_t dt) {
  (void)d;
  (void)l;
  return bagua_allgather(c, s, r, n, dt);
}

static bagua_status_t sendrecv(bagua_ddp_t *d, bagua__lane_t l, bagua_comm_t *c, const void *s,
                               size_t sn, int dst, void *r, size_t rn, int src, bagua_dtype_t dt) {
  (void)d;
  (void)l;
  return bagua_sendrecv(c, s, sn, dst, r, rn, src, dt);
}

static bagua_status_t neighbors(bagua_ddp_t *d, bagua__lane_t l, bagua_comm_t *c, const void *s,
                                size_t n, int left, void *rl, int right, void *rr,
                                bagua_dtype_t dt) {
  (void)d;
  (void)l;
  return bagua_neighbor_exchange(c, s, n, left, rl, right, rr, dt);
}

static bagua_status_t order(bagua_ddp_t *d, bagua__lane_t from, bagua__lane_t to) {
  (void)d;
  (void)from;
  (void)to;
  return BAGUA_OK;
}

static bagua_status_t sync_(bagua_ddp_t *d, bagua__lane_t l) {
  (void)d;
  (void)l;
  return BAGUA_OK;
}

static bagua_status_t job(bagua_ddp_t *d, size_t slot) {
  (void)d;
  (void)slot;
  return BAGUA_OK;
}

const bagua__ddp_dev_t bagua__ddp_dev_cpu = {
    .name = "cpu",
    .open = open_,
    .abort = nothing,
    .close = nothing,
    .thread_init = nothing,
    .jobs_init = jobs_init,
    .jobs_fini = nothing,
    .alloc = alloc,
    .free = free_,
    .copy = copy,
    .zero = zero,
    .to_host = copy,
    .from_host = copy,
    .owns = owns,
    .div = div_,
    .add = add,
    .axpy = axpy,
    .scale = scale,
    .compress = compress,
    .decompress = decompress,
    .decompress_add = decompress_add,
    .sgd = sgd,
    .adam = adam,
    .qadam_frozen = qadam_frozen,
    .qadam_momentum = qadam_momentum,
    .lpdec_diff = lpdec_diff,
    .lowrank_mq = lowrank_mq,
    .lowrank_mtp = lowrank_mtp,
    .lowrank_pqt = lowrank_pqt,
    .lowrank_orthonormalise = lowrank_orthonormalise,
    .allreduce = allreduce,
    .reduce = reduce,
    .broadcast = broadcast,
    .alltoall = alltoall,
    .allgather = allgather,
    .sendrecv = sendrecv,
    .neighbors = neighbors,
    .order = order,
    .sync = sync_,
    .job_mark = job,
    .job_wait = job,
};
