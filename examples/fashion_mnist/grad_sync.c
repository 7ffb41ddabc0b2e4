/*
 * gradient_allreduce baseline: per-layer blocking allreduce of gradients (see grad_sync.h).
 */
#include "grad_sync.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

struct fm_grad_sync {
  bagua_comm_t *comm;
  fm_mlp_t *model;
  fm_sgd_t *opt;
  int world;
  int expected_layer; /* the layer the next callback must name: backward order is checked */
  double comm_seconds;
};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int fm_grad_sync_supported(const fm_options_t *o, FILE *err) {
  /* The baseline is exactly Bagua's gradient_allreduce with hierarchical=False and one bucket
   * per layer; everything else needs the library's bucketed data-parallel engine. */
  if (o->algorithm == FM_ALG_GRADIENT_ALLREDUCE && !o->hierarchical &&
      !(o->given & FM_OPT_BUCKET_MB))
    return 1;
  if (o->algorithm != FM_ALG_GRADIENT_ALLREDUCE)
    fprintf(err, "fashion_mnist: --algorithm %s", fm_algorithm_name(o->algorithm));
  else
    fprintf(err, "fashion_mnist: %s", o->hierarchical ? "--hierarchical" : "--bucket-mb");
  fprintf(err,
          " needs the library's data-parallel API (bagua/ddp.h), which this build does not use "
          "yet; for now only --algorithm gradient_allreduce without --hierarchical or "
          "--bucket-mb runs\n");
  return 0;
}

bagua_status_t fm_grad_sync_create(bagua_comm_t *comm, fm_mlp_t *model, fm_sgd_t *opt,
                                   const fm_options_t *o, fm_grad_sync_t **out) {
  *out = NULL;
  if (!fm_grad_sync_supported(o, stderr)) return BAGUA_ERR_NOT_SUPPORTED;
  fm_grad_sync_t *s = calloc(1, sizeof(*s));
  if (!s) return BAGUA_ERR_NO_MEMORY;
  s->comm = comm;
  s->model = model;
  s->opt = opt;
  s->world = bagua_comm_size(comm);
  s->expected_layer = model->nlayers - 1;
  *out = s;
  return BAGUA_OK;
}

void fm_grad_sync_destroy(fm_grad_sync_t *s) {
  free(s);
}

int fm_grad_sync_on_grad_ready(void *ctx, int layer) {
  fm_grad_sync_t *s = ctx;
  if (layer != s->expected_layer) {
    fprintf(stderr, "fashion_mnist: gradient of layer %d ready, expected layer %d\n", layer,
            s->expected_layer);
    return BAGUA_ERR_INTERNAL;
  }
  s->expected_layer--;
  if (s->world == 1) return BAGUA_OK;
  const fm_layer_t *ly = &s->model->layer[layer];
  float *g = s->model->grads + ly->offset;
  double t0 = now_s();
  /* In place: every rank receives the same bytes, so the identical optimizer step that
   * follows keeps the replicas bit-identical. */
  bagua_status_t st = bagua_allreduce(s->comm, g, g, ly->count, BAGUA_F32, BAGUA_AVG);
  s->comm_seconds += now_s() - t0;
  return st;
}

bagua_status_t fm_grad_sync_step(fm_grad_sync_t *s) {
  if (s->expected_layer != -1) {
    fprintf(stderr, "fashion_mnist: step with %d layer gradients not yet ready\n",
            s->expected_layer + 1);
    return BAGUA_ERR_INTERNAL;
  }
  s->expected_layer = s->model->nlayers - 1;
  /* Every allreduce above was blocking, so nothing is in flight: update right away. */
  fm_sgd_step(s->opt, s->model);
  return BAGUA_OK;
}

double fm_grad_sync_comm_seconds(const fm_grad_sync_t *s) {
  return s->comm_seconds;
}

uint64_t fm_grad_sync_bytes_sent(const fm_grad_sync_t *s) {
  return bagua_comm_bytes_sent(s->comm);
}
