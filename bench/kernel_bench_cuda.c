/*
 * `bagua-bench kernel NAME --device cuda`: throughput of the CUDA kernels (kernels/cuda) next to
 * a device-to-device cudaMemcpy of 256 MiB measured in the same run, the practical ceiling of a
 * kernel that streams memory. Owned by the kernels engineer; built only with CUDA.
 *
 * Two rates are printed per kernel, as in the CPU benchmark (bench/kernel_bench.c): "data" is
 * --bytes processed per second; "traffic" counts every byte the kernel must read or write (for
 * example 3x for y += a*x, 2.25x for MinMaxUInt8 compression of large f32 chunks: two reads
 * and a quarter-size write), and "traffic/memcpy" divides it by the cudaMemcpy traffic rate (2x
 * its copy size). Times come from CUDA events around each launch; each figure is the median of
 * --iters runs after one untimed warm-up run.
 */
#include <cuda_runtime_api.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/kernels.h"

int bagua__bench_kernel_cuda_main(int argc, char **argv);

enum { MEMCPY_REF_BYTES = 256 << 20 };

typedef struct {
  size_t bytes;
  int iters, srcs, gpu;
  size_t chunks;
  bagua_dtype_t dt;
  bagua_op_t op;
} opts_t;

/*
 * x0..x4 hold n elements of --dtype each (at least 256 MiB, for the reference copy); p, m, v
 * are the optimizers' f32 parameters and state; q the compressed form of x1.
 */
typedef struct {
  void *x[5], *q;
  float *p, *m, *v;
  size_t n, xbytes, qbytes;
} bufs_t;

#define CK(call)                                                                        \
  do {                                                                                  \
    cudaError_t e_ = (call);                                                            \
    if (e_ != cudaSuccess) {                                                            \
      fprintf(stderr, "kernel --device cuda: %s: %s\n", #call, cudaGetErrorString(e_)); \
      return -1;                                                                        \
    }                                                                                   \
  } while (0)

static int parse_size(const char *s, size_t *out) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s) return -1;
  if (*end == 'k' || *end == 'K')
    v <<= 10, end++;
  else if (*end == 'm' || *end == 'M')
    v <<= 20, end++;
  else if (*end == 'g' || *end == 'G')
    v <<= 30, end++;
  if (*end == 'i') end++;
  if (*end == 'B') end++;
  if (*end != '\0' || v == 0) return -1;
  *out = (size_t)v;
  return 0;
}

static int cmp_float(const void *x, const void *y) {
  float a = *(const float *)x, b = *(const float *)y;
  return a < b ? -1 : a > b;
}

/* Enqueues one run of kernel `name`; 1 if the name is unknown, -1 on an error. */
static int run_once(const char *name, const opts_t *o, bufs_t *b, cudaStream_t s) {
  size_t chunk = b->n / o->chunks;
  bagua_status_t st = BAGUA_OK;
  if (strcmp(name, "memcpy") == 0) {
    CK(cudaMemcpyAsync(b->x[0], b->x[1], o->bytes, cudaMemcpyDeviceToDevice, s));
  } else if (strcmp(name, "reduce") == 0) {
    const void *srcs[2] = {b->x[0], b->x[1]}; /* x0 = x0 op x1, in place */
    st = bagua__cuda_reduce_n(o->dt, o->op, b->x[0], srcs, 2, b->n, s);
  } else if (strcmp(name, "reduce_n") == 0) {
    const void *srcs[4] = {b->x[0], b->x[1], b->x[2], b->x[3]};
    st = bagua__cuda_reduce_n(o->dt, o->op, b->x[4], srcs, o->srcs, b->n, s);
  } else if (strcmp(name, "quantize") == 0) {
    st = bagua__cuda_minmax_u8_compress(o->dt, b->x[1], chunk, o->chunks, b->q, s);
  } else if (strcmp(name, "dequantize") == 0) {
    st = bagua__cuda_minmax_u8_decompress(o->dt, b->q, chunk, o->chunks, b->x[2], s);
  } else if (strcmp(name, "dequantize_add") == 0) {
    st = bagua__cuda_minmax_u8_decompress_add(o->dt, b->q, chunk, o->chunks, b->m, s);
  } else if (strcmp(name, "axpy") == 0) {
    st = bagua__cuda_axpy(o->dt, 1e-3f, b->x[1], b->x[0], b->n, s);
  } else if (strcmp(name, "scale") == 0) {
    st = bagua__cuda_scale(o->dt, 0.999f, b->x[0], b->n, s);
  } else if (strcmp(name, "sgd") == 0) {
    static const bagua__sgd_params_t hp = {0.01, 0.9, 0, 1e-4, 0};
    st = bagua__cuda_sgd_step(b->p, b->x[1], o->dt, b->m, b->n, &hp, 0, s);
  } else if (strcmp(name, "adam") == 0) {
    static const bagua__adam_params_t hp = {1e-3, 0.9, 0.999, 1e-8, 1e-2, 1};
    st = bagua__cuda_adam_step(b->p, b->x[1], o->dt, b->m, b->v, b->n, &hp, 10, s);
  } else {
    return 1;
  }
  if (st != BAGUA_OK) {
    fprintf(stderr, "kernel --device cuda: %s: %s (%s)\n", name, bagua_err_name(st),
            bagua_last_error());
    return -1;
  }
  return 0;
}

/*
 * Bytes the kernel must move per run, from the element counts. For the optimizers the
 * parameters and state are f32 and only the gradient has --dtype.
 */
static double traffic_bytes(const char *name, const opts_t *o, const bufs_t *b) {
  double n = (double)b->n, es = (double)bagua_dtype_size(o->dt);
  size_t chunk = b->n / o->chunks;
  if (strcmp(name, "memcpy") == 0) return 2 * (double)o->bytes;
  if (strcmp(name, "reduce") == 0) return 3 * n * es;
  if (strcmp(name, "reduce_n") == 0) return (o->srcs + 1) * n * es;
  /* Chunks of at most 8192 elements are read once, larger ones twice (kernels/cuda). */
  if (strcmp(name, "quantize") == 0) return (chunk <= 8192 ? 1 : 2) * n * es + n;
  if (strcmp(name, "dequantize") == 0) return n + n * es;
  if (strcmp(name, "dequantize_add") == 0) return n + 2 * n * 4;
  if (strcmp(name, "axpy") == 0) return 3 * n * es;
  if (strcmp(name, "scale") == 0) return 2 * n * es;
  if (strcmp(name, "sgd") == 0) return n * (4 * 4 + es);  /* param rw, momentum rw, grad r */
  if (strcmp(name, "adam") == 0) return n * (6 * 4 + es); /* param, m, v rw; grad r */
  return 0;
}

/* Median seconds of `iters` runs; -1 on error. */
static double bench_one(const char *name, const opts_t *o, bufs_t *b, cudaStream_t s,
                        cudaEvent_t *ev) {
  float *ms = calloc((size_t)o->iters, sizeof(float));
  if (!ms) return -1;
  double result = -1;
  if (run_once(name, o, b, s) != 0 || cudaStreamSynchronize(s) != cudaSuccess) goto out;
  for (int i = 0; i < o->iters; i++) {
    if (cudaEventRecord(ev[2 * i], s) != cudaSuccess || run_once(name, o, b, s) != 0 ||
        cudaEventRecord(ev[2 * i + 1], s) != cudaSuccess)
      goto out;
  }
  if (cudaStreamSynchronize(s) != cudaSuccess) goto out;
  for (int i = 0; i < o->iters; i++)
    if (cudaEventElapsedTime(&ms[i], ev[2 * i], ev[2 * i + 1]) != cudaSuccess) goto out;
  qsort(ms, (size_t)o->iters, sizeof(float), cmp_float);
  result = ms[o->iters / 2] * 1e-3;
out:
  free(ms);
  return result;
}

static void usage(void) {
  fprintf(stderr,
          "usage: bagua-bench kernel [memcpy|reduce|reduce_n|quantize|dequantize|dequantize_add|"
          "axpy|scale|sgd|adam|all] --device cuda\n"
          "       [--bytes SIZE (256M)] [--iters N (20)] [--dtype f32|f16|bf16 (f32)]\n"
          "       [--op sum (reduce*)] [--srcs N (4, reduce_n)] [--chunks N (8, quantize)]\n"
          "       [--gpu ID (0)]\n");
}

/* Fills n f32 values in [-0.5, 0.5) (or their f16/bf16 roundings) on the host, then copies. */
/* Fills n elements with values in [-0.5, 0.5) (small integers for the integer dtypes) on the
 * host, then copies them to the device. */
static int fill_device(void *dst, size_t n, bagua_dtype_t dt, unsigned seed) {
  size_t es = bagua_dtype_size(dt);
  unsigned char *h = malloc(n * es);
  if (!h) return -1;
  uint32_t s = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; i++) {
    s = s * 1664525u + 1013904223u;
    float f = (float)(s >> 8) * (1.0f / 16777216.0f) - 0.5f;
    double d = f;
    uint16_t v;
    int32_t i32 = (int32_t)(s >> 24) - 128;
    int64_t i64 = i32;
    switch (dt) {
      case BAGUA_F32:
        memcpy(h + 4 * i, &f, 4);
        break;
      case BAGUA_F16:
      case BAGUA_BF16:
        v = dt == BAGUA_F16 ? bagua__f32_to_f16(f) : bagua__f32_to_bf16(f);
        memcpy(h + 2 * i, &v, 2);
        break;
      case BAGUA_F64:
        memcpy(h + 8 * i, &d, 8);
        break;
      case BAGUA_I32:
        memcpy(h + 4 * i, &i32, 4);
        break;
      case BAGUA_I64:
        memcpy(h + 8 * i, &i64, 8);
        break;
      default:
        h[i] = (unsigned char)(s >> 24);
        break;
    }
  }
  cudaError_t e = cudaMemcpy(dst, h, n * es, cudaMemcpyHostToDevice);
  free(h);
  return e == cudaSuccess ? 0 : -1;
}

static int parse(int argc, char **argv, opts_t *o, const char **name) {
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
    if (arg[0] != '-') {
      *name = arg;
      continue;
    }
    if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) return 1;
    if (!val) return -1;
    i++;
    if (strcmp(arg, "--device") == 0) {
      if (strcmp(val, "cuda") != 0) {
        fprintf(stderr, "kernel: this entry point only runs --device cuda\n");
        return -1;
      }
    } else if (strcmp(arg, "--bytes") == 0) {
      if (parse_size(val, &o->bytes) != 0) return -1;
    } else if (strcmp(arg, "--iters") == 0) {
      o->iters = atoi(val) < 1 ? 1 : atoi(val);
    } else if (strcmp(arg, "--dtype") == 0) {
      int dt = bagua_dtype_parse(val);
      if (dt < 0) return -1;
      o->dt = (bagua_dtype_t)dt;
    } else if (strcmp(arg, "--op") == 0) {
      int op = bagua_op_parse(val);
      if (op < 0) return -1;
      o->op = (bagua_op_t)op;
    } else if (strcmp(arg, "--srcs") == 0) {
      o->srcs = atoi(val);
      if (o->srcs < 1 || o->srcs > 4) return -1;
    } else if (strcmp(arg, "--chunks") == 0) {
      o->chunks = (size_t)atol(val) < 1 ? 1 : (size_t)atol(val);
    } else if (strcmp(arg, "--gpu") == 0) {
      o->gpu = atoi(val);
    } else {
      fprintf(stderr, "kernel: unknown option '%s'\n", arg);
      return -1;
    }
  }
  return 0;
}

static int is_float_quant(bagua_dtype_t dt) {
  return dt == BAGUA_F32 || dt == BAGUA_F16 || dt == BAGUA_BF16;
}

static int alloc_fill(bufs_t *b, const opts_t *o) {
  size_t es = bagua_dtype_size(o->dt);
  b->xbytes = o->bytes > MEMCPY_REF_BYTES ? o->bytes : MEMCPY_REF_BYTES;
  b->qbytes = is_float_quant(o->dt)
                  ? bagua__minmax_u8_compressed_size(b->n / o->chunks, o->dt) * o->chunks
                  : 64;
  for (int i = 0; i < 5; i++) CK(cudaMalloc(&b->x[i], b->xbytes));
  CK(cudaMalloc(&b->q, b->qbytes));
  CK(cudaMalloc((void **)&b->p, b->n * 4 + 4));
  CK(cudaMalloc((void **)&b->m, b->n * 4 + 4));
  CK(cudaMalloc((void **)&b->v, b->n * 4 + 4));
  /* Small finite values everywhere, so no kernel meets NaN/inf slow paths. */
  for (int i = 0; i < 5; i++)
    if (fill_device(b->x[i], b->xbytes / es, o->dt, (unsigned)i + 1) != 0) return -1;
  if (fill_device(b->p, b->n, BAGUA_F32, 7) != 0 || fill_device(b->m, b->n, BAGUA_F32, 8) != 0)
    return -1;
  /* Adam's second moment must be >= 0: bytes 0x38 make the f32 value 4.4e-5. */
  CK(cudaMemset(b->v, 0x38, b->n * 4));
  CK(cudaMemset(b->q, 0, b->qbytes));
  return 0;
}

static void free_bufs(bufs_t *b) {
  for (int i = 0; i < 5; i++) cudaFree(b->x[i]);
  cudaFree(b->q);
  cudaFree(b->p);
  cudaFree(b->m);
  cudaFree(b->v);
}

int bagua__bench_kernel_cuda_main(int argc, char **argv) {
  opts_t o = {(size_t)256 << 20, 20, 4, 0, 8, BAGUA_F32, BAGUA_SUM};
  const char *name = "all", *why = "";
  int rc = parse(argc, argv, &o, &name);
  if (rc != 0) {
    usage();
    return rc > 0 ? 0 : 2;
  }
  static const char *const all[] = {
      "reduce", "reduce_n", "quantize", "dequantize", "dequantize_add",
      "axpy",   "scale",    "sgd",      "adam"};
  size_t n_names = sizeof(all) / sizeof(all[0]);
  const char *const *names = all;
  if (strcmp(name, "all") != 0) {
    names = &name;
    n_names = 1;
  }
  bufs_t b;
  memset(&b, 0, sizeof(b));
  int known = strcmp(name, "memcpy") == 0;
  for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) known |= strcmp(name, all[i]) == 0;
  if (n_names == 1 && !known) {
    fprintf(stderr, "kernel --device cuda: unknown kernel '%s'\n", name);
    usage();
    return 2;
  }
  if (n_names == 1 && !is_float_quant(o.dt) && strncmp(name, "reduce", 6) != 0) {
    fprintf(stderr, "kernel --device cuda: %s takes --dtype f32, f16 or bf16\n", name);
    return 2;
  }
  int ndev = bagua__cuda_device_count(&why);
  if (ndev == 0) {
    fprintf(stderr, "kernel --device cuda: no CUDA device (%s)\n", why);
    return 1;
  }
  if (o.gpu < 0 || o.gpu >= ndev || cudaSetDevice(o.gpu) != cudaSuccess) {
    fprintf(stderr, "kernel --device cuda: --gpu %d is not one of the %d devices\n", o.gpu, ndev);
    return 2;
  }
  size_t es = bagua_dtype_size(o.dt);
  b.n = o.bytes / es;
  if (b.n == 0) b.n = 1;
  if (o.chunks > b.n) o.chunks = b.n;
  cudaStream_t s = NULL;
  cudaEvent_t *ev = calloc(2 * (size_t)o.iters, sizeof(cudaEvent_t));
  rc = 1;
  if (!ev || cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) goto out;
  if (alloc_fill(&b, &o) != 0) {
    fprintf(stderr, "kernel --device cuda: cannot allocate or fill the buffers (8 x %zu bytes)\n",
            b.xbytes);
    goto out;
  }
  for (int i = 0; i < 2 * o.iters; i++)
    if (cudaEventCreate(&ev[i]) != cudaSuccess) goto out;
  if (is_float_quant(o.dt) &&
      bagua__cuda_minmax_u8_compress(o.dt, b.x[1], b.n / o.chunks, o.chunks, b.q, s) != BAGUA_OK)
    goto out;

  struct cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, o.gpu) != cudaSuccess) goto out;
  /* The reference copy is always 256 MiB, so the ratio means the same at every --bytes. */
  opts_t ref = o;
  ref.bytes = MEMCPY_REF_BYTES;
  double t_copy = bench_one("memcpy", &ref, &b, s, ev);
  if (t_copy <= 0) goto out;
  double copy_traffic = 2.0 * MEMCPY_REF_BYTES / t_copy * 1e-9;
  printf(
      "kernel bench (cuda): %s, dtype=%s bytes=%zu (%.1f MiB per array) chunks=%zu "
      "iters=%d (median)\n",
      prop.name, bagua_dtype_name(o.dt), o.bytes, (double)o.bytes / (1 << 20), o.chunks, o.iters);
  printf("cudaMemcpy D2D 256 MiB: %.3f ms, %.1f GB/s copied, %.1f GB/s traffic (read + write)\n",
         t_copy * 1e3, MEMCPY_REF_BYTES / t_copy * 1e-9, copy_traffic);
  printf("%-18s %9s %10s %12s %14s\n", "kernel", "ms", "data GB/s", "traffic GB/s",
         "traffic/memcpy");
  for (size_t i = 0; i < n_names; i++) {
    if (!is_float_quant(o.dt) && strncmp(names[i], "reduce", 6) != 0) continue;
    double t = bench_one(names[i], &o, &b, s, ev);
    if (t <= 0) goto out;
    double gbs = (double)o.bytes / t * 1e-9, traffic = traffic_bytes(names[i], &o, &b) / t * 1e-9;
    char label[64];
    if (strcmp(names[i], "reduce_n") == 0)
      snprintf(label, sizeof(label), "reduce_n x%d %s", o.srcs, bagua_op_name(o.op));
    else if (strcmp(names[i], "reduce") == 0)
      snprintf(label, sizeof(label), "reduce %s", bagua_op_name(o.op));
    else
      snprintf(label, sizeof(label), "%s", names[i]);
    printf("%-18s %9.3f %10.1f %12.1f %14.2f\n", label, t * 1e3, gbs, traffic,
           traffic / copy_traffic);
  }
  rc = 0;
out:
  if (ev)
    for (int i = 0; i < 2 * o.iters; i++)
      if (ev[i]) cudaEventDestroy(ev[i]);
  free(ev);
  free_bufs(&b);
  if (s) cudaStreamDestroy(s);
  return rc;
}
