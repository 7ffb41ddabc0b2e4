/*
 * The resolved settings of an NCCL communicator, for the layers above it that wait on its work
 * themselves (the data-parallel layer's CUDA device, ddp/dev_cuda.c). Not installed; needs no
 * CUDA or NCCL headers, and every build defines it (the stub too).
 *
 * A communicator takes its timeouts from the CPU communicator it was created over, which
 * resolved them once from its config and the BAGUA_* parameters (comm/comm_config.c). Reading
 * BAGUA_COMM_TIMEOUT_MS again elsewhere would ignore a timeout the program set in its config,
 * so code that bounds a wait for NCCL work asks the communicator instead.
 */
#ifndef BAGUA_COMM_NCCL_SETTINGS_H
#define BAGUA_COMM_NCCL_SETTINGS_H

#include "bagua/nccl.h"

/* The bound on waiting for the communicator's enqueued work, in milliseconds (its CPU
 * communicator's timeout); 0 for NULL. */
int bagua__nccl_comm_timeout_ms(const bagua_nccl_comm_t *c);

#endif
