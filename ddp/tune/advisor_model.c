/*
 * The advisor's prediction model; advisor_model.h states the formulas and the overlap
 * assumption, docs/advisor.md explains them. Every algorithm is costed from the traffic its
 * file in ddp/algorithms/ really sends, per bucket or per model, with the collective shapes
 * of comm/tcp/coll.c.
 */
#include "advisor_model.h"

#include <math.h>

/* Messages below the ring threshold take the latency-optimal allreduce (comm/tcp/coll.c);
 * this is BAGUA_NET_RING_MIN_BYTES's default. */
#define DEFAULT_RING_MIN 65536.0

static const char *const k_names[BAGUA__ADV_COUNT] = {
    "gradient_allreduce",          "bytegrad", "decentralized",
    "low_precision_decentralized", "qadam",    "async"};

const char *bagua__adv_algo_name(bagua__adv_algo_t a) {
  return a >= 0 && a < BAGUA__ADV_COUNT ? k_names[a] : "?";
}

bagua__adv_opts_t bagua__adv_default_opts(bagua__adv_algo_t a) {
  bagua__adv_opts_t o = {.algo = a, .peer_mode = 0, .comm_interval = 1, .sync_interval_ms = 500};
  o.hierarchical = a != BAGUA__ADV_GRADIENT_ALLREDUCE && a != BAGUA__ADV_ASYNC;
  return o;
}

/* One link's figures and the number of participants of a collective. */
typedef struct {
  int p;
  double lat, bw; /* bw: ring allreduce and allgather */
  double bw_a2a, bw_p2p;
  double ring_min; /* allreduce: the ring from this many bytes */
} net_t;

static double log2_ceil(int p) {
  return p > 1 ? ceil(log2((double)p)) : 0.0;
}

static double xfer_at(double bw, double bytes) {
  return bw > 0 ? bytes / bw : 0.0;
}

static double xfer(const net_t *n, double bytes) {
  return xfer_at(n->bw, bytes);
}

/* Allreduce of s bytes; *sent gets the bytes this participant sends. */
static double allreduce(const net_t *n, double s, double *sent) {
  if (n->p <= 1) return 0.0;
  if (s < n->ring_min) {
    *sent += log2_ceil(n->p) * s;
    return log2_ceil(n->p) * (n->lat + xfer(n, s));
  }
  double b = 2.0 * (n->p - 1) / n->p * s;
  *sent += b;
  return 2.0 * (n->p - 1) * n->lat + xfer(n, b);
}

/* Alltoall (a2a 1) or allgather (ring) of a buffer of s bytes in p blocks. The ring takes
 * p - 1 rounds; the alltoall sends every block at once (TCP and NCCL alike), so one. */
static double exchange_all(const net_t *n, double s, int a2a, double *sent) {
  if (n->p <= 1) return 0.0;
  double b = (double)(n->p - 1) / n->p * s;
  *sent += b;
  return (a2a ? 1 : n->p - 1) * n->lat + xfer_at(a2a ? n->bw_a2a : n->bw, b);
}

static double sendrecv(const net_t *n, double s, double *sent) {
  if (n->p <= 1) return 0.0;
  *sent += s;
  return n->lat + xfer_at(n->bw_p2p, s);
}

/* One exchange with both ring neighbours at once (bagua_neighbor_exchange): s bytes to each,
 * so 2s through this rank's link, and one round of latency instead of two. With two ranks
 * both neighbours are one peer and the algorithms make a single sendrecv. */
static double neighbors(const net_t *n, double s, double *sent) {
  if (n->p <= 2) return sendrecv(n, s, sent);
  *sent += 2 * s;
  return n->lat + xfer_at(n->bw_p2p, 2 * s);
}

/* Bytes of MinMaxUInt8 regions for `elems` f32 elements in `chunks` chunks (kernels.h). */
static double compressed(double elems, int chunks) {
  double per = ceil(elems / chunks / 32.0) * 32.0;
  return chunks * (32.0 + per);
}

typedef struct {
  const bagua__adv_meas_t *m;
  int hier;
  net_t top;  /* the algorithm's communicator: all ranks, or node leaders */
  net_t flat; /* the same for a pattern that is not a ring (alltoall, peers): NIC shared */
  double node_lat, node_bw;
  double sent, quant;
} ctx_t;

static ctx_t context(const bagua__adv_meas_t *m, int hier) {
  ctx_t c = {.m = m, .hier = hier && m->ranks_per_node > 1};
  int r = m->ranks_per_node > 0 ? m->ranks_per_node : 1;
  int single_node = m->nodes <= 1;
  /* On one node the flat communicator runs at the node's speed. */
  double lat = single_node && r > 1 ? m->intra_lat : m->inter_lat;
  double bw = single_node && r > 1 ? m->intra_bw : m->inter_bw;
  double a2a = m->inter_bw_a2a > 0 ? m->inter_bw_a2a : m->inter_bw;
  double p2p = m->inter_bw_p2p > 0 ? m->inter_bw_p2p : m->inter_bw;
  double ring_min = m->ring_min_bytes > 0 ? m->ring_min_bytes : DEFAULT_RING_MIN;
  if (hier) {
    c.top = (net_t){m->nodes, m->inter_lat, m->inter_bw, a2a, p2p, ring_min};
    c.flat = c.top;
  } else {
    if (single_node && r > 1) a2a = p2p = bw;
    c.top = (net_t){m->ranks, lat, bw, a2a, p2p, ring_min};
    /* A ring crosses each node boundary once per direction, so it runs at one link's
     * speed; an alltoall or a peer exchange puts all r ranks of a node on its one link. */
    c.flat = c.top;
    if (!single_node && r > 1) {
      c.flat.bw_a2a = a2a / r;
      c.flat.bw_p2p = p2p / r;
    }
  }
  c.node_lat = m->intra_lat;
  c.node_bw = m->intra_bw;
  return c;
}

/* Hierarchical: reduce onto the node leader and broadcast back (two tree-shaped passes). */
static double node_cost(ctx_t *c, double s) {
  int r = c->m->ranks_per_node;
  if (!c->hier || r <= 1) return 0.0;
  double t = log2_ceil(r) * c->node_lat + (c->node_bw > 0 ? (r - 1.0) / r * s / c->node_bw : 0.0);
  return 2.0 * t;
}

static double quant(ctx_t *c, double bytes) {
  double t = c->m->quant_bw > 0 ? bytes / c->m->quant_bw : 0.0;
  c->quant += t;
  return t;
}

/* Centralized per-bucket op: full precision allreduce, or ByteGrad's 8-bit scatter-gather. */
static double bucket_cost(ctx_t *c, double b, int compressed_op) {
  double t = node_cost(c, b);
  if (!compressed_op) return t + allreduce(&c->top, b, &c->sent);
  int p = c->top.p;
  if (p <= 1) return t;
  double cb = compressed(b / 4.0, p);
  t += exchange_all(&c->flat, cb, 1, &c->sent); /* alltoall */
  t += exchange_all(&c->top, cb, 0, &c->sent);  /* allgather (a ring) */
  /* Compress the bucket, decompress the p received chunks, compress the own chunk,
   * decompress the gathered bucket. */
  return t + quant(c, (3.0 + 1.0 / p) * b);
}

static double eta(const bagua__adv_meas_t *m) {
  return m->overlap < 0 ? 0.0 : m->overlap > 1 ? 1.0 : m->overlap;
}

double bagua__adv_overlap_efficiency(int cores, int ranks) {
  if (ranks <= 0 || cores >= 2 * ranks) return 1.0;
  return cores > ranks ? (double)(cores - ranks) / ranks : 0.0;
}

/* When work of `t` seconds (alone) that starts at `start` ends, progressing at `eta` of its
 * speed before `w` (the end of the compute it overlaps) and at full speed after. */
static double finish(double start, double t, double w, double eta) {
  if (start >= w) return start + t;
  double before = (w - start) * eta;
  if (eta > 0 && before >= t) return start + t / eta;
  return w + (t - before);
}

/* Buckets ready at a uniform byte rate over the backward window, run in order. */
static void centralized(ctx_t *c, int compressed_op, bagua__adv_pred_t *out) {
  const bagua__adv_meas_t *m = c->m;
  double total = 0, cum = 0, t_free = 0, comm = 0;
  for (int i = 0; i < m->nbuckets; i++) total += m->bucket_bytes[i];
  double w = m->backward_s < m->compute_s ? m->backward_s : m->compute_s;
  if (w < 0) w = 0;
  for (int i = 0; i < m->nbuckets; i++) {
    double b = m->bucket_bytes[i];
    cum += b;
    double ready = total > 0 ? w * cum / total : w;
    double t = bucket_cost(c, b, compressed_op);
    comm += t;
    t_free = finish(t_free > ready ? t_free : ready, t, w, eta(m));
  }
  out->comm_s = comm;
  out->exposed_s = t_free > w ? t_free - w : 0.0;
}

static double model_bytes(const bagua__adv_meas_t *m) {
  double s = 0;
  for (int i = 0; i < m->nbuckets; i++) s += m->bucket_bytes[i];
  return s;
}

/* Decentralized: one exchange of the weights every comm_interval steps, overlapping the
 * forward and backward passes that follow the step that launched it. Besides the network it
 * makes passes over the model, in the units low_precision() uses (one unit: a copy): the copy
 * of the weights into the exchange buffer, shift_one's add (1.5) and halving (1), ring's two
 * adds and division, all on the exchange's side; and the copy of the average back into the
 * weights before the update, on the step's own path, where nothing hides it. */
static void decentralized(ctx_t *c, const bagua__adv_opts_t *o, bagua__adv_pred_t *out) {
  double s = model_bytes(c->m), t = node_cost(c, s), passes = 1.0;
  switch (o->peer_mode) {
    case 1: /* shift_one */
      t += sendrecv(&c->flat, s, &c->sent);
      passes += 2.5;
      break;
    case 2: /* ring: both neighbours at once */
      t += neighbors(&c->flat, s, &c->sent);
      passes += 4.0;
      break;
    default:
      t += allreduce(&c->top, s, &c->sent);
  }
  t += quant(c, passes * s);
  double back = quant(c, s);
  double exposed = finish(0.0, t, c->m->compute_s, eta(c->m)) - c->m->compute_s;
  if (exposed < 0) exposed = 0.0;
  out->comm_s = t + back;
  out->exposed_s = exposed + back;
}

/* Low-precision decentralized: after the optimizer, compressed differences to both ring
 * neighbours, waited for at once. */
static void low_precision(ctx_t *c, bagua__adv_pred_t *out) {
  double s = model_bytes(c->m), t = node_cost(c, s);
  int p = c->top.p;
  if (p > 1) {
    double cb = compressed(s / 4.0, 1);
    t += neighbors(&c->flat, cb, &c->sent);
    /* Passes over the model, in units of one compression (or decompression): the
     * difference (four arrays, two units), its compression, two decompress-adds, the own
     * decompression, the axpy (one and a half) and the copy into the replica (one). */
    t += quant(c, 7.5 * s);
  }
  out->comm_s = t;
  out->exposed_s = t;
}

/* Async: a background round (allreduce of the weights among all ranks) every
 * sync_interval_ms, or back to back when a round takes longer; the step never waits. */
static void async_avg(ctx_t *c, const bagua__adv_opts_t *o, bagua__adv_pred_t *out) {
  double s = model_bytes(c->m), sent = 0;
  double round = allreduce(&c->top, s, &sent);
  double period = o->sync_interval_ms / 1000.0 + round;
  double per_step = period > 0 ? c->m->compute_s / period : 0.0;
  out->comm_s = round * per_step;
  c->sent = sent * per_step;
  out->exposed_s = 0.0;
}

bagua__adv_pred_t bagua__adv_predict(const bagua__adv_meas_t *m, const bagua__adv_opts_t *o) {
  bagua__adv_pred_t out = {0};
  /* async averages among all ranks whatever the flag says (config.c refuses it there). */
  ctx_t c = context(m, o->hierarchical && o->algo != BAGUA__ADV_ASYNC);
  switch (o->algo) {
    case BAGUA__ADV_GRADIENT_ALLREDUCE:
      centralized(&c, 0, &out);
      break;
    case BAGUA__ADV_BYTEGRAD:
    case BAGUA__ADV_QADAM: /* after its warm-up: ByteGrad's op on the momentum */
      centralized(&c, 1, &out);
      break;
    case BAGUA__ADV_DECENTRALIZED:
      decentralized(&c, o, &out);
      break;
    case BAGUA__ADV_LOW_PRECISION_DECENTRALIZED:
      low_precision(&c, &out);
      break;
    case BAGUA__ADV_ASYNC:
    default:
      async_avg(&c, o, &out);
      break;
  }
  int interval = o->comm_interval > 1 ? o->comm_interval : 1;
  if (o->algo == BAGUA__ADV_DECENTRALIZED || o->algo == BAGUA__ADV_LOW_PRECISION_DECENTRALIZED) {
    out.comm_s /= interval;
    out.exposed_s /= interval;
    c.sent /= interval;
    c.quant /= interval;
  }
  out.compute_s = m->compute_s;
  out.quant_s = c.quant;
  out.bytes = c.sent;
  out.step_s = m->compute_s + out.exposed_s;
  return out;
}
