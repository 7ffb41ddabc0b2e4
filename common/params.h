/*
 * Internal access to the BAGUA_* parameter registry (common/params.def).
 *
 * Values are read from the environment once, on first access, and cached. A value that does
 * not parse or is out of bounds is never silently replaced: bagua__params_check() reports the
 * first bad one (name, value, what is accepted) and callers that create communicators or
 * start jobs refuse to proceed.
 */
#ifndef BAGUA_COMMON_PARAMS_H
#define BAGUA_COMMON_PARAMS_H

#include <stdint.h>
#include <stdio.h>

#include "bagua/error.h"

typedef enum {
#define BAGUA_PARAM(id, env, type, def, lo, hi, help) BAGUA_P_##id,
#include "params.def"
#undef BAGUA_PARAM
  BAGUA_P__COUNT
} bagua__param_id_t;

int64_t bagua__param_int(bagua__param_id_t id);
const char *bagua__param_str(bagua__param_id_t id);
/* True when the environment set the parameter (as opposed to the built-in default). */
int bagua__param_is_set(bagua__param_id_t id);
/* BAGUA_OK, or BAGUA_ERR_INVALID_ARG with a warning naming the first bad variable. */
bagua_status_t bagua__params_check(void);
/* Re-read the environment (tests and the launcher change it between uses). Not thread-safe. */
void bagua__params_reload(void);

#endif
