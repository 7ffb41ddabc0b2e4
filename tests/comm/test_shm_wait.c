/*
 * A long wait on shared memory gives its core away. Rank 1 arrives LATE_MS late at an
 * allreduce; rank 0 waits for it inside the call. That is what a communication thread does
 * while the peer still computes its backward pass, and the computing threads of the same node
 * need the core then: a wait that only yields stays runnable and takes about a core's worth
 * of CPU time for the whole wait. The test measures the CPU time rank 0's thread used during
 * the wait and asserts it is a small part of it, and that the sum is still exact.
 */
#include <stdio.h>
#include <time.h>

#include "../test.h"
#include "mp.h"

#define LATE_MS 800
#define N 1024

static double thread_cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int body(bagua_comm_t *c, void *arg) {
  (void)arg;
  int me = bagua_comm_rank(c);
  float buf[N];
  for (int i = 0; i < N; i++) buf[i] = (float)(i % 7 + me);
  /* One collective first, so that both ranks are set up and the wait below is the late one. */
  ASSERT_OK(bagua_barrier(c));
  if (me == 1) nanosleep(&(struct timespec){0, LATE_MS * 1000000L}, NULL);
  double wall0 = mp_now(), cpu0 = thread_cpu_s();
  ASSERT_OK(bagua_allreduce(c, buf, buf, N, BAGUA_F32, BAGUA_SUM));
  double wall = mp_now() - wall0, cpu = thread_cpu_s() - cpu0;
  for (int i = 0; i < N; i++)
    if (buf[i] != (float)(2 * (i % 7) + 1))
      TEST_FAIL("rank %d: element %d is %g, want %d", me, i, buf[i], 2 * (i % 7) + 1);
  if (me == 0) {
    printf("rank 0 waited %.0f ms and used %.0f ms of CPU\n", wall * 1e3, cpu * 1e3);
    if (wall < LATE_MS * 0.8e-3) TEST_FAIL("rank 0 did not wait (%.0f ms)", wall * 1e3);
    if (cpu > 0.25 * wall)
      TEST_FAIL(
          "rank 0 used %.0f ms of CPU in a %.0f ms wait for a late rank: the wait does not "
          "give its core away",
          cpu * 1e3, wall * 1e3);
  }
  return 0;
}

int main(void) {
  mp_opts_t o = {.nranks = 2, .transport = BAGUA_TRANSPORT_SHM, .deadline_s = 60};
  int rc = mp_run(&o, body, NULL);
  printf("%s: a %d ms wait on shared memory\n", rc ? "FAILED" : "passed", LATE_MS);
  return rc;
}
