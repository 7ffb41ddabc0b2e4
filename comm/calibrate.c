/*
 * The allreduce ring threshold a TCP communicator starts with, measured when it is created.
 *
 * Recursive doubling sends the whole message log2(n) times in few rounds; the ring sends
 * 2(n-1)/n of it in 2(n-1) steps. Which one is faster for a message of S bytes depends on the
 * link's latency and bandwidth: on a 100 Mbit/s link the ring wins from a few KiB, on a fast
 * local network only from a few hundred KiB. A fixed threshold loses on one of them, so each
 * TCP communicator of three or more ranks times both algorithms at two sizes, fits
 * T(S) = a + b*S to each, and starts with the crossover S* = (a_ring - a_rd) / (b_rd - b_ring),
 * kept within what was measured (bagua__calibrate_choose()).
 * Every rank measures the same calls and the ranks agree on the times (each probe's median over
 * the ranks) before choosing, so they all choose alike (both ends of every transfer
 * must). A BAGUA_NET_RING_MIN_BYTES the user set wins,
 * BAGUA_NET_CALIBRATE=0 keeps the registry's default, and autotuning may change the value later.
 * With two ranks both algorithms send the same bytes and the default stands.
 *
 * The same probes also choose the stream count (bagua__calibrate_streams()): on a slow link
 * with a short round trip a message goes over one TCP stream per peer instead of
 * BAGUA_NET_NSTREAMS. Two flows through one shaped 100 Mbit/s link queue cost the ring about
 * 2 % of its rate against one (interleaved torch runs, docs/results), while on fast or distant
 * links more streams help or cost nothing. A count the user chose (BAGUA_NET_NSTREAMS or a
 * config's nstreams) is kept; the ranks agree on the largest count any of them chose.
 *
 * Stability: each probe runs once untimed, then PROBE_REPS times; the ranks decide on agreed
 * times; and a measurement that cannot tell the registry's default from the crossover (within
 * TIE_FRACTION at every size measured) keeps the default.
 *
 * Cost: up to 16 ranks, 24 allreduces at creation, the largest of PROBE_LARGE bytes; about
 * 0.5 s on a 100 Mbit/s link, a few ms on a fast one. Beyond, ten ring steps and the
 * agreement, whatever n (MEASURED_MAX_RANKS).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "communicator.h"
#include "tcp/tcp.h"
#include "common/check.h"
#include "common/log.h"
#include "common/time.h"
#include "tune.h"

#define PROBE_SMALL (4u << 10)
#define PROBE_LARGE (256u << 10)
#define PROBE_CAP (2 * PROBE_LARGE)
/* Each probe is timed this many times in a row (after one untimed call of its algorithm) and
 * the median kept. The probes run in a row per algorithm and size on purpose: a link that an
 * algorithm does not use between its calls goes cold (TCP restarts slow start after an idle
 * period), and interleaving the algorithms made recursive doubling, whose peers at distance 2
 * the ring never uses, look slower than it runs in training, where one size keeps one
 * algorithm. */
#define PROBE_REPS 5
/* A threshold whose predicted cost is within this fraction of the best one at every size
 * measured is as good as the measurement can tell: the registry's default is then kept
 * (bagua__calibrate_choose), so that noise does not move the threshold from run to run. */
#define TIE_FRACTION 0.10
/* Up to this many ranks the probes are the two algorithms themselves. Beyond it they would
 * cost 2(n-1) steps per ring probe (at 1024 ranks emulated on 2 CPUs, 35 of a communicator's
 * 43 s of creation), so one ring step is timed at both sizes instead and the algorithms' times
 * are predicted from it (bagua__calibrate_model): a constant cost at any n. */
#define MEASURED_MAX_RANKS 16
/* The stream rule's bounds (bagua__calibrate_streams): a link slower than this, in bit/s ... */
#define SLOW_LINK_BPS 250e6
/* ... whose 4 KiB ring (2(n-1) small steps) took less than this, in ns: a short round trip. */
#define NEAR_RING_NS 2000000

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

static int64_t median(int64_t *t, int n) {
  qsort(t, (size_t)n, sizeof(t[0]), cmp_i64);
  return t[n / 2];
}

/* One allreduce of `bytes` with the ring threshold at `ring_min` (0: the ring for every size;
 * SIZE_MAX: recursive doubling); *ns gets its time. */
static bagua_status_t time_one(bagua_comm_t *c, float *buf, size_t bytes, size_t ring_min,
                               int64_t *ns) {
  c->ring_min_bytes = ring_min;
  int64_t t0 = bagua__now_ns();
  BAGUA_CHECK(bagua_allreduce(c, buf, buf, bytes / sizeof(float), BAGUA_F32, BAGUA_SUM));
  *ns = bagua__now_ns() - t0;
  return BAGUA_OK;
}

/* Median time in ns of PROBE_REPS allreduces of `bytes` with the ring threshold at `ring_min`,
 * after one untimed call: the first call of an algorithm opens the links it uses (links open
 * on first use) and grows their TCP windows. */
static bagua_status_t time_allreduce(bagua_comm_t *c, float *buf, size_t bytes, size_t ring_min,
                                     int64_t *ns) {
  int64_t t[PROBE_REPS], warm;
  BAGUA_CHECK(time_one(c, buf, bytes, ring_min, &warm));
  for (int i = 0; i < PROBE_REPS; i++) BAGUA_CHECK(time_one(c, buf, bytes, ring_min, &t[i]));
  *ns = median(t, PROBE_REPS);
  return BAGUA_OK;
}

/* Median time in ns of PROBE_REPS steps of a ring: each rank reduces `bytes` from rank - 1
 * into its own while it sends as much to rank + 1. The step both algorithms are made of. */
static bagua_status_t time_step(bagua_comm_t *c, float *buf, float *in, size_t bytes, int64_t *ns) {
  int64_t t[PROBE_REPS];
  int n = c->size, r = c->rank;
  for (int i = 0; i < PROBE_REPS; i++) {
    bagua__send_t snd = {(r + 1) % n, buf, bytes};
    bagua__recv_t rcv = {(r + n - 1) % n, in, bytes, buf, BAGUA_F32, BAGUA_SUM};
    int64_t t0 = bagua__now_ns();
    BAGUA_CHECK(bagua__exchange(c, &snd, 1, &rcv, 1));
    t[i] = bagua__now_ns() - t0;
  }
  *ns = median(t, PROBE_REPS);
  return BAGUA_OK;
}

/* The probes' times predicted from one step's line T(s) = a + b*s (comm/tune.h). */
void bagua__calibrate_model(int n, const int64_t step[2], int64_t rd[2], int64_t ring[2]) {
  double b = (double)(step[1] - step[0]) / (double)(PROBE_LARGE - PROBE_SMALL);
  if (b < 0) b = 0;
  double a = (double)step[0] - b * PROBE_SMALL;
  if (a < 0) a = 0;
  int rounds = 0, pof2 = 1;
  while (pof2 * 2 <= n) pof2 *= 2, rounds++;
  if (pof2 < n) rounds += 2;
  const double size[2] = {PROBE_SMALL, PROBE_LARGE};
  for (int i = 0; i < 2; i++) {
    rd[i] = (int64_t)(rounds * (a + b * size[i]));
    ring[i] = (int64_t)(2.0 * (n - 1) * (a + b * size[i] / n));
  }
}

/* The crossover of the two fitted lines, in bytes, or 0 when the ring is never slower. */
static int64_t crossover(const int64_t rd[2], const int64_t ring[2]) {
  double span = (double)(PROBE_LARGE - PROBE_SMALL);
  double b_rd = (double)(rd[1] - rd[0]) / span, b_ring = (double)(ring[1] - ring[0]) / span;
  double a_rd = (double)rd[0] - b_rd * PROBE_SMALL, a_ring = (double)ring[0] - b_ring * PROBE_SMALL;
  if (a_ring <= a_rd) return 0;         /* the ring costs no more per call */
  if (b_rd <= b_ring) return INT64_MAX; /* recursive doubling never loses */
  return (int64_t)((a_ring - a_rd) / (b_rd - b_ring));
}

/* The time the fitted line through (PROBE_SMALL, t[0]) and (PROBE_LARGE, t[1]) predicts at
 * `bytes`. */
static double line_at(const int64_t t[2], double bytes) {
  double b = (double)(t[1] - t[0]) / (double)(PROBE_LARGE - PROBE_SMALL);
  return (double)t[0] + b * (bytes - PROBE_SMALL);
}

/* The worst ratio, over the sizes measured, of the predicted time with threshold `x` to the
 * faster algorithm's. Each ratio of two lines is monotone between the sizes where the choice
 * changes, so the ends of those pieces are the only candidates. */
static double worst_loss(const int64_t rd[2], const int64_t ring[2], double x) {
  double at[4] = {PROBE_SMALL, PROBE_LARGE, x, x}, worst = 1.0;
  for (int i = 0; i < 4; i++) {
    double s = at[i];
    if (s < PROBE_SMALL || s > PROBE_LARGE) continue;
    double a = line_at(rd, s), b = line_at(ring, s);
    double best = a < b ? a : b;
    /* At the threshold itself both sides count: just below it recursive doubling runs. */
    double mine = i == 2 ? a : (s >= x ? b : a);
    if (best > 0 && mine / best > worst) worst = mine / best;
  }
  return worst;
}

int64_t bagua__calibrate_choose(const int64_t rd[2], const int64_t ring[2]) {
  /* Where the measurement cannot tell the registry's default from the best threshold, the
   * default stands: on links where the two algorithms are close, the fitted crossover swings
   * with every run's noise (from 0 to the cap), and a threshold of 0 cost 16-64 KiB
   * allreduces 20-28 % against recursive doubling. */
  int64_t def = bagua__param_int_default(BAGUA_P_NET_RING_MIN_BYTES);
  if (worst_loss(rd, ring, (double)def) <= 1.0 + TIE_FRACTION) return def;
  int64_t want = crossover(rd, ring);
  /* Where the ring already wins at the small probe, the threshold is at most that size: the
   * fitted lines only say where they cross, and noise in the intercepts can put that above a
   * size the ring was just measured to win. */
  if (ring[0] <= rd[0] && want > (int64_t)PROBE_SMALL) want = PROBE_SMALL;
  /* And it is never more than one doubling beyond the large probe: past the sizes measured, the
   * lines are an extrapolation. With a 10 ms round trip on 1 Gbit/s links both probes are mostly
   * round trips, and the lines crossed near 10 MB; recursive doubling then carried a 7.4 MB
   * bucket at half the ring's speed (its exchanges of the whole buffer suffer more from loss
   * recovery over long round trips than the ring's small steps). */
  if (want > (int64_t)PROBE_CAP) want = PROBE_CAP;
  return want;
}

int bagua__calibrate_streams(const int64_t ring[2], int size, int nstreams) {
  if (nstreams <= 1 || size < 2) return nstreams;
  /* The slope of the ring's line is its time per byte of the message, during which each rank
   * sends 2(n-1)/n bytes: the link's rate without the round trips, which both probes share. */
  double per_byte_ns = (double)(ring[1] - ring[0]) / (double)(PROBE_LARGE - PROBE_SMALL);
  if (per_byte_ns <= 0) return nstreams; /* noise: no estimate */
  double bps = 2.0 * (size - 1) / size * 8e9 / per_byte_ns;
  return bps < SLOW_LINK_BPS && ring[0] < NEAR_RING_NS ? 1 : nstreams;
}

/* Replaces rd and ring by each probe's median over the ranks of `t` (the same on every rank).
 * Beyond MEASURED_MAX_RANKS, by their largest value: a median would gather O(n) bytes on every
 * rank, and the times there come from one ring step, which every rank times alike. */
static bagua_status_t agree_times(bagua_comm_t *t, int64_t rd[2], int64_t ring[2]) {
  int n = t->size;
  int64_t mine[4] = {rd[0], rd[1], ring[0], ring[1]};
  if (n > MEASURED_MAX_RANKS) {
    t->ring_min_bytes = SIZE_MAX;
    BAGUA_CHECK(bagua_allreduce(t, mine, mine, 4, BAGUA_I64, BAGUA_MAX));
    rd[0] = mine[0], rd[1] = mine[1], ring[0] = mine[2], ring[1] = mine[3];
    return BAGUA_OK;
  }
  int64_t *all = calloc((size_t)n * 4, sizeof(*all)), *col = calloc((size_t)n, sizeof(*col));
  bagua_status_t st = all && col ? BAGUA_OK : BAGUA_ERR_NO_MEMORY;
  t->ring_min_bytes = SIZE_MAX;
  if (st == BAGUA_OK) st = bagua_allgather(t, mine, all, 4, BAGUA_I64);
  for (int k = 0; st == BAGUA_OK && k < 4; k++) {
    for (int q = 0; q < n; q++) col[q] = all[q * 4 + k];
    mine[k] = median(col, n);
  }
  if (st == BAGUA_OK) rd[0] = mine[0], rd[1] = mine[1], ring[0] = mine[2], ring[1] = mine[3];
  free(all);
  free(col);
  return st;
}

/* Measures and sets the threshold of TCP communicator `t` (every rank of `t` calls it), and its
 * stream count unless `keep_streams`. */
static bagua_status_t calibrate_tcp(bagua_comm_t *t, int keep_streams) {
  bagua_status_t st = BAGUA_OK;
  float *buf = calloc(2 * PROBE_LARGE / sizeof(float), sizeof(float));
  if (!buf) return BAGUA_ERR_NO_MEMORY;
  size_t old_min = t->ring_min_bytes;
  int old_sig = t->sig_by_parent;
  /* The probes are the same calls on every rank: no signature exchange, which would add its
   * own round trip to the latency being measured. */
  t->sig_by_parent = 1;
  int64_t rd[2], ring[2];
  if (t->size <= MEASURED_MAX_RANKS) {
    BAGUA_CHECK_GOTO(time_allreduce(t, buf, PROBE_SMALL, SIZE_MAX, &rd[0]), st, out);
    BAGUA_CHECK_GOTO(time_allreduce(t, buf, PROBE_SMALL, 0, &ring[0]), st, out);
    BAGUA_CHECK_GOTO(time_allreduce(t, buf, PROBE_LARGE, SIZE_MAX, &rd[1]), st, out);
    BAGUA_CHECK_GOTO(time_allreduce(t, buf, PROBE_LARGE, 0, &ring[1]), st, out);
  } else {
    int64_t step[2];
    BAGUA_CHECK_GOTO(time_step(t, buf, buf + PROBE_LARGE / sizeof(float), PROBE_SMALL, &step[0]),
                     st, out);
    BAGUA_CHECK_GOTO(time_step(t, buf, buf + PROBE_LARGE / sizeof(float), PROBE_LARGE, &step[1]),
                     st, out);
    bagua__calibrate_model(t->size, step, rd, ring);
  }
  /* Every rank decides on the same times: each probe's median over the ranks. (Each rank
   * deciding on its own times, and the ranks then taking the largest threshold, let one rank's
   * noise win: 512 KiB on links where the ring won at every size. Neither end of the ranks'
   * times is the collective's cost: the rank that entered a call last found part of its data
   * already received, and timed recursive doubling's 256 KiB at half what it costs; the first
   * one timed its wait for the others too.) */
  BAGUA_CHECK_GOTO(agree_times(t, rd, ring), st, out);
  int64_t lo = 0, hi = 0, want = bagua__calibrate_choose(rd, ring);
  bagua__param_bounds(BAGUA_P_NET_RING_MIN_BYTES, &lo, &hi);
  if (want > hi) want = hi;
  if (want < lo) want = lo;
  int streams = bagua__comm_streams(t);
  if (streams > 0 && !keep_streams) streams = bagua__calibrate_streams(ring, t->size, streams);
  /* One value for every rank (the threshold is already; the stream counts the ranks started
   * from may differ: the largest wins). */
  int64_t agreed[2] = {want, streams};
  BAGUA_CHECK_GOTO(bagua_allreduce(t, agreed, agreed, 2, BAGUA_I64, BAGUA_MAX), st, out);
  want = agreed[0];
  t->sig_by_parent = old_sig;
  BAGUA_CHECK_GOTO(bagua__comm_set_ring_min(t, (size_t)want), st, out);
  if (agreed[1] > 0 && agreed[1] != bagua__comm_streams(t))
    BAGUA_CHECK_GOTO(bagua__comm_set_streams(t, (int)agreed[1]), st, out);
  BAGUA_INFO(BAGUA_SUBSYS_COMM,
             "calibrated %d ranks: recursive doubling %.0f/%.0f us, ring %.0f/%.0f us at %u/%u "
             "bytes: ring from %lld bytes, %lld stream(s) per peer on another node",
             t->size, rd[0] / 1e3, rd[1] / 1e3, ring[0] / 1e3, ring[1] / 1e3, PROBE_SMALL,
             PROBE_LARGE, (long long)want, (long long)agreed[1]);
  free(buf);
  return BAGUA_OK;
out:
  t->sig_by_parent = old_sig;
  t->ring_min_bytes = old_min;
  free(buf);
  return st;
}

bagua_status_t bagua__comm_calibrate(bagua_comm_t *c) {
  if (!c || bagua__param_is_set(BAGUA_P_NET_RING_MIN_BYTES) ||
      !bagua__param_int(BAGUA_P_NET_CALIBRATE))
    return BAGUA_OK;
  if (c->ops == &bagua__tcp_ops)
    return c->size >= 3 ? calibrate_tcp(c, c->streams_chosen) : BAGUA_OK;
  /* A hierarchical communicator runs the TCP collectives among its node leaders, one per
   * node (c->inter, NULL on the other ranks): they calibrate, and each node's other ranks
   * take their leader's value, so that every rank reports the same threshold (the advisor and
   * autotuning read it). */
  if (c->ops != &bagua__hier_ops || !c->intra || c->node_count < 3) return BAGUA_OK;
  if (c->inter) BAGUA_CHECK(calibrate_tcp(c->inter, c->streams_chosen));
  int64_t v[2] = {0, 0};
  if (c->inter) v[0] = (int64_t)c->inter->ring_min_bytes, v[1] = bagua__comm_streams(c->inter);
  BAGUA_CHECK(bagua_broadcast(c->intra, v, v, 2, BAGUA_I64, 0));
  c->ring_min_bytes = (size_t)v[0];
  /* Through the top communicator, so that every rank reports the count its leader uses. */
  if (v[1] > 0 && v[1] != bagua__comm_streams(c))
    BAGUA_CHECK(bagua__comm_set_streams(c, (int)v[1]));
  return BAGUA_OK;
}
