/*
 * The one rendezvous schema (common/rdzv): keys built and classified, strict validation of
 * every record (types, integral numbers in range, strings that fit, world sizes that add up
 * without overflow), the rank rule, the job secret, and a snapshot that trusts nothing the
 * schema refuses (a node record on no lease, a corrupt leader/round/status); records survive
 * an encode/decode round trip.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/rdzv/rdzv.h"
#include "schema.h"
#include "test.h"

static void test_keys(void) {
  char k[BAGUA_RDZV_KEY_MAX];
  ASSERT_EQ(bagua__rdzv_key(k, sizeof(k), "j", BAGUA__RDZV_KEY_PREFIX, 0, NULL, 0), 0);
  ASSERT_STREQ(k, "/bagua/j/");
  ASSERT_EQ(bagua__rdzv_key(k, sizeof(k), "j", BAGUA__RDZV_KEY_NODE, 0, "n1", 0), 0);
  ASSERT_STREQ(k, "/bagua/j/nodes/n1");
  ASSERT_EQ(bagua__rdzv_key(k, sizeof(k), "j", BAGUA__RDZV_KEY_SECRET, 0, NULL, 0), 0);
  ASSERT_STREQ(k, "/bagua/j/secret");
  ASSERT_EQ(bagua__rdzv_key(k, sizeof(k), "j", BAGUA__RDZV_KEY_DONE, 7, "n2", 0), 0);
  ASSERT_STREQ(k, "/bagua/j/rounds/7/done/n2");
  ASSERT_EQ(bagua__rdzv_key(k, sizeof(k), "j", BAGUA__RDZV_KEY_BOOTSTRAP, 3, NULL, 12), 0);
  ASSERT_STREQ(k, "/bagua/j/rounds/3/bootstrap/12");
  ASSERT_EQ(bagua__rdzv_key(k, 8, "j", BAGUA__RDZV_KEY_ROUND, 0, NULL, 0), -1);

  bagua__rdzv_key_info_t ki;
  ASSERT_EQ(bagua__rdzv_key_parse("/bagua/j/", "/bagua/other/round", &ki), -1);
  ASSERT_EQ(bagua__rdzv_key_parse("/bagua/j/", "/bagua/j/round", &ki), 0);
  ASSERT_EQ(ki.kind, BAGUA__RDZV_KEY_ROUND);
  ASSERT_EQ(bagua__rdzv_key_parse("/bagua/j/", "/bagua/j/nodes/n1", &ki), 0);
  ASSERT_EQ(ki.kind, BAGUA__RDZV_KEY_NODE);
  ASSERT_STREQ(ki.name, "n1");
  ASSERT_EQ(bagua__rdzv_key_parse("/bagua/j/", "/bagua/j/nodes/a/b", &ki), 0);
  ASSERT_EQ(ki.kind, BAGUA__RDZV_KEY_OTHER);
  ASSERT_EQ(bagua__rdzv_key_parse("/bagua/j/", "/bagua/j/rounds/12/done/n3", &ki), 0);
  ASSERT_EQ(ki.kind, BAGUA__RDZV_KEY_DONE);
  ASSERT_EQ(ki.round, 12);
  ASSERT_STREQ(ki.name, "n3");
  ASSERT_EQ(bagua__rdzv_key_parse("/bagua/j/", "/bagua/j/rounds/4/bootstrap/9", &ki), 0);
  ASSERT_EQ(ki.kind, BAGUA__RDZV_KEY_BOOTSTRAP);
  ASSERT_EQ(ki.index, 9);
  ASSERT_EQ(bagua__rdzv_key_parse("/bagua/j/", "/bagua/j/rounds/4/bootstrap/9x", &ki), 0);
  ASSERT_EQ(ki.kind, BAGUA__RDZV_KEY_ROUND_DIR);
  ASSERT_EQ(bagua__rdzv_key_parse("/bagua/j/", "/bagua/j/assign/n4", &ki), 0);
  ASSERT_EQ(ki.kind, BAGUA__RDZV_KEY_ASSIGN);
  ASSERT_STREQ(ki.name, "n4");
  ASSERT_EQ(bagua__rdzv_key_parse("/bagua/j/", "/bagua/j/failure", &ki), 0);
  ASSERT_EQ(ki.kind, BAGUA__RDZV_KEY_FAILURE);
  ASSERT_EQ(bagua__rdzv_key(k, sizeof(k), "j", BAGUA__RDZV_KEY_ASSIGN, 0, "n4", 0), 0);
  ASSERT_STREQ(k, "/bagua/j/assign/n4");
  ASSERT_EQ(bagua__rdzv_key(k, sizeof(k), "j", BAGUA__RDZV_KEY_NODES_DIR, 0, NULL, 0), 0);
  ASSERT_STREQ(k, "/bagua/j/nodes/");
  ASSERT_EQ(bagua__rdzv_key(k, sizeof(k), "j", BAGUA__RDZV_KEY_ROUNDS_DIR, 0, NULL, 0), 0);
  ASSERT_STREQ(k, "/bagua/j/rounds/");
  /* The end of a directory's range: past every key in it, before any key after it. */
  ASSERT_EQ(bagua__rdzv_key_end(k, sizeof(k), "/bagua/j/rounds/"), 0);
  ASSERT_STREQ(k, "/bagua/j/rounds0");
  ASSERT_TRUE(strcmp("/bagua/j/rounds/99/x", k) < 0 && strcmp(k, "/bagua/j/secret") < 0);
  ASSERT_EQ(bagua__rdzv_key_end(k, sizeof(k), "/bagua/j/"), 0);
  ASSERT_STREQ(k, "/bagua/j0");
  ASSERT_EQ(bagua__rdzv_key_end(k, 4, "/bagua/j/"), -1);
  ASSERT_EQ(bagua__rdzv_key_end(k, sizeof(k), ""), -1);
  /* A round number too long for 2^53 is no round. */
  ASSERT_EQ(bagua__rdzv_key_parse("/bagua/j/", "/bagua/j/rounds/99999999999999999999/x", &ki), 0);
  ASSERT_EQ(ki.kind, BAGUA__RDZV_KEY_OTHER);
}

/* Each value must be refused, and the reason must name `field`. */
static void expect_node_refused(const char *json, const char *field) {
  bagua__rdzv_node_t n;
  char why[160] = "";
  memset(&n, 0, sizeof(n));
  if (bagua__rdzv_node_decode(json, &n, why, sizeof(why)) != -1)
    TEST_FAIL("node record accepted: %s", json);
  if (!strstr(why, field)) TEST_FAIL("reason \"%s\" does not name %s", why, field);
}

static void test_node(void) {
  expect_node_refused("{\"host\":\"h\",\"addr\":\"a\",\"nproc\":2147483647,\"master_port\":5}",
                      "nproc");
  expect_node_refused("{\"host\":\"h\",\"addr\":\"a\",\"nproc\":4097,\"master_port\":5}", "nproc");
  expect_node_refused("{\"host\":\"h\",\"addr\":\"a\",\"nproc\":1.5,\"master_port\":5}", "nproc");
  expect_node_refused("{\"host\":\"h\",\"addr\":\"a\",\"nproc\":\"2\",\"master_port\":5}", "nproc");
  expect_node_refused("{\"host\":\"h\",\"addr\":\"a\",\"nproc\":-1,\"master_port\":5}", "nproc");
  expect_node_refused("{\"host\":\"h\",\"addr\":\"a\",\"nproc\":1,\"master_port\":0}",
                      "master_port");
  expect_node_refused("{\"host\":\"h\",\"addr\":\"\",\"nproc\":1,\"master_port\":1}", "addr");
  expect_node_refused("{\"host\":7,\"addr\":\"a\",\"nproc\":1,\"master_port\":1}", "host");
  expect_node_refused("{\"garbage\":", "JSON");
  char big[600];
  snprintf(big, sizeof(big),
           "{\"host\":\"h\",\"addr\":\"a\",\"nproc\":1,\"master_port\":1,\"tag\":\"%0300d\"}", 0);
  expect_node_refused(big, "tag");
  bagua__rdzv_node_t n;
  memset(&n, 0, sizeof(n));
  ASSERT_EQ(bagua__rdzv_node_decode(
                "{\"host\":\"h\",\"addr\":\"a\",\"nproc\":4096,\"master_port\":5,\"x\":[1]}", &n,
                NULL, 0),
            0);
  ASSERT_EQ(n.nproc, 4096);
}

static void expect_round_refused(const char *json, const char *field) {
  bagua__rdzv_round_t r;
  char why[160] = "";
  if (bagua__rdzv_round_decode(json, &r, why, sizeof(why)) != -1)
    TEST_FAIL("round record accepted: %s", json);
  ASSERT_TRUE(r.members == NULL);
  if (!strstr(why, field)) TEST_FAIL("reason \"%s\" does not name %s", why, field);
}

#define ROUND_TAIL "\"master_addr\":\"a\",\"master_port\":5,\"round\":1"

static void test_round(void) {
  expect_round_refused("{\"garbage\":", "JSON");
  /* Overflow: a world that does not add up, or does not fit. */
  expect_round_refused(
      "{\"members\":[\"a\",\"b\"],\"nprocs\":[2147483647,2147483647],"
      "\"world_size\":-2," ROUND_TAIL "}",
      "nprocs");
  expect_round_refused(
      "{\"members\":[\"a\",\"b\"],\"nprocs\":[2,2],\"world_size\":5," ROUND_TAIL "}", "world_size");
  expect_round_refused(
      "{\"members\":[\"a\",\"a\"],\"nprocs\":[1,1],\"world_size\":2," ROUND_TAIL "}", "twice");
  expect_round_refused("{\"members\":[\"a b\"],\"nprocs\":[1],\"world_size\":1," ROUND_TAIL "}",
                       "members");
  expect_round_refused("{\"members\":[],\"nprocs\":[],\"world_size\":0," ROUND_TAIL "}", "members");
  expect_round_refused(
      "{\"members\":[\"a\"],\"nprocs\":[1],\"member_revs\":[],\"world_size\":1," ROUND_TAIL "}",
      "member_revs");
  expect_round_refused(
      "{\"members\":[\"a\"],\"nprocs\":[1],\"world_size\":1,\"master_addr\":"
      "\"a\",\"master_port\":5,\"round\":0}",
      "round");
  expect_round_refused(
      "{\"members\":[\"a\"],\"nprocs\":[1],\"world_size\":1,\"leader\":\"x/y\","
      "" ROUND_TAIL "}",
      "leader");
  /* A reason no rule gives: the whole round is refused, naming the field. */
  expect_round_refused(
      "{\"members\":[\"a\"],\"nprocs\":[1],\"world_size\":1,\"reason\":\"whim\","
      "" ROUND_TAIL "}",
      "reason");

  bagua__rdzv_round_t r;
  memset(&r, 0, sizeof(r));
  ASSERT_EQ(bagua__rdzv_round_decode("{\"members\":[\"a\",\"b\",\"c\"],\"nprocs\":[2,1,3],"
                                     "\"world_size\":6," ROUND_TAIL "}",
                                     &r, NULL, 0),
            0);
  int rank = -1, group = -1;
  ASSERT_EQ(bagua__rdzv_place(&r, "c", 2, &rank, &group), 0);
  ASSERT_EQ(rank, 5);
  ASSERT_EQ(group, 2);
  ASSERT_EQ(bagua__rdzv_place(&r, "b", 0, &rank, &group), 0);
  ASSERT_EQ(rank, 2);
  ASSERT_EQ(bagua__rdzv_place(&r, "b", 1, &rank, &group), -2);
  ASSERT_EQ(bagua__rdzv_place(&r, "z", 0, &rank, &group), -1);
  ASSERT_EQ(bagua__rdzv_rank_base(&r, 2), 3);
  char *v = bagua__rdzv_round_encode(&r);
  bagua__rdzv_round_t back;
  ASSERT_EQ(bagua__rdzv_round_decode(v, &back, NULL, 0), 0);
  ASSERT_EQ(back.world_size, 6);
  ASSERT_EQ(back.nmembers, 3);
  free(v);
  bagua__rdzv_round_clear(&back);
  bagua__rdzv_round_clear(&r);
}

/* Every reason has a distinct word that parses back to it; what each means to the agents. */
static void test_reasons(void) {
  for (int r = 0; r < BAGUA__ROUND_REASON_COUNT; r++) {
    bagua__round_reason_t back = BAGUA__ROUND_REASON_COUNT;
    ASSERT_EQ(bagua__round_reason_parse(bagua__round_reason_word((bagua__round_reason_t)r), &back),
              0);
    ASSERT_EQ((int)back, r);
  }
  bagua__round_reason_t x;
  ASSERT_EQ(bagua__round_reason_parse("Membership", &x), -1);
  ASSERT_STREQ(bagua__round_reason_word(BAGUA__ROUND_REASON_COUNT), "");
  ASSERT_TRUE(bagua__round_reason_keeps_workers(BAGUA__ROUND_MEMBERSHIP));
  ASSERT_TRUE(bagua__round_reason_keeps_workers(BAGUA__ROUND_STALL));
  ASSERT_TRUE(!bagua__round_reason_keeps_workers(BAGUA__ROUND_FAILURE));
  ASSERT_TRUE(!bagua__round_reason_keeps_workers(BAGUA__ROUND_INVALID));
  ASSERT_TRUE(bagua__round_reason_counts_restart(BAGUA__ROUND_FAILURE));
  ASSERT_TRUE(!bagua__round_reason_counts_restart(BAGUA__ROUND_MEMBERSHIP));
}

static void test_other_records(void) {
  bagua__rdzv_status_t st;
  char why[160];
  ASSERT_EQ(bagua__rdzv_status_decode("{\"garbage\":", &st, why, sizeof(why)), -1);
  ASSERT_EQ(
      bagua__rdzv_status_decode("{\"state\":\"running\",\"exit_code\":256}", &st, why, sizeof(why)),
      -1);
  ASSERT_TRUE(strstr(why, "exit_code") != NULL);
  ASSERT_EQ(bagua__rdzv_status_decode("{\"state\":\"failed\",\"root_cause\":{\"node\":\"\"}}", &st,
                                      why, sizeof(why)),
            -1);
  ASSERT_TRUE(strstr(why, "root_cause") != NULL);
  ASSERT_EQ(bagua__rdzv_status_decode("{\"state\":\"running\"}", &st, NULL, 0), 0);
  bagua__rdzv_done_t d;
  ASSERT_EQ(bagua__rdzv_done_decode("{\"state\":\"failed\",\"node\":\"n\",\"signal\":1e9}", &d, why,
                                    sizeof(why)),
            -1);
  ASSERT_TRUE(strstr(why, "signal") != NULL);
  ASSERT_EQ(bagua__rdzv_done_decode("{\"state\":\"stopped\",\"node\":\"n\",\"kept\":1}", &d, why,
                                    sizeof(why)),
            -1);
  bagua__rdzv_jobcfg_t c;
  ASSERT_EQ(bagua__rdzv_jobcfg_decode("{\"nnodes_min\":3,\"nnodes_max\":2,\"max_restarts\":0}", &c,
                                      why, sizeof(why)),
            -1);
  ASSERT_TRUE(strstr(why, "nnodes_max") != NULL);
  char id[BAGUA_RDZV_ID_MAX];
  ASSERT_EQ(bagua__rdzv_leader_decode("nobody", id, sizeof(id), why, sizeof(why)), 0);
  ASSERT_EQ(bagua__rdzv_leader_decode("{\"garbage\":", id, sizeof(id), why, sizeof(why)), -1);

  char s1[BAGUA_RDZV_SECRET_HEX + 1], s2[BAGUA_RDZV_SECRET_HEX + 1],
      back[BAGUA_RDZV_SECRET_HEX + 1];
  ASSERT_OK(bagua__rdzv_secret_generate(s1));
  ASSERT_OK(bagua__rdzv_secret_generate(s2));
  ASSERT_EQ((int)strlen(s1), BAGUA_RDZV_SECRET_HEX);
  ASSERT_TRUE(strcmp(s1, s2) != 0);
  ASSERT_EQ(bagua__rdzv_secret_decode(s1, strlen(s1), back, why, sizeof(why)), 0);
  ASSERT_STREQ(back, s1);
  ASSERT_EQ(bagua__rdzv_secret_decode(s1, 63, back, why, sizeof(why)), -1);
  /* Upper case is accepted, as libbagua's key decoding accepts it, and stored in lower case. */
  char upper[BAGUA_RDZV_SECRET_HEX + 1];
  for (int i = 0; i <= BAGUA_RDZV_SECRET_HEX; i++)
    upper[i] = (s1[i] >= 'a' && s1[i] <= 'f') ? (char)(s1[i] - 'a' + 'A') : s1[i];
  ASSERT_EQ(bagua__rdzv_secret_decode(upper, strlen(upper), back, why, sizeof(why)), 0);
  ASSERT_STREQ(back, s1);
  s1[5] = 'G';
  ASSERT_EQ(bagua__rdzv_secret_decode(s1, strlen(s1), back, why, sizeof(why)), -1);
}

static bagua__etcd_kv_t kv(const char *key, const char *value, int64_t rev, int64_t lease) {
  bagua__etcd_kv_t k;
  memset(&k, 0, sizeof(k));
  k.key = (char *)key;
  k.key_len = strlen(key);
  k.value = (char *)value;
  k.value_len = strlen(value);
  k.create_revision = rev;
  k.mod_revision = rev;
  k.lease = lease;
  return k;
}

static void test_round_trip(void) {
  bagua__rdzv_member_t m[2] = {{"n1", 2, 17}, {"n2", 1, 19}};
  bagua__rdzv_round_t r = {.round = 3,
                           .members = m,
                           .nmembers = 2,
                           .world_size = 3,
                           .master_addr = "10.0.0.1",
                           .master_port = 4242,
                           .restart_count = 1,
                           .reason = BAGUA__ROUND_FAILURE,
                           .leader = "n1",
                           .time_ms = 1732000000123LL};
  char *js = bagua__rdzv_round_encode(&r);
  ASSERT_TRUE(js != NULL);
  bagua__rdzv_round_t back;
  ASSERT_EQ(bagua__rdzv_round_decode(js, &back, NULL, 0), 0);
  ASSERT_EQ(back.round, 3);
  ASSERT_EQ(back.nmembers, 2);
  ASSERT_STREQ(back.members[1].id, "n2");
  ASSERT_EQ(back.members[1].nproc, 1);
  ASSERT_EQ(back.members[1].rev, 19);
  ASSERT_STREQ(back.master_addr, "10.0.0.1");
  ASSERT_EQ(back.master_port, 4242);
  ASSERT_EQ(back.restart_count, 1);
  ASSERT_EQ(back.reason, BAGUA__ROUND_FAILURE);
  ASSERT_TRUE(strstr(js, "\"reason\":\"failure\"") != NULL);
  ASSERT_EQ(back.time_ms, 1732000000123LL);
  ASSERT_EQ(bagua__rdzv_round_find(&back, "n2"), 1);
  ASSERT_EQ(bagua__rdzv_round_find(&back, "n9"), -1);
  bagua__rdzv_round_clear(&back);
  free(js);

  bagua__rdzv_status_t st = {.state = BAGUA__JOB_FAILED,
                             .time_ms = 5,
                             .round = 3,
                             .exit_code = 137,
                             .has_root = 1,
                             .message = "m"};
  snprintf(st.root.node, sizeof(st.root.node), "n2");
  st.root.rank = 2;
  st.root.signal = 9;
  js = bagua__rdzv_status_encode(&st);
  bagua__rdzv_status_t sb;
  ASSERT_EQ(bagua__rdzv_status_decode(js, &sb, NULL, 0), 0);
  ASSERT_EQ(sb.state, BAGUA__JOB_FAILED);
  ASSERT_EQ(sb.has_root, 1);
  ASSERT_EQ(sb.root.signal, 9);
  ASSERT_EQ(bagua__agent_failure_exit_code(&sb.root), 137);
  char line[512];
  bagua__agent_failure_describe(&sb.root, line, sizeof(line));
  ASSERT_TRUE(strstr(line, "rank 2 (node n2") && strstr(line, "killed by signal 9 (SIGKILL)"));
  free(js);

  bagua__rdzv_done_t d = {.state = BAGUA__DONE_FAILED};
  snprintf(d.f.node, sizeof(d.f.node), "n1");
  d.f.exit_code = 7;
  d.f.rank = 1;
  js = bagua__rdzv_done_encode(&d);
  bagua__rdzv_done_t db;
  ASSERT_EQ(bagua__rdzv_done_decode(js, &db, NULL, 0), 0);
  ASSERT_EQ(db.state, BAGUA__DONE_FAILED);
  ASSERT_EQ(db.f.exit_code, 7);
  ASSERT_EQ(bagua__agent_failure_exit_code(&db.f), 7);
  ASSERT_EQ(db.kept, 0);
  ASSERT_EQ(db.f.permanent, 0);
  ASSERT_TRUE(strstr(js, "reason") == NULL && strstr(js, "permanent") == NULL);
  free(js);
  /* A worker that never started: its exec error and "permanent" survive, and describe it. */
  snprintf(d.f.reason, sizeof(d.f.reason), "cannot run \"x\" for rank 1: No such file");
  d.f.permanent = 1;
  d.f.exit_code = 127;
  js = bagua__rdzv_done_encode(&d);
  ASSERT_EQ(bagua__rdzv_done_decode(js, &db, NULL, 0), 0);
  ASSERT_EQ(db.f.permanent, 1);
  ASSERT_STREQ(db.f.reason, d.f.reason);
  bagua__agent_failure_describe(&db.f, line, sizeof(line));
  ASSERT_TRUE(strstr(line, "never started: cannot run \"x\"") != NULL);
  free(js);
  ASSERT_EQ(bagua__rdzv_done_decode("{\"state\":\"failed\",\"node\":\"n\",\"permanent\":1}", &db,
                                    NULL, 0),
            -1);
  d.f.reason[0] = '\0';
  d.f.permanent = 0;
  /* "kept" (workers kept through an in-process round change) survives the round trip. */
  d.state = BAGUA__DONE_SUCCEEDED;
  d.kept = 1;
  js = bagua__rdzv_done_encode(&d);
  ASSERT_TRUE(strstr(js, "\"kept\":true") != NULL);
  ASSERT_EQ(bagua__rdzv_done_decode(js, &db, NULL, 0), 0);
  ASSERT_EQ(db.state, BAGUA__DONE_SUCCEEDED);
  ASSERT_EQ(db.kept, 1);
  free(js);
}

/* The node record's optional liveness port: written when set, absent (0) in older records. */
static void test_node_live_port(void) {
  bagua__rdzv_node_t n;
  memset(&n, 0, sizeof(n));
  snprintf(n.host, sizeof(n.host), "h");
  snprintf(n.addr, sizeof(n.addr), "10.0.0.2");
  n.nproc = 2;
  n.master_port = 29500;
  n.live_port = 41234;
  char *js = bagua__rdzv_node_encode(&n);
  ASSERT_TRUE(js != NULL && strstr(js, "\"live_port\":41234") != NULL);
  bagua__rdzv_node_t back;
  memset(&back, 0, sizeof(back));
  ASSERT_EQ(bagua__rdzv_node_decode(js, &back, NULL, 0), 0);
  ASSERT_EQ(back.live_port, 41234);
  ASSERT_EQ(back.master_port, 29500);
  ASSERT_STREQ(back.addr, "10.0.0.2");
  free(js);
  n.live_port = 0;
  js = bagua__rdzv_node_encode(&n);
  ASSERT_TRUE(js != NULL && strstr(js, "live_port") == NULL);
  free(js);
  const char *old = "{\"host\":\"h\",\"addr\":\"a\",\"nproc\":1,\"master_port\":5}";
  ASSERT_EQ(bagua__rdzv_node_decode(old, &back, NULL, 0), 0);
  ASSERT_EQ(back.live_port, 0);
  ASSERT_EQ(
      bagua__rdzv_node_decode(
          "{\"host\":\"h\", \"addr\":\"a\",\"nproc\":1,\"master_port\":5,\"live_port\":70000}",
          &back, NULL, 0),
      -1);
}

/* The node record's optional node rank (torchrun's --node_rank): written only when given
 * (node rank 0 included), absent in older records, bounded when present. */
static void test_node_rank_field(void) {
  bagua__rdzv_node_t n, back;
  memset(&n, 0, sizeof(n));
  snprintf(n.host, sizeof(n.host), "h");
  snprintf(n.addr, sizeof(n.addr), "10.0.0.2");
  n.nproc = 1;
  n.master_port = 29500;
  char *js = bagua__rdzv_node_encode(&n);
  ASSERT_TRUE(js != NULL && strstr(js, "node_rank") == NULL);
  memset(&back, 0, sizeof(back));
  ASSERT_EQ(bagua__rdzv_node_decode(js, &back, NULL, 0), 0);
  ASSERT_EQ(back.has_node_rank, 0);
  free(js);
  n.has_node_rank = 1;
  n.node_rank = 0;
  js = bagua__rdzv_node_encode(&n);
  ASSERT_TRUE(js != NULL && strstr(js, "\"node_rank\":0") != NULL);
  ASSERT_EQ(bagua__rdzv_node_decode(js, &back, NULL, 0), 0);
  ASSERT_EQ(back.has_node_rank, 1);
  ASSERT_EQ(back.node_rank, 0);
  free(js);
  char why[160];
  ASSERT_EQ(bagua__rdzv_node_decode("{\"host\":\"h\",\"addr\":\"a\",\"nproc\":1,"
                                    "\"master_port\":5,\"node_rank\":-1}",
                                    &back, why, sizeof(why)),
            -1);
  ASSERT_TRUE(strstr(why, "node_rank") != NULL);
  ASSERT_EQ(back.has_node_rank, 0);
}

/* Foreign or corrupt values are refused, not half-read. */
static void test_rejects(void) {
  bagua__rdzv_round_t r;
  const char *bad[] = {"",
                       "[]",
                       "{\"round\":1}",
                       "{\"round\":1e300,\"members\":[\"a\"],\"nprocs\":[1]}",
                       "{\"members\":[\"a\"],\"nprocs\":[1e300],\"round\":1,\"world_size\":1,"
                       "\"master_addr\":\"x\",\"master_port\":1}",
                       "{\"members\":[\"a\",\"b\"],\"nprocs\":[1],\"round\":1}",
                       NULL};
  for (int i = 0; bad[i]; i++) ASSERT_EQ(bagua__rdzv_round_decode(bad[i], &r, NULL, 0), -1);
  bagua__rdzv_status_t st;
  ASSERT_EQ(bagua__rdzv_status_decode("{\"state\":\"exploded\"}", &st, NULL, 0), -1);
  bagua__rdzv_node_t n;
  memset(&n, 0, sizeof(n));
  ASSERT_EQ(bagua__rdzv_node_decode(
                "{\"host\":\"h\", \"addr\":\"a\",\"nproc\":0,\"master_port\":1}", &n, NULL, 0),
            -1);
}

/* The snapshot keeps nothing the schema refuses and tells the leader what to repair. */
static void test_snapshot(void) {
  const char *node = "{\"host\":\"h\",\"addr\":\"a\",\"nproc\":1,\"master_port\":5}";
  const char *evil = "{\"host\":\"h\",\"addr\":\"a\",\"nproc\":2147483647,\"master_port\":5}";
  bagua__etcd_kv_t kvs[] = {
      kv("/bagua/j/leader", "nobody", 3, 0),
      kv("/bagua/j/nodes/a", node, 4, 11),
      kv("/bagua/j/nodes/phantom", node, 5, 0),
      kv("/bagua/j/nodes/evil", evil, 6, 12),
      kv("/bagua/j/round", "{\"garbage\":", 7, 0),
      kv("/bagua/j/status", "{\"garbage\":", 8, 0),
      kv("/bagua/j/secret", "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", 9,
         0),
  };
  bagua__agent_snap_t s;
  memset(&s, 0, sizeof(s));
  ASSERT_EQ(bagua__agent_snap_parse("/bagua/j/", kvs, sizeof(kvs) / sizeof(kvs[0]), &s), 0);
  ASSERT_EQ(s.nnodes, 1);
  ASSERT_STREQ(s.nodes[0].id, "a");
  ASSERT_EQ(s.has_leader, 1);
  ASSERT_EQ(s.leader_lease, 0); /* register.c refuses a leader key on no lease */
  ASSERT_EQ(s.has_round, 0);
  ASSERT_EQ(s.round_bad, 1);
  ASSERT_EQ(s.round_mod_rev, 7);
  ASSERT_EQ(s.has_status, 0);
  ASSERT_EQ(s.status_bad, 1);
  ASSERT_EQ(s.status_mod_rev, 8);
  ASSERT_EQ(s.has_secret, 1);
  bagua__agent_snap_clear(&s);
}

/* Nodes sorted by registration; only the current round's done records are kept. */
static void test_snapshot_order(void) {
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

/* progress/<node> records and the workers' progress files (docs/observability.md). */
static void expect_progress_refused(const char *json, const char *what) {
  bagua__rdzv_progress_t p;
  memset(&p, 0, sizeof(p));
  char why[256] = "";
  ASSERT_EQ(bagua__rdzv_progress_decode(json, &p, why, sizeof(why)), -1);
  ASSERT_TRUE(p.w == NULL && p.nworkers == 0);
  if (!strstr(why, what)) TEST_FAIL("refusal of %s says \"%s\", expected \"%s\"", json, why, what);
}

static void test_progress(void) {
  char key[BAGUA_RDZV_KEY_MAX];
  ASSERT_EQ(bagua__rdzv_key(key, sizeof(key), "j", BAGUA__RDZV_KEY_PROGRESS, 0, "n1", 0), 0);
  ASSERT_STREQ(key, "/bagua/j/progress/n1");
  bagua__rdzv_key_info_t ki;
  ASSERT_EQ(bagua__rdzv_key_parse("/bagua/j/", key, &ki), 0);
  ASSERT_EQ((int)ki.kind, (int)BAGUA__RDZV_KEY_PROGRESS);
  ASSERT_STREQ(ki.name, "n1");
  ASSERT_EQ(bagua__rdzv_key_parse("/bagua/j/", "/bagua/j/progress/a/b", &ki), 0);
  ASSERT_EQ((int)ki.kind, (int)BAGUA__RDZV_KEY_OTHER);

  bagua__rdzv_wprogress_t w[2] = {{.local_rank = 0,
                                   .rank = 2,
                                   .pid = 7,
                                   .step = 10,
                                   .total_steps = 100,
                                   .bytes_sent = 4096,
                                   .comm_ms = 3,
                                   .rate_milli = 12500,
                                   .update_ms = 1700000000000},
                                  {.local_rank = 1, .rank = 3, .step = 11}};
  bagua__rdzv_progress_t p = {.round = 4, .restart_count = 1, .time_ms = 5, .nworkers = 2, .w = w};
  char *json = bagua__rdzv_progress_encode(&p);
  ASSERT_TRUE(json != NULL);
  bagua__rdzv_progress_t q;
  memset(&q, 0, sizeof(q));
  snprintf(q.node, sizeof(q.node), "n1");
  ASSERT_EQ(bagua__rdzv_progress_decode(json, &q, NULL, 0), 0);
  ASSERT_STREQ(q.node, "n1");
  ASSERT_EQ(q.round, 4);
  ASSERT_EQ(q.nworkers, 2);
  ASSERT_EQ(q.w[0].rate_milli, 12500);
  ASSERT_EQ(q.w[1].rank, 3);
  char *again = bagua__rdzv_progress_encode(&q);
  ASSERT_STREQ(again, json);
  free(again);
  free(json);
  bagua__rdzv_progress_clear(&q);

  expect_progress_refused("[]", "not a JSON object");
  expect_progress_refused("{\"round\":0,\"workers\":[]}", "field \"round\"");
  expect_progress_refused("{\"round\":1}", "field \"workers\" is missing");
  expect_progress_refused("{\"round\":1,\"workers\":[1]}", "[0] is not an object");
  expect_progress_refused("{\"round\":1,\"workers\":[{\"local_rank\":0,\"rank\":0,\"step\":-1}]}",
                          "field \"step\"");
  expect_progress_refused(
      "{\"round\":1,\"workers\":[{\"local_rank\":0,\"rank\":0,\"step\":1},"
      "{\"local_rank\":0,\"rank\":1,\"step\":1}]}",
      "local_rank 0 appears twice");
  expect_progress_refused("{\"round\":1,\"workers\":[{\"local_rank\":0,\"rank\":0,\"step\":1.5}]}",
                          "is not an integer");

  bagua__progress_file_t f, out;
  memset(&f, 0, sizeof(f));
  f.magic = BAGUA_PROGRESS_FILE_MAGIC;
  f.version = BAGUA_PROGRESS_FILE_VERSION;
  f.size = sizeof(f);
  f.pid = 9;
  f.step = 3;
  char why[160];
  ASSERT_EQ(bagua__progress_file_decode(&f, sizeof(f), &out, why, sizeof(why)), 0);
  ASSERT_EQ(out.step, 3);
  ASSERT_EQ(bagua__progress_file_decode(&f, sizeof(f) - 1, &out, why, sizeof(why)), -1);
  f.seq = 3;
  ASSERT_EQ(bagua__progress_file_decode(&f, sizeof(f), &out, why, sizeof(why)), -1);
  ASSERT_TRUE(strstr(why, "odd sequence count") != NULL);
  f.seq = 4;
  f.step = -2;
  ASSERT_EQ(bagua__progress_file_decode(&f, sizeof(f), &out, why, sizeof(why)), -1);
  ASSERT_TRUE(strstr(why, "field \"step\"") != NULL);
  f.step = 1;
  f.magic = 1;
  ASSERT_EQ(bagua__progress_file_decode(&f, sizeof(f), &out, why, sizeof(why)), -1);
}

/* assign/<node>: derived from a round by the rank rule and the ring rule, strict, round trip. */
static void expect_assign_refused(const char *json, const char *field) {
  bagua__rdzv_assign_t a;
  char why[200] = "";
  memset(&a, 0, sizeof(a));
  if (bagua__rdzv_assign_decode(json, &a, why, sizeof(why)) != -1)
    TEST_FAIL("assignment accepted: %s", json);
  if (!strstr(why, field)) TEST_FAIL("reason \"%s\" does not name %s", why, field);
}

static void test_assign(void) {
  bagua__rdzv_member_t m[4] = {{"n1", 2, 17}, {"n2", 1, 19}, {"n3", 3, 23}, {"n4", 1, 29}};
  bagua__rdzv_round_t r = {.round = 5,
                           .members = m,
                           .nmembers = 4,
                           .world_size = 7,
                           .master_port = 9,
                           .restart_count = 1};
  snprintf(r.master_addr, sizeof(r.master_addr), "10.0.0.1");
  r.reason = BAGUA__ROUND_MEMBERSHIP;
  snprintf(r.leader, sizeof(r.leader), "n1");
  r.time_ms = 1234;
  r.departed = 2;
  bagua__rdzv_assign_t all[4], one;
  bagua__rdzv_assign_all(&r, 2, all);
  for (int i = 0; i < 4; i++) {
    int rank = -1, group = -1;
    ASSERT_EQ(bagua__rdzv_place(&r, m[i].id, 0, &rank, &group), 0);
    ASSERT_STREQ(all[i].node, m[i].id);
    ASSERT_EQ(all[i].index, group);
    ASSERT_EQ(all[i].rank_base, rank); /* the rank rule's */
    ASSERT_EQ(all[i].nproc, m[i].nproc);
    ASSERT_EQ(all[i].rev, m[i].rev);
    ASSERT_EQ(all[i].world_size, 7);
    ASSERT_EQ(all[i].departed, 2); /* the round's: elastic workers read it */
    /* The ring: the next two members, wrapping. */
    ASSERT_EQ(all[i].nwatch, 2);
    ASSERT_STREQ(all[i].watch[0].id, m[(i + 1) % 4].id);
    ASSERT_STREQ(all[i].watch[1].id, m[(i + 2) % 4].id);
    ASSERT_EQ(all[i].watch[1].rev, m[(i + 2) % 4].rev);
    bagua__rdzv_assign_of(&r, i, 2, &one);
    ASSERT_EQ(memcmp(&one, &all[i], sizeof(one)), 0);
    /* A round trip gives back what was encoded. */
    char *v = bagua__rdzv_assign_encode(&all[i]);
    ASSERT_TRUE(v != NULL);
    bagua__rdzv_assign_t back;
    memset(&back, 0, sizeof(back));
    memcpy(back.node, all[i].node, sizeof(back.node));
    ASSERT_EQ(bagua__rdzv_assign_decode(v, &back, NULL, 0), 0);
    ASSERT_EQ(memcmp(&back, &all[i], sizeof(back)), 0);
    free(v);
  }
  /* A round of two: one watched member; of one: none. */
  r.nmembers = 2;
  r.world_size = 3;
  bagua__rdzv_assign_of(&r, 1, 3, &one);
  ASSERT_EQ(one.nwatch, 1);
  ASSERT_STREQ(one.watch[0].id, "n1");
  /* A spare: index -1, no place, no watch list; it round-trips too. */
  bagua__rdzv_assign_of(&r, -1, 3, &one);
  ASSERT_EQ(one.index, -1);
  ASSERT_EQ(one.nwatch, 0);
  char *v = bagua__rdzv_assign_encode(&one);
  bagua__rdzv_assign_t back;
  memset(&back, 0, sizeof(back));
  ASSERT_EQ(bagua__rdzv_assign_decode(v, &back, NULL, 0), 0);
  ASSERT_EQ(back.index, -1);
  ASSERT_EQ(back.round, 5);
  ASSERT_EQ(back.departed, 2);
  free(v);
  const char *base =
      "\"round\":5,\"world_size\":4,\"nmembers\":2,\"master_addr\":\"a\",\"master_port\":9";
  char j[512];
  snprintf(j, sizeof(j), "{%s,\"index\":2}", base);
  expect_assign_refused(j, "\"index\"");
  snprintf(j, sizeof(j), "{%s,\"index\":1,\"rank_base\":3,\"nproc\":2}", base);
  expect_assign_refused(j, "\"rank_base\"");
  snprintf(j, sizeof(j),
           "{%s,\"index\":1,\"rank_base\":0,\"nproc\":1,\"watch\":[\"a/b\"],"
           "\"watch_revs\":[1]}",
           base);
  expect_assign_refused(j, "\"watch\"[0]");
  snprintf(j, sizeof(j), "{%s,\"index\":1,\"rank_base\":0,\"nproc\":1,\"watch\":[\"a\"]}", base);
  expect_assign_refused(j, "\"watch_revs\"");
  snprintf(j, sizeof(j),
           "{%s,\"index\":1,\"rank_base\":0,\"nproc\":1,\"watch\":[\"a\",\"b\","
           "\"c\",\"d\",\"e\",\"f\",\"g\",\"h\",\"i\"],\"watch_revs\":[1,1,1,1,1,1,1,1,1]}",
           base);
  expect_assign_refused(j, "\"watch\"");
  snprintf(j, sizeof(j), "{%s,\"index\":-1,\"departed\":-1}", base);
  expect_assign_refused(j, "\"departed\"");
  /* A record without the field (an older leader's) has no departures. */
  snprintf(j, sizeof(j), "{%s,\"index\":-1}", base);
  memset(&back, 0, sizeof(back));
  ASSERT_EQ(bagua__rdzv_assign_decode(j, &back, NULL, 0), 0);
  ASSERT_EQ(back.departed, 0);
  expect_assign_refused("{\"round\":0}", "\"round\"");
  expect_assign_refused("[1]", "JSON object");
}

/* The failure key (what every member follows instead of every done record) and the leader's
 * view of assignments in a full snapshot; a follower's snapshot takes only its own. */
static void test_snapshot_assign_failure(void) {
  const char *assign_a =
      "{\"round\":3,\"world_size\":2,\"nmembers\":2,\"master_addr\":\"a\",\"master_port\":5,"
      "\"index\":0,\"rank_base\":0,\"nproc\":1,\"rev\":4,\"watch\":[\"b\"],\"watch_revs\":[6],"
      "\"time_ms\":99}";
  const char *failure =
      "{\"state\":\"failed\",\"node\":\"b\",\"round\":3,\"rank\":1,\"exit_code\":7}";
  bagua__etcd_kv_t kvs[] = {
      kv("/bagua/j/assign/a", assign_a, 8, 55),
      kv("/bagua/j/assign/b", "{\"garbage\":", 9, 56),
      kv("/bagua/j/failure", failure, 10, 0),
  };
  bagua__agent_snap_t s;
  ASSERT_EQ(bagua__agent_snap_parse("/bagua/j/", kvs, 3, &s), 0);
  ASSERT_EQ(s.nassigned, 1); /* the refused one is left out: the leader writes it again */
  ASSERT_STREQ(s.assigned[0].node, "a");
  ASSERT_EQ(s.assigned[0].round, 3);
  ASSERT_EQ(s.assigned[0].rev, 4);
  ASSERT_EQ(s.assigned[0].time_ms, 99);
  ASSERT_EQ(s.assigned[0].lease, 55);
  ASSERT_EQ(s.has_failure, 1);
  ASSERT_EQ(s.failure.f.round, 3);
  ASSERT_STREQ(s.failure.f.node, "b");
  ASSERT_EQ(s.failure.f.exit_code, 7);
  bagua__agent_snap_clear(&s);
  /* A follower's snapshot: its own assignment is its place. */
  bagua__agent_entry_t e[3];
  memset(e, 0, sizeof(e));
  for (int i = 0; i < 3; i++) e[i].kv = kvs[i];
  ASSERT_EQ(bagua__agent_snap_build("/bagua/j/", "a", e, 3, NULL, 0, 0, &s), 0);
  ASSERT_EQ(s.has_place, 1);
  ASSERT_EQ(s.place.index, 0);
  ASSERT_EQ(s.place.nwatch, 1);
  ASSERT_STREQ(s.place.watch[0].id, "b");
  ASSERT_EQ(s.nassigned, 0);
  bagua__agent_snap_clear(&s);
  /* The decoded records are kept with the entries, and not decoded again at the same revision. */
  bagua__agent_rec_t *kept = e[0].rec;
  ASSERT_TRUE(kept != NULL);
  ASSERT_EQ(bagua__agent_snap_build("/bagua/j/", "b", e, 3, NULL, 0, 0, &s), 0);
  ASSERT_TRUE(e[0].rec == kept);
  ASSERT_EQ(s.has_place, 0); /* b's assignment was refused */
  bagua__agent_snap_clear(&s);
  for (int i = 0; i < 3; i++) bagua__agent_rec_free(e[i].rec);
  /* A failure key that reports no failure is refused. */
  bagua__etcd_kv_t ok = kv("/bagua/j/failure", "{\"state\":\"succeeded\",\"node\":\"b\"}", 11, 0);
  ASSERT_EQ(bagua__agent_snap_parse("/bagua/j/", &ok, 1, &s), 0);
  ASSERT_EQ(s.has_failure, 0);
  bagua__agent_snap_clear(&s);
}

/* A round decodes in time linear in its members (a thousand of them once took a million string
 * comparisons): 20,000 members decode, and one named twice is still refused. */
static void test_round_large(void) {
  enum { N = 20000 };
  bagua__rdzv_member_t *m = calloc(N, sizeof(*m));
  ASSERT_TRUE(m != NULL);
  for (int i = 0; i < N; i++) {
    snprintf(m[i].id, sizeof(m[i].id), "node-%05d", i);
    m[i].nproc = 1;
    m[i].rev = i + 1;
  }
  bagua__rdzv_round_t r = {
      .round = 1, .members = m, .nmembers = N, .world_size = N, .master_port = 1};
  snprintf(r.master_addr, sizeof(r.master_addr), "a");
  char *v = bagua__rdzv_round_encode(&r);
  ASSERT_TRUE(v != NULL);
  bagua__rdzv_round_t back;
  ASSERT_EQ(bagua__rdzv_round_decode(v, &back, NULL, 0), 0);
  ASSERT_EQ(back.nmembers, N);
  ASSERT_STREQ(back.members[N - 1].id, "node-19999");
  ASSERT_EQ(back.members[N - 1].rev, N);
  bagua__rdzv_round_clear(&back);
  free(v);
  snprintf(m[N - 1].id, sizeof(m[N - 1].id), "node-00007");
  v = bagua__rdzv_round_encode(&r);
  char why[200] = "";
  ASSERT_EQ(bagua__rdzv_round_decode(v, &back, why, sizeof(why)), -1);
  ASSERT_TRUE(strstr(why, "names node \"node-00007\" twice") != NULL);
  free(v);
  free(m);
}

/* clash/<node>: the key is built and classified, the record survives a round trip, a record
 * with one bad field is refused naming it, and a snapshot keeps only this node's own. */
static void expect_clash_refused(const char *json, const char *field) {
  bagua__rdzv_clash_t c;
  char why[160] = "";
  memset(&c, 0, sizeof(c));
  if (bagua__rdzv_clash_decode(json, &c, why, sizeof(why)) != -1)
    TEST_FAIL("clash record accepted: %s", json);
  if (!strstr(why, field)) TEST_FAIL("reason \"%s\" does not name %s", why, field);
}

static void test_clash(void) {
  char k[BAGUA_RDZV_KEY_MAX];
  ASSERT_EQ(bagua__rdzv_key(k, sizeof(k), "j", BAGUA__RDZV_KEY_CLASH, 0, "n1", 0), 0);
  ASSERT_STREQ(k, "/bagua/j/clash/n1");
  /* Before "config": outside the first range a follower watches (agent.c). */
  ASSERT_TRUE(strcmp(k, "/bagua/j/config") < 0);
  bagua__rdzv_key_info_t ki;
  ASSERT_EQ(bagua__rdzv_key_parse("/bagua/j/", "/bagua/j/clash/n1", &ki), 0);
  ASSERT_EQ(ki.kind, BAGUA__RDZV_KEY_CLASH);
  ASSERT_STREQ(ki.name, "n1");
  ASSERT_EQ(bagua__rdzv_key_parse("/bagua/j/", "/bagua/j/clash/a/b", &ki), 0);
  ASSERT_EQ(ki.kind, BAGUA__RDZV_KEY_OTHER);
  ASSERT_EQ(bagua__rdzv_key_parse("/bagua/j/", "/bagua/j/clash/", &ki), 0);
  ASSERT_EQ(ki.kind, BAGUA__RDZV_KEY_OTHER);

  bagua__rdzv_clash_t c = {.node = "n1",
                           .host = "h2",
                           .addr = "10.0.0.2",
                           .pid = 4242,
                           .time_ms = 1732000000123LL,
                           .holder_rev = 17};
  char *js = bagua__rdzv_clash_encode(&c);
  ASSERT_TRUE(js != NULL);
  bagua__rdzv_clash_t back;
  memset(&back, 0, sizeof(back));
  snprintf(back.node, sizeof(back.node), "from-key");
  ASSERT_EQ(bagua__rdzv_clash_decode(js, &back, NULL, 0), 0);
  ASSERT_STREQ(back.node, "from-key"); /* the node comes from the key */
  ASSERT_STREQ(back.host, "h2");
  ASSERT_STREQ(back.addr, "10.0.0.2");
  ASSERT_EQ(back.pid, 4242);
  ASSERT_EQ(back.time_ms, 1732000000123LL);
  ASSERT_EQ(back.holder_rev, 17);
  free(js);

  expect_clash_refused("{\"garbage\":", "JSON");
  expect_clash_refused("{\"addr\":\"a\",\"pid\":1,\"holder_rev\":3}", "host");
  expect_clash_refused("{\"host\":\"\",\"addr\":\"a\",\"pid\":1,\"holder_rev\":3}", "host");
  expect_clash_refused("{\"host\":\"h\",\"pid\":1,\"holder_rev\":3}", "addr");
  expect_clash_refused("{\"host\":\"h\",\"addr\":\"a\",\"holder_rev\":3}", "pid");
  expect_clash_refused("{\"host\":\"h\",\"addr\":\"a\",\"pid\":\"1\",\"holder_rev\":3}", "pid");
  expect_clash_refused("{\"host\":\"h\",\"addr\":\"a\",\"pid\":1}", "holder_rev");
  expect_clash_refused("{\"host\":\"h\",\"addr\":\"a\",\"pid\":1,\"holder_rev\":0}", "holder_rev");
  expect_clash_refused("{\"host\":\"h\",\"addr\":\"a\",\"pid\":1,\"holder_rev\":2.5}",
                       "holder_rev");
  expect_clash_refused("{\"host\":\"h\",\"addr\":\"a\",\"pid\":1,\"holder_rev\":3,\"time_ms\":-1}",
                       "time_ms");

  /* A snapshot takes the record of its own node only; a refused one counts as absent. */
  const char *rec = "{\"host\":\"h2\",\"addr\":\"10.0.0.2\",\"pid\":7,\"holder_rev\":4}";
  bagua__etcd_kv_t kvs[] = {
      kv("/bagua/j/clash/a", rec, 8, 55),
      kv("/bagua/j/clash/b", rec, 9, 56),
      kv("/bagua/j/clash/c", "{\"host\":\"h\"}", 10, 57),
  };
  bagua__agent_entry_t e[3];
  memset(e, 0, sizeof(e));
  for (int i = 0; i < 3; i++) e[i].kv = kvs[i];
  bagua__agent_snap_t s;
  ASSERT_EQ(bagua__agent_snap_build("/bagua/j/", "b", e, 3, NULL, 0, 1, &s), 0);
  ASSERT_EQ(s.has_clash, 1);
  ASSERT_STREQ(s.clash.node, "b");
  ASSERT_EQ(s.clash.pid, 7);
  ASSERT_EQ(s.clash.holder_rev, 4);
  ASSERT_EQ(s.clash_mod_rev, 9);
  bagua__agent_snap_clear(&s);
  ASSERT_EQ(bagua__agent_snap_build("/bagua/j/", "c", e, 3, NULL, 0, 0, &s), 0);
  ASSERT_EQ(s.has_clash, 0);
  bagua__agent_snap_clear(&s);
  ASSERT_EQ(bagua__agent_snap_build("/bagua/j/", "z", e, 3, NULL, 0, 0, &s), 0);
  ASSERT_EQ(s.has_clash, 0);
  bagua__agent_snap_clear(&s);
  for (int i = 0; i < 3; i++) bagua__agent_rec_free(e[i].rec);
}

/* The worker's error file (torch's @record): every form torch writes is read, the message is
 * made one bounded line of printable UTF-8, and anything else is refused with the reason. */
static void expect_error_file(const char *file, const char *want) {
  char out[BAGUA_RDZV_ERROR_MAX], why[256] = "";
  if (bagua__rdzv_error_file_decode(file, strlen(file), out, sizeof(out), why, sizeof(why)) != 0)
    TEST_FAIL("error file refused (%s): %s", why, file);
  ASSERT_STREQ(out, want);
}

/* `len` (size_t)-1: the file is the string `file`. */
static void expect_error_file_refused(const char *file, size_t len, const char *reason) {
  char out[BAGUA_RDZV_ERROR_MAX], why[256] = "";
  if (len == (size_t)-1) len = strlen(file);
  snprintf(out, sizeof(out), "stale");
  if (bagua__rdzv_error_file_decode(file, len, out, sizeof(out), why, sizeof(why)) != -1)
    TEST_FAIL("error file accepted: %.*s", (int)len, file);
  ASSERT_STREQ(out, "");
  if (!strstr(why, reason)) TEST_FAIL("reason \"%s\" does not say %s", why, reason);
}

static void test_error_file(void) {
  /* What torch's ErrorHandler.record_exception writes (torch 1.13 and later). */
  expect_error_file(
      "{\"message\": {\"message\": \"ValueError: bad learning rate\", \"extraInfo\": "
      "{\"py_callstack\": \"Traceback (most recent call last):\\n  File \\\"t.py\\\", line 3\\n"
      "ValueError: bad learning rate\\n\", \"timestamp\": \"1700000000\"}}}",
      "ValueError: bad learning rate");
  /* The simple form torch's ChildFailedError also reads, with its "errorCode" kin ignored. */
  expect_error_file("{\"message\": \"out of memory\", \"timestamp\": 1700000000}", "out of memory");
  expect_error_file("{\"message\": {\"message\": \"E\", \"errorCode\": 7}}", "E");
  /* No message text: the traceback's last line stands in. */
  expect_error_file(
      "{\"message\": {\"extraInfo\": {\"py_callstack\": \"Traceback:\\n  x\\nKeyError: 'lr'\\n\\n"
      "\"}}}",
      "KeyError: 'lr'");
  /* One line: newlines, tabs and escape sequences become single spaces, ends are trimmed. */
  expect_error_file("{\"message\": \"  a\\nb\\t\\tc\\u001b[31m d \\r\\n\"}", "a b c [31m d");
  /* Bytes that are not UTF-8 become '?'; UTF-8 is kept. */
  expect_error_file("{\"message\": \"caf\xc3\xa9 \xff\xfe ok\"}", "caf\xc3\xa9 ?? ok");

  /* A message longer than the record's field is cut at a character boundary, with "...". */
  char big[4096];
  size_t o = (size_t)snprintf(big, sizeof(big), "{\"message\": \"");
  for (int i = 0; i < 600; i++) o += (size_t)snprintf(big + o, sizeof(big) - o, "\xc3\xa9");
  snprintf(big + o, sizeof(big) - o, "\"}");
  char out[BAGUA_RDZV_ERROR_MAX];
  ASSERT_EQ(bagua__rdzv_error_file_decode(big, strlen(big), out, sizeof(out), NULL, 0), 0);
  size_t n = strlen(out);
  ASSERT_TRUE(n < BAGUA_RDZV_ERROR_MAX);
  ASSERT_TRUE(n >= BAGUA_RDZV_ERROR_MAX - 8);
  ASSERT_STREQ(out + n - 3, "...");
  ASSERT_EQ((n - 3) % 2, 0); /* whole two-byte characters before the dots */
  for (size_t i = 0; i + 3 < n; i += 2) ASSERT_TRUE(memcmp(out + i, "\xc3\xa9", 2) == 0);
  /* One that fits exactly is not cut. */
  char fit[BAGUA_RDZV_ERROR_MAX + 32];
  o = (size_t)snprintf(fit, sizeof(fit), "{\"message\": \"");
  memset(fit + o, 'x', BAGUA_RDZV_ERROR_MAX - 1);
  snprintf(fit + o + BAGUA_RDZV_ERROR_MAX - 1, sizeof(fit) - o - BAGUA_RDZV_ERROR_MAX + 1, "\"}");
  ASSERT_EQ(bagua__rdzv_error_file_decode(fit, strlen(fit), out, sizeof(out), NULL, 0), 0);
  ASSERT_EQ(strlen(out), BAGUA_RDZV_ERROR_MAX - 1);
  ASSERT_TRUE(strstr(out, "...") == NULL);

  expect_error_file_refused("", (size_t)-1, "empty");
  expect_error_file_refused("not json", (size_t)-1, "JSON");
  expect_error_file_refused("[\"message\"]", (size_t)-1, "JSON");
  expect_error_file_refused("{\"msg\": \"x\"}", (size_t)-1, "missing");
  expect_error_file_refused("{\"message\": 7}", (size_t)-1, "neither a string nor an object");
  expect_error_file_refused("{\"message\": \"\"}", (size_t)-1, "no text");
  expect_error_file_refused("{\"message\": \" \\n\\t \"}", (size_t)-1, "blanks");
  expect_error_file_refused("{\"message\": {\"message\": 3}}", (size_t)-1,
                            "\"message\".\"message\"");
  expect_error_file_refused("{\"message\": {\"extraInfo\": 3}}", (size_t)-1, "extraInfo");
  expect_error_file_refused("{\"message\": {\"extraInfo\": {\"py_callstack\": 1}}}", (size_t)-1,
                            "py_callstack");
  expect_error_file_refused("{\"message\": {}}", (size_t)-1, "no text");
  expect_error_file_refused("{\"message\": \"a\0b\"}", 18, "NUL");
  /* Larger than the bound: refused without being parsed. */
  size_t huge = (size_t)BAGUA_RDZV_ERROR_FILE_MAX + 1;
  char *h = malloc(huge);
  ASSERT_TRUE(h != NULL);
  memset(h, ' ', huge);
  expect_error_file_refused(h, huge, "more than");
  free(h);
}

/* The failure record's optional "error" (the worker's own message): written only when there
 * is one, kept by a round trip through the done record and the status's root cause, shown
 * last in the failure's line, and refused when it would not fit. */
static void test_failure_error(void) {
  bagua__rdzv_done_t d = {.state = BAGUA__DONE_FAILED};
  snprintf(d.f.node, sizeof(d.f.node), "n2");
  d.f.rank = 3;
  d.f.exit_code = 1;
  char *js = bagua__rdzv_done_encode(&d);
  ASSERT_TRUE(js != NULL && strstr(js, "\"error\"") == NULL);
  free(js);
  snprintf(d.f.error, sizeof(d.f.error), "ValueError: bad learning rate");
  js = bagua__rdzv_done_encode(&d);
  ASSERT_TRUE(strstr(js, "\"error\":\"ValueError: bad learning rate\"") != NULL);
  bagua__rdzv_done_t db;
  ASSERT_EQ(bagua__rdzv_done_decode(js, &db, NULL, 0), 0);
  ASSERT_STREQ(db.f.error, "ValueError: bad learning rate");
  char line[1024];
  bagua__agent_failure_describe(&db.f, line, sizeof(line));
  ASSERT_TRUE(strstr(line, "exited with code 1: ValueError: bad learning rate") != NULL);
  free(js);
  bagua__rdzv_status_t st = {.state = BAGUA__JOB_FAILED, .exit_code = 1, .has_root = 1};
  st.root = d.f;
  js = bagua__rdzv_status_encode(&st);
  bagua__rdzv_status_t sb;
  ASSERT_EQ(bagua__rdzv_status_decode(js, &sb, NULL, 0), 0);
  ASSERT_STREQ(sb.root.error, "ValueError: bad learning rate");
  free(js);
  /* Strict: a string that does not fit, or no string, refuses the record. */
  char why[160] = "", big[BAGUA_RDZV_ERROR_MAX + 128];
  int o = snprintf(big, sizeof(big), "{\"state\":\"failed\",\"node\":\"n\",\"error\":\"");
  memset(big + o, 'x', BAGUA_RDZV_ERROR_MAX);
  snprintf(big + o + BAGUA_RDZV_ERROR_MAX, sizeof(big) - (size_t)o - BAGUA_RDZV_ERROR_MAX, "\"}");
  ASSERT_EQ(bagua__rdzv_done_decode(big, &db, why, sizeof(why)), -1);
  ASSERT_TRUE(strstr(why, "\"error\"") != NULL);
  ASSERT_EQ(bagua__rdzv_done_decode("{\"state\":\"failed\",\"node\":\"n\",\"error\":5}", &db, why,
                                    sizeof(why)),
            -1);
  ASSERT_TRUE(strstr(why, "\"error\"") != NULL);
}

int main(int argc, char **argv) {
  TEST_RUN_CASES(argc, argv, "rdzv", TEST_CASE(progress), TEST_CASE(assign),
                 TEST_CASE(snapshot_assign_failure), TEST_CASE(round_large), TEST_CASE(keys),
                 TEST_CASE(node), TEST_CASE(round), TEST_CASE(reasons), TEST_CASE(other_records),
                 TEST_CASE(round_trip), TEST_CASE(node_live_port), TEST_CASE(node_rank_field),
                 TEST_CASE(rejects), TEST_CASE(snapshot), TEST_CASE(snapshot_order),
                 TEST_CASE(clash), TEST_CASE(error_file), TEST_CASE(failure_error));
}
