/*
 * Bagua-C public view of the parameter registry: listing and validating BAGUA_* settings.
 */
#ifndef BAGUA_PARAMS_H
#define BAGUA_PARAMS_H

#include <stddef.h>
#include <stdio.h>

#include "bagua/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Print the registry (name, type, default, accepted values, current value, help) to `out`. */
BAGUA_EXTERN void bagua_params_print(FILE *out);

/*
 * Check `value` against the registry entry for environment variable `name`.
 * Returns BAGUA_OK, or BAGUA_ERR_INVALID_ARG with a sentence in `err` (caller's buffer of
 * `errlen` bytes) saying what is accepted. An unknown name is also BAGUA_ERR_INVALID_ARG.
 */
BAGUA_EXTERN bagua_status_t bagua_param_validate(const char *name, const char *value, char *err,
                                                 size_t errlen);

/*
 * Current value of registry parameter `name` as the environment set it, or NULL when the
 * environment does not set it (or set it to an invalid value). A parameter whose value is one
 * of a list of words gives the word's canonical spelling ("Restart" reads as "restart"), a
 * string owned by the library; any other value is the environment's own string. Copy it if the
 * environment may change.
 */
BAGUA_EXTERN const char *bagua_param_get(const char *name);

#ifdef __cplusplus
}
#endif
#endif
