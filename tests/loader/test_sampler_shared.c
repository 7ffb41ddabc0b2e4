/*
 * bagua_sampler_create_shared() on forked ranks: only rank 0 knows the complexities and the
 * settings (the others pass NULL and wrong values); every rank must then serve exactly the
 * batches of a sampler created locally with rank 0's settings. The sampler state is also
 * broadcast as plain bytes, the way an elastic program hands it to a joining rank.
 */
#include <math.h>

#include "bagua/loader.h"
#include "tests/comm/mp.h"
#include "tests/test.h"

#define N 1001

static void fill(double *cx) {
  for (int i = 0; i < N; i++) cx[i] = floor(50 * exp(sin(i * 12.9898) * 2)) + 1;
}

static int body(bagua_comm_t *c, void *arg) {
  (void)arg;
  int rank = bagua_comm_rank(c), world = bagua_comm_size(c);
  static double cx[N];
  fill(cx);
  bagua_sampler_config_t cfg = BAGUA_SAMPLER_CONFIG_INIT;
  cfg.num_samples = N;
  cfg.complexities = cx;
  cfg.seed = 42;
  cfg.noise_level = 0.05;
  cfg.batch_size = 7;
  cfg.rank = rank;
  cfg.world = world;
  bagua_sampler_t *ref, *shared;
  ASSERT_OK(bagua_sampler_create(&cfg, &ref));

  bagua_sampler_config_t mine = BAGUA_SAMPLER_CONFIG_INIT;
  if (rank == 0)
    mine = cfg;
  else
    mine.seed = 999; /* ignored: rank 0's settings win */
  ASSERT_OK(bagua_sampler_create_shared(c, &mine, &shared));

  int64_t a[16], b[16];
  size_t na, nb;
  ASSERT_OK(bagua_sampler_set_epoch(ref, 1));
  ASSERT_OK(bagua_sampler_set_epoch(shared, 1));
  for (int step = 0; step < 3; step++) {
    ASSERT_OK(bagua_sampler_next_batch(ref, a, 16, &na));
    ASSERT_OK(bagua_sampler_next_batch(shared, b, 16, &nb));
    ASSERT_EQ(na, nb);
    for (size_t i = 0; i < na; i++) ASSERT_EQ(a[i], b[i]);
  }
  bagua_sampler_commit(ref);

  /* A "joining" sampler on every rank restores rank 0's state received as bytes. */
  bagua_sampler_state_t st;
  bagua_sampler_get_state(ref, &st);
  if (rank != 0) memset(&st, 0, sizeof(st));
  ASSERT_OK(bagua_broadcast(c, &st, &st, sizeof(st), BAGUA_U8, 0));
  ASSERT_EQ(st.committed_steps, 3);
  ASSERT_OK(bagua_sampler_set_state(shared, rank, &st));
  do {
    ASSERT_OK(bagua_sampler_next_batch(ref, a, 16, &na));
    ASSERT_OK(bagua_sampler_next_batch(shared, b, 16, &nb));
    ASSERT_EQ(na, nb);
    for (size_t i = 0; i < na; i++) ASSERT_EQ(a[i], b[i]);
  } while (na);
  bagua_sampler_destroy(ref);
  bagua_sampler_destroy(shared);
  return 0;
}

int main(void) {
  mp_opts_t o = {.nranks = 3, .transport = BAGUA_TRANSPORT_TCP, .deadline_s = 60};
  int rc = mp_run(&o, body, NULL);
  if (rc == 0) printf("PASS\n");
  return rc;
}
