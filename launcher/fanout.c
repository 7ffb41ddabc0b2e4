/* The agents' start with a bounded fan-out (fanout.h). */
#include "fanout.h"

#include <string.h>

#include "common/rdzv/rdzv.h"

void bagua__launch_fanout_init(bagua__launch_fanout_t *f, const bagua__launch_config_t *cfg) {
  int64_t rdzv_ms = cfg->v[LS_RDZV_TIMEOUT].i * 1000;
  f->limit = (int)cfg->v[LS_FANOUT].i;
  /* By --rdzv-timeout the rendezvous has stopped waiting for a node that did not register
   * (the job failed, or went on without it): a start never needs to count for longer. */
  f->timeout_ms =
      rdzv_ms > 0 && rdzv_ms < LAUNCH_START_TIMEOUT_MS ? rdzv_ms : LAUNCH_START_TIMEOUT_MS;
  f->next = 0;
  f->starting = 0;
  f->started = 0;
}

static int waits(const bagua__launch_agent_t *a) {
  return !a->started && !a->exited;
}

bagua__launch_agent_t *bagua__launch_fanout_next(bagua__launch_fanout_t *f,
                                                 bagua__launch_agent_t *a, int n) {
  /* Entries only ever leave the waiting state and new ones are appended, so the cursor never
   * has to look back. */
  while (f->next < n && !waits(&a[f->next])) f->next++;
  return f->next < n && f->starting < f->limit ? &a[f->next] : NULL;
}

void bagua__launch_fanout_began(bagua__launch_fanout_t *f, bagua__launch_agent_t *a,
                                int64_t now_ms) {
  a->starting = 1;
  a->start_ms = now_ms;
  f->starting++;
  f->started++;
}

static bagua__launch_start_state_t start_state(const bagua__launch_fanout_t *f,
                                               const bagua__launch_agent_t *a, int64_t now_ms) {
  if (a->registered) return LAUNCH_START_REGISTERED;
  if (a->exited) return LAUNCH_START_EXITED;
  if (!a->node_id) return LAUNCH_START_UNSEEN;
  if (now_ms - a->start_ms >= f->timeout_ms) return LAUNCH_START_TIMED_OUT;
  return LAUNCH_START_GOING;
}

bagua__launch_start_state_t bagua__launch_fanout_settle(bagua__launch_fanout_t *f,
                                                        bagua__launch_agent_t *a, int64_t now_ms) {
  bagua__launch_start_state_t st = start_state(f, a, now_ms);
  if (st != LAUNCH_START_GOING && a->starting) {
    a->starting = 0;
    f->starting--;
  }
  return st;
}

void bagua__launch_fanout_count(const bagua__launch_agent_t *a, int n,
                                bagua__launch_fanout_counts_t *out) {
  memset(out, 0, sizeof(*out));
  out->total = n;
  for (int i = 0; i < n; i++) {
    out->waiting += waits(&a[i]);
    out->starting += a[i].starting;
    out->started += a[i].started;
    out->registered += a[i].registered;
  }
}

/* An agent whose registration is still to be seen. */
static int unseen(const bagua__launch_agent_t *a) {
  return a->started && !a->exited && !a->registered && a->node_id;
}

int bagua__launch_any_unregistered(const bagua__launch_agent_t *a, int n) {
  for (int i = 0; i < n; i++)
    if (unseen(&a[i])) return 1;
  return 0;
}

/* 1 when `node` is among the keys, which etcd returns sorted (every key starts with the
 * directory's `plen` bytes, so comparing the rest keeps the order). */
static int has_node(const bagua__etcd_kv_t *kvs, size_t n, size_t plen, const char *node) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    const char *name = kvs[mid].key_len >= plen ? kvs[mid].key + plen : "";
    int c = strcmp(name, node);
    if (c == 0) return 1;
    if (c < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return 0;
}

bagua_status_t bagua__launch_read_registered(bagua__etcd_t *c, const char *job,
                                             bagua__launch_agent_t *a, int n) {
  char dir[BAGUA_RDZV_KEY_MAX];
  if (bagua__rdzv_key(dir, sizeof(dir), job, BAGUA__RDZV_KEY_NODES_DIR, 0, NULL, 0) != 0)
    return BAGUA_ERR_INVALID_ARG;
  /* Keys only: the records' values are the agents' business, and O(N) of them per poll
   * would be most of the bytes. */
  bagua__etcd_read_t rd = {.span = {dir, NULL, 1}, .keys_only = 1};
  bagua_status_t st = bagua__etcd_read_ranges(c, &rd, 1, NULL);
  if (st != BAGUA_OK) return st;
  const size_t plen = strlen(dir);
  for (int i = 0; i < n; i++)
    if (unseen(&a[i]) && has_node(rd.kvs, rd.n, plen, a[i].node_id)) a[i].registered = 1;
  bagua__etcd_reads_clear(&rd, 1);
  return BAGUA_OK;
}
