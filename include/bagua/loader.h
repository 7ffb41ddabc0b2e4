/*
 * Bagua-C load-balanced distributed sampler (Bagua's LoadBalancingDistributedSampler and
 * batch sampler, plus shared complexities and mid-epoch rebalancing). docs/loader.md gives
 * the algorithm step by step and where it differs from Bagua.
 *
 * Each epoch the samples are sorted by complexity (plus optional seeded noise), cut into
 * chunks of `world` consecutive samples, the chunk order is shuffled with (seed, epoch), and
 * rank r takes element r of every chunk. Step i of every rank therefore holds samples of
 * near-identical complexity, so no rank waits for a straggler at the gradient allreduce.
 * Every rank computes the same layout from (seed, epoch, world history) without
 * communication.
 *
 * Steps and commits. All ranks consume in lockstep: global step k hands every rank its k-th
 * batch of the epoch. A step counts as consumed only once the program commits it
 * (bagua_sampler_commit(), or the committed count it passes to bagua_sampler_set_world()).
 * When the world changes mid-epoch, set_world() takes the number of steps committed in this
 * epoch; the batches of every later step, including one that was in flight (handed out but
 * not committed) when a node died, are returned to the pool and redistributed over the new
 * world with the same chunking rule. With drop_last = 0 every sample of the epoch is then
 * processed exactly once across any number of world changes, apart from the wrap-around
 * padding of the final chunk (at most world-1 repeated samples, always in the last step of
 * the epoch). With drop_last = 1 there is no padding and at most world-1 samples of the
 * epoch (world of the last layout) are left out.
 *
 * Threading: a sampler is not thread-safe; use it from one thread at a time. Nothing blocks
 * except bagua_sampler_create_shared(), which is a collective over its communicator.
 */
#ifndef BAGUA_LOADER_H
#define BAGUA_LOADER_H

#include <stddef.h>
#include <stdint.h>

#include "bagua/comm.h"
#include "bagua/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bagua_sampler_s bagua_sampler_t;

/*
 * Settings. Initialise with BAGUA_SAMPLER_CONFIG_INIT, then override fields. Invalid values
 * make creation return BAGUA_ERR_INVALID_ARG with a warning naming the field.
 */
typedef struct {
  size_t struct_size;  /* sizeof(bagua_sampler_config_t), for ABI growth */
  int64_t num_samples; /* dataset size N >= 1 */
  /* N finite complexities (e.g. sequence lengths), owned by the caller and copied during
   * creation; never referenced afterwards. bagua_sampler_create_shared() reads it on rank 0
   * only (other ranks may pass NULL). */
  const double *complexities;
  uint64_t seed;      /* the same on every rank; the epoch's generator uses seed + epoch */
  double noise_level; /* Bagua's random_level >= 0: integer noise in
                       * [0, floor((max - min) * noise_level + 1)) is added to each
                       * complexity before sorting; 0 sorts by exact complexity */
  int shuffle;        /* 1: shuffle the chunk order each epoch; 0: chunks in sorted order */
  int64_t batch_size; /* samples per rank per step, >= 1 */
  int drop_last;      /* 1: drop the remainder instead of padding (see above) */
  int rank;           /* this rank, 0 <= rank < world (create_shared takes the comm's) */
  int world;          /* number of ranks >= 1 (create_shared takes the comm's) */
} bagua_sampler_config_t;

#define BAGUA_SAMPLER_CONFIG_INIT \
  { .struct_size = sizeof(bagua_sampler_config_t), .shuffle = 1, .batch_size = 1, .world = 1 }

/* World changes remembered per epoch (the first layout counts as one). */
#define BAGUA_SAMPLER_MAX_LAYOUTS 64

/*
 * Position of the sampler in its epoch, identical on every rank: what an elastic program
 * commits (e.g. with its model state) and what a joining or restarted rank restores. Plain
 * data: it may be copied, broadcast as bytes or stored.
 */
typedef struct {
  uint64_t epoch;
  uint64_t committed_steps; /* steps of this epoch committed so far, over all layouts */
  uint32_t nlayouts;        /* 1 + world changes in this epoch */
  uint32_t reserved;
  struct {
    uint64_t start_step; /* first global step of the epoch served by this layout */
    uint32_t world;
    uint32_t reserved;
  } layouts[BAGUA_SAMPLER_MAX_LAYOUTS];
} bagua_sampler_state_t;

/*
 * Creates a sampler positioned at step 0 of epoch 0. *out is owned by the caller and freed
 * with bagua_sampler_destroy(). Costs O(N log N) (one sort).
 */
BAGUA_EXTERN bagua_status_t bagua_sampler_create(const bagua_sampler_config_t *cfg,
                                                 bagua_sampler_t **out);

/*
 * Collective over `comm`: rank 0's settings (num_samples, complexities, seed, noise_level,
 * shuffle, batch_size, drop_last) are broadcast to every rank, so only rank 0 has to compute
 * the complexities; rank and world come from the communicator. Other ranks' cfg fields other
 * than struct_size are ignored. A broadcast error is returned as is (the communicator is
 * then poisoned, see comm.h).
 */
BAGUA_EXTERN bagua_status_t bagua_sampler_create_shared(bagua_comm_t *comm,
                                                        const bagua_sampler_config_t *cfg,
                                                        bagua_sampler_t **out);

/* Frees the sampler (NULL is accepted). */
BAGUA_EXTERN void bagua_sampler_destroy(bagua_sampler_t *s);

/*
 * Starts `epoch` with the current rank and world: new noise, sort and chunk order; the
 * position goes back to step 0 and the world history of the previous epoch is forgotten.
 * Call it on every rank before each epoch (as Bagua's set_epoch).
 */
BAGUA_EXTERN bagua_status_t bagua_sampler_set_epoch(bagua_sampler_t *s, uint64_t epoch);

/*
 * Hands this rank its batch for the next step: writes at most `max` sample indices to
 * out[0..*n) (owned by the caller). *n is batch_size except in the last step of the epoch,
 * where it may be smaller (but the same on every rank). *n == 0 means the epoch is exhausted.
 * BAGUA_ERR_INVALID_ARG if `max` is smaller than the batch.
 */
BAGUA_EXTERN bagua_status_t bagua_sampler_next_batch(bagua_sampler_t *s, int64_t *out, size_t max,
                                                     size_t *n);

/* Marks every batch handed out so far in this epoch as committed (consumed). */
BAGUA_EXTERN void bagua_sampler_commit(bagua_sampler_t *s);

/*
 * Changes this rank's place in a new world (call it on every rank of the new world, with
 * the same arguments except `rank`). `committed_steps` is the number of steps of the epoch
 * committed by the old world: all samples of later steps, including any batch in flight, go
 * back to the pool; the pool is re-chunked for `world` ranks and the next call to
 * next_batch() serves global step `committed_steps`. If `world` is unchanged only the rank
 * and the position change (the layout stays, so an uncommitted step is simply served again).
 * A rank that was not part of the old world first restores the old world's state (from any
 * old rank, e.g. broadcast by the new rank 0) with bagua_sampler_set_state(s, 0, &state) and
 * then makes the same set_world() call as everyone else. BAGUA_ERR_INVALID_ARG if committed_steps
 * is before the start of the current layout or after its end; BAGUA_ERR_NOT_SUPPORTED after
 * BAGUA_SAMPLER_MAX_LAYOUTS - 1 world changes in one epoch.
 */
BAGUA_EXTERN bagua_status_t bagua_sampler_set_world(bagua_sampler_t *s, int rank, int world,
                                                    uint64_t committed_steps);

/* Copies the position (epoch, committed steps, world history) into *state. */
BAGUA_EXTERN void bagua_sampler_get_state(const bagua_sampler_t *s, bagua_sampler_state_t *state);

/*
 * Restores a position produced by bagua_sampler_get_state() on any rank of the same
 * dataset and settings, as rank `rank` of the state's last world; the next step served is
 * state->committed_steps. Replays the world history (O(N log N + layouts * N)).
 */
BAGUA_EXTERN bagua_status_t bagua_sampler_set_state(bagua_sampler_t *s, int rank,
                                                    const bagua_sampler_state_t *state);

/* Total steps of the current epoch if the world does not change again. */
BAGUA_EXTERN uint64_t bagua_sampler_num_steps(const bagua_sampler_t *s);

#ifdef __cplusplus
}
#endif
#endif
