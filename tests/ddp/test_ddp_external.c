/*
 * An optimizer outside the library (config.optimizer = "none"): bagua_ddp_wait(), the
 * caller's own update, then bagua_ddp_step(). This is how the PyTorch front end runs torch's
 * optimizers. Three runs of 25 SGD steps on 3 ranks of gradient_allreduce must end with the
 * same weights:
 *   A  the library's own SGD (the reference);
 *   B  optimizer "none", the caller updates its registered arrays after bagua_ddp_wait()
 *      wrote the averaged gradients into them;
 *   C  optimizer "none" after bagua_ddp_release_params(): the caller reads and updates the
 *      weights in the flat storage only (bagua_ddp_param/grad), its arrays are never touched.
 * Also: "none" is refused for qadam, release before ready is refused, a second wait in a step
 * does nothing, and decentralized's averaged weights reach the caller through wait.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../comm/mp.h"
#include "../test.h"
#include "problem.h"

static problem_t prob = {.d_in = 16, .d_out = 4, .n = 32, .nsplit = 1, .noise = 0.1f};
enum { STEPS = 25 };
static const double LR = 0.2;

static bagua_ddp_t *make(bagua_comm_t *c, model_t *m, const char *algo, const char *opt) {
  bagua_ddp_config_t cfg = BAGUA_DDP_CONFIG_INIT;
  cfg.algorithm = algo;
  cfg.optimizer = opt;
  cfg.lr = LR;
  cfg.bucket_bytes = 64; /* several buckets */
  bagua_ddp_t *ddp;
  ASSERT_OK(bagua_ddp_create(c, &cfg, &ddp));
  ASSERT_OK(bagua_ddp_register(ddp, "b", m->b, m->gb, (size_t)prob.d_out));
  ASSERT_OK(bagua_ddp_register(ddp, "w", m->w, m->gw, (size_t)prob.d_in * prob.d_out));
  ASSERT_OK(bagua_ddp_ready(ddp));
  return ddp;
}

static void sgd(float *p, const float *g, size_t n) {
  for (size_t i = 0; i < n; i++) p[i] -= (float)LR * g[i];
}

static double max_diff(const float *a, const float *b, size_t n) {
  double d = 0;
  for (size_t i = 0; i < n; i++) d = fmax(d, fabs((double)a[i] - b[i]));
  return d;
}

static int body(bagua_comm_t *c, void *arg) {
  int me = bagua_comm_rank(c);
  size_t nw = (size_t)prob.d_in * prob.d_out, nb = (size_t)prob.d_out;
  shard_t s;
  shard_make(&prob, me, &s);

  /* A: the library's SGD. */
  model_t a;
  model_init(&prob, me, &a);
  bagua_ddp_t *da = make(c, &a, "gradient_allreduce", "sgd");
  for (int t = 0; t < STEPS; t++) {
    model_loss(&a, &s, 1);
    ASSERT_OK(bagua_ddp_step(da));
  }

  /* B: the caller's SGD on its own arrays. */
  model_t b;
  model_init(&prob, me, &b);
  bagua_ddp_t *db = make(c, &b, "gradient_allreduce", "none");
  for (int t = 0; t < STEPS; t++) {
    model_loss(&b, &s, 1);
    ASSERT_OK(bagua_ddp_wait(db));
    ASSERT_OK(bagua_ddp_wait(db)); /* a second wait in the same step does nothing */
    sgd(b.w, b.gw, nw);
    sgd(b.b, b.gb, nb);
    ASSERT_OK(bagua_ddp_step(db));
  }
  double d_b = fmax(max_diff(a.w, b.w, nw), max_diff(a.b, b.b, nb));

  /* C: the weights live in the flat storage only. */
  model_t cm;
  model_init(&prob, me, &cm);
  bagua_ddp_t *dc = make(c, &cm, "gradient_allreduce", "none");
  ASSERT_OK(bagua_ddp_release_params(dc));
  float *fb = bagua_ddp_param(dc, 0), *fw = bagua_ddp_param(dc, 1);
  float *gb = bagua_ddp_grad(dc, 0), *gw = bagua_ddp_grad(dc, 1);
  ASSERT_TRUE(fb && fw && gb && gw);
  for (int t = 0; t < STEPS; t++) {
    memcpy(cm.w, fw, nw * sizeof(float)); /* the model reads the flat weights */
    memcpy(cm.b, fb, nb * sizeof(float));
    model_loss(&cm, &s, 1);
    ASSERT_OK(bagua_ddp_wait(dc));
    sgd(fw, gw, nw); /* the averaged gradients are in the flat storage too */
    sgd(fb, gb, nb);
    memset(cm.w, 0, nw * sizeof(float)); /* released: the library must not restore these */
    ASSERT_OK(bagua_ddp_step(dc));
    for (size_t i = 0; i < nw; i++) ASSERT_TRUE(cm.w[i] == 0.0f);
  }
  double d_c = fmax(max_diff(a.w, fw, nw), max_diff(a.b, fb, nb));
  if (me == 0)
    printf("largest difference from the library's SGD: %.3g (caller's arrays), %.3g (flat)\n", d_b,
           d_c);
  ASSERT_TRUE(d_b < 1e-6);
  ASSERT_TRUE(d_c < 1e-6);
  assert_same_on_all_ranks(c, fw, nw, "flat W");
  bagua_ddp_destroy(da);
  bagua_ddp_destroy(db);
  bagua_ddp_destroy(dc);

  /* Decentralized: wait hands the averaged weights to the caller before its update. */
  model_t dm;
  model_init(&prob, me, &dm);
  bagua_ddp_t *dd = make(c, &dm, "decentralized", "none");
  for (int t = 0; t < 3; t++) {
    model_loss(&dm, &s, 1);
    ASSERT_OK(bagua_ddp_wait(dd));
    ASSERT_OK(bagua_ddp_step(dd)); /* no update: the weights stay the peers' average */
  }
  assert_same_on_all_ranks(c, dm.w, nw, "decentralized W (peer mode all, no update)");
  bagua_ddp_destroy(dd);

  /* Refusals. */
  bagua_ddp_config_t cfg = BAGUA_DDP_CONFIG_INIT;
  cfg.algorithm = "qadam";
  cfg.optimizer = "none";
  bagua_ddp_t *bad = NULL;
  ASSERT_STATUS(bagua_ddp_create(c, &cfg, &bad), BAGUA_ERR_INVALID_ARG);
  ASSERT_TRUE(strstr(bagua_last_error(), "optimizer") != NULL);
  cfg = (bagua_ddp_config_t)BAGUA_DDP_CONFIG_INIT;
  cfg.optimizer = "none";
  ASSERT_OK(bagua_ddp_create(c, &cfg, &bad));
  ASSERT_STATUS(bagua_ddp_release_params(bad), BAGUA_ERR_INVALID_USAGE);
  ASSERT_STATUS(bagua_ddp_wait(bad), BAGUA_ERR_INVALID_USAGE);
  bagua_ddp_destroy(bad);
  bagua_ddp_config_t init;
  bagua_ddp_config_init(&init);
  ASSERT_TRUE(init.struct_size == sizeof(init) && init.hierarchical == -1 && init.beta2 == 0.999);

  model_free(&a);
  model_free(&b);
  model_free(&cm);
  model_free(&dm);
  shard_free(&s);
  assert_no_leaks();
  return 0;
}

int main(void) {
  mp_opts_t o = {
      .nranks = 3, .transport = BAGUA_TRANSPORT_TCP, .ranks_per_node = 1, .deadline_s = 60};
  double t0 = mp_now();
  int rc = mp_run(&o, body, NULL);
  printf("%s external optimizer in %.1f s\n", rc ? "FAILED" : "passed", mp_now() - t0);
  return rc;
}
