/*
 * The agent's user-facing lines ("bagua-agent[<node>]: ...", one write each) and how it
 * writes times. Every control file reports through these, so they stand apart from the
 * command line and the loop.
 */
#include <stdarg.h>
#include <stdio.h>

#include "agent.h"
#include "common/output.h"
#include "common/time.h"

static char g_tool[BAGUA_AGENT_ID_MAX + 16] = "bagua-agent[?]";

void bagua__agent_set_name(const char *node) {
  snprintf(g_tool, sizeof(g_tool), "bagua-agent[%.*s]", BAGUA_AGENT_ID_MAX - 1, node);
}

void bagua__agent_say(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  bagua__vsay(g_tool, fmt, ap);
  va_end(ap);
}

void bagua__agent_format_time(int64_t wall_ms, char *out, size_t len) {
  bagua__format_wall_ms(wall_ms, out, len);
}
