/*
 * bagua-bench: nccl-tests-style collective benchmark.
 *
 *   bagua-bench COLLECTIVE --nranks N [--transport tcp|shm|auto] [--dtype f32] [--op sum]
 *               [--min-bytes 8] [--max-bytes 256M] [--iters 20] [--warmup 5] [--check]
 *
 * Without RANK/WORLD_SIZE in the environment it forks N local ranks itself; with them it
 * runs as one rank of an outer launch (bagua-launch, mpirun, torchrun). Rank 0 prints one
 * row per size; the exit status is non-zero when any row has wrong elements or a rank fails.
 */
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bagua/bagua.h"
#include "kernels/kernels.h"

typedef enum {
  C_ALLREDUCE,
  C_REDUCE_SCATTER,
  C_ALLGATHER,
  C_ALLTOALL,
  C_BROADCAST,
  C_REDUCE,
  C_BARRIER,
  C_SENDRECV,
  C_NEIGHBORS,
  C__COUNT
} coll_t;
/* sendrecv is a ring shift: every rank sends the buffer to rank+1 and receives rank-1's.
 * neighbors is bagua_neighbor_exchange, what the decentralized algorithms make with both ring
 * neighbours at once: every rank sends half of the size to each neighbour (so the size is what
 * each rank sends in all, and busbw its egress rate) and receives both neighbours' halves.
 * With two ranks both halves come from the one peer, which sends its half once. */
static const char *k_coll[C__COUNT] = {"allreduce", "reduce_scatter", "allgather",
                                       "alltoall",  "broadcast",      "reduce",
                                       "barrier",   "sendrecv",       "neighbors"};

typedef struct {
  coll_t coll;
  int nranks, transport, iters, warmup, check;
  int node_per_rank; /* every forked rank declares a node of its own (BAGUA_NODE_ID) */
  bagua_dtype_t dt;
  bagua_op_t op;
  size_t min_bytes, max_bytes;
} opts_t;

extern int bagua__bench_kernel_main(int argc, char **argv) __attribute__((weak));
extern int bagua__bench_kernel_cuda_main(int argc, char **argv) __attribute__((weak));

static void usage(FILE *f) {
  fprintf(f,
          "usage: bagua-bench COLLECTIVE --nranks N [--transport tcp|shm|auto] [--dtype f32]\n"
          "                   [--op sum|avg|min|max] [--min-bytes 8] [--max-bytes 256M]\n"
          "                   [--iters 20] [--warmup 5] [--check] [--node-per-rank]\n"
          "       bagua-bench kernel NAME --bytes 64M\n"
          "COLLECTIVE: allreduce reduce_scatter allgather alltoall broadcast reduce barrier\n"
          "            sendrecv (a ring shift: send to rank+1, receive from rank-1)\n"
          "            neighbors (half of the size to each ring neighbour at once)\n"
          "--node-per-rank: every rank is a node of its own (TCP between all of them), as the\n"
          "ranks of one host per node would be; the creation time of the communicator and of\n"
          "its first barrier (max over ranks) head the table.\n");
}

static int parse_size(const char *s, size_t *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || v < 0) return -1;
  double mult = 1;
  if (*end == 'K' || *end == 'k')
    mult = 1024, end++;
  else if (*end == 'M' || *end == 'm')
    mult = 1024.0 * 1024, end++;
  else if (*end == 'G' || *end == 'g')
    mult = 1024.0 * 1024 * 1024, end++;
  if (*end == 'B' || *end == 'b') end++;
  if (*end) return -1;
  *out = (size_t)(v * mult);
  return 0;
}

static int parse_int(const char *s, int lo, int hi, int *out) {
  char *end;
  long v = strtol(s, &end, 10);
  if (end == s || *end || v < lo || v > hi) return -1;
  *out = (int)v;
  return 0;
}

static int parse(int argc, char **argv, opts_t *o) {
  *o = (opts_t){C_ALLREDUCE, 2,         BAGUA_TRANSPORT_AUTO, 20, 5, 0, 0, BAGUA_F32, BAGUA_SUM,
                8,           256u << 20};
  int c = -1;
  for (int i = 0; i < C__COUNT; i++)
    if (strcmp(argv[1], k_coll[i]) == 0) c = i;
  if (c < 0) {
    fprintf(stderr, "bagua-bench: unknown collective \"%s\"\n", argv[1]);
    usage(stderr);
    return -1;
  }
  o->coll = (coll_t)c;
  for (int i = 2; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    int bad = 0;
    if (strcmp(a, "--check") == 0) {
      o->check = 1;
      continue;
    }
    if (strcmp(a, "--node-per-rank") == 0) {
      o->node_per_rank = 1;
      continue;
    }
    if (!v) {
      fprintf(stderr, "bagua-bench: %s needs a value\n", a);
      return -1;
    }
    if (strcmp(a, "--nranks") == 0)
      bad = parse_int(v, 1, 4096, &o->nranks);
    else if (strcmp(a, "--iters") == 0)
      bad = parse_int(v, 1, 1000000, &o->iters);
    else if (strcmp(a, "--warmup") == 0)
      bad = parse_int(v, 0, 1000000, &o->warmup);
    else if (strcmp(a, "--min-bytes") == 0)
      bad = parse_size(v, &o->min_bytes);
    else if (strcmp(a, "--max-bytes") == 0)
      bad = parse_size(v, &o->max_bytes);
    else if (strcmp(a, "--dtype") == 0)
      bad = (int)(o->dt = (bagua_dtype_t)bagua_dtype_parse(v)) < 0;
    else if (strcmp(a, "--op") == 0)
      bad = (int)(o->op = (bagua_op_t)bagua_op_parse(v)) < 0;
    else if (strcmp(a, "--transport") == 0) {
      if (strcmp(v, "auto") == 0)
        o->transport = BAGUA_TRANSPORT_AUTO;
      else if (strcmp(v, "tcp") == 0)
        o->transport = BAGUA_TRANSPORT_TCP;
      else if (strcmp(v, "shm") == 0)
        o->transport = BAGUA_TRANSPORT_SHM;
      else
        bad = 1;
    } else {
      fprintf(stderr, "bagua-bench: unknown option %s\n", a);
      usage(stderr);
      return -1;
    }
    if (bad) {
      fprintf(stderr, "bagua-bench: bad value \"%s\" for %s\n", v, a);
      return -1;
    }
    i++;
  }
  if (o->min_bytes > o->max_bytes) {
    fprintf(stderr, "bagua-bench: --min-bytes is larger than --max-bytes\n");
    return -1;
  }
  return 0;
}

/* Test values whose sums over up to 8 ranks are exact in every dtype, u8 and bf16 included. */
static double val(int rank, size_t i) {
  return (double)((rank % 3) + 1) * (double)((i % 5) + 1);
}

static void store(bagua_dtype_t dt, void *b, size_t i, double v) {
  switch (dt) {
    case BAGUA_F32:
      ((float *)b)[i] = (float)v;
      break;
    case BAGUA_F64:
      ((double *)b)[i] = v;
      break;
    case BAGUA_I32:
      ((int32_t *)b)[i] = (int32_t)v;
      break;
    case BAGUA_I64:
      ((int64_t *)b)[i] = (int64_t)v;
      break;
    case BAGUA_U8:
      ((uint8_t *)b)[i] = (uint8_t)v;
      break;
    case BAGUA_F16:
      ((uint16_t *)b)[i] = bagua__f32_to_f16((float)v);
      break;
    case BAGUA_BF16:
      ((uint16_t *)b)[i] = bagua__f32_to_bf16((float)v);
      break;
    default:
      break;
  }
}

static double load(bagua_dtype_t dt, const void *b, size_t i) {
  switch (dt) {
    case BAGUA_F32:
      return ((const float *)b)[i];
    case BAGUA_F64:
      return ((const double *)b)[i];
    case BAGUA_I32:
      return ((const int32_t *)b)[i];
    case BAGUA_I64:
      return (double)((const int64_t *)b)[i];
    case BAGUA_U8:
      return ((const uint8_t *)b)[i];
    case BAGUA_F16:
      return bagua__f16_to_f32(((const uint16_t *)b)[i]);
    case BAGUA_BF16:
      return bagua__bf16_to_f32(((const uint16_t *)b)[i]);
    default:
      return 0;
  }
}

/* The reduction of element i over all ranks, as the communicator should compute it. */
static double expect_reduced(const opts_t *o, int n, size_t i) {
  double acc = val(0, i);
  for (int r = 1; r < n; r++) {
    double v = val(r, i);
    acc = o->op == BAGUA_MIN ? fmin(acc, v) : o->op == BAGUA_MAX ? fmax(acc, v) : acc + v;
  }
  if (o->op == BAGUA_AVG) {
    acc /= n;
    if (o->dt == BAGUA_I32 || o->dt == BAGUA_I64 || o->dt == BAGUA_U8) acc = trunc(acc);
  }
  return acc;
}

static int close_enough(bagua_dtype_t dt, double got, double want) {
  double tol = dt == BAGUA_BF16 ? 1e-2 : dt == BAGUA_F16 ? 1e-3 : 1e-6;
  return fabs(got - want) <= tol * fmax(1.0, fabs(want));
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static bagua_status_t run_once(const opts_t *o, bagua_comm_t *c, void *s, void *r, size_t count) {
  int n = bagua_comm_size(c);
  switch (o->coll) {
    case C_ALLREDUCE:
      return bagua_allreduce(c, s, r, count, o->dt, o->op);
    case C_REDUCE_SCATTER:
      return bagua_reduce_scatter(c, s, r, count / n, o->dt, o->op);
    case C_ALLGATHER:
      return bagua_allgather(c, s, r, count / n, o->dt);
    case C_ALLTOALL:
      return bagua_alltoall(c, s, r, count / n, o->dt);
    case C_BROADCAST:
      return bagua_broadcast(c, s, r, count, o->dt, 0);
    case C_REDUCE:
      return bagua_reduce(c, s, r, count, o->dt, o->op, 0);
    case C_BARRIER:
      return bagua_barrier(c);
    case C_SENDRECV:
      return bagua_sendrecv(c, s, count, (bagua_comm_rank(c) + 1) % n, r, count,
                            (bagua_comm_rank(c) + n - 1) % n, o->dt);
    case C_NEIGHBORS: {
      int rank = bagua_comm_rank(c);
      char *right = (char *)r + count / 2 * bagua_dtype_size(o->dt);
      return bagua_neighbor_exchange(c, s, count / 2, (rank + n - 1) % n, r, (rank + 1) % n, right,
                                     o->dt);
    }
    default:
      return BAGUA_ERR_INVALID_ARG;
  }
}

static void fill(const opts_t *o, int rank, int n, void *s, size_t count) {
  for (size_t i = 0; i < count; i++) {
    /* alltoall: block p of rank r carries r's values offset by the destination p. */
    double v =
        o->coll == C_ALLTOALL ? val(rank, i % (count / n) + (i / (count / n)) * 7) : val(rank, i);
    store(o->dt, s, i, v);
  }
}

static size_t count_wrong(const opts_t *o, int rank, int n, const void *r, size_t count) {
  size_t wrong = 0, blk = count / (size_t)n;
  switch (o->coll) {
    case C_ALLREDUCE:
    case C_REDUCE:
      if (o->coll == C_REDUCE && rank != 0) return 0;
      for (size_t i = 0; i < count; i++)
        wrong += !close_enough(o->dt, load(o->dt, r, i), expect_reduced(o, n, i));
      break;
    case C_REDUCE_SCATTER:
      for (size_t i = 0; i < blk; i++)
        wrong +=
            !close_enough(o->dt, load(o->dt, r, i), expect_reduced(o, n, (size_t)rank * blk + i));
      break;
    case C_ALLGATHER:
      for (size_t i = 0; i < blk * (size_t)n; i++)
        wrong += !close_enough(o->dt, load(o->dt, r, i), val((int)(i / blk), i % blk));
      break;
    case C_ALLTOALL:
      for (size_t i = 0; i < blk * (size_t)n; i++)
        wrong += !close_enough(o->dt, load(o->dt, r, i),
                               val((int)(i / blk), i % blk + (size_t)rank * 7));
      break;
    case C_BROADCAST:
      for (size_t i = 0; i < count; i++)
        wrong += !close_enough(o->dt, load(o->dt, r, i), val(0, i));
      break;
    case C_SENDRECV:
      for (size_t i = 0; i < count; i++)
        wrong += !close_enough(o->dt, load(o->dt, r, i), val((rank + n - 1) % n, i));
      break;
    case C_NEIGHBORS:
      for (size_t i = 0; i < count / 2 * 2; i++) {
        int from = i < count / 2 ? (rank + n - 1) % n : (rank + 1) % n;
        wrong += !close_enough(o->dt, load(o->dt, r, i), val(from, i % (count / 2)));
      }
      break;
    default:
      break;
  }
  return wrong;
}

static double busbw_factor(coll_t c, int n) {
  switch (c) {
    case C_ALLREDUCE:
      return 2.0 * (n - 1) / n;
    case C_REDUCE_SCATTER:
    case C_ALLGATHER:
    case C_ALLTOALL:
      return (double)(n - 1) / n;
    case C_NEIGHBORS:
      /* With two ranks both neighbours are one peer: one half crosses the link, once. */
      return n == 2 ? 0.5 : 1.0;
    default:
      return 1.0;
  }
}

static int run_rank(const opts_t *o, bagua_comm_config_t *cfg) {
  bagua_comm_t *c = NULL;
  double t_create = now_s();
  bagua_status_t st = bagua_comm_create(cfg, &c);
  t_create = now_s() - t_create;
  if (st != BAGUA_OK) {
    fprintf(stderr, "bagua-bench: communicator creation failed: %s (%s)\n", bagua_strerror(st),
            bagua_last_error());
    return 2;
  }
  int rank = bagua_comm_rank(c), n = bagua_comm_size(c), bad = 0;
  /* The first barrier opens whatever streams creation left for first use. */
  double t_first = now_s();
  st = bagua_barrier(c);
  t_first = now_s() - t_first;
  double times[2] = {t_create, t_first}, tmax_init[2] = {0, 0};
  if (st == BAGUA_OK) st = bagua_allreduce(c, times, tmax_init, 2, BAGUA_F64, BAGUA_MAX);
  if (st != BAGUA_OK) {
    fprintf(stderr, "bagua-bench: rank %d: the first barrier failed: %s (%s)\n", rank,
            bagua_strerror(st), bagua_last_error());
    return 2;
  }
  size_t es = bagua_dtype_size(o->dt);
  void *s = malloc(o->max_bytes + 64), *r = malloc(o->max_bytes + 64);
  if (!s || !r) {
    fprintf(stderr, "bagua-bench: cannot allocate %zu bytes\n", o->max_bytes);
    return 2;
  }
  if (rank == 0) {
    printf("# bagua-bench %s nranks=%d transport=%s dtype=%s op=%s iters=%d warmup=%d kernels=%s\n",
           k_coll[o->coll], n, bagua_comm_transport_name(c), bagua_dtype_name(o->dt),
           bagua_op_name(o->op), o->iters, o->warmup, bagua__kernels_isa());
    printf("# created in %.3f s, first barrier %.3f s (max over ranks)\n", tmax_init[0],
           tmax_init[1]);
    printf("%12s %12s %5s %4s %12s %11s %11s %8s\n", "bytes", "count", "dtype", "op", "time_us",
           "algbw_GBps", "busbw_GBps", "wrong");
    fflush(stdout);
  }
  for (size_t bytes = o->min_bytes;; bytes *= 2) {
    if (bytes > o->max_bytes) break;
    size_t count = bytes / es;
    if (o->coll == C_REDUCE_SCATTER || o->coll == C_ALLGATHER || o->coll == C_ALLTOALL)
      count = count / (size_t)n * (size_t)n;
    if (o->coll == C_NEIGHBORS) count = count / 2 * 2;
    if (o->coll == C_BARRIER) count = 0;
    fill(o, rank, n, s, count);
    for (int i = 0; i < o->warmup && st == BAGUA_OK; i++) st = run_once(o, c, s, r, count);
    if (st == BAGUA_OK) st = bagua_barrier(c);
    double t0 = now_s();
    for (int i = 0; i < o->iters && st == BAGUA_OK; i++) st = run_once(o, c, s, r, count);
    double t = (now_s() - t0) / o->iters;
    if (st != BAGUA_OK) {
      fprintf(stderr, "bagua-bench: rank %d: %s failed at %zu bytes: %s (%s)\n", rank,
              k_coll[o->coll], bytes, bagua_strerror(st), bagua_last_error());
      bad = 1;
      break;
    }
    double stats[2] = {t, o->check ? (double)count_wrong(o, rank, n, r, count) : 0};
    double tmax[2];
    st = bagua_allreduce(c, &stats[0], &tmax[0], 1, BAGUA_F64, BAGUA_MAX);
    if (st == BAGUA_OK) st = bagua_allreduce(c, &stats[1], &tmax[1], 1, BAGUA_F64, BAGUA_SUM);
    if (st != BAGUA_OK) {
      fprintf(stderr, "bagua-bench: rank %d: gathering the results of %zu bytes failed: %s (%s)\n",
              rank, bytes, bagua_strerror(st), bagua_last_error());
      bad = 1;
      break;
    }
    size_t used = count * es;
    double algbw = (double)used / tmax[0] / 1e9;
    if (rank == 0) {
      printf("%12zu %12zu %5s %4s %12.2f %11.3f %11.3f %8.0f\n", used, count,
             bagua_dtype_name(o->dt), bagua_op_name(o->op), tmax[0] * 1e6, algbw,
             algbw * busbw_factor(o->coll, n), tmax[1]);
      fflush(stdout);
    }
    if (tmax[1] > 0) bad = 1;
    if (o->coll == C_BARRIER || bytes == 0) break;
  }
  free(s);
  free(r);
  bagua_comm_destroy(c);
  return bad;
}

static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof(sa);
  if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
      getsockname(fd, (struct sockaddr *)&sa, &len) != 0) {
    if (fd >= 0) close(fd);
    return -1;
  }
  close(fd);
  return ntohs(sa.sin_port);
}

int main(int argc, char **argv) {
  if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (strcmp(argv[1], "kernel") == 0) {
    for (int i = 2; i + 1 < argc; i++) {
      if (strcmp(argv[i], "--device") != 0 || strcmp(argv[i + 1], "cpu") == 0) continue;
      if (strcmp(argv[i + 1], "cuda") != 0 || !bagua__bench_kernel_cuda_main) {
        fprintf(stderr, "bagua-bench: --device %s is not available in this build\n", argv[i + 1]);
        return 2;
      }
      return bagua__bench_kernel_cuda_main(argc - 1, argv + 1);
    }
    if (!bagua__bench_kernel_main) {
      fprintf(stderr, "bagua-bench: kernel benchmarks are not built in this binary\n");
      return 2;
    }
    return bagua__bench_kernel_main(argc - 1, argv + 1);
  }
  opts_t o;
  if (parse(argc, argv, &o) != 0) return 2;
  bagua_comm_config_t cfg = BAGUA_COMM_CONFIG_INIT;
  cfg.transport = o.transport;
  if (bagua_param_get("RANK") && bagua_param_get("WORLD_SIZE")) return run_rank(&o, &cfg);
  int port = free_port();
  if (port < 0) {
    fprintf(stderr, "bagua-bench: cannot find a free loopback port\n");
    return 2;
  }
  char boot[64];
  snprintf(boot, sizeof(boot), "tcp://127.0.0.1:%d", port);
  cfg.bootstrap = boot;
  cfg.size = o.nranks;
  fflush(stdout);
  pid_t *pids = calloc((size_t)o.nranks, sizeof(pid_t));
  for (int r = 0; r < o.nranks; r++) {
    pids[r] = fork();
    if (pids[r] == 0) {
      char node[32];
      cfg.rank = r;
      if (o.node_per_rank) {
        snprintf(node, sizeof(node), "rank%d", r);
        cfg.node_id = node;
      }
      _exit(run_rank(&o, &cfg));
    }
    if (pids[r] < 0) {
      perror("bagua-bench: fork");
      return 2;
    }
  }
  int rc = 0;
  for (int r = 0; r < o.nranks; r++) {
    int status = 0;
    waitpid(pids[r], &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      if (WIFSIGNALED(status))
        fprintf(stderr, "bagua-bench: rank %d killed by signal %d\n", r, WTERMSIG(status));
      else
        fprintf(stderr, "bagua-bench: rank %d exited with status %d\n", r, WEXITSTATUS(status));
      rc = 1;
    }
  }
  free(pids);
  return rc;
}
