/*
 * Bagua-C data-parallel training layer: register a model's tensors, fuse them into buckets,
 * overlap communication with the backward pass on a communication thread, and run one of
 * Bagua's six algorithms or PowerSGD, chosen by name (docs/algorithms.md gives each one's
 * maths).
 *
 * A training loop looks like this:
 *
 *   bagua_ddp_config_t cfg = BAGUA_DDP_CONFIG_INIT;
 *   cfg.algorithm = "bytegrad";
 *   cfg.lr = 0.05;
 *   bagua_ddp_t *ddp;
 *   bagua_ddp_create(comm, &cfg, &ddp);
 *   for (each tensor, LAST layer first)                      (backward order)
 *     bagua_ddp_register(ddp, name, param, grad, count);
 *   bagua_ddp_ready(ddp);                                   (all ranks now hold rank 0's weights)
 *   for (each step) {
 *     forward(param); zero grads;
 *     for (each layer, last first) { backward into grad; bagua_ddp_grad_ready(ddp, index); }
 *     bagua_ddp_step(ddp);                                  (weights in `param` are updated)
 *   }
 *   bagua_ddp_destroy(ddp);
 *
 * Storage. The library owns one flat, bucket-ordered copy of all parameters and gradients
 * (plus the optimizer state), allocated by bagua_ddp_ready(). The model may keep its own
 * arrays (copy mode): `param` is read once by bagua_ddp_ready() and rewritten with the current
 * weights at the end of bagua_ddp_ready() and of every bagua_ddp_step(); `grad` is copied into
 * the flat buffer by bagua_ddp_grad_ready(). Or it may work in the flat storage (zero-copy):
 * register with grad = NULL and write gradients straight into bagua_ddp_grad(); read weights
 * from bagua_ddp_param(). Both may be mixed per tensor. The caller never writes the weights
 * except through its own `param` arrays before bagua_ddp_ready().
 *
 * Threading. One thread (the training thread) calls every function of a bagua_ddp_t, except
 * bagua_ddp_abort(), which any thread may call at any time, and bagua_ddp_stats(), which the
 * training thread may call at any time. Inside, one communication thread per bagua_ddp_t runs
 * the buckets' communication in bucket order (and the async algorithm adds one averaging
 * thread). The bagua_ddp_t uses its own communicators, split from the one passed to
 * bagua_ddp_create(), so the caller may go on using that one from the training thread.
 *
 * Collective calls. bagua_ddp_create(), bagua_ddp_ready(), bagua_ddp_step() (for every
 * algorithm except async after its warm-up), bagua_ddp_async_pause(),
 * bagua_ddp_async_resume() and bagua_ddp_destroy() must be called by every rank, in the same
 * order, with the same tensors registered in the same order and the same configuration.
 * bagua_ddp_ready() checks the last two and fails with BAGUA_ERR_INVALID_USAGE on a mismatch.
 *
 * Failures. No call waits forever: every wait ends when the communicator reports progress,
 * an error (a dead peer, BAGUA_ERR_REMOTE; no progress for BAGUA_COMM_TIMEOUT_MS,
 * BAGUA_ERR_TIMEOUT) or bagua_ddp_abort(). An error met by the communication or averaging
 * thread is returned by the training thread's next bagua_ddp_grad_ready() or bagua_ddp_step()
 * and by every later call; the bagua_ddp_t can then only be destroyed.
 */
#ifndef BAGUA_DDP_H
#define BAGUA_DDP_H

#include <stddef.h>
#include <stdint.h>

#include "bagua/comm.h"
#include "bagua/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bagua_ddp_s bagua_ddp_t;

/*
 * Settings. Initialise with BAGUA_DDP_CONFIG_INIT, then override fields. A field left at its
 * "unset" value (the value BAGUA_DDP_CONFIG_INIT gives it) takes the value of the BAGUA_*
 * variable named here when the environment sets it (bagua-launch exports its INI file's
 * [algorithm] section as these variables), else the default named here. A field the program
 * sets wins over the environment: precedence is program > environment > INI > default
 * (docs/configuration.md). A variable whose option does not apply to the algorithm that runs
 * (BAGUA_SYNC_INTERVAL_MS with bytegrad) is ignored. Unknown names and out-of-range values
 * make bagua_ddp_create() return BAGUA_ERR_INVALID_ARG with a warning (bagua_last_error())
 * that names the field and what it accepts; so does any BAGUA_* variable with a bad value,
 * named with its value and what it accepts.
 */
typedef struct {
  size_t struct_size; /* sizeof(bagua_ddp_config_t), for ABI growth */
  /* "gradient_allreduce", "bytegrad", "decentralized", "low_precision_decentralized", "qadam",
   * "async" or "powersgd"; NULL: BAGUA_ALGORITHM, else "gradient_allreduce". bagua_ddp_algorithm()
   * tells which one runs. "auto" (or BAGUA_ALGORITHM=auto): start with the safest algorithm of
   * BAGUA_AUTO_ALLOW, measure the network and the first BAGUA_ADVISE_STEPS steps, then move
   * every rank at the end of one bagua_ddp_step() to the predicted fastest allowed one
   * (docs/advisor.md); the flat storage is then re-laid (bagua_ddp_layout_version()). */
  const char *algorithm;
  /* Bytes per bucket; 0: BAGUA_BUCKET_SIZE (10 MiB). Tensors are fused greedily in
   * registration order and a bucket closes once it holds at least this many bytes. */
  int64_t bucket_bytes;
  /* -1: BAGUA_HIERARCHICAL, else the algorithm's default as in Bagua (0 for
   * gradient_allreduce, async and powersgd, 1 for the others); 1: reduce within each node, run the
   * algorithm among node leaders, broadcast within each node; 0: run it among all ranks. */
  int hierarchical;
  /* decentralized: "all", "shift_one" (one peer per step, any number of ranks) or "ring"
   * (both ring neighbours); NULL: BAGUA_PEER_SELECTION_MODE, else "all".
   * low_precision_decentralized accepts only "ring" (NULL). */
  const char *peer_mode;
  /* decentralized and low_precision_decentralized: communicate every this many steps (>= 1);
   * -1: BAGUA_COMMUNICATION_INTERVAL, else 1. */
  int comm_interval;
  /* bytegrad, qadam and powersgd: 1 carries each compression's error into the next step, 0
   * does not; -1: BAGUA_ERROR_FEEDBACK, else 1 for powersgd (as torch's PowerSGD hook) and 0
   * for the others. */
  int error_feedback;
  /* qadam: steps of plain allreduce + Adam before compressed momentum; async: steps of
   * gradient allreduce before background averaging starts; powersgd: steps of full-precision
   * gradient allreduce before compression (torch's start_powerSGD_iter). -1:
   * BAGUA_WARMUP_STEPS, else 100 for qadam, 0 for async and 10 for powersgd. */
  int warmup_steps;
  /* async: milliseconds between averaging rounds of the background thread (1 .. 3600000);
   * -1: BAGUA_SYNC_INTERVAL_MS, else 500. */
  int sync_interval_ms;
  /* Optimizer run by bagua_ddp_step() over the flat buffers: "sgd" (NULL), "adam", "adamw",
   * "none" (the caller's own, see bagua_ddp_wait());
   * the qadam algorithm uses its own optimizer "qadam" (NULL selects it). */
  const char *optimizer;
  double lr;           /* < 0: 0.01 for sgd, 0.001 for adam, adamw and qadam */
  double momentum;     /* sgd */
  double dampening;    /* sgd */
  int nesterov;        /* sgd; needs momentum > 0 and dampening 0 (as torch.optim.SGD) */
  double weight_decay; /* < 0: 0.01 for adamw, 0 otherwise (L2 for sgd/adam/qadam) */
  double beta1;        /* adam, adamw, qadam */
  double beta2;
  double eps;
  /*
   * Where the flat storage lives and the work runs: "cpu" (NULL) or "cuda". With "cuda" the
   * flat parameters, gradients and optimizer state are device memory, the collectives go
   * through NCCL communicators created over `comm` (include/bagua/nccl.h), and compression and
   * the optimizer run as CUDA kernels; every algorithm is available. The registered `param`
   * and `grad` pointers, bagua_ddp_param() and bagua_ddp_grad() are then device pointers.
   * Needs a libbagua built with CUDA and NCCL (otherwise bagua_ddp_create() returns
   * BAGUA_ERR_NOT_SUPPORTED) and a visible device (otherwise BAGUA_ERR_CUDA on every rank).
   * bagua_ddp_create() makes the chosen device current on the calling thread, which must stay
   * the training thread. Statistics: bytes_* count only the CPU communicators' traffic (the
   * layout checks), and comm_s_* the time spent enqueuing GPU work, not running it.
   */
  const char *device;
  /* "cuda": the CUDA device to use; -1: the local rank modulo the visible devices. */
  int cuda_device;
  /*
   * "cuda": the caller's compute stream (a cudaStream_t; NULL: the legacy default stream).
   * bagua_ddp_grad_ready() records an event on it, and the bucket's communication, which runs
   * on the library's own stream, waits for that event, so a gradient may be marked ready as
   * soon as the kernels producing it are enqueued. bagua_ddp_ready() and bagua_ddp_step()
   * enqueue their copies and the optimizer on this stream and return without waiting for it:
   * work the caller enqueues on it afterwards sees the updated weights. The stream must stay
   * valid until bagua_ddp_destroy().
   */
  void *cuda_stream;
  /* powersgd: the rank r of each gradient matrix's approximation P Q^T (1 .. 1024; a matrix
   * of fewer rows or columns uses that many); -1: BAGUA_POWERSGD_RANK, else 4. A config
   * whose struct_size ends before this field (an older header) reads it as -1. */
  int rank;
} bagua_ddp_config_t;

/* The defaults, field by field; a field not named here starts at 0 or NULL. C++ callers (no
 * designated initialisers before C++20) use bagua_ddp_config_init() instead. The fields
 * comm_interval, error_feedback and sync_interval_ms start "unset" (-1) so that the
 * environment can fill them; a program built against an older header, where they started at
 * 1, 0 and 500, passes those as set by the program and behaves exactly as before. */
#define BAGUA_DDP_CONFIG_INIT                                                                      \
  {                                                                                                \
    .struct_size = sizeof(bagua_ddp_config_t), .hierarchical = -1, .comm_interval = -1,            \
    .error_feedback = -1, .warmup_steps = -1, .sync_interval_ms = -1, .lr = -1.0,                  \
    .weight_decay = -1.0, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .cuda_device = -1, .rank = -1 \
  }

/* Fills *cfg with the defaults of BAGUA_DDP_CONFIG_INIT (for callers that cannot use the
 * macro, such as C++ or a language binding). */
BAGUA_EXTERN void bagua_ddp_config_init(bagua_ddp_config_t *cfg);

/* Counters of one rank. Set struct_size = sizeof(bagua_ddp_stats_t) before the call. */
typedef struct {
  size_t struct_size;
  int64_t steps;            /* bagua_ddp_step() calls completed */
  int num_tensors;          /* registered tensors */
  int num_buckets;          /* buckets after bagua_ddp_ready() */
  size_t flat_elems;        /* elements of the flat storage, bucket padding included */
  uint64_t bytes_last_step; /* bytes this rank sent for the last step (all its communicators) */
  uint64_t bytes_total;     /* bytes sent since bagua_ddp_ready() started */
  double comm_s_last_step;  /* seconds the communication thread worked on the last step */
  double comm_s_total;
  /* Fraction of the communication thread's work done while the caller was still computing
   * (between the previous bagua_ddp_step()'s return and this one's entry); 0 without work. */
  double overlap_last_step;
  double overlap_total;
  double wait_s_last_step; /* seconds bagua_ddp_step() blocked on communication */
  uint64_t async_rounds;   /* averaging rounds completed by the async background thread */
} bagua_ddp_stats_t;

/*
 * Creates a data-parallel context over the ranks of `comm`. Collective over `comm` (it
 * splits private communicators off it, and node-level ones when hierarchical). `cfg` may be
 * NULL (all defaults). The caller keeps ownership of `comm`; the context keeps no reference to
 * it, so it may be destroyed before the context. On success *out is freed with
 * bagua_ddp_destroy().
 */
BAGUA_EXTERN bagua_status_t bagua_ddp_create(bagua_comm_t *comm, const bagua_ddp_config_t *cfg,
                                             bagua_ddp_t **out);

/*
 * Registers one f32 tensor of `count` (>= 1) elements. Call it for every tensor in BACKWARD
 * order (the order bagua_ddp_grad_ready() will usually be called in, last layer first): the
 * registration order is the bucket order and tensor i (from 0) is the i-th registered.
 * `name` is copied (NULL names it "tensor<i>"). `param` (required) holds the initial weights,
 * read by bagua_ddp_ready() on rank 0 and overwritten with the current weights by
 * bagua_ddp_ready() and every bagua_ddp_step(). `grad` (may be NULL, see Storage above) is
 * read by bagua_ddp_grad_ready(). Both arrays stay owned by the caller and must stay valid
 * until bagua_ddp_destroy(). Only before bagua_ddp_ready().
 */
BAGUA_EXTERN bagua_status_t bagua_ddp_register(bagua_ddp_t *ddp, const char *name, float *param,
                                               float *grad, size_t count);

/*
 * Declares the matrix shape of registered tensor `index` (0 .. tensors registered - 1):
 * `rows` rows of count / rows elements each, in the row-major order of `param` (a
 * PyTorch parameter of shape [rows, ...] is flattened this way). Algorithms that compress
 * matrices (powersgd) use it; the others ignore it, and a tensor without a shape counts as a
 * vector, which powersgd averages uncompressed. Every rank must declare the same shapes
 * (bagua_ddp_ready() checks them with the tensors). May be called again for the same tensor
 * (the last call wins); rows = 1 makes it a vector again. Only before bagua_ddp_ready()
 * (BAGUA_ERR_INVALID_USAGE after it); a bad index, rows = 0 or rows that do not divide the
 * tensor's count return BAGUA_ERR_INVALID_ARG with a warning (bagua_last_error()) and change
 * nothing. Nothing is allocated or kept beyond the number.
 */
BAGUA_EXTERN bagua_status_t bagua_ddp_register_shape(bagua_ddp_t *ddp, int index, size_t rows);

/*
 * Freezes the registration: lays the tensors out in buckets (each padded so that it divides
 * evenly among ranks and nodes), allocates the flat storage and the optimizer state,
 * broadcasts rank 0's weights and optimizer state so every rank starts identical, writes
 * them back into every `param` array, and starts the communication thread. Collective.
 */
BAGUA_EXTERN bagua_status_t bagua_ddp_ready(bagua_ddp_t *ddp);

/*
 * The algorithms this build has, space-separated in the order of BAGUA_ALGORITHM's words
 * ("gradient_allreduce bytegrad ..."), and the bagua_ddp_config_t fields that apply to
 * algorithm `name` ("hierarchical error_feedback"; NULL for an unknown name): the rest must be
 * left unset for it, and their variables are ignored. Static strings; thread-safe.
 */
BAGUA_EXTERN const char *bagua_ddp_algorithms(void);
BAGUA_EXTERN const char *bagua_ddp_algorithm_options(const char *name);

/*
 * Numbers this rank's current step (0 .. 2^62); each later step is numbered one more, unless
 * numbered again. With steps numbered alike on every rank (the program's iteration, or epoch
 * and batch), a rank that skipped an iteration or ran one twice is caught: the first step
 * that communicates with different numbers fails on every rank with BAGUA_ERR_PROTOCOL before
 * any of its data moves, and the warning names both numbers (docs/algorithms.md, "Steps in
 * phase"). Without numbers such a rank runs out of phase silently.
 *
 * The first call comes before bagua_ddp_ready(), on every rank or on none (ready fails with
 * BAGUA_ERR_INVALID_USAGE otherwise); ready, like an elastic rebuild, gives every rank rank
 * 0's number. Later calls renumber the current step; make them before its first
 * bagua_ddp_grad_ready(). The check costs one small allreduce per step (a few microseconds
 * over shared memory, tens to hundreds over TCP). Training thread.
 */
BAGUA_EXTERN bagua_status_t bagua_ddp_set_step(bagua_ddp_t *ddp, int64_t step);

/*
 * Counts an iteration that this rank ran without communicating (a forward and backward pass
 * under PyTorch's no_sync(), say): with numbered steps, the current step's number goes up by
 * one, so a rank that runs such an iteration while the others communicate is caught at its
 * next communicating step instead of averaging its gradients with the others' previous
 * iteration. Ranks that all run the same local iterations (gradient accumulation) stay alike.
 * Without numbered steps it does nothing. Call it before the current step's first
 * bagua_ddp_grad_ready(). Local (no communication). Training thread.
 */
BAGUA_EXTERN bagua_status_t bagua_ddp_local_step(bagua_ddp_t *ddp);

/*
 * Views into the flat storage for tensor `index` (count elements), valid from
 * bagua_ddp_ready() until bagua_ddp_destroy(); NULL for a bad index or before ready.
 * The parameter view is read-only for the caller; with the async algorithm its contents may
 * change at any time (read the registered `param` array, a consistent snapshot, instead).
 * The caller writes the gradient view during backward before bagua_ddp_grad_ready(index);
 * after bagua_ddp_step() its contents are unspecified (they hold the averaged gradient for
 * gradient_allreduce and bytegrad).
 */
BAGUA_EXTERN float *bagua_ddp_param(bagua_ddp_t *ddp, int index);
BAGUA_EXTERN float *bagua_ddp_grad(bagua_ddp_t *ddp, int index);

/*
 * Marks tensor `index`'s gradient of this step complete (copying it from the registered
 * `grad` array when there is one). When every tensor of the next bucket in order is ready,
 * the bucket is handed to the communication thread and the call returns at once; the
 * communication runs while the caller continues its backward pass. Marking the same tensor
 * twice in one step is BAGUA_ERR_INVALID_USAGE. Does not block on communication.
 */
BAGUA_EXTERN bagua_status_t bagua_ddp_grad_ready(bagua_ddp_t *ddp, int index);

/*
 * Ends the step: marks every tensor not yet marked ready (so a loop that does not overlap
 * may skip bagua_ddp_grad_ready()), waits for all buckets' communication, runs the
 * algorithm's pre-update work (decentralized: adopt the averaged weights), the optimizer over
 * the flat buffers in one fused call, and the post-update work (low-precision decentralized:
 * compressed exchange of weight differences), then writes the weights back to every `param`
 * array. Collective (except for async after its warm-up), blocking.
 */
BAGUA_EXTERN bagua_status_t bagua_ddp_step(bagua_ddp_t *ddp);

/*
 * An optimizer outside the library (config.optimizer = "none", e.g. torch's): the step is cut
 * in two. bagua_ddp_wait() ends the backward pass: it marks what is not yet marked, waits for
 * every bucket's communication, runs the algorithm's pre-update work (decentralized: adopt
 * the averaged weights), and writes the communicated gradients into every registered `grad`
 * array and the weights into every registered `param` array. The caller then updates the
 * weights itself, in its `param` arrays or, after bagua_ddp_release_params(), in the flat
 * storage (bagua_ddp_param() views; with async holding bagua_ddp_lock_weights()), and
 * bagua_ddp_step() ends the step: it takes the update in, runs the post-update work
 * (low-precision decentralized's exchange) and hands the weights back. bagua_ddp_wait() is
 * optional with the library's own optimizers (bagua_ddp_step() runs it when needed), and a
 * second call in one step does nothing. Collective as bagua_ddp_step().
 */
BAGUA_EXTERN bagua_status_t bagua_ddp_wait(bagua_ddp_t *ddp);

/*
 * After bagua_ddp_ready(): the caller gives up its registered `param` arrays. The weights live
 * only in the flat storage from now on (read and, with optimizer "none", write them through
 * bagua_ddp_param()); the library never reads or writes the arrays again, so the caller may
 * free them. Not with an elastic context (its rebuild reads the arrays). Local.
 */
BAGUA_EXTERN bagua_status_t bagua_ddp_release_params(bagua_ddp_t *ddp);

/*
 * Holds the lock under which the async algorithm's averaging thread reads and writes the
 * flat weights, so that an update made outside the library is not torn by a round. A no-op
 * for the other algorithms. Local; the training thread only; never hold it across a
 * collective call of this context.
 */
BAGUA_EXTERN void bagua_ddp_lock_weights(bagua_ddp_t *ddp);
BAGUA_EXTERN void bagua_ddp_unlock_weights(bagua_ddp_t *ddp);

/* Changes the learning rate used from the next bagua_ddp_step() on (lr >= 0). Local. */
BAGUA_EXTERN bagua_status_t bagua_ddp_set_lr(bagua_ddp_t *ddp, double lr);

/*
 * async only. bagua_ddp_async_pause() stops background averaging on all ranks (a rank's
 * request stops every rank's thread at their next common round), waits for this rank's
 * thread, then averages the weights once more so that every rank holds the same model when it
 * returns. bagua_ddp_async_resume() restarts averaging (at once, or at the end of the warm-up).
 * Both are collective: every rank must call them, within BAGUA_COMM_TIMEOUT_MS of each
 * other. Calling pause twice, or resume without pause, is BAGUA_ERR_INVALID_USAGE. Other
 * algorithms: BAGUA_ERR_INVALID_USAGE.
 */
BAGUA_EXTERN bagua_status_t bagua_ddp_async_pause(bagua_ddp_t *ddp);
BAGUA_EXTERN bagua_status_t bagua_ddp_async_resume(bagua_ddp_t *ddp);
/* The name of bagua_ddp_async_pause() before 0.2: "abort" now means only bagua_ddp_abort(),
 * the thread-safe kill. */
BAGUA_EXTERN BAGUA_DEPRECATED("bagua_ddp_async_pause") bagua_status_t
    bagua_ddp_async_abort(bagua_ddp_t *ddp);

/*
 * Elastic training (include/bagua/elastic.h). Makes the context follow `e` through world
 * changes: bagua_elastic_commit() also snapshots the context's weights, optimizer state, step
 * count and learning rate (in registration order, independent of the bucket layout);
 * bagua_elastic_restore() returns them to that snapshot; bagua_elastic_rebuild() stops the
 * communication (and async averaging) threads, moves the context onto private communicators
 * split from the new round's communicator, lays the buckets out again for the new world and
 * gives every rank rank 0's weights, optimizer state, step count and learning rate, as
 * bagua_ddp_ready() does. When a round drops a member, communication still in flight is
 * aborted (BAGUA_ELASTIC_ABORT_DELAY_MS after it is published), so a stalled peer cannot hold
 * a step until the communication timeout. Algorithm-local state that only makes sense within
 * one world is reset on a rebuild: error-feedback residuals, decentralized peer replicas, and
 * a paused async averaging (it restarts once past the warm-up).
 *
 * Order, on every worker, newcomers included:
 *   bagua_elastic_create(); register the program's own state; bagua_elastic_sync();
 *   bagua_ddp_create(bagua_elastic_comm(e)); register tensors; bagua_ddp_ready();
 *   bagua_ddp_elastic_attach(ddp, e);
 * so that a newcomer's bagua_ddp_create()/ready() meet the survivors' rebuild collectives.
 * Reset callbacks added before the attach run before the context is rebuilt (they may change
 * the learning rate with bagua_ddp_set_lr: rank 0's value is adopted by all). The context must
 * be destroyed before `e`. Not collective. BAGUA_ERR_INVALID_USAGE before bagua_ddp_ready() or
 * when already attached.
 */
struct bagua_elastic_s;
BAGUA_EXTERN bagua_status_t bagua_ddp_elastic_attach(bagua_ddp_t *ddp, struct bagua_elastic_s *e);

/*
 * The name of the algorithm the context runs ("gradient_allreduce", ...), after config.algorithm
 * or BAGUA_ALGORITHM was applied, so that a program that leaves the choice to its launcher can
 * report what it runs. NULL for a NULL context. The string is static. Does not block.
 */
BAGUA_EXTERN const char *bagua_ddp_algorithm(const bagua_ddp_t *ddp);

/*
 * A counter of re-layouts of the flat storage: 0 after bagua_ddp_ready(), incremented each time
 * the library moves the context to other settings at the end of a bagua_ddp_step() (autotuning,
 * BAGUA_AUTOTUNE; the advisor's switch, BAGUA_ALGORITHM=auto). Each rank sees the same value
 * after the same step. When it changed, pointers from bagua_ddp_param() and bagua_ddp_grad()
 * taken before point into freed memory and must be fetched again; the registered `param` and
 * `grad` arrays stay valid. -1 for a NULL context. Does not block.
 */
BAGUA_EXTERN int64_t bagua_ddp_layout_version(const bagua_ddp_t *ddp);

/* Copies this rank's counters into *out (fields up to out->struct_size). Does not block. */
BAGUA_EXTERN bagua_status_t bagua_ddp_stats(const bagua_ddp_t *ddp, bagua_ddp_stats_t *out);

/*
 * Progress reports (docs/observability.md). Under bagua-agent every completed
 * bagua_ddp_step() is recorded in a small shared file the agent publishes (a few stores, no
 * system call). These tell it what a step count cannot: the total steps the program will run
 * (for the launcher's ETA; 0: unknown; overrides BAGUA_TOTAL_STEPS; 0..2^52) and samples
 * processed (added to a running count). Training thread only; do not block;
 * BAGUA_ERR_INVALID_ARG for a NULL context or a value out of range.
 */
BAGUA_EXTERN bagua_status_t bagua_ddp_set_total_steps(bagua_ddp_t *ddp, int64_t total_steps);
BAGUA_EXTERN bagua_status_t bagua_ddp_add_samples(bagua_ddp_t *ddp, int64_t samples);

/*
 * Thread-safe, never blocks: aborts the context's communicators so that communication in
 * progress ends with BAGUA_ERR_ABORTED, and every later call (except destroy) returns
 * BAGUA_ERR_ABORTED. Peers see their collectives fail as for a dead peer.
 */
BAGUA_EXTERN void bagua_ddp_abort(bagua_ddp_t *ddp);

/*
 * Stops the background threads (waiting for communication already handed to them, which
 * ends by completion, error or timeout), destroys the private communicators and frees
 * everything the context owns (NULL is accepted). The registered arrays are not touched.
 * Collective when the context is healthy: peers' threads may be exchanging with this rank.
 */
BAGUA_EXTERN void bagua_ddp_destroy(bagua_ddp_t *ddp);

#ifdef __cplusplus
}
#endif
#endif
