/*
 * Load-balanced distributed sampler: Bagua's complexity-sorted chunking, made exact across
 * mid-epoch world changes. See include/bagua/loader.h for the contract and docs/loader.md
 * for the algorithm.
 *
 * Within an epoch the samples are held in one fixed order (sorted by noisy complexity). A
 * "layout" deals the samples not yet consumed over one world size; a world change consumes
 * the committed steps of the current layout and builds the next layout from what is left.
 * Because every quantity is derived from (settings, seed, epoch, world history) only, all
 * ranks build identical layouts without talking to each other.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bagua/loader.h"
#include "common/check.h"
#include "common/log.h"

struct bagua_sampler_s {
  int64_t n;
  double *cx; /* complexities, copied */
  uint64_t seed;
  double noise_level;
  int shuffle;
  int64_t batch;
  int drop_last;
  int rank;
  int world;

  int64_t *sorted;   /* n sample indices in this epoch's noisy-complexity order */
  uint8_t *consumed; /* per sample: consumed by an earlier layout of this epoch */
  int64_t *layout;   /* nchunks * world slots; chunk c, element r at [c * world + r] */
  int64_t *scratch;  /* n + world entries for building layouts */
  size_t layout_cap; /* entries allocated in layout and scratch */
  int64_t nchunks;
  uint64_t layout_steps; /* ceil(nchunks / batch) */
  uint64_t layout_start; /* global step of the epoch where the current layout begins */
  uint64_t cursor;       /* next global step to hand out */
  bagua_sampler_state_t st;
};

/* ---- deterministic generator ----
 * xoshiro256** seeded through splitmix64: the same stream on every platform, unlike rand(). */
typedef struct {
  uint64_t s[4];
} rng_t;

static uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) {
  return (x << k) | (x >> (64 - k));
}

static uint64_t rng_next(rng_t *r) {
  uint64_t res = rotl(r->s[1] * 5, 7) * 9, t = r->s[1] << 17;
  r->s[2] ^= r->s[0];
  r->s[3] ^= r->s[1];
  r->s[1] ^= r->s[2];
  r->s[0] ^= r->s[3];
  r->s[2] ^= t;
  r->s[3] = rotl(r->s[3], 45);
  return res;
}

/* Streams are keyed by (seed + epoch, purpose) so each layout of an epoch gets its own
 * stream and an extra world change never shifts the noise of the epoch. */
static void rng_seed(rng_t *r, uint64_t seed_plus_epoch, uint64_t stream) {
  uint64_t x = seed_plus_epoch ^ (stream * 0xd1b54a32d192ed03ull);
  for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x);
}

/* Uniform in [0, bound) without modulo bias (rejection of the short top range). */
static uint64_t rng_below(rng_t *r, uint64_t bound) {
  uint64_t lim = UINT64_MAX - UINT64_MAX % bound, v;
  do {
    v = rng_next(r);
  } while (v >= lim);
  return v % bound;
}

/* ---- epoch order ---- */
typedef struct {
  double key;
  int64_t idx;
} keyed_t;

/* Ties are broken by index so the order does not depend on qsort's instability. */
static int keyed_cmp(const void *a, const void *b) {
  const keyed_t *x = a, *y = b;
  if (x->key < y->key) return -1;
  if (x->key > y->key) return 1;
  return (x->idx > y->idx) - (x->idx < y->idx);
}

static bagua_status_t sort_epoch(bagua_sampler_t *s) {
  keyed_t *k = malloc((size_t)s->n * sizeof(*k));
  if (!k) {
    BAGUA_WARN("bagua_sampler: out of memory sorting %lld samples", (long long)s->n);
    return BAGUA_ERR_NO_MEMORY;
  }
  rng_t r;
  rng_seed(&r, s->seed + s->st.epoch, 0);
  /* Bagua draws randint(0, int((max - min) * random_level + 1)) per sample; a level of 0
   * leaves the exact order. */
  uint64_t range = 0;
  if (s->noise_level > 0) {
    double mn = s->cx[0], mx = s->cx[0];
    for (int64_t i = 1; i < s->n; i++) {
      mn = s->cx[i] < mn ? s->cx[i] : mn;
      mx = s->cx[i] > mx ? s->cx[i] : mx;
    }
    double w = floor((mx - mn) * s->noise_level + 1.0);
    range = w >= 0x1p63 ? (1ull << 63) : (uint64_t)w;
  }
  for (int64_t i = 0; i < s->n; i++) {
    k[i].key = s->cx[i] + (range > 1 ? (double)rng_below(&r, range) : 0.0);
    k[i].idx = i;
  }
  qsort(k, (size_t)s->n, sizeof(*k), keyed_cmp);
  for (int64_t i = 0; i < s->n; i++) s->sorted[i] = k[i].idx;
  free(k);
  return BAGUA_OK;
}

/* ---- layouts ---- */

/* Deals the samples not yet consumed over s->world ranks; `index` is the layout's position
 * in the epoch's history and selects its generator stream. */
static void build_layout(bagua_sampler_t *s, uint32_t index) {
  int64_t w = s->world, p = 0;
  int64_t *pool = s->scratch;
  for (int64_t i = 0; i < s->n; i++)
    if (!s->consumed[s->sorted[i]]) pool[p++] = s->sorted[i];

  rng_t r;
  rng_seed(&r, s->seed + s->st.epoch, 1 + (uint64_t)index);
  int64_t rem = p % w, len = p;
  if (rem && s->drop_last) {
    /* Drop `rem` random pool entries rather than always the most complex ones, so no sample
     * is systematically never trained on. The pool keeps its sorted order. Dropped samples
     * stay unconsumed: a later world change puts them back in the pool. */
    int64_t *pos = s->layout;
    for (int64_t i = 0; i < p; i++) pos[i] = i;
    for (int64_t i = 0; i < rem; i++) {
      int64_t j = i + (int64_t)rng_below(&r, (uint64_t)(p - i));
      int64_t t = pos[i];
      pos[i] = pos[j];
      pos[j] = t;
    }
    for (int64_t i = 0; i < rem; i++) pool[pos[i]] = -1;
    len = 0;
    for (int64_t i = 0; i < p; i++)
      if (pool[i] >= 0) pool[len++] = pool[i];
  } else if (rem) {
    /* Bagua pads the last chunk by wrapping around to the start of the sorted list (the
     * cheapest samples); the pool may be shorter than the padding after many steps. */
    for (int64_t i = 0; i < w - rem; i++) pool[len++] = pool[i % p];
  }
  s->nchunks = len / w;

  /* Shuffle the chunk order. Unlike Bagua the padded chunk stays last: then a layout cut
   * short by a world change has never served a repeated sample, and the padding appears
   * at most once per epoch, in its last step. */
  int64_t nperm = s->nchunks - ((rem && !s->drop_last) ? 1 : 0);
  int64_t *order = s->layout; /* chunk order first, then expanded in place below */
  for (int64_t c = 0; c < s->nchunks; c++) order[c] = c;
  if (s->shuffle)
    for (int64_t c = nperm - 1; c > 0; c--) {
      int64_t j = (int64_t)rng_below(&r, (uint64_t)c + 1), t = order[c];
      order[c] = order[j];
      order[j] = t;
    }
  /* Expand from the back so order[c] is read before slots c*w.. overwrite it. This is
   * safe because the slots of chunk c start at c*w >= c. */
  for (int64_t c = s->nchunks - 1; c >= 0; c--) {
    int64_t src = order[c];
    memmove(&s->layout[c * w], &pool[src * w], (size_t)w * sizeof(int64_t));
  }
  s->layout_steps = (uint64_t)((s->nchunks + s->batch - 1) / s->batch);
}

static bagua_status_t ensure_capacity(bagua_sampler_t *s, int world) {
  size_t need = (size_t)s->n + (size_t)world;
  if (need <= s->layout_cap) return BAGUA_OK;
  int64_t *l = realloc(s->layout, need * sizeof(int64_t));
  if (!l) goto oom;
  s->layout = l;
  int64_t *sc = realloc(s->scratch, need * sizeof(int64_t));
  if (!sc) goto oom;
  s->scratch = sc;
  s->layout_cap = need;
  return BAGUA_OK;
oom:
  BAGUA_WARN("bagua_sampler: out of memory for a layout of %zu entries", need);
  return BAGUA_ERR_NO_MEMORY;
}

/* Marks the real samples of the first `steps` steps of the current layout as consumed.
 * Padding can only be in the last chunk, which is consumed only when the layout ends. */
static void consume(bagua_sampler_t *s, uint64_t steps) {
  int64_t chunks = (int64_t)steps * s->batch;
  if (chunks > s->nchunks) chunks = s->nchunks;
  for (int64_t i = 0; i < chunks * s->world; i++) s->consumed[s->layout[i]] = 1;
}

static bagua_status_t start_epoch(bagua_sampler_t *s, uint64_t epoch) {
  BAGUA_CHECK(ensure_capacity(s, s->world));
  s->st.epoch = epoch;
  s->st.committed_steps = 0;
  s->st.nlayouts = 1;
  s->st.layouts[0].start_step = 0;
  s->st.layouts[0].world = (uint32_t)s->world;
  BAGUA_CHECK(sort_epoch(s));
  memset(s->consumed, 0, (size_t)s->n);
  s->layout_start = 0;
  s->cursor = 0;
  build_layout(s, 0);
  return BAGUA_OK;
}

/* Switches to `world` at global step `at` (already validated against the current layout). */
static bagua_status_t change_world(bagua_sampler_t *s, int world, uint64_t at) {
  if (s->st.nlayouts >= BAGUA_SAMPLER_MAX_LAYOUTS) {
    BAGUA_WARN("bagua_sampler_set_world: more than %d world changes in epoch %llu",
               BAGUA_SAMPLER_MAX_LAYOUTS - 1, (unsigned long long)s->st.epoch);
    return BAGUA_ERR_NOT_SUPPORTED;
  }
  BAGUA_CHECK(ensure_capacity(s, world));
  consume(s, at - s->layout_start);
  uint32_t idx = s->st.nlayouts++;
  s->st.layouts[idx].start_step = at;
  s->st.layouts[idx].world = (uint32_t)world;
  s->world = world;
  s->layout_start = at;
  build_layout(s, idx);
  return BAGUA_OK;
}

/* ---- public API ---- */

static bagua_status_t check_config(const bagua_sampler_config_t *cfg) {
  if (!cfg || cfg->struct_size < sizeof(bagua_sampler_config_t)) {
    BAGUA_WARN(
        "bagua_sampler_create: config missing or struct_size smaller than %zu "
        "(initialise it with BAGUA_SAMPLER_CONFIG_INIT)",
        sizeof(bagua_sampler_config_t));
    return BAGUA_ERR_INVALID_ARG;
  }
  const char *bad = NULL;
  if (cfg->num_samples < 1)
    bad = "num_samples must be >= 1";
  else if (!cfg->complexities)
    bad = "complexities must not be NULL";
  else if (!(cfg->noise_level >= 0) || !isfinite(cfg->noise_level))
    bad = "noise_level must be finite and >= 0";
  else if (cfg->batch_size < 1)
    bad = "batch_size must be >= 1";
  else if (cfg->world < 1)
    bad = "world must be >= 1";
  else if (cfg->rank < 0 || cfg->rank >= cfg->world)
    bad = "rank must be in [0, world)";
  if (bad) {
    BAGUA_WARN("bagua_sampler_create: %s", bad);
    return BAGUA_ERR_INVALID_ARG;
  }
  for (int64_t i = 0; i < cfg->num_samples; i++)
    if (!isfinite(cfg->complexities[i])) {
      BAGUA_WARN("bagua_sampler_create: complexities[%lld] is not finite", (long long)i);
      return BAGUA_ERR_INVALID_ARG;
    }
  return BAGUA_OK;
}

bagua_status_t bagua_sampler_create(const bagua_sampler_config_t *cfg, bagua_sampler_t **out) {
  bagua_status_t st;
  if (!out) return BAGUA_ERR_INVALID_ARG;
  *out = NULL;
  BAGUA_CHECK(check_config(cfg));
  bagua_sampler_t *s = calloc(1, sizeof(*s));
  if (!s) return BAGUA_ERR_NO_MEMORY;
  s->n = cfg->num_samples;
  s->seed = cfg->seed;
  s->noise_level = cfg->noise_level;
  s->shuffle = cfg->shuffle;
  s->batch = cfg->batch_size;
  s->drop_last = cfg->drop_last;
  s->rank = cfg->rank;
  s->world = cfg->world;
  st = BAGUA_ERR_NO_MEMORY;
  s->cx = malloc((size_t)s->n * sizeof(double));
  s->sorted = malloc((size_t)s->n * sizeof(int64_t));
  s->consumed = malloc((size_t)s->n);
  if (!s->cx || !s->sorted || !s->consumed) {
    BAGUA_WARN("bagua_sampler_create: out of memory for %lld samples", (long long)s->n);
    goto fail;
  }
  memcpy(s->cx, cfg->complexities, (size_t)s->n * sizeof(double));
  BAGUA_CHECK_GOTO(start_epoch(s, 0), st, fail);
  *out = s;
  return BAGUA_OK;
fail:
  bagua_sampler_destroy(s);
  return st;
}

bagua_status_t bagua_sampler_create_shared(bagua_comm_t *comm, const bagua_sampler_config_t *cfg,
                                           bagua_sampler_t **out) {
  bagua_status_t st = BAGUA_OK;
  double *cx = NULL;
  if (!comm || !out || !cfg || cfg->struct_size < sizeof(bagua_sampler_config_t)) {
    BAGUA_WARN("bagua_sampler_create_shared: comm, cfg (with struct_size) and out are required");
    return BAGUA_ERR_INVALID_ARG;
  }
  *out = NULL;
  int rank = bagua_comm_rank(comm);
  /* Rank 0's settings travel with the complexities so every rank builds the same layouts
   * even if the others were configured differently. A count of 0 tells the other ranks
   * that rank 0's config was invalid, so they fail too instead of waiting forever. */
  int64_t hdr[6] = {0};
  if (rank == 0) {
    bagua_sampler_config_t c = *cfg;
    c.rank = 0;
    c.world = 1;
    if (check_config(&c) == BAGUA_OK) {
      hdr[0] = cfg->num_samples;
      hdr[1] = (int64_t)cfg->seed;
      memcpy(&hdr[2], &cfg->noise_level, sizeof(double));
      hdr[3] = cfg->shuffle;
      hdr[4] = cfg->batch_size;
      hdr[5] = cfg->drop_last;
    }
  }
  BAGUA_CHECK(bagua_broadcast(comm, hdr, hdr, 6, BAGUA_I64, 0));
  if (hdr[0] < 1) {
    BAGUA_WARN("bagua_sampler_create_shared: rank 0's config is invalid");
    return BAGUA_ERR_INVALID_ARG;
  }
  cx = malloc((size_t)hdr[0] * sizeof(double));
  if (!cx) {
    /* The broadcast must still happen or rank 0 would wait; it cannot without a buffer,
     * so this rank fails and the others see the broken collective. */
    BAGUA_WARN("bagua_sampler_create_shared: out of memory for %lld complexities",
               (long long)hdr[0]);
    return BAGUA_ERR_NO_MEMORY;
  }
  BAGUA_CHECK_GOTO(
      bagua_broadcast(comm, rank == 0 ? cfg->complexities : cx, cx, (size_t)hdr[0], BAGUA_F64, 0),
      st, exit);
  bagua_sampler_config_t c = BAGUA_SAMPLER_CONFIG_INIT;
  c.num_samples = hdr[0];
  c.complexities = cx;
  c.seed = (uint64_t)hdr[1];
  memcpy(&c.noise_level, &hdr[2], sizeof(double));
  c.shuffle = (int)hdr[3];
  c.batch_size = hdr[4];
  c.drop_last = (int)hdr[5];
  c.rank = rank;
  c.world = bagua_comm_size(comm);
  st = bagua_sampler_create(&c, out);
exit:
  free(cx);
  return st;
}

void bagua_sampler_destroy(bagua_sampler_t *s) {
  if (!s) return;
  free(s->cx);
  free(s->sorted);
  free(s->consumed);
  free(s->layout);
  free(s->scratch);
  free(s);
}

bagua_status_t bagua_sampler_set_epoch(bagua_sampler_t *s, uint64_t epoch) {
  if (!s) return BAGUA_ERR_INVALID_ARG;
  return start_epoch(s, epoch);
}

bagua_status_t bagua_sampler_next_batch(bagua_sampler_t *s, int64_t *out, size_t max, size_t *n) {
  if (!s || !n || (!out && max)) return BAGUA_ERR_INVALID_ARG;
  *n = 0;
  uint64_t step = s->cursor - s->layout_start;
  if (step >= s->layout_steps) return BAGUA_OK;
  int64_t c0 = (int64_t)step * s->batch, c1 = c0 + s->batch;
  if (c1 > s->nchunks) c1 = s->nchunks;
  if ((size_t)(c1 - c0) > max) {
    BAGUA_WARN("bagua_sampler_next_batch: max %zu is smaller than the batch of %lld", max,
               (long long)(c1 - c0));
    return BAGUA_ERR_INVALID_ARG;
  }
  for (int64_t c = c0; c < c1; c++) out[c - c0] = s->layout[c * s->world + s->rank];
  *n = (size_t)(c1 - c0);
  s->cursor++;
  return BAGUA_OK;
}

void bagua_sampler_commit(bagua_sampler_t *s) {
  if (s) s->st.committed_steps = s->cursor;
}

bagua_status_t bagua_sampler_set_world(bagua_sampler_t *s, int rank, int world,
                                       uint64_t committed_steps) {
  if (!s || world < 1 || rank < 0 || rank >= world) {
    BAGUA_WARN("bagua_sampler_set_world: need 0 <= rank (%d) < world (%d)", rank, world);
    return BAGUA_ERR_INVALID_ARG;
  }
  if (committed_steps < s->layout_start || committed_steps > s->layout_start + s->layout_steps) {
    BAGUA_WARN(
        "bagua_sampler_set_world: committed_steps %llu outside the current layout "
        "[%llu, %llu]",
        (unsigned long long)committed_steps, (unsigned long long)s->layout_start,
        (unsigned long long)(s->layout_start + s->layout_steps));
    return BAGUA_ERR_INVALID_ARG;
  }
  if (world != s->world) BAGUA_CHECK(change_world(s, world, committed_steps));
  s->rank = rank;
  s->cursor = committed_steps;
  s->st.committed_steps = committed_steps;
  BAGUA_INFO(BAGUA_SUBSYS_LOADER, "sampler: epoch %llu rank %d/%d from step %llu (%llu steps)",
             (unsigned long long)s->st.epoch, rank, world, (unsigned long long)committed_steps,
             (unsigned long long)(s->layout_start + s->layout_steps));
  return BAGUA_OK;
}

void bagua_sampler_get_state(const bagua_sampler_t *s, bagua_sampler_state_t *state) {
  if (s && state) *state = s->st;
}

bagua_status_t bagua_sampler_set_state(bagua_sampler_t *s, int rank,
                                       const bagua_sampler_state_t *state) {
  if (!s || !state || state->nlayouts < 1 || state->nlayouts > BAGUA_SAMPLER_MAX_LAYOUTS ||
      state->layouts[0].start_step != 0) {
    BAGUA_WARN("bagua_sampler_set_state: malformed state");
    return BAGUA_ERR_INVALID_ARG;
  }
  for (uint32_t i = 0; i < state->nlayouts; i++)
    if (state->layouts[i].world < 1 || state->layouts[i].world > INT32_MAX ||
        (i > 0 && state->layouts[i].world == state->layouts[i - 1].world)) {
      BAGUA_WARN("bagua_sampler_set_state: malformed world history");
      return BAGUA_ERR_INVALID_ARG;
    }
  int last = (int)state->layouts[state->nlayouts - 1].world;
  if (rank < 0 || rank >= last) {
    BAGUA_WARN("bagua_sampler_set_state: rank %d outside the state's world %d", rank, last);
    return BAGUA_ERR_INVALID_ARG;
  }
  /* Replaying the history runs the same code every other rank ran, so the layouts match. */
  s->world = (int)state->layouts[0].world;
  s->rank = 0;
  BAGUA_CHECK(start_epoch(s, state->epoch));
  for (uint32_t i = 1; i < state->nlayouts; i++)
    BAGUA_CHECK(
        bagua_sampler_set_world(s, 0, (int)state->layouts[i].world, state->layouts[i].start_step));
  return bagua_sampler_set_world(s, rank, last, state->committed_steps);
}

uint64_t bagua_sampler_num_steps(const bagua_sampler_t *s) {
  return s ? s->layout_start + s->layout_steps : 0;
}
