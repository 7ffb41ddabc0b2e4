/*
 * An in-process elastic worker for the agent tests (bagua-agent --elastic-mode in-process, or
 * auto).
 * State: one int64 counter. Each step allreduce-sums a 1 from every rank and adds the result
 * to the counter (so it grows by the world size of the step), then commits; a new round seen
 * at a step boundary, or a failed collective (restore first), leads to bagua_elastic_rebuild.
 *
 *   agent_elastic_worker STEPS [SLEEP_MS]
 *
 * Prints "started pid=P round=N rank=R size=W mode=M mark=F" once (M: BAGUA_ELASTIC_MODE, F:
 * BAGUA_ELASTIC_MARK, "unset" when either is missing),
 * "first_step_ms=T" (CLOCK_MONOTONIC) after its first completed step, "rebuilt round=N rank=R
 * size=W" after each world change, and "final rank=R step=S value=V" at the end. A worker whose
 * node is not a member of the new round (its agent left the job) prints "left round=N" (N: the
 * round it was in) and exits 0.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "bagua/bagua.h"
#include "bagua/elastic.h"

static long long mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* 0: rebuilt; 1: this node is not a member of the new round (it is leaving the job); -1:
 * failed. */
static int rebuild(bagua_elastic_t *e) {
  int64_t was = bagua_elastic_round(e);
  bagua_status_t st = bagua_elastic_rebuild(e);
  if (st == BAGUA_ERR_ABORTED) {
    /* The agent deregistered this node (a graceful leave): the new round goes on without it,
     * and leaving is this worker's part of that, not a failure. */
    printf("left round=%" PRId64 "\n", was);
    return 1;
  }
  if (st != BAGUA_OK) {
    fprintf(stderr, "rebuild: %s: %s\n", bagua_err_name(st), bagua_last_error());
    return -1;
  }
  printf("rebuilt round=%" PRId64 " rank=%d size=%d\n", bagua_elastic_round(e),
         bagua_elastic_rank(e), bagua_elastic_size(e));
  return 0;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  int64_t steps = argc > 1 ? atoll(argv[1]) : 100;
  int sleep_ms = argc > 2 ? atoi(argv[2]) : 10;
  bagua_elastic_t *e = NULL;
  bagua_status_t st = bagua_elastic_create(NULL, &e);
  if (st != BAGUA_OK) {
    fprintf(stderr, "bagua_elastic_create: %s: %s\n", bagua_err_name(st), bagua_last_error());
    return 1;
  }
  const char *mode = getenv("BAGUA_ELASTIC_MODE");
  const char *mark = getenv("BAGUA_ELASTIC_MARK");
  printf("started pid=%d round=%" PRId64 " rank=%d size=%d mode=%s mark=%s\n", (int)getpid(),
         bagua_elastic_round(e), bagua_elastic_rank(e), bagua_elastic_size(e),
         mode ? mode : "unset", mark && mark[0] ? mark : "unset");
  int64_t counter = 0;
  if ((st = bagua_elastic_register(e, "counter", &counter, sizeof(counter))) != BAGUA_OK ||
      (st = bagua_elastic_sync(e)) != BAGUA_OK) {
    fprintf(stderr, "register/sync: %s: %s\n", bagua_err_name(st), bagua_last_error());
    bagua_elastic_destroy(e);
    return 1;
  }
  int first = 1;
  while (bagua_elastic_step(e) < steps) {
    if (bagua_elastic_check(e)) {
      int rc = rebuild(e);
      if (rc < 0) goto fail;
      if (rc > 0) goto left;
      continue;
    }
    int64_t one = 1, sum = 0;
    st = bagua_allreduce(bagua_elastic_comm(e), &one, &sum, 1, BAGUA_I64, BAGUA_SUM);
    if (st != BAGUA_OK) {
      bagua_elastic_restore(e);
      int rc = rebuild(e);
      if (rc < 0) goto fail;
      if (rc > 0) goto left;
      continue;
    }
    counter += sum;
    bagua_elastic_set_step(e, bagua_elastic_step(e) + 1);
    bagua_elastic_commit(e);
    if (first) {
      printf("first_step_ms=%lld\n", mono_ms());
      first = 0;
    }
    if (sleep_ms > 0) usleep((useconds_t)sleep_ms * 1000);
  }
  printf("final rank=%d step=%" PRId64 " value=%" PRId64 "\n", bagua_elastic_rank(e),
         bagua_elastic_step(e), counter);
  bagua_elastic_destroy(e);
  return 0;
left:
  bagua_elastic_destroy(e);
  return 0;
fail:
  bagua_elastic_destroy(e);
  return 3;
}
