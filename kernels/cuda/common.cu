/*
 * Host-side helpers shared by the CUDA kernels: launch checks, CUDA error mapping, grid sizing
 * and the device count used by the tests and the benchmark.
 */
#include "common.cuh"

bagua_status_t bagua__cuda_status(cudaError_t e, const char *what) {
  if (e == cudaSuccess) return BAGUA_OK;
  BAGUA_WARN("%s failed: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
  return BAGUA_ERR_CUDA;
}

/*
 * cudaGetLastError also returns (and clears) an error left by an earlier asynchronous fault on
 * this thread's device, which then surfaces here rather than being lost; the warning says so.
 */
bagua_status_t bagua__cuda_check_launch(const char *what) {
  cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return BAGUA_OK;
  BAGUA_WARN("CUDA kernel %s: launch failed (or an earlier kernel faulted): %s (%s)", what,
             cudaGetErrorString(e), cudaGetErrorName(e));
  return BAGUA_ERR_CUDA;
}

unsigned bagua__cuda_blocks(size_t items, unsigned block, unsigned cap) {
  size_t b = (items + block - 1) / block;
  if (b > cap) b = cap;
  return b == 0 ? 1u : (unsigned)b;
}

extern "C" int bagua__cuda_device_count(const char **why) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    /* Clear the error so it does not surface at an unrelated later call. */
    (void)cudaGetLastError();
    if (why) *why = cudaGetErrorString(e);
    return 0;
  }
  if (n <= 0 && why) *why = "cudaGetDeviceCount reports 0 devices";
  return n > 0 ? n : 0;
}
