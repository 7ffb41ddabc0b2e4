/*
 * The CUDA side of the Fashion-MNIST example, as seen from C: device selection and the error
 * convention shared by mlp_cuda.h and data_cuda.h. None of these headers includes a CUDA
 * header (streams are passed as void *), so the C files of the example compile the same way
 * whether or not the toolkit is installed.
 *
 * Errors. Every function that can fail returns 0 on success and FM_CUDA_FAILED when a CUDA or
 * cuBLAS call failed, after writing a sentence that names the call and quotes the runtime's
 * error text into a thread-local buffer that fm_cuda_error() returns. Nothing here exits the
 * process: the training loop decides what a failure means. Work is enqueued asynchronously, so
 * a failure of a kernel may only be reported by a later call that synchronises.
 */
#ifndef FM_CUDA_H
#define FM_CUDA_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FM_CUDA_FAILED (-1)

/*
 * Chooses this rank's GPU, local_rank modulo the number of visible devices (what the
 * data-parallel layer's cuda_device = -1 would choose), and makes it current for the calling
 * thread. Returns 0 with *device set, or FM_CUDA_FAILED when no device is usable (no driver, no
 * GPU, a device that cannot be initialised); fm_cuda_error() then says why.
 */
int fm_cuda_select_device(int local_rank, int *device);

/* Writes the current device's name ("NVIDIA H100 80GB HBM3") into name; "?" on failure. */
void fm_cuda_device_name(char *name, size_t len);

/* Blocks until everything enqueued on `stream` (a cudaStream_t) has run. */
int fm_cuda_stream_sync(void *stream);

/* Text of the last failure on this thread ("" if none). Valid until the next failure. */
const char *fm_cuda_error(void);

#ifdef __cplusplus
}
#endif
#endif
