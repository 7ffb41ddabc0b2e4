/*
 * torchrun's multi-node command lines on bagua-launch, each node its own bagua-launch on this
 * machine, with nothing else started: the node at the endpoint's address hosts the job's etcd
 * (launcher/embedded.c), the other one joins it.
 *
 *   test_launch_torchrun MODE LAUNCHER AGENT
 *
 * Modes:
 *  - c10d: torchrun's c10d form (--rdzv_backend=c10d --rdzv_endpoint=127.0.0.1:PORT), two
 *    launches; both exit 0, the four ranks see one world of 4 and torchrun's --role, and no
 *    process or etcd directory is left;
 *  - static_joiner_first: torchrun's static form (--node_rank, --master_addr, --master_port);
 *    the launch that does not host starts first and waits for the etcd; ranks follow
 *    --node_rank;
 *  - no_host: a launch whose endpoint no node hosts ends with exit 3 after its rendezvous
 *    timeout, naming the endpoint, and starts nothing;
 *  - redirects: --redirects 0:3 keeps local rank 0's lines off the console, in its log file;
 *  - learner_unstarted: a member added on a node that cannot start it is removed after its start
 *    time, and the next node to join runs one in its place;
 *  - endpoint_unanswered: pytorch/examples' ddp/run_example.sh (one node, an endpoint, no
 *    backend) with nothing at the endpoint runs on a private etcd; two nodes still exit 3;
 *  - host_killed: three nodes; once the hosted etcd has three voting members, the launch that
 *    started it is SIGKILLed, and the two others form the next round and finish.
 *
 * AGENT is the agent target's path; an empty argument or a missing file skips the test (77).
 */
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "etcd_fixture.h"
#include "launch_util.h"
#include "test.h"

static const char *g_launcher;
static char g_dir[128];

typedef struct {
  char out[256], marker[128];
  pid_t pid;
} node_t;

/* A TCP port of 127.0.0.1 that was free a moment ago. */
static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof(sa);
  if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
      getsockname(fd, (struct sockaddr *)&sa, &len) != 0)
    TEST_FAIL("no free port");
  close(fd);
  return ntohs(sa.sin_port);
}

static void start(node_t *n, const char *name, char *const *args) {
  snprintf(n->out, sizeof(n->out), "%s/%s.out", g_dir, name);
  n->pid = lu_start_launcher(g_launcher, NULL, args, name, n->marker, sizeof(n->marker), NULL, 0,
                             n->out);
}

static int count(const char *path, const char *needle) {
  char *t = lu_read(path);
  int k = 0;
  for (char *p = t; p && (p = strstr(p, needle)); p++) k++;
  free(t);
  return k;
}

static void expect(int cond, const char *what, const node_t *a, const node_t *b) {
  if (cond) return;
  if (a) lu_dump(a->out);
  if (b) lu_dump(b->out);
  TEST_FAIL("%s", what);
}

/* Nothing of either launch is left: processes, or the hosted etcd's directory. */
static void assert_clean(const node_t *a, const node_t *b) {
  const node_t *n[2] = {a, b};
  for (int i = 0; i < 2; i++) {
    if (!n[i]) continue;
    char *out = lu_read(n[i]->out), dir[128];
    expect(lu_wait_no_marked(n[i]->marker, 20000), "processes of a launch are still alive", a, b);
    if (out && lu_find_etcd_dir(out, dir, sizeof(dir)))
      expect(lu_wait_gone(dir, 10000), "the hosted etcd's directory is still there", a, b);
    free(out);
  }
}

/* The four ranks' lines: one world of 4, two per node, with torchrun's --role. */
static void expect_world(const char *outf, const char *role, const node_t *a, const node_t *b) {
  for (int r = 0; r < 4; r++) {
    char want[96];
    snprintf(want, sizeof(want), "W %d/4 local %d/2 role %s", r, r % 2, role);
    if (count(outf, want) != 1) lu_dump(outf);
    expect(count(outf, want) == 1, want, a, b);
  }
}

static int mode_c10d(void) {
  char outf[256], prog[512], ep[64];
  snprintf(outf, sizeof(outf), "%s/w.txt", g_dir);
  snprintf(prog, sizeof(prog),
           "echo \"W $RANK/$WORLD_SIZE local $LOCAL_RANK/$LOCAL_WORLD_SIZE role $ROLE_NAME\" >> %s",
           outf);
  snprintf(ep, sizeof(ep), "--rdzv_endpoint=127.0.0.1:%d", free_port());
  node_t a, b;
  /* The tutorial's command, flag for flag (plus --role): each launch is its own node, as
   * torchrun's anonymous agents are, though both have this host's name. */
  start(&a, "a",
        (char *[]){"--nnodes=2", "--nproc_per_node=2", "--rdzv_id=456", "--rdzv_backend=c10d", ep,
                   "--role", "trainer", "--", "sh", "-c", prog, NULL});
  start(&b, "b",
        (char *[]){"--nnodes=2", "--nproc_per_node=2", "--rdzv_id=456", "--rdzv_backend=c10d", ep,
                   "--role", "trainer", "--", "sh", "-c", prog, NULL});
  int ra = lu_wait(a.pid, 60000), rb = lu_wait(b.pid, 60000);
  expect(ra == 0 && rb == 0, "both launches exit 0", &a, &b);
  expect_world(outf, "trainer", &a, &b);
  expect(count(a.out, "hosting the job's etcd") + count(b.out, "hosting the job's etcd") == 1,
         "exactly one launch hosts the etcd", &a, &b);
  assert_clean(&a, &b);
  return 0;
}

static int mode_static_joiner_first(void) {
  char outf[256], prog[1024], prog_b[1024], port[16], group_a[256], group_b[256];
  snprintf(outf, sizeof(outf), "%s/w.txt", g_dir);
  snprintf(group_a, sizeof(group_a), "%s/group.a", g_dir);
  snprintf(group_b, sizeof(group_b), "%s/group.b", g_dir);
  /* Each launch's workers also leave their GROUP_RANK in a file of that launch. */
  snprintf(
      prog, sizeof(prog),
      "echo \"W $RANK/$WORLD_SIZE local $LOCAL_RANK/$LOCAL_WORLD_SIZE role $ROLE_NAME\" >> %s; "
      "echo \"G $GROUP_RANK R $RANK\" >> %s",
      outf, group_a);
  snprintf(
      prog_b, sizeof(prog_b),
      "echo \"W $RANK/$WORLD_SIZE local $LOCAL_RANK/$LOCAL_WORLD_SIZE role $ROLE_NAME\" >> %s; "
      "echo \"G $GROUP_RANK R $RANK\" >> %s",
      outf, group_b);
  snprintf(port, sizeof(port), "%d", free_port());
  node_t a, b;
  /* Each node says its address (torchrun's --local_addr): only the node whose address the
   * master's is hosts, so b, started first, waits for a. */
  start(&b, "b",
        (char *[]){"--nnodes", "2", "--nproc_per_node", "2", "--node_rank", "1", "--master_addr",
                   "127.0.0.2", "--master_port", port, "--local_addr", "127.0.0.3", "--", "sh",
                   "-c", prog_b, NULL});
  expect(lu_wait_file(b.out, 10000), "b started", &b, NULL);
  usleep(1500 * 1000);
  start(&a, "a",
        (char *[]){"--nnodes", "2", "--nproc_per_node", "2", "--node_rank", "0", "--master_addr",
                   "127.0.0.2", "--master_port", port, "--local_addr", "127.0.0.2", "--", "sh",
                   "-c", prog, NULL});
  int rb = lu_wait(b.pid, 60000), ra = lu_wait(a.pid, 60000);
  expect(ra == 0 && rb == 0, "both launches exit 0", &a, &b);
  expect_world(outf, "default", &a, &b);
  expect(count(b.out, "waiting for the job's etcd at 127.0.0.2:") == 1, "b waited for a", &a, &b);
  expect(count(a.out, "hosting the job's etcd at 127.0.0.2:") == 1, "a hosted it", &a, &b);
  /* torchrun's static ranks: node rank 0 (a) holds ranks 0 and 1, however the two registered
   * (b, started first, registers as soon as a's etcd answers). */
  if (count(group_a, "G 0 R 0") != 1 || count(group_a, "G 0 R 1") != 1) lu_dump(group_a);
  expect(count(group_a, "G 0 R 0") == 1 && count(group_a, "G 0 R 1") == 1,
         "node rank 0's workers are group 0, ranks 0 and 1", &a, &b);
  if (count(group_b, "G 1 R 2") != 1 || count(group_b, "G 1 R 3") != 1) lu_dump(group_b);
  expect(count(group_b, "G 1 R 2") == 1 && count(group_b, "G 1 R 3") == 1,
         "node rank 1's workers are group 1, ranks 2 and 3", &a, &b);
  assert_clean(&a, &b);
  return 0;
}

static int mode_no_host(void) {
  char ep[64];
  /* A port held open here (listening, never answering) keeps this node from hosting, and
   * nothing answers as etcd there. */
  int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof(sa);
  if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(fd, 1) != 0 ||
      getsockname(fd, (struct sockaddr *)&sa, &len) != 0)
    TEST_FAIL("cannot hold a port");
  snprintf(ep, sizeof(ep), "127.0.0.1:%d", ntohs(sa.sin_port));
  node_t b;
  char marker_file[256];
  snprintf(marker_file, sizeof(marker_file), "%s/ran", g_dir);
  char prog[300];
  snprintf(prog, sizeof(prog), "touch %s", marker_file);
  long long t0 = lu_now_ms();
  start(&b, "b",
        (char *[]){"--nnodes", "2", "--rdzv_backend", "c10d", "--rdzv_endpoint", ep, "--rdzv_conf",
                   "join_timeout=2", "--", "sh", "-c", prog, NULL});
  int rb = lu_wait(b.pid, 30000);
  long long took = lu_now_ms() - t0;
  close(fd);
  printf("gave up after %lld ms\n", took);
  expect(rb == 3, "exit 3 (no rendezvous)", &b, NULL);
  expect(count(b.out, "no etcd answered at") == 1, "the message names the endpoint", &b, NULL);
  expect(took < 20000, "it gave up after its rendezvous timeout", &b, NULL);
  expect(access(marker_file, F_OK) != 0, "no worker ran", &b, NULL);
  assert_clean(&b, NULL);
  return 0;
}

/*
 * pytorch/examples' ddp/run_example.sh: one node, an endpoint and no backend (torchrun's default,
 * static, hosts its store there). Nothing answers at the endpoint: the one-node job runs on a
 * private etcd and says so; the same command with two nodes still fails (an etcd user's
 * multi-node job must not silently split into private ones).
 */
static int mode_endpoint_unanswered(void) {
  char outf[256], prog[512], ep[64];
  snprintf(outf, sizeof(outf), "%s/w.txt", g_dir);
  snprintf(prog, sizeof(prog), "echo \"W $RANK/$WORLD_SIZE local $LOCAL_RANK\" >> %s", outf);
  snprintf(ep, sizeof(ep), "--rdzv_endpoint=127.0.0.1:%d", free_port());
  node_t a, b;
  start(&a, "a", (char *[]){"--nnodes=1", "--nproc_per_node=2", ep, "--", "sh", "-c", prog, NULL});
  int ra = lu_wait(a.pid, 60000);
  expect(ra == 0, "the one-node launch exits 0", &a, NULL);
  for (int r = 0; r < 2; r++) {
    char want[64];
    snprintf(want, sizeof(want), "W %d/2 local %d", r, r);
    expect(count(outf, want) == 1, want, &a, NULL);
  }
  expect(count(a.out, "no etcd answers at 127.0.0.1:") == 1, "it says why a private etcd runs", &a,
         NULL);
  assert_clean(&a, NULL);
  start(&b, "b", (char *[]){"--nnodes=2", "--nproc_per_node=2", ep, "--", "sh", "-c", prog, NULL});
  int rb = lu_wait(b.pid, 60000);
  expect(rb == 3, "the two-node launch exits 3", &b, NULL);
  expect(count(b.out, "cannot reach the rendezvous endpoint") == 1, "it names the endpoint", &b,
         NULL);
  expect(count(outf, "W ") == 2, "no worker of the two-node launch ran", &b, NULL);
  assert_clean(&b, NULL);
  return 0;
}

/* Waits until `path` contains `needle`; 0 on timeout. */
static int wait_text(const char *path, const char *needle, int timeout_ms) {
  long long end = lu_now_ms() + timeout_ms;
  while (lu_now_ms() < end) {
    if (count(path, needle) > 0) return 1;
    usleep(100 * 1000);
  }
  return 0;
}

/*
 * Three nodes on the hosted rendezvous; once its etcd has three voting members, the launch
 * that hosts it is SIGKILLed (its etcd and agent go with it): the other two form the next
 * round on the members they run and finish with exit 0.
 */
static int mode_host_killed(void) {
  char outf[256], prog[1024], ep[64], addr[3][16];
  snprintf(outf, sizeof(outf), "%s/w.txt", g_dir);
  /* The workers wait for the test's go, given once the survivors have formed their round of
   * two: before that no round may end the job (the third member comes 5 s or more after the
   * second, as etcd wants every member connected that long before it adds one). */
  char go[256];
  snprintf(go, sizeof(go), "%s/go", g_dir);
  snprintf(prog, sizeof(prog),
           "while [ ! -e %s ]; do sleep 0.1; done; echo \"W $RANK/$WORLD_SIZE\" >> %s", go, outf);
  snprintf(ep, sizeof(ep), "--rdzv_endpoint=127.0.0.2:%d", free_port());
  node_t n[3];
  const char *names[3] = {"h", "j1", "j2"};
  for (int i = 0; i < 3; i++) {
    snprintf(addr[i], sizeof(addr[i]), "127.0.0.%d", i + 2);
    start(&n[i], names[i],
          (char *[]){"--nnodes=2:3", "--nproc_per_node=1", "--rdzv_id=hk", "--rdzv_backend=c10d",
                     ep, "--local_addr", addr[i], "--lease-ttl", "3", "--rdzv_conf",
                     "last_call_timeout=0.5", "--", "sh", "-c", prog, NULL});
    if (i == 0)
      expect(wait_text(n[0].out, "hosting the job's etcd", 20000), "h hosts", &n[0], NULL);
  }
  expect(wait_text(n[0].out, "3 voting members", 30000), "the etcd grew to three voters", &n[0],
         &n[1]);
  expect(wait_text(n[2].out, "of 3,", 30000), "a round of three nodes", &n[0], &n[2]);
  int rounds_of_two = count(n[1].out, "of 2,");
  kill(n[0].pid, SIGKILL);
  lu_wait(n[0].pid, 10000);
  long long end = lu_now_ms() + 60000;
  while (count(n[1].out, "of 2,") <= rounds_of_two && lu_now_ms() < end) usleep(100 * 1000);
  expect(count(n[1].out, "of 2,") > rounds_of_two, "the survivors formed a round of two", &n[1],
         &n[2]);
  FILE *f = fopen(go, "w");
  if (f) fclose(f);
  int r1 = lu_wait(n[1].pid, 90000), r2 = lu_wait(n[2].pid, 90000);
  expect(r1 == 0 && r2 == 0, "both survivors exit 0", &n[1], &n[2]);
  if (count(outf, "W 0/2") != 1 || count(outf, "W 1/2") != 1) lu_dump(outf);
  expect(count(outf, "W 0/2") == 1 && count(outf, "W 1/2") == 1,
         "the survivors finished a round of two", &n[1], &n[2]);
  assert_clean(&n[0], &n[1]);
  assert_clean(&n[2], NULL);
  return 0;
}

/*
 * A member that is added but never started (its node's etcd cannot start: --etcd-bin
 * /bin/false) is removed by the host after its start time, its slot freed, and the next node
 * that joins runs a member in its place; the job itself is untouched.
 */
static int mode_learner_unstarted(void) {
  char outf[256], prog[1024], ep[64], go[256];
  snprintf(outf, sizeof(outf), "%s/w.txt", g_dir);
  snprintf(go, sizeof(go), "%s/go", g_dir);
  snprintf(prog, sizeof(prog),
           "while [ ! -e %s ]; do sleep 0.1; done; echo \"W $RANK/$WORLD_SIZE\" >> %s", go, outf);
  snprintf(ep, sizeof(ep), "--rdzv_endpoint=127.0.0.2:%d", free_port());
  node_t n[3];
  const char *names[3] = {"h", "j1", "j2"},
             *bins[3] = {ETCD_FIXTURE_BIN, "/bin/false", ETCD_FIXTURE_BIN};
  for (int i = 0; i < 3; i++) {
    char addr[16];
    snprintf(addr, sizeof(addr), "127.0.0.%d", i + 2);
    start(&n[i], names[i],
          (char *[]){"--nnodes=2:3", "--nproc_per_node=1", "--rdzv_id=lu", "--rdzv_backend=c10d",
                     ep, "--local_addr", addr, "--etcd-bin", (char *)bins[i], "--rdzv_conf",
                     "last_call_timeout=0.5", "--", "sh", "-c", prog, NULL});
    if (i == 0)
      expect(wait_text(n[0].out, "hosting the job's etcd", 20000), "h hosts", &n[0], NULL);
    if (i == 1) {
      expect(wait_text(n[1].out, "did not start here", 20000), "j1's member cannot start", &n[0],
             &n[1]);
      expect(wait_text(n[0].out, "was not started within", 30000), "h removes j1's member", &n[0],
             &n[1]);
    }
  }
  expect(wait_text(n[2].out, "running the job's etcd member-3 here", 30000),
         "j2 runs a member in its place", &n[0], &n[2]);
  expect(wait_text(n[2].out, "of 3,", 30000), "a round of three nodes", &n[0], &n[2]);
  FILE *f = fopen(go, "w");
  if (f) fclose(f);
  int r[3];
  for (int i = 0; i < 3; i++) r[i] = lu_wait(n[i].pid, 60000);
  expect(r[0] == 0 && r[1] == 0 && r[2] == 0, "every launch exits 0", &n[0], &n[1]);
  expect(count(outf, "W ") == 3, "three workers ran", &n[0], &n[2]);
  assert_clean(&n[0], &n[1]);
  assert_clean(&n[2], NULL);
  return 0;
}

/* torchrun's --redirects: local rank 0's streams reach its log file only, rank 1's the console
 * as well (--redirects 0:3); the files hold every line. */
static int mode_redirects(void) {
  char logdir[256], cmd[512];
  snprintf(logdir, sizeof(logdir), "%s/logs", g_dir);
  node_t a;
  start(&a, "a",
        (char *[]){"--nproc_per_node=2", "--max_restarts=0", "-r", "0:3", "--log_dir", logdir,
                   "--node-id", "rd", "--", "sh", "-c",
                   "echo OUT-$LOCAL_RANK; echo ERR-$LOCAL_RANK >&2", NULL});
  expect(lu_wait(a.pid, 40000) == 0, "exit 0", &a, NULL);
  expect(count(a.out, "OUT-0") == 0 && count(a.out, "ERR-0") == 0,
         "local rank 0's lines do not reach the console", &a, NULL);
  expect(count(a.out, "OUT-1") == 1 && count(a.out, "ERR-1") == 1, "local rank 1's lines do", &a,
         NULL);
  snprintf(cmd, sizeof(cmd), "%s/rd.0.log", logdir);
  expect(count(cmd, "OUT-0") == 1 && count(cmd, "ERR-0") == 1, "rank 0's file has both lines", &a,
         NULL);
  snprintf(cmd, sizeof(cmd), "%s/rd.1.log", logdir);
  expect(count(cmd, "OUT-1") == 1 && count(cmd, "ERR-1") == 1, "rank 1's file has both lines", &a,
         NULL);
  assert_clean(&a, NULL);
  return 0;
}

int main(int argc, char **argv) {
  unsetenv("SLURM_JOB_ID");
  unsetenv("SLURM_JOB_NODELIST");
  if (argc < 4) TEST_FAIL("usage: %s MODE LAUNCHER AGENT", argv[0]);
  g_launcher = argv[2];
  if (!argv[3][0] || access(argv[3], X_OK) != 0)
    TEST_SKIP("bagua-agent is not built yet (agent target missing); these tests need it");
  if (!etcd_fixture_available())
    TEST_SKIP("%s not found; install the Debian package etcd-server", ETCD_FIXTURE_BIN);
  lu_mkdtemp(g_dir, sizeof(g_dir));
  int rc;
  if (strcmp(argv[1], "c10d") == 0)
    rc = mode_c10d();
  else if (strcmp(argv[1], "static_joiner_first") == 0)
    rc = mode_static_joiner_first();
  else if (strcmp(argv[1], "no_host") == 0)
    rc = mode_no_host();
  else if (strcmp(argv[1], "host_killed") == 0)
    rc = mode_host_killed();
  else if (strcmp(argv[1], "redirects") == 0)
    rc = mode_redirects();
  else if (strcmp(argv[1], "learner_unstarted") == 0)
    rc = mode_learner_unstarted();
  else if (strcmp(argv[1], "endpoint_unanswered") == 0)
    rc = mode_endpoint_unanswered();
  else
    TEST_FAIL("unknown mode %s", argv[1]);
  lu_rmtree(g_dir);
  return rc;
}
