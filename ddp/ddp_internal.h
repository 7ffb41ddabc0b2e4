/*
 * Internal definitions of the data-parallel layer (ddp/): the context, its tensors and
 * buckets, the communication thread, the algorithm hooks and the shared communication ops.
 * Not installed.
 */
#ifndef BAGUA_COMM_DDP_INTERNAL_H
#define BAGUA_COMM_DDP_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "bagua/comm.h"
#include "bagua/ddp.h"
#include "common/algorithms.h"
#include "dev.h"

typedef enum {
  BAGUA__OPT_SGD = 0,
  BAGUA__OPT_ADAM,
  BAGUA__OPT_ADAMW,
  BAGUA__OPT_QADAM,
  BAGUA__OPT_NONE /* the caller updates the weights between bagua_ddp_wait() and _step() */
} bagua__ddp_optim_kind_t;

typedef enum {
  BAGUA__PEER_ALL = 0,
  BAGUA__PEER_SHIFT_ONE,
  BAGUA__PEER_RING
} bagua__ddp_peer_mode_t;

typedef bagua_status_t (*bagua__ddp_job_fn)(bagua_ddp_t *d, void *arg);

/*
 * An algorithm is a set of hooks called at fixed points of a step. Every hook may be NULL.
 * Hooks named "caller" run on the training thread; bucket_op and the jobs an algorithm
 * submits run on the communication thread, one at a time, in submission order.
 */
/*
 * What the core, the configuration and the tuners ask of an algorithm, declared by the
 * algorithm instead of tested by its identity (bits of bagua__ddp_algo_t.caps).
 */
enum {
  BAGUA__ALGO_PEERS = 1u << 0,          /* exchanges weights with peers: comm_interval applies */
  BAGUA__ALGO_PEER_CHOICE = 1u << 1,    /* and peer_mode picks the peers (else always the ring) */
  BAGUA__ALGO_ERROR_FEEDBACK = 1u << 2, /* compresses with optional error feedback */
  BAGUA__ALGO_WARMUP = 1u << 3,         /* runs full-precision steps first (warmup_steps) */
  BAGUA__ALGO_BACKGROUND = 1u << 4,     /* averages on its own thread after the warm-up: never
                                          hierarchical, sync_interval_ms applies, not autotuned */
  BAGUA__ALGO_ALLREDUCE = 1u << 5,      /* its buckets go through allreduce, so the ring threshold
                                          moves them (autotuning tries it) */
  BAGUA__ALGO_OWN_OPTIMIZER = 1u << 6,  /* brings its optimizer (config.optimizer names it) */
  BAGUA__ALGO_LOW_RANK = 1u << 7        /* compresses matrices to rank config.rank (powersgd) */
};

typedef struct {
  const char *name;
  unsigned caps;            /* BAGUA__ALGO_* */
  int default_warmup_steps; /* BAGUA__ALGO_WARMUP: steps when the program sets none */
  /* BAGUA__ALGO_ERROR_FEEDBACK: error_feedback when neither the program nor the environment
   * sets it. */
  int default_error_feedback;
  const char *optimizer; /* BAGUA__ALGO_OWN_OPTIMIZER: the optimizer's name */
  int hierarchical_default;
  /* caller, in bagua_ddp_ready() after the layout and before the thread starts. */
  bagua_status_t (*setup)(bagua_ddp_t *d);
  /* Whether the buckets of the current step carry gradients (NULL: yes when bucket_op is
   * set). Buckets that carry nothing are never handed to the communication thread. */
  int (*grads_communicated)(const bagua_ddp_t *d);
  /* communication thread: the op list of one ready bucket (arg is the bucket). */
  bagua__ddp_job_fn bucket_op;
  /* caller, after all of the step's communication has completed. */
  bagua_status_t (*pre_update)(bagua_ddp_t *d);
  /* caller: the weight update; NULL runs the generic fused optimizer. */
  bagua_status_t (*update)(bagua_ddp_t *d);
  bagua_status_t (*post_update)(bagua_ddp_t *d);
  /* caller, at the end of bagua_ddp_ready() and of every step: work for the next step. */
  bagua_status_t (*next_step)(bagua_ddp_t *d);
  /* caller, in bagua_ddp_destroy() after the communication thread stopped; also after a
   * setup that failed half-way, so it must accept partly initialised state. */
  void (*teardown)(bagua_ddp_t *d);
} bagua__ddp_algo_t;

/* The algorithms (common/algorithms.h, one row each), in the registry's order. */
#define BAGUA__DDP_DECLARE(sep, name) extern const bagua__ddp_algo_t bagua__ddp_##name;
BAGUA__ALGORITHMS(BAGUA__DDP_DECLARE)
#undef BAGUA__DDP_DECLARE
extern const bagua__ddp_algo_t *const bagua__ddp_algorithms[];
extern const int bagua__ddp_nalgorithms;
/* The algorithm named `name` (exactly, or in any case when `any_case`), or NULL. */
const bagua__ddp_algo_t *bagua__ddp_algorithm(const char *name, int any_case);

/* The configuration after validation, with every default resolved. */
typedef struct {
  const bagua__ddp_algo_t *algo;
  size_t bucket_bytes;
  int hierarchical;
  int peer_mode;
  int comm_interval;
  int error_feedback;
  int warmup_steps;
  int sync_interval_ms;
  int rank; /* BAGUA__ALGO_LOW_RANK: the approximation rank; 0 otherwise */
  int optimizer;
  double lr, momentum, dampening, weight_decay, beta1, beta2, eps;
  int nesterov;
  /* 1: buckets are communicated during the backward pass; 0: held until its end (see
   * BAGUA_OVERLAP); -1 until bagua__ddp_comms_open() resolves it against the machine's CPUs. */
  int overlap;
  const bagua__ddp_dev_t *dev; /* where the flat buffers live (dev.h) */
  int cuda_device;
  void *cuda_stream;
  /* algorithm "auto" (ddp/tune/advise.c): bit i allows bagua__adv_algo_t i; 0 when the program or
   * BAGUA_ALGORITHM named the algorithm, which is then never switched. */
  unsigned auto_allow;
} bagua__ddp_settings_t;

typedef struct {
  char *name;
  float *user_param, *user_grad;
  size_t count;
  size_t rows;   /* matrix view of rows x count/rows (bagua_ddp_register_shape); 0: a vector */
  size_t offset; /* element offset in the flat buffers */
  int bucket;
  int ready; /* marked in the current step */
} bagua__ddp_tensor_t;

typedef struct {
  size_t offset; /* element offset in the flat buffers */
  size_t count;  /* elements, padding included */
  size_t used;   /* elements covered by tensors; [used, count) is zero padding */
  int first, ntensors;
  int pending; /* tensors of this bucket not yet ready in the current step */
} bagua__ddp_bucket_t;

typedef struct {
  bagua__ddp_job_fn fn;
  void *arg;
  double t_start, t_end; /* monotonic seconds, written by the communication thread */
} bagua__ddp_job_t;

/* The communication thread and its FIFO of jobs. */
typedef struct {
  pthread_t thread;
  int started;
  pthread_mutex_t mu;
  pthread_cond_t cv_work, cv_done;
  bagua__ddp_job_t *jobs; /* ring of `cap` entries, indexed by sequence number % cap */
  size_t cap;
  uint64_t submitted, completed; /* under mu */
  /* Jobs up to this sequence number may run (under mu): all submitted ones when the context
   * overlaps, else only those released by bagua__ddp_release() at the end of the backward. */
  uint64_t released;
  int hold; /* !overlap or tuner_hold: submissions wait for bagua__ddp_release() */
  /* A tuner holds communication whatever overlap says (bagua__ddp_sched_hold); it outlives a
   * restart of the thread, so a rebuild keeps holding. */
  int tuner_hold;
  int stop; /* under mu */
} bagua__ddp_sched_t;

/* The phase check (phase.c): when the program numbers its steps, every step that communicates
 * compares its number across the ranks before any of its data moves. */
typedef struct {
  /* The program numbered its steps (bagua_ddp_set_step() before bagua_ddp_ready()); part of
   * the layout fingerprint, so every rank checks or none does. */
  int numbered;
  int64_t number; /* the current step's number: set by the program, +1 at every step's end */
  /* Training thread: the current step's check is still to be submitted (set by reset_step when
   * numbered, cleared by bagua__ddp_phase_submit). */
  int armed;
  int64_t sent; /* the number the last check carried (written before its submission) */
  /* Written by the communication thread when a check fails, before `failed` is set: the
   * lowest and highest numbers across the ranks. */
  int64_t lo, hi;
  _Atomic int failed;
  int told;               /* training thread: the failure was reported (once) */
  _Atomic uint64_t bytes; /* bytes the checks sent, left out of the statistics */
} bagua__ddp_phase_t;

/* The largest step number bagua_ddp_set_step() accepts (its negation must not overflow, and
 * the steps after it must not either). */
#define BAGUA__DDP_MAX_STEP ((int64_t)1 << 62)

/* What an elastic context (include/bagua/elastic.h) needs of a bagua_ddp_t (ddp/elastic.c):
 * the last commit in registration order, so that it survives a change of the flat layout. */
typedef struct {
  struct bagua_elastic_s *e; /* attached to, or NULL */
  float *params, *m, *v;     /* `nparams` elements each (m, v when the optimizer has them) */
  size_t nparams;
  int64_t steps;
  double lr;
  int restore_pending; /* bagua_elastic_restore() was called since the last commit */
} bagua__ddp_elastic_t;

struct bagua_ddp_s {
  bagua__ddp_settings_t s;
  void *dev_state; /* the device's own resources (dev_cuda.c: NCCL comms, streams) */
  /* Guards the communicator pointers against bagua_ddp_abort() from other threads while an
   * elastic rebuild replaces them. */
  pthread_mutex_t comm_mu;
  bagua_comm_t *comm;          /* private split of the caller's communicator */
  bagua_comm_t *intra, *inter; /* node split of `comm` when hierarchical (inter on leaders) */
  bagua_comm_t *async_comm;    /* async: the averaging thread's own communicator */
  int rank, size, node_count;
  /* Ranks of the job on this machine (same host name, so emulated nodes on one host count
   * together) and the CPUs this process may use, as bagua_ddp_create() found them. */
  int machine_ranks, cpus;
  int overlap_req; /* BAGUA_OVERLAP as set (-1: auto); s.overlap is what runs */

  bagua__ddp_tensor_t *tensors;
  int ntensors, tensors_cap;
  bagua__ddp_bucket_t *buckets;
  int nbuckets;
  int next_bucket; /* first bucket not yet handed over in the current step */
  int is_ready;
  int released; /* bagua_ddp_release_params(): no registered `param` array is used any more */
  int waited;   /* bagua_ddp_wait() ran in this step */
  double t_entry, t_waited; /* when this step's end began, and how long it waited */
  /* How long this step spent in the algorithm's own pre- and post-update work (a weight
   * exchange, passes over the model that other algorithms do not make): the advisor leaves it
   * out of the compute time, which must not depend on the algorithm that measured it. */
  double t_algo;
  int setup_called; /* the algorithm's setup ran (its teardown must then run too) */

  float *params, *grads; /* flat storage, `total` elements each, 64-byte aligned */
  size_t total, max_bucket;
  float *opt_m, *opt_v; /* optimizer state (momentum / exp_avg, exp_avg_sq) or NULL */
  int64_t steps;        /* completed steps */
  double lr;            /* current learning rate */
  bagua__ddp_phase_t phase;

  _Atomic int error;            /* first error of any thread, sticky */
  _Atomic int aborted;          /* bagua_ddp_abort() was called */
  pthread_mutex_t *weight_lock; /* async: serialises local updates and averaging */
  void *algo_state;
  bagua__ddp_sched_t sched;

  /* statistics (training thread) */
  uint64_t iter_first_job; /* first job sequence number of the current step */
  double compute_start;    /* end of the previous step (or of ready) */
  double first_ready;
  uint64_t bytes_mark, bytes_start;
  bagua_ddp_stats_t st;
  _Atomic uint64_t async_rounds;
  /* Progress reports (progress.c): the mapped BAGUA_PROGRESS_FILE record (NULL: off), the
   * program's stated total steps (0: unknown) and the samples it counted. */
  struct bagua__progress_file_s *progress;
  int64_t total_steps, samples;
  bagua__ddp_elastic_t el;
  /* Bumped by every bagua__ddp_reconfigure() that re-laid the flat storage: views obtained
   * from bagua_ddp_param()/bagua_ddp_grad() before it point into freed memory. */
  int64_t layout_version;
  /* The advisor's measurements and choice (ddp/tune/advise.c); NULL when it is off. */
  struct bagua__ddp_advise_s *advise;
  /* Autotuning state (ddp/tune/autotune.c), created at the first step when BAGUA_AUTOTUNE=1. */
  struct bagua__autotune_s *autotune;
};

/* ---- progress reports (progress.c); training thread only ---- */
/* Maps BAGUA_PROGRESS_FILE when it is set (once; a failure is reported and leaves it off). */
void bagua__ddp_progress_open(bagua_ddp_t *d);
/* Records the step just completed: a few stores into the mapping, no system call. */
void bagua__ddp_progress_update(bagua_ddp_t *d);
void bagua__ddp_progress_close(bagua_ddp_t *d);

/* ---- helpers (ddp.c) ---- */
/* Records `st` as the context's error if it is the first; returns `st`. */
bagua_status_t bagua__ddp_fail(bagua_ddp_t *d, bagua_status_t st);
/* Sum of bytes sent through all of the context's communicators. */
uint64_t bagua__ddp_bytes_sent(const bagua_ddp_t *d);
/* Writes the flat weights into every registered `param` array (under the weight lock). */
bagua_status_t bagua__ddp_copy_back(bagua_ddp_t *d);
/* Zeroed allocation of n floats (n may be 0) on the context's device; free with
 * bagua__ddp_free(). */
float *bagua__ddp_alloc_floats(bagua_ddp_t *d, size_t n);
void bagua__ddp_free(bagua_ddp_t *d, void *p);

/* Splits the private communicators off `comm` (collective over it). */
bagua_status_t bagua__ddp_comms_open(bagua_ddp_t *d, bagua_comm_t *comm);
/* Aborts them (any thread) / destroys them (training thread). */
void bagua__ddp_comms_abort(bagua_ddp_t *d);
void bagua__ddp_comms_close(bagua_ddp_t *d);
/* What a rebuild carries into the new flat layout: host arrays in registration order (no
 * padding), each NULL when there is nothing to carry. */
typedef struct {
  const float *params; /* NULL: read the weights from the registered `param` arrays */
  const float *m, *v;  /* optimizer state; NULL: zero */
  /* 1: every rank keeps its own weights, optimizer state, step count and learning rate
   * (a reconfiguration); 0: rank 0's are broadcast to all (ready, elastic rebuild). */
  int local;
} bagua__ddp_carry_t;

/*
 * The collective part of bagua_ddp_ready(): layout, allocation, the weights and optimizer
 * state of `carry` (NULL: the registered `param` arrays and zero state), rank 0's copy of
 * them, its step count and learning rate to every rank unless carry->local, the algorithm's
 * setup and the communication thread. bagua__ddp_unbuild() undoes it (joining the threads) but
 * keeps the tensors and communicators.
 */
bagua_status_t bagua__ddp_build(bagua_ddp_t *d, const bagua__ddp_carry_t *carry);
void bagua__ddp_unbuild(bagua_ddp_t *d);
/* Clears the per-step state after a build and after each step (build.c). */
void bagua__ddp_reset_step(bagua_ddp_t *d);

/* ---- reconfiguration at a step boundary (reconfigure.c) ---- */
/*
 * Moves a ready context to the settings `next` between two steps: another algorithm, bucket
 * size, hierarchical flag or algorithm option. Each rank keeps its own weights, optimizer
 * state, step count and learning rate (nothing is broadcast, so the maths of the run is not
 * changed by the move itself); the flat storage is re-laid, so d->layout_version is bumped
 * and views from bagua_ddp_param()/bagua_ddp_grad() must be fetched again. Node-level and
 * averaging communicators are split off d->comm or destroyed as `next` needs them.
 *
 * Collective over d->comm: the training thread of every rank calls it after the same
 * bagua_ddp_step() with identical `next` (the caller broadcasts its decision first), before
 * any gradient of the next step is marked ready. `next` must keep the optimizer, device and
 * CUDA settings (BAGUA_ERR_INVALID_USAGE otherwise, nothing changed), and neither the current
 * nor the next algorithm may be async past its warm-up (its ranks are not at one step).
 * Any other failure is the context's sticky error.
 */
bagua_status_t bagua__ddp_reconfigure(bagua_ddp_t *d, const bagua__ddp_settings_t *next);

/* ---- elasticity (elastic.c) ---- */
/* Copies flat device storage `flat` into host memory `packed` (registration order, no padding),
 * and back, waiting for the transfer (COMPUTE lane). NULL on either side does nothing. */
bagua_status_t bagua__ddp_pack(bagua_ddp_t *d, const float *flat, float *packed);
bagua_status_t bagua__ddp_unpack(bagua_ddp_t *d, const float *packed, float *flat);
/* Leaves the elastic context, if attached (bagua_ddp_destroy). */
void bagua__ddp_elastic_detach(bagua_ddp_t *d);

/* ---- configuration (config.c) ---- */
bagua_status_t bagua__ddp_settings(const bagua_ddp_config_t *cfg, bagua__ddp_settings_t *out);

/* ---- layout (bucket.c) ---- */
/*
 * Greedy partition in registration order: a bucket takes tensors until it holds at least
 * `bucket_bytes`; its element count is then rounded up to a multiple of `align`. Fills every
 * tensor's offset and bucket and returns the bucket array (caller frees), the bucket count,
 * the total elements and the largest bucket.
 */
bagua_status_t bagua__ddp_partition(bagua__ddp_tensor_t *t, int nt, size_t bucket_bytes,
                                    size_t align, bagua__ddp_bucket_t **buckets, int *nbuckets,
                                    size_t *total, size_t *max_bucket);
/* Layout fingerprint: equal on every rank that registered the same tensors and settings. */
uint64_t bagua__ddp_layout_hash(const bagua_ddp_t *d);

/* ---- communication thread (scheduler.c) ---- */
bagua_status_t bagua__ddp_sched_start(bagua_ddp_t *d, size_t cap);
/* Appends a job (training thread only). Never blocks: the ring holds a whole step's jobs. The
 * first job of a step is preceded by the phase check (phase.c) when d->phase.armed. */
bagua_status_t bagua__ddp_submit(bagua_ddp_t *d, bagua__ddp_job_fn fn, void *arg);
/* A tuner's hold (the advisor's compute probe): while `on`, every job waits for
 * bagua__ddp_release() at the end of the backward pass whatever BAGUA_OVERLAP says, so that no
 * communication runs while the ranks compute, and background averaging (async) does not start.
 * Off, the context's own setting returns and the jobs held so far are released. Training
 * thread; may be called before the communication thread starts. */
void bagua__ddp_sched_hold(bagua_ddp_t *d, int on);
/* Lets every submitted job run (training thread; a no-op when the context overlaps). */
void bagua__ddp_release(bagua_ddp_t *d);
/* Releases and waits until every submitted job has run; returns the context's error, if any
 * (training thread). */
bagua_status_t bagua__ddp_wait(bagua_ddp_t *d);
/* Runs the remaining jobs (they fail fast once the context has an error), then joins. */
void bagua__ddp_sched_stop(bagua_ddp_t *d);
/* Busy and overlapped seconds of jobs [first, completed), overlap counted in [from, to]. */
void bagua__ddp_sched_times(bagua_ddp_t *d, uint64_t first, double from, double to, double *busy,
                            double *overlap);

/* ---- the phase check (phase.c; numbering: bagua_ddp_set_step in include/bagua/ddp.h) ---- */
/* The check, as a communication-thread job: BAGUA_ERR_PROTOCOL when the ranks' numbers for
 * the step (d->phase.sent) differ. */
bagua_status_t bagua__ddp_phase_job(bagua_ddp_t *d, void *arg);
/* Submits the current step's check with its number now, unless it was submitted already
 * (scheduler.c; training thread). bagua__ddp_submit() calls it before every job, so the check
 * precedes the step's first; bagua_ddp_set_step() calls it early. */
bagua_status_t bagua__ddp_phase_submit(bagua_ddp_t *d);
/* Training thread, on an error it is about to return: when it is a failed phase check, warns
 * once, naming the step numbers (so that bagua_last_error() explains the status). Returns st. */
bagua_status_t bagua__ddp_phase_explain(bagua_ddp_t *d, bagua_status_t st);

/* ---- optimizer over the flat buffers (optim.c) ---- */
bagua_status_t bagua__ddp_optim_setup(bagua_ddp_t *d);
/* The generic fused optimizer: one kernel call over all buckets. */
bagua_status_t bagua__ddp_optim_step(bagua_ddp_t *d);
/* QAdam after warm-up: p -= lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps), v frozen. */
void bagua__ddp_qadam_frozen_step(float *p, const float *m, const float *v, size_t n, double lr,
                                  double beta1, double beta2, double eps, int64_t step,
                                  int64_t v_step);

/* ---- algorithms/decentralized.c ---- */
/* shift_one's peer of `rank` among n at exchange `step` (itself: no exchange this step). */
int bagua__ddp_shift_one_peer(int rank, int n, int64_t step);

/* ---- algorithms/powersgd.c ---- */
/* The seed of tensor `tensor`'s initial Q (bagua__randn_f32, r x cols: Q transposed), the
 * same on every rank; tests rebuild the initial Q from it. */
uint64_t bagua__ddp_powersgd_seed(int tensor);

/* ---- communication ops shared by the algorithms (ops.c); communication thread ---- */
/* Averages buf over all ranks: flat allreduce, or node reduce + leaders + node broadcast. */
bagua_status_t bagua__ddp_allreduce_avg(bagua_ddp_t *d, float *buf, size_t n, int hier);
/* Node-level helpers: sum (avg=0) or average (avg=1) onto the node leader, and broadcast. */
bagua_status_t bagua__ddp_node_reduce(bagua_ddp_t *d, float *buf, size_t n, int avg);
bagua_status_t bagua__ddp_node_bcast(bagua_ddp_t *d, float *buf, size_t n);

/* Scratch and error-feedback state of the compressed (MinMaxUInt8) centralized op. */
typedef struct {
  int hier;
  bagua_comm_t *comm; /* the communicator the chunks are exchanged on (NULL: none here) */
  int n;              /* its size: the number of chunks */
  size_t region;      /* bytes of one compressed chunk of the largest bucket */
  uint8_t *cbuf;      /* n regions: this rank's compressed chunks, then the gathered results */
  uint8_t *rbuf;      /* n regions: the chunks received by the alltoall */
  float *acc;         /* one chunk of the largest bucket */
  float *worker_res;  /* error feedback: total elements, or NULL */
  float *server_res;  /* error feedback: total / n elements, or NULL */
} bagua__ddp_u8_t;

bagua_status_t bagua__ddp_u8_init(bagua_ddp_t *d, int hier, int error_feedback, bagua__ddp_u8_t *u);
void bagua__ddp_u8_free(bagua_ddp_t *d, bagua__ddp_u8_t *u);
/*
 * ByteGrad's op on buf[0, n) (n divisible by the number of chunks), which lies at element
 * offset `off` of the flat buffers (for the residuals): compress in chunks, alltoall,
 * decompress and average own chunk, compress it, allgather, decompress.
 */
bagua_status_t bagua__ddp_u8_allreduce(bagua_ddp_t *d, bagua__ddp_u8_t *u, float *buf, size_t off,
                                       size_t n);

#endif
