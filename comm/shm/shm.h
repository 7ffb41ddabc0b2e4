/*
 * The shared-memory transport for ranks on one node (comm/shm/shm.c). Not installed.
 *
 * Each rank owns two staging slots in one POSIX shared-memory arena; a collective is a series
 * of rounds in which every rank publishes its slot, waits for the ranks it needs and marks the
 * round consumed (shm.c says how).
 *
 * Threading and ownership: the arena belongs to its communicator (c->shm), set up by
 * bagua__shm_setup() and freed by bagua__shm_destroy() when the communicator is destroyed.
 * bagua__shm_abort() only sets the arena's abort flag; bagua__comm_poison() calls it. An exit
 * handler marks the arenas still alive as gone; it only sets flags and acts
 * only in the process that set an arena up.
 *
 * Failure: waits spin briefly, then yield, then sleep in short naps, and poll the abort flags,
 * the timeout and the TCP control stream of every peer: a dead peer's socket is closed by its
 * kernel, so death is noticed within milliseconds even though shared memory itself gives no
 * signal. A failed bagua__shm_setup() leaves the arena to the caller, who destroys the
 * communicator.
 */
#ifndef BAGUA_COMM_SHM_H
#define BAGUA_COMM_SHM_H

#include "../communicator.h"

/* Shared-memory collectives (comm/shm/shm.c). */
extern const bagua__coll_ops_t bagua__shm_ops;
bagua_status_t bagua__shm_setup(bagua_comm_t *c);
void bagua__shm_abort(bagua__shm_t *s);
void bagua__shm_destroy(bagua__shm_t *s);

/* Shared memory: `sig` (which must outlive the call) is published with the next round this
 * rank starts and compared after that round's arrival. bagua__shm_sig_done() ends the call:
 * given the transport's status, it runs a round of its own for a call that moved no data and
 * so started none, forgets `sig`, and returns the call's status. */
void bagua__shm_expect(bagua__shm_t *s, const bagua__coll_sig_t *sig);
bagua_status_t bagua__shm_sig_done(bagua__shm_t *s, bagua_status_t st);

#endif
