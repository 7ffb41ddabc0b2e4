/*
 * The advisor's prediction model (docs/advisor.md): from measurements of the job's network,
 * of one step's compute time and of the model's size, the step time each algorithm would
 * have. A pure function of its inputs, with no process, clock or communicator behind it, so
 * that tests/ddp/test_ddp_advise.c checks it against hand-computed values.
 *
 * Cost of one collective on p participants (latency `lat` per message round, `bw` bytes per
 * second through each participant's link as that collective achieves it, measured for the
 * ring allreduce, the alltoall and the sendrecv ring; the shapes of comm/tcp/coll.c):
 *   allreduce of s bytes   s < T: ceil(log2 p) (lat + s/bw)        (recursive doubling; T: the
 *                                                                   ring threshold)
 *                          else 2(p-1) lat + 2(p-1)/p s/bw          (ring)
 *   alltoall, allgather    (p-1) lat + (p-1)/p s/bw                (s: the whole buffer)
 *   sendrecv               lat + s/bw                               (full duplex)
 *   node reduce + bcast    2 (ceil(log2 r) lat_i + (r-1)/r s/bw_i)  (r ranks per node)
 * Overlap assumption: a centralized algorithm's gradient buckets become ready at a uniform
 * byte rate over the backward window, the communication thread runs them in order, at
 * `overlap` times its speed while backward runs and at full speed after, and only what is
 * still running when backward ends is exposed. Decentralized exchanges start at the end of
 * the previous step and overlap the whole compute time (at `overlap` speed); low-precision
 * decentralized runs after the optimizer and overlaps nothing; async averages in the
 * background and adds nothing to the step.
 */
#ifndef BAGUA_DDP_ADVISOR_MODEL_H
#define BAGUA_DDP_ADVISOR_MODEL_H

#include <stddef.h>

/* The six algorithms, in the order of the registry (and of the advisor's table). */
typedef enum {
  BAGUA__ADV_GRADIENT_ALLREDUCE = 0,
  BAGUA__ADV_BYTEGRAD,
  BAGUA__ADV_DECENTRALIZED,
  BAGUA__ADV_LOW_PRECISION_DECENTRALIZED,
  BAGUA__ADV_QADAM,
  BAGUA__ADV_ASYNC,
  BAGUA__ADV_COUNT
} bagua__adv_algo_t;

/* What was measured (or, in a test, assumed). Times in seconds, sizes in bytes. */
typedef struct {
  int ranks;                  /* n */
  int nodes;                  /* m */
  int ranks_per_node;         /* r: ranks on the fullest node */
  const double *bucket_bytes; /* f32 bytes of each gradient bucket, padding included */
  int nbuckets;
  /* One step without communication (forward, backward, update), measured with communication
   * held so that it is the same figure under every algorithm (advise.c). */
  double compute_s;
  double backward_s; /* the part of compute_s during which gradients become ready */
  /* Among node leaders (all ranks when r == 1): the latency of one message round and the
   * bytes per second through one rank's link. */
  double inter_lat, inter_bw;
  /* The same link as an alltoall and as a ring of sendrecvs achieve it (bytes one rank sends
   * per second); 0: inter_bw. */
  double inter_bw_a2a, inter_bw_p2p;
  /* Within a node (read only when r > 1). */
  double intra_lat, intra_bw;
  /* f32 bytes per second through one MinMaxUInt8 compression or decompression pass;
   * 0: free (not measured). */
  double quant_bw;
  /* How fast communication progresses while the ranks compute, as a fraction of its speed
   * alone (0 .. 1): 1 when every communication thread has a core of its own, 0 when the
   * compute threads take every core (bagua__adv_overlap_efficiency). */
  double overlap;
  /* The communicator's ring threshold (BAGUA_NET_RING_MIN_BYTES): allreduce of fewer bytes
   * takes recursive doubling. 0: the variable's default, 64 KiB (so a caller that means
   * "always the ring" passes 1). */
  double ring_min_bytes;
} bagua__adv_meas_t;

/* The options of the algorithm being predicted (docs/algorithms.md). */
typedef struct {
  bagua__adv_algo_t algo;
  int hierarchical;
  int peer_mode; /* decentralized: 0 all, 1 shift_one, 2 ring (bagua__ddp_peer_mode_t) */
  int comm_interval;
  int sync_interval_ms;
} bagua__adv_opts_t;

typedef struct {
  double step_s;    /* predicted seconds per step: compute_s + exposed_s */
  double compute_s; /* as measured */
  double comm_s;    /* communication (and quantization) work per step, overlapped or not */
  double exposed_s; /* the part of comm_s the step waits for */
  double quant_s;   /* of comm_s: compression passes */
  double bytes;     /* bytes one rank sends per step (one node leader when hierarchical) */
} bagua__adv_pred_t;

/* The algorithm's name ("gradient_allreduce", ...). */
const char *bagua__adv_algo_name(bagua__adv_algo_t a);
/* The options Bagua gives the algorithm by default (hierarchical 1 except for
 * gradient_allreduce and async, peer mode all, interval 1, 500 ms). */
bagua__adv_opts_t bagua__adv_default_opts(bagua__adv_algo_t a);
/* `overlap` for `ranks` ranks sharing `cores` CPUs, each with a compute thread and a
 * communication thread: 1 with a spare core per rank, the spare cores' share below that, 0
 * when the ranks use every core. */
double bagua__adv_overlap_efficiency(int cores, int ranks);
/* The prediction; every field is >= 0 and finite for finite, non-negative inputs. */
bagua__adv_pred_t bagua__adv_predict(const bagua__adv_meas_t *m, const bagua__adv_opts_t *o);

#endif
