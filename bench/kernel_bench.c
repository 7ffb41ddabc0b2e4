/*
 * `bagua-bench kernel`: single-thread throughput of the CPU kernels on buffers much larger
 * than the caches, next to memcpy measured in the same run, since memcpy is the practical
 * ceiling for a streaming kernel on one core. Owned by the kernels engineer.
 *
 * For every kernel two rates are printed: "data" is the size of one f32 array (--bytes)
 * processed per second, the number a user of the kernel cares about; "traffic" counts every
 * byte the kernel must load or store (for example 3x for dst += src), which is what memory
 * bandwidth limits, and "vs memcpy" divides it by memcpy's traffic (2x its copy size). Each
 * figure is the median of --iters timed runs after one untimed warm-up run.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/bench.h"
#include "kernels/kernels.h"

typedef struct {
  size_t bytes; /* size of each f32-sized array */
  int iters;
  bagua_dtype_t dt;
  bagua_op_t op;
  size_t chunks;
  int srcs; /* sources of reduce_n */
} opts_t;

/* Buffers shared by the kernels: a, b, c, d, e hold `bytes` each, q the compressed form. */
typedef struct {
  unsigned char *a, *b, *c, *d, *e, *q;
  size_t n_f32;
} bufs_t;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return a < b ? -1 : a > b;
}

static int parse_size(const char *s, size_t *out) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s) return -1;
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
  if (*end == 'i' || *end == 'B') end++;
  if (*end == 'B') end++;
  if (*end != '\0' || v == 0) return -1;
  *out = (size_t)v;
  return 0;
}

/* Runs the kernel named `name` once. Returns -1 if the name is unknown. */
static int run_once(const char *name, const opts_t *o, bufs_t *b) {
  size_t n = b->n_f32, chunk = n / o->chunks;
  if (strcmp(name, "memcpy") == 0) {
    memcpy(b->a, b->b, o->bytes);
  } else if (strcmp(name, "reduce") == 0) {
    bagua__reduce(o->dt, o->op, b->a, b->b, o->bytes / bagua_dtype_size(o->dt));
  } else if (strcmp(name, "reduce_n") == 0) {
    const void *srcs[4] = {b->a, b->b, b->c, b->d};
    bagua__reduce_n(o->dt, o->op, b->e, srcs, o->srcs, o->bytes / bagua_dtype_size(o->dt));
  } else if (strcmp(name, "quantize") == 0) {
    bagua__minmax_u8_compress(BAGUA_F32, b->a, chunk, o->chunks, b->q);
  } else if (strcmp(name, "dequantize") == 0) {
    bagua__minmax_u8_decompress(BAGUA_F32, b->q, chunk, o->chunks, b->c);
  } else if (strcmp(name, "dequantize_add") == 0) {
    bagua__minmax_u8_decompress_add(BAGUA_F32, b->q, chunk, o->chunks, (float *)b->c);
  } else if (strcmp(name, "axpy") == 0) {
    bagua__axpy(1e-3f, (const float *)b->b, (float *)b->a, n);
  } else if (strcmp(name, "sgd") == 0) {
    static const bagua__sgd_params_t hp = {0.01, 0.9, 0, 1e-4, 0};
    bagua__sgd_step((float *)b->a, (const float *)b->b, (float *)b->c, n, &hp, 0);
  } else if (strcmp(name, "adam") == 0) {
    static const bagua__adam_params_t hp = {1e-3, 0.9, 0.999, 1e-8, 1e-2, 1};
    bagua__adam_step((float *)b->a, (const float *)b->b, (float *)b->c, (float *)b->d, n, &hp, 10);
  } else {
    return -1;
  }
  return 0;
}

/* Logical bytes loaded plus stored per run, as a multiple of --bytes. */
static double traffic_factor(const char *name, const opts_t *o) {
  if (strcmp(name, "memcpy") == 0) return 2;
  if (strcmp(name, "reduce") == 0) return 3;             /* read dst, read src, write dst */
  if (strcmp(name, "reduce_n") == 0) return o->srcs + 1; /* read every source, write dst */
  if (strcmp(name, "quantize") == 0) return 2.25;        /* min/max pass, quantize pass, 1/4 out */
  if (strcmp(name, "dequantize") == 0) return 1.25;      /* 1/4 in, write f32 */
  if (strcmp(name, "dequantize_add") == 0) return 2.25;  /* 1/4 in, read and write acc */
  if (strcmp(name, "axpy") == 0) return 3;
  if (strcmp(name, "sgd") == 0) return 5;  /* param rw, grad r, momentum rw */
  if (strcmp(name, "adam") == 0) return 7; /* param, m, v rw; grad r */
  return 0;
}

static double bench_one(const char *name, const opts_t *o, bufs_t *b) {
  double *t = calloc((size_t)o->iters, sizeof(double));
  if (!t) return -1;
  run_once(name, o, b); /* warm-up: page faults, caches, dispatch */
  for (int i = 0; i < o->iters; i++) {
    double t0 = now_s();
    run_once(name, o, b);
    t[i] = now_s() - t0;
  }
  qsort(t, (size_t)o->iters, sizeof(double), cmp_double);
  double med = t[o->iters / 2];
  free(t);
  return med;
}

static void usage(void) {
  fprintf(stderr,
          "usage: bagua-bench kernel [memcpy|reduce|reduce_n|quantize|dequantize|dequantize_add|"
          "axpy|sgd|adam|all]\n"
          "       [--bytes SIZE (64M)] [--isa scalar|avx2|avx512|avx512zmm] [--iters N (5)]\n"
          "       [--dtype f32 (reduce*)] [--op sum (reduce*)] [--srcs N (4, reduce_n)]\n"
          "       [--chunks N (8, quantize)]\n");
}

static void fill_f32(unsigned char *p, size_t n, unsigned seed) {
  float *f = (float *)p;
  uint32_t s = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; i++) {
    s = s * 1664525u + 1013904223u;
    f[i] = (float)(s >> 8) * (1.0f / 16777216.0f) - 0.5f;
  }
}

int bagua__bench_kernel_main(int argc, char **argv) {
  opts_t o = {64u << 20, 5, BAGUA_F32, BAGUA_SUM, 8, 4};
  const char *name = "all", *isa = NULL;
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
    if (arg[0] != '-') {
      name = arg;
      continue;
    }
    if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
      usage();
      return 0;
    }
    if (!val) {
      usage();
      return 2;
    }
    i++;
    if (strcmp(arg, "--bytes") == 0) {
      if (parse_size(val, &o.bytes) != 0) {
        fprintf(stderr, "kernel: bad --bytes '%s' (e.g. 64M, 1G, 4096)\n", val);
        return 2;
      }
    } else if (strcmp(arg, "--iters") == 0) {
      o.iters = atoi(val);
      if (o.iters < 1) o.iters = 1;
    } else if (strcmp(arg, "--isa") == 0) {
      isa = val;
    } else if (strcmp(arg, "--dtype") == 0) {
      int dt = bagua_dtype_parse(val);
      if (dt < 0) {
        fprintf(stderr, "kernel: unknown --dtype '%s'\n", val);
        return 2;
      }
      o.dt = (bagua_dtype_t)dt;
    } else if (strcmp(arg, "--op") == 0) {
      int op = bagua_op_parse(val);
      if (op < 0) {
        fprintf(stderr, "kernel: unknown --op '%s'\n", val);
        return 2;
      }
      o.op = (bagua_op_t)op;
    } else if (strcmp(arg, "--srcs") == 0) {
      o.srcs = atoi(val);
      if (o.srcs < 1 || o.srcs > 4) {
        fprintf(stderr, "kernel: --srcs must be 1 to 4\n");
        return 2;
      }
    } else if (strcmp(arg, "--chunks") == 0) {
      o.chunks = (size_t)atol(val);
      if (o.chunks < 1) o.chunks = 1;
    } else {
      fprintf(stderr, "kernel: unknown option '%s'\n", arg);
      usage();
      return 2;
    }
  }
  if (isa && bagua__kernels_force_isa(isa) != 0) {
    fprintf(stderr, "kernel: --isa %s is unknown or not supported by this CPU\n", isa);
    return 2;
  }
  static const char *const all[] = {"reduce",         "reduce_n", "quantize", "dequantize",
                                    "dequantize_add", "axpy",     "sgd",      "adam"};
  size_t n_names = sizeof(all) / sizeof(all[0]);
  const char *const *names = all;
  if (strcmp(name, "all") != 0) {
    if (traffic_factor(name, &o) == 0) {
      fprintf(stderr, "kernel: unknown kernel '%s'\n", name);
      usage();
      return 2;
    }
    names = &name;
    n_names = 1;
  }
  o.bytes &= ~(size_t)63; /* whole f32/f64 elements in every dtype */
  if (o.bytes == 0) o.bytes = 64;

  bufs_t b;
  b.n_f32 = o.bytes / 4;
  if (o.chunks > b.n_f32) o.chunks = b.n_f32;
  size_t qbytes = bagua__minmax_u8_compressed_size(b.n_f32 / o.chunks, BAGUA_F32) * o.chunks;
  size_t alloc = (o.bytes + 63) & ~(size_t)63;
  b.a = aligned_alloc(64, alloc);
  b.b = aligned_alloc(64, alloc);
  b.c = aligned_alloc(64, alloc);
  b.d = aligned_alloc(64, alloc);
  b.e = aligned_alloc(64, alloc);
  b.q = aligned_alloc(64, (qbytes + 63) & ~(size_t)63);
  if (!b.a || !b.b || !b.c || !b.d || !b.e || !b.q) {
    fprintf(stderr, "kernel: cannot allocate 5 x %zu bytes\n", o.bytes);
    return 1;
  }
  /* Small finite values everywhere so no kernel meets NaN/inf slow paths or overflows. */
  fill_f32(b.a, b.n_f32, 1);
  fill_f32(b.b, b.n_f32, 2);
  fill_f32(b.c, b.n_f32, 3);
  memset(b.e, 0, o.bytes);
  for (size_t i = 0; i < b.n_f32; i++) ((float *)b.d)[i] = 1e-4f; /* adam's v must be >= 0 */
  memset(b.q, 0, qbytes);
  bagua__minmax_u8_compress(BAGUA_F32, b.a, b.n_f32 / o.chunks, o.chunks, b.q);
  if (o.dt != BAGUA_F32) memset(b.a, 0, o.bytes), memset(b.b, 0, o.bytes);

  printf("kernel bench: isa=%s bytes=%zu (%.1f MiB per array) iters=%d (median), one thread\n",
         bagua__kernels_isa(), o.bytes, (double)o.bytes / (1 << 20), o.iters);
  double t_copy = bench_one("memcpy", &o, &b);
  double copy_gbs = (double)o.bytes / t_copy * 1e-9, copy_traffic = 2 * copy_gbs;
  printf("%-15s %9s %10s %12s %14s\n", "kernel", "ms", "data GB/s", "traffic GB/s",
         "traffic/memcpy");
  printf("%-15s %9.3f %10.2f %12.2f %14.2f\n", "memcpy", t_copy * 1e3, copy_gbs, copy_traffic, 1.0);
  for (size_t i = 0; i < n_names; i++) {
    if (o.dt != BAGUA_F32 && strncmp(names[i], "reduce", 6) != 0) continue;
    double t = bench_one(names[i], &o, &b);
    double gbs = (double)o.bytes / t * 1e-9, traffic = gbs * traffic_factor(names[i], &o);
    char label[64];
    if (strcmp(names[i], "reduce") == 0)
      snprintf(label, sizeof(label), "reduce %s %s", bagua_dtype_name(o.dt), bagua_op_name(o.op));
    else if (strcmp(names[i], "reduce_n") == 0)
      snprintf(label, sizeof(label), "reduce_n x%d %s", o.srcs, bagua_dtype_name(o.dt));
    else
      snprintf(label, sizeof(label), "%s", names[i]);
    printf("%-15s %9.3f %10.2f %12.2f %14.2f\n", label, t * 1e3, gbs, traffic,
           traffic / copy_traffic);
  }
  free(b.a);
  free(b.b);
  free(b.c);
  free(b.d);
  free(b.e);
  free(b.q);
  return 0;
}
