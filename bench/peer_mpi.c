/*
 * peer_mpi.c - Open MPI reference benchmark for bench/peers.sh.
 *
 * Times MPI collectives with the same methodology and prints rows in the same
 * format as bagua-bench, so one parser reads ours, Open MPI and Gloo:
 *
 *   bytes count dtype op time_us algbw_GBps busbw_GBps wrong
 *
 * Methodology (kept identical to bagua-bench and peer_gloo.py on purpose, so
 * the comparison measures the libraries and not the harnesses):
 *   - sizes double from --min-bytes to --max-bytes;
 *   - --warmup untimed calls, then MPI_Barrier, then --iters timed calls;
 *   - time_us = per-iteration mean on each rank, then the MAX across ranks
 *     (the slowest rank is what a training step waits for);
 *   - algbw = bytes / time (1e9 B/s), busbw = algbw * factor, with the
 *     nccl-tests factors (allreduce 2(n-1)/n; reduce_scatter, allgather,
 *     alltoall (n-1)/n; broadcast, reduce 1);
 *   - like nccl-tests, `bytes` is the total array size for reduce_scatter,
 *     allgather and alltoall (each rank owns bytes/n of it) and the buffer
 *     size for the others.
 *
 * Correctness: after the timed loop the output buffer is overwritten with a
 * sentinel and the collective runs once more; every element is compared with
 * the value it must have. Inputs are small integers depending on rank and
 * index, so float32 sums are exact and any mismatch is a real error. The
 * `wrong` column is the number of bad elements summed over ranks.
 *
 * Build (peers.sh does this): mpicc -std=c11 -O2 -Wall -Wextra peer_mpi.c
 * Run:   mpirun -np N ./peer_mpi allreduce --min-bytes 1M --max-bytes 64M
 */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum coll {
  C_ALLREDUCE,
  C_REDUCE_SCATTER,
  C_ALLGATHER,
  C_ALLTOALL,
  C_BROADCAST,
  C_REDUCE,
  C_BARRIER,
};

static const struct {
  const char *name;
  enum coll c;
} coll_names[] = {
    {"allreduce", C_ALLREDUCE},
    {"reduce_scatter", C_REDUCE_SCATTER},
    {"reduce_scatter_block", C_REDUCE_SCATTER},
    {"allgather", C_ALLGATHER},
    {"alltoall", C_ALLTOALL},
    {"broadcast", C_BROADCAST},
    {"bcast", C_BROADCAST},
    {"reduce", C_REDUCE},
    {"barrier", C_BARRIER},
};

struct opts {
  enum coll coll;
  const char *coll_name;
  size_t min_bytes, max_bytes;
  int iters, warmup;
  int check;
};

static int g_rank, g_size;

/* Abort the whole job: a benchmark that half-runs would print misleading rows. */
static void die(const char *fmt, const char *arg) {
  if (g_rank == 0) {
    fprintf(stderr, "peer_mpi: ");
    fprintf(stderr, fmt, arg);
    fputc('\n', stderr);
  }
  MPI_Abort(MPI_COMM_WORLD, 2);
  exit(2); /* not reached */
}

/* Accepts 8, 4K, 16M, 1G (binary multiples, as bagua-bench does). */
static size_t parse_size(const char *s) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s) die("bad size '%s'", s);
  switch (*end) {
    case 'k':
    case 'K':
      v <<= 10;
      end++;
      break;
    case 'm':
    case 'M':
      v <<= 20;
      end++;
      break;
    case 'g':
    case 'G':
      v <<= 30;
      end++;
      break;
    default:
      break;
  }
  if (*end == 'B' || *end == 'b') end++;
  if (*end != '\0') die("bad size '%s'", s);
  return (size_t)v;
}

static int parse_int(const char *s) {
  char *end;
  long v = strtol(s, &end, 10);
  if (end == s || *end != '\0' || v < 0 || v > 1000000000L) die("bad integer '%s'", s);
  return (int)v;
}

static void usage(void) {
  if (g_rank == 0)
    fprintf(stderr,
            "usage: peer_mpi COLLECTIVE [--min-bytes 8] [--max-bytes 256M]\n"
            "       [--iters 20] [--warmup 5] [--dtype f32] [--op sum]\n"
            "       [--check | --no-check] [--nranks N (must match -np)]\n"
            "COLLECTIVE: allreduce reduce_scatter allgather alltoall "
            "broadcast reduce barrier\n");
}

static void parse_args(int argc, char **argv, struct opts *o) {
  o->min_bytes = 8;
  o->max_bytes = (size_t)256 << 20;
  o->iters = 20;
  o->warmup = 5;
  o->check = 1; /* always on by default: a wrong fast number is worthless */
  o->coll_name = NULL;

  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = (i + 1 < argc) ? argv[i + 1] : NULL;
    if (a[0] != '-') {
      if (o->coll_name) die("unexpected argument '%s'", a);
      o->coll_name = a;
      continue;
    }
    if (!strcmp(a, "--check")) {
      o->check = 1;
      continue;
    }
    if (!strcmp(a, "--no-check")) {
      o->check = 0;
      continue;
    }
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage();
      MPI_Finalize();
      exit(0);
    }
    if (!v) die("option '%s' needs a value", a);
    i++;
    if (!strcmp(a, "--min-bytes"))
      o->min_bytes = parse_size(v);
    else if (!strcmp(a, "--max-bytes"))
      o->max_bytes = parse_size(v);
    else if (!strcmp(a, "--iters"))
      o->iters = parse_int(v);
    else if (!strcmp(a, "--warmup"))
      o->warmup = parse_int(v);
    else if (!strcmp(a, "--dtype")) {
      /* f32 only: it is what the comparison table uses. */
      if (strcmp(v, "f32") && strcmp(v, "float32") && strcmp(v, "float"))
        die("only --dtype f32 is supported, got '%s'", v);
    } else if (!strcmp(a, "--op")) {
      if (strcmp(v, "sum")) die("only --op sum is supported, got '%s'", v);
    } else if (!strcmp(a, "--nranks")) {
      /* Accepted for command-line symmetry with bagua-bench; the real
       * rank count comes from mpirun -np, so insist they agree. */
      if (parse_int(v) != g_size) die("--nranks %s does not match mpirun -np", v);
    } else if (!strcmp(a, "--transport")) {
      /* The transport is chosen by mpirun --mca btl; ignore here. */
    } else {
      usage();
      die("unknown option '%s'", a);
    }
  }
  if (!o->coll_name) {
    usage();
    die("%s", "missing COLLECTIVE");
  }
  size_t n = sizeof coll_names / sizeof coll_names[0], k;
  for (k = 0; k < n; k++)
    if (!strcmp(o->coll_name, coll_names[k].name)) break;
  if (k == n) die("unknown collective '%s'", o->coll_name);
  o->coll = coll_names[k].c;
  if (o->iters < 1) die("%s", "--iters must be >= 1");
  if (o->min_bytes < sizeof(float)) o->min_bytes = sizeof(float);
  if (o->max_bytes < o->min_bytes) die("%s", "--max-bytes is below --min-bytes");
}

/* Input value of element i on rank r: a small integer, so sums over any
 * realistic number of ranks stay exact in float32 (< 2^24). */
static inline float val(int r, size_t i) {
  return (float)((r + 1) + (int)(i % 13));
}

/* Sum over all ranks of val(r, i), computed in closed form. */
static inline float sumval(size_t i) {
  long n = g_size;
  return (float)(n * (n + 1) / 2 + n * (long)(i % 13));
}

struct bufs {
  float *send, *recv;
  size_t send_n, recv_n; /* element counts */
  size_t per;            /* per-rank block (reduce_scatter/allgather/alltoall) */
  size_t bytes;          /* the `bytes` column */
};

/* Size the buffers for one row. Returns 0 if `bytes` cannot be split evenly
 * into at least one float per rank (the row is then skipped). */
static int layout(const struct opts *o, size_t bytes, struct bufs *b) {
  size_t count = bytes / sizeof(float);
  size_t n = (size_t)g_size;
  switch (o->coll) {
    case C_ALLREDUCE:
    case C_BROADCAST:
    case C_REDUCE:
      b->send_n = b->recv_n = count;
      b->per = count;
      break;
    case C_REDUCE_SCATTER:
      b->per = count / n;
      b->send_n = b->per * n;
      b->recv_n = b->per;
      break;
    case C_ALLGATHER:
      b->per = count / n;
      b->send_n = b->per;
      b->recv_n = b->per * n;
      break;
    case C_ALLTOALL:
      b->per = count / n;
      b->send_n = b->recv_n = b->per * n;
      break;
    case C_BARRIER:
      b->send_n = b->recv_n = b->per = 0;
      b->bytes = 0;
      return 1;
  }
  if (b->per == 0) return 0;
  /* Total array size actually moved (rounded down to a multiple of n). */
  b->bytes = (o->coll == C_ALLREDUCE || o->coll == C_BROADCAST || o->coll == C_REDUCE)
                 ? count * sizeof(float)
                 : b->per * n * sizeof(float);
  return 1;
}

static void fill_inputs(const struct opts *o, struct bufs *b) {
  switch (o->coll) {
    case C_ALLGATHER:
      /* Rank r contributes block r of the gathered array. */
      for (size_t j = 0; j < b->send_n; j++) b->send[j] = val(g_rank, (size_t)g_rank * b->per + j);
      break;
    case C_BROADCAST:
      /* In place: only the root's contents matter. */
      for (size_t j = 0; j < b->send_n; j++) b->send[j] = g_rank == 0 ? val(0, j) : -1.0f;
      break;
    default:
      for (size_t j = 0; j < b->send_n; j++) b->send[j] = val(g_rank, j);
      break;
  }
  /* Touch the output too, so page faults are not timed. */
  for (size_t j = 0; j < b->recv_n; j++) b->recv[j] = -1.0f;
}

static void run_once(const struct opts *o, struct bufs *b) {
  int per = (int)b->per;
  switch (o->coll) {
    case C_ALLREDUCE:
      MPI_Allreduce(b->send, b->recv, (int)b->send_n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      break;
    case C_REDUCE_SCATTER:
      MPI_Reduce_scatter_block(b->send, b->recv, per, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      break;
    case C_ALLGATHER:
      MPI_Allgather(b->send, per, MPI_FLOAT, b->recv, per, MPI_FLOAT, MPI_COMM_WORLD);
      break;
    case C_ALLTOALL:
      MPI_Alltoall(b->send, per, MPI_FLOAT, b->recv, per, MPI_FLOAT, MPI_COMM_WORLD);
      break;
    case C_BROADCAST:
      MPI_Bcast(b->send, (int)b->send_n, MPI_FLOAT, 0, MPI_COMM_WORLD);
      break;
    case C_REDUCE:
      MPI_Reduce(b->send, b->recv, (int)b->send_n, MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD);
      break;
    case C_BARRIER:
      MPI_Barrier(MPI_COMM_WORLD);
      break;
  }
}

/* Runs the collective once more on sentinel-filled outputs and counts the
 * elements on this rank that differ from the expected value. */
static long long verify(const struct opts *o, struct bufs *b) {
  long long bad = 0;
  size_t n = (size_t)g_size;

  if (o->coll == C_BARRIER) return 0;
  if (o->coll == C_BROADCAST) {
    /* Broadcast is in place: reset non-roots so a no-op would be caught. */
    if (g_rank != 0)
      for (size_t j = 0; j < b->send_n; j++) b->send[j] = -1.0f;
  } else {
    for (size_t j = 0; j < b->recv_n; j++) b->recv[j] = -1.0f;
  }
  run_once(o, b);

  switch (o->coll) {
    case C_ALLREDUCE:
      for (size_t j = 0; j < b->recv_n; j++) bad += b->recv[j] != sumval(j);
      break;
    case C_REDUCE:
      if (g_rank == 0)
        for (size_t j = 0; j < b->recv_n; j++) bad += b->recv[j] != sumval(j);
      break;
    case C_REDUCE_SCATTER:
      /* Rank r receives block r of the element-wise sum. */
      for (size_t j = 0; j < b->per; j++) bad += b->recv[j] != sumval((size_t)g_rank * b->per + j);
      break;
    case C_ALLGATHER:
      for (size_t q = 0; q < n; q++)
        for (size_t j = 0; j < b->per; j++)
          bad += b->recv[q * b->per + j] != val((int)q, q * b->per + j);
      break;
    case C_ALLTOALL:
      /* Block q of my output is block `g_rank` of rank q's input. */
      for (size_t q = 0; q < n; q++)
        for (size_t j = 0; j < b->per; j++)
          bad += b->recv[q * b->per + j] != val((int)q, (size_t)g_rank * b->per + j);
      break;
    case C_BROADCAST:
      for (size_t j = 0; j < b->send_n; j++) bad += b->send[j] != val(0, j);
      break;
    case C_BARRIER:
      break;
  }
  return bad;
}

static double bus_factor(enum coll c) {
  double n = g_size;
  switch (c) {
    case C_ALLREDUCE:
      return 2.0 * (n - 1) / n;
    case C_REDUCE_SCATTER:
    case C_ALLGATHER:
    case C_ALLTOALL:
      return (n - 1) / n;
    default:
      return 1.0;
  }
}

static int is_reduction(enum coll c) {
  return c == C_ALLREDUCE || c == C_REDUCE_SCATTER || c == C_REDUCE;
}

static void *xmalloc(size_t n) {
  /* 64-byte alignment matches what bagua-bench's allocator gives. */
  void *p = NULL;
  if (n == 0) n = 64;
  if (posix_memalign(&p, 64, (n + 63) / 64 * 64)) die("%s", "out of memory");
  return p;
}

int main(int argc, char **argv) {
  struct opts o;

  /* MPI_Init's own time on this rank (the world's creation), for the scale comparison. */
  struct timespec t_init0, t_init1;
  clock_gettime(CLOCK_MONOTONIC, &t_init0);
  MPI_Init(&argc, &argv);
  clock_gettime(CLOCK_MONOTONIC, &t_init1);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  parse_args(argc, argv, &o);
  double init_s = (double)(t_init1.tv_sec - t_init0.tv_sec) +
                  (double)(t_init1.tv_nsec - t_init0.tv_nsec) / 1e9,
         init_max = 0;
  MPI_Reduce(&init_s, &init_max, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  if (g_rank == 0) printf("# created in %.3f s (MPI_Init, max over ranks)\n", init_max);

  /* MPI counts are int: refuse sizes that would overflow them. */
  if (o.max_bytes / sizeof(float) > (size_t)INT32_MAX)
    die("%s", "--max-bytes too large for int MPI counts");

  if (g_rank == 0) {
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(lib, &len);
    char *nl = strchr(lib, '\n');
    if (nl) *nl = '\0';
    printf(
        "# impl=ompi collective=%s nranks=%d iters=%d warmup=%d "
        "check=%d\n# lib=%s\n",
        o.coll_name, g_size, o.iters, o.warmup, o.check, lib);
    printf("# bytes count dtype op time_us algbw_GBps busbw_GBps wrong\n");
    fflush(stdout);
  }

  /* Allocate once for the largest size; smaller rows use a prefix. */
  struct bufs big;
  if (!layout(&o, o.max_bytes, &big)) big.send_n = big.recv_n = 0;
  float *sendbuf = xmalloc(big.send_n * sizeof(float));
  float *recvbuf = xmalloc(big.recv_n * sizeof(float));

  for (size_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= 2) {
    struct bufs b = {.send = sendbuf, .recv = recvbuf};
    if (!layout(&o, bytes, &b)) {
      if (g_rank == 0) printf("# skip bytes=%zu: fewer than one float per rank\n", bytes);
      continue;
    }
    fill_inputs(&o, &b);

    for (int i = 0; i < o.warmup; i++) run_once(&o, &b);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < o.iters; i++) run_once(&o, &b);
    double t = (MPI_Wtime() - t0) / o.iters;

    long long bad = o.check ? verify(&o, &b) : -1;
    double tmax = 0;
    long long badsum = 0;
    MPI_Reduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    MPI_Reduce(&bad, &badsum, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);

    if (g_rank == 0) {
      double algbw = tmax > 0 ? (double)b.bytes / tmax / 1e9 : 0.0;
      /* -1 in `wrong` means "not checked" (--no-check). */
      printf("%zu %zu f32 %s %.2f %.4f %.4f %lld\n", b.bytes, b.bytes / sizeof(float),
             is_reduction(o.coll) ? "sum" : "none", tmax * 1e6, algbw, algbw * bus_factor(o.coll),
             o.check ? badsum : -1LL);
      fflush(stdout);
    }
    if (o.coll == C_BARRIER) break; /* one row: barrier has no size */
  }

  free(sendbuf);
  free(recvbuf);
  MPI_Finalize();
  return 0;
}
