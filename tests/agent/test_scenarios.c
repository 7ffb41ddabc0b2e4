/*
 * Elastic training scenarios: examples/fashion_mnist --elastic trained by real
 * bagua-agent processes (--elastic-mode in-process, one worker per agent, several agents on
 * this host told apart by --node-id) against a real etcd. Nodes join, are SIGKILLed (the agent
 * and its worker together, as when a machine dies), are frozen with SIGSTOP for longer than the
 * lease TTL, or fall below MIN. `test_scenarios NAME` runs one scenario; ctest registers each
 * as scenario_<name>.
 *
 * After each run (belowmin aside) the test checks what the trainer printed: every surviving
 * agent exits 0 (the killed one by its signal); every rank of the last world prints a final
 * line with the same step and samples_seen (and, for the algorithms that keep replicas equal,
 * the same params_crc); every epoch line says "duplicates 0" and misses at most world - 1
 * samples; the epochs' processed counts add up to samples_seen; the final test accuracy is at
 * least a threshold measured on this workload.
 *
 * Recovery figures are printed as "recovery_ms=..." lines: for a kill, from the kill (CLOCK_
 * MONOTONIC, etcd_fixture_now_ms) to rank 0's first completed step of the round that follows
 * ("round N first_step_mono_ms T", the same clock); for a join, from the newcomer's
 * registration in etcd to rank 0's first step of the first round that includes it.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "test.h"

#define LEASE_TTL_MS 2000

#define DATASET "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"

#define MAXN 4

/* Final test accuracy every surviving rank must reach. Measured on these workloads (12000
 * training and 1000 test examples, 4 epochs; 6 for sigstop_node) over 13 runs of each
 * scenario (ASan builds included): gradient_allreduce 0.845-0.854, bytegrad 0.851-0.860,
 * qadam 0.846-0.859, low_precision_decentralized 0.847-0.862, async 0.803-0.867 (its lowest:
 * the replica of the node that rejoined late). The margin covers where a world change lands. */
#define ACC_MIN 0.75

/* ---------------------------------------------------------------------------------------- */
/* Output parsing                                                                            */

typedef struct {
  int epoch, epochs, world;
  long long step, seen, processed, total, missed, dups;
  double acc;
} epoch_line_t;

typedef struct {
  long long round, t;
} first_step_t;

typedef struct {
  long long round, ms;
  int world, failed;
} round_line_t;

typedef struct {
  int agent, rank;
  long long step, seen;
  unsigned crc;
  double acc;
} final_t;

#define MAXLINES 256
typedef struct {
  epoch_line_t ep[MAXLINES];
  int nep;
  first_step_t fs[MAXLINES];
  int nfs;
  round_line_t rl[MAXLINES];
  int nrl;
  final_t fin[MAXN * 4];
  int nfin;
  int left[MAXN];   /* "left the job" lines per agent */
  int starts[MAXN]; /* rank 0's start lines ("fashion_mnist: elastic, round ...") per agent */
  int errors[MAXN]; /* "fashion_mnist: " error lines on stderr per agent */
} results_t;

/* Parses one agent's output: lines are "[node/rank] text". */
static void parse_agent(results_t *r, int agent, const char *out_path, const char *err_path) {
  char *buf = h_slurp(out_path);
  for (char *line = buf; line && *line;) {
    char *nl = strchr(line, '\n');
    if (nl) *nl = '\0';
    const char *t = line;
    if (*t == '[') {
      const char *e = strstr(t, "] ");
      if (e) t = e + 2;
    }
    epoch_line_t ep;
    first_step_t fs;
    round_line_t rl;
    final_t fin;
    if (sscanf(t,
               "epoch %d/%d done: step %lld world %d samples_seen %lld test_acc %lf coverage "
               "processed %lld of %lld missed %lld duplicates %lld",
               &ep.epoch, &ep.epochs, &ep.step, &ep.world, &ep.seen, &ep.acc, &ep.processed,
               &ep.total, &ep.missed, &ep.dups) == 10) {
      if (r->nep < MAXLINES) r->ep[r->nep++] = ep;
    } else if (sscanf(t, "round %lld first_step_mono_ms %lld", &fs.round, &fs.t) == 2) {
      if (r->nfs < MAXLINES) r->fs[r->nfs++] = fs;
    } else if (sscanf(t, "round %lld world %d recovery_ms %lld", &rl.round, &rl.world, &rl.ms) ==
               3) {
      rl.failed = strstr(t, "(after a failed step)") != NULL;
      if (r->nrl < MAXLINES) r->rl[r->nrl++] = rl;
    } else if (sscanf(t, "final rank=%d step=%lld params_crc=%x test_acc=%lf samples_seen=%lld",
                      &fin.rank, &fin.step, &fin.crc, &fin.acc, &fin.seen) == 5) {
      fin.agent = agent;
      if (r->nfin < MAXN * 4) r->fin[r->nfin++] = fin;
    } else if (strstr(t, "left the job")) {
      r->left[agent]++;
    } else if (strncmp(t, "fashion_mnist: elastic, round ", 30) == 0) {
      r->starts[agent]++;
    }
    line = nl ? nl + 1 : NULL;
  }
  free(buf);
  buf = h_slurp(err_path);
  for (const char *p = buf; (p = strstr(p, "fashion_mnist: ")) != NULL; p++) r->errors[agent]++;
  free(buf);
}

/* ---------------------------------------------------------------------------------------- */
/* The scenario fixture                                                                      */

typedef struct {
  long long round;
  int nmembers;
  char members[MAXN][BAGUA_AGENT_ID_MAX];
  char leader[BAGUA_AGENT_ID_MAX];
  long long seen_ms; /* when this test first saw it */
} seen_round_t;

typedef struct {
  harness_t h;
  const char *algorithm;
  int epochs, limit_train, limit_test;
  char epochs_s[16], train_s[16], test_s[16];
  const char *args[32];
  const char *cmd[16];
  agent_proc_t ap[MAXN];
  const char *nodes[MAXN];
  int n; /* agents spawned */
  seen_round_t rounds[64];
  int nrounds;
  results_t res;
} sc_t;

static sc_t S; /* large: static */

static void sc_init(sc_t *s, const char *job, const char *algorithm, const char *nnodes, int epochs,
                    int limit_train, int limit_test, const char *rdzv_timeout) {
#ifndef FM_BIN
  (void)s, (void)job, (void)algorithm, (void)nnodes, (void)epochs, (void)limit_train,
      (void)limit_test, (void)rdzv_timeout;
  TEST_SKIP("examples/fashion_mnist is not built (zlib missing)");
#else
  if (access(DATASET, R_OK) != 0) TEST_SKIP("Fashion-MNIST not found (%s)", DATASET);
  memset(s, 0, sizeof(*s));
  h_init(&s->h, job, 1);
  s->algorithm = algorithm;
  s->epochs = epochs;
  s->limit_train = limit_train;
  s->limit_test = limit_test;
  snprintf(s->epochs_s, sizeof(s->epochs_s), "%d", epochs);
  snprintf(s->train_s, sizeof(s->train_s), "%d", limit_train);
  snprintf(s->test_s, sizeof(s->test_s), "%d", limit_test);
  int n = 0;
  const char *fixed[] = {"--nnodes", nnodes,           "--nproc-per-node", "1",  "--max-restarts",
                         "0",        "--elastic-mode", "in-process",       FAST, NULL};
  for (int i = 0; fixed[i]; i++) s->args[n++] = fixed[i];
  if (rdzv_timeout) {
    s->args[n++] = "--rdzv-timeout";
    s->args[n++] = rdzv_timeout;
  }
  s->args[n] = NULL;
  n = 0;
  s->cmd[n++] = FM_BIN;
  s->cmd[n++] = "--elastic";
  s->cmd[n++] = "--algorithm";
  s->cmd[n++] = algorithm;
  s->cmd[n++] = "--epochs";
  s->cmd[n++] = s->epochs_s;
  s->cmd[n++] = "--limit-train";
  s->cmd[n++] = s->train_s;
  s->cmd[n++] = "--limit-test";
  s->cmd[n++] = s->test_s;
  if (strcmp(algorithm, "qadam") == 0) {
    /* Frozen-variance Adam sits near its divergence edge on this MLP at the example's 3e-4
     * (docs/algorithms.md: it diverges at 1e-3): in 1 of 14 runs (a loaded CI run) the survivors
     * of a world of 2 diverged in epoch 3 (test_acc 0.098), which says nothing about the
     * recovery this scenario tests. 2e-4 keeps a margin and still trains past ACC_MIN. */
    s->cmd[n++] = "--lr";
    s->cmd[n++] = "0.0002";
  }
  s->cmd[n] = NULL;
#endif
}

/* Records the job's round key when it changed since the last look. */
static void sc_poll(sc_t *s) {
  bagua__rdzv_round_t r;
  if (h_round(&s->h, &r) != 0) return;
  if (s->nrounds == 0 || s->rounds[s->nrounds - 1].round != r.round) {
    if (s->nrounds < 64) {
      seen_round_t *x = &s->rounds[s->nrounds++];
      x->round = r.round;
      x->nmembers = r.nmembers;
      for (int i = 0; i < r.nmembers && i < MAXN; i++)
        snprintf(x->members[i], sizeof(x->members[i]), "%s", r.members[i].id);
      snprintf(x->leader, sizeof(x->leader), "%s", r.leader);
      x->seen_ms = etcd_fixture_now_ms();
    }
  }
  bagua__rdzv_round_clear(&r);
}

static const seen_round_t *sc_last_round(sc_t *s) {
  return s->nrounds ? &s->rounds[s->nrounds - 1] : NULL;
}

static int round_has(const seen_round_t *r, const char *node) {
  for (int i = 0; i < r->nmembers && i < MAXN; i++)
    if (strcmp(r->members[i], node) == 0) return 1;
  return 0;
}

/* The first round seen that includes every node of `nodes` (n of them) and is at least
 * `from`; NULL when none. */
static const seen_round_t *first_round_with(sc_t *s, long long from, const char *const *nodes,
                                            int n) {
  for (int i = 0; i < s->nrounds; i++) {
    if (s->rounds[i].round < from) continue;
    int all = 1;
    for (int k = 0; k < n; k++) all &= round_has(&s->rounds[i], nodes[k]);
    if (all) return &s->rounds[i];
  }
  return NULL;
}

static void sc_fail(sc_t *s, const char *what) {
  h_dump(s->ap, s->n);
  TEST_FAIL("%s", what);
}

static void sc_spawn(sc_t *s, const char *node) {
  if (s->n >= MAXN) TEST_FAIL("too many agents");
  s->nodes[s->n] = node;
  h_spawn_cmd(&s->h, &s->ap[s->n], node, NULL, s->args, s->cmd);
  s->n++;
}

/* Registration of `node` seen in etcd: returns the time it was seen. */
static long long sc_wait_registered(sc_t *s, const char *node) {
  h_wait_registered(&s->h, node, 10000);
  return etcd_fixture_now_ms();
}

/* The node id held in the job's leader key (into buf; "" when none). */
static const char *leader_of(sc_t *s, char *buf, size_t len) {
  char key[256];
  snprintf(key, sizeof(key), "/bagua/%.63s/leader", s->h.job);
  bagua__etcd_kv_t kv;
  int found = 0;
  buf[0] = '\0';
  if (bagua__etcd_get(s->h.c, key, &kv, &found, NULL) == BAGUA_OK && found) {
    snprintf(buf, len, "%s", kv.value);
    bagua__etcd_kv_clear(&kv);
  }
  return buf;
}

/* Re-reads every agent's output. */
static results_t *sc_parse(sc_t *s) {
  memset(&s->res, 0, sizeof(s->res));
  for (int i = 0; i < s->n; i++) parse_agent(&s->res, i, s->ap[i].out_path, s->ap[i].err_path);
  return &s->res;
}

/* 1 when rank 0 trains in round `round` or a later one: it printed the start line of round 1,
 * or a first step of a round >= `round`. */
static int rank0_trains_in(sc_t *s, long long round) {
  results_t *r = sc_parse(s);
  for (int i = 0; i < r->nfs; i++)
    if (r->fs[i].round >= round) return 1;
  if (round <= 1)
    for (int i = 0; i < s->n; i++)
      if (r->starts[i]) return 1;
  return 0;
}

static void sc_sleep(sc_t *s, int ms) {
  long long until = etcd_fixture_now_ms() + ms;
  while (etcd_fixture_now_ms() < until) {
    sc_poll(s);
    usleep(10000);
  }
}

/* Waits (polling the round key) until a round with `nmembers` members, including every node in
 * `with` (NULL-terminated, may be NULL) and none in `without`, is published and rank 0 has
 * completed a step in it (or started round 1). Returns that round. */
static long long sc_wait_training(sc_t *s, int nmembers, const char *const *with,
                                  const char *const *without, int timeout_ms) {
  long long deadline = etcd_fixture_now_ms() + timeout_ms;
  for (;;) {
    sc_poll(s);
    const seen_round_t *r = sc_last_round(s);
    int ok = r && r->nmembers == nmembers;
    for (int i = 0; ok && with && with[i]; i++) ok = round_has(r, with[i]);
    for (int i = 0; ok && without && without[i]; i++) ok = !round_has(r, without[i]);
    if (ok && rank0_trains_in(s, r->round)) return r->round;
    for (int i = 0; i < s->n; i++)
      if (h_poll_exit(&s->ap[i])) {
        char msg[256];
        snprintf(msg, sizeof(msg), "agent %s exited %d while waiting for a round of %d",
                 s->nodes[i], s->ap[i].code, nmembers);
        sc_fail(s, msg);
      }
    if (etcd_fixture_now_ms() > deadline) {
      char msg[256];
      snprintf(msg, sizeof(msg), "no round of %d members with rank 0 training within %d ms",
               nmembers, timeout_ms);
      sc_fail(s, msg);
    }
    usleep(10000);
  }
}

/* Waits for every agent not yet exited; each must exit with want[i] (-1: any). */
static void sc_wait_all(sc_t *s, const int *want, int timeout_ms) {
  long long deadline = etcd_fixture_now_ms() + timeout_ms;
  for (;;) {
    sc_poll(s);
    int running = 0;
    for (int i = 0; i < s->n; i++) running += !h_poll_exit(&s->ap[i]);
    if (!running) break;
    if (etcd_fixture_now_ms() > deadline) {
      for (int i = 0; i < s->n; i++)
        if (!s->ap[i].exited) fprintf(stderr, "agent %s still running\n", s->nodes[i]);
      sc_fail(s, "agents did not exit in time");
    }
    usleep(10000);
  }
  for (int i = 0; i < s->n; i++)
    if (want[i] >= 0 && s->ap[i].code != want[i]) {
      char msg[256];
      snprintf(msg, sizeof(msg), "agent %s exited %d, expected %d", s->nodes[i], s->ap[i].code,
               want[i]);
      sc_fail(s, msg);
    }
}

/* The single worker of agent i (fails when it has none or several). */
static pid_t sc_worker(sc_t *s, int i) {
  pid_t kids[8];
  int n = h_children(s->ap[i].pid, kids, 8);
  if (n != 1) {
    char msg[128];
    snprintf(msg, sizeof(msg), "agent %s has %d worker processes, expected 1", s->nodes[i], n);
    sc_fail(s, msg);
  }
  return kids[0];
}

static void wait_pid_gone(sc_t *s, pid_t pid, int timeout_ms, const char *what) {
  long long d = etcd_fixture_now_ms() + timeout_ms;
  while (h_pid_alive(pid)) {
    if (etcd_fixture_now_ms() > d) {
      char msg[256];
      snprintf(msg, sizeof(msg), "%s (pid %d) still alive after %d ms", what, (int)pid, timeout_ms);
      sc_fail(s, msg);
    }
    usleep(5000);
  }
}

/* A node's death: SIGKILL to its agent and its worker at once. Returns the kill time. */
static long long sc_kill_node(sc_t *s, int i) {
  pid_t w = sc_worker(s, i);
  long long t = etcd_fixture_now_ms();
  h_kill(&s->ap[i], SIGKILL);
  kill(w, SIGKILL);
  ASSERT_EQ(h_wait_exit(&s->ap[i], 5000), 128 + SIGKILL);
  wait_pid_gone(s, w, 2000, "the killed node's worker");
  return t;
}

/* ---------------------------------------------------------------------------------------- */
/* Checks                                                                                    */

/*
 * The training outcome: one final line from each agent in `finals` (a mask), none from the
 * others; their ranks are 0..W-1; equal step and samples_seen, equal params_crc when
 * `same_params`; accuracy >= ACC_MIN on every rank; every epoch reported, without duplicates,
 * missing at most world - 1 samples, and the epochs' processed counts add up to samples_seen.
 */
static void sc_check_training(sc_t *s, unsigned finals, int same_params) {
  results_t *r = sc_parse(s);
  char msg[512];
  int nexp = 0;
  for (int i = 0; i < s->n; i++) {
    int k = 0;
    for (int j = 0; j < r->nfin; j++) k += r->fin[j].agent == i;
    int want = (finals >> i) & 1;
    nexp += want;
    if (k != want) {
      snprintf(msg, sizeof(msg), "agent %s printed %d final lines, expected %d", s->nodes[i], k,
               want);
      sc_fail(s, msg);
    }
    if (r->errors[i]) {
      snprintf(msg, sizeof(msg), "agent %s's worker reported %d error(s) (\"fashion_mnist: \")",
               s->nodes[i], r->errors[i]);
      sc_fail(s, msg);
    }
  }
  unsigned ranks = 0;
  const final_t *f0 = &r->fin[0];
  for (int j = 0; j < r->nfin; j++) {
    const final_t *f = &r->fin[j];
    if (f->rank < 0 || f->rank >= nexp || (ranks >> f->rank) & 1) {
      snprintf(msg, sizeof(msg), "final rank %d of node %s: ranks must be 0..%d once each", f->rank,
               s->nodes[f->agent], nexp - 1);
      sc_fail(s, msg);
    }
    ranks |= 1u << f->rank;
    if (f->step != f0->step || f->seen != f0->seen || (same_params && f->crc != f0->crc) ||
        f->acc < ACC_MIN) {
      snprintf(msg, sizeof(msg),
               "final lines disagree or fall short: node %s step=%lld seen=%lld crc=%08x "
               "acc=%.4f vs node %s step=%lld seen=%lld crc=%08x acc=%.4f (ACC_MIN %.2f%s)",
               s->nodes[f->agent], f->step, f->seen, f->crc, f->acc, s->nodes[f0->agent], f0->step,
               f0->seen, f0->crc, f0->acc, ACC_MIN, same_params ? "" : ", crc not compared");
      sc_fail(s, msg);
    }
  }
  /* Epoch lines: the last one printed for each epoch counts (a rolled-back epoch end could
   * be printed twice); every one of them is checked. */
  long long processed_sum = 0;
  for (int e = 1; e <= s->epochs; e++) {
    const epoch_line_t *last = NULL;
    for (int j = 0; j < r->nep; j++) {
      const epoch_line_t *ep = &r->ep[j];
      if (ep->epoch != e) continue;
      if (ep->dups != 0 || ep->missed > ep->world - 1 || ep->missed < 0 ||
          ep->total != s->limit_train || ep->epochs != s->epochs) {
        snprintf(msg, sizeof(msg),
                 "epoch %d/%d: world %d processed %lld of %lld missed %lld duplicates %lld", e,
                 ep->epochs, ep->world, ep->processed, ep->total, ep->missed, ep->dups);
        sc_fail(s, msg);
      }
      last = ep;
    }
    if (!last) {
      snprintf(msg, sizeof(msg), "no \"epoch %d/%d done\" line", e, s->epochs);
      sc_fail(s, msg);
    }
    processed_sum += last->processed;
    if (e == s->epochs) {
      if (last->step != f0->step || last->seen != f0->seen || last->world != nexp) {
        snprintf(msg, sizeof(msg),
                 "last epoch line (step %lld samples_seen %lld world %d) disagrees with the final "
                 "lines (step %lld samples_seen %lld, %d ranks)",
                 last->step, last->seen, last->world, f0->step, f0->seen, nexp);
        sc_fail(s, msg);
      }
    }
  }
  if (processed_sum != f0->seen) {
    snprintf(msg, sizeof(msg), "epochs processed %lld samples in all, samples_seen is %lld",
             processed_sum, f0->seen);
    sc_fail(s, msg);
  }
  printf(
      "training: %d ranks at the end, step %lld, samples_seen %lld of %lld, params_crc %08x%s, "
      "test_acc",
      nexp, f0->step, f0->seen, (long long)s->epochs * s->limit_train, f0->crc,
      same_params ? " on every rank" : " (rank 0)");
  for (int j = 0; j < r->nfin; j++) printf(" %.4f", r->fin[j].acc);
  printf("\n");
  for (int j = 0; j < r->nep; j++)
    printf("  epoch %d: world %d step %lld processed %lld missed %lld duplicates %lld acc %.4f\n",
           r->ep[j].epoch, r->ep[j].world, r->ep[j].step, r->ep[j].processed, r->ep[j].missed,
           r->ep[j].dups, r->ep[j].acc);
}

/* Rank 0's first step in round >= `round` (its time), or -1. */
static long long first_step_in(const results_t *r, long long round, long long *which) {
  long long best = -1;
  for (int i = 0; i < r->nfs; i++)
    if (r->fs[i].round >= round && (best < 0 || r->fs[i].round < *which)) {
      best = r->fs[i].t;
      *which = r->fs[i].round;
    }
  return best;
}

/* Rank 0's first step after time t (its time), or -1. */
static long long first_step_after(const results_t *r, long long t, long long *which) {
  long long best = -1;
  for (int i = 0; i < r->nfs; i++)
    if (r->fs[i].t >= t && (best < 0 || r->fs[i].t < best)) {
      best = r->fs[i].t;
      *which = r->fs[i].round;
    }
  return best;
}

static const round_line_t *round_line(const results_t *r, long long round) {
  for (int i = 0; i < r->nrl; i++)
    if (r->rl[i].round == round) return &r->rl[i];
  return NULL;
}

static void print_rounds(sc_t *s, long long t0) {
  for (int i = 0; i < s->nrounds; i++) {
    const seen_round_t *x = &s->rounds[i];
    printf("  round %lld seen at %+lld ms: leader %s, members", x->round, x->seen_ms - t0,
           x->leader);
    for (int k = 0; k < x->nmembers && k < MAXN; k++) printf(" %s", x->members[k]);
    printf("\n");
  }
}

/* Recovery after a kill at t_kill: printed, and bounded (the target is TTL + settle + ~1 s). */
static void report_kill_recovery(sc_t *s, const char *scenario, const char *event, long long t_kill,
                                 long long round_before) {
  results_t *r = &s->res;
  long long round = -1;
  long long t = first_step_after(r, t_kill, &round);
  if (t < 0) sc_fail(s, "rank 0 printed no first step after the kill");
  long long published = -1;
  for (int i = 0; i < s->nrounds; i++)
    if (s->rounds[i].round > round_before) {
      published = s->rounds[i].seen_ms - t_kill;
      break;
    }
  const round_line_t *rl = round_line(r, round);
  printf(
      "recovery_ms=%lld scenario=%s (%s -> rank 0's first step in round %lld; round "
      "published +%lld ms; rank 0's rebuild recovery_ms %lld%s)\n",
      t - t_kill, scenario, event, round, published, rl ? rl->ms : -1LL,
      rl && rl->failed ? " after a failed step" : "");
  if (t - t_kill > 15000) sc_fail(s, "recovery took more than 15 s");
}

static void report_join(sc_t *s, const char *scenario, const char *node, long long t_reg,
                        long long from_round) {
  const char *one[] = {node};
  const seen_round_t *x = first_round_with(s, from_round, one, 1);
  if (!x) sc_fail(s, "no round included the newcomer");
  long long round = -1;
  long long t = first_step_in(&s->res, x->round, &round);
  if (t < 0) sc_fail(s, "rank 0 printed no first step in a round with the newcomer");
  const round_line_t *rl = round_line(&s->res, round);
  printf(
      "recovery_ms=%lld scenario=%s node=%s (registration -> rank 0's first step in round "
      "%lld; round %lld with it published +%lld ms; rank 0's rebuild recovery_ms %lld)\n",
      t - t_reg, scenario, node, round, x->round, x->seen_ms - t_reg, rl ? rl->ms : -1LL);
}

/* ---------------------------------------------------------------------------------------- */
/* Scenarios                                                                                 */

#define EPOCHS 4
#define TRAIN 12000
#define TEST 1000

/* Two nodes train; after their round is running, a third (join_one) or a fourth and fifth
 * started back to back (join_two) join. */
static void join(const char *scenario, const char *alg, int newcomers) {
  sc_t *s = &S;
  sc_init(s, scenario, alg, newcomers == 1 ? "2:3" : "2:4", EPOCHS, TRAIN, TEST, NULL);
  static const char *names[] = {"n1", "n2", "n3", "n4"};
  for (int i = 0; i < 2; i++) {
    sc_spawn(s, names[i]);
    sc_wait_registered(s, names[i]);
  }
  const char *first[] = {"n1", "n2", NULL};
  long long r1 = sc_wait_training(s, 2, first, NULL, 30000);
  sc_sleep(s, 300); /* into the epoch */
  long long t0 = etcd_fixture_now_ms();
  for (int i = 0; i < newcomers; i++) sc_spawn(s, names[2 + i]);
  long long t_reg[2];
  for (int i = 0; i < newcomers; i++) t_reg[i] = sc_wait_registered(s, names[2 + i]);
  int want[MAXN] = {0, 0, 0, 0};
  sc_wait_all(s, want, 60000);
  print_rounds(s, t0);
  sc_check_training(s, (1u << (2 + newcomers)) - 1, 1);
  /* The first two workers were never restarted: one start line (rank 0's, round 1). */
  ASSERT_EQ(s->res.starts[0], 1);
  ASSERT_EQ(s->res.starts[1], 0);
  for (int i = 0; i < 2; i++)
    if (!h_file_contains(s->ap[i].err_path, "(membership, in-process)"))
      sc_fail(s, "a running node did not adopt the join round in-process");
  for (int i = 0; i < newcomers; i++) report_join(s, scenario, names[2 + i], t_reg[i], r1 + 1);
  if (newcomers == 2) {
    const char *both[] = {"n3", "n4"};
    const seen_round_t *x = first_round_with(s, r1 + 1, both, 2);
    const char *one[] = {"n3"}, *other[] = {"n4"};
    const seen_round_t *a = first_round_with(s, r1 + 1, one, 1),
                       *b = first_round_with(s, r1 + 1, other, 1);
    if (!x) sc_fail(s, "no round with both newcomers");
    int nlines = 0;
    for (int i = 0; i < s->res.nrl; i++) nlines += s->res.rl[i].round > r1;
    printf(
        "join_two: %s (round %lld with n3, round %lld with n4, first with both %lld; rank 0 "
        "went through %d world change(s); both registered %lld ms apart)\n",
        a == b ? "one round of 4" : "two rounds", a->round, b->round, x->round, nlines,
        t_reg[1] - t_reg[0]);
  }
  h_fini(&s->h);
}

static void test_join_one(void) {
  join("join_one", "gradient_allreduce", 1);
}

static void test_join_two(void) {
  join("join_two", "bytegrad", 2);
}

/* Three nodes train (in spawn order, so n1 leads and holds rank 0 unless arranged otherwise);
 * `victim` picks which node dies. */
typedef enum { V_PLAIN, V_LEADER, V_RANK0 } victim_t;

static void sigkill(const char *scenario, const char *alg, victim_t v, int same_params) {
  sc_t *s = &S;
  sc_init(s, scenario, alg, "2:3", EPOCHS, TRAIN, TEST, NULL);
  static const char *names[] = {"n1", "n2", "n3"};
  char lead[64];
  if (v == V_RANK0) {
    /*
     * Leadership goes to whoever creates the leader key first, which is the first agent to
     * register, and members are ordered by registration: the leader holds rank 0 unless
     * leadership moved. To kill rank 0 alone, the test makes n3 the leader while n1 keeps
     * rank 0: a placeholder leader key (no lease) keeps anyone from leading while the three
     * register; then n1 and n2 are frozen for a moment (far less than the lease TTL) while
     * the placeholder is deleted, so n3 wins the election, publishes round 1 [n1 n2 n3] and
     * n1, the oldest member, is rank 0.
     */
    char key[256];
    snprintf(key, sizeof(key), "/bagua/%.63s/leader", s->h.job);
    ASSERT_OK(bagua__etcd_put(s->h.c, key, "placeholder", 11, 0, NULL, NULL));
    for (int i = 0; i < 3; i++) {
      sc_spawn(s, names[i]);
      sc_wait_registered(s, names[i]);
    }
    for (int i = 0; i < 2; i++) h_kill(&s->ap[i], SIGSTOP);
    ASSERT_OK(bagua__etcd_delete(s->h.c, key, NULL));
    long long d = etcd_fixture_now_ms() + 1000;
    while (strcmp(leader_of(s, lead, sizeof(lead)), "n3") != 0) {
      if (etcd_fixture_now_ms() > d) {
        for (int i = 0; i < 2; i++) h_kill(&s->ap[i], SIGCONT);
        sc_fail(s, "n3 did not take the leader key within 1 s");
      }
      usleep(2000);
    }
    for (int i = 0; i < 2; i++) h_kill(&s->ap[i], SIGCONT);
  } else {
    for (int i = 0; i < 3; i++) {
      sc_spawn(s, names[i]);
      sc_wait_registered(s, names[i]);
    }
  }
  long long round = sc_wait_training(s, 3, NULL, NULL, 30000);
  sc_sleep(s, 300); /* into the epoch */
  const seen_round_t *r = sc_last_round(s);
  leader_of(s, lead, sizeof(lead));
  int victim = -1;
  for (int i = 0; i < 3; i++) {
    int is_leader = strcmp(names[i], lead) == 0, is_rank0 = strcmp(names[i], r->members[0]) == 0;
    if ((v == V_PLAIN && !is_leader && !is_rank0) || (v == V_LEADER && is_leader) ||
        (v == V_RANK0 && is_rank0 && !is_leader))
      victim = i;
  }
  if (victim < 0) {
    char msg[256];
    snprintf(msg, sizeof(msg), "no node fits: leader %s, rank 0 %s", lead, r->members[0]);
    sc_fail(s, msg);
  }
  int rank = -1;
  for (int k = 0; k < r->nmembers; k++)
    if (strcmp(r->members[k], names[victim]) == 0) rank = k;
  printf("%s: killing %s (rank %d of round %lld; leader %s, rank 0 %s)\n", scenario, names[victim],
         rank, round, lead, r->members[0]);
  long long t_kill = sc_kill_node(s, victim);
  int want[MAXN] = {0, 0, 0, -1};
  want[victim] = 128 + SIGKILL;
  sc_wait_all(s, want, 60000);
  print_rounds(s, t_kill);
  sc_check_training(s, 7u & ~(1u << victim), same_params);
  /* No survivor was restarted (rank 0's start line appears once, from round 1). */
  int starts = 0;
  for (int i = 0; i < 3; i++) starts += s->res.starts[i];
  ASSERT_EQ(starts, 1);
  const seen_round_t *last = sc_last_round(s);
  if (last->nmembers != 2 || round_has(last, names[victim]))
    sc_fail(s, "the last round does not consist of the two survivors");
  if (v != V_PLAIN && strcmp(last->leader, names[victim]) == 0)
    sc_fail(s, "the dead leader published the last round");
  if (v == V_RANK0 && strcmp(last->leader, lead) != 0)
    sc_fail(s, "leadership moved although the leader survived");
  report_kill_recovery(s, scenario, "SIGKILL", t_kill, round);
  bagua__rdzv_status_t st;
  ASSERT_EQ(h_status(&s->h, &st), 0);
  ASSERT_EQ((int)st.state, (int)BAGUA__JOB_SUCCEEDED);
  h_fini(&s->h);
}

static void test_sigkill_node(void) {
  sigkill("sigkill_node", "gradient_allreduce", V_PLAIN, 1);
}

static void test_sigkill_leader(void) {
  sigkill("sigkill_leader", "qadam", V_LEADER, 1);
}

static void test_sigkill_rank0(void) {
  sigkill("sigkill_rank0", "low_precision_decentralized", V_RANK0, 0);
}

/*
 * A node frozen (SIGSTOP to its agent and its worker) for longer than the lease TTL: its lease
 * expires, the others publish a round without it, the library aborts their communication
 * still waiting for the frozen worker (BAGUA_ELASTIC_ABORT_DELAY_MS after the round), and they
 * go on as a world of two. Then the node is resumed (SIGCONT): its agent finds its lease gone,
 * stops its stale worker and registers again, so it either joins again with a fresh worker
 * (while the others still train) or exits with the job's status (if they have finished).
 */
static void test_sigstop_node(void) {
  sc_t *s = &S;
  sc_init(s, "sigstop_node", "async", "2:3", 6, TRAIN, TEST, NULL);
  static const char *names[] = {"n1", "n2", "n3"};
  for (int i = 0; i < 3; i++) {
    sc_spawn(s, names[i]);
    sc_wait_registered(s, names[i]);
  }
  long long round = sc_wait_training(s, 3, NULL, NULL, 30000);
  sc_sleep(s, 300);
  const seen_round_t *r = sc_last_round(s);
  char lead[64];
  leader_of(s, lead, sizeof(lead));
  int victim = -1;
  for (int i = 0; i < 3; i++)
    if (strcmp(names[i], lead) != 0 && strcmp(names[i], r->members[0]) != 0) victim = i;
  if (victim < 0) sc_fail(s, "no node is neither the leader nor rank 0");
  pid_t w = sc_worker(s, victim);
  long long t_stop = etcd_fixture_now_ms();
  h_kill(&s->ap[victim], SIGSTOP);
  kill(w, SIGSTOP);
  printf("sigstop_node: froze %s (agent %d, worker %d) in round %lld\n", names[victim],
         (int)s->ap[victim].pid, (int)w, round);
  /* The survivors go on without it. */
  const char *gone[] = {names[victim], NULL};
  sc_wait_training(s, 2, NULL, gone, 20000);
  /* Frozen well past the TTL; the survivors train meanwhile. */
  long long now = etcd_fixture_now_ms(), until = t_stop + LEASE_TTL_MS + 1000;
  if (until < now + 500) until = now + 500;
  sc_sleep(s, (int)(until - now));
  long long t_cont = etcd_fixture_now_ms();
  h_kill(&s->ap[victim], SIGCONT);
  kill(w, SIGCONT);
  printf("sigstop_node: resumed %s after %lld ms frozen\n", names[victim], t_cont - t_stop);
  int want[MAXN] = {0, 0, 0, -1};
  sc_wait_all(s, want, 60000);
  wait_pid_gone(s, w, 2000, "the frozen node's old worker");
  print_rounds(s, t_stop);
  results_t *res = sc_parse(s);
  /* Rejoined (a fresh worker finished with the others) or not (the job had ended). */
  int rejoined = 0;
  for (int j = 0; j < res->nfin; j++) rejoined |= res->fin[j].agent == victim;
  sc_check_training(s, rejoined ? 7u : 7u & ~(1u << victim), 0);
  /* The two others were never restarted (rank 0's start line appears once, from round 1);
   * the frozen node's stale worker left or was stopped, never finished. */
  int starts = 0;
  for (int i = 0; i < 3; i++) starts += res->starts[i];
  ASSERT_EQ(starts, 1);
  if (rejoined && !h_file_contains(s->ap[victim].err_path, "lost the etcd lease"))
    sc_fail(s, "the resumed agent rejoined without noticing its lost lease");
  printf("sigstop_node: %s %s\n", names[victim],
         rejoined ? "rejoined with a fresh worker and finished with the others"
                  : "did not rejoin (the job had ended) and exited 0");
  report_kill_recovery(s, "sigstop_node", "SIGSTOP", t_stop, round);
  bagua__rdzv_status_t st;
  ASSERT_EQ(h_status(&s->h, &st), 0);
  ASSERT_EQ((int)st.state, (int)BAGUA__JOB_SUCCEEDED);
  h_fini(&s->h);
}

/*
 * Below MIN (--nnodes 2:3): two nodes train and one dies. The survivor's worker restores and
 * waits in its rebuild for a round that never comes (one node is fewer than MIN); after the
 * lease TTL plus --rdzv-timeout the leader fails the job and the agent stops the worker and
 * exits 3 (docs/agent.md, "Exit status").
 */
static void test_belowmin(void) {
  sc_t *s = &S;
  sc_init(s, "belowmin", "gradient_allreduce", "2:3", EPOCHS, TRAIN, TEST, "3");
  static const char *names[] = {"n1", "n2"};
  for (int i = 0; i < 2; i++) {
    sc_spawn(s, names[i]);
    sc_wait_registered(s, names[i]);
  }
  sc_wait_training(s, 2, NULL, NULL, 30000);
  sc_sleep(s, 300);
  pid_t w = sc_worker(s, 0);
  long long t_kill = sc_kill_node(s, 1);
  int want[MAXN] = {3, 128 + SIGKILL, -1, -1};
  sc_wait_all(s, want, 20000);
  long long took = s->ap[0].exit_ms - t_kill;
  wait_pid_gone(s, w, 1000, "the survivor's worker");
  printf(
      "belowmin: survivor's agent exited 3 %lld ms after the kill (lease TTL 2 s + "
      "--rdzv-timeout 3 s), its worker gone\n",
      took);
  if (took < 3000 || took > 12000) sc_fail(s, "exit outside 3..12 s after the kill");
  if (!h_file_contains(s->ap[0].err_path, "rendezvous timed out"))
    sc_fail(s, "the survivor's agent did not say \"rendezvous timed out\"");
  results_t *res = sc_parse(s);
  ASSERT_EQ(res->nfin, 0);
  bagua__rdzv_status_t st;
  ASSERT_EQ(h_status(&s->h, &st), 0);
  ASSERT_EQ((int)st.state, (int)BAGUA__JOB_FAILED);
  ASSERT_EQ(st.exit_code, 3);
  h_fini(&s->h);
}

/*
 * NOT REGISTERED with ctest: a reproducer of a known failure (run `test_scenarios late_join`).
 * A node that joins while the workers run their last step: the round that admits it is
 * published after the last bagua_elastic_check_all() of the running workers, which adopt it
 * in-process, finish and exit 0, so their agents report "succeeded" for the new round; the
 * newcomer's worker waits in its bootstrap for ranks that are gone until the connect timeout,
 * fails, and the job fails (--max-restarts 0) or restarts every worker from scratch. Made
 * deterministic here: the running workers are frozen (SIGSTOP, far shorter than any timeout)
 * right after rank 0's last epoch line until the round with the newcomer is published. The
 * expectation is the job's success within a few seconds.
 */
static void test_late_join(void) {
  setenv("BAGUA_CONNECT_TIMEOUT_MS", "5000", 1); /* the workers inherit it: fail fast */
  sc_t *s = &S;
  sc_init(s, "late_join", "gradient_allreduce", "2:3", 2, 6000, 10000, NULL);
  static const char *names[] = {"n1", "n2", "n3"};
  for (int i = 0; i < 2; i++) {
    sc_spawn(s, names[i]);
    sc_wait_registered(s, names[i]);
  }
  sc_wait_training(s, 2, NULL, NULL, 30000);
  pid_t w[2] = {sc_worker(s, 0), sc_worker(s, 1)};
  long long d = etcd_fixture_now_ms() + 30000;
  for (;;) {
    results_t *r = sc_parse(s);
    int last = 0;
    for (int j = 0; j < r->nep; j++) last |= r->ep[j].epoch == 2;
    if (last) break;
    if (etcd_fixture_now_ms() > d) sc_fail(s, "no last epoch line");
    usleep(1000);
  }
  for (int i = 0; i < 2; i++) kill(w[i], SIGSTOP);
  if (sc_parse(s)->nfin) {
    for (int i = 0; i < 2; i++) kill(w[i], SIGCONT);
    sc_fail(s, "a worker finished before it could be frozen (retry)");
  }
  sc_spawn(s, "n3");
  sc_wait_registered(s, "n3");
  d = etcd_fixture_now_ms() + 10000;
  for (;;) {
    sc_poll(s);
    const seen_round_t *x = sc_last_round(s);
    if (x && round_has(x, "n3")) break;
    if (etcd_fixture_now_ms() > d) {
      for (int i = 0; i < 2; i++) kill(w[i], SIGCONT);
      sc_fail(s, "no round with n3");
    }
    usleep(5000);
  }
  for (int i = 0; i < 2; i++) kill(w[i], SIGCONT);
  int want[MAXN] = {0, 0, 0, -1};
  sc_wait_all(s, want, 30000);
  h_fini(&s->h);
}

int main(int argc, char **argv) {
  TEST_RUN_SCENARIOS(argc, argv, {"join_one", test_join_one}, {"join_two", test_join_two},
                     {"sigkill_node", test_sigkill_node}, {"sigkill_leader", test_sigkill_leader},
                     {"sigkill_rank0", test_sigkill_rank0}, {"sigstop_node", test_sigstop_node},
                     {"belowmin", test_belowmin},
                     {"late_join", test_late_join}); /* a reproducer, not registered */
}
