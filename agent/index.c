/* Lookups by node id into a snapshot (index.h): sorted arrays of pointers, binary search. */
#include "index.h"

#include <stdlib.h>
#include <string.h>

/* The comparisons read the id at the start of each element (by pointer). */
static int by_node_id(const void *a, const void *b) {
  return strcmp((*(const bagua__rdzv_node_t *const *)a)->id,
                (*(const bagua__rdzv_node_t *const *)b)->id);
}
static int by_done_node(const void *a, const void *b) {
  return strcmp((*(const bagua__agent_done_entry_t *const *)a)->node,
                (*(const bagua__agent_done_entry_t *const *)b)->node);
}
static int by_ack_node(const void *a, const void *b) {
  return strcmp((*(const bagua__agent_ack_t *const *)a)->node,
                (*(const bagua__agent_ack_t *const *)b)->node);
}

/* qsort_r is not in C11: the members are sorted through a pointer array instead. */
typedef struct {
  const char *id;
  int i;
} member_key_t;
static int by_member(const void *a, const void *b) {
  return strcmp(((const member_key_t *)a)->id, ((const member_key_t *)b)->id);
}

void bagua__agent_index_clear(bagua__agent_index_t *x) {
  free(x->nodes);
  free(x->done);
  free(x->acks);
  free(x->members);
  memset(x, 0, sizeof(*x));
}

int bagua__agent_index_build(bagua__agent_index_t *x, const bagua__agent_snap_t *s) {
  memset(x, 0, sizeof(*x));
  x->s = s;
  int nm = s->has_round ? s->round.nmembers : 0;
  x->nodes = malloc((s->nnodes ? s->nnodes : 1) * sizeof(*x->nodes));
  x->done = malloc((s->ndone ? s->ndone : 1) * sizeof(*x->done));
  x->acks = malloc((s->nacks ? s->nacks : 1) * sizeof(*x->acks));
  x->members = malloc((size_t)(nm ? nm : 1) * sizeof(*x->members));
  member_key_t *mk = malloc((size_t)(nm ? nm : 1) * sizeof(*mk));
  if (!x->nodes || !x->done || !x->acks || !x->members || !mk) {
    free(mk);
    bagua__agent_index_clear(x);
    return -1;
  }
  for (size_t i = 0; i < s->nnodes; i++) x->nodes[i] = &s->nodes[i];
  for (size_t i = 0; i < s->ndone; i++) x->done[i] = &s->done[i];
  for (size_t i = 0; i < s->nacks; i++) x->acks[i] = &s->acks[i];
  for (int i = 0; i < nm; i++) mk[i] = (member_key_t){s->round.members[i].id, i};
  qsort(x->nodes, s->nnodes, sizeof(*x->nodes), by_node_id);
  qsort(x->done, s->ndone, sizeof(*x->done), by_done_node);
  qsort(x->acks, s->nacks, sizeof(*x->acks), by_ack_node);
  qsort(mk, (size_t)nm, sizeof(*mk), by_member);
  for (int i = 0; i < nm; i++) x->members[i] = mk[i].i;
  free(mk);
  return 0;
}

/* The first of n sorted elements whose id (read by `id_of`) is `id`, or -1. With several equal
 * ids (a snapshot made by hand), the first one in the snapshot's own order is not promised, so
 * the callers keep to snapshots whose ids are unique, as the schema's keys make them. */
#define FIND(arr, n, field, id)                \
  do {                                         \
    size_t lo = 0, hi = (n);                   \
    while (lo < hi) {                          \
      size_t mid = lo + (hi - lo) / 2;         \
      int c = strcmp((arr)[mid]->field, (id)); \
      if (c == 0) return (arr)[mid];           \
      if (c < 0)                               \
        lo = mid + 1;                          \
      else                                     \
        hi = mid;                              \
    }                                          \
    return NULL;                               \
  } while (0)

const bagua__rdzv_node_t *bagua__agent_index_node(const bagua__agent_index_t *x, const char *id) {
  FIND(x->nodes, x->s->nnodes, id, id);
}

const bagua__rdzv_done_t *bagua__agent_index_done(const bagua__agent_index_t *x, const char *id) {
  size_t lo = 0, hi = x->s->ndone;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = strcmp(x->done[mid]->node, id);
    if (c == 0) return &x->done[mid]->done;
    if (c < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return NULL;
}

const bagua__agent_ack_t *bagua__agent_index_ack(const bagua__agent_index_t *x, const char *id) {
  FIND(x->acks, x->s->nacks, node, id);
}

int bagua__agent_index_member(const bagua__agent_index_t *x, const char *id) {
  if (!x->s->has_round) return -1;
  const bagua__rdzv_member_t *m = x->s->round.members;
  size_t lo = 0, hi = (size_t)x->s->round.nmembers;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = strcmp(m[x->members[mid]].id, id);
    if (c == 0) return x->members[mid];
    if (c < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return -1;
}
