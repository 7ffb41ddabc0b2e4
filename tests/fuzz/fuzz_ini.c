/*
 * The launcher's INI layer (launcher/config_ini.c): any byte string is either accepted or
 * refused with a message that names the file, and the parsed layer frees cleanly.
 */
#include "fuzz.h"
#include "launch.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  fuzz_quiet_log();
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* Real files are read into a buffer of exactly their size, not NUL-terminated. */
  char *text = malloc(size ? size : 1);
  if (!text) abort();
  if (size) memcpy(text, data, size);
  bagua__launch_layer_t l;
  memset(&l, 0, sizeof(l));
  char err[LAUNCH_ERR_LEN];
  int rc = bagua__launch_read_ini_text("fuzz.ini", text, size, &l, err, sizeof(err));
  FUZZ_ASSERT(rc == 0 || rc == LAUNCH_EXIT_USAGE);
  /* A refusal always says where: "fuzz.ini:LINE: ..." or "fuzz.ini: ...". */
  if (rc != 0) FUZZ_ASSERT(strncmp(err, "fuzz.ini:", 9) == 0);
  for (int i = 0; i < l.nhosts; i++) FUZZ_ASSERT(l.hosts[i].name && l.hosts[i].name[0] != '-');
  bagua__launch_layer_free(&l);
  free(text);
  return 0;
}
