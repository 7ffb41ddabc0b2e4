/*
 * Unit tests of the leader's round logic (agent/leader.c) on hand-built snapshots: windows,
 * member order, restart accounting, root cause, success and the rendezvous timeout.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "index.h"
#include "leader.h"
#include "ring.h"
#include "test.h"

#define TTL_S 2

static bagua__leader_params_t P = {.nnodes_min = 2,
                                   .nnodes_max = 3,
                                   .max_restarts = 1,
                                   .last_call_ms = 1000,
                                   .settle_ms = 500,
                                   .rdzv_timeout_s = 10,
                                   .lease_ttl_s = TTL_S,
                                   .self = "a"};

/* Snapshot builder: nodes are given in any order with their create revision. */
static void add_node(bagua__agent_snap_t *s, const char *id, int64_t rev, int nproc) {
  s->nodes = realloc(s->nodes, (s->nnodes + 1) * sizeof(*s->nodes));
  bagua__rdzv_node_t *n = &s->nodes[s->nnodes++];
  memset(n, 0, sizeof(*n));
  snprintf(n->id, sizeof(n->id), "%s", id);
  snprintf(n->addr, sizeof(n->addr), "10.0.0.%d", (int)rev);
  n->master_port = 1000 + (int)rev;
  n->nproc = nproc;
  n->create_rev = rev;
  n->lease = 7000 + rev; /* each registration on its own lease */
  /* Keep the snapshot's invariant: oldest first. */
  for (size_t i = s->nnodes - 1; i > 0 && s->nodes[i].create_rev < s->nodes[i - 1].create_rev;
       i--) {
    bagua__rdzv_node_t t = s->nodes[i];
    s->nodes[i] = s->nodes[i - 1];
    s->nodes[i - 1] = t;
  }
}

static void drop_node(bagua__agent_snap_t *s, const char *id) {
  for (size_t i = 0; i < s->nnodes; i++)
    if (!strcmp(s->nodes[i].id, id)) {
      memmove(&s->nodes[i], &s->nodes[i + 1], (s->nnodes - i - 1) * sizeof(*s->nodes));
      s->nnodes--;
      return;
    }
}

/* Installs a round with members "x,y,z" (revisions taken from the live nodes). */
static void set_round(bagua__agent_snap_t *s, int64_t number, const char *csv, int restarts) {
  bagua__rdzv_round_clear(&s->round);
  s->has_round = 1;
  s->round.round = number;
  s->round.restart_count = restarts;
  s->round.members = calloc(8, sizeof(*s->round.members));
  char buf[128];
  snprintf(buf, sizeof(buf), "%s", csv);
  for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
    bagua__rdzv_member_t *m = &s->round.members[s->round.nmembers++];
    snprintf(m->id, sizeof(m->id), "%s", tok);
    m->nproc = 1;
    for (size_t i = 0; i < s->nnodes; i++)
      if (!strcmp(s->nodes[i].id, tok)) {
        m->rev = s->nodes[i].create_rev;
        m->nproc = s->nodes[i].nproc;
      }
    s->round.world_size += m->nproc;
  }
  s->ndone = 0;
}

static void add_done(bagua__agent_snap_t *s, const char *node, bagua__done_state_t state,
                     int64_t time_ms, int rank) {
  s->done = realloc(s->done, (s->ndone + 1) * sizeof(*s->done));
  bagua__agent_done_entry_t *e = &s->done[s->ndone++];
  memset(e, 0, sizeof(*e));
  snprintf(e->node, sizeof(e->node), "%s", node);
  snprintf(e->done.f.node, sizeof(e->done.f.node), "%s", node);
  e->done.state = state;
  e->done.f.time_ms = time_ms;
  e->done.f.rank = rank;
  e->done.f.exit_code = state == BAGUA__DONE_FAILED ? 3 + rank : 0;
}

/* progress/<node> naming `round` on `lease` (0: the node's own lease): the node's agent
 * acknowledged that round. Replaces an earlier record of the node. */
static void add_ack(bagua__agent_snap_t *s, const char *node, int64_t round, int64_t lease) {
  bagua__agent_ack_t *e = NULL;
  for (size_t i = 0; i < s->nacks; i++)
    if (!strcmp(s->acks[i].node, node)) e = &s->acks[i];
  if (!e) {
    s->acks = realloc(s->acks, (s->nacks + 1) * sizeof(*s->acks));
    e = &s->acks[s->nacks++];
  }
  memset(e, 0, sizeof(*e));
  snprintf(e->node, sizeof(e->node), "%s", node);
  e->round = round;
  const bagua__rdzv_node_t *n = bagua__agent_snap_node(s, node);
  e->lease = lease ? lease : n ? n->lease : 1;
}

static bagua__lead_decision_t decide(bagua__leader_state_t *st, const bagua__agent_snap_t *s,
                                     int64_t now) {
  bagua__lead_decision_t d;
  ASSERT_EQ(bagua__leader_decide(&P, st, s, now, 123456, &d), 0);
  return d;
}

static void expect_members(const bagua__rdzv_round_t *r, const char *csv) {
  char got[256] = "";
  for (int i = 0; i < r->nmembers; i++) {
    if (i) strcat(got, ",");
    strcat(got, r->members[i].id);
  }
  ASSERT_STREQ(got, csv);
}

static void test_initial(void) {
  bagua__agent_snap_t s;
  memset(&s, 0, sizeof(s));
  bagua__leader_state_t st = {.round_seen = -1};
  /* Below MIN: wait for the rendezvous timeout, then fail. */
  add_node(&s, "a", 10, 2);
  bagua__lead_decision_t d = decide(&st, &s, 1000);
  ASSERT_EQ(d.action, BAGUA__LEAD_NONE);
  ASSERT_EQ(d.wake_at, 1000 + 10000);
  /* MIN reached: the last-call window opens. */
  add_node(&s, "c", 30, 1);
  d = decide(&st, &s, 2000);
  ASSERT_EQ(d.action, BAGUA__LEAD_NONE);
  ASSERT_EQ(d.wake_at, 3000);
  /* A node joins within the window, registered between the others: order is by revision. */
  add_node(&s, "b", 20, 4);
  add_node(&s, "d", 40, 1);
  d = decide(&st, &s, 2500);
  ASSERT_EQ(d.action, BAGUA__LEAD_PUBLISH); /* MAX (3) registered: no need to wait */
  ASSERT_EQ(d.round.round, 1);
  expect_members(&d.round, "a,b,c"); /* d is beyond MAX: a spare */
  ASSERT_EQ(d.round.world_size, 7);
  ASSERT_STREQ(d.round.master_addr, "10.0.0.10");
  ASSERT_EQ(d.round.master_port, 1010);
  ASSERT_EQ(d.round.restart_count, 0);
  ASSERT_EQ(d.round.reason, BAGUA__ROUND_INITIAL);
  ASSERT_EQ(d.round.members[1].rev, 20);
  bagua__rdzv_round_clear(&d.round);

  /* Last call expires with MIN < n < MAX. */
  bagua__agent_snap_t s2;
  memset(&s2, 0, sizeof(s2));
  bagua__leader_state_t st2 = {.round_seen = -1};
  add_node(&s2, "x", 5, 1);
  add_node(&s2, "y", 6, 1);
  ASSERT_EQ(decide(&st2, &s2, 0).action, BAGUA__LEAD_NONE);
  d = decide(&st2, &s2, 1000);
  ASSERT_EQ(d.action, BAGUA__LEAD_PUBLISH);
  expect_members(&d.round, "x,y");
  ASSERT_EQ(d.round.departed, 0); /* a first round */
  bagua__rdzv_round_clear(&d.round);

  /* Below MIN for the whole timeout. */
  bagua__agent_snap_t s3;
  memset(&s3, 0, sizeof(s3));
  bagua__leader_state_t st3 = {.round_seen = -1};
  add_node(&s3, "x", 5, 1);
  ASSERT_EQ(decide(&st3, &s3, 100).action, BAGUA__LEAD_NONE);
  d = decide(&st3, &s3, 100 + 10000);
  ASSERT_EQ(d.action, BAGUA__LEAD_RDZV_FAILED);
  ASSERT_TRUE(strstr(d.message, "rendezvous timed out: 1 node(s) registered") != NULL);
  bagua__agent_snap_clear(&s);
  bagua__agent_snap_clear(&s2);
  bagua__agent_snap_clear(&s3);
}

/* torchrun's --node_rank: nodes that join together take their places by it, whatever their
 * registration order; nodes without one come after them; survivors keep their places. */
static void test_node_rank_order(void) {
  bagua__agent_snap_t s;
  memset(&s, 0, sizeof(s));
  bagua__leader_state_t st = {.round_seen = -1};
  add_node(&s, "late", 10, 1); /* registered first, without a node rank */
  add_node(&s, "one", 20, 1);
  add_node(&s, "zero", 30, 1);
  for (size_t i = 0; i < s.nnodes; i++) {
    s.nodes[i].has_node_rank = strcmp(s.nodes[i].id, "late") != 0;
    s.nodes[i].node_rank = strcmp(s.nodes[i].id, "zero") == 0 ? 0 : 1;
  }
  bagua__lead_decision_t d = decide(&st, &s, 1000);
  ASSERT_EQ(d.action, BAGUA__LEAD_PUBLISH); /* MAX (3) registered */
  expect_members(&d.round, "zero,one,late");
  ASSERT_STREQ(d.round.master_addr, "10.0.0.30"); /* rank 0 is node rank 0's */
  bagua__rdzv_round_clear(&d.round);
  /* "one" leaves and "zero2" (node rank 0 too) joins: survivors keep their order, the
   * newcomer comes after them. */
  set_round(&s, 1, "zero,one,late", 0);
  drop_node(&s, "one");
  add_node(&s, "zero2", 40, 1);
  s.nodes[s.nnodes - 1].has_node_rank = 1;
  s.nodes[s.nnodes - 1].node_rank = 0;
  d = decide(&st, &s, 2000);
  int64_t at = d.wake_at;
  if (d.action == BAGUA__LEAD_NONE) d = decide(&st, &s, at);
  ASSERT_EQ(d.action, BAGUA__LEAD_PUBLISH);
  expect_members(&d.round, "zero,late,zero2");
  bagua__rdzv_round_clear(&d.round);
  bagua__agent_snap_clear(&s);
}

static void test_membership(void) {
  bagua__agent_snap_t s;
  memset(&s, 0, sizeof(s));
  bagua__leader_state_t st = {.round_seen = -1};
  add_node(&s, "a", 10, 1);
  add_node(&s, "b", 20, 1);
  add_node(&s, "c", 30, 1);
  set_round(&s, 4, "c,a,b", 1); /* an order that is not by revision: it must be kept */
  ASSERT_EQ(decide(&st, &s, 0).action, BAGUA__LEAD_NONE);
  /* a leaves: settle, then survivors in their previous order, restart count unchanged. */
  drop_node(&s, "a");
  bagua__lead_decision_t d = decide(&st, &s, 100);
  ASSERT_EQ(d.action, BAGUA__LEAD_NONE);
  ASSERT_EQ(d.wake_at, 600);
  /* A newcomer older than the survivors (lower revision) still comes after them. It is a
   * change of its own: the window now closes a settle window after it. */
  add_node(&s, "e", 5, 1);
  d = decide(&st, &s, 600);
  ASSERT_EQ(d.action, BAGUA__LEAD_NONE);
  ASSERT_EQ(d.wake_at, 1100);
  d = decide(&st, &s, 1100);
  ASSERT_EQ(d.action, BAGUA__LEAD_PUBLISH);
  expect_members(&d.round, "c,b,e");
  ASSERT_EQ(d.round.round, 5);
  ASSERT_EQ(d.round.departed, 1); /* a; e joined, which is no departure */
  ASSERT_EQ(d.round.restart_count, 1);
  ASSERT_EQ(d.round.reason, BAGUA__ROUND_MEMBERSHIP);
  ASSERT_STREQ(d.round.master_addr, "10.0.0.30");
  bagua__rdzv_round_clear(&d.round);

  /* A member registered again (new revision: its lease was lost) is a membership change. */
  set_round(&s, 5, "c,b,e", 1);
  ASSERT_EQ(decide(&st, &s, 1100).action, BAGUA__LEAD_NONE);
  drop_node(&s, "b");
  add_node(&s, "b", 50, 1);
  d = decide(&st, &s, 1100);
  ASSERT_EQ(d.wake_at, 1600);
  d = decide(&st, &s, 1600);
  ASSERT_EQ(d.action, BAGUA__LEAD_PUBLISH);
  expect_members(&d.round, "c,b,e");
  ASSERT_EQ(d.round.members[1].rev, 50);
  bagua__rdzv_round_clear(&d.round);

  /* Below MIN after a departure: wait up to the rendezvous timeout, then fail. */
  set_round(&s, 6, "c,b,e", 1);
  drop_node(&s, "b");
  drop_node(&s, "e");
  d = decide(&st, &s, 2000);
  ASSERT_EQ(d.action, BAGUA__LEAD_NONE);
  ASSERT_EQ(d.wake_at, 12000);
  add_node(&s, "f", 60, 1); /* back to MIN within the timeout: re-form after settling */
  d = decide(&st, &s, 5000);
  ASSERT_EQ(d.action, BAGUA__LEAD_NONE);
  d = decide(&st, &s, 5500);
  ASSERT_EQ(d.action, BAGUA__LEAD_PUBLISH);
  expect_members(&d.round, "c,f");
  bagua__rdzv_round_clear(&d.round);
  drop_node(&s, "f");
  decide(&st, &s, 6000);
  d = decide(&st, &s, 16000);
  ASSERT_EQ(d.action, BAGUA__LEAD_RDZV_FAILED);
  bagua__agent_snap_clear(&s);
}

static void test_failures(void) {
  bagua__agent_snap_t s;
  memset(&s, 0, sizeof(s));
  bagua__leader_state_t st = {.round_seen = -1};
  add_node(&s, "a", 10, 1);
  add_node(&s, "b", 20, 1);
  add_node(&s, "c", 30, 1);
  set_round(&s, 1, "a,b,c", 0);
  /* One failure; c has not answered: wait a TTL (+1 s) for a possibly dead node's lease. */
  add_done(&s, "b", BAGUA__DONE_FAILED, 5000, 1);
  bagua__lead_decision_t d = decide(&st, &s, 100);
  ASSERT_EQ(d.action, BAGUA__LEAD_NONE);
  ASSERT_EQ(d.wake_at, 100 + TTL_S * 1000 + 1000);
  /* Every member answered: restart now, counted. */
  add_done(&s, "a", BAGUA__DONE_STOPPED, 5001, 0);
  add_done(&s, "c", BAGUA__DONE_STOPPED, 5002, 2);
  d = decide(&st, &s, 200);
  ASSERT_EQ(d.action, BAGUA__LEAD_PUBLISH);
  ASSERT_EQ(d.round.restart_count, 1);
  ASSERT_EQ(d.round.reason, BAGUA__ROUND_FAILURE);
  expect_members(&d.round, "a,b,c");
  bagua__rdzv_round_clear(&d.round);

  /* Restarts used up: the earliest failure is the root cause. */
  set_round(&s, 2, "a,b,c", 1);
  add_done(&s, "c", BAGUA__DONE_FAILED, 7000, 2);
  add_done(&s, "a", BAGUA__DONE_FAILED, 6000, 0);
  d = decide(&st, &s, 300);
  ASSERT_EQ(d.action, BAGUA__LEAD_NONE); /* b has not answered yet */
  d = decide(&st, &s, 300 + TTL_S * 1000 + 1000);
  ASSERT_EQ(d.action, BAGUA__LEAD_FAILED);
  ASSERT_EQ(d.root.rank, 0);
  ASSERT_EQ(d.root.time_ms, 6000);

  /* A failure while a member is gone is a membership change: not counted. */
  bagua__leader_state_t st2 = {.round_seen = -1};
  set_round(&s, 3, "a,b,c", 1);
  add_done(&s, "a", BAGUA__DONE_FAILED, 8000, 0);
  drop_node(&s, "c");
  d = decide(&st2, &s, 0);
  ASSERT_EQ(d.action, BAGUA__LEAD_NONE);
  d = decide(&st2, &s, 500);
  ASSERT_EQ(d.action, BAGUA__LEAD_PUBLISH);
  ASSERT_EQ(d.round.restart_count, 1);
  ASSERT_EQ(d.round.reason, BAGUA__ROUND_MEMBERSHIP);
  expect_members(&d.round, "a,b");
  ASSERT_EQ(d.round.departed, 1);
  bagua__rdzv_round_clear(&d.round);
  bagua__agent_snap_clear(&s);
}

static void test_success(void) {
  bagua__agent_snap_t s;
  memset(&s, 0, sizeof(s));
  bagua__leader_state_t st = {.round_seen = -1};
  add_node(&s, "a", 10, 1);
  add_node(&s, "b", 20, 1);
  set_round(&s, 2, "a,b", 0);
  add_done(&s, "b", BAGUA__DONE_SUCCEEDED, 1, 1);
  /* b finished and left, a newcomer arrived: neither re-forms a finishing job. */
  drop_node(&s, "b");
  add_node(&s, "c", 30, 1);
  bagua__lead_decision_t d = decide(&st, &s, 0);
  ASSERT_EQ(d.action, BAGUA__LEAD_NONE);
  ASSERT_EQ(decide(&st, &s, 5000).action, BAGUA__LEAD_NONE);
  add_done(&s, "a", BAGUA__DONE_SUCCEEDED, 2, 0);
  ASSERT_EQ(decide(&st, &s, 5001).action, BAGUA__LEAD_SUCCEEDED);
  /* A terminal status stops all decisions. */
  s.has_status = 1;
  s.status.state = BAGUA__JOB_SUCCEEDED;
  ASSERT_EQ(decide(&st, &s, 5002).action, BAGUA__LEAD_NONE);
  bagua__agent_snap_clear(&s);
}

/* In-process elasticity: a member that kept its workers through the round's membership change
 * succeeded, so training is over; a newcomer of that round that never got to train gets one
 * lease TTL (2 s here) plus 1 s to report, then the job succeeds without it. A newcomer's
 * failure does not fail the job either; a kept member's failure does. */
static void test_kept_success(void) {
  bagua__agent_snap_t s;
  memset(&s, 0, sizeof(s));
  bagua__leader_state_t st = {.round_seen = -1};
  add_node(&s, "a", 10, 1);
  add_node(&s, "b", 20, 1);
  add_node(&s, "c", 30, 1);
  set_round(&s, 3, "a,b,c", 0);
  add_done(&s, "a", BAGUA__DONE_SUCCEEDED, 1, 0);
  s.done[0].done.kept = 1;
  bagua__lead_decision_t d = decide(&st, &s, 1000);
  ASSERT_EQ(d.action, BAGUA__LEAD_NONE);
  ASSERT_EQ(d.wake_at, 1000 + P.lease_ttl_s * 1000 + 1000);
  add_done(&s, "b", BAGUA__DONE_SUCCEEDED, 2, 1);
  s.done[1].done.kept = 1;
  ASSERT_EQ(decide(&st, &s, 2000).action, BAGUA__LEAD_NONE);
  ASSERT_EQ(decide(&st, &s, 1000 + P.lease_ttl_s * 1000 + 1000).action, BAGUA__LEAD_SUCCEEDED);
  /* The newcomer's bootstrap failure instead: success at once. */
  bagua__leader_state_t st2 = {.round_seen = -1};
  add_done(&s, "c", BAGUA__DONE_FAILED, 3, 2);
  ASSERT_EQ(decide(&st2, &s, 1000).action, BAGUA__LEAD_SUCCEEDED);
  /* A kept member failing is a real failure, whatever another kept member did. */
  s.done[1].done.state = BAGUA__DONE_FAILED;
  bagua__leader_state_t st3 = {.round_seen = -1};
  d = decide(&st3, &s, 1000);
  ASSERT_TRUE(d.action != BAGUA__LEAD_SUCCEEDED);
  bagua__rdzv_round_clear(&d.round); /* a failure round may have been formed */
  bagua__agent_snap_clear(&s);
  /* Workers started in this round (restart mode): no early success. */
  memset(&s, 0, sizeof(s));
  add_node(&s, "a", 10, 1);
  add_node(&s, "b", 20, 1);
  set_round(&s, 3, "a,b", 0);
  add_done(&s, "a", BAGUA__DONE_SUCCEEDED, 1, 0);
  bagua__leader_state_t st4 = {.round_seen = -1};
  ASSERT_EQ(decide(&st4, &s, 1000).action, BAGUA__LEAD_NONE);
  ASSERT_EQ(decide(&st4, &s, 100000).action, BAGUA__LEAD_NONE);
  bagua__agent_snap_clear(&s);
}

/* A worker's rebuild request retries the round with the same members after the settle
 * window ("stall", restart count unchanged); a failure in the same round comes first. */
static void test_stall(void) {
  bagua__agent_snap_t s;
  memset(&s, 0, sizeof(s));
  bagua__leader_state_t st = {.round_seen = -1};
  add_node(&s, "a", 10, 1);
  add_node(&s, "b", 20, 1);
  set_round(&s, 3, "b,a", 1);
  ASSERT_EQ(decide(&st, &s, 0).action, BAGUA__LEAD_NONE);
  s.nrebuild = 1;
  bagua__lead_decision_t d = decide(&st, &s, 100);
  ASSERT_EQ(d.action, BAGUA__LEAD_NONE);
  ASSERT_EQ(d.wake_at, 600);
  d = decide(&st, &s, 600);
  ASSERT_EQ(d.action, BAGUA__LEAD_PUBLISH);
  expect_members(&d.round, "b,a");
  ASSERT_EQ(d.round.round, 4);
  ASSERT_EQ(d.round.restart_count, 1);
  ASSERT_EQ(d.round.reason, BAGUA__ROUND_STALL);
  bagua__rdzv_round_clear(&d.round);
  /* A worker failure reported in the same round is handled as a failure. */
  bagua__leader_state_t st2 = {.round_seen = -1};
  add_done(&s, "a", BAGUA__DONE_FAILED, 5, 1);
  add_done(&s, "b", BAGUA__DONE_STOPPED, 6, 0);
  d = decide(&st2, &s, 0);
  ASSERT_EQ(d.action, BAGUA__LEAD_FAILED);
  bagua__agent_snap_clear(&s);
}

/* Joiners that register one after another: the settle window closes a window after the
 * latest of them (one round, not one per batch), but never later than the cap. */
static void test_settle_extends(void) {
  bagua__agent_snap_t s;
  memset(&s, 0, sizeof(s));
  bagua__leader_state_t st = {.round_seen = -1};
  static bagua__leader_params_t p;
  p = P;
  p.nnodes_max = 16;
  add_node(&s, "a", 10, 1);
  add_node(&s, "b", 20, 1);
  set_round(&s, 2, "a,b", 0);
  ASSERT_EQ(bagua__leader_decide(&p, &st, &s, 0, 1, &(bagua__lead_decision_t){0}), 0);
  bagua__lead_decision_t d;
  /* c at 100, d at 400: the window closes at 900, with both. */
  add_node(&s, "c", 30, 1);
  ASSERT_EQ(bagua__leader_decide(&p, &st, &s, 100, 1, &d), 0);
  ASSERT_EQ(d.wake_at, 600);
  add_node(&s, "d", 40, 1);
  ASSERT_EQ(bagua__leader_decide(&p, &st, &s, 400, 1, &d), 0);
  ASSERT_EQ(d.action, BAGUA__LEAD_NONE);
  ASSERT_EQ(d.wake_at, 900);
  /* No change at 600: the window stays where the latest change put it. */
  ASSERT_EQ(bagua__leader_decide(&p, &st, &s, 600, 1, &d), 0);
  ASSERT_EQ(d.action, BAGUA__LEAD_NONE);
  ASSERT_EQ(d.wake_at, 900);
  ASSERT_EQ(bagua__leader_decide(&p, &st, &s, 900, 1, &d), 0);
  ASSERT_EQ(d.action, BAGUA__LEAD_PUBLISH);
  expect_members(&d.round, "a,b,c,d");
  bagua__rdzv_round_clear(&d.round);
  /* A joiner every 400 ms from 1000 on: the round goes out at the cap, 4 windows after the
   * first change, with the joiners seen so far. */
  set_round(&s, 3, "a,b,c,d", 0);
  char id[8];
  int64_t now = 1000, published = 0;
  for (int i = 0; i < 10 && !published; i++, now += 400) {
    snprintf(id, sizeof(id), "j%d", i);
    add_node(&s, id, 100 + i, 1);
    ASSERT_EQ(bagua__leader_decide(&p, &st, &s, now, 1, &d), 0);
    if (d.action == BAGUA__LEAD_NONE && d.wake_at < now + 400) {
      int64_t at = d.wake_at;
      bagua__lead_decision_clear(&d);
      ASSERT_EQ(bagua__leader_decide(&p, &st, &s, at, 1, &d), 0);
      if (d.action == BAGUA__LEAD_PUBLISH) published = at;
    }
    if (d.action == BAGUA__LEAD_PUBLISH) {
      if (!published) published = now;
      ASSERT_EQ(d.round.nmembers, 4 + i + 1);
    }
    bagua__lead_decision_clear(&d);
  }
  ASSERT_EQ(published, 1000 + BAGUA__LEADER_SETTLE_CAP * 500);
  bagua__leader_state_clear(&st);
  bagua__agent_snap_clear(&s);
}

/* Nodes whose workers would take the world past BAGUA_RDZV_WORLD_MAX wait as spares. */
static void test_world_bound(void) {
  bagua__agent_snap_t s;
  memset(&s, 0, sizeof(s));
  bagua__leader_state_t st = {.round_seen = -1};
  add_node(&s, "a", 10, 4096);
  add_node(&s, "b", 20, 4096);
  bagua__leader_params_t p = P;
  p.nnodes_max = 1000;
  p.last_call_ms = 0;
  for (int i = 0; i < 300; i++) {
    char id[16];
    snprintf(id, sizeof(id), "n%d", i);
    add_node(&s, id, 100 + i, 4096);
  }
  bagua__lead_decision_t d;
  ASSERT_EQ(bagua__leader_decide(&p, &st, &s, 0, 1, &d), 0);
  ASSERT_EQ(d.action, BAGUA__LEAD_PUBLISH);
  ASSERT_EQ(d.round.nmembers, BAGUA_RDZV_WORLD_MAX / 4096);
  ASSERT_EQ(d.round.world_size, BAGUA_RDZV_WORLD_MAX);
  bagua__rdzv_round_clear(&d.round);
  bagua__agent_snap_clear(&s);
}

/* A round someone else wrote, whose worker counts disagree with the registered nodes (or
 * whose world is not their sum), is replaced at once by the round the nodes make, with no
 * settle window: its workers would otherwise wait for ranks that never come. */
static void test_forged_round(void) {
  bagua__agent_snap_t s;
  memset(&s, 0, sizeof(s));
  bagua__leader_state_t st = {.round_seen = -1};
  add_node(&s, "a", 10, 2);
  add_node(&s, "b", 20, 1);
  set_round(&s, 4, "a,b", 1);
  bagua__lead_decision_t d = decide(&st, &s, 1000);
  ASSERT_EQ(d.action, BAGUA__LEAD_NONE); /* consistent: nothing to do */
  s.round.members[1].nproc = 8;          /* forged: b registered 1 worker */
  s.round.world_size = 10;
  d = decide(&st, &s, 1001);
  ASSERT_EQ(d.action, BAGUA__LEAD_PUBLISH);
  ASSERT_EQ(d.round.round, 5);
  ASSERT_EQ(d.round.restart_count, 1);
  ASSERT_EQ(d.round.reason, BAGUA__ROUND_INVALID);
  expect_members(&d.round, "a,b");
  ASSERT_EQ(d.round.world_size, 3);
  ASSERT_EQ(d.round.members[1].nproc, 1);
  bagua__rdzv_round_clear(&d.round);
  /* The counts agree but the world does not. */
  s.round.members[1].nproc = 1;
  s.round.world_size = 64;
  d = decide(&st, &s, 1002);
  ASSERT_EQ(d.action, BAGUA__LEAD_PUBLISH);
  ASSERT_EQ(d.round.world_size, 3);
  bagua__rdzv_round_clear(&d.round);
  /* A member registered again (another revision) is a departure, not a forgery. */
  s.round.world_size = 3;
  s.round.members[1].nproc = 5;
  s.round.world_size = 7;
  s.round.members[1].rev = 19;
  d = decide(&st, &s, 1003);
  ASSERT_NE((int)d.action, (int)BAGUA__LEAD_PUBLISH); /* the settle window applies */
  ASSERT_TRUE(d.wake_at > 1003);
  bagua__rdzv_round_clear(&s.round);
  free(s.nodes);
}

/* ---------------------------------------------------------------------------------------- */
/* The act deadline: a member that never acts in its round                                  */
/* ---------------------------------------------------------------------------------------- */

#define ACK_MS 10000

static bagua__leader_params_t PA = {.nnodes_min = 2,
                                    .nnodes_max = 4,
                                    .max_restarts = 1,
                                    .last_call_ms = 1000,
                                    .settle_ms = 500,
                                    .rdzv_timeout_s = 100,
                                    .lease_ttl_s = TTL_S,
                                    .ack_timeout_ms = ACK_MS,
                                    .self = "a"};

static bagua__lead_decision_t decide_a(bagua__leader_state_t *st, const bagua__agent_snap_t *s,
                                       int64_t now) {
  bagua__lead_decision_t d;
  ASSERT_EQ(bagua__leader_decide(&PA, st, s, now, 123456, &d), 0);
  return d;
}

/* Decides once a second from `from` to `to` (inclusive of neither), expecting nothing. */
static void tick_quiet(bagua__leader_state_t *st, const bagua__agent_snap_t *s, int64_t from,
                       int64_t to) {
  for (int64_t t = from + 1000; t < to; t += 1000) {
    bagua__lead_decision_t d = decide_a(st, s, t);
    ASSERT_EQ(d.action, BAGUA__LEAD_NONE);
    ASSERT_EQ(d.ndrops, 0);
    bagua__lead_decision_clear(&d);
  }
}

/* A schema-valid record on a live lease that no agent holds (f) is dropped after the act
 * deadline and the next round leaves it out; members that acknowledged are kept, and the
 * leader never judges itself. Without the rule the round waits for f for ever. */
static void test_ack_drop(void) {
  bagua__agent_snap_t s;
  memset(&s, 0, sizeof(s));
  bagua__leader_state_t st = {.round_seen = -1};
  add_node(&s, "a", 10, 1);
  add_node(&s, "b", 20, 1);
  add_node(&s, "f", 30, 1);
  set_round(&s, 2, "a,b,f", 0);
  add_ack(&s, "b", 1, 0); /* b's record still names the previous round */
  bagua__lead_decision_t d = decide_a(&st, &s, 0);
  ASSERT_EQ(d.action, BAGUA__LEAD_NONE);
  ASSERT_EQ(d.wake_at, ACK_MS); /* look again when the first deadline falls */
  add_ack(&s, "b", 2, 0);       /* b takes round 2 */
  tick_quiet(&st, &s, 0, ACK_MS);
  d = decide_a(&st, &s, ACK_MS);
  ASSERT_EQ(d.ndrops, 1);
  ASSERT_STREQ(d.drops[0].id, "f");
  ASSERT_EQ(d.drops[0].rev, 30);
  ASSERT_EQ(d.drops[0].lease, 7030);
  ASSERT_EQ(d.drops[0].silent_ms, ACK_MS);
  /* f counts as gone: the settle window of a membership change opens. */
  ASSERT_EQ(d.action, BAGUA__LEAD_NONE);
  ASSERT_EQ(d.wake_at, ACK_MS + 500);
  bagua__lead_decision_clear(&d);
  /* Its lease revoked (lead.c), the round is formed without it, restart count unchanged. */
  drop_node(&s, "f");
  d = decide_a(&st, &s, ACK_MS + 500);
  ASSERT_EQ(d.action, BAGUA__LEAD_PUBLISH);
  ASSERT_EQ(d.ndrops, 0);
  expect_members(&d.round, "a,b");
  ASSERT_EQ(d.round.reason, BAGUA__ROUND_MEMBERSHIP);
  ASSERT_EQ(d.round.restart_count, 0);
  bagua__lead_decision_clear(&d);
  bagua__leader_state_clear(&st);
  bagua__agent_snap_clear(&s);
}

/* What counts as acting, and what does not: a done record does; a progress record for an
 * earlier round, or on another lease than the member's, does not. A member that acknowledges
 * late but within the deadline is kept. */
static void test_ack_what_counts(void) {
  bagua__agent_snap_t s;
  memset(&s, 0, sizeof(s));
  bagua__leader_state_t st = {.round_seen = -1};
  add_node(&s, "a", 10, 1);
  add_node(&s, "b", 20, 1);
  add_node(&s, "c", 30, 1);
  add_node(&s, "d", 40, 1);
  add_node(&s, "e", 50, 1);
  set_round(&s, 3, "a,b,c,d", 0);
  add_done(&s, "b", BAGUA__DONE_SUCCEEDED, 1, 1); /* reported: acted */
  add_ack(&s, "c", 3, 9999);                      /* on someone else's lease: not c's act */
  add_ack(&s, "d", 2, 0);                         /* an earlier round */
  bagua__lead_decision_t d = decide_a(&st, &s, 0);
  ASSERT_EQ(d.ndrops, 0);
  tick_quiet(&st, &s, 0, ACK_MS - 1000);
  add_ack(&s, "d", 3, 0); /* d's agent was slow, but within the deadline */
  tick_quiet(&st, &s, ACK_MS - 2000, ACK_MS);
  d = decide_a(&st, &s, ACK_MS);
  ASSERT_EQ(d.ndrops, 1);
  ASSERT_STREQ(d.drops[0].id, "c");
  bagua__lead_decision_clear(&d);
  /* d, having acted in round 3, is not dropped when its record later changes. */
  add_ack(&s, "d", 2, 0);
  d = decide_a(&st, &s, ACK_MS + 1000);
  ASSERT_EQ(d.ndrops, 1); /* c again (its lease still lives: retried), d not */
  ASSERT_STREQ(d.drops[0].id, "c");
  bagua__lead_decision_clear(&d);
  bagua__leader_state_clear(&st);
  bagua__agent_snap_clear(&s);
}

/* Time in which the leader could not read etcd (decisions far apart) does not count: after an
 * outage nobody is dropped for acknowledgements nobody could write. */
static void test_ack_outage(void) {
  bagua__agent_snap_t s;
  memset(&s, 0, sizeof(s));
  bagua__leader_state_t st = {.round_seen = -1};
  add_node(&s, "a", 10, 1);
  add_node(&s, "b", 20, 1);
  set_round(&s, 1, "a,b", 0);
  bagua__lead_decision_t d = decide_a(&st, &s, 1000);
  ASSERT_EQ(d.ndrops, 0);
  d = decide_a(&st, &s, 1000 + 300000); /* five minutes later: counts 2 s */
  ASSERT_EQ(d.ndrops, 0);
  ASSERT_EQ(st.clock, BAGUA__LEADER_CLOCK_STEP_MS);
  tick_quiet(&st, &s, 301000, 301000 + ACK_MS - BAGUA__LEADER_CLOCK_STEP_MS);
  d = decide_a(&st, &s, 301000 + ACK_MS - BAGUA__LEADER_CLOCK_STEP_MS);
  ASSERT_EQ(d.ndrops, 1);
  ASSERT_STREQ(d.drops[0].id, "b");
  bagua__lead_decision_clear(&d);
  bagua__leader_state_clear(&st);
  bagua__agent_snap_clear(&s);
}

/* Membership changes do not restart a silent member's deadline: it counts across rounds that
 * name it. A new registration of a dropped id is a new join with a deadline of its own; the
 * dropped registration itself is never admitted again while it lives. */
static void test_ack_across_rounds(void) {
  bagua__agent_snap_t s;
  memset(&s, 0, sizeof(s));
  bagua__leader_state_t st = {.round_seen = -1};
  add_node(&s, "a", 10, 1);
  add_node(&s, "b", 20, 1);
  add_node(&s, "f", 30, 1);
  set_round(&s, 2, "a,b,f", 0);
  add_ack(&s, "b", 2, 0);
  bagua__lead_decision_t d = decide_a(&st, &s, 0);
  tick_quiet(&st, &s, 0, 5000);
  /* g joins at 5 s: round 3 names a, b, f, g. */
  add_node(&s, "g", 40, 1);
  d = decide_a(&st, &s, 5000);
  ASSERT_EQ(d.action, BAGUA__LEAD_NONE);
  d = decide_a(&st, &s, 5500);
  ASSERT_EQ(d.action, BAGUA__LEAD_PUBLISH);
  expect_members(&d.round, "a,b,f,g");
  bagua__lead_decision_clear(&d);
  set_round(&s, 3, "a,b,f,g", 0);
  add_ack(&s, "b", 3, 0);
  add_ack(&s, "g", 3, 0);
  tick_quiet(&st, &s, 5500, ACK_MS - 500);
  d = decide_a(&st, &s, ACK_MS - 500 + 1000); /* f silent since 0 s, not 5.5 s */
  ASSERT_EQ(d.ndrops, 1);
  ASSERT_STREQ(d.drops[0].id, "f");
  bagua__lead_decision_clear(&d);
  /* Its lease is not revoked (say etcd refused): it stays out of the round all the same. */
  d = decide_a(&st, &s, ACK_MS + 1000);
  ASSERT_EQ(d.ndrops, 1);
  ASSERT_EQ(d.action, BAGUA__LEAD_PUBLISH);
  expect_members(&d.round, "a,b,g");
  bagua__lead_decision_clear(&d);
  set_round(&s, 4, "a,b,g", 0);
  add_ack(&s, "b", 4, 0);
  add_ack(&s, "g", 4, 0);
  for (int64_t t = ACK_MS + 2000; t < ACK_MS + 6000; t += 1000) {
    d = decide_a(&st, &s, t);
    ASSERT_EQ(d.action, BAGUA__LEAD_NONE); /* f is no joiner */
    ASSERT_EQ(d.ndrops, 1);                /* and ending it is retried */
    bagua__lead_decision_clear(&d);
  }
  /* f registers anew (another create revision): admitted, and judged afresh. */
  drop_node(&s, "f");
  add_node(&s, "f", 60, 1);
  int64_t t0 = ACK_MS + 6000;
  d = decide_a(&st, &s, t0);
  ASSERT_EQ(d.ndrops, 0);
  ASSERT_EQ(d.action, BAGUA__LEAD_NONE);
  d = decide_a(&st, &s, t0 + 500);
  ASSERT_EQ(d.action, BAGUA__LEAD_PUBLISH);
  expect_members(&d.round, "a,b,g,f");
  bagua__lead_decision_clear(&d);
  set_round(&s, 5, "a,b,g,f", 0);
  add_ack(&s, "b", 5, 0);
  add_ack(&s, "g", 5, 0);
  add_ack(&s, "f", 5, 0);
  tick_quiet(&st, &s, t0 + 500, t0 + 500 + 2 * ACK_MS);
  bagua__leader_state_clear(&st);
  bagua__agent_snap_clear(&s);
}

/* A failure in a round with a silent member: the leader waits for the member's deadline (not
 * one TTL, after which it would restart the round with the member and spend a restart), then
 * drops it; the new round is a membership change. And when every other member succeeded, the
 * job succeeded: the dropped member's workers never ran. */
static void test_ack_failure_and_success(void) {
  bagua__agent_snap_t s;
  memset(&s, 0, sizeof(s));
  bagua__leader_state_t st = {.round_seen = -1};
  add_node(&s, "a", 10, 1);
  add_node(&s, "b", 20, 1);
  add_node(&s, "f", 30, 1);
  set_round(&s, 2, "a,b,f", 0);
  add_ack(&s, "b", 2, 0);
  bagua__lead_decision_t d = decide_a(&st, &s, 0);
  add_done(&s, "b", BAGUA__DONE_FAILED, 5000, 1);
  add_done(&s, "a", BAGUA__DONE_STOPPED, 5001, 0);
  for (int64_t t = 1000; t < ACK_MS; t += 1000) {
    d = decide_a(&st, &s, t);
    ASSERT_EQ(d.action, BAGUA__LEAD_NONE); /* past TTL + 1 s, still no restart */
    ASSERT_TRUE(d.wake_at > t);
    bagua__lead_decision_clear(&d);
  }
  d = decide_a(&st, &s, ACK_MS);
  ASSERT_EQ(d.ndrops, 1);
  bagua__lead_decision_clear(&d);
  drop_node(&s, "f");
  d = decide_a(&st, &s, ACK_MS + 500);
  ASSERT_EQ(d.action, BAGUA__LEAD_PUBLISH);
  ASSERT_EQ(d.round.reason, BAGUA__ROUND_MEMBERSHIP);
  ASSERT_EQ(d.round.restart_count, 0);
  expect_members(&d.round, "a,b");
  bagua__lead_decision_clear(&d);
  bagua__leader_state_clear(&st);

  /* Success of everyone else. */
  bagua__leader_state_t st2 = {.round_seen = -1};
  add_node(&s, "f", 40, 1);
  set_round(&s, 3, "a,b,f", 0);
  add_done(&s, "a", BAGUA__DONE_SUCCEEDED, 1, 0);
  add_done(&s, "b", BAGUA__DONE_SUCCEEDED, 1, 1);
  d = decide_a(&st2, &s, 0);
  ASSERT_EQ(d.action, BAGUA__LEAD_NONE);
  tick_quiet(&st2, &s, 0, ACK_MS);
  d = decide_a(&st2, &s, ACK_MS);
  ASSERT_EQ(d.action, BAGUA__LEAD_SUCCEEDED);
  bagua__lead_decision_clear(&d);
  bagua__leader_state_clear(&st2);
  bagua__agent_snap_clear(&s);
}

/* The deadline's floor and the switch: 0 turns the rule off (nobody is ever dropped). */
static void test_ack_bound(void) {
  ASSERT_EQ(bagua__leader_ack_bound(60000, 5000, 10), 60000);
  ASSERT_EQ(bagua__leader_ack_bound(3000, 2000, 2), 6000); /* 2 x grace + TTL */
  ASSERT_EQ(bagua__leader_ack_bound(0, 5000, 10), 0);
  bagua__agent_snap_t s;
  memset(&s, 0, sizeof(s));
  bagua__leader_state_t st = {.round_seen = -1};
  add_node(&s, "a", 10, 1);
  add_node(&s, "f", 30, 1);
  set_round(&s, 1, "a,f", 0);
  for (int64_t t = 0; t < 5 * ACK_MS; t += 1000) {
    bagua__lead_decision_t d = decide(&st, &s, t); /* P: no act deadline */
    ASSERT_EQ(d.action, BAGUA__LEAD_NONE);
    ASSERT_EQ(d.ndrops, 0);
  }
  ASSERT_EQ((int)st.nsilent, 0);
  bagua__agent_snap_clear(&s);
}

/* The snapshot reads progress records as acknowledgements: round and lease; a refused record
 * is no acknowledgement. */
static void test_ack_parse(void) {
  const char *prefix = "/bagua/j/";
  char k0[] = "/bagua/j/nodes/f", k1[] = "/bagua/j/progress/f", k2[] = "/bagua/j/progress/g";
  char v0[] = "{\"host\":\"h\",\"addr\":\"127.0.0.1\",\"nproc\":1,\"master_port\":5}";
  char v1[] = "{\"round\":2,\"restart_count\":0,\"time_ms\":1,\"workers\":[]}";
  char v2[] = "{\"round\":0,\"restart_count\":0,\"time_ms\":1,\"workers\":[]}";
  bagua__etcd_kv_t kv[3];
  memset(kv, 0, sizeof(kv));
  kv[0] = (bagua__etcd_kv_t){.key = k0,
                             .value = v0,
                             .value_len = strlen(v0),
                             .lease = 77,
                             .create_revision = 5,
                             .mod_revision = 5};
  kv[1] = (bagua__etcd_kv_t){.key = k1,
                             .value = v1,
                             .value_len = strlen(v1),
                             .lease = 77,
                             .create_revision = 6,
                             .mod_revision = 6};
  kv[2] = (bagua__etcd_kv_t){.key = k2,
                             .value = v2,
                             .value_len = strlen(v2),
                             .lease = 78,
                             .create_revision = 7,
                             .mod_revision = 7};
  for (int i = 0; i < 3; i++) kv[i].key_len = strlen(kv[i].key);
  bagua__agent_snap_t s;
  memset(&s, 0, sizeof(s));
  ASSERT_EQ(bagua__agent_snap_parse(prefix, kv, 3, &s), 0);
  ASSERT_EQ((int)s.nacks, 1);
  const bagua__agent_ack_t *a = bagua__agent_snap_ack(&s, "f");
  ASSERT_TRUE(a != NULL);
  ASSERT_EQ(a->round, 2);
  ASSERT_EQ(a->lease, 77);
  ASSERT_TRUE(bagua__agent_snap_ack(&s, "g") == NULL);
  bagua__agent_snap_clear(&s);
}

/* A snapshot of `n` nodes n00000.. registered in that order (revisions 100 + i), each with a
 * done record and an acknowledgement of `round` (when given), built directly: add_node sorts
 * by insertion, which thousands of nodes would make slow. */
static void big_snapshot(bagua__agent_snap_t *s, int first, int n, int64_t round) {
  s->nodes = realloc(s->nodes, (s->nnodes + (size_t)n) * sizeof(*s->nodes));
  s->acks = realloc(s->acks, (s->nacks + (size_t)n) * sizeof(*s->acks));
  for (int i = first; i < first + n; i++) {
    bagua__rdzv_node_t *x = &s->nodes[s->nnodes++];
    memset(x, 0, sizeof(*x));
    snprintf(x->id, sizeof(x->id), "n%05d", i);
    snprintf(x->addr, sizeof(x->addr), "10.0.%d.%d", i / 250, i % 250);
    x->nproc = 1;
    x->create_rev = 100 + i;
    x->lease = 7000 + i;
    if (round) {
      bagua__agent_ack_t *k = &s->acks[s->nacks++];
      snprintf(k->node, sizeof(k->node), "n%05d", i);
      k->round = round;
      k->lease = x->lease;
    }
  }
}

/* The index answers what the linear lookups answer, for every id and for ids it lacks. */
static void test_index(void) {
  bagua__agent_snap_t s;
  memset(&s, 0, sizeof(s));
  big_snapshot(&s, 0, 500, 3);
  set_round(&s, 3, "n00007,n00003,n00499", 0);
  add_done(&s, "n00003", BAGUA__DONE_SUCCEEDED, 1, 0);
  add_done(&s, "n00250", BAGUA__DONE_FAILED, 1, 0);
  bagua__agent_index_t x;
  ASSERT_EQ(bagua__agent_index_build(&x, &s), 0);
  char id[16];
  for (int i = 0; i < 510; i++) {
    snprintf(id, sizeof(id), "n%05d", i);
    ASSERT_TRUE(bagua__agent_index_node(&x, id) == bagua__agent_snap_node(&s, id));
    ASSERT_TRUE(bagua__agent_index_ack(&x, id) == bagua__agent_snap_ack(&s, id));
    ASSERT_TRUE(bagua__agent_index_done(&x, id) == bagua__agent_snap_done(&s, id));
    ASSERT_EQ(bagua__agent_index_member(&x, id), bagua__rdzv_round_find(&s.round, id));
  }
  ASSERT_TRUE(bagua__agent_index_node(&x, "") == NULL);
  bagua__agent_index_clear(&x);
  bagua__agent_snap_clear(&s);
}

/* Three thousand nodes: the first round takes them in registration order; 150 die and the
 * survivors keep their order; 150 join after them; one member that never acknowledges is
 * dropped at the act deadline and nobody else is. (A decision is O(N log N): this test made
 * some 9 million string comparisons per decision before the index.) */
static void test_at_scale(void) {
  enum { N = 3000, K = 150 };
  bagua__leader_params_t p = P;
  p.nnodes_min = N - K;
  p.nnodes_max = N + K;
  p.ack_timeout_ms = 60000;
  p.self = "n00000";
  bagua__agent_snap_t s;
  memset(&s, 0, sizeof(s));
  bagua__leader_state_t st = {.round_seen = -1};
  big_snapshot(&s, 0, N, 0);
  bagua__lead_decision_t d;
  ASSERT_EQ(bagua__leader_decide(&p, &st, &s, 1000, 1, &d), 0);
  ASSERT_EQ(d.action, BAGUA__LEAD_NONE); /* the last call */
  ASSERT_EQ(bagua__leader_decide(&p, &st, &s, 2000, 1, &d), 0);
  ASSERT_EQ(d.action, BAGUA__LEAD_PUBLISH);
  ASSERT_EQ(d.round.nmembers, N);
  for (int i = 0; i < N; i++) ASSERT_EQ(d.round.members[i].rev, 100 + i);
  s.has_round = 1;
  s.round = d.round;
  d.round.members = NULL;
  bagua__lead_decision_clear(&d);
  /* Every member acknowledges round 1 but n01234; every 20th dies. */
  for (int i = 0; i < N; i++) {
    if (i == 1234) continue;
    add_ack(&s, s.nodes[i].id, 1, 0);
  }
  size_t k = 0;
  for (size_t i = 0; i < s.nnodes; i++)
    if (i % 20 != 7) s.nodes[k++] = s.nodes[i];
  s.nnodes = k;
  ASSERT_EQ((int)k, N - K);
  ASSERT_EQ(bagua__leader_decide(&p, &st, &s, 3000, 1, &d), 0);
  ASSERT_EQ(d.action, BAGUA__LEAD_NONE); /* the settle window */
  ASSERT_EQ(bagua__leader_decide(&p, &st, &s, 3600, 1, &d), 0);
  ASSERT_EQ(d.action, BAGUA__LEAD_PUBLISH);
  ASSERT_EQ(d.round.nmembers, N - K);
  for (int i = 0; i < N - K; i++) ASSERT_STREQ(d.round.members[i].id, s.nodes[i].id);
  bagua__rdzv_round_clear(&s.round);
  s.round = d.round;
  d.round.members = NULL;
  bagua__lead_decision_clear(&d);
  /* K join; everyone acknowledges round 2 but n01234 (silent since round 1). */
  big_snapshot(&s, N, K, 0);
  for (size_t i = 0; i < s.nnodes; i++)
    if (strcmp(s.nodes[i].id, "n01234") != 0) add_ack(&s, s.nodes[i].id, 2, 0);
  ASSERT_EQ(bagua__leader_decide(&p, &st, &s, 4000, 1, &d), 0);
  ASSERT_EQ(d.action, BAGUA__LEAD_NONE);
  ASSERT_EQ(bagua__leader_decide(&p, &st, &s, 4600, 1, &d), 0);
  ASSERT_EQ(d.action, BAGUA__LEAD_PUBLISH);
  ASSERT_EQ(d.round.nmembers, N);
  ASSERT_STREQ(d.round.members[N - K].id, "n03000"); /* joiners after the survivors */
  ASSERT_STREQ(d.round.members[N - 1].id, "n03149");
  ASSERT_EQ(d.ndrops, 0);
  bagua__lead_decision_clear(&d);
  /* Decisions at the loop's pace up to the act deadline: only n01234 is dropped. */
  int64_t now = 4600;
  int dropped = 0;
  while (now < 4600 + 70000 && !dropped) {
    now += 1000;
    ASSERT_EQ(bagua__leader_decide(&p, &st, &s, now, 1, &d), 0);
    if (d.ndrops) {
      ASSERT_EQ(d.ndrops, 1);
      ASSERT_STREQ(d.drops[0].id, "n01234");
      dropped = 1;
    }
    bagua__lead_decision_clear(&d);
  }
  ASSERT_TRUE(dropped);
  bagua__leader_state_clear(&st);
  bagua__agent_snap_clear(&s);
}

/* Who campaigns when the leader key is vacant (ring.h): the round's first members at once, a
 * step more each time the place doubles, non-members last, everyone at once with no round. */
static void test_campaign_tiers(void) {
  for (int i = 0; i < BAGUA__CAMPAIGN_FIRST; i++)
    ASSERT_EQ(bagua__ring_campaign_delay_ms(i, 1024, 100), 0);
  ASSERT_EQ(bagua__ring_campaign_delay_ms(3, 1024, 100), 100);
  ASSERT_EQ(bagua__ring_campaign_delay_ms(8, 1024, 100), 100);
  ASSERT_EQ(bagua__ring_campaign_delay_ms(9, 1024, 100), 200);
  ASSERT_EQ(bagua__ring_campaign_delay_ms(20, 1024, 100), 200);
  ASSERT_EQ(bagua__ring_campaign_delay_ms(21, 1024, 100), 300);
  ASSERT_EQ(bagua__ring_campaign_delay_ms(1023, 1024, 100), 800);
  ASSERT_EQ(bagua__ring_campaign_delay_ms(-1, 1024, 100), 800);   /* not a member */
  ASSERT_EQ(bagua__ring_campaign_delay_ms(5000, 1024, 100), 800); /* out of range */
  ASSERT_EQ(bagua__ring_campaign_delay_ms(-1, 0, 100), 0);        /* no round: all at once */
  ASSERT_EQ(bagua__ring_campaign_delay_ms(1, 2, 100), 0);
  ASSERT_EQ(bagua__ring_campaign_delay_ms(-1, 2, 100), 0); /* a joiner of a small job */
  /* Tiers never shrink along the order, and each holds about twice the one before: at N
   * members about log2(N / 3) steps, so the last waits under a second at 10,000. */
  int prev = 0, count[16] = {0};
  for (int i = 0; i < 10000; i++) {
    int d = bagua__ring_campaign_delay_ms(i, 10000, 100);
    ASSERT_GE(d, prev);
    prev = d;
    ASSERT_LT(d / 100, 16);
    count[d / 100]++;
  }
  ASSERT_LE(prev, 1100);
  for (int t = 1; t < 11; t++) ASSERT_EQ(count[t], BAGUA__CAMPAIGN_FIRST << t);
}

int main(int argc, char **argv) {
  TEST_RUN_CASES(argc, argv, "leader", TEST_CASE(campaign_tiers), TEST_CASE(node_rank_order),
                 TEST_CASE(index), TEST_CASE(at_scale), TEST_CASE(stall), TEST_CASE(settle_extends),
                 TEST_CASE(world_bound), TEST_CASE(initial), TEST_CASE(membership),
                 TEST_CASE(failures), TEST_CASE(success), TEST_CASE(kept_success),
                 TEST_CASE(forged_round), TEST_CASE(ack_drop), TEST_CASE(ack_what_counts),
                 TEST_CASE(ack_outage), TEST_CASE(ack_across_rounds),
                 TEST_CASE(ack_failure_and_success), TEST_CASE(ack_bound), TEST_CASE(ack_parse));
}
