/*
 * Autotuning of a running data-parallel context (autotune.h; docs/autotune.md).
 *
 * The objective is the throughput of the program's own steps: a trial runs `settle` untimed
 * steps under a setting, then times `sample` steps, and its score is the slowest rank's median
 * seconds per step (an allreduce of the maximum; in a synchronous algorithm the slowest rank
 * sets the pace of all). The search is coordinate descent: starting from the configured setting,
 * each dimension in turn (bucket size, hierarchical, streams, ring threshold, segment) tries a few
 * candidates
 * around the best setting so far while the others stay at their best values, and keeps the best. It
 * is deterministic, needs no model of the objective and ends after at most
 * BAGUA_AUTOTUNE_MAX_SAMPLES trials on the best measured setting. A dimension that cannot matter in
 * this job (one node, one rank per node, no TCP peer) is skipped, and the log says so.
 *
 * Rank 0 decides and broadcasts its decision, so every rank applies the same setting after the
 * same step even if the ranks' measurements or environments differed. Bucket size and
 * hierarchical go through bagua__ddp_reconfigure() (a collective re-bucketing that keeps every
 * rank's own state); streams, segment and ring threshold are communicator settings
 * (comm/tune.h).
 */
#include "autotune.h"
#include "../tune.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/tune.h"
#include "common/check.h"
#include "common/log.h"
#include "common/output.h"
#include "common/params.h"
#include "common/time.h"
#include "../ddp_internal.h"

#define TOOL "bagua autotune"
#define MAX_TUNED_STREAMS 4
#define MAX_CANDIDATES 8

/* The ring threshold comes before the segment: it decides whether small buckets use the ring at
 * all, it has at most a few candidates (none when every bucket is large), and the trial budget
 * (BAGUA_AUTOTUNE_MAX_SAMPLES) may run out before the last dimension. */
enum { DIM_BUCKET = 0, DIM_HIER, DIM_STREAMS, DIM_RING, DIM_SEGMENT, NDIMS };
static const char *const k_dim_names[NDIMS] = {"bucket size", "hierarchical", "streams",
                                               "ring threshold", "segment"};

typedef struct {
  bagua__autotune_point_t p;
  int64_t step;   /* d->steps when the trial's timing ended */
  double s_step;  /* slowest rank's seconds per step */
  double samples; /* samples per second over all ranks; < 0 when the program counts none */
} trial_t;

struct bagua__autotune_s {
  int warmup, sample, settle, max_samples;
  int done;
  /* The trial under way: it began (its setting was applied) after step `phase_start`; its
   * timing starts `settle_now` steps later. */
  int64_t phase_start;
  int settle_now;
  double t_start, t_prev;
  double *dur; /* the timed window's step durations (`sample` of them) */
  int64_t samples_start;
  bagua__autotune_point_t cur;
  trial_t *trials;
  int ntrials, best;
  /* Search position (rank 0's): the dimension and the next candidate of its list. */
  int dim, cand_next, ncand;
  int confirm; /* re-measurements planned so far (best, then runner-up) */
  int64_t cand[MAX_CANDIDATES];
  int skip[NDIMS]; /* the dimension cannot matter here (or may not change) */
  int changes;
  int64_t first_change, last_change;
};

/* ------------------------------------------------------------------------------------------ */
/* configuration                                                                              */
/* ------------------------------------------------------------------------------------------ */

static int tuning_requested(const bagua_ddp_t *d) {
  return bagua__param_int(BAGUA_P_AUTOTUNE) == 1 && !(d->s.algo->caps & BAGUA__ALGO_BACKGROUND);
}

uint64_t bagua__autotune_fingerprint(const bagua_ddp_t *d) {
  if (!tuning_requested(d)) return 0;
  uint64_t h = 0x9e3779b97f4a7c15ULL;
  const bagua__param_id_t ids[] = {BAGUA_P_AUTOTUNE_WARMUP_STEPS, BAGUA_P_AUTOTUNE_SAMPLE_STEPS,
                                   BAGUA_P_AUTOTUNE_SETTLE_STEPS, BAGUA_P_AUTOTUNE_MAX_SAMPLES};
  for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++)
    h = (h ^ (uint64_t)bagua__param_int(ids[i])) * 0x100000001b3ULL;
  return h;
}

bagua_status_t bagua__autotune_comm_split(bagua_ddp_t *d, bagua_comm_t *comm, bagua_comm_t **out) {
  (void)d;
  /* Ranks that disagree on BAGUA_AUTOTUNE would open different numbers of streams below and
   * call different collectives later: say so now, on every rank, instead of timing out. */
  int64_t on = bagua__param_int(BAGUA_P_AUTOTUNE), v[2] = {on, -on};
  BAGUA_CHECK(bagua_allreduce(comm, v, v, 2, BAGUA_I64, BAGUA_MIN));
  if (v[0] != -v[1]) {
    BAGUA_WARN(
        "bagua_ddp_create: BAGUA_AUTOTUNE is %lld here but differs on another rank; accepted: "
        "the same value on every rank (bagua-launch --autotune sets it for all)",
        (long long)on);
    return BAGUA_ERR_INVALID_USAGE;
  }
  int base = bagua__comm_streams(comm);
  if (!on || base == 0 || base >= MAX_TUNED_STREAMS)
    return bagua_comm_split(comm, 0, bagua_comm_rank(comm), out);
  /* Every rank asks for the same number of streams: the same BAGUA_AUTOTUNE (checked above)
   * and the same parent. async is never tuned, but opens them too, so that the count depends
   * on nothing else. */
  BAGUA_CHECK(bagua__comm_split_streams(comm, 0, bagua_comm_rank(comm), MAX_TUNED_STREAMS, out));
  bagua_status_t st = bagua__comm_set_streams(*out, base);
  if (st != BAGUA_OK) {
    bagua_comm_destroy(*out);
    *out = NULL;
  }
  return st;
}

/* ------------------------------------------------------------------------------------------ */
/* settings                                                                                   */
/* ------------------------------------------------------------------------------------------ */

static bagua__autotune_point_t current_point(const bagua_ddp_t *d) {
  bagua__autotune_point_t p = {(int64_t)d->s.bucket_bytes, d->s.hierarchical,
                               bagua__comm_streams(d->comm), (int64_t)bagua__comm_segment(d->comm),
                               (int64_t)bagua__comm_ring_min(d->comm)};
  return p;
}

static int same_point(const bagua__autotune_point_t *a, const bagua__autotune_point_t *b) {
  return a->bucket_bytes == b->bucket_bytes && a->hierarchical == b->hierarchical &&
         a->streams == b->streams && a->segment_bytes == b->segment_bytes &&
         a->ring_min_bytes == b->ring_min_bytes;
}

/* Applies `p` on this rank; collective when the layout changes. Every rank calls it with the
 * same point after the same step. */
static bagua_status_t apply_point(bagua_ddp_t *d, const bagua__autotune_point_t *p) {
  if ((size_t)p->bucket_bytes != d->s.bucket_bytes || p->hierarchical != d->s.hierarchical) {
    bagua__ddp_settings_t next = d->s;
    next.bucket_bytes = (size_t)p->bucket_bytes;
    next.hierarchical = p->hierarchical;
    BAGUA_CHECK(bagua__ddp_reconfigure(d, &next));
  }
  /* The node-level communicators a reconfiguration split inherit d->comm's values; set all of
   * them anyway so that the point holds whatever was split when. */
  bagua_comm_t *comms[3] = {d->comm, d->intra, d->inter};
  for (int i = 0; i < 3; i++) {
    if (!comms[i]) continue;
    if (p->streams > 0 && bagua__comm_max_streams(comms[i]) > 0)
      BAGUA_CHECK(bagua__comm_set_streams(comms[i], p->streams));
    BAGUA_CHECK(bagua__comm_set_segment(comms[i], (size_t)p->segment_bytes));
    BAGUA_CHECK(bagua__comm_set_ring_min(comms[i], (size_t)p->ring_min_bytes));
  }
  return BAGUA_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* search (rank 0)                                                                            */
/* ------------------------------------------------------------------------------------------ */

/* The bucket partition a bucket size gives (bucket.c's greedy rule), as a fingerprint: sizes
 * with equal partitions are the same setting and are measured once. */
static uint64_t partition_sig(const bagua_ddp_t *d, int64_t bucket_bytes) {
  uint64_t h = 0xcbf29ce484222325ULL;
  size_t acc = 0;
  for (int i = 0; i < d->ntensors; i++) {
    acc += d->tensors[i].count * sizeof(float);
    if (acc >= (size_t)bucket_bytes || i == d->ntensors - 1) {
      h = (h ^ (uint64_t)i) * 0x100000001b3ULL;
      acc = 0;
    }
  }
  return h;
}

/* Whether allreduce would take the ring for a bucket of `bytes` under threshold `ring_min`
 * (comm/tcp/coll.c's rule, without its element-count condition, which a threshold cannot
 * change). */
static int rings(int64_t bytes, int64_t ring_min) {
  return bytes >= ring_min;
}

/* Whether threshold `v` sends some bucket through another algorithm than threshold `cur`:
 * thresholds that agree on every bucket are the same setting. */
static int ring_changes(const bagua_ddp_t *d, int64_t v, int64_t cur) {
  for (int i = 0; i < d->nbuckets; i++) {
    int64_t bytes = (int64_t)(d->buckets[i].count * sizeof(float));
    if (rings(bytes, v) != rings(bytes, cur)) return 1;
  }
  return 0;
}

static int add_candidate(struct bagua__autotune_s *at, int64_t v) {
  for (int i = 0; i < at->ncand; i++)
    if (at->cand[i] == v) return 0;
  if (at->ncand < MAX_CANDIDATES) at->cand[at->ncand++] = v;
  return 1;
}

/* Fills the candidates of dimension `dim` around the best point so far. */
static void plan_dim(bagua_ddp_t *d, struct bagua__autotune_s *at, int dim) {
  const bagua__autotune_point_t *b = &at->trials[at->best].p;
  at->ncand = at->cand_next = 0;
  if (at->skip[dim]) return;
  if (dim == DIM_BUCKET) {
    /* Powers of 4 around the best size, nearest first; sizes that give a partition already
     * planned (or the best's own) are left out. */
    static const int shifts[] = {2, -2, 4, -4};
    int64_t lo, hi;
    bagua__param_bounds(BAGUA_P_BUCKET_SIZE, &lo, &hi);
    uint64_t seen[1 + MAX_CANDIDATES];
    int nseen = 0;
    seen[nseen++] = partition_sig(d, b->bucket_bytes);
    for (size_t i = 0; i < sizeof(shifts) / sizeof(shifts[0]); i++) {
      int64_t v = shifts[i] > 0 ? b->bucket_bytes << shifts[i] : b->bucket_bytes >> -shifts[i];
      if (v < lo || v > hi) continue;
      uint64_t sig = partition_sig(d, v);
      int dup = 0;
      for (int k = 0; k < nseen; k++) dup |= seen[k] == sig;
      if (dup) continue;
      seen[nseen++] = sig;
      add_candidate(at, v);
    }
  } else if (dim == DIM_HIER) {
    add_candidate(at, !b->hierarchical);
  } else if (dim == DIM_STREAMS) {
    int max = bagua__comm_max_streams(d->comm);
    for (int n = 1; n <= max && n <= MAX_TUNED_STREAMS; n *= 2)
      if (n != b->streams) add_candidate(at, n);
  } else if (dim == DIM_SEGMENT) {
    static const int64_t segs[] = {1 << 20, 1 << 16, 1 << 22, 1 << 18};
    for (size_t i = 0; i < sizeof(segs) / sizeof(segs[0]); i++)
      if (segs[i] != b->segment_bytes) add_candidate(at, segs[i]);
  } else {
    /* On slow links the ring wins from a few KiB, on fast ones recursive doubling up to a few
     * hundred KiB (docs/autotune.md); only values that move some bucket are measured. */
    static const int64_t mins[] = {4 << 10, 1 << 20, 16 << 10, 256 << 10};
    for (size_t i = 0; i < sizeof(mins) / sizeof(mins[0]); i++) {
      int dup = 0;
      for (int k = 0; k < at->ncand; k++) dup |= !ring_changes(d, mins[i], at->cand[k]);
      if (!dup && ring_changes(d, mins[i], b->ring_min_bytes)) add_candidate(at, mins[i]);
    }
  }
}

/* The mean score of trial i's point over every trial that measured it, and how many did. */
static double point_mean(const struct bagua__autotune_s *at, int i, int *count) {
  double sum = 0;
  int n = 0;
  for (int j = 0; j < at->ntrials; j++)
    if (same_point(&at->trials[j].p, &at->trials[i].p)) {
      sum += at->trials[j].s_step;
      n++;
    }
  if (count) *count = n;
  return sum / n;
}

/* The first trial of the point with the lowest mean score, leaving out trial `except`'s point
 * (-1: none); -1 when no point is left. */
static int ranked(const struct bagua__autotune_s *at, int not ) {
  int best = -1;
  double best_s = 0;
  for (int i = 0; i < at->ntrials; i++) {
    int first = 1;
    for (int j = 0; j < i && first; j++) first = !same_point(&at->trials[j].p, &at->trials[i].p);
    if (!first || (not >= 0 && same_point(&at->trials[i].p, &at->trials[not ].p))) continue;
    double m = point_mean(at, i, NULL);
    if (best < 0 || m < best_s) best = i, best_s = m;
  }
  return best;
}

/* Rank 0: the next point to measure, or 0 when the search is over (then *p is the best). */
static int next_point(bagua_ddp_t *d, struct bagua__autotune_s *at, bagua__autotune_point_t *p) {
  *p = at->trials[at->best].p;
  if (at->ntrials >= at->max_samples) return 0;
  while (at->dim < NDIMS) {
    if (at->cand_next < at->ncand) {
      int64_t v = at->cand[at->cand_next++];
      switch (at->dim) {
        case DIM_BUCKET:
          p->bucket_bytes = v;
          break;
        case DIM_HIER:
          p->hierarchical = (int)v;
          break;
        case DIM_STREAMS:
          p->streams = (int)v;
          break;
        case DIM_RING:
          p->ring_min_bytes = v;
          break;
        default:
          p->segment_bytes = v;
          break;
      }
      return 1;
    }
    if (++at->dim < NDIMS) plan_dim(d, at, at->dim);
  }
  /* Every candidate was measured once. A single short window can flatter a setting, so the
   * best point and the runner-up are measured once more while the budget lasts, and the
   * choice goes by the mean of each point's trials. */
  while (at->confirm < 2) {
    int idx = at->confirm++ == 0 ? at->best : ranked(at, at->best);
    int n = 0;
    if (idx >= 0) point_mean(at, idx, &n);
    if (idx >= 0 && n == 1) {
      *p = at->trials[idx].p;
      return 1;
    }
  }
  return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* reporting (rank 0)                                                                         */
/* ------------------------------------------------------------------------------------------ */

static void say_point(char *buf, size_t len, const bagua__autotune_point_t *p) {
  snprintf(buf, len, "bucket %lld B, hierarchical %d, streams %d, segment %lld B, ring from %lld B",
           (long long)p->bucket_bytes, p->hierarchical, p->streams, (long long)p->segment_bytes,
           (long long)p->ring_min_bytes);
}

/* Rewrites BAGUA_LOG_DIR/autotune.csv whole (a few rows): `chosen` marks the best trial so
 * far, which is the final choice once the search is over. Written to a temporary name and
 * renamed, so a reader never sees half a file. */
static void write_csv(const struct bagua__autotune_s *at) {
  const char *dir = bagua__param_str(BAGUA_P_LOG_DIR);
  if (!dir || !dir[0]) return;
  char path[4096], tmp[4200];
  snprintf(path, sizeof(path), "%s/autotune.csv", dir);
  snprintf(tmp, sizeof(tmp), "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  if (!f) {
    BAGUA_WARN("autotune: cannot write %s: %s (the trials are still logged on stderr)", tmp,
               strerror(errno));
    return;
  }
  fprintf(f,
          "trial,step,bucket_bytes,hierarchical,streams,segment_bytes,ring_min_bytes,"
          "seconds_per_step,samples_per_s,chosen\n");
  for (int i = 0; i < at->ntrials; i++) {
    const trial_t *t = &at->trials[i];
    char sps[32] = "";
    if (t->samples >= 0) snprintf(sps, sizeof(sps), "%.1f", t->samples);
    fprintf(f, "%d,%lld,%lld,%d,%d,%lld,%lld,%.6g,%s,%d\n", i, (long long)t->step,
            (long long)t->p.bucket_bytes, t->p.hierarchical, t->p.streams,
            (long long)t->p.segment_bytes, (long long)t->p.ring_min_bytes, t->s_step, sps,
            i == at->best);
  }
  int bad = ferror(f);
  if (fclose(f) != 0 || bad || rename(tmp, path) != 0) {
    BAGUA_WARN("autotune: cannot write %s: %s", path, strerror(errno));
    remove(tmp);
  }
}

/* ------------------------------------------------------------------------------------------ */
/* the step hook                                                                              */
/* ------------------------------------------------------------------------------------------ */

/* Creates the state at the first step; tuning that cannot run here is marked done at once. */
static bagua_status_t start(bagua_ddp_t *d) {
  struct bagua__autotune_s *at = calloc(1, sizeof(*at));
  if (!at) return BAGUA_ERR_NO_MEMORY;
  d->autotune = at;
  at->warmup = (int)bagua__param_int(BAGUA_P_AUTOTUNE_WARMUP_STEPS);
  at->sample = (int)bagua__param_int(BAGUA_P_AUTOTUNE_SAMPLE_STEPS);
  at->settle = (int)bagua__param_int(BAGUA_P_AUTOTUNE_SETTLE_STEPS);
  at->max_samples = (int)bagua__param_int(BAGUA_P_AUTOTUNE_MAX_SAMPLES);
  at->first_change = at->last_change = -1;
  at->cur = current_point(d);
  at->trials = calloc((size_t)at->max_samples, sizeof(*at->trials));
  at->dur = calloc((size_t)at->sample, sizeof(*at->dur));
  if (!at->trials || !at->dur) return BAGUA_ERR_NO_MEMORY;
  int r0 = d->rank == 0;
  if ((d->s.algo->caps & BAGUA__ALGO_BACKGROUND) || d->el.e) {
    /* Background averaging (async): past its warm-up the ranks are not at one step, so no step
     * boundary is common to all of them. Elastic: a rebuild may bring ranks that are at another
     * point of the search. */
    at->done = 1;
    if (r0)
      bagua__say(TOOL, "not tuning: %s",
                 d->el.e ? "an elastic context is attached (a rebuild would mix search states)"
                         : "the ranks of an algorithm that averages in the background are not "
                           "at a common step");
    return BAGUA_OK;
  }
  /* Skipped dimensions: what cannot change the time of a step here. */
  const char *why[NDIMS] = {NULL};
  if (d->released)
    why[DIM_BUCKET] = why[DIM_HIER] = "the parameters were released (zero-copy views)";
  if (!why[DIM_BUCKET] && d->ntensors < 2) why[DIM_BUCKET] = "one tensor is always one bucket";
  if (!why[DIM_HIER] && (d->node_count < 2 || d->node_count >= d->size))
    why[DIM_HIER] = d->node_count < 2 ? "all ranks share one node" : "one rank per node";
  if (d->s.dev != &bagua__ddp_dev_cpu)
    why[DIM_STREAMS] = why[DIM_SEGMENT] = why[DIM_RING] =
        "the buffers are on the GPU, NCCL moves them";
  if (!why[DIM_STREAMS] && bagua__comm_max_streams(d->comm) < 2)
    why[DIM_STREAMS] = bagua__comm_max_streams(d->comm) == 0 ? "no peer on another node"
                                                             : "one stream opened per peer";
  if (!why[DIM_SEGMENT] && !bagua__comm_uses_ring(d->comm) && !bagua__comm_uses_ring(d->inter))
    why[DIM_SEGMENT] = "no TCP ring runs (shared memory, or BAGUA_NET_RING_PIPELINE=0)";
  if (!why[DIM_RING] && !bagua__comm_uses_tcp(d->comm) && !bagua__comm_uses_tcp(d->inter))
    why[DIM_RING] = "no TCP collectives run (shared memory)";
  else if (!why[DIM_RING] && !(d->s.algo->caps & BAGUA__ALGO_ALLREDUCE))
    why[DIM_RING] = "this algorithm's buckets do not go through allreduce";
  for (int k = 0; k < NDIMS; k++) at->skip[k] = why[k] != NULL;
  at->settle_now = at->warmup > 0 ? at->warmup : 1;
  at->phase_start = 0;
  at->dim = -1;
  if (r0) {
    char pt[200];
    say_point(pt, sizeof(pt), &at->cur);
    bagua__say(TOOL,
               "%s on %d ranks, %d node(s): up to %d trials of %d timed steps (after %d warm-up, "
               "%d settle steps each), starting from %s",
               d->s.algo->name, d->size, d->node_count, at->max_samples, at->sample, at->warmup,
               at->settle, pt);
    for (int k = 0; k < NDIMS; k++)
      if (why[k]) bagua__say(TOOL, "not tuning %s: %s", k_dim_names[k], why[k]);
  }
  return BAGUA_OK;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* The median step of the window: on a shared machine a burst of load elsewhere stretches a
 * step or two, which would decide a mean but not the median. */
static double median_step(struct bagua__autotune_s *at) {
  qsort(at->dur, (size_t)at->sample, sizeof(*at->dur), cmp_double);
  int k = at->sample / 2;
  return at->sample % 2 ? at->dur[k] : 0.5 * (at->dur[k - 1] + at->dur[k]);
}

/* The end of a trial: every rank is here after the same step. */
static bagua_status_t end_trial(bagua_ddp_t *d, struct bagua__autotune_s *at) {
  double now = bagua__now_s();
  /* The next step's work (decentralized's weight exchange) may already run on d->comm; the
   * collectives below and a reconfiguration need the communication thread idle. */
  BAGUA_CHECK(bagua__ddp_wait(d));
  double mean = (now - at->t_start) / at->sample;
  double v[2] = {median_step(at), (double)(d->samples - at->samples_start)};
  BAGUA_CHECK(bagua_allreduce(d->comm, &v[0], &v[0], 1, BAGUA_F64, BAGUA_MAX));
  BAGUA_CHECK(bagua_allreduce(d->comm, &v[1], &v[1], 1, BAGUA_F64, BAGUA_SUM));
  trial_t *t = &at->trials[at->ntrials];
  t->p = at->cur;
  t->step = d->steps;
  t->s_step = v[0];
  /* Samples over the whole window (all ranks' counts, this rank's clock). */
  t->samples = v[1] > 0 && mean > 0 ? v[1] / (mean * at->sample) : -1;
  int idx = at->ntrials++;
  at->best = ranked(at, -1);

  /* Rank 0 decides; everyone applies what it decided. */
  int64_t rec[6] = {0};
  if (d->rank == 0) {
    if (at->dim < 0) {
      at->dim = 0;
      plan_dim(d, at, 0);
    }
    bagua__autotune_point_t p;
    int more = next_point(d, at, &p);
    rec[0] = p.bucket_bytes;
    rec[1] = p.hierarchical;
    rec[2] = p.streams;
    rec[3] = p.segment_bytes;
    rec[4] = p.ring_min_bytes;
    rec[5] = !more;
  }
  BAGUA_CHECK(bagua_broadcast(d->comm, rec, rec, 6, BAGUA_I64, 0));
  bagua__autotune_point_t next = {rec[0], (int)rec[1], (int)rec[2], rec[3], rec[4]};
  int over = (int)rec[5];
  if (d->rank == 0) {
    char pt[200], bp[200];
    say_point(pt, sizeof(pt), &t->p);
    say_point(bp, sizeof(bp), &at->trials[at->best].p);
    char sps[48] = "", again[64] = "";
    if (t->samples >= 0) snprintf(sps, sizeof(sps), ", %.0f samples/s", t->samples);
    int n = 0;
    double m = point_mean(at, idx, &n);
    if (n > 1) snprintf(again, sizeof(again), ", measured again: mean %.6f s/step", m);
    bagua__say(TOOL, "trial %d/%d at step %lld: %s: %.6f s/step (%.1f steps/s%s%s); best: trial %d",
               idx + 1, at->max_samples, (long long)t->step, pt, t->s_step, 1.0 / t->s_step, sps,
               again, at->best + 1);
    write_csv(at);
    if (over)
      bagua__say(TOOL,
                 "done after %d trials at step %lld: chose trial %d, %s (%.6f s/step, %.2fx "
                 "the starting setting)",
                 at->ntrials, (long long)d->steps, at->best + 1, bp, point_mean(at, at->best, NULL),
                 point_mean(at, 0, NULL) / point_mean(at, at->best, NULL));
  }
  if (!same_point(&next, &at->cur)) {
    BAGUA_CHECK(apply_point(d, &next));
    at->cur = current_point(d);
    if (at->first_change < 0) at->first_change = d->steps;
    at->last_change = d->steps;
    at->changes++;
  }
  at->done = over;
  at->phase_start = d->steps;
  at->settle_now = at->settle;
  at->t_prev = bagua__now_s(); /* the re-bucketing is no step of the next trial */
  if (at->settle_now == 0) {
    at->t_start = at->t_prev;
    at->samples_start = d->samples;
  }
  return BAGUA_OK;
}

bagua_status_t bagua__autotune_step(bagua_ddp_t *d) {
  struct bagua__autotune_s *at = d->autotune;
  if (!at) {
    if (!bagua__param_int(BAGUA_P_AUTOTUNE)) return BAGUA_OK;
    bagua_status_t st = start(d);
    if (st != BAGUA_OK) return bagua__ddp_fail(d, st);
    at = d->autotune;
  }
  if (at->done) return BAGUA_OK;
  if (d->s.algo->caps & BAGUA__ALGO_BACKGROUND) {
    /* Another step-boundary hook (the advisor's algorithm "auto") moved every rank to async,
     * whose ranks leave the common step: stop here, on the setting in effect. */
    at->done = 1;
    if (d->rank == 0) bagua__say(TOOL, "stopped: the context now runs async");
    return BAGUA_OK;
  }
  int64_t in_phase = d->steps - at->phase_start;
  double now = bagua__now_s();
  if (in_phase > at->settle_now && in_phase <= at->settle_now + at->sample)
    at->dur[in_phase - at->settle_now - 1] = now - at->t_prev;
  at->t_prev = now;
  if (in_phase == at->settle_now) {
    at->t_start = now;
    at->samples_start = d->samples;
  }
  if (in_phase < at->settle_now + at->sample) return BAGUA_OK;
  bagua_status_t st = end_trial(d, at);
  return st == BAGUA_OK ? st : bagua__ddp_fail(d, st);
}

void bagua__autotune_free(bagua_ddp_t *d) {
  if (!d || !d->autotune) return;
  free(d->autotune->trials);
  free(d->autotune->dur);
  free(d->autotune);
  d->autotune = NULL;
}

void bagua__autotune_info(const bagua_ddp_t *d, bagua__autotune_info_t *out) {
  memset(out, 0, sizeof(*out));
  out->first_change_step = out->last_change_step = -1;
  const struct bagua__autotune_s *at = d ? d->autotune : NULL;
  if (!at) return;
  out->enabled = 1;
  out->done = at->done;
  out->trials = at->ntrials;
  out->changes = at->changes;
  out->first_change_step = at->first_change;
  out->last_change_step = at->last_change;
  out->current = at->cur;
}

/* The core reaches autotuning through this row of the tuners' table (ddp/tune.h). */
static bagua_status_t on_step(bagua_ddp_t *d, double first_ready) {
  (void)first_ready;
  return bagua__autotune_step(d);
}

const bagua__ddp_tuner_t bagua__ddp_autotune_tuner = {
    .name = "autotune",
    .comm_split = bagua__autotune_comm_split,
    .fingerprint = bagua__autotune_fingerprint,
    .on_step = on_step,
    .free = bagua__autotune_free,
};
