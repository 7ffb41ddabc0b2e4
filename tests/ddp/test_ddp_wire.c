/*
 * What goes over the wire, and when.
 *
 *   bytes    4 ranks over TCP, a 1 MiB model in four 256 KiB buckets: bytes this rank sends
 *            per step (bagua_comm_bytes_sent through bagua_ddp_stats) for every algorithm;
 *            bytegrad, and qadam after its warm-up, must stay within 0.27x of
 *            gradient_allreduce (8-bit payload plus 32-byte chunk headers).
 *   overlap  3 ranks, eight buckets, a backward pass that computes (sleeps) between tensors:
 *            the communication thread must do a step's whole exchange while the caller is
 *            still in its backward pass. The caller waits for that (the thread back asleep
 *            waiting for work, every bucket handed over) before it calls bagua_ddp_step(), so
 *            the overlap the library reports must then be nearly 1 however loaded the machine.
 *   quant    the compressed average against the exact one: within the quantization step,
 *            bit-identical on all ranks, and with error feedback the running sum of the
 *            averages of a constant gradient stays within a bounded distance of the exact
 *            sum, while without it the error grows with the number of steps.
 */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../comm/mp.h"
#include "../test.h"
#include "comm/tcp/tcp.h"
#include "problem.h"

#define NT 4
#define TENSOR (64 * 1024) /* floats: 256 KiB per tensor and bucket */

static float *params[NT], *grads[NT];

static void fill(int rank, int step) {
  uint32_t s = 2654435761u * (uint32_t)(rank + 1) + 40503u * (uint32_t)step;
  for (int t = 0; t < NT; t++)
    for (int i = 0; i < TENSOR; i++) {
      s = s * 1664525u + 1013904223u;
      grads[t][i] = (float)((s >> 8) & 0xffff) / 65536.0f - 0.5f;
    }
}

/* Mean bytes per step over `steps` steps after `skip` steps. */
static double bytes_per_step(bagua_comm_t *c, const char *algo, const char *peer, int warmup,
                             int skip, int steps) {
  int me = bagua_comm_rank(c);
  bagua_ddp_config_t cfg = BAGUA_DDP_CONFIG_INIT;
  cfg.algorithm = algo;
  cfg.peer_mode = peer;
  cfg.hierarchical = 0;
  cfg.bucket_bytes = TENSOR * sizeof(float);
  cfg.warmup_steps = warmup;
  cfg.lr = 1e-4;
  bagua_ddp_t *ddp;
  ASSERT_OK(bagua_ddp_create(c, &cfg, &ddp));
  for (int t = 0; t < NT; t++) {
    memset(params[t], 0, TENSOR * sizeof(float));
    ASSERT_OK(bagua_ddp_register(ddp, NULL, params[t], grads[t], TENSOR));
  }
  ASSERT_OK(bagua_ddp_ready(ddp));
  uint64_t sum = 0;
  bagua_ddp_stats_t st = {.struct_size = sizeof(st)};
  for (int k = 0; k < skip + steps; k++) {
    fill(me, k);
    for (int t = 0; t < NT; t++) ASSERT_OK(bagua_ddp_grad_ready(ddp, t));
    ASSERT_OK(bagua_ddp_step(ddp));
    ASSERT_OK(bagua_ddp_stats(ddp, &st));
    if (k >= skip) sum += st.bytes_last_step;
  }
  ASSERT_EQ(st.num_buckets, NT);
  bagua_ddp_destroy(ddp);
  return (double)sum / steps;
}

static int body_bytes(bagua_comm_t *c, void *arg) {
  int me = bagua_comm_rank(c);
  double full = bytes_per_step(c, "gradient_allreduce", NULL, -1, 1, 3);
  double bg = bytes_per_step(c, "bytegrad", NULL, -1, 1, 3);
  double qa_warm = bytes_per_step(c, "qadam", NULL, 3, 0, 3);
  double qa = bytes_per_step(c, "qadam", NULL, 2, 2, 3);
  double dec_all = bytes_per_step(c, "decentralized", "all", -1, 1, 3);
  double dec_shift = bytes_per_step(c, "decentralized", "shift_one", -1, 1, 3);
  double dec_ring = bytes_per_step(c, "decentralized", "ring", -1, 1, 3);
  double lpd = bytes_per_step(c, "low_precision_decentralized", NULL, -1, 1, 3);
  if (me == 0) {
    printf("bytes sent per step by rank 0 (model %d floats, 4 ranks, tcp):\n", NT * TENSOR);
    printf("  gradient_allreduce            %10.0f  1.000\n", full);
    printf("  bytegrad                      %10.0f  %.4f\n", bg, bg / full);
    printf("  qadam (warm-up)               %10.0f  %.4f\n", qa_warm, qa_warm / full);
    printf("  qadam (after warm-up)         %10.0f  %.4f\n", qa, qa / full);
    printf("  decentralized all             %10.0f  %.4f\n", dec_all, dec_all / full);
    printf("  decentralized shift_one       %10.0f  %.4f\n", dec_shift, dec_shift / full);
    printf("  decentralized ring            %10.0f  %.4f\n", dec_ring, dec_ring / full);
    printf("  low_precision_decentralized   %10.0f  %.4f\n", lpd, lpd / full);
  }
  ASSERT_TRUE(full > 0);
  ASSERT_TRUE(bg <= 0.27 * full);
  ASSERT_TRUE(qa <= 0.27 * full);
  ASSERT_TRUE(qa_warm >= 0.9 * full); /* the warm-up really is full precision */
  ASSERT_TRUE(lpd <= 0.27 * dec_ring);
  assert_no_leaks();
  return 0;
}

/* The ids of this process's threads; returns how many (at most `max`). */
static int list_threads(pid_t *out, int max) {
  DIR *d = opendir("/proc/self/task");
  ASSERT_TRUE(d != NULL);
  int n = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL && n < max;)
    if (e->d_name[0] != '.') out[n++] = (pid_t)atoi(e->d_name);
  closedir(d);
  return n;
}

/* Whether thread `tid` is a communicator's acceptor (comm/tcp/links.c), by its name. */
static int is_acceptor(pid_t tid) {
  char path[64], name[32] = "";
  snprintf(path, sizeof(path), "/proc/self/task/%d/comm", (int)tid);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  if (!fgets(name, sizeof(name), f)) name[0] = '\0';
  fclose(f);
  name[strcspn(name, "\n")] = '\0';
  return strcmp(name, BAGUA_ACCEPTOR_THREAD_NAME) == 0;
}

/* Whether thread `tid` is idle: asleep (state 'S' in its stat; a woken thread is 'R' even
 * before it runs, so a wake-up in flight is never mistaken) in futex(2), where the
 * communication thread waits for work on a condition variable, or in a timed sleep, where
 * a sanitizer's background thread spends its life. An exchange sleeps in poll(2) instead. */
static int idle(pid_t tid) {
  char path[64], state;
  unsigned long ticks;
  mp_thread_sched(tid, &state, &ticks);
  if (state != 'S') return 0;
  snprintf(path, sizeof(path), "/proc/self/task/%d/syscall", (int)tid);
  FILE *f = fopen(path, "r");
  ASSERT_TRUE(f != NULL);
  long nr = -1;
  if (fscanf(f, "%ld", &nr) != 1) nr = -1; /* "running" */
  fclose(f);
  return nr == SYS_futex || nr == SYS_nanosleep || nr == SYS_clock_nanosleep;
}

/* arg: NULL to overlap (BAGUA_OVERLAP=1), non-NULL to hold (BAGUA_OVERLAP=0). */
static int body_overlap(bagua_comm_t *c, void *arg) {
  int held = arg != NULL;
  enum { N = 8, COUNT = 16 * 1024 };
  float *p = calloc((size_t)N * COUNT, sizeof(float)), *g = calloc((size_t)N * COUNT, 4);
  bagua_ddp_config_t cfg = BAGUA_DDP_CONFIG_INIT;
  cfg.bucket_bytes = COUNT * sizeof(float);
  /* Flat: every byte goes through `c`, whose counter the wait below reads. */
  cfg.hierarchical = 0;
  /* The threads bagua_ddp_ready() starts are those that were not there before. */
  enum { MAXT = 64 };
  pid_t before[MAXT], after[MAXT], comm_threads[MAXT];
  int nbefore = list_threads(before, MAXT), ncomm = 0;
  bagua_ddp_t *ddp;
  ASSERT_OK(bagua_ddp_create(c, &cfg, &ddp));
  for (int t = 0; t < N; t++)
    ASSERT_OK(bagua_ddp_register(ddp, NULL, p + (size_t)t * COUNT, g + (size_t)t * COUNT, COUNT));
  ASSERT_OK(bagua_ddp_ready(ddp));
  int nafter = list_threads(after, MAXT);
  for (int i = 0; i < nafter; i++) {
    int old = 0;
    for (int j = 0; j < nbefore; j++) old |= after[i] == before[j];
    /* A new communicator's acceptor sleeps in poll for its whole life: not an exchange. */
    if (!old && !is_acceptor(after[i])) comm_threads[ncomm++] = after[i];
  }
  ASSERT_TRUE(ncomm >= 1);
  bagua_ddp_stats_t st = {.struct_size = sizeof(st)};
  for (int k = 0; k < 10; k++) {
    for (int t = 0; t < N; t++) {
      usleep(3000); /* the backward pass of tensor t */
      ASSERT_OK(bagua_ddp_grad_ready(ddp, t));
    }
    /* The rest of the backward pass lasts until the communication thread has nothing left
     * to do: every bucket was handed over above, so it sleeps again only once all of them
     * are exchanged. The peers do the same, so no rank's exchange needs anyone to enter
     * bagua_ddp_step(). */
    double until = mp_now() + 20;
    for (int i = 0; i < ncomm; i++) {
      while (!idle(comm_threads[i])) {
        ASSERT_TRUE(mp_now() < until);
        usleep(200);
      }
    }
    ASSERT_OK(bagua_ddp_step(ddp));
  }
  ASSERT_OK(bagua_ddp_stats(ddp, &st));
  if (bagua_comm_rank(c) == 0)
    printf("overlap %.2f (last step %.2f), communication %.2f ms per step, wait %.3f ms\n",
           st.overlap_total, st.overlap_last_step, 1e3 * st.comm_s_total / st.steps,
           1e3 * st.wait_s_last_step);
  ASSERT_EQ(st.num_buckets, N);
  ASSERT_TRUE(st.comm_s_total > 0);
  if (held) {
    /* Held: the communication thread started nothing during the 24 ms of "backward" of each
     * step although every bucket was handed over, so none of its work lies before the entry
     * into bagua_ddp_step(). */
    if (st.overlap_total != 0.0) TEST_FAIL("held: overlap %.3f, expected 0", st.overlap_total);
    bagua_ddp_destroy(ddp);
    free(p);
    free(g);
    assert_no_leaks();
    return 0;
  }
  /* Every step entered bagua_ddp_step() with its exchange finished, so all of the
   * communication thread's work lies before the entry: the fraction is 1 up to the clock
   * reads around the last job; 0.5 leaves a wide margin. */
  ASSERT_TRUE(st.overlap_total > 0.5);
  bagua_ddp_destroy(ddp);
  free(p);
  free(g);
  assert_no_leaks();
  return 0;
}

/* One tensor of n floats, lr 1 and zero initial weights: the weights after k steps are minus
 * the sum of the k averaged gradients. */
static double quant_error(bagua_comm_t *c, int ef, int steps, float *w, int n, double *range) {
  int me = bagua_comm_rank(c), size = bagua_comm_size(c);
  float *g = calloc(n, sizeof(float));
  double *exact = calloc(n, sizeof(double));
  memset(w, 0, n * sizeof(float));
  bagua_ddp_config_t cfg = BAGUA_DDP_CONFIG_INIT;
  cfg.algorithm = "bytegrad";
  cfg.hierarchical = 0;
  cfg.error_feedback = ef;
  cfg.lr = 1.0;
  bagua_ddp_t *ddp;
  ASSERT_OK(bagua_ddp_create(c, &cfg, &ddp));
  ASSERT_OK(bagua_ddp_register(ddp, "w", w, g, n));
  ASSERT_OK(bagua_ddp_ready(ddp));
  *range = 0;
  for (int i = 0; i < n; i++) {
    /* The same gradient every step; rank r's is offset so that the average is not trivial. */
    for (int r = 0; r < size; r++) {
      float v = sinf(0.37f * i + 0.11f * r) * (1.0f + 0.1f * r);
      if (r == me) g[i] = v;
      exact[i] += (double)v / size;
    }
  }
  for (int k = 0; k < steps; k++) ASSERT_OK(bagua_ddp_step(ddp));
  double worst = 0;
  for (int i = 0; i < n; i++) {
    worst = fmax(worst, fabs(-w[i] - steps * exact[i]));
    *range = fmax(*range, fabs(exact[i]));
  }
  assert_same_on_all_ranks(c, w, n, "bytegrad weights");
  bagua_ddp_destroy(ddp);
  free(g);
  free(exact);
  return worst;
}

static int body_quant(bagua_comm_t *c, void *arg) {
  (void)arg;
  int n = 3 * 1000, me = bagua_comm_rank(c);
  float *w = calloc(n, sizeof(float));
  double range;
  /* One step: the error is at most about one quantization step per compression (range/255
   * of a chunk of values in [-range, range], twice). */
  double one = quant_error(c, 0, 1, w, n, &range);
  double step = 2 * range / 255;
  double plain = quant_error(c, 0, 40, w, n, &range);
  double fed = quant_error(c, 1, 40, w, n, &range);
  if (me == 0)
    printf(
        "quantization step %.3g: one step error %.3g; after 40 steps %.3g without error "
        "feedback, %.3g with\n",
        step, one, plain, fed);
  ASSERT_TRUE(one > 0); /* it really is compressed */
  ASSERT_TRUE(one <= 2.5 * step);
  ASSERT_TRUE(fed <= 3 * step); /* bounded: the residuals carry the error forward */
  ASSERT_TRUE(plain > 5 * fed); /* without feedback the same error repeats every step */
  free(w);
  assert_no_leaks();
  return 0;
}

int main(int argc, char **argv) {
  const char *what = argc > 1 ? argv[1] : "bytes";
  mp_opts_t o = {
      .nranks = 4, .transport = BAGUA_TRANSPORT_TCP, .ranks_per_node = 1, .deadline_s = 60};
  mp_body_fn body = body_bytes;
  void *arg = NULL;
  if (!strcmp(what, "overlap")) {
    o.nranks = 3;
    o.setenv_list = "BAGUA_OVERLAP=1";
    body = body_overlap;
  } else if (!strcmp(what, "held")) {
    o.nranks = 3;
    o.setenv_list = "BAGUA_OVERLAP=0";
    body = body_overlap;
    arg = &o;
  } else if (!strcmp(what, "quant")) {
    o.nranks = 3;
    body = body_quant;
  } else {
    for (int t = 0; t < NT; t++) {
      params[t] = calloc(TENSOR, sizeof(float));
      grads[t] = calloc(TENSOR, sizeof(float));
    }
  }
  double t0 = mp_now();
  int rc = mp_run(&o, body, arg);
  printf("%s wire %s in %.1f s\n", rc ? "FAILED" : "passed", what, mp_now() - t0);
  return rc;
}
