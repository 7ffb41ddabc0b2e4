/*
 * The GPU device of the data-parallel layer in a build without CUDA and NCCL: there is none,
 * and bagua_ddp_create() says so when config.device asks for "cuda" (config.c).
 */
#include "dev.h"

const bagua__ddp_dev_t *bagua__ddp_dev_cuda(void) {
  return NULL;
}
