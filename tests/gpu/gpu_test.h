/*
 * Helpers for the GPU tests: the skip rule (exit 77 with "no CUDA device" when none is
 * visible), CUDA error checks that print the call, and device buffers at chosen byte offsets
 * with guard bytes on both sides that a kernel must never touch.
 */
#ifndef BAGUA_TESTS_GPU_TEST_H
#define BAGUA_TESTS_GPU_TEST_H

#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernels/cuda/cuda_kernels.h"
#include "tests/test.h"

#define CUDA_OK(call)                                                                  \
  do {                                                                                 \
    cudaError_t ce_ = (call);                                                          \
    if (ce_ != cudaSuccess)                                                            \
      TEST_FAIL("%s: %s (%s)", #call, cudaGetErrorString(ce_), cudaGetErrorName(ce_)); \
  } while (0)

/* Exits 77 (ctest: skipped) unless a CUDA device is usable; call before any other CUDA call. */
static inline void gpu_require_device(void) {
  const char *why = "";
  if (bagua__cuda_device_count(&why) == 0) TEST_SKIP("no CUDA device (%s)", why);
}

/*
 * The same for a test that forks its ranks: whether a device exists is asked in a child
 * process, because a CUDA context must not exist in the parent when it forks (CUDA does not
 * survive fork) and cudaGetDeviceCount creates the driver state. The child prints the reason.
 */
static inline void gpu_require_device_in_child(void) {
  fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) TEST_FAIL("fork failed");
  if (pid == 0) {
    const char *why = "";
    if (bagua__cuda_device_count(&why) == 0) {
      printf("SKIP: no CUDA device (%s)\n", why);
      fflush(stdout);
      _exit(77);
    }
    _exit(0);
  }
  int status = 0;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) TEST_FAIL("device probe crashed");
  if (WEXITSTATUS(status) == 77) exit(77);
  if (WEXITSTATUS(status) != 0) TEST_FAIL("device probe failed");
}

enum { GPU_GUARD = 64, GPU_GUARD_BYTE = 0xa5 };

/* `bytes` usable bytes starting `off` bytes past a 256-byte aligned allocation. */
typedef struct {
  unsigned char *base, *p;
  size_t bytes, off;
} dbuf_t;

static inline dbuf_t dbuf_new(size_t bytes, size_t off) {
  dbuf_t d;
  d.bytes = bytes;
  d.off = off;
  CUDA_OK(cudaMalloc((void **)&d.base, off + bytes + GPU_GUARD));
  CUDA_OK(cudaMemset(d.base, GPU_GUARD_BYTE, off + bytes + GPU_GUARD));
  d.p = d.base + off;
  return d;
}

static inline void dbuf_put(dbuf_t *d, const void *host) {
  if (d->bytes) CUDA_OK(cudaMemcpy(d->p, host, d->bytes, cudaMemcpyHostToDevice));
}

static inline void dbuf_get(const dbuf_t *d, void *host) {
  if (d->bytes) CUDA_OK(cudaMemcpy(host, d->p, d->bytes, cudaMemcpyDeviceToHost));
}

/* Fails if a byte before or after the usable range changed. Synchronises the device. */
static inline void dbuf_check_guards(const dbuf_t *d, const char *what) {
  size_t total = d->off + d->bytes + GPU_GUARD;
  unsigned char *h = malloc(total);
  if (!h) TEST_FAIL("out of memory");
  CUDA_OK(cudaMemcpy(h, d->base, total, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < d->off; i++)
    if (h[i] != GPU_GUARD_BYTE)
      TEST_FAIL("%s: byte %zu before the buffer written", what, d->off - i);
  for (size_t i = 0; i < GPU_GUARD; i++)
    if (h[d->off + d->bytes + i] != GPU_GUARD_BYTE)
      TEST_FAIL("%s: byte %zu past the end written", what, i);
  free(h);
}

static inline void dbuf_free(dbuf_t *d) {
  cudaFree(d->base);
  d->base = d->p = NULL;
}

/* First differing byte of two host buffers, or (size_t)-1. */
static inline size_t first_diff(const void *a, const void *b, size_t n) {
  const unsigned char *x = a, *y = b;
  for (size_t i = 0; i < n; i++)
    if (x[i] != y[i]) return i;
  return (size_t)-1;
}

#endif
