/*
 * The rendezvous record codecs (common/rdzv, agent/snapshot.c): every value read from
 * etcd goes through one of these decoders, and anyone who can write to etcd chooses its
 * bytes. A decoder accepts a value or refuses it; it never crashes, and a value it accepts
 * survives encode -> decode -> encode unchanged (so what the agent writes back is what it
 * read).
 *
 * Input: one selector byte, then the JSON text. Selector 5 parses a whole key space
 * instead: lines alternate key (relative to /bagua/j/) and value, as a snapshot read would
 * deliver them. Selector 6 is a progress/<node> record; selector 7 feeds the raw bytes to the
 * decoder of a worker's progress file (what an agent reads from its workers).
 */
#include "fuzz.h"
#include "schema.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  fuzz_quiet_log();
  return 0;
}

/* encode(decode(encode(x))) == encode(x) for a decoded x. */
#define ROUND_TRIP(type, enc, dec, clear, first)                   \
  do {                                                             \
    char *a = enc(first);                                          \
    FUZZ_ASSERT(a != NULL);                                        \
    type again;                                                    \
    memset(&again, 0, sizeof(again));                              \
    FUZZ_ASSERT(dec(a, &again, NULL, 0) == 0);                     \
    char *b = enc(&again);                                         \
    FUZZ_ASSERT(b != NULL);                                        \
    if (strcmp(a, b) != 0) {                                       \
      fprintf(stderr, "first:  %s\nsecond: %s\n", a, b);           \
      FUZZ_ASSERT(!"encode/decode round trip changed the record"); \
    }                                                              \
    clear;                                                         \
    free(a);                                                       \
    free(b);                                                       \
  } while (0)

static void one_record(int which, const char *json) {
  switch (which) {
    case 0: {
      bagua__rdzv_node_t n;
      memset(&n, 0, sizeof(n));
      if (bagua__rdzv_node_decode(json, &n, NULL, 0) == 0)
        ROUND_TRIP(bagua__rdzv_node_t, bagua__rdzv_node_encode, bagua__rdzv_node_decode, (void)0,
                   &n);
      break;
    }
    case 1: {
      bagua__rdzv_round_t r;
      memset(&r, 0, sizeof(r));
      if (bagua__rdzv_round_decode(json, &r, NULL, 0) == 0) {
        FUZZ_ASSERT(r.nmembers >= 0 && (r.nmembers == 0 || r.members));
        ROUND_TRIP(bagua__rdzv_round_t, bagua__rdzv_round_encode, bagua__rdzv_round_decode,
                   bagua__rdzv_round_clear(&again), &r);
      }
      bagua__rdzv_round_clear(&r);
      break;
    }
    case 2: {
      bagua__rdzv_done_t d;
      memset(&d, 0, sizeof(d));
      if (bagua__rdzv_done_decode(json, &d, NULL, 0) == 0) {
        char line[1024];
        bagua__agent_failure_describe(&d.f, line, sizeof(line));
        (void)bagua__agent_failure_exit_code(&d.f);
        ROUND_TRIP(bagua__rdzv_done_t, bagua__rdzv_done_encode, bagua__rdzv_done_decode, (void)0,
                   &d);
      }
      break;
    }
    case 3: {
      bagua__rdzv_status_t s;
      memset(&s, 0, sizeof(s));
      if (bagua__rdzv_status_decode(json, &s, NULL, 0) == 0) {
        FUZZ_ASSERT(bagua__rdzv_job_state_name(s.state) != NULL);
        ROUND_TRIP(bagua__rdzv_status_t, bagua__rdzv_status_encode, bagua__rdzv_status_decode,
                   (void)0, &s);
      }
      break;
    }
    case 4: {
      bagua__rdzv_jobcfg_t c;
      memset(&c, 0, sizeof(c));
      if (bagua__rdzv_jobcfg_decode(json, &c, NULL, 0) == 0)
        ROUND_TRIP(bagua__rdzv_jobcfg_t, bagua__rdzv_jobcfg_encode, bagua__rdzv_jobcfg_decode,
                   (void)0, &c);
      break;
    }
    case 6: {
      bagua__rdzv_progress_t p;
      memset(&p, 0, sizeof(p));
      snprintf(p.node, sizeof(p.node), "n1");
      if (bagua__rdzv_progress_decode(json, &p, NULL, 0) == 0) {
        FUZZ_ASSERT(p.nworkers >= 0 && p.nworkers <= BAGUA_RDZV_NPROC_MAX);
        FUZZ_ASSERT(p.nworkers == 0 || p.w);
        ROUND_TRIP(bagua__rdzv_progress_t, bagua__rdzv_progress_encode, bagua__rdzv_progress_decode,
                   bagua__rdzv_progress_clear(&again), &p);
      }
      bagua__rdzv_progress_clear(&p);
      break;
    }
  }
}

/* Selector 5: "key\nvalue\nkey\nvalue..." becomes a key list under /bagua/j/. */
static void key_space(char *text) {
  enum { MAX_KEYS = 64 };
  bagua__etcd_kv_t kvs[MAX_KEYS];
  size_t n = 0;
  char *save = NULL;
  memset(kvs, 0, sizeof(kvs));
  for (char *k = strtok_r(text, "\n", &save); k && n < MAX_KEYS; k = strtok_r(NULL, "\n", &save)) {
    char *v = strtok_r(NULL, "\n", &save);
    size_t klen = strlen(k) + 9;
    kvs[n].key = malloc(klen + 1);
    kvs[n].value = strdup(v ? v : "");
    if (!kvs[n].key || !kvs[n].value) abort();
    snprintf(kvs[n].key, klen + 1, "/bagua/j/%s", k);
    kvs[n].key_len = klen;
    kvs[n].value_len = strlen(kvs[n].value);
    /* Revisions vary with position so ordering by create revision is exercised. */
    kvs[n].create_revision = (int64_t)((n * 7) % 5) + 1;
    kvs[n].mod_revision = (int64_t)n + 1;
    kvs[n].lease = (int64_t)(n % 2);
    n++;
  }
  bagua__agent_snap_t s;
  memset(&s, 0, sizeof(s));
  if (bagua__agent_snap_parse("/bagua/j/", kvs, n, &s) == 0) {
    for (size_t i = 0; i < s.nnodes; i++) {
      FUZZ_ASSERT(bagua__agent_snap_node(&s, s.nodes[i].id) != NULL);
      if (i > 0) FUZZ_ASSERT(s.nodes[i - 1].create_rev <= s.nodes[i].create_rev);
    }
    for (size_t i = 0; i < s.ndone; i++) (void)bagua__agent_snap_done(&s, s.done[i].node);
  }
  bagua__agent_snap_clear(&s);
  for (size_t i = 0; i < n; i++) bagua__etcd_kv_clear(&kvs[i]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0) return 0;
  int which = data[0] % 8;
  if (which == 7) {
    bagua__progress_file_t f;
    if (bagua__progress_file_decode(data + 1, size - 1, &f, NULL, 0) == 0) {
      FUZZ_ASSERT(f.step >= 0 && f.total_steps >= 0 && !(f.seq & 1));
      FUZZ_ASSERT(f.magic == BAGUA_PROGRESS_FILE_MAGIC);
    }
    return 0;
  }
  char *text = fuzz_strndup(data + 1, size - 1);
  if (which == 5)
    key_space(text);
  else
    one_record(which, text);
  free(text);
  return 0;
}
