/*
 * Lookups by node id into a snapshot, for the leader: every decision asks, for each of up to
 * thousands of members, for its node record, its done record and its acknowledgement. A
 * linear search each would make one decision cost O(N^2); this index, built once per decision
 * in O(N log N), answers each in O(log N).
 *
 * The index points into the snapshot it was built from and is valid while that snapshot is
 * unchanged. Ownership: bagua__agent_index_clear frees its arrays, never the snapshot.
 */
#ifndef BAGUA_AGENT_INDEX_H
#define BAGUA_AGENT_INDEX_H

#include "schema.h"

typedef struct {
  const bagua__agent_snap_t *s;
  const bagua__rdzv_node_t **nodes;       /* s->nodes, by id */
  const bagua__agent_done_entry_t **done; /* s->done, by node */
  const bagua__agent_ack_t **acks;        /* s->acks, by node */
  int *members;                           /* indices of s->round.members, by id */
} bagua__agent_index_t;

/* Builds the index of `s`. Returns 0, or -1 when out of memory (the index is then cleared). */
int bagua__agent_index_build(bagua__agent_index_t *x, const bagua__agent_snap_t *s);
void bagua__agent_index_clear(bagua__agent_index_t *x);

/* As bagua__agent_snap_node, _done and _ack, in O(log N). */
const bagua__rdzv_node_t *bagua__agent_index_node(const bagua__agent_index_t *x, const char *id);
const bagua__rdzv_done_t *bagua__agent_index_done(const bagua__agent_index_t *x, const char *id);
const bagua__agent_ack_t *bagua__agent_index_ack(const bagua__agent_index_t *x, const char *id);
/* The index of `id` among the snapshot round's members, or -1 (as bagua__rdzv_round_find). */
int bagua__agent_index_member(const bagua__agent_index_t *x, const char *id);

#endif
