/*
 * Links opened on first use (comm/tcp/links.c): a communicator of 40 ranks, each its own
 * emulated node over TCP, connects at creation to about 3 log2(n) peers, not n - 1; a shift by
 * a distance no collective uses opens its pair from inside the call, as does an alltoall every
 * other pair, after which every rank has a link to each peer; results are exact throughout. A
 * world of 140 ranks (more than the bootstrap root's old cap of 128 pending handshakes) forms
 * through env:// in every run, with as few links.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../test.h"
#include "comm/tcp/tcp.h"
#include "mp.h"

/* The most links creation may open: distances 1, 2, 4, ... either way, the recursive-doubling
 * partners and the fold partner. */
static int first_bound(int n) {
  int lg = 0;
  while ((1 << lg) < n) lg++;
  return 2 * lg + lg + 1;
}

static int body_lazy(bagua_comm_t *c, void *arg) {
  (void)arg;
  int n = bagua_comm_size(c), r = bagua_comm_rank(c);
  int at_start = bagua__links_count(c);
  ASSERT_LE(at_start, first_bound(n));
  ASSERT_LT(at_start, n - 1);
  /* A shift by 19: not a power of two, so no pair of it was connected at creation. */
  int64_t out = r, in = -1;
  ASSERT_OK(bagua_sendrecv(c, &out, 1, (r + 19) % n, &in, 1, (r + n - 19) % n, BAGUA_I64));
  ASSERT_EQ(in, (r + n - 19) % n);
  int64_t *snd = malloc(sizeof(int64_t) * (size_t)n), *rcv = malloc(sizeof(int64_t) * (size_t)n);
  ASSERT_TRUE(snd && rcv);
  for (int j = 0; j < n; j++) snd[j] = (int64_t)r * 1000 + j;
  ASSERT_OK(bagua_alltoall(c, snd, rcv, 1, BAGUA_I64));
  for (int i = 0; i < n; i++) ASSERT_EQ(rcv[i], (int64_t)i * 1000 + r);
  ASSERT_EQ(bagua__links_count(c), n - 1);
  int64_t sum = r, total = 0;
  ASSERT_OK(bagua_allreduce(c, &sum, &total, 1, BAGUA_I64, BAGUA_SUM));
  ASSERT_EQ(total, (int64_t)n * (n - 1) / 2);
  if (r == 0) printf("%d ranks: %d links after creation, %d after alltoall\n", n, at_start, n - 1);
  free(snd);
  free(rcv);
  return 0;
}

static int body_large(bagua_comm_t *c, void *arg) {
  (void)arg;
  int n = bagua_comm_size(c), r = bagua_comm_rank(c);
  int links = bagua__links_count(c);
  ASSERT_LE(links, first_bound(n));
  int64_t v = r + 1, sum = 0;
  ASSERT_OK(bagua_allreduce(c, &v, &sum, 1, BAGUA_I64, BAGUA_SUM));
  ASSERT_EQ(sum, (int64_t)n * (n + 1) / 2);
  ASSERT_OK(bagua_barrier(c));
  if (r == 0) printf("%d ranks formed, %d links on rank 0\n", n, links);
  return 0;
}

int main(int argc, char **argv) {
  const char *which = argc > 1 ? argv[1] : "all";
  int lazy_only = strcmp(which, "lazy") == 0, large_only = strcmp(which, "large") == 0;
  if (!lazy_only && !large_only && strcmp(which, "all") != 0) {
    fprintf(stderr, "test_links: unknown case %s (lazy, large, all)\n", which);
    return 2;
  }
  /* Calibration would add its probes' links; the count is what creation itself opens. */
  mp_opts_t lazy = {.nranks = 40,
                    .transport = BAGUA_TRANSPORT_TCP,
                    .ranks_per_node = 1,
                    .deadline_s = 120,
                    .setenv_list = "BAGUA_NET_CALIBRATE=0"};
  if (!large_only && mp_run(&lazy, body_lazy, NULL) != 0) return 1;
  mp_opts_t large = {.nranks = 140,
                     .transport = BAGUA_TRANSPORT_TCP,
                     .ranks_per_node = 1,
                     .deadline_s = 240,
                     .setenv_list = "BAGUA_NET_CALIBRATE=0;BAGUA_NET_NSTREAMS=1"};
  if (!lazy_only && mp_run(&large, body_large, NULL) != 0) return 1;
  printf("PASS comm_links %s\n", which);
  return 0;
}
