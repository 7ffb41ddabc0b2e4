/*
 * The allreduce ring threshold a TCP communicator starts with (comm/calibrate.c): measured at
 * creation on three or more ranks and equal on every rank; a BAGUA_NET_RING_MIN_BYTES the user
 * set wins; BAGUA_NET_CALIBRATE=0 and two ranks keep the registry's default; a hierarchical
 * communicator of three emulated nodes gives every rank its leader's value. The stream count:
 * equal on every rank, the registry's on loopback (a fast link), the user's when set. And the
 * choices themselves (bagua__calibrate_choose, bagua__calibrate_streams) on probe times of
 * known links, and the probes predicted for worlds beyond 16 ranks (bagua__calibrate_model).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "comm/tune.h"
#include "common/params.h"
#include "mp.h"
#include "../test.h"

/* What every rank's body expects: -1 for "measured, equal on every rank and within bounds". */
static int64_t g_want;

static int body(bagua_comm_t *c, void *arg) {
  (void)arg;
  int64_t mine = (int64_t)bagua__comm_ring_min(c), lo = 0, hi = 0, min = mine, max = mine;
  ASSERT_OK(bagua_allreduce(c, &min, &min, 1, BAGUA_I64, BAGUA_MIN));
  ASSERT_OK(bagua_allreduce(c, &max, &max, 1, BAGUA_I64, BAGUA_MAX));
  if (min != max)
    TEST_FAIL("ranks disagree on the ring threshold: %lld to %lld", (long long)min, (long long)max);
  bagua__param_bounds(BAGUA_P_NET_RING_MIN_BYTES, &lo, &hi);
  ASSERT_TRUE(mine >= lo && mine <= hi);
  if (g_want >= 0) ASSERT_EQ(mine, g_want);
  int64_t streams = bagua__comm_streams(c), smin = streams, smax = streams;
  ASSERT_OK(bagua_allreduce(c, &smin, &smin, 1, BAGUA_I64, BAGUA_MIN));
  ASSERT_OK(bagua_allreduce(c, &smax, &smax, 1, BAGUA_I64, BAGUA_MAX));
  if (smin != smax)
    TEST_FAIL("ranks disagree on the streams: %lld to %lld", (long long)smin, (long long)smax);
  /* Loopback is a fast link: the calibration keeps the streams BAGUA_NET_NSTREAMS gives. */
  ASSERT_EQ(streams, bagua__param_int(BAGUA_P_NET_NSTREAMS));
  /* And the collectives agree with the oracle at sizes on both sides of it. */
  const size_t counts[] = {7, 1024, 20000, 200000};
  for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
    float *buf = malloc(counts[k] * sizeof(float));
    ASSERT_TRUE(buf != NULL);
    for (size_t i = 0; i < counts[k]; i++) buf[i] = (float)(bagua_comm_rank(c) + 1);
    ASSERT_OK(bagua_allreduce(c, buf, buf, counts[k], BAGUA_F32, BAGUA_SUM));
    float total = (float)(bagua_comm_size(c) * (bagua_comm_size(c) + 1) / 2);
    for (size_t i = 0; i < counts[k]; i++) ASSERT_TRUE(buf[i] == total);
    free(buf);
  }
  if (bagua_comm_rank(c) == 0)
    printf("ring threshold %lld bytes on %d ranks (%s)\n", (long long)mine, bagua_comm_size(c),
           bagua_comm_transport_name(c));
  return 0;
}

static int run(int nranks, int per_node, const char *env, int64_t want) {
  g_want = want;

  mp_opts_t o = {.nranks = nranks,
                 .transport = per_node > 1 ? BAGUA_TRANSPORT_AUTO : BAGUA_TRANSPORT_TCP,
                 .ranks_per_node = per_node,
                 .deadline_s = 60,
                 .setenv_list = env};
  return mp_run(&o, body, NULL);
}

/* The rules of the choice on the probe times (ns) of links whose answer is known. */
static void test_choose(void) {
  /* 100 Mbit/s, rank 0's probes in one run: the ring wins at both sizes and costs no more
   * per call on the lines, so it serves every size. */
  ASSERT_EQ(bagua__calibrate_choose((int64_t[]){603000, 50968000}, (int64_t[]){362000, 36757000}),
            0);
  /* A fast local network: recursive doubling wins small messages, the ring large ones. The
   * lines (rd 50 us + 1 ns/byte, ring 150 us + 0.5 ns/byte) cross at 200 KiB, inside the sizes
   * measured, and that is the threshold. */
  int64_t rd_fast[2] = {54000, 306000}, ring_fast[2] = {152000, 278000};
  int64_t x = bagua__calibrate_choose(rd_fast, ring_fast);
  ASSERT_TRUE(x > 190 * 1024 && x < 210 * 1024);
  /* 1 Gbit/s with a 10 ms round trip: 2 rounds against 6, both probes mostly round trips; the
   * lines cross near 10 MB, beyond anything measured: capped at 512 KiB. */
  ASSERT_EQ(
      bagua__calibrate_choose((int64_t[]){20000000, 24000000}, (int64_t[]){60000000, 63000000}),
      512 * 1024);
  /* Recursive doubling never loses on the lines: capped alike. */
  ASSERT_EQ(bagua__calibrate_choose((int64_t[]){1000, 2000}, (int64_t[]){5000, 9000}), 512 * 1024);
  /* The ring never costs more per call: it serves every size. */
  ASSERT_EQ(bagua__calibrate_choose((int64_t[]){5000, 90000}, (int64_t[]){4000, 50000}), 0);
  /* Links where the two algorithms are close: the lines' crossover swings with noise (these
   * three measurements of one link gave 0, about 47 KiB and the cap before), but the default is
   * within 10 % of the faster algorithm at every size measured each time, and stays. */
  int64_t def = bagua__param_int_default(BAGUA_P_NET_RING_MIN_BYTES);
  ASSERT_EQ(bagua__calibrate_choose((int64_t[]){100000, 1000000}, (int64_t[]){96000, 990000}), def);
  ASSERT_EQ(bagua__calibrate_choose((int64_t[]){100000, 1000000}, (int64_t[]){104000, 980000}),
            def);
  ASSERT_EQ(bagua__calibrate_choose((int64_t[]){100000, 960000}, (int64_t[]){104000, 1000000}),
            def);
  /* Without the tie rule the first of them would serve every size by the ring. */
  ASSERT_TRUE(bagua__calibrate_choose((int64_t[]){100000, 1000000}, (int64_t[]){60000, 600000}) <
              4096 + 1);
}

/* The stream rule on the probe times of known links. */
static void test_streams(void) {
  /* 100 Mbit/s without delay (the 4-rank probes above): one stream. */
  ASSERT_EQ(bagua__calibrate_streams((int64_t[]){362000, 36757000}, 4, 2), 1);
  /* The same link with a 10 ms round trip (4 KiB ring 60 ms): the streams stay. */
  ASSERT_EQ(bagua__calibrate_streams((int64_t[]){60362000, 96757000}, 4, 2), 2);
  /* 1 Gbit/s (4 KiB in 0.3 ms, 256 KiB in 3.4 ms: ~1 Gbit/s) and a fast local network. */
  ASSERT_EQ(bagua__calibrate_streams((int64_t[]){300000, 3400000}, 4, 2), 2);
  ASSERT_EQ(bagua__calibrate_streams((int64_t[]){152000, 278000}, 4, 4), 4);
  /* Noise that makes the large probe no slower than the small one gives no estimate. */
  ASSERT_EQ(bagua__calibrate_streams((int64_t[]){400000, 300000}, 4, 2), 2);
  /* One stream, or no peer on another node (0): nothing to choose. */
  ASSERT_EQ(bagua__calibrate_streams((int64_t[]){362000, 36757000}, 4, 1), 1);
  ASSERT_EQ(bagua__calibrate_streams((int64_t[]){362000, 36757000}, 4, 0), 0);
}

/* The predicted probes of a large world, and the choices made on them. */
static void test_model(void) {
  /* A step of 50 us + 1 ns/byte (about 8 Gbit/s) at 64 ranks: recursive doubling is 6 steps of
   * the message, the ring 126 steps of 1/64 of it. */
  int64_t step[2] = {50000 + 4096, 50000 + 262144}, rd[2], ring[2];
  bagua__calibrate_model(64, step, rd, ring);
  ASSERT_EQ(rd[0], 6 * (50000 + 4096));
  ASSERT_EQ(rd[1], 6 * (50000 + 262144));
  ASSERT_EQ(ring[0], 126 * (50000 + 64));
  ASSERT_EQ(ring[1], 126 * (50000 + 4096));
  /* The lines cross where 6(a + bS) = 126(a + bS/64): S = 120a / (6 - 126/64) b, about 1.5 MB,
   * beyond the sizes measured: capped at 512 KiB. */
  ASSERT_EQ(bagua__calibrate_choose(rd, ring), 512 * 1024);
  /* 100 Mbit/s (80 ns/byte) with a 100 us step at 64 ranks: the crossover is
   * 120 * 100000 / (4.03 * 80), about 37 KB. */
  int64_t slow[2] = {100000 + 80 * 4096, 100000 + 80 * 262144};
  bagua__calibrate_model(64, slow, rd, ring);
  int64_t x = bagua__calibrate_choose(rd, ring);
  ASSERT_TRUE(x > 33000 && x < 41000);
  /* 100 ranks fold: 6 rounds plus 2. */
  bagua__calibrate_model(100, step, rd, ring);
  ASSERT_EQ(rd[0], 8 * (50000 + 4096));
  /* Noise that makes the large step faster than the small one: no negative slope. */
  int64_t noisy[2] = {90000, 80000};
  bagua__calibrate_model(64, noisy, rd, ring);
  ASSERT_EQ(rd[0], rd[1]);
}

int main(void) {
  test_choose();
  test_streams();
  test_model();
  int64_t def = bagua__param_int_default(BAGUA_P_NET_RING_MIN_BYTES);
  if (run(3, 1, "", -1) != 0) return 1;                                  /* measured */
  if (run(3, 1, "BAGUA_NET_NSTREAMS=3", -1) != 0) return 1;              /* the user's streams */
  if (run(4, 1, "BAGUA_NET_RING_MIN_BYTES=12345", 12345) != 0) return 1; /* the user's */
  if (run(3, 1, "BAGUA_NET_CALIBRATE=0", def) != 0) return 1;            /* off */
  if (run(2, 1, "", def) != 0) return 1;                                 /* two ranks */
  if (run(6, 2, "", -1) != 0) return 1;  /* hierarchical: 3 nodes of 2 */
  if (run(20, 1, "", -1) != 0) return 1; /* beyond 16 ranks: predicted from one step */
  printf("PASS comm_calibrate\n");
  return 0;
}
