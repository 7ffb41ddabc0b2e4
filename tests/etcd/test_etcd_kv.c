/*
 * Key-value and transaction calls against a real etcd: put/get/range/delete, binary values,
 * endpoint forms and failover, compare-and-swap, several ranges in one read and batched puts,
 * and a create-if-absent race between clients.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bagua/error.h"
#include "common/etcd/etcd.h"
#include "etcd_fixture.h"
#include "test.h"

static etcd_fixture_t g_fx;

static void test_put_get(bagua__etcd_t *c) {
  bagua__etcd_kv_t kv, prev;
  int found = -1;
  int64_t rev1 = 0, rev2 = 0, read_rev = 0;

  ASSERT_OK(bagua__etcd_get(c, "/t/missing", &kv, &found, &read_rev));
  ASSERT_EQ(found, 0);
  ASSERT_TRUE(kv.key == NULL && kv.value == NULL && kv.mod_revision == 0);
  ASSERT_GT(read_rev, 0);

  ASSERT_OK(bagua__etcd_put(c, "/t/k", "v1", 2, 0, &rev1, &prev));
  ASSERT_TRUE(prev.key == NULL);
  ASSERT_GT(rev1, read_rev);
  ASSERT_OK(bagua__etcd_put(c, "/t/k", "value-2", 7, 0, &rev2, &prev));
  ASSERT_EQ(rev2, rev1 + 1);
  ASSERT_STREQ(prev.key, "/t/k");
  ASSERT_STREQ(prev.value, "v1");
  ASSERT_EQ(prev.mod_revision, rev1);
  bagua__etcd_kv_clear(&prev);

  ASSERT_OK(bagua__etcd_get(c, "/t/k", &kv, &found, &read_rev));
  ASSERT_EQ(found, 1);
  ASSERT_STREQ(kv.key, "/t/k");
  ASSERT_EQ(kv.key_len, 4);
  ASSERT_STREQ(kv.value, "value-2");
  ASSERT_EQ(kv.value_len, 7);
  ASSERT_EQ(kv.create_revision, rev1);
  ASSERT_EQ(kv.mod_revision, rev2);
  ASSERT_EQ(kv.version, 2);
  ASSERT_EQ(kv.lease, 0);
  ASSERT_EQ(read_rev, rev2);
  bagua__etcd_kv_clear(&kv);

  /* Binary values keep embedded NULs and high bytes; empty values read back as "". */
  const unsigned char bin[] = {0, 1, 0xff, 0, 'x', 0x80};
  ASSERT_OK(bagua__etcd_put(c, "/t/bin", bin, sizeof(bin), 0, NULL, NULL));
  ASSERT_OK(bagua__etcd_get(c, "/t/bin", &kv, &found, NULL));
  ASSERT_EQ(kv.value_len, sizeof(bin));
  ASSERT_TRUE(memcmp(kv.value, bin, sizeof(bin)) == 0);
  bagua__etcd_kv_clear(&kv);
  ASSERT_OK(bagua__etcd_put(c, "/t/empty", NULL, 0, 0, NULL, NULL));
  ASSERT_OK(bagua__etcd_get(c, "/t/empty", &kv, &found, NULL));
  ASSERT_EQ(found, 1);
  ASSERT_EQ(kv.value_len, 0);
  ASSERT_STREQ(kv.value, "");
  bagua__etcd_kv_clear(&kv);

  /* A value large enough that the reply arrives in many pieces. */
  size_t big_len = 1 << 20; /* etcd refuses requests over 1.5 MiB by default */
  char *big = malloc(big_len);
  ASSERT_TRUE(big != NULL);
  for (size_t i = 0; i < big_len; i++) big[i] = (char)('a' + i % 26);
  ASSERT_OK(bagua__etcd_put(c, "/t/big", big, big_len, 0, NULL, NULL));
  ASSERT_OK(bagua__etcd_get(c, "/t/big", &kv, &found, NULL));
  ASSERT_EQ(kv.value_len, big_len);
  ASSERT_TRUE(memcmp(kv.value, big, big_len) == 0);
  bagua__etcd_kv_clear(&kv);
  free(big);

  /* Empty keys are refused before any request. */
  ASSERT_STATUS(bagua__etcd_put(c, "", "x", 1, 0, NULL, NULL), BAGUA_ERR_INVALID_ARG);
  ASSERT_STATUS(bagua__etcd_get(c, "", &kv, &found, NULL), BAGUA_ERR_INVALID_ARG);
}

static void test_range_delete(bagua__etcd_t *c) {
  const char *keys[] = {"/r/a/2", "/r/a/1", "/r/a/3", "/r/ab", "/r/b", "/r/a/\xff"};
  for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
    ASSERT_OK(bagua__etcd_put(c, keys[i], keys[i], strlen(keys[i]), 0, NULL, NULL));

  bagua__etcd_kv_t *kvs = NULL;
  size_t n = 0;
  int64_t rev = 0;
  ASSERT_OK(bagua__etcd_range_prefix(c, "/r/a/", &kvs, &n, &rev));
  ASSERT_EQ(n, 4);
  ASSERT_STREQ(kvs[0].key, "/r/a/1");
  ASSERT_STREQ(kvs[1].key, "/r/a/2");
  ASSERT_STREQ(kvs[2].key, "/r/a/3");
  ASSERT_STREQ(kvs[3].key, "/r/a/\xff");
  ASSERT_STREQ(kvs[0].value, "/r/a/1");
  ASSERT_GT(rev, 0);
  bagua__etcd_kvs_free(kvs, n);

  /* A prefix ending in 0xff cannot be incremented in place. */
  ASSERT_OK(bagua__etcd_range_prefix(c, "/r/a/\xff", &kvs, &n, NULL));
  ASSERT_EQ(n, 1);
  bagua__etcd_kvs_free(kvs, n);

  ASSERT_OK(bagua__etcd_range_prefix(c, "/r/none/", &kvs, &n, NULL));
  ASSERT_EQ(n, 0);
  ASSERT_TRUE(kvs == NULL);

  /* The empty prefix is the whole key space. */
  ASSERT_OK(bagua__etcd_range_prefix(c, "", &kvs, &n, NULL));
  ASSERT_GE(n, 6);
  bagua__etcd_kvs_free(kvs, n);

  int64_t deleted = -1;
  ASSERT_OK(bagua__etcd_delete(c, "/r/b", &deleted));
  ASSERT_EQ(deleted, 1);
  ASSERT_OK(bagua__etcd_delete(c, "/r/b", &deleted));
  ASSERT_EQ(deleted, 0);
  ASSERT_OK(bagua__etcd_delete_prefix(c, "/r/a/", &deleted));
  ASSERT_EQ(deleted, 4);
  ASSERT_OK(bagua__etcd_range_prefix(c, "/r/", &kvs, &n, NULL));
  ASSERT_EQ(n, 1);
  ASSERT_STREQ(kvs[0].key, "/r/ab");
  bagua__etcd_kvs_free(kvs, n);
  ASSERT_STATUS(bagua__etcd_delete_prefix(c, "", &deleted), BAGUA_ERR_INVALID_ARG);
}

static void test_txn(bagua__etcd_t *c) {
  int ok = -1;
  int64_t rev = 0;
  bagua__etcd_kv_t cur;

  ASSERT_OK(bagua__etcd_create_if_absent(c, "/x/leader", "n1", 2, 0, &ok, &rev, &cur));
  ASSERT_EQ(ok, 1);
  ASSERT_STREQ(cur.value, "n1");
  ASSERT_EQ(cur.create_revision, rev);
  bagua__etcd_kv_clear(&cur);
  ASSERT_OK(bagua__etcd_create_if_absent(c, "/x/leader", "n2", 2, 0, &ok, NULL, &cur));
  ASSERT_EQ(ok, 0);
  ASSERT_STREQ(cur.value, "n1");
  int64_t seen = cur.mod_revision;
  bagua__etcd_kv_clear(&cur);

  /* Compare-and-swap on mod_revision: a stale revision loses and sees the winner. */
  ASSERT_OK(bagua__etcd_cas(c, "/x/leader", seen, "n3", 2, 0, &ok, &rev, NULL));
  ASSERT_EQ(ok, 1);
  ASSERT_GT(rev, seen);
  ASSERT_OK(bagua__etcd_cas(c, "/x/leader", seen, "n4", 2, 0, &ok, NULL, &cur));
  ASSERT_EQ(ok, 0);
  ASSERT_STREQ(cur.value, "n3");
  ASSERT_EQ(cur.mod_revision, rev);
  bagua__etcd_kv_clear(&cur);

  /* Expect 0 means "only if absent". */
  ASSERT_OK(bagua__etcd_cas(c, "/x/new", 0, "a", 1, 0, &ok, NULL, NULL));
  ASSERT_EQ(ok, 1);
  ASSERT_OK(bagua__etcd_cas(c, "/x/new", 0, "b", 1, 0, &ok, NULL, NULL));
  ASSERT_EQ(ok, 0);

  /* Compare-and-delete. */
  ASSERT_OK(bagua__etcd_cad(c, "/x/leader", seen, &ok));
  ASSERT_EQ(ok, 0);
  ASSERT_OK(bagua__etcd_cad(c, "/x/leader", rev, &ok));
  ASSERT_EQ(ok, 1);
  int found = 1;
  ASSERT_OK(bagua__etcd_get(c, "/x/leader", &cur, &found, NULL));
  ASSERT_EQ(found, 0);
}

/* ---- Create-if-absent race: several clients, one winner per key ---- */

#define RACERS 6
#define RACE_KEYS 25

typedef struct {
  int id;
  pthread_barrier_t *barrier;
  int wins[RACE_KEYS];
  char winner_seen[RACE_KEYS][24];
} racer_t;

static void *racer_main(void *arg) {
  racer_t *r = arg;
  bagua__etcd_t *c = NULL;
  ASSERT_OK(bagua__etcd_create(g_fx.endpoint, 5000, &c));
  char mine[24];
  snprintf(mine, sizeof(mine), "racer-%d", r->id);
  for (int k = 0; k < RACE_KEYS; k++) {
    char key[32];
    snprintf(key, sizeof(key), "/race/%d", k);
    pthread_barrier_wait(r->barrier);
    bagua__etcd_kv_t cur;
    ASSERT_OK(bagua__etcd_create_if_absent(c, key, mine, strlen(mine), 0, &r->wins[k], NULL, &cur));
    snprintf(r->winner_seen[k], sizeof(r->winner_seen[k]), "%s", cur.value);
    bagua__etcd_kv_clear(&cur);
  }
  bagua__etcd_destroy(c);
  return NULL;
}

static void test_race(void) {
  pthread_barrier_t barrier;
  pthread_barrier_init(&barrier, NULL, RACERS);
  racer_t racers[RACERS];
  pthread_t threads[RACERS];
  memset(racers, 0, sizeof(racers));
  for (int i = 0; i < RACERS; i++) {
    racers[i].id = i;
    racers[i].barrier = &barrier;
    ASSERT_EQ(pthread_create(&threads[i], NULL, racer_main, &racers[i]), 0);
  }
  for (int i = 0; i < RACERS; i++) pthread_join(threads[i], NULL);
  pthread_barrier_destroy(&barrier);
  for (int k = 0; k < RACE_KEYS; k++) {
    int winners = 0, who = -1;
    for (int i = 0; i < RACERS; i++)
      if (racers[i].wins[k]) winners++, who = i;
    if (winners != 1) TEST_FAIL("key %d: %d winners, expected exactly 1", k, winners);
    char want[24];
    snprintf(want, sizeof(want), "racer-%d", who);
    /* Every loser read the winner's value in the same transaction. */
    for (int i = 0; i < RACERS; i++) ASSERT_STREQ(racers[i].winner_seen[k], want);
  }
}

/* The same race between processes: each child connects to the parent's etcd by endpoint. */
#define PROCS 2
#define PROC_KEYS 30

static int proc_main(int id, int go_fd) {
  char go;
  if (read(go_fd, &go, 1) != 1) return 100;
  /* Only the owner may stop or restart the fixture. */
  if (etcd_fixture_stop(&g_fx) != -1 || etcd_fixture_restart(&g_fx) != -1) return 101;
  bagua__etcd_t *c = NULL;
  if (bagua__etcd_create(g_fx.endpoint, 5000, &c) != BAGUA_OK) return 102;
  char mine[24];
  snprintf(mine, sizeof(mine), "proc-%d", id);
  int wins = 0;
  for (int k = 0; k < PROC_KEYS; k++) {
    char key[32];
    snprintf(key, sizeof(key), "/prace/%d", k);
    int won = 0;
    bagua__etcd_kv_t cur;
    if (bagua__etcd_create_if_absent(c, key, mine, strlen(mine), 0, &won, NULL, &cur) != BAGUA_OK)
      return 103;
    /* The value read in the transaction agrees with the outcome. */
    if ((strcmp(cur.value, mine) == 0) != won) return 104;
    bagua__etcd_kv_clear(&cur);
    wins += won;
  }
  bagua__etcd_destroy(c);
  return wins;
}

static void test_process_race(bagua__etcd_t *c) {
  int go[2];
  ASSERT_EQ(pipe(go), 0);
  pid_t pids[PROCS];
  for (int i = 0; i < PROCS; i++) {
    fflush(NULL);
    pids[i] = fork();
    ASSERT_TRUE(pids[i] >= 0);
    if (pids[i] == 0) {
      close(go[1]);
      _exit(proc_main(i, go[0]));
    }
  }
  close(go[0]);
  /* Both children start their loops at the same moment. */
  ASSERT_EQ(write(go[1], "gg", PROCS), PROCS);
  close(go[1]);
  int total = 0;
  for (int i = 0; i < PROCS; i++) {
    int status = 0;
    ASSERT_EQ(waitpid(pids[i], &status, 0), pids[i]);
    ASSERT_TRUE(WIFEXITED(status));
    int wins = WEXITSTATUS(status);
    if (wins > PROC_KEYS) TEST_FAIL("child %d failed with code %d", i, wins);
    total += wins;
  }
  ASSERT_EQ(total, PROC_KEYS);
  bagua__etcd_kv_t *kvs = NULL;
  size_t n = 0;
  ASSERT_OK(bagua__etcd_range_prefix(c, "/prace/", &kvs, &n, NULL));
  ASSERT_EQ(n, PROC_KEYS);
  for (size_t i = 0; i < n; i++) ASSERT_EQ(kvs[i].version, 1);
  bagua__etcd_kvs_free(kvs, n);
}

/* Several ranges in one request, all at one revision: a key, a missing key, a prefix counted
 * only, [start, end), a prefix without values. Bad arguments are refused. */
static void test_read_ranges(bagua__etcd_t *c) {
  const char *keys[] = {"/m/a", "/m/b", "/m/c/1", "/m/c/2", "/m/d"};
  int64_t rev = 0, at = 0;
  for (size_t i = 0; i < 5; i++) ASSERT_OK(bagua__etcd_put(c, keys[i], "val", 3, 0, &rev, NULL));
  bagua__etcd_read_t rd[5] = {{.span = {"/m/a", NULL, 0}},
                              {.span = {"/m/x", NULL, 0}},
                              {.span = {"/m/c/", NULL, 1}, .count_only = 1},
                              {.span = {"/m/b", "/m/d", 0}},
                              {.span = {"/m/", NULL, 1}, .keys_only = 1}};
  ASSERT_OK(bagua__etcd_read_ranges(c, rd, 5, &at));
  ASSERT_EQ(at, rev);
  ASSERT_EQ(rd[0].n, 1);
  ASSERT_STREQ(rd[0].kvs[0].value, "val");
  ASSERT_EQ(rd[1].n, 0);
  ASSERT_EQ(rd[1].count, 0);
  ASSERT_EQ(rd[2].n, 0); /* counted, not sent */
  ASSERT_EQ(rd[2].count, 2);
  ASSERT_EQ(rd[3].n, 3); /* /m/b, /m/c/1, /m/c/2: the end is exclusive */
  ASSERT_STREQ(rd[3].kvs[0].key, "/m/b");
  ASSERT_STREQ(rd[3].kvs[2].key, "/m/c/2");
  ASSERT_EQ(rd[4].n, 5);
  ASSERT_EQ(rd[4].kvs[4].value_len, 0); /* keys only */
  ASSERT_GT(rd[4].kvs[4].mod_revision, 0);
  bagua__etcd_reads_clear(rd, 5);
  ASSERT_TRUE(rd[0].kvs == NULL && rd[4].n == 0);
  ASSERT_EQ(bagua__etcd_read_ranges(c, rd, 0, NULL), BAGUA_ERR_INVALID_ARG);
  bagua__etcd_read_t many[BAGUA_ETCD_READS_MAX + 1];
  memset(many, 0, sizeof(many));
  for (size_t i = 0; i < BAGUA_ETCD_READS_MAX + 1; i++) many[i].span.key = "/m/a";
  ASSERT_EQ(bagua__etcd_read_ranges(c, many, BAGUA_ETCD_READS_MAX + 1, NULL),
            BAGUA_ERR_INVALID_ARG);
  ASSERT_OK(bagua__etcd_read_ranges(c, many, BAGUA_ETCD_READS_MAX, NULL));
  ASSERT_EQ(many[BAGUA_ETCD_READS_MAX - 1].n, 1);
  bagua__etcd_reads_clear(many, BAGUA_ETCD_READS_MAX);
  bagua__etcd_read_t nokey = {.span = {"", NULL, 0}};
  ASSERT_EQ(bagua__etcd_read_ranges(c, &nokey, 1, NULL), BAGUA_ERR_INVALID_ARG);
}

/* Puts in batches of BAGUA_ETCD_READS_MAX; a batch with a key on a revoked lease is written key
 * by key, so only that key is left out. */
static void test_put_many(bagua__etcd_t *c) {
  enum { N = 300 };
  static char keys[N][32];
  bagua__etcd_put_t p[N];
  int64_t lease = 0, gone = 0;
  ASSERT_OK(bagua__etcd_lease_grant(c, 30, &lease, NULL));
  ASSERT_OK(bagua__etcd_lease_grant(c, 30, &gone, NULL));
  ASSERT_OK(bagua__etcd_lease_revoke(c, gone));
  for (int i = 0; i < N; i++) {
    snprintf(keys[i], sizeof(keys[i]), "/pm/%03d", i);
    p[i] = (bagua__etcd_put_t){keys[i], keys[i] + 4, 3, lease};
  }
  size_t written = 0;
  ASSERT_OK(bagua__etcd_put_many(c, p, N, &written));
  ASSERT_EQ(written, N);
  bagua__etcd_read_t rd = {.span = {"/pm/", NULL, 1}, .count_only = 1};
  ASSERT_OK(bagua__etcd_read_ranges(c, &rd, 1, NULL));
  ASSERT_EQ(rd.count, N);
  p[200].lease = gone;
  p[200].value = "new";
  p[201].value = "new";
  ASSERT_EQ(bagua__etcd_put_many(c, p, N, &written), BAGUA_ERR_ETCD);
  ASSERT_EQ(written, N - 1);
  bagua__etcd_kv_t kv;
  int found = 0;
  ASSERT_OK(bagua__etcd_get(c, "/pm/200", &kv, &found, NULL));
  ASSERT_STREQ(kv.value, "200"); /* left as it was */
  bagua__etcd_kv_clear(&kv);
  ASSERT_OK(bagua__etcd_get(c, "/pm/201", &kv, &found, NULL));
  ASSERT_STREQ(kv.value, "new");
  bagua__etcd_kv_clear(&kv);
  ASSERT_OK(bagua__etcd_delete_prefix(c, "/pm/", NULL));
}

static void test_endpoint_forms(void) {
  bagua__etcd_t *c = NULL;
  bagua__etcd_kv_t kv;
  int found = 0;
  /* "host:port" without a scheme. */
  ASSERT_OK(bagua__etcd_create(g_fx.host_port, 2000, &c));
  ASSERT_STREQ(bagua__etcd_endpoint(c), g_fx.endpoint);
  ASSERT_OK(bagua__etcd_put(c, "/e/1", "x", 1, 0, NULL, NULL));
  bagua__etcd_destroy(c);

  /* A list whose first endpoint refuses connections fails over to the live one. */
  int dead = etcd_fixture_free_port();
  char list[160];
  snprintf(list, sizeof(list), " 127.0.0.1:%d , %s/ ", dead, g_fx.endpoint);
  ASSERT_OK(bagua__etcd_create(list, 2000, &c));
  ASSERT_OK(bagua__etcd_get(c, "/e/1", &kv, &found, NULL));
  ASSERT_EQ(found, 1);
  bagua__etcd_kv_clear(&kv);
  ASSERT_STREQ(bagua__etcd_endpoint(c), g_fx.endpoint);
  bagua__etcd_destroy(c);

  ASSERT_STATUS(bagua__etcd_create(" , ", 1000, &c), BAGUA_ERR_INVALID_ARG);
  ASSERT_STATUS(bagua__etcd_create(g_fx.endpoint, 0, &c), BAGUA_ERR_INVALID_ARG);
  ASSERT_TRUE(c == NULL);
}

int main(void) {
  etcd_fixture_start(&g_fx);
  bagua__etcd_t *c = NULL;
  ASSERT_OK(bagua__etcd_create(g_fx.endpoint, 5000, &c));
  test_put_get(c);
  test_range_delete(c);
  test_txn(c);
  test_read_ranges(c);
  test_put_many(c);
  test_race();
  test_process_race(c);
  test_endpoint_forms();
  bagua__etcd_destroy(c);
  etcd_fixture_stop(&g_fx);
  printf("PASS test_etcd_kv\n");
  return 0;
}
