/*
 * The flags bagua-launch shares with bagua-agent (common/flags.def): every row the launcher
 * passes on is one of its settings, and its settings show the row's spelling, help and
 * variable, so the two tools' flags cannot drift apart.
 */
#include <stdio.h>
#include <string.h>

#include "common/flags.h"
#include "launch.h"
#include "test.h"

int main(void) {
  for (int f = 0; f < BAGUA__FLAG_COUNT; f++) {
    const bagua__flag_desc_t *row = bagua__flag((bagua__flag_t)f);
    int s = bagua__launch_find_shared((bagua__flag_t)f);
    if (s < 0) TEST_FAIL("bagua-launch has no setting for %s", row->flag);
    const bagua__launch_desc_t *d = bagua__launch_desc((bagua__launch_setting_t)s);
    ASSERT_STREQ(d->flag, row->flag);
    ASSERT_STREQ(d->help, row->help);
    ASSERT_STREQ(d->metavar, row->metavar);
    /* The variable is the row's registry parameter, unless the launcher deliberately does not
     * read it (its environment's is a worker's). */
    if (d->env) ASSERT_STREQ(d->env, bagua__param_env_name(row->param));
    ASSERT_EQ(bagua__flag_find(row->flag), f);
  }
  ASSERT_EQ(bagua__flag_find("--no-such-flag"), -1);
  printf("PASS launch_flags_shared (%d shared flags)\n", (int)BAGUA__FLAG_COUNT);
  return 0;
}
