/*
 * Moving the elastic context from round to round: the watch on this node's assignment, the
 * departure timer that cuts off communication of a round that lost a member, the build of each
 * round's world communicator (abortable while it bootstraps) and bagua_elastic_rebuild(),
 * which waits for a newer round, joins it and hands rank 0's state to the new world.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../bootstrap.h"
#include "common/check.h"
#include "common/log.h"
#include "common/rdzv/rdzv.h"
#include "common/time.h"
#include "elastic_internal.h"

/* ---------------------------------------------------------------------------------------- */
/* Departure timer                                                                          */
/* ---------------------------------------------------------------------------------------- */

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
    /* Sleep until the pending abort is due, or until note_round() arms the timer or destroy
     * stops it when none is pending. */
    if (!e->abort_at || !bagua__expired(e->abort_at)) {
      bagua__cond_wait_until(&e->timer_cv, &e->lock,
                             e->abort_at ? e->abort_at : BAGUA__NO_DEADLINE);
      continue;
    }
    /* Still in a round older than the one that dropped a member: cut it off. */
    if (e->cur_round < e->abort_round) {
      BAGUA_INFO(BAGUA_SUBSYS_COMM,
                 "elastic: round %lld dropped a member; aborting communication of round %lld",
                 (long long)e->abort_round, (long long)e->cur_round);
      abort_current(e);
    }
    e->abort_at = 0;
  }
  pthread_mutex_unlock(&e->lock);
  return NULL;
}

bagua_status_t bagua__elastic_timer_start(bagua_elastic_t *e) {
  if (pthread_create(&e->timer, NULL, timer_main, e) != 0) {
    BAGUA_WARN("bagua_elastic_create: cannot start the departure timer thread");
    return BAGUA_ERR_SYSTEM;
  }
  e->timer_started = 1;
  return BAGUA_OK;
}

void bagua__elastic_timer_stop(bagua_elastic_t *e) {
  if (!e->timer_started) return;
  pthread_mutex_lock(&e->lock);
  e->timer_stop = 1;
  pthread_cond_signal(&e->timer_cv);
  pthread_mutex_unlock(&e->lock);
  pthread_join(e->timer, NULL);
  e->timer_started = 0;
}

/* ---------------------------------------------------------------------------------------- */
/* Round watch                                                                              */
/* ---------------------------------------------------------------------------------------- */

/*
 * Records round `r` of an assignment as seen. Its `departed` count says whether members of the
 * round before it left; a round that skipped one (the leader may publish two before it writes
 * the assignments of the first) may have dropped a member too. Either way communication still
 * running in an older round is cut off after the departure delay: a peer it waits for may be
 * gone. An abort that was not needed costs the step in flight, no more.
 */
static void note_round(bagua_elastic_t *e, int64_t r, int departed) {
  int64_t cur = atomic_load(&e->seen_round);
  while (r > cur && !atomic_compare_exchange_weak(&e->seen_round, &cur, r)) {
  }
  pthread_mutex_lock(&e->lock);
  if (e->building && r > e->building_round) bagua_comm_abort(e->building);
  int64_t before = e->last_assigned > e->cur_round ? e->last_assigned : e->cur_round;
  int lost = departed > 0 || r > before + 1;
  if (r > e->last_assigned) e->last_assigned = r;
  if (lost && r > e->cur_round && r > e->abort_round) {
    e->abort_round = r;
    e->abort_at = bagua__deadline_in(e->abort_delay_ms);
    pthread_cond_signal(&e->timer_cv);
  }
  pthread_mutex_unlock(&e->lock);
}

/* The round watch of a node that lost its assignment (see record.c). */
static int on_round_event(void *arg, const bagua__etcd_event_t *ev) {
  bagua_elastic_t *e = arg;
  if (ev->type != BAGUA__ETCD_EVENT_PUT) return 0;
  int64_t r = -1;
  int departed = 0;
  free(bagua__elastic_assign_from_round(ev->value, e->round_key, ev->mod_revision, e->node_id, &r,
                                        &departed));
  BAGUA_INFO(BAGUA_SUBSYS_COMM, "elastic: round key now holds round %lld (%s)", (long long)r,
             departed ? "a member left" : "no member left");
  if (r >= 0) note_round(e, r, departed);
  return 0;
}

/* The node's assignment is gone: its agent left the job or lost its lease, and the leader
 * writes assignments for registered nodes only. Follow the round record from `rev` on, to
 * learn whether the next round still has this node; once per context. */
static void follow_round(bagua_elastic_t *e, int64_t rev) {
  pthread_mutex_lock(&e->lock);
  int started = e->round_watch != NULL;
  pthread_mutex_unlock(&e->lock);
  if (started) return;
  BAGUA_INFO(BAGUA_SUBSYS_COMM, "elastic: %s is gone; following %s", e->assign_key, e->round_key);
  bagua__etcd_watch_t *w = NULL;
  bagua__etcd_watch_opts_t wo = {0, rev, 0};
  if (bagua__etcd_watch_start(e->etcd, e->round_key, &wo, on_round_event, e, &w) != BAGUA_OK) {
    BAGUA_WARN(
        "elastic: cannot watch %s: a round without this node is noticed only at the "
        "next rebuild",
        e->round_key);
    return;
  }
  pthread_mutex_lock(&e->lock);
  e->round_watch = w;
  pthread_mutex_unlock(&e->lock);
}

static int on_assign_event(void *arg, const bagua__etcd_event_t *ev) {
  bagua_elastic_t *e = arg;
  if (ev->type == BAGUA__ETCD_EVENT_DELETE) {
    follow_round(e, ev->mod_revision);
  } else if (ev->type == BAGUA__ETCD_EVENT_PUT) {
    int departed = 0;
    int64_t r = bagua__elastic_assign_round(ev->value, e->assign_key, ev->mod_revision, &departed);
    BAGUA_INFO(BAGUA_SUBSYS_COMM, "elastic: assignment now of round %lld (%d member(s) left)",
               (long long)r, departed);
    if (r >= 0) note_round(e, r, departed);
  } else if (ev->type == BAGUA__ETCD_EVENT_FAILED) {
    /* The watch only speeds things up: rebuild reads the key itself, and a dead peer still
     * surfaces through the collectives. */
    BAGUA_WARN(
        "elastic: watch on %s ended (%s); world changes are now noticed only through "
        "failed collectives",
        e->assign_key, bagua_err_name(ev->status));
  }
  return 0;
}

bagua_status_t bagua__elastic_watch_start(bagua_elastic_t *e) {
  bagua__etcd_kv_t kv;
  int found = 0;
  int64_t rev = 0;
  BAGUA_CHECK(bagua__etcd_get(e->etcd, e->assign_key, &kv, &found, &rev));
  if (found) {
    int departed = 0;
    int64_t r = bagua__elastic_assign_round(kv.value, e->assign_key, kv.mod_revision, &departed);
    /* The starting round's own assignment only marks it seen. */
    if (r >= 0) note_round(e, r, departed);
  }
  bagua__etcd_kv_clear(&kv);
  bagua__etcd_watch_opts_t wo = {0, rev + 1, 0};
  return bagua__etcd_watch_start(e->etcd, e->assign_key, &wo, on_assign_event, e, &e->watch);
}

/* ---------------------------------------------------------------------------------------- */
/* Communicator of a round                                                                  */
/* ---------------------------------------------------------------------------------------- */

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

bagua_status_t bagua__elastic_comm_for_round(bagua_elastic_t *e, int64_t round, int rank, int size,
                                             bagua_comm_t **out) {
  bagua__boot_etcd_t boot = {e->endpoint, e->job_id, round, e->etcd_timeout_ms};
  bagua__comm_build_t b = {
      .s = e->comm_settings,
      .round = round,
      .boot_fn = bagua__bootstrap_etcd,
      .boot_arg = &boot,
      .on_alloc = building_started,
      .on_release = building_ended,
      .hook_arg = e,
  };
  b.s.rank = rank;
  b.s.size = size;
  pthread_mutex_lock(&e->lock);
  e->building_round = round;
  pthread_mutex_unlock(&e->lock);
  bagua_status_t st = bagua__comm_build(&b, out);
  if (st == BAGUA_OK) building_ended(*out, e);
  return st;
}

/* ---------------------------------------------------------------------------------------- */
/* Rebuild                                                                                  */
/* ---------------------------------------------------------------------------------------- */

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

/* Waits for an assignment of a round newer than the current one and returns it (JSON,
 * malloc'ed). */
static bagua_status_t wait_new_round(bagua_elastic_t *e, char **json) {
  int64_t deadline = bagua__deadline_in(e->round_wait_ms);
  int delay_ms = 5;
  *json = NULL;
  for (;;) {
    bagua__etcd_kv_t kv;
    int found = 0;
    bagua_status_t st = bagua__etcd_get(e->etcd, e->assign_key, &kv, &found, NULL);
    if (st == BAGUA_OK && found) {
      int departed = 0;
      int64_t r = bagua__elastic_assign_round(kv.value, e->assign_key, kv.mod_revision, &departed);
      if (r > e->round) {
        note_round(e, r, departed);
        *json = kv.value; /* take ownership of the value string */
        kv.value = NULL;
        bagua__etcd_kv_clear(&kv);
        return BAGUA_OK;
      }
    } else if (st == BAGUA_OK) {
      /* No assignment: this node is not registered (record.c); the round says where it is. */
      bagua__etcd_kv_clear(&kv);
      st = bagua__etcd_get(e->etcd, e->round_key, &kv, &found, NULL);
      int64_t r = -1;
      int departed = 0;
      char *a = st == BAGUA_OK && found
                    ? bagua__elastic_assign_from_round(kv.value, e->round_key, kv.mod_revision,
                                                       e->node_id, &r, &departed)
                    : NULL;
      if (a && r > e->round) {
        note_round(e, r, departed);
        *json = a;
        bagua__etcd_kv_clear(&kv);
        return BAGUA_OK;
      }
      free(a);
    }
    bagua__etcd_kv_clear(&kv);
    /* etcd being briefly unreachable is retried like an absent round, within the bound. */
    if (bagua__expired(deadline)) {
      BAGUA_WARN(
          "elastic: no round newer than %lld appeared under %s within %d ms (last etcd "
          "answer: %s)",
          (long long)e->round, e->assign_key, e->round_wait_ms, bagua_err_name(st));
      return BAGUA_ERR_TIMEOUT;
    }
    bagua__sleep_ms(delay_ms);
    if (delay_ms < 100) delay_ms *= 2;
  }
}

/*
 * Called when this worker must leave its round but no newer round is known: a collective
 * failed or made no progress for BAGUA_COMM_TIMEOUT_MS (a stalled peer), and nothing changed
 * the membership. Without a word from us no agent would publish a round (every worker would
 * then sit in the rebuild wait until its timeout), so we ask for one in
 * rounds/<N>/rebuild/<rank>; the leader retries the round with the same members. Best effort:
 * the wait that follows is bounded by the rendezvous timeout either way.
 */
static void request_round(bagua_elastic_t *e) {
  char key[BAGUA_RDZV_KEY_MAX];
  bagua__rdzv_rebuild_t rq;
  memset(&rq, 0, sizeof(rq));
  snprintf(rq.node, sizeof(rq.node), "%s", e->node_id);
  rq.rank = e->rank;
  rq.time_ms = bagua__wall_ms();
  snprintf(rq.why, sizeof(rq.why), "%.120s", bagua_last_error());
  char *v = bagua__rdzv_rebuild_encode(&rq);
  if (v && bagua__rdzv_key(key, sizeof(key), e->job_id, BAGUA__RDZV_KEY_REBUILD, e->round, NULL,
                           e->rank) == 0) {
    bagua_status_t st = bagua__etcd_put(e->etcd, key, v, strlen(v), 0, NULL, NULL);
    BAGUA_INFO(BAGUA_SUBSYS_COMM, "elastic: round %lld is stuck (%s); asked for a new one: %s",
               (long long)e->round, rq.why, bagua_err_name(st));
  }
  free(v);
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
  if (atomic_load(&e->seen_round) <= e->round) request_round(e);
  /* A newer round can appear while we bootstrap the one we read (a second failure during
   * the settle window): the watch aborts that bootstrap and we move on to the newest. */
  for (;;) {
    int64_t round;
    int rank, size;
    BAGUA_CHECK_GOTO(wait_new_round(e, &json), st, out);
    BAGUA_CHECK_GOTO(
        bagua__elastic_place(json, e->assign_key, e->node_id, e->local_rank, &round, &rank, &size),
        st, out);
    free(json);
    json = NULL;
    BAGUA_INFO(BAGUA_SUBSYS_COMM, "elastic: joining round %lld as rank %d of %d", (long long)round,
               rank, size);
    bagua_comm_t *c = NULL;
    st = bagua__elastic_comm_for_round(e, round, rank, size, &c);
    if (st == BAGUA_OK) {
      pthread_mutex_lock(&e->lock);
      e->comm = c;
      e->cur_round = round;
      pthread_mutex_unlock(&e->lock);
      e->round = round;
      e->rank = rank;
      e->size = size;
      break;
    }
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
