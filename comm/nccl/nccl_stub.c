/*
 * The NCCL communicator API in a build without CUDA and NCCL: every entry point exists, so
 * programs link against either build, and creation explains why it cannot work.
 */
#include "bagua/nccl.h"
#include "common/log.h"
#include "nccl_settings.h"

int bagua_nccl_available(void) {
  return 0;
}

bagua_status_t bagua_nccl_comm_create(bagua_comm_t *cpu_comm, int cuda_device,
                                      bagua_nccl_comm_t **out) {
  if (out) *out = NULL;
  BAGUA_WARN(
      "bagua_nccl_comm_create: this libbagua was built without CUDA and NCCL "
      "(configure with BAGUA_WITH_CUDA=ON on a machine with the CUDA toolkit and NCCL)");
  return BAGUA_ERR_NOT_SUPPORTED;
}

int bagua_nccl_comm_rank(const bagua_nccl_comm_t *comm) {
  return -1;
}
int bagua_nccl_comm_size(const bagua_nccl_comm_t *comm) {
  return -1;
}
int bagua_nccl_comm_device(const bagua_nccl_comm_t *comm) {
  return -1;
}
int bagua__nccl_comm_timeout_ms(const bagua_nccl_comm_t *comm) {
  return 0;
}
void *bagua_nccl_comm_stream(const bagua_nccl_comm_t *comm) {
  return NULL;
}
uint64_t bagua_nccl_comm_bytes_sent(const bagua_nccl_comm_t *comm) {
  return 0;
}

/* No communicator can exist in this build, so every operation on one is unsupported. */
bagua_status_t bagua_nccl_allreduce(bagua_nccl_comm_t *comm, const void *sendbuf, void *recvbuf,
                                    size_t count, bagua_dtype_t dtype, bagua_op_t op) {
  return BAGUA_ERR_NOT_SUPPORTED;
}
bagua_status_t bagua_nccl_reduce_scatter(bagua_nccl_comm_t *comm, const void *sendbuf,
                                         void *recvbuf, size_t recvcount, bagua_dtype_t dtype,
                                         bagua_op_t op) {
  return BAGUA_ERR_NOT_SUPPORTED;
}
bagua_status_t bagua_nccl_allgather(bagua_nccl_comm_t *comm, const void *sendbuf, void *recvbuf,
                                    size_t sendcount, bagua_dtype_t dtype) {
  return BAGUA_ERR_NOT_SUPPORTED;
}
bagua_status_t bagua_nccl_broadcast(bagua_nccl_comm_t *comm, const void *sendbuf, void *recvbuf,
                                    size_t count, bagua_dtype_t dtype, int root) {
  return BAGUA_ERR_NOT_SUPPORTED;
}
bagua_status_t bagua_nccl_reduce(bagua_nccl_comm_t *comm, const void *sendbuf, void *recvbuf,
                                 size_t count, bagua_dtype_t dtype, bagua_op_t op, int root) {
  return BAGUA_ERR_NOT_SUPPORTED;
}
bagua_status_t bagua_nccl_alltoall(bagua_nccl_comm_t *comm, const void *sendbuf, void *recvbuf,
                                   size_t count, bagua_dtype_t dtype) {
  return BAGUA_ERR_NOT_SUPPORTED;
}
bagua_status_t bagua_nccl_send(bagua_nccl_comm_t *comm, const void *buf, size_t count,
                               bagua_dtype_t dtype, int peer) {
  return BAGUA_ERR_NOT_SUPPORTED;
}
bagua_status_t bagua_nccl_recv(bagua_nccl_comm_t *comm, void *buf, size_t count,
                               bagua_dtype_t dtype, int peer) {
  return BAGUA_ERR_NOT_SUPPORTED;
}
bagua_status_t bagua_nccl_sendrecv(bagua_nccl_comm_t *comm, const void *sendbuf, size_t sendcount,
                                   int dst, void *recvbuf, size_t recvcount, int src,
                                   bagua_dtype_t dtype) {
  return BAGUA_ERR_NOT_SUPPORTED;
}
bagua_status_t bagua_nccl_group_p2p(bagua_nccl_comm_t *comm, const bagua_nccl_p2p_t *ops, int n) {
  return BAGUA_ERR_NOT_SUPPORTED;
}
bagua_status_t bagua_nccl_wait_event(bagua_nccl_comm_t *comm, void *cuda_event) {
  return BAGUA_ERR_NOT_SUPPORTED;
}
bagua_status_t bagua_nccl_record_event(bagua_nccl_comm_t *comm, void *cuda_event) {
  return BAGUA_ERR_NOT_SUPPORTED;
}
bagua_status_t bagua_nccl_comm_query(bagua_nccl_comm_t *comm) {
  return BAGUA_ERR_NOT_SUPPORTED;
}
bagua_status_t bagua_nccl_comm_synchronize(bagua_nccl_comm_t *comm) {
  return BAGUA_ERR_NOT_SUPPORTED;
}
void bagua_nccl_comm_abort(bagua_nccl_comm_t *comm) {}
bagua_status_t bagua_nccl_comm_get_async_error(bagua_nccl_comm_t *comm) {
  return BAGUA_ERR_NOT_SUPPORTED;
}
void bagua_nccl_comm_destroy(bagua_nccl_comm_t *comm) {}
