/*
 * A libbagua worker for the agent tests: bagua_comm_create(NULL) with nothing but what
 * bagua-agent put in the environment (etcd:// bootstrap, round, job and node ids), one
 * allreduce, checked, and a line saying how the communicator came out.
 */
#include <inttypes.h>
#include <stdio.h>

#include "bagua/bagua.h"

int main(void) {
  bagua_comm_t *c = NULL;
  bagua_status_t st = bagua_comm_create(NULL, &c);
  if (st != BAGUA_OK) {
    fprintf(stderr, "bagua_comm_create: %s: %s\n", bagua_err_name(st), bagua_last_error());
    return 1;
  }
  int rank = bagua_comm_rank(c), size = bagua_comm_size(c);
  int64_t v = rank + 1, sum = 0;
  st = bagua_allreduce(c, &v, &sum, 1, BAGUA_I64, BAGUA_SUM);
  if (st != BAGUA_OK || sum != (int64_t)size * (size + 1) / 2) {
    fprintf(stderr, "allreduce: %s, sum %" PRId64 "\n", bagua_err_name(st), sum);
    return 2;
  }
  printf("bagua allreduce ok: rank %d of %d sum %" PRId64 " nodes %d local %d/%d\n", rank, size,
         sum, bagua_comm_node_count(c), bagua_comm_local_rank(c), bagua_comm_local_size(c));
  bagua_comm_destroy(c);
  return 0;
}
