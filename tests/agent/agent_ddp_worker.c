/*
 * A libbagua DDP worker for the observability tests: one 4096-float tensor, STEPS training
 * steps (constant gradients, plain SGD) with SLEEP_MS between them, and the total announced
 * through bagua_ddp_set_total_steps() so the launcher can show an ETA.
 *
 *   agent_ddp_worker STEPS SLEEP_MS
 *
 * Prints "ddp_worker rank=R size=W" once ready and "ddp_worker done steps=S ns_per_step=N"
 * at the end (N: the mean wall time of bagua_ddp_step, which tests/agent/bench_progress.sh
 * compares with and without BAGUA_PROGRESS_FILE).
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "bagua/bagua.h"
#include "bagua/ddp.h"

#define N 4096

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  long steps = argc > 1 ? atol(argv[1]) : 100;
  int sleep_ms = argc > 2 ? atoi(argv[2]) : 10;
  static float param[N], grad[N];
  bagua_comm_t *c = NULL;
  bagua_ddp_t *ddp = NULL;
  bagua_status_t st = bagua_comm_create(NULL, &c);
  if (st == BAGUA_OK) st = bagua_ddp_create(c, NULL, &ddp);
  if (st == BAGUA_OK) st = bagua_ddp_register(ddp, "w", param, grad, N);
  if (st == BAGUA_OK) st = bagua_ddp_ready(ddp);
  if (st == BAGUA_OK) st = bagua_ddp_set_total_steps(ddp, steps);
  if (st != BAGUA_OK) goto fail;
  printf("ddp_worker rank=%d size=%d\n", bagua_comm_rank(c), bagua_comm_size(c));
  double in_step = 0;
  for (long t = 0; t < steps; t++) {
    for (int i = 0; i < N; i++) grad[i] = 0.001f;
    if ((st = bagua_ddp_grad_ready(ddp, 0)) != BAGUA_OK) goto fail;
    double t0 = now_s();
    if ((st = bagua_ddp_step(ddp)) != BAGUA_OK) goto fail;
    in_step += now_s() - t0;
    if (sleep_ms > 0) usleep((useconds_t)sleep_ms * 1000);
  }
  printf("ddp_worker done steps=%ld ns_per_step=%.0f\n", steps,
         steps > 0 ? in_step * 1e9 / (double)steps : 0.0);
  bagua_ddp_destroy(ddp);
  bagua_comm_destroy(c);
  return 0;
fail:
  fprintf(stderr, "ddp_worker: %s: %s\n", bagua_err_name(st), bagua_last_error());
  bagua_ddp_destroy(ddp);
  if (c) bagua_comm_destroy(c);
  return 1;
}
