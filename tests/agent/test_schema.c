/*
 * The agent's etcd records survive an encode/decode round trip, foreign or corrupt values are
 * rejected rather than half-read, and a snapshot sorts nodes by registration and keeps only
 * the current round's done records.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "schema.h"
#include "test.h"

static void test_round_trip(void) {
  bagua__agent_member_t m[2] = {{"n1", 2, 17}, {"n2", 1, 19}};
  bagua__agent_round_t r = {.round = 3,
                            .members = m,
                            .nmembers = 2,
                            .world_size = 3,
                            .master_addr = "10.0.0.1",
                            .master_port = 4242,
                            .restart_count = 1,
                            .reason = "failure",
                            .leader = "n1",
                            .time_ms = 1732000000123LL};
  char *js = bagua__agent_round_encode(&r);
  ASSERT_TRUE(js != NULL);
  bagua__agent_round_t back;
  ASSERT_EQ(bagua__agent_round_decode(js, &back), 0);
  ASSERT_EQ(back.round, 3);
  ASSERT_EQ(back.nmembers, 2);
  ASSERT_STREQ(back.members[1].id, "n2");
  ASSERT_EQ(back.members[1].nproc, 1);
  ASSERT_EQ(back.members[1].rev, 19);
  ASSERT_STREQ(back.master_addr, "10.0.0.1");
  ASSERT_EQ(back.master_port, 4242);
  ASSERT_EQ(back.restart_count, 1);
  ASSERT_EQ(back.time_ms, 1732000000123LL);
  ASSERT_EQ(bagua__agent_round_find(&back, "n2"), 1);
  ASSERT_EQ(bagua__agent_round_find(&back, "n9"), -1);
  bagua__agent_round_clear(&back);
  free(js);

  bagua__agent_status_t st = {.state = BAGUA__JOB_FAILED,
                              .time_ms = 5,
                              .round = 3,
                              .exit_code = 137,
                              .has_root = 1,
                              .message = "m"};
  snprintf(st.root.node, sizeof(st.root.node), "n2");
  st.root.rank = 2;
  st.root.signal = 9;
  js = bagua__agent_status_encode(&st);
  bagua__agent_status_t sb;
  ASSERT_EQ(bagua__agent_status_decode(js, &sb), 0);
  ASSERT_EQ(sb.state, BAGUA__JOB_FAILED);
  ASSERT_EQ(sb.has_root, 1);
  ASSERT_EQ(sb.root.signal, 9);
  ASSERT_EQ(bagua__agent_failure_exit_code(&sb.root), 137);
  char line[512];
  bagua__agent_failure_describe(&sb.root, line, sizeof(line));
  ASSERT_TRUE(strstr(line, "rank 2 (node n2") && strstr(line, "killed by signal 9 (SIGKILL)"));
  free(js);

  bagua__agent_done_t d = {.state = BAGUA__DONE_FAILED};
  snprintf(d.f.node, sizeof(d.f.node), "n1");
  d.f.exit_code = 7;
  d.f.rank = 1;
  js = bagua__agent_done_encode(&d);
  bagua__agent_done_t db;
  ASSERT_EQ(bagua__agent_done_decode(js, &db), 0);
  ASSERT_EQ(db.state, BAGUA__DONE_FAILED);
  ASSERT_EQ(db.f.exit_code, 7);
  ASSERT_EQ(bagua__agent_failure_exit_code(&db.f), 7);
  ASSERT_EQ(db.kept, 0);
  free(js);
  /* "kept" (workers kept through an in-process round change) survives the round trip. */
  d.state = BAGUA__DONE_SUCCEEDED;
  d.kept = 1;
  js = bagua__agent_done_encode(&d);
  ASSERT_TRUE(strstr(js, "\"kept\":true") != NULL);
  ASSERT_EQ(bagua__agent_done_decode(js, &db), 0);
  ASSERT_EQ(db.state, BAGUA__DONE_SUCCEEDED);
  ASSERT_EQ(db.kept, 1);
  free(js);
}

/* The node record's optional liveness port: written when set, absent (0) in older records. */
static void test_node_live_port(void) {
  bagua__agent_node_t n;
  memset(&n, 0, sizeof(n));
  snprintf(n.host, sizeof(n.host), "h");
  snprintf(n.addr, sizeof(n.addr), "10.0.0.2");
  n.nproc = 2;
  n.master_port = 29500;
  n.live_port = 41234;
  char *js = bagua__agent_node_encode(&n);
  ASSERT_TRUE(js != NULL && strstr(js, "\"live_port\":41234") != NULL);
  bagua__agent_node_t back;
  memset(&back, 0, sizeof(back));
  ASSERT_EQ(bagua__agent_node_decode(js, &back), 0);
  ASSERT_EQ(back.live_port, 41234);
  ASSERT_EQ(back.master_port, 29500);
  ASSERT_STREQ(back.addr, "10.0.0.2");
  free(js);
  n.live_port = 0;
  js = bagua__agent_node_encode(&n);
  ASSERT_TRUE(js != NULL && strstr(js, "live_port") == NULL);
  free(js);
  const char *old = "{\"host\":\"h\",\"addr\":\"a\",\"nproc\":1,\"master_port\":5}";
  ASSERT_EQ(bagua__agent_node_decode(old, &back), 0);
  ASSERT_EQ(back.live_port, 0);
  ASSERT_EQ(bagua__agent_node_decode(
                "{\"host\":\"h\",\"addr\":\"a\",\"nproc\":1,\"master_port\":5,\"live_port\":70000}",
                &back),
            -1);
}

static void test_rejects(void) {
  bagua__agent_round_t r;
  const char *bad[] = {"",
                       "[]",
                       "{\"round\":1}",
                       "{\"round\":1e300,\"members\":[\"a\"],\"nprocs\":[1]}",
                       "{\"members\":[\"a\"],\"nprocs\":[1e300],\"round\":1,\"world_size\":1,"
                       "\"master_addr\":\"x\",\"master_port\":1}",
                       "{\"members\":[\"a\",\"b\"],\"nprocs\":[1],\"round\":1}",
                       NULL};
  for (int i = 0; bad[i]; i++) ASSERT_EQ(bagua__agent_round_decode(bad[i], &r), -1);
  bagua__agent_status_t st;
  ASSERT_EQ(bagua__agent_status_decode("{\"state\":\"exploded\"}", &st), -1);
  bagua__agent_node_t n;
  memset(&n, 0, sizeof(n));
  ASSERT_EQ(
      bagua__agent_node_decode("{\"host\":\"h\",\"addr\":\"a\",\"nproc\":0,\"master_port\":1}", &n),
      -1);
}

static bagua__etcd_kv_t kv(const char *key, const char *value, int64_t create, int64_t lease) {
  bagua__etcd_kv_t k;
  memset(&k, 0, sizeof(k));
  k.key = (char *)key;
  k.key_len = strlen(key);
  k.value = (char *)value;
  k.value_len = strlen(value);
  k.create_revision = create;
  k.mod_revision = create;
  k.lease = lease;
  return k;
}

static void test_snapshot(void) {
  const char *node = "{\"host\":\"h\",\"addr\":\"a\",\"nproc\":1,\"master_port\":5}";
  const char *round =
      "{\"members\":[\"b\"],\"nprocs\":[1],\"round\":2,\"world_size\":1,"
      "\"master_addr\":\"a\",\"master_port\":5}";
  const char *done = "{\"state\":\"succeeded\",\"node\":\"b\",\"time_ms\":1}";
  bagua__etcd_kv_t kvs[] = {
      kv("/bagua/j/leader", "b", 3, 77),
      kv("/bagua/j/nodes/a", node, 9, 1),
      kv("/bagua/j/nodes/b", node, 4, 77),
      kv("/bagua/j/nodes/bad", "not json", 5, 2),
      kv("/bagua/j/round", round, 10, 0),
      kv("/bagua/j/rounds/1/done/b", done, 6, 0),
      kv("/bagua/j/rounds/2/bootstrap/0", "x", 11, 0),
      kv("/bagua/j/rounds/2/done/b", done, 12, 0),
      kv("/bagua/other/nodes/c", node, 2, 1),
  };
  bagua__agent_snap_t s;
  memset(&s, 0, sizeof(s));
  ASSERT_EQ(bagua__agent_snap_parse("/bagua/j/", kvs, sizeof(kvs) / sizeof(kvs[0]), &s), 0);
  ASSERT_EQ(s.nnodes, 2);
  ASSERT_STREQ(s.nodes[0].id, "b"); /* oldest first */
  ASSERT_EQ(s.nodes[0].lease, 77);
  ASSERT_EQ(s.has_leader, 1);
  ASSERT_STREQ(s.leader, "b");
  ASSERT_EQ(s.round.round, 2);
  ASSERT_EQ(s.ndone, 1);
  ASSERT_TRUE(bagua__agent_snap_done(&s, "b") != NULL);
  ASSERT_EQ(s.nold_rounds, 2);
  bagua__agent_snap_clear(&s);
}

int main(void) {
  test_round_trip();
  test_node_live_port();
  test_rejects();
  test_snapshot();
  printf("PASS schema\n");
  return 0;
}
