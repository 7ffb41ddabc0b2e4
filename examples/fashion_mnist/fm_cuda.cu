/*
 * Device selection and error reporting for the example's CUDA code (see fm_cuda.h).
 */
#include <stdio.h>
#include <string.h>

#include "fm_cuda_check.cuh"

/* One buffer per thread, like bagua_last_error(): the training thread is the only one that
 * calls into this code, but a per-thread buffer costs nothing and cannot be clobbered by
 * another thread. */
static thread_local char last_error[512];

int fm_cuda_fail(const char *call, const char *text, const char *file, int line) {
  const char *base = strrchr(file, '/');
  snprintf(last_error, sizeof(last_error), "%s failed: %s (%s:%d)", call, text,
           base ? base + 1 : file, line);
  return FM_CUDA_FAILED;
}

const char *fm_cuda_error(void) {
  return last_error;
}

int fm_cuda_select_device(int local_rank, int *device) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  /* The message is meant to follow "no CUDA device: ", so it is the runtime's text alone. */
  if (e != cudaSuccess) {
    snprintf(last_error, sizeof(last_error), "%s", cudaGetErrorString(e));
    return FM_CUDA_FAILED;
  }
  if (count < 1) {
    snprintf(last_error, sizeof(last_error), "cudaGetDeviceCount found no device");
    return FM_CUDA_FAILED;
  }
  *device = (local_rank > 0 ? local_rank : 0) % count;
  FM_CUDA_CHECK(cudaSetDevice(*device));
  /* cudaSetDevice does not create the context; this does, so a device that cannot be used
   * (out of memory, exclusive-process mode taken, a broken driver) fails here, before the
   * rank joins any collective, rather than in the middle of setting up the model. */
  FM_CUDA_CHECK(cudaFree(0));
  return 0;
}

void fm_cuda_device_name(char *name, size_t len) {
  int dev;
  cudaDeviceProp prop;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&prop, dev) != cudaSuccess)
    snprintf(name, len, "?");
  else
    snprintf(name, len, "%s", prop.name);
}

int fm_cuda_stream_sync(void *stream) {
  FM_CUDA_CHECK(cudaStreamSynchronize((cudaStream_t)stream));
  return 0;
}
