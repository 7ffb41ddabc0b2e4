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

#endif
