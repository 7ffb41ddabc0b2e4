/*
 * Load-balanced sampler: Bagua's chunking property, determinism, exactly-once across
 * mid-epoch world changes (grow, shrink, several changes, an uncommitted in-flight step),
 * state save/restore, and the per-step balance against a plain strided sampler.
 */
#include <math.h>

#include "bagua/loader.h"
#include "tests/test.h"

#define MAXW 16
#define MAXB 64

static double *make_complexities(int64_t n, uint64_t seed, int lognormal) {
  double *c = malloc((size_t)n * sizeof(double));
  ASSERT_TRUE(c != NULL);
  /* A private LCG keeps the data identical on every libc. */
  uint64_t x = seed * 2862933555777941757ull + 3037000493ull;
  for (int64_t i = 0; i < n; i++) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    double u1 = ((double)(x >> 11) + 0.5) / 9007199254740992.0;
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    double u2 = ((double)(x >> 11) + 0.5) / 9007199254740992.0;
    if (lognormal) {
      /* Sequence-length-like: log-normal with sigma 1, rounded to whole tokens. */
      double z = sqrt(-2 * log(u1)) * cos(2 * M_PI * u2);
      c[i] = floor(64 * exp(z)) + 1;
    } else {
      c[i] = (double)i * 1.5 + u1; /* distinct, so the sorted order is known */
    }
  }
  return c;
}

static bagua_sampler_t *make(const double *cx, int64_t n, int rank, int world, int64_t batch,
                             int drop_last, double noise, uint64_t seed) {
  bagua_sampler_config_t cfg = BAGUA_SAMPLER_CONFIG_INIT;
  cfg.num_samples = n;
  cfg.complexities = cx;
  cfg.seed = seed;
  cfg.noise_level = noise;
  cfg.batch_size = batch;
  cfg.drop_last = drop_last;
  cfg.rank = rank;
  cfg.world = world;
  bagua_sampler_t *s;
  ASSERT_OK(bagua_sampler_create(&cfg, &s));
  return s;
}

/* Runs one lockstep step on all ranks; adds the samples to counts (if not NULL) and checks
 * that every rank got a batch of the same size. Returns that size (0: epoch exhausted). */
static size_t step_all(bagua_sampler_t **s, int world, int *counts) {
  int64_t buf[MAXB];
  size_t n0 = 0;
  for (int r = 0; r < world; r++) {
    size_t n;
    ASSERT_OK(bagua_sampler_next_batch(s[r], buf, MAXB, &n));
    if (r == 0) n0 = n;
    ASSERT_EQ(n, n0);
    if (counts)
      for (size_t i = 0; i < n; i++) counts[buf[i]]++;
  }
  return n0;
}

static void test_bad_args(void) {
  double cx[4] = {1, 2, 3, 4};
  bagua_sampler_config_t cfg = BAGUA_SAMPLER_CONFIG_INIT;
  bagua_sampler_t *s = NULL;
  cfg.num_samples = 4;
  ASSERT_STATUS(bagua_sampler_create(&cfg, &s), BAGUA_ERR_INVALID_ARG); /* no complexities */
  cfg.complexities = cx;
  cfg.rank = 1;
  ASSERT_STATUS(bagua_sampler_create(&cfg, &s), BAGUA_ERR_INVALID_ARG); /* rank >= world */
  cfg.rank = 0;
  cx[2] = NAN;
  ASSERT_STATUS(bagua_sampler_create(&cfg, &s), BAGUA_ERR_INVALID_ARG);
  cx[2] = 3;
  cfg.struct_size = 8;
  ASSERT_STATUS(bagua_sampler_create(&cfg, &s), BAGUA_ERR_INVALID_ARG);
  ASSERT_TRUE(s == NULL);
  cfg.struct_size = sizeof(cfg);
  cfg.batch_size = 3;
  ASSERT_OK(bagua_sampler_create(&cfg, &s));
  int64_t out[2];
  size_t n;
  ASSERT_STATUS(bagua_sampler_next_batch(s, out, 2, &n), BAGUA_ERR_INVALID_ARG);
  ASSERT_STATUS(bagua_sampler_set_world(s, 2, 2, 0), BAGUA_ERR_INVALID_ARG);
  ASSERT_STATUS(bagua_sampler_set_world(s, 0, 2, 99), BAGUA_ERR_INVALID_ARG);
  /* The world history of one epoch is bounded; set_epoch() starts a new one. */
  for (int i = 1; i < BAGUA_SAMPLER_MAX_LAYOUTS; i++)
    ASSERT_OK(bagua_sampler_set_world(s, 0, 1 + i % 2, 0));
  ASSERT_STATUS(bagua_sampler_set_world(s, 0, 3, 0), BAGUA_ERR_NOT_SUPPORTED);
  ASSERT_OK(bagua_sampler_set_epoch(s, 1));
  ASSERT_OK(bagua_sampler_set_world(s, 0, 3, 0));
  bagua_sampler_destroy(s);
  bagua_sampler_destroy(NULL);
}

/*
 * Bagua's property with noise 0: the j-th sample of a step on every rank comes from one
 * chunk of `world` consecutive samples in sorted order, and each epoch covers every sample.
 */
static void test_chunks(void) {
  const int64_t n = 96;
  const int w = 4, b = 3;
  double *cx = make_complexities(n, 1, 0); /* increasing: sorted position == index */
  bagua_sampler_t *s[MAXW];
  for (int r = 0; r < w; r++) s[r] = make(cx, n, r, w, b, 0, 0.0, 7);
  int64_t first_epoch[96];
  int changed = 0;
  for (uint64_t epoch = 0; epoch < 3; epoch++) {
    int counts[96] = {0};
    int64_t pos = 0;
    for (int r = 0; r < w; r++) ASSERT_OK(bagua_sampler_set_epoch(s[r], epoch));
    ASSERT_EQ(bagua_sampler_num_steps(s[0]), 8);
    for (;;) {
      int64_t bat[MAXW][MAXB];
      size_t nb = 0;
      for (int r = 0; r < w; r++) ASSERT_OK(bagua_sampler_next_batch(s[r], bat[r], MAXB, &nb));
      if (nb == 0) break;
      for (size_t j = 0; j < nb; j++) {
        int64_t base = bat[0][j] / w * w;
        for (int r = 0; r < w; r++) {
          ASSERT_EQ(bat[r][j], base + r); /* rank r takes element r of the chunk */
          counts[bat[r][j]]++;
        }
        if (epoch == 0) first_epoch[pos] = bat[0][j];
        if (epoch == 1 && bat[0][j] != first_epoch[pos]) changed = 1;
        pos++;
      }
    }
    for (int64_t i = 0; i < n; i++) ASSERT_EQ(counts[i], 1);
    if (epoch == 1) ASSERT_TRUE(changed); /* each epoch permutes the chunks differently */
  }
  for (int r = 0; r < w; r++) bagua_sampler_destroy(s[r]);
  free(cx);
}

/* Same settings give the same batches (on "another rank"); noise changes the order. */
static void test_determinism(void) {
  const int64_t n = 500;
  double *cx = make_complexities(n, 2, 1);
  bagua_sampler_t *a = make(cx, n, 1, 3, 5, 0, 0.2, 11);
  bagua_sampler_t *b = make(cx, n, 1, 3, 5, 0, 0.2, 11);
  bagua_sampler_t *c = make(cx, n, 1, 3, 5, 0, 0.0, 11);
  ASSERT_OK(bagua_sampler_set_epoch(a, 4));
  ASSERT_OK(bagua_sampler_set_epoch(b, 4));
  ASSERT_OK(bagua_sampler_set_epoch(c, 4));
  int differ = 0;
  for (;;) {
    int64_t x[MAXB], y[MAXB], z[MAXB];
    size_t nx, ny, nz;
    ASSERT_OK(bagua_sampler_next_batch(a, x, MAXB, &nx));
    ASSERT_OK(bagua_sampler_next_batch(b, y, MAXB, &ny));
    ASSERT_OK(bagua_sampler_next_batch(c, z, MAXB, &nz));
    ASSERT_EQ(nx, ny);
    ASSERT_EQ(nx, nz);
    if (!nx) break;
    for (size_t i = 0; i < nx; i++) {
      ASSERT_EQ(x[i], y[i]);
      differ += x[i] != z[i];
    }
  }
  ASSERT_GT(differ, 0);
  bagua_sampler_destroy(a);
  bagua_sampler_destroy(b);
  bagua_sampler_destroy(c);
  free(cx);
}

/*
 * Elastic scenario: `w1` ranks run `k` committed steps plus one step that is handed out but
 * never committed (a node dies during it); then the world becomes `w2`: ranks that stay call
 * set_world(committed = k), new ranks restore rank 0's state. Everyone runs to the end of
 * the epoch. Checks: with drop_last = 0 every index is served at least once and the only
 * repeats are the final layout's padding; with drop_last = 1 nothing repeats and exactly
 * (N - consumed) % w2 samples are left out. A third world `w3` (if > 0) is switched to
 * after `k2` further steps.
 */
static void elastic_case(int64_t n, int w1, int w2, int w3, int64_t b, uint64_t k, uint64_t k2,
                         int drop_last, double noise) {
  double *cx = make_complexities(n, 3, 1);
  int *counts = calloc((size_t)n, sizeof(int));
  bagua_sampler_t *s[MAXW] = {0};
  for (int r = 0; r < w1; r++) s[r] = make(cx, n, r, w1, b, drop_last, noise, 5);
  for (int r = 0; r < w1; r++) ASSERT_OK(bagua_sampler_set_epoch(s[r], 2));
  int64_t consumed = 0;
  for (uint64_t i = 0; i < k; i++) consumed += (int64_t)step_all(s, w1, counts) * w1;
  for (int r = 0; r < w1; r++) bagua_sampler_commit(s[r]);
  step_all(s, w1, NULL); /* in flight, never committed: must be served again */

  int ws[2] = {w2, w3};
  uint64_t at = k;
  for (int phase = 0; phase < 2 && ws[phase] > 0; phase++) {
    int wo = phase ? ws[0] : w1, wn = ws[phase];
    bagua_sampler_state_t st;
    bagua_sampler_get_state(s[0], &st);
    ASSERT_EQ(st.committed_steps, at);
    for (int r = 0; r < wn; r++) {
      if (r >= wo) {
        /* A joining rank replays the old world's history, then changes world like the
         * others. */
        s[r] = make(cx, n, 0, 1, b, drop_last, noise, 5);
        ASSERT_OK(bagua_sampler_set_state(s[r], 0, &st));
      }
      ASSERT_OK(bagua_sampler_set_world(s[r], r, wn, at));
    }
    for (int r = wn; r < wo; r++) {
      bagua_sampler_destroy(s[r]);
      s[r] = NULL;
    }
    if (phase == 0 && w3 > 0) {
      for (uint64_t i = 0; i < k2; i++) consumed += (int64_t)step_all(s, wn, counts) * wn;
      at += k2;
      for (int r = 0; r < wn; r++) bagua_sampler_commit(s[r]);
    }
  }
  int wl = w3 > 0 ? w3 : w2;
  int64_t left = n - consumed; /* the pool of the last layout */
  while (step_all(s, wl, counts)) {
  }
  int64_t total = 0, missing = 0;
  for (int64_t i = 0; i < n; i++) {
    total += counts[i];
    missing += counts[i] == 0;
    if (drop_last)
      ASSERT_LE(counts[i], 1);
    else
      ASSERT_GE(counts[i], 1);
  }
  if (drop_last) {
    ASSERT_EQ(missing, left % wl);
  } else {
    ASSERT_EQ(total, n + (wl - left % wl) % wl);
  }
  printf("ok elastic n=%lld %d->%d", (long long)n, w1, w2);
  if (w3 > 0) printf("->%d", w3);
  printf(" b=%lld k=%llu drop_last=%d: %lld served, %lld missing\n", (long long)b,
         (unsigned long long)k, drop_last, (long long)total, (long long)missing);
  for (int r = 0; r < wl; r++) bagua_sampler_destroy(s[r]);
  free(counts);
  free(cx);
}

static void test_elastic(void) {
  for (int dl = 0; dl < 2; dl++) {
    elastic_case(60, 3, 2, 0, 4, 2, 0, dl, 0.0);    /* shrink, everything divisible */
    elastic_case(61, 3, 2, 0, 4, 2, 0, dl, 0.1);    /* shrink with a remainder */
    elastic_case(60, 2, 5, 0, 3, 4, 0, dl, 0.0);    /* grow */
    elastic_case(53, 2, 5, 0, 3, 3, 0, dl, 0.3);    /* grow with a remainder */
    elastic_case(1000, 4, 3, 7, 8, 5, 4, dl, 0.05); /* two changes */
    elastic_case(97, 3, 1, 0, 2, 0, 0, dl, 0.0);    /* change before any commit */
    elastic_case(40, 1, 8, 0, 1, 39, 0, dl, 0.0);   /* one sample left for eight ranks */
    elastic_case(40, 4, 4, 0, 2, 3, 0, dl, 0.0);    /* same world: the in-flight step repeats */
  }
}

/* A restored sampler continues exactly where the saved one stood. */
static void test_state(void) {
  const int64_t n = 300;
  double *cx = make_complexities(n, 4, 1);
  bagua_sampler_t *a = make(cx, n, 2, 4, 6, 0, 0.1, 9);
  ASSERT_OK(bagua_sampler_set_epoch(a, 3));
  int64_t x[MAXB], y[MAXB];
  size_t nx, ny;
  for (int i = 0; i < 3; i++) ASSERT_OK(bagua_sampler_next_batch(a, x, MAXB, &nx));
  bagua_sampler_commit(a);
  ASSERT_OK(bagua_sampler_set_world(a, 1, 3, 3));
  ASSERT_OK(bagua_sampler_next_batch(a, x, MAXB, &nx));
  bagua_sampler_commit(a);
  bagua_sampler_state_t st;
  bagua_sampler_get_state(a, &st);
  ASSERT_EQ(st.epoch, 3);
  ASSERT_EQ(st.nlayouts, 2);
  ASSERT_EQ(st.committed_steps, 4);
  bagua_sampler_t *b = make(cx, n, 0, 1, 6, 0, 0.1, 9);
  ASSERT_OK(bagua_sampler_set_state(b, 1, &st));
  ASSERT_EQ(bagua_sampler_num_steps(a), bagua_sampler_num_steps(b));
  do {
    ASSERT_OK(bagua_sampler_next_batch(a, x, MAXB, &nx));
    ASSERT_OK(bagua_sampler_next_batch(b, y, MAXB, &ny));
    ASSERT_EQ(nx, ny);
    for (size_t i = 0; i < nx; i++) ASSERT_EQ(x[i], y[i]);
  } while (nx);
  st.layouts[0].start_step = 1;
  ASSERT_STATUS(bagua_sampler_set_state(b, 0, &st), BAGUA_ERR_INVALID_ARG);
  bagua_sampler_destroy(a);
  bagua_sampler_destroy(b);
  free(cx);
}

/*
 * Sum over steps of the slowest rank's work divided by the sum over steps of the mean
 * rank's work: the epoch time relative to perfect balance when step time is proportional to
 * the work of a batch. `strided` replaces the sampler by rank r taking r, r + W, ...
 */
static double imbalance(const double *cx, int64_t n, int w, int64_t b, double noise, int strided) {
  bagua_sampler_t *s[MAXW];
  for (int r = 0; r < w; r++) s[r] = make(cx, n, r, w, b, 1, noise, 1);
  double sum_max = 0, sum_mean = 0;
  for (int64_t step = 0;; step++) {
    double mx = 0, tot = 0;
    size_t nb = 0;
    for (int r = 0; r < w; r++) {
      int64_t buf[MAXB];
      double work = 0;
      if (strided) {
        int64_t per_rank = n / w;
        for (int64_t j = step * b; j < (step + 1) * b && j < per_rank; j++)
          work += cx[j * w + r], nb = (size_t)(j - step * b + 1);
      } else {
        ASSERT_OK(bagua_sampler_next_batch(s[r], buf, MAXB, &nb));
        for (size_t j = 0; j < nb; j++) work += cx[buf[j]];
      }
      mx = work > mx ? work : mx;
      tot += work;
    }
    if (!nb) break;
    sum_max += mx;
    sum_mean += tot / w;
  }
  for (int r = 0; r < w; r++) bagua_sampler_destroy(s[r]);
  return sum_max / sum_mean;
}

static void test_balance(void) {
  const int64_t n = 20000;
  double *cx = make_complexities(n, 6, 1); /* log-normal lengths in random index order */
  for (int w = 2; w <= 8; w *= 2) {
    double ours = imbalance(cx, n, w, 16, 0.0, 0);
    double noisy = imbalance(cx, n, w, 16, 0.01, 0);
    double strided = imbalance(cx, n, w, 16, 0.0, 1);
    printf(
        "balance W=%d batch=16: max/mean per-step work: load-balanced %.4f, with noise 0.01 "
        "%.4f, strided %.4f\n",
        w, ours, noisy, strided);
    /* Sorted chunks leave only the spread between neighbours in sorted order; strided
     * batches of 16 log-normal lengths differ by tens of percent. */
    ASSERT_TRUE(ours < 1.02);
    ASSERT_TRUE(noisy < 1.05);
    ASSERT_TRUE(strided > ours + 0.1);
  }
  free(cx);
}

int main(void) {
  test_bad_args();
  test_chunks();
  test_determinism();
  test_elastic();
  test_state();
  test_balance();
  printf("PASS\n");
  return 0;
}
