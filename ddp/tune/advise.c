/*
 * The advisor (advise.h; docs/advisor.md): measures, predicts with advisor_model.c, prints
 * the ranked table on rank 0 and, for algorithm "auto", switches every rank at one step.
 *
 * Every collective of the advisor runs on its own communicator, split off d->comm before the
 * communication thread exists, from the training thread: the communication thread may be
 * busy on d->comm (a decentralized exchange overlaps the forward pass) when the advisor
 * decides, and a communicator admits one calling thread at a time.
 */
#include "advise.h"
#include "../tune.h"

#include <math.h>
#include <sched.h> /* sched_getaffinity, CPU_COUNT: the build defines _GNU_SOURCE */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "comm/tune.h"
#include "common/check.h"
#include "common/log.h"
#include "common/params.h"
#include "common/time.h"

/* Steps measured at most (BAGUA_ADVISE_STEPS is bounded by the registry to 1000). */
#define MAX_STEPS 1000
/* The bandwidth probe: this many bytes, or the model when it is smaller (but >= 256 KiB,
 * above the small-message algorithm's threshold). */
#define PROBE_BYTES (4u << 20)
#define PROBE_MIN_BYTES (256u << 10)
/* The alltoall and neighbour-exchange probes send what the algorithms send (ByteGrad's
 * compressed largest bucket, low-precision decentralized's compressed model), up to this much:
 * on the netsim links a 12 MiB sendrecv ran at 6.8 MB/s where a 4 MiB one ran at 10.3 MB/s. */
#define PROBE_P2P_MAX_BYTES (16u << 20)
#define LAT_REPEAT 12
#define BW_REPEAT 3
/* Elements run through one compression and decompression to time the kernels: the model
 * (as low-precision decentralized compresses it), at least 16 MiB and at most 64 MiB of
 * varied values, so that caches do not flatter the kernels. */
#define QUANT_MIN_ELEMS ((size_t)1 << 22)
#define QUANT_MAX_ELEMS ((size_t)1 << 24)

/* The algorithm the advisor's cost model `i` (advisor_model.h) predicts, by name from the
 * algorithms' table; ddp_algorithm_table checks that every model names one. */
static const bagua__ddp_algo_t *adv_algo(int i) {
  return bagua__ddp_algorithm(bagua__adv_algo_name((bagua__adv_algo_t)i), 0);
}

struct bagua__ddp_advise_s {
  bagua_comm_t *comm; /* private; NULL once the advisor is done */
  /* seen: steps recorded in the current phase; done: the probe decided, the check runs. */
  int nsteps, seen, done;
  double t_last; /* end of the previous step (0: none yet; the first step is a warm-up) */
  double *compute, *backward, *step; /* per measured step */
  /* The check after the probe: the algorithm that runs (-1: none of the model's) and the step
   * time predicted for it. */
  int check_algo;
  double check_pred;
  /* The network, identical on every rank (the slowest rank's figures). */
  int nodes, rpn;
  double inter_lat, inter_bw, intra_lat, intra_bw, quant_bw, probe_s;
  double inter_bw_a2a, inter_bw_p2p;
  int cores, machine_ranks; /* CPUs this rank may use; ranks on its machine (host name) */
  double overlap;
  char *table;
};

static int algo_index(const bagua__ddp_algo_t *a) {
  for (int i = 0; i < BAGUA__ADV_COUNT; i++)
    if (adv_algo(i) == a) return i;
  return -1;
}

/* ------------------------------------------------------------------------------------------ */
/* algorithm "auto"                                                                           */
/* ------------------------------------------------------------------------------------------ */

bagua_status_t bagua__ddp_auto_pick(bagua__ddp_settings_t *s) {
  const unsigned qadam = 1u << BAGUA__ADV_QADAM, all = (1u << BAGUA__ADV_COUNT) - 1;
  const char *list = bagua__param_str(BAGUA_P_AUTO_ALLOW);
  unsigned allow = 0;
  /* The registry accepted the list word by word (common/params.c), so every word matches. */
  for (const char *p = list; *p;) {
    const char *comma = strchr(p, ',');
    size_t n = comma ? (size_t)(comma - p) : strlen(p);
    int modelled = 0;
    for (int i = 0; i < BAGUA__ADV_COUNT; i++) {
      const char *name = bagua__adv_algo_name((bagua__adv_algo_t)i);
      if (strlen(name) == n && strncasecmp(name, p, n) == 0) {
        allow |= 1u << i;
        modelled = 1;
      }
    }
    /* An algorithm the advisor has no cost model for (powersgd) cannot be predicted, so it is
     * never picked; say so rather than let the word vanish. */
    if (!modelled && n)
      BAGUA_WARN(
          "algorithm auto: %.*s in BAGUA_AUTO_ALLOW is ignored: the advisor has no cost "
          "model for it and never picks it (name it in BAGUA_ALGORITHM instead)",
          (int)n, p);
    if (!comma) break;
    p = comma + 1;
  }
  if (!allow) allow = all & ~qadam;
  if ((allow & qadam) && allow != qadam) {
    BAGUA_WARN(
        "algorithm auto: qadam left out of BAGUA_AUTO_ALLOW=%s: it brings its own optimizer, "
        "which a running context cannot change; it is picked only when it is the one allowed",
        list);
    allow &= ~qadam;
  }
  static const bagua__adv_algo_t order[] = {
      BAGUA__ADV_GRADIENT_ALLREDUCE,          BAGUA__ADV_BYTEGRAD, BAGUA__ADV_DECENTRALIZED,
      BAGUA__ADV_LOW_PRECISION_DECENTRALIZED, BAGUA__ADV_ASYNC,    BAGUA__ADV_QADAM};
  for (size_t i = 0; i < sizeof(order) / sizeof(order[0]) && !s->algo; i++)
    if (allow & (1u << order[i])) s->algo = adv_algo(order[i]);
  s->auto_allow = allow;
  BAGUA_INFO(BAGUA_SUBSYS_ENV, "bagua_ddp_create: algorithm auto (allowed 0x%x) starts with %s",
             allow, s->algo->name);
  return BAGUA_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* measurement                                                                                */
/* ------------------------------------------------------------------------------------------ */

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  if (n <= 0) return 0.0;
  qsort(v, (size_t)n, sizeof(double), cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/*
 * Seconds per allreduce of `bytes` over `repeat` of them (after one untimed warm-up): the
 * median of the calls' times, or with `period` their total over `repeat`. The ranks of a
 * loop of back-to-back collectives settle into a fixed skew: the last to arrive finds its
 * peers' messages waiting and returns at once, the first waits for the others, so one rank's
 * calls may each take a tenth of the period and another's nearly two (4 netsim hosts with a
 * 10 ms round trip: per-call medians of 1.5 to 19 ms for a period of 10 ms on every rank).
 * Latency therefore comes from the period; the skew then errs by at most itself over
 * `repeat`. Large transfers take the median, which a burst of load elsewhere cannot move
 * and next to which the skew is small.
 */
static bagua_status_t time_allreduce(bagua_comm_t *c, float *buf, size_t bytes, int repeat,
                                     int period, double *out) {
  double t[LAT_REPEAT > BW_REPEAT ? LAT_REPEAT : BW_REPEAT];
  size_t n = bytes / sizeof(float);
  BAGUA_CHECK(bagua_allreduce(c, buf, buf, n, BAGUA_F32, BAGUA_SUM));
  double start = bagua__now_s();
  for (int i = 0; i < repeat; i++) {
    double t0 = bagua__now_s();
    BAGUA_CHECK(bagua_allreduce(c, buf, buf, n, BAGUA_F32, BAGUA_SUM));
    t[i] = bagua__now_s() - t0;
  }
  *out = period ? (bagua__now_s() - start) / repeat : median(t, repeat);
  return BAGUA_OK;
}

/*
 * Latency per message round from a small allreduce (recursive doubling: ceil(log2 n) rounds),
 * and bytes per second through one rank's link from a large one (ring: 2(n-1)/n of the
 * buffer sent in 2(n-1) rounds). Zero for a communicator of one rank.
 */
static bagua_status_t probe(bagua_comm_t *c, float *buf, size_t bytes, double *lat, double *bw) {
  int n = c ? bagua_comm_size(c) : 1;
  *lat = *bw = 0;
  if (n < 2) return BAGUA_OK;
  double t_small, t_big;
  memset(buf, 0, bytes);
  BAGUA_CHECK(time_allreduce(c, buf, 2 * sizeof(float), LAT_REPEAT, 1, &t_small));
  BAGUA_CHECK(time_allreduce(c, buf, bytes, BW_REPEAT, 0, &t_big));
  *lat = t_small / ceil(log2((double)n));
  double t = t_big - 2.0 * (n - 1) * *lat;
  /* A latency estimate that eats nearly all of the transfer is noise: keep a tenth of it at
   * least. Not more: on links with delay the rounds are most of a probe-sized allreduce, and a
   * floor of half (as before) charged the other half to bandwidth, so the model over-predicted
   * every allreduce of that size by 30-50 % (4 netsim hosts, 1 Gbit/s, 5 ms each way: 33.6 ms
   * for 256 KiB, 31.2 of it rounds, read as 22.5 MB/s). */
  if (t < 0.1 * t_big) t = 0.1 * t_big;
  *bw = t > 0 ? 2.0 * (n - 1) / n * (double)bytes / t : 0.0;
  return BAGUA_OK;
}

/* Median seconds of `repeat` alltoalls (exchange 0) or neighbour exchanges (exchange 1) of
 * `bytes` from buf to buf + bytes (after one untimed warm-up). The neighbour exchange sends
 * half of `bytes` to each ring neighbour at once, as the decentralized algorithms do, so that
 * `bytes` pass through each rank's link either way; with two ranks, where the algorithms make
 * one sendrecv, it is a sendrecv of `bytes`. */
static bagua_status_t time_p2p(bagua_comm_t *c, char *buf, size_t bytes, int exchange,
                               double *out) {
  double t[BW_REPEAT];
  int n = bagua_comm_size(c), me = bagua_comm_rank(c);
  int left = (me + n - 1) % n, right = (me + 1) % n;
  for (int i = 0; i <= BW_REPEAT; i++) {
    double t0 = bagua__now_s();
    if (exchange && n > 2)
      BAGUA_CHECK(bagua_neighbor_exchange(c, buf, bytes / 2, left, buf + bytes, right,
                                          buf + bytes + bytes / 2, BAGUA_U8));
    else if (exchange)
      BAGUA_CHECK(bagua_sendrecv(c, buf, bytes, right, buf + bytes, bytes, left, BAGUA_U8));
    else
      BAGUA_CHECK(bagua_alltoall(c, buf, buf + bytes, bytes / (size_t)n, BAGUA_U8));
    if (i > 0) t[i - 1] = bagua__now_s() - t0;
  }
  *out = median(t, BW_REPEAT);
  return BAGUA_OK;
}

/* The alltoall's (of a2a_bytes) and the neighbour exchange's (of p2p_bytes) bytes per second
 * through one rank's link, with the latency `lat` taken off: one round each, as the model
 * charges them (both send every block at once). */
static bagua_status_t probe_p2p(bagua_comm_t *c, char *buf, size_t a2a_bytes, size_t p2p_bytes,
                                double lat, double *a2a, double *p2p) {
  int n = c ? bagua_comm_size(c) : 1;
  *a2a = *p2p = 0;
  if (n < 2) return BAGUA_OK;
  double t;
  a2a_bytes = a2a_bytes / (size_t)n * (size_t)n;
  BAGUA_CHECK(time_p2p(c, buf, a2a_bytes, 0, &t));
  double sent = (double)(n - 1) / n * (double)a2a_bytes;
  t -= lat;
  *a2a = t > 0 ? sent / t : 0.0;
  p2p_bytes &= ~(size_t)1;
  BAGUA_CHECK(time_p2p(c, buf, p2p_bytes, 1, &t));
  t -= lat;
  *p2p = t > 0 ? (double)p2p_bytes / t : 0.0;
  return BAGUA_OK;
}

static size_t clamp_size(size_t v, size_t lo, size_t hi) {
  return v < lo ? lo : v > hi ? hi : v;
}

/* f32 bytes per second through one MinMaxUInt8 compression plus one decompression, on the
 * context's device (the median of three). */
static bagua_status_t probe_quant(bagua_ddp_t *d, double *rate) {
  size_t elems = 0;
  for (int i = 0; i < d->ntensors; i++) elems += d->tensors[i].count;
  if (elems < QUANT_MIN_ELEMS) elems = QUANT_MIN_ELEMS;
  if (elems > QUANT_MAX_ELEMS) elems = QUANT_MAX_ELEMS;
  const bagua__ddp_dev_t *dev = d->s.dev;
  const bagua__lane_t L = BAGUA__LANE_COMPUTE;
  size_t region = bagua__minmax_u8_compressed_size(elems, BAGUA_F32);
  float *x = bagua__ddp_alloc_floats(d, elems);
  uint8_t *q = dev->alloc(d, region);
  bagua_status_t st = BAGUA_OK;
  double t[3];
  *rate = 0;
  float *host = malloc(elems * sizeof(float));
  if (!x || !q || !host) {
    free(host);
    st = BAGUA_ERR_NO_MEMORY;
    goto out;
  }
  /* Gradient-like values: all zeros would take the kernels' trivial path. */
  uint32_t r = 12345;
  for (size_t i = 0; i < elems; i++) {
    r = r * 1664525u + 1013904223u;
    host[i] = (float)((int32_t)r) * 1e-12f;
  }
  st = dev->from_host(d, L, x, host, elems * sizeof(float));
  if (st == BAGUA_OK) st = dev->sync(d, L);
  free(host);
  for (int i = 0; i < 3 && st == BAGUA_OK; i++) {
    double t0 = bagua__now_s();
    st = dev->compress(d, L, x, elems, 1, q);
    if (st == BAGUA_OK) st = dev->decompress(d, L, q, elems, 1, x);
    if (st == BAGUA_OK) st = dev->sync(d, L);
    t[i] = bagua__now_s() - t0;
  }
  if (st == BAGUA_OK) {
    double m = median(t, 3);
    *rate = m > 0 ? 2.0 * elems * sizeof(float) / m : 0.0;
  }
out:
  bagua__ddp_free(d, x);
  bagua__ddp_free(d, q);
  return st;
}

/* FNV-1a of the host name: ranks that share it share a machine's CPUs, whatever node they
 * emulate (several emulated nodes may run on one machine, as in bench/netsim). */
/* How well communication overlaps compute here (advisor_model.h): the slowest rank's view of
 * its machine. On a GPU the compute leaves the CPUs to the communication thread. */
static bagua_status_t probe_cpus(bagua_ddp_t *d, struct bagua__ddp_advise_s *a) {
  /* bagua_ddp_create() counted them; communication held until the backward's end
   * (BAGUA_OVERLAP=0) overlaps nothing. */
  a->machine_ranks = d->machine_ranks;
  a->cores = d->cpus;
  double v = !d->s.overlap ? 0.0
             : d->s.dev != &bagua__ddp_dev_cpu
                 ? 1.0
                 : bagua__adv_overlap_efficiency(a->cores, a->machine_ranks);
  BAGUA_CHECK(bagua_allreduce(a->comm, &v, &a->overlap, 1, BAGUA_F64, BAGUA_MIN));
  return BAGUA_OK;
}

/* Latency and bandwidth among node leaders and within nodes, the same on every rank. */
static bagua_status_t probe_network(bagua_ddp_t *d, struct bagua__ddp_advise_s *a) {
  bagua_comm_t *intra = NULL, *inter = NULL;
  bagua_status_t st = BAGUA_OK;
  size_t model = 0, largest = 0;
  for (int i = 0; i < d->ntensors; i++) {
    size_t b = d->tensors[i].count * sizeof(float);
    model += b;
    if (b > largest) largest = b;
  }
  size_t bytes = clamp_size(model, PROBE_MIN_BYTES, PROBE_BYTES);
  /* The layout is not built yet: a bucket holds about max(bucket size, largest tensor). */
  size_t bucket = d->s.bucket_bytes > largest ? d->s.bucket_bytes : largest;
  if (bucket > model) bucket = model;
  size_t a2a_bytes = clamp_size(bucket / 4, PROBE_MIN_BYTES, PROBE_P2P_MAX_BYTES);
  size_t p2p_bytes = clamp_size(model / 4, PROBE_MIN_BYTES, PROBE_P2P_MAX_BYTES);
  size_t most = bytes > a2a_bytes ? bytes : a2a_bytes;
  if (p2p_bytes > most) most = p2p_bytes;
  /* Twice the largest probe: the alltoall and the neighbour exchange need separate send and
   * receive halves. */
  float *buf = calloc(2, most);
  if (!buf) return BAGUA_ERR_NO_MEMORY;
  int n = bagua_comm_size(a->comm);
  a->nodes = bagua_comm_node_count(a->comm);
  /* [0..3] seconds per unit (the slowest rank wins the MAX), [4] ranks on this node, [5]
   * compression, [6..7] alltoall and neighbour-exchange seconds per byte. */
  double v[8] = {0};
  if (a->nodes < n) {
    BAGUA_CHECK_GOTO(bagua_comm_split_node(a->comm, &intra, &inter), st, out);
    /* Probed as the algorithms will use them: without per-call signature agreement. */
    bagua__comm_set_calls_agreed(intra);
    bagua__comm_set_calls_agreed(inter);
    BAGUA_CHECK_GOTO(probe(intra, buf, bytes, &a->intra_lat, &a->intra_bw), st, out);
    BAGUA_CHECK_GOTO(probe(inter, buf, bytes, &a->inter_lat, &a->inter_bw), st, out);
    BAGUA_CHECK_GOTO(probe_p2p(inter, (char *)buf, a2a_bytes, p2p_bytes, a->inter_lat,
                               &a->inter_bw_a2a, &a->inter_bw_p2p),
                     st, out);
    v[4] = bagua_comm_size(intra);
  } else {
    BAGUA_CHECK_GOTO(probe(a->comm, buf, bytes, &a->inter_lat, &a->inter_bw), st, out);
    BAGUA_CHECK_GOTO(probe_p2p(a->comm, (char *)buf, a2a_bytes, p2p_bytes, a->inter_lat,
                               &a->inter_bw_a2a, &a->inter_bw_p2p),
                     st, out);
    v[4] = 1;
  }
  BAGUA_CHECK_GOTO(probe_quant(d, &a->quant_bw), st, out);
  v[0] = a->inter_lat;
  v[1] = a->inter_bw > 0 ? 1.0 / a->inter_bw : 0;
  v[2] = a->intra_lat;
  v[3] = a->intra_bw > 0 ? 1.0 / a->intra_bw : 0;
  v[5] = a->quant_bw > 0 ? 1.0 / a->quant_bw : 0;
  v[6] = a->inter_bw_a2a > 0 ? 1.0 / a->inter_bw_a2a : 0;
  v[7] = a->inter_bw_p2p > 0 ? 1.0 / a->inter_bw_p2p : 0;
  BAGUA_CHECK_GOTO(bagua_allreduce(a->comm, v, v, 8, BAGUA_F64, BAGUA_MAX), st, out);
  a->inter_lat = v[0];
  a->inter_bw = v[1] > 0 ? 1.0 / v[1] : 0;
  a->intra_lat = v[2];
  a->intra_bw = v[3] > 0 ? 1.0 / v[3] : 0;
  a->rpn = (int)v[4];
  a->quant_bw = v[5] > 0 ? 1.0 / v[5] : 0;
  a->inter_bw_a2a = v[6] > 0 ? 1.0 / v[6] : 0;
  a->inter_bw_p2p = v[7] > 0 ? 1.0 / v[7] : 0;
out:
  bagua_comm_destroy(inter);
  bagua_comm_destroy(intra);
  free(buf);
  return st;
}

bagua_status_t bagua__ddp_advise_start(bagua_ddp_t *d) {
  if (!bagua__param_int(BAGUA_P_ADVISE) && !d->s.auto_allow) return BAGUA_OK;
  struct bagua__ddp_advise_s *a = calloc(1, sizeof(*a));
  if (!a) return BAGUA_ERR_NO_MEMORY;
  d->advise = a;
  a->nsteps = (int)bagua__param_int(BAGUA_P_ADVISE_STEPS);
  if (a->nsteps > MAX_STEPS) a->nsteps = MAX_STEPS;
  a->compute = calloc((size_t)a->nsteps, sizeof(double));
  a->backward = calloc((size_t)a->nsteps, sizeof(double));
  a->step = calloc((size_t)a->nsteps, sizeof(double));
  if (!a->compute || !a->backward || !a->step) return BAGUA_ERR_NO_MEMORY;
  a->check_algo = -1;
  /* The probe's steps run with communication held (bagua__ddp_advise_step); the thread that
   * starts after this reads the hold. */
  bagua__ddp_sched_hold(d, 1);
  double t0 = bagua__now_s();
  bagua_comm_t *c = NULL;
  BAGUA_CHECK(bagua_comm_split(d->comm, 0, bagua_comm_rank(d->comm), &c));
  bagua__comm_set_calls_agreed(c); /* the probes' calls are the same on every rank */
  pthread_mutex_lock(&d->comm_mu);
  a->comm = c;
  pthread_mutex_unlock(&d->comm_mu);
  BAGUA_CHECK(probe_network(d, a));
  BAGUA_CHECK(probe_cpus(d, a));
  a->probe_s = bagua__now_s() - t0;
  BAGUA_INFO(BAGUA_SUBSYS_COMM,
             "advise: %d nodes x %d ranks; inter %.3g B/s %.3g s, intra %.3g B/s %.3g s, "
             "compression %.3g B/s; probes took %.2f s",
             a->nodes, a->rpn, a->inter_bw, a->inter_lat, a->intra_bw, a->intra_lat, a->quant_bw,
             a->probe_s);
  return BAGUA_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* prediction, table and choice                                                               */
/* ------------------------------------------------------------------------------------------ */

static bagua__adv_opts_t opts_of(const bagua__ddp_settings_t *s, int i) {
  bagua__adv_opts_t o = {.algo = (bagua__adv_algo_t)i,
                         .hierarchical = s->hierarchical,
                         .peer_mode = s->peer_mode,
                         .comm_interval = s->comm_interval,
                         .sync_interval_ms = s->sync_interval_ms};
  return o;
}

/* The settings algorithm i would run with in this context: its options as if the program had
 * named it (the environment, else the defaults), the running context's optimizer, learning
 * rate, bucket size and device (a reconfiguration keeps those). */
static bagua_status_t settings_for(const bagua_ddp_t *d, int i, bagua__ddp_settings_t *out) {
  if (adv_algo(i) == d->s.algo) {
    *out = d->s;
    return BAGUA_OK;
  }
  bagua_ddp_config_t cfg = BAGUA_DDP_CONFIG_INIT;
  cfg.algorithm = adv_algo(i)->name;
  BAGUA_CHECK(bagua__ddp_settings(&cfg, out));
  out->bucket_bytes = d->s.bucket_bytes;
  out->optimizer = d->s.optimizer;
  out->lr = d->s.lr;
  out->momentum = d->s.momentum;
  out->dampening = d->s.dampening;
  out->weight_decay = d->s.weight_decay;
  out->beta1 = d->s.beta1;
  out->beta2 = d->s.beta2;
  out->eps = d->s.eps;
  out->nesterov = d->s.nesterov;
  out->dev = d->s.dev;
  out->cuda_device = d->s.cuda_device;
  out->cuda_stream = d->s.cuda_stream;
  out->auto_allow = d->s.auto_allow;
  return BAGUA_OK;
}

static void format_bytes(char *buf, size_t len, double b) {
  if (b <= 0)
    snprintf(buf, len, "-");
  else if (b >= 1e9)
    snprintf(buf, len, "%.2f GB/s", b / 1e9);
  else
    snprintf(buf, len, "%.1f MB/s", b / 1e6);
}

size_t bagua__ddp_advise_format(char *buf, size_t len, const bagua__adv_meas_t *m,
                                const bagua__adv_opts_t *opts, const bagua__adv_pred_t *pred,
                                const int *avail, unsigned allow, int chosen, int running,
                                double measured_s) {
  size_t o = 0;
#define PUT(...)                                                                      \
  do {                                                                                \
    int n_ = snprintf(buf + (o < len ? o : len), o < len ? len - o : 0, __VA_ARGS__); \
    if (n_ > 0) o += (size_t)n_;                                                      \
  } while (0)
  double model = 0;
  for (int i = 0; i < m->nbuckets; i++) model += m->bucket_bytes[i];
  char inter[96], intra[32], quant[32], a2a[32], p2p[32];
  format_bytes(inter, sizeof(inter), m->inter_bw);
  format_bytes(a2a, sizeof(a2a), m->inter_bw_a2a);
  format_bytes(p2p, sizeof(p2p), m->inter_bw_p2p);
  snprintf(inter + strlen(inter), sizeof(inter) - strlen(inter), " (alltoall %s, neighbours %s)",
           a2a, p2p);
  format_bytes(intra, sizeof(intra), m->ranks_per_node > 1 ? m->intra_bw : 0);
  format_bytes(quant, sizeof(quant), m->quant_bw);
  PUT("advise: %d ranks on %d node%s (up to %d per node), model %.1f MB in %d bucket%s\n", m->ranks,
      m->nodes, m->nodes == 1 ? "" : "s", m->ranks_per_node, model / 1e6, m->nbuckets,
      m->nbuckets == 1 ? "" : "s");
  if (m->ranks_per_node > 1)
    snprintf(intra + strlen(intra), sizeof(intra) - strlen(intra), ", %.0f us", 1e6 * m->intra_lat);
  PUT("advise: measured compute %.4f s/step (backward window %.4f s); between nodes %s, "
      "%.0f us per round; within a node %s; compression %s; overlap %.2f\n",
      m->compute_s, m->backward_s, inter, 1e6 * m->inter_lat, intra, quant, m->overlap);
  int idx[BAGUA__ADV_COUNT], n = 0;
  for (int i = 0; i < BAGUA__ADV_COUNT; i++)
    if (avail[i]) idx[n++] = i;
  /* Insertion sort by predicted step time: six entries, stable for ties. */
  for (int i = 1; i < n; i++)
    for (int j = i; j > 0 && pred[idx[j]].step_s < pred[idx[j - 1]].step_s; j--) {
      int t = idx[j];
      idx[j] = idx[j - 1];
      idx[j - 1] = t;
    }
  double base =
      avail[BAGUA__ADV_GRADIENT_ALLREDUCE] ? pred[BAGUA__ADV_GRADIENT_ALLREDUCE].step_s : 0;
  PUT("advise: %-4s %-28s %-4s %12s %8s %10s %10s %10s  %s\n", "rank", "algorithm", "hier",
      "pred_s/step", "vs_ga", "comm_s", "exposed_s", "MB/step", "note");
  for (int r = 0; r < n; r++) {
    int i = idx[r];
    const bagua__adv_pred_t *p = &pred[i];
    const char *note = "";
    char run_note[64];
    if (running == i) {
      if (measured_s > 0)
        snprintf(run_note, sizeof(run_note), "running: measured %.4f s/step%s", measured_s,
                 chosen == i ? ", chosen" : "");
      else
        snprintf(run_note, sizeof(run_note), "running%s", chosen == i ? ", chosen" : "");
      note = run_note;
    } else if (chosen == i)
      note = "<- chosen";
    else if (allow && i == BAGUA__ADV_QADAM && !(allow & (1u << i)))
      note = "(needs its own optimizer: not switchable)";
    else if (allow && !(allow & (1u << i)))
      note = "(not allowed)";
    PUT("advise: %-4d %-28s %-4d %12.4f %7.2fx %10.4f %10.4f %10.2f%s%s\n", r + 1,
        bagua__adv_algo_name((bagua__adv_algo_t)i), opts[i].hierarchical, p->step_s,
        p->step_s > 0 && base > 0 ? base / p->step_s : 0.0, p->comm_s, p->exposed_s, p->bytes / 1e6,
        note[0] ? "  " : "", note);
  }
  for (int i = 0; i < BAGUA__ADV_COUNT; i++)
    if (!avail[i])
      PUT("advise: -    %-28s (its settings were refused here)\n",
          bagua__adv_algo_name((bagua__adv_algo_t)i));
#undef PUT
  return o;
}

/* The compute figures of the probe's steps: the median of this rank's steps, then the slowest
 * rank's. */
static bagua_status_t gather_compute(struct bagua__ddp_advise_s *a, double *compute,
                                     double *backward) {
  double v[2] = {median(a->compute, a->seen), median(a->backward, a->seen)};
  BAGUA_CHECK(bagua_allreduce(a->comm, v, v, 2, BAGUA_F64, BAGUA_MAX));
  *compute = v[0];
  *backward = v[1];
  return BAGUA_OK;
}

/* Moves every rank to algorithm `i` (the same decision everywhere: rank 0's, broadcast). */
static bagua_status_t switch_to(bagua_ddp_t *d, int i, const bagua__adv_pred_t *pred) {
  bagua__ddp_settings_t next;
  BAGUA_CHECK(settings_for(d, i, &next));
  /* Switching into async is allowed during its warm-up: one more step of gradient allreduce
   * on the new layout, then background averaging. */
  if ((adv_algo(i)->caps & BAGUA__ALGO_BACKGROUND) && next.warmup_steps <= d->steps)
    next.warmup_steps = (int)d->steps + 1;
  int from = algo_index(d->s.algo);
  if (d->rank == 0)
    fprintf(stderr,
            "advise: algorithm auto: every rank switches from %s to %s at step %lld "
            "(predicted %.4f -> %.4f s/step)\n",
            d->s.algo->name, adv_algo(i)->name, (long long)d->steps,
            from >= 0 ? pred[from].step_s : 0.0, pred[i].step_s);
  return bagua__ddp_reconfigure(d, &next);
}

static bagua_status_t decide(bagua_ddp_t *d, struct bagua__ddp_advise_s *a) {
  double bucket_bytes[d->nbuckets > 0 ? d->nbuckets : 1];
  for (int b = 0; b < d->nbuckets; b++) bucket_bytes[b] = (double)d->buckets[b].count * 4.0;
  size_t ring_min = bagua__comm_ring_min(d->comm);
  bagua__adv_meas_t m = {.ranks = d->size,
                         .nodes = a->nodes,
                         .ranks_per_node = a->rpn,
                         .bucket_bytes = bucket_bytes,
                         .nbuckets = d->nbuckets,
                         .inter_lat = a->inter_lat,
                         .inter_bw = a->inter_bw,
                         .inter_bw_a2a = a->inter_bw_a2a,
                         .inter_bw_p2p = a->inter_bw_p2p,
                         .intra_lat = a->intra_lat,
                         .intra_bw = a->intra_bw,
                         .quant_bw = a->quant_bw,
                         .overlap = a->overlap,
                         /* 0 means "always the ring" here, the model's 0 the default. */
                         .ring_min_bytes = ring_min > 0 ? (double)ring_min : 1.0};
  BAGUA_CHECK(gather_compute(a, &m.compute_s, &m.backward_s));
  int running = algo_index(d->s.algo);
  bagua__adv_opts_t opts[BAGUA__ADV_COUNT];
  bagua__adv_pred_t pred[BAGUA__ADV_COUNT];
  int avail[BAGUA__ADV_COUNT];
  unsigned allow = d->s.auto_allow;
  int chosen = -1;
  for (int i = 0; i < BAGUA__ADV_COUNT; i++) {
    bagua__ddp_settings_t s;
    avail[i] = settings_for(d, i, &s) == BAGUA_OK;
    opts[i] = avail[i] ? opts_of(&s, i) : bagua__adv_default_opts((bagua__adv_algo_t)i);
    pred[i] = bagua__adv_predict(&m, &opts[i]);
    if (avail[i] && (allow & (1u << i)) && (chosen < 0 || pred[i].step_s < pred[chosen].step_s))
      chosen = i;
  }
  if (d->rank == 0) {
    /* The probe's own steps held communication, so they are no measurement of the running
     * algorithm's step: the check after the probe measures that (check()). */
    size_t need =
        bagua__ddp_advise_format(NULL, 0, &m, opts, pred, avail, allow, chosen, running, -1) + 1;
    free(a->table);
    a->table = malloc(need);
    if (a->table) {
      bagua__ddp_advise_format(a->table, need, &m, opts, pred, avail, allow, chosen, running, -1);
      fputs(a->table, stderr);
      fflush(stderr);
    }
  }
  a->check_algo = running;
  a->check_pred = running >= 0 ? pred[running].step_s : 0;
  if (!allow) return BAGUA_OK;
  /* Rank 0 decides: near-ties may order differently on ranks whose clocks differ. */
  int32_t pick = chosen;
  BAGUA_CHECK(bagua_broadcast(a->comm, &pick, &pick, 1, BAGUA_I32, 0));
  if (pick < 0 || pick >= BAGUA__ADV_COUNT || adv_algo(pick) == d->s.algo) return BAGUA_OK;
  a->check_algo = pick;
  a->check_pred = pred[pick].step_s;
  return switch_to(d, pick, pred);
}

/* The end of the check: the median of this rank's steps after the probe, the slowest rank's,
 * against the prediction for the algorithm that ran them (rank 0 prints the line). */
static bagua_status_t check(bagua_ddp_t *d, struct bagua__ddp_advise_s *a) {
  double v = median(a->step, a->seen);
  BAGUA_CHECK(bagua_allreduce(a->comm, &v, &v, 1, BAGUA_F64, BAGUA_MAX));
  if (d->rank == 0 && a->check_algo >= 0 && v > 0) {
    fprintf(stderr,
            "advise: check: %s predicted %.4f s/step, measured %.4f s/step (median of %d steps "
            "after the probe, slowest rank), error %+.1f %%\n",
            bagua__adv_algo_name((bagua__adv_algo_t)a->check_algo), a->check_pred, v, a->seen,
            100.0 * (a->check_pred - v) / v);
    fflush(stderr);
  }
  return BAGUA_OK;
}

/* Under comm_mu: bagua_ddp_abort() may be aborting the communicator from another thread. */
static void drop_comm(bagua_ddp_t *d, struct bagua__ddp_advise_s *a) {
  pthread_mutex_lock(&d->comm_mu);
  bagua_comm_t *c = a->comm;
  a->comm = NULL;
  pthread_mutex_unlock(&d->comm_mu);
  bagua_comm_destroy(c);
}

void bagua__ddp_advise_abort(bagua_ddp_t *d) {
  if (d->advise) bagua_comm_abort(d->advise->comm);
}

/*
 * The probe and the check, one step at a time. The probe's steps run with communication held
 * (bagua__ddp_sched_hold, from bagua__ddp_advise_start on): every job waits for the end of the
 * backward pass and async's averaging does not start, so the step's compute runs alone on the
 * CPUs whatever the algorithm. Its compute time is then the same figure under every
 * algorithm: the step's wall time less the time it waited for communication and less the
 * algorithm's own pre- and post-update work (d->t_algo: decentralized's copy back,
 * low-precision decentralized's exchange), which the model charges per algorithm. Without the
 * hold, the communication thread's work during the backward pass and async's averaging
 * competed with the compute for the CPUs, and low-precision decentralized's exchange counted
 * as compute, so the figure depended on which algorithm happened to run. After the decision
 * communication resumes; one step settles (a switch, async's averaging starting), then
 * `nsteps` steps are timed as they run and compared with the prediction.
 */
bagua_status_t bagua__ddp_advise_step(bagua_ddp_t *d, double first_ready) {
  struct bagua__ddp_advise_s *a = d->advise;
  if (!a || !a->comm) return BAGUA_OK;
  double now = bagua__now_s();
  bagua_status_t st = BAGUA_OK;
  if (!a->done) {
    if (a->t_last > 0 && a->seen < a->nsteps) {
      double step = now - a->t_last, compute = step - d->t_waited - d->t_algo;
      a->step[a->seen] = step;
      a->compute[a->seen] = compute > 0 ? compute : 0;
      a->backward[a->seen] =
          first_ready > 0 && d->t_entry > first_ready ? d->t_entry - first_ready : 0;
      a->seen++;
    }
    if (a->seen < a->nsteps) {
      a->t_last = bagua__now_s(); /* the advisor's own time is no step's */
      return BAGUA_OK;
    }
    a->done = 1;
    /* Before a switch: a rebuild restarts the communication thread with the hold it finds. */
    bagua__ddp_sched_hold(d, 0);
    st = decide(d, a);
    a->seen = 0;
    a->t_last = 0; /* the next step settles and is not timed */
    if (st != BAGUA_OK) drop_comm(d, a);
    return st;
  }
  if (a->t_last > 0 && a->seen < a->nsteps) a->step[a->seen++] = now - a->t_last;
  if (a->seen >= a->nsteps) {
    st = check(d, a);
    drop_comm(d, a);
    return st;
  }
  a->t_last = bagua__now_s();
  return BAGUA_OK;
}

void bagua__ddp_advise_free(bagua_ddp_t *d) {
  struct bagua__ddp_advise_s *a = d->advise;
  if (!a) return;
  drop_comm(d, a);
  free(a->compute);
  free(a->backward);
  free(a->step);
  free(a->table);
  free(a);
  d->advise = NULL;
}

const char *bagua__ddp_advise_table(const bagua_ddp_t *d) {
  return d && d->advise ? d->advise->table : NULL;
}

/* The core reaches the advisor through this row of the tuners' table (ddp/tune.h). */
static bagua_status_t on_step(bagua_ddp_t *d, double first_ready) {
  return d->advise ? bagua__ddp_advise_step(d, first_ready) : BAGUA_OK;
}

const bagua__ddp_tuner_t bagua__ddp_advisor_tuner = {
    .name = "advisor",
    .choose_algorithm = bagua__ddp_auto_pick,
    .on_ready = bagua__ddp_advise_start,
    .on_step = on_step,
    .abort = bagua__ddp_advise_abort,
    .free = bagua__ddp_advise_free,
};
