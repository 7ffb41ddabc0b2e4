/*
 * Who watches whom (docs/agent.md, "Liveness channel"): the members of a round, in the round's
 * order, form a ring, and every member watches the BAGUA__RING_WATCH members that follow it.
 * So each agent holds that many outgoing liveness connections and about as many incoming ones
 * whatever the job's size, and a member is watched by as many predecessors: its death is
 * noticed unless all of them die with it (then its lease's expiry still is).
 *
 * The watcher nearest a dead member (the first predecessor whose own successors in between are
 * all dead too) revokes the dead member's lease at once; the others only after a fallback delay,
 * if no round without the dead member has come by then. So a death costs one revocation, not
 * one per agent.
 *
 * Which members a node watches is in its assignment (common/rdzv, bagua__rdzv_assign_of: the
 * next ones after it, nearest first), which the leader writes with this count. The rule for
 * revoking is a pure function here; ring_watch.c carries both out (the node records of the
 * watched members, the connections, the revocations).
 */
#ifndef BAGUA_AGENT_RING_H
#define BAGUA_AGENT_RING_H

#include <stdint.h>

#include "common/rdzv/rdzv.h"

/* Successors each member watches. Liveness sockets per agent: this many outgoing, about as many
 * incoming, and the listener. */
#define BAGUA__RING_WATCH 3

/*
 * Whether the watcher of a member at ring distance `d` (1 = its nearest successor) revokes the
 * member's lease at once: when every watched member nearer than it (dead[0..d-2], 1 = found dead)
 * is dead too, so no nearer watcher is left to do it.
 */
int bagua__ring_revokes_first(int d, const int *dead);

/* Members of a round that campaign at once when the leader key is vacant. */
#define BAGUA__CAMPAIGN_FIRST 3
/* The wait added by each further tier of campaigners. */
#define BAGUA__CAMPAIGN_STEP_MS 100

/*
 * How long a node waits, from when it first sees the leader key vacant, before it campaigns;
 * and, from when it first sees a new leader key, before it reads the named node's record to
 * check the key (register.c). The round's order ranks the nodes: the first
 * BAGUA__CAMPAIGN_FIRST members wait nothing, and the wait grows by `step_ms` each time the
 * place doubles (members 3-8 one step, 9-20 two, ...: about log2(N / 3) steps for the last
 * of N). So a leader's death costs a few campaigns instead of one write per survivor, and
 * N record reads spread over those steps instead of all at once; and when the first
 * candidates died with the leader, the next tier campaigns a step later.
 * `index` is the node's place in a round of `nmembers` (-1: not a member, e.g. a joiner: the
 * last tier). A job with no round yet has no order, and everyone campaigns at once: the caller
 * passes nmembers 0, which makes the wait 0.
 */
int bagua__ring_campaign_delay_ms(int index, int nmembers, int step_ms);

#endif
