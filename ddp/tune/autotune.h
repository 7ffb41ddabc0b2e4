/*
 * Autotuning of a data-parallel context (BAGUA_AUTOTUNE=1, docs/autotune.md): during the first
 * steps, rank 0 measures real steps under other settings that do not change the maths (bucket
 * size, hierarchical reduction, TCP streams per peer, the ring's pipeline segment, the message
 * size from which allreduce takes the ring) and every
 * rank moves to the same setting at the same step boundary. Not installed.
 */
#ifndef BAGUA_DDP_AUTOTUNE_H
#define BAGUA_DDP_AUTOTUNE_H

#include <stdint.h>

#include "bagua/comm.h"
#include "bagua/ddp.h"

/* One point of the search space: the settings a trial runs with. */
typedef struct {
  int64_t bucket_bytes;
  int hierarchical;
  int streams;            /* TCP streams per peer on another node; 0: no such peer */
  int64_t segment_bytes;  /* the TCP ring's pipeline segment */
  int64_t ring_min_bytes; /* allreduce takes the ring from this size (BAGUA_NET_RING_MIN_BYTES) */
} bagua__autotune_point_t;

/* What a test or a program may read back (all ranks hold the same values). */
typedef struct {
  int enabled; /* tuning runs or ran in this context */
  int done;    /* the search ended (or tuning was turned off for this context) */
  int trials;  /* trials measured */
  int changes; /* step boundaries at which a different setting was applied */
  int64_t first_change_step, last_change_step; /* d->steps at the first / last change; -1 */
  bagua__autotune_point_t current;             /* the setting in effect */
} bagua__autotune_info_t;

/*
 * Splits the context's private communicator off `comm` (bagua__ddp_comms_open). First checks
 * that every rank has the same BAGUA_AUTOTUNE (BAGUA_ERR_INVALID_USAGE with a warning on every
 * rank otherwise). With autotuning on, the split opens 4 streams to each peer on another node,
 * so that more streams than BAGUA_NET_NSTREAMS can be tried, and then uses BAGUA_NET_NSTREAMS of
 * them until a trial asks for another count. Otherwise a plain bagua_comm_split(). Collective
 * over `comm`.
 */
bagua_status_t bagua__autotune_comm_split(bagua_ddp_t *d, bagua_comm_t *comm, bagua_comm_t **out);

/* Folded into the layout fingerprint that bagua_ddp_ready() compares across ranks: a rank that
 * tunes and one that does not would call different collectives. 0 when tuning is off. */
uint64_t bagua__autotune_fingerprint(const bagua_ddp_t *d);

/*
 * Called by the training thread at the end of every bagua_ddp_step() (after the next step's
 * work was set up). Counts steps; at the end of a trial (the same step on every rank) it
 * collects the trial's time over all ranks, lets rank 0 pick the next setting, broadcasts it
 * and applies it on every rank (bagua__ddp_reconfigure for bucket size and hierarchical, the
 * communicator setters for streams and segment). Returns BAGUA_OK at once when tuning is off.
 */
bagua_status_t bagua__autotune_step(bagua_ddp_t *d);

/* Frees the tuning state (bagua_ddp_destroy). */
void bagua__autotune_free(bagua_ddp_t *d);

/* The tuning state of `d` (zeros when tuning never ran). */
void bagua__autotune_info(const bagua_ddp_t *d, bagua__autotune_info_t *out);

#endif
