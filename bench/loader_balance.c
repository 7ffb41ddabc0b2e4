/*
 * loader-balance: how evenly the load-balanced sampler spreads work over ranks, compared with
 * a plain strided sampler (rank r takes r, r + W, r + 2W, ... of a shuffled dataset).
 *
 * Work of a batch = sum of its samples' complexities (e.g. tokens). For each step the slowest
 * rank sets the pace, so the table reports sum over steps of max-rank work divided by sum
 * over steps of mean-rank work: 1.00 is perfect balance, 1.30 means 30% of the epoch is spent
 * waiting for stragglers. Everything is computed in one process, no communication.
 *
 * Usage: loader-balance [N [BATCH [SEED]]]   (defaults 100000 16 1)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "bagua/loader.h"

#define MAXB 4096

static uint64_t lcg(uint64_t *x) {
  *x = *x * 6364136223846793005ull + 1442695040888963407ull;
  return *x >> 11;
}

static double unif(uint64_t *x) {
  return ((double)lcg(x) + 0.5) / 9007199254740992.0;
}

/* Sequence lengths in random order: log-normal (sigma 1, median 64 tokens) or Pareto
 * (alpha 1.5, minimum 16 tokens, capped at 8192 as a tokenizer would truncate). */
static void fill(double *cx, int64_t n, int pareto, uint64_t seed) {
  uint64_t x = seed * 2862933555777941757ull + 7;
  for (int64_t i = 0; i < n; i++) {
    double u1 = unif(&x), u2 = unif(&x);
    if (pareto) {
      double v = 16 / pow(u1, 1 / 1.5);
      cx[i] = floor(v < 8192 ? v : 8192);
    } else {
      cx[i] = floor(64 * exp(sqrt(-2 * log(u1)) * cos(2 * M_PI * u2))) + 1;
    }
  }
}

/* Returns max/mean as described above; noise < 0 selects the strided sampler. */
static int imbalance(const double *cx, int64_t n, int w, int64_t b, double noise, uint64_t seed,
                     double *ratio) {
  bagua_sampler_t **s = calloc((size_t)w, sizeof(*s));
  int64_t *buf = malloc(MAXB * sizeof(int64_t));
  int rc = 1;
  if (!s || !buf) goto exit;
  if (noise >= 0)
    for (int r = 0; r < w; r++) {
      bagua_sampler_config_t cfg = BAGUA_SAMPLER_CONFIG_INIT;
      cfg.num_samples = n;
      cfg.complexities = cx;
      cfg.seed = seed;
      cfg.noise_level = noise;
      cfg.batch_size = b;
      cfg.drop_last = 1;
      cfg.rank = r;
      cfg.world = w;
      bagua_status_t st = bagua_sampler_create(&cfg, &s[r]);
      if (st != BAGUA_OK) {
        fprintf(stderr, "bagua_sampler_create: %s\n", bagua_strerror(st));
        goto exit;
      }
    }
  double sum_max = 0, sum_mean = 0;
  int64_t per_rank = n / w;
  for (int64_t step = 0;; step++) {
    double mx = 0, tot = 0;
    size_t nb = 0;
    for (int r = 0; r < w; r++) {
      double work = 0;
      if (noise < 0) {
        int64_t j0 = step * b, j1 = j0 + b < per_rank ? j0 + b : per_rank;
        nb = j1 > j0 ? (size_t)(j1 - j0) : 0;
        for (int64_t j = j0; j < j1; j++) work += cx[j * w + r];
      } else {
        if (bagua_sampler_next_batch(s[r], buf, MAXB, &nb) != BAGUA_OK) goto exit;
        for (size_t j = 0; j < nb; j++) work += cx[buf[j]];
      }
      mx = work > mx ? work : mx;
      tot += work;
    }
    if (!nb) break;
    sum_max += mx;
    sum_mean += tot / w;
  }
  *ratio = sum_max / sum_mean;
  rc = 0;
exit:
  if (s)
    for (int r = 0; r < w; r++) bagua_sampler_destroy(s[r]);
  free(s);
  free(buf);
  return rc;
}

int main(int argc, char **argv) {
  int64_t n = argc > 1 ? atoll(argv[1]) : 100000;
  int64_t b = argc > 2 ? atoll(argv[2]) : 16;
  uint64_t seed = argc > 3 ? strtoull(argv[3], NULL, 10) : 1;
  if (n < 8 || b < 1 || b > MAXB) {
    fprintf(stderr, "usage: loader-balance [N>=8 [BATCH 1..%d [SEED]]]\n", MAXB);
    return 2;
  }
  double *cx = malloc((size_t)n * sizeof(double));
  if (!cx) return 1;
  printf("max/mean per-step work over one epoch (1.000 = perfect), N=%lld, batch %lld per rank\n",
         (long long)n, (long long)b);
  printf("%-10s %3s  %9s  %9s  %11s  %10s\n", "lengths", "W", "strided", "balanced", "noise 0.01",
         "noise 0.1");
  for (int dist = 0; dist < 2; dist++) {
    fill(cx, n, dist, seed);
    for (int w = 2; w <= 8; w *= 2) {
      double r[4];
      const double noise[4] = {-1, 0, 0.01, 0.1};
      for (int i = 0; i < 4; i++)
        if (imbalance(cx, n, w, b, noise[i], seed, &r[i])) return 1;
      printf("%-10s %3d  %9.3f  %9.3f  %11.3f  %10.3f\n", dist ? "pareto1.5" : "lognormal", w, r[0],
             r[1], r[2], r[3]);
    }
  }
  free(cx);
  return 0;
}
