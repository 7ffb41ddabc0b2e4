/*
 * The flags bagua-launch and bagua-agent share (common/flags.def). Pure lookups over a
 * constant table: thread-safe, no allocation.
 */
#ifndef BAGUA_COMMON_FLAGS_H
#define BAGUA_COMMON_FLAGS_H

#include "common/params.h"

typedef enum {
#define BAGUA_FLAG(id, flag, metavar, param, how, help) BAGUA__FLAG_##id,
#include "common/flags.def"
#undef BAGUA_FLAG
  BAGUA__FLAG_COUNT
} bagua__flag_t;

typedef enum { BAGUA__FLAG_PASSED, BAGUA__FLAG_LAUNCHER } bagua__flag_how_t;

typedef struct {
  const char *flag;    /* "--name" */
  const char *metavar; /* the value's name in usage texts */
  bagua__param_id_t param;
  bagua__flag_how_t how;
  const char *help;
} bagua__flag_desc_t;

const bagua__flag_desc_t *bagua__flag(bagua__flag_t f);
/* The row whose spelling is `flag`, or -1. */
int bagua__flag_find(const char *flag);
#endif
