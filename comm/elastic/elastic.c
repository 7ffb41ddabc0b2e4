/*
 * In-process elasticity: a state registry with commit/restore, a watch on the job's round key
 * and the rebuild of the world communicator for a new round (include/bagua/elastic.h).
 */
#include "bagua/elastic.h"

#include <cjson/cJSON.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../bootstrap.h"
#include "../comm_internal.h"
#include "common/check.h"
#include "common/etcd/etcd.h"
#include "common/log.h"
#include "common/params.h"
#include "common/sock.h"

#define NAME_MAX_LEN 64
#define MAX_CALLBACKS 16
#define MAX_MEMBERS 4096

typedef struct {
  char name[NAME_MAX_LEN];
  void *ptr;
  size_t bytes;
  void *copy; /* the last commit, owned by the library */
} entry_t;

struct bagua_elastic_s {
  char *endpoint, *job_id, *node_id;
  int local_rank, transport, timeout_ms, connect_timeout_ms, round_wait_ms, etcd_timeout_ms;
  int64_t round;
  int rank, size;
  bagua_comm_t *comm;
  bagua__etcd_t *etcd;
  bagua__etcd_watch_t *watch;
  char round_key[512];
  /* Highest round number the watch has seen; read without the lock by check(). */
  _Atomic int64_t seen_round;
  /* The communicator being bootstrapped, so that the watch can cut a bootstrap short when
   * an even newer round makes it pointless (peers will never join the old one). */
  pthread_mutex_t lock;
  bagua_comm_t *building;
  int64_t building_round;
  /* Under `lock`: the current round's number and member node ids (NULL when unknown), read
   * by the watch to tell whether a new round dropped a member. e->comm changes under it too,
   * so that the departure abort never touches a destroyed communicator. */
  int64_t cur_round;
  char **members;
  int nmembers;
  /* The departure timer: when a new round drops a member, communication still running in the
   * old round is aborted `abort_delay_ms` later (a node that left gracefully meets the others
   * at the next step boundary first). Under `lock`; the thread sleeps on `timer_cv`. */
  pthread_t timer;
  int timer_started, timer_stop;
  int abort_delay_ms;
  int64_t abort_at_ms, abort_round; /* 0: nothing pending */
  pthread_cond_t timer_cv;
  entry_t *entries;
  size_t nentries, cap;
  int64_t step, epoch;
  struct {
    bagua_elastic_participant_t p;
    void *arg;
  } parts[MAX_CALLBACKS];
  int nparts;
};

static char *dup_str(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  if (d) memcpy(d, s, n);
  return d;
}

/* Reads the "round" number of a round JSON value; -1 when it is not one. */
static int64_t parse_round_number(const char *json) {
  cJSON *o = cJSON_Parse(json);
  int64_t r = -1;
  const cJSON *n = o ? cJSON_GetObjectItemCaseSensitive(o, "round") : NULL;
  if (cJSON_IsNumber(n) && n->valuedouble >= 0) r = (int64_t)n->valuedouble;
  cJSON_Delete(o);
  return r;
}

static void free_members(char **m, int n) {
  for (int i = 0; i < n; i++) free(m[i]);
  free(m);
}

/* The member node ids of a round JSON (malloc'ed array of strings). */
static bagua_status_t parse_members(const char *json, char ***out, int *n) {
  *out = NULL;
  *n = 0;
  cJSON *o = cJSON_Parse(json);
  const cJSON *members = cJSON_GetObjectItemCaseSensitive(o, "members");
  int count = cJSON_IsArray(members) ? cJSON_GetArraySize(members) : -1;
  if (count < 0 || count > MAX_MEMBERS) {
    cJSON_Delete(o);
    return BAGUA_ERR_ETCD;
  }
  char **m = calloc((size_t)count + 1, sizeof(*m));
  if (!m) {
    cJSON_Delete(o);
    return BAGUA_ERR_NO_MEMORY;
  }
  const cJSON *it;
  int i = 0;
  cJSON_ArrayForEach(it, members) {
    m[i] = dup_str(cJSON_IsString(it) ? it->valuestring : "");
    if (!m[i]) {
      free_members(m, i);
      cJSON_Delete(o);
      return BAGUA_ERR_NO_MEMORY;
    }
    i++;
  }
  cJSON_Delete(o);
  *out = m;
  *n = count;
  return BAGUA_OK;
}

/* 1 when some member of the current round is missing from `json`'s members (under lock). */
static int drops_member(const bagua_elastic_t *e, const char *json) {
  char **m = NULL;
  int n = 0, dropped = 0;
  if (!e->members || parse_members(json, &m, &n) != BAGUA_OK) return 0;
  for (int i = 0; i < e->nmembers && !dropped; i++) {
    int found = 0;
    for (int j = 0; j < n && !found; j++) found = strcmp(e->members[i], m[j]) == 0;
    dropped = !found;
  }
  free_members(m, n);
  return dropped;
}

/* Ends communication of the current round (under lock): the world communicator and every
 * participant's. */
static void abort_current(bagua_elastic_t *e) {
  if (e->comm) bagua_comm_abort(e->comm);
  for (int i = 0; i < e->nparts; i++)
    if (e->parts[i].p.abort) e->parts[i].p.abort(e->parts[i].arg);
}

static void *timer_main(void *arg) {
  bagua_elastic_t *e = arg;
  pthread_mutex_lock(&e->lock);
  while (!e->timer_stop) {
    if (!e->abort_at_ms) {
      pthread_cond_wait(&e->timer_cv, &e->lock);
      continue;
    }
    int64_t now = bagua__now_ms();
    if (now < e->abort_at_ms) {
      struct timespec ts;
      clock_gettime(CLOCK_MONOTONIC, &ts);
      int64_t ns = (int64_t)ts.tv_nsec + (e->abort_at_ms - now) * 1000000;
      ts.tv_sec += ns / 1000000000;
      ts.tv_nsec = ns % 1000000000;
      pthread_cond_timedwait(&e->timer_cv, &e->lock, &ts);
      continue;
    }
    /* Still in a round older than the one that dropped a member: cut it off. */
    if (e->cur_round < e->abort_round) {
      BAGUA_INFO(BAGUA_SUBSYS_COMM,
                 "elastic: round %lld dropped a member; aborting communication of round %lld",
                 (long long)e->abort_round, (long long)e->cur_round);
      abort_current(e);
    }
    e->abort_at_ms = 0;
  }
  pthread_mutex_unlock(&e->lock);
  return NULL;
}

/*
 * Applies the agent's rank rule to a round JSON: rank = sum of nprocs of the members before
 * our node + local_rank. Fills round/rank/size; BAGUA_ERR_ABORTED when we are not a member.
 */
static bagua_status_t parse_round(const bagua_elastic_t *e, const char *json, int64_t *round,
                                  int *rank, int *size, char ***members_out, int *nmembers_out) {
  bagua_status_t st = BAGUA_ERR_ETCD;
  cJSON *o = cJSON_Parse(json);
  const cJSON *r = cJSON_GetObjectItemCaseSensitive(o, "round");
  const cJSON *ws = cJSON_GetObjectItemCaseSensitive(o, "world_size");
  const cJSON *members = cJSON_GetObjectItemCaseSensitive(o, "members");
  const cJSON *nprocs = cJSON_GetObjectItemCaseSensitive(o, "nprocs");
  if (!cJSON_IsNumber(r) || !cJSON_IsNumber(ws) || !cJSON_IsArray(members) ||
      (nprocs && !cJSON_IsArray(nprocs))) {
    BAGUA_WARN("elastic: %s is not a round record (need round, world_size, members): %.200s",
               e->round_key, json);
    goto out;
  }
  int base = 0, found = -1, i = 0;
  const cJSON *m;
  cJSON_ArrayForEach(m, members) {
    const cJSON *np = nprocs ? cJSON_GetArrayItem(nprocs, i) : NULL;
    int n = cJSON_IsNumber(np) ? np->valueint : 1;
    if (cJSON_IsString(m) && strcmp(m->valuestring, e->node_id) == 0) {
      found = i;
      if (e->local_rank >= n) {
        BAGUA_WARN("elastic: LOCAL_RANK %d is not below nprocs %d of node %s in round %lld",
                   e->local_rank, n, e->node_id, (long long)r->valuedouble);
        st = BAGUA_ERR_ABORTED;
        goto out;
      }
      break;
    }
    base += n;
    i++;
  }
  if (found < 0) {
    BAGUA_WARN("elastic: node %s is not a member of round %lld; this worker leaves the job",
               e->node_id, (long long)r->valuedouble);
    st = BAGUA_ERR_ABORTED;
    goto out;
  }
  *round = (int64_t)r->valuedouble;
  *size = ws->valueint;
  *rank = base + e->local_rank;
  if (*rank >= *size) {
    BAGUA_WARN("elastic: rank %d computed for node %s is not below world_size %d in round %lld",
               *rank, e->node_id, *size, (long long)*round);
    goto out;
  }
  if (members_out && (st = parse_members(json, members_out, nmembers_out)) != BAGUA_OK) goto out;
  st = BAGUA_OK;
out:
  cJSON_Delete(o);
  return st;
}

/* Records round `r` as seen; `json` (may be NULL) is its record, checked for departures. */
static void note_round(bagua_elastic_t *e, int64_t r, const char *json) {
  int64_t cur = atomic_load(&e->seen_round);
  while (r > cur && !atomic_compare_exchange_weak(&e->seen_round, &cur, r)) {
  }
  pthread_mutex_lock(&e->lock);
  if (e->building && r > e->building_round) bagua_comm_abort(e->building);
  if (json && r > e->cur_round && r > e->abort_round && drops_member(e, json)) {
    e->abort_round = r;
    e->abort_at_ms = bagua__now_ms() + e->abort_delay_ms;
    pthread_cond_signal(&e->timer_cv);
  }
  pthread_mutex_unlock(&e->lock);
}

static int on_round_event(void *arg, const bagua__etcd_event_t *ev) {
  bagua_elastic_t *e = arg;
  if (ev->type == BAGUA__ETCD_EVENT_PUT) {
    int64_t r = parse_round_number(ev->value);
    BAGUA_INFO(BAGUA_SUBSYS_COMM, "elastic: round key now holds round %lld", (long long)r);
    if (r >= 0) note_round(e, r, ev->value);
  } else if (ev->type == BAGUA__ETCD_EVENT_FAILED) {
    /* The watch only speeds things up: rebuild reads the key itself, and a dead peer still
     * surfaces through the collectives. */
    BAGUA_WARN(
        "elastic: watch on %s ended (%s); world changes are now noticed only through "
        "failed collectives",
        e->round_key, bagua_err_name(ev->status));
  }
  return 0;
}

/* Hooks of bagua__comm_build: the communicator being bootstrapped is visible to the watch,
 * which aborts it when a still newer round makes it pointless (peers will never join it). */
static void building_started(bagua_comm_t *c, void *arg) {
  bagua_elastic_t *e = arg;
  pthread_mutex_lock(&e->lock);
  e->building = c;
  /* A round newer than this one may have been seen before `building` was set. */
  if (atomic_load(&e->seen_round) > e->building_round) bagua_comm_abort(c);
  pthread_mutex_unlock(&e->lock);
}

static void building_ended(bagua_comm_t *c, void *arg) {
  bagua_elastic_t *e = arg;
  (void)c;
  pthread_mutex_lock(&e->lock);
  e->building = NULL;
  pthread_mutex_unlock(&e->lock);
}

/* Builds the world communicator of `round` (collective over its ranks). */
static bagua_status_t comm_for_round(bagua_elastic_t *e, int64_t round, int rank, int size,
                                     bagua_comm_t **out) {
  bagua__boot_etcd_t boot = {e->endpoint, e->job_id, round, e->etcd_timeout_ms};
  bagua__comm_build_t b = {
      .rank = rank,
      .size = size,
      .job_id = e->job_id,
      .node_id = e->node_id,
      .round = round,
      .nstreams = (int)bagua__param_int(BAGUA_P_NET_NSTREAMS),
      .transport = e->transport,
      .timeout_ms = e->timeout_ms,
      .connect_timeout_ms = e->connect_timeout_ms,
      .boot_fn = bagua__bootstrap_etcd,
      .boot_arg = &boot,
      .on_alloc = building_started,
      .on_release = building_ended,
      .hook_arg = e,
  };
  pthread_mutex_lock(&e->lock);
  e->building_round = round;
  pthread_mutex_unlock(&e->lock);
  bagua_status_t st = bagua__comm_build(&b, out);
  if (st == BAGUA_OK) building_ended(*out, e);
  return st;
}

bagua_status_t bagua_elastic_register(bagua_elastic_t *e, const char *name, void *ptr,
                                      size_t bytes) {
  if (!e || !name || (!ptr && bytes) || strlen(name) >= NAME_MAX_LEN) {
    BAGUA_WARN(
        "bagua_elastic_register: need a context, a name of 1..%d characters and a "
        "buffer (got name %s)",
        NAME_MAX_LEN - 1, name ? name : "NULL");
    return BAGUA_ERR_INVALID_ARG;
  }
  for (size_t i = 0; i < e->nentries; i++) {
    if (strcmp(e->entries[i].name, name) == 0) {
      BAGUA_WARN("bagua_elastic_register: \"%s\" is already registered", name);
      return BAGUA_ERR_INVALID_ARG;
    }
  }
  if (e->nentries == e->cap) {
    size_t cap = e->cap ? e->cap * 2 : 8;
    entry_t *n = realloc(e->entries, cap * sizeof(*n));
    if (!n) return BAGUA_ERR_NO_MEMORY;
    e->entries = n;
    e->cap = cap;
  }
  entry_t *en = &e->entries[e->nentries];
  memset(en, 0, sizeof(*en));
  snprintf(en->name, sizeof(en->name), "%s", name);
  en->ptr = ptr;
  en->bytes = bytes;
  en->copy = malloc(bytes ? bytes : 1);
  if (!en->copy) return BAGUA_ERR_NO_MEMORY;
  /* Until the first commit, restore returns the buffer to its registered contents. */
  if (bytes) memcpy(en->copy, ptr, bytes);
  e->nentries++;
  return BAGUA_OK;
}

static void commit_entries(bagua_elastic_t *e) {
  for (size_t i = 0; i < e->nentries; i++)
    if (e->entries[i].bytes) memcpy(e->entries[i].copy, e->entries[i].ptr, e->entries[i].bytes);
}

bagua_status_t bagua_elastic_commit(bagua_elastic_t *e) {
  if (!e) return BAGUA_ERR_INVALID_ARG;
  commit_entries(e);
  for (int i = 0; i < e->nparts; i++)
    if (e->parts[i].p.commit) BAGUA_CHECK(e->parts[i].p.commit(e->parts[i].arg));
  return BAGUA_OK;
}

bagua_status_t bagua_elastic_restore(bagua_elastic_t *e) {
  if (!e) return BAGUA_ERR_INVALID_ARG;
  for (size_t i = 0; i < e->nentries; i++)
    if (e->entries[i].bytes) memcpy(e->entries[i].ptr, e->entries[i].copy, e->entries[i].bytes);
  for (int i = 0; i < e->nparts; i++)
    if (e->parts[i].p.restore) e->parts[i].p.restore(e->parts[i].arg);
  return BAGUA_OK;
}

bagua_status_t bagua_elastic_sync(bagua_elastic_t *e) {
  if (!e) return BAGUA_ERR_INVALID_ARG;
  if (!e->comm) {
    BAGUA_WARN("bagua_elastic_sync: no communicator (a failed rebuild left none)");
    return BAGUA_ERR_INVALID_USAGE;
  }
  /* Every rank compares rank 0's registry fingerprint with its own and the verdict is
   * reduced, so a mismatch fails on all ranks instead of hanging the ones that agree. */
  uint64_t fp[3] = {e->nentries, 0, 0};
  for (size_t i = 0; i < e->nentries; i++) {
    fp[1] += e->entries[i].bytes;
    fp[2] = bagua__hash64(e->entries[i].name, strlen(e->entries[i].name), fp[2] + i);
  }
  uint64_t root[3];
  BAGUA_CHECK(bagua_broadcast(e->comm, fp, root, 3, BAGUA_I64, 0));
  int64_t bad = memcmp(fp, root, sizeof(fp)) != 0, any_bad = 0;
  BAGUA_CHECK(bagua_allreduce(e->comm, &bad, &any_bad, 1, BAGUA_I64, BAGUA_MAX));
  if (any_bad) {
    BAGUA_WARN(
        "bagua_elastic_sync: registered state differs between ranks (rank 0: %llu "
        "buffers, %llu bytes; rank %d: %llu buffers, %llu bytes, names %s); register "
        "the same names and sizes in the same order everywhere",
        (unsigned long long)root[0], (unsigned long long)root[1], e->rank,
        (unsigned long long)fp[0], (unsigned long long)fp[1],
        fp[2] == root[2] ? "equal" : "different");
    return BAGUA_ERR_INVALID_USAGE;
  }
  for (size_t i = 0; i < e->nentries; i++) {
    entry_t *en = &e->entries[i];
    BAGUA_CHECK(bagua_broadcast(e->comm, en->ptr, en->ptr, en->bytes, BAGUA_U8, 0));
  }
  /* Participants synchronise in their reset hook, which decides from their own restore state
   * what to carry; committing them here would overwrite a pending restore. */
  commit_entries(e);
  return BAGUA_OK;
}

int bagua_elastic_check(const bagua_elastic_t *e) {
  return e && atomic_load(&((bagua_elastic_t *)e)->seen_round) > e->round;
}

bagua_status_t bagua_elastic_check_all(bagua_elastic_t *e, int *changed) {
  if (!e || !changed) return BAGUA_ERR_INVALID_ARG;
  *changed = 0;
  if (!e->comm) {
    BAGUA_WARN("bagua_elastic_check_all: no communicator (a failed rebuild left none)");
    return BAGUA_ERR_INVALID_USAGE;
  }
  int64_t seen = atomic_load(&e->seen_round);
  BAGUA_CHECK(bagua_allreduce(e->comm, &seen, &seen, 1, BAGUA_I64, BAGUA_MAX));
  *changed = seen > e->round;
  return BAGUA_OK;
}

/* Waits for a round newer than the current one and returns its JSON (malloc'ed). */
static bagua_status_t wait_new_round(bagua_elastic_t *e, char **json) {
  int64_t deadline = bagua__now_ms() + e->round_wait_ms;
  int delay_ms = 5;
  *json = NULL;
  for (;;) {
    bagua__etcd_kv_t kv;
    int found = 0;
    bagua_status_t st = bagua__etcd_get(e->etcd, e->round_key, &kv, &found, NULL);
    if (st == BAGUA_OK && found) {
      int64_t r = parse_round_number(kv.value);
      if (r > e->round) {
        note_round(e, r, kv.value);
        *json = kv.value; /* take ownership of the value string */
        kv.value = NULL;
        bagua__etcd_kv_clear(&kv);
        return BAGUA_OK;
      }
    }
    bagua__etcd_kv_clear(&kv);
    /* etcd being briefly unreachable is retried like an absent round, within the bound. */
    if (bagua__now_ms() >= deadline) {
      BAGUA_WARN(
          "elastic: no round newer than %lld appeared under %s within %d ms (last etcd "
          "answer: %s)",
          (long long)e->round, e->round_key, e->round_wait_ms, bagua_err_name(st));
      return BAGUA_ERR_TIMEOUT;
    }
    struct timespec ts = {0, (long)delay_ms * 1000000L};
    nanosleep(&ts, NULL);
    if (delay_ms < 100) delay_ms *= 2;
  }
}

bagua_status_t bagua_elastic_rebuild(bagua_elastic_t *e) {
  if (!e) return BAGUA_ERR_INVALID_ARG;
  bagua_elastic_reset_t info = {e->round, 0, e->rank, 0, e->size, 0};
  bagua_status_t st;
  char *json = NULL;
  pthread_mutex_lock(&e->lock);
  bagua_comm_t *old = e->comm;
  e->comm = NULL;
  pthread_mutex_unlock(&e->lock);
  if (old) {
    /* Abort first so that peers blocked on us fail promptly instead of timing out. */
    bagua_comm_abort(old);
    bagua_comm_destroy(old);
  }
  /* A newer round can appear while we bootstrap the one we read (a second failure during
   * the settle window): the watch aborts that bootstrap and we move on to the newest. */
  for (;;) {
    int64_t round;
    int rank, size, nm = 0;
    char **members = NULL;
    BAGUA_CHECK_GOTO(wait_new_round(e, &json), st, out);
    BAGUA_CHECK_GOTO(parse_round(e, json, &round, &rank, &size, &members, &nm), st, out);
    free(json);
    json = NULL;
    BAGUA_INFO(BAGUA_SUBSYS_COMM, "elastic: joining round %lld as rank %d of %d", (long long)round,
               rank, size);
    bagua_comm_t *c = NULL;
    st = comm_for_round(e, round, rank, size, &c);
    if (st == BAGUA_OK) {
      pthread_mutex_lock(&e->lock);
      e->comm = c;
      e->cur_round = round;
      free_members(e->members, e->nmembers);
      e->members = members;
      e->nmembers = nm;
      pthread_mutex_unlock(&e->lock);
      e->round = round;
      e->rank = rank;
      e->size = size;
      break;
    }
    free_members(members, nm);
    if (atomic_load(&e->seen_round) <= round) {
      BAGUA_WARN("elastic: could not build the communicator of round %lld: %s", (long long)round,
                 bagua_err_name(st));
      goto out;
    }
    /* Pretend we are in the abandoned round so that wait_new_round looks past it. */
    e->round = round;
  }
  bagua__log_set_rank(e->rank);
  BAGUA_CHECK_GOTO(bagua_elastic_sync(e), st, out);
  info.new_round = e->round;
  info.new_rank = e->rank;
  info.new_size = e->size;
  for (int i = 0; i < e->nparts; i++)
    if (e->parts[i].p.reset)
      BAGUA_CHECK_GOTO(e->parts[i].p.reset(e, &info, e->parts[i].arg), st, out);
  BAGUA_INFO(BAGUA_SUBSYS_COMM, "elastic: round %lld running, rank %d of %d", (long long)e->round,
             e->rank, e->size);
  st = BAGUA_OK;
out:
  free(json);
  return st;
}

bagua_status_t bagua_elastic_attach(bagua_elastic_t *e, const bagua_elastic_participant_t *p,
                                    void *arg) {
  if (!e || !p || p->struct_size < sizeof(bagua_elastic_participant_t)) {
    BAGUA_WARN("bagua_elastic_attach: need a context and a participant with struct_size set");
    return BAGUA_ERR_INVALID_ARG;
  }
  pthread_mutex_lock(&e->lock);
  if (e->nparts == MAX_CALLBACKS) {
    pthread_mutex_unlock(&e->lock);
    BAGUA_WARN("bagua_elastic_attach: at most %d callbacks and participants", MAX_CALLBACKS);
    return BAGUA_ERR_INVALID_USAGE;
  }
  e->parts[e->nparts].p = *p;
  e->parts[e->nparts].arg = arg;
  e->nparts++;
  pthread_mutex_unlock(&e->lock);
  return BAGUA_OK;
}

void bagua_elastic_detach(bagua_elastic_t *e, void *arg) {
  if (!e) return;
  pthread_mutex_lock(&e->lock);
  int k = 0;
  for (int i = 0; i < e->nparts; i++)
    if (e->parts[i].arg != arg) e->parts[k++] = e->parts[i];
  e->nparts = k;
  pthread_mutex_unlock(&e->lock);
}

bagua_status_t bagua_elastic_on_reset(bagua_elastic_t *e, bagua_elastic_reset_cb cb, void *arg) {
  if (!e || !cb) return BAGUA_ERR_INVALID_ARG;
  bagua_elastic_participant_t p = {sizeof(p), NULL, NULL, NULL, cb};
  return bagua_elastic_attach(e, &p, arg);
}

/*
 * Tells bagua-agent (auto elastic mode) that this worker runs the elastic API, by creating
 * the file it named in BAGUA_ELASTIC_MARK. Failing to is not fatal: the agent then restarts
 * the worker on a membership change, which is still correct, only slower.
 */
static void announce_elastic(void) {
  const char *mark = bagua__param_str(BAGUA_P_ELASTIC_MARK);
  if (!mark || !mark[0]) return;
  int fd = open(mark, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    BAGUA_WARN(
        "elastic: cannot create BAGUA_ELASTIC_MARK file %s; bagua-agent will restart this "
        "worker on membership changes",
        mark);
    return;
  }
  close(fd);
}

bagua_status_t bagua_elastic_create(const bagua_elastic_config_t *cfg, bagua_elastic_t **out) {
  bagua_elastic_config_t def = BAGUA_ELASTIC_CONFIG_INIT;
  bagua_status_t st;
  bagua_elastic_t *e = NULL;
  if (!out) return BAGUA_ERR_INVALID_ARG;
  *out = NULL;
  if (!cfg) cfg = &def;
  if (cfg->struct_size < sizeof(bagua_elastic_config_t)) {
    BAGUA_WARN(
        "bagua_elastic_create: config struct_size %zu is smaller than this library's "
        "%zu; initialise it with BAGUA_ELASTIC_CONFIG_INIT",
        cfg->struct_size, sizeof(bagua_elastic_config_t));
    return BAGUA_ERR_INVALID_ARG;
  }
  BAGUA_CHECK(bagua__params_check());
  const char *boot = bagua__param_str(BAGUA_P_BOOTSTRAP);
  const char *endpoint = cfg->etcd ? cfg->etcd : strncmp(boot, "etcd://", 7) == 0 ? boot + 7 : "";
  const char *job = cfg->job_id ? cfg->job_id : bagua__param_str(BAGUA_P_JOB_ID);
  const char *node = cfg->node_id ? cfg->node_id : bagua__param_str(BAGUA_P_NODE_ID);
  int64_t round = cfg->round >= 0 ? cfg->round : bagua__param_int(BAGUA_P_ROUND);
  int rank = cfg->rank >= 0 ? cfg->rank : (int)bagua__param_int(BAGUA_P_RANK);
  int size = cfg->size >= 0 ? cfg->size : (int)bagua__param_int(BAGUA_P_WORLD_SIZE);
  if (!endpoint[0] || !node[0] || round < 0 || size < 1 || rank < 0 || rank >= size) {
    BAGUA_WARN(
        "bagua_elastic_create: needs an etcd endpoint (BAGUA_BOOTSTRAP=etcd://HOST:PORT), "
        "BAGUA_NODE_ID, BAGUA_ROUND >= 0 and RANK in [0, WORLD_SIZE) (bagua-agent sets "
        "them all); got endpoint \"%s\", node \"%s\", round %lld, rank %d, size %d",
        endpoint, node, (long long)round, rank, size);
    return BAGUA_ERR_INVALID_ARG;
  }
  int transport = cfg->transport;
  if (transport < 0) {
    const char *t = bagua__param_str(BAGUA_P_TRANSPORT);
    transport = strcasecmp(t, "tcp") == 0   ? BAGUA_TRANSPORT_TCP
                : strcasecmp(t, "shm") == 0 ? BAGUA_TRANSPORT_SHM
                                            : BAGUA_TRANSPORT_AUTO;
  } else if (transport > BAGUA_TRANSPORT_SHM) {
    BAGUA_WARN("bagua_elastic_create: transport %d is invalid; accepted: 0 auto, 1 tcp, 2 shm",
               transport);
    return BAGUA_ERR_INVALID_ARG;
  }
  BAGUA_CALLOC(e, 1);
  pthread_mutex_init(&e->lock, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&e->timer_cv, &ca);
  pthread_condattr_destroy(&ca);
  e->cur_round = round;
  e->abort_delay_ms = (int)bagua__param_int(BAGUA_P_ELASTIC_ABORT_DELAY_MS);
  if (pthread_create(&e->timer, NULL, timer_main, e) != 0) {
    BAGUA_WARN("bagua_elastic_create: cannot start the departure timer thread");
    st = BAGUA_ERR_SYSTEM;
    goto fail;
  }
  e->timer_started = 1;
  e->endpoint = dup_str(endpoint);
  e->job_id = dup_str(job);
  e->node_id = dup_str(node);
  if (!e->endpoint || !e->job_id || !e->node_id) {
    st = BAGUA_ERR_NO_MEMORY;
    goto fail;
  }
  e->round = round;
  e->rank = rank;
  e->size = size;
  e->local_rank = cfg->local_rank >= 0 ? cfg->local_rank
                  : bagua__param_int(BAGUA_P_LOCAL_RANK) >= 0
                      ? (int)bagua__param_int(BAGUA_P_LOCAL_RANK)
                      : 0;
  e->transport = transport;
  e->timeout_ms =
      cfg->timeout_ms > 0 ? cfg->timeout_ms : (int)bagua__param_int(BAGUA_P_COMM_TIMEOUT_MS);
  e->connect_timeout_ms = cfg->connect_timeout_ms > 0
                              ? cfg->connect_timeout_ms
                              : (int)bagua__param_int(BAGUA_P_CONNECT_TIMEOUT_MS);
  e->round_wait_ms = cfg->round_wait_ms > 0
                         ? cfg->round_wait_ms
                         : (int)(bagua__param_int(BAGUA_P_RDZV_TIMEOUT_S) * 1000);
  e->etcd_timeout_ms = (int)bagua__param_int(BAGUA_P_ETCD_TIMEOUT_MS);
  atomic_store(&e->seen_round, round);
  snprintf(e->round_key, sizeof(e->round_key), "/bagua/%s/round", e->job_id);
  BAGUA_CHECK_GOTO(bagua__etcd_create(e->endpoint, e->etcd_timeout_ms, &e->etcd), st, fail);
  /* Read the key, then watch from the next revision, so no publication is missed between. */
  bagua__etcd_kv_t kv;
  int found = 0;
  int64_t rev = 0;
  BAGUA_CHECK_GOTO(bagua__etcd_get(e->etcd, e->round_key, &kv, &found, &rev), st, fail);
  if (found) {
    int64_t r = parse_round_number(kv.value);
    /* The members of our own round, so that a later round dropping one is noticed. */
    if (r == round) {
      pthread_mutex_lock(&e->lock);
      parse_members(kv.value, &e->members, &e->nmembers);
      pthread_mutex_unlock(&e->lock);
    }
    note_round(e, r, kv.value);
  }
  bagua__etcd_kv_clear(&kv);
  bagua__etcd_watch_opts_t wo = {0, rev + 1, 0};
  BAGUA_CHECK_GOTO(
      bagua__etcd_watch_start(e->etcd, e->round_key, &wo, on_round_event, e, &e->watch), st, fail);
  BAGUA_CHECK_GOTO(bagua_elastic_register(e, "bagua.step", &e->step, sizeof(e->step)), st, fail);
  BAGUA_CHECK_GOTO(bagua_elastic_register(e, "bagua.epoch", &e->epoch, sizeof(e->epoch)), st, fail);
  bagua__log_set_rank(rank);
  bagua_comm_t *c = NULL;
  BAGUA_CHECK_GOTO(comm_for_round(e, round, rank, size, &c), st, fail);
  pthread_mutex_lock(&e->lock);
  e->comm = c;
  pthread_mutex_unlock(&e->lock);
  announce_elastic();
  *out = e;
  return BAGUA_OK;
fail:
  bagua_elastic_destroy(e);
  return st;
}

void bagua_elastic_destroy(bagua_elastic_t *e) {
  if (!e) return;
  if (e->timer_started) {
    pthread_mutex_lock(&e->lock);
    e->timer_stop = 1;
    pthread_cond_signal(&e->timer_cv);
    pthread_mutex_unlock(&e->lock);
    pthread_join(e->timer, NULL);
  }
  bagua__etcd_watch_stop(e->watch);
  bagua__etcd_destroy(e->etcd);
  bagua_comm_destroy(e->comm);
  for (size_t i = 0; i < e->nentries; i++) free(e->entries[i].copy);
  free(e->entries);
  free(e->endpoint);
  free(e->job_id);
  free(e->node_id);
  free_members(e->members, e->nmembers);
  pthread_cond_destroy(&e->timer_cv);
  pthread_mutex_destroy(&e->lock);
  free(e);
}

bagua_comm_t *bagua_elastic_comm(const bagua_elastic_t *e) {
  return e ? e->comm : NULL;
}
int64_t bagua_elastic_round(const bagua_elastic_t *e) {
  return e ? e->round : -1;
}
int bagua_elastic_rank(const bagua_elastic_t *e) {
  return e ? e->rank : -1;
}
int bagua_elastic_size(const bagua_elastic_t *e) {
  return e ? e->size : 0;
}
int64_t bagua_elastic_step(const bagua_elastic_t *e) {
  return e ? e->step : 0;
}
void bagua_elastic_set_step(bagua_elastic_t *e, int64_t step) {
  if (e) e->step = step;
}
int64_t bagua_elastic_epoch(const bagua_elastic_t *e) {
  return e ? e->epoch : 0;
}
void bagua_elastic_set_epoch(bagua_elastic_t *e, int64_t epoch) {
  if (e) e->epoch = epoch;
}
