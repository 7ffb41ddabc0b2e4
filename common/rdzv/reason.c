/*
 * Round reasons: one row per reason, the word the round record carries and what the reason
 * means to the agents that read it. The leader's rules (agent/leader.c) name the reason of the
 * round they publish, and the followers (agent/follow.c) ask this table whether that round
 * keeps running in-process workers, so a new rule is one row here and one in the leader's
 * table, never a string compared in two places.
 */
#include <string.h>

#include "rdzv.h"

typedef struct {
  const char *word;
  int keeps_workers;  /* in-process elastic workers move to the round without a restart */
  int counts_restart; /* the round spends one of --max-restarts */
} reason_row_t;

static const reason_row_t ROWS[] = {
    [BAGUA__ROUND_REASON_NONE] = {"", 0, 0},
    [BAGUA__ROUND_INITIAL] = {"initial", 0, 0},
    /* A forged or inconsistent round is replaced by the one the registered nodes make; its
     * workers may have started on a wrong world, so they start again. */
    [BAGUA__ROUND_INVALID] = {"invalid", 0, 0},
    [BAGUA__ROUND_FAILURE] = {"failure", 0, 1},
    /* The same world again after a worker's communication stalled: elastic workers rebuild. */
    [BAGUA__ROUND_STALL] = {"stall", 1, 0},
    [BAGUA__ROUND_MEMBERSHIP] = {"membership", 1, 0},
};

_Static_assert(sizeof(ROWS) / sizeof(ROWS[0]) == BAGUA__ROUND_REASON_COUNT,
               "one row per round reason");

const char *bagua__round_reason_word(bagua__round_reason_t r) {
  return (unsigned)r < BAGUA__ROUND_REASON_COUNT ? ROWS[r].word : "";
}

int bagua__round_reason_parse(const char *word, bagua__round_reason_t *out) {
  for (int r = 0; r < BAGUA__ROUND_REASON_COUNT; r++)
    if (strcmp(word, ROWS[r].word) == 0) {
      *out = (bagua__round_reason_t)r;
      return 0;
    }
  return -1;
}

int bagua__round_reason_keeps_workers(bagua__round_reason_t r) {
  return (unsigned)r < BAGUA__ROUND_REASON_COUNT && ROWS[r].keeps_workers;
}

int bagua__round_reason_counts_restart(bagua__round_reason_t r) {
  return (unsigned)r < BAGUA__ROUND_REASON_COUNT && ROWS[r].counts_restart;
}
