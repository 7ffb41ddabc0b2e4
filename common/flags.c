/* The shared flags' table (see flags.h). */
#include "common/flags.h"

#include <string.h>

static const bagua__flag_desc_t g_flags[] = {
#define BAGUA_FLAG(id, flag, metavar, param, how, help) \
  {flag, metavar, BAGUA_P_##param, BAGUA__FLAG_##how, help},
#include "common/flags.def"
#undef BAGUA_FLAG
};

_Static_assert(sizeof(g_flags) / sizeof(g_flags[0]) == BAGUA__FLAG_COUNT,
               "one row per bagua__flag_t");

const bagua__flag_desc_t *bagua__flag(bagua__flag_t f) {
  return &g_flags[f];
}

int bagua__flag_find(const char *flag) {
  for (int i = 0; i < BAGUA__FLAG_COUNT; i++)
    if (strcmp(g_flags[i].flag, flag) == 0) return i;
  return -1;
}
