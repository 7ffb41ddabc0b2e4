/*
 * The registry as the rest of the library uses it: checked with a warning, and reloaded
 * together with the log. These live above params.c and log.c because the log reads its level
 * from the registry: with them in params.c the two files called each other.
 */
#include "log.h"
#include "params.h"

bagua_status_t bagua__params_check(void) {
  char err[256];
  if (!bagua__params_first_bad(err, sizeof(err))) return BAGUA_OK;
  BAGUA_WARN("invalid environment setting: %s", err);
  return BAGUA_ERR_INVALID_ARG;
}

void bagua__params_reload(void) {
  bagua__params_load_again();
  bagua__log_reload();
}
