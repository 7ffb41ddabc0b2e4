/*
 * Communicator settings that may change while a communicator runs (autotuning,
 * ddp/tune/autotune.c): how many of the established TCP streams per peer a message is spread over,
 * the ring's pipeline segment, and the message size from which allreduce takes the ring. Not
 * installed.
 *
 * Both ends of a transfer must split a message the same way, so every rank of a communicator
 * applies the same value at the same point of its call sequence (between two collectives). The
 * setters recurse into the node-level communicators a hierarchical transport made, and splits
 * inherit the values in effect. They are not thread-safe: call them while no collective runs
 * on the communicator.
 */
#ifndef BAGUA_COMM_TUNE_H
#define BAGUA_COMM_TUNE_H

#include <stdint.h>
#include <stddef.h>

#include "bagua/comm.h"

/* The most streams per peer on another node (BAGUA_NET_NSTREAMS or what the communicator was
 * split with), and the count in use; 0 when no peer is on another node (streams do not
 * matter then). */
int bagua__comm_max_streams(const bagua_comm_t *c);
int bagua__comm_streams(const bagua_comm_t *c);
/* Spreads messages to peers on other nodes over the first n streams (1 .. the maximum).
 * BAGUA_ERR_INVALID_ARG with a warning otherwise. */
bagua_status_t bagua__comm_set_streams(bagua_comm_t *c, int n);

/* Whether the pipelined TCP ring serves this communicator's large collectives (there are
 * peers on other nodes and BAGUA_NET_RING_PIPELINE is 1): only then does the segment matter. */
int bagua__comm_uses_ring(const bagua_comm_t *c);
size_t bagua__comm_segment(const bagua_comm_t *c);
/* The ring's pipeline segment: bytes received, reduced and forwarded at a time. Accepted: the
 * bounds of BAGUA_NET_SEGMENT_BYTES. */
bagua_status_t bagua__comm_set_segment(bagua_comm_t *c, size_t bytes);

/* Whether the TCP collectives serve this communicator or the leaders' communicator of
 * its hierarchical transport: only then does the ring threshold matter. */
int bagua__comm_uses_tcp(const bagua_comm_t *c);
size_t bagua__comm_ring_min(const bagua_comm_t *c);
/* Allreduce of at least `bytes` runs the ring, smaller ones recursive doubling (every rank must
 * choose alike). Accepted: the bounds of BAGUA_NET_RING_MIN_BYTES. */
bagua_status_t bagua__comm_set_ring_min(bagua_comm_t *c, size_t bytes);

/* The ring threshold a TCP communicator starts with (comm/calibrate.c), from the median times
 * in ns of recursive doubling (rd) and the ring at the two probe sizes, 4 KiB ([0]) and 256 KiB
 * ([1]): the registry's default (BAGUA_NET_RING_MIN_BYTES) when the fitted lines predict it
 * within 10 % of the faster algorithm at every size from 4 KiB to 256 KiB; else where the
 * lines cross, at most 4 KiB when the ring already won at 4 KiB, and at most 512 KiB (one
 * doubling past the largest size measured). A pure function of the times, so that every rule
 * is tested without a network. */
int64_t bagua__calibrate_choose(const int64_t rd[2], const int64_t ring[2]);

/* How many of the `nstreams` streams per peer a TCP communicator of `size` ranks starts with,
 * from the ring's probe times as above: 1 on a slow link with a short round trip (below
 * 250 Mbit/s by the ring's time per byte, and its 4 KiB probe under 2 ms), where two TCP flows
 * through one bottleneck queue lose more to each other than they gain; `nstreams` otherwise. */
int bagua__calibrate_streams(const int64_t ring[2], int size, int nstreams);

/* Beyond 16 ranks the probes are predicted, not run: from the median times in ns of one ring
 * step (each rank sends to rank + 1 and reduces from rank - 1) at the two probe sizes, the
 * times recursive doubling (ceil(log2 n) steps of the message, two more to fold a world that is
 * not a power of two) and the ring (2(n-1) steps of 1/n of it) would take, for the two rules
 * above. Creation then costs ten steps at any n instead of rings of 2(n-1) steps. */
void bagua__calibrate_model(int n, const int64_t step[2], int64_t rd[2], int64_t ring[2]);

/* bagua_comm_split() whose new communicator opens `nstreams` streams to each peer on another
 * node (<= 0: the parent's count), for a caller that may later use more streams than the
 * parent has (BAGUA_NET_NSTREAMS bounds apply). */
bagua_status_t bagua__comm_split_streams(bagua_comm_t *c, int color, int key, int nstreams,
                                         bagua_comm_t **out);

/*
 * Marks a communicator whose calls the library itself issues in the same order on every rank
 * (the data-parallel layer's private communicators, whose tensors and settings
 * bagua_ddp_ready() has already compared across ranks): its collectives skip the signature
 * agreement (comm/sig.c), which on TCP costs ceil(log2 n) extra round trips per call, and
 * the argument contract alone guards them. Never for a communicator a program calls directly.
 * Local; call it right after creating the communicator, before its first collective.
 */
void bagua__comm_set_calls_agreed(bagua_comm_t *c);

#endif
