/*
 * Asks the installed NCCL (libnccl.so.2, found with dlopen so the build needs no NCCL) to
 * create a one-rank communicator, which is when NCCL loads its network plugins. Run by
 * nccl_loader.sh with NCCL_NET_PLUGIN and NCCL_DEBUG=INFO set; the script reads the log.
 * Exit status: 0 when ncclCommInitRank succeeded, 1 when it failed, 77 without libnccl.
 */
#include <dlfcn.h>
#include <stdio.h>

typedef struct {
  char bytes[128]; /* ncclUniqueId is 128 opaque bytes */
} unique_id_t;

int main(void) {
  void *h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    printf("nccl_probe: no libnccl.so.2: %s\n", dlerror());
    return 77;
  }
  int (*get_version)(int *) = (int (*)(int *))dlsym(h, "ncclGetVersion");
  int (*get_id)(unique_id_t *) = (int (*)(unique_id_t *))dlsym(h, "ncclGetUniqueId");
  int (*init_rank)(void **, int, unique_id_t, int) =
      (int (*)(void **, int, unique_id_t, int))dlsym(h, "ncclCommInitRank");
  int (*destroy)(void *) = (int (*)(void *))dlsym(h, "ncclCommDestroy");
  if (!get_version || !get_id || !init_rank || !destroy) {
    printf("nccl_probe: libnccl.so.2 lacks the expected API\n");
    return 1;
  }
  int v = 0;
  get_version(&v);
  printf("nccl_probe: NCCL version code %d\n", v);
  unique_id_t id;
  int rc = get_id(&id);
  printf("nccl_probe: ncclGetUniqueId = %d\n", rc);
  if (rc != 0) return 1;
  void *comm = NULL;
  rc = init_rank(&comm, 1, id, 0);
  printf("nccl_probe: ncclCommInitRank = %d\n", rc);
  if (rc != 0) return 1;
  destroy(comm);
  return 0;
}
