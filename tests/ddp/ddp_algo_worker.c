/*
 * A libbagua worker that leaves every algorithm setting to its launcher: bagua_comm_create()
 * and bagua_ddp_create() with NULL configurations, two training steps of the synthetic
 * problem, and one line per rank naming the algorithm libbagua ran and the bytes a step sent
 * ("ddp worker: rank R of N runs ALGO, B bytes/step"). tests/ddp/launch_algorithm.sh runs it
 * under bagua-launch.
 */
#include <inttypes.h>
#include <stdio.h>

#include "bagua/bagua.h"
#include "bagua/ddp.h"
#include "problem.h"

static problem_t prob = {.d_in = 64, .d_out = 8, .n = 32, .nsplit = 4, .noise = 0.1f};

int main(void) {
  bagua_comm_t *c = NULL;
  bagua_ddp_t *ddp = NULL;
  bagua_status_t st = bagua_comm_create(NULL, &c);
  if (st != BAGUA_OK) goto fail;
  shard_t s;
  model_t m;
  shard_make(&prob, bagua_comm_rank(c), &s);
  model_init(&prob, 1, &m);
  st = bagua_ddp_create(c, NULL, &ddp);
  if (st != BAGUA_OK) goto fail;
  model_register(&m, ddp, 0);
  st = bagua_ddp_ready(ddp);
  for (int t = 0; t < 2 && st == BAGUA_OK; t++) st = model_train_step(&m, &s, ddp, 0);
  if (st != BAGUA_OK) goto fail;
  bagua_ddp_stats_t stats = {.struct_size = sizeof(stats)};
  bagua_ddp_stats(ddp, &stats);
  printf("ddp worker: rank %d of %d runs %s, %" PRIu64 " bytes/step\n", bagua_comm_rank(c),
         bagua_comm_size(c), bagua_ddp_algorithm(ddp), stats.bytes_last_step);
  fflush(stdout);
  bagua_ddp_destroy(ddp);
  model_free(&m);
  shard_free(&s);
  bagua_comm_destroy(c);
  return 0;
fail:
  fprintf(stderr, "ddp worker: %s: %s\n", bagua_err_name(st), bagua_last_error());
  bagua_ddp_destroy(ddp);
  if (c) bagua_comm_destroy(c);
  return 1;
}
