/*
 * Internal access to the BAGUA_* parameter registry (common/params.def).
 *
 * Values are read from the environment once, on first access, and cached. A value that does
 * not parse or is out of bounds is never silently replaced: bagua__params_check() reports the
 * first bad one (name, value, what is accepted) and callers that create communicators or
 * start jobs refuse to proceed.
 *
 * Words (parameters with a list of accepted values) follow common/validate.h's one rule: any
 * ASCII case is accepted, and every reader (bagua__param_str(), bagua_param_get(),
 * bagua_params_print()) sees the list's canonical spelling, so that BAGUA_ELASTIC_MODE=Restart
 * means "restart" to the library, the launcher and the agent alike.
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
/* The string is valid until the next bagua__params_reload(). */
const char *bagua__param_str(bagua__param_id_t id);
/* The registry's description of a parameter, so that no caller writes its bounds or default
 * again: the variable's name, and for INT parameters the inclusive bounds and the default. */
const char *bagua__param_env_name(bagua__param_id_t id);
void bagua__param_bounds(bagua__param_id_t id, int64_t *lo, int64_t *hi);
int64_t bagua__param_int_default(bagua__param_id_t id);
/* More of the description, for code that walks the registry (ids run from 0 to
 * BAGUA_P__COUNT - 1): whether the parameter is INT, the default of a STR parameter, and its
 * accepted words ("a|b|c", or "" for any string; "" for INT parameters). */
int bagua__param_is_int(bagua__param_id_t id);
const char *bagua__param_str_default(bagua__param_id_t id);
const char *bagua__param_choices(bagua__param_id_t id);
/* The id of the parameter whose variable is `env_name`, or -1 when the registry has none. */
int bagua__param_find(const char *env_name);
/* Whether parameter `id` (or the registry parameter whose variable is `env_name`) holds a
 * secret (BAGUA_PARAM_SECRET in params.def): its value goes on no command line and is never
 * printed. 0 for a name the registry does not have. */
int bagua__param_is_secret(bagua__param_id_t id);
int bagua__param_name_is_secret(const char *env_name);
/* Validates `value` for parameter `id` as if the environment held it (the same rules and
 * message as bagua__params_check()); on success *out holds the parsed integer (INT only). */
bagua_status_t bagua__param_parse(bagua__param_id_t id, const char *value, int64_t *out, char *err,
                                  size_t errlen);
/*
 * Checks a value that was not read from the environment, such as a config struct field named
 * `what` ("config.timeout_ms"), against the bounds of INT parameter `id`, so that the field
 * and its variable accept the same values. BAGUA_OK, or BAGUA_ERR_INVALID_ARG with "<what>
 * <value> is out of range; accepted: an integer in [lo, hi] (the bounds of <VARIABLE>)" in
 * `err`.
 */
bagua_status_t bagua__param_check_int(bagua__param_id_t id, const char *what, int64_t value,
                                      char *err, size_t errlen);
/* True when the environment set the parameter (as opposed to the built-in default). */
int bagua__param_is_set(bagua__param_id_t id);
/* 1 with the message of the first variable whose value is refused (its name, what it holds and
 * what is accepted) in `err`, 0 when every set variable is good. */
int bagua__params_first_bad(char *err, size_t errlen);
/* Re-reads the environment into the registry alone; bagua__params_reload() also reloads what
 * depends on it. Not thread-safe. */
void bagua__params_load_again(void);

/* params_check.c, above both the registry and the log (which reads its level here): */
/* BAGUA_OK, or BAGUA_ERR_INVALID_ARG with a warning naming the first bad variable. */
bagua_status_t bagua__params_check(void);
/* Re-read the environment (tests and the launcher change it between uses), and the log's
 * settings with it. Not thread-safe. */
void bagua__params_reload(void);

#endif
