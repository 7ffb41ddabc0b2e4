/*
 * Gradient synchronisation through the library's data-parallel layer (see grad_sync.h).
 */
#include "grad_sync.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bagua/params.h"

struct fm_grad_sync {
  bagua_comm_t *comm;
  fm_mlp_t *model;
  fm_sgd_t *opt;
  bagua_ddp_t *ddp;   /* NULL with one rank */
  int expected_layer; /* the layer the next callback must name: backward order is checked */
};

int fm_grad_sync_supported(const fm_options_t *o, FILE *err) {
  (void)o;
  (void)err;
  return 1; /* every algorithm and option the command line accepts runs */
}

static const char *optimizer_for(const fm_options_t *o) {
  return o->algorithm == FM_ALG_QADAM ? "qadam" : "sgd";
}

static bagua_status_t create(bagua_comm_t *comm, bagua_elastic_t *e, fm_mlp_t *model, fm_sgd_t *opt,
                             const fm_options_t *o, long total_steps, fm_grad_sync_t **out);

void fm_grad_sync_ddp_config(const fm_options_t *o, long total_steps, bagua_ddp_config_t *cfg) {
  bagua_ddp_config_t init = BAGUA_DDP_CONFIG_INIT;
  *cfg = init;
  /* Only what the command line gave: the fields left unset take bagua-launch's [algorithm]
   * settings (BAGUA_ALGORITHM, BAGUA_COMMUNICATION_INTERVAL, ...) inside libbagua, else
   * Bagua's defaults, which are the ones fm_options_t holds for the report. */
  cfg->algorithm = o->algorithm_given ? fm_algorithm_name(o->algorithm) : NULL;
  cfg->bucket_bytes = (int64_t)(o->bucket_mb * 1024 * 1024);
  cfg->hierarchical = (o->given & FM_OPT_HIERARCHICAL) ? o->hierarchical : -1;
  if (o->given & FM_OPT_PEER_MODE) cfg->peer_mode = fm_peer_mode_name(o->peer_mode);
  if (o->given & FM_OPT_COMM_INTERVAL) cfg->comm_interval = o->comm_interval;
  if (o->given & FM_OPT_ERROR_FEEDBACK) cfg->error_feedback = o->error_feedback;
  if (o->given & FM_OPT_WARMUP_STEPS) {
    cfg->warmup_steps = (int)o->warmup_steps;
  } else if (o->algorithm == FM_ALG_QADAM && !bagua_param_get("BAGUA_WARMUP_STEPS")) {
    /* Bagua's tutorial: warm up for about 20% of training. With its fixed 100 steps the
     * variance frozen at the switch is still tiny for weights of rarely active units, and the
     * compressed momentum's quantization noise divided by it blew this MLP up (loss NaN in the
     * first epoch at 4 ranks); 20% trains normally. */
    long w = total_steps / 5;
    cfg->warmup_steps = (int)(w < 100 ? 100 : w);
  }
  if (o->given & FM_OPT_SYNC_INTERVAL_MS) cfg->sync_interval_ms = o->sync_interval_ms;
  cfg->optimizer = optimizer_for(o);
  if (o->algorithm == FM_ALG_QADAM) {
    /* QAdam is Adam: the SGD default rate is far too large for it. Bagua's 1e-3 also
     * diverged here once the variance froze (loss NaN in epoch 2-3 at 4 ranks, with or
     * without compression); 3e-4 reached 88% in 5 epochs (docs/benchmarks.md). */
    cfg->lr = o->lr_given ? o->lr : 0.0003;
    cfg->weight_decay = o->weight_decay;
  } else {
    cfg->lr = o->lr;
    cfg->momentum = o->momentum;
    cfg->weight_decay = o->weight_decay;
  }
}

bagua_status_t fm_grad_sync_create(bagua_comm_t *comm, fm_mlp_t *model, fm_sgd_t *opt,
                                   const fm_options_t *o, long total_steps, fm_grad_sync_t **out) {
  return create(comm, NULL, model, opt, o, total_steps, out);
}

bagua_status_t fm_grad_sync_create_elastic(bagua_elastic_t *e, fm_mlp_t *model, fm_sgd_t *opt,
                                           const fm_options_t *o, long total_steps,
                                           fm_grad_sync_t **out) {
  return create(bagua_elastic_comm(e), e, model, opt, o, total_steps, out);
}

static bagua_status_t create(bagua_comm_t *comm, bagua_elastic_t *e, fm_mlp_t *model, fm_sgd_t *opt,
                             const fm_options_t *o, long total_steps, fm_grad_sync_t **out) {
  bagua_status_t st = BAGUA_OK;
  *out = NULL;
  fm_grad_sync_t *s = calloc(1, sizeof(*s));
  if (!s) return BAGUA_ERR_NO_MEMORY;
  s->comm = comm;
  s->model = model;
  s->opt = opt;
  s->expected_layer = model->nlayers - 1;
  if (e || bagua_comm_size(comm) > 1) {
    bagua_ddp_config_t cfg;
    fm_grad_sync_ddp_config(o, total_steps, &cfg);
    st = bagua_ddp_create(comm, &cfg, &s->ddp);
    if (st != BAGUA_OK) goto fail;
    /* The optimizer and learning rate above were chosen for o->algorithm: libbagua must run
     * that one (both read BAGUA_ALGORITHM when --algorithm is absent). */
    if (strcmp(bagua_ddp_algorithm(s->ddp), fm_algorithm_name(o->algorithm)) != 0) {
      fprintf(stderr, "fashion_mnist: libbagua runs %s, the example prepared for %s\n",
              bagua_ddp_algorithm(s->ddp), fm_algorithm_name(o->algorithm));
      st = BAGUA_ERR_INTERNAL;
      goto fail;
    }
    /* Backward order: the last layer's gradient is ready first. Copy mode keeps the model's
     * own arrays: the library copies gradients in and writes weights back after each step. */
    for (int l = model->nlayers - 1; l >= 0; l--) {
      const fm_layer_t *ly = &model->layer[l];
      char name[32];
      snprintf(name, sizeof(name), "layer%d", l);
      st = bagua_ddp_register(s->ddp, name, model->params + ly->offset, model->grads + ly->offset,
                              ly->count);
      if (st != BAGUA_OK) goto fail;
    }
    st = bagua_ddp_ready(s->ddp);
    if (st != BAGUA_OK) goto fail;
    if (e && (st = bagua_ddp_elastic_attach(s->ddp, e)) != BAGUA_OK) goto fail;
  }
  *out = s;
  return BAGUA_OK;
fail:
  fprintf(stderr, "fashion_mnist: setting up %s failed: %s (%s)\n", fm_algorithm_name(o->algorithm),
          bagua_strerror(st), bagua_last_error());
  fm_grad_sync_destroy(s);
  return st;
}

void fm_grad_sync_destroy(fm_grad_sync_t *s) {
  if (!s) return;
  bagua_ddp_destroy(s->ddp);
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
  if (!s->ddp) return BAGUA_OK;
  bagua_status_t st = bagua_ddp_grad_ready(s->ddp, s->model->nlayers - 1 - layer);
  /* Backward stops at the error; an elastic run retries the step after a rebuild, whose
   * backward starts again from the last layer. */
  if (st != BAGUA_OK) s->expected_layer = s->model->nlayers - 1;
  return st;
}

bagua_status_t fm_grad_sync_step(fm_grad_sync_t *s) {
  if (s->expected_layer != -1) {
    fprintf(stderr, "fashion_mnist: step with %d layer gradients not yet ready\n",
            s->expected_layer + 1);
    return BAGUA_ERR_INTERNAL;
  }
  s->expected_layer = s->model->nlayers - 1;
  if (!s->ddp) {
    fm_sgd_step(s->opt, s->model);
    return BAGUA_OK;
  }
  return bagua_ddp_step(s->ddp); /* also writes the new weights into the model's arrays */
}

static bagua_ddp_stats_t stats(const fm_grad_sync_t *s) {
  bagua_ddp_stats_t st = {0};
  st.struct_size = sizeof(st);
  if (s->ddp) bagua_ddp_stats(s->ddp, &st);
  return st;
}

double fm_grad_sync_overlap(const fm_grad_sync_t *s) {
  return stats(s).overlap_total;
}
double fm_grad_sync_comm_seconds(const fm_grad_sync_t *s) {
  return stats(s).comm_s_total;
}
uint64_t fm_grad_sync_bytes_sent(const fm_grad_sync_t *s) {
  return stats(s).bytes_total;
}
