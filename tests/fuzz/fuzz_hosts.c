/*
 * The launcher's host lists (launcher/hosts.c): --hosts text and --hostfile files. The first
 * input byte picks the parser so one corpus covers both; a hostfile is handed over as a
 * memfd, the way a real file would be read.
 */
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz.h"
#include "launch.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  fuzz_quiet_log();
  return 0;
}

/* Every accepted entry satisfies what the ssh fan-out relies on. */
static void check_hosts(const bagua__launch_layer_t *l) {
  for (int i = 0; i < l->nhosts; i++) {
    const char *n = l->hosts[i].name;
    FUZZ_ASSERT(n && n[0] && n[0] != '-');
    FUZZ_ASSERT(strcspn(n, " \t\n,:#") == strlen(n));
    FUZZ_ASSERT(l->hosts[i].nproc >= 0 && l->hosts[i].nproc <= LAUNCH_MAX_NPROC);
  }
}

static void parse_file(const uint8_t *data, size_t size, bagua__launch_layer_t *l) {
  int fd = memfd_create("hostfile", 0);
  if (fd < 0) abort();
  if (size && write(fd, data, size) != (ssize_t)size) abort();
  char path[64], err[LAUNCH_ERR_LEN];
  snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
  int rc = bagua__launch_read_hostfile(path, l, err, sizeof(err));
  FUZZ_ASSERT(rc == 0 || rc == -1);
  if (rc != 0) FUZZ_ASSERT(l->nhosts == 0 && err[0]);
  close(fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0) return 0;
  bagua__launch_layer_t l;
  memset(&l, 0, sizeof(l));
  if (data[0] & 1) {
    parse_file(data + 1, size - 1, &l);
  } else {
    char *text = fuzz_strndup(data + 1, size - 1);
    char err[LAUNCH_ERR_LEN];
    int rc = bagua__launch_parse_hosts(text, &l, err, sizeof(err));
    FUZZ_ASSERT(rc == 0 || rc == -1);
    if (rc != 0) FUZZ_ASSERT(l.nhosts == 0 && err[0]);
    free(text);
  }
  check_hosts(&l);
  bagua__launch_layer_free(&l);
  return 0;
}
